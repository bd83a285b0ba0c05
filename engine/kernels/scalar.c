/* The scalar kernels: the obviously-correct reference every SIMD path is tested
 * against, the fallback on CPUs without AVX2, and the per-token kernels (which
 * cost O(n) next to the O(n^2) matrix-vector products, so are not worth SIMD). */
#include <math.h>
#if defined(__x86_64__)
#include <xmmintrin.h> /* SSE: part of x86-64 itself */
#endif

#include "engine/kernels/kernels-impl.h"

/* The 4-bit weight of chunk-local row r, column c (docs/model-minicpm5.md §3.9):
 * rows come in two 16-row halves of 2,048 bytes; within a half, column c owns 8
 * bytes, one per row pair, low nibble = even row. */
static int q4_1_nibble(const uint8_t *chunk, int r, int c)
{
    uint8_t b = chunk[1024 + (r / 16) * 2048 + c * 8 + (r % 16) / 2];
    return (r & 1) ? b >> 4 : b & 15;
}

/* Dequantize each weight, w = q*d + m, and accumulate w*x: the definition. */
void eng__matvec_q4_1_scalar(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const float *x, float *y)
{
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;
    float xt[ENG_Q4_1_COLS];

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < row_end / ENG_Q4_1_ROWS; rb++) {
        float acc[ENG_Q4_1_ROWS] = { 0 };
        for (int cb = 0; cb < ncol; cb++) {
            const uint8_t *ch = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES;
            const float *xb = kern_x_block(x, in, cb, xt);
            for (int r = 0; r < ENG_Q4_1_ROWS; r++) {
                for (int c = 0; c < ENG_Q4_1_COLS; c++) {
                    int g = c / ENG_Q4_1_GROUP;
                    float d = kern_bf16_at(ch, g * 32 + r);
                    float m = kern_bf16_at(ch + 512, g * 32 + r);
                    acc[r] += ((float)q4_1_nibble(ch, r, c) * d + m) * xb[c];
                }
            }
        }
        for (int r = 0; r < ENG_Q4_1_ROWS; r++)
            y[rb * ENG_Q4_1_ROWS + r] = acc[r];
    }
}

void eng__matvec_bf16_scalar(const uint16_t *w, int in, int row_begin, int row_end,
                             const float *x, float *y)
{
    for (int r = row_begin; r < row_end; r++) {
        const uint16_t *wr = w + (size_t)r * in;
        float acc = 0.0f;
        for (int c = 0; c < in; c++)
            acc += eng_bf16_to_f32(wr[c]) * x[c];
        y[r] = acc;
    }
}

/* lrintf(v) clamped to [-127, 127]. lrintf is a libm call at -O2 (errno); on
 * x86-64 it is cvtss2si in the current rounding mode (half-to-even), whose
 * "invalid" result for NaN or out of range (LONG_MIN) clamps to -127, so use the
 * instruction directly: the same bits without a call per element (with the
 * fmaxf below, the quantizer runs ~2.5x faster). */
static inline int8_t q8_round(float v)
{
#if defined(__x86_64__)
    long q = _mm_cvtss_si64(_mm_set_ss(v));
#else
    long q = lrintf(v);
#endif
    return (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
}

/* Symmetric int8 per 32-group: d = max|x|/127 so q = round(x/d) is in
 * [-127, 127] (never -128: VNNI multiplies it by an unsigned nibble, fine
 * either way, but symmetric keeps the error bound d/2 simple). The max skips NaN
 * (as fmaxf does).
 *
 * The sum is that of the quantized x, d * sum(q), not of x: then every term of
 * the product, d_w*d_x*sum(q_w*q_x) + m_w*d_x*sum(q_x), is exactly W . x^ for
 * the one quantized x^, and its error sum_c w_c*(x^_c - x_c) is independent
 * from row to row. A sum of the float x would make it sum_c (w_c - m)*(x^_c -
 * x_c) instead, and w_c - m >= 0 has a large mean in every row, so the rows
 * would share one error, which the next layer adds up coherently: on 2B's
 * widths that doubles the logit error (tests/model/int8.py). sum(q) is an
 * exact integer (|sum| <= 32*127) and d times its float one rounding, so every
 * SIMD quantizer gets the same bits by doing the same. */
void eng_q8x_quantize(const struct eng_q8x *xq, const float *x, int in)
{
    int cols = eng_q8x_cols(in);
    for (int g = 0; g < cols / ENG_Q4_1_GROUP; g++) {
        int c0 = g * ENG_Q4_1_GROUP;
        int n = in - c0 < ENG_Q4_1_GROUP ? (in - c0 > 0 ? in - c0 : 0) : ENG_Q4_1_GROUP;
        float amax = 0.0f;
        for (int i = 0; i < n; i++) {
            float a = fabsf(x[c0 + i]);
            amax = a > amax ? a : amax; /* fmaxf(amax, a) without the libm call */
        }
        float d = amax / 127.0f;
        float id = d > 0.0f ? 1.0f / d : 0.0f;
        int32_t qsum = 0;
        for (int i = 0; i < ENG_Q4_1_GROUP; i++) {
            int8_t q = i < n ? q8_round(x[c0 + i] * id) : 0;
            xq->q[c0 + i] = q;
            qsum += q;
        }
        xq->d[g] = d;
        xq->sum[g] = d * (float)qsum;
    }
}

/* The integer arithmetic of the VNNI path, one weight at a time: per (row,
 * group) the exact sum of q_w*q_x, then y += d_w*d_x*isum + m_w*d_x*sum(q_x). */
void eng__matvec_q4_1_q8_scalar(const uint8_t *chunks, int in, int row_begin, int row_end,
                                const struct eng_q8x *xq, float *y)
{
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < row_end / ENG_Q4_1_ROWS; rb++) {
        float acc[ENG_Q4_1_ROWS] = { 0 };
        for (int cb = 0; cb < ncol; cb++) {
            const uint8_t *ch = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES;
            for (int g = 0; g < ENG_Q4_1_COLS / ENG_Q4_1_GROUP; g++) {
                int xg = cb * (ENG_Q4_1_COLS / ENG_Q4_1_GROUP) + g;
                const int8_t *qx = xq->q + xg * ENG_Q4_1_GROUP;
                for (int r = 0; r < ENG_Q4_1_ROWS; r++) {
                    int32_t isum = 0;
                    for (int i = 0; i < ENG_Q4_1_GROUP; i++)
                        isum += q4_1_nibble(ch, r, g * ENG_Q4_1_GROUP + i) * qx[i];
                    float d = kern_bf16_at(ch, g * 32 + r);
                    float m = kern_bf16_at(ch + 512, g * 32 + r);
                    acc[r] = fmaf(d * xq->d[xg], (float)isum, acc[r]);
                    acc[r] = fmaf(m, xq->sum[xg], acc[r]);
                }
            }
        }
        for (int r = 0; r < ENG_Q4_1_ROWS; r++)
            y[rb * ENG_Q4_1_ROWS + r] = acc[r];
    }
}

/* Row by row, so each row is bit-for-bit what eng_q8x_quantize gives it. */
void eng__q8x_quantize_batch_scalar(const struct eng_q8x *xq, const float *x, int ldx, int in,
                                    int n_tok)
{
    for (int t = 0; t < n_tok; t++) {
        struct eng_q8x row = kern_q8x_row(xq, in, t);
        eng_q8x_quantize(&row, x + (size_t)t * ldx, in);
    }
}

/* The reference matmul is the reference matvec once per token: the integer sums
 * and the float combine are then those of the decode path by construction. */
void eng__matmul_q4_1_q8_scalar(const uint8_t *chunks, int in, int row_begin, int row_end,
                                const struct eng_q8x *xq, int n_tok, float *y, int ldy)
{
    for (int t = 0; t < n_tok; t++) {
        struct eng_q8x row = kern_q8x_row(xq, in, t);
        eng__matvec_q4_1_q8_scalar(chunks, in, row_begin, row_end, &row, y + (size_t)t * ldy);
    }
}

/* ---- per-token kernels ----------------------------------------------------- */

/* The sum of squares in 16 interleaved partial sums (lane j takes x[j], x[j+16],
 * ...), added up pairwise at the end: one fixed order on every CPU, which the
 * compiler keeps in vector registers (baseline SSE2: 4 independent 4-wide
 * chains). One running float sum is a chain of n dependent adds: ~4 cycles
 * each, 2.5 us for the 2048-wide hidden state, twice per layer per token. */
#define NORM_LANES 16

void eng_rmsnorm(float *o, const float *x, const uint16_t *w, int n, float eps)
{
    float part[NORM_LANES] = {0};
    int i = 0;
    for (; i + NORM_LANES <= n; i += NORM_LANES)
        for (int j = 0; j < NORM_LANES; j++)
            part[j] += x[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++)
        part[j] += x[i] * x[i];
    for (int h = NORM_LANES / 2; h > 0; h /= 2)
        for (int j = 0; j < h; j++)
            part[j] += part[j + h];
    float ss = part[0];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (i = 0; i < n; i++)
        o[i] = eng_bf16_to_f32(w[i]) * (x[i] * inv);
}

void eng_softmax(float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = fmaxf(mx, x[i]);
    /* A double sum: over a long context a float one drifts by ~n ulp. */
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void eng__silu_mul_scalar(float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- attention ---------------------------------------------------------------- */

/* K blocked as eng_attn_gqa() says; 16 partial sums over d in a fixed order. */
static void attn_scores(const float *q, const uint16_t *k, int n, int hd, float scale, float *s)
{
    for (int j = 0; j < n; j++) {
        const uint16_t *kb = k + (size_t)(j / ENG_ATTN_KBLOCK) * hd * ENG_ATTN_KBLOCK +
                             j % ENG_ATTN_KBLOCK;
        float acc[16] = {0};
        for (int d = 0; d < hd; d += 16)
            for (int i = 0; i < 16; i++)
                acc[i] += q[d + i] * eng_bf16_to_f32(kb[(size_t)(d + i) * ENG_ATTN_KBLOCK]);
        float t = 0.0f;
        for (int i = 0; i < 16; i++)
            t += acc[i];
        s[j] = t * scale;
    }
}

static void attn_accum(float *o, const float *p, const uint16_t *v, size_t ld, int n, int hd)
{
    for (int j = 0; j < n; j++) {
        const uint16_t *vr = v + (size_t)j * ld;
        for (int d = 0; d < hd; d++)
            o[d] += p[j] * eng_bf16_to_f32(vr[d]);
    }
}

/* Head by head: scores, eng_softmax, weighted sum of V. */
void eng__attn_gqa_scalar(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ld,
                          int n, int hd, float scale, float *sc, float *o)
{
    for (int h = 0; h < nq; h++) {
        float *s = sc + (size_t)h * n, *oh = o + (size_t)h * hd;
        attn_scores(q + (size_t)h * hd, k, n, hd, scale, s);
        eng_softmax(s, n);
        memset(oh, 0, (size_t)hd * sizeof *oh);
        attn_accum(oh, s, v, ld, n, hd);
    }
}
