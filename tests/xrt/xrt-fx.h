/* Shared by the xrt device tests (test-xrt-*.c): packs from minicpmd-pack gen
 * (MINICPMD_PACK) and stand-in kernel sets from tests/xrt/mkkset.py
 * (MINICPMD_MKKSET) under MINICPMD_TEST_WORK, the xrt backend opened on the XRT
 * conformance double (tests/xrt/double), and one decode step through every
 * runlist of a plan. */
#ifndef MINICPMD_TESTS_XRT_FX_H
#define MINICPMD_TESTS_XRT_FX_H

#include "engine/device/device.h"
#include "engine/worker/plan.h"
#include "engine/device/xrt/xrt-dev.h"
#include "xrt-double.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int eng__device_xrt_double_open(const struct eng_device_opts *o, struct eng_device **out,
                                char *err, size_t errlen);

/* ---- fixtures -------------------------------------------------------------------- */

static inline const char *work(void)
{
    const char *w = getenv("MINICPMD_TEST_WORK");
    cr_assert(w && getenv("MINICPMD_PACK") && getenv("MINICPMD_MKKSET"),
              "MINICPMD_TEST_WORK, MINICPMD_PACK and MINICPMD_MKKSET are set by meson test");
    return w;
}

static inline const char *pack_dir(const char *preset)
{
    static char dir[2][2048];
    char *d = dir[strcmp(preset, "tiny") == 0];
    snprintf(d, 2048, "%s/%s", work(), preset);
    struct stat st;
    if (stat(d, &st) != 0) {
        char cmd[8192];
        int n = snprintf(cmd, sizeof cmd,
                         "mkdir -p '%s' && '%s' gen --preset %s --seed 11 --out '%s.tmp%d' "
                         ">/dev/null && mv '%s.tmp%d' '%s' 2>/dev/null; test -d '%s'", work(),
                         getenv("MINICPMD_PACK"), preset, d, (int)getpid(), d, (int)getpid(),
                         d, d);
        cr_assert(n > 0 && (size_t)n < sizeof cmd, "command too long: %s", cmd);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
    }
    return d;
}

/* A stand-in kernel set for `preset` under <work>/kset-<name>, built with `args`. */
static inline const char *kset_dir(const char *preset, const char *name, const char *args)
{
    static char dir[4][2048];
    static int next;
    char *d = dir[next++ % 4];
    snprintf(d, 2048, "%s/kset-%s-%s", work(), preset, name);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && /usr/bin/python3 -B '%s' '%s' '%s' %s", d,
             getenv("MINICPMD_MKKSET"), pack_dir(preset), d, args ? args : "");
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    return d;
}

static inline eng_pack *open_pack(const char *preset)
{
    eng_pack *p = NULL;
    char err[512];
    cr_assert_eq(eng_pack_open(pack_dir(preset), &p, err, sizeof err), 0, "%s", err);
    return p;
}

/* The double device over `preset` with the kernel set `kdir`. */
static inline struct eng_device *open_double(eng_pack *pack, const char *kdir,
                                             int timeout_ms, bool no_runlist)
{
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kdir, .accel_node = "/dev/null",
                                               .timeout_ms = timeout_ms,
                                               .no_runlist = no_runlist});
    struct eng_device *d = NULL;
    char err[512];
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_load_model(d, pack, err, sizeof err), 0, "%s", err);
    return d;
}

struct step {
    struct eng_plan plan;
    eng_device_seq *seq;
    float *logits;
    int n_vocab;
};

static inline void step_init(struct step *s, struct eng_device *d, eng_pack *pack, int k)
{
    char err[256];
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    cr_assert_eq(eng_plan_init(&s->plan, pi->hp.n_layers, k, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_seq_begin(d, 64, &s->seq, err, sizeof err), 0, "%s", err);
    s->n_vocab = pi->hp.n_vocab;
    s->logits = calloc((size_t)s->n_vocab, sizeof *s->logits);
    cr_assert(s->logits);
}

static inline void step_deinit(struct step *s, struct eng_device *d)
{
    eng_device_seq_end(d, s->seq);
    eng_plan_deinit(&s->plan);
    free(s->logits);
}

/* One decode step: every runlist of the plan in order. Returns 0 or the first
 * failure in *res. */
static inline int decode(struct step *s, struct eng_device *d, int32_t tok,
                         const atomic_bool *cancel, struct eng_run_result *res)
{
    struct eng_batch b = {.tokens = &tok, .n_tokens = 1, .logits = s->logits,
                          .phase = ENG_PHASE_DECODE, .cancel = cancel};
    for (int i = 0; i < s->plan.n_runlists; i++)
        if (eng_device_run_runlist(d, s->seq, &s->plan.runlists[i], &b, res) != 0)
            return -1;
    return 0;
}

/* A pack of `preset` with its KV heads stored `kv` times over (MiniCPM5's 2 as the
 * kernel set's 8), generated once under work(): WORK/PRESET-kvKV. */
static inline const char *kv_pack_dir(const char *preset, int kv)
{
    static char d[2048];
    snprintf(d, sizeof d, "%s/%s-kv%d", work(), preset, kv);
    struct stat st;
    if (stat(d, &st) != 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "'%s' gen --preset %s --kv-heads %d --seed 11 --out '%s.tmp' "
                 ">/dev/null 2>&1 && mv '%s.tmp' '%s'", getenv("MINICPMD_PACK"), preset, kv, d,
                 d, d);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
    }
    return d;
}

/* A stand-in kernel set (mkkset.py --designs) for the pack in `pack`, made anew in
 * WORK/kset-NAME with room for max_ctx positions. */
static inline const char *kv_kset_dir(const char *pack, const char *name, int max_ctx)
{
    static char d[2048];
    char cmd[8192];
    snprintf(d, sizeof d, "%s/kset-%s", work(), name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && /usr/bin/python3 -B '%s' '%s' '%s' --designs "
             "--max-ctx %d", d, getenv("MINICPMD_MKKSET"), pack, d, max_ctx);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    return d;
}

/* The 5 largest of z[0 .. n), largest first. */
static inline void top5(const float *z, int n, int out[5])
{
    for (int k = 0; k < 5; k++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken = taken || out[j] == i;
            if (!taken && (best < 0 || z[i] > z[best]))
                best = i;
        }
        out[k] = best;
    }
}

/* n token ids in [lo, V) from `seed` (an LCG: the same on every machine). */
static inline void random_ids(int32_t *t, int n, int lo, int V, uint64_t seed)
{
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)(lo + (r >> 33) % (uint64_t)(V - lo));
    }
}

static inline size_t count_lines(const char *needle)
{
    size_t n = 0;
    for (size_t i = 0; i < xrtdbl_log_lines(); i++)
        if (strstr(xrtdbl_log_line(i), needle))
            n++;
    return n;
}

#endif
