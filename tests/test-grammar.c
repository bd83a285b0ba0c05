/* Grammar engine tests: GBNF compilation (and what it refuses), byte-level matching
 * with UTF-8 classes, the token mask checked against a brute-force check of every
 * token on random walks, integer ranges checked value by value, and the JSON
 * Schema compiler's output and refusals. */
#include "engine/grammar.h"
#include "engine/tokenizer.h"
#include "tests/check.h"
#include "tests/grammar-fx.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

MCD_TEST(gbnf, sequences_alternatives_repetitions, .init = setup, .fini = teardown)
{
    eng_grammar *g = compile("root ::= \"ab\" [c-e]+ (\"x\" | \"yz\")? tail\n"
                             "tail ::= \"!\"{2,3} # a comment\n");
    cr_assert_eq(matchs(g, "abc!!"), 1);
    cr_assert_eq(matchs(g, "abcdex!!!"), 1);
    cr_assert_eq(matchs(g, "abdyz!!"), 1);
    cr_assert_eq(matchs(g, "abdyz!"), 0);
    cr_assert_eq(matchs(g, "abdyz!!!!"), -1);
    cr_assert_eq(matchs(g, "ab!!"), -1);
    cr_assert_eq(matchs(g, "abcy!"), -1);
    cr_assert_eq(matchs(g, ""), 0);
    eng_grammar_free(g);
}

MCD_TEST(gbnf, utf8_classes, .init = setup, .fini = teardown)
{
    eng_grammar *g = compile("root ::= [^a\\u00e9]{2} [\\u0400-\\u04FF] .\n");
    cr_assert_eq(matchs(g, "b€Жx"), 1);
    cr_assert_eq(matchs(g, "€😀Я\xc3\xa9"), 1);      /* '.' takes é */
    cr_assert_eq(matchs(g, "é"), -1);                 /* excluded */
    cr_assert_eq(matchs(g, "ab"), -1);
    cr_assert_eq(matchs(g, "bb\xD0"), 0);             /* half of a character */
    cr_assert_eq(matchs(g, "bbz"), -1);
    cr_assert_eq(matchs(g, "\xff"), -1);              /* never invalid UTF-8 */
    cr_assert_eq(matchs(g, "\xed\xa0\x80"), -1);      /* nor a surrogate */
    cr_assert_eq(matchs(g, "\xc0\x80"), -1);          /* nor an overlong form */
    eng_grammar_free(g);
    g = compile("root ::= [^] \"x\"\n"); /* an empty negated class: any character */
    cr_assert_eq(matchs(g, "\xc3\xa9x"), 1);
    cr_assert_eq(matchs(g, "x"), 0);
    eng_grammar_free(g);
    g = compile("root ::= \n"); /* the empty language of one empty sentence */
    cr_assert_eq(matchs(g, ""), 1);
    cr_assert_eq(matchs(g, "a"), -1);
    eng_grammar_free(g);
}

MCD_TEST(gbnf, refusals, .init = setup, .fini = teardown)
{
    static const char *const bad[][2] = {
        {"root ::= root \"a\" | \"b\"\n", "left recursion"},
        {"root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"\n", "left recursion"},
        {"root ::= x\n", "not defined"},
        {"a ::= \"x\"\n", "root"},
        {"root ::= \"x\n", "unterminated"},
        {"root ::= [ab", "unterminated"},
        {"root ::= \"a\"{5000}\n", "repetition"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "twice"},
        {"root ::= (\"a\"\n", "')'"},
        {"root ::= *\n", "nothing before"},
        {"root ::= [z-a]\n", "backwards"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "";
        eng_grammar *g = NULL;
        int rc = eng_grammar_parse(bad[i][0], strlen(bad[i][0]), &g, err, sizeof err);
        cr_expect_eq(rc, -EINVAL, "accepted: %s", bad[i][0]);
        cr_expect(strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
        eng_grammar_free(g);
    }
}

/* ---- the mask ------------------------------------------------------------------ */

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random walks through g; at every step the mask must equal, token by token, what a
 * fresh matcher fed the same prefix accepts. Returns the walks that completed. */
static int check_mask(eng_grammar *g, int walks, int steps, uint64_t seed)
{
    int32_t n = eng_gram_vocab_size(voc), words = (n + 32) / 32 + 10;
    uint32_t *mask = calloc((size_t)words, 4);
    char *prefix = malloc(1 << 16);
    int done = 0;
    for (int w = 0; w < walks; w++) {
        eng_gram_matcher *m;
        cr_assert_eq(eng_gram_matcher_new(g, voc, &STOP, 1, &m), 0);
        size_t len = 0;
        for (int s = 0; s < steps; s++) {
            int count = eng_gram_matcher_mask(m, mask);
            cr_assert_gt(count, 0, "a dead end after %.*s", (int)len, prefix);
            int32_t allowed[4096];
            int na = 0, seen = 0;
            for (int32_t id = 0; id < n; id++) {
                eng_gram_matcher *f;
                cr_assert_eq(eng_gram_matcher_new(g, voc, &STOP, 1, &f), 0);
                cr_assert_eq(eng_gram_matcher_accept_bytes(f, prefix, len), 0);
                bool ok = eng_gram_matcher_accept(f, id) == 0;
                bool bit = (mask[id >> 5] >> (id & 31)) & 1;
                cr_assert_eq(ok, bit, "token %d after '%.*s': mask %d, accept %d", id, (int)len,
                             prefix, bit, ok);
                seen += ok;
                if (ok && id != STOP && na < 4096)
                    allowed[na++] = id;
                eng_gram_matcher_free(f);
            }
            cr_assert_eq(seen, count);
            if (na == 0 || ((mask[STOP >> 5] >> (STOP & 31)) & 1 && rng(&seed) % 3 == 0)) {
                done++;
                break;
            }
            int32_t id = allowed[rng(&seed) % (uint64_t)na];
            const char *b;
            size_t bl = eng_tokenizer_token_bytes(tok, id, false, &b);
            cr_assert_eq(eng_gram_matcher_accept(m, id), 0);
            memcpy(prefix + len, b, bl);
            len += bl;
        }
        eng_gram_matcher_free(m);
    }
    free(mask);
    free(prefix);
    return done;
}

MCD_TEST(mask, equals_brute_force_on_gbnf, .init = setup, .fini = teardown)
{
    eng_grammar *g = compile("root ::= (\"yes\" | \"no\" | \"word\" [0-9]{1,3} | [^\\x00-\\x7F]{1,2}) "
                             "(\" \" root)?\n");
    cr_assert_gt(check_mask(g, 12, 12, 7), 0);
    eng_grammar_free(g);
}

MCD_TEST(mask, equals_brute_force_on_a_schema, .init = setup, .fini = teardown)
{
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                           "\"maxLength\":3},\"b\":{\"type\":\"array\",\"items\":{\"type\":"
                           "\"integer\",\"minimum\":-3,\"maximum\":12},\"maxItems\":2}},"
                           "\"required\":[\"b\"]}", 0, NULL);
    char *text;
    struct eng_gram_refusal why;
    cr_assert_eq(eng_gram_from_schema(s, &text, &why), 0, "%s", why.message);
    eng_grammar *g = compile(text);
    cr_assert_gt(check_mask(g, 6, 40, 11), 0);
    eng_grammar_free(g);
    free(text);
    json_decref(s);
}

MCD_TEST(mask, stop_only_where_complete_and_ids_past_the_tokenizer, .init = setup,
         .fini = teardown)
{
    eng_grammar *g = compile("root ::= \"no\"\n");
    int32_t stops[2] = {STOP, 1023};
    eng_gram_matcher *m;
    cr_assert_eq(eng_gram_matcher_new(g, voc, stops, 2, &m), 0);
    float logits[1024];
    for (int i = 0; i < 1024; i++)
        logits[i] = 1.0f;
    cr_assert_gt(eng_gram_matcher_apply(m, logits, 1024), 0);
    cr_assert(logits[STOP] < 0 && logits[1023] < 0 && logits[1000] < 0, "stops before the end");
    cr_assert_eq(eng_gram_matcher_accept(m, STOP), -EINVAL);
    cr_assert_eq(eng_gram_matcher_accept_bytes(m, "no", 2), 0);
    for (int i = 0; i < 1024; i++)
        logits[i] = 1.0f;
    cr_assert_eq(eng_gram_matcher_apply(m, logits, 1024), 2, "only the stop ids at the end");
    cr_assert(logits[STOP] == 1.0f && logits[1023] == 1.0f && logits['n'] < 0);
    cr_assert_eq(eng_gram_matcher_accept(m, 1023), 0);
    eng_gram_matcher_free(m);
    eng_grammar_free(g);
}

/* ---- JSON Schema ---------------------------------------------------------------- */

static eng_grammar *from_schema(const char *json)
{
    json_error_t je;
    json_t *s = json_loads(json, 0, &je);
    cr_assert(s, "%s: %s", json, je.text);
    char *text = NULL;
    struct eng_gram_refusal why = {0};
    cr_assert_eq(eng_gram_from_schema(s, &text, &why), 0, "%s: %s", json, why.message);
    eng_grammar *g = compile(text);
    free(text);
    json_decref(s);
    return g;
}

MCD_TEST(schema, integer_ranges_value_by_value, .init = setup, .fini = teardown)
{
    static const long long r[][2] = {{-15, 27}, {0, 130}, {10, 1234}, {-300, -7}, {7, 7},
                                     {-1, 0}, {99, 101}, {-1000, 1000}};
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        char s[160];
        snprintf(s, sizeof s, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", r[i][0],
                 r[i][1]);
        eng_grammar *g = from_schema(s);
        for (long long v = r[i][0] - 120; v <= r[i][1] + 120; v++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", v);
            bool in = v >= r[i][0] && v <= r[i][1];
            cr_assert_eq(matchs(g, t) == 1, in, "%s: %s", s, t);
        }
        cr_assert_eq(matchs(g, "-0"), -1, "%s: -0", s);
        cr_assert_neq(matchs(g, "007"), 1, "%s: leading zeros", s);
        eng_grammar_free(g);
    }
}

MCD_TEST(schema, objects_optional_properties_and_refs, .init = setup, .fini = teardown)
{
    eng_grammar *g = from_schema(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
        "\"string\",\"maxLength\":2},\"c\":{\"$ref\":\"#\"}},\"required\":[\"a\"],"
        "\"additionalProperties\":false}");
    cr_assert_eq(matchs(g, "{\"a\":1}"), 1);
    cr_assert_eq(matchs(g, "{ \"a\" : 1 , \"c\":{\"a\":2,\"c\":{\"a\":3}} }"), 1);
    cr_assert_eq(matchs(g, "{\"a\":1,\"b\":\"xy\"}"), 1);
    cr_assert_eq(matchs(g, "{\"a\":1,\"b\":\"xyz\"}"), -1);
    cr_assert_eq(matchs(g, "{}"), -1);
    cr_assert_eq(matchs(g, "{\"a\":1,}"), -1);
    cr_assert_eq(matchs(g, "{\"b\":\"x\",\"a\":1}"), -1); /* declared order */
    cr_assert_eq(matchs(g, "{\"a\":1.5}"), -1);
    eng_grammar_free(g);

    g = from_schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"const\":"
                    "null}],\"items\":{\"enum\":[\"x\",2]},\"minItems\":1,\"maxItems\":4}");
    cr_assert_eq(matchs(g, "[true]"), 1);
    cr_assert_eq(matchs(g, "[true,null,\"x\",2]"), 1);
    cr_assert_eq(matchs(g, "[true,null,\"x\",2,2]"), -1);
    cr_assert_eq(matchs(g, "[]"), -1);
    cr_assert_eq(matchs(g, "[null]"), -1);
    eng_grammar_free(g);

    g = from_schema("{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"},{\"type\":"
                    "[\"number\",\"null\"]},{\"type\":\"string\",\"format\":\"date\"}]}");
    cr_assert_eq(matchs(g, "\"AB-12\""), 1);
    cr_assert_eq(matchs(g, "\"Ab-12\""), -1);
    cr_assert_eq(matchs(g, "-1.5e3"), 1);
    cr_assert_eq(matchs(g, "null"), 1);
    cr_assert_eq(matchs(g, "\"2024-02-29\""), 1);
    cr_assert_eq(matchs(g, "\"2024-13-01\""), -1);
    eng_grammar_free(g);
}

MCD_TEST(schema, refusals_name_keyword_and_path)
{
    static const char *const bad[][3] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"uniqueItems\":true}}}",
         "uniqueItems", "#/properties/a"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "pattern", "#"},
        {"{\"type\":\"string\",\"pattern\":\"^[e-c]\"}", "pattern", "#"}, /* fuzz-schema */
        {"{\"type\":\"string\",\"pattern\":\"a\\\\1\"}", "pattern", "#"},
        {"{\"$ref\":\"#/$defs/nope\"}", "$ref", "#"},
        {"{\"not\":{}}", "not", "#"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "minimum", "#"},
        {"{\"type\":\"number\",\"minimum\":0.2,\"maximum\":0.8}", "minimum", "#"},
        {"{\"type\":\"strin\"}", "type", "#"},
        {"{\"items\":[{}]}", "items", "#"},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":99999}]}", "maxLength", "#/anyOf/0"},
        {"{\"$defs\":{\"x\":{\"type\":\"object\",\"if\":{}}},\"$ref\":\"#/$defs/x\"}", "if",
         "#/$defs/x"},
        /* degenerate schemas that allow nothing: refused, never compiled to "" */
        {"{\"type\":[]}", "type", "#"},
        {"{\"properties\":{\"a\":{\"type\":[]}}}", "type", "#/properties/a"},
        {"{\"type\":[\"string\",\"nope\"]}", "type", "#"},
        {"{\"enum\":[]}", "enum", "#"},
        {"{\"anyOf\":[]}", "anyOf", "#"},
        {"{\"oneOf\":[false,false]}", "oneOf", "#"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maxItems", "#"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "maxLength", "#"},
        {"{\"type\":\"number\",\"minimum\":3,\"maximum\":2}", "minimum", "#"},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":3}", "minimum", "#"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", "enum", "#"},
        {"{\"const\":1,\"enum\":[2]}", "const", "#"},
        {"{\"type\":\"string\",\"const\":1}", "const", "#"},
        {"{\"properties\":{\"a\":false},\"required\":[\"a\"]}", "required", "#"},
        {"{\"properties\":{},\"required\":[\"b\"],\"additionalProperties\":false}",
         "required", "#"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *s = json_loads(bad[i][0], 0, NULL);
        cr_assert(s, "%s", bad[i][0]);
        char *text = NULL;
        struct eng_gram_refusal why = {0};
        cr_expect_eq(eng_gram_from_schema(s, &text, &why), -EINVAL, "accepted: %s", bad[i][0]);
        cr_expect_str_eq(why.keyword, bad[i][1], "%s", bad[i][0]);
        cr_expect_str_eq(why.path, bad[i][2], "%s", bad[i][0]);
        free(text);
        json_decref(s);
    }
}

MCD_TEST(schema, tool_calls, .init = setup, .fini = teardown)
{
    json_t *tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},"
        "\"required\":[\"n\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]",
        0, NULL);
    char *text;
    struct eng_gram_refusal why;
    cr_assert_eq(eng_gram_from_tools(tools, NULL, 0, &text, &why), 0, "%s", why.message);
    eng_grammar *g = compile(text);
    free(text);
    cr_assert_eq(matchs(g, "<function name=\"f\"><param name=\"n\">-3</param></function>"), 1);
    cr_assert_eq(matchs(g, "<function name=\"f\"><param name=\"s\">a \"b\"</param><param "
                           "name=\"n\">3</param></function>\n<function name=\"g\"></function>"),
                 1);
    cr_assert_eq(matchs(g, "<function name=\"f\"><param name=\"s\"><![CDATA[a<b\n]]></param>"
                           "<param name=\"n\">3</param></function>"), 1);
    cr_assert_eq(matchs(g, "<function name=\"f\"><param name=\"s\">a<b</param>"), -1);
    cr_assert_eq(matchs(g, "<function name=\"f\"></function>"), -1); /* n is required */
    cr_assert_eq(matchs(g, "<function name=\"h\">"), -1);
    eng_grammar_free(g);
    cr_assert_eq(eng_gram_from_tools(tools, "g", 1, &text, &why), 0);
    g = compile(text);
    free(text);
    cr_assert_eq(matchs(g, "<function name=\"g\"></function>"), 1);
    cr_assert_eq(matchs(g, "<function name=\"g\"></function><function"), -1);
    cr_assert_eq(matchs(g, "<function name=\"f\">"), -1);
    eng_grammar_free(g);
    json_decref(tools);
}

/* A `pattern` schema of type string; the JSON string literal of `pat` is built
 * here, so the C source holds the regex with one level of escaping. */
static eng_grammar *from_pattern(const char *pat)
{
    json_t *s = json_pack("{s:s, s:s}", "type", "string", "pattern", pat);
    cr_assert(s);
    char *text = NULL;
    struct eng_gram_refusal why = {0};
    cr_assert_eq(eng_gram_from_schema(s, &text, &why), 0, "%s: %s", pat, why.message);
    eng_grammar *g = compile(text);
    free(text);
    json_decref(s);
    return g;
}

static int refused_pattern(const char *pat)
{
    json_t *s = json_pack("{s:s, s:s}", "type", "string", "pattern", pat);
    char *text = NULL;
    struct eng_gram_refusal why = {0};
    int rc = eng_gram_from_schema(s, &text, &why);
    free(text);
    json_decref(s);
    if (rc)
        cr_expect_str_eq(why.keyword, "pattern", "%s", pat);
    return rc == -EINVAL;
}

MCD_TEST(pattern, unicode_escapes_inside_a_class, .init = setup, .fini = teardown)
{
    /* a common pattern for Chinese names: read as letters u, 4, e... it let "edus" in */
    eng_grammar *g = from_pattern("^[\\u4e00-\\u9fa5]{2,4}$");
    cr_assert_eq(matchs(g, "\"张三\""), 1);
    cr_assert_eq(matchs(g, "\"欧阳娜娜\""), 1);
    cr_assert_eq(matchs(g, "\"张\""), -1);
    cr_assert_eq(matchs(g, "\"欧阳娜娜娜\""), -1);
    cr_assert_eq(matchs(g, "\"edus\""), -1);
    cr_assert_eq(matchs(g, "\"u4\""), -1);
    cr_assert_eq(matchs(g, "\"\\u4e00\\u4e01\""), -1); /* the content, not its escapes */
    cr_assert_eq(matchs(g, "\"龦龦\""), -1);          /* U+9FA6: just past the range */
    eng_grammar_free(g);

    g = from_pattern("^[\\x41-\\x43\\u{1F600}]+$");
    cr_assert_eq(matchs(g, "\"AC\xF0\x9F\x98\x80" "B\""), 1);
    cr_assert_eq(matchs(g, "\"D\""), -1);
    cr_assert_eq(matchs(g, "\"x\""), -1);
    eng_grammar_free(g);

    /* the same escapes outside a class, and a surrogate pair as one character */
    g = from_pattern("^\\x41\\u4e00\\uD83D\\uDE00\\u{1F600}$");
    cr_assert_eq(matchs(g, "\"A一\xF0\x9F\x98\x80\xF0\x9F\x98\x80\""), 1);
    cr_assert_eq(matchs(g, "\"x41\""), -1);
    eng_grammar_free(g);
}

MCD_TEST(pattern, escapes_inside_a_class_as_ecmascript, .init = setup, .fini = teardown)
{
    eng_grammar *g = from_pattern("^[\\d\\-\\]\\\\\\/\\n\\t]$");
    static const char *const in[] = {"\"7\"", "\"-\"", "\"]\"", "\"\\\\\"", "\"/\"",
                                     "\"\\n\"", "\"\\t\"", "\"\\u000a\""};
    static const char *const out[] = {"\"a\"", "\"d\"", "\"n\"", "\"t\"", "\"\\\"\"", "\"\\r\""};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        cr_expect_eq(matchs(g, in[i]), 1, "%s", in[i]);
    for (size_t i = 0; i < sizeof out / sizeof *out; i++)
        cr_expect_eq(matchs(g, out[i]), -1, "%s", out[i]);
    eng_grammar_free(g);

    g = from_pattern("^[\\w\\s]{3}$");
    cr_expect_eq(matchs(g, "\"a_9\""), 1);
    cr_expect_eq(matchs(g, "\"a b\""), 1);
    cr_expect_eq(matchs(g, "\"a\\tb\""), 1);
    cr_expect_eq(matchs(g, "\"a-b\""), -1);
    eng_grammar_free(g);

    /* '-' first, last and after a range is a literal; \b in a class is a backspace */
    g = from_pattern("^[-a-c-e]+$");
    cr_expect_eq(matchs(g, "\"a-be\""), 1);
    cr_expect_eq(matchs(g, "\"d\""), -1);
    eng_grammar_free(g);
    g = from_pattern("^[\\b]$");
    cr_expect_eq(matchs(g, "\"\\b\""), 1);
    cr_expect_eq(matchs(g, "\"b\""), -1);
    eng_grammar_free(g);

    /* a negated class and '.' take '"' and '\' (escaped); '.' no newline */
    g = from_pattern("^[^a]\\.$");
    cr_expect_eq(matchs(g, "\"\\\".\""), 1);
    cr_expect_eq(matchs(g, "\"\\\\.\""), 1);
    cr_expect_eq(matchs(g, "\"a.\""), -1);
    eng_grammar_free(g);
    g = from_pattern("^.$");
    cr_expect_eq(matchs(g, "\"\\\"\""), 1);
    cr_expect_eq(matchs(g, "\"\xE4\xB8\x80\""), 1);
    cr_expect_eq(matchs(g, "\"\\n\""), -1);
    cr_expect_eq(matchs(g, "\"\\u000a\""), -1);
    eng_grammar_free(g);

    /* [] matches nothing; a range with a class escape as an end; lone surrogates */
    static const char *const bad[] = {"[]", "[\\d-z]", "\\uD800", "[\\uDC00-\\uDFFF]",
                                      "\\u12", "\\u{110000}", "\\x4", "[\\1]", "\\q"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect(refused_pattern(bad[i]), "accepted: %s", bad[i]);
}

MCD_TEST(schema, degenerate_schemas_compile_to_what_they_allow, .init = setup, .fini = teardown)
{
    /* a property whose schema is false may not appear; an anyOf branch that is false
     * is no branch; enum values of another type than `type` are no values */
    eng_grammar *g = from_schema("{\"properties\":{\"a\":false,\"b\":{\"type\":\"integer\"}}}");
    cr_expect_eq(matchs(g, "{\"b\":1}"), 1);
    cr_expect_eq(matchs(g, "{}"), 1);
    cr_expect_eq(matchs(g, "{\"a\":1}"), -1);
    eng_grammar_free(g);
    g = from_schema("{\"properties\":{\"a\":false}}");
    cr_expect_eq(matchs(g, "{}"), 1);
    cr_expect_eq(matchs(g, "{\"a\":1}"), -1);
    eng_grammar_free(g);
    g = from_schema("{\"anyOf\":[false,{\"type\":\"null\"}]}");
    cr_expect_eq(matchs(g, "null"), 1);
    eng_grammar_free(g);
    g = from_schema("{\"type\":\"integer\",\"enum\":[1,2.0,2.5,\"3\"]}");
    cr_expect_eq(matchs(g, "1"), 1);
    cr_expect_eq(matchs(g, "2.0"), 1);
    cr_expect_eq(matchs(g, "2.5"), -1);
    cr_expect_eq(matchs(g, "\"3\""), -1);
    eng_grammar_free(g);
    g = from_schema("{\"type\":[\"string\",\"string\",\"null\"],\"nullable\":true}");
    cr_expect_eq(matchs(g, "null"), 1);
    cr_expect_eq(matchs(g, "\"x\""), 1);
    eng_grammar_free(g);
}

/* A schema of n properties p0..p(n-1), all of them required. */
static json_t *many_required(size_t n)
{
    json_t *props = json_object(), *req = json_array();
    for (size_t i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof k, "p%zu", i);
        json_object_set_new(props, k, json_pack("{s:s}", "type", "integer"));
        json_array_append_new(req, json_string(k));
    }
    return json_pack("{s:s, s:o, s:o}", "type", "object", "properties", props, "required", req);
}

MCD_TEST(schema, large_schemas_and_the_text_limit)
{
    /* 20,000 required properties: `required` was scanned once per property (40 s at
     * 80,000); now a hash lookup each */
    json_t *s = many_required(20000);
    char *text = NULL;
    struct eng_gram_refusal why = {0};
    cr_assert_eq(eng_gram_from_schema(s, &text, &why), 0, "%s", why.message);
    cr_expect(strstr(text, "\"\\\"p19999\\\"\""));
    free(text);
    json_t *tools = json_pack("[{s:s, s:{s:s, s:O}}]", "type", "function", "function", "name", "f",
                              "parameters", s);
    text = NULL;
    cr_assert_eq(eng_gram_from_tools(tools, NULL, 0, &text, &why), 0, "%s", why.message);
    free(text);
    json_decref(tools);
    json_decref(s);

    /* past the size limit of the GBNF text: refused, naming the limit */
    json_t *any = json_array();
    for (int i = 0; i < 200000; i++)
        json_array_append_new(any, json_pack("{s:s}", "type", "integer"));
    s = json_pack("{s:o}", "anyOf", any);
    text = NULL;
    memset(&why, 0, sizeof why);
    cr_expect_eq(eng_gram_from_schema(s, &text, &why), -EINVAL);
    cr_expect(!text);
    cr_expect(strstr(why.message, "limit"), "%s", why.message);
    json_decref(s);
    json_t *en = json_array();
    for (int i = 0; i < 400000; i++) {
        char v[32];
        snprintf(v, sizeof v, "value%07d", i);
        json_array_append_new(en, json_string(v));
    }
    s = json_pack("{s:o}", "enum", en);
    memset(&why, 0, sizeof why);
    cr_expect_eq(eng_gram_from_schema(s, &text, &why), -EINVAL);
    cr_expect(strstr(why.message, "limit"), "%s", why.message);
    json_decref(s);
}
