/* A small fixed-capacity unsigned big integer (see zarrmount/text.h). */
#include "zarrmount/text.h"

#include <errno.h>
#include <string.h>

/* Drops leading zero limbs so that len names the top non-zero limb. */
static void normalise(zm_big *a)
{
    while (a->len > 0 && a->limb[a->len - 1] == 0)
        a->len--;
}

void zm_big_set_u64(zm_big *a, uint64_t v)
{
    a->limb[0] = (uint32_t)v;
    a->limb[1] = (uint32_t)(v >> 32);
    a->len = 2;
    normalise(a);
}

int zm_big_to_u64(const zm_big *a, uint64_t *v)
{
    if (a->len > 2)
        return -ERANGE;
    uint64_t value = 0;
    for (size_t i = a->len; i-- > 0;)
        value = (value << 32) | a->limb[i];
    *v = value;
    return 0;
}

bool zm_big_is_zero(const zm_big *a) { return a->len == 0; }

int zm_bit_length_u64(uint64_t v)
{
    int bits = 0;
    for (; v != 0; v >>= 1)
        bits++;
    return bits;
}

size_t zm_big_bit_length(const zm_big *a)
{
    if (a->len == 0)
        return 0;
    uint32_t top = a->limb[a->len - 1];
    size_t bits = 0;
    while (top != 0) {
        bits++;
        top >>= 1;
    }
    return (a->len - 1) * 32 + bits;
}

int zm_big_cmp(const zm_big *a, const zm_big *b)
{
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    for (size_t i = a->len; i-- > 0;)
        if (a->limb[i] != b->limb[i])
            return a->limb[i] < b->limb[i] ? -1 : 1;
    return 0;
}

/* a = a · m for one limb m: the building block of the multiplications. */
static int mul_u32(zm_big *a, uint32_t m)
{
    uint64_t carry = 0;
    for (size_t i = 0; i < a->len; i++) {
        uint64_t product = (uint64_t)a->limb[i] * m + carry;
        a->limb[i] = (uint32_t)product;
        carry = product >> 32;
    }
    if (carry != 0) {
        if (a->len == ZM_BIG_LIMBS)
            return -ERANGE;
        a->limb[a->len++] = (uint32_t)carry;
    }
    normalise(a); /* m may be zero */
    return 0;
}

int zm_big_mul_u64(zm_big *a, uint64_t m)
{
    if ((m >> 32) == 0)
        return mul_u32(a, (uint32_t)m);
    /* a · m = a · lo + (a · hi) · 2^32: two one-limb products and a sum. */
    zm_big high = *a;
    int rc = mul_u32(&high, (uint32_t)(m >> 32));
    if (rc == 0)
        rc = zm_big_shl(&high, 32);
    if (rc == 0)
        rc = mul_u32(a, (uint32_t)m);
    if (rc == 0)
        rc = zm_big_add(a, &high);
    return rc;
}

int zm_big_add_u64(zm_big *a, uint64_t v)
{
    zm_big b;
    zm_big_set_u64(&b, v);
    return zm_big_add(a, &b);
}

int zm_big_mul_pow10(zm_big *a, unsigned e)
{
    /* 10^9 is the largest power of ten in one limb, so nine digits a pass. */
    static const uint32_t pow10[10] = {1,      10,      100,      1000,      10000,
                                       100000, 1000000, 10000000, 100000000, 1000000000};
    if (a->len == 0)
        return 0;
    while (e >= 9) {
        int rc = mul_u32(a, pow10[9]);
        if (rc != 0)
            return rc;
        e -= 9;
    }
    return e == 0 ? 0 : mul_u32(a, pow10[e]);
}

int zm_big_shl(zm_big *a, unsigned e)
{
    if (a->len == 0)
        return 0;
    size_t limbs = e / 32;
    unsigned bits = e % 32;
    /* One limb more than the shifted length holds the bits pushed out of the top. */
    if (limbs >= ZM_BIG_LIMBS || a->len + limbs > ZM_BIG_LIMBS)
        return -ERANGE;
    size_t len = a->len + limbs;
    uint32_t spill = bits == 0 ? 0 : a->limb[a->len - 1] >> (32 - bits);
    if (spill != 0 && len == ZM_BIG_LIMBS)
        return -ERANGE;
    if (spill != 0)
        a->limb[len] = spill;
    for (size_t i = a->len; i-- > 0;) {
        uint32_t low = (bits == 0 || i == 0) ? 0 : a->limb[i - 1] >> (32 - bits);
        a->limb[i + limbs] = (a->limb[i] << bits) | low;
    }
    memset(a->limb, 0, limbs * sizeof a->limb[0]);
    a->len = len + (spill != 0);
    return 0;
}

int zm_big_add(zm_big *a, const zm_big *b)
{
    size_t len = a->len > b->len ? a->len : b->len;
    uint64_t carry = 0;
    for (size_t i = 0; i < len; i++) {
        uint64_t sum = carry;
        if (i < a->len)
            sum += a->limb[i];
        if (i < b->len)
            sum += b->limb[i];
        a->limb[i] = (uint32_t)sum;
        carry = sum >> 32;
    }
    a->len = len;
    if (carry != 0) {
        if (len == ZM_BIG_LIMBS)
            return -ERANGE;
        a->limb[a->len++] = (uint32_t)carry;
    }
    return 0;
}

int zm_big_sub(zm_big *a, const zm_big *b)
{
    if (zm_big_cmp(a, b) < 0)
        return -EDOM;
    uint32_t borrow = 0;
    for (size_t i = 0; i < a->len; i++) {
        uint64_t subtrahend = (uint64_t)(i < b->len ? b->limb[i] : 0) + borrow;
        borrow = a->limb[i] < subtrahend;
        a->limb[i] = (uint32_t)((uint64_t)a->limb[i] - subtrahend);
    }
    normalise(a);
    return 0;
}

/* Division by a one-limb divisor: the schoolbook short division. */
static void divmod_u32(const zm_big *a, uint32_t d, zm_big *q, zm_big *r)
{
    uint64_t rest = 0;
    zm_big quotient = {0};
    quotient.len = a->len;
    for (size_t i = a->len; i-- > 0;) {
        uint64_t part = (rest << 32) | a->limb[i];
        quotient.limb[i] = (uint32_t)(part / d);
        rest = part % d;
    }
    normalise(&quotient);
    if (q != NULL)
        *q = quotient;
    if (r != NULL)
        zm_big_set_u64(r, rest);
}

static unsigned leading_zeros32(uint32_t x)
{
    unsigned n = 0;
    while ((x & 0x80000000u) == 0) {
        x <<= 1;
        n++;
    }
    return n;
}

int zm_big_divmod(const zm_big *a, const zm_big *b, zm_big *q, zm_big *r)
{
    if (b->len == 0)
        return -EDOM;
    if (zm_big_cmp(a, b) < 0) {
        if (r != NULL)
            *r = *a;
        if (q != NULL)
            q->len = 0;
        return 0;
    }
    if (b->len == 1) {
        divmod_u32(a, b->limb[0], q, r);
        return 0;
    }

    /* Knuth, TAOCP vol. 2, 4.3.1, algorithm D, in the form of Hacker's
     * Delight's divmnu: normalise so the divisor's top limb has its high bit
     * set, which makes each estimated quotient limb at most two too large. */
    const size_t n = b->len, m = a->len;
    const unsigned shift = leading_zeros32(b->limb[n - 1]);
    uint32_t v[ZM_BIG_LIMBS];
    uint32_t u[ZM_BIG_LIMBS + 1];
    for (size_t i = n; i-- > 0;)
        v[i] = (b->limb[i] << shift) | (shift == 0 || i == 0 ? 0 : b->limb[i - 1] >> (32 - shift));
    u[m] = shift == 0 ? 0 : a->limb[m - 1] >> (32 - shift);
    for (size_t i = m; i-- > 0;)
        u[i] = (a->limb[i] << shift) | (shift == 0 || i == 0 ? 0 : a->limb[i - 1] >> (32 - shift));

    zm_big quotient = {0};
    quotient.len = m - n + 1;
    const uint64_t base = 1ull << 32;
    for (size_t j = m - n + 1; j-- > 0;) {
        /* Estimate the quotient limb from the top two limbs of the running
         * remainder and the top limb of the divisor, then refine it with the
         * divisor's second limb; after that it is exact or one too large. */
        uint64_t top = ((uint64_t)u[j + n] << 32) | u[j + n - 1];
        uint64_t qhat = top / v[n - 1];
        uint64_t rhat = top % v[n - 1];
        while (qhat >= base || qhat * v[n - 2] > ((rhat << 32) | u[j + n - 2])) {
            qhat--;
            rhat += v[n - 1];
            if (rhat >= base)
                break;
        }

        /* Subtract qhat times the divisor from the remainder's window. */
        uint64_t carry = 0;
        uint32_t borrow = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t product = qhat * v[i] + carry;
            carry = product >> 32;
            uint64_t subtrahend = (uint64_t)(uint32_t)product + borrow;
            borrow = u[i + j] < subtrahend;
            u[i + j] = (uint32_t)((uint64_t)u[i + j] - subtrahend);
        }
        uint64_t subtrahend = carry + borrow;
        bool negative = u[j + n] < subtrahend;
        u[j + n] = (uint32_t)((uint64_t)u[j + n] - subtrahend);

        /* Rarely qhat was still one too large: add the divisor back once. */
        if (negative) {
            qhat--;
            uint64_t sum_carry = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t sum = (uint64_t)u[i + j] + v[i] + sum_carry;
                u[i + j] = (uint32_t)sum;
                sum_carry = sum >> 32;
            }
            u[j + n] = (uint32_t)(u[j + n] + sum_carry);
        }
        quotient.limb[j] = (uint32_t)qhat;
    }
    normalise(&quotient);

    if (r != NULL) {
        /* The remainder is the low n limbs of u, shifted back. */
        r->len = n;
        for (size_t i = 0; i < n; i++)
            r->limb[i] = (u[i] >> shift) | (shift == 0 ? 0 : u[i + 1] << (32 - shift));
        normalise(r);
    }
    if (q != NULL)
        *q = quotient;
    return 0;
}
