/* POST /v1/chat/completions: tools and tool_choice.
 *
 * The tools are function definitions whose names must survive the trip through
 * the model's tool-call XML and back through the output parser, so names are held
 * to what that parser accepts and must be unique. tool_choice is read against the
 * validated tools: api_chat_req_parse() (chat-req.c) calls the two in that order
 * and narrows the tools the template shows for a named function. */
#include "api/json-util.h"

#include <errno.h>

/* A function name the model's XML can carry back: what the output parser accepts
 * (1..256 bytes, no '"', '<', '>' or control characters). */
static bool name_ok(const json_t *name)
{
    size_t n = json_string_length(name);
    const unsigned char *s = (const unsigned char *)json_string_value(name);
    if (n == 0 || n > 256)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7F || s[i] == '"' || s[i] == '<' || s[i] == '>')
            return false;
    return true;
}

static const json_t *tool_name(const json_t *tool)
{
    return json_object_get(json_object_get(tool, "function"), "name");
}

int api__check_tools(const json_t *tools, struct api_err *bad)
{
    char p[96];
    if (!json_is_array(tools))
        return api__wrong_type(bad, "tools", "an array", tools);
    if (api__check_max_items(tools, "tools", API_CHAT_MAX_TOOLS, bad))
        return -EINVAL;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        api__path(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t))
            return api__wrong_type(bad, p, "an object", t);
        const json_t *type = json_object_get(t, "type");
        api__path(p, sizeof p, "tools[%zu].type", i);
        if (!type)
            return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
        if (!api__str_is(type, "function"))
            return json_is_string(type)
                       ? api__refuse(bad, p, "Invalid value for '%s': the only tool type is "
                                             "'function'.",
                                     p)
                       : api__wrong_type(bad, p, "a string", type);
        const json_t *fn = json_object_get(t, "function");
        api__path(p, sizeof p, "tools[%zu].function", i);
        if (!fn)
            return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
        if (!json_is_object(fn))
            return api__wrong_type(bad, p, "an object", fn);
        const json_t *name = json_object_get(fn, "name");
        api__path(p, sizeof p, "tools[%zu].function.name", i);
        if (!name)
            return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
        if (!json_is_string(name))
            return api__wrong_type(bad, p, "a string", name);
        if (!name_ok(name))
            return api__refuse(bad, p, "Invalid '%s': a function name is 1 to 256 bytes without "
                                       "quotes, '<', '>' or control characters.",
                               p);
        for (size_t k = 0; k < i; k++)
            if (json_equal(tool_name(json_array_get(tools, k)), name))
                return api__refuse(bad, p, "Invalid '%s': the function '%s' is defined twice "
                                           "(also tools[%zu]).",
                                   p, api__quoted(json_string_value(name)).s, k);
        const char *s = NULL;
        api__path(p, sizeof p, "tools[%zu].function.description", i);
        if (api__get_string(fn, "description", p, &s, bad))
            return -EINVAL;
        const json_t *params = api__opt(fn, "parameters");
        api__path(p, sizeof p, "tools[%zu].function.parameters", i);
        if (params && !json_is_object(params))
            return api__wrong_type(bad, p, "an object", params);
        bool strict = false;
        api__path(p, sizeof p, "tools[%zu].function.strict", i);
        if (api__get_bool(fn, "strict", p, &strict, bad))
            return -EINVAL;
    }
    return 0;
}

/* tool_choice, given the validated tools (NULL or empty when none). Sets the
 * choice and, for a named function, the index of its tool. */
int api__check_tool_choice(const json_t *body, const json_t *tools, struct api_chat_req *r,
                           size_t *named, struct api_err *bad)
{
    bool have = json_array_size(tools) > 0;
    const json_t *tc = api__opt(body, "tool_choice");
    r->tool_choice = have ? API_TOOL_CHOICE_AUTO : API_TOOL_CHOICE_NONE;
    if (!tc)
        return 0;
    if (json_is_string(tc)) {
        if (api__str_is(tc, "none")) {
            r->tool_choice = API_TOOL_CHOICE_NONE;
        } else if (api__str_is(tc, "auto")) {
            r->tool_choice = have ? API_TOOL_CHOICE_AUTO : API_TOOL_CHOICE_NONE;
        } else if (api__str_is(tc, "required")) {
            if (!have)
                return api__refuse(bad, "tool_choice", "Invalid value for 'tool_choice': "
                                                       "'required' needs at least one tool in "
                                                       "'tools'.");
            r->tool_choice = API_TOOL_CHOICE_REQUIRED;
        } else {
            return api__refuse(bad, "tool_choice", "Invalid value for 'tool_choice': '%s' is not "
                                                   "one of 'none', 'auto', 'required' or a "
                                                   "function object.",
                               api__quoted(json_string_value(tc)).s);
        }
        return 0;
    }
    if (!json_is_object(tc))
        return api__wrong_type(bad, "tool_choice", "a string or an object", tc);
    const json_t *type = json_object_get(tc, "type");
    if (!type)
        return api__refuse(bad, "tool_choice.type", "Missing required parameter: "
                                                    "'tool_choice.type'.");
    if (!api__str_is(type, "function"))
        return json_is_string(type)
                   ? api__refuse(bad, "tool_choice.type", "Invalid value for 'tool_choice.type': "
                                                          "only 'function' is supported.")
                   : api__wrong_type(bad, "tool_choice.type", "a string", type);
    const json_t *fn = json_object_get(tc, "function");
    if (!fn)
        return api__refuse(bad, "tool_choice.function", "Missing required parameter: "
                                                        "'tool_choice.function'.");
    if (!json_is_object(fn))
        return api__wrong_type(bad, "tool_choice.function", "an object", fn);
    const json_t *name = json_object_get(fn, "name");
    if (!name)
        return api__refuse(bad, "tool_choice.function.name", "Missing required parameter: "
                                                             "'tool_choice.function.name'.");
    if (!json_is_string(name))
        return api__wrong_type(bad, "tool_choice.function.name", "a string", name);
    for (size_t i = 0; i < json_array_size(tools); i++)
        if (json_equal(tool_name(json_array_get(tools, i)), name)) {
            r->tool_choice = API_TOOL_CHOICE_FUNCTION;
            r->tool_choice_name = json_string_value(name);
            *named = i;
            return 0;
        }
    return api__refuse(bad, "tool_choice.function.name", "Invalid value for "
                                                         "'tool_choice.function.name': no function "
                                                         "named '%s' in 'tools'.",
                       api__quoted(json_string_value(name)).s);
}
