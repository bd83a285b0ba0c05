/* Shared by the grammar tests (test-grammar.c, test-grammar-bounds.c): the tiny
 * tokenizer's vocabulary as a trie, compiling that must succeed (or fail as
 * expected), and matching a byte string from a fresh matcher. */
#ifndef MINICPMD_TESTS_GRAMMAR_FX_H
#define MINICPMD_TESTS_GRAMMAR_FX_H

#include "engine/grammar.h"
#include "engine/tokenizer.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *src_path(const char *rel)
{
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    size_t dl = slash ? (size_t)(slash - file) : 1;
    char *p = malloc(dl + strlen(rel) + 2);
    snprintf(p, dl + strlen(rel) + 2, "%.*s/%s", (int)dl, slash ? file : ".", rel);
    return p;
}

static eng_tokenizer *tok;
static eng_gram_vocab *voc;
static const int32_t STOP = 300; /* <|end|> in the tiny tokenizer */

static void setup(void)
{
    char err[256], *path = src_path("data/tiny-tokenizer.json");
    cr_assert_eq(eng_tokenizer_load(path, &tok, err, sizeof err), 0, "%s", err);
    free(path);
    voc = eng_gram_vocab_new(tok);
    cr_assert(voc);
}

static void teardown(void)
{
    eng_gram_vocab_free(voc);
    eng_tokenizer_free(tok);
}

/* Compile under `lim` (NULL: the defaults) expecting `want`; a refusal's message
 * must hold `says` (if not NULL). */
static eng_grammar *compile_lim(const char *text, const struct eng_gram_limits *lim, int want,
                                const char *says)
{
    char err[256] = "";
    eng_grammar *g = NULL;
    int rc = eng_grammar_compile(text, strlen(text), lim, &g, err, sizeof err);
    cr_assert_eq(rc, want, "%.80s: %d %s", text, rc, err);
    if (says)
        cr_assert(strstr(err, says), "%s: want '%s'", err, says);
    return g;
}

static eng_grammar *compile(const char *text) { return compile_lim(text, NULL, 0, NULL); }

/* -1: a byte was refused; 0: accepted, incomplete; 1: accepted and complete. */
static int match(eng_grammar *g, const char *s, size_t n)
{
    eng_gram_matcher *m;
    cr_assert_eq(eng_gram_matcher_new(g, voc, &STOP, 1, &m), 0);
    int rc = eng_gram_matcher_accept_bytes(m, s, n);
    int out = rc ? -1 : eng_gram_matcher_complete(m) ? 1 : 0;
    eng_gram_matcher_free(m);
    return out;
}

static int matchs(eng_grammar *g, const char *s) { return match(g, s, strlen(s)); }

#endif
