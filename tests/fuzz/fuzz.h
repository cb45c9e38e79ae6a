/* Shared by the libFuzzer targets of tests/fuzz/ (one file a target,
 * fuzz_<target>.c): property checks that stop the run with a readable line,
 * and small readers for the fixed-size fields some inputs start with.
 *
 * A target checks what must hold for every input, not only that nothing
 * crashed: a failure is a negative errno value with a one-line reason, a
 * decoder's output never passes the bound it was given, and an encoding
 * decodes back to what was encoded. A broken property aborts, which
 * libFuzzer reports as a crash and saves the input for.
 */
#ifndef ZARRMOUNT_TESTS_FUZZ_H
#define ZARRMOUNT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/error.h"

/* Stops the run when a property does not hold. */
#define ZM_FUZZ_CHECK(condition, ...)                                                              \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, #condition);       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A failure is a negative errno value among the allowed ones, with a
 * reason: one line, not empty. */
static inline void zm_fuzz_check_failure(int rc, const zm_err *err, const int *allowed,
                                         size_t allowed_count, const char *what)
{
    int known = 0;
    for (size_t i = 0; i < allowed_count; i++)
        known |= rc == allowed[i];
    ZM_FUZZ_CHECK(known, "%s: unexpected return %d (%s)", what, rc, err->reason);
    ZM_FUZZ_CHECK(err->reason[0] != '\0', "%s: failed (%d) without a reason", what, rc);
    ZM_FUZZ_CHECK(strchr(err->reason, '\n') == NULL, "%s: a reason of more than one line", what);
}

/* Fixed-size fields at the start of an input, little-endian; a short input
 * reads as zeros. */
typedef struct zm_fuzz_input {
    const uint8_t *data;
    size_t size;
} zm_fuzz_input;

static inline uint64_t zm_fuzz_take(zm_fuzz_input *in, size_t bytes)
{
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; i++) {
        if (in->size > 0) {
            v |= (uint64_t)in->data[0] << (8 * i);
            in->data++;
            in->size--;
        }
    }
    return v;
}

/* A copy of the input as a NUL-terminated string (cut at its first NUL). */
static inline char *zm_fuzz_string(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
