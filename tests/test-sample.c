/* engine/worker/sample: the sampler chain, eng_logprobs, and what a pack says about
 * sampling (generation_config.json defaults, stop ids).
 *
 * Distributions are checked by Pearson's chi-square over 200,000 draws against
 * probabilities computed here in double with libm. The draws are seeded, so each
 * test is deterministic; the bounds lie beyond the 1e-6 quantile, loose enough that a
 * correct sampler passes for any seed and tight enough that a wrong temperature,
 * cut or renormalisation fails by orders of magnitude. */
#include "engine/engine.h"
#include "engine/worker/sample.h"

#include "tests/check.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers -------------------------------------------------------------------- */

static uint64_t rng_state = 1;

static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static float rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd() & 0xFFFFFF) / 16777216.0f;
}

static struct eng_sampling neutral(void)
{
    struct eng_sampling s;
    cr_assert_eq(eng_sampling_defaults(NULL, &s, NULL, 0), 0);
    return s;
}

static eng_sampler *mk(const struct eng_sampling *k, int n)
{
    eng_sampler *s;
    char err[256] = "";
    cr_assert_eq(eng_sampler_new(k, n, &s, err, sizeof err), 0, "%s", err);
    return s;
}

/* One draw from a copy of logits (the sampler changes its input). */
static int32_t draw(eng_sampler *s, const float *logits, int n, float *scratch)
{
    memcpy(scratch, logits, (size_t)n * sizeof *scratch);
    int32_t id = eng_sampler_sample(s, scratch);
    cr_assert(id >= 0 && id < n, "id %d out of range", id);
    return id;
}

/* Softmax of logits / t in double. */
static void softmax_ref(const float *logits, int n, double t, double *p)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, logits[i]);
    for (int i = 0; i < n; i++)
        sum += p[i] = exp((logits[i] - mx) / t);
    for (int i = 0; i < n; i++)
        p[i] /= sum;
}

/* Keep the shortest most-likely prefix reaching top_p, zero the rest, renormalise. */
static void top_p_ref(double *p, int n, double top_p)
{
    int order[64];
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && p[order[j]] > p[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    double cum = 0;
    int keep = n;
    for (int i = 0; i < n; i++) {
        cum += p[order[i]];
        if (cum >= top_p) {
            keep = i + 1;
            break;
        }
    }
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (i >= keep)
            p[order[i]] = 0;
        sum += p[order[i]];
    }
    for (int i = 0; i < n; i++)
        p[i] /= sum;
}

#define N_DRAWS 200000

/* 200k draws against `want`; a draw of a zero-probability id fails at once. */
static double chi_square(eng_sampler *s, const float *logits, int n, const double *want, int *dof)
{
    int count[64] = {0};
    float scratch[64];
    for (int i = 0; i < N_DRAWS; i++)
        count[draw(s, logits, n, scratch)]++;
    double chi2 = 0;
    *dof = -1;
    for (int i = 0; i < n; i++) {
        if (want[i] == 0) {
            cr_assert_eq(count[i], 0, "id %d has probability 0 but was drawn %d times", i,
                         count[i]);
            continue;
        }
        double e = want[i] * N_DRAWS;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        (*dof)++;
    }
    return chi2;
}

/* A chi-square bound far in the tail: the mean is dof, the sd sqrt(2 dof); mean +
 * 8 sd + 10 is beyond the 1e-6 quantile for the dof used here. */
static double chi_bound(int dof) { return dof + 8 * sqrt(2.0 * dof) + 10; }

/* 16 logits with distinct, well-separated probabilities. */
static const float small16[16] = {1.0f, -0.5f, 2.0f, 0.25f, -1.0f, 1.5f, 0.0f, -2.0f,
                                  0.75f, -0.25f, 1.25f, -1.5f, 0.5f, -0.75f, 1.75f, -3.0f};

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

/* ---- penalties ------------------------------------------------------------------------- */

/* Greedy samplers expose the logits after bias and penalties (the header's
 * post-condition), so these compare exact values. */
static const float pen8[8] = {2.0f, -2.0f, 1.0f, 0.0f, 3.0f, -1.0f, 0.5f, 4.0f};

static void after(eng_sampler *s, float *out)
{
    memcpy(out, pen8, sizeof pen8);
    eng_sampler_sample(s, out);
}

MCD_TEST(penalty, repetition_window)
{
    struct eng_sampling k = neutral();
    k.temperature = 0;
    k.repetition_penalty = 2.0f;
    k.penalty_last_n = 3;
    eng_sampler *s = mk(&k, 8);
    float x[8];
    const int32_t prompt[3] = {4, 0, 1};
    eng_sampler_accept_prompt(s, prompt, 3);
    eng_sampler_accept(s, 2); /* window {0, 1, 2}; 4 fell out */
    after(s, x);
    const float want1[8] = {1.0f, -4.0f, 0.5f, 0.0f, 3.0f, -1.0f, 0.5f, 4.0f};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(x[i], want1[i], "id %d: %g, want %g", i, x[i], want1[i]);
    eng_sampler_accept(s, 2); /* window {1, 2, 2}: 2 is penalised once */
    eng_sampler_accept(s, 3); /* window {2, 2, 3}: 0 is 0 either way */
    after(s, x);
    const float want2[8] = {2.0f, -2.0f, 0.5f, 0.0f, 3.0f, -1.0f, 0.5f, 4.0f};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(x[i], want2[i], "id %d: %g, want %g", i, x[i], want2[i]);
    eng_sampler_free(s);
}

MCD_TEST(penalty, repetition_whole_history)
{
    struct eng_sampling k = neutral();
    k.temperature = 0;
    k.repetition_penalty = 1.25f;
    k.penalty_last_n = 0;
    eng_sampler *s = mk(&k, 8);
    const int32_t prompt[6] = {7, 7, 5, 7, 1, 7};
    eng_sampler_accept_prompt(s, prompt, 6);
    for (int i = 0; i < 100; i++)
        eng_sampler_accept(s, 6);
    float x[8];
    after(s, x);
    const float want[8] = {2.0f, -2.5f, 1.0f, 0.0f, 3.0f, -1.25f, 0.4f, 3.2f};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(x[i], want[i], "id %d: %g, want %g", i, x[i], want[i]);
    /* The greedy choice moved: 7 (3.2) still beats 4 (3.0). */
    cr_assert_eq(eng_sampler_sample(s, memcpy(x, pen8, sizeof pen8)), 7);
    eng_sampler_accept(s, 4); /* 4 -> 2.4 */
    cr_assert_eq(eng_sampler_sample(s, memcpy(x, pen8, sizeof pen8)), 7);
    eng_sampler_free(s);

    /* A flip: 1.0 / 1.2 = 0.833 < 0.9. */
    k.repetition_penalty = 1.2f;
    s = mk(&k, 2);
    float two[2] = {1.0f, 0.9f};
    cr_assert_eq(eng_sampler_sample(s, two), 0);
    eng_sampler_accept(s, 0);
    two[0] = 1.0f;
    two[1] = 0.9f;
    cr_assert_eq(eng_sampler_sample(s, two), 1);
    eng_sampler_free(s);
}

MCD_TEST(penalty, presence_and_frequency)
{
    struct eng_sampling k = neutral();
    k.temperature = 0;
    k.presence_penalty = 0.5f;
    k.frequency_penalty = 0.25f;
    eng_sampler *s = mk(&k, 8);
    const int32_t prompt[3] = {0, 0, 7};
    eng_sampler_accept_prompt(s, prompt, 3); /* not counted: generated tokens only */
    eng_sampler_accept(s, 3);
    eng_sampler_accept(s, 3);
    eng_sampler_accept(s, 6);
    eng_sampler_accept(s, 7);
    eng_sampler_accept(s, 7);
    eng_sampler_accept(s, 7);
    eng_sampler_accept(s, 7);
    float x[8];
    after(s, x);
    /* OpenAI: mu[j] -= c[j] * frequency + (c[j] > 0) * presence. */
    const float want[8] = {2.0f, -2.0f, 1.0f, -1.0f, 3.0f, -1.0f, -0.25f, 2.5f};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(x[i], want[i], "id %d: %g, want %g", i, x[i], want[i]);
    eng_sampler_free(s);

    /* Negative values encourage. */
    k.presence_penalty = -2.0f;
    k.frequency_penalty = -0.5f;
    s = mk(&k, 8);
    eng_sampler_accept(s, 1);
    eng_sampler_accept(s, 1);
    after(s, x);
    cr_assert_eq(x[1], 1.0f);
    eng_sampler_free(s);
}

/* Repetition first (CTRL), then presence and frequency. */
MCD_TEST(penalty, order)
{
    struct eng_sampling k = neutral();
    k.temperature = 0;
    k.repetition_penalty = 2.0f;
    k.presence_penalty = 0.5f;
    eng_sampler *s = mk(&k, 8);
    eng_sampler_accept(s, 0);
    eng_sampler_accept(s, 1);
    float x[8];
    after(s, x);
    cr_assert_eq(x[0], 0.5f, "2 / 2 - 0.5, not (2 - 0.5) / 2");
    cr_assert_eq(x[1], -4.5f, "-2 * 2 - 0.5");
    eng_sampler_free(s);
}

/* Ids outside the vocabulary are ignored by the history, not written past it. */
MCD_TEST(penalty, out_of_range_ids_ignored)
{
    struct eng_sampling k = neutral();
    k.temperature = 0;
    k.repetition_penalty = 2.0f;
    k.penalty_last_n = 2;
    k.presence_penalty = 1.0f;
    eng_sampler *s = mk(&k, 8);
    const int32_t prompt[3] = {-1, 8, 1 << 30};
    eng_sampler_accept_prompt(s, prompt, 3);
    eng_sampler_accept(s, -5);
    eng_sampler_accept(s, 8);
    float x[8];
    after(s, x);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(x[i], pen8[i]);
    eng_sampler_free(s);
}

/* ---- logit bias ---------------------------------------------------------------------------- */

MCD_TEST(bias, ban_and_force)
{
    enum { V = 200 };
    float logits[V], scratch[V];
    rng_state = 21;
    for (int i = 0; i < V; i++)
        logits[i] = rndf(-5, 5);
    logits[50] = 8.0f; /* the favourite: ~90% of the mass */

    /* -100 bans; so does anything below. */
    struct eng_logit_bias ban[2] = {{50, -100.0f}, {51, -1000.0f}};
    struct eng_sampling k = neutral();
    k.bias = ban;
    k.n_bias = 2;
    k.seed = 5;
    eng_sampler *s = mk(&k, V);
    for (int i = 0; i < 5000; i++) {
        int32_t id = draw(s, logits, V, scratch);
        cr_assert(id != 50 && id != 51, "banned id %d drawn", id);
    }
    memcpy(scratch, logits, sizeof scratch);
    eng_sampler_sample(s, scratch);
    cr_assert(isinf(scratch[50]) && scratch[50] < 0, "-100 is -inf, not logit - 100");
    eng_sampler_free(s);

    /* +100 forces, even at a high temperature-ish setting and for the least likely id. */
    int32_t worst = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] < logits[worst])
            worst = i;
    struct eng_logit_bias force = {worst, 100.0f};
    k.bias = &force;
    k.n_bias = 1;
    k.top_p = 0.95f;
    eng_sampler *f = mk(&k, V);
    for (int i = 0; i < 5000; i++)
        cr_assert_eq(draw(f, logits, V, scratch), worst);
    eng_sampler_free(f);

    /* The caller's array is copied: changing it later changes nothing. */
    struct eng_logit_bias mut = {worst, 100.0f};
    k.bias = &mut;
    k.temperature = 0;
    eng_sampler *g = mk(&k, V);
    mut.id = 50;
    mut.bias = -100.0f;
    cr_assert_eq(draw(g, logits, V, scratch), worst);
    eng_sampler_free(g);
}

MCD_TEST(bias, everything_banned)
{
    struct eng_logit_bias ban[16];
    for (int i = 0; i < 16; i++)
        ban[i] = (struct eng_logit_bias){i, -100.0f};
    float scratch[16];
    for (int greedy = 0; greedy < 2; greedy++) {
        struct eng_sampling k = neutral();
        k.bias = ban;
        k.n_bias = 16;
        k.temperature = greedy ? 0.0f : 1.0f;
        eng_sampler *s = mk(&k, 16);
        cr_assert_eq(draw(s, small16, 16, scratch), 0, "no crash; the lowest id");
        eng_sampler_free(s);
    }
    /* All but one banned: that one, always. */
    ban[9].bias = 0.0f;
    struct eng_sampling k = neutral();
    k.bias = ban;
    k.n_bias = 16;
    eng_sampler *s = mk(&k, 16);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(draw(s, small16, 16, scratch), 9);
    eng_sampler_free(s);
}

/* NaN and -inf logits are never drawn; +inf wins. */
MCD_TEST(sampler, non_finite_logits)
{
    float logits[6] = {NAN, 1.0f, -INFINITY, 0.5f, NAN, 0.0f}, scratch[6];
    struct eng_sampling k = neutral();
    k.seed = 3;
    eng_sampler *s = mk(&k, 6);
    for (int i = 0; i < 2000; i++) {
        int32_t id = draw(s, logits, 6, scratch);
        cr_assert(id == 1 || id == 3 || id == 5, "drew %d", id);
    }
    logits[3] = INFINITY;
    logits[5] = INFINITY;
    int n3 = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t id = draw(s, logits, 6, scratch);
        cr_assert(id == 3 || id == 5, "drew %d", id);
        n3 += id == 3;
    }
    cr_assert(n3 > 800 && n3 < 1200, "two +inf share evenly (%d of 2000)", n3);
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

/* ---- MiniCPM5-sized vocabulary ------------------------------------------------------------- */

enum { BIG = 130560 };

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

/* ---- a pack's generation_config.json and stop ids ------------------------------------------- */

static char dir[64];

static void put(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void drop(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

#define CONFIG_HEAD                                                                           \
    "{\"model_type\":\"llama\",\"hidden_size\":2048,\"num_hidden_layers\":42,"                \
    "\"num_attention_heads\":16,\"num_key_value_heads\":2,\"head_dim\":128,"                  \
    "\"intermediate_size\":6144,\"vocab_size\":130560"
#define MINICPM5_GEN                                                                          \
    "{\"do_sample\": true, \"temperature\": 1.0, \"top_p\": 0.95, "                           \
    "\"eos_token_id\": [1, 130073], \"bos_token_id\": 0, \"pad_token_id\": 1}"

static void pack_setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mcd-sample-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    put("config.json", CONFIG_HEAD "}");
    put("tokenizer.json", "{}");
    put("model.safetensors", "x");
}

static void pack_teardown(void)
{
    drop("config.json");
    drop("generation_config.json");
    drop("tokenizer.json");
    drop("model.safetensors");
    rmdir(dir);
}

TestSuite(pack, .init = pack_setup, .fini = pack_teardown);

static eng_pack *open_pack(void)
{
    eng_pack *p;
    char err[256];
    cr_assert_eq(eng_pack_open(dir, &p, err, sizeof err), 0, "%s", err);
    return p;
}

/* Stop ids of the pack with these files (NULL: the file is absent). */
static int stop_ids(const char *gen, const char *cfg_tail, int32_t *ids, int max, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg, CONFIG_HEAD "%s}", cfg_tail ? cfg_tail : "");
    put("config.json", cfg);
    if (gen)
        put("generation_config.json", gen);
    else
        drop("generation_config.json");
    eng_pack *p = open_pack();
    int n = eng_pack_stop_ids(p, ids, max, err, 256);
    eng_pack_free(p);
    return n;
}

MCD_TEST(pack, stop_ids)
{
    int32_t ids[8];
    char err[256] = "";
    cr_assert_eq(stop_ids(MINICPM5_GEN, NULL, ids, 8, err), 2, "%s", err);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 130073);

    cr_assert_eq(stop_ids("{\"eos_token_id\": 7}", NULL, ids, 8, err), 1, "%s", err);
    cr_assert_eq(ids[0], 7);
    /* The union with config.json, deduplicated and ascending. */
    cr_assert_eq(stop_ids("{\"eos_token_id\": [9, 2, 9]}", ",\"eos_token_id\": [130073, 2]", ids,
                          8, err),
                 3, "%s", err);
    cr_assert_eq(ids[0], 2);
    cr_assert_eq(ids[1], 9);
    cr_assert_eq(ids[2], 130073);
    /* No generation_config.json; config.json's number; integral reals; nulls. */
    cr_assert_eq(stop_ids(NULL, ",\"eos_token_id\": 5.0", ids, 8, err), 1, "%s", err);
    cr_assert_eq(ids[0], 5);
    cr_assert_eq(stop_ids("{\"eos_token_id\": null}", NULL, ids, 8, err), 0, "%s", err);
    cr_assert_eq(stop_ids("{\"eos_token_id\": []}", ",\"eos_token_id\": null", ids, 8, err), 0);
    /* Exactly max fit; more than max is an error, not a silent truncation. */
    cr_assert_eq(stop_ids("{\"eos_token_id\": [5, 4, 3, 2]}", ",\"eos_token_id\": 5", ids, 4,
                          err),
                 4, "%s", err);
    cr_assert_eq(ids[0], 2);
    cr_assert_eq(ids[3], 5);
    ids[2] = -7;
    cr_assert_eq(stop_ids("{\"eos_token_id\": [5, 4, 3, 2]}", NULL, ids, 2, err), -EINVAL);
    cr_assert_not_null(strstr(err, "more than the 2 supported"), "%s", err);
    cr_assert_eq(ids[2], -7, "nothing written past max");
    cr_assert_eq(stop_ids("{\"eos_token_id\": null}", NULL, NULL, 0, err), 0);
}

static void expect_stop_error(const char *gen, const char *cfg_tail, const char *file,
                              const char *want)
{
    int32_t ids[8];
    char err[256] = "";
    cr_assert_eq(stop_ids(gen, cfg_tail, ids, 8, err), -EINVAL, "accepted %s / %s", gen,
                 cfg_tail);
    cr_assert_not_null(strstr(err, file), "message '%s' lacks '%s'", err, file);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert_null(strchr(err, '\n'));
}

MCD_TEST(pack, stop_ids_invalid)
{
    expect_stop_error("{\"eos_token_id\": \"1\"}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": [1, \"2\"]}", NULL, "generation_config.json",
                      "eos_token_id");
    expect_stop_error("{\"eos_token_id\": [1, [2]]}", NULL, "generation_config.json",
                      "eos_token_id");
    expect_stop_error("{\"eos_token_id\": 1.5}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": true}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": -1}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": 130560}", NULL, "generation_config.json", "0..130559");
    expect_stop_error(NULL, ",\"eos_token_id\": {\"a\": 1}", "config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": 1,}", NULL, "generation_config.json", ":1:");
    expect_stop_error("[1, 2]", NULL, "generation_config.json", "object");
    expect_stop_error("{\"eos_token_id\": 1, \"eos_token_id\": 2}", NULL,
                      "generation_config.json", "duplicate");
}

static int defaults(const char *gen, struct eng_sampling *s, char *err)
{
    if (gen)
        put("generation_config.json", gen);
    else
        drop("generation_config.json");
    eng_pack *p = open_pack();
    int rc = eng_sampling_defaults(p, s, err, 256);
    eng_pack_free(p);
    return rc;
}

MCD_TEST(pack, sampling_defaults)
{
    struct eng_sampling s;
    char err[256] = "";
    /* No file: neutral. */
    cr_assert_eq(defaults(NULL, &s, err), 0, "%s", err);
    cr_assert_eq(s.temperature, 1.0f);
    cr_assert_eq(s.top_p, 1.0f);
    cr_assert_eq(s.top_k, 0);
    cr_assert_eq(s.min_p, 0.0f);
    cr_assert_eq(s.repetition_penalty, 1.0f);
    cr_assert_eq(s.penalty_last_n, 0);
    cr_assert_eq(s.presence_penalty, 0.0f);
    cr_assert_eq(s.frequency_penalty, 0.0f);
    cr_assert_null(s.bias);
    cr_assert_eq(s.n_bias, 0);

    cr_assert_eq(defaults(MINICPM5_GEN, &s, err), 0, "%s", err);
    cr_assert_eq(s.temperature, 1.0f);
    cr_assert_eq(s.top_p, 0.95f);
    cr_assert_eq(s.top_k, 0);
    cr_assert_eq(s.repetition_penalty, 1.0f);
    eng_sampler *smp = mk(&s, 130560);
    eng_sampler_free(smp);

    cr_assert_eq(defaults("{\"temperature\": 0.7, \"top_k\": 20, \"min_p\": 0.05, "
                          "\"repetition_penalty\": 1.05, \"top_p\": null, \"foo\": [1]}",
                          &s, err),
                 0, "%s", err);
    cr_assert_eq(s.temperature, 0.7f);
    cr_assert_eq(s.top_p, 1.0f);
    cr_assert_eq(s.top_k, 20);
    cr_assert_eq(s.min_p, 0.05f);
    cr_assert_eq(s.repetition_penalty, 1.05f);

    cr_assert_eq(defaults("{\"do_sample\": false, \"temperature\": 0.7, \"top_k\": 50.0}", &s,
                          err),
                 0, "%s", err);
    cr_assert_eq(s.temperature, 0.0f, "do_sample false is greedy");
    cr_assert_eq(s.top_k, 50);
}

static void expect_defaults_error(const char *gen, const char *want)
{
    struct eng_sampling s;
    char err[256] = "";
    cr_assert_eq(defaults(gen, &s, err), -EINVAL, "accepted %s", gen);
    cr_assert_not_null(strstr(err, "generation_config.json"), "message '%s' names no file", err);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert_null(strchr(err, '\n'));
}

MCD_TEST(pack, sampling_defaults_invalid)
{
    expect_defaults_error("{\"temperature\": \"1\"}", "temperature");
    expect_defaults_error("{\"temperature\": -0.5}", "temperature");
    expect_defaults_error("{\"top_p\": 0}", "top_p");
    expect_defaults_error("{\"top_p\": 1.5}", "top_p");
    expect_defaults_error("{\"top_k\": -1}", "top_k");
    expect_defaults_error("{\"top_k\": 2.5}", "top_k");
    expect_defaults_error("{\"top_k\": \"40\"}", "top_k");
    expect_defaults_error("{\"min_p\": 1}", "min_p");
    expect_defaults_error("{\"min_p\": -0.1}", "min_p");
    expect_defaults_error("{\"repetition_penalty\": 0}", "repetition_penalty");
    expect_defaults_error("{\"do_sample\": 1}", "do_sample");
    expect_defaults_error("{\"top_p\": 0.9", "generation_config.json:");
    expect_defaults_error("[1]", "object");
    expect_defaults_error("\"text\"", "generation_config.json:1:");
    expect_defaults_error("", "generation_config.json:");
}
