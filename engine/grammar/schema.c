/* JSON Schema -> GBNF (tools.c compiles tool calls with the same walk).
 *
 * The shape follows llama.cpp's json-schema-to-grammar (common/json-schema-to-
 * grammar.cpp; nothing copied): one rule per schema object, properties in their
 * declared order, required ones mandatory and the others optional (commas placed by
 * a pair of rules per position: "a comma is / is not owed before the next one"),
 * $ref as a rule reference (so recursion is a recursive rule), integer ranges as
 * digit-by-digit alternatives. What it does differently, for a small model that
 * must always finish:
 *  - whitespace is bounded: at most WS_MAX characters wherever JSON allows it;
 *  - numbers have at most 16 integer and 16 fraction digits, exponents 3;
 *  - an unconstrained value (true, {}, json_object) nests at most ANY_DEPTH deep;
 *  - without "additionalProperties": {…} or true and no "properties", objects hold
 *    exactly the declared properties (always valid: extra ones are optional);
 *  - "number" with minimum / maximum gives the integers of the range (valid, and
 *    no fraction can cross a bound); a range with no integer is refused.
 * Anything else a schema asks for that is not implemented is refused, naming the
 * keyword and the path of the schema object holding it: never a grammar that
 * would let through what the schema forbids (oneOf is the exception: compiled as
 * anyOf, so a value matching two branches is possible when the branches overlap).
 * Regex `pattern`s are translated by pattern.c, integer ranges by schema-int.c. */
#include "engine/grammar/schema-impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS_MAX 16
#define ANY_DEPTH 5
#define MAX_NEST 64                 /* schema objects inside each other */
/* The GBNF text one schema (or one request's tools) may compile to. Legit schemas
 * stay far below it (the largest in the tests: ~2 MB for an anyOf of 80,000
 * integers); past it the text is not worth handing to the grammar compiler. */
#define MAX_TEXT (4u << 20)

int sc_refuse(struct sc *c, const char *keyword, const char *path, const char *fmt, ...)
{
    if (c->rc)
        return c->rc;
    snprintf(c->why->keyword, sizeof c->why->keyword, "%s", keyword);
    snprintf(c->why->path, sizeof c->why->path, "%s", path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why->message, sizeof c->why->message, fmt, ap);
    va_end(ap);
    c->rc = -EINVAL;
    return c->rc;
}

/* A GBNF string literal of n bytes. */
void sc_lit(ut_buf *b, const char *s, size_t n)
{
    ut_buf_addc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            ut_buf_printf(b, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F)
            ut_buf_printf(b, "\\x%02X", ch);
        else
            ut_buf_addc(b, (char)ch);
    }
    ut_buf_addc(b, '"');
}

void sc_lits(ut_buf *b, const char *s) { sc_lit(b, s, strlen(s)); }

int sc_new_rule(struct sc *c) { return c->n_rules++; }

/* "rN ::= body\n" */
int sc_define(struct sc *c, int rule, const ut_buf *body)
{
    static const ut_buf none;
    if (body->oom && !c->rc)
        c->rc = -ENOMEM;
    if (!c->rc)
        ut_buf_printf(&c->out, "r%d ::= %s\n", rule, body->p ? body->p : "\"\"");
    return sc_room(c, &none, "#");
}

int sc_room(struct sc *c, const ut_buf *pending, const char *path)
{
    if (!c->rc && (pending->oom || c->out.oom))
        c->rc = -ENOMEM;
    if (!c->rc && c->out.n + pending->n > MAX_TEXT)
        return sc_refuse(c, "schema", path, "the schema compiles to a grammar over the limit of "
                         "%u MiB of GBNF text", MAX_TEXT >> 20);
    return c->rc;
}

/* ---- fixed rules --------------------------------------------------------------------- */

static void common_rules(struct sc *c)
{
    ut_buf *o = &c->out;
    ut_buf_printf(o, "ws ::= [ \\t\\n]{0,%d}\n", WS_MAX);
    /* One JSON string character: anything but '"', '\' and controls, or an escape.
     * Inside tool-call XML, '<' would end the value early: it is left out. */
    ut_buf_printf(o, "jchar ::= [^\"\\\\\\x00-\\x1F%s] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
                     "[0-9a-fA-F]{4})\n", c->xml ? "<" : "");
    ut_buf_adds(o, "jstring ::= \"\\\"\" jchar* \"\\\"\"\n");
    ut_buf_adds(o, "jint ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n");
    ut_buf_adds(o, "jnumber ::= jint (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n");
    ut_buf_adds(o, "jbool ::= \"true\" | \"false\"\n");
    /* Plain text of a tool-call parameter: what the template writes without CDATA. */
    ut_buf_adds(o, "xchar ::= [^<&\\n]\n");
    ut_buf_adds(o, "xcdata ::= \"<![CDATA[\" [^\\]]* \"]]>\"\n");
    sc_pattern_rules(c);
    for (int d = 0; d <= ANY_DEPTH; d++) {
        ut_buf_printf(o, "jvalue%d ::= jstring | jnumber | jbool | \"null\"", d);
        if (d < ANY_DEPTH)
            ut_buf_printf(o, " | jobject%d | jarray%d", d, d);
        ut_buf_addc(o, '\n');
        if (d < ANY_DEPTH) {
            ut_buf_printf(o, "jobject%d ::= \"{\" ws (jstring ws \":\" ws jvalue%d (ws \",\" ws "
                             "jstring ws \":\" ws jvalue%d)*)? ws \"}\"\n", d, d + 1, d + 1);
            ut_buf_printf(o, "jarray%d ::= \"[\" ws (jvalue%d (ws \",\" ws jvalue%d)*)? ws "
                             "\"]\"\n", d, d + 1, d + 1);
        }
    }
}

/* ---- keywords ------------------------------------------------------------------------- */

/* Keywords that only describe: ignored. */
static const char *const annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "readOnly",
    "writeOnly", "deprecated", "$defs", "definitions", "strict", "name", "contentMediaType",
    "contentEncoding", "$anchor",
};
/* Keywords compiled. */
static const char *const supported[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
    "oneOf", "allOf", "items", "prefixItems", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "$ref", "format", "nullable",
};

static bool in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0)
            return true;
    return false;
}

#define N_OF(a) (sizeof(a) / sizeof *(a))

int sc_check_keywords(struct sc *c, const json_t *s, const char *path)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(k, annotations, N_OF(annotations)) || in_list(k, supported, N_OF(supported)))
            continue;
        return sc_refuse(c, k, path, "the JSON Schema keyword '%s' at %s is not supported in "
                                     "structured outputs", k, path);
    }
    return 0;
}

static bool get_count(const json_t *s, const char *k, long long *out)
{
    const json_t *v = json_object_get(s, k);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        fabs(json_real_value(v)) < 9e15) {
        *out = (long long)json_real_value(v);
        return true;
    }
    return false;
}

static int count_kw(struct sc *c, const json_t *s, const char *k, const char *path, long long def,
                    long long *out)
{
    *out = def;
    if (!json_object_get(s, k))
        return 0;
    if (!get_count(s, k, out) || *out < 0)
        return sc_refuse(c, k, path, "'%s' at %s must be a non-negative integer", k, path);
    return 0;
}

/* A min/max pair of counts (minLength/maxLength, minItems/maxItems): *mx is -1
 * when there is no maximum; the pair must be ordered and within what the grammar
 * can repeat. `what` names the counted thing in the refusal. */
int sc_count_range(struct sc *c, const json_t *s, const char *kmin, const char *kmax,
                       const char *what, const char *path, long long *mn, long long *mx)
{
    if (count_kw(c, s, kmin, path, 0, mn) || count_kw(c, s, kmax, path, -1, mx))
        return c->rc;
    if (*mx >= 0 && *mx < *mn)
        return sc_refuse(c, kmax, path, "'%s' below '%s' at %s", kmax, kmin, path);
    if (*mn > ENG_GRAM_MAX_REPEAT || *mx > ENG_GRAM_MAX_REPEAT)
        return sc_refuse(c, *mx > ENG_GRAM_MAX_REPEAT ? kmax : kmin, path,
                         "%s lengths above %d at %s are not supported", what,
                         ENG_GRAM_MAX_REPEAT, path);
    return 0;
}

/* ---- strings ------------------------------------------------------------------------- */

static const char *const formats[][2] = {
    {"date", "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" "
             "[01])"},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
             "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
    {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
             "[0-9a-f]{12}"},
};

static int gen_string(struct sc *c, const json_t *s, const char *path, bool raw, ut_buf *b)
{
    const char *q = raw ? "" : "\"\\\"\" ";
    const char *qe = raw ? "" : " \"\\\"\"";
    const json_t *fmt = json_object_get(s, "format");
    const char *f = json_string_value(fmt);
    if (f) {
        const char *body = NULL;
        char dt[600];
        if (strcmp(f, "date-time") == 0) {
            snprintf(dt, sizeof dt, "(%s) \"T\" (%s)", formats[0][1], formats[1][1]);
            body = dt;
        }
        for (size_t i = 0; !body && i < N_OF(formats); i++)
            if (strcmp(f, formats[i][0]) == 0)
                body = formats[i][1];
        if (body) {
            if (json_object_get(s, "pattern"))
                return sc_refuse(c, "pattern", path, "'pattern' with 'format' at %s is not "
                                                     "supported", path);
            ut_buf_printf(b, "%s(%s)%s", q, body, qe);
            return 0;
        }
        /* other formats are annotations (JSON Schema 2020-12's default) */
    }
    long long mn, mx;
    if (sc_count_range(c, s, "minLength", "maxLength", "string", path, &mn, &mx))
        return c->rc;
    const json_t *pat = json_object_get(s, "pattern");
    if (pat) {
        if (!json_is_string(pat))
            return sc_refuse(c, "pattern", path, "'pattern' at %s must be a string", path);
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return sc_refuse(c, "pattern", path, "'pattern' with 'minLength' / 'maxLength' at "
                                                 "%s is not supported", path);
        ut_buf_adds(b, q);
        if (sc_pattern(c, json_string_value(pat), path, raw, b))
            return c->rc;
        ut_buf_adds(b, qe);
        return 0;
    }
    const char *ch = raw ? "xchar" : "jchar";
    if (raw && mn == 0 && mx < 0) {
        /* a plain value, or any text in CDATA (what the template does for <, & and
         * newlines) */
        ut_buf_adds(b, "(xchar* | xcdata)");
        return 0;
    }
    if (mx < 0)
        ut_buf_printf(b, "%s%s{%lld,}%s", q, ch, mn, qe);
    else
        ut_buf_printf(b, "%s%s{%lld,%lld}%s", q, ch, mn, mx, qe);
    return 0;
}

/* ---- the generic walk ------------------------------------------------------------------ */

static int gen(struct sc *c, const json_t *s, const char *path, bool raw, int depth, ut_buf *b);

/* A new rule for the schema at `path`; its name appended to b. */
int sc_sub(struct sc *c, const json_t *s, const char *path, bool raw, int depth, ut_buf *b)
{
    int r = sc_new_rule(c);
    ut_buf body = {0};
    int rc = gen(c, s, path, raw, depth + 1, &body);
    if (!rc)
        rc = sc_define(c, r, &body);
    ut_buf_free(&body);
    if (!rc)
        ut_buf_printf(b, "r%d", r);
    return rc;
}

/* The schema at path/kw when it is an object (a rule), else any value; into an
 * empty `out`, freed on failure. */
int sc_sub_or_any(struct sc *c, const json_t *s, const char *path, const char *kw,
                      int depth, ut_buf *out)
{
    if (!json_is_object(s)) {
        ut_buf_adds(out, "jvalue1");
        return 0;
    }
    char p[320];
    snprintf(p, sizeof p, "%.200s/%s", path, kw);
    if (sc_sub(c, s, p, false, depth, out))
        ut_buf_free(out);
    return c->rc;
}

/* A JSON pointer inside the root schema ("#", "#/$defs/a", "#/definitions/a~1b"). */
static const json_t *resolve(struct sc *c, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = '\0';
        if (json_is_array(cur)) {
            char *e;
            long i = strtol(tok, &e, 10);
            cur = *e || e == tok || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = json_object_get(cur, tok);
        }
    }
    return *p ? NULL : cur;
}

static int gen_ref(struct sc *c, const json_t *s, const char *path, bool raw, int depth,
                   ut_buf *b)
{
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref)
        return sc_refuse(c, "$ref", path, "'$ref' at %s must be a string", path);
    static const char *const alone[] = {"type", "properties", "items", "enum", "const",
                                        "anyOf", "oneOf", "allOf", "pattern", "prefixItems"};
    for (size_t i = 0; i < N_OF(alone); i++)
        if (json_object_get(s, alone[i]))
            return sc_refuse(c, alone[i], path, "'%s' beside '$ref' at %s is not supported",
                             alone[i], path);
    const json_t *t = resolve(c, ref);
    if (!t)
        return sc_refuse(c, "$ref", path, "'$ref' '%.100s' at %s does not name a schema in "
                                          "this document", ref, path);
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].target == t && c->refs[i].raw == raw) {
            ut_buf_printf(b, "r%d", c->refs[i].rule);
            return 0;
        }
    if (c->n_refs >= c->refs_cap)
        return sc_refuse(c, "$ref", path, "more than %zu distinct $ref targets", c->refs_cap);
    int r = sc_new_rule(c);
    c->refs[c->n_refs++] = (struct sc_ref){t, r, raw};
    ut_buf body = {0};
    char p[256];
    snprintf(p, sizeof p, "%.250s", ref);
    int rc = gen(c, t, p, raw, depth + 1, &body);
    if (!rc)
        rc = sc_define(c, r, &body);
    ut_buf_free(&body);
    if (!rc)
        ut_buf_printf(b, "r%d", r);
    return rc;
}

void sc_json_lit(struct sc *c, const json_t *v, bool raw, ut_buf *b)
{
    if (raw && json_is_string(v)) {
        sc_lit(b, json_string_value(v), json_string_length(v));
        return;
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!t) {
        c->rc = -ENOMEM;
        return;
    }
    sc_lits(b, t);
    free(t);
}

static const char *const type_names[] = {"object", "array", "string", "number", "integer",
                                         "boolean", "null"};

static int gen_typed(struct sc *c, const json_t *s, const char *path, const char *type,
                     bool raw, int depth, ut_buf *b)
{
    if (strcmp(type, "object") == 0)
        return sc_gen_object(c, s, path, depth, b);
    if (strcmp(type, "array") == 0)
        return sc_gen_array(c, s, path, depth, b);
    if (strcmp(type, "string") == 0)
        return gen_string(c, s, path, raw, b);
    if (strcmp(type, "boolean") == 0) {
        ut_buf_adds(b, "jbool");
        return 0;
    }
    if (strcmp(type, "null") == 0) {
        ut_buf_adds(b, "\"null\"");
        return 0;
    }
    long long lo, hi;
    bool bounded;
    if (sc_int_bounds(c, s, path, &lo, &hi, &bounded))
        return c->rc;
    if (strcmp(type, "number") == 0 && !bounded) {
        ut_buf_adds(b, "jnumber");
        return 0;
    }
    if (!bounded) {
        ut_buf_adds(b, "jint");
        return 0;
    }
    sc_int_range(b, lo, hi);
    return 0;
}

static int gen_alts(struct sc *c, const json_t *list, const char *kw, const char *path, bool raw,
                    int depth, ut_buf *b)
{
    char p[320];
    if (!json_is_array(list) || json_array_size(list) == 0)
        return sc_refuse(c, kw, path, "'%s' at %s must be a non-empty array", kw, path);
    size_t i, kept = 0;
    const json_t *v;
    ut_buf_addc(b, '(');
    json_array_foreach(list, i, v) {
        if (json_is_false(v))
            continue; /* a branch nothing matches */
        if (kept++)
            ut_buf_adds(b, " | ");
        snprintf(p, sizeof p, "%.200s/%s/%zu", path, kw, i);
        if (sc_sub(c, v, p, raw, depth, b) || sc_room(c, b, path))
            return c->rc;
    }
    if (!kept)
        return sc_refuse(c, kw, path, "every branch of '%s' at %s is false: nothing is valid",
                         kw, path);
    ut_buf_addc(b, ')');
    return 0;
}

/* The types `type` names (and "null" for `nullable`), each known and once: *nt is
 * 0 when there is no `type`. An empty list allows nothing: refused. */
static int type_list(struct sc *c, const json_t *s, const char *path, const char **types,
                     size_t *nt)
{
    const json_t *type = json_object_get(s, "type");
    const char *names[8];
    size_t n = 0;
    *nt = 0;
    if (!type)
        return 0;
    if (json_is_string(type)) {
        names[n++] = json_string_value(type);
    } else if (json_is_array(type)) {
        size_t i;
        const json_t *v;
        if (json_array_size(type) == 0)
            return sc_refuse(c, "type", path, "'type' at %s is an empty list, which allows "
                                              "nothing", path);
        json_array_foreach(type, i, v) {
            if (!json_is_string(v) || n >= 7)
                return sc_refuse(c, "type", path, "'type' at %s must be a type name or a list "
                                                  "of up to 7", path);
            names[n++] = json_string_value(v);
        }
    } else {
        return sc_refuse(c, "type", path, "'type' at %s must be a string or an array", path);
    }
    if (json_is_true(json_object_get(s, "nullable")))
        names[n++] = "null";
    for (size_t i = 0; i < n; i++) {
        const char *known = NULL;
        for (size_t k = 0; k < N_OF(type_names); k++)
            if (strcmp(names[i], type_names[k]) == 0)
                known = type_names[k];
        if (!known)
            return sc_refuse(c, "type", path, "unknown type '%.40s' at %s", names[i], path);
        bool dup = false;
        for (size_t k = 0; k < *nt; k++)
            dup |= types[k] == known;
        if (!dup)
            types[(*nt)++] = known;
    }
    return 0;
}

/* Whether the JSON value v is of one of the types. */
static bool has_type(const json_t *v, const char *const *types, size_t nt)
{
    for (size_t i = 0; i < nt; i++) {
        const char *t = types[i];
        if ((strcmp(t, "object") == 0 && json_is_object(v)) ||
            (strcmp(t, "array") == 0 && json_is_array(v)) ||
            (strcmp(t, "string") == 0 && json_is_string(v)) ||
            (strcmp(t, "number") == 0 && json_is_number(v)) ||
            (strcmp(t, "integer") == 0 &&
             (json_is_integer(v) ||
              (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))))) ||
            (strcmp(t, "boolean") == 0 && json_is_boolean(v)) ||
            (strcmp(t, "null") == 0 && json_is_null(v)))
            return true;
    }
    return false;
}

/* What a schema object says, appended to b as one GBNF expression. */
static int gen(struct sc *c, const json_t *s, const char *path, bool raw, int depth, ut_buf *b)
{
    if (c->rc)
        return c->rc;
    if (depth > MAX_NEST)
        return sc_refuse(c, "schema", path, "the schema nests deeper than %d at %s", MAX_NEST,
                         path);
    if (json_is_true(s)) {
        ut_buf_adds(b, raw ? "(xchar* | xcdata)" : "jvalue1");
        return 0;
    }
    if (!json_is_object(s))
        return sc_refuse(c, "schema", path, "the schema at %s must be an object%s", path,
                         json_is_false(s) ? " (false allows nothing)" : "");
    if (sc_check_keywords(c, s, path))
        return c->rc;
    if (json_object_get(s, "$ref"))
        return gen_ref(c, s, path, raw, depth, b);
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn || en) {
        /* the values the other keywords leave are not checked beyond `type`: a
         * value of another type (or a const outside the enum) is refused */
        if (en && (!json_is_array(en) || json_array_size(en) == 0))
            return sc_refuse(c, "enum", path, "'enum' at %s must be a non-empty array", path);
        const char *types[8];
        size_t nt = 0;
        if (type_list(c, s, path, types, &nt))
            return c->rc;
        if (cn) {
            bool in_enum = !en;
            for (size_t i = 0; en && i < json_array_size(en); i++)
                in_enum |= json_equal((json_t *)cn, json_array_get(en, i));
            if (!in_enum)
                return sc_refuse(c, "const", path, "the 'const' at %s is not in its 'enum': "
                                 "nothing is valid", path);
            if (nt && !has_type(cn, types, nt))
                return sc_refuse(c, "const", path, "the 'const' at %s is not of its 'type': "
                                 "nothing is valid", path);
            ut_buf_addc(b, '(');
            sc_json_lit(c, cn, raw, b);
            ut_buf_addc(b, ')');
            return c->rc;
        }
        size_t i, kept = 0;
        const json_t *v;
        ut_buf_addc(b, '(');
        json_array_foreach(en, i, v) {
            if (nt && !has_type(v, types, nt))
                continue;
            if (kept++)
                ut_buf_adds(b, " | ");
            sc_json_lit(c, v, raw, b);
            if (sc_room(c, b, path))
                return c->rc;
        }
        if (!kept)
            return sc_refuse(c, "enum", path, "no value of the 'enum' at %s is of its 'type': "
                             "nothing is valid", path);
        ut_buf_addc(b, ')');
        return c->rc;
    }
    const json_t *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1 || json_object_get(s, "type"))
            return sc_refuse(c, "allOf", path, "'allOf' at %s is supported with one schema only",
                             path);
        char p[320];
        snprintf(p, sizeof p, "%.200s/allOf/0", path);
        return sc_sub(c, json_array_get(all, 0), p, raw, depth, b);
    }
    const json_t *any = json_object_get(s, "anyOf");
    const char *any_kw = "anyOf";
    if (!any) {
        any = json_object_get(s, "oneOf");
        any_kw = "oneOf";
    }
    if (any) {
        if (json_object_get(s, "type") || json_object_get(s, "properties"))
            return sc_refuse(c, any_kw, path, "'%s' beside 'type' or 'properties' at %s is not "
                                              "supported", any_kw, path);
        return gen_alts(c, any, any_kw, path, raw, depth, b);
    }
    const char *types[8];
    size_t nt = 0;
    if (type_list(c, s, path, types, &nt))
        return c->rc;
    if (nt) {
        /* typed */
    } else if (json_object_get(s, "properties") || json_object_get(s, "required") ||
               json_object_get(s, "additionalProperties")) {
        types[nt++] = "object";
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) {
        types[nt++] = "array";
    } else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
               json_object_get(s, "pattern") || json_object_get(s, "format")) {
        types[nt++] = "string";
    } else if (json_object_get(s, "minimum") || json_object_get(s, "maximum")) {
        types[nt++] = "number";
    } else {
        ut_buf_adds(b, raw ? "(xchar* | xcdata)" : "jvalue1");
        return 0;
    }
    if (json_is_true(json_object_get(s, "nullable")) && !json_object_get(s, "type") && nt < 8)
        types[nt++] = "null";
    ut_buf_addc(b, '(');
    for (size_t i = 0; i < nt; i++) {
        if (i)
            ut_buf_adds(b, " | ");
        if (gen_typed(c, s, path, types[i], raw, depth, b))
            return c->rc;
    }
    ut_buf_addc(b, ')');
    return c->rc;
}

/* ---- the public compilers -------------------------------------------------------------- */

int sc_finish(struct sc *c, char **gbnf)
{
    if (!c->rc && c->out.oom)
        c->rc = -ENOMEM;
    if (c->rc) {
        ut_buf_free(&c->out);
        free(c->refs);
        return c->rc;
    }
    *gbnf = c->out.p;
    free(c->refs);
    return 0;
}

int sc_init(struct sc *c, const json_t *root, bool xml, struct eng_gram_refusal *why)
{
    static struct eng_gram_refusal dummy;
    *c = (struct sc){.root = root, .xml = xml, .why = why ? why : &dummy};
    c->refs_cap = 256;
    c->refs = calloc(c->refs_cap, sizeof *c->refs);
    if (!c->refs)
        return -ENOMEM;
    common_rules(c);
    return 0;
}

int eng_gram_from_schema(const json_t *schema, char **gbnf, struct eng_gram_refusal *why)
{
    struct sc c;
    *gbnf = NULL;
    if (sc_init(&c, schema, false, why))
        return -ENOMEM;
    ut_buf body = {0};
    if (!schema) {
        ut_buf_adds(&body, "jobject0");
    } else {
        sc_sub(&c, schema, "#", false, 0, &body);
    }
    ut_buf_printf(&c.out, "root ::= %s\n", body.p);
    ut_buf_free(&body);
    return sc_finish(&c, gbnf);
}

