"""The daemon under test: one minicpmd process in its own temporary directory,
started on loopback, watched for sanitizer reports, stopped with a signal; and the
common recipes (a daemon serving a fresh fake pack, waiting for /health 200,
stopping it with exit 0)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile

from harness_base import TIME_SCALE, Failure, binary, eq, wait_for
from harness_http import connect, curl, free_port, recv_until_close
from harness_packs import LoadGate, make_pack, write_json

# ---- the daemon ---------------------------------------------------------------

# What the harness treats as a sanitizer finding in the daemon's stderr.
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")

LISTEN_RE = re.compile(r"listening on http://(\[[0-9a-fA-F:.]+\]|[0-9.]+|[^ :]+):(\d+)")

_ACTIVE = []        # daemons (and other processes) of the running test


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
            self.rc = self.proc.wait(timeout=timeout * TIME_SCALE)
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
        """POST as the SDKs do, with Content-Type: application/json unless the
        caller names one (curl's own default is a form type, answered 415)."""
        headers = dict(kw.pop("headers", None) or {})
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        return curl(self.url(path), "POST", data=data, headers=headers, workdir=self.tmp, **kw)

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


def pack_daemon(args=(), name="MiniCPM5-2B", gate=False, env=None, start=True, ready=True):
    """A daemon serving a fresh fake pack given by path. With gate=True d.gate (a
    LoadGate) holds the loader back until d.gate.release()."""
    d = Daemon(args, env)
    d.pack = make_pack(d.tmp, name)
    d.gate = LoadGate(d.tmp) if gate else None
    if gate:
        d.env.update(d.gate.env())
    d.args += ["--model", d.pack]
    if start:
        d.start()
        if ready and not gate:
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
    if getattr(d, "gate", None) is not None:
        d.gate.release()
    rc, log = d.stop(sig, timeout)
    eq(rc, 0, "daemon exit code after %s" % signal.Signals(sig).name)
    return log
