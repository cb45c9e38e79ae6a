/* HDF5 filter pipelines decoded without HDF5.
 *
 * HDF5 decodes a chunk by running its dataset's filters in reverse order,
 * skipping those whose bit is set in the chunk's filter mask. Doing the same
 * here, with zlib, libzstd and c-blosc called directly, lets chunks be
 * decoded on our own threads instead of one at a time under HDF5's global
 * lock. Each filter below reproduces what the HDF5 filter that wrote the
 * chunk expects on reading (H5Zdeflate.c, H5Zshuffle.c, H5Zfletcher32.c,
 * h5py's lzf_filter.c, the HDF Group's zstd filter, PyTables' blosc filter),
 * and checks sizes strictly: a chunk decodes to exactly raw_size bytes or
 * the call fails with -EIO and a reason, and nothing is ever written past a
 * buffer's end whatever the stored bytes say.
 */
#include "source/filters.h"

#include <blosc.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l/igzip_lib.h>
#include <libdeflate.h>
#include <pthread.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

/* Bytes fletcher32 appends to a chunk. */
#define ZM__FLETCHER_LEN 4

/* First guess for an output of unknown size, before doubling. */
#define ZM__GUESS_MIN 65536

/* Whether filter index i was skipped for this chunk. */
static bool zm__masked(unsigned filter_mask, unsigned i)
{
    return i < sizeof filter_mask * CHAR_BIT && (filter_mask >> i) & 1u;
}

static size_t zm__add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

int zm__filter_supported(unsigned id)
{
    switch (id) {
    case ZM__FILTER_DEFLATE:
    case ZM__FILTER_SHUFFLE:
    case ZM__FILTER_FLETCHER32:
    case ZM__FILTER_LZF:
    case ZM__FILTER_BLOSC:
    case ZM__FILTER_ZSTD:
        return 1;
    default:
        return 0;
    }
}

const char *zm__filter_name(unsigned id, char buf[32])
{
    switch (id) {
    case ZM__FILTER_DEFLATE:
        return "deflate";
    case ZM__FILTER_SHUFFLE:
        return "shuffle";
    case ZM__FILTER_FLETCHER32:
        return "fletcher32";
    case ZM__FILTER_SZIP:
        return "szip";
    case ZM__FILTER_NBIT:
        return "nbit";
    case ZM__FILTER_SCALEOFFSET:
        return "scaleoffset";
    case ZM__FILTER_LZF:
        return "lzf";
    case ZM__FILTER_BLOSC:
        return "blosc";
    case ZM__FILTER_ZSTD:
        return "zstd";
    default:
        snprintf(buf, 32, "filter %u", id);
        return buf;
    }
}

/* ---- fletcher32 --------------------------------------------------------- */

/* H5_checksum_fletcher32 exactly: 16-bit words read big-endian whatever the
 * host, both sums starting at 0 (not 0xffff as in the textbook version), a
 * reduction every 360 words (the most that cannot overflow 32 bits), and an
 * odd last byte taken as the high half of a final word. */
static uint32_t zm__fletcher32(const uint8_t *data, size_t length)
{
    size_t words = length / 2;
    uint32_t sum1 = 0, sum2 = 0;

    while (words > 0) {
        size_t block = words > 360 ? 360 : words;
        words -= block;
        do {
            sum1 += ((uint32_t)data[0] << 8) | data[1];
            data += 2;
            sum2 += sum1;
        } while (--block);
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (length % 2) {
        sum1 += (uint32_t)data[0] << 8;
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (sum2 << 16) | sum1;
}

/* Verifies the checksum HDF5 stored in a chunk's last 4 bytes
 * (little-endian) and returns the size without them. HDF5 also accepts the
 * value its releases before 1.6.3 computed on little-endian hosts: the same
 * sums with the two bytes of each 16-bit half swapped. */
static int zm__fletcher32_check(const uint8_t *src, size_t size, size_t *stripped, zm_err *err)
{
    if (size < ZM__FLETCHER_LEN)
        return zm_err_set(err, -EIO, "fletcher32: chunk of %zu bytes is shorter than its checksum",
                          size);
    size_t body = size - ZM__FLETCHER_LEN;
    const uint8_t *s = src + body;
    uint32_t stored =
        (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
    uint32_t sum = zm__fletcher32(src, body);
    uint32_t reversed = ((sum & 0x00ff00ffu) << 8) | ((sum >> 8) & 0x00ff00ffu);
    if (stored != sum && stored != reversed)
        return zm_err_set(err, -EIO,
                          "fletcher32 checksum mismatch (stored 0x%08x, computed 0x%08x over %zu "
                          "bytes)",
                          (unsigned)stored, (unsigned)sum, body);
    *stripped = body;
    return 0;
}

/* ---- shuffle ------------------------------------------------------------ */

/* Undoes HDF5's byte shuffle for n elements of `size` bytes: the stored
 * bytes hold byte 0 of every element, then byte 1 of every element, and so
 * on. Writing the output in order and reading `size` streams keeps the
 * writes sequential; a constant size lets the compiler unroll the inner
 * loop for the common widths. */
static inline void zm__unshuffle_n(uint8_t *restrict dst, const uint8_t *restrict src, size_t n,
                                   size_t size)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < size; j++)
            dst[i * size + j] = src[j * n + i];
}

static void zm__unshuffle(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes,
                          size_t size)
{
    size_t n = bytes / size;
    /* Like H5Z_filter_shuffle: nothing to undo for 1-byte elements or
     * fewer than two elements. */
    if (size <= 1 || n <= 1) {
        memcpy(dst, src, bytes);
        return;
    }
    switch (size) {
    case 2:
        zm__unshuffle_n(dst, src, n, 2);
        break;
    case 4:
        zm__unshuffle_n(dst, src, n, 4);
        break;
    case 8:
        zm__unshuffle_n(dst, src, n, 8);
        break;
    default:
        zm__unshuffle_n(dst, src, n, size);
        break;
    }
    /* HDF5 leaves bytes past the last whole element where they were: this
     * happens when a filter that changes the size (fletcher32) ran first. */
    size_t whole = n * size;
    memcpy(dst + whole, src + whole, bytes - whole);
}

/* ---- codecs: decode src into dst[0 .. cap), report the size produced ---- */

/* libdeflate inflates about twice as fast as zlib; its decompressor holds
 * no stream state between calls, so one per thread is kept for reuse. */
static pthread_key_t zm__deflate_key;
static pthread_once_t zm__deflate_once = PTHREAD_ONCE_INIT;

static void zm__deflate_free(void *d) { libdeflate_free_decompressor(d); }
static void zm__deflate_key_init(void) { pthread_key_create(&zm__deflate_key, zm__deflate_free); }

static struct libdeflate_decompressor *zm__deflate_decompressor(void)
{
    pthread_once(&zm__deflate_once, zm__deflate_key_init);
    struct libdeflate_decompressor *d = pthread_getspecific(zm__deflate_key);
    if (d == NULL) {
        d = libdeflate_alloc_decompressor();
        if (d != NULL)
            pthread_setspecific(zm__deflate_key, d);
    }
    return d;
}

/* zlib's inflate (inflateInit's zlib wrapper, as H5Zdeflate uses, or
 * gzip's), fed in pieces of at most UINT_MAX bytes so that chunks over
 * 4 GiB work. */
static int zm__inflate_zlib(const char *name, bool gzip, const uint8_t *src, size_t src_size,
                            uint8_t *dst, size_t cap, size_t *produced, zm_err *err)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    int rc = inflateInit2(&zs, gzip ? 16 + MAX_WBITS : MAX_WBITS);
    if (rc == Z_MEM_ERROR)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", name);
    if (rc != Z_OK)
        return zm_err_set(err, -EIO, "%s: inflateInit failed (%d)", name, rc);

    size_t in_left = src_size, out_left = cap;
    zs.next_in = (Bytef *)src; /* zlib's API is not const-correct; it only reads. */
    zs.next_out = dst;
    int result = 0;
    for (;;) {
        if (zs.avail_in == 0 && in_left > 0) {
            zs.avail_in = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
            in_left -= zs.avail_in;
        }
        if (zs.avail_out == 0 && out_left > 0) {
            zs.avail_out = out_left > UINT_MAX ? UINT_MAX : (uInt)out_left;
            out_left -= zs.avail_out;
        }
        rc = inflate(&zs, Z_NO_FLUSH);
        if (rc == Z_OK)
            continue;
        if (rc == Z_STREAM_END) {
            if (!gzip)
                break;
            /* Zero padding, then another member or the end. */
            while (zs.avail_in > 0 || in_left > 0) {
                if (zs.avail_in == 0) {
                    zs.avail_in = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
                    in_left -= zs.avail_in;
                }
                if (*zs.next_in != 0)
                    break;
                zs.next_in++;
                zs.avail_in--;
            }
            if (zs.avail_in == 0 && in_left == 0)
                break;
            if (zs.next_in[0] != 0x1f) {
                result = zm_err_set(err, -EIO, "%s: %zu bytes after the gzip stream are not gzip",
                                    name, (size_t)zs.avail_in + in_left);
                break;
            }
            rc = inflateReset(&zs);
            if (rc != Z_OK) {
                result = zm_err_set(err, -EIO, "%s: inflateReset failed (%d)", name, rc);
                break;
            }
            continue;
        }
        if (rc == Z_BUF_ERROR) {
            /* No progress was possible: either the output is full while the
             * stream goes on, or the input ran out before the stream ended. */
            if (zs.avail_out == 0 && out_left == 0) {
                result = ZM__TOO_SMALL;
            } else {
                result = zm_err_set(err, -EIO,
                                    "%s: stream truncated (%zu stored bytes end before the "
                                    "stream does)",
                                    name, src_size);
            }
        } else if (rc == Z_DATA_ERROR) {
            result = zm_err_set(err, -EIO, "%s: stream corrupt (%s)", name,
                                zs.msg ? zs.msg : "invalid data");
        } else if (rc == Z_NEED_DICT) {
            result =
                zm_err_set(err, -EIO, "%s: stream corrupt (asks for a preset dictionary)", name);
        } else if (rc == Z_MEM_ERROR) {
            result = zm_err_set(err, -ENOMEM, "%s: out of memory", name);
        } else {
            result = zm_err_set(err, -EIO, "%s: inflate failed (%d%s%s)", name, rc,
                                zs.msg ? ": " : "", zs.msg ? zs.msg : "");
        }
        break;
    }
    *produced = cap - out_left - zs.avail_out;
    inflateEnd(&zs);
    return result;
}

int zm__inflate_sized(const char *name, bool gzip, const uint8_t *src, size_t src_size,
                      uint8_t *dst, size_t cap, size_t *produced, zm_err *err)
{
    *produced = 0;
    struct libdeflate_decompressor *d = zm__deflate_decompressor();
    if (d != NULL) {
        size_t in_used = 0, out_made = 0;
        enum libdeflate_result r =
            gzip ? libdeflate_gzip_decompress_ex(d, src, src_size, dst, cap, &in_used, &out_made)
                 : libdeflate_zlib_decompress_ex(d, src, src_size, dst, cap, &in_used, &out_made);
        /* A gzip member followed by anything (padding, more members) is
         * left to zlib, which reads on. */
        if (r == LIBDEFLATE_SUCCESS && (!gzip || in_used == src_size)) {
            *produced = out_made;
            return 0;
        }
        if (r == LIBDEFLATE_INSUFFICIENT_SPACE)
            return ZM__TOO_SMALL;
    }
    return zm__inflate_zlib(name, gzip, src, src_size, dst, cap, produced, err);
}

/* Deflate as HDF5 stores it: a zlib stream, possibly followed by bytes
 * HDF5 ignores. */
static int zm__inflate(const void *filter, const uint8_t *src, size_t src_size, uint8_t *dst,
                       size_t cap, size_t *produced, zm_err *err)
{
    (void)filter;
    return zm__inflate_sized("deflate", false, src, src_size, dst, cap, produced, err);
}

/* LZF as h5py's filter stores it: the raw stream liblzf produces, no
 * header. (When LZF could not shrink a chunk, h5py's filter fails, HDF5
 * stores the chunk as it was and sets the filter's bit in the mask, so such
 * chunks never reach here.) Each control byte is either a literal run
 * (values 0-31: that many plus one bytes follow) or a back reference (top 3
 * bits: length - 2, 7 meaning an extra length byte follows; low 5 bits and
 * the next byte: distance - 1). Every read and write is bounds-checked, so
 * corrupt input can only fail. */
static int zm__lzf(const void *filter, const uint8_t *src, size_t src_size, uint8_t *dst,
                   size_t cap, size_t *produced, zm_err *err)
{
    (void)filter;
    const uint8_t *ip = src, *end = src + src_size;
    size_t op = 0;
    int result = 0;

    while (ip < end) {
        size_t ctrl = *ip++;
        if (ctrl < 32) {
            size_t length = ctrl + 1;
            if ((size_t)(end - ip) < length) {
                result = zm_err_set(err, -EIO,
                                    "lzf: stream corrupt (literal run of %zu bytes at offset %zu "
                                    "passes the end of the %zu stored bytes)",
                                    length, (size_t)(ip - src) - 1, src_size);
                break;
            }
            if (cap - op < length) {
                result = ZM__TOO_SMALL;
                break;
            }
            memcpy(dst + op, ip, length);
            ip += length;
            op += length;
        } else {
            size_t length = ctrl >> 5;
            size_t distance = (ctrl & 0x1f) << 8;
            if (length == 7) {
                if (ip >= end)
                    goto truncated;
                length += *ip++;
            }
            if (ip >= end)
                goto truncated;
            distance += *ip++;
            distance += 1;
            length += 2;
            if (distance > op) {
                result = zm_err_set(err, -EIO,
                                    "lzf: stream corrupt (back reference %zu bytes before output "
                                    "offset %zu)",
                                    distance, op);
                break;
            }
            if (cap - op < length) {
                result = ZM__TOO_SMALL;
                break;
            }
            uint8_t *d = dst + op;
            const uint8_t *r = d - distance;
            if (distance >= length) {
                memcpy(d, r, length);
            } else {
                /* The copy overlaps its own output (a repeated pattern):
                 * byte by byte, in order, is what the format means. */
                for (size_t k = 0; k < length; k++)
                    d[k] = r[k];
            }
            op += length;
        }
    }
    *produced = op;
    return result;

truncated:
    *produced = op;
    return zm_err_set(err, -EIO, "lzf: stream truncated (back reference cut off at offset %zu)",
                      src_size);
}

/* The thread's zstd context, freed by the key's destructor as it ends. */
static pthread_key_t zm__zstd_key;
static pthread_once_t zm__zstd_once = PTHREAD_ONCE_INIT;

static void zm__zstd_free(void *context)
{
    ZSTD_freeDCtx(context);
}

static void zm__zstd_key_init(void)
{
    (void)pthread_key_create(&zm__zstd_key, zm__zstd_free);
}

ZSTD_DCtx *zm__zstd_context(void)
{
    pthread_once(&zm__zstd_once, zm__zstd_key_init);
    ZSTD_DCtx *context = pthread_getspecific(zm__zstd_key);
    if (context == NULL && (context = ZSTD_createDCtx()) != NULL &&
        pthread_setspecific(zm__zstd_key, context) != 0) {
        ZSTD_freeDCtx(context);
        context = NULL;
    }
    return context;
}

/* Zstandard: one or more bare frames (the HDF Group's filter 32015,
 * numcodecs' Zstd, zarr's zstd). ZSTD_decompressDCtx does not need a frame
 * to record its content size: it decodes into the capacity given and fails
 * if that is too small, and verifies a frame's checksum when the writer
 * included one. */
int zm__unzstd_sized(const char *name, const uint8_t *src, size_t src_size, uint8_t *dst,
                     size_t cap, size_t *produced, zm_err *err)
{
    *produced = 0;
    ZSTD_DCtx *context = zm__zstd_context();
    if (context == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", name);
    size_t rc = ZSTD_decompressDCtx(context, dst, cap, src, src_size);
    if (ZSTD_isError(rc)) {
        ZSTD_ErrorCode code = ZSTD_getErrorCode(rc);
        if (code == ZSTD_error_dstSize_tooSmall)
            return ZM__TOO_SMALL;
        if (code == ZSTD_error_memory_allocation)
            return zm_err_set(err, -ENOMEM, "%s: out of memory", name);
        return zm_err_set(err, -EIO, "%s: stream corrupt (%s)", name, ZSTD_getErrorName(rc));
    }
    *produced = rc;
    return 0;
}

static int zm__unzstd(const void *filter, const uint8_t *src, size_t src_size, uint8_t *dst,
                      size_t cap, size_t *produced, zm_err *err)
{
    (void)filter;
    return zm__unzstd_sized("zstd", src, src_size, dst, cap, produced, err);
}

size_t zm__zstd_size(const uint8_t *src, size_t src_size)
{
    size_t total = 0;
    while (src_size > 0) {
        unsigned long long n = ZSTD_getFrameContentSize(src, src_size);
        size_t frame = ZSTD_findFrameCompressedSize(src, src_size);
        if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(frame) ||
            n > SIZE_MAX - total)
            return ZM__SIZE_UNKNOWN;
        total += (size_t)n;
        src += frame;
        src_size -= frame;
    }
    return total;
}

int zm__blosc_size(const char *name, const uint8_t *src, size_t src_size, size_t *nbytes,
                   zm_err *err)
{
    if (src_size < BLOSC_MIN_HEADER_LENGTH)
        return zm_err_set(err, -EIO,
                          "%s: stream truncated (%zu stored bytes, the header alone needs %d)",
                          name, src_size, BLOSC_MIN_HEADER_LENGTH);
    if (blosc_cbuffer_validate(src, src_size, nbytes) != 0) {
        size_t claimed_nbytes, claimed_cbytes, blocksize;
        blosc_cbuffer_sizes(src, &claimed_nbytes, &claimed_cbytes, &blocksize);
        return zm_err_set(err, -EIO,
                          "%s: stream corrupt (its header claims %zu compressed bytes for %zu "
                          "decoded; %zu bytes are stored)",
                          name, claimed_cbytes, claimed_nbytes, src_size);
    }
    return 0;
}

/* Blosc as PyTables' / hdf5plugin's filter 32001 and numcodecs' Blosc
 * store it: one blosc buffer, which records its own inner codec, shuffle
 * or bitshuffle and type size, so no parameters are needed to decode. The
 * _ctx call uses no global state, so any number of threads can decode at
 * once without blosc_init. */
int zm__unblosc_sized(const char *name, const uint8_t *src, size_t src_size, uint8_t *dst,
                      size_t cap, size_t *produced, zm_err *err)
{
    *produced = 0;
    size_t nbytes;
    int rc = zm__blosc_size(name, src, src_size, &nbytes, err);
    if (rc < 0)
        return rc;
    if (nbytes > cap)
        return ZM__TOO_SMALL;
    if (nbytes == 0)
        return 0;
    int n = blosc_decompress_ctx(src, dst, cap, 1);
    if (n <= 0) {
        /* A compressor this c-blosc was built without is a codec we lack,
         * not damage. */
        const char *library = blosc_cbuffer_complib(src);
        const char *known = blosc_list_compressors();
        if (library != NULL && known != NULL && strcasestr(known, library) == NULL)
            return zm_err_set(err, -ENOTSUP,
                              "%s: the chunk is compressed with %s, which this "
                              "c-blosc does not decode (it has %s)",
                              name, library, known);
        return zm_err_set(err, -EIO, "%s: stream corrupt (blosc_decompress_ctx returned %d)", name,
                          n);
    }
    if ((size_t)n != nbytes)
        return zm_err_set(err, -EIO, "%s: decoded %d bytes, its header says %zu", name, n, nbytes);
    *produced = (size_t)n;
    return 0;
}

static int zm__unblosc(const void *filter, const uint8_t *src, size_t src_size, uint8_t *dst,
                       size_t cap, size_t *produced, zm_err *err)
{
    (void)filter;
    return zm__unblosc_sized("blosc", src, src_size, dst, cap, produced, err);
}

/* The size a compressor's output will have, when its stream says so (blosc
 * and zstd record it), so an output of unknown size is allocated once. */
static size_t zm__size_hint(unsigned id, const uint8_t *src, size_t src_size)
{
    size_t nbytes;
    if (id == ZM__FILTER_BLOSC)
        return zm__blosc_size("blosc", src, src_size, &nbytes, NULL) == 0 ? nbytes
                                                                          : ZM__SIZE_UNKNOWN;
    if (id == ZM__FILTER_ZSTD)
        return zm__zstd_size(src, src_size);
    return ZM__SIZE_UNKNOWN;
}

static zm__sized_decoder zm__codec_for(unsigned id)
{
    switch (id) {
    case ZM__FILTER_DEFLATE:
        return zm__inflate;
    case ZM__FILTER_LZF:
        return zm__lzf;
    case ZM__FILTER_ZSTD:
        return zm__unzstd;
    case ZM__FILTER_BLOSC:
        return zm__unblosc;
    default:
        return NULL;
    }
}

int zm__decode_exact(zm__sized_decoder decode, const void *codec, const char *name,
                     const uint8_t *src, size_t src_size, uint8_t *dst, size_t expected,
                     zm_err *err)
{
    size_t produced = 0;
    int rc = decode(codec, src, src_size, dst, expected, &produced, err);
    if (rc == ZM__TOO_SMALL) {
        /* Out of room: more bytes than expected, or a stream cut short
         * just after them (a gzip stream without its trailer) that a
         * full output cannot tell apart. A little more room tells. */
        size_t room = zm__add_sat(expected, 64);
        uint8_t *spare = room < SIZE_MAX ? malloc(room) : NULL;
        if (spare != NULL) {
            rc = decode(codec, src, src_size, spare, room, &produced, err);
            free(spare);
            if (rc < 0)
                return rc;
            if (rc == 0 && produced < expected)
                return zm_err_set(err, -EIO, "%s: decoded %zu bytes, expected %zu", name,
                                  produced, expected);
        }
        return zm_err_set(err, -EIO, "%s: decodes to more than the %zu bytes expected", name,
                          expected);
    }
    if (rc < 0)
        return rc;
    if (produced != expected)
        return zm_err_set(err, -EIO, "%s: decoded %zu bytes, expected %zu", name, produced,
                          expected);
    return 0;
}

int zm__decode_grow(zm__sized_decoder decode, const void *codec, const char *name, size_t hint,
                    const uint8_t *src, size_t src_size, size_t limit, uint8_t **out,
                    size_t *out_size, zm_err *err)
{
    size_t cap = hint;
    bool hinted = cap != ZM__SIZE_UNKNOWN;
    if (hinted && cap > limit)
        return zm_err_set(err, -EIO, "%s: the stream says it decodes to %zu bytes, more than %zu",
                          name, cap, limit);
    if (!hinted) {
        cap = src_size > SIZE_MAX / 4 ? SIZE_MAX : src_size * 4;
        if (cap < ZM__GUESS_MIN)
            cap = ZM__GUESS_MIN;
        if (cap > limit)
            cap = limit;
    }
    for (;;) {
        uint8_t *buf = malloc(cap > 0 ? cap : 1);
        if (buf == NULL)
            return zm_err_set(err, -ENOMEM, "%s: out of memory for %zu bytes", name, cap);
        size_t produced = 0;
        int rc = decode(codec, src, src_size, buf, cap, &produced, err);
        if (rc == 0) {
            *out = buf;
            *out_size = produced;
            return 0;
        }
        free(buf);
        if (rc < 0)
            return rc;
        if (hinted || cap >= limit)
            return zm_err_set(err, -EIO, "%s: decodes to more than %zu bytes", name, cap);
        cap = cap > limit / 2 ? limit : cap * 2;
    }
}

int zm__filter_decode(const zm__filter *filters, unsigned count, unsigned filter_mask,
                      size_t element_size, const uint8_t *in, size_t in_size, uint8_t *out,
                      size_t raw_size, zm_err *err)
{
    char namebuf[32];
    if (count > ZM__FILTER_MAX)
        return zm_err_set(err, -ENOTSUP, "a pipeline of %u filters is not supported (at most %d)",
                          count, ZM__FILTER_MAX);

    /* Refuse an unsupported filter before decoding anything, so the caller
     * hears "not supported" rather than a failure from a later stage. */
    for (unsigned i = 0; i < count; i++) {
        if (zm__masked(filter_mask, i) || zm__filter_supported(filters[i].id))
            continue;
        const char *name = zm__filter_name(filters[i].id, namebuf);
        int reported = (int)strnlen(filters[i].name, sizeof filters[i].name);
        if (reported > 0 && strncmp(filters[i].name, name, sizeof filters[i].name) != 0)
            return zm_err_set(err, -ENOTSUP, "%s (\"%.*s\") is not supported", name, reported,
                              filters[i].name);
        return zm_err_set(err, -ENOTSUP, "%s is not supported", name);
    }

    /* expected[i] is the size of the data filter i received when the chunk
     * was written, which is what decoding it must give back: known from
     * raw_size through shuffle (same size) and fletcher32 (+4), unknown
     * after a compressor. */
    size_t expected[ZM__FILTER_MAX];
    size_t size = raw_size;
    int lowest = -1; /* the first filter that ran, decoded last into out */
    for (unsigned i = 0; i < count; i++) {
        expected[i] = size;
        if (zm__masked(filter_mask, i))
            continue;
        if (lowest < 0)
            lowest = (int)i;
        if (filters[i].id == ZM__FILTER_FLETCHER32)
            size = size == ZM__SIZE_UNKNOWN ? size : zm__add_sat(size, ZM__FLETCHER_LEN);
        else if (filters[i].id != ZM__FILTER_SHUFFLE)
            size = ZM__SIZE_UNKNOWN;
    }
    /* Every filter HDF5 knows of grows a chunk by little (a compressor's
     * framing on incompressible data), so an intermediate result far bigger
     * than the chunk means a corrupt stream, not data. */
    size_t limit = zm__add_sat(zm__add_sat(raw_size, raw_size / 4), 65536);

    if (lowest < 0) {
        if (in_size != raw_size)
            return zm_err_set(err, -EIO,
                              "stored chunk has %zu bytes, expected %zu (every filter skipped)",
                              in_size, raw_size);
        if (raw_size > 0)
            memcpy(out, in, raw_size);
        return 0;
    }

    const uint8_t *cur = in;
    size_t cur_size = in_size;
    uint8_t *owned = NULL; /* cur, when a previous stage allocated it */
    int rc = 0;

    for (int i = (int)count - 1; i >= lowest; i--) {
        if (zm__masked(filter_mask, (unsigned)i))
            continue;
        const zm__filter *f = &filters[i];
        const char *name = zm__filter_name(f->id, namebuf);
        size_t want = expected[i];
        bool last = i == lowest;
        uint8_t *next = NULL;
        size_t next_size = 0;

        if (f->id == ZM__FILTER_FLETCHER32) {
            if (want != ZM__SIZE_UNKNOWN && cur_size != want + ZM__FLETCHER_LEN) {
                rc = zm_err_set(err, -EIO, "fletcher32: chunk has %zu bytes, expected %zu",
                                cur_size, want + ZM__FLETCHER_LEN);
                break;
            }
            size_t body = 0;
            rc = zm__fletcher32_check(cur, cur_size, &body, err);
            if (rc < 0)
                break;
            /* The checksum is only stripped: the data stays where it is,
             * except on the last stage, which must land in out. */
            if (last) {
                if (body > 0)
                    memcpy(out, cur, body);
            } else {
                cur_size = body;
                continue;
            }
        } else if (f->id == ZM__FILTER_SHUFFLE) {
            size_t element =
                f->cd_count >= 1 && f->cd_values[0] != 0 ? f->cd_values[0] : element_size;
            if (element == 0) {
                rc = zm_err_set(err, -EIO, "shuffle: element size is 0");
                break;
            }
            if (want != ZM__SIZE_UNKNOWN && cur_size != want) {
                rc = zm_err_set(err, -EIO, "shuffle: chunk has %zu bytes, expected %zu", cur_size,
                                want);
                break;
            }
            if (last) {
                next = out;
            } else if ((next = malloc(cur_size > 0 ? cur_size : 1)) == NULL) {
                rc = zm_err_set(err, -ENOMEM, "shuffle: out of memory for %zu bytes", cur_size);
                break;
            }
            if (cur_size > 0)
                zm__unshuffle(next, cur, cur_size, element);
            next_size = cur_size;
        } else {
            zm__sized_decoder codec = zm__codec_for(f->id);
            if (last) {
                rc = zm__decode_exact(codec, f, name, cur, cur_size, out, raw_size, err);
                next = out;
                next_size = raw_size;
            } else if (want != ZM__SIZE_UNKNOWN) {
                if ((next = malloc(want > 0 ? want : 1)) == NULL) {
                    rc = zm_err_set(err, -ENOMEM, "%s: out of memory for %zu bytes", name, want);
                    break;
                }
                rc = zm__decode_exact(codec, f, name, cur, cur_size, next, want, err);
                next_size = want;
            } else {
                rc = zm__decode_grow(codec, f, name, zm__size_hint(f->id, cur, cur_size), cur,
                                     cur_size, limit, &next, &next_size, err);
            }
            if (rc < 0) {
                if (next != out)
                    free(next);
                break;
            }
        }
        if (last)
            break;
        free(owned);
        owned = next;
        cur = next;
        cur_size = next_size;
    }
    free(owned);
    return rc;
}

int zm__filter_decode_unsized(const zm__filter *filter, const uint8_t *in, size_t in_size,
                              size_t limit, uint8_t **out, size_t *out_size, zm_err *err)
{
    char name[32];
    zm__filter_name(filter->id, name);
    zm__sized_decoder codec = zm__codec_for(filter->id);
    if (codec == NULL)
        return zm_err_set(err, -ENOTSUP, "%s is not a compressor zarrmount decodes", name);
    return zm__decode_grow(codec, filter, name, zm__size_hint(filter->id, in, in_size), in,
                           in_size, limit, out, out_size, err);
}

/* ISA-L's inflate, where a part of a chunk is wanted: it stops when the
 * part is made, as zlib's does, and runs 1.3-2.5 times as fast as zlib's on
 * single-cell chunks (libdeflate, faster still, takes whole chunks only). */
static const char *zm__isal_error(int rc)
{
    switch (rc) {
    case ISAL_INVALID_BLOCK: return "an invalid block";
    case ISAL_INVALID_SYMBOL: return "an invalid symbol";
    case ISAL_INVALID_LOOKBACK: return "a distance past the start";
    case ISAL_INVALID_WRAPPER: return "not a zlib stream";
    case ISAL_UNSUPPORTED_METHOD: return "not deflate";
    case ISAL_INCORRECT_CHECKSUM: return "a wrong checksum";
    case ISAL_NEED_DICT: return "a preset dictionary";
    default: return "an error";
    }
}

int zm__inflate_prefix(zm__stored_reader read, void *context, size_t stored, size_t raw_size,
                       uint8_t *out, size_t needed, size_t *read_bytes, zm_err *err)
{
    *read_bytes = 0;
    /* A first read of the stored bytes in proportion to the part needed
     * (and a margin), then more in quarters of the chunk as the stream
     * asks for them. */
    size_t first = raw_size ? (size_t)((double)stored * needed / raw_size * 1.1) + 4096 : stored;
    size_t step = stored / 4 + 4096;
    if (first > stored)
        first = stored;
    if (needed > UINT32_MAX || first > UINT32_MAX || step > UINT32_MAX)
        return zm_err_set(err, -EINVAL, "deflate: a chunk part of %zu bytes is too large", needed);
    uint8_t *buffer = malloc(first > step ? first : step);
    struct inflate_state *state = malloc(sizeof *state);
    if (buffer == NULL || state == NULL) {
        free(buffer);
        free(state);
        return zm_err_set(err, -ENOMEM, "deflate: out of memory for a chunk");
    }
    isal_inflate_init(state);
    state->crc_flag = ISAL_ZLIB;
    state->next_out = out;
    state->avail_out = (uint32_t)needed;
    size_t offset = 0;
    int rc = 0;
    while (rc == 0 && state->avail_out > 0) {
        if (state->avail_in == 0) {
            size_t want = offset == 0 ? first : step;
            if (want > stored - offset)
                want = stored - offset;
            if (want == 0) {
                rc = zm_err_set(err, -EIO, "deflate: the stream ends after %zu of %zu bytes",
                                needed - state->avail_out, needed);
                break;
            }
            if ((rc = read(context, offset, buffer, want, err)) != 0)
                break;
            offset += want;
            state->next_in = buffer;
            state->avail_in = (uint32_t)want;
        }
        int z = isal_inflate(state);
        if (z < 0 || z == ISAL_NEED_DICT) {
            rc = zm_err_set(err, -EIO, "deflate: corrupt stream (%s)", zm__isal_error(z));
            break;
        }
        if (state->block_state == ISAL_BLOCK_FINISH && state->avail_out > 0) {
            rc = zm_err_set(err, -EIO, "deflate: the stream holds %zu bytes, %zu were expected",
                            needed - state->avail_out, raw_size);
            break;
        }
    }
    free(state);
    free(buffer);
    *read_bytes = offset;
    return rc;
}
