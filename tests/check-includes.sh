#!/bin/sh
# Include boundaries of the engine.
# 1. The engine's public surface is the headers directly in engine/. server/ and
#    api/ include only those, and those include only each other: nothing of the
#    rooms (engine/kernels/, model/, text/, device/, worker/, grammar/) leaks out
#    through them.
# 2. The rooms never include the facade engine/engine.h: they take the pack and
#    the shared types from engine/types.h, so a room does not depend on the
#    engine built over it.
# Usage: check-includes.sh SOURCE_ROOT
root=${1:-.}
cd "$root" || exit 1
status=0
bad=$(grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"engine/[^"]*/' \
        server/*.c server/*.h api/*.c api/*.h engine/*.h 2>/dev/null)
if [ -n "$bad" ]; then
    echo "includes of engine internals outside the engine (use the public headers in engine/):"
    echo "$bad"
    status=1
fi
facade=$(find engine -mindepth 2 \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) \
             -exec grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"engine/engine\.h"' {} +)
if [ -n "$facade" ]; then
    echo "the engine's rooms include the facade (include engine/types.h instead):"
    echo "$facade"
    status=1
fi
[ "$status" -eq 0 ] || exit 1
n=$(cat server/*.c server/*.h api/*.c api/*.h engine/*.h | grep -cE '#[[:space:]]*include[[:space:]]+"engine/')
if [ "$n" -eq 0 ]; then
    echo "no engine includes found: is $root the source root?"
    exit 1
fi
m=$(find engine -mindepth 2 \( -name '*.c' -o -name '*.h' \) | wc -l)
echo "ok: $n engine includes in server/, api/ and engine/*.h, all public; $m files in the rooms, none includes engine/engine.h"
