/* libFuzzer target: the shuffle filter decoder (filter 2), alone and next
 * to fletcher32 in both orders (the order decides whether the checksum's 4
 * bytes were shuffled: they are bytes past the last whole element, which
 * shuffle leaves in place).
 *
 * Input: the element size in the filter's cd_values (1 byte, 0: none
 * given), the dataset's element size (1 byte), then the stored bytes.
 *
 * Properties: with no element size at all, -EIO with a reason; otherwise
 * the decoded bytes are the stored ones unshuffled (read here element by
 * element: byte j of element i is stored at j·n + i), shuffling any bytes
 * and decoding gives them back (with either fletcher32 order too), and a
 * stored size other than the chunk's is refused.
 */
#include "fuzz_filters.h"

static int decode(const zm__filter *filters, unsigned count, size_t element_size, const uint8_t *in,
                  size_t in_size, uint8_t *out, size_t raw_size)
{
    uint8_t *stored = zm_fuzz_exact_copy(in, in_size);
    zm_err err;
    zm_err_clear(&err);
    int rc =
        zm__filter_decode(filters, count, 0, element_size, stored, in_size, out, raw_size, &err);
    free(stored);
    if (rc != 0) {
        static const int allowed[] = {-EIO, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__filter_decode");
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_input in = {data, size};
    unsigned cd_element = (unsigned)zm_fuzz_take(&in, 1);
    size_t dataset_element = (size_t)zm_fuzz_take(&in, 1);
    const uint8_t *bytes = in.data;
    size_t n = in.size;

    zm__filter filters[2] = {zm_fuzz_filter(ZM__FILTER_SHUFFLE),
                             zm_fuzz_filter(ZM__FILTER_FLETCHER32)};
    if (cd_element != 0) {
        filters[0].cd_count = 1;
        filters[0].cd_values[0] = cd_element;
    }
    size_t element = cd_element != 0 ? cd_element : dataset_element;

    uint8_t *out = malloc(n + 4);
    uint8_t *expected = malloc(n + 4);
    uint8_t *work = malloc(n + 4);
    if (out == NULL || expected == NULL || work == NULL)
        abort();

    /* Alone: the stored bytes unshuffled. */
    int rc = decode(filters, 1, dataset_element, bytes, n, out, n);
    if (element == 0) {
        ZM_FUZZ_CHECK(rc == -EIO, "shuffle with no element size decoded");
        goto done;
    }
    ZM_FUZZ_CHECK(rc == 0, "a shuffled chunk of %zu bytes, element %zu, refused", n, element);
    if (n > 0) {
        zm_fuzz_shuffle(bytes, n, element, expected, 1);
        ZM_FUZZ_CHECK(memcmp(out, expected, n) == 0, "unshuffle of %zu bytes by %zu is wrong", n,
                      element);
    }
    /* A stored size that is not the chunk's. */
    if (n > 0)
        ZM_FUZZ_CHECK(decode(filters, 1, dataset_element, bytes, n - 1, out, n) == -EIO,
                      "a shuffled chunk one byte short decoded");

    /* Shuffled here, decoded back. */
    zm_fuzz_shuffle(bytes, n, element, work, 0);
    ZM_FUZZ_CHECK(decode(filters, 1, dataset_element, work, n, out, n) == 0 &&
                      (n == 0 || memcmp(out, bytes, n) == 0),
                  "shuffle then unshuffle of %zu bytes by %zu is not the identity", n, element);

    /* Shuffle, then fletcher32 over the shuffled bytes. */
    zm_fuzz_put32(work + n, zm_fuzz_fletcher32(work, n));
    ZM_FUZZ_CHECK(decode(filters, 2, dataset_element, work, n + 4, out, n) == 0 &&
                      (n == 0 || memcmp(out, bytes, n) == 0),
                  "shuffle + fletcher32 of %zu bytes does not decode back", n);

    /* Fletcher32 first, then shuffle over the data and its checksum. */
    zm__filter reversed[2] = {filters[1], filters[0]};
    memcpy(expected, bytes, n);
    zm_fuzz_put32(expected + n, zm_fuzz_fletcher32(bytes, n));
    zm_fuzz_shuffle(expected, n + 4, element, work, 0);
    ZM_FUZZ_CHECK(decode(reversed, 2, dataset_element, work, n + 4, out, n) == 0 &&
                      (n == 0 || memcmp(out, bytes, n) == 0),
                  "fletcher32 + shuffle of %zu bytes does not decode back", n);

done:
    free(out);
    free(expected);
    free(work);
    return 0;
}
