/* Internal to tools/bench/: the roof loops for one ISA each. roof-avx512.c and
 * roof-avx2.c are compiled with their own -m flags (only they may contain those
 * instructions); roof.c calls them after checking cpuid. */
#ifndef MINICPMD_TOOLS_BENCH_ROOF_IMPL_H
#define MINICPMD_TOOLS_BENCH_ROOF_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* Sum of the 64-bit words of [p, p + bytes): p 64-byte aligned, bytes a
 * multiple of 256. The value is meaningless; it keeps the loads alive. */
uint64_t roof__sum_avx512(const void *p, size_t bytes);
uint64_t roof__sum_avx2(const void *p, size_t bytes);

/* `iters` rounds of independent int8 multiply-accumulates, *_MACS_PER_ITER each;
 * `seed` feeds the operands so nothing is constant-folded, and the result
 * depends on every accumulator so nothing is dropped. */
#define ROOF_INT8_MACS_PER_ITER_VNNI (16 * 64) /* 16 zmm accumulators x 64 */
#define ROOF_INT8_MACS_PER_ITER_AVX2 (10 * 32) /* 10 ymm accumulators x 32 */
int32_t roof__int8_vnni(long iters, int32_t seed);
int32_t roof__int8_avx2(long iters, int32_t seed);

/* The same for float32 fused multiply-adds, *_FLOPS_PER_ITER each. */
#define ROOF_F32_FLOPS_PER_ITER_AVX512 (16 * 16 * 2) /* 16 zmm chains x 16 lanes x 2 */
#define ROOF_F32_FLOPS_PER_ITER_AVX2 (12 * 8 * 2)    /* 12 ymm chains x 8 lanes x 2 */
float roof__f32_avx512(long iters, float seed);
float roof__f32_avx2(long iters, float seed);

#endif
