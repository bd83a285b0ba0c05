/* libFuzzer target: the JSON Schema and tool compilers. The input is a JSON
 * document, compiled as a response_format schema and as the `parameters` of a
 * tool. Invariants checked (a failure traps):
 *   - a refusal names a path and a reason (and the keyword, "" for the key "");
 *   - whatever the compiler accepts compiles as GBNF (the compiler never writes a
 *     grammar it cannot run);
 *   - and runs: a matcher on the tiny tokenizer's vocabulary starts (or refuses to),
 *     and a few steps of mask + accept of an allowed token hold (every token in the
 *     mask is accepted), so a schema that compiles to a hostile grammar is exercised
 *     end to end, under the run's time and memory limits. */
#include "engine/grammar.h"
#include "engine/tokenizer.h"

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

#include "tests/fuzz/fuzz-walk.h"

static eng_tokenizer *tok;
static eng_gram_vocab *voc;

static void init(void)
{
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/tiny-tokenizer.json", MCD_TEST_DATA);
    if (eng_tokenizer_load(path, &tok, err, sizeof err)) {
        fprintf(stderr, "fuzz-schema: %s\n", err);
        abort();
    }
    voc = eng_gram_vocab_new(tok);
    CHECK(voc);
}

/* A few steps of the matcher on g (fuzz-walk.h). */
static void run(eng_grammar *g)
{
    int32_t stop = 300;
    eng_gram_matcher *m;
    if (eng_gram_matcher_new(g, voc, &stop, 1, &m))
        return;
    fuzz_walk(m, voc, stop);
    eng_gram_matcher_free(m);
}

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
    /* A quarter of the daemon's limits: every path, refusals included, is still
     * reached, and a slow input costs a fraction of a millisecond, so millions of
     * inputs fit in a night. */
    struct eng_gram_limits lim;
    eng_gram_limits_default(&lim);
    lim.max_stacks /= 4;
    lim.step_work /= 4;
    int prc = eng_grammar_compile(text, strlen(text), &lim, &g, err, sizeof err);
    /* a limit of the grammar compiler may refuse it, naming the limit */
    if (prc && prc != -E2BIG)
        fprintf(stderr, "fuzz-schema: %s\n%.2000s\n", err, text);
    CHECK(prc == 0 || (prc == -E2BIG && strstr(err, "limit")) || prc == -ENOMEM);
    if (prc) {
        free(text);
        return;
    }
    run(g);
    eng_grammar_free(g);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!voc)
        init();
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
