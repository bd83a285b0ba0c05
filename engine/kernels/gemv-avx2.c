/* The decode matrix-vector kernel for CPUs with AVX2 but no AVX-512: Q4_1
 * weights x one int8 activation row (this file alone is compiled with -mavx2
 * -mfma; dispatch.c sends one-token products here only when cpuid has them).
 *
 * Decode streams every weight byte once per token, so what counts is the work
 * per byte. The tile kernel (gemm-avx2.c) at one token unpacked each chunk into
 * memory and read it back, ~8 GB/s a core: a quarter of what one core can pull
 * from DRAM. Here the weights go from the load to vpmaddubsw with one vpshufb and
 * the nibble split, and the shuffling that makes rows line up is moved onto x,
 * which every row shares.
 *
 * A 32-byte load of a group is 4 columns x 8 row pairs, byte 8c + p = column c,
 * row pair p (low nibble row 2p, high nibble row 2p + 1); its low 128-bit lane
 * holds columns 0-1, the high lane columns 2-3. One in-lane vpshufb makes bytes
 * 2p, 2p+1 = the two columns of row pair p; x is broadcast to match (x[0], x[1]
 * repeated in the low lane, x[2], x[3] in the high one), so vpmaddubsw gives, in
 * 16-bit lane p of each half, row 2p's (or 2p+1's, from the high nibbles) dot
 * product over two columns, exactly: |2 * 15 * 128| = 3,840. The 8 loads of a
 * group add up in 16 bits (8 x 3,840 = 30,720 < 32,767: still exact); at the
 * group's end the two lanes (columns 0-1 and 2-3 of every quad) are widened and
 * added in 32 bits: the row's exact group sum, even rows 0,2,..,14 in one
 * register and odd rows in another, the order in which the group's BF16 scales
 * split (<<16 and &0xFFFF0000).
 *
 * Arithmetic: acc = fma(d_w*d_x, isum, acc); acc = fma(m_w, sum_x, acc) group by
 * group in column order, as eng__matvec_q4_1_q8_scalar and the AVX2 tile kernel
 * do: the result is theirs bit for bit, up to the sign of a zero (groups wholly
 * past `in`, which add only zeros there, are skipped here). */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/avx2-impl.h"
#include "engine/kernels/kernels-impl.h"

#define GA_GROUPS (ENG_Q4_1_COLS / ENG_Q4_1_GROUP) /* 8 */
#define GA_QUADS (ENG_Q4_1_GROUP / 4)              /* 32-byte loads per group and half: 8 */
#define GA_HALF 2048                               /* bytes of nibbles per 16-row half */
#define GA_PF_GROUP (ENG_Q4_1_CHUNK_BYTES / GA_GROUPS) /* 640: bytes prefetched per group */

/* weights: byte 2p + e <- byte 8e + p of each lane (column e, row pair p) */
static const uint8_t ga_wsh[32] __attribute__((aligned(32))) = {
    0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
    0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
};
/* x: a quad's 4 bytes -> x0 x1 repeated (low lane), x2 x3 repeated (high lane) */
static const uint8_t ga_xsh[32] __attribute__((aligned(32))) = {
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
    2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
};

/* The x pattern of the quad at p (4 int8) for vpmaddubsw against a shuffled load. */
static inline __m256i ga_xpat(const int8_t *p, __m256i xsh)
{
    int32_t x4;
    memcpy(&x4, p, sizeof x4);
    return _mm256_shuffle_epi8(_mm256_set1_epi32(x4), xsh);
}

/* Group g's share of the chunk two after ch, line by line into L2, so the
 * prefetches spread over the compute (as in gemv-vbmi.c, which says why two and
 * L2): more lines in flight than the hardware streamer keeps alone; never at or
 * past `end`, the end of this call's rows.
 * always_inline: see kern_mm_prefetch_next (GCC deletes an outlined prefetch). */
static inline __attribute__((always_inline)) void
ga_prefetch(const uint8_t *ch, int g, const uint8_t *end)
{
    const uint8_t *pf = ch + 2 * ENG_Q4_1_CHUNK_BYTES;
    if (pf + ENG_Q4_1_CHUNK_BYTES > end)
        return;
    for (int l = 0; l < GA_PF_GROUP; l += 64)
        _mm_prefetch((const char *)pf + g * GA_PF_GROUP + l, _MM_HINT_T1);
}

/* 16-bit lanes p of both 128-bit halves, widened and added: 8 int32. */
static inline __m256i ga_fold(__m256i a)
{
    return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(a)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256(a, 1)));
}

void eng__matvec_q4_1_q8_avx2(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, float *y)
{
    const __m256i wsh = _mm256_load_si256((const __m256i *)ga_wsh);
    const __m256i xsh = _mm256_load_si256((const __m256i *)ga_xsh);
    const __m256i m4 = _mm256_set1_epi8(15);
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;
    int ngroups = (in + ENG_Q4_1_GROUP - 1) / ENG_Q4_1_GROUP; /* groups with data */
    const uint8_t *end = chunks + (size_t)(row_end / ENG_Q4_1_ROWS) * ncol * ENG_Q4_1_CHUNK_BYTES;

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < row_end / ENG_Q4_1_ROWS; rb++) {
        /* ya[h][0] the even rows of half h, ya[h][1] the odd ones */
        __m256 ya[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()},
                           {_mm256_setzero_ps(), _mm256_setzero_ps()}};
        for (int cb = 0; cb < ncol; cb++) {
            const uint8_t *ch = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES;
            int ng = ngroups - cb * GA_GROUPS < GA_GROUPS ? ngroups - cb * GA_GROUPS : GA_GROUPS;
            for (int g = 0; g < ng; g++) {
                int xg = cb * GA_GROUPS + g;
                ga_prefetch(ch, g, end);
                const uint8_t *a = ch + 1024 + g * 256;
                const int8_t *xc = xq->q + (size_t)xg * ENG_Q4_1_GROUP;
                __m256i e0 = _mm256_setzero_si256(), o0 = e0, e1 = e0, o1 = e0;
#pragma GCC unroll 8
                for (int k = 0; k < GA_QUADS; k++) {
                    __m256i xp = ga_xpat(xc + 4 * k, xsh);
                    __m256i v0 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(a + 32 * k)), wsh);
                    __m256i v1 = _mm256_shuffle_epi8(
                        _mm256_loadu_si256((const __m256i *)(a + GA_HALF + 32 * k)), wsh);
                    e0 = _mm256_add_epi16(e0, _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), xp));
                    o0 = _mm256_add_epi16(
                        o0, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), xp));
                    e1 = _mm256_add_epi16(e1, _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), xp));
                    o1 = _mm256_add_epi16(
                        o1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), xp));
                }
                __m256 dx = _mm256_set1_ps(xq->d[xg]), sx = _mm256_set1_ps(xq->sum[xg]);
                __m256i is[2][2] = {{ga_fold(e0), ga_fold(o0)}, {ga_fold(e1), ga_fold(o1)}};
                for (int h = 0; h < 2; h++) {
                    __m256 d[2], m[2];
                    kern_avx2_bf16_even_odd(ch + (g * 32 + h * 16) * 2, &d[0], &d[1]);
                    kern_avx2_bf16_even_odd(ch + 512 + (g * 32 + h * 16) * 2, &m[0], &m[1]);
                    for (int e = 0; e < 2; e++) {
                        __m256 dd = _mm256_mul_ps(d[e], dx);
                        ya[h][e] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(is[h][e]), ya[h][e]);
                        ya[h][e] = _mm256_fmadd_ps(m[e], sx, ya[h][e]);
                    }
                }
            }
        }
        float *yr = y + (size_t)rb * ENG_Q4_1_ROWS;
        kern_avx2_store_half(yr, ya[0][0], ya[0][1]);
        kern_avx2_store_half(yr + 16, ya[1][0], ya[1][1]);
    }
}

/* ---- a few tokens in one pass: batched decode -----------------------------------
 *
 * With --parallel N the worker decodes N sequences as one batch of N tokens. The
 * tile kernel's unpack costs more than a handful of tokens' products (a 4-token
 * step took as long as four 1-token steps on the VNNI tile kernel). Here each
 * 32-byte load is shuffled and split once and feeds all T <= ENG_GEMV_MAX_TOK
 * tokens, each with its own x pattern and 16-bit accumulators; a group's two
 * halves go one after the other (2T accumulators in the 16 ymm registers AVX2
 * has), and the float accumulators wait in L1 between groups.
 *
 * Batch invariance: per token and group the integer sums are exact (their order
 * is free) and the float ops are the 1-token kernel's in the same order, on the
 * same inputs: each token's y is that kernel's for the token alone, bit for bit,
 * so a sequence decodes the same text alone and batched. */

/* T tokens of eng__matmul_q4_1_q8_avx2_small: T is a constant after inlining. */
static inline __attribute__((always_inline)) void
ga_small(const uint8_t *chunks, int in, int row_begin, int row_end, const struct eng_q8x *xq,
         float *y, size_t ldy, const int T)
{
    const __m256i wsh = _mm256_load_si256((const __m256i *)ga_wsh);
    const __m256i xsh = _mm256_load_si256((const __m256i *)ga_xsh);
    const __m256i m4 = _mm256_set1_epi8(15);
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;
    int ngroups = (in + ENG_Q4_1_GROUP - 1) / ENG_Q4_1_GROUP;
    const uint8_t *end = chunks + (size_t)(row_end / ENG_Q4_1_ROWS) * ncol * ENG_Q4_1_CHUNK_BYTES;
    /* token t's x, scales and sums: xs bytes and ss floats after token t-1's */
    size_t xs = (size_t)eng_q8x_cols(in), ss = xs / ENG_Q4_1_GROUP;
    /* acc[t][8 * (2h + e)]: half h's even (e = 0) or odd rows, as ya in the 1-token kernel */
    _Alignas(32) float acc[ENG_GEMV_MAX_TOK][ENG_Q4_1_ROWS];

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < row_end / ENG_Q4_1_ROWS; rb++) {
        memset(acc, 0, sizeof acc);
        for (int cb = 0; cb < ncol; cb++) {
            const uint8_t *ch = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES;
            int ng = ngroups - cb * GA_GROUPS < GA_GROUPS ? ngroups - cb * GA_GROUPS : GA_GROUPS;
            for (int g = 0; g < ng; g++) {
                int xg = cb * GA_GROUPS + g;
                ga_prefetch(ch, g, end); /* the weights stream from DRAM alike */
                const int8_t *xc = xq->q + (size_t)xg * ENG_Q4_1_GROUP;
                for (int h = 0; h < 2; h++) {
                    const uint8_t *a = ch + 1024 + h * GA_HALF + g * 256;
                    __m256i e[ENG_GEMV_MAX_TOK], o[ENG_GEMV_MAX_TOK];
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++)
                        e[t] = _mm256_setzero_si256(), o[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
                    for (int k = 0; k < GA_QUADS; k++) {
                        __m256i v = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(a + 32 * k)), wsh);
                        __m256i lo = _mm256_and_si256(v, m4);
                        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
                        for (int t = 0; t < T; t++) {
                            __m256i xp = ga_xpat(xc + t * xs + 4 * k, xsh);
                            e[t] = _mm256_add_epi16(e[t], _mm256_maddubs_epi16(lo, xp));
                            o[t] = _mm256_add_epi16(o[t], _mm256_maddubs_epi16(hi, xp));
                        }
                    }
                    __m256 d[2], m[2];
                    kern_avx2_bf16_even_odd(ch + (g * 32 + h * 16) * 2, &d[0], &d[1]);
                    kern_avx2_bf16_even_odd(ch + 512 + (g * 32 + h * 16) * 2, &m[0], &m[1]);
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) {
                        __m256 dx = _mm256_set1_ps(xq->d[t * ss + xg]);
                        __m256 sx = _mm256_set1_ps(xq->sum[t * ss + xg]);
                        __m256i is[2] = {ga_fold(e[t]), ga_fold(o[t])};
                        for (int ee = 0; ee < 2; ee++) {
                            float *pa = acc[t] + 8 * (2 * h + ee);
                            __m256 a8 = _mm256_load_ps(pa);
                            __m256 dd = _mm256_mul_ps(d[ee], dx);
                            a8 = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(is[ee]), a8);
                            a8 = _mm256_fmadd_ps(m[ee], sx, a8);
                            _mm256_store_ps(pa, a8);
                        }
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float *yr = y + (size_t)t * ldy + (size_t)rb * ENG_Q4_1_ROWS;
            kern_avx2_store_half(yr, _mm256_load_ps(acc[t]), _mm256_load_ps(acc[t] + 8));
            kern_avx2_store_half(yr + 16, _mm256_load_ps(acc[t] + 16), _mm256_load_ps(acc[t] + 24));
        }
    }
}

/* Tokens in blocks of ENG_GEMV_MAX_TOK, each one pass over the weights; a lone
 * last token goes to the 1-token kernel (the same result: see above). The
 * dispatcher sends 2 .. ENG_GEMV_MAX_TOK tokens here, more to the tile kernel. */
void eng__matmul_q4_1_q8_avx2_small(const uint8_t *chunks, int in, int row_begin, int row_end,
                                    const struct eng_q8x *xq, int n_tok, float *y, int ldy)
{
    _Static_assert(ENG_GEMV_MAX_TOK == 4, "the switch below instantiates T = 2, 3, 4");
    size_t l = (size_t)ldy;
    for (int t = 0; t < n_tok; t += ENG_GEMV_MAX_TOK) {
        struct eng_q8x r = kern_q8x_row(xq, in, t);
        float *yt = y + (size_t)t * l;
        switch (n_tok - t) {
        case 1: eng__matvec_q4_1_q8_avx2(chunks, in, row_begin, row_end, &r, yt); break;
        case 2: ga_small(chunks, in, row_begin, row_end, &r, yt, l, 2); break;
        case 3: ga_small(chunks, in, row_begin, row_end, &r, yt, l, 3); break;
        default: ga_small(chunks, in, row_begin, row_end, &r, yt, l, 4); break;
        }
    }
}
