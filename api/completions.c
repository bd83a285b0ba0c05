/* POST /v1/completions: the request (api_completion_parse) and the
 * text_completion framing (api_completion_format_new). See api/completions.h. */
#include "api/completions.h"

#include "api/json-util.h"
#include "api/chat-resp.h"
#include "util/utf8.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ------------------------------------------------------------------ */

static int parse_ids(const json_t *arr, const char *param, int32_t n_vocab,
                     struct api_completion_prompt *c, struct api_err *bad)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return api__refuse(bad, param, "Invalid '%s': the prompt is empty.", param);
    c->ids = malloc(n * sizeof *c->ids);
    if (!c->ids)
        return api_refuse(bad, API_ERR_INTERNAL, NULL, "out of memory while reading the request");
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v) {
        char p[64];
        api__path(p, sizeof p, "%s[%zu]", param, i);
        if (!json_is_integer(v))
            return api__wrong_type(bad, p, "an integer token id", v);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= n_vocab)
            return api__refuse(bad, p, "Invalid '%s': %lld is not a token id (0 to %d).", p,
                               (long long)id, n_vocab - 1);
        c->ids[i] = (int32_t)id;
    }
    c->n_ids = n;
    return 0;
}

static bool all_integers(const json_t *arr)
{
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v) {
        if (!json_is_integer(v))
            return false;
    }
    return json_array_size(arr) > 0;
}

/* A string, token ids, or an array of either (OpenAI's batch: one choice per
 * prompt, choice i answering prompt i). */
static int parse_prompt(const json_t *body, int32_t n_vocab, struct api_completion *c,
                        struct api_err *bad)
{
    const json_t *p = api__opt(body, "prompt");
    if (!p)
        return api__refuse(bad, "prompt", "Missing required parameter: 'prompt'.");
    c->n_prompts = 1;
    if (json_is_string(p)) {
        c->prompts[0].text = json_string_value(p);
        c->prompts[0].text_len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p))
        return api__wrong_type(bad, "prompt", "a string, an array of strings or token ids", p);
    if (all_integers(p))
        return parse_ids(p, "prompt", n_vocab, &c->prompts[0], bad);
    if (json_array_size(p) == 0)
        return api__refuse(bad, "prompt", "Invalid 'prompt': the prompt is empty.");
    if (json_array_size(p) > API_COMPLETION_MAX_PROMPTS)
        return api__refuse(bad, "prompt", "Invalid 'prompt': at most %d prompts per request "
                                          "(got %zu); send the others in further requests.",
                           API_COMPLETION_MAX_PROMPTS, json_array_size(p));
    c->n_prompts = 0;
    size_t i;
    const json_t *one;
    json_array_foreach(p, i, one) {
        char path[32];
        api__path(path, sizeof path, "prompt[%zu]", i);
        struct api_completion_prompt *q = &c->prompts[c->n_prompts++];
        if (json_is_string(one)) {
            q->text = json_string_value(one);
            q->text_len = json_string_length(one);
        } else if (json_is_array(one)) {
            if (parse_ids(one, path, n_vocab, q, bad))
                return -EINVAL;
        } else {
            return api__wrong_type(bad, path, "a string or an array of token ids", one);
        }
    }
    return 0;
}

static int must_be_one(const json_t *body, const char *key, struct api_err *bad)
{
    long long k = 1;
    bool given;
    if (api__get_int(body, key, LLONG_MIN, LLONG_MAX, &k, &given, bad))
        return -EINVAL;
    if (given && k != 1)
        return api__refuse(bad, key, "Invalid '%s': minicpmd generates one choice per request, so "
                                     "'%s' must be 1 (got %lld).",
                           key, key, k);
    return 0;
}

static int check_request(const json_t *body, const struct api_chat_limits *lim,
                         struct api_completion *c, struct api_err *bad)
{
    struct api_chat_req *r = c->req;
    int32_t n_vocab = lim && lim->n_vocab > 0 ? lim->n_vocab : INT32_MAX;
    const json_t *model = api__opt(body, "model");
    if (!model)
        return api__refuse(bad, "model", "Missing required parameter: 'model'.");
    if (!json_is_string(model))
        return api__wrong_type(bad, "model", "a string", model);
    r->model = json_string_value(model);
    const json_t *suffix = api__opt(body, "suffix");
    if (suffix && !(json_is_string(suffix) && json_string_length(suffix) == 0))
        return api__refuse(bad, "suffix", "Invalid 'suffix': not supported; MiniCPM5 has no "
                                          "fill-in-the-middle mode (send the text before the "
                                          "gap as the prompt).");
    if (parse_prompt(body, n_vocab, c, bad) || api__check_generation(body, lim, r, bad) ||
        must_be_one(body, "n", bad) || must_be_one(body, "best_of", bad) ||
        api__check_format(body, NULL, r, lim, bad))
        return -EINVAL;

    long long v = 0, k = 0;
    bool given, mt_given;
    if (api__get_int(body, "max_tokens", -1, LLONG_MAX, &v, &mt_given, bad) ||
        api__get_int(body, "logprobs", 0, API_COMPLETION_MAX_LOGPROBS, &k, &given, bad) ||
        api__get_bool(body, "echo", "echo", &c->echo, bad))
        return -EINVAL;
    r->logprobs = given;
    r->top_logprobs = (int)k;
    /* max_tokens 0 scores the prompt alone, which only echo shows. */
    if (mt_given && v == 0 && !c->echo)
        return api__refuse(bad, "max_tokens", "Invalid 'max_tokens': 0 generates nothing; it "
                                              "is only useful with 'echo' (the prompt, and "
                                              "with 'logprobs' its log-probabilities).");
    /* OpenAI's default for completions is 16 tokens; -1: to the end. */
    r->max_tokens = !mt_given ? 16 : v < 0 ? 0 : v > INT32_MAX ? INT32_MAX : (int32_t)v;
    r->prompt_only = mt_given && v == 0;
    r->prompt_logprobs = c->echo && r->logprobs;
    if (c->n_prompts > 1 && r->stream)
        return api__refuse(bad, "stream", "Invalid 'stream': a stream answers one prompt; send "
                                          "several prompts without 'stream', or one per "
                                          "request.");
    return 0;
}

int api_completion_parse(const json_t *body, const struct api_chat_limits *lim,
                         struct api_completion **out, struct api_err *bad)
{
    *out = NULL;
    if (!json_is_object(body))
        return api__refuse(bad, NULL, "The request body must be a JSON object.");
    struct api_completion *c = calloc(1, sizeof *c);
    if (!c || !(c->req = api__req_new(body, lim, bad))) {  /* api__req_new fails only so */
        free(c);
        return api_refuse(bad, API_ERR_INTERNAL, NULL, "out of memory while reading the request");
    }
    c->req->raw = true;
    if (check_request(body, lim, c, bad) != 0) {
        api_completion_free(c);
        return -EINVAL;
    }
    c->text = c->prompts[0].text;
    c->text_len = c->prompts[0].text_len;
    c->ids = c->prompts[0].ids;
    c->n_ids = c->prompts[0].n_ids;
    *out = c;
    return 0;
}

void api_completion_free(struct api_completion *c)
{
    if (!c)
        return;
    api_chat_req_free(c->req);
    for (size_t i = 0; i < c->n_prompts; i++)
        free(c->prompts[i].ids);
    free(c);
}

/* ---- the text_completion framing ------------------------------------------------------ */

struct cfmt {
    struct api_chat_format f;
    char *echo;
    size_t echo_len;
    bool include_usage;
    bool echo_lp;               /* the logprobs begin with the echoed prompt's tokens */
    int index;                  /* the choice's: its prompt's place in the request */
    long offset;                /* text_offset of the next token, in characters */
    char id[48];                /* "cmpl-" + 32 random [0-9A-Za-z], its own */
};

/* Characters (code points) in n bytes of UTF-8: the bytes that start one. */
static long chars(const char *s, size_t n) { return (long)ut_utf8_count_starts(s, n); }

static const char *cmpl_id(struct cfmt *f, const struct api_chat_ident *ci)
{
    (void)ci;
    return f->id;
}

/* Legacy logprobs of `n` tokens: {tokens, token_logprobs, top_logprobs, text_offset}. */
static json_t *legacy_logprobs(struct cfmt *f, const struct api_token_logprob *t, size_t n)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                          "top_logprobs", tops, "text_offset", offs);
    for (size_t i = 0; o && i < n; i++) {
        /* The prompt's first token has no logprob (nothing comes before it): null. */
        bool none = isnan(t[i].logprob);
        json_t *top = none ? json_null() : json_object();
        for (int k = 0; top && !none && k < t[i].n_top; k++) {
            json_t *key = api_text_json(t[i].top[k].token, t[i].top[k].len);
            /* Tokens that read the same (special ones read "") share a key: it keeps
             * the most likely one's logprob, the first. */
            if (key && json_object_get(top, json_string_value(key))) {
                json_decref(key);
                continue;
            }
            if (!key || json_object_set_new(top, json_string_value(key),
                                            api_logprob_json(t[i].top[k].logprob)) != 0) {
                json_decref(key);
                json_decref(top);
                top = NULL;
                break;
            }
            json_decref(key);
        }
        if (json_array_append_new(tokens, api_text_json(t[i].token, t[i].len)) != 0 ||
            json_array_append_new(lps, none ? json_null() : api_logprob_json(t[i].logprob)) != 0 ||
            json_array_append_new(tops, top) != 0 ||
            json_array_append_new(offs, json_integer(f->offset)) != 0) {
            json_decref(o);
            return NULL;
        }
        f->offset += chars(t[i].token, t[i].len);
    }
    return o;
}

/* {id, object "text_completion", created, model, system_fingerprint, choices: [{text,
 * index, logprobs, finish_reason}]}; steals `logprobs`. */
static json_t *completion(struct cfmt *f, const struct api_chat_ident *ci, json_t *text,
                          json_t *logprobs, const char *finish)
{
    json_t *o = api_head_json(ci, cmpl_id(f, ci), "text_completion");
    json_t *choice = json_pack("{s:o, s:i, s:o, s:o}", "text", text ? text : json_string(""),
                               "index", f->index, "logprobs", logprobs ? logprobs : json_null(),
                               "finish_reason", finish ? json_string(finish) : json_null());
    if (!o || !choice || json_object_set_new(o, "choices", json_pack("[o]", choice)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *chunk_frame(struct cfmt *f, json_t *o)
{
    if (o && f->include_usage)
        json_object_set_new(o, "usage", json_null());
    return api_sse_event(o);
}

static char *c_start(void *ctx, const struct api_chat_ident *ci)
{
    struct cfmt *f = ctx;
    if (!f->echo)
        return NULL;
    if (!f->echo_lp)   /* else the prompt's tokens count their own characters */
        f->offset += chars(f->echo, f->echo_len);
    return chunk_frame(f, completion(f, ci, api_text_json(f->echo, f->echo_len), NULL, NULL));
}

static char *c_delta(void *ctx, const struct api_chat_ident *ci, const struct api_chat_delta *d)
{
    struct cfmt *f = ctx;
    const char *t = d->content ? d->content : "";
    json_t *lp = d->logprobs ? legacy_logprobs(f, d->tokens, d->n_tokens) : NULL;
    return chunk_frame(f, completion(f, ci, api_text_json(t, strlen(t)), lp, NULL));
}

static char *c_end(void *ctx, const struct api_chat_ident *ci, enum api_finish_reason fr,
                   const struct api_usage *u, const struct api_timings *t)
{
    struct cfmt *f = ctx;
    json_t *last = completion(f, ci, NULL, NULL, api_finish_reason_name(fr));
    if (last && t)
        json_object_set_new(last, "timings", api_timings_json(t));
    char *a = chunk_frame(f, last), *b = NULL;
    if (f->include_usage) {
        json_t *o = api_head_json(ci, cmpl_id(f, ci), "text_completion");
        if (o && (json_object_set_new(o, "choices", json_array()) != 0 ||
                  json_object_set_new(o, "usage", api_usage_json(u)) != 0)) {
            json_decref(o);
            o = NULL;
        }
        b = api_sse_event(o);
    }
    size_t na = a ? strlen(a) : 0, nb = b ? strlen(b) : 0;
    char *s = malloc(na + nb + sizeof API_SSE_DONE);
    if (s) {
        memcpy(s, a ? a : "", na);
        memcpy(s + na, b ? b : "", nb);
        memcpy(s + na + nb, API_SSE_DONE, sizeof API_SSE_DONE);
    }
    free(a);
    free(b);
    return s;
}

/* A non-streamed answer's text_completion object: the echo, then the output. */
static json_t *body_json(struct cfmt *f, const struct api_chat_ident *ci,
                         const struct api_chat_result *r)
{
    size_t ne = f->echo ? f->echo_len : 0, nc = r->content ? strlen(r->content) : 0;
    char *all = malloc(ne + nc + 1);
    if (!all)
        return NULL;
    memcpy(all, f->echo ? f->echo : "", ne);
    memcpy(all + ne, r->content ? r->content : "", nc);
    f->offset = f->echo_lp ? 0 : chars(all, ne);
    json_t *lp = r->logprobs ? legacy_logprobs(f, r->tokens, r->n_tokens) : NULL;
    json_t *o = completion(f, ci, api_text_json(all, ne + nc), lp, api_finish_reason_name(r->finish));
    free(all);
    if (o && (json_object_set_new(o, "usage", api_usage_json(&r->usage)) != 0 ||
              (r->timings && json_object_set_new(o, "timings", api_timings_json(r->timings)) != 0))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *c_body(void *ctx, const struct api_chat_ident *ci, const struct api_chat_result *r)
{
    return api_json_dump(body_json(ctx, ci, r), NULL);
}

static char *c_error(void *ctx, const struct api_err *e, bool stream)
{
    (void)ctx;
    return stream ? api_err_sse(e) : api_err_body(e);
}

struct api_chat_format *api_completion_format_new(const char *echo, size_t echo_len,
                                                  bool include_usage, int index, bool echo_logprobs)
{
    struct cfmt *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    if (echo && !(f->echo = malloc(echo_len + 1))) {
        free(f);
        return NULL;
    }
    if (echo) {
        memcpy(f->echo, echo, echo_len);
        f->echo[echo_len] = '\0';
        f->echo_len = echo_len;
    }
    f->include_usage = include_usage;
    f->index = index;
    f->echo_lp = echo && echo_logprobs;
    memcpy(f->id, "cmpl-", 5);
    api_random_alnum(f->id + 5, 32);
    f->f = (struct api_chat_format){c_start, c_delta, c_end, c_body, c_error, f, NULL};
    return &f->f;
}

void api_completion_format_free(void *ctx)
{
    struct cfmt *f = ctx;
    if (!f)
        return;
    free(f->echo);
    free(f);
}

char *api_completion_body_multi(const struct api_chat_format *const *fmts,
                                const struct api_chat_ident *ci,
                                const struct api_chat_result *const *r, int n)
{
    json_t *out = NULL, *choices = json_array();
    struct api_usage sum = {0};
    char *s = NULL;
    if (!choices || n < 1)
        goto done;
    for (int i = 0; i < n; i++) {
        /* each prompt its own: every count sums */
        sum.prompt_tokens += r[i]->usage.prompt_tokens;
        sum.completion_tokens += r[i]->usage.completion_tokens;
        sum.reasoning_tokens += r[i]->usage.reasoning_tokens;
        sum.cached_tokens += r[i]->usage.cached_tokens;
        json_t *o = body_json(fmts[i]->ctx, ci, r[i]);
        int bad = !o || json_array_append(choices, json_array_get(json_object_get(o, "choices"), 0));
        if (i == 0 && !bad)
            out = json_incref(o);
        json_decref(o);
        if (bad)
            goto done;
    }
    json_object_del(out, "timings");   /* one choice's; the sum would mean nothing */
    if (json_object_set(out, "choices", choices) == 0 &&
        json_object_set_new(out, "usage", api_usage_json(&sum)) == 0)
        s = json_dumps(out, JSON_COMPACT);
done:
    json_decref(choices);
    json_decref(out);
    return s;
}
