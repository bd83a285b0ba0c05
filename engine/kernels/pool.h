/* eng_pool — the small compute pool the CPU forward pass runs on.
 *
 * One parallel region is one call of eng_pool_run(): `fn` runs once on every
 * thread of the pool (the calling thread is ith 0 and takes part), and the call
 * returns when all have returned. The callee splits its own work by (ith, nth).
 * A decode step of MiniCPM5-2B opens ~250 regions, so a region must cost a few
 * microseconds, not a futex round trip: idle workers spin for a short while
 * (ENG_POOL_SPIN_US) before they sleep, and the caller wakes sleepers only when
 * there are any.
 *
 * One caller at a time (the engine's owner thread); fn must not call
 * eng_pool_run() itself. */
#ifndef MINICPMD_ENGINE_POOL_H
#define MINICPMD_ENGINE_POOL_H

typedef struct eng_pool eng_pool;

typedef void (*eng_pool_fn)(void *ctx, int ith, int nth);

/* A pool of n_threads threads in all, the caller included (so n_threads - 1 are
 * started); n_threads <= 0 means the number of online CPUs. Returns 0, or a
 * negative errno (nothing started is left running). */
int eng_pool_new(int n_threads, eng_pool **out);

/* Stops and joins the workers. NULL is fine. */
void eng_pool_free(eng_pool *p);

/* Threads in the pool, the caller included. */
int eng_pool_size(const eng_pool *p);

/* fn(ctx, ith, nth) on every thread; returns when every call has returned. */
void eng_pool_run(eng_pool *p, eng_pool_fn fn, void *ctx);

/* [*begin, *end) of `n` items for thread ith of nth, in whole multiples of
 * `align` (the last share takes the remainder): the usual static split. */
void eng_pool_share(int n, int align, int ith, int nth, int *begin, int *end);

#endif
