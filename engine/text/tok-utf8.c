/* Small shared pieces of the tokenizer: growable buffers, UTF-8 (WHATWG repair,
 * validation, JavaScript's whitespace) and the GPT-2 byte <-> unicode map. */
#include "engine/text/tok-impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ==== growable buffers ==================================================== */

int eng__ids_push(struct tok_ids *ids, int32_t id)
{
    if (ut_grow((void **)&ids->v, &ids->cap, ids->n + 1, sizeof *ids->v, 16))
        return -ENOMEM;
    ids->v[ids->n++] = id;
    return 0;
}

int eng__pieces_append(struct tok_pieces *p, const char *s, size_t n)
{
    if (ut_grow((void **)&p->buf, &p->cap, p->len + n, 1, 16))
        return -ENOMEM;
    if (n)
        memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->v[p->n - 1].len += n;
    return 0;
}

int eng__pieces_add(struct tok_pieces *p, const char *s, size_t n)
{
    if (ut_grow((void **)&p->v, &p->vcap, p->n + 1, sizeof *p->v, 16))
        return -ENOMEM;
    p->v[p->n++] = (struct tok_span){p->len, 0};
    return eng__pieces_append(p, s, n);
}

void eng__pieces_reset(struct tok_pieces *p)
{
    p->len = 0;
    p->n = 0;
}

void eng__pieces_free(struct tok_pieces *p)
{
    free(p->buf);
    free(p->v);
    memset(p, 0, sizeof *p);
}

/* ==== UTF-8 =============================================================== */

/* One step of the WHATWG UTF-8 decoder from s[i]: returns the length of a valid
 * sequence (> 0), or -(length of the maximal subpart) for an ill-formed one, or 0
 * for a valid but incomplete sequence cut by the end of the input. */
static int utf8_step(const unsigned char *s, size_t n, size_t i)
{
    unsigned char b = s[i];
    if (b < 0x80)
        return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    for (int k = 1; k <= need; k++) {
        if (i + k >= n)
            return 0;
        unsigned char c = s[i + k];
        if (c < lo || c > hi)
            return -k;   /* the bytes before c form the maximal subpart */
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

size_t eng__utf8_valid_prefix(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_step(s, n, i);
        if (k <= 0)
            return i;
        i += (size_t)k;
    }
    return n;
}

int eng__utf8_repair(ut_buf *out, const char *str, size_t n, bool hold, size_t *held)
{
    static const char fffd[] = "\xEF\xBF\xBD";
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0;
    if (held)
        *held = 0;
    if (n == 0)
        return ut_buf_add(out, "", 0);
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_step(s, n, i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (ut_buf_add(out, str + run, i - run))
            return -ENOMEM;
        if (k == 0 && hold) {
            if (held)
                *held = n - i;
            return 0;
        }
        if (ut_buf_add(out, fffd, 3))
            return -ENOMEM;
        i = k == 0 ? n : i + (size_t)-k;
        run = i;
    }
    return ut_buf_add(out, str + run, n - run);
}

int eng__utf8_next(const char *str, size_t n, int32_t *cp)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)str, (utf8proc_ssize_t)n, &c);
    if (k <= 0) {
        *cp = -1;
        return 1;
    }
    *cp = c;
    return (int)k;
}

bool eng__js_space(int32_t cp)
{
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
        return true;
    if (cp < 0x80)
        return false;
    if (cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF)
        return true;
    return utf8proc_category(cp) == UTF8PROC_CATEGORY_ZS;
}

/* ==== the GPT-2 byte <-> unicode map ====================================== */

/* Printable Latin-1 bytes stand for themselves; the other 68 go, in byte order, to
 * U+0100 and up, so every byte has a visible, non-space character. */
static bool byte_is_direct(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t eng__byte_to_unicode(uint8_t b)
{
    if (byte_is_direct(b))
        return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        n += !byte_is_direct(x);
    return 256 + n;
}

int eng__unicode_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_direct(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_direct(x) && n-- == 0)
            return (int)x;
    return -1;
}
