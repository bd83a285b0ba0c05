/* buf — growable memory: arrays that double as they fill (ut_grow), and a byte
 * string that stays NUL-terminated (ut_buf).
 *
 * Errors: -ENOMEM, and the memory held so far is left as it was (the caller frees
 * it). ut_buf also remembers a failure (`oom`), so a chain of appends needs one
 * check at the end. Not thread-safe: one owner at a time. */
#ifndef MINICPMD_UTIL_BUF_H
#define MINICPMD_UTIL_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Make room for `need` elements of `elem` bytes in *p, which holds *cap: the
 * capacity doubles from `first` until it is enough. Returns 0 or -ENOMEM. */
int ut_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first);

typedef struct ut_buf {
    char *p;        /* NULL until the first append; then NUL-terminated */
    size_t n;       /* bytes, the NUL not counted */
    size_t cap;
    bool oom;       /* an append failed: p holds what came before it */
} ut_buf;

int ut_buf_add(ut_buf *b, const void *s, size_t n);
int ut_buf_adds(ut_buf *b, const char *s);
int ut_buf_addc(ut_buf *b, char c);
int ut_buf_printf(ut_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ut_buf_vprintf(ut_buf *b, const char *fmt, va_list ap);
void ut_buf_free(ut_buf *b);

#endif
