/* One sequence: a generation request on its slot — its start (checks, sampler,
 * detokenizer, grammar, the slot sharing the longest prompt prefix), sampling and
 * reporting each token, what its fault asks of the K policy, and its end. Which
 * sequences run each step, and how their work reaches the device, is sched.c's
 * story (the state of a sequence, and replay, are described there).
 *
 * ---- Errors ----------------------------------------------------------------------
 *
 * When the policy gives up (ALL or FIXED mode, a state that does not adapt, K = 1,
 * or the retries are used up) the request ends in ERROR, code -EIO, with the
 * struct eng_device_error of the last failed runlist. `retryable` is true when the
 * device reset succeeded (the worker goes on serving: 503 + Retry-After), false
 * when it did not (500); the next request tries the reset again first, and while
 * it still fails each request ends at once in the same non-retryable device error
 * (the failure that left the device down). */
#include "engine/worker/worker-impl.h"
#include "util/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- runlists ------------------------------------------------------------------------ */

void eng__gen_count_run(struct gen *g, const struct eng_run_result *res, bool worker_too)
{
    struct eng_worker *w = g->w;
    double ms = (double)res->elapsed_us / 1e3;
    g->tm.runlists++;
    g->tm.device_ms += ms;
    if (ms > g->tm.max_runlist_ms)
        g->tm.max_runlist_ms = ms;
    int st = eng_ert_valid(res->state) ? (int)res->state : 0;  /* [0]: outside 1..11 */
    g->tm.runlists_by_state[st]++;
    if (worker_too)
        atomic_fetch_add_explicit(&w->m.runlists_by_state[st], 1, memory_order_relaxed);
}

void eng__gen_fault(struct gen *g, const struct eng_runlist *rl, const struct eng_run_result *res,
                    const struct eng_batch *b, const struct eng_prefill_chunk *pc)
{
    struct eng_worker *w = g->w;
    struct eng_device_error *e = &g->derr;
    eng_device_error_init(e, res->state, b->phase);
    e->chunk_index = rl->index;
    e->chunk_count = w->plan.n_runlists;
    e->layer_begin = rl->layer_begin;
    e->layer_end = rl->layer_end;
    e->failed_layer = res->failed_layer;
    e->token_pos = g->n_fed;
    e->n_tokens = b->n_tokens;
    if (pc) {
        e->prefill_chunk_index = pc->index;
        e->prefill_chunk_count = pc->count;
    }
    e->elapsed_ms = (double)res->elapsed_us / 1e3;
    char dev[sizeof w->device_name + 16];
    snprintf(dev, sizeof dev, "%s%s", w->device_name, res->on_host ? " (host cpu)" : "");
    eng_device_error_set_device(e, dev);   /* xrt's prompt on the CPU failed there */
    e->attempts = g->attempts;
    snprintf(g->dev_message, sizeof g->dev_message, "%s", res->message);
}

/* ---- final events ------------------------------------------------------------------ */

static void finish_timings(struct gen *g)
{
    int64_t now = ut_now_us();
    int64_t prompt_end = g->t_prompt_done ? g->t_prompt_done : now;
    g->tm.prompt_ms = (double)(prompt_end - g->t_start) / 1e3;
    g->tm.prompt_tps = g->t_prompt_done && g->tm.prompt_ms > 0
                           ? (g->n_prompt - g->n_cached) / (g->tm.prompt_ms / 1e3) : 0;
    g->tm.decode_ms = g->t_prompt_done ? (double)(now - g->t_prompt_done) / 1e3 : 0;
    g->tm.decode_tps = g->tm.decode_ms > 0 ? g->n_gen / (g->tm.decode_ms / 1e3) : 0;
    g->tm.attempts = g->attempts > 0 ? g->attempts : 1;
    g->tm.k = eng_kpolicy_k(&g->w->kp);
}

void eng__gen_done(struct gen *g, enum eng_finish finish)
{
    struct eng_worker *w = g->w;
    char *tail = NULL;
    int len = 0;
    if (finish != ENG_FINISH_CANCELLED && g->detok) {
        len = eng_detok_flush(g->detok, &tail);
        if (len < 0)
            len = 0;
    }
    finish_timings(g);
    struct eng_event ev = {.kind = ENG_EVENT_DONE, .req = g->r, .user = g->r->user};
    ev.done.finish = finish;
    ev.done.text = tail && len > 0 ? tail : "";
    ev.done.text_len = tail && len > 0 ? (size_t)len : 0;
    ev.done.prompt_tokens = g->n_prompt;
    ev.done.cached_tokens = g->n_cached;
    ev.done.completion_tokens = g->n_gen;
    ev.done.stop_index = finish == ENG_FINISH_STOP ? eng_detok_stop_index(g->detok) : -1;
    ev.done.timings = g->tm;
    g->succeeded = finish != ENG_FINISH_CANCELLED;
    g->ended = true;
    atomic_fetch_add_explicit(finish == ENG_FINISH_STOP     ? &w->m.finished_stop
                              : finish == ENG_FINISH_LENGTH ? &w->m.finished_length
                                                            : &w->m.cancelled,
                              1, memory_order_relaxed);
    w->emit(w->emit_ctx, &ev);
    free(tail);
}

static void emit_verror(struct gen *g, int code, bool retryable, bool device, bool grammar,
                        const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));
static void emit_error(struct gen *g, int code, bool retryable, bool device, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void grammar_error(struct gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit_error(struct gen *g, int code, bool retryable, bool device, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit_verror(g, code, retryable, device, false, fmt, ap);
    va_end(ap);
}

/* The request's grammar ended it (a limit, a dead end): the client's error. */
static void grammar_error(struct gen *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit_verror(g, -EINVAL, false, false, true, fmt, ap);
    va_end(ap);
}

static void emit_verror(struct gen *g, int code, bool retryable, bool device, bool grammar,
                        const char *fmt, va_list ap)
{
    struct eng_worker *w = g->w;
    finish_timings(g);
    struct eng_event ev = {.kind = ENG_EVENT_ERROR, .req = g->r, .user = g->r->user};
    struct eng_error_event *e = &ev.error;
    e->code = code;
    e->retryable = retryable;
    e->has_device_error = device;
    e->grammar = grammar;
    if (device)
        e->device = g->derr;
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    e->prompt_tokens = g->n_prompt;
    e->cached_tokens = g->n_cached;
    e->completion_tokens = g->n_gen;
    e->timings = g->tm;
    atomic_fetch_add_explicit(&w->m.failed, 1, memory_order_relaxed);
    g->ended = true;
    w->emit(w->emit_ctx, &ev);
}

/* ---- a device fault -------------------------------------------------------------- */

void eng__gen_device_down(struct gen *g, const char *msg)
{
    g->derr = g->w->broken_by;   /* -EIO always carries a device error (worker.h) */
    emit_error(g, -EIO, false, true, "device %s did not recover: %s", g->w->device_name, msg);
}

bool eng__gen_after_fault(struct gen *g, bool reset_ok, const char *err)
{
    struct eng_worker *w = g->w;
    int state = g->derr.state;
    char line[384];
    eng_device_error_format(&g->derr, line, sizeof line);
    if (eng_gen_req_cancelled(g->r)) {
        eng__gen_done(g, ENG_FINISH_CANCELLED);
        return false;
    }
    if (!reset_ok) {
        emit_error(g, -EIO, false, true, "%s: %s; the device did not recover: %s", line,
                   g->dev_message, err);
        return false;
    }
    int k_before = eng_kpolicy_k(&w->kp);
    w->kp.attempts = g->attempts;   /* the policy counts this request's tries */
    enum eng_kverdict v = eng_kpolicy_failed(&w->kp, state);
    g->attempts = w->kp.attempts;
    int k = eng_kpolicy_k(&w->kp);
    if (k != k_before) {
        atomic_fetch_add_explicit(&w->m.k_halvings, 1, memory_order_relaxed);
        if (eng__worker_replan(w)) {
            emit_error(g, -ENOMEM, true, false, "cannot plan runlists of %d layers", k);
            return false;
        }
        eng__worker_log(w, ENG_LOG_WARN, "%s: %s; runlist K %d -> %d", line, g->dev_message,
                        k_before, k);
    }
    if (v == ENG_KVERDICT_RETRY) {
        eng__worker_log(w, ENG_LOG_INFO, "request %llu: replaying with K %d (attempt %d)",
                        (unsigned long long)eng_gen_req_seq_no(g->r), k, g->attempts);
        return true;
    }
    g->derr.attempts = g->attempts;
    eng_device_error_format(&g->derr, line, sizeof line);
    eng__worker_log(w, ENG_LOG_ERROR, "%s: %s", line, g->dev_message);
    emit_error(g, -EIO, true, true, "%s: %s", line, g->dev_message);
    return false;
}

/* ---- sampling ---------------------------------------------------------------------- */

static bool is_stop_id(const eng_gen_req *r, int32_t id)
{
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id)
            return true;
    return false;
}

/* Advance the grammar by the sampled token; before "</think>" just watch for it.
 * Returns 0, -EINVAL (the token left the grammar: cannot happen after the mask),
 * or the matcher's -E2BIG (a limit; eng_gram_matcher_why) or -ENOMEM. */
static int grammar_step(struct gen *g, int32_t id)
{
    if (g->gm_on)
        return is_stop_id(g->r, id) ? 0 : eng_gram_matcher_accept(g->gm, id);
    const char *b;
    size_t n = eng_tokenizer_token_bytes(g->w->tok, id, false, &b);
    for (size_t i = 0; i < n; i++) {
        memmove(g->tail, g->tail + 1, sizeof g->tail - 1);
        g->tail[sizeof g->tail - 1] = b[i];
        if (memcmp(g->tail, "</think>", 8) == 0) {
            /* what follows in the same token is the grammar's */
            g->gm_on = true;
            return eng_gram_matcher_accept_bytes(g->gm, b + i + 1, n - i - 1);
        }
    }
    return 0;
}

/* One TOKEN event for prompt token `pos`, scored by `row` (NULL: the first, which
 * nothing scores). */
static void emit_prompt_token(struct gen *g, int pos, const float *row)
{
    struct eng_worker *w = g->w;
    eng_gen_req *r = g->r;
    struct eng_top_logprob top[UT_MAX_TOP_LOGPROBS];
    struct eng_event ev = {.kind = ENG_EVENT_TOKEN, .req = r, .user = r->user};
    ev.token.id = g->ids[pos];
    ev.token.text = "";
    ev.token.index = pos;
    ev.token.prompt = true;
    if (row) {
        ev.token.has_logprob = true;
        ev.token.logprob = eng_logprobs(row, w->n_vocab, g->ids[pos], top, r->top_logprobs);
        ev.token.top = top;
        ev.token.n_top = r->top_logprobs;
    }
    w->emit(w->emit_ctx, &ev);
}

void eng__gen_score(struct gen *g, int begin, int n, bool want)
{
    struct eng_worker *w = g->w;
    size_t V = (size_t)w->n_vocab;
    if (begin == 0 && g->n_scored == 0) {
        emit_prompt_token(g, 0, NULL);
        g->n_scored = 1;
    }
    /* Row t holds the logits at position begin + t: they score the token after it. */
    for (int t = 0; t < n; t++) {
        int pos = begin + t + 1;
        const float *row = g->plogits + (size_t)t * V;
        if (pos < g->n_prompt && pos == g->n_scored) {
            emit_prompt_token(g, pos, row);
            g->n_scored++;
        } else if (pos == g->n_prompt && want) {
            memcpy(g->slot->logits, row, V * sizeof *row);
            g->have_logits = true;
        }
    }
}

bool eng__gen_sample(struct gen *g)
{
    struct eng_worker *w = g->w;
    eng_gen_req *r = g->r;
    float *logits = g->slot->logits;
    if (r->prompt_only) {   /* the prompt was all that was asked */
        eng__gen_done(g, ENG_FINISH_LENGTH);
        return true;
    }
    if (r->logprobs)
        memcpy(w->raw_logits, logits, (size_t)w->n_vocab * sizeof *logits);
    int allowed = g->gm_on ? eng_gram_matcher_apply(g->gm, logits, w->n_vocab) : 1;
    if (allowed <= 0) { /* the request's grammar, not the server, ends it: a 400 */
        if (allowed == -ENOMEM)
            emit_error(g, -ENOMEM, true, false, "out of memory");
        else if (allowed == -E2BIG)
            grammar_error(g, "%s, after %d tokens", eng_gram_matcher_why(g->gm), g->n_gen);
        else
            grammar_error(g, "grammar: no token of the vocabulary can continue the output after "
                       "%d tokens (the grammar asks for text the tokenizer cannot spell)",
                       g->n_gen);
        return true;
    }
    int32_t id = eng_sampler_sample(g->sampler, logits);
    int grc = g->gm ? grammar_step(g, id) : 0;
    if (grc) {
        if (grc == -E2BIG)
            grammar_error(g, "%s, after %d tokens", eng_gram_matcher_why(g->gm), g->n_gen);
        else
            emit_error(g, grc == -ENOMEM ? -ENOMEM : -EINVAL, false, false,
                       "grammar: token %d does not continue the output", id);
        return true;
    }
    eng_sampler_accept(g->sampler, id);
    g->ids[g->n_prompt + g->n_gen] = id;
    g->n_gen++;
    atomic_fetch_add_explicit(&w->m.tokens_out, 1, memory_order_relaxed);

    if (is_stop_id(r, id)) {
        eng__gen_done(g, ENG_FINISH_STOP);
        return true;
    }

    char *piece = NULL;
    bool stopped = false;
    int len = eng_detok_push(g->detok, id, &piece, &stopped);
    if (len < 0) {
        emit_error(g, len, false, false, "detokenizer: %s", strerror(-len));
        return true;
    }
    struct eng_top_logprob top[UT_MAX_TOP_LOGPROBS];
    struct eng_event ev = {.kind = ENG_EVENT_TOKEN, .req = r, .user = r->user};
    ev.token.id = id;
    ev.token.text = piece && len > 0 ? piece : "";
    ev.token.text_len = piece && len > 0 ? (size_t)len : 0;
    ev.token.index = g->n_gen - 1;
    if (r->logprobs) {
        ev.token.has_logprob = true;
        ev.token.logprob = eng_logprobs(w->raw_logits, w->n_vocab, id, top, r->top_logprobs);
        ev.token.top = top;
        ev.token.n_top = r->top_logprobs;
    }
    w->emit(w->emit_ctx, &ev);
    free(piece);

    if (stopped) {
        eng__gen_done(g, ENG_FINISH_STOP);
        return true;
    }
    if ((r->max_tokens > 0 && g->n_gen >= r->max_tokens) || g->n_prompt + g->n_gen >= w->n_ctx) {
        eng__gen_done(g, ENG_FINISH_LENGTH);
        return true;
    }
    return false;
}

/* ---- the request ------------------------------------------------------------------- */

/* Prompt positions whose KV slot sl already holds: the longest prefix the prompt
 * shares with its ids[0 .. n_kv), an earlier request's prompt and fed output, but
 * never the whole prompt (its last position must run for the logits). The
 * forward pass is batch-invariant (a position's KV does not depend on how the
 * prompt was cut into chunks), so the output is the same as without the cache. */
static int reusable_prefix(const struct worker_slot *sl, const eng_gen_req *r)
{
    int n = sl->n_kv < r->n_prompt - 1 ? sl->n_kv : r->n_prompt - 1, i = 0;
    while (i < n && sl->ids[i] == r->prompt[i])
        i++;
    return i;
}

/* The slot a request runs on (and in *reuse the prompt positions it holds): the
 * one sharing the longest prefix with it, when that saves at least MIN_REUSE
 * positions or half the prompt; else an empty slot, else the least recently used
 * one. A short match (a chat template's opening
 * tokens) must not evict a conversation: Open WebUI, for one, sends title and tag
 * requests between the turns of a chat. */
#define MIN_REUSE 32
static struct worker_slot *pick_slot(struct eng_worker *w, const eng_gen_req *r, int *reuse)
{
    struct worker_slot *best = NULL, *spare = NULL;
    int best_n = 0;
    for (int i = 0; i < w->n_slots; i++) {
        struct worker_slot *sl = &w->slots[i];
        if (sl->busy)   /* another running sequence's */
            continue;
        int n = w->prompt_cache ? reusable_prefix(sl, r) : 0;
        if (n > best_n)
            best = sl, best_n = n;
        if (!spare || (spare->n_kv > 0 && (sl->n_kv == 0 || sl->used < spare->used)))
            spare = sl;
    }
    if (best && (best_n >= MIN_REUSE || 2 * best_n >= r->n_prompt - 1)) {
        *reuse = best_n;
        return best;
    }
    *reuse = w->prompt_cache ? reusable_prefix(spare, r) : 0;
    return spare;
}

/* Checks that need the model: the prompt fits and its ids exist. */
static int check_request(struct gen *g, char *msg, size_t len)
{
    struct eng_worker *w = g->w;
    if (g->n_prompt >= w->n_ctx) {
        snprintf(msg, len, "the prompt of %d tokens leaves no room in the context of %d",
                 g->n_prompt, w->n_ctx);
        return -EINVAL;
    }
    for (int i = 0; i < g->n_prompt; i++)
        if (g->r->prompt[i] < 0 || g->r->prompt[i] >= w->n_vocab) {
            snprintf(msg, len, "prompt token %d is %d: ids are 0 .. %d", i, g->r->prompt[i],
                     w->n_vocab - 1);
            return -EINVAL;
        }
    return 0;
}

static void gen_free(struct gen *g)
{
    free(g->plogits);
    eng_detok_free(g->detok);
    eng_gram_matcher_free(g->gm);
    eng_sampler_free(g->sampler);
    free(g);
}

struct gen *eng__gen_start(struct eng_worker *w, eng_gen_req *r)
{
    struct gen *g = calloc(1, sizeof *g);
    char msg[256];
    int rc;
    int64_t now = ut_now_us();
    double queue_ms = (double)(now - r->t_submit_us) / 1e3;
    if (!g) {
        struct gen tmp = {.w = w, .r = r, .n_prompt = r->n_prompt};
        tmp.tm.queue_ms = queue_ms;
        emit_error(&tmp, -ENOMEM, true, false, "out of memory");
        return NULL;
    }
    *g = (struct gen){.w = w, .r = r, .n_prompt = r->n_prompt, .attempts = 1, .t_start = now};
    g->tm.queue_ms = queue_ms;

    if (eng_gen_req_cancelled(r)) {
        eng__worker_done_cancelled(w, r, g->tm.queue_ms);
        goto ended;
    }
    if ((rc = check_request(g, msg, sizeof msg))) {
        emit_error(g, rc, false, false, "%s", msg);
        goto ended;
    }
    if ((rc = eng_sampler_new(&r->sampling, w->n_vocab, &g->sampler, msg, sizeof msg))) {
        emit_error(g, rc, false, false, "%s", msg);
        goto ended;
    }
    g->detok = eng_detok_new_len(w->tok, true, (const char *const *)r->stop, r->stop_len,
                                 (size_t)r->n_stop);
    if (!g->detok) {
        emit_error(g, -ENOMEM, true, false, "out of memory");
        goto ended;
    }
    eng_detok_keep_markup(g->detok);  /* the output parser reads <function ...</function> */
    if (r->grammar) {
        if (!w->gvocab)
            w->gvocab = w->gvocab_fn ? w->gvocab_fn(w->gvocab_ctx)
                                     : (w->gvocab_own = eng_gram_vocab_new(w->tok));
        if (!w->gvocab) {
            emit_error(g, -ENOMEM, true, false, "out of memory");
            goto ended;
        }
        rc = eng_gram_matcher_new(r->grammar, w->gvocab, r->stop_ids, r->n_stop_ids, &g->gm);
        if (rc) {
            char why[200] = "grammar: out of memory";
            if (rc == -E2BIG)
                eng_gram_check_start(r->grammar, w->gvocab, why, sizeof why);
            if (rc == -E2BIG)
                grammar_error(g, "%s", why);
            else
                emit_error(g, rc, false, false, "%s", why);
            goto ended;
        }
        g->gm_on = !r->grammar_after_think;
    }
    if (w->device_broken) {
        /* The last reset failed: try once more before giving the device work. */
        if ((rc = eng_device_reset(w->dev, msg, sizeof msg))) {
            eng__gen_device_down(g, msg);
            goto ended;
        }
        atomic_fetch_add_explicit(&w->m.device_resets, 1, memory_order_relaxed);
        w->device_broken = false;
        atomic_store_explicit(&w->m.device_down, false, memory_order_relaxed);
    }
    eng_sampler_accept_prompt(g->sampler, r->prompt, r->n_prompt);
    if (r->prompt_logprobs &&
        !(g->plogits = malloc((size_t)SCORE_ROWS * (size_t)w->n_vocab * sizeof *g->plogits))) {
        emit_error(g, -ENOMEM, true, false, "out of memory for the prompt's logits");
        goto ended;
    }
    g->slot = pick_slot(w, r, &g->n_cached);
    if (r->prompt_logprobs)   /* every position's logits are wanted: none is skipped */
        g->n_cached = 0;
    g->slot->busy = true;
    g->slot->used = ++w->n_runs;
    g->ids = g->slot->ids;
    memcpy(g->ids, r->prompt, (size_t)r->n_prompt * sizeof *g->ids);
    eng_device_seq_truncate(w->dev, g->slot->seq, g->n_cached);
    g->n_fed = g->n_cached;
    g->slot->n_kv = g->n_cached;
    /* counted once the request reaches the device (not when refused above) */
    atomic_fetch_add_explicit(&w->m.tokens_in, (uint_fast64_t)r->n_prompt, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m.tokens_cached, (uint_fast64_t)g->n_cached,
                              memory_order_relaxed);
    return g;
ended:
    gen_free(g);
    return NULL;
}

void eng__gen_finish(struct gen *g)
{
    struct eng_worker *w = g->w;
    char msg[256];
    int rc;
    /* Ended by a stop or the length: the K that ran the whole request is worth
     * remembering. */
    if (g->succeeded && w->kstate_path && eng_kpolicy_succeeded(&w->kp)) {
        int k = eng_kpolicy_k(&w->kp);
        rc = eng_kstate_save(w->kstate_path, w->model_id, w->device_name, k, w->n_layers, msg,
                             sizeof msg);
        if (rc < 0 || rc == 1)
            eng__worker_log(w, ENG_LOG_WARN, "runlist K: %s", msg);
        if (rc >= 0)
            eng__worker_log(w, ENG_LOG_INFO, "runlist K: remembered %d layers per runlist in %s",
                            k, w->kstate_path);
    }
    /* A run of good tokens at a reduced K: the next request probes a larger one. */
    int k_before = eng_kpolicy_k(&w->kp);
    if (g->succeeded && eng_kpolicy_grow(&w->kp, g->n_fed - g->n_cached) > 0) {
        if (eng__worker_replan(w)) {
            eng__worker_log(w, ENG_LOG_ERROR, "cannot plan runlists of %d layers; keeping K %d",
                            eng_kpolicy_k(&w->kp), k_before);
            w->kp.k = k_before;
            w->kp.probing = false;
            eng__worker_replan(w);
        } else {
            atomic_fetch_add_explicit(&w->m.k_probes, 1, memory_order_relaxed);
            eng__worker_log(w, ENG_LOG_INFO,
                            "runlist K %d -> %d: probing a larger K after %d tokens without a "
                            "fault", k_before, eng_kpolicy_k(&w->kp), w->kp.probe_after);
        }
    }
    /* what the slot's KV now holds, for later (a fault may have emptied it) */
    g->slot->n_kv = g->n_fed;
    g->slot->busy = false;
    gen_free(g);
}
