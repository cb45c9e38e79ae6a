/* Size from a share, and the exact decimal <-> binary64 conversions it rests
 * on (spec: "Size from a share").
 *
 * Everything here is exact integer arithmetic on zm_big: a share's size is
 * computed from the rational its decimal text names, never from a binary64
 * product, and the two conversions between decimal text and binary64 are
 * derived from the exact values rather than borrowed from the C library, so
 * the same text gives the same size on every machine and every libc.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "zarrmount/text.h"
#include "zarrmount/select.h"

/* The longest share text accepted, in characters. */
#define ZM__SHARE_TEXT_MAX 1000

/* A share below 10^-40 is below 10^-20 / n for every n < 2^64 (< 1.9·10^19),
 * so n·share + 1/2 < 1 and the formula gives k = 1: no bignum needed. */
#define ZM__SHARE_NEGLIGIBLE_LEADING (-40)

/* Exponent digits past this magnitude cannot change a result (a text shorter
 * than 10^15 characters with a larger exponent is far outside every range
 * this file handles), so parsing stops growing the exponent there and int64_t
 * arithmetic on it cannot overflow. */
#define ZM__EXPONENT_CLAMP 1000000000000000LL /* 10^15 */

/* Significant digits kept when reading text as binary64. The exact midpoint
 * between two adjacent doubles has at most 767 significant digits, so a
 * decimal cut to 800 digits, with one non-zero digit appended when anything
 * non-zero was cut, lies on the same side of every midpoint and every double
 * as the full text: it rounds the same. */
#define ZM__BINARY64_DIGITS_KEPT 800

/* A decimal number as parsed: the value is ±D · 10^exponent, D the integer
 * written by the significant digits (the first non-zero digit through the
 * last non-zero one, the point skipped). */
typedef struct zm__decimal {
    bool negative;
    const char *first; /* the first significant digit, NULL for zero */
    const char *end;   /* one past the mantissa's last character */
    uint64_t digits;   /* significant digits, 0 for zero */
    int64_t exponent;  /* of D's last digit */
    int64_t leading;   /* of D's first digit: 10^leading ≤ |value| < 10^(leading+1) */
} zm__decimal;

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Parses the grammar sign? (digits ('.' digits?)? | '.' digits) ([eE] sign?
 * digits)? with nothing before or after; false when text does not match. */
static bool parse_decimal(const char *text, zm__decimal *d)
{
    const char *p = text;
    d->negative = false;
    if (*p == '+' || *p == '-')
        d->negative = *p++ == '-';

    /* Digits are numbered from 0 in reading order; the integer part's
     * digits come first, so digit i has the place value 10^(integer_digits
     * − 1 − i) before the exponent is applied. */
    int64_t total = 0, integer_digits = -1, first = -1, last = -1;
    const char *first_char = NULL;
    for (;; p++) {
        if (is_digit(*p)) {
            if (*p != '0') {
                if (first < 0) {
                    first = total;
                    first_char = p;
                }
                last = total;
            }
            total++;
        } else if (*p == '.' && integer_digits < 0) {
            integer_digits = total;
        } else {
            break;
        }
    }
    if (total == 0)
        return false;
    if (integer_digits < 0)
        integer_digits = total;
    d->end = p;

    int64_t exponent = 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        bool exponent_negative = false;
        if (*p == '+' || *p == '-')
            exponent_negative = *p++ == '-';
        if (!is_digit(*p))
            return false;
        for (; is_digit(*p); p++)
            if (exponent < ZM__EXPONENT_CLAMP)
                exponent = exponent * 10 + (*p - '0');
        if (exponent_negative)
            exponent = -exponent;
    }
    if (*p != '\0')
        return false;

    if (first < 0) {
        d->first = NULL;
        d->digits = 0;
        d->exponent = d->leading = 0;
        return true;
    }
    d->first = first_char;
    d->digits = (uint64_t)(last - first + 1);
    d->leading = integer_digits - 1 - first + exponent;
    d->exponent = integer_digits - 1 - last + exponent;
    return true;
}

/* a = the integer written by the first count significant digits of d. Nine
 * digits at a time, since 10^9 fits one limb. */
static int significant_digits_to_big(const zm__decimal *d, uint64_t count, zm_big *a)
{
    zm_big_set_u64(a, 0);
    uint32_t chunk = 0;
    unsigned chunk_digits = 0;
    for (const char *p = d->first; count > 0 && p < d->end; p++) {
        if (!is_digit(*p))
            continue;
        chunk = chunk * 10 + (uint32_t)(*p - '0');
        chunk_digits++;
        count--;
        if (chunk_digits == 9 || count == 0) {
            int rc = zm_big_mul_pow10(a, chunk_digits);
            if (rc == 0)
                rc = zm_big_add_u64(a, chunk);
            if (rc != 0)
                return rc;
            chunk = 0;
            chunk_digits = 0;
        }
    }
    return 0;
}

/* Copies text for a reason: at most 48 characters (then "..."), anything but
 * printable ASCII shown as '?', so a reason stays one short readable line. */
static const char *shown(const char *text, char out[64])
{
    size_t i = 0;
    for (; text[i] != '\0' && i < 48; i++) {
        unsigned char c = (unsigned char)text[i];
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (text[i] != '\0') {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
    return out;
}

static const char *kind_name(zm_share_kind kind)
{
    return kind == ZM_SHARE_PERCENT ? "percent" : "share";
}

/* The size for a validated, in-range share P/Q = D · 10^exponent, with
 * exponent ≤ 0 and D < 10^1000: k = floor((2nP + Q) / 2Q), which never
 * exceeds n because P ≤ Q. */
static int exact_size(const zm__decimal *d, uint64_t n, uint64_t *k)
{
    zm_big numerator, q, two_q, quotient;
    int rc = significant_digits_to_big(d, d->digits, &numerator);
    zm_big_set_u64(&q, 1);
    if (rc == 0)
        rc = zm_big_mul_pow10(&q, (unsigned)-d->exponent);
    if (rc == 0)
        rc = zm_big_mul_u64(&numerator, n);
    if (rc == 0)
        rc = zm_big_shl(&numerator, 1);
    if (rc == 0)
        rc = zm_big_add(&numerator, &q);
    two_q = q;
    if (rc == 0)
        rc = zm_big_shl(&two_q, 1);
    if (rc == 0)
        rc = zm_big_divmod(&numerator, &two_q, &quotient, NULL);
    if (rc == 0)
        rc = zm_big_to_u64(&quotient, k);
    return rc;
}

/* zm_size_from_text's work; quoted says whether the share came as text (and
 * is shown in quotes) or as a number. */
static int size_from_text(const char *text, zm_share_kind kind, uint64_t n, uint64_t *k,
                          bool quoted, zm_err *err)
{
    char display[64];
    const char *what = kind_name(kind);
    if (kind != ZM_SHARE_FRACTION && kind != ZM_SHARE_PERCENT)
        return zm_err_set(err, -EINVAL, "share kind %d is neither a fraction nor a percentage",
                          (int)kind);
    if (text == NULL)
        return zm_err_set(err, -EINVAL, "%s text is missing", what);
    if (strnlen(text, ZM__SHARE_TEXT_MAX + 1) > ZM__SHARE_TEXT_MAX)
        return zm_err_set(err, -EINVAL, "%s text \"%s\" is longer than %d characters", what,
                          shown(text, display), ZM__SHARE_TEXT_MAX);

    zm__decimal d;
    if (!parse_decimal(text, &d))
        return zm_err_set(err, -EINVAL, "%s text \"%s\" is not a decimal number", what,
                          shown(text, display));
    if (kind == ZM_SHARE_PERCENT) {
        d.exponent -= 2;
        d.leading -= 2;
    }

    /* The share is D · 10^exponent with 10^leading ≤ share < 10^(leading+1):
     * above 1 whenever leading > 0, and at leading 0 only exactly 1 (D = 1)
     * is in range. */
    bool in_range = d.digits > 0 && !d.negative &&
                    (d.leading < 0 || (d.leading == 0 && d.digits == 1 && *d.first == '1'));
    if (!in_range)
        return zm_err_set(err, -EINVAL, quoted ? "%s \"%s\" is outside %s" : "%s %s is outside %s",
                          what, shown(text, display),
                          kind == ZM_SHARE_PERCENT ? "(0, 100]" : "(0, 1]");

    if (n == 0) {
        *k = 0;
        return 0;
    }
    if (d.leading < ZM__SHARE_NEGLIGIBLE_LEADING) {
        *k = 1;
        return 0;
    }
    uint64_t size;
    int rc = exact_size(&d, n, &size);
    if (rc != 0)
        return zm_err_set(err, rc, "%s \"%s\" is too large for exact arithmetic (a bug)", what,
                          shown(text, display));
    *k = size < 1 ? 1 : size > n ? n : size;
    return 0;
}

int zm_size_from_text(const char *text, zm_share_kind kind, uint64_t n, uint64_t *k, zm_err *err)
{
    return size_from_text(text, kind, n, k, true, err);
}

int zm_size_from_binary64(double share, zm_share_kind kind, uint64_t n, uint64_t *k, zm_err *err)
{
    char text[32];
    if (zm_shortest_decimal(share, text, sizeof text) < 0) {
        const char *value = share > 0 ? "Infinity" : share < 0 ? "-Infinity" : "NaN";
        return zm_err_set(err, -EINVAL, "%s is not a finite number (%s)", kind_name(kind), value);
    }
    return size_from_text(text, kind, n, k, false, err);
}

/* ---- decimal to binary64 ---------------------------------------------------- */

/* The bits of |value| rounded to binary64 (ties to even), for a non-zero d
 * with −325 ≤ leading ≤ 308. */
static int decimal_bits(const zm__decimal *d, uint64_t *out)
{
    uint64_t kept = d->digits < ZM__BINARY64_DIGITS_KEPT ? d->digits : ZM__BINARY64_DIGITS_KEPT;
    int64_t exponent = d->exponent + (int64_t)(d->digits - kept);
    zm_big num, den, quotient, remainder;
    int rc = significant_digits_to_big(d, kept, &num);
    if (rc == 0 && kept < d->digits) {
        /* The cut digits end in a non-zero one (d's last digit is), so they
         * stand for a value strictly between the cut number and the next. */
        rc = zm_big_mul_u64(&num, 10);
        if (rc == 0)
            rc = zm_big_add_u64(&num, 1);
        exponent--;
    }
    zm_big_set_u64(&den, 1);
    if (rc == 0)
        rc = exponent >= 0 ? zm_big_mul_pow10(&num, (unsigned)exponent)
                           : zm_big_mul_pow10(&den, (unsigned)-exponent);
    if (rc != 0)
        return rc;

    /* value = num/den lies in (2^(b−1), 2^(b+1)); scaling by 2^−s with s =
     * b − 55 puts it in (2^54, 2^56), so the quotient holds the 53
     * significand bits, the rounding bit and more, and the remainder says
     * whether anything lies below. */
    int b = (int)zm_big_bit_length(&num) - (int)zm_big_bit_length(&den);
    int s = b - 55;
    rc = s < 0 ? zm_big_shl(&num, (unsigned)-s) : zm_big_shl(&den, (unsigned)s);
    if (rc == 0)
        rc = zm_big_divmod(&num, &den, &quotient, &remainder);
    uint64_t q;
    if (rc == 0)
        rc = zm_big_to_u64(&quotient, &q);
    if (rc != 0)
        return rc;
    bool sticky = !zm_big_is_zero(&remainder);

    /* value = (q + fraction)·2^s. The result's unit in the last place is
     * 2^u: 52 places below the leading bit, but never below 2^−1074 (the
     * subnormals). Shift q so its lowest bit is the one half an ulp. */
    int leading_bit = zm_bit_length_u64(q) - 1 + s;
    int u = leading_bit - 52 > -1074 ? leading_bit - 52 : -1074;
    int shift = u - 1 - s;
    if (shift >= 64) {
        sticky = sticky || q != 0;
        q = 0;
    } else if (shift > 0) {
        sticky = sticky || (q & ((1ull << shift) - 1)) != 0;
        q >>= shift;
    }
    uint64_t significand = q >> 1;
    if ((q & 1) && (sticky || (significand & 1)))
        significand++;
    if (significand == 1ull << 53) {
        significand >>= 1;
        u++;
    }
    if (significand >= 1ull << 52) {
        int biased = u + 52 + 1023;
        *out = biased >= 0x7ff ? 0x7ffull << 52
                               : ((uint64_t)biased << 52) | (significand & ((1ull << 52) - 1));
    } else {
        *out = significand; /* a subnormal or zero */
    }
    return 0;
}

int zm_decimal_to_binary64(const char *text, double *out, zm_err *err)
{
    char display[64];
    if (text == NULL)
        return zm_err_set(err, -EINVAL, "decimal text is missing");
    zm__decimal d;
    if (!parse_decimal(text, &d))
        return zm_err_set(err, -EINVAL, "text \"%s\" is not a decimal number",
                          shown(text, display));

    uint64_t bits = 0;
    /* Below 10^−325 a value is below half the smallest subnormal (2^−1075 ≈
     * 2.5·10^−324) and rounds to zero; from 10^309 on it is past the largest
     * double plus half an ulp (≈ 1.797693134862316·10^308) and rounds to
     * infinity. In between the exact quotient decides. */
    if (d.digits == 0 || d.leading < -325) {
        bits = 0;
    } else if (d.leading > 308) {
        bits = 0x7ffull << 52;
    } else {
        int rc = decimal_bits(&d, &bits);
        if (rc != 0)
            return zm_err_set(err, rc, "text \"%s\" is too long for exact arithmetic (a bug)",
                              shown(text, display));
    }
    if (d.negative)
        bits |= 1ull << 63;
    memcpy(out, &bits, sizeof *out);
    return 0;
}
