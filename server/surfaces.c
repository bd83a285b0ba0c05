/* The API surfaces other than OpenAI chat, as handlers: each parses its request
 * with its api/ translator into the chat request params (a raw prompt, or the chat
 * template's messages) and hands it with its framing to srv_chat_begin(), the one
 * generation path (server/chat.c). Nothing here generates or frames by itself. */
#include "api/completions.h"
#include "api/messages.h"
#include "api/ollama.h"
#include "api/responses.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "server/app.h"
#include "server/chat.h"

#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- POST /v1/completions ---------------------------------------------------------- */

/* Each prompt of a list is one choice of the one generation path. */
_Static_assert(API_COMPLETION_MAX_PROMPTS <= UT_MAX_CHOICES, "more prompts than choices");

int srv_h_completions(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    struct api_chat_limits lim;
    json_t *root = srv_request_generation(req, resp, &lim);
    if (!root)
        return 0;
    struct api_err bad;
    struct api_completion *comp = NULL;
    int rc = api_completion_parse(root, &lim, &comp, &bad);
    json_decref(root);   /* the request holds its own reference: comp->text lives on */
    if (rc == 0 &&
        api_chat_req_check_model(comp->req->model, app->model->id, NULL, 0, &bad) != 0)
        rc = -1;
    if (rc != 0) {
        api_completion_free(comp);
        srv_response_err(resp, &bad);
        return 0;
    }
    /* One framing per prompt: its echo (token ids decoded as /detokenize does) and
     * its choice index. */
    const struct api_chat_format *fmts[API_COMPLETION_MAX_PROMPTS] = {0};
    struct srv_raw_prompt more[API_COMPLETION_MAX_PROMPTS];
    bool ok = true;
    for (size_t i = 0; i < comp->n_prompts && ok; i++) {
        const struct api_completion_prompt *q = &comp->prompts[i];
        char *decoded = NULL;
        const char *echo = NULL;
        size_t echo_len = 0;
        if (comp->echo && q->text) {
            echo = q->text;
            echo_len = q->text_len;
        } else if (comp->echo) {
            decoded = eng_tokenizer_decode_len(eng_engine_tokenizer(app->eng), q->ids, q->n_ids,
                                               false, &echo_len);
            echo = decoded;
        }
        ok = (!comp->echo || echo) &&
             (fmts[i] = api_completion_format_new(echo, echo_len, comp->req->include_usage,
                                                  (int)i, comp->req->prompt_logprobs));
        free(decoded);
        if (i > 0)
            more[i - 1] = (struct srv_raw_prompt){q->text, q->text_len, q->ids, q->n_ids};
    }
    if (!ok) {
        for (size_t i = 0; i < comp->n_prompts; i++)
            api_completion_format_free(fmts[i] ? fmts[i]->ctx : NULL);
        api_completion_free(comp);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "out of memory");
        return 0;
    }
    struct srv_chat_surface surf = {
        .format = fmts[0],
        .ping = API_SSE_PING,
        .text = comp->text,
        .text_len = comp->text_len,
        .ids = comp->ids,
        .n_ids = comp->n_ids,
        .free_ctx = api_completion_format_free,
        .n_prompts = (int)comp->n_prompts,
        .more = more,
        .formats = fmts,
        .merge = api_completion_body_multi,
    };
    struct api_chat_req *creq = comp->req;
    comp->req = NULL;
    rc = srv_chat_begin(req, resp, creq, &surf);   /* copies the ids */
    api_completion_free(comp);
    return rc;
}

/* ---- the Ollama API ------------------------------------------------------------------- */

/* `e` answered in Ollama's shape. */
static void ollama_err(struct srv_response *resp, const struct api_err *e)
{
    free(resp->body);
    resp->status = api_err_status(e);
    resp->body = api_ollama_err_body(e);
    resp->retry_after = api_err_retry_after(e);
    resp->content_type = NULL;
}

static void ollama_fail(struct srv_response *resp, enum api_error kind, const char *msg)
{
    struct api_err e;
    api_refuse(&e, kind, NULL, "%s", msg);
    ollama_err(resp, &e);
}

/* The served model as Ollama describes it; false when none is ready. */
static bool ollama_model(const struct srv_app *app, struct api_ollama_model *m, char digest[65])
{
    if (!app->model || app->model->source == CFG_MODEL_NONE || app->state != API_HEALTH_OK ||
        !app->eng)
        return false;
    const struct eng_pack_info *info = eng_pack_get_info(eng_engine_pack(app->eng));
    const struct eng_hparams *hp = &info->hp;
    int64_t e = hp->n_embd, hd = hp->head_dim ? hp->head_dim : e / (hp->n_heads ? hp->n_heads : 1);
    int64_t per_layer = e * hp->n_heads * hd * 2 + 2 * e * hp->n_kv_heads * hd +
                        3 * e * hp->n_ff + 2 * e;
    /* A digest that names this model and pack (Ollama's is its manifest's). */
    char seed[512];
    snprintf(seed, sizeof seed, "%s|%s|%lld", app->model->id, info->dir,
             (long long)info->weights_bytes);
    uint8_t d[SHA256_DIGEST_SIZE];
    struct sha256_ctx sc;
    sha256_init(&sc);
    sha256_update(&sc, strlen(seed), (const uint8_t *)seed);
    sha256_digest(&sc, sizeof d, d);
    for (size_t i = 0; i < sizeof d; i++)
        snprintf(digest + 2 * i, 3, "%02x", d[i]);
    *m = (struct api_ollama_model){
        .name = app->model->id,
        .modified = app->model_created,
        .size = info->weights_bytes,
        .digest = digest,
        .n_params = (int64_t)hp->n_vocab * e * (hp->tie_embeddings ? 1 : 2) +
                    per_layer * hp->n_layers + e,
        .n_ctx = eng_engine_n_ctx(app->eng),
        .n_ctx_train = hp->n_ctx_train, .n_embd = hp->n_embd, .n_layers = hp->n_layers,
        .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads, .n_vocab = hp->n_vocab,
        .quantization = eng_weights_format_name(info->format),
    };
    return true;
}

int srv_h_ollama_version(srv_request *req, struct srv_response *resp)
{
    (void)req;
    resp->status = 200;
    resp->body = api_ollama_version_body();
    return resp->body ? 0 : -ENOMEM;
}

static int ollama_list(srv_request *req, struct srv_response *resp, bool ps)
{
    struct api_ollama_model m;
    char digest[65];
    bool have = ollama_model(srv_request_app(req), &m, digest);
    resp->status = 200;
    resp->body = api_ollama_models_body(&m, have ? 1 : 0, ps);
    return resp->body ? 0 : -ENOMEM;
}

int srv_h_ollama_tags(srv_request *req, struct srv_response *resp)
{
    return ollama_list(req, resp, false);
}

int srv_h_ollama_ps(srv_request *req, struct srv_response *resp)
{
    return ollama_list(req, resp, true);
}

/* The body as a JSON object and its "model" (or the older "name"), or NULL with
 * `resp` answered in Ollama's shape. */
static json_t *ollama_body(srv_request *req, struct srv_response *resp, const char **model)
{
    struct api_err bad;
    size_t len;
    const char *body = srv_request_body(req, &len);
    json_t *root = api_parse_object(body, len, &bad);
    if (!root) {
        ollama_err(resp, &bad);
        return NULL;
    }
    const json_t *m = json_object_get(root, "model");
    if (!json_is_string(m))
        m = json_object_get(root, "name");
    *model = json_string_value(m);
    if (!*model) {
        json_decref(root);
        ollama_fail(resp, API_ERR_BAD_REQUEST, "model is required");
        return NULL;
    }
    return root;
}

static bool ollama_known(const struct srv_app *app, const char *model, struct srv_response *resp)
{
    if (app->model && api_ollama_name_is(model, app->model->id))
        return true;
    char msg[300];
    snprintf(msg, sizeof msg, "model '%.200s' not found", model);
    ollama_fail(resp, API_ERR_MODEL_NOT_FOUND, msg);
    return false;
}

int srv_h_ollama_show(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    const char *model;
    json_t *root = ollama_body(req, resp, &model);
    if (!root)
        return 0;
    struct api_ollama_model m;
    char digest[65];
    struct api_err e;
    if (ollama_known(app, model, resp)) {
        if (!ollama_model(app, &m, digest)) {
            if (!srv_app_unready(app, &e))   /* ready, yet not describable */
                api_refuse(&e, API_ERR_NO_MODEL, NULL, "no model is loaded");
            ollama_err(resp, &e);
        } else {
            resp->status = 200;
            resp->body = api_ollama_show_body(&m);
        }
    }
    json_decref(root);
    return 0;
}

/* POST /api/chat and /api/generate: translated into an OpenAI body, parsed as chat
 * or completions are, and run on the one path with Ollama's framing. */
static int ollama_generate(srv_request *req, struct srv_response *resp, bool generate)
{
    struct srv_app *app = srv_request_app(req);
    struct api_err bad;
    if (srv_app_unready(app, &bad)) {
        ollama_err(resp, &bad);
        return 0;
    }
    const char *model;
    json_t *root = ollama_body(req, resp, &model);
    if (!root)
        return 0;
    enum api_ollama_kind kind;
    json_t *obj = NULL;
    struct api_chat_req *creq = NULL;
    struct api_completion *comp = NULL;
    struct api_chat_limits lim = srv_app_chat_limits(app, false);
    int rc = -1;
    if (!ollama_known(app, model, resp))
        goto out;
    if (api_ollama_translate(root, generate, &kind, &obj, &bad) != 0)
        goto bad;
    if (kind == API_OLLAMA_LOAD) {
        resp->status = 200;
        resp->body = api_ollama_load_body(model);
        goto out;
    }
    if (kind == API_OLLAMA_GENERATE_RAW ? api_completion_parse(obj, &lim, &comp, &bad)
                                        : api_chat_req_parse(obj, &lim, &creq, &bad))
        goto bad;
    struct api_chat_format *fmt = api_ollama_format_new(generate, model);
    if (!fmt) {
        ollama_fail(resp, API_ERR_INTERNAL, "out of memory");
        goto out;
    }
    struct srv_chat_surface surf = {
        .format = fmt,
        .content_type = "application/x-ndjson",
        .free_ctx = api_ollama_format_free,
    };
    if (comp) {
        surf.text = comp->text;
        surf.text_len = comp->text_len;
        creq = comp->req;
        comp->req = NULL;
    }
    rc = srv_chat_begin(req, resp, creq, &surf);   /* its refusals in Ollama's shape */
    creq = NULL;
    goto out;
bad:
    ollama_err(resp, &bad);
out:
    api_completion_free(comp);
    api_chat_req_free(creq);
    json_decref(obj);
    json_decref(root);
    (void)rc;
    return 0;
}

int srv_h_ollama_chat(srv_request *req, struct srv_response *resp)
{
    return ollama_generate(req, resp, false);
}

int srv_h_ollama_generate(srv_request *req, struct srv_response *resp)
{
    return ollama_generate(req, resp, true);
}

/* ---- POST /v1/responses ------------------------------------------------------------------ */

int srv_h_responses(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    struct api_chat_limits lim;
    json_t *root = srv_request_generation(req, resp, &lim);
    if (!root)
        return 0;
    struct api_err bad;
    json_t *chat = NULL, *echo = NULL;
    struct api_chat_req *creq = NULL;
    int rc = api_responses_translate(root, &chat, &echo, &bad);
    json_decref(root);
    if (rc == 0)
        rc = api_chat_req_parse(chat, &lim, &creq, &bad);
    json_decref(chat);   /* creq holds its own reference */
    if (rc == 0 && api_chat_req_check_model(creq->model, app->model->id, NULL, 0, &bad) != 0)
        rc = -1;
    struct api_chat_format *fmt = rc == 0 ? api_responses_format_new(echo) : NULL;
    json_decref(echo);   /* the format holds its own reference */
    if (rc != 0) {
        api_chat_req_free(creq);
        api_responses_err_names(&bad);
        srv_response_err(resp, &bad);
        return 0;
    }
    if (!fmt) {
        api_chat_req_free(creq);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "out of memory");
        return 0;
    }
    struct srv_chat_surface surf = {
        .format = fmt,
        .ping = API_SSE_PING,
        .free_ctx = api_responses_format_free,
    };
    return srv_chat_begin(req, resp, creq, &surf);
}

/* ---- POST /v1/messages (Anthropic) ------------------------------------------------------- */

/* Errors are rendered in Anthropic's shape: by the route (srv_route.error_body)
 * when refused here, by the framing once generation began. */
int srv_h_messages(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    struct api_chat_limits lim;
    json_t *root = srv_request_generation(req, resp, &lim);
    if (!root)
        return 0;
    struct api_err bad;
    struct api_messages_opts opts;
    json_t *chat = NULL;
    struct api_chat_req *creq = NULL;
    int rc = api_messages_translate(root, false, &chat, &opts, &bad);
    json_decref(root);
    if (rc == 0 && (rc = api_chat_req_parse(chat, &lim, &creq, &bad)) != 0)
        api_messages_rename(&bad);
    json_decref(chat);   /* creq holds its own reference */
    if (rc == 0 && api_chat_req_check_model(creq->model, app->model->id, NULL, 0, &bad) != 0)
        rc = -1;
    struct api_chat_format *fmt = rc == 0 ? api_messages_format_new(creq, &opts) : NULL;
    if (rc != 0) {
        api_chat_req_free(creq);
        srv_response_err(resp, &bad);
        return 0;
    }
    if (!fmt) {
        api_chat_req_free(creq);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "out of memory");
        return 0;
    }
    struct srv_chat_surface surf = {
        .format = fmt,
        .ping = API_MESSAGES_PING,
        .free_ctx = api_messages_format_free,
    };
    return srv_chat_begin(req, resp, creq, &surf);
}
