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
 * kernel's compute ceiling rather than the DRAM-fed rate).
 *
 * minicpmd-kbench pool [threads] [regions]   (default 2 threads, 1000000 regions)
 * instead times the compute pool: ns per empty region back to back (the decode
 * case, workers spinning; median of batches, and the mean), and per region
 * opened after the workers have gone to sleep (the futex wake-up path).
 *
 * minicpmd-kbench gemm [reps]   (default 15)
 * instead times the prefill matmul (eng_matmul_q4_1_q8_rows, one thread) on the
 * MiniCPM5-2B shapes for 1, 16, 64 and 512 tokens: median (and best) GMAC/s over
 * up to reps calls, each on a fresh copy of the weights (so they come from DRAM
 * once per call, as in prefill), beside the vpdpbusd peak of this core (best of a
 * tight loop of independent vpdpbusd zmm, 64 MACs each) and the ratio to it, and
 * the same loop with the float work exact Q4_1 owes per 8 vpdpbusd (the tile
 * kernels' arithmetic ceiling, loads aside). Both
 * are timed in thread CPU time, so a busy machine's other processes do not count.
 * x is quantized outside the timing (eng_q8x_quantize_batch, printed apart).
 * KBENCH_HOT=1 reuses one copy of the weights (the compute ceiling);
 * KBENCH_ISA=avx2|scalar|avx512 forces that ISA's kernels.
 *
 * minicpmd-kbench decode [reps]   (default 300)
 * instead times every one-token int8 kernel this CPU has side by side on the
 * MiniCPM5-2B shapes (the VBMI decode kernel, the VNNI tile kernel at one token,
 * the AVX2 decode kernel, the AVX2 tile kernel at one token),
 * weights from DRAM (cycling copies past 512 MB) and
 * from cache (one copy): median GB/s of weight bytes, beside one thread's
 * streaming read. */
#include "engine/kernels/kernels-impl.h" /* decode mode times the per-ISA kernels directly */
#include "engine/kernels/kernels.h"
#include "engine/kernels/pool.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        double t0 = ut_now_s();
        sink += sum_buffer(buf, n);
        t[r] = ut_now_s() - t0;
    }
    (void)sink;
    free(buf);
    return (double)bytes / median(t, 9) / 1e9;
}

/* Random nibbles, scales ~0.01, mins ~-0.08 (BF16 0x3C24, 0xBDA4) in every chunk
 * of w[bytes]; x[in] uniform in [-1, 1]. */
static void random_weights(uint8_t *w, size_t bytes, float *x, int in)
{
    for (size_t i = 0; i < bytes; i += ENG_Q4_1_CHUNK_BYTES) {
        for (int k = 0; k < 256; k++) {
            memcpy(w + i + 2 * k, &(uint16_t){ 0x3C24 }, 2);
            memcpy(w + i + 512 + 2 * k, &(uint16_t){ 0xBDA4 }, 2);
        }
        for (int k = 1024; k < ENG_Q4_1_CHUNK_BYTES; k++)
            w[i + k] = (uint8_t)(rand() >> 7);
    }
    for (int i = 0; i < in; i++)
        x[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
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

    random_weights(w, mbytes * copies, x, in);

    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (eng_kernels_set_isa(isas[i]) != 0)
            continue;
        for (int q8 = 0; q8 < 2; q8++) {
            int n = isas[i] == ENG_ISA_SCALAR ? (reps < 10 ? reps : 10) : reps;
            for (int r = 0; r < n; r++) {
                const uint8_t *wc = w + mbytes * (size_t)(r % copies);
                double t0 = ut_now_s();
                if (q8) {
                    eng_q8x_quantize(&xq, x, in);
                    eng_matvec_q4_1_q8_rows(wc, in, 0, out, &xq, y);
                } else {
                    eng_matvec_q4_1(wc, out, in, x, y);
                }
                t[r] = ut_now_s() - t0;
            }
            double s = median(t, n);
            printf("q4_1 %5dx%-5d %-6s %-9s %8.1f us  %6.2f GB/s%s\n", out, in, eng_isa_name(isas[i]),
                   q8 ? "int8-x" : "float-x", s * 1e6, (double)mbytes / s / 1e9,
                   q8 && !(isas[i] == ENG_ISA_AVX512 && eng_isa_has_vnni()) ? "  (scalar int8)" : "");
        }
    }
    free(w), free(x), free(y), free(xq.q), free(xq.d), free(xq.sum), free(t);
}

static void empty_region(void *ctx, int ith, int nth)
{
    (void)ctx, (void)ith, (void)nth;
}

static int bench_pool(int threads, long regions)
{
    eng_pool *p = NULL;
    int rc = eng_pool_new(threads, &p);
    if (rc) {
        fprintf(stderr, "kbench: eng_pool_new: %d\n", rc);
        return 1;
    }
    for (int r = 0; r < 1000; r++) /* workers up and spinning */
        eng_pool_run(p, empty_region, NULL);
    /* Batches of 1000: the median batch is what a region costs when nothing
     * else wants the CPUs; the overall mean includes every preemption. */
    long nb = regions / 1000 > 0 ? regions / 1000 : 1;
    double *batch = malloc((size_t)nb * sizeof *batch);
    if (!batch) {
        eng_pool_free(p);
        return 1;
    }
    double t0 = ut_now_s();
    for (long b = 0; b < nb; b++) {
        double t1 = ut_now_s();
        for (int r = 0; r < 1000; r++)
            eng_pool_run(p, empty_region, NULL);
        batch[b] = (ut_now_s() - t1) / 1000;
    }
    double hot = (ut_now_s() - t0) / (double)(nb * 1000), hot_med = median(batch, (int)nb);
    free(batch);

    /* 5 ms apart: past the spin budget, so every region wakes sleeping workers. */
    enum { COLD = 200 };
    double cold = 0;
    for (int r = 0; r < COLD; r++) {
        nanosleep(&(struct timespec){ 0, 5 * 1000 * 1000 }, NULL);
        double t1 = ut_now_s();
        eng_pool_run(p, empty_region, NULL);
        cold += ut_now_s() - t1;
    }
    printf("pool, %d threads: %.0f ns per empty region back to back (median of %ld batches of "
           "1000; mean %.0f ns); %.1f us from sleep (mean of %d)\n",
           eng_pool_size(p), hot_med * 1e9, nb, hot * 1e9, cold / COLD * 1e6, COLD);
    eng_pool_free(p);
    return 0;
}

/* ---- gemm: the prefill matmul against the vpdpbusd peak --------------------- */

/* This thread's CPU time: the machine may be shared, and a compute-bound kernel
 * should not be charged for the time it spent descheduled. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* One vpdpbusd zmm into accumulator zmm<r>, from the constant operands zmm12 and
 * zmm13, as an asm string. */
#define KB_DP(r) "vpdpbusd %%zmm13, %%zmm12, %%zmm" #r "\n\t"

/* n rounds of 12 independent vpdpbusd zmm (more accumulators than latency x
 * throughput on current cores), register operands. Inline asm so the compiler
 * can neither fold nor reorder it. */
static void loop_vpdpbusd(long n)
{
    __asm__ volatile(
        "vpternlogd $0xff, %%zmm12, %%zmm12, %%zmm12\n\t"
        "vpxord %%zmm13, %%zmm13, %%zmm13\n\t"
        "1:\n\t"
        KB_DP(0) KB_DP(1) KB_DP(2) KB_DP(3)
        KB_DP(4) KB_DP(5) KB_DP(6) KB_DP(7)
        KB_DP(8) KB_DP(9) KB_DP(10) KB_DP(11)
        "dec %0\n\t"
        "jnz 1b\n\t"
        "vzeroupper\n\t"
        : "+r"(n)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "cc");
}

/* n rounds of two 32-column groups as an exact Q4_1 x int8 kernel computes them,
 * registers only: per group 8 vpdpbusd of a 16-row, one-token accumulator and the
 * float work they owe (vcvtdq2ps of the integer sum, vmulps d_w * d_x, vfmadd of
 * the scaled sum, vfmadd of min * sum_x), each group with its own float
 * accumulators so no FMA latency chain binds. 16 vpdpbusd a round. */
__attribute__((target("avx512f"))) /* zmm16-27 may be named (called only with VNNI) */
static void loop_vpdpbusd_q4_1(long n)
{
    __asm__ volatile(
        "vpternlogd $0xff, %%zmm12, %%zmm12, %%zmm12\n\t"
        "vpxord %%zmm13, %%zmm13, %%zmm13\n\t"
        "vxorps %%zmm18, %%zmm18, %%zmm18\n\t"
        "vxorps %%zmm19, %%zmm19, %%zmm19\n\t"
        "1:\n\t"
        KB_DP(0) KB_DP(1) KB_DP(2) KB_DP(3)
        KB_DP(4) KB_DP(5) KB_DP(6) KB_DP(7)
        "vcvtdq2ps %%zmm0, %%zmm14\n\t"
        "vmulps %%zmm18, %%zmm19, %%zmm15\n\t"
        "vfmadd231ps %%zmm15, %%zmm14, %%zmm16\n\t"
        "vfmadd231ps %%zmm18, %%zmm19, %%zmm17\n\t"
        KB_DP(8) KB_DP(9) KB_DP(10) KB_DP(11)
        KB_DP(24) KB_DP(25) KB_DP(26) KB_DP(27)
        "vcvtdq2ps %%zmm8, %%zmm22\n\t"
        "vmulps %%zmm18, %%zmm19, %%zmm23\n\t"
        "vfmadd231ps %%zmm23, %%zmm22, %%zmm20\n\t"
        "vfmadd231ps %%zmm18, %%zmm19, %%zmm21\n\t"
        "dec %0\n\t"
        "jnz 1b\n\t"
        "vzeroupper\n\t"
        : "+r"(n)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",
          "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "cc");
}

/* vpdpbusd per second of loop(rounds), `per_round` of them a round: best of 7,
 * thread CPU time; 0 without AVX-512 VNNI. */
static double vpdpbusd_rate(void (*loop)(long), long rounds, int per_round)
{
    if (!eng_isa_has_vnni())
        return 0;
    double best = 0;
    for (int round = 0; round < 7; round++) {
        double t0 = cpu_now();
        loop(rounds);
        double r = (double)rounds * per_round / (cpu_now() - t0);
        if (r > best)
            best = r;
    }
    return best;
}
#endif

/* The vpdpbusd zmm peak and the ceiling of exact Q4_1 arithmetic (the tile
 * kernels' loads and broadcasts aside), in vpdpbusd per second; 0 and 0 where
 * neither can be measured. */
static void vpdpbusd_rates(double *peak, double *q4_1)
{
    *peak = *q4_1 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    *peak = vpdpbusd_rate(loop_vpdpbusd, 10 * 1000 * 1000, 12);
    *q4_1 = vpdpbusd_rate(loop_vpdpbusd_q4_1, 5 * 1000 * 1000, 16);
#endif
}

static void bench_gemm_shape(int out, int in, int reps, double peak_gmacs)
{
    static const int ntoks[] = { 1, 16, 64, 512 };
    int ncol = (in + 255) / 256, cols = eng_q8x_cols(in), max_tok = 512;
    size_t mbytes = (size_t)(out / 32) * ncol * ENG_Q4_1_CHUNK_BYTES;
    int copies = (int)((256u << 20) / mbytes) + 1; /* > 256 MB: past any cache */
    if (getenv("KBENCH_HOT"))
        copies = 1; /* the kernel's compute ceiling, weights from L2 */
    uint8_t *w = malloc(mbytes * copies);
    float *x = malloc((size_t)max_tok * in * sizeof *x), *y = malloc((size_t)max_tok * out * sizeof *y);
    struct eng_q8x xq = { malloc((size_t)max_tok * cols), malloc((size_t)max_tok * cols / 32 * sizeof(float)),
                          malloc((size_t)max_tok * cols / 32 * sizeof(float)) };
    double *t = malloc((size_t)reps * sizeof *t);
    if (!w || !x || !y || !xq.q || !xq.d || !xq.sum || !t) {
        fprintf(stderr, "kbench: out of memory\n");
        exit(1);
    }
    uint64_t st = 88172645463325252ull;
    for (size_t i = 0; i < mbytes * copies; i += ENG_Q4_1_CHUNK_BYTES) {
        for (int k = 0; k < 256; k++) {
            memcpy(w + i + 2 * k, &(uint16_t){ 0x3C24 }, 2);
            memcpy(w + i + 512 + 2 * k, &(uint16_t){ 0xBDA4 }, 2);
        }
        for (int k = 1024; k < ENG_Q4_1_CHUNK_BYTES; k += 8) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            memcpy(w + i + k, &st, 8);
        }
    }
    for (int i = 0; i < max_tok * in; i++)
        x[i] = (float)(rand() % 2001 - 1000) / 1000.0f;

    for (size_t k = 0; k < sizeof ntoks / sizeof *ntoks; k++) {
        int n_tok = ntoks[k];
        double macs = (double)out * in * n_tok;
        eng_q8x_quantize_batch(&xq, x, in, in, n_tok); /* first touch of xq */
        double tq0 = cpu_now();
        eng_q8x_quantize_batch(&xq, x, in, in, n_tok);
        double tq = cpu_now() - tq0;
        memset(y, 0, (size_t)n_tok * out * sizeof *y);
        /* at least 3 calls, at most reps, about half a second when they are slow */
        int n = (int)(0.5 / (macs / 100e9)) + 1;
        n = n < 3 ? 3 : n > reps ? reps : n;
        for (int r = 0; r < n; r++) {
            const uint8_t *wc = w + mbytes * (size_t)(r % copies);
            double t0 = cpu_now();
            eng_matmul_q4_1_q8_rows(wc, in, 0, out, &xq, n_tok, y, out);
            t[r] = cpu_now() - t0;
        }
        double best = t[0];
        for (int r = 1; r < n; r++)
            best = t[r] < best ? t[r] : best;
        double med = median(t, n), g = macs / med / 1e9, gb = macs / best / 1e9;
        printf("gemm %5dx%-5d n_tok %3d: %9.1f us  %6.1f GMAC/s (best %6.1f)", out, in, n_tok, med * 1e6, g, gb);
        if (peak_gmacs > 0)
            printf("  %4.2f of peak (best %4.2f)", g / peak_gmacs, gb / peak_gmacs);
        printf("  | quantize %.1f us\n", tq * 1e6);
    }
    free(w), free(x), free(y), free(xq.q), free(xq.d), free(xq.sum), free(t);
}

static int bench_gemm(int reps)
{
    double peak, q;
    vpdpbusd_rates(&peak, &q);
    peak *= 64 / 1e9; /* MACs per vpdpbusd zmm */
    q *= 64 / 1e9;
    enum eng_isa isa = eng_kernels_isa();
    printf("gemm, one thread, ISA %s%s, thread CPU time, median of up to %d calls\n", eng_isa_name(isa),
           isa == ENG_ISA_AVX512 && eng_isa_has_vnni() ? " + VNNI"
           : isa == ENG_ISA_AVX512 || isa == ENG_ISA_SCALAR ? " (scalar int8 matmul)"
                                                             : " (vpmaddubsw int8 matmul)",
           reps);
    if (peak > 0) {
        printf("vpdpbusd zmm peak: %.1f GMAC/s (%.2f G instructions/s)\n", peak, peak / 64);
        printf("with Q4_1's float work per 8 (cvt, mul, 2 fma): %.1f GMAC/s = %.2f of peak,"
               " the tile kernels' arithmetic ceiling\n", q, q / peak);
    }
    bench_gemm_shape(2048, 2048, reps, peak); /* q_proj, o_proj */
    bench_gemm_shape(256, 2048, reps, peak);  /* k_proj, v_proj */
    bench_gemm_shape(6144, 2048, reps, peak); /* gate, up */
    bench_gemm_shape(2048, 6144, reps, peak); /* down */
    return 0;
}

/* ---- decode: the one-token kernels side by side ---------------------------- */

static void matmul1(const uint8_t *ch, int in, int r0, int r1, const struct eng_q8x *xq, float *y)
{
    eng__matmul_q4_1_q8_vnni(ch, in, r0, r1, xq, 1, y, 0);
}

static void avx2_tile1(const uint8_t *ch, int in, int r0, int r1, const struct eng_q8x *xq, float *y)
{
    eng__matmul_q4_1_q8_avx2(ch, in, r0, r1, xq, 1, y, 0);
}

enum { NEED_AVX2, NEED_VNNI, NEED_VBMI };

static int kernel_runs(int need)
{
    switch (need) {
    case NEED_VBMI: return eng_isa_has_vbmi();
    case NEED_VNNI: return eng_isa_has_vnni();
    default: return eng_isa_detect() != ENG_ISA_SCALAR; /* AVX-512 here implies AVX2 */
    }
}

static void bench_decode_shape(int out, int in, int reps)
{
    static const struct {
        const char *name;
        kern_q4_1_q8_fn fn;
        int need;
    } ks[] = {
        { "vbmi gemv", eng__matvec_q4_1_q8_vbmi, NEED_VBMI },
        { "matmul n=1", matmul1, NEED_VNNI },
        { "avx2 gemv", eng__matvec_q4_1_q8_avx2, NEED_AVX2 },
        { "avx2 tile n=1", avx2_tile1, NEED_AVX2 },
    };
    int ncol = (in + 255) / 256, cols = eng_q8x_cols(in);
    size_t mbytes = (size_t)(out / 32) * ncol * ENG_Q4_1_CHUNK_BYTES;
    int copies = (int)((512u << 20) / mbytes) + 1;
    uint8_t *w = malloc(mbytes * copies);
    float *x = malloc((size_t)in * sizeof *x), *y = malloc((size_t)out * sizeof *y);
    struct eng_q8x xq = { malloc((size_t)cols), malloc(cols / 32 * sizeof(float)),
                          malloc(cols / 32 * sizeof(float)) };
    double *t = malloc((size_t)reps * sizeof *t);
    if (!w || !x || !y || !xq.q || !xq.d || !xq.sum || !t) {
        fprintf(stderr, "kbench: out of memory\n");
        exit(1);
    }
    random_weights(w, mbytes * copies, x, in);
    eng_q8x_quantize(&xq, x, in);
    printf("%5dx%-5d", out, in);
    for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) {
        if (!kernel_runs(ks[k].need))
            continue;
        for (int hot = 0; hot < 2; hot++) {
            for (int r = 0; r < reps; r++) {
                const uint8_t *wc = w + mbytes * (size_t)(hot ? 0 : r % copies);
                double t0 = ut_now_s();
                ks[k].fn(wc, in, 0, out, &xq, y);
                t[r] = ut_now_s() - t0;
            }
            printf("  %s %s %6.2f", ks[k].name, hot ? "hot" : "dram", (double)mbytes / median(t, reps) / 1e9);
        }
    }
    printf("  GB/s\n");
    free(w), free(x), free(y), free(xq.q), free(xq.d), free(xq.sum), free(t);
}

static int bench_decode(int reps)
{
    if (!kernel_runs(NEED_AVX2)) {
        fprintf(stderr, "kbench decode: this CPU has no AVX2\n");
        return 1;
    }
    printf("decode kernels, one thread, median of %d; stream read (sum over 1 GiB): %.2f GB/s\n", reps,
           stream_read_gbs());
    bench_decode_shape(2048, 2048, reps);
    bench_decode_shape(256, 2048, reps);
    bench_decode_shape(6144, 2048, reps);
    bench_decode_shape(2048, 6144, reps);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "decode") == 0) {
        int reps = argc > 2 ? atoi(argv[2]) : 300;
        return bench_decode(reps < 3 ? 3 : reps);
    }
    if (argc > 1 && strcmp(argv[1], "pool") == 0) {
        int threads = argc > 2 ? atoi(argv[2]) : 2;
        long regions = argc > 3 ? atol(argv[3]) : 1000000;
        return bench_pool(threads, regions < 1 ? 1 : regions);
    }
    if (argc > 1 && strcmp(argv[1], "gemm") == 0) {
        int reps = argc > 2 ? atoi(argv[2]) : 15;
        const char *name = getenv("KBENCH_ISA");
        enum eng_isa isa;
        if (name && eng_isa_parse(name, &isa) != 0) {
            fprintf(stderr, "kbench: KBENCH_ISA wants scalar, avx2 or avx512, not '%s'\n", name);
            return 1;
        }
        if (name && eng_kernels_set_isa(isa) != 0) {
            fprintf(stderr, "kbench: this CPU lacks %s\n", name);
            return 1;
        }
        return bench_gemm(reps < 3 ? 3 : reps);
    }
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
