/* roof — what this machine can do at most, for minicpmd-bench to compare with.
 *
 * Three ceilings, each measured on every thread of a compute pool at once (so
 * pass the pool the model runs on, with the same thread count):
 *
 *   read bandwidth   streaming 512-bit loads over a buffer far larger than the
 *                    caches: the ceiling of decode, which reads every weight
 *                    once per token
 *   int8 MACs        the fastest int8 multiply-accumulate the Q4 x int8 kernels
 *                    can use (AVX-512 VNNI vpdpbusd): the ceiling of prefill
 *   f32 FLOPs        fused multiply-add peak: the ceiling of the float path
 *
 * The instructions are chosen at run time (cpuid), so one binary runs anywhere;
 * roof_set_isa() can force a lesser path (tests, comparisons).
 *
 * Not thread-safe: one caller at a time, like the pool itself. Library code:
 * nothing is printed, nothing exits. */
#ifndef MINICPMD_TOOLS_BENCH_ROOF_H
#define MINICPMD_TOOLS_BENCH_ROOF_H

#include <stddef.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/pool.h"

/* The ISAs are the kernels' (eng_isa, detected by eng_isa_detect()), so a roof
 * is measured with the instructions the kernels it is compared with may use:
 * scalar is plain C, whatever the compiler makes of it; avx2 is AVX2 + FMA, int8
 * as vpmaddubsw + vpmaddwd; avx512 uses AVX-512F loads and FMAs, int8 as
 * vpdpbusd with AVX512_VNNI, else the AVX2 way. */

/* Use at most `isa` from now on (the default is eng_isa_detect()). Returns 0,
 * or -ENOTSUP if the CPU lacks it (nothing changes). */
int roof_set_isa(enum eng_isa isa);

/* What the measurements use, e.g. "avx512 (int8: avx512-vnni vpdpbusd)". A
 * static string. */
const char *roof_isa_name(void);

/* Streaming read bandwidth in GB/s (1e9 bytes/s): a buffer of `bytes` (1 GiB is
 * a good size: far past any cache) is allocated and written once, then read
 * `reps` times, each thread summing its share. Returns the best rep: a roof is
 * the most the machine can do, and interference (other processes, interrupts)
 * only ever slows a rep down, so the fastest one is the least disturbed.
 * Returns 0 if the buffer cannot be allocated or bytes < 4 KiB per thread. */
double roof_read_bandwidth(eng_pool *pool, size_t bytes, int reps);

/* Int8 multiply-accumulates per second, over about `seconds` of a tight loop of
 * independent multiply-accumulates on every thread. With AVX512_VNNI: vpdpbusd
 * on zmm, 64 MACs each. Without: vpmaddubsw + vpmaddwd + vpaddd on ymm, counted
 * as 32 MACs per vpmaddubsw (the widening vpmaddwd and the add are overhead that
 * the int8 kernels pay too). Scalar: one MAC per multiply-add in C. */
double roof_int8_macs(eng_pool *pool, double seconds);

/* Float32 FLOP/s (2 per FMA lane) over about `seconds`: vfmadd on zmm (AVX-512)
 * or ymm (AVX2), enough independent chains to hide the latency. */
double roof_f32_flops(eng_pool *pool, double seconds);

#endif
