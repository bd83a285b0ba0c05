/* Helpers shared by the AVX2 Q4_1 kernels (gemm-avx2.c, gemv-avx2.c); include
 * only from files compiled with -mavx2. */
#ifndef MINICPMD_ENGINE_KERNELS_AVX2_IMPL_H
#define MINICPMD_ENGINE_KERNELS_AVX2_IMPL_H

#include <immintrin.h>
#include <stdint.h>

/* 16 BF16 values (8 row pairs) at p -> the even rows' and the odd rows' floats
 * (little-endian: the even row is the low half of each dword). */
static inline void kern_avx2_bf16_even_odd(const uint8_t *p, __m256 *even, __m256 *odd)
{
    __m256i w = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* Rows 0..15 of a half from its even and odd rows, in row order, to y. */
static inline void kern_avx2_store_half(float *y, __m256 even, __m256 odd)
{
    __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(y, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(y + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

#endif
