/* A UTF-8 validity check for tests, by utf8proc (independent of the engine's own
 * UTF-8 code that the tests check). */
#ifndef MINICPMD_TESTS_UTF8_H
#define MINICPMD_TESTS_UTF8_H

#include <stdbool.h>
#include <string.h>
#include <utf8proc.h>

static inline bool mcd_utf8_valid(const char *s)
{
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    utf8proc_ssize_t n = (utf8proc_ssize_t)strlen(s);
    while (n > 0) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, n, &cp);
        if (k <= 0)
            return false;
        p += k;
        n -= k;
    }
    return true;
}

#endif
