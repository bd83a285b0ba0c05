/* Faults on the functional model (tests/xrt/double/model.h): a hang in the middle
 * of a runlist, an abort, a command left in NEW. The model computes exactly the
 * runs before the failing one, so the KV rows are those a real partial run leaves;
 * a reset and a replay of the sequence from position 0 (what the worker does) must
 * then give exactly the tokens of a clean run, with runlists and with one run per
 * dispatch. And AUTO's ladder: when even one-layer runlists fail, the device
 * falls back to single runs at its reset. */
#include "engine/device/device.h"
#include "engine/worker/plan.h"
#include "engine/device/xrt/xrt-dev.h"
#include "tests/check.h"
#include "double/model.h"
#include "xrt-double.h"
#include "xrt-fx.h"

#include <stdio.h>
#include <string.h>

#define N_PROMPT 12
#define N_GEN 8

enum fault { F_NONE, F_HANG, F_ABORT, F_NEW };

struct run {
    struct eng_device *d;
    struct eng_plan plan;
    eng_device_seq *seq;
    float *logits;
    int n_vocab;
};

static int step(struct run *r, int32_t tok, struct eng_run_result *res)
{
    struct eng_batch b = {.tokens = &tok, .n_tokens = 1, .logits = r->logits,
                          .phase = ENG_PHASE_DECODE};
    for (int i = 0; i < r->plan.n_runlists; i++)
        if (eng_device_run_runlist(r->d, r->seq, &r->plan.runlists[i], &b, res) != 0)
            return -1;
    return 0;
}

static int argmax(const float *z, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (z[i] > z[b])
            b = i;
    return b;
}

/* Greedy generation; the fault is armed when position `at` is fed. On a failure:
 * reset, drop the KV and replay every token fed so far. Returns the failures seen. */
static int generate(const char *kdir, bool single, int k, enum fault f, int at, int32_t *out)
{
    eng_pack *p = open_pack("tiny");
    char err[256];
    xrtdbl_reset();
    xrtdbl_set_model(true);
    xmodel_reset();
    struct run r = {0};
    r.d = open_double(p, kdir, 150, single);
    r.n_vocab = eng_pack_get_info(p)->hp.n_vocab;
    cr_assert_eq(eng_plan_init(&r.plan, eng_pack_get_info(p)->hp.n_layers, k, err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(eng_device_seq_begin(r.d, 64, &r.seq, err, sizeof err), 0, "%s", err);
    r.logits = calloc((size_t)r.n_vocab, sizeof *r.logits);
    int32_t fed[N_PROMPT + N_GEN];
    int n_fed = 0, failures = 0;
    for (int pos = 0; pos < N_PROMPT + N_GEN - 1; pos++) {
        int32_t tok = pos < N_PROMPT ? (int32_t)(7 + 37 * pos) % r.n_vocab : out[pos - N_PROMPT];
        if (pos == at && f != F_NONE) {
            if (f == F_HANG && !single)
                xrtdbl_set_runlist_limit(1);        /* the list's second run never ends */
            else if (f == F_HANG)
                xrtdbl_set_hang(true);
            else if (f == F_ABORT)
                xrtdbl_set_abort_at((int)xrtdbl_runs_completed() + 2);
            else
                xrtdbl_set_unexpected_state(1, 1);  /* the second wait: NEW */
        }
        fed[n_fed++] = tok;
        struct eng_run_result res;
        while (step(&r, tok, &res) != 0) {
            cr_assert_lt(++failures, 4, "no recovery: %s", res.message);
            xrtdbl_set_runlist_limit(0);
            xrtdbl_set_hang(false);
            xrtdbl_set_abort_at(-1);
            xrtdbl_set_unexpected_state(-1, 1);
            cr_assert_eq(eng_device_reset(r.d, err, sizeof err), 0, "%s", err);
            eng_device_seq_truncate(r.d, r.seq, 0);
            for (int i = 0; i < n_fed - 1; i++)
                cr_assert_eq(step(&r, fed[i], &res), 0, "replay: %s", res.message);
        }
        if (pos >= N_PROMPT - 1)
            out[pos - N_PROMPT + 1] = argmax(r.logits, r.n_vocab);
    }
    eng_device_seq_end(r.d, r.seq);
    eng_plan_deinit(&r.plan);
    free(r.logits);
    eng_device_free(r.d);
    eng_pack_free(p);
    return failures;
}

MCD_TEST(replay, faults_then_replay_give_the_clean_tokens)
{
    const char *kdir = kset_dir("tiny", "replay", "--designs");
    int32_t clean[N_GEN], got[N_GEN];
    cr_assert_eq(generate(kdir, false, ENG_PLAN_ALL, F_NONE, -1, clean), 0);
    static const char *const names[] = {"", "hang mid-runlist", "abort", "NEW state"};
    for (int single = 0; single < 2; single++)
        for (int f = F_HANG; f <= F_NEW; f++) {
            memset(got, 0xff, sizeof got);
            int n = generate(kdir, single, single ? 1 : ENG_PLAN_ALL, (enum fault)f,
                             N_PROMPT + 2, got);
            cr_assert_eq(n, 1, "%s (%s): %d failures, expected 1", names[f],
                         single ? "single runs" : "runlists", n);
            cr_assert_arr_eq(got, clean, sizeof clean, "%s (%s): the replay's tokens differ",
                             names[f], single ? "single runs" : "runlists");
        }
}

MCD_TEST(replay, auto_falls_back_to_single_runs_when_every_runlist_fails)
{
    eng_pack *p = open_pack("tiny");
    xrtdbl_reset();
    xrtdbl_set_model(true);
    xmodel_reset();
    struct eng_device *d = open_double(p, kset_dir("tiny", "ladder", NULL), 150, false);
    cr_assert(strstr(eng_device_get_description(d), "single runs when every K fails"), "%s",
              eng_device_get_description(d));
    xrtdbl_set_runlists_fail(true);
    char err[256];
    /* The planner's ladder down to K = 2 and K = 1: both fail. */
    for (int k = 2; k >= 1; k--) {
        struct step s;
        step_init(&s, d, p, k);
        struct eng_run_result res;
        cr_assert_neq(decode(&s, d, 3, NULL, &res), 0, "K=%d", k);
        cr_assert_eq(res.state, ENG_ERT_TIMEOUT, "%s", res.message);
        cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "%s", err);
        step_deinit(&s, d);
    }
    cr_assert(strstr(eng_device_get_description(d), "one run per dispatch"), "%s",
              eng_device_get_description(d));
    size_t lists = count_lines(".execute(");
    struct step s;
    step_init(&s, d, p, 1);
    struct eng_run_result res;
    cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "%s", res.message);
    cr_assert_eq(count_lines(".execute("), lists, "single runs use no runlist");
    cr_assert_gt(count_lines(".start()"), 0);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}
