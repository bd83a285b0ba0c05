/* Checks the CPU kernels against the float64 values tests/kernels/oracle.py wrote
 * into DIR (manifest.txt + raw arrays), on the scalar path and every SIMD path the
 * CPU has. Exit 0 when every case is within tolerance, 1 otherwise.
 *
 * Tolerances (per element, y64 = the oracle's float64 value):
 *   q4_1, bf16 matvec: |y - y64| <= 1e-5 * sum_c |w_c * x_c|
 *   q4_1 with int8 x:  |y - y64| <= sum_g sum|w|_g * d_x[g] / 2 + 1e-5 * sum_c |w_c x_c|
 *   rmsnorm, silu:     |y - y64| <= 1e-5 * |y64| + 1e-6 * max|y64|
 *   softmax:           |y - y64| <= 1e-5 * y64 + 1e-9 */
#include "engine/kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;

static void *load(const char *name, const char *ext, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "rb");
    void *p = malloc(bytes ? bytes : 1);
    if (!f || !p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "oracle-check: cannot read %zu bytes of %s\n", bytes, path);
        exit(2);
    }
    fclose(f);
    return p;
}

/* Worst error / tolerance ratio over a case; > 1 fails. */
static int report(const char *isa, const char *what, const char *name, double worst)
{
    int ok = worst <= 1.0;
    printf("%-4s %-7s %-10s %-18s worst err/tol %.3g\n", ok ? "ok" : "FAIL", isa, what, name, worst);
    return ok ? 0 : 1;
}

static int check_q4_1(const char *isa, int out, int in, const char *name)
{
    int ncol = (in + 255) / 256, cols = eng_q8x_cols(in), fails = 0;
    uint8_t *ch = load(name, "chunks", (size_t)out / 32 * ncol * ENG_Q4_1_CHUNK_BYTES);
    float *x = load(name, "x", (size_t)in * sizeof(float));
    double *y64 = load(name, "y", (size_t)out * sizeof(double));
    double *s = load(name, "s", (size_t)out * sizeof(double));
    double *aw = load(name, "aw", (size_t)out * (cols / 32) * sizeof(double));
    float *y = malloc((size_t)out * sizeof *y);
    struct eng_q8x xq = { malloc((size_t)cols), malloc(cols / 32 * sizeof(float)),
                          malloc(cols / 32 * sizeof(float)) };

    double worst = 0;
    eng_matvec_q4_1(ch, out, in, x, y);
    for (int r = 0; r < out; r++)
        worst = fmax(worst, fabs(y[r] - y64[r]) / (1e-5 * s[r]));
    fails += report(isa, "q4_1", name, worst);

    eng_q8x_quantize(&xq, x, in);
    eng_matvec_q4_1_q8_rows(ch, in, 0, out, &xq, y);
    worst = 0;
    for (int r = 0; r < out; r++) {
        double bound = 1e-5 * s[r];
        for (int g = 0; g < cols / 32; g++)
            bound += aw[(size_t)r * (cols / 32) + g] * xq.d[g] * 0.5;
        worst = fmax(worst, fabs(y[r] - y64[r]) / bound);
    }
    fails += report(isa, "q4_1_q8", name, worst);

    free(ch), free(x), free(y64), free(s), free(aw), free(y), free(xq.q), free(xq.d), free(xq.sum);
    return fails;
}

static int check_bf16(const char *isa, int out, int in, const char *name)
{
    uint16_t *w = load(name, "w", (size_t)out * in * 2);
    float *x = load(name, "x", (size_t)in * sizeof(float));
    double *y64 = load(name, "y", (size_t)out * sizeof(double));
    double *s = load(name, "s", (size_t)out * sizeof(double));
    float *y = malloc((size_t)out * sizeof *y);
    eng_matvec_bf16(w, out, in, x, y);
    double worst = 0;
    for (int r = 0; r < out; r++)
        worst = fmax(worst, fabs(y[r] - y64[r]) / (1e-5 * s[r]));
    free(w), free(x), free(y64), free(s), free(y);
    return report(isa, "bf16", name, worst);
}

/* Elementwise: rel * |y64| + abs_of_max * max|y64| + abs. */
static double worst_elem(const float *y, const double *y64, int n, double rel, double rel_max, double abs)
{
    double mx = 0, worst = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, fabs(y64[i]));
    for (int i = 0; i < n; i++)
        worst = fmax(worst, fabs(y[i] - y64[i]) / (rel * fabs(y64[i]) + rel_max * mx + abs));
    return worst;
}

static int run(const char *isa)
{
    char line[512], kind[32], name[256];
    int fails = 0;
    snprintf(line, sizeof line, "%s/manifest.txt", dir);
    FILE *mf = fopen(line, "r");
    if (!mf) {
        fprintf(stderr, "oracle-check: no %s\n", line);
        exit(2);
    }
    while (fgets(line, sizeof line, mf)) {
        int a, b;
        if (sscanf(line, "%31s", kind) != 1)
            continue;
        if (!strcmp(kind, "q4_1") && sscanf(line, "%*s %d %d %255s", &a, &b, name) == 3) {
            fails += check_q4_1(isa, a, b, name);
        } else if (!strcmp(kind, "bf16") && sscanf(line, "%*s %d %d %255s", &a, &b, name) == 3) {
            fails += check_bf16(isa, a, b, name);
        } else if (!strcmp(kind, "rmsnorm") && sscanf(line, "%*s %d %255s", &a, name) == 2) {
            float *x = load(name, "x", (size_t)a * 4), *y = malloc((size_t)a * 4);
            uint16_t *w = load(name, "w", (size_t)a * 2);
            double *y64 = load(name, "y", (size_t)a * 8);
            eng_rmsnorm(y, x, w, a, 1e-6f);
            fails += report(isa, kind, name, worst_elem(y, y64, a, 1e-5, 1e-6, 0));
            free(x), free(y), free(w), free(y64);
        } else if (!strcmp(kind, "softmax") && sscanf(line, "%*s %d %255s", &a, name) == 2) {
            float *x = load(name, "x", (size_t)a * 4);
            double *y64 = load(name, "y", (size_t)a * 8);
            eng_softmax(x, a);
            fails += report(isa, kind, name, worst_elem(x, y64, a, 1e-5, 0, 1e-9));
            free(x), free(y64);
        } else if (!strcmp(kind, "silu") && sscanf(line, "%*s %d %255s", &a, name) == 2) {
            float *g = load(name, "g", (size_t)a * 4), *u = load(name, "u", (size_t)a * 4);
            double *y64 = load(name, "y", (size_t)a * 8);
            eng_silu_mul(g, u, a);
            fails += report(isa, kind, name, worst_elem(g, y64, a, 1e-5, 1e-6, 0));
            free(g), free(u), free(y64);
        } else {
            fprintf(stderr, "oracle-check: bad manifest line: %s", line);
            fails++;
        }
    }
    fclose(mf);
    return fails;
}

int main(int argc, char **argv)
{
    static const enum eng_isa isas[] = { ENG_ISA_SCALAR, ENG_ISA_AVX2, ENG_ISA_AVX512 };
    int fails = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (eng_kernels_set_isa(isas[i]) != 0) {
            printf("skip %s: CPU lacks it\n", eng_isa_name(isas[i]));
            continue;
        }
        fails += run(eng_isa_name(isas[i]));
    }
    printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
