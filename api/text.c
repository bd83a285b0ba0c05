#include "api/text.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bodies ----------------------------------------------------------------- */

/* The path of the first number in `v` that no int64 holds ("max_tokens",
 * "messages[2].content[0].x"), into `out`. Returns true when found. */
static bool find_huge(const json_t *v, char *out, size_t len, size_t at)
{
    if (json_is_real(v)) {
        double x = json_real_value(v);
        return x >= 9223372036854775808.0 || x < -9223372036854775808.0;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *m;
        json_object_foreach((json_t *)v, k, m) {
            int n = snprintf(out + at, len - at, "%s%s", at ? "." : "", k);
            if (n > 0 && at + (size_t)n < len && find_huge(m, out, len, at + (size_t)n))
                return true;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            int n = snprintf(out + at, len - at, "[%zu]", i);
            if (n > 0 && at + (size_t)n < len && find_huge(json_array_get(v, i), out, len, at + (size_t)n))
                return true;
        }
    }
    out[at] = '\0';
    return false;
}

/* jansson refuses an integer beyond int64 as "too big integer" (a parse error); the
 * client sent valid JSON with a value out of range, so say which field (a 400 like
 * any out-of-range value; llama.cpp's server answers the same with a 400). Found by
 * parsing again with integers as reals, which only this error path pays for. */
static void refuse_overflow(const char *body, size_t len, const json_error_t *first,
                            struct api_err *bad)
{
    json_error_t e;
    char path[128] = "";
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &e);
    bool found = root && find_huge(root, path, sizeof path, 0) && path[0];
    json_decref(root);
    if (found)
        api_refuse(bad, API_ERR_BAD_REQUEST, path,
                   "'%s' is out of range: integers must fit in 64 bits", path);
    else
        api_refuse(bad, API_ERR_BAD_REQUEST, NULL,
                   "a number in the request body is out of range (line %d, column %d)",
                   first->line, first->column);
}

json_t *api_parse_object(const char *body, size_t len, struct api_err *bad)
{
    json_error_t e;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    if (!root && json_error_code(&e) == json_error_null_character) {
        /* "\u0000" in any string is refused here, once for every field: a prompt
         * cannot carry it, and a stop string holding it is refused
         * rather than cut at it. */
        api_refuse(bad, API_ERR_INVALID_JSON, NULL, "request body: a string holds \\u0000 (a NUL "
                                                "character), which minicpmd does not accept in "
                                                "any field (line %d, column %d)",
                   e.line, e.column);
        return NULL;
    }
    if (!root && json_error_code(&e) == json_error_numeric_overflow) {
        refuse_overflow(body, len, &e, bad);
        return NULL;
    }
    if (!root) {
        api_refuse(bad, API_ERR_INVALID_JSON, NULL, "request body is not valid JSON: %s (line %d, "
                                                "column %d)",
               e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_refuse(bad, API_ERR_BAD_REQUEST, NULL, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* An optional boolean field: absent -> `def`. */
static int opt_bool(const json_t *root, const char *key, bool def, bool *out,
                    struct api_err *bad)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return api_refuse(bad, API_ERR_BAD_REQUEST, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

int api_tokenize_parse(const json_t *root, struct api_tokenize_req *req,
                       struct api_err *bad)
{
    json_t *c = json_object_get(root, "content");
    if (!json_is_string(c))
        return api_refuse(bad, API_ERR_BAD_REQUEST, "content",
                      c ? "'content' must be a string" : "'content' is required");
    req->content = json_string_value(c);
    req->content_len = json_string_length(c);
    if (opt_bool(root, "add_special", false, &req->add_special, bad) ||
        opt_bool(root, "parse_special", true, &req->parse_special, bad) ||
        opt_bool(root, "with_pieces", false, &req->with_pieces, bad))
        return -EINVAL;
    return 0;
}

static char *dump(json_t *root)
{
    if (!root)
        return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

/* Room for `more` bytes (and the NUL) at the end of `b`. */
static int reserve(ut_buf *b, size_t more)
{
    if (b->cap - b->n > more)
        return 0;
    int rc = ut_grow((void **)&b->p, &b->cap, b->n + more + 1, 1, 1 << 16);
    b->oom |= rc != 0;
    return rc;
}

/* One piece: a JSON string when it is valid UTF-8 on its own, else its bytes. */
static int add_piece(ut_buf *b, const char *bytes, size_t len)
{
    json_t *s = json_stringn(bytes, len); /* NULL if not valid UTF-8 */
    if (!s) {
        ut_buf_addc(b, '[');
        for (size_t i = 0; i < len; i++)
            ut_buf_printf(b, i ? ",%u" : "%u", (unsigned char)bytes[i]);
        return ut_buf_addc(b, ']');
    }
    size_t flags = JSON_ENCODE_ANY | JSON_COMPACT, need = 6 * len + 3;
    int rc = reserve(b, need);
    if (rc == 0) {
        size_t w = json_dumpb(s, b->p + b->n, need, flags);
        if (w == 0 || w > need)
            rc = -ENOMEM;
        else
            b->n += w;
        b->p[b->n] = '\0';
    }
    json_decref(s);
    return rc;
}

int api_tokenize_body(const int32_t *ids, size_t n, const eng_tokenizer *tok, size_t max_bytes,
                      char **out)
{
    ut_buf b = {0};
    *out = NULL;
    ut_buf_adds(&b, "{\"tokens\":[");
    for (size_t i = 0; i < n && !b.oom; i++) {
        if (!tok) {
            ut_buf_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
        } else {
            const char *bytes;
            size_t len = eng_tokenizer_token_bytes(tok, ids[i], false, &bytes);
            ut_buf_printf(&b, i ? ",{\"id\":%d,\"piece\":" : "{\"id\":%d,\"piece\":", (int)ids[i]);
            add_piece(&b, bytes, len);
            ut_buf_addc(&b, '}');
        }
        if (b.n > max_bytes) {
            ut_buf_free(&b);
            return -EFBIG;
        }
    }
    ut_buf_adds(&b, "]}");
    if (b.oom) {
        ut_buf_free(&b);
        return -ENOMEM;
    }
    *out = b.p;
    return 0;
}

int api_detokenize_parse(const json_t *root, int32_t n_vocab, int32_t **ids, size_t *n,
                         struct api_err *bad)
{
    json_t *arr = json_object_get(root, "tokens");
    if (!json_is_array(arr))
        return api_refuse(bad, API_ERR_BAD_REQUEST, "tokens",
                      arr ? "'tokens' must be an array of token ids" : "'tokens' is required");
    size_t count = json_array_size(arr);
    int32_t *out = malloc((count ? count : 1) * sizeof *out);
    if (!out)
        return api_refuse(bad, API_ERR_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < count; i++) {
        json_t *v = json_array_get(arr, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < 0 || id >= n_vocab) {
            free(out);
            char param[64];
            snprintf(param, sizeof param, "tokens[%zu]", i);
            return api_refuse(bad, API_ERR_BAD_REQUEST, param,
                          "'%s' must be a token id between 0 and %d", param, n_vocab - 1);
        }
        out[i] = (int32_t)id;
    }
    *ids = out;
    *n = count;
    return 0;
}

char *api_detokenize_body(const char *text, size_t len)
{
    json_t *s = json_stringn(text, len);
    return s ? dump(json_pack("{s:o}", "content", s)) : NULL;
}

char *api_apply_template_body(const char *prompt)
{
    json_t *s = json_string(prompt);
    return s ? dump(json_pack("{s:o}", "prompt", s)) : NULL;
}
