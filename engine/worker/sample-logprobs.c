/* eng_logprobs: the log-softmax of the raw logits and the k most likely ids, for
 * the API's `logprobs` / `top_logprobs`. Kept apart from the sampler because it
 * shares none of its state or code: it reads the model's distribution (before
 * bias, penalties and temperature), in double with libm's exp and log, and keeps
 * its own small heap over eng_top_logprob (k <= 20).
 */
#include "engine/worker/sample.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>

/* The top list is kept in the caller's array as a heap of raw logits (in .logprob)
 * whose root is the worst kept: larger logit first, ties to the lower id. */
static inline bool lp_before(const struct eng_top_logprob *a, const struct eng_top_logprob *b)
{
    return a->logprob > b->logprob || (a->logprob == b->logprob && a->id < b->id);
}

static void lp_sift(struct eng_top_logprob *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && lp_before(&h[w], &h[l]))
            w = l;
        if (r < n && lp_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        struct eng_top_logprob t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* log p_i = (x_i - max) - log(sum_j exp(x_j - max)), the sum in double. NaN counts
 * as -inf. Without a finite maximum (a +inf logit, or none above -inf) the limit
 * is taken: the logits equal to the maximum share evenly, the rest get -inf. */
struct lse {
    float mx;
    bool finite;
    double lse;     /* finite: log-sum-exp of the logits */
    double lp_max;  /* not finite: the log-probability of each logit at mx */
};

static float logprob_of(const struct lse *z, float x)
{
    if (isnan(x))
        return -INFINITY;
    if (z->finite)
        return (float)((double)x - z->lse);
    return x == z->mx ? (float)z->lp_max : -INFINITY;
}

float eng_logprobs(const float *logits, int n, int32_t id, struct eng_top_logprob *top, int k)
{
    struct lse z = {.mx = -INFINITY};
    for (int i = 0; i < n; i++)
        if (logits[i] > z.mx)
            z.mx = logits[i];
    z.finite = isfinite(z.mx);
    if (z.finite) {
        double sum = 0.0;
        for (int i = 0; i < n; i++)
            if (logits[i] >= -FLT_MAX)
                sum += exp((double)logits[i] - (double)z.mx);
        z.lse = (double)z.mx + log(sum);
    } else {
        int at_max = 0;
        for (int i = 0; i < n; i++)
            at_max += logits[i] == z.mx;
        z.lp_max = -log((double)at_max);
    }

    /* The k best by a k-element heap over one scan, then sorted (k is small). */
    int m = 0;
    for (int i = 0; i < n && k > 0; i++) {
        float v = logits[i];
        if (isnan(v))
            continue;
        if (m < k) {
            top[m].id = i;
            top[m].logprob = v;
            if (++m == k)
                for (int j = k / 2 - 1; j >= 0; j--)
                    lp_sift(top, k, j);
        } else if (v > top[0].logprob) {
            top[0].id = i;
            top[0].logprob = v;
            lp_sift(top, k, 0);
        }
    }
    for (int i = 1; i < m; i++) {
        struct eng_top_logprob x = top[i];
        int j = i;
        for (; j > 0 && lp_before(&x, &top[j - 1]); j--)
            top[j] = top[j - 1];
        top[j] = x;
    }
    for (int i = 0; i < m; i++)
        top[i].logprob = logprob_of(&z, top[i].logprob);
    for (; m < k; m++) {
        top[m].id = -1;
        top[m].logprob = -INFINITY;
    }
    return id >= 0 && id < n ? logprob_of(&z, logits[id]) : NAN;
}
