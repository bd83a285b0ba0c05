/* The worker (engine/worker/worker.h) on the `deep` pack (42 layers), driven the way the
 * server drives it: requests in, events out through the callback.
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
 *     refused with the same error while the device stays down;
 *   - the queue: N+1 submissions with queue size N while busy -> exactly one
 *     -EBUSY; FIFO order; cancel while queued, mid-decode and during a hang, and
 *     shutdown with requests queued: each gets its one final event, measured;
 *   - stop ids, stop strings, max_tokens, a full context, logprobs, bad requests.
 *
 * Packs: generated with minicpmd-pack gen (MINICPMD_PACK) into MINICPMD_TEST_WORK. */
#include "engine/worker/worker.h"
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

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- events: one record per request ------------------------------------------------ */

#define MAX_TOK 256

struct rec {
    int32_t ids[MAX_TOK];
    char *pieces[MAX_TOK];       /* each token's text */
    float logprob[MAX_TOK];
    int32_t top0[MAX_TOK];       /* the most likely id, with logprobs */
    int n_top[MAX_TOK];
    int n_ids;
    char text[8192];             /* all pieces + the DONE text */
    size_t text_len;
    bool final;
    enum eng_event_kind kind;
    struct eng_done_event done;  /* .text not kept */
    struct eng_error_event error;
    int64_t t_final_us;
    int order;                   /* 1, 2, … in the order final events came */
};

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;
static int n_finals;
static int n_bad_events;         /* events after a final one, or for no record */

static void append(struct rec *r, const char *s, size_t n)
{
    if (r->text_len + n < sizeof r->text) {
        memcpy(r->text + r->text_len, s, n);
        r->text_len += n;
        r->text[r->text_len] = '\0';
    }
}

static void on_event(void *ctx, const struct eng_event *ev)
{
    (void)ctx;
    struct rec *r = ev->user;
    pthread_mutex_lock(&ev_mu);
    if (!r || r->final || ev->user != eng_gen_req_user(ev->req)) {
        n_bad_events++;
    } else if (ev->kind == ENG_EVENT_TOKEN) {
        if (r->n_ids < MAX_TOK) {
            int i = r->n_ids++;
            r->ids[i] = ev->token.id;
            r->pieces[i] = strndup(ev->token.text, ev->token.text_len);
            r->logprob[i] = ev->token.has_logprob ? ev->token.logprob : NAN;
            r->n_top[i] = ev->token.n_top;
            r->top0[i] = ev->token.n_top ? ev->token.top[0].id : -1;
            if (ev->token.index != i)
                n_bad_events++;
        }
        append(r, ev->token.text, ev->token.text_len);
    } else {
        r->final = true;
        r->kind = ev->kind;
        if (ev->kind == ENG_EVENT_DONE) {
            r->done = ev->done;
            append(r, ev->done.text, ev->done.text_len);
            r->done.text = NULL;
        } else {
            r->error = ev->error;
        }
        r->t_final_us = now_us();
        r->order = ++n_finals;
    }
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mu);
}

static void rec_free(struct rec *r)
{
    for (int i = 0; i < r->n_ids && i < MAX_TOK; i++)
        free(r->pieces[i]);
    free(r);
}

static struct rec *rec_new(void)
{
    struct rec *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    return r;
}

/* Wait until `r` got its final event (or n_ids >= min_tokens when > 0). */
static bool wait_for(struct rec *r, int min_tokens, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&ev_mu);
    int rc = 0;
    while (rc == 0 && !(min_tokens > 0 ? r->n_ids >= min_tokens || r->final : r->final))
        rc = pthread_cond_timedwait(&ev_cv, &ev_mu, &dl);
    bool ok = min_tokens > 0 ? r->n_ids >= min_tokens || r->final : r->final;
    pthread_mutex_unlock(&ev_mu);
    return ok;
}

static void wait_final(struct rec *r)
{
    cr_assert(wait_for(r, 0, 30000), "no final event within 30 s");
}

/* ---- a worker on a device ------------------------------------------------------------ */

struct fx {
    eng_pack *pack;
    eng_tokenizer *tok;
    struct eng_device *dev;
    eng_worker *w;
    int32_t stop_ids[8];
    int n_stop_ids;
    int n_logs_warn;
};

struct setup {
    const char *device;          /* "cpu" | "sim" */
    int limit, timeout_ms, latency_us;
    const char *faults;          /* spec or NULL */
    enum eng_kmode kmode;
    int k;
    int queue_size;              /* 0: 8 */
    int prefill_chunk;           /* 0: 4 */
    int n_ctx;                   /* 0: 128 */
    const char *state_dir;
    bool prompt_cache;
};

static void on_log(void *ctx, enum eng_log_level level, const char *msg)
{
    struct fx *f = ctx;
    if (level <= ENG_LOG_WARN)
        __atomic_add_fetch(&f->n_logs_warn, 1, __ATOMIC_RELAXED);
    if (getenv("MCD_TEST_VERBOSE"))
        fprintf(stderr, "[worker %d] %s\n", (int)level, msg);
}

static struct fx *fx_new(const struct setup *s)
{
    struct fx *f = calloc(1, sizeof *f);
    char err[512] = "", path[2200];
    const char *dir = pack_dir("deep");
    cr_assert_eq(eng_pack_open(dir, &f->pack, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    eng_tokenizer_load(path, &f->tok, err, sizeof err);
    cr_assert_not_null(f->tok, "%s", err);
    f->n_stop_ids = eng_pack_stop_ids(f->pack, f->stop_ids, 8, err, sizeof err);
    cr_assert_gt(f->n_stop_ids, 0, "%s", err);

    struct eng_fault_list faults = {0};
    if (s->faults)
        cr_assert_eq(eng_fault_list_parse(&faults, s->faults, err, sizeof err), 0, "%s", err);
    struct eng_device_opts dopts = {
        .n_threads = 1,
        .sim_runlist_limit = s->limit,
        .sim_timeout_ms = s->timeout_ms,
        .sim_latency_us = s->latency_us,
        .faults = &faults,
    };
    cr_assert_eq(eng_device_open(s->device, &dopts, &f->dev, err, sizeof err), 0, "%s", err);
    eng_fault_list_clear(&faults);

    struct eng_worker_opts wopts = {
        .queue_size = s->queue_size ? s->queue_size : 8,
        .prefill_chunk = s->prefill_chunk ? s->prefill_chunk : 4,
        .n_ctx = s->n_ctx ? s->n_ctx : 128,
        .kmode = s->kmode,
        .fixed_k = s->k,
        .max_retries = -1,
        .state_dir = s->state_dir,
        .prompt_cache = s->prompt_cache,
        .model_id = "deep-7",
        .log = on_log,
        .log_ctx = f,
    };
    cr_assert_eq(eng_worker_new(f->dev, f->pack, f->tok, &wopts, on_event, NULL, &f->w, err,
                                sizeof err),
                 0, "%s", err);
    return f;
}

static void fx_free(struct fx *f)
{
    eng_worker_free(f->w);
    eng_device_free(f->dev);
    eng_tokenizer_free(f->tok);
    eng_pack_free(f->pack);
    free(f);
}

static const int32_t prompt[] = {0, 5, 17, 300, 42, 7, 99, 512, 3, 14};
#define N_PROMPT ((int)(sizeof prompt / sizeof *prompt))

struct gen_args {
    int max_tokens;
    const char *stop;            /* one stop string or NULL */
    const int32_t *stop_ids;     /* NULL: the pack's */
    int n_stop_ids;
    bool logprobs;
    int top_logprobs;
    const int32_t *prompt;       /* NULL: the default one */
    int n_prompt;
};

static eng_gen_req *make_req(struct fx *f, struct rec *r, const struct gen_args *a)
{
    struct eng_gen_params p = {
        .prompt = a->prompt ? a->prompt : prompt,
        .n_prompt = a->prompt ? a->n_prompt : N_PROMPT,
        .max_tokens = a->max_tokens,
        .stop_ids = a->stop_ids ? a->stop_ids : f->stop_ids,
        .n_stop_ids = a->stop_ids ? a->n_stop_ids : f->n_stop_ids,
        .stop = {a->stop},
        .n_stop = a->stop ? 1 : 0,
        .logprobs = a->logprobs,
        .top_logprobs = a->top_logprobs,
        .user = r,
    };
    eng_sampling_defaults(NULL, &p.sampling, NULL, 0);
    p.sampling.temperature = 0.0f;   /* greedy */
    eng_gen_req *q = NULL;
    char err[256] = "";
    cr_assert_eq(eng_gen_req_new(&p, &q, err, sizeof err), 0, "%s", err);
    return q;
}

/* Submit, drop the caller's reference (the worker keeps its own), return the rc. */
static int submit(struct fx *f, struct rec *r, const struct gen_args *a)
{
    eng_gen_req *q = make_req(f, r, a);
    int rc = eng_worker_submit(f->w, q);
    eng_gen_req_free(q);
    return rc;
}

/* Submit and wait for the final event. */
static struct rec *run(struct fx *f, const struct gen_args *a)
{
    struct rec *r = rec_new();
    cr_assert_eq(submit(f, r, a), 0);
    wait_final(r);
    return r;
}

static void assert_done(const struct rec *r, const char *what)
{
    cr_assert_eq(r->kind, ENG_EVENT_DONE, "%s: expected DONE, got ERROR: %s", what,
                 r->error.message);
    cr_assert_neq(r->done.finish, ENG_FINISH_CANCELLED, "%s", what);
}

/* The greedy tokens of the default prompt on the cpu device (K all). */
static struct rec *cpu_reference(int max_tokens)
{
    struct setup s = {.device = "cpu", .kmode = ENG_KMODE_ALL};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = max_tokens});
    assert_done(r, "cpu reference");
    cr_assert_gt(r->n_ids, 2, "the reference should generate a few tokens");
    fx_free(f);
    return r;
}

static void assert_same_tokens(const struct rec *a, const struct rec *b, const char *what)
{
    cr_assert_eq(a->n_ids, b->n_ids, "%s: %d vs %d tokens", what, a->n_ids, b->n_ids);
    for (int i = 0; i < a->n_ids; i++)
        cr_assert_eq(a->ids[i], b->ids[i], "%s: token %d: %d vs %d", what, i, a->ids[i],
                     b->ids[i]);
    cr_assert_eq(a->done.finish, b->done.finish, "%s", what);
    cr_assert_eq(a->text_len, b->text_len, "%s", what);
    cr_assert_eq(memcmp(a->text, b->text, a->text_len), 0, "%s", what);
}

static int total_runlists(const struct eng_gen_timings *t)
{
    int n = 0;
    for (int s = 0; s <= ENG_ERT_LAST; s++)
        n += t->runlists_by_state[s];
    return n;
}

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
    for (int i = 0; i < 1000 && st.busy; i++) {
        usleep(1000);
        eng_worker_get_stats(f->w, &st);
    }
    cr_assert_not(st.busy);
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

/* ---- the prompt cache ------------------------------------------------------------------ */

/* prompt + a's tokens + tail: the next turn of a conversation, as ids. */
static int extend(int32_t *out, const struct rec *a, const int32_t *tail, int n_tail)
{
    int n = 0;
    for (int i = 0; i < N_PROMPT; i++)
        out[n++] = prompt[i];
    for (int i = 0; i < a->n_ids; i++)
        out[n++] = a->ids[i];
    for (int i = 0; i < n_tail; i++)
        out[n++] = tail[i];
    return n;
}

/* The tokens a worker without the cache gives for `a` (a fresh one each time). */
static struct rec *cold(const struct gen_args *a)
{
    struct fx *f = fx_new(&(struct setup){.device = "cpu", .kmode = ENG_KMODE_ALL});
    struct rec *r = run(f, a);
    assert_done(r, "cold run");
    cr_assert_eq(r->done.cached_tokens, 0);
    fx_free(f);
    return r;
}

/* A conversation's next turn starts after what the KV cache already holds: the
 * previous prompt and every generated token but the last (never fed); the same
 * prompt again reuses all but its last position; a prompt that shares only a few
 * tokens reuses those. Each answer is the cold worker's, token for token (the
 * forward pass does not depend on where a prompt is cut). Prefill chunks of 4 put
 * every cut mid-chunk. */
MCD_TEST(worker, prompt_cache_reuses_prefix_and_matches_cold)
{
    static const int32_t tail[] = {77, 88, 123};
    int32_t next[N_PROMPT + MAX_TOK + 3], other[N_PROMPT];
    struct fx *f = fx_new(&(struct setup){.device = "cpu", .kmode = ENG_KMODE_ALL,
                                          .prompt_cache = true});
    struct rec *a = run(f, &(struct gen_args){.max_tokens = 9});
    struct rec *a0 = cold(&(struct gen_args){.max_tokens = 9});
    assert_done(a, "first turn");
    assert_same_tokens(a0, a, "first turn");
    cr_assert_eq(a->done.cached_tokens, 0, "nothing to reuse yet");
    cr_assert_gt(a->n_ids, 1);

    int n_next = extend(next, a, tail, 3);
    struct gen_args an = {.max_tokens = 9, .prompt = next, .n_prompt = n_next};
    struct rec *b = run(f, &an), *b0 = cold(&an);
    assert_done(b, "next turn");
    assert_same_tokens(b0, b, "next turn");
    cr_assert_eq(b->done.cached_tokens, N_PROMPT + a->n_ids - 1, "cached %d",
                 b->done.cached_tokens);
    cr_assert_eq(b->done.prompt_tokens, n_next);

    struct rec *c = run(f, &an);
    assert_same_tokens(b0, c, "the same prompt again");
    cr_assert_eq(c->done.cached_tokens, n_next - 1);

    /* Sharing 6 of 10 tokens, more than half: that slot, 6 reused. */
    memcpy(other, prompt, sizeof other);
    other[6] = 432;
    struct gen_args ao = {.max_tokens = 9, .prompt = other, .n_prompt = N_PROMPT};
    struct rec *d = run(f, &ao), *d0 = cold(&ao);
    assert_same_tokens(d0, d, "a prompt sharing 6 tokens");
    cr_assert_eq(d->done.cached_tokens, 6);

    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.tokens_cached, (uint64_t)(N_PROMPT + a->n_ids - 1 + n_next - 1 + 6));
    rec_free(a), rec_free(a0), rec_free(b), rec_free(b0), rec_free(c), rec_free(d), rec_free(d0);
    fx_free(f);
}

/* A device fault drops the KV cache: the replay runs the whole prompt from
 * position 0 (chunks cut as without the cache) and still gives the cold answer;
 * the request after it reuses what the replay rebuilt. */
MCD_TEST(worker, prompt_cache_after_a_replay)
{
    static const int32_t tail[] = {61, 62};
    int32_t next[N_PROMPT + MAX_TOK + 2];
    struct fx *f = fx_new(&(struct setup){.device = "sim", .kmode = ENG_KMODE_AUTO,
                                          .faults = "phase=decode,token=3,layer=30,state=TIMEOUT",
                                          .prompt_cache = true});
    struct rec *a = run(f, &(struct gen_args){.max_tokens = 2}); /* decode steps 0, 1 */
    assert_done(a, "first turn");
    int n_next = extend(next, a, tail, 2);
    struct gen_args an = {.max_tokens = 9, .prompt = next, .n_prompt = n_next};
    struct rec *b = run(f, &an), *b0 = cold(&an);
    assert_done(b, "the turn with a fault");
    if (b->n_ids > 4) /* the fault needs decode step 3 */
        cr_assert_eq(b->done.timings.attempts, 2, "the fault fired and was replayed");
    assert_same_tokens(b0, b, "after the replay");
    cr_assert_eq(b->done.cached_tokens, N_PROMPT + a->n_ids - 1);
    struct rec *c = run(f, &an);
    assert_same_tokens(b0, c, "the same prompt after the replay");
    cr_assert_eq(c->done.cached_tokens, n_next - 1);
    rec_free(a), rec_free(b), rec_free(b0), rec_free(c);
    fx_free(f);
}

/* A 3-token request on prompt p (no stop ids): how many positions it reused. */
static int run_cached(struct fx *f, const int32_t *p, int n)
{
    static const int32_t no_stop[] = {-1};
    struct rec *t = run(f, &(struct gen_args){.max_tokens = 3, .prompt = p, .n_prompt = n,
                                              .stop_ids = no_stop, .n_stop_ids = 1});
    assert_done(t, "an unrelated request");
    int cached = t->done.cached_tokens;
    rec_free(t);
    return cached;
}

/* Several slots (the cpu device keeps 4 sequences): unrelated requests between
 * the turns of a conversation (Open WebUI's title and tag requests) go to other
 * slots, so the next turn still finds its prefix; later distinct prompts evict
 * the least recently used slots, in turn. Prompts of 40 tokens that share their first 3
 * (a chat template's opening) are unrelated: 3 < 32 and < half. */
MCD_TEST(worker, prompt_cache_slots_keep_a_conversation)
{
    int32_t conv[40], other[6][40], next[40 + MAX_TOK + 2];
    for (int i = 0; i < 40; i++) {
        conv[i] = i < 3 ? 1 + i : (int32_t)((i * 37 + 11) % 1000);
        for (int k = 0; k < 6; k++)
            other[k][i] = i < 3 ? 1 + i : (int32_t)((i * 53 + 101 * (k + 1)) % 1000);
    }
    static const int32_t no_stop[] = {-1}; /* every request runs to its length */
    struct fx *f = fx_new(&(struct setup){.device = "cpu", .kmode = ENG_KMODE_ALL,
                                          .prompt_cache = true});
    struct rec *a = run(f, &(struct gen_args){.max_tokens = 6, .prompt = conv, .n_prompt = 40,
                                              .stop_ids = no_stop, .n_stop_ids = 1});
    assert_done(a, "turn 1");
    for (int k = 0; k < 2; k++) /* two "title/tag" requests */
        cr_assert_eq(run_cached(f, other[k], 40), 0, "unrelated request %d reused some", k);
    int n = 0;
    for (int i = 0; i < 40; i++)
        next[n++] = conv[i];
    for (int i = 0; i < a->n_ids; i++)
        next[n++] = a->ids[i];
    next[n++] = 5;
    next[n++] = 6;
    struct gen_args an = {.max_tokens = 6, .prompt = next, .n_prompt = n, .stop_ids = no_stop,
                          .n_stop_ids = 1};
    cr_assert_eq(a->n_ids, 6);
    struct rec *b = run(f, &an), *b0 = cold(&an);
    assert_same_tokens(b0, b, "turn 2 after unrelated requests");
    cr_assert_eq(b->done.cached_tokens, 40 + a->n_ids - 1, "turn 2 reused %d",
                 b->done.cached_tokens);

    /* Four more unrelated prompts: the empty slot, then the two least recently
     * used ones, then the conversation's. */
    for (int k = 2; k < 6; k++)
        run_cached(f, other[k], 40);
    struct rec *c = run(f, &an);
    assert_same_tokens(b0, c, "turn 2 again, after its slot was evicted");
    cr_assert_eq(c->done.cached_tokens, 3, "evicted: only the 3 opening tokens every prompt "
                 "here shares, from the slot it took; reused %d", c->done.cached_tokens);
    rec_free(a), rec_free(b), rec_free(b0), rec_free(c);
    fx_free(f);
}

/* Off (the worker default), nothing is reused. */
MCD_TEST(worker, prompt_cache_off)
{
    struct fx *f = fx_new(&(struct setup){.device = "cpu", .kmode = ENG_KMODE_ALL});
    struct rec *a = run(f, &(struct gen_args){.max_tokens = 4});
    struct rec *b = run(f, &(struct gen_args){.max_tokens = 4});
    assert_same_tokens(a, b, "the same prompt twice");
    cr_assert_eq(b->done.cached_tokens, 0);
    rec_free(a), rec_free(b);
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

/* ---- the queue ------------------------------------------------------------------------ */

MCD_TEST(worker, full_queue_fails_fast_and_order_is_fifo)
{
    enum { N = 3 };
    struct setup s = {.device = "sim", .latency_us = 200, .kmode = ENG_KMODE_ALL,
                      .queue_size = N};
    struct fx *f = fx_new(&s);
    struct rec *busy = rec_new();
    cr_assert_eq(submit(f, busy, &(struct gen_args){.max_tokens = 30, .n_stop_ids = 0,
                                                    .stop_ids = (int32_t[]){-1}}),
                 0);
    cr_assert(wait_for(busy, 1, 10000), "the first request is running");

    struct rec *q[N + 1];
    int n_busy = 0, n_ok = 0;
    for (int i = 0; i < N + 1; i++) {
        q[i] = rec_new();
        int rc = submit(f, q[i], &(struct gen_args){.max_tokens = 2});
        if (rc == -EBUSY)
            n_busy++;
        else if (rc == 0)
            n_ok++;
        else
            cr_assert_fail("submit: %d", rc);
    }
    cr_assert_eq(n_busy, 1, "exactly the overflow is refused");
    cr_assert_eq(n_ok, N);
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.rejected, 1);
    cr_assert(st.busy);
    cr_assert_eq(st.queue_depth, N);

    wait_final(busy);
    for (int i = 0; i < N; i++)
        wait_final(q[i]);
    cr_assert_not(q[N]->final, "a refused request gets no event");
    for (int i = 0; i < N; i++) {
        assert_done(q[i], "queued");
        cr_assert_eq(q[i]->order, busy->order + 1 + i, "FIFO: request %d ended %d-th", i,
                     q[i]->order);
        cr_assert_gt(q[i]->done.timings.queue_ms, 0);
    }
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.requests, N + 1);
    cr_assert_eq(st.queue_depth, 0);
    for (int i = 0; i < N + 1; i++)
        rec_free(q[i]);
    rec_free(busy);
    fx_free(f);
}

MCD_TEST(worker, cancel_queued_and_mid_decode)
{
    struct setup s = {.device = "sim", .latency_us = 300, .kmode = ENG_KMODE_FIXED, .k = 11};
    struct fx *f = fx_new(&s);
    struct rec *a = rec_new(), *b = rec_new(), *c = rec_new();
    const int32_t no_stop[] = {-1};
    struct gen_args long_run = {.max_tokens = 100, .stop_ids = no_stop, .n_stop_ids = 1};
    eng_gen_req *qa = make_req(f, a, &long_run);
    eng_gen_req *qb = make_req(f, b, &long_run);
    cr_assert_eq(eng_worker_submit(f->w, qa), 0);
    cr_assert_eq(eng_worker_submit(f->w, qb), 0);
    cr_assert_eq(eng_worker_submit(f->w, qb), -EINVAL, "a request is submitted once");
    cr_assert_eq(submit(f, c, &(struct gen_args){.max_tokens = 2}), 0);
    cr_assert_lt(eng_gen_req_seq_no(qa), eng_gen_req_seq_no(qb));
    cr_assert(wait_for(a, 2, 10000), "a is decoding");

    /* b waits behind a: cancelled in the queue, it ends within a runlist of a. */
    int64_t t0 = now_us();
    eng_gen_req_cancel(qb);
    eng_gen_req_free(qb);   /* the client went away: drop our side at once */
    wait_final(b);
    double queued_ms = (double)(b->t_final_us - t0) / 1e3;
    cr_assert_eq(b->kind, ENG_EVENT_DONE);
    cr_assert_eq(b->done.finish, ENG_FINISH_CANCELLED);
    cr_assert_eq(b->n_ids, 0);
    cr_assert_not(a->final, "a goes on");

    /* a mid-decode. */
    int n_before = a->n_ids;
    t0 = now_us();
    eng_gen_req_cancel(qa);
    wait_final(a);
    double running_ms = (double)(a->t_final_us - t0) / 1e3;
    cr_assert_eq(a->kind, ENG_EVENT_DONE);
    cr_assert_eq(a->done.finish, ENG_FINISH_CANCELLED);
    cr_assert_geq(a->done.completion_tokens, n_before);
    cr_assert_lt(a->done.completion_tokens, 100);
    printf("cancel: queued request ended after %.1f ms, running one after %.1f ms "
           "(a runlist of 11 layers at 300 us per command is ~4 ms)\n",
           queued_ms, running_ms);
    cr_assert_lt(queued_ms, 5000);
    cr_assert_lt(running_ms, 5000);
    eng_gen_req_free(qa);

    /* c, queued behind both, still runs. */
    wait_final(c);
    assert_done(c, "after the cancels");
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.cancelled, 2);
    cr_assert_eq(n_bad_events, 0);
    rec_free(a);
    rec_free(b);
    rec_free(c);
    fx_free(f);
}

MCD_TEST(worker, cancel_and_shutdown_interrupt_a_hang)
{
    struct setup s = {.device = "sim", .limit = 36, .timeout_ms = 20000,
                      .kmode = ENG_KMODE_ALL};
    struct fx *f = fx_new(&s);
    struct rec *a = rec_new();
    eng_gen_req *qa = make_req(f, a, &(struct gen_args){.max_tokens = 4});
    cr_assert_eq(eng_worker_submit(f->w, qa), 0);
    usleep(100 * 1000);   /* a is in the 20 s hang */
    int64_t t0 = now_us();
    eng_gen_req_cancel(qa);
    wait_final(a);
    double ms = (double)(a->t_final_us - t0) / 1e3;
    printf("cancel during a 20 s simulated hang: final event after %.1f ms\n", ms);
    cr_assert_eq(a->kind, ENG_EVENT_DONE);
    cr_assert_eq(a->done.finish, ENG_FINISH_CANCELLED);
    cr_assert_lt(ms, 5000);
    eng_gen_req_free(qa);

    /* Shutdown with one request hanging and two queued: three final events. */
    struct rec *r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = rec_new();
        cr_assert_eq(submit(f, r[i], &(struct gen_args){.max_tokens = 4}), 0);
    }
    usleep(100 * 1000);
    t0 = now_us();
    eng_worker_free(f->w);
    f->w = NULL;
    ms = (double)(now_us() - t0) / 1e3;
    printf("shutdown with a hang and two queued requests: %.1f ms\n", ms);
    cr_assert_lt(ms, 5000);
    for (int i = 0; i < 3; i++) {
        cr_assert(r[i]->final, "request %d got its final event", i);
        cr_assert_eq(r[i]->kind, ENG_EVENT_DONE);
        cr_assert_eq(r[i]->done.finish, ENG_FINISH_CANCELLED);
        rec_free(r[i]);
    }
    rec_free(a);
    fx_free(f);
}

MCD_TEST(worker, submit_after_shutdown_and_cancel_before_start)
{
    struct setup s = {.device = "cpu", .kmode = ENG_KMODE_ALL};
    struct fx *f = fx_new(&s);
    struct rec *a = rec_new();
    eng_gen_req *q = make_req(f, a, &(struct gen_args){.max_tokens = 4});
    eng_gen_req_cancel(q);   /* before it was even submitted */
    cr_assert(eng_gen_req_cancelled(q));
    cr_assert_eq(eng_worker_submit(f->w, q), 0);
    wait_final(a);
    cr_assert_eq(a->done.finish, ENG_FINISH_CANCELLED);
    cr_assert_eq(a->n_ids, 0);
    eng_gen_req_free(q);

    eng_worker_free(f->w);
    f->w = NULL;
    rec_free(a);
    fx_free(f);
}

/* ---- stops, length, context, logprobs, bad requests ------------------------------------ */

MCD_TEST(worker, stops_length_and_context)
{
    struct setup s = {.device = "cpu", .kmode = ENG_KMODE_ALL};
    struct fx *f = fx_new(&s);
    const int32_t no_stop[] = {-1};
    struct rec *ref = run(f, &(struct gen_args){.max_tokens = 12, .stop_ids = no_stop,
                                                .n_stop_ids = 1});
    assert_done(ref, "reference");
    cr_assert_eq(ref->n_ids, 12);
    cr_assert_eq(ref->done.finish, ENG_FINISH_LENGTH);
    cr_assert_eq(ref->done.completion_tokens, 12);

    /* max_tokens */
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 5, .stop_ids = no_stop,
                                              .n_stop_ids = 1});
    cr_assert_eq(r->done.finish, ENG_FINISH_LENGTH);
    cr_assert_eq(r->n_ids, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(r->ids[i], ref->ids[i]);
    rec_free(r);

    /* A stop id: the token that is one ends generation and is not emitted. */
    const int32_t stop_at[] = {ref->ids[3]};
    int first = 0;
    while (ref->ids[first] != stop_at[0])
        first++;
    r = run(f, &(struct gen_args){.max_tokens = 12, .stop_ids = stop_at, .n_stop_ids = 1});
    cr_assert_eq(r->done.finish, ENG_FINISH_STOP);
    cr_assert_eq(r->n_ids, first, "tokens before the stop id");
    cr_assert_eq(r->done.completion_tokens, first + 1, "the stop id counts as generated");
    rec_free(r);

    /* A stop string: the text up to it, and nothing after. Random weights may
     * generate 12 tokens without text (bytes of an unfinished character, special
     * tokens), so the reference is the first of a few prompts whose output has a
     * token with text past the second. */
    static const int32_t alt[][4] = {{0, 5, 17, 300}, {9, 8, 7, 6}, {100, 200, 300, 400},
                                     {1000, 3, 33, 333}, {42, 42, 42, 42}, {7, 70, 700, 1}};
    struct rec *sref = ref;
    struct gen_args sa = {.max_tokens = 12, .stop_ids = no_stop, .n_stop_ids = 1};
    int pick = -1;
    for (size_t k = 0; pick < 0; k++) {
        for (int i = 2; i < sref->n_ids && pick < 0; i++)
            if (strlen(sref->pieces[i]) > 0)
                pick = i;
        if (pick >= 0)
            break;
        cr_assert_lt(k, sizeof alt / sizeof *alt, "no prompt gave a token with text");
        if (sref != ref)
            rec_free(sref);
        sa.prompt = alt[k];
        sa.n_prompt = 4;
        sref = run(f, &sa);
        assert_done(sref, "stop-string reference");
    }
    const char *stop = sref->pieces[pick];
    const char *at = strstr(sref->text, stop);
    cr_assert_not_null(at);
    size_t want = (size_t)(at - sref->text);
    sa.stop = stop;
    r = run(f, &sa);
    cr_assert_eq(r->done.finish, ENG_FINISH_STOP, "stop string '%s'", stop);
    cr_assert_eq(r->text_len, want, "text before '%s': %zu bytes, got %zu", stop, want,
                 r->text_len);
    cr_assert_eq(memcmp(r->text, sref->text, want), 0);
    rec_free(r);
    if (sref != ref)
        rec_free(sref);

    /* Logprobs: greedy picks the most likely token. */
    r = run(f, &(struct gen_args){.max_tokens = 4, .logprobs = true, .top_logprobs = 5,
                                  .stop_ids = no_stop, .n_stop_ids = 1});
    for (int i = 0; i < r->n_ids; i++) {
        cr_assert_eq(r->n_top[i], 5);
        cr_assert_eq(r->top0[i], r->ids[i], "greedy = argmax");
        cr_assert(r->logprob[i] <= 0 && isfinite(r->logprob[i]));
    }
    rec_free(r);
    rec_free(ref);
    fx_free(f);

    /* The context: 10 prompt tokens in 14 positions leave room for 4 tokens. */
    struct setup sc = {.device = "cpu", .kmode = ENG_KMODE_ALL, .n_ctx = 14};
    f = fx_new(&sc);
    r = run(f, &(struct gen_args){.max_tokens = 0, .stop_ids = no_stop, .n_stop_ids = 1});
    cr_assert_eq(r->done.finish, ENG_FINISH_LENGTH);
    cr_assert_eq(r->done.completion_tokens, 4);
    rec_free(r);
    fx_free(f);
}

MCD_TEST(worker, bad_requests)
{
    struct setup s = {.device = "cpu", .kmode = ENG_KMODE_ALL, .n_ctx = 16};
    struct fx *f = fx_new(&s);
    char err[256] = "";
    eng_gen_req *q = NULL;
    struct eng_gen_params p = {.prompt = prompt, .n_prompt = 0};
    cr_assert_eq(eng_gen_req_new(&p, &q, err, sizeof err), -EINVAL);
    cr_assert_null(q);
    p = (struct eng_gen_params){.prompt = prompt, .n_prompt = 1, .top_logprobs = 21};
    cr_assert_eq(eng_gen_req_new(&p, &q, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "top_logprobs"), "%s", err);

    /* An id outside the vocabulary. */
    const int32_t bad_ids[] = {0, 5000, 3};
    struct rec *r = run(f, &(struct gen_args){.max_tokens = 2, .prompt = bad_ids, .n_prompt = 3});
    cr_assert_eq(r->kind, ENG_EVENT_ERROR);
    cr_assert_eq(r->error.code, -EINVAL);
    cr_assert_not(r->error.retryable);
    cr_assert_not(r->error.has_device_error);
    cr_assert(strstr(r->error.message, "5000"), "%s", r->error.message);
    rec_free(r);

    /* A prompt that fills the context. */
    int32_t long_prompt[16] = {0};
    r = run(f, &(struct gen_args){.max_tokens = 2, .prompt = long_prompt, .n_prompt = 16});
    cr_assert_eq(r->kind, ENG_EVENT_ERROR);
    cr_assert_eq(r->error.code, -EINVAL);
    rec_free(r);

    /* Bad sampling knobs are the sampler's to refuse. */
    struct rec *rr = rec_new();
    p = (struct eng_gen_params){.prompt = prompt, .n_prompt = 3, .user = rr};
    eng_sampling_defaults(NULL, &p.sampling, NULL, 0);
    p.sampling.top_p = 7.0f;
    cr_assert_eq(eng_gen_req_new(&p, &q, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_worker_submit(f->w, q), 0);
    eng_gen_req_free(q);
    wait_final(rr);
    cr_assert_eq(rr->kind, ENG_EVENT_ERROR);
    cr_assert_eq(rr->error.code, -EINVAL);
    rec_free(rr);

    /* Still serving. */
    r = run(f, &(struct gen_args){.max_tokens = 2});
    assert_done(r, "after bad requests");
    rec_free(r);
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_eq(st.failed, 3);
    fx_free(f);
}
