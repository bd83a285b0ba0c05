/* eng_pool: a fork-join pool for the CPU forward pass (contract in pool.h).
 *
 * The whole protocol is three atomics:
 *
 *   gen       bumped by the caller to open a region (fn and ctx are published by
 *             that release); workers wait for it to change. It is also the futex
 *             word sleeping workers wait on.
 *   done      workers that finished the current region; the caller resets it
 *             before opening a region and spins until it reaches n - 1.
 *   sleepers  workers in (or about to enter) futex_wait; the caller issues the
 *             wake syscall only when this is non-zero, so a hot decode loop
 *             costs no system calls at all.
 *
 * Lost wake-ups: a worker increments sleepers, then futex-waits on gen only if
 * gen still holds the value it saw; the caller bumps gen, then reads sleepers.
 * Both are seq_cst, so either the caller sees the sleeper (and wakes it) or the
 * worker sees the new gen (the kernel's compare in FUTEX_WAIT fails, or the
 * worker never calls it).
 *
 * The caller never opens region k+1 before every worker has finished region k,
 * so a worker sees every generation exactly once. */
#include "engine/kernels/pool.h"
#include "util/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker spins before it sleeps. Long enough to bridge the
 * serial work between two regions and between two decode steps (sampling,
 * detokenizing: tens of µs), where a sleep would put the futex wake-up latency
 * on the critical path; short enough that an idle daemon stops burning a core
 * almost at once. */
#ifndef ENG_POOL_SPIN_US
#define ENG_POOL_SPIN_US 200
#endif

/* Pauses between two reads of the clock while spinning (~1-5 µs of pauses). */
#define POOL_SPIN_CHECK 64

#define POOL_CACHELINE 64

#if defined(__x86_64__) || defined(__i386__)
#define pool_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define pool_relax() __asm__ volatile("yield" ::: "memory")
#else
#define pool_relax() ((void)0)
#endif

struct pool_worker {
    eng_pool *pool;
    pthread_t thread;
    int ith;
};

struct eng_pool {
    /* Written by the caller once per region, read by every worker. */
    _Alignas(POOL_CACHELINE) _Atomic uint32_t gen;
    _Atomic int sleepers;
    _Atomic int stop;
    eng_pool_fn fn; /* published by the release of gen */
    void *ctx;

    /* Written by every worker once per region: its own line, so the increments
     * do not keep invalidating the line the workers poll. */
    _Alignas(POOL_CACHELINE) _Atomic int done;

    _Alignas(POOL_CACHELINE) int n;  /* threads, the caller included */
    int oversubscribed;              /* more threads than CPUs: yield, don't spin */
    int started;                     /* workers running (for cleanup) */
    struct pool_worker *workers;     /* n - 1 of them, ith 1 .. n-1 */
};

/* One turn of a wait loop. With more threads than CPUs the thread we wait for
 * may be the one we keep off the CPU, so give the CPU away instead of spinning. */
static void relax(const eng_pool *p)
{
    if (p->oversubscribed)
        sched_yield();
    else
        pool_relax();
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    /* EAGAIN (word changed), EINTR and spurious returns all mean "look again";
     * the caller's loop does. Private: the pool never crosses processes. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until gen moves past `seen` and returns the new value: spins for
 * ENG_POOL_SPIN_US, then sleeps on the futex. */
static uint32_t wait_gen(eng_pool *p, uint32_t seen)
{
    uint64_t deadline = 0;
    for (unsigned i = 1;; i++) {
        uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen)
            return g;
        relax(p);
        if (i % POOL_SPIN_CHECK)
            continue;
        /* The clock is read only after the first batch of pauses: a region that
         * follows right away (the decode case) never pays for it. */
        uint64_t t = (uint64_t)ut_now_us();
        if (!deadline) {
            deadline = t + ENG_POOL_SPIN_US;
            continue;
        }
        if (t < deadline)
            continue;
        atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == seen)
            futex_wait(&p->gen, seen);
        atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
        deadline = 0; /* woken (maybe spuriously): spin again before sleeping */
    }
}

static void *pool_thread_main(void *arg)
{
    struct pool_worker *w = arg;
    eng_pool *p = w->pool;
    /* Not a load of gen: this thread may first run after the caller has
     * already opened a region. Nothing bumps gen before eng_pool_new returns
     * (or stops us), so 0 is the value to wait past. */
    uint32_t seen = 0;

    for (;;) {
        seen = wait_gen(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
            break;
        p->fn(p->ctx, w->ith, p->n);
        /* Release: the caller sees everything fn wrote once it sees done. */
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
    return NULL;
}

/* Opens a generation and wakes sleepers; used by run and by free (to stop). */
static void open_region(eng_pool *p)
{
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst) > 0)
        futex_wake_all(&p->gen);
}

static void stop_workers(eng_pool *p)
{
    atomic_store_explicit(&p->stop, 1, memory_order_relaxed);
    open_region(p);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->workers[i].thread, NULL);
    p->started = 0;
}

int eng_pool_new(int n_threads, eng_pool **out)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    eng_pool *p = NULL;
    int rc = 0;

    *out = NULL;
    if (ncpu < 1)
        ncpu = 1;
    if (n_threads <= 0)
        n_threads = ncpu > INT_MAX ? INT_MAX : (int)ncpu;

    /* aligned_alloc: the struct's cache-line alignment is real only on storage
     * that has it (plain malloc gives 16 bytes). */
    p = aligned_alloc(POOL_CACHELINE, (sizeof *p + POOL_CACHELINE - 1) / POOL_CACHELINE * POOL_CACHELINE);
    if (!p)
        return -ENOMEM;
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->done, 0);
    p->fn = NULL;
    p->ctx = NULL;
    p->n = n_threads;
    p->oversubscribed = n_threads > ncpu;
    p->started = 0;
    p->workers = NULL;

    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            rc = -ENOMEM;
            goto err;
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        struct pool_worker *w = &p->workers[i];
        w->pool = p;
        w->ith = i + 1;
        int e = pthread_create(&w->thread, NULL, pool_thread_main, w);
        if (e) {
            rc = -e;
            goto err;
        }
        p->started++;
    }
    *out = p;
    return 0;

err:
    stop_workers(p);
    free(p->workers);
    free(p);
    return rc;
}

void eng_pool_free(eng_pool *p)
{
    if (!p)
        return;
    stop_workers(p);
    free(p->workers);
    free(p);
}

int eng_pool_size(const eng_pool *p)
{
    return p->n;
}

void eng_pool_run(eng_pool *p, eng_pool_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    /* Every worker finished the previous region before the last run returned,
     * so nobody touches done, fn or ctx now; the seq_cst bump of gen publishes
     * all three. */
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    p->fn = fn;
    p->ctx = ctx;
    open_region(p);

    fn(ctx, 0, p->n);

    /* Spin for the stragglers. If they take long (other processes on our CPUs,
     * a page fault storm), yield so as not to hold a CPU one of them needs. */
    int want = p->n - 1;
    uint64_t deadline = 0;
    for (unsigned i = 1; atomic_load_explicit(&p->done, memory_order_acquire) != want; i++) {
        if (deadline == UINT64_MAX) {
            sched_yield();
            continue;
        }
        relax(p);
        if (i % POOL_SPIN_CHECK == 0) {
            uint64_t t = (uint64_t)ut_now_us();
            if (!deadline)
                deadline = t + ENG_POOL_SPIN_US;
            else if (t >= deadline)
                deadline = UINT64_MAX;
        }
    }
}

void eng_pool_share(int n, int align, int ith, int nth, int *begin, int *end)
{
    if (align < 1)
        align = 1;
    if (nth < 1)
        nth = 1;
    if (n <= 0 || ith < 0 || ith >= nth) {
        *begin = *end = n > 0 ? n : 0;
        return;
    }
    /* Whole blocks are dealt as evenly as integer division allows (shares
     * differ by at most one block); the partial block at the end goes to the
     * last thread. */
    long long blocks = n / align;
    *begin = (int)(blocks * ith / nth * align);
    *end = ith == nth - 1 ? n : (int)(blocks * (ith + 1) / nth * align);
}
