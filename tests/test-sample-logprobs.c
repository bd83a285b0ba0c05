/* eng_logprobs (engine/worker/sample.h): a token's log-probability and the top
 * alternatives against double precision on a MiniCPM5-sized vocabulary, and the
 * small and degenerate cases. */
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

/* ---- eng_logprobs --------------------------------------------------------------------------- */

static const float *sort_logits;

static int cmp_ids(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    float u = sort_logits[x], v = sort_logits[y];
    if (u != v)
        return u > v ? -1 : 1;
    return (x > y) - (x < y);
}

MCD_TEST(logprobs, against_double)
{
    float *logits = malloc(BIG * sizeof *logits), *copy = malloc(BIG * sizeof *copy);
    double *ref = malloc(BIG * sizeof *ref);
    rng_state = 51;
    for (int i = 0; i < BIG; i++)
        logits[i] = rndf(-20, 20);
    logits[1000] = logits[2000] = logits[500] = 25.0f; /* a three-way tie on top */
    logits[77] = -INFINITY;
    memcpy(copy, logits, BIG * sizeof *copy);

    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < BIG; i++)
        mx = fmax(mx, logits[i]);
    for (int i = 0; i < BIG; i++)
        sum += exp((double)logits[i] - mx);
    for (int i = 0; i < BIG; i++)
        ref[i] = (double)logits[i] - mx - log(sum);

    struct eng_top_logprob top[20];
    double worst = 0;
    for (int i = 0; i < BIG; i += 4999) {
        float lp = eng_logprobs(logits, BIG, i, NULL, 0);
        worst = fmax(worst, fabs(lp - ref[i]) / fmax(1.0, fabs(ref[i])));
    }
    cr_assert_lt(worst, 2e-7, "relative error %g", worst);
    cr_assert(isinf(eng_logprobs(logits, BIG, 77, NULL, 0)));
    cr_assert(isnan(eng_logprobs(logits, BIG, -1, NULL, 0)));
    cr_assert(isnan(eng_logprobs(logits, BIG, BIG, NULL, 0)));

    float lp = eng_logprobs(logits, BIG, 2000, top, 20);
    cr_assert_float_eq(lp, ref[2000], 1e-5);
    cr_assert_eq(memcmp(copy, logits, BIG * sizeof *copy), 0, "logits unchanged");
    /* The top 20 by brute force: sort all ids (value desc, id asc). */
    int *idx = malloc(BIG * sizeof *idx);
    for (int i = 0; i < BIG; i++)
        idx[i] = i;
    sort_logits = logits;
    qsort(idx, BIG, sizeof *idx, cmp_ids);
    cr_assert_eq(top[0].id, 500);
    cr_assert_eq(top[1].id, 1000);
    cr_assert_eq(top[2].id, 2000);
    double mass = 0;
    for (int t = 0; t < 20; t++) {
        cr_assert_eq(top[t].id, idx[t], "rank %d: %d vs %d", t, top[t].id, idx[t]);
        cr_assert_float_eq(top[t].logprob, ref[idx[t]], 1e-5);
        mass += exp(top[t].logprob);
    }
    cr_assert_lt(mass, 1.0 + 1e-5);
    free(idx);
    free(logits);
    free(copy);
    free(ref);
}

MCD_TEST(logprobs, small_and_degenerate)
{
    float x[3] = {0.0f, 0.0f, NAN};
    struct eng_top_logprob top[5];
    float lp = eng_logprobs(x, 3, 1, top, 5);
    cr_assert_float_eq(lp, -logf(2.0f), 1e-6);
    cr_assert_eq(top[0].id, 0);
    cr_assert_eq(top[1].id, 1);
    for (int t = 2; t < 5; t++) {
        cr_assert_eq(top[t].id, -1, "padding (NaN is not listed)");
        cr_assert(isinf(top[t].logprob) && top[t].logprob < 0);
    }
    cr_assert(isinf(eng_logprobs(x, 3, 2, NULL, 0)), "NaN counts as -inf");

    /* A +inf logit takes all the mass. */
    float y[4] = {1.0f, INFINITY, 3.0f, INFINITY};
    cr_assert_float_eq(eng_logprobs(y, 4, 1, top, 3), -logf(2.0f), 1e-6);
    cr_assert_eq(top[0].id, 1);
    cr_assert_eq(top[1].id, 3);
    cr_assert_eq(top[2].id, 2);
    cr_assert(isinf(top[2].logprob) && top[2].logprob < 0);
}
