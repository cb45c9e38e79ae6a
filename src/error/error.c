#include "zarrmount/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int zm_err_set(zm_err *err, int code, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->reason, sizeof err->reason, fmt, ap);
    va_end(ap);
    /* A reason is one line: fold any newline a caller let through. */
    for (char *c = err->reason; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    return code;
}

void zm_err_clear(zm_err *err)
{
    if (err == NULL)
        return;
    err->code = 0;
    err->reason[0] = '\0';
}
