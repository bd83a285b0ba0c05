/* Small shared pieces of the tokenizer: growable buffers, code points (over
 * util/utf8.h), JavaScript's whitespace and the GPT-2 byte <-> unicode map. */
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

int eng__utf8_next(const char *str, size_t n, int32_t *cp)
{
    uint32_t c;
    int k = ut_utf8_decode(str, n, &c);
    if (k <= 0) {
        *cp = -1;
        return k < 0 ? -k : (int)n;
    }
    *cp = (int32_t)c;
    return k;
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
