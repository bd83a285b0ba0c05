#!/usr/bin/env bash
# Build minicpmd and the demo pack (build/demo-pack, served when no MiniCPM5 pack is
# found) and run it in the foreground on 127.0.0.1:8001 (Ctrl-C stops it).
# Extra arguments go to the daemon: tools/serve.sh --model /path/to/pack
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh run
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build minicpmd demo-pack >/dev/null
exec build/minicpmd "$@"
