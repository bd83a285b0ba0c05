#!/usr/bin/python3
"""systemd integration: sd_notify (READY, STATUS, EXTEND_TIMEOUT_USEC, STOPPING,
watchdog), socket activation through systemd-socket-activate, and the unit files
through systemd-analyze verify."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (REPO, Daemon, Failure, Skip, binary, check, contains, eq,  # noqa: E402
                     free_port, make_pack, pack_daemon, run_main, stop_ok, test, wait_for,
                     wait_ready)

PACK = "MiniCPM5-2B"


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notify socket."""

    def __init__(self, d, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "minicpmd-it-%d-%d" % (os.getpid(), int(time.monotonic() * 1e6))
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            path = os.path.join(d.tmp, "notify.sock")
            self.sock.bind(path)
            self.env = path
        self.messages = []      # each a list of KEY=VALUE lines
        d.env["NOTIFY_SOCKET"] = self.env

    def close(self):
        self.sock.close()

    def poll(self, timeout):
        """Receive whatever arrives within `timeout` s (at least one try)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            self.sock.settimeout(max(left, 0.001))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return
            self.messages.append(data.decode("utf-8", "replace").split("\n"))
            if time.monotonic() >= deadline:
                return

    def wait(self, pred, timeout, what):
        """Receive until some message satisfies pred; return its index."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for i in range(seen, len(self.messages)):
                if pred(self.messages[i]):
                    return i
            seen = len(self.messages)
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("no notify message with %s within %.1f s; got %r"
                              % (what, timeout, self.messages))
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            self.messages.append(data.decode("utf-8", "replace").split("\n"))

    def index(self, line):
        return self.wait(lambda m: line in m, 5, repr(line))

    def count(self, line):
        return sum(1 for m in self.messages if line in m)


def has_prefix(prefix):
    return lambda m: any(l.startswith(prefix) for l in m)


# ---- sd_notify ------------------------------------------------------------------


@test
def notify_loading_then_ready():
    d = pack_daemon(gate=True, start=False)
    ns = NotifySocket(d)
    try:
        d.start()
        wait_for(d.gate.reader_waiting, 5, "the loader to be held at the gate")
        i_load = ns.wait(lambda m: any(l.startswith("STATUS=loading") for l in m)
                         and any(re.match(r"EXTEND_TIMEOUT_USEC=\d+$", l) for l in m),
                         5, "STATUS=loading and EXTEND_TIMEOUT_USEC")
        check(ns.count("READY=1") == 0, "READY=1 while the model is still loading: %r",
              ns.messages)
        eq(d.get("/health").status, 503, "/health while loading")
        check(ns.count("READY=1") == 0, "READY=1 while loading: %r", ns.messages)
        d.gate.release()
        i_ready = ns.index("READY=1")
        check(i_load < i_ready, "loading status came after READY: %r", ns.messages)
        check(has_prefix("STATUS=ready")(ns.messages[i_ready]),
              "READY=1 without STATUS=ready...: %r", ns.messages[i_ready])
        eq(d.get("/health").status, 200, "/health after READY=1")
        stop_ok(d)
        ns.wait(lambda m: "STOPPING=1" in m, 3, "STOPPING=1")
    finally:
        d.gate.release()
        ns.close()


@test
def notify_ready_without_model():
    d = Daemon()
    ns = NotifySocket(d)
    try:
        d.start()
        i = ns.index("READY=1")
        check(has_prefix("STATUS=")(ns.messages[i]), "READY=1 without a STATUS: %r",
              ns.messages[i])
        stop_ok(d)
    finally:
        ns.close()


@test
def notify_stopping_on_sigterm():
    d = pack_daemon(start=False)
    ns = NotifySocket(d)
    try:
        d.start()
        ns.index("READY=1")
        d.send_signal(signal.SIGTERM)
        i = ns.wait(lambda m: "STOPPING=1" in m, 3, "STOPPING=1")
        eq(d.wait(5), 0, "exit code")
        check(i == len(ns.messages) - 1 or all("READY=1" not in m for m in ns.messages[i:]),
              "READY after STOPPING: %r", ns.messages)
    finally:
        ns.close()


@test
def notify_load_failure_status():
    d = Daemon()
    pack = make_pack(d.tmp, PACK, config=False)
    d.args += ["--model", pack]
    ns = NotifySocket(d)
    try:
        d.spawn()
        eq(d.wait(10), 1, "exit code when the model fails to load")
        ns.poll(0.05)
        check(ns.count("READY=1") == 0, "READY=1 for a model that failed: %r", ns.messages)
        check(any(has_prefix("ERRNO=")(m) for m in ns.messages), "no ERRNO= on failure: %r",
              ns.messages)
        check(any(has_prefix("STATUS=model failed")(m) for m in ns.messages),
              "no failure STATUS: %r", ns.messages)
    finally:
        ns.close()


@test
def notify_abstract_namespace():
    d = pack_daemon(start=False)
    ns = NotifySocket(d, abstract=True)
    try:
        check(ns.env.startswith("@"), "abstract socket name")
        d.start()
        ns.index("READY=1")
        stop_ok(d)
        ns.wait(lambda m: "STOPPING=1" in m, 3, "STOPPING=1")
    finally:
        ns.close()


@test
def notify_socket_missing_is_harmless():
    """NOTIFY_SOCKET naming nothing (or garbage) must not stop the daemon."""
    d = pack_daemon(start=False, env={"NOTIFY_SOCKET": "/nonexistent/notify.sock"})
    d.start()
    wait_ready(d)
    stop_ok(d)
    d = pack_daemon(start=False, env={"NOTIFY_SOCKET": "relative-garbage"})
    d.start()
    wait_ready(d)
    stop_ok(d)


@test
def watchdog_pings():
    d = pack_daemon(start=False, env={"WATCHDOG_USEC": "200000"})
    ns = NotifySocket(d)
    try:
        d.start()
        first = ns.index("WATCHDOG=1")
        t0 = time.monotonic()
        # Every 100 ms (half of WATCHDOG_USEC). Wait for five more pings (a state:
        # a loaded machine only makes them late), then check they were not early:
        # five intervals cannot pass in less than 0.4 s.
        ns.wait(lambda m: sum(1 for x in ns.messages[first + 1:] if "WATCHDOG=1" in x) >= 5,
                60, "five more WATCHDOG=1")
        took = time.monotonic() - t0
        check(took >= 0.4, "five WATCHDOG=1 in %.2f s: pinging far too often", took)
        stop_ok(d)
    finally:
        ns.close()


@test
def watchdog_pid_self():
    """WATCHDOG_PID equal to the daemon's own pid enables the watchdog."""
    d = pack_daemon(start=False, env={"WATCHDOG_USEC": "200000"})
    ns = NotifySocket(d)
    try:
        # exec keeps the pid: $$ of the shell is the daemon's pid.
        d.spawn(argv=["/bin/sh", "-c", 'WATCHDOG_PID=$$ exec "$@"', "sh"] + d.cmdline())
        d.wait_listening()
        ns.index("WATCHDOG=1")
        stop_ok(d)
    finally:
        ns.close()


@test
def watchdog_other_pid_no_pings():
    d = pack_daemon(start=False, env={"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"})
    ns = NotifySocket(d)
    try:
        d.start()
        ns.index("READY=1")
        ns.poll(0.6)        # six ping intervals: absence has to be waited for
        eq(ns.count("WATCHDOG=1"), 0, "WATCHDOG=1 pings meant for pid 1")
        stop_ok(d)
    finally:
        ns.close()


@test
def watchdog_malformed_is_ignored():
    d = pack_daemon(start=False, env={"WATCHDOG_USEC": "soon"})
    ns = NotifySocket(d)
    try:
        d.start()
        ns.index("READY=1")
        d.wait_log(r"warn .*WATCHDOG_USEC", 3)
        ns.poll(0.3)
        eq(ns.count("WATCHDOG=1"), 0, "WATCHDOG=1 with a malformed WATCHDOG_USEC")
        stop_ok(d)
    finally:
        ns.close()


# ---- socket activation --------------------------------------------------------------


@test
def socket_activation():
    sa = shutil.which("systemd-socket-activate")
    if not sa:
        raise Skip("systemd-socket-activate is not installed")
    d = Daemon()
    pack = make_pack(d.tmp, PACK)
    port = free_port()
    argv = [sa, "-l", "127.0.0.1:%d" % port]
    for k, v in sorted(d.env.items()):
        argv += ["-E", "%s=%s" % (k, v)]
    # --port is ignored under socket activation; give an impossible-to-bind one.
    argv += [binary(), "--port", "1", "--model", pack]
    d.spawn(argv=argv)
    d.port = port
    # The listener exists before the daemon does; the first connection starts it.
    wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True,
             5, "systemd-socket-activate to listen")
    wait_ready(d)
    eq(d.get("/health").json().get("model"), PACK, "/health model")
    log = d.log()
    contains(log, "socket activation", "log")
    contains(log, "127.0.0.1:%d" % port, "log names the activated address")
    eq(d.get("/v1/models").status, 200, "/v1/models")
    # systemd-socket-activate exec()s the daemon: its pid is the daemon's.
    stop_ok(d)
    contains(d.log(), "all requests finished", "log")


@test
def socket_activation_env_is_consumed():
    """LISTEN_* for another pid: the daemon must ignore them and listen itself."""
    d = pack_daemon(start=False, env={"LISTEN_PID": "1", "LISTEN_FDS": "1"})
    d.start()
    check("socket activation" not in d.log(), "used LISTEN_FDS meant for pid 1")
    wait_ready(d)
    stop_ok(d)


def activated_by_shell(d, setup):
    """Run the daemon through sh so LISTEN_PID can be its own pid ($$ survives exec)."""
    d.spawn(argv=["/bin/sh", "-c", setup + ' exec "$@"', "sh"] + d.cmdline())


@test
def socket_activation_malformed_env_exits_1():
    d = Daemon()
    activated_by_shell(d, "LISTEN_PID=$$ LISTEN_FDS=abc; export LISTEN_PID LISTEN_FDS;")
    eq(d.wait(10), 1, "exit code for a malformed LISTEN_FDS")
    contains(d.log(), "LISTEN_FDS", "message")


@test
def socket_activation_fd_not_listening_exits_1():
    d = Daemon()
    activated_by_shell(d, "LISTEN_PID=$$ LISTEN_FDS=1; export LISTEN_PID LISTEN_FDS; exec 3</dev/null;")
    eq(d.wait(10), 1, "exit code when fd 3 is not a listening socket")
    contains(d.log(), "fd 3 is not a listening stream socket", "message")


# ---- unit files ----------------------------------------------------------------------


def built_units():
    """systemd-analyze and a directory with the built service (ExecStart pointing
    at the binary under test) and the socket unit."""
    sa = shutil.which("systemd-analyze")
    if not sa:
        raise Skip("systemd-analyze is not installed")
    bin_path = binary()
    built = os.path.join(os.path.dirname(bin_path), "systemd", "minicpmd.service")
    check(os.path.exists(built), "no generated unit at %s", built)
    socket_unit = os.path.join(REPO, "systemd", "minicpmd.socket")
    check(os.path.exists(socket_unit), "no %s", socket_unit)
    d = Daemon()        # only for its temp dir (cleaned up by the runner)
    units = os.path.join(d.tmp, "units")
    os.makedirs(units)
    text = open(built).read()
    check(re.search(r"^ExecStart=", text, re.M), "unit has no ExecStart")
    check("@bindir@" not in text, "unit still has @bindir@")
    text = re.sub(r"^ExecStart=\S+", "ExecStart=" + bin_path, text, count=1, flags=re.M)
    with open(os.path.join(units, "minicpmd.service"), "w") as f:
        f.write(text)
    shutil.copy(socket_unit, os.path.join(units, "minicpmd.socket"))
    env = dict(d.env, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="")
    return sa, units, text, env


@test
def units_verify():
    sa, units, text, env = built_units()
    p = subprocess.run([sa, "verify", "--man=no", os.path.join(units, "minicpmd.service"),
                        os.path.join(units, "minicpmd.socket")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=30)
    out = p.stdout.decode(errors="replace")
    eq(p.returncode, 0, "systemd-analyze verify exit code; output:\n%s" % out)
    bad = [l for l in out.splitlines() if "minicpmd" in l]
    check(not bad, "systemd-analyze verify complains:\n%s", "\n".join(bad))


@test
def units_security_exposure():
    """The unit keeps `systemd-analyze security` at or below 1.7 and, by default,
    talks IP only with localhost (IPAddressDeny=any + IPAddressAllow=localhost)."""
    sa, units, text, env = built_units()
    check(re.search(r"^IPAddressDeny=any$", text, re.M), "unit lacks IPAddressDeny=any")
    check(re.search(r"^IPAddressAllow=localhost$", text, re.M),
          "unit lacks IPAddressAllow=localhost")
    p = subprocess.run([sa, "security", "--offline=yes", "--no-pager",
                        os.path.join(units, "minicpmd.service")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60)
    out = p.stdout.decode(errors="replace")
    m = re.search(r"Overall exposure level for minicpmd.service: ([0-9.]+)", out)
    check(m, "no overall exposure level in:\n%s", out[-2000:])
    level = float(m.group(1))
    print("systemd-analyze security: %.1f" % level)
    check(level <= 1.7, "exposure level %.1f is over 1.7", level)
    check(not re.search(r"^\S*\s*IPAddressDeny=.*no IP address allow list", out, re.M),
          "systemd-analyze sees no IP address filter")


if __name__ == "__main__":
    run_main()
