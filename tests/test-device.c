/* The device interface (engine/device/device.h): the registry, the cpu backend against
 * the plain forward pass for every way of cutting the layers, engine errors as
 * ERROR, and the sim's firmware model — the runlist limit's TIMEOUT at the first
 * command over the limit, "needs reset", a cancellable hang, injected faults at
 * the command they name, injected reset failures, latency, and fault specs checked
 * against the model.
 *
 * Packs are generated once per run with minicpmd-pack gen (MINICPMD_PACK) into
 * MINICPMD_TEST_WORK; meson test sets both. */
#include "minicpmd-build.h"
#include "engine/device/device.h"
#include "engine/model/model.h"
#include "engine/worker/plan.h"
#include "tests/check.h"
#include "tests/packs.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


static eng_pack *open_pack(const char *preset)
{
    eng_pack *p = NULL;
    char err[512] = "";
    cr_assert_eq(eng_pack_open(pack_dir(preset), &p, err, sizeof err), 0, "%s", err);
    return p;
}

static struct eng_device *open_dev(const char *name, const struct eng_device_opts *o,
                                   const eng_pack *p)
{
    struct eng_device *d = NULL;
    char err[512] = "";
    cr_assert_eq(eng_device_open(name, o, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_load_model(d, p, err, sizeof err), 0, "%s", err);
    return d;
}

static eng_device_seq *begin(struct eng_device *d, int n_ctx)
{
    eng_device_seq *s = NULL;
    char err[256] = "";
    cr_assert_eq(eng_device_seq_begin(d, n_ctx, &s, err, sizeof err), 0, "%s", err);
    return s;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Run every runlist of `plan` over one batch; stops at the first failure. */
static int run_plan(struct eng_device *d, eng_device_seq *s, const struct eng_plan *plan,
                    const struct eng_batch *b, struct eng_run_result *res)
{
    for (int i = 0; i < plan->n_runlists; i++) {
        int rc = eng_device_run_runlist(d, s, &plan->runlists[i], b, res);
        if (rc)
            return rc;
    }
    return 0;
}

static void plan_k(struct eng_plan *p, int n_layers, int k)
{
    char err[128] = "";
    cr_assert_eq(eng_plan_init(p, n_layers, k, err, sizeof err), 0, "%s", err);
}

static const int32_t prompt[] = {0, 5, 17, 300, 42, 7, 99, 512, 3, 14};
#define N_PROMPT ((int)(sizeof prompt / sizeof *prompt))

/* ---- registry ------------------------------------------------------------------- */

MCD_TEST(device, registry)
{
    /* sim, then xrt where the bridge is built, and cpu last (auto's fallback). */
    size_t i = 0;
    cr_assert_str_eq(eng_device_reg_name(i++), "sim");
#if MINICPMD_HAVE_XRT
    cr_assert_str_eq(eng_device_reg_name(i++), "xrt");
#endif
    cr_assert_str_eq(eng_device_reg_name(i++), "cpu");
    cr_assert_null(eng_device_reg_name(i));

    struct eng_device *d = NULL;
    char err[256] = "";
    cr_assert_eq(eng_device_open("npu9000", NULL, &d, err, sizeof err), -ENOENT);
    cr_assert_null(d);
    cr_assert(strstr(err, "npu9000") && strstr(err, "cpu") && strstr(err, "sim"), "%s", err);

    cr_assert_eq(eng_device_open("auto", NULL, &d, err, sizeof err), -ENOENT,
                 "auto is eng_engine_choose_device's, not the registry's");
    cr_assert_eq(eng_device_open("cpu", NULL, &d, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(eng_device_get_name(d), "cpu");
    cr_assert_eq(eng_device_default_k(d), ENG_PLAN_ALL);
    cr_assert_gt(eng_device_max_batch(d), 0);
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "cpu has no reset: a no-op");
    eng_device_free(d);

    struct eng_device_opts bad = {.sim_runlist_limit = -1};
    cr_assert_eq(eng_device_open("sim", &bad, &d, err, sizeof err), -EINVAL);
    cr_assert_null(d);
    struct eng_device_opts ok = {.sim_runlist_limit = 36, .sim_timeout_ms = 10};
    cr_assert_eq(eng_device_open("sim", &ok, &d, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(eng_device_get_name(d), "sim");
    cr_assert_eq(eng_device_default_k(d), ENG_PLAN_ALL, "the sim reproduces the failure first");
    cr_assert(strstr(eng_device_get_description(d), "36"), "%s", eng_device_get_description(d));
    eng_device_free(d);
    eng_device_free(NULL);
}

/* ---- cpu ------------------------------------------------------------------------- */

/* Prefill the prompt, then decode 3 fixed tokens, with runlists of K layers;
 * logits of every step into out[4][n_vocab]. */
static void run_cpu_k(struct eng_device *d, int n_layers, int n_vocab, int k, float *out)
{
    eng_device_seq *s = begin(d, 64);
    struct eng_plan plan;
    plan_k(&plan, n_layers, k);
    struct eng_run_result res;
    struct eng_batch b = {.tokens = prompt, .n_tokens = N_PROMPT, .logits = out,
                          .phase = ENG_PHASE_PREFILL};
    cr_assert_eq(run_plan(d, s, &plan, &b, &res), 0, "K=%d: %s", k, res.message);
    cr_assert_eq(res.state, ENG_ERT_COMPLETED);
    cr_assert_eq(res.failed_cmd, -1);
    const int32_t next[3] = {11, 222, 33};
    for (int i = 0; i < 3; i++) {
        b = (struct eng_batch){.tokens = &next[i], .n_tokens = 1,
                               .logits = out + (size_t)(i + 1) * n_vocab,
                               .phase = ENG_PHASE_DECODE, .token_index = i};
        cr_assert_eq(run_plan(d, s, &plan, &b, &res), 0, "K=%d: %s", k, res.message);
    }
    eng_plan_deinit(&plan);
    eng_device_seq_end(d, s);
}

MCD_TEST(device, cpu_any_split_equals_forward)
{
    eng_pack *p = open_pack("deep");
    const struct eng_hparams *hp = &eng_pack_get_info(p)->hp;
    int nl = hp->n_layers, nv = hp->n_vocab;
    cr_assert_eq(nl, 42);
    struct eng_device_opts o = {.n_threads = 1, .act = ENG_ACT_Q8};
    struct eng_device *d = open_dev("cpu", &o, p);

    /* The reference: the model's own one-call forward pass. */
    eng_model *m = NULL;
    eng_seq *seq = NULL;
    char err[256] = "";
    struct eng_model_opts mo = {.n_threads = 1, .act = ENG_ACT_Q8};
    cr_assert_eq(eng_model_open(p, &mo, &m, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_seq_new(m, 64, &seq, err, sizeof err), 0, "%s", err);
    float *ref = malloc(4 * (size_t)nv * sizeof *ref), *got = malloc(4 * (size_t)nv * sizeof *got);
    cr_assert_eq(eng_seq_forward(seq, prompt, N_PROMPT, ref), 0);
    const int32_t next[3] = {11, 222, 33};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(eng_seq_forward(seq, &next[i], 1, ref + (size_t)(i + 1) * nv), 0);

    const int ks[] = {ENG_PLAN_ALL, 1, 2, 5, 20, 21, 36, 41, 42, 100};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        run_cpu_k(d, nl, nv, ks[i], got);
        cr_assert_eq(memcmp(ref, got, 4 * (size_t)nv * sizeof *ref), 0,
                     "K=%d: logits differ from eng_seq_forward", ks[i]);
    }
    free(ref);
    free(got);
    eng_seq_free(seq);
    eng_model_free(m);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(device, cpu_engine_error_is_ert_error)
{
    eng_pack *p = open_pack("deep");
    struct eng_device_opts o = {.n_threads = 1};
    struct eng_device *d = open_dev("cpu", &o, p);
    eng_device_seq *s = begin(d, 16);
    struct eng_plan plan;
    plan_k(&plan, 42, 21);
    struct eng_run_result res;
    const int32_t bad = 5000;
    struct eng_batch b = {.tokens = &bad, .n_tokens = 1, .phase = ENG_PHASE_DECODE};
    cr_assert_eq(eng_device_run_runlist(d, s, &plan.runlists[0], &b, &res), -EIO);
    cr_assert_eq(res.state, ENG_ERT_ERROR);
    cr_assert_eq(res.failed_cmd, 0, "EMBED is command 0");
    cr_assert_eq(res.failed_layer, -1);
    cr_assert(strstr(res.message, "5000"), "the engine's reason: %s", res.message);

    /* The second runlist before the first: layers out of order. */
    b.tokens = prompt;
    cr_assert_eq(eng_device_run_runlist(d, s, &plan.runlists[1], &b, &res), -EIO);
    cr_assert_eq(res.state, ENG_ERT_ERROR);
    cr_assert_eq(res.failed_cmd, 0);
    cr_assert_eq(res.failed_layer, 21);

    /* Nothing stuck: the same sequence runs a good step. */
    eng_device_seq_truncate(d, s, 0);
    cr_assert_eq(run_plan(d, s, &plan, &b, &res), 0, "%s", res.message);
    eng_plan_deinit(&plan);
    eng_device_seq_end(d, s);
    eng_device_free(d);
    eng_pack_free(p);
}

/* ---- sim ------------------------------------------------------------------------- */

MCD_TEST(device, sim_limit_times_out_then_needs_reset)
{
    eng_pack *p = open_pack("deep");
    int nv = eng_pack_get_info(p)->hp.n_vocab;
    struct eng_device_opts o = {.n_threads = 1, .sim_runlist_limit = 36, .sim_timeout_ms = 40};
    struct eng_device *d = open_dev("sim", &o, p);
    eng_device_seq *s = begin(d, 64);
    float *logits = malloc((size_t)nv * sizeof *logits);
    struct eng_plan all, k21;
    plan_k(&all, 42, ENG_PLAN_ALL);
    plan_k(&k21, 42, 21);
    struct eng_batch b = {.tokens = prompt, .n_tokens = N_PROMPT, .logits = logits,
                          .phase = ENG_PHASE_PREFILL};
    struct eng_run_result res;

    cr_assert_eq(eng_device_run_runlist(d, s, &all.runlists[0], &b, &res), -EIO);
    cr_assert_eq(res.state, ENG_ERT_TIMEOUT, "%s", eng_ert_name(res.state));
    cr_assert_eq(res.failed_cmd, 37, "EMBED, LAYER 0..35 fit; LAYER 36 is command 37");
    cr_assert_eq(res.failed_layer, 36);
    cr_assert_geq(res.elapsed_us, 40000, "the hang lasts the timeout: %lld us",
                  (long long)res.elapsed_us);
    cr_assert(strstr(res.message, "36"), "%s", res.message);

    /* Until reset, nothing runs — not even a runlist within the limit. */
    cr_assert_eq(eng_device_run_runlist(d, s, &k21.runlists[0], &b, &res), -EIO);
    cr_assert_eq(res.state, ENG_ERT_ERROR);
    cr_assert(strstr(res.message, "needs reset"), "%s", res.message);

    char err[128] = "";
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "%s", err);
    eng_device_seq_truncate(d, s, 0);
    cr_assert_eq(run_plan(d, s, &k21, &b, &res), 0, "%s", res.message);

    /* The sim's logits are the cpu's. */
    struct eng_device_opts co = {.n_threads = 1};
    struct eng_device *cpu = open_dev("cpu", &co, p);
    eng_device_seq *cs = begin(cpu, 64);
    float *ref = malloc((size_t)nv * sizeof *ref);
    b.logits = ref;
    cr_assert_eq(run_plan(cpu, cs, &all, &b, &res), 0);
    cr_assert_eq(memcmp(ref, logits, (size_t)nv * sizeof *ref), 0);

    free(ref);
    free(logits);
    eng_device_seq_end(cpu, cs);
    eng_device_free(cpu);
    eng_plan_deinit(&all);
    eng_plan_deinit(&k21);
    eng_device_seq_end(d, s);
    eng_device_free(d);
    eng_pack_free(p);
}

static void *set_later(void *arg)
{
    usleep(50 * 1000);
    atomic_store((atomic_bool *)arg, true);
    return NULL;
}

MCD_TEST(device, sim_hang_ends_early_on_cancel)
{
    eng_pack *p = open_pack("deep");
    struct eng_device_opts o = {.n_threads = 1, .sim_runlist_limit = 36,
                                .sim_timeout_ms = 20000};
    struct eng_device *d = open_dev("sim", &o, p);
    eng_device_seq *s = begin(d, 64);
    struct eng_plan all;
    plan_k(&all, 42, ENG_PLAN_ALL);
    atomic_bool cancel = false;
    struct eng_batch b = {.tokens = prompt, .n_tokens = 1, .phase = ENG_PHASE_DECODE,
                          .cancel = &cancel};
    pthread_t t;
    pthread_create(&t, NULL, set_later, &cancel);
    struct eng_run_result res;
    int64_t t0 = now_ms();
    cr_assert_eq(eng_device_run_runlist(d, s, &all.runlists[0], &b, &res), -EIO);
    int64_t ms = now_ms() - t0;
    pthread_join(t, NULL);
    cr_log_info("a 20 s hang cancelled after 50 ms ended after %lld ms", (long long)ms);
    printf("sim hang: cancel after 50 ms -> run ended after %lld ms\n", (long long)ms);
    cr_assert_eq(res.state, ENG_ERT_ABORT, "%s", eng_ert_name(res.state));
    cr_assert_lt(ms, 15000); /* well under the 20 s hang: cut short, however loaded the machine */
    eng_plan_deinit(&all);
    eng_device_seq_end(d, s);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(device, sim_faults_fail_at_the_named_command)
{
    eng_pack *p = open_pack("deep");
    struct eng_fault_list faults = {0};
    char err[512] = "";
    cr_assert_eq(eng_fault_list_parse(&faults,
                                      "phase=decode,token=1,layer=30,state=ABORT;"
                                      "phase=prefill,layer=head,state=SKCRASHED",
                                      err, sizeof err),
                 0, "%s", err);
    struct eng_device_opts o = {.n_threads = 1, .faults = &faults};
    struct eng_device *d = open_dev("sim", &o, p);
    eng_fault_list_clear(&faults);   /* the device has its own copy */
    eng_device_seq *s = begin(d, 64);
    struct eng_plan plan;
    plan_k(&plan, 42, 21);   /* runlists: [embed, 0..20], [21..41], [head] */
    struct eng_batch b = {.tokens = prompt, .n_tokens = N_PROMPT, .phase = ENG_PHASE_PREFILL};
    struct eng_run_result res;

    cr_assert_eq(run_plan(d, s, &plan, &b, &res), -EIO);
    cr_assert_eq(res.state, ENG_ERT_SKCRASHED);
    cr_assert_eq(res.failed_cmd, 0, "the head runlist's only command");
    cr_assert_eq(res.failed_layer, -1);
    cr_assert(strstr(res.message, "SKCRASHED") || strstr(res.message, "skcrashed") ||
                  strstr(res.message, "state="),
              "%s", res.message);
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0);
    eng_device_seq_truncate(d, s, 0);
    cr_assert_eq(run_plan(d, s, &plan, &b, &res), 0, "once: spent: %s", res.message);

    const int32_t next[2] = {11, 222};
    for (int step = 0; step < 2; step++) {
        b = (struct eng_batch){.tokens = &next[step], .n_tokens = 1,
                               .phase = ENG_PHASE_DECODE, .token_index = step};
        int rc = run_plan(d, s, &plan, &b, &res);
        if (step == 0) {
            cr_assert_eq(rc, 0, "%s", res.message);
            continue;
        }
        cr_assert_eq(rc, -EIO);
        cr_assert_eq(res.state, ENG_ERT_ABORT);
        cr_assert_eq(res.failed_cmd, 9, "layer 30 is command 9 of runlist [21..41]");
        cr_assert_eq(res.failed_layer, 30);
    }
    eng_plan_deinit(&plan);
    eng_device_seq_end(d, s);
    eng_device_free(d);
    eng_pack_free(p);
}

/* reset=N: the first N resets after the fault fail and the device stays failed
 * (nothing runs); the one after succeeds. reset=fail is N = 1, per firing. */
MCD_TEST(device, sim_injected_reset_failures)
{
    eng_pack *p = open_pack("deep");
    struct eng_fault_list faults = {0};
    char err[512] = "";
    cr_assert_eq(eng_fault_list_parse(&faults,
                                      "phase=prefill,layer=0,state=TIMEOUT,reset=2;"
                                      "phase=decode,state=ERROR,reset=fail,every",
                                      err, sizeof err),
                 0, "%s", err);
    struct eng_device_opts o = {.n_threads = 1, .faults = &faults};
    struct eng_device *d = open_dev("sim", &o, p);
    eng_fault_list_clear(&faults);
    eng_device_seq *s = begin(d, 64);
    struct eng_plan plan;
    plan_k(&plan, 42, 21);
    struct eng_batch b = {.tokens = prompt, .n_tokens = N_PROMPT, .phase = ENG_PHASE_PREFILL};
    struct eng_run_result res;

    cr_assert_eq(run_plan(d, s, &plan, &b, &res), -EIO);
    cr_assert_eq(res.state, ENG_ERT_TIMEOUT);
    for (int i = 0; i < 2; i++) {
        err[0] = '\0';
        cr_assert_eq(eng_device_reset(d, err, sizeof err), -EIO, "reset %d must fail", i);
        cr_assert(strstr(err, "injected reset failure"), "%s", err);
        /* Still failed: nothing runs, not even a runlist no fault matches. */
        cr_assert_eq(eng_device_run_runlist(d, s, &plan.runlists[1], &b, &res), -EIO);
        cr_assert_eq(res.state, ENG_ERT_ERROR);
        cr_assert(strstr(res.message, "needs reset"), "%s", res.message);
    }
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "the third reset succeeds: %s", err);
    eng_device_seq_truncate(d, s, 0);
    cr_assert_eq(run_plan(d, s, &plan, &b, &res), 0, "once: spent: %s", res.message);

    /* reset=fail with every: each firing fails one reset, the next one succeeds. */
    const int32_t next = 11;
    b = (struct eng_batch){.tokens = &next, .n_tokens = 1, .phase = ENG_PHASE_DECODE};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(run_plan(d, s, &plan, &b, &res), -EIO);
        cr_assert_eq(res.state, ENG_ERT_ERROR);
        cr_assert(strstr(res.message, "injected fault"), "%s", res.message);
        cr_assert_eq(eng_device_reset(d, err, sizeof err), -EIO, "firing %d", i);
        cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "firing %d: %s", i, err);
        eng_device_seq_truncate(d, s, 0);
    }
    eng_plan_deinit(&plan);
    eng_device_seq_end(d, s);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(device, sim_fault_layer_checked_at_load)
{
    eng_pack *p = open_pack("deep");
    struct eng_fault_list faults = {0};
    char err[512] = "";
    cr_assert_eq(eng_fault_list_parse(&faults, "layer=50,state=ERROR", err, sizeof err), 0);
    struct eng_device_opts o = {.n_threads = 1, .faults = &faults};
    struct eng_device *d = NULL;
    cr_assert_eq(eng_device_open("sim", &o, &d, err, sizeof err), 0, "%s", err);
    eng_fault_list_clear(&faults);
    cr_assert_eq(eng_device_load_model(d, p, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "50"), "%s", err);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(device, sim_latency_per_command)
{
    eng_pack *p = open_pack("deep");
    struct eng_device_opts o = {.n_threads = 1, .sim_latency_us = 1000};
    struct eng_device *d = open_dev("sim", &o, p);
    eng_device_seq *s = begin(d, 64);
    struct eng_plan plan;
    plan_k(&plan, 42, 11);
    struct eng_batch b = {.tokens = prompt, .n_tokens = 1, .phase = ENG_PHASE_DECODE};
    struct eng_run_result res;
    int64_t t0 = now_ms();
    cr_assert_eq(run_plan(d, s, &plan, &b, &res), 0, "%s", res.message);
    int64_t ms = now_ms() - t0;
    cr_assert_geq(ms, 44, "44 commands at 1 ms each took %lld ms", (long long)ms);
    eng_plan_deinit(&plan);
    eng_device_seq_end(d, s);
    eng_device_free(d);
    eng_pack_free(p);
}
