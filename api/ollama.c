/* The Ollama API: requests translated into OpenAI bodies, answers framed as Ollama
 * frames them. See api/ollama.h. */
#include "api/ollama.h"

#include "api/json-util.h"
#include "api/chat-resp.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- requests -------------------------------------------------------------------- */

/* options: the sampler's names as OpenAI's; runtime settings (num_ctx, num_gpu,
 * num_thread, mirostat, …) are accepted and ignored, as Ollama ignores the ones its
 * runner does not use. */
static int map_options(const json_t *opts, json_t *o, struct api_err *bad)
{
    if (!opts)
        return 0;
    if (!json_is_object(opts))
        return api__wrong_type(bad, "options", "an object", opts);
    static const char *const same[] = {"temperature", "top_p", "top_k", "min_p", "seed",
                                       "presence_penalty", "frequency_penalty", "stop"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        if (api__copy(o, same[i], api__opt(opts, same[i]), bad))
            return -ENOMEM;
    if (api__copy(o, "repetition_penalty", api__opt(opts, "repeat_penalty"), bad))
        return -ENOMEM;
    const json_t *np = api__opt(opts, "num_predict");
    /* -1: no limit, -2: until the context is full; both are "to the end" here. */
    if (np && json_is_number(np) && json_number_value(np) < 0)
        return api__set(o, "max_tokens", json_integer(-1), bad);
    return api__copy(o, "max_tokens", np, bad);
}

/* format: "json" or a JSON schema, into OpenAI's response_format. */
static int map_format(const json_t *f, json_t *o, struct api_err *bad)
{
    if (!f || (json_is_string(f) && json_string_length(f) == 0))
        return 0;
    if (api__str_is(f, "json"))
        return api__set(o, "response_format", json_pack("{s:s}", "type", "json_object"), bad);
    if (json_is_object(f))
        return api__set(o, "response_format",
                   json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema", "name",
                             "ollama", "schema", f),
                   bad);
    return api__refuse(bad, "format", "invalid format: expected \"json\" or a JSON schema");
}

/* think: true/false, or a level ("low", "medium", "high") as reasoning_effort. */
static int map_think(const json_t *t, json_t *o, struct api_err *bad)
{
    if (!t)
        return 0;
    if (json_is_boolean(t))
        return api__set(o, "reasoning_effort", json_string(json_is_true(t) ? "high" : "none"), bad);
    if (api__str_is(t, "low") || api__str_is(t, "medium") || api__str_is(t, "high"))
        return api__copy(o, "reasoning_effort", t, bad);
    return api__refuse(bad, "think", "invalid think value: expected true, false, \"low\", "
                                     "\"medium\" or \"high\"");
}

static bool nonempty(const json_t *v)
{
    return v && !(json_is_array(v) && json_array_size(v) == 0) &&
           !(json_is_string(v) && json_string_length(v) == 0);
}

/* One Ollama message as an OpenAI one. */
static int map_message(const json_t *m, size_t i, json_t *msgs, struct api_err *bad)
{
    char p[64];
    api__path(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(m))
        return api__wrong_type(bad, p, "an object", m);
    api__path(p, sizeof p, "messages[%zu].images", i);
    if (nonempty(api__opt(m, "images")))
        return api__refuse(bad, p, "this model reads text only: images are not supported");
    json_t *o = json_object();
    if (!o || json_array_append_new(msgs, o) != 0)
        return api__oom(bad);
    const json_t *content = api__opt(m, "content");
    if (api__copy(o, "role", json_object_get(m, "role"), bad) ||
        api__set(o, "content", content ? json_deep_copy(content) : json_string(""), bad) ||
        api__copy(o, "reasoning_content", api__opt(m, "thinking"), bad) ||
        api__copy(o, "name", api__opt(m, "tool_name"), bad))
        return -EINVAL;
    const json_t *calls = api__opt(m, "tool_calls");
    if (!calls)
        return 0;
    api__path(p, sizeof p, "messages[%zu].tool_calls", i);
    if (!json_is_array(calls))
        return api__wrong_type(bad, p, "an array", calls);
    json_t *oc = json_array();
    if (api__set(o, "tool_calls", oc, bad))
        return -ENOMEM;
    size_t j;
    const json_t *c;
    json_array_foreach(calls, j, c) {
        /* Ollama's calls carry no id (newer ones may): make one per position. */
        char id[48];
        snprintf(id, sizeof id, "call_%zu_%zu", i, j);
        const json_t *cid = json_object_get(c, "id");
        json_t *call = json_pack("{s:s, s:s, s:O?}", "id",
                                 json_is_string(cid) ? json_string_value(cid) : id, "type",
                                 "function", "function", json_object_get(c, "function"));
        if (!call || json_array_append_new(oc, call) != 0)
            return api__oom(bad);
    }
    return 0;
}

static int common(const json_t *body, json_t *o, struct api_err *bad)
{
    const json_t *stream = api__opt(body, "stream");
    if (stream && !json_is_boolean(stream))
        return api__wrong_type(bad, "stream", "a boolean", stream);
    if (api__copy(o, "model", json_object_get(body, "model"), bad) ||
        api__set(o, "stream", json_boolean(!stream || json_is_true(stream)), bad) ||
        map_options(api__opt(body, "options"), o, bad) ||
        map_format(api__opt(body, "format"), o, bad) || map_think(api__opt(body, "think"), o, bad))
        return -EINVAL;
    return 0;
}

static int translate_chat(const json_t *body, json_t *o, struct api_err *bad)
{
    const json_t *msgs = api__opt(body, "messages");
    if (!msgs)
        return api__refuse(bad, "messages", "messages is required");
    if (!json_is_array(msgs))
        return api__wrong_type(bad, "messages", "an array", msgs);
    json_t *om = json_array();
    if (api__set(o, "messages", om, bad) || api__copy(o, "tools", api__opt(body, "tools"), bad))
        return -EINVAL;
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        if (map_message(m, i, om, bad))
            return -EINVAL;
    }
    return 0;
}

static int translate_generate(const json_t *body, json_t *o, enum api_ollama_kind *kind,
                              struct api_err *bad)
{
    static const char *const refused[] = {"suffix", "images", "context", "template"};
    static const char *const why[] = {
        "suffix is not supported: MiniCPM5 has no fill-in-the-middle mode",
        "this model reads text only: images are not supported",
        "context is not supported: send the conversation to /api/chat",
        "template is not supported: minicpmd renders the model's own chat template",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (nonempty(api__opt(body, refused[i])))
            return api__refuse(bad, refused[i], "%s", why[i]);
    const char *prompt = "", *system = NULL;
    bool raw = false;
    if (api__get_string(body, "prompt", "prompt", &prompt, bad) ||
        api__get_string(body, "system", "system", &system, bad) ||
        api__get_bool(body, "raw", "raw", &raw, bad))
        return -EINVAL;
    if (!prompt[0] && json_string_length(json_object_get(body, "prompt")) == 0) {
        *kind = API_OLLAMA_LOAD;
        return 0;
    }
    if (raw) {
        *kind = API_OLLAMA_GENERATE_RAW;
        if (!json_object_get(o, "max_tokens") && api__set(o, "max_tokens", json_integer(-1), bad))
            return -ENOMEM;
        return api__copy(o, "prompt", json_object_get(body, "prompt"), bad);
    }
    *kind = API_OLLAMA_GENERATE;
    json_t *msgs = json_array();
    if (api__set(o, "messages", msgs, bad))
        return -ENOMEM;
    if (system && json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content",
                                                        json_object_get(body, "system"))) != 0)
        return api__oom(bad);
    if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content",
                                              json_object_get(body, "prompt"))) != 0)
        return api__oom(bad);
    return 0;
}

int api_ollama_translate(const json_t *body, bool generate, enum api_ollama_kind *kind,
                         json_t **out, struct api_err *bad)
{
    *out = NULL;
    *kind = generate ? API_OLLAMA_GENERATE : API_OLLAMA_CHAT;
    if (!json_is_object(body))
        return api__refuse(bad, NULL, "the request body must be a JSON object");
    const json_t *model = api__opt(body, "model");
    if (!model)
        return api__refuse(bad, "model", "model is required");
    if (!json_is_string(model))
        return api__wrong_type(bad, "model", "a string", model);
    json_t *o = json_object();
    if (!o)
        return api__oom(bad);
    int rc = common(body, o, bad);
    if (rc == 0)
        rc = generate ? translate_generate(body, o, kind, bad) : translate_chat(body, o, bad);
    if (rc != 0 || *kind == API_OLLAMA_LOAD) {
        json_decref(o);
        return rc ? -EINVAL : 0;
    }
    *out = o;
    return 0;
}

/* ---- errors ------------------------------------------------------------------------- */

/* The translated body's names back to the ones the Ollama client sent. */
static const struct api_param_name param_names[] = {
    {"repetition_penalty", "options.repeat_penalty"},
    {"max_tokens", "options.num_predict"},
    {"temperature", "options.temperature"},
    {"top_p", "options.top_p"},
    {"top_k", "options.top_k"},
    {"min_p", "options.min_p"},
    {"seed", "options.seed"},
    {"presence_penalty", "options.presence_penalty"},
    {"frequency_penalty", "options.frequency_penalty"},
    {"stop", "options.stop"},
    {"response_format", "format"},
    {"reasoning_effort", "think"},
};

/* The message fields map_message() renamed, after "messages[i]". */
static const struct api_param_name message_fields[] = {
    {".reasoning_content", ".thinking"},
    {".name", ".tool_name"},
};

void api_ollama_param(const char *param, char *out, size_t size)
{
    struct api_err e = {.error = API_ERR_BAD_REQUEST};
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    api_err_rename(&e, param_names, sizeof param_names / sizeof *param_names);
    const char *close = strncmp(e.param, "messages[", 9) == 0 ? strchr(e.param, ']') : NULL;
    if (close) {   /* messages[i].reasoning_content -> messages[i].thinking, … */
        size_t head = (size_t)(close + 1 - e.param);
        struct api_err f = {.error = API_ERR_BAD_REQUEST};
        snprintf(f.param, sizeof f.param, "%s", e.param + head);
        api_err_rename(&f, message_fields, sizeof message_fields / sizeof *message_fields);
        snprintf(out, size, "%.*s%s", (int)head, e.param, f.param);
        return;
    }
    snprintf(out, size, "%s", e.param);
}

/* {"error":"<message>"}. */
static char *error_body(const char *message)
{
    return api_json_dump(json_pack("{s:o}", "error", api_text_json(message, strlen(message))),
                         NULL);
}

char *api_ollama_err_body(const struct api_err *e)
{
    struct api_err o = *e;
    char param[API_ERR_PARAM_SIZE];
    api_ollama_param(e->param, param, sizeof param);
    api_err_set_param(&o, param);
    return error_body(o.message);
}

/* ---- answers ------------------------------------------------------------------------ */

/* RFC 3339 with nanoseconds, UTC, as Go prints time.Time. */
static json_t *timestamp(int64_t unix_s, long ns)
{
    struct tm tm;
    time_t t = (time_t)unix_s;
    char buf[64];
    if (!gmtime_r(&t, &tm))
        return json_string("1970-01-01T00:00:00Z");
    size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof buf - n, ".%09ldZ", ns);
    return json_string(buf);
}

static json_t *now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return timestamp((int64_t)ts.tv_sec, ts.tv_nsec);
}

struct ofmt {
    struct api_chat_format f;
    bool generate;
    char *model;
};

static json_t *head(const struct ofmt *f)
{
    return json_pack("{s:s, s:o}", "model", f->model, "created_at", now());
}

/* Ollama's calls, whose arguments are an object: a call max_tokens cut (arguments
 * left open) is not one, and is left out, as Ollama's own parser only hands out
 * whole calls. NULL when none is left. */
static json_t *calls_json(const struct api_tool_call *tc, const struct api_tool_call_delta *td,
                          size_t n);

/* A tool call's arguments as the object Ollama sends. The text is the model's
 * output (the engine's parser found the call in it), not JSON api/ made, so it is
 * parsed here; text that is not an object becomes {}. */
static json_t *arguments(const char *s)
{
    json_t *a = s ? json_loads(s, 0, NULL) : NULL;
    if (json_is_object(a))
        return a;
    json_decref(a);
    return json_object();
}

static json_t *calls_json(const struct api_tool_call *tc, const struct api_tool_call_delta *td,
                          size_t n)
{
    json_t *calls = n ? json_array() : NULL;
    for (size_t i = 0; calls && i < n; i++) {
        const char *name = tc ? tc[i].name : td[i].name, *args = tc ? tc[i].arguments : td[i].arguments;
        if (tc ? tc[i].cut : td[i].cut)
            continue;
        json_array_append_new(calls, json_pack("{s:{s:s, s:o}}", "function", "name",
                                               name ? name : "", "arguments", arguments(args)));
    }
    if (calls && json_array_size(calls) == 0) {
        json_decref(calls);
        calls = NULL;
    }
    return calls;
}

/* The text part of a line: message {role, content, thinking?, tool_calls?} for
 * chat; response (+ thinking) for generate. Steals `calls`. */
static int text_part(const struct ofmt *f, json_t *o, const char *content, const char *thinking,
                     json_t *calls)
{
    json_t *target = o;
    if (!f->generate) {
        target = json_pack("{s:s}", "role", "assistant");
        if (!target || json_object_set_new(o, "message", target) != 0) {
            json_decref(calls);
            return -ENOMEM;
        }
    }
    int rc = json_object_set_new(target, f->generate ? "response" : "content",
                                 api_text_json(content, content ? strlen(content) : 0));
    if (thinking && thinking[0])
        rc |= json_object_set_new(target, "thinking", api_text_json(thinking, strlen(thinking)));
    if (calls && !f->generate)
        rc |= json_object_set_new(target, "tool_calls", calls);
    else
        json_decref(calls);
    return rc ? -ENOMEM : 0;
}

static int stats(json_t *o, enum api_finish_reason fr, const struct api_usage *u,
                 const struct api_timings *t)
{
    double pms = t ? t->prompt_ms : 0, gms = t ? t->predicted_ms : 0;
    json_t *s = json_pack("{s:b, s:s, s:I, s:i, s:i, s:I, s:i, s:I}", "done", 1, "done_reason",
                          fr == API_FINISH_LENGTH ? "length" : "stop", "total_duration",
                          (json_int_t)llround((pms + gms) * 1e6), "load_duration", 0,
                          "prompt_eval_count", (int)u->prompt_tokens, "prompt_eval_duration",
                          (json_int_t)llround(pms * 1e6), "eval_count", (int)u->completion_tokens,
                          "eval_duration", (json_int_t)llround(gms * 1e6));
    int rc = s ? json_object_update(o, s) : -1;
    json_decref(s);
    return rc;
}

static char *o_delta(void *ctx, const struct api_chat_ident *ci, const struct api_chat_delta *d)
{
    (void)ci;
    struct ofmt *f = ctx;
    json_t *calls = calls_json(NULL, d->tool_calls, d->n_tool_calls);
    if (!d->content && !d->reasoning && !calls)
        return NULL;   /* logprobs only: Ollama's lines have none */
    json_t *o = head(f);
    if (!o || text_part(f, o, d->content ? d->content : "", d->reasoning, calls) != 0 ||
        json_object_set_new(o, "done", json_false()) != 0) {
        json_decref(o);
        return NULL;
    }
    return api_json_dump(o, "\n");
}

static char *o_end(void *ctx, const struct api_chat_ident *ci, enum api_finish_reason fr,
                   const struct api_usage *u, const struct api_timings *t)
{
    (void)ci;
    struct ofmt *f = ctx;
    json_t *o = head(f);
    if (!o || text_part(f, o, "", NULL, NULL) != 0 || stats(o, fr, u, t) != 0) {
        json_decref(o);
        return NULL;
    }
    return api_json_dump(o, "\n");
}

static char *o_body(void *ctx, const struct api_chat_ident *ci, const struct api_chat_result *r)
{
    (void)ci;
    struct ofmt *f = ctx;
    json_t *calls = calls_json(r->tool_calls, NULL, r->n_tool_calls);
    json_t *o = head(f);
    if (!o || text_part(f, o, r->content ? r->content : "", r->reasoning, calls) != 0 ||
        stats(o, r->finish, &r->usage, r->timings) != 0) {
        json_decref(o);
        return NULL;
    }
    return api_json_dump(o, NULL);
}

/* Ollama's {"error":"…"}: a whole body, or a stream's last NDJSON line. */
static char *o_error(void *ctx, const struct api_err *e, bool stream)
{
    (void)ctx;
    char *s = api_ollama_err_body(e);
    if (!stream)
        return s;
    size_t n = s ? strlen(s) : 0;
    char *t = s ? realloc(s, n + 2) : NULL;
    if (!t) {
        free(s);
        return NULL;
    }
    memcpy(t + n, "\n", 2);
    return t;
}

struct api_chat_format *api_ollama_format_new(bool generate, const char *model)
{
    struct ofmt *f = calloc(1, sizeof *f);
    if (!f || !(f->model = strdup(model ? model : ""))) {
        free(f);
        return NULL;
    }
    f->generate = generate;
    f->f = (struct api_chat_format){NULL, o_delta, o_end, o_body, o_error, f, NULL};
    return &f->f;
}

void api_ollama_format_free(void *ctx)
{
    struct ofmt *f = ctx;
    if (f) {
        free(f->model);
        free(f);
    }
}

char *api_ollama_load_body(const char *model)
{
    return api_json_dump(json_pack("{s:s, s:o, s:s, s:b, s:s}", "model", model, "created_at", now(),
                                   "response", "", "done", 1, "done_reason", "load"),
                         NULL);
}

/* ---- the served model ------------------------------------------------------------------ */

bool api_ollama_name_is(const char *name, const char *id)
{
    if (!name || !id)
        return false;
    size_t n = strlen(id);
    return strncmp(name, id, n) == 0 && (name[n] == '\0' || strcmp(name + n, ":latest") == 0);
}

char *api_ollama_version_body(void)
{
    return api_json_dump(json_pack("{s:s}", "version", API_OLLAMA_VERSION), NULL);
}

static json_t *details(const struct api_ollama_model *m)
{
    char size[32];
    if (m->n_params >= 1000000000)
        snprintf(size, sizeof size, "%.1fB", (double)m->n_params / 1e9);
    else if (m->n_params > 0)
        snprintf(size, sizeof size, "%.0fM", (double)m->n_params / 1e6);
    else
        snprintf(size, sizeof size, "unknown");
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "minicpmd",
                     "family", "minicpm", "families", "minicpm", "parameter_size", size,
                     "quantization_level", m->quantization ? m->quantization : "unknown");
}

static json_t *model_entry(const struct api_ollama_model *m, bool ps)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "name", m->name, "model", m->name, "size",
                          (json_int_t)m->size, "digest", m->digest ? m->digest : "", "details",
                          details(m));
    if (!o)
        return NULL;
    int rc;
    if (ps) /* loaded until the daemon stops: Ollama's keep_alive -1 shows a far date */
        rc = json_object_set_new(o, "expires_at", timestamp(INT64_C(10000000000), 0)) |
             json_object_set_new(o, "size_vram", json_integer(0)) |
             json_object_set_new(o, "context_length", json_integer(m->n_ctx));
    else
        rc = json_object_set_new(o, "modified_at", timestamp(m->modified, 0));
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *api_ollama_models_body(const struct api_ollama_model *m, size_t n, bool ps)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, model_entry(&m[i], ps)) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a ? api_json_dump(json_pack("{s:o}", "models", a), NULL) : NULL;
}

char *api_ollama_show_body(const struct api_ollama_model *m)
{
    char modelfile[512];
    snprintf(modelfile, sizeof modelfile,
             "# Served by minicpmd: the pack's own settings apply; a Modelfile cannot change "
             "them.\nFROM %s\n",
             m->name);
    json_t *info = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "general.architecture", "minicpm",
        "general.parameter_count", (json_int_t)m->n_params, "minicpm.context_length",
        (json_int_t)m->n_ctx_train, "minicpm.embedding_length", (json_int_t)m->n_embd,
        "minicpm.block_count", (json_int_t)m->n_layers, "minicpm.attention.head_count",
        (json_int_t)m->n_heads, "minicpm.attention.head_count_kv", (json_int_t)m->n_kv_heads,
        "minicpm.vocab_size", (json_int_t)m->n_vocab);
    return api_json_dump(
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:[s, s, s], s:o}", "license", "",
                  "system", "", "modelfile", modelfile,
                  "parameters", "", "template", m->template_text ? m->template_text : "",
                  "details", details(m), "model_info", info, "capabilities", "completion",
                  "tools", "thinking", "modified_at", timestamp(m->modified, 0)),
        NULL);
}
