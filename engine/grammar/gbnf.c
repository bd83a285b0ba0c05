/* GBNF text -> the draft rules of gram-impl.h (build.c makes them a grammar).
 *
 * Recursive descent over llama.cpp's GBNF syntax (the subset engine/grammar.h
 * lists; llama.cpp's grammars/README.md is the anchor for its meaning: a rule ends
 * at the end of its line unless inside parentheses or after '|'). Groups become
 * helper rules; a repetition becomes one REP element over its term (x* is
 * REP(x, 0, inf), x{m,n} REP(x, m, n)), so its size does not grow with the count.
 * Character classes are over code points and become UTF-8 byte sequences (the
 * range splitting of Go's regexp/syntax and Rust's utf8-ranges), so the language
 * holds valid UTF-8 only. The descent recurses only into parentheses, at most
 * MAX_NESTING deep; rule names and byte sets are found by hash, so parsing is
 * linear in the text. */
#include "engine/grammar/gram-impl.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 256

struct parser {
    struct gr_draft d;
    const char *p, *end;
    int line;
    uint32_t *names;        /* hash of named rules: index + 1, 0 free */
    size_t names_cap, n_names;
    uint32_t *set_tab;      /* hash of byte sets: index + 1, 0 free */
    size_t set_tab_cap;
};

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001B3ull;
    return gr_mix(h);
}

/* A refusal of the text, with its line. */
static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...)
{
    if (ps->d.rc)
        return ps->d.rc;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gr_fail(&ps->d, -EINVAL, "grammar line %d: %s", ps->line, msg);
}

/* ---- rules and sets ------------------------------------------------------------ */

static int grow_names(struct parser *ps)
{
    size_t cap = ps->names_cap ? 2 * ps->names_cap : 256;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return gr_fail(&ps->d, -ENOMEM, "out of memory compiling the grammar");
    for (size_t i = 0; i < ps->names_cap; i++) {
        uint32_t k = ps->names[i];
        if (!k)
            continue;
        const char *nm = ps->d.rules[k - 1].name;
        size_t h = hash_bytes(nm, strlen(nm)) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = k;
    }
    free(ps->names);
    ps->names = t;
    ps->names_cap = cap;
    return 0;
}

/* The rule named name[0..len), made on first sight. */
static int find_rule(struct parser *ps, const char *name, size_t len)
{
    if (2 * (ps->n_names + 1) > ps->names_cap && grow_names(ps))
        return ps->d.rc;
    size_t mask = ps->names_cap - 1, h = hash_bytes(name, len) & mask;
    for (; ps->names[h]; h = (h + 1) & mask) {
        const char *nm = ps->d.rules[ps->names[h] - 1].name;
        if (strlen(nm) == len && memcmp(nm, name, len) == 0)
            return (int)ps->names[h] - 1;
    }
    int id = gr_new_rule(&ps->d, name, len);
    if (id >= 0) {
        ps->names[h] = (uint32_t)id + 1;
        ps->n_names++;
    }
    return id;
}

static int grow_sets(struct parser *ps)
{
    size_t cap = ps->set_tab_cap ? 2 * ps->set_tab_cap : 256;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return gr_fail(&ps->d, -ENOMEM, "out of memory compiling the grammar");
    for (size_t i = 0; i < ps->d.n_sets; i++) {
        size_t h = hash_bytes(&ps->d.sets[i], sizeof *ps->d.sets) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = (uint32_t)i + 1;
    }
    free(ps->set_tab);
    ps->set_tab = t;
    ps->set_tab_cap = cap;
    return 0;
}

static int add_set(struct parser *ps, const struct gr_set *s)
{
    struct gr_draft *d = &ps->d;
    if (2 * (d->n_sets + 1) > ps->set_tab_cap && grow_sets(ps))
        return d->rc;
    size_t mask = ps->set_tab_cap - 1, h = hash_bytes(s, sizeof *s) & mask;
    for (; ps->set_tab[h]; h = (h + 1) & mask)
        if (memcmp(&d->sets[ps->set_tab[h] - 1], s, sizeof *s) == 0)
            return (int)ps->set_tab[h] - 1;
    if (ut_grow((void **)&d->sets, &d->cap_sets, d->n_sets + 1, sizeof *d->sets, 32))
        return gr_fail(d, -ENOMEM, "out of memory compiling the grammar");
    d->sets[d->n_sets] = *s;
    ps->set_tab[h] = (uint32_t)d->n_sets + 1;
    return (int)d->n_sets++;
}

static int emit(struct parser *ps, int rule, uint32_t e) { return gr_emit(&ps->d, (size_t)rule, e); }

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
                           ? ps->d.rc : 0;
            if ((hi & m) != m)
                return utf8_seq(ps, rule, lo, (hi & ~m) - 1) || utf8_seq(ps, rule, hi & ~m, hi)
                           ? ps->d.rc : 0;
        }
    }
    utf8_encode(hi, b);
    for (int i = 0; i < n; i++)
        if (emit_byte_range(ps, rule, a[i], b[i]))
            return ps->d.rc;
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
            return ps->d.rc;
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
    int h = gr_new_rule(&ps->d, NULL, 0);
    if (h < 0)
        return h;
    if (any_ascii) {
        int id = add_set(ps, &ascii);
        if (id < 0 || emit(ps, h, GR_EL(GR_SET, id)) || emit(ps, h, GR_EL(GR_ALT, 0)))
            return ps->d.rc;
    }
    for (size_t i = 0; i < n; i++)
        if (r[i].hi >= 0x80 && utf8_ranges(ps, h, r[i].lo < 0x80 ? 0x80 : r[i].lo, r[i].hi))
            return ps->d.rc;
    if (ps->d.rules[h].n == 0)
        return fail(ps, "an empty character class");
    ps->d.rules[h].el[ps->d.rules[h].n - 1] = GR_EL(GR_END, 0); /* the last ALT ends it */
    ps->d.rules[h].defined = true;
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
    while (!ps->d.rc && ps->p < ps->end && *ps->p != ']') {
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
            gr_fail(&ps->d, -ENOMEM, "out of memory compiling the grammar");
            break;
        }
        r[n++] = (struct range){lo, hi};
    }
    if (!ps->d.rc && ps->p >= ps->end)
        fail(ps, "an unterminated character class");
    if (ps->d.rc) {
        free(r);
        return ps->d.rc;
    }
    ps->p++; /* ] */
    if (n > 1)
        qsort(r, n, sizeof *r, by_lo);
    if (neg) { /* the complement in 0 .. 0x10FFFF */
        struct range *c = malloc((n + 1) * sizeof *c);
        if (!c) {
            free(r);
            return gr_fail(&ps->d, -ENOMEM, "out of memory compiling the grammar");
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
    /* NUL is never output: a class keeps the rest of its code points */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].lo == 0)
            r[i].lo = 1;
        if (r[i].lo <= r[i].hi)
            r[k++] = r[i];
    }
    int rc = emit_codepoints(ps, rule, r, k);
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
    struct gr_prule *r = &ps->d.rules[rule];
    if (r->n - start == 1) {
        *x = r->el[start];
        r->n = (uint32_t)start;
        ps->d.n_el--;
        return 0;
    }
    int h = gr_new_rule(&ps->d, NULL, 0);
    if (h < 0)
        return h;
    r = &ps->d.rules[rule];
    for (size_t i = start; i < r->n; i++)
        if (emit(ps, h, ps->d.rules[rule].el[i]))
            return ps->d.rc;
    if (emit(ps, h, GR_EL(GR_END, 0)))
        return ps->d.rc;
    ps->d.rules[h].defined = true;
    ps->d.n_el -= ps->d.rules[rule].n - start;
    ps->d.rules[rule].n = (uint32_t)start;
    *x = GR_EL(GR_REF, h);
    return 0;
}

/* x{m,n} (n < 0: unbounded) on the last term: one REP element. */
static int repeat(struct parser *ps, int rule, size_t start, long m, long n)
{
    uint32_t x = 0;
    if (ps->d.rules[rule].n == start)
        return fail(ps, "a repetition with nothing before it");
    if (one_element(ps, rule, start, &x))
        return ps->d.rc;
    if (n == 0)
        return 0; /* x{0}: nothing */
    if (GR_TYPE(x) != GR_REF) { /* a byte set: REP repeats rules, so wrap it */
        int h = gr_new_rule(&ps->d, NULL, 0);
        if (h < 0 || emit(ps, h, x) || emit(ps, h, GR_EL(GR_END, 0)))
            return ps->d.rc;
        ps->d.rules[h].defined = true;
        x = GR_EL(GR_REF, h);
    }
    if (m == 1 && n == 1)
        return emit(ps, rule, x);
    struct gr_draft *d = &ps->d;
    if (ut_grow((void **)&d->reps, &d->cap_reps, d->n_reps + 1, sizeof *d->reps, 16))
        return gr_fail(d, -ENOMEM, "out of memory compiling the grammar");
    d->reps[d->n_reps] = (struct gr_rep){GR_VAL(x), (uint32_t)m, n < 0 ? GR_INF : (uint32_t)n,
                                         false};
    return emit(ps, rule, GR_EL(GR_REP, d->n_reps++));
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
        return ps->d.rc;
    if (m < 0)
        return fail(ps, "expected a count after '{'");
    skip_space(ps, true);
    if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_space(ps, true);
        n = ps->p < ps->end && *ps->p == '}' ? -1 : read_count(ps);
        if (n == -2)
            return ps->d.rc;
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
        if (ps->d.rc || ps->p >= ps->end)
            return ps->d.rc;
        char c = *ps->p;
        size_t here = ps->d.rules[rule].n;
        if (c == '"') {
            ps->p++;
            while (!ps->d.rc && ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                if (*ps->p == '\\' ? parse_escape(ps, &cp) : utf8_decode(ps, &cp))
                    return ps->d.rc;
                if (cp == 0)
                    return fail(ps, "a literal NUL (the output never holds one)");
                unsigned char u[4];
                int k = utf8_encode(cp, u);
                for (int i = 0; i < k; i++)
                    if (emit_byte_range(ps, rule, u[i], u[i]))
                        return ps->d.rc;
            }
            if (ps->p >= ps->end)
                return fail(ps, "an unterminated string literal");
            ps->p++;
            last = here;
        } else if (c == '[') {
            if (parse_class(ps, rule))
                return ps->d.rc;
            last = here;
        } else if (c == '.') {
            ps->p++;
            struct range any = {1, 0x10FFFF};
            if (emit_codepoints(ps, rule, &any, 1))
                return ps->d.rc;
            last = here;
        } else if (c == '(') {
            if (depth >= MAX_NESTING)
                return fail(ps, "parentheses nested too deep");
            ps->p++;
            int h = gr_new_rule(&ps->d, NULL, 0);
            if (h < 0 || parse_alternatives(ps, h, true, depth + 1))
                return ps->d.rc;
            if (ps->p >= ps->end || *ps->p != ')')
                return fail(ps, "expected ')'");
            ps->p++;
            ps->d.rules[h].defined = true;
            if (emit(ps, rule, GR_EL(GR_REF, h)))
                return ps->d.rc;
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
                return ps->d.rc;
            last = here;
        } else if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            if (last == (size_t)-1)
                return fail(ps, "'%c' with nothing before it", c);
            if (repeat(ps, rule, last, c == '+' ? 1 : 0, c == '?' ? 1 : -1))
                return ps->d.rc;
            last = (size_t)-1;
        } else if (c == '{') {
            if (last == (size_t)-1)
                return fail(ps, "'{' with nothing before it");
            if (parse_braces(ps, rule, last))
                return ps->d.rc;
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
            return ps->d.rc;
        skip_space(ps, nested);
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            skip_space(ps, true);
            if (emit(ps, rule, GR_EL(GR_ALT, 0)))
                return ps->d.rc;
            continue;
        }
        return emit(ps, rule, GR_EL(GR_END, 0));
    }
}

static int parse_rules(struct parser *ps)
{
    for (;;) {
        skip_space(ps, true);
        if (ps->d.rc || ps->p >= ps->end)
            return ps->d.rc;
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
            return ps->d.rc;
        if (ps->d.rules[id].defined)
            return fail(ps, "rule '%.*s' defined twice", (int)(len > 64 ? 64 : len), s);
        ps->d.rules[id].defined = true;
        if (parse_alternatives(ps, id, false, 0))
            return ps->d.rc;
        if (ps->p < ps->end && *ps->p != '\n' && !is_name_char(*ps->p))
            return fail(ps, "unexpected '%c'", *ps->p);
    }
}

int eng_grammar_compile(const char *text, size_t len, const struct eng_gram_limits *lim,
                        eng_grammar **out, char *err, size_t errlen)
{
    char dummy[8];
    struct eng_gram_limits def;
    if (!lim) {
        eng_gram_limits_default(&def);
        lim = &def;
    }
    struct parser ps = {.p = text, .end = text + len, .line = 1};
    ps.d = (struct gr_draft){.lim = lim, .err = err ? err : dummy,
                             .errlen = err ? errlen : sizeof dummy};
    *out = NULL;
    int rc = parse_rules(&ps);
    free(ps.names);
    free(ps.set_tab);
    if (!rc)
        rc = gr_build(&ps.d, out);
    gr_draft_free(&ps.d);
    return rc;
}

int eng_grammar_parse(const char *text, size_t len, eng_grammar **out, char *err, size_t errlen)
{
    return eng_grammar_compile(text, len, NULL, out, err, errlen);
}
