/* The daemon's state as the route handlers see it. Internal to server/. */
#ifndef MINICPMD_SERVER_APP_H
#define MINICPMD_SERVER_APP_H

#include "api/api.h"
#include "api/chat-req.h"
#include "config/config.h"
#include "engine/engine.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/status.h"

#include <stdbool.h>
#include <stdint.h>

struct srv_app {
    const struct cfg *cfg;
    const struct cfg_model_location *model;
    const char *device;              /* the device that serves, for /health */
    enum api_health_state state;     /* loop thread only */
    uv_loop_t *loop;
    eng_engine *eng;                 /* set when state == API_HEALTH_OK */
    char *load_error;
    int64_t model_created;           /* unix time the model became ready */
    srv_http *http;
    srv_metrics *metrics;
    srv_status *status;              /* the page's status panel (GET /v1/status) */
    struct srv_mailbox *mailbox;     /* worker -> loop thread */
    struct chat *chats;              /* live /v1/chat/completions requests */
    struct eng_gram_limits gram_limits;   /* --grammar-*, for every request's grammar */
};

/* Whether no model is ready to serve a generation or tokenizer route; then `e` is
 * why (503 loading, with Retry-After, or no model). server/handlers.c */
bool srv_app_unready(const struct srv_app *app, struct api_err *e);
/* srv_app_unready() answered in `resp` as an OpenAI error. */
bool srv_app_refuse_unready(const struct srv_app *app, struct srv_response *resp);

/* The request body as a JSON object, or NULL with `resp` answered (400). */
json_t *srv_request_json(srv_request *req, struct srv_response *resp);

/* A generation route's start: 503 while no model is ready, else the body as a JSON
 * object and the limits a request is checked against; NULL with `resp` answered. */
json_t *srv_request_generation(srv_request *req, struct srv_response *resp,
                               struct api_chat_limits *lim);

/* `resp` answers `e` as an OpenAI error: status, body and Retry-After from api's
 * table (a surface of another shape renders its own, e.g. api_ollama_err_body). */
void srv_response_err(struct srv_response *resp, const struct api_err *bad);

/* What a chat request is checked against: the model's vocabulary and sampling
 * defaults; template_only for /apply-template. The model must be ready. */
struct api_chat_limits srv_app_chat_limits(const struct srv_app *app, bool template_only);

/* server/inspect.c */
int srv_h_tokenize(srv_request *req, struct srv_response *resp);
int srv_h_detokenize(srv_request *req, struct srv_response *resp);
int srv_h_apply_template(srv_request *req, struct srv_response *resp);
int srv_h_messages_count_tokens(srv_request *req, struct srv_response *resp);

/* server/surfaces.c: the API surfaces other than chat, each translated onto the
 * one generation path of server/chat.c */
int srv_h_completions(srv_request *req, struct srv_response *resp);
int srv_h_responses(srv_request *req, struct srv_response *resp);
int srv_h_messages(srv_request *req, struct srv_response *resp);
int srv_h_ollama_version(srv_request *req, struct srv_response *resp);
int srv_h_ollama_tags(srv_request *req, struct srv_response *resp);
int srv_h_ollama_ps(srv_request *req, struct srv_response *resp);
int srv_h_ollama_show(srv_request *req, struct srv_response *resp);
int srv_h_ollama_chat(srv_request *req, struct srv_response *resp);
int srv_h_ollama_generate(srv_request *req, struct srv_response *resp);

/* server/status.c: GET /v1/status; server/webui.c: the page and its assets */
int srv_h_status(srv_request *req, struct srv_response *resp);
int srv_h_webui(srv_request *req, struct srv_response *resp);

extern const struct srv_route srv_routes[];
extern const size_t srv_n_routes;

#endif
