#!/usr/bin/env bash
# Install what is missing, build, and run every test twice: a normal build and an
# AddressSanitizer+UndefinedBehaviorSanitizer build; then run each libFuzzer target
# for MINICPMD_FUZZ_SECONDS (default 20) in a clang build.
#   tools/test.sh --long [fuzz-NAME...]   (nightly) the NPU path's comparison on
#       MiniCPM5-2B's shapes (xrt-model with MINICPMD_XRT_LONG=1), the daemon on the
#       functional model of the kernel set (a -Dxrt_model=true build), then only the fuzz
#       targets (or the ones named), each for MINICPMD_FUZZ_RUNS inputs (default
#       10,000,000) with the same resource limits: hours per target on 2 cores.
# Ends with "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
long=0
if [ "${1:-}" = "--long" ]; then
    long=1
    shift
fi
tools/deps.sh test || exit 1

# Sanitizer reports fail tests (the daemon under test inherits these too).
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1

summary() { # testlog.json -> "passed failed skipped"
    /usr/bin/python3 - "$1" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(p, f, s)
PY
}

total_p=0 total_f=0 total_s=0
run_suite() { # builddir, meson test args, meson setup args...
    local dir=$1 test_args=$2; shift 2
    # --reconfigure: a build dir made by serve.sh, or before the test packages
    # were installed, must pick up the test dependencies now.
    local again=()
    [ -f "$dir/build.ninja" ] && again=(--reconfigure)
    if ! meson setup "${again[@]}" "$dir" -Dtests=enabled "$@" >/dev/null; then
        echo "minicpmd: meson setup $dir failed" >&2
        total_f=$((total_f + 1))
        return
    fi
    if ! ninja -C "$dir"; then
        echo "minicpmd: build in $dir failed" >&2
        total_f=$((total_f + 1))
        return
    fi
    # shellcheck disable=SC2086
    meson test -C "$dir" --print-errorlogs --num-processes 2 $test_args || true
    if [ ! -f "$dir/meson-logs/testlog.json" ]; then
        echo "minicpmd: meson test in $dir left no log" >&2
        total_f=$((total_f + 1))
        return
    fi
    read -r p f s < <(summary "$dir/meson-logs/testlog.json")
    echo "minicpmd: $dir: $p passed, $f failed, $s skipped"
    total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
}

if [ "$long" -eq 1 ]; then
    # The NPU path on MiniCPM5-2B's shapes against the CPU: the functional model's
    # 64 + 32 token comparison on the 2b pack with 8 KV heads (minutes); prefill on
    # the CPU against prefill on the NPU, 20 prompts of 16-1,024 tokens and the 2b pack.
    MINICPMD_XRT_LONG=1 run_suite build "xrt-model xrt-hybrid"
    # The daemon on the functional model (-Dxrt_model=true): --device xrt end to end,
    # the probe, the auto ladder, and the demo's answers through the NPU path.
    run_suite build-model "xrt-model xrt-replay xrt-daemon demo.skills_npu_model_equal" \
        -Dxrt_model=true
    CC=clang run_suite build-fuzz "${*:---suite fuzz}" -Dfuzz=enabled \
        -Dfuzz_runs="${MINICPMD_FUZZ_RUNS:-10000000}" -Db_sanitize=address,undefined -Db_lundef=false
    echo "$total_p passed, $total_f failed, $total_s skipped"
    [ "$total_f" -eq 0 ]
    exit
fi

run_suite build ""
# The numpy whole-model comparisons (suite model) are Python-bound and slow under
# ASan; the engine runs under ASan in the worker, device and integration tests.
run_suite build-asan "--no-suite model" -Db_sanitize=address,undefined -Db_lundef=false
CC=clang run_suite build-fuzz "--suite fuzz" -Dfuzz=enabled -Dfuzz_runs=0 \
    -Dfuzz_seconds="${MINICPMD_FUZZ_SECONDS:-20}" -Db_sanitize=address,undefined -Db_lundef=false

echo "$total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ]
