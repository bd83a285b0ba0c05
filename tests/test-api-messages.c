/* api/messages: Anthropic's Messages API — the request translated into the chat
 * request api_chat_req_parse() then accepts (or refused naming the Anthropic
 * field), the Message object and its stream events from a chat result, and errors
 * in Anthropic's shape. Bodies and events are parsed back with jansson. */
#include "api/messages.h"
#include "tests/utf8.h"

#include "tests/chat-api-fx.h"
#include "tests/check.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define M(extra) "{\"model\":\"m\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" extra "}"
#define WEATHER                                                                         \
    "{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":{\"type\":" \
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}"

/* The chat body `body` means (checked), and the request chat-req makes of it. */
static json_t *translate(const char *body, bool count, struct api_messages_opts *opts,
                         struct api_chat_req **req)
{
    json_t *j = load(body);
    json_t *chat = NULL;
    struct api_err bad = {0};
    int rc = api_messages_translate(j, count, &chat, opts, &bad);
    json_decref(j);
    cr_assert_eq(rc, 0, "refused (%s): %s", bad.message, body);
    if (req) {
        rc = api_chat_req_parse(chat, &LIM, req, &bad);
        cr_assert_eq(rc, 0, "chat-req refused the translation (%s: %s): %s", bad.param,
                     bad.message, body);
    }
    return chat;
}

/* Refused with 400 and a message that starts with `at` and holds `needle`. */
static void refused(const char *body, bool count, const char *at, const char *needle)
{
    json_t *j = load(body);
    json_t *chat = (json_t *)1;
    struct api_messages_opts o;
    struct api_err bad = {0};
    int rc = api_messages_translate(j, count, &chat, &o, &bad);
    json_decref(j);
    cr_assert_eq(rc, -EINVAL, "accepted: %s", body);
    cr_assert_null(chat);
    cr_assert_eq(bad.error, API_ERR_BAD_REQUEST);
    cr_assert(mcd_utf8_valid(bad.message) && !strchr(bad.message, '\n'));
    cr_assert(strncmp(bad.message, at, strlen(at)) == 0, "message '%s' for %s", bad.message,
              body);
    if (needle)
        cr_assert_not_null(strstr(bad.message, needle), "message '%s' lacks '%s'", bad.message,
                           needle);
}

MCD_TEST(messages, translate_conversation)
{
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":2048,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"},"
        "{\"type\":\"text\",\"text\":\"Be kind.\"}],\"messages\":["
        "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Call it.\","
        "\"signature\":\"x\"},{\"type\":\"text\",\"text\":\"Let me look.\"},{\"type\":\"tool_use\","
        "\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
        "\"is_error\":true,\"content\":[{\"type\":\"text\",\"text\":\"timeout\"}]},{\"type\":\"text\","
        "\"text\":\"Try again.\"}]}],"
        "\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},\"stop_sequences\":[\"END\"],"
        "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5,\"metadata\":{\"user_id\":\"u1\"},"
        "\"stream\":true,\"cache_control\":{\"type\":\"ephemeral\"}}";
    struct api_messages_opts o;
    struct api_chat_req *r = NULL;
    json_t *c = translate(body, false, &o, &r);
    json_t *msgs = json_object_get(c, "messages");
    cr_assert_eq(json_array_size(msgs), 5);
    cr_assert_str_eq(sget(json_array_get(msgs, 0), "role"), "system");
    cr_assert_str_eq(sget(json_array_get(msgs, 0), "content"), "Be brief.\nBe kind.");
    json_t *a = json_array_get(msgs, 2);
    cr_assert_str_eq(sget(a, "role"), "assistant");
    cr_assert_str_eq(sget(a, "reasoning_content"), "Call it.");
    cr_assert_str_eq(sget(json_array_get(json_object_get(a, "content"), 0), "text"), "Let me look.");
    json_t *call = json_array_get(json_object_get(a, "tool_calls"), 0);
    cr_assert_str_eq(sget(call, "id"), "toolu_1");
    json_t *fn = json_object_get(call, "function");
    cr_assert_str_eq(sget(fn, "name"), "get_weather");
    cr_assert_str_eq(sget(json_object_get(fn, "arguments"), "city"), "Paris");
    json_t *t = json_array_get(msgs, 3);
    cr_assert_str_eq(sget(t, "role"), "tool");
    cr_assert_str_eq(sget(t, "tool_call_id"), "toolu_1");
    cr_assert_str_eq(sget(t, "content"), "Error: timeout");
    cr_assert_str_eq(sget(json_array_get(msgs, 4), "role"), "user");
    cr_assert_str_eq(sget(json_array_get(json_object_get(json_array_get(msgs, 4), "content"), 0),
                          "text"),
                     "Try again.");
    json_t *tool = json_object_get(json_array_get(json_object_get(c, "tools"), 0), "function");
    cr_assert_str_eq(sget(tool, "name"), "get_weather");
    cr_assert_not_null(json_object_get(tool, "parameters"));
    cr_assert_str_eq(sget(c, "tool_choice"), "required");
    cr_assert(json_is_false(json_object_get(c, "parallel_tool_calls")));
    cr_assert_str_eq(sget(c, "user"), "u1");
    cr_assert(!o.single_tool);
    /* what chat-req made of it */
    cr_assert_eq(r->max_tokens, 2048);
    cr_assert(r->stream);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_REQUIRED);
    cr_assert(!r->parallel_tool_calls);
    cr_assert_eq(r->chat.thinking, ENG_THINKING_ON);
    cr_assert_eq(r->n_stop, 1);
    cr_assert_eq(r->sampling.top_k, 5);
    cr_assert_float_eq(r->sampling.temperature, 0.5f, 1e-6);
    cr_assert_str_eq(r->user, "u1");
    api_chat_req_free(r);
    json_decref(c);
}

MCD_TEST(messages, translate_choices)
{
    struct api_messages_opts o;
    struct api_chat_req *r = NULL;
    json_t *c = translate(M(",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"auto\","
                            "\"disable_parallel_tool_use\":true},\"thinking\":{\"type\":"
                            "\"disabled\"}"),
                          false, &o, &r);
    cr_assert(o.single_tool);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_AUTO);
    cr_assert_eq(r->chat.thinking, ENG_THINKING_OFF);
    cr_assert_null(r->grammar);
    api_chat_req_free(r);
    json_decref(c);
    c = translate(M(",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"tool\",\"name\":"
                    "\"get_weather\"},\"thinking\":{\"type\":\"adaptive\"}"),
                  false, &o, &r);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_FUNCTION);
    cr_assert_str_eq(r->tool_choice_name, "get_weather");
    cr_assert_eq(r->chat.thinking, ENG_THINKING_UNSET);
    cr_assert(r->parallel_tool_calls);
    api_chat_req_free(r);
    json_decref(c);
    c = translate(M(",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"none\"}"), false, &o,
                  &r);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    cr_assert_null(r->parser_tools);
    api_chat_req_free(r);
    json_decref(c);
    /* structured output: a JSON response_format */
    c = translate(M(",\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{"
                    "\"type\":\"object\"}}}"),
                  false, &o, &r);
    cr_assert_eq(r->response_format, API_FORMAT_JSON_SCHEMA);
    api_chat_req_free(r);
    json_decref(c);
    /* count_tokens: no max_tokens, and a budget is not held to one */
    c = translate("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":5000}}",
                  true, &o, &r);
    cr_assert_eq(r->max_tokens, 0);
    api_chat_req_free(r);
    json_decref(c);
    /* an assistant turn last is continued, as chat continues it */
    c = translate("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"hi\"},{\"role\":\"assistant\",\"content\":\"The answer is\"}]}",
                  false, &o, &r);
    cr_assert(r->chat.continue_final);
    api_chat_req_free(r);
    json_decref(c);
}

MCD_TEST(messages, refusals)
{
    refused("[]", false, "The request body", NULL);
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false,
            "max_tokens: Field required", NULL);
    refused(M(",\"max_tokens\":0"), false, "max_tokens", ">= 1");
    refused(M(",\"max_tokens\":1.5"), false, "max_tokens", "integer");
    refused("{\"max_tokens\":5,\"messages\":[]}", false, "model", NULL);
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", false, "messages", NULL);
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":{}}", false, "messages", "array");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
            false, "messages.0.role", "'tool'");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[]}]}",
            false, "messages.0.content", "at least one");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"image\",\"source\":{}}]}]}",
            false, "messages.0.content.0.type", "text only");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"container_upload\"}]}]}",
            false, "messages.0.content.0.type", "'container_upload'");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"tool_use\",\"id\":\"a\",\"name\":\"b\",\"input\":{}}]}]}",
            false, "messages.0.content.0.type", "assistant");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
            "\"type\":\"tool_result\",\"tool_use_id\":\"a\"}]}]}",
            false, "messages.0.content.0.type", "user");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
            "\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"b\",\"input\":\"{}\"}]}]}",
            false, "messages.0.content.0.input", "object");
    refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"tool_result\",\"tool_use_id\":\"a\",\"content\":[{\"type\":\"image\"}]}]}]}",
            false, "messages.0.content.0.content.0.type", "text only");
    refused(M(",\"system\":[{\"type\":\"image\"}]"), false, "system.0.type", NULL);
    refused(M(",\"system\":5"), false, "system", NULL);
    refused(M(",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]"), false,
            "tools.0.type", "custom tools");
    refused(M(",\"tools\":[{\"name\":\"a b\",\"input_schema\":{}}]"), false, "tools.0.name", NULL);
    refused(M(",\"tools\":[{\"name\":\"a\"}]"), false, "tools.0.input_schema", NULL);
    refused(M(",\"tools\":[" WEATHER "," WEATHER "]"), false, "tools.1.name", "twice");
    refused(M(",\"tool_choice\":{\"type\":\"any\"}"), false, "tool_choice.type", "at least one");
    refused(M(",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"tool\"}"), false,
            "tool_choice.name", NULL);
    refused(M(",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"tool\",\"name\":\"x\"}"), false,
            "tool_choice.name", "no tool");
    refused(M(",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"required\"}"), false,
            "tool_choice.type", NULL);
    refused(M(",\"tool_choice\":\"auto\""), false, "tool_choice", "object");
    refused(M(",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1000}"), false,
            "thinking.budget_tokens", "1024");
    refused(M(",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}"), false,
            "thinking.budget_tokens", "less than max_tokens");
    refused(M(",\"thinking\":{\"type\":\"enabled\"}"), false, "thinking.budget_tokens", NULL);
    refused(M(",\"thinking\":{\"type\":\"on\"}"), false, "thinking.type", NULL);
    refused(M(",\"temperature\":1.5"), false, "temperature", NULL);
    refused(M(",\"top_p\":0"), false, "top_p", NULL);
    refused(M(",\"top_k\":2.5"), false, "top_k", NULL);
    refused(M(",\"stop_sequences\":\"x\""), false, "stop_sequences", NULL);
    refused(M(",\"stop_sequences\":[\"\"]"), false, "stop_sequences.0", "empty");
    refused(M(",\"stop_sequences\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
              "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]"),
            false, "stop_sequences", "at most");
    refused(M(",\"stream\":1"), false, "stream", NULL);
    refused(M(",\"metadata\":{\"user_id\":5}"), false, "metadata.user_id", NULL);
    refused(M(",\"output_config\":{\"format\":{\"type\":\"json_object\"}}"), false,
            "output_config.format.type", NULL);
}

/* ---- the answer -------------------------------------------------------------------- */

static struct api_chat_req *request(const char *body, struct api_messages_opts *o)
{
    struct api_chat_req *r = NULL;
    json_t *c = translate(body, false, o, &r);
    json_decref(c);
    return r;
}

static struct api_chat_ident ident(void)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "demo", "1", "cpu", false);
    ci.prompt_tokens = 30;
    return ci;
}

/* A stream's frames as a list of {"event", "data"}. */
static void events(char *frames, json_t *out)
{
    cr_assert_not_null(frames);
    char *p = frames;
    while (*p) {
        cr_assert(strncmp(p, "event: ", 7) == 0, "not an event: %s", p);
        char *nl = strchr(p, '\n');
        cr_assert_not_null(nl);
        *nl = '\0';
        const char *name = p + 7;
        p = nl + 1;
        cr_assert(strncmp(p, "data: ", 6) == 0);
        char *end = strstr(p, "\n\n");
        cr_assert_not_null(end);
        *end = '\0';
        json_t *d = load(p + 6);
        cr_assert_str_eq(sget(d, "type"), name, "event name and type");
        json_array_append_new(out, d);
        p = end + 2;
    }
    free(frames);
}

MCD_TEST(messages, message_body)
{
    struct api_messages_opts o;
    struct api_chat_req *r = request(M(",\"stop_sequences\":[\"zz\",\"END\"]"), &o);
    struct api_chat_format *f = api_messages_format_new(r, &o);
    struct api_chat_ident ci = ident();
    struct api_tool_call calls[] = {{"call_abc", "get_weather", "{\"city\":\"Paris\"}", false},
                                    {"call_def", "get_weather", "{\"city\":\"Rome\"}", false}};
    struct api_chat_result res = {.content = "It is sunny.", .reasoning = "Think.",
                                  .tool_calls = calls, .n_tool_calls = 2,
                                  .finish = API_FINISH_TOOL_CALLS,
                                  .usage = {30, 12, 3, 10}};
    json_t *m = parse_str(f->body(f->ctx, &ci, &res));
    cr_assert_str_eq(sget(m, "type"), "message");
    cr_assert_str_eq(sget(m, "role"), "assistant");
    cr_assert(strncmp(sget(m, "id"), "msg_", 4) == 0);
    cr_assert_str_eq(sget(m, "model"), "demo");
    cr_assert_str_eq(sget(m, "stop_reason"), "tool_use");
    cr_assert(json_is_null(json_object_get(m, "stop_sequence")));
    json_t *content = json_object_get(m, "content");
    cr_assert_eq(json_array_size(content), 4);
    cr_assert_str_eq(sget(json_array_get(content, 0), "type"), "thinking");
    cr_assert_str_eq(sget(json_array_get(content, 0), "thinking"), "Think.");
    cr_assert_str_eq(sget(json_array_get(content, 1), "text"), "It is sunny.");
    json_t *tu = json_array_get(content, 2);
    cr_assert_str_eq(sget(tu, "type"), "tool_use");
    cr_assert_str_eq(sget(tu, "id"), "toolu_abc");
    cr_assert_str_eq(sget(json_object_get(tu, "input"), "city"), "Paris");
    json_t *u = json_object_get(m, "usage");
    cr_assert_eq(iget(u, "input_tokens"), 20);
    cr_assert_eq(iget(u, "cache_read_input_tokens"), 10);
    cr_assert_eq(iget(u, "output_tokens"), 12);
    json_decref(m);
    /* a stop string: stop_sequence names it */
    f->stopped(f->ctx, 1);
    res = (struct api_chat_result){.content = "x", .finish = API_FINISH_STOP, .usage = {5, 3, 0, 0}};
    m = parse_str(f->body(f->ctx, &ci, &res));
    cr_assert_str_eq(sget(m, "stop_reason"), "stop_sequence");
    cr_assert_str_eq(sget(m, "stop_sequence"), "END");
    json_decref(m);
    api_messages_format_free(f->ctx);
    /* max_tokens reached, or the context ended first */
    f = api_messages_format_new(r, &o);
    res = (struct api_chat_result){.content = "x", .finish = API_FINISH_LENGTH, .usage = {5, 64, 0, 0}};
    m = parse_str(f->body(f->ctx, &ci, &res));
    cr_assert_str_eq(sget(m, "stop_reason"), "max_tokens");
    json_decref(m);
    res.usage.completion_tokens = 40;
    m = parse_str(f->body(f->ctx, &ci, &res));
    cr_assert_str_eq(sget(m, "stop_reason"), "model_context_window_exceeded");
    json_decref(m);
    res = (struct api_chat_result){.finish = API_FINISH_STOP, .usage = {5, 1, 0, 0}};
    m = parse_str(f->body(f->ctx, &ci, &res));
    cr_assert_str_eq(sget(m, "stop_reason"), "end_turn");
    cr_assert_eq(json_array_size(json_object_get(m, "content")), 0);
    json_decref(m);
    /* A call max_tokens cut keeps what of its input was whole (as a client's
     * partial-JSON parser reads the same text), never as text. */
    static const char *const cut[][2] = {
        {"{\"a\":1,\"b\":\"tex", "{\"a\":1}"},
        {"{\"city\":\"Par", "{}"},
        {"{\"city\":\"Paris\"", "{\"city\":\"Paris\"}"},
        {"{\"a\":[1,2", "{\"a\":[1]}"},
        {"{\"a\":{\"b\":\"x\\\"y\"},\"c\":tr", "{\"a\":{\"b\":\"x\\\"y\"}}"},
        {"{\"k", "{}"},
        {"", "{}"},
    };
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
        struct api_tool_call cc = {"call_c", "f", cut[i][0], true};
        res = (struct api_chat_result){.tool_calls = &cc, .n_tool_calls = 1,
                                       .finish = API_FINISH_LENGTH, .usage = {5, 64, 0, 0}};
        m = parse_str(f->body(f->ctx, &ci, &res));
        cr_assert_str_eq(sget(m, "stop_reason"), "max_tokens");
        json_t *in = json_object_get(json_array_get(json_object_get(m, "content"), 0), "input");
        json_t *want = load(cut[i][1]);
        cr_assert(json_equal(in, want), "cut %s", cut[i][0]);
        json_decref(want);
        json_decref(m);
        /* streamed: the same input in the one input_json_delta */
        struct api_tool_call_delta td = {0, "call_c", "f", cut[i][0], true};
        struct api_chat_delta dd = {.tool_calls = &td, .n_tool_calls = 1};
        json_t *ev = json_array();
        events(f->delta(f->ctx, &ci, &dd), ev);
        json_t *got = load(sget(json_object_get(json_array_get(ev, 1), "delta"), "partial_json"));
        want = load(cut[i][1]);
        cr_assert(json_equal(got, want), "streamed cut %s", cut[i][0]);
        json_decref(want);
        json_decref(got);
        json_decref(ev);
    }
    api_messages_format_free(f->ctx);
    api_chat_req_free(r);
    /* disable_parallel_tool_use with auto: one tool_use block */
    r = request(M(",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"auto\","
                  "\"disable_parallel_tool_use\":true}"),
                &o);
    f = api_messages_format_new(r, &o);
    res = (struct api_chat_result){.tool_calls = calls, .n_tool_calls = 2,
                                   .finish = API_FINISH_TOOL_CALLS, .usage = {5, 9, 0, 0}};
    m = parse_str(f->body(f->ctx, &ci, &res));
    cr_assert_eq(json_array_size(json_object_get(m, "content")), 1);
    json_decref(m);
    api_messages_format_free(f->ctx);
    api_chat_req_free(r);
}

MCD_TEST(messages, stream_events)
{
    struct api_messages_opts o;
    struct api_chat_req *r = request(M(""), &o);
    struct api_chat_format *f = api_messages_format_new(r, &o);
    struct api_chat_ident ci = ident();
    json_t *ev = json_array();
    events(f->start(f->ctx, &ci), ev);
    struct api_chat_delta d1 = {.reasoning = "Hm"}, d2 = {.reasoning = "m."}, d3 = {.content = "Hi"};
    struct api_tool_call_delta tc = {0, "call_x", "get_weather", "{\"city\": \"Oslo\"}", false};
    struct api_chat_delta d4 = {.tool_calls = &tc, .n_tool_calls = 1}, d5 = {.content = ""};
    events(f->delta(f->ctx, &ci, &d1), ev);
    events(f->delta(f->ctx, &ci, &d2), ev);
    events(f->delta(f->ctx, &ci, &d3), ev);
    events(f->delta(f->ctx, &ci, &d4), ev);
    cr_assert_null(f->delta(f->ctx, &ci, &d5), "an empty delta sends nothing");
    struct api_usage u = {30, 7, 2, 4};
    events(f->end(f->ctx, &ci, API_FINISH_TOOL_CALLS, &u, NULL), ev);
    static const char *const want[] = {
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"};
    cr_assert_eq(json_array_size(ev), sizeof want / sizeof *want);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert_str_eq(sget(json_array_get(ev, i), "type"), want[i], "event %zu", i);
    json_t *msg = json_object_get(json_array_get(ev, 0), "message");
    cr_assert_eq(iget(json_object_get(msg, "usage"), "input_tokens"), 30);
    cr_assert(json_is_null(json_object_get(msg, "stop_reason")));
    cr_assert_str_eq(sget(json_object_get(json_array_get(ev, 1), "content_block"), "type"),
                     "thinking");
    cr_assert_str_eq(sget(json_object_get(json_array_get(ev, 3), "delta"), "thinking"), "m.");
    cr_assert_eq(iget(json_array_get(ev, 6), "index"), 1);
    cr_assert_str_eq(sget(json_object_get(json_array_get(ev, 6), "delta"), "text"), "Hi");
    json_t *tb = json_object_get(json_array_get(ev, 8), "content_block");
    cr_assert_str_eq(sget(tb, "id"), "toolu_x");
    cr_assert_eq(json_object_size(json_object_get(tb, "input")), 0);
    json_t *ij = json_object_get(json_array_get(ev, 9), "delta");
    cr_assert_str_eq(sget(ij, "type"), "input_json_delta");
    cr_assert_str_eq(sget(ij, "partial_json"), "{\"city\":\"Oslo\"}");
    json_t *md = json_array_get(ev, 11);
    cr_assert_str_eq(sget(json_object_get(md, "delta"), "stop_reason"), "tool_use");
    cr_assert_eq(iget(json_object_get(md, "usage"), "input_tokens"), 26);
    cr_assert_eq(iget(json_object_get(md, "usage"), "cache_read_input_tokens"), 4);
    cr_assert_eq(iget(json_object_get(md, "usage"), "output_tokens"), 7);
    json_decref(ev);
    api_messages_format_free(f->ctx);
    api_chat_req_free(r);
}

MCD_TEST(messages, errors)
{
    struct api_err e;
    api_refuse(&e, API_ERR_BUSY, NULL, "the server is busy");
    json_t *b = parse_str(api_messages_err_body(&e));
    cr_assert_str_eq(sget(b, "type"), "error");
    json_t *err = json_object_get(b, "error");
    cr_assert_str_eq(sget(err, "type"), "overloaded_error");
    cr_assert_str_eq(sget(err, "message"), "the server is busy");
    cr_assert_eq(json_object_size(err), 2);
    json_decref(b);
    static const struct {
        enum api_error e;
        const char *type;
    } table[] = {{API_ERR_BAD_REQUEST, "invalid_request_error"},
                 {API_ERR_INVALID_JSON, "invalid_request_error"},
                 {API_ERR_CONTEXT_LENGTH, "invalid_request_error"},
                 {API_ERR_UNAUTHORIZED, "authentication_error"},
                 {API_ERR_FORBIDDEN, "permission_error"},
                 {API_ERR_NOT_FOUND, "not_found_error"},
                 {API_ERR_MODEL_NOT_FOUND, "not_found_error"},
                 {API_ERR_METHOD_NOT_ALLOWED, "invalid_request_error"},
                 {API_ERR_BODY_TOO_LARGE, "request_too_large"},
                 {API_ERR_INTERNAL, "api_error"},
                 {API_ERR_LOADING, "overloaded_error"},
                 {API_ERR_SHUTTING_DOWN, "api_error"},
                 {API_ERR_DEVICE_FAULT, "api_error"}};
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        cr_assert_str_eq(api_messages_error_type(table[i].e), table[i].type, "error %d",
                         table[i].e);
    /* A device fault keeps its fields; as a stream's last event too. */
    struct api_device_error d = {.ert_state = 8, .ert_name = "ERT_CMD_STATE_TIMEOUT",
                                 .phase = "decode", .chunk_index = 1, .chunk_count = 2,
                                 .layer_first = 0, .layer_last = 20, .token_pos = 57,
                                 .elapsed_ms = 2003, .device = "xrt", .attempts = 1};
    api_err_device(&e, &d);
    json_t *ev = json_array();
    events(api_messages_err_event(&e), ev);
    cr_assert_eq(json_array_size(ev), 1);
    err = json_object_get(json_array_get(ev, 0), "error");
    cr_assert_str_eq(sget(err, "type"), "api_error");
    cr_assert_not_null(strstr(sget(err, "message"), "ERT_CMD_STATE_TIMEOUT"));
    cr_assert_eq(iget(err, "ert_state"), 8);
    cr_assert_str_eq(sget(err, "phase"), "decode");
    cr_assert_eq(iget(err, "token_pos"), 57);
    cr_assert_null(json_object_get(err, "code"));
    json_decref(ev);
    /* through the framing: a body, or the stream's event */
    struct api_messages_opts o;
    struct api_chat_req *r = request(M(""), &o);
    struct api_chat_format *f = api_messages_format_new(r, &o);
    api_refuse(&e, API_ERR_BAD_REQUEST, "messages", "a \"quoted\" reason");
    b = parse_str(f->error(f->ctx, &e, false));
    cr_assert_str_eq(sget(json_object_get(b, "error"), "message"), "a \"quoted\" reason");
    json_decref(b);
    ev = json_array();
    events(f->error(f->ctx, &e, true), ev);
    cr_assert_str_eq(sget(json_object_get(json_array_get(ev, 0), "error"), "type"),
                     "invalid_request_error");
    json_decref(ev);
    api_messages_format_free(f->ctx);
    api_chat_req_free(r);
    b = parse_str(api_messages_count_body(42));
    cr_assert_eq(iget(b, "input_tokens"), 42);
    cr_assert_eq(json_object_size(b), 1);
    json_decref(b);
}

/* A refusal of the translated request names the Anthropic field it came from. */
MCD_TEST(messages, chat_refusals_renamed)
{
    static const char *const bodies[][2] = {
        {M(",\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":"
           "\"object\",\"properties\":{\"x\":{\"$ref\":\"#/defs/y\"}}}}}"),
         "'output_config.format.schema'"},
        {M(",\"tools\":[{\"name\":\"a\",\"input_schema\":{\"type\":\"object\",\"properties\":{"
           "\"x\":{\"$ref\":\"#/defs/y\"}}}}],\"tool_choice\":{\"type\":\"any\"}"),
         "'tools.0.input_schema"},
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        struct api_messages_opts o;
        json_t *c = translate(bodies[i][0], false, &o, NULL);
        struct api_chat_req *r = NULL;
        struct api_err bad = {0};
        cr_assert_eq(api_chat_req_parse(c, &LIM, &r, &bad), -EINVAL, "%s", bodies[i][0]);
        json_decref(c);
        api_messages_rename(&bad);
        cr_assert_not_null(strstr(bad.message, bodies[i][1]), "message '%s' (param %s)",
                           bad.message, bad.param);
        cr_assert_null(strstr(bad.message, "response_format"), "%s", bad.message);
        cr_assert_null(strstr(bad.message, "function.parameters'"), "%s", bad.message);
    }
    struct api_err e = {.error = API_ERR_BAD_REQUEST};
    api_refuse(&e, API_ERR_BAD_REQUEST, "stop[1]", "Invalid 'stop[1]': too long.");
    api_messages_rename(&e);
    cr_assert_str_eq(e.param, "stop_sequences[1]");
    cr_assert_str_eq(e.message, "Invalid 'stop_sequences[1]': too long.");
}
