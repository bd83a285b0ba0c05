/* engine/worker/sample: repetition, presence and frequency penalties, logit bias,
 * and non-finite logits. */
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
