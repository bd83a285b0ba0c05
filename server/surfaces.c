/* The API surfaces other than OpenAI chat, as handlers: each parses its request
 * with its api/ translator into the chat request params (a raw prompt, or the chat
 * template's messages) and hands it with its framing to srv_chat_begin(), the one
 * generation path (server/chat.c). Nothing here generates or frames by itself. */
#include "api/completions.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "server/app.h"
#include "server/chat.h"

#include <stdlib.h>
#include <string.h>

/* ---- POST /v1/completions ---------------------------------------------------------- */

int srv_h_completions(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    if (srv_app_refuse_unready(app, resp))
        return 0;
    json_t *root = srv_request_json(req, resp);
    if (!root)
        return 0;
    struct api_bad_request bad;
    struct api_chat_limits lim = srv_app_chat_limits(app, false);
    struct api_completion *comp = NULL;
    int rc = api_completion_parse(root, &lim, &comp, &bad);
    json_decref(root);   /* the request holds its own reference: comp->text lives on */
    if (rc == 0 &&
        api_chat_req_check_model(comp->req->model, app->model->id, NULL, 0, &bad) != 0)
        rc = -1;
    if (rc != 0) {
        api_completion_free(comp);
        srv_response_bad(resp, &bad);
        return 0;
    }
    /* echo: the prompt as text (token ids decoded as /detokenize does). */
    char *decoded = NULL;
    const char *echo = NULL;
    size_t echo_len = 0;
    if (comp->echo && comp->text) {
        echo = comp->text;
        echo_len = comp->text_len;
    } else if (comp->echo) {
        decoded = eng_tokenizer_decode_len(eng_engine_tokenizer(app->eng), comp->ids,
                                           comp->n_ids, false, &echo_len);
        echo = decoded;
    }
    struct api_chat_format *fmt = NULL;
    if ((!comp->echo || echo) &&
        !(fmt = api_completion_format_new(echo, echo_len, comp->req->include_usage)))
        echo = NULL;
    free(decoded);
    if (!fmt) {
        api_completion_free(comp);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "out of memory");
        return 0;
    }
    struct srv_chat_surface surf = {
        .format = fmt,
        .ping = API_SSE_PING,
        .text = comp->text,
        .text_len = comp->text_len,
        .ids = comp->ids,
        .n_ids = comp->n_ids,
        .free_ctx = api_completion_format_free,
    };
    struct api_chat_req *creq = comp->req;
    comp->req = NULL;
    rc = srv_chat_begin(req, resp, creq, &surf);   /* copies the ids */
    api_completion_free(comp);
    return rc;
}
