/* libFuzzer target: the cell set's LEB128 gap decoder (zm_cellset_decode).
 *
 * Input: one flags byte, n as 4 bytes (little-endian), then the cell set
 * bytes. Flag bit 0 puts n past uint32 (it must be refused).
 *
 * Properties: a refusal is -EINVAL with a reason; an accepted set is
 * ascending, below n, fewer than n cells unless given as no bytes, and
 * encodes back to exactly the bytes decoded (the encoding is canonical: one
 * spelling per set); its digest is computed without trouble.
 */
#include <errno.h>

#include "fuzz.h"
#include "zarrmount/select.h"

/* No bytes is every cell: n positions are made, so keep n small there. */
#define EVERY_CELL_N_MAX (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zm_fuzz_input in = {data, size};
    unsigned flags = (unsigned)zm_fuzz_take(&in, 1);
    uint64_t n = zm_fuzz_take(&in, 4);
    if (flags & 1)
        n += (uint64_t)1 << 32;
    if (in.size == 0 && n <= ZM_N_MAX)
        n %= EVERY_CELL_N_MAX + 1;

    uint32_t *positions = NULL;
    uint64_t k = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_cellset_decode(in.data, in.size, n, &positions, &k, &err);
    if (rc != 0) {
        static const int allowed[] = {-EINVAL, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm_cellset_decode");
        ZM_FUZZ_CHECK(positions == NULL && k == 0, "a refusal left %llu positions",
                      (unsigned long long)k);
        ZM_FUZZ_CHECK(n <= ZM_N_MAX || rc == -EINVAL, "n past uint32 not refused");
        return 0;
    }
    ZM_FUZZ_CHECK(n <= ZM_N_MAX, "n = %llu past uint32 accepted", (unsigned long long)n);
    if (in.size == 0)
        ZM_FUZZ_CHECK(k == n, "no bytes decoded to %llu of %llu cells", (unsigned long long)k,
                      (unsigned long long)n);
    else
        ZM_FUZZ_CHECK(k < n && k <= in.size, "%zu bytes decoded to %llu cells of %llu", in.size,
                      (unsigned long long)k, (unsigned long long)n);
    for (uint64_t i = 0; i < k; i++) {
        ZM_FUZZ_CHECK(positions[i] < n, "position %u past n = %llu", positions[i],
                      (unsigned long long)n);
        ZM_FUZZ_CHECK(i == 0 || positions[i] > positions[i - 1], "positions not ascending at %llu",
                      (unsigned long long)i);
    }

    uint8_t *bytes = NULL;
    size_t length = 0;
    rc = zm_cellset_encode(positions, k, n, &bytes, &length, &err);
    ZM_FUZZ_CHECK(rc == 0, "a decoded set does not encode: %s", err.reason);
    ZM_FUZZ_CHECK(length == in.size && (length == 0 || memcmp(bytes, in.data, length) == 0),
                  "decode then encode is not the identity (%zu bytes in, %zu out)", in.size,
                  length);

    char digest[17];
    zm_cellset_digest(positions, k, n, digest);
    ZM_FUZZ_CHECK(strlen(digest) == 16 && strspn(digest, "0123456789abcdef") == 16,
                  "digest \"%s\" is not 16 hex digits", digest);
    free(bytes);
    free(positions);
    return 0;
}
