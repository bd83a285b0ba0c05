/* engine/text/template: exact renders (expected strings produced by tests/chat/oracle.py, i.e.
 * Jinja2 on the official template, and checked by hand), the refusals with their
 * param paths, and the Python value printers. The whole-corpus comparison with
 * Jinja2 is the meson test `chat-template` (tests/chat/compare.py). */
#include "engine/text/template-impl.h"
#include "engine/template.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

/* Render the request given as JSON text; returns the prompt (caller frees) or NULL
 * with err/param filled. */
static char *render_json(const char *request, char *err, size_t errlen, char *param,
                         size_t paramlen)
{
    json_error_t je;
    json_t *req = json_loads(request, 0, &je);
    cr_assert_not_null(req, "bad test JSON: %s", je.text);
    struct eng_chat_params p;
    char *out = NULL;
    if (eng_chat_params_from_request(req, &p, err, errlen, param, paramlen) == 0)
        out = eng_chat_render(&p, err, errlen, param, paramlen);
    json_decref(req);
    return out;
}

static void expect_render(const char *request, const char *want)
{
    char err[256], param[128];
    char *got = render_json(request, err, sizeof err, param, sizeof param);
    cr_assert_not_null(got, "refused: %s: %s", param, err);
    cr_expect_str_eq(got, want);
    free(got);
}

static void expect_refused(const char *request, const char *want_param)
{
    char err[256], param[128];
    char *got = render_json(request, err, sizeof err, param, sizeof param);
    cr_expect_null(got, "rendered: %s", got ? got : "");
    free(got);
    cr_expect_str_eq(param, want_param);
    cr_expect(err[0] != '\0', "no reason given");
    cr_expect(strchr(err, '\n') == NULL, "reason is not one line: %s", err);
}

/* ---- exact renders ------------------------------------------------------- */

MCD_TEST(chat, user_thinking_modes)
{
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                  "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                  "\"chat_template_kwargs\":{\"enable_thinking\":true}}",
                  "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                  "\"chat_template_kwargs\":{\"enable_thinking\":false}}",
                  "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                  "\"add_generation_prompt\":false}",
                  "<s><|im_start|>user\nHi<|im_end|>\n");
}

MCD_TEST(chat, developer_and_text_parts)
{
    expect_render("{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                  "{\"type\":\"text\",\"text\":\"b\"}]}],"
                  "\"chat_template_kwargs\":{\"enable_thinking\":false}}",
                  "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nab<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

MCD_TEST(chat, assistant_reasoning)
{
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                  "{\"role\":\"assistant\",\"content\":\"<think>\\nr\\n</think>\\n\\nA\"},"
                  "{\"role\":\"assistant\",\"content\":\"B\",\"reasoning_content\":\"\\ns\\n\"},"
                  "{\"role\":\"assistant\",\"content\":\"C\"}],\"add_generation_prompt\":false}",
                  "<s><|im_start|>user\nq<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\ns\n</think>\n\nB<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\n\n</think>\n\nC<|im_end|>\n");
}

MCD_TEST(chat, tools_calls_and_results)
{
    expect_render(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
        "\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"n\\\": 2, "
        "\\\"x\\\": 1e-5, \\\"ok\\\": true, \\\"l\\\": [\\\"it's\\\", null], \\\"s\\\": \\\"a<b\\\"}\"}}]},"
        "{\"role\":\"tool\",\"content\":\"sunny\"},{\"role\":\"tool\",\"content\":\"warm\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"parameters\":{\"t\":1.0}}}],"
        "\"add_generation_prompt\":false}",
        "<s><|im_start|>system\n# Tools\n\nYou are provided with function signatures within "
        "<tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get\", "
        "\"parameters\": {\"t\": 1.0}}}\n</tools>\n\nTool usage guidelines:\n- You may call zero or "
        "more functions. If no function calls are needed, just answer normally and do not include any "
        "<function ... </function>.\n- When calling a function, return an XML object within <function "
        "... </function> using:\n<function name=\"function-name\"><param name=\"param-name\">"
        "param-value</param></function>\n- param-value may be multi-line. If it contains <, & or "
        "newline characters, wrap it in a CDATA block: <param name=\"param-name\"><![CDATA[...multi-line "
        "value...]]></param><|im_end|>\n<|im_start|>user\nw?<|im_end|>\n<|im_start|>assistant\n<think>\n"
        "\n</think>\n\n<function name=\"get\"><param name=\"city\">Paris</param><param name=\"n\">2"
        "</param><param name=\"x\">1e-05</param><param name=\"ok\">True</param><param name=\"l\">"
        "[\"it's\", None]</param><param name=\"s\"><![CDATA[a<b]]></param></function><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nwarm\n"
        "</tool_response><|im_end|>\n");
}

MCD_TEST(chat, undefined_cases_that_render)
{
    /* No user message, a tool message first, an assistant last: Jinja2 renders. */
    expect_render("{\"messages\":[{\"role\":\"system\",\"content\":\"S\"}]}",
                  "<s><|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n");
    expect_render("{\"messages\":[{\"role\":\"tool\",\"content\":\"r\"}],\"add_generation_prompt\":false}",
                  "<s><|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n");
    expect_render("{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":"
                  "[{\"function\":{}},{\"name\":\"flat\",\"arguments\":\"\"}]}],"
                  "\"add_generation_prompt\":false}",
                  "<s><|im_start|>assistant\n<think>\n\n</think>\n\nx\n<function name=\"\"></function>\n"
                  "<function name=\"flat\"></function><|im_end|>\n");
}

/* ---- refusals ------------------------------------------------------------ */

MCD_TEST(chat, refusals_name_the_param)
{
    expect_refused("[]", "");
    expect_refused("{}", "messages");
    expect_refused("{\"messages\":{}}", "messages");
    expect_refused("{\"messages\":[]}", "messages");
    expect_refused("{\"messages\":[\"hi\"]}", "messages[0]");
    expect_refused("{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    expect_refused("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"function\"}]}",
                   "messages[1].role");
    expect_refused("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                   "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                   "messages[0].content[1]");
    expect_refused("{\"messages\":[{\"role\":\"system\",\"content\":null},{\"role\":\"user\",\"content\":\"x\"}]}",
                   "messages[0].content");
    expect_refused("{\"messages\":[{\"role\":\"system\"}],\"tools\":[{\"a\":1}]}", "messages[0].content");
    expect_refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\"}]}",
                   "messages[1].content");
    expect_refused("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "messages[0].tool_calls");
    expect_refused("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
                   "{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]}",
                   "messages[0].tool_calls[0].function.arguments");
    expect_refused("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}},"
                   "{\"function\":{\"name\":\"g\",\"arguments\":\"[1]\"}}]}]}",
                   "messages[0].tool_calls[1].function.arguments");
    expect_refused("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":7}]}]}",
                   "messages[0].tool_calls[0].arguments");
    expect_refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{\"a\":1}}", "tools");
    expect_refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":1}",
                   "add_generation_prompt");
}

MCD_TEST(chat, refuses_nul)
{
    json_t *req = json_pack("{s:[{s:s, s:s#}]}", "messages", "role", "user", "content", "a\0b", (size_t)3);
    cr_assert_not_null(req);
    struct eng_chat_params p;
    char err[256], param[128];
    cr_assert_eq(eng_chat_params_from_request(req, &p, err, sizeof err, param, sizeof param), 0);
    char *out = eng_chat_render(&p, err, sizeof err, param, sizeof param);
    cr_expect_null(out);
    free(out);
    cr_expect(strstr(err, "NUL") != NULL, "%s", err);
    json_decref(req);
}

MCD_TEST(chat, null_err_buffers)
{
    json_t *req = json_pack("{s:[]}", "messages");
    struct eng_chat_params p;
    cr_assert_eq(eng_chat_params_from_request(req, &p, NULL, 0, NULL, 0), 0);
    cr_expect_null(eng_chat_render(&p, NULL, 0, NULL, 0));
    json_decref(req);
}

/* ---- Python printing ----------------------------------------------------- */

static void expect_py(const char *json, const char *want_str, const char *want_tojson)
{
    json_error_t je;
    json_t *v = json_loads(json, JSON_DECODE_ANY, &je);
    cr_assert_not_null(v, "bad test JSON %s: %s", json, je.text);
    ut_buf b = {0};
    eng__py_str(&b, v);
    cr_expect_str_eq(b.p, want_str, "str(%s)", json);
    ut_buf_free(&b);
    eng__py_tojson(&b, v);
    cr_expect_str_eq(b.p, want_tojson, "json.dumps(%s)", json);
    ut_buf_free(&b);
    json_decref(v);
}

MCD_TEST(chat, python_floats)
{
    /* Expected values from CPython 3.11: str(json.loads(x)), json.dumps(...). */
    expect_py("1.0", "1.0", "1.0");
    expect_py("1e-5", "1e-05", "1e-05");
    expect_py("0.0001", "0.0001", "0.0001");
    expect_py("1e16", "1e+16", "1e+16");
    expect_py("1e15", "1000000000000000.0", "1000000000000000.0");
    expect_py("-0.0", "-0.0", "-0.0");
    expect_py("0.1", "0.1", "0.1");
    expect_py("2.5e-7", "2.5e-07", "2.5e-07");
    expect_py("1.7976931348623157e308", "1.7976931348623157e+308", "1.7976931348623157e+308");
    expect_py("5e-324", "5e-324", "5e-324");
    expect_py("123456789.123", "123456789.123", "123456789.123");
    expect_py("-42", "-42", "-42");
}

MCD_TEST(chat, python_containers_and_strings)
{
    expect_py("[true, false, null, \"it's\", \"a\\\"b\", \"x'y\\\"z\", \"\\n\\t\\\\\"]",
              "[True, False, None, \"it's\", 'a\"b', 'x\\'y\"z', '\\n\\t\\\\']",
              "[true, false, null, \"it's\", \"a\\\"b\", \"x'y\\\"z\", \"\\n\\t\\\\\"]");
    /* ensure_ascii=False keeps DEL, NBSP and ZWJ raw in JSON; repr escapes them. */
    expect_py("{\"k\": {\"\u00e9\": \"\\u0001\\u007f\\u00a0\\u200d\\u4e2d\"}, \"e\": [], \"o\": {}}",
              "{'k': {'\u00e9': '\\x01\\x7f\\xa0\\u200d\u4e2d'}, 'e': [], 'o': {}}",
              "{\"k\": {\"\u00e9\": \"\\u0001\x7f\u00a0\u200d\u4e2d\"}, \"e\": [], \"o\": {}}");
}

MCD_TEST(chat, sha256)
{
    static const struct {
        const char *in;
        const char *hex;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        uint8_t d[32];
        char hex[65];
        eng__chat_sha256(v[i].in, strlen(v[i].in), d);
        for (int j = 0; j < 32; j++)
            snprintf(hex + 2 * j, 3, "%02x", d[j]);
        cr_expect_str_eq(hex, v[i].hex, "sha256(\"%s\")", v[i].in);
    }
    char almost[9060];
    memset(almost, 'x', sizeof almost);
    cr_expect_not(eng_chat_template_is_official(almost, sizeof almost));
    cr_expect_not(eng_chat_template_is_official("", 0));
}
