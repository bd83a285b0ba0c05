#!/usr/bin/python3
"""The official OpenAI Node SDK (npm `openai`, pinned in tests/oracle) against the
real daemon: models.list / models.retrieve and the SDK's error classes. Skips
(exit 77) only when the npm oracles are not installed."""

import os
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import Skip, check, make_pack, Daemon, run_main, stop_ok, test, wait_ready  # noqa: E402

ORACLE = os.path.join(HERE, "..", "oracle")


@test
def openai_sdk_models():
    if not os.path.isdir(os.path.join(ORACLE, "node_modules", "openai")):
        raise Skip("tests/oracle/node_modules/openai is missing (tools/deps.sh test installs it)")
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


if __name__ == "__main__":
    run_main()
