/* api/chat-req: tools and tool_choice of POST /v1/chat/completions (auto, none,
 * required, a named function) and the tool definitions, good and bad, with the
 * exact `param` a refusal names. Bodies are
 * parsed back with jansson (tests/chat-api-fx.h), so the tests check JSON, not byte
 * strings. */
#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "engine/ert.h"
#include "tests/utf8.h"

#include "tests/chat-api-fx.h"
#include "tests/check.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tools and tool_choice ------------------------------------------------------------------ */

static const char *tool_name_at(const json_t *tools, size_t i)
{
    return json_string_value(
        json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
}

MCD_TEST(chat_req, tools_auto)
{
    char body[1024];
    snprintf(body, sizeof body, BODY("%s"), TOOLS);
    struct api_chat_req *r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_AUTO);
    cr_assert_eq(json_array_size(r->parser_tools), 2);
    cr_assert_eq(r->chat.tools, r->parser_tools);
    /* The template shows the tools. */
    char err[256], param[128];
    char *prompt = eng_chat_render(&r->chat, err, sizeof err, param, sizeof param);
    cr_assert_not_null(prompt, "%s (%s)", err, param);
    cr_assert_not_null(strstr(prompt, "get_weather"));
    free(prompt);
    api_chat_req_free(r);

    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"auto\""), TOOLS);
    r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_AUTO);
    api_chat_req_free(r);
    r = ok(BODY(",\"tools\":[]"));
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    cr_assert_null(r->parser_tools);
    api_chat_req_free(r);
    r = ok(BODY(",\"tool_choice\":\"auto\""));
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE, "auto without tools is none");
    api_chat_req_free(r);
    r = ok(BODY(",\"tool_choice\":\"none\""));
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    api_chat_req_free(r);
}

MCD_TEST(chat_req, tool_choice_none_hides_the_tools)
{
    char body[1024];
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"none\""), TOOLS);
    struct api_chat_req *r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_NONE);
    cr_assert_null(r->parser_tools);
    cr_assert_null(r->chat.tools);
    char *prompt = eng_chat_render(&r->chat, NULL, 0, NULL, 0);
    cr_assert_not_null(prompt);
    cr_assert_null(strstr(prompt, "get_weather"));
    free(prompt);
    api_chat_req_free(r);
}

MCD_TEST(chat_req, tool_choice_required_and_named)
{
    char body[1024];
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"required\""), TOOLS);
    struct api_chat_req *r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_REQUIRED);
    cr_assert_eq(json_array_size(r->parser_tools), 2);
    api_chat_req_free(r);

    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}}"),
             TOOLS);
    r = ok(body);
    cr_assert_eq(r->tool_choice, API_TOOL_CHOICE_FUNCTION);
    cr_assert_str_eq(r->tool_choice_name, "b");
    cr_assert_eq(json_array_size(r->parser_tools), 1);
    cr_assert_str_eq(tool_name_at(r->parser_tools, 0), "b");
    char *prompt = eng_chat_render(&r->chat, NULL, 0, NULL, 0);
    cr_assert_not_null(prompt);
    cr_assert_null(strstr(prompt, "get_weather"), "only the named function is shown");
    free(prompt);
    api_chat_req_free(r);

    bad_as(BODY(",\"tool_choice\":\"required\""), "tool_choice", "needs at least one tool");
    bad(BODY(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}}"),
        "tool_choice.function.name");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"always\""), TOOLS);
    bad_as(body, "tool_choice", "'always' is not one of");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":5"), TOOLS);
    bad(body, "tool_choice");
    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"zz\"}}"),
             TOOLS);
    bad_as(body, "tool_choice.function.name", "no function named 'zz'");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":{\"type\":\"function\"}"), TOOLS);
    bad(body, "tool_choice.function");
    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":1}}"), TOOLS);
    bad(body, "tool_choice.function.name");
    snprintf(body, sizeof body,
             BODY("%s,\"tool_choice\":{\"type\":\"custom\",\"function\":{\"name\":\"b\"}}"),
             TOOLS);
    bad(body, "tool_choice.type");
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":{\"function\":{\"name\":\"b\"}}"),
             TOOLS);
    bad(body, "tool_choice.type");
}

MCD_TEST(chat_req, tool_definitions)
{
    /* At most 128 tools, as OpenAI. */
    for (int n = 128; n <= 129; n++) {
        char *body = malloc(200 * 64 + 256), *at = body;
        cr_assert_not_null(body);
        at += sprintf(at, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                          "\"u\"}],\"tools\":[");
        for (int i = 0; i < n; i++)
            at += sprintf(at, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}",
                          i ? "," : "", i);
        strcpy(at, "]}");
        if (n == 128)
            api_chat_req_free(ok(body));
        else
            bad_as(body, "tools", "maximum length 128");
        free(body);
    }

    bad_as(BODY(",\"tools\":{}"), "tools", "expected an array");
    bad(BODY(",\"tools\":[5]"), "tools[0]");
    bad(BODY(",\"tools\":[{\"function\":{\"name\":\"f\"}}]"), "tools[0].type");
    bad_as(BODY(",\"tools\":[{\"type\":\"retrieval\",\"function\":{\"name\":\"f\"}}]"),
           "tools[0].type", "'function'");
    bad(BODY(",\"tools\":[{\"type\":\"function\"}]"), "tools[0].function");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":[]}]"), "tools[0].function");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{}}]"), "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]"),
        "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a<b\"}}]"),
        "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\\\"b\"}}]"),
        "tools[0].function.name");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\\nb\"}}]"),
        "tools[0].function.name");
    bad_as(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":"
                "\"function\",\"function\":{\"name\":\"f\"}}]"),
           "tools[1].function.name", "defined twice");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
             "[]}}]"),
        "tools[0].function.parameters");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":"
             "3}}]"),
        "tools[0].function.description");
    bad(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":"
             "\"yes\"}}]"),
        "tools[0].function.strict");
    api_chat_req_free(ok(BODY(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                              "\"ns.tool-1_x\",\"parameters\":null,\"strict\":true}}]")));
}

/* ---- structured outputs (chat-req-format.c) ------------------------------------- */

MCD_TEST(chat_format, response_format_and_enforced_tool_choice_give_a_grammar)
{
    struct api_chat_req *r = ok(BODY(",\"response_format\":{\"type\":\"text\"}"));
    cr_assert_null(r->grammar);
    cr_assert_eq(r->response_format, API_FORMAT_TEXT);
    api_chat_req_free(r);
    r = ok(BODY(",\"response_format\":{\"type\":\"json_object\"}"));
    cr_assert_not_null(r->grammar);
    cr_assert_eq(r->response_format, API_FORMAT_JSON_OBJECT);
    api_chat_req_free(r);
    r = ok(BODY(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                "\"a-b_1\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
                "{\"x\":{\"type\":\"integer\"}}}}}"));
    cr_assert_not_null(r->grammar);
    cr_assert_eq(r->response_format, API_FORMAT_JSON_SCHEMA);
    api_chat_req_free(r);
    char body[1024];
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"required\""), TOOLS);
    r = ok(body);
    cr_assert_not_null(r->grammar, "required is enforced");
    cr_assert(r->parallel_tool_calls);
    api_chat_req_free(r);
    snprintf(body, sizeof body, BODY("%s,\"tool_choice\":\"auto\",\"parallel_tool_calls\":false"),
             TOOLS);
    r = ok(body);
    cr_assert_null(r->grammar, "auto is not constrained");
    cr_assert(!r->parallel_tool_calls);
    api_chat_req_free(r);
    r = ok(BODY(",\"grammar\":\"root ::= [a-z]+\\n\""));
    cr_assert_not_null(r->grammar);
    api_chat_req_free(r);
}

MCD_TEST(chat_format, refusals_name_param)
{
    bad(BODY(",\"response_format\":\"json\""), "response_format");
    bad(BODY(",\"response_format\":{}"), "response_format.type");
    bad(BODY(",\"response_format\":{\"type\":7}"), "response_format.type");
    bad(BODY(",\"response_format\":{\"type\":\"yaml\"}"), "response_format.type");
    bad(BODY(",\"response_format\":{\"type\":\"json_schema\"}"), "response_format.json_schema");
    bad(BODY(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}"),
        "response_format.json_schema.name");
    bad(BODY(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a b\"}}"),
        "response_format.json_schema.name");
    bad(BODY(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\","
             "\"schema\":[]}}"),
        "response_format.json_schema.schema");
    bad_as(BODY(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\","
                "\"schema\":{\"type\":\"object\",\"properties\":{\"p\":{\"not\":{}}}}}}"),
           "response_format.json_schema.schema", "'not' at #/properties/p");
    bad(BODY(",\"parallel_tool_calls\":1"), "parallel_tool_calls");
    bad(BODY(",\"grammar\":3"), "grammar");
    bad_as(BODY(",\"grammar\":\"root ::= root\\n\""), "grammar", "left recursion");
    bad(BODY(",\"grammar\":\"root ::= \\\"a\\\"\\n\",\"response_format\":{\"type\":"
             "\"json_object\"}"),
        "grammar");
}
