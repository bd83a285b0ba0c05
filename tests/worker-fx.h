/* Shared by the worker tests (test-worker-*.c): one record per request filled by the
 * event callback (tokens, text, the final event), and a worker on the cpu or sim
 * device over the generated `deep` pack (42 layers; tests/packs.h), with requests
 * submitted the way the server submits them and compared with the cpu device's
 * greedy tokens. */
#ifndef MINICPMD_TESTS_WORKER_FX_H
#define MINICPMD_TESTS_WORKER_FX_H

#include "engine/worker/worker.h"
#include "tests/packs.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline int64_t now_us(void)
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

static inline void append(struct rec *r, const char *s, size_t n)
{
    if (r->text_len + n < sizeof r->text) {
        memcpy(r->text + r->text_len, s, n);
        r->text_len += n;
        r->text[r->text_len] = '\0';
    }
}

static inline void on_event(void *ctx, const struct eng_event *ev)
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

static inline void rec_free(struct rec *r)
{
    for (int i = 0; i < r->n_ids && i < MAX_TOK; i++)
        free(r->pieces[i]);
    free(r);
}

static inline struct rec *rec_new(void)
{
    struct rec *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    return r;
}

/* Wait until `r` got its final event (or n_ids >= min_tokens when > 0). */
static inline bool wait_for(struct rec *r, int min_tokens, int timeout_ms)
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

static inline void wait_final(struct rec *r)
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
    int parallel;                /* 0: the worker's default */
    int step_prefill;            /* 0: the worker's default */
};

static inline void on_log(void *ctx, enum eng_log_level level, const char *msg)
{
    struct fx *f = ctx;
    if (level <= ENG_LOG_WARN)
        __atomic_add_fetch(&f->n_logs_warn, 1, __ATOMIC_RELAXED);
    if (getenv("MCD_TEST_VERBOSE"))
        fprintf(stderr, "[worker %d] %s\n", (int)level, msg);
}

static inline struct fx *fx_new(const struct setup *s)
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
        .parallel = s->parallel,
        .step_prefill = s->step_prefill,
        .model_id = "deep-7",
        .log = on_log,
        .log_ctx = f,
    };
    cr_assert_eq(eng_worker_new(f->dev, f->pack, f->tok, &wopts, on_event, NULL, &f->w, err,
                                sizeof err),
                 0, "%s", err);
    return f;
}

static inline void fx_free(struct fx *f)
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

static inline eng_gen_req *make_req(struct fx *f, struct rec *r, const struct gen_args *a)
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
static inline int submit(struct fx *f, struct rec *r, const struct gen_args *a)
{
    eng_gen_req *q = make_req(f, r, a);
    int rc = eng_worker_submit(f->w, q);
    eng_gen_req_free(q);
    return rc;
}

/* Submit and wait for the final event. */
static inline struct rec *run(struct fx *f, const struct gen_args *a)
{
    struct rec *r = rec_new();
    cr_assert_eq(submit(f, r, a), 0);
    wait_final(r);
    return r;
}

/* The worker's stats once it has let go of the last request: the final event comes
 * first, the request's bookkeeping (K saved, probes, busy) just after. Waits for
 * that state, however slow the machine (bounded only against a hang). */
static inline struct eng_worker_stats idle_stats(struct fx *f)
{
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    for (int i = 0; i < 600000 && (st.busy || st.queue_depth); i++) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        eng_worker_get_stats(f->w, &st);
    }
    cr_assert_not(st.busy, "the worker never let go of its request");
    return st;
}

static inline void assert_done(const struct rec *r, const char *what)
{
    cr_assert_eq(r->kind, ENG_EVENT_DONE, "%s: expected DONE, got ERROR: %s", what,
                 r->error.message);
    cr_assert_neq(r->done.finish, ENG_FINISH_CANCELLED, "%s", what);
}

/* The greedy tokens of the default prompt on the cpu device (K all). */
static inline struct rec *cpu_reference(int max_tokens)
{
    struct setup s = {.device = "cpu", .kmode = ENG_KMODE_ALL};
    struct fx *f = fx_new(&s);
    struct rec *r = run(f, &(struct gen_args){.max_tokens = max_tokens});
    assert_done(r, "cpu reference");
    cr_assert_gt(r->n_ids, 2, "the reference should generate a few tokens");
    fx_free(f);
    return r;
}

static inline void assert_same_tokens(const struct rec *a, const struct rec *b, const char *what)
{
    cr_assert_eq(a->n_ids, b->n_ids, "%s: %d vs %d tokens", what, a->n_ids, b->n_ids);
    for (int i = 0; i < a->n_ids; i++)
        cr_assert_eq(a->ids[i], b->ids[i], "%s: token %d: %d vs %d", what, i, a->ids[i],
                     b->ids[i]);
    cr_assert_eq(a->done.finish, b->done.finish, "%s", what);
    cr_assert_eq(a->text_len, b->text_len, "%s", what);
    cr_assert_eq(memcmp(a->text, b->text, a->text_len), 0, "%s", what);
}

static inline int total_runlists(const struct eng_gen_timings *t)
{
    int n = 0;
    for (int s = 0; s <= ENG_ERT_LAST; s++)
        n += t->runlists_by_state[s];
    return n;
}

#endif
