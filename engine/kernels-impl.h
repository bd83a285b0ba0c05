/* Internals shared by the kernel files: the per-ISA entry points the dispatcher
 * (kernels.c) chooses between, and BF16 helpers. Not for use outside engine/. */
#ifndef MINICPMD_ENGINE_KERNELS_IMPL_H
#define MINICPMD_ENGINE_KERNELS_IMPL_H

#include <stdint.h>
#include <string.h>

#include "engine/bf16.h"
#include "engine/kernels.h"

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
/* kernels-gemv-vbmi.c (VNNI + VBMI) */
void eng__matvec_q4_1_q8_vbmi(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, float *y);
/* kernels-gemm-avx512.c (the quantizer needs only AVX-512 F/BW/VL) */
void eng__q8x_quantize_batch_avx512(const struct eng_q8x *xq, const float *x, int ldx, int in,
                                    int n_tok);
void eng__matmul_q4_1_q8_vnni(const uint8_t *chunks, int in, int row_begin, int row_end,
                              const struct eng_q8x *xq, int n_tok, float *y, int ldy);

#endif
