#!/usr/bin/python3
"""The network half of the service hardening, on raw sockets: the request
deadline and the connection caps against slow clients, Host/Origin/Content-Type
checks against DNS rebinding and cross-site requests, message framing, 499 for
clients that leave, half-closed clients that still read, and streams that end
whole when the daemon stops."""

import json
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Daemon, Failure, Skip, check, contains, eq, pack_daemon,  # noqa: E402
                     read_http_response, recv_until_close, run_main, stop_ok, test, wait_for)

PACK = "MiniCPM5-2B"


def final_response(s, timeout=30.0):
    """The final response on `s`, past any 1xx (the daemon may send an unsolicited
    100 Continue to a client that half-closed)."""
    while True:
        status, headers, body = read_http_response(s, timeout)
        if not 100 <= status < 200:
            return status, headers, body


def exchange(d, data, timeout=5.0):
    """Send raw bytes on a new connection; return (status, headers, body, closed):
    the first final response, and whether the server then closed the connection."""
    s = d.connect(timeout=timeout)
    try:
        s.sendall(data)
        status, headers, body = final_response(s, timeout)
        rest, closed = recv_until_close(s, 2.0)
        return status, headers, body, closed and rest == b""
    finally:
        s.close()


def get_raw(d, host=b"localhost", extra=b"", path=b"/health", version=b"HTTP/1.1"):
    head = b"GET " + path + b" " + version + b"\r\n"
    if host is not None:
        head += b"Host: " + host + b"\r\n"
    return exchange(d, head + extra + b"Connection: close\r\n\r\n")


def error_code(body):
    try:
        return json.loads(body.decode())["error"]["code"]
    except (ValueError, KeyError, TypeError):
        raise Failure("not an error object: %r" % body[:300])


def requests_total(d, route, status):
    m = re.search(r'^minicpmd_http_requests_total\{route="%s",status="%d"\} (\d+)$'
                  % (re.escape(route), status), d.metrics(), re.M)
    return int(m.group(1)) if m else 0


def closed_total(d, reason):
    m = re.search(r'^minicpmd_http_connections_closed_total\{reason="%s"\} (\d+)$' % reason,
                  d.metrics(), re.M)
    return int(m.group(1)) if m else None


def statuses(d, route):
    return {int(s): int(n) for s, n in
            re.findall(r'^minicpmd_http_requests_total\{route="%s",status="(\d+)"\} (\d+)$'
                       % re.escape(route), d.metrics(), re.M)}


def chat_request(payload, host=b"localhost"):
    data = json.dumps(payload).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + host +
            b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)


def sse_events(raw):
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        lines = [l for l in block.split("\n") if l and not l.startswith(":")]
        if lines:
            data = "\n".join(l[6:] for l in lines if l.startswith("data: "))
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def hung_daemon(args=()):
    """A daemon whose generations hang in the sim's first runlist (a runlist of
    every layer, over --sim-runlist-limit 1, with a 10-minute timeout) until they
    are cancelled: a request that stays in flight for as long as a test needs."""
    return pack_daemon(["--device", "sim", "--sim-runlist-limit", "1", "--sim-timeout-ms",
                        "600000", "--runlist-layers", "all"] + list(args))


HUNG = {"model": PACK, "max_tokens": 4, "messages": [{"role": "user", "content": "go"}]}


# ---- item 2: slowloris -------------------------------------------------------------


class Tricklers:
    """n connections that send a request head one byte at a time, every `every` s,
    never finishing it, until the server closes them."""

    HEAD = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Pad: " + b"a" * 4096

    def __init__(self, d, n, every=0.5):
        self.socks = [d.connect(timeout=5) for _ in range(n)]
        self.closed_at = [None] * n
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.t0 = time.monotonic()
        self.thread.start()

    def run(self):
        i = 0
        while not self.stop.is_set() and i < len(self.HEAD):
            for k, s in enumerate(self.socks):
                if self.closed_at[k] is not None:
                    continue
                try:
                    s.sendall(self.HEAD[i:i + 1])
                except OSError:
                    self.closed_at[k] = time.monotonic()
            i += 1
            self.stop.wait(self.every)

    def wait_all_closed(self, timeout):
        """Read every socket until the server closes it (EOF or reset)."""
        deadline = time.monotonic() + timeout
        for k, s in enumerate(self.socks):
            if self.closed_at[k] is None:
                _, closed = recv_until_close(s, max(0.1, deadline - time.monotonic()))
                if closed:
                    self.closed_at[k] = time.monotonic()
        return sum(1 for c in self.closed_at if c is None)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        for s in self.socks:
            s.close()


@test
def slowloris_request_deadline_frees_every_slot():
    """64 trickling connections with --max-connections 64 and
    a 10 s request deadline: /health answers within 12 s of their start, and every
    trickler is closed. --timeout (idle) is far away: the trickle resets it."""
    d = Daemon(["--max-connections", "64", "--request-timeout", "10",
                "--timeout", "600"]).start()
    wait_for(lambda: "minicpmd_http_connections 1\n" in d.metrics(), 10,
             "only /metrics' own connection to be open")
    tr = Tricklers(d, 64)
    try:
        # The tricklers are ahead of /health in the kernel's accept queue.
        answered, refused = None, 0
        while time.monotonic() - tr.t0 < 30 and answered is None:
            try:
                s = d.connect(timeout=2)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                status, _, _ = read_http_response(s, 2)
                s.close()
                answered = time.monotonic() - tr.t0
                eq(status, 503, "/health (no model)")
            except (OSError, Failure):
                refused += 1
                time.sleep(0.05)
        check(answered is not None, "/health never answered in 30 s")
        print("/health answered %.2f s after the tricklers started (%d attempts refused)"
              % (answered, refused))
        check(refused > 0, "/health got in while 64 tricklers held --max-connections 64")
        check(answered <= 12.0, "/health answered %.2f s after the tricklers started "
              "(done-when: 12 s)", answered)
        left = tr.wait_all_closed(20)
        eq(left, 0, "tricklers still open")
        late = max(tr.closed_at) - tr.t0
        print("last trickler closed %.2f s after the start" % late)
        contains(d.log(), "(--request-timeout)", "log of the closed tricklers")
        # The last /metrics connection may still count when the tricklers come: the
        # one trickler it displaces is refused at once (and the rest keep the cap full).
        early = sum(1 for c in tr.closed_at if c - tr.t0 < 5)
        check(early <= 1, "%d tricklers closed before the deadline" % early)
        eq(closed_total(d, "request_timeout"), 64 - early, "connections closed by the deadline")
        check(closed_total(d, "max_connections") >= refused,
              "refused connections not counted: %r" % closed_total(d, "max_connections"))
    finally:
        tr.close()
    stop_ok(d)


@test
def over_max_connections_is_refused_at_once():
    """At the cap a new connection is closed at once, not left in the backlog."""
    d = Daemon(["--max-connections", "3", "--timeout", "600"]).start()
    # Earlier clients' connections are counted until the daemon has seen them close.
    wait_for(lambda: "minicpmd_http_connections 1\n" in d.metrics(), 10,
             "only /metrics' own connection to be open")
    held = [d.connect() for _ in range(3)]
    try:
        for s in held:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            eq(read_http_response(s, 5)[0], 503, "/health on a held connection")
        extra = d.connect()
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data, closed = recv_until_close(extra, 10)
        extra.close()
        check(closed and data == b"", "a 4th connection over --max-connections 3 was not "
              "closed at once (got %r, closed %s)" % (data[:100], closed))
        held.pop().close()
        wait_for(lambda: closed_total(d, "max_connections") == 1, 10, "the refusal counted")
        wait_for(lambda: d.get("/health", timeout=2).status == 503, 10,
                 "/health once a slot is free")
    finally:
        for s in held:
            s.close()
    stop_ok(d)


def own_address():
    """A non-loopback address of this machine, or None."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("192.0.2.1", 9))     # no packet is sent
        addr = s.getsockname()[0]
        s.close()
        return None if addr.startswith("127.") else addr
    except OSError:
        return None


@test
def per_ip_connection_limit():
    """--max-connections-per-ip caps one client address (not loopback, which every
    local client shares)."""
    addr = own_address()
    if not addr:
        raise Skip("no non-loopback address to connect from")
    d = Daemon(["--host", "0.0.0.0", "--max-connections-per-ip", "2", "--timeout", "600"])
    d.start()
    wait_for(lambda: "minicpmd_http_connections 1\n" in d.metrics(), 10,
             "only /metrics' own connection to be open")
    held = []
    try:
        for _ in range(2):
            s = socket.create_connection((addr, d.port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            eq(read_http_response(s, 5)[0], 503, "/health within the per-address limit")
            held.append(s)
        s = socket.create_connection((addr, d.port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data, closed = recv_until_close(s, 10)
        s.close()
        check(closed and data == b"", "a 3rd connection from %s was served: %r" % (addr, data))
        # Loopback clients are not counted per address.
        eq(d.get("/health", timeout=5).status, 503, "/health over loopback")
        eq(closed_total(d, "max_connections_per_ip"), 1, "refusals counted")
    finally:
        for s in held:
            s.close()
    stop_ok(d)


@test
def request_deadline_counts_the_body_too():
    """A body that trickles in after complete headers is cut at the deadline as
    well, and the request is logged and counted as 408."""
    d = Daemon(["--request-timeout", "2", "--timeout", "600"]).start()
    s = d.connect()
    try:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                  b"application/json\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 20 and not closed:
            try:
                s.sendall(b" ")
            except OSError:
                closed = True
                break
            data, closed = recv_until_close(s, 0.3)
        check(closed, "a trickled body kept its connection for 20 s (--request-timeout 2)")
    finally:
        s.close()
    wait_for(lambda: requests_total(d, "/tokenize", 408) == 1, 10, "the 408 in /metrics")
    stop_ok(d)


# ---- item 3: Host, Content-Type, Origin ----------------------------------------------


@test
def host_header_checked_on_loopback():
    d = Daemon(["--allowed-host", "my.box"]).start()
    port = str(d.port).encode()
    status, _, body, _ = get_raw(d, b"attacker.example")
    eq(status, 403, "Host: attacker.example")
    eq(error_code(body), "host_not_allowed", "code")
    eq(get_raw(d, b"attacker.example:" + port)[0], 403, "Host: attacker.example:port")
    for ok in (b"localhost", b"localhost:" + port, b"127.0.0.1", b"127.0.0.1:" + port,
               b"[::1]", b"[::1]:" + port, b"LocalHost:" + port, b"my.box", b"my.box:80"):
        eq(get_raw(d, ok)[0], 503, "Host: %s" % ok.decode())
    status, _, body, _ = get_raw(d, None)
    eq(status, 400, "HTTP/1.1 without Host")
    eq(get_raw(d, None, version=b"HTTP/1.0")[0], 503, "HTTP/1.0 without Host")
    eq(get_raw(d, b"localhost", extra=b"Host: localhost\r\n")[0], 400, "two Host headers")
    # curl sends Host: 127.0.0.1:port
    eq(d.get("/health").status, 503, "curl /health")
    stop_ok(d)


@test
def host_header_not_checked_off_loopback():
    d = Daemon(["--host", "0.0.0.0"]).start()
    eq(get_raw(d, b"whatever.example")[0], 503, "Host: whatever.example on 0.0.0.0")
    stop_ok(d)


@test
def json_endpoints_need_a_json_content_type():
    d = Daemon().start()
    body = b'{"content":"x"}'
    for ct, want in (("text/plain", 415), ("application/x-www-form-urlencoded", 415),
                     ("multipart/form-data; boundary=x", 415), ("application/jsonx", 415),
                     ("application/json", 503), ("application/json; charset=utf-8", 503),
                     ("Application/JSON", 503)):
        r = d.post("/tokenize", data=body, headers={"Content-Type": ct})
        eq(r.status, want, "POST /tokenize with Content-Type %s" % ct)
        if want == 415:
            eq(r.json()["error"]["code"], "unsupported_media_type", "code")
    # curl -d without -H: a form type
    r = d.request("POST", "/v1/chat/completions", data=body)
    eq(r.status, 415, "curl --data without a Content-Type header")
    # No Content-Type at all (raw clients): accepted.
    status, _, _, _ = exchange(d, b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\n"
                                  b"Content-Length: 15\r\nConnection: close\r\n\r\n" + body)
    eq(status, 503, "POST without Content-Type")
    stop_ok(d)


@test
def foreign_origin_cannot_post():
    d = Daemon(["--cors-origin", "http://ui.example:3000"]).start()
    simple = {"Content-Type": "text/plain", "Origin": "http://evil.example"}
    r = d.post("/v1/chat/completions", data=b'{"model":"x","messages":[]}', headers=simple)
    eq(r.status, 403, "browser-simple POST from a foreign origin")
    eq(r.json()["error"]["code"], "origin_not_allowed", "code")
    r = d.post("/tokenize", data=b"{}", headers={"Origin": "http://evil.example"})
    eq(r.status, 403, "JSON POST from a foreign origin")
    r = d.post("/tokenize", data=b"{}", headers={"Origin": "http://ui.example:3000"})
    eq(r.status, 503, "POST from the configured origin")
    r = d.post("/tokenize", data=b"{}", headers={"Origin": "http://127.0.0.1:%d" % d.port})
    eq(r.status, 503, "POST from the server's own origin")
    eq(d.get("/health", headers={"Origin": "http://evil.example"}).status, 503,
       "GET from a foreign origin")
    stop_ok(d)


# ---- item 8: framing ---------------------------------------------------------------------


@test
def two_content_lengths_are_a_400():
    d = Daemon(["--timeout", "30"]).start()
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"
    req = (b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
           b"Content-Length: 2\r\nContent-Length: %d\r\n\r\n{}" % (2 + len(smuggled)) + smuggled)
    s = d.connect()
    try:
        s.sendall(req)
        status, headers, body = final_response(s, 5)
        eq(status, 400, "two Content-Length headers")
        rest, closed = recv_until_close(s, 5)
        check(closed, "connection left open after a framing error")
        check(b"HTTP/1.1" not in rest, "a second response followed: %r" % rest[:200])
    finally:
        s.close()
    stop_ok(d)


@test
def unsupported_transfer_encoding_is_a_501_at_once():
    d = Daemon(["--timeout", "30"]).start()
    for te in (b"gzip", b"gzip, chunked", b"identity"):
        status, _, body, closed = exchange(
            d, b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
               b"\r\nTransfer-Encoding: " + te + b"\r\n\r\n{}", timeout=5)
        eq(status, 501, "Transfer-Encoding: %s" % te.decode())
        eq(error_code(body), "unsupported_transfer_encoding", "code")
        check(closed, "connection open after a 501")
    status, _, _, _ = exchange(
        d, b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    eq(status, 400, "Transfer-Encoding with Content-Length")
    status, _, _, _ = exchange(
        d, b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    eq(status, 503, "chunked still works")
    stop_ok(d)


@test
def nul_in_a_header_value_is_a_400():
    d = Daemon(["--api-key", "secret"]).start()
    for hdrs in (b"X-Api-Key: secret\x00junk\r\nHost: localhost\r\n",
                 b"Host: localhost\r\nX-Api-Key: secret\x00junk\r\n",
                 b"Host: localhost\r\nAuthorization: Bearer secret\x00\r\nX-A: b\r\n"):
        status, _, body, closed = exchange(
            d, b"GET /v1/models HTTP/1.1\r\n" + hdrs + b"Connection: close\r\n\r\n")
        eq(status, 400, "NUL in a header value (%r)" % hdrs)
    status, _, _, _ = exchange(d, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n"
                                  b"X-Api-Key: secret\r\nConnection: close\r\n\r\n")
    eq(status, 200, "the same key without the NUL")
    stop_ok(d)


# ---- item 6: 499 -------------------------------------------------------------------------


@test
def client_disconnect_counts_499_not_5xx():
    """A client that leaves while its generation runs (hung in the sim until
    cancelled) is a 499 in /metrics and the access log, not a 5xx."""
    d = hung_daemon()
    for stream in (False, True):
        s = d.connect(timeout=10)
        s.sendall(chat_request(dict(HUNG, stream=stream)))
        wait_for(lambda: "minicpmd_worker_busy 1" in d.metrics(), 20,
                 "the generation to run (stream=%s)" % stream)
        s.close()
        wait_for(lambda: "minicpmd_worker_busy 0" in d.metrics(), 20,
                 "the generation to be cancelled (stream=%s)" % stream)
    wait_for(lambda: "minicpmd_http_requests_in_flight 1" in d.metrics(), 10,
             "the requests to be done")
    got = statuses(d, "/v1/chat/completions")
    eq(got, {499: 2}, "statuses of chat requests whose client left")
    log = stop_ok(d)
    eq(len(re.findall(r"POST /v1/chat/completions -> 499", log)), 2,
       "499 lines in the access log")


# ---- item 7: half-close ------------------------------------------------------------------


@test
def half_closed_client_gets_its_answer():
    """A client that shuts its sending side after the request still reads the
    whole answer, streamed or not (the worker is slowed by the sim's latency, so the
    answer comes long after the FIN)."""
    d = pack_daemon(["--device", "sim", "--sim-latency-us", "3000"])
    for stream in (False, True):
        s = d.connect(timeout=30)
        try:
            s.sendall(chat_request({"model": PACK, "max_tokens": 8, "temperature": 0,
                                    "stream": stream,
                                    "messages": [{"role": "user", "content": "Hello"}]}))
            s.shutdown(socket.SHUT_WR)
            status, headers, body = final_response(s, 60)
            eq(status, 200, "status for a half-closed client (stream=%s)" % stream)
            if stream:
                ev = sse_events(body)
                eq(ev[-1], "[DONE]", "the stream's end")
            else:
                check(json.loads(body)["choices"][0]["finish_reason"] in ("stop", "length"),
                      "answer: %r" % body[:300])
            _, closed = recv_until_close(s, 10)
            check(closed, "connection not closed after the answer")
        finally:
            s.close()
    got = statuses(d, "/v1/chat/completions")
    eq(got, {200: 2}, "statuses")
    stop_ok(d)


@test
def closed_client_still_cancels_a_waiting_request():
    """The other side of the half-close: a client that closed altogether while its
    non-streamed request waits is noticed (the probe draws a reset) and cancelled."""
    d = hung_daemon()
    s = d.connect(timeout=10)
    s.sendall(chat_request(HUNG))
    wait_for(lambda: "minicpmd_worker_busy 1" in d.metrics(), 20, "the generation to run")
    s.shutdown(socket.SHUT_WR)
    # Half-closed only: the generation goes on.
    wait_for(lambda: "HTTP/1.1 100" in peek(s), 10, "the probe")
    check("minicpmd_worker_busy 1" in d.metrics(), "a half-closed client's work was cancelled")
    s.close()
    wait_for(lambda: "minicpmd_worker_busy 0" in d.metrics(), 20, "the cancel after the close")
    stop_ok(d)


def peek(s):
    s.settimeout(0.2)
    try:
        return s.recv(4096, socket.MSG_PEEK).decode("latin-1")
    except socket.timeout:
        return ""


# ---- item 11: streams end whole on shutdown ----------------------------------------


def open_hung_stream(d):
    s = d.connect(timeout=10)
    s.sendall(chat_request(dict(HUNG, stream=True)))
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c:
            raise Failure("closed before the stream's headers")
        buf += c
    wait_for(lambda: "minicpmd_worker_busy 1" in d.metrics(), 20, "the stream to run")
    return s, buf


def read_stream_to_end(s, buf):
    data, closed = recv_until_close(s, 30)
    check(closed, "stream not closed")
    raw = buf + data
    head, _, body = raw.partition(b"\r\n\r\n")
    check(b"chunked" in head.lower(), "not chunked: %r" % head)
    # de-chunk, strictly: a cut chunk fails here
    out = b""
    while True:
        size_line, sep, body = body.partition(b"\r\n")
        check(sep, "stream cut inside a chunk header: %r" % size_line)
        size = int(size_line, 16)
        if size == 0:
            break
        check(len(body) >= size + 2, "stream cut mid-chunk")
        out += body[:size]
        body = body[size + 2:]
    return sse_events(out)


def check_error_then_done(ev):
    check(len(ev) >= 3, "events: %r" % ev)
    eq(ev[-1], "[DONE]", "the last event")
    err = ev[-2]
    check(isinstance(err, dict) and "error" in err, "the event before [DONE]: %r" % err)
    eq(err["error"]["code"], "shutting_down", "error code")
    eq(sorted(err["error"]), ["code", "message", "param", "type"], "error keys")


def stop_during_stream(grace, second_signal):
    """A stream hung in the worker while the daemon stops: it must end with the
    shutting_down event and [DONE], whole, and the daemon exit 0."""
    d = hung_daemon(["--shutdown-timeout", str(grace)])
    s, buf = open_hung_stream(d)
    try:
        d.send_signal(signal.SIGTERM)
        if second_signal:
            d.wait_log("no longer accepting connections", 10)
            d.send_signal(signal.SIGTERM)
        check_error_then_done(read_stream_to_end(s, buf))
    finally:
        s.close()
    eq(d.wait(20), 0, "exit code")


@test
def stream_ends_with_error_and_done_at_grace_end():
    stop_during_stream(1, second_signal=False)


@test
def stream_ends_with_error_and_done_on_second_sigterm():
    stop_during_stream(600, second_signal=True)


if __name__ == "__main__":
    run_main()
