/* Output parser: MiniCPM5's generated text -> reasoning, content, tool calls. What
 * it decides (whitespace, stray tags, typing, malformed calls) is listed in
 * outparse.h; this file says how.
 *
 * Two layers. The first turns the raw byte stream into valid UTF-8 (an invalid or
 * truncated sequence becomes U+FFFD, one per maximal invalid subpart, as WHATWG
 * decoders do; so does a NUL byte, because deltas are C strings), so every later
 * slice of the buffer starts and ends on a character boundary. The second is a
 * scanner over that text that only decides from text it has already seen: it
 * waits whenever the undecided tail could still turn out either way. Every
 * decision therefore depends on the text alone, never on where the pieces were
 * cut, which is what makes the concatenated deltas identical for every split of the
 * same output (tests/test-outparse.c checks it; so does tests/fuzz/fuzz-outparse.c).
 *
 * The scanner holds back only: a run of whitespace (dropped before "</think>" and
 * around tool calls, kept elsewhere), a '<' whose following bytes may still spell a
 * tag it acts on, and a tool call until its "</function>" or until it proves
 * malformed. A malformed call emits just its '<' as content and the scan resumes
 * after it, so the same rule handles garbage, truncation and a good call that
 * follows a broken one. Why these choices (llama.cpp's minicpm5 parser, the
 * template's own output) is in the header.
 */
#include "engine/outparse.h"
#include "engine/text/outparse-impl.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME 256  /* longest function or parameter name accepted */
#define MAX_WS 64     /* longest whitespace run accepted inside call markup */

/* ---- small helpers ------------------------------------------------------------ */


/* First occurrence of needle in [s, s+n), or NULL. */
static const char *find(const char *s, size_t n, const char *needle, size_t nl)
{
    while (n >= nl) {
        const char *c = memchr(s, needle[0], n - nl + 1);
        if (!c)
            return NULL;
        if (memcmp(c, needle, nl) == 0)
            return c;
        n -= (size_t)(c - s) + 1;
        s = c + 1;
    }
    return NULL;
}


/* ---- the parser's state --------------------------------------------------------- */

enum { R_OK = 0, R_NEED, R_BAD };                      /* results of a match step */
enum { P_HEAD, P_PARAMS, P_VALUE };                    /* where a call's parse is */
enum { V_UNKNOWN, V_PLAIN, V_CDATA };                  /* how the current value is written */

/* One tool call being parsed. Offsets are relative to the "<function" that opened
 * it, so they survive the buffer being compacted. */
struct call {
    int phase;
    size_t at;        /* P_PARAMS: where the next param or "</function>" starts */
    size_t vstart;    /* P_VALUE: the first byte after <param name="…"> */
    size_t cstart;    /* V_CDATA: the first byte after "<![CDATA[" */
    size_t scan;      /* P_VALUE: no terminator starts before here */
    int mode;
    char *name;
    char *key;                  /* current parameter */
    const json_t *props;        /* the function's parameters.properties, or NULL */
    char **keys, **vals;        /* arguments so far: key, JSON text of its value */
    size_t nargs, capargs;
};

struct eng_outparse {
    const json_t *tools;        /* borrowed */
    bool tools_on;
    bool failed;                /* an allocation failed; only _free is safe */
    bool finished;

    struct ut_utf8_stream u8;   /* a character the last feed cut */

    ut_buf buf;            /* valid UTF-8, not yet consumed from `pos` on */
    size_t pos;
    bool think;                 /* inside <think>…</think> */
    bool at_start;              /* only whitespace so far: "<think>" may still open */
    bool skip_ws;               /* drop whitespace at `pos` */
    size_t ws_to;               /* if > pos: buf[pos, ws_to) is whitespace */

    bool in_call;
    size_t call_start;          /* offset of "<function" in buf */
    struct call call;

    int n_calls;
};

static void call_reset(struct call *c)
{
    free(c->name);
    free(c->key);
    for (size_t i = 0; i < c->nargs; i++) {
        free(c->keys[i]);
        free(c->vals[i]);
    }
    free(c->keys);
    free(c->vals);
    memset(c, 0, sizeof *c);
}

eng_outparse *eng_outparse_new(const json_t *tools, bool in_think)
{
    eng_outparse *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->tools = tools;
    p->tools_on = json_is_array(tools) && json_array_size(tools) > 0;
    p->think = in_think;
    p->skip_ws = in_think;
    p->at_start = !in_think;
    return p;
}

void eng_outparse_free(eng_outparse *p)
{
    if (!p)
        return;
    call_reset(&p->call);
    free(p->buf.p);
    free(p);
}

bool eng_outparse_saw_tool_call(const eng_outparse *p) { return p && p->n_calls > 0; }

void eng_delta_list_clear(struct eng_delta_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i].text);
        free(l->items[i].name);
        free(l->items[i].arguments);
    }
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

/* ---- deltas ----------------------------------------------------------------------- */

static struct eng_delta *delta_push(struct eng_delta_list *out)
{
    if (ut_grow((void **)&out->items, &out->cap, out->n + 1, sizeof *out->items, 8))
        return NULL;
    struct eng_delta *d = &out->items[out->n++];
    memset(d, 0, sizeof *d);
    return d;
}

/* Appends text of `kind`, merged into the last delta when that one was made by the
 * same feed call (index >= first) and is of the same kind: one delta per kind and
 * call is what the API wants to send. */
static int emit_text(struct eng_delta_list *out, size_t first, enum eng_delta_kind kind,
                     const char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (out->n > first && out->items[out->n - 1].kind == kind) {
        struct eng_delta *d = &out->items[out->n - 1];
        size_t old = strlen(d->text);
        char *t = realloc(d->text, old + n + 1);
        if (!t)
            return -ENOMEM;
        memcpy(t + old, s, n);
        t[old + n] = '\0';
        d->text = t;
        return 0;
    }
    char *t = eng__outparse_dup(s, n);
    struct eng_delta *d = t ? delta_push(out) : NULL;
    if (!d) {
        free(t);
        return -ENOMEM;
    }
    d->kind = kind;
    d->text = t;
    return 0;
}

/* ---- UTF-8 repair ------------------------------------------------------------------ */

static const char REPLACEMENT[] = UT_UTF8_REPLACEMENT;

/* Appends text[0 .. len) of the output to the buffer as valid UTF-8 (util/utf8.h:
 * a character cut between two feeds is joined, each maximal invalid subpart is one
 * U+FFFD). A NUL byte is one U+FFFD too: deltas are C strings. */
static int utf8_push(eng_outparse *p, const char *text, size_t len)
{
    const char *nul;
    while ((nul = memchr(text, '\0', len)) != NULL) {
        size_t k = (size_t)(nul - text);
        if (ut_utf8_stream_feed(&p->u8, &p->buf, text, k) != 0 ||
            ut_utf8_stream_finish(&p->u8, &p->buf) != 0 ||
            ut_buf_add(&p->buf, REPLACEMENT, 3) != 0)
            return -ENOMEM;
        text += k + 1;
        len -= k + 1;
    }
    return ut_utf8_stream_feed(&p->u8, &p->buf, text, len);
}

/* ---- arguments (typed in outparse-args.c) ------------------------------------- */

/* Records one argument; a repeated name keeps its first place and its last value. */
static int call_add_arg(struct call *c, const char *v, size_t n, bool cdata)
{
    char *val = eng__outparse_param_json(c->props, c->key, v, n, cdata);
    if (!val)
        return -ENOMEM;
    for (size_t i = 0; i < c->nargs; i++) {
        if (strcmp(c->keys[i], c->key) == 0) {
            free(c->vals[i]);
            c->vals[i] = val;
            return 0;
        }
    }
    if (c->nargs == c->capargs) {
        size_t cap = c->capargs ? c->capargs * 2 : 4;
        char **k = realloc(c->keys, cap * sizeof *k);
        if (k)
            c->keys = k;
        char **vv = k ? realloc(c->vals, cap * sizeof *vv) : NULL;
        if (!vv) {
            free(val);
            return -ENOMEM;
        }
        c->vals = vv;
        c->capargs = cap;
    }
    c->keys[c->nargs] = c->key;
    c->vals[c->nargs++] = val;
    c->key = NULL;
    return 0;
}

/* The arguments as one compact JSON object, keys in the order of the output. */
static char *call_arguments(const struct call *c)
{
    ut_buf b = {0};
    if (ut_buf_add(&b, "{", 1) != 0)
        return NULL;
    for (size_t i = 0; i < c->nargs; i++) {
        char *k = eng__outparse_json_quote(c->keys[i], strlen(c->keys[i]));
        int rc = k ? 0 : -ENOMEM;
        if (rc == 0 && i > 0)
            rc = ut_buf_add(&b, ",", 1);
        if (rc == 0)
            rc = ut_buf_add(&b, k, strlen(k));
        if (rc == 0)
            rc = ut_buf_add(&b, ":", 1);
        if (rc == 0)
            rc = ut_buf_add(&b, c->vals[i], strlen(c->vals[i]));
        free(k);
        if (rc != 0) {
            free(b.p);
            return NULL;
        }
    }
    if (ut_buf_add(&b, "}", 1) != 0) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Where the value at s[vs, n) ends when the output stopped inside it: before a
 * tail that may be the start of its terminator ("</param>"; in CDATA "]]>", then
 * whitespace and "</param>"), which is markup, not value. */
static size_t cut_value_end(const char *s, size_t vs, size_t n, bool cdata)
{
    const char *term = cdata ? "]]>" : "</param>";
    size_t tl = strlen(term);
    if (cdata) {   /* "]]>" + whitespace + a start of "</param>" up to the end */
        for (size_t i = n; i >= vs + 3; i--) {
            if (memcmp(s + i - 3, "]]>", 3) != 0)
                continue;
            size_t at = i;
            while (at < n && eng__outparse_is_ws(s[at]))
                at++;
            if (n - at < 8 && memcmp(s + at, "</param>", n - at) == 0)
                return i - 3;
            break;
        }
    }
    for (size_t k = tl - 1; k > 0; k--)
        if (n - vs >= k && memcmp(s + n - k, term, k) == 0)
            return n - k;
    return n;
}

/* The arguments of a call the output cut (its name complete): the JSON text of
 * what was written, left open where the output stopped, as an API that streams
 * arguments leaves them: {"a":1,"b":"tex */
static char *call_cut_arguments(const struct call *c, const char *s, size_t n)
{
    ut_buf b = {0};
    char *whole = call_arguments(c), *k = NULL, *v = NULL;
    int rc = whole ? ut_buf_add(&b, whole, strlen(whole) - 1) : -ENOMEM;  /* not the '}' */
    if (rc == 0 && c->phase == P_VALUE && c->key) {
        size_t vs = c->mode == V_CDATA ? c->cstart : c->vstart;
        size_t ve = c->mode == V_UNKNOWN ? vs : cut_value_end(s, vs, n, c->mode == V_CDATA);
        k = eng__outparse_json_quote(c->key, strlen(c->key));
        v = k ? eng__outparse_json_quote(s + vs, ve - vs) : NULL;
        rc = v ? 0 : -ENOMEM;
        if (rc == 0 && c->nargs)
            rc = ut_buf_add(&b, ",", 1);
        if (rc == 0)
            rc = ut_buf_add(&b, k, strlen(k));
        if (rc == 0)
            rc = ut_buf_add(&b, ":", 1);
        if (rc == 0)
            rc = ut_buf_add(&b, v, strlen(v) - 1);   /* the string left open */
    }
    free(whole);
    free(k);
    free(v);
    if (rc != 0) {
        free(b.p);
        return NULL;
    }
    return b.p ? b.p : eng__outparse_dup("{", 1);
}

/* ---- tool-call markup ------------------------------------------------------------ */

/* Each step matches at *at in s[0, n): R_OK (and advances), R_NEED (the text ends
 * where it could still match), R_BAD. */
static int m_lit(const char *s, size_t n, size_t *at, const char *lit)
{
    size_t l = strlen(lit), avail = n - *at, m = avail < l ? avail : l;
    if (memcmp(s + *at, lit, m) != 0)
        return R_BAD;
    if (avail < l)
        return R_NEED;
    *at += l;
    return R_OK;
}

/* min..MAX_WS whitespace; R_NEED at the end of the text, as the next byte decides. */
static int m_ws(const char *s, size_t n, size_t *at, size_t min)
{
    size_t count = 0;
    while (*at < n && eng__outparse_is_ws(s[*at])) {
        if (++count > MAX_WS)
            return R_BAD;
        (*at)++;
    }
    if (*at == n)
        return R_NEED;
    return count >= min ? R_OK : R_BAD;
}

/* ' name="VALUE">' with optional whitespace around '=' and before '>'. VALUE is
 * 1..MAX_NAME bytes without '"', '<', '>' or control characters. */
static int m_name_attr(const char *s, size_t n, size_t *at, size_t *vs, size_t *vn)
{
    int r;
    if ((r = m_ws(s, n, at, 1)) || (r = m_lit(s, n, at, "name")) || (r = m_ws(s, n, at, 0)) ||
        (r = m_lit(s, n, at, "=")) || (r = m_ws(s, n, at, 0)) || (r = m_lit(s, n, at, "\"")))
        return r;
    *vs = *at;
    for (; *at < n && s[*at] != '"'; (*at)++) {
        unsigned char c = (unsigned char)s[*at];
        if (c < 0x20 || c == '<' || c == '>' || *at - *vs >= MAX_NAME)
            return R_BAD;
    }
    if (*at == n)
        return R_NEED;
    *vn = *at - *vs;
    (*at)++;
    if (*vn == 0)
        return R_BAD;
    if ((r = m_ws(s, n, at, 0)))
        return r;
    return m_lit(s, n, at, ">");
}

/* Advances the call that starts at s (with "<function") as far as the text allows.
 * R_OK: complete, *end is the offset after "</function>". R_NEED: may still become
 * complete. R_BAD: malformed. -ENOMEM on allocation failure. Resumable: the value
 * scans remember how far they got, so a long value costs linear time however
 * finely it is fed; the markup between values is bounded and re-read. */
static int call_advance(eng_outparse *p, const char *s, size_t n, size_t *end)
{
    struct call *c = &p->call;
    size_t at, vs, vn;
    int r;
    for (;;) {
        switch (c->phase) {
        case P_HEAD:
            at = 0;
            if ((r = m_lit(s, n, &at, "<function")) || (r = m_name_attr(s, n, &at, &vs, &vn)))
                return r;
            if (!(c->name = eng__outparse_dup(s + vs, vn)))
                return -ENOMEM;
            c->props = eng__outparse_find_props(p->tools, c->name);
            c->at = at;
            c->phase = P_PARAMS;
            break;
        case P_PARAMS:
            at = c->at;
            if ((r = m_ws(s, n, &at, 0)))
                return r;
            size_t ce = at;
            if ((r = m_lit(s, n, &ce, "</function>")) != R_BAD) {
                *end = ce;
                return r;
            }
            if ((r = m_lit(s, n, &at, "<param")) || (r = m_name_attr(s, n, &at, &vs, &vn)))
                return r;
            free(c->key);
            if (!(c->key = eng__outparse_dup(s + vs, vn)))
                return -ENOMEM;
            c->vstart = c->scan = at;
            c->mode = V_UNKNOWN;
            c->phase = P_VALUE;
            break;
        case P_VALUE:
            if (c->mode == V_UNKNOWN) {
                /* "<![CDATA[" may follow a little whitespace; else the value is
                 * plain text, whitespace and all. */
                at = c->vstart;
                r = m_ws(s, n, &at, 0);
                if (r == R_NEED)
                    return R_NEED;
                if (r == R_OK && (r = m_lit(s, n, &at, "<![CDATA[")) == R_NEED)
                    return R_NEED;
                c->mode = r == R_OK ? V_CDATA : V_PLAIN;
                c->cstart = c->scan = r == R_OK ? at : c->vstart;
            }
            if (c->mode == V_PLAIN) {
                const char *e = find(s + c->scan, n - c->scan, "</param>", 8);
                if (!e) {
                    c->scan = n > c->scan + 7 ? n - 7 : c->scan;
                    return R_NEED;
                }
                size_t i = (size_t)(e - s);
                if (call_add_arg(c, s + c->vstart, i - c->vstart, false) != 0)
                    return -ENOMEM;
                c->at = i + 8;
                c->phase = P_PARAMS;
                break;
            }
            /* CDATA: the template does not escape "]]>" inside a value, so the
             * value ends at the first "]]>" that "</param>" follows (after optional
             * whitespace), not at the first "]]>". */
            for (;;) {
                const char *e = find(s + c->scan, n - c->scan, "]]>", 3);
                if (!e) {
                    c->scan = n > c->scan + 2 ? n - 2 : c->scan;
                    return R_NEED;
                }
                size_t i = (size_t)(e - s);
                at = i + 3;
                if ((r = m_ws(s, n, &at, 0)) == R_OK)
                    r = m_lit(s, n, &at, "</param>");
                if (r == R_NEED) {
                    c->scan = i;
                    return R_NEED;
                }
                if (r == R_OK) {
                    if (call_add_arg(c, s + c->cstart, i - c->cstart, true) != 0)
                        return -ENOMEM;
                    c->at = at;
                    c->phase = P_PARAMS;
                    break;
                }
                c->scan = i + 1;
            }
            break;
        }
    }
}

/* ---- the scanner -------------------------------------------------------------------- */

enum { TAG_NONE, TAG_WAIT, TAG_THINK, TAG_UNTHINK, TAG_FUNCTION };

/* Which tag that we act on starts at s (s[0] == '<'). */
static int match_tag(const eng_outparse *p, const char *s, size_t n, bool eof)
{
    static const struct { const char *text; int tag; } tags[] = {
        {"<think>", TAG_THINK}, {"</think>", TAG_UNTHINK}, {"<function", TAG_FUNCTION},
    };
    for (size_t i = 0; i < 3; i++) {
        int t = tags[i].tag;
        if ((t == TAG_THINK && !(p->at_start && !p->think)) || (t == TAG_UNTHINK && !p->think) ||
            (t == TAG_FUNCTION && !(p->tools_on && !p->think)))
            continue;
        size_t l = strlen(tags[i].text), m = n < l ? n : l;
        if (memcmp(s, tags[i].text, m) != 0)
            continue;
        if (n >= l)
            return t;
        if (!eof)
            return TAG_WAIT;
    }
    return TAG_NONE;
}

/* The output ended inside the call at call_start: with its name written, it is a
 * call cut short (its arguments as far as they got); before that, nothing. Never
 * content: the markup is not text. */
static int cut_call(eng_outparse *p, struct eng_delta_list *out)
{
    if (p->call.phase != P_HEAD) {
        char *args = call_cut_arguments(&p->call, p->buf.p + p->call_start,
                                        p->buf.n - p->call_start);
        struct eng_delta *d = args ? delta_push(out) : NULL;
        if (!d) {
            free(args);
            return -ENOMEM;
        }
        d->kind = ENG_DELTA_TOOL_CALL;
        d->index = p->n_calls;
        d->name = p->call.name;
        d->arguments = args;
        d->cut = true;
        p->call.name = NULL;
    }
    p->pos = p->buf.n;
    call_reset(&p->call);
    p->in_call = false;
    return 0;
}

/* Whether s[0, n) (the end of the output, s[0] == '<') is a tag the parser acts on,
 * cut before its end: "<function" with tools, "<think>" at the start, "</think>"
 * inside reasoning. */
static bool cut_tag(const eng_outparse *p, const char *s, size_t n)
{
    return (p->tools_on && !p->think && n < 9 && memcmp(s, "<function", n) == 0) ||
           (p->at_start && !p->think && n < 7 && memcmp(s, "<think>", n) == 0) ||
           (p->think && n < 8 && memcmp(s, "</think>", n) == 0);
}

/* The call at call_start is decided: emit it, or its first byte as content. */
static int end_call(eng_outparse *p, struct eng_delta_list *out, size_t first, int r, size_t end)
{
    const char *b = p->buf.p;
    if (r == R_OK) {
        char *args = call_arguments(&p->call);
        struct eng_delta *d = args ? delta_push(out) : NULL;
        if (!d) {
            free(args);
            return -ENOMEM;
        }
        d->kind = ENG_DELTA_TOOL_CALL;
        d->index = p->n_calls++;
        d->name = p->call.name;
        d->arguments = args;
        p->call.name = NULL;
        p->pos = p->call_start + end;
        p->skip_ws = true;  /* whitespace between and after calls is dropped */
    } else {
        /* Held whitespace from pos, then the '<'; the rest is scanned again. */
        if (emit_text(out, first, ENG_DELTA_CONTENT, b + p->pos, p->call_start + 1 - p->pos) != 0)
            return -ENOMEM;
        p->pos = p->call_start + 1;
    }
    call_reset(&p->call);
    p->in_call = false;
    return 0;
}

static int run(eng_outparse *p, struct eng_delta_list *out, size_t first, bool eof)
{
    for (;;) {
        const char *b = p->buf.p;
        size_t n = p->buf.n, i = p->pos;
        if (!b)  /* nothing fed yet */
            return 0;
        if (p->in_call) {
            size_t end = 0;
            int r = call_advance(p, b + p->call_start, n - p->call_start, &end);
            if (r < 0)
                return r;
            if (r == R_NEED && !eof)
                return 0;
            if (r == R_NEED)
                return cut_call(p, out);
            if ((r = end_call(p, out, first, r == R_NEED ? R_BAD : r, end)) != 0)
                return r;
            continue;
        }
        enum eng_delta_kind kind = p->think ? ENG_DELTA_REASONING : ENG_DELTA_CONTENT;
        if (p->skip_ws) {
            while (i < n && eng__outparse_is_ws(b[i]))
                i++;
            p->pos = i;
            if (i == n)
                return 0;
            p->skip_ws = false;
        }
        /* Emit up to the next '<' but hold the whitespace just before it (or before
         * the end): whether it is dropped depends on what comes next. */
        size_t from = p->ws_to > i ? p->ws_to : i;  /* [i, from) is known whitespace */
        const char *lt = memchr(b + from, '<', n - from);
        size_t j = lt ? (size_t)(lt - b) : n, k = j;
        while (k > from && eng__outparse_is_ws(b[k - 1]))
            k--;
        if (k == from)
            k = i;
        if (k > i) {
            if (emit_text(out, first, kind, b + i, k - i) != 0)
                return -ENOMEM;
            p->at_start = false;
            p->pos = k;
        }
        if (j == n) {
            p->ws_to = n;  /* a run of whitespace fed piecemeal is read once */
            if (eof) {  /* trailing whitespace is content, but not reasoning */
                if (!p->think && emit_text(out, first, kind, b + k, n - k) != 0)
                    return -ENOMEM;
                p->pos = n;
            }
            return 0;
        }
        if (eof && cut_tag(p, b + j, n - j)) {
            p->pos = n;   /* a tag the end cut: markup, not text */
            return 0;
        }
        switch (match_tag(p, b + j, n - j, eof)) {
        case TAG_WAIT:
            p->ws_to = j;
            return 0;
        case TAG_THINK:
            p->think = true;
            p->skip_ws = true;
            p->at_start = false;
            p->pos = j + 7;
            break;
        case TAG_UNTHINK:
            p->think = false;
            p->skip_ws = true;
            p->pos = j + 8;
            break;
        case TAG_FUNCTION:
            p->in_call = true;
            p->call_start = j;  /* pos stays at the held whitespace */
            p->at_start = false;
            break;
        default:
            if (emit_text(out, first, kind, b + k, j + 1 - k) != 0)
                return -ENOMEM;
            p->at_start = false;
            p->pos = j + 1;
            break;
        }
    }
}

/* Drops consumed text once it is at least half the buffer (amortised O(1)). */
static void compact(eng_outparse *p)
{
    if (p->pos == 0 || p->pos < p->buf.n - p->pos)
        return;
    memmove(p->buf.p, p->buf.p + p->pos, p->buf.n - p->pos);
    p->buf.n -= p->pos;
    if (p->in_call)
        p->call_start -= p->pos;
    p->ws_to = p->ws_to > p->pos ? p->ws_to - p->pos : 0;
    p->pos = 0;
    if (p->buf.p)
        p->buf.p[p->buf.n] = '\0';
}

int eng_outparse_feed(eng_outparse *p, const char *text, size_t len, struct eng_delta_list *out)
{
    if (p->failed)
        return -ENOMEM;
    if (p->finished)
        return 0;
    compact(p);
    if (utf8_push(p, text, len) != 0)
        goto oom;
    if (run(p, out, out->n, false) != 0)
        goto oom;
    return 0;
oom:
    p->failed = true;
    return -ENOMEM;
}

int eng_outparse_finish(eng_outparse *p, struct eng_delta_list *out)
{
    if (p->failed)
        return -ENOMEM;
    if (p->finished)
        return 0;
    p->finished = true;
    if (ut_utf8_stream_finish(&p->u8, &p->buf) != 0)  /* ended inside a character */
        goto oom;
    if (p->buf.n == 0)
        return 0;
    if (run(p, out, out->n, true) != 0)
        goto oom;
    return 0;
oom:
    p->failed = true;
    return -ENOMEM;
}
