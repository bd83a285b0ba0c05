#!/bin/sh
# Every kernel that streams Q4_1 weights from DRAM prefetches the next chunk, and
# the prefetch must survive the compiler: GCC 12 once deleted it from the AVX2
# kernels and both tile kernels without a warning (an outlined helper that only
# prefetches has no side effects it must keep), and the AVX2 few-token decode
# fell to 1.1x one stream from 2.8x. Timing would be a flaky test; this counts
# the prefetch instructions in the built library instead.
# Usage: prefetch.sh LIBMCD_ENGINE_ARCHIVE
lib=$1
[ -f "$lib" ] || { echo "no such library: $lib"; exit 1; }
command -v objdump >/dev/null || { echo "objdump (binutils) not found"; exit 1; }
dis=$(objdump -d --no-show-raw-insn "$lib") || exit 1
rc=0
for k in eng__matvec_q4_1_q8_vbmi eng__matmul_q4_1_q8_vbmi_small eng__matmul_q4_1_q8_vnni \
         eng__matvec_q4_1_q8_avx2 eng__matmul_q4_1_q8_avx2_small eng__matmul_q4_1_q8_avx2; do
    body=$(printf '%s\n' "$dis" | awk -v k="<$k>:" '$2 == k { on = 1; next } on && /^$/ { exit } on')
    if [ -z "$body" ]; then
        echo "FAIL $k: not in $lib"
        rc=1
        continue
    fi
    n=$(printf '%s\n' "$body" | grep -c 'prefetch')
    if [ "$n" -eq 0 ]; then
        echo "FAIL $k: no prefetch instruction in the built code"
        rc=1
    else
        echo "ok   $k: $n prefetch instruction(s)"
    fi
done
exit $rc
