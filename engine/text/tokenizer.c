/* tokenizer.json loading, added tokens, the encode pipeline and decode.
 *
 * Encode follows the reference (Hugging Face tokenizers.js, the tokenizer of
 * transformers.js, itself a port of the Rust crate) step by step:
 *   1. repair invalid UTF-8 to U+FFFD, as TextDecoder would have done to make the
 *      JavaScript string the reference is given;
 *   2. cut out added tokens that are matched on the raw text (normalized = false, or
 *      all of them when there is no normalizer), leftmost-longest; lstrip/rstrip eat
 *      the whitespace next to them;
 *   3. normalize each text section, cut out the added tokens that are matched on
 *      normalized text, strip again;
 *   4. pre-tokenize (Split regexes, ByteLevel) and run BPE on every piece.
 * Added tokens: with `special` off, tokens marked special are not matched (they are
 * text like any other); added tokens that are not special, such as MiniCPM5's <think>,
 * are always matched, as the reference always does. `single_word` is honoured the Rust
 * way (no word character may touch the match); tokenizers.js ignores it. */
#include "engine/text/tok-impl.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ==== added-token matcher ================================================= */

static int cmp_entry(const void *a, const void *b)
{
    const struct tok_match_entry *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->str, y->str, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

void eng__matcher_free(struct tok_matcher *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i].owned);
    free(m->v);
    memset(m, 0, sizeof *m);
}

/* A matcher over the added tokens whose `normalized` flag equals `normalized`; those
 * are matched in their normalized form (norm applied to the content). */
int eng__matcher_build(struct tok_matcher *m, struct tok_added *tokens, size_t n, bool normalized,
                       const struct tok_norm *norm)
{
    memset(m, 0, sizeof *m);
    m->v = calloc(n + 1, sizeof *m->v);
    if (!m->v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        struct tok_added *t = &tokens[i];
        if (t->len == 0 || t->normalized != normalized)
            continue;
        struct tok_match_entry *e = &m->v[m->n++];
        *e = (struct tok_match_entry){t->content, t->len, t, NULL, i};
        if (normalized) {
            ut_buf b = {0};
            if (eng__norm_apply(norm, t->content, t->len, &b) || !b.p) {
                free(b.p);
                eng__matcher_free(m);
                return -ENOMEM;
            }
            if (b.n == 0) {
                /* Normalizes to nothing: it can never be found. */
                free(b.p);
                m->n--;
                continue;
            }
            e->owned = b.p;
            e->str = b.p;
            e->len = b.n;
        }
    }
    qsort(m->v, m->n, sizeof *m->v, cmp_entry);
    for (size_t i = 0; i < m->n; i++) {
        unsigned char c = (unsigned char)m->v[i].str[0];
        m->first[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    return 0;
}

static bool is_word_char(int32_t cp)
{
    if (cp == '_')
        return true;
    utf8proc_category_t c = utf8proc_category(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

static bool single_word_ok(const char *t, size_t n, size_t a, size_t b)
{
    if (a > 0) {
        size_t p = ut_utf8_char_start(t, a - 1);
        int32_t cp;
        eng__utf8_next(t + p, a - p, &cp);
        if (is_word_char(cp))
            return false;
    }
    if (b < n) {
        int32_t cp;
        eng__utf8_next(t + b, n - b, &cp);
        if (is_word_char(cp))
            return false;
    }
    return true;
}

/* The longest eligible added token at t[i..], or NULL. */
static const struct tok_added *match_at(const struct tok_matcher *m, const char *t, size_t n,
                                        size_t i, bool special, size_t *mlen)
{
    size_t lo = 0, hi = m->n;
    const struct tok_added *best = NULL;
    unsigned char c0 = (unsigned char)t[i];
    if (!(m->first[c0 >> 3] & (1u << (c0 & 7))))
        return NULL;
    for (size_t d = 0; lo < hi && i + d < n; d++) {
        unsigned char c = (unsigned char)t[i + d];
        /* In [lo, hi) all strings share t[i..i+d); skip those of length d, then
         * binary-search the block whose byte d is c. */
        while (lo < hi && m->v[lo].len == d)
            lo++;
        size_t a = lo, b = hi;
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if ((unsigned char)m->v[mid].str[d] < c)
                a = mid + 1;
            else
                b = mid;
        }
        size_t e = a, f = hi;
        while (e < f) {
            size_t mid = e + (f - e) / 2;
            if ((unsigned char)m->v[mid].str[d] <= c)
                e = mid + 1;
            else
                f = mid;
        }
        lo = a;
        hi = e;
        if (lo < hi && m->v[lo].len == d + 1) {
            const struct tok_added *tk = m->v[lo].tok;
            if ((special || !tk->special) &&
                (!tk->single_word || single_word_ok(t, n, i, i + d + 1))) {
                best = tk;
                *mlen = d + 1;
            }
        }
    }
    return best;
}

struct section {
    size_t off, len;
    int32_t id;           /* an added token, or -1 for text */
    const struct tok_added *tok;
};

struct sections {
    struct section *v;
    size_t n, cap;
};

static int sec_push(struct sections *s, size_t off, size_t len, const struct tok_added *tk)
{
    if (ut_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v, 16))
        return -ENOMEM;
    s->v[s->n++] = (struct section){off, len, tk ? tk->id : -1, tk};
    return 0;
}

/* Cut t into text and added-token sections, then let lstrip/rstrip trim the text
 * next to tokens (JavaScript's trimEnd/trimStart whitespace). */
static int split_added(const struct tok_matcher *m, const char *t, size_t n, bool special,
                       struct sections *out)
{
    out->n = 0;
    size_t start = 0, i = 0;
    while (i < n) {
        size_t ml = 0;
        const struct tok_added *tk = m->n ? match_at(m, t, n, i, special, &ml) : NULL;
        if (!tk) {
            i++;
            continue;
        }
        if (i > start && sec_push(out, start, i - start, NULL))
            return -ENOMEM;
        if (sec_push(out, i, ml, tk))
            return -ENOMEM;
        i += ml;
        start = i;
    }
    if (start < n && sec_push(out, start, n - start, NULL))
        return -ENOMEM;
    for (size_t k = 0; k < out->n; k++) {
        const struct tok_added *tk = out->v[k].tok;
        if (!tk)
            continue;
        if (tk->lstrip && k > 0 && !out->v[k - 1].tok) {
            struct section *p = &out->v[k - 1];
            while (p->len > 0) {
                size_t q = p->off + ut_utf8_char_start(t + p->off, p->len - 1);
                int32_t cp;
                eng__utf8_next(t + q, p->off + p->len - q, &cp);
                if (!eng__js_space(cp))
                    break;
                p->len = q - p->off;
            }
        }
        if (tk->rstrip && k + 1 < out->n && !out->v[k + 1].tok) {
            struct section *p = &out->v[k + 1];
            while (p->len > 0) {
                int32_t cp;
                int l = eng__utf8_next(t + p->off, p->len, &cp);
                if (!eng__js_space(cp))
                    break;
                p->off += (size_t)l;
                p->len -= (size_t)l;
            }
        }
    }
    return 0;
}

/* ==== encode ============================================================== */

struct enc {
    const eng_tokenizer *t;
    bool special;
    struct tok_ids ids;
    ut_buf norm;
    struct tok_pieces pieces, tmp;
    struct sections sub;
};

static int encode_text(struct enc *e, const char *s, size_t n)
{
    const eng_tokenizer *t = e->t;
    if (!t->has_pre) {
        return eng__bpe_encode(t->bpe, s, n, &e->ids);
    }
    int rc = eng__pre_apply(&t->pre, s, n, &e->pieces, &e->tmp);
    for (size_t i = 0; rc == 0 && i < e->pieces.n; i++)
        rc = eng__bpe_encode(t->bpe, e->pieces.buf + e->pieces.v[i].off, e->pieces.v[i].len,
                             &e->ids);
    return rc;
}

static int encode_section(struct enc *e, const char *s, size_t n)
{
    const eng_tokenizer *t = e->t;
    if (!t->has_norm)
        return encode_text(e, s, n);
    int rc = eng__norm_apply(&t->norm, s, n, &e->norm);
    if (rc || e->norm.n == 0)
        return rc;
    rc = split_added(&t->norm_match, e->norm.p, e->norm.n, e->special, &e->sub);
    for (size_t k = 0; rc == 0 && k < e->sub.n; k++) {
        const struct section *sc = &e->sub.v[k];
        if (sc->tok)
            rc = eng__ids_push(&e->ids, sc->id);
        else if (sc->len)
            rc = encode_text(e, e->norm.p + sc->off, sc->len);
    }
    return rc;
}

int eng_tokenizer_encode(const eng_tokenizer *t, const char *text, size_t len, bool special,
                         int32_t **ids)
{
    struct enc e = {.t = t, .special = special};
    ut_buf fixed = {0};
    struct sections top = {0};
    int rc = 0;
    *ids = NULL;
    if (!text && len)
        return -EINVAL;
    if (ut_utf8_valid_prefix(text, len) != len) {
        if ((rc = ut_utf8_repair(&fixed, text, len, false, NULL)))
            goto out;
        text = fixed.p;
        len = fixed.n;
    }
    if ((rc = split_added(&t->raw_match, text, len, special, &top)))
        goto out;
    for (size_t k = 0; rc == 0 && k < top.n; k++) {
        const struct section *sc = &top.v[k];
        if (sc->tok)
            rc = eng__ids_push(&e.ids, sc->id);
        else if (sc->len)
            rc = encode_section(&e, text + sc->off, sc->len);
    }
out:
    free(fixed.p);
    free(top.v);
    free(e.sub.v);
    free(e.norm.p);
    eng__pieces_free(&e.pieces);
    eng__pieces_free(&e.tmp);
    if (rc) {
        free(e.ids.v);
        return rc;
    }
    if (e.ids.n > (size_t)INT32_MAX) {
        free(e.ids.v);
        return -E2BIG;
    }
    *ids = e.ids.v ? e.ids.v : malloc(sizeof(int32_t));
    if (!*ids)
        return -ENOMEM;
    return (int)e.ids.n;
}

int eng_tokenizer_encode_special(const eng_tokenizer *t, const char *text, size_t len,
                                 bool special, bool add_special, int32_t **ids)
{
    int n = eng_tokenizer_encode(t, text, len, special, ids);
    if (n < 0 || !add_special || (t->n_special_pre == 0 && t->n_special_post == 0))
        return n;
    size_t total = (size_t)n + (size_t)t->n_special_pre + (size_t)t->n_special_post;
    if (total > (size_t)INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return -E2BIG;
    }
    int32_t *v = malloc(total * sizeof *v);
    if (!v) {
        free(*ids);
        *ids = NULL;
        return -ENOMEM;
    }
    memcpy(v, t->special_pre, (size_t)t->n_special_pre * sizeof *v);
    memcpy(v + t->n_special_pre, *ids, (size_t)n * sizeof *v);
    memcpy(v + t->n_special_pre + n, t->special_post, (size_t)t->n_special_post * sizeof *v);
    free(*ids);
    *ids = v;
    return (int)total;
}

/* ==== decode and lookups ================================================== */

/* A token's bytes for a one-line message: printable ASCII as is, others as \xNN,
 * at most 40 bytes of it. */
static void show_token(const char *p, size_t n, char *out, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < n && i < 40 && k + 5 < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            out[k++] = (char)c;
        else
            k += (size_t)snprintf(out + k, len - k, "\\x%02x", c);
    }
    out[k] = '\0';
}

int eng_tokenizer_check_model(const eng_tokenizer *t, int32_t n_vocab, char *err, size_t errlen)
{
    char shown[200];
    for (int32_t id = n_vocab; id < t->n_ids; id++) {
        if (!t->tok[id])
            continue;
        show_token(t->tok[id], t->tok_len[id], shown, sizeof shown);
        snprintf(err, errlen,
                 "tokenizer.json: %s token \"%s\" has id %d, but the model has %d embedding rows "
                 "(config.json vocab_size): the tokenizer does not belong to this model",
                 t->is_special[id] ? "special" : t->is_added[id] ? "added" : "model.vocab", shown,
                 id, n_vocab);
        return -EINVAL;
    }
    int32_t n_plain = 0;
    for (int32_t id = 0; id < t->n_ids; id++)
        n_plain += t->tok[id] && !t->is_added[id];
    if (n_plain == 0) {
        snprintf(err, errlen, "tokenizer.json: model.vocab is empty (only added tokens): every "
                              "other text would be dropped");
        return -EINVAL;
    }
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        if (eng__bpe_lookup(t->bpe, &ch, 1) < 0) {
            snprintf(err, errlen,
                     "tokenizer.json: model.vocab has no token for the byte 0x%02x (byte-level BPE "
                     "needs all 256): text with it would be dropped",
                     c);
            return -EINVAL;
        }
    }
    return 0;
}

int32_t eng_tokenizer_n_vocab(const eng_tokenizer *t)
{
    return t->n_ids;
}

int32_t eng_tokenizer_token_id(const eng_tokenizer *t, const char *token)
{
    size_t n = strlen(token);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, token, n) == 0)
            return t->added[i].id;
    /* Vocab strings are given in their byte-level spelling ("Ġthe"). */
    ut_buf raw = {0};
    for (size_t i = 0; i < n;) {
        int32_t cp;
        i += (size_t)eng__utf8_next(token + i, n - i, &cp);
        int b = cp < 0 ? -1 : eng__unicode_to_byte((uint32_t)cp);
        char c = (char)b;
        if (b < 0 || ut_buf_add(&raw, &c, 1)) {
            free(raw.p);
            return -1;
        }
    }
    int32_t id = raw.p ? eng__bpe_lookup(t->bpe, raw.p, raw.n) : -1;
    free(raw.p);
    return id;
}

size_t eng_tokenizer_token_bytes(const eng_tokenizer *t, int32_t id, bool skip_special,
                                 const char **bytes)
{
    *bytes = "";
    if (id < 0 || id >= t->n_ids || !t->tok[id] || (skip_special && t->is_special[id]))
        return 0;
    *bytes = t->tok[id];
    return t->tok_len[id];
}

bool eng__tokenizer_is_added(const eng_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->is_added[id];
}

char *eng_tokenizer_decode(const eng_tokenizer *t, const int32_t *ids, size_t n, bool skip_special)
{
    return eng_tokenizer_decode_len(t, ids, n, skip_special, NULL);
}

char *eng_tokenizer_decode_len(const eng_tokenizer *t, const int32_t *ids, size_t n,
                               bool skip_special, size_t *len)
{
    /* Like the reference's ByteLevel decoder: the bytes of a run of ordinary tokens
     * are decoded together (bad sequences -> U+FFFD); an added token ends the run
     * and stands for its content. Skipped special tokens do not end a run. */
    ut_buf out = {0}, run = {0};
    int rc = ut_buf_add(&out, "", 0);
    for (size_t i = 0; rc == 0 && i <= n; i++) {
        const char *b;
        size_t k = i < n ? eng_tokenizer_token_bytes(t, ids[i], skip_special, &b) : 0;
        bool added = i < n && k > 0 && t->is_added[ids[i]];
        if (i == n || added) {
            rc = ut_utf8_repair(&out, run.p, run.n, false, NULL);
            run.n = 0;
            if (rc == 0 && added)
                rc = ut_buf_add(&out, b, k);
        } else if (k) {
            rc = ut_buf_add(&run, b, k);
        }
    }
    free(run.p);
    if (rc) {
        free(out.p);
        return NULL;
    }
    if (len)
        *len = out.n;
    return out.p;
}
