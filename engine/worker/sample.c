/* The sampler: bias, penalties, greedy or top-k / temperature / top-p / min-p,
 * then one draw from a seeded generator; the knobs' checks and the penalty
 * history. The total order on candidates and the top-k / top-p cuts made in it
 * are in sample-sort.c (shared through sample-impl.h), eng_logprobs for the API
 * in sample-logprobs.c, generation_config.json in sample-pack.c.
 *
 * Speed. n_vocab is 130,560 for MiniCPM5, so nothing here sorts the vocabulary.
 * Greedy is one pass. Top-k keeps a k-element heap while scanning the logits
 * (k <= HEAP_K_MAX, sample-sort.c) or quickselects from a copy, then sorts only
 * the k survivors.
 * Without top-k, one vectorised pass turns the logits into weights (temperature,
 * exp, min-p as a mask) and their sums; top-p then collects the candidates above
 * a weight threshold (2^-10 of the maximum, lower only if those do not hold the
 * target mass) and finds the cut by a weighted quickselect, O(n) without sorting;
 * with no top-p the draw walks block sums, then one block. Bias and penalties
 * touch only the ids they name. All scratch is allocated by eng_sampler_new.
 * Typical costs are in tests/test-sample-big.c (big::speed).
 *
 * Reproducibility. "Same seed and same logits give the same token on every
 * machine" needs more than a portable generator:
 *   - the generator is xoshiro256** (Blackman and Vigna), its 256-bit state filled
 *     by four successive outputs of splitmix64 started at `seed`; a stochastic
 *     draw takes the top 53 bits of one output as a double in [0, 1). Every
 *     stochastic eng_sampler_sample() call uses exactly one output, even when one
 *     candidate is left; greedy calls, and calls where everything is banned, use
 *     none.
 *   - exp() comes from libm, whose last bit differs between libraries, so the
 *     weights are computed by weight1()/weight4() below from + - * / only, in
 *     IEEE float, never contracted into FMAs (GCC in ISO C mode, which meson's
 *     c_std=c11 selects, does not contract; clang is told so by the pragma).
 *   - every ordering is total (sample-sort.c): larger value first, equal values
 *     by lower id. So which candidates survive a cut, and the order in which the
 *     draw walks them, depend on the input alone, not on a sort's stability or a
 *     library's qsort.
 *     Sums run in an order fixed by the code, in double.
 * The golden test pins one sequence; GCC and clang, -O2 and -O3 -march=native
 * (with FMA) give it. Cuts are exact up to that rounding: a token whose
 * cumulative mass is within ~1e-16 of the top-p target may fall either side.
 *
 * Non-finite logits. NaN and -inf logits are never sampled (NaN counts as -inf);
 * a +inf logit wins over every finite one and several +inf logits share evenly.
 * If every logit is -inf or NaN (everything banned), eng_sampler_sample returns
 * the lowest id with the largest value, id 0 when all are -inf: the caller asked
 * for the impossible and gets a valid id, not a crash.
 */
#include "engine/err.h"
#include "engine/worker/sample-impl.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The longest repetition window, a bound on memory; 0 (the whole history) is the
 * way to say "longer than the context". */
#define PENALTY_LAST_N_MAX (1 << 20)
/* Without top-k the draw first walks the masses of blocks of this many ids. */
#define W_BLOCK 64
/* OpenAI: a bias of -100 bans the token. */
#define BIAS_BAN (-100.0f)

struct eng_sampler {
    struct eng_sampling s;       /* the knobs; s.bias points at `bias` */
    int n_vocab;
    bool greedy;                 /* temperature <= 0 or top_k == 1 */
    uint64_t rng[4];             /* xoshiro256** state */
    struct sample_cand *cand;    /* (n_vocab) candidates: top-k, top-p */
    float *w;                    /* (n_vocab) weights by id without top-k */
    double *blocks;              /* (n_vocab / W_BLOCK, rounded up) their sums */
    struct eng_logit_bias *bias; /* (n_bias) own copy; <= -100 already -inf */

    /* Repetition: the distinct ids among the last penalty_last_n accepted ones. */
    bool rep_on;
    int32_t *ring;      /* (penalty_last_n) the window; NULL when it is "all" */
    int ring_cap, ring_len, ring_head;
    int32_t *rep_count; /* (n_vocab) occurrences in the window */
    int32_t *rep_pos;   /* (n_vocab) index in rep_ids while rep_count > 0 */
    int32_t *rep_ids;   /* (n_vocab) the distinct ids, n_rep of them */
    int n_rep;

    /* Presence and frequency: counts of generated ids. */
    bool pf_on;
    int32_t *gen_count; /* (n_vocab) */
    int32_t *gen_ids;   /* (n_vocab) the distinct generated ids, n_gen of them */
    int n_gen;
};

/* ---- the generator --------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t st[4])
{
    uint64_t out = rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return out;
}

/* [0, 1) with 53 random bits. */
static double uniform(uint64_t st[4]) { return (double)(xoshiro_next(st) >> 11) * 0x1.0p-53; }

/* ---- weights: a portable exp ------------------------------------------------- */

/* Every weight is e^y with y = (logit - max) / temperature <= 0, computed in float
 * from + - * / only, so every IEEE machine gets the same bits, and four at a time
 * with GCC/clang vector extensions (SSE2 on x86-64, NEON on arm64); the scalar
 * version used for the tails is one lane of the vector one.
 *
 * e^y = 2^k e^r with k = round(y / ln 2), r = y - k ln 2 (Cody-Waite: ln2_hi has
 * 16 significant bits, so k * ln2_hi is exact for |k| <= 127), e^r by its degree-6
 * Taylor polynomial on |r| <= ln2/2: relative error < 3e-7, about 2 ulp. Below
 * y = -86 the weight is 0: 2^k stays a normal float and subnormals, which
 * flush-to-zero modes treat differently, never appear. A NaN y is weight 0. */
#define W_MIN_Y (-86.0f)
#define W_LOG2E 1.44269504f
#define W_LN2_HI 0.693145751953125f
#define W_LN2_LO 1.428606765330187045e-06f /* ln 2 - W_LN2_HI, to float */
#define W_ROUND 0x1.8p23f /* adding and subtracting it rounds to an integer */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

static inline v4f v4_select(v4i mask, v4f a, v4f b)
{
    return (v4f)(((v4i)a & mask) | ((v4i)b & ~mask));
}

static inline v4f weight4(v4f y)
{
    const v4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    v4i live = y >= W_MIN_Y; /* false for NaN */
    y = v4_select(live & (y <= 0.0f), y, zero);
    v4f k = (y * W_LOG2E + W_ROUND) - W_ROUND;
    v4f r = (y - k * W_LN2_HI) - k * W_LN2_LO;
    v4f p = zero + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    v4f two_k = (v4f)((__builtin_convertvector(k, v4i) + 127) << 23);
    return v4_select(live, p * two_k, zero);
}

/* One lane of weight4: the scalar tails get the very same operations. */
static inline float weight1(float y)
{
    v4f w = weight4((v4f){y, y, y, y});
    return w[0];
}

/* ---- the chain's steps ------------------------------------------------------- */

/* Greedy: the largest logit, ties to the lowest id; NaN loses to everything. */
static int32_t argmax(const float *x, int n)
{
    int32_t best = 0;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > bv) {
            bv = x[i];
            best = i;
        }
    return best;
}

static void apply_bias(const eng_sampler *s, float *logits)
{
    for (int i = 0; i < s->s.n_bias; i++)
        logits[s->bias[i].id] += s->bias[i].bias;
}

static void apply_penalties(const eng_sampler *s, float *logits)
{
    if (s->rep_on) {
        const float rp = s->s.repetition_penalty;
        for (int i = 0; i < s->n_rep; i++) {
            float *l = &logits[s->rep_ids[i]];
            *l = *l > 0.0f ? *l / rp : *l * rp;
        }
    }
    if (s->pf_on) {
        const float pres = s->s.presence_penalty, freq = s->s.frequency_penalty;
        for (int i = 0; i < s->n_gen; i++) {
            int32_t id = s->gen_ids[i];
            logits[id] -= (float)s->gen_count[id] * freq + pres;
        }
    }
}

/* The largest clamped logit; -inf when none is above -inf. */
static float max_logit(const float *x, int n)
{
    v4f m4 = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f v;
        memcpy(&v, x + i, sizeof v);
        m4 = v4_select(v > m4, v, m4); /* NaN never wins */
    }
    float m = -INFINITY;
    for (int j = 0; j < 4; j++)
        if (m4[j] > m)
            m = m4[j];
    for (; i < n; i++)
        if (x[i] > m)
            m = x[i];
    return sample_clamp_logit(m);
}

/* The draw over m weighted candidates, walked in the order `kept` was summed in. */
static int32_t draw_cands(eng_sampler *s, const struct sample_cand *c, int m, double kept)
{
    double r = uniform(s->rng) * kept, cum = 0.0;
    for (int i = 0; i < m; i++) {
        cum += c[i].v;
        if (cum > r)
            return c[i].id;
    }
    return c[m - 1].id; /* r rounded up to `kept` */
}

/* After top-k: m sorted candidates carrying logits. */
static int32_t sample_sorted(eng_sampler *s, struct sample_cand *c, int m)
{
    const float mx = c[0].v, temp = s->s.temperature, min_p = s->s.min_p;
    double total = 0.0, kept = 0.0;
    int j = 0;
    for (int i = 0; i < m; i++) {
        float w = weight1((c[i].v - mx) / temp);
        total += w;
        if (w > 0.0f && w >= min_p) { /* the order keeps min-p a prefix */
            c[j].v = w;
            c[j].id = c[i].id;
            kept += w;
            j++;
        }
    }
    m = j; /* >= 1: the first has weight 1 */
    if (s->s.top_p < 1.0f)
        m = eng__sample_top_p_cut(c, m, true, (double)s->s.top_p * total, &kept);
    return draw_cands(s, c, m, kept);
}

/* Without top-k: the weights of the whole vocabulary, by id, in w[]. One pass
 * computes them (min-p zeroes those below min_p: the maximum's weight is exactly
 * 1, so p >= min_p * p_max is w >= min_p), the mass of each block of W_BLOCK ids
 * after min-p, and the total before min-p that top-p's target is a share of. The
 * sums have a fixed order (four double lanes per block, blocks in order). */

static int32_t sample_all(eng_sampler *s, const float *logits)
{
    const int n = s->n_vocab;
    const float mx = max_logit(logits, n);
    if (mx == -INFINITY)
        return argmax(logits, n); /* everything banned */
    const float temp = s->s.temperature, min_p = s->s.min_p;
    const v4f flt_max4 = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX}, zero4 = {0, 0, 0, 0};
    float *w = s->w;
    double total = 0.0, kept = 0.0;
    for (int b = 0; b * W_BLOCK < n; b++) {
        int i = b * W_BLOCK, end = i + W_BLOCK < n ? i + W_BLOCK : n;
        v4d all4 = {0, 0, 0, 0}, kept4 = {0, 0, 0, 0};
        for (; i + 4 <= end; i += 4) {
            v4f v;
            memcpy(&v, logits + i, sizeof v);
            v = v4_select(v > FLT_MAX, flt_max4, v);
            v4f e = weight4((v - mx) / temp);
            all4 += __builtin_convertvector(e, v4d);
            e = v4_select(e >= min_p, e, zero4);
            kept4 += __builtin_convertvector(e, v4d);
            memcpy(w + i, &e, sizeof e);
        }
        double all1 = (all4[0] + all4[1]) + (all4[2] + all4[3]);
        double kept1 = (kept4[0] + kept4[1]) + (kept4[2] + kept4[3]);
        for (; i < end; i++) {
            float e = weight1((sample_clamp_logit(logits[i]) - mx) / temp);
            all1 += e;
            if (!(e >= min_p))
                e = 0.0f;
            kept1 += e;
            w[i] = e;
        }
        s->blocks[b] = kept1;
        total += all1;
        kept += kept1;
    }

    /* Top-p; when min-p left less than its target, the nucleus holds all of it. */
    const double target = (double)s->s.top_p * total;
    if (s->s.top_p < 1.0f && kept > target) {
        /* Only the candidates above a weight threshold can be in the nucleus, once
         * those above it hold the target mass: try 2^-10, 2^-20, 2^-30, then all.
         * Peaked distributions stop at the first with a handful of candidates. */
        struct sample_cand *c = s->cand;
        for (float tau = 0x1p-10f;; tau *= 0x1p-10f) {
            if (tau < 0x1p-30f)
                tau = FLT_MIN; /* every nonzero weight */
            double above = 0.0;
            int m = 0;
            for (int i = 0; i < n; i++)
                if (w[i] >= tau) {
                    c[m].v = w[i];
                    c[m].id = i;
                    above += w[i];
                    m++;
                }
            if (above >= target || tau == FLT_MIN) {
                double k;
                m = eng__sample_top_p_cut(c, m, false, target, &k);
                return draw_cands(s, c, m, k);
            }
        }
    }

    /* The draw: blocks first, then ids within the block. */
    double r = uniform(s->rng) * kept, cum = 0.0;
    int nb = (n + W_BLOCK - 1) / W_BLOCK, b = 0;
    for (; b < nb - 1 && cum + s->blocks[b] <= r; b++)
        cum += s->blocks[b];
    int i = b * W_BLOCK, end = i + W_BLOCK < n ? i + W_BLOCK : n, last = -1;
    for (; i < end; i++) {
        if (w[i] > 0.0f)
            last = i;
        cum += w[i];
        if (cum > r && w[i] > 0.0f)
            return i;
    }
    /* Rounding: r fell at the block's (or the vocabulary's) very end. */
    if (last >= 0)
        return last;
    for (i = b * W_BLOCK - 1; i >= 0; i--)
        if (w[i] > 0.0f)
            return i;
    return argmax(logits, n);
}

int32_t eng_sampler_sample(eng_sampler *s, float *logits)
{
    const int n = s->n_vocab;
    apply_bias(s, logits);
    apply_penalties(s, logits);
    if (s->greedy)
        return argmax(logits, n);
    if (s->s.top_k > 0 && s->s.top_k < n) {
        int m = eng__sample_top_k(logits, n, s->s.top_k, s->cand);
        if (m == 0)
            return argmax(logits, n); /* everything banned */
        return sample_sorted(s, s->cand, m);
    }
    return sample_all(s, logits);
}

/* ---- history ------------------------------------------------------------------ */

static void rep_add(eng_sampler *s, int32_t id)
{
    if (s->rep_count[id]++ == 0) {
        s->rep_pos[id] = s->n_rep;
        s->rep_ids[s->n_rep++] = id;
    } else if (!s->ring) {
        s->rep_count[id] = 1; /* the whole history: only membership matters */
    }
}

static void rep_remove(eng_sampler *s, int32_t id)
{
    if (--s->rep_count[id] == 0) {
        int32_t at = s->rep_pos[id], last = s->rep_ids[--s->n_rep];
        s->rep_ids[at] = last;
        s->rep_pos[last] = at;
    }
}

static void rep_push(eng_sampler *s, int32_t id)
{
    if (s->ring) {
        if (s->ring_len == s->ring_cap) {
            rep_remove(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = id;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_len++) % s->ring_cap] = id;
        }
    }
    rep_add(s, id);
}

/* Out-of-range ids cannot come from the tokenizer or the sampler; they are
 * ignored rather than written past the tables. */
void eng_sampler_accept(eng_sampler *s, int32_t id)
{
    if (id < 0 || id >= s->n_vocab)
        return;
    if (s->rep_on)
        rep_push(s, id);
    if (s->pf_on) {
        if (s->gen_count[id] == 0)
            s->gen_ids[s->n_gen++] = id;
        if (s->gen_count[id] < INT32_MAX)
            s->gen_count[id]++;
    }
}

void eng_sampler_accept_prompt(eng_sampler *s, const int32_t *ids, int n)
{
    if (!s->rep_on)
        return;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->n_vocab)
            rep_push(s, ids[i]);
}

/* ---- construction ------------------------------------------------------------ */

static int check_knobs(const struct eng_sampling *k, int n_vocab, char *err, size_t errlen)
{
    if (n_vocab < 1)
        return eng__fail(err, errlen, -EINVAL, "sampler: n_vocab = %d must be positive", n_vocab);
    if (isnan(k->temperature) || isinf(k->temperature))
        return eng__fail(err, errlen, -EINVAL,
                         "temperature must be a finite number (<= 0: greedy)");
    if (!(k->top_p > 0.0f && k->top_p <= 1.0f))
        return eng__fail(err, errlen, -EINVAL, "top_p = %g is out of range (0 < top_p <= 1)",
                         (double)k->top_p);
    if (k->top_k < 0)
        return eng__fail(err, errlen, -EINVAL, "top_k = %d must be >= 0 (0 = off)", k->top_k);
    if (!(k->min_p >= 0.0f && k->min_p < 1.0f))
        return eng__fail(err, errlen, -EINVAL, "min_p = %g is out of range (0 <= min_p < 1)",
                         (double)k->min_p);
    if (!(k->repetition_penalty > 0.0f && k->repetition_penalty <= FLT_MAX))
        return eng__fail(err, errlen, -EINVAL,
                         "repetition_penalty = %g must be a finite number > 0 (1 = off)",
                         (double)k->repetition_penalty);
    if (k->penalty_last_n < 0 || k->penalty_last_n > PENALTY_LAST_N_MAX)
        return eng__fail(err, errlen, -EINVAL,
                         "penalty_last_n = %d is out of range (0..%d, 0 = all)",
                         k->penalty_last_n, PENALTY_LAST_N_MAX);
    if (!(k->presence_penalty >= -2.0f && k->presence_penalty <= 2.0f))
        return eng__fail(err, errlen, -EINVAL, "presence_penalty = %g is out of range (-2..2)",
                         (double)k->presence_penalty);
    if (!(k->frequency_penalty >= -2.0f && k->frequency_penalty <= 2.0f))
        return eng__fail(err, errlen, -EINVAL, "frequency_penalty = %g is out of range (-2..2)",
                         (double)k->frequency_penalty);
    if (k->n_bias < 0)
        return eng__fail(err, errlen, -EINVAL, "logit_bias: n_bias = %d is negative", k->n_bias);
    if (k->n_bias > 0 && !k->bias)
        return eng__fail(err, errlen, -EINVAL, "logit_bias: %d entries but no array", k->n_bias);
    for (int i = 0; i < k->n_bias; i++) {
        if (k->bias[i].id < 0 || k->bias[i].id >= n_vocab)
            return eng__fail(err, errlen, -EINVAL,
                             "logit_bias: token id %d is out of range (0..%d)", k->bias[i].id,
                             n_vocab - 1);
        /* -inf is a ban like -100; +inf or NaN would poison the softmax. */
        if (isnan(k->bias[i].bias) || k->bias[i].bias > FLT_MAX)
            return eng__fail(err, errlen, -EINVAL,
                             "logit_bias: the bias of token %d must be a finite number",
                             k->bias[i].id);
    }
    return 0;
}

int eng_sampler_new(const struct eng_sampling *k, int n_vocab, eng_sampler **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    int rc = check_knobs(k, n_vocab, err, errlen);
    if (rc)
        return rc;

    eng_sampler *s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->s = *k;
    s->n_vocab = n_vocab;
    s->greedy = k->temperature <= 0.0f || k->top_k == 1;
    uint64_t x = k->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);

    if (!s->greedy) {
        s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
        s->w = malloc((size_t)n_vocab * sizeof *s->w);
        s->blocks = malloc((size_t)(n_vocab / W_BLOCK + 1) * sizeof *s->blocks);
        if (!s->cand || !s->w || !s->blocks)
            goto oom;
    }
    if (k->n_bias > 0) {
        if (!(s->bias = malloc((size_t)k->n_bias * sizeof *s->bias)))
            goto oom;
        for (int i = 0; i < k->n_bias; i++) {
            s->bias[i] = k->bias[i];
            if (s->bias[i].bias <= BIAS_BAN)
                s->bias[i].bias = -INFINITY;
        }
    }
    s->s.bias = s->bias;

    s->rep_on = k->repetition_penalty != 1.0f;
    if (s->rep_on) {
        if (k->penalty_last_n > 0) {
            s->ring_cap = k->penalty_last_n;
            if (!(s->ring = malloc((size_t)s->ring_cap * sizeof *s->ring)))
                goto oom;
        }
        s->rep_count = calloc((size_t)n_vocab, sizeof *s->rep_count);
        s->rep_pos = malloc((size_t)n_vocab * sizeof *s->rep_pos);
        s->rep_ids = malloc((size_t)n_vocab * sizeof *s->rep_ids);
        if (!s->rep_count || !s->rep_pos || !s->rep_ids)
            goto oom;
    }
    s->pf_on = k->presence_penalty != 0.0f || k->frequency_penalty != 0.0f;
    if (s->pf_on) {
        s->gen_count = calloc((size_t)n_vocab, sizeof *s->gen_count);
        s->gen_ids = malloc((size_t)n_vocab * sizeof *s->gen_ids);
        if (!s->gen_count || !s->gen_ids)
            goto oom;
    }
    *out = s;
    return 0;
oom:
    eng_sampler_free(s);
    return eng__fail(err, errlen, -ENOMEM, "sampler: out of memory");
}

void eng_sampler_free(eng_sampler *s)
{
    if (!s)
        return;
    free(s->gen_ids);
    free(s->gen_count);
    free(s->rep_ids);
    free(s->rep_pos);
    free(s->rep_count);
    free(s->ring);
    free(s->bias);
    free(s->blocks);
    free(s->w);
    free(s->cand);
    free(s);
}
