/* Internals of the grammar room: the compiled grammar shared by gbnf.c (which
 * builds it) and match.c (which runs it). Not for use outside engine/grammar/.
 *
 * A grammar is one flat array of elements, rule after rule (llama.cpp's layout):
 * each rule is its alternatives, each ended by ALT except the last, ended by END.
 * A position is an index into that array; a position on a stack is always a SET
 * (a byte the output must match next) or a REF (a rule still to expand). */
#ifndef MINICPMD_ENGINE_GRAM_IMPL_H
#define MINICPMD_ENGINE_GRAM_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/grammar.h"

enum { GR_END = 0, GR_ALT = 1, GR_REF = 2, GR_SET = 3 };

#define GR_EL(type, v) (((uint32_t)(type) << 30) | (uint32_t)(v))
#define GR_TYPE(e) ((e) >> 30)
#define GR_VAL(e) ((e) & 0x3FFFFFFFu)
#define GR_IS_END(e) (GR_TYPE(e) <= GR_ALT)

struct gr_set {
    uint32_t bits[8];   /* bit b: byte b matches */
};

struct eng_grammar {
    atomic_int refs;
    uint32_t *el;           /* (n_el) */
    int n_el;
    uint32_t *rule_start;   /* (n_rules) position of each rule's first element */
    int n_rules;
    struct gr_set *sets;    /* (n_sets) */
    int n_sets;
    int root;
};

static inline bool gr_set_has(const struct gr_set *s, unsigned b)
{
    return (s->bits[b >> 5] >> (b & 31)) & 1u;
}

#endif
