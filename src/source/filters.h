/* Internal to the source module: HDF5 filter pipelines decoded outside
 * HDF5 (and its global lock), on our own threads. */
#ifndef ZARRMOUNT_SOURCE_FILTERS_H
#define ZARRMOUNT_SOURCE_FILTERS_H

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

#endif
