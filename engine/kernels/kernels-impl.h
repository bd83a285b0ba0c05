/* Internals shared by the kernel files: the per-ISA entry points the dispatcher
 * (dispatch.c) chooses between, and BF16 helpers. Not for use outside engine/. */
#ifndef MINICPMD_ENGINE_KERNELS_IMPL_H
#define MINICPMD_ENGINE_KERNELS_IMPL_H

#include <stdint.h>
#include <string.h>
#include <xmmintrin.h> /* _mm_prefetch: SSE, part of x86-64 itself */

#include "engine/kernels/bf16.h"
#include "engine/kernels/kernels.h"

/* Element i of a little-endian BF16 array at a possibly unaligned address. */
static inline float kern_bf16_at(const uint8_t *p, int i) { return eng_bf16_load(p, (size_t)i); }

/* x for column block cb of an input of `in` columns: a pointer into x, or for a
 * final partial block the tail copied into xt[256] and zero-padded, so kernels
 * never read x past `in` (the padded weights need not be zero). */
static inline const float *kern_x_block(const float *x, int in, int cb, float *xt)
{
    int c0 = cb * ENG_Q4_1_COLS;
    if (c0 + ENG_Q4_1_COLS <= in)
        return x + c0;
    int n = in - c0;
    memcpy(xt, x + c0, (size_t)n * sizeof *xt);
    memset(xt + n, 0, (size_t)(ENG_Q4_1_COLS - n) * sizeof *xt);
    return xt;
}

/* ---- the tiled Q4_1 x int8 matmuls (gemm-avx2.c, -avx512.c) ---------- *
 *
 * Both walk row block rb, then passes of up to `pass` tokens from p0, then the
 * row block's chunks cb in memory order; this is one chunk of that walk. */
struct kern_mm_chunk {
    const uint8_t *w;           /* the chunk's 5,120 bytes */
    const int8_t *xq;           /* token p0's x at the chunk's columns (rows xs apart) */
    const float *dx, *sx;       /* its per-group scales and sums (rows ss apart) */
    int ng;                     /* groups holding data (past `in`: none) */
    int first, last;            /* the row block's first / last chunk */
};

static inline struct kern_mm_chunk kern_mm_chunk(const uint8_t *chunks, int in,
                                                 const struct eng_q8x *xq, int rb, int p0,
                                                 int cb)
{
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS, gpc = ENG_Q4_1_COLS / ENG_Q4_1_GROUP;
    int ngroups = (in + ENG_Q4_1_GROUP - 1) / ENG_Q4_1_GROUP;
    size_t xs = (size_t)ncol * ENG_Q4_1_COLS, ss = xs / ENG_Q4_1_GROUP;
    struct kern_mm_chunk c = {
        .w = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES,
        .xq = xq->q + (size_t)p0 * xs + (size_t)cb * ENG_Q4_1_COLS,
        .dx = xq->d + (size_t)p0 * ss + (size_t)cb * gpc,
        .sx = xq->sum + (size_t)p0 * ss + (size_t)cb * gpc,
        .ng = ngroups - cb * gpc < gpc ? ngroups - cb * gpc : gpc,
        .first = cb == 0,
        .last = cb == ncol - 1,
    };
    return c;
}

/* Prefetch the chunk after c in memory when it is the next one the walk unpacks
 * (not a later pass over this row block's chunks, which are in L2 by then): from
 * DRAM while this one computes. rb_end is the walk's end row block.
 *
 * always_inline, as every helper that only prefetches must be: GCC 12 otherwise
 * splits the loop into a function of its own (partial inlining), finds it free of
 * side effects (a prefetch has none it must keep) and deletes the call. That
 * happened here and in gemv-avx2.c without a word; test-kernels' "prefetch"
 * check counts the instructions in the built kernels. */
static inline __attribute__((always_inline)) void kern_mm_prefetch_next(const struct kern_mm_chunk *c, int rb, int rb_end,
                                         int p0, int pass, int n_tok)
{
    if (c->last && (p0 + pass < n_tok || rb + 1 >= rb_end))
        return;
    for (int l = 0; l < ENG_Q4_1_CHUNK_BYTES; l += 64)
        _mm_prefetch((const char *)c->w + ENG_Q4_1_CHUNK_BYTES + l, _MM_HINT_T0);
}

/* ---- e^x in the vector kernels (kernels-attn-*.c) -------------------------------
 * x = n ln2 + r with ln2 split hi + lo (Cody-Waite), |r| <= ln2/2, and
 * e^r = 1 + r + r^2 (P5 + r (P4 + r (P3 + r (P2 + r (P1 + r P0))))): Cephes expf,
 * ~1 ulp. */
#define KERN_EXP_LOG2E 1.44269504088896341f
#define KERN_EXP_LN2_HI 0.693359375f
#define KERN_EXP_LN2_LO (-2.12194440e-4f)
#define KERN_EXP_P0 1.9875691500e-4f
#define KERN_EXP_P1 1.3981999507e-3f
#define KERN_EXP_P2 8.3334519073e-3f
#define KERN_EXP_P3 4.1665795894e-2f
#define KERN_EXP_P4 1.6666665459e-1f
#define KERN_EXP_P5 5.0000001201e-1f

typedef void (*kern_q4_1_fn)(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const float *x, float *y);
typedef void (*kern_bf16_fn)(const uint16_t *w, int in, int row_begin, int row_end,
                             const float *x, float *y);
typedef void (*kern_q4_1_q8_fn)(const uint8_t *chunks, int in, int row_begin, int row_end,
                                const struct eng_q8x *xq, float *y);
typedef void (*kern_q8x_batch_fn)(const struct eng_q8x *xq, const float *x, int ldx, int in,
                                  int n_tok);
typedef void (*kern_q4_1_q8_mm_fn)(const uint8_t *chunks, int in, int row_begin, int row_end,
                                   const struct eng_q8x *xq, int n_tok, float *y, int ldy);

/* Token t's quantized activation row inside a batch (eng_q8x_quantize_batch). */
static inline struct eng_q8x kern_q8x_row(const struct eng_q8x *xq, int in, int t)
{
    size_t cols = (size_t)eng_q8x_cols(in);
    struct eng_q8x r = { xq->q + (size_t)t * cols, xq->d + (size_t)t * (cols / ENG_Q4_1_GROUP),
                         xq->sum + (size_t)t * (cols / ENG_Q4_1_GROUP) };
    return r;
}

typedef void (*kern_attn_fn)(const float *q, int nq, const uint16_t *k, const uint16_t *v,
                             size_t ld, int n, int hd, float scale, float *sc, float *o);
typedef void (*kern_silu_fn)(float *g, const float *u, int n);
void eng__attn_gqa_scalar(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ld,
                          int n, int hd, float scale, float *sc, float *o);
void eng__attn_gqa_avx512(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ld,
                          int n, int hd, float scale, float *sc, float *o);
void eng__attn_gqa_avx2(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ld,
                        int n, int hd, float scale, float *sc, float *o);
void eng__silu_mul_scalar(float *g, const float *u, int n);
void eng__silu_mul_avx2(float *g, const float *u, int n);
void eng__silu_mul_avx512(float *g, const float *u, int n);

void eng__matvec_q4_1_scalar(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const float *x, float *y);
void eng__matvec_bf16_scalar(const uint16_t *w, int in, int row_begin, int row_end,
                             const float *x, float *y);
void eng__matvec_q4_1_q8_scalar(const uint8_t *chunks, int in, int row_begin, int row_end,
                                const struct eng_q8x *xq, float *y);
void eng__q8x_quantize_batch_scalar(const struct eng_q8x *xq, const float *x, int ldx, int in,
                                    int n_tok);
void eng__matmul_q4_1_q8_scalar(const uint8_t *chunks, int in, int row_begin, int row_end,
                                const struct eng_q8x *xq, int n_tok, float *y, int ldy);

void eng__matvec_q4_1_avx2(const uint8_t *chunks, int in, int row_begin, int row_end,
                           const float *x, float *y);
void eng__matvec_bf16_avx2(const uint16_t *w, int in, int row_begin, int row_end,
                           const float *x, float *y);

void eng__matmul_q4_1_q8_avx2(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, int n_tok, float *y, int ldy);
void eng__matvec_q4_1_avx512(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const float *x, float *y);
void eng__matvec_bf16_avx512(const uint16_t *w, int in, int row_begin, int row_end,
                             const float *x, float *y);
/* gemv-vbmi.c (VNNI + VBMI) */
void eng__matvec_q4_1_q8_vbmi(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, float *y);
/* 2 .. ENG_GEMV_MAX_TOK tokens in one pass over the weights, each token's y bit for
 * bit eng__matvec_q4_1_q8_vbmi's (batched decode); more tokens in blocks of that. */
void eng__matmul_q4_1_q8_vbmi_small(const uint8_t *chunks, int in, int row_begin, int row_end,
                                    const struct eng_q8x *xq, int n_tok, float *y, int ldy);
/* gemv-avx2.c: one token, y bit for bit eng__matmul_q4_1_q8_avx2's (decode), and
 * the same for 2 .. ENG_GEMV_MAX_TOK tokens in one pass (batched decode) */
void eng__matvec_q4_1_q8_avx2(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, float *y);
void eng__matmul_q4_1_q8_avx2_small(const uint8_t *chunks, int in, int row_begin, int row_end,
                                    const struct eng_q8x *xq, int n_tok, float *y, int ldy);
/* gemm-avx512.c (the quantizer needs only AVX-512 F/BW/VL) */
void eng__q8x_quantize_batch_avx512(const struct eng_q8x *xq, const float *x, int ldx, int in,
                                    int n_tok);
void eng__matmul_q4_1_q8_vnni(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, int n_tok, float *y, int ldy);

#endif
