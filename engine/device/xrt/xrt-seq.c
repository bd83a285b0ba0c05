/* The xrt device's KV slots: each sequence is a slot with its own `state` BO per
 * layer (row p = [K_p | V_p], the kernel's layout) and its own layer runs bound to
 * them; pool, consts and act are shared (act carries nothing between tokens). As
 * many slots as --parallel asks for and half the available memory holds, each
 * with the CPU's copy of its KV when the prompt runs on the CPU (--npu-prefill).
 *
 * A slot's prompt may run on the CPU in the background (prefill_start) while the
 * worker decodes other slots on the NPU; its rows reach the state BOs only at
 * prefill_finish, on the worker's thread, which owns the NPU. */
#include "engine/device/xrt/xrt-state.h"
#include "engine/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static int alloc_slot(struct xrt_dev *x, struct eng_device_seq *s, char *err, size_t errlen)
{
    int rc;
    s->state_bo = malloc((size_t)x->n_layers * sizeof *s->state_bo);
    s->run = malloc((size_t)x->n_layers * sizeof *s->run);
    s->ids = malloc((size_t)x->capacity * sizeof *s->ids);
    if (!s->state_bo || !s->run || !s->ids)
        return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
    for (int l = 0; l < x->n_layers; l++) {
        if ((rc = xrtb_bo(x->b, (size_t)x->capacity * x->ks.state_row, &s->state_bo[l], err,
                          errlen)) ||
            (rc = xrtb_bo_sync(x->b, s->state_bo[l], true, 0, 0, err, errlen)) ||
            (rc = xd_make_layer_run(x, l, s->state_bo[l], &s->run[l], err, errlen)))
            return rc;
    }
    return x->pf ? xpf_seq_new(x->pf, &s->cpu, err, errlen) : 0;
}

int xs_alloc_slots(struct xrt_dev *x, char *err, size_t errlen)
{
    int want = x->cfg.slots > 0 ? x->cfg.slots : 1;
    size_t state = (size_t)x->n_layers * (size_t)x->capacity * x->ks.state_row;
    size_t cpu = x->pf ? xpf_seq_bytes(x->pf) : 0;
    long long avail = mem_available();
    int n = want;
    if (avail > 0 && (long long)(state + cpu) * n > avail / 2) {
        n = (int)(avail / 2 / (long long)(state + cpu));
        n = n < 1 ? 1 : n;
    }
    x->slots = calloc((size_t)n, sizeof *x->slots);
    if (!x->slots)
        return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
    for (int i = 0; i < n; i++) {
        struct eng_device_seq *s = &x->slots[i];
        s->x = x;
        s->index = i;
        x->n_slots = i + 1;
        int rc = alloc_slot(x, s, err, errlen);
        if (rc)
            return rc;
    }
    if (x->opts.log) {
        char line[300], more[80] = "";
        if (cpu)
            snprintf(more, sizeof more, ", the CPU's copy of the KV %zu MB", cpu >> 20);
        snprintf(line, sizeof line, "xrt: %d KV slot%s of %d positions (%s): state BOs %zu MB "
                 "each%s", n, n == 1 ? "" : "s", x->capacity,
                 n < want ? "fewer than --parallel: half the available memory" : "--parallel",
                 state >> 20, more);
        x->opts.log(x->opts.log_ctx, n < want ? ENG_LOG_WARN : ENG_LOG_INFO, line);
    }
    return 0;
}

void xs_free_slots(struct xrt_dev *x)
{
    for (int i = 0; i < x->n_slots; i++) {
        xpf_seq_free(x->slots[i].cpu);
        free(x->slots[i].state_bo);
        free(x->slots[i].run);
        free(x->slots[i].ids);
    }
    free(x->slots);
    x->slots = NULL;
    x->n_slots = 0;
}

void xs_lost_all(struct xrt_dev *x)
{
    /* the CPU's copies keep their rows: a replay takes them back (xrt-prefill.h) */
    for (int i = 0; i < x->n_slots; i++)
        x->slots[i].len = 0;
}

int xs_max_seqs(void *ctx)
{
    const struct xrt_dev *x = ctx;
    return x->n_slots > 0 ? x->n_slots : 1;
}

int xs_seq_begin(void *ctx, int n_ctx, eng_device_seq **out, char *err, size_t errlen)
{
    struct xrt_dev *x = ctx;
    if (!x->loaded)
        return eng__fail(err, errlen, -EINVAL, "xrt device: no model loaded");
    if (n_ctx > x->capacity)
        return eng__fail(err, errlen, -EINVAL,
                         "xrt device: a context of %d positions does not fit the %d KV rows "
                         "allocated on the NPU (pass --ctx-size %d or less)", n_ctx, x->capacity,
                         x->capacity);
    for (int i = 0; i < x->n_slots; i++) {
        struct eng_device_seq *s = &x->slots[i];
        if (s->open)
            continue;
        s->open = true;
        s->n_ctx = n_ctx;
        s->len = 0;
        xpf_truncate(s->cpu, 0);
        *out = s;
        return 0;
    }
    return eng__fail(err, errlen, -EBUSY, "xrt device: all %d KV slots are in use (--parallel)",
                     x->n_slots);
}

void xs_seq_end(void *ctx, eng_device_seq *s)
{
    (void)ctx;
    xpf_truncate(s->cpu, 0);
    s->open = false;
    s->len = 0;
}

void xs_seq_truncate(void *ctx, eng_device_seq *s, int n)
{
    (void)ctx;
    if (n < s->len)
        s->len = n;
    /* the CPU's copy keeps rows past n: the ids tell which a later batch can take */
}

/* Rows [pos, pos + n) of every layer's state BO from src: row p is [K_p | V_p], bf16,
 * the kernel's KV heads (src's repeated in turn), synced once per layer. */
int xs_seq_write_kv(void *ctx, eng_device_seq *s, const struct eng_kv_src *src, int pos, int n,
                    char *err, size_t errlen)
{
    struct xrt_dev *x = ctx;
    int nk = x->ks.n_kv_heads, hd = x->ks.head_dim, rc;
    if (pos > s->len || pos + n > x->capacity || src->head_dim != hd || src->n_kv < 1 ||
        nk % src->n_kv || (uint64_t)nk * (uint64_t)hd * 4 > x->ks.kv_row)
        return eng__fail(err, errlen, -EINVAL, "xrt device: KV rows %d..%d of %d heads do not "
                         "fit a sequence of %d (%d KV rows of %d heads)", pos, pos + n,
                         src->n_kv, s->len, x->capacity, nk);
    if (x->needs_reset)
        return eng__fail(err, errlen, -EIO, "xrt device: needs reset");
    size_t w = (size_t)src->n_kv * (size_t)hd;
    uint16_t *k = x->kv_scratch, *v = x->kv_scratch + w;
    int r = nk / src->n_kv;
    s->len = pos;
    for (int l = 0; l < x->n_layers; l++) {
        int bo = s->state_bo[l];
        uint8_t *base = xrtb_bo_map(x->b, bo);
        for (int p = pos; p < pos + n; p++) {
            if ((rc = src->row(src->arg, l, p, k, v)))
                return eng__fail(err, errlen, rc, "xrt device: no KV row %d of layer %d", p, l);
            uint16_t *row = (uint16_t *)(base + (size_t)p * x->ks.kv_row);
            for (int j = 0; j < nk; j++) {
                memcpy(row + (size_t)j * hd, k + (size_t)(j / r) * hd, (size_t)hd * 2);
                memcpy(row + (size_t)(nk + j) * hd, v + (size_t)(j / r) * hd, (size_t)hd * 2);
            }
        }
        if (n > 0 && (rc = xrtb_bo_sync(x->b, bo, true, (size_t)n * x->ks.kv_row,
                                        (size_t)pos * x->ks.kv_row, err, errlen)))
            return rc;
    }
    s->len = pos + n;
    return 0;
}

int xs_sync_back(struct eng_device_seq *s, int from, char *err, size_t errlen)
{
    struct xrt_dev *x = s->x;
    for (int l = 0; l < x->n_layers && from < s->len; l++) {
        int rc = xrtb_bo_sync(x->b, s->state_bo[l], false, (size_t)(s->len - from) * x->ks.kv_row,
                              (size_t)from * x->ks.kv_row, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* One row of a slot's state BO, synced back by xs_sync_back. */
static int npu_row(const void *arg, int l, int pos, uint16_t *k, uint16_t *v)
{
    const struct eng_device_seq *s = arg;
    const struct xrt_dev *x = s->x;
    int nk = x->ks.n_kv_heads, hd = x->ks.head_dim;
    const uint16_t *row = (const uint16_t *)((const uint8_t *)xrtb_bo_map(x->b, s->state_bo[l]) +
                                             (size_t)pos * x->ks.kv_row);
    memcpy(k, row, (size_t)nk * hd * 2);
    memcpy(v, row + (size_t)nk * hd, (size_t)nk * hd * 2);
    return 0;
}

struct eng_kv_src xs_rows(struct eng_device_seq *s)
{
    return (struct eng_kv_src){.n_kv = s->x->ks.n_kv_heads, .head_dim = s->x->ks.head_dim,
                               .row = npu_row, .arg = s, .ids = s->ids};
}

int xs_prefill_start(void *ctx, eng_device_seq *s, const struct eng_batch *b)
{
    struct xrt_dev *x = ctx;
    char e2[160];
    if (!x->pf || x->needs_reset || b->phase != ENG_PHASE_PREFILL || b->n_logits > 1)
        return 0;
    if (xpf_busy(x->pf))
        return -EBUSY;
    /* the reason is logged by whichever runs the batch: here when it starts, else
     * run_runlist */
    if (!xpf_takes(x->pf, x->cfg.prefill, b, NULL, NULL))
        return 0;
    int held = xpf_agree(s->cpu, s->ids, s->len);
    if (held < s->len && xs_sync_back(s, held, e2, sizeof e2))
        return 0;   /* run_runlist meets the same failure and reports it */
    if (s->len + b->n_tokens > x->capacity)
        return 0;   /* run_runlist says so */
    memcpy(s->ids + s->len, b->tokens, (size_t)b->n_tokens * sizeof *s->ids);
    struct eng_kv_src rows = xs_rows(s);
    int rc = xpf_start(s->cpu, s->len, &rows, b, e2, sizeof e2);
    if (rc == 0)
        xpf_takes(x->pf, x->cfg.prefill, b, x->opts.log, x->opts.log_ctx);
    return rc == 0 ? 1 : rc == -EBUSY ? -EBUSY : 0;
}

bool xs_prefill_finish(void *ctx, eng_device_seq *s, bool wait, struct eng_run_result *out)
{
    struct xrt_dev *x = ctx;
    if (!s->cpu || !xpf_pending(s->cpu)) {
        out->state = ENG_ERT_ERROR;
        snprintf(out->message, sizeof out->message, "xrt device: no prefill in progress");
        return true;
    }
    if (!wait && !xpf_ready(s->cpu, false))
        return false;
    if (x->needs_reset) {   /* a reset is due: the rows would be lost with the rest */
        xpf_truncate(s->cpu, s->len);
        out->on_host = true;
        out->state = ENG_ERT_ERROR;
        snprintf(out->message, sizeof out->message, "device needs reset (a runlist ended in "
                 "%s)", eng_ert_name(x->last_failure));
        return true;
    }
    xpf_finish(s->cpu, &x->dev, s, out);
    return true;
}
