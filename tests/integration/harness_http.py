"""Talking to the daemon: a free loopback port, HTTP through curl (Response), and
raw sockets for malformed input, with HTTP responses read off them by hand."""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import weakref

from harness_base import Failure, _clip

def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- HTTP via curl ------------------------------------------------------------


class Response:
    def __init__(self, status, headers, body, raw_headers=""):
        self.status = status
        self.headers = headers      # lower-case name -> list of values
        self.body = body            # bytes
        self.raw_headers = raw_headers

    def header(self, name):
        v = self.headers.get(name.lower())
        return v[-1] if v else None

    def has_header(self, name):
        return name.lower() in self.headers

    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError as e:
            raise Failure("body is not JSON (%s): %r" % (e, _clip(self.body)))

    def __repr__(self):
        return "<Response %d %s %s>" % (self.status, self.raw_headers.strip().replace("\r\n", " | "),
                                        _clip(self.body, 300))


def _parse_header_dump(text):
    """curl -D output may hold several header blocks (100 Continue, ...); keep
    the last one."""
    blocks = [b for b in re.split(r"\r?\n\r?\n", text) if b.strip()]
    if not blocks:
        return 0, {}, ""
    last = blocks[-1]
    lines = last.splitlines()
    m = re.match(r"HTTP/\S+\s+(\d+)", lines[0]) if lines else None
    status = int(m.group(1)) if m else 0
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers.setdefault(k.strip().lower(), []).append(v.strip())
    return status, headers, last


def curl(url, method="GET", headers=None, data=None, timeout=5.0, extra=None, workdir=None):
    """Run curl; return a Response. A transport failure raises Failure."""
    tmp = tempfile.mkdtemp(prefix="curl-", dir=workdir)
    try:
        hfile = os.path.join(tmp, "h")
        bfile = os.path.join(tmp, "b")
        args = ["curl", "-sS", "--max-time", str(timeout), "-D", hfile, "-o", bfile,
                "--noproxy", "*"]
        if method == "HEAD":
            args.append("-I")
        elif method != "GET" or data is not None:
            args += ["-X", method]
        for k, v in (headers or {}).items():
            args += ["-H", "%s: %s" % (k, v)]
        if data is not None:
            dfile = os.path.join(tmp, "d")
            with open(dfile, "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())
            args += ["--data-binary", "@" + dfile]
        args += list(extra or [])
        args.append(url)
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout + 5)
        raw = open(hfile, encoding="latin-1").read() if os.path.exists(hfile) else ""
        body = open(bfile, "rb").read() if os.path.exists(bfile) else b""
        if method == "HEAD":
            body = b""      # curl -I writes the headers to -o too
        status, hdrs, last = _parse_header_dump(raw)
        if p.returncode != 0 and status == 0:
            raise Failure("curl %s %s failed (exit %d): %s"
                          % (method, url, p.returncode, p.stderr.decode(errors="replace").strip()))
        return Response(status, hdrs, body, last)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- raw sockets --------------------------------------------------------------


def connect(port, host="127.0.0.1", timeout=2.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_until_close(s, timeout=5.0, limit=1 << 20):
    """Read until the peer closes (or `timeout`); returns (bytes, closed)."""
    deadline = time.monotonic() + timeout
    buf = b""
    while len(buf) < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            return buf, False
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return buf, False
        except ConnectionResetError:
            return buf, True
        if not chunk:
            return buf, True
        buf += chunk
    return buf, False


_LEFTOVER = weakref.WeakKeyDictionary()    # socket -> bytes read past a response


def read_http_response(s, timeout=5.0):
    """Read one complete HTTP/1.x response (Content-Length, chunked or
    close-delimited) from socket `s`. Returns (status, headers, body); bytes
    past the response are kept for the next call (pipelining)."""
    deadline = time.monotonic() + timeout
    buf = _LEFTOVER.pop(s, b"")

    def more():
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failure("timed out reading an HTTP response; have %r" % _clip(buf, 500))
        s.settimeout(left)
        try:
            return s.recv(65536)
        except socket.timeout:
            raise Failure("timed out reading an HTTP response; have %r" % _clip(buf, 500))

    while b"\r\n\r\n" not in buf:
        c = more()
        if not c:
            raise Failure("connection closed before a complete response head; got %r"
                          % _clip(buf, 500))
        buf += c
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    if not m:
        raise Failure("not an HTTP response: %r" % _clip(head, 300))
    status = int(m.group(1))
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k.strip().lower(), []).append(v.strip())
    te = ",".join(headers.get("transfer-encoding", [])).lower()
    if status in (204, 304) or 100 <= status < 200:
        _LEFTOVER[s] = rest
        return status, headers, b""
    if "content-length" in headers:
        n = int(headers["content-length"][-1])
        while len(rest) < n:
            c = more()
            if not c:
                raise Failure("connection closed mid-body (%d of %d bytes)" % (len(rest), n))
            rest += c
        _LEFTOVER[s] = rest[n:]
        return status, headers, rest[:n]
    if "chunked" in te:
        body = b""
        while True:
            while b"\r\n" not in rest:
                c = more()
                if not c:
                    raise Failure("connection closed mid-chunked body")
                rest += c
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            while len(rest) < size + 2:
                c = more()
                if not c:
                    raise Failure("connection closed mid-chunk")
                rest += c
            if size == 0:
                # trailers end with an empty line
                while not (rest.startswith(b"\r\n") or b"\r\n\r\n" in rest):
                    c = more()
                    if not c:
                        break
                    rest += c
                rest = rest[2:] if rest.startswith(b"\r\n") else rest.split(b"\r\n\r\n", 1)[1]
                _LEFTOVER[s] = rest
                return status, headers, body
            body += rest[:size]
            rest = rest[size + 2:]
    while True:  # close-delimited
        c = more()
        if not c:
            return status, headers, rest
        rest += c


def status_of(raw):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None
