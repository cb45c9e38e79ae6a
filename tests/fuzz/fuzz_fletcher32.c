/* libFuzzer target: the fletcher32 filter (filter 3: a checksum of the
 * chunk appended, little-endian).
 *
 * Input: a byte position (2 bytes) and a bit mask (1 byte) for a flip, then
 * the data.
 *
 * Properties, against a checksum computed here from HDF5's definition:
 * the data with its checksum appended decodes to the data, also with the
 * legacy byte order of HDF5 before 1.6.3; the input taken as a whole stored
 * chunk (data then checksum) is accepted exactly when its last 4 bytes are
 * the checksum of the rest in either order; any one byte flipped is
 * refused, with a reason, unless the flip happens to leave a valid
 * checksum in the legacy order; a stored size other than the chunk's plus 4
 * is refused.
 */
#include "fuzz_filters.h"

static int decode(const uint8_t *in, size_t in_size, size_t raw_size, uint8_t *out)
{
    zm__filter filter = zm_fuzz_filter(ZM__FILTER_FLETCHER32);
    uint8_t *stored = zm_fuzz_exact_copy(in, in_size);
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__filter_decode(&filter, 1, 0, 1, stored, in_size, out, raw_size, &err);
    free(stored);
    if (rc != 0) {
        static const int allowed[] = {-EIO};
        zm_fuzz_check_failure(rc, &err, allowed, 1, "zm__filter_decode");
    }
    return rc;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether a stored chunk's last 4 bytes are its checksum, in either order. */
static int valid(const uint8_t *chunk, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t sum = zm_fuzz_fletcher32(chunk, size - 4), stored = get32(chunk + size - 4);
    return stored == sum || stored == zm_fuzz_fletcher32_legacy(sum);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_input in = {data, size};
    size_t position = (size_t)zm_fuzz_take(&in, 2);
    uint8_t mask = (uint8_t)zm_fuzz_take(&in, 1);
    const uint8_t *bytes = in.data;
    size_t n = in.size;

    uint8_t *chunk = malloc(n + 4);
    uint8_t *out = malloc(n + 4);
    if (chunk == NULL || out == NULL)
        abort();

    /* The input as a stored chunk. */
    int rc = decode(bytes, n, n >= 4 ? n - 4 : 0, out);
    ZM_FUZZ_CHECK((rc == 0) == valid(bytes, n), "a stored chunk of %zu bytes %s", n,
                  rc == 0 ? "accepted with a wrong checksum" : "refused with a right one");
    if (rc == 0 && n > 4)
        ZM_FUZZ_CHECK(memcmp(out, bytes, n - 4) == 0, "the checksum was not just stripped");

    /* The input as data, its checksum appended, in both orders. */
    uint32_t sum = zm_fuzz_fletcher32(bytes, n);
    if (n > 0)
        memcpy(chunk, bytes, n);
    zm_fuzz_put32(chunk + n, sum);
    ZM_FUZZ_CHECK(decode(chunk, n + 4, n, out) == 0 && (n == 0 || memcmp(out, bytes, n) == 0),
                  "%zu bytes with their checksum 0x%08x refused", n, sum);
    ZM_FUZZ_CHECK(decode(chunk, n + 4, n + 1, out) == -EIO, "a chunk size off by one accepted");
    if (n > 0)
        ZM_FUZZ_CHECK(decode(chunk, n + 4, n - 1, out) == -EIO, "a chunk size off by one accepted");
    zm_fuzz_put32(chunk + n, zm_fuzz_fletcher32_legacy(sum));
    ZM_FUZZ_CHECK(decode(chunk, n + 4, n, out) == 0, "%zu bytes with the legacy checksum refused",
                  n);

    /* One byte flipped. */
    zm_fuzz_put32(chunk + n, sum);
    if (mask == 0)
        mask = 0x01;
    position %= n + 4;
    chunk[position] ^= mask;
    rc = decode(chunk, n + 4, n, out);
    int coincidence = valid(chunk, n + 4);
    if (position < n) {
        /* A byte of the data moves sum1 by a non-zero amount modulo 65535. */
        ZM_FUZZ_CHECK(zm_fuzz_fletcher32(chunk, n) != sum, "a flip went unseen by the sum");
    }
    ZM_FUZZ_CHECK((rc == 0) == coincidence, "byte %zu of %zu flipped by 0x%02x: %s", position,
                  n + 4, mask, rc == 0 ? "accepted" : "refused although valid");

    free(chunk);
    free(out);
    return 0;
}
