/* The text side of the tokenizer: normalizers (utf8proc) and pre-tokenizers (PCRE2
 * running the regexes from tokenizer.json).
 *
 * The reference these are checked against is Hugging Face's tokenizers.js (the
 * tokenizer of transformers.js), which itself mirrors the Rust `tokenizers` crate.
 * Where the two differ, the comment says which one is followed and why. */
#include "engine/text/tok-impl.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ==== normalizers ========================================================= */

static const char *jstr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

int eng__norm_parse(const json_t *j, struct tok_norm *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *type = json_is_object(j) ? jstr(j, "type") : NULL;
    if (!type) {
        snprintf(err, errlen, "normalizer: expected an object with a \"type\"");
        return -EINVAL;
    }
    static const struct {
        const char *name;
        enum tok_norm_type type;
    } simple[] = {{"NFC", TOK_NORM_NFC},   {"NFD", TOK_NORM_NFD},
                  {"NFKC", TOK_NORM_NFKC}, {"NFKD", TOK_NORM_NFKD},
                  {"Lowercase", TOK_NORM_LOWERCASE}};
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++)
        if (strcmp(type, simple[i].name) == 0) {
            out->type = simple[i].type;
            return 0;
        }
    if (strcmp(type, "Prepend") == 0 && jstr(j, "prepend")) {
        out->type = TOK_NORM_PREPEND;
        out->a = strdup(jstr(j, "prepend"));
        return out->a ? 0 : -ENOMEM;
    }
    if (strcmp(type, "Replace") == 0) {
        const char *pat = jstr(json_object_get(j, "pattern"), "String");
        const char *content = jstr(j, "content");
        if (!pat || !*pat || !content) {
            snprintf(err, errlen, "normalizer Replace: only a non-empty \"String\" pattern is supported");
            return -EINVAL;
        }
        out->type = TOK_NORM_REPLACE;
        out->a = strdup(pat);
        out->b = strdup(content);
        return out->a && out->b ? 0 : -ENOMEM;
    }
    if (strcmp(type, "Sequence") == 0) {
        const json_t *arr = json_object_get(j, "normalizers");
        if (!json_is_array(arr)) {
            snprintf(err, errlen, "normalizer Sequence: \"normalizers\" must be an array");
            return -EINVAL;
        }
        out->type = TOK_NORM_SEQUENCE;
        out->items = calloc(json_array_size(arr) + 1, sizeof *out->items);
        if (!out->items)
            return -ENOMEM;
        for (size_t i = 0; i < json_array_size(arr); i++) {
            int rc = eng__norm_parse(json_array_get(arr, i), &out->items[i], err, errlen);
            if (rc) {
                eng__norm_free(out);
                return rc;
            }
            out->n_items++;
        }
        return 0;
    }
    snprintf(err, errlen, "normalizer type \"%s\" is not supported", type);
    return -EINVAL;
}

void eng__norm_free(struct tok_norm *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_items; i++)
        eng__norm_free(&n->items[i]);
    free(n->items);
    free(n->a);
    free(n->b);
    memset(n, 0, sizeof *n);
}

static int norm_one(const struct tok_norm *n, const char *s, size_t len, ut_buf *out)
{
    out->n = 0;
    int opts = 0;
    switch (n->type) {
    case TOK_NORM_NFC: opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE; break;
    case TOK_NORM_NFD: opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE; break;
    case TOK_NORM_NFKC: opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case TOK_NORM_NFKD: opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    case TOK_NORM_PREPEND:
        /* As tokenizers.js and the Rust crate do: only non-empty text gets it. */
        if (len && ut_buf_add(out, n->a, strlen(n->a)))
            return -ENOMEM;
        return ut_buf_add(out, s, len);
    case TOK_NORM_LOWERCASE:
        /* Per code point (simple case mapping); JavaScript's toLowerCase also has
         * the few one-to-many special cases (e.g. U+0130), which this does not. */
        for (size_t i = 0; i < len;) {
            int32_t cp;
            i += (size_t)eng__utf8_next(s + i, len - i, &cp);
            char u[4];
            int k = cp < 0 ? 0 : ut_utf8_encode((uint32_t)utf8proc_tolower(cp), u);
            if (ut_buf_add(out, u, (size_t)k))
                return -ENOMEM;
        }
        return ut_buf_add(out, "", 0);
    case TOK_NORM_REPLACE: {
        size_t pl = strlen(n->a), cl = strlen(n->b), i = 0;
        while (i < len) {
            if (i + pl <= len && memcmp(s + i, n->a, pl) == 0) {
                if (ut_buf_add(out, n->b, cl))
                    return -ENOMEM;
                i += pl;
            } else if (ut_buf_add(out, s + i++, 1)) {
                return -ENOMEM;
            }
        }
        return ut_buf_add(out, "", 0);
    }
    case TOK_NORM_SEQUENCE: {
        ut_buf a = {0};
        int rc = ut_buf_add(out, s, len);
        for (size_t i = 0; rc == 0 && i < n->n_items; i++) {
            a.n = 0;
            rc = ut_buf_add(&a, out->p, out->n);
            if (rc == 0)
                rc = norm_one(&n->items[i], a.p, a.n, out);
        }
        free(a.p);
        return rc;
    }
    }
    if (len == 0)
        return ut_buf_add(out, "", 0);
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                      (utf8proc_option_t)opts);
    if (k < 0)
        return k == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -EINVAL;
    int rc = ut_buf_add(out, dst, (size_t)k);
    free(dst);
    return rc;
}

int eng__norm_apply(const struct tok_norm *n, const char *s, size_t len, ut_buf *out)
{
    return norm_one(n, s, len, out);
}

/* ==== pre-tokenizers ====================================================== */

/* GPT-2's own split, used by ByteLevel with use_regex (the default). */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Compile a tokenizer.json regex. PCRE2 parses these patterns as written; the one
 * rewrite is \s and \S to White_Space: with UCP, PCRE2's \s is "Z or HT/LF/VT/FF/CR",
 * which leaves out U+0085, while Oniguruma (the Rust crate) and tokenizers.js (which
 * rewrites it the same way) use the White_Space property. */
static pcre2_code *compile_regex(const char *pat, bool literal, char *err, size_t errlen)
{
    ut_buf b = {0};
    int rc = 0;
    if (literal) {
        rc = ut_buf_add(&b, pat, strlen(pat));
    } else {
        for (const char *p = pat; *p && rc == 0; p++) {
            if (p[0] == '\\' && (p[1] == 's' || p[1] == 'S')) {
                rc = ut_buf_add(&b, p[1] == 's' ? "\\p{White_Space}" : "\\P{White_Space}", 15);
                p++;
            } else if (p[0] == '\\' && p[1]) {
                rc = ut_buf_add(&b, p, 2);
                p++;
            } else {
                rc = ut_buf_add(&b, p, 1);
            }
        }
    }
    if (rc || !b.p) {
        free(b.p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.p, b.n, opts, &ec, &eo, NULL);
    free(b.p);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "regex /%.60s/ at offset %zu: %s", pat, (size_t)eo, (char *)msg);
        return NULL;
    }
    /* Without JIT (e.g. no executable memory) pcre2_match interprets: same result. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

static int parse_behavior(const char *s, enum tok_split_behavior *b)
{
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *b = (enum tok_split_behavior)i;
            return 0;
        }
    return -1;
}

int eng__pre_parse(const json_t *j, struct tok_pre *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *type = json_is_object(j) ? jstr(j, "type") : NULL;
    if (!type) {
        snprintf(err, errlen, "pre_tokenizer: expected an object with a \"type\"");
        return -EINVAL;
    }
    if (strcmp(type, "Sequence") == 0) {
        const json_t *arr = json_object_get(j, "pretokenizers");
        if (!json_is_array(arr)) {
            snprintf(err, errlen, "pre_tokenizer Sequence: \"pretokenizers\" must be an array");
            return -EINVAL;
        }
        out->type = TOK_PRE_SEQUENCE;
        out->items = calloc(json_array_size(arr) + 1, sizeof *out->items);
        if (!out->items)
            return -ENOMEM;
        for (size_t i = 0; i < json_array_size(arr); i++) {
            int rc = eng__pre_parse(json_array_get(arr, i), &out->items[i], err, errlen);
            if (rc) {
                eng__pre_free(out);
                return rc;
            }
            out->n_items++;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        out->type = TOK_PRE_BYTELEVEL;
        out->add_prefix_space = json_is_true(json_object_get(j, "add_prefix_space"));
        const json_t *ur = json_object_get(j, "use_regex");
        out->behavior = TOK_SPLIT_ISOLATED;
        if (!ur || json_is_true(ur)) {
            out->re = compile_regex(gpt2_regex, false, err, errlen);
            if (!out->re)
                return -EINVAL;
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const json_t *pat = json_object_get(j, "pattern");
        const char *rx = jstr(pat, "Regex"), *lit = jstr(pat, "String");
        if (!rx && !lit) {
            snprintf(err, errlen, "pre_tokenizer Split: \"pattern\" needs a \"Regex\" or \"String\"");
            return -EINVAL;
        }
        out->type = TOK_PRE_SPLIT;
        if (parse_behavior(jstr(j, "behavior"), &out->behavior)) {
            snprintf(err, errlen, "pre_tokenizer Split: unknown behavior \"%s\"",
                     jstr(j, "behavior") ? jstr(j, "behavior") : "(missing)");
            return -EINVAL;
        }
        out->invert = json_is_true(json_object_get(j, "invert"));
        if (lit && !*lit) {
            snprintf(err, errlen, "pre_tokenizer Split: empty \"String\" pattern");
            return -EINVAL;
        }
        out->re = compile_regex(rx ? rx : lit, !rx, err, errlen);
        return out->re ? 0 : -EINVAL;
    }
    snprintf(err, errlen, "pre_tokenizer type \"%s\" is not supported", type);
    return -EINVAL;
}

void eng__pre_free(struct tok_pre *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_items; i++)
        eng__pre_free(&p->items[i]);
    free(p->items);
    pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

bool eng__pre_ends_bytelevel(const struct tok_pre *p)
{
    if (p->type == TOK_PRE_BYTELEVEL)
        return true;
    if (p->type != TOK_PRE_SEQUENCE || p->n_items == 0)
        return false;
    for (size_t i = 0; i + 1 < p->n_items; i++)
        if (p->items[i].type != TOK_PRE_SPLIT)
            return false;
    return eng__pre_ends_bytelevel(&p->items[p->n_items - 1]);
}

/* One segment of the subject: a regex match or the text between two. */
struct seg {
    size_t a, b;
    bool match;
};

struct segs {
    struct seg *v;
    size_t n, cap;
};

static int seg_push(struct segs *s, size_t a, size_t b, bool match)
{
    if (ut_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v, 32))
        return -ENOMEM;
    s->v[s->n++] = (struct seg){a, b, match};
    return 0;
}

static int run_match(const pcre2_code *re, const char *s, size_t n, size_t start,
                     pcre2_match_data *md)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
    /* The JIT's default 32 KiB stack can run out on long whitespace runs with the
     * lookahead; the interpreter keeps its backtracking on the heap. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    return rc;
}

/* Cut s into segments: matches and the gaps between them. Empty matches are
 * dropped and the search moves one character on, as JavaScript's matchAll does. */
static int find_segs(const pcre2_code *re, const char *s, size_t n, pcre2_match_data *md,
                     struct segs *out)
{
    out->n = 0;
    size_t prev = 0, at = 0;
    while (at <= n) {
        int rc = run_match(re, s, n, at, md);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EIO;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a == b) {
            if (a >= n)
                break;
            int32_t cp;
            at = a + (size_t)eng__utf8_next(s + a, n - a, &cp);
            continue;
        }
        if (a > prev && seg_push(out, prev, a, false))
            return -ENOMEM;
        if (seg_push(out, a, b, true))
            return -ENOMEM;
        prev = at = b;
    }
    if (prev < n && seg_push(out, prev, n, false))
        return -ENOMEM;
    return 0;
}

/* The Rust crate's SplitDelimiterBehavior, applied to the segments in place. */
static void apply_behavior(struct segs *sg, enum tok_split_behavior beh, bool invert)
{
    if (invert)
        for (size_t i = 0; i < sg->n; i++)
            sg->v[i].match = !sg->v[i].match;
    size_t w = 0;
    bool prev_match = false;
    switch (beh) {
    case TOK_SPLIT_ISOLATED:
        return;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < sg->n; i++)
            if (!sg->v[i].match)
                sg->v[w++] = sg->v[i];
        break;
    case TOK_SPLIT_MERGED_PREV:
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sg->n; i++) {
            bool m = sg->v[i].match;
            bool join = beh == TOK_SPLIT_CONTIGUOUS ? (m == prev_match) : (m && !prev_match);
            if (join && w > 0)
                sg->v[w - 1].b = sg->v[i].b;
            else
                sg->v[w++] = sg->v[i];
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT:
        /* Walk backwards: a match joins the segment that follows it. */
        for (size_t i = sg->n; i-- > 0;) {
            bool m = sg->v[i].match;
            if (m && !prev_match && w > 0)
                sg->v[sg->n - w].a = sg->v[i].a;
            else
                sg->v[sg->n - ++w] = sg->v[i];
            prev_match = m;
        }
        memmove(sg->v, sg->v + (sg->n - w), w * sizeof *sg->v);
        break;
    }
    sg->n = w;
}

struct pre_ctx {
    struct segs segs;
    pcre2_match_data *md;
};

/* Split s with p's regex (none: s whole) and add the pieces to out. */
static int split_into(const struct tok_pre *p, const char *s, size_t n, struct tok_pieces *out,
                      struct pre_ctx *cx)
{
    if (!p->re)
        return n ? eng__pieces_add(out, s, n) : 0;
    int rc = find_segs(p->re, s, n, cx->md, &cx->segs);
    if (rc)
        return rc;
    apply_behavior(&cx->segs, p->behavior, p->invert);
    for (size_t i = 0; i < cx->segs.n; i++) {
        const struct seg *g = &cx->segs.v[i];
        if (g->b > g->a && eng__pieces_add(out, s + g->a, g->b - g->a))
            return -ENOMEM;
    }
    return 0;
}

/* Apply one non-Sequence step to every piece of `in`, writing `out`. */
static int pre_step(const struct tok_pre *p, const struct tok_pieces *in, struct tok_pieces *out,
                    struct pre_ctx *cx)
{
    eng__pieces_reset(out);
    for (size_t k = 0; k < in->n; k++) {
        const char *s = in->buf + in->v[k].off;
        size_t n = in->v[k].len;
        int rc;
        if (p->type == TOK_PRE_BYTELEVEL && p->add_prefix_space && (n == 0 || s[0] != ' ')) {
            /* Each piece gets the space, as in both reference implementations. */
            ut_buf b = {0};
            rc = ut_buf_add(&b, " ", 1);
            if (!rc)
                rc = ut_buf_add(&b, s, n);
            if (!rc)
                rc = split_into(p, b.p, b.n, out, cx);
            free(b.p);
        } else {
            rc = split_into(p, s, n, out, cx);
        }
        if (rc)
            return rc;
    }
    return 0;
}

static int pre_run(const struct tok_pre *p, struct tok_pieces **cur, struct tok_pieces **other,
                   struct pre_ctx *cx)
{
    if (p->type == TOK_PRE_SEQUENCE) {
        for (size_t i = 0; i < p->n_items; i++) {
            int rc = pre_run(&p->items[i], cur, other, cx);
            if (rc)
                return rc;
        }
        return 0;
    }
    int rc = pre_step(p, *cur, *other, cx);
    struct tok_pieces *t = *cur;
    *cur = *other;
    *other = t;
    return rc;
}

int eng__pre_apply(const struct tok_pre *p, const char *s, size_t len, struct tok_pieces *out,
                   struct tok_pieces *tmp)
{
    struct pre_ctx cx = {0};
    cx.md = pcre2_match_data_create(16, NULL);
    if (!cx.md)
        return -ENOMEM;
    eng__pieces_reset(out);
    int rc = eng__pieces_add(out, s, len);
    struct tok_pieces *cur = out, *other = tmp;
    if (!rc)
        rc = pre_run(p, &cur, &other, &cx);
    if (!rc && cur != out) {
        /* Hand the result back in `out` whichever buffer it ended in. */
        struct tok_pieces t = *out;
        *out = *cur;
        *cur = t;
    }
    pcre2_match_data_free(cx.md);
    free(cx.segs.v);
    return rc;
}
