/* Internals of the grammar room: the compiled grammar shared by gbnf.c (the
 * parser), build.c (the checks and rewrites that make the flat grammar), vocab.c
 * (the vocabulary trie) and match.c (the matcher). Not for use outside
 * engine/grammar/.
 *
 * A grammar is one flat array of elements, rule after rule (llama.cpp's layout):
 * each rule is its alternatives, each ended by ALT except the last, ended by END.
 * A position is an index into that array; a position on a stack is always a SET
 * (a byte the output must match next), a REF (a rule still to expand) or a REP
 * (a rule repeated between min and max times: the stack node carries how many
 * times it was done, so x{0,4096} is one element, not 4096 rules). */
#ifndef MINICPMD_ENGINE_GRAM_IMPL_H
#define MINICPMD_ENGINE_GRAM_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/grammar.h"

enum { GR_END = 0, GR_ALT = 1, GR_REF = 2, GR_SET = 3, GR_REP = 4 };

#define GR_EL(type, v) (((uint32_t)(type) << 29) | (uint32_t)(v))
#define GR_TYPE(e) ((e) >> 29)
#define GR_VAL(e) ((e) & 0x1FFFFFFFu)
#define GR_IS_END(e) (GR_TYPE(e) <= GR_ALT)

#define GR_INF UINT32_MAX  /* a REP without an upper bound */

struct gr_set {
    uint32_t bits[8];   /* bit b: byte b matches */
};

struct gr_rep {
    uint32_t rule;      /* what is repeated */
    uint32_t min, max;  /* max GR_INF: unbounded */
    bool nullable;      /* the rule derives the empty string (min is then 0) */
};

struct eng_grammar {
    atomic_int refs;
    uint32_t *el;           /* (n_el + 1) the last one an END */
    int n_el;
    uint32_t *rule_start;   /* (n_rules) position of each rule's first element */
    int n_rules;
    struct gr_set *sets;    /* (n_sets) */
    int n_sets;
    struct gr_rep *reps;    /* (n_reps) */
    int n_reps;
    int root;
    /* Bytes that every set treats alike share a class (RE2's byte classes): the
     * matcher memoises a stack set's successor per class, not per byte. */
    uint8_t byte_class[256];
    int n_classes;
    size_t bytes;           /* the compiled form's size */
    struct eng_gram_limits lim;
};

/* MurmurHash3's 64-bit finaliser: the hash tables' mixer. */
static inline uint64_t gr_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static inline bool gr_set_has(const struct gr_set *s, unsigned b)
{
    return (s->bits[b >> 5] >> (b & 31)) & 1u;
}

/* ---- the vocabulary trie (vocab.c) ----------------------------------------------- */

struct eng_gram_vocab {
    int32_t n_vocab;
    /* the trie, preorder; depth >= 1 */
    uint8_t *byte;
    uint16_t *depth;
    uint32_t *end;            /* one past the node's subtree */
    int32_t *tok;             /* the first token spelled by the path, or -1 */
    int32_t *next_same;       /* (n_vocab) the next token with the same bytes, or -1 */
    uint32_t n_nodes;
    int max_depth;
    /* per token */
    uint32_t *off, *len;      /* into bytes; len 0: never matches */
    char *bytes;
};

/* ---- the parser's rules, handed from gbnf.c to build.c --------------------------- */

struct gr_prule {
    char *name;         /* NULL for helpers */
    uint32_t *el;
    uint32_t n, cap;
    bool defined;
};

struct gr_draft {
    struct gr_prule *rules;
    size_t n_rules, cap_rules;
    struct gr_set *sets;
    size_t n_sets, cap_sets;
    struct gr_rep *reps;
    size_t n_reps, cap_reps;
    size_t n_el;        /* all rules together */
    const struct eng_gram_limits *lim;
    char *err;
    size_t errlen;
    int rc;             /* the first error */
};

/* Append element e to rule `rule`; counts it against the limits. */
int gr_emit(struct gr_draft *d, size_t rule, uint32_t e);
/* A new helper (name NULL) or named rule; its index, or a negative errno. */
int gr_new_rule(struct gr_draft *d, const char *name, size_t len);
/* Record the first error (a refusal) and return it; later errors keep the first. */
int gr_fail(struct gr_draft *d, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void gr_draft_free(struct gr_draft *d);

/* The draft's rules checked (every rule defined, a root, no left recursion),
 * simplified (rules that derive only the empty string dropped; alternatives that
 * share a first element factored, duplicates merged) and flattened. */
int gr_build(struct gr_draft *d, eng_grammar **out);

#endif
