/* The worker (engine/worker/worker.h) on the `deep` pack: the queue and a
 * request's lifecycle.
 *
 *   - the queue: N+1 submissions with queue size N while busy -> exactly one
 *     -EBUSY; FIFO order; cancel while queued, mid-decode and during a hang, and
 *     shutdown with requests queued: each gets its one final event, measured;
 *   - stop ids, stop strings, max_tokens, a full context, logprobs, bad requests.
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

/* ---- the queue ------------------------------------------------------------------------ */

MCD_TEST(worker, full_queue_fails_fast_and_order_is_fifo)
{
    enum { N = 3 };
    /* one sequence at a time: the queue alone decides the order */
    struct setup s = {.device = "sim", .latency_us = 200, .kmode = ENG_KMODE_ALL,
                      .queue_size = N, .parallel = 1};
    struct fx *f = fx_new(&s);
    struct rec *busy = rec_new();
    cr_assert_eq(submit(f, busy, &(struct gen_args){.max_tokens = 120, .n_stop_ids = 0,
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
    /* one sequence at a time, so that b waits in the queue */
    struct setup s = {.device = "sim", .latency_us = 300, .kmode = ENG_KMODE_FIXED, .k = 11,
                      .parallel = 1};
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
    cr_assert_lt(queued_ms, 15000); /* a bound against a hang, not a speed claim */
    cr_assert_lt(running_ms, 15000);
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
    cr_assert_lt(ms, 15000); /* well under the 20 s hang: cut short, however loaded the machine */
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
    cr_assert_lt(ms, 15000); /* well under the 20 s hang: cut short, however loaded the machine */
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
