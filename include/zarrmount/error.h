/* zarrmount: errors that carry a reason a person can read.
 *
 * Every function that can fail returns 0 on success or a negative errno value
 * (-EINVAL for a request that is refused, -ENOMEM when memory runs out, -EIO
 * for bad bytes), and fills a zm_err with one line saying why. The same line
 * goes to the log, to FUSE's caller through -errno, and to the user.
 */
#ifndef ZARRMOUNT_ERROR_H
#define ZARRMOUNT_ERROR_H

#include <stddef.h>

#define ZM_REASON_MAX 512

typedef struct zm_err {
    int code;                   /* 0 or a negative errno value */
    char reason[ZM_REASON_MAX]; /* one line, no trailing newline; "" when code == 0 */
} zm_err;

/* Sets err (if not NULL) to code and a printf-formatted reason; returns code,
 * so a failing path can say `return zm_err_set(err, -EINVAL, "...", ...)`. */
int zm_err_set(zm_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err to success. */
void zm_err_clear(zm_err *err);

#endif
