/* The functional model of dx, one dense decoder layer in one run (dx.py):
 *
 *   xn = bf16(rmsnorm(x) * lnw); q | k | v = W xn
 *   RoPE on q (kept f32) and k (then bf16), v to bf16; the new row [K | V] drained
 *   attention over the window's valid rows and the new row; og = bf16(out)
 *   res = x + Wo og; xm = bf16(rmsnorm(res) * postln)
 *   h = bf16(silu(Wgate xm) * (Wup xm)); xres = res + Wdown h
 *
 * Buffers, in the design's order: pool, xres, consts, kv, act, ptab. Where the KV
 * window, the new row and the position record are comes from the instruction
 * stream's DDR patches, as the DMA reads them (docs/npu-kernels.md §3.6): the
 * arg-3 patch right after the BD write whose length word it completes is the
 * window fill (its offset the window start, the BD's length the rows streamed),
 * the other arg-3 patch is the new row's drain, the arg-5 patch the record fill
 * (bit 31 is the address fold of args >= 5, not part of the offset). */
#include "model-impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dma {
    uint64_t fill_off, fill_words, drain_off, rec_off;
};

static size_t op_words(uint32_t op)
{
    switch (op) {
    case 0: return 6;
    case 1: return 12;
    case 3: return 7;
    case 0x80: return 4;
    case 0x81: return 12;
    default: return 1;
    }
}

static int read_dma(const uint32_t *w, size_t n, struct dma *d, char *err, size_t errlen)
{
    int fills = 0, drains = 0, recs = 0;
    size_t bd = 0;
    int have_bd = 0;
    for (size_t i = 4; i < n; i += op_words(w[i])) {
        if (w[i] == 1 && i + 11 < n) {
            bd = i;
            have_bd = 1;
            continue;
        }
        if (w[i] != 0x81 || i + 11 >= n)
            continue;
        uint32_t reg = w[i + 6], arg = w[i + 8];
        uint64_t off = w[i + 10] & 0x7fffffffu;
        if (arg == 3 && have_bd && w[bd + 2] + 4 == reg) {
            d->fill_off = off;
            d->fill_words = w[bd + 4];
            fills++;
        } else if (arg == 3) {
            d->drain_off = off;
            drains++;
        } else if (arg == 5) {
            d->rec_off = off;
            recs++;
        }
        have_bd = 0;
    }
    if (fills != 1 || drains != 1 || recs != 1) {
        snprintf(err, errlen, "model: dx's instruction stream has %d window fills, %d row "
                 "drains and %d record fills (expected one each)", fills, drains, recs);
        return -EINVAL;
    }
    return 0;
}

struct dx_work {
    float *x, *xn, *q, *k, *v, *og, *o, *res, *up, *gate, *h, *down, *acc;
    struct xm_tab th, tq, tf;
};

static void work_free(struct dx_work *w)
{
    float **f[] = {&w->x, &w->xn, &w->q, &w->k, &w->v, &w->og, &w->o, &w->res, &w->up,
                   &w->gate, &w->h, &w->down, &w->acc};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        free(*f[i]);
    xm_tab_free(&w->th);
    xm_tab_free(&w->tq);
    xm_tab_free(&w->tf);
}

static int work_init(struct dx_work *w, const struct xm_spec *sp)
{
    memset(w, 0, sizeof *w);
    size_t H = (size_t)sp->hidden, QW = (size_t)(sp->n_heads * sp->head_dim),
           KVW = (size_t)(sp->n_kv * sp->head_dim), F = (size_t)sp->ff;
    size_t qrows = (size_t)sp->proj[XM_Q].rows > QW ? (size_t)sp->proj[XM_Q].rows : QW;
    w->x = calloc(H, 4);
    w->xn = calloc(H, 4);
    w->q = calloc(qrows, 4);
    w->k = calloc(KVW + 32, 4);
    w->v = calloc(KVW + 32, 4);
    w->og = calloc(QW, 4);
    w->o = calloc(H + 32, 4);
    w->res = calloc(H, 4);
    w->up = calloc(F + 32, 4);
    w->gate = calloc(F + 32, 4);
    w->h = calloc(F, 4);
    w->down = calloc(H + 32, 4);
    w->acc = calloc((size_t)sp->head_dim, 4);
    if (!w->x || !w->xn || !w->q || !w->k || !w->v || !w->og || !w->o || !w->res || !w->up ||
        !w->gate || !w->h || !w->down || !w->acc || xm_tab_init(&w->th, (int)H) ||
        xm_tab_init(&w->tq, (int)QW) || xm_tab_init(&w->tf, (int)F)) {
        work_free(w);
        return -ENOMEM;
    }
    return 0;
}

/* Half rotation of the first `rot` dims of one head. */
static void rope(float *v, int rot, const float *cs, const float *sn)
{
    int half = rot / 2;
    for (int i = 0; i < half; i++) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
    }
}

static int gemv(const struct xm_spec *sp, const struct xm_buf *pool, int p,
                const struct xm_tab *t, float *y)
{
    return xm_gemv(pool->p, pool->n, &sp->proj[p], t, y, xm_fault() == XM_FAULT_PERM);
}

/* Attention of every query head over `valid` cached rows from `win` and the new
 * row (k, v as bf16 values), online softmax in f32; og as bf16. */
static void attend(const struct xm_spec *sp, struct dx_work *w, const uint8_t *win, int valid)
{
    int hd = sp->head_dim, group = sp->n_heads / sp->n_kv;
    size_t KVW = (size_t)(sp->n_kv * hd);
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < sp->n_heads; h++) {
        int kvh = h / group;
        const float *q = w->q + (size_t)h * (size_t)hd;
        float m = -INFINITY, l = 0.0f;
        memset(w->acc, 0, (size_t)hd * 4);
        for (int j = 0; j <= valid; j++) {
            float s = 0.0f, kj[256], vj[256];
            if (j < valid) {
                const uint8_t *row = win + (size_t)j * sp->kv_row;
                for (int d = 0; d < hd; d++) {
                    kj[d] = xm_bf16_at(row + 2 * ((size_t)kvh * (size_t)hd + (size_t)d));
                    vj[d] = xm_bf16_at(row + 2 * (KVW + (size_t)kvh * (size_t)hd + (size_t)d));
                }
            } else {
                memcpy(kj, w->k + (size_t)kvh * (size_t)hd, (size_t)hd * 4);
                memcpy(vj, w->v + (size_t)kvh * (size_t)hd, (size_t)hd * 4);
            }
            for (int d = 0; d < hd; d++)
                s += q[d] * kj[d];
            s *= scale;
            float mn = s > m ? s : m;
            float corr = expf(m - mn), p = expf(s - mn);
            l = l * corr + p;
            for (int d = 0; d < hd; d++)
                w->acc[d] = w->acc[d] * corr + p * vj[d];
            m = mn;
        }
        for (int d = 0; d < hd; d++)
            w->og[(size_t)h * (size_t)hd + (size_t)d] = xm_bf16(w->acc[d] / l);
    }
}

int xm_run_dx(const struct xm_spec *sp, const uint32_t *insts, size_t n_words,
              const struct xm_buf *b, int n, char *err, size_t errlen)
{
    if (n != 6) {
        snprintf(err, errlen, "model: dx takes 6 buffers, the run has %d", n);
        return -EINVAL;
    }
    const struct xm_buf *pool = &b[0], *xres = &b[1], *consts = &b[2], *kv = &b[3],
                        *ptab = &b[5];
    int H = sp->hidden, hd = sp->head_dim, QW = sp->n_heads * hd, KVW = sp->n_kv * hd;
    if (hd > 256 || xres->n < (size_t)H * 4 || consts->n < sp->postln + (size_t)H * 2 ||
        consts->n < sp->lnw + (size_t)H * 2 || sp->kv_row < (uint64_t)KVW * 4) {
        snprintf(err, errlen, "model: dx's buffers are too small for the spec");
        return -EFAULT;
    }
    struct dma dm = {0};
    int rc = read_dma(insts, n_words, &dm, err, errlen);
    if (rc)
        return rc;
    if (xm_fault() == XM_FAULT_ATTNPOS)
        dm.rec_off += sp->ptab_row;
    if (xm_fault() == XM_FAULT_KVROW)
        dm.drain_off += sp->kv_row;
    if (dm.rec_off + sp->ptab_row > ptab->n || dm.drain_off + sp->kv_row > kv->n ||
        dm.fill_off + (uint64_t)dm.fill_words * 4 > kv->n) {
        snprintf(err, errlen, "model: a dx transfer falls outside its buffer");
        return -EFAULT;
    }
    const uint8_t *rec = ptab->p + dm.rec_off;
    int32_t valid, nf;
    memcpy(&valid, rec, 4);
    memcpy(&nf, rec + 4, 4);
    if (valid < 0 || nf < 1 || valid > nf) {
        snprintf(err, errlen, "model: a position record with %d valid of %d rows", valid, nf);
        return -EINVAL;
    }
    /* The attention core consumes nf streamed rows; a fill of any other length
     * leaves a core or the DMA waiting for ever. */
    if ((uint64_t)dm.fill_words * 4 != (uint64_t)nf * sp->kv_row) {
        snprintf(err, errlen, "model: the window fill streams %llu bytes, the position record "
                 "wants %d rows of %llu: the run would hang",
                 (unsigned long long)dm.fill_words * 4, nf, (unsigned long long)sp->kv_row);
        return -ETIMEDOUT;
    }
    float cs[128], sn[128];
    int half = sp->rot / 2;
    for (int i = 0; i < half; i++) {
        memcpy(&cs[i], rec + 512 + 4 * (size_t)i, 4);
        memcpy(&sn[i], rec + 512 + 4 * (size_t)(half + i), 4);
        if (xm_fault() == XM_FAULT_COSSIN) {
            float t = cs[i];
            cs[i] = sn[i];
            sn[i] = t;
        }
    }
    struct dx_work w;
    if (work_init(&w, sp)) {
        snprintf(err, errlen, "model: out of memory");
        return -ENOMEM;
    }
    memcpy(w.x, xres->p, (size_t)H * 4);
    xm_rmsnorm(w.x, consts->p + sp->lnw, H, sp->eps, w.xn);
    xm_tab_prep(&w.th, w.xn);
    rc = gemv(sp, pool, XM_Q, &w.th, w.q);
    rc = rc ? rc : gemv(sp, pool, XM_K, &w.th, w.k);
    rc = rc ? rc : gemv(sp, pool, XM_V, &w.th, w.v);
    if (rc)
        goto bad_pool;
    for (int h = 0; h < sp->n_heads; h++)
        rope(w.q + (size_t)h * (size_t)hd, sp->rot, cs, sn);
    for (int h = 0; h < sp->n_kv; h++)
        rope(w.k + (size_t)h * (size_t)hd, sp->rot, cs, sn);
    uint8_t *row = kv->p + dm.drain_off;
    for (int i = 0; i < KVW; i++) {
        w.k[i] = xm_bf16(w.k[i]);
        w.v[i] = xm_bf16(w.v[i]);
        xm_bf16_put(row + 2 * (size_t)i, w.k[i]);
        xm_bf16_put(row + 2 * ((size_t)KVW + (size_t)i), w.v[i]);
    }
    attend(sp, &w, kv->p + dm.fill_off, valid);
    xm_tab_prep(&w.tq, w.og);
    if ((rc = gemv(sp, pool, XM_O, &w.tq, w.o)))
        goto bad_pool;
    for (int i = 0; i < H; i++)
        w.res[i] = w.x[i] + w.o[i];
    xm_rmsnorm(w.res, consts->p + sp->postln, H, sp->eps, w.xn);
    xm_tab_prep(&w.th, w.xn);
    rc = gemv(sp, pool, XM_UP, &w.th, w.up);
    rc = rc ? rc : gemv(sp, pool, XM_GATE, &w.th, w.gate);
    if (rc)
        goto bad_pool;
    for (int i = 0; i < sp->ff; i++) {
        float g = w.gate[i];
        w.h[i] = xm_bf16(g / (1.0f + expf(-g)) * w.up[i]);
    }
    xm_tab_prep(&w.tf, w.h);
    if ((rc = gemv(sp, pool, XM_DOWN, &w.tf, w.down)))
        goto bad_pool;
    float *out = (float *)(void *)xres->p;
    for (int i = 0; i < H; i++)
        out[i] = w.res[i] + w.down[i];
    (void)QW;
    work_free(&w);
    return 0;
bad_pool:
    work_free(&w);
    snprintf(err, errlen, "model: a projection of the packing plan does not fit the pool or "
             "the spec");
    return -EINVAL;
}
