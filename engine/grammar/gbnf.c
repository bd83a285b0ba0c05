/* GBNF text -> the flat grammar of gram-impl.h.
 *
 * Recursive descent over llama.cpp's GBNF syntax (the subset engine/grammar.h
 * lists; llama.cpp's grammars/README.md is the anchor for its meaning: a rule ends
 * at the end of its line unless inside parentheses or after '|'). Groups and
 * repetitions become helper rules: x* is S ::= x S | (empty), x{m,n} is m copies of x
 * then n - m nested optionals, so every stack stays bounded by what was read.
 * Character classes are over code points and become UTF-8 byte sequences (the
 * range splitting of Go's regexp/syntax and Rust's utf8-ranges), so the language
 * holds valid UTF-8 only. Left recursion would make the stack expansion endless:
 * it is found here (a cycle among rules reachable through nullable prefixes) and
 * refused. */
#include "engine/grammar/gram-impl.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ELEMENTS (1u << 22)
#define MAX_RULES (1 << 20)
#define MAX_SETS 65536

struct prule {
    char *name;         /* NULL for helpers */
    uint32_t *el;
    size_t n, cap;
    bool defined;
};

struct parser {
    const char *p, *end;
    int line;
    struct prule *rules;
    size_t n_rules, cap_rules;
    struct gr_set *sets;
    size_t n_sets, cap_sets;
    size_t n_el;        /* all rules together */
    char *err;
    size_t errlen;
    int rc;             /* the first error */
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...)
{
    if (ps->rc)
        return ps->rc;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->err, ps->errlen, "grammar line %d: %s", ps->line, msg);
    ps->rc = -EINVAL;
    return ps->rc;
}

static int oom(struct parser *ps)
{
    if (!ps->rc) {
        snprintf(ps->err, ps->errlen, "out of memory compiling the grammar");
        ps->rc = -ENOMEM;
    }
    return ps->rc;
}

/* ---- rules and sets ------------------------------------------------------------ */

static int new_rule(struct parser *ps, const char *name, size_t len)
{
    if (ps->n_rules >= MAX_RULES)
        return fail(ps, "more than %d rules", MAX_RULES);
    if (ut_grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules, 64))
        return oom(ps);
    struct prule *r = &ps->rules[ps->n_rules];
    *r = (struct prule){0};
    if (name && !(r->name = strndup(name, len)))
        return oom(ps);
    return (int)ps->n_rules++;
}

static int find_rule(struct parser *ps, const char *name, size_t len)
{
    for (size_t i = 0; i < ps->n_rules; i++)
        if (ps->rules[i].name && strlen(ps->rules[i].name) == len &&
            memcmp(ps->rules[i].name, name, len) == 0)
            return (int)i;
    return new_rule(ps, name, len);
}

static int emit(struct parser *ps, int rule, uint32_t e)
{
    if (ps->rc)
        return ps->rc;
    if (++ps->n_el > MAX_ELEMENTS)
        return fail(ps, "the grammar is too large (over %u elements)", MAX_ELEMENTS);
    struct prule *r = &ps->rules[rule];
    if (ut_grow((void **)&r->el, &r->cap, r->n + 1, sizeof *r->el, 16))
        return oom(ps);
    r->el[r->n++] = e;
    return 0;
}

static int add_set(struct parser *ps, const struct gr_set *s)
{
    for (size_t i = ps->n_sets; i-- > 0;)
        if (memcmp(&ps->sets[i], s, sizeof *s) == 0)
            return (int)i;
    if (ps->n_sets >= MAX_SETS)
        return fail(ps, "more than %d distinct byte sets", MAX_SETS);
    if (ut_grow((void **)&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets, 32))
        return oom(ps);
    ps->sets[ps->n_sets] = *s;
    return (int)ps->n_sets++;
}

static void set_range(struct gr_set *s, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi; b++)
        s->bits[b >> 5] |= 1u << (b & 31);
}

static int emit_byte_range(struct parser *ps, int rule, unsigned lo, unsigned hi)
{
    struct gr_set s = {{0}};
    set_range(&s, lo, hi);
    int id = add_set(ps, &s);
    return id < 0 ? id : emit(ps, rule, GR_EL(GR_SET, id));
}

/* ---- UTF-8 ---------------------------------------------------------------------- */

/* util/utf8.h encodes and decodes; the grammar only calls it. Code points here
 * are never surrogates nor past U+10FFFF (escapes refuse them, ranges skip them). */
static int utf8_encode(uint32_t cp, unsigned char *out)
{
    return ut_utf8_encode(cp, (char *)out);
}

/* One code point of the grammar text (which must be UTF-8). */
static int utf8_decode(struct parser *ps, uint32_t *cp)
{
    int n = ut_utf8_decode(ps->p, (size_t)(ps->end - ps->p), cp);
    if (n <= 0)
        return fail(ps, "invalid UTF-8");
    ps->p += n;
    return 0;
}

/* Alternatives of byte sequences for the code points lo..hi of one encoded length,
 * appended to `rule` (each alternative ended by ALT). */
static int utf8_seq(struct parser *ps, int rule, uint32_t lo, uint32_t hi)
{
    unsigned char a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_seq(ps, rule, lo, lo | m) || utf8_seq(ps, rule, (lo | m) + 1, hi)
                           ? ps->rc : 0;
            if ((hi & m) != m)
                return utf8_seq(ps, rule, lo, (hi & ~m) - 1) || utf8_seq(ps, rule, hi & ~m, hi)
                           ? ps->rc : 0;
        }
    }
    utf8_encode(hi, b);
    for (int i = 0; i < n; i++)
        if (emit_byte_range(ps, rule, a[i], b[i]))
            return ps->rc;
    return emit(ps, rule, GR_EL(GR_ALT, 0));
}

static int utf8_ranges(struct parser *ps, int rule, uint32_t lo, uint32_t hi)
{
    static const uint32_t cut[] = {0x7F, 0x7FF, 0xD7FF, 0xDFFF, 0xFFFF, 0x10FFFF};
    uint32_t start = lo;
    for (size_t i = 0; i < sizeof cut / sizeof *cut && start <= hi; i++) {
        if (start > cut[i])
            continue;
        uint32_t stop = hi < cut[i] ? hi : cut[i];
        if (cut[i] != 0xDFFF && utf8_seq(ps, rule, start, stop))  /* no surrogates */
            return ps->rc;
        start = cut[i] + 1;
    }
    return 0;
}

/* ---- classes ---------------------------------------------------------------------- */

struct range {
    uint32_t lo, hi;
};

static int by_lo(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int parse_escape(struct parser *ps, uint32_t *cp)
{
    ps->p++; /* the backslash */
    if (ps->p >= ps->end)
        return fail(ps, "a backslash at the end");
    char c = *ps->p++;
    int hex = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'x': hex = 2; break;
    case 'u': hex = 4; break;
    case 'U': hex = 8; break;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
        *cp = (unsigned char)c;
        return 0;
    default: return fail(ps, "unknown escape \\%c", c);
    }
    uint32_t v = 0;
    for (int i = 0; i < hex; i++) {
        if (ps->p >= ps->end)
            return fail(ps, "a short \\%c escape", c);
        char h = *ps->p++;
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0)
            return fail(ps, "a bad \\%c escape", c);
        v = v << 4 | (uint32_t)d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail(ps, "escape \\%c out of range", c);
    *cp = v;
    return 0;
}

static int class_char(struct parser *ps, uint32_t *cp)
{
    if (ps->p >= ps->end)
        return fail(ps, "an unterminated character class");
    return *ps->p == '\\' ? parse_escape(ps, cp) : utf8_decode(ps, cp);
}

/* The code points of `r` (n ranges, sorted, may overlap) as one element of `rule`:
 * a SET when all are ASCII, else a helper rule of byte sequences. */
static int emit_codepoints(struct parser *ps, int rule, struct range *r, size_t n)
{
    struct gr_set ascii = {{0}};
    bool any_ascii = false, wide = false;
    for (size_t i = 0; i < n; i++) {
        if (r[i].lo < 0x80) {
            set_range(&ascii, r[i].lo, r[i].hi < 0x7F ? r[i].hi : 0x7F);
            any_ascii = true;
        }
        if (r[i].hi >= 0x80)
            wide = true;
    }
    if (!wide) {
        if (!any_ascii)
            return fail(ps, "an empty character class");
        int id = add_set(ps, &ascii);
        return id < 0 ? id : emit(ps, rule, GR_EL(GR_SET, id));
    }
    int h = new_rule(ps, NULL, 0);
    if (h < 0)
        return h;
    if (any_ascii) {
        int id = add_set(ps, &ascii);
        if (id < 0 || emit(ps, h, GR_EL(GR_SET, id)) || emit(ps, h, GR_EL(GR_ALT, 0)))
            return ps->rc;
    }
    for (size_t i = 0; i < n; i++)
        if (r[i].hi >= 0x80 && utf8_ranges(ps, h, r[i].lo < 0x80 ? 0x80 : r[i].lo, r[i].hi))
            return ps->rc;
    if (ps->rules[h].n == 0)
        return fail(ps, "an empty character class");
    ps->rules[h].el[ps->rules[h].n - 1] = GR_EL(GR_END, 0); /* the last ALT ends it */
    ps->rules[h].defined = true;
    return emit(ps, rule, GR_EL(GR_REF, h));
}

static int parse_class(struct parser *ps, int rule)
{
    ps->p++; /* [ */
    bool neg = ps->p < ps->end && *ps->p == '^';
    if (neg)
        ps->p++;
    struct range *r = NULL;
    size_t n = 0, cap = 0;
    while (!ps->rc && ps->p < ps->end && *ps->p != ']') {
        uint32_t lo, hi;
        if (class_char(ps, &lo))
            break;
        hi = lo;
        if (ps->p + 1 < ps->end && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            if (class_char(ps, &hi))
                break;
            if (hi < lo) {
                fail(ps, "a class range backwards");
                break;
            }
        }
        if (ut_grow((void **)&r, &cap, n + 1, sizeof *r, 8)) {
            oom(ps);
            break;
        }
        r[n++] = (struct range){lo, hi};
    }
    if (!ps->rc && ps->p >= ps->end)
        fail(ps, "an unterminated character class");
    if (ps->rc) {
        free(r);
        return ps->rc;
    }
    ps->p++; /* ] */
    if (n > 1)
        qsort(r, n, sizeof *r, by_lo);
    if (neg) { /* the complement in 0 .. 0x10FFFF */
        struct range *c = malloc((n + 1) * sizeof *c);
        if (!c) {
            free(r);
            return oom(ps);
        }
        size_t m = 0;
        uint32_t next = 0;
        for (size_t i = 0; i < n; i++) {
            if (r[i].lo > next)
                c[m++] = (struct range){next, r[i].lo - 1};
            if (r[i].hi + 1 > next)
                next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            c[m++] = (struct range){next, 0x10FFFF};
        free(r);
        r = c;
        n = m;
    }
    int rc = emit_codepoints(ps, rule, r, n);
    free(r);
    return rc;
}

/* ---- sequences and alternatives ---------------------------------------------------- */

static void skip_space(struct parser *ps, bool newlines)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r') {
            ps->p++;
        } else if (c == '\n' && newlines) {
            ps->p++;
            ps->line++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Make the last term of `rule` (elements from `start`) one element. */
static int one_element(struct parser *ps, int rule, size_t start, uint32_t *x)
{
    struct prule *r = &ps->rules[rule];
    if (r->n - start == 1) {
        *x = r->el[start];
        r->n = start;
        return 0;
    }
    int h = new_rule(ps, NULL, 0);
    if (h < 0)
        return h;
    r = &ps->rules[rule];
    for (size_t i = start; i < r->n; i++)
        if (emit(ps, h, r->el[i]))
            return ps->rc;
    if (emit(ps, h, GR_EL(GR_END, 0)))
        return ps->rc;
    ps->rules[h].defined = true;
    ps->rules[rule].n = start;
    *x = GR_EL(GR_REF, h);
    return 0;
}

/* x{m,n} (n < 0: unbounded) on the last term. */
static int repeat(struct parser *ps, int rule, size_t start, long m, long n)
{
    uint32_t x = 0;
    if (ps->rules[rule].n == start)
        return fail(ps, "a repetition with nothing before it");
    if (one_element(ps, rule, start, &x))
        return ps->rc;
    for (long i = 0; i < m; i++)
        if (emit(ps, rule, x))
            return ps->rc;
    if (n < 0) { /* S ::= x S | (empty) */
        int s = new_rule(ps, NULL, 0);
        if (s < 0 || emit(ps, s, x) || emit(ps, s, GR_EL(GR_REF, s)) ||
            emit(ps, s, GR_EL(GR_ALT, 0)) || emit(ps, s, GR_EL(GR_END, 0)))
            return ps->rc;
        ps->rules[s].defined = true;
        return emit(ps, rule, GR_EL(GR_REF, s));
    }
    int prev = -1; /* O_k ::= x O_{k-1} | (empty) */
    for (long k = 0; k < n - m; k++) {
        int o = new_rule(ps, NULL, 0);
        if (o < 0 || emit(ps, o, x) || (prev >= 0 && emit(ps, o, GR_EL(GR_REF, prev))) ||
            emit(ps, o, GR_EL(GR_ALT, 0)) || emit(ps, o, GR_EL(GR_END, 0)))
            return ps->rc;
        ps->rules[o].defined = true;
        prev = o;
    }
    return prev >= 0 ? emit(ps, rule, GR_EL(GR_REF, prev)) : 0;
}

static long read_count(struct parser *ps)
{
    long v = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return -1;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > ENG_GRAM_MAX_REPEAT) {
            fail(ps, "a repetition count over %d", ENG_GRAM_MAX_REPEAT);
            return -2;
        }
    }
    return v;
}

static int parse_braces(struct parser *ps, int rule, size_t start)
{
    ps->p++; /* { */
    skip_space(ps, true);
    long m = read_count(ps), n;
    if (m == -2)
        return ps->rc;
    if (m < 0)
        return fail(ps, "expected a count after '{'");
    skip_space(ps, true);
    if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_space(ps, true);
        n = ps->p < ps->end && *ps->p == '}' ? -1 : read_count(ps);
        if (n == -2)
            return ps->rc;
        if (n != -1 && n < m)
            return fail(ps, "a repetition {m,n} with n < m");
        if (n == -1 && ps->p < ps->end && *ps->p != '}')
            return fail(ps, "expected a count or '}'");
    } else {
        n = m;
    }
    skip_space(ps, true);
    if (ps->p >= ps->end || *ps->p != '}')
        return fail(ps, "expected '}'");
    ps->p++;
    return repeat(ps, rule, start, m, n);
}

static int parse_alternatives(struct parser *ps, int rule, bool nested, int depth);

static int parse_sequence(struct parser *ps, int rule, bool nested, int depth)
{
    size_t last = (size_t)-1;
    for (;;) {
        skip_space(ps, nested);
        if (ps->rc || ps->p >= ps->end)
            return ps->rc;
        char c = *ps->p;
        size_t here = ps->rules[rule].n;
        if (c == '"') {
            ps->p++;
            while (!ps->rc && ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                if (*ps->p == '\\' ? parse_escape(ps, &cp) : utf8_decode(ps, &cp))
                    return ps->rc;
                unsigned char u[4];
                int k = utf8_encode(cp, u);
                for (int i = 0; i < k; i++)
                    if (emit_byte_range(ps, rule, u[i], u[i]))
                        return ps->rc;
            }
            if (ps->p >= ps->end)
                return fail(ps, "an unterminated string literal");
            ps->p++;
            last = here;
        } else if (c == '[') {
            if (parse_class(ps, rule))
                return ps->rc;
            last = here;
        } else if (c == '.') {
            ps->p++;
            struct range any = {0, 0x10FFFF};
            if (emit_codepoints(ps, rule, &any, 1))
                return ps->rc;
            last = here;
        } else if (c == '(') {
            if (depth > 256)
                return fail(ps, "parentheses nested too deep");
            ps->p++;
            int h = new_rule(ps, NULL, 0);
            if (h < 0 || parse_alternatives(ps, h, true, depth + 1))
                return ps->rc;
            if (ps->p >= ps->end || *ps->p != ')')
                return fail(ps, "expected ')'");
            ps->p++;
            ps->rules[h].defined = true;
            if (emit(ps, rule, GR_EL(GR_REF, h)))
                return ps->rc;
            last = here;
        } else if (is_name_char(c)) {
            const char *s = ps->p;
            while (ps->p < ps->end && is_name_char(*ps->p))
                ps->p++;
            size_t len = (size_t)(ps->p - s);
            skip_space(ps, false);
            if (ps->p + 2 < ps->end && memcmp(ps->p, "::=", 3) == 0) { /* the next rule */
                ps->p = s;
                return 0;
            }
            int id = find_rule(ps, s, len);
            if (id < 0 || emit(ps, rule, GR_EL(GR_REF, id)))
                return ps->rc;
            last = here;
        } else if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            if (last == (size_t)-1)
                return fail(ps, "'%c' with nothing before it", c);
            if (repeat(ps, rule, last, c == '+' ? 1 : 0, c == '?' ? 1 : -1))
                return ps->rc;
            last = (size_t)-1;
        } else if (c == '{') {
            if (last == (size_t)-1)
                return fail(ps, "'{' with nothing before it");
            if (parse_braces(ps, rule, last))
                return ps->rc;
            last = (size_t)-1;
        } else {
            return 0;
        }
    }
}

static int parse_alternatives(struct parser *ps, int rule, bool nested, int depth)
{
    for (;;) {
        if (parse_sequence(ps, rule, nested, depth))
            return ps->rc;
        skip_space(ps, nested);
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            skip_space(ps, true);
            if (emit(ps, rule, GR_EL(GR_ALT, 0)))
                return ps->rc;
            continue;
        }
        return emit(ps, rule, GR_EL(GR_END, 0));
    }
}

static int parse_rules(struct parser *ps)
{
    for (;;) {
        skip_space(ps, true);
        if (ps->rc || ps->p >= ps->end)
            return ps->rc;
        const char *s = ps->p;
        while (ps->p < ps->end && is_name_char(*ps->p))
            ps->p++;
        if (ps->p == s)
            return fail(ps, "expected a rule name");
        size_t len = (size_t)(ps->p - s);
        skip_space(ps, false);
        if (ps->p + 2 >= ps->end || memcmp(ps->p, "::=", 3) != 0)
            return fail(ps, "expected '::=' after the rule name");
        ps->p += 3;
        int id = find_rule(ps, s, len);
        if (id < 0)
            return ps->rc;
        if (ps->rules[id].defined)
            return fail(ps, "rule '%.*s' defined twice", (int)(len > 64 ? 64 : len), s);
        ps->rules[id].defined = true;
        if (parse_alternatives(ps, id, false, 0))
            return ps->rc;
        if (ps->p < ps->end && *ps->p != '\n' && !is_name_char(*ps->p))
            return fail(ps, "unexpected '%c'", *ps->p);
    }
}

/* ---- checks and the flat grammar ----------------------------------------------------- */

/* A cycle of rules each reachable from the previous through a nullable prefix. */
static int check_left_recursion(struct parser *ps)
{
    size_t n = ps->n_rules;
    bool *nullable = calloc(n, sizeof *nullable);
    unsigned char *color = calloc(n, 1);
    struct frame {
        int rule;
        size_t i;       /* next element to look at */
        bool alive;     /* the prefix up to i is nullable */
    } *st = malloc(n * sizeof *st);
    int rc = 0;
    if (!nullable || !color || !st) {
        rc = oom(ps);
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            bool ok = true;
            for (size_t i = 0; i < ps->rules[r].n; i++) {
                uint32_t e = ps->rules[r].el[i];
                if (GR_IS_END(e)) {
                    if (ok) {
                        nullable[r] = changed = true;
                        break;
                    }
                    ok = true;
                } else if (GR_TYPE(e) == GR_SET || !nullable[GR_VAL(e)]) {
                    ok = false;
                }
            }
        }
    }
    for (size_t r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0])
            continue;
        size_t sp = 0;
        st[sp++] = (struct frame){(int)r0, 0, true};
        color[r0] = 1;
        while (sp && !rc) {
            struct frame *f = &st[sp - 1];
            struct prule *r = &ps->rules[f->rule];
            if (f->i >= r->n) {
                color[f->rule] = 2;
                sp--;
                continue;
            }
            uint32_t e = r->el[f->i++];
            if (GR_IS_END(e)) {
                f->alive = true;
                continue;
            }
            if (!f->alive)
                continue;
            if (GR_TYPE(e) == GR_SET) {
                f->alive = false;
                continue;
            }
            int t = (int)GR_VAL(e);
            if (!nullable[t])
                f->alive = false;
            if (color[t] == 1) {
                const char *name = ps->rules[t].name;
                snprintf(ps->err, ps->errlen, "grammar: left recursion through rule '%.64s'",
                         name ? name : "(a group)");
                rc = ps->rc = -EINVAL;
            } else if (color[t] == 0) {
                color[t] = 1;
                st[sp++] = (struct frame){t, 0, true};
            }
        }
    }
out:
    free(nullable);
    free(color);
    free(st);
    return rc;
}

static void free_parser(struct parser *ps)
{
    for (size_t i = 0; i < ps->n_rules; i++) {
        free(ps->rules[i].name);
        free(ps->rules[i].el);
    }
    free(ps->rules);
    free(ps->sets);
}

int eng_grammar_parse(const char *text, size_t len, eng_grammar **out, char *err, size_t errlen)
{
    char dummy[8];
    struct parser ps = {.p = text, .end = text + len, .line = 1, .err = err ? err : dummy,
                        .errlen = err ? errlen : sizeof dummy};
    *out = NULL;
    eng_grammar *g = NULL;
    int rc = parse_rules(&ps);
    int root = -1;
    for (size_t i = 0; !rc && i < ps.n_rules; i++) {
        if (!ps.rules[i].defined) {
            snprintf(ps.err, ps.errlen, "grammar: rule '%.64s' is used but not defined",
                     ps.rules[i].name);
            rc = -EINVAL;
        } else if (ps.rules[i].name && strcmp(ps.rules[i].name, "root") == 0) {
            root = (int)i;
        }
    }
    if (!rc && root < 0) {
        snprintf(ps.err, ps.errlen, "grammar: no rule named 'root'");
        rc = -EINVAL;
    }
    if (!rc)
        rc = check_left_recursion(&ps);
    if (rc)
        goto out;
    g = calloc(1, sizeof *g);
    if (!g || !(g->el = malloc((ps.n_el + 1) * sizeof *g->el)) ||
        !(g->rule_start = malloc(ps.n_rules * sizeof *g->rule_start)) ||
        !(g->sets = malloc((ps.n_sets + 1) * sizeof *g->sets))) {
        rc = oom(&ps);
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < ps.n_rules; i++) {
        g->rule_start[i] = (uint32_t)k;
        memcpy(g->el + k, ps.rules[i].el, ps.rules[i].n * sizeof *g->el);
        k += ps.rules[i].n;
    }
    g->el[k] = GR_EL(GR_END, 0);
    g->n_el = (int)k;
    g->n_rules = (int)ps.n_rules;
    if (ps.n_sets) /* none in a grammar of empty rules */
        memcpy(g->sets, ps.sets, ps.n_sets * sizeof *g->sets);
    g->n_sets = (int)ps.n_sets;
    g->root = root;
    atomic_init(&g->refs, 1);
    *out = g;
    g = NULL;
out:
    free_parser(&ps);
    eng_grammar_free(g);
    return rc;
}

eng_grammar *eng_grammar_ref(eng_grammar *g)
{
    if (g)
        atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void eng_grammar_free(eng_grammar *g)
{
    if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) > 1)
        return;
    free(g->el);
    free(g->rule_start);
    free(g->sets);
    free(g);
}
