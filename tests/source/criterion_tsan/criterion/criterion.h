/* A stand-in for the part of Criterion that tests/test_pool.c,
 * tests/test_chunk_cache.c and tests/test_filters.c use, for running them
 * under ThreadSanitizer: Criterion's runner maps a shared arena that TSan's
 * memory layout does not allow, so a TSan build aborts before any test
 * runs. Put this directory first on the include path; each test then runs
 * in turn in one process, and the first failed assertion ends the run:
 *
 *   cc -std=c11 -D_GNU_SOURCE -fsanitize=thread -Itests/source/criterion_tsan -Iinclude -Isrc \
 *      src/error/error.c src/source/pool.c tests/test_pool.c -lpthread
 */
#ifndef ZM_CRITERION_TSAN_H
#define ZM_CRITERION_TSAN_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct zm_shim_test {
    const char *name;
    void (*fn)(void);
} zm_shim_test;

static zm_shim_test zm_shim_tests[256];
static int zm_shim_count;

static void zm_shim_register(const char *name, void (*fn)(void))
{
    if (zm_shim_count < 256)
        zm_shim_tests[zm_shim_count++] = (zm_shim_test){name, fn};
}

/* No format attribute: an assertion without a message passes "", which
 * gcc would flag as an empty format. */
static void zm_shim_fail(const char *file, int line, const char *what, const char *fmt, ...)
{
    fprintf(stderr, "%s:%d: assertion failed: %s", file, line, what);
    if (fmt[0] != '\0') {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    exit(1);
}

#define Test(suite, name)                                                                          \
    static void suite##_##name(void);                                                              \
    __attribute__((constructor)) static void zm_shim_reg_##suite##_##name(void)                    \
    {                                                                                              \
        zm_shim_register(#suite "::" #name, suite##_##name);                                       \
    }                                                                                              \
    static void suite##_##name(void)

#define cr_assert(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            zm_shim_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__);                               \
    } while (0)
#define zm_shim_cmp(a, op, b, ...)  cr_assert((a)op(b), __VA_ARGS__)
#define cr_assert_eq(a, b, ...)     zm_shim_cmp(a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...)    zm_shim_cmp(a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...)     zm_shim_cmp(a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...)    zm_shim_cmp(a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...)     zm_shim_cmp(a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...)    zm_shim_cmp(a, >=, b, __VA_ARGS__)
#define cr_assert_null(p, ...)      cr_assert((p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...)  cr_assert((p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_fail(...)         zm_shim_fail(__FILE__, __LINE__, "cr_assert_fail", "" __VA_ARGS__)

int main(void)
{
    for (int i = 0; i < zm_shim_count; i++) {
        fprintf(stderr, "[RUN ] %s\n", zm_shim_tests[i].name);
        zm_shim_tests[i].fn();
    }
    fprintf(stderr, "[====] %d tests passed\n", zm_shim_count);
    return 0;
}

#endif
