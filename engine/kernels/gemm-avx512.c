/* The prefill matrix-matrix kernel, Q4_1 weights x int8 activations on AVX-512
 * VNNI (this file alone is compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni; dispatch.c dispatches to it only when cpuid has VNNI).
 *
 * vpdpbusd multiplies 4 adjacent u8 by 4 adjacent s8 and adds the 4 products to a
 * dword. The nibbles (0..15) are the u8 operand and x the s8 one, so a weight
 * register holds 16 rows x 4 consecutive columns (one row per dword) and x is one
 * dword (4 columns of one token) broadcast to all 16 lanes ({1to16}).
 *
 * Each 32x256 chunk is unpacked into such registers (struct mm_tile, 10 KB, in
 * L1): per 32-column group and 4-column quad, one register per 16-row half;
 * lanes 0-7 are the half's even rows 0,2,..,14 and lanes 8-15 its odd rows
 * 1,3,..,15 (the order the chunk's low and high nibbles fall out in), with the
 * group's scales and mins in the same lane order. Then a pass of up to MM_PASS
 * tokens runs against the tile, MM_TOK tokens at a time: 2 halves x MM_TOK int32
 * accumulators for a group's exact integer sums (x broadcast from memory), folded
 * into 2 x MM_TOK float accumulators at the end of each group exactly as the
 * scalar reference does: acc = fma(d_w*d_x, isum, acc); acc = fma(m_w, sum_x,
 * acc), group by group in column order. Between the chunks of a row block the
 * float accumulators wait in `part` (contiguous, tile lane order: y's rows are
 * ldy floats apart, which for ldy = 2048 puts them all in one L1 set), and the
 * row block's last chunk writes them to y in row order. So the result is
 * bit-identical to eng__matvec_q4_1_q8_scalar per token, up to the sign of a zero
 * (groups wholly past `in`, which only add zeros there, are skipped here).
 *
 * Cost per group and 2 x MM_TOK accumulators: 8 x 2 x MM_TOK vpdpbusd, and per
 * accumulator 1 vcvtdq2ps + 1 vmulps + 2 vfmadd: the float work competes with
 * vpdpbusd for the same two pipes (Zen 5, 2 vpdpbusd a cycle), which caps the
 * kernel near 0.75-0.8 of the vpdpbusd peak. Each chunk is read from memory once
 * per call (the next one prefetched while this one computes) and unpacked once
 * per pass (n_tok / MM_PASS times, ~400 cycles each); x comes from L2/L3 once per
 * row block and pass. Even one token is no reason to fall back on the matvec
 * kernel: with the weights from DRAM this kernel is ~1.8x faster at it. */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/kernels-impl.h"

#define MM_GROUPS (ENG_Q4_1_COLS / ENG_Q4_1_GROUP) /* groups per chunk: 8 */
#define MM_QUADS (ENG_Q4_1_GROUP / 4)              /* 4-column quads per group: 8 */
#define MM_TOK 4                                   /* tokens per register block */
#define MM_PASS (32 * MM_TOK)                      /* tokens per pass over a row block */

/* One chunk in vpdpbusd order: w[g][k][h] = rows of half h (lane order above) x
 * columns 32g + 4k .. +3; d and m the group's scales and mins as floats. */
struct mm_tile {
    __m512i w[MM_GROUPS][MM_QUADS][2];
    __m512 d[MM_GROUPS][2];
    __m512 m[MM_GROUPS][2];
};

/* 16 BF16 values of rows 0..15 at p -> floats, lanes even rows then odd rows. */
static inline __m512 bf16_even_odd(const uint8_t *p)
{
    __m256i w = _mm256_loadu_si256((const __m256i *)p);
    __m256i even = _mm256_slli_epi32(w, 16);
    __m256i odd = _mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u));
    return _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1));
}

/* Groups 0 .. ng-1 of chunk ch into tl. A 64-byte load is 8 columns x 8 row
 * pairs (column-major); vpermd + vpshufb turn it into dword i = (quad i/8, row
 * pair i%8) holding that pair's 4 columns, then
 * the low nibbles are the even rows and the high nibbles the odd rows. */
static void mm_unpack(const uint8_t *ch, int ng, struct mm_tile *tl)
{
    const __m512i gather = _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    const __m512i transpose = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    const __m512i m4 = _mm512_set1_epi8(15);

    for (int g = 0; g < ng; g++) {
        for (int h = 0; h < 2; h++) {
            const uint8_t *nb = ch + 1024 + h * 2048 + g * 256;
            for (int j = 0; j < 4; j++) {
                __m512i v = _mm512_loadu_si512(nb + j * 64);
                v = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(gather, v), transpose);
                __m512i lo = _mm512_and_si512(v, m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                /* quad 2j: 128-bit lanes 0,1 of lo then of hi; quad 2j+1: lanes 2,3. */
                tl->w[g][2 * j][h] = _mm512_shuffle_i64x2(lo, hi, 0x44);
                tl->w[g][2 * j + 1][h] = _mm512_shuffle_i64x2(lo, hi, 0xEE);
            }
            tl->d[g][h] = bf16_even_odd(ch + (g * 32 + h * 16) * 2);
            tl->m[g][h] = bf16_even_odd(ch + 512 + (g * 32 + h * 16) * 2);
        }
    }
}

/* A zeroed register by the zero idiom (vpxord r, r, r: no execution port). Given
 * _mm512_setzero_si512() for 8 accumulators per group, GCC zeroes one register
 * and copies it 8 times, and register copies are not eliminated on Ice Lake and
 * later: 8 more uops per group on the two ports vpdpbusd needs (~7 % by
 * llvm-mca). volatile keeps GCC from merging the 8 into one. */
static inline __m512i zero_i(void)
{
    __m512i z;
    __asm__ volatile("vpxord %0, %0, %0" : "=v"(z));
    return z;
}

static inline __m512i bcast_x(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* T tokens against one tile: x of token t at xq + t*xs (this chunk's columns),
 * its d and sum at dx + t*ss, sx + t*ss. The float accumulators start from zero
 * (first) or from part + 32t (tile lane order), and end in part + 32t or, for the
 * last chunk, in y + t*ldy (the row block's 32 rows, in row order). T is a
 * constant after inlining. */
static inline __attribute__((always_inline)) void
mm_block(const struct mm_tile *tl, int ng, const int8_t *xq, size_t xs, const float *dx,
         const float *sx, size_t ss, float *part, float *y, size_t ldy, int first, int last,
         const int T)
{
    /* row j of a half is lane inv[j] */
    const __m512i inv = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    __m512 ya[2][MM_TOK];

#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            if (first)
                ya[h][t] = _mm512_setzero_ps();
            else
                ya[h][t] = _mm512_load_ps(part + t * ENG_Q4_1_ROWS + h * 16);
        }
    }

    for (int g = 0; g < ng; g++) {
        __m512i acc[2][MM_TOK];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[0][t] = zero_i(), acc[1][t] = zero_i();
#pragma GCC unroll 8
        for (int k = 0; k < MM_QUADS; k++) {
            __m512i w0 = tl->w[g][k][0], w1 = tl->w[g][k][1];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                __m512i xb = bcast_x(xq + t * xs + g * ENG_Q4_1_GROUP + 4 * k);
                acc[0][t] = _mm512_dpbusd_epi32(acc[0][t], w0, xb);
                acc[1][t] = _mm512_dpbusd_epi32(acc[1][t], w1, xb);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m512 dxt = _mm512_set1_ps(dx[t * ss + g]), sxt = _mm512_set1_ps(sx[t * ss + g]);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m512 dd = _mm512_mul_ps(tl->d[g][h], dxt);
                ya[h][t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(acc[h][t]), ya[h][t]);
                ya[h][t] = _mm512_fmadd_ps(tl->m[g][h], sxt, ya[h][t]);
            }
        }
    }

#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            if (last)
                _mm512_storeu_ps(y + t * ldy + h * 16, _mm512_permutexvar_ps(inv, ya[h][t]));
            else
                _mm512_store_ps(part + t * ENG_Q4_1_ROWS + h * 16, ya[h][t]);
        }
    }
}

void eng__matmul_q4_1_q8_vnni(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, int n_tok, float *y, int ldy)
{
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS, rb_end = row_end / ENG_Q4_1_ROWS;
    size_t xs = (size_t)ncol * ENG_Q4_1_COLS, ss = xs / ENG_Q4_1_GROUP, l = (size_t)ldy;
    struct mm_tile tl;
    /* The partial sums of a pass: contiguous, where y's rows are ldy apart
     * (same L1 set, 4K aliasing), 16 KB. */
    _Alignas(64) float part[MM_PASS * ENG_Q4_1_ROWS];

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < rb_end; rb++) {
        for (int p0 = 0; p0 < n_tok; p0 += MM_PASS) {
            int np = n_tok - p0 < MM_PASS ? n_tok - p0 : MM_PASS;
            float *yp = y + (size_t)p0 * ldy + (size_t)rb * ENG_Q4_1_ROWS;
            for (int cb = 0; cb < ncol; cb++) {
                struct kern_mm_chunk c = kern_mm_chunk(chunks, in, xq, rb, p0, cb);
                kern_mm_prefetch_next(&c, rb, rb_end, p0, MM_PASS, n_tok);
                mm_unpack(c.w, c.ng, &tl);

                int t = 0, ng = c.ng, first = c.first, last = c.last;
                for (; t + MM_TOK <= np; t += MM_TOK)
                    mm_block(&tl, ng, c.xq + t * xs, xs, c.dx + t * ss, c.sx + t * ss, ss,
                             part + t * ENG_Q4_1_ROWS, yp + (size_t)t * ldy, l, first, last,
                             MM_TOK);
                const int8_t *xt = c.xq + t * xs;
                const float *dt = c.dx + t * ss, *st = c.sx + t * ss;
                float *pt = part + t * ENG_Q4_1_ROWS, *yt = yp + (size_t)t * ldy;
                switch (np - t) {
                case 3: mm_block(&tl, ng, xt, xs, dt, st, ss, pt, yt, l, first, last, 3); break;
                case 2: mm_block(&tl, ng, xt, xs, dt, st, ss, pt, yt, l, first, last, 2); break;
                case 1: mm_block(&tl, ng, xt, xs, dt, st, ss, pt, yt, l, first, last, 1); break;
                default: break;
                }
            }
        }
    }
}

/* ---- the batch quantizer ---------------------------------------------------- */

/* r[i] lane j <- r[j] lane i. */
static inline void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    }
}

/* Mask of the first n (clamped to 0..16) lanes. */
static inline __mmask16 first_lanes(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* eng_q8x_quantize row by row, bit for bit, 16 groups at a time: lane j of the
 * max vector is group j. Loading 16 columns of each of the 16 groups and
 * transposing gives vectors of column i of every group, and vmaxps(|x|, amax)
 * is the reference's `a > amax ? a : amax` exactly (NaN skipped); columns past
 * `in` load as +0.0, which changes no max. d = amax/127 and 1/d are IEEE
 * divisions as there; vcvtps2dq rounds half-to-even like cvtss2si, and its
 * "invalid" result (only from NaN or infinite x*id: a finite 1/d keeps |x*id|
 * near 127) clamps to -127 as the reference's does. The sum is the reference's
 * too: the exact integer sum of the group's q (any order), times d once. */
void eng__q8x_quantize_batch_avx512(const struct eng_q8x *xq, const float *x, int ldx, int in,
                                    int n_tok)
{
    const __m512i qmax = _mm512_set1_epi32(127), qmin = _mm512_set1_epi32(-127);
    int cols = eng_q8x_cols(in), ng = cols / ENG_Q4_1_GROUP;

    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * ldx;
        int8_t *qt = xq->q + (size_t)t * cols;
        float *dt = xq->d + (size_t)t * ng, *st = xq->sum + (size_t)t * ng;
        for (int g0 = 0; g0 < ng; g0 += 16) {
            int c0 = g0 * ENG_Q4_1_GROUP, gn = ng - g0 < 16 ? ng - g0 : 16;
            __m512 amax = _mm512_setzero_ps();
            for (int h = 0; h < 2; h++) { /* columns 0-15, then 16-31 of each group */
                __m512 r[16];
                for (int j = 0; j < 16; j++) {
                    int c = c0 + j * ENG_Q4_1_GROUP + 16 * h;
                    __mmask16 m = j < gn ? first_lanes(in - c) : 0;
                    r[j] = _mm512_maskz_loadu_ps(m, xt + (m ? c : 0));
                }
                transpose16(r);
                for (int i = 0; i < 16; i++)
                    amax = _mm512_max_ps(_mm512_abs_ps(r[i]), amax);
            }
            __mmask16 gm = first_lanes(gn);
            __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
            __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_GT_OQ),
                                            _mm512_set1_ps(1.0f), d);
            _mm512_mask_storeu_ps(dt + g0, gm, d);
            float ids[16];
            _mm512_storeu_ps(ids, id);
            for (int j = 0; j < gn; j++) {
                __m512 idj = _mm512_set1_ps(ids[j]);
                __m512i qsum = _mm512_setzero_si512();
                for (int h = 0; h < 2; h++) {
                    int c = c0 + j * ENG_Q4_1_GROUP + 16 * h;
                    __mmask16 lm = first_lanes(in - c);
                    __m512 v = _mm512_maskz_loadu_ps(lm, xt + (lm ? c : 0));
                    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, idj));
                    q = _mm512_maskz_mov_epi32(lm, _mm512_max_epi32(_mm512_min_epi32(q, qmax), qmin));
                    _mm_storeu_si128((__m128i *)(qt + c), _mm512_cvtepi32_epi8(q));
                    qsum = _mm512_add_epi32(qsum, q);
                }
                st[g0 + j] = dt[g0 + j] * (float)_mm512_reduce_add_epi32(qsum);
            }
        }
    }
}
