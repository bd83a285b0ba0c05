/* libFuzzer target: the JSON Schema and tool compilers. The input is a JSON
 * document, compiled as a response_format schema and as the `parameters` of a
 * tool. Invariants checked (a failure traps):
 *   - a refusal names a path and a reason (and the keyword, "" for the key "");
 *   - whatever the compiler accepts compiles as GBNF (the compiler never writes a
 *     grammar it cannot run). */
#include "engine/grammar.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define CHECK(c)                                                                         \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "fuzz-schema: check failed: %s (line %d)\n", #c, __LINE__); \
            __builtin_trap();                                                            \
        }                                                                                \
    } while (0)

static void compiled(int rc, char *text, const struct eng_gram_refusal *why)
{
    if (rc == -ENOMEM)
        return;
    if (rc) {
        CHECK(!text && why->path[0] && why->message[0]); /* a keyword may be "" */
        return;
    }
    char err[256];
    eng_grammar *g = NULL;
    int prc = eng_grammar_parse(text, strlen(text), &g, err, sizeof err);
    if (prc)
        fprintf(stderr, "fuzz-schema: %s\n%s\n", err, text);
    CHECK(prc == 0);
    eng_grammar_free(g);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    json_t *s = json_loadb((const char *)d, n, JSON_DECODE_ANY, NULL);
    if (!s)
        return 0;
    char *text = NULL;
    struct eng_gram_refusal why = {0};
    compiled(eng_gram_from_schema(s, &text, &why), text, &why);
    json_t *tools = json_pack("[{s:s, s:{s:s, s:O}}]", "type", "function", "function", "name",
                              "f", "parameters", s);
    if (tools) {
        text = NULL;
        memset(&why, 0, sizeof why);
        compiled(eng_gram_from_tools(tools, NULL, 0, &text, &why), text, &why);
        json_decref(tools);
    }
    json_decref(s);
    return 0;
}
