/* server/metrics: counting and the Prometheus text format. */
#include "server/metrics.h"

#include "api/api.h"

#include "tests/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct srv_metrics_gauges gauges = {
    .in_flight = 2, .connections = 3, .queue_depth = 0, .model_state = API_HEALTH_OK,
    .model_id = "minicpm5:2b", .device = "cpu"};

MCD_TEST(metrics, counts_by_route_and_status)
{
    srv_metrics *m = srv_metrics_new();
    cr_assert_not_null(m);
    for (int i = 0; i < 3; i++)
        srv_metrics_record(m, "/health", 200, 0.001);
    srv_metrics_record(m, "/health", 503, 0.001);
    srv_metrics_record(m, "other", 404, 0.0001);
    srv_metrics_record(m, "/v1/models", 200, 1.0);
    char *s = srv_metrics_render(m, &gauges);
    cr_assert_not_null(s);
    cr_assert_not_null(strstr(s, "minicpmd_http_requests_total{route=\"/health\",status=\"200\"} 3\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_requests_total{route=\"/health\",status=\"503\"} 1\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_requests_total{route=\"other\",status=\"404\"} 1\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_request_duration_seconds_bucket{route=\"/health\",le=\"0.005\"} 4\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_request_duration_seconds_bucket{route=\"/v1/models\",le=\"0.5\"} 0\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_request_duration_seconds_bucket{route=\"/v1/models\",le=\"5\"} 1\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_request_duration_seconds_count{route=\"/health\"} 4\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_requests_in_flight 2\n"));
    cr_assert_not_null(strstr(s, "minicpmd_http_connections 3\n"));
    cr_assert_not_null(strstr(s, "minicpmd_queue_depth 0\n"));
    cr_assert_not_null(strstr(s, "minicpmd_model_state{state=\"ready\"} 1\n"));
    cr_assert_not_null(strstr(s, "minicpmd_model_state{state=\"loading\"} 0\n"));
    cr_assert_not_null(strstr(s, "minicpmd_model_info{model=\"minicpm5:2b\",device=\"cpu\"} 1\n"));
    free(s);
    srv_metrics_free(m);
}

MCD_TEST(metrics, connections_closed_by_reason)
{
    srv_metrics *m = srv_metrics_new();
    cr_assert_not_null(m);
    srv_metrics_conn_closed(m, SRV_CLOSE_MAX_CONNECTIONS);
    srv_metrics_conn_closed(m, SRV_CLOSE_REQUEST_TIMEOUT);
    srv_metrics_conn_closed(m, SRV_CLOSE_REQUEST_TIMEOUT);
    srv_metrics_conn_closed(m, SRV_CLOSE__COUNT);   /* ignored */
    srv_metrics_conn_closed(NULL, SRV_CLOSE_PER_IP); /* ignored */
    char *s = srv_metrics_render(m, &gauges);
    cr_assert_not_null(s);
    cr_assert_not_null(strstr(s, "# TYPE minicpmd_http_connections_closed_total counter\n"));
    cr_assert_not_null(strstr(
        s, "minicpmd_http_connections_closed_total{reason=\"max_connections\"} 1\n"));
    cr_assert_not_null(strstr(
        s, "minicpmd_http_connections_closed_total{reason=\"max_connections_per_ip\"} 0\n"));
    cr_assert_not_null(strstr(
        s, "minicpmd_http_connections_closed_total{reason=\"request_timeout\"} 2\n"));
    free(s);
    srv_metrics_free(m);
}

/* Every sample line is `name{labels} value` or `name value`, every family has
 * HELP and TYPE first: the exposition format's grammar, checked line by line. */
MCD_TEST(metrics, exposition_format)
{
    srv_metrics *m = srv_metrics_new();
    srv_metrics_record(m, "/health", 200, 0.01);
    char *s = srv_metrics_render(m, &gauges);
    char *save = NULL;
    int samples = 0;
    for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            cr_assert(strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0, "%s",
                      line);
            continue;
        }
        char name[128];
        double v;
        char *sp = strrchr(line, ' ');
        cr_assert_not_null(sp, "%s", line);
        cr_assert_eq(sscanf(sp + 1, "%lf", &v), 1, "%s", line);
        cr_assert_eq(sscanf(line, "%127[a-zA-Z0-9_:]", name), 1, "%s", line);
        samples++;
    }
    cr_assert_gt(samples, 10);
    free(s);
    srv_metrics_free(m);
}

MCD_TEST(metrics, label_values_are_escaped)
{
    srv_metrics *m = srv_metrics_new();
    struct srv_metrics_gauges g = gauges;
    g.model_id = "we\"ird\\id\n";
    char *s = srv_metrics_render(m, &g);
    cr_assert_not_null(strstr(s, "model=\"we\\\"ird\\\\id\\n\""));
    free(s);
    srv_metrics_free(m);
}

MCD_TEST(metrics, many_series)
{
    static char names[300][16];
    srv_metrics *m = srv_metrics_new();
    for (int i = 0; i < 300; i++) {
        snprintf(names[i], sizeof names[i], "/r%d", i);
        srv_metrics_record(m, names[i], 200 + i % 5, 0.1);
    }
    char *s = srv_metrics_render(m, &gauges);
    cr_assert_not_null(strstr(s, "route=\"/r299\",status=\"204\"} 1\n"));
    free(s);
    srv_metrics_free(m);
}
