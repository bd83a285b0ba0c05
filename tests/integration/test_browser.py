#!/usr/bin/python3
"""The page (server/webui.c) and GET /v1/status (server/status.c): over HTTP with
curl, and in a real browser, Debian's chromium driven by puppeteer-core (pinned in
tests/browser), one scenario of tests/browser/page.mjs per test function.

Screenshots of each state go to $MINICPMD_BROWSER_ARTIFACTS (meson sets
build/meson-logs/browser). The browser tests skip (exit 77) only when chromium or
the npm package is not installed (tools/deps.sh test installs both)."""

import json
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import (Daemon, Skip, check, contains, eq, run_main, stop_ok, test,  # noqa: E402
                     wait_ready)

BROWSER = os.path.join(HERE, "..", "browser")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = os.environ.get("MINICPMD_BROWSER_ARTIFACTS") or os.path.join(
    os.environ.get("TMPDIR", "/tmp"), "minicpmd-browser")
NODE_TIMEOUT = 100            # s, one scenario (its waits are 40 s each)
JSON = {"Content-Type": "application/json"}


def demo_pack():
    p = os.environ.get("MINICPMD_DEMO_PACK")
    if not p or not os.path.isdir(p):
        raise Skip("MINICPMD_DEMO_PACK is not set (meson test sets it to build/demo-pack)")
    return os.path.abspath(p)


def serve(args=(), device="cpu"):
    d = Daemon(["--model", demo_pack(), "--device", device] + list(args))
    d.start()
    wait_ready(d, 30.0)
    d.model_id = d.get("/v1/models").json()["data"][0]["id"]
    return d


def browse(scenario, d, key=None, env=None):
    if not os.access(CHROMIUM, os.X_OK):
        raise Skip("%s is missing (tools/deps.sh test installs chromium)" % CHROMIUM)
    if not os.path.isdir(os.path.join(BROWSER, "node_modules", "puppeteer-core")):
        raise Skip("tests/browser/node_modules/puppeteer-core is missing (tools/deps.sh test)")
    if not shutil.which("node"):
        raise Skip("node is not installed")
    e = dict(os.environ)
    e.update(env or {})
    e["CHROMIUM"] = CHROMIUM
    # Chromium keeps its profile under HOME; the daemon's temporary one will do.
    e["HOME"] = os.path.join(d.tmp, "browser-home")
    argv = ["node", os.path.join(BROWSER, "page.mjs"), scenario, d.url(""), ARTIFACTS]
    if key:
        argv.append(key)
    t0 = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=NODE_TIMEOUT, env=e)
    except subprocess.TimeoutExpired as x:
        check(False, "page.mjs %s: no end in %d s; output so far:\n%s%s", scenario,
              NODE_TIMEOUT, x.stdout or "", x.stderr or "")
    print("page.mjs %s (%.1f s):\n%s%s" % (scenario, time.monotonic() - t0, out.stdout,
                                           out.stderr))
    check(out.returncode == 0, "page.mjs %s failed (exit %d)", scenario, out.returncode)


# ---- over HTTP --------------------------------------------------------------------------


@test
def page_is_served_with_a_strict_policy():
    """/, /ui/ and the assets: types, the CSP, no inline script or style in the
    HTML, every asset the page names served; HEAD too; an unknown file is a 404."""
    d = Daemon(["--model", "none"])
    d.start()
    html = d.get("/")
    eq(html.status, 200, "GET /")
    contains(html.header("content-type"), "text/html", "type of /")
    csp = html.header("content-security-policy") or ""
    for part in ("default-src 'self'", "script-src 'self'", "style-src 'self'",
                 "frame-ancestors 'none'", "object-src 'none'"):
        contains(csp, part, "CSP")
    check("unsafe" not in csp, "CSP allows something unsafe: %s", csp)
    eq(html.header("x-content-type-options"), "nosniff", "nosniff")
    body = html.text()
    check("<script>" not in body and "<style" not in body and " style=" not in body
          and " on" + "click=" not in body, "inline script or style in the page")
    eq(d.get("/ui/").body, html.body, "/ui/ is the page")
    for path, ctype in (("/ui/app.js", "text/javascript"), ("/ui/style.css", "text/css"),
                        ("/ui/icon.svg", "image/svg+xml")):
        contains(body, path, "the page names " + path)
        r = d.get(path)
        eq(r.status, 200, "GET " + path)
        contains(r.header("content-type"), ctype, "type of " + path)
        contains(r.header("content-security-policy") or "", "default-src 'self'", "CSP of " + path)
    eq(d.head("/").status, 200, "HEAD /")
    for path in ("/ui/nope.js", "/ui/../etc/passwd", "/index.html"):
        eq(d.get(path).status, 404, "GET " + path)
    eq(d.post("/", data=b"{}", headers=JSON).status, 405, "POST /")
    stop_ok(d)


@test
def no_webui_turns_the_page_off():
    d = Daemon(["--model", "none", "--no-webui"])
    d.start()
    for path in ("/", "/ui/", "/ui/app.js"):
        r = d.get(path)
        eq(r.status, 404, "GET %s with --no-webui" % path)
        contains(r.json()["error"]["message"], "--no-webui", "message")
    eq(d.get("/health").status, 503, "the API is still there")
    stop_ok(d)
    d = Daemon(["--model", "none"], env={"MINICPMD_NO_WEBUI": "true"})
    d.start()
    eq(d.get("/").status, 404, "GET / with MINICPMD_NO_WEBUI")
    stop_ok(d)


@test
def status_is_behind_the_key_and_counts_requests():
    """GET /v1/status: 401 without the key (the page itself is public); with it the
    model, device, K, ERT counts; after a request, its speed and K in `recent`."""
    d = Daemon(["--model", demo_pack(), "--device", "cpu", "--api-key", "s3cret"])
    d.start()
    wait_ready(d, 30.0)
    eq(d.get("/v1/status").status, 401, "status without the key")
    eq(d.get("/").status, 200, "the page without the key")
    auth = {"Authorization": "Bearer s3cret"}
    s = d.get("/v1/status", headers=auth).json()
    eq(s["state"], "ready", "state")
    eq(s["device"]["name"], "cpu", "device")
    check(s["device"]["description"].startswith("cpu ("), "description: %r", s["device"])
    eq(s["k"]["mode"], "auto", "K mode")
    eq(s["k"]["current"], s["k"]["n_layers"], "K on the cpu: all layers")
    eq(s["recent"], [], "recent before any request")
    eq(s["last_device_error"], None, "last device error")
    eq(sorted(s["runlists"]), sorted("ERT_CMD_STATE_" + n for n in (
        "NEW", "QUEUED", "RUNNING", "COMPLETED", "ERROR", "ABORT", "SUBMITTED", "TIMEOUT",
        "NORESPONSE", "SKERROR", "SKCRASHED")), "ERT states")
    eq(s["slots"], {"in_use": 0, "total": 4}, "slots")
    model = d.get("/v1/models", headers=auth).json()["data"][0]["id"]
    eq(s["model"]["id"], model, "model id")
    body = {"model": model, "messages": [{"role": "user", "content": "What is 12 + 30?"}],
            "max_tokens": 32}
    h = dict(JSON, **auth)
    r = d.post("/v1/chat/completions", data=json.dumps(body), headers=h, timeout=60).json()
    s = d.get("/v1/status", headers=auth).json()
    eq(len(s["recent"]), 1, "recent after one request")
    rec = s["recent"][0]
    eq(rec["completion_tokens"], r["usage"]["completion_tokens"], "completion tokens")
    eq(rec["prompt_tokens"], r["usage"]["prompt_tokens"], "prompt tokens")
    eq(rec["outcome"], {"stop": "stop", "length": "length"}[r["choices"][0]["finish_reason"]],
       "outcome")
    check(rec["decode_tps"] > 0, "decode tok/s: %r", rec)
    eq(rec["k"], s["k"]["current"], "K of the request")
    eq([c["k"] for c in s["k"]["history"]], [s["k"]["current"]], "K history")
    check(s["runlists"]["ERT_CMD_STATE_COMPLETED"] > 0, "completed runlists: %r", s["runlists"])
    eq(s["requests"]["stop"] + s["requests"]["length"], 1, "requests")
    # The ring keeps the last 16.
    for _ in range(17):
        d.post("/v1/chat/completions", data=json.dumps(dict(body, max_tokens=1)), headers=h,
               timeout=60)
    eq(len(d.get("/v1/status", headers=auth).json()["recent"]), 16, "recent is bounded")
    # The page polls it: its successes stay out of the info log, a refusal does not.
    check("GET /v1/status -> 200" not in d.log(), "a status poll logged at info")
    contains(d.log(), "GET /v1/status -> 401", "log")
    stop_ok(d)


@test
def status_shows_the_last_device_error_in_full():
    """A sim fault: the error the client got is the status's last_device_error,
    with the time it happened; the ERT counts have it."""
    d = serve(["--fault", "phase=decode,token=1,state=SKERROR"], device="sim")
    body = {"model": d.model_id, "messages": [{"role": "user", "content": "What is 12 + 30?"}],
            "max_tokens": 16}
    r = d.post("/v1/chat/completions", data=json.dumps(body), headers=JSON, timeout=60)
    got = r.json()["error"]
    s = d.get("/v1/status").json()
    last = s["last_device_error"]
    check(last and last.pop("t_ms") > 0, "last device error: %r", s["last_device_error"])
    eq(last, got, "the last device error is the client's")
    eq(s["runlists"]["ERT_CMD_STATE_SKERROR"], 1, "SKERROR runlists")
    eq(s["recent"][-1]["outcome"], "error", "outcome")
    stop_ok(d)


# ---- in chromium ------------------------------------------------------------------------


@test
def chromium_page_loads_clean():
    """No console error or CSP violation; model and device shown; 1440 and 360 px
    without horizontal scroll; dark and light; Tab reaches the controls."""
    d = serve()
    browse("load", d, env={"WANT_MODEL": d.model_id, "WANT_DEVICE": "cpu"})
    stop_ok(d)


@test
def chromium_chat_streams_thinking_and_a_tool_call():
    d = serve()
    browse("chat", d)
    stop_ok(d)


@test
def chromium_stop_cancels_the_generation():
    """Tokens are on the page while the request runs (the sim at 1 s a command makes
    the answer take tens of seconds, so the click lands mid-stream however loaded the
    machine is); Stop ends it and the daemon counts it cancelled."""
    d = serve(["--sim-latency-us", "1000000"], device="sim")
    words = "kettle timber saddle ladder garden pencil window marble copper lantern"
    browse("stop", d, env={"LONG_PROMPT": "Repeat: " + words})
    stop_ok(d)


@test
def chromium_device_fault_shows_its_ert_state():
    d = serve(["--fault", "phase=decode,token=1,state=ERROR"], device="sim")
    browse("fault", d)
    stop_ok(d)


@test
def chromium_asks_for_the_api_key():
    d = Daemon(["--model", demo_pack(), "--device", "cpu", "--api-key", "page-key-1"])
    d.start()
    wait_ready(d, 30.0)
    browse("apikey", d, key="page-key-1")
    stop_ok(d)


if __name__ == "__main__":
    run_main()
