/* The shared conformance fixture, written by the plain-Python reading of the
 * spec (scripts/generate-subsample-conformance.py), checked case by case
 * through the library and through the select command's parser and writer.
 * The fixture is pinned by SHA-256: changing the spec's reading means
 * regenerating it and updating the pin here. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/text.h"
#include "zarrmount/cli.h"
#include "zarrmount/select.h"

#define CONFORMANCE_SHA256 "61244ef36de70d77f7fcf0b5741d4f5af53a658063628ab96ab3210c89b6fe7d"

static json_t *fixture;

static char *read_file(const char *path, size_t *length)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    text[size] = '\0';
    fclose(f);
    *length = (size_t)size;
    return text;
}

static void load_fixture(void)
{
    const char *dir = getenv("ZM_FIXTURES_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/subsample_conformance.json", dir ? dir : "fixtures");
    size_t length;
    char *text = read_file(path, &length);

    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, length, (const uint8_t *)text);
    sha256_digest(&ctx, sizeof digest, digest);
    char hex[2 * SHA256_DIGEST_SIZE + 1];
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    cr_assert_str_eq(hex, CONFORMANCE_SHA256,
                     "%s changed: regenerate it with scripts/generate-subsample-conformance.py "
                     "and update the pin in tests/test_conformance.c", path);

    json_error_t error;
    fixture = json_loadb(text, length, 0, &error);
    free(text);
    cr_assert_not_null(fixture, "fixture is not JSON: %s", error.text);
    cr_assert_eq(json_integer_value(json_object_get(fixture, "specVersion")), ZM_SPEC_VERSION);
}

static void free_fixture(void) { json_decref(fixture); }

TestSuite(conformance, .init = load_fixture, .fini = free_fixture);

static json_t *section(const char *name)
{
    json_t *list = json_object_get(fixture, name);
    cr_assert(json_is_array(list) && json_array_size(list) > 0, "fixture has no %s", name);
    return list;
}

Test(conformance, fmix32_seed_key_rank)
{
    size_t i;
    json_t *row;
    json_array_foreach(section("fmix32"), i, row) {
        uint32_t h = (uint32_t)json_integer_value(json_array_get(row, 0));
        cr_expect_eq(zm_fmix32(h), (uint32_t)json_integer_value(json_array_get(row, 1)),
                     "fmix32(%u)", h);
    }
    json_array_foreach(section("seedKey"), i, row) {
        uint32_t s = (uint32_t)json_integer_value(json_array_get(row, 0));
        cr_expect_eq(zm_seed_key(s), (uint32_t)json_integer_value(json_array_get(row, 1)),
                     "seedKey(%u)", s);
    }
    json_array_foreach(section("rank"), i, row) {
        uint32_t s = (uint32_t)json_integer_value(json_array_get(row, 0));
        uint32_t p = (uint32_t)json_integer_value(json_array_get(row, 1));
        cr_expect_eq(zm_rank(s, p), (uint32_t)json_integer_value(json_array_get(row, 2)),
                     "rank(%u, %u)", s, p);
    }
}

static double double_from_hex(const char *hex)
{
    uint64_t bits = strtoull(hex, NULL, 16);
    double x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

Test(conformance, shares)
{
    size_t i;
    json_t *row;
    json_array_foreach(section("shares"), i, row) {
        const char *kind_name = json_string_value(json_object_get(row, "kind"));
        zm_share_kind kind = strcmp(kind_name, "percent") == 0 ? ZM_SHARE_PERCENT : ZM_SHARE_FRACTION;
        uint64_t n = (uint64_t)json_integer_value(json_object_get(row, "n"));
        json_t *text = json_object_get(row, "text");
        json_t *bits = json_object_get(row, "binary64");
        json_t *refused = json_object_get(row, "refused");
        uint64_t k = 0;
        zm_err err;
        zm_err_clear(&err);
        int rc;
        if (bits != NULL) {
            double x = double_from_hex(json_string_value(bits));
            const char *shortest = json_string_value(json_object_get(row, "shortest"));
            char buffer[32];
            cr_expect_gt(zm_shortest_decimal(x, buffer, sizeof buffer), 0);
            cr_expect_str_eq(buffer, shortest, "shortest decimal of %s", json_string_value(bits));
            double back;
            cr_expect_eq(zm_decimal_to_binary64(shortest, &back, NULL), 0);
            cr_expect_eq(memcmp(&back, &x, sizeof x), 0, "%s reads back", shortest);
            rc = zm_size_from_binary64(x, kind, n, &k, &err);
        } else {
            rc = zm_size_from_text(json_string_value(text), kind, n, &k, &err);
        }
        const char *what = bits ? json_string_value(json_object_get(row, "shortest"))
                                : json_string_value(text);
        if (refused != NULL) {
            cr_expect_eq(rc, -EINVAL, "%s %s of %llu should be refused (%s)", kind_name, what,
                         (unsigned long long)n, json_string_value(refused));
            cr_expect(strlen(err.reason) > 0);
        } else {
            cr_expect_eq(rc, 0, "%s %s: %s", kind_name, what, err.reason);
            uint64_t want = (uint64_t)json_integer_value(json_object_get(row, "k"));
            cr_expect_eq(k, want, "%s %s of %llu cells: k = %llu, want %llu", kind_name, what,
                         (unsigned long long)n, (unsigned long long)k, (unsigned long long)want);
        }
    }
}

static uint32_t *positions_of(json_t *list, uint64_t *k)
{
    *k = json_array_size(list);
    uint32_t *positions = malloc((*k ? *k : 1) * sizeof *positions);
    for (uint64_t i = 0; i < *k; i++)
        positions[i] = (uint32_t)json_integer_value(json_array_get(list, i));
    return positions;
}

Test(conformance, digests_and_encodings)
{
    size_t i;
    json_t *row;
    json_array_foreach(section("digests"), i, row) {
        uint64_t k, n = (uint64_t)json_integer_value(json_object_get(row, "n"));
        uint32_t *positions = positions_of(json_object_get(row, "positions"), &k);
        char digest[17];
        zm_cellset_digest(positions, k, n, digest);
        cr_expect_str_eq(digest, json_string_value(json_object_get(row, "digest")));
        free(positions);
    }
    json_array_foreach(section("encodings"), i, row) {
        uint64_t k, n = (uint64_t)json_integer_value(json_object_get(row, "n"));
        uint32_t *positions = positions_of(json_object_get(row, "positions"), &k);
        uint8_t *bytes;
        size_t length;
        cr_assert_eq(zm_cellset_encode(positions, k, n, &bytes, &length, NULL), 0);
        char *text = malloc(zm_base64_length(length) + 1);
        zm_base64_encode(bytes, length, text);
        cr_expect_str_eq(text, json_string_value(json_object_get(row, "kept")));
        uint32_t *decoded;
        uint64_t dk;
        cr_assert_eq(zm_cellset_decode(bytes, length, n, &decoded, &dk, NULL), 0);
        cr_expect_eq(dk, k);
        cr_expect(dk == 0 || memcmp(decoded, positions, k * sizeof *positions) == 0);
        free(decoded);
        free(text);
        free(bytes);
        free(positions);
    }
    json_array_foreach(section("malformedEncodings"), i, row) {
        uint64_t n = (uint64_t)json_integer_value(json_object_get(row, "n"));
        const char *kept = json_string_value(json_object_get(row, "kept"));
        uint8_t *bytes;
        size_t length;
        cr_assert_eq(zm_base64_decode(kept, strlen(kept), &bytes, &length), 0);
        uint32_t *decoded;
        uint64_t dk;
        zm_err err;
        cr_expect_eq(zm_cellset_decode(bytes, length, n, &decoded, &dk, &err), -EINVAL,
                     "malformed %s (%s) was accepted", kept,
                     json_string_value(json_object_get(row, "why")));
        free(bytes);
    }
}

/* Runs one case through the command's parser and writer, in memory. */
static void check_case(json_t *c)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    json_t *request = json_object_get(c, "request");
    json_t *expect = json_object_get(c, "expect");
    json_t *refused = json_object_get(c, "refused");

    zm_select_command command;
    zm_err err;
    zm_err_clear(&err);
    char *text = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&text, &length);
    int rc = zm_select_command_parse(request, &command, &err);
    if (rc == 0)
        rc = zm_select_command_run(&command, out, &err);
    zm_select_command_free(&command);
    fclose(out);

    if (refused != NULL) {
        cr_expect_eq(rc, -EINVAL, "case \"%s\" should be refused (%s)", name,
                     json_string_value(refused));
        cr_expect(rc == 0 || (strlen(err.reason) > 0 && strchr(err.reason, '\n') == NULL),
                  "case \"%s\": a refusal needs a one-line reason", name);
    } else {
        cr_expect_eq(rc, 0, "case \"%s\" failed: %s", name, err.reason);
        if (rc == 0) {
            json_error_t error;
            json_t *got = json_loads(text, 0, &error);
            cr_expect_not_null(got, "case \"%s\": output is not JSON: %s", name, error.text);
            int same = json_equal(got, expect);
            if (!same) {
                char *want = json_dumps(expect, JSON_COMPACT);
                cr_expect(same, "case \"%s\":\n got  %.600s\n want %.600s", name, text, want);
                free(want);
            }
            json_decref(got);
        }
    }
    free(text);
}

Test(conformance, every_case_through_the_library)
{
    size_t i;
    json_t *c;
    json_array_foreach(section("cases"), i, c)
        check_case(c);
}
