/* UTF-8: the WHATWG decoder's byte ranges, which are RFC 3629's validity and give
 * the maximal subparts of the Unicode standard's replacement policy for free. */
#include "util/utf8.h"

#include <errno.h>
#include <string.h>

int ut_utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)str;
    unsigned char b = s[0];
    if (b < 0x80) {
        if (cp)
            *cp = b;
        return 1;
    }
    int need;
    uint32_t c;
    /* The second byte's range excludes overlong forms (E0, F0), surrogates (ED)
     * and code points past U+10FFFF (F4); later bytes are any continuation. */
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1, c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2, c = b & 0x0F;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3, c = b & 0x07;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n)
            return 0;
        unsigned char x = s[k];
        if (x < lo || x > hi)
            return -k;   /* the k bytes before x are the maximal subpart */
        c = c << 6 | (x & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    if (cp)
        *cp = c;
    return need + 1;
}

int ut_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF)
        return 0;
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ut_utf8_valid_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {   /* ASCII runs are most text */
            i++;
            continue;
        }
        int k = ut_utf8_decode(s + i, n - i, NULL);
        if (k <= 0)
            return i;
        i += (size_t)k;
    }
    return n;
}

int ut_utf8_repair(ut_buf *out, const char *s, size_t n, bool hold, size_t *held)
{
    size_t i = 0, run = 0;   /* s[run .. i) is valid and not yet copied */
    if (held)
        *held = 0;
    if (n == 0)
        return ut_buf_add(out, "", 0);
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int k = ut_utf8_decode(s + i, n - i, NULL);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (ut_buf_add(out, s + run, i - run))
            return -ENOMEM;
        if (k == 0 && hold) {
            if (held)
                *held = n - i;
            return 0;
        }
        if (ut_buf_add(out, UT_UTF8_REPLACEMENT, 3))
            return -ENOMEM;
        i = k == 0 ? n : i + (size_t)-k;
        run = i;
    }
    return ut_buf_add(out, s + run, n - run);
}

size_t ut_utf8_whole_len(const char *s)
{
    size_t n = strlen(s), i = n;
    /* A character is at most 4 bytes: its start is among the last 3 non-ASCII
     * bytes' leads, if it is cut at all. */
    while (i > 0 && n - i < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0 || (unsigned char)s[i - 1] < 0xC0)
        return n;
    return ut_utf8_decode(s + i - 1, n - (i - 1), NULL) == 0 ? i - 1 : n;
}

size_t ut_utf8_char_start(const char *s, size_t i)
{
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

size_t ut_utf8_count_starts(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

int ut_utf8_stream_feed(struct ut_utf8_stream *st, ut_buf *out, const char *s, size_t n)
{
    size_t i = 0;
    /* Complete (or give up on) the character the last piece cut. */
    while (st->n_pend > 0 && i < n) {
        st->pend[st->n_pend++] = s[i];
        int k = ut_utf8_decode(st->pend, (size_t)st->n_pend, NULL);
        if (k == 0) {          /* still valid, still short */
            i++;
            continue;
        }
        if (k > 0) {
            i++;
            st->n_pend = 0;
            if (ut_buf_add(out, st->pend, (size_t)k))
                return -ENOMEM;
            break;
        }
        /* The bytes held were valid so far, so the maximal subpart is all of
         * them and s[i] starts afresh below. */
        st->n_pend = 0;
        if (ut_buf_add(out, UT_UTF8_REPLACEMENT, 3))
            return -ENOMEM;
    }
    if (st->n_pend > 0)        /* the whole piece went into the held character */
        return 0;
    size_t held = 0;
    if (ut_utf8_repair(out, s + i, n - i, true, &held))
        return -ENOMEM;
    memcpy(st->pend, s + n - held, held);
    st->n_pend = (int)held;
    return 0;
}

int ut_utf8_stream_finish(struct ut_utf8_stream *st, ut_buf *out)
{
    if (st->n_pend == 0)
        return 0;
    st->n_pend = 0;
    return ut_buf_add(out, UT_UTF8_REPLACEMENT, 3);
}
