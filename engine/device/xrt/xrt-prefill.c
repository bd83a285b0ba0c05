/* The xrt device's prompt on the CPU: see xrt-prefill.h. */
#include "engine/device/xrt/xrt-prefill.h"
#include "engine/err.h"
#include "engine/model/model.h"
#include "util/clock.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xpf {
    eng_model *m;
    eng_seq *s;
    int n_kv, hd, n_layers, n_ctx;
    uint16_t *k, *v;            /* one row of the device's heads (catch-up scratch) */
    struct xpf_rates rates;
    long long rss_added;
    bool logged;                /* AUTO's reason for the prefill in progress */
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
static int measure(xpf *p, char *err, size_t errlen)
{
    int32_t toks[32];
    double t[2] = {0, 0};
    int lens[2] = {1, 32};
    for (int i = 0; i < 32; i++)
        toks[i] = 1 + i;
    for (int rep = 0; rep < 2; rep++)
        for (int j = 0; j < 2; j++) {
            eng_seq_truncate(p->s, 0);
            int64_t t0 = ut_now_us();
            if (eng_seq_forward(p->s, toks, lens[j], NULL))
                return eng__fail(err, errlen, -EIO, "cpu prefill: %s", eng_seq_error(p->s));
            double ms = (double)(ut_now_us() - t0) / 1000.0;
            t[j] = rep == 0 || ms < t[j] ? ms : t[j];
        }
    eng_seq_truncate(p->s, 0);
    p->rates.cpu_ms_per_token = t[1] > t[0] ? (t[1] - t[0]) / 31.0 : 0.0;
    p->rates.cpu_ms_fixed = t[0] - p->rates.cpu_ms_per_token;
    if (p->rates.cpu_ms_fixed < 0)
        p->rates.cpu_ms_fixed = 0;
    return 0;
}

int xpf_open(const eng_pack *pack, const struct eng_device_opts *o, int mode, int n_ctx,
             xpf **out, char *err, size_t errlen)
{
    xpf *p = calloc(1, sizeof *p);
    if (!p)
        return eng__fail(err, errlen, -ENOMEM, "cpu prefill: out of memory");
    struct eng_model_opts mo = {0};
    if (o) {
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
    p->hd = mi->hp.head_dim;
    p->n_layers = mi->hp.n_layers;
    p->n_ctx = n_ctx;
    if ((rc = eng_seq_new(p->m, n_ctx, &p->s, err, errlen)))
        goto fail;
    /* scratch for a row of the device's (possibly repeated) heads: at most
     * ENG_MAX_KV_HEADS-wide rows are bounded by the stored head count */
    size_t row = (size_t)mi->hp.n_kv_heads * (size_t)p->hd;
    p->k = malloc(row * 2);
    p->v = malloc(row * 2);
    if (!p->k || !p->v) {
        rc = eng__fail(err, errlen, -ENOMEM, "cpu prefill: out of memory");
        goto fail;
    }
    if (mode == ENG_XRT_PREFILL_AUTO && (rc = measure(p, err, errlen)))
        goto fail;
    p->rss_added = rss_bytes() - before;
    *out = p;
    return 0;
fail:
    xpf_free(p);
    return rc;
}

void xpf_free(xpf *p)
{
    if (!p)
        return;
    eng_seq_free(p->s);
    eng_model_free(p->m);
    free(p->k);
    free(p->v);
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

int xpf_len(const xpf *p)
{
    return eng_seq_len(p->s);
}

void xpf_truncate(xpf *p, int n)
{
    if (p)
        eng_seq_truncate(p->s, n);
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
    return eng_seq_kv_get(((const xpf *)arg)->s, layer, pos, k, v);
}

/* The device's positions [len, dev_len) into the CPU's copy: one head of each
 * repeated group (the repeats are equal). */
static int catch_up(xpf *p, int dev_len, const struct eng_kv_src *dev)
{
    int len = eng_seq_len(p->s);
    if (len > dev_len) {
        eng_seq_truncate(p->s, dev_len);
        return 0;
    }
    if (len == dev_len)
        return 0;
    if (dev->head_dim != p->hd || dev->n_kv < p->n_kv || dev->n_kv % p->n_kv)
        return -EINVAL;
    int r = dev->n_kv / p->n_kv;
    for (int pos = len; pos < dev_len; pos++)
        for (int l = 0; l < p->n_layers; l++) {
            int rc = dev->row(dev->arg, l, pos, p->k, p->v);
            if (rc)
                return rc;
            for (int u = 1; u < p->n_kv; u++) {
                memmove(p->k + (size_t)u * p->hd, p->k + (size_t)u * r * p->hd,
                        (size_t)p->hd * 2);
                memmove(p->v + (size_t)u * p->hd, p->v + (size_t)u * r * p->hd,
                        (size_t)p->hd * 2);
            }
            if ((rc = eng_seq_kv_put(p->s, l, pos, p->k, p->v)))
                return rc;
        }
    return eng_seq_set_len(p->s, dev_len);
}

static void run_fail(struct eng_run_result *out, int cmd, int layer, const char *msg)
{
    out->state = ENG_ERT_ERROR;
    out->failed_cmd = cmd;
    out->failed_layer = layer;
    snprintf(out->message, sizeof out->message, "cpu prefill: %.140s", msg);
}

void xpf_run(xpf *p, struct eng_device *dev, eng_device_seq *seq, int dev_len,
             const struct eng_kv_src *dev_rows, const struct eng_runlist *rl,
             const struct eng_batch *b, struct eng_run_result *out)
{
    char e2[160];
    out->on_host = true;
    for (int i = 0; i < rl->n_cmds; i++) {
        const struct eng_cmd *c = &rl->cmds[i];
        int rc = 0;
        if (c->kind == ENG_CMD_EMBED) {
            if (catch_up(p, dev_len, dev_rows)) {
                run_fail(out, i, -1, "cannot read the NPU's KV rows back");
                return;
            }
            rc = eng_seq_embed(p->s, b->tokens, b->n_tokens);
        } else if (c->kind == ENG_CMD_LAYER) {
            int j = i;
            while (j + 1 < rl->n_cmds && rl->cmds[j + 1].kind == ENG_CMD_LAYER)
                j++;
            rc = eng_seq_layers(p->s, c->layer, rl->cmds[j].layer + 1);
            if (rc) {
                run_fail(out, i, c->layer, eng_seq_error(p->s));
                return;
            }
            i = j;
            continue;
        } else {
            int pos = eng_seq_len(p->s);
            rc = eng_seq_head_rows(p->s, b->logits, b->logits && b->n_logits > 1 ? b->n_logits
                                                                              : 1);
            if (rc) {
                run_fail(out, i, -1, eng_seq_error(p->s));
                return;
            }
            struct eng_kv_src src = {.n_kv = p->n_kv, .head_dim = p->hd, .row = cpu_row,
                                     .arg = p};
            if (eng_device_seq_write_kv(dev, seq, &src, pos, b->n_tokens, e2, sizeof e2)) {
                run_fail(out, i, -1, e2);
                return;
            }
            continue;
        }
        if (rc) {
            run_fail(out, i, -1, eng_seq_error(p->s));
            return;
        }
    }
    out->state = ENG_ERT_COMPLETED;
}
