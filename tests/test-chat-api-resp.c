/* api/chat-resp: the response identity, the chat.completion body (reasoning,
 * usage, timings, tool calls, logprobs, invalid UTF-8), the chat.completion.chunk
 * stream (sequence, usage chunk, tool-call deltas, logprobs) and SSE framing. Bodies are
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

/* n > 1: one result holds every choice and renders once, usage counted as OpenAI
 * does. */
MCD_TEST(chat_resp, choices_render_once_with_summed_usage)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", true);
    const int completion[3] = {5, 7, 2}, reasoning[3] = {1, 0, 2};
    static const char *const text[3] = {"a", "b", "c"};
    struct api_chat_result res[3];
    for (int i = 0; i < 3; i++)
        res[i] = (struct api_chat_result){.finish = API_FINISH_LENGTH, .content = text[i],
                                          .usage = {12, completion[i], reasoning[i], 4}};
    struct api_timings t = {.predicted_n = 5, .predicted_ms = 10};
    struct api_chat_result all = res[0];
    all.timings = &t;
    all.others = &res[1];
    all.n_others = 2;
    for (int i = 1; i < 3; i++)
        api_usage_add_choice(&all.usage, &res[i].usage);
    json_t *o = parse_str(api_chat_completion_body(&ci, &all));
    json_t *choices = json_object_get(o, "choices");
    cr_assert_eq(json_array_size(choices), 3);
    for (int i = 0; i < 3; i++) {
        json_t *c = json_array_get(choices, (size_t)i);
        cr_assert_eq(iget(c, "index"), i);
        cr_assert_str_eq(sget(json_object_get(c, "message"), "content"), text[i]);
        cr_assert_str_eq(sget(c, "finish_reason"), "length");
    }
    json_t *u = json_object_get(o, "usage");
    cr_assert_eq(iget(u, "prompt_tokens"), 12, "the prompt once");
    cr_assert_eq(iget(u, "completion_tokens"), 14);
    cr_assert_eq(iget(u, "total_tokens"), 26);
    cr_assert_eq(iget(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"), 3);
    cr_assert_eq(iget(json_object_get(u, "prompt_tokens_details"), "cached_tokens"), 4);
    cr_assert_eq(iget(json_object_get(o, "timings"), "predicted_n"), 5, "the first's timings");
    json_decref(o);
    /* the stream's tail: the usage chunk, then [DONE] */
    struct api_usage sum = {12, 14, 3, 4};
    char *tail = api_chat_stream_tail(&ci, &sum);
    cr_assert_not_null(tail);
    cr_assert(strstr(tail, "\"completion_tokens\":14") && strstr(tail, "\"choices\":[]"), "%s",
              tail);
    size_t n = strlen(tail);
    cr_assert(n > strlen(API_SSE_DONE) && strcmp(tail + n - strlen(API_SSE_DONE), API_SSE_DONE) == 0);
    free(tail);
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
    /* One U+FFFD per maximal invalid subpart (util/utf8.h): the cut E2 82 is one,
     * the overlong C0 AF two. */
    cr_assert_str_eq(sget(m, "content"), "a\xEF\xBF\xBD b\xEF\xBF\xBD\xEF\xBF\xBD");
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
    cr_assert_str_eq(sget(t1, "token"), "\xEF\xBF\xBD", "partial character: one U+FFFD");
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
