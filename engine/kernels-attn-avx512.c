/* AVX-512 attention over the BF16 KV cache, and SwiGLU (this file alone is
 * compiled with -mavx512f -mavx512bw -mavx512vl; kernels.c dispatches here only
 * when cpuid has them).
 *
 * GQA: the nq query heads that share one KV head read the same K and V rows, so
 * each K/V row is widened from BF16 once for all of them (the per-head kernels
 * this replaces widened every row nq times: as many convert uops as FMAs).
 *
 * Scores: 16 float accumulators are one block of NK keys x NH heads (NH*NK = 16,
 * NH = 8 for MiniCPM5's 16:2 GQA). Over the head dimension, 16 columns at a time,
 * each key's K columns are widened once and FMA'd into its NH accumulators; the
 * 16 accumulators then fold into one vector of 16 dot products (a transpose-add
 * tree, ~45 uops for 16 sums instead of 16 horizontal reductions), scattered to
 * sc[h*n + j].
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

#include "engine/kernels-impl.h"

static inline __m512 bf16x16(const uint16_t *p)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* e^x, lane by lane: x = n ln2 + r, |r| <= ln2/2, e^r by the Cephes expf
 * polynomial (~1 ulp), times 2^n by vscalefps. x is clamped to [-104, 89]: below,
 * e^x rounds to 0 in float anyway, above it is inf; NaN stays NaN. */
static inline __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* r[i] summed over its lanes, into lane i of the result. */
static inline __m512 fold16(const __m512 a[16])
{
    __m512 t[8], u[4], w[2];
    for (int p = 0; p < 8; p++)
        t[p] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * p], a[2 * p + 1]),
                             _mm512_unpackhi_ps(a[2 * p], a[2 * p + 1]));
    /* t[p], per 128-bit block: partial sums of a[2p], a[2p+1], a[2p], a[2p+1] */
    for (int p = 0; p < 4; p++)
        u[p] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * p], t[2 * p + 1], 0x44),
                             _mm512_shuffle_ps(t[2 * p], t[2 * p + 1], 0xEE));
    /* u[p], block b: a[4p..4p+3]'s partial sums over block b */
    for (int p = 0; p < 2; p++)
        w[p] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88),
                         _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
}

/* Scores of NH heads (q, hd apart) x keys j0 .. j0 + NK - 1, NH*NK = 16. */
static inline __attribute__((always_inline)) void
scores_block(const float *q, int hd, const uint16_t *k, size_t ld, int j0, int n, float scale,
             float *sc, const int NH, const int NK)
{
    __m512 acc[16];
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
#pragma GCC unroll 16
        for (int j = 0; j < NK; j++) {
            __m512 kv = bf16x16(k + (size_t)(j0 + j) * ld + d);
#pragma GCC unroll 16
            for (int h = 0; h < NH; h++)
                acc[j * NH + h] =
                    _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * hd + d), kv, acc[j * NH + h]);
        }
    }
    /* lane i = key j0 + i / NH, head i % NH -> sc[(i % NH) * n + j0 + i / NH] */
    __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i hh = _mm512_and_si512(lane, _mm512_set1_epi32(NH - 1));
    __m512i jj = _mm512_srli_epi32(lane, __builtin_ctz(NH));
    __m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(hh, _mm512_set1_epi32(n)), jj);
    _mm512_i32scatter_ps(sc + j0, idx, _mm512_mul_ps(fold16(acc), _mm512_set1_ps(scale)), 4);
}

/* One score, for the keys past the last whole block. */
static inline float score_one(const float *q, const uint16_t *kr, int hd)
{
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), bf16x16(kr + d), acc);
    return _mm512_reduce_add_ps(acc);
}

static inline __attribute__((always_inline)) void
scores_heads(const float *q, int hd, const uint16_t *k, size_t ld, int n, float scale, float *sc,
             const int NH)
{
    const int NK = 16 / NH;
    int j = 0;
    for (; j + NK <= n; j += NK)
        scores_block(q, hd, k, ld, j, n, scale, sc, NH, NK);
    for (; j < n; j++)
        for (int h = 0; h < NH; h++)
            sc[(size_t)h * n + j] = score_one(q + (size_t)h * hd, k + (size_t)j * ld, hd) * scale;
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
    float inv[16];
    /* heads in blocks of 8, 4, 2, 1 */
    for (int h0 = 0; h0 < nq;) {
        int nh = nq - h0 >= 8 ? 8 : nq - h0 >= 4 ? 4 : nq - h0 >= 2 ? 2 : 1;
        const float *qh = q + (size_t)h0 * hd;
        float *sh = sc + (size_t)h0 * n, *oh = o + (size_t)h0 * hd;
        switch (nh) {
        case 8: scores_heads(qh, hd, k, ld, n, scale, sh, 8); break;
        case 4: scores_heads(qh, hd, k, ld, n, scale, sh, 4); break;
        case 2: scores_heads(qh, hd, k, ld, n, scale, sh, 2); break;
        default: scores_heads(qh, hd, k, ld, n, scale, sh, 1); break;
        }
        for (int h = 0; h < nh; h++)
            inv[h] = softmax_unnormalized(sh + (size_t)h * n, n);
        switch (nh) {
        case 8: accum_heads(oh, sh, v, ld, n, hd, inv, 8); break;
        case 4: accum_heads(oh, sh, v, ld, n, hd, inv, 4); break;
        case 2: accum_heads(oh, sh, v, ld, n, hd, inv, 2); break;
        default: accum_heads(oh, sh, v, ld, n, hd, inv, 1); break;
        }
        h0 += nh;
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
