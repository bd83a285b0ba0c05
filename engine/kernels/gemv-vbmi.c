/* The decode matrix-vector kernel: Q4_1 weights x one int8 activation row, on
 * AVX-512 VNNI + VBMI (this file alone is compiled with -mavx512vbmi; dispatch.c
 * dispatches to it only when cpuid has both).
 *
 * Decode streams every weight byte once per token, so what matters is the work
 * per byte: one core must keep up with its share of DRAM. The chunk stores a
 * 32-column group of each 16-row half as 4 loads of 64 bytes, byte 8c + p =
 * column c (of the load's 8) and row pair p (low nibble row 2p, high nibble row
 * 2p+1). vpdpbusd wants 4 columns of one row per dword, so one vpermb per load
 * makes dword 2p+k = columns 4k..4k+3 for row pair p: then the int8 x of the
 * load's 8 columns, in memory order, broadcast as a qword, is the other operand
 * (a load, no shuffle). vpermb is the only shuffle per 64 bytes: the batched
 * kernel needs four, and a vpermt2b over both halves costs two (measured here,
 * Sapphire Rapids).
 *
 * The bytes go into vpdpbusd whole, lo + 16*hi, beside the high nibbles alone
 * (andnot, 16*hi): lo = whole - high, exactly, in integers, which saves the
 * and of the low nibbles. At the end of a group each sum is folded (the two
 * quads of a row pair are adjacent lanes; two vpermt2d and an add) into lanes
 * pair 0..15, the even rows 0,2,..,30 and odd rows 1,3,..,31: the very order in
 * which a 64-byte load of the group's 32 BF16 scales splits into two float
 * vectors (<<16 and &0xFFFF0000). Per group: 8 vpermb, 8 andnot, 16 vpdpbusd
 * and ~20 other ops for 640 bytes (~25 cycles; the in-lane batched kernel at one
 * token takes ~50).
 *
 * Arithmetic: each group's integer sum is exact (at most 32*255*128 < 2^24, so
 * its float is exact too; the odd rows' 16*q sums take d_x/16, a power-of-two
 * scaling), then acc = fma(d_w*d_x, isum, acc); acc = fma(m_w, sum_x, acc) group
 * by group in column order, as eng__matvec_q4_1_q8_scalar does: the result is
 * that kernel's bit for bit, up to the sign of a zero (groups wholly past `in`,
 * which add only zeros there, are skipped here). */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/kernels-impl.h"

#define GV_GROUPS (ENG_Q4_1_COLS / ENG_Q4_1_GROUP) /* 8 */
#define GV_HALF 2048                               /* bytes of nibbles per 16-row half */
#define GV_PREFETCH 2 /* chunks ahead, spread over the groups: 10 lines per group, into L2 */

/* vpermb index: byte 4L + c of the result, lane L = 2p + k, is column 4k + c of
 * the load's 8 for row pair p: source byte 8 * (4k + c) + p. */
#define GV_IX(L, c) (uint8_t)(8 * (4 * ((L) & 1) + (c)) + ((L) >> 1))
#define GV_IXL(L) GV_IX(L, 0), GV_IX(L, 1), GV_IX(L, 2), GV_IX(L, 3)
static const uint8_t gv_index[64] __attribute__((aligned(64))) = {
    GV_IXL(0),  GV_IXL(1),  GV_IXL(2),  GV_IXL(3),  GV_IXL(4),  GV_IXL(5),  GV_IXL(6),  GV_IXL(7),
    GV_IXL(8),  GV_IXL(9),  GV_IXL(10), GV_IXL(11), GV_IXL(12), GV_IXL(13), GV_IXL(14), GV_IXL(15),
};

/* Lanes 2p + 2p+1 of a (p < 8) and of b (p >= 8) -> lane p. */
static inline __m512i gv_fold(__m512i a, __m512i b, __m512i ev, __m512i od)
{
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ev, b), _mm512_permutex2var_epi32(a, od, b));
}

static inline __m512i gv_bcast8(const int8_t *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi64(v);
}

void eng__matvec_q4_1_q8_vbmi(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, float *y)
{
    const __m512i ix = _mm512_load_si512(gv_index);
    const __m512i m4 = _mm512_set1_epi8(15), hi16 = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    /* even rows (lanes of ye) and odd rows (lanes of yo) back into row order */
    const __m512i il0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i il1 = _mm512_add_epi32(il0, _mm512_set1_epi32(8));
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;
    int ngroups = (in + ENG_Q4_1_GROUP - 1) / ENG_Q4_1_GROUP; /* groups with data */
    const uint8_t *end = chunks + (size_t)(row_end / ENG_Q4_1_ROWS) * ncol * ENG_Q4_1_CHUNK_BYTES;

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < row_end / ENG_Q4_1_ROWS; rb++) {
        __m512 ye = _mm512_setzero_ps(), yo = _mm512_setzero_ps();
        for (int cb = 0; cb < ncol; cb++) {
            const uint8_t *ch = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES;
            int ng = ngroups - cb * GV_GROUPS < GV_GROUPS ? ngroups - cb * GV_GROUPS : GV_GROUPS;
            /* This thread's rows are one contiguous run of chunks: from DRAM,
             * prefetching a chunk two ahead line by line (10 lines per group, so
             * the prefetches spread over the compute) keeps more lines in flight
             * than the hardware streamer alone; never past the run. Into L2
             * (prefetcht1), not L1: on a Zen 4 core one chunk ahead into L1 read
             * 12-14 GB/s from DRAM on one thread, two ahead into L2 18-20 (no
             * prefetch 11). */
            const uint8_t *pf = ch + GV_PREFETCH * ENG_Q4_1_CHUNK_BYTES;
            int prefetch = pf + ENG_Q4_1_CHUNK_BYTES <= end;
            for (int g = 0; g < ng; g++) {
                int xg = cb * GV_GROUPS + g;
                if (prefetch)
                    for (int l = 0; l < ENG_Q4_1_CHUNK_BYTES / GV_GROUPS; l += 64)
                        _mm_prefetch((const char *)pf + g * (ENG_Q4_1_CHUNK_BYTES / GV_GROUPS) + l, _MM_HINT_T1);
                const uint8_t *a = ch + 1024 + g * 256;
                const int8_t *xc = xq->q + (size_t)xg * ENG_Q4_1_GROUP;
                __m512i f0 = _mm512_setzero_si512(), o0 = f0, f1 = f0, o1 = f0;
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m512i xj = gv_bcast8(xc + 8 * j);
                    __m512i v0 = _mm512_permutexvar_epi8(ix, _mm512_loadu_si512(a + 64 * j));
                    __m512i v1 = _mm512_permutexvar_epi8(ix, _mm512_loadu_si512(a + GV_HALF + 64 * j));
                    f0 = _mm512_dpbusd_epi32(f0, v0, xj);
                    o0 = _mm512_dpbusd_epi32(o0, _mm512_andnot_si512(m4, v0), xj);
                    f1 = _mm512_dpbusd_epi32(f1, v1, xj);
                    o1 = _mm512_dpbusd_epi32(o1, _mm512_andnot_si512(m4, v1), xj);
                }
                __m512i so = gv_fold(o0, o1, ev, od);
                __m512i se = _mm512_sub_epi32(gv_fold(f0, f1, ev, od), so);
                __m512i sd = _mm512_loadu_si512(ch + g * 64), sm = _mm512_loadu_si512(ch + 512 + g * 64);
                __m512 de = _mm512_castsi512_ps(_mm512_slli_epi32(sd, 16));
                __m512 dod = _mm512_castsi512_ps(_mm512_and_si512(sd, hi16));
                __m512 me = _mm512_castsi512_ps(_mm512_slli_epi32(sm, 16));
                __m512 mo = _mm512_castsi512_ps(_mm512_and_si512(sm, hi16));
                __m512 dx = _mm512_set1_ps(xq->d[xg]), dx16 = _mm512_set1_ps(xq->d[xg] * 0.0625f);
                __m512 sx = _mm512_set1_ps(xq->sum[xg]);
                __m512 ae = _mm512_cvtepi32_ps(se), ao = _mm512_cvtepi32_ps(so);
                ye = _mm512_fmadd_ps(_mm512_mul_ps(de, dx), ae, ye);
                ye = _mm512_fmadd_ps(me, sx, ye);
                yo = _mm512_fmadd_ps(_mm512_mul_ps(dod, dx16), ao, yo);
                yo = _mm512_fmadd_ps(mo, sx, yo);
            }
        }
        float *yr = y + (size_t)rb * ENG_Q4_1_ROWS;
        _mm512_storeu_ps(yr, _mm512_permutex2var_ps(ye, il0, yo));
        _mm512_storeu_ps(yr + 16, _mm512_permutex2var_ps(ye, il1, yo));
    }
}

/* ---- a few tokens in one pass: batched decode -----------------------------------
 *
 * With --parallel N the CPU forward pass decodes N sequences as one batch of N
 * tokens. The tile kernel (gemm-avx512.c) unpacks every chunk for each call
 * (~50 cycles a group), which at a handful of tokens costs more than their
 * products. Here the kernel above serves T <= ENG_GEMV_MAX_TOK tokens in one pass
 * over the weights: per group the 8 vpermb and 8 andnot are done once and feed
 * all T tokens' vpdpbusd, each token with its own x broadcast, its own 4 int32
 * accumulators for the group and its own 2 float accumulators for the row block.
 * That is 6T registers: T = 4 leaves 8 of the 32 for the two loads, their high
 * nibbles, x and the constants; T = 8 would spill accumulators every group.
 *
 * Batch invariance: per token and group the integer sums are exact (their order
 * is free) and the float ops are the kernel above's in the same order, on the
 * same inputs: each token's y is that kernel's for the token alone, bit for bit,
 * so a sequence decodes the same text alone and batched. */

/* A zeroed register by the zero idiom: see zero_i in gemm-avx512.c (4T of these
 * per group, which GCC would otherwise copy from one zero, on vpdpbusd's ports). */
static inline __m512i gv_zero(void)
{
    __m512i z;
    __asm__ volatile("vpxord %0, %0, %0" : "=v"(z));
    return z;
}

/* T tokens of eng__matmul_q4_1_q8_vbmi_small: T is a constant after inlining. */
static inline __attribute__((always_inline)) void
gv_small(const uint8_t *chunks, int in, int row_begin, int row_end, const struct eng_q8x *xq,
         float *y, size_t ldy, const int T)
{
    const __m512i ix = _mm512_load_si512(gv_index);
    const __m512i m4 = _mm512_set1_epi8(15), hi16 = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    const __m512i il0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i il1 = _mm512_add_epi32(il0, _mm512_set1_epi32(8));
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;
    int ngroups = (in + ENG_Q4_1_GROUP - 1) / ENG_Q4_1_GROUP;
    const uint8_t *end = chunks + (size_t)(row_end / ENG_Q4_1_ROWS) * ncol * ENG_Q4_1_CHUNK_BYTES;
    /* token t's x, scales and sums: xs bytes and ss floats after token t-1's */
    size_t xs = (size_t)eng_q8x_cols(in), ss = xs / ENG_Q4_1_GROUP;

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < row_end / ENG_Q4_1_ROWS; rb++) {
        __m512 ye[ENG_GEMV_MAX_TOK], yo[ENG_GEMV_MAX_TOK];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            ye[t] = _mm512_setzero_ps(), yo[t] = _mm512_setzero_ps();
        for (int cb = 0; cb < ncol; cb++) {
            const uint8_t *ch = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES;
            int ng = ngroups - cb * GV_GROUPS < GV_GROUPS ? ngroups - cb * GV_GROUPS : GV_GROUPS;
            /* the 1-token kernel's prefetch: the weights stream from DRAM alike */
            const uint8_t *pf = ch + GV_PREFETCH * ENG_Q4_1_CHUNK_BYTES;
            int prefetch = pf + ENG_Q4_1_CHUNK_BYTES <= end;
            for (int g = 0; g < ng; g++) {
                int xg = cb * GV_GROUPS + g;
                if (prefetch)
                    for (int l = 0; l < ENG_Q4_1_CHUNK_BYTES / GV_GROUPS; l += 64)
                        _mm_prefetch((const char *)pf + g * (ENG_Q4_1_CHUNK_BYTES / GV_GROUPS) + l,
                                     _MM_HINT_T1);
                const uint8_t *a = ch + 1024 + g * 256;
                const int8_t *xc = xq->q + (size_t)xg * ENG_Q4_1_GROUP;
                __m512i f0[ENG_GEMV_MAX_TOK], o0[ENG_GEMV_MAX_TOK];
                __m512i f1[ENG_GEMV_MAX_TOK], o1[ENG_GEMV_MAX_TOK];
#pragma GCC unroll 4
                for (int t = 0; t < T; t++)
                    f0[t] = gv_zero(), o0[t] = gv_zero(), f1[t] = gv_zero(), o1[t] = gv_zero();
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const uint8_t *aj = a + 64 * j;
                    __m512i v0 = _mm512_permutexvar_epi8(ix, _mm512_loadu_si512(aj));
                    __m512i v1 = _mm512_permutexvar_epi8(ix, _mm512_loadu_si512(aj + GV_HALF));
                    __m512i h0 = _mm512_andnot_si512(m4, v0), h1 = _mm512_andnot_si512(m4, v1);
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) {
                        __m512i xj = gv_bcast8(xc + t * xs + 8 * j);
                        f0[t] = _mm512_dpbusd_epi32(f0[t], v0, xj);
                        o0[t] = _mm512_dpbusd_epi32(o0[t], h0, xj);
                        f1[t] = _mm512_dpbusd_epi32(f1[t], v1, xj);
                        o1[t] = _mm512_dpbusd_epi32(o1[t], h1, xj);
                    }
                }
                __m512i sd = _mm512_loadu_si512(ch + g * 64);
                __m512i sm = _mm512_loadu_si512(ch + 512 + g * 64);
                __m512 de = _mm512_castsi512_ps(_mm512_slli_epi32(sd, 16));
                __m512 dod = _mm512_castsi512_ps(_mm512_and_si512(sd, hi16));
                __m512 me = _mm512_castsi512_ps(_mm512_slli_epi32(sm, 16));
                __m512 mo = _mm512_castsi512_ps(_mm512_and_si512(sm, hi16));
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    __m512i so = gv_fold(o0[t], o1[t], ev, od);
                    __m512i se = _mm512_sub_epi32(gv_fold(f0[t], f1[t], ev, od), so);
                    float d = xq->d[t * ss + xg];
                    __m512 dx = _mm512_set1_ps(d), dx16 = _mm512_set1_ps(d * 0.0625f);
                    __m512 sx = _mm512_set1_ps(xq->sum[t * ss + xg]);
                    __m512 ae = _mm512_cvtepi32_ps(se), ao = _mm512_cvtepi32_ps(so);
                    ye[t] = _mm512_fmadd_ps(_mm512_mul_ps(de, dx), ae, ye[t]);
                    ye[t] = _mm512_fmadd_ps(me, sx, ye[t]);
                    yo[t] = _mm512_fmadd_ps(_mm512_mul_ps(dod, dx16), ao, yo[t]);
                    yo[t] = _mm512_fmadd_ps(mo, sx, yo[t]);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float *yr = y + (size_t)t * ldy + (size_t)rb * ENG_Q4_1_ROWS;
            _mm512_storeu_ps(yr, _mm512_permutex2var_ps(ye[t], il0, yo[t]));
            _mm512_storeu_ps(yr + 16, _mm512_permutex2var_ps(ye[t], il1, yo[t]));
        }
    }
}

/* Tokens in blocks of ENG_GEMV_MAX_TOK, each one pass over the weights; a lone
 * last token goes to the 1-token kernel (the same result: see above). The
 * dispatcher sends 2 .. ENG_GEMV_MAX_TOK tokens here, more to the tile kernel. */
void eng__matmul_q4_1_q8_vbmi_small(const uint8_t *chunks, int in, int row_begin, int row_end,
                                    const struct eng_q8x *xq, int n_tok, float *y, int ldy)
{
    _Static_assert(ENG_GEMV_MAX_TOK == 4, "the switch below instantiates T = 2, 3, 4");
    size_t l = (size_t)ldy;
    for (int t = 0; t < n_tok; t += ENG_GEMV_MAX_TOK) {
        struct eng_q8x r = kern_q8x_row(xq, in, t);
        float *yt = y + (size_t)t * l;
        switch (n_tok - t) {
        case 1: eng__matvec_q4_1_q8_vbmi(chunks, in, row_begin, row_end, &r, yt); break;
        case 2: gv_small(chunks, in, row_begin, row_end, &r, yt, l, 2); break;
        case 3: gv_small(chunks, in, row_begin, row_end, &r, yt, l, 3); break;
        default: gv_small(chunks, in, row_begin, row_end, &r, yt, l, 4); break;
        }
    }
}
