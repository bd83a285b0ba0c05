/* The AVX2 roof loops (compiled with -mavx2 -mfma; roof.c calls them only on a
 * CPU that has both). 16 ymm registers in all, so fewer chains than AVX-512. */
#include "tools/bench/roof-impl.h"

#include <immintrin.h>

#define REP10(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define REP12(X) REP10(X) X(10) X(11)

uint64_t roof__sum_avx2(const void *p, size_t bytes)
{
    const __m256i *v = p;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i < bytes / 32; i += 8) {
        a = _mm256_add_epi64(a, _mm256_load_si256(v + i));
        b = _mm256_add_epi64(b, _mm256_load_si256(v + i + 1));
        c = _mm256_add_epi64(c, _mm256_load_si256(v + i + 2));
        d = _mm256_add_epi64(d, _mm256_load_si256(v + i + 3));
        a = _mm256_add_epi64(a, _mm256_load_si256(v + i + 4));
        b = _mm256_add_epi64(b, _mm256_load_si256(v + i + 5));
        c = _mm256_add_epi64(c, _mm256_load_si256(v + i + 6));
        d = _mm256_add_epi64(d, _mm256_load_si256(v + i + 7));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (uint64_t)_mm_cvtsi128_si64(h) + (uint64_t)_mm_extract_epi64(h, 1);
}

int32_t roof__int8_avx2(long iters, int32_t seed)
{
    /* The pre-VNNI int8 dot product: vpmaddubsw (u8 x s8, pairs summed to s16),
     * vpmaddwd by ones (pairs widened to s32), vpaddd. The unsigned operand is
     * the accumulator itself: with two loop-invariant operands the compiler
     * would compute the product once, outside the loop. Each chain is then
     * ~7 cycles deep with two multiplies; ten chains cover that at two
     * multiplies a cycle and leave room for b, ones and temporaries. */
    __m256i b = _mm256_set1_epi32(seed * 7 + 3), ones = _mm256_set1_epi16(1);
#define DECL(k) __m256i acc##k = _mm256_set1_epi32(seed + (k));
    REP10(DECL)
#undef DECL
    for (long i = 0; i < iters; i++) {
/* Inline asm: gcc 12 spills some of the ten chains to the stack every round
 * when written with intrinsics (see roof-avx512.c). */
#define STEP(k) { __m256i t;                                                           \
        __asm__("vpmaddubsw %[b], %[acc], %[t]\n\t"                                  \
                "vpmaddwd %[ones], %[t], %[t]\n\t"                                   \
                "vpaddd %[t], %[acc], %[acc]"                                         \
                : [acc] "+x"(acc##k), [t] "=&x"(t) : [b] "x"(b), [ones] "x"(ones)); }
        REP10(STEP)
#undef STEP
    }
    __m256i s = _mm256_setzero_si256();
#define SUM(k) s = _mm256_add_epi32(s, acc##k);
    REP10(SUM)
#undef SUM
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
    return _mm_cvtsi128_si32(h);
}

float roof__f32_avx2(long iters, float seed)
{
    /* As in roof-avx512.c: converging chains, twelve of them plus m and c. */
    __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(seed);
#define DECL(k) __m256 acc##k = _mm256_set1_ps((float)(k));
    REP12(DECL)
#undef DECL
    for (long i = 0; i < iters; i++) {
#define STEP(k) acc##k = _mm256_fmadd_ps(acc##k, m, c);
        REP12(STEP)
#undef STEP
    }
    __m256 s = _mm256_setzero_ps();
#define SUM(k) s = _mm256_add_ps(s, acc##k);
    REP12(SUM)
#undef SUM
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
