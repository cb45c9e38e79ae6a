/* Our decoders registered with HDF5, for the datasets HDF5 reads itself
 * (variable-length strings, compound members, compact data): lzf, zstd and
 * blosc then decode whether or not the machine has HDF5 plugins for them
 * (Debian has none for zstd, and its lzf plugin does not load with every
 * HDF5). Decoding only: zarrmount never writes. */
#include <stdlib.h>
#include <string.h>

#include "source/source_internal.h"

/* Stored chunks never decode to more than this (HDF5 chunks are < 4 GiB). */
#define DECODE_LIMIT ((size_t)1 << 32)

static size_t decode(unsigned id, unsigned flags, size_t cd_count, const unsigned cd_values[],
                     size_t nbytes, size_t *buffer_size, void **buffer)
{
    if (!(flags & H5Z_FLAG_REVERSE))
        return 0; /* no encoder: writing is not something we do */
    zm__filter filter = {.id = id, .flags = flags};
    filter.cd_count = cd_count < ZM__FILTER_MAX_CD ? cd_count : ZM__FILTER_MAX_CD;
    memcpy(filter.cd_values, cd_values, filter.cd_count * sizeof *cd_values);
    uint8_t *out = NULL;
    size_t out_size = 0;
    zm_err err;
    if (zm__filter_decode_unsized(&filter, *buffer, nbytes, DECODE_LIMIT, &out, &out_size, &err) != 0)
        return 0;
    void *copy = H5allocate_memory(out_size ? out_size : 1, 0);
    if (copy == NULL) {
        free(out);
        return 0;
    }
    memcpy(copy, out, out_size);
    free(out);
    H5free_memory(*buffer);
    *buffer = copy;
    *buffer_size = out_size;
    return out_size;
}

static size_t decode_lzf(unsigned flags, size_t n, const unsigned cd[], size_t nbytes, size_t *size,
                         void **buffer)
{
    return decode(ZM__FILTER_LZF, flags, n, cd, nbytes, size, buffer);
}

static size_t decode_zstd(unsigned flags, size_t n, const unsigned cd[], size_t nbytes, size_t *size,
                          void **buffer)
{
    return decode(ZM__FILTER_ZSTD, flags, n, cd, nbytes, size, buffer);
}

static size_t decode_blosc(unsigned flags, size_t n, const unsigned cd[], size_t nbytes,
                           size_t *size, void **buffer)
{
    return decode(ZM__FILTER_BLOSC, flags, n, cd, nbytes, size, buffer);
}

void zm__h5_register_filters(void)
{
    static const H5Z_class2_t classes[] = {
        {H5Z_CLASS_T_VERS, ZM__FILTER_LZF, 0, 1, "lzf (zarrmount decoder)", NULL, NULL, decode_lzf},
        {H5Z_CLASS_T_VERS, ZM__FILTER_ZSTD, 0, 1, "zstd (zarrmount decoder)", NULL, NULL, decode_zstd},
        {H5Z_CLASS_T_VERS, ZM__FILTER_BLOSC, 0, 1, "blosc (zarrmount decoder)", NULL, NULL,
         decode_blosc},
    };
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        H5Zregister(&classes[i]);
}
