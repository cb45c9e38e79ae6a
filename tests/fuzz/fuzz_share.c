/* libFuzzer target: share and percentage text (zm_size_from_text, the
 * share= and pct= of every view path and the "share"/"percent" of a select
 * request), and the two exact conversions it rests on
 * (zm_decimal_to_binary64, zm_shortest_decimal).
 *
 * Input: one flags byte (bit 0: a percentage), n as 8 bytes, a binary64 as
 * 8 bytes, then the text (cut at its first NUL).
 *
 * Properties, each against an independent reading:
 * - the grammar: text accepted only if it is sign? (digits ('.' digits?)? |
 *   '.' digits) ([eE] sign? digits)?, read here by a separate parser;
 * - the range: accepted shares are in (0, 1] (percentages (0, 100]) as the C
 *   library's correctly rounded strtod sees them, and shares clearly inside
 *   the range are accepted;
 * - the size: 1 ≤ k ≤ n (0 for n = 0), and equal to
 *   floor((2nP + Q) / 2Q) computed in 128-bit integers whenever the text has
 *   at most 19 significant digits and n < 2^40;
 * - decimal to binary64 is bit for bit glibc's strtod on accepted text;
 * - the shortest decimal of any finite double reads back as it, has the
 *   fewest significant digits that do, and those digits are the correctly
 *   rounded ones (glibc's printf %.*e) when those read back; a share as a
 *   number gives what its shortest decimal gives as text.
 * Every refusal is -EINVAL with a reason.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>

#include "fuzz.h"
#include "zarrmount/select.h"

/* The reference grammar: a mantissa of digits with at most one point and at
 * least one digit, then an optional exponent with at least one digit. Fills
 * the significant digits (up to 19), whether there were more, and the
 * decimal exponent of the last one. */
typedef struct reference {
    bool negative;
    uint64_t significand; /* the significant digits, when at most 19 */
    int digits;           /* significant digits (20: more than 19) */
    long long exponent;   /* of the last significant digit */
    bool exponent_overflow;
} reference;

static bool reference_parse(const char *s, reference *r)
{
    memset(r, 0, sizeof *r);
    if (*s == '+' || *s == '-')
        r->negative = *s++ == '-';
    /* The mantissa's digits in order, the point dropped: the value is their
     * integer times 10^(exponent - fraction digits). */
    const char *digits = s;
    long long count = 0, fraction = 0;
    bool point = false;
    for (;; s++) {
        if (*s >= '0' && *s <= '9') {
            count++;
            fraction += point;
        } else if (*s == '.' && !point) {
            point = true;
        } else {
            break;
        }
    }
    if (count == 0)
        return false;
    const char *mantissa_end = s;
    long long exponent = 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        bool negative = false;
        if (*s == '+' || *s == '-')
            negative = *s++ == '-';
        if (!(*s >= '0' && *s <= '9'))
            return false;
        for (; *s >= '0' && *s <= '9'; s++) {
            if (exponent > 100000000)
                r->exponent_overflow = true;
            else
                exponent = exponent * 10 + (*s - '0');
        }
        if (negative)
            exponent = -exponent;
    }
    if (*s != '\0')
        return false;
    /* The place of the last non-zero digit, counted from the end. */
    long long place = 0, trailing = -1;
    for (const char *p = mantissa_end; p-- > digits;) {
        if (*p == '.')
            continue;
        if (*p != '0' && trailing < 0)
            trailing = place;
        place++;
    }
    if (trailing < 0)
        return true; /* zero: no significant digit */
    r->exponent = exponent - fraction + trailing;
    bool started = false;
    long long seen = 0;
    for (const char *p = digits; p < mantissa_end; p++) {
        if (*p == '.')
            continue;
        seen++;
        if (*p != '0')
            started = true;
        if (!started)
            continue;
        if (count - seen < trailing)
            break; /* past the last non-zero digit */
        if (r->digits == 19) {
            r->digits = 20; /* more than fits */
            break;
        }
        r->significand = r->significand * 10 + (uint64_t)(*p - '0');
        r->digits++;
    }
    return true;
}

/* k = min(n, max(1, floor((2nP + Q) / 2Q))) for P/Q = significand ·
 * 10^exponent, when it fits 128 bits. */
static bool reference_size(const reference *r, uint64_t n, uint64_t *k)
{
    if (r->digits > 19 || r->exponent_overflow || r->exponent > 0 || r->exponent < -21 ||
        n >= (uint64_t)1 << 40)
        return false;
    unsigned __int128 q = 1;
    for (long long i = 0; i < -r->exponent; i++)
        q *= 10;
    unsigned __int128 size = (2 * (unsigned __int128)n * r->significand + q) / (2 * q);
    *k = size < 1 ? 1 : size > n ? n : (uint64_t)size;
    return true;
}

static void check_share(const char *text, zm_share_kind kind, uint64_t n)
{
    uint64_t k = UINT64_MAX;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_size_from_text(text, kind, n, &k, &err);
    static const int allowed[] = {-EINVAL};
    if (rc != 0)
        zm_fuzz_check_failure(rc, &err, allowed, 1, "zm_size_from_text");

    reference r;
    bool grammar = reference_parse(text, &r) && strlen(text) <= 1000;
    if (!grammar) {
        ZM_FUZZ_CHECK(rc != 0, "\"%.80s\" accepted, not a decimal number", text);
        return;
    }
    /* strtod is correctly rounded: a share it reads as clearly above the
     * top is refused, one clearly inside is accepted. */
    double top = kind == ZM_SHARE_PERCENT ? 100.0 : 1.0;
    double value = strtod(text, NULL);
    if (r.negative || value > top * (1 + 1e-12))
        ZM_FUZZ_CHECK(rc != 0, "\"%.80s\" accepted, outside the range", text);
    if (!r.negative && value > 0 && value < top * (1 - 1e-12))
        ZM_FUZZ_CHECK(rc == 0, "\"%.80s\" refused (%s), inside the range", text, err.reason);
    if (rc != 0)
        return;
    if (n == 0)
        ZM_FUZZ_CHECK(k == 0, "n = 0 gave k = %llu", (unsigned long long)k);
    else
        ZM_FUZZ_CHECK(k >= 1 && k <= n, "k = %llu outside [1, %llu]", (unsigned long long)k,
                      (unsigned long long)n);
    if (kind == ZM_SHARE_PERCENT)
        r.exponent -= 2;
    uint64_t expected;
    if (n > 0 && reference_size(&r, n, &expected))
        ZM_FUZZ_CHECK(k == expected, "\"%.80s\" of n = %llu: k = %llu, expected %llu", text,
                      (unsigned long long)n, (unsigned long long)k, (unsigned long long)expected);
}

static void check_decimal_to_binary64(const char *text)
{
    double x = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_decimal_to_binary64(text, &x, &err);
    reference r;
    bool grammar = reference_parse(text, &r);
    if (rc != 0) {
        static const int allowed[] = {-EINVAL};
        zm_fuzz_check_failure(rc, &err, allowed, 1, "zm_decimal_to_binary64");
        ZM_FUZZ_CHECK(!grammar, "\"%.80s\" refused: %s", text, err.reason);
        return;
    }
    ZM_FUZZ_CHECK(grammar, "\"%.80s\" accepted, not a decimal number", text);
    double expected = strtod(text, NULL);
    ZM_FUZZ_CHECK(memcmp(&x, &expected, sizeof x) == 0, "\"%.80s\" read as %a, strtod says %a",
                  text, x, expected);
}

/* The significant digits of a decimal text (no sign, point, exponent,
 * leading or trailing zeros). */
static void significant(const char *text, char *out)
{
    size_t o = 0;
    for (const char *p = text; *p && *p != 'e' && *p != 'E'; p++)
        if (*p >= '0' && *p <= '9' && (o > 0 || *p != '0'))
            out[o++] = *p;
    while (o > 0 && out[o - 1] == '0')
        o--;
    out[o] = '\0';
}

static bool reads_back(const char *text, double x)
{
    double y = strtod(text, NULL);
    return memcmp(&x, &y, sizeof x) == 0;
}

static void check_shortest(double x, zm_share_kind kind, uint64_t n)
{
    char text[32];
    int length = zm_shortest_decimal(x, text, sizeof text);
    if (!isfinite(x)) {
        ZM_FUZZ_CHECK(length == -EINVAL, "non-finite %a gave %d", x, length);
        return;
    }
    ZM_FUZZ_CHECK(length > 0 && (size_t)length == strlen(text), "%a: length %d", x, length);
    ZM_FUZZ_CHECK(reads_back(text, x), "%a written as \"%s\", which reads back otherwise", x, text);
    double again;
    zm_err err;
    ZM_FUZZ_CHECK(zm_decimal_to_binary64(text, &again, &err) == 0 &&
                      memcmp(&again, &x, sizeof x) == 0,
                  "%a: \"%s\" does not read back through zm_decimal_to_binary64", x, text);
    char small[8];
    int short_rc = zm_shortest_decimal(x, small, sizeof small);
    ZM_FUZZ_CHECK(length + 1 <= (int)sizeof small ? short_rc == length : short_rc == -ERANGE,
                  "%a into 8 bytes: %d (needs %d)", x, short_rc, length + 1);

    if (x != 0) {
        char digits[32], fewer[64], nearest[64], nearest_digits[64];
        significant(text, digits);
        int count = (int)strlen(digits);
        ZM_FUZZ_CHECK(count >= 1 && count <= 17, "%a: \"%s\" has %d digits", x, text, count);
        if (count > 1) {
            snprintf(fewer, sizeof fewer, "%.*e", count - 2, x);
            ZM_FUZZ_CHECK(!reads_back(fewer, x), "%a: \"%s\" is not the shortest (\"%s\")", x, text,
                          fewer);
        }
        /* The nearest decimal with as many digits, when it reads back (it
         * may not where x is a power of two: the interval below x is half
         * as wide as the one above). */
        snprintf(nearest, sizeof nearest, "%.*e", count - 1, x);
        significant(nearest, nearest_digits);
        if (reads_back(nearest, x))
            ZM_FUZZ_CHECK(strcmp(digits, nearest_digits) == 0,
                          "%a: \"%s\" is not the nearest with its digits (\"%s\")", x, text,
                          nearest);
    }

    /* A share as a number is its shortest decimal as text. */
    uint64_t k_number = 0, k_text = 0;
    zm_err err_number, err_text;
    zm_err_clear(&err_number);
    zm_err_clear(&err_text);
    int rc_number = zm_size_from_binary64(x, kind, n, &k_number, &err_number);
    int rc_text = zm_size_from_text(text, kind, n, &k_text, &err_text);
    ZM_FUZZ_CHECK(rc_number == rc_text && (rc_number != 0 || k_number == k_text),
                  "%a: as a number %d (k = %llu), as \"%s\" %d (k = %llu)", x, rc_number,
                  (unsigned long long)k_number, text, rc_text, (unsigned long long)k_text);
    if (rc_number != 0) {
        static const int allowed[] = {-EINVAL};
        zm_fuzz_check_failure(rc_number, &err_number, allowed, 1, "zm_size_from_binary64");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_input in = {data, size};
    unsigned flags = (unsigned)zm_fuzz_take(&in, 1);
    zm_share_kind kind = flags & 1 ? ZM_SHARE_PERCENT : ZM_SHARE_FRACTION;
    uint64_t n = zm_fuzz_take(&in, 8);
    uint64_t bits = zm_fuzz_take(&in, 8);
    double x;
    memcpy(&x, &bits, sizeof x);
    char *text = zm_fuzz_string(in.data, in.size);

    check_share(text, kind, n);
    check_decimal_to_binary64(text);
    check_shortest(x, kind, n);
    free(text);
    return 0;
}
