/* The xrt device's prompt on the CPU: see xrt-prefill.h. */
#include "engine/device/xrt/xrt-prefill.h"
#include "engine/err.h"
#include "engine/model/model.h"
#include "util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xpf {
    eng_model *m;
    int n_kv, hd, n_layers, n_ctx, n_kv_dev;
    struct xpf_rates rates;
    long long rss_added;
    eng_log_fn log;
    void *log_ctx;
    /* the background batch: one at a time, computed by `thread` */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_on, stopping;
    xpf_seq *job;               /* started and not yet computed, or NULL */
};

struct xpf_seq {
    xpf *p;
    eng_seq *s;
    int32_t *ids;               /* (n_ctx) the token of each row s holds; -1 unknown */
    uint16_t *k, *v;            /* one row of the device's heads (catch-up scratch) */
    int pos, skip;              /* the batch in progress: its first position, and how
                                   many of its leading rows the copy held already */
    /* a background batch */
    bool pending, computed;     /* started and not finished; computed (under p->mu) */
    int32_t *tokens;
    int n_tokens, cap_tokens, n_logits, rc;
    float *logits;
    int64_t compute_us;
    char msg[140];
};

bool xpf_choose_cpu(int mode, int n, const struct xpf_rates *r, char *why, size_t whylen)
{
    if (mode != ENG_XRT_PREFILL_AUTO) {
        if (why && whylen)
            snprintf(why, whylen, "--npu-prefill %s", mode == ENG_XRT_PREFILL_CPU ? "cpu" : "npu");
        return mode == ENG_XRT_PREFILL_CPU;
    }
    double npu = n * r->npu_ms_per_token, cpu = r->cpu_ms_fixed + n * r->cpu_ms_per_token;
    bool c = cpu < npu;
    if (why && whylen)
        snprintf(why, whylen, "--npu-prefill auto: %d tokens on the %s (NPU %.1f ms/token: "
                 "%.0f ms; CPU %.1f ms + %.2f ms/token: %.0f ms)", n, c ? "CPU" : "NPU",
                 r->npu_ms_per_token, npu, r->cpu_ms_fixed, r->cpu_ms_per_token, cpu);
    return c;
}

static long long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* The CPU's fixed and per-token cost: a batch of 1 and one of 32 positions, the
 * faster of two runs each (the first pass also faults the weights in). */
static int measure(xpf *p, eng_seq *s, char *err, size_t errlen)
{
    int32_t toks[32];
    double t[2] = {0, 0};
    int lens[2] = {1, 32};
    for (int i = 0; i < 32; i++)
        toks[i] = 1 + i;
    for (int rep = 0; rep < 2; rep++)
        for (int j = 0; j < 2; j++) {
            eng_seq_truncate(s, 0);
            int64_t t0 = ut_now_us();
            if (eng_seq_forward(s, toks, lens[j], NULL))
                return eng__fail(err, errlen, -EIO, "cpu prefill: %s", eng_seq_error(s));
            double ms = (double)(ut_now_us() - t0) / 1000.0;
            t[j] = rep == 0 || ms < t[j] ? ms : t[j];
        }
    p->rates.cpu_ms_per_token = t[1] > t[0] ? (t[1] - t[0]) / 31.0 : 0.0;
    p->rates.cpu_ms_fixed = t[0] - p->rates.cpu_ms_per_token;
    if (p->rates.cpu_ms_fixed < 0)
        p->rates.cpu_ms_fixed = 0;
    return 0;
}

int xpf_open(const eng_pack *pack, const struct eng_device_opts *o, int mode, int n_ctx,
             xpf **out, char *err, size_t errlen)
{
    eng_seq *tmp = NULL;
    xpf *p = calloc(1, sizeof *p);
    if (!p)
        return eng__fail(err, errlen, -ENOMEM, "cpu prefill: out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    struct eng_model_opts mo = {0};
    if (o) {
        p->log = o->log;
        p->log_ctx = o->log_ctx;
        mo.n_threads = o->n_threads;
        mo.act = o->act;
        mo.qk_norm = o->qk_norm;
        mo.weights = o->weights;
        mo.state_dir = o->state_dir;
        mo.log = o->log;
        mo.log_ctx = o->log_ctx;
    }
    long long before = rss_bytes();
    int rc = eng_model_open(pack, &mo, &p->m, err, errlen);
    if (rc)
        goto fail;
    const struct eng_model_info *mi = eng_model_get_info(p->m);
    p->n_kv = mi->n_kv_real;
    p->n_kv_dev = mi->hp.n_kv_heads;
    p->hd = mi->hp.head_dim;
    p->n_layers = mi->hp.n_layers;
    p->n_ctx = n_ctx;
    if (mode == ENG_XRT_PREFILL_AUTO &&
        ((rc = eng_seq_new(p->m, 64, &tmp, err, errlen)) || (rc = measure(p, tmp, err, errlen))))
        goto fail;
    eng_seq_free(tmp);
    tmp = NULL;
    p->rss_added = rss_bytes() - before;
    *out = p;
    return 0;
fail:
    eng_seq_free(tmp);
    xpf_free(p);
    return rc;
}

void xpf_free(xpf *p)
{
    if (!p)
        return;
    if (p->thread_on) {
        pthread_mutex_lock(&p->mu);
        p->stopping = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    eng_model_free(p->m);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

struct xpf_rates *xpf_rates(xpf *p)
{
    return &p->rates;
}

long long xpf_rss_added(const xpf *p)
{
    return p->rss_added;
}

size_t xpf_seq_bytes(const xpf *p)
{
    /* K and V, bf16, the stored heads, every layer and position */
    return (size_t)p->n_ctx * (size_t)p->n_layers * (size_t)p->n_kv * (size_t)p->hd * 4;
}

int xpf_seq_new(xpf *p, xpf_seq **out, char *err, size_t errlen)
{
    xpf_seq *s = calloc(1, sizeof *s);
    if (!s)
        return eng__fail(err, errlen, -ENOMEM, "cpu prefill: out of memory");
    s->p = p;
    int rc = eng_seq_new(p->m, p->n_ctx, &s->s, err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    /* scratch for a row of the device's (possibly repeated) heads */
    size_t row = (size_t)p->n_kv_dev * (size_t)p->hd;
    s->k = malloc(row * 2);
    s->v = malloc(row * 2);
    s->ids = malloc((size_t)p->n_ctx * sizeof *s->ids);
    if (!s->k || !s->v || !s->ids) {
        xpf_seq_free(s);
        return eng__fail(err, errlen, -ENOMEM, "cpu prefill: out of memory");
    }
    *out = s;
    return 0;
}

/* Wait until s's background batch (if any) is computed, and drop it. */
static void discard(xpf_seq *s)
{
    if (s->pending) {
        xpf_ready(s, true);
        s->pending = false;
    }
}

void xpf_seq_free(xpf_seq *s)
{
    if (!s)
        return;
    discard(s);
    eng_seq_free(s->s);
    free(s->ids);
    free(s->k);
    free(s->v);
    free(s->tokens);
    free(s);
}

int xpf_len(const xpf_seq *s)
{
    return eng_seq_len(s->s);
}

int xpf_agree(const xpf_seq *s, const int32_t *ids, int n)
{
    int len = eng_seq_len(s->s), c = 0;
    while (c < len && c < n && ids[c] == s->ids[c])
        c++;
    return c;
}

void xpf_truncate(xpf_seq *s, int n)
{
    if (!s)
        return;
    discard(s);
    eng_seq_truncate(s->s, n);
}

bool xpf_takes(xpf *p, int mode, const struct eng_batch *b, eng_log_fn log, void *log_ctx)
{
    if (b->phase != ENG_PHASE_PREFILL)
        return false;
    char why[200];
    bool c = xpf_choose_cpu(mode, b->n_tokens, &p->rates, why, sizeof why);
    if (mode == ENG_XRT_PREFILL_AUTO && log && b->token_index == 0)
        log(log_ctx, ENG_LOG_INFO, why);
    return c;
}

/* The CPU's rows, as the device's eng_kv_src. */
static int cpu_row(const void *arg, int layer, int pos, uint16_t *k, uint16_t *v)
{
    return eng_seq_kv_get(((const xpf_seq *)arg)->s, layer, pos, k, v);
}

/* The CPU's copy against the device's dev_len positions: the rows whose tokens
 * agree with the device's (all of them when the device gives no ids) are kept, and
 * so are rows past dev_len when all of [0, dev_len) agree (a reset lost the
 * device's KV, not the CPU's: a replay may take them, reuse() below); the device's
 * rows past the agreeing ones are read into the copy, one head of each repeated
 * group (the repeats are equal). */
static int catch_up(xpf_seq *s, int dev_len, const struct eng_kv_src *dev)
{
    const xpf *p = s->p;
    int len = eng_seq_len(s->s), c = 0;
    while (c < len && c < dev_len && (!dev->ids || dev->ids[c] == s->ids[c]))
        c++;
    if (c == dev_len)
        return 0;
    eng_seq_truncate(s->s, c);
    if (dev->head_dim != p->hd || dev->n_kv < p->n_kv || dev->n_kv % p->n_kv)
        return -EINVAL;
    int r = dev->n_kv / p->n_kv;
    for (int pos = c; pos < dev_len; pos++) {
        for (int l = 0; l < p->n_layers; l++) {
            int rc = dev->row(dev->arg, l, pos, s->k, s->v);
            if (rc)
                return rc;
            for (int u = 1; u < p->n_kv; u++) {
                memmove(s->k + (size_t)u * p->hd, s->k + (size_t)u * r * p->hd,
                        (size_t)p->hd * 2);
                memmove(s->v + (size_t)u * p->hd, s->v + (size_t)u * r * p->hd,
                        (size_t)p->hd * 2);
            }
            if ((rc = eng_seq_kv_put(s->s, l, pos, s->k, s->v)))
                return rc;
        }
        s->ids[pos] = dev->ids ? dev->ids[pos] : -1;
    }
    return eng_seq_set_len(s->s, dev_len);
}

/* After catch_up: how many leading positions of batch b (at dev_len) the copy holds
 * already, with the same tokens (after a reset: the replay takes them instead of
 * computing them again); the last one is computed again when the batch wants its
 * logits. The copy is cut after them; logged when there are any. */
static int reuse(xpf_seq *s, int dev_len, const struct eng_batch *b)
{
    int len = eng_seq_len(s->s), m = 0;
    while (b->n_logits <= 1 && m < b->n_tokens && dev_len + m < len &&
           s->ids[dev_len + m] == b->tokens[m])
        m++;
    if (b->logits && m == b->n_tokens)
        m--;
    eng_seq_truncate(s->s, dev_len + m);
    if (m > 0 && s->p->log) {
        char line[200];
        snprintf(line, sizeof line, "cpu prefill: positions %d..%d taken from the CPU's copy "
                 "of the KV (the device's was lost), %d computed", dev_len, dev_len + m,
                 b->n_tokens - m);
        s->p->log(s->p->log_ctx, ENG_LOG_INFO, line);
    }
    return m;
}

/* Batch b starts at dev_len: what the copy holds already is kept (reuse), the ids
 * of the rest noted; s->skip of its positions are then not computed. */
static void prepare(xpf_seq *s, int dev_len, const struct eng_batch *b)
{
    s->pos = dev_len;
    s->skip = reuse(s, dev_len, b);
    memcpy(s->ids + dev_len + s->skip, b->tokens + s->skip,
           (size_t)(b->n_tokens - s->skip) * sizeof *s->ids);
}

static void run_fail(struct eng_run_result *out, int cmd, int layer, const char *msg)
{
    out->state = ENG_ERT_ERROR;
    out->failed_cmd = cmd;
    out->failed_layer = layer;
    snprintf(out->message, sizeof out->message, "cpu prefill: %.140s", msg);
}

/* The CPU model computes one batch at a time: wait for a background one. */
static void wait_idle(xpf *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->job)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Rows [pos, pos + n) of s to the device. */
static int hand_off(xpf_seq *s, struct eng_device *dev, eng_device_seq *seq, int pos, int n,
                    char *err, size_t errlen)
{
    struct eng_kv_src src = {.n_kv = s->p->n_kv, .head_dim = s->p->hd, .row = cpu_row,
                             .arg = s};
    return eng_device_seq_write_kv(dev, seq, &src, pos, n, err, errlen);
}

void xpf_run(xpf_seq *s, struct eng_device *dev, eng_device_seq *seq, int dev_len,
             const struct eng_kv_src *dev_rows, const struct eng_runlist *rl,
             const struct eng_batch *b, struct eng_run_result *out)
{
    char e2[160];
    out->on_host = true;
    discard(s);
    wait_idle(s->p);
    for (int i = 0; i < rl->n_cmds; i++) {
        const struct eng_cmd *c = &rl->cmds[i];
        int rc = 0;
        bool all_held = s->skip == b->n_tokens;   /* nothing to compute */
        if (c->kind == ENG_CMD_EMBED) {
            if (catch_up(s, dev_len, dev_rows)) {
                run_fail(out, i, -1, "cannot read the NPU's KV rows back");
                return;
            }
            prepare(s, dev_len, b);
            if (s->skip < b->n_tokens)
                rc = eng_seq_embed(s->s, b->tokens + s->skip, b->n_tokens - s->skip);
        } else if (c->kind == ENG_CMD_LAYER) {
            int j = i;
            while (j + 1 < rl->n_cmds && rl->cmds[j + 1].kind == ENG_CMD_LAYER)
                j++;
            rc = all_held ? 0 : eng_seq_layers(s->s, c->layer, rl->cmds[j].layer + 1);
            if (rc) {
                run_fail(out, i, c->layer, eng_seq_error(s->s));
                return;
            }
            i = j;
            continue;
        } else {
            rc = all_held ? 0 : eng_seq_head_rows(s->s, b->logits, b->logits && b->n_logits > 1
                                                                      ? b->n_logits : 1);
            if (rc) {
                run_fail(out, i, -1, eng_seq_error(s->s));
                return;
            }
            if (hand_off(s, dev, seq, s->pos, b->n_tokens, e2, sizeof e2)) {
                run_fail(out, i, -1, e2);
                return;
            }
            continue;
        }
        if (rc) {
            run_fail(out, i, -1, eng_seq_error(s->s));
            return;
        }
    }
    out->state = ENG_ERT_COMPLETED;
}

/* ---- the background batch ---------------------------------------------------------- */

static void compute(xpf_seq *s)
{
    int64_t t0 = ut_now_us();
    int rc = 0;
    if (s->skip < s->n_tokens) {
        rc = eng_seq_embed(s->s, s->tokens + s->skip, s->n_tokens - s->skip);
        if (!rc)
            rc = eng_seq_layers(s->s, 0, s->p->n_layers);
        if (!rc)
            rc = eng_seq_head_rows(s->s, s->logits, s->logits && s->n_logits > 1 ? s->n_logits
                                                                                : 1);
    }
    s->rc = rc;
    if (rc)
        snprintf(s->msg, sizeof s->msg, "%s", eng_seq_error(s->s));
    s->compute_us = ut_now_us() - t0;
}

static void *worker(void *arg)
{
    xpf *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->job && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        if (!p->job)
            break;
        xpf_seq *s = p->job;
        pthread_mutex_unlock(&p->mu);
        compute(s);
        pthread_mutex_lock(&p->mu);
        s->computed = true;
        p->job = NULL;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int xpf_start(xpf_seq *s, int dev_len, const struct eng_kv_src *dev_rows,
              const struct eng_batch *b, char *err, size_t errlen)
{
    xpf *p = s->p;
    discard(s);
    pthread_mutex_lock(&p->mu);
    bool busy = p->job != NULL;
    pthread_mutex_unlock(&p->mu);
    if (busy)
        return -EBUSY;
    if (catch_up(s, dev_len, dev_rows))
        return eng__fail(err, errlen, -EIO, "cpu prefill: cannot read the NPU's KV rows back");
    if (b->n_tokens > s->cap_tokens) {
        int32_t *t = realloc(s->tokens, (size_t)b->n_tokens * sizeof *t);
        if (!t)
            return eng__fail(err, errlen, -ENOMEM, "cpu prefill: out of memory");
        s->tokens = t;
        s->cap_tokens = b->n_tokens;
    }
    memcpy(s->tokens, b->tokens, (size_t)b->n_tokens * sizeof *s->tokens);
    s->n_tokens = b->n_tokens;
    prepare(s, dev_len, b);
    s->logits = b->logits;
    s->n_logits = b->n_logits;
    s->rc = 0;
    s->msg[0] = '\0';
    pthread_mutex_lock(&p->mu);
    if (!p->thread_on) {
        if (pthread_create(&p->thread, NULL, worker, p) != 0) {
            pthread_mutex_unlock(&p->mu);
            return eng__fail(err, errlen, -EAGAIN, "cpu prefill: cannot start its thread");
        }
        p->thread_on = true;
    }
    s->pending = true;
    s->computed = false;
    p->job = s;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

bool xpf_busy(xpf *p)
{
    pthread_mutex_lock(&p->mu);
    bool b = p->job != NULL;
    pthread_mutex_unlock(&p->mu);
    return b;
}

bool xpf_pending(const xpf_seq *s)
{
    return s && s->pending;
}

bool xpf_ready(xpf_seq *s, bool wait)
{
    xpf *p = s->p;
    pthread_mutex_lock(&p->mu);
    while (wait && !s->computed)
        pthread_cond_wait(&p->cv, &p->mu);
    bool r = s->computed;
    pthread_mutex_unlock(&p->mu);
    return r;
}

void xpf_finish(xpf_seq *s, struct eng_device *dev, eng_device_seq *seq,
                struct eng_run_result *out)
{
    char e2[160];
    xpf_ready(s, true);
    s->pending = false;
    out->on_host = true;
    out->failed_cmd = out->failed_layer = -1;
    if (s->rc) {
        run_fail(out, 0, -1, s->msg);
        eng_seq_truncate(s->s, s->pos);
        return;
    }
    int64_t t0 = ut_now_us();
    if (hand_off(s, dev, seq, s->pos, s->n_tokens, e2, sizeof e2)) {
        run_fail(out, 0, -1, e2);
        return;
    }
    out->elapsed_us = s->compute_us + (ut_now_us() - t0);
    out->state = ENG_ERT_COMPLETED;
}
