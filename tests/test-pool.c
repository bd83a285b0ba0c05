/* Compute pool tests: every thread runs every region exactly once, what the
 * threads wrote is visible to the caller when run returns, long runs of back to
 * back regions neither lose nor repeat a region (the wake-up protocol), and the
 * static split covers [0, n) exactly. Sizes beyond the CPU count are tested too:
 * the pool then yields instead of spinning, and must still be correct. */
#include "engine/kernels/pool.h"
#include "tests/check.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 4

/* ---- exactly once per region ------------------------------------------------- */

struct count_ctx {
    _Atomic int calls[MAX_THREADS];
    _Atomic int bad_nth;
    int nth;
};

static void count_fn(void *arg, int ith, int nth)
{
    struct count_ctx *c = arg;
    if (nth != c->nth || ith < 0 || ith >= nth)
        atomic_fetch_add(&c->bad_nth, 1);
    else
        atomic_fetch_add(&c->calls[ith], 1);
}

MCD_TEST(pool, each_thread_once)
{
    for (int n = 1; n <= MAX_THREADS; n++) {
        eng_pool *p = NULL;
        cr_assert_eq(eng_pool_new(n, &p), 0);
        cr_assert_eq(eng_pool_size(p), n);
        struct count_ctx c = { .nth = n };
        for (int r = 1; r <= 1000; r++) {
            eng_pool_run(p, count_fn, &c);
            /* Checked after every region: a thread that ran twice in one region
             * and skipped the next would pass a check at the end only. */
            for (int i = 0; i < n; i++)
                cr_assert_eq(atomic_load(&c.calls[i]), r, "n=%d region %d: thread %d ran %d times",
                             n, r, i, atomic_load(&c.calls[i]));
        }
        cr_assert_eq(atomic_load(&c.bad_nth), 0);
        eng_pool_free(p);
    }
}

MCD_TEST(pool, default_size_is_online_cpus)
{
    eng_pool *p = NULL;
    cr_assert_eq(eng_pool_new(0, &p), 0);
    cr_assert_geq(eng_pool_size(p), 1);
    struct count_ctx c = { .nth = eng_pool_size(p) };
    cr_assert_leq(c.nth, MAX_THREADS * 64);
    eng_pool_free(p);
}

/* ---- memory ordering ------------------------------------------------------------ */

/* Plain (non-atomic) stores by every thread, then plain loads by the caller
 * after run returns: the pool's release/acquire pair is all that orders them.
 * Each region also reads what every thread wrote in the region before (double
 * buffered, so no two threads touch a word in the same region): the ordering
 * from one region's workers through the caller to the next region's workers. */
struct order_ctx {
    uint64_t slot[2][MAX_THREADS][8]; /* [round % 2][ith]: one cache line each */
    uint64_t round;
    int bad[MAX_THREADS];
};

static void order_fn(void *arg, int ith, int nth)
{
    struct order_ctx *c = arg;
    uint64_t r = c->round;
    for (int j = 0; j < nth; j++)
        if (c->slot[(r - 1) % 2][j][0] != r - 1)
            c->bad[ith] = 1;
    for (int k = 0; k < 8; k++)
        c->slot[r % 2][ith][k] = r;
}

MCD_TEST(pool, results_visible)
{
    for (int n = 1; n <= MAX_THREADS; n++) {
        eng_pool *p = NULL;
        cr_assert_eq(eng_pool_new(n, &p), 0);
        struct order_ctx *c = calloc(1, sizeof *c);
        cr_assert(c);
        int rounds = n <= sysconf(_SC_NPROCESSORS_ONLN) ? 10000 : 1000;
        for (uint64_t r = 1; r <= (uint64_t)rounds; r++) {
            c->round = r; /* caller's plain store, published by run */
            eng_pool_run(p, order_fn, c);
            for (int i = 0; i < n; i++)
                for (int k = 0; k < 8; k++)
                    cr_assert_eq(c->slot[r % 2][i][k], r, "n=%d round %llu: slot %d word %d holds %llu",
                                 n, (unsigned long long)r, i, k,
                                 (unsigned long long)c->slot[r % 2][i][k]);
        }
        for (int i = 0; i < n; i++)
            cr_assert_eq(c->bad[i], 0, "n=%d: thread %d saw a stale value from the region before", n, i);
        free(c);
        eng_pool_free(p);
    }
}

/* ---- many regions ------------------------------------------------------------- */

struct sum_ctx {
    int64_t part[MAX_THREADS][8];
};

static void sum_fn(void *arg, int ith, int nth)
{
    struct sum_ctx *c = arg;
    c->part[ith][0] += ith + 1;
}

MCD_TEST(pool, many_regions, .timeout = 100)
{
    /* 100k back to back: the spin/sleep hand-over must never lose a wake-up (a
     * lost one hangs the test) nor let a worker run a region twice. With more
     * threads than CPUs every region is a round of context switches (tens of
     * µs, far more on a busy machine), so those sizes run 10k. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (int n = 1; n <= MAX_THREADS; n++) {
        eng_pool *p = NULL;
        cr_assert_eq(eng_pool_new(n, &p), 0);
        struct sum_ctx *c = calloc(1, sizeof *c);
        cr_assert(c);
        const int regions = n <= ncpu ? 100000 : 10000;
        for (int r = 0; r < regions; r++)
            eng_pool_run(p, sum_fn, c);
        for (int i = 0; i < n; i++)
            cr_assert_eq(c->part[i][0], (int64_t)regions * (i + 1), "n=%d thread %d", n, i);
        free(c);
        eng_pool_free(p);
    }
}

MCD_TEST(pool, wake_after_sleep)
{
    /* Pauses longer than the spin budget, so every region starts with the
     * workers asleep on the futex. */
    eng_pool *p = NULL;
    cr_assert_eq(eng_pool_new(2, &p), 0);
    struct count_ctx c = { .nth = 2 };
    for (int r = 1; r <= 20; r++) {
        nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
        eng_pool_run(p, count_fn, &c);
        cr_assert_eq(atomic_load(&c.calls[0]), r);
        cr_assert_eq(atomic_load(&c.calls[1]), r);
    }
    eng_pool_free(p);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

MCD_TEST(pool, wake_race, .timeout = 60)
{
    /* Gaps around the workers' spin budget (pool.c: 200 µs), so regions open
     * while workers are deciding to sleep: the window where a wake-up could be
     * lost (which would hang here). */
    for (int n = 2; n <= 3; n++) {
        eng_pool *p = NULL;
        cr_assert_eq(eng_pool_new(n, &p), 0);
        struct count_ctx c = { .nth = n };
        for (int r = 1; r <= 1500; r++) {
            double until = now_s() + (150 + (r * 37) % 100) * 1e-6;
            while (now_s() < until)
                ;
            eng_pool_run(p, count_fn, &c);
            for (int i = 0; i < n; i++)
                cr_assert_eq(atomic_load(&c.calls[i]), r, "n=%d region %d thread %d", n, r, i);
        }
        eng_pool_free(p);
    }
}

/* ---- lifecycle ---------------------------------------------------------------- */

MCD_TEST(pool, free_without_run)
{
    for (int n = -1; n <= MAX_THREADS; n++) {
        eng_pool *p = NULL;
        cr_assert_eq(eng_pool_new(n, &p), 0);
        cr_assert_not_null(p);
        eng_pool_free(p);
    }
    eng_pool_free(NULL);
}

MCD_TEST(pool, new_free_loop)
{
    /* Thread stacks and the pool itself: ASan's leak check at the end of the
     * test catches any that free leaves behind. */
    for (int i = 0; i < 200; i++) {
        eng_pool *p = NULL;
        cr_assert_eq(eng_pool_new(1 + i % MAX_THREADS, &p), 0);
        if (i % 2) {
            struct count_ctx c = { .nth = eng_pool_size(p) };
            eng_pool_run(p, count_fn, &c);
            cr_assert_eq(atomic_load(&c.calls[0]), 1);
        }
        eng_pool_free(p);
    }
}

/* ---- eng_pool_share ----------------------------------------------------------- */

MCD_TEST(pool, share_covers_exactly)
{
    static const int aligns[] = { 1, 2, 3, 8, 16, 32, 64, 256 };
    for (int n = 0; n <= 600; n += (n < 70 ? 1 : 37)) {
        for (size_t a = 0; a < sizeof aligns / sizeof *aligns; a++) {
            int align = aligns[a];
            for (int nth = 1; nth <= 9; nth++) {
                int expect = 0, min_blocks = n, max_blocks = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int b = -1, e = -1;
                    eng_pool_share(n, align, ith, nth, &b, &e);
                    cr_assert_eq(b, expect, "n=%d align=%d ith=%d/%d: begin %d, want %d", n, align,
                                 ith, nth, b, expect);
                    cr_assert_geq(e, b);
                    cr_assert_eq(b % align, 0, "n=%d align=%d ith=%d/%d: begin %d unaligned", n,
                                 align, ith, nth, b);
                    if (ith < nth - 1) {
                        cr_assert_eq(e % align, 0, "n=%d align=%d ith=%d/%d: end %d unaligned", n,
                                     align, ith, nth, e);
                        int blocks = (e - b) / align;
                        min_blocks = blocks < min_blocks ? blocks : min_blocks;
                        max_blocks = blocks > max_blocks ? blocks : max_blocks;
                    }
                    expect = e;
                }
                cr_assert_eq(expect, n, "n=%d align=%d nth=%d: shares end at %d", n, align, nth,
                             expect);
                /* Balanced: whole-block shares of the first nth-1 threads differ
                 * by at most one block. */
                if (nth > 2)
                    cr_assert_leq(max_blocks - min_blocks, 1, "n=%d align=%d nth=%d", n, align, nth);
            }
        }
    }
}

struct fill_ctx {
    int n, align;
    _Atomic int *hits;
};

static void fill_fn(void *arg, int ith, int nth)
{
    struct fill_ctx *c = arg;
    int b, e;
    eng_pool_share(c->n, c->align, ith, nth, &b, &e);
    for (int i = b; i < e; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

MCD_TEST(pool, share_in_region)
{
    /* The usual use: each thread handles its share; every item exactly once. */
    enum { N = 1000 };
    for (int n = 1; n <= MAX_THREADS; n++) {
        _Atomic int *hits = calloc(N, sizeof *hits);
        cr_assert(hits);
        struct fill_ctx c = { N, 32, hits };
        eng_pool *p = NULL;
        cr_assert_eq(eng_pool_new(n, &p), 0);
        eng_pool_run(p, fill_fn, &c);
        for (int i = 0; i < N; i++)
            cr_assert_eq(atomic_load(&hits[i]), 1, "n=%d item %d", n, i);
        eng_pool_free(p);
        free(hits);
    }
}
