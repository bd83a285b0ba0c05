/* The daemon's state as the route handlers see it. Internal to server/. */
#ifndef MINICPMD_SERVER_APP_H
#define MINICPMD_SERVER_APP_H

#include "api/api.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"
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
};

/* server/text.c */
int srv_h_tokenize(srv_request *req, struct srv_response *resp);
int srv_h_detokenize(srv_request *req, struct srv_response *resp);
int srv_h_apply_template(srv_request *req, struct srv_response *resp);

extern const struct srv_route srv_routes[];
extern const size_t srv_n_routes;

#endif
