/* The parts of the xrt device that exist in every build: its settings, the early
 * `--device xrt` check, and --npu-probe (which runs on any device; main() gives it
 * the xrt one). */
#include "engine/err.h"
#include "engine/worker/plan.h"
#include "engine/device/xrt/kset.h"
#include "engine/device/xrt/xrt-impl.h"
#include "minicpmd-build.h"
#include "util/clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct eng_xrt_config config;
static char config_kernels[4096], config_node[256];

void eng_xrt_configure(const struct eng_xrt_config *c)
{
    config = c ? *c : (struct eng_xrt_config){0};
    config.kernels_dir = NULL;
    if (c && c->kernels_dir && *c->kernels_dir) {
        snprintf(config_kernels, sizeof config_kernels, "%s", c->kernels_dir);
        config.kernels_dir = config_kernels;
    }
    snprintf(config_node, sizeof config_node, "%s",
             c && c->accel_node ? c->accel_node : ENG_XRT_ACCEL_NODE);
    config.accel_node = config_node;
}

const struct eng_xrt_config *eng__xrt_config(void)
{
    if (!config.accel_node) {
        snprintf(config_node, sizeof config_node, "%s", ENG_XRT_ACCEL_NODE);
        config.accel_node = config_node;
    }
    if (config.timeout_ms <= 0)
        config.timeout_ms = ENG_XRT_DEFAULT_TIMEOUT_MS;
    return &config;
}

static bool force_single;

void eng__xrt_force_single(bool on)
{
    force_single = on;
}

bool eng__xrt_forced_single(void)
{
    return force_single;
}

bool eng_xrt_built(void)
{
    return MINICPMD_HAVE_XRT;
}

bool eng_xrt_node_present(void)
{
    /* The functional model is never an NPU `--device auto` should pick. */
    if (MINICPMD_XRT_MODEL)
        return false;
    return access(eng__xrt_config()->accel_node, F_OK) == 0;
}

const char *eng_xrt_build_info(void)
{
    if (MINICPMD_XRT_MODEL)
        return "built against the functional model of the kernel set (-Dxrt_model=true): "
               "a functional model, not an NPU";
    return MINICPMD_HAVE_XRT ? "built against XRT >= 2.18"
                             : "not built: XRT >= 2.18 was not found at build time (Debian "
                               "12's XRT 2.13 has no hw_context or runlist)";
}

int eng_xrt_preflight(const char *pack_dir, char *err, size_t errlen)
{
    const struct eng_xrt_config *c = eng__xrt_config();
    char dir[4096], e2[600];
    struct eng_kset ks = {0};
    eng_pack *pack = NULL;
    int rc;
    if ((rc = eng_kset_locate(c->kernels_dir, pack_dir, dir, sizeof dir, e2, sizeof e2)))
        goto out;
    if ((rc = eng_pack_open(pack_dir, &pack, e2, sizeof e2)))
        goto out;
    if ((rc = eng_kset_load(dir, &ks, e2, sizeof e2)) ||
        (rc = eng_kset_check_model(&ks, pack, e2, sizeof e2)) ||
        (rc = eng_kset_check_files(&ks, e2, sizeof e2)))
        goto out;
    int n_ctx = eng_pack_get_info(pack)->hp.n_ctx_train;
    if (c->ctx_size <= 0 && n_ctx > ks.max_ctx_default) {
        double gib = (double)n_ctx * (double)ks.state_row * ks.n_layers / (1u << 30);
        rc = eng__fail(e2, sizeof e2, -EINVAL,
                       "the model's context of %d positions would need %.1f GiB of NPU KV "
                       "buffers; pass --ctx-size %d (the kernel set's default) or another size",
                       n_ctx, gib, ks.max_ctx_default);
        goto out;
    }
    if (!eng_xrt_built()) {
        rc = eng__fail(e2, sizeof e2, -ENOTSUP, "this build has no XRT device (%s); use auto, "
                       "cpu or sim", eng_xrt_build_info());
        goto out;
    }
    if (!MINICPMD_XRT_MODEL && access(c->accel_node, F_OK) != 0) {
        rc = eng__fail(e2, sizeof e2, -ENODEV,
                       "no NPU: %s does not exist (is the amdxdna driver loaded?)",
                       c->accel_node);
        goto out;
    }
    rc = 0;
out:
    if (rc)
        snprintf(err, errlen, "%s", e2);
    eng_kset_free(&ks);
    eng_pack_free(pack);
    return rc;
}

/* ---- --npu-probe -------------------------------------------------------------- */

struct probe_row {
    int k;                      /* ENG_PLAN_ALL or >= 1 */
    bool single;                /* one xrt::run per dispatch instead of runlists */
    int k_eff, runlists;
    int steps_ok;
    enum eng_ert_state state;   /* COMPLETED or the first failure */
    char message[160];
    int failed_runlist, failed_layer;
    double token_ms_min, token_ms_mean, runlist_ms_max, layer_ms;
};

/* The K ladder, then (on the xrt device) single runs: one xrt::run per dispatch,
 * started and waited, the mode OpenFlowLM-Next decodes in (K is 1 there). */
static const int probe_ks[] = {ENG_PLAN_ALL, 24, 21, 16, 8, 4, 2, 1, 1};
#define N_PROBE ((int)(sizeof probe_ks / sizeof *probe_ks))

int eng_xrt_probe_run(struct eng_device *dev, const char *pack_dir, const char *state_dir,
                      int steps, FILE *out, char *err, size_t errlen)
{
    eng_pack *pack = NULL;
    eng_device_seq *seq = NULL;
    float *logits = NULL;
    struct probe_row rows[N_PROBE];
    int rc, best = -1;
    memset(rows, 0, sizeof rows);
    if (steps < 1)
        steps = 8;
    if ((rc = eng_pack_open(pack_dir, &pack, err, errlen)))
        return 1;
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    int n_layers = pi->hp.n_layers;
    if ((rc = eng_device_load_model(dev, pack, err, errlen)) ||
        (rc = eng_device_seq_begin(dev, steps + 1, &seq, err, errlen))) {
        rc = 1;
        goto out;
    }
    if (!(logits = malloc((size_t)pi->hp.n_vocab * sizeof *logits))) {
        snprintf(err, errlen, "out of memory");
        rc = 1;
        goto out;
    }
    bool is_xrt = strcmp(eng_device_get_name(dev), "xrt") == 0;
    for (int r = 0; r < N_PROBE; r++) {
        struct probe_row *row = &rows[r];
        struct eng_plan plan;
        char e2[200];
        bool single = r == N_PROBE - 1;
        if (single && !is_xrt)
            continue;
        *row = (struct probe_row){.k = probe_ks[r], .single = single,
                                  .state = ENG_ERT_COMPLETED, .failed_runlist = -1,
                                  .failed_layer = -1};
        eng__xrt_force_single(single);
        if (eng_plan_init(&plan, n_layers, probe_ks[r], e2, sizeof e2) != 0) {
            row->state = ENG_ERT_ERROR;
            snprintf(row->message, sizeof row->message, "%.150s", e2);
            continue;
        }
        row->k_eff = plan.k;
        row->runlists = plan.n_runlists;
        eng_device_seq_truncate(dev, seq, 0);
        double sum = 0, layer_sum = 0;
        int layer_runs = 0;
        for (int s = 0; s < steps && row->state == ENG_ERT_COMPLETED; s++) {
            int32_t tok = (int32_t)(1 + s % (pi->hp.n_vocab - 1));
            struct eng_batch b = {.tokens = &tok, .n_tokens = 1, .logits = logits,
                                  .phase = ENG_PHASE_DECODE, .token_index = s};
            double t0 = ut_now_s() * 1e3;
            for (int i = 0; i < plan.n_runlists; i++) {
                struct eng_run_result res;
                const struct eng_runlist *rl = &plan.runlists[i];
                if (eng_device_run_runlist(dev, seq, rl, &b, &res) != 0) {
                    row->state = res.state;
                    row->failed_runlist = i;
                    row->failed_layer = res.failed_layer;
                    snprintf(row->message, sizeof row->message, "%s", res.message);
                    break;
                }
                double ms = (double)res.elapsed_us / 1e3;
                if (ms > row->runlist_ms_max)
                    row->runlist_ms_max = ms;
                if (rl->layer_end > rl->layer_begin) {
                    layer_sum += ms;
                    layer_runs += rl->layer_end - rl->layer_begin;
                }
            }
            if (row->state != ENG_ERT_COMPLETED)
                break;
            double t = ut_now_s() * 1e3 - t0;
            sum += t;
            if (!row->steps_ok || t < row->token_ms_min)
                row->token_ms_min = t;
            row->steps_ok++;
        }
        eng_plan_deinit(&plan);
        eng__xrt_force_single(false);
        if (row->steps_ok) {
            row->token_ms_mean = sum / row->steps_ok;
            row->layer_ms = layer_runs ? layer_sum / layer_runs : 0;
        }
        if (row->state != ENG_ERT_COMPLETED) {
            char e3[200];
            if (eng_device_reset(dev, e3, sizeof e3) != 0) {
                snprintf(err, errlen, "device did not recover after K=%d: %s", row->k_eff, e3);
                rc = 1;
                goto report;
            }
            eng_device_seq_truncate(dev, seq, 0);
        } else if (best < 0 || row->token_ms_mean < rows[best].token_ms_mean) {
            best = r;
        }
    }
    rc = best >= 0 ? 0 : 1;

report:
    fprintf(out, "### minicpmd --npu-probe\n\n");
    fprintf(out, "- minicpmd %s, device: %s\n", MINICPMD_VERSION, eng_device_get_description(dev));
    fprintf(out, "- model: %s (%s, %d layers, hidden %d, %d heads / %d kv heads)\n", pi->dir,
            pi->model_type, n_layers, pi->hp.n_embd, pi->hp.n_heads, pi->hp.n_kv_heads);
    fprintf(out, "- decode steps per K: %d (one token each, from position 0)\n\n", steps);
    fprintf(out, "| K | runlists/token | outcome | tokens ok | token ms (min / mean) | "
                 "slowest runlist ms | ms per layer |\n");
    fprintf(out, "|---|---|---|---|---|---|---|\n");
    for (int r = 0; r < N_PROBE; r++) {
        const struct probe_row *row = &rows[r];
        if (row->k == 0)
            continue;
        char k[16], outcome[220];
        if (row->single)
            snprintf(k, sizeof k, "run");
        else if (row->k == ENG_PLAN_ALL)
            snprintf(k, sizeof k, "all (%d)", row->k_eff);
        else
            snprintf(k, sizeof k, "%d", row->k);
        if (row->state == ENG_ERT_COMPLETED)
            snprintf(outcome, sizeof outcome, "COMPLETED");
        else
            snprintf(outcome, sizeof outcome, "%s at runlist %d (layer %d): %.150s",
                     eng_ert_name(row->state), row->failed_runlist, row->failed_layer,
                     row->message);
        fprintf(out, "| %s | %d | %s | %d/%d | %.2f / %.2f | %.2f | %.3f |\n", k, row->runlists,
                outcome, row->steps_ok, steps, row->token_ms_min, row->token_ms_mean,
                row->runlist_ms_max, row->layer_ms);
    }
    fprintf(out, "\nK is layers per runlist; \"run\" is one xrt::run per dispatch, started "
                 "and waited (--npu-submit run)\n");
    if (best >= 0) {
        if (rows[best].single)
            fprintf(out, "\nfastest: single runs, one per dispatch (%.2f ms per token, %.1f "
                         "tokens/s): use --npu-submit run\n", rows[best].token_ms_mean,
                    1e3 / rows[best].token_ms_mean);
        else
            fprintf(out, "\nfastest K that completed every step: %d (%.2f ms per token, %.1f "
                         "tokens/s)\n", rows[best].k_eff, rows[best].token_ms_mean,
                    1e3 / rows[best].token_ms_mean);
        if (state_dir && *state_dir) {
            char path[4200], e4[300];
            if (eng_kstate_path(state_dir, path, sizeof path) == 0) {
                int s = eng_kstate_save(path, pi->dir, eng_device_get_name(dev), rows[best].k_eff,
                                        n_layers, e4, sizeof e4);
                if (s < 0)
                    fprintf(out, "could not save K: %s\n", e4);
                else
                    fprintf(out, "saved K = %d for --runlist-layers auto in %s\n",
                            rows[best].k_eff, path);
            }
        }
    } else {
        fprintf(out, "\nno K completed every step: the NPU cannot run this kernel set here\n");
    }
out:
    free(logits);
    if (seq)
        eng_device_seq_end(dev, seq);
    eng_pack_free(pack);
    return rc;
}

int eng_xrt_probe_main(const char *pack_dir, const char *state_dir, FILE *out, FILE *errout)
{
    char err[700];
    if (!eng_xrt_built()) {
        fprintf(errout, "minicpmd: --npu-probe: no NPU: this build has no XRT device (%s)\n",
                eng_xrt_build_info());
        return 1;
    }
    const struct eng_xrt_config *c = eng__xrt_config();
    if (!MINICPMD_XRT_MODEL && access(c->accel_node, F_OK) != 0) {
        fprintf(errout, "minicpmd: --npu-probe: no NPU: %s does not exist (is the amdxdna "
                        "driver loaded?)\n", c->accel_node);
        return 1;
    }
    if (!pack_dir) {
        fprintf(errout, "minicpmd: --npu-probe: no model configured or found (use --model)\n");
        return 1;
    }
    if (eng_xrt_preflight(pack_dir, err, sizeof err) != 0) {
        fprintf(errout, "minicpmd: --npu-probe: %s\n", err);
        return 1;
    }
#if MINICPMD_HAVE_XRT
    struct eng_device *dev = NULL;
    if (eng_device_open("xrt", NULL, &dev, err, sizeof err) != 0) {
        fprintf(errout, "minicpmd: --npu-probe: %s\n", err);
        return 1;
    }
    err[0] = '\0';
    int rc = eng_xrt_probe_run(dev, pack_dir, state_dir, 8, out, err, sizeof err);
    if (rc && err[0])
        fprintf(errout, "minicpmd: --npu-probe: %s\n", err);
    eng_device_free(dev);
    return rc;
#else
    return 1;
#endif
}
