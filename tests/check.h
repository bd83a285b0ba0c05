/* Shared by the Criterion unit tests: MCD_TEST is Criterion's Test() plus a leak
 * check at the end of the test body.
 *
 * Why not LeakSanitizer's report at exit: Criterion 2.4 has already recorded the
 * test as passed by then and ignores it, and it only warns about a failure in a
 * .fini hook. So under ASan the body itself ends with
 * __lsan_do_recoverable_leak_check(), which fails the test on any unreachable
 * allocation (memory still referenced from a static, e.g. set up by .init and freed
 * by .fini, is reachable and does not count). */
#ifndef MINICPMD_TESTS_CHECK_H
#define MINICPMD_TESTS_CHECK_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define MCD_LEAK_CHECK()                                                                    \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,                                     \
                 "LeakSanitizer found leaked memory (report above)")
#else
#define MCD_LEAK_CHECK() ((void)0)
#endif

#define MCD_TEST(suite, name, ...)                                                          \
    static void mcd_body_##suite##_##name(void);                                            \
    Test(suite, name, ##__VA_ARGS__)                                                        \
    {                                                                                       \
        mcd_body_##suite##_##name();                                                        \
        MCD_LEAK_CHECK();                                                                   \
    }                                                                                       \
    static void mcd_body_##suite##_##name(void)

/* Write `text` to dir/name (a test's pack files); remove dir/name. */
static inline void mcd_put_file(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static inline void mcd_drop_file(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

#endif
