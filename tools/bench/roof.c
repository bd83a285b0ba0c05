/* Machine roofs (contract in roof.h): each is one pool region of a tight loop on
 * every thread, timed by the caller around the region. The ISA loops live in
 * roof-avx512.c and roof-avx2.c; the plain C ones are here. */
#include "tools/bench/roof.h"
#include "tools/bench/roof-impl.h"
#include "util/clock.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define ROOF_PAGE 4096
#define ROOF_HUGE (2u << 20)

/* Iterations between two looks at the clock in the timed loops: ~10-40 µs of
 * work for every ISA, so the clock costs nothing and the overshoot past the
 * deadline is negligible against any sensible `seconds`. */
#define ROOF_CHUNK 4096

/* Results of the loops go here, so the compiler (even with LTO) must run them.
 * Atomic because every pool thread adds to it (once per ~10 µs chunk: free). */
static _Atomic uint64_t roof_sink;

static void sink(uint64_t v)
{
    atomic_fetch_add_explicit(&roof_sink, v, memory_order_relaxed);
}

static _Atomic int roof_isa_cur = -1; /* -1: not chosen yet, eng_isa_detect() */

/* ---- which instructions --------------------------------------------------------- */

int roof_set_isa(enum eng_isa isa)
{
    /* Each ISA includes the ones below it: the CPU has isa iff it is at most the best. */
    if ((int)isa < ENG_ISA_SCALAR || isa > eng_isa_detect())
        return -ENOTSUP;
    atomic_store(&roof_isa_cur, (int)isa);
    return 0;
}

static enum eng_isa isa_in_use(void)
{
    int isa = atomic_load(&roof_isa_cur);
    return isa < 0 ? eng_isa_detect() : (enum eng_isa)isa;
}

const char *roof_isa_name(void)
{
    switch (isa_in_use()) {
    case ENG_ISA_AVX512:
        return eng_isa_has_vnni() ? "avx512 (int8: avx512-vnni vpdpbusd)"
                                  : "avx512 (int8: avx2 vpmaddubsw+vpmaddwd)";
    case ENG_ISA_AVX2:
        return "avx2 (int8: vpmaddubsw+vpmaddwd)";
    case ENG_ISA_SCALAR:
        break;
    }
    return "scalar C";
}

/* ---- the plain C loops ------------------------------------------------------------ */

static uint64_t sum_scalar(const void *p, size_t bytes)
{
    const uint64_t *w = p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < bytes / 8; i += 4) {
        a += w[i];
        b += w[i + 1];
        c += w[i + 2];
        d += w[i + 3];
    }
    return a + b + c + d;
}

/* Each chain feeds its own next operand, as in the AVX2 loop: with invariant
 * operands gcc would replace the loop by its closed form. 8 MACs a round; the
 * sums wrap, so they are unsigned. */
#define ROOF_INT8_MACS_PER_ITER_SCALAR 8
static int32_t int8_scalar(long iters, int32_t seed)
{
    uint32_t acc[8], s = 0;
    int8_t w = (int8_t)(seed * 7 + 3);
    for (int k = 0; k < 8; k++)
        acc[k] = (uint32_t)(seed + k);
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 8; k++)
            acc[k] += (uint32_t)((uint8_t)acc[k] * w);
    for (int k = 0; k < 8; k++)
        s += acc[k];
    return (int32_t)(s & 0x7FFFFFFF);
}

/* A multiply and an add (2 FLOPs) per chain and round; converging as in
 * roof-avx512.c. */
#define ROOF_F32_FLOPS_PER_ITER_SCALAR (8 * 2)
static float f32_scalar(long iters, float seed)
{
    float acc[8];
    for (int k = 0; k < 8; k++)
        acc[k] = (float)k;
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 8; k++)
            acc[k] = acc[k] * 0.999f + seed;
    float s = 0;
    for (int k = 0; k < 8; k++)
        s += acc[k];
    return s;
}

/* ---- read bandwidth -------------------------------------------------------------- */

struct read_ctx {
    uint8_t *buf;
    int pages;
    int write;          /* 1: fill the share (first touch), 0: sum it */
    enum eng_isa isa;
};

static void read_fn(void *arg, int ith, int nth)
{
    struct read_ctx *c = arg;
    int b, e;
    eng_pool_share(c->pages, 1, ith, nth, &b, &e);
    uint8_t *p = c->buf + (size_t)b * ROOF_PAGE;
    size_t n = (size_t)(e - b) * ROOF_PAGE;
    if (c->write) {
        /* Non-zero, so no page stays the shared zero page (reading it would
         * come from one cached page, not DRAM). Each thread writes its own
         * share: on a NUMA machine the pages land where they will be read. */
        memset(p, 0x5A, n);
        return;
    }
    uint64_t s;
    switch (c->isa) {
    case ENG_ISA_AVX512:
        s = roof__sum_avx512(p, n);
        break;
    case ENG_ISA_AVX2:
        s = roof__sum_avx2(p, n);
        break;
    default:
        s = sum_scalar(p, n);
        break;
    }
    sink(s);
}

static void empty_fn(void *arg, int ith, int nth)
{
    (void)arg, (void)ith, (void)nth;
}

double roof_read_bandwidth(eng_pool *pool, size_t bytes, int reps)
{
    int nth = eng_pool_size(pool);
    size_t pages = bytes / ROOF_PAGE;
    if (pages < (size_t)nth || pages > INT32_MAX)
        return 0;
    if (reps < 1)
        reps = 1;

    /* 2 MiB aligned and advised for transparent huge pages: a roof should not
     * include TLB misses that a cleverer mapping avoids. (aligned_alloc wants a
     * size that is a multiple of the alignment.) */
    size_t alloc = (pages * ROOF_PAGE + ROOF_HUGE - 1) / ROOF_HUGE * ROOF_HUGE;
    uint8_t *buf = aligned_alloc(ROOF_HUGE, alloc);
    if (!buf)
        return 0;
    madvise(buf, alloc, MADV_HUGEPAGE); /* advice only: failure changes nothing */

    struct read_ctx c = { buf, (int)pages, 1, isa_in_use() };
    eng_pool_run(pool, read_fn, &c);
    c.write = 0;
    eng_pool_run(pool, read_fn, &c); /* untimed pass: TLB, prefetchers, clocks */

    double best = 0;
    for (int r = 0; r < reps; r++) {
        /* An empty region first: workers that fell asleep during the caller's
         * bookkeeping are awake and spinning when the timed region opens. */
        eng_pool_run(pool, empty_fn, NULL);
        double t0 = ut_now_s();
        eng_pool_run(pool, read_fn, &c);
        double gbs = (double)pages * ROOF_PAGE / (ut_now_s() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
    }
    free(buf);
    return best;
}

/* ---- compute peaks --------------------------------------------------------------- */

enum timed_what { TIMED_INT8, TIMED_F32 };

struct timed_slot {
    _Alignas(64) double ops; /* one cache line per thread */
};

struct timed_ctx {
    enum timed_what what;
    enum eng_isa isa;
    int vnni;
    double deadline;         /* CLOCK_MONOTONIC seconds */
    struct timed_slot *slot; /* [nth] */
};

/* One chunk of the chosen loop; returns the operations it did. */
static double timed_chunk(const struct timed_ctx *c, int32_t seed)
{
    if (c->what == TIMED_INT8) {
        if (c->isa == ENG_ISA_AVX512 && c->vnni) {
            sink((uint64_t)roof__int8_vnni(ROOF_CHUNK, seed));
            return (double)ROOF_CHUNK * ROOF_INT8_MACS_PER_ITER_VNNI;
        }
        if (c->isa >= ENG_ISA_AVX2) {
            sink((uint64_t)roof__int8_avx2(ROOF_CHUNK, seed));
            return (double)ROOF_CHUNK * ROOF_INT8_MACS_PER_ITER_AVX2;
        }
        sink((uint64_t)int8_scalar(ROOF_CHUNK, seed));
        return (double)ROOF_CHUNK * ROOF_INT8_MACS_PER_ITER_SCALAR;
    }
    float f;
    double ops;
    if (c->isa == ENG_ISA_AVX512) {
        f = roof__f32_avx512(ROOF_CHUNK, (float)seed * 1e-3f);
        ops = (double)ROOF_CHUNK * ROOF_F32_FLOPS_PER_ITER_AVX512;
    } else if (c->isa == ENG_ISA_AVX2) {
        f = roof__f32_avx2(ROOF_CHUNK, (float)seed * 1e-3f);
        ops = (double)ROOF_CHUNK * ROOF_F32_FLOPS_PER_ITER_AVX2;
    } else {
        f = f32_scalar(ROOF_CHUNK, (float)seed * 1e-3f);
        ops = (double)ROOF_CHUNK * ROOF_F32_FLOPS_PER_ITER_SCALAR;
    }
    sink((uint64_t)f);
    return ops;
}

static void timed_fn(void *arg, int ith, int nth)
{
    struct timed_ctx *c = arg;
    double ops = 0;
    do
        ops += timed_chunk(c, ith + 1);
    while (ut_now_s() < c->deadline);
    c->slot[ith].ops = ops;
}

/* Every thread loops until a common deadline; the rate is all their operations
 * over the caller's wall time of the region (so a late or slow thread lowers it,
 * as it would lower a real kernel's). */
static double timed_peak(eng_pool *pool, enum timed_what what, double seconds)
{
    int nth = eng_pool_size(pool);
    struct timed_slot *slot = aligned_alloc(64, (size_t)nth * sizeof *slot);
    if (!slot)
        return 0;
    if (!(seconds > 0))
        seconds = 1e-3;
    struct timed_ctx c = { what, isa_in_use(), eng_isa_has_vnni(), 0, slot };

    /* Warm-up: wakes the workers and, on CPUs that have one, lets the clock
     * settle at its wide-vector licence before the timed region. */
    c.deadline = ut_now_s() + (seconds / 10 < 0.02 ? seconds / 10 : 0.02);
    eng_pool_run(pool, timed_fn, &c);

    double t0 = ut_now_s();
    c.deadline = t0 + seconds;
    eng_pool_run(pool, timed_fn, &c);
    double dt = ut_now_s() - t0, ops = 0;
    for (int i = 0; i < nth; i++)
        ops += slot[i].ops;
    free(slot);
    return ops / dt;
}

double roof_int8_macs(eng_pool *pool, double seconds)
{
    return timed_peak(pool, TIMED_INT8, seconds);
}

double roof_f32_flops(eng_pool *pool, double seconds)
{
    return timed_peak(pool, TIMED_F32, seconds);
}
