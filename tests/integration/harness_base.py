"""The integration harness's base: where the repository and the binary are, the
test outcomes (Failure, Skip and the exit code 77), the assertions, polling with a
deadline, and the directories a test process removes when a test ends."""

import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

SKIP_EXIT = 77

_CLEANUP = []       # directories to remove when the test process ends


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


# Every wait for a state (wait_for, Daemon.wait, …) is bounded only against a hang:
# its deadline is the test's `timeout` times this, so a machine that is loaded
# (2 cores, stress-ng beside the suite, ASan) makes a test slower, never red.
# MINICPMD_TEST_TIME_SCALE=1 gives the bare numbers.
TIME_SCALE = float(os.environ.get("MINICPMD_TEST_TIME_SCALE", "4"))


def wait_for(pred, timeout, what, interval=0.02):
    """Poll pred() until it returns a truthy value; fail after `timeout` s (times
    TIME_SCALE)."""
    timeout *= TIME_SCALE
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
