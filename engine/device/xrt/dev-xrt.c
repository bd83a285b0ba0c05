/* The xrt device: MiniCPM5 decode on an XDNA 2 NPU through the open dense kernels
 * (docs/npu-kernels.md), driven through the C++ bridge (bridge.h).
 *
 * Load (before the device is touched): find the kernel set (--npu-kernels or
 * <pack>/open_kernels), parse manifest.json, check it against the model and check
 * that every file it names exists. Then: open the NPU, one hw_context per xclbin the
 * layer program and the tail use, each kernel's instruction BO, the globals (xres,
 * logits, the lm_head pool, the final norm, the position table…), per layer its
 * weight pool (packed from model.q4nx in the kernels' byte order), consts, act and
 * KV state, and one xrt::run per layer and per tail step, kept for the device's
 * life.
 *
 * A runlist of the plan (engine/worker/plan.h) maps onto the NPU like this:
 *
 *   EMBED            host: the token's BF16 embedding row -> xres (f32), sync; and,
 *                    once per token, the attnpos patch of every attnpos kernel's
 *                    instruction stream for the token's position, sync
 *   LAYER a .. b-1   the runs of layers a..b-1 as ONE xrt::runlist (one hw_context),
 *                    executed and waited before anything else is submitted
 *   HEAD             with logits: run ln, then lm (each its own context and
 *                    submission), sync logits back; the position joins the sequence
 *
 * Failures (bridge.h maps every XRT exception to an ERT state) leave the device in
 * a failed state: every runlist ends in ERROR until reset(), which waits out what
 * is still in flight and resets the runlists (amdxdna recreates its firmware
 * context by itself, docs/npu-xrt.md §1d); the sequence's KV is then lost.
 *
 * One position per kernel run (the dx design decodes one token): a batch of several
 * positions (a short prompt --npu-prefill auto leaves on the NPU) runs token by
 * token through each runlist, each position's residual kept on the host between
 * runlists. Sequences live in KV slots (xrt-seq.c), each its own state BOs; the
 * prompt on the CPU is xrt-prefill.c's. */
#include "engine/device/device.h"
#include "engine/err.h"
#include "engine/device/xrt/xrt-impl.h"
#include "engine/device/xrt/xrt-state.h"
#include "engine/model/model-impl.h"   /* ENG_MAX_BATCH */
#include "util/clock.h"
#include "util/fs.h"
#ifdef MINICPMD_XRT_MODEL
#include "model.h"
#include "xrt-double.h"     /* -Dxrt_model=true: the double computes (model.h) */
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *x_get_name(void *ctx)
{
    (void)ctx;
    return "xrt";
}

static const char *x_get_description(void *ctx)
{
    struct xrt_dev *x = ctx;
    return x->desc;
}

/* The fewest runlists of at most 24 layers (XRT's own chain size, one ERT_CMD_CHAIN
 * each, docs/npu-xrt.md §1a), balanced: 42 layers -> 21 + 21. The host waits
 * between them, which is what changes what the driver sees. */
static int x_default_k(void *ctx)
{
    struct xrt_dev *x = ctx;
    if (!x->loaded)
        return 24;
    int chunks = (x->n_layers + 23) / 24;
    return (x->n_layers + chunks - 1) / chunks;
}

static int x_max_batch(void *ctx)
{
    struct xrt_dev *x = ctx;
    return x->pf ? ENG_MAX_BATCH : 1;   /* the CPU prefills in batches */
}

/* ---- loading -------------------------------------------------------------------- */

static int read_words(const char *path, uint32_t **out, size_t *n, char *err, size_t errlen)
{
    const char *why;
    int frc;
    FILE *f = ut_fopen_regular(path, 0, &frc, &why);
    if (!f)
        return eng__fail(err, errlen, frc, "%s: %s", path, why);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz <= 0 || sz % 4) {
        fclose(f);
        return eng__fail(err, errlen, -EINVAL, "%s: not a whole number of 32-bit words", path);
    }
    uint32_t *w = malloc((size_t)sz);
    if (!w || fread(w, 1, (size_t)sz, f) != (size_t)sz) {
        free(w);
        fclose(f);
        return eng__fail(err, errlen, -EIO, "%s: cannot read", path);
    }
    fclose(f);
    *out = w;
    *n = (size_t)sz / 4;
    return 0;
}

static int load_kernel(struct xrt_dev *x, int ki, char *err, size_t errlen)
{
    if (x->kern_of[ki] >= 0)
        return 0;
    const struct eng_kset_kernel *k = &x->ks.kernels[ki];
    char path[4200];
    int rc, ci = k->context;
    if (x->ctx_of[ci] < 0) {
        snprintf(path, sizeof path, "%s/%s", x->ks.dir, x->ks.contexts[ci].xclbin);
        if ((rc = xrtb_context(x->b, path, &x->ctx_of[ci], err, errlen)))
            return rc;
    }
    uint32_t *w = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s", x->ks.dir, k->insts);
    if ((rc = read_words(path, &w, &n, err, errlen)))
        return rc;
    if (k->attnpos) {
        char e2[200];
        if ((rc = eng_npu_attn_table(w, n, x->ks.kv_row, x->patch[ki], e2, sizeof e2))) {
            free(w);
            return eng__fail(err, errlen, rc, "%s: %s", path, e2);
        }
    }
    rc = xrtb_kernel(x->b, x->ctx_of[ci], w, n, &x->kern_of[ki], err, errlen);
    free(w);
    return rc;
}

/* The bridge BO of buffer argument `name` for layer l (-1 for the tail) over a
 * slot's `state` BO. */
static int arg_bo(struct xrt_dev *x, const char *name, int l, int state_bo)
{
    static const char *const per_layer[LB_N] = {"pool", "consts", "act"};
    for (int i = 0; i < LB_N; i++)
        if (l >= 0 && strcmp(name, per_layer[i]) == 0)
            return x->layer_bo[l * LB_N + i];
    if (l >= 0 && strcmp(name, "state") == 0)
        return state_bo;
    for (int g = 0; g < x->ks.n_globals; g++)
        if (strcmp(x->ks.globals[g].name, name) == 0)
            return x->glob_bo[g];
    return -1;
}

static int make_run(struct xrt_dev *x, const struct eng_kset_step *s, int l, int state_bo,
                    int *out, char *err, size_t errlen)
{
    int bos[ENG_KSET_MAX_ARGS];
    for (int i = 0; i < s->n_args; i++)
        if ((bos[i] = arg_bo(x, s->args[i], l, state_bo)) < 0)
            return eng__fail(err, errlen, -EINVAL, "%s: run of kernel %s names buffer '%s', "
                             "which is neither per-layer nor a global", x->ks.manifest_path,
                             x->ks.kernels[s->kernel].name, s->args[i]);
    return xrtb_run(x->b, x->kern_of[s->kernel], bos, s->n_args, out, err, errlen);
}

int xd_make_layer_run(struct xrt_dev *x, int l, int state_bo, int *out, char *err,
                      size_t errlen)
{
    return make_run(x, &x->ks.layer_step, l, state_bo, out, err, errlen);
}

static int sync_to(struct xrt_dev *x, int bo, char *err, size_t errlen)
{
    return xrtb_bo_sync(x->b, bo, true, 0, 0, err, errlen);
}

static int alloc_globals(struct xrt_dev *x, char *err, size_t errlen)
{
    int rc;
    x->xres = x->logits = -1;
    for (int g = 0; g < x->ks.n_globals; g++) {
        const struct eng_kset_global *gl = &x->ks.globals[g];
        size_t bytes = gl->bytes ? gl->bytes : (size_t)x->capacity * gl->per_row;
        if ((rc = xrtb_bo(x->b, bytes, &x->glob_bo[g], err, errlen)))
            return rc;
        uint8_t *m = xrtb_bo_map(x->b, x->glob_bo[g]);
        size_t cap = xrtb_bo_size(x->b, x->glob_bo[g]);
        if (!gl->bytes) {
            if (512 + 8 * (size_t)gl->n_inv_freq > gl->per_row)
                return eng__fail(err, errlen, -EINVAL, "%s: global %s: %d frequencies do not "
                                 "fit a %llu-byte record", x->ks.manifest_path, gl->name,
                                 gl->n_inv_freq, (unsigned long long)gl->per_row);
            eng_npu_ptab(m, x->capacity, gl->per_row, gl->inv_freq, gl->n_inv_freq, gl->window);
        } else if (strcmp(gl->name, "lmpool") == 0) {
            if ((rc = eng_npu_pack(x->st, x->ks.lm_ops, x->ks.n_lm_ops, 0, m, cap, err, errlen)))
                return rc;
        } else if (strcmp(gl->name, "normw") == 0) {
            struct eng_kset_op put = {.kind = ENG_KSET_OP_PUT, .cap = x->ks.norm_bytes};
            snprintf(put.tensor, sizeof put.tensor, "%s", x->ks.norm_tensor);
            if ((rc = eng_npu_pack(x->st, &put, 1, 0, m, cap, err, errlen)))
                return rc;
        }
        if (strcmp(gl->name, "xres") == 0)
            x->xres = g;
        if (strcmp(gl->name, "logits") == 0)
            x->logits = g;
        if ((rc = sync_to(x, x->glob_bo[g], err, errlen)))
            return rc;
    }
    if (x->xres < 0 || x->logits < 0)
        return eng__fail(err, errlen, -EINVAL, "%s: globals lack xres or logits",
                         x->ks.manifest_path);
    if (x->ks.globals[x->logits].bytes < (uint64_t)x->n_vocab * 4 ||
        x->ks.globals[x->xres].bytes < (uint64_t)x->hidden * 4)
        return eng__fail(err, errlen, -EINVAL, "%s: xres or logits is too small for the model",
                         x->ks.manifest_path);
    return 0;
}

static int alloc_layers(struct xrt_dev *x, char *err, size_t errlen)
{
    int rc;
    for (int l = 0; l < x->n_layers; l++) {
        int *bo = &x->layer_bo[l * LB_N];
        size_t sizes[LB_N] = {x->ks.pool_bytes, x->ks.consts_bytes, x->ks.act_bytes};
        for (int i = 0; i < LB_N; i++)
            if ((rc = xrtb_bo(x->b, sizes[i], &bo[i], err, errlen)))
                return rc;
        if ((rc = eng_npu_pack(x->st, x->ks.pool_ops, x->ks.n_pool_ops, l,
                               xrtb_bo_map(x->b, bo[LB_POOL]), xrtb_bo_size(x->b, bo[LB_POOL]),
                               err, errlen)) ||
            (rc = eng_npu_pack(x->st, x->ks.consts_ops, x->ks.n_consts_ops, l,
                               xrtb_bo_map(x->b, bo[LB_CONSTS]),
                               xrtb_bo_size(x->b, bo[LB_CONSTS]), err, errlen)))
            return rc;
        for (int i = 0; i < LB_N; i++)
            if ((rc = sync_to(x, bo[i], err, errlen)))
                return rc;
    }
    return 0;
}

#ifdef MINICPMD_XRT_MODEL
#define XRT_WHAT "xrt: functional model, not an NPU (the real bridge on %s)"
#else
#define XRT_WHAT "xrt: NPU through %s"
#endif

static void describe(struct xrt_dev *x)
{
    snprintf(x->desc, sizeof x->desc,
             XRT_WHAT ", kernel set %.120s (%s, %d layers), %s, %d KV rows, host "
             "timeout %d ms", xrtb_version(), x->ks.dir, x->ks.family, x->ks.n_layers,
             x->single ? "one run per dispatch"
             : x->cfg.submit == ENG_XRT_SUBMIT_AUTO ? "layer runlists (single runs when every "
                                                      "K fails)"
                                                    : "layer runlists only", x->capacity,
             x->cfg.timeout_ms);
}

static void x_run_runlist(void *ctx, eng_device_seq *seq, const struct eng_runlist *rl,
                          const struct eng_batch *b, struct eng_run_result *out);

/* The CPU side of --npu-prefill cpu|auto (before the slots, which hold its copies). */
static int open_prefill(struct xrt_dev *x, const eng_pack *pack, char *err, size_t errlen)
{
    int rc = xpf_open(pack, &x->opts, x->cfg.prefill, x->capacity, &x->pf, err, errlen);
    if (rc)
        return rc;
    x->kv_scratch = malloc((size_t)x->ks.n_kv_heads * (size_t)x->ks.head_dim * 4);
    if (!x->kv_scratch)
        return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
    return 0;
}

/* For auto, the NPU's time per token: the faster of two single-token runs through
 * every layer and the tail, on slot 0. Then the log line. */
static int time_npu(struct xrt_dev *x, char *err, size_t errlen)
{
    int rc = 0;
    if (x->cfg.prefill == ENG_XRT_PREFILL_AUTO) {
        struct eng_cmd *cmds = malloc((size_t)(x->n_layers + 2) * sizeof *cmds);
        float *lg = malloc((size_t)x->n_vocab * sizeof *lg);
        if (!cmds || !lg) {
            free(cmds);
            free(lg);
            return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
        }
        cmds[0] = (struct eng_cmd){ENG_CMD_EMBED, -1};
        for (int l = 0; l < x->n_layers; l++)
            cmds[1 + l] = (struct eng_cmd){ENG_CMD_LAYER, l};
        cmds[x->n_layers + 1] = (struct eng_cmd){ENG_CMD_HEAD, -1};
        struct eng_runlist rl = {.cmds = cmds, .n_cmds = x->n_layers + 2, .layer_begin = 0,
                                 .layer_end = x->n_layers, .has_embed = true,
                                 .has_head = true};
        int32_t tok = 1;
        struct eng_batch b = {.tokens = &tok, .n_tokens = 1, .logits = lg,
                              .phase = ENG_PHASE_DECODE};
        struct eng_run_result res = {0};
        double best = 0;
        for (int i = 0; i < 2 && !rc; i++) {
            int64_t t0 = ut_now_us();
            x_run_runlist(x, &x->slots[0], &rl, &b, &res);
            double ms = (double)(ut_now_us() - t0) / 1000.0;
            best = i == 0 || ms < best ? ms : best;
            x->slots[0].len = 0;
            if (res.state != ENG_ERT_COMPLETED)
                rc = eng__fail(err, errlen, -EIO, "xrt device: timing a token: %s",
                               res.message);
        }
        free(cmds);
        free(lg);
        if (rc)
            return rc;
        xpf_rates(x->pf)->npu_ms_per_token = best;
    }
    if (x->opts.log) {
        char line[300];
        const struct xpf_rates *r = xpf_rates(x->pf);
        int n = snprintf(line, sizeof line, "xrt: prefill on the CPU (--npu-prefill %s): the "
                         "pack also mapped for the CPU, +%lld MB resident at load",
                         x->cfg.prefill == ENG_XRT_PREFILL_AUTO ? "auto" : "cpu",
                         xpf_rss_added(x->pf) >> 20);
        if (x->cfg.prefill == ENG_XRT_PREFILL_AUTO && n > 0 && (size_t)n < sizeof line)
            snprintf(line + n, sizeof line - (size_t)n, "; NPU %.1f ms/token, CPU %.1f ms + "
                     "%.2f ms/token", r->npu_ms_per_token, r->cpu_ms_fixed, r->cpu_ms_per_token);
        x->opts.log(x->opts.log_ctx, ENG_LOG_INFO, line);
    }
    return 0;
}

static int x_load_model(void *ctx, const eng_pack *pack, char *err, size_t errlen)
{
    struct xrt_dev *x = ctx;
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    char path[4200];
    int rc;
    if (x->loaded)
        return eng__fail(err, errlen, -EINVAL, "xrt device: a model is already loaded");

    /* 1. The kernel set, checked against the model, before the device. */
    if ((rc = eng_kset_locate(x->cfg.kernels_dir, pi->dir, x->kernels_dir, sizeof x->kernels_dir,
                              err, errlen)) ||
        (rc = eng_kset_load(x->kernels_dir, &x->ks, err, errlen)) ||
        (rc = eng_kset_check_model(&x->ks, pack, err, errlen)) ||
        (rc = eng_kset_check_files(&x->ks, err, errlen)))
        return rc;
    x->n_layers = pi->hp.n_layers;
    x->hidden = pi->hp.n_embd;
    x->n_vocab = pi->hp.n_vocab;
    x->capacity = x->cfg.ctx_size > 0 ? x->cfg.ctx_size
                  : pi->hp.n_ctx_train < x->ks.max_ctx_default ? pi->hp.n_ctx_train
                                                               : x->ks.max_ctx_default;
    snprintf(path, sizeof path, "%s/model.q4nx", pi->dir);
    if ((rc = eng_st_open(path, &x->st, err, errlen)))
        return rc;

    size_t nk = (size_t)x->ks.n_kernels, nc = (size_t)x->ks.n_contexts;
    x->ctx_of = malloc(nc * sizeof *x->ctx_of);
    x->kern_of = malloc(nk * sizeof *x->kern_of);
    x->patch = calloc(nk, sizeof *x->patch);
    x->glob_bo = malloc((size_t)x->ks.n_globals * sizeof *x->glob_bo + 1);
    x->layer_bo = malloc((size_t)x->n_layers * LB_N * sizeof *x->layer_bo);
    if (!x->ctx_of || !x->kern_of || !x->patch || !x->glob_bo || !x->layer_bo)
        return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
    for (size_t i = 0; i < nc; i++)
        x->ctx_of[i] = -1;
    for (size_t i = 0; i < nk; i++)
        x->kern_of[i] = -1;

    /* 2. The device. */
    if (x->cfg.no_runlist)
        x->cfg.submit = ENG_XRT_SUBMIT_RUN;
    x->single = x->cfg.submit == ENG_XRT_SUBMIT_RUN;
    struct xrtb_opts bo = {.device_index = 0, .no_runlist = x->single};
    char e2[300];
    if ((rc = xrtb_open(&bo, &x->b, e2, sizeof e2)))
        return eng__fail(err, errlen, rc, "xrt device: cannot open the NPU: %s", e2);
    if ((rc = load_kernel(x, x->ks.layer_step.kernel, err, errlen)))
        return rc;
    for (int i = 0; i < x->ks.n_tail; i++)
        if ((rc = load_kernel(x, x->ks.tail[i].kernel, err, errlen)))
            return rc;
    if ((rc = alloc_globals(x, err, errlen)) || (rc = alloc_layers(x, err, errlen)))
        return rc;
    for (int i = 0; i < x->ks.n_tail; i++)
        if ((rc = make_run(x, &x->ks.tail[i], -1, -1, &x->tail_run[i], err, errlen)))
            return rc;
    x->xres_keep = malloc((size_t)ENG_MAX_BATCH * (size_t)x->hidden * sizeof *x->xres_keep);
    if (!x->xres_keep)
        return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
    if ((x->cfg.prefill != ENG_XRT_PREFILL_NPU && (rc = open_prefill(x, pack, err, errlen))) ||
        (rc = xs_alloc_slots(x, err, errlen)))
        return rc;
    x->loaded = true;
    if (x->pf && (rc = time_npu(x, err, errlen)))
        return rc;
    describe(x);
    return 0;
}

/* ---- running -------------------------------------------------------------------- */

static bool cancelled(const void *arg)
{
    return atomic_load((const atomic_bool *)arg);
}

static void fail(struct xrt_dev *x, struct eng_run_result *out, int state, int cmd,
                 const char *msg)
{
    out->state = (enum eng_ert_state)state;
    out->failed_cmd = cmd;
    snprintf(out->message, sizeof out->message, "%.159s", msg);
    x->needs_reset = true;
    x->last_failure = out->state;
}

static void fail_status(struct xrt_dev *x, struct eng_run_result *out, const struct xrtb_status *st,
                        int cmd)
{
    char msg[sizeof out->message];
    if (st->has_health)
        snprintf(msg, sizeof msg, "%.110s; txn_op_idx=0x%x ctx_pc=0x%x", st->message,
                 st->txn_op_idx, st->ctx_pc);
    else
        snprintf(msg, sizeof msg, "%s", st->message);
    fail(x, out, st->state, cmd, msg);
}

/* Once per token, before its first layer: the attnpos words for position pos. */
static int patch_position(struct xrt_dev *x, int pos, char *err, size_t errlen)
{
    for (int k = 0; k < x->ks.n_kernels; k++) {
        const struct eng_kset_kernel *kk = &x->ks.kernels[k];
        if (!kk->attnpos || x->kern_of[k] < 0)
            continue;
        size_t n;
        uint32_t *w = xrtb_kernel_insts(x->b, x->kern_of[k], &n);
        if (!w)
            return eng__fail(err, errlen, -EIO, "cannot map the instruction BO of %s", kk->name);
        eng_npu_attn_apply(w, x->patch[k], (uint64_t)pos, x->ks.kv_row, x->ks.ptab_row,
                           kk->window, kk->rb);
        int rc = xrtb_kernel_sync(x->b, x->kern_of[k], err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* Position pos's residual: into xres for its next runlist (its embedding at EMBED,
 * else the one kept after its last runlist), with the attnpos words for pos. */
static int enter(struct xrt_dev *x, const struct eng_runlist *rl, const struct eng_batch *b,
                 int t, int pos, char *err, size_t errlen)
{
    float *xr = xrtb_bo_map(x->b, x->glob_bo[x->xres]);
    int rc = patch_position(x, pos, err, errlen);
    if (rc)
        return rc;
    if (rl->has_embed)
        rc = eng_npu_embed_row(x->st, x->ks.embed_tensor, b->tokens[t], x->hidden, xr, err,
                               errlen);
    else
        memcpy(xr, x->xres_keep + (size_t)t * x->hidden, (size_t)x->hidden * 4);
    return rc ? rc : xrtb_bo_sync(x->b, x->glob_bo[x->xres], true, (size_t)x->hidden * 4, 0,
                                  err, errlen);
}

/* Position t of a batch of several: its residual back to the host for the next
 * runlist. */
static int keep(struct xrt_dev *x, int t, char *err, size_t errlen)
{
    int bo = x->glob_bo[x->xres];
    int rc = xrtb_bo_sync(x->b, bo, false, (size_t)x->hidden * 4, 0, err, errlen);
    if (!rc)
        memcpy(x->xres_keep + (size_t)t * x->hidden, xrtb_bo_map(x->b, bo),
               (size_t)x->hidden * 4);
    return rc;
}

static void x_run_runlist(void *ctx, eng_device_seq *s, const struct eng_runlist *rl,
                          const struct eng_batch *b, struct eng_run_result *out)
{
    struct xrt_dev *x = ctx;
    char e2[200];
    if (x->needs_reset) {
        char m[96];
        snprintf(m, sizeof m, "device needs reset (a runlist ended in %s)",
                 eng_ert_name(x->last_failure));
        fail(x, out, ENG_ERT_ERROR, 0, m);
        return;
    }
    if (rl->has_embed && s->len + b->n_tokens <= x->capacity)
        memcpy(s->ids + s->len, b->tokens, (size_t)b->n_tokens * sizeof *s->ids);
    if (x->pf && xpf_takes(x->pf, x->cfg.prefill, b, x->opts.log, x->opts.log_ctx)) {
        struct eng_kv_src rows = xs_rows(s);
        int held = rl->has_embed ? xpf_agree(s->cpu, s->ids, s->len) : s->len;
        if (held < s->len && xs_sync_back(s, held, e2, sizeof e2)) {
            fail(x, out, ENG_ERT_ERROR, 0, e2);
            return;
        }
        xpf_run(s->cpu, &x->dev, s, s->len, &rows, rl, b, out);
        return;
    }
    int n = b->n_tokens;
    if (n > ENG_MAX_BATCH || b->n_logits > 1) {
        fail(x, out, ENG_ERT_ERROR, 0, "the xrt device computes the logits of a batch's last "
             "position only");
        return;
    }
    if (s->len + n > x->capacity) {
        fail(x, out, ENG_ERT_ERROR, 0, "the sequence fills the NPU's KV buffers");
        return;
    }
    int cmd0 = rl->has_embed ? 1 : 0, nl = rl->layer_end - rl->layer_begin;
    bool single = x->single || eng__xrt_forced_single();
    for (int t = 0; t < n; t++) {
        /* one position: its residual stays in xres from runlist to runlist */
        if ((rl->has_embed || n > 1) && enter(x, rl, b, t, s->len + t, e2, sizeof e2)) {
            fail(x, out, ENG_ERT_ERROR, 0, e2);
            return;
        }
        if (nl > 0) {
            struct xrtb_status st;
            xrtb_set_runlist(x->b, !single);
            xrtb_submit(x->b, &s->run[rl->layer_begin], nl, x->cfg.timeout_ms,
                        b->cancel ? cancelled : NULL, (const void *)b->cancel, &st);
            if (st.state != ENG_ERT_COMPLETED) {
                /* AUTO's ladder: the planner halves K after each failure; when even a
                 * runlist of one layer fails, runlists themselves are the problem. */
                if (nl == 1 && !single && x->cfg.submit == ENG_XRT_SUBMIT_AUTO)
                    x->to_single = true;
                fail_status(x, out, &st, cmd0 + (st.failed >= 0 ? st.failed : 0));
                return;
            }
        }
        if (n > 1 && !rl->has_head && keep(x, t, e2, sizeof e2)) {
            fail(x, out, ENG_ERT_ERROR, cmd0, e2);
            return;
        }
    }
    if (rl->has_head) {
        int head = rl->n_cmds - 1;
        if (b->logits) {   /* the batch's last position is in xres */
            struct xrtb_status st;
            xrtb_submit(x->b, x->tail_run, x->ks.n_tail, x->cfg.timeout_ms,
                        b->cancel ? cancelled : NULL, (const void *)b->cancel, &st);
            if (st.state != ENG_ERT_COMPLETED) {
                fail_status(x, out, &st, head);
                return;
            }
            int lg = x->glob_bo[x->logits];
            if (xrtb_bo_sync(x->b, lg, false, (size_t)x->n_vocab * 4, 0, e2, sizeof e2)) {
                fail(x, out, ENG_ERT_ERROR, head, e2);
                return;
            }
            memcpy(b->logits, xrtb_bo_map(x->b, lg), (size_t)x->n_vocab * 4);
        }
        s->len += n;
    }
    out->state = ENG_ERT_COMPLETED;
}

static int x_reset(void *ctx, char *err, size_t errlen)
{
    struct xrt_dev *x = ctx;
    if (!x->b) {
        x->needs_reset = false;
        return 0;
    }
    int wait = x->cfg.timeout_ms > 2000 ? x->cfg.timeout_ms : 2000;
    char e2[200] = "";
    int rc = xrtb_reset(x->b, wait, e2, sizeof e2);
    if (rc)
        return eng__fail(err, errlen, rc, "xrt device: reset failed: %s", e2);
    x->needs_reset = false;
    xs_lost_all(x);     /* the device-side KV is lost */
    if (x->to_single && !x->single) {
        x->single = true;
        x->changed = true;
        describe(x);
    }
    x->to_single = false;
    return 0;
}

static bool x_reset_changed_mode(void *ctx)
{
    struct xrt_dev *x = ctx;
    bool c = x->changed;
    x->changed = false;
    return c;
}

static void x_close(void *ctx)
{
    struct xrt_dev *x = ctx;
    xs_free_slots(x);
    xpf_free(x->pf);
    free(x->kv_scratch);
    free(x->xres_keep);
    xrtb_close(x->b);
    eng_st_free(x->st);
    eng_kset_free(&x->ks);
    free(x->ctx_of);
    free(x->kern_of);
    free(x->patch);
    free(x->glob_bo);
    free(x->layer_bo);
    free((char *)x->cfg.kernels_dir);
    free((char *)x->cfg.accel_node);
    free(x);
}

static const struct eng_device_i xrt_iface = {
    .get_name = x_get_name,
    .get_description = x_get_description,
    .default_k = x_default_k,
    .max_batch = x_max_batch,
    .load_model = x_load_model,
    .max_seqs = xs_max_seqs,
    .seq_begin = xs_seq_begin,
    .seq_end = xs_seq_end,
    .seq_truncate = xs_seq_truncate,
    .seq_write_kv = xs_seq_write_kv,
    .prefill_start = xs_prefill_start,
    .prefill_finish = xs_prefill_finish,
    .run_runlist = x_run_runlist,
    .reset = x_reset,
    .reset_changed_mode = x_reset_changed_mode,
    .close = x_close,
};

int eng__device_xrt_open(const struct eng_device_opts *o, struct eng_device **out, char *err,
                         size_t errlen)
{
    const struct eng_xrt_config *c = eng__xrt_config();
#ifdef MINICPMD_XRT_MODEL
    /* XRT_MODEL_FAULT (tests of the whole daemon on the model):
     * "runlists" makes every runlist time out; hang@N, abort@N, new@N make the run
     * executed as number N (from 0, since the device opened) hang (TIMEOUT), abort,
     * or leave the next wait in NEW; perm, attnpos, cossin, kvrow write one thing
     * wrong (model.h). */
    xrtdbl_set_model(true);
    /* XRT_MODEL_RUN_US: each run also takes this long, the host waiting (sleeping)
     * as for a real NPU: what the CPU can do beside it shows in wall time. */
    const char *ru = getenv("XRT_MODEL_RUN_US");
    xrtdbl_set_run_us(ru ? atoi(ru) : 0);
    const char *mf = getenv("XRT_MODEL_FAULT");
    int at = -1;
    if (mf && strcmp(mf, "runlists") == 0)
        xrtdbl_set_runlists_fail(true);
    else if (mf && sscanf(mf, "hang@%d", &at) == 1)
        xrtdbl_set_hang_at(at);
    else if (mf && sscanf(mf, "abort@%d", &at) == 1)
        xrtdbl_set_abort_at(at);
    else if (mf && sscanf(mf, "new@%d", &at) == 1)
        xrtdbl_set_new_after(at);
    else if (mf && *mf) {
        int f = xmodel_fault_parse(mf);
        if (f < 0)
            return eng__fail(err, errlen, -EINVAL, "XRT_MODEL_FAULT=%s: not one of "
                             "runlists, hang@N, abort@N, new@N, perm, attnpos, cossin, "
                             "kvrow", mf);
        xmodel_set_fault((enum xm_fault)f);
    }
    if (0)
#endif
    if (access(c->accel_node, F_OK) != 0)
        return eng__fail(err, errlen, -ENODEV,
                         "no NPU: %s does not exist (is the amdxdna driver loaded?)",
                         c->accel_node);
    struct xrt_dev *x = calloc(1, sizeof *x);
    if (!x)
        return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
    x->dev = (struct eng_device){.iface = &xrt_iface, .context = x};
    x->cfg = *c;
    if (o) {
        x->opts = *o;
        x->opts.faults = NULL;
    }
    x->cfg.kernels_dir = c->kernels_dir ? strdup(c->kernels_dir) : NULL;
    x->cfg.accel_node = strdup(c->accel_node);
    if ((c->kernels_dir && !x->cfg.kernels_dir) || !x->cfg.accel_node) {
        x_close(x);
        return eng__fail(err, errlen, -ENOMEM, "xrt device: out of memory");
    }
    x->tail_run[0] = x->tail_run[1] = -1;
    snprintf(x->desc, sizeof x->desc, XRT_WHAT " (no model loaded)", xrtb_version());
    *out = &x->dev;
    return 0;
}
