/* Internals of the schema compilers (schema.c, pattern.c). Not for use outside
 * engine/grammar/. */
#ifndef MINICPMD_ENGINE_SCHEMA_IMPL_H
#define MINICPMD_ENGINE_SCHEMA_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/grammar.h"
#include "util/buf.h"

struct sc_ref {
    const json_t *target;
    int rule;
    bool raw;
};

struct sc {
    ut_buf out;                 /* the grammar so far, one rule per line */
    const json_t *root;         /* what "#" in a $ref means */
    bool xml;                   /* inside tool-call XML: no '<' in JSON strings */
    int n_rules;
    struct sc_ref *refs;        /* $ref targets already given a rule */
    size_t n_refs, refs_cap;
    struct eng_gram_refusal *why;
    int rc;
};

/* Fill `why` (the first refusal wins) and return -EINVAL. */
int sc_refuse(struct sc *c, const char *keyword, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A GBNF string literal of n bytes. */
void sc_lit(ut_buf *b, const char *s, size_t n);
/* A regex `pattern` (the subset pattern.c lists) as a GBNF expression matching the
 * string's content (JSON-escaped unless raw), appended to b. */
int sc_pattern(struct sc *c, const char *pattern, const char *path, bool raw, ut_buf *b);

#endif
