/* The daemon's life, in order: listen (systemd's socket or our own), serve HTTP
 * at once — /health says "loading" — while a loader thread opens the model,
 * then READY=1; SIGTERM drains in-flight requests for up to --shutdown-timeout
 * and exits 0. systemd hears about each step (READY, STATUS, STOPPING, watchdog,
 * EXTEND_TIMEOUT_USEC while loading) through server/sd.
 */
#include "server/daemon.h"

#include "minicpmd-build.h"
#include "engine/text/template.h"
#include "server/app.h"
#include "server/chat.h"
#include "server/listen.h"
#include "server/log.h"
#include "server/mailbox.h"
#include "server/sd.h"

#include <signal.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

/* While loading, ask systemd for this much more start time, every half of it. */
#define EXTEND_USEC (20ull * 1000 * 1000)
#define DRAIN_POLL_MS 50

struct load_result {
    struct srv_model model;
    int rc;
    char err[512];
};

struct daemon {
    struct srv_app app;
    uv_loop_t loop;
    srv_mailbox *mailbox;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t watchdog, extend, drain, ping;
    int64_t watchdog_usec;
    uv_thread_t loader;
    bool loader_running;
    struct load_result load;
    uint64_t drain_deadline_ms;
    bool stopping, stopped;
    int exit_code;
};

static void stop_now(struct daemon *d);

/* ---- model loading ---------------------------------------------------------- */

static void log_model_warning(void *ctx, const char *msg)
{
    (void)ctx;
    log_warn("%s", msg);
}

static void log_worker(void *ctx, enum eng_log_level level, const char *msg)
{
    (void)ctx;
    enum cfg_log_level l = level == ENG_LOG_ERROR  ? CFG_LOG_ERROR
                           : level == ENG_LOG_WARN ? CFG_LOG_WARN
                           : level == ENG_LOG_INFO ? CFG_LOG_INFO
                                                   : CFG_LOG_DEBUG;
    if (srv_log_enabled(l))
        srv_log(l, "%s", msg);
}

/* The device and the worker over it. */
static int start_engine(const struct cfg *cfg, eng_worker_emit_fn emit, void *emit_ctx,
                        struct srv_model *m, char *err, size_t errlen)
{
    const struct eng_pack_info *info = eng_pack_get_info(m->pack);
    struct eng_fault_list faults = {0};
    const char *spec = cfg->fault ? cfg->fault : getenv("MINICPMD_FAULTS");
    int rc = -1;
    char e2[400];
    if (spec && *spec) {
        if (eng_fault_list_parse(&faults, spec, e2, sizeof e2) != 0 ||
            eng_fault_list_check(&faults, info->hp.n_layers, e2, sizeof e2) != 0) {
            snprintf(err, errlen, "--fault: %s", e2);
            goto out;
        }
        if (cfg->device != CFG_DEVICE_SIM) {
            snprintf(err, errlen, "--fault needs --device sim (faults are injected by the "
                                  "simulated NPU)");
            goto out;
        }
    }
    struct eng_device_opts dopts = {
        .n_threads = cfg->threads,
        .act = cfg->precision == CFG_PRECISION_F32 ? ENG_ACT_F32 : ENG_ACT_Q8,
        .qk_norm = cfg->qk_norm == CFG_QK_NORM_ON    ? ENG_QK_NORM_ON
                   : cfg->qk_norm == CFG_QK_NORM_OFF ? ENG_QK_NORM_OFF
                                                     : ENG_QK_NORM_AUTO,
        .warn = log_model_warning,
        .sim_runlist_limit = cfg->sim_runlist_limit,
        .sim_timeout_ms = cfg->sim_timeout_ms,
        .sim_latency_us = cfg->sim_latency_us,
        .faults = faults.n ? &faults : NULL,
    };
    if (eng_device_open(cfg_device_name(cfg->device), &dopts, &m->dev, e2, sizeof e2) != 0) {
        snprintf(err, errlen, "--device %s: %s", cfg_device_name(cfg->device), e2);
        goto out;
    }
    int n_ctx = cfg->ctx_size > 0 ? cfg->ctx_size : info->hp.n_ctx_train;
    if (n_ctx > info->hp.n_ctx_train) {
        snprintf(err, errlen, "--ctx-size %d: the model has %d positions", cfg->ctx_size,
                 info->hp.n_ctx_train);
        goto out;
    }
    struct eng_worker_opts wo = {
        .queue_size = cfg->queue_size,
        .prefill_chunk = cfg->prefill_chunk,
        .prompt_cache = cfg->prompt_cache,
        .n_ctx = n_ctx,
        .kmode = cfg->runlist_layers == CFG_RUNLIST_AUTO  ? ENG_KMODE_AUTO
                 : cfg->runlist_layers == CFG_RUNLIST_ALL ? ENG_KMODE_ALL
                                                          : ENG_KMODE_FIXED,
        .fixed_k = cfg->runlist_layers > 0 ? cfg->runlist_layers : 0,
        .max_retries = cfg->runlist_retries,
        .state_dir = cfg->state_dir,
        .log = log_worker,
    };
    if (eng_worker_new(m->dev, m->pack, m->tok, &wo, emit, emit_ctx, &m->worker, e2,
                       sizeof e2) != 0) {
        snprintf(err, errlen, "%s", e2);
        goto out;
    }
    m->n_ctx = n_ctx;
    rc = 0;
out:
    eng_fault_list_clear(&faults);
    return rc;
}

int srv_model_load(const char *dir, const struct cfg *cfg, eng_worker_emit_fn emit,
                   void *emit_ctx, struct srv_model *m, char *err, size_t errlen)
{
    char path[4096];
    *m = (struct srv_model){0};
    if (eng_pack_open(dir, &m->pack, err, errlen) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char terr[400];
    m->tok = eng_tokenizer_load(path, terr, sizeof terr);
    if (!m->tok) {
        snprintf(err, errlen, "%s", terr);
        srv_model_free(m);
        return -1;
    }
    int n = eng_pack_stop_ids(m->pack, m->stop_ids, 16, terr, sizeof terr);
    if (n < 0 || eng_sampling_defaults(m->pack, &m->sampling, terr, sizeof terr) != 0) {
        snprintf(err, errlen, "%s", terr);
        srv_model_free(m);
        return -1;
    }
    m->n_stop_ids = n;
    /* The renderer is MiniCPM5's template in C: a pack whose own template differs
     * would be rendered as MiniCPM5's. Say so rather than guess. */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        char buf[16384];
        size_t nb = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (!eng_chat_template_is_official(buf, nb))
            snprintf(m->warning, sizeof m->warning,
                     "%.160s is not the official MiniCPM5-2B template; prompts are rendered "
                     "with the built-in MiniCPM5 template",
                     path);
    }
    if (start_engine(cfg, emit, emit_ctx, m, err, errlen) != 0) {
        srv_model_free(m);
        return -1;
    }
    return 0;
}

void srv_model_free(struct srv_model *m)
{
    eng_worker_free(m->worker);
    eng_device_free(m->dev);
    eng_tokenizer_free(m->tok);
    eng_pack_free(m->pack);
    *m = (struct srv_model){0};
}

static void on_loaded(void *data)
{
    struct daemon *d = data;
    if (d->loader_running)       /* stop_now() may have joined it already */
        uv_thread_join(&d->loader);
    d->loader_running = false;
    uv_timer_stop(&d->extend);
    if (d->stopping) {           /* shutdown began while loading */
        srv_model_free(&d->load.model);
        return;
    }
    if (d->load.rc != 0) {
        d->app.state = API_HEALTH_FAILED;
        d->app.load_error = strdup(d->load.err);
        log_error("model %s failed to load: %s", d->app.model->id, d->load.err);
        srv_sd_notifyf("STATUS=model failed to load: %s\nERRNO=22", d->load.err);
        d->exit_code = 1;
        stop_now(d);
        return;
    }
    if (d->load.model.warning[0])
        log_warn("%s", d->load.model.warning);
    const struct eng_pack_info *info = eng_pack_get_info(d->load.model.pack);
    d->app.pack = d->load.model.pack;
    d->app.tok = d->load.model.tok;
    d->app.dev = d->load.model.dev;
    d->app.worker = d->load.model.worker;
    d->app.n_ctx = d->load.model.n_ctx;
    memcpy(d->app.stop_ids, d->load.model.stop_ids, sizeof d->app.stop_ids);
    d->app.n_stop_ids = d->load.model.n_stop_ids;
    d->app.sampling = d->load.model.sampling;
    d->app.device = eng_device_get_name(d->app.dev);
    log_info("device: %s", eng_device_get_description(d->app.dev));
    d->load.model = (struct srv_model){0};
    d->app.model_created = (int64_t)time(NULL);
    d->app.state = API_HEALTH_OK;
    log_info("model %s ready: %s pack, %d layers, %d heads / %d kv heads, vocab %d, %s "
             "weights %.1f MiB, device %s",
             d->app.model->id, info->model_type, info->hp.n_layers, info->hp.n_heads,
             info->hp.n_kv_heads, info->hp.n_vocab, eng_weights_format_name(info->format),
             (double)info->weights_bytes / (1024.0 * 1024.0), d->app.device);
    srv_sd_notifyf("READY=1\nSTATUS=ready: %s on %s", d->app.model->id, d->app.device);
}

static void loader_main(void *arg)
{
    struct daemon *d = arg;
    d->load.rc = srv_model_load(d->app.model->path, d->app.cfg, srv_chat_emit, &d->app,
                                &d->load.model, d->load.err, sizeof d->load.err);
    if (srv_mailbox_post(d->mailbox, on_loaded, d) != 0)
        srv_model_free(&d->load.model); /* the loop is gone; nobody reads the result */
}

static void on_extend(uv_timer_t *t)
{
    srv_sd_notifyf("EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)EXTEND_USEC);
}

static int start_loading(struct daemon *d)
{
    d->app.state = API_HEALTH_LOADING;
    log_info("loading model %s from %s (%s)", d->app.model->id, d->app.model->path,
             cfg_model_source_name(d->app.model->source));
    if (d->app.model->source == CFG_MODEL_EMBEDDED)
        log_warn("no model configured or found: serving the built-in demo pack %s (random "
                 "weights: it answers, but not sensibly; use --model PATH|TAG for a real one)",
                 d->app.model->id);
    srv_sd_notifyf("STATUS=loading model %s\nEXTEND_TIMEOUT_USEC=%llu", d->app.model->id,
                   (unsigned long long)EXTEND_USEC);
    uv_timer_start(&d->extend, on_extend, EXTEND_USEC / 2000, EXTEND_USEC / 2000);
    if (uv_thread_create(&d->loader, loader_main, d) != 0) {
        log_error("cannot start the model loader thread");
        return -1;
    }
    d->loader_running = true;
    return 0;
}

/* ---- shutdown ---------------------------------------------------------------- */

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Close everything; uv_run() returns when the close callbacks have run. */
static void stop_now(struct daemon *d)
{
    if (d->stopped)
        return;
    d->stopped = true;
    d->stopping = true;
    size_t left = srv_http_inflight(d->app.http);
    if (left)
        log_warn("cancelling %zu in-flight request(s)", left);
    srv_http_stop(d->app.http);
    d->app.http = NULL;
    if (d->loader_running) {
        /* eng_pack_open() is bounded file I/O; wait for it so nothing outlives
         * the mailbox. */
        log_info("waiting for the model loader to finish");
        uv_thread_join(&d->loader);
        d->loader_running = false;
    }
    /* The worker ends its requests (final events, posted to the mailbox) before
     * the mailbox runs what is queued and closes. */
    eng_worker_free(d->app.worker);
    d->app.worker = NULL;
    srv_mailbox_close(d->mailbox);  /* runs a pending on_loaded, which frees */
    d->mailbox = NULL;
    d->app.mailbox = NULL;
    close_handle((uv_handle_t *)&d->sig_term);
    close_handle((uv_handle_t *)&d->sig_int);
    close_handle((uv_handle_t *)&d->sig_hup);
    close_handle((uv_handle_t *)&d->watchdog);
    close_handle((uv_handle_t *)&d->extend);
    close_handle((uv_handle_t *)&d->drain);
    close_handle((uv_handle_t *)&d->ping);
}

static void on_drain_tick(uv_timer_t *t)
{
    struct daemon *d = t->data;
    size_t left = srv_http_inflight(d->app.http);
    if (left == 0) {
        log_info("all requests finished; exiting");
        stop_now(d);
    } else if (uv_now(&d->loop) >= d->drain_deadline_ms) {
        log_warn("shutdown grace period of %d s is over", d->app.cfg->shutdown_grace_s);
        stop_now(d);
    }
}

static void begin_shutdown(struct daemon *d, const char *why)
{
    if (d->stopping) {
        log_warn("%s again: stopping now", why);
        stop_now(d);
        return;
    }
    d->stopping = true;
    d->app.state = API_HEALTH_STOPPING;
    size_t inflight = srv_http_inflight(d->app.http);
    log_info("%s: no longer accepting connections; %zu request(s) in flight, grace %d s", why,
             inflight, d->app.cfg->shutdown_grace_s);
    srv_sd_notify("STOPPING=1\nSTATUS=draining");
    srv_http_drain(d->app.http);
    uv_timer_stop(&d->extend);
    d->drain_deadline_ms = uv_now(&d->loop) + (uint64_t)d->app.cfg->shutdown_grace_s * 1000;
    uv_timer_start(&d->drain, on_drain_tick, 0, DRAIN_POLL_MS);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct daemon *d = s->data;
    if (signum == SIGHUP) {
        int rc = srv_log_reopen();
        if (rc < 0)
            log_error("SIGHUP: cannot reopen the log file: %s", strerror(-rc));
        else
            log_info("SIGHUP: log file reopened");
        return;
    }
    begin_shutdown(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_ping(uv_timer_t *t)
{
    struct daemon *d = t->data;
    srv_chat_ping(&d->app);
}

static void on_watchdog(uv_timer_t *t)
{
    /* Pinged from the loop thread: a stuck loop stops the pings and systemd
     * restarts us, which is the point. */
    srv_sd_notify("WATCHDOG=1");
}

/* ---- start ------------------------------------------------------------------- */

static const char *serving_device(enum cfg_device d)
{
    /* The device registry arrives with the worker; until then the CPU is the only
     * engine, and "sim" is its NPU model. */
    return d == CFG_DEVICE_SIM ? "sim" : d == CFG_DEVICE_XRT ? "xrt" : "cpu";
}

static int init_handles(struct daemon *d)
{
    uv_signal_init(&d->loop, &d->sig_term);
    uv_signal_init(&d->loop, &d->sig_int);
    uv_signal_init(&d->loop, &d->sig_hup);
    uv_timer_init(&d->loop, &d->watchdog);
    uv_timer_init(&d->loop, &d->extend);
    uv_timer_init(&d->loop, &d->drain);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
    d->watchdog.data = d->extend.data = d->drain.data = d;
    uv_signal_start(&d->sig_term, on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_signal, SIGINT);
    uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
    d->mailbox = srv_mailbox_new(&d->loop);
    d->app.mailbox = d->mailbox;
    uv_timer_init(&d->loop, &d->ping);
    d->ping.data = d;
    uv_timer_start(&d->ping, on_ping, 1000, 1000);
    return d->mailbox ? 0 : -1;
}

int srv_daemon_run(const struct cfg *cfg, const struct cfg_model_location *model)
{
    struct daemon *d = calloc(1, sizeof *d);
    char err[512];
    int rc = 1;
    if (!d)
        return 1;
    d->app.cfg = cfg;
    d->app.model = model;
    d->app.loop = &d->loop;
    d->app.device = serving_device(cfg->device);
    d->app.state = API_HEALTH_NO_MODEL;
    if (uv_loop_init(&d->loop) != 0) {
        free(d);
        return 1;
    }

    struct srv_listener lis;
    if (srv_listen_open(cfg->host, cfg->port, &lis, err, sizeof err) != 0) {
        log_error("%s", err);
        srv_sd_notifyf("STATUS=%s\nERRNO=98", err);
        goto out_loop;
    }
    if (init_handles(d) != 0 || !(d->app.metrics = srv_metrics_new())) {
        log_error("out of memory");
        goto out_handles;
    }
    struct srv_http_config hc = {
        .listen_fd = lis.fd,
        .max_connections = (unsigned)cfg->max_connections,
        .timeout_s = (unsigned)cfg->timeout_s,
        .max_body_bytes = cfg->max_body_bytes,
        .api_key = cfg->api_key,
        .cors_origins = cfg->cors_origins,
        .n_cors_origins = cfg->n_cors_origins,
        .routes = srv_routes,
        .n_routes = srv_n_routes,
        .app = &d->app,
        .metrics = d->app.metrics,
    };
    if (srv_http_start(&d->loop, &hc, &d->app.http, err, sizeof err) != 0) {
        log_error("%s", err);
        goto out_handles;
    }
    log_info("minicpmd %s listening on http://%s%s (device %s)", MINICPMD_VERSION, lis.addr,
             lis.activated ? " (socket activation)" : "", d->app.device);

    d->watchdog_usec = srv_sd_watchdog_usec();
    if (d->watchdog_usec < 0)
        log_warn("ignoring malformed WATCHDOG_USEC/WATCHDOG_PID");
    if (d->watchdog_usec > 0) {
        uint64_t ms = (uint64_t)d->watchdog_usec / 2000;
        uv_timer_start(&d->watchdog, on_watchdog, 0, ms ? ms : 1);
    }

    if (model->source == CFG_MODEL_NONE) {
        log_warn("no model configured or found: serving the API without a model "
                 "(/health answers 503 no_model); use --model PATH|TAG");
        srv_sd_notify("READY=1\nSTATUS=serving without a model");
    } else if (start_loading(d) != 0) {
        stop_now(d);
    }

    uv_run(&d->loop, UV_RUN_DEFAULT);
    rc = d->exit_code;
    goto out_free;

out_handles:
    if (!d->app.http)
        close(lis.fd);
    stop_now(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    rc = 1;
out_free:
    eng_device_free(d->app.dev);
    eng_tokenizer_free(d->app.tok);
    eng_pack_free(d->app.pack);
    free(d->app.load_error);
    srv_metrics_free(d->app.metrics);
out_loop:
    if (uv_loop_close(&d->loop) != 0)
        log_warn("event loop closed with handles still open");
    free(d);
    return rc;
}
