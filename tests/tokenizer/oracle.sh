#!/bin/sh
# meson test "tokenizer-oracle": runs tests/oracle/compare-tokenizer.mjs (see there).
#   oracle.sh ORACLE_RUN CORPUS WORKDIR
# Skips (77) only when the npm oracles are not installed, and says why.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
oracle="$here/../oracle"
if [ ! -d "$oracle/node_modules" ]; then
    echo "SKIP: $oracle/node_modules is missing: the reference tokenizer is not installed" \
         "(run tools/deps.sh test, or: cd tests/oracle && npm ci)" >&2
    exit 77
fi
if ! command -v node >/dev/null; then
    echo "FAIL: tests/oracle/node_modules is installed but node is not on PATH" >&2
    exit 1
fi
exec node "$oracle/compare-tokenizer.mjs" "$@"
