/* The daemon's life, in order: listen (systemd's socket or our own), serve HTTP
 * at once — /health says "loading" — while a loader thread opens the model,
 * then READY=1; SIGTERM drains in-flight requests for up to --shutdown-timeout
 * and exits 0. systemd hears about each step (READY, STATUS, STOPPING, watchdog,
 * EXTEND_TIMEOUT_USEC while loading) through server/sd.
 */
#include "server/daemon.h"

#include "minicpmd-build.h"
#include "server/app.h"
#include "server/chat.h"
#include "server/listen.h"
#include "server/log.h"
#include "server/mailbox.h"
#include "server/sd.h"

#include <errno.h>
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
/* SIGTERM ends the process within --shutdown-timeout + this, even when something
 * the shutdown waits for (the loader thread, the worker inside a device call) does
 * not return: the stop watch then exits 1, so a supervisor can restart it. */
#define STOP_SLACK_S 5
#define LOAD_GATE_POLL_NS (10 * 1000 * 1000)

struct load_result {
    eng_engine *eng;
    int rc;
    char err[512];
};

/* The stop watch: a thread armed at the first SIGTERM/SIGINT that ends the process
 * if the orderly stop has not finished by its deadline. A thread, not a loop timer,
 * because what blocks may be the loop thread itself (joining the loader). */
struct stop_watch {
    uv_thread_t thread;
    uv_mutex_t mu;
    uv_cond_t cv;
    bool armed, done;
    uint64_t timeout_ns;
};

struct daemon {
    struct srv_app app;
    uv_loop_t loop;
    srv_mailbox *mailbox;
    uv_signal_t sig_term, sig_int, sig_hup, sig_usr1;
    uv_timer_t watchdog, extend, drain, ping;
    int64_t watchdog_usec;
    uv_thread_t loader;
    bool loader_running;
    struct load_result load;
    uint64_t drain_deadline_ms;
    bool stopping, stopped;
    int exit_code;
    struct stop_watch watch;
    const char *load_gate;       /* MINICPMD_TEST_LOAD_GATE, read once at start */
};

static void stop_now(struct daemon *d);

/* ---- model loading ---------------------------------------------------------- */

static void log_engine(void *ctx, enum eng_log_level level, const char *msg)
{
    (void)ctx;
    enum cfg_log_level l = level == ENG_LOG_ERROR  ? CFG_LOG_ERROR
                           : level == ENG_LOG_WARN ? CFG_LOG_WARN
                           : level == ENG_LOG_INFO ? CFG_LOG_INFO
                                                   : CFG_LOG_DEBUG;
    if (srv_log_enabled(l))
        srv_log(l, "%s", msg);
}

void srv_engine_opts(const struct cfg *cfg, const char *device, struct eng_engine_opts *o)
{
    const char *faults = cfg->fault ? cfg->fault : getenv("MINICPMD_FAULTS");
    *o = (struct eng_engine_opts){
        .device = device,
        .n_threads = cfg->threads,
        .act = cfg->precision == CFG_PRECISION_F32 ? ENG_ACT_F32 : ENG_ACT_Q8,
        .qk_norm = cfg->qk_norm == CFG_QK_NORM_ON    ? ENG_QK_NORM_ON
                   : cfg->qk_norm == CFG_QK_NORM_OFF ? ENG_QK_NORM_OFF
                                                     : ENG_QK_NORM_AUTO,
        .weights = cfg->weights == CFG_WEIGHTS_MMAP   ? ENG_WEIGHTS_PLACE_MMAP
                   : cfg->weights == CFG_WEIGHTS_COPY ? ENG_WEIGHTS_PLACE_COPY
                                                      : ENG_WEIGHTS_PLACE_AUTO,
        .n_ctx = cfg->ctx_size,
        .queue_size = cfg->queue_size,
        .parallel = cfg->parallel,
        .step_prefill = cfg->step_prefill,
        .prefill_chunk = cfg->prefill_chunk,
        .prompt_cache = cfg->prompt_cache,
        .kmode = cfg->runlist_layers == CFG_RUNLIST_AUTO  ? ENG_KMODE_AUTO
                 : cfg->runlist_layers == CFG_RUNLIST_ALL ? ENG_KMODE_ALL
                                                          : ENG_KMODE_FIXED,
        .fixed_k = cfg->runlist_layers > 0 ? cfg->runlist_layers : 0,
        .max_retries = cfg->runlist_retries,
        .state_dir = cfg->state_dir,
        .faults = faults,
        .sim_runlist_limit = cfg->sim_runlist_limit,
        .sim_timeout_ms = cfg->sim_timeout_ms,
        .sim_latency_us = cfg->sim_latency_us,
        .log = log_engine,
    };
}

static void on_loaded(void *data)
{
    struct daemon *d = data;
    if (d->loader_running)       /* stop_now() may have joined it already */
        uv_thread_join(&d->loader);
    d->loader_running = false;
    uv_timer_stop(&d->extend);
    if (d->stopping) {           /* shutdown began while loading */
        eng_engine_free(d->load.eng);
        d->load.eng = NULL;
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
    d->app.eng = d->load.eng;
    d->load.eng = NULL;
    const struct eng_pack_info *info = eng_pack_get_info(eng_engine_pack(d->app.eng));
    d->app.device = eng_engine_device_name(d->app.eng);
    log_info("device: %s", eng_engine_device_description(d->app.eng));
    d->app.model_created = (int64_t)time(NULL);
    d->app.state = API_HEALTH_OK;
    log_info("model %s ready: %s pack, %d layers, %d heads / %d kv heads, vocab %d, %s "
             "weights %.1f MiB, device %s",
             d->app.model->id, info->model_type, info->hp.n_layers, info->hp.n_heads,
             info->hp.n_kv_heads, info->hp.n_vocab, eng_weights_format_name(info->format),
             (double)info->weights_bytes / (1024.0 * 1024.0), d->app.device);
    srv_sd_notifyf("READY=1\nSTATUS=ready: %s on %s", d->app.model->id, d->app.device);
}

/* Test hook (MINICPMD_TEST_LOAD_GATE=PATH): the loader waits while PATH exists,
 * which is what a load stuck in I/O looks like from outside. The integration tests
 * use it to see LOADING, SIGTERM during loading, and the stop watch ending a stop
 * that waits for a loader that does not return. Unset in production. */
static void wait_load_gate(const char *gate)
{
    struct timespec ts = {0, LOAD_GATE_POLL_NS};
    while (gate && access(gate, F_OK) == 0)
        nanosleep(&ts, NULL);
}

static void loader_main(void *arg)
{
    struct daemon *d = arg;
    wait_load_gate(d->load_gate);
    struct eng_engine_opts o;
    srv_engine_opts(d->app.cfg, d->app.device, &o);
    d->load.rc = eng_engine_open(d->app.model->path, &o, srv_chat_emit, &d->app, &d->load.eng,
                                 d->load.err, sizeof d->load.err);
    if (srv_mailbox_post(d->mailbox, on_loaded, d) != 0) {
        eng_engine_free(d->load.eng); /* the loop is gone; nobody reads the result */
        d->load.eng = NULL;
    }
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
        log_warn("no model configured or found: serving the built-in demo pack %s (a 2.6 M "
                 "parameter model that only adds, subtracts, repeats words, calls a weather "
                 "tool and writes small JSON; use --model PATH|TAG for a real one)",
                 d->app.model->id);
    srv_sd_notifyf("STATUS=loading model %s\nEXTEND_TIMEOUT_USEC=%llu", d->app.model->id,
                   (unsigned long long)EXTEND_USEC);
    uv_timer_start(&d->extend, on_extend, EXTEND_USEC / 2000, EXTEND_USEC / 2000);
    int rc = uv_thread_create(&d->loader, loader_main, d);
    if (rc != 0) {               /* libuv's errors are negative errno values */
        log_error("cannot start the model loader thread: %s", uv_strerror(rc));
        return rc;
    }
    d->loader_running = true;
    return 0;
}

/* ---- shutdown ---------------------------------------------------------------- */

static void watch_main(void *arg)
{
    struct stop_watch *w = arg;
    uv_mutex_lock(&w->mu);
    uint64_t deadline = uv_hrtime() + w->timeout_ns;
    for (uint64_t now; !w->done && (now = uv_hrtime()) < deadline;)
        uv_cond_timedwait(&w->cv, &w->mu, deadline - now);
    bool done = w->done;
    uv_mutex_unlock(&w->mu);
    if (done)
        return;
    log_error("shutdown: still not finished %llu s after the signal (a thread is blocked); "
              "exiting now", (unsigned long long)(w->timeout_ns / 1000000000ull));
    _exit(1);
}

static void watch_arm(struct stop_watch *w, int grace_s)
{
    if (w->armed)
        return;
    w->timeout_ns = (uint64_t)(grace_s + STOP_SLACK_S) * 1000000000ull;
    if (uv_mutex_init(&w->mu) != 0)
        return;
    if (uv_cond_init(&w->cv) != 0) {
        uv_mutex_destroy(&w->mu);
        return;
    }
    if (uv_thread_create(&w->thread, watch_main, w) != 0) {
        uv_cond_destroy(&w->cv);
        uv_mutex_destroy(&w->mu);
        log_warn("cannot start the shutdown watch thread; a blocked stop will not be cut short");
        return;
    }
    w->armed = true;
}

static void watch_disarm(struct stop_watch *w)
{
    if (!w->armed)
        return;
    uv_mutex_lock(&w->mu);
    w->done = true;
    uv_cond_signal(&w->cv);
    uv_mutex_unlock(&w->mu);
    uv_thread_join(&w->thread);
    uv_cond_destroy(&w->cv);
    uv_mutex_destroy(&w->mu);
    w->armed = false;
}

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
    eng_engine_stop(d->app.eng);
    srv_mailbox_close(d->mailbox);  /* runs a pending on_loaded, which frees */
    d->mailbox = NULL;
    d->app.mailbox = NULL;
    close_handle((uv_handle_t *)&d->sig_term);
    close_handle((uv_handle_t *)&d->sig_int);
    close_handle((uv_handle_t *)&d->sig_hup);
    close_handle((uv_handle_t *)&d->sig_usr1);
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
    watch_arm(&d->watch, d->app.cfg->shutdown_grace_s);
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
    /* SIGUSR1 reopens the log like SIGHUP: nginx's meaning of USR1, which
     * logrotate configurations already send (SIGUSR2 is ignored, in main()). */
    if (signum == SIGHUP || signum == SIGUSR1) {
        const char *name = signum == SIGHUP ? "SIGHUP" : "SIGUSR1";
        int rc = srv_log_reopen();
        if (rc < 0)
            log_error("%s: cannot reopen the log file: %s", name, strerror(-rc));
        else
            log_info("%s: log file reopened", name);
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

static int init_handles(struct daemon *d)
{
    uv_signal_init(&d->loop, &d->sig_term);
    uv_signal_init(&d->loop, &d->sig_int);
    uv_signal_init(&d->loop, &d->sig_hup);
    uv_signal_init(&d->loop, &d->sig_usr1);
    uv_timer_init(&d->loop, &d->watchdog);
    uv_timer_init(&d->loop, &d->extend);
    uv_timer_init(&d->loop, &d->drain);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d->sig_usr1.data = d;
    d->watchdog.data = d->extend.data = d->drain.data = d;
    uv_signal_start(&d->sig_term, on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_signal, SIGINT);
    uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
    uv_signal_start(&d->sig_usr1, on_signal, SIGUSR1);
    d->mailbox = srv_mailbox_new(&d->loop);
    d->app.mailbox = d->mailbox;
    uv_timer_init(&d->loop, &d->ping);
    d->ping.data = d;
    uv_timer_start(&d->ping, on_ping, 1000, 1000);
    return d->mailbox ? 0 : -ENOMEM;
}

int srv_daemon_run(const struct cfg *cfg, const struct cfg_model_location *model,
                   const char *device)
{
    struct daemon *d = calloc(1, sizeof *d);
    char err[512];
    int rc = 1;
    if (!d)
        return 1;
    d->app.cfg = cfg;
    d->app.gram_limits = (struct eng_gram_limits){
        .max_rules = (uint32_t)cfg->grammar_max_rules,
        .max_bytes = (uint32_t)cfg->grammar_max_bytes,
        .max_stacks = (uint32_t)cfg->grammar_max_stacks,
        .step_work = (uint32_t)cfg->grammar_step_work,
    };
    d->app.model = model;
    d->app.loop = &d->loop;
    d->app.device = device;
    d->app.state = API_HEALTH_NO_MODEL;
    d->load_gate = getenv("MINICPMD_TEST_LOAD_GATE");
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
    if (init_handles(d) != 0 || !(d->app.metrics = srv_metrics_new()) ||
        !(d->app.status = srv_status_new())) {
        log_error("out of memory");
        goto out_handles;
    }
    struct srv_http_config hc = {
        .listen_fd = lis.fd,
        .max_connections = (unsigned)cfg->max_connections,
        .max_connections_per_ip = (unsigned)cfg->max_connections_per_ip,
        .timeout_s = (unsigned)cfg->timeout_s,
        .request_timeout_s = (unsigned)cfg->request_timeout_s,
        .listen_host = cfg->host,
        .allowed_hosts = cfg->allowed_hosts,
        .n_allowed_hosts = cfg->n_allowed_hosts,
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
    eng_engine_free(d->app.eng);
    watch_disarm(&d->watch);
    free(d->app.load_error);
    srv_metrics_free(d->app.metrics);
    srv_status_free(d->app.status);
out_loop:
    if (uv_loop_close(&d->loop) != 0)
        log_warn("event loop closed with handles still open");
    free(d);
    return rc;
}
