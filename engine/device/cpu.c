/* The cpu device: real math, the reference. It runs a runlist's commands with the
 * CPU forward pass (engine/model/model.h):
 *
 *   EMBED                    eng_seq_embed(tokens, n)
 *   LAYER a, LAYER a+1, …    one eng_seq_layers(a, b) over each consecutive run
 *   HEAD                     eng_seq_head_rows(logits or NULL, n_logits)
 *
 * The layers of one step may be cut into any runlists: the sequence remembers how
 * far its batch got, so runlist after runlist continues where the last stopped.
 * An engine error (out-of-range token, layers out of order, a full context) ends
 * the runlist in ENG_ERT_ERROR at the command that failed, with the engine's
 * message. Nothing here ever hangs, so default_k is ENG_PLAN_ALL and reset has
 * nothing to do. */
#include "engine/device/device.h"
#include "engine/err.h"
#include "engine/model/model-impl.h"   /* ENG_MAX_BATCH */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cpu_dev {
    struct eng_device dev;       /* dev.context points back here */
    struct eng_model_opts mopts;
    eng_model *model;
    char desc[128];
    eng_device_seq *last;        /* the sequence that ran last (see cpu_run_runlist) */
};

/* Sequences at once: the worker's prompt-cache slots. Each costs the KV pages its
 * positions touched; the batch buffers only while it runs. */
#define CPU_MAX_SEQS 4

struct eng_device_seq {
    eng_seq *seq;
};

static const char *cpu_get_name(void *ctx)
{
    (void)ctx;
    return "cpu";
}

static const char *cpu_get_description(void *ctx)
{
    struct cpu_dev *c = ctx;
    return c->desc;
}

static int cpu_default_k(void *ctx)
{
    (void)ctx;
    return ENG_PLAN_ALL;
}

static int cpu_max_batch(void *ctx)
{
    (void)ctx;
    return ENG_MAX_BATCH;
}

static int cpu_load_model(void *ctx, const eng_pack *pack, char *err, size_t errlen)
{
    struct cpu_dev *c = ctx;
    if (c->model)
        return eng__fail(err, errlen, -EINVAL, "cpu device: a model is already loaded");
    int rc = eng_model_open(pack, &c->mopts, &c->model, err, errlen);
    if (rc)
        return rc;
    const struct eng_model_info *mi = eng_model_get_info(c->model);
    snprintf(c->desc, sizeof c->desc, "cpu (%s, %d threads, %s activations)", mi->isa,
             mi->n_threads, c->mopts.act == ENG_ACT_F32 ? "f32" : "q8");
    return 0;
}

static int cpu_seq_begin(void *ctx, int n_ctx, eng_device_seq **out, char *err, size_t errlen)
{
    struct cpu_dev *c = ctx;
    if (!c->model)
        return eng__fail(err, errlen, -EINVAL, "cpu device: no model loaded");
    struct eng_device_seq *s = calloc(1, sizeof *s);
    if (!s)
        return eng__fail(err, errlen, -ENOMEM, "cpu device: out of memory");
    int rc = eng_seq_new(c->model, n_ctx, &s->seq, err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int cpu_max_seqs(void *ctx)
{
    (void)ctx;
    return CPU_MAX_SEQS;
}

static void cpu_seq_end(void *ctx, eng_device_seq *s)
{
    struct cpu_dev *c = ctx;
    if (c->last == s)
        c->last = NULL;
    eng_seq_free(s->seq);
    free(s);
}

static void cpu_seq_truncate(void *ctx, eng_device_seq *s, int n)
{
    (void)ctx;
    eng_seq_truncate(s->seq, n);
}

static int cpu_seq_copy(void *ctx, eng_device_seq *dst, eng_device_seq *src, int n)
{
    (void)ctx;
    return eng_seq_copy_prefix(dst->seq, src->seq, n);
}

static void fail(struct eng_run_result *out, eng_device_seq *s, int cmd, int layer)
{
    out->state = ENG_ERT_ERROR;
    out->failed_cmd = cmd;
    out->failed_layer = layer;
    snprintf(out->message, sizeof out->message, "%s", eng_seq_error(s->seq));
}

static void cpu_run_runlist(void *ctx, eng_device_seq *s, const struct eng_runlist *rl,
                            const struct eng_batch *b, struct eng_run_result *out)
{
    struct cpu_dev *c = ctx;
    /* Another sequence's turn: the one that ran last is idle now (one worker runs
     * one sequence at a time), so only this one keeps batch buffers. */
    if (c->last && c->last != s)
        eng_seq_trim(c->last->seq);
    c->last = s;
    const struct eng_cmd *cmds = rl->cmds;
    for (int i = 0; i < rl->n_cmds;) {
        switch (cmds[i].kind) {
        case ENG_CMD_EMBED:
            if (eng_seq_embed(s->seq, b->tokens, b->n_tokens)) {
                fail(out, s, i, -1);
                return;
            }
            i++;
            break;
        case ENG_CMD_LAYER: {
            /* The run of consecutive layers starting here, in one call. */
            int j = i + 1;
            while (j < rl->n_cmds && cmds[j].kind == ENG_CMD_LAYER &&
                   cmds[j].layer == cmds[j - 1].layer + 1)
                j++;
            if (eng_seq_layers(s->seq, cmds[i].layer, cmds[j - 1].layer + 1)) {
                fail(out, s, i, cmds[i].layer);
                return;
            }
            i = j;
            break;
        }
        case ENG_CMD_HEAD:
            if (eng_seq_head_rows(s->seq, b->logits, b->n_logits > 1 ? b->n_logits : 1)) {
                fail(out, s, i, -1);
                return;
            }
            i++;
            break;
        default:
            out->state = ENG_ERT_ERROR;
            out->failed_cmd = i;
            snprintf(out->message, sizeof out->message, "unknown command kind %d",
                     (int)cmds[i].kind);
            return;
        }
    }
    out->state = ENG_ERT_COMPLETED;
}

/* Several sequences as one batch: the first leads (holds the batch buffers). */
static void cpu_run_runlist_multi(void *ctx, eng_device_seq *const *ds,
                                  const struct eng_runlist *rl, const struct eng_batch *b, int n,
                                  struct eng_run_result *out)
{
    struct cpu_dev *c = ctx;
    eng_seq *seqs[ENG_MAX_BATCH];
    const int32_t *tokens[ENG_MAX_BATCH];
    int ns[ENG_MAX_BATCH];
    float *logits[ENG_MAX_BATCH];
    int nrows[ENG_MAX_BATCH];
    if (n > ENG_MAX_BATCH) {
        out->state = ENG_ERT_ERROR;
        out->failed_cmd = 0;
        snprintf(out->message, sizeof out->message, "a batch of %d sequences", n);
        return;
    }
    for (int i = 0; i < n; i++) {
        seqs[i] = ds[i]->seq;
        tokens[i] = b[i].tokens;
        ns[i] = b[i].n_tokens;
        logits[i] = b[i].logits;
        nrows[i] = b[i].n_logits;
        if (i > 0)   /* only the leader keeps batch buffers */
            eng_seq_trim(seqs[i]);
    }
    eng_device_seq *lead = ds[0];
    if (c->last && c->last != lead)
        eng_seq_trim(c->last->seq);
    c->last = lead;
    const struct eng_cmd *cmds = rl->cmds;
    for (int i = 0; i < rl->n_cmds;) {
        int rc = 0, j = i + 1;
        switch (cmds[i].kind) {
        case ENG_CMD_EMBED:
            rc = eng_seqs_embed(seqs, tokens, ns, n);
            break;
        case ENG_CMD_LAYER:
            while (j < rl->n_cmds && cmds[j].kind == ENG_CMD_LAYER &&
                   cmds[j].layer == cmds[j - 1].layer + 1)
                j++;
            rc = eng_seq_layers(lead->seq, cmds[i].layer, cmds[j - 1].layer + 1);
            break;
        case ENG_CMD_HEAD:
            rc = eng_seqs_head_rows(lead->seq, logits, nrows);
            break;
        default:
            rc = -EINVAL;
        }
        if (rc) {
            fail(out, lead, i, cmds[i].kind == ENG_CMD_LAYER ? cmds[i].layer : -1);
            return;
        }
        i = j;
    }
    out->state = ENG_ERT_COMPLETED;
}

static void cpu_close(void *ctx)
{
    struct cpu_dev *c = ctx;
    eng_model_free(c->model);
    free(c);
}

static const struct eng_device_i cpu_iface = {
    .get_name = cpu_get_name,
    .get_description = cpu_get_description,
    .default_k = cpu_default_k,
    .max_batch = cpu_max_batch,
    .max_seqs = cpu_max_seqs,
    .load_model = cpu_load_model,
    .seq_begin = cpu_seq_begin,
    .seq_end = cpu_seq_end,
    .seq_truncate = cpu_seq_truncate,
    .run_runlist = cpu_run_runlist,
    .run_runlist_multi = cpu_run_runlist_multi,
    .seq_copy = cpu_seq_copy,
    .reset = NULL,          /* nothing can hang or be lost */
    .close = cpu_close,
};

int eng__device_cpu_open(const struct eng_device_opts *o, struct eng_device **out, char *err,
                         size_t errlen)
{
    if (o->act != ENG_ACT_Q8 && o->act != ENG_ACT_F32)
        return eng__fail(err, errlen, -EINVAL, "cpu device: unknown activation mode %d",
                         (int)o->act);
    struct cpu_dev *c = calloc(1, sizeof *c);
    if (!c)
        return eng__fail(err, errlen, -ENOMEM, "cpu device: out of memory");
    c->dev = (struct eng_device){.iface = &cpu_iface, .context = c};
    c->mopts = (struct eng_model_opts){.n_threads = o->n_threads, .act = o->act,
                                       .qk_norm = o->qk_norm, .weights = o->weights,
                                       .state_dir = o->state_dir, .log = o->log,
                                       .log_ctx = o->log_ctx};
    snprintf(c->desc, sizeof c->desc, "cpu (no model loaded)");
    *out = &c->dev;
    return 0;
}
