/* Shared by the Criterion tests that need a generated pack (test-device.c,
 * test-worker-*.c): "<MINICPMD_TEST_WORK>/<preset>", made by MINICPMD_PACK on first
 * use, atomically (a temporary directory renamed into place), seed 7. */
#ifndef MINICPMD_TESTS_PACKS_H
#define MINICPMD_TESTS_PACKS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static inline const char *pack_dir(const char *preset)
{
    static char dir[2048];
    const char *work = getenv("MINICPMD_TEST_WORK"), *gen = getenv("MINICPMD_PACK");
    cr_assert(work && gen, "MINICPMD_TEST_WORK and MINICPMD_PACK are set by meson test");
    snprintf(dir, sizeof dir, "%s/%s", work, preset);
    char probe[2100];
    snprintf(probe, sizeof probe, "%s/config.json", dir);
    if (access(probe, R_OK) == 0)
        return dir;
    mkdir(work, 0755);
    char tmp[2100], cmd[8192];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", dir, (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' gen --preset %s --seed 7 --out '%s' >/dev/null", gen, preset,
             tmp);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    if (rename(tmp, dir) != 0) {   /* someone else made it meanwhile */
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        cr_assert_eq(system(cmd), 0);
    }
    return dir;
}

#endif
