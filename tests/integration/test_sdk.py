#!/usr/bin/python3
"""The official OpenAI Node SDK (npm `openai`, pinned in tests/oracle) against the
real daemon: models.list / models.retrieve and the SDK's error classes
(tests/oracle/sdk-check.mjs), and chat.completions on the tiny pack, one scenario
of tests/oracle/sdk-chat.mjs per test function (so one meson test each).

Skips (exit 77) only when the npm oracles are not installed (tools/deps.sh test)."""

import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import (Skip, check, make_pack, Daemon, generated_pack, pack_daemon,  # noqa: E402
                     run_main, stop_ok, test, wait_ready)

ORACLE = os.path.join(HERE, "..", "oracle")
PACK = "MiniCPM5-2B"          # pack_daemon()'s model id
SDK_TIMEOUT = 50              # s, for one node run (each meson test has 60)


def need_sdk():
    if not os.path.isdir(os.path.join(ORACLE, "node_modules", "openai")):
        raise Skip("tests/oracle/node_modules/openai is missing (tools/deps.sh test installs it)")
    if not shutil.which("node"):
        raise Skip("node is not installed")


def sdk_chat(d, scenario, model=PACK, key="unused", timeout=SDK_TIMEOUT):
    """Run one sdk-chat.mjs scenario against daemon d; fail with its output."""
    t0 = time.monotonic()
    try:
        out = subprocess.run(["node", os.path.join(ORACLE, "sdk-chat.mjs"), scenario,
                              d.url("/v1"), key, model],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        check(False, "sdk-chat.mjs %s: no answer in %d s; output so far:\n%s%s", scenario,
              timeout, e.stdout or "", e.stderr or "")
    print("sdk-chat.mjs %s (%.1f s):\n%s" % (scenario, time.monotonic() - t0, out.stdout.rstrip()))
    check(out.returncode == 0, "sdk-chat.mjs %s failed (exit %d):\n%s%s", scenario,
          out.returncode, out.stdout, out.stderr)


def run_on_tiny(scenario, args=(), key="unused"):
    need_sdk()
    d = pack_daemon(list(args))
    sdk_chat(d, scenario, key=key)
    stop_ok(d)


@test
def openai_sdk_models():
    need_sdk()
    d = Daemon(["--api-key", "sdk-key"])
    # A FastFlowLM-style tag, so the id has a ':' in it.
    flm = os.path.join(d.tmp, "home", ".config", "flm")
    os.makedirs(os.path.join(flm, "models"), exist_ok=True)
    make_pack(os.path.join(flm, "models"), "MiniCPM5-2B-NPU2")
    with open(os.path.join(flm, "model_list.json"), "w") as f:
        f.write('{"model_path":"models","models":{"minicpm5":{"2b":{"name":"MiniCPM5-2B-NPU2"}}}}')
    d.args += ["--model", "minicpm5:2b"]
    d.start()
    wait_ready(d)
    out = subprocess.run(["node", os.path.join(ORACLE, "sdk-check.mjs"), d.url("/v1"), "sdk-key",
                          "minicpm5:2b"], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, "SDK check failed:\n%s%s", out.stdout, out.stderr)
    stop_ok(d)


# ---- chat.completions through the SDK (tests/oracle/sdk-chat.mjs) ----------------------


@test
def sdk_chat_nonstream():
    """create(): the ChatCompletion shape; text-part content, system and developer."""
    run_on_tiny("nonstream")


@test
def sdk_chat_stream_for_await():
    """stream: true read with `for await`, and the SDK's stream() helper."""
    run_on_tiny("stream")


@test
def sdk_chat_include_usage():
    run_on_tiny("include_usage")


@test
def sdk_chat_stop():
    """stop (string and list), taken from a first greedy run: finish_reason stop and
    the text ends before it, streamed or not."""
    run_on_tiny("stop")


@test
def sdk_chat_max_tokens_length():
    run_on_tiny("max_tokens_length")


@test
def sdk_chat_seed_deterministic():
    run_on_tiny("seed")


@test
def sdk_chat_n_choices():
    """n: 3 at temperature 1, streamed and not: indexes, seeds per choice, usage."""
    run_on_tiny("n_choices")


@test
def sdk_chat_stream_logprobs():
    """Streamed logprobs hold one entry per sampled token, like the non-streamed ones."""
    run_on_tiny("stream_logprobs")


@test
def sdk_chat_stream_equals_nonstream():
    run_on_tiny("stream_equals_nonstream")


@test
def sdk_chat_errors():
    """BadRequestError, NotFoundError, AuthenticationError (and context_length_exceeded)."""
    run_on_tiny("errors", ["--api-key", "sdk-key", "--ctx-size", "256"], key="sdk-key")


@test
def sdk_chat_device_error():
    """A device fault: InternalServerError (503 + Retry-After after a reset, device_error
    ert_cmd_state_timeout);
    mid-stream, the SDK's APIError from the error event."""
    need_sdk()
    d = Daemon(["--device", "sim", "--sim-runlist-limit", "36", "--sim-timeout-ms", "300",
                "--runlist-layers", "all"])
    d.args += ["--model", generated_pack("deep")]
    d.start()
    wait_ready(d, 30)
    sdk_chat(d, "device_error", model="deep")
    check(d.get("/health").status == 200, "/health after the device faults")
    stop_ok(d)


SLOW = ["--device", "sim", "--sim-latency-us", "2000"]


@test
def sdk_chat_abort_stream():
    """controller.abort() mid-stream: the worker is idle again and the request is
    counted as cancelled in /metrics."""
    run_on_tiny("abort_stream", SLOW)


@test
def sdk_chat_abort_nonstream():
    run_on_tiny("abort_nonstream", SLOW)


@test
def sdk_chat_abort_queued():
    """abort() of a stream waiting in the queue, then of the running one. The sim
    at 20 ms a command keeps the first stream's unread output small (at 2 ms a
    loaded machine let it fill the socket first: a slow client, cancelled before
    the second stream was queued)."""
    run_on_tiny("abort_queued", ["--device", "sim", "--sim-latency-us", "20000"])


@test
def sdk_chat_tools():
    """tools with tool_choice auto are accepted; the answer is well formed."""
    run_on_tiny("tools_request")


@test
def sdk_chat_tools_stream():
    """tools with a named tool_choice, streamed: well-formed chunks."""
    run_on_tiny("tools_stream")


@test
def sdk_chat_tool_round_trip():
    """A conversation with an assistant tool call and a tool message: 200."""
    run_on_tiny("tools_conversation")


if __name__ == "__main__":
    run_main()
