/* minicpmd: an OpenAI-compatible inference daemon for MiniCPM5.
 *
 * main() reads the configuration, finds the model, and either checks it
 * (--check) or hands over to the daemon. Exit codes: 0 success, 1 runtime
 * failure (cannot listen, model does not load), 2 invalid configuration.
 */
#include "config/config.h"
#include "engine/engine.h"
#include "engine/device/xrt/xrt.h"
#include "minicpmd-build.h"
#include "server/daemon.h"
#include "server/log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* Config warnings arrive before logging is set up; keep them until it is. */
struct warnings {
    char *msg[32];
    int n, dropped;
};

static void keep_warning(void *ud, const char *msg)
{
    struct warnings *w = ud;
    if (w->n < (int)(sizeof w->msg / sizeof *w->msg) && (w->msg[w->n] = strdup(msg)))
        w->n++;
    else
        w->dropped++;
}

static void flush_warnings(struct warnings *w)
{
    for (int i = 0; i < w->n; i++) {
        log_warn("%s", w->msg[i]);
        free(w->msg[i]);
    }
    if (w->dropped)
        log_warn("%d more configuration warning(s) not shown", w->dropped);
    w->n = w->dropped = 0;
}

/* The demo pack the build generates (minicpmd-pack gen --preset demo): next to
 * the binary in a build tree (build/demo-pack), else where `meson install` puts it.
 * discover.c uses it only if the directory exists. */
static const char *embedded_pack_dir(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n > 0) {
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        if (slash && (size_t)(slash - buf) + sizeof "/demo-pack" <= len) {
            strcpy(slash, "/demo-pack");
            struct stat st;
            if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode))
                return buf;
        }
    }
    snprintf(buf, len, "%s/minicpmd/demo-pack", MINICPMD_DATADIR);
    return buf;
}

static void ignore_event(void *ctx, const struct eng_event *ev)
{
    (void)ctx;
    (void)ev;
}

/* --check: everything the daemon would do before serving, then exit. */
static int run_check(const struct cfg *cfg, const struct cfg_model_location *loc)
{
    if (loc->source == CFG_MODEL_NONE) {
        fprintf(stderr, "minicpmd: check failed: no model configured or found (use --model)\n");
        return 1;
    }
    char err[512];
    struct srv_model m;
    if (srv_model_load(loc->path, cfg, ignore_event, NULL, &m, err, sizeof err) != 0) {
        fprintf(stderr, "minicpmd: check failed: model %s: %s\n", loc->id, err);
        return 1;
    }
    if (m.warning[0])
        log_warn("%s", m.warning);
    const struct eng_pack_info *info = eng_pack_get_info(m.pack);
    printf("minicpmd: ok: model %s (%s, %s) at %s: %s, %d layers, vocab %d; would listen on "
           "%s:%d, device %s\n",
           loc->id, cfg_model_source_name(loc->source), info->model_type, loc->path,
           eng_weights_format_name(info->format), info->hp.n_layers, info->hp.n_vocab,
           cfg->host, cfg->port, eng_device_get_description(m.dev));
    srv_model_free(&m);
    return 0;
}

int main(int argc, char **argv)
{
    struct cfg cfg = {0};
    struct cfg_model_location loc = {0};
    struct warnings warns = {0};
    char err[1024];
    int rc = 2;

    /* Writes to vanished clients must fail with EPIPE, not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);

    switch (cfg_load(&cfg, argc, argv, environ, keep_warning, &warns, err, sizeof err)) {
    case CFG_RESULT_HELP:
        cfg_print_usage(stdout, argv[0]);
        rc = 0;
        goto out;
    case CFG_RESULT_VERSION:
        printf("minicpmd %s (xrt device: %s)\n", MINICPMD_VERSION,
               MINICPMD_HAVE_XRT ? "built" : "not built");
        rc = 0;
        goto out;
    case CFG_RESULT_ERROR:
        fprintf(stderr, "minicpmd: %s\n", err);
        rc = 2;
        goto out;
    case CFG_RESULT_RUN:
        break;
    }

    int lrc = srv_log_init(cfg.log_level, cfg.log_format, cfg.log_file);
    if (lrc < 0) {
        fprintf(stderr, "minicpmd: --log-file '%s': %s\n", cfg.log_file, strerror(-lrc));
        rc = 2;
        goto out;
    }
    flush_warnings(&warns);
    char demo[4096];
    if (cfg_model_resolve(&cfg, environ, embedded_pack_dir(demo, sizeof demo), &loc, err,
                          sizeof err) != 0) {
        fprintf(stderr, "minicpmd: %s\n", err);
        rc = 2;
        goto out;
    }
    if (loc.warning)
        log_warn("%s", loc.warning);
    /* The NPU: --npu-probe, and the device choice, settled before listening so that
     * an unusable `--device xrt` exits 2 with one line (engine/device/xrt/xrt.h). */
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = cfg.npu_kernels,
                                               .ctx_size = cfg.ctx_size});
    if (cfg.npu_probe) {
        rc = eng_xrt_probe_main(loc.source != CFG_MODEL_NONE ? loc.path : NULL, cfg.state_dir,
                                stdout, stderr);
        goto out;
    }
    if (cfg.device == CFG_DEVICE_XRT && loc.source != CFG_MODEL_NONE &&
        eng_xrt_preflight(loc.path, err, sizeof err) != 0) {
        fprintf(stderr, "minicpmd: --device xrt: %s\n", err);
        rc = 2;
        goto out;
    }
    /* auto: the NPU only when the bridge is built, the node exists and a kernel set
     * matches the model; otherwise the CPU. */
    if (cfg.device == CFG_DEVICE_AUTO && loc.source != CFG_MODEL_NONE) {
        if (eng_xrt_built() && eng_xrt_node_present() &&
            eng_xrt_preflight(loc.path, err, sizeof err) == 0)
            cfg.device = CFG_DEVICE_XRT;
        else if (eng_xrt_built() && eng_xrt_node_present())
            log_info("device auto: not the NPU: %s", err);
    }
    rc = cfg.check ? run_check(&cfg, &loc) : srv_daemon_run(&cfg, &loc);
out:
    flush_warnings(&warns);
    cfg_model_location_free(&loc);
    cfg_free(&cfg);
    srv_log_close();
    return rc;
}
