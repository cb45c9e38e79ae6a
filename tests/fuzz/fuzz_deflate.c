/* libFuzzer target: the deflate filter decoder (HDF5 filter 1: a zlib
 * stream, decoded by libdeflate with zlib behind it for what libdeflate
 * refuses), and zm__inflate_prefix (ISA-L, a chunk's first bytes only).
 * Input as fuzz_filters.h says; the settings byte picks the zlib level
 * (its value modulo 10) for the round trip and the prefix (bits 4-7).
 *
 * Properties: decoding to exactly raw_size succeeds exactly when zlib's own
 * inflate (HDF5's decoder) ends the stream with raw_size bytes, and gives
 * its bytes; a failure is -EIO with a reason; the unknown-size decoder
 * agrees and stays within its limit; inflating only a prefix
 * (zm__inflate_prefix, bits 4-7 of the settings byte: 1/16 to 16/16 of the
 * chunk) gives the whole chunk's first bytes and reads only stored bytes;
 * zlib's compression of any bytes decodes back to them.
 */
#include <zlib.h>

#include "fuzz_filters.h"

/* zlib's inflate as HDF5 runs it: the whole stream, input past its end
 * ignored. 0 and the size when it ends within cap bytes. */
static int reference_inflate(const uint8_t *in, size_t in_size, uint8_t *out, size_t cap,
                             size_t *produced)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK)
        abort();
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)in_size;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    int rc;
    do
        rc = inflate(&zs, Z_NO_FLUSH);
    while (rc == Z_OK);
    *produced = zs.total_out;
    inflateEnd(&zs);
    return rc == Z_STREAM_END ? 0 : -1;
}

/* The stored bytes, read in parts by zm__inflate_prefix. */
typedef struct stored_bytes {
    const uint8_t *bytes;
    size_t size;
} stored_bytes;

static int read_stored(void *context, size_t offset, void *buffer, size_t size, zm_err *err)
{
    (void)err;
    const stored_bytes *s = context;
    ZM_FUZZ_CHECK(offset <= s->size && size <= s->size - offset,
                  "a read of %zu bytes at %zu past the %zu stored", size, offset, s->size);
    memcpy(buffer, s->bytes + offset, size);
    return 0;
}

/* The first `needed` bytes inflated alone (a walk's partial read): the
 * same bytes as the whole chunk's when that decodes, never a read past the
 * stored bytes, and a reason for any failure. */
static void check_prefix(const zm_fuzz_chunk *c, size_t needed, int whole_rc, const uint8_t *whole)
{
    uint8_t *copy = zm_fuzz_exact_copy(c->stored, c->stored_size);
    stored_bytes s = {copy, c->stored_size};
    uint8_t *out = malloc(needed ? needed : 1);
    size_t read_bytes = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__inflate_prefix(read_stored, &s, c->stored_size, c->raw_size, out, needed,
                                &read_bytes, &err);
    ZM_FUZZ_CHECK(read_bytes <= c->stored_size, "read %zu of %zu stored bytes", read_bytes,
                  c->stored_size);
    if (rc != 0) {
        static const int allowed[] = {-EIO, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__inflate_prefix");
        ZM_FUZZ_CHECK(whole_rc != 0, "the whole chunk decodes, its first %zu bytes do not: %s",
                      needed, err.reason);
    } else if (whole_rc == 0) {
        ZM_FUZZ_CHECK(needed == 0 || memcmp(out, whole, needed) == 0,
                      "the first %zu bytes differ from the whole chunk's", needed);
    }
    free(out);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_chunk c = zm_fuzz_chunk_read(data, size);
    zm__filter filter = zm_fuzz_filter(ZM__FILTER_DEFLATE);

    uint8_t *out = NULL;
    int rc = zm_fuzz_decode(&filter, 4, c.stored, c.stored_size, c.raw_size, &out);

    uint8_t *reference = malloc(c.raw_size + 1);
    size_t produced = 0;
    int reference_rc =
        reference_inflate(c.stored, c.stored_size, reference, c.raw_size + 1, &produced);
    int reference_ok = reference_rc == 0 && produced == c.raw_size;
    ZM_FUZZ_CHECK((rc == 0) == reference_ok, "decoding to %zu bytes: %d; zlib: %s with %zu bytes",
                  c.raw_size, rc, reference_rc == 0 ? "ends" : "fails", produced);
    if (rc == 0)
        ZM_FUZZ_CHECK(c.raw_size == 0 || memcmp(out, reference, c.raw_size) == 0,
                      "libdeflate and zlib disagree on the bytes");
    free(reference);

    zm_fuzz_check_unsized(&filter, c.stored, c.stored_size, c.raw_size, rc, out);
    check_prefix(&c, c.raw_size * ((c.settings >> 4) + 1) / 16, rc, out);
    free(out);

    /* The stored bytes as raw data: zlib's compression decodes back. */
    int level = (int)(c.settings % 10);
    uLongf bound = compressBound((uLong)c.stored_size);
    uint8_t *encoded = malloc(bound);
    if (encoded == NULL ||
        compress2(encoded, &bound, c.stored, (uLong)c.stored_size, level) != Z_OK)
        abort();
    char how[32];
    snprintf(how, sizeof how, "zlib level %d", level);
    zm_fuzz_check_round_trip(&filter, 4, c.stored, c.stored_size, encoded, bound, how);
    free(encoded);
    return 0;
}
