/* libFuzzer target: arbitrary bytes as a POST /v1/messages (or, after a first
 * byte 'c', /v1/messages/count_tokens) body through api_messages_translate() and then
 * api_chat_req_parse(), as the handler does, and the Anthropic framing fed with
 * what came through (the Message body, the stream events, errors). Any crash,
 * leak or sanitizer report is a bug. A refusal must be a one-line 400 (or 500 out
 * of memory) whose Anthropic error body parses back with the same message; a
 * translation must be a body chat-req either accepts or refuses the same way; every
 * body and event must parse back as JSON. */
#include "api/chat-req.h"
#include "api/messages.h"
#include "api/text.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must_json(char *s, bool events)
{
    if (!s)
        abort();
    char *p = s;
    do {
        if (events) {   /* "event: <name>\ndata: <one line>\n\n" … */
            char *nl = strchr(p, '\n');
            if (strncmp(p, "event: ", 7) != 0 || !nl || strncmp(nl + 1, "data: ", 6) != 0)
                abort();
            p = nl + 7;
        }
        char *end = events ? strstr(p, "\n\n") : p + strlen(p);
        if (!end)
            abort();
        json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
        if (!j)
            abort();
        json_decref(j);
        p = events ? end + 2 : end;
    } while (*p);
    free(s);
}

static void check_refusal(const struct api_err *bad)
{
    if (bad->error != API_ERR_BAD_REQUEST && bad->error != API_ERR_INTERNAL)
        abort();
    if (!bad->message[0] || strchr(bad->message, '\n'))
        abort();
    char *body = api_messages_err_body(bad);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    const json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!j || !msg || strcmp(msg, bad->message) != 0 ||
        strcmp(json_string_value(json_object_get(j, "type")), "error") != 0)
        abort();
    json_decref(j);
    free(body);
}

/* The framing fed with the request's own strings: a body, and a stream. */
static void frame(const struct api_chat_req *r, const struct api_messages_opts *o,
                  const char *text)
{
    struct api_chat_format *f = api_messages_format_new(r, o);
    if (!f)
        return;
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, r->model ? r->model : "m", "1", "cpu", false);
    struct api_tool_call call = {NULL, text, text, text[0] == '{'};
    struct api_chat_result res = {.content = text, .reasoning = text, .tool_calls = &call,
                                  .n_tool_calls = 1, .finish = API_FINISH_STOP,
                                  .usage = {3, 2, 1, 1}};
    if (r->n_stop)
        f->stopped(f->ctx, r->n_stop - 1);
    must_json(f->body(f->ctx, &ci, &res), false);
    must_json(f->start(f->ctx, &ci), true);
    struct api_tool_call_delta tc = {0, NULL, text, text, true};
    struct api_chat_delta d[] = {{.reasoning = text}, {.content = text},
                                 {.tool_calls = &tc, .n_tool_calls = 1}};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) {
        char *s = f->delta(f->ctx, &ci, &d[i]);
        if (s)
            must_json(s, true);
    }
    must_json(f->end(f->ctx, &ci, API_FINISH_LENGTH, &res.usage, NULL), true);
    api_messages_format_free(f->ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    bool count = data[0] == 'c';   /* "c{…}": a count_tokens body */
    struct api_err bad = {0};
    json_t *body = api_parse_object((const char *)data + count, size - count, &bad);
    if (!body)
        return 0;
    json_t *chat = NULL;
    struct api_messages_opts o;
    int rc = api_messages_translate(body, count, &chat, &o, &bad);
    if (rc != 0) {
        if (chat)
            abort();
        check_refusal(&bad);
        json_decref(body);
        return 0;
    }
    struct api_chat_limits lim = {.n_vocab = 5000, .template_only = count};
    struct api_chat_req *r = NULL;
    rc = api_chat_req_parse(chat, &lim, &r, &bad);
    json_decref(chat);
    if (rc != 0) {
        api_messages_rename(&bad);
        check_refusal(&bad);
    } else {
        const json_t *m = json_array_get(r->chat.messages, 0);
        const char *text = json_string_value(json_object_get(m, "content"));
        frame(r, &o, text ? text : "{\"a\":1}");
        api_chat_req_free(r);
    }
    json_decref(body);
    return 0;
}
