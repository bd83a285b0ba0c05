/* status — what the page's status panel shows, as one JSON object (GET /v1/status):
 * the engine's counters read at render time, and what only the loop thread sees
 * go by: the last requests' speed and K, the K changes, the last device error in
 * full. Loop thread only.
 *
 * Memory is bounded: the recent requests and the K changes are fixed rings. */
#ifndef MINICPMD_SERVER_STATUS_H
#define MINICPMD_SERVER_STATUS_H

#include "engine/gen.h"

#include <stdint.h>

typedef struct srv_status srv_status;

srv_status *srv_status_new(void);
void srv_status_free(srv_status *s);

/* A generation's final event (one per choice), stamped with the wall clock. */
void srv_status_done(srv_status *s, const struct eng_done_event *d);
void srv_status_error(srv_status *s, const struct eng_error_event *e);

/* What the render reads besides the rings; strings may be NULL. */
struct srv_status_view {
    const char *version;
    const char *state;             /* "ready", "loading", … */
    const char *model_id;
    bool demo;                     /* the built-in demo model */
    int n_ctx;                     /* 0 = not loaded */
    const char *device;            /* "cpu", "sim", "xrt" */
    const char *device_description;/* one line: the kernels or the NPU's kernel set */
    int runlist_layers;            /* --runlist-layers: 0 auto, -1 all, else K */
    const struct eng_worker_stats *worker; /* NULL before the model is loaded */
};

/* The JSON body (its fields: docs/api.md, Status), malloc'd, or NULL. */
char *srv_status_render(const srv_status *s, const struct srv_status_view *v);

#endif
