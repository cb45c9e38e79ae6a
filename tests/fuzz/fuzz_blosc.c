/* libFuzzer target: the blosc filter decoder (filter 32001: one c-blosc
 * buffer, which records its own codec, shuffle and type size). Input as
 * fuzz_filters.h says; the settings byte picks the round trip's level
 * (bits 0-1), type size (bits 2-3: 1, 2, 4, 8), shuffle (bits 4-5: none,
 * byte, bit) and inner codec (bits 6-7: blosclz, lz4, zlib, zstd).
 *
 * Properties: a decoded buffer is one whose header says raw_size bytes and
 * no more stored bytes than there are; a failure is -EIO with a reason
 * (c-blosc trusts its header, so the filter must check it first: ASan
 * watches every read of the exact-size copy of the input); the
 * unknown-size decoder agrees and stays within its limit; c-blosc's
 * compression of any bytes, with every codec and shuffle, decodes back.
 */
#include <blosc.h>

#include "fuzz_filters.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_chunk c = zm_fuzz_chunk_read(data, size);
    zm__filter filter = zm_fuzz_filter(ZM__FILTER_BLOSC);

    uint8_t *out = NULL;
    int rc = zm_fuzz_decode(&filter, 4, c.stored, c.stored_size, c.raw_size, &out);
    if (rc == 0) {
        size_t nbytes = 0, cbytes = 0, blocksize = 0;
        ZM_FUZZ_CHECK(c.stored_size >= BLOSC_MIN_HEADER_LENGTH, "decoded a %zu-byte header",
                      c.stored_size);
        blosc_cbuffer_sizes(c.stored, &nbytes, &cbytes, &blocksize);
        ZM_FUZZ_CHECK(nbytes == c.raw_size && cbytes <= c.stored_size,
                      "decoded a buffer of %zu bytes (%zu stored) as %zu (%zu stored)", nbytes,
                      cbytes, c.raw_size, c.stored_size);
    }
    zm_fuzz_check_unsized(&filter, c.stored, c.stored_size, c.raw_size, rc, out);
    free(out);

    static const char *const codecs[] = {"blosclz", "lz4", "zlib", "zstd"};
    int level = (int)(c.settings & 3) * 3;
    size_t typesize = (size_t)1 << ((c.settings >> 2) & 3);
    int shuffle = (int)((c.settings >> 4) & 3) % 3;
    const char *codec = codecs[c.settings >> 6];
    size_t cap = c.stored_size + BLOSC_MAX_OVERHEAD;
    uint8_t *encoded = malloc(cap);
    if (encoded == NULL)
        abort();
    int encoded_size = blosc_compress_ctx(level, shuffle, typesize, c.stored_size, c.stored,
                                          encoded, cap, codec, 0, 1);
    if (encoded_size <= 0)
        abort();
    char how[64];
    snprintf(how, sizeof how, "blosc %s level %d, type size %zu, shuffle %d", codec, level,
             typesize, shuffle);
    zm_fuzz_check_round_trip(&filter, 4, c.stored, c.stored_size, encoded, (size_t)encoded_size,
                             how);
    free(encoded);
    return 0;
}
