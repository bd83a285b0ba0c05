/* Output parser tests. The corpus below is realistic and adversarial MiniCPM5
 * output; each case states what the client should see (content, reasoning_content,
 * tool calls). Then the property the API relies on when it streams: for every case,
 * and for every prefix of every case (output cut off anywhere), the concatenated
 * deltas are the same whether the text arrives in one piece, one byte at a time, or
 * in seeded random pieces; every delta is non-empty valid UTF-8 and every arguments
 * string is a JSON object, but a cut call's (the last delta), which is one left open;
 * no content holds tool-call markup the output cut. */
#include "tests/utf8.h"
#include "engine/outparse.h"
#include "tests/check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"},"
    "\"append\":{\"type\":\"boolean\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"set\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"n\":{\"type\":\"number\"},\"obj\":{\"type\":\"object\"},\"arr\":{\"type\":\"array\"},"
    "\"nul\":{\"type\":\"null\"},\"maybe\":{\"type\":[\"integer\",\"null\"]},"
    "\"any\":{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"string\"}]},\"free\":{}}}}},"
    "{\"name\":\"flat_fn\",\"parameters\":{\"properties\":{\"x\":{\"type\":\"integer\"}}}}]";

/* ---- running the parser ------------------------------------------------------------ */

struct result {
    char *content, *reasoning, *calls;  /* calls: "name args" lines joined by '\n' */
    int ncalls;                          /* complete ones */
    bool saw, cut;                       /* cut: the last call was cut */
};

static void result_free(struct result *r)
{
    free(r->content);
    free(r->reasoning);
    free(r->calls);
}

static void append(char **dst, const char *s, const char *sep)
{
    size_t a = *dst ? strlen(*dst) : 0, b = strlen(s), c = *dst && sep ? strlen(sep) : 0;
    char *d = realloc(*dst, a + b + c + 1);
    cr_assert(d);
    if (c)
        memcpy(d + a, sep, c);
    memcpy(d + a + c, s, b + 1);
    *dst = d;
}

static void collect(struct result *r, struct eng_delta_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        struct eng_delta *d = &l->items[i];
        if (d->kind == ENG_DELTA_TOOL_CALL) {
            cr_assert_eq(d->index, r->ncalls, "tool call index");
            cr_assert(d->name && d->arguments && d->text == NULL);
            cr_assert(mcd_utf8_valid(d->name) && mcd_utf8_valid(d->arguments));
            cr_assert(!r->cut, "a delta after a cut call");
            json_t *j = json_loads(d->arguments, 0, NULL);
            cr_assert(d->cut ? !j && d->arguments[0] == '{' : json_is_object(j),
                      "arguments %s a JSON object: %s", d->cut ? "cut, yet" : "not", d->arguments);
            json_decref(j);
            r->ncalls += !d->cut;
            r->cut = d->cut;
            char line[4096];
            snprintf(line, sizeof line, "%s %s%s", d->name, d->arguments, d->cut ? " (cut)" : "");
            append(&r->calls, line, "\n");
        } else {
            cr_assert(d->text && d->text[0] != '\0', "empty text delta");
            cr_assert(mcd_utf8_valid(d->text), "invalid UTF-8 in a delta");
            append(d->kind == ENG_DELTA_CONTENT ? &r->content : &r->reasoning, d->text, NULL);
        }
    }
    eng_delta_list_clear(l);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* mode 0: one piece; 1: one byte at a time; 2+: random pieces seeded by mode
 * (odd seeds: small pieces, even: up to 64 bytes, with empty feeds mixed in). */
static struct result run_parser(const json_t *tools, bool in_think, const char *text, size_t len,
                                uint64_t mode)
{
    struct result r = {0};
    struct eng_delta_list l = {0};
    eng_outparse *p = eng_outparse_new(tools, in_think);
    cr_assert(p);
    uint64_t seed = mode * 0x9E3779B97F4A7C15ull + 1;
    size_t at = 0;
    while (at < len) {
        size_t n = mode == 0 ? len : mode == 1 ? 1 : (size_t)(rng_next(&seed) % (mode & 1 ? 5 : 65));
        if (n > len - at)
            n = len - at;
        cr_assert_eq(eng_outparse_feed(p, text + at, n, &l), 0);
        at += n;
        collect(&r, &l);
    }
    cr_assert_eq(eng_outparse_finish(p, &l), 0);
    collect(&r, &l);
    r.saw = eng_outparse_saw_tool_call(p);
    cr_assert_eq(r.saw, r.ncalls > 0);
    eng_outparse_free(p);
    return r;
}

static const char *nz(const char *s) { return s ? s : ""; }

static void assert_same(const struct result *a, const struct result *b, const char *what,
                        size_t len, uint64_t mode)
{
    cr_assert_str_eq(nz(a->content), nz(b->content), "%s (len %zu, mode %llu): content", what, len,
                     (unsigned long long)mode);
    cr_assert_str_eq(nz(a->reasoning), nz(b->reasoning), "%s (len %zu, mode %llu): reasoning", what,
                     len, (unsigned long long)mode);
    cr_assert_str_eq(nz(a->calls), nz(b->calls), "%s (len %zu, mode %llu): calls", what, len,
                     (unsigned long long)mode);
}

/* ---- the corpus ---------------------------------------------------------------------- */

struct ocase {
    const char *name;
    bool tools, in_think;
    const char *text;
    const char *content, *reasoning, *calls;  /* expected; NULL = none */
};

#define WF "<function name=\"write_file\">"
#define GW "<function name=\"get_weather\">"
#define SET "<function name=\"set\">"
#define P(k, v) "<param name=\"" k "\">" v "</param>"
#define EF "</function>"

static const struct ocase corpus[] = {
    /* plain answers */
    {"plain", 0, 0, "Hello, world!", "Hello, world!", NULL, NULL},
    {"multiline", 0, 0, "Line 1\n\nLine 2\n", "Line 1\n\nLine 2\n", NULL, NULL},
    {"empty", 0, 0, "", NULL, NULL, NULL},
    {"only whitespace", 0, 0, "  \n", "  \n", NULL, NULL},
    {"markdown code", 1, 0, "```c\nif (a < b && c > d) x = a<<2;\n```\n",
     "```c\nif (a < b && c > d) x = a<<2;\n```\n", NULL, NULL},
    {"html in content", 1, 0, "Use <b>bold</b> and <param> tags, <function>.",
     "Use <b>bold</b> and <param> tags, <function>.", NULL, NULL},
    {"lt at end", 0, 0, "1 <", "1 <", NULL, NULL},
    {"unicode", 0, 0, "Привет, мир! 你好 🌍 é", "Привет, мир! 你好 🌍 é", NULL, NULL},
    {"crlf", 0, 0, "a\r\nb\r\n", "a\r\nb\r\n", NULL, NULL},
    {"im_end leaked", 0, 0, "Done.<|im_end|>", "Done.<|im_end|>", NULL, NULL},
    {"invalid utf8", 0, 0, "bad \xff\xfe bytes \xe2\x82", "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes \xEF\xBF\xBD",
     NULL, NULL},
    {"overlong and surrogate", 0, 0, "\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80",
     "\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD",
     NULL, NULL},
    /* reasoning */
    {"think + answer", 0, 0, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "The answer is 4.",
     "Let me think.", NULL},
    {"empty think", 0, 0, "<think>\n\n</think>\n\nHi", "Hi", NULL, NULL},
    {"in_think", 0, 1, "I should add.\n2 + 2 = 4\n</think>\n\n2+2=4", "2+2=4", "I should add.\n2 + 2 = 4",
     NULL},
    {"in_think truncated", 0, 1, "Still thinking about it\n", NULL, "Still thinking about it", NULL},
    {"in_think unicode", 0, 1, "\nДумаю… 🤔\n</think>\nОтвет", "Ответ", "Думаю… 🤔", NULL},
    {"leading ws then think", 0, 0, "\n <think>x</think>y", "y", "x", NULL},
    {"think later is content", 0, 0, "Answer: <think>no</think> ok", "Answer: <think>no</think> ok", NULL,
     NULL},
    {"stray close", 0, 0, "Hello</think>\n\nworld", "Hello</think>\n\nworld", NULL, NULL},
    {"stray close at start", 0, 0, "</think>\n\nworld", "</think>\n\nworld", NULL, NULL},
    {"second think block", 0, 0, "<think>a</think>b<think>c</think>", "b<think>c</think>", "a", NULL},
    {"think inside in_think", 0, 1, "<think>nested</think>out", "out", "<think>nested", NULL},
    {"close twice", 0, 0, "<think>a</think>b</think>c", "b</think>c", "a", NULL},
    {"thinking tag", 0, 0, "<thinking>hmm</thinking>", "<thinking>hmm</thinking>", NULL, NULL},
    {"think cut", 0, 0, "<thi", NULL, NULL, NULL},
    {"unthink cut", 0, 0, "<think>a b</thi", NULL, "a b", NULL},
    {"think unclosed", 0, 0, "<think>\nlong reasoning <b>x</b> a<b", NULL, "long reasoning <b>x</b> a<b", NULL},
    {"reasoning lt ws", 0, 1, "a  <  b </think> c", "c", "a  <  b", NULL},
    {"tool markup in reasoning", 1, 1, "hmm " GW EF, NULL, "hmm " GW EF, NULL},
    {"unclosed think with call", 1, 0, "<think>a" GW EF, NULL, "a" GW EF, NULL},
    /* tool calls */
    {"one call", 1, 0, GW P("city", "Paris") EF, NULL, NULL, "get_weather {\"city\":\"Paris\"}"},
    {"typed int", 1, 0, GW P("city", "Paris") P("days", "3") EF, NULL, NULL,
     "get_weather {\"city\":\"Paris\",\"days\":3}"},
    {"int mismatch", 1, 0, GW P("days", "three") EF, NULL, NULL, "get_weather {\"days\":\"three\"}"},
    {"real for integer", 1, 0, GW P("days", "3.5") EF, NULL, NULL, "get_weather {\"days\":\"3.5\"}"},
    {"int with spaces", 1, 0, GW P("days", " 4 ") EF, NULL, NULL, "get_weather {\"days\":4}"},
    {"int in cdata", 1, 0, GW P("days", "<![CDATA[5]]>") EF, NULL, NULL, "get_weather {\"days\":5}"},
    {"think + call", 1, 0, "<think>\nNeed weather.\n</think>\n\n" GW P("city", "Tokyo") EF, NULL,
     "Need weather.", "get_weather {\"city\":\"Tokyo\"}"},
    {"in_think + call", 1, 1, "plan\n</think>\n\n" GW P("city", "Paris") EF, NULL, "plan",
     "get_weather {\"city\":\"Paris\"}"},
    {"text then call", 1, 0, "Let me check.\n" GW P("city", "Oslo") EF, "Let me check.", NULL,
     "get_weather {\"city\":\"Oslo\"}"},
    {"two calls", 1, 0, GW P("city", "Paris") EF "\n" GW P("city", "Rome") EF, NULL, NULL,
     "get_weather {\"city\":\"Paris\"}\nget_weather {\"city\":\"Rome\"}"},
    {"three calls mixed", 1, 0,
     "<think>\nthree things\n</think>\n\n" GW P("city", "A") EF "\n" WF P("path", "x") EF "\n" SET EF,
     NULL, "three things",
     "get_weather {\"city\":\"A\"}\nwrite_file {\"path\":\"x\"}\nset {}"},
    {"call then text", 1, 0, GW EF "\n\nDone.", "Done.", NULL, "get_weather {}"},
    {"text call text call", 1, 0, "A\n" GW EF "\nB\n" GW EF, "AB", NULL, "get_weather {}\nget_weather {}"},
    {"call then ws", 1, 0, GW EF "\n", NULL, NULL, "get_weather {}"},
    {"ws between params", 1, 0, GW "\n" P("city", "Oslo") "\n  " P("days", "2") "\n" EF, NULL, NULL,
     "get_weather {\"city\":\"Oslo\",\"days\":2}"},
    {"spaced attrs", 1, 0, "<function  name = \"get_weather\" ><param\tname=\"city\" >X</param></function>",
     NULL, NULL, "get_weather {\"city\":\"X\"}"},
    {"duplicate key", 1, 0, GW P("city", "A") P("days", "1") P("city", "B") EF, NULL, NULL,
     "get_weather {\"city\":\"B\",\"days\":1}"},
    {"cdata multiline", 1, 0,
     WF P("path", "/tmp/a.txt") P("content", "<![CDATA[line1\nline2 <b>&amp;</b>]]>") EF, NULL, NULL,
     "write_file {\"path\":\"/tmp/a.txt\",\"content\":\"line1\\nline2 <b>&amp;</b>\"}"},
    {"cdata with close param", 1, 0, WF P("content", "<![CDATA[a</param>b</function>c]]>") EF, NULL, NULL,
     "write_file {\"content\":\"a</param>b</function>c\"}"},
    {"cdata with ]]>", 1, 0, WF P("content", "<![CDATA[x]]>y]]>") EF, NULL, NULL,
     "write_file {\"content\":\"x]]>y\"}"},
    {"cdata ws before close", 1, 0, WF "<param name=\"content\"><![CDATA[v]]>\n</param>" EF, NULL, NULL,
     "write_file {\"content\":\"v\"}"},
    {"cdata with call inside", 1, 0, WF P("content", "<![CDATA[<function name=\"x\"></function>]]>") EF,
     NULL, NULL, "write_file {\"content\":\"<function name=\\\"x\\\"></function>\"}"},
    {"cdata empty", 1, 0, WF P("content", "<![CDATA[]]>") EF, NULL, NULL, "write_file {\"content\":\"\"}"},
    {"plain value with lt", 1, 0, GW P("city", "a<b & c") EF, NULL, NULL, "get_weather {\"city\":\"a<b & c\"}"},
    {"plain value empty", 1, 0, GW P("city", "") EF, NULL, NULL, "get_weather {\"city\":\"\"}"},
    {"python True", 1, 0, WF P("append", "True") EF, NULL, NULL, "write_file {\"append\":true}"},
    {"json false", 1, 0, WF P("append", "false") EF, NULL, NULL, "write_file {\"append\":false}"},
    {"bool mismatch", 1, 0, WF P("append", "yes") EF, NULL, NULL, "write_file {\"append\":\"yes\"}"},
    {"True for string", 1, 0, GW P("city", "True") EF, NULL, NULL, "get_weather {\"city\":\"True\"}"},
    {"digits for string", 1, 0, GW P("city", "10115") EF, NULL, NULL, "get_weather {\"city\":\"10115\"}"},
    {"numbers kept", 1, 0, SET P("n", "0.1") EF SET P("n", "-1e3") EF SET P("n", "1e999") EF, NULL, NULL,
     "set {\"n\":0.1}\nset {\"n\":-1e3}\nset {\"n\":\"1e999\"}"},
    {"object", 1, 0, SET P("obj", "{\"a\": [1, 2], \"b\": \"x y\", \"s\": \"q\\\" \\\\ z\"}") EF, NULL, NULL,
     "set {\"obj\":{\"a\":[1,2],\"b\":\"x y\",\"s\":\"q\\\" \\\\ z\"}}"},
    {"python dict stays string", 1, 0, SET P("obj", "{'k': 1}") EF, NULL, NULL, "set {\"obj\":\"{'k': 1}\"}"},
    {"array in cdata", 1, 0, SET P("arr", "<![CDATA[[\n 1,\n 2\n]]]>") EF, NULL, NULL, "set {\"arr\":[1,2]}"},
    {"null and None", 1, 0, SET P("nul", "null") P("maybe", "None") EF, NULL, NULL,
     "set {\"nul\":null,\"maybe\":null}"},
    {"type list", 1, 0, SET P("maybe", "7") EF SET P("maybe", "x") EF, NULL, NULL,
     "set {\"maybe\":7}\nset {\"maybe\":\"x\"}"},
    {"anyOf", 1, 0, SET P("any", "false") P("free", "42") EF SET P("any", "maybe") EF, NULL, NULL,
     "set {\"any\":false,\"free\":42}\nset {\"any\":\"maybe\"}"},
    {"untyped", 1, 0,
     SET P("free", "hello") P("x", "[1, 2]") P("y", "\"quoted\"") P("z", "<![CDATA[12]]>") P("w", "None") EF,
     NULL, NULL, "set {\"free\":\"hello\",\"x\":[1,2],\"y\":\"\\\"quoted\\\"\",\"z\":\"12\",\"w\":null}"},
    {"unknown function", 1, 0,
     "<function name=\"search_web\">" P("q", "cats") P("limit", "5") EF, NULL, NULL,
     "search_web {\"q\":\"cats\",\"limit\":5}"},
    {"unknown param", 1, 0, GW P("verbose", "true") EF, NULL, NULL, "get_weather {\"verbose\":true}"},
    {"flat tool shape", 1, 0, "<function name=\"flat_fn\">" P("x", "12") EF, NULL, NULL, "flat_fn {\"x\":12}"},
    {"unicode param", 1, 0, "<function name=\"get_weather\">" P("city", "Zürich 🏔") P("ключ", "значение") EF,
     NULL, NULL, "get_weather {\"city\":\"Zürich 🏔\",\"ключ\":\"значение\"}"},
    {"param name with space", 1, 0, GW P("my key", "v") EF, NULL, NULL, "get_weather {\"my key\":\"v\"}"},
    {"no tools: markup is content", 0, 0, "Call: " GW P("city", "Paris") EF,
     "Call: " GW P("city", "Paris") EF, NULL, NULL},
    /* malformed and truncated */
    /* cut by the end of the output: a call with its name is kept, its arguments
     * left open where they stopped; before that, nothing; never content */
    {"cut mid name", 1, 0, "Sure.\n<function name=\"get_wea", "Sure.", NULL, NULL},
    {"cut mid cdata", 1, 0, WF P("path", "a") "<param name=\"content\"><![CDATA[abc", NULL, NULL,
     "write_file {\"path\":\"a\",\"content\":\"abc (cut)"},
    {"cut after param", 1, 0, "x " GW P("city", "Paris"), "x", NULL,
     "get_weather {\"city\":\"Paris\" (cut)"},
    {"cut at <fun", 1, 0, "Text <fun", "Text", NULL, NULL},
    {"cut at cdata end", 1, 0, WF P("content", "<![CDATA[abc]]"), NULL, NULL,
     "write_file {\"content\":\"abc]]</param> (cut)"},
    {"cut in the terminator", 1, 0, GW P("city", "Paris") "<param name=\"days\">3</par", NULL, NULL,
     "get_weather {\"city\":\"Paris\",\"days\":\"3 (cut)"},
    {"cut in cdata's terminator", 1, 0, WF "<param name=\"content\"><![CDATA[a]]b]]> </pa", NULL,
     NULL, "write_file {\"content\":\"a]]b (cut)"},
    {"cut after the name", 1, 0, "ok\n" GW, "ok", NULL, "get_weather { (cut)"},
    {"cut after a call", 1, 0, GW P("city", "Paris") EF "\n" GW "<param name=\"ci", NULL, NULL,
     "get_weather {\"city\":\"Paris\"}\nget_weather { (cut)"},
    {"functionality", 1, 0, "<functionality is great", "<functionality is great", NULL, NULL},
    {"bad then good", 1, 0, "<function name=\"x\"oops " GW P("city", "Lima") EF, "<function name=\"x\"oops",
     NULL, "get_weather {\"city\":\"Lima\"}"},
    {"empty name", 1, 0, "<function name=\"\"></function>", "<function name=\"\"></function>", NULL, NULL},
    {"junk between params", 1, 0, GW P("city", "A") "junk" EF, GW P("city", "A") "junk" EF, NULL, NULL},
    /* a value never closed runs to the end: the output ended inside the call */
    {"missing close param", 1, 0, GW "<param name=\"city\">A" EF "\nMore text", NULL, NULL,
     "get_weather {\"city\":\"A</function>\\nMore text (cut)"},
    /* A plain value runs to the first "</param>", whatever it contains. */
    {"nested open", 1, 0, GW "<param name=\"city\">" GW P("city", "B") EF, NULL, NULL,
     "get_weather {\"city\":\"<function name=\\\"get_weather\\\"><param name=\\\"city\\\">B\"}"},
    {"nested open cdata", 1, 0, GW "<param name=\"city\"><![CDATA[" GW P("city", "B") EF, NULL, NULL,
     "get_weather {\"city\":\"<function name=\\\"get_weather\\\"><param name=\\\"city\\\">B"
     "</param></function> (cut)"},
    {"newline in name", 1, 0, "<function name=\"get\nweather\"></function>",
     "<function name=\"get\nweather\"></function>", NULL, NULL},
    {"too much whitespace", 1, 0,
     GW "                                                                              " EF,
     GW "                                                                              " EF, NULL, NULL},
    {"single quotes", 1, 0, "<function name='get_weather'></function>", "<function name='get_weather'></function>",
     NULL, NULL},
    {"stray close function", 1, 0, "ok </function> </param> ]]>", "ok </function> </param> ]]>", NULL, NULL},
    {"cdata unterminated then call", 1, 0, WF P("content", "<![CDATA[a") EF "\n" GW EF, NULL,
     NULL, "write_file {\"content\":\"a</param></function>\\n<function name=\\\"get_weather\\\">"
     "</function> (cut)"},
};

/* ---- tests ------------------------------------------------------------------------- */

static json_t *tools_json(void)
{
    json_t *t = json_loads(TOOLS, 0, NULL);
    cr_assert(json_is_array(t));
    return t;
}

MCD_TEST(outparse, corpus_expected)
{
    json_t *tools = tools_json();
    cr_assert_geq(sizeof corpus / sizeof corpus[0], 60);
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        const struct ocase *c = &corpus[i];
        struct result r = run_parser(c->tools ? tools : NULL, c->in_think, c->text, strlen(c->text), 0);
        cr_assert_str_eq(nz(r.content), nz(c->content), "%s: content", c->name);
        cr_assert_str_eq(nz(r.reasoning), nz(c->reasoning), "%s: reasoning", c->name);
        cr_assert_str_eq(nz(r.calls), nz(c->calls), "%s: calls", c->name);
        result_free(&r);
    }
    json_decref(tools);
}

/* Whole outputs and every truncation of them, cut one byte at a time and randomly,
 * against the one-piece parse. */
MCD_TEST(outparse, corpus_any_split)
{
    json_t *tools = tools_json();
    size_t checked = 0;
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        const struct ocase *c = &corpus[i];
        size_t len = strlen(c->text);
        for (size_t cut = 0; cut <= len; cut++) {
            const json_t *t = c->tools ? tools : NULL;
            struct result one = run_parser(t, c->in_think, c->text, cut, 0);
            uint64_t modes = cut == len ? 40 : 4;
            for (uint64_t m = 1; m < modes; m++) {
                /* i * 1000 is even: the seed keeps its small/large parity. */
                struct result other = run_parser(t, c->in_think, c->text, cut, m == 1 ? 1 : m + i * 1000);
                assert_same(&one, &other, c->name, cut, m);
                result_free(&other);
                checked++;
            }
            result_free(&one);
        }
    }
    cr_log_info("outparse: %zu split comparisons", checked);
    json_decref(tools);
}

static void feed_str(eng_outparse *p, const char *s, struct eng_delta_list *l)
{
    cr_assert_eq(eng_outparse_feed(p, s, strlen(s), l), 0);
}

/* Text is sent as soon as it is certain: only a possible tag, a whitespace run or
 * an open call is held back. */
MCD_TEST(outparse, streams_early)
{
    json_t *tools = tools_json();
    struct eng_delta_list l = {0};
    eng_outparse *p = eng_outparse_new(tools, false);
    feed_str(p, "Hello wor", &l);
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].text, "Hello wor");
    eng_delta_list_clear(&l);
    feed_str(p, "ld <", &l);  /* " <" may be whitespace before a call */
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].text, "ld");
    eng_delta_list_clear(&l);
    feed_str(p, "b>", &l);
    cr_assert_str_eq(l.items[0].text, " <b>");
    eng_delta_list_clear(&l);
    feed_str(p, "\n" GW "<param name=\"city\">Pa", &l);
    cr_assert_eq(l.n, 0);
    cr_assert(!eng_outparse_saw_tool_call(p));
    feed_str(p, "ris", &l);
    feed_str(p, "</param></function>", &l);
    cr_assert_eq(l.n, 1);
    cr_assert_eq(l.items[0].kind, ENG_DELTA_TOOL_CALL);
    cr_assert_str_eq(l.items[0].name, "get_weather");
    cr_assert_str_eq(l.items[0].arguments, "{\"city\":\"Paris\"}");
    cr_assert(eng_outparse_saw_tool_call(p));
    eng_delta_list_clear(&l);
    cr_assert_eq(eng_outparse_finish(p, &l), 0);
    cr_assert_eq(l.n, 0);
    eng_outparse_free(p);
    json_decref(tools);
}

/* A character cut between feeds is held until it is whole; invalid bytes become
 * U+FFFD; the end of output inside a character too. */
MCD_TEST(outparse, utf8_pieces)
{
    struct eng_delta_list l = {0};
    eng_outparse *p = eng_outparse_new(NULL, false);
    const char *euro = "\xE2\x82\xAC";
    cr_assert_eq(eng_outparse_feed(p, euro, 1, &l), 0);
    cr_assert_eq(eng_outparse_feed(p, euro + 1, 1, &l), 0);
    cr_assert_eq(l.n, 0);
    cr_assert_eq(eng_outparse_feed(p, euro + 2, 1, &l), 0);
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].text, euro);
    eng_delta_list_clear(&l);
    cr_assert_eq(eng_outparse_feed(p, "\xF0\x9F", 2, &l), 0);
    cr_assert_eq(l.n, 0);
    cr_assert_eq(eng_outparse_finish(p, &l), 0);
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].text, "\xEF\xBF\xBD");
    eng_delta_list_clear(&l);
    cr_assert_eq(eng_outparse_feed(p, "x", 1, &l), 0);  /* after finish: nothing */
    cr_assert_eq(l.n, 0);
    eng_outparse_free(p);
    eng_outparse_free(NULL);
    eng_delta_list_clear(NULL);
}

/* One feed call yields one delta per run of a kind. */
MCD_TEST(outparse, deltas_merged)
{
    struct eng_delta_list l = {0};
    eng_outparse *p = eng_outparse_new(NULL, false);
    feed_str(p, "<think>a <b> c</think>\n\nx < y <z", &l);
    cr_assert_eq(l.n, 2);
    cr_assert_eq(l.items[0].kind, ENG_DELTA_REASONING);
    cr_assert_str_eq(l.items[0].text, "a <b> c");
    cr_assert_eq(l.items[1].kind, ENG_DELTA_CONTENT);
    cr_assert_str_eq(l.items[1].text, "x < y <z");
    eng_delta_list_clear(&l);
    eng_outparse_free(p);
}

/* A long value fed in token-sized pieces costs linear time: the scans resume. */
MCD_TEST(outparse, long_value_linear)
{
    json_t *tools = tools_json();
    struct eng_delta_list l = {0};
    eng_outparse *p = eng_outparse_new(tools, false);
    feed_str(p, WF "<param name=\"content\"><![CDATA[", &l);
    clock_t t0 = clock();
    for (int i = 0; i < 200000; i++)
        feed_str(p, i % 7 ? "ab]" : "]>\n", &l);
    feed_str(p, "]]></param>", &l);
    cr_assert_eq(l.n, 0);
    feed_str(p, "</function>", &l);
    cr_assert_eq(l.n, 1);
    cr_assert_gt(strlen(l.items[0].arguments), 600000);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    cr_assert_lt(secs, 2.0, "took %.2f s", secs);
    eng_delta_list_clear(&l);
    eng_outparse_free(p);
    json_decref(tools);
}

/* A model stuck emitting whitespace (until max_tokens) costs linear time too. */
MCD_TEST(outparse, long_whitespace_linear)
{
    json_t *tools = tools_json();
    struct eng_delta_list l = {0};
    eng_outparse *p = eng_outparse_new(tools, false);
    clock_t t0 = clock();
    feed_str(p, "x", &l);
    for (int i = 0; i < 200000; i++)
        feed_str(p, "\n \n", &l);
    cr_assert_eq(l.n, 1);
    feed_str(p, "<functio", &l);
    for (int i = 0; i < 1000; i++)
        feed_str(p, "", &l);
    feed_str(p, "n name=\"f\"></function>", &l);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    cr_assert_lt(secs, 2.0, "took %.2f s", secs);
    cr_assert_eq(l.n, 2);
    cr_assert_eq(l.items[1].kind, ENG_DELTA_TOOL_CALL);
    eng_delta_list_clear(&l);
    eng_outparse_free(p);
    json_decref(tools);
}

/* Without a closing tag the held call comes out at the end as a cut call. */
MCD_TEST(outparse, unclosed_call_flushes)
{
    json_t *tools = tools_json();
    struct eng_delta_list l = {0};
    eng_outparse *p = eng_outparse_new(tools, false);
    feed_str(p, "Sure: " GW "<param name=\"city\">Par", &l);
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].text, "Sure:");
    eng_delta_list_clear(&l);
    cr_assert_eq(eng_outparse_finish(p, &l), 0);
    cr_assert_eq(l.n, 1);   /* the cut call, not its markup as text */
    cr_assert_eq(l.items[0].kind, ENG_DELTA_TOOL_CALL);
    cr_assert(l.items[0].cut);
    cr_assert_str_eq(l.items[0].arguments, "{\"city\":\"Par");
    cr_assert(!eng_outparse_saw_tool_call(p));
    eng_delta_list_clear(&l);
    eng_outparse_free(p);
    json_decref(tools);
}
