/* POST /v1/chat/completions: structured outputs — response_format, the enforced
 * tool_choice, and llama.cpp's `grammar` — turned into one grammar for the
 * sampler (engine/grammar.h).
 *
 *  - response_format {"type":"text"} (or absent): no grammar; {"type":
 *    "json_object"}: any JSON object; {"type":"json_schema","json_schema":{"name",
 *    "schema","strict"}}: the schema compiled (OpenAI's shape; a schema the
 *    compiler does not support is refused with the keyword and its path in the
 *    message, param "response_format.json_schema.schema").
 *  - tool_choice "required" / a named function: one or more calls (parallel_tool_calls
 *    false: exactly one) in MiniCPM5's XML, whose parameters follow each tool's
 *    schema; it wins over response_format, which then shapes nothing (a tool call is
 *    the answer). "auto" and "none" are unconstrained.
 *  - grammar: GBNF text (llama.cpp's server field), exclusive with response_format.
 *  - llama.cpp's two schema extensions, enforced as json_schema is (never accepted
 *    and ignored): a top-level `json_schema` (a schema object; exclusive with
 *    `grammar` and a JSON response_format), and a `schema` inside
 *    {"type":"json_object"} (the schema instead of any object).
 * Other surfaces (/v1/responses' text.format, Ollama's format) set the same
 * response_format object and get the same grammar. */
#include "api/json-util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int refused(struct api_err *bad, const char *param, int rc,
                   const struct eng_gram_refusal *why)
{
    if (rc == -ENOMEM)
        return api_refuse(bad, API_ERR_INTERNAL, NULL,
                          "out of memory while compiling the schema");
    return api__refuse(bad, param, "Invalid schema for '%s': %s.", param, why->message);
}

/* What the grammar is compiled from, kept by the parse (borrowing from the body)
 * until api_chat_req_grammar() compiles it. */
static void set_source(struct api_chat_req *r, enum api_gram_kind kind, const json_t *json,
                       const char *param)
{
    r->gsrc_.kind = kind;
    r->gsrc_.json = json;
    r->gsrc_.param = param;
}

static int check_response_format(const json_t *rf, struct api_chat_req *r,
                                 struct api_err *bad)
{
    if (!json_is_object(rf))
        return api__wrong_type(bad, "response_format", "an object", rf);
    const json_t *type = json_object_get(rf, "type");
    if (!type)
        return api__refuse(bad, "response_format.type", "Missing required parameter: "
                                                        "'response_format.type'.");
    if (!json_is_string(type))
        return api__wrong_type(bad, "response_format.type", "a string", type);
    if (api__str_is(type, "text"))
        return 0;
    if (api__str_is(type, "json_object")) {
        const json_t *schema = api__opt(rf, "schema");   /* llama.cpp's extension */
        if (schema && !json_is_object(schema))
            return api__wrong_type(bad, "response_format.schema", "an object", schema);
        r->response_format = API_FORMAT_JSON_OBJECT;
        set_source(r, API_GRAM_SCHEMA, schema, schema ? "response_format.schema"
                                                      : "response_format");
        return 0;
    }
    if (!api__str_is(type, "json_schema"))
        return api__refuse(bad, "response_format.type", "Invalid value for "
                                                        "'response_format.type': '%s' is not "
                                                        "one of 'text', 'json_object' or "
                                                        "'json_schema'.",
                           api__quoted(json_string_value(type)).s);
    const json_t *js = json_object_get(rf, "json_schema");
    if (!js)
        return api__refuse(bad, "response_format.json_schema", "Missing required parameter: "
                                                               "'response_format.json_schema'.");
    if (!json_is_object(js))
        return api__wrong_type(bad, "response_format.json_schema", "an object", js);
    const json_t *name = json_object_get(js, "name");
    if (!name)
        return api__refuse(bad, "response_format.json_schema.name", "Missing required "
                                                                    "parameter: "
                                                                    "'response_format."
                                                                    "json_schema.name'.");
    if (!json_is_string(name))
        return api__wrong_type(bad, "response_format.json_schema.name", "a string", name);
    size_t n = json_string_length(name);
    const char *s = json_string_value(name);
    if (n == 0 || n > 64 || strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789_-") != n)
        return api__refuse(bad, "response_format.json_schema.name", "Invalid "
                                                                    "'response_format."
                                                                    "json_schema.name': "
                                                                    "1 to 64 of a-z, A-Z, 0-9, "
                                                                    "'_' and '-'.");
    bool strict = false;
    if (api__get_bool(js, "strict", "response_format.json_schema.strict", &strict, bad) ||
        api__get_string(js, "description", "response_format.json_schema.description",
                        &(const char *){NULL}, bad))
        return -EINVAL;
    const json_t *schema = api__opt(js, "schema");
    if (schema && !json_is_object(schema))
        return api__wrong_type(bad, "response_format.json_schema.schema", "an object", schema);
    r->response_format = API_FORMAT_JSON_SCHEMA;
    /* no schema: any JSON value is the schema {}; json_object's grammar is close
     * enough and always finishes */
    set_source(r, API_GRAM_SCHEMA, schema, "response_format.json_schema.schema");
    return 0;
}

int api__check_format(const json_t *body, const json_t *tools, struct api_chat_req *r,
                      const struct api_chat_limits *lim, struct api_err *bad)
{
    bool parallel = true;
    if (api__get_bool(body, "parallel_tool_calls", "parallel_tool_calls", &parallel, bad))
        return -EINVAL;
    r->parallel_tool_calls = parallel;
    const json_t *rf = api__opt(body, "response_format");
    const json_t *gr = api__opt(body, "grammar");
    const json_t *js = api__opt(body, "json_schema");   /* llama.cpp's field */
    int rc = 0;
    if (gr && !json_is_string(gr))
        return api__wrong_type(bad, "grammar", "a string", gr);
    if (js && !json_is_object(js))
        return api__wrong_type(bad, "json_schema", "an object (a JSON Schema)", js);
    bool json_rf = rf && !api__str_is(json_object_get(rf, "type"), "text");
    if (gr && json_rf)
        return api__refuse(bad, "grammar", "Invalid 'grammar': it cannot be combined with a "
                                           "JSON 'response_format'.");
    if (js && (gr || json_rf))
        return api__refuse(bad, "json_schema", "Invalid 'json_schema': it cannot be combined "
                                               "with '%s'.", gr ? "grammar" : "response_format");
    if (rf && (rc = check_response_format(rf, r, bad)))
        return rc;
    if (js) {
        r->response_format = API_FORMAT_JSON_SCHEMA;
        set_source(r, API_GRAM_SCHEMA, js, "json_schema");
    }
    if (r->tool_choice == API_TOOL_CHOICE_REQUIRED || r->tool_choice == API_TOOL_CHOICE_FUNCTION) {
        set_source(r, API_GRAM_TOOLS, tools, "tools");
        r->gsrc_.max_calls = parallel ? 0 : 1;
    } else if (gr) {
        set_source(r, API_GRAM_GBNF, gr, "grammar");
    }
    if (lim && lim->grammar)
        r->gsrc_.lim = *lim->grammar;
    else
        eng_gram_limits_default(&r->gsrc_.lim);
    return lim && lim->defer_grammar ? 0 : api_chat_req_grammar(r, NULL, bad);
}

bool api_chat_req_grammar_pending(const struct api_chat_req *r)
{
    return r->gsrc_.kind != API_GRAM_NONE;
}

const char *api_chat_req_grammar_param(const struct api_chat_req *r) { return r->gsrc_.param; }

int api_chat_req_grammar(struct api_chat_req *r, const eng_gram_vocab *v,
                         struct api_err *bad)
{
    struct api_gram_src *src = &r->gsrc_;
    const char *param = src->param;
    char *gbnf = NULL, err[256] = "";
    struct eng_gram_refusal why = {0};
    int rc = 0;
    switch (src->kind) {
    case API_GRAM_NONE:
        return 0;
    case API_GRAM_SCHEMA:
        rc = eng_gram_from_schema(src->json, &gbnf, &why);
        if (rc)
            return refused(bad, param, rc, &why);
        break;
    case API_GRAM_TOOLS:
        rc = eng_gram_from_tools(src->json, r->tool_choice == API_TOOL_CHOICE_FUNCTION
                                                ? r->tool_choice_name : NULL,
                                 src->max_calls, &gbnf, &why);
        if (rc)
            return refused(bad, why.path[0] ? why.path : "tools", rc, &why);
        break;
    case API_GRAM_GBNF:
        break;
    }
    const char *text = gbnf ? gbnf : json_string_value(src->json);
    size_t len = gbnf ? strlen(gbnf) : json_string_length(src->json);
    rc = eng_grammar_compile(text, len, &src->lim, &r->grammar, err, sizeof err);
    free(gbnf);
    if (rc == 0 && v && (rc = eng_gram_check_start(r->grammar, v, err, sizeof err)) != 0) {
        eng_grammar_free(r->grammar);
        r->grammar = NULL;
    }
    src->kind = API_GRAM_NONE;
    if (rc == -ENOMEM)
        return api_refuse(bad, API_ERR_INTERNAL, NULL, "out of memory while compiling the grammar");
    if (rc)
        return api__refuse(bad, param, "Invalid '%s': %s", param, err);
    return 0;
}
