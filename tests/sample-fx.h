/* Shared by the sampler tests (test-sample-*.c): a seeded generator, the sampler
 * made and drawn from, softmax and top-p in double, and Pearson's chi-square over
 * 200,000 draws.
 *
 * Distributions are checked against probabilities computed here in double with libm.
 * The draws are seeded, so each test is deterministic; the bounds lie beyond the
 * 1e-6 quantile, loose enough that a correct sampler passes for any seed and tight
 * enough that a wrong temperature, cut or renormalisation fails by orders of
 * magnitude. */
#ifndef MINICPMD_TESTS_SAMPLE_FX_H
#define MINICPMD_TESTS_SAMPLE_FX_H

#include "engine/engine.h"
#include "engine/worker/sample.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng_state = 1;

static inline uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static inline float rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd() & 0xFFFFFF) / 16777216.0f;
}

static inline struct eng_sampling neutral(void)
{
    struct eng_sampling s;
    cr_assert_eq(eng_sampling_defaults(NULL, &s, NULL, 0), 0);
    return s;
}

static inline eng_sampler *mk(const struct eng_sampling *k, int n)
{
    eng_sampler *s;
    char err[256] = "";
    cr_assert_eq(eng_sampler_new(k, n, &s, err, sizeof err), 0, "%s", err);
    return s;
}

/* One draw from a copy of logits (the sampler changes its input). */
static inline int32_t draw(eng_sampler *s, const float *logits, int n, float *scratch)
{
    memcpy(scratch, logits, (size_t)n * sizeof *scratch);
    int32_t id = eng_sampler_sample(s, scratch);
    cr_assert(id >= 0 && id < n, "id %d out of range", id);
    return id;
}

/* Softmax of logits / t in double. */
static inline void softmax_ref(const float *logits, int n, double t, double *p)
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
static inline void top_p_ref(double *p, int n, double top_p)
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
static inline double chi_square(eng_sampler *s, const float *logits, int n, const double *want,
                                int *dof)
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
static inline double chi_bound(int dof) { return dof + 8 * sqrt(2.0 * dof) + 10; }

/* 16 logits with distinct, well-separated probabilities. */
static const float small16[16] = {1.0f, -0.5f, 2.0f, 0.25f, -1.0f, 1.5f, 0.0f, -2.0f,
                                  0.75f, -0.25f, 1.25f, -1.5f, 0.5f, -0.75f, 1.75f, -3.0f};

/* MiniCPM5's vocabulary size. */
enum { BIG = 130560 };

#endif
