/* Internal to engine/text/: the output parser's argument typing (outparse-args.c)
 * for its scanner (outparse.c). */
#ifndef MINICPMD_ENGINE_TEXT_OUTPARSE_IMPL_H
#define MINICPMD_ENGINE_TEXT_OUTPARSE_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

static inline bool eng__outparse_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* A NUL-terminated copy of n bytes; NULL when out of memory. */
char *eng__outparse_dup(const char *s, size_t n);

/* `s` (n bytes) as a JSON string literal; NULL when out of memory. */
char *eng__outparse_json_quote(const char *s, size_t n);

/* The JSON text of one parameter value `v` (n bytes) of parameter `key`: typed per
 * the schema in `props` (a tool's parameters.properties, or NULL) when the text
 * parses as a value the schema allows, else the text as a JSON string; `cdata`:
 * the value was wrapped in CDATA. Malloc'd; NULL on allocation failure. */
char *eng__outparse_param_json(const json_t *props, const char *key, const char *v, size_t n,
                               bool cdata);

/* The parameters.properties of function `name` in the request's tools, or NULL. */
const json_t *eng__outparse_find_props(const json_t *tools, const char *name);

#endif
