/* api/chat-req: the validation rules of POST /v1/chat/completions for the
 * request's shape and defaults, model, messages, stream, lengths and n,
 * chat_template_kwargs, user and add_generation_prompt, good and bad, with the
 * exact `param` a refusal names, and refusals as OpenAI errors. Bodies are
 * parsed back with jansson (tests/chat-api-fx.h), so the tests check JSON, not byte
 * strings. */
#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "engine/ert.h"
#include "tests/utf8.h"

#include "tests/chat-api-fx.h"
#include "tests/check.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    struct api_err b;
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
    struct api_err b;
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
    struct api_err b;
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
    struct api_err b = {0};
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
    bad_as(BODY(",\"max_tokens\":0"), "max_tokens", "Expected a value >= 1 (or -1");
    bad(BODY(",\"max_tokens\":-5"), "max_tokens");
    bad(BODY(",\"max_tokens\":-2"), "max_tokens");
    /* -1: until the context ends (Open WebUI's "no limit", llama.cpp's n_predict). */
    r = ok(BODY(",\"max_tokens\":-1"));
    cr_assert_eq(r->max_tokens, 0);
    api_chat_req_free(r);
    r = ok(BODY(",\"max_completion_tokens\":-1,\"max_tokens\":5"));
    cr_assert_eq(r->max_tokens, 0, "max_completion_tokens -1 wins");
    api_chat_req_free(r);
    bad_as(BODY(",\"max_completion_tokens\":0"), "max_completion_tokens", ">= 1");
    bad_as(BODY(",\"max_completion_tokens\":1.5"), "max_completion_tokens", "expected an integer");
    bad(BODY(",\"max_completion_tokens\":\"10\""), "max_completion_tokens");
    bad(BODY(",\"max_tokens\":true"), "max_tokens");
    /* Both are checked even when the other wins. */
    bad(BODY(",\"max_completion_tokens\":5,\"max_tokens\":0"), "max_tokens");
}

MCD_TEST(chat_req, assistant_prefill)
{
    /* An assistant message last is continued unless the client says otherwise. */
    struct api_chat_req *r = ok("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                                "\"hi\"},{\"role\":\"assistant\",\"content\":\"Sure\"}]}");
    cr_assert(r->chat.continue_final);
    api_chat_req_free(r);
    r = ok("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":"
           "\"assistant\",\"content\":\"Sure\"}],\"continue_final_message\":false}");
    cr_assert(!r->chat.continue_final);
    api_chat_req_free(r);
    r = ok(BODY(""));
    cr_assert(!r->chat.continue_final, "a user message last: a new assistant turn");
    api_chat_req_free(r);
    bad(BODY(",\"continue_final_message\":1"), "continue_final_message");
}

/* Thinking: chat_template_kwargs.enable_thinking > reasoning_effort > --thinking. */
MCD_TEST(chat_req, reasoning_effort_and_default)
{
    static const struct {
        const char *extra;
        enum eng_thinking want;
    } cases[] = {
        {"", ENG_THINKING_UNSET},
        {",\"reasoning_effort\":\"none\"", ENG_THINKING_OFF},
        {",\"reasoning_effort\":\"minimal\"", ENG_THINKING_OFF},
        {",\"reasoning_effort\":\"low\"", ENG_THINKING_ON},
        {",\"reasoning_effort\":\"medium\"", ENG_THINKING_ON},
        {",\"reasoning_effort\":\"high\"", ENG_THINKING_ON},
        {",\"reasoning_effort\":null", ENG_THINKING_UNSET},
        {",\"reasoning_effort\":\"none\",\"chat_template_kwargs\":{\"enable_thinking\":true}",
         ENG_THINKING_ON},
        {",\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"enable_thinking\":false}",
         ENG_THINKING_OFF},
    };
    char body[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(body, sizeof body, BODY("%s"), cases[i].extra);
        struct api_chat_req *r = ok(body);
        cr_assert_eq(r->chat.thinking, cases[i].want, "%s", cases[i].extra);
        api_chat_req_free(r);
    }
    bad_as(BODY(",\"reasoning_effort\":\"max\""), "reasoning_effort", "'max' is not one of");
    bad(BODY(",\"reasoning_effort\":1"), "reasoning_effort");

    /* The daemon's default applies only when the request says nothing. */
    struct api_chat_limits off = LIM;
    off.thinking = ENG_THINKING_OFF;
    struct api_err b;
    struct api_chat_req *r = NULL;
    json_t *j = load(BODY(""));
    cr_assert_eq(api_chat_req_parse(j, &off, &r, &b), 0);
    cr_assert_eq(r->chat.thinking, ENG_THINKING_OFF);
    api_chat_req_free(r);
    json_decref(j);
    j = load(BODY(",\"reasoning_effort\":\"low\""));
    cr_assert_eq(api_chat_req_parse(j, &off, &r, &b), 0);
    cr_assert_eq(r->chat.thinking, ENG_THINKING_ON);
    api_chat_req_free(r);
    json_decref(j);
}

MCD_TEST(chat_req, n_choices_1_to_8)
{
    struct api_chat_req *r = ok(BODY(""));
    cr_assert_eq(r->n, 1, "n defaults to 1");
    api_chat_req_free(r);
    api_chat_req_free(ok(BODY(",\"n\":1.0")));
    r = ok(BODY(",\"n\":3"));
    cr_assert_eq(r->n, 3);
    api_chat_req_free(r);
    r = ok(BODY(",\"n\":8"));
    cr_assert_eq(r->n, UT_MAX_CHOICES);
    api_chat_req_free(r);
    bad_as(BODY(",\"n\":9"), "n", "1 to 8 choices per request (got 9)");
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
    struct api_err b;
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
