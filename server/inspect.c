/* POST /tokenize, /detokenize and /apply-template (llama.cpp's shapes): what the
 * model is given, for people debugging prompts. Tokenizing and rendering run on
 * libuv's thread pool, never on the loop thread; the request is deferred meanwhile. */
#include "api/text.h"
#include "api/chat-req.h"
#include "engine/engine.h"
#include "engine/prompt.h"
#include "server/app.h"

#include <stdlib.h>
#include <string.h>

enum job_kind { JOB_TOKENIZE, JOB_DETOKENIZE, JOB_APPLY_TEMPLATE };

struct job {
    uv_work_t work;
    enum job_kind kind;
    srv_request *req;
    const eng_tokenizer *tok;
    json_t *root;                  /* the request body */
    struct api_tokenize_req tk;    /* JOB_TOKENIZE */
    struct api_chat_req *creq;     /* JOB_APPLY_TEMPLATE */
    int32_t *ids;                  /* JOB_DETOKENIZE input */
    size_t n_ids;
    struct srv_response resp;      /* filled on the pool thread */
};

static void run_tokenize(struct job *j)
{
    int32_t *ids = NULL;
    int n = eng_tokenizer_encode_special(j->tok, j->tk.content, j->tk.content_len,
                                         j->tk.parse_special, j->tk.add_special, &ids);
    if (n < 0) {
        srv_response_error(&j->resp, API_ERR_INTERNAL, NULL, "tokenizing failed");
        return;
    }
    const char **pieces = NULL;
    size_t *lens = NULL;
    if (j->tk.with_pieces) {
        pieces = calloc((size_t)n + 1, sizeof *pieces);
        lens = calloc((size_t)n + 1, sizeof *lens);
        for (int i = 0; pieces && lens && i < n; i++)
            lens[i] = eng_tokenizer_token_bytes(j->tok, ids[i], false, &pieces[i]);
    }
    if (j->tk.with_pieces && (!pieces || !lens))
        j->resp.body = NULL;
    else
        j->resp.body = api_tokenize_body(ids, (size_t)n, pieces, lens);
    j->resp.status = j->resp.body ? 200 : 0;
    free(pieces);
    free(lens);
    free(ids);
}

static void run_detokenize(struct job *j)
{
    size_t len = 0;
    char *text = eng_tokenizer_decode_len(j->tok, j->ids, j->n_ids, false, &len);
    j->resp.body = text ? api_detokenize_body(text, len) : NULL;
    j->resp.status = j->resp.body ? 200 : 0;
    free(text);
}

/* The prompt a chat request with this body would give the model: the same parse
 * (api_chat_req_parse: tools as tool_choice leaves them, enable_thinking) and the
 * same renderer (eng_prompt_build) as POST /v1/chat/completions. */
static void run_apply_template(struct job *j)
{
    char err[512], param[128];
    struct eng_prompt p;
    if (eng_prompt_build(NULL, &j->creq->chat, &p, err, sizeof err, param, sizeof param) != 0) {
        srv_response_error(&j->resp, API_ERR_BAD_REQUEST, param[0] ? param : NULL, "%s", err);
        return;
    }
    j->resp.body = api_apply_template_body(p.text);
    j->resp.status = j->resp.body ? 200 : 0;
    eng_prompt_free(&p);
}

static void on_work(uv_work_t *w)
{
    struct job *j = w->data;
    switch (j->kind) {
    case JOB_TOKENIZE: run_tokenize(j); break;
    case JOB_DETOKENIZE: run_detokenize(j); break;
    case JOB_APPLY_TEMPLATE: run_apply_template(j); break;
    }
}

static void job_free(struct job *j)
{
    api_chat_req_free(j->creq);
    json_decref(j->root);
    free(j->ids);
    free(j->resp.body);
    free(j);
}

static void on_done(uv_work_t *w, int status)
{
    struct job *j = w->data;
    if (status != 0 || j->resp.status == 0)
        srv_response_error(&j->resp, API_ERR_INTERNAL, NULL, "the request could not be served");
    srv_request_complete(j->req, &j->resp);
    job_free(j);
}

/* Shared front half: the model's tokenizer must be there and the body must be a
 * JSON object. Returns the job, or NULL with `resp` filled. */
static struct job *job_new(srv_request *req, struct srv_response *resp, enum job_kind kind)
{
    struct srv_app *app = srv_request_app(req);
    if (srv_app_refuse_unready(app, resp))
        return NULL;
    json_t *root = srv_request_json(req, resp);
    if (!root)
        return NULL;
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        json_decref(root);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    j->kind = kind;
    j->req = req;
    j->tok = eng_engine_tokenizer(app->eng);
    j->root = root;
    j->work.data = j;
    return j;
}

static int start(srv_request *req, struct srv_response *resp, struct job *j)
{
    struct srv_app *app = srv_request_app(req);
    if (uv_queue_work(app->loop, &j->work, on_work, on_done) != 0) {
        job_free(j);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "cannot schedule the work");
        return 0;
    }
    /* The work is short (one encode or render): a cancel only means the answer
     * is dropped, which srv_request_complete() takes care of. */
    srv_request_defer(req, NULL, NULL);
    return 0;
}

static int refuse(struct job *j, struct srv_response *resp, const struct api_bad_request *bad)
{
    srv_response_bad(resp, bad);
    job_free(j);
    return 0;
}

int srv_h_tokenize(srv_request *req, struct srv_response *resp)
{
    struct job *j = job_new(req, resp, JOB_TOKENIZE);
    if (!j)
        return 0;
    struct api_bad_request bad;
    if (api_tokenize_parse(j->root, &j->tk, &bad) != 0)
        return refuse(j, resp, &bad);
    return start(req, resp, j);
}

int srv_h_detokenize(srv_request *req, struct srv_response *resp)
{
    struct job *j = job_new(req, resp, JOB_DETOKENIZE);
    if (!j)
        return 0;
    struct api_bad_request bad;
    if (api_detokenize_parse(j->root, eng_tokenizer_n_vocab(j->tok), &j->ids, &j->n_ids, &bad))
        return refuse(j, resp, &bad);
    return start(req, resp, j);
}

int srv_h_apply_template(srv_request *req, struct srv_response *resp)
{
    struct job *j = job_new(req, resp, JOB_APPLY_TEMPLATE);
    if (!j)
        return 0;
    struct api_chat_limits lim = srv_app_chat_limits(srv_request_app(req), true);
    struct api_bad_request bad;
    if (api_chat_req_parse(j->root, &lim, &j->creq, &bad) != 0)
        return refuse(j, resp, &bad);
    return start(req, resp, j);
}
