/* The Q4_1 x int8 matrix-matrix kernel for CPUs with AVX2 but no AVX-512 (this
 * file alone is compiled with -mavx2 -mfma; dispatch.c dispatches here only when
 * cpuid has them). It serves prefill and decode batches of several tokens; one
 * token goes to the decode kernel (gemv-avx2.c), which skips the unpack below.
 *
 * AVX2 has no vpdpbusd. vpmaddubsw multiplies 32 u8 nibbles by 32 s8 x and adds
 * adjacent pairs into 16 s16 lanes, exactly: |15*127 + 15*127| = 3,810. A ymm of
 * weights holds 8 rows x 4 consecutive columns (one row per dword), x is one
 * dword (4 columns of one token) broadcast, so each dword's two s16 lanes are the
 * row's 4-column dot product in two halves. The 8 quads of a 32-column group add
 * up in s16 with vpaddw (at most 8 x 3,810 = 30,480 < 32,767: still exact), and
 * one vpmaddwd by ones per group gives the row's exact int32 sum.
 *
 * Each 32x256 chunk is unpacked into such registers once per pass of up to
 * MM_PASS tokens (struct tile, 8 KB): per group, quad and octet of rows (the even
 * or the odd rows of a 16-row half, the order the chunk's low and high nibbles
 * fall out in), with the group's scales and mins in the same lane order. Each
 * octet pair (one half) then runs 2 tokens at a time: 4 s16 accumulators, and 4
 * float accumulators that take each group's sum as the scalar reference does,
 * acc = fma(d_w*d_x, isum, acc); acc = fma(m_w, sum_x, acc), group by group in
 * column order, so the result is bit-identical to eng__matvec_q4_1_q8_scalar per
 * token, up to the sign of a zero (groups wholly past `in` are skipped here).
 * Between the chunks of a row block the float accumulators wait in `part`. */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/avx2-impl.h"
#include "engine/kernels/kernels-impl.h"

#define MM_GROUPS (ENG_Q4_1_COLS / ENG_Q4_1_GROUP) /* groups per chunk: 8 */
#define MM_QUADS (ENG_Q4_1_GROUP / 4)              /* 4-column quads per group: 8 */
#define MM_OCT 4                                   /* octets of rows per chunk */
#define MM_PASS 64                                 /* tokens per pass over a row block */

/* w[g][k][o]: octet o = 2*half + (0 even rows, 1 odd rows); lane p is row
 * 16*half + 2p + (o & 1), columns 32g + 4k .. +3. */
struct tile {
    __m256i w[MM_GROUPS][MM_QUADS][MM_OCT];
    __m256 d[MM_GROUPS][MM_OCT];
    __m256 m[MM_GROUPS][MM_OCT];
};

/* A 32-byte load is 4 columns x 8 row pairs, column-major; vpermd puts pairs 0-3
 * in the low lane and 4-7 in the high one, vpshufb transposes each lane's 4x4
 * bytes: dword p = row pair p's 4 columns. */
static void unpack(const uint8_t *ch, int ng, struct tile *tl)
{
    const __m256i gather = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256i transpose = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                               0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < ng; g++)
        for (int h = 0; h < 2; h++) {
            const uint8_t *nb = ch + 1024 + h * 2048 + g * 256;
            for (int k = 0; k < MM_QUADS; k++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(nb + 32 * k));
                v = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(v, gather), transpose);
                tl->w[g][k][2 * h] = _mm256_and_si256(v, m4);
                tl->w[g][k][2 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
            kern_avx2_bf16_even_odd(ch + (g * 32 + h * 16) * 2, &tl->d[g][2 * h], &tl->d[g][2 * h + 1]);
            kern_avx2_bf16_even_odd(ch + 512 + (g * 32 + h * 16) * 2, &tl->m[g][2 * h], &tl->m[g][2 * h + 1]);
        }
}

static inline __m256i bcast_x(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* Half h of the tile against T (1 or 2) tokens: x of token t at xq + t*xs, its
 * scales and sums at dx + t*ss, sx + t*ss. Accumulators start from zero (first)
 * or part[t][32] (tile lane order) and end there or, for the last chunk, in
 * y + t*ldy (row order). */
static inline __attribute__((always_inline)) void
block(const struct tile *tl, int ng, int h, const int8_t *xq, size_t xs, const float *dx,
      const float *sx, size_t ss, float *part, float *y, size_t ldy, int first, int last, const int T)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 ya[2][2];
    for (int t = 0; t < T; t++)
        for (int e = 0; e < 2; e++)
            ya[t][e] = first ? _mm256_setzero_ps()
                             : _mm256_load_ps(part + t * ENG_Q4_1_ROWS + (2 * h + e) * 8);

    for (int g = 0; g < ng; g++) {
        __m256i acc[2][2];
        for (int t = 0; t < T; t++)
            acc[t][0] = acc[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < MM_QUADS; k++) {
            __m256i w0 = tl->w[g][k][2 * h], w1 = tl->w[g][k][2 * h + 1];
            for (int t = 0; t < T; t++) {
                __m256i xb = bcast_x(xq + t * xs + g * ENG_Q4_1_GROUP + 4 * k);
                acc[t][0] = _mm256_add_epi16(acc[t][0], _mm256_maddubs_epi16(w0, xb));
                acc[t][1] = _mm256_add_epi16(acc[t][1], _mm256_maddubs_epi16(w1, xb));
            }
        }
        for (int t = 0; t < T; t++) {
            __m256 dxt = _mm256_set1_ps(dx[t * ss + g]), sxt = _mm256_set1_ps(sx[t * ss + g]);
            for (int e = 0; e < 2; e++) {
                __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(acc[t][e], ones));
                __m256 dd = _mm256_mul_ps(tl->d[g][2 * h + e], dxt);
                ya[t][e] = _mm256_fmadd_ps(dd, isum, ya[t][e]);
                ya[t][e] = _mm256_fmadd_ps(tl->m[g][2 * h + e], sxt, ya[t][e]);
            }
        }
    }

    for (int t = 0; t < T; t++) {
        if (last)
            kern_avx2_store_half(y + t * ldy + 16 * h, ya[t][0], ya[t][1]);
        else
            for (int e = 0; e < 2; e++)
                _mm256_store_ps(part + t * ENG_Q4_1_ROWS + (2 * h + e) * 8, ya[t][e]);
    }
}

void eng__matmul_q4_1_q8_avx2(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, int n_tok, float *y, int ldy)
{
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS, rb_end = row_end / ENG_Q4_1_ROWS;
    size_t xs = (size_t)ncol * ENG_Q4_1_COLS, ss = xs / ENG_Q4_1_GROUP, l = (size_t)ldy;
    struct tile tl;
    _Alignas(32) float part[MM_PASS * ENG_Q4_1_ROWS]; /* a pass's partial sums, 8 KB */

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < rb_end; rb++) {
        for (int p0 = 0; p0 < n_tok; p0 += MM_PASS) {
            int np = n_tok - p0 < MM_PASS ? n_tok - p0 : MM_PASS;
            float *yp = y + (size_t)p0 * ldy + (size_t)rb * ENG_Q4_1_ROWS;
            for (int cb = 0; cb < ncol; cb++) {
                struct kern_mm_chunk c = kern_mm_chunk(chunks, in, xq, rb, p0, cb);
                kern_mm_prefetch_next(&c, rb, rb_end, p0, MM_PASS, n_tok);
                unpack(c.w, c.ng, &tl);
                for (int h = 0; h < 2; h++) {
                    int t = 0;
                    for (; t + 2 <= np; t += 2)
                        block(&tl, c.ng, h, c.xq + t * xs, xs, c.dx + t * ss, c.sx + t * ss, ss,
                              part + t * ENG_Q4_1_ROWS, yp + (size_t)t * ldy, l, c.first, c.last,
                              2);
                    if (t < np)
                        block(&tl, c.ng, h, c.xq + t * xs, xs, c.dx + t * ss, c.sx + t * ss, ss,
                              part + t * ENG_Q4_1_ROWS, yp + (size_t)t * ldy, l, c.first, c.last,
                              1);
                }
            }
        }
    }
}
