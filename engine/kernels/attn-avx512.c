/* AVX-512 attention over the BF16 KV cache, and SwiGLU (this file alone is
 * compiled with -mavx512f -mavx512bw -mavx512vl; dispatch.c dispatches here only
 * when cpuid has them).
 *
 * GQA: the nq query heads that share one KV head read the same K and V rows, so
 * each K/V row is widened from BF16 once for all of them (the per-head kernels
 * this replaces widened every row nq times: as many convert uops as FMAs).
 *
 * Scores: K is cached in blocks of 16 positions, dimension-major (kernels.h), so
 * dimension d of 16 positions is one 32-byte load, widened once for all the
 * heads, and each head's accumulator is the scores of 16 positions: no
 * horizontal sums at all, q_h[d] broadcast from memory into the FMA.
 *
 * Softmax: max-subtracted, exp by a degree-6 polynomial on the range-reduced
 * argument and vscalefps (which also rounds underflow to 0 and overflow to inf
 * correctly), the sum in double as the scalar path does; 1/sum is applied to the
 * output, not to each weight.
 *
 * Output: NH heads x NV vectors of columns (NH*NV = 16 accumulators); each V row
 * is widened once per tile and FMA'd into the NH heads with p broadcast from
 * memory.
 *
 * Against the scalar path (scores, eng_softmax, accumulate, head by head) the
 * result differs only by summation order and the exp polynomial (<= 2 ulp):
 * tests/test-kernels.c states and checks the tolerance. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/kernels/kernels-impl.h"

static inline __m512 bf16x16(const uint16_t *p)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* e^x, lane by lane: x = n ln2 + r, |r| <= ln2/2, e^r by the Cephes expf
 * polynomial (~1 ulp), times 2^n by vscalefps. x is clamped to [-104, 89]: below,
 * e^x rounds to 0 in float anyway, above it is inf (a NaN x is clamped too, to 89:
 * only NaN weights make NaN scores). */
static inline __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(KERN_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(KERN_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(KERN_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(KERN_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* Scores of up to 8 heads over all n positions; qt is their q transposed, q_h[d]
 * at qt[8d + h] (one base pointer for all 8 broadcasts: with 8 head pointers GCC
 * runs out of registers and reloads them from the stack for every FMA). K is
 * blocked (16 positions, dimension-major: kernels.h), so one 32-byte load widened
 * is dimension d of 16 positions, and a head's 16 scores are one accumulator:
 * acc_h += q_h[d] x K[d][16 positions]. Per block and dimension: 2 uops to widen,
 * NH FMAs. A partial last block computes the
 * positions past n too (what the cache holds there: zeros or an older
 * sequence's K, finite) and stores only the first n - j0. */
static inline __attribute__((always_inline)) void
scores_heads(const float *qt, int hd, const uint16_t *k, int n, float scale, float *sc, int nh)
{
    const __m512 vs = _mm512_set1_ps(scale);
    for (int j0 = 0; j0 < n; j0 += ENG_ATTN_KBLOCK) {
        const uint16_t *kb = k + (size_t)(j0 / ENG_ATTN_KBLOCK) * hd * ENG_ATTN_KBLOCK;
        __m512 acc[8];
        for (int h = 0; h < 8; h++)
            acc[h] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++) {
            __m512 kv = bf16x16(kb + (size_t)d * ENG_ATTN_KBLOCK);
#pragma GCC unroll 8
            for (int h = 0; h < 8; h++)
                if (h < nh)
                    acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(qt[(size_t)d * 8 + h]), kv, acc[h]);
        }
        __mmask16 m = n - j0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j0)) - 1);
        for (int h = 0; h < nh; h++)
            _mm512_mask_storeu_ps(sc + (size_t)h * n + j0, m, _mm512_mul_ps(acc[h], vs));
    }
}

/* p = exp(s - max s) in place; returns 1 / sum p. */
static float softmax_unnormalized(float *s, int n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + i));
    if (i < n)
        mx = _mm512_mask_max_ps(mx, (__mmask16)((1u << (n - i)) - 1), mx,
                                _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), s + i));
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512d sum0 = _mm512_setzero_pd(), sum1 = _mm512_setzero_pd();
    for (i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m)));
        _mm512_mask_storeu_ps(s + i, k, e);
        sum0 = _mm512_add_pd(sum0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        sum1 = _mm512_add_pd(sum1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return (float)(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(sum0, sum1)));
}

/* o[h][c0 .. c0 + 16*NV) = inv[h] * sum_j p[h][j] V_j, NH*NV <= 16. */
static inline __attribute__((always_inline)) void
accum_tile(float *o, const float *p, const uint16_t *v, size_t ld, int n, int hd, int c0,
           const float *inv, const int NH, const int NV)
{
    __m512 acc[16];
    for (int i = 0; i < NH * NV; i++)
        acc[i] = _mm512_setzero_ps();
    for (int j = 0; j < n; j++) {
        const uint16_t *vr = v + (size_t)j * ld + c0;
#pragma GCC unroll 16
        for (int c = 0; c < NV; c++) {
            __m512 vv = bf16x16(vr + 16 * c);
#pragma GCC unroll 16
            for (int h = 0; h < NH; h++)
                acc[h * NV + c] =
                    _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)h * n + j]), vv, acc[h * NV + c]);
        }
    }
    for (int h = 0; h < NH; h++)
        for (int c = 0; c < NV; c++)
            _mm512_storeu_ps(o + (size_t)h * hd + c0 + 16 * c,
                             _mm512_mul_ps(acc[h * NV + c], _mm512_set1_ps(inv[h])));
}

static inline __attribute__((always_inline)) void
accum_heads(float *o, const float *p, const uint16_t *v, size_t ld, int n, int hd,
            const float *inv, const int NH)
{
    const int NV = 16 / NH > 4 ? 4 : 16 / NH; /* 4 vectors already amortize a row */
    int c0 = 0;
    for (; c0 + 16 * NV <= hd; c0 += 16 * NV)
        accum_tile(o, p, v, ld, n, hd, c0, inv, NH, NV);
    for (; c0 < hd; c0 += 16)
        accum_tile(o, p, v, ld, n, hd, c0, inv, NH, 1);
}

void eng__attn_gqa_avx512(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ld,
                          int n, int hd, float scale, float *sc, float *o)
{
    float inv[8];
    _Alignas(64) float qt[ENG_ATTN_MAX_HD * 8];
    for (int h0 = 0; h0 < nq; h0 += 8) {
        int nh = nq - h0 < 8 ? nq - h0 : 8;
        float *sh = sc + (size_t)h0 * n, *oh = o + (size_t)h0 * hd;
        for (int h = 0; h < nh; h++)
            for (int d = 0; d < hd; d++)
                qt[d * 8 + h] = q[(size_t)(h0 + h) * hd + d];
        if (nh == 8) /* MiniCPM5's group: the compiler keeps all 8 FMAs unmasked */
            scores_heads(qt, hd, k, n, scale, sh, 8);
        else
            scores_heads(qt, hd, k, n, scale, sh, nh);
        for (int h = 0; h < nh; h++)
            inv[h] = softmax_unnormalized(sh + (size_t)h * n, n);
        /* the output, heads in blocks of 8, 4, 2, 1 */
        for (int a = 0; a < nh;) {
            int b = nh - a >= 8 ? 8 : nh - a >= 4 ? 4 : nh - a >= 2 ? 2 : 1;
            float *sa = sh + (size_t)a * n, *oa = oh + (size_t)a * hd;
            switch (b) {
            case 8: accum_heads(oa, sa, v, ld, n, hd, inv + a, 8); break;
            case 4: accum_heads(oa, sa, v, ld, n, hd, inv + a, 4); break;
            case 2: accum_heads(oa, sa, v, ld, n, hd, inv + a, 2); break;
            default: accum_heads(oa, sa, v, ld, n, hd, inv + a, 1); break;
            }
            a += b;
        }
    }
}

/* g = silu(g) * u with the exp above: g / (1 + e^-g) * u. */
void eng__silu_mul_avx512(float *g, const float *u, int n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
        _mm512_mask_storeu_ps(g + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, u + i)));
    }
}
