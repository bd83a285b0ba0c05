/* clock — the monotonic clock (CLOCK_MONOTONIC: never jumps with the wall clock),
 * in the unit each caller measures in. Inline: the compute pool reads it in its
 * wait loop. Thread-safe. */
#ifndef MINICPMD_UTIL_CLOCK_H
#define MINICPMD_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t ut_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* microseconds */
static inline int64_t ut_now_us(void) { return (int64_t)(ut_now_ns() / 1000u); }

/* seconds, as a double: for rates and durations */
static inline double ut_now_s(void) { return (double)ut_now_ns() * 1e-9; }

#endif
