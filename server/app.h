/* The daemon's state as the route handlers see it. Internal to server/. */
#ifndef MINICPMD_SERVER_APP_H
#define MINICPMD_SERVER_APP_H

#include "api/api.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/worker/sample.h"
#include "engine/text/tokenizer.h"
#include "engine/worker/worker.h"
#include "server/http.h"
#include "server/metrics.h"

#include <stdint.h>

struct srv_app {
    const struct cfg *cfg;
    const struct cfg_model_location *model;
    const char *device;              /* the device that serves, for /health */
    enum api_health_state state;     /* loop thread only */
    uv_loop_t *loop;
    eng_pack *pack;                  /* set when state == API_HEALTH_OK */
    eng_tokenizer *tok;              /* the pack's tokenizer, with the pack */
    char *load_error;
    int64_t model_created;           /* unix time the model became ready */
    srv_http *http;
    srv_metrics *metrics;
    struct srv_mailbox *mailbox;     /* worker -> loop thread */

    /* generation, set with the model */
    struct eng_device *dev;
    eng_worker *worker;
    int n_ctx;                       /* positions a request may use */
    int32_t stop_ids[16];            /* the pack's (eng_pack_stop_ids) */
    int n_stop_ids;
    struct eng_sampling sampling;    /* the pack's defaults (generation_config.json) */
    struct chat *chats;              /* live /v1/chat/completions requests */
};

/* server/text.c */
int srv_h_tokenize(srv_request *req, struct srv_response *resp);
int srv_h_detokenize(srv_request *req, struct srv_response *resp);
int srv_h_apply_template(srv_request *req, struct srv_response *resp);

extern const struct srv_route srv_routes[];
extern const size_t srv_n_routes;

#endif
