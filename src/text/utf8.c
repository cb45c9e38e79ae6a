/* Text made valid UTF-8 (see zarrmount/text.h). */
#include "zarrmount/text.h"

#include <stdint.h>
#include <string.h>

/* The length of the valid UTF-8 sequence p starts with (as jansson checks
 * it: no overlong form, no surrogate, nothing past U+10FFFF), or 0. */
static size_t utf8_sequence(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t length = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
                    : p[0] >= 0xe0 && p[0] <= 0xef ? 3
                    : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                                   : 0;
    if (length == 0)
        return 0;
    uint32_t value = p[0] & (0x7fu >> length);
    for (size_t i = 1; i < length; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        value = value << 6 | (p[i] & 0x3fu);
    }
    if ((length == 3 && value < 0x800) || (length == 4 && value < 0x10000) || value > 0x10ffff ||
        (value >= 0xd800 && value <= 0xdfff))
        return 0;
    return length;
}

void zm_text_utf8_copy(char *out, size_t size, const char *text)
{
    size_t at = 0;
    const unsigned char *p = (const unsigned char *)text;
    while (*p && at + 1 < size) {
        size_t length = utf8_sequence(p);
        if (length == 0) {
            out[at++] = '?';
            p++;
            continue;
        }
        if (at + length >= size)
            break;
        memcpy(out + at, p, length);
        at += length;
        p += length;
    }
    out[at] = '\0';
}
