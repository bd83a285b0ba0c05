/* Machine roofs (tools/bench/roof.c): every ISA path the CPU has returns a
 * positive, finite rate within physical bounds, on tiny sizes (the whole file
 * runs in well under a second). What this catches: a loop the compiler dropped
 * (absurdly high rates), a wrong share or a misaligned load (crash), a timing or
 * counting slip of orders of magnitude, dispatch to a path the CPU lacks. */
#include "tools/bench/roof.h"
#include "tests/check.h"

#include <errno.h>
#include <math.h>

/* Far outside what any machine with a handful of threads can reach (a 2-thread
 * AVX-512 VNNI core pair does ~1e12 MAC/s, DRAM ~1e11 B/s), and far above what a
 * loaded CI machine drops to. */
#define RATE_MIN 1e6
#define RATE_MAX 1e15

static void check_rate(double v, const char *what, enum eng_isa isa, int n)
{
    cr_assert(isfinite(v) && v >= RATE_MIN && v <= RATE_MAX, "%s, isa %d, %d threads: %g", what,
              (int)isa, n, v);
}

MCD_TEST(roof, every_isa_sane)
{
    for (int isa = ENG_ISA_SCALAR; isa <= (int)eng_isa_detect(); isa++) {
        cr_assert_eq(roof_set_isa((enum eng_isa)isa), 0);
        cr_assert_not_null(roof_isa_name());
        for (int n = 1; n <= 2; n++) {
            eng_pool *p = NULL;
            cr_assert_eq(eng_pool_new(n, &p), 0);
            /* 4 MiB, cache-resident or not: only the sanity of the number. */
            check_rate(roof_read_bandwidth(p, 4u << 20, 2) * 1e9, "read B/s", (enum eng_isa)isa, n);
            check_rate(roof_int8_macs(p, 0.01), "int8 MAC/s", (enum eng_isa)isa, n);
            check_rate(roof_f32_flops(p, 0.01), "f32 FLOP/s", (enum eng_isa)isa, n);
            eng_pool_free(p);
        }
    }
}

MCD_TEST(roof, bad_input)
{
    eng_pool *p = NULL;
    cr_assert_eq(eng_pool_new(2, &p), 0);
    /* Less than a page per thread: refused, not divided by zero. */
    cr_assert_eq(roof_read_bandwidth(p, 4096, 1), 0);
    cr_assert_eq(roof_read_bandwidth(p, 0, 1), 0);
    cr_assert_eq(roof_set_isa((enum eng_isa)42), -ENOTSUP);
    eng_pool_free(p);
}
