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

The harness is this module's names, from four modules beside it: harness_base
(outcomes, assertions, polling), harness_packs (generated and fake packs),
harness_http (curl, raw sockets) and harness_daemon (the daemon and its
recipes); this module adds the runner.
"""

import shutil
import sys
import time
import traceback

from harness_base import (REPO, SKIP_EXIT, _CLEANUP, Failure, Skip,
                          assert_error_object, binary, check, contains, eq, wait_for)
from harness_daemon import _ACTIVE, Daemon, pack_daemon, stop_ok, wait_ready
from harness_http import (Response, connect, curl, free_port,
                          read_http_response, recv_until_close, status_of)
from harness_packs import (_GENERATED, LoadGate, generated_pack, make_pack,
                           pack_binary, tiny_config_text, write_json)

# What test files import from here (the runner's own names are below).
__all__ = ["REPO", "SKIP_EXIT", "Failure", "Skip", "assert_error_object", "binary", "check",
           "contains", "eq", "wait_for",
           "Daemon", "pack_daemon", "stop_ok", "wait_ready",
           "Response", "connect", "curl", "free_port", "read_http_response", "recv_until_close",
           "status_of",
           "LoadGate", "generated_pack", "make_pack", "pack_binary", "tiny_config_text",
           "write_json",
           "test", "run_main"]


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
