/* POST /v1/messages and /v1/messages/count_tokens: the Anthropic request checked
 * and translated into a chat request body (api/messages.h).
 *
 * Refusals name the field in Anthropic's dotted form ("messages.1.content.0.type:
 * …"), first come first refused; what this file lets through, api_chat_req_parse()
 * accepts, so a client never reads an OpenAI field name. */
#include "api/messages.h"

#include "api/json-util.h"
#include "util/buf.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- refusing ---------------------------------------------------------------- */

/* 400 "<at>: <why>". */
static int refuse(struct api_err *bad, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(struct api_err *bad, const char *at, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return api__refuse(bad, at, "%s: %s", at, why);
}

static const char *kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int wrong(struct api_err *bad, const char *at, const char *want, const json_t *v)
{
    return refuse(bad, at, "expected %s, got %s", want, v ? kind(v) : "nothing");
}

static int missing(struct api_err *bad, const char *at)
{
    return refuse(bad, at, "Field required");
}

/* A string field (required or not): *out borrows it. */
static int get_str(const json_t *o, const char *key, const char *at, bool required,
                   const json_t **out, struct api_err *bad)
{
    const json_t *v = api__opt(o, key);
    *out = v;
    if (!v)
        return required ? missing(bad, at) : 0;
    return json_is_string(v) ? 0 : wrong(bad, at, "a string", v);
}

/* ---- content ------------------------------------------------------------------- */

static const char *block_type(const json_t *b, const char *at, struct api_err *bad)
{
    char p[96];
    api__path(p, sizeof p, "%s.type", at);
    if (!json_is_object(b)) {
        wrong(bad, at, "a content block object", b);
        return NULL;
    }
    const json_t *t;
    if (get_str(b, "type", p, true, &t, bad))
        return NULL;
    return json_string_value(t);
}

/* A text-only refusal for a block this model cannot read or minicpmd does not run. */
static int unsupported(struct api_err *bad, const char *at, const char *type)
{
    char p[96];
    api__path(p, sizeof p, "%s.type", at);
    bool media = !strcmp(type, "image") || !strcmp(type, "document") ||
                 !strcmp(type, "search_result");
    return refuse(bad, p, "'%s' blocks are not supported: %s", api__quoted(type).s,
                  media ? "this model reads text only" : "minicpmd takes text, tool_use, "
                                                         "tool_result and thinking blocks");
}

/* A text block's text, as a chat text part appended to `parts`. */
static int text_part(const json_t *b, const char *at, json_t *parts, struct api_err *bad)
{
    char p[96];
    api__path(p, sizeof p, "%s.text", at);
    const json_t *t;
    if (get_str(b, "text", p, true, &t, bad))
        return -EINVAL;
    return api__append(parts, json_pack("{s:s, s:O}", "type", "text", "text", t), bad);
}

/* A string or text blocks (system, tool_result content) as one string in *out. */
static int plain_text(const json_t *c, const char *at, ut_buf *out, struct api_err *bad)
{
    if (json_is_string(c))
        return ut_buf_add(out, json_string_value(c), json_string_length(c)) ? api__oom(bad) : 0;
    if (!json_is_array(c))
        return wrong(bad, at, "a string or an array of text blocks", c);
    size_t i;
    const json_t *b;
    json_array_foreach(c, i, b) {
        char p[96];
        api__path(p, sizeof p, "%s.%zu", at, i);
        const char *type = block_type(b, p, bad);
        if (!type)
            return -EINVAL;
        if (strcmp(type, "text") != 0)
            return unsupported(bad, p, type);
        const json_t *t;
        char q[112];
        api__path(q, sizeof q, "%s.text", p);
        if (get_str(b, "text", q, true, &t, bad))
            return -EINVAL;
        if ((i && ut_buf_addc(out, '\n')) ||
            ut_buf_add(out, json_string_value(t), json_string_length(t)))
            return api__oom(bad);
    }
    return 0;
}

static json_t *buf_string(ut_buf *b)
{
    json_t *s = json_stringn(b->p ? b->p : "", b->n);
    ut_buf_free(b);
    return s;
}

/* user text parts gathered so far, as one user message. */
static int flush_user(json_t **parts, json_t *msgs, struct api_err *bad)
{
    if (!*parts)
        return 0;
    json_t *m = json_pack("{s:s, s:o}", "role", "user", "content", *parts);
    *parts = NULL;
    return api__append(msgs, m, bad);
}

/* A tool_result block as a tool message; is_error is said in the text, the only
 * place the model can read it. */
static int tool_result(const json_t *b, const char *at, json_t *msgs, struct api_err *bad)
{
    char p[112];
    const json_t *id;
    api__path(p, sizeof p, "%s.tool_use_id", at);
    if (get_str(b, "tool_use_id", p, true, &id, bad))
        return -EINVAL;
    bool is_error = false;
    api__path(p, sizeof p, "%s.is_error", at);
    if (api__get_bool(b, "is_error", p, &is_error, bad))
        return refuse(bad, p, "expected a boolean");
    ut_buf text = {0};
    if (is_error)
        ut_buf_adds(&text, "Error: ");
    const json_t *c = api__opt(b, "content");
    api__path(p, sizeof p, "%s.content", at);
    if (c && plain_text(c, p, &text, bad)) {
        ut_buf_free(&text);
        return -EINVAL;
    }
    if (text.oom) {
        ut_buf_free(&text);
        return api__oom(bad);
    }
    json_t *content = buf_string(&text);
    return api__append(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id,
                                       "content", content),
                       bad);
}

/* A tool_use block as a chat tool call (arguments the input object itself). */
static int tool_use(const json_t *b, const char *at, json_t *calls, struct api_err *bad)
{
    char p[112];
    const json_t *id, *name;
    api__path(p, sizeof p, "%s.id", at);
    if (get_str(b, "id", p, true, &id, bad))
        return -EINVAL;
    api__path(p, sizeof p, "%s.name", at);
    if (get_str(b, "name", p, true, &name, bad))
        return -EINVAL;
    const json_t *input = api__opt(b, "input");
    api__path(p, sizeof p, "%s.input", at);
    if (!input)
        return missing(bad, p);
    if (!json_is_object(input))
        return wrong(bad, p, "an object", input);
    return api__append(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function",
                                        "function", "name", name, "arguments", input),
                       bad);
}

static int user_message(const json_t *content, const char *at, json_t *msgs,
                        struct api_err *bad)
{
    json_t *parts = NULL;
    size_t i;
    const json_t *b;
    json_array_foreach(content, i, b) {
        char p[96], q[112];
        api__path(p, sizeof p, "%s.%zu", at, i);
        const char *type = block_type(b, p, bad);
        int rc;
        if (!type) {
            rc = -EINVAL;
        } else if (!strcmp(type, "text")) {
            rc = !parts && !(parts = json_array()) ? api__oom(bad) : text_part(b, p, parts, bad);
        } else if (!strcmp(type, "tool_result")) {
            rc = flush_user(&parts, msgs, bad);
            if (rc == 0)
                rc = tool_result(b, p, msgs, bad);
        } else if (!strcmp(type, "tool_use") || !strcmp(type, "thinking")) {
            api__path(q, sizeof q, "%s.type", p);
            rc = refuse(bad, q, "'%s' blocks belong in assistant messages", type);
        } else {
            rc = unsupported(bad, p, type);
        }
        if (rc) {
            json_decref(parts);
            return rc;
        }
    }
    return flush_user(&parts, msgs, bad);
}

static int assistant_message(const json_t *content, const char *at, json_t *msgs,
                             struct api_err *bad)
{
    json_t *m = json_object(), *parts = json_array(), *calls = json_array();
    ut_buf thinking = {0};
    int rc = api__append(msgs, m, bad);
    if (rc || !parts || !calls) {
        json_decref(parts);
        json_decref(calls);
        return api__oom(bad);
    }
    size_t i;
    const json_t *b;
    json_array_foreach(content, i, b) {
        char p[96], q[112];
        api__path(p, sizeof p, "%s.%zu", at, i);
        const char *type = block_type(b, p, bad);
        if (!type) {
            rc = -EINVAL;
        } else if (!strcmp(type, "text")) {
            rc = text_part(b, p, parts, bad);
        } else if (!strcmp(type, "tool_use")) {
            rc = tool_use(b, p, calls, bad);
        } else if (!strcmp(type, "thinking")) {
            /* Given back as it was answered; MiniCPM5's template shows past
             * reasoning only where it belongs, and the signature is not checked. */
            const json_t *t;
            api__path(q, sizeof q, "%s.thinking", p);
            rc = get_str(b, "thinking", q, true, &t, bad);
            if (rc == 0 && ((thinking.n && ut_buf_addc(&thinking, '\n')) ||
                            ut_buf_add(&thinking, json_string_value(t), json_string_length(t))))
                rc = api__oom(bad);
        } else if (!strcmp(type, "tool_result")) {
            api__path(q, sizeof q, "%s.type", p);
            rc = refuse(bad, q, "'tool_result' blocks belong in user messages");
        } else {
            rc = unsupported(bad, p, type);
        }
        if (rc)
            break;
    }
    if (rc == 0)
        rc = api__set(m, "role", json_string("assistant"), bad);
    if (rc == 0)
        rc = json_array_size(parts) ? api__set(m, "content", json_incref(parts), bad)
                                    : api__set(m, "content", json_string(""), bad);
    if (rc == 0 && json_array_size(calls))
        rc = api__set(m, "tool_calls", json_incref(calls), bad);
    if (rc == 0 && thinking.n)
        rc = api__set(m, "reasoning_content", buf_string(&thinking), bad);
    ut_buf_free(&thinking);
    json_decref(parts);
    json_decref(calls);
    return rc;
}

static int map_message(const json_t *m, size_t i, json_t *msgs, struct api_err *bad)
{
    char at[48], p[64];
    api__path(at, sizeof at, "messages.%zu", i);
    if (!json_is_object(m))
        return wrong(bad, at, "a message object", m);
    const json_t *role, *content = api__opt(m, "content");
    api__path(p, sizeof p, "%s.role", at);
    if (get_str(m, "role", p, true, &role, bad))
        return -EINVAL;
    bool user = api__str_is(role, "user"), assistant = api__str_is(role, "assistant");
    bool system = api__str_is(role, "system");
    if (!user && !assistant && !system)
        return refuse(bad, p, "'%s' is not one of 'user', 'assistant', 'system'",
                      api__quoted(json_string_value(role)).s);
    api__path(p, sizeof p, "%s.content", at);
    if (!content)
        return missing(bad, p);
    if (system) {
        ut_buf t = {0};
        if (plain_text(content, p, &t, bad)) {
            ut_buf_free(&t);
            return -EINVAL;
        }
        return api__append(msgs, json_pack("{s:s, s:o}", "role", "system", "content",
                                           buf_string(&t)),
                           bad);
    }
    if (json_is_string(content))
        return api__append(msgs, json_pack("{s:O, s:O}", "role", role, "content", content), bad);
    if (!json_is_array(content))
        return wrong(bad, p, "a string or an array of content blocks", content);
    if (json_array_size(content) == 0)
        return refuse(bad, p, "at least one content block is required");
    return user ? user_message(content, p, msgs, bad) : assistant_message(content, p, msgs, bad);
}

static int map_messages(const json_t *body, json_t *chat, struct api_err *bad)
{
    json_t *msgs = json_array();
    if (api__set(chat, "messages", msgs, bad))
        return -ENOMEM;
    const json_t *sys = api__opt(body, "system");
    if (sys) {
        ut_buf t = {0};
        if (plain_text(sys, "system", &t, bad)) {
            ut_buf_free(&t);
            return -EINVAL;
        }
        if (api__append(msgs, json_pack("{s:s, s:o}", "role", "system", "content",
                                        buf_string(&t)),
                        bad))
            return -ENOMEM;
    }
    const json_t *in = api__opt(body, "messages");
    if (!in)
        return missing(bad, "messages");
    if (!json_is_array(in))
        return wrong(bad, "messages", "an array", in);
    if (json_array_size(in) == 0)
        return refuse(bad, "messages", "at least one message is required");
    size_t i;
    const json_t *m;
    json_array_foreach(in, i, m) {
        if (map_message(m, i, msgs, bad))
            return -EINVAL;
    }
    return 0;
}

/* ---- tools ----------------------------------------------------------------------- */

/* Anthropic's tool names: 1..128 of [A-Za-z0-9_-]. */
static bool tool_name_ok(const json_t *name)
{
    size_t n = json_string_length(name);
    return n >= 1 && n <= 128 &&
           strspn(json_string_value(name), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
                                           "XYZ0123456789_-") == n;
}

static int map_tools(const json_t *tools, json_t *chat, struct api_err *bad)
{
    if (!json_is_array(tools))
        return wrong(bad, "tools", "an array", tools);
    if (json_array_size(tools) > API_CHAT_MAX_TOOLS)
        return refuse(bad, "tools", "at most %d tools are accepted", API_CHAT_MAX_TOOLS);
    json_t *out = json_array();
    if (api__set(chat, "tools", out, bad))
        return -ENOMEM;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char at[32], p[64];
        api__path(at, sizeof at, "tools.%zu", i);
        if (!json_is_object(t))
            return wrong(bad, at, "a tool object", t);
        const json_t *type = api__opt(t, "type"), *name, *desc;
        api__path(p, sizeof p, "%s.type", at);
        if (type && !api__str_is(type, "custom"))
            return json_is_string(type)
                       ? refuse(bad, p, "'%s' tools are not supported: minicpmd runs custom "
                                        "tools (name, description, input_schema)",
                                api__quoted(json_string_value(type)).s)
                       : wrong(bad, p, "a string", type);
        api__path(p, sizeof p, "%s.name", at);
        if (get_str(t, "name", p, true, &name, bad))
            return -EINVAL;
        if (!tool_name_ok(name))
            return refuse(bad, p, "a tool name is 1 to 128 of a-z, A-Z, 0-9, '_' and '-'");
        for (size_t k = 0; k < i; k++)
            if (json_equal(json_object_get(json_array_get(tools, k), "name"), name))
                return refuse(bad, p, "the tool '%s' is defined twice (also tools.%zu)",
                              json_string_value(name), k);
        api__path(p, sizeof p, "%s.description", at);
        if (get_str(t, "description", p, false, &desc, bad))
            return -EINVAL;
        const json_t *schema = api__opt(t, "input_schema");
        api__path(p, sizeof p, "%s.input_schema", at);
        if (!schema)
            return missing(bad, p);
        if (!json_is_object(schema))
            return wrong(bad, p, "an object", schema);
        json_t *fn = json_object();
        if (api__append(out, json_pack("{s:s, s:o}", "type", "function", "function", fn), bad) ||
            api__copy(fn, "name", name, bad) || api__copy(fn, "description", desc, bad) ||
            api__copy(fn, "parameters", schema, bad))
            return -ENOMEM;
    }
    return 0;
}

static bool has_tool(const json_t *tools, const json_t *name)
{
    for (size_t i = 0; i < json_array_size(tools); i++)
        if (json_equal(json_object_get(json_array_get(tools, i), "name"), name))
            return true;
    return false;
}

static int map_tool_choice(const json_t *body, json_t *chat, struct api_messages_opts *opts,
                           struct api_err *bad)
{
    const json_t *tc = api__opt(body, "tool_choice"), *tools = api__opt(body, "tools");
    if (!tc)
        return 0;
    if (!json_is_object(tc))
        return wrong(bad, "tool_choice", "an object", tc);
    const json_t *type;
    if (get_str(tc, "type", "tool_choice.type", true, &type, bad))
        return -EINVAL;
    bool single = false;
    if (api__get_bool(tc, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use",
                      &single, bad))
        return refuse(bad, "tool_choice.disable_parallel_tool_use", "expected a boolean");
    bool any = api__str_is(type, "any"), tool = api__str_is(type, "tool");
    if (api__str_is(type, "none"))
        return api__set(chat, "tool_choice", json_string("none"), bad);
    if (api__str_is(type, "auto")) {
        opts->single_tool = single;
        return api__set(chat, "tool_choice", json_string("auto"), bad);
    }
    if (!any && !tool)
        return refuse(bad, "tool_choice.type", "'%s' is not one of 'auto', 'any', 'tool', 'none'",
                      api__quoted(json_string_value(type)).s);
    if (json_array_size(tools) == 0)
        return refuse(bad, "tool_choice.type", "'%s' needs at least one tool in 'tools'",
                      json_string_value(type));
    if (single && api__set(chat, "parallel_tool_calls", json_false(), bad))
        return -ENOMEM;
    if (any)
        return api__set(chat, "tool_choice", json_string("required"), bad);
    const json_t *name;
    if (get_str(tc, "name", "tool_choice.name", true, &name, bad))
        return -EINVAL;
    if (!has_tool(tools, name))
        return refuse(bad, "tool_choice.name", "no tool named '%s' in 'tools'",
                      api__quoted(json_string_value(name)).s);
    return api__set(chat, "tool_choice",
                    json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name), bad);
}

/* ---- the rest ---------------------------------------------------------------------- */

static int map_thinking(const json_t *body, long long max_tokens, bool count,
                        json_t *chat, struct api_err *bad)
{
    const json_t *th = api__opt(body, "thinking");
    if (!th)
        return 0;
    if (!json_is_object(th))
        return wrong(bad, "thinking", "an object", th);
    const json_t *type;
    if (get_str(th, "type", "thinking.type", true, &type, bad))
        return -EINVAL;
    if (api__str_is(type, "adaptive"))
        return 0;   /* the model decides: MiniCPM5's template default, or --thinking */
    bool on = api__str_is(type, "enabled");
    if (!on && !api__str_is(type, "disabled"))
        return refuse(bad, "thinking.type", "'%s' is not one of 'enabled', 'disabled', 'adaptive'",
                      api__quoted(json_string_value(type)).s);
    if (on) {
        long long budget = 0;
        bool given = false;
        if (api__get_int(th, "budget_tokens", LLONG_MIN, LLONG_MAX, &budget, &given, bad))
            return refuse(bad, "thinking.budget_tokens", "expected an integer");
        if (!given)
            return missing(bad, "thinking.budget_tokens");
        if (budget < API_MESSAGES_MIN_THINKING_BUDGET)
            return refuse(bad, "thinking.budget_tokens", "must be >= %d",
                          API_MESSAGES_MIN_THINKING_BUDGET);
        if (!count && budget >= max_tokens)
            return refuse(bad, "thinking.budget_tokens", "must be less than max_tokens (%lld)",
                          max_tokens);
    }
    return api__set(chat, "chat_template_kwargs",
                    json_pack("{s:b}", "enable_thinking", on), bad);
}

static int map_stop(const json_t *body, json_t *chat, struct api_err *bad)
{
    const json_t *s = api__opt(body, "stop_sequences");
    if (!s)
        return 0;
    if (!json_is_array(s))
        return wrong(bad, "stop_sequences", "an array of strings", s);
    if (json_array_size(s) > UT_MAX_STOP)
        return refuse(bad, "stop_sequences", "at most %d stop sequences are accepted",
                      UT_MAX_STOP);
    size_t i, total = 0;
    const json_t *v;
    json_array_foreach(s, i, v) {
        char p[40];
        api__path(p, sizeof p, "stop_sequences.%zu", i);
        if (!json_is_string(v))
            return wrong(bad, p, "a string", v);
        if (json_string_length(v) == 0)
            return refuse(bad, p, "a stop sequence must not be empty");
        total += json_string_length(v);
        if (total > UT_MAX_STOP_BYTES)
            return refuse(bad, p, "the stop sequences are more than %d bytes in all",
                          UT_MAX_STOP_BYTES);
    }
    return api__copy(chat, "stop", s, bad);
}

/* temperature in [0, 1], top_p in (0, 1], top_k >= 0 (Anthropic's ranges). */
static int map_sampling(const json_t *body, json_t *chat, struct api_err *bad)
{
    static const struct {
        const char *key;
        double lo, hi;
        bool lo_open, integer;
    } knobs[] = {
        {"temperature", 0, 1, false, false},
        {"top_p", 0, 1, true, false},
        {"top_k", 0, 1e15, false, true},
    };
    for (size_t i = 0; i < sizeof knobs / sizeof *knobs; i++) {
        const json_t *v = api__opt(body, knobs[i].key);
        if (!v)
            continue;
        if (!json_is_number(v))
            return wrong(bad, knobs[i].key, "a number", v);
        double x = json_number_value(v);
        if (knobs[i].integer && x != floor(x))
            return refuse(bad, knobs[i].key, "expected an integer");
        if (!(knobs[i].lo_open ? x > knobs[i].lo : x >= knobs[i].lo) || !(x <= knobs[i].hi))
            return refuse(bad, knobs[i].key, "must be %s %g%s", knobs[i].lo_open ? "above" : ">=",
                          knobs[i].lo, knobs[i].integer ? "" : " and at most 1");
        if (api__copy(chat, knobs[i].key, v, bad))
            return -ENOMEM;
    }
    return 0;
}

/* output_config.format: a JSON schema the answer must follow (Anthropic's
 * structured outputs), as a JSON response_format. effort is a hint with no
 * MiniCPM5 counterpart. */
static int map_output(const json_t *body, json_t *chat, struct api_err *bad)
{
    const json_t *oc = api__opt(body, "output_config");
    if (!oc)
        return 0;
    if (!json_is_object(oc))
        return wrong(bad, "output_config", "an object", oc);
    const json_t *f = api__opt(oc, "format");
    if (!f)
        return 0;
    if (!json_is_object(f))
        return wrong(bad, "output_config.format", "an object", f);
    if (!api__str_is(json_object_get(f, "type"), "json_schema"))
        return refuse(bad, "output_config.format.type", "expected 'json_schema'");
    const json_t *schema = api__opt(f, "schema");
    if (!json_is_object(schema))
        return wrong(bad, "output_config.format.schema", "an object", schema);
    return api__set(chat, "response_format",
                    json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema", "name",
                              "output", "schema", schema),
                    bad);
}

static int map_scalars(const json_t *body, bool count, long long *max_tokens, json_t *chat,
                       struct api_err *bad)
{
    const json_t *model;
    if (get_str(body, "model", "model", true, &model, bad) ||
        api__copy(chat, "model", model, bad))
        return -EINVAL;
    if (!count) {
        bool given = false;
        if (api__get_int(body, "max_tokens", LLONG_MIN, LLONG_MAX, max_tokens, &given, bad))
            return refuse(bad, "max_tokens", "expected an integer");
        if (!given)
            return missing(bad, "max_tokens");
        if (*max_tokens < 1)
            return refuse(bad, "max_tokens", "must be >= 1");
        if (api__set(chat, "max_tokens", json_integer(*max_tokens), bad))
            return -ENOMEM;
        const json_t *stream = api__opt(body, "stream");
        if (stream && !json_is_boolean(stream))
            return wrong(bad, "stream", "a boolean", stream);
        if (api__copy(chat, "stream", stream, bad))
            return -ENOMEM;
    }
    const json_t *md = api__opt(body, "metadata"), *user = NULL;
    if (md && !json_is_object(md))
        return wrong(bad, "metadata", "an object", md);
    if (md && get_str(md, "user_id", "metadata.user_id", false, &user, bad))
        return -EINVAL;
    return api__copy(chat, "user", user, bad);
}

/* The chat fields this translation writes, by the Anthropic fields they came from. */
static const struct api_param_name param_names[] = {
    {"response_format.json_schema.schema", "output_config.format.schema"},
    {"response_format", "output_config.format"},
    {"stop", "stop_sequences"},
    {"user", "metadata.user_id"},
    {"chat_template_kwargs.enable_thinking", "thinking"},
};

void api_messages_rename(struct api_err *e)
{
    unsigned n;
    int at = 0;
    if (sscanf(e->param, "tools[%u].function.%n", &n, &at) == 1 && at > 0) {
        /* tools[i].function.parameters… -> tools.i.input_schema…, .name -> .name */
        const char *rest = e->param + at;
        bool params = strncmp(rest, "parameters", 10) == 0;
        char p[API_ERR_PARAM_SIZE];
        snprintf(p, sizeof p, "tools.%u.%s%s", n, params ? "input_schema" : "",
                 params ? rest + 10 : rest);
        api_err_set_param(e, p);
        return;
    }
    api_err_rename(e, param_names, sizeof param_names / sizeof *param_names);
}

int api_messages_translate(const json_t *body, bool count_tokens, json_t **chat,
                           struct api_messages_opts *opts, struct api_err *bad)
{
    *chat = NULL;
    *opts = (struct api_messages_opts){0};
    if (!json_is_object(body))
        return api__refuse(bad, NULL, "The request body must be a JSON object.");
    json_t *c = json_object();
    if (!c)
        return api__oom(bad);
    long long max_tokens = 0;
    const json_t *tools = api__opt(body, "tools");
    int rc = map_scalars(body, count_tokens, &max_tokens, c, bad);
    if (rc == 0)
        rc = map_messages(body, c, bad);
    if (rc == 0 && tools)
        rc = map_tools(tools, c, bad);
    if (rc == 0)
        rc = map_tool_choice(body, c, opts, bad);
    if (rc == 0)
        rc = map_thinking(body, max_tokens, count_tokens, c, bad);
    if (rc == 0)
        rc = map_stop(body, c, bad);
    if (rc == 0 && !count_tokens)
        rc = map_sampling(body, c, bad);
    if (rc == 0)
        rc = map_output(body, c, bad);
    if (rc != 0) {
        json_decref(c);
        return bad->error == API_ERR_INTERNAL ? -ENOMEM : -EINVAL;
    }
    *chat = c;
    return 0;
}
