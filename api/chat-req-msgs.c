/* POST /v1/chat/completions: the messages array.
 *
 * Each message is checked for a role OpenAI knows and the fields that role may
 * carry: content as a string or text parts (this model reads text only, so an
 * image or audio part is refused by name), an assistant's tool_calls with their
 * arguments a JSON object, a tool message's tool_call_id. Called first by
 * api_chat_req_parse() (chat-req.c), which owns the order of the checks. */
#include "api/json-util.h"

#include <errno.h>
#include <string.h>

static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};

/* Content given as an array of parts: only {"type":"text","text":…}. Images and
 * audio cannot be given to this text-only model, and the refusal names the part. */
static int check_parts(const json_t *content, const char *at, struct api_err *bad)
{
    char p[128];
    size_t j;
    const json_t *part;
    json_array_foreach(content, j, part) {
        api__path(p, sizeof p, "%s[%zu]", at, j);
        if (!json_is_object(part))
            return api__wrong_type(bad, p, "an object", part);
        const json_t *type = json_object_get(part, "type");
        api__path(p, sizeof p, "%s[%zu].type", at, j);
        if (!type)
            return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
        if (!json_is_string(type))
            return api__wrong_type(bad, p, "a string", type);
        if (!api__str_is(type, "text"))
            return api__refuse(bad, p, "Invalid value for '%s': this model reads text only, so "
                                       "content parts must be of type 'text' (got '%s').",
                               p, api__quoted(json_string_value(type)).s);
        const json_t *text = json_object_get(part, "text");
        api__path(p, sizeof p, "%s[%zu].text", at, j);
        if (!text)
            return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
        if (!json_is_string(text))
            return api__wrong_type(bad, p, "a string", text);
    }
    return 0;
}

/* A tool call in an assistant message: {"id", "type":"function", "function":{"name",
 * "arguments"}}, arguments a JSON string of an object ("" for none). An object given
 * directly is accepted too: the template wants the object anyway. */
static int check_tool_call(const json_t *call, const char *at, struct api_err *bad)
{
    char p[128];
    if (!json_is_object(call))
        return api__wrong_type(bad, at, "an object", call);
    const char *s = NULL;
    api__path(p, sizeof p, "%s.id", at);
    if (api__get_string(call, "id", p, &s, bad))
        return -EINVAL;
    const json_t *type = api__opt(call, "type");
    api__path(p, sizeof p, "%s.type", at);
    if (type && !api__str_is(type, "function"))
        return json_is_string(type)
                   ? api__refuse(bad, p, "Invalid value for '%s': the only tool call type is "
                                         "'function'.",
                                 p)
                   : api__wrong_type(bad, p, "a string", type);
    const json_t *fn = json_object_get(call, "function");
    api__path(p, sizeof p, "%s.function", at);
    if (!fn || json_is_null(fn))
        return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
    if (!json_is_object(fn))
        return api__wrong_type(bad, p, "an object", fn);
    const json_t *name = json_object_get(fn, "name");
    api__path(p, sizeof p, "%s.function.name", at);
    if (!name)
        return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
    if (!json_is_string(name))
        return api__wrong_type(bad, p, "a string", name);
    const json_t *args = api__opt(fn, "arguments");
    api__path(p, sizeof p, "%s.function.arguments", at);
    if (!args || json_is_object(args))
        return 0;
    if (!json_is_string(args))
        return api__wrong_type(bad, p, "a string", args);
    const char *a = json_string_value(args);
    size_t n = json_string_length(args);
    if (strspn(a, " \t\r\n") == n)
        return 0;
    json_error_t je;
    json_t *parsed = json_loadb(a, n, JSON_DECODE_ANY, &je);
    bool is_obj = json_is_object(parsed);
    json_decref(parsed);
    if (!parsed)
        return api__refuse(bad, p, "Invalid value for '%s': not valid JSON (%s at character "
                                   "%d).",
                           p, je.text, je.position);
    if (!is_obj)
        return api__refuse(bad, p, "Invalid value for '%s': the arguments must be a JSON "
                                   "object.",
                           p);
    return 0;
}

static int check_message(const json_t *m, size_t i, struct api_err *bad)
{
    char at[64], p[128];
    api__path(at, sizeof at, "messages[%zu]", i);
    if (!json_is_object(m))
        return api__wrong_type(bad, at, "an object", m);

    const json_t *role = json_object_get(m, "role");
    api__path(p, sizeof p, "%s.role", at);
    if (!role)
        return api__refuse(bad, p, "Missing required parameter: '%s'.", p);
    if (!json_is_string(role))
        return api__wrong_type(bad, p, "a string", role);
    size_t r = 0;
    while (r < sizeof roles / sizeof *roles && !api__str_is(role, roles[r]))
        r++;
    if (r == sizeof roles / sizeof *roles)
        return api__refuse(bad, p, "Invalid value for '%s': '%s' is not one of 'system', "
                                   "'developer', 'user', 'assistant', 'tool'.",
                           p, api__quoted(json_string_value(role)).s);
    bool assistant = strcmp(roles[r], "assistant") == 0;

    const char *s = NULL;
    api__path(p, sizeof p, "%s.name", at);
    if (api__get_string(m, "name", p, &s, bad))
        return -EINVAL;

    const json_t *calls = api__opt(m, "tool_calls");
    api__path(p, sizeof p, "%s.tool_calls", at);
    if (calls && !assistant)
        return api__refuse(bad, p, "Invalid parameter: only assistant messages can have "
                                   "'tool_calls' ('%s' is a %s message).",
                           p, roles[r]);
    if (calls && !json_is_array(calls))
        return api__wrong_type(bad, p, "an array", calls);
    size_t j;
    const json_t *call;
    json_array_foreach(calls, j, call) {
        api__path(p, sizeof p, "%s.tool_calls[%zu]", at, j);
        if (check_tool_call(call, p, bad))
            return -EINVAL;
    }

    const json_t *content = api__opt(m, "content");
    api__path(p, sizeof p, "%s.content", at);
    if (!content && !(assistant && json_array_size(calls) > 0))
        return api__refuse(bad, p, assistant ? "Invalid value for '%s': an assistant message needs "
                                               "'content' or 'tool_calls'."
                                             : "Missing required parameter: '%s'.",
                           p);
    if (content && json_is_array(content) && check_parts(content, p, bad))
        return -EINVAL;
    if (content && !json_is_string(content) && !json_is_array(content))
        return api__wrong_type(bad, p, "a string or an array of text parts", content);

    if (assistant) {
        api__path(p, sizeof p, "%s.reasoning_content", at);
        if (api__get_string(m, "reasoning_content", p, &s, bad))
            return -EINVAL;
    }
    if (strcmp(roles[r], "tool") == 0) {
        api__path(p, sizeof p, "%s.tool_call_id", at);
        if (api__get_string(m, "tool_call_id", p, &s, bad))
            return -EINVAL;
    }
    return 0;
}

int api__check_messages(const json_t *body, struct api_err *bad)
{
    const json_t *msgs = api__opt(body, "messages");
    if (!msgs)
        return api__refuse(bad, "messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs))
        return api__wrong_type(bad, "messages", "an array", msgs);
    if (json_array_size(msgs) == 0)
        return api__refuse(bad, "messages", "Invalid 'messages': empty array. Expected an array "
                                            "with minimum length 1, but got an empty array "
                                            "instead.");
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        if (check_message(m, i, bad))
            return -EINVAL;
    }
    return 0;
}
