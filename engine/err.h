/* Internal to engine/: the one-line error message every fallible engine call
 * leaves in the caller's (err, errlen) buffer. */
#ifndef MINICPMD_ENGINE_ERR_H
#define MINICPMD_ENGINE_ERR_H

#include <stddef.h>

/* Format the message into `err` (if there is room) and return `code`, so a
 * failure reads `return eng__fail(err, errlen, -EINVAL, "…", …);`. */
int eng__fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
