/* zarrmount zarr: Zarr v2 metadata documents and chunk codecs, written the
 * way zarr-python 2.13 / numcodecs write them (anndata 0.8's write_zarr),
 * byte for byte where a reader could tell, and deterministic: the same
 * input gives the same metadata and the same decoded values on every
 * machine and run, and the same compressed bytes wherever the codec
 * libraries' versions are the same (zm_codec_libraries).
 *
 * See shared/reference/anndata08-zarr-layout.txt for what anndata writes. */
#ifndef ZARRMOUNT_ZARR_H
#define ZARRMOUNT_ZARR_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"

struct json_t;

#define ZM_ZARR_MAX_RANK 8

/* ---- Codecs ----------------------------------------------------------------- */

typedef enum zm_codec_kind {
    ZM_CODEC_NONE,  /* "compressor": null */
    ZM_CODEC_BLOSC, /* numcodecs Blosc, byte shuffle */
    ZM_CODEC_ZSTD,  /* numcodecs Zstd: one frame per chunk, content size in its header */
} zm_codec_kind;

typedef struct zm_codec {
    zm_codec_kind kind;
    char blosc_cname[16]; /* "zstd" or "lz4" (also "lz4hc", "blosclz", "zlib") */
    int level;            /* blosc clevel 0-9 or zstd level 1-22 */
    int shuffle;          /* blosc: 0 none, 1 byte shuffle, 2 bit shuffle */
    int blocksize;        /* blosc: bytes a block (at most the chunk's); 0: blosc's choice */
} zm_codec;

/* blosc's block: a whole 1 MiB chunk in one block compresses about twice
 * as fast as the blocks blosc picks itself at level 1 (16-32 KiB: zstd
 * starts over in each), and a little smaller. Readers decode whole chunks,
 * so nothing needs the smaller blocks. */
#define ZM_BLOSC_BLOCKSIZE (1 << 20)

/* The default: blosc with lz4 at level 5 and bit shuffle ("blosc" named
 * alone is zstd level 1 with byte shuffle). */
zm_codec zm_codec_default(void);

/* Parses "none", "zstd[:LEVEL]",
 * "blosc[:zstd|lz4|lz4hc|blosclz|zlib[:LEVEL[:shuffle|bitshuffle|noshuffle]]]".
 * -EINVAL with a one-line reason for anything else. */
int zm_codec_parse(const char *text, zm_codec *codec, zm_err *err);

/* Writes the codec as text in the form zm_codec_parse reads ("blosc:zstd:1"). */
void zm_codec_format(const zm_codec *codec, char *out, size_t size);

/* The "compressor" entry of .zarray: NULL (JSON null) for none, else a new
 * object ({"blocksize": 1048576, "clevel": 1, "cname": "zstd", "id": "blosc",
 * "shuffle": 1} / {"id": "zstd", "level": 1}). */
struct json_t *zm_codec_config(const zm_codec *codec);

/* Encodes one chunk: in (size bytes of values typesize bytes each) into a
 * malloc'd *out of *out_size bytes. Deterministic for one set of library
 * versions (zm_codec_build), thread-safe (no global
 * codec state; blosc through its _ctx calls with one internal thread). For
 * ZM_CODEC_NONE *out is a copy. */
int zm_codec_encode(const zm_codec *codec, size_t typesize, const void *in, size_t size,
                    uint8_t **out, size_t *out_size, zm_err *err);

/* Decodes one chunk encoded by zm_codec_encode (tests, cache checks). */
int zm_codec_decode(const zm_codec *codec, const void *in, size_t size, uint8_t **out,
                    size_t *out_size, zm_err *err);

/* ---- Codec libraries ----------------------------------------------------------- */

/* A library that makes chunk bytes, and the version of it this process runs
 * (asked of the library itself at run time, not of the headers we were
 * built with). */
typedef struct zm_codec_library {
    const char *name;    /* "blosc", "blosclz", "lz4", "zlib", "zstd" */
    const char *version; /* "1.21.3": printable ASCII, never empty */
} zm_codec_library;

/* Every library the encoders call to make chunk bytes, sorted by name, with
 * its version: blosc; the compressors blosc calls (blosclz, inside blosc;
 * lz4, also lz4hc's; zlib; zstd), each as blosc's calls are bound to it at
 * run time (the shared library the dynamic linker loaded, else the copy
 * blosc was built with); zstd is also the library the zstd codec calls. A
 * compressor this blosc was built without is left out. *count gets the
 * number; the array lives as long as the process. The same list goes into
 * .zarrmount/info.json ("codecLibraries") and into the disk cache's spaces
 * (zm_codec_build). Thread-safe. */
const zm_codec_library *zm_codec_libraries(size_t *count);

/* The libraries that make codec's chunk bytes and their versions, as one
 * text, "NAME-VERSION" joined by '+': "blosc-1.21.3+zstd-1.5.4" for
 * blosc:zstd, "zstd-1.5.4" for zstd, "" for none (its chunks are the values
 * as they are, made by no codec library). Two chunks of one codec, level and
 * input are the same bytes when this text is the same; with another version
 * of a library they may not be (zstd's output changed between 1.5.4 and
 * 1.5.7). Cut short (still NUL-terminated) past size; 256 bytes suffice. */
void zm_codec_build(const zm_codec *codec, char *out, size_t size);

/* ---- Values ---------------------------------------------------------------- */

/* numcodecs VLenUTF8: a uint32 LE count, then per item a uint32 LE byte
 * length and the UTF-8 bytes. count items, item i is bytes[offsets[i] ..
 * offsets[i + 1]). *out malloc'd. -EINVAL (naming the item and byte) for an
 * item that is not strict UTF-8, which numcodecs could not decode, or past
 * the INT_MAX items or bytes numcodecs reads. */
int zm_vlen_utf8_encode(size_t count, const uint64_t *offsets, const char *bytes, uint8_t **out,
                        size_t *out_size, zm_err *err);

/* A string as numpy "<U{n}" holds it: n = its code points, each as UTF-32LE.
 * Returns n through *code_points and the bytes in *out (4n, malloc'd);
 * -EINVAL for invalid UTF-8 (overlongs, surrogates, past U+10FFFF, cut
 * short). The empty string is "<U1" with one NUL code point (4 zero bytes),
 * as np.array("") is and as anndata writes it. */
int zm_utf32_encode(const char *utf8, size_t length, uint8_t **out, size_t *out_size,
                    size_t *code_points, zm_err *err);

/* ---- Documents --------------------------------------------------------------- */

/* The kind of fill_value an array's dtype takes. */
typedef enum zm_fill {
    ZM_FILL_ZERO_INT,   /* 0 */
    ZM_FILL_ZERO_FLOAT, /* 0.0 */
    ZM_FILL_FALSE,      /* false */
    ZM_FILL_EMPTY_TEXT, /* "" (for "<U" scalars) */
    ZM_FILL_NULL,       /* null */
    ZM_FILL_ZERO_RECORD,/* base64 of record_size zero bytes (structured dtypes) */
} zm_fill;

typedef struct zm_zarr_array_meta {
    unsigned rank;                      /* 0 for a scalar */
    uint64_t shape[ZM_ZARR_MAX_RANK];
    uint64_t chunks[ZM_ZARR_MAX_RANK];
    char dtype[16];                     /* numpy: "<f4", "|b1", "|i1", "<i8", "|O", "<U14" */
    zm_fill fill;
    const zm_codec *codec;              /* NULL: "compressor": null */
    int vlen_utf8;                      /* "filters": [{"id": "vlen-utf8"}] (else null) */
    /* A structured dtype (anndata's rec-array): [[name, dtype], ...], written
     * as "dtype" in place of dtype; record_size bytes a record. */
    const struct json_t *dtype_fields;
    size_t record_size;
} zm_zarr_array_meta;

/* JSON text as zarr-python writes it: indent 4, keys sorted, ASCII with
 * \uXXXX escapes, separators ", " and ": ", no trailing newline. *out is
 * malloc'd (NUL-terminated, *length without the NUL). */
int zm_zarr_dump(const struct json_t *document, char **out, size_t *length, zm_err *err);

/* The .zarray document (as a JSON object), or NULL when out of memory or
 * meta is impossible (rank past ZM_ZARR_MAX_RANK, a size past 2^63). The
 * compressor is written as given: zarr-python writes null for every 0-d
 * array, so callers pass codec NULL for rank 0 (and store its chunk raw). */
struct json_t *zm_zarr_array_document(const zm_zarr_array_meta *meta);
/* The .zgroup document: {"zarr_format": 2}. */
struct json_t *zm_zarr_group_document(void);

/* The longest chunk key: ZM_ZARR_MAX_RANK 20-digit coordinates, the dots
 * between them and the NUL. */
#define ZM_ZARR_CHUNK_KEY_MAX (ZM_ZARR_MAX_RANK * 21)

/* The key of a chunk from its grid coordinates ("0", "1.0", "0.0.3"; "0"
 * for a scalar), into out (64 bytes suffice up to rank 3, or for
 * coordinates below 10^7; ZM_ZARR_CHUNK_KEY_MAX always). A smaller out gets
 * the key cut short, still NUL-terminated. */
void zm_zarr_chunk_key(unsigned rank, const uint64_t *coords, char *out, size_t size);

/* Parses a chunk key ("3.0") against a grid: fills coords and returns 0, or
 * -ENOENT if it is not a canonical key of a chunk inside the grid (leading
 * zeros, signs, wrong count, past the grid). */
int zm_zarr_parse_chunk_key(const char *key, unsigned rank, const uint64_t *grid, uint64_t *coords);

#endif
