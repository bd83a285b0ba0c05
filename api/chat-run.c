/* One chat completion's answer from the engine's events (api/chat-run.h).
 *
 * Text -> output parser -> deltas. A stream sends each delta as a chunk at once,
 * with the logprobs of the tokens that made it; a non-stream request keeps
 * content, reasoning, tool calls and logprobs until the end. */
#include "api/chat-run.h"

#include "engine/outparse.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tool {
    char id[API_TOOL_CALL_ID_SIZE];
    char *name, *args;
    bool cut;
};

struct lp {                      /* one token's logprobs, strings owned */
    char *token;
    size_t len;
    float logprob;
    struct api_top_logprob *top;
    int n_top;
};

struct api_chat_run {
    const struct api_chat_req *req;
    const struct api_chat_ident *ident;
    const eng_tokenizer *tok;
    struct api_chat_sink sink;
    struct api_chat_format fmt;
    bool answered;

    eng_outparse *op;
    struct eng_delta_list deltas;
    bool in_reasoning;
    int32_t reasoning_tokens;
    ut_buf content, reasoning;
    struct tool *tools;
    size_t n_tools, cap_tools;
    struct lp *lps;              /* non-stream: all; stream: not yet sent */
    size_t n_lps, cap_lps;
    struct api_chat_result result;          /* non-stream, handed to sink.result */
    struct api_tool_call *result_calls;     /* its views, owned */
    struct api_token_logprob *result_lps;
    struct api_timings result_timings;
};

static const struct api_chat_format chat_format;   /* below */

/* ---- owned memory ---------------------------------------------------------------- */

static void lps_clear(struct api_chat_run *c)
{
    for (size_t i = 0; i < c->n_lps; i++) {
        free(c->lps[i].token);
        for (int k = 0; k < c->lps[i].n_top; k++)
            free((char *)c->lps[i].top[k].token);
        free(c->lps[i].top);
    }
    c->n_lps = 0;
}

api_chat_run *api_chat_run_new(const struct api_chat_req *req, const struct api_chat_ident *id,
                               const eng_tokenizer *tok, bool in_think,
                               const struct api_chat_sink *sink)
{
    struct api_chat_run *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->req = req;
    c->ident = id;
    c->tok = tok;
    c->sink = *sink;
    c->fmt = sink->format ? *sink->format : chat_format;
    c->in_reasoning = in_think;
    if (!req->raw && !(c->op = eng_outparse_new(req->parser_tools, in_think))) {
        free(c);
        return NULL;
    }
    return c;
}

void api_chat_run_free(api_chat_run *c)
{
    if (!c)
        return;
    free(c->result_calls);
    free(c->result_lps);
    lps_clear(c);
    free(c->lps);
    for (size_t i = 0; i < c->n_tools; i++) {
        free(c->tools[i].name);
        free(c->tools[i].args);
    }
    free(c->tools);
    ut_buf_free(&c->content);
    ut_buf_free(&c->reasoning);
    eng_delta_list_clear(&c->deltas);
    eng_outparse_free(c->op);
    free(c);
}

/* ---- OpenAI's chat.completion framing (the default format) ----------------------------- */

static char *chat_start(void *ctx, const struct api_chat_ident *id)
{
    (void)ctx;
    return api_sse_event(api_chat_chunk_first(id));
}

static char *chat_delta(void *ctx, const struct api_chat_ident *id, const struct api_chat_delta *d)
{
    (void)ctx;
    return api_sse_event(api_chat_chunk_delta(id, d));
}

static char *chat_end(void *ctx, const struct api_chat_ident *id, enum api_finish_reason fr,
                      const struct api_usage *u, const struct api_timings *t)
{
    (void)ctx;
    ut_buf b = {0};
    char *s = api_sse_event(api_chat_chunk_final(id, fr, t));
    ut_buf_adds(&b, s ? s : "");
    free(s);
    if (id->include_usage) {
        s = api_sse_event(api_chat_chunk_usage(id, u, t));
        ut_buf_adds(&b, s ? s : "");
        free(s);
    }
    ut_buf_adds(&b, API_SSE_DONE);
    if (b.oom) {
        ut_buf_free(&b);
        return NULL;
    }
    return b.p;
}

static char *chat_body(void *ctx, const struct api_chat_ident *id, const struct api_chat_result *r)
{
    (void)ctx;
    return api_chat_completion_body(id, r);
}

static char *chat_error(void *ctx, const struct api_err *e, bool stream)
{
    (void)ctx;
    return stream ? api_err_sse(e) : api_err_body(e);
}

static const struct api_chat_format chat_format = {chat_start, chat_delta, chat_end, chat_body,
                                                   chat_error, NULL, NULL};

/* A choice of several: its stream ends with its final chunk; the usage goes to ctx. */
static char *choice_end(void *ctx, const struct api_chat_ident *id, enum api_finish_reason fr,
                        const struct api_usage *u, const struct api_timings *t)
{
    *(struct api_usage *)ctx = *u;
    return api_sse_event(api_chat_chunk_final(id, fr, t));
}

char *api_chat_format_error(const struct api_chat_format *f, const struct api_err *e,
                            bool stream)
{
    if (!f)
        f = &chat_format;
    return f->error(f->ctx, e, stream);
}

struct api_chat_format api_chat_choice_format(struct api_usage *usage)
{
    struct api_chat_format f = chat_format;
    f.end = choice_end;
    f.ctx = usage;
    return f;
}

/* ---- out ------------------------------------------------------------------------- */

static void put(struct api_chat_run *c, char *frame)
{
    if (frame)
        c->sink.frame(c->sink.ctx, frame);
}

static void answer(struct api_chat_run *c, int status, char *body, const char *retry_after)
{
    if (c->answered) {
        free(body);
        return;
    }
    c->answered = true;
    c->sink.answer(c->sink.ctx, status, body, retry_after);
}

/* The failure `e` in the surface's shape: a stream's last frame, or the answer. */
static void fail(struct api_chat_run *c, const struct api_err *e)
{
    if (c->req->stream) {
        put(c, c->fmt.error(c->fmt.ctx, e, true));
        return;
    }
    char *body = c->fmt.error(c->fmt.ctx, e, false);
    answer(c, api_err_status(e), body, api_err_retry_after(e));   /* NULL: out of memory */
}

static void fail_with(struct api_chat_run *c, enum api_error kind, const char *msg)
{
    struct api_err e;
    api_refuse(&e, kind, NULL, "%s", msg);
    fail(c, &e);
}

void api_chat_run_start(api_chat_run *c)
{
    if (c->req->stream && c->fmt.start)
        put(c, c->fmt.start(c->fmt.ctx, c->ident));
}

/* ---- text -> deltas ------------------------------------------------------------- */

static int keep_tool(struct api_chat_run *c, const struct eng_delta *d)
{
    if (ut_grow((void **)&c->tools, &c->cap_tools, c->n_tools + 1, sizeof *c->tools, 4) != 0)
        return -ENOMEM;
    struct tool *t = &c->tools[c->n_tools];
    api_tool_call_id(t->id);
    t->name = strdup(d->name ? d->name : "");
    t->args = strdup(d->arguments ? d->arguments : "{}");
    t->cut = d->cut;
    c->n_tools++;
    return t->name && t->args ? 0 : -ENOMEM;
}

/* The kept logprobs as the API's views of them; NULL when there are none. */
static struct api_token_logprob *pending_logprobs(const struct api_chat_run *c)
{
    struct api_token_logprob *out = c->n_lps ? calloc(c->n_lps, sizeof *out) : NULL;
    for (size_t i = 0; out && i < c->n_lps; i++)
        out[i] = (struct api_token_logprob){c->lps[i].token, c->lps[i].len, c->lps[i].logprob,
                                            c->lps[i].top, c->lps[i].n_top};
    return out;
}

/* Deltas the parser is sure of: into the message, or out as chunks. */
static void flush_deltas(struct api_chat_run *c)
{
    for (size_t i = 0; i < c->deltas.n; i++) {
        const struct eng_delta *d = &c->deltas.items[i];
        c->in_reasoning = d->kind == ENG_DELTA_REASONING;
        if (d->kind == ENG_DELTA_TOOL_CALL && keep_tool(c, d) != 0)
            continue;
        if (!c->req->stream) {
            if (d->kind == ENG_DELTA_CONTENT)
                ut_buf_adds(&c->content, d->text);
            else if (d->kind == ENG_DELTA_REASONING)
                ut_buf_adds(&c->reasoning, d->text);
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
            tc = (struct api_tool_call_delta){(int)c->n_tools - 1, t->id, t->name, t->args,
                                              t->cut};
            cd.tool_calls = &tc;
            cd.n_tool_calls = 1;
        }
        struct api_token_logprob *lp = c->req->logprobs ? pending_logprobs(c) : NULL;
        if (lp) {
            cd.logprobs = true;
            cd.tokens = lp;
            cd.n_tokens = c->n_lps;
        }
        put(c, c->fmt.delta(c->fmt.ctx, c->ident, &cd));
        if (lp) {
            free(lp);
            lps_clear(c);
        }
    }
    eng_delta_list_clear(&c->deltas);
}

/* A copy of token `id`'s bytes, NUL-terminated; its length in *len. */
static char *token_text(const eng_tokenizer *tok, int32_t id, size_t *len)
{
    const char *bytes;
    *len = eng_tokenizer_token_bytes(tok, id, false, &bytes);
    char *s = malloc(*len + 1);
    if (s) {
        memcpy(s, bytes, *len);
        s[*len] = '\0';
    }
    return s;
}

static void keep_logprob(struct api_chat_run *c, const struct eng_token_event *t)
{
    if (ut_grow((void **)&c->lps, &c->cap_lps, c->n_lps + 1, sizeof *c->lps, 16) != 0)
        return;
    struct lp *l = &c->lps[c->n_lps];
    l->token = token_text(c->tok, t->id, &l->len);
    l->top = t->n_top ? calloc((size_t)t->n_top, sizeof *l->top) : NULL;
    if (!l->token || (t->n_top && !l->top)) {
        free(l->token);
        free(l->top);
        return;
    }
    l->logprob = t->has_logprob ? t->logprob : NAN;   /* NaN: none (the prompt's first) */
    l->n_top = 0;
    for (int k = 0; k < t->n_top; k++) {
        size_t n;
        char *s = token_text(c->tok, t->top[k].id, &n);
        if (!s)
            break;
        l->top[l->n_top++] = (struct api_top_logprob){s, n, t->top[k].logprob};
    }
    c->n_lps++;
}

/* Text into deltas: through the output parser, or (a raw completion) all content. */
static void feed(struct api_chat_run *c, const char *text, size_t len)
{
    if (!len)
        return;
    if (c->op) {
        eng_outparse_feed(c->op, text, len, &c->deltas);
        return;
    }
    if (ut_grow((void **)&c->deltas.items, &c->deltas.cap, c->deltas.n + 1,
                sizeof *c->deltas.items, 4) != 0)
        return;
    char *t = malloc(len + 1);
    if (!t)
        return;
    memcpy(t, text, len);
    t[len] = '\0';
    c->deltas.items[c->deltas.n++] = (struct eng_delta){.kind = ENG_DELTA_CONTENT, .text = t};
}

void api_chat_run_token(api_chat_run *c, const struct eng_token_event *t, const char *text)
{
    if (t->prompt) {   /* a prompt token scored: its logprobs go before the output's */
        if (c->req->prompt_logprobs)
            keep_logprob(c, t);
        return;
    }
    if (c->req->logprobs && t->has_logprob)
        keep_logprob(c, t);
    feed(c, text, t->text_len);
    flush_deltas(c);
    /* A token counts as reasoning when the parser is inside <think> after it
     * (its text may have been held back, so the last delta decides). */
    if (c->in_reasoning)
        c->reasoning_tokens++;
}

/* ---- the end ------------------------------------------------------------------- */

static void finish_stream(struct api_chat_run *c, enum api_finish_reason fr,
                          const struct api_usage *u, const struct api_timings *at)
{
    if (c->req->logprobs && c->n_lps) {
        /* tokens no delta carried (no text, or held back): their logprobs still go out */
        struct api_token_logprob *lp = pending_logprobs(c);
        if (lp) {
            struct api_chat_delta cd = {.content = "", .logprobs = true, .tokens = lp,
                                        .n_tokens = c->n_lps};
            put(c, c->fmt.delta(c->fmt.ctx, c->ident, &cd));
            free(lp);
            lps_clear(c);
        }
    }
    put(c, c->fmt.end(c->fmt.ctx, c->ident, fr, u, at));
}

static void finish_message(struct api_chat_run *c, enum api_finish_reason fr,
                           const struct api_usage *u, const struct api_timings *at)
{
    struct api_tool_call *tc = c->n_tools ? calloc(c->n_tools, sizeof *tc) : NULL;
    for (size_t i = 0; tc && i < c->n_tools; i++)
        tc[i] = (struct api_tool_call){c->tools[i].id, c->tools[i].name, c->tools[i].args,
                                       c->tools[i].cut};
    struct api_token_logprob *lp = pending_logprobs(c);
    struct api_chat_result r = {
        .content = c->content.p,
        .reasoning = c->reasoning.p,
        .tool_calls = tc,
        .n_tool_calls = tc ? c->n_tools : 0,
        .finish = fr,
        .logprobs = c->req->logprobs,
        .tokens = lp,
        .n_tokens = lp ? c->n_lps : 0,
        .usage = *u,
        .timings = at,
    };
    if (c->sink.result && !c->answered) {
        c->answered = true;
        c->result_timings = *at;
        c->result = r;
        c->result.timings = &c->result_timings;
        c->result_calls = tc;
        c->result_lps = lp;
        c->sink.result(c->sink.ctx, &c->result);
        return;
    }
    char *body = c->fmt.body(c->fmt.ctx, c->ident, &r);
    free(tc);
    free(lp);
    if (!body)
        fail_with(c, API_ERR_INTERNAL, "out of memory building the response");
    else
        answer(c, 200, body, NULL);
}

void api_chat_run_done(api_chat_run *c, const struct eng_done_event *d, const char *text)
{
    feed(c, text, d->text_len);
    if (c->op)
        eng_outparse_finish(c->op, &c->deltas);
    flush_deltas(c);
    if (d->finish == ENG_FINISH_CANCELLED) {
        /* the client left, or the server is stopping */
        fail_with(c, API_ERR_SHUTTING_DOWN, "the request was cancelled");
        return;
    }
    enum api_finish_reason fr = d->finish == ENG_FINISH_LENGTH ? API_FINISH_LENGTH
                                : c->op && eng_outparse_saw_tool_call(c->op) ? API_FINISH_TOOL_CALLS
                                                                    : API_FINISH_STOP;
    if (c->fmt.stopped && d->finish == ENG_FINISH_STOP && d->stop_index >= 0)
        c->fmt.stopped(c->fmt.ctx, d->stop_index);
    const struct eng_gen_timings *tm = &d->timings;
    struct api_timings at = {d->cached_tokens, d->prompt_tokens - d->cached_tokens,
                             tm->prompt_ms, d->completion_tokens, tm->decode_ms,
                             tm->prompt_device_ms, tm->prompt_host_ms};
    struct api_usage u = {d->prompt_tokens, d->completion_tokens, c->reasoning_tokens,
                          d->cached_tokens};
    if (c->req->stream)
        finish_stream(c, fr, &u, &at);
    else
        finish_message(c, fr, &u, &at);
}

void api_chat_device_error(const struct eng_device_error *d, bool retryable,
                           struct api_device_error *out)
{
    bool head = d->layer_end <= d->layer_begin;
    *out = (struct api_device_error){
        .ert_state = (int)d->state, .ert_name = eng_ert_name((int)d->state),
        .phase = eng_phase_name((int)d->phase), .chunk_index = d->chunk_index,
        .chunk_count = d->chunk_count, .layer_first = head ? -1 : d->layer_begin,
        .layer_last = head ? -1 : d->layer_end - 1, .head = head, .token_pos = d->token_pos,
        .elapsed_ms = (int64_t)d->elapsed_ms, .attempts = d->attempts,
        .unrecovered = !retryable,
    };
    snprintf(out->device, sizeof out->device, "%s", d->device);
}

void api_chat_run_error(api_chat_run *c, const struct eng_error_event *e)
{
    struct api_err err;
    if (e->has_device_error) {
        struct api_device_error ad;
        api_chat_device_error(&e->device, e->retryable, &ad);
        api_err_device(&err, &ad);
    } else if (e->grammar) {
        /* The request's grammar ended it (its dead end or a limit): the field that
         * asked for the grammar, and what was generated (a stream sent it already). */
        size_t n = c->content.n > 200 ? ut_utf8_char_start(c->content.p, 200) : c->content.n;
        if (c->req->stream || !c->content.n)
            api_refuse(&err, API_ERR_BAD_REQUEST, api_chat_req_grammar_param(c->req), "%s",
                       e->message);
        else
            api_refuse(&err, API_ERR_BAD_REQUEST, api_chat_req_grammar_param(c->req),
                       "%s; the output until then: \"%.*s\"%s", e->message, (int)n,
                       c->content.p, n < c->content.n ? "..." : "");
    } else {
        api_refuse(&err, e->code == -EINVAL ? API_ERR_BAD_REQUEST : API_ERR_INTERNAL, NULL,
                   "%s", e->message);
    }
    fail(c, &err);
}

void api_chat_refuse(const struct api_chat_req *req, int rc, int queue_size, int n_ctx,
                     int n_prompt, const struct api_chat_sink *sink)
{
    struct api_err e;
    switch (rc) {
    case -ERANGE:
        api_context_length_err(&e, n_ctx, n_prompt, req->max_tokens);
        break;
    case -EBUSY:
        api_server_busy_err(&e, queue_size);
        break;
    case -ESHUTDOWN:
        api_refuse(&e, API_ERR_SHUTTING_DOWN, NULL, "the server is shutting down");
        break;
    default:
        api_refuse(&e, API_ERR_INTERNAL, NULL, "the worker refused the request");
        break;
    }
    sink->answer(sink->ctx, api_err_status(&e), api_chat_format_error(sink->format, &e, false),
                 api_err_retry_after(&e));
}
