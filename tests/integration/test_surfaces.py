#!/usr/bin/python3
"""The API surfaces beside chat completions, through their official clients against
the real daemon on the tiny pack: POST /v1/completions with the OpenAI Node SDK
(tests/oracle/sdk-completions.mjs), one scenario per test function.

Skips (exit 77) only when the npm oracles are not installed (tools/deps.sh test)."""
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import Skip, check, pack_daemon, run_main, stop_ok, test  # noqa: E402

ORACLE = os.path.join(HERE, "..", "oracle")
PACK = "MiniCPM5-2B"
NODE_TIMEOUT = 50


def need(module):
    if not os.path.isdir(os.path.join(ORACLE, "node_modules", module)):
        raise Skip("tests/oracle/node_modules/%s is missing (tools/deps.sh test installs it)"
                   % module)
    if not shutil.which("node"):
        raise Skip("node is not installed")


def node(script, scenario, base, args=(), module="openai", key="unused"):
    """Run one scenario of tests/oracle/SCRIPT against a fresh daemon."""
    need(module)
    d = pack_daemon(list(args))
    t0 = time.monotonic()
    try:
        out = subprocess.run(["node", os.path.join(ORACLE, script), scenario, d.url(base), key,
                              PACK], capture_output=True, text=True, timeout=NODE_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        check(False, "%s %s: no answer in %d s; output so far:\n%s%s", script, scenario,
              NODE_TIMEOUT, e.stdout or "", e.stderr or "")
    print("%s %s (%.1f s):\n%s" % (script, scenario, time.monotonic() - t0, out.stdout.rstrip()))
    check(out.returncode == 0, "%s %s failed (exit %d):\n%s%s", script, scenario,
          out.returncode, out.stdout, out.stderr)
    stop_ok(d)


@test
def sdk_completions_nonstream():
    """completions.create: the Completion shape, token-id and array prompts, echo,
    stop, max_tokens -1."""
    node("sdk-completions.mjs", "nonstream", "/v1")


@test
def sdk_completions_logprobs():
    """Legacy logprobs (tokens, token_logprobs, top_logprobs, text_offset), streamed
    and not, equal."""
    node("sdk-completions.mjs", "logprobs", "/v1")


@test
def sdk_completions_stream():
    """stream with echo and stream_options.include_usage."""
    node("sdk-completions.mjs", "stream", "/v1")


@test
def sdk_completions_errors():
    """suffix, several prompts, echo with logprobs, n 2, logprobs 6, max_tokens 0: 400
    naming the param (BadRequestError); an unknown model: NotFoundError."""
    node("sdk-completions.mjs", "errors", "/v1")


if __name__ == "__main__":
    run_main()
