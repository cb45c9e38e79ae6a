/* libFuzzer target: the LZF filter decoder (filter 32000, h5py's: a bare
 * liblzf stream). Input as fuzz_filters.h says; the settings byte picks how
 * the round trip's encoder searches (bit 0: near matches only).
 *
 * Properties: decoding to exactly raw_size agrees with a plain reading of
 * the format written here (liblzf's lzf_d.c, every step checked), in
 * success and in bytes; a failure is -EIO with a reason; the unknown-size
 * decoder agrees and stays within its limit; an encoder written here
 * (literal runs, short and long back references, overlapping copies)
 * produces streams that decode back to their data.
 */
#include "fuzz_filters.h"

/* lzf_d.c's loop. 0 and the size, or -1 for a stream that is cut off,
 * refers before its output, or does not fit in cap bytes. */
static int reference_lzf(const uint8_t *in, size_t in_size, uint8_t *out, size_t cap,
                         size_t *produced)
{
    size_t i = 0, o = 0;
    *produced = 0;
    while (i < in_size) {
        unsigned ctrl = in[i++];
        if (ctrl < 32) {
            size_t run = ctrl + 1;
            if (in_size - i < run || cap - o < run)
                return -1;
            for (size_t j = 0; j < run; j++)
                out[o++] = in[i++];
        } else {
            size_t length = ctrl >> 5;
            if (length == 7) {
                if (i >= in_size)
                    return -1;
                length += in[i++];
            }
            if (i >= in_size)
                return -1;
            size_t back = ((size_t)(ctrl & 0x1f) << 8) + in[i++] + 1;
            length += 2;
            if (back > o || cap - o < length)
                return -1;
            for (size_t j = 0; j < length; j++, o++)
                out[o] = out[o - back];
        }
    }
    *produced = o;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_chunk c = zm_fuzz_chunk_read(data, size);
    zm__filter filter = zm_fuzz_filter(ZM__FILTER_LZF);

    uint8_t *out = NULL;
    int rc = zm_fuzz_decode(&filter, 4, c.stored, c.stored_size, c.raw_size, &out);

    uint8_t *reference = malloc(c.raw_size + 1);
    size_t produced = 0;
    int reference_rc = reference_lzf(c.stored, c.stored_size, reference, c.raw_size + 1, &produced);
    int reference_ok = reference_rc == 0 && produced == c.raw_size;
    ZM_FUZZ_CHECK((rc == 0) == reference_ok, "decoding to %zu bytes: %d; reference: %d with %zu",
                  c.raw_size, rc, reference_rc, produced);
    if (rc == 0)
        ZM_FUZZ_CHECK(c.raw_size == 0 || memcmp(out, reference, c.raw_size) == 0,
                      "the reference reads other bytes");
    free(reference);

    zm_fuzz_check_unsized(&filter, c.stored, c.stored_size, c.raw_size, rc, out);
    free(out);

    /* At most one control byte per 32 literals, never longer than that. */
    uint8_t *encoded = malloc(c.stored_size + c.stored_size / 32 + 2);
    if (encoded == NULL)
        abort();
    int near_only = (int)(c.settings & 1);
    size_t encoded_size = zm_fuzz_encode_lzf(c.stored, c.stored_size, encoded, near_only);
    zm_fuzz_check_round_trip(&filter, 4, c.stored, c.stored_size, encoded, encoded_size,
                             near_only ? "lzf (near matches)" : "lzf");
    free(encoded);
    return 0;
}
