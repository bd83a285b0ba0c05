/* CPU kernel tests: every SIMD path against the scalar reference on random data
 * of MiniCPM5's shapes and on odd shapes (in not a multiple of 256, out = 32).
 * A path the CPU lacks is skipped, with an info line (Criterion 2.4 exits 1 after
 * any cr_log_warn, which would fail the whole file on such a CPU). The numpy oracle (tests/kernels/oracle.py)
 * checks the scalar path itself against float64.
 *
 * Tolerance, float paths: |y_simd - y_scalar| <= 1e-5 * sum_c |w_rc * x_c| per
 * row (both accumulate in float, in different orders; the bound is ~100x the
 * expected rounding noise and far below any indexing mistake, which moves y by
 * a whole |w*x| term). Int8 path: against the scalar int8 reference the same
 * 1e-5 bound (the integer sums are exact, only the float combine differs); against
 * the exact float product the quantization bound sum_c |w_rc| * d_x[g]/2.
 * Prefill matmul (int8 x, a batch of tokens): the VNNI kernel against the scalar
 * one with the same 1e-5 bound per (token, row), the AVX2 one bit for bit; the scalar matmul against the
 * scalar matvec token by token, and the batch quantizer against eng_q8x_quantize
 * row by row, bit for bit. Batched decode on VBMI (n_tok up to ENG_GEMV_MAX_TOK):
 * each token bit for bit the 1-token decode kernel's alone (batch invariance). */
#include "engine/kernels/kernels-impl.h" /* the VBMI decode kernel, called directly */
#include "engine/kernels/kernels.h"
#include "tests/check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- random data -------------------------------------------------------------- */

static uint64_t rng_state;

static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xFFFFFF) / 16777216.0f; }

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16); /* truncation: any bf16 will do for test data */
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int ncol_of(int in) { return (in + 255) / 256; }

/* Random chunks: nibbles, scales and mins all random, including the padding
 * columns past `in` (the kernels must ignore them, whatever they hold). */
static uint8_t *random_chunks(int out, int in)
{
    size_t n = (size_t)(out / 32) * ncol_of(in);
    uint8_t *ch = malloc(n * ENG_Q4_1_CHUNK_BYTES);
    cr_assert(ch);
    for (size_t f = 0; f < n; f++) {
        uint8_t *c = ch + f * ENG_Q4_1_CHUNK_BYTES;
        for (int i = 0; i < 256; i++) {
            uint16_t d = to_bf16(rndf(0.001f, 0.02f)), m = to_bf16(rndf(-0.15f, 0.0f));
            memcpy(c + 2 * i, &d, 2);
            memcpy(c + 512 + 2 * i, &m, 2);
        }
        for (int i = 1024; i < ENG_Q4_1_CHUNK_BYTES; i++)
            c[i] = (uint8_t)rnd();
    }
    return ch;
}

/* Independent dequantization of W[r][c] straight from the formula of
 * docs/model-minicpm5.md §3.9. */
static float q4_1_weight(const uint8_t *ch, int in, int r, int c)
{
    const uint8_t *k = ch + ((size_t)(r / 32) * ncol_of(in) + c / 256) * ENG_Q4_1_CHUNK_BYTES;
    int lr = r % 32, lc = c % 256, g = lc / 32;
    uint16_t d, m;
    memcpy(&d, k + 2 * (g * 32 + lr), 2);
    memcpy(&m, k + 512 + 2 * (g * 32 + lr), 2);
    uint8_t b = k[1024 + (lr / 16) * 2048 + lc * 8 + (lr % 16) / 2];
    int q = (lr & 1) ? b >> 4 : b & 15;
    return (float)q * from_bf16(d) + from_bf16(m);
}

static float *random_x(int in)
{
    float *x = malloc((size_t)in * sizeof *x);
    cr_assert(x);
    for (int i = 0; i < in; i++)
        x[i] = rndf(-2.0f, 2.0f);
    return x;
}

static const enum eng_isa simd_isas[] = { ENG_ISA_AVX2, ENG_ISA_AVX512 };

/* ---- Q4_1 float path ---------------------------------------------------------- */

static void check_q4_1(int out, int in)
{
    rng_state = (uint64_t)out * 7919 + (uint64_t)in;
    uint8_t *ch = random_chunks(out, in);
    float *x = random_x(in);
    float *ref = malloc((size_t)out * sizeof *ref), *y = malloc((size_t)out * sizeof *y);
    float *scale = malloc((size_t)out * sizeof *scale);
    cr_assert(ref && y && scale);

    /* The scalar path against the definition, and the scale for the tolerance. */
    cr_assert_eq(eng_kernels_set_isa(ENG_ISA_SCALAR), 0);
    eng_matvec_q4_1(ch, out, in, x, ref);
    for (int r = 0; r < out; r++) {
        double exact = 0, s = 0;
        for (int c = 0; c < in; c++) {
            double t = (double)q4_1_weight(ch, in, r, c) * x[c];
            exact += t;
            s += fabs(t);
        }
        scale[r] = (float)s;
        cr_assert(fabs(ref[r] - exact) <= 1e-5 * s, "scalar %dx%d row %d: %g vs %g", out, in, r,
                  ref[r], exact);
    }

    for (size_t i = 0; i < sizeof simd_isas / sizeof *simd_isas; i++) {
        if (eng_kernels_set_isa(simd_isas[i]) != 0) {
            cr_log_info("skipping %s: CPU lacks it", eng_isa_name(simd_isas[i]));
            continue;
        }
        eng_matvec_q4_1(ch, out, in, x, y);
        for (int r = 0; r < out; r++)
            cr_assert(fabsf(y[r] - ref[r]) <= 1e-5f * scale[r], "%s %dx%d row %d: %g vs %g",
                      eng_isa_name(simd_isas[i]), out, in, r, y[r], ref[r]);

        /* A row range writes exactly its rows, with the same values. */
        if (out >= 96) {
            for (int r = 0; r < out; r++)
                y[r] = -12345.0f;
            eng_matvec_q4_1_rows(ch, in, 32, 96, x, y);
            for (int r = 0; r < out; r++) {
                if (r < 32 || r >= 96)
                    cr_assert_eq(y[r], -12345.0f, "row %d outside the range was written", r);
                else
                    cr_assert(fabsf(y[r] - ref[r]) <= 1e-5f * scale[r]);
            }
        }
    }
    free(ch), free(x), free(ref), free(y), free(scale);
}

MCD_TEST(kernels, q4_1_minicpm5_shapes)
{
    check_q4_1(2048, 2048); /* q_proj, o_proj */
    check_q4_1(256, 2048);  /* k_proj, v_proj */
    check_q4_1(6144, 2048); /* gate, up */
    check_q4_1(2048, 6144); /* down */
}

MCD_TEST(kernels, q4_1_odd_shapes)
{
    check_q4_1(32, 1);
    check_q4_1(32, 31);
    check_q4_1(32, 100);
    check_q4_1(32, 256);
    check_q4_1(32, 300);
    check_q4_1(96, 513);
    check_q4_1(128, 1000);
}

#define CANARY (-12345.0f)

/* ---- Q4_1 with int8 x --------------------------------------------------------- */

static void check_q4_1_q8(int out, int in)
{
    rng_state = (uint64_t)out * 104729 + (uint64_t)in;
    uint8_t *ch = random_chunks(out, in);
    float *x = random_x(in);
    int cols = eng_q8x_cols(in);
    struct eng_q8x xq = {
        .q = malloc((size_t)cols),
        .d = malloc((size_t)cols / 32 * sizeof(float)),
        .sum = malloc((size_t)cols / 32 * sizeof(float)),
    };
    float *ref = malloc((size_t)out * sizeof *ref), *y = malloc((size_t)out * sizeof *y);
    cr_assert(xq.q && xq.d && xq.sum && ref && y);
    eng_q8x_quantize(&xq, x, in);

    /* The quantized x is within half a step of x, and zero in the padding; a
     * group's sum (every kernel's min term) is that of the quantized x. */
    for (int g = 0, qs = 0; g < cols / 32; g++, qs = 0) {
        for (int i = 0; i < 32; i++)
            qs += xq.q[g * 32 + i];
        cr_assert(xq.sum[g] == xq.d[g] * (float)qs, "group %d: sum %g vs d*sum(q)", g, xq.sum[g]);
    }
    for (int c = 0; c < cols; c++) {
        if (c >= in) {
            cr_assert_eq(xq.q[c], 0);
            continue;
        }
        float d = xq.d[c / 32];
        cr_assert(fabsf(d * xq.q[c] - x[c]) <= d * 0.5f * 1.0001f, "col %d", c);
    }

    cr_assert_eq(eng_kernels_set_isa(ENG_ISA_SCALAR), 0);
    eng_matvec_q4_1_q8_rows(ch, in, 0, out, &xq, ref);
    for (int r = 0; r < out; r++) {
        double exact = 0, s = 0, bound = 0;
        for (int c = 0; c < in; c++) {
            double w = q4_1_weight(ch, in, r, c);
            exact += w * x[c];
            s += fabs(w * x[c]);
            bound += fabs(w) * xq.d[c / 32] * 0.5;
        }
        cr_assert(fabs(ref[r] - exact) <= bound + 1e-5 * s, "q8 scalar %dx%d row %d: %g vs %g (bound %g)",
                  out, in, r, ref[r], exact, bound);
        y[r] = (float)s; /* keep the scale for the SIMD comparison */
    }
    float *scale = y;
    float *ys = malloc((size_t)out * sizeof *ys);
    cr_assert(ys);
    if (eng_kernels_set_isa(ENG_ISA_AVX512) == 0 && eng_isa_has_vnni()) {
        eng_matvec_q4_1_q8_rows(ch, in, 0, out, &xq, ys);
        for (int r = 0; r < out; r++)
            cr_assert(fabsf(ys[r] - ref[r]) <= 1e-5f * scale[r], "vnni %dx%d row %d: %g vs %g", out, in, r,
                      ys[r], ref[r]);
    } else {
        cr_log_info("skipping the VNNI path: CPU lacks AVX-512 VNNI");
    }
    /* The AVX2 decode kernel (gemv-avx2.c): the scalar result bit for bit. */
    if (eng_kernels_set_isa(ENG_ISA_AVX2) == 0) {
        eng_matvec_q4_1_q8_rows(ch, in, 0, out, &xq, ys);
        for (int r = 0; r < out; r++)
            cr_assert(ys[r] == ref[r], "avx2 %dx%d row %d: %.9g vs %.9g", out, in, r, ys[r], ref[r]);
    } else {
        cr_log_info("skipping the AVX2 path: CPU lacks AVX2");
    }
    /* The VBMI decode kernel claims the scalar result bit for bit (== also
     * equates the zeros of either sign, which it may differ in). */
    if (eng_isa_has_vbmi()) {
        eng__matvec_q4_1_q8_vbmi(ch, in, 0, out, &xq, ys);
        for (int r = 0; r < out; r++)
            cr_assert(ys[r] == ref[r], "vbmi %dx%d row %d: %.9g vs %.9g", out, in, r, ys[r], ref[r]);
        if (out >= 96) { /* a row sub-range writes its rows only */
            for (int r = 0; r < out; r++)
                ys[r] = CANARY;
            eng__matvec_q4_1_q8_vbmi(ch, in, 32, out - 32, &xq, ys);
            for (int r = 0; r < out; r++)
                cr_assert(r >= 32 && r < out - 32 ? ys[r] == ref[r] : ys[r] == CANARY, "vbmi sub-range row %d", r);
        }
    } else {
        cr_log_info("skipping the VBMI decode kernel: CPU lacks AVX-512 VBMI");
    }
    free(ch), free(x), free(xq.q), free(xq.d), free(xq.sum), free(ref), free(y), free(ys);
}

MCD_TEST(kernels, q4_1_q8_shapes)
{
    check_q4_1_q8(2048, 2048);
    check_q4_1_q8(256, 2048);
    check_q4_1_q8(6144, 2048);
    check_q4_1_q8(2048, 6144);
    check_q4_1_q8(32, 100);
    check_q4_1_q8(96, 513);
    check_q4_1_q8(32, 7);
}

/* ---- Q4_1 with int8 x, a batch of tokens (prefill matmul) -------------------- */

struct q8_batch {
    struct eng_q8x xq;
    int cols;
};

static struct q8_batch q8_batch_new(int in, int n_tok)
{
    struct q8_batch b = { .cols = eng_q8x_cols(in) };
    size_t n = (size_t)n_tok > 0 ? (size_t)n_tok : 1;
    b.xq.q = malloc(n * b.cols);
    b.xq.d = malloc(n * b.cols / 32 * sizeof(float));
    b.xq.sum = malloc(n * b.cols / 32 * sizeof(float));
    cr_assert(b.xq.q && b.xq.d && b.xq.sum);
    return b;
}

static void q8_batch_free(struct q8_batch *b) { free(b->xq.q), free(b->xq.d), free(b->xq.sum); }

static struct eng_q8x q8_batch_row(const struct q8_batch *b, int t)
{
    struct eng_q8x r = { b->xq.q + (size_t)t * b->cols, b->xq.d + (size_t)t * b->cols / 32,
                         b->xq.sum + (size_t)t * b->cols / 32 };
    return r;
}


/* Rows [rb, re) of Y (n_tok x ldy) hold want's values (within tol[t*out + r] when
 * tol, else bit-exact); every other element of y still holds the canary. */
static void check_rows(const char *what, const float *y, const float *want, const float *tol, int out,
                       int in, int n_tok, int ldy, int rb, int re)
{
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < ldy; r++) {
            float v = y[(size_t)t * ldy + r];
            if (r < rb || r >= re) {
                cr_assert_eq(v, CANARY, "%s %dx%d n_tok %d: token %d row %d outside [%d,%d) written", what,
                             out, in, n_tok, t, r, rb, re);
                continue;
            }
            float w = want[(size_t)t * ldy + r];
            if (tol)
                cr_assert(fabsf(v - w) <= tol[(size_t)t * out + r], "%s %dx%d n_tok %d: token %d row %d: %g vs %g",
                          what, out, in, n_tok, t, r, v, w);
            else
                cr_assert(memcmp(&v, &w, sizeof v) == 0, "%s %dx%d n_tok %d: token %d row %d: %g vs %g", what,
                          out, in, n_tok, t, r, v, w);
        }
}

static void fill_canary(float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = CANARY;
}

/* The matmul of n_tok tokens on W[out, in]: (c) quantize_batch row t is
 * eng_q8x_quantize of row t, bit for bit; (b) the scalar matmul's token t is the
 * scalar matvec of row t (bit for bit: the reference matmul is defined as that);
 * (a) VNNI against scalar within 1e-5 * sum_c |w_rc x_tc|; (d) a row sub-range
 * writes only its rows (and never the ldy padding past out). */
static void check_matmul(int out, int in, int n_tok)
{
    rng_state = (uint64_t)out * 15485863 + (uint64_t)in * 7 + (uint64_t)n_tok;
    uint8_t *ch = random_chunks(out, in);
    int ldx = in + 3, ldy = out + 5; /* strides wider than a row */
    size_t ny = (size_t)n_tok * ldy;
    float *x = malloc((size_t)n_tok * ldx * sizeof *x);
    float *ref = malloc(ny * sizeof *ref), *y = malloc(ny * sizeof *y), *yv = malloc(ny * sizeof *yv);
    cr_assert(x && ref && y && yv);
    for (size_t i = 0; i < (size_t)n_tok * ldx; i++)
        x[i] = rndf(-2.0f, 2.0f);
    /* A token of all zeros (d = 0) and one with a single huge value. */
    if (n_tok >= 3) {
        memset(x + ldx, 0, (size_t)in * sizeof *x);
        x[2 * ldx + in / 2] = 1000.0f;
    }

    struct q8_batch b = q8_batch_new(in, n_tok), one = q8_batch_new(in, 1);
    eng_q8x_quantize_batch(&b.xq, x, ldx, in, n_tok);
    for (int t = 0; t < n_tok; t++) {
        struct eng_q8x r = q8_batch_row(&b, t);
        eng_q8x_quantize(&one.xq, x + (size_t)t * ldx, in);
        cr_assert(memcmp(r.q, one.xq.q, (size_t)b.cols) == 0, "quantize_batch %d token %d: q", in, t);
        cr_assert(memcmp(r.d, one.xq.d, (size_t)b.cols / 32 * sizeof(float)) == 0, "token %d: d", t);
        cr_assert(memcmp(r.sum, one.xq.sum, (size_t)b.cols / 32 * sizeof(float)) == 0, "token %d: sum", t);
    }

    /* The scalar matmul, and token by token the scalar matvec. */
    cr_assert_eq(eng_kernels_set_isa(ENG_ISA_SCALAR), 0);
    fill_canary(ref, ny);
    eng_matmul_q4_1_q8_rows(ch, in, 0, out, &b.xq, n_tok, ref, ldy);
    fill_canary(y, ny);
    for (int t = 0; t < n_tok; t++) {
        struct eng_q8x r = q8_batch_row(&b, t);
        eng_matvec_q4_1_q8_rows(ch, in, 0, out, &r, y + (size_t)t * ldy);
    }
    check_rows("scalar matmul vs matvec", ref, y, NULL, out, in, n_tok, ldy, 0, out);

    /* tol[t][r] = 1e-5 * sum_c |w_rc x_tc| */
    float *w = malloc((size_t)out * in * sizeof *w), *tol = malloc((size_t)n_tok * out * sizeof *tol);
    cr_assert(w && tol);
    for (int r = 0; r < out; r++)
        for (int c = 0; c < in; c++)
            w[(size_t)r * in + c] = fabsf(q4_1_weight(ch, in, r, c));
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < out; r++) {
            const float *xt = x + (size_t)t * ldx, *wr = w + (size_t)r * in;
            double s = 0;
            for (int c = 0; c < in; c++)
                s += wr[c] * fabsf(xt[c]);
            tol[(size_t)t * out + r] = (float)(1e-5 * s);
        }

    /* A sub-range on the scalar path too: the canary contract is the API's. */
    if (out >= 64) {
        int rb = 32, re = out >= 128 ? 96 : out;
        fill_canary(y, ny);
        eng_matmul_q4_1_q8_rows(ch, in, rb, re, &b.xq, n_tok, y, ldy);
        check_rows("scalar sub-range", y, ref, NULL, out, in, n_tok, ldy, rb, re);
    }

    /* The AVX2 kernels (one token: gemv-avx2.c, more: the tile kernel): bit for
     * bit, whole and in row ranges. */
    if (eng_kernels_set_isa(ENG_ISA_AVX2) == 0) {
        int ranges[][2] = { { 0, out }, { 0, 32 }, { out - 32, out }, { 32, out >= 96 ? out - 32 : out } };
        for (int i = 0; i < 4; i++) {
            if (ranges[i][0] >= ranges[i][1])
                continue;
            fill_canary(yv, ny);
            eng_matmul_q4_1_q8_rows(ch, in, ranges[i][0], ranges[i][1], &b.xq, n_tok, yv, ldy);
            check_rows("avx2 matmul", yv, ref, NULL, out, in, n_tok, ldy, ranges[i][0], ranges[i][1]);
        }
    } else {
        cr_log_info("skipping the AVX2 matmul: CPU lacks AVX2");
    }

    if (eng_kernels_set_isa(ENG_ISA_AVX512) == 0 && eng_isa_has_vnni()) {
        fill_canary(yv, ny);
        eng_matmul_q4_1_q8_rows(ch, in, 0, out, &b.xq, n_tok, yv, ldy);
        check_rows("vnni matmul", yv, ref, tol, out, in, n_tok, ldy, 0, out);
        int ranges[][2] = { { 0, 32 }, { out - 32, out }, { 32, out >= 96 ? out - 32 : out } };
        for (int i = 0; i < 3; i++) {
            if (ranges[i][0] >= ranges[i][1])
                continue;
            fill_canary(yv, ny);
            eng_matmul_q4_1_q8_rows(ch, in, ranges[i][0], ranges[i][1], &b.xq, n_tok, yv, ldy);
            check_rows("vnni sub-range", yv, ref, tol, out, in, n_tok, ldy, ranges[i][0], ranges[i][1]);
        }
    } else {
        cr_log_info("skipping the VNNI matmul: CPU lacks AVX-512 VNNI");
    }
    q8_batch_free(&b), q8_batch_free(&one);
    free(ch), free(x), free(ref), free(y), free(yv), free(w), free(tol);
}

/* (c) on awkward x: quantize_batch (each ISA's) row t is eng_q8x_quantize of row
 * t bit for bit: q, d and the sum (d times an integer: NaN only as inf * 0,
 * which gives the one default NaN on either side). Rows mix
 * plain values, exact .5 steps (ties to even), zeros, denormals, infinities,
 * quiet NaNs and values near FLT_MAX. */
static float awkward_x(int mode)
{
    uint32_t u = rnd();
    float v;
    switch (mode) {
    case 0: return rndf(-3.0f, 3.0f);
    case 1: return (u % 8 == 0) ? 127.0f : (float)((int)(u % 253) - 126) * 0.5f; /* d = 1: ties */
    case 2: return (u & 1) ? 0.0f : -0.0f;
    case 3: return (float)((int)(u % 2001) - 1000) * 1e-41f; /* denormals */
    case 4: return (u % 5 == 0) ? ((u & 8) ? INFINITY : -INFINITY) : rndf(-1.0f, 1.0f);
    case 5: return (u % 7 == 0) ? NAN : rndf(-1.0f, 1.0f);
    case 6: return (u % 3 == 0) ? 3.4e38f : rndf(-1e38f, 1e38f);
    default:
        u = rnd() | (rnd() << 16); /* any bits, signalling NaNs made quiet */
        if ((u & 0x7F800000u) == 0x7F800000u)
            u |= 0x00400000u;
        memcpy(&v, &u, sizeof v);
        return v;
    }
}

MCD_TEST(kernels, q8x_quantize_batch_exact)
{
    static const int ins[] = { 1, 7, 31, 32, 33, 100, 255, 256, 300, 513, 2048, 6144 };
    static const enum eng_isa isas[] = { ENG_ISA_SCALAR, ENG_ISA_AVX512 };
    enum { NTOK = 9 }; /* one row per mode and one mixing all of them */
    rng_state = 77;
    for (size_t k = 0; k < sizeof ins / sizeof *ins; k++) {
        int in = ins[k], ldx = in + 1;
        float *x = malloc((size_t)NTOK * ldx * sizeof *x);
        cr_assert(x);
        for (int t = 0; t < NTOK; t++)
            for (int c = 0; c < ldx; c++)
                x[(size_t)t * ldx + c] = awkward_x(t < 8 ? t : (int)(rnd() % 8));
        struct q8_batch b = q8_batch_new(in, NTOK), one = q8_batch_new(in, 1);
        for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
            if (eng_kernels_set_isa(isas[i]) != 0)
                continue;
            memset(b.xq.q, 0x5A, (size_t)NTOK * b.cols);
            eng_q8x_quantize_batch(&b.xq, x, ldx, in, NTOK);
            for (int t = 0; t < NTOK; t++) {
                struct eng_q8x r = q8_batch_row(&b, t);
                eng_q8x_quantize(&one.xq, x + (size_t)t * ldx, in);
                for (int c = 0; c < b.cols; c++)
                    cr_assert_eq(r.q[c], one.xq.q[c], "%s in %d token %d col %d: q %d vs %d (x %g)",
                                 eng_isa_name(isas[i]), in, t, c, r.q[c], one.xq.q[c],
                                 c < in ? x[(size_t)t * ldx + c] : 0.0f);
                for (int g = 0; g < b.cols / 32; g++) {
                    cr_assert(memcmp(&r.d[g], &one.xq.d[g], sizeof(float)) == 0, "%s in %d token %d group %d: d %g vs %g",
                              eng_isa_name(isas[i]), in, t, g, r.d[g], one.xq.d[g]);
                    cr_assert(memcmp(&r.sum[g], &one.xq.sum[g], sizeof(float)) == 0,
                              "%s in %d token %d group %d: sum %g vs %g", eng_isa_name(isas[i]), in, t, g,
                              r.sum[g], one.xq.sum[g]);
                }
            }
        }
        q8_batch_free(&b), q8_batch_free(&one);
        free(x);
    }
}

static const int matmul_ntoks[] = { 1, 2, 3, 7, 8, 16, 33, 64 };

MCD_TEST(kernels, q4_1_q8_matmul_odd_shapes)
{
    for (size_t i = 0; i < sizeof matmul_ntoks / sizeof *matmul_ntoks; i++) {
        check_matmul(32, 320, matmul_ntoks[i]);
        check_matmul(64, 320, matmul_ntoks[i]);
        check_matmul(96, 513, matmul_ntoks[i]);
        check_matmul(32, 7, matmul_ntoks[i]);
        check_matmul(128, 768, matmul_ntoks[i]);
    }
}

MCD_TEST(kernels, q4_1_q8_matmul_2048)
{
    for (size_t i = 0; i < sizeof matmul_ntoks / sizeof *matmul_ntoks; i++)
        check_matmul(2048, 2048, matmul_ntoks[i]);
}

/* More tokens than the VNNI kernel takes in one pass over a row block (128):
 * several passes, the last one partial. */
MCD_TEST(kernels, q4_1_q8_matmul_many_tokens)
{
    check_matmul(64, 320, 131);
    check_matmul(96, 513, 200);
    check_matmul(32, 1000, 257);
}

/* n_tok = 0 writes nothing. */
MCD_TEST(kernels, q4_1_q8_matmul_empty)
{
    uint8_t *ch = random_chunks(64, 256);
    struct q8_batch b = q8_batch_new(256, 0);
    float y[64];
    static const enum eng_isa isas[] = { ENG_ISA_SCALAR, ENG_ISA_AVX512 };
    for (size_t i = 0; i < 2; i++) {
        if (eng_kernels_set_isa(isas[i]) != 0)
            continue;
        fill_canary(y, 64);
        eng_q8x_quantize_batch(&b.xq, NULL, 256, 256, 0);
        eng_matmul_q4_1_q8_rows(ch, 256, 0, 64, &b.xq, 0, y, 64);
        for (int r = 0; r < 64; r++)
            cr_assert_eq(y[r], CANARY);
    }
    q8_batch_free(&b);
    free(ch);
}

/* ---- batched decode: batch invariance --------------------------------------- */

/* One ISA's decode kernels: the 1-token kernel, its few-token form and the tile
 * kernel that serves larger batches. */
struct gemv_isa {
    const char *name;
    enum eng_isa isa;
    kern_q4_1_q8_fn one;
    kern_q4_1_q8_mm_fn small, tile;
};

/* eng_matmul_q4_1_q8_rows on `k->isa`, n_tok = 1 .. ENG_GEMV_MAX_TOK + 1 (the
 * few-token decode kernel, then the tile kernel past it): each token's y is
 * bit for bit (memcmp, the sign of a zero included) the 1-token decode kernel's
 * for that token alone, whole and in row ranges, nothing written outside them.
 * A stream's greedy text is the same alone and batched because of exactly this.
 * The few-token kernel called directly takes more tokens, in blocks (up to
 * 2 * MAX + 1: two full blocks and a lone token). Tokens as in check_matmul: one
 * all zeros (d = 0), one with a single huge value. */
static void check_gemv_batch(const struct gemv_isa *k, int out, int in)
{
    enum { NT = 2 * ENG_GEMV_MAX_TOK + 1 };
    rng_state = (uint64_t)out * 2654435761u + (uint64_t)in * 31;
    uint8_t *ch = random_chunks(out, in);
    int ldx = in + 1, ldy = out + 3;
    size_t ny = (size_t)NT * ldy;
    float *x = malloc((size_t)NT * ldx * sizeof *x);
    float *want = malloc(ny * sizeof *want), *y = malloc(ny * sizeof *y);
    cr_assert(x && want && y);
    for (size_t i = 0; i < (size_t)NT * ldx; i++)
        x[i] = rndf(-2.0f, 2.0f);
    memset(x + ldx, 0, (size_t)in * sizeof *x);
    x[2 * ldx + in / 2] = 1000.0f;
    struct q8_batch b = q8_batch_new(in, NT);
    eng_q8x_quantize_batch(&b.xq, x, ldx, in, NT);

    fill_canary(want, ny);
    for (int t = 0; t < NT; t++) {
        struct eng_q8x r = q8_batch_row(&b, t);
        k->one(ch, in, 0, out, &r, want + (size_t)t * ldy);
    }

    char what[64];
    cr_assert_eq(eng_kernels_set_isa(k->isa), 0);
    int mid = out >= 96 ? out - 32 : out;
    int ranges[][2] = { { 0, out }, { 32, out }, { 32, mid }, { out - 32, out } };
    snprintf(what, sizeof what, "%s batch vs 1-token", k->name);
    for (int n_tok = 1; n_tok <= ENG_GEMV_MAX_TOK + 1; n_tok++)
        for (int i = 0; i < 4; i++) {
            if (ranges[i][0] >= ranges[i][1])
                continue;
            fill_canary(y, ny);
            eng_matmul_q4_1_q8_rows(ch, in, ranges[i][0], ranges[i][1], &b.xq, n_tok, y, ldy);
            check_rows(what, y, want, NULL, out, in, n_tok, ldy, ranges[i][0], ranges[i][1]);
        }
    snprintf(what, sizeof what, "%s small vs 1-token", k->name);
    for (int n_tok = 1; n_tok <= NT; n_tok++) {
        fill_canary(y, ny);
        k->small(ch, in, 32 < out ? 32 : 0, out, &b.xq, n_tok, y, ldy);
        check_rows(what, y, want, NULL, out, in, n_tok, ldy, 32 < out ? 32 : 0, out);
    }
    /* The tile kernel, which serves larger batches: the same float ops per token
     * (on VBMI only the odd rows' d_x/16 scaling differs, exact here), so the
     * same bits. */
    snprintf(what, sizeof what, "%s tile vs 1-token", k->name);
    fill_canary(y, ny);
    k->tile(ch, in, 0, out, &b.xq, NT, y, ldy);
    check_rows(what, y, want, NULL, out, in, NT, ldy, 0, out);

    q8_batch_free(&b);
    free(ch), free(x), free(want), free(y);
}

static void check_gemv_batch_shapes(const struct gemv_isa *k)
{
    check_gemv_batch(k, 32, 7);
    check_gemv_batch(k, 64, 100);
    check_gemv_batch(k, 64, 300);
    check_gemv_batch(k, 96, 513);
    check_gemv_batch(k, 128, 768);
    check_gemv_batch(k, 256, 2048);
    check_gemv_batch(k, 2048, 2048);
    check_gemv_batch(k, 256, 6144);
}

MCD_TEST(kernels, q4_1_q8_vbmi_batch_invariance)
{
    if (!eng_isa_has_vbmi()) {
        cr_log_info("skipping the VBMI batch kernel: CPU lacks AVX-512 VBMI");
        return;
    }
    static const struct gemv_isa vbmi = { "vbmi", ENG_ISA_AVX512, eng__matvec_q4_1_q8_vbmi,
                                          eng__matmul_q4_1_q8_vbmi_small, eng__matmul_q4_1_q8_vnni };
    check_gemv_batch_shapes(&vbmi);
}

MCD_TEST(kernels, q4_1_q8_avx2_batch_invariance)
{
    if (eng_kernels_set_isa(ENG_ISA_AVX2) != 0) {
        cr_log_info("skipping the AVX2 batch kernel: CPU lacks AVX2");
        return;
    }
    static const struct gemv_isa avx2 = { "avx2", ENG_ISA_AVX2, eng__matvec_q4_1_q8_avx2,
                                          eng__matmul_q4_1_q8_avx2_small, eng__matmul_q4_1_q8_avx2 };
    check_gemv_batch_shapes(&avx2);
}

/* ---- BF16 --------------------------------------------------------------------- */

static void check_bf16(int out, int in)
{
    rng_state = (uint64_t)out * 31 + (uint64_t)in;
    uint16_t *w = malloc((size_t)out * in * sizeof *w);
    float *x = random_x(in);
    float *ref = malloc((size_t)out * sizeof *ref), *y = malloc((size_t)out * sizeof *y);
    cr_assert(w && ref && y);
    for (size_t i = 0; i < (size_t)out * in; i++)
        w[i] = to_bf16(rndf(-0.1f, 0.1f));

    cr_assert_eq(eng_kernels_set_isa(ENG_ISA_SCALAR), 0);
    eng_matvec_bf16(w, out, in, x, ref);
    for (size_t i = 0; i < sizeof simd_isas / sizeof *simd_isas; i++) {
        if (eng_kernels_set_isa(simd_isas[i]) != 0)
            continue;
        for (int r = 0; r < out; r++)
            y[r] = -1.0f;
        eng_matvec_bf16_rows(w, in, 1, out, x, y);
        cr_assert_eq(y[0], -1.0f);
        for (int r = 1; r < out; r++) {
            double s = 0;
            for (int c = 0; c < in; c++)
                s += fabs((double)from_bf16(w[(size_t)r * in + c]) * x[c]);
            cr_assert(fabs(y[r] - ref[r]) <= 1e-5 * s, "%s bf16 %dx%d row %d: %g vs %g",
                      eng_isa_name(simd_isas[i]), out, in, r, y[r], ref[r]);
        }
    }
    free(w), free(x), free(ref), free(y);
}

MCD_TEST(kernels, bf16_shapes)
{
    check_bf16(2048, 2048);
    check_bf16(512, 2048); /* a slice of lm_head */
    check_bf16(33, 1);
    check_bf16(33, 7);
    check_bf16(5, 100);
    check_bf16(17, 1000);
    check_bf16(3, 2049);
}

/* ---- GQA attention ------------------------------------------------------------- */

/* nq heads sharing one KV head over n positions, hd wide, the V rows ld apart
 * (as in the cache: other heads' columns between them), K in blocks of 16
 * positions (eng_attn_gqa's layout; the positions of the last block past n hold
 * random values, which must not count). Every path against a
 * float64 evaluation of the same BF16 data: per output element
 * |o - o64| <= 2e-5 * sum_j p_j |V_jd| + 1e-6 * max |V|, the first term the
 * float accumulation of the weighted sum, the second the score and exp rounding
 * (scores carry ~1e-6 relative error into p). `sharp` scales q so that the
 * softmax is nearly one-hot and exp underflows for most positions. */
static void check_attn(int nq, int n, int hd, float sharp)
{
    const int isas[] = {ENG_ISA_SCALAR, ENG_ISA_AVX2, ENG_ISA_AVX512};
    size_t ld = (size_t)hd * 2 + 16;
    rng_state = (uint64_t)nq * 1000003u + (uint64_t)n * 131 + (uint64_t)hd;
    float *q = malloc((size_t)nq * hd * sizeof *q), *o = malloc((size_t)nq * hd * sizeof *o);
    float *sc = malloc((size_t)nq * n * sizeof *sc);
    size_t nk = (size_t)(n + ENG_ATTN_KBLOCK - 1) / ENG_ATTN_KBLOCK * ENG_ATTN_KBLOCK * hd;
    uint16_t *k = malloc(nk * 2), *v = malloc((size_t)n * ld * 2);
    double *o64 = malloc((size_t)nq * hd * sizeof *o64), *bound = malloc((size_t)nq * hd * sizeof *bound);
    double *p = malloc((size_t)n * sizeof *p);
    cr_assert(q && o && sc && k && v && o64 && bound && p);
    for (int i = 0; i < nq * hd; i++)
        q[i] = rndf(-1.0f, 1.0f) * sharp;
    double vmax = 0;
    for (size_t i = 0; i < nk; i++)
        k[i] = to_bf16(rndf(-1.0f, 1.0f));
    for (size_t i = 0; i < (size_t)n * ld; i++) {
        v[i] = to_bf16(rndf(-2.0f, 2.0f));
        vmax = fmax(vmax, fabs(from_bf16(v[i])));
    }
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < nq; h++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double d = 0;
            for (int c = 0; c < hd; c++)
                d += (double)q[h * hd + c] *
                     from_bf16(k[(size_t)(j / 16) * hd * 16 + (size_t)c * 16 + j % 16]);
            p[j] = d * scale;
            mx = fmax(mx, p[j]);
        }
        for (int j = 0; j < n; j++)
            sum += p[j] = exp(p[j] - mx);
        for (int c = 0; c < hd; c++) {
            double a = 0, b = 0;
            for (int j = 0; j < n; j++) {
                a += p[j] / sum * from_bf16(v[j * ld + c]);
                b += p[j] / sum * fabs(from_bf16(v[j * ld + c]));
            }
            o64[h * hd + c] = a;
            bound[h * hd + c] = 2e-5 * b + 1e-6 * vmax;
        }
    }
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (eng_kernels_set_isa(isas[i]) != 0)
            continue;
        for (int j = 0; j < nq * hd; j++)
            o[j] = NAN; /* every element must be written */
        eng_attn_gqa(q, nq, k, v, ld, n, hd, scale, sc, o);
        for (int j = 0; j < nq * hd; j++)
            cr_assert(fabs(o[j] - o64[j]) <= bound[j], "%s nq %d n %d hd %d sharp %g: o[%d] %.9g vs %.9g",
                      eng_isa_name(isas[i]), nq, n, hd, sharp, j, o[j], o64[j]);
    }
    eng_kernels_set_isa(eng_isa_detect());
    free(q), free(o), free(sc), free(k), free(v), free(o64), free(bound), free(p);
}

MCD_TEST(kernels, attn_gqa_minicpm5)
{
    /* MiniCPM5: 8 query heads per KV head, head_dim 128; one position (the first
     * decode step), a key block and a tail, a prompt's worth */
    for (int n = 1; n <= 3; n++)
        check_attn(8, n, 128, 1.0f);
    check_attn(8, 17, 128, 1.0f);
    check_attn(8, 513, 128, 1.0f);
    check_attn(8, 100, 128, 40.0f);
}

MCD_TEST(kernels, attn_gqa_other_shapes)
{
    check_attn(16, 40, 128, 1.0f); /* two blocks of 8 */
    check_attn(6, 35, 48, 3.0f);   /* blocks of 4 and 2; a 16-column tail */
    check_attn(3, 9, 16, 1.0f);    /* 2 + 1 */
    check_attn(1, 20, 64, 1.0f);
    check_attn(4, 33, 64, 10.0f);
    check_attn(2, 1, 32, 1.0f);
}

/* ---- dispatch and per-token kernels (values: tests/kernels/oracle.py) -------- */

MCD_TEST(kernels, dispatch)
{
    enum eng_isa best = eng_isa_detect();
    cr_assert_eq(eng_kernels_set_isa(ENG_ISA_SCALAR), 0);
    cr_assert_eq(eng_kernels_isa(), ENG_ISA_SCALAR);
    cr_assert_eq(eng_kernels_set_isa(best), 0);
    cr_assert_eq(eng_kernels_isa(), best);
    cr_assert_str_eq(eng_isa_name(ENG_ISA_AVX512), "avx512");
    enum eng_isa isa = ENG_ISA_SCALAR;
    cr_assert_eq(eng_isa_parse("avx2", &isa), 0);
    cr_assert_eq(isa, ENG_ISA_AVX2);
    cr_assert_eq(eng_isa_parse("avx512", &isa), 0);
    cr_assert_eq(isa, ENG_ISA_AVX512);
    cr_assert_eq(eng_isa_parse("scalar", &isa), 0);
    cr_assert_eq(isa, ENG_ISA_SCALAR);
    cr_assert_eq(eng_isa_parse("avx", &isa), -1);
    cr_assert_eq(eng_isa_parse(NULL, &isa), -1);
    cr_assert_eq(isa, ENG_ISA_SCALAR, "unchanged by a bad name");
}

MCD_TEST(kernels, small_kernels_sanity)
{
    float x[256];
    rng_state = 5;
    for (int i = 0; i < 256; i++)
        x[i] = rndf(-30.0f, 30.0f);
    eng_softmax(x, 256);
    double s = 0;
    for (int i = 0; i < 256; i++) {
        cr_assert(x[i] >= 0.0f && x[i] <= 1.0f);
        s += x[i];
    }
    cr_assert(fabs(s - 1.0) < 1e-5);
}
