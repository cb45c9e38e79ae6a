/* Values as Zarr readers expect their bytes: numcodecs' VLenUTF8 framing for
 * string arrays, numpy's "<U" (UTF-32LE) for 0-d strings, and the strict
 * UTF-8 reader both rest on.
 *
 * Text is checked strictly because a reader decodes it strictly: numcodecs
 * turns each item into a Python str (PyUnicode_FromStringAndSize, which
 * refuses overlongs, surrogates and stray bytes), so a bad byte served here
 * would surface as a UnicodeDecodeError in the user's notebook instead of a
 * reason in our log. */
#include "zarr/zarr_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

size_t zm__utf8_next(const unsigned char *text, size_t length, size_t at, uint32_t *code_point,
                     const char **problem)
{
    unsigned char lead = text[at];
    if (lead < 0x80) {
        *code_point = lead;
        return 1;
    }
    size_t need;
    uint32_t value, minimum;
    if (lead < 0xc0) {
        *problem = "continuation byte without a lead byte";
        return 0;
    } else if (lead < 0xe0) {
        need = 2;
        value = lead & 0x1f;
        minimum = 0x80;
    } else if (lead < 0xf0) {
        need = 3;
        value = lead & 0x0f;
        minimum = 0x800;
    } else if (lead < 0xf8) {
        need = 4;
        value = lead & 0x07;
        minimum = 0x10000;
    } else {
        *problem = "byte that never occurs in UTF-8";
        return 0;
    }
    if (length - at < need) {
        *problem = "sequence cut short";
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        unsigned char next = text[at + i];
        if ((next & 0xc0) != 0x80) {
            *problem = "sequence cut short";
            return 0;
        }
        value = value << 6 | (next & 0x3f);
    }
    if (value < minimum) {
        *problem = "overlong encoding";
        return 0;
    }
    if (value >= 0xd800 && value <= 0xdfff) {
        *problem = "surrogate code point";
        return 0;
    }
    if (value > 0x10ffff) {
        *problem = "code point past U+10FFFF";
        return 0;
    }
    *code_point = value;
    return need;
}

/* Walks text as UTF-8: 0 with the code point count, or -1 with the offset
 * and nature of the first bad byte. */
static int zm__utf8_scan(const char *text, size_t length, size_t *code_points, size_t *bad_at,
                         const char **problem)
{
    const unsigned char *bytes = (const unsigned char *)text;
    size_t count = 0;
    for (size_t at = 0; at < length;) {
        /* Runs of ASCII, the usual case for cell and gene names, skip the
         * full decoder. */
        if (bytes[at] < 0x80) {
            at++;
            count++;
            continue;
        }
        uint32_t code_point;
        size_t n = zm__utf8_next(bytes, length, at, &code_point, problem);
        if (n == 0) {
            *bad_at = at;
            return -1;
        }
        at += n;
        count++;
    }
    *code_points = count;
    return 0;
}

int zm__utf8_check(const char *text, size_t length, size_t *code_points, const char *what,
                   zm_err *err)
{
    size_t count = 0, bad_at = 0;
    const char *problem = "";
    if (zm__utf8_scan(text, length, &count, &bad_at, &problem) != 0)
        return zm_err_set(err, -EINVAL, "%s is not valid UTF-8: %s at byte %zu (0x%02x)", what,
                          problem, bad_at, (unsigned char)text[bad_at]);
    if (code_points != NULL)
        *code_points = count;
    return 0;
}

static void zm__store_le32(uint8_t *out, uint32_t value)
{
    out[0] = (uint8_t)value;
    out[1] = (uint8_t)(value >> 8);
    out[2] = (uint8_t)(value >> 16);
    out[3] = (uint8_t)(value >> 24);
}

int zm_vlen_utf8_encode(size_t count, const uint64_t *offsets, const char *bytes, uint8_t **out,
                        size_t *out_size, zm_err *err)
{
    /* numcodecs keeps the count and each length in a C int before storing
     * them as uint32, and reads them back into an int: anything past
     * INT_MAX would decode wrongly, so refuse it here. */
    if (count > INT_MAX)
        return zm_err_set(err, -EINVAL,
                          "vlen-utf8: %zu items in one chunk (numcodecs reads at most %d)", count,
                          INT_MAX);
    size_t total = 4;
    for (size_t i = 0; i < count; i++) {
        if (offsets[i + 1] < offsets[i])
            return zm_err_set(err, -EINVAL,
                              "vlen-utf8: item %zu ends (%llu) before it starts (%llu)", i,
                              (unsigned long long)offsets[i + 1], (unsigned long long)offsets[i]);
        uint64_t length = offsets[i + 1] - offsets[i];
        if (length > INT_MAX)
            return zm_err_set(err, -EINVAL,
                              "vlen-utf8: item %zu has %llu bytes (numcodecs reads at most %d)", i,
                              (unsigned long long)length, INT_MAX);
        if (total > SIZE_MAX - 4 - length)
            return zm_err_set(err, -EINVAL, "vlen-utf8: chunk too large");
        total += 4 + (size_t)length;
    }
    for (size_t i = 0; i < count; i++) {
        size_t code_points, bad_at;
        const char *problem = "";
        const char *item = bytes + offsets[i];
        if (zm__utf8_scan(item, (size_t)(offsets[i + 1] - offsets[i]), &code_points, &bad_at,
                          &problem) != 0)
            return zm_err_set(err, -EINVAL,
                              "vlen-utf8: item %zu is not valid UTF-8: %s at byte %zu (0x%02x)", i,
                              problem, bad_at, (unsigned char)item[bad_at]);
    }
    uint8_t *buffer = malloc(total);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "vlen-utf8: out of memory for a %zu-byte chunk", total);
    zm__store_le32(buffer, (uint32_t)count);
    size_t at = 4;
    for (size_t i = 0; i < count; i++) {
        size_t length = (size_t)(offsets[i + 1] - offsets[i]);
        zm__store_le32(buffer + at, (uint32_t)length);
        if (length > 0)
            memcpy(buffer + at + 4, bytes + offsets[i], length);
        at += 4 + length;
    }
    *out = buffer;
    *out_size = total;
    return 0;
}

int zm_utf32_encode(const char *utf8, size_t length, uint8_t **out, size_t *out_size,
                    size_t *code_points, zm_err *err)
{
    size_t count = 0;
    int rc = zm__utf8_check(utf8, length, &count, "string", err);
    if (rc != 0)
        return rc;
    /* numpy gives the empty string the dtype "<U1", one NUL code point:
     * np.array("").dtype is <U1, and zarr stores its 4 zero bytes. */
    size_t slots = count == 0 ? 1 : count;
    if (slots > SIZE_MAX / 4)
        return zm_err_set(err, -EINVAL, "string too long for UTF-32");
    uint8_t *buffer = calloc(slots, 4);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for a %zu-character string", slots);
    const unsigned char *bytes = (const unsigned char *)utf8;
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t code_point = 0;
        const char *problem = "";
        at += zm__utf8_next(bytes, length, at, &code_point, &problem);
        zm__store_le32(buffer + 4 * i, code_point);
    }
    *out = buffer;
    *out_size = 4 * slots;
    *code_points = slots;
    return 0;
}
