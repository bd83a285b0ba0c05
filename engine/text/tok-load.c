/* Loading a Hugging Face tokenizer.json into an eng_tokenizer.
 *
 * Supported: model BPE over the GPT-2 byte alphabet (a ByteLevel pre-tokenizer
 * at the end of the pre-tokenizer chain), merges as "a b" strings or [a, b] pairs,
 * ignore_merges, unk_token; the normalizers and pre-tokenizers of pretok.c; added
 * tokens with all their flags. The post-processor is ignored on purpose: encode
 * never adds BOS/EOS (MiniCPM5's template writes <s> itself). Anything else is
 * refused with a one-line reason rather than tokenized differently. */
#include "engine/text/tok-impl.h"
#include "util/fs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<path>: <reason>" into err; returns -EINVAL for `return fail(...)`. */
static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    if (!err || !errlen)
        return -EINVAL;
    int k = snprintf(err, errlen, "%s: ", path);
    if (k < 0 || (size_t)k >= errlen)
        return -EINVAL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* The byte-level spelling of a vocab string back to raw bytes; false when a
 * character is not in the GPT-2 byte alphabet. */
static bool bytelevel_to_raw(const char *s, size_t n, ut_buf *out)
{
    out->n = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        i += (size_t)eng__utf8_next(s + i, n - i, &cp);
        int b = cp < 0 ? -1 : eng__unicode_to_byte((uint32_t)cp);
        char c = (char)b;
        if (b < 0 || ut_buf_add(out, &c, 1))
            return false;
    }
    return ut_buf_add(out, "", 0) == 0;
}

void eng_tokenizer_free(eng_tokenizer *t)
{
    if (!t)
        return;
    eng__bpe_free(t->bpe);
    eng__matcher_free(&t->raw_match);
    eng__matcher_free(&t->norm_match);
    eng__norm_free(&t->norm);
    eng__pre_free(&t->pre);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    if (t->tok)
        for (int32_t i = 0; i < t->n_ids; i++)
            free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->is_special);
    free(t->is_added);
    free(t->bpe_tok);
    free(t);
}

static int load_added(eng_tokenizer *t, const json_t *arr, const char *path, char *err,
                      size_t errlen, int32_t *max_id)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return fail(err, errlen, path, "\"added_tokens\" must be an array");
    t->added = calloc(json_array_size(arr) + 1, sizeof *t->added);
    if (!t->added)
        return -ENOMEM;
    size_t i;
    json_t *a;
    json_array_foreach(arr, i, a) {
        const json_t *id = json_object_get(a, "id");
        const char *content = json_string_value(json_object_get(a, "content"));
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX / 2 || !content)
            return fail(err, errlen, path, "added_tokens[%zu]: needs an \"id\" and a \"content\"", i);
        struct tok_added *tk = &t->added[t->n_added];
        tk->content = strdup(content);
        if (!tk->content)
            return -ENOMEM;
        t->n_added++;
        tk->len = strlen(content);
        tk->id = (int32_t)json_integer_value(id);
        tk->special = json_is_true(json_object_get(a, "special"));
        tk->lstrip = json_is_true(json_object_get(a, "lstrip"));
        tk->rstrip = json_is_true(json_object_get(a, "rstrip"));
        tk->single_word = json_is_true(json_object_get(a, "single_word"));
        const json_t *nz = json_object_get(a, "normalized");
        tk->normalized = nz ? json_is_true(nz) : !tk->special;
        if (tk->id > *max_id)
            *max_id = tk->id;
    }
    return 0;
}

/* One merges entry as two strings. */
static bool merge_parts(const json_t *m, const char **a, size_t *al, const char **b, size_t *bl)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1])
            return false;
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        /* "a b c": like tokenizers.js's split(" ", 2), the rest is ignored. */
        const char *sp2 = strchr(*b, ' ');
        *bl = sp2 ? (size_t)(sp2 - *b) : strlen(*b);
        return *bl > 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *al = strlen(*a);
        *bl = strlen(*b);
        return *al > 0 && *bl > 0;
    }
    return false;
}

static int load_merges(eng_tokenizer *t, const json_t *merges, const char *path, char *err,
                       size_t errlen)
{
    ut_buf ra = {0}, rb = {0}, rab = {0};
    int rc = 0;
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t al, bl;
        if (!merge_parts(m, &a, &al, &b, &bl)) {
            rc = fail(err, errlen, path, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", i);
            break;
        }
        if (!bytelevel_to_raw(a, al, &ra) || !bytelevel_to_raw(b, bl, &rb)) {
            /* Not byte-level: no pre-token can contain it; keep the rank numbering. */
            rc = eng__bpe_add_merge(t->bpe, -1, -1, -1);
            if (rc)
                break;
            continue;
        }
        rab.n = 0;
        if (ut_buf_add(&rab, ra.p, ra.n) || ut_buf_add(&rab, rb.p, rb.n)) {
            rc = -ENOMEM;
            break;
        }
        int32_t l = eng__bpe_lookup(t->bpe, ra.p, ra.n), r = eng__bpe_lookup(t->bpe, rb.p, rb.n);
        int32_t lr = eng__bpe_lookup(t->bpe, rab.p, rab.n);
        /* A merge whose parts or result are not tokens can never produce an id. */
        if ((rc = eng__bpe_add_merge(t->bpe, l < 0 || r < 0 || lr < 0 ? -1 : l,
                                     l < 0 || r < 0 || lr < 0 ? -1 : r, lr)))
            break;
    }
    free(ra.p);
    free(rb.p);
    free(rab.p);
    return rc;
}

static int load_model(eng_tokenizer *t, const json_t *root, const char *path, char *err,
                      size_t errlen)
{
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return fail(err, errlen, path, "no \"model\" object");
    const char *type = json_string_value(json_object_get(model, "type"));
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    if (type && strcmp(type, "BPE") != 0)
        return fail(err, errlen, path, "model type \"%s\" is not supported (only BPE)", type);
    if (!json_is_object(vocab))
        return fail(err, errlen, path, "model.vocab must be an object");
    if (!json_is_array(merges))
        return fail(err, errlen, path, "model.merges must be an array");
    const json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return fail(err, errlen, path, "BPE dropout is not supported");
    const char *cs = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *ew = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((cs && *cs) || (ew && *ew))
        return fail(err, errlen, path, "BPE subword prefix/suffix is not supported");

    int32_t max_id = -1;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= INT32_MAX / 2)
            return fail(err, errlen, path, "model.vocab[\"%.40s\"]: id must be a non-negative integer",
                        key);
        if (json_integer_value(v) > max_id)
            max_id = (int32_t)json_integer_value(v);
    }
    int rc = load_added(t, json_object_get(root, "added_tokens"), path, err, errlen, &max_id);
    if (rc)
        return rc;
    if (max_id < 0)
        return fail(err, errlen, path, "empty vocabulary");
    t->n_ids = max_id + 1;
    t->tok = calloc((size_t)t->n_ids, sizeof *t->tok);
    t->tok_len = calloc((size_t)t->n_ids, sizeof *t->tok_len);
    t->is_special = calloc((size_t)t->n_ids, sizeof *t->is_special);
    t->is_added = calloc((size_t)t->n_ids, sizeof *t->is_added);
    t->bpe_tok = calloc((size_t)t->n_ids, sizeof *t->bpe_tok);
    if (!t->tok || !t->tok_len || !t->is_special || !t->is_added || !t->bpe_tok)
        return -ENOMEM;

    ut_buf raw = {0};
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->tok[id])
            continue;  /* two strings for one id: keep the first */
        size_t kl = strlen(key);
        bool ok = bytelevel_to_raw(key, kl, &raw);
        /* Not in the byte alphabet: decodes as written, never produced by encode. */
        const char *src = ok ? raw.p : key;
        size_t sl = ok ? raw.n : kl;
        /* memcpy, not strndup: byte 0 is a token of its own. */
        t->tok[id] = malloc(sl + 1);
        if (!t->tok[id]) {
            free(raw.p);
            return -ENOMEM;
        }
        memcpy(t->tok[id], src, sl);
        t->tok[id][sl] = '\0';
        t->tok_len[id] = (uint32_t)sl;
        t->bpe_tok[id] = ok ? t->tok[id] : NULL;
    }
    free(raw.p);
    for (size_t i = 0; i < t->n_added; i++) {
        struct tok_added *tk = &t->added[i];
        free(t->tok[tk->id]);
        t->tok[tk->id] = strdup(tk->content);
        if (!t->tok[tk->id])
            return -ENOMEM;
        t->tok_len[tk->id] = (uint32_t)tk->len;
        t->is_added[tk->id] = true;
        t->is_special[tk->id] = tk->special;
        /* tokenizers.js puts added tokens into the BPE's lookup too (this matters
         * for ignore_merges); the byte-level spelling of plain ASCII content is the
         * content itself. Special tokens are left out: text must never become a
         * special id. With `special` on they are matched before the BPE anyway; with
         * it off, "<|im_end|>" or MiniCPM5's "<function" in user text is text. */
        bool ascii = !tk->special;
        for (size_t k = 0; k < tk->len; k++)
            ascii = ascii && (unsigned char)tk->content[k] > 0x20 &&
                    (unsigned char)tk->content[k] < 0x7F;
        t->bpe_tok[tk->id] = ascii ? t->tok[tk->id] : NULL;
    }

    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    int32_t unk_id = -1;
    if (unk) {
        const json_t *u = json_object_get(vocab, unk);
        unk_id = json_is_integer(u) ? (int32_t)json_integer_value(u) : -1;
    }
    bool ignore = json_is_true(json_object_get(model, "ignore_merges"));
    t->bpe = eng__bpe_new(t->n_ids, (const char *const *)t->bpe_tok, t->tok_len, ignore, unk_id);
    if (!t->bpe)
        return -ENOMEM;
    return load_merges(t, merges, path, err, errlen);
}

/* post_processor: of a TemplateProcessing, the special tokens of "single" before and
 * after the sequence ($A), as Hugging Face's tokenizers adds them with
 * add_special_tokens. Any other post_processor (or none) adds nothing here: the
 * ByteLevel one only fixes offsets, and the chat path never adds specials (the
 * template writes "<s>"). */
static int load_post(eng_tokenizer *t, const json_t *post, const char *path, char *err,
                     size_t errlen)
{
    const char *type = json_string_value(json_object_get(post, "type"));
    if (!type || strcmp(type, "TemplateProcessing") != 0)
        return 0;
    const json_t *specials = json_object_get(post, "special_tokens");
    bool after = false;
    size_t i;
    const json_t *item;
    json_array_foreach(json_object_get(post, "single"), i, item) {
        if (json_object_get(item, "Sequence")) {
            after = true;
            continue;
        }
        const char *name = json_string_value(
            json_object_get(json_object_get(item, "SpecialToken"), "id"));
        const json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            return fail(err, errlen, path, "post_processor.single[%zu]: not a known special "
                                           "token",
                        i);
        size_t j;
        const json_t *id;
        json_array_foreach(ids, j, id) {
            int32_t *dst = after ? t->special_post : t->special_pre;
            int *n = after ? &t->n_special_post : &t->n_special_pre;
            json_int_t v = json_integer_value(id);
            if (!json_is_integer(id) || v < 0 || v >= t->n_ids || *n == TOK_MAX_POST)
                return fail(err, errlen, path, "post_processor: special token '%s' has an id "
                                               "out of range or too many ids",
                            name);
            dst[(*n)++] = (int32_t)v;
        }
    }
    return 0;
}

int eng_tokenizer_load(const char *path, eng_tokenizer **out, char *err, size_t errlen)
{
    char sub[200];
    json_error_t je;
    eng_tokenizer *t = NULL;
    int rc = 0;
    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    const char *why;
    FILE *f = ut_fopen_regular(path, 0, &rc, &why);
    if (!f) {
        fail(err, errlen, path, "%s", why);
        return rc == -ENOENT ? -ENOENT : -EINVAL;
    }
    json_t *root = json_loadf(f, JSON_DECODE_ANY, &je);
    fclose(f);
    if (!root) {
        fail(err, errlen, path, "line %d: %s", je.line, je.text);
        return -EINVAL;
    }
    if (!json_is_object(root)) {
        fail(err, errlen, path, "not a JSON object");
        goto err;
    }
    t = calloc(1, sizeof *t);
    if (!t)
        goto nomem;
    if ((rc = load_model(t, root, path, err, errlen)))
        goto check;

    if ((rc = load_post(t, json_object_get(root, "post_processor"), path, err, errlen)))
        goto err;

    const json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        if ((rc = eng__norm_parse(norm, &t->norm, sub, sizeof sub))) {
            if (rc == -EINVAL)
                fail(err, errlen, path, "%s", sub);
            goto check;
        }
        t->has_norm = true;
    }
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    if (!pre || json_is_null(pre)) {
        fail(err, errlen, path, "no pre_tokenizer: only byte-level BPE is supported");
        goto err;
    }
    if ((rc = eng__pre_parse(pre, &t->pre, sub, sizeof sub))) {
        if (rc == -EINVAL)
            fail(err, errlen, path, "%s", sub);
        goto check;
    }
    t->has_pre = true;
    if (!eng__pre_ends_bytelevel(&t->pre)) {
        fail(err, errlen, path, "pre_tokenizer must be ByteLevel or Split steps ending in ByteLevel");
        goto err;
    }
    /* Without a normalizer every added token is matched on the raw text. */
    if ((rc = eng__matcher_build(&t->raw_match, t->added, t->n_added, false, NULL)))
        goto check;
    if (t->has_norm) {
        rc = eng__matcher_build(&t->norm_match, t->added, t->n_added, true, &t->norm);
    } else {
        eng__matcher_free(&t->raw_match);
        for (size_t i = 0; i < t->n_added; i++)
            t->added[i].normalized = false;
        rc = eng__matcher_build(&t->raw_match, t->added, t->n_added, false, NULL);
    }
check:
    if (rc == 0) {
        json_decref(root);
        *out = t;
        return 0;
    }
    if (rc != -ENOMEM)
        goto err;
nomem:
    fail(err, errlen, path, "out of memory");
    rc = -ENOMEM;
err:
    json_decref(root);
    eng_tokenizer_free(t);
    return rc < 0 ? rc : -EINVAL;
}
