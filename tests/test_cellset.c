/* The cell set digest, the LEB128 gap encoding and its decoder, base64. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/text.h"
#include "zarrmount/select.h"

static void expect_digest(const uint32_t *positions, uint64_t k, uint64_t n, const char *want)
{
    char digest[17];
    zm_cellset_digest(positions, k, n, digest);
    cr_expect_str_eq(digest, want);
}

/* Values from a separate Python reading of "Cell set digest". */
Test(digest, known_values)
{
    expect_digest(NULL, 0, 0, "ab3e7c0b92ca2f0e");
    expect_digest((uint32_t[]){0, 1, 2}, 3, 3, "77cbdcb9826cdac0");
    expect_digest((uint32_t[]){1, 5, 9}, 3, 10, "485e0fa8d729d543");
    expect_digest((uint32_t[]){4294967294u}, 1, 4294967295u, "3e49135fd1ca9546");
    uint32_t all[100];
    for (uint32_t i = 0; i < 100; i++)
        all[i] = i;
    expect_digest(all, 100, 100, "7fbe3479d1eae1ac");
}

/* Every cell's digest without its positions: the digest of 0 ... n - 1. */
Test(digest, every_cell_without_positions)
{
    char digest[17];
    zm_cellset_digest_all(0, digest);
    cr_expect_str_eq(digest, "ab3e7c0b92ca2f0e");
    zm_cellset_digest_all(3, digest);
    cr_expect_str_eq(digest, "77cbdcb9826cdac0");
    zm_cellset_digest_all(100, digest);
    cr_expect_str_eq(digest, "7fbe3479d1eae1ac");
    uint32_t *all = malloc(100003 * sizeof *all);
    cr_assert_not_null(all);
    for (uint32_t i = 0; i < 100003; i++)
        all[i] = i;
    char want[17];
    zm_cellset_digest(all, 100003, 100003, want);
    zm_cellset_digest_all(100003, digest);
    cr_expect_str_eq(digest, want);
    free(all);
}

static void expect_encoding(const uint32_t *positions, uint64_t k, uint64_t n,
                            const uint8_t *want, size_t want_length)
{
    uint8_t *bytes;
    size_t length;
    zm_err err;
    cr_assert_eq(zm_cellset_encode(positions, k, n, &bytes, &length, &err), 0, "%s", err.reason);
    cr_assert_eq(length, want_length);
    if (length)
        cr_expect_eq(memcmp(bytes, want, length), 0);
    uint32_t *decoded;
    uint64_t decoded_k;
    cr_assert_eq(zm_cellset_decode(bytes, length, n, &decoded, &decoded_k, &err), 0, "%s",
                 err.reason);
    cr_assert_eq(decoded_k, k);
    for (uint64_t i = 0; i < k; i++)
        cr_expect_eq(decoded[i], positions[i]);
    free(decoded);
    free(bytes);
}

Test(encoding, gaps_as_leb128)
{
    /* First gap from −1: position 0 is byte 0; 1, 5 after 0 are gaps 0, 3. */
    expect_encoding((uint32_t[]){0, 1, 5}, 3, 10, (uint8_t[]){0, 0, 3}, 3);
    /* 128 needs two bytes: 0x80 0x01. */
    expect_encoding((uint32_t[]){128}, 1, 1000, (uint8_t[]){0x80, 0x01}, 2);
    /* The largest position: 2^32 − 2 in five bytes. */
    expect_encoding((uint32_t[]){4294967294u}, 1, 4294967295u,
                    (uint8_t[]){0xfe, 0xff, 0xff, 0xff, 0x0f}, 5);
    /* Every cell is no bytes. */
    expect_encoding((uint32_t[]){0, 1, 2}, 3, 3, NULL, 0);
    /* No cell of no cells: no bytes. */
    expect_encoding(NULL, 0, 0, NULL, 0);
}

static void expect_malformed(const uint8_t *bytes, size_t length, uint64_t n, const char *why)
{
    uint32_t *positions = (uint32_t *)0x1;
    uint64_t k = 99;
    zm_err err;
    cr_expect_eq(zm_cellset_decode(bytes, length, n, &positions, &k, &err), -EINVAL, "%s", why);
    cr_expect_null(positions);
    cr_expect(strlen(err.reason) > 0);
    cr_expect(strchr(err.reason, '\n') == NULL);
}

Test(encoding, malformed_bytes_are_errors)
{
    expect_malformed((uint8_t[]){0x80}, 1, 10, "truncated varint");
    expect_malformed((uint8_t[]){0, 0xff, 0xff}, 3, 100000, "truncated after a full one");
    expect_malformed((uint8_t[]){10}, 1, 10, "position 10 of 10 cells");
    expect_malformed((uint8_t[]){0xff, 0xff, 0xff, 0xff, 0x1f}, 5, 4294967295u, "past uint32");
    expect_malformed((uint8_t[]){0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 6, 4294967295u,
                     "six bytes");
    expect_malformed((uint8_t[]){0x81, 0x00}, 2, 10, "redundant zero byte");
    expect_malformed((uint8_t[]){0, 0, 0}, 3, 3, "every cell spelled out");
    expect_malformed((uint8_t[]){5, 0xff, 0xff, 0xff, 0xff, 0x0f}, 6, 4294967295u,
                     "a later gap carries past the last position");
}

/* Every short byte string decodes or is refused; none crashes (ASan). */
Test(encoding, exhaustive_short_strings_never_crash)
{
    uint8_t bytes[3];
    for (uint32_t v = 0; v < (1u << 24); v += 7) {
        bytes[0] = (uint8_t)v;
        bytes[1] = (uint8_t)(v >> 8);
        bytes[2] = (uint8_t)(v >> 16);
        for (size_t length = 1; length <= 3; length++) {
            uint32_t *positions;
            uint64_t k;
            if (zm_cellset_decode(bytes, length, 300, &positions, &k, NULL) == 0) {
                cr_assert(k >= 1 && k <= length);
                for (uint64_t i = 1; i < k; i++)
                    cr_assert(positions[i] > positions[i - 1]);
                cr_assert(positions[k - 1] < 300);
                free(positions);
            }
        }
    }
}

Test(encoding, round_trip_random_sets)
{
    uint32_t x = 5;
    uint32_t *positions = malloc(200000 * sizeof *positions);
    for (int trial = 0; trial < 200; trial++) {
        uint64_t n = 1 + trial * 997, k = 0;
        for (uint64_t p = 0; p < n; p++) {
            x = x * 1664525u + 1013904223u;
            if ((x >> 16) % (1 + trial % 50) == 0)
                positions[k++] = (uint32_t)p;
        }
        uint8_t *bytes;
        size_t length;
        cr_assert_eq(zm_cellset_encode(positions, k, n, &bytes, &length, NULL), 0);
        uint32_t *decoded;
        uint64_t dk;
        cr_assert_eq(zm_cellset_decode(bytes, length, n, &decoded, &dk, NULL), 0);
        cr_assert_eq(dk, k);
        cr_assert_eq(memcmp(decoded, positions, k * sizeof *positions), 0);
        free(decoded);
        free(bytes);
    }
    free(positions);
}

Test(encoding, encoder_refuses_unsorted_positions)
{
    uint8_t *bytes;
    size_t length;
    zm_err err;
    cr_expect_eq(zm_cellset_encode((uint32_t[]){3, 3}, 2, 10, &bytes, &length, &err), -EINVAL);
    cr_expect_eq(zm_cellset_encode((uint32_t[]){3, 10}, 2, 10, &bytes, &length, &err), -EINVAL);
}

Test(base64, round_trip_and_rejects)
{
    const char *cases[][2] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
                              {"foob", "Zm9vYg=="}, {"\xff\xfe\x00", "//4A"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t length = i == 5 ? 3 : strlen(cases[i][0]);
        char out[16];
        zm_base64_encode((const uint8_t *)cases[i][0], length, out);
        cr_expect_str_eq(out, cases[i][1]);
        uint8_t *bytes;
        size_t decoded;
        cr_assert_eq(zm_base64_decode(out, strlen(out), &bytes, &decoded), 0);
        cr_expect_eq(decoded, length);
        cr_expect_eq(memcmp(bytes, cases[i][0], length), 0);
        free(bytes);
    }
    uint8_t *bytes;
    size_t decoded;
    cr_expect_eq(zm_base64_decode("Zg=", 3, &bytes, &decoded), -EINVAL);
    cr_expect_eq(zm_base64_decode("Z=g=", 4, &bytes, &decoded), -EINVAL);
    cr_expect_eq(zm_base64_decode("Zg*=", 4, &bytes, &decoded), -EINVAL);
    cr_expect_eq(zm_base64_decode("Zg==Zg==", 8, &bytes, &decoded), -EINVAL);
}
