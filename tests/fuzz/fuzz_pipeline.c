/* libFuzzer target: whole filter pipelines (zm__filter_decode over up to 4
 * filters with a filter mask): the stages between the decoders, where
 * sizes are known (shuffle, fletcher32) or not (after a compressor).
 *
 * Input: the filter count (1 byte: 1 + b % 4); per filter one byte (bits
 * 0-2: deflate, shuffle, fletcher32, lzf, blosc, zstd, szip, lz4; bits 3-7:
 * shuffle's element size in cd_values, 0 for none); the filter mask (1
 * byte); the dataset's element size (1 byte); the chunk's raw size (2
 * bytes); then the stored bytes.
 *
 * Properties: an unsupported filter that is not masked is -ENOTSUP with
 * its name, before any decoding; any other failure is -EIO (or -ENOMEM)
 * with a reason; the output is exactly raw_size bytes (ASan watches the
 * buffer's end); and the stored bytes taken as raw data, encoded through
 * the pipeline by reference encoders (zlib, libzstd, c-blosc, the LZF
 * encoder and shuffle and fletcher32 of fuzz_filters.h), skipping masked
 * filters, decode back to themselves.
 */
#include <blosc.h>
#include <zlib.h>
#include <zstd.h>

#include "fuzz_filters.h"

static const unsigned filter_ids[8] = {
    ZM__FILTER_DEFLATE, ZM__FILTER_SHUFFLE, ZM__FILTER_FLETCHER32, ZM__FILTER_LZF,
    ZM__FILTER_BLOSC,   ZM__FILTER_ZSTD,    ZM__FILTER_SZIP,       32004,
};

/* Runs one filter's encoder over *data (replaced by its output). */
static int encode_stage(const zm__filter *f, size_t element_size, uint8_t **data, size_t *size)
{
    const uint8_t *in = *data;
    size_t n = *size, cap = n + n / 8 + 1024, out_size = 0;
    uint8_t *out = malloc(cap);
    if (out == NULL)
        abort();
    switch (f->id) {
    case ZM__FILTER_DEFLATE: {
        uLongf length = (uLongf)cap;
        if (compress2(out, &length, in, (uLong)n, 6) != Z_OK)
            abort();
        out_size = length;
        break;
    }
    case ZM__FILTER_SHUFFLE: {
        size_t element = f->cd_count && f->cd_values[0] ? f->cd_values[0] : element_size;
        zm_fuzz_shuffle(in, n, element, out, 0);
        out_size = n;
        break;
    }
    case ZM__FILTER_FLETCHER32:
        memcpy(out, in, n);
        zm_fuzz_put32(out + n, zm_fuzz_fletcher32(in, n));
        out_size = n + 4;
        break;
    case ZM__FILTER_LZF:
        out_size = zm_fuzz_encode_lzf(in, n, out, 0);
        break;
    case ZM__FILTER_BLOSC: {
        int made = blosc_compress_ctx(5, BLOSC_SHUFFLE, 4, n, in, out, cap, "lz4", 0, 1);
        if (made <= 0)
            abort();
        out_size = (size_t)made;
        break;
    }
    case ZM__FILTER_ZSTD:
        out_size = ZSTD_compress(out, cap, in, n, 1);
        if (ZSTD_isError(out_size))
            abort();
        break;
    default:
        abort();
    }
    free(*data);
    *data = out;
    *size = out_size;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_input in = {data, size};
    unsigned count = 1 + (unsigned)zm_fuzz_take(&in, 1) % 4;
    zm__filter filters[4];
    for (unsigned i = 0; i < count; i++) {
        unsigned b = (unsigned)zm_fuzz_take(&in, 1);
        filters[i] = zm_fuzz_filter(filter_ids[b & 7]);
        if (filters[i].id == ZM__FILTER_SHUFFLE && (b >> 3) != 0) {
            filters[i].cd_count = 1;
            filters[i].cd_values[0] = b >> 3;
        }
    }
    unsigned mask = (unsigned)zm_fuzz_take(&in, 1);
    size_t element_size = (size_t)zm_fuzz_take(&in, 1);
    size_t raw_size = (size_t)zm_fuzz_take(&in, 2);

    int unsupported = 0, no_element = 0;
    for (unsigned i = 0; i < count; i++) {
        if ((mask >> i) & 1)
            continue;
        unsupported |= !zm__filter_supported(filters[i].id);
        if (filters[i].id == ZM__FILTER_SHUFFLE && !filters[i].cd_count && element_size == 0)
            no_element = 1;
    }

    /* The stored bytes decoded. */
    uint8_t *stored = zm_fuzz_exact_copy(in.data, in.size);
    uint8_t *out = malloc(raw_size ? raw_size : 1);
    zm_err err;
    zm_err_clear(&err);
    int rc =
        zm__filter_decode(filters, count, mask, element_size, stored, in.size, out, raw_size, &err);
    if (rc != 0) {
        static const int allowed[] = {-EIO, -ENOTSUP, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 3, "zm__filter_decode");
    }
    if (unsupported)
        ZM_FUZZ_CHECK(rc == -ENOTSUP, "an unsupported filter gave %d: %s", rc, err.reason);
    else
        ZM_FUZZ_CHECK(rc != -ENOTSUP, "-ENOTSUP with every filter supported: %s", err.reason);
    free(out);
    free(stored);
    if (unsupported || no_element)
        return 0;

    /* The stored bytes as raw data, through the pipeline and back. */
    size_t encoded_size = in.size;
    uint8_t *encoded = zm_fuzz_exact_copy(in.data, in.size);
    for (unsigned i = 0; i < count; i++)
        if (!((mask >> i) & 1))
            encode_stage(&filters[i], element_size, &encoded, &encoded_size);
    stored = zm_fuzz_exact_copy(encoded, encoded_size);
    out = malloc(in.size ? in.size : 1);
    zm_err_clear(&err);
    rc = zm__filter_decode(filters, count, mask, element_size, stored, encoded_size, out, in.size,
                           &err);
    ZM_FUZZ_CHECK(rc == 0, "%zu bytes through a pipeline of %u (mask 0x%x) do not decode back: %s",
                  in.size, count, mask, err.reason);
    ZM_FUZZ_CHECK(in.size == 0 || memcmp(out, in.data, in.size) == 0,
                  "%zu bytes through a pipeline of %u (mask 0x%x) decode to other bytes", in.size,
                  count, mask);
    free(out);
    free(stored);
    free(encoded);
    return 0;
}
