/* zarrmount text: the few text functions the other modules share, below
 * all of them (select writes a share's text with them, zarr a document's
 * numbers, the tree a path in JSON). Depends on nothing but the C library.
 */
#ifndef ZARRMOUNT_TEXT_H
#define ZARRMOUNT_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes the shortest round-trip decimal of a finite x into buf: the fewest
 * significant digits whose text reads back as x under correctly rounded
 * conversion, and among those the nearest to x, the one with the even last
 * digit when two are as near (JavaScript String(x), Python repr(x) digits).
 * Format: Python repr style ("0.35", "5.960464477539063e-08", "1e+22", "-0.0").
 * Returns the length written, or -EINVAL for a non-finite x, -ERANGE if buf
 * (cap bytes, NUL included) is too small; 32 bytes always suffice. */
int zm_shortest_decimal(double x, char *buf, size_t cap);

/* Copies text into out (size bytes, size >= 1) as valid UTF-8, which JSON
 * needs (jansson refuses anything else): a path is whatever bytes a caller
 * chose. A byte that starts no valid sequence becomes '?'; a sequence that
 * does not fit whole is cut off. */
void zm_text_utf8_copy(char *out, size_t size, const char *text);

/* A small unsigned big integer for the exact decimal arithmetic of shares (select/share.c)
 * and of shortest decimals (text/decimal.c).
 *
 * A zm_big holds a fixed number of 32-bit limbs, least significant first, so
 * no operation allocates and none can run out of memory. The capacity bounds
 * every number the share code builds: a size from a share of at most 1000
 * characters of text needs below 3,600 bits (10^1040 · 2^66), and binary64
 * conversion keeps at most 801 significant decimal digits and scales them by
 * at most 10^1125 · 2^56, below 3,900 bits. An operation whose result would
 * not fit returns -ERANGE and leaves its target unspecified; with these bounds
 * that never happens, but a bug would be reported rather than write past the
 * array.
 *
 * Every value is kept normalised: len is the number of limbs in use and the
 * top one is non-zero (zero has len 0).
 */
#define ZM_BIG_LIMBS 160 /* 5120 bits */

typedef struct zm_big {
    size_t len;
    uint32_t limb[ZM_BIG_LIMBS];
} zm_big;

/* a = v. */
void zm_big_set_u64(zm_big *a, uint64_t v);

/* a = v, or -ERANGE when a is 2^64 or more. */
int zm_big_to_u64(const zm_big *a, uint64_t *v);

bool zm_big_is_zero(const zm_big *a);

/* The number of bits of a: 0 for zero, else floor(log2 a) + 1. */
size_t zm_big_bit_length(const zm_big *a);

/* floor(log2 v) + 1 for v > 0 (0 for 0). */
int zm_bit_length_u64(uint64_t v);

/* -1, 0 or 1 as a < b, a == b, a > b. */
int zm_big_cmp(const zm_big *a, const zm_big *b);

/* a = a · m. */
int zm_big_mul_u64(zm_big *a, uint64_t m);

/* a = a + v. */
int zm_big_add_u64(zm_big *a, uint64_t v);

/* a = a · 10^e. */
int zm_big_mul_pow10(zm_big *a, unsigned e);

/* a = a · 2^e. */
int zm_big_shl(zm_big *a, unsigned e);

/* a = a + b. */
int zm_big_add(zm_big *a, const zm_big *b);

/* a = a − b; -EDOM (a untouched) when b > a. */
int zm_big_sub(zm_big *a, const zm_big *b);

/* q = floor(a / b) and r = a − q·b (Knuth's algorithm D). Either output may
 * be NULL; neither may alias a or b. -EDOM when b is zero. */
int zm_big_divmod(const zm_big *a, const zm_big *b, zm_big *q, zm_big *r);

/* ---- Base64 (RFC 4648, with padding): cell set bytes in JSON ---------------- */

/* Length of the encoding of length bytes, without the NUL. */
size_t zm_base64_length(size_t length);
/* Writes the encoding and a NUL into out (zm_base64_length + 1 bytes). */
void zm_base64_encode(const uint8_t *bytes, size_t length, char *out);
/* Decodes text (padding required, no whitespace); *bytes is malloc'd.
 * Returns 0 or -EINVAL for text that is not base64, -ENOMEM. */
int zm_base64_decode(const char *text, size_t text_length, uint8_t **bytes, size_t *length);

#endif
