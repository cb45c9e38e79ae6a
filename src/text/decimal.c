/* The shortest round-trip decimal of a binary64 number (spec: "Size from a
 * share"; see zarrmount/text.h).
 *
 * Exact integer arithmetic on zm_big, derived from the exact value rather
 * than borrowed from the C library, so that the same number gives the same
 * text on every machine and every libc: a share's text (select) and a
 * number in a Zarr document (zarr) are written by this one function.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "zarrmount/text.h"

/* ---- binary64 to shortest decimal ----------------------------------------- */

static const uint64_t pow10_u64[18] = {
    1ull,
    10ull,
    100ull,
    1000ull,
    10000ull,
    100000ull,
    1000000ull,
    10000000ull,
    100000000ull,
    1000000000ull,
    10000000000ull,
    100000000000ull,
    1000000000000ull,
    10000000000000ull,
    100000000000000ull,
    1000000000000000ull,
    10000000000000000ull,
    100000000000000000ull,
};

/* num / den = m · 2^e / 10^t exactly. */
static int scaled(uint64_t m, int e, int t, zm_big *num, zm_big *den)
{
    zm_big_set_u64(num, m);
    zm_big_set_u64(den, 1);
    int rc = e >= 0 ? zm_big_shl(num, (unsigned)e) : zm_big_shl(den, (unsigned)-e);
    if (rc == 0)
        rc = t >= 0 ? zm_big_mul_pow10(den, (unsigned)t) : zm_big_mul_pow10(num, (unsigned)-t);
    return rc;
}

/* The 17 leading decimal digits of x = m · 2^e: *q = floor(x / 10^t) with
 * t = leading − 16, so 10^16 ≤ q < 10^17, *leading the exponent of x's
 * first digit, and num / den = x / 10^t with remainder r = num − q·den. */
static int seventeen_digits(uint64_t m, int e, uint64_t *q, int *leading, zm_big *num,
                            zm_big *den, zm_big *r)
{
    /* 2^b ≤ x < 2^(b+1) puts x's first digit at floor(b·log10 2) or one
     * above; 30103/100000 is close enough that the estimate is off by at most
     * one, and the exact check below corrects it. */
    int b = e + zm_bit_length_u64(m) - 1;
    int64_t scaled_b = (int64_t)b * 30103;
    int estimate = (int)(scaled_b >= 0 ? scaled_b / 100000 : -((-scaled_b + 99999) / 100000));
    for (int attempt = 0; attempt < 4; attempt++) {
        zm_big quotient;
        int rc = scaled(m, e, estimate - 16, num, den);
        if (rc == 0)
            rc = zm_big_divmod(num, den, &quotient, r);
        if (rc != 0)
            return rc;
        uint64_t value;
        if (zm_big_to_u64(&quotient, &value) != 0 || value >= pow10_u64[17]) {
            estimate++;
        } else if (value < pow10_u64[16]) {
            estimate--;
        } else {
            *q = value;
            *leading = estimate;
            return 0;
        }
    }
    return -ERANGE;
}

/* Whether a candidate distance·10^t/den from x stays inside x's rounding
 * interval, whose half-width on that side is 2^(e−j): distance/den ≤
 * 2^(e−j)/10^t = (num/den) / (m·2^j), that is distance · m · 2^j ≤ num,
 * with equality allowed only when m is even (a midpoint reads back as the
 * even significand). */
static int within_interval(const zm_big *distance, uint64_t m, unsigned j, const zm_big *num,
                           bool *inside)
{
    zm_big scaled_distance = *distance;
    int rc = zm_big_mul_u64(&scaled_distance, m << j);
    if (rc != 0)
        return rc;
    int cmp = zm_big_cmp(&scaled_distance, num);
    *inside = cmp < 0 || (cmp == 0 && m % 2 == 0);
    return 0;
}

/* The shortest round-trip digits of x = m · 2^e (m > 0): *digits with
 * *count digits (no trailing zeros), the first of place value 10^*leading.
 * below_half_gap_shift is j of the interval's lower half-width 2^(e−j): 1,
 * or 2 when x is a power of two whose predecessor is half as far. */
static int shortest_digits(uint64_t m, int e, unsigned below_half_gap_shift, uint64_t *digits,
                           int *count, int *leading)
{
    zm_big num, den, r;
    uint64_t q = 0;
    int first = 0;
    int rc = seventeen_digits(m, e, &q, &first, &num, &den, &r);
    if (rc != 0)
        return rc;

    for (int p = 1; p <= 17; p++) {
        /* At p digits the candidates are floor(x / 10^(t+s)) and the next
         * integer, s = 17 − p; floor's distance from x, in units of
         * 10^t / den, is (q mod 10^s)·den + r, and ceil's is 10^s·den minus
         * that. */
        unsigned s = 17 - (unsigned)p;
        uint64_t low = q / pow10_u64[s];
        zm_big below = den, grid = den;
        rc = zm_big_mul_u64(&below, q % pow10_u64[s]);
        if (rc == 0)
            rc = zm_big_add(&below, &r);
        if (rc == 0)
            rc = zm_big_mul_u64(&grid, pow10_u64[s]);
        if (rc != 0)
            return rc;

        uint64_t chosen;
        if (zm_big_is_zero(&below)) {
            chosen = low; /* x itself has p digits */
        } else {
            zm_big above = grid;
            bool low_inside, high_inside;
            rc = zm_big_sub(&above, &below);
            if (rc == 0)
                rc = within_interval(&below, m, below_half_gap_shift, &num, &low_inside);
            if (rc == 0)
                rc = within_interval(&above, m, 1, &num, &high_inside);
            if (rc != 0)
                return rc;
            if (!low_inside && !high_inside)
                continue;
            if (low_inside && high_inside) {
                /* Both read back as x: the nearer, the even one on a tie. */
                zm_big twice_below = below;
                rc = zm_big_shl(&twice_below, 1);
                if (rc != 0)
                    return rc;
                int cmp = zm_big_cmp(&twice_below, &grid);
                chosen = cmp < 0 ? low : cmp > 0 ? low + 1 : low + (low % 2);
            } else {
                chosen = low_inside ? low : low + 1;
            }
        }

        /* chosen may be 10^p (x rounded up to the next power of ten); its
         * first digit is then one place higher. */
        int n = 0;
        for (uint64_t v = chosen; v != 0; v /= 10)
            n++;
        *leading = first - p + n;
        while (chosen % 10 == 0) {
            chosen /= 10;
            n--;
        }
        *digits = chosen;
        *count = n;
        return 0;
    }
    return -ERANGE; /* 17 digits always round-trip; unreachable */
}

/* Writes digits in Python repr's layout: positional when the first digit's
 * exponent is in [-4, 16), else scientific with a two-digit-minimum
 * exponent. Returns the length; out has room for 32 bytes. */
static int format_repr(bool negative, uint64_t digits, int count, int leading, char *out)
{
    char d[20];
    for (int i = count; i-- > 0; digits /= 10)
        d[i] = (char)('0' + digits % 10);

    int len = 0;
    if (negative)
        out[len++] = '-';
    if (leading < -4 || leading >= 16) {
        out[len++] = d[0];
        if (count > 1) {
            out[len++] = '.';
            for (int i = 1; i < count; i++)
                out[len++] = d[i];
        }
        out[len++] = 'e';
        out[len++] = leading < 0 ? '-' : '+';
        unsigned magnitude = (unsigned)(leading < 0 ? -leading : leading);
        char e[4];
        int e_len = 0;
        do {
            e[e_len++] = (char)('0' + magnitude % 10);
            magnitude /= 10;
        } while (magnitude != 0);
        if (e_len < 2)
            e[e_len++] = '0';
        while (e_len > 0)
            out[len++] = e[--e_len];
    } else if (leading >= 0) {
        for (int i = 0; i <= leading; i++)
            out[len++] = i < count ? d[i] : '0';
        out[len++] = '.';
        if (count > leading + 1)
            for (int i = leading + 1; i < count; i++)
                out[len++] = d[i];
        else
            out[len++] = '0';
    } else {
        out[len++] = '0';
        out[len++] = '.';
        for (int i = -1; i > leading; i--)
            out[len++] = '0';
        for (int i = 0; i < count; i++)
            out[len++] = d[i];
    }
    out[len] = '\0';
    return len;
}

int zm_shortest_decimal(double x, char *buf, size_t cap)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    bool negative = (bits >> 63) != 0;
    unsigned biased = (unsigned)(bits >> 52) & 0x7ff;
    uint64_t fraction = bits & ((1ull << 52) - 1);
    if (biased == 0x7ff)
        return -EINVAL;

    char text[32];
    int len;
    if (biased == 0 && fraction == 0) {
        len = format_repr(negative, 0, 1, 0, text);
    } else {
        /* x = m · 2^e exactly. Its neighbours are 2^e away, except below the
         * smallest significand of a binade above the first, where the
         * predecessor is only 2^(e−1) away and the interval's lower half is
         * half as wide. */
        uint64_t m = biased == 0 ? fraction : fraction | (1ull << 52);
        int e = biased == 0 ? -1074 : (int)biased - 1075;
        unsigned below_half_gap_shift = (fraction == 0 && biased > 1) ? 2 : 1;
        uint64_t digits;
        int count, leading;
        if (shortest_digits(m, e, below_half_gap_shift, &digits, &count, &leading) != 0)
            return -ERANGE; /* the bounds in zarrmount/text.h make this unreachable */
        len = format_repr(negative, digits, count, leading, text);
    }
    if ((size_t)len + 1 > cap) {
        if (cap > 0)
            buf[0] = '\0';
        return -ERANGE;
    }
    memcpy(buf, text, (size_t)len + 1);
    return len;
}
