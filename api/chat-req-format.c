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
 * Other surfaces (/v1/responses' text.format, Ollama's format) set the same
 * response_format object and get the same grammar. */
#include "api/json-util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int compile(const char *gbnf, const char *param, struct api_chat_req *r,
                   struct api_bad_request *bad)
{
    char err[256];
    int rc = eng_grammar_parse(gbnf, strlen(gbnf), &r->grammar, err, sizeof err);
    if (rc == -ENOMEM) {
        api_refuse(bad, API_ERR_INTERNAL, NULL, "out of memory while compiling the grammar");
        return rc;
    }
    if (rc)
        return api__refuse(bad, param, "Invalid '%s': %s", param, err);
    return 0;
}

static int refused(struct api_bad_request *bad, const char *param, int rc,
                   const struct eng_gram_refusal *why)
{
    if (rc == -ENOMEM) {
        api_refuse(bad, API_ERR_INTERNAL, NULL, "out of memory while compiling the schema");
        return rc;
    }
    return api__refuse(bad, param, "Invalid schema for '%s': %s.", param, why->message);
}

static int check_response_format(const json_t *rf, struct api_chat_req *r, char **gbnf,
                                 struct api_bad_request *bad)
{
    if (!json_is_object(rf))
        return api__wrong_type(bad, "response_format", "an object", rf);
    const json_t *type = json_object_get(rf, "type");
    if (!type)
        return api__refuse(bad, "response_format.type", "Missing required parameter: "
                                                        "'response_format.type'.");
    if (!json_is_string(type))
        return api__wrong_type(bad, "response_format.type", "a string", type);
    struct eng_gram_refusal why = {0};
    if (api__str_is(type, "text"))
        return 0;
    if (api__str_is(type, "json_object")) {
        r->response_format = API_FORMAT_JSON_OBJECT;
        int rc = eng_gram_from_schema(NULL, gbnf, &why);
        return rc ? refused(bad, "response_format", rc, &why) : 0;
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
    int rc = eng_gram_from_schema(schema, gbnf, &why);
    return rc ? refused(bad, "response_format.json_schema.schema", rc, &why) : 0;
}

int api__check_format(const json_t *body, const json_t *tools, struct api_chat_req *r,
                      struct api_bad_request *bad)
{
    bool parallel = true;
    if (api__get_bool(body, "parallel_tool_calls", "parallel_tool_calls", &parallel, bad))
        return -EINVAL;
    r->parallel_tool_calls = parallel;
    const json_t *rf = api__opt(body, "response_format");
    const json_t *gr = api__opt(body, "grammar");
    char *gbnf = NULL;
    int rc = 0;
    if (gr && !json_is_string(gr))
        return api__wrong_type(bad, "grammar", "a string", gr);
    if (gr && rf && !api__str_is(json_object_get(rf, "type"), "text"))
        return api__refuse(bad, "grammar", "Invalid 'grammar': it cannot be combined with a "
                                           "JSON 'response_format'.");
    if (rf && (rc = check_response_format(rf, r, &gbnf, bad)))
        return rc;
    const char *param = "response_format";
    if (r->tool_choice == API_TOOL_CHOICE_REQUIRED || r->tool_choice == API_TOOL_CHOICE_FUNCTION) {
        free(gbnf);
        gbnf = NULL;
        struct eng_gram_refusal why = {0};
        rc = eng_gram_from_tools(tools, r->tool_choice == API_TOOL_CHOICE_FUNCTION
                                            ? r->tool_choice_name : NULL,
                                 parallel ? 0 : 1, &gbnf, &why);
        if (rc)
            return refused(bad, why.path[0] ? why.path : "tools", rc, &why);
        param = "tools";
    } else if (gr) {
        rc = compile(json_string_value(gr), "grammar", r, bad);
        free(gbnf);
        return rc;
    }
    if (gbnf)
        rc = compile(gbnf, param, r, bad);
    free(gbnf);
    return rc;
}
