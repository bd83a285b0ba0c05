/* The route table and the handlers of the routes the daemon shell serves. Bodies
 * come from api/; this file only decides which one and with what status. */
#include "api/messages.h"
#include "server/app.h"
#include "server/chat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct srv_app *app_of(srv_request *req) { return srv_request_app(req); }

static void fill_meta(const struct srv_app *app, struct api_model_meta *meta)
{
    const struct eng_pack_info *info = eng_pack_get_info(eng_engine_pack(app->eng));
    *meta = (struct api_model_meta){
        .n_layers = info->hp.n_layers,
        .n_embd = info->hp.n_embd,
        .n_heads = info->hp.n_heads,
        .n_kv_heads = info->hp.n_kv_heads,
        .n_vocab = info->hp.n_vocab,
        .n_ctx_train = info->hp.n_ctx_train,
        .size_bytes = info->weights_bytes,
    };
}

static const char *model_status(enum api_health_state s)
{
    switch (s) {
    case API_HEALTH_OK: return "ready";
    case API_HEALTH_LOADING: return "loading";
    case API_HEALTH_FAILED: return "failed";
    default: return "unavailable";
    }
}

/* The one model this daemon serves, or false when it serves none. */
static bool describe_model(const struct srv_app *app, struct api_model *m,
                           struct api_model_meta *meta)
{
    if (!app->model || app->model->source == CFG_MODEL_NONE)
        return false;
    bool ready = app->state == API_HEALTH_OK && app->eng;
    if (ready)
        fill_meta(app, meta);
    *m = (struct api_model){
        .id = app->model->id,
        .created = app->model_created,
        .owned_by = "minicpmd",
        .meta = ready ? meta : NULL,
        .status = model_status(app->state),
        .demo = app->model->source == CFG_MODEL_EMBEDDED,
    };
    return true;
}

bool srv_app_unready(const struct srv_app *app, struct api_err *e)
{
    if (app->state == API_HEALTH_OK && app->eng)
        return false;
    if (app->state == API_HEALTH_LOADING)
        api_refuse(e, API_ERR_LOADING, NULL, "the model is loading");
    else
        api_refuse(e, API_ERR_NO_MODEL, NULL, "no model is loaded");
    return true;
}

bool srv_app_refuse_unready(const struct srv_app *app, struct srv_response *resp)
{
    struct api_err e;
    if (!srv_app_unready(app, &e))
        return false;
    srv_response_err(resp, &e);
    return true;
}

json_t *srv_request_json(srv_request *req, struct srv_response *resp)
{
    struct api_err bad;
    size_t len;
    const char *body = srv_request_body(req, &len);
    json_t *root = api_parse_object(body, len, &bad);
    if (!root)
        srv_response_err(resp, &bad);
    return root;
}

json_t *srv_request_generation(srv_request *req, struct srv_response *resp,
                               struct api_chat_limits *lim)
{
    struct srv_app *app = srv_request_app(req);
    if (srv_app_refuse_unready(app, resp))
        return NULL;
    json_t *root = srv_request_json(req, resp);
    if (root)
        *lim = srv_app_chat_limits(app, false);
    return root;
}

void srv_response_err(struct srv_response *resp, const struct api_err *e)
{
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
    resp->err = *e;
    resp->has_err = true;
    resp->status = api_err_status(e);
    resp->content_type = "application/json";
    resp->retry_after = api_err_retry_after(e);
}

struct api_chat_limits srv_app_chat_limits(const struct srv_app *app, bool template_only)
{
    return (struct api_chat_limits){
        .n_vocab = eng_pack_get_info(eng_engine_pack(app->eng))->hp.n_vocab,
        .defaults = eng_engine_sampling(app->eng),
        .max_tokens = eng_engine_max_new_tokens(app->eng),
        .template_only = template_only,
        .grammar = &app->gram_limits,
        .defer_grammar = !template_only,   /* the chat's pool job compiles it */
        .thinking = app->cfg->thinking == CFG_THINKING_ON    ? ENG_THINKING_ON
                    : app->cfg->thinking == CFG_THINKING_OFF ? ENG_THINKING_OFF
                                                             : ENG_THINKING_UNSET,
    };
}

static int h_health(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = app_of(req);
    struct api_health h = {
        .state = app->state,
        .model = app->model && app->model->source != CFG_MODEL_NONE ? app->model->id : NULL,
        .device = app->device,
        .detail = app->state == API_HEALTH_FAILED   ? app->load_error
                  : app->state == API_HEALTH_NO_MODEL ? "no model configured or found; see "
                                                        "--model in the README"
                                                      : NULL,
    };
    if (app->eng && h.state == API_HEALTH_OK) {
        struct eng_worker_stats ws;
        eng_engine_get_stats(app->eng, &ws);
        h.device_description = eng_engine_device_description(app->eng);
        h.has_slots = true;
        h.slots_in_use = ws.active;
        h.slots_total = ws.parallel;
        if ((h.device_down = ws.device_down))
            h.detail = "the last device reset failed: each request tries a reset first and "
                       "is refused with a 500 device_error while it fails";
    }
    resp->status = api_health_status(h.state);
    resp->body = api_health_body(&h);
    if (h.state == API_HEALTH_LOADING)
        resp->retry_after = "2";
    return resp->body ? 0 : -ENOMEM;
}

static int h_models(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = app_of(req);
    struct api_model m;
    struct api_model_meta meta;
    bool have = describe_model(app, &m, &meta);
    resp->status = 200;
    resp->body = api_models_body(&m, have ? 1 : 0);
    return resp->body ? 0 : -ENOMEM;
}

static int h_model(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = app_of(req);
    struct api_model m;
    struct api_model_meta meta;
    const char *id = srv_request_param(req);
    if (!describe_model(app, &m, &meta) || strcmp(id, m.id) != 0) {
        srv_response_error(resp, API_ERR_MODEL_NOT_FOUND, "model",
                           "the model '%s' does not exist (GET /v1/models lists the models)",
                           id);
        return 0;
    }
    resp->status = 200;
    resp->body = api_model_body(&m);
    return resp->body ? 0 : -ENOMEM;
}

static int h_metrics(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = app_of(req);
    struct eng_worker_stats ws;
    if (app->eng)
        eng_engine_get_stats(app->eng, &ws);
    struct srv_metrics_gauges g = {
        .in_flight = srv_http_inflight(app->http),
        .connections = srv_http_connections(app->http),
        .queue_depth = app->eng ? (size_t)ws.queue_depth : 0,
        .worker = app->eng ? &ws : NULL,
        .model_state = (int)app->state,
        .model_id = app->model && app->model->source != CFG_MODEL_NONE ? app->model->id : NULL,
        .device = app->device,
    };
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = srv_metrics_render(app->metrics, &g);
    return resp->body ? 0 : -ENOMEM;
}

const struct srv_route srv_routes[] = {
    {"GET", "/health", "/health", true, h_health, NULL},
    {"GET", "/v1/models", "/v1/models", false, h_models, NULL},
    {"GET", "/v1/models/{id}", "/v1/models/{id}", false, h_model, NULL},
    {"GET", "/metrics", "/metrics", false, h_metrics, NULL},
    {"GET", "/v1/status", "/v1/status", false, srv_h_status, NULL},
    /* The page (server/webui.c): public, it asks for the key itself */
    {"GET", "/", "/ui", true, srv_h_webui, NULL},
    {"GET", "/ui/", "/ui", true, srv_h_webui, NULL},
    {"GET", "/ui/{id}", "/ui", true, srv_h_webui, NULL},
    {"POST", "/v1/chat/completions", "/v1/chat/completions", false, srv_h_chat_completions, NULL},
    {"POST", "/v1/completions", "/v1/completions", false, srv_h_completions, NULL},
    {"POST", "/v1/responses", "/v1/responses", false, srv_h_responses, NULL},
    /* Anthropic's Messages API: its errors in its shape */
    {"POST", "/v1/messages", "/v1/messages", false, srv_h_messages, api_messages_err_body},
    {"POST", "/v1/messages/count_tokens", "/v1/messages/count_tokens", false,
     srv_h_messages_count_tokens, api_messages_err_body},
    /* The Ollama API (server/surfaces.c, api/ollama.h) */
    {"GET", "/api/version", "/api/version", false, srv_h_ollama_version, NULL},
    {"GET", "/api/tags", "/api/tags", false, srv_h_ollama_tags, NULL},
    {"GET", "/api/ps", "/api/ps", false, srv_h_ollama_ps, NULL},
    {"POST", "/api/show", "/api/show", false, srv_h_ollama_show, NULL},
    {"POST", "/api/chat", "/api/chat", false, srv_h_ollama_chat, NULL},
    {"POST", "/api/generate", "/api/generate", false, srv_h_ollama_generate, NULL},
    {"POST", "/tokenize", "/tokenize", false, srv_h_tokenize, NULL},
    {"POST", "/detokenize", "/detokenize", false, srv_h_detokenize, NULL},
    {"POST", "/apply-template", "/apply-template", false, srv_h_apply_template, NULL},
};
const size_t srv_n_routes = sizeof srv_routes / sizeof *srv_routes;
