/* minicpmd: an OpenAI-compatible inference daemon for MiniCPM5.
 *
 * main() reads the configuration, finds the model, and either checks it
 * (--check) or hands over to the daemon. Exit codes: 0 success, 1 runtime
 * failure (cannot listen, model does not load), 2 invalid configuration.
 */
#include "config/config.h"
#include "engine/engine.h"
#include "engine/xrt.h"
#include "minicpmd-build.h"
#include "server/daemon.h"
#include "server/log.h"

#include <malloc.h>
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
static int run_check(const struct cfg *cfg, const struct cfg_model_location *loc,
                     const char *device)
{
    if (loc->source == CFG_MODEL_NONE) {
        srv_say(stderr, "minicpmd: check failed: no model configured or found (use --model)");
        return 1;
    }
    char err[512];
    struct eng_engine_opts o;
    eng_engine *eng;
    srv_engine_opts(cfg, device, &o);
    o.weights = ENG_WEIGHTS_PLACE_MMAP; /* nothing is computed: --weights copy would only
                                           copy 1.3 GB of the 2b pack to free it again */
    if (eng_engine_open(loc->path, &o, ignore_event, NULL, &eng, err, sizeof err) != 0) {
        srv_say(stderr, "minicpmd: check failed: model %s: %s", loc->id, err);
        return 1;
    }
    const struct eng_pack_info *info = eng_pack_get_info(eng_engine_pack(eng));
    srv_say(stdout, "minicpmd: ok: model %s (%s, %s) at %s: %s, %d layers, vocab %d; would "
           "listen on %s:%d, device %s",
           loc->id, cfg_model_source_name(loc->source), info->model_type, loc->path,
           eng_weights_format_name(info->format), info->hp.n_layers, info->hp.n_vocab,
           cfg->host, cfg->port, eng_engine_device_description(eng));
    eng_engine_free(eng);
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
    /* Blocks of 1 MiB and more (request bodies, big answers) are mmapped and go back
     * to the system when freed. A fixed threshold also stops glibc from raising it
     * after the first big free, which kept a /tokenize burst's gigabytes resident
     * at idle. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    /* SIGUSR1/SIGUSR2 must not kill the daemon (their default action): the loop
     * makes SIGUSR1 reopen the log (server/daemon.c); SIGUSR2 means nothing here. */
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);

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
        srv_say(stderr, "minicpmd: %s", err);
        rc = 2;
        goto out;
    case CFG_RESULT_RUN:
        break;
    }

    int lrc = srv_log_init(cfg.log_level, cfg.log_format, cfg.log_file);
    if (lrc < 0) {
        srv_say(stderr, "minicpmd: --log-file '%s': %s", cfg.log_file, strerror(-lrc));
        rc = 2;
        goto out;
    }
    flush_warnings(&warns);
    char demo[4096];
    if (cfg_model_resolve(&cfg, environ, embedded_pack_dir(demo, sizeof demo), &loc, err,
                          sizeof err) != 0) {
        srv_say(stderr, "minicpmd: %s", err);
        rc = 2;
        goto out;
    }
    if (loc.warning)
        log_warn("%s", loc.warning);
    /* The NPU: --npu-probe, and the device choice, settled before listening so that
     * an unusable `--device xrt` exits 2 with one line (engine/xrt.h). */
    eng_xrt_configure(&(struct eng_xrt_config){
        .kernels_dir = cfg.npu_kernels, .ctx_size = cfg.ctx_size,
        .submit = cfg.npu_submit == CFG_NPU_SUBMIT_RUN       ? ENG_XRT_SUBMIT_RUN
                  : cfg.npu_submit == CFG_NPU_SUBMIT_RUNLIST ? ENG_XRT_SUBMIT_RUNLIST
                                                             : ENG_XRT_SUBMIT_AUTO,
        .prefill = cfg.npu_prefill == CFG_NPU_PREFILL_CPU    ? ENG_XRT_PREFILL_CPU
                   : cfg.npu_prefill == CFG_NPU_PREFILL_AUTO ? ENG_XRT_PREFILL_AUTO
                                                             : ENG_XRT_PREFILL_NPU,
        .slots = cfg.parallel});
    if (cfg.npu_probe) {
        rc = eng_xrt_probe_main(loc.source != CFG_MODEL_NONE ? loc.path : NULL, cfg.state_dir,
                                stdout, stderr);
        goto out;
    }
    /* auto: the NPU only when the bridge is built, the node exists and a kernel set
     * matches the model; otherwise the CPU. */
    char why[512];
    const char *device = eng_engine_choose_device(
        cfg_device_name(cfg.device), loc.source != CFG_MODEL_NONE ? loc.path : NULL, why,
        sizeof why, err, sizeof err);
    if (!device) {
        srv_say(stderr, "minicpmd: --device xrt: %s", err);
        rc = 2;
        goto out;
    }
    if (why[0])
        log_info("device auto: not the NPU: %s", why);
    rc = cfg.check ? run_check(&cfg, &loc, device) : srv_daemon_run(&cfg, &loc, device);
out:
    flush_warnings(&warns);
    cfg_model_location_free(&loc);
    cfg_free(&cfg);
    srv_log_close();
    return rc;
}
