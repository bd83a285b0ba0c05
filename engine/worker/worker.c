/* The worker: generation requests, the bounded FIFO, and the counters /metrics
 * reads. The thread that owns the device and its steps are sched.c's story, one
 * running request gen.c's.
 *
 * Life of a request:
 *
 *   eng_gen_req_new        refs 1 (the caller's)
 *   eng_worker_submit      refs 2; queued, or -EBUSY / -ESHUTDOWN at once
 *   (cancelled in the queue: eng__worker_sweep ends it between two runlists, or
 *    the thread finds it cancelled when it dequeues it)
 *   a running sequence     TOKEN events …, then exactly one DONE or ERROR
 *   after the final event  the worker drops its reference
 *
 * Shutdown (eng_worker_free) marks the worker stopping so that no request is
 * accepted any more, cancels everything queued and running (a device wait polls
 * the request's cancel flag), and lets the thread drain the
 * queue: each request it dequeues is cancelled and ends at once with DONE
 * "cancelled". Every final event is thus emitted on the worker thread, in order. */
#include "engine/err.h"
#include "engine/worker/worker-impl.h"
#include "util/clock.h"
#include "util/defaults.h"
#include "util/msg.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The worker's log hook also takes a level: ut_vmsgf's one-argument callback
 * carries it here. */
struct log_to {
    struct eng_worker *w;
    enum eng_log_level level;
};

static void log_line(void *ctx, const char *line)
{
    struct log_to *to = ctx;
    to->w->log(to->w->log_ctx, to->level, line);
}

void eng__worker_log(struct eng_worker *w, enum eng_log_level level, const char *fmt, ...)
{
    struct log_to to = {w, level};
    va_list ap;
    va_start(ap, fmt);
    ut_vmsgf(w->log ? log_line : NULL, &to, fmt, ap);
    va_end(ap);
}

/* ---- requests ------------------------------------------------------------------ */

static void req_destroy(eng_gen_req *r)
{
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->bias);
    free(r->prompt);
    eng_grammar_free(r->grammar);
    free(r);
}

int eng_gen_req_new(const struct eng_gen_params *p, eng_gen_req **out, char *err, size_t errlen)
{
    assert(p && out);
    *out = NULL;
    if (p->n_prompt < 1 || !p->prompt)
        return eng__fail(err, errlen, -EINVAL, "request: the prompt is empty");
    if (p->max_tokens < 0)
        return eng__fail(err, errlen, -EINVAL, "request: max_tokens %d is negative", p->max_tokens);
    if (p->n_stop_ids < 0 || p->n_stop_ids > ENG_GEN_MAX_STOP_IDS ||
        (p->n_stop_ids && !p->stop_ids))
        return eng__fail(err, errlen, -EINVAL, "request: %d stop ids (0 .. %d)", p->n_stop_ids,
                         ENG_GEN_MAX_STOP_IDS);
    if (p->n_stop < 0 || p->n_stop > UT_MAX_STOP)
        return eng__fail(err, errlen, -EINVAL, "request: %d stop strings (0 .. %d)", p->n_stop,
                         UT_MAX_STOP);
    size_t stop_bytes = 0;
    for (int i = 0; i < p->n_stop; i++) {
        if (!p->stop[i])
            return eng__fail(err, errlen, -EINVAL, "request: stop string %d is NULL", i);
        stop_bytes += p->stop_len[i] ? p->stop_len[i] : strlen(p->stop[i]);
    }
    if (stop_bytes > UT_MAX_STOP_BYTES)
        return eng__fail(err, errlen, -EINVAL, "request: stop strings of %zu bytes (at most %d)",
                         stop_bytes, UT_MAX_STOP_BYTES);
    if (p->top_logprobs < 0 || p->top_logprobs > UT_MAX_TOP_LOGPROBS)
        return eng__fail(err, errlen, -EINVAL, "request: top_logprobs %d (0 .. %d)",
                         p->top_logprobs, UT_MAX_TOP_LOGPROBS);
    if (p->sampling.n_bias < 0 || (p->sampling.n_bias && !p->sampling.bias))
        return eng__fail(err, errlen, -EINVAL, "request: logit bias of %d entries",
                         p->sampling.n_bias);

    eng_gen_req *r = calloc(1, sizeof *r);
    if (!r)
        goto nomem;
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancel, false);
    atomic_init(&r->seq_no, 0);
    r->prompt = malloc((size_t)p->n_prompt * sizeof *r->prompt);
    if (!r->prompt)
        goto nomem;
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
    r->n_prompt = p->n_prompt;
    r->sampling = p->sampling;
    if (p->sampling.n_bias) {
        r->bias = malloc((size_t)p->sampling.n_bias * sizeof *r->bias);
        if (!r->bias)
            goto nomem;
        memcpy(r->bias, p->sampling.bias, (size_t)p->sampling.n_bias * sizeof *r->bias);
    }
    r->sampling.bias = r->bias;
    r->max_tokens = p->max_tokens;
    if (p->n_stop_ids)
        memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *r->stop_ids);
    r->n_stop_ids = p->n_stop_ids;
    for (; r->n_stop < p->n_stop; r->n_stop++) {
        int i = r->n_stop;
        size_t len = p->stop_len[i] ? p->stop_len[i] : strlen(p->stop[i]);
        /* One byte more, a NUL, for log lines; the length is what counts. */
        if (!(r->stop[i] = malloc(len + 1)))
            goto nomem;
        memcpy(r->stop[i], p->stop[i], len);
        r->stop[i][len] = '\0';
        r->stop_len[i] = len;
    }
    r->logprobs = p->logprobs;
    r->top_logprobs = p->logprobs || p->prompt_logprobs ? p->top_logprobs : 0;
    r->prompt_logprobs = p->prompt_logprobs;
    r->prompt_only = p->prompt_only;
    r->grammar = eng_grammar_ref(p->grammar);
    r->grammar_after_think = p->grammar_after_think;
    r->user = p->user;
    *out = r;
    return 0;
nomem:
    if (r)
        req_destroy(r);
    return eng__fail(err, errlen, -ENOMEM, "request: out of memory");
}

eng_gen_req *eng_gen_req_ref(eng_gen_req *r)
{
    assert(r);
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void eng_gen_req_free(eng_gen_req *r)
{
    if (r && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
        req_destroy(r);
}

void eng_gen_req_cancel(eng_gen_req *r)
{
    assert(r);
    atomic_store(&r->cancel, true);
}

bool eng_gen_req_cancelled(const eng_gen_req *r)
{
    return atomic_load(&r->cancel);
}

void *eng_gen_req_user(const eng_gen_req *r)
{
    return r->user;
}

uint64_t eng_gen_req_seq_no(const eng_gen_req *r)
{
    return atomic_load(&r->seq_no);
}

/* ---- the queue ------------------------------------------------------------------- */

int eng_worker_submit(eng_worker *w, eng_gen_req *r)
{
    assert(w && r);
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    if (atomic_load(&r->seq_no) != 0) {
        rc = -EINVAL;   /* submitted twice */
    } else if (w->stopping) {
        rc = -ESHUTDOWN;
    } else if (w->count == w->queue_size) {
        atomic_fetch_add_explicit(&w->m.rejected, 1, memory_order_relaxed);
        rc = -EBUSY;
    } else {
        eng_gen_req_ref(r);
        atomic_store(&r->seq_no, ++w->next_seq_no);
        r->t_submit_us = ut_now_us();
        w->ring[(w->head + w->count) % w->queue_size] = r;
        w->count++;
        atomic_store_explicit(&w->m.queue_depth, w->count, memory_order_relaxed);
        atomic_fetch_add_explicit(&w->m.requests, 1, memory_order_relaxed);
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void eng__worker_done_cancelled(struct eng_worker *w, eng_gen_req *r, double queue_ms)
{
    struct eng_event ev = {.kind = ENG_EVENT_DONE, .req = r, .user = r->user};
    ev.done.finish = ENG_FINISH_CANCELLED;
    ev.done.text = "";
    ev.done.prompt_tokens = r->n_prompt;
    ev.done.timings.queue_ms = queue_ms;
    ev.done.timings.k = eng_kpolicy_k(&w->kp);
    atomic_fetch_add_explicit(&w->m.cancelled, 1, memory_order_relaxed);
    w->emit(w->emit_ctx, &ev);
}

void eng__worker_sweep(struct eng_worker *w)
{
    int n = 0;
    pthread_mutex_lock(&w->mu);
    int kept = 0;
    for (int i = 0; i < w->count; i++) {
        eng_gen_req *r = w->ring[(w->head + i) % w->queue_size];
        if (atomic_load(&r->cancel))
            w->swept[n++] = r;
        else
            w->ring[(w->head + kept++) % w->queue_size] = r;
    }
    w->count = kept;
    atomic_store_explicit(&w->m.queue_depth, w->count, memory_order_relaxed);
    pthread_mutex_unlock(&w->mu);

    int64_t now = ut_now_us();
    for (int i = 0; i < n; i++) {
        eng__worker_done_cancelled(w, w->swept[i], (double)(now - w->swept[i]->t_submit_us) / 1e3);
        eng_gen_req_free(w->swept[i]);
    }
}

/* ---- life ---------------------------------------------------------------------- */

int eng__worker_replan(struct eng_worker *w)
{
    int k = eng_kpolicy_k(&w->kp);
    if (w->plan.runlists && w->plan.k == k)
        return 0;
    eng_plan_deinit(&w->plan);
    char err[128];
    int rc = eng_plan_init(&w->plan, w->n_layers, k, err, sizeof err);
    atomic_store(&w->m.current_k, k);
    return rc;
}

static void worker_destroy(struct eng_worker *w)
{
    eng_plan_deinit(&w->plan);
    for (int i = 0; i < w->n_slots; i++) {
        eng_device_seq_end(w->dev, w->slots[i].seq);
        free(w->slots[i].ids);
        free(w->slots[i].logits);
    }
    free(w->raw_logits);
    eng_gram_vocab_free(w->gvocab_own);
    free(w->ring);
    free(w->swept);
    free(w->model_id);
    free(w->kstate_path);
    free(w);
}

/* The remembered K for this model and device, or 0. */
static int remembered_k(struct eng_worker *w)
{
    if (!w->kstate_path)
        return 0;
    char err[512] = "";
    int k = 0;
    int rc = eng_kstate_load_fresh(w->kstate_path, w->model_id, w->device_name,
                                   UT_RUNLIST_K_MAX_AGE_S, (long long)time(NULL), &k, err,
                                   sizeof err);
    if (rc < 0 || rc == 2) {
        eng__worker_log(w, ENG_LOG_WARN, "runlist K: %s; starting from the device default", err);
        return 0;
    }
    if (rc == 1)
        eng__worker_log(w, ENG_LOG_INFO, "runlist K: %d layers per runlist, remembered in %s",
                        k, w->kstate_path);
    return rc == 1 ? k : 0;
}

int eng_worker_new(struct eng_device *dev, const eng_pack *pack, const eng_tokenizer *tok,
                   const struct eng_worker_opts *o, eng_worker_emit_fn emit, void *emit_ctx,
                   eng_worker **out, char *err, size_t errlen)
{
    assert(dev && pack && tok && o && emit && out);
    *out = NULL;
    const struct eng_hparams *hp = &eng_pack_get_info(pack)->hp;
    if (o->queue_size < 1)
        return eng__fail(err, errlen, -EINVAL, "worker: queue size %d must be >= 1", o->queue_size);
    if (o->n_ctx > hp->n_ctx_train)
        return eng__fail(err, errlen, -EINVAL, "worker: context of %d exceeds the model's %d",
                         o->n_ctx, hp->n_ctx_train);

    int rc = -ENOMEM;
    struct eng_worker *w = calloc(1, sizeof *w);
    if (!w)
        return eng__fail(err, errlen, -ENOMEM, "worker: out of memory");
    w->dev = dev;
    w->pack = pack;
    w->tok = tok;
    w->gvocab_fn = o->gram_vocab;
    w->gvocab_ctx = o->gram_vocab_ctx;
    w->emit = emit;
    w->emit_ctx = emit_ctx;
    w->log = o->log;
    w->log_ctx = o->log_ctx;
    w->n_layers = hp->n_layers;
    w->n_vocab = hp->n_vocab;
    w->n_ctx = o->n_ctx > 0 ? o->n_ctx : hp->n_ctx_train;
    w->queue_size = o->queue_size;

    if ((rc = eng_device_load_model(dev, pack, err, errlen)))
        goto err;
    snprintf(w->device_name, sizeof w->device_name, "%s", eng_device_get_name(dev));
    int max_batch = eng_device_max_batch(dev);
    w->prefill_chunk = o->prefill_chunk > 0 ? o->prefill_chunk : UT_PREFILL_CHUNK_DEFAULT;
    w->prompt_cache = o->prompt_cache;
    if (max_batch > 0 && w->prefill_chunk > max_batch)
        w->prefill_chunk = max_batch;

    rc = -ENOMEM;
    w->model_id = strdup(o->model_id ? o->model_id : eng_pack_get_info(pack)->dir);
    w->raw_logits = malloc((size_t)w->n_vocab * sizeof *w->raw_logits);
    w->ring = calloc((size_t)w->queue_size, sizeof *w->ring);
    w->swept = calloc((size_t)w->queue_size, sizeof *w->swept);
    if (!w->model_id || !w->raw_logits || !w->ring || !w->swept) {
        eng__fail(err, errlen, rc, "worker: out of memory");
        goto err;
    }
    if (o->state_dir && o->state_dir[0]) {
        char path[4096];
        if ((rc = eng_kstate_path(o->state_dir, path, sizeof path))) {
            eng__fail(err, errlen, rc, "worker: state directory path too long");
            goto err;
        }
        if (!(w->kstate_path = strdup(path))) {
            rc = eng__fail(err, errlen, -ENOMEM, "worker: out of memory");
            goto err;
        }
    }

    /* A slot per running sequence, or as many as the prompt cache may use and the
     * device keeps. */
    int max_seqs = eng_device_max_seqs(dev);
    w->parallel = o->parallel > 0 ? o->parallel : UT_PARALLEL_DEFAULT;
    w->parallel = w->parallel < max_seqs ? w->parallel : max_seqs;
    w->parallel = w->parallel < WORKER_MAX_SLOTS ? w->parallel : WORKER_MAX_SLOTS;
    int n_slots = w->prompt_cache ? max_seqs : w->parallel;
    n_slots = n_slots < WORKER_MAX_SLOTS ? n_slots : WORKER_MAX_SLOTS;
    w->step_prefill = o->step_prefill > 0 ? o->step_prefill : UT_STEP_PREFILL_DEFAULT;
    w->max_batch = max_batch;
    w->batch = eng_device_can_batch(dev);
    w->async = eng_device_can_prefill_async(dev);
    for (; w->n_slots < n_slots; w->n_slots++) {
        struct worker_slot *sl = &w->slots[w->n_slots];
        sl->ids = malloc(((size_t)w->n_ctx + 1) * sizeof *sl->ids);
        sl->logits = malloc((size_t)w->n_vocab * sizeof *sl->logits);
        if (!sl->ids || !sl->logits) {
            free(sl->ids);
            free(sl->logits);
            rc = eng__fail(err, errlen, -ENOMEM, "worker: out of memory");
            goto err;
        }
        if ((rc = eng_device_seq_begin(dev, w->n_ctx, &sl->seq, err, errlen))) {
            free(sl->ids);
            free(sl->logits);
            sl->ids = NULL;
            sl->logits = NULL;
            if (w->n_slots == 0)
                goto err;
            /* More slots are a cache: do with the ones there are (their KV is
             * reserved address space, which a strict overcommit policy may refuse). */
            eng__worker_log(w, ENG_LOG_WARN, "KV slots: %d, not %d: %s", w->n_slots,
                            n_slots, err);
            if (err && errlen)
                err[0] = '\0';
            rc = 0;
            break;
        }
    }
    if (w->parallel > w->n_slots)
        w->parallel = w->n_slots;
    struct eng_kpolicy_opts kpo = {
        .mode = o->kmode,
        .fixed_k = o->fixed_k,
        .n_layers = w->n_layers,
        .device_default_k = eng_device_default_k(dev),
        .remembered_k = o->kmode == ENG_KMODE_AUTO ? remembered_k(w) : 0,
        .max_retries = o->max_retries,
    };
    if ((rc = eng_kpolicy_init(&w->kp, &kpo, err, errlen)))
        goto err;
    if ((rc = eng__worker_replan(w))) {
        eng__fail(err, errlen, rc, "worker: cannot plan %d layers", w->n_layers);
        goto err;
    }

    if ((rc = pthread_mutex_init(&w->mu, NULL))) {
        rc = eng__fail(err, errlen, -rc, "worker: mutex: %s", strerror(rc));
        goto err;
    }
    if ((rc = pthread_cond_init(&w->cv, NULL))) {
        pthread_mutex_destroy(&w->mu);
        rc = eng__fail(err, errlen, -rc, "worker: condition: %s", strerror(rc));
        goto err;
    }
    if ((rc = pthread_create(&w->thread, NULL, eng__worker_main, w))) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        rc = eng__fail(err, errlen, -rc, "worker: thread: %s", strerror(rc));
        goto err;
    }
    eng__worker_log(w, ENG_LOG_INFO,
                    "worker: device %s, %d layers, K %d (%s), context %d, prefill chunks of %d, "
                    "queue of %d, %d sequence(s) at once (%s, %d prompt tokens per step beside "
                    "decodes)",
                    eng_device_get_description(dev), w->n_layers, eng_kpolicy_k(&w->kp),
                    o->kmode == ENG_KMODE_AUTO ? "auto"
                    : o->kmode == ENG_KMODE_ALL ? "all" : "fixed",
                    w->n_ctx, w->prefill_chunk, w->queue_size, w->parallel,
                    w->batch ? "batched" : "interleaved", w->step_prefill);
    *out = w;
    return 0;
err:
    worker_destroy(w);
    return rc;
}

void eng_worker_free(eng_worker *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    for (int i = 0; i < w->count; i++)
        eng_gen_req_cancel(w->ring[(w->head + i) % w->queue_size]);
    for (int i = 0; i < WORKER_MAX_SLOTS; i++)
        if (w->running[i])
            eng_gen_req_cancel(w->running[i]);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    worker_destroy(w);
}

/* ---- metrics ---------------------------------------------------------------------- */

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void eng_worker_get_stats(const eng_worker *cw, struct eng_worker_stats *out)
{
    assert(cw && out);
    struct eng_worker *w = (struct eng_worker *)cw;  /* atomics are read, not changed */
    *out = (struct eng_worker_stats){
        .queue_depth = LOAD(w->m.queue_depth),
        .queue_size = w->queue_size,
        .busy = LOAD(w->m.busy),
        .current_k = LOAD(w->m.current_k),
        .n_layers = w->n_layers,
        .requests = LOAD(w->m.requests),
        .rejected = LOAD(w->m.rejected),
        .finished_stop = LOAD(w->m.finished_stop),
        .finished_length = LOAD(w->m.finished_length),
        .cancelled = LOAD(w->m.cancelled),
        .failed = LOAD(w->m.failed),
        .tokens_in = LOAD(w->m.tokens_in),
        .tokens_cached = LOAD(w->m.tokens_cached),
        .device_down = atomic_load_explicit(&w->m.device_down, memory_order_relaxed),
        .tokens_out = LOAD(w->m.tokens_out),
        .device_resets = LOAD(w->m.device_resets),
        .k_halvings = LOAD(w->m.k_halvings),
        .k_probes = LOAD(w->m.k_probes),
        .prefill_device_us = LOAD(w->m.prefill_device_us),
        .prefill_host_us = LOAD(w->m.prefill_host_us),
        .active = LOAD(w->m.active),
        .parallel = w->parallel,
        .batched = w->batch,
        .steps = LOAD(w->m.steps),
        .queue_wait_us = LOAD(w->m.queue_wait_us),
        .queue_waits = LOAD(w->m.queue_waits),
    };
    for (int b = 0; b < WORKER_BATCH_BUCKETS && b < ENG_BATCH_BUCKETS; b++)
        out->batch_hist[b] = LOAD(w->m.batch_hist[b]);
    for (int s = 0; s <= ENG_ERT_LAST; s++)
        out->runlists_by_state[s] = LOAD(w->m.runlists_by_state[s]);
}
