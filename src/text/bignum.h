/* Internal to the library (the text and select modules): a small unsigned
 * big integer for the exact decimal arithmetic of shares (select/share.c)
 * and of shortest decimals (text/decimal.c).
 *
 * A zm__big holds a fixed number of 32-bit limbs, least significant first, so
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
#ifndef ZARRMOUNT_TEXT_BIGNUM_H
#define ZARRMOUNT_TEXT_BIGNUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZM__BIG_LIMBS 160 /* 5120 bits */

typedef struct zm__big {
    size_t len;
    uint32_t limb[ZM__BIG_LIMBS];
} zm__big;

/* a = v. */
void zm__big_set_u64(zm__big *a, uint64_t v);

/* a = v, or -ERANGE when a is 2^64 or more. */
int zm__big_to_u64(const zm__big *a, uint64_t *v);

bool zm__big_is_zero(const zm__big *a);

/* The number of bits of a: 0 for zero, else floor(log2 a) + 1. */
size_t zm__big_bit_length(const zm__big *a);

/* -1, 0 or 1 as a < b, a == b, a > b. */
int zm__big_cmp(const zm__big *a, const zm__big *b);

/* a = a · m. */
int zm__big_mul_u64(zm__big *a, uint64_t m);

/* a = a + v. */
int zm__big_add_u64(zm__big *a, uint64_t v);

/* a = a · 10^e. */
int zm__big_mul_pow10(zm__big *a, unsigned e);

/* a = a · 2^e. */
int zm__big_shl(zm__big *a, unsigned e);

/* a = a + b. */
int zm__big_add(zm__big *a, const zm__big *b);

/* a = a − b; -EDOM (a untouched) when b > a. */
int zm__big_sub(zm__big *a, const zm__big *b);

/* q = floor(a / b) and r = a − q·b (Knuth's algorithm D). Either output may
 * be NULL; neither may alias a or b. -EDOM when b is zero. */
int zm__big_divmod(const zm__big *a, const zm__big *b, zm__big *q, zm__big *r);

#endif
