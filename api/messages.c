/* Anthropic's Messages API: the Message object, its stream events and errors
 * (api/messages.h). The request's translation is in messages-req.c. */
#include "api/messages.h"

#include "util/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors -------------------------------------------------------------------- */

const char *api_messages_error_type(enum api_error e)
{
    switch (e) {
    case API_ERR_UNAUTHORIZED: return "authentication_error";
    case API_ERR_FORBIDDEN:
    case API_ERR_HOST_NOT_ALLOWED: return "permission_error";
    case API_ERR_NOT_FOUND:
    case API_ERR_MODEL_NOT_FOUND: return "not_found_error";
    case API_ERR_BODY_TOO_LARGE: return "request_too_large";
    case API_ERR_BUSY:
    case API_ERR_LOADING: return "overloaded_error";
    default:
        return api_error_status(e) < 500 ? "invalid_request_error" : "api_error";
    }
}

/* {"type":"error","error":{"type","message"[, the device fault's fields]}}. */
static json_t *error_json(const struct api_err *e)
{
    json_t *err = json_pack("{s:s, s:o}", "type", api_messages_error_type(e->error), "message",
                            api_text_json(e->message, strlen(e->message)));
    if (err && e->has_device) {
        /* The fault's fields as OpenAI's body has them (ert_state, phase, …). */
        json_t *o = api_err_json(e);
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(o, "error"), k, v) {
            if (strcmp(k, "type") && strcmp(k, "param") && strcmp(k, "code") &&
                strcmp(k, "message"))
                json_object_set(err, k, v);
        }
        json_decref(o);
    }
    return err ? json_pack("{s:s, s:o}", "type", "error", "error", err) : NULL;
}

char *api_messages_err_body(const struct api_err *e) { return api_json_dump(error_json(e), NULL); }

/* "event: <type>\ndata: <o>\n\n" appended to b; steals o. */
static void event(ut_buf *b, const char *type, json_t *o)
{
    char *s = api_json_dump(o, NULL);
    if (!s) {
        b->oom = true;
        return;
    }
    ut_buf_printf(b, "event: %s\ndata: %s\n\n", type, s);
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

char *api_messages_err_event(const struct api_err *e)
{
    ut_buf b = {0};
    event(&b, "error", error_json(e));
    return take(&b);
}

char *api_messages_count_body(int64_t input_tokens)
{
    return api_json_dump(json_pack("{s:I}", "input_tokens", (json_int_t)input_tokens), NULL);
}

/* ---- the Message framing ----------------------------------------------------------- */

enum block { BLOCK_NONE = 0, BLOCK_TEXT, BLOCK_THINKING };

struct mfmt {
    struct api_chat_format f;
    const struct api_chat_req *req;
    struct api_messages_opts opts;
    int stop_index;             /* the stop string that ended it, or -1 */
    int n_blocks;               /* a stream's blocks so far */
    enum block open;            /* the block a stream is writing */
    int n_tools;                /* tool_use blocks answered */
};

/* "msg_" and the ident's random part. */
static void message_id(const struct api_chat_ident *ci, char *out, size_t size)
{
    const char *r = strncmp(ci->id, "chatcmpl-", 9) == 0 ? ci->id + 9 : ci->id;
    snprintf(out, size, "msg_%s", r);
}

/* "toolu_" and the call id's random part. */
static void tool_id(const char *call_id, char *out, size_t size)
{
    char fresh[API_TOOL_CALL_ID_SIZE];
    if (!call_id) {
        api_tool_call_id(fresh);
        call_id = fresh;
    }
    snprintf(out, size, "toolu_%s", strncmp(call_id, "call_", 5) == 0 ? call_id + 5 : call_id);
}

static const char *stop_reason(const struct mfmt *f, enum api_finish_reason fr,
                               const struct api_usage *u)
{
    switch (fr) {
    case API_FINISH_TOOL_CALLS: return "tool_use";
    case API_FINISH_LENGTH:
        /* max_tokens, or the context ended before it */
        return f->req->max_tokens > 0 && u->completion_tokens < f->req->max_tokens
                   ? "model_context_window_exceeded"
                   : "max_tokens";
    case API_FINISH_STOP: break;
    }
    return f->stop_index >= 0 ? "stop_sequence" : "end_turn";
}

static json_t *stop_sequence(const struct mfmt *f)
{
    if (f->stop_index < 0 || f->stop_index >= f->req->n_stop)
        return json_null();
    const struct api_chat_stop *s = &f->req->stop[f->stop_index];
    return api_text_json(s->text, s->len);
}

/* Anthropic counts the prompt tokens read from a cache apart from input_tokens. */
static json_t *usage(const struct api_usage *u)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:{s:i}}", "input_tokens",
                     (int)(u->prompt_tokens - u->cached_tokens), "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", (int)u->cached_tokens, "output_tokens",
                     (int)u->completion_tokens, "output_tokens_details", "thinking_tokens",
                     (int)u->reasoning_tokens);
}

/* The longest prefix of a cut call's arguments (a JSON object's text, left open:
 * {"a":1,"b":"tex) that ends after a whole value, with its brackets closed:
 * {"a":1}. What a client's partial-JSON parser makes of the same text, so the
 * streamed input_json_delta and a whole answer's input agree. */
static json_t *close_cut(const char *s)
{
    enum { MAXD = 64 };
    char stack[MAXD], safe_stack[MAXD];
    bool want_key[MAXD];
    int depth = 0, safe_depth = 0;
    size_t safe = 0;
    for (size_t i = 0; s[i]; i++) {
        char c = s[i];
        if (c == '"') {
            bool key = depth > 0 && stack[depth - 1] == '{' && want_key[depth - 1];
            for (i++; s[i] && s[i] != '"'; i++)
                if (s[i] == '\\' && s[i + 1])
                    i++;
            if (!s[i])
                break;   /* cut inside the string */
            if (key)
                continue;
        } else if (c == '{' || c == '[') {
            if (depth == MAXD)
                break;
            want_key[depth] = c == '{';
            stack[depth++] = c;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                break;
            depth--;
        } else if (c == ':' && depth > 0) {
            want_key[depth - 1] = false;
            continue;
        } else if (c == ',' && depth > 0) {
            want_key[depth - 1] = stack[depth - 1] == '{';
            continue;   /* the value before it was marked safe when it ended */
        } else {
            /* numbers, literals, whitespace: whole only when a ',' or a closer
             * follows, which marks the value before it below */
            if ((s[i + 1] == ',' || s[i + 1] == '}' || s[i + 1] == ']') && c != ' ' &&
                c != '\n' && c != '\t' && c != '\r') {
                safe = i + 1;
                safe_depth = depth;
                memcpy(safe_stack, stack, (size_t)depth);
            }
            continue;
        }
        safe = i + 1;
        safe_depth = depth;
        memcpy(safe_stack, stack, (size_t)depth);
    }
    ut_buf b = {0};
    ut_buf_add(&b, s, safe);
    for (int d = safe_depth; d > 0; d--)
        ut_buf_addc(&b, safe_stack[d - 1] == '{' ? '}' : ']');
    json_t *o = b.p && !b.oom ? json_loads(b.p, 0, NULL) : NULL;
    ut_buf_free(&b);
    if (json_is_object(o))
        return o;
    json_decref(o);
    return json_object();
}

/* A tool call's input object from its arguments text ({} when it is not one); a
 * cut call's as far as it got whole. */
static json_t *tool_input(const char *args, bool cut)
{
    if (cut)
        return close_cut(args ? args : "");
    json_t *o = args ? json_loads(args, 0, NULL) : NULL;
    if (json_is_object(o))
        return o;
    json_decref(o);
    return json_object();
}

static json_t *tool_block(const char *call_id, const char *name, json_t *input)
{
    char id[64];
    tool_id(call_id, id, sizeof id);
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name",
                     name ? name : "", "input", input);
}

static void stopped(void *ctx, int stop_index) { ((struct mfmt *)ctx)->stop_index = stop_index; }

static char *m_body(void *ctx, const struct api_chat_ident *ci, const struct api_chat_result *r)
{
    struct mfmt *f = ctx;
    char id[64];
    message_id(ci, id, sizeof id);
    json_t *content = json_array();
    if (r->reasoning && r->reasoning[0])
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking",
                                                 "thinking", api_text_json(r->reasoning,
                                                                           strlen(r->reasoning)),
                                                 "signature", ""));
    if (r->content && r->content[0])
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                 api_text_json(r->content, strlen(r->content))));
    size_t n = f->opts.single_tool && r->n_tool_calls > 1 ? 1 : r->n_tool_calls;
    for (size_t i = 0; i < n; i++)
        json_array_append_new(content, tool_block(r->tool_calls[i].id, r->tool_calls[i].name,
                                                  tool_input(r->tool_calls[i].arguments, r->tool_calls[i].cut)));
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:o, s:o}", "id", id, "type", "message",
                          "role", "assistant", "model", api_text_json(ci->model,
                                                                      strlen(ci->model)),
                          "content", content, "stop_reason", stop_reason(f, r->finish, &r->usage),
                          "stop_sequence", stop_sequence(f), "usage", usage(&r->usage));
    return api_json_dump(o, NULL);
}

static char *m_start(void *ctx, const struct api_chat_ident *ci)
{
    (void)ctx;
    char id[64];
    message_id(ci, id, sizeof id);
    ut_buf b = {0};
    /* The prompt's split into cached and computed tokens is known at the end:
     * message_delta gives it. */
    event(&b, "message_start",
          json_pack("{s:s, s:{s:s, s:s, s:s, s:o, s:[], s:n, s:n, s:{s:i, s:i, s:i, s:i}}}",
                    "type", "message_start", "message", "id", id, "type", "message", "role",
                    "assistant", "model", api_text_json(ci->model, strlen(ci->model)), "content",
                    "stop_reason", "stop_sequence", "usage", "input_tokens",
                    (int)ci->prompt_tokens, "cache_creation_input_tokens", 0,
                    "cache_read_input_tokens", 0, "output_tokens", 0));
    return take(&b);
}

static void close_block(struct mfmt *f, ut_buf *b)
{
    if (f->open == BLOCK_NONE)
        return;
    event(b, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index",
                                             f->n_blocks - 1));
    f->open = BLOCK_NONE;
}

static void text_delta(struct mfmt *f, ut_buf *b, enum block k, const char *t)
{
    bool think = k == BLOCK_THINKING;
    if (f->open != k) {
        close_block(f, b);
        event(b, "content_block_start",
              think ? json_pack("{s:s, s:i, s:{s:s, s:s, s:s}}", "type", "content_block_start",
                                "index", f->n_blocks, "content_block", "type", "thinking",
                                "thinking", "", "signature", "")
                    : json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_start",
                                "index", f->n_blocks, "content_block", "type", "text", "text",
                                ""));
        f->n_blocks++;
        f->open = k;
    }
    event(b, "content_block_delta",
          json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index",
                    f->n_blocks - 1, "delta", "type", think ? "thinking_delta" : "text_delta",
                    think ? "thinking" : "text", api_text_json(t, strlen(t))));
}

/* A whole tool call as one tool_use block: its input in one input_json_delta. */
static void tool_events(struct mfmt *f, ut_buf *b, const struct api_tool_call_delta *tc)
{
    close_block(f, b);
    if (f->opts.single_tool && f->n_tools > 0)
        return;
    f->n_tools++;
    int idx = f->n_blocks++;
    event(b, "content_block_start",
          json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", idx,
                    "content_block", tool_block(tc->id, tc->name, json_object())));
    json_t *input = tool_input(tc->arguments, tc->cut);
    char *args = api_json_dump(input, NULL);
    event(b, "content_block_delta",
          json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", idx,
                    "delta", "type", "input_json_delta", "partial_json", args ? args : "{}"));
    free(args);
    event(b, "content_block_stop",
          json_pack("{s:s, s:i}", "type", "content_block_stop", "index", idx));
}

static char *m_delta(void *ctx, const struct api_chat_ident *ci, const struct api_chat_delta *d)
{
    (void)ci;
    struct mfmt *f = ctx;
    ut_buf b = {0};
    if (d->reasoning && d->reasoning[0])
        text_delta(f, &b, BLOCK_THINKING, d->reasoning);
    if (d->content && d->content[0])
        text_delta(f, &b, BLOCK_TEXT, d->content);
    for (size_t i = 0; i < d->n_tool_calls; i++)
        tool_events(f, &b, &d->tool_calls[i]);
    return b.n || b.oom ? take(&b) : (ut_buf_free(&b), NULL);
}

static char *m_end(void *ctx, const struct api_chat_ident *ci, enum api_finish_reason fr,
                   const struct api_usage *u, const struct api_timings *t)
{
    (void)ci;
    (void)t;
    struct mfmt *f = ctx;
    ut_buf b = {0};
    close_block(f, &b);
    event(&b, "message_delta",
          json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
                    stop_reason(f, fr, u), "stop_sequence", stop_sequence(f), "usage", usage(u)));
    event(&b, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return take(&b);
}

/* A failure: a stream that began ends with the error event, else the body. */
static char *m_error(void *ctx, const struct api_err *e, bool stream)
{
    (void)ctx;
    struct api_err named = *e;   /* a refusal of the translated request: its field */
    api_messages_rename(&named);
    return stream ? api_messages_err_event(&named) : api_messages_err_body(&named);
}

struct api_chat_format *api_messages_format_new(const struct api_chat_req *req,
                                                const struct api_messages_opts *opts)
{
    struct mfmt *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->req = req;
    f->opts = *opts;
    f->stop_index = -1;
    f->f = (struct api_chat_format){m_start, m_delta, m_end, m_body, m_error, f, stopped};
    return &f->f;
}

void api_messages_format_free(void *ctx) { free(ctx); }
