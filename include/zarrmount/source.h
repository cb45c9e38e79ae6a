/* zarrmount source: single-cell files read into one element model.
 *
 * A source is an AnnData .h5ad (every anndata encoding, including the pre-0.7
 * ones real files still use), a MuData .h5mu, a loom file, a 10x Genomics
 * Cell Ranger .h5 (v2 and v3), or an AnnData Zarr store (v2 or v3, a
 * directory or a zip). Whatever the format, it is described as the tree anndata
 * would present: X, layers, obs, var, obsm, varm, obsp, varp, raw, uns, with
 * cells along the first axis. Layers above this one never call HDF5.
 *
 * Reads: HDF5 says where the bytes are; chunks are pread and their filters
 * decoded on our own threads, outside HDF5's global lock, each chunk a
 * request needs decoded once and kept in a bounded cache. Datasets whose
 * bytes we cannot decode ourselves (another filter, variable-length strings,
 * compound members) are read through H5Dread: correct, slower; inspect says
 * which path each array takes.
 *
 * Thread safety: a zm_source may be read from many threads at once.
 */
#ifndef ZARRMOUNT_SOURCE_H
#define ZARRMOUNT_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "zarrmount/error.h"

#define ZM_MAX_RANK 8

typedef struct zm_source zm_source;
typedef struct zm_array zm_array;

/* ---- Values ---------------------------------------------------------------- */

typedef enum zm_type_class {
    ZM_TYPE_INT,
    ZM_TYPE_UINT,
    ZM_TYPE_FLOAT,
    ZM_TYPE_BOOL,   /* one byte, 0 or 1 */
    ZM_TYPE_STRING, /* UTF-8 text, read with zm_array_read_strings */
} zm_type_class;

/* The type of an array's values as reads return them: native (little-endian)
 * byte order, whatever the file stores. */
typedef struct zm_dtype {
    zm_type_class type_class;
    unsigned size; /* bytes per value (strings: 0) */
} zm_dtype;

/* Value i of an array of integers (ZM_TYPE_INT or ZM_TYPE_UINT, 1, 2, 4 or
 * 8 bytes, native order) as an int64 (unsigned ones past INT64_MAX read
 * INT64_MAX). */
int64_t zm_dtype_integer(zm_dtype t, const void *values, uint64_t i);

/* numpy's name for a dtype ("<f4", "|b1", "<i8", "|u1"; strings "str"). */
const char *zm_dtype_name(zm_dtype dtype);

/* ---- Storage ----------------------------------------------------------------- */

typedef enum zm_layout {
    ZM_LAYOUT_CONTIGUOUS,
    ZM_LAYOUT_CHUNKED,
    ZM_LAYOUT_COMPACT,
    ZM_LAYOUT_FIELD,     /* a member of a compound dataset (legacy dataframes) */
    ZM_LAYOUT_ATTRIBUTE, /* values held in an HDF5 attribute */
    ZM_LAYOUT_VIRTUAL,   /* values made by the reader (e.g. a range index) */
} zm_layout;

typedef enum zm_data_path {
    ZM_PATH_DIRECT, /* pread + our own decoders, in parallel */
    ZM_PATH_HDF5,   /* H5Dread under HDF5's lock */
    ZM_PATH_MEMORY, /* held in memory since the file was opened */
} zm_data_path;

typedef struct zm_filter_info {
    unsigned id;
    char name[32];
    unsigned level; /* compression level when the filter has one, else 0 */
} zm_filter_info;

/* How and where an array is stored; for inspect and for planning reads. */
typedef struct zm_array_info {
    const char *file_path;  /* the HDF5 object ("/obs/louvain/codes", "/obs#n_genes") */
    zm_dtype dtype;
    unsigned rank;
    uint64_t shape[ZM_MAX_RANK]; /* as presented (cells first) */
    int transposed;         /* a 2-d array stored as the transpose of shape (loom) */
    zm_layout layout;
    uint64_t chunk_shape[ZM_MAX_RANK]; /* chunked: in storage order */
    unsigned filter_count;
    zm_filter_info filters[16];
    uint64_t storage_bytes; /* bytes the values take in the file */
    uint64_t file_offset;   /* contiguous: where the values start in the file
                             * (chunked: each chunk's offset is in the index) */
    int big_endian;         /* stored big-endian (reads swap) */
    zm_data_path data_path;
    const char *path_reason; /* why ZM_PATH_HDF5 or ZM_PATH_MEMORY, else NULL */
} zm_array_info;

const zm_array_info *zm_array_describe(const zm_array *array);

/* ---- The element model ------------------------------------------------------- */

typedef enum zm_element_kind {
    ZM_ELEMENT_DICT,         /* named children: the root, uns, layers, obsm, ... */
    ZM_ELEMENT_ARRAY,        /* dense n-d numeric or bool array */
    ZM_ELEMENT_STRING_ARRAY, /* n-d array of strings */
    ZM_ELEMENT_SCALAR,       /* 0-d numeric or string */
    ZM_ELEMENT_SPARSE,       /* CSR or CSC matrix */
    ZM_ELEMENT_DATAFRAME,    /* index and columns in order */
    ZM_ELEMENT_CATEGORICAL,  /* codes, categories, ordered */
    ZM_ELEMENT_NULLABLE,     /* nullable integer or boolean: values and mask */
    ZM_ELEMENT_RECORDS,      /* a structured array (numpy rec-array): one child per field */
} zm_element_kind;

/* Which axis of the data set a dimension runs along. */
typedef enum zm_axis {
    ZM_AXIS_NONE,
    ZM_AXIS_OBS,     /* cells */
    ZM_AXIS_VAR,     /* genes */
    ZM_AXIS_RAW_VAR, /* raw's genes */
} zm_axis;

typedef enum zm_sparse_format { ZM_SPARSE_CSR, ZM_SPARSE_CSC } zm_sparse_format;

typedef struct zm_element zm_element;
struct zm_element {
    char *name;           /* the last path component ("" for the root) */
    char *path;           /* model path: "X", "obs/louvain", "uns/neighbors/params" */
    zm_element_kind kind;
    /* The anndata encoding this element takes when written ("csr_matrix",
     * "categorical", ...) and its version, as anndata 0.8 writes them. */
    const char *encoding_type;
    const char *encoding_version;
    /* How the file held it, for inspect ("anndata 0.8 categorical", "legacy
     * compound column with uns categories", "loom col_attrs", ...). */
    char *stored_as;
    unsigned rank;
    uint64_t shape[ZM_MAX_RANK]; /* presented shape; a sparse matrix's is 2-d */
    zm_axis axes[2];             /* what dimensions 0 and 1 run along */

    zm_array *values;  /* ARRAY, STRING_ARRAY, SCALAR: the values; SPARSE: data;
                        * CATEGORICAL: the codes; NULLABLE: the values */
    /* SPARSE */
    zm_sparse_format sparse_format;
    zm_array *indices, *indptr;
    /* NULLABLE */
    zm_array *mask;    /* one byte per value, 1 = missing */
    int nullable_boolean;
    int nullable_string; /* nullable-string-array (anndata >= 0.11): string values */
    char *na_value;      /* its "na-value" attribute ("NA", "NaN"), or NULL */
    /* CATEGORICAL */
    zm_element *categories; /* a STRING_ARRAY or ARRAY element */
    int ordered;
    /* DATAFRAME: index values (a STRING_ARRAY, or ARRAY) and its name */
    zm_element *index;
    char *index_name;
    /* DICT: children by name (sorted as the file lists them); DATAFRAME: the
     * columns in column order; RECORDS: one array per field, in field order.
     * A dataframe's index is named "_index" whatever the file calls it
     * (index_name keeps the file's key). */
    size_t child_count;
    zm_element **children;
    size_t child_capacity;
    /* The children ordered by name (equal names in child order), for
     * lookups in O(log n); made once the model is complete (NULL before). */
    zm_element **children_by_name;
    /* SPARSE: a column window of a matrix whose parts it shares (a 10x
     * modality's X: the features of one type, columns [window_first,
     * window_first + shape[1]) of the file's matrix). Its indices are the
     * file's, window_first more than its own; zm_element_window says where
     * each row's entries lie. NULL: no window. */
    struct zm_window *window;
    uint64_t window_first;
    size_t window_index;
};

/* Where each row of a column window's matrix has its entries among the
 * file's: row r's are [at[r * stride], at[r * stride + 1]). Made on first
 * use in one pass over the matrix's indices, which must not descend within
 * each row (Cell Ranger writes them ascending) and lie below its columns: else -EIO
 * with the reason, for every read of it. */
typedef struct zm_window_rows {
    const int64_t *at;
    size_t stride;
} zm_window_rows;
int zm_element_window(zm_source *source, const zm_element *element, zm_window_rows *out,
                      zm_err *err);

/* ---- Bounds on a file's structure -------------------------------------------------
 *
 * A source's structure is read in time and memory that follow the objects it
 * holds, whatever it claims: each group is read once (a second link to it,
 * hard or soft, and so any cycle, is listed as skipped with the path it was
 * read at), and these bound nesting and names. What lies past them is listed
 * as skipped with its reason (zm_source_skipped), never cut short. */

/* Groups nested deeper than this below the file's root are not read. anndata
 * writes uns dicts a few levels deep (uns/rank_genes_groups/params is 3). */
#define ZM_ELEMENT_DEPTH_MAX 64
/* The longest name an element may have: a file name's (NAME_MAX). */
#define ZM_ELEMENT_NAME_MAX 255
/* The longest path an element may have (in the file and in the model):
 * with one more name it still fits the 1024 bytes a mount builds store
 * paths in. */
#define ZM_ELEMENT_PATH_MAX 767

/* ---- Opening ---------------------------------------------------------------------- */

typedef enum zm_source_format {
    ZM_FORMAT_H5AD,
    ZM_FORMAT_LOOM,
    ZM_FORMAT_10X_V3,
    ZM_FORMAT_10X_V2,
    ZM_FORMAT_H5MU, /* MuData: modalities (zm_source_modality) beside global annotations */
    ZM_FORMAT_ZARR, /* an AnnData Zarr store (zm_source_container says which kind) */
} zm_source_format;

/* What holds a source's bytes: "hdf5" (a file), "zarr-directory" or
 * "zarr-zip"; and a Zarr store's format (2 or 3; 0 for HDF5). */
const char *zm_source_container(const zm_source *source);
int zm_source_zarr_format(const zm_source *source);

typedef struct zm_source_options {
    unsigned threads;            /* decode threads; 0 = one per core */
    /* A 10x file with several feature types or genomes as one AnnData
     * (every feature a gene; a v2 file's first genome), not as MuData
     * modalities: -o layout=anndata. */
    int layout_anndata;
    size_t chunk_cache_bytes;    /* decoded chunks kept; 0 = default (256 MiB) */
} zm_source_options;

/* What a source is on disk, to notice it changing under a mount. */
typedef struct zm_source_identity {
    dev_t device;
    ino_t inode;
    off_t size;       /* a directory store: the total of its files' sizes */
    int64_t mtime_ns; /* a directory store: the newest of its files' */
    /* A directory store: a hash of its manifest (every file's path, size
     * and mtime), so that any file changing changes it; else 0. */
    uint64_t digest;
} zm_source_identity;

/* Whether a Zarr store is still what it was opened as (an HDF5 file's
 * identity is checked by its path's stat, which says it all): its
 * directory, and the metadata documents read. -EIO with why. */
int zm_source_check_store(const zm_source *source, zm_err *err);

/* Opens path and builds its element model. Refuses, with one line naming
 * what was expected, files that are not HDF5, not one of the formats above,
 * or whose parts contradict each other (see docs/sources.md). */
int zm_source_open(const char *path, const zm_source_options *options, zm_source **out,
                   zm_err *err);
void zm_source_close(zm_source *source);

zm_source_format zm_source_get_format(const zm_source *source);
const char *zm_source_format_name(zm_source_format format);
const zm_source_identity *zm_source_get_identity(const zm_source *source);
uint64_t zm_source_n_obs(const zm_source *source);
uint64_t zm_source_n_vars(const zm_source *source);
const zm_element *zm_source_root(const zm_source *source);
/* The element at a model path ("obs/louvain"), or NULL. */
const zm_element *zm_source_find(const zm_source *source, const char *path);
/* The child (column, key, field) of an element named name (length bytes),
 * or NULL; a dataframe's index is not among its children. O(log n) once the
 * model is complete. */
const zm_element *zm_element_child(const zm_element *element, const char *name, size_t length);

/* ---- Modalities (MuData) ---------------------------------------------------------
 *
 * A MuData source (.h5mu) is global annotations (its own model: obs, var,
 * obsm, varm, obsp, varp, uns, obsmap, varmap; no X) and modalities, each an
 * AnnData of its own: a source of its own too, with its own cells and genes
 * and model (the element paths in it are the modality's: "X", "obs/..."),
 * read through the source's file, threads and cache. A modality is the
 * source's: it lives as long as the source, and is never closed itself. The
 * global cells (zm_source_n_obs of the source) are what views select; each
 * global cell is a row of a modality or not (/obsmap/NAME). */
size_t zm_source_modality_count(const zm_source *source); /* 0: not multimodal */
/* Modality i in the order served (the file's mod-order, then any other). */
zm_source *zm_source_modality(const zm_source *source, size_t i);
const char *zm_source_modality_name(const zm_source *source, size_t i);
/* The row of modality i that each global cell (by stored row) is, or
 * ZM_SOURCE_ABSENT: from /obsmap/NAME, checked when the source opened
 * (each modality row is exactly one global cell's). */
#define ZM_SOURCE_ABSENT UINT32_MAX
const uint32_t *zm_source_modality_rows(const zm_source *source, size_t i);
/* The root's "axis" attribute (0: the modalities share cells, 1: genes,
 * -1: both), or -2 when it has none. */
int zm_source_modality_axis(const zm_source *source);
/* The root's "encoding-version" attribute of a MuData file ("0.1.0"), or
 * NULL when it has none (a 10x file's modalities). */
const char *zm_source_modality_version(const zm_source *source);
/* The source a modality belongs to (NULL for a source that is no
 * modality). */
const zm_source *zm_source_parent(const zm_source *source);

/* Elements of the file the model leaves out, one line each ("PATH: why"):
 * the modalities' as well as the source's own. */
size_t zm_source_skipped(const zm_source *source, const char *const **lines);
/* Raw bytes of the source file from offset, through the descriptor it was
 * opened and checked with (never the path again); the bytes read, or -errno. */
ssize_t zm_source_read_raw(const zm_source *source, uint64_t offset, void *buffer, size_t size);

/* ---- Reading ------------------------------------------------------------------------- */

/* Bytes of one row (all values after the first index) of a numeric array. */
uint64_t zm_array_row_bytes(const zm_array *array);

/* Reads rows [start, start + count) along dimension 0 of a numeric or bool
 * array (whole rows, presented orientation) into out, native byte order. */
int zm_array_read_rows(zm_source *source, const zm_array *array, uint64_t start, uint64_t count,
                       void *out, zm_err *err);

/* Asks the kernel to read an array's stored bytes ahead, in the background
 * (posix_fadvise WILLNEED): a contiguous dataset's range, or the chunks its
 * index knows (runs of adjacent chunks as one range); nothing if they come
 * to more than max_bytes, nor for other arrays (a Zarr store's, held in
 * memory, through HDF5). A hint: it never fails and reads nothing itself.
 * A pass about to read the whole array calls it while the one before is
 * still at work, so that a cold source's disk time overlaps that work. */
void zm_array_prefetch(zm_source *source, const zm_array *array, uint64_t max_bytes);

/* Whether the array's values are copied from a map of the source's file
 * (a contiguous dataset of an HDF5 file): rows from all over it then cost
 * a copy each, not a read each, so that a chunk of a reordered view is
 * cheap to make alone, with no walk of the whole array. */
int zm_array_mapped(zm_source *source, const zm_array *array);
/* The pages of the source's map under the array (its values, or its
 * chunks' span) that this process has touched let go (they stay in the
 * page cache): a mapped page read counts in the daemon's resident memory
 * until then. Safe while copies run (they fault the pages in again).
 * Called as a direct walk ends. */
void zm_array_release_mapped(zm_source *source, const zm_array *array);

/* Reads the given rows (strictly ascending) into out, row after row. Each
 * chunk holding one of them is read and decoded once. */
int zm_array_gather_rows(zm_source *source, const zm_array *array, const uint64_t *rows,
                         size_t count, void *out, zm_err *err);

/* Flags of the scatter reads. ZM_READ_PASS: these are all the values a pass
 * over the array takes (a walk): chunks it uses in part are decoded only as
 * far as it needs and are not kept for later reads. */
#define ZM_READ_PASS 1u
/* ZM_READ_KEEP: the chunks this read decodes are kept in the cache however
 * many there are (a long read is otherwise taken as a pass): the caller
 * reads the same chunks again soon (a view's layout, then its chunks). */
#define ZM_READ_KEEP 2u
/* ZM_READ_MAPPED: the values are in the page cache or asked for ahead
 * (zm_array_prefetch): many short runs of a mapped array (zm_array_mapped)
 * are copied from the map rather than read a run a pread. Without it a
 * read uses pread, whose pieces run in parallel: a map read cold faults a
 * page at a time, waiting for each. */
#define ZM_READ_MAPPED 4u

/* Reads the given rows (strictly ascending) into out, row i at output row
 * out_rows[i]: a gather and a scatter in one pass, each value copied once. */
int zm_array_scatter_rows(zm_source *source, const zm_array *array, const uint64_t *rows,
                          const uint64_t *out_rows, size_t count, void *out, unsigned flags,
                          zm_err *err);
/* zm_array_read_rows with the flags of the scatter reads. */
int zm_array_read_rows_flags(zm_source *source, const zm_array *array, uint64_t start,
                             uint64_t count, void *out, unsigned flags, zm_err *err);

/* A range [start, end) of values of a 1-d array. */
typedef struct zm_range {
    uint64_t start, end;
} zm_range;

/* Reads ranges (ascending, not overlapping) of a 1-d array one after another
 * into out: the entries of a sparse matrix's kept rows. */
int zm_array_gather_ranges(zm_source *source, const zm_array *array, const zm_range *ranges,
                           size_t count, void *out, zm_err *err);

/* The same, range i written from value out_at[i] of out (the output places
 * may be in any order; the ranges still ascend). */
int zm_array_scatter_ranges(zm_source *source, const zm_array *array, const zm_range *ranges,
                            const uint64_t *out_at, size_t count, void *out, unsigned flags,
                            zm_err *err);

/* Strings: count items, item i is bytes[offsets[i] .. offsets[i + 1]). */
typedef struct zm_strings {
    size_t count;
    uint64_t *offsets;
    char *bytes;
} zm_strings;

/* Reads every value of a string array (rows NULL) or the given rows
 * (ascending; for an n-d array, every value of each row in C order). */
int zm_array_read_strings(zm_source *source, const zm_array *array, const uint64_t *rows,
                          size_t count, zm_strings *out, zm_err *err);
void zm_strings_free(zm_strings *strings);

/* ---- The default block size B0 (spec: "blocks") ----------------------------------- */

typedef struct zm_block_size {
    uint64_t block_size;
    const char *rule;    /* "csr-index-chunks", "dense-chunk-rows", "obsm-chunk-rows",
                          * "bytes-64KiB", "one" */
    char element[256];   /* the element it came from */
    char explanation[256];
} zm_block_size;

int zm_source_default_block_size(zm_source *source, zm_block_size *out, zm_err *err);

/* ---- Cellucid's priority order (spec: "Priority-ordered files") -------------------- *
 *
 * A file Cellucid writes stores its cells in the priority order of a seed,
 * says so in uns/cellucid/priority and names each row's original position in
 * obs/cellucid_original_position. The record is verified when the source
 * opens (docs/sources.md says how); a verified file's cells are named by
 * their original positions everywhere above this layer. One that does not
 * verify is read as a file Cellucid did not write (each row its own
 * position), never refused, with the reason kept. */
typedef struct zm_priority {
    int recorded;  /* the file has uns/cellucid/priority */
    int verified;  /* and it verifies: the rows are seed's priority order */
    uint32_t seed; /* verified: the file's seed */
    uint64_t n;    /* cells */
    /* Not verified: why (a record that does not verify, or a position
     * column with no record); "" for a file with neither. */
    char reason[ZM_REASON_MAX];
    /* Verified: something of the record left unused, and why (prefix counts
     * of a matrix that is not gene-major, ...), else "". */
    char note[ZM_REASON_MAX];
    const uint32_t *original; /* verified: each stored row's original position */
    const uint32_t *stored;   /* verified: each original position's stored row */
    /* Verified, with levels: the levels smallest first, the record's index
     * of each, and the record's element (its values are these levels). */
    uint64_t level_count;
    const uint64_t *levels;
    const uint64_t *level_columns;
    const zm_element *levels_element;
    /* Verified, a gene-major X with varm/cellucid_prefix_counts checked
     * against X's pointers: gene g's stored values among the first levels[j]
     * rows at prefix_counts[g * level_count + j]; else NULL. */
    const uint32_t *prefix_counts;
    uint64_t prefix_genes;
} zm_priority;

const zm_priority *zm_source_priority(const zm_source *source);

/* ---- Counters ------------------------------------------------------------------------ */

typedef struct zm_source_stats {
    uint64_t chunks_decoded;      /* source chunks read and decoded */
    uint64_t bytes_read;          /* bytes pread from the file */
    uint64_t hdf5_reads;          /* reads that went through H5Dread */
    uint64_t cache_hits, cache_misses, cache_evictions, cache_bytes;
} zm_source_stats;

void zm_source_get_stats(zm_source *source, zm_source_stats *stats);

/* The most the source's decoded-chunk cache can ever hold: the decoded size
 * of its chunked arrays, its modalities' too (UINT64_MAX where a chunk's
 * decoded size is not known: strings). A source of contiguous datasets only,
 * as anndata writes by default, needs none: a mount gives that memory to
 * its walks (docs/performance.md, "Memory"). */
uint64_t zm_source_chunk_cache_need(const zm_source *source);

/* A caller's share of the counters: a thread sets a tally, and every read it
 * makes from then on (the chunks its gathers decode on the pool's threads
 * included) adds to it as well as to the source's own counters. A mount
 * gives each view one, so that what a view's files cost is known. */
typedef struct zm_source_tally {
    _Atomic uint64_t chunks_decoded, bytes_read, hdf5_reads;
} zm_source_tally;

/* Sets the calling thread's tally (NULL: none); returns the one it had, to
 * put back. */
zm_source_tally *zm_source_tally_set(zm_source_tally *tally);

/* Work done ahead of readers (a mount synthesizing a view's next chunks
 * before they are asked for) marks its thread as background: while *flag is
 * non-zero, the chunk decodes it hands to the pool's threads are taken only
 * when no reader's are waiting, and run at idle priority (SCHED_IDLE), so a
 * reader never queues behind them. Clearing *flag (a reader now waits for
 * that work) makes them ordinary at once. NULL: the thread's work is
 * ordinary. Returns the flag the thread had, to put back. */
const _Atomic int *zm_source_background_set(const _Atomic int *flag);

/* A pass: one read over many chunks (a walk of a whole array, a view's
 * index pointers), counted as its chunks are read so that long ones can be
 * watched. A contiguous array's pass counts the pieces it is read in. */
typedef struct zm_source_pass {
    char what[256];         /* the HDF5 object: "/X/data" */
    const char *unit;       /* "chunks" or "pieces" */
    zm_source_tally *tally; /* the tally of the thread that began it (NULL: none) */
    uint64_t done, total;
    double seconds; /* since it began, or (finished) how long it took */
    int finished;
} zm_source_pass;

/* The passes running now, then the last few finished (newest first), up to
 * capacity of them into out; returns how many. */
size_t zm_source_passes(zm_source *source, zm_source_pass *out, size_t capacity);

#endif
