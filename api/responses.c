/* POST /v1/responses: the request translated into a chat request body, the answer
 * framed as the Response object and its stream events. See api/responses.h. */
#include "api/responses.h"

#include "api/json-util.h"
#include "api/chat-resp.h"
#include "util/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ----------------------------------------------------------------------- */

/* A message's content: a string, or input_text / output_text parts as chat's text
 * parts. */
static json_t *content_of(const json_t *c, const char *at, struct api_err *bad)
{
    if (json_is_string(c))
        return json_deep_copy(c);
    if (!c || json_is_null(c)) {
        api__refuse(bad, at, "Missing required parameter: '%s'.", at);
        return NULL;
    }
    if (!json_is_array(c)) {
        api__wrong_type(bad, at, "a string or an array of content parts", c);
        return NULL;
    }
    json_t *parts = json_array();
    size_t i;
    const json_t *p;
    json_array_foreach(c, i, p) {
        char q[96];
        api__path(q, sizeof q, "%s[%zu].type", at, i);
        const json_t *type = json_object_get(p, "type");
        if (!api__str_is(type, "input_text") && !api__str_is(type, "output_text") &&
            !api__str_is(type, "text")) {
            json_decref(parts);
            api__refuse(bad, q, "Invalid value for '%s': this model reads text only, so content "
                                "parts must be input_text or output_text.",
                        q);
            return NULL;
        }
        if (!json_is_string(json_object_get(p, "text")) ||
            api__append(parts, json_pack("{s:s, s:O}", "type", "text", "text", json_object_get(p, "text")),
                   bad)) {
            json_decref(parts);
            api__path(q, sizeof q, "%s[%zu].text", at, i);
            api__refuse(bad, q, "Missing required parameter: '%s'.", q);
            return NULL;
        }
    }
    return parts;
}

/* One input item onto the chat messages. Consecutive function_call items become one
 * assistant message's tool_calls. */
static int map_item(const json_t *it, size_t i, json_t *msgs, struct api_err *bad)
{
    char at[64];
    api__path(at, sizeof at, "input[%zu]", i);
    if (!json_is_object(it))
        return api__wrong_type(bad, at, "an object", it);
    const json_t *type = api__opt(it, "type");
    if (!type || api__str_is(type, "message")) {
        char p[96];
        api__path(p, sizeof p, "%s.content", at);
        json_t *content = content_of(json_object_get(it, "content"), p, bad);
        if (!content)
            return -EINVAL;
        return api__append(msgs, json_pack("{s:O?, s:o}", "role", json_object_get(it, "role"),
                                      "content", content),
                      bad);
    }
    if (api__str_is(type, "function_call")) {
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        json_t *calls = json_object_get(last, "tool_calls");
        if (!api__str_is(json_object_get(last, "role"), "assistant") || !calls) {
            calls = json_array();
            if (api__append(msgs, json_pack("{s:s, s:n, s:o}", "role", "assistant", "content",
                                       "tool_calls", calls),
                       bad))
                return -ENOMEM;
        }
        return api__append(calls,
                      json_pack("{s:O?, s:s, s:{s:O?, s:O?}}", "id", json_object_get(it, "call_id"),
                                "type", "function", "function", "name",
                                json_object_get(it, "name"), "arguments",
                                json_object_get(it, "arguments")),
                      bad);
    }
    if (api__str_is(type, "function_call_output")) {
        char p[96];
        api__path(p, sizeof p, "%s.output", at);
        json_t *content = content_of(json_object_get(it, "output"), p, bad);
        if (!content)
            return -EINVAL;
        return api__append(msgs, json_pack("{s:s, s:O?, s:o}", "role", "tool", "tool_call_id",
                                      json_object_get(it, "call_id"), "content", content),
                      bad);
    }
    if (api__str_is(type, "reasoning"))
        return 0; /* given back by clients in round trips; the template drops old reasoning */
    char p[96];
    api__path(p, sizeof p, "%s.type", at);
    return api__refuse(bad, p, "Invalid value for '%s': minicpmd takes message, function_call, "
                               "function_call_output and reasoning items.",
                       p);
}

static int map_input(const json_t *body, json_t *msgs, struct api_err *bad)
{
    const json_t *ins = api__opt(body, "instructions");
    if (ins && !json_is_string(ins))
        return api__wrong_type(bad, "instructions", "a string", ins);
    if (ins && api__append(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins), bad))
        return -ENOMEM;
    const json_t *in = api__opt(body, "input");
    if (!in)
        return api__refuse(bad, "input", "Missing required parameter: 'input'.");
    if (json_is_string(in))
        return api__append(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in), bad);
    if (!json_is_array(in))
        return api__wrong_type(bad, "input", "a string or an array of input items", in);
    size_t i;
    const json_t *it;
    json_array_foreach(in, i, it) {
        if (map_item(it, i, msgs, bad))
            return -EINVAL;
    }
    return 0;
}

static int map_tools(const json_t *body, json_t *chat, struct api_err *bad)
{
    const json_t *tools = api__opt(body, "tools");
    if (tools && !json_is_array(tools))
        return api__wrong_type(bad, "tools", "an array", tools);
    if (tools && json_array_size(tools)) {
        json_t *out = json_array();
        if (api__set(chat, "tools", out, bad))
            return -ENOMEM;
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            char p[32];
            api__path(p, sizeof p, "tools[%zu].type", i);
            if (!api__str_is(json_object_get(t, "type"), "function"))
                return api__refuse(bad, p, "Invalid value for '%s': minicpmd runs function tools "
                                           "only.",
                                   p);
            json_t *fn = json_object();
            if (api__append(out, json_pack("{s:s, s:o}", "type", "function", "function", fn), bad) ||
                api__copy(fn, "name", json_object_get(t, "name"), bad) ||
                api__copy(fn, "description", api__opt(t, "description"), bad) ||
                api__copy(fn, "parameters", api__opt(t, "parameters"), bad) ||
                api__copy(fn, "strict", api__opt(t, "strict"), bad))
                return -ENOMEM;
        }
    }
    const json_t *tc = api__opt(body, "tool_choice");
    if (tc && json_is_object(tc) && api__str_is(json_object_get(tc, "type"), "function"))
        return api__set(chat, "tool_choice",
                   json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                             json_object_get(tc, "name")),
                   bad);
    return api__copy(chat, "tool_choice", tc, bad);
}

static int map_format(const json_t *body, json_t *chat, struct api_err *bad)
{
    const json_t *text = api__opt(body, "text");
    const json_t *f = json_object_get(text, "format");
    if (!f || api__str_is(json_object_get(f, "type"), "text"))
        return 0;
    if (api__str_is(json_object_get(f, "type"), "json_object"))
        return api__set(chat, "response_format", json_pack("{s:s}", "type", "json_object"), bad);
    if (api__str_is(json_object_get(f, "type"), "json_schema")) {
        json_t *js = json_object();
        if (api__set(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema",
                                                   "json_schema", js),
                bad) ||
            api__copy(js, "name", json_object_get(f, "name"), bad) ||
            api__copy(js, "schema", json_object_get(f, "schema"), bad) ||
            api__copy(js, "strict", api__opt(f, "strict"), bad))
            return -ENOMEM;
        return 0;
    }
    return api__refuse(bad, "text.format.type", "Invalid value for 'text.format.type': expected "
                                                "'text', 'json_object' or 'json_schema'.");
}

static int refuse_stateful(const json_t *body, struct api_err *bad)
{
    if (api__opt(body, "previous_response_id"))
        return api__refuse(bad, "previous_response_id",
                           "Invalid 'previous_response_id': minicpmd is stateless and stores no "
                           "responses; send the whole conversation in 'input'.");
    if (api__opt(body, "conversation"))
        return api__refuse(bad, "conversation", "Invalid 'conversation': minicpmd is stateless "
                                                "and stores no conversations; send the whole "
                                                "conversation in 'input'.");
    const json_t *bg = api__opt(body, "background");
    if (bg && !json_is_false(bg))
        return api__refuse(bad, "background", "Invalid 'background': not supported; stream the "
                                              "response instead.");
    return 0;
}

int api_responses_translate(const json_t *body, json_t **chat, json_t **echo,
                            struct api_err *bad)
{
    *chat = *echo = NULL;
    if (!json_is_object(body))
        return api__refuse(bad, NULL, "The request body must be a JSON object.");
    if (refuse_stateful(body, bad))
        return -EINVAL;
    json_t *c = json_object(), *e = json_object(), *msgs = json_array();
    int rc = !c || !e || api__set(c, "messages", msgs, bad) ? -ENOMEM : 0;
    const json_t *reasoning = api__opt(body, "reasoning");
    if (rc == 0)
        rc = map_input(body, msgs, bad);
    if (rc == 0)
        rc = api__copy(c, "model", json_object_get(body, "model"), bad) ||
             api__copy(c, "stream", api__opt(body, "stream"), bad) ||
             api__copy(c, "max_completion_tokens", api__opt(body, "max_output_tokens"), bad) ||
             api__copy(c, "temperature", api__opt(body, "temperature"), bad) ||
             api__copy(c, "top_p", api__opt(body, "top_p"), bad) ||
             api__copy(c, "user", api__opt(body, "user"), bad) ||
             api__copy(c, "reasoning_effort", json_object_get(reasoning, "effort"), bad) ||
             map_tools(body, c, bad) || map_format(body, c, bad);
    if (rc != 0) {
        json_decref(c);
        json_decref(e);
        return -EINVAL;
    }
    /* What the Response object repeats of the request (absent: OpenAI's defaults). */
    static const char *const repeat[] = {"instructions", "max_output_tokens", "model",
                                         "temperature", "top_p", "tools", "tool_choice",
                                         "text", "reasoning", "parallel_tool_calls",
                                         "metadata", "user"};
    for (size_t i = 0; i < sizeof repeat / sizeof *repeat; i++)
        json_object_set(e, repeat[i], json_object_get(body, repeat[i]));
    *chat = c;
    *echo = e;
    return 0;
}

/* ---- the Response framing ------------------------------------------------------------------ */

enum item_kind { ITEM_NONE = 0, ITEM_REASONING, ITEM_MESSAGE };

struct rfmt {
    struct api_chat_format f;
    json_t *echo;
    json_t *output;             /* finished items */
    int seq;                    /* sequence_number of the next event */
    enum item_kind open;        /* the item a stream is writing */
    char open_id[80];
    ut_buf text;                /* its text so far */
    char rnd[33];               /* 32 random [0-9A-Za-z], the response's own: ids
                                 * are resp_<rnd> and <prefix>_<rnd><n> */
    int n_items;
};

static void new_id(struct rfmt *f, const char *prefix, char *out, size_t size)
{
    snprintf(out, size, "%s_%s%d", prefix, f->rnd, f->n_items++);
}

static json_t *opt(const json_t *echo, const char *key, json_t *dflt)
{
    const json_t *v = json_object_get(echo, key);
    if (v && !json_is_null(v)) {
        json_decref(dflt);
        return json_deep_copy(v);
    }
    return dflt;
}

/* The Response object with `output` (referenced) and, when done, usage. */
static json_t *response(struct rfmt *f, const struct api_chat_ident *ci, const char *status,
                        json_t *output, const struct api_usage *u, bool length)
{
    char id[80];
    snprintf(id, sizeof id, "resp_%s", f->rnd);
    const json_t *r = json_object_get(f->echo, "reasoning");
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:n, s:o, s:o, s:o, s:o, s:O, s:o, s:n, s:{s:O?, s:n}, s:b, s:o, "
        "s:o, s:o, s:o, s:s, s:o, s:o, s:n, s:b}",
        "id", id, "object", "response", "created_at", (json_int_t)ci->created, "status", status,
        "error", "incomplete_details",
        length ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "instructions",
        opt(f->echo, "instructions", json_null()), "max_output_tokens",
        opt(f->echo, "max_output_tokens", json_null()), "model", api_text_json(ci->model, strlen(ci->model)),
        "output", output, "parallel_tool_calls", opt(f->echo, "parallel_tool_calls", json_true()),
        "previous_response_id", "reasoning", "effort", json_object_get(r, "effort"), "summary",
        "store", 0, "temperature", opt(f->echo, "temperature", json_real(1.0)), "text",
        opt(f->echo, "text", json_pack("{s:{s:s}}", "format", "type", "text")), "tool_choice",
        opt(f->echo, "tool_choice", json_string("auto")), "tools",
        opt(f->echo, "tools", json_array()), "truncation", "disabled", "top_p",
        opt(f->echo, "top_p", json_real(1.0)), "metadata", opt(f->echo, "metadata", json_object()),
        "access_programs", "background", 0);
    if (o && u)
        json_object_set_new(o, "usage",
                            json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens",
                                      (int)u->prompt_tokens, "input_tokens_details",
                                      "cached_tokens", (int)u->cached_tokens, "output_tokens",
                                      (int)u->completion_tokens, "output_tokens_details",
                                      "reasoning_tokens", (int)u->reasoning_tokens,
                                      "total_tokens",
                                      (int)(u->prompt_tokens + u->completion_tokens)));
    else if (o)
        json_object_set_new(o, "usage", json_null());
    return o;
}

/* "event: <type>\ndata: {…, "type", "sequence_number"}\n\n" appended to b; steals o. */
static void event(struct rfmt *f, ut_buf *b, const char *type, json_t *o)
{
    if (!o) {
        b->oom = true;
        return;
    }
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(f->seq++));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) {
        b->oom = true;
        return;
    }
    ut_buf_adds(b, "event: ");
    ut_buf_adds(b, type);
    ut_buf_adds(b, "\ndata: ");
    ut_buf_adds(b, s);
    ut_buf_adds(b, "\n\n");
    free(s);
}

static char *take(ut_buf *b)
{
    if (b->oom || !b->p) {
        ut_buf_free(b);
        return NULL;
    }
    return b->p;
}

static json_t *message_item(const char *id, const char *status, const char *text, size_t n)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[], s:[]}]}", "type", "message", "id",
                     id, "status", status, "role", "assistant", "content", "type", "output_text",
                     "text", api_text_json(text, n), "annotations", "logprobs");
}

static json_t *reasoning_item(const char *id, const char *text, size_t n)
{
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}]}", "type", "reasoning", "id", id, "summary",
                     "content", "type", "reasoning_text", "text", api_text_json(text, n));
}

static json_t *call_item(const char *id, const char *call_id, const char *name, const char *args,
                         const char *status)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id", id, "call_id",
                     call_id, "name", name ? name : "", "arguments", args ? args : "{}", "status",
                     status);
}

/* The events that end the open item of a stream. */
static void close_item(struct rfmt *f, ut_buf *b)
{
    if (f->open == ITEM_NONE)
        return;
    int idx = (int)json_array_size(f->output);
    const char *t = f->text.p ? f->text.p : "";
    json_t *item;
    if (f->open == ITEM_MESSAGE) {
        event(f, b, "response.output_text.done",
              json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", f->open_id, "output_index", idx,
                        "content_index", 0, "text", api_text_json(t, f->text.n), "logprobs"));
        event(f, b, "response.content_part.done",
              json_pack("{s:s, s:i, s:i, s:{s:s, s:o, s:[]}}", "item_id", f->open_id,
                        "output_index", idx, "content_index", 0, "part", "type", "output_text",
                        "text", api_text_json(t, f->text.n), "annotations"));
        item = message_item(f->open_id, "completed", t, f->text.n);
    } else {
        event(f, b, "response.reasoning_text.done",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", f->open_id, "output_index", idx,
                        "content_index", 0, "text", api_text_json(t, f->text.n)));
        item = reasoning_item(f->open_id, t, f->text.n);
    }
    event(f, b, "response.output_item.done",
          json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    if (!item || json_array_append_new(f->output, item) != 0)
        b->oom = true;
    f->open = ITEM_NONE;
    ut_buf_free(&f->text);
}

static void open_item(struct rfmt *f, ut_buf *b, enum item_kind k)
{
    int idx = (int)json_array_size(f->output);
    new_id(f, k == ITEM_MESSAGE ? "msg" : "rs", f->open_id, sizeof f->open_id);
    f->open = k;
    if (k == ITEM_MESSAGE) {
        event(f, b, "response.output_item.added",
              json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:[]}}", "output_index", idx, "item", "type",
                        "message", "id", f->open_id, "status", "in_progress", "role",
                        "assistant", "content"));
        event(f, b, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", f->open_id,
                        "output_index", idx, "content_index", 0, "part", "type", "output_text",
                        "text", "", "annotations"));
    } else {
        event(f, b, "response.output_item.added",
              json_pack("{s:i, s:{s:s, s:s, s:[]}}", "output_index", idx, "item", "type",
                        "reasoning", "id", f->open_id, "summary"));
    }
}

static void text_delta(struct rfmt *f, ut_buf *b, enum item_kind k, const char *t)
{
    if (f->open != k) {
        close_item(f, b);
        open_item(f, b, k);
    }
    int idx = (int)json_array_size(f->output);
    ut_buf_adds(&f->text, t);
    if (k == ITEM_MESSAGE)
        event(f, b, "response.output_text.delta",
              json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", f->open_id, "output_index", idx,
                        "content_index", 0, "delta", api_text_json(t, strlen(t)), "logprobs"));
    else
        event(f, b, "response.reasoning_text.delta",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", f->open_id, "output_index", idx,
                        "content_index", 0, "delta", api_text_json(t, strlen(t))));
}

static void call_events(struct rfmt *f, ut_buf *b, const struct api_tool_call_delta *tc)
{
    close_item(f, b);
    int idx = (int)json_array_size(f->output);
    char id[80];
    new_id(f, "fc", id, sizeof id);
    const char *call_id = tc->id ? tc->id : id;
    event(f, b, "response.output_item.added",
          json_pack("{s:i, s:o}", "output_index", idx, "item",
                    call_item(id, call_id, tc->name, "", "in_progress")));
    event(f, b, "response.function_call_arguments.delta",
          json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", idx, "delta",
                    tc->arguments ? tc->arguments : "{}"));
    event(f, b, "response.function_call_arguments.done",
          json_pack("{s:s, s:i, s:s, s:s}", "item_id", id, "output_index", idx, "name",
                    tc->name ? tc->name : "", "arguments", tc->arguments ? tc->arguments : "{}"));
    json_t *item = call_item(id, call_id, tc->name, tc->arguments,
                             tc->cut ? "incomplete" : "completed");
    event(f, b, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    if (!item || json_array_append_new(f->output, item) != 0)
        b->oom = true;
}

static char *r_start(void *ctx, const struct api_chat_ident *ci)
{
    struct rfmt *f = ctx;
    ut_buf b = {0};
    json_t *empty = json_array();
    event(f, &b, "response.created",
          json_pack("{s:o}", "response", response(f, ci, "in_progress", empty, NULL, false)));
    event(f, &b, "response.in_progress",
          json_pack("{s:o}", "response", response(f, ci, "in_progress", empty, NULL, false)));
    json_decref(empty);
    return take(&b);
}

static char *r_delta(void *ctx, const struct api_chat_ident *ci, const struct api_chat_delta *d)
{
    struct rfmt *f = ctx;
    ut_buf b = {0};
    if (d->reasoning && d->reasoning[0])
        text_delta(f, &b, ITEM_REASONING, d->reasoning);
    if (d->content && d->content[0])
        text_delta(f, &b, ITEM_MESSAGE, d->content);
    for (size_t i = 0; i < d->n_tool_calls; i++)
        call_events(f, &b, &d->tool_calls[i]);
    return b.n || b.oom ? take(&b) : (ut_buf_free(&b), NULL);
}

static char *r_end(void *ctx, const struct api_chat_ident *ci, enum api_finish_reason fr,
                   const struct api_usage *u, const struct api_timings *t)
{
    (void)t;
    struct rfmt *f = ctx;
    ut_buf b = {0};
    close_item(f, &b);
    bool length = fr == API_FINISH_LENGTH;
    const char *status = length ? "incomplete" : "completed";
    event(f, &b, length ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response", response(f, ci, status, f->output, u, length)));
    return take(&b);
}

static char *r_body(void *ctx, const struct api_chat_ident *ci, const struct api_chat_result *r)
{
    struct rfmt *f = ctx;
    json_t *out = json_array();
    char id[80];
    if (r->reasoning && r->reasoning[0]) {
        new_id(f, "rs", id, sizeof id);
        json_array_append_new(out, reasoning_item(id, r->reasoning, strlen(r->reasoning)));
    }
    if (r->content && r->content[0]) {
        new_id(f, "msg", id, sizeof id);
        json_array_append_new(out, message_item(id, "completed", r->content, strlen(r->content)));
    }
    for (size_t i = 0; i < r->n_tool_calls; i++) {
        new_id(f, "fc", id, sizeof id);
        const struct api_tool_call *c = &r->tool_calls[i];
        json_array_append_new(out, call_item(id, c->id ? c->id : id, c->name, c->arguments,
                                             c->cut ? "incomplete" : "completed"));
    }
    bool length = r->finish == API_FINISH_LENGTH;
    json_t *o = response(f, ci, length ? "incomplete" : "completed", out, &r->usage, length);
    json_decref(out);
    return api_json_dump(o, NULL);
}

/* The translated chat body's names back to the Responses request's. */
static const struct api_param_name param_names[] = {
    {"max_completion_tokens", "max_output_tokens"},
    {"response_format", "text.format"},
    {"reasoning_effort", "reasoning.effort"},
};

void api_responses_err_names(struct api_err *e)
{
    api_err_rename(e, param_names, sizeof param_names / sizeof *param_names);
}

/* A stream's failure is the documented `error` event (code, message, param); a
 * whole answer's is OpenAI's error object, as every /v1 route's. */
static char *r_error(void *ctx, const struct api_err *failure, bool stream)
{
    struct rfmt *f = ctx;
    struct api_err named = *failure;
    const struct api_err *e = &named;
    api_responses_err_names(&named);
    if (!stream)
        return api_err_body(e);
    json_t *o = api_err_json(e);
    json_t *err = json_object_get(o, "error");
    ut_buf b = {0};
    event(f, &b, "error",
          json_pack("{s:O?, s:O?, s:O?}", "code", json_object_get(err, "code"), "message",
                    json_object_get(err, "message"), "param", json_object_get(err, "param")));
    json_decref(o);
    return take(&b);
}

struct api_chat_format *api_responses_format_new(json_t *echo)
{
    struct rfmt *f = calloc(1, sizeof *f);
    if (!f || !(f->output = json_array())) {
        free(f);
        return NULL;
    }
    f->echo = json_incref(echo);
    api_random_alnum(f->rnd, sizeof f->rnd - 1);
    f->f = (struct api_chat_format){r_start, r_delta, r_end, r_body, r_error, f, NULL};
    return &f->f;
}

void api_responses_format_free(void *ctx)
{
    struct rfmt *f = ctx;
    if (!f)
        return;
    json_decref(f->echo);
    json_decref(f->output);
    ut_buf_free(&f->text);
    free(f);
}
