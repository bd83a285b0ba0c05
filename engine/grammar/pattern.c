/* JSON Schema `pattern` (ECMA-262 regex) -> a GBNF expression over the string's
 * content, for the subset: literals, escapes of punctuation, \d \w \s \D \W, '.',
 * [classes] (ranges, negation, \d \w \s inside), groups ( ) and (?: ), '|', the
 * quantifiers * + ? {m} {m,} {m,n} (lazy ones too: the language is the same), '^'
 * first and '$' last. Anything else (lookarounds, backreferences, anchors in the
 * middle, \b, \S) is refused by name. A pattern without '^' or '$' matches
 * anywhere (JSON Schema's search semantics): any characters are allowed before or
 * after it.
 *
 * In JSON mode the content is JSON-escaped: a literal '"' or '\' is written as its
 * escape, '.' and negated classes take any string character but '"', '\' and
 * controls (so escapes are never produced by them), and positive classes may not
 * hold those. In raw mode (tool-call XML) '<', '&' and newlines are left out. */
#include "engine/grammar/schema-impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct rx {
    struct sc *c;
    const char *p, *start;
    const char *path;
    bool raw;
    ut_buf *b;
    int depth;
};

static int bad(struct rx *r, const char *what)
{
    return sc_refuse(r->c, "pattern", r->path, "the 'pattern' at %s uses %s, which structured "
                                               "outputs do not support", r->path, what);
}

/* One character of a class, in GBNF class syntax. */
static int class_char(struct rx *r, unsigned char ch, ut_buf *cls)
{
    if (!r->raw && (ch == '"' || ch == '\\' || ch < 0x20))
        return bad(r, "a class holding '\"', '\\' or a control character");
    if (r->raw && (ch == '<' || ch == '&' || ch == '\n'))
        return bad(r, "a class holding '<', '&' or a newline inside a tool call");
    if (ch == ']' || ch == '\\' || ch == '-' || ch == '^' || ch == '"')
        ut_buf_printf(cls, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7F)
        ut_buf_printf(cls, "\\x%02X", ch);
    else
        ut_buf_addc(cls, (char)ch);
    return 0;
}

static const char *excluded(const struct rx *r)
{
    return r->raw ? "<&\\n" : "\"\\\\\\x00-\\x1F";
}

static int parse_class(struct rx *r)
{
    r->p++; /* [ */
    bool neg = *r->p == '^';
    if (neg)
        r->p++;
    ut_buf cls = {0};
    ut_buf_adds(&cls, neg ? "[^" : "[");
    bool first = true;
    while (*r->p && (*r->p != ']' || first)) {
        first = false;
        unsigned char ch = (unsigned char)*r->p;
        if (ch == '\\') {
            char e = r->p[1];
            if (!e)
                break;
            r->p += 2;
            if (e == 'd') {
                ut_buf_adds(&cls, "0-9");
            } else if (e == 'w') {
                ut_buf_adds(&cls, "a-zA-Z0-9_");
            } else if (e == 's') {
                ut_buf_adds(&cls, " ");
            } else if (strchr("DWSbBpP", e) || (e >= '0' && e <= '9')) {
                ut_buf_free(&cls);
                return bad(r, "a class escape other than \\d \\w \\s");
            } else {
                char lit = e == 'n' ? '\n' : e == 't' ? '\t' : e;
                if (class_char(r, (unsigned char)lit, &cls)) {
                    ut_buf_free(&cls);
                    return r->c->rc;
                }
            }
            continue;
        }
        if (ch == '-' && r->p[1] != ']' && cls.n > (neg ? 2u : 1u)) {
            ut_buf_addc(&cls, '-');
            r->p++;
            continue;
        }
        /* a whole UTF-8 character */
        size_t n = ch < 0x80 ? 1 : (ch & 0xE0) == 0xC0 ? 2 : (ch & 0xF0) == 0xE0 ? 3 : 4;
        if (n == 1) {
            if (class_char(r, ch, &cls)) {
                ut_buf_free(&cls);
                return r->c->rc;
            }
            r->p++;
        } else {
            for (size_t i = 0; i < n && *r->p; i++)
                ut_buf_addc(&cls, *r->p++);
        }
    }
    if (*r->p != ']') {
        ut_buf_free(&cls);
        return bad(r, "an unterminated class");
    }
    r->p++;
    if (neg)
        ut_buf_adds(&cls, excluded(r));
    ut_buf_addc(&cls, ']');
    ut_buf_add(r->b, cls.p, cls.n);
    ut_buf_free(&cls);
    return 0;
}

/* A literal character of the content. */
static int literal(struct rx *r, unsigned char ch)
{
    if (r->raw) {
        if (ch == '<' || ch == '&' || ch == '\n')
            return bad(r, "'<', '&' or a newline inside a tool call");
        char s[1] = {(char)ch};
        sc_lit(r->b, s, 1);
        return 0;
    }
    if (ch == '"' || ch == '\\') {
        char s[2] = {'\\', (char)ch};
        sc_lit(r->b, s, 2);
        return 0;
    }
    if (ch == '\n' || ch == '\t') {
        char s[2] = {'\\', ch == '\n' ? 'n' : 't'};
        sc_lit(r->b, s, 2);
        return 0;
    }
    if (ch < 0x20)
        return bad(r, "a control character");
    char s[1] = {(char)ch};
    sc_lit(r->b, s, 1);
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
    if (ch == '.') {
        r->p++;
        ut_buf_adds(r->b, r->raw ? "xchar" : "jchar");
        return 0;
    }
    if (ch == '^' || ch == '$')
        return bad(r, "an anchor other than a leading '^' and a trailing '$'");
    if (ch == '\\') {
        char e = r->p[1];
        if (!e)
            return bad(r, "a trailing backslash");
        r->p += 2;
        switch (e) {
        case 'd': ut_buf_adds(r->b, "[0-9]"); return 0;
        case 'w': ut_buf_adds(r->b, "[a-zA-Z0-9_]"); return 0;
        case 's': ut_buf_adds(r->b, r->raw ? "[ \\t]" : "(\" \" | \"\\\\t\" | \"\\\\n\")");
            return 0;
        case 'D': ut_buf_printf(r->b, "[^0-9%s]", excluded(r)); return 0;
        case 'W': ut_buf_printf(r->b, "[^a-zA-Z0-9_%s]", excluded(r)); return 0;
        case 'n': return literal(r, '\n');
        case 't': return literal(r, '\t');
        default:
            if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                return bad(r, "an escape other than \\d \\w \\s \\D \\W \\n \\t");
            return literal(r, (unsigned char)e);
        }
    }
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == ')' || ch == '|')
        return bad(r, "a quantifier with nothing before it");
    unsigned char u = (unsigned char)ch;
    if (u < 0x80) {
        r->p++;
        return literal(r, u);
    }
    size_t n = (u & 0xE0) == 0xC0 ? 2 : (u & 0xF0) == 0xE0 ? 3 : 4;
    if (strnlen(r->p, n) < n)
        return bad(r, "invalid UTF-8");
    sc_lit(r->b, r->p, n);
    r->p += n;
    return 0;
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
    ut_buf_printf(&t, "root ::= %s\njchar ::= \"a\"\nxchar ::= \"a\"\n", frag->p ? frag->p : "");
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
