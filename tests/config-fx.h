/* Shared by the config/ tests (test-config-*.c): a fresh temporary directory per
 * test (setup/teardown, the .init/.fini of the `config` and `discover` suites),
 * files written into it, and cfg_load with the test's own argv and envp (ARGV, ENV,
 * OK, FAILS), the warnings collected. */
#ifndef MINICPMD_TESTS_CONFIG_FX_H
#define MINICPMD_TESTS_CONFIG_FX_H

#include "config/config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ETC_CONFIG "/etc/minicpmd/config.json"

static struct cfg cfg;
static struct cfg_model_location loc;
static char err[1024];
static char warnings[4096];
static int n_warnings;
static char tmp[PATH_MAX];
static char *pool[64];
static int n_pool;

/* ---- fixture -------------------------------------------------------------- */

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    chmod(path, 0700);
    return remove(path);
}

static inline void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/test-config.XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
}

static inline void teardown(void)
{
    cfg_free(&cfg);
    cfg_model_location_free(&loc);
    for (int i = 0; i < n_pool; i++)
        free(pool[i]);
    n_pool = 0;
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Criterion does not run .fini for a skipped test, so clean up first. */
#define SKIP(...) do { teardown(); cr_skip_test(__VA_ARGS__); } while (0)

/* ---- helpers -------------------------------------------------------------- */

/* A formatted string that lives until the end of the test. */
__attribute__((format(printf, 1, 2)))
static inline char *S(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    cr_assert_geq(vasprintf(&s, fmt, ap), 0);
    va_end(ap);
    cr_assert_lt(n_pool, 64);
    return pool[n_pool++] = s;
}

/* Write `content` to a new file (mkstemp) under the test directory. */
static inline char *tmp_file(const char *content)
{
    char *path = S("%s/cfg.XXXXXX", tmp);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t n = strlen(content);
    cr_assert_eq(write(fd, content, n), (ssize_t)n);
    close(fd);
    return path;
}

/* Write `content` to tmp/rel, creating parent directories. */
static inline char *put(const char *rel, const char *content)
{
    char *path = S("%s/%s", tmp, rel);
    for (char *p = path + strlen(tmp) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(content, f);
    fclose(f);
    return path;
}

static inline char *mkdirs(const char *rel)
{
    char *path = put(S("%s/.keep", rel), "");
    *strrchr(path, '/') = '\0';
    return path;
}

static inline void collect(void *ud, const char *msg)
{
    (void)ud;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", msg);
    n_warnings++;
}

static inline bool names_config(char *const argv[], char *const envp[])
{
    for (int i = 0; argv[i]; i++)
        if (strncmp(argv[i], "--config", 8) == 0)
            return true;
    for (int i = 0; envp[i]; i++)
        if (strncmp(envp[i], "MINICPMD_CONFIG=", 16) == 0)
            return true;
    return false;
}

static inline enum cfg_result load(char *const argv[], char *const envp[])
{
    int argc = 0;
    while (argv[argc])
        argc++;
    if (!names_config(argv, envp) && access(ETC_CONFIG, F_OK) == 0)
        SKIP(ETC_CONFIG " exists on this machine");
    return cfg_load(&cfg, argc, argv, envp, collect, NULL, err, sizeof err);
}

#define ARGV(...) ((char *const[]){ "minicpmd", __VA_ARGS__ NULL })
#define ENV(...) ((char *const[]){ __VA_ARGS__ NULL })

/* Load and expect success. */
#define OK(argv, envp) \
    cr_assert_eq(load(argv, envp), CFG_RESULT_RUN, "unexpected error: %s", err)

/* Load, expect an error whose message contains each given string. */
#define FAILS(argv, envp, ...) do { \
        cr_assert_eq(load(argv, envp), CFG_RESULT_ERROR, "expected an error"); \
        const char *want_[] = { __VA_ARGS__ }; \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++) \
            cr_assert(strstr(err, want_[i_]), "'%s' not in '%s'", want_[i_], err); \
        cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err); \
    } while (0)

#endif
