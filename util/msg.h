/* msg — printf-style messages handed to a callback as one line: the shape of every
 * warn/log hook a caller can install (config's loader, the model, the worker).
 * Lines longer than UT_MSG_MAX - 1 bytes are truncated. */
#ifndef MINICPMD_UTIL_MSG_H
#define MINICPMD_UTIL_MSG_H

#include <stdarg.h>

#define UT_MSG_MAX 1024

typedef void (*ut_msg_fn)(void *ctx, const char *msg);

/* Formats and calls fn(ctx, line); nothing (not even the formatting) when fn is NULL. */
void ut_msgf(ut_msg_fn fn, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ut_vmsgf(ut_msg_fn fn, void *ctx, const char *fmt, va_list ap);

#endif
