/* libFuzzer target: arbitrary bytes as a POST /v1/chat/completions body through
 * api_chat_req_parse() (and as the body of the other surfaces' translators:
 * /v1/completions, the Ollama API's /api/chat and /api/generate translators,
 * /v1/responses), then what the handler does with the result: the template
 * params it built, the budget, and the response builders fed with the request's
 * own strings and with the raw input bytes (invalid UTF-8 included). Any crash,
 * leak or sanitizer report is a bug. A refusal must be a one-line message whose
 * error body renders (valid UTF-8 param and message); an accepted request must
 * hold the invariants the worker relies on; every body must parse back as JSON. */
#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "api/completions.h"
#include "api/ollama.h"
#include "api/responses.h"
#include "api/text.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_VOCAB 5000

/* Bodies come from jansson, so they are JSON whenever they exist; parsing every
 * one back would make the target allocation-bound (slow under ASan), so only some
 * inputs, chosen by their bytes, pay for it. */
static bool deep;

static void must_parse(char *s)
{
    if (!s)
        abort();
    if (deep) {
        json_t *j = json_loads(s, JSON_ALLOW_NUL, NULL);
        if (!j)
            abort();
        json_decref(j);
    }
    free(s);
}

/* "data: <one line>\n\n". */
static void must_event(char *ev)
{
    if (!ev || strncmp(ev, "data: ", 6) != 0)
        abort();
    size_t n = strlen(ev);
    if (n < 8 || ev[n - 1] != '\n' || ev[n - 2] != '\n' || memchr(ev + 6, '\n', n - 8))
        abort();
    ev[n - 2] = '\0';
    must_parse(strdup(ev + 6));
    free(ev);
}

static void check_refusal(const struct api_err *bad)
{
    if (bad->error != API_ERR_BAD_REQUEST && bad->error != API_ERR_INTERNAL)
        abort();
    if (!bad->message[0] || strchr(bad->message, '\n'))
        abort();
    char *body = api_error_body(bad->error, bad->message, bad->param[0] ? bad->param : NULL);
    if (!body)
        abort();
    /* Both came through as they are (api_error_body() replaces a message that is
     * not valid UTF-8, and would drop an invalid param). */
    json_t *j = json_loads(body, 0, NULL);
    const json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *param = json_string_value(json_object_get(e, "param"));
    if (!j || !msg || strcmp(msg, bad->message) != 0 ||
        (bad->param[0] && (!param || strcmp(param, bad->param) != 0)))
        abort();
    json_decref(j);
    free(body);
}

/* What every surface's request must hold for the worker. */
static void check_common(const struct api_chat_req *r)
{
    if (r->n_stop < 0 || r->n_stop > UT_MAX_STOP || r->max_tokens < 0)
        abort();
    for (int i = 0; i < r->n_stop; i++)
        if (r->stop[i].len == 0 || !r->stop[i].text)
            abort();
    if (r->top_logprobs < 0 || r->top_logprobs > UT_MAX_TOP_LOGPROBS ||
        (!r->logprobs && r->top_logprobs))
        abort();
    if (r->sampling.n_bias < 0 || (r->sampling.n_bias && !r->sampling.bias))
        abort();
    for (int i = 0; i < r->sampling.n_bias; i++) {
        const struct eng_logit_bias *b = &r->sampling.bias[i];
        if (b->id < 0 || b->id >= N_VOCAB || !(b->bias >= -100 && b->bias <= 100))
            abort();
        if (i > 0 && r->sampling.bias[i - 1].id >= b->id) /* ascending, each id once */
            abort();
    }
    const struct eng_sampling *s = &r->sampling;
    if (!(s->temperature >= 0 && s->temperature <= 2) || !(s->top_p > 0 && s->top_p <= 1) ||
        s->top_k < 0 || !(s->min_p >= 0 && s->min_p < 1) || !(s->repetition_penalty > 0) ||
        !(s->presence_penalty >= -2 && s->presence_penalty <= 2) ||
        !(s->frequency_penalty >= -2 && s->frequency_penalty <= 2))
        abort();
    size_t stop_bytes = 0;
    for (int i = 0; i < r->n_stop; i++)
        stop_bytes += r->stop[i].len;
    if (stop_bytes > UT_MAX_STOP_BYTES || !r->model || (r->include_usage && !r->stream))
        abort();
}

static void check_request(const struct api_chat_req *r)
{
    check_common(r);
    if (r->raw)
        abort();
    switch (r->tool_choice) {
    case API_TOOL_CHOICE_NONE:
        if (r->parser_tools)
            abort();
        break;
    case API_TOOL_CHOICE_FUNCTION:
        if (json_array_size(r->parser_tools) != 1 || !r->tool_choice_name)
            abort();
        break;
    default:
        if (json_array_size(r->parser_tools) == 0)
            abort();
    }
    if (!json_is_array(r->chat.messages) || r->chat.tools != r->parser_tools ||
        !r->chat.bos_token || !r->chat.eos_token)
        abort();
    if (!r->model || (r->include_usage && !r->stream))
        abort();

    /* The template either renders or refuses with a reason. */
    char err[256], param[128];
    char *prompt = eng_chat_render(&r->chat, err, sizeof err, param, sizeof param);
    if (!prompt && !err[0])
        abort();
    free(prompt);

    int32_t b = api_chat_req_budget(r, 100, 4096);
    if (b < 1 || b > 3996 || (r->max_tokens && b > r->max_tokens))
        abort();
    if (api_chat_req_budget(r, 4096, 4096) != -ERANGE)
        abort();
    struct api_err bad;
    if (api_chat_req_check_model(r->model, r->model, NULL, 0, &bad) != 0)
        abort();
}

/* The response builders on the request's strings and on raw bytes. */
static void build_responses(const struct api_chat_req *r, const char *raw, size_t n,
                            unsigned pick)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, r ? r->model : raw, raw, raw, r && r->include_usage);
    const char *text = r && r->n_stop ? r->stop[0].text : raw;
    size_t tn = n < 8 ? n : 8; /* a token is a few bytes, each a JSON integer */
    struct api_top_logprob top[2] = {{raw + n - tn, tn, -1.0f}, {text, strlen(text) % 8, 0.0f}};
    struct api_token_logprob tok = {raw, tn, -0.5f, top, 2};
    struct api_tool_call call = {NULL, r && r->tool_choice_name ? r->tool_choice_name : raw, raw,
                                 false};
    struct api_timings t = {.prompt_n = (int32_t)n, .prompt_ms = (double)n / 3,
                            .predicted_n = 1, .predicted_ms = 0};
    struct api_chat_result res = {
        .content = text, .reasoning = raw, .tool_calls = &call, .n_tool_calls = n % 2,
        .finish = (enum api_finish_reason)(n % 3), .logprobs = true, .tokens = &tok,
        .n_tokens = 1, .usage = {(int32_t)n, 1, 0, 0}, .timings = &t,
    };
    /* One builder per input (allocations are what costs under ASan); the input's
     * bytes pick which, so every builder sees every kind of input. */
    struct api_tool_call_delta td = {0, NULL, raw, text, false};
    struct api_chat_delta d = {.content = text, .reasoning = raw, .tool_calls = &td,
                               .n_tool_calls = 1, .logprobs = true, .tokens = &tok,
                               .n_tokens = 1};
    struct api_device_error de = {(int)n, raw, raw, 1, 2, 3, (int)n - 3, 5, (int64_t)n - 2, "",
                                  1, n % 2 == 0, n % 3 == 0};
    snprintf(de.device, sizeof de.device, "%s", raw);
    char *body;
    switch (pick % 6) {
    case 0: must_parse(api_chat_completion_body(&ci, &res)); break;
    case 1: must_event(api_sse_event(api_chat_chunk_first(&ci))); break;
    case 2: must_event(api_sse_event(api_chat_chunk_delta(&ci, &d))); break;
    case 3: must_event(api_sse_event(api_chat_chunk_final(&ci, res.finish, &t))); break;
    case 4: must_event(api_sse_event(api_chat_chunk_usage(&ci, &res.usage, &t))); break;
    default:
        body = api_device_error_body(&de);
        must_event(api_sse_frame(body));
        free(body);
    }
}

/* The same bytes as a POST /v1/completions body; an accepted one is framed. */
static void fuzz_completions(const uint8_t *data, size_t size, const struct api_chat_limits *lim)
{
    json_t *body = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    if (!body)
        return;
    struct api_completion *c = NULL;
    struct api_err bad;
    if (api_completion_parse(body, lim, &c, &bad) != 0) {
        if (c)
            abort();
        check_refusal(&bad);
        json_decref(body);
        return;
    }
    json_decref(body);
    check_common(c->req);
    if (!c->req->raw || (!c->text && !c->n_ids) || (c->text && c->n_ids) ||
        c->req->top_logprobs > API_COMPLETION_MAX_LOGPROBS)
        abort();
    for (size_t i = 0; i < c->n_ids; i++)
        if (c->ids[i] < 0 || c->ids[i] >= N_VOCAB)
            abort();
    struct api_chat_format *f =
        api_completion_format_new(c->text, c->text ? c->text_len : 0, c->req->include_usage, 0,
                                  c->req->prompt_logprobs);
    if (!f)
        abort();
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, c->req->model, NULL, NULL, c->req->include_usage);
    struct api_top_logprob top = {c->req->model, strlen(c->req->model), -1.0f};
    struct api_token_logprob tok = {c->req->model, strlen(c->req->model), -0.5f, &top, 1};
    struct api_chat_delta d = {.content = c->req->model, .logprobs = c->req->logprobs,
                               .tokens = &tok, .n_tokens = 1};
    struct api_usage u = {1, 2, 0, 0};
    struct api_chat_result res = {.content = c->req->model, .logprobs = c->req->logprobs,
                                  .tokens = &tok, .n_tokens = 1, .usage = u};
    char *s = f->start(f->ctx, &ci);
    if (s)
        must_event(s);
    must_event(f->delta(f->ctx, &ci, &d));
    s = f->end(f->ctx, &ci, API_FINISH_LENGTH, &u, NULL);
    if (!s || !strstr(s, API_SSE_DONE))
        abort();
    free(s);
    must_parse(f->body(f->ctx, &ci, &res));
    api_completion_format_free(f->ctx);
    api_completion_free(c);
}

/* The same bytes as an Ollama /api/chat or /api/generate body: the translation
 * must be refused with a one-line reason or give a body the OpenAI parsers then
 * accept or refuse; the framing renders either way. */
static void fuzz_ollama(const uint8_t *data, size_t size, const struct api_chat_limits *lim)
{
    json_t *body = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    if (!body)
        return;
    bool generate = size % 2;
    enum api_ollama_kind kind;
    json_t *o = NULL;
    struct api_err bad;
    if (api_ollama_translate(body, generate, &kind, &o, &bad) != 0) {
        if (o)
            abort();
        check_refusal(&bad);
    } else if (kind == API_OLLAMA_LOAD) {
        if (o)
            abort();
    } else if (kind == API_OLLAMA_GENERATE_RAW) {
        struct api_completion *c = NULL;
        if (api_completion_parse(o, lim, &c, &bad) == 0)
            check_common(c->req);
        else
            check_refusal(&bad);
        api_completion_free(c);
    } else {
        struct api_chat_req *r = NULL;
        if (api_chat_req_parse(o, lim, &r, &bad) == 0)
            check_request(r);
        else
            check_refusal(&bad);
        api_chat_req_free(r);
    }
    json_decref(o);
    json_decref(body);
    if (size % 7 != 0)
        return;
    struct api_chat_format *f = api_ollama_format_new(generate, (const char *)"m");
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", NULL, NULL, false);
    char raw[65];
    size_t n = size < 64 ? size : 64;
    memcpy(raw, data, n);
    raw[n] = '\0';
    struct api_tool_call_delta td = {0, NULL, raw, raw, false};
    struct api_chat_delta d = {.content = raw, .reasoning = raw, .tool_calls = &td,
                               .n_tool_calls = 1};
    struct api_usage u = {1, 2, 0, 0};
    char *s = f->delta(f->ctx, &ci, &d);
    if (!s)
        abort();
    must_parse(s);
    s = f->end(f->ctx, &ci, API_FINISH_STOP, &u, NULL);
    must_parse(s);
    /* An error naming a field from the input, renamed to Ollama's names: a body,
     * and a stream's last line. */
    struct api_err fe;
    api_refuse(&fe, API_ERR_BAD_REQUEST, raw, "Invalid '%s': '%s' %s", raw, raw, raw);
    must_parse(api_ollama_err_body(&fe));
    must_parse(f->error(f->ctx, &fe, false));
    must_parse(f->error(f->ctx, &fe, true));
    api_ollama_format_free(f->ctx);
}

/* The same bytes as a /v1/responses body: translated, parsed as chat, framed. */
static void fuzz_responses(const uint8_t *data, size_t size, const struct api_chat_limits *lim)
{
    json_t *body = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    if (!body)
        return;
    json_t *chat = NULL, *echo = NULL;
    struct api_err bad;
    struct api_chat_req *r = NULL;
    if (api_responses_translate(body, &chat, &echo, &bad) != 0) {
        if (chat || echo)
            abort();
        check_refusal(&bad);
    } else if (api_chat_req_parse(chat, lim, &r, &bad) == 0) {
        check_request(r);
    } else {
        check_refusal(&bad);
    }
    json_decref(body);
    json_decref(chat);
    if (echo && size % 5 == 0) {
        struct api_chat_format *f = api_responses_format_new(echo);
        struct api_chat_ident ci;
        api_chat_ident_init(&ci, "m", NULL, NULL, false);
        struct api_tool_call_delta td = {0, NULL, "f", "{}", false};
        struct api_chat_delta d1 = {.reasoning = "r"}, d2 = {.content = "c"},
                              d3 = {.tool_calls = &td, .n_tool_calls = 1};
        struct api_usage u = {1, 2, 0, 0};
        free(f->start(f->ctx, &ci));
        free(f->delta(f->ctx, &ci, &d1));
        free(f->delta(f->ctx, &ci, &d2));
        free(f->delta(f->ctx, &ci, &d3));
        char *s = f->end(f->ctx, &ci, (enum api_finish_reason)(size % 3), &u, NULL);
        if (!s)
            abort();
        free(s);
        struct api_chat_result res = {.content = "c", .reasoning = "r", .usage = u};
        must_parse(f->body(f->ctx, &ci, &res));
        api_responses_format_free(f->ctx);
    }
    json_decref(echo);
    api_chat_req_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *raw = malloc(size + 1);
    if (!raw)
        return 0;
    memcpy(raw, data, size);
    raw[size] = '\0';
    /* The builders see at most 64 raw bytes: enough for every UTF-8 repair path,
     * and cheap enough to keep the fuzzer fast (logprob bytes are one JSON integer
     * each). */
    size_t n = strlen(raw);
    deep = size % 16 == 0;
    if (n > 64) {
        n = 64;
        raw[n] = '\0';
    }

    static const struct eng_sampling defaults = {.temperature = 1.0f, .top_p = 0.95f,
                                                 .repetition_penalty = 1.0f};
    const struct api_chat_limits lim = {.n_vocab = N_VOCAB, .defaults = &defaults};
    /* The server's own body parse (api_parse_object): a refusal, an integer past
     * int64 included (it names the field from a second parse), is one line. */
    struct api_err pbad;
    json_t *parsed = api_parse_object((const char *)data, size, &pbad);
    if (!parsed && (strchr(pbad.message, '\n') || !pbad.message[0]))
        abort();
    json_decref(parsed);
    json_t *body = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    struct api_chat_req *r = NULL;
    if (body) {
        struct api_err bad;
        if (api_chat_req_parse(body, &lim, &r, &bad) == 0) {
            json_decref(body); /* the request keeps what it borrows alive */
            body = NULL;
            check_request(r);
        } else {
            if (r)
                abort();
            check_refusal(&bad);
        }
    }
    build_responses(r, raw, n, size ? data[size - 1] + (unsigned)size : 0);
    fuzz_completions(data, size, &lim);
    fuzz_ollama(data, size, &lim);
    fuzz_responses(data, size, &lim);
    api_chat_req_free(r);
    json_decref(body);
    free(raw);
    return 0;
}
