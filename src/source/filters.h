/* Internal to the source module: HDF5 filter pipelines decoded outside
 * HDF5 (and its global lock), on our own threads. */
#ifndef ZARRMOUNT_SOURCE_FILTERS_H
#define ZARRMOUNT_SOURCE_FILTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"

/* HDF5 filter identifiers. */
#define ZM__FILTER_DEFLATE 1
#define ZM__FILTER_SHUFFLE 2
#define ZM__FILTER_FLETCHER32 3
#define ZM__FILTER_SZIP 4
#define ZM__FILTER_NBIT 5
#define ZM__FILTER_SCALEOFFSET 6
#define ZM__FILTER_LZF 32000
#define ZM__FILTER_BLOSC 32001
#define ZM__FILTER_ZSTD 32015

#define ZM__FILTER_MAX_CD 20 /* client data values kept per filter */
#define ZM__FILTER_MAX 16    /* filters per pipeline */

/* One filter of a dataset's pipeline, as H5Pget_filter2 describes it. */
typedef struct zm__filter {
    unsigned id;
    unsigned flags;    /* H5Z_FLAG_OPTIONAL etc. */
    size_t cd_count;   /* client data values (≤ ZM__FILTER_MAX_CD kept) */
    unsigned cd_values[ZM__FILTER_MAX_CD];
    char name[64];     /* the name HDF5 reports, for messages */
} zm__filter;

/* Whether zm__filter_decode handles this filter id. */
int zm__filter_supported(unsigned id);

/* A short name for a filter id ("deflate", "shuffle", "fletcher32", "lzf",
 * "blosc", "zstd", or "filter 32008"). buf must hold 32 bytes. */
const char *zm__filter_name(unsigned id, char buf[32]);

/* Decodes one stored chunk. filters[0 .. count) are in pipeline order (the
 * order HDF5 applied them when writing); decoding runs them in reverse.
 * filter_mask is H5Dget_chunk_info's mask: bit i set means filter i was
 * skipped for this chunk. element_size is the dataset's element size (for
 * shuffle). in holds the stored bytes (in_size); out receives exactly
 * raw_size bytes (the chunk's uncompressed size: chunk dims × element
 * size). Returns 0, or -EIO with a reason naming the filter and what was
 * wrong (bad checksum, stream corrupt, size mismatch), or -ENOTSUP for a
 * filter it does not handle, or -ENOMEM. Thread-safe; no global state. */
int zm__filter_decode(const zm__filter *filters, unsigned count, unsigned filter_mask,
                      size_t element_size, const uint8_t *in, size_t in_size, uint8_t *out,
                      size_t raw_size, zm_err *err);

/* Reads size stored bytes at offset (within the chunk) into buffer. */
typedef int (*zm__stored_reader)(void *context, size_t offset, void *buffer, size_t size,
                                 zm_err *err);

/* Inflates only the first `needed` bytes of a chunk stored as one zlib
 * stream (HDF5's deflate filter alone) of stored bytes, reading the stored
 * bytes as far as the stream needs them: a part of a chunk costs about its
 * share of the chunk's bytes. *read_bytes gets the stored bytes read.
 * -EIO with a reason if the stream is damaged or holds fewer bytes. */
int zm__inflate_prefix(zm__stored_reader read, void *context, size_t stored, size_t raw_size,
                       uint8_t *out, size_t needed, size_t *read_bytes, zm_err *err);

/* Decodes one compressor's output (deflate, lzf, zstd, blosc) whose size
 * is not known up front: into *out (malloc'd), never more than limit bytes.
 * For HDF5's own reads, which hand a filter only the chunk's bytes. */
int zm__filter_decode_unsized(const zm__filter *filter, const uint8_t *in, size_t in_size,
                              size_t limit, uint8_t **out, size_t *out_size, zm_err *err);

/* ---- compressors shared with Zarr's codecs (zarr_codecs.c) ---------------
 *
 * Each decodes src[0 .. src_size) into dst[0 .. cap) and sets *produced to
 * the bytes written. It returns 0, or ZM__TOO_SMALL (not an errno) when the
 * output does not fit in cap (a size mismatch to report or, for an output
 * of unknown size, a sign to retry with more room), or a negative errno
 * with a reason that starts with name (the codec or filter, for messages).
 * Thread-safe. */

/* A decoder's answer when its output does not fit the capacity given. */
#define ZM__TOO_SMALL 1

/* An output size that no metadata and no stream header records. */
#define ZM__SIZE_UNKNOWN SIZE_MAX

/* One zlib stream (header, deflate data, adler32 checked; bytes after it
 * ignored, as HDF5's deflate and Python's zlib.decompress ignore them) or,
 * with gzip, gzip members one after another as Python's gzip.GzipFile
 * reads them (each CRC-32 and size checked, zero padding between members
 * skipped, anything else after a member an error). libdeflate decodes the
 * well-formed ones; whatever it refuses goes through zlib, whose messages
 * say what is wrong. */
int zm__inflate_sized(const char *name, bool gzip, const uint8_t *src, size_t src_size,
                      uint8_t *dst, size_t cap, size_t *produced, zm_err *err);

/* One or more Zstandard frames (a frame's checksum checked when the writer
 * put one in), decoded with the thread's context (zm__zstd_context). */
int zm__unzstd_sized(const char *name, const uint8_t *src, size_t src_size, uint8_t *dst,
                     size_t cap, size_t *produced, zm_err *err);

/* The sizes a run of Zstandard frames records, summed (a skippable frame
 * counts 0); ZM__SIZE_UNKNOWN if a frame records none or is damaged. */
size_t zm__zstd_size(const uint8_t *src, size_t src_size);

/* The thread's Zstandard decompression context, kept while the thread
 * lives (freed as it ends): ZSTD_decompress would make and free one, a few
 * hundred KiB, for every chunk. NULL without memory. */
struct ZSTD_DCtx_s *zm__zstd_context(void);

/* The size one blosc buffer decodes to, once its header is checked against
 * the src_size bytes we have (c-blosc's decompressor trusts the header's
 * compressed size: this check is what makes untrusted input safe). err may
 * be NULL. */
int zm__blosc_size(const char *name, const uint8_t *src, size_t src_size, size_t *nbytes,
                   zm_err *err);

/* One blosc buffer, which records its own inner compressor, shuffle and
 * type size. -ENOTSUP if its compressor is one this c-blosc lacks. */
int zm__unblosc_sized(const char *name, const uint8_t *src, size_t src_size, uint8_t *dst,
                      size_t cap, size_t *produced, zm_err *err);

/* A decoder as zm__decode_exact and zm__decode_grow run it: codec is the
 * caller's description of it (a zm__filter, a Zarr codec). */
typedef int (*zm__sized_decoder)(const void *codec, const uint8_t *src, size_t src_size,
                                 uint8_t *dst, size_t cap, size_t *produced, zm_err *err);

/* Runs a decoder whose output size is known: exactly expected bytes into
 * dst, or -EIO with a reason naming name and the sizes. */
int zm__decode_exact(zm__sized_decoder decode, const void *codec, const char *name,
                     const uint8_t *src, size_t src_size, uint8_t *dst, size_t expected,
                     zm_err *err);

/* Runs a decoder whose output size is not known: into a buffer it
 * allocates (*out, *out_size), grown and decoded again until the output
 * fits, never past limit bytes, so that a damaged or hostile stream cannot
 * make us allocate without bound. hint: the size the stream says it has
 * (ZM__SIZE_UNKNOWN if it says none). */
int zm__decode_grow(zm__sized_decoder decode, const void *codec, const char *name, size_t hint,
                    const uint8_t *src, size_t src_size, size_t limit, uint8_t **out,
                    size_t *out_size, zm_err *err);

#endif
