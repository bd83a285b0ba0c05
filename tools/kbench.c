/* minicpmd-kbench: single-thread throughput of the decode matrix-vector kernels.
 *
 * For each shape it cycles through enough copies of a random Q4_1 matrix to
 * exceed the caches (so the weights come from DRAM, as in decode), times each
 * matvec, and prints the median weight bytes read per second for every ISA the
 * CPU has, float path and int8-x path (the latter including quantizing x).
 * Alongside: the machine's single-thread streaming-read bandwidth, the median of
 * summing a 1 GiB buffer. A benchmark, not a test: nothing is checked.
 *
 * Usage: minicpmd-kbench [reps]   (default 200 matvecs per shape and path)
 * KBENCH_HOT=1 reuses one copy of each matrix instead (cache-resident: the
 * kernel's compute ceiling rather than the DRAM-fed rate). */
#include "engine/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* Four independent 64-bit sums so the loop is load-bound, not add-bound; the
 * compiler vectorizes it at -O2 (gcc 12). */
static uint64_t sum_buffer(const uint64_t *p, size_t n)
{
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    return a + b + c + d;
}

static double stream_read_gbs(void)
{
    size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    double t[9];
    volatile uint64_t sink = 0;
    if (!buf)
        return 0;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    for (int r = 0; r < 9; r++) {
        double t0 = now();
        sink += sum_buffer(buf, n);
        t[r] = now() - t0;
    }
    (void)sink;
    free(buf);
    return (double)bytes / median(t, 9) / 1e9;
}

static void bench_shape(int out, int in, int reps)
{
    int ncol = (in + 255) / 256, cols = eng_q8x_cols(in);
    size_t mbytes = (size_t)(out / 32) * ncol * ENG_Q4_1_CHUNK_BYTES;
    int copies = getenv("KBENCH_HOT") ? 1 : (int)((512u << 20) / mbytes) + 1; /* > 512 MB: far past any cache */
    uint8_t *w = malloc(mbytes * copies);
    float *x = malloc((size_t)in * sizeof *x), *y = malloc((size_t)out * sizeof *y);
    struct eng_q8x xq = { malloc((size_t)cols), malloc(cols / 32 * sizeof(float)),
                          malloc(cols / 32 * sizeof(float)) };
    double *t = malloc((size_t)reps * sizeof *t);
    static const enum eng_isa isas[] = { ENG_ISA_SCALAR, ENG_ISA_AVX2, ENG_ISA_AVX512 };
    if (!w || !x || !y || !xq.q || !xq.d || !xq.sum || !t) {
        fprintf(stderr, "kbench: out of memory\n");
        exit(1);
    }

    /* Random nibbles, scales ~0.01, mins ~-0.08 (BF16 0x3C24, 0xBDA4). */
    for (size_t i = 0; i < mbytes * copies; i += ENG_Q4_1_CHUNK_BYTES) {
        for (int k = 0; k < 256; k++) {
            memcpy(w + i + 2 * k, &(uint16_t){ 0x3C24 }, 2);
            memcpy(w + i + 512 + 2 * k, &(uint16_t){ 0xBDA4 }, 2);
        }
        for (int k = 1024; k < ENG_Q4_1_CHUNK_BYTES; k++)
            w[i + k] = (uint8_t)(rand() >> 7);
    }
    for (int i = 0; i < in; i++)
        x[i] = (float)(rand() % 2001 - 1000) / 1000.0f;

    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (eng_kernels_set_isa(isas[i]) != 0)
            continue;
        for (int q8 = 0; q8 < 2; q8++) {
            int n = isas[i] == ENG_ISA_SCALAR ? (reps < 10 ? reps : 10) : reps;
            for (int r = 0; r < n; r++) {
                const uint8_t *wc = w + mbytes * (size_t)(r % copies);
                double t0 = now();
                if (q8) {
                    eng_q8x_quantize(&xq, x, in);
                    eng_matvec_q4_1_q8_rows(wc, in, 0, out, &xq, y);
                } else {
                    eng_matvec_q4_1(wc, out, in, x, y);
                }
                t[r] = now() - t0;
            }
            double s = median(t, n);
            printf("q4_1 %5dx%-5d %-6s %-9s %8.1f us  %6.2f GB/s%s\n", out, in, eng_isa_name(isas[i]),
                   q8 ? "int8-x" : "float-x", s * 1e6, (double)mbytes / s / 1e9,
                   q8 && !(isas[i] == ENG_ISA_AVX512 && eng_isa_has_vnni()) ? "  (scalar int8)" : "");
        }
    }
    free(w), free(x), free(y), free(xq.q), free(xq.d), free(xq.sum), free(t);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 1)
        reps = 1;
    printf("best ISA: %s, VNNI: %s; one thread, median of %d\n", eng_isa_name(eng_isa_detect()),
           eng_isa_has_vnni() ? "yes" : "no", reps);
    printf("stream read (sum over 1 GiB): %.2f GB/s\n", stream_read_gbs());
    bench_shape(6144, 2048, reps);
    bench_shape(2048, 6144, reps);
    return 0;
}
