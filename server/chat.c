/* POST /v1/chat/completions over the engine: this file runs the request's life;
 * what is answered is api/'s (api/chat-req parses, api/chat-run builds the answer
 * from the engine's events).
 *
 * One `struct chat` per request, owned by the loop thread:
 *
 *   handler      parse the body once (api_chat_req_parse), check the model, defer
 *   thread pool  render the chat template and tokenize (eng_prompt_build)
 *   loop         check the context, submit to the engine (api_chat_refuse when it
 *                does not take it); a stream answers its headers and first chunk
 *   worker       TOKEN events, then one final DONE or ERROR (engine/gen.h),
 *                copied and posted to the loop thread through the mailbox
 *   loop         events -> api_chat_run -> frames to the stream, or the answer
 *
 * A client that leaves (hang-up watch, MHD, a full stream buffer) cancels the
 * engine's request; the chat is freed when the worker's final event has arrived
 * and the answer is done, whichever comes last (docs/style.md rule 10).
 *
 * `n` > 1 (OpenAI chat only): n engine requests, choice i sampling with seed + i,
 * each with its own run whose ident carries index i. A stream interleaves their
 * chunks as they come and ends, after every choice's final chunk, with one usage
 * chunk (the prompt once, completions summed, as OpenAI counts) and [DONE]; a
 * non-stream answer is one result of the n choices (api_chat_result's others),
 * rendered once. The first
 * choice that fails answers for the request and cancels the others. The worker
 * shares the prompt's KV between them (engine/worker/sched.c). */
#include "api/chat-req.h"
#include "api/chat-run.h"
#include "engine/engine.h"
#include "engine/prompt.h"
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

struct chat;

/* One choice: an engine request and the run that answers it. */
struct choice {
    struct chat *c;
    eng_gen_req *greq;
    api_chat_run *run;
    struct api_chat_ident ident;    /* the chat's, with this choice's index */
    struct api_chat_format fmt;     /* n > 1: api_chat_choice_format */
    struct api_usage usage;         /* n > 1: what its stream's end reported */
    const struct api_chat_result *result;   /* n > 1, non-stream: its run's */
    bool submitted, final_seen;
    /* choice i > 0 of several raw prompts: its own prompt */
    const char *text;
    size_t text_len;
    int32_t *ids;                   /* owned: given, or the text tokenized */
    size_t n_ids;
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
    bool in_pool, gone;

    struct api_chat_ident ident;
    struct srv_chat_surface surf;   /* zero: OpenAI chat */
    int32_t *raw_ids;               /* surf.ids copied */
    srv_stream *stream;
    uint64_t last_write;

    int n;                          /* choices (1 unless OpenAI chat's n, or several
                                       raw prompts: surf.n_prompts) */
    struct choice ch[UT_MAX_CHOICES];
    int n_final, n_answered;
    bool failed;                    /* n > 1: a choice answered with its error */
};

static void chat_free(struct chat *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (c->app->chats == c)
        c->app->chats = c->next;
    if (c->next)
        c->next->prev = c->prev;
    for (int i = 0; i < UT_MAX_CHOICES; i++) {
        api_chat_run_free(c->ch[i].run);
        eng_gen_req_free(c->ch[i].greq);
        free(c->ch[i].ids);
        if (i > 0 && i < c->surf.n_prompts && c->surf.free_ctx)
            c->surf.free_ctx(c->ch[i].fmt.ctx);
    }
    if (c->surf.free_ctx && c->surf.format)
        c->surf.free_ctx(c->surf.format->ctx);
    free(c->raw_ids);
    eng_prompt_free(&c->prompt);
    api_chat_req_free(c->creq);
    free(c);
}

/* Free when nothing can still reach the chat. */
static void chat_maybe_free(struct chat *c)
{
    if (c->in_pool || c->req || c->stream)
        return;
    for (int i = 0; i < c->n; i++)
        if (c->ch[i].submitted && !c->ch[i].final_seen)
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

/* `e` as the surface's error body (NULL out of memory: a bare status). */
static void error_response(const struct srv_chat_surface *surf, const struct api_err *e,
                           struct srv_response *resp)
{
    free(resp->body);
    *resp = (struct srv_response){
        .status = api_err_status(e),
        .body = api_chat_format_error(surf ? surf->format : NULL, e, false),
        .retry_after = api_err_retry_after(e),
    };
}

static void answer_error(struct chat *c, enum api_error kind, const char *param, const char *msg)
{
    struct api_err e;
    api_refuse(&e, kind, param, "%s", msg);
    struct srv_response r = {0};
    error_response(&c->surf, &e, &r);
    answer(c, &r);
}

static void stream_end(struct chat *c)
{
    if (c->stream) {
        srv_stream_end(c->stream);
        c->stream = NULL;
    }
}

static void cancel_all(struct chat *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->ch[i].greq)
            eng_gen_req_cancel(c->ch[i].greq);
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
    cancel_all(c);
    stream_end(c);
}

static void on_cancel(void *ud)
{
    struct chat *c = ud;
    c->gone = true;
    cancel_all(c);
}

/* The run's sink: frames into the stream, the answer into the response. */
static void sink_frame(void *ctx, char *frame) { stream_put(ctx, frame); }

static void sink_answer(void *ctx, int status, char *body, const char *retry_after)
{
    struct chat *c = ctx;
    if (!body) {
        answer_error(c, API_ERR_INTERNAL, NULL, "out of memory");
        return;
    }
    struct srv_response resp = {.status = status, .body = body, .retry_after = retry_after};
    answer(c, &resp);
}

/* n > 1: a choice's frames go into the stream, unless another one failed. */
static void choice_frame(void *ctx, char *frame)
{
    struct choice *ch = ctx;
    if (ch->c->failed) {
        free(frame);
        return;
    }
    stream_put(ch->c, frame);
}

/* n > 1: a choice's failure answers for the request. */
static void choice_answer(void *ctx, int status, char *body, const char *retry_after)
{
    struct choice *ch = ctx;
    struct chat *c = ch->c;
    if (c->failed || !c->req) {
        free(body);
        return;
    }
    c->failed = true;
    cancel_all(c);
    sink_answer(c, status, body, retry_after);
}

/* n > 1, non-stream: once every choice has its result, one answer renders them all
 * (the first's timings, usage as OpenAI counts it). */
static void choice_result(void *ctx, const struct api_chat_result *r)
{
    struct choice *ch = ctx;
    struct chat *c = ch->c;
    ch->result = r;
    if (c->failed || !c->req || ++c->n_answered < c->n)
        return;
    if (c->surf.n_prompts > 1) {
        /* several raw prompts: each choice framed by its own prompt's format */
        const struct api_chat_result *rs[UT_MAX_CHOICES];
        const struct api_chat_format *fs[UT_MAX_CHOICES];
        for (int i = 0; i < c->n; i++) {
            rs[i] = c->ch[i].result;
            fs[i] = &c->ch[i].fmt;
        }
        sink_answer(c, 200, c->surf.merge(fs, &c->ident, rs, c->n), NULL);
        return;
    }
    struct api_chat_result all = *c->ch[0].result;
    struct api_chat_result others[UT_MAX_CHOICES];
    for (int i = 1; i < c->n; i++) {
        others[i - 1] = *c->ch[i].result;
        api_usage_add_choice(&all.usage, &c->ch[i].result->usage);
    }
    all.others = others;
    all.n_others = (size_t)c->n - 1;
    sink_answer(c, 200, api_chat_completion_body(&c->ident, &all), NULL);
}

/* n > 1: every choice ended well: one usage chunk for them all, then [DONE]. */
static void stream_tail(struct chat *c)
{
    struct api_usage u = c->ch[0].usage;
    for (int i = 1; i < c->n; i++)
        api_usage_add_choice(&u, &c->ch[i].usage);
    stream_put(c, api_chat_stream_tail(&c->ident, &u));
}

/* ---- events from the worker ------------------------------------------------------ */

struct ev {
    struct choice *ch;
    enum eng_event_kind kind;
    struct eng_token_event token;   /* text and top copied */
    char *text;
    struct eng_top_logprob top[UT_MAX_TOP_LOGPROBS];
    struct eng_done_event done;
    struct eng_error_event error;
};

static void on_event(void *data)
{
    struct ev *ev = data;
    struct choice *ch = ev->ch;
    struct chat *c = ch->c;
    switch (ev->kind) {
    case ENG_EVENT_TOKEN:
        api_chat_run_token(ch->run, &ev->token, ev->text);
        break;
    case ENG_EVENT_DONE:
        ch->final_seen = true;
        c->n_final++;
        api_chat_run_done(ch->run, &ev->done, ev->text);
        srv_status_done(c->app->status, &ev->done);
        if (c->n > 1 && c->n_final == c->n && !c->failed && c->stream)
            stream_tail(c);
        if (c->n_final == c->n)
            stream_end(c);
        break;
    case ENG_EVENT_ERROR:
        ch->final_seen = true;
        c->n_final++;
        log_warn("%s failed after %d token(s): %s", c->ident.id, ev->error.completion_tokens,
                 ev->error.message);
        if (!c->failed)
            api_chat_run_error(ch->run, &ev->error);
        srv_status_error(c->app->status, &ev->error);
        if (c->n > 1 && !c->failed) {   /* it answered for the request */
            c->failed = true;
            cancel_all(c);
        }
        stream_end(c);
        break;
    }
    bool final = ev->kind != ENG_EVENT_TOKEN;
    free(ev->text);
    free(ev);
    if (final)
        chat_maybe_free(c);
}

/* Worker thread: copy what the loop needs and post it. */
void srv_chat_emit(void *ctx, const struct eng_event *e)
{
    struct srv_app *app = ctx;
    struct ev *ev = calloc(1, sizeof *ev);
    if (!ev)
        goto lost;
    ev->ch = e->user;
    ev->kind = e->kind;
    const char *text = NULL;
    size_t len = 0;
    if (e->kind == ENG_EVENT_TOKEN) {
        ev->token = e->token;
        int n = e->token.n_top < UT_MAX_TOP_LOGPROBS ? e->token.n_top : UT_MAX_TOP_LOGPROBS;
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

/* A raw prompt (no template): the ids as given, or the text tokenized with special
 * tokens on and the tokenizer's add_special ones (vLLM's completions do the same). */
static int raw_tokens(struct chat *c, const char *text, size_t len, int32_t **ids, size_t *n_ids)
{
    int n = eng_tokenizer_encode_special(eng_engine_tokenizer(c->app->eng), text, len, true,
                                         true, ids);
    if (n < 0) {
        snprintf(c->err, sizeof c->err, "tokenizing the prompt failed: %s", strerror(-n));
        return n;
    }
    *n_ids = (size_t)n;
    if (n == 0) {
        snprintf(c->err, sizeof c->err, "the prompt is empty");
        snprintf(c->param, sizeof c->param, "prompt");
        return -EINVAL;
    }
    return 0;
}

static int raw_prompt(struct chat *c)
{
    struct eng_prompt *p = &c->prompt;
    int rc = 0;
    for (int i = 1; i < c->n && rc == 0; i++)   /* several prompts: choice i's */
        if (c->ch[i].text)
            rc = raw_tokens(c, c->ch[i].text, c->ch[i].text_len, &c->ch[i].ids, &c->ch[i].n_ids);
    if (rc)
        return rc;
    if (c->raw_ids) {
        p->ids = c->raw_ids;
        p->n_ids = c->surf.n_ids;
        c->raw_ids = NULL;
        return 0;
    }
    return raw_tokens(c, c->surf.text, c->surf.text_len, &p->ids, &p->n_ids);
}

static void on_prompt_work(uv_work_t *w)
{
    struct chat *c = w->data;
    c->param[0] = '\0';
    /* The grammar first: compiling it is bounded (--grammar-*) but can take tens of
     * milliseconds, which the loop thread must not spend. */
    struct api_err bad;
    const eng_gram_vocab *v = api_chat_req_grammar_pending(c->creq)
                                  ? eng_engine_gram_vocab(c->app->eng) : NULL;
    if (api_chat_req_grammar(c->creq, v, &bad)) {
        c->prompt_rc = bad.error == API_ERR_INTERNAL ? -ENOMEM : -EINVAL;
        snprintf(c->err, sizeof c->err, "%s", bad.message);
        snprintf(c->param, sizeof c->param, "%s", bad.param);
        return;
    }
    if (c->creq->raw) {
        c->prompt_rc = raw_prompt(c);
        return;
    }
    c->prompt_rc = eng_prompt_build(eng_engine_tokenizer(c->app->eng), &c->creq->chat,
                                    &c->prompt, c->err, sizeof c->err, c->param,
                                    sizeof c->param);
}

static void submit(struct chat *c)
{
    struct srv_app *app = c->app;
    const struct api_chat_req *r = c->creq;
    struct api_chat_sink sink = {sink_frame, sink_answer, NULL, c, c->surf.format};
    int32_t n_prompt = (int32_t)c->prompt.n_ids;
    int n_ctx = eng_engine_n_ctx(app->eng);
    int32_t budget = api_chat_req_budget(r, n_prompt, n_ctx);
    for (int i = 1; i < c->n && budget >= 0; i++)   /* several prompts: each must fit */
        if (c->ch[i].ids && api_chat_req_budget(r, (int32_t)c->ch[i].n_ids, n_ctx) < 0)
            n_prompt = (int32_t)c->ch[i].n_ids, budget = -1;
    if (budget < 0) {
        api_chat_refuse(r, -ERANGE, 0, n_ctx, n_prompt, &sink);
        return;
    }
    struct eng_gen_params p = {
        .prompt = c->prompt.ids,
        .n_prompt = n_prompt,
        .sampling = r->sampling,
        .max_tokens = budget,
        .n_stop = r->n_stop,
        .logprobs = r->logprobs,
        .top_logprobs = r->top_logprobs,
        .prompt_logprobs = r->prompt_logprobs,
        .prompt_only = r->prompt_only,
        .grammar = r->grammar,
        .grammar_after_think = c->prompt.thinking == ENG_THINKING_ON,
    };
    p.n_stop_ids = eng_engine_stop_ids(app->eng, &p.stop_ids);
    for (int i = 0; i < r->n_stop; i++) { /* whole, by length: the request copies them */
        p.stop[i] = r->stop[i].text;
        p.stop_len[i] = r->stop[i].len;
    }
    for (int i = 0; i < c->n; i++) {
        struct choice *ch = &c->ch[i];
        char err[256];
        p.user = ch;
        if (ch->ids) {   /* its own prompt: as if sent alone */
            p.prompt = ch->ids;
            p.n_prompt = (int)ch->n_ids;
            p.max_tokens = api_chat_req_budget(r, p.n_prompt, n_ctx);
        } else {
            /* n choices of one prompt: reproducible with `seed`, each its own */
            p.sampling.seed = r->sampling.seed + (uint64_t)i;
        }
        ch->ident.prompt_tokens = p.n_prompt;
        if (eng_gen_req_new(&p, &ch->greq, err, sizeof err) != 0) {
            answer_error(c, API_ERR_BAD_REQUEST, NULL, err);
            return;
        }
        struct api_chat_sink cs = sink;
        if (c->n > 1) {
            if (c->surf.n_prompts < 2)   /* several raw prompts: theirs, set at the start */
                ch->fmt = api_chat_choice_format(&ch->usage);
            cs = (struct api_chat_sink){choice_frame, choice_answer,
                                        choice_result, ch,
                                        &ch->fmt};
        }
        ch->run = api_chat_run_new(r, &ch->ident, eng_engine_tokenizer(app->eng),
                                   c->prompt.thinking == ENG_THINKING_ON, &cs);
        if (!ch->run) {
            answer_error(c, API_ERR_INTERNAL, NULL, "out of memory");
            return;
        }
    }
    for (int i = 0; i < c->n; i++) {
        int rc = eng_engine_submit(app->eng, c->ch[i].greq);
        if (rc != 0) {  /* the ones already taken end cancelled, unheard */
            c->failed = true;
            cancel_all(c);
            api_chat_refuse(r, rc, app->cfg->queue_size, n_ctx, n_prompt, &sink);
            return;
        }
        c->ch[i].submitted = true;
    }
    if (r->stream) {
        c->stream = srv_request_stream(c->req, 200,
                                       c->surf.content_type ? c->surf.content_type
                                                            : "text/event-stream",
                                       STREAM_LIMIT);
        c->req = NULL; /* answered by the stream from now on */
        if (!c->stream) {
            cancel_all(c);
            return;
        }
    }
    for (int i = 0; i < c->n; i++)
        api_chat_run_start(c->ch[i].run);
}

static void on_prompt_done(uv_work_t *w, int status)
{
    struct chat *c = w->data;
    c->in_pool = false;
    if (c->gone || status != 0)
        answer_error(c, API_ERR_INTERNAL, NULL, "the request was cancelled");
    else if (c->prompt_rc != 0)
        answer_error(c, c->prompt_rc == -EINVAL ? API_ERR_BAD_REQUEST : API_ERR_INTERNAL,
                     c->param[0] ? c->param : NULL, c->err);
    else
        submit(c);
    chat_maybe_free(c);
}

/* ---- the handler -------------------------------------------------------------------- */

int srv_h_chat_completions(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    struct api_chat_limits lim;
    json_t *root = srv_request_generation(req, resp, &lim);
    if (!root)
        return 0;
    struct api_err bad;
    struct api_chat_req *creq = NULL;
    int rc = api_chat_req_parse(root, &lim, &creq, &bad);
    json_decref(root);
    if (rc == 0 && api_chat_req_check_model(creq->model, app->model->id, NULL, 0, &bad) != 0)
        rc = -1;
    if (rc != 0) {
        api_chat_req_free(creq);
        srv_response_err(resp, &bad);
        return 0;
    }
    return srv_chat_begin(req, resp, creq, NULL);
}

int srv_chat_begin(srv_request *req, struct srv_response *resp, struct api_chat_req *creq,
                   const struct srv_chat_surface *surf)
{
    struct srv_app *app = srv_request_app(req);
    struct chat *c = calloc(1, sizeof *c);
    if (c && surf) {
        c->surf = *surf;
        if (surf->n_ids && !(c->raw_ids = malloc(surf->n_ids * sizeof *c->raw_ids))) {
            free(c);
            c = NULL;
        } else if (surf->n_ids) {
            memcpy(c->raw_ids, surf->ids, surf->n_ids * sizeof *c->raw_ids);
        }
    }
    struct api_err e;
    if (!c) {
        api_refuse(&e, API_ERR_INTERNAL, NULL, "out of memory");
        error_response(surf, &e, resp);
        if (surf && surf->free_ctx && surf->format)
            surf->free_ctx(surf->format->ctx);
        for (int i = 1; surf && surf->free_ctx && i < surf->n_prompts; i++)
            surf->free_ctx(surf->formats[i]->ctx);
        api_chat_req_free(creq);
        return 0;
    }
    c->app = app;
    c->req = req;
    c->creq = creq;
    c->work.data = c;
    c->last_write = uv_now(app->loop);
    api_chat_ident_init(&c->ident, app->model->id, MINICPMD_VERSION, app->device,
                        creq->include_usage);
    c->n = surf ? (surf->n_prompts > 1 ? surf->n_prompts : 1)
                : creq->n < 1 ? 1 : creq->n;   /* `n` is OpenAI chat's */
    bool ok = true;
    for (int i = 0; i < c->n; i++) {
        c->ch[i].c = c;
        c->ch[i].ident = c->ident;
        c->ch[i].ident.index = i;
        if (c->surf.n_prompts > 1)   /* chat_free frees them from here on */
            c->ch[i].fmt = *surf->formats[i];
    }
    /* the caller's arrays live on its stack: from here on the choices hold them */
    c->surf.formats = NULL;
    c->surf.more = NULL;
    for (int i = 1; i < c->n && c->surf.n_prompts > 1 && ok; i++) {
        struct choice *ch = &c->ch[i];
        const struct srv_raw_prompt *q = &surf->more[i - 1];
        ch->text = q->text;
        ch->text_len = q->text_len;
        if (q->n_ids && (ok = (ch->ids = malloc(q->n_ids * sizeof *ch->ids)) != NULL)) {
            memcpy(ch->ids, q->ids, q->n_ids * sizeof *ch->ids);
            ch->n_ids = q->n_ids;
        }
    }
    if (!ok) {
        chat_free(c);
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "out of memory");
        return 0;
    }
    c->next = app->chats;
    if (app->chats)
        app->chats->prev = c;
    app->chats = c;
    if (uv_queue_work(app->loop, &c->work, on_prompt_work, on_prompt_done) != 0) {
        api_refuse(&e, API_ERR_INTERNAL, NULL, "cannot schedule the work");
        error_response(surf, &e, resp);
        c->req = NULL;
        chat_free(c);
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
        const char *ping = c->surf.format ? c->surf.ping : API_SSE_PING;
        if (c->stream && ping && now - c->last_write >= PING_MS)
            stream_put(c, strdup(ping));
    }
}
