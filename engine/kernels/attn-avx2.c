/* AVX2 attention over the BF16 KV cache, and SwiGLU, for CPUs without AVX-512
 * (this file alone is compiled with -mavx2 -mfma; dispatch.c dispatches here only
 * when cpuid has them). The same shapes as attn-avx512.c at half the
 * width, with 16 ymm registers: scores and outputs of 4 query heads at a time.
 *
 * exp: the Cephes polynomial as there; 2^n is built in the exponent bits, so x is
 * clamped to [-87.3, 88.7] (n in the normal range): below, e^x comes out ~1e-38
 * instead of rounding to 0, above ~3e38 instead of inf, both far inside the
 * tolerance tests/test-kernels.c states for attention and SwiGLU. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/kernels/kernels-impl.h"

#define NH 4 /* query heads per pass */

static inline __m256 bf16x8(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline __m256 exp8(__m256 x)
{
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.7f)), _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(KERN_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(KERN_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(KERN_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(KERN_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline __m256i first_lanes8(int n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* acc[h] += x[h * stride] * (b0, b1) for the nh <= NH heads: the inner step of
 * both the scores (x = q, b = a row of K) and the accumulation (x = p, b = V). */
static inline __attribute__((always_inline)) void fma_heads(__m256 acc[NH][2], const float *x,
                                                            size_t stride, int nh, __m256 b0,
                                                            __m256 b1)
{
#pragma GCC unroll 4
    for (int h = 0; h < NH; h++)
        if (h < nh) {
            __m256 xv = _mm256_broadcast_ss(x + (size_t)h * stride);
            acc[h][0] = _mm256_fmadd_ps(xv, b0, acc[h][0]);
            acc[h][1] = _mm256_fmadd_ps(xv, b1, acc[h][1]);
        }
}

/* Scores of nh <= 4 heads (qt: q transposed, q_h[d] at qt[4d + h]) over n
 * positions of blocked K: per block of 16 positions two accumulators per head. */
static void scores(const float *qt, int nh, int hd, const uint16_t *k, int n, float scale,
                   float *sc)
{
    const __m256 vs = _mm256_set1_ps(scale);
    for (int j0 = 0; j0 < n; j0 += ENG_ATTN_KBLOCK) {
        const uint16_t *kb = k + (size_t)(j0 / ENG_ATTN_KBLOCK) * hd * ENG_ATTN_KBLOCK;
        __m256 acc[NH][2];
        for (int h = 0; h < NH; h++)
            acc[h][0] = acc[h][1] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) {
            __m256 k0 = bf16x8(kb + (size_t)d * ENG_ATTN_KBLOCK);
            __m256 k1 = bf16x8(kb + (size_t)d * ENG_ATTN_KBLOCK + 8);
            fma_heads(acc, qt + (size_t)d * NH, 1, nh, k0, k1);
        }
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < 2; i++) {
                int m = n - j0 - 8 * i;
                if (m <= 0)
                    break;
                _mm256_maskstore_ps(sc + (size_t)h * n + j0 + 8 * i, first_lanes8(m),
                                    _mm256_mul_ps(acc[h][i], vs));
            }
    }
}

/* p = exp(s - max s) in place; returns 1 / sum p (the sum in double). */
static float softmax_unnormalized(float *s, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = s[i] > mx ? s[i] : mx;
    __m256 m = _mm256_set1_ps(mx);
    __m256d sum = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double t[4];
    _mm256_storeu_pd(t, sum);
    double total = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) {
        s[i] = expf(s[i] - mx);
        total += s[i];
    }
    return (float)(1.0 / total);
}

/* o[h][c0 .. c0 + 16) = inv[h] * sum_j p[h][j] V_j for nh <= 4 heads. */
static void accum(float *o, const float *p, int nh, const uint16_t *v, size_t ld, int n, int hd,
                  int c0, const float *inv)
{
    __m256 acc[NH][2];
    for (int h = 0; h < NH; h++)
        acc[h][0] = acc[h][1] = _mm256_setzero_ps();
    for (int j = 0; j < n; j++) {
        const uint16_t *vr = v + (size_t)j * ld + c0;
        __m256 v0 = bf16x8(vr), v1 = bf16x8(vr + 8);
        fma_heads(acc, p + j, (size_t)n, nh, v0, v1);
    }
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < 2; i++)
            _mm256_storeu_ps(o + (size_t)h * hd + c0 + 8 * i,
                             _mm256_mul_ps(acc[h][i], _mm256_set1_ps(inv[h])));
}

void eng__attn_gqa_avx2(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ld,
                        int n, int hd, float scale, float *sc, float *o)
{
    float inv[NH], qt[ENG_ATTN_MAX_HD * NH];
    for (int h0 = 0; h0 < nq; h0 += NH) {
        int nh = nq - h0 < NH ? nq - h0 : NH;
        float *sh = sc + (size_t)h0 * n, *oh = o + (size_t)h0 * hd;
        for (int h = 0; h < nh; h++)
            for (int d = 0; d < hd; d++)
                qt[d * NH + h] = q[(size_t)(h0 + h) * hd + d];
        scores(qt, nh, hd, k, n, scale, sh);
        for (int h = 0; h < nh; h++)
            inv[h] = softmax_unnormalized(sh + (size_t)h * n, n);
        for (int c0 = 0; c0 < hd; c0 += 16)
            accum(oh, sh, nh, v, ld, n, hd, c0, inv);
    }
}

/* g = silu(g) * u = g / (1 + e^-g) * u. */
void eng__silu_mul_avx2(float *g, const float *u, int n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
