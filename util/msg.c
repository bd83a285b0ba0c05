#include "util/msg.h"

#include <stdio.h>

void ut_vmsgf(ut_msg_fn fn, void *ctx, const char *fmt, va_list ap)
{
    if (!fn)
        return;
    char line[UT_MSG_MAX];
    vsnprintf(line, sizeof line, fmt, ap);
    fn(ctx, line);
}

void ut_msgf(ut_msg_fn fn, void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ut_vmsgf(fn, ctx, fmt, ap);
    va_end(ap);
}
