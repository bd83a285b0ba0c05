/* Grammar engine under hostile input: every grammar either compiles and runs
 * within its limits or is refused naming the limit, and what the engine does to
 * stay bounded (counted repetition, factoring, dropped empty rules, the pruning of
 * empty iterations) keeps the language exact: counts checked at their edges, and
 * the mask checked against accepting every token by itself. */
#include "engine/grammar.h"
#include "engine/tokenizer.h"
#include "tests/check.h"
#include "tests/grammar-fx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing text buffer for generated grammars. */
struct text {
    char *p;
    size_t n, cap;
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->n + (size_t)k + 1 > t->cap) {
        t->cap = 2 * (t->n + (size_t)k + 1);
        t->p = realloc(t->p, t->cap);
        cr_assert(t->p);
    }
    va_start(ap, fmt);
    vsnprintf(t->p + t->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    t->n += (size_t)k;
}

static int match_run(eng_grammar *g, char c, size_t n)
{
    char *s = malloc(n + 1);
    memset(s, c, n);
    int r = match(g, s, n);
    free(s);
    return r;
}

MCD_TEST(bounds, empty_groups_nested_and_repeated, .init = setup, .fini = teardown)
{
    /* 60 empty groups inside each other, repeated 0..4096 times: the expansion
     * recursed 245,760 deep and overflowed the stack. Now the groups are dropped. */
    struct text t = {0};
    add(&t, "root ::= ");
    for (int i = 0; i < 60; i++)
        add(&t, "(");
    for (int i = 0; i < 60; i++)
        add(&t, ")");
    add(&t, "{0,4096} \"x\"\n");
    eng_grammar *g = compile(t.p);
    cr_assert_eq(matchs(g, "x"), 1);
    cr_assert_eq(matchs(g, ""), 0);
    cr_assert_eq(matchs(g, "xx"), -1);
    eng_grammar_free(g);
    free(t.p);
}

MCD_TEST(bounds, counted_repetition_is_exact, .init = setup, .fini = teardown)
{
    eng_grammar *g = compile("root ::= \"a\"{3,5}\n");
    cr_assert_eq(match_run(g, 'a', 2), 0);
    cr_assert_eq(match_run(g, 'a', 3), 1);
    cr_assert_eq(match_run(g, 'a', 5), 1);
    cr_assert_eq(match_run(g, 'a', 6), -1);
    eng_grammar_free(g);
    g = compile("root ::= (\"a\"?){0,4096}\n");   /* empty iterations are not counted */
    cr_assert_eq(match_run(g, 'a', 4096), 1);
    cr_assert_eq(match_run(g, 'a', 4097), -1);
    eng_grammar_free(g);
    g = compile("root ::= ((\"a\"?){0,3}){0,2} \"b\"\n");
    cr_assert_eq(matchs(g, "aaaaaab"), 1);
    cr_assert_eq(matchs(g, "aaaaaaab"), -1);
    cr_assert_eq(matchs(g, "b"), 1);
    eng_grammar_free(g);
    g = compile("root ::= (\"ab\" | \"a\"){2,3} \"c\"+\n");
    cr_assert_eq(matchs(g, "aabc"), 1);
    cr_assert_eq(matchs(g, "ababac"), 1);
    cr_assert_eq(matchs(g, "ac"), -1);
    cr_assert_eq(matchs(g, "abababac"), -1);
    cr_assert_eq(matchs(g, "aaccc"), 1);
    eng_grammar_free(g);
    /* 600 identical branches repeated: ~20 s a token before factoring */
    struct text t = {0};
    add(&t, "root ::= (");
    for (int i = 0; i < 600; i++)
        add(&t, "%s[ -~]", i ? "|" : "");
    add(&t, "){0,4096}\n");
    g = compile(t.p);
    cr_assert_eq(match_run(g, 'q', 4096), 1);
    cr_assert_eq(match_run(g, 'q', 4097), -1);
    eng_grammar_free(g);
    free(t.p);
    /* the same branches, each its own group (a rule of its own): rules alike are
     * merged, so it starts within 16 stacks too */
    t = (struct text){0};
    add(&t, "root ::= (");
    for (int i = 0; i < 600; i++)
        add(&t, "%s([ -~] \"x\")", i ? "|" : "");
    add(&t, "){0,4096}\n");
    struct eng_gram_limits lim;
    eng_gram_limits_default(&lim);
    lim.max_stacks = 16;
    g = compile_lim(t.p, &lim, 0, NULL);
    char err[200] = "";
    cr_assert_eq(eng_gram_check_start(g, voc, err, sizeof err), 0, "%s", err);
    cr_assert_eq(matchs(g, "axbx"), 1);
    cr_assert_eq(matchs(g, "axb"), 0);
    eng_grammar_free(g);
    free(t.p);
}

MCD_TEST(bounds, long_enums_and_listed_classes_start_small, .init = setup, .fini = teardown)
{
    /* 4,100 words with a shared first character: 4,100 stacks at the start
     * before factoring, over the limit of 4,096 */
    struct text t = {0};
    add(&t, "root ::= ");
    for (int i = 0; i < 4100; i++)
        add(&t, "%s\"w%d\"", i ? " | " : "", i * 7);
    add(&t, "\n");
    eng_grammar *g = compile(t.p);
    cr_assert_eq(matchs(g, "w0"), 1);
    cr_assert_eq(matchs(g, "w28693"), 1);
    cr_assert_eq(matchs(g, "w7"), 1);
    cr_assert_eq(matchs(g, "w1"), 0);    /* a prefix of w14, w140... */
    cr_assert_eq(matchs(g, "w28694"), -1);
    cr_assert_eq(matchs(g, "x"), -1);
    eng_grammar_free(g);
    free(t.p);
    /* 5,000 listed CJK characters */
    t = (struct text){0};
    add(&t, "root ::= [");
    for (int i = 0; i < 5000; i++) {
        unsigned cp = 0x4E00 + (unsigned)i * 4;
        add(&t, "%c%c%c", 0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F));
    }
    add(&t, "]{1,2}\n");
    g = compile(t.p);
    cr_assert_eq(matchs(g, "\xe4\xb8\x80"), 1);                 /* U+4E00 */
    cr_assert_eq(matchs(g, "\xe4\xb8\x84\xe4\xb8\x80"), 1);     /* U+4E04 U+4E00 */
    cr_assert_eq(matchs(g, "\xe4\xb8\x81"), -1);                /* U+4E01: not listed */
    cr_assert_eq(matchs(g, "a"), -1);
    eng_grammar_free(g);
    free(t.p);
}

MCD_TEST(bounds, nul_is_never_output, .init = setup, .fini = teardown)
{
    compile_lim("root ::= \"a\\x00\"\n", NULL, -EINVAL, "NUL");
    compile_lim("root ::= [\\x00]\n", NULL, -EINVAL, "empty");
    eng_grammar *g = compile("root ::= [\\x00-\\x7f]+\n");
    cr_assert_eq(match(g, "a\0", 2), -1);
    cr_assert_eq(matchs(g, "a\x01"), 1);
    eng_grammar_free(g);
    g = compile("root ::= .\n");
    cr_assert_eq(match(g, "\0", 1), -1);
    eng_grammar_free(g);
}

MCD_TEST(bounds, limits_are_named, .init = setup, .fini = teardown)
{
    struct eng_gram_limits lim;
    eng_gram_limits_default(&lim);
    /* rules: a chain of 80,000 named rules (quadratic lookups once: minutes) */
    struct text t = {0};
    add(&t, "root ::= r0\n");
    for (int i = 0; i < 80000; i++)
        add(&t, "r%d ::= \"x\" r%d | \"y\"\n", i, i + 1);
    add(&t, "r80000 ::= \"z\"\n");
    compile_lim(t.p, NULL, -E2BIG, "--grammar-max-rules");
    lim.max_rules = 100000;
    eng_grammar *g = compile_lim(t.p, &lim, 0, NULL);
    cr_assert_eq(matchs(g, "xxxy"), 1);
    eng_grammar_free(g);
    free(t.p);
    /* bytes: 240 rules of "a"{0,4096} took 164 MB; now a few KB, so a smaller cap */
    t = (struct text){0};
    add(&t, "root ::=");
    for (int i = 0; i < 240; i++)
        add(&t, " r%d", i);
    add(&t, "\n");
    for (int i = 0; i < 240; i++)
        add(&t, "r%d ::= \"a\"{0,4096}\n", i);
    eng_gram_limits_default(&lim);
    g = compile_lim(t.p, &lim, 0, NULL);
    eng_grammar_free(g);
    lim.max_bytes = 4096;
    compile_lim(t.p, &lim, -E2BIG, "--grammar-max-bytes");
    free(t.p);
}

/* A start of n stacks: n different rules that all begin with the same byte. */
static char *wide_start(int n)
{
    struct text t = {0};
    add(&t, "root ::= (");
    for (int i = 0; i < n; i++)
        add(&t, "%sr%d", i ? "|" : "", i);
    add(&t, ")*\n");
    for (int i = 0; i < n; i++)
        add(&t, "r%d ::= [a-z] [a-z] \"%d\"\n", i, i); /* all different */
    return t.p;
}

MCD_TEST(bounds, step_limits_refuse_at_the_start, .init = setup, .fini = teardown)
{
    char *text = wide_start(200);
    struct eng_gram_limits lim;
    eng_gram_limits_default(&lim);
    lim.max_stacks = 100;
    eng_grammar *g = compile_lim(text, &lim, 0, NULL);
    eng_gram_matcher *m = NULL;
    char err[200] = "";
    cr_assert_eq(eng_gram_matcher_new(g, voc, &STOP, 1, &m), -E2BIG);
    cr_assert_eq(eng_gram_check_start(g, voc, err, sizeof err), -E2BIG);
    cr_assert(strstr(err, "--grammar-max-stacks"), "%s", err);
    eng_grammar_free(g);

    eng_gram_limits_default(&lim);
    lim.step_work = 2000;
    g = compile_lim(text, &lim, 0, NULL);
    cr_assert_eq(eng_gram_check_start(g, voc, err, sizeof err), -E2BIG);
    cr_assert(strstr(err, "--grammar-step-work"), "%s", err);
    eng_grammar_free(g);

    g = compile(text); /* within the defaults: it starts and runs */
    cr_assert_eq(eng_gram_check_start(g, voc, err, sizeof err), 0, "%s", err);
    cr_assert_eq(matchs(g, "ab7cd199"), 1);
    cr_assert_eq(matchs(g, "ab7cd200"), -1);
    eng_grammar_free(g);
    free(text);
}

MCD_TEST(bounds, a_step_over_its_work_fails_instead_of_shrinking, .init = setup,
         .fini = teardown)
{
    /* cheap at the start, costly later: the ways to split the a's read so far
     * into groups grow with each one */
    struct eng_gram_limits lim;
    eng_gram_limits_default(&lim);
    lim.max_stacks = 64;
    eng_grammar *g = compile_lim("root ::= (\"a\"{1,8}){0,40}\n", &lim, 0, NULL);
    eng_gram_matcher *m;
    cr_assert_eq(eng_gram_matcher_new(g, voc, &STOP, 1, &m), 0);
    int rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++)
        rc = eng_gram_matcher_accept_bytes(m, "a", 1);
    cr_assert_eq(rc, -E2BIG, "%d", rc);
    cr_assert(strstr(eng_gram_matcher_why(m), "--grammar-max-stacks"), "%s",
              eng_gram_matcher_why(m));
    eng_gram_matcher_free(m);
    eng_grammar_free(g);
}

/* The mask agrees with accepting each token alone, along a random walk: each
 * token is tried on a fresh matcher that replayed the walk so far. */
static void check_masks(const char *text, uint64_t seed)
{
    eng_grammar *g = compile(text);
    eng_gram_matcher *m;
    cr_assert_eq(eng_gram_matcher_new(g, voc, &STOP, 1, &m), 0);
    int32_t n = eng_gram_vocab_size(voc), hist[16];
    uint32_t mask[(512 + 31) / 32];
    cr_assert(n < 512 && STOP < 512);
    for (int step = 0; step < 16; step++) {
        int cnt = eng_gram_matcher_mask(m, mask);
        cr_assert_geq(cnt, 0);
        int32_t pick = -1;
        for (int32_t id = 0; id < n; id++) {
            bool in = (mask[id >> 5] >> (id & 31)) & 1;
            eng_gram_matcher *f;
            cr_assert_eq(eng_gram_matcher_new(g, voc, &STOP, 1, &f), 0);
            for (int k = 0; k < step; k++)
                cr_assert_eq(eng_gram_matcher_accept(f, hist[k]), 0);
            bool ok = eng_gram_matcher_accept(f, id) == 0;
            eng_gram_matcher_free(f);
            cr_assert_eq(in, ok, "%.40s: step %d token %d: mask %d, accept %d", text, step, id,
                         in, ok);
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            if (in && id != STOP && (pick < 0 || (seed >> 33) % 4 == 0))
                pick = id;
        }
        if (pick < 0)
            break;
        cr_assert_eq(eng_gram_matcher_accept(m, pick), 0);
        hist[step] = pick;
    }
    eng_gram_matcher_free(m);
    eng_grammar_free(g);
}

MCD_TEST(bounds, masks_of_rewritten_grammars_only_allow_what_continues, .init = setup,
         .fini = teardown)
{
    static const char *const grammars[] = {
        "root ::= (\"ab\" | \"a\" | \"abc\" | \"b\"){1,6} \"!\"?\n",
        "root ::= ((\"a\"? \" \"?){0,5}){0,3} [0-9]{2}\n",
        "root ::= (\"the\" | \"then\" | \"there\" | \"these\" | \"th\" [a-z])+\n",
        "root ::= x{0,40}\nx ::= () (() \"x\" ()) | [ -~]\n",
    };
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars; i++)
        check_masks(grammars[i], i + 1);
}
