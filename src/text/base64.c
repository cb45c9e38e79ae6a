/* Standard base64 (RFC 4648, with padding): the cell set bytes of a session
 * (cells.kept) as JSON holds them, written by select and read from set files.
 * By hand: a few lines, and no Debian library of ours has it. */
#include "zarrmount/text.h"

#include <errno.h>
#include <stdlib.h>

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t zm_base64_length(size_t length) { return (length + 2) / 3 * 4; }

void zm_base64_encode(const uint8_t *bytes, size_t length, char *out)
{
    size_t i = 0, o = 0;
    for (; i + 3 <= length; i += 3) {
        uint32_t v = (uint32_t)bytes[i] << 16 | (uint32_t)bytes[i + 1] << 8 | bytes[i + 2];
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
    }
    if (length - i == 1) {
        uint32_t v = (uint32_t)bytes[i] << 16;
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (length - i == 2) {
        uint32_t v = (uint32_t)bytes[i] << 16 | (uint32_t)bytes[i + 1] << 8;
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
}

static int sextet(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int zm_base64_decode(const char *text, size_t text_length, uint8_t **bytes, size_t *length)
{
    *bytes = NULL;
    *length = 0;
    if (text_length % 4 != 0)
        return -EINVAL;
    uint8_t *out = malloc(text_length / 4 * 3 + 1);
    if (out == NULL)
        return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < text_length; i += 4) {
        int s[4];
        int padding = 0;
        for (int j = 0; j < 4; j++) {
            char c = text[i + j];
            if (c == '=' && i + 4 == text_length && j >= 2) {
                s[j] = 0;
                padding++;
            } else if (padding > 0 || (s[j] = sextet(c)) < 0) {
                free(out);
                return -EINVAL;
            }
        }
        uint32_t v = (uint32_t)s[0] << 18 | (uint32_t)s[1] << 12 | (uint32_t)s[2] << 6 | (uint32_t)s[3];
        out[o++] = (uint8_t)(v >> 16);
        if (padding < 2)
            out[o++] = (uint8_t)(v >> 8);
        if (padding < 1)
            out[o++] = (uint8_t)v;
    }
    *bytes = out;
    *length = o;
    return 0;
}
