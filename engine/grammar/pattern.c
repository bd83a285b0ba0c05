/* JSON Schema `pattern` (ECMA-262 regex) -> a GBNF expression over the string's
 * content, for the subset: literals; the escapes \t \n \v \f \r \0 \cX \xHH
 * \uHHHH (surrogate pairs joined) \u{H…} and punctuation, read the same inside a
 * class as outside; \d \w \s \D \W \S; '.'; [classes] (ranges, negation, the class
 * escapes inside, \b as backspace); groups ( ) and (?: ), '|', the quantifiers * + ?
 * {m} {m,} {m,n} (lazy ones too: the language is the same), '^' first and '$' last.
 * Characters are code points (the `u` flag's reading). Anything else (lookarounds,
 * backreferences, anchors in the middle, \b outside a class) is refused by name. A
 * pattern without '^' or '$' matches anywhere (JSON Schema's search semantics): any
 * characters are allowed before or after it.
 *
 * \s is ECMAScript's white space less U+FEFF, and \S leaves out U+001C..U+001F and
 * U+0085 as well: those are where validators' regex engines (Python's re, PCRE)
 * disagree with ECMAScript, and a value must satisfy either.
 *
 * In JSON mode the content is JSON-escaped: '"', '\' and controls a class or a
 * literal holds are written as their JSON escapes (emit_set). In raw mode (tool-call
 * XML) '<', '&' and newlines are left out of classes and refused as literals. */
#include "engine/grammar/schema-impl.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rx {
    struct sc *c;
    const char *p, *start;
    const char *path;
    bool raw;
    ut_buf *b;
    int depth;
};


/* ---- sets of code points --------------------------------------------------------------
 * Classes, '.', and the escapes \d \w \s \D \W \S are sets of code points, built and
 * complemented here and written out once (emit_set), so escapes mean the same inside
 * a class as outside it and the JSON escaping of '"', '\' and controls is done in one
 * place. */

struct cprange {
    uint32_t lo, hi;
};

struct cpset {
    struct cprange *r;
    size_t n, cap;
    bool oom;
};

#define CP_MAX 0x10FFFFu

static void set_add(struct cpset *s, uint32_t lo, uint32_t hi)
{
    if (s->oom || ut_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r, 8)) {
        s->oom = true;
        return;
    }
    s->r[s->n++] = (struct cprange){lo, hi};
}

static int by_lo(const void *a, const void *b)
{
    const struct cprange *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sorted, disjoint, not adjacent. */
static void set_norm(struct cpset *s)
{
    if (s->n < 2)
        return;
    qsort(s->r, s->n, sizeof *s->r, by_lo);
    size_t m = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[m].hi + 1) {
            if (s->r[i].hi > s->r[m].hi)
                s->r[m].hi = s->r[i].hi;
        } else {
            s->r[++m] = s->r[i];
        }
    }
    s->n = m + 1;
}

/* The complement in 0 .. CP_MAX. */
static void set_negate(struct cpset *s)
{
    set_norm(s);
    struct cpset c = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next)
            set_add(&c, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= CP_MAX)
        set_add(&c, next, CP_MAX);
    c.oom |= s->oom;
    free(s->r);
    *s = c;
}

/* Take lo..hi out of a normalized set. */
static void set_remove(struct cpset *s, uint32_t lo, uint32_t hi)
{
    struct cpset c = {0};
    for (size_t i = 0; i < s->n; i++) {
        struct cprange x = s->r[i];
        if (x.hi < lo || x.lo > hi) {
            set_add(&c, x.lo, x.hi);
            continue;
        }
        if (x.lo < lo)
            set_add(&c, x.lo, lo - 1);
        if (x.hi > hi)
            set_add(&c, hi + 1, x.hi);
    }
    c.oom |= s->oom;
    free(s->r);
    *s = c;
}

static bool set_has(const struct cpset *s, uint32_t cp)
{
    for (size_t i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi)
            return true;
    return false;
}

/* White space for \s: ECMAScript's, less U+FEFF (which other regex engines, that
 * validators use, do not count as space): a value matching it matches both. */
static const struct cprange space[] = {
    {0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};
/* What \S leaves out: ECMAScript's space, U+FEFF, and what others count as space
 * (U+001C..U+001F, U+0085), for the same reason. */
static const struct cprange space_wide[] = {
    {0x09, 0x0D}, {0x1C, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
    {0x3000, 0x3000}, {0xFEFF, 0xFEFF},
};

/* \d \w \s \D \W \S into s (union). */
static void add_class_escape(struct cpset *s, char e)
{
    struct cpset t = {0};
    switch (e) {
    case 'd': case 'D': set_add(&t, '0', '9'); break;
    case 'w': case 'W':
        set_add(&t, '0', '9');
        set_add(&t, 'A', 'Z');
        set_add(&t, '_', '_');
        set_add(&t, 'a', 'z');
        break;
    case 's':
        for (size_t i = 0; i < sizeof space / sizeof *space; i++)
            set_add(&t, space[i].lo, space[i].hi);
        break;
    case 'S':
        for (size_t i = 0; i < sizeof space_wide / sizeof *space_wide; i++)
            set_add(&t, space_wide[i].lo, space_wide[i].hi);
        break;
    }
    if (e == 'D' || e == 'W' || e == 'S')
        set_negate(&t);
    for (size_t i = 0; i < t.n; i++)
        set_add(s, t.r[i].lo, t.r[i].hi);
    s->oom |= t.oom;
    free(t.r);
}

/* One code point in GBNF class syntax. */
static void class_cp(ut_buf *b, uint32_t cp)
{
    if (cp == ']' || cp == '\\' || cp == '-' || cp == '^' || cp == '"' || cp == '[')
        ut_buf_printf(b, "\\%c", (char)cp);
    else if (cp < 0x20 || cp == 0x7F)
        ut_buf_printf(b, "\\x%02X", (unsigned)cp);
    else if (cp < 0x80)
        ut_buf_addc(b, (char)cp);
    else if (cp <= 0xFFFF)
        ut_buf_printf(b, "\\u%04X", (unsigned)cp);
    else
        ut_buf_printf(b, "\\U%08X", (unsigned)cp);
}

static int bad(struct rx *r, const char *what)
{
    return sc_refuse(r->c, "pattern", r->path, "the 'pattern' at %s uses %s, which structured "
                                               "outputs do not support", r->path, what);
}

/* The short JSON escapes of controls (\b \t \n \f \r). */
static char short_escape(uint32_t cp)
{
    switch (cp) {
    case 0x08: return 'b';
    case 0x09: return 't';
    case 0x0A: return 'n';
    case 0x0C: return 'f';
    case 0x0D: return 'r';
    default: return 0;
    }
}

/* The set s (consumed) as one GBNF expression over the content: one UTF-8
 * character of the set, as the content writes it. In JSON mode '"', '\' and the
 * controls are their JSON escapes (a control by its short escape and by \u00XX);
 * in raw mode '<', '&' and newlines, which would end or break the tool call, are
 * left out. Surrogates (no UTF-8 form) are left out. `what` names the construct in
 * a refusal when nothing is left. */
static int emit_set(struct rx *r, struct cpset *s, const char *what)
{
    set_norm(s);
    set_remove(s, 0xD800, 0xDFFF);
    bool esc[0x20] = {0}, quote = false, bslash = false;
    if (r->raw) {
        set_remove(s, '<', '<');
        set_remove(s, '&', '&');
        set_remove(s, '\n', '\n');
    } else {
        for (uint32_t cp = 0; cp < 0x20; cp++)
            esc[cp] = set_has(s, cp);
        quote = set_has(s, '"');
        bslash = set_has(s, '\\');
        set_remove(s, 0, 0x1F);
        set_remove(s, '"', '"');
        set_remove(s, '\\', '\\');
    }
    if (s->oom) {
        free(s->r);
        return r->c->rc = -ENOMEM;
    }
    ut_buf e = {0};
    int parts = 0;
    if (s->n) {
        ut_buf_addc(&e, '[');
        for (size_t i = 0; i < s->n; i++) {
            class_cp(&e, s->r[i].lo);
            if (s->r[i].hi > s->r[i].lo) {
                ut_buf_addc(&e, '-');
                class_cp(&e, s->r[i].hi);
            }
        }
        ut_buf_addc(&e, ']');
        parts++;
    }
    free(s->r);
    *s = (struct cpset){0};
    if (quote)
        ut_buf_printf(&e, "%s\"\\\\\\\"\"", parts++ ? " | " : "");
    if (bslash)
        ut_buf_printf(&e, "%s\"\\\\\\\\\"", parts++ ? " | " : "");
    for (uint32_t cp = 0; cp < 0x20; cp++)
        if (esc[cp] && short_escape(cp))
            ut_buf_printf(&e, "%s\"\\\\%c\"", parts++ ? " | " : "", short_escape(cp));
    for (int hi = 0; hi < 2; hi++) {
        ut_buf digits = {0};
        for (int lo = 0; lo < 16; lo++)
            if (esc[hi * 16 + lo])
                ut_buf_printf(&digits, lo < 10 ? "%X" : "%X%x", lo, lo);
        if (digits.n)
            ut_buf_printf(&e, "%s\"\\\\u00%d\" [%s]", parts++ ? " | " : "", hi, digits.p);
        ut_buf_free(&digits);
    }
    if (!parts) {
        ut_buf_free(&e);
        char msg[160];
        snprintf(msg, sizeof msg, "%s that matches no character %s", what,
                 r->raw ? "a tool call's text can hold" : "a string can hold");
        return bad(r, msg);
    }
    if (e.oom) {
        ut_buf_free(&e);
        return r->c->rc = -ENOMEM;
    }
    if (parts > 1)
        ut_buf_addc(r->b, '(');
    ut_buf_add(r->b, e.p, e.n);
    if (parts > 1)
        ut_buf_addc(r->b, ')');
    ut_buf_free(&e);
    return 0;
}

/* ---- escapes ------------------------------------------------------------------------------ */

static int hexval(char h)
{
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
           : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
}

/* n hex digits at p, or -1. */
static long hexn(const char *p, int n)
{
    long v = 0;
    for (int i = 0; i < n; i++) {
        int d = hexval(p[i]);
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* The escape at r->p (a backslash), as ECMAScript reads it: one code point (*cp,
 * returns 1), or a class escape \d \w \s \D \W \S (added to *set, returns 2), or
 * a refusal (negative). \uXXXX (a surrogate pair as one code point), \u{X…}, \xXX,
 * \cX, \0, \t \n \v \f \r, and any ASCII punctuation as itself are code points, the
 * same inside a class as outside; \b is a backspace in a class and refused outside
 * (a word boundary). */
static int escape(struct rx *r, bool in_class, uint32_t *cp, struct cpset *set)
{
    const char *p = r->p + 1;
    char e = *p++;
    long v = -1;
    if (!e)
        return bad(r, "a trailing backslash");
    switch (e) {
    case 'd': case 'w': case 's': case 'D': case 'W': case 'S':
        add_class_escape(set, e);
        r->p = p;
        return 2;
    case 't': v = '\t'; break;
    case 'n': v = '\n'; break;
    case 'v': v = 0x0B; break;
    case 'f': v = 0x0C; break;
    case 'r': v = '\r'; break;
    case 'b':
        if (!in_class)
            return bad(r, "\\b (a word boundary)");
        v = 0x08;
        break;
    case '0':
        if (*p >= '0' && *p <= '9')
            return bad(r, "an octal escape or a backreference");
        v = 0;
        break;
    case 'c':
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return bad(r, "a '\\c' not followed by a letter");
        v = *p++ % 32;
        break;
    case 'x':
        v = hexn(p, 2);
        if (v < 0)
            return bad(r, "a '\\x' not followed by two hex digits");
        p += 2;
        break;
    case 'u':
        if (*p == '{') {
            const char *q = p + 1;
            v = 0;
            while (hexval(*q) >= 0 && v <= (long)CP_MAX)
                v = v << 4 | hexval(*q++);
            if (q == p + 1 || *q != '}' || v > (long)CP_MAX)
                return bad(r, "a malformed '\\u{…}'");
            p = q + 1;
            break;
        }
        v = hexn(p, 4);
        if (v < 0)
            return bad(r, "a '\\u' not followed by four hex digits");
        p += 4;
        if (v >= 0xD800 && v <= 0xDBFF && p[0] == '\\' && p[1] == 'u') {
            long lo = hexn(p + 2, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
        }
        if (v >= 0xD800 && v <= 0xDFFF)
            return bad(r, "a lone surrogate escape");
        break;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') ||
            (unsigned char)e >= 0x80)
            return bad(r, "an escape other than \\d \\w \\s \\D \\W \\S \\t \\n \\v \\f \\r "
                          "\\0 \\cX \\xHH \\uHHHH \\u{H…} and punctuation");
        v = (unsigned char)e;
    }
    *cp = (uint32_t)v;
    r->p = p;
    return 1;
}

/* The UTF-8 character at r->p (the pattern came through a JSON parser, so it is
 * valid UTF-8; checked anyway). */
static int utf8_char(struct rx *r, uint32_t *cp)
{
    int n = ut_utf8_decode(r->p, strnlen(r->p, 4), cp);
    if (n <= 0)
        return bad(r, "invalid UTF-8");
    r->p += n;
    return 0;
}

/* One atom of a class at r->p: a code point (1) or a class escape into set (2). */
static int class_atom(struct rx *r, uint32_t *cp, struct cpset *set)
{
    if (*r->p == '\\')
        return escape(r, true, cp, set);
    if (utf8_char(r, cp))
        return r->c->rc;
    return 1;
}

/* [ … ] as ECMAScript reads it: `[]` matches nothing, `[^]` any character, '-' is
 * a literal first, last, or after a range; a range's ends are code points. */
static int parse_class(struct rx *r)
{
    r->p++; /* [ */
    bool neg = *r->p == '^';
    if (neg)
        r->p++;
    struct cpset s = {0};
    while (*r->p && *r->p != ']') {
        uint32_t lo, hi;
        int k = class_atom(r, &lo, &s);
        if (k < 0)
            goto fail;
        if (r->p[0] != '-' || r->p[1] == ']' || r->p[1] == '\0') {
            if (k == 1)
                set_add(&s, lo, lo);
            continue;
        }
        r->p++; /* - */
        int k2 = class_atom(r, &hi, &s);
        if (k2 < 0)
            goto fail;
        if (k == 2 || k2 == 2) {
            bad(r, "a class range with \\d, \\w or \\s as an end");
            goto fail;
        }
        if (hi < lo) {
            bad(r, "a class range written backwards");
            goto fail;
        }
        set_add(&s, lo, hi);
    }
    if (*r->p != ']') {
        bad(r, "an unterminated class");
        goto fail;
    }
    r->p++;
    if (neg)
        set_negate(&s);
    return emit_set(r, &s, neg ? "a negated class" : "a class");
fail:
    free(s.r);
    return r->c->rc;
}

/* A literal code point of the content. */
static int literal(struct rx *r, uint32_t cp)
{
    if (r->raw && (cp == '<' || cp == '&' || cp == '\n'))
        return bad(r, "'<', '&' or a newline inside a tool call");
    if (!r->raw && (cp < 0x20 || cp == '"' || cp == '\\')) {
        struct cpset s = {0};
        set_add(&s, cp, cp);
        return emit_set(r, &s, "a character");
    }
    char u[4];
    int n = ut_utf8_encode(cp, u);
    if (n == 0)
        return bad(r, "a code point that has no UTF-8 form");
    sc_lit(r->b, u, (size_t)n);
    return 0;
}

static int alternatives(struct rx *r);
static int translate(struct rx *r);

static int atom(struct rx *r)
{
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (*r->p == '?') {
            if (r->p[1] != ':')
                return bad(r, "a lookaround or named group");
            r->p += 2;
        }
        if (++r->depth > 64)
            return bad(r, "groups nested over 64 deep");
        ut_buf_addc(r->b, '(');
        if (alternatives(r))
            return r->c->rc;
        if (*r->p != ')')
            return bad(r, "an unbalanced '('");
        r->p++;
        r->depth--;
        ut_buf_addc(r->b, ')');
        return 0;
    }
    if (ch == '[')
        return parse_class(r);
    if (ch == '.') { /* one shared rule (sc_pattern_rules) */
        r->p++;
        ut_buf_adds(r->b, r->raw ? "xdot" : "jdot");
        return 0;
    }
    if (ch == '^' || ch == '$')
        return bad(r, "an anchor other than a leading '^' and a trailing '$'");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == ')' || ch == '|')
        return bad(r, "a quantifier with nothing before it");
    uint32_t cp;
    if (ch == '\\') {
        struct cpset s = {0};
        int k = escape(r, false, &cp, &s);
        if (k == 2)
            return emit_set(r, &s, "a class escape");
        free(s.r);
        return k < 0 ? r->c->rc : literal(r, cp);
    }
    if (utf8_char(r, &cp))
        return r->c->rc;
    return literal(r, cp);
}

static int quantifier(struct rx *r)
{
    char ch = *r->p;
    if (ch == '*' || ch == '+' || ch == '?') {
        ut_buf_addc(r->b, ch);
        r->p++;
    } else if (ch == '{') {
        const char *q = r->p + 1;
        long m = 0, n = -1;
        int digits = 0;
        while (*q >= '0' && *q <= '9' && digits < 6)
            m = m * 10 + (*q++ - '0'), digits++;
        if (!digits)
            return bad(r, "a '{' that is not a quantifier");
        if (*q == ',') {
            q++;
            if (*q >= '0' && *q <= '9') {
                n = 0;
                while (*q >= '0' && *q <= '9' && n <= 100000)
                    n = n * 10 + (*q++ - '0');
            }
        } else {
            n = m;
        }
        if (*q != '}')
            return bad(r, "a malformed {m,n}");
        if (m > ENG_GRAM_MAX_REPEAT || n > ENG_GRAM_MAX_REPEAT || (n >= 0 && n < m))
            return bad(r, "a repetition count out of range");
        if (n < 0)
            ut_buf_printf(r->b, "{%ld,}", m);
        else
            ut_buf_printf(r->b, "{%ld,%ld}", m, n);
        r->p = q + 1;
    } else {
        return 0;
    }
    if (*r->p == '?') /* lazy: the same language */
        r->p++;
    else if (*r->p == '+')
        return bad(r, "a possessive quantifier");
    if (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{')
        return bad(r, "a quantifier after a quantifier");
    return 0;
}

static int sequence(struct rx *r)
{
    bool any = false;
    while (*r->p && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && r->p[1] == '\0')
            break;
        ut_buf_addc(r->b, ' ');
        ut_buf_addc(r->b, '(');
        if (atom(r))
            return r->c->rc;
        ut_buf_addc(r->b, ')');
        if (quantifier(r))
            return r->c->rc;
        any = true;
    }
    if (!any)
        ut_buf_adds(r->b, " \"\"");
    return 0;
}

static int alternatives(struct rx *r)
{
    for (;;) {
        if (sequence(r))
            return r->c->rc;
        if (*r->p != '|')
            return 0;
        r->p++;
        ut_buf_adds(r->b, " |");
    }
}

/* The translation must compile (a class range written backwards, say, passes the
 * scan above): tried alone, with stand-ins for the shared rules it names. */
static int try_compile(struct rx *r, const ut_buf *frag)
{
    ut_buf t = {0};
    ut_buf_printf(&t, "root ::= %s\njchar ::= \"a\"\nxchar ::= \"a\"\njdot ::= \"a\"\n"
                      "xdot ::= \"a\"\n", frag->p ? frag->p : "");
    if (t.oom) {
        ut_buf_free(&t);
        return r->c->rc = -ENOMEM;
    }
    char err[256];
    eng_grammar *g = NULL;
    int rc = eng_grammar_parse(t.p, t.n, &g, err, sizeof err);
    ut_buf_free(&t);
    eng_grammar_free(g);
    if (rc == -ENOMEM)
        return r->c->rc = -ENOMEM;
    if (rc) {
        char what[300];
        snprintf(what, sizeof what, "what the grammar refuses (%s)", err);
        return bad(r, what);
    }
    return 0;
}

/* '.': any character but the line terminators (\n \r U+2028 U+2029), as the
 * rules jdot (JSON-escaped) and xdot (raw), which every '.' names. */
int sc_pattern_rules(struct sc *c)
{
    for (int raw = 0; raw < 2; raw++) {
        struct rx r = {.c = c, .path = "#", .raw = raw, .b = &c->out};
        struct cpset s = {0};
        set_add(&s, '\n', '\n');
        set_add(&s, '\r', '\r');
        set_add(&s, 0x2028, 0x2029);
        set_negate(&s);
        ut_buf_adds(&c->out, raw ? "xdot ::= " : "jdot ::= ");
        if (emit_set(&r, &s, "'.'"))
            return c->rc;
        ut_buf_addc(&c->out, '\n');
    }
    return 0;
}

int sc_pattern(struct sc *c, const char *pattern, const char *path, bool raw, ut_buf *out)
{
    ut_buf frag = {0};
    struct rx r = {.c = c, .p = pattern, .start = pattern, .path = path, .raw = raw, .b = &frag};
    int rc = translate(&r);
    if (!rc)
        rc = try_compile(&r, &frag);
    if (!rc)
        ut_buf_add(out, frag.p, frag.n);
    ut_buf_free(&frag);
    return rc;
}

/* The whole pattern: anchors, and any characters where it is not anchored. */
static int translate(struct rx *r0)
{
    struct rx r = *r0;
    struct sc *c = r.c;
    ut_buf *b = r.b;
    const char *any = r.raw ? "xchar*" : "jchar*";
    bool head = *r.p == '^';
    if (head)
        r.p++;
    ut_buf_addc(b, '(');
    if (!head)
        ut_buf_printf(b, "%s ", any);
    ut_buf_addc(b, '(');
    if (alternatives(&r))
        return c->rc;
    if (*r.p == ')')
        return bad(&r, "an unbalanced ')'");
    ut_buf_addc(b, ')');
    bool tail = *r.p == '$';
    if (!tail)
        ut_buf_printf(b, " %s", any);
    ut_buf_addc(b, ')');
    return 0;
}
