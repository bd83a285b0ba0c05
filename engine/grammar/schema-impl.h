/* Internals of the schema compilers (schema.c, schema-obj.c, schema-int.c, tools.c,
 * pattern.c). Not for use outside engine/grammar/. */
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
/* Shared by schema.c, schema-int.c and tools.c. */
void sc_lits(ut_buf *b, const char *s);                 /* sc_lit of a C string */
int sc_new_rule(struct sc *c);                          /* a fresh rule number */
int sc_define(struct sc *c, int rule, const ut_buf *body); /* "rN ::= body" */
/* Refuses (naming the limit) when the text so far and `pending` are over what a
 * schema may compile to; -ENOMEM when either ran out of memory; else 0. */
int sc_room(struct sc *c, const ut_buf *pending, const char *path);
int sc_check_keywords(struct sc *c, const json_t *s, const char *path);
/* A new rule for the schema s at `path` (raw: strings as plain XML text); its name
 * appended to b. */
int sc_sub(struct sc *c, const json_t *s, const char *path, bool raw, int depth, ut_buf *b);
/* The schema s (an object, else any value) as a rule named in `out`; `kw` names
 * the keyword that holds it. */
int sc_sub_or_any(struct sc *c, const json_t *s, const char *path, const char *kw, int depth,
                  ut_buf *out);
/* A JSON value as a GBNF literal (raw: a string as its plain text). */
void sc_json_lit(struct sc *c, const json_t *v, bool raw, ut_buf *b);
/* The counts kmin..kmax of s (what: the counted thing, for the refusal). */
int sc_count_range(struct sc *c, const json_t *s, const char *kmin, const char *kmax,
                   const char *what, const char *path, long long *mn, long long *mx);
/* An object or an array schema (schema-obj.c). */
int sc_gen_object(struct sc *c, const json_t *s, const char *path, int depth, ut_buf *b);
int sc_gen_array(struct sc *c, const json_t *s, const char *path, int depth, ut_buf *b);
int sc_init(struct sc *c, const json_t *root, bool xml, struct eng_gram_refusal *why);
int sc_finish(struct sc *c, char **gbnf);               /* hands out the text, or frees it */
/* The integers lo..hi as one GBNF expression; the bounds of an integer schema. */
void sc_int_range(ut_buf *b, long long lo, long long hi);
int sc_int_bounds(struct sc *c, const json_t *s, const char *path, long long *lo, long long *hi,
                  bool *bounded);
/* A regex `pattern` (the subset pattern.c lists) as a GBNF expression matching the
 * string's content (JSON-escaped unless raw), appended to b. */
int sc_pattern(struct sc *c, const char *pattern, const char *path, bool raw, ut_buf *b);
/* The rules the translations name (jdot, xdot), appended to c->out. */
int sc_pattern_rules(struct sc *c);

#endif
