#include "server/metrics.h"

#include "api/api.h"
#include "minicpmd-build.h"
#include "util/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Request-duration histogram buckets, seconds. Generation requests run for
 * seconds to minutes; health checks for microseconds. */
static const double buckets[] = {0.005, 0.05, 0.5, 5, 30, 120};
#define N_BUCKETS (sizeof buckets / sizeof *buckets)

struct series {
    const char *route;
    int status;
    uint64_t count;
};

struct route_hist {
    const char *route;
    uint64_t le[N_BUCKETS];
    uint64_t count;
    double sum;
};

struct srv_metrics {
    struct series *series;
    size_t n_series, cap_series;
    struct route_hist *hist;
    size_t n_hist, cap_hist;
    time_t start;
    uint64_t closed[SRV_CLOSE__COUNT];
};

void srv_metrics_conn_closed(srv_metrics *m, enum srv_conn_close why)
{
    if (m && (int)why >= 0 && why < SRV_CLOSE__COUNT)
        m->closed[why]++;
}

srv_metrics *srv_metrics_new(void)
{
    srv_metrics *m = calloc(1, sizeof *m);
    if (m)
        m->start = time(NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m)
{
    if (!m)
        return;
    free(m->series);
    free(m->hist);
    free(m);
}

void srv_metrics_record(srv_metrics *m, const char *route, int status, double seconds)
{
    size_t i;
    for (i = 0; i < m->n_series; i++)
        if (m->series[i].status == status && strcmp(m->series[i].route, route) == 0)
            break;
    if (i == m->n_series) {
        if (ut_grow((void **)&m->series, &m->cap_series, m->n_series + 1, sizeof *m->series,
                    16) != 0)
            return; /* out of memory: lose a sample rather than the request */
        m->series[m->n_series++] = (struct series){route, status, 0};
    }
    m->series[i].count++;

    for (i = 0; i < m->n_hist; i++)
        if (strcmp(m->hist[i].route, route) == 0)
            break;
    if (i == m->n_hist) {
        if (ut_grow((void **)&m->hist, &m->cap_hist, m->n_hist + 1, sizeof *m->hist, 16) != 0)
            return;
        m->hist[m->n_hist++] = (struct route_hist){.route = route};
    }
    struct route_hist *h = &m->hist[i];
    for (size_t b = 0; b < N_BUCKETS; b++)
        if (seconds <= buckets[b])
            h->le[b]++;
    h->count++;
    h->sum += seconds;
}

/* Label values are route strings and ids from config; escape per the format. */
static void blabel(ut_buf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            ut_buf_printf(b, "\\%c", *v);
        else if (*v == '\n')
            ut_buf_printf(b, "\\n");
        else
            ut_buf_printf(b, "%c", *v);
    }
}

static const char *const state_names[] = {
    [API_HEALTH_LOADING] = "loading",   [API_HEALTH_OK] = "ready",
    [API_HEALTH_NO_MODEL] = "no_model", [API_HEALTH_FAILED] = "failed",
    [API_HEALTH_STOPPING] = "stopping",
};

/* The generation worker: what an operator reads when an NPU misbehaves (README). */
static void render_worker(ut_buf *b, const struct eng_worker_stats *w)
{
    ut_buf_printf(b, "# HELP minicpmd_worker_busy 1 while a generation request runs on the device.\n"
               "# TYPE minicpmd_worker_busy gauge\n"
               "minicpmd_worker_busy %d\n"
               "# HELP minicpmd_queue_size Generation requests that may wait (--queue-size).\n"
               "# TYPE minicpmd_queue_size gauge\n"
               "minicpmd_queue_size %d\n"
               "# HELP minicpmd_runlist_layers Layers per runlist the next step uses (K).\n"
               "# TYPE minicpmd_runlist_layers gauge\n"
               "minicpmd_runlist_layers %d\n"
               "# HELP minicpmd_model_layers Decoder layers of the served model.\n"
               "# TYPE minicpmd_model_layers gauge\n"
               "minicpmd_model_layers %d\n",
            w->busy ? 1 : 0, w->queue_size, w->current_k, w->n_layers);
    ut_buf_printf(b, "# HELP minicpmd_active_sequences Requests generating at once (KV slots in "
               "use).\n"
               "# TYPE minicpmd_active_sequences gauge\n"
               "minicpmd_active_sequences %d\n"
               "# HELP minicpmd_parallel Requests that may generate at once (--parallel, capped "
               "by the device).\n"
               "# TYPE minicpmd_parallel gauge\n"
               "minicpmd_parallel %d\n",
            w->active, w->parallel);
    /* Sequences per device step: one batch on the cpu; 1 when interleaved. */
    ut_buf_printf(b, "# HELP minicpmd_batch_size Sequences per device step.\n"
               "# TYPE minicpmd_batch_size histogram\n");
    uint64_t cum = 0;
    double sum = 0;
    for (int i = 0; i < ENG_BATCH_BUCKETS; i++) {
        cum += w->batch_hist[i];
        sum += (double)(i + 1) * (double)w->batch_hist[i];
        if (i + 1 < ENG_BATCH_BUCKETS)
            ut_buf_printf(b, "minicpmd_batch_size_bucket{le=\"%d\"} %llu\n", i + 1,
                          (unsigned long long)cum);
    }
    ut_buf_printf(b, "minicpmd_batch_size_bucket{le=\"+Inf\"} %llu\n"
               "minicpmd_batch_size_sum %.0f\n"
               "minicpmd_batch_size_count %llu\n",
            (unsigned long long)cum, sum, (unsigned long long)cum);
    ut_buf_printf(b, "# HELP minicpmd_queue_wait_seconds Time generation requests waited in the "
               "queue for a slot.\n"
               "# TYPE minicpmd_queue_wait_seconds summary\n"
               "minicpmd_queue_wait_seconds_sum %.6f\n"
               "minicpmd_queue_wait_seconds_count %llu\n",
            (double)w->queue_wait_us / 1e6, (unsigned long long)w->queue_waits);
    ut_buf_printf(b, "# HELP minicpmd_generation_requests_total Generation requests by outcome.\n"
               "# TYPE minicpmd_generation_requests_total counter\n");
    const struct { const char *name; uint64_t v; } out[] = {
        {"stop", w->finished_stop}, {"length", w->finished_length},
        {"cancelled", w->cancelled}, {"failed", w->failed}, {"rejected", w->rejected},
    };
    for (size_t i = 0; i < sizeof out / sizeof *out; i++)
        ut_buf_printf(b, "minicpmd_generation_requests_total{outcome=\"%s\"} %llu\n", out[i].name,
                (unsigned long long)out[i].v);
    ut_buf_printf(b, "# HELP minicpmd_tokens_prompt_total Prompt tokens of requests that ran.\n"
               "# TYPE minicpmd_tokens_prompt_total counter\n"
               "minicpmd_tokens_prompt_total %llu\n"
               "# HELP minicpmd_tokens_prompt_cached_total Of those, reused from the KV cache "
               "(--prompt-cache).\n"
               "# TYPE minicpmd_tokens_prompt_cached_total counter\n"
               "minicpmd_tokens_prompt_cached_total %llu\n"
               "# HELP minicpmd_tokens_generated_total Tokens sampled.\n"
               "# TYPE minicpmd_tokens_generated_total counter\n"
               "minicpmd_tokens_generated_total %llu\n",
            (unsigned long long)w->tokens_in, (unsigned long long)w->tokens_cached,
            (unsigned long long)w->tokens_out);
    ut_buf_printf(b, "# HELP minicpmd_runlists_total Runlists submitted to the device, by final ERT "
               "state.\n"
               "# TYPE minicpmd_runlists_total counter\n");
    for (int s = 1; s <= ENG_ERT_LAST; s++)
        ut_buf_printf(b, "minicpmd_runlists_total{state=\"%s\"} %llu\n", eng_ert_name(s),
                (unsigned long long)w->runlists_by_state[s]);
    ut_buf_printf(b, "# HELP minicpmd_device_down 1 while the last device reset failed.\n"
               "# TYPE minicpmd_device_down gauge\n"
               "minicpmd_device_down %d\n",
            w->device_down ? 1 : 0);
    ut_buf_printf(b, "# HELP minicpmd_device_resets_total Device resets after a failed runlist.\n"
               "# TYPE minicpmd_device_resets_total counter\n"
               "minicpmd_device_resets_total %llu\n"
               "# HELP minicpmd_runlist_k_halvings_total Times auto halved K after a hang.\n"
               "# TYPE minicpmd_runlist_k_halvings_total counter\n"
               "minicpmd_runlist_k_halvings_total %llu\n"
               "# HELP minicpmd_runlist_k_probes_total Times auto tried a larger K again after "
               "a run of good tokens.\n"
               "# TYPE minicpmd_runlist_k_probes_total counter\n"
               "minicpmd_runlist_k_probes_total %llu\n",
            (unsigned long long)w->device_resets, (unsigned long long)w->k_halvings,
            (unsigned long long)w->k_probes);
    ut_buf_printf(b, "# HELP minicpmd_prefill_seconds_total Time prefill runlists ran, by where: "
               "the device, or the host CPU for it (--npu-prefill cpu).\n"
               "# TYPE minicpmd_prefill_seconds_total counter\n"
               "minicpmd_prefill_seconds_total{ran_on=\"device\"} %.6f\n"
               "minicpmd_prefill_seconds_total{ran_on=\"host_cpu\"} %.6f\n",
            (double)w->prefill_device_us / 1e6, (double)w->prefill_host_us / 1e6);
}

char *srv_metrics_render(const srv_metrics *m, const struct srv_metrics_gauges *g)
{
    ut_buf b = {0};
    ut_buf_printf(&b, "# HELP minicpmd_build_info Build information.\n"
                "# TYPE minicpmd_build_info gauge\n"
                "minicpmd_build_info{version=\"%s\"} 1\n",
            MINICPMD_VERSION);
    ut_buf_printf(&b, "# HELP process_start_time_seconds Start time of the process since the epoch.\n"
                "# TYPE process_start_time_seconds gauge\n"
                "process_start_time_seconds %lld\n",
            (long long)m->start);

    ut_buf_printf(&b, "# HELP minicpmd_model_state 1 for the daemon's current model state.\n"
                "# TYPE minicpmd_model_state gauge\n");
    for (size_t s = 0; s < sizeof state_names / sizeof *state_names; s++)
        ut_buf_printf(&b, "minicpmd_model_state{state=\"%s\"} %d\n", state_names[s],
                (int)s == g->model_state);
    if (g->model_id) {
        ut_buf_printf(&b, "# HELP minicpmd_model_info The served model and device.\n"
                    "# TYPE minicpmd_model_info gauge\n"
                    "minicpmd_model_info{model=\"");
        blabel(&b, g->model_id);
        ut_buf_printf(&b, "\",device=\"");
        blabel(&b, g->device ? g->device : "none");
        ut_buf_printf(&b, "\"} 1\n");
    }

    ut_buf_printf(&b, "# HELP minicpmd_http_requests_total HTTP requests answered, by route and "
                "status.\n"
                "# TYPE minicpmd_http_requests_total counter\n");
    for (size_t i = 0; i < m->n_series; i++) {
        ut_buf_printf(&b, "minicpmd_http_requests_total{route=\"");
        blabel(&b, m->series[i].route);
        ut_buf_printf(&b, "\",status=\"%d\"} %llu\n", m->series[i].status,
                (unsigned long long)m->series[i].count);
    }

    ut_buf_printf(&b, "# HELP minicpmd_http_request_duration_seconds Time from request to the end "
                "of the response.\n"
                "# TYPE minicpmd_http_request_duration_seconds histogram\n");
    for (size_t i = 0; i < m->n_hist; i++) {
        const struct route_hist *h = &m->hist[i];
        for (size_t k = 0; k < N_BUCKETS; k++) {
            ut_buf_printf(&b, "minicpmd_http_request_duration_seconds_bucket{route=\"");
            blabel(&b, h->route);
            ut_buf_printf(&b, "\",le=\"%g\"} %llu\n", buckets[k], (unsigned long long)h->le[k]);
        }
        ut_buf_printf(&b, "minicpmd_http_request_duration_seconds_bucket{route=\"");
        blabel(&b, h->route);
        ut_buf_printf(&b, "\",le=\"+Inf\"} %llu\n", (unsigned long long)h->count);
        ut_buf_printf(&b, "minicpmd_http_request_duration_seconds_sum{route=\"");
        blabel(&b, h->route);
        ut_buf_printf(&b, "\"} %.6f\n", h->sum);
        ut_buf_printf(&b, "minicpmd_http_request_duration_seconds_count{route=\"");
        blabel(&b, h->route);
        ut_buf_printf(&b, "\"} %llu\n", (unsigned long long)h->count);
    }

    ut_buf_printf(&b, "# HELP minicpmd_http_requests_in_flight Requests being served.\n"
                "# TYPE minicpmd_http_requests_in_flight gauge\n"
                "minicpmd_http_requests_in_flight %zu\n"
                "# HELP minicpmd_http_connections Open client connections.\n"
                "# TYPE minicpmd_http_connections gauge\n"
                "minicpmd_http_connections %zu\n"
                "# HELP minicpmd_queue_depth Generation requests waiting for the engine.\n"
                "# TYPE minicpmd_queue_depth gauge\n"
                "minicpmd_queue_depth %zu\n",
            g->in_flight, g->connections, g->queue_depth);
    static const char *const close_names[SRV_CLOSE__COUNT] = {
        "max_connections", "max_connections_per_ip", "request_timeout"};
    ut_buf_printf(&b, "# HELP minicpmd_http_connections_closed_total Connections the server "
                      "closed on its own, by reason.\n"
                      "# TYPE minicpmd_http_connections_closed_total counter\n");
    for (int i = 0; i < SRV_CLOSE__COUNT; i++)
        ut_buf_printf(&b, "minicpmd_http_connections_closed_total{reason=\"%s\"} %llu\n",
                      close_names[i], (unsigned long long)m->closed[i]);
    if (g->worker)
        render_worker(&b, g->worker);
    if (b.oom) {
        ut_buf_free(&b);
        return NULL;
    }
    return b.p;
}
