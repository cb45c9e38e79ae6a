/* Naming a kept set: the cell set digest and the LEB128 gap encoding. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "select/select_internal.h"

static inline uint32_t rotl32(uint32_t x, unsigned r) { return (x << r) | (x >> (32 - r)); }

/* Two 32-bit lanes; n and k enter as uint32 (both are at most 2^32 − 1).
 * positions NULL: every position, 0 ... k - 1. */
static void digest_of(const uint32_t *positions, uint64_t k, uint64_t n, char out[17])
{
    uint32_t a = 0x811c9dc5u ^ (uint32_t)n;
    uint32_t b = 0x9e3779b9u ^ (uint32_t)k;
    for (uint64_t i = 0; i < k; i++) {
        uint32_t p = positions ? positions[i] : (uint32_t)i;
        a = (a ^ p) * 0x01000193u;
        uint32_t x = b ^ p;
        b = rotl32(x, 13) * 5u + 0xe6546b64u;
    }
    snprintf(out, 17, "%08x%08x", zm__fmix32(a ^ (uint32_t)k), zm__fmix32(b ^ (uint32_t)n));
}

void zm_cellset_digest(const uint32_t *positions, uint64_t k, uint64_t n, char out[17])
{
    digest_of(positions, k, n, out);
}

void zm_cellset_digest_all(uint64_t n, char out[17])
{
    digest_of(NULL, n, n, out);
}

int zm_cellset_encode(const uint32_t *positions, uint64_t k, uint64_t n, uint8_t **bytes,
                      size_t *length, zm_err *err)
{
    *bytes = NULL;
    *length = 0;
    if (k == n) /* every cell is no bytes */
        return 0;
    /* A gap below 2^32 takes at most 5 bytes. */
    uint8_t *buffer = malloc(k * 5);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory encoding %llu cells",
                          (unsigned long long)k);
    size_t at = 0;
    int64_t previous = -1;
    for (uint64_t i = 0; i < k; i++) {
        if ((int64_t)positions[i] <= previous || positions[i] >= n) {
            free(buffer);
            return zm_err_set(err, -EINVAL,
                              "positions must ascend below n: %u after %lld (n = %llu)",
                              positions[i], (long long)previous, (unsigned long long)n);
        }
        uint32_t gap = (uint32_t)((int64_t)positions[i] - previous - 1);
        previous = positions[i];
        do {
            uint8_t byte = gap & 0x7f;
            gap >>= 7;
            buffer[at++] = byte | (gap ? 0x80 : 0);
        } while (gap);
    }
    *bytes = buffer;
    *length = at;
    return 0;
}

int zm_cellset_decode(const uint8_t *bytes, size_t length, uint64_t n, uint32_t **positions,
                      uint64_t *k, zm_err *err)
{
    *positions = NULL;
    *k = 0;
    if (n > ZM_N_MAX)
        return zm_err_set(err, -EINVAL, "n = %llu is outside uint32", (unsigned long long)n);
    /* Each position takes at least one byte, so there are at most length of
     * them; no bytes is every cell. */
    uint64_t capacity = length == 0 ? n : length;
    uint32_t *out = malloc((capacity ? capacity : 1) * sizeof *out);
    if (out == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory decoding a cell set");
    if (length == 0) {
        for (uint64_t p = 0; p < n; p++)
            out[p] = (uint32_t)p;
        *positions = out;
        *k = n;
        return 0;
    }
    uint64_t count = 0;
    int64_t previous = -1;
    size_t at = 0;
    while (at < length) {
        uint64_t gap = 0;
        unsigned shift = 0;
        size_t start = at;
        for (;;) {
            if (at == length) {
                free(out);
                return zm_err_set(err, -EINVAL,
                                  "cell set bytes end inside a varint (at byte %zu)", start);
            }
            uint8_t byte = bytes[at++];
            if (shift == 28 && (byte & 0x70)) {
                free(out);
                return zm_err_set(err, -EINVAL,
                                  "cell set varint at byte %zu overflows 32 bits", start);
            }
            gap |= (uint64_t)(byte & 0x7f) << shift;
            if (!(byte & 0x80)) {
                if (byte == 0 && at - start > 1) {
                    free(out);
                    return zm_err_set(err, -EINVAL,
                                      "cell set varint at byte %zu is not canonical "
                                      "(a redundant zero byte)", start);
                }
                break;
            }
            shift += 7;
            if (shift > 28) {
                free(out);
                return zm_err_set(err, -EINVAL,
                                  "cell set varint at byte %zu is longer than 5 bytes", start);
            }
        }
        int64_t position = previous + 1 + (int64_t)gap;
        if ((uint64_t)position >= n) {
            free(out);
            return zm_err_set(err, -EINVAL,
                              "cell set names position %lld, past the last cell (n = %llu)",
                              (long long)position, (unsigned long long)n);
        }
        out[count++] = (uint32_t)position;
        previous = position;
    }
    if (count == n) {
        /* The encoder writes every cell as no bytes, so this spelling of it
         * is not one it makes: refuse rather than accept two names. */
        free(out);
        return zm_err_set(err, -EINVAL,
                          "cell set lists every cell explicitly; every cell is written as no bytes");
    }
    *positions = out;
    *k = count;
    return 0;
}
