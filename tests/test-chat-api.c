/* api/chat-req and api/chat-resp: every validation rule of POST
 * /v1/chat/completions, good and bad, with the exact `param` a refusal names; and
 * the chat.completion / chat.completion.chunk / SSE / error shapes, parsed back
 * with jansson so the tests check JSON, not byte strings. */
#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "engine/ert.h"
#include "tests/utf8.h"

#include "tests/check.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static const struct eng_sampling PACK = {
    .temperature = 0.7f,
    .top_p = 0.95f,
    .top_k = 20,
    .min_p = 0.05f,
    .repetition_penalty = 1.05f,
    .penalty_last_n = 64,
    .seed = 1,
};
static const struct api_chat_limits LIM = {.n_vocab = 1000, .defaults = &PACK};

/* A request with one user message, plus `extra` (",\"key\":value…"). */
#define BODY(extra) "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" extra "}"
/* A request with the given messages array. */
#define MSGS(arr) "{\"model\":\"m\",\"messages\":" arr "}"

static const char TOOLS[] =
    ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
    "\"Weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"b\"}}]";

static json_t *load(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, JSON_ALLOW_NUL, &e);
    cr_assert_not_null(j, "test JSON does not parse (%s): %s", e.text, s);
    return j;
}

static struct api_chat_req *ok(const char *body)
{
    json_t *j = load(body);
    struct api_chat_req *r = NULL;
    struct api_bad_request bad = {0};
    int rc = api_chat_req_parse(j, &LIM, &r, &bad);
    json_decref(j); /* the request holds its own reference */
    cr_assert_eq(rc, 0, "refused (%s: %s): %s", bad.param, bad.message, body);
    cr_assert_not_null(r);
    return r;
}

static void bad_as(const char *body, const char *param, const char *needle)
{
    json_t *j = load(body);
    struct api_chat_req *r = (struct api_chat_req *)1;
    struct api_bad_request bad = {0};
    int rc = api_chat_req_parse(j, &LIM, &r, &bad);
    json_decref(j);
    cr_assert_eq(rc, -EINVAL, "accepted: %s", body);
    cr_assert_null(r);
    cr_assert_eq(bad.error, API_ERR_BAD_REQUEST, "error %d for %s", bad.error, body);
    cr_assert_str_eq(bad.param, param, "param '%s' (%s) for %s", bad.param, bad.message, body);
    cr_assert(bad.message[0] != '\0');
    cr_assert(mcd_utf8_valid(bad.message) && mcd_utf8_valid(bad.param));
    cr_assert_null(strchr(bad.message, '\n'));
    if (needle)
        cr_assert_not_null(strstr(bad.message, needle), "message '%s' lacks '%s'", bad.message,
                           needle);
}

static void bad(const char *body, const char *param) { bad_as(body, param, NULL); }

static json_t *parse_str(char *s)
{
    cr_assert_not_null(s);
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    cr_assert_not_null(j, "not JSON (%s): %s", e.text, s);
    free(s);
    return j;
}

/* An SSE event "data: {json}\n\n", parsed. */
static json_t *parse_event(char *ev)
{
    cr_assert_not_null(ev);
    size_t n = strlen(ev);
    cr_assert(n > 8 && strncmp(ev, "data: ", 6) == 0, "not an event: %s", ev);
    cr_assert(ev[n - 1] == '\n' && ev[n - 2] == '\n' && ev[n - 3] != '\n');
    cr_assert_null(memchr(ev + 6, '\n', n - 8), "one line of data");
    ev[n - 2] = '\0';
    json_t *j = load(ev + 6);
    free(ev);
    return j;
}

static const char *sget(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }
static json_int_t iget(const json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static double rget(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* ---- the request: shape and defaults ----------------------------------------- */

MCD_TEST(chat_req, minimal_takes_the_pack_defaults)
{
    struct api_chat_req *r = ok(BODY(""));
    cr_assert_str_eq(r->model, "m");
    cr_assert(!r->stream && !r->include_usage && !r->logprobs);
    cr_assert_eq(r->max_tokens, 0);
    cr_assert_float_eq(r->sampling.temperature, 0.7f, 1e-6);
    cr_assert_float_eq(r->sampling.top_p, 0.95f, 1e-6);
    cr_assert_eq(r->sampling.top_k, 20);
    cr_assert_float_eq(r->sampling.min_p, 0.05f, 1e-6);
    cr_assert_float_eq(r->sampling.repetition_penalty, 1.05f, 1e-6);
    cr_assert_eq(r->sampling.penalty_last_n, 64);
    cr_assert_eq(r->sampling.n_bias, 0);
    cr_assert_null(r->sampling.bias);
    cr_assert(!r->has_seed);
    cr_assert_eq(r->n_stop, 0);
    cr_assert_eq(r->top_logprobs, 0);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    cr_assert_null(r->parser_tools);
    cr_assert_null(r->user);
    cr_assert_eq(r->chat.thinking, ENG_THINKING_UNSET);
    cr_assert(json_is_array(r->chat.messages));
    cr_assert_null(r->chat.tools);
    cr_assert_str_eq(r->chat.bos_token, "<s>");
    cr_assert(r->chat.add_generation_prompt);
    api_chat_req_free(r);
}

MCD_TEST(chat_req, neutral_knobs_without_pack_defaults)
{
    json_t *j = load(BODY(""));
    struct api_chat_req *r;
    struct api_bad_request b;
    struct api_chat_limits lim = {.n_vocab = 10};
    cr_assert_eq(api_chat_req_parse(j, &lim, &r, &b), 0);
    cr_assert_float_eq(r->sampling.temperature, 1.0f, 1e-6);
    cr_assert_float_eq(r->sampling.top_p, 1.0f, 1e-6);
    cr_assert_eq(r->sampling.top_k, 0);
    cr_assert_float_eq(r->sampling.repetition_penalty, 1.0f, 1e-6);
    api_chat_req_free(r);
    cr_assert_eq(api_chat_req_parse(j, NULL, &r, &b), 0);
    api_chat_req_free(r);
    json_decref(j);
}

MCD_TEST(chat_req, the_request_outlives_the_callers_reference)
{
    json_t *j = load(BODY(",\"stop\":\"END\",\"user\":\"u1\""));
    struct api_chat_req *r;
    struct api_bad_request b;
    cr_assert_eq(api_chat_req_parse(j, &LIM, &r, &b), 0);
    json_decref(j);
    cr_assert_str_eq(r->model, "m");
    cr_assert_eq(r->stop[0].len, 3);
    cr_assert(memcmp(r->stop[0].text, "END", 3) == 0);
    cr_assert_str_eq(r->user, "u1");
    api_chat_req_free(r);
    api_chat_req_free(NULL);
}

MCD_TEST(chat_req, body_must_be_an_object)
{
    json_t *j = load("[1,2]");
    struct api_chat_req *r;
    struct api_bad_request b;
    cr_assert_eq(api_chat_req_parse(j, &LIM, &r, &b), -EINVAL);
    cr_assert_eq(b.error, API_ERR_BAD_REQUEST);
    cr_assert_str_eq(b.param, "");
    json_decref(j);
}

MCD_TEST(chat_req, unknown_fields_are_ignored)
{
    struct api_chat_req *r = ok(BODY(",\"foo\":{\"bar\":[1,2]},\"response_format\":{\"type\":"
                                     "\"text\"},\"metadata\":{\"k\":\"v\"},\"store\":false,"
                                     "\"parallel_tool_calls\":true,\"reasoning_effort\":\"low\","
                                     "\"mirostat\":2"));
    api_chat_req_free(r);
    r = ok(MSGS("[{\"role\":\"user\",\"content\":\"hi\",\"extra\":1,\"tool_call_id\":5}]"));
    api_chat_req_free(r);
}

MCD_TEST(chat_req, null_is_absent_for_every_optional_field)
{
    struct api_chat_req *r = ok(BODY(
        ",\"stream\":null,\"stream_options\":null,\"max_completion_tokens\":null,"
        "\"max_tokens\":null,\"temperature\":null,\"top_p\":null,\"top_k\":null,\"min_p\":null,"
        "\"seed\":null,\"stop\":null,\"presence_penalty\":null,\"frequency_penalty\":null,"
        "\"repetition_penalty\":null,\"logit_bias\":null,\"n\":null,\"logprobs\":null,"
        "\"top_logprobs\":null,\"tools\":null,\"tool_choice\":null,"
        "\"chat_template_kwargs\":null,\"user\":null"));
    cr_assert(!r->stream && !r->has_seed && !r->logprobs);
    cr_assert_eq(r->max_tokens, 0);
    cr_assert_float_eq(r->sampling.temperature, 0.7f, 1e-6);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    api_chat_req_free(r);
    r = ok(BODY(",\"chat_template_kwargs\":{\"enable_thinking\":null}"));
    cr_assert_eq(r->chat.thinking, ENG_THINKING_UNSET);
    api_chat_req_free(r);
    r = ok(MSGS("[{\"role\":\"user\",\"content\":\"hi\",\"name\":null},{\"role\":\"assistant\","
                "\"content\":\"x\",\"tool_calls\":null,\"reasoning_content\":null}]"));
    api_chat_req_free(r);
}

/* ---- model -------------------------------------------------------------------- */

MCD_TEST(chat_req, model_is_required_and_a_string)
{
    bad_as("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "model",
           "Missing required parameter: 'model'");
    bad("{\"model\":null,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "model");
    bad_as("{\"model\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "model",
           "expected a string, but got an integer");
}

MCD_TEST(chat_req, model_lookup)
{
    const char *aliases[] = {"minicpm5", "gpt-4o-mini"};
    struct api_bad_request b = {0};
    cr_assert_eq(api_chat_req_check_model("minicpm5:2b", "minicpm5:2b", aliases, 2, &b), 0);
    cr_assert_eq(api_chat_req_check_model("gpt-4o-mini", "minicpm5:2b", aliases, 2, &b), 0);
    cr_assert_eq(api_chat_req_check_model("minicpm5", "minicpm5:2b", NULL, 0, &b), -ENOENT);
    cr_assert_eq(b.error, API_ERR_MODEL_NOT_FOUND);
    cr_assert_eq(api_error_status(b.error), 404);
    cr_assert_str_eq(b.param, "model");
    cr_assert_not_null(strstr(b.message, "'minicpm5'"));
    cr_assert_eq(api_chat_req_check_model("Minicpm5:2b", "minicpm5:2b", aliases, 2, &b), -ENOENT);
    cr_assert_eq(api_chat_req_check_model("", "minicpm5:2b", aliases, 2, &b), -ENOENT);
    /* A long multi-byte name is quoted cut at a character, never into invalid UTF-8. */
    char name[400] = "";
    for (int i = 0; i < 100; i++)
        strcat(name, "é");
    cr_assert_eq(api_chat_req_check_model(name, "x", NULL, 0, &b), -ENOENT);
    cr_assert(mcd_utf8_valid(b.message));
    json_t *e = parse_str(api_error_body(b.error, b.message, b.param));
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "code"), "model_not_found");
    cr_assert_str_eq(sget(err, "param"), "model");
    cr_assert_str_eq(sget(err, "message"), b.message);
    json_decref(e);
}

/* ---- messages ------------------------------------------------------------------- */

MCD_TEST(chat_req, messages_required_array_non_empty)
{
    bad_as("{\"model\":\"m\"}", "messages", "Missing required parameter: 'messages'");
    bad(MSGS("null"), "messages");
    bad_as(MSGS("\"hi\""), "messages", "expected an array, but got a string");
    bad_as(MSGS("[]"), "messages", "empty array");
    bad_as(MSGS("[123]"), "messages[0]", "expected an object");
    bad(MSGS("[{\"role\":\"user\",\"content\":\"a\"},{}]"), "messages[1].role");
}

MCD_TEST(chat_req, roles)
{
    const char *good[] = {
        MSGS("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"u\"}]"),
        MSGS("[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"user\",\"content\":\"u\"}]"),
        MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":\"a\"},"
             "{\"role\":\"user\",\"content\":\"u2\"}]"),
        MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
             "\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
             "\"call_1\",\"content\":\"42\"}]"),
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        api_chat_req_free(ok(good[i]));
    bad_as(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"function\",\"content\":\"x\"}]"),
           "messages[1].role", "'function' is not one of");
    bad_as(MSGS("[{\"role\":5,\"content\":\"x\"}]"), "messages[0].role", "expected a string");
    bad(MSGS("[{\"role\":\"User\",\"content\":\"x\"}]"), "messages[0].role");
    bad(MSGS("[{\"role\":\"user\",\"content\":\"x\",\"name\":7}]"), "messages[0].name");
}

MCD_TEST(chat_req, content)
{
    api_chat_req_free(ok(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                              "{\"type\":\"text\",\"text\":\"b\"}]}]")));
    api_chat_req_free(ok(MSGS("[{\"role\":\"user\",\"content\":\"\"}]")));
    api_chat_req_free(ok(MSGS("[{\"role\":\"user\",\"content\":[]}]")));
    bad_as(MSGS("[{\"role\":\"user\"}]"), "messages[0].content", "Missing required");
    bad(MSGS("[{\"role\":\"system\",\"content\":null},{\"role\":\"user\",\"content\":\"u\"}]"),
        "messages[0].content");
    bad_as(MSGS("[{\"role\":\"user\",\"content\":5}]"), "messages[0].content",
           "expected a string or an array of text parts");
    bad(MSGS("[{\"role\":\"user\",\"content\":{\"type\":\"text\",\"text\":\"a\"}}]"),
        "messages[0].content");
    bad_as(MSGS("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"u\"},"
                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"look\"},"
                "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y.png\"}}]}]"),
           "messages[2].content[1].type", "'image_url'");
    bad(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]"),
        "messages[0].content[0].type");
    bad(MSGS("[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]"),
        "messages[0].content[0].type");
    bad(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":1}]}]"), "messages[0].content[0].type");
    bad(MSGS("[{\"role\":\"user\",\"content\":[\"a\"]}]"), "messages[0].content[0]");
    bad(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]"),
        "messages[0].content[0].text");
    bad(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]"),
        "messages[0].content[0].text");
    /* An assistant turn may give its text as parts too; refusal parts are not text. */
    api_chat_req_free(ok(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
                              "\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]")));
    bad(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":"
             "[{\"type\":\"refusal\",\"refusal\":\"no\"}]}]"),
        "messages[1].content[0].type");
}

MCD_TEST(chat_req, assistant_and_tool_messages)
{
    bad_as(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\"}]"),
           "messages[1].content", "needs 'content' or 'tool_calls'");
    bad(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[]}]"),
        "messages[1].content");
    bad(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":\"a\","
             "\"reasoning_content\":1}]"),
        "messages[1].reasoning_content");
    api_chat_req_free(ok(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
                              "\"content\":\"a\",\"reasoning_content\":\"thought\"}]")));
    bad(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"tool\",\"tool_call_id\":\"c\"}]"),
        "messages[1].content");
    bad(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"tool\",\"content\":\"r\","
             "\"tool_call_id\":5}]"),
        "messages[1].tool_call_id");
    bad_as(MSGS("[{\"role\":\"user\",\"content\":\"u\",\"tool_calls\":[]}]"),
           "messages[0].tool_calls", "only assistant messages");
}

#define ASSISTANT_CALL(call)                                                                \
    MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":null,"   \
         "\"tool_calls\":[{\"id\":\"c0\",\"type\":\"function\",\"function\":{\"name\":\"f\","   \
         "\"arguments\":\"{}\"}}," call "]}]")

MCD_TEST(chat_req, assistant_tool_calls)
{
    api_chat_req_free(ok(ASSISTANT_CALL("{\"function\":{\"name\":\"g\",\"arguments\":\"\"}}")));
    api_chat_req_free(ok(ASSISTANT_CALL("{\"function\":{\"name\":\"g\"}}")));
    api_chat_req_free(ok(ASSISTANT_CALL("{\"function\":{\"name\":\"g\",\"arguments\":"
                                        "{\"x\":1}}}")));
    api_chat_req_free(ok(ASSISTANT_CALL("{\"function\":{\"name\":\"g\",\"arguments\":"
                                        "\"  {\\\"x\\\": [1, 2]} \"}}")));
    bad(MSGS("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"tool_calls\":"
             "{}}]"),
        "messages[1].tool_calls");
    bad(ASSISTANT_CALL("5"), "messages[1].tool_calls[1]");
    bad(ASSISTANT_CALL("{\"id\":1,\"function\":{\"name\":\"g\"}}"), "messages[1].tool_calls[1].id");
    bad(ASSISTANT_CALL("{\"type\":\"code\",\"function\":{\"name\":\"g\"}}"),
        "messages[1].tool_calls[1].type");
    bad(ASSISTANT_CALL("{\"name\":\"g\",\"arguments\":\"{}\"}"),
        "messages[1].tool_calls[1].function");
    bad(ASSISTANT_CALL("{\"function\":\"g\"}"), "messages[1].tool_calls[1].function");
    bad(ASSISTANT_CALL("{\"function\":{\"arguments\":\"{}\"}}"),
        "messages[1].tool_calls[1].function.name");
    bad(ASSISTANT_CALL("{\"function\":{\"name\":false}}"),
        "messages[1].tool_calls[1].function.name");
    bad_as(ASSISTANT_CALL("{\"function\":{\"name\":\"g\",\"arguments\":\"{not json\"}}"),
           "messages[1].tool_calls[1].function.arguments", "not valid JSON");
    bad_as(ASSISTANT_CALL("{\"function\":{\"name\":\"g\",\"arguments\":\"[1]\"}}"),
           "messages[1].tool_calls[1].function.arguments", "JSON object");
    bad(ASSISTANT_CALL("{\"function\":{\"name\":\"g\",\"arguments\":7}}"),
        "messages[1].tool_calls[1].function.arguments");
}

/* ---- stream ------------------------------------------------------------------------ */

MCD_TEST(chat_req, stream_and_stream_options)
{
    struct api_chat_req *r = ok(BODY(",\"stream\":true"));
    cr_assert(r->stream && !r->include_usage);
    api_chat_req_free(r);
    r = ok(BODY(",\"stream\":true,\"stream_options\":{\"include_usage\":true,"
                "\"include_obfuscation\":false}"));
    cr_assert(r->stream && r->include_usage);
    api_chat_req_free(r);
    r = ok(BODY(",\"stream\":true,\"stream_options\":{}"));
    cr_assert(!r->include_usage);
    api_chat_req_free(r);
    r = ok(BODY(",\"stream\":false"));
    cr_assert(!r->stream);
    api_chat_req_free(r);
    bad_as(BODY(",\"stream\":\"yes\""), "stream", "expected a boolean");
    bad(BODY(",\"stream\":1"), "stream");
    bad_as(BODY(",\"stream_options\":{\"include_usage\":true}"), "stream_options",
           "only allowed when 'stream' is enabled");
    bad(BODY(",\"stream\":false,\"stream_options\":{}"), "stream_options");
    bad(BODY(",\"stream\":true,\"stream_options\":true"), "stream_options");
    bad(BODY(",\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}"),
        "stream_options.include_usage");
}

/* ---- lengths and n -------------------------------------------------------------------- */

MCD_TEST(chat_req, max_tokens)
{
    struct api_chat_req *r = ok(BODY(",\"max_tokens\":7"));
    cr_assert_eq(r->max_tokens, 7);
    api_chat_req_free(r);
    r = ok(BODY(",\"max_completion_tokens\":9"));
    cr_assert_eq(r->max_tokens, 9);
    api_chat_req_free(r);
    r = ok(BODY(",\"max_tokens\":7,\"max_completion_tokens\":9"));
    cr_assert_eq(r->max_tokens, 9, "max_completion_tokens wins");
    api_chat_req_free(r);
    r = ok(BODY(",\"max_completion_tokens\":9,\"max_tokens\":70"));
    cr_assert_eq(r->max_tokens, 9);
    api_chat_req_free(r);
    r = ok(BODY(",\"max_tokens\":100.0"));
    cr_assert_eq(r->max_tokens, 100);
    api_chat_req_free(r);
    r = ok(BODY(",\"max_tokens\":1"));
    cr_assert_eq(r->max_tokens, 1);
    api_chat_req_free(r);
    r = ok(BODY(",\"max_completion_tokens\":9000000000000"));
    cr_assert_eq(r->max_tokens, INT32_MAX);
    api_chat_req_free(r);
    bad_as(BODY(",\"max_tokens\":0"), "max_tokens", "Expected a value >= 1, but got 0");
    bad(BODY(",\"max_tokens\":-5"), "max_tokens");
    bad_as(BODY(",\"max_completion_tokens\":0"), "max_completion_tokens", ">= 1");
    bad_as(BODY(",\"max_completion_tokens\":1.5"), "max_completion_tokens", "expected an integer");
    bad(BODY(",\"max_completion_tokens\":\"10\""), "max_completion_tokens");
    bad(BODY(",\"max_tokens\":true"), "max_tokens");
    /* Both are checked even when the other wins. */
    bad(BODY(",\"max_completion_tokens\":5,\"max_tokens\":0"), "max_tokens");
}

MCD_TEST(chat_req, n_must_be_one)
{
    api_chat_req_free(ok(BODY(",\"n\":1")));
    api_chat_req_free(ok(BODY(",\"n\":1.0")));
    bad_as(BODY(",\"n\":2"), "n", "'n' must be 1 (got 2)");
    bad(BODY(",\"n\":0"), "n");
    bad(BODY(",\"n\":128"), "n");
    bad_as(BODY(",\"n\":\"1\""), "n", "expected an integer");
    bad(BODY(",\"n\":1.5"), "n");
}

MCD_TEST(chat_req, budget_clamps_to_the_context)
{
    struct api_chat_req *r = ok(BODY(",\"max_tokens\":100"));
    cr_assert_eq(api_chat_req_budget(r, 10, 4096), 100);
    cr_assert_eq(api_chat_req_budget(r, 4000, 4096), 96, "clamped");
    cr_assert_eq(api_chat_req_budget(r, 4095, 4096), 1);
    cr_assert_eq(api_chat_req_budget(r, 4096, 4096), -ERANGE);
    cr_assert_eq(api_chat_req_budget(r, 5000, 4096), -ERANGE);
    api_chat_req_free(r);
    r = ok(BODY(""));
    cr_assert_eq(api_chat_req_budget(r, 10, 4096), 4086, "no limit: the rest of the context");
    cr_assert_eq(api_chat_req_budget(r, 0, 4096), 4096);
    api_chat_req_free(r);
}

/* ---- sampling knobs ----------------------------------------------------------------------- */

MCD_TEST(chat_req, temperature)
{
    struct api_chat_req *r = ok(BODY(",\"temperature\":0"));
    cr_assert_float_eq(r->sampling.temperature, 0.0f, 1e-9);
    api_chat_req_free(r);
    r = ok(BODY(",\"temperature\":2"));
    cr_assert_float_eq(r->sampling.temperature, 2.0f, 1e-6);
    api_chat_req_free(r);
    r = ok(BODY(",\"temperature\":0.25"));
    cr_assert_float_eq(r->sampling.temperature, 0.25f, 1e-6);
    api_chat_req_free(r);
    bad_as(BODY(",\"temperature\":2.01"), "temperature", "expected a number in [0, 2], but got 2.01");
    bad(BODY(",\"temperature\":-0.1"), "temperature");
    bad_as(BODY(",\"temperature\":\"1\""), "temperature",
           "Invalid type for 'temperature': expected a number, but got a string instead.");
    bad(BODY(",\"temperature\":[1]"), "temperature");
}

MCD_TEST(chat_req, top_p_top_k_min_p)
{
    struct api_chat_req *r = ok(BODY(",\"top_p\":1,\"top_k\":40,\"min_p\":0"));
    cr_assert_float_eq(r->sampling.top_p, 1.0f, 1e-6);
    cr_assert_eq(r->sampling.top_k, 40);
    cr_assert_float_eq(r->sampling.min_p, 0.0f, 1e-9);
    api_chat_req_free(r);
    r = ok(BODY(",\"top_p\":0.001,\"top_k\":0,\"min_p\":0.999"));
    cr_assert_eq(r->sampling.top_k, 0);
    api_chat_req_free(r);
    r = ok(BODY(",\"top_k\":99999999999"));
    cr_assert_eq(r->sampling.top_k, INT32_MAX);
    api_chat_req_free(r);
    /* Inside the range in double, still inside it as the sampler's float. */
    r = ok(BODY(",\"top_p\":1e-50,\"min_p\":0.99999999999,\"repetition_penalty\":1e300"));
    cr_assert(r->sampling.top_p > 0.0f);
    cr_assert(r->sampling.min_p < 1.0f);
    cr_assert(isfinite(r->sampling.repetition_penalty) && r->sampling.repetition_penalty > 1e30f);
    api_chat_req_free(r);
    r = ok(BODY(",\"repetition_penalty\":1e-300"));
    cr_assert(r->sampling.repetition_penalty > 0.0f);
    api_chat_req_free(r);
    bad_as(BODY(",\"top_p\":0"), "top_p", "(0, 1]");
    bad(BODY(",\"top_p\":1.01"), "top_p");
    bad(BODY(",\"top_p\":-1"), "top_p");
    bad(BODY(",\"top_p\":false"), "top_p");
    bad(BODY(",\"top_k\":-1"), "top_k");
    bad_as(BODY(",\"top_k\":1.5"), "top_k", "expected an integer");
    bad(BODY(",\"top_k\":\"5\""), "top_k");
    bad_as(BODY(",\"min_p\":1"), "min_p", "[0, 1)");
    bad(BODY(",\"min_p\":-0.01"), "min_p");
}

MCD_TEST(chat_req, penalties)
{
    struct api_chat_req *r =
        ok(BODY(",\"presence_penalty\":2,\"frequency_penalty\":-2,\"repetition_penalty\":1.3"));
    cr_assert_float_eq(r->sampling.presence_penalty, 2.0f, 1e-6);
    cr_assert_float_eq(r->sampling.frequency_penalty, -2.0f, 1e-6);
    cr_assert_float_eq(r->sampling.repetition_penalty, 1.3f, 1e-6);
    api_chat_req_free(r);
    r = ok(BODY(",\"repetition_penalty\":0.5"));
    api_chat_req_free(r);
    bad(BODY(",\"presence_penalty\":2.5"), "presence_penalty");
    bad(BODY(",\"presence_penalty\":-2.01"), "presence_penalty");
    bad(BODY(",\"presence_penalty\":\"0\""), "presence_penalty");
    bad(BODY(",\"frequency_penalty\":3"), "frequency_penalty");
    bad(BODY(",\"frequency_penalty\":-3"), "frequency_penalty");
    bad_as(BODY(",\"repetition_penalty\":0"), "repetition_penalty", "above 0");
    bad(BODY(",\"repetition_penalty\":-1"), "repetition_penalty");
    bad(BODY(",\"repetition_penalty\":null,\"presence_penalty\":[]"), "presence_penalty");
}

MCD_TEST(chat_req, seed)
{
    struct api_chat_req *r = ok(BODY(",\"seed\":42"));
    cr_assert(r->has_seed);
    cr_assert_eq(r->sampling.seed, 42);
    api_chat_req_free(r);
    r = ok(BODY(",\"seed\":-1"));
    cr_assert(r->has_seed);
    cr_assert_eq(r->sampling.seed, UINT64_MAX);
    api_chat_req_free(r);
    r = ok(BODY(",\"seed\":9223372036854775807"));
    cr_assert_eq(r->sampling.seed, (uint64_t)INT64_MAX);
    api_chat_req_free(r);
    /* Without a seed every request gets a fresh one. */
    struct api_chat_req *a = ok(BODY("")), *b = ok(BODY(""));
    cr_assert(!a->has_seed && !b->has_seed);
    cr_assert_neq(a->sampling.seed, b->sampling.seed);
    api_chat_req_free(a);
    api_chat_req_free(b);
    bad_as(BODY(",\"seed\":1.5"), "seed", "expected an integer");
    bad(BODY(",\"seed\":\"42\""), "seed");
}

MCD_TEST(chat_req, stop)
{
    struct api_chat_req *r = ok(BODY(",\"stop\":\"\\n\\n\""));
    cr_assert_eq(r->n_stop, 1);
    cr_assert_eq(r->stop[0].len, 2);
    api_chat_req_free(r);
    r = ok(BODY(",\"stop\":[\"a\",\"bb\",\"c\\u0000d\",\"é\"]"));
    cr_assert_eq(r->n_stop, 4);
    cr_assert_eq(r->stop[1].len, 2);
    cr_assert_eq(r->stop[2].len, 3, "a NUL inside counts");
    cr_assert_eq(r->stop[3].len, 2);
    api_chat_req_free(r);
    r = ok(BODY(",\"stop\":[]"));
    cr_assert_eq(r->n_stop, 0);
    api_chat_req_free(r);
    bad_as(BODY(",\"stop\":\"\""), "stop", "must not be empty");
    bad_as(BODY(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), "stop", "maximum length 4");
    bad(BODY(",\"stop\":[\"a\",\"\"]"), "stop[1]");
    bad_as(BODY(",\"stop\":[\"a\",3]"), "stop[1]", "expected a string");
    bad(BODY(",\"stop\":[null]"), "stop[0]");
    bad(BODY(",\"stop\":5"), "stop");
    bad(BODY(",\"stop\":{\"a\":1}"), "stop");
}

MCD_TEST(chat_req, logit_bias)
{
    struct api_chat_req *r = ok(BODY(",\"logit_bias\":{\"5\":10,\"999\":-100,\"0\":100,"
                                     "\"12\":0.5}"));
    cr_assert_eq(r->sampling.n_bias, 4);
    cr_assert_not_null(r->sampling.bias);
    bool seen5 = false, seen999 = false;
    for (int i = 0; i < r->sampling.n_bias; i++) {
        if (r->sampling.bias[i].id == 5) {
            seen5 = true;
            cr_assert_float_eq(r->sampling.bias[i].bias, 10.0f, 1e-6);
        }
        if (r->sampling.bias[i].id == 999) {
            seen999 = true;
            cr_assert_float_eq(r->sampling.bias[i].bias, -100.0f, 1e-6);
        }
    }
    cr_assert(seen5 && seen999);
    api_chat_req_free(r);
    r = ok(BODY(",\"logit_bias\":{\"7\":1,\"007\":2}"));
    cr_assert_eq(r->sampling.n_bias, 1, "one id, written twice");
    cr_assert_eq(r->sampling.bias[0].id, 7);
    cr_assert_float_eq(r->sampling.bias[0].bias, 2.0f, 1e-6, "the later one wins");
    api_chat_req_free(r);
    r = ok(BODY(",\"logit_bias\":{\"9\":1,\"3\":2,\"09\":3,\"5\":4,\"3\":5}"));
    cr_assert_eq(r->sampling.n_bias, 3);
    cr_assert_eq(r->sampling.bias[0].id, 3);
    cr_assert_eq(r->sampling.bias[1].id, 5);
    cr_assert_eq(r->sampling.bias[2].id, 9);
    cr_assert_float_eq(r->sampling.bias[2].bias, 3.0f, 1e-6);
    api_chat_req_free(r);
    r = ok(BODY(",\"logit_bias\":{}"));
    cr_assert_eq(r->sampling.n_bias, 0);
    api_chat_req_free(r);
    bad_as(BODY(",\"logit_bias\":{\"5\":101}"), "logit_bias.5", "between -100 and 100");
    bad(BODY(",\"logit_bias\":{\"5\":-100.5}"), "logit_bias.5");
    bad_as(BODY(",\"logit_bias\":{\"5\":\"x\"}"), "logit_bias.5", "expected a number");
    bad_as(BODY(",\"logit_bias\":{\"1000\":1}"), "logit_bias.1000", "0 to 999");
    bad(BODY(",\"logit_bias\":{\"abc\":1}"), "logit_bias.abc");
    bad(BODY(",\"logit_bias\":{\"-1\":1}"), "logit_bias.-1");
    bad(BODY(",\"logit_bias\":{\"\":1}"), "logit_bias.");
    bad(BODY(",\"logit_bias\":{\" 5\":1}"), "logit_bias. 5");
    bad(BODY(",\"logit_bias\":{\"99999999999999999999999\":1}"),
        "logit_bias.99999999999999999999999");
    bad(BODY(",\"logit_bias\":{\"1\":1,\"123\":200}"), "logit_bias.123");
    bad(BODY(",\"logit_bias\":[[5,1]]"), "logit_bias");
    /* A very long key: the param is cut at a character, the body stays valid. */
    char body[2048], key[900] = "";
    for (int i = 0; i < 150; i++)
        strcat(key, "ü");
    snprintf(body, sizeof body, BODY(",\"logit_bias\":{\"%s\":1}"), key);
    json_t *j = load(body);
    struct api_chat_req *out;
    struct api_bad_request b;
    cr_assert_eq(api_chat_req_parse(j, &LIM, &out, &b), -EINVAL);
    cr_assert(mcd_utf8_valid(b.param) && mcd_utf8_valid(b.message));
    cr_assert(strncmp(b.param, "logit_bias.ü", strlen("logit_bias.ü")) == 0);
    json_t *e = parse_str(api_error_body(b.error, b.message, b.param));
    cr_assert_str_eq(sget(json_object_get(e, "error"), "param"), b.param);
    json_decref(e);
    json_decref(j);
}

MCD_TEST(chat_req, logprobs)
{
    struct api_chat_req *r = ok(BODY(",\"logprobs\":true,\"top_logprobs\":5"));
    cr_assert(r->logprobs);
    cr_assert_eq(r->top_logprobs, 5);
    api_chat_req_free(r);
    r = ok(BODY(",\"logprobs\":true"));
    cr_assert(r->logprobs);
    cr_assert_eq(r->top_logprobs, 0);
    api_chat_req_free(r);
    r = ok(BODY(",\"logprobs\":true,\"top_logprobs\":20"));
    cr_assert_eq(r->top_logprobs, 20);
    api_chat_req_free(r);
    r = ok(BODY(",\"logprobs\":false,\"top_logprobs\":null"));
    cr_assert(!r->logprobs);
    api_chat_req_free(r);
    bad(BODY(",\"logprobs\":true,\"top_logprobs\":21"), "top_logprobs");
    bad(BODY(",\"logprobs\":true,\"top_logprobs\":-1"), "top_logprobs");
    bad(BODY(",\"logprobs\":true,\"top_logprobs\":2.5"), "top_logprobs");
    bad_as(BODY(",\"top_logprobs\":3"), "top_logprobs", "requires 'logprobs'");
    bad(BODY(",\"logprobs\":false,\"top_logprobs\":0"), "top_logprobs");
    bad(BODY(",\"logprobs\":\"yes\""), "logprobs");
}

/* ---- tools and tool_choice ------------------------------------------------------------------ */

static const char *tool_name_at(const json_t *tools, size_t i)
{
    return json_string_value(
        json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
}

MCD_TEST(chat_req, tools_auto)
{
    char body[1024];
    snprintf(body, sizeof body, BODY("%s"), TOOLS);
    struct api_chat_req *r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_AUTO);
    cr_assert_eq(json_array_size(r->parser_tools), 2);
    cr_assert_eq(r->chat.tools, r->parser_tools);
    /* The template shows the tools. */
    char err[256], param[128];
    char *prompt = eng_chat_render(&r->chat, err, sizeof err, param, sizeof param);
    cr_assert_not_null(prompt, "%s (%s)", err, param);
    cr_assert_not_null(strstr(prompt, "get_weather"));
    free(prompt);
    api_chat_req_free(r);

    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"auto\""), TOOLS);
    r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_AUTO);
    api_chat_req_free(r);
    r = ok(BODY(",\"tools\":[]"));
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    cr_assert_null(r->parser_tools);
    api_chat_req_free(r);
    r = ok(BODY(",\"tool_choice\":\"auto\""));
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE, "auto without tools is none");
    api_chat_req_free(r);
    r = ok(BODY(",\"tool_choice\":\"none\""));
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    api_chat_req_free(r);
}

MCD_TEST(chat_req, tool_choice_none_hides_the_tools)
{
    char body[1024];
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"none\""), TOOLS);
    struct api_chat_req *r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    cr_assert_null(r->parser_tools);
    cr_assert_null(r->chat.tools);
    char *prompt = eng_chat_render(&r->chat, NULL, 0, NULL, 0);
    cr_assert_not_null(prompt);
    cr_assert_null(strstr(prompt, "get_weather"));
    free(prompt);
    api_chat_req_free(r);
}

MCD_TEST(chat_req, tool_choice_required_and_named)
{
    char body[1024];
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"required\""), TOOLS);
    struct api_chat_req *r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_REQUIRED);
    cr_assert_eq(json_array_size(r->parser_tools), 2);
    api_chat_req_free(r);

    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}}"),
             TOOLS);
    r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_FUNCTION);
    cr_assert_str_eq(r->tool_choice_name, "b");
    cr_assert_eq(json_array_size(r->parser_tools), 1);
    cr_assert_str_eq(tool_name_at(r->parser_tools, 0), "b");
    char *prompt = eng_chat_render(&r->chat, NULL, 0, NULL, 0);
    cr_assert_not_null(prompt);
    cr_assert_null(strstr(prompt, "get_weather"), "only the named function is shown");
    free(prompt);
    api_chat_req_free(r);

    bad_as(BODY(",\"tool_choice\":\"required\""), "tool_choice", "needs at least one tool");
    bad(BODY(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}}"),
        "tool_choice.function.name");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"always\""), TOOLS);
    bad_as(body, "tool_choice", "'always' is not one of");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":5"), TOOLS);
    bad(body, "tool_choice");
    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"zz\"}}"),
             TOOLS);
    bad_as(body, "tool_choice.function.name", "no function named 'zz'");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":{\"type\":\"function\"}"), TOOLS);
    bad(body, "tool_choice.function");
    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":1}}"), TOOLS);
    bad(body, "tool_choice.function.name");
    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"custom\",\"function\":{\"name\":\"b\"}}"),
             TOOLS);
    bad(body, "tool_choice.type");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":{\"function\":{\"name\":\"b\"}}"),
             TOOLS);
    bad(body, "tool_choice.type");
}

MCD_TEST(chat_req, tool_definitions)
{
    /* At most 128 tools, as OpenAI. */
    for (int n = 128; n <= 129; n++) {
        char *body = malloc(200 * 64 + 256), *at = body;
        cr_assert_not_null(body);
        at += sprintf(at, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                          "\"u\"}],\"tools\":[");
        for (int i = 0; i < n; i++)
            at += sprintf(at, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}",
                          i ? "," : "", i);
        strcpy(at, "]}");
        if (n == 128)
            api_chat_req_free(ok(body));
        else
            bad_as(body, "tools", "maximum length 128");
        free(body);
    }

    bad_as(BODY(",\"tools\":{}"), "tools", "expected an array");
    bad(BODY(",\"tools\":[5]"), "tools[0]");
    bad(BODY(",\"tools\":[{\"function\":{\"name\":\"f\"}}]"), "tools[0].type");
    bad_as(BODY(",\"tools\":[{\"type\":\"retrieval\",\"function\":{\"name\":\"f\"}}]"),
           "tools[0].type", "'function'");
    bad(BODY(",\"tools\":[{\"type\":\"function\"}]"), "tools[0].function");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":[]}]"), "tools[0].function");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{}}]"), "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]"),
        "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a<b\"}}]"),
        "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\\\"b\"}}]"),
        "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\\nb\"}}]"),
        "tools[0].function.name");
    bad_as(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":"
                "\"function\",\"function\":{\"name\":\"f\"}}]"),
           "tools[1].function.name", "defined twice");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
             "[]}}]"),
        "tools[0].function.parameters");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":"
             "3}}]"),
        "tools[0].function.description");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":"
             "\"yes\"}}]"),
        "tools[0].function.strict");
    api_chat_req_free(ok(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                              "\"ns.tool-1_x\",\"parameters\":null,\"strict\":true}}]")));
}

/* ---- chat_template_kwargs, user, add_generation_prompt ------------------------------------- */

MCD_TEST(chat_req, enable_thinking)
{
    struct api_chat_req *r = ok(BODY(",\"chat_template_kwargs\":{\"enable_thinking\":true}"));
    cr_assert_eq(r->chat.thinking, ENG_THINKING_ON);
    cr_assert_eq(r->chat.thinking, ENG_THINKING_ON);
    api_chat_req_free(r);
    r = ok(BODY(",\"chat_template_kwargs\":{\"enable_thinking\":false,\"other\":1}"));
    cr_assert_eq(r->chat.thinking, ENG_THINKING_OFF);
    api_chat_req_free(r);
    r = ok(BODY(",\"chat_template_kwargs\":{}"));
    cr_assert_eq(r->chat.thinking, ENG_THINKING_UNSET);
    api_chat_req_free(r);
    bad_as(BODY(",\"chat_template_kwargs\":{\"enable_thinking\":\"false\"}"),
           "chat_template_kwargs.enable_thinking", "expected a boolean");
    bad(BODY(",\"chat_template_kwargs\":{\"enable_thinking\":0}"),
        "chat_template_kwargs.enable_thinking");
    bad(BODY(",\"chat_template_kwargs\":true"), "chat_template_kwargs");
}

MCD_TEST(chat_req, user_and_add_generation_prompt)
{
    struct api_chat_req *r = ok(BODY(",\"user\":\"alice\""));
    cr_assert_str_eq(r->user, "alice");
    api_chat_req_free(r);
    bad(BODY(",\"user\":42"), "user");
    r = ok(BODY(",\"add_generation_prompt\":false"));
    cr_assert(!r->chat.add_generation_prompt);
    api_chat_req_free(r);
    bad(BODY(",\"add_generation_prompt\":\"no\""), "add_generation_prompt");
}

MCD_TEST(chat_req, refusals_render_as_openai_errors)
{
    json_t *j = load(BODY(",\"temperature\":9"));
    struct api_chat_req *r;
    struct api_bad_request b;
    cr_assert_eq(api_chat_req_parse(j, &LIM, &r, &b), -EINVAL);
    json_decref(j);
    cr_assert_eq(api_error_status(b.error), 400);
    json_t *e = parse_str(api_error_body(b.error, b.message, b.param));
    json_t *err = json_object_get(e, "error");
    cr_assert_eq(json_object_size(err), 4);
    cr_assert_str_eq(sget(err, "type"), "invalid_request_error");
    cr_assert_str_eq(sget(err, "param"), "temperature");
    cr_assert(json_is_null(json_object_get(err, "code")));
    json_decref(e);
}

/* ---- responses ---------------------------------------------------------------------------------- */

static bool is_alnum_str(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return false;
    }
    return s[n] == '\0';
}

MCD_TEST(chat_resp, ident)
{
    struct api_chat_ident a, b;
    api_chat_ident_init(&a, "minicpm5:2b", "0.1.0", "xrt", false);
    api_chat_ident_init(&b, "minicpm5:2b", "0.1.0", "cpu", true);
    cr_assert(strncmp(a.id, "chatcmpl-", 9) == 0);
    cr_assert_eq(strlen(a.id), 9 + 32);
    cr_assert(is_alnum_str(a.id + 9, 32));
    cr_assert_str_neq(a.id, b.id);
    cr_assert_str_eq(a.fingerprint, "minicpmd-0.1.0-xrt");
    cr_assert_str_eq(b.fingerprint, "minicpmd-0.1.0-cpu");
    cr_assert(a.created > 1600000000);
    api_chat_ident_init(&a, "m", NULL, "np u/\"x\"", false);
    cr_assert_str_eq(a.fingerprint, "minicpmd-unknown-np_u__x_");
    char id[API_TOOL_CALL_ID_SIZE];
    api_tool_call_id(id);
    cr_assert(strncmp(id, "call_", 5) == 0);
    cr_assert(is_alnum_str(id + 5, 24));
}

static void check_head(const json_t *o, const struct api_chat_ident *ci, const char *object)
{
    cr_assert_str_eq(sget(o, "id"), ci->id);
    cr_assert_str_eq(sget(o, "object"), object);
    cr_assert_eq(iget(o, "created"), ci->created);
    cr_assert_str_eq(sget(o, "model"), ci->model);
    cr_assert_str_eq(sget(o, "system_fingerprint"), ci->fingerprint);
}

MCD_TEST(chat_resp, completion_with_reasoning_usage_and_timings)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "minicpm5:2b", "0.1.0", "cpu", false);
    struct api_timings t = {.cache_n = 3, .prompt_n = 10, .prompt_ms = 50,
                            .predicted_n = 20, .predicted_ms = 400};
    struct api_chat_result res = {
        .content = "Hello!",
        .reasoning = "The user greets.",
        .finish = API_FINISH_STOP,
        .usage = {.prompt_tokens = 13, .completion_tokens = 20, .reasoning_tokens = 6,
                  .cached_tokens = 3},
        .timings = &t,
    };
    json_t *o = parse_str(api_chat_completion_body(&ci, &res));
    check_head(o, &ci, "chat.completion");
    json_t *choices = json_object_get(o, "choices");
    cr_assert_eq(json_array_size(choices), 1);
    json_t *c = json_array_get(choices, 0);
    cr_assert_eq(iget(c, "index"), 0);
    cr_assert_str_eq(sget(c, "finish_reason"), "stop");
    cr_assert(json_is_null(json_object_get(c, "logprobs")));
    json_t *m = json_object_get(c, "message");
    cr_assert_str_eq(sget(m, "role"), "assistant");
    cr_assert_str_eq(sget(m, "content"), "Hello!");
    cr_assert_str_eq(sget(m, "reasoning_content"), "The user greets.");
    cr_assert_null(json_object_get(m, "tool_calls"));
    json_t *u = json_object_get(o, "usage");
    cr_assert_eq(iget(u, "prompt_tokens"), 13);
    cr_assert_eq(iget(u, "completion_tokens"), 20);
    cr_assert_eq(iget(u, "total_tokens"), 33);
    cr_assert_eq(iget(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"), 6);
    cr_assert_eq(iget(json_object_get(u, "prompt_tokens_details"), "cached_tokens"), 3);
    json_t *tm = json_object_get(o, "timings");
    cr_assert_eq(iget(tm, "cache_n"), 3);
    cr_assert_eq(iget(tm, "prompt_n"), 10);
    cr_assert_float_eq(rget(tm, "prompt_ms"), 50.0, 1e-9);
    cr_assert_float_eq(rget(tm, "prompt_per_token_ms"), 5.0, 1e-9);
    cr_assert_float_eq(rget(tm, "prompt_per_second"), 200.0, 1e-9);
    cr_assert_eq(iget(tm, "predicted_n"), 20);
    cr_assert_float_eq(rget(tm, "predicted_ms"), 400.0, 1e-9);
    cr_assert_float_eq(rget(tm, "predicted_per_token_ms"), 20.0, 1e-9);
    cr_assert_float_eq(rget(tm, "predicted_per_second"), 50.0, 1e-9);
    json_decref(o);
}

MCD_TEST(chat_resp, completion_minimal)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", false);
    struct api_chat_result res = {.finish = API_FINISH_LENGTH, .reasoning = ""};
    json_t *o = api_chat_completion_json(&ci, &res);
    cr_assert_not_null(o);
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    json_t *m = json_object_get(c, "message");
    cr_assert_str_eq(sget(m, "content"), "", "no text and no calls: empty string");
    cr_assert_null(json_object_get(m, "reasoning_content"));
    cr_assert_str_eq(sget(c, "finish_reason"), "length");
    cr_assert_null(json_object_get(o, "timings"));
    cr_assert_eq(iget(json_object_get(o, "usage"), "total_tokens"), 0);
    json_decref(o);
}

MCD_TEST(chat_resp, tool_calls)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", false);
    struct api_tool_call calls[] = {
        {.id = "call_abc", .name = "get_weather", .arguments = "{\"city\":\"Paris\"}"},
        {.name = "b", .arguments = "{}"},
    };
    struct api_chat_result res = {.tool_calls = calls, .n_tool_calls = 2,
                                  .finish = API_FINISH_TOOL_CALLS};
    json_t *o = parse_str(api_chat_completion_body(&ci, &res));
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    cr_assert_str_eq(sget(c, "finish_reason"), "tool_calls");
    json_t *m = json_object_get(c, "message");
    cr_assert(json_is_null(json_object_get(m, "content")), "only tool calls: content null");
    json_t *tc = json_object_get(m, "tool_calls");
    cr_assert_eq(json_array_size(tc), 2);
    json_t *c0 = json_array_get(tc, 0), *c1 = json_array_get(tc, 1);
    cr_assert_str_eq(sget(c0, "id"), "call_abc");
    cr_assert_str_eq(sget(c0, "type"), "function");
    cr_assert_str_eq(sget(json_object_get(c0, "function"), "name"), "get_weather");
    const char *args = sget(json_object_get(c0, "function"), "arguments");
    cr_assert_str_eq(args, "{\"city\":\"Paris\"}", "arguments is a JSON string");
    json_t *parsed = load(args);
    cr_assert_str_eq(sget(parsed, "city"), "Paris");
    json_decref(parsed);
    cr_assert(strncmp(sget(c1, "id"), "call_", 5) == 0 && strlen(sget(c1, "id")) == 29,
              "an id is made when none is given");
    cr_assert_str_eq(sget(json_object_get(c1, "function"), "arguments"), "{}");
    json_decref(o);

    /* Text before the calls stays content. */
    res.content = "Let me check.";
    o = api_chat_completion_json(&ci, &res);
    m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    cr_assert_str_eq(sget(m, "content"), "Let me check.");
    cr_assert_eq(json_array_size(json_object_get(m, "tool_calls")), 2);
    json_decref(o);
}

MCD_TEST(chat_resp, invalid_utf8_never_breaks_the_body)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m\xff", "0.1.0", "cpu", false);
    struct api_chat_result res = {.content = "a\xE2\x82 b\xC0\xAF", .reasoning = "\xF5x"};
    json_t *o = parse_str(api_chat_completion_body(&ci, &res));
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    cr_assert_str_eq(sget(m, "content"), "a\xEF\xBF\xBD\xEF\xBF\xBD b\xEF\xBF\xBD\xEF\xBF\xBD");
    cr_assert_str_eq(sget(m, "reasoning_content"), "\xEF\xBF\xBDx");
    cr_assert_str_eq(sget(o, "model"), "m\xEF\xBF\xBD");
    json_decref(o);
}

MCD_TEST(chat_resp, logprobs)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", false);
    struct api_top_logprob top0[] = {{"Hi", 2, -0.1f}, {"Hello", 5, -2.5f}};
    struct api_token_logprob toks[] = {
        {.token = "Hi", .len = 2, .logprob = -0.1f, .top = top0, .n_top = 2},
        {.token = "\xE2\x82", .len = 2, .logprob = -INFINITY, .top = NULL, .n_top = 0},
    };
    struct api_chat_result res = {.content = "Hi\xE2\x82\xAC", .logprobs = true, .tokens = toks,
                                  .n_tokens = 2};
    json_t *o = parse_str(api_chat_completion_body(&ci, &res));
    json_t *lp = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    cr_assert(json_is_object(lp));
    json_t *content = json_object_get(lp, "content");
    cr_assert_eq(json_array_size(content), 2);
    json_t *t0 = json_array_get(content, 0);
    cr_assert_str_eq(sget(t0, "token"), "Hi");
    cr_assert_float_eq(rget(t0, "logprob"), -0.1, 1e-6);
    json_t *bytes = json_object_get(t0, "bytes");
    cr_assert_eq(json_array_size(bytes), 2);
    cr_assert_eq(json_integer_value(json_array_get(bytes, 0)), 'H');
    json_t *tl = json_object_get(t0, "top_logprobs");
    cr_assert_eq(json_array_size(tl), 2);
    cr_assert_str_eq(sget(json_array_get(tl, 1), "token"), "Hello");
    cr_assert_float_eq(rget(json_array_get(tl, 1), "logprob"), -2.5, 1e-6);
    cr_assert_eq(json_array_size(json_object_get(json_array_get(tl, 1), "bytes")), 5);
    json_t *t1 = json_array_get(content, 1);
    cr_assert_str_eq(sget(t1, "token"), "\xEF\xBF\xBD\xEF\xBF\xBD", "partial character");
    bytes = json_object_get(t1, "bytes");
    cr_assert_eq(json_integer_value(json_array_get(bytes, 0)), 0xE2);
    cr_assert_eq(json_integer_value(json_array_get(bytes, 1)), 0x82);
    cr_assert_float_eq(rget(t1, "logprob"), -9999.0, 1e-9);
    cr_assert_eq(json_array_size(json_object_get(t1, "top_logprobs")), 0);
    json_decref(o);
}

MCD_TEST(chat_resp, timings_without_time_or_tokens)
{
    struct api_timings t = {0};
    json_t *o = api_timings_json(&t);
    cr_assert_not_null(o);
    cr_assert_float_eq(rget(o, "prompt_per_second"), 0.0, 1e-12);
    cr_assert_float_eq(rget(o, "predicted_per_token_ms"), 0.0, 1e-12);
    cr_assert_eq(json_object_size(o), 9);
    json_decref(o);
}

/* ---- streaming ------------------------------------------------------------------------------------ */

static json_t *choice0(const json_t *chunk)
{
    json_t *c = json_object_get(chunk, "choices");
    cr_assert_eq(json_array_size(c), 1);
    json_t *ch = json_array_get(c, 0);
    cr_assert_eq(iget(ch, "index"), 0);
    return ch;
}

MCD_TEST(chat_resp, stream_sequence)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "minicpm5:2b", "0.1.0", "xrt", false);

    json_t *c = parse_event(api_sse_event(api_chat_chunk_first(&ci)));
    check_head(c, &ci, "chat.completion.chunk");
    json_t *ch = choice0(c);
    json_t *d = json_object_get(ch, "delta");
    cr_assert_eq(json_object_size(d), 2);
    cr_assert_str_eq(sget(d, "role"), "assistant");
    cr_assert_str_eq(sget(d, "content"), "");
    cr_assert(json_is_null(json_object_get(ch, "finish_reason")));
    cr_assert(json_is_null(json_object_get(ch, "logprobs")));
    cr_assert_null(json_object_get(c, "usage"), "no usage key without include_usage");
    json_decref(c);

    c = parse_event(api_sse_event(
        api_chat_chunk_delta(&ci, &(struct api_chat_delta){.reasoning = "hmm"})));
    check_head(c, &ci, "chat.completion.chunk");
    d = json_object_get(choice0(c), "delta");
    cr_assert_eq(json_object_size(d), 1);
    cr_assert_str_eq(sget(d, "reasoning_content"), "hmm");
    json_decref(c);

    c = parse_event(api_sse_event(
        api_chat_chunk_delta(&ci, &(struct api_chat_delta){.content = "Hel\"lo\n"})));
    d = json_object_get(choice0(c), "delta");
    cr_assert_eq(json_object_size(d), 1);
    cr_assert_str_eq(sget(d, "content"), "Hel\"lo\n");
    cr_assert_null(json_object_get(d, "role"), "role only on the first chunk");
    json_decref(c);

    struct api_timings t = {.prompt_n = 4, .prompt_ms = 8, .predicted_n = 2, .predicted_ms = 4};
    c = parse_event(api_sse_event(api_chat_chunk_final(&ci, API_FINISH_LENGTH, &t)));
    check_head(c, &ci, "chat.completion.chunk");
    ch = choice0(c);
    cr_assert_eq(json_object_size(json_object_get(ch, "delta")), 0, "final delta is {}");
    cr_assert_str_eq(sget(ch, "finish_reason"), "length");
    cr_assert_float_eq(rget(json_object_get(c, "timings"), "predicted_per_second"), 500.0, 1e-9);
    json_decref(c);

    c = parse_event(api_sse_event(api_chat_chunk_final(&ci, API_FINISH_STOP, NULL)));
    cr_assert_null(json_object_get(c, "timings"));
    cr_assert_str_eq(sget(choice0(c), "finish_reason"), "stop");
    json_decref(c);
}

MCD_TEST(chat_resp, stream_usage_chunk)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", true);
    json_t *c = parse_event(api_sse_event(api_chat_chunk_first(&ci)));
    cr_assert(json_is_null(json_object_get(c, "usage")), "usage: null on ordinary chunks");
    json_decref(c);
    c = parse_event(api_sse_event(api_chat_chunk_final(&ci, API_FINISH_STOP, NULL)));
    cr_assert(json_is_null(json_object_get(c, "usage")));
    json_decref(c);

    struct api_usage u = {.prompt_tokens = 5, .completion_tokens = 7, .reasoning_tokens = 2};
    struct api_timings t = {.prompt_n = 5, .prompt_ms = 10, .predicted_n = 7, .predicted_ms = 70};
    c = parse_event(api_sse_event(api_chat_chunk_usage(&ci, &u, &t)));
    check_head(c, &ci, "chat.completion.chunk");
    json_t *choices = json_object_get(c, "choices");
    cr_assert(json_is_array(choices) && json_array_size(choices) == 0);
    json_t *uj = json_object_get(c, "usage");
    cr_assert_eq(iget(uj, "prompt_tokens"), 5);
    cr_assert_eq(iget(uj, "completion_tokens"), 7);
    cr_assert_eq(iget(uj, "total_tokens"), 12);
    cr_assert_eq(iget(json_object_get(uj, "completion_tokens_details"), "reasoning_tokens"), 2);
    cr_assert_eq(iget(json_object_get(c, "timings"), "predicted_n"), 7);
    json_decref(c);
}

MCD_TEST(chat_resp, stream_tool_call_deltas)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", false);
    struct api_tool_call_delta first[] = {
        {.index = 0, .id = "call_x", .name = "get_weather", .arguments = "{\"city\":\"Pa"},
        {.index = 1, .name = "b", .arguments = NULL},
    };
    json_t *c = parse_event(api_sse_event(api_chat_chunk_delta(
        &ci, &(struct api_chat_delta){.tool_calls = first, .n_tool_calls = 2})));
    json_t *d = json_object_get(choice0(c), "delta");
    cr_assert_null(json_object_get(d, "content"));
    json_t *tc = json_object_get(d, "tool_calls");
    cr_assert_eq(json_array_size(tc), 2);
    json_t *t0 = json_array_get(tc, 0);
    cr_assert_eq(iget(t0, "index"), 0);
    cr_assert_str_eq(sget(t0, "id"), "call_x");
    cr_assert_str_eq(sget(t0, "type"), "function");
    cr_assert_str_eq(sget(json_object_get(t0, "function"), "name"), "get_weather");
    cr_assert_str_eq(sget(json_object_get(t0, "function"), "arguments"), "{\"city\":\"Pa");
    json_t *t1 = json_array_get(tc, 1);
    cr_assert_eq(iget(t1, "index"), 1);
    cr_assert(strncmp(sget(t1, "id"), "call_", 5) == 0);
    cr_assert_str_eq(sget(json_object_get(t1, "function"), "arguments"), "");
    json_decref(c);

    struct api_tool_call_delta more = {.index = 0, .arguments = "ris\"}"};
    c = parse_event(api_sse_event(api_chat_chunk_delta(
        &ci, &(struct api_chat_delta){.tool_calls = &more, .n_tool_calls = 1})));
    t0 = json_array_get(json_object_get(json_object_get(choice0(c), "delta"), "tool_calls"), 0);
    cr_assert_eq(json_object_size(t0), 2, "continuation: index and function only");
    cr_assert_eq(iget(t0, "index"), 0);
    json_t *fn = json_object_get(t0, "function");
    cr_assert_eq(json_object_size(fn), 1);
    cr_assert_str_eq(sget(fn, "arguments"), "ris\"}");
    json_decref(c);
}

MCD_TEST(chat_resp, stream_logprobs)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", false);
    struct api_token_logprob tok = {.token = "Hi", .len = 2, .logprob = -0.5f};
    json_t *c = parse_event(api_sse_event(api_chat_chunk_delta(
        &ci, &(struct api_chat_delta){.content = "Hi", .logprobs = true, .tokens = &tok,
                                      .n_tokens = 1})));
    json_t *lp = json_object_get(choice0(c), "logprobs");
    cr_assert_eq(json_array_size(json_object_get(lp, "content")), 1);
    cr_assert_str_eq(sget(json_array_get(json_object_get(lp, "content"), 0), "token"), "Hi");
    json_decref(c);
}

/* ---- SSE ------------------------------------------------------------------------------------------ */

MCD_TEST(sse, framing)
{
    char *f = api_sse_frame("{\"a\":1}");
    cr_assert_str_eq(f, "data: {\"a\":1}\n\n");
    free(f);
    f = api_sse_frame("line1\nline2");
    cr_assert_str_eq(f, "data: line1\ndata: line2\n\n");
    free(f);
    f = api_sse_frame("a\rb\r\nc");
    cr_assert_str_eq(f, "data: ab\r\ndata: c\n\n");
    free(f);
    f = api_sse_frame("");
    cr_assert_str_eq(f, "data: \n\n");
    free(f);
    cr_assert_null(api_sse_frame(NULL));
    cr_assert_null(api_sse_event(NULL));
    cr_assert_str_eq(API_SSE_DONE, "data: [DONE]\n\n");
    cr_assert_str_eq(API_SSE_PING, ": ping\n\n");
    json_t *o = json_pack("{s:s}", "k", "two\nlines");
    f = api_sse_event(o); /* steals o */
    cr_assert_str_eq(f, "data: {\"k\":\"two\\nlines\"}\n\n");
    free(f);
}

MCD_TEST(sse, error_event)
{
    char *body = api_error_body(API_ERR_INTERNAL, "boom", NULL);
    json_t *e = parse_event(api_sse_frame(body));
    free(body);
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "message"), "boom");
    cr_assert_str_eq(sget(err, "type"), "server_error");
    json_decref(e);
}

/* ---- errors ----------------------------------------------------------------------------------------- */

MCD_TEST(chat_errors, context_length)
{
    json_t *e = parse_str(api_context_length_body(4096, 5000, 0));
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "message"),
                     "This model's maximum context length is 4096 tokens. However, your "
                     "messages resulted in 5000 tokens. Please reduce the length of the "
                     "messages.");
    cr_assert_str_eq(sget(err, "type"), "invalid_request_error");
    cr_assert_str_eq(sget(err, "code"), "context_length_exceeded");
    cr_assert_str_eq(sget(err, "param"), "messages");
    json_decref(e);
    e = parse_str(api_context_length_body(4096, 4100, 200));
    cr_assert_str_eq(sget(json_object_get(e, "error"), "message"),
                     "This model's maximum context length is 4096 tokens. However, you "
                     "requested 4300 tokens (4100 in the messages, 200 in the completion). "
                     "Please reduce the length of the messages or completion.");
    json_decref(e);
    cr_assert_eq(api_error_status(API_ERR_CONTEXT_LENGTH), 400);
}

MCD_TEST(chat_errors, server_busy)
{
    json_t *e = parse_str(api_server_busy_body(8));
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "code"), "server_busy");
    cr_assert_str_eq(sget(err, "type"), "unavailable_error");
    cr_assert_not_null(strstr(sget(err, "message"), "8 requests"));
    cr_assert(json_is_null(json_object_get(err, "param")));
    cr_assert_eq(api_error_status(API_ERR_BUSY), 503);
    json_decref(e);
}

MCD_TEST(chat_errors, device_error)
{
    struct api_device_error de = {
        .ert_state = 8, .ert_name = "ERT_CMD_STATE_TIMEOUT", .phase = "prefill",
        .chunk_index = 3, .chunk_count = 10, .layer_first = 12, .layer_last = 15,
        .token_pos = 120, .elapsed_ms = 2000, .device = "xrt", .attempts = 2,
    };
    json_t *e = parse_str(api_device_error_body(&de));
    cr_assert_eq(json_object_size(e), 1);
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "type"), "device_error");
    cr_assert_str_eq(sget(err, "code"), "ert_cmd_state_timeout");
    cr_assert(json_is_null(json_object_get(err, "param")));
    cr_assert_eq(iget(err, "ert_state"), 8);
    cr_assert_str_eq(sget(err, "phase"), "prefill");
    cr_assert_eq(iget(err, "chunk_index"), 3);
    cr_assert_eq(iget(err, "chunk_count"), 10);
    cr_assert_eq(iget(err, "layer_first"), 12);
    cr_assert_eq(iget(err, "layer_last"), 15);
    cr_assert_eq(iget(err, "token_pos"), 120);
    cr_assert_eq(iget(err, "elapsed_ms"), 2000);
    cr_assert_str_eq(sget(err, "device"), "xrt");
    cr_assert_eq(iget(err, "attempts"), 2);
    cr_assert_eq(json_object_size(err), 14, "4 OpenAI keys + 10 fields");
    cr_assert_str_eq(sget(err, "message"),
                     "The xrt device failed with ERT_CMD_STATE_TIMEOUT (state 8) during "
                     "prefill, chunk 3 of 10 (layers 12-15) at token 120 after 2000 ms; 2 "
                     "attempts. The request was not completed; it may be retried.");
    json_decref(e);
    cr_assert_eq(api_error_status(API_ERR_DEVICE_FAULT), 500);
    cr_assert_str_eq(api_error_type(API_ERR_DEVICE_FAULT), "device_error");

    /* Unknown fields are left out; no name: code "device_error". As a stream event. */
    struct api_device_error few = {.ert_state = -1, .chunk_index = -1, .chunk_count = -1,
                                   .layer_first = -1, .layer_last = -1, .token_pos = -1,
                                   .elapsed_ms = -1, .attempts = 1};
    char *body = api_device_error_body(&few);
    e = parse_event(api_sse_frame(body));
    free(body);
    err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "code"), "device_error");
    cr_assert_eq(json_object_size(err), 5, "message, type, param, code, attempts");
    cr_assert_str_eq(sget(err, "message"), "The compute device failed; 1 attempt. The request "
                                           "was not completed; it may be retried.");
    json_decref(e);

    /* A device that could not be reset: the message does not invite a retry. */
    few.unrecovered = true;
    body = api_device_error_body(&few);
    e = parse_event(api_sse_frame(body));
    free(body);
    cr_assert_str_eq(sget(json_object_get(e, "error"), "message"),
                     "The compute device failed; 1 attempt. The request was not completed and "
                     "the device could not be reset.");
    json_decref(e);
}

/* The worker's struct maps onto it as documented; the code is the state's name in
 * lower case. */
MCD_TEST(chat_errors, device_error_from_the_engine)
{
    struct eng_device_error ed;
    eng_device_error_init(&ed, ENG_ERT_ERROR, ENG_PHASE_DECODE);
    ed.chunk_index = 2;
    ed.chunk_count = 3;
    ed.layer_begin = 42; /* the head runlist: no layers */
    ed.layer_end = 42;
    ed.token_pos = 57;
    ed.n_tokens = 1;
    ed.elapsed_ms = 3.7;
    eng_device_error_set_device(&ed, "sim");
    struct api_device_error ad = {
        .ert_state = ed.state, .ert_name = eng_ert_name(ed.state),
        .phase = eng_phase_name(ed.phase), .chunk_index = ed.chunk_index,
        .chunk_count = ed.chunk_count, .layer_first = ed.layer_begin,
        .layer_last = ed.layer_end - 1, .token_pos = ed.token_pos,
        .elapsed_ms = (int64_t)ed.elapsed_ms, .device = ed.device, .attempts = ed.attempts,
    };
    json_t *ours = api_device_error_json(&ad);
    cr_assert_not_null(ours);
    json_t *err = json_object_get(ours, "error");
    cr_assert_str_eq(sget(err, "code"), "ert_cmd_state_error");
    json_t *want = json_pack("{s:i, s:s, s:i, s:i, s:i, s:s, s:i}", "ert_state", 5, "phase",
                             "decode", "chunk_index", 2, "chunk_count", 3, "token_pos", 57,
                             "device", "sim", "attempts", 1);
    const char *key;
    json_t *v;
    json_object_foreach(want, key, v)
        cr_assert(json_equal(json_object_get(err, key), v), "field %s differs", key);
    json_decref(want);
    cr_assert_str_eq(sget(err, "message"),
                     "The sim device failed with ERT_CMD_STATE_ERROR (state 5) during decode, "
                     "chunk 2 of 3 at token 57 after 3 ms; 1 attempt. The request was not "
                     "completed; it may be retried.");
    json_decref(ours);
}
