/* CPU compute kernels of the forward pass: matrix-vector (decode) and batched
 * (prefill) products over the Q4NX Q4_1 chunk layout and over row-major BF16, GQA
 * attention over the BF16 KV cache, and the small per-token kernels (RMSNorm,
 * NeoX RoPE, softmax, SwiGLU).
 *
 * Every matrix-vector kernel exists as a scalar reference and as AVX2 and AVX-512
 * variants; eng_isa_detect() picks the best one the CPU has on first use, and
 * eng_kernels_set_isa() forces one (tests compare every path with the scalar one).
 * Kernels are pure functions of their arguments: any thread may call them
 * concurrently on disjoint outputs. Threading is the caller's: each matrix-vector
 * kernel has a `_rows` form that computes only y[row_begin, row_end).
 *
 * Q4_1 chunk layout (docs/model-minicpm5.md §3.9): a weight W[out, in] is stored
 * as 5,120-byte chunks of 32 rows x 256 input columns, row-block-major: chunk f
 * covers rows 32*(f / ncol) .. +31 and columns 256*(f % ncol) .. +255, with
 * ncol = ceil(in / 256). Columns past `in` are padding; the kernels ignore them
 * (they never read x past x[in - 1]). `out` must be a multiple of 32. */
#ifndef MINICPMD_ENGINE_KERNELS_H
#define MINICPMD_ENGINE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define ENG_Q4_1_CHUNK_BYTES 5120
#define ENG_Q4_1_ROWS 32  /* rows per chunk */
#define ENG_Q4_1_COLS 256 /* input columns per chunk */
#define ENG_Q4_1_GROUP 32 /* input columns per scale/min pair */

enum eng_isa {
    ENG_ISA_SCALAR,
    ENG_ISA_AVX2,   /* AVX2 + FMA + F16C */
    ENG_ISA_AVX512, /* AVX-512 F/BW/VL; the int8 path also wants VNNI */
};

/* The best ISA this CPU supports (cpuid via __builtin_cpu_supports). */
enum eng_isa eng_isa_detect(void);

/* Whether this CPU has AVX-512 VNNI (the int8 kernels' choice, dispatch.c). */
int eng_isa_has_vnni(void);
/* Whether it also has AVX-512 VBMI (then eng_matvec_q4_1_q8_rows, and
 * eng_matmul_q4_1_q8_rows up to a few tokens, run on the decode kernel). */
int eng_isa_has_vbmi(void);

/* Force the kernels onto `isa` (tests, benchmarks). Returns 0, or -1 (and
 * changes nothing) if the CPU lacks it. Not thread-safe against running kernels:
 * call it before any kernel runs. */
int eng_kernels_set_isa(enum eng_isa isa);

/* The CPU: cpuid family and model (base + extended: 25/17 for Zen 4, 26 for
 * Zen 5) and the brand string (printable ASCII, trimmed; "unknown" without one). */
struct eng_cpu_ident {
    int family, model;
    char name[49];
};
void eng_cpu_ident(struct eng_cpu_ident *id);

/* Whether eng_kernels_set_isa() chose the kernels (--isa, tests): the model then
 * keeps that ISA's own decode kernel instead of measuring the others. */
int eng_kernels_forced(void);

/* ---- the decode kernel, chosen by measurement --------------------------------
 * Every one-token Q4_1 x int8 kernel gives the scalar reference's bits, so the
 * model may run whichever is fastest on this CPU (engine/model/kchoice.c times
 * them at load). Names: "vbmi" (AVX-512 VBMI), "vnni-tile" (the VNNI tile kernel
 * at one token), "avx2"; "scalar" where none is usable. */

struct eng_q8x;

/* The names the active ISA may use into names[0 .. max-1]; returns how many
 * (at least 1). */
int eng_decode_kernels(const char **names, int max);
/* Make `name` the decode kernel (and its few-token form) of the active ISA: 0,
 * or -1 when the active ISA cannot use it. Not thread-safe against running
 * kernels, like eng_kernels_set_isa (which resets it to the ISA's default). */
int eng_decode_kernel_set(const char *name);
/* The decode kernel in use. */
const char *eng_decode_kernel(void);
/* Run kernel `name` on rows [row_begin, row_end) (timing it): 0, or -1 when
 * the active ISA cannot use it. */
int eng_decode_kernel_run(const char *name, const uint8_t *chunks, int in, int row_begin,
                          int row_end, const struct eng_q8x *xq, float *y);
/* The most tokens a decode batch's kernel takes in one pass over the weights. */
#define ENG_GEMV_MAX_TOK 4
/* The kernel for a decode batch of 2 .. ENG_GEMV_MAX_TOK tokens (--parallel)
 * follows the decode kernel unless set apart: which form is fastest differs
 * (on a 256-bit datapath the AVX2 one-token kernel beats the VBMI one, while
 * VBMI's few-token form, vpdpbusd with broadcast x, is far ahead at 4 tokens).
 * Names as above; set: 0, or -1 when the active ISA cannot use it; reset by
 * eng_decode_kernel_set and eng_kernels_set_isa. */
int eng_few_kernel_set(const char *name);
const char *eng_few_kernel(void);
/* Run `name`'s few-token form on n_tok (2 .. ENG_GEMV_MAX_TOK) tokens of xq
 * (eng_q8x_quantize_batch) into y (ldy floats per token): 0, or -1. */
int eng_few_kernel_run(const char *name, const uint8_t *chunks, int in, int row_begin,
                       int row_end, const struct eng_q8x *xq, int n_tok, float *y, int ldy);

/* The ISA the kernels currently use. */
enum eng_isa eng_kernels_isa(void);

/* "scalar", "avx2", "avx512". */
const char *eng_isa_name(enum eng_isa isa);
/* The ISA named "scalar", "avx2" or "avx512" into *out: 0, or -1 for another
 * name (*out unchanged). */
int eng_isa_parse(const char *name, enum eng_isa *out);

/* ---- matrix-vector --------------------------------------------------------- */

/* y[out] = W[out, in] . x[in] for W in Q4_1 chunks (n_chunks = out/32 * ncol).
 * Exact float arithmetic on the dequantized weights w = q*d + m. */
void eng_matvec_q4_1(const uint8_t *chunks, int out, int in, const float *x, float *y);

/* The same for rows [row_begin, row_end) only, both multiples of 32; writes
 * y[row_begin .. row_end - 1] (y is indexed by absolute row). */
void eng_matvec_q4_1_rows(const uint8_t *chunks, int in, int row_begin, int row_end,
                          const float *x, float *y);

/* y[out] = W[out, in] . x[in] for row-major BF16 W (HF lm_head, embeddings). */
void eng_matvec_bf16(const uint16_t *w, int out, int in, const float *x, float *y);

/* The same for rows [row_begin, row_end) (any rows); writes y[row_begin ..]. */
void eng_matvec_bf16_rows(const uint16_t *w, int in, int row_begin, int row_end,
                          const float *x, float *y);

/* ---- Q4_1 x int8 activations (the fast decode path) ------------------------ */

/* x quantized to int8 per 32-column group: x[c] ~= d[g] * q[c], g = c/32, with
 * each group's sum of the quantized x, d[g] * sum(q), kept for the Q4_1 min
 * term (so a product is W . x^ for one x^; eng_q8x_quantize says why). Storage
 * is the caller's: q holds eng_q8x_cols(in) bytes, d and sum eng_q8x_cols(in)/32
 * floats each; columns past `in` are zero. Quantize once, then any number of
 * threads may run eng_matvec_q4_1_q8_rows on it. */
struct eng_q8x {
    int8_t *q;  /* (cols) */
    float *d;   /* (cols / 32) scale */
    float *sum; /* (cols / 32) d * (the group's integer sum of q) */
};

/* Columns of quantized x for an input of `in`: in rounded up to 256. */
static inline int eng_q8x_cols(int in) { return (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS * ENG_Q4_1_COLS; }

void eng_q8x_quantize(const struct eng_q8x *xq, const float *x, int in);

/* y[row_begin .. row_end - 1] = W . x with x quantized: per group
 * y += d_w * d_x * sum(q_w * q_x) + m_w * d_x * sum(q_x). Runs on the active decode
 * kernel (eng_decode_kernel: by default the VBMI one, else the VNNI tile kernel with
 * one token, else the AVX2 one; the model swaps in the fastest it measures), else on
 * the scalar reference of the same integer arithmetic (dispatch.c); every one gives
 * the reference's bits. Error against exact W.x is bounded by
 * sum_c |w_c| * d_x[g]/2 (half a quantization step of x per term). */
void eng_matvec_q4_1_q8_rows(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const struct eng_q8x *xq, float *y);

/* ---- Q4_1 x int8 activations, a batch of tokens (prefill) ------------------ */

/* n_tok activation rows quantized as above, row t at q + t*cols, d + t*cols/32,
 * sum + t*cols/32 with cols = eng_q8x_cols(in). */
void eng_q8x_quantize_batch(const struct eng_q8x *xq, const float *x, int ldx, int in,
                            int n_tok);

/* Y[t][row] = W[row, :] . x_t for t < n_tok and rows [row_begin, row_end)
 * (multiples of 32); Y row t at y + t*ldy, indexed by absolute row. The same
 * integer arithmetic as eng_matvec_q4_1_q8_rows per token (so the same answer up
 * to float summation order), but each weight chunk is unpacked once and used for
 * a block of tokens: compute-bound instead of bandwidth-bound. The AVX-512 VNNI
 * tile kernel (up to 4 tokens run on the active decode kernel's few-token form
 * instead where it has one, each token's result bit for bit its
 * eng_matvec_q4_1_q8_rows one), else the AVX2 one (ENG_ISA_AVX2), else scalar
 * (dispatch.c). */
void eng_matmul_q4_1_q8_rows(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const struct eng_q8x *xq, int n_tok, float *y, int ldy);

/* ---- attention over a BF16 KV cache ------------------------------------------ */

/* Attention of nq query heads that share one KV head (GQA), over positions
 * 0 .. n-1 (the caller's causal window): for each head h (q + h*hd),
 *   o[h] = sum_j softmax_j(scale * q_h . K_j) V_j,
 * all BF16: V row j at v + j*ldv; K in blocks of ENG_ATTN_KBLOCK positions, each
 * dimension-major: K_j[d] at k[(j / KBLOCK) * hd * KBLOCK + d * KBLOCK + j % KBLOCK]
 * (the positions of a block past n are read but not used). hd a multiple of 16,
 * at most ENG_ATTN_MAX_HD.
 * sc is nq*n floats of scratch (on return, head h's normalized or unnormalized
 * weights at sc + h*n); o is nq*hd floats, overwritten. The AVX-512 path differs
 * from the scalar one by summation order and a polynomial exp only. */
#define ENG_ATTN_KBLOCK 16
#define ENG_ATTN_MAX_HD 512
void eng_attn_gqa(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ldv,
                  int n, int hd, float scale, float *sc, float *o);

/* ---- per-token kernels ----------------------------------------------------- */

/* o[i] = w[i] * x[i] / sqrt(mean(x^2) + eps); w is BF16 as stored in the pack.
 * o may alias x. */
void eng_rmsnorm(float *o, const float *x, const uint16_t *w, int n, float eps);

/* In-place softmax over x[n] (max-subtracted, float accumulation). */
void eng_softmax(float *x, int n);

/* g[i] = silu(g[i]) * u[i], silu(t) = t / (1 + exp(-t)) (AVX-512: a polynomial exp,
 * within 2 ulp of expf). */
void eng_silu_mul(float *g, const float *u, int n);

#endif
