/* libFuzzer target: the zstd filter decoder (filter 32015: bare zstd
 * frames). Input as fuzz_filters.h says; the settings byte picks the level
 * (1-19), whether the frame records its size and whether it has a checksum,
 * for the round trip.
 *
 * Properties: decoding to exactly raw_size succeeds exactly when libzstd's
 * streaming decoder (a different code path from the one-shot call the
 * filter uses) decodes every frame to raw_size bytes in all, and gives its
 * bytes; a failure is -EIO with a reason; the unknown-size decoder agrees
 * and stays within its limit; libzstd's compression of any bytes, with or
 * without the content size and checksum, decodes back to them.
 */
#include <zstd.h>

#include "fuzz_filters.h"

/* Every frame of in decoded with ZSTD_decompressStream into cap bytes. */
static int reference_unzstd(const uint8_t *in, size_t in_size, uint8_t *out, size_t cap,
                            size_t *produced)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (dctx == NULL)
        abort();
    ZSTD_inBuffer input = {in, in_size, 0};
    ZSTD_outBuffer output = {out, cap, 0};
    int result = 0;
    size_t rc = 0;
    while (input.pos < input.size) {
        size_t before_in = input.pos, before_out = output.pos;
        rc = ZSTD_decompressStream(dctx, &output, &input);
        if (ZSTD_isError(rc)) {
            result = -1;
            break;
        }
        if (input.pos == before_in && output.pos == before_out) {
            result = -1; /* no progress: the output is full */
            break;
        }
    }
    /* rc is 0 only at the end of a frame: anything else is a frame cut off.
     * No bytes at all are no frames: nothing. */
    if (result == 0 && rc != 0)
        result = -1;
    *produced = output.pos;
    ZSTD_freeDCtx(dctx);
    return result;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_chunk c = zm_fuzz_chunk_read(data, size);
    zm__filter filter = zm_fuzz_filter(ZM__FILTER_ZSTD);
    filter.cd_count = 1;
    filter.cd_values[0] = 3;

    uint8_t *out = NULL;
    int rc = zm_fuzz_decode(&filter, 4, c.stored, c.stored_size, c.raw_size, &out);

    uint8_t *reference = malloc(c.raw_size + 1);
    size_t produced = 0;
    int reference_rc =
        reference_unzstd(c.stored, c.stored_size, reference, c.raw_size + 1, &produced);
    int reference_ok = reference_rc == 0 && produced == c.raw_size;
    ZM_FUZZ_CHECK((rc == 0) == reference_ok,
                  "decoding to %zu bytes: %d; streaming: %s with %zu bytes", c.raw_size, rc,
                  reference_rc == 0 ? "ends" : "fails", produced);
    if (rc == 0)
        ZM_FUZZ_CHECK(c.raw_size == 0 || memcmp(out, reference, c.raw_size) == 0,
                      "the one-shot and streaming decoders disagree on the bytes");
    free(reference);

    zm_fuzz_check_unsized(&filter, c.stored, c.stored_size, c.raw_size, rc, out);
    free(out);

    int level = 1 + (int)(c.settings % 19);
    int content_size = (c.settings >> 5) & 1, checksum = (c.settings >> 6) & 1;
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    size_t bound = ZSTD_compressBound(c.stored_size);
    uint8_t *encoded = malloc(bound);
    if (cctx == NULL || encoded == NULL)
        abort();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, content_size);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum);
    size_t encoded_size = ZSTD_compress2(cctx, encoded, bound, c.stored, c.stored_size);
    if (ZSTD_isError(encoded_size))
        abort();
    char how[64];
    snprintf(how, sizeof how, "zstd level %d (size %d, checksum %d)", level, content_size,
             checksum);
    zm_fuzz_check_round_trip(&filter, 4, c.stored, c.stored_size, encoded, encoded_size, how);
    ZSTD_freeCCtx(cctx);
    free(encoded);
    return 0;
}
