/* Running one generation request on the device: prefill in chunks, decode token
 * by token, each step cut into runlists by the plan, and what happens when a
 * runlist does not complete.
 *
 * ---- The state of a request ----------------------------------------------------
 *
 *   ids[0 .. n_prompt)                   the prompt
 *   ids[n_prompt .. n_prompt + n_gen)    the tokens sampled so far
 *   n_fed                                positions in the device's KV cache
 *   have_logits                          w->logits hold the next token's logits
 *
 * Each turn of the loop does one thing: a prompt chunk (while n_fed < n_prompt),
 * a replayed decode step (see below), sampling (when the logits are there), or a
 * decode step that feeds the last sampled token. Decode step j feeds token
 * ids[n_prompt + j] at position n_prompt + j (fault.h's `token=j` in decode).
 *
 * ---- Replay ----------------------------------------------------------------------
 *
 * When a runlist ends in anything but COMPLETED the worker resets the device and
 * drops the sequence's KV state (eng_device_seq_truncate 0: the device lost it).
 * If the K policy says RETRY (AUTO mode, a hang-like state, K > 1, retries left)
 * the request goes on with the smaller K from n_fed = 0: the loop rebuilds the KV
 * cache and continues exactly where it stopped.
 *   - Nothing sampled yet: the prompt is prefilled again and its logits give the
 *     first token: the request restarts from scratch, invisibly.
 *   - Tokens already emitted (a fault in decode): they are never taken back. The
 *     prompt is prefilled again (no logits needed), then every generated token but
 *     the last is fed again as the decode step it was, one position per step, with
 *     no logits (the HEAD commits the position without lm_head); then the failed
 *     step runs again. The batches are the ones of the first pass (same prompt
 *     chunks, same single-token decode steps; only the layer split differs, which
 *     eng_seq_layers does not see), so the rebuilt KV cache is bit-identical to the
 *     lost one and the output is the same as a run without the fault. The sampler
 *     and the detokenizer are not replayed: they only ever see new tokens.
 * Replay costs one decode step per generated token; it happens only after a fault.
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

enum step_rc { STEP_OK = 0, STEP_CANCELLED, STEP_FAULT };

struct gen {
    struct eng_worker *w;
    eng_gen_req *r;
    eng_sampler *sampler;
    eng_detok *detok;
    eng_gram_matcher *gm;        /* constrained decoding, or NULL */
    bool gm_on;                  /* the grammar applies (false until "</think>") */
    char tail[8];                /* the last bytes output, to see "</think>" */
    int32_t *ids;
    int n_prompt, n_gen, n_fed;
    int n_cached;                /* prompt positions reused from the KV cache */
    bool have_logits;
    bool succeeded;              /* ended in stop or length */
    int64_t t_start, t_prompt_done;
    struct eng_gen_timings tm;
    /* the last failed runlist */
    struct eng_device_error derr;
    char dev_message[160];
};

/* ---- one step: the plan's runlists, one after the other ---------------------------- */

static void count_run(struct gen *g, const struct eng_run_result *res)
{
    struct eng_worker *w = g->w;
    double ms = (double)res->elapsed_us / 1e3;
    g->tm.runlists++;
    g->tm.device_ms += ms;
    if (ms > g->tm.max_runlist_ms)
        g->tm.max_runlist_ms = ms;
    int st = eng_ert_valid(res->state) ? (int)res->state : 0;  /* [0]: outside 1..11 */
    g->tm.runlists_by_state[st]++;
    atomic_fetch_add_explicit(&w->m.runlists_by_state[st], 1, memory_order_relaxed);
}

/* Run one batch (a prompt chunk or a decode step) through every runlist of the
 * plan. `pc` is the prompt chunk in prefill, NULL in decode. */
static enum step_rc run_step(struct gen *g, enum eng_phase phase, const int32_t *tokens, int n,
                             int token_index, bool want_logits,
                             const struct eng_prefill_chunk *pc)
{
    struct eng_worker *w = g->w;
    const struct eng_plan *plan = &w->plan;
    struct eng_batch b = {
        .tokens = tokens,
        .n_tokens = n,
        .logits = want_logits ? w->logits : NULL,
        .phase = phase,
        .token_index = token_index,
        .cancel = &g->r->cancel,
    };
    for (int i = 0; i < plan->n_runlists; i++) {
        const struct eng_runlist *rl = &plan->runlists[i];
        if (i > 0) {
            if (eng_gen_req_cancelled(g->r))
                return STEP_CANCELLED;
            eng__worker_sweep(w);
        }
        struct eng_run_result res;
        int rc = eng_device_run_runlist(w->dev, w->cur->seq, rl, &b, &res);
        count_run(g, &res);
        if (rc == 0)
            continue;

        struct eng_device_error *e = &g->derr;
        eng_device_error_init(e, res.state, phase);
        e->chunk_index = rl->index;
        e->chunk_count = plan->n_runlists;
        e->layer_begin = rl->layer_begin;
        e->layer_end = rl->layer_end;
        e->failed_layer = res.failed_layer;
        e->token_pos = g->n_fed;
        e->n_tokens = n;
        if (pc) {
            e->prefill_chunk_index = pc->index;
            e->prefill_chunk_count = pc->count;
        }
        e->elapsed_ms = (double)res.elapsed_us / 1e3;
        eng_device_error_set_device(e, w->device_name);
        e->attempts = w->kp.attempts;
        snprintf(g->dev_message, sizeof g->dev_message, "%s", res.message);
        return STEP_FAULT;
    }
    return STEP_OK;
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
    g->tm.attempts = g->w->kp.attempts > 0 ? g->w->kp.attempts : 1;
    g->tm.k = eng_kpolicy_k(&g->w->kp);
}

static void emit_done(struct gen *g, enum eng_finish finish)
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
    ev.done.timings = g->tm;
    g->succeeded = finish != ENG_FINISH_CANCELLED;
    atomic_fetch_add_explicit(finish == ENG_FINISH_STOP     ? &w->m.finished_stop
                              : finish == ENG_FINISH_LENGTH ? &w->m.finished_length
                                                            : &w->m.cancelled,
                              1, memory_order_relaxed);
    w->emit(w->emit_ctx, &ev);
    free(tail);
}

static void emit_error(struct gen *g, int code, bool retryable, bool device, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void emit_error(struct gen *g, int code, bool retryable, bool device, const char *fmt, ...)
{
    struct eng_worker *w = g->w;
    finish_timings(g);
    struct eng_event ev = {.kind = ENG_EVENT_ERROR, .req = g->r, .user = g->r->user};
    struct eng_error_event *e = &ev.error;
    e->code = code;
    e->retryable = retryable;
    e->has_device_error = device;
    if (device)
        e->device = g->derr;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->prompt_tokens = g->n_prompt;
    e->cached_tokens = g->n_cached;
    e->completion_tokens = g->n_gen;
    e->timings = g->tm;
    atomic_fetch_add_explicit(&w->m.failed, 1, memory_order_relaxed);
    w->emit(w->emit_ctx, &ev);
}

/* ---- a device fault -------------------------------------------------------------- */

/* Reset, drop the KV state, ask the policy. Returns true to replay, false when the
 * request has ended (its final event emitted). */
static bool on_fault(struct gen *g)
{
    struct eng_worker *w = g->w;
    char err[256] = "";
    int state = g->derr.state;
    int rc = eng_device_reset(w->dev, err, sizeof err);
    if (rc == 0) {
        atomic_fetch_add_explicit(&w->m.device_resets, 1, memory_order_relaxed);
        w->device_broken = false;
        atomic_store_explicit(&w->m.device_down, false, memory_order_relaxed);
    } else {
        w->device_broken = true;
        atomic_store_explicit(&w->m.device_down, true, memory_order_relaxed);
        w->broken_by = g->derr;
        eng__worker_log(w, ENG_LOG_ERROR, "device %s: reset failed: %s", w->device_name, err);
    }
    eng_device_seq_truncate(w->dev, w->cur->seq, 0);
    g->n_fed = 0;
    /* A reset may lose every sequence's device state, not just this one's. */
    for (int i = 0; i < w->n_slots; i++)
        w->slots[i].n_kv = 0;
    g->have_logits = false;

    char line[384];
    eng_device_error_format(&g->derr, line, sizeof line);
    if (eng_gen_req_cancelled(g->r)) {
        emit_done(g, ENG_FINISH_CANCELLED);
        return false;
    }
    if (w->device_broken) {
        emit_error(g, -EIO, false, true, "%s: %s; the device did not recover: %s", line,
                   g->dev_message, err);
        return false;
    }
    int k_before = eng_kpolicy_k(&w->kp);
    enum eng_kverdict v = eng_kpolicy_failed(&w->kp, state);
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
                        (unsigned long long)eng_gen_req_seq_no(g->r), k, w->kp.attempts);
        return true;
    }
    g->derr.attempts = w->kp.attempts;
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
 * Returns 0 or -EINVAL (the token left the grammar: cannot happen after the mask). */
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

/* Sample the next token from w->logits and report it. Returns true when the
 * request has ended (its final event emitted). */
static bool sample_token(struct gen *g)
{
    struct eng_worker *w = g->w;
    eng_gen_req *r = g->r;
    if (r->logprobs)
        memcpy(w->raw_logits, w->logits, (size_t)w->n_vocab * sizeof *w->logits);
    if (g->gm_on && eng_gram_matcher_apply(g->gm, w->logits, w->n_vocab) <= 0) {
        emit_error(g, -ENOMEM, true, false, "grammar: no token can continue the output");
        return true;
    }
    int32_t id = eng_sampler_sample(g->sampler, w->logits);
    if (g->gm && grammar_step(g, id)) {
        emit_error(g, -EINVAL, false, false, "grammar: token %d does not continue the output",
                   id);
        return true;
    }
    eng_sampler_accept(g->sampler, id);
    g->ids[g->n_prompt + g->n_gen] = id;
    g->n_gen++;
    atomic_fetch_add_explicit(&w->m.tokens_out, 1, memory_order_relaxed);

    if (is_stop_id(r, id)) {
        emit_done(g, ENG_FINISH_STOP);
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
        emit_done(g, ENG_FINISH_STOP);
        return true;
    }
    if ((r->max_tokens > 0 && g->n_gen >= r->max_tokens) || g->n_prompt + g->n_gen >= w->n_ctx) {
        emit_done(g, ENG_FINISH_LENGTH);
        return true;
    }
    return false;
}

/* ---- the request ------------------------------------------------------------------- */

/* One turn of the loop (see the top of the file). Returns a step result, or
 * STEP_OK with *ended when sampling ended the request. */
static enum step_rc turn(struct gen *g, bool *ended)
{
    struct eng_worker *w = g->w;
    if (g->n_fed < g->n_prompt) {
        struct eng_prefill_chunk pc;
        eng_plan_prefill_chunk(g->n_prompt, w->prefill_chunk, g->n_fed / w->prefill_chunk, &pc);
        if (pc.token_begin < g->n_fed) { /* after a cached prefix: the chunk's rest */
            pc.n_tokens -= g->n_fed - pc.token_begin;
            pc.token_begin = g->n_fed;
        }
        bool want = pc.last && g->n_gen == 0;
        enum step_rc rc = run_step(g, ENG_PHASE_PREFILL, g->ids + pc.token_begin, pc.n_tokens,
                                   pc.token_begin, want, &pc);
        if (rc == STEP_OK) {
            g->n_fed += pc.n_tokens;
            if (want) {
                g->have_logits = true;
                if (!g->t_prompt_done)
                    g->t_prompt_done = ut_now_us();
            }
        }
        return rc;
    }
    if (g->have_logits) {
        g->have_logits = false;
        *ended = sample_token(g);
        return STEP_OK;
    }
    /* A decode step: a replayed one (no logits) or the one that feeds the last
     * sampled token. */
    int step = g->n_fed - g->n_prompt;
    bool want = g->n_fed == g->n_prompt + g->n_gen - 1;
    enum step_rc rc = run_step(g, ENG_PHASE_DECODE, g->ids + g->n_fed, 1, step, want, NULL);
    if (rc == STEP_OK) {
        g->n_fed++;
        g->have_logits = want;
    }
    return rc;
}

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

void eng__worker_run(struct eng_worker *w, eng_gen_req *r)
{
    struct gen g = {.w = w, .r = r, .n_prompt = r->n_prompt};
    g.t_start = ut_now_us();
    g.tm.queue_ms = (double)(g.t_start - r->t_submit_us) / 1e3;
    char msg[256];
    int rc;
    eng_kpolicy_begin(&w->kp);

    if (eng_gen_req_cancelled(r)) {
        eng__worker_done_cancelled(w, r, g.tm.queue_ms);
        return;
    }
    if ((rc = check_request(&g, msg, sizeof msg))) {
        emit_error(&g, rc, false, false, "%s", msg);
        return;
    }
    if ((rc = eng_sampler_new(&r->sampling, w->n_vocab, &g.sampler, msg, sizeof msg))) {
        emit_error(&g, rc, false, false, "%s", msg);
        goto out;
    }
    g.detok = eng_detok_new_len(w->tok, true, (const char *const *)r->stop, r->stop_len,
                                (size_t)r->n_stop);
    if (!g.detok) {
        emit_error(&g, -ENOMEM, true, false, "out of memory");
        goto out;
    }
    eng_detok_keep_markup(g.detok);  /* the output parser reads <function ...</function> */
    if (r->grammar) {
        if (!w->gvocab && !(w->gvocab = eng_gram_vocab_new(w->tok))) {
            emit_error(&g, -ENOMEM, true, false, "out of memory");
            goto out;
        }
        rc = eng_gram_matcher_new(r->grammar, w->gvocab, r->stop_ids, r->n_stop_ids, &g.gm);
        if (rc) {
            emit_error(&g, rc, false, false, "grammar: %s",
                       rc == -ENOMEM ? "out of memory" : "it cannot start");
            goto out;
        }
        g.gm_on = !r->grammar_after_think;
    }
    if (w->device_broken) {
        /* The last reset failed: try once more before giving the device work. */
        if ((rc = eng_device_reset(w->dev, msg, sizeof msg))) {
            g.derr = w->broken_by;   /* -EIO always carries a device error (worker.h) */
            emit_error(&g, -EIO, false, true, "device %s did not recover: %s", w->device_name,
                       msg);
            goto out;
        }
        atomic_fetch_add_explicit(&w->m.device_resets, 1, memory_order_relaxed);
        w->device_broken = false;
        atomic_store_explicit(&w->m.device_down, false, memory_order_relaxed);
    }
    eng_sampler_accept_prompt(g.sampler, r->prompt, r->n_prompt);
    w->cur = pick_slot(w, r, &g.n_cached);
    w->cur->used = ++w->n_runs;
    g.ids = w->cur->ids;
    memcpy(g.ids, r->prompt, (size_t)r->n_prompt * sizeof *g.ids);
    eng_device_seq_truncate(w->dev, w->cur->seq, g.n_cached);
    g.n_fed = g.n_cached;
    w->cur->n_kv = g.n_cached;
    /* counted once the request reaches the device (not when refused above) */
    atomic_fetch_add_explicit(&w->m.tokens_in, (uint_fast64_t)r->n_prompt, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m.tokens_cached, (uint_fast64_t)g.n_cached,
                              memory_order_relaxed);

    for (;;) {
        /* Between tokens, prompt chunks and replays: the cancel point. */
        if (eng_gen_req_cancelled(r)) {
            emit_done(&g, ENG_FINISH_CANCELLED);
            goto out;
        }
        eng__worker_sweep(w);
        bool ended = false;
        switch (turn(&g, &ended)) {
        case STEP_OK:
            if (!ended)
                continue;
            break;
        case STEP_CANCELLED:
            emit_done(&g, ENG_FINISH_CANCELLED);
            break;
        case STEP_FAULT:
            if (on_fault(&g))
                continue;
            goto out;   /* ended in ERROR or cancelled: nothing to remember */
        }
        break;
    }

    /* Ended by a stop or the length: the K that ran the whole request is worth
     * remembering. */
    if (g.succeeded && w->kstate_path && eng_kpolicy_succeeded(&w->kp)) {
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
    if (g.succeeded && eng_kpolicy_grow(&w->kp, g.n_fed - g.n_cached) > 0) {
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
out:
    if (g.ids && g.n_fed > w->cur->n_kv) /* what the slot's KV now holds, for later */
        w->cur->n_kv = g.n_fed;
    eng_detok_free(g.detok);
    eng_gram_matcher_free(g.gm);
    eng_sampler_free(g.sampler);
}
