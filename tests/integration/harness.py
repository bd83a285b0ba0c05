"""Black-box integration harness for minicpmd.

Starts the real binary ($MINICPMD_BIN) on a kernel-chosen loopback port in a
fresh temporary directory, talks to it with curl (HTTP checks) and raw sockets
(malformed input), and stops it with a signal. Python 3 standard library only;
run with /usr/bin/python3.

Every wait has a deadline, and every daemon a test starts is killed when the
test ends, whatever happened. A test fails when the daemon's stderr shows an
AddressSanitizer, LeakSanitizer or UBSan report.

A test file registers functions with @test and ends with `run_main()`:
    python3 test_http.py            run every test of the file
    python3 test_http.py NAME...    run the named tests (exit 0 pass, 1 fail, 77 skip)
    python3 test_http.py --list     print the test names, one a line
"""

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

SKIP_EXIT = 77

# What the harness treats as a sanitizer finding in the daemon's stderr.
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")

LISTEN_RE = re.compile(r"listening on http://(\[[0-9a-fA-F:.]+\]|[0-9.]+|[^ :]+):(\d+)")


class Failure(Exception):
    """A test assertion failed."""


class Skip(Exception):
    """The test cannot run here (exit 77, which meson reports as SKIP)."""


def binary():
    b = os.environ.get("MINICPMD_BIN")
    if not b:
        for cand in (os.path.join(REPO, "build", "minicpmd"),):
            if os.path.exists(cand):
                b = cand
                break
    if not b or not os.access(b, os.X_OK):
        raise Failure("set MINICPMD_BIN to the minicpmd binary (tried %r)" % b)
    return os.path.abspath(b)


# ---- assertions ---------------------------------------------------------------


def check(cond, msg, *args):
    if not cond:
        raise Failure(msg % args if args else msg)


def eq(got, want, what="value"):
    if got != want:
        raise Failure("%s: expected %r, got %r" % (what, want, got))


def contains(haystack, needle, what="text"):
    if needle not in haystack:
        raise Failure("%s: expected to contain %r, got %r" % (what, needle, _clip(haystack)))


def _clip(s, n=2000):
    if isinstance(s, (bytes, bytearray)):
        s = bytes(s).decode("utf-8", "replace")
    s = str(s)
    return s if len(s) <= n else s[:n] + "...(%d more)" % (len(s) - n)


def wait_for(pred, timeout, what, interval=0.02):
    """Poll pred() until it returns a truthy value; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except (OSError, Failure) as e:  # keep polling, remember why
            last_exc = e
        if time.monotonic() >= deadline:
            raise Failure("timed out after %.1f s waiting for %s%s"
                          % (timeout, what, " (last error: %s)" % last_exc if last_exc else ""))
        time.sleep(interval)


def assert_error_object(resp, status=None, type_=None, code=None, param="__any__"):
    """The body is an OpenAI error object with all four keys present."""
    if status is not None:
        eq(resp.status, status, "HTTP status")
    check(resp.status >= 400, "expected an error status, got %d", resp.status)
    ct = resp.header("content-type") or ""
    check(ct.startswith("application/json"), "error Content-Type is %r", ct)
    body = resp.json()
    check(isinstance(body, dict) and set(body) == {"error"},
          "error body must be {\"error\": {...}}, got %r", body)
    err = body["error"]
    check(isinstance(err, dict), "error must be an object, got %r", err)
    for k in ("message", "type", "param", "code"):
        check(k in err, "error object lacks key %r: %r", k, err)
    check(isinstance(err["message"], str) and err["message"], "error.message empty: %r", err)
    check(isinstance(err["type"], str) and err["type"], "error.type empty: %r", err)
    check(err["param"] is None or isinstance(err["param"], str), "error.param: %r", err)
    check(err["code"] is None or isinstance(err["code"], str), "error.code: %r", err)
    if type_ is not None:
        eq(err["type"], type_, "error.type")
    if code is not None:
        eq(err["code"], code, "error.code")
    if param != "__any__":
        eq(err["param"], param, "error.param")
    return err


# ---- fixtures -----------------------------------------------------------------


TINY_TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                              "tiny-tokenizer.json")


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def pack_binary():
    b = os.environ.get("MINICPMD_PACK_BIN")
    if not b:
        b = os.path.join(os.path.dirname(binary()), "minicpmd-pack")
    if not os.access(b, os.X_OK):
        raise Failure("set MINICPMD_PACK_BIN to the minicpmd-pack binary (tried %r)" % b)
    return b


_GENERATED = {}


def generated_pack(preset="tiny", seed=1, extra=()):
    """A pack `minicpmd-pack gen` wrote (once per process and arguments), shared:
    copy it before changing anything in it."""
    key = (preset, seed, tuple(extra))
    if key not in _GENERATED:
        out = os.path.join(tempfile.mkdtemp(prefix="minicpmd-pack-"), preset)
        _CLEANUP.append(os.path.dirname(out))
        subprocess.run([pack_binary(), "gen", "--preset", preset, "--seed", str(seed),
                        "--out", out] + list(extra),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _GENERATED[key] = out
    return _GENERATED[key]


def tiny_config_text():
    with open(os.path.join(generated_pack(), "config.json")) as f:
        return f.read()


def make_pack(parent, name="MiniCPM5-2B", config=True, fifo=False):
    """A small real pack directory (the `tiny` preset's random weights) with the unit
    tests' byte-level BPE tokenizer.json fixture. fifo=True makes config.json a FIFO
    so the loader blocks until FifoConfig.release() writes it."""
    d = os.path.join(parent, name)
    shutil.copytree(generated_pack(), d, dirs_exist_ok=True)
    cfg = os.path.join(d, "config.json")
    os.remove(cfg)
    if fifo:
        os.mkfifo(cfg)
    elif config:
        with open(cfg, "w") as f:
            f.write(tiny_config_text())
    shutil.copyfile(TINY_TOKENIZER, os.path.join(d, "tokenizer.json"))
    return d


class FifoConfig:
    """Holds a pack's config.json FIFO; release() feeds it so loading finishes.
    release() is idempotent and bounded: safe to call from finally."""

    def __init__(self, path, content=None):
        self.path = path
        self.content = (tiny_config_text() if content is None else content).encode()
        self.released = False

    def reader_waiting(self):
        """True once a reader has the FIFO open (the loader is blocked on it)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return False
            raise
        # A reader is there. Keep the fd: release() writes through it.
        if getattr(self, "_fd", None) is not None:
            os.close(fd)
        else:
            self._fd = fd
        return True

    def release(self, timeout=5.0):
        if self.released:
            return True
        deadline = time.monotonic() + timeout
        fd = getattr(self, "_fd", None)
        while fd is None:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                if time.monotonic() >= deadline:
                    return False  # nobody is reading: nothing blocks on us
                time.sleep(0.02)
        try:
            os.set_blocking(fd, True)
            os.write(fd, self.content)
        finally:
            os.close(fd)
            self._fd = None
        self.released = True
        return True


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


# ---- the daemon ---------------------------------------------------------------

_ACTIVE = []        # daemons (and other processes) of the running test
_CLEANUP = []       # directories to remove when the test process ends


def _die_with_parent():
    """preexec_fn: the daemon gets SIGKILL if this runner dies (e.g. a meson
    timeout kills it), so nothing lingers. Linux prctl(PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)     # PR_SET_PDEATHSIG = 1
    except Exception:
        pass


class Daemon:
    """One minicpmd process in its own temporary directory.

    Daemon(args=[...], env={...}) prepares the directory; start() runs the binary
    and (by default) waits for the "listening on" line and a first answer.
    """

    def __init__(self, args=(), env=None, port0=True, tmp=None, config_file=None):
        self.tmp = tmp or tempfile.mkdtemp(prefix="minicpmd-it-")
        self.owns_tmp = tmp is None
        self.home = os.path.join(self.tmp, "home")
        for sub in ("", ".config", ".local/share", ".local/state", ".cache", "run"):
            os.makedirs(os.path.join(self.home, sub), exist_ok=True)
        os.chmod(os.path.join(self.home, "run"), 0o700)
        self.empty_config = write_json(os.path.join(self.tmp, "empty-config.json"), {})
        self.args = list(args)
        self.fixed_port = None
        if port0 and not any(a == "--port" or a.startswith("--port=") for a in self.args):
            quiet = any(a in ("warn", "error") and i and self.args[i - 1] == "--log-level"
                        for i, a in enumerate(self.args))
            if quiet:
                # No "listening on" line at this level: choose the port ourselves.
                self.fixed_port = free_port()
                self.args = ["--port", str(self.fixed_port)] + self.args
            else:
                self.args = ["--port", "0"] + self.args
        self.env = self.base_env()
        # The build serves its demo pack when no model is found; a test that
        # wants the model-less daemon gets it unless it names a model itself
        # (flags beat the environment) or drops this.
        self.env["MINICPMD_MODEL"] = "none"
        if config_file is not None:
            self.env["MINICPMD_CONFIG"] = config_file
        self.env.update(env or {})
        self.stderr_path = os.path.join(self.tmp, "stderr.log")
        self.extra_logs = []        # further files log() reads (a --log-file)
        self.stdout_path = os.path.join(self.tmp, "stdout.log")
        self.proc = None
        self.port = None
        self.host = "127.0.0.1"
        self.rc = None
        _ACTIVE.append(self)

    def base_env(self):
        h = self.home
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": h,
            "XDG_CONFIG_HOME": os.path.join(h, ".config"),
            "XDG_DATA_HOME": os.path.join(h, ".local/share"),
            "XDG_STATE_HOME": os.path.join(h, ".local/state"),
            "XDG_CACHE_HOME": os.path.join(h, ".cache"),
            "XDG_RUNTIME_DIR": os.path.join(h, "run"),
            "LANG": "C.UTF-8",
            # Never read /etc/minicpmd/config.json.
            "MINICPMD_CONFIG": self.empty_config,
        }
        for k, v in os.environ.items():
            if k.startswith(("ASAN_", "UBSAN_", "LSAN_", "TSAN_", "MSAN_")) or k == "MALLOC_PERTURB_":
                env[k] = v
        # Harmless without ASan; with it, use of a dead stack frame is caught.
        asan = env.get("ASAN_OPTIONS", "")
        if "detect_stack_use_after_return" not in asan:
            env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "detect_stack_use_after_return=1"
        return env

    # -- process control --

    def cmdline(self):
        return [binary()] + self.args

    def spawn(self, argv=None, env=None):
        """Start the process (no waiting)."""
        self.out_f = open(self.stdout_path, "wb")
        self.err_f = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv or self.cmdline(), env=env or self.env,
                                     stdin=subprocess.DEVNULL, stdout=self.out_f,
                                     stderr=self.err_f, cwd=self.tmp,
                                     preexec_fn=_die_with_parent)
        return self

    def start(self, wait_ready=True, timeout=10.0):
        self.spawn()
        if wait_ready:
            self.wait_listening(timeout)
            self.wait_answering(timeout)
        return self

    def wait_listening(self, timeout=10.0):
        if self.fixed_port:
            self.port = self.fixed_port
            return self.port

        def found():
            m = LISTEN_RE.search(self.log())
            if m:
                return m
            if self.proc.poll() is not None:
                raise _Exited()
            return None
        try:
            m = wait_for(found, timeout, "the 'listening on' log line")
        except _Exited:
            raise Failure("daemon exited with %s before listening" % self.proc.returncode)
        host = m.group(1).strip("[]")
        self.host = host if host not in ("0.0.0.0", "::") else "127.0.0.1"
        self.port = int(m.group(2))
        return self.port

    def wait_answering(self, timeout=10.0):
        def ok():
            if self.proc.poll() is not None:
                raise _Exited()
            s = socket.create_connection((self.host, self.port), timeout=1)
            s.close()
            return True
        try:
            wait_for(ok, timeout, "the daemon to accept connections")
        except _Exited:
            raise Failure("daemon exited with %s" % self.proc.returncode)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def wait(self, timeout=10.0):
        """Wait for exit; fail (after killing it) if it does not exit in time."""
        try:
            self.rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure("daemon did not exit within %.1f s" % timeout)
        return self.rc

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Signal the daemon and wait; returns (exit code, log)."""
        self.send_signal(sig)
        rc = self.wait(timeout)
        return rc, self.log()

    def kill(self):
        if self.alive():
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def run(self, timeout=10.0):
        """Run to completion (for --check and config errors): (rc, stdout, stderr)."""
        self.spawn()
        self.wait(timeout)
        return self.rc, self.stdout(), self.log()

    def cleanup(self):
        self.kill()
        for f in (getattr(self, "out_f", None), getattr(self, "err_f", None)):
            if f:
                f.close()
        if self.owns_tmp and not os.environ.get("MINICPMD_IT_KEEP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- output --

    def log(self):
        """stderr, then each of extra_logs that exists."""
        out = []
        for p in [self.stderr_path] + list(self.extra_logs):
            try:
                with open(p, "rb") as f:
                    out.append(f.read().decode("utf-8", "replace"))
            except FileNotFoundError:
                pass
        return "".join(out)

    def stdout(self):
        try:
            with open(self.stdout_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, pattern, timeout=5.0):
        """Wait until the log matches regex `pattern`; returns the match."""
        rx = re.compile(pattern)
        return wait_for(lambda: rx.search(self.log()), timeout, "log line /%s/" % pattern)

    def sanitizer_report(self):
        log = self.log()
        for m in SANITIZER_MARKERS:
            if m in log:
                return m
        return None

    # -- HTTP --

    def url(self, path):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%d%s" % (host, self.port, path)

    def get(self, path, **kw):
        return curl(self.url(path), "GET", workdir=self.tmp, **kw)

    def head(self, path, **kw):
        return curl(self.url(path), "HEAD", workdir=self.tmp, **kw)

    def post(self, path, data=b"", **kw):
        return curl(self.url(path), "POST", data=data, workdir=self.tmp, **kw)

    def request(self, method, path, **kw):
        return curl(self.url(path), method, workdir=self.tmp, **kw)

    def connect(self, timeout=2.0):
        return connect(self.port, self.host, timeout)

    def raw(self, data, timeout=5.0):
        """Send raw bytes on a new connection, half-close, read until close."""
        s = self.connect()
        try:
            s.sendall(data)
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return recv_until_close(s, timeout)[0]
        finally:
            s.close()

    def metrics(self, headers=None):
        r = self.get("/metrics", headers=headers)
        eq(r.status, 200, "/metrics status")
        return r.text()


class _Exited(Exception):
    pass


# ---- common recipes -----------------------------------------------------------


def pack_daemon(args=(), name="MiniCPM5-2B", fifo=False, env=None, start=True, ready=True):
    """A daemon serving a fresh fake pack given by path. With fifo=True the pack's
    config.json is a FIFO and d.fifo (a FifoConfig) holds the loader back."""
    d = Daemon(args, env)
    d.pack = make_pack(d.tmp, name, fifo=fifo)
    d.fifo = FifoConfig(os.path.join(d.pack, "config.json")) if fifo else None
    d.args += ["--model", d.pack]
    if start:
        d.start()
        if ready and not fifo:
            wait_ready(d)
    return d


def wait_ready(d, timeout=10.0):
    """Poll /health until it says 200 ok."""
    def ok():
        if not d.alive():
            raise Failure("daemon exited (%s) while waiting for /health 200" % d.proc.returncode)
        return d.get("/health").status == 200
    wait_for(ok, timeout, "/health to answer 200", interval=0.02)


def stop_ok(d, sig=signal.SIGTERM, timeout=10.0):
    """Stop the daemon; it must exit 0. Returns the log."""
    if getattr(d, "fifo", None) is not None:
        d.fifo.release()
    rc, log = d.stop(sig, timeout)
    eq(rc, 0, "daemon exit code after %s" % signal.Signals(sig).name)
    return log


# ---- the runner ---------------------------------------------------------------

_TESTS = []


def test(fn):
    """Register a test function (name = function name)."""
    _TESTS.append(fn)
    return fn


def _tail(text, n=40, width=400):
    lines = text.rstrip("\n").split("\n")
    return "\n".join(l if len(l) <= width else l[:width] + "...(%d more)" % (len(l) - width)
                     for l in lines[-n:])


def _run_one(fn):
    del _ACTIVE[:]
    t0 = time.monotonic()
    outcome, detail = "PASS", ""
    try:
        fn()
    except Skip as e:
        outcome, detail = "SKIP", str(e)
    except Failure as e:
        outcome, detail = "FAIL", "%s\n%s" % (e, "".join(traceback.format_tb(e.__traceback__)[-3:]))
    except Exception:  # a bug in the test or an unexpected transport error
        outcome, detail = "FAIL", traceback.format_exc()
    finally:
        daemons = list(_ACTIVE)
        for d in daemons:
            try:
                if isinstance(d, Daemon) and d.alive():
                    if outcome == "PASS":
                        outcome, detail = "FAIL", "test left a daemon running (killed it)"
                d.cleanup_pending_log = d.log() if isinstance(d, Daemon) else ""
            except Exception:
                pass
        # Sanitizer reports: from any daemon of the test, even one that exited.
        for d in daemons:
            if isinstance(d, Daemon):
                rep = d.sanitizer_report()
                if rep and outcome != "FAIL":
                    outcome, detail = "FAIL", "daemon stderr has a sanitizer report (%s)" % rep
        if outcome == "FAIL":
            for i, d in enumerate(daemons):
                if isinstance(d, Daemon):
                    detail += ("\n--- daemon %d: %s\n--- exit %s; stderr (tail):\n%s"
                               % (i, " ".join(d.cmdline()),
                                  d.proc.returncode if d.proc else "not started",
                                  _tail(getattr(d, "cleanup_pending_log", "") or d.log())))
                    if d.stdout():
                        detail += "\n--- stdout (tail):\n%s" % _tail(d.stdout(), 10)
        for d in daemons:
            try:
                d.cleanup()
            except Exception:
                pass
        del _ACTIVE[:]
        for p in _CLEANUP:
            shutil.rmtree(p, ignore_errors=True)
        del _CLEANUP[:]
        _GENERATED.clear()
    return outcome, detail, time.monotonic() - t0


def run_main():
    names = [f.__name__ for f in _TESTS]
    if len(set(names)) != len(names):
        print("duplicate test names in %s" % sys.argv[0], file=sys.stderr)
        sys.exit(2)
    argv = sys.argv[1:]
    if argv == ["--list"]:
        for n in names:
            print(n)
        return
    wanted = argv or names
    by_name = {f.__name__: f for f in _TESTS}
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        print("unknown test(s): %s (try --list)" % ", ".join(unknown), file=sys.stderr)
        sys.exit(2)
    results = []
    for n in wanted:
        outcome, detail, secs = _run_one(by_name[n])
        print("%-4s %s (%.2f s)%s" % (outcome, n, secs, ("\n" + detail) if detail else ""),
              flush=True)
        results.append(outcome)
    if "FAIL" in results:
        sys.exit(1)
    if results and all(r == "SKIP" for r in results):
        sys.exit(SKIP_EXIT)
    sys.exit(0)
