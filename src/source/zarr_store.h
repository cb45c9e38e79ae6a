/* Internal to the source module: Zarr stores read as the source of a mount.
 *
 * Three layers, each in its own file:
 *  - the store (zarr_store.c): a directory or a zip file, read by key
 *    ("obs/.zattrs", "X/data/c/0"); where each key's bytes lie, its whole
 *    value, the keys under a prefix, and the store's identity;
 *  - the metadata (zarr_meta.c): Zarr v2 (.zgroup, .zarray, .zattrs,
 *    consolidated .zmetadata) and v3 (zarr.json, consolidated inline) into
 *    one tree of groups and arrays with their attributes;
 *  - the codecs (zarr_codecs.c): one stored chunk into its values (v2
 *    compressors and filters, v3 codec chains, sharding's index).
 * zarr_array.c makes zm_arrays of them and zarr_source.c the container the
 * AnnData reader walks. Nothing here calls HDF5.
 */
#ifndef ZARRMOUNT_SOURCE_ZARR_STORE_H
#define ZARRMOUNT_SOURCE_ZARR_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"
#include "zarrmount/source.h"

/* ---- The store (zarr_store.c) ------------------------------------------------ */

typedef struct zm__store zm__store;

typedef enum zm__store_kind {
    ZM__STORE_DIRECTORY,
    ZM__STORE_ZIP,
} zm__store_kind;

/* Bounds on what a store may hold, whatever it claims. */
#define ZM__STORE_FILES_MAX      (16u << 20) /* files of a directory store, members of a zip */
#define ZM__STORE_DEPTH_MAX      80          /* directory levels below the store's root */
#define ZM__STORE_METADATA_MAX   ((size_t)256 << 20) /* one metadata document */

/* Where one key's stored bytes lie. A directory store's key is a file of
 * its own, opened for this lookup (fd; zm__stored_done closes it); a zip's
 * is a member of the one file (fd is the store's). */
typedef struct zm__stored {
    int fd;            /* to pread from */
    int owned;         /* fd is this lookup's (closed by zm__stored_done) */
    uint64_t offset;   /* where the key's stored bytes start in fd */
    uint64_t size;     /* stored bytes */
    int deflated;      /* a zip member compressed with deflate (method 8) */
    uint64_t raw_size; /* deflated: its inflated size; else size */
    uint32_t crc32;    /* zip: the member's CRC-32 (checked when inflated whole) */
} zm__stored;

/* Opens the store at path through fd, a descriptor of it opened and checked
 * by the caller (O_RDONLY; a directory or a regular file): a directory is
 * a directory store; a regular file must be a zip (its end of central
 * directory found; zip64 read), else -EINVAL "not a zip file". A zip's
 * central directory is read once: a name written twice is its last entry
 * (as Python's zipfile and zarr read it); members encrypted, or compressed
 * by another method than stored (0) or deflate (8), are refused when read,
 * naming the member. A directory store's files are listed once (bounded by
 * the limits above), giving its manifest (zm__store_identity). The store
 * keeps fd (the caller must not close it while the store is open). */
int zm__store_open(int fd, const char *path, zm__store **out, zm_err *err);
void zm__store_close(zm__store *store);
zm__store_kind zm__store_get_kind(const zm__store *store);

/* Where key's bytes lie: 0, or -ENOENT when the store has no such key (a
 * chunk never written: the caller decides what that means; a key with a
 * leading '/', an empty, "." or ".." component names nothing), -EIO when
 * the key's file cannot be opened or has changed since the store was
 * opened (its size or mtime is not the manifest's, it appeared or went, or
 * is reached through a symbolic link now: reason naming the key), -ENOTSUP
 * for a zip member encrypted or compressed by another method. A zip
 * member's local header is read on its first lookup (and kept). */
int zm__store_locate(zm__store *store, const char *key, zm__stored *out, zm_err *err);
/* Releases what zm__store_locate opened. */
void zm__stored_done(zm__stored *stored);

/* size bytes from offset of a located key's value into buffer; a deflated
 * member is inflated (whole, and checked against its CRC-32) and the bytes
 * taken from its inflated value. A stored member read whole (as
 * zm__store_get reads it) is checked against its CRC-32 too; a part of one
 * cannot be. Short: -EIO naming the key. Adds the bytes read from the file
 * to *bytes_read (if not NULL). */
int zm__store_read(zm__store *store, const char *key, const zm__stored *stored, uint64_t offset,
                   void *buffer, size_t size, uint64_t *bytes_read, zm_err *err);

/* The whole value of key (at most limit bytes; more is -EFBIG naming the
 * key), malloc'd into *bytes (NUL-terminated past *size, for JSON).
 * -ENOENT when absent. */
int zm__store_get(zm__store *store, const char *key, size_t limit, uint8_t **bytes, size_t *size,
                  uint64_t *bytes_read, zm_err *err);

/* The names one level below prefix ("" for the store's root; "obs"), files
 * and directories alike (a zip's names as its members' paths imply them),
 * sorted bytewise, each once. -ENOENT when nothing lies below prefix. */
int zm__store_list(zm__store *store, const char *prefix, zm_strings *names, zm_err *err);

/* What the store is on disk. A zip: the file's device, inode, size and
 * mtime. A directory store: the directory's device and inode, the total
 * size of its files, the newest mtime among them, and digest: a hash
 * (xxh64) of the manifest, every file's relative path, size and mtime in
 * path order, so that any file of it changing, appearing or going changes
 * it. */
void zm__store_identity(const zm__store *store, zm_source_identity *out);

/* Whether the store is still what it was opened as: a zip's file, by its
 * descriptor's size and mtime; a directory store's path still naming the
 * directory opened (device and inode) and its metadata documents (the keys
 * zm__store_get read), by their size and mtime. A mount calls it at every
 * read, so it stats those few and never every directory: its chunk files
 * are checked as zm__store_locate opens them (changed, gone, or new where
 * the manifest had none: EIO), which covers every byte served. -EIO with
 * the reason naming what changed. */
int zm__store_check(zm__store *store, zm_err *err);

/* ---- The metadata (zarr_meta.c) ---------------------------------------------- */

/* The types a Zarr array's values take. */
typedef enum zm__zvalue {
    ZM__ZVALUE_NUMBER,   /* integer, float or bool: zm_dtype */
    ZM__ZVALUE_VLEN,     /* variable-length UTF-8 (v2 object dtype with the vlen-utf8
                          * filter; v3 "string" with vlen-utf8): read as strings */
    ZM__ZVALUE_BYTES,    /* fixed-length bytes ("|S18"): strings, NULs at the end dropped */
    ZM__ZVALUE_UNICODE,  /* fixed-length UCS-4 ("<U10"): strings, NULs at the end dropped */
    ZM__ZVALUE_RECORDS,  /* a structured dtype (v2): fields */
} zm__zvalue;

/* One codec of a chain. */
typedef enum zm__zcodec_id {
    ZM__ZCODEC_BYTES,     /* v3 array→bytes: endian */
    ZM__ZCODEC_TRANSPOSE, /* v3 array→array: order */
    ZM__ZCODEC_VLEN_UTF8, /* v2 filter / v3 array→bytes */
    ZM__ZCODEC_BLOSC,
    ZM__ZCODEC_ZSTD,
    ZM__ZCODEC_GZIP,      /* gzip stream (numcodecs GZip, v3 gzip) */
    ZM__ZCODEC_ZLIB,      /* zlib stream (numcodecs Zlib) */
    ZM__ZCODEC_LZ4,       /* numcodecs LZ4: a 4-byte little-endian size, then an LZ4 block */
    ZM__ZCODEC_BZ2,
    ZM__ZCODEC_CRC32C,    /* v3: a 4-byte CRC-32C at the end */
    ZM__ZCODEC_SHARDING,  /* v3 sharding_indexed: see zm__zshard */
    ZM__ZCODEC_OTHER,     /* a codec the metadata names that zarr_codecs.c does not
                           * decode (name says which): zm__zarray_supported refuses it */
} zm__zcodec_id;

typedef struct zm__zcodec {
    zm__zcodec_id id;
    char name[32];           /* as the metadata names it, for messages */
    int level;               /* compressors' level (unused when decoding) */
    unsigned order[8];       /* TRANSPOSE: the permutation */
    int big_endian;          /* BYTES */
    /* BYTES, big_endian: the bytes of one number swapped (a number's size,
     * 4 for UCS-4 text); 1 where nothing is swapped (bytes, records: a
     * record's fields say their own order, zm__zfield.big_endian). */
    unsigned word_size;
} zm__zcodec;

#define ZM__ZCODEC_MAX 16

typedef struct zm__zshard zm__zshard;

/* One field of a structured dtype. */
typedef struct zm__zfield {
    char name[256];
    zm__zvalue value;
    zm_dtype dtype;          /* NUMBER: its type; BYTES/UNICODE: size is the stored size */
    int big_endian;
    size_t offset, size;     /* within one record */
} zm__zfield;

/* An array's metadata, v2 or v3 alike. */
typedef struct zm__zarray {
    int zarr_format;         /* 2 or 3 */
    char dtype_name[64];     /* as the metadata says it ("<f4", "float32", "|O", "string") */
    zm__zvalue value;
    zm_dtype dtype;          /* NUMBER: the type reads return (native order) */
    int big_endian;          /* NUMBER: stored big-endian */
    size_t item_size;        /* bytes of one stored value (RECORDS: of one record; VLEN: 0) */
    zm__zfield *fields;      /* RECORDS: field_count of them */
    size_t field_count;
    unsigned rank;           /* 0 for a 0-d array */
    uint64_t shape[ZM_MAX_RANK];
    uint64_t chunks[ZM_MAX_RANK]; /* the chunk grid (v3 sharded: the shard's shape) */
    int fortran_order;       /* v2 "order": "F" (the chunk's values in F order) */
    /* The fill value of a chunk never written, as one stored value in
     * native order (NUMBER); fill_missing: the metadata has none (null), so
     * a chunk never written is an error, not a value. */
    uint8_t fill[16];
    int fill_missing;
    /* The fill as zm__zarr_decode's output holds one value (item_size bytes:
     * NUMBER in native order, BYTES, UNICODE, RECORDS as stored), or for
     * VLEN the fill string's UTF-8 (fill_size bytes, NUL after them);
     * owned; fill[] holds the same when it fits. With fill_missing: the
     * type's zero (VLEN: ""), which zarr-python 3 reads a chunk never
     * written as, and leaves such chunks out when writing: ../shared/data's
     * v2 stores (anndata 0.13) have 0-d arrays of fill null and no chunk.
     * A reader that follows zarr-python 3 uses it; one that keeps to the
     * rule above refuses. NULL only for a type we do not read. */
    uint8_t *fill_bytes;
    size_t fill_size;
    /* Chunk keys: v2 "0.1" (separator '.' or '/'); v3 "default" "c/0/1"
     * (separator '/' or '.') or "v2" "0.1". */
    int key_prefix_c;        /* the "c" of v3's default encoding */
    char separator;
    /* The chain, in the order written (v2: filters then the compressor;
     * v3: the metadata's codecs), decoded in reverse. A v2 array whose
     * dtype is big-endian (">i4", ">U3") has a "bytes" codec first that
     * its dtype implies (big_endian, word_size), so that decoding swaps its
     * values as v3's bytes codec does. */
    zm__zcodec codecs[ZM__ZCODEC_MAX];
    unsigned codec_count;
    zm__zshard *shard;       /* sharding_indexed, else NULL */
    /* Why the values cannot be read though the metadata is valid Zarr (a
     * data type we do not read: "data type \"<f2\" (float16) is not
     * supported"), "" when they can: zm__zarray_supported says it. */
    char unsupported[160];
} zm__zarray;

/* sharding_indexed: the shard (zm__zarray.chunks) holds inner chunks. */
struct zm__zshard {
    uint64_t inner[ZM_MAX_RANK];   /* the inner chunks' shape */
    uint64_t per_shard;            /* inner chunks in one shard */
    zm__zcodec codecs[ZM__ZCODEC_MAX];      /* each inner chunk's chain */
    unsigned codec_count;
    zm__zcodec index_codecs[ZM__ZCODEC_MAX]; /* the index's (bytes, crc32c) */
    unsigned index_codec_count;
    int index_at_start;            /* index_location "start" (else "end") */
    size_t index_bytes;            /* the stored index's size: 16 per inner chunk (+4 with crc32c) */
};

typedef enum zm__znode_kind {
    ZM__ZNODE_GROUP,
    ZM__ZNODE_ARRAY,
} zm__znode_kind;

/* One node of the tree: a group or an array, with its attributes. */
typedef struct zm__znode {
    zm__znode_kind kind;
    char *path;              /* "" for the root, "obs/cell_type/codes" */
    json_t *attributes;      /* an object (empty when it has none); owned */
    zm__zarray *array;       /* ARRAY */
} zm__znode;

typedef struct zm__ztree zm__ztree;

/* Reads the store's root: v3 zarr.json (its consolidated_metadata, when
 * present, gives every node at once) or v2 .zgroup/.zattrs (.zmetadata
 * gives every node at once). Neither: -EINVAL "not a Zarr store (no
 * zarr.json, .zgroup or .zmetadata at its root)". Metadata that is not
 * valid JSON, or not what Zarr says it is: -EINVAL naming the key and what
 * was wrong. Codecs we do not decode are not refused here: the array's
 * node says (zm__zarray_supported), so that only what uses it fails. */
int zm__ztree_open(zm__store *store, zm__ztree **out, zm_err *err);
void zm__ztree_close(zm__ztree *tree);
int zm__ztree_format(const zm__ztree *tree);       /* 2 or 3 */
int zm__ztree_consolidated(const zm__ztree *tree); /* metadata read from one document */
/* Bytes the metadata documents read took (for the source's counters). */
uint64_t zm__ztree_bytes_read(const zm__ztree *tree);

/* The node at path ("" for the root; no leading or trailing '/'), read on
 * first use (then kept) where the metadata is not consolidated: -ENOENT
 * when there is none, -EINVAL for bad metadata (the reason names the key)
 * or a path with an empty, "." or ".." name. zm__ztree_node and
 * zm__ztree_children keep what they read: one thread at a time calls them
 * (the reader builds its model in one); the nodes they return stay as
 * they are until zm__ztree_close, readable from any thread. */
int zm__ztree_node(zm__ztree *tree, const char *path, const zm__znode **out, zm_err *err);
/* The names of a group's children (groups and arrays), sorted bytewise,
 * into names (zm_strings_free frees them); -ENOTDIR for an array. Not
 * consolidated: the names the store lists below the group that hold a
 * node's document (.zarray or .zgroup; zarr.json). */
int zm__ztree_children(zm__ztree *tree, const char *path, zm_strings *names, zm_err *err);

/* 0 if every codec of the array's chains is one zarr_codecs.c decodes;
 * else -ENOTSUP with the reason naming the codec ("codec \"lzma\" is not
 * supported"). */
int zm__zarray_supported(const zm__zarray *array, zm_err *err);
/* A chunk's key: the array's path, then the chunk's coordinates as the
 * array's key encoding spells them ("X/data/c/3", "X/0.1", "obs/title/0"
 * for a 0-d v2 array, "uns/title/c" for v3). */
int zm__zarray_chunk_key(const zm__zarray *array, const char *path, const uint64_t *coords,
                         char *key, size_t size);

/* ---- The codecs (zarr_codecs.c) ---------------------------------------------- */

/* Decodes one stored chunk through its chain (codecs[0 .. count) as the
 * metadata lists them, run in reverse) into out: exactly raw_size bytes,
 * the chunk's values in C order and native byte order (a transpose or a v2
 * F order undone, big-endian values swapped). shape is the chunk's shape
 * (rank dims), item_size one stored value's bytes. -EIO with a reason
 * naming the codec and what was wrong (a stream that does not decode, a
 * size that is not the chunk's, a CRC-32C that does not match), -ENOTSUP
 * for a codec it does not decode, -ENOMEM. Thread-safe. A shard is not
 * one chunk (sharding_indexed: -ENOTSUP): its inner chunks are, each
 * decoded through zm__zshard.codecs where zm__zshard_index puts it. */
int zm__zarr_decode(const zm__zcodec *codecs, unsigned count, int fortran_order, unsigned rank,
                    const uint64_t *shape, size_t item_size, const uint8_t *in, size_t in_size,
                    uint8_t *out, size_t raw_size, zm_err *err);

/* The same for a chunk of variable-length strings (vlen-utf8 its
 * array-to-bytes codec): its values, as many as shape holds, into *out (C
 * order; zm_strings_free frees them). -EIO also when the chunk holds
 * another count of values or a length past its end. */
int zm__zarr_decode_strings(const zm__zcodec *codecs, unsigned count, int fortran_order,
                            unsigned rank, const uint64_t *shape, const uint8_t *in,
                            size_t in_size, zm_strings *out, zm_err *err);

/* The first needed bytes of a chunk's values alone, where its chain lets
 * a part be decoded without the rest (a 1-d chunk, one zstd stream, at
 * most a bytes codec that leaves the bytes as they are): 1 when done, 0
 * when the chain does not allow it (decode the whole chunk), or -EIO for a
 * stream that is damaged or ends early. A part of a chunk then costs about
 * its share of the chunk's decoding. out holds capacity bytes (at least
 * needed): with room for the whole chunk the blocks are decoded straight
 * into it, stopping after the one that holds the last byte needed (bytes
 * after needed are then written too); with less, through zstd's window. */
int zm__zarr_decode_prefix(const zm__zcodec *codecs, unsigned count, int fortran_order,
                           unsigned rank, const uint64_t *shape, size_t item_size,
                           const uint8_t *in, size_t in_size, uint8_t *out, size_t capacity,
                           size_t needed, zm_err *err);
/* Whether a chain lets zm__zarr_decode_prefix decode a part (before any
 * byte is read). */
int zm__zarr_prefix_decodable(const zm__zcodec *codecs, unsigned count, int fortran_order,
                              unsigned rank);

/* A shard's index (index_bytes of it, as stored) into offsets and sizes of
 * its per_shard inner chunks (C order over the shard's inner grid):
 * UINT64_MAX for both where a chunk is absent. Checked: the index's
 * CRC-32C (with crc32c), every present chunk within shard_size bytes of
 * the shard, overlapping neither the index nor another chunk. -EIO naming
 * what was wrong. */
int zm__zshard_index(const zm__zshard *shard, const uint8_t *index, size_t index_bytes,
                     uint64_t shard_size, uint64_t *offsets, uint64_t *sizes, zm_err *err);

/* CRC-32C (Castagnoli) of size bytes, as Zarr's crc32c codec stores it. */
uint32_t zm__crc32c(const uint8_t *bytes, size_t size);

#endif
