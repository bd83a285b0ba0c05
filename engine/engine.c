/* The engine facade: everything serving one pack needs, opened in one call and
 * closed in one. The order is the dependency order — pack, tokenizer, the pack's
 * generation defaults, faults, device (the model loaded into it), worker — and
 * eng_engine_free() undoes it backwards. */
#include "engine/engine.h"

#include "engine/device/device.h"
#include "engine/device/fault.h"
#include "engine/err.h"
#include "engine/template.h"
#include "engine/worker/sample.h"
#include "engine/worker/worker.h"
#include "engine/xrt.h"
#include "util/fs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct eng_engine {
    eng_pack *pack;
    eng_tokenizer *tok;
    struct eng_device *dev;
    eng_worker *worker;              /* owns dev while it runs */
    int n_ctx;
    int32_t stop_ids[ENG_GEN_MAX_STOP_IDS];
    int n_stop_ids;
    struct eng_sampling sampling;
    int32_t max_new_tokens;
    eng_gram_vocab *gvocab;          /* built by the first grammar to need it */
    pthread_mutex_t gvocab_mu;
    eng_log_fn log;
    void *log_ctx;
};

static const eng_gram_vocab *gram_vocab_of(void *e) { return eng_engine_gram_vocab(e); }

const char *eng_engine_choose_device(const char *want, const char *pack_dir, char *why,
                                     size_t whylen, char *err, size_t errlen)
{
    bool is_auto = !want || strcmp(want, "auto") == 0;
    if (why && whylen)
        why[0] = '\0';
    if (!is_auto && strcmp(want, "xrt") != 0)
        return want;
    if (!pack_dir)          /* no model: "xrt" is opened as asked, "auto" is the CPU */
        return is_auto ? "cpu" : "xrt";
    /* Only a built bridge with a node present has a reason worth telling for auto;
     * an explicit xrt hears the first problem whatever it is. */
    bool present = eng_xrt_built() && eng_xrt_node_present();
    if (!present && is_auto)
        return "cpu";
    char e2[512];
    if (eng_xrt_preflight(pack_dir, e2, sizeof e2) == 0)
        return "xrt";
    if (!is_auto) {
        snprintf(err, errlen, "%s", e2);
        return NULL;
    }
    if (why && whylen)
        snprintf(why, whylen, "%s", e2);
    return "cpu";
}

/* The model's lines (the all-ones QK-norm shim, the weights' copy) go to the
 * engine's log. */
static void log_model(void *ctx, enum eng_log_level level, const char *msg)
{
    struct eng_engine *e = ctx;
    if (e->log)
        e->log(e->log_ctx, level, msg);
}

/* The renderer is MiniCPM5's template in C: a pack whose own template differs
 * would be rendered as MiniCPM5's. Say so rather than guess. */
static void check_template(struct eng_engine *e, const char *dir)
{
    char path[4096], msg[512];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    int rc;
    const char *why;
    FILE *f = ut_fopen_regular(path, 0, &rc, &why);
    if (!f) {
        if (rc != -ENOENT && e->log) {
            snprintf(msg, sizeof msg, "%.160s: %s; ignored", path, why);
            e->log(e->log_ctx, ENG_LOG_WARN, msg);
        }
        return;
    }
    char buf[16384];
    size_t nb = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (eng_chat_template_is_official(buf, nb) || !e->log)
        return;
    snprintf(msg, sizeof msg,
             "%.160s is not the official MiniCPM5-2B template; prompts are rendered with the "
             "built-in MiniCPM5 template",
             path);
    e->log(e->log_ctx, ENG_LOG_WARN, msg);
}

static int open_device(struct eng_engine *e, const struct eng_engine_opts *o, char *err,
                       size_t errlen)
{
    const struct eng_pack_info *info = eng_pack_get_info(e->pack);
    struct eng_fault_list faults = {0};
    char e2[400];
    int rc = -EINVAL;
    if (o->faults && *o->faults) {
        if (eng_fault_list_parse(&faults, o->faults, e2, sizeof e2) != 0 ||
            eng_fault_list_check(&faults, info->hp.n_layers, e2, sizeof e2) != 0) {
            eng__fail(err, errlen, rc, "--fault: %s", e2);
            goto out;
        }
        if (strcmp(o->device, "sim") != 0) {
            eng__fail(err, errlen, rc,
                      "--fault needs --device sim (faults are injected by the simulated NPU)");
            goto out;
        }
    }
    struct eng_device_opts dopts = {
        .n_threads = o->n_threads,
        .act = o->act,
        .qk_norm = o->qk_norm,
        .weights = o->weights,
        .state_dir = o->state_dir,
        .log = log_model,
        .log_ctx = e,
        .sim_runlist_limit = o->sim_runlist_limit,
        .sim_timeout_ms = o->sim_timeout_ms,
        .sim_latency_us = o->sim_latency_us,
        .faults = faults.n ? &faults : NULL,
    };
    if ((rc = eng_device_open(o->device, &dopts, &e->dev, e2, sizeof e2)) != 0) {
        eng__fail(err, errlen, rc, "--device %s: %s", o->device, e2);
        goto out;
    }
    rc = 0;
out:
    eng_fault_list_clear(&faults);
    return rc;
}

int eng_engine_open(const char *dir, const struct eng_engine_opts *o, eng_worker_emit_fn emit,
                    void *emit_ctx, eng_engine **out, char *err, size_t errlen)
{
    char path[4096], e2[400];
    int rc = -ENOMEM;
    *out = NULL;
    struct eng_engine *e = calloc(1, sizeof *e);
    if (!e)
        return eng__fail(err, errlen, rc, "out of memory");
    e->log = o->log;
    e->log_ctx = o->log_ctx;
    pthread_mutex_init(&e->gvocab_mu, NULL);
    if ((rc = eng_pack_open(dir, &e->pack, err, errlen)) != 0)
        goto fail;
    const struct eng_pack_info *info = eng_pack_get_info(e->pack);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if ((rc = eng_tokenizer_load(path, &e->tok, err, errlen)) != 0)
        goto fail;
    if ((rc = eng_tokenizer_check_model(e->tok, info->hp.n_vocab, err, errlen)) != 0)
        goto fail;
    int n = eng_pack_stop_ids(e->pack, e->stop_ids, ENG_GEN_MAX_STOP_IDS, err, errlen);
    if (n < 0) {
        rc = n;
        goto fail;
    }
    e->n_stop_ids = n;
    if ((rc = eng_sampling_defaults(e->pack, &e->sampling, err, errlen)) != 0 ||
        (rc = eng_max_new_tokens(e->pack, &e->max_new_tokens, err, errlen)) != 0)
        goto fail;
    check_template(e, dir);
    e->n_ctx = o->n_ctx > 0 ? o->n_ctx : info->hp.n_ctx_train;
    if (e->n_ctx > info->hp.n_ctx_train) {
        rc = eng__fail(err, errlen, -EINVAL, "--ctx-size %d: the model has %d positions",
                       o->n_ctx, info->hp.n_ctx_train);
        goto fail;
    }
    if (!o->device) {            /* text only: no device, no worker */
        *out = e;
        return 0;
    }
    if ((rc = open_device(e, o, err, errlen)) != 0)
        goto fail;
    struct eng_worker_opts wo = {
        .queue_size = o->queue_size,
        .parallel = o->parallel,
        .step_prefill = o->step_prefill,
        .prefill_chunk = o->prefill_chunk,
        .prompt_cache = o->prompt_cache,
        .n_ctx = e->n_ctx,
        .kmode = o->kmode,
        .fixed_k = o->fixed_k,
        .max_retries = o->max_retries,
        .state_dir = o->state_dir,
        .log = o->log,
        .log_ctx = o->log_ctx,
        .gram_vocab = gram_vocab_of,
        .gram_vocab_ctx = e,
    };
    if ((rc = eng_worker_new(e->dev, e->pack, e->tok, &wo, emit, emit_ctx, &e->worker, e2,
                             sizeof e2)) != 0) {
        eng__fail(err, errlen, rc, "%s", e2);
        goto fail;
    }
    *out = e;
    return 0;
fail:
    eng_engine_free(e);
    return rc < 0 ? rc : -EINVAL;
}

void eng_engine_stop(eng_engine *e)
{
    if (!e)
        return;
    eng_worker_free(e->worker);
    e->worker = NULL;
}

void eng_engine_free(eng_engine *e)
{
    if (!e)
        return;
    eng_engine_stop(e);
    eng_device_free(e->dev);
    eng_gram_vocab_free(e->gvocab);
    pthread_mutex_destroy(&e->gvocab_mu);
    eng_tokenizer_free(e->tok);
    eng_pack_free(e->pack);
    free(e);
}

const eng_pack *eng_engine_pack(const eng_engine *e) { return e->pack; }
const eng_tokenizer *eng_engine_tokenizer(const eng_engine *e) { return e->tok; }
const eng_gram_vocab *eng_engine_gram_vocab(eng_engine *e)
{
    pthread_mutex_lock(&e->gvocab_mu);
    if (!e->gvocab)
        e->gvocab = eng_gram_vocab_new(e->tok);
    pthread_mutex_unlock(&e->gvocab_mu);
    return e->gvocab;
}

const struct eng_sampling *eng_engine_sampling(const eng_engine *e) { return &e->sampling; }
int32_t eng_engine_max_new_tokens(const eng_engine *e) { return e->max_new_tokens; }
int eng_engine_n_ctx(const eng_engine *e) { return e->n_ctx; }
const char *eng_engine_device_name(const eng_engine *e)
{
    return e->dev ? eng_device_get_name(e->dev) : "none";
}

const char *eng_engine_device_description(const eng_engine *e)
{
    return e->dev ? eng_device_get_description(e->dev) : "none (text only)";
}

int eng_engine_stop_ids(const eng_engine *e, const int32_t **ids)
{
    *ids = e->stop_ids;
    return e->n_stop_ids;
}

int eng_engine_submit(eng_engine *e, eng_gen_req *r)
{
    return e->worker ? eng_worker_submit(e->worker, r) : -ESHUTDOWN;
}

void eng_engine_get_stats(const eng_engine *e, struct eng_worker_stats *out)
{
    if (e && e->worker)
        eng_worker_get_stats(e->worker, out);
    else
        *out = (struct eng_worker_stats){0};
}
