/* engine/worker/sample: the sampler chain and its knobs. Seeded determinism, the
 * distributions of temperature, top-k, top-p and min-p (alone and combined) by
 * chi-square against double-precision references (tests/sample-fx.h), greedy and
 * the neutral values, and the knobs the sampler refuses. */
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

/* ---- determinism ------------------------------------------------------------------ */

MCD_TEST(sampler, seeded_determinism)
{
    enum { N = 1000, V = 500 };
    float logits[V], scratch[V];
    rng_state = 7;
    for (int i = 0; i < V; i++)
        logits[i] = rndf(-4, 4);
    struct eng_sampling k = neutral();
    k.top_p = 0.9f;
    k.seed = 42;
    eng_sampler *a = mk(&k, V), *b = mk(&k, V);
    k.seed = 43;
    eng_sampler *c = mk(&k, V);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        int32_t x = draw(a, logits, V, scratch), y = draw(b, logits, V, scratch);
        cr_assert_eq(x, y, "draw %d: %d vs %d with the same seed", i, x, y);
        differ += draw(c, logits, V, scratch) != x;
    }
    cr_assert_gt(differ, N / 2, "seeds 42 and 43 agree on %d of %d draws", N - differ, N);
    eng_sampler_free(a);
    eng_sampler_free(b);
    eng_sampler_free(c);
}

/* The same seed and logits give these ids on every machine: the generator and the
 * exponentials are portable (no libm in the sampling path). If this changes, the
 * sampler's output changed for every seeded request. */
MCD_TEST(sampler, golden_sequence)
{
    enum { V = 101 };
    float logits[V], scratch[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)((i * 37) % 101) / 16.0f - 3.0f; /* exact in float */
    struct eng_sampling k = neutral();
    k.seed = 20240601;
    k.temperature = 0.8f;
    k.top_p = 0.95f;
    eng_sampler *s = mk(&k, V);
    /* Cross-checked against a Python transcription of the chain (xoshiro256**
     * from splitmix64, libm exp rounded to float, the threshold, the weighted
     * quickselect and the walk in partition order). */
    static const int32_t want[16] = {38, 57, 95, 60, 98, 38, 8, 49, 73, 46, 49, 38, 30, 27, 90, 65};
    int32_t got[16];
    for (int i = 0; i < 16; i++)
        got[i] = draw(s, logits, V, scratch);
    for (int i = 0; i < 16; i++)
        cr_expect_eq(got[i], want[i], "draw %d: got %d, want %d", i, got[i], want[i]);
    eng_sampler_free(s);
}

/* ---- distributions ----------------------------------------------------------------- */

MCD_TEST(sampler, temperature_1_is_softmax)
{
    double want[16];
    softmax_ref(small16, 16, 1.0, want);
    struct eng_sampling k = neutral();
    k.seed = 1;
    eng_sampler *s = mk(&k, 16);
    int dof;
    double chi2 = chi_square(s, small16, 16, want, &dof);
    cr_assert_lt(chi2, chi_bound(dof), "chi2 %.1f with %d dof", chi2, dof);
    eng_sampler_free(s);
}

MCD_TEST(sampler, temperature_scales)
{
    double want[16];
    softmax_ref(small16, 16, 0.6, want);
    struct eng_sampling k = neutral();
    k.temperature = 0.6f;
    k.seed = 2;
    eng_sampler *s = mk(&k, 16);
    int dof;
    double chi2 = chi_square(s, small16, 16, want, &dof);
    cr_assert_lt(chi2, chi_bound(dof), "chi2 %.1f with %d dof", chi2, dof);
    eng_sampler_free(s);
}

MCD_TEST(sampler, top_k_distribution)
{
    /* Top 5 of small16: 2.0 (2), 1.75 (14), 1.5 (5), 1.25 (10), 1.0 (0). */
    double want[16];
    softmax_ref(small16, 16, 1.0, want);
    double sum = 0;
    for (int i = 0; i < 16; i++) {
        if (small16[i] < 1.0f)
            want[i] = 0;
        sum += want[i];
    }
    for (int i = 0; i < 16; i++)
        want[i] /= sum;
    struct eng_sampling k = neutral();
    k.top_k = 5;
    k.seed = 3;
    eng_sampler *s = mk(&k, 16);
    int dof;
    double chi2 = chi_square(s, small16, 16, want, &dof);
    cr_assert_eq(dof, 4);
    cr_assert_lt(chi2, chi_bound(dof), "chi2 %.1f with %d dof", chi2, dof);
    eng_sampler_free(s);
}

MCD_TEST(sampler, top_p_distribution)
{
    double want[16];
    softmax_ref(small16, 16, 1.0, want);
    top_p_ref(want, 16, 0.7);
    int kept = 0;
    for (int i = 0; i < 16; i++)
        kept += want[i] > 0;
    cr_assert(kept > 2 && kept < 16, "a real cut (%d kept)", kept);
    struct eng_sampling k = neutral();
    k.top_p = 0.7f;
    k.seed = 4;
    eng_sampler *s = mk(&k, 16);
    int dof;
    double chi2 = chi_square(s, small16, 16, want, &dof);
    cr_assert_lt(chi2, chi_bound(dof), "chi2 %.1f with %d dof", chi2, dof);
    eng_sampler_free(s);
}

MCD_TEST(sampler, min_p_distribution)
{
    /* min_p 0.3: keep p >= 0.3 p_max, i.e. logit >= 2.0 + ln 0.3 = 0.796. */
    double want[16];
    softmax_ref(small16, 16, 1.0, want);
    double sum = 0;
    for (int i = 0; i < 16; i++) {
        if (small16[i] < 2.0 + log(0.3))
            want[i] = 0;
        sum += want[i];
    }
    for (int i = 0; i < 16; i++)
        want[i] /= sum;
    struct eng_sampling k = neutral();
    k.min_p = 0.3f;
    k.seed = 5;
    eng_sampler *s = mk(&k, 16);
    int dof;
    double chi2 = chi_square(s, small16, 16, want, &dof);
    cr_assert_eq(dof, 4, "2.0, 1.75, 1.5, 1.25 and 1.0 survive");
    cr_assert_lt(chi2, chi_bound(dof), "chi2 %.1f with %d dof", chi2, dof);
    eng_sampler_free(s);
}

/* The path after top-k (sorted candidates): temperature, top-p and min-p there. */
MCD_TEST(sampler, top_k_then_top_p_and_min_p)
{
    /* Top 7 of small16: 2.0 .. 0.5. At temperature 0.8, top_p 0.8 of their mass
     * keeps 2.0 .. 1.25 (80.4%; over all 16 it would keep 1.0 too); min_p 0.2
     * (logit >= 2.0 + 0.8 ln 0.2 = 0.71) is active but not the tighter cut. */
    double want[16];
    float masked[16];
    for (int i = 0; i < 16; i++)
        masked[i] = small16[i] >= 0.5f ? small16[i] : -INFINITY;
    softmax_ref(masked, 16, 0.8, want);
    top_p_ref(want, 16, 0.8);
    double sum = 0;
    for (int i = 0; i < 16; i++) {
        if (small16[i] < 2.0 + 0.8 * log(0.2))
            want[i] = 0;
        sum += want[i];
    }
    for (int i = 0; i < 16; i++)
        want[i] /= sum;
    struct eng_sampling k = neutral();
    k.top_k = 7;
    k.temperature = 0.8f;
    k.top_p = 0.8f;
    k.min_p = 0.2f;
    k.seed = 8;
    eng_sampler *s = mk(&k, 16);
    int dof;
    double chi2 = chi_square(s, small16, 16, want, &dof);
    cr_assert_eq(dof, 3, "2.0, 1.75, 1.5 and 1.25 kept");
    cr_assert_lt(chi2, chi_bound(dof), "chi2 %.1f with %d dof", chi2, dof);
    eng_sampler_free(s);
}

/* top_p's target is a share of the mass after top-k, before min-p: here min-p
 * cuts first in effect and top-p must not renormalise over the min-p survivors. */
MCD_TEST(sampler, top_p_and_min_p_intersect)
{
    /* min-p the tighter cut (top_p 0.85 keeps 8 ids, 2.0 .. 0.25; min_p 0.3 keeps
     * 5, down to 1.0), then top-p the tighter one (top_p 0.5 keeps 2.0 .. 1.5;
     * min_p 0.1 keeps down to -0.25). */
    static const struct {
        float top_p, min_p;
        int kept;
    } cases[] = {{0.85f, 0.3f, 5}, {0.5f, 0.1f, 3}};
    for (int t = 0; t < 2; t++) {
        double want[16];
        softmax_ref(small16, 16, 1.0, want);
        top_p_ref(want, 16, cases[t].top_p);
        double sum = 0;
        for (int i = 0; i < 16; i++) {
            if (small16[i] < 2.0 + log(cases[t].min_p))
                want[i] = 0;
            sum += want[i];
        }
        for (int i = 0; i < 16; i++)
            want[i] /= sum;
        struct eng_sampling k = neutral();
        k.top_p = cases[t].top_p;
        k.min_p = cases[t].min_p;
        k.seed = 6;
        eng_sampler *s = mk(&k, 16);
        int dof;
        double chi2 = chi_square(s, small16, 16, want, &dof);
        cr_assert_eq(dof + 1, cases[t].kept, "case %d", t);
        cr_assert_lt(chi2, chi_bound(dof), "chi2 %.1f with %d dof", chi2, dof);
        eng_sampler_free(s);
    }
}

/* ---- greedy and the neutral values ---------------------------------------------------- */

MCD_TEST(sampler, greedy_ties_to_lowest_id)
{
    float logits[12] = {0, 1, 2, 3, 5, 1, 5, 0, 5, -1, 4, 5};
    float scratch[12];
    for (int t = 0; t < 2; t++) {
        struct eng_sampling k = neutral();
        k.temperature = t ? -1.0f : 0.0f; /* < 0 is greedy too */
        eng_sampler *s = mk(&k, 12);
        for (int i = 0; i < 100; i++)
            cr_assert_eq(draw(s, logits, 12, scratch), 4);
        eng_sampler_free(s);
    }
}

MCD_TEST(sampler, top_k_1_is_argmax)
{
    enum { V = 1000 };
    float logits[V], scratch[V];
    rng_state = 11;
    for (int i = 0; i < V; i++)
        logits[i] = rndf(-1, 1);
    logits[700] = logits[300] = 1.5f;
    struct eng_sampling k = neutral();
    k.top_k = 1;
    k.temperature = 100.0f;
    k.seed = 9;
    eng_sampler *s = mk(&k, V);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(draw(s, logits, V, scratch), 300);
    eng_sampler_free(s);
}

/* Neutral knobs change nothing: top_p 1 and top_k >= n_vocab draw what no knob draws. */
MCD_TEST(sampler, neutral_knobs_are_no_ops)
{
    enum { V = 300 };
    float logits[V], scratch[V];
    rng_state = 12;
    for (int i = 0; i < V; i++)
        logits[i] = rndf(-3, 3);
    struct eng_sampling k = neutral();
    k.seed = 77;
    eng_sampler *plain = mk(&k, V);
    k.top_p = 1.0f;
    eng_sampler *p1 = mk(&k, V);
    k.top_k = V;
    eng_sampler *kv = mk(&k, V);
    for (int i = 0; i < 1000; i++) {
        int32_t x = draw(plain, logits, V, scratch);
        cr_assert_eq(draw(p1, logits, V, scratch), x, "top_p 1, draw %d", i);
        cr_assert_eq(draw(kv, logits, V, scratch), x, "top_k n_vocab, draw %d", i);
    }
    eng_sampler_free(plain);
    eng_sampler_free(p1);
    eng_sampler_free(kv);
}

MCD_TEST(sampler, small_top_p_keeps_the_top_token)
{
    enum { V = 1000 };
    float logits[V], scratch[V];
    rng_state = 13;
    for (int i = 0; i < V; i++)
        logits[i] = rndf(-1, 1);
    logits[123] = 1.01f;
    struct eng_sampling k = neutral();
    k.top_p = 1e-6f;
    k.temperature = 5.0f;
    k.seed = 10;
    eng_sampler *s = mk(&k, V);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(draw(s, logits, V, scratch), 123);
    eng_sampler_free(s);
}

MCD_TEST(sampler, min_p_near_1_keeps_the_top_token)
{
    float scratch[16];
    struct eng_sampling k = neutral();
    k.min_p = 0.99f;
    k.seed = 11;
    eng_sampler *s = mk(&k, 16);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(draw(s, small16, 16, scratch), 2);
    eng_sampler_free(s);
}

/* ---- invalid knobs ------------------------------------------------------------------------- */

static void expect_invalid(struct eng_sampling k, int n, const char *knob)
{
    eng_sampler *s = (eng_sampler *)0x1;
    char err[256] = "";
    cr_assert_eq(eng_sampler_new(&k, n, &s, err, sizeof err), -EINVAL, "%s accepted", knob);
    cr_assert_null(s);
    cr_assert_not_null(strstr(err, knob), "message '%s' lacks '%s'", err, knob);
    cr_assert_null(strchr(err, '\n'));
}

MCD_TEST(sampler, invalid_knobs)
{
    struct eng_sampling k;
    static const struct eng_logit_bias bad_low = {-1, 1.0f}, bad_high = {100, 1.0f},
                                       bad_nan = {3, NAN}, bad_inf = {3, INFINITY};
#define BAD(field, value, knob)                                                                \
    do {                                                                                       \
        k = neutral();                                                                         \
        k.field = value;                                                                       \
        expect_invalid(k, 100, knob);                                                          \
    } while (0)
    BAD(temperature, NAN, "temperature");
    BAD(temperature, INFINITY, "temperature");
    BAD(top_p, 0.0f, "top_p");
    BAD(top_p, 1.01f, "top_p");
    BAD(top_p, -0.5f, "top_p");
    BAD(top_p, NAN, "top_p");
    BAD(top_k, -1, "top_k");
    BAD(min_p, -0.01f, "min_p");
    BAD(min_p, 1.0f, "min_p");
    BAD(min_p, NAN, "min_p");
    BAD(repetition_penalty, 0.0f, "repetition_penalty");
    BAD(repetition_penalty, -1.0f, "repetition_penalty");
    BAD(repetition_penalty, INFINITY, "repetition_penalty");
    BAD(penalty_last_n, -1, "penalty_last_n");
    BAD(penalty_last_n, (1 << 20) + 1, "penalty_last_n");
    BAD(presence_penalty, 2.01f, "presence_penalty");
    BAD(presence_penalty, -2.5f, "presence_penalty");
    BAD(frequency_penalty, 3.0f, "frequency_penalty");
    BAD(frequency_penalty, NAN, "frequency_penalty");
#undef BAD
    k = neutral();
    k.n_bias = 1;
    k.bias = &bad_low;
    expect_invalid(k, 100, "logit_bias");
    k.bias = &bad_high;
    expect_invalid(k, 100, "logit_bias");
    k.bias = &bad_nan;
    expect_invalid(k, 100, "logit_bias");
    k.bias = &bad_inf;
    expect_invalid(k, 100, "logit_bias");
    k.bias = NULL;
    expect_invalid(k, 100, "logit_bias");
    k.n_bias = -1;
    expect_invalid(k, 100, "logit_bias");
    k = neutral();
    expect_invalid(k, 0, "n_vocab");

    /* The edges that are valid. */
    static const struct eng_logit_bias edge[3] = {{0, -INFINITY}, {99, 100.0f}, {99, -100.0f}};
    struct eng_sampling ok = neutral();
    ok.temperature = -0.5f;
    ok.top_p = 1.0f;
    ok.min_p = 0.0f;
    ok.presence_penalty = -2.0f;
    ok.frequency_penalty = 2.0f;
    ok.repetition_penalty = 1e-3f;
    ok.penalty_last_n = 1 << 20;
    ok.bias = edge;
    ok.n_bias = 3;
    eng_sampler_free(mk(&ok, 100));
    eng_sampler_free(NULL);
}
