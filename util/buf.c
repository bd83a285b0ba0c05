#include "util/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ut_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : first;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return -ENOMEM;
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem)
        return -ENOMEM;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* Room for `more` bytes and the NUL after them. */
static int reserve(ut_buf *b, size_t more)
{
    if (b->oom)
        return -ENOMEM;
    if (more >= SIZE_MAX - b->n || ut_grow((void **)&b->p, &b->cap, b->n + more + 1, 1, 64)) {
        b->oom = true;
        return -ENOMEM;
    }
    return 0;
}

int ut_buf_add(ut_buf *b, const void *s, size_t n)
{
    if (reserve(b, n))
        return -ENOMEM;
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int ut_buf_adds(ut_buf *b, const char *s)
{
    return ut_buf_add(b, s, strlen(s));
}

int ut_buf_addc(ut_buf *b, char c)
{
    return ut_buf_add(b, &c, 1);
}

int ut_buf_vprintf(ut_buf *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        va_end(again);
        b->oom = true;
        return -EINVAL;
    }
    if ((size_t)n < sizeof small) {
        va_end(again);
        return ut_buf_add(b, small, (size_t)n);
    }
    if (reserve(b, (size_t)n)) {
        va_end(again);
        return -ENOMEM;
    }
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, again);
    va_end(again);
    b->n += (size_t)n;
    return 0;
}

int ut_buf_printf(ut_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = ut_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void ut_buf_free(ut_buf *b)
{
    free(b->p);
    *b = (ut_buf){0};
}
