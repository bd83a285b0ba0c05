/* The worker thread: which sequences run each step, and how.
 *
 * Up to `parallel` requests run at once, each a sequence on its own slot (its KV
 * cache; gen.c). New requests join at step boundaries, in FIFO order. One step:
 *
 *   1. each sequence whose logits are there samples its next token (gen.c), and
 *      a cancelled one ends;
 *   2. each remaining sequence contributes one piece of work: a prompt chunk
 *      while its prompt is not all in the KV cache (at most `step_prefill` prompt
 *      tokens in a step that also carries decodes, so a long prompt does not
 *      stall the streams beside it: the prefill is chunked and interleaved), or
 *      one decode position: a replayed one (no logits) or the one that feeds the
 *      last sampled token;
 *   3. the pieces run through the plan's runlists (each waited before the next):
 *      on a device that batches (cpu) as ONE batch, every weight read once for all
 *      of them (llama.cpp's continuous batching, vLLM's); on one that does not
 *      (the NPU's kernels decode one position per run, and the sim models it) one
 *      sequence after the other, each its own runlists: token-granularity round
 *      robin, so a short request finishes while a long one streams. There, a
 *      prompt chunk the device can compute off this thread while others run
 *      (eng_device_prefill_start: xrt's prompt on the CPU beside NPU decode)
 *      goes to the background; the sequence waits out the steps until it is
 *      done, and the next step's start collects it (its hand-off to the device
 *      runs here). A step with only background work waits for it.
 *
 * Numerics: every kernel computes a token's row the same whatever else is in the
 * batch (engine/model/model.h, eng_seqs_embed), so a sequence's tokens are the
 * same alone, beside others, cut into other prompt chunks, or replayed.
 *
 * ---- The state of a sequence ----------------------------------------------------
 *
 *   ids[0 .. n_prompt)                   the prompt
 *   ids[n_prompt .. n_prompt + n_gen)    the tokens sampled so far
 *   n_fed                                positions in the device's KV cache
 *   have_logits                          the slot's logits are the next token's
 *
 * Decode step j feeds token ids[n_prompt + j] at position n_prompt + j (fault.h's
 * `token=j` in decode).
 *
 * ---- Faults and replay -------------------------------------------------------------
 *
 * When a runlist ends in anything but COMPLETED the worker resets the device. A
 * reset loses every sequence's device state (a real NPU context reset does), so
 * every running sequence drops its KV (n_fed = 0) and rebuilds it: the prompt again
 * (no logits unless nothing was sampled yet), then every generated token but the
 * last, one decode position each, no logits; then it goes on where it stopped. The
 * rebuilt KV cache is bit-identical to the lost one (batch invariance), and the
 * sampler and the detokenizer only ever see new tokens, so the output is the same
 * as without the fault. Only the sequence whose step failed asks the K policy
 * (gen.c eng__gen_after_fault): replay with a smaller K, or end in ERROR with the
 * struct eng_device_error; the others just replay. On a batching device a failed
 * step fails every sequence in it. When the reset itself fails the device is down:
 * every running sequence ends in the non-retryable device error, and each new
 * request tries the reset again first. Background chunks are waited out and
 * dropped before a reset (their sequences replay like the others) and before a
 * sequence ends. */
#include "engine/worker/worker-impl.h"
#include "util/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The piece g contributes to this step, within *budget prompt tokens (< 0: no
 * limit). Returns false when g waits this step (no budget left for its prompt). */
static bool plan_item(struct gen *g, int *budget, struct worker_item *it)
{
    struct eng_worker *w = g->w;
    *it = (struct worker_item){.g = g};
    if (g->bg_on)
        return false;   /* its prompt chunk is being computed in the background */
    if (g->follow) {   /* the same prompt as a running sequence: copy its KV */
        struct gen *a = g->follow;
        if (a->n_fed < g->share)
            return false;   /* until its prefill got that far */
        g->follow = NULL;
        if (g->n_fed < g->share &&
            eng_device_seq_copy(w->dev, g->slot->seq, a->slot->seq, g->share) == 0) {
            atomic_fetch_add_explicit(&w->m.tokens_cached, (uint_fast64_t)(g->share - g->n_fed),
                                      memory_order_relaxed);
            g->n_cached = g->share;
            g->n_fed = g->share;
        }
    }
    if (g->n_fed < g->n_prompt) {
        struct eng_prefill_chunk *pc = &it->pc;
        eng_plan_prefill_chunk(g->n_prompt, w->prefill_chunk, g->n_fed / w->prefill_chunk, pc);
        if (pc->token_begin < g->n_fed) { /* after a cached prefix or a cut chunk: its rest */
            pc->n_tokens -= g->n_fed - pc->token_begin;
            pc->token_begin = g->n_fed;
        }
        if (*budget == 0)
            return false;
        if (*budget > 0 && pc->n_tokens > *budget)
            pc->n_tokens = *budget;
        if (g->plogits && pc->n_tokens > SCORE_ROWS)
            pc->n_tokens = SCORE_ROWS;
        if (*budget > 0)
            *budget -= pc->n_tokens;
        pc->last = pc->token_begin + pc->n_tokens == g->n_prompt;
        it->prefill = true;
        it->want = pc->last && g->n_gen == 0;
        it->b = (struct eng_batch){.tokens = g->ids + pc->token_begin,
                                   .n_tokens = pc->n_tokens,
                                   .phase = ENG_PHASE_PREFILL,
                                   .token_index = pc->token_begin};
    } else {
        it->want = g->n_fed == g->n_prompt + g->n_gen - 1;
        it->b = (struct eng_batch){.tokens = g->ids + g->n_fed,
                                   .n_tokens = 1,
                                   .phase = ENG_PHASE_DECODE,
                                   .token_index = g->n_fed - g->n_prompt};
    }
    it->b.logits = it->want ? g->slot->logits : NULL;
    if (it->prefill && g->plogits) {
        it->score = true;
        it->b.logits = g->plogits;
        it->b.n_logits = it->b.n_tokens;
    }
    it->b.cancel = &g->r->cancel;
    return true;
}

/* The piece ran: its positions are in the KV cache. */
static void item_done(struct worker_item *it)
{
    struct gen *g = it->g;
    g->n_fed += it->b.n_tokens;
    if (it->score) {
        eng__gen_score(g, it->b.token_index, it->b.n_tokens, it->want);
        if (g->have_logits && !g->t_prompt_done)
            g->t_prompt_done = ut_now_us();
    } else if (it->want) {
        g->have_logits = true;
        if (it->prefill && !g->t_prompt_done)
            g->t_prompt_done = ut_now_us();
    }
}

/* A prompt chunk of g to the background while the others run: 1 started, -EBUSY
 * (the host computes another; it waits a step), 0 (run it as usual). */
static int start_bg(struct eng_worker *w, struct worker_item *it)
{
    struct gen *g = it->g;
    int rc = eng_device_prefill_start(w->dev, g->slot->seq, &it->b);
    if (rc != 1)
        return rc;
    g->bg_on = true;
    g->bg = *it;
    g->bg_t0 = ut_now_us();
    g->bg_steps = 0;
    eng__worker_log(w, ENG_LOG_DEBUG, "prefill: prompt tokens %d..%d of a request on the host, "
                    "beside %d running sequence%s", it->b.token_index,
                    it->b.token_index + it->b.n_tokens, w->n_active - 1,
                    w->n_active == 2 ? "" : "s");
    return 1;
}

/* g's background chunk: with `wait` wait for it, else false while it runs. Then it
 * is done (its positions in the KV cache) or failed (g->bg.failed, the device error
 * filled; a step must then reset). */
static bool collect_bg(struct eng_worker *w, struct gen *g, bool wait)
{
    struct eng_run_result res;
    int rc = eng_device_prefill_finish(w->dev, g->slot->seq, wait, &res);
    if (rc == -EAGAIN)
        return false;
    g->bg_on = false;
    eng__gen_count_run(g, &res, true);
    atomic_fetch_add_explicit(res.on_host ? &w->m.prefill_host_us : &w->m.prefill_device_us,
                              (uint64_t)res.elapsed_us, memory_order_relaxed);
    *(res.on_host ? &g->tm.prompt_host_ms : &g->tm.prompt_device_ms) +=
        (double)res.elapsed_us / 1e3;
    if (rc == 0) {
        eng__worker_log(w, ENG_LOG_INFO, "prefill: prompt tokens %d..%d computed on the host "
                        "in %.0f ms and handed to the device %.0f ms after the start; %d "
                        "piece%s of the other sequences ran on the device meanwhile", g->bg.b.token_index,
                        g->bg.b.token_index + g->bg.b.n_tokens, (double)res.elapsed_us / 1e3,
                        (double)(ut_now_us() - g->bg_t0) / 1e3, g->bg_steps,
                        g->bg_steps == 1 ? "" : "s");
        item_done(&g->bg);
        return true;
    }
    eng__gen_fault(g, &w->plan.runlists[0], &res, &g->bg.b, &g->bg.pc);
    g->bg.failed = true;
    return true;
}

/* Wait for every background chunk and drop it (a reset or the sequence's end
 * makes it moot). */
static void drop_bg(struct eng_worker *w, struct gen *g)
{
    struct eng_run_result res;
    if (!g->bg_on)
        return;
    eng_device_prefill_finish(w->dev, g->slot->seq, true, &res);
    g->bg_on = false;
    eng_device_seq_truncate(w->dev, g->slot->seq, g->n_fed);
}

/* Run the pieces through the plan's runlists: as one batch when the device
 * batches, else one sequence after the other. Marks the failed ones. Returns
 * how many failed. */
static int run_items(struct eng_worker *w, struct worker_item *it, int n)
{
    int n_failed = 0;
    if (w->batch && n > 1) {
        eng_device_seq *seqs[WORKER_MAX_SLOTS];
        struct eng_batch bs[WORKER_MAX_SLOTS];
        for (int i = 0; i < n; i++) {
            seqs[i] = it[i].g->slot->seq;
            bs[i] = it[i].b;
            bs[i].cancel = NULL;   /* the cpu does not wait */
        }
        for (int k = 0; k < w->plan.n_runlists; k++) {
            const struct eng_runlist *rl = &w->plan.runlists[k];
            if (k > 0)
                eng__worker_sweep(w);
            struct eng_run_result res;
            int rc = eng_device_run_runlist_multi(w->dev, seqs, rl, bs, n, &res);
            for (int i = 0; i < n; i++)
                eng__gen_count_run(it[i].g, &res, i == 0);
            if (rc == 0)
                continue;
            for (int i = 0; i < n; i++) {
                eng__gen_fault(it[i].g, rl, &res, &it[i].b, it[i].prefill ? &it[i].pc : NULL);
                it[i].failed = true;
            }
            return n;
        }
        for (int i = 0; i < n; i++)
            item_done(&it[i]);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        struct gen *g = it[i].g;
        int k = 0;
        if (it[i].prefill && !it[i].score && w->async && w->n_active > 1) {
            int started = start_bg(w, &it[i]);
            if (started)   /* in the background, or waiting for the host (-EBUSY) */
                continue;
        }
        for (; k < w->plan.n_runlists; k++) {
            const struct eng_runlist *rl = &w->plan.runlists[k];
            if (k > 0) {
                if (eng_gen_req_cancelled(g->r))
                    break;   /* ends at the next step; its batch is dropped then */
                eng__worker_sweep(w);
            }
            struct eng_run_result res;
            int rc = eng_device_run_runlist(w->dev, g->slot->seq, rl, &it[i].b, &res);
            eng__gen_count_run(g, &res, true);
            if (it[i].prefill) {
                atomic_fetch_add_explicit(res.on_host ? &w->m.prefill_host_us
                                                      : &w->m.prefill_device_us,
                                          (uint64_t)res.elapsed_us, memory_order_relaxed);
                *(res.on_host ? &g->tm.prompt_host_ms : &g->tm.prompt_device_ms) +=
                    (double)res.elapsed_us / 1e3;
            }
            if (rc == 0)
                continue;
            eng__gen_fault(g, rl, &res, &it[i].b, it[i].prefill ? &it[i].pc : NULL);
            it[i].failed = true;
            n_failed++;
            break;
        }
        if (it[i].failed)
            break;   /* the device needs a reset before anything else runs */
        if (k == w->plan.n_runlists) {
            item_done(&it[i]);
            for (int j = 0; j < w->n_active; j++)   /* it ran beside their host work */
                w->active[j]->bg_steps += w->active[j]->bg_on && w->active[j] != g;
        }
        else /* cancelled between runlists: drop the half-run batch */
            eng_device_seq_truncate(w->dev, g->slot->seq, g->n_fed);
    }
    return n_failed;
}

/* A step failed: reset the device, rewind every running sequence (the reset lost
 * their KV), and let each failed one ask the policy. */
static void on_fault(struct eng_worker *w, struct worker_item *it, int n)
{
    char err[256] = "";
    for (int i = 0; i < w->n_active; i++)
        drop_bg(w, w->active[i]);
    bool ok = eng_device_reset(w->dev, err, sizeof err) == 0;
    if (ok)
        w->kp.device_changed = eng_device_reset_changed_mode(w->dev);
    if (ok) {
        atomic_fetch_add_explicit(&w->m.device_resets, 1, memory_order_relaxed);
        w->device_broken = false;
        atomic_store_explicit(&w->m.device_down, false, memory_order_relaxed);
    } else {
        w->device_broken = true;
        atomic_store_explicit(&w->m.device_down, true, memory_order_relaxed);
        for (int i = 0; i < n; i++)
            if (it[i].failed) {
                w->broken_by = it[i].g->derr;
                break;
            }
        eng__worker_log(w, ENG_LOG_ERROR, "device %s: reset failed: %s", w->device_name, err);
    }
    for (int i = 0; i < w->n_slots; i++) {
        eng_device_seq_truncate(w->dev, w->slots[i].seq, 0);
        w->slots[i].n_kv = 0;
    }
    for (int i = 0; i < w->n_active; i++) {
        w->active[i]->n_fed = 0;
        w->active[i]->have_logits = false;
    }
    for (int i = 0; i < n; i++)
        if (it[i].failed)
            eng__gen_after_fault(it[i].g, ok, err);
    if (!ok)   /* the others cannot run either */
        for (int i = 0; i < w->n_active; i++)
            if (!w->active[i]->ended)
                eng__gen_device_down(w->active[i], err);
}

/* Drop the sequences that ended (in order), freeing their slots. */
static void reap(struct eng_worker *w)
{
    for (int i = 0; i < w->n_active; i++)
        for (int j = 0; j < w->n_active && w->active[i]->ended; j++)
            if (w->active[j]->follow == w->active[i])
                w->active[j]->follow = NULL;   /* it prefills on its own */
    int kept = 0;
    for (int i = 0; i < w->n_active; i++) {
        struct gen *g = w->active[i];
        if (!g->ended) {
            w->active[kept++] = g;
            continue;
        }
        eng_gen_req *r = g->r;
        drop_bg(w, g);
        eng__gen_finish(g);
        pthread_mutex_lock(&w->mu);
        for (int j = 0; j < WORKER_MAX_SLOTS; j++)
            if (w->running[j] == r) {
                w->running[j] = NULL;
                break;
            }
        pthread_mutex_unlock(&w->mu);
        eng_gen_req_free(r);
    }
    w->n_active = kept;
    atomic_store_explicit(&w->m.active, kept, memory_order_relaxed);
    atomic_store(&w->m.busy, kept > 0);
}

/* One step over every running sequence (the top of the file). */
/* Background chunks that are done; true when one failed (the step is over: the
 * device was reset). With `wait`, waits for the first one still running. */
static bool collect_all(struct eng_worker *w, bool wait)
{
    for (int i = 0; i < w->n_active; i++) {
        struct gen *g = w->active[i];
        if (!g->bg_on || !collect_bg(w, g, wait))
            continue;
        wait = false;
        if (g->bg.failed) {
            on_fault(w, &g->bg, 1);
            reap(w);
            return true;
        }
    }
    return false;
}

static void step(struct eng_worker *w)
{
    /* 0. prompt chunks computed in the background */
    if (collect_all(w, false))
        return;

    /* 1. sampling and cancellation */
    for (int i = 0; i < w->n_active; i++) {
        struct gen *g = w->active[i];
        if (eng_gen_req_cancelled(g->r))
            eng__gen_done(g, ENG_FINISH_CANCELLED);
        else if (g->have_logits && g->n_fed >= g->n_prompt) {
            g->have_logits = false;
            eng__gen_sample(g);
        }
    }
    reap(w);
    if (!w->n_active)
        return;
    eng__worker_sweep(w);

    /* 2. one piece per sequence; the prompt budget only beside decodes */
    int n_decoding = 0;
    for (int i = 0; i < w->n_active; i++)
        n_decoding += w->active[i]->n_fed >= w->active[i]->n_prompt;
    int budget = n_decoding ? w->step_prefill : -1;
    if (w->batch && w->max_batch > 0) {   /* one batch holds them all */
        int room = w->max_batch - n_decoding;
        budget = budget < 0 || budget > room ? room : budget;
    }
    struct worker_item it[WORKER_MAX_SLOTS];
    int n = 0;
    for (int i = 0; i < w->n_active; i++)
        if (plan_item(w->active[i], &budget, &it[n]))
            n++;
    if (!n) {   /* only background work: wait for it */
        collect_all(w, true);
        return;
    }

    /* 3. run */
    atomic_fetch_add_explicit(&w->m.steps, 1, memory_order_relaxed);
    int b = (w->batch ? n : 1) - 1;
    atomic_fetch_add_explicit(&w->m.batch_hist[b < WORKER_BATCH_BUCKETS ? b
                                                : WORKER_BATCH_BUCKETS - 1],
                              1, memory_order_relaxed);
    int n_failed = run_items(w, it, n);
    if (n_failed)
        on_fault(w, it, n);
    reap(w);
}

/* A running sequence whose ids begin with g's prompt but its last token (`n` > 1
 * choices, or the same prompt sent twice): g copies that prefix of its KV once the
 * leader has computed it, instead of computing it again. */
static void find_leader(struct eng_worker *w, struct gen *g)
{
    int share = g->n_prompt - 1;
    if (!eng_device_can_copy(w->dev) || g->n_cached >= share || g->plogits)
        return;
    for (int i = 0; i < w->n_active; i++) {
        struct gen *a = w->active[i];
        if (!a->ended && a->n_prompt + a->n_gen >= share &&
            memcmp(a->ids, g->ids, (size_t)share * sizeof *g->ids) == 0) {
            g->follow = a;
            g->share = share;
            return;
        }
    }
}

/* Take queued requests while there is room; false when the worker should exit
 * (stopping, and nothing queued or running). Waits while there is nothing to do. */
static bool admit(struct eng_worker *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->stopping && w->count == 0 && w->n_active == 0)
        pthread_cond_wait(&w->cv, &w->mu);
    if (w->stopping && w->count == 0 && w->n_active == 0) {
        pthread_mutex_unlock(&w->mu);
        return false;
    }
    eng_gen_req *taken[WORKER_MAX_SLOTS];
    int n = 0;
    while (w->count > 0 && w->n_active + n < w->parallel) {
        eng_gen_req *r = w->ring[w->head];
        w->head = (w->head + 1) % w->queue_size;
        w->count--;
        if (w->stopping)
            atomic_store(&r->cancel, true);
        taken[n++] = r;
    }
    atomic_store_explicit(&w->m.queue_depth, w->count, memory_order_relaxed);
    pthread_mutex_unlock(&w->mu);

    int64_t now = ut_now_us();
    for (int i = 0; i < n; i++) {
        eng_gen_req *r = taken[i];
        atomic_fetch_add_explicit(&w->m.queue_wait_us, (uint_fast64_t)(now - r->t_submit_us),
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&w->m.queue_waits, 1, memory_order_relaxed);
        struct gen *g = eng__gen_start(w, r);
        if (!g) {
            eng_gen_req_free(r);
            continue;
        }
        pthread_mutex_lock(&w->mu);
        for (int j = 0; j < WORKER_MAX_SLOTS; j++)
            if (!w->running[j]) {
                w->running[j] = r;
                break;
            }
        if (w->stopping)
            atomic_store(&r->cancel, true);
        pthread_mutex_unlock(&w->mu);
        find_leader(w, g);
        w->active[w->n_active++] = g;
        atomic_store_explicit(&w->m.active, w->n_active, memory_order_relaxed);
        atomic_store(&w->m.busy, true);
    }
    return true;
}

void *eng__worker_main(void *arg)
{
    struct eng_worker *w = arg;
    while (admit(w))
        step(w);
    return NULL;
}
