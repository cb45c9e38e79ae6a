/* Shared by the filter decoder targets (fuzz_deflate.c, fuzz_lzf.c,
 * fuzz_zstd.c, fuzz_blosc.c): one input is stored bytes to decode and,
 * the same bytes taken as raw data, something to encode and decode back.
 *
 * Also the reference encoders the round trips use: shuffle, an LZF encoder
 * and HDF5's fletcher32.
 *
 * Input: the chunk's raw size as 4 bytes (little-endian, modulo
 * ZM_FUZZ_RAW_MAX + 1), one byte of settings for the encoder, then the
 * stored bytes.
 */
#ifndef ZARRMOUNT_TESTS_FUZZ_FILTERS_H
#define ZARRMOUNT_TESTS_FUZZ_FILTERS_H

#include <errno.h>

#include "fuzz.h"
#include "source/filters.h"

#define ZM_FUZZ_RAW_MAX (1u << 20)

typedef struct zm_fuzz_chunk {
    size_t raw_size;
    unsigned settings;
    const uint8_t *stored;
    size_t stored_size;
} zm_fuzz_chunk;

static inline zm_fuzz_chunk zm_fuzz_chunk_read(const uint8_t *data, size_t size)
{
    zm_fuzz_input in = {data, size};
    zm_fuzz_chunk c;
    c.raw_size = (size_t)(zm_fuzz_take(&in, 4) % (ZM_FUZZ_RAW_MAX + 1));
    c.settings = (unsigned)zm_fuzz_take(&in, 1);
    c.stored = in.data;
    c.stored_size = in.size;
    return c;
}

static inline zm__filter zm_fuzz_filter(unsigned id)
{
    zm__filter f;
    memset(&f, 0, sizeof f);
    f.id = id;
    return f;
}

/* A copy of the stored bytes in a buffer of exactly their size, so that
 * AddressSanitizer sees any read past their end. */
static inline uint8_t *zm_fuzz_exact_copy(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL)
        abort();
    if (size)
        memcpy(copy, data, size);
    return copy;
}

/* Decodes in through one filter into a buffer of exactly raw_size bytes
 * (*out, malloc'd, kept only on success). A failure must be -EIO (or
 * -ENOMEM) with a reason. */
static inline int zm_fuzz_decode(const zm__filter *filter, size_t element_size, const uint8_t *in,
                                 size_t in_size, size_t raw_size, uint8_t **out)
{
    uint8_t *stored = zm_fuzz_exact_copy(in, in_size);
    uint8_t *buffer = malloc(raw_size ? raw_size : 1);
    if (buffer == NULL)
        abort();
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__filter_decode(filter, 1, 0, element_size, stored, in_size, buffer, raw_size, &err);
    free(stored);
    if (rc != 0) {
        static const int allowed[] = {-EIO, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__filter_decode");
        free(buffer);
        *out = NULL;
        return rc;
    }
    *out = buffer;
    return 0;
}

/* The decoder whose output size is unknown, given raw_size as its limit:
 * it never gives more than the limit, and it agrees with the exact decode:
 * that succeeded exactly when this gives raw_size bytes, the same ones. */
static inline void zm_fuzz_check_unsized(const zm__filter *filter, const uint8_t *in,
                                         size_t in_size, size_t raw_size, int exact_rc,
                                         const uint8_t *exact)
{
    uint8_t *stored = zm_fuzz_exact_copy(in, in_size);
    uint8_t *out = NULL;
    size_t out_size = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__filter_decode_unsized(filter, stored, in_size, raw_size, &out, &out_size, &err);
    free(stored);
    if (rc != 0) {
        static const int allowed[] = {-EIO, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__filter_decode_unsized");
        ZM_FUZZ_CHECK(exact_rc != 0, "decoded to exactly %zu bytes, but not within that limit: %s",
                      raw_size, err.reason);
        return;
    }
    ZM_FUZZ_CHECK(out_size <= raw_size, "%zu bytes decoded past the limit of %zu", out_size,
                  raw_size);
    ZM_FUZZ_CHECK((out_size == raw_size) == (exact_rc == 0),
                  "within the limit: %zu bytes; decoding to exactly %zu: %d", out_size, raw_size,
                  exact_rc);
    if (exact_rc == 0)
        ZM_FUZZ_CHECK(raw_size == 0 || memcmp(out, exact, raw_size) == 0,
                      "the two decoders disagree on the bytes");
    free(out);
}

/* HDF5's fletcher32 (H5_checksum_fletcher32), from its definition rather
 * than its loop: the data as big-endian 16-bit words (an odd last byte the
 * high half of a last word); sum1 the sum of the words, sum2 the sum of
 * sum1 after each word, both reduced by end-around carry, which leaves 0
 * for 0 and a value in 1..65535 congruent modulo 65535 otherwise; sum2 in
 * the high half. */
static inline uint32_t zm_fuzz_fletcher32(const uint8_t *data, size_t length)
{
    uint64_t sum1 = 0, sum2 = 0;
    int any1 = 0, any2 = 0;
    for (size_t i = 0; i < length; i += 2) {
        uint32_t word = (uint32_t)data[i] << 8 | (i + 1 < length ? data[i + 1] : 0);
        any1 |= word != 0;
        any2 |= any1;
        sum1 = (sum1 + word) % 65535;
        sum2 = (sum2 + sum1) % 65535;
    }
    uint32_t a = any1 ? (uint32_t)((sum1 + 65534) % 65535 + 1) : 0;
    uint32_t b = any2 ? (uint32_t)((sum2 + 65534) % 65535 + 1) : 0;
    return b << 16 | a;
}

/* The same value in the byte order HDF5 before 1.6.3 wrote on little-endian
 * hosts (each 16-bit half's bytes swapped), which HDF5 still accepts. */
static inline uint32_t zm_fuzz_fletcher32_legacy(uint32_t sum)
{
    return ((sum & 0x00ff00ffu) << 8) | ((sum >> 8) & 0x00ff00ffu);
}

static inline void zm_fuzz_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* HDF5's shuffle (inverse: its undoing) of the whole elements of `size`
 * bytes (element ≥ 1); bytes past them stay in place. */
static inline void zm_fuzz_shuffle(const uint8_t *in, size_t size, size_t element, uint8_t *out,
                                   int inverse)
{
    size_t n = size / element;
    memcpy(out, in, size);
    if (element <= 1 || n <= 1)
        return;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < element; j++) {
            if (inverse)
                out[i * element + j] = in[j * n + i];
            else
                out[j * n + i] = in[i * element + j];
        }
}

/* An LZF encoder: literal runs of up to 32 bytes, back references of 3 to
 * 264 bytes up to 8192 bytes back, found among the last 64 positions and
 * the last position with the same 3 bytes (a small hash table), as liblzf
 * finds them. */
static inline size_t zm_fuzz_encode_lzf(const uint8_t *in, size_t size, uint8_t *out, int near_only)
{
    enum { HASH = 4096, WINDOW = 8192, NEAR = 64, LONGEST = 264 };
    size_t *last = malloc(HASH * sizeof *last);
    if (last == NULL)
        abort();
    for (size_t h = 0; h < HASH; h++)
        last[h] = SIZE_MAX;
    size_t o = 0, literal = 0, i = 0;
    while (i < size) {
        size_t best = 0, best_back = 0;
        if (size - i >= 3) {
            unsigned h =
                ((unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2]) * 2654435761u >> 20;
            size_t candidates[NEAR + 1], count = 0;
            if (!near_only && last[h] != SIZE_MAX && i - last[h] <= WINDOW)
                candidates[count++] = last[h];
            for (size_t back = 1; back <= NEAR && back <= i; back++)
                candidates[count++] = i - back;
            last[h] = i;
            for (size_t k = 0; k < count; k++) {
                size_t j = candidates[k], length = 0;
                while (i + length < size && length < LONGEST && in[j + length] == in[i + length])
                    length++;
                if (length > best) {
                    best = length;
                    best_back = i - j;
                }
            }
        }
        if (best >= 3) {
            if (literal > 0) {
                out[o++] = (uint8_t)(literal - 1);
                memcpy(out + o, in + i - literal, literal);
                o += literal;
                literal = 0;
            }
            size_t length = best - 2, back = best_back - 1;
            if (length < 7) {
                out[o++] = (uint8_t)(length << 5 | back >> 8);
            } else {
                out[o++] = (uint8_t)(7 << 5 | back >> 8);
                out[o++] = (uint8_t)(length - 7);
            }
            out[o++] = (uint8_t)(back & 0xff);
            i += best;
        } else {
            literal++;
            i++;
            if (literal == 32) {
                out[o++] = 31;
                memcpy(out + o, in + i - 32, 32);
                o += 32;
                literal = 0;
            }
        }
    }
    if (literal > 0) {
        out[o++] = (uint8_t)(literal - 1);
        memcpy(out + o, in + size - literal, literal);
        o += literal;
    }
    free(last);
    return o;
}

/* Raw data encoded by a reference encoder decodes back to itself. */
static inline void zm_fuzz_check_round_trip(const zm__filter *filter, size_t element_size,
                                            const uint8_t *raw, size_t raw_size,
                                            const uint8_t *encoded, size_t encoded_size,
                                            const char *how)
{
    uint8_t *out = NULL;
    uint8_t *copy = zm_fuzz_exact_copy(encoded, encoded_size);
    uint8_t *buffer = malloc(raw_size ? raw_size : 1);
    zm_err err;
    zm_err_clear(&err);
    int rc =
        zm__filter_decode(filter, 1, 0, element_size, copy, encoded_size, buffer, raw_size, &err);
    out = buffer;
    ZM_FUZZ_CHECK(rc == 0, "%zu bytes encoded by %s (%zu stored) do not decode: %s", raw_size, how,
                  encoded_size, err.reason);
    ZM_FUZZ_CHECK(raw_size == 0 || memcmp(out, raw, raw_size) == 0,
                  "%zu bytes encoded by %s decode to other bytes", raw_size, how);
    free(out);
    free(copy);
}

#endif
