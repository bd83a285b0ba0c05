/* POST /v1/chat/completions request validation: the top level, the helpers the
 * checks share, and the scalar parameters.
 *
 * One pass over the body in the order of OpenAI's reference, refusing at the first
 * field that is wrong. Messages are checked for the shapes OpenAI accepts and this
 * text-only model can take; what the chat template itself would still refuse (a
 * string holding NUL, say) is decided later by eng_prompt_build(), which names the
 * field the same way. The messages wording follows OpenAI's own ("Invalid type for
 * 'temperature': expected a number, but got a string instead."), so client code
 * that shows them reads the same against either server.
 *
 * The messages array is checked in chat-req-msgs.c, tools and tool_choice in
 * chat-req-tools.c; this file keeps refusing and reading one field (shared with
 * them through json-util.h), the sampling knobs, lengths, stop, logit_bias,
 * logprobs and stream, and api_chat_req_parse(), which decides the order. */
#include "api/json-util.h"
#include "util/clock.h"
#include "util/utf8.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- refusing -------------------------------------------------------------- */

int api__check_max_items(const json_t *arr, const char *param, size_t max,
                         struct api_err *bad)
{
    if (json_array_size(arr) <= max)
        return 0;
    return api__refuse(bad, param, "Invalid '%s': array too long. Expected an array with maximum "
                                   "length %zu, but got an array with length %zu instead.",
                       param, max, json_array_size(arr));
}

int api__refuse(struct api_err *bad, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    api_vrefuse(bad, API_ERR_BAD_REQUEST, param, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static int oom(struct api_err *bad)
{
    api_refuse(bad, API_ERR_INTERNAL, NULL, "out of memory while reading the request");
    return -ENOMEM;
}

/* A JSON path for `param`; one that does not fit is cut (api__refuse() then trims it to
 * a whole character). */
void api__path(char *p, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, size, fmt, ap);
    va_end(ap);
}

/* A client string quoted in a message: at most ~40 bytes, cut at a character. */
struct quote api__quoted(const char *s)
{
    struct quote q;
    size_t n = strlen(s);
    if (n <= 40) {
        memcpy(q.s, s, n + 1);
        return q;
    }
    size_t cut = ut_utf8_char_start(s, 40);
    memcpy(q.s, s, cut);
    memcpy(q.s + cut, "…", sizeof "…");
    return q;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

int api__wrong_type(struct api_err *bad, const char *param, const char *expected,
                    const json_t *v)
{
    return api__refuse(bad, param, "Invalid type for '%s': expected %s, but got %s instead.", param,
                       expected, type_name(v));
}

/* ---- scalar fields ----------------------------------------------------------- */

/* The field, or NULL when absent or null (OpenAI treats an explicit null as not
 * given for every optional parameter). */
const json_t *api__opt(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

int api__get_bool(const json_t *obj, const char *key, const char *param, bool *out,
                  struct api_err *bad)
{
    const json_t *v = api__opt(obj, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return api__wrong_type(bad, param, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

int api__get_string(const json_t *obj, const char *key, const char *param, const char **out,
                    struct api_err *bad)
{
    const json_t *v = api__opt(obj, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return api__wrong_type(bad, param, "a string", v);
    *out = json_string_value(v);
    return 0;
}

/* A number in a range; each end is inclusive unless its *_open flag says not. */
struct range {
    double lo, hi;
    bool lo_open, hi_open;
};

static int get_number(const json_t *obj, const char *key, struct range r, float *out,
                      struct api_err *bad)
{
    const json_t *v = api__opt(obj, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return api__wrong_type(bad, key, "a number", v);
    double x = json_number_value(v);
    bool below = r.lo_open ? !(x > r.lo) : !(x >= r.lo);
    bool above = r.hi_open ? !(x < r.hi) : !(x <= r.hi);
    if (below || above) {
        char want[64];
        if (isinf(r.hi))
            snprintf(want, sizeof want, "a number %s %g", r.lo_open ? "above" : "of at least",
                     r.lo);
        else
            snprintf(want, sizeof want, "a number in %c%g, %g%c", r.lo_open ? '(' : '[', r.lo,
                     r.hi, r.hi_open ? ')' : ']');
        return api__refuse(bad, key, "Invalid '%s': expected %s, but got %g instead.", key, want,
                           x);
    }
    /* In float, a value just inside an open end may round onto it (top_p 1e-50 is
     * 0.0f), and a huge one overflows: keep the float inside the range too. */
    float f = (float)x;
    if (r.lo_open && !(f > r.lo))
        f = nextafterf((float)r.lo, INFINITY);
    if (r.hi_open && !(f < r.hi))
        f = nextafterf((float)r.hi, -INFINITY);
    if (isinf(f))
        f = f > 0 ? FLT_MAX : -FLT_MAX;
    *out = f;
    return 0;
}

/* An integer (a JSON number with no fractional part: 5 and 5.0 alike) of at least
 * `lo` and at most `hi`. *present says whether it was given. */
static int get_integer(const json_t *obj, const char *key, long long lo, long long hi,
                       long long *out, bool *present, struct api_err *bad)
{
    const json_t *v = api__opt(obj, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9.2e18) {
        x = (long long)json_real_value(v);
    } else {
        return api__wrong_type(bad, key, "an integer", v);
    }
    if (x < lo)
        return api__refuse(bad, key, "Invalid '%s': integer below minimum value. Expected a value "
                                     ">= %lld, but got %lld instead.",
                           key, lo, x);
    if (x > hi)
        return api__refuse(bad, key, "Invalid '%s': integer above maximum value. Expected a value "
                                     "<= %lld, but got %lld instead.",
                           key, hi, x);
    *out = x;
    return 0;
}

/* A token budget: an integer >= 1, or -1 for "until the context ends" (Open WebUI's
 * "no limit", llama.cpp's n_predict -1), stored as 0. 0 itself is refused, as OpenAI
 * does (minimum 1): a chat answer of no tokens has no use, and reading 0 as "no
 * limit" would turn a client's mistake into the longest possible generation. */
int api__get_max_tokens(const json_t *obj, const char *key, long long *out, bool *present,
                        struct api_err *bad)
{
    long long x = 0;
    if (get_integer(obj, key, -1, LLONG_MAX, &x, present, bad))
        return -EINVAL;
    if (*present && x == 0)
        return api__refuse(bad, key, "Invalid '%s': integer below minimum value. Expected a value "
                                     ">= 1 (or -1: until the context ends), but got 0 instead.",
                           key);
    *out = x < 0 ? 0 : x;
    return 0;
}

bool api__str_is(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0 &&
           json_string_length(v) == strlen(s);
}

/* ---- stop and logit_bias ------------------------------------------------------ */

/* One stop string, kept whole and by length: a JSON "\u0000" inside is a NUL byte
 * of the stop string and is matched as one (engine/gen.h), never a cut. */
static int add_stop(const json_t *s, const char *p, struct api_chat_req *r, size_t *total,
                    struct api_err *bad)
{
    if (!json_is_string(s))
        return api__wrong_type(bad, p, "a string", s);
    size_t len = json_string_length(s);
    if (len == 0)
        return api__refuse(bad, p, "Invalid '%s': a stop sequence must not be empty.", p);
    *total += len;
    if (*total > UT_MAX_STOP_BYTES)
        return api__refuse(bad, p, "Invalid '%s': the stop sequences are %zu bytes or more in all; "
                                   "at most %d are accepted.",
                           p, *total, UT_MAX_STOP_BYTES);
    r->stop[r->n_stop++] = (struct api_chat_stop){json_string_value(s), len};
    return 0;
}

/* A string or up to UT_MAX_STOP strings (OpenAI allows 4; llama.cpp and Open WebUI
 * send more), UT_MAX_STOP_BYTES in all. */
static int check_stop(const json_t *body, struct api_chat_req *r, struct api_err *bad)
{
    const json_t *stop = api__opt(body, "stop");
    size_t total = 0;
    if (!stop)
        return 0;
    if (json_is_string(stop))
        return add_stop(stop, "stop", r, &total, bad);
    if (!json_is_array(stop))
        return api__wrong_type(bad, "stop", "a string or an array of strings", stop);
    if (api__check_max_items(stop, "stop", UT_MAX_STOP, bad))
        return -EINVAL;
    size_t i;
    const json_t *s;
    json_array_foreach(stop, i, s) {
        char p[32];
        api__path(p, sizeof p, "stop[%zu]", i);
        if (add_stop(s, p, r, &total, bad))
            return -EINVAL;
    }
    return 0;
}

struct order {
    struct eng_logit_bias b;
    int pos;
};

static int by_id_then_position(const void *a, const void *b)
{
    const struct order *x = a, *y = b;
    if (x->b.id != y->b.id)
        return x->b.id < y->b.id ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* {"<token id>": bias, …}: ids in decimal below n_vocab, biases in [-100, 100]. The
 * same id written twice ("7" and "007") keeps the last value. */
static int check_logit_bias(const json_t *body, int32_t n_vocab, struct api_chat_req *r,
                            struct api_err *bad)
{
    const json_t *lb = api__opt(body, "logit_bias");
    if (!lb)
        return 0;
    if (!json_is_object(lb))
        return api__wrong_type(bad, "logit_bias", "an object mapping token ids to numbers", lb);
    size_t n = json_object_size(lb);
    if (n == 0)
        return 0;
    r->bias_ = calloc(n, sizeof *r->bias_);
    if (!r->bias_)
        return oom(bad);
    const char *key;
    const json_t *v;
    int nb = 0;
    json_object_foreach((json_t *)lb, key, v) {
        char p[128];
        api__path(p, sizeof p, "logit_bias.%s", key);
        size_t len = strlen(key);
        bool digits = len > 0 && strspn(key, "0123456789") == len;
        long long id = -1;
        if (digits) {
            errno = 0;
            id = strtoll(key, NULL, 10);
            if (errno)
                id = LLONG_MAX;
        }
        if (!digits || id >= n_vocab)
            return api__refuse(bad, p, "Invalid key in 'logit_bias': '%s' is not a token id "
                                       "(0 to %d).",
                               api__quoted(key).s, n_vocab - 1);
        if (!json_is_number(v))
            return api__wrong_type(bad, p, "a number", v);
        double x = json_number_value(v);
        if (!(x >= -100 && x <= 100))
            return api__refuse(bad, p, "Invalid '%s': expected a number between -100 and 100, but "
                                       "got %g instead.",
                               p, x);
        r->bias_[nb++] = (struct eng_logit_bias){(int32_t)id, (float)x};
    }
    /* Ascending ids, one entry each (the last one written wins): a stable sort by
     * id, then keep the last of each run. n log n, whatever the client sends. */
    struct order *o = malloc((size_t)nb * sizeof *o);
    if (!o)
        return oom(bad);
    for (int i = 0; i < nb; i++)
        o[i] = (struct order){r->bias_[i], i};
    qsort(o, (size_t)nb, sizeof *o, by_id_then_position);
    int m = 0;
    for (int i = 0; i < nb; i++) {
        if (i + 1 < nb && o[i + 1].b.id == o[i].b.id)
            continue;
        r->bias_[m++] = o[i].b;
    }
    free(o);
    r->sampling.bias = r->bias_;
    r->sampling.n_bias = m;
    return 0;
}

/* ---- the rest ------------------------------------------------------------------ */

static uint64_t random_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) == (ssize_t)sizeof s)
        return s;
    /* No entropy yet (early boot): a clock-based seed is still a fresh one. */
    s = ut_now_ns() ^ (uint64_t)(uintptr_t)&s;
    s ^= s >> 31;
    s *= 0x9E3779B97F4A7C15u;
    return s ^ (s >> 29);
}

static int check_stream(const json_t *body, struct api_chat_req *r, struct api_err *bad)
{
    if (api__get_bool(body, "stream", "stream", &r->stream, bad))
        return -EINVAL;
    const json_t *so = api__opt(body, "stream_options");
    if (!so)
        return 0;
    if (!json_is_object(so))
        return api__wrong_type(bad, "stream_options", "an object", so);
    if (!r->stream)
        return api__refuse(bad, "stream_options", "The 'stream_options' parameter is only allowed "
                                                  "when 'stream' is enabled.");
    return api__get_bool(so, "include_usage", "stream_options.include_usage", &r->include_usage,
                         bad);
}

static int check_sampling(const json_t *body, struct api_chat_req *r,
                          struct api_err *bad)
{
    struct eng_sampling *s = &r->sampling;
    if (get_number(body, "temperature", (struct range){0, 2, false, false}, &s->temperature,
                   bad) ||
        get_number(body, "top_p", (struct range){0, 1, true, false}, &s->top_p, bad) ||
        get_number(body, "min_p", (struct range){0, 1, false, true}, &s->min_p, bad) ||
        get_number(body, "presence_penalty", (struct range){-2, 2, false, false},
                   &s->presence_penalty, bad) ||
        get_number(body, "frequency_penalty", (struct range){-2, 2, false, false},
                   &s->frequency_penalty, bad) ||
        get_number(body, "repetition_penalty", (struct range){0, INFINITY, true, false},
                   &s->repetition_penalty, bad))
        return -EINVAL;
    long long v;
    bool given;
    if (get_integer(body, "top_k", 0, LLONG_MAX, &v, &given, bad))
        return -EINVAL;
    if (given)
        s->top_k = v > INT_MAX ? INT_MAX : (int)v;
    if (get_integer(body, "seed", LLONG_MIN, LLONG_MAX, &v, &r->has_seed, bad))
        return -EINVAL;
    s->seed = r->has_seed ? (uint64_t)v : random_seed();
    return 0;
}

static int check_lengths(const json_t *body, struct api_chat_req *r,
                         struct api_err *bad)
{
    long long v = 0, w = 0;
    bool mct, mt;
    if (api__get_max_tokens(body, "max_completion_tokens", &v, &mct, bad) ||
        api__get_max_tokens(body, "max_tokens", &w, &mt, bad))
        return -EINVAL;
    /* max_tokens is OpenAI's deprecated name; the newer one wins when both are set.
     * Neither: the pack's default, which api__req_new put there. */
    long long m = mct ? v : mt ? w : r->max_tokens;
    r->max_tokens = m > INT32_MAX ? INT32_MAX : (int32_t)m;

    const json_t *n = api__opt(body, "n");
    r->n = 1;
    if (n) {
        long long k = 0;
        if (get_integer(body, "n", LLONG_MIN, LLONG_MAX, &k, NULL, bad))
            return -EINVAL;
        if (k < 1 || k > UT_MAX_CHOICES)
            return api__refuse(bad, "n", "Invalid 'n': minicpmd generates 1 to %d choices per "
                                         "request (got %lld).",
                               UT_MAX_CHOICES, k);
        r->n = (int)k;
    }
    return 0;
}

static int check_logprobs(const json_t *body, struct api_chat_req *r,
                          struct api_err *bad)
{
    long long k = 0;
    bool given;
    if (api__get_bool(body, "logprobs", "logprobs", &r->logprobs, bad) ||
        get_integer(body, "top_logprobs", 0, UT_MAX_TOP_LOGPROBS, &k, &given, bad))
        return -EINVAL;
    if (given && !r->logprobs)
        return api__refuse(bad, "top_logprobs", "Invalid 'top_logprobs': it requires 'logprobs' to "
                                                "be true.");
    r->top_logprobs = (int)k;
    return 0;
}

/* What the template is given: the messages, add_generation_prompt (default true),
 * chat_template_kwargs.enable_thinking (true / false; absent or null: the
 * template's default) and the tools the parser will recognise. Read here once;
 * the prompt builder and /apply-template take r->chat as it is. */
/* reasoning_effort (OpenAI; Open WebUI sends it): "none" and "minimal" turn
 * MiniCPM5's thinking off, "low", "medium" and "high" on (the model has no
 * budget in between). *out is left alone when absent. */
int api__reasoning_effort(const json_t *v, const char *param, enum eng_thinking *out,
                          struct api_err *bad)
{
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return api__wrong_type(bad, param, "a string", v);
    static const char *const off[] = {"none", "minimal"}, *const on[] = {"low", "medium", "high"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        if (api__str_is(v, off[i])) {
            *out = ENG_THINKING_OFF;
            return 0;
        }
    for (size_t i = 0; i < sizeof on / sizeof *on; i++)
        if (api__str_is(v, on[i])) {
            *out = ENG_THINKING_ON;
            return 0;
        }
    return api__refuse(bad, param, "Invalid value for '%s': '%s' is not one of 'none', 'minimal', "
                                   "'low', 'medium', 'high'.",
                       param, api__quoted(json_string_value(v)).s);
}

static int check_template_params(const json_t *body, const struct api_chat_limits *lim,
                                 struct api_chat_req *r, struct api_err *bad)
{
    bool agp = true;
    if (api__get_bool(body, "add_generation_prompt", "add_generation_prompt", &agp, bad))
        return -EINVAL;
    r->chat = (struct eng_chat_params){
        .messages = json_object_get(body, "messages"),
        .tools = r->parser_tools,
        .add_generation_prompt = agp,
        .thinking = lim ? lim->thinking : ENG_THINKING_UNSET,
        .bos_token = "<s>",
        .eos_token = "</s>",
    };
    /* An assistant message last is continued (prefill), as llama.cpp does, with
     * transformers' continue_final_message semantics; vLLM's field says so
     * explicitly (engine/template.h, eng_chat_continues). */
    r->chat.continue_final = eng_chat_continues(r->chat.messages, agp);
    if (api__get_bool(body, "continue_final_message", "continue_final_message",
                      &r->chat.continue_final, bad))
        return -EINVAL;
    /* Precedence (README): chat_template_kwargs.enable_thinking, then
     * reasoning_effort, then the daemon's --thinking. */
    if (api__reasoning_effort(api__opt(body, "reasoning_effort"), "reasoning_effort",
                              &r->chat.thinking, bad))
        return -EINVAL;
    const json_t *kw = api__opt(body, "chat_template_kwargs");
    if (!kw)
        return 0;
    if (!json_is_object(kw))
        return api__wrong_type(bad, "chat_template_kwargs", "an object", kw);
    if (!api__opt(kw, "enable_thinking"))
        return 0;
    bool on = false;
    if (api__get_bool(kw, "enable_thinking", "chat_template_kwargs.enable_thinking", &on, bad))
        return -EINVAL;
    r->chat.thinking = on ? ENG_THINKING_ON : ENG_THINKING_OFF;
    return 0;
}

struct api_chat_req *api__req_new(const json_t *body, const struct api_chat_limits *lim,
                                  struct api_err *bad)
{
    struct api_chat_req *r = calloc(1, sizeof *r);
    if (!r) {
        oom(bad);
        return NULL;
    }
    r->body_ = json_incref((json_t *)body);
    if (lim && lim->defaults) {
        r->sampling = *lim->defaults;
    } else {
        r->sampling = (struct eng_sampling){.temperature = 1.0f, .top_p = 1.0f,
                                            .repetition_penalty = 1.0f};
    }
    r->sampling.bias = NULL;
    r->sampling.n_bias = 0;
    r->chat.thinking = lim ? lim->thinking : ENG_THINKING_UNSET;
    r->max_tokens = lim && lim->max_tokens > 0 ? lim->max_tokens : 0;
    return r;
}

int api__check_generation(const json_t *body, const struct api_chat_limits *lim,
                          struct api_chat_req *r, struct api_err *bad)
{
    int32_t n_vocab = lim && lim->n_vocab > 0 ? lim->n_vocab : INT32_MAX;
    if (check_stream(body, r, bad) || check_sampling(body, r, bad) || check_stop(body, r, bad) ||
        check_logit_bias(body, n_vocab, r, bad) ||
        api__get_string(body, "user", "user", &r->user, bad))
        return -EINVAL;
    return 0;
}

int api__oom(struct api_err *bad) { return oom(bad); }

int api__set(json_t *o, const char *key, json_t *v, struct api_err *bad)
{
    return v && json_object_set_new(o, key, v) == 0 ? 0 : oom(bad);
}

int api__copy(json_t *o, const char *key, const json_t *v, struct api_err *bad)
{
    return v ? api__set(o, key, json_deep_copy(v), bad) : 0;
}

int api__append(json_t *a, json_t *v, struct api_err *bad)
{
    return v && json_array_append_new(a, v) == 0 ? 0 : oom(bad);
}

int api__get_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out,
                 bool *present, struct api_err *bad)
{
    return get_integer(obj, key, lo, hi, out, present, bad);
}

int api_chat_req_parse(const json_t *body, const struct api_chat_limits *lim,
                       struct api_chat_req **out, struct api_err *bad)
{
    *out = NULL;
    if (!json_is_object(body))
        return api__refuse(bad, NULL, "The request body must be a JSON object.");
    struct api_chat_req *r = api__req_new(body, lim, bad);
    if (!r)
        return -ENOMEM;
    int32_t n_vocab = lim && lim->n_vocab > 0 ? lim->n_vocab : INT32_MAX;

    const json_t *model = api__opt(body, "model");
    if (!model && lim && lim->template_only) {
        r->model = NULL;
    } else if (!model) {
        api__refuse(bad, "model", "Missing required parameter: 'model'.");
        goto err;
    } else if (!json_is_string(model)) {
        api__wrong_type(bad, "model", "a string", model);
        goto err;
    } else {
        r->model = json_string_value(model);
    }

    const json_t *tools = api__opt(body, "tools");
    size_t named = 0;
    if (api__check_messages(body, bad) || check_stream(body, r, bad) ||
        check_lengths(body, r, bad) || check_sampling(body, r, bad) ||
        check_stop(body, r, bad) || check_logit_bias(body, n_vocab, r, bad) ||
        check_logprobs(body, r, bad) || (tools && api__check_tools(tools, bad)) ||
        api__check_tool_choice(body, tools, r, &named, bad) ||
        api__check_format(body, tools, r, lim, bad) ||
        api__get_string(body, "user", "user", &r->user, bad))
        goto err;

    if (r->tool_choice == API_TOOL_CHOICE_FUNCTION) {
        /* Only the named function is shown and recognised: the closest this
         * sampler-only engine comes to forcing it. */
        r->parser_tools_ = json_array();
        if (!r->parser_tools_ ||
            json_array_append(r->parser_tools_, json_array_get(tools, named)) != 0) {
            oom(bad);
            goto err;
        }
        r->parser_tools = r->parser_tools_;
    } else if (r->tool_choice != API_TOOL_CHOICE_NONE) {
        r->parser_tools = tools;
    }
    if (check_template_params(body, lim, r, bad))
        goto err;
    *out = r;
    return 0;
err:
    api_chat_req_free(r);
    return -EINVAL;
}

void api_chat_req_free(struct api_chat_req *r)
{
    if (!r)
        return;
    free(r->bias_);
    eng_grammar_free(r->grammar);
    json_decref(r->parser_tools_);
    json_decref(r->body_);
    free(r);
}

int api_chat_req_check_model(const char *model, const char *served_id,
                             const char *const *aliases, size_t n_aliases,
                             struct api_err *bad)
{
    if (model && served_id && strcmp(model, served_id) == 0)
        return 0;
    for (size_t i = 0; model && i < n_aliases; i++)
        if (aliases[i] && strcmp(model, aliases[i]) == 0)
            return 0;
    api_refuse(bad, API_ERR_MODEL_NOT_FOUND, "model",
               "The model '%s' does not exist or you do not have access to it (GET /v1/models "
               "lists the models).",
               api__quoted(model ? model : "").s);
    return -ENOENT;
}

int32_t api_chat_req_budget(const struct api_chat_req *r, int32_t n_prompt, int32_t n_ctx)
{
    if (n_prompt < 0 || n_ctx <= 0 || n_prompt >= n_ctx)
        return -ERANGE;
    int32_t left = n_ctx - n_prompt;
    return r && r->max_tokens > 0 && r->max_tokens < left ? r->max_tokens : left;
}
