#!/usr/bin/python3
"""Process life: SIGTERM drain, grace timeout, second signal, --check, logging
(--log-format json, --log-file + SIGHUP)."""

import json
import os
import re
import signal
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (Daemon, Failure, check, contains, eq, make_pack, pack_daemon,  # noqa: E402
                     read_http_response, run_main, stop_ok, test, wait_for)

PACK = "MiniCPM5-2B"

HALF_POST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
             b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n")
BODY_100 = b'{"model":"MiniCPM5-2B","messages":[{"role":"user","content":"hello"}]}'
BODY_100 = BODY_100 + b" " * (100 - len(BODY_100))
assert len(BODY_100) == 100


def in_flight(d):
    m = re.search(r"^minicpmd_http_requests_in_flight (\d+)$", d.metrics(), re.M)
    check(m, "no minicpmd_http_requests_in_flight in /metrics")
    return int(m.group(1))


def start_half_request(d):
    """Open a connection, send the head and half the body of a POST, and wait
    until the daemon counts it in flight (the /metrics scrape counts itself)."""
    s = d.connect()
    s.sendall(HALF_POST + BODY_100[:50])
    wait_for(lambda: in_flight(d) >= 2, 5, "the half-sent request to be in flight")
    return s


def connection_refused(d):
    try:
        c = socket.create_connection((d.host, d.port), timeout=0.5)
    except (ConnectionRefusedError, socket.timeout):
        return True
    c.close()
    return False


# ---- shutdown ---------------------------------------------------------------------


@test
def sigterm_idle_exits_zero():
    d = pack_daemon()
    log = stop_ok(d)
    contains(log, "SIGTERM", "log")
    # Idle: it exits at once, not after the 30 s grace (the log, not a clock, says so).
    contains(log, "all requests finished; exiting", "log")
    check("grace period" not in log, "an idle daemon waited for the grace period:\n%s", log)


@test
def sigterm_drains_inflight_request():
    d = pack_daemon()
    s = start_half_request(d)
    try:
        d.send_signal(signal.SIGTERM)
        d.wait_log(r"SIGTERM: no longer accepting connections; 1 request\(s\) in flight", 3)
        # New connections are refused at once (the listener is closed).
        wait_for(lambda: connection_refused(d), 1.0, "new connections to be refused")
        check(d.alive(), "daemon exited before the in-flight request finished")
        s.sendall(BODY_100[50:])
        status, headers, body = read_http_response(s, timeout=5)
        check(100 <= status < 600, "in-flight request got no proper status: %d", status)
        # The stub answers an error object; whatever it is, it is complete JSON.
        json.loads(body.decode())
        eq((headers.get("connection") or [""])[-1].lower(), "close",
           "Connection header while draining")
    finally:
        s.close()
    rc = d.wait(5)
    eq(rc, 0, "exit code after draining")
    log = d.log()
    contains(log, "all requests finished", "log after the drain")


@test
def sigterm_grace_timeout():
    d = pack_daemon(["--shutdown-timeout", "1"])
    s = start_half_request(d)
    try:
        t0 = time.monotonic()
        d.send_signal(signal.SIGTERM)
        rc = d.wait(6)
        took = time.monotonic() - t0
    finally:
        s.close()
    eq(rc, 0, "exit code after the grace period")
    # The grace timer cannot fire early; how late it is depends on the machine.
    check(took >= 0.9, "exit took %.2f s with --shutdown-timeout 1", took)
    log = d.log()
    contains(log, "grace period of 1 s is over", "log")
    contains(log, "cancelling 1 in-flight request", "log")


@test
def sigterm_new_request_on_open_connection_503():
    """A keep-alive connection that sends a new request while draining gets 503
    shutting_down, not a hang."""
    d = pack_daemon()
    busy = start_half_request(d)
    idle = d.connect()
    try:
        idle.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        st, _, _ = read_http_response(idle, 3)
        eq(st, 200, "/health before SIGTERM")
        d.send_signal(signal.SIGTERM)
        d.wait_log(r"SIGTERM: no longer accepting", 3)
        idle.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
        st, hdrs, body = read_http_response(idle, 3)
        eq(st, 503, "request on a kept-alive connection while draining")
        eq(json.loads(body)["error"]["code"], "shutting_down", "error code")
        check("retry-after" in hdrs, "503 shutting_down lacks Retry-After: %r", hdrs)
        busy.sendall(BODY_100[50:])
        read_http_response(busy, 3)
    finally:
        busy.close()
        idle.close()
    eq(d.wait(5), 0, "exit code")


@test
def sigint_twice_stops_now():
    d = pack_daemon()
    s = start_half_request(d)
    try:
        d.send_signal(signal.SIGINT)
        d.wait_log(r"SIGINT: no longer accepting connections", 3)
        check(d.alive(), "daemon exited on the first SIGINT with a request in flight")
        t0 = time.monotonic()
        d.send_signal(signal.SIGINT)
        rc = d.wait(3)
        took = time.monotonic() - t0
    finally:
        s.close()
    eq(rc, 0, "exit code after a second SIGINT")
    log = d.log()
    contains(log, "SIGINT again: stopping now", "log")
    # At once, not after the 30 s grace: the log says which path ended it.
    check("grace period" not in log, "the second SIGINT waited for the grace period (%.1f s)",
          took)


@test
def sigterm_during_loading():
    """SIGTERM while the model is still loading: the daemon finishes (the
    loader is released) and exits 0 without ever becoming ready."""
    d = pack_daemon(gate=True)
    try:
        wait_for(d.gate.reader_waiting, 5, "the loader to be held at the gate")
        d.send_signal(signal.SIGTERM)
        d.wait_log(r"SIGTERM: no longer accepting", 3)
        wait_for(lambda: connection_refused(d), 1.0, "new connections to be refused")
    finally:
        d.gate.release()
    eq(d.wait(5), 0, "exit code after SIGTERM during loading")
    check(" ready:" not in d.log(), "model became ready after SIGTERM")


@test
def sigterm_blocked_loader_exits_after_grace():
    """The loader does not return (held at the gate, as a load
    stuck in I/O would be): SIGTERM still ends the process, by the stop watch, once
    --shutdown-timeout + 5 s are over; exit 1 and a log line saying why."""
    d = pack_daemon(["--shutdown-timeout", "1"], gate=True)
    try:
        eq(d.get("/health").json().get("status"), "loading", "/health before SIGTERM")
        d.send_signal(signal.SIGTERM)
        d.wait_log(r"SIGTERM: no longer accepting", 10)
        rc = d.wait(30)
    finally:
        d.gate.release()
    eq(rc, 1, "exit code when the stop watch ends a blocked stop")
    contains(d.log(), "shutdown: still not finished 6 s after the signal", "log")


def fifo_pack(d):
    pack = make_pack(d.tmp, PACK, fifo=True)
    return pack


@test
def fifo_config_json_refused_at_once():
    """A pack whose config.json is a FIFO fails to load with one
    line saying so (it used to block the loader, and SIGTERM with it, forever)."""
    d = Daemon()
    d.args += ["--model", fifo_pack(d)]
    d.spawn()
    eq(d.wait(20), 1, "exit code when config.json is a FIFO")
    contains(d.log(), "config.json: a FIFO, not a regular file", "log")


def refused_at_once(args, want_rc, want):
    """Run with `args` (a FIFO somewhere a regular file is expected): the daemon
    exits with want_rc and one line containing `want`, instead of blocking."""
    d = Daemon(args)
    rc, out, err = d.run()
    eq(rc, want_rc, "exit code for %r" % (args,))
    contains(err, want, "message")


@test
def check_fifo_config_json():
    d = Daemon()
    refused_at_once(["--check", "--model", fifo_pack(d)], 1,
                    "config.json: a FIFO, not a regular file")


@test
def api_key_file_fifo_refused():
    d = Daemon()
    fifo = os.path.join(d.tmp, "key")
    os.mkfifo(fifo)
    refused_at_once(["--api-key-file", fifo], 2, "a FIFO, not a regular file")


@test
def model_load_failure_exits_1():
    d = Daemon()
    pack = make_pack(d.tmp, PACK, config=False)     # no config.json
    d.args += ["--model", pack]
    d.spawn()
    eq(d.wait(10), 1, "exit code when the model fails to load")
    log = d.log()
    contains(log, "config.json", "log names the missing file")
    contains(log, "failed to load", "log")


@test
def model_path_missing_exits_2():
    d = Daemon()
    d.args += ["--model", os.path.join(d.tmp, "no-such-pack")]
    rc, out, err = d.run()
    eq(rc, 2, "exit code for a --model path that does not exist")
    contains(err, "no-such-pack", "message")


# ---- configuration layers ---------------------------------------------------------


@test
def config_precedence_file_env_flag():
    """defaults < config file < MINICPMD_* < flags, seen through --api-key."""
    def key_works(d, key):
        return d.get("/v1/models", headers={"Authorization": "Bearer " + key}).status == 200

    d = Daemon()
    cfg = os.path.join(d.tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump({"api-key": "from-file", "cors_origin": ["http://file.example"]}, f)
    d.env["MINICPMD_CONFIG"] = cfg
    d.start()
    check(key_works(d, "from-file"), "config file key rejected")
    r = d.get("/health", headers={"Origin": "http://file.example"})
    eq(r.header("access-control-allow-origin"), "http://file.example", "cors_origin from file")
    stop_ok(d)

    d = Daemon(env={"MINICPMD_API_KEY": "from-env"})
    d.env["MINICPMD_CONFIG"] = cfg
    d.start()
    check(key_works(d, "from-env"), "MINICPMD_API_KEY rejected")
    check(not key_works(d, "from-file"), "file key accepted although the env overrides it")
    stop_ok(d)

    d = Daemon(["--api-key", "from-flag"], env={"MINICPMD_API_KEY": "from-env"})
    d.env["MINICPMD_CONFIG"] = cfg
    d.start()
    check(key_works(d, "from-flag"), "--api-key rejected")
    check(not key_works(d, "from-env"), "env key accepted although the flag overrides it")
    stop_ok(d)


# ---- --check ------------------------------------------------------------------------


@test
def check_ok():
    d = Daemon(["--check"])
    pack = make_pack(d.tmp, PACK)
    d.args += ["--model", pack]
    rc, out, err = d.run()
    eq(rc, 0, "--check exit code for a good pack; stderr=%r" % err)
    check(re.search(r"\bok\b", out), "--check stdout does not say ok: %r", out)
    contains(out, PACK, "--check stdout")
    check("listening" not in err, "--check started listening: %r", err)


@test
def check_missing_config_json():
    d = Daemon(["--check"])
    pack = make_pack(d.tmp, PACK, config=False)
    d.args += ["--model", pack]
    rc, out, err = d.run()
    eq(rc, 1, "--check exit code for a pack without config.json")
    contains(err, "config.json", "--check message")


@test
def check_tokenizer_beyond_vocab():
    """An added token whose id is past the model's vocab_size fails
    --check (and the load) with one line naming the token, instead of loading and
    then answering 400 to every request that contains it."""
    d = Daemon(["--check"])
    pack = make_pack(d.tmp, PACK)
    with open(os.path.join(pack, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    path = os.path.join(pack, "tokenizer.json")
    with open(path) as f:
        tok = json.load(f)
    tok["added_tokens"].append({"id": vocab, "content": "<|past_the_end|>", "special": True,
                                "single_word": False, "lstrip": False, "rstrip": False,
                                "normalized": False})
    with open(path, "w") as f:
        json.dump(tok, f)
    d.args += ["--model", pack]
    rc, out, err = d.run()
    eq(rc, 1, "--check exit code for a tokenizer that does not fit the model")
    contains(err, 'special token "<|past_the_end|>" has id %d' % vocab, "--check message")
    eq(len(err.strip().splitlines()), 1, "one line: %r" % err)


@test
def check_no_model():
    d = Daemon(["--check"])
    rc, out, err = d.run()
    eq(rc, 1, "--check exit code without any model")
    contains(err.lower(), "no model", "--check message")


@test
def check_invalid_port_exits_2():
    d = Daemon(["--check", "--port", "70000"], port0=False)
    rc, out, err = d.run()
    eq(rc, 2, "exit code for --port 70000")
    lines = err.strip().splitlines()
    eq(len(lines), 1, "stderr lines (%r)" % err)
    contains(lines[0], "--port", "message")


# ---- logging -------------------------------------------------------------------------


@test
def log_format_json():
    d = pack_daemon(["--log-format", "json", "--log-level", "debug"])
    d.get("/v1/models")
    d.get("/nope")
    d.post("/v1/chat/completions", data=b"{}")
    log = stop_ok(d)
    lines = log.splitlines()
    check(len(lines) >= 5, "too few log lines: %r", log)
    levels = set()
    for line in lines:
        try:
            o = json.loads(line)
        except ValueError:
            raise Failure("log line is not JSON: %r" % line)
        check(isinstance(o, dict), "log line is not an object: %r", line)
        for k in ("ts", "level", "msg"):
            check(isinstance(o.get(k), str), "log line lacks string %r: %r", k, line)
        check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o["ts"]), "ts: %r", o["ts"])
        levels.add(o["level"])
    check(levels <= {"error", "warn", "info", "debug"}, "levels: %r", levels)
    check(any("listening on" in json.loads(x)["msg"] for x in lines), "no listening line")


@test
def log_json_escapes_client_bytes():
    """A request path with quotes, backslashes and invalid UTF-8 still yields
    one valid JSON line."""
    d = Daemon(["--log-format", "json"]).start()
    raw = d.raw(b'GET /x"y\\z\xff\xfe HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n')
    check(raw.startswith(b"HTTP/1.1 "), "response: %r", raw)
    log = stop_ok(d)
    for line in log.splitlines():
        try:
            json.loads(line)
        except ValueError:
            raise Failure("log line is not JSON: %r" % line)


@test
def log_json_long_escaped_line_is_valid():
    """A message that grows past the line buffer when escaped (1500 control
    bytes in the path become 9000 bytes of \\u0001) must still be one valid JSON
    line, truncated inside the message if need be."""
    d = Daemon(["--log-format", "json"]).start()
    raw = d.raw(b"GET /" + b"%01" * 1500 + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    check(raw.startswith(b"HTTP/1.1 404"), "response: %r", raw[:100])
    log = stop_ok(d)
    for line in log.splitlines():
        try:
            json.loads(line)
        except ValueError:
            raise Failure("log line of %d bytes is not JSON: %r...%r"
                          % (len(line), line[:80], line[-40:]))


@test
def log_text_no_line_injection():
    """Client bytes (a %0A in the path, an ESC in the method) must not start a
    new log line or reach the terminal raw."""
    d = Daemon().start()
    d.raw(b"GET /x%0AFORGED-LINE%0D%0Aerror%20fake HTTP/1.1\r\nHost: localhost\r\n"
          b"Connection: close\r\n\r\n")
    d.raw(b"GE\x1b[31mT /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    eq(d.get("/v1/models").status, 200, "/v1/models")
    log = stop_ok(d)
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (error|warn |info |debug) ")
    for line in log.split("\n")[:-1]:
        check(stamp.match(line), "log line does not start with a timestamp and level "
              "(forged by client bytes?): %r", line)
    check("\x1b" not in log and "\r" not in log, "raw control bytes in the log: %r", log)


@test
def log_file_reopen_on_sighup():
    d = Daemon()
    logdir = os.path.join(d.tmp, "logs")
    os.makedirs(logdir)
    path = os.path.join(logdir, "minicpmd.log")
    rotated = path + ".1"
    d.args += ["--log-file", path]
    d.extra_logs = [rotated, path]
    d.start()
    check(os.path.exists(path), "--log-file was not created")
    contains(open(path).read(), "listening on", "log file")
    os.rename(path, rotated)
    d.send_signal(signal.SIGHUP)
    wait_for(lambda: os.path.exists(path), 3, "a new log file after SIGHUP")
    wait_for(lambda: "log file reopened" in open(path).read(), 3, "the reopen line in the new file")
    eq(d.get("/v1/models").status, 200, "/v1/models")
    wait_for(lambda: "GET /v1/models -> 200" in open(path).read(), 3,
             "the request line in the new file")
    stop_ok(d)
    old = open(rotated).read()
    new = open(path).read()
    check("GET /v1/models" not in old, "request logged to the rotated file")
    contains(new, "SIGTERM", "new log file")
    eq(d.stdout(), "", "stdout")


@test
def sighup_without_log_file_keeps_running():
    d = Daemon().start()
    d.send_signal(signal.SIGHUP)
    eq(d.get("/health").status, 503, "/health after SIGHUP")
    check(d.alive(), "daemon died on SIGHUP")
    stop_ok(d)



@test
def sigusr1_reopens_log_sigusr2_ignored():
    """SIGUSR1/SIGUSR2 used to kill the daemon (their default
    action). SIGUSR1 now reopens the log like SIGHUP (nginx's USR1); SIGUSR2 is
    ignored."""
    d = Daemon()
    logdir = os.path.join(d.tmp, "logs")
    os.makedirs(logdir)
    path = os.path.join(logdir, "minicpmd.log")
    rotated = path + ".1"
    d.args += ["--log-file", path]
    d.extra_logs = [rotated, path]
    d.start()
    d.send_signal(signal.SIGUSR2)
    os.rename(path, rotated)
    d.send_signal(signal.SIGUSR1)
    wait_for(lambda: os.path.exists(path) and "SIGUSR1: log file reopened" in open(path).read(),
             30, "the reopen line in a new log file after SIGUSR1")
    check(d.alive(), "daemon died on SIGUSR1/SIGUSR2")
    eq(d.get("/health").status, 503, "/health after SIGUSR1/SIGUSR2 (no model)")
    stop_ok(d)


@test
def model_control_characters_escaped():
    """An operator string (--model) with control characters is
    printed escaped, on one line, never raw to a terminal or a log."""
    d = Daemon(["--check"])
    pack = make_pack(d.tmp, "a\x1b[31mred\nx")
    d.args += ["--model", pack]
    rc, out, err = d.run()
    eq(rc, 0, "--check exit code; stderr=%r" % err)
    check("\x1b" not in out + err, "a raw ESC reached the output: %r", out + err)
    contains(out, "a\\x1b[31mred\\x0ax", "--check line")
    eq(len(out.strip().splitlines()), 1, "one line: %r" % out)


@test
def weights_copy_logged_and_short_memory_falls_back():
    """--weights copy: the copy and its huge pages are in the log; with
    MemAvailable short (MINICPMD_TEST_MEMAVAILABLE_MB) the daemon warns and serves
    from the file mapping instead."""
    d = pack_daemon(["--weights", "copy", "--log-level", "debug"])
    log = d.log()
    check(re.search(r"weights: \d+ MiB copied in", log), "no copy line in the log:\n%s", log)
    check(re.search(r"weights: (AnonHugePages|hugetlb) -?\d+ of \d+ MiB in huge pages", log),
          "no huge-page line in the log:\n%s", log)
    stop_ok(d)
    d = pack_daemon(["--weights", "copy"], env={"MINICPMD_TEST_MEMAVAILABLE_MB": "100"})
    log = d.log()
    check(re.search(r"warn .*--weights copy: .*MemAvailable.*serving them from the file mapping",
                    log), "no fallback warning in the log:\n%s", log)
    check("copied in" not in log, "copied anyway:\n%s", log)
    eq(d.get("/health").status, 200, "/health after the fallback")
    stop_ok(d)



@test
def check_does_not_copy_weights():
    """--check computes nothing: it opens the model over the mapping whatever
    --weights says (the copy of the 2b pack is 1.3 GB and seconds)."""
    d = Daemon(["--check", "--weights", "copy", "--log-level", "debug"])
    d.args += ["--model", make_pack(d.tmp, PACK)]
    rc, out, err = d.run()
    eq(rc, 0, "--check exit code; stderr=%r" % err)
    check("copied in" not in err and "copying" not in err, "--check copied the weights: %r", err)


if __name__ == "__main__":
    run_main()
