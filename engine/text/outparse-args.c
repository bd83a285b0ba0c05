/* The output parser's tool-call arguments: each parameter value the model wrote
 * becomes JSON text typed by the tool's parameter schema (outparse.h says the
 * rules; outparse.c finds the values in the markup). */
#include "engine/text/outparse-impl.h"

#include <stdlib.h>
#include <string.h>

char *eng__outparse_dup(const char *s, size_t n)
{
    char *o = malloc(n + 1);
    if (o) {
        memcpy(o, s, n);
        o[n] = '\0';
    }
    return o;
}

enum {
    T_STRING = 1, T_INTEGER = 2, T_NUMBER = 4, T_BOOLEAN = 8,
    T_OBJECT = 16, T_ARRAY = 32, T_NULL = 64,
};

static unsigned type_bit(const json_t *t)
{
    static const struct { const char *name; unsigned bit; } names[] = {
        {"string", T_STRING}, {"integer", T_INTEGER}, {"number", T_NUMBER},
        {"boolean", T_BOOLEAN}, {"object", T_OBJECT}, {"array", T_ARRAY}, {"null", T_NULL},
    };
    const char *s = json_string_value(t);
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0)
            return names[i].bit;
    return 0;
}

static unsigned own_types(const json_t *schema)
{
    const json_t *t = json_object_get(schema, "type");
    unsigned mask = type_bit(t);
    size_t i;
    const json_t *v;
    if (json_is_array(t))
        json_array_foreach(t, i, v) mask |= type_bit(v);
    return mask;
}

/* The JSON types a parameter's schema allows: "type" (a name or a list of names),
 * else the "type"s of its anyOf/oneOf members. 0 means we do not know. */
static unsigned schema_types(const json_t *props, const char *key)
{
    const json_t *schema = json_object_get(props, key);
    unsigned mask = own_types(schema);
    const char *alts[] = {"anyOf", "oneOf"};
    for (size_t a = 0; mask == 0 && a < 2; a++) {
        const json_t *list = json_object_get(schema, alts[a]), *v;
        size_t i;
        if (json_is_array(list))
            json_array_foreach(list, i, v) mask |= own_types(v);
    }
    return mask;
}

/* Whether a parsed value is one the schema allows (any non-string one when the
 * schema says nothing). A JSON string literal never counts: the template writes
 * strings bare, so quotes around a value are part of the value. */
static bool value_fits(const json_t *v, unsigned mask)
{
    unsigned bit;
    switch (json_typeof(v)) {
    case JSON_INTEGER: bit = T_INTEGER | T_NUMBER; break;
    case JSON_REAL: bit = T_NUMBER; break;
    case JSON_TRUE: case JSON_FALSE: bit = T_BOOLEAN; break;
    case JSON_NULL: bit = T_NULL; break;
    case JSON_OBJECT: bit = T_OBJECT; break;
    case JSON_ARRAY: bit = T_ARRAY; break;
    default: return false;
    }
    return mask == 0 || (mask & bit) != 0;
}

/* Valid JSON text without the whitespace between tokens. Re-serialising through
 * jansson instead would print 0.1 as 0.10000000000000001. */
static char *json_minify(const char *s, size_t n)
{
    char *o = malloc(n + 1), *w = o;
    bool in_str = false;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            *w++ = c;
            if (c == '\\' && i + 1 < n)
                *w++ = s[++i];
            else if (c == '"')
                in_str = false;
        } else if (!eng__outparse_is_ws(c)) {
            *w++ = c;
            in_str = c == '"';
        }
    }
    *w = '\0';
    return o;
}

char *eng__outparse_json_quote(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    char *o = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(j);
    return o;
}

/* The JSON text of one parameter value: typed per the schema when the text parses
 * as a value the schema allows, else the text as a JSON string. CDATA holds text
 * the template wrapped because it contains '<', '&' or a newline, so without a
 * schema it is always a string. The template prints Python's True/False/None for
 * non-string values in past turns, so the model may too: they count as booleans
 * and null. NULL on allocation failure. */
char *eng__outparse_param_json(const json_t *props, const char *key, const char *v, size_t n,
                               bool cdata)
{
    unsigned mask = props ? schema_types(props, key) : 0;
    bool try_json = mask == 0 ? !cdata : (mask & ~(unsigned)T_STRING) != 0;
    if (try_json) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        bool fits = j && value_fits(j, mask);
        json_decref(j);
        if (fits)
            return json_minify(v, n);
        size_t b = 0, e = n;
        while (b < e && eng__outparse_is_ws(v[b])) b++;
        while (e > b && eng__outparse_is_ws(v[e - 1])) e--;
        static const struct { const char *py, *json; unsigned bit; } lits[] = {
            {"True", "true", T_BOOLEAN}, {"False", "false", T_BOOLEAN}, {"None", "null", T_NULL},
        };
        for (size_t i = 0; i < 3; i++)
            if (e - b == strlen(lits[i].py) && memcmp(v + b, lits[i].py, e - b) == 0 &&
                (mask == 0 || (mask & lits[i].bit)))
                return eng__outparse_dup(lits[i].json, strlen(lits[i].json));
    }
    return eng__outparse_json_quote(v, n);
}

/* The parameters.properties of function `name` in the request's tools, or NULL. */
const json_t *eng__outparse_find_props(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn))
            fn = t;  /* also accept the flat {"name", "parameters"} shape */
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (n && strcmp(n, name) == 0) {
            const json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
            return json_is_object(props) ? props : NULL;
        }
    }
    return NULL;
}
