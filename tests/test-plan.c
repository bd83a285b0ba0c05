/* The runlist planner (engine/worker/plan.h): every K for 1, 4 and 42 layers, prompt
 * chunking, the adaptive-K policy (halving sequence, give-up, which states adapt),
 * and the remembered-K state file (round trip, several models, corrupt files,
 * missing directories, atomic writes). */
#include "engine/worker/plan.h"
#include "tests/check.h"
#include "util/defaults.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- plan of one step ---------------------------------------------------------- */

/* Every invariant of a plan for (n, k): the runlists' commands, concatenated, are
 * EMBED, LAYER 0 .. n-1, HEAD; no runlist holds more than K layers; greedy sizes;
 * embed only in the first runlist, the head alone in the last. */
static void check_plan(int n, int k_asked)
{
    struct eng_plan p;
    char err[256] = "";
    cr_assert_eq(eng_plan_init(&p, n, k_asked, err, sizeof err), 0, "n=%d k=%d: %s", n, k_asked, err);
    int k = k_asked == ENG_PLAN_ALL || k_asked > n ? n : k_asked;
    cr_assert_eq(p.n_layers, n);
    cr_assert_eq(p.k, k, "n=%d k=%d", n, k_asked);
    int layer_lists = (n + k - 1) / k;
    cr_assert_eq(p.n_runlists, layer_lists + 1, "n=%d k=%d", n, k);
    cr_assert_eq(p.n_cmds, n + 2);

    int pos = 0;        /* position in the expected sequence EMBED, L0.., HEAD */
    int next_layer = 0;
    for (int r = 0; r < p.n_runlists; r++) {
        const struct eng_runlist *rl = &p.runlists[r];
        cr_assert_eq(rl->index, r);
        cr_assert_gt(rl->n_cmds, 0, "empty runlist %d", r);
        cr_assert_eq(rl->has_embed, r == 0, "n=%d k=%d runlist %d embed", n, k, r);
        cr_assert_eq(rl->has_head, r == p.n_runlists - 1, "n=%d k=%d runlist %d head", n, k, r);
        int layers = 0;
        for (int c = 0; c < rl->n_cmds; c++, pos++) {
            const struct eng_cmd *cmd = &rl->cmds[c];
            cr_assert_eq(cmd, &p.cmds[pos], "runlist %d does not continue the command list", r);
            if (pos == 0) {
                cr_assert_eq(cmd->kind, ENG_CMD_EMBED, "embed first");
                cr_assert_eq(cmd->layer, -1);
            } else if (pos == n + 1) {
                cr_assert_eq(cmd->kind, ENG_CMD_HEAD, "head last");
                cr_assert_eq(cmd->layer, -1);
            } else {
                cr_assert_eq(cmd->kind, ENG_CMD_LAYER);
                cr_assert_eq(cmd->layer, next_layer, "n=%d k=%d: layer out of order", n, k);
                next_layer++;
                layers++;
            }
        }
        cr_assert_leq(layers, k, "n=%d k=%d: runlist %d has %d layers", n, k, r, layers);
        cr_assert_eq(rl->layer_end - rl->layer_begin, layers);
        if (layers)
            cr_assert_eq(rl->layer_begin, rl->cmds[rl->has_embed ? 1 : 0].layer);
        if (r == p.n_runlists - 1) {
            cr_assert_eq(layers, 0, "the head runlist has no layers");
            cr_assert_eq(rl->n_cmds, 1);
            cr_assert_eq(rl->layer_begin, n);
            cr_assert_eq(rl->layer_end, n);
        } else if (r < p.n_runlists - 2) {
            cr_assert_eq(layers, k, "greedy: every layer runlist but the last is full");
        } else {
            cr_assert_eq(layers, n - (layer_lists - 1) * k);
        }
    }
    cr_assert_eq(pos, n + 2, "every command exactly once");
    cr_assert_eq(next_layer, n, "every layer exactly once");
    eng_plan_deinit(&p);
    cr_assert_null(p.runlists);
    cr_assert_null(p.cmds);
}

MCD_TEST(plan, every_k)
{
    const int ns[] = {1, 4, 42};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        for (int k = 1; k <= ns[i]; k++)
            check_plan(ns[i], k);
        check_plan(ns[i], ENG_PLAN_ALL);
        check_plan(ns[i], ns[i] + 1);
        check_plan(ns[i], 1 << 20);
    }
}

MCD_TEST(plan, shapes_for_42)
{
    struct eng_plan p;
    cr_assert_eq(eng_plan_init(&p, 42, ENG_PLAN_ALL, NULL, 0), 0);
    cr_assert_eq(p.n_runlists, 2);  /* all 42 layers, then the head */
    cr_assert_eq(p.runlists[0].n_cmds, 43);
    eng_plan_deinit(&p);

    cr_assert_eq(eng_plan_init(&p, 42, 21, NULL, 0), 0);
    cr_assert_eq(p.n_runlists, 3);
    cr_assert_eq(p.runlists[0].layer_begin, 0);
    cr_assert_eq(p.runlists[0].layer_end, 21);
    cr_assert_eq(p.runlists[1].layer_begin, 21);
    cr_assert_eq(p.runlists[1].layer_end, 42);
    eng_plan_deinit(&p);

    cr_assert_eq(eng_plan_init(&p, 42, 11, NULL, 0), 0);  /* 11 + 11 + 11 + 9, head */
    cr_assert_eq(p.n_runlists, 5);
    cr_assert_eq(p.runlists[3].layer_end - p.runlists[3].layer_begin, 9);
    eng_plan_deinit(&p);
}

MCD_TEST(plan, rejects)
{
    struct eng_plan p;
    char err[256];
    struct { int n, k; } bad[] = {{0, 1}, {-1, 1}, {ENG_PLAN_MAX_LAYERS + 1, 1}, {42, 0}, {42, -2}, {42, -100}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&p, 0x5a, sizeof p);
        err[0] = '\0';
        cr_assert_eq(eng_plan_init(&p, bad[i].n, bad[i].k, err, sizeof err), -EINVAL, "n=%d k=%d",
                     bad[i].n, bad[i].k);
        cr_assert_neq(err[0], '\0');
        cr_assert_null(p.runlists);
        eng_plan_deinit(&p);  /* harmless */
    }
    eng_plan_deinit(NULL);
    cr_assert_eq(eng_plan_init(&p, ENG_PLAN_MAX_LAYERS, 1, NULL, 0), 0);
    cr_assert_eq(p.n_runlists, ENG_PLAN_MAX_LAYERS + 1);
    eng_plan_deinit(&p);
}

/* ---- prefill chunks ------------------------------------------------------------- */

static void check_chunks(int P, int C)
{
    int count = eng_plan_prefill_count(P, C);
    int want = P <= 0 ? 0 : C <= 0 ? 1 : (P + C - 1) / C;
    cr_assert_eq(count, want, "P=%d C=%d", P, C);
    int next = 0;
    for (int i = 0; i < count; i++) {
        struct eng_prefill_chunk ch;
        cr_assert_eq(eng_plan_prefill_chunk(P, C, i, &ch), 0);
        cr_assert_eq(ch.index, i);
        cr_assert_eq(ch.count, count);
        cr_assert_eq(ch.token_begin, next, "P=%d C=%d chunk %d: contiguous", P, C, i);
        cr_assert_gt(ch.n_tokens, 0);
        if (C > 0)
            cr_assert_leq(ch.n_tokens, C);
        if (i < count - 1)
            cr_assert_eq(ch.n_tokens, C, "all but the last chunk are full");
        cr_assert_eq(ch.last, i == count - 1);
        next += ch.n_tokens;
    }
    cr_assert_eq(next, P > 0 ? P : 0, "P=%d C=%d: every prompt token once", P, C);
    struct eng_prefill_chunk ch;
    cr_assert_eq(eng_plan_prefill_chunk(P, C, count, &ch), -EINVAL);
    cr_assert_eq(eng_plan_prefill_chunk(P, C, -1, &ch), -EINVAL);
}

MCD_TEST(plan, prefill_chunks)
{
    const int cs[] = {1, 2, 7, 512};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int C = cs[i];
        const int ps[] = {1, C - 1, C, C + 1, 5 * C + 3};
        for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++)
            check_chunks(ps[j], C);
    }
    /* the brief's cases spelled out for C = 512 */
    cr_assert_eq(eng_plan_prefill_count(1, 512), 1);
    cr_assert_eq(eng_plan_prefill_count(511, 512), 1);
    cr_assert_eq(eng_plan_prefill_count(512, 512), 1);
    cr_assert_eq(eng_plan_prefill_count(513, 512), 2);
    cr_assert_eq(eng_plan_prefill_count(5 * 512 + 3, 512), 6);
    struct eng_prefill_chunk ch;
    cr_assert_eq(eng_plan_prefill_chunk(5 * 512 + 3, 512, 5, &ch), 0);
    cr_assert_eq(ch.token_begin, 2560);
    cr_assert_eq(ch.n_tokens, 3);
    cr_assert(ch.last);
    /* no prompt, no limit */
    check_chunks(0, 512);
    check_chunks(-3, 512);
    check_chunks(1000, 0);
    check_chunks(1000, -1);
}

/* ---- adaptive K ------------------------------------------------------------------- */

static struct eng_kpolicy policy(enum eng_kmode mode, int n, int fixed, int dev_default, int remembered,
                                 int retries)
{
    struct eng_kpolicy p;
    struct eng_kpolicy_opts o = {.mode = mode, .fixed_k = fixed, .n_layers = n,
                                 .device_default_k = dev_default, .remembered_k = remembered,
                                 .max_retries = retries};
    char err[256] = "";
    cr_assert_eq(eng_kpolicy_init(&p, &o, err, sizeof err), 0, "%s", err);
    return p;
}

MCD_TEST(kpolicy, halving_sequence_42)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, -1);
    cr_assert_eq(p.max_retries, UT_RUNLIST_RETRIES_DEFAULT, "< 0: the daemon's default");
    p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, 6);   /* 42 -> 1 takes 6 halvings */
    eng_kpolicy_begin(&p);
    const int seq[] = {42, 21, 11, 6, 3, 2, 1};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        cr_assert_eq(eng_kpolicy_k(&p), seq[i], "step %zu", i);
        cr_assert_eq(p.attempts, (int)i + 1);
        enum eng_kverdict v = eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT);
        if (i + 1 < sizeof seq / sizeof seq[0])
            cr_assert_eq(v, ENG_KVERDICT_RETRY, "step %zu", i);
        else
            cr_assert_eq(v, ENG_KVERDICT_GIVE_UP, "K = 1 gives up");
    }
    cr_assert_eq(eng_kpolicy_k(&p), 1);
    cr_assert_eq(p.attempts, 7, "1 try + 6 replays");
}

/* K = 1 failed, but the reset changed how the device runs layers (xrt: one run per
 * dispatch from now on): one more replay, still within the retries; then K = 1
 * gives up as before. */
MCD_TEST(kpolicy, k1_replays_once_after_the_device_changed_mode)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 4, 0, ENG_PLAN_ALL, 0, 4);
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY);   /* 4 -> 2 */
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY);   /* 2 -> 1 */
    p.device_changed = true;
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY);
    cr_assert_eq(eng_kpolicy_k(&p), 1);
    cr_assert_not(p.device_changed, "used once");
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_GIVE_UP);
    /* FIXED K never replays, whatever the device did */
    p = policy(ENG_KMODE_FIXED, 4, 1, ENG_PLAN_ALL, 0, 4);
    eng_kpolicy_begin(&p);
    p.device_changed = true;
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_GIVE_UP);
}

MCD_TEST(kpolicy, halving_from_device_default)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, 36, 0, -1);
    eng_kpolicy_begin(&p);
    const int seq[] = {36, 18, 9, 5, 3, 2, 1};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        cr_assert_eq(eng_kpolicy_k(&p), seq[i]);
        eng_kpolicy_failed(&p, ENG_ERT_ABORT);
    }
    /* device default above n_layers, or "all" */
    p = policy(ENG_KMODE_AUTO, 4, 0, 100, 0, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 4);
    p = policy(ENG_KMODE_AUTO, 4, 0, 0, 0, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 4);
}

MCD_TEST(kpolicy, retries_exhausted)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, 2);
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY);   /* 42 -> 21 */
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY);   /* 21 -> 11 */
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_GIVE_UP); /* 11 -> 6, no tries left */
    cr_assert_eq(p.attempts, 3);
    /* the search goes on with the next request */
    cr_assert_eq(eng_kpolicy_k(&p), 6);
    eng_kpolicy_begin(&p);
    cr_assert_eq(p.attempts, 1);
    cr_assert(eng_kpolicy_succeeded(&p));
    cr_assert_eq(p.remembered_k, 6);

    /* no replays at all: still adapts for the next request */
    p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, 0);
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_GIVE_UP);
    cr_assert_eq(p.attempts, 1);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
}

MCD_TEST(kpolicy, which_states_adapt)
{
    const int adapt[] = {ENG_ERT_NEW, ENG_ERT_QUEUED, ENG_ERT_RUNNING, ENG_ERT_SUBMITTED,
                         ENG_ERT_ABORT, ENG_ERT_TIMEOUT, ENG_ERT_NORESPONSE};
    const int fatal[] = {ENG_ERT_COMPLETED, ENG_ERT_ERROR, ENG_ERT_SKERROR, ENG_ERT_SKCRASHED, 0, 12, -1};
    for (size_t i = 0; i < sizeof adapt / sizeof adapt[0]; i++) {
        cr_assert(eng_kpolicy_adapts(adapt[i]), "%s", eng_ert_name(adapt[i]));
        struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, -1);
        eng_kpolicy_begin(&p);
        cr_assert_eq(eng_kpolicy_failed(&p, adapt[i]), ENG_KVERDICT_RETRY);
        cr_assert_eq(eng_kpolicy_k(&p), 21);
    }
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
        cr_assert(!eng_kpolicy_adapts(fatal[i]), "%d", fatal[i]);
        struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, -1);
        eng_kpolicy_begin(&p);
        cr_assert_eq(eng_kpolicy_failed(&p, fatal[i]), ENG_KVERDICT_GIVE_UP);
        cr_assert_eq(eng_kpolicy_k(&p), 42, "K unchanged");
        cr_assert_eq(p.attempts, 1);
    }
}

MCD_TEST(kpolicy, all_and_fixed_never_adapt)
{
    struct eng_kpolicy p = policy(ENG_KMODE_ALL, 42, 0, 6, 11, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 42, "all ignores the device default and the remembered K");
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_GIVE_UP);
    cr_assert_eq(eng_kpolicy_k(&p), 42);
    cr_assert(!eng_kpolicy_succeeded(&p), "only auto remembers");

    p = policy(ENG_KMODE_FIXED, 42, 21, 6, 11, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_GIVE_UP);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
    cr_assert(!eng_kpolicy_succeeded(&p));

    p = policy(ENG_KMODE_FIXED, 42, 100, 0, 0, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 42, "clamped to n_layers");
}

MCD_TEST(kpolicy, remembered_k)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 11, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 11, "the remembered K wins over the device default");
    eng_kpolicy_begin(&p);
    cr_assert(!eng_kpolicy_succeeded(&p), "already remembered");
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY);
    cr_assert(eng_kpolicy_succeeded(&p), "a new K is reported once");
    cr_assert(!eng_kpolicy_succeeded(&p));
    cr_assert_eq(p.remembered_k, 6);

    /* the first success of a fresh auto policy is remembered too (K = all) */
    p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, -1);
    eng_kpolicy_begin(&p);
    cr_assert(eng_kpolicy_succeeded(&p));
    cr_assert_eq(p.remembered_k, 42);
    /* a remembered K beyond the model is clamped */
    p = policy(ENG_KMODE_AUTO, 4, 0, ENG_PLAN_ALL, 9, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 4);
}

MCD_TEST(kpolicy, single_layer_model)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 1, 0, ENG_PLAN_ALL, 0, -1);
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_k(&p), 1);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_GIVE_UP);
}

MCD_TEST(kpolicy, rejects)
{
    struct eng_kpolicy p;
    char err[256];
    struct eng_kpolicy_opts o = {.mode = ENG_KMODE_FIXED, .fixed_k = 0, .n_layers = 42};
    cr_assert_eq(eng_kpolicy_init(&p, &o, err, sizeof err), -EINVAL);
    o = (struct eng_kpolicy_opts){.mode = ENG_KMODE_AUTO, .n_layers = 0};
    cr_assert_eq(eng_kpolicy_init(&p, &o, err, sizeof err), -EINVAL);
    o = (struct eng_kpolicy_opts){.mode = (enum eng_kmode)42, .n_layers = 4};
    cr_assert_eq(eng_kpolicy_init(&p, &o, err, sizeof err), -EINVAL);
}

/* The worker's loop in miniature against a device that hangs on runlists of more
 * than `limit` layers (the sim's --sim-runlist-limit): AUTO from "all" on 42 layers
 * with a limit of 36 succeeds at K = 21 after one replay. */
MCD_TEST(kpolicy, against_a_runlist_limit)
{
    const int limit = 36;
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, -1);
    eng_kpolicy_begin(&p);
    int failures = 0;
    for (;;) {
        struct eng_plan plan;
        cr_assert_eq(eng_plan_init(&plan, 42, eng_kpolicy_k(&p), NULL, 0), 0);
        int state = ENG_ERT_COMPLETED;
        for (int r = 0; r < plan.n_runlists && state == ENG_ERT_COMPLETED; r++)
            if (plan.runlists[r].layer_end - plan.runlists[r].layer_begin > limit)
                state = ENG_ERT_TIMEOUT;
        eng_plan_deinit(&plan);
        if (state == ENG_ERT_COMPLETED)
            break;
        failures++;
        cr_assert_eq(eng_kpolicy_failed(&p, state), ENG_KVERDICT_RETRY);
    }
    cr_assert_eq(failures, 1);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
    cr_assert_eq(p.attempts, 2);
    cr_assert(eng_kpolicy_succeeded(&p));
}

/* ---- remembered K on disk ---------------------------------------------------------- */

static char tmpdir[256];

static void mk_tmp(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mcd-test-plan-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tmp(void)
{
    nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void path_in(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tmpdir, rel);
}

static void put(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(content, f);
    fclose(f);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

MCD_TEST(kstate, path)
{
    char buf[64];
    cr_assert_eq(eng_kstate_path("/var/lib/minicpmd", buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "/var/lib/minicpmd/runlist-k.json");
    char tiny[8];
    cr_assert_eq(eng_kstate_path("/var/lib/minicpmd", tiny, sizeof tiny), -ENAMETOOLONG);
}

MCD_TEST(kstate, round_trip)
{
    mk_tmp();
    char path[512], err[512] = "";
    cr_assert_eq(eng_kstate_path(tmpdir, path, sizeof path), 0);
    int k = -7;
    cr_assert_eq(eng_kstate_load(path, "minicpm5-2b", "sim", &k, err, sizeof err), 0, "missing file");
    cr_assert_eq(k, -7);
    cr_assert_eq(err[0], '\0');
    cr_assert_eq(eng_kstate_save(path, "minicpm5-2b", "sim", 21, 42, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_kstate_load(path, "minicpm5-2b", "sim", &k, err, sizeof err), 1, "%s", err);
    cr_assert_eq(k, 21);
    /* other device: not there */
    k = -7;
    cr_assert_eq(eng_kstate_load(path, "minicpm5-2b", "xrt:0000:c6:00.1", &k, err, sizeof err), 0);
    cr_assert_eq(k, -7);
    /* overwrite */
    cr_assert_eq(eng_kstate_save(path, "minicpm5-2b", "sim", 11, 42, err, sizeof err), 0);
    cr_assert_eq(eng_kstate_load(path, "minicpm5-2b", "sim", &k, err, sizeof err), 1);
    cr_assert_eq(k, 11);
    /* the file is the documented JSON, and no temporary file is left behind */
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    cr_assert_not_null(j, "%s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(j, "version")), 1);
    json_t *e = json_object_get(json_object_get(json_object_get(j, "entries"), "minicpm5-2b"), "sim");
    cr_assert_eq(json_integer_value(json_object_get(e, "k")), 11);
    cr_assert_eq(json_integer_value(json_object_get(e, "n_layers")), 42);
    cr_assert(json_is_string(json_object_get(e, "updated")));
    json_decref(j);
    cr_assert_eq(count_entries(tmpdir), 1);
    rm_tmp();
}

MCD_TEST(kstate, two_models_one_file)
{
    mk_tmp();
    char path[512], err[512] = "";
    eng_kstate_path(tmpdir, path, sizeof path);
    cr_assert_eq(eng_kstate_save(path, "minicpm5-2b", "sim", 21, 42, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_kstate_save(path, "tiny", "sim", 2, 4, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_kstate_save(path, "minicpm5-2b", "xrt:0000:c6:00.1", 6, 0, err, sizeof err), 0);
    cr_assert_eq(eng_kstate_save(path, "name with \"quotes\" and ünïcode", "cpu", 3, 0, err, sizeof err), 0);
    int k;
    cr_assert_eq(eng_kstate_load(path, "minicpm5-2b", "sim", &k, err, sizeof err), 1);
    cr_assert_eq(k, 21);
    cr_assert_eq(eng_kstate_load(path, "tiny", "sim", &k, err, sizeof err), 1);
    cr_assert_eq(k, 2);
    cr_assert_eq(eng_kstate_load(path, "minicpm5-2b", "xrt:0000:c6:00.1", &k, err, sizeof err), 1);
    cr_assert_eq(k, 6);
    cr_assert_eq(eng_kstate_load(path, "name with \"quotes\" and ünïcode", "cpu", &k, err, sizeof err), 1);
    cr_assert_eq(k, 3);
    cr_assert_eq(eng_kstate_load(path, "tiny", "xrt:0000:c6:00.1", &k, err, sizeof err), 0);
    rm_tmp();
}

MCD_TEST(kstate, corrupt_files)
{
    mk_tmp();
    char path[512];
    eng_kstate_path(tmpdir, path, sizeof path);
    const char *bad[] = {
        "", "{", "{not json", "[]", "42", "null", "\x00\xff\xfe garbage",
        "{\"version\":2,\"entries\":{}}",
        "{\"version\":\"1\",\"entries\":{}}",
        "{\"version\":1}",
        "{\"version\":1,\"entries\":[]}",
        "{\"version\":1,\"entries\":{},\"version\":1}",
        /* entry level from here */
        "{\"version\":1,\"entries\":{\"m\":{\"sim\":{\"k\":\"21\"}}}}",
        "{\"version\":1,\"entries\":{\"m\":{\"sim\":{\"k\":0}}}}",
        "{\"version\":1,\"entries\":{\"m\":{\"sim\":{\"k\":-3}}}}",
        "{\"version\":1,\"entries\":{\"m\":{\"sim\":{\"k\":1e3}}}}",
        "{\"version\":1,\"entries\":{\"m\":{\"sim\":{\"k\":99999999999}}}}",
        "{\"version\":1,\"entries\":{\"m\":{\"sim\":{}}}}",
        "{\"version\":1,\"entries\":{\"m\":{\"sim\":7}}}",
    };
    const size_t n_file_level = 12;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(path, bad[i]);
        char err[512] = "";
        int k = -7;
        int rc = eng_kstate_load(path, "m", "sim", &k, err, sizeof err);
        cr_assert_lt(rc, 0, "case %zu accepted", i);
        cr_assert_eq(k, -7, "case %zu: k touched", i);
        cr_assert(strstr(err, path), "case %zu: warning names the file: %s", i, err);
        cr_assert_null(strchr(err, '\n'), "one line");
        /* saving replaces a corrupt file and says so; a bad entry in a sound file
         * (the cases from n_file_level on) is simply overwritten */
        err[0] = '\0';
        bool file_level = i < n_file_level;
        cr_assert_eq(eng_kstate_save(path, "m", "sim", 5, 0, err, sizeof err), file_level ? 1 : 0,
                     "case %zu", i);
        cr_assert_eq(err[0] != '\0', file_level);
        cr_assert_eq(eng_kstate_load(path, "m", "sim", &k, err, sizeof err), 1);
        cr_assert_eq(k, 5);
    }
    /* a corrupt entry of another model does not stop ours */
    put(path, "{\"version\":1,\"entries\":{\"other\":{\"sim\":{\"k\":\"x\"}},\"m\":{\"sim\":{\"k\":8}}}}");
    int k;
    char err[512];
    cr_assert_eq(eng_kstate_load(path, "m", "sim", &k, err, sizeof err), 1);
    cr_assert_eq(k, 8);
    cr_assert_eq(eng_kstate_save(path, "m", "sim", 4, 0, err, sizeof err), 0);
    cr_assert_eq(eng_kstate_load(path, "m", "sim", &k, err, sizeof err), 1);
    cr_assert_eq(k, 4);
    cr_assert_lt(eng_kstate_load(path, "other", "sim", &k, err, sizeof err), 0, "kept as it was");
    /* too big */
    FILE *f = fopen(path, "w");
    for (int i = 0; i < (1 << 20) / 8 + 2; i++)
        fputs("        ", f);
    fclose(f);
    cr_assert_lt(eng_kstate_load(path, "m", "sim", &k, err, sizeof err), 0);
    rm_tmp();
}

MCD_TEST(kstate, missing_dir_and_odd_paths)
{
    mk_tmp();
    char path[512], err[512] = "";
    path_in(path, sizeof path, "a/b/c/runlist-k.json");
    int k = -7;
    cr_assert_eq(eng_kstate_load(path, "m", "sim", &k, err, sizeof err), 0, "missing dir = no entry");
    cr_assert_eq(eng_kstate_save(path, "m", "sim", 3, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_kstate_load(path, "m", "sim", &k, err, sizeof err), 1);
    cr_assert_eq(k, 3);

    /* the path is a directory */
    char dir[512];
    path_in(dir, sizeof dir, "a");
    cr_assert_lt(eng_kstate_load(dir, "m", "sim", &k, err, sizeof err), 0);
    cr_assert(strstr(err, "not a regular file"), "%s", err);

    /* a parent is a regular file: nothing can be written */
    char file[512], under[600];
    path_in(file, sizeof file, "plain");
    put(file, "x");
    snprintf(under, sizeof under, "%s/runlist-k.json", file);
    err[0] = '\0';
    cr_assert_lt(eng_kstate_save(under, "m", "sim", 3, 0, err, sizeof err), 0);
    cr_assert_neq(err[0], '\0');
    cr_assert_lt(eng_kstate_load(under, "m", "sim", &k, err, sizeof err), 0, "ENOTDIR is a warning");

    /* a FIFO must not block the worker */
    char fifo[512];
    path_in(fifo, sizeof fifo, "fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_lt(eng_kstate_load(fifo, "m", "sim", &k, err, sizeof err), 0);

    /* empty ids and bad K */
    path_in(path, sizeof path, "runlist-k.json");
    cr_assert_eq(eng_kstate_save(path, "", "sim", 3, 0, err, sizeof err), -EINVAL);
    cr_assert_eq(eng_kstate_save(path, "m", NULL, 3, 0, err, sizeof err), -EINVAL);
    cr_assert_eq(eng_kstate_save(path, "m", "sim", 0, 0, err, sizeof err), -EINVAL);
    cr_assert_eq(eng_kstate_load(path, NULL, "sim", &k, err, sizeof err), -EINVAL);
    /* invalid UTF-8 ids cannot be stored in JSON: refused, file untouched */
    cr_assert_eq(eng_kstate_save(path, "m\xff", "sim", 3, 0, err, sizeof err), -EINVAL);
    cr_assert_eq(access(path, F_OK), -1);
    rm_tmp();
}

MCD_TEST(kstate, unreadable_file_not_fatal)
{
    if (geteuid() == 0)
        return;  /* root reads everything */
    mk_tmp();
    char path[512], err[512] = "";
    eng_kstate_path(tmpdir, path, sizeof path);
    put(path, "{\"version\":1,\"entries\":{}}");
    chmod(path, 0);
    int k;
    cr_assert_eq(eng_kstate_load(path, "m", "sim", &k, err, sizeof err), -EACCES);
    rm_tmp();
}

/* ---- K recovers ------------------------------------------------ */

/* One hang used to halve K for good: now a run of good tokens at the reduced K
 * makes the next request probe 2K, up to the device's default. */
MCD_TEST(kpolicy, recovers_after_good_tokens)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 0, -1);
    cr_assert_eq(p.probe_after, UT_RUNLIST_PROBE_TOKENS);
    eng_kpolicy_begin(&p);
    cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
    cr_assert(eng_kpolicy_succeeded(&p));
    /* not yet: fewer good tokens than the interval */
    cr_assert_eq(eng_kpolicy_grow(&p, UT_RUNLIST_PROBE_TOKENS - 1), 0);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
    /* the interval is reached: probe 42 */
    cr_assert_eq(eng_kpolicy_grow(&p, 1), 42);
    cr_assert(p.probing);
    /* the probe's request completes: K holds, and is remembered again */
    eng_kpolicy_begin(&p);
    cr_assert(eng_kpolicy_succeeded(&p));
    cr_assert_eq(p.remembered_k, 42);
    cr_assert_eq(eng_kpolicy_grow(&p, 10), 0, "at the device's default: nothing to probe");
    cr_assert(!p.probing);
    cr_assert_eq(eng_kpolicy_k(&p), 42);
}

/* From K = 1 it climbs 1, 2, 4, ... to the default, one interval per step. */
MCD_TEST(kpolicy, climbs_back_to_the_default)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, 36, 1, -1);
    cr_assert_eq(eng_kpolicy_k(&p), 1, "the remembered K");
    const int seq[] = {2, 4, 8, 16, 32, 36};
    for (size_t i = 0; i < sizeof seq / sizeof *seq; i++) {
        eng_kpolicy_begin(&p);
        eng_kpolicy_succeeded(&p);
        cr_assert_eq(eng_kpolicy_grow(&p, UT_RUNLIST_PROBE_TOKENS), seq[i], "step %zu", i);
    }
    eng_kpolicy_begin(&p);
    eng_kpolicy_succeeded(&p);
    cr_assert_eq(eng_kpolicy_grow(&p, 1 << 30), 0);
    cr_assert_eq(eng_kpolicy_k(&p), 36);
}

/* A probe that hangs halves K back and doubles the interval, bounded. */
MCD_TEST(kpolicy, failed_probe_backs_off)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 21, -1);
    int interval = UT_RUNLIST_PROBE_TOKENS;
    for (int round = 0; round < 20; round++) {
        eng_kpolicy_begin(&p);
        eng_kpolicy_succeeded(&p);
        cr_assert_eq(eng_kpolicy_grow(&p, interval - 1), 0, "round %d: too early", round);
        cr_assert_eq(eng_kpolicy_grow(&p, 1), 42, "round %d: the probe", round);
        eng_kpolicy_begin(&p);
        cr_assert_eq(eng_kpolicy_failed(&p, ENG_ERT_TIMEOUT), ENG_KVERDICT_RETRY,
                     "a failed probe is replayed, never costs the request");
        cr_assert_eq(eng_kpolicy_k(&p), 21);
        cr_assert(!p.probing);
        interval = interval * 2 > UT_RUNLIST_PROBE_TOKENS_MAX ? UT_RUNLIST_PROBE_TOKENS_MAX
                                                              : interval * 2;
        cr_assert_eq(p.probe_after, interval, "round %d", round);
    }
    cr_assert_eq(p.probe_after, UT_RUNLIST_PROBE_TOKENS_MAX, "bounded");
    /* a probe that then works resets the interval */
    eng_kpolicy_begin(&p);
    eng_kpolicy_succeeded(&p);
    cr_assert_eq(eng_kpolicy_grow(&p, UT_RUNLIST_PROBE_TOKENS_MAX), 42);
    eng_kpolicy_begin(&p);
    eng_kpolicy_succeeded(&p);
    eng_kpolicy_grow(&p, 1);
    cr_assert_eq(p.probe_after, UT_RUNLIST_PROBE_TOKENS);
}

/* No probes where a failed one could not be replayed, nor outside auto. */
MCD_TEST(kpolicy, no_probe_without_retries_or_auto)
{
    struct eng_kpolicy p = policy(ENG_KMODE_AUTO, 42, 0, ENG_PLAN_ALL, 21, 0);
    cr_assert_eq(eng_kpolicy_grow(&p, 1 << 30), 0);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
    p = policy(ENG_KMODE_FIXED, 42, 21, 0, 0, -1);
    cr_assert_eq(eng_kpolicy_grow(&p, 1 << 30), 0);
    cr_assert_eq(eng_kpolicy_k(&p), 21);
}

/* A remembered K expires: a week after it was written the daemon starts from the
 * device's default again (and an undated entry counts as expired). */
MCD_TEST(kstate, remembered_k_expires)
{
    char path[256];
    cr_assert_eq(eng_kstate_path(tmpdir, path, sizeof path), 0);
    char err[512] = "";
    cr_assert_eq(eng_kstate_save(path, "m", "sim", 7, 42, err, sizeof err), 0, "%s", err);
    long long now = (long long)time(NULL);
    int k = 0;
    cr_assert_eq(eng_kstate_load_fresh(path, "m", "sim", UT_RUNLIST_K_MAX_AGE_S, now, &k, err,
                                       sizeof err), 1, "%s", err);
    cr_assert_eq(k, 7);
    cr_assert_eq(eng_kstate_load_fresh(path, "m", "sim", UT_RUNLIST_K_MAX_AGE_S,
                                       now + UT_RUNLIST_K_MAX_AGE_S + 60, &k, err, sizeof err), 2);
    cr_assert(strstr(err, "out of date"), "%s", err);
    FILE *f = fopen(path, "w");
    fputs("{\"version\":1,\"entries\":{\"m\":{\"sim\":{\"k\":3}}}}", f);
    fclose(f);
    cr_assert_eq(eng_kstate_load_fresh(path, "m", "sim", UT_RUNLIST_K_MAX_AGE_S, now, &k, err,
                                       sizeof err), 2);
    cr_assert(strstr(err, "undated"), "%s", err);
    cr_assert_eq(eng_kstate_load_fresh(path, "other", "sim", UT_RUNLIST_K_MAX_AGE_S, now, &k,
                                       err, sizeof err), 0);
}
