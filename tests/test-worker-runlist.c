/* The worker (engine/worker/worker.h) on the `deep` pack (42 layers): runlists,
 * device faults and replay.
 *
 *   - sim with a runlist limit of 36: K=all ends in the structured TIMEOUT error;
 *     auto halves K to 21 and its greedy tokens equal the cpu device's; K=21 runs
 *     without a fault; the K that worked is written to the state file and a new
 *     worker starts from it;
 *   - every ERT state injected in prefill and in decode at the first, a middle and
 *     the last layer: the right error (fixed K) or a replay (auto, hang-like
 *     states), and the next request succeeds;
 *   - a fault after tokens were emitted: the replay rebuilds the KV cache and the
 *     tokens still equal the cpu's;
 *   - a reset that fails (fault spec reset=fail / reset=N): the request ends in the
 *     non-retryable device error, the next request resets first and runs, or is
 *     refused with the same error while the device stays down.
 *
 * Packs: generated with minicpmd-pack gen (MINICPMD_PACK) into MINICPMD_TEST_WORK. */
#include "engine/worker/worker.h"
#include "tests/check.h"
#include "tests/worker-fx.h"
#include "util/defaults.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the 42-layer runlist that times out ----------------------------------------------- */

MCD_TEST(worker, all_layers_time_out_with_structured_error)
{
    struct setup s = {.device = "sim", .limit = 36, .timeout_ms = 30, .kmode = ENG_KMODE_ALL};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 8});
    cr_assert_eq(r->kind, ENG_EVENT_ERROR);
    const struct eng_error_event *e = &r->error;
    cr_assert_eq(e->code, -EIO);
    cr_assert(e->retryable, "the sim recovers after a reset: 503");
    cr_assert(e->has_device_error);
    const struct eng_device_error *d = &e->device;
    cr_assert_eq(d->state, ENG_ERT_TIMEOUT);
    cr_assert_eq(d->phase, ENG_PHASE_PREFILL, "the first 42-layer runlist is the prompt's");
    cr_assert_eq(d->chunk_index, 0);
    cr_assert_eq(d->chunk_count, 2, "42 layers + the head runlist");
    cr_assert_eq(d->layer_begin, 0);
    cr_assert_eq(d->layer_end, 42);
    cr_assert_eq(d->failed_layer, 36, "the first layer over the limit");
    cr_assert_eq(d->token_pos, 0);
    cr_assert_eq(d->n_tokens, 4);
    cr_assert_eq(d->prefill_chunk_index, 0);
    cr_assert_eq(d->prefill_chunk_count, 3, "10 prompt tokens in chunks of 4");
    cr_assert_geq(d->elapsed_ms, 30.0);
    cr_assert_str_eq(d->device, "sim");
    cr_assert_eq(d->attempts, 1, "ALL never replays");
    cr_assert(strstr(e->message, "ERT_CMD_STATE_TIMEOUT"), "%s", e->message);
    cr_assert_eq(e->timings.runlists_by_state[ENG_ERT_TIMEOUT], 1);
    cr_assert_eq(e->completion_tokens, 0);
    cr_log_info("%s", e->message);

    /* The worker keeps serving (and, in ALL mode, keeps failing the same way). */
    struct rec *r2 = run(f, &(struct gen_args){.max_tokens = 8});
    cr_assert_eq(r2->kind, ENG_EVENT_ERROR);
    cr_assert_eq(r2->error.device.state, ENG_ERT_TIMEOUT);

    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.failed, 2);
    cr_assert_eq(st.device_resets, 2);
    cr_assert_eq(st.runlists_by_state[ENG_ERT_TIMEOUT], 2);
    cr_assert_eq(st.current_k, 42);
    cr_assert_eq(st.queue_depth, 0);
    /* busy drops just after the final event, when the worker let go of the request */
    st = idle_stats(f);
    cr_assert_eq(n_bad_events, 0);
    rec_free(r);
    rec_free(r2);
    fx_free(f);
}

MCD_TEST(worker, auto_halves_k_and_matches_cpu)
{
    struct rec *ref = cpu_reference(12);

    struct setup s = {.device = "sim", .limit = 36, .timeout_ms = 30, .kmode = ENG_KMODE_AUTO};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 12});
    assert_done(r, "auto");
    assert_same_tokens(ref, r, "auto on sim vs cpu");
    cr_assert_eq(r->done.timings.k, 21);
    cr_assert_eq(r->done.timings.attempts, 2);
    cr_assert_eq(r->done.timings.runlists_by_state[ENG_ERT_TIMEOUT], 1);
    cr_assert_eq(total_runlists(&r->done.timings), r->done.timings.runlists);
    cr_assert_gt(r->done.timings.prompt_tps, 0);
    cr_assert_gt(r->done.timings.decode_tps, 0);
    cr_assert_eq(r->done.prompt_tokens, N_PROMPT);
    cr_assert_eq(r->done.completion_tokens, ref->done.completion_tokens);
    cr_assert_geq(f->n_logs_warn, 1, "the K change is logged");

    /* K stays 21: the next request runs without a fault. */
    struct rec *r2 = run(f, &(struct gen_args){.max_tokens = 12});
    assert_same_tokens(ref, r2, "second request");
    cr_assert_eq(r2->done.timings.attempts, 1);
    cr_assert_eq(r2->done.timings.runlists_by_state[ENG_ERT_TIMEOUT], 0);

    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.current_k, 21);
    cr_assert_eq(st.k_halvings, 1);
    cr_assert_eq(st.device_resets, 1);
    cr_assert_eq(st.runlists_by_state[ENG_ERT_TIMEOUT], 1);
    cr_assert_eq(st.requests, 2);
    cr_assert_eq(st.tokens_in, 2 * N_PROMPT);
    cr_assert_eq(st.tokens_out, (uint64_t)(r->done.completion_tokens + r2->done.completion_tokens));
    rec_free(ref);
    rec_free(r);
    rec_free(r2);
    fx_free(f);
}

MCD_TEST(worker, fixed_21_runs_without_a_fault)
{
    struct rec *ref = cpu_reference(12);
    struct setup s = {.device = "sim", .limit = 36, .timeout_ms = 30, .kmode = ENG_KMODE_FIXED,
                      .k = 21};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 12});
    assert_done(r, "K=21");
    assert_same_tokens(ref, r, "K=21 on sim vs cpu");
    const struct eng_gen_timings *t = &r->done.timings;
    cr_assert_eq(t->runlists_by_state[ENG_ERT_COMPLETED], t->runlists, "every runlist completed");
    /* 3 prompt chunks + (tokens - 1) decode steps, 3 runlists each. */
    cr_assert_eq(t->runlists, 3 * (3 + r->done.completion_tokens - 1));
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.failed, 0);
    cr_assert_eq(st.device_resets, 0);
    rec_free(ref);
    rec_free(r);
    fx_free(f);
}

MCD_TEST(worker, state_file_written_and_reused)
{
    char dir[2300];
    snprintf(dir, sizeof dir, "%s/state-%d", getenv("MINICPMD_TEST_WORK"), (int)getpid());
    char path[2400];
    cr_assert_eq(eng_kstate_path(dir, path, sizeof path), 0);
    unlink(path);

    struct setup s = {.device = "sim", .limit = 36, .timeout_ms = 30, .kmode = ENG_KMODE_AUTO,
                      .state_dir = dir};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 4});
    assert_done(r, "first run");
    cr_assert_eq(r->done.timings.attempts, 2);
    fx_free(f);

    int k = 0;
    char err[256] = "";
    cr_assert_eq(eng_kstate_load(path, "deep-7", "sim", &k, err, sizeof err), 1, "%s", err);
    cr_assert_eq(k, 21);

    f = fx_new(&s);
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.current_k, 21, "the new worker starts from the remembered K");
    struct rec *r2 = run(f, &(struct gen_args){.max_tokens = 4});
    assert_done(r2, "second run");
    cr_assert_eq(r2->done.timings.attempts, 1);
    cr_assert_eq(r2->done.timings.runlists_by_state[ENG_ERT_TIMEOUT], 0);
    fx_free(f);

    unlink(path);
    rmdir(dir);
    rec_free(r);
    rec_free(r2);
}

/* ---- every state, everywhere -------------------------------------------------------- */

static void fault_case(enum eng_ert_state state, enum eng_phase phase, int layer,
                       enum eng_kmode mode)
{
    char spec[128];
    snprintf(spec, sizeof spec, "phase=%s,layer=%d,state=%s", eng_phase_name(phase), layer,
             eng_ert_name(state));
    struct setup s = {.device = "sim", .faults = spec, .kmode = mode, .k = 21};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 3});
    bool replays = mode == ENG_KMODE_AUTO && eng_kpolicy_adapts(state);
    if (replays) {
        assert_done(r, spec);
        cr_assert_eq(r->done.timings.attempts, 2, "%s", spec);
        cr_assert_eq(r->done.timings.runlists_by_state[state], 1, "%s", spec);
    } else {
        cr_assert_eq(r->kind, ENG_EVENT_ERROR, "%s: expected ERROR", spec);
        const struct eng_device_error *d = &r->error.device;
        cr_assert_eq(r->error.code, -EIO, "%s", spec);
        cr_assert(r->error.retryable, "%s", spec);
        cr_assert_eq(d->state, state, "%s: got %s", spec, eng_ert_name(d->state));
        cr_assert_eq(d->phase, phase, "%s", spec);
        cr_assert_eq(d->failed_layer, layer, "%s", spec);
        int k = mode == ENG_KMODE_AUTO ? 42 : 21;
        cr_assert_eq(d->chunk_index, layer / k, "%s", spec);
        cr_assert_eq(d->layer_begin, layer / k * k, "%s", spec);
        cr_assert_eq(d->attempts, 1, "%s", spec);
        cr_assert_str_eq(d->device, "sim");
        if (phase == ENG_PHASE_PREFILL) {
            cr_assert_eq(d->token_pos, 0, "%s", spec);
            cr_assert_eq(d->prefill_chunk_count, 3, "%s", spec);
            cr_assert_eq(r->error.completion_tokens, 0);
        } else {
            cr_assert_eq(d->token_pos, N_PROMPT, "%s: decode step 0", spec);
            cr_assert_eq(d->n_tokens, 1);
            cr_assert_eq(d->prefill_chunk_index, -1);
            cr_assert_eq(r->error.completion_tokens, 1, "the first token was out");
        }
    }
    /* The worker is free and the fault was `once`: the next request succeeds. */
    struct rec *r2 = run(f, &(struct gen_args){.max_tokens = 3});
    assert_done(r2, spec);
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.device_resets, 1, "%s", spec);
    cr_assert_eq(st.runlists_by_state[state], 1, "%s", spec);
    rec_free(r);
    rec_free(r2);
    fx_free(f);
}

static const enum eng_phase phases[] = {ENG_PHASE_PREFILL, ENG_PHASE_DECODE};
static const int layers[] = {0, 21, 41};   /* first, middle, last */

MCD_TEST(worker, every_state_fixed_k_is_a_structured_error)
{
    for (int st = ENG_ERT_FIRST; st <= ENG_ERT_LAST; st++) {
        if (st == ENG_ERT_COMPLETED)
            continue;
        for (size_t p = 0; p < 2; p++)
            for (size_t l = 0; l < 3; l++)
                fault_case((enum eng_ert_state)st, phases[p], layers[l], ENG_KMODE_FIXED);
    }
    cr_assert_eq(n_bad_events, 0);
}

MCD_TEST(worker, every_state_auto_replays_or_fails)
{
    for (int st = ENG_ERT_FIRST; st <= ENG_ERT_LAST; st++) {
        if (st == ENG_ERT_COMPLETED)
            continue;
        for (size_t p = 0; p < 2; p++)
            for (size_t l = 0; l < 3; l++)
                fault_case((enum eng_ert_state)st, phases[p], layers[l], ENG_KMODE_AUTO);
    }
    cr_assert_eq(n_bad_events, 0);
}

/* A fault after tokens were emitted: the prompt and the emitted tokens are fed
 * again and the output is still the cpu's, token for token. */
MCD_TEST(worker, replay_after_emitted_tokens_matches_cpu)
{
    struct rec *ref = cpu_reference(12);
    const char *specs[] = {
        "phase=decode,token=4,layer=30,state=TIMEOUT",             /* mid-decode */
        "phase=decode,token=2,layer=head,state=ABORT;phase=decode,token=5,state=NEW",
        "phase=prefill,token=5,layer=3,state=NORESPONSE",          /* a middle prompt chunk */
    };
    const int attempts[] = {2, 3, 2};
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        struct setup s = {.device = "sim", .faults = specs[i], .kmode = ENG_KMODE_AUTO};
        struct fx *f = fx_new(&s);
        struct rec *r = run(f, &(struct gen_args){.max_tokens = 12});
        assert_done(r, specs[i]);
        assert_same_tokens(ref, r, specs[i]);
        cr_assert_eq(r->done.timings.attempts, attempts[i], "%s", specs[i]);
        rec_free(r);
        fx_free(f);
    }
    rec_free(ref);
}

/* A state that does not adapt in auto mode after tokens were out: ERROR, with the
 * tokens so far counted. */
MCD_TEST(worker, non_adapting_state_mid_decode)
{
    struct setup s = {.device = "sim", .faults = "phase=decode,token=3,state=SKERROR",
                      .kmode = ENG_KMODE_AUTO};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 12});
    if (r->kind == ENG_EVENT_DONE) {
        cr_assert_lt(r->done.completion_tokens, 4, "ended by a stop id before step 3");
    } else {
        cr_assert_eq(r->error.device.state, ENG_ERT_SKERROR);
        cr_assert_eq(r->error.device.token_pos, N_PROMPT + 3);
        cr_assert_eq(r->error.completion_tokens, 4);
        cr_assert_eq(r->n_ids, 4);
    }
    rec_free(r);
    fx_free(f);
}

/* ---- a device that could not be reset --------------------------------------------------- */

/* The reset after a fault fails (reset=fail): the request ends at once in the
 * non-retryable device error (HTTP 500) — even in auto mode, which would otherwise
 * replay a TIMEOUT with a smaller K — and the next request resets the device
 * first, then runs. */
MCD_TEST(worker, failed_reset_ends_request_and_next_one_resets_first)
{
    struct rec *ref = cpu_reference(12);
    struct setup s = {.device = "sim", .faults = "phase=prefill,layer=30,state=TIMEOUT,reset=fail",
                      .kmode = ENG_KMODE_AUTO};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 12});
    cr_assert_eq(r->kind, ENG_EVENT_ERROR, "expected ERROR, got DONE");
    const struct eng_error_event *e = &r->error;
    cr_assert_eq(e->code, -EIO);
    cr_assert_not(e->retryable, "the device was not brought back: 500, no Retry-After");
    cr_assert(e->has_device_error);
    cr_assert_eq(e->device.state, ENG_ERT_TIMEOUT);
    cr_assert_eq(e->device.phase, ENG_PHASE_PREFILL);
    cr_assert_eq(e->device.failed_layer, 30);
    cr_assert_eq(e->device.attempts, 1, "no replay on a device that is down");
    cr_assert_str_eq(e->device.device, "sim");
    cr_assert(strstr(e->message, "ERT_CMD_STATE_TIMEOUT"), "%s", e->message);
    cr_assert_eq(e->timings.runlists_by_state[ENG_ERT_TIMEOUT], 1);
    cr_assert_eq(e->completion_tokens, 0);
    cr_assert_eq(r->n_ids, 0);
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.failed, 1);
    cr_assert_eq(st.device_resets, 0, "the reset failed");
    cr_assert_eq(st.k_halvings, 0, "the K policy is not asked when the device is down");
    cr_assert_eq(st.current_k, 42);

    /* The next request: the worker resets first (it works now), then runs the
     * request normally — the same tokens as the cpu device. */
    struct rec *r2 = run(f, &(struct gen_args){.max_tokens = 12});
    assert_done(r2, "after the failed reset");
    assert_same_tokens(ref, r2, "after the failed reset vs cpu");
    cr_assert_eq(r2->done.timings.attempts, 1);
    cr_assert_eq(r2->done.timings.runlists_by_state[ENG_ERT_TIMEOUT], 0);
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.device_resets, 1, "the reset before the second request");
    cr_assert_eq(st.failed, 1);
    cr_assert_eq(n_bad_events, 0);
    rec_free(ref);
    rec_free(r);
    rec_free(r2);
    fx_free(f);
}

/* The reset keeps failing (reset=2): the request after the failed one is refused
 * before it touches the device, with the same non-retryable device error (the
 * failure that left the device down); once a reset works, requests run again. */
MCD_TEST(worker, device_still_down_refuses_next_request)
{
    struct setup s = {.device = "sim", .faults = "phase=decode,token=0,state=ERROR,reset=2",
                      .kmode = ENG_KMODE_FIXED, .k = 21};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 3});
    cr_assert_eq(r->kind, ENG_EVENT_ERROR, "expected ERROR, got DONE");
    cr_assert_eq(r->error.code, -EIO);
    cr_assert_not(r->error.retryable);
    cr_assert(r->error.has_device_error);
    cr_assert_eq(r->error.device.state, ENG_ERT_ERROR);
    cr_assert_eq(r->error.device.phase, ENG_PHASE_DECODE);
    cr_assert_eq(r->error.device.token_pos, N_PROMPT, "decode step 0");
    cr_assert_eq(r->error.completion_tokens, 1, "the first token was out");
    cr_assert_eq(r->n_ids, 1);

    /* The second reset fails too: refused, nothing submitted to the device. */
    struct rec *r2 = run(f, &(struct gen_args){.max_tokens = 3});
    cr_assert_eq(r2->kind, ENG_EVENT_ERROR, "expected ERROR, got DONE");
    const struct eng_error_event *e = &r2->error;
    cr_assert_eq(e->code, -EIO);
    cr_assert_not(e->retryable, "the device is still down: 500, no Retry-After");
    cr_assert(e->has_device_error, "a device error (HTTP device_error), not an internal "
                                   "error: %s", e->message);
    cr_assert_eq(e->device.state, ENG_ERT_ERROR, "the failure that left the device down");
    cr_assert_str_eq(e->device.device, "sim");
    cr_assert(strstr(e->message, "did not recover"), "%s", e->message);
    cr_assert_eq(e->timings.runlists, 0, "nothing ran on a device that is down");
    cr_assert_eq(e->completion_tokens, 0);
    cr_assert_eq(r2->n_ids, 0);
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.failed, 2);
    cr_assert_eq(st.device_resets, 0);
    cr_assert_eq(st.tokens_in, (uint64_t)N_PROMPT, "the refused prompt is not counted");

    /* The third reset works: serving again. */
    struct rec *r3 = run(f, &(struct gen_args){.max_tokens = 3});
    assert_done(r3, "after the device came back");
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.failed, 2);
    cr_assert_eq(st.device_resets, 1);
    cr_assert_eq(n_bad_events, 0);
    rec_free(r);
    rec_free(r2);
    rec_free(r3);
    fx_free(f);
}

/* ---- K recovers --------------------------------------------------- */

/* One transient hang used to halve K for the rest of the daemon's life. Now, after
 * UT_RUNLIST_PROBE_TOKENS good tokens at K 21, a request probes K 42 again; with
 * the hang gone it runs there, and 42 is what is remembered. */
MCD_TEST(worker, auto_k_recovers_after_a_transient_hang)
{
    struct setup s = {.device = "sim", .timeout_ms = 30, .kmode = ENG_KMODE_AUTO,
                      .faults = "phase=decode,token=1,state=TIMEOUT"};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 4});
    assert_done(r, "the hang is replayed at K 21");
    cr_assert_eq(r->done.timings.k, 21);
    cr_assert_eq(r->done.timings.attempts, 2);
    rec_free(r);

    struct eng_worker_stats st = idle_stats(f);
    cr_assert_eq(st.current_k, 21);
    uint64_t tokens = 0;
    int n = 0;
    for (; n < 64 && st.k_probes == 0; n++) {
        r = run(f, &(struct gen_args){.max_tokens = 100});
        assert_done(r, "a request at K 21");
        cr_assert_eq(r->done.timings.k, 21, "request %d ran at K %d", n, r->done.timings.k);
        tokens += (uint64_t)(r->done.prompt_tokens + r->done.completion_tokens);
        rec_free(r);
        st = idle_stats(f);
    }
    cr_assert_eq(st.k_probes, 1, "no probe after %d requests, %llu tokens", n,
                 (unsigned long long)tokens);
    cr_assert_geq(tokens, UT_RUNLIST_PROBE_TOKENS - N_PROMPT - 1);
    cr_assert_eq(st.current_k, 42, "the probe's K");
    r = run(f, &(struct gen_args){.max_tokens = 8});
    assert_done(r, "the probe");
    cr_assert_eq(r->done.timings.k, 42);
    cr_assert_eq(r->done.timings.attempts, 1);
    rec_free(r);
    st = idle_stats(f);
    cr_assert_eq(st.current_k, 42);
    cr_assert_eq(st.k_halvings, 1);
    fx_free(f);
}

/* The hang is still there: the probe is replayed at K 21 (the request does not
 * fail), and the next probe waits twice as long. */
MCD_TEST(worker, auto_k_probe_that_hangs_is_replayed)
{
    struct setup s = {.device = "sim", .limit = 36, .timeout_ms = 30, .kmode = ENG_KMODE_AUTO};
    struct fx *f = fx_new(&s);
    struct eng_worker_stats st;
    uint64_t probes = 0;
    int n = 0;
    for (; n < 64 && probes < 2; n++) {
        struct rec *r = run(f, &(struct gen_args){.max_tokens = 100});
        assert_done(r, "every request completes, probes included");
        cr_assert_eq(r->done.timings.k, 21);
        rec_free(r);
        st = idle_stats(f);
        probes = st.k_probes;
    }
    cr_assert_eq(probes, 2, "after %d requests", n);
    /* each probe hung once at K 42 and went back to 21 */
    st = idle_stats(f);
    cr_assert_eq(st.current_k, 42, "the second probe is pending");
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 4});
    assert_done(r, "the pending probe is replayed");
    cr_assert_eq(r->done.timings.k, 21);
    cr_assert_eq(r->done.timings.attempts, 2);
    rec_free(r);
    st = idle_stats(f);
    cr_assert_eq(st.k_halvings, 3, "the first hang and two probes");
    fx_free(f);
}
