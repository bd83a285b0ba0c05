#!/usr/bin/python3
"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through
the official Anthropic TypeScript SDK (npm @anthropic-ai/sdk, pinned in
tests/oracle), one scenario of tests/oracle/sdk-messages.mjs per test, against the
trained demo model (MINICPMD_DEMO_PACK) on held-out instances of the prompts it
was trained for (tools/train/corpus.py, as tests/integration/skills.py asks them):
create and stream (the SDK's accumulator ends in the same Message), a get_weather
tool round trip that answers right, thinking on and off, count_tokens, errors in
Anthropic's shape, and forced tool calls cut by max_tokens leaving no markup in
the text.

Skips (exit 77) when the npm oracles are not installed (tools/deps.sh test)."""

import json
import os
import random
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))

from harness import (Daemon, Skip, check, generated_pack, run_main, stop_ok, test,  # noqa: E402
                     wait_ready)
import corpus  # noqa: E402

ORACLE = os.path.join(ROOT, "tests", "oracle")
SDK_TIMEOUT = 50              # s, for one node run (each meson test has 60)
SEED = 31
KEY = "anthropic-key"


def demo_daemon(args=(), pack=None):
    p = pack or os.environ.get("MINICPMD_DEMO_PACK")
    if not p or not os.path.isdir(p):
        raise Skip("MINICPMD_DEMO_PACK is not set (meson test sets it to build/demo-pack)")
    if not os.path.isdir(os.path.join(ORACLE, "node_modules", "@anthropic-ai", "sdk")):
        raise Skip("tests/oracle/node_modules/@anthropic-ai/sdk is missing "
                   "(tools/deps.sh test installs it)")
    if not shutil.which("node"):
        raise Skip("node is not installed")
    d = Daemon(["--model", os.path.abspath(p), "--device", "cpu", "--api-key", KEY] + list(args))
    d.start()
    wait_ready(d, 30.0)
    d.model_id = d.get("/v1/models", headers={"Authorization": "Bearer " + KEY}).json()["data"][0]["id"]
    return d


def scenario(name, data=None, args=(), pack=None):
    d = demo_daemon(args, pack)
    t0 = time.monotonic()
    try:
        out = subprocess.run(["node", os.path.join(ORACLE, "sdk-messages.mjs"), name, d.url(""),
                              KEY, d.model_id, json.dumps(data or {})],
                             capture_output=True, text=True, timeout=SDK_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        check(False, "sdk-messages.mjs %s: no answer in %d s; output so far:\n%s%s", name,
              SDK_TIMEOUT, e.stdout or "", e.stderr or "")
    print("sdk-messages.mjs %s (%.1f s):\n%s" % (name, time.monotonic() - t0, out.stdout.rstrip()))
    check(out.returncode == 0, "sdk-messages.mjs %s failed (exit %d):\n%s%s", name,
          out.returncode, out.stdout, out.stderr)
    stop_ok(d)


def weather(r, n):
    out = []
    for _ in range(n):
        city = corpus.city(r, True)
        out.append({"ask": f"What's the weather in {city}?", "expect": city,
                    "temp": corpus.temp(r), "sky": r.choice(corpus.SKIES)})
    return out


@test
def anthropic_create_stream():
    """create and stream (finalMessage, the raw events in order), system blocks,
    max_tokens and stop_sequences."""
    r = random.Random(SEED)
    echo = []
    for _ in range(3):
        s = corpus.echo_words(r, True)
        echo.append({"ask": f"Repeat after me: {s}", "expect": s})
    scenario("create_stream", {"echo": echo})


@test
def anthropic_tool_round_trip():
    """get_weather called with the city asked, and the result answered, streamed
    and not; tool_choice any / tool / none."""
    scenario("tools", {"weather": weather(random.Random(SEED + 1), 3)})


@test
def anthropic_thinking():
    """thinking enabled: a thinking block and the right sum; disabled: none."""
    r = random.Random(SEED + 2)
    arith = []
    for _ in range(2):
        q, _a, _w, c = corpus.arith(r, True)
        arith.append({"ask": q, "expect": c})
    scenario("thinking", {"arith": arith})


@test
def anthropic_count_tokens():
    """count_tokens equals create's input tokens (cache-read ones included)."""
    scenario("count_tokens", {"ask": weather(random.Random(SEED + 3), 1)[0]["ask"]})


@test
def anthropic_errors():
    scenario("errors")


@test
def anthropic_cut_call_no_markup():
    """A forced get_weather call cut by max_tokens 1..24: no tool-call markup in any
    text block, streamed or not."""
    scenario("cut", {"ask": weather(random.Random(SEED + 4), 1)[0]["ask"]})


@test
def anthropic_device_error():
    """A device fault (the sim's runlists time out): api_error keeping the fault's
    fields, whole and as a stream's error event."""
    scenario("device_error", args=["--device", "sim", "--sim-runlist-limit", "36",
                                   "--sim-timeout-ms", "300", "--runlist-layers", "all"],
             pack=generated_pack("deep"))


if __name__ == "__main__":
    run_main()
