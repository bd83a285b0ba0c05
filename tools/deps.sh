#!/usr/bin/env bash
# Install the Debian/Ubuntu packages minicpmd needs, and only the missing ones.
#   tools/deps.sh run    build and run the daemon
#   tools/deps.sh test   also everything the test suite uses
set -euo pipefail

run_pkgs=(gcc pkg-config meson ninja-build libmicrohttpd-dev libjansson-dev libuv1-dev libpcre2-dev
          libutf8proc-dev nettle-dev)
# systemd: systemd-analyze and systemd-socket-activate for the unit/activation tests;
# python3: the integration harness (stdlib only, run as /usr/bin/python3).
# stress-ng: the suite is run beside `stress-ng --cpu 2` to show it does not
# depend on timing. clang + libclang-rt-14-dev: the libFuzzer targets. python3-jinja2: renders the
# official chat template as the oracle for ours. python3-torch: the smoke test of
# the demo model's training recipe (tools/train; about 230 MB installed), with
# libopenblas0-pthread (torch on Debian's reference BLAS alone trains ~10x slower).
# chromium: the browser tests of the page (driven by puppeteer-core, tests/browser).
test_pkgs=(libcriterion-dev curl systemd python3 python3-jinja2 python3-numpy g++ clang libclang-rt-14-dev
           python3-torch libopenblas0-pthread python3-jsonschema stress-ng chromium)

want=("${run_pkgs[@]}")
[ "${1:-run}" = test ] && want+=("${test_pkgs[@]}")

# Node.js runs the npm test oracles; take Debian's only if the machine has none.
if [ "${1:-run}" = test ] && ! command -v npm >/dev/null; then
    want+=(nodejs npm)
fi

missing=()
for p in "${want[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$st" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "minicpmd: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The npm test packages, each directory pinned by its package-lock.json: the oracles
# (reference tokenizer, SDKs) and the browser tests' driver (puppeteer-core).
if [ "${1:-run}" = test ]; then
    for dir in "$(dirname "$0")/../tests/oracle" "$(dirname "$0")/../tests/browser"; do
        if [ -f "$dir/package-lock.json" ] &&
           { [ ! -f "$dir/node_modules/.package-lock.json" ] ||
             [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; }; then
            echo "minicpmd: installing the npm test packages in ${dir#*/../}" >&2
            (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
        fi
    done
fi
