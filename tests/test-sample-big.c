/* engine/worker/sample on a MiniCPM5-sized vocabulary (BIG logits): top-k and
 * top-p membership and cuts deep in the tail, ties, and the speed of a draw. */
#include "engine/engine.h"
#include "engine/worker/sample.h"
#include "tests/check.h"
#include "tests/sample-fx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- MiniCPM5-sized vocabulary ------------------------------------------------------------- */

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Top-k by the heap (k <= 512) and by quickselect: every draw is among the k best. */
MCD_TEST(big, top_k_membership)
{
    float *logits = malloc(BIG * sizeof *logits), *scratch = malloc(BIG * sizeof *scratch);
    float *sorted = malloc(BIG * sizeof *sorted);
    rng_state = 31;
    for (int i = 0; i < BIG; i++)
        logits[i] = rndf(-10, 10);
    memcpy(sorted, logits, BIG * sizeof *sorted);
    qsort(sorted, BIG, sizeof *sorted, cmp_desc);
    static const int ks[] = {2, 40, 512, 513, 5000};
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        int kk = ks[t];
        float threshold = sorted[kk - 1];
        cr_assert_gt(threshold, sorted[kk], "no tie at the cut");
        struct eng_sampling k = neutral();
        k.top_k = kk;
        k.temperature = 50.0f; /* nearly uniform over the k */
        k.seed = (uint64_t)kk;
        eng_sampler *s = mk(&k, BIG);
        int hit_last = 0;
        for (int i = 0; i < 600; i++) {
            int32_t id = draw(s, logits, BIG, scratch);
            cr_assert_geq(logits[id], threshold, "top_k %d drew rank > k", kk);
            hit_last |= logits[id] == threshold;
        }
        if (kk <= 40)
            cr_assert(hit_last, "top_k %d: the k-th is reachable", kk);
        eng_sampler_free(s);
    }
    free(logits);
    free(scratch);
    free(sorted);
}

/* Top-p over scattered ids with the cut deep inside the candidates (rank 153 of
 * 200 above the threshold; the weighted quickselect partitions several times):
 * the 47 tokens just below the cut hold ~10% of the mass and must never be drawn,
 * the 153 above it all must be. */
MCD_TEST(big, top_p_cut_deep)
{
    float *logits = malloc(BIG * sizeof *logits), *scratch = malloc(BIG * sizeof *scratch);
    int *rank_of = malloc(BIG * sizeof *rank_of);
    for (int i = 0; i < BIG; i++) {
        logits[i] = -10.0f;
        rank_of[i] = -1;
    }
    /* 200 high tokens, scattered (a stride coprime with BIG). */
    for (int r = 0; r < 200; r++) {
        int id = (int)((7919LL * (r + 1)) % BIG);
        logits[id] = 3.0f - 0.01f * (float)r;
        rank_of[id] = r;
    }
    /* The reference cut in double. */
    double total = 0, cum = 0;
    for (int i = 0; i < BIG; i++)
        total += exp(logits[i] - 3.0);
    int cut = -1;
    for (int r = 0; r < 200; r++) {
        cum += exp(-0.01 * r);
        if (cum >= 0.9 * total) {
            cut = r + 1;
            break;
        }
    }
    cr_assert(cut > 100 && cut < 200, "cut at %d", cut);
    /* Not razor-edge: a 1e-4 relative error in the sums would not move the cut. */
    double before_cut = cum - exp(-0.01 * (cut - 1));
    cr_assert(before_cut < 0.9 * total * (1 - 1e-4) && cum > 0.9 * total * (1 + 1e-4),
              "the cut is on an edge");

    struct eng_sampling k = neutral();
    k.top_p = 0.9f;
    k.seed = 99;
    eng_sampler *s = mk(&k, BIG);
    int *seen = calloc(200, sizeof *seen);
    for (int i = 0; i < 4000; i++) { /* the least likely kept rank: ~10 expected */
        int32_t id = draw(s, logits, BIG, scratch);
        cr_assert(rank_of[id] >= 0 && rank_of[id] < cut, "drew id %d of rank %d (cut %d)", id,
                  rank_of[id], cut);
        seen[rank_of[id]]++;
    }
    for (int r = 0; r < cut; r++)
        cr_assert_gt(seen[r], 0, "rank %d never drawn", r);
    eng_sampler_free(s);
    free(seen);
    free(logits);
    free(scratch);
    free(rank_of);
}

/* A nucleus far below the 2^-10 threshold and made of ties: one token of weight 1
 * and 130,559 of weight e^-8 (together ~44). top_p 0.5 needs about half of the
 * tied ones, which the order takes by lowest id: the cut is an id. */
MCD_TEST(big, top_p_ties_below_threshold)
{
    float *logits = malloc(BIG * sizeof *logits), *scratch = malloc(BIG * sizeof *scratch);
    const int top = 77777;
    for (int i = 0; i < BIG; i++)
        logits[i] = -8.1f;
    logits[top] = 0.0f;
    double w = exp(-8.1), total = 1.0 + (BIG - 1) * w, need = (0.5 * total - 1.0) / w;
    /* ids below `top` count one each, `top` itself is first; the boundary id: */
    int boundary = (int)ceil(need) - 1;
    if (boundary >= top)
        boundary++;
    cr_assert(fabs(need - round(need)) > 0.01, "not on an edge");
    struct eng_sampling k = neutral();
    k.top_p = 0.5f;
    k.seed = 123;
    eng_sampler *s = mk(&k, BIG);
    int max_id = 0, n_top = 0;
    for (int i = 0; i < 300; i++) {
        int32_t id = draw(s, logits, BIG, scratch);
        if (id == top) {
            n_top++;
            continue;
        }
        cr_assert_leq(id, boundary, "id %d is past the cut %d", id, boundary);
        max_id = id > max_id ? id : max_id;
    }
    cr_assert_gt(max_id, boundary - boundary / 20, "the draws reach near the cut (%d of %d)",
                 max_id, boundary);
    cr_assert_lt(n_top, 30, "top has ~4%% of the nucleus (%d of 300)", n_top);
    eng_sampler_free(s);
    free(logits);
    free(scratch);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Not an assertion: how long one sample takes on MiniCPM5's vocabulary (thread CPU
 * time, best of 30, without the copy of the logits). */
MCD_TEST(big, speed)
{
    float *logits = malloc(BIG * sizeof *logits), *scratch = malloc(BIG * sizeof *scratch);
    float *flat = malloc(BIG * sizeof *flat), *ties = malloc(BIG * sizeof *ties);
    rng_state = 41;
    for (int i = 0; i < BIG; i++) {
        /* A peaked, model-like vector: a bulk around -8 and a few strong candidates. */
        logits[i] = rndf(-4, 4) + rndf(-4, 4) - 8.0f;
        flat[i] = rndf(-1, 1) + rndf(-1, 1) + rndf(-1, 1);
        ties[i] = i == 77777 ? 0.0f : -8.1f;
    }
    for (int i = 0; i < 30; i++)
        logits[rnd() % BIG] = 12.0f - (float)i * 0.4f;
    static const struct {
        const char *name;
        float temperature, top_p, min_p, rep;
        int top_k, flat;
    } cfg[] = {
        {"greedy", 0, 1, 0, 1, 0, 0},
        {"temperature 1", 1, 1, 0, 1, 0, 0},
        {"top_k 40", 1, 1, 0, 1, 40, 0},
        {"top_p 0.95 (MiniCPM5)", 1, 0.95f, 0, 1, 0, 0},
        {"top_k 40 + top_p 0.95", 1, 0.95f, 0, 1, 40, 0},
        {"min_p 0.05", 1, 1, 0.05f, 1, 0, 0},
        {"top_p 0.95 + rep 1.1", 1, 0.95f, 0, 1.1f, 0, 0},
        {"flat: temperature 1", 1, 1, 0, 1, 0, 1},
        {"flat: top_p 0.95", 1, 0.95f, 0, 1, 0, 1},
        {"flat: top_k 2000", 1, 1, 0, 1, 2000, 1},
        {"ties: top_p 0.5", 1, 0.5f, 0, 1, 0, 2},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        struct eng_sampling k = neutral();
        k.temperature = cfg[c].temperature;
        k.top_p = cfg[c].top_p;
        k.min_p = cfg[c].min_p;
        k.repetition_penalty = cfg[c].rep;
        k.penalty_last_n = 256;
        k.top_k = cfg[c].top_k;
        eng_sampler *s = mk(&k, BIG);
        for (int i = 0; i < 512; i++)
            eng_sampler_accept(s, (int32_t)(rnd() % BIG));
        const float *x = cfg[c].flat == 2 ? ties : cfg[c].flat ? flat : logits;
        double best = 1e9;
        for (int i = 0; i < 30; i++) {
            memcpy(scratch, x, BIG * sizeof *scratch);
            double t0 = cpu_now();
            eng_sampler_sample(s, scratch);
            double dt = cpu_now() - t0;
            best = dt < best ? dt : best;
        }
        cr_log_info("sample, n_vocab %d, %-24s %8.1f us", BIG, cfg[c].name, best * 1e6);
        eng_sampler_free(s);
    }
    free(logits);
    free(flat);
    free(ties);
    free(scratch);
}
