#!/usr/bin/env bash
# Install the Debian/Ubuntu packages minicpmd needs, and only the missing ones.
#   tools/deps.sh run    build and run the daemon
#   tools/deps.sh test   also everything the test suite uses
set -euo pipefail

run_pkgs=(gcc pkg-config meson ninja-build libmicrohttpd-dev libjansson-dev libuv1-dev)
# systemd: systemd-analyze and systemd-socket-activate for the unit/activation tests;
# python3: the integration harness (stdlib only, run as /usr/bin/python3).
# clang + libclang-rt-14-dev: the libFuzzer targets.
test_pkgs=(libcriterion-dev curl systemd python3 clang libclang-rt-14-dev)

want=("${run_pkgs[@]}")
[ "${1:-run}" = test ] && want+=("${test_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$st" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "minicpmd: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
