/* POST /v1/chat/completions over the worker.
 *
 * One `struct chat` per request, owned by the loop thread:
 *
 *   handler      validate (api/chat-req), check the model, defer the request
 *   thread pool  render the chat template and tokenize (eng_prompt_build)
 *   loop         check the context, submit to the worker (503 when the queue is
 *                full); a stream answers its headers and first chunk at once
 *   worker       TOKEN events, then one final DONE or ERROR (engine/worker/worker.h),
 *                copied and posted to the loop thread through the mailbox
 *   loop         text -> output parser (reasoning / content / tool calls) ->
 *                chunks (stream) or the accumulated message (non-stream)
 *
 * A client that leaves (hang-up watch, MHD, a full stream buffer) cancels the
 * worker's request; the chat is freed when the worker's final event has arrived
 * and the answer is done, whichever comes last (style rule 10). */
#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "engine/text/outparse.h"
#include "engine/text/prompt.h"
#include "engine/worker/worker.h"
#include "minicpmd-build.h"
#include "server/app.h"
#include "server/chat.h"
#include "server/log.h"
#include "server/mailbox.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A stream keeps at most this much unread by a slow client; past it the request is
 * cancelled and the connection closed (README: backpressure). */
#define STREAM_LIMIT (1u << 20)
/* An SSE comment this often while nothing else was written (queue, prefill). */
#define PING_MS 5000

struct text {
    char *s;
    size_t len, cap;
};

struct tool {
    char id[API_TOOL_CALL_ID_SIZE];
    char *name, *args;
};

struct lp {                      /* one token's logprobs, strings owned */
    char *token;
    size_t len;
    float logprob;
    struct api_top_logprob *top;
    int n_top;
};

struct chat {
    struct chat *prev, *next;    /* app's list of live chats */
    struct srv_app *app;
    srv_request *req;            /* NULL once answered */
    struct api_chat_req *creq;
    uv_work_t work;
    struct eng_prompt prompt;
    int prompt_rc;
    char err[512], param[128];
    eng_gen_req *greq;
    bool in_pool, submitted, final_seen, gone;

    struct api_chat_ident ident;
    eng_outparse *op;
    struct eng_delta_list deltas;
    bool in_reasoning;
    int32_t reasoning_tokens;
    struct text content, reasoning;
    struct tool *tools;
    size_t n_tools;
    struct lp *lps;              /* non-stream: all; stream: not yet sent */
    size_t n_lps, cap_lps;

    srv_stream *stream;
    uint64_t last_write;
};

/* ---- small owned buffers ------------------------------------------------------ */

static int text_add(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p)
            return -ENOMEM;
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return 0;
}

static void lps_clear(struct chat *c)
{
    for (size_t i = 0; i < c->n_lps; i++) {
        free(c->lps[i].token);
        for (int k = 0; k < c->lps[i].n_top; k++)
            free((char *)c->lps[i].top[k].token);
        free(c->lps[i].top);
    }
    c->n_lps = 0;
}

static void chat_free(struct chat *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (c->app->chats == c)
        c->app->chats = c->next;
    if (c->next)
        c->next->prev = c->prev;
    lps_clear(c);
    free(c->lps);
    for (size_t i = 0; i < c->n_tools; i++) {
        free(c->tools[i].name);
        free(c->tools[i].args);
    }
    free(c->tools);
    free(c->content.s);
    free(c->reasoning.s);
    eng_delta_list_clear(&c->deltas);
    eng_outparse_free(c->op);
    eng_gen_req_free(c->greq);
    eng_prompt_free(&c->prompt);
    api_chat_req_free(c->creq);
    free(c);
}

/* Free when nothing can still reach the chat. */
static void chat_maybe_free(struct chat *c)
{
    if (c->in_pool || (c->submitted && !c->final_seen) || c->req || c->stream)
        return;
    chat_free(c);
}

/* ---- answering ----------------------------------------------------------------- */

static void answer(struct chat *c, struct srv_response *resp)
{
    if (!c->req) {
        free(resp->body);
        return;
    }
    srv_request_complete(c->req, resp);
    c->req = NULL;
}

static void answer_error(struct chat *c, enum api_error e, const char *param, const char *msg)
{
    struct srv_response r = {0};
    srv_response_error(&r, e, param, "%s", msg);
    answer(c, &r);
}

static void stream_end(struct chat *c)
{
    if (c->stream) {
        srv_stream_end(c->stream);
        c->stream = NULL;
    }
}

/* Write to the stream; a client that left or reads too slowly ends the request. */
static void stream_put(struct chat *c, char *data)
{
    if (!c->stream || !data) {
        free(data);
        return;
    }
    int rc = srv_stream_write(c->stream, data, strlen(data));
    free(data);
    c->last_write = uv_now(c->app->loop);
    if (rc == 0)
        return;
    if (rc == -ENOBUFS)
        log_warn("%s: the client reads too slowly (%u bytes unread): ending the stream",
                 c->ident.id, STREAM_LIMIT);
    c->gone = true;
    if (c->greq)
        eng_gen_req_cancel(c->greq);
    stream_end(c);
}

static void on_cancel(void *ud)
{
    struct chat *c = ud;
    c->gone = true;
    if (c->greq)
        eng_gen_req_cancel(c->greq);
}

/* ---- output: text -> deltas ---------------------------------------------------- */

static int keep_tool(struct chat *c, const struct eng_delta *d)
{
    struct tool *t = realloc(c->tools, (c->n_tools + 1) * sizeof *t);
    if (!t)
        return -ENOMEM;
    c->tools = t;
    t += c->n_tools;
    api_tool_call_id(t->id);
    t->name = strdup(d->name ? d->name : "");
    t->args = strdup(d->arguments ? d->arguments : "{}");
    c->n_tools++;
    return t->name && t->args ? 0 : -ENOMEM;
}

static void pending_logprobs(const struct chat *c, struct api_token_logprob *out)
{
    for (size_t i = 0; i < c->n_lps; i++)
        out[i] = (struct api_token_logprob){c->lps[i].token, c->lps[i].len, c->lps[i].logprob,
                                            c->lps[i].top, c->lps[i].n_top};
}

/* Deltas the parser is sure of: into the message, or out as chunks. */
static void flush_deltas(struct chat *c)
{
    for (size_t i = 0; i < c->deltas.n; i++) {
        const struct eng_delta *d = &c->deltas.items[i];
        c->in_reasoning = d->kind == ENG_DELTA_REASONING;
        if (d->kind == ENG_DELTA_TOOL_CALL && keep_tool(c, d) != 0)
            continue;
        if (!c->stream) {
            if (d->kind == ENG_DELTA_CONTENT)
                text_add(&c->content, d->text, strlen(d->text));
            else if (d->kind == ENG_DELTA_REASONING)
                text_add(&c->reasoning, d->text, strlen(d->text));
            continue;
        }
        struct api_chat_delta cd = {0};
        struct api_tool_call_delta tc;
        if (d->kind == ENG_DELTA_CONTENT)
            cd.content = d->text;
        else if (d->kind == ENG_DELTA_REASONING)
            cd.reasoning = d->text;
        else {
            const struct tool *t = &c->tools[c->n_tools - 1];
            tc = (struct api_tool_call_delta){(int)c->n_tools - 1, t->id, t->name, t->args};
            cd.tool_calls = &tc;
            cd.n_tool_calls = 1;
        }
        struct api_token_logprob *lp = NULL;
        if (c->creq->logprobs && c->n_lps && (lp = calloc(c->n_lps, sizeof *lp))) {
            pending_logprobs(c, lp);
            cd.logprobs = true;
            cd.tokens = lp;
            cd.n_tokens = c->n_lps;
        }
        stream_put(c, api_sse_event(api_chat_chunk_delta(&c->ident, &cd)));
        if (lp) {
            free(lp);
            lps_clear(c);
        }
    }
    eng_delta_list_clear(&c->deltas);
}

static void keep_logprob(struct chat *c, const struct eng_token_event *t)
{
    const eng_tokenizer *tok = c->app->tok;
    if (c->n_lps == c->cap_lps) {
        size_t cap = c->cap_lps ? c->cap_lps * 2 : 16;
        struct lp *p = realloc(c->lps, cap * sizeof *p);
        if (!p)
            return;
        c->lps = p;
        c->cap_lps = cap;
    }
    struct lp *l = &c->lps[c->n_lps];
    const char *bytes;
    l->len = eng_tokenizer_token_bytes(tok, t->id, false, &bytes);
    l->token = malloc(l->len + 1);
    l->top = t->n_top ? calloc((size_t)t->n_top, sizeof *l->top) : NULL;
    if (!l->token || (t->n_top && !l->top)) {
        free(l->token);
        free(l->top);
        return;
    }
    memcpy(l->token, bytes, l->len);
    l->token[l->len] = '\0';
    l->logprob = t->logprob;
    l->n_top = 0;
    for (int k = 0; k < t->n_top; k++) {
        size_t n = eng_tokenizer_token_bytes(tok, t->top[k].id, false, &bytes);
        char *s = malloc(n + 1);
        if (!s)
            break;
        memcpy(s, bytes, n);
        s[n] = '\0';
        l->top[l->n_top++] = (struct api_top_logprob){s, n, t->top[k].logprob};
    }
    c->n_lps++;
}

/* ---- events from the worker ------------------------------------------------------ */

struct ev {
    struct chat *c;
    enum eng_event_kind kind;
    struct eng_token_event token;   /* text and top copied */
    char *text;
    struct eng_top_logprob top[ENG_GEN_MAX_TOP_LOGPROBS];
    struct eng_done_event done;
    struct eng_error_event error;
};

static void finish(struct chat *c, enum eng_finish fin, const struct eng_gen_timings *tm,
                   int prompt_tokens, int cached_tokens, int completion_tokens)
{
    eng_outparse_finish(c->op, &c->deltas);
    flush_deltas(c);
    enum api_finish_reason fr = fin == ENG_FINISH_LENGTH ? API_FINISH_LENGTH
                                : eng_outparse_saw_tool_call(c->op) ? API_FINISH_TOOL_CALLS
                                                                    : API_FINISH_STOP;
    struct api_timings at = {cached_tokens, prompt_tokens - cached_tokens, tm->prompt_ms,
                             completion_tokens, tm->decode_ms};
    struct api_usage u = {prompt_tokens, completion_tokens, c->reasoning_tokens, cached_tokens};
    if (fin == ENG_FINISH_CANCELLED) {
        if (c->stream) { /* the client left, or the server is stopping */
            char *b = api_error_body(API_ERR_SHUTTING_DOWN, "the request was cancelled", NULL);
            stream_put(c, api_sse_frame(b));
            free(b);
        } else
            answer_error(c, API_ERR_SHUTTING_DOWN, NULL, "the request was cancelled");
        stream_end(c);
        return;
    }
    if (c->stream && c->creq->logprobs && c->n_lps) {
        /* tokens no delta carried (no text, or held back): their logprobs still go out */
        struct api_token_logprob *lp = calloc(c->n_lps, sizeof *lp);
        if (lp) {
            pending_logprobs(c, lp);
            struct api_chat_delta cd = {.content = "", .logprobs = true, .tokens = lp,
                                        .n_tokens = c->n_lps};
            stream_put(c, api_sse_event(api_chat_chunk_delta(&c->ident, &cd)));
            free(lp);
            lps_clear(c);
        }
    }
    if (c->stream) {
        stream_put(c, api_sse_event(api_chat_chunk_final(&c->ident, fr, &at)));
        if (c->creq->include_usage)
            stream_put(c, api_sse_event(api_chat_chunk_usage(&c->ident, &u, &at)));
        stream_put(c, strdup(API_SSE_DONE));
        stream_end(c);
        return;
    }
    struct api_tool_call *tc = c->n_tools ? calloc(c->n_tools, sizeof *tc) : NULL;
    for (size_t i = 0; tc && i < c->n_tools; i++)
        tc[i] = (struct api_tool_call){c->tools[i].id, c->tools[i].name, c->tools[i].args};
    struct api_token_logprob *lp = c->n_lps ? calloc(c->n_lps, sizeof *lp) : NULL;
    if (lp)
        pending_logprobs(c, lp);
    struct api_chat_result r = {
        .content = c->content.s,
        .reasoning = c->reasoning.s,
        .tool_calls = tc,
        .n_tool_calls = tc ? c->n_tools : 0,
        .finish = fr,
        .logprobs = c->creq->logprobs,
        .tokens = lp,
        .n_tokens = lp ? c->n_lps : 0,
        .usage = u,
        .timings = &at,
    };
    struct srv_response resp = {.status = 200, .body = api_chat_completion_body(&c->ident, &r)};
    free(tc);
    free(lp);
    if (!resp.body)
        answer_error(c, API_ERR_INTERNAL, NULL, "out of memory building the response");
    else
        answer(c, &resp);
}

static void fail(struct chat *c, const struct eng_error_event *e)
{
    char *body;
    int status;
    const char *retry = NULL;
    if (e->has_device_error) {
        const struct eng_device_error *d = &e->device;
        struct api_device_error ad = {
            .ert_state = (int)d->state, .ert_name = eng_ert_name((int)d->state),
            .phase = eng_phase_name((int)d->phase), .chunk_index = d->chunk_index,
            .chunk_count = d->chunk_count, .layer_first = d->layer_begin,
            .layer_last = d->layer_end - 1, .token_pos = d->token_pos,
            .elapsed_ms = (int64_t)d->elapsed_ms, .device = d->device, .attempts = d->attempts,
            .unrecovered = !e->retryable,
        };
        body = api_device_error_body(&ad);
        status = e->retryable ? 503 : 500;
        retry = e->retryable ? "1" : NULL;
    } else {
        enum api_error ae = e->code == -EINVAL ? API_ERR_BAD_REQUEST : API_ERR_INTERNAL;
        body = api_error_body(ae, e->message, NULL);
        status = api_error_status(ae);
    }
    log_warn("%s failed after %d token(s): %s", c->ident.id, e->completion_tokens, e->message);
    if (c->stream) {
        stream_put(c, body ? api_sse_frame(body) : NULL);
        free(body);
        stream_end(c);
        return;
    }
    struct srv_response resp = {.status = status, .body = body, .retry_after = retry};
    if (!body)
        answer_error(c, API_ERR_INTERNAL, NULL, "out of memory");
    else
        answer(c, &resp);
}

static void on_event(void *data)
{
    struct ev *ev = data;
    struct chat *c = ev->c;
    switch (ev->kind) {
    case ENG_EVENT_TOKEN:
        if (c->creq->logprobs && ev->token.has_logprob)
            keep_logprob(c, &ev->token);
        if (ev->token.text_len)
            eng_outparse_feed(c->op, ev->text, ev->token.text_len, &c->deltas);
        flush_deltas(c);
        /* A token counts as reasoning when the parser is inside <think> after it
         * (its text may have been held back, so the last delta decides). */
        if (c->in_reasoning)
            c->reasoning_tokens++;
        break;
    case ENG_EVENT_DONE:
        c->final_seen = true;
        if (ev->done.text_len)
            eng_outparse_feed(c->op, ev->text, ev->done.text_len, &c->deltas);
        finish(c, ev->done.finish, &ev->done.timings, ev->done.prompt_tokens,
               ev->done.cached_tokens, ev->done.completion_tokens);
        break;
    case ENG_EVENT_ERROR:
        c->final_seen = true;
        fail(c, &ev->error);
        break;
    }
    free(ev->text);
    free(ev);
    if (c->final_seen)
        chat_maybe_free(c);
}

/* Worker thread: copy what the loop needs and post it. */
void srv_chat_emit(void *ctx, const struct eng_event *e)
{
    struct srv_app *app = ctx;
    struct ev *ev = calloc(1, sizeof *ev);
    if (!ev)
        goto lost;
    ev->c = e->user;
    ev->kind = e->kind;
    const char *text = NULL;
    size_t len = 0;
    if (e->kind == ENG_EVENT_TOKEN) {
        ev->token = e->token;
        int n = e->token.n_top < ENG_GEN_MAX_TOP_LOGPROBS ? e->token.n_top : ENG_GEN_MAX_TOP_LOGPROBS;
        if (n > 0)
            memcpy(ev->top, e->token.top, (size_t)n * sizeof *ev->top);
        ev->token.top = ev->top;
        ev->token.n_top = n;
        text = e->token.text;
        len = e->token.text_len;
    } else if (e->kind == ENG_EVENT_DONE) {
        ev->done = e->done;
        text = e->done.text;
        len = e->done.text_len;
    } else {
        ev->error = e->error;
    }
    if (len && !(ev->text = malloc(len + 1)))
        goto lost;
    if (len) {
        memcpy(ev->text, text, len);
        ev->text[len] = '\0';
    }
    if (srv_mailbox_post(app->mailbox, on_event, ev) == 0)
        return;
lost:
    /* The loop is gone (shutdown) or memory is: nobody will read it. */
    if (ev)
        free(ev->text);
    free(ev);
}

/* ---- prompt on the pool, then submit ---------------------------------------------- */

static void on_prompt_work(uv_work_t *w)
{
    struct chat *c = w->data;
    c->param[0] = '\0';
    c->prompt_rc = eng_prompt_build(c->app->tok, c->creq->prompt_request, &c->prompt, c->err,
                                    sizeof c->err, c->param, sizeof c->param);
}

static void submit(struct chat *c)
{
    struct srv_app *app = c->app;
    const struct api_chat_req *r = c->creq;
    int32_t n_prompt = (int32_t)c->prompt.n_ids;
    int32_t budget = api_chat_req_budget(r, n_prompt, app->n_ctx);
    if (budget < 0) {
        struct srv_response resp = {.status = 400,
                                    .body = api_context_length_body(app->n_ctx, n_prompt,
                                                                    r->max_tokens)};
        answer(c, &resp);
        return;
    }
    struct eng_gen_params p = {
        .prompt = c->prompt.ids,
        .n_prompt = n_prompt,
        .sampling = r->sampling,
        .max_tokens = budget,
        .stop_ids = app->stop_ids,
        .n_stop_ids = app->n_stop_ids,
        .n_stop = r->n_stop,
        .logprobs = r->logprobs,
        .top_logprobs = r->top_logprobs,
        .user = c,
    };
    char stops[API_CHAT_MAX_STOP][256];
    for (int i = 0; i < r->n_stop; i++) {
        snprintf(stops[i], sizeof stops[i], "%.*s", (int)r->stop[i].len, r->stop[i].text);
        p.stop[i] = stops[i];
    }
    char err[256];
    if (eng_gen_req_new(&p, &c->greq, err, sizeof err) != 0) {
        answer_error(c, API_ERR_BAD_REQUEST, NULL, err);
        return;
    }
    c->op = eng_outparse_new(r->parser_tools, c->prompt.thinking == ENG_THINKING_ON);
    c->in_reasoning = c->prompt.thinking == ENG_THINKING_ON;
    if (!c->op) {
        answer_error(c, API_ERR_INTERNAL, NULL, "out of memory");
        return;
    }
    int rc = eng_worker_submit(app->worker, c->greq);
    if (rc == -EBUSY || rc == -ESHUTDOWN) {
        struct srv_response resp = {.status = 503, .retry_after = "1"};
        if (rc == -EBUSY) {
            resp.body = api_server_busy_body(app->cfg->queue_size);
        } else {
            srv_response_error(&resp, API_ERR_SHUTTING_DOWN, NULL, "the server is shutting down");
            resp.retry_after = NULL;
        }
        answer(c, &resp);
        return;
    }
    if (rc != 0) {
        answer_error(c, API_ERR_INTERNAL, NULL, "the worker refused the request");
        return;
    }
    c->submitted = true;
    if (r->stream) {
        c->stream = srv_request_stream(c->req, 200, "text/event-stream", STREAM_LIMIT);
        c->req = NULL; /* answered by the stream from now on */
        if (!c->stream) {
            eng_gen_req_cancel(c->greq);
            return;
        }
        stream_put(c, api_sse_event(api_chat_chunk_first(&c->ident)));
    }
}

static void on_prompt_done(uv_work_t *w, int status)
{
    struct chat *c = w->data;
    c->in_pool = false;
    if (c->gone || status != 0)
        answer_error(c, API_ERR_INTERNAL, NULL, "the request was cancelled");
    else if (c->prompt_rc != 0)
        answer_error(c, API_ERR_BAD_REQUEST, c->param[0] ? c->param : NULL, c->err);
    else
        submit(c);
    chat_maybe_free(c);
}

/* ---- the handler -------------------------------------------------------------------- */

int srv_h_chat_completions(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    if (app->state != API_HEALTH_OK || !app->worker) {
        bool loading = app->state == API_HEALTH_LOADING;
        srv_response_error(resp, loading ? API_ERR_LOADING : API_ERR_NO_MODEL, NULL,
                           loading ? "the model is loading" : "no model is loaded");
        resp->retry_after = loading ? "2" : NULL;
        return 0;
    }
    struct api_bad_request bad;
    size_t len;
    const char *body = srv_request_body(req, &len);
    json_t *root = api_parse_object(body, len, &bad);
    if (!root) {
        srv_response_error(resp, bad.error, NULL, "%s", bad.message);
        return 0;
    }
    struct api_chat_limits lim = {eng_pack_get_info(app->pack)->hp.n_vocab, &app->sampling};
    struct api_chat_req *creq = NULL;
    int rc = api_chat_req_parse(root, &lim, &creq, &bad);
    json_decref(root);
    if (rc == 0 && api_chat_req_check_model(creq->model, app->model->id, NULL, 0, &bad) != 0)
        rc = -1;
    if (rc != 0) {
        api_chat_req_free(creq);
        srv_response_error(resp, bad.error, bad.param[0] ? bad.param : NULL, "%s", bad.message);
        return 0;
    }
    struct chat *c = calloc(1, sizeof *c);
    if (!c) {
        api_chat_req_free(creq);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "out of memory");
        return 0;
    }
    c->app = app;
    c->req = req;
    c->creq = creq;
    c->work.data = c;
    c->last_write = uv_now(app->loop);
    api_chat_ident_init(&c->ident, app->model->id, MINICPMD_VERSION, app->device,
                        creq->include_usage);
    c->next = app->chats;
    if (app->chats)
        app->chats->prev = c;
    app->chats = c;
    if (uv_queue_work(app->loop, &c->work, on_prompt_work, on_prompt_done) != 0) {
        c->req = NULL;
        chat_free(c);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "cannot schedule the work");
        return 0;
    }
    c->in_pool = true;
    srv_request_defer(req, on_cancel, c);
    return 0;
}

void srv_chat_ping(struct srv_app *app)
{
    uint64_t now = uv_now(app->loop);
    for (struct chat *c = app->chats, *next; c; c = next) {
        next = c->next;
        if (c->stream && now - c->last_write >= PING_MS)
            stream_put(c, strdup(API_SSE_PING));
    }
}
