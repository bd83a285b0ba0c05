/* CPU kernel tests: every SIMD path against the scalar reference on random data
 * of MiniCPM5's shapes and on odd shapes (in not a multiple of 256, out = 32).
 * A path the CPU lacks is skipped. The numpy oracle (tests/kernels/oracle.py)
 * checks the scalar path itself against float64.
 *
 * Tolerance, float paths: |y_simd - y_scalar| <= 1e-5 * sum_c |w_rc * x_c| per
 * row (both accumulate in float, in different orders; the bound is ~100x the
 * expected rounding noise and far below any indexing mistake, which moves y by
 * a whole |w*x| term). Int8 path: against the scalar int8 reference the same
 * 1e-5 bound (the integer sums are exact, only the float combine differs); against
 * the exact float product the quantization bound sum_c |w_rc| * d_x[g]/2. */
#include "engine/kernels.h"
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

/* Independent dequantization of W[r][c] straight from the §3.9 formula. */
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
            cr_log_warn("skipping %s: CPU lacks it", eng_isa_name(simd_isas[i]));
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

    /* The quantized x is within half a step of x, and zero in the padding. */
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
        cr_log_warn("skipping the VNNI path: CPU lacks AVX-512 VNNI");
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

/* ---- dispatch and per-token kernels (values: tests/kernels/oracle.py) -------- */

MCD_TEST(kernels, dispatch)
{
    enum eng_isa best = eng_isa_detect();
    cr_assert_eq(eng_kernels_set_isa(ENG_ISA_SCALAR), 0);
    cr_assert_eq(eng_kernels_isa(), ENG_ISA_SCALAR);
    cr_assert_eq(eng_kernels_set_isa(best), 0);
    cr_assert_eq(eng_kernels_isa(), best);
    cr_assert_str_eq(eng_isa_name(ENG_ISA_AVX512), "avx512");
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

    /* RoPE at position 0 is the identity and it preserves each pair's norm. */
    float v[2 * 128], v0[2 * 128];
    for (int i = 0; i < 256; i++)
        v[i] = v0[i] = rndf(-1.0f, 1.0f);
    eng_rope_neox(v, 2, 128, 0, 5e6);
    cr_assert_arr_eq(v, v0, sizeof v);
    eng_rope_neox(v, 2, 128, 1234, 5e6);
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 64; d++) {
            float *a = v + h * 128, *b = v0 + h * 128;
            float n1 = a[d] * a[d] + a[d + 64] * a[d + 64], n0 = b[d] * b[d] + b[d + 64] * b[d + 64];
            cr_assert(fabsf(n1 - n0) <= 1e-5f * (n0 + 1e-6f));
        }
}
