/* Tests for the options' defaults and the one size parser
 * (src/config/config.c): the grammar the mount's -o cache_size=,
 * chunk_size= and cache_max= and export's --chunk-size share, its errors
 * (one line naming the option), the thread counts, and the defaults every
 * layer reads. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "zarrmount/config.h"

static uint64_t size_of(const char *text)
{
    uint64_t bytes = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_parse_size("chunk_size", text, &bytes, &err);
    cr_assert_eq(rc, 0, "%s: %s", text, err.reason);
    return bytes;
}

/* Refused: -EINVAL, the value untouched, and a one-line reason that begins
 * OPTION=TEXT and says contains. */
static void refused(const char *option, const char *text, const char *says)
{
    uint64_t bytes = 12345;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_parse_size(option, text, &bytes, &err);
    cr_assert_eq(rc, -EINVAL, "%s: accepted as %llu", text, (unsigned long long)bytes);
    cr_assert_eq(err.code, -EINVAL);
    cr_assert_eq(bytes, 12345, "%s: the value changed on a refusal", text);
    char head[128];
    snprintf(head, sizeof head, "%s=%s: ", option, text);
    cr_assert_eq(strncmp(err.reason, head, strlen(head)), 0, "reason '%s' for '%s'", err.reason,
                 text);
    cr_assert(strstr(err.reason, says) != NULL, "reason '%s' for '%s'", err.reason, text);
    cr_assert(strchr(err.reason, '\n') == NULL, "reason '%s' is not one line", err.reason);
}

Test(size, bytes_and_suffixes)
{
    cr_assert_eq(size_of("1"), 1);
    cr_assert_eq(size_of("4096"), 4096);
    cr_assert_eq(size_of("65536"), 65536);
    cr_assert_eq(size_of("1K"), 1024);
    cr_assert_eq(size_of("256K"), 256 * 1024);
    cr_assert_eq(size_of("1M"), (uint64_t)1 << 20);
    cr_assert_eq(size_of("256M"), (uint64_t)256 << 20);
    cr_assert_eq(size_of("1G"), (uint64_t)1 << 30);
    cr_assert_eq(size_of("4G"), (uint64_t)4 << 30);
    cr_assert_eq(size_of("2T"), (uint64_t)2 << 40);
}

Test(size, lower_case_and_iB)
{
    cr_assert_eq(size_of("1m"), (uint64_t)1 << 20);
    cr_assert_eq(size_of("64k"), 64 * 1024);
    cr_assert_eq(size_of("64KiB"), 64 * 1024);
    cr_assert_eq(size_of("1MiB"), (uint64_t)1 << 20);
    cr_assert_eq(size_of("3GiB"), (uint64_t)3 << 30);
    cr_assert_eq(size_of("1TiB"), (uint64_t)1 << 40);
}

Test(size, the_largest)
{
    cr_assert_eq(size_of("18446744073709551615"), UINT64_MAX);
    cr_assert_eq(size_of("16777215T"), (uint64_t)16777215 << 40);
}

Test(size, not_sizes)
{
    refused("chunk_size", "", "not a size");
    refused("chunk_size", "M", "not a size");
    refused("chunk_size", "-1", "not a size");
    refused("chunk_size", "+1", "not a size");
    refused("chunk_size", " 1M", "not a size");
    refused("chunk_size", "1X", "not a size");
    refused("chunk_size", "1MB", "not a size");
    refused("chunk_size", "1Mi", "not a size");
    refused("chunk_size", "1iB", "not a size");
    refused("chunk_size", "1.5M", "not a size");
    refused("chunk_size", "1M ", "not a size");
    refused("chunk_size", "1 M", "not a size");
    refused("cache_size", "lots", "powers of 1024");
}

Test(size, zero_and_too_large)
{
    refused("cache_max", "0", "must be more than 0");
    refused("cache_max", "0G", "must be more than 0");
    refused("cache_size", "18446744073709551616", "too large");
    refused("cache_size", "99999999999999999999999", "too large");
    refused("cache_size", "16777216T", "too large");
    refused("cache_size", "17179869184G", "too large");
}

Test(size, the_reason_names_the_option_given)
{
    refused("--chunk-size", "1X", "not a size");
    refused("cache_max", "1X", "not a size");
}

static void threads_refused(const char *text)
{
    unsigned threads = 77;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm_parse_threads("threads", text, &threads, &err), -EINVAL, "%s accepted", text);
    cr_assert_eq(threads, 77);
    char head[160];
    snprintf(head, sizeof head, "threads=%s: not a number of threads from 1 to %u", text,
             ZM_MAX_THREADS);
    cr_assert_str_eq(err.reason, head);
}

Test(threads, from_1_to_the_most)
{
    unsigned threads = 0;
    zm_err err;
    cr_assert_eq(zm_parse_threads("threads", "1", &threads, &err), 0);
    cr_assert_eq(threads, 1);
    cr_assert_eq(zm_parse_threads("threads", "16", &threads, &err), 0);
    cr_assert_eq(threads, 16);
    cr_assert_eq(zm_parse_threads("threads", "1024", &threads, &err), 0);
    cr_assert_eq(threads, ZM_MAX_THREADS);
    threads_refused("0");
    threads_refused("1025");
    threads_refused("");
    threads_refused("four");
    threads_refused("4x");
    threads_refused("-4");
    threads_refused("99999999999999999999999");
}

Test(defaults, what_a_mount_without_options_has)
{
    zm_config c;
    memset(&c, 0xff, sizeof c);
    zm_config_defaults(&c);
    cr_assert_eq(c.chunk_bytes, (uint64_t)1 << 20);
    cr_assert_eq(c.cache_bytes, (uint64_t)1 << 30);
    cr_assert_eq(c.cache_max, (uint64_t)4 << 30);
    cr_assert_float_eq(c.ahead_idle_seconds, 5.0, 1e-12);
    cr_assert_float_eq(c.ahead_rate, 0.0, 1e-12);
    cr_assert_null(c.codec);
    cr_assert_null(c.cache_dir);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(c.threads, cores > 1 ? (unsigned)cores : 1u);
    cr_assert_eq(zm_config_cores(), c.threads);
    cr_assert_geq(zm_config_cores(), 1u);
}

Test(defaults, unset_means_the_default)
{
    zm_config c;
    memset(&c, 0xff, sizeof c);
    zm_config_unset(&c);
    cr_assert_eq(c.chunk_bytes, 0);
    cr_assert_eq(c.cache_bytes, 0);
    cr_assert_eq(c.cache_max, 0);
    cr_assert_eq(c.threads, 0);
    cr_assert_lt(c.ahead_idle_seconds, 0);
    cr_assert_null(c.codec);
    cr_assert_null(c.cache_dir);
    zm_config resolved, defaults;
    zm_config_resolve(&c, &resolved);
    zm_config_defaults(&defaults);
    cr_assert_eq(resolved.chunk_bytes, defaults.chunk_bytes);
    cr_assert_eq(resolved.cache_bytes, defaults.cache_bytes);
    cr_assert_eq(resolved.cache_max, defaults.cache_max);
    cr_assert_eq(resolved.threads, defaults.threads);
    cr_assert_float_eq(resolved.ahead_idle_seconds, defaults.ahead_idle_seconds, 1e-12);
    cr_assert_float_eq(resolved.ahead_rate, defaults.ahead_rate, 1e-12);
    cr_assert_null(resolved.codec);
    cr_assert_null(resolved.cache_dir);
}

Test(defaults, given_values_are_kept)
{
    zm_config c;
    zm_config_unset(&c);
    c.codec = "zstd:3";
    c.cache_dir = "none";
    c.chunk_bytes = 262144;
    c.cache_bytes = (uint64_t)256 << 20;
    c.cache_max = 12345;
    c.threads = 3;
    c.ahead_idle_seconds = 0; /* off, not the default */
    c.ahead_rate = 2.5;
    zm_config_resolve(&c, &c);
    cr_assert_str_eq(c.codec, "zstd:3");
    cr_assert_str_eq(c.cache_dir, "none");
    cr_assert_eq(c.chunk_bytes, 262144);
    cr_assert_eq(c.cache_bytes, (uint64_t)256 << 20);
    cr_assert_eq(c.cache_max, 12345);
    cr_assert_eq(c.threads, 3);
    cr_assert_float_eq(c.ahead_idle_seconds, 0.0, 1e-12);
    cr_assert_float_eq(c.ahead_rate, 2.5, 1e-12);
}

Test(defaults, push_window)
{
    /* An eighth of the memory cache, at most 64 MiB. */
    cr_assert_eq(zm_config_push_window((uint64_t)1 << 30), (uint64_t)64 << 20);
    cr_assert_eq(zm_config_push_window((uint64_t)8 << 30), (uint64_t)64 << 20);
    cr_assert_eq(zm_config_push_window((uint64_t)256 << 20), (uint64_t)32 << 20);
    cr_assert_eq(zm_config_push_window(8), 1);
}
