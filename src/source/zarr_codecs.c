/* Zarr chunks decoded: v2 compressors and filters, v3 codec chains, and
 * sharding's index (see zarr_store.h).
 *
 * A chain is decoded from its end: the bytes-to-bytes codecs (compressors,
 * crc32c) in reverse, then the array-to-bytes codec (bytes: its byte order;
 * vlen-utf8: its strings), then the array-to-array ones (transpose), then a
 * v2 array's F order. Each codec reproduces what the writer's codec expects
 * on reading (numcodecs' Blosc, Zstd, Zlib, GZip, LZ4, BZ2, VLenUTF8 and
 * CRC32C; zarr-python 3's bytes, transpose, crc32c and sharding_indexed),
 * through the libraries numcodecs itself calls (c-blosc, libzstd, zlib,
 * liblz4, libbz2) and ISA-L's CRC-32C. Sizes are checked at every stage: a
 * chunk decodes to exactly the bytes its shape says or the call fails with
 * -EIO naming the codec, and nothing is written past a buffer whatever the
 * stored bytes claim. No state outside the call: any number of threads may
 * decode at once.
 */
#include "source/zarr_store.h"

#include "source/filters.h"

#include <bzlib.h>
#include <errno.h>
#include <isa-l/crc.h>
#include <limits.h>
#include <lz4.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* The buffer-less decoding API (zstd_prefix_blocks): declared for static
 * linking only, and exported by the shared library of every zstd 1.5. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

/* The most a chunk of variable-length strings may decode to: its size is
 * in no metadata, and a stream claiming more is taken as damaged rather
 * than allowed to make us allocate without bound. */
#define ZM__STRINGS_CHUNK_MAX ((size_t)1 << 30)

/* Bytes the crc32c codec appends. */
#define ZM__CRC_BYTES 4

/* Bytes of one (offset, nbytes) entry of a shard's index. */
#define ZM__SHARD_ENTRY 16

static size_t zm__add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static uint32_t zm__le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t zm__le64(const uint8_t *p)
{
    return (uint64_t)zm__le32(p) | (uint64_t)zm__le32(p + 4) << 32;
}

static uint64_t zm__be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* ---- CRC-32C ------------------------------------------------------------------ */

uint32_t zm__crc32c(const uint8_t *bytes, size_t size)
{
    /* ISA-L's crc32_iscsi is the reflected Castagnoli CRC without the
     * final inversion, taking an int length: fed in pieces from the usual
     * all-ones start, inverted at the end, it is the CRC-32C every Zarr
     * writer stores (crc32c("123456789") = 0xE3069283). */
    uint32_t crc = 0xFFFFFFFFu;
    while (size > 0) {
        int piece = size > (size_t)INT_MAX ? INT_MAX : (int)size;
        crc = crc32_iscsi((unsigned char *)bytes, piece, crc);
        bytes += piece;
        size -= (size_t)piece;
    }
    return crc ^ 0xFFFFFFFFu;
}

/* ---- one codec: decode src into dst[0 .. cap), say the size produced ---------- */

static int zm__unzlib(const void *c, const uint8_t *src, size_t src_size, uint8_t *dst,
                      size_t cap, size_t *produced, zm_err *err)
{
    /* numcodecs' Zlib is Python's zlib.decompress (one zlib stream, its
     * adler32 checked, bytes after it ignored); its GZip is gzip.GzipFile
     * (gzip members one after another): zm__inflate_sized reads both. */
    const zm__zcodec *codec = c;
    return zm__inflate_sized(codec->name, codec->id == ZM__ZCODEC_GZIP, src, src_size, dst, cap,
                             produced, err);
}

static int zm__unbz2(const void *c, const uint8_t *src, size_t src_size, uint8_t *dst,
                     size_t cap, size_t *produced, zm_err *err)
{
    const zm__zcodec *codec = c;
    /* numcodecs' BZ2 is Python's bz2.decompress: bzip2 streams one after
     * another, each ending with its CRC (checked by libbz2). */
    *produced = 0;
    size_t in_at = 0, out_at = 0;
    int result = 0;
    for (unsigned streams = 0; in_at < src_size; streams++) {
        size_t stream_out = out_at;
        bz_stream bz;
        memset(&bz, 0, sizeof bz);
        int rc = BZ2_bzDecompressInit(&bz, 0, 0);
        if (rc == BZ_MEM_ERROR)
            return zm_err_set(err, -ENOMEM, "%s: out of memory", codec->name);
        if (rc != BZ_OK)
            return zm_err_set(err, -EIO, "%s: BZ2_bzDecompressInit failed (%d)", codec->name, rc);
        for (;;) {
            size_t in_piece = src_size - in_at, out_piece = cap - out_at;
            bz.next_in = (char *)(src + in_at);
            bz.avail_in = in_piece > UINT_MAX ? UINT_MAX : (unsigned)in_piece;
            bz.next_out = (char *)(dst + out_at);
            bz.avail_out = out_piece > UINT_MAX ? UINT_MAX : (unsigned)out_piece;
            unsigned in_given = bz.avail_in, out_given = bz.avail_out;
            rc = BZ2_bzDecompress(&bz);
            in_at += in_given - bz.avail_in;
            out_at += out_given - bz.avail_out;
            if (rc == BZ_STREAM_END)
                break;
            if (rc == BZ_OK) {
                if (in_given - bz.avail_in == 0 && out_given - bz.avail_out == 0) {
                    /* No progress: out of room, or out of input. */
                    if (out_at == cap)
                        result = ZM__TOO_SMALL;
                    else
                        result = zm_err_set(err, -EIO,
                                            "%s: stream truncated (its %zu stored bytes end "
                                            "before the stream does)",
                                            codec->name, src_size);
                    break;
                }
                continue;
            }
            if (rc == BZ_MEM_ERROR) {
                result = zm_err_set(err, -ENOMEM, "%s: out of memory", codec->name);
            } else if (streams > 0) {
                /* What follows a whole stream and is not bzip2 is
                 * ignored, as bz2.decompress ignores it. */
                out_at = stream_out;
                in_at = src_size;
            } else
                result = zm_err_set(err, -EIO, "%s: stream corrupt (%s)", codec->name,
                                    rc == BZ_DATA_ERROR_MAGIC ? "not bzip2 data"
                                    : rc == BZ_DATA_ERROR     ? "a CRC or block does not check"
                                                              : "libbz2 failed");
            break;
        }
        BZ2_bzDecompressEnd(&bz);
        if (result != 0)
            break;
    }
    *produced = out_at;
    return result;
}

static int zm__unlz4(const void *c, const uint8_t *src, size_t src_size, uint8_t *dst,
                     size_t cap, size_t *produced, zm_err *err)
{
    const zm__zcodec *codec = c;
    /* numcodecs' LZ4: the decoded size as 4 bytes little-endian, then one
     * LZ4 block (LZ4_compress_fast). LZ4_decompress_safe never reads or
     * writes outside the sizes it is given. */
    *produced = 0;
    if (src_size < 4)
        return zm_err_set(err, -EIO,
                          "%s: stream truncated (%zu stored bytes, its size header "
                          "alone needs 4)",
                          codec->name, src_size);
    uint32_t size = zm__le32(src);
    if (size > cap)
        return ZM__TOO_SMALL;
    if (size > (uint32_t)INT_MAX || src_size - 4 > (size_t)INT_MAX)
        return zm_err_set(err, -EIO, "%s: a block of %u bytes is more than LZ4 decodes",
                          codec->name, (unsigned)size);
    if (size == 0)
        return 0;
    int n = LZ4_decompress_safe((const char *)src + 4, (char *)dst, (int)(src_size - 4), (int)size);
    if (n < 0)
        return zm_err_set(err, -EIO, "%s: stream corrupt (LZ4_decompress_safe returned %d)",
                          codec->name, n);
    if ((uint32_t)n != size)
        return zm_err_set(err, -EIO, "%s: the block holds %d bytes, its header says %u",
                          codec->name, n, (unsigned)size);
    *produced = (size_t)n;
    return 0;
}

static int zm__unzstd(const void *c, const uint8_t *src, size_t src_size, uint8_t *dst,
                      size_t cap, size_t *produced, zm_err *err)
{
    /* One or more frames (numcodecs' Zstd, zarr's zstd). */
    const zm__zcodec *codec = c;
    return zm__unzstd_sized(codec->name, src, src_size, dst, cap, produced, err);
}

static int zm__unblosc(const void *c, const uint8_t *src, size_t src_size, uint8_t *dst,
                       size_t cap, size_t *produced, zm_err *err)
{
    /* One blosc buffer, which records its inner compressor, shuffle and
     * type size itself. */
    const zm__zcodec *codec = c;
    return zm__unblosc_sized(codec->name, src, src_size, dst, cap, produced, err);
}

/* crc32c: the CRC-32C of what precedes them, 4 bytes little-endian at the
 * end. Checked, then the bytes before it are the output. */
static int zm__crc_check(const zm__zcodec *codec, const uint8_t *src, size_t src_size, size_t *body,
                         zm_err *err)
{
    if (src_size < ZM__CRC_BYTES)
        return zm_err_set(err, -EIO, "%s: %zu bytes are shorter than the checksum", codec->name,
                          src_size);
    size_t n = src_size - ZM__CRC_BYTES;
    uint32_t stored = zm__le32(src + n), computed = zm__crc32c(src, n);
    if (stored != computed)
        return zm_err_set(err, -EIO,
                          "%s: checksum mismatch (stored 0x%08x, computed 0x%08x over %zu bytes)",
                          codec->name, (unsigned)stored, (unsigned)computed, n);
    *body = n;
    return 0;
}

static zm__sized_decoder zm__decoder_for(zm__zcodec_id id)
{
    switch (id) {
    case ZM__ZCODEC_BLOSC:
        return zm__unblosc;
    case ZM__ZCODEC_ZSTD:
        return zm__unzstd;
    case ZM__ZCODEC_GZIP:
    case ZM__ZCODEC_ZLIB:
        return zm__unzlib;
    case ZM__ZCODEC_LZ4:
        return zm__unlz4;
    case ZM__ZCODEC_BZ2:
        return zm__unbz2;
    default:
        return NULL;
    }
}

/* The size a compressor's output will have, where its stream says so, so
 * that an output of unknown size is allocated once. */
static size_t zm__size_hint(const zm__zcodec *codec, const uint8_t *src, size_t src_size)
{
    size_t nbytes;
    if (codec->id == ZM__ZCODEC_BLOSC)
        return zm__blosc_size(codec->name, src, src_size, &nbytes, NULL) == 0 ? nbytes
                                                                               : ZM__SIZE_UNKNOWN;
    if (codec->id == ZM__ZCODEC_LZ4)
        return src_size >= 4 ? zm__le32(src) : ZM__SIZE_UNKNOWN;
    if (codec->id == ZM__ZCODEC_ZSTD)
        return zm__zstd_size(src, src_size); /* the frames' sizes summed, if each records one */
    return ZM__SIZE_UNKNOWN;
}

/* ---- the chain ---------------------------------------------------------------- */

static bool zm__is_bytes_to_bytes(zm__zcodec_id id)
{
    return id == ZM__ZCODEC_BLOSC || id == ZM__ZCODEC_ZSTD || id == ZM__ZCODEC_GZIP ||
           id == ZM__ZCODEC_ZLIB || id == ZM__ZCODEC_LZ4 || id == ZM__ZCODEC_BZ2 ||
           id == ZM__ZCODEC_CRC32C;
}

static bool zm__is_array_to_bytes(zm__zcodec_id id)
{
    return id == ZM__ZCODEC_BYTES || id == ZM__ZCODEC_VLEN_UTF8 || id == ZM__ZCODEC_SHARDING;
}

/* Where a chain's parts lie: codecs [0, array_end) are array-to-array,
 * codec array_end (if below bytes_start) the array-to-bytes one, codecs
 * [bytes_start, count) bytes-to-bytes. Anything else is refused. */
typedef struct zm__chain {
    unsigned array_end, bytes_start;
    const zm__zcodec *array_to_bytes; /* NULL: none (v2's numbers: their bytes as they are) */
} zm__chain;

static int zm__chain_split(const zm__zcodec *codecs, unsigned count, zm__chain *chain, zm_err *err)
{
    if (count > ZM__ZCODEC_MAX)
        return zm_err_set(err, -EINVAL, "a chain of %u codecs (at most %d)", count, ZM__ZCODEC_MAX);
    for (unsigned i = 0; i < count; i++) {
        if (codecs[i].id == ZM__ZCODEC_OTHER)
            return zm_err_set(err, -ENOTSUP, "codec \"%.32s\" is not supported", codecs[i].name);
        if (codecs[i].id == ZM__ZCODEC_SHARDING)
            return zm_err_set(err, -ENOTSUP,
                              "%.32s: a shard is read through its index, not decoded as one "
                              "chunk",
                              codecs[i].name);
    }
    unsigned i = 0;
    while (i < count && codecs[i].id == ZM__ZCODEC_TRANSPOSE)
        i++;
    chain->array_end = i;
    chain->array_to_bytes = NULL;
    if (i < count && zm__is_array_to_bytes(codecs[i].id))
        chain->array_to_bytes = &codecs[i++];
    chain->bytes_start = i;
    for (; i < count; i++)
        if (!zm__is_bytes_to_bytes(codecs[i].id))
            return zm_err_set(
                err, -EINVAL, "codec \"%.32s\" stands where the chain needs %s", codecs[i].name,
                chain->array_to_bytes ? "a bytes-to-bytes codec" : "an array-to-bytes codec");
    return 0;
}

/* Runs the chain's bytes-to-bytes codecs in reverse over in. want: the
 * size the first of them must produce (ZM__SIZE_UNKNOWN: any, up to
 * limit). The result is *out (*owned when allocated, else NULL: then *out
 * is dst, written with exactly want bytes, or in itself). dst may be NULL
 * (always allocate). */
static int zm__run_bytes(const zm__zcodec *codecs, unsigned start, unsigned count,
                         const uint8_t *in, size_t in_size, size_t want, size_t limit, uint8_t *dst,
                         const uint8_t **out, size_t *out_size, uint8_t **owned, zm_err *err)
{
    *owned = NULL;
    /* expected[i]: the size codec i was given when the chunk was written,
     * what decoding it must give back: known from want through crc32c (4
     * bytes more), unknown once a compressor ran. */
    size_t expected[ZM__ZCODEC_MAX];
    size_t size = want;
    for (unsigned i = start; i < count; i++) {
        expected[i] = size;
        if (codecs[i].id == ZM__ZCODEC_CRC32C)
            size = size == ZM__SIZE_UNKNOWN ? size : zm__add_sat(size, ZM__CRC_BYTES);
        else
            size = ZM__SIZE_UNKNOWN;
    }
    if (size != ZM__SIZE_UNKNOWN && in_size != size)
        return zm_err_set(err, -EIO, "%s: the stored chunk has %zu bytes, expected %zu",
                          count > start ? codecs[count - 1].name : "chunk", in_size, size);

    const uint8_t *cur = in;
    size_t cur_size = in_size;
    uint8_t *held = NULL; /* cur, when a stage allocated it */
    for (unsigned i = count; i-- > start;) {
        const zm__zcodec *codec = &codecs[i];
        if (codec->id == ZM__ZCODEC_CRC32C) {
            size_t body = 0;
            int rc = zm__crc_check(codec, cur, cur_size, &body, err);
            if (rc < 0) {
                free(held);
                return rc;
            }
            cur_size = body; /* the data stays where it is */
            continue;
        }
        zm__sized_decoder decode = zm__decoder_for(codec->id);
        uint8_t *next = NULL;
        size_t next_size = 0;
        int rc;
        bool into_dst = i == start && dst != NULL && expected[i] != ZM__SIZE_UNKNOWN;
        if (into_dst) {
            rc = zm__decode_exact(decode, codec, codec->name, cur, cur_size, dst, expected[i], err);
            next = dst;
            next_size = expected[i];
        } else if (expected[i] != ZM__SIZE_UNKNOWN) {
            next = malloc(expected[i] > 0 ? expected[i] : 1);
            if (next == NULL) {
                free(held);
                return zm_err_set(err, -ENOMEM, "%s: out of memory for %zu bytes", codec->name,
                                  expected[i]);
            }
            rc = zm__decode_exact(decode, codec, codec->name, cur, cur_size, next, expected[i],
                                  err);
            next_size = expected[i];
        } else {
            rc = zm__decode_grow(decode, codec, codec->name, zm__size_hint(codec, cur, cur_size),
                                 cur, cur_size, limit, &next, &next_size, err);
        }
        if (rc < 0) {
            if (next != dst)
                free(next);
            free(held);
            return rc;
        }
        free(held);
        held = next == dst ? NULL : next;
        cur = next;
        cur_size = next_size;
    }
    if (want != ZM__SIZE_UNKNOWN && cur_size != want)
        return free(held),
               zm_err_set(err, -EIO, "chunk: decoded %zu bytes, expected %zu", cur_size, want);
    *out = cur;
    *out_size = cur_size;
    *owned = held;
    return 0;
}

/* Where each value of a chunk comes from, as strides (in values) of the
 * source over the chunk's own dimensions in C order: values are then read
 * in the output's order. */
static void zm__c_strides(unsigned rank, const uint64_t *shape, uint64_t *strides)
{
    uint64_t s = 1;
    for (unsigned d = rank; d-- > 0;) {
        strides[d] = s;
        s *= shape[d];
    }
}

/* dst[i] = src[sum_d i_d * from[d]] over the C-order indices i of shape. */
static void zm__gather(uint8_t *restrict dst, const uint8_t *restrict src, unsigned rank,
                       const uint64_t *shape, const uint64_t *from, size_t item_size)
{
    uint64_t index[ZM_MAX_RANK] = {0};
    uint64_t total = 1;
    for (unsigned d = 0; d < rank; d++)
        total *= shape[d];
    if (total == 0)
        return;
    if (rank == 0) {
        memcpy(dst, src, item_size);
        return;
    }
    uint64_t at = 0; /* source value */
    unsigned last = rank - 1;
    uint64_t n_last = shape[last], step = from[last];
    for (uint64_t done = 0; done < total; done += n_last) {
        /* The innermost dimension in one loop, specialised on the common
         * value sizes. */
        uint8_t *d = dst + done * item_size;
        switch (item_size) {
        case 1:
            for (uint64_t k = 0; k < n_last; k++)
                d[k] = src[at + k * step];
            break;
        case 4:
            for (uint64_t k = 0; k < n_last; k++)
                memcpy(d + 4 * k, src + 4 * (at + k * step), 4);
            break;
        case 8:
            for (uint64_t k = 0; k < n_last; k++)
                memcpy(d + 8 * k, src + 8 * (at + k * step), 8);
            break;
        default:
            for (uint64_t k = 0; k < n_last; k++)
                memcpy(d + item_size * k, src + item_size * (at + k * step), item_size);
            break;
        }
        /* The next row: carry through the outer dimensions. */
        for (unsigned e = last; e-- > 0;) {
            index[e]++;
            at += from[e];
            if (index[e] < shape[e])
                break;
            at -= from[e] * index[e];
            index[e] = 0;
        }
    }
}

/* The source strides that undo transpose `order` over a chunk whose
 * decoded shape is shape: the stored array had shape[order[k]] along its
 * dimension k, in C order. */
static void zm__transpose_strides(const zm__zcodec *codec, unsigned rank, const uint64_t *shape,
                                  uint64_t *from)
{
    uint64_t stored_shape[ZM_MAX_RANK], stored_strides[ZM_MAX_RANK];
    for (unsigned k = 0; k < rank; k++)
        stored_shape[k] = shape[codec->order[k]];
    zm__c_strides(rank, stored_shape, stored_strides);
    for (unsigned k = 0; k < rank; k++)
        from[codec->order[k]] = stored_strides[k];
}

/* A v2 F-order chunk: value i's place is sum_d i_d * prod_{e<d} shape[e]. */
static void zm__fortran_strides(unsigned rank, const uint64_t *shape, uint64_t *from)
{
    uint64_t s = 1;
    for (unsigned d = 0; d < rank; d++) {
        from[d] = s;
        s *= shape[d];
    }
}

/* The permutations a chain's array-to-array codecs and a v2 F order make,
 * in the order decoding undoes them, each with the decoded shape it
 * gives. */
typedef struct zm__reorder {
    unsigned count;
    uint64_t shape[ZM__ZCODEC_MAX + 1][ZM_MAX_RANK]; /* the shape each step gives */
    uint64_t from[ZM__ZCODEC_MAX + 1][ZM_MAX_RANK];
} zm__reorder;

static int zm__reorder_plan(const zm__zcodec *codecs, unsigned array_end, int fortran_order,
                            unsigned rank, const uint64_t *shape, zm__reorder *plan, zm_err *err)
{
    /* shapes[k]: the array's shape before transpose k when writing. */
    uint64_t shapes[ZM__ZCODEC_MAX + 1][ZM_MAX_RANK];
    memcpy(shapes[0], shape, rank * sizeof *shape);
    for (unsigned k = 0; k < array_end; k++) {
        bool seen[ZM_MAX_RANK] = {false};
        for (unsigned d = 0; d < rank; d++) {
            unsigned o = codecs[k].order[d];
            if (o >= rank || seen[o])
                return zm_err_set(err, -EINVAL, "%s: order is not a permutation of %u dimensions",
                                  codecs[k].name, rank);
            seen[o] = true;
            shapes[k + 1][d] = shapes[k][o];
        }
    }
    plan->count = 0;
    for (unsigned k = array_end; k-- > 0;) {
        bool identity = true;
        for (unsigned d = 0; d < rank; d++)
            identity = identity && codecs[k].order[d] == d;
        if (identity)
            continue;
        memcpy(plan->shape[plan->count], shapes[k], rank * sizeof *shape);
        zm__transpose_strides(&codecs[k], rank, shapes[k], plan->from[plan->count]);
        plan->count++;
    }
    if (fortran_order && rank > 1) {
        memcpy(plan->shape[plan->count], shape, rank * sizeof *shape);
        zm__fortran_strides(rank, shape, plan->from[plan->count]);
        plan->count++;
    }
    return 0;
}

static void zm__swap(uint8_t *bytes, size_t size, unsigned word)
{
    for (size_t at = 0; at + word <= size; at += word)
        for (unsigned a = 0, b = word - 1; a < b; a++, b--) {
            uint8_t t = bytes[at + a];
            bytes[at + a] = bytes[at + b];
            bytes[at + b] = t;
        }
}

static int zm__value_count(unsigned rank, const uint64_t *shape, uint64_t *count, zm_err *err)
{
    if (rank > ZM_MAX_RANK)
        return zm_err_set(err, -EINVAL, "a chunk of %u dimensions (at most %d)", rank, ZM_MAX_RANK);
    uint64_t n = 1;
    for (unsigned d = 0; d < rank; d++) {
        if (shape[d] != 0 && n > UINT64_MAX / shape[d])
            return zm_err_set(err, -EINVAL, "a chunk of more than 2^64 values");
        n *= shape[d];
    }
    *count = n;
    return 0;
}

/* What decoding a chunk of numbers and one of strings first do alike:
 * the chain split, its array-to-bytes codec checked against the kind of
 * chunk (vlen-utf8 for strings, bytes or none for numbers), the values
 * counted and the reordering planned. */
static int zm__decode_plan(const zm__zcodec *codecs, unsigned count, int fortran_order,
                           unsigned rank, const uint64_t *shape, bool strings, zm__chain *chain,
                           uint64_t *values, zm__reorder *plan, zm_err *err)
{
    int rc = zm__chain_split(codecs, count, chain, err);
    if (rc < 0)
        return rc;
    const zm__zcodec *b = chain->array_to_bytes;
    if (strings && (b == NULL || b->id != ZM__ZCODEC_VLEN_UTF8))
        return zm_err_set(err, -EINVAL, "chunk: strings without a vlen-utf8 codec");
    if (!strings && b != NULL && b->id != ZM__ZCODEC_BYTES)
        return zm_err_set(err, -EINVAL, "%.32s: a chunk of strings, decoded as numbers", b->name);
    if ((rc = zm__value_count(rank, shape, values, err)) < 0)
        return rc;
    return zm__reorder_plan(codecs, chain->array_end, fortran_order, rank, shape, plan, err);
}

int zm__zarr_decode(const zm__zcodec *codecs, unsigned count, int fortran_order, unsigned rank,
                    const uint64_t *shape, size_t item_size, const uint8_t *in, size_t in_size,
                    uint8_t *out, size_t raw_size, zm_err *err)
{
    zm__chain chain;
    uint64_t values = 0;
    zm__reorder plan;
    int rc = zm__decode_plan(codecs, count, fortran_order, rank, shape, false, &chain, &values,
                             &plan, err);
    if (rc < 0)
        return rc;
    if (item_size == 0 || values > UINT64_MAX / item_size || values * item_size != raw_size)
        return zm_err_set(err, -EINVAL,
                          "chunk: %llu values of %zu bytes are not the %zu bytes asked for",
                          (unsigned long long)values, item_size, raw_size);

    /* The bytes-to-bytes stages write straight into out when nothing is to
     * be reordered after them. */
    const uint8_t *bytes;
    size_t bytes_size;
    uint8_t *owned = NULL;
    rc = zm__run_bytes(codecs, chain.bytes_start, count, in, in_size, raw_size,
                       zm__add_sat(zm__add_sat(raw_size, raw_size / 4), 65536),
                       plan.count == 0 ? out : NULL, &bytes, &bytes_size, &owned, err);
    if (rc < 0)
        return rc;
    const zm__zcodec *b = chain.array_to_bytes;
    bool swap = b != NULL && b->big_endian && b->word_size > 1;
    if (swap && item_size % b->word_size != 0) {
        free(owned);
        return zm_err_set(err, -EINVAL, "%s: values of %zu bytes swapped in words of %u", b->name,
                          item_size, b->word_size);
    }
    if (plan.count == 0) {
        if (bytes != out && raw_size > 0)
            memcpy(out, bytes, raw_size);
        free(owned);
        if (swap)
            zm__swap(out, raw_size, b->word_size);
        return 0;
    }
    if (swap) {
        /* Swapped where they lie when the bytes are ours, else in a copy. */
        if (owned == NULL) {
            if ((owned = malloc(raw_size > 0 ? raw_size : 1)) == NULL)
                return zm_err_set(err, -ENOMEM, "chunk: out of memory for %zu bytes", raw_size);
            memcpy(owned, bytes, raw_size);
            bytes = owned;
        }
        zm__swap(owned, raw_size, b->word_size);
    }
    /* Each permutation reads what the one before wrote; the last writes
     * out. Two scratch buffers at most, whatever the number of steps. */
    uint8_t *scratch[2] = {NULL, NULL};
    const uint8_t *source = bytes;
    for (unsigned k = 0; k < plan.count; k++) {
        uint8_t *target = out;
        if (k + 1 < plan.count) {
            uint8_t **slot = &scratch[k % 2];
            if (*slot == NULL && (*slot = malloc(raw_size > 0 ? raw_size : 1)) == NULL) {
                free(scratch[0]);
                free(scratch[1]);
                free(owned);
                return zm_err_set(err, -ENOMEM, "chunk: out of memory for %zu bytes", raw_size);
            }
            target = *slot;
        }
        zm__gather(target, source, rank, plan.shape[k], plan.from[k], item_size);
        source = target;
    }
    free(scratch[0]);
    free(scratch[1]);
    free(owned);
    return 0;
}

/* ---- strings ------------------------------------------------------------------ */

int zm__zarr_decode_strings(const zm__zcodec *codecs, unsigned count, int fortran_order,
                            unsigned rank, const uint64_t *shape, const uint8_t *in, size_t in_size,
                            zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    zm__chain chain;
    uint64_t values = 0;
    zm__reorder plan;
    int rc = zm__decode_plan(codecs, count, fortran_order, rank, shape, true, &chain, &values,
                             &plan, err);
    if (rc < 0)
        return rc;
    const char *name = chain.array_to_bytes->name;
    if (values > (SIZE_MAX - 1) / sizeof(uint64_t) || values > UINT32_MAX)
        return zm_err_set(err, -EINVAL, "%s: a chunk of %llu strings is more than it holds", name,
                          (unsigned long long)values);

    const uint8_t *bytes;
    size_t size;
    uint8_t *owned = NULL;
    rc = zm__run_bytes(codecs, chain.bytes_start, count, in, in_size, ZM__SIZE_UNKNOWN,
                       ZM__STRINGS_CHUNK_MAX, NULL, &bytes, &size, &owned, err);
    if (rc < 0)
        return rc;

    /* numcodecs' VLenUTF8: the count as u32 little-endian, then each
     * value as its length (u32 little-endian) and its bytes. Bytes after
     * the last value are ignored, as numcodecs does. */
    size_t n = (size_t)values;
    uint64_t *starts = NULL, *lengths = NULL;
    if (size < 4) {
        rc = zm_err_set(err, -EIO, "%s: %zu bytes are too few for the count of values", name, size);
        goto done;
    }
    uint32_t stored = zm__le32(bytes);
    if (stored != values) {
        rc = zm_err_set(err, -EIO, "%s: the chunk holds %u values, its shape %llu", name,
                        (unsigned)stored, (unsigned long long)values);
        goto done;
    }
    /* Each value's length takes 4 bytes: what is allocated below is bounded
     * by the bytes decoded, not by the shape the metadata claims. */
    if (n > (size - 4) / 4) {
        rc = zm_err_set(err, -EIO, "%s: %zu bytes cannot hold the lengths of %zu values", name,
                        size, n);
        goto done;
    }
    starts = malloc((n + 1) * sizeof *starts);
    lengths = malloc((n + 1) * sizeof *lengths);
    if (starts == NULL || lengths == NULL) {
        rc = zm_err_set(err, -ENOMEM, "%s: out of memory for %zu strings", name, n);
        goto done;
    }
    size_t at = 4, total = 0;
    for (size_t i = 0; i < n; i++) {
        if (size - at < 4) {
            rc = zm_err_set(err, -EIO, "%s: value %zu's length lies past the chunk's %zu bytes",
                            name, i, size);
            goto done;
        }
        uint32_t length = zm__le32(bytes + at);
        at += 4;
        if (length > size - at) {
            rc = zm_err_set(err, -EIO,
                            "%s: value %zu's %u bytes at byte %zu pass the chunk's %zu bytes", name,
                            i, (unsigned)length, at, size);
            goto done;
        }
        starts[i] = at;
        lengths[i] = length;
        at += length;
        total += length;
    }

    /* The values in C order: which stored value each place takes, through
     * the permutations decoding undoes (an identity when there are none). */
    uint64_t *source = NULL;
    if (plan.count > 0) {
        uint64_t *a = malloc(n * sizeof *a), *b2 = malloc(n * sizeof *b2);
        if (a == NULL || b2 == NULL) {
            free(a);
            free(b2);
            rc = zm_err_set(err, -ENOMEM, "%s: out of memory for %zu strings", name, n);
            goto done;
        }
        for (size_t i = 0; i < n; i++)
            a[i] = i;
        for (unsigned k = 0; k < plan.count; k++) {
            zm__gather((uint8_t *)b2, (const uint8_t *)a, rank, plan.shape[k], plan.from[k],
                       sizeof *a);
            uint64_t *t = a;
            a = b2;
            b2 = t;
        }
        free(b2);
        source = a;
    }
    out->count = n;
    out->offsets = malloc((n + 1) * sizeof *out->offsets);
    out->bytes = malloc(total + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        free(source);
        zm_strings_free(out);
        rc = zm_err_set(err, -ENOMEM, "%s: out of memory for %zu bytes of strings", name, total);
        goto done;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = source ? (size_t)source[i] : i;
        out->offsets[i] = o;
        if (lengths[s] > 0)
            memcpy(out->bytes + o, bytes + starts[s], (size_t)lengths[s]);
        o += (size_t)lengths[s];
    }
    out->offsets[n] = o;
    out->bytes[o] = '\0';
    free(source);
    rc = 0;
done:
    free(starts);
    free(lengths);
    free(owned);
    return rc;
}

/* ---- sharding's index ----------------------------------------------------------- */

typedef struct zm__span {
    uint64_t offset, size;
    size_t chunk;
} zm__span;

static int zm__span_order(const void *a, const void *b)
{
    const zm__span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

int zm__zshard_index(const zm__zshard *shard, const uint8_t *index, size_t index_bytes,
                     uint64_t shard_size, uint64_t *offsets, uint64_t *sizes, zm_err *err)
{
    if (index_bytes != shard->index_bytes)
        return zm_err_set(err, -EIO, "sharding_indexed: the index has %zu bytes, expected %zu",
                          index_bytes, shard->index_bytes);
    if (shard_size < index_bytes)
        return zm_err_set(err, -EIO,
                          "sharding_indexed: a shard of %llu bytes is shorter than its "
                          "%zu-byte index",
                          (unsigned long long)shard_size, index_bytes);
    /* The index codecs: bytes (the entries' byte order) and crc32c, in
     * reverse. */
    size_t size = index_bytes;
    int big_endian = 0;
    for (unsigned i = shard->index_codec_count; i-- > 0;) {
        const zm__zcodec *codec = &shard->index_codecs[i];
        if (codec->id == ZM__ZCODEC_CRC32C) {
            size_t body;
            zm_err why;
            int rc = zm__crc_check(codec, index, size, &body, &why);
            if (rc < 0)
                return zm_err_set(err, rc, "sharding_indexed: the index's %s", why.reason);
            size = body;
        } else if (codec->id == ZM__ZCODEC_BYTES) {
            big_endian = codec->big_endian;
        } else {
            return zm_err_set(err, -ENOTSUP,
                              "sharding_indexed: index codec \"%.32s\" is not supported",
                              codec->name);
        }
    }
    if (size != shard->per_shard * ZM__SHARD_ENTRY)
        return zm_err_set(err, -EIO,
                          "sharding_indexed: the index holds %zu bytes of entries, %llu chunks "
                          "need %llu",
                          size, (unsigned long long)shard->per_shard,
                          (unsigned long long)shard->per_shard * ZM__SHARD_ENTRY);
    /* Where the index itself lies in the shard. */
    uint64_t index_start = shard->index_at_start ? 0 : shard_size - index_bytes;
    uint64_t index_end = index_start + index_bytes;
    size_t n = (size_t)shard->per_shard, present = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *entry = index + ZM__SHARD_ENTRY * i;
        uint64_t offset = big_endian ? zm__be64(entry) : zm__le64(entry);
        uint64_t nbytes = big_endian ? zm__be64(entry + 8) : zm__le64(entry + 8);
        if (offset == UINT64_MAX && nbytes == UINT64_MAX) {
            offsets[i] = sizes[i] = UINT64_MAX;
            continue;
        }
        if (offset > shard_size || nbytes > shard_size - offset)
            return zm_err_set(err, -EIO,
                              "sharding_indexed: inner chunk %zu at byte %llu, %llu bytes, lies "
                              "past the shard's %llu bytes",
                              i, (unsigned long long)offset, (unsigned long long)nbytes,
                              (unsigned long long)shard_size);
        if (nbytes > 0 && offset < index_end && offset + nbytes > index_start)
            return zm_err_set(err, -EIO,
                              "sharding_indexed: inner chunk %zu (bytes %llu to %llu) overlaps "
                              "the index (bytes %llu to %llu)",
                              i, (unsigned long long)offset, (unsigned long long)(offset + nbytes),
                              (unsigned long long)index_start, (unsigned long long)index_end);
        offsets[i] = offset;
        sizes[i] = nbytes;
        if (nbytes > 0)
            present++;
    }
    /* No two chunks share bytes: sorted by offset, each ends before the
     * next begins. */
    if (present > 1) {
        zm__span *spans = malloc(present * sizeof *spans);
        if (spans == NULL)
            return zm_err_set(err, -ENOMEM, "sharding_indexed: out of memory for %zu entries",
                              present);
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (offsets[i] != UINT64_MAX && sizes[i] > 0)
                spans[k++] = (zm__span){offsets[i], sizes[i], i};
        qsort(spans, present, sizeof *spans, zm__span_order);
        for (size_t j = 1; j < present; j++)
            if (spans[j - 1].offset + spans[j - 1].size > spans[j].offset) {
                int rc = zm_err_set(err, -EIO,
                                    "sharding_indexed: inner chunks %zu and %zu overlap (bytes "
                                    "%llu to %llu and %llu to %llu)",
                                    spans[j - 1].chunk, spans[j].chunk,
                                    (unsigned long long)spans[j - 1].offset,
                                    (unsigned long long)(spans[j - 1].offset + spans[j - 1].size),
                                    (unsigned long long)spans[j].offset,
                                    (unsigned long long)(spans[j].offset + spans[j].size));
                free(spans);
                return rc;
            }
        free(spans);
    }
    return 0;
}

int zm__zarr_prefix_decodable(const zm__zcodec *codecs, unsigned count, int fortran_order,
                              unsigned rank)
{
    /* A 1-d chunk (no order to undo) whose bytes are one zstd stream, with
     * at most a bytes codec that leaves them as they are. */
    if (rank != 1 || fortran_order)
        return 0;
    unsigned zstd = 0;
    for (unsigned i = 0; i < count; i++) {
        if (codecs[i].id == ZM__ZCODEC_ZSTD)
            zstd++;
        else if (!(codecs[i].id == ZM__ZCODEC_BYTES &&
                   (!codecs[i].big_endian || codecs[i].word_size <= 1)))
            return 0;
    }
    return zstd == 1;
}

/* The first `needed` bytes of one or more zstd frames, decoded block by
 * block straight into out (capacity bytes, room for the whole chunk), and
 * no further than the block that holds the last of them: zstd's
 * buffer-less API. (ZSTD_decompressStream cannot stop early: with all the
 * input at hand it decodes the whole frame into its own window before it
 * gives out the part asked for, so a part cost as much as the chunk, and a
 * copy more.) 1 when done, or -EIO. */
static int zstd_prefix_blocks(ZSTD_DCtx *context, const char *name, const uint8_t *in,
                              size_t in_size, uint8_t *out, size_t capacity, size_t needed,
                              zm_err *err)
{
    size_t got = 0, at = 0;
    while (got < needed) {
        if (at == in_size)
            return zm_err_set(err, -EIO, "%s: the stream ends after %zu bytes, %zu needed", name,
                              got, needed);
        size_t rc = ZSTD_decompressBegin(context);
        if (ZSTD_isError(rc))
            return zm_err_set(err, -EIO, "%s: %s", name, ZSTD_getErrorName(rc));
        size_t next;
        while (got < needed && (next = ZSTD_nextSrcSizeToDecompress(context)) != 0) {
            if (next > in_size - at)
                return zm_err_set(err, -EIO, "%s: the stream is cut short after %zu bytes", name,
                                  got);
            rc = ZSTD_decompressContinue(context, out + got, capacity - got, in + at, next);
            if (ZSTD_isError(rc))
                return zm_err_set(err, -EIO, "%s: stream corrupt (%s)", name,
                                  ZSTD_getErrorName(rc));
            at += next;
            got += rc;
        }
    }
    return 1;
}

int zm__zarr_decode_prefix(const zm__zcodec *codecs, unsigned count, int fortran_order,
                           unsigned rank, const uint64_t *shape, size_t item_size,
                           const uint8_t *in, size_t in_size, uint8_t *out, size_t capacity,
                           size_t needed, zm_err *err)
{
    if (!zm__zarr_prefix_decodable(codecs, count, fortran_order, rank) || shape[0] == 0 ||
        needed == 0 || needed > shape[0] * item_size || capacity < needed)
        return 0;
    unsigned at = 0;
    while (codecs[at].id != ZM__ZCODEC_ZSTD)
        at++;
    ZSTD_DCtx *context = zm__zstd_context();
    if (context == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", codecs[at].name);
    if (capacity >= shape[0] * item_size) {
        int rc = zstd_prefix_blocks(context, codecs[at].name, in, in_size, out, capacity, needed,
                                    err);
        ZSTD_DCtx_reset(context, ZSTD_reset_session_only);
        return rc;
    }
    /* Room for the part alone: the stream decoder, into its own window. */
    ZSTD_DCtx_reset(context, ZSTD_reset_session_only);
    ZSTD_inBuffer input = {in, in_size, 0};
    ZSTD_outBuffer output = {out, needed, 0};
    while (output.pos < needed) {
        size_t rc = ZSTD_decompressStream(context, &output, &input);
        if (ZSTD_isError(rc)) {
            ZSTD_DCtx_reset(context, ZSTD_reset_session_only);
            return zm_err_set(err, -EIO, "%s: stream corrupt (%s)", codecs[at].name,
                              ZSTD_getErrorName(rc));
        }
        if (rc == 0 && output.pos < needed && input.pos == input.size) {
            ZSTD_DCtx_reset(context, ZSTD_reset_session_only);
            return zm_err_set(err, -EIO, "%s: the stream ends after %zu bytes, %zu needed",
                              codecs[at].name, output.pos, needed);
        }
        if (rc != 0 && input.pos == input.size && output.pos < needed) {
            ZSTD_DCtx_reset(context, ZSTD_reset_session_only);
            return zm_err_set(err, -EIO, "%s: the stream is cut short after %zu bytes",
                              codecs[at].name, output.pos);
        }
    }
    ZSTD_DCtx_reset(context, ZSTD_reset_session_only);
    return 1;
}
