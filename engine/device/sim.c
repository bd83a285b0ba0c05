/* The sim device: the cpu device behind a model of NPU firmware, so the NPU's
 * failure modes can be reproduced — and the worker's handling of them tested — on
 * a machine without an NPU.
 *
 * The firmware model, applied to every runlist in this order:
 *
 * 1. Needs reset. After any runlist that did not complete, the device is in a
 *    failed state and its sequences' KV is lost (the sim truncates the sequence
 *    to 0, as a real context reset would lose the buffers). Every runlist before
 *    the next reset() ends at once in ERROR, command 0, "device needs reset".
 *
 * 2. Runlist limit (sim_runlist_limit N > 0). A runlist holding more than N LAYER
 *    commands never makes progress: nothing runs, the device waits
 *    sim_timeout_ms and the runlist ends in TIMEOUT — what amdxdna's TDR reports
 *    for the 42-layer runlist (docs/npu-xrt.md). The failing command is the first
 *    one over the limit: the (N+1)-th LAYER command of the runlist, whose layer is
 *    failed_layer. The wait polls the batch's cancel flag every millisecond and
 *    ends early in ABORT when it is set, so a cancel or a shutdown is not held up
 *    by a simulated hang.
 *
 * 3. Injected faults (fault.h). The runlist is matched once, as a whole, against
 *    the fault list (a spec describes runlists: fault.h's "Meaning"). When a fault
 *    fires, the runlist ends in its state at the command it names: the LAYER
 *    command of its `layer=N`, the HEAD command for `layer=head`, else the first
 *    command. The commands before it have run, that one and the rest have not.
 *
 * 4. Latency (sim_latency_us): slept once per command that runs.
 *
 * reset() brings the device back (rule 1 no longer applies) unless the fault that
 * failed the last runlist has a `reset=fail` / `reset=N`: then that many resets in
 * a row fail (-EIO, "injected reset failure") and the device stays failed.
 *
 * The fault list is the device's own copy: `once` means once per device. */
#include "engine/device/device.h"
#include "engine/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sim_dev {
    struct eng_device dev;       /* dev.context points back here */
    struct eng_device *cpu;      /* the math */
    int limit, timeout_ms, latency_us;
    struct eng_fault_list faults;
    bool needs_reset;
    int resets_to_fail;          /* reset() calls that fail before one succeeds */
    enum eng_ert_state last_failure;
    char desc[320];
};

static const char *sim_get_name(void *ctx)
{
    (void)ctx;
    return "sim";
}

static const char *sim_get_description(void *ctx)
{
    struct sim_dev *s = ctx;
    return s->desc;
}

static void describe(struct sim_dev *s)
{
    char limit[48];
    if (s->limit > 0)
        snprintf(limit, sizeof limit, "a runlist limit of %d layers", s->limit);
    else
        snprintf(limit, sizeof limit, "no runlist limit");
    snprintf(s->desc, sizeof s->desc,
             "sim: %s (%d ms timeout), %d us per command, %zu injected fault(s); on %s", limit,
             s->timeout_ms, s->latency_us, s->faults.n, eng_device_get_description(s->cpu));
}

/* The sim reproduces the monolithic failure first: AUTO starts from all layers. */
static int sim_default_k(void *ctx)
{
    (void)ctx;
    return ENG_PLAN_ALL;
}

static int sim_max_seqs(void *ctx)
{
    struct sim_dev *s = ctx;
    return eng_device_max_seqs(s->cpu);
}

static int sim_max_batch(void *ctx)
{
    struct sim_dev *s = ctx;
    return eng_device_max_batch(s->cpu);
}

static int sim_load_model(void *ctx, const eng_pack *pack, char *err, size_t errlen)
{
    struct sim_dev *s = ctx;
    int n_layers = eng_pack_get_info(pack)->hp.n_layers;
    int rc = eng_fault_list_check(&s->faults, n_layers, err, errlen);
    if (rc)
        return rc;
    if ((rc = eng_device_load_model(s->cpu, pack, err, errlen)))
        return rc;
    describe(s);
    return 0;
}

static int sim_seq_begin(void *ctx, int n_ctx, eng_device_seq **out, char *err, size_t errlen)
{
    struct sim_dev *s = ctx;
    return eng_device_seq_begin(s->cpu, n_ctx, out, err, errlen);
}

static void sim_seq_end(void *ctx, eng_device_seq *seq)
{
    struct sim_dev *s = ctx;
    eng_device_seq_end(s->cpu, seq);
}

static void sim_seq_truncate(void *ctx, eng_device_seq *seq, int n)
{
    struct sim_dev *s = ctx;
    eng_device_seq_truncate(s->cpu, seq, n);
}

/* A copy between sequences in device memory: no runlist, no fault site. */
static int sim_seq_copy(void *ctx, eng_device_seq *dst, eng_device_seq *src, int n)
{
    struct sim_dev *s = ctx;
    return s->needs_reset ? -EIO : eng_device_seq_copy(s->cpu, dst, src, n);
}

static void sleep_us(int64_t us)
{
    if (us <= 0)
        return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* Wait ms milliseconds, or until *cancel. Returns true when cancelled. */
static bool hang(int ms, const atomic_bool *cancel)
{
    for (int waited = 0; waited < ms; waited++) {
        if (cancel && atomic_load(cancel))
            return true;
        sleep_us(1000);
    }
    return cancel && atomic_load(cancel);
}

/* The runlist failed: the device needs a reset and the sequence's KV is gone. */
static void lost(struct sim_dev *s, eng_device_seq *seq, struct eng_run_result *out)
{
    s->needs_reset = true;
    s->last_failure = out->state;
    eng_device_seq_truncate(s->cpu, seq, 0);
}

/* Index in rl of the command a fired fault names (sim rule 3). */
static int fault_cmd(const struct eng_runlist *rl, const struct eng_fault *f)
{
    for (int i = 0; i < rl->n_cmds; i++) {
        const struct eng_cmd *c = &rl->cmds[i];
        if (f->layer == ENG_FAULT_LAYER_HEAD ? c->kind == ENG_CMD_HEAD
                                             : c->kind == ENG_CMD_LAYER && c->layer == f->layer)
            return i;
    }
    return 0;
}

static void sim_run_runlist(void *ctx, eng_device_seq *seq, const struct eng_runlist *rl,
                            const struct eng_batch *b, struct eng_run_result *out)
{
    struct sim_dev *s = ctx;

    /* 1. A failed device runs nothing until it is reset. */
    if (s->needs_reset) {
        out->state = ENG_ERT_ERROR;
        out->failed_cmd = 0;
        snprintf(out->message, sizeof out->message,
                 "device needs reset (a runlist ended in %s)", eng_ert_name(s->last_failure));
        return;
    }

    /* 2. Too many layers: no progress, then the TDR's TIMEOUT. */
    int layers = 0;
    for (int i = 0; i < rl->n_cmds; i++) {
        if (rl->cmds[i].kind != ENG_CMD_LAYER)
            continue;
        if (s->limit > 0 && ++layers == s->limit + 1) {
            out->failed_cmd = i;
            out->failed_layer = rl->cmds[i].layer;
            if (hang(s->timeout_ms, b->cancel)) {
                out->state = ENG_ERT_ABORT;
                snprintf(out->message, sizeof out->message,
                         "runlist of %d layers over the limit of %d: hang aborted by cancel",
                         rl->layer_end - rl->layer_begin, s->limit);
            } else {
                out->state = ENG_ERT_TIMEOUT;
                snprintf(out->message, sizeof out->message,
                         "runlist of %d layers over the limit of %d: no progress in %d ms",
                         rl->layer_end - rl->layer_begin, s->limit, s->timeout_ms);
            }
            lost(s, seq, out);
            return;
        }
    }

    /* 3. Injected faults, matched once per runlist. */
    struct eng_fault_site site = {
        .phase = b->phase,
        .token_begin = b->token_index,
        .token_end = b->token_index + (b->phase == ENG_PHASE_PREFILL ? b->n_tokens : 1),
        .chunk_index = rl->index,
        .layer_begin = rl->layer_begin,
        .layer_end = rl->layer_end,
        .has_head = rl->has_head,
    };
    int which = -1;
    enum eng_ert_state st = eng_fault_match(&s->faults, &site, &which);
    int n_run = rl->n_cmds;
    if (st != ENG_ERT_COMPLETED) {
        n_run = fault_cmd(rl, &s->faults.items[which]);
        s->resets_to_fail = s->faults.items[which].reset_fails;
    }

    /* 4. The commands that run: latency, then the math. */
    sleep_us((int64_t)s->latency_us * n_run);
    if (n_run > 0) {
        struct eng_runlist part = *rl;
        part.n_cmds = n_run;
        struct eng_run_result r;
        if (eng_device_run_runlist(s->cpu, seq, &part, b, &r)) {
            out->state = r.state;
            out->failed_cmd = r.failed_cmd;
            out->failed_layer = r.failed_layer;
            memcpy(out->message, r.message, sizeof out->message);
            lost(s, seq, out);
            return;
        }
    }
    if (st == ENG_ERT_COMPLETED) {
        out->state = ENG_ERT_COMPLETED;
        return;
    }
    char spec[96];
    eng_fault_format(&s->faults.items[which], spec, sizeof spec);
    out->state = st;
    out->failed_cmd = n_run;
    snprintf(out->message, sizeof out->message, "injected fault %s", spec);
    lost(s, seq, out);
}

static int sim_reset(void *ctx, char *err, size_t errlen)
{
    struct sim_dev *s = ctx;
    if (s->resets_to_fail > 0) {
        s->resets_to_fail--;
        return eng__fail(err, errlen, -EIO,
                         "sim: injected reset failure (the device still needs a reset; %d more "
                         "reset(s) will fail)", s->resets_to_fail);
    }
    s->needs_reset = false;
    return 0;
}

static void sim_close(void *ctx)
{
    struct sim_dev *s = ctx;
    eng_device_free(s->cpu);
    eng_fault_list_clear(&s->faults);
    free(s);
}

static const struct eng_device_i sim_iface = {
    .get_name = sim_get_name,
    .get_description = sim_get_description,
    .default_k = sim_default_k,
    .max_batch = sim_max_batch,
    .max_seqs = sim_max_seqs,
    .load_model = sim_load_model,
    .seq_begin = sim_seq_begin,
    .seq_end = sim_seq_end,
    .seq_truncate = sim_seq_truncate,
    .run_runlist = sim_run_runlist,
    .seq_copy = sim_seq_copy,
    .reset = sim_reset,
    .close = sim_close,
};

int eng__device_sim_open(const struct eng_device_opts *o, struct eng_device **out, char *err,
                         size_t errlen)
{
    int rc;
    if (o->sim_runlist_limit < 0 || o->sim_timeout_ms < 0 || o->sim_latency_us < 0)
        return eng__fail(err, errlen, -EINVAL,
                         "sim device: runlist limit %d, timeout %d ms and latency %d us must be "
                         ">= 0", o->sim_runlist_limit, o->sim_timeout_ms, o->sim_latency_us);
    struct sim_dev *s = calloc(1, sizeof *s);
    if (!s)
        return eng__fail(err, errlen, -ENOMEM, "sim device: out of memory");
    s->dev = (struct eng_device){.iface = &sim_iface, .context = s};
    s->limit = o->sim_runlist_limit;
    s->timeout_ms = o->sim_timeout_ms;
    s->latency_us = o->sim_latency_us;
    if (o->faults && o->faults->n) {
        s->faults.items = malloc(o->faults->n * sizeof *s->faults.items);
        if (!s->faults.items) {
            rc = eng__fail(err, errlen, -ENOMEM, "sim device: out of memory");
            goto err;
        }
        memcpy(s->faults.items, o->faults->items, o->faults->n * sizeof *s->faults.items);
        s->faults.n = s->faults.cap = o->faults->n;
    }
    if ((rc = eng__device_cpu_open(o, &s->cpu, err, errlen)))
        goto err;
    describe(s);
    *out = &s->dev;
    return 0;
err:
    eng_fault_list_clear(&s->faults);
    free(s);
    return rc;
}
