/* POST /tokenize, /detokenize and /apply-template (llama.cpp's shapes): what the
 * model is given, for people debugging prompts. Tokenizing and rendering run on
 * libuv's thread pool, never on the loop thread; the request is deferred meanwhile.
 *
 * Bounded: the pool also builds chat prompts, so at most
 * UT_TEXT_JOBS_IN_FLIGHT text jobs hold a pool thread at a time and the others
 * wait in this file's queue (FIFO) — a burst of big /tokenize calls can no longer
 * delay a chat request's prompt by seconds. An answer is at most
 * UT_TEXT_MAX_ANSWER_BYTES (else 413), and after a big job the heap is trimmed so
 * the memory goes back to the system. */
#include "api/text.h"
#include "api/messages.h"
#include "api/chat-req.h"
#include "engine/engine.h"
#include "engine/prompt.h"
#include "server/app.h"

#include "util/defaults.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

enum job_kind { JOB_TOKENIZE, JOB_DETOKENIZE, JOB_APPLY_TEMPLATE, JOB_COUNT_TOKENS };

struct job {
    uv_work_t work;
    enum job_kind kind;
    srv_request *req;
    const eng_tokenizer *tok;
    json_t *root;                  /* the request body */
    struct api_tokenize_req tk;    /* JOB_TOKENIZE */
    struct api_chat_req *creq;     /* JOB_APPLY_TEMPLATE, JOB_COUNT_TOKENS */
    int32_t *ids;                  /* JOB_DETOKENIZE input */
    size_t n_ids;
    struct srv_response resp;      /* filled on the pool thread */
    size_t weight;                 /* request body bytes: when to trim after */
    struct job *next;              /* in the queue */
    bool queued;
};

/* Text jobs waiting for their turn, and how many hold a pool thread. Touched on
 * the loop thread only; one loop per process. */
static struct {
    struct job *head, *tail;
    int running;
} lane;

/* A job whose request body passed this many bytes trims the heap when done. */
#define TRIM_AFTER_BYTES (1u << 20)

static void run_tokenize(struct job *j)
{
    int32_t *ids = NULL;
    int n = eng_tokenizer_encode_special(j->tok, j->tk.content, j->tk.content_len,
                                         j->tk.parse_special, j->tk.add_special, &ids);
    /* The body (the content) is not needed any more: give its memory back before
     * the answer is built. */
    json_decref(j->root);
    j->root = NULL;
    if (n < 0) {
        srv_response_error(&j->resp, API_ERR_INTERNAL, NULL, "tokenizing failed");
        return;
    }
    int rc = api_tokenize_body(ids, (size_t)n, j->tk.with_pieces ? j->tok : NULL,
                               UT_TEXT_MAX_ANSWER_BYTES, &j->resp.body);
    free(ids);
    if (rc == -EFBIG)
        srv_response_error(&j->resp, API_ERR_BODY_TOO_LARGE, "content",
                           "the answer for %d tokens would pass %d MiB; send less text%s", n,
                           UT_TEXT_MAX_ANSWER_BYTES >> 20,
                           j->tk.with_pieces ? " or leave with_pieces off" : "");
    else
        j->resp.status = j->resp.body ? 200 : 0;
}

static void run_detokenize(struct job *j)
{
    size_t len = 0, total = 0;
    for (size_t i = 0; i < j->n_ids; i++) {
        const char *bytes;
        total += eng_tokenizer_token_bytes(j->tok, j->ids[i], false, &bytes);
    }
    /* Escaped, a byte takes up to 6 in JSON. */
    if (total > UT_TEXT_MAX_ANSWER_BYTES / 6) {
        srv_response_error(&j->resp, API_ERR_BODY_TOO_LARGE, "tokens",
                           "the text of these %zu tokens is %zu bytes; at most %d MiB / 6 can "
                           "be answered: send fewer tokens",
                           j->n_ids, total, UT_TEXT_MAX_ANSWER_BYTES >> 20);
        return;
    }
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

/* Anthropic's count_tokens: the prompt a /v1/messages request with this body would
 * give the model, rendered and tokenized as generation does it. */
static void run_count_tokens(struct job *j)
{
    char err[512], param[128];
    struct eng_prompt p;
    if (eng_prompt_build(j->tok, &j->creq->chat, &p, err, sizeof err, param, sizeof param) != 0) {
        srv_response_error(&j->resp, API_ERR_BAD_REQUEST, param[0] ? param : NULL, "%s", err);
        return;
    }
    j->resp.body = api_messages_count_body((int64_t)p.n_ids);
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
    case JOB_COUNT_TOKENS: run_count_tokens(j); break;
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

static void lane_next(uv_loop_t *loop);

static void on_done(uv_work_t *w, int status)
{
    struct job *j = w->data;
    uv_loop_t *loop = w->loop;
    if (status != 0 || j->resp.status == 0)
        srv_response_error(&j->resp, API_ERR_INTERNAL, NULL, "the request could not be served");
    srv_request_complete(j->req, &j->resp);
    bool trim = j->weight >= TRIM_AFTER_BYTES;
    job_free(j);
    lane.running--;
    lane_next(loop);
    /* The job's big blocks are gone (the answer itself is freed by the HTTP layer
     * once sent: it is mmapped, see main()); give the small ones' pages back too. */
    if (trim && lane.running == 0)
        malloc_trim(0);
}

/* Start queued jobs while there is room in the lane. */
static void lane_next(uv_loop_t *loop)
{
    while (lane.head && lane.running < UT_TEXT_JOBS_IN_FLIGHT) {
        struct job *j = lane.head;
        lane.head = j->next;
        if (!lane.head)
            lane.tail = NULL;
        j->queued = false;
        if (uv_queue_work(loop, &j->work, on_work, on_done) != 0) {
            srv_response_error(&j->resp, API_ERR_INTERNAL, NULL, "cannot schedule the work");
            srv_request_complete(j->req, &j->resp);
            job_free(j);
            continue;
        }
        lane.running++;
    }
}

/* The client left or the server stops: a job still in the queue is answered (the
 * HTTP layer drops it) and freed now; a running one finishes in on_done. */
static void on_cancel(void *ud)
{
    struct job *j = ud;
    if (!j->queued)
        return;
    for (struct job **p = &lane.head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        if (*p != j)
            continue;
        *p = j->next;
        if (lane.tail == j)
            lane.tail = prev;
        break;
    }
    srv_response_error(&j->resp, API_ERR_INTERNAL, NULL, "the request was cancelled");
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
    srv_request_body(req, &j->weight);
    j->tok = eng_engine_tokenizer(app->eng);
    j->root = root;
    j->work.data = j;
    return j;
}

static int start(srv_request *req, struct srv_response *resp, struct job *j)
{
    struct srv_app *app = srv_request_app(req);
    (void)resp;
    j->queued = true;
    if (lane.tail)
        lane.tail->next = j;
    else
        lane.head = j;
    lane.tail = j;
    /* A running job is not interrupted (one encode or render): its answer is
     * dropped by srv_request_complete() if the client is gone. */
    srv_request_defer(req, on_cancel, j);
    lane_next(app->loop);
    return 0;
}

static int refuse(struct job *j, struct srv_response *resp, const struct api_err *bad)
{
    srv_response_err(resp, bad);
    job_free(j);
    return 0;
}

int srv_h_tokenize(srv_request *req, struct srv_response *resp)
{
    struct job *j = job_new(req, resp, JOB_TOKENIZE);
    if (!j)
        return 0;
    struct api_err bad;
    if (api_tokenize_parse(j->root, &j->tk, &bad) != 0)
        return refuse(j, resp, &bad);
    return start(req, resp, j);
}

int srv_h_detokenize(srv_request *req, struct srv_response *resp)
{
    struct job *j = job_new(req, resp, JOB_DETOKENIZE);
    if (!j)
        return 0;
    struct api_err bad;
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
    struct api_err bad;
    if (api_chat_req_parse(j->root, &lim, &j->creq, &bad) != 0)
        return refuse(j, resp, &bad);
    return start(req, resp, j);
}

int srv_h_messages_count_tokens(srv_request *req, struct srv_response *resp)
{
    struct job *j = job_new(req, resp, JOB_COUNT_TOKENS);
    if (!j)
        return 0;
    struct srv_app *app = srv_request_app(req);
    struct api_chat_limits lim = srv_app_chat_limits(app, true);
    struct api_err bad;
    struct api_messages_opts opts;
    json_t *chat = NULL;
    int rc = api_messages_translate(j->root, true, &chat, &opts, &bad);
    if (rc == 0 && (rc = api_chat_req_parse(chat, &lim, &j->creq, &bad)) != 0)
        api_messages_rename(&bad);
    json_decref(chat);
    if (rc == 0)
        rc = api_chat_req_check_model(j->creq->model, app->model->id, NULL, 0, &bad);
    if (rc != 0)
        return refuse(j, resp, &bad);
    return start(req, resp, j);
}
