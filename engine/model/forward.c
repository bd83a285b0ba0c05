/* Sequences and the forward pass (docs/model-minicpm5.md §1.2): a plain Llama.
 *
 *   x = embed[token]
 *   per layer: x += Wo . attn(rope(Wq . n), rope(Wk . n), Wv . n), n = rmsnorm(x)
 *              x += Wdown . (silu(Wgate . n) * (Wup . n)),        n = rmsnorm(x)
 *   logits = lm_head . rmsnorm(x)
 *
 * A batch of n positions goes through each layer together: every matrix product
 * is one parallel region over the weight's rows (each thread reads its rows once
 * for all n tokens), so decode (n = 1) streams the weights and prefill (n up to
 * ENG_MAX_BATCH) reuses each weight tile across the batch. Attention runs per
 * (token, KV head): the group of Q heads sharing a KV head reads each cached K and
 * V row once. Small per-token work (norms, RoPE, SwiGLU, int8 quantization) runs
 * on the pool too when the batch is large enough to pay for a region. */
#include "engine/model/model-impl.h"

#include "engine/kernels/bf16.h"
#include "engine/err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct eng_seq {
    eng_model *m;
    int n_ctx, len;
    int kvd;                /* n_kv_real * head_dim */
    /* BF16. V row-major: (n_layers, n_ctx, kvd). K in blocks of ENG_ATTN_KBLOCK
     * positions, each block dimension-major: (n_layers, n_kv, n_ctx / KBLOCK
     * rounded up, head_dim, KBLOCK), so that attention reads the scores of 16
     * positions as one vector (eng_attn_gqa). */
    uint16_t *kc, *vc;
    int kblocks;            /* K blocks per layer and head */

    /* the batch in flight: positions len .. len + n - 1 */
    int n;                  /* 0: none */
    int next_layer;         /* layers [0, next_layer) have run on it */
    int cap;                /* positions the buffers below hold */
    float *x;               /* (cap, n_embd) residual stream */
    float *xn;              /* (cap, max(n_embd, q_dim, n_ff)) matmul input */
    float *q, *att;         /* (cap, q_dim) */
    float *k, *v;           /* (cap, kvd) */
    float *g, *u;           /* (cap, n_ff) */
    float *tmp;             /* (cap, n_embd) */
    float *rope;            /* (cap, head_dim) cos | sin of each position */
    struct eng_q8x xq;      /* (cap, xq_cols) int8 copy of xn */
    int xq_cols;
    float *scores;          /* (threads, group, n_ctx) attention scratch */
    /* Whose KV cache and which position each token of the batch in flight has:
     * this sequence at len + t, or, for a batch of several sequences led by this
     * one (eng_seqs_embed), the owner of each token. */
    eng_seq *tseq[ENG_MAX_BATCH];
    int tpos[ENG_MAX_BATCH];
    /* a batch of several sequences: their count and the tokens of each */
    int nseg;
    eng_seq *seg[ENG_MAX_BATCH];
    int seg_n[ENG_MAX_BATCH];
    float *hlogits;         /* (nseg, n_vocab) the head's rows, several sequences */
    int hcap;               /* rows hlogits holds */
    char err[256];
};

static int seq_fail(eng_seq *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int seq_fail(eng_seq *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return code;
}

static int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* ---- sequences ---------------------------------------------------------------- */

int eng_seq_new(eng_model *m, int n_ctx, eng_seq **out, char *err, size_t errlen)
{
    const struct eng_hparams *hp = &m->info.hp;
    *out = NULL;
    if (n_ctx < 1 || n_ctx > hp->n_ctx_train)
        return eng__fail(err, errlen, -EINVAL, "context of %d positions: must be 1 .. %d", n_ctx,
                         hp->n_ctx_train);
    eng_seq *s = calloc(1, sizeof *s);
    if (!s)
        return eng__fail(err, errlen, -ENOMEM, "out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    s->kvd = m->info.n_kv_real * hp->head_dim;
    size_t kv = (size_t)hp->n_layers * (size_t)n_ctx * (size_t)s->kvd;
    int group = hp->n_heads / m->info.n_kv_real;
    s->kblocks = (n_ctx + ENG_ATTN_KBLOCK - 1) / ENG_ATTN_KBLOCK;
    size_t kk = (size_t)hp->n_layers * (size_t)s->kblocks * ENG_ATTN_KBLOCK * (size_t)s->kvd;
    /* calloc of a large block is fresh zero pages: the cache costs memory only as
     * far as positions are actually used (a K block of one head is one 4 KB page). */
    s->kc = calloc(kk, sizeof *s->kc);
    s->vc = calloc(kv, sizeof *s->vc);
    s->scores = malloc((size_t)m->info.n_threads * (size_t)group * (size_t)n_ctx * sizeof(float));
    if (!s->kc || !s->vc || !s->scores) {
        eng_seq_free(s);
        return eng__fail(err, errlen, -ENOMEM, "out of memory for a KV cache of %d positions "
                         "(%lld MB)", n_ctx, (long long)(2 * kv * 2 >> 20));
    }
    *out = s;
    return 0;
}

static void free_batch(eng_seq *s)
{
    float **bufs[] = {&s->x, &s->xn, &s->q, &s->att, &s->k, &s->v, &s->g, &s->u, &s->tmp, &s->rope,
                      &s->xq.d, &s->xq.sum};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(s->xq.q);
    s->xq.q = NULL;
    s->cap = 0;
    free(s->hlogits);
    s->hlogits = NULL;
    s->hcap = 0;
}

void eng_seq_trim(eng_seq *s)
{
    if (s && s->n == 0)
        free_batch(s);
}

void eng_seq_free(eng_seq *s)
{
    if (!s)
        return;
    free_batch(s);
    free(s->kc);
    free(s->vc);
    free(s->scores);
    free(s);
}

int eng_seq_len(const eng_seq *s) { return s->len; }
const char *eng_seq_error(const eng_seq *s) { return s->err; }

void eng_seq_truncate(eng_seq *s, int n)
{
    if (n >= 0 && n < s->len)
        s->len = n;
    s->n = 0;
    s->nseg = 0;
    s->next_layer = 0;
}

int eng_seq_copy_prefix(eng_seq *dst, const eng_seq *src, int n)
{
    const struct eng_hparams *hp = &dst->m->info.hp;
    if (dst == src || dst->m != src->m || dst->n_ctx != src->n_ctx || n < 0 || n > src->len ||
        dst->n || src->n)
        return seq_fail(dst, -EINVAL, "cannot copy %d positions of a sequence of %d", n,
                        src->len);
    int nkv = dst->m->info.n_kv_real, hd = hp->head_dim;
    size_t kblk = (size_t)(n + ENG_ATTN_KBLOCK - 1) / ENG_ATTN_KBLOCK;
    for (int l = 0; l < hp->n_layers; l++) {
        size_t v = (size_t)l * dst->n_ctx * dst->kvd;
        memcpy(dst->vc + v, src->vc + v, (size_t)n * dst->kvd * sizeof *dst->vc);
        for (int u = 0; u < nkv; u++) {
            /* whole K blocks: the positions past n in the last one are never read
             * before the sequence writes them */
            size_t k = ((size_t)l * nkv + (size_t)u) * dst->kblocks * ENG_ATTN_KBLOCK * hd;
            memcpy(dst->kc + k, src->kc + k, kblk * ENG_ATTN_KBLOCK * hd * sizeof *dst->kc);
        }
    }
    dst->len = n;
    dst->next_layer = 0;
    return 0;
}

/* Where K element d of position pos, layer l, real KV head u sits in the blocked
 * layout (see struct eng_seq). */
static uint16_t *k_at(const eng_seq *s, int l, int u, int pos)
{
    int hd = s->m->info.hp.head_dim;
    return s->kc + (((size_t)l * s->m->info.n_kv_real + (size_t)u) * s->kblocks +
                    (size_t)(pos / ENG_ATTN_KBLOCK)) * ENG_ATTN_KBLOCK * (size_t)hd +
           pos % ENG_ATTN_KBLOCK;
}

int eng_seq_kv_get(const eng_seq *s, int l, int pos, uint16_t *k, uint16_t *v)
{
    if (l < 0 || l >= s->m->info.hp.n_layers || pos < 0 || pos >= s->len)
        return -EINVAL;
    int hd = s->m->info.hp.head_dim;
    for (int u = 0; u < s->m->info.n_kv_real; u++) {
        const uint16_t *kb = k_at(s, l, u, pos);
        for (int d = 0; d < hd; d++)
            k[(size_t)u * hd + d] = kb[(size_t)d * ENG_ATTN_KBLOCK];
    }
    memcpy(v, s->vc + ((size_t)l * s->n_ctx + (size_t)pos) * s->kvd, (size_t)s->kvd * 2);
    return 0;
}

int eng_seq_kv_put(eng_seq *s, int l, int pos, const uint16_t *k, const uint16_t *v)
{
    if (l < 0 || l >= s->m->info.hp.n_layers || pos < 0 || pos >= s->n_ctx || s->n)
        return -EINVAL;
    int hd = s->m->info.hp.head_dim;
    for (int u = 0; u < s->m->info.n_kv_real; u++) {
        uint16_t *kb = k_at(s, l, u, pos);
        for (int d = 0; d < hd; d++)
            kb[(size_t)d * ENG_ATTN_KBLOCK] = k[(size_t)u * hd + d];
    }
    memcpy(s->vc + ((size_t)l * s->n_ctx + (size_t)pos) * s->kvd, v, (size_t)s->kvd * 2);
    return 0;
}

int eng_seq_set_len(eng_seq *s, int n)
{
    if (n < 0 || n > s->n_ctx || s->n)
        return -EINVAL;
    s->len = n;
    s->next_layer = 0;
    return 0;
}

/* Buffers for a batch of n positions, grown in powers of two. */
static int reserve(eng_seq *s, int n)
{
    if (n <= s->cap)
        return 0;
    const struct eng_hparams *hp = &s->m->info.hp;
    int cap = 1;
    while (cap < n)
        cap *= 2;
    free_batch(s);
    size_t E = (size_t)hp->n_embd, Q = (size_t)hp->n_heads * hp->head_dim, F = (size_t)hp->n_ff;
    size_t X = (size_t)max3((int)E, (int)Q, (int)F);
    s->xq_cols = eng_q8x_cols((int)X);
    size_t c = (size_t)cap;
    s->x = malloc(c * E * sizeof(float));
    s->xn = malloc(c * X * sizeof(float));
    s->q = malloc(c * Q * sizeof(float));
    s->att = malloc(c * Q * sizeof(float));
    s->k = malloc(c * (size_t)s->kvd * sizeof(float));
    s->v = malloc(c * (size_t)s->kvd * sizeof(float));
    s->g = malloc(c * F * sizeof(float));
    s->u = malloc(c * F * sizeof(float));
    s->tmp = malloc(c * E * sizeof(float));
    s->rope = malloc(c * (size_t)hp->head_dim * sizeof(float));
    s->xq.q = malloc(c * (size_t)s->xq_cols);
    s->xq.d = malloc(c * (size_t)s->xq_cols / ENG_Q4_1_GROUP * sizeof(float));
    s->xq.sum = malloc(c * (size_t)s->xq_cols / ENG_Q4_1_GROUP * sizeof(float));
    if (!s->x || !s->xn || !s->q || !s->att || !s->k || !s->v || !s->g || !s->u || !s->tmp ||
        !s->rope || !s->xq.q || !s->xq.d || !s->xq.sum) {
        free_batch(s);
        return seq_fail(s, -ENOMEM, "out of memory for a batch of %d positions", n);
    }
    s->cap = cap;
    return 0;
}

/* ---- per-token work, on the pool when the batch is large ---------------------- */

typedef void (*tok_fn)(eng_seq *s, int t, const void *arg);

struct tok_job {
    eng_seq *s;
    tok_fn fn;
    const void *arg;
    int n;
};

static void tok_region(void *ctx, int ith, int nth)
{
    const struct tok_job *j = ctx;
    int b, e;
    eng_pool_share(j->n, 1, ith, nth, &b, &e);
    for (int t = b; t < e; t++)
        j->fn(j->s, t, j->arg);
}

/* Tokens below which the per-token work runs on the calling thread: a region is
 * a barrier of every pool thread, and a decode step of a few batched sequences
 * would add ~7 of them per layer; on a loaded machine each barrier waits for a
 * descheduled thread (measured with minicpmd-bench --batch 4 on the 2b pack, 2
 * threads, load average 9: 1.75x one sequence's rate with the threshold at 4,
 * 2.25x at 16). The work per token is the same either way (batch invariance). */
#define FOR_TOKENS_MIN 16

static void for_tokens(eng_seq *s, tok_fn fn, const void *arg)
{
    struct tok_job j = {s, fn, arg, s->n};
    if (s->n < FOR_TOKENS_MIN) { /* a region costs more than this work */
        for (int t = 0; t < s->n; t++)
            fn(s, t, arg);
        return;
    }
    eng_pool_run(s->m->pool, tok_region, &j);
}

/* xq row t = int8 copy of xn row t (`in` columns), for the int8 kernels; rows
 * are eng_q8x_cols(in) apart, as eng_matmul_q4_1_q8_rows wants them. */
static struct eng_q8x q8_row(const eng_seq *s, int t, int in)
{
    size_t c = (size_t)eng_q8x_cols(in);
    return (struct eng_q8x){s->xq.q + t * c, s->xq.d + t * c / ENG_Q4_1_GROUP,
                            s->xq.sum + t * c / ENG_Q4_1_GROUP};
}

/* The input of the next matrix product: xn rows of width `in` (row stride `in`),
 * quantized when the model runs int8 activations. */
static void quantize_tok(eng_seq *s, int t, const void *arg)
{
    int in = *(const int *)arg;
    struct eng_q8x r = q8_row(s, t, in);
    eng_q8x_quantize_batch(&r, s->xn + (size_t)t * in, in, in, 1); /* SIMD, same bits */
}

struct norm_arg {
    const float *src;
    const uint16_t *w;
    int in; /* also the width quantized after the norm */
};

static void norm_tok(eng_seq *s, int t, const void *arg)
{
    const struct norm_arg *a = arg;
    int E = s->m->info.hp.n_embd;
    eng_rmsnorm(s->xn + (size_t)t * E, a->src + (size_t)t * E, a->w, E,
                (float)s->m->info.hp.rms_norm_eps);
    if (s->m->opts.act == ENG_ACT_Q8)
        quantize_tok(s, t, &E);
}

/* ---- matrix products ------------------------------------------------------------ */

/* One output of a region: y rows [0, m.rows) of every token, token t at y + t*ldy. */
struct mm_seg {
    struct eng_mat m;
    float *y;
    int ldy;
};

struct mm_job {
    eng_seq *s;
    const struct mm_seg *seg;
    int nseg, in, n, blocks;
};

#define MM_BLOCK 32 /* rows per unit of work: one Q4_1 chunk row */

static void mm_rows(const struct mm_job *j, const struct mm_seg *g, int r0, int r1)
{
    const eng_seq *s = j->s;
    const struct eng_mat *m = &g->m;
    if (m->fmt == ENG_W_Q4_1 && s->m->opts.act == ENG_ACT_Q8) {
        /* One kernel for decode and prefill: the batched one also wins at one
         * token (it streams each chunk once, in memory order, and unpacks it into
         * a tile: ~1.8x the matvec's GB/s from DRAM, same integer arithmetic). */
        struct eng_q8x r = q8_row(s, 0, j->in);
        eng_matmul_q4_1_q8_rows(m->data, m->cols, r0, r1, &r, j->n, g->y, g->ldy);
        return;
    }
    for (int t = 0; t < j->n; t++) {
        const float *x = s->xn + (size_t)t * j->in;
        float *y = g->y + (size_t)t * g->ldy;
        if (m->fmt == ENG_W_Q4_1)
            eng_matvec_q4_1_rows(m->data, m->cols, r0, r1, x, y);
        else
            eng_matvec_bf16_rows((const uint16_t *)m->data, m->cols, r0, r1, x, y);
    }
}

static void mm_region(void *ctx, int ith, int nth)
{
    const struct mm_job *j = ctx;
    int b, e;
    eng_pool_share(j->blocks, 1, ith, nth, &b, &e);
    /* Walk the segments' blocks in order; this thread owns blocks [b, e). */
    int base = 0;
    for (int i = 0; i < j->nseg && base < e; i++) {
        const struct mm_seg *g = &j->seg[i];
        int nb = (g->m.rows + MM_BLOCK - 1) / MM_BLOCK;
        int lo = b > base ? b - base : 0, hi = e - base < nb ? e - base : nb;
        if (lo < hi) {
            int r1 = hi * MM_BLOCK < g->m.rows ? hi * MM_BLOCK : g->m.rows;
            mm_rows(j, g, lo * MM_BLOCK, r1);
        }
        base += nb;
    }
}

/* y_i = W_i . xn for every segment, the input `in` wide; one region. */
static void matmul(eng_seq *s, const struct mm_seg *seg, int nseg, int in)
{
    struct mm_job j = {s, seg, nseg, in, s->n, 0};
    for (int i = 0; i < nseg; i++)
        j.blocks += (seg[i].m.rows + MM_BLOCK - 1) / MM_BLOCK;
    eng_pool_run(s->m->pool, mm_region, &j);
}

/* ---- attention ------------------------------------------------------------------- */

struct attn_job {
    eng_seq *s;
    int layer;
};

/* Token t, KV head u: the `group` Q heads that share u, over positions 0 .. pos. */
static void attn_one(eng_seq *s, int l, int t, int u, float *sc)
{
    const struct eng_hparams *hp = &s->m->info.hp;
    int hd = hp->head_dim, group = hp->n_heads / s->m->info.n_kv_real;
    const eng_seq *own = s->tseq[t]; /* the owner's cache, up to the token's position */
    int pos = s->tpos[t], n_pos = pos + 1;
    const float scale = 1.0f / sqrtf((float)hd);
    const uint16_t *K = own->kc + ((size_t)l * s->m->info.n_kv_real + (size_t)u) *
                                      own->kblocks * ENG_ATTN_KBLOCK * (size_t)hd;
    const uint16_t *V = own->vc + (size_t)l * own->n_ctx * s->kvd + (size_t)u * hd;
    const float *q = s->q + (size_t)t * hp->n_heads * hd + (size_t)u * group * hd;
    float *o = s->att + (size_t)t * hp->n_heads * hd + (size_t)u * group * hd;

    eng_attn_gqa(q, group, K, V, (size_t)s->kvd, n_pos, hd, scale, sc, o);
}

static void attn_region(void *ctx, int ith, int nth)
{
    const struct attn_job *j = ctx;
    eng_seq *s = j->s;
    int nkv = s->m->info.n_kv_real, group = s->m->info.hp.n_heads / nkv;
    float *sc = s->scores + (size_t)ith * group * s->n_ctx;
    /* Dealt round-robin, not in ranges: the causal cost grows with t, so the
     * last range of a prompt would cost ~3x the first. */
    for (int i = ith; i < s->n * nkv; i += nth)
        attn_one(s, j->layer, i / nkv, i % nkv, sc);
}

/* ---- one layer --------------------------------------------------------------------- */

/* q/k norm (when the pack's are applied), RoPE, and K/V into the cache. */
static void qkv_tok(eng_seq *s, int t, const void *arg)
{
    const struct eng_layer *L = arg;
    const struct eng_hparams *hp = &s->m->info.hp;
    int hd = hp->head_dim, half = hd / 2, nkv = s->m->info.n_kv_real;
    float *q = s->q + (size_t)t * hp->n_heads * hd, *k = s->k + (size_t)t * s->kvd;
    const float *cs = s->rope + (size_t)t * hd;
    for (int h = 0; h < hp->n_heads + nkv; h++) {
        float *v = h < hp->n_heads ? q + (size_t)h * hd : k + (size_t)(h - hp->n_heads) * hd;
        const uint16_t *nw = h < hp->n_heads ? L->q_norm : L->k_norm;
        if (nw)
            eng_rmsnorm(v, v, nw, hd, (float)hp->rms_norm_eps);
        for (int i = 0; i < half; i++) {
            float x1 = v[i], x2 = v[i + half], c = cs[i], sn = cs[half + i];
            v[i] = x1 * c - x2 * sn;
            v[i + half] = x2 * c + x1 * sn;
        }
    }
    /* into the cache of the sequence that owns token t */
    eng_seq *o = s->tseq[t];
    int l = (int)(L - s->m->layers), pos = s->tpos[t];
    size_t at = ((size_t)l * o->n_ctx + (size_t)pos) * s->kvd;
    const float *vv = s->v + (size_t)t * s->kvd;
    for (int i = 0; i < s->kvd; i++)
        o->vc[at + i] = eng_f32_to_bf16(vv[i]);
    for (int u = 0; u < nkv; u++) {
        uint16_t *kb = o->kc + (((size_t)l * nkv + (size_t)u) * o->kblocks +
                                (size_t)(pos / ENG_ATTN_KBLOCK)) * ENG_ATTN_KBLOCK * (size_t)hd +
                       pos % ENG_ATTN_KBLOCK;
        for (int d = 0; d < hd; d++)
            kb[(size_t)d * ENG_ATTN_KBLOCK] = eng_f32_to_bf16(k[(size_t)u * hd + d]);
    }
}

/* x += tmp */
static void residual_tok(eng_seq *s, int t, const void *arg)
{
    (void)arg;
    int E = s->m->info.hp.n_embd;
    float *x = s->x + (size_t)t * E;
    const float *d = s->tmp + (size_t)t * E;
    for (int i = 0; i < E; i++)
        x[i] += d[i];
}

/* xn = att (the o_proj input), quantized */
static void att_in_tok(eng_seq *s, int t, const void *arg)
{
    (void)arg;
    int Q = s->m->info.hp.n_heads * s->m->info.hp.head_dim;
    memcpy(s->xn + (size_t)t * Q, s->att + (size_t)t * Q, (size_t)Q * sizeof(float));
    if (s->m->opts.act == ENG_ACT_Q8)
        quantize_tok(s, t, &Q);
}

/* xn = silu(g) * u (the down_proj input), quantized */
static void swiglu_tok(eng_seq *s, int t, const void *arg)
{
    (void)arg;
    int F = s->m->info.hp.n_ff;
    float *g = s->g + (size_t)t * F;
    eng_silu_mul(g, s->u + (size_t)t * F, F);
    memcpy(s->xn + (size_t)t * F, g, (size_t)F * sizeof(float));
    if (s->m->opts.act == ENG_ACT_Q8)
        quantize_tok(s, t, &F);
}

static void layer(eng_seq *s, int l)
{
    const eng_model *m = s->m;
    const struct eng_hparams *hp = &m->info.hp;
    const struct eng_layer *L = &m->layers[l];
    int E = hp->n_embd, HD = hp->head_dim, Q = hp->n_heads * HD, F = hp->n_ff;
    struct mm_seg seg[1 + 2 * ENG_MAX_KV_HEADS];
    int ns = 0;

    struct norm_arg na = {s->x, L->attn_norm, E};
    for_tokens(s, norm_tok, &na);
    seg[ns++] = (struct mm_seg){L->wq, s->q, Q};
    for (int u = 0; u < m->info.n_kv_real; u++) {
        seg[ns++] = (struct mm_seg){L->wk[u], s->k + (size_t)u * HD, s->kvd};
        seg[ns++] = (struct mm_seg){L->wv[u], s->v + (size_t)u * HD, s->kvd};
    }
    matmul(s, seg, ns, E);
    for_tokens(s, qkv_tok, L);
    struct attn_job aj = {s, l};
    eng_pool_run(m->pool, attn_region, &aj);

    for_tokens(s, att_in_tok, NULL);
    seg[0] = (struct mm_seg){L->wo, s->tmp, E};
    matmul(s, seg, 1, Q);
    for_tokens(s, residual_tok, NULL);

    na = (struct norm_arg){s->x, L->ffn_norm, E};
    for_tokens(s, norm_tok, &na);
    seg[0] = (struct mm_seg){L->wgate, s->g, F};
    seg[1] = (struct mm_seg){L->wup, s->u, F};
    matmul(s, seg, 2, E);
    for_tokens(s, swiglu_tok, NULL);
    seg[0] = (struct mm_seg){L->wdown, s->tmp, E};
    matmul(s, seg, 1, F);
    for_tokens(s, residual_tok, NULL);
}

/* ---- the batch API ------------------------------------------------------------------ */

/* Token t of the batch: its embedding row and RoPE angles at position pos, in
 * the cache of o. */
static void embed_tok(eng_seq *s, int t, int32_t token, eng_seq *o, int pos)
{
    const struct eng_hparams *hp = &s->m->info.hp;
    int E = hp->n_embd, hd = hp->head_dim, half = hd / 2;
    const uint16_t *row = s->m->embed + (size_t)token * E;
    for (int i = 0; i < E; i++)
        s->x[(size_t)t * E + i] = eng_bf16_to_f32(row[i]);
    /* RoPE angles once per position, not per layer: pos * theta^(-2i/hd). */
    float *cs = s->rope + (size_t)t * hd;
    for (int i = 0; i < half; i++) {
        double ang = (double)pos * pow(hp->rope_theta, -2.0 * i / hd);
        cs[i] = (float)cos(ang);
        cs[half + i] = (float)sin(ang);
    }
    s->tseq[t] = o;
    s->tpos[t] = pos;
}

/* The checks of one sequence's part of a batch (reported on `s`, the leader). */
static int check_part(eng_seq *s, const eng_seq *o, const int32_t *tokens, int n)
{
    const struct eng_hparams *hp = &s->m->info.hp;
    if (o->n)
        return seq_fail(s, -EINVAL, "a batch is in flight (layers %d of %d ran)", o->next_layer,
                        hp->n_layers);
    if (n < 1 || n > ENG_MAX_BATCH)
        return seq_fail(s, -EINVAL, "batch of %d positions: must be 1 .. %d", n, ENG_MAX_BATCH);
    if (n > o->n_ctx - o->len)
        return seq_fail(s, -EINVAL, "%d positions do not fit: %d of %d used", n, o->len, o->n_ctx);
    if (o->m != s->m || o->n_ctx > s->n_ctx)
        return seq_fail(s, -EINVAL, "a sequence of another model or a longer context");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return seq_fail(s, -EINVAL, "token %d at batch index %d: ids are 0 .. %d", tokens[i], i,
                            hp->n_vocab - 1);
    return 0;
}

int eng_seq_embed(eng_seq *s, const int32_t *tokens, int n)
{
    int rc;
    if ((rc = check_part(s, s, tokens, n)) || (rc = reserve(s, n)))
        return rc;
    for (int t = 0; t < n; t++)
        embed_tok(s, t, tokens[t], s, s->len + t);
    s->n = n;
    s->nseg = 0;
    s->next_layer = 0;
    return 0;
}

int eng_seqs_embed(eng_seq *const *seqs, const int32_t *const *tokens, const int *n, int nseq)
{
    eng_seq *s = seqs[0];
    int rc, total = 0;
    if (nseq < 1 || nseq > ENG_MAX_BATCH)
        return seq_fail(s, -EINVAL, "a batch of %d sequences", nseq);
    for (int i = 0; i < nseq; i++) {
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return seq_fail(s, -EINVAL, "sequence %d is in the batch twice", i);
        if ((rc = check_part(s, seqs[i], tokens[i], n[i])))
            return rc;
        total += n[i];
    }
    if (total > ENG_MAX_BATCH)
        return seq_fail(s, -EINVAL, "batch of %d positions: must be 1 .. %d", total,
                        ENG_MAX_BATCH);
    if ((rc = reserve(s, total)))
        return rc;
    int t = 0;
    for (int i = 0; i < nseq; i++) {
        for (int j = 0; j < n[i]; j++, t++)
            embed_tok(s, t, tokens[i][j], seqs[i], seqs[i]->len + j);
        s->seg[i] = seqs[i];
        s->seg_n[i] = n[i];
    }
    s->n = total;
    s->nseg = nseq;
    s->next_layer = 0;
    return 0;
}

int eng_seq_layers(eng_seq *s, int l_begin, int l_end)
{
    int nl = s->m->info.hp.n_layers;
    if (!s->n)
        return seq_fail(s, -EINVAL, "no batch: call eng_seq_embed first");
    if (l_begin != s->next_layer || l_end <= l_begin || l_end > nl)
        return seq_fail(s, -EINVAL, "layers [%d, %d): the batch is at layer %d of %d", l_begin,
                        l_end, s->next_layer, nl);
    for (int l = l_begin; l < l_end; l++)
        layer(s, l);
    s->next_layer = l_end;
    return 0;
}

int eng_seq_head(eng_seq *s, float *logits) { return eng_seq_head_rows(s, logits, 1); }

int eng_seq_head_rows(eng_seq *s, float *logits, int rows)
{
    const eng_model *m = s->m;
    const struct eng_hparams *hp = &m->info.hp;
    if (!s->n || s->next_layer != hp->n_layers || s->nseg)
        return seq_fail(s, -EINVAL, "head before the last layer (batch at layer %d of %d)",
                        s->next_layer, hp->n_layers);
    if (logits && (rows < 1 || rows > s->n))
        return seq_fail(s, -EINVAL, "logits of %d positions asked of a batch of %d", rows, s->n);
    if (logits) {
        /* The last `rows` positions' logits: the head on a batch of that many (one
         * row is decode's case; each row is computed as it would be alone). */
        int E = hp->n_embd, n = s->n;
        struct norm_arg na = {s->x + (size_t)(n - rows) * E, m->out_norm, E};
        s->n = rows;
        for_tokens(s, norm_tok, &na);
        struct mm_seg seg = {m->lm_head, logits, hp->n_vocab};
        matmul(s, &seg, 1, E);
        s->n = n;
    }
    s->len += s->n;
    s->n = 0;
    s->next_layer = 0;
    return 0;
}

int eng_seqs_head(eng_seq *s, float *const *logits) { return eng_seqs_head_rows(s, logits, NULL); }

int eng_seqs_head_rows(eng_seq *s, float *const *logits, const int *nrows)
{
    const eng_model *m = s->m;
    const struct eng_hparams *hp = &m->info.hp;
    if (!s->n || s->next_layer != hp->n_layers || !s->nseg)
        return seq_fail(s, -EINVAL, "head of several sequences before the last layer (batch at "
                        "layer %d of %d)", s->next_layer, hp->n_layers);
    /* The last positions of each sequence that wants logits (one, or nrows[i]),
     * gathered into rows 0 .. k-1 of tmp: one lm_head product for all of them
     * (each row is computed as it would be alone: the kernels are batch-invariant). */
    int E = hp->n_embd, V = hp->n_vocab, k = 0, end = 0, n = s->n;
    int rows[ENG_MAX_BATCH];
    for (int i = 0; i < s->nseg; i++) {
        end += s->seg_n[i];
        if (!logits[i])
            continue;
        int r = nrows && nrows[i] > 1 ? nrows[i] : 1;
        if (r > s->seg_n[i])
            return seq_fail(s, -EINVAL, "logits of %d positions asked of a batch of %d", r,
                            s->seg_n[i]);
        memcpy(s->tmp + (size_t)k * E, s->x + (size_t)(end - r) * E,
               (size_t)r * E * sizeof(float));
        rows[i] = k;
        k += r;
    }
    if (k > s->hcap) {
        float *h = realloc(s->hlogits, (size_t)k * V * sizeof *h);
        if (!h)
            return seq_fail(s, -ENOMEM, "out of memory for the logits of %d positions", k);
        s->hlogits = h, s->hcap = k;
    }
    if (k) {
        struct norm_arg na = {s->tmp, m->out_norm, E};
        s->n = k;
        for_tokens(s, norm_tok, &na);
        struct mm_seg seg = {m->lm_head, s->hlogits, V};
        matmul(s, &seg, 1, E);
        s->n = n;
        for (int i = 0; i < s->nseg; i++)
            if (logits[i])
                memcpy(logits[i], s->hlogits + (size_t)rows[i] * V,
                       (size_t)(nrows && nrows[i] > 1 ? nrows[i] : 1) * V * sizeof(float));
    }
    for (int i = 0; i < s->nseg; i++)
        s->seg[i]->len += s->seg_n[i];
    s->n = 0;
    s->nseg = 0;
    s->next_layer = 0;
    return 0;
}

int eng_seq_forward(eng_seq *s, const int32_t *tokens, int n, float *logits)
{
    int rc = 0;
    if (n < 1)
        return seq_fail(s, -EINVAL, "batch of %d positions: must be at least 1", n);
    if (n > s->n_ctx - s->len)
        return seq_fail(s, -EINVAL, "%d positions do not fit: %d of %d used", n, s->len, s->n_ctx);
    for (int off = 0; off < n && rc == 0; off += ENG_MAX_BATCH) {
        int c = n - off < ENG_MAX_BATCH ? n - off : ENG_MAX_BATCH;
        if ((rc = eng_seq_embed(s, tokens + off, c)) ||
            (rc = eng_seq_layers(s, 0, s->m->info.hp.n_layers)))
            break;
        rc = eng_seq_head(s, off + c == n ? logits : NULL);
    }
    if (rc)
        eng_seq_truncate(s, s->len);
    return rc;
}
