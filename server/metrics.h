/* metrics — the server's Prometheus counters. Loop thread only.
 *
 * Route labels come from the route table (unmatched paths count as "other"), so a
 * client cannot grow the label set by inventing URLs. */
#ifndef MINICPMD_SERVER_METRICS_H
#define MINICPMD_SERVER_METRICS_H

#include "engine/gen.h"
#include <stddef.h>
#include <stdint.h>

typedef struct srv_metrics srv_metrics;

/* Gauges read at render time. */
struct srv_metrics_gauges {
    size_t in_flight;            /* requests being served */
    size_t connections;          /* open TCP connections */
    size_t queue_depth;          /* generation requests waiting for the engine */
    int model_state;             /* api_health_state */
    const char *model_id;        /* or NULL */
    const char *device;          /* or NULL */
    const struct eng_worker_stats *worker; /* the generation worker's counters, or NULL */
};

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* Count one answered request. `route` must outlive `m` (a route table string). */
void srv_metrics_record(srv_metrics *m, const char *route, int status, double seconds);

/* Connections the server closed on its own, by reason. */
enum srv_conn_close {
    SRV_CLOSE_MAX_CONNECTIONS,   /* over --max-connections, at accept */
    SRV_CLOSE_PER_IP,            /* over --max-connections-per-ip, at accept */
    SRV_CLOSE_REQUEST_TIMEOUT,   /* its request did not arrive in --request-timeout */
    SRV_CLOSE__COUNT
};
void srv_metrics_conn_closed(srv_metrics *m, enum srv_conn_close why);

/* Prometheus text exposition format 0.0.4. Returns a malloc'd string or NULL. */
char *srv_metrics_render(const srv_metrics *m, const struct srv_metrics_gauges *g);

#endif
