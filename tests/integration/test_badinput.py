#!/usr/bin/python3
"""Bad input: broken configuration (exit 2), a busy port (exit 1), garbage on
the wire, slowloris, and the connection limit. The daemon must never crash."""

import os
import re
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (Daemon, check, contains, eq, pack_daemon, read_http_response,  # noqa: E402
                     recv_until_close, run_main, status_of, stop_ok, test, wait_for)


def one_line(err, what):
    lines = err.strip().splitlines()
    eq(len(lines), 1, "%s: stderr lines (%r)" % (what, err))
    return lines[0]


# ---- configuration ----------------------------------------------------------------


@test
def config_malformed_json():
    d = Daemon()
    cfg = os.path.join(d.tmp, "config.json")
    with open(cfg, "w") as f:
        f.write('{\n  "port": 8080,\n  "host": ,\n}\n')
    d.args += ["--config", cfg]
    rc, out, err = d.run()
    eq(rc, 2, "exit code for a malformed config file")
    line = one_line(err, "malformed config")
    check(cfg + ":3:" in line, "message lacks file:line (%s:3:col): %r", cfg, line)
    check(re.search(re.escape(cfg) + r":3:\d+", line), "message lacks file:line:col: %r", line)


@test
def config_malformed_json_via_env():
    d = Daemon()
    cfg = os.path.join(d.tmp, "env-config.json")
    with open(cfg, "w") as f:
        f.write('{"port": 8080 "host": "x"}')
    d.env["MINICPMD_CONFIG"] = cfg
    rc, out, err = d.run()
    eq(rc, 2, "exit code for a malformed $MINICPMD_CONFIG")
    contains(err, cfg + ":1:", "message")


@test
def config_unknown_key_warns():
    d = Daemon()
    cfg = os.path.join(d.tmp, "config.json")
    with open(cfg, "w") as f:
        f.write('{"log-level": "info", "max_tokenz": 12}')
    d.args += ["--config", cfg]
    d.start()
    log = d.wait_log(r"warn .*max_tokenz", 3).string
    check(d.alive(), "daemon died on an unknown config key")
    eq(d.get("/health").status, 503, "/health")
    stop_ok(d)
    contains(log, "max_tokenz", "warning")


@test
def flm_model_list_malformed_warns():
    """A broken FastFlowLM model_list.json is skipped with a warning that names
    it; the daemon still starts (on the built-in demo pack)."""
    d = Daemon()
    del d.env["MINICPMD_MODEL"]
    flm = os.path.join(d.home, ".config", "flm")
    os.makedirs(flm)
    with open(os.path.join(flm, "model_list.json"), "w") as f:
        f.write('{"models": {"minicpm5": ')
    d.start()
    d.wait_log(r"warn .*model_list\.json", 3)
    d.wait_log(r"demo", 10)
    check(d.alive(), "daemon died on a malformed model_list.json")
    stop_ok(d)


def bad_port(value):
    d = Daemon(["--port", value], port0=False)
    rc, out, err = d.run()
    eq(rc, 2, "exit code for --port %s" % value)
    contains(one_line(err, "--port " + value), "--port", "message")


@test
def bad_port_negative():
    bad_port("-1")


@test
def bad_port_too_large():
    bad_port("70000")


@test
def bad_port_not_a_number():
    bad_port("abc")


@test
def bad_port_in_env():
    d = Daemon(port0=False, env={"MINICPMD_PORT": "99999"})
    rc, out, err = d.run()
    eq(rc, 2, "exit code for MINICPMD_PORT=99999")
    contains(one_line(err, "MINICPMD_PORT"), "MINICPMD_PORT", "message")


@test
def api_key_file_is_directory():
    d = Daemon()
    kd = os.path.join(d.tmp, "keydir")
    os.makedirs(kd)
    d.args += ["--api-key-file", kd]
    rc, out, err = d.run()
    eq(rc, 2, "exit code for --api-key-file DIR")
    line = one_line(err, "--api-key-file DIR")
    contains(line, "api-key-file", "message")
    contains(line, kd, "message")


@test
def api_key_file_missing():
    d = Daemon()
    kf = os.path.join(d.tmp, "no-such-key")
    d.args += ["--api-key-file", kf]
    rc, out, err = d.run()
    eq(rc, 2, "exit code for a missing --api-key-file")
    line = one_line(err, "--api-key-file missing")
    contains(line, kf, "message")
    contains(line.lower(), "no such file", "message")


@test
def api_key_file_empty():
    d = Daemon()
    kf = os.path.join(d.tmp, "empty-key")
    open(kf, "w").close()
    d.args += ["--api-key-file", kf]
    rc, out, err = d.run()
    eq(rc, 2, "exit code for an empty --api-key-file (would mean: no key at all)")
    contains(one_line(err, "empty key file"), kf, "message")


@test
def log_file_in_missing_directory():
    d = Daemon()
    lf = os.path.join(d.tmp, "no-such-dir", "minicpmd.log")
    d.args += ["--log-file", lf]
    rc, out, err = d.run()
    eq(rc, 2, "exit code for --log-file in a missing directory")
    line = one_line(err, "--log-file")
    contains(line, "--log-file", "message")
    contains(line, lf, "message")


@test
def port_already_in_use():
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        d = Daemon(["--port", str(port)], port0=False)
        rc, out, err = d.run()
        eq(rc, 1, "exit code when the port is taken")
        contains(err, "Address already in use", "message")
        contains(err, str(port), "message")
    finally:
        busy.close()


# ---- garbage on the wire -------------------------------------------------------------


def survives(d, payload, want_error=True):
    """Send `payload`. The daemon may answer (then with an HTTP error status),
    close, or wait for more; once we half-close, it must close within 3 s.
    Then /health must still answer."""
    s = d.connect()
    try:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass        # it closed on us mid-send: a close is an answer
        raw, closed = recv_until_close(s, 1.0)
        if not closed and not raw:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            more, closed = recv_until_close(s, 3.0)
            raw += more
            check(closed, "the daemon kept a half-closed connection open for 3 s")
    finally:
        s.close()
    st = status_of(raw)
    if raw:
        check(st is not None, "answer is not HTTP: %r", raw[:300])
        if want_error:
            check(st >= 400, "got %d for garbage: %r", st, raw[:300])
    check(d.alive(), "daemon died (exit %s) after %r", d.proc.returncode, payload[:80])
    eq(d.get("/health").status, 503, "/health after garbage")
    return st, raw


@test
def garbage_binary():
    d = Daemon().start()
    survives(d, b"\x00\xff garbage\r\n\r\n")
    survives(d, b"\xff\xfe\x00\x01 garbage\r\n\r\n")
    survives(d, bytes(range(256)) * 4 + b"\r\n\r\n")
    stop_ok(d)


@test
def garbage_no_http_version():
    d = Daemon().start()
    survives(d, b"GET /health\r\n\r\n")
    stop_ok(d)


@test
def garbage_bad_http_version():
    d = Daemon().start()
    st, raw = survives(d, b"GET /health HTTP/9.9\r\nHost: localhost\r\n\r\n")
    check(raw, "HTTP/9.9 got no answer (505 is expected)")
    stop_ok(d)


@test
def garbage_huge_url():
    d = Daemon().start()
    st, raw = survives(d, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    check(raw, "a 100 KB URL got no answer (414 is expected)")
    stop_ok(d)


@test
def garbage_header_without_colon():
    d = Daemon().start()
    survives(d, b"GET /health HTTP/1.1\r\nHost: localhost\r\nthis header has no colon\r\n\r\n")
    stop_ok(d)


@test
def garbage_many_headers():
    d = Daemon().start()
    # 200 small headers: a legal request; it gets an ordinary answer.
    hdrs = b"".join(b"X-H%d: v%d\r\n" % (i, i) for i in range(200))
    st, raw = survives(d, b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" + hdrs
                       + b"\r\n", want_error=False)
    check(st in (503, 431), "200 small headers: %r", raw[:200])
    # 200 big headers (200 KB): over the per-connection memory, 431 (or a close).
    big = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(200))
    survives(d, b"GET /health HTTP/1.1\r\nHost: localhost\r\n" + big + b"\r\n")
    stop_ok(d)


@test
def garbage_bad_content_length():
    d = Daemon().start()
    for cl in (b"-1", b"abc", b"99999999999999999999999", b"1, 2"):
        survives(d, b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + cl
                 + b"\r\n\r\n{}")
    stop_ok(d)


@test
def garbage_bad_chunked_body():
    d = Daemon().start()
    survives(d, b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked"
             b"\r\n\r\nzz\r\nnot hex\r\n0\r\n\r\n")
    stop_ok(d)


@test
def garbage_pipelined_requests():
    """Several requests in one write are answered in order."""
    d = pack_daemon()
    s = d.connect()
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
                  b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n"
                  b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        got = [read_http_response(s, 3)[0] for _ in range(3)]
        eq(got, [200, 404, 200], "pipelined statuses")
    finally:
        s.close()
    stop_ok(d)


def gauge(d, name):
    m = re.search(r"^%s (\d+)$" % name, d.metrics(), re.M)
    check(m, "no %s in /metrics", name)
    return int(m.group(1))


@test
def client_disconnects_mid_body():
    """Clients that vanish mid-upload are forgotten at once: they are not in
    flight, hold no connection, and do not delay SIGTERM."""
    d = Daemon().start()
    for _ in range(5):
        s = d.connect()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000"
                  b"\r\n\r\n{\"model\":")
        s.close()
    eq(d.get("/health").status, 503, "/health after aborted uploads")
    # The scrape itself is the one request in flight and the one connection.
    wait_for(lambda: gauge(d, "minicpmd_http_requests_in_flight") == 1, 2,
             "aborted uploads to leave minicpmd_http_requests_in_flight")
    eq(gauge(d, "minicpmd_http_connections"), 1, "open connections")
    log = stop_ok(d)
    # Nothing left in flight: it exits at once, not after the grace period.
    contains(log, "all requests finished; exiting", "log")


@test
def client_half_close_is_noticed():
    """A partial request followed at once by the client's FIN (one TCP burst)
    must be noticed as a close, not kept until --timeout."""
    d = Daemon(["--timeout", "30"]).start()
    for payload in (b"GET /hea", b"GET /health HTTP/1.1\r\nHost: localhost\r\n",
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n{"):
        s = d.connect()
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            raw, closed = recv_until_close(s, 2.0)
            check(closed, "connection still open 2 s after the client's FIN (payload %r)",
                  payload)
        finally:
            s.close()
    stop_ok(d)


# ---- slow and many clients -----------------------------------------------------------


@test
def slowloris_idle_timeout():
    d = Daemon(["--timeout", "2"]).start()
    conns = [d.connect() for _ in range(20)]
    try:
        line = b"GET /health"
        worst = 0.0
        for i in range(6):                     # one byte per 0.5 s, for 3 s
            for c in conns:
                c.sendall(line[i:i + 1])
            t0 = time.monotonic()
            eq(d.get("/health", timeout=2).status, 503, "/health during slowloris")
            worst = max(worst, time.monotonic() - t0)
            time.sleep(max(0.0, 0.5 - (time.monotonic() - t0)))
        last_byte = time.monotonic()
        check(worst < 1.0, "/health took %.2f s during slowloris", worst)
        for c in conns:
            data, closed = recv_until_close(c, timeout=max(0.1, last_byte + 4.5 - time.monotonic()))
            check(closed, "half-request still open %.1f s after its last byte (--timeout 2)",
                  time.monotonic() - last_byte)
            check(data == b"" or status_of(data) is not None, "answer: %r", data[:200])
        took = time.monotonic() - last_byte
        check(took <= 4.5, "closing idle half-requests took %.1f s", took)
        check(took >= 1.0, "closed after %.1f s, before --timeout 2", took)
    finally:
        for c in conns:
            c.close()
    eq(d.get("/health").status, 503, "/health after slowloris")
    stop_ok(d)


@test
def max_connections_limit():
    """At --max-connections the daemon closes new connections at once; as soon as
    one client leaves it must accept again. Four kept-alive connections fill the
    limit of 4, a fifth is closed; closing one of the four must let /health in."""
    d = Daemon(["--max-connections", "4", "--timeout", "30"]).start()
    for rnd in range(2):
        # A closed connection counts until the daemon has seen it close: wait for
        # the earlier clients' to go, or the 4th held one would be refused.
        wait_for(lambda: "minicpmd_http_connections 1\n" in d.metrics(), 10,
                 "only /metrics' own connection to be open (round %d)" % rnd)
        held = []
        try:
            for _ in range(4):
                c = d.connect()
                held.append(c)
                c.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
                eq(read_http_response(c, 3)[0], 503, "/health on a kept-alive connection")
            extra = d.connect()         # closed by the daemon at once
            extra.close()
            check(d.alive(), "daemon died at the connection limit")
            held.pop().close()          # one slot frees up
            wait_for(lambda: d.get("/health", timeout=1).status == 503, 3,
                     "/health with 3 of 4 connections in use (round %d)" % rnd)
        finally:
            for c in held:
                c.close()
    wait_for(lambda: d.get("/health", timeout=1).status == 503, 3,
             "/health after every connection closed")
    stop_ok(d)


if __name__ == "__main__":
    run_main()
