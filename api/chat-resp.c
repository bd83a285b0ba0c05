/* chat.completion, chat.completion.chunk, SSE framing and the generation-time
 * errors. Every object is built with jansson and every string goes through
 * text(), so a body is always valid JSON and valid UTF-8 whatever the model
 * produced. */
#include "api/chat-resp.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- ids ----------------------------------------------------------------- */

static const char ALNUM[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/* splitmix64, for when the kernel has no entropy to give yet. */
static uint64_t fallback_random(void)
{
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* n random characters from ALNUM, unbiased (bytes >= 248 are redrawn). */
void api_random_alnum(char *out, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char buf[64];
        if (getrandom(buf, sizeof buf, GRND_NONBLOCK) != (ssize_t)sizeof buf)
            for (size_t k = 0; k < sizeof buf; k += 8) {
                uint64_t r = fallback_random();
                memcpy(buf + k, &r, 8);
            }
        for (size_t k = 0; k < sizeof buf && i < n; k++)
            if (buf[k] < 248)
                out[i++] = ALNUM[buf[k] % 62];
    }
    out[n] = '\0';
}

void api_tool_call_id(char out[API_TOOL_CALL_ID_SIZE])
{
    memcpy(out, "call_", 5);
    api_random_alnum(out + 5, API_TOOL_CALL_ID_SIZE - 6);
}

/* `s` with everything outside [A-Za-z0-9._+-] as '_', appended at out[*at]. */
static void put_token(char *out, size_t size, size_t *at, const char *s)
{
    for (; s && *s && *at + 1 < size; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '+' || c == '-';
        out[(*at)++] = ok ? c : '_';
    }
    out[*at] = '\0';
}

void api_chat_ident_init(struct api_chat_ident *ci, const char *model, const char *version,
                         const char *device, bool include_usage)
{
    memset(ci, 0, sizeof *ci);
    memcpy(ci->id, "chatcmpl-", 9);
    api_random_alnum(ci->id + 9, 32);
    ci->created = (int64_t)time(NULL);
    ci->model = model;
    ci->include_usage = include_usage;
    size_t at = 0;
    put_token(ci->fingerprint, sizeof ci->fingerprint, &at, "minicpmd-");
    put_token(ci->fingerprint, sizeof ci->fingerprint, &at, version ? version : "unknown");
    put_token(ci->fingerprint, sizeof ci->fingerprint, &at, "-");
    put_token(ci->fingerprint, sizeof ci->fingerprint, &at, device ? device : "unknown");
}

const char *api_finish_reason_name(enum api_finish_reason f)
{
    switch (f) {
    case API_FINISH_STOP: return "stop";
    case API_FINISH_LENGTH: return "length";
    case API_FINISH_TOOL_CALLS: return "tool_calls";
    }
    return "stop";
}

/* ---- JSON values ----------------------------------------------------------- */

/* A JSON string of n bytes: as they are when valid UTF-8, else repaired by
 * util/utf8.h's policy (one U+FFFD per maximal invalid subpart), the same as the
 * streamed text, so a logprob's token reads as the content does. NUL bytes are
 * kept (jansson escapes them as \u0000). */
static json_t *text_n(const char *s, size_t n)
{
    if (!s)
        s = "", n = 0;
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    ut_buf b = {0};
    if (ut_utf8_repair(&b, s, n, false, NULL) == 0)
        j = json_stringn(b.p, b.n);
    ut_buf_free(&b);
    return j;
}

static json_t *text(const char *s) { return text_n(s, s ? strlen(s) : 0); }

static json_t *bytes_json(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((unsigned char)s[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *real(double x) { return json_real(isfinite(x) ? x : 0.0); }

static json_t *logprob_value(float lp) { return json_real(isfinite(lp) ? lp : -9999.0); }

/* Sets key to `v` (stolen); a NULL `v` (out of memory) fails the whole object. */
static bool put(json_t *obj, const char *key, json_t *v)
{
    return v && json_object_set_new(obj, key, v) == 0;
}

/* ---- logprobs, usage, timings -------------------------------------------------- */

static json_t *token_logprob_json(const struct api_token_logprob *t)
{
    json_t *o = json_object(), *top = json_array();
    if (!put(o, "top_logprobs", top) || !put(o, "token", text_n(t->token, t->len)) ||
        !put(o, "logprob", logprob_value(t->logprob)) ||
        !put(o, "bytes", bytes_json(t->token, t->len)))
        goto fail;
    for (int k = 0; k < t->n_top; k++) {
        const struct api_top_logprob *a = &t->top[k];
        json_t *e = json_object();
        if (json_array_append_new(top, e) != 0 || !put(e, "token", text_n(a->token, a->len)) ||
            !put(e, "logprob", logprob_value(a->logprob)) ||
            !put(e, "bytes", bytes_json(a->token, a->len)))
            goto fail;
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

/* {"content":[…]} when asked, else null. */
static json_t *logprobs_json(bool asked, const struct api_token_logprob *tokens, size_t n)
{
    if (!asked)
        return json_null();
    json_t *content = json_array();
    for (size_t i = 0; content && i < n; i++)
        if (json_array_append_new(content, token_logprob_json(&tokens[i])) != 0) {
            json_decref(content);
            return NULL;
        }
    return content ? json_pack("{s:o, s:n}", "content", content, "refusal") : NULL;
}

static json_t *usage_json(const struct api_usage *u)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i}}", "prompt_tokens", (int)u->prompt_tokens,
                     "completion_tokens", (int)u->completion_tokens, "total_tokens",
                     (int)u->prompt_tokens + (int)u->completion_tokens, "prompt_tokens_details",
                     "cached_tokens", (int)u->cached_tokens, "completion_tokens_details",
                     "reasoning_tokens", (int)u->reasoning_tokens);
}

json_t *api_timings_json(const struct api_timings *t)
{
    double pn = t->prompt_n, gn = t->predicted_n;
    json_t *o = json_pack("{s:i, s:i, s:o, s:o, s:o, s:i, s:o, s:o, s:o}", "cache_n", (int)t->cache_n,
                     "prompt_n", (int)t->prompt_n, "prompt_ms", real(t->prompt_ms),
                     "prompt_per_token_ms", real(pn > 0 ? t->prompt_ms / pn : 0),
                     "prompt_per_second", real(t->prompt_ms > 0 ? 1e3 * pn / t->prompt_ms : 0),
                     "predicted_n", (int)t->predicted_n, "predicted_ms", real(t->predicted_ms),
                     "predicted_per_token_ms", real(gn > 0 ? t->predicted_ms / gn : 0),
                     "predicted_per_second",
                     real(t->predicted_ms > 0 ? 1e3 * gn / t->predicted_ms : 0));
    if (o && t->prompt_host_ms > 0 &&
        (json_object_set_new(o, "prompt_device_ms", real(t->prompt_device_ms)) ||
         json_object_set_new(o, "prompt_host_cpu_ms", real(t->prompt_host_ms)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- chat.completion ------------------------------------------------------------- */

static json_t *tool_call_json(const struct api_tool_call *c)
{
    char id[API_TOOL_CALL_ID_SIZE];
    if (!c->id)
        api_tool_call_id(id);
    return json_pack("{s:o, s:s, s:{s:o, s:o}}", "id", text(c->id ? c->id : id), "type",
                     "function", "function", "name", text(c->name), "arguments",
                     text(c->arguments ? c->arguments : "{}"));
}

static json_t *message_json(const struct api_chat_result *r)
{
    json_t *m = json_pack("{s:s}", "role", "assistant");
    if (!m)
        return NULL;
    bool has_text = r->content && r->content[0];
    if (!put(m, "content", has_text || r->n_tool_calls == 0 ? text(r->content) : json_null()))
        goto fail;
    if (r->reasoning && r->reasoning[0] && !put(m, "reasoning_content", text(r->reasoning)))
        goto fail;
    if (r->n_tool_calls) {
        json_t *calls = json_array();
        if (!put(m, "tool_calls", calls))
            goto fail;
        for (size_t i = 0; i < r->n_tool_calls; i++)
            if (json_array_append_new(calls, tool_call_json(&r->tool_calls[i])) != 0)
                goto fail;
    }
    return m;
fail:
    json_decref(m);
    return NULL;
}

/* id, object, created, model, system_fingerprint: the head of every object. */
static json_t *head(const struct api_chat_ident *ci, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:o, s:s}", "id", ci->id, "object", object, "created",
                     (json_int_t)ci->created, "model", text(ci->model), "system_fingerprint",
                     ci->fingerprint);
}

static json_t *choice_json(int index, const struct api_chat_result *r)
{
    return json_pack("{s:i, s:o, s:o, s:s}", "index", index, "message", message_json(r),
                     "logprobs", logprobs_json(r->logprobs, r->tokens, r->n_tokens),
                     "finish_reason", api_finish_reason_name(r->finish));
}

json_t *api_chat_completion_json(const struct api_chat_ident *ci, const struct api_chat_result *r)
{
    json_t *o = head(ci, "chat.completion");
    json_t *choices = json_array();
    if (!put(o, "choices", choices) ||
        json_array_append_new(choices, choice_json(ci->index, r)) != 0)
        goto fail;
    for (size_t i = 0; i < r->n_others; i++)
        if (json_array_append_new(choices, choice_json(ci->index + 1 + (int)i, &r->others[i])))
            goto fail;
    if (!put(o, "usage", usage_json(&r->usage)) ||
        (r->timings && !put(o, "timings", api_timings_json(r->timings))))
        goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

char *api_chat_completion_body(const struct api_chat_ident *ci, const struct api_chat_result *r)
{
    json_t *o = api_chat_completion_json(ci, r);
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

void api_usage_add_choice(struct api_usage *sum, const struct api_usage *choice)
{
    sum->completion_tokens += choice->completion_tokens;
    sum->reasoning_tokens += choice->reasoning_tokens;
}

char *api_chat_stream_tail(const struct api_chat_ident *ci, const struct api_usage *u)
{
    char *usage = ci->include_usage ? api_sse_event(api_chat_chunk_usage(ci, u, NULL)) : NULL;
    if (ci->include_usage && !usage)
        return NULL;
    size_t n = usage ? strlen(usage) : 0;
    char *s = malloc(n + sizeof API_SSE_DONE);
    if (s) {
        memcpy(s, usage ? usage : "", n);
        memcpy(s + n, API_SSE_DONE, sizeof API_SSE_DONE);
    }
    free(usage);
    return s;
}

/* ---- chat.completion.chunk ---------------------------------------------------------- */

/* A chunk with one choice {index 0, delta, logprobs, finish_reason}; steals delta
 * and logprobs. `finish` NULL: finish_reason null. */
static json_t *chunk(const struct api_chat_ident *ci, json_t *delta, json_t *logprobs,
                     const char *finish)
{
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", ci->index, "delta", delta,
                               "logprobs",
                               logprobs ? logprobs : json_null(), "finish_reason",
                               finish ? json_string(finish) : json_null());
    json_t *o = head(ci, "chat.completion.chunk");
    if (!put(o, "choices", choice ? json_pack("[o]", choice) : NULL) ||
        (ci->include_usage && !put(o, "usage", json_null()))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *api_chat_chunk_first(const struct api_chat_ident *ci)
{
    return chunk(ci, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL);
}

static json_t *tool_call_delta_json(const struct api_tool_call_delta *t)
{
    json_t *o = json_pack("{s:i}", "index", t->index);
    json_t *fn = json_object();
    if (!put(o, "function", fn))
        goto fail;
    if (t->id || t->name) {
        char id[API_TOOL_CALL_ID_SIZE];
        if (!t->id)
            api_tool_call_id(id);
        if (!put(o, "id", text(t->id ? t->id : id)) || !put(o, "type", json_string("function")) ||
            !put(fn, "name", text(t->name)))
            goto fail;
    }
    if (!put(fn, "arguments", text(t->arguments)))
        goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

json_t *api_chat_chunk_delta(const struct api_chat_ident *ci, const struct api_chat_delta *d)
{
    json_t *delta = json_object();
    if (!delta)
        return NULL;
    if ((d->content && !put(delta, "content", text(d->content))) ||
        (d->reasoning && !put(delta, "reasoning_content", text(d->reasoning))))
        goto fail;
    if (d->n_tool_calls) {
        json_t *calls = json_array();
        if (!put(delta, "tool_calls", calls))
            goto fail;
        for (size_t i = 0; i < d->n_tool_calls; i++)
            if (json_array_append_new(calls, tool_call_delta_json(&d->tool_calls[i])) != 0)
                goto fail;
    }
    json_t *lp = logprobs_json(d->logprobs, d->tokens, d->n_tokens);
    if (!lp)
        goto fail;
    return chunk(ci, delta, lp, NULL);
fail:
    json_decref(delta);
    return NULL;
}

json_t *api_chat_chunk_final(const struct api_chat_ident *ci, enum api_finish_reason finish,
                             const struct api_timings *timings)
{
    json_t *o = chunk(ci, json_object(), NULL, api_finish_reason_name(finish));
    if (o && timings && !put(o, "timings", api_timings_json(timings))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *api_chat_chunk_usage(const struct api_chat_ident *ci, const struct api_usage *u,
                             const struct api_timings *timings)
{
    json_t *o = head(ci, "chat.completion.chunk");
    if (!o || !put(o, "choices", json_array()) || !put(o, "usage", usage_json(u)) ||
        (timings && !put(o, "timings", api_timings_json(timings)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- SSE ------------------------------------------------------------------------------ */

char *api_sse_frame(const char *data)
{
    if (!data)
        return NULL;
    /* Each line of data becomes its own "data: " line; the client joins them with
     * "\n" again. Compact JSON has no raw newline, so that is one line. */
    size_t lines = 1, n = strlen(data);
    for (size_t i = 0; i < n; i++)
        if (data[i] == '\n')
            lines++;
    char *out = malloc(n + lines * 7 + 2);
    if (!out)
        return NULL;
    size_t o = 0;
    memcpy(out, "data: ", 6);
    o = 6;
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\r' && (i + 1 == n || data[i + 1] != '\n'))
            continue; /* a lone CR would end the line early for an SSE parser */
        out[o++] = data[i];
        if (data[i] == '\n') {
            memcpy(out + o, "data: ", 6);
            o += 6;
        }
    }
    out[o++] = '\n';
    out[o++] = '\n';
    out[o] = '\0';
    return out;
}

char *api_err_sse(const struct api_err *e)
{
    char *body = api_err_body(e);
    char *f = api_sse_frame(body);
    free(body);
    return f;
}

char *api_sse_event(json_t *obj)
{
    if (!obj)
        return NULL;
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    char *f = api_sse_frame(s);
    free(s);
    return f;
}

/* ---- errors ----------------------------------------------------------------------------- */

void api_context_length_err(struct api_err *e, int32_t n_ctx, int32_t n_prompt,
                            int32_t n_completion)
{
    if (n_completion > 0)
        api_refuse(e, API_ERR_CONTEXT_LENGTH, "messages",
                   "This model's maximum context length is %d tokens. However, you requested "
                   "%lld tokens (%d in the messages, %d in the completion). Please reduce the "
                   "length of the messages or completion.",
                   (int)n_ctx, (long long)n_prompt + n_completion, (int)n_prompt,
                   (int)n_completion);
    else
        api_refuse(e, API_ERR_CONTEXT_LENGTH, "messages",
                   "This model's maximum context length is %d tokens. However, your messages "
                   "resulted in %d tokens. Please reduce the length of the messages.",
                   (int)n_ctx, (int)n_prompt);
}

char *api_context_length_body(int32_t n_ctx, int32_t n_prompt, int32_t n_completion)
{
    struct api_err e;
    api_context_length_err(&e, n_ctx, n_prompt, n_completion);
    return api_err_body(&e);
}

void api_server_busy_err(struct api_err *e, int queue_limit)
{
    api_refuse(e, API_ERR_BUSY, NULL,
               "The server is busy: %d requests are already waiting, the most it queues. Please "
               "retry later.",
               queue_limit);
}

char *api_server_busy_body(int queue_limit)
{
    struct api_err e;
    api_server_busy_err(&e, queue_limit);
    return api_err_body(&e);
}

json_t *api_device_error_json(const struct api_device_error *e)
{
    struct api_err err;
    api_err_device(&err, e);
    return api_err_json(&err);
}

char *api_device_error_body(const struct api_device_error *e)
{
    struct api_err err;
    api_err_device(&err, e);
    return api_err_body(&err);
}

/* ---- pieces for the other surfaces ---------------------------------------------- */

json_t *api_text_json(const char *s, size_t n) { return text_n(s, n); }

json_t *api_usage_json(const struct api_usage *u) { return usage_json(u); }

json_t *api_logprob_json(float lp) { return logprob_value(lp); }

json_t *api_head_json(const struct api_chat_ident *ci, const char *id, const char *object)
{
    json_t *o = head(ci, object);
    if (o && id && json_object_set_new(o, "id", json_string(id)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *api_json_dump(json_t *o, const char *suffix)
{
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s || !suffix)
        return s;
    size_t n = strlen(s), k = strlen(suffix);
    char *t = realloc(s, n + k + 1);
    if (!t) {
        free(s);
        return NULL;
    }
    memcpy(t + n, suffix, k + 1);
    return t;
}
