/* The device registry and the wrappers: the only code that reads eng_device.iface.
 *
 * The wrappers check arguments (programmer errors abort through assert) and stand
 * in for (optional) members a backend leaves NULL, so neither the worker nor a
 * test ever tests a function pointer. */
#include "engine/device/device.h"
#include "engine/err.h"
#include "minicpmd-build.h"
#if MINICPMD_HAVE_XRT
#include "engine/device/xrt/xrt-dev.h"
#endif
#include "util/clock.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- registry ------------------------------------------------------------------ */

struct device_reg {
    const char *name;
    int (*open)(const struct eng_device_opts *o, struct eng_device **out, char *err,
                size_t errlen);
};

/* By name only: "auto" is settled before, with the pack in hand, by
 * eng_engine_choose_device() (only the pack tells whether an NPU kernel set
 * matches). */
static const struct device_reg registry[] = {
    {"sim", eng__device_sim_open},
#if MINICPMD_HAVE_XRT
    {"xrt", eng__device_xrt_open},
#endif
    {"cpu", eng__device_cpu_open},
};
#define N_REG (sizeof registry / sizeof *registry)

const char *eng_device_reg_name(size_t i)
{
    return i < N_REG ? registry[i].name : NULL;
}

int eng_device_open(const char *name, const struct eng_device_opts *o, struct eng_device **out,
                    char *err, size_t errlen)
{
    static const struct eng_device_opts defaults = {0};
    assert(out);
    *out = NULL;
    if (!o)
        o = &defaults;
    for (size_t i = 0; name && i < N_REG; i++)
        if (strcmp(name, registry[i].name) == 0)
            return registry[i].open(o, out, err, errlen);
    char names[128] = "";
    for (size_t i = 0; i < N_REG; i++) {
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", registry[i].name);
    }
    return eng__fail(err, errlen, -ENOENT, "unknown device '%s' (known: %s)",
                     name ? name : "(null)", names);
}

void eng_device_free(struct eng_device *d)
{
    if (!d)
        return;
    d->iface->close(d->context);  /* frees d too: the backend allocated it */
}

/* ---- wrappers -------------------------------------------------------------------- */

const char *eng_device_get_name(const struct eng_device *d)
{
    assert(d && d->iface->get_name);
    return d->iface->get_name(d->context);
}

const char *eng_device_get_description(const struct eng_device *d)
{
    assert(d);
    if (!d->iface->get_description)
        return eng_device_get_name(d);
    return d->iface->get_description(d->context);
}

int eng_device_default_k(const struct eng_device *d)
{
    assert(d);
    if (!d->iface->default_k)
        return ENG_PLAN_ALL;
    int k = d->iface->default_k(d->context);
    return k >= 1 ? k : ENG_PLAN_ALL;
}

int eng_device_max_batch(const struct eng_device *d)
{
    assert(d);
    if (!d->iface->max_batch)
        return 0;
    int n = d->iface->max_batch(d->context);
    return n > 0 ? n : 0;
}

int eng_device_load_model(struct eng_device *d, const eng_pack *pack, char *err, size_t errlen)
{
    assert(d && pack);
    return d->iface->load_model(d->context, pack, err, errlen);
}

int eng_device_max_seqs(const struct eng_device *d)
{
    assert(d);
    int n = d->iface->max_seqs ? d->iface->max_seqs(d->context) : 1;
    return n > 1 ? n : 1;
}

int eng_device_seq_begin(struct eng_device *d, int n_ctx, eng_device_seq **out, char *err,
                         size_t errlen)
{
    assert(d && out);
    *out = NULL;
    if (n_ctx < 1)
        return eng__fail(err, errlen, -EINVAL, "sequence of %d positions: must be >= 1", n_ctx);
    return d->iface->seq_begin(d->context, n_ctx, out, err, errlen);
}

void eng_device_seq_end(struct eng_device *d, eng_device_seq *seq)
{
    assert(d);
    if (seq)
        d->iface->seq_end(d->context, seq);
}

void eng_device_seq_truncate(struct eng_device *d, eng_device_seq *seq, int n)
{
    assert(d && seq && n >= 0);
    d->iface->seq_truncate(d->context, seq, n);
}

/* The wrappers' common end: the time, and a failure's command, layer and message. */
static int run_result(const struct eng_runlist *rl, int64_t t0, struct eng_run_result *out)
{
    out->elapsed_us = ut_now_us() - t0;
    if (eng_ert_is_success(out->state)) {
        out->failed_cmd = -1;
        out->failed_layer = -1;
        out->message[0] = '\0';
        return 0;
    }
    if (out->failed_cmd >= 0 && out->failed_cmd < rl->n_cmds && out->failed_layer < 0 &&
        rl->cmds[out->failed_cmd].kind == ENG_CMD_LAYER)
        out->failed_layer = rl->cmds[out->failed_cmd].layer;
    if (!out->message[0])
        snprintf(out->message, sizeof out->message, "runlist %d ended in %s", rl->index,
                 eng_ert_name(out->state));
    return -EIO;
}

int eng_device_run_runlist(struct eng_device *d, eng_device_seq *seq, const struct eng_runlist *rl,
                           const struct eng_batch *b, struct eng_run_result *out)
{
    assert(d && seq && rl && b && out);
    assert(rl->n_cmds >= 1 && b->n_tokens >= 1 && b->tokens);
    *out = (struct eng_run_result){.state = ENG_ERT_COMPLETED, .failed_cmd = -1,
                                   .failed_layer = -1};
    int64_t t0 = ut_now_us();
    d->iface->run_runlist(d->context, seq, rl, b, out);
    return run_result(rl, t0, out);
}

bool eng_device_can_copy(const struct eng_device *d)
{
    assert(d);
    return d->iface->seq_copy != NULL;
}

int eng_device_seq_copy(struct eng_device *d, eng_device_seq *dst, eng_device_seq *src, int n)
{
    assert(d && dst && src && n >= 0);
    return d->iface->seq_copy ? d->iface->seq_copy(d->context, dst, src, n) : -ENOTSUP;
}

int eng_device_seq_write_kv(struct eng_device *d, eng_device_seq *seq,
                            const struct eng_kv_src *src, int pos, int n, char *err,
                            size_t errlen)
{
    assert(d && seq && src && pos >= 0 && n >= 0);
    if (!d->iface->seq_write_kv)
        return eng__fail(err, errlen, -ENOTSUP, "%s device: cannot take KV rows",
                         eng_device_get_name(d));
    return d->iface->seq_write_kv(d->context, seq, src, pos, n, err, errlen);
}

bool eng_device_can_prefill_async(const struct eng_device *d)
{
    assert(d);
    return d->iface->prefill_start && d->iface->prefill_finish;
}

int eng_device_prefill_start(struct eng_device *d, eng_device_seq *seq,
                             const struct eng_batch *b)
{
    assert(d && seq && b && b->n_tokens >= 1 && b->tokens);
    return eng_device_can_prefill_async(d) ? d->iface->prefill_start(d->context, seq, b) : 0;
}

int eng_device_prefill_finish(struct eng_device *d, eng_device_seq *seq, bool wait,
                              struct eng_run_result *out)
{
    assert(d && seq && out && eng_device_can_prefill_async(d));
    *out = (struct eng_run_result){.state = ENG_ERT_COMPLETED, .failed_cmd = -1,
                                   .failed_layer = -1};
    if (!d->iface->prefill_finish(d->context, seq, wait, out))
        return -EAGAIN;
    if (eng_ert_is_success(out->state)) {
        out->failed_cmd = out->failed_layer = -1;
        out->message[0] = '\0';
        return 0;
    }
    if (!out->message[0])
        snprintf(out->message, sizeof out->message, "prefill ended in %s",
                 eng_ert_name(out->state));
    return -EIO;
}

bool eng_device_can_batch(const struct eng_device *d)
{
    assert(d);
    return d->iface->run_runlist_multi != NULL;
}

int eng_device_run_runlist_multi(struct eng_device *d, eng_device_seq *const *seqs,
                                 const struct eng_runlist *rl, const struct eng_batch *b, int n,
                                 struct eng_run_result *out)
{
    assert(d && d->iface->run_runlist_multi && seqs && rl && b && n >= 1 && out);
    for (int i = 0; i < n; i++)
        assert(seqs[i] && b[i].n_tokens >= 1 && b[i].tokens);
    *out = (struct eng_run_result){.state = ENG_ERT_COMPLETED, .failed_cmd = -1,
                                   .failed_layer = -1};
    int64_t t0 = ut_now_us();
    d->iface->run_runlist_multi(d->context, seqs, rl, b, n, out);
    return run_result(rl, t0, out);
}

int eng_device_reset(struct eng_device *d, char *err, size_t errlen)
{
    assert(d);
    if (!d->iface->reset)
        return 0;
    return d->iface->reset(d->context, err, errlen);
}

bool eng_device_reset_changed_mode(struct eng_device *d)
{
    assert(d);
    return d->iface->reset_changed_mode && d->iface->reset_changed_mode(d->context);
}

