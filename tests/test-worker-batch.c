/* Several sequences on one worker (engine/worker/sched.c) on the `deep` pack:
 *   - the model: a batch of several sequences gives each the logits it gets
 *     alone, bit for bit (eng_seqs_embed / eng_seqs_head), and a batch's rows
 *     of logits (a prompt scored) are decode's, position by position;
 *   - the cpu device batches: 4 requests with different prompts submitted at
 *     once give the tokens and logprobs each gives alone, and they did run in
 *     shared steps;
 *   - the sim device (the NPU's model) interleaves: a 16-token request submitted
 *     after a 2000-token one started ends while the long one has produced less
 *     than 15 % of its tokens;
 *   - a fault in one sequence's step leaves the others' output as a fault-free
 *     run gives it (they replay after the reset), in ALL mode (the failing one
 *     ends in ERROR) and in AUTO mode (it replays too).
 *
 * Packs: generated with minicpmd-pack gen (MINICPMD_PACK) into MINICPMD_TEST_WORK. */
#include "engine/model/model.h"
#include "engine/worker/worker.h"
#include "tests/check.h"
#include "tests/worker-fx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t p1[] = {0, 5, 17, 300, 42, 7, 99, 512, 3, 14};
static const int32_t p2[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
static const int32_t p3[] = {200, 100, 50, 25};
static const int32_t p4[] = {7, 7, 7, 7, 7, 7, 1000, 900, 800, 700, 600, 500, 400};
static const int32_t *const prompts[] = {p1, p2, p3, p4};
static const int n_prompts[] = {10, 19, 4, 13};

/* ---- the model ------------------------------------------------------------------------- */

/* A prompt scored in one batch (every position's logits, eng_seq_head_rows, alone
 * and beside another sequence, eng_seqs_head_rows) gives each position the logits
 * decode gives it, position by position: bit for bit. */
MCD_TEST(batch, model_head_rows_equal_decode_position_by_position)
{
    char err[512] = "";
    eng_pack *pack = NULL;
    cr_assert_eq(eng_pack_open(pack_dir("deep"), &pack, err, sizeof err), 0, "%s", err);
    eng_model *m = NULL;
    struct eng_model_opts mo = {.n_threads = 2};
    cr_assert_eq(eng_model_open(pack, &mo, &m, err, sizeof err), 0, "%s", err);
    int V = eng_model_get_info(m)->hp.n_vocab, nl = eng_model_get_info(m)->hp.n_layers;
    enum { N = 19 };
    eng_seq *dec, *one, *lead, *other;
    cr_assert_eq(eng_seq_new(m, 64, &dec, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_seq_new(m, 64, &one, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_seq_new(m, 64, &lead, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_seq_new(m, 64, &other, err, sizeof err), 0, "%s", err);
    float *want = calloc((size_t)N * V, sizeof(float)), *got = calloc((size_t)N * V, sizeof(float));
    float *got2 = calloc((size_t)N * V, sizeof(float)), *last = calloc((size_t)V, sizeof(float));
    cr_assert(want && got && got2 && last);
    for (int t = 0; t < N; t++)   /* decode: one position at a time */
        cr_assert_eq(eng_seq_forward(dec, &p2[t], 1, want + (size_t)t * V), 0);
    cr_assert_eq(eng_seq_embed(one, p2, N), 0);
    cr_assert_eq(eng_seq_layers(one, 0, nl), 0);
    cr_assert_eq(eng_seq_head_rows(one, got, N), 0, "%s", eng_seq_error(one));
    cr_assert_eq(memcmp(want, got, (size_t)N * V * sizeof(float)), 0,
                 "a batch's rows differ from decode's logits");
    cr_assert_eq(eng_seq_len(one), N);
    /* beside another sequence that wants its last position only */
    eng_seq *seqs[2] = {lead, other};
    const int32_t *toks[2] = {p1, p2};
    int ns[2] = {10, N}, rows[2] = {1, N};
    float *lg[2] = {last, got2};
    cr_assert_eq(eng_seqs_embed(seqs, toks, ns, 2), 0, "%s", eng_seq_error(lead));
    cr_assert_eq(eng_seq_layers(lead, 0, nl), 0);
    cr_assert_eq(eng_seqs_head_rows(lead, lg, rows), 0, "%s", eng_seq_error(lead));
    cr_assert_eq(memcmp(want, got2, (size_t)N * V * sizeof(float)), 0,
                 "batched rows differ from decode's logits");
    /* more rows than positions: refused */
    cr_assert_eq(eng_seq_embed(one, p3, 4), 0);
    cr_assert_eq(eng_seq_layers(one, 0, nl), 0);
    cr_assert_eq(eng_seq_head_rows(one, got, 5), -EINVAL);
    cr_assert_eq(eng_seq_head_rows(one, got, 4), 0, "%s", eng_seq_error(one));
    free(want), free(got), free(got2), free(last);
    eng_seq_free(dec), eng_seq_free(one), eng_seq_free(lead), eng_seq_free(other);
    eng_model_free(m);
    eng_pack_free(pack);
}


MCD_TEST(batch, model_batch_of_sequences_is_bit_identical_to_each_alone)
{
    char err[512] = "";
    eng_pack *pack = NULL;
    cr_assert_eq(eng_pack_open(pack_dir("deep"), &pack, err, sizeof err), 0, "%s", err);
    eng_model *m = NULL;
    struct eng_model_opts mo = {.n_threads = 2};
    cr_assert_eq(eng_model_open(pack, &mo, &m, err, sizeof err), 0, "%s", err);
    int V = eng_model_get_info(m)->hp.n_vocab;
    enum { N = 3 };
    eng_seq *alone[N], *many[N];
    float *la[N], *lb[N];
    for (int i = 0; i < N; i++) {
        cr_assert_eq(eng_seq_new(m, 64, &alone[i], err, sizeof err), 0, "%s", err);
        cr_assert_eq(eng_seq_new(m, 64, &many[i], err, sizeof err), 0, "%s", err);
        la[i] = calloc((size_t)V, sizeof(float));
        lb[i] = calloc((size_t)V, sizeof(float));
        /* alone: the whole prompt, then one decode position */
        cr_assert_eq(eng_seq_forward(alone[i], prompts[i], n_prompts[i], la[i]), 0);
        cr_assert_eq(eng_seq_forward(alone[i], &prompts[i][1], 1, la[i]), 0);
    }
    /* together: the prompts in one batch (different lengths), then the decode
     * positions in another, as the scheduler runs them */
    int nl = eng_model_get_info(m)->hp.n_layers;
    int ns[N];
    const int32_t *toks[N];
    for (int i = 0; i < N; i++)
        ns[i] = n_prompts[i], toks[i] = prompts[i];
    float *none[N] = {NULL, NULL, NULL};
    cr_assert_eq(eng_seqs_embed(many, toks, ns, N), 0, "%s", eng_seq_error(many[0]));
    cr_assert_eq(eng_seq_layers(many[0], 0, nl), 0, "%s", eng_seq_error(many[0]));
    cr_assert_eq(eng_seqs_head(many[0], none), 0, "%s", eng_seq_error(many[0]));
    for (int i = 0; i < N; i++) {
        cr_assert_eq(eng_seq_len(many[i]), n_prompts[i]);
        ns[i] = 1, toks[i] = &prompts[i][1];
    }
    cr_assert_eq(eng_seqs_embed(many, toks, ns, N), 0, "%s", eng_seq_error(many[0]));
    cr_assert_eq(eng_seq_layers(many[0], 0, nl), 0);
    cr_assert_eq(eng_seqs_head(many[0], lb), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(memcmp(la[i], lb[i], (size_t)V * sizeof(float)), 0,
                     "sequence %d: batched logits differ from its logits alone", i);
        cr_assert_eq(eng_seq_len(many[i]), n_prompts[i] + 1);
    }
    /* the refusals: a sequence twice, one with a batch in flight */
    eng_seq *twice[2] = {many[0], many[0]};
    cr_assert_eq(eng_seqs_embed(twice, toks, ns, 2), -EINVAL);
    for (int i = 0; i < N; i++) {
        eng_seq_free(alone[i]);
        eng_seq_free(many[i]);
        free(la[i]);
        free(lb[i]);
    }
    eng_model_free(m);
    eng_pack_free(pack);
}

/* ---- the worker ------------------------------------------------------------------------- */

static struct gen_args args_for(int i, int max_tokens, bool stops)
{
    static const int32_t no_stop[] = {-1};
    return (struct gen_args){.prompt = prompts[i], .n_prompt = n_prompts[i],
                             .max_tokens = max_tokens, .logprobs = true,
                             .stop_ids = stops ? NULL : no_stop, .n_stop_ids = stops ? 0 : 1};
}

static void assert_same_logprobs(const struct rec *a, const struct rec *b, const char *what)
{
    for (int i = 0; i < a->n_ids && i < b->n_ids; i++)
        cr_assert_eq(memcmp(&a->logprob[i], &b->logprob[i], sizeof(float)), 0,
                     "%s: token %d: logprob %.9g vs %.9g", what, i, a->logprob[i], b->logprob[i]);
}

/* Each prompt alone, one request at a time, on a fresh worker of `device`. */
static void references(const char *device, struct rec **ref, int n, int max_tokens)
{
    struct fx *f = fx_new(&(struct setup){.device = device, .kmode = ENG_KMODE_ALL,
                                          .parallel = 1});
    for (int i = 0; i < n; i++) {
        struct gen_args a = args_for(i, max_tokens, false);
        ref[i] = run(f, &a);
        assert_done(ref[i], "reference");
    }
    fx_free(f);
}

MCD_TEST(batch, cpu_four_streams_in_one_batch_give_their_tokens_alone)
{
    enum { N = 4, MAX = 24 };
    struct rec *ref[N], *got[N];
    references("cpu", ref, N, MAX);

    /* step_prefill 3: the prompts join in chunks beside running decodes */
    struct fx *f = fx_new(&(struct setup){.device = "cpu", .kmode = ENG_KMODE_ALL,
                                          .parallel = 4, .step_prefill = 3});
    for (int i = 0; i < N; i++) {
        got[i] = rec_new();
        struct gen_args a = args_for(i, MAX - 4 * i, false);  /* they end apart */
        cr_assert_eq(submit(f, got[i], &a), 0);
    }
    for (int i = 0; i < N; i++)
        wait_final(got[i]);
    struct eng_worker_stats st = idle_stats(f);
    char what[64];
    for (int i = 0; i < N; i++) {
        snprintf(what, sizeof what, "stream %d", i);
        assert_done(got[i], what);
        cr_assert_eq(got[i]->n_ids, MAX - 4 * i, "%s", what);
        for (int t = 0; t < got[i]->n_ids; t++)
            cr_assert_eq(got[i]->ids[t], ref[i]->ids[t], "%s: token %d: %d vs %d alone", what, t,
                         got[i]->ids[t], ref[i]->ids[t]);
        assert_same_logprobs(got[i], ref[i], what);
    }
    cr_assert(st.batched);
    cr_assert_eq(st.parallel, 4);
    uint64_t shared = 0;
    for (int b = 1; b < ENG_BATCH_BUCKETS; b++)
        shared += st.batch_hist[b];
    cr_assert_gt(st.batch_hist[3], 0, "some steps ran all four sequences as one batch");
    cr_assert_gt(shared, 0);
    cr_assert_eq(st.active, 0);
    for (int i = 0; i < N; i++) {
        rec_free(ref[i]);
        rec_free(got[i]);
    }
    fx_free(f);
}

MCD_TEST(batch, sim_short_request_finishes_while_a_long_one_streams)
{
    enum { LONG = 2000, SHORT = 16 };
    struct fx *f = fx_new(&(struct setup){.device = "sim", .latency_us = 20,
                                          .kmode = ENG_KMODE_ALL, .n_ctx = 2048});
    struct rec *lr = rec_new(), *sr = rec_new();
    struct gen_args la = args_for(0, LONG, false), sa = args_for(1, SHORT, false);
    eng_gen_req *lq = make_req(f, lr, &la);
    cr_assert_eq(eng_worker_submit(f->w, lq), 0);
    cr_assert(wait_for(lr, 2, 30000), "the long request streams");
    cr_assert_eq(submit(f, sr, &sa), 0);
    wait_final(sr);
    pthread_mutex_lock(&ev_mu);
    int long_tokens = lr->n_ids;
    bool long_final = lr->final;
    pthread_mutex_unlock(&ev_mu);
    assert_done(sr, "short");
    cr_assert_eq(sr->n_ids, SHORT);
    cr_assert_not(long_final, "the long request is still running");
    cr_assert_lt(long_tokens, LONG * 15 / 100,
                 "the short request ended after the long one produced %d of %d tokens",
                 long_tokens, LONG);
    struct eng_worker_stats st;
    eng_worker_get_stats(f->w, &st);
    cr_assert_not(st.batched, "the sim interleaves, as the NPU does");
    eng_gen_req_cancel(lq);
    eng_gen_req_free(lq);
    wait_final(lr);
    rec_free(lr);
    rec_free(sr);
    fx_free(f);
}

/* Two sequences; a fault at decode step 5 hits the first that gets there. */
static void fault_one_of_two(enum eng_kmode mode, const char *faults, bool failing_ends)
{
    enum { N = 2, MAX = 20 };
    struct rec *ref[N], *got[N];
    references("sim", ref, N, MAX);
    struct fx *f = fx_new(&(struct setup){.device = "sim", .kmode = mode, .faults = faults,
                                          .parallel = 2});
    eng_gen_req *q[N];
    for (int i = 0; i < N; i++) {
        got[i] = rec_new();
        struct gen_args a = args_for(i, MAX, false);
        q[i] = make_req(f, got[i], &a);
    }
    /* both queued before the worker can take one: they start in the same step */
    for (int i = 0; i < N; i++)
        cr_assert_eq(eng_worker_submit(f->w, q[i]), 0);
    for (int i = 0; i < N; i++) {
        wait_final(got[i]);
        eng_gen_req_free(q[i]);
    }
    struct eng_worker_stats st = idle_stats(f);
    cr_assert_eq(st.device_resets, 1);
    int n_errors = 0;
    for (int i = 0; i < N; i++) {
        char what[64];
        snprintf(what, sizeof what, "sequence %d", i);
        if (got[i]->kind == ENG_EVENT_ERROR) {
            n_errors++;
            cr_assert(failing_ends, "%s: %s", what, got[i]->error.message);
            cr_assert(got[i]->error.has_device_error);
            continue;
        }
        assert_same_tokens(got[i], ref[i], what);
        assert_same_logprobs(got[i], ref[i], what);
        /* it was running when the other failed: it rebuilt its KV cache */
        cr_assert_gt(got[i]->done.timings.runlists, ref[i]->done.timings.runlists,
                     "%s replayed after the reset", what);
    }
    cr_assert_eq(n_errors, failing_ends ? 1 : 0);
    for (int i = 0; i < N; i++) {
        rec_free(ref[i]);
        rec_free(got[i]);
    }
    fx_free(f);
}

MCD_TEST(batch, sim_fault_in_one_sequence_leaves_the_other_unchanged)
{
    fault_one_of_two(ENG_KMODE_ALL, "phase=decode,token=5,state=ERROR", true);
}

MCD_TEST(batch, sim_fault_replayed_leaves_both_unchanged)
{
    fault_one_of_two(ENG_KMODE_AUTO, "phase=decode,token=5,state=TIMEOUT", false);
}

/* Three requests with the same prompt at once (`n` = 3 choices): the first
 * computes the prompt, the others copy its KV (cached_tokens = all but the last
 * prompt position), and each gives the tokens it gives alone. */
static void shared_prompt(const char *device)
{
    enum { N = 3, MAX = 16 };
    struct rec *ref[1], *got[N];
    references(device, ref, 1, MAX);
    struct fx *f = fx_new(&(struct setup){.device = device, .kmode = ENG_KMODE_ALL,
                                          .parallel = 4});
    eng_gen_req *q[N];
    for (int i = 0; i < N; i++) {
        got[i] = rec_new();
        struct gen_args a = args_for(0, MAX, false);
        q[i] = make_req(f, got[i], &a);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(eng_worker_submit(f->w, q[i]), 0);
    int n_shared = 0;
    for (int i = 0; i < N; i++) {
        wait_final(got[i]);
        eng_gen_req_free(q[i]);
        assert_same_tokens(got[i], ref[0], "a choice");
        assert_same_logprobs(got[i], ref[0], "a choice");
        n_shared += got[i]->done.cached_tokens == n_prompts[0] - 1;
    }
    struct eng_worker_stats st = idle_stats(f);
    cr_assert_geq(n_shared, N - 1, "the prompt was computed once (%d of %d copied it)",
                  n_shared, N);
    cr_assert_geq(st.tokens_cached, (uint64_t)(N - 1) * (uint64_t)(n_prompts[0] - 1));
    for (int i = 0; i < N; i++)
        rec_free(got[i]);
    rec_free(ref[0]);
    fx_free(f);
}

MCD_TEST(batch, cpu_same_prompt_is_prefilled_once)
{
    shared_prompt("cpu");
}

MCD_TEST(batch, sim_same_prompt_is_prefilled_once)
{
    shared_prompt("sim");
}
