/* The worker (engine/worker/worker.h) on the `deep` pack: the prompt cache. The
 * next turn of a conversation reuses the prefix the KV cache holds and gives the
 * tokens a cold worker gives; a replay after a fault drops the cache; several
 * slots keep a conversation across unrelated requests; off, nothing is reused.
 *
 * Packs: generated with minicpmd-pack gen (MINICPMD_PACK) into MINICPMD_TEST_WORK. */
#include "engine/worker/worker.h"
#include "tests/check.h"
#include "tests/worker-fx.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
