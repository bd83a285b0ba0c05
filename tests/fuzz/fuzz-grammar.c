/* libFuzzer target: the grammar engine. The input is GBNF text, then (after the
 * first NUL) bytes to feed the matcher. Invariants checked (a failure traps):
 *   - compiling never crashes; a refusal says why;
 *   - a compiled grammar always starts (or refuses to, for depth), and each mask
 *     agrees with accept: a token in the mask is accepted, and its acceptance is
 *     undone by nothing (the state moves on); a byte string is accepted one byte at
 *     a time exactly when it is accepted at once.
 * The vocabulary is the tiny tokenizer fixture's. */
#include "engine/grammar.h"
#include "engine/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define CHECK(c)                                                                          \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "fuzz-grammar: check failed: %s (line %d)\n", #c, __LINE__); \
            __builtin_trap();                                                             \
        }                                                                                 \
    } while (0)

#include "tests/fuzz/fuzz-walk.h"

static eng_tokenizer *tok;
static eng_gram_vocab *voc;

static void init(void)
{
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/tiny-tokenizer.json", MCD_TEST_DATA);
    if (eng_tokenizer_load(path, &tok, err, sizeof err)) {
        fprintf(stderr, "fuzz-grammar: %s\n", err);
        abort();
    }
    voc = eng_gram_vocab_new(tok);
    CHECK(voc);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!voc)
        init();
    const uint8_t *nul = memchr(d, 0, n);
    size_t glen = nul ? (size_t)(nul - d) : n;
    const char *feed = nul ? (const char *)nul + 1 : "";
    size_t flen = nul ? n - glen - 1 : 0;
    char err[256] = "";
    eng_grammar *g = NULL;
    int rc = eng_grammar_parse((const char *)d, glen, &g, err, sizeof err);
    if (rc) {
        CHECK(err[0] && !g);
        return 0;
    }
    int32_t stop = 300;
    eng_gram_matcher *a, *b;
    if (eng_gram_matcher_new(g, voc, &stop, 1, &a)) {
        eng_grammar_free(g);
        return 0;
    }
    CHECK(eng_gram_matcher_new(g, voc, &stop, 1, &b) == 0);
    /* all at once vs one byte at a time (on a prefix that keeps it short) */
    size_t k = flen < 64 ? flen : 64;
    int whole = eng_gram_matcher_accept_bytes(a, feed, k);
    int bytes = 0;
    for (size_t i = 0; i < k && !bytes; i++)
        bytes = eng_gram_matcher_accept_bytes(b, feed + i, 1);
    /* A step has a work budget: the bytes at once are one step, each byte alone
     * one step, so only the former can run out (-E2BIG). Else they agree. */
    if (whole != -E2BIG && bytes != -E2BIG)
        CHECK((whole == 0) == (bytes == 0));
    if (whole == 0 && bytes == 0)
        CHECK(eng_gram_matcher_complete(a) == eng_gram_matcher_complete(b));
    fuzz_walk(a, voc, stop);
    eng_gram_matcher_free(a);
    eng_gram_matcher_free(b);
    eng_grammar_free(g);
    return 0;
}
