#!/bin/sh
# The engine's public surface is the headers directly in engine/. server/ and api/
# include only those, and those include only each other: nothing of the rooms
# (engine/kernels/, model/, text/, device/, worker/) leaks out through them.
# Usage: check-includes.sh SOURCE_ROOT
root=${1:-.}
cd "$root" || exit 1
bad=$(grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"engine/[^"]*/' \
        server/*.c server/*.h api/*.c api/*.h engine/*.h 2>/dev/null)
if [ -n "$bad" ]; then
    echo "includes of engine internals outside the engine (use the public headers in engine/):"
    echo "$bad"
    exit 1
fi
n=$(cat server/*.c server/*.h api/*.c api/*.h engine/*.h | grep -cE '#[[:space:]]*include[[:space:]]+"engine/')
if [ "$n" -eq 0 ]; then
    echo "no engine includes found: is $root the source root?"
    exit 1
fi
echo "ok: $n engine includes in server/, api/ and engine/*.h, all public"
