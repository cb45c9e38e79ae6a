/* Internal to the source module: the structures behind zm_source and
 * zm_array, and the pieces the format readers share. */
#ifndef ZARRMOUNT_SOURCE_INTERNAL_H
#define ZARRMOUNT_SOURCE_INTERNAL_H

#include <errno.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "zarrmount/cache.h"
#include "source/filters.h"
#include "source/pool.h"
#include "zarrmount/source.h"

/* Finished passes kept to be shown (zm_source_passes). */
#define ZM__FINISHED_PASSES 8

/* HDF5 is one library-wide state: every call into it happens under this
 * lock, and nothing slow (pread, decoding) happens while it is held. */
void zm__hdf5_lock(void);
void zm__hdf5_unlock(void);

/* What names one object of a file whatever the link it is reached by: its
 * file number, then (HDF5 1.10) its header's address or (1.12 and later) its
 * token, an H5O_token_t of 16 bytes. Compared as bytes. */
typedef struct zm__h5_object_id {
    unsigned char bytes[24];
} zm__h5_object_id;

/* One object of a file as every HDF5 from 1.10 to 2.x describes it (the
 * API changed at 1.12: H5Oget_info3 and tokens in place of addresses; the
 * calls are chosen at build time by H5_VERSION_GE, hdf5.c). */
typedef struct zm__h5_object {
    int type;                 /* H5O_TYPE_GROUP, H5O_TYPE_DATASET, ... */
    unsigned long fileno;     /* which open file holds it */
    zm__h5_object_id id;
    uint64_t header_address;  /* its object header's address in the file's own
                               * addressing (btree.c reads it), 0 where the
                               * library cannot say */
} zm__h5_object;

struct zm_array {
    zm_array_info info;
    char *file_path;       /* storage behind info.file_path */
    char *reason;          /* storage behind info.path_reason */
    uint64_t serial;       /* unique per array in the process: cache keys */

    /* The dataset is closed once described (libhdf5 keeps ~13 KB for each
     * open one) and opened again by its path, zm__array_dataset, where a
     * later call needs it. */
    hid_t file;            /* the source's file (H5I_INVALID_HID for memory) */
    char *h5_path;         /* the dataset's path (without any "#field") */
    zm__h5_object_id id;   /* its identity, checked when opened again */
    uint64_t object_addr;  /* its object header's address (btree.c reads it; 0: not known) */
    hid_t stored_type;     /* the dataset's (or field's) file type */
    char *field;           /* ZM_LAYOUT_FIELD: the compound member's name */
    size_t stored_size;    /* bytes per value on disk (fixed strings: their length) */
    int vlen_string;       /* variable-length strings */
    /* Variable-length strings read by vlen.c: the file's address and length
     * sizes and its base address (heap ids are relative to it). */
    int vlen_direct;
    unsigned sizeof_addr, sizeof_size;
    uint64_t base_address;
    int string_is_utf8;
    int xml_unescape;      /* loom: strings hold XML entities (&amp; ...) */

    /* Storage geometry, in storage order. */
    unsigned storage_rank;
    uint64_t storage_shape[ZM_MAX_RANK];
    uint64_t chunk[ZM_MAX_RANK];
    uint64_t grid[ZM_MAX_RANK];   /* chunks along each dimension */
    uint64_t chunk_count;         /* product of grid */
    uint64_t contiguous_offset;   /* contiguous: file offset of the values */
    zm__filter *filters;          /* filter_count of them, allocated (NULL for none) */
    unsigned filter_count;
    uint8_t fill[16];             /* fill value of unallocated chunks (native) */

    /* The chunk index: per chunk (row-major over the grid), looked up the
     * first time a request needs it and kept. */
    pthread_mutex_t index_mutex;
    _Atomic int index_allocated;
    uint64_t *chunk_address;      /* ZM__CHUNK_UNKNOWN, ZM__CHUNK_ABSENT or the file offset */
    uint32_t *chunk_stored_size;
    uint32_t *chunk_filter_mask;
    _Atomic int index_complete;   /* every entry known (set once, under index_mutex) */
    int btree_state;              /* btree.c: 0 not tried, 1 read by us, −1 HDF5's lookups */
    int iterate_refused;          /* H5Dchunk_iter failed once: HDF5's lookups from then on */
    uint64_t btree_root;          /* its version 1 B-tree (relative address) */
    unsigned btree_dims;

    /* Values every read checks (indices below their dimension, codes below
     * their category count): a file whose parts disagree gives an error,
     * never silent garbage. */
    int check_values;
    int64_t value_min, value_limit; /* allowed: value_min ≤ v < value_limit */
    char *check_what;               /* "indices of X", for the message */

    /* ZM_PATH_MEMORY: values made or held at open. */
    void *memory;                 /* numeric values, native */
    zm_strings memory_strings;    /* string values */

    /* An array of a Zarr store (zarr_array.c), else NULL: its chunks are
     * found and decoded there (the HDF5 fields above unused). */
    struct zm__zarr_array *zarr;
};

/* Whether an array's chunks are its values as stored, read where they lie
 * and never kept in the decoded-chunk cache: an HDF5 file's unfiltered,
 * untransposed ones (anndata writes sparse matrices so). read_chunked.c
 * reads them so, and zm_source_chunk_cache_need counts none of them. */
static inline int zm__chunks_as_stored(const zm_array *array)
{
    return array->zarr == NULL && array->filter_count == 0 && !array->info.transposed;
}

struct zm_source {
    char *path;
    int fd;
    hid_t file;
    zm_source_format format;
    zm_source_identity identity;
    uint64_t n_obs, n_vars;
    zm_element *root;
    zm__pool *pool;
    zm_cache *cache;
    /* Every array, to close and free them. */
    zm_array **arrays;
    size_t array_count, array_capacity;
    /* Elements the model leaves out, each with why (for inspect). */
    char **skipped_list;
    size_t skipped_count;
    _Atomic uint64_t chunks_decoded, bytes_read, hdf5_reads;
    /* Passes running (a list) and the last ones finished (a ring). */
    pthread_mutex_t passes_mutex;
    struct zm__pass *passes;
    zm_source_pass finished[ZM__FINISHED_PASSES];
    unsigned finished_next, finished_count;
    zm_priority priority; /* priority.c */
    /* MuData (mudata.c): the modalities, each a source whose parent this
     * is (it shares the file, descriptor, pool, cache, counters, passes
     * and skipped list of its parent, and owns its model and arrays), and
     * each global cell's row in each. */
    zm_source *parent;
    size_t modality_count;
    zm_source **modalities;
    char **modality_names;
    uint32_t **modality_rows;
    int modality_axis; /* the root's axis attribute, or -2 */
    char *modality_version; /* the root's encoding-version attribute, or NULL */
    int layout_anndata; /* zm_source_options.layout_anndata */
    struct zm_window *window; /* tenx_multi.c: a 10x matrix's column windows */
    /* A Zarr store (zarr_source.c): the store and its metadata (file is
     * H5I_INVALID_HID; fd is the store's directory or zip file). */
    struct zm__store *store;
    struct zm__ztree *ztree;
    /* The file mapped read-only (mapped.c), made on first use: the top
     * source's alone; map_failed once there is none to be had. */
    _Atomic(const uint8_t *) map;
    uint64_t map_size;
    _Atomic int map_failed;
    pthread_mutex_t map_mutex;
};

/* The source whose counters, passes and skipped list a source's are: its
 * parent's for a modality. */
static inline zm_source *zm__source_top(zm_source *source)
{
    return source->parent ? source->parent : source;
}

/* ---- The file mapped (mapped.c) ------------------------------------------- */

/* Runs shorter than this on average are copied from the file's map where
 * there is one: longer ones are read with pread, in parallel pieces. */
#define ZM__MAPPED_RUN_BYTES ((uint64_t)64 << 10)
/* Runs of a mapped array (zm_array_mapped) copied from the map, range i to row
 * out_row[i] of out (in parts on the pool when large; counted as a pass
 * with ZM_READ_PASS); -EIO with a reason where the file was cut short
 * under the map. */
int zm__mapped_gather(zm_source *source, const zm_array *array, const zm_range *ranges,
                      size_t count, const uint64_t *out_row, uint8_t *out, unsigned flags,
                      zm_err *err);
/* The chunk positions along the rows (step rows each) that hold a row of
 * the ranges (ascending), each once, into a list the caller frees
 * (read_chunked.c). */
int zm__chunk_positions(const zm_array *array, const zm_range *ranges, size_t count,
                        uint64_t step, uint64_t **out, size_t *out_count, zm_err *err);
/* The chunk index entries of the given chunks found (read_chunked.c). */
int zm__resolve_chunks(zm_source *source, zm_array *array, const uint64_t *chunks, size_t count,
                       zm_err *err);
/* The map let go (closing the source). */
void zm__source_unmap(zm_source *source);

/* ---- Counting reads (source.c) -------------------------------------------- */

/* The calling thread's tally (zm_source_tally_set), or NULL. */
zm_source_tally *zm__tally_current(void);
/* The calling thread's background flag (zm_source_background_set), or NULL. */
const _Atomic int *zm__background_current(void);
/* Adds to the source's counters and the thread's tally. */
void zm__count_bytes(zm_source *source, uint64_t bytes);
void zm__count_chunk(zm_source *source);
void zm__count_hdf5_read(zm_source *source);
/* pread of exactly size bytes (counted); a short read is EIO naming the
 * array and the offset. */
int zm__read_exact(zm_source *source, uint64_t offset, void *buffer, size_t size,
                   const zm_array *array, zm_err *err);

/* A little-endian unsigned number of size bytes (HDF5's own structures). */
static inline uint64_t zm__le(const uint8_t *p, unsigned size)
{
    uint64_t v = 0;
    for (unsigned i = size; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

/* ---- The direct path's pieces (read.c, read_chunked.c) ----------------------- */

/* Rows along the first dimension (1 for a scalar). */
uint64_t zm__row_count(const zm_array *array);
/* Reverses the bytes of each of count values of size bytes. */
void zm__swap_bytes(uint8_t *bytes, size_t count, size_t size);
/* count values of the array's fill value. */
void zm__fill_values(uint8_t *bytes, size_t count, const zm_array *array);
/* Every value within [value_min, value_limit) (zm__array_check_values);
 * EIO naming the first one outside. */
int zm__check_values(const zm_array *array, const void *values, uint64_t count, zm_err *err);
/* Whether values are checked as their chunks are decoded (on the pool, each
 * chunk once) rather than after a read. */
int zm__checked_at_decode(const zm_array *array);
/* Ranges ascending, not overlapping, within the array's rows (an empty one
 * anywhere); EINVAL if not. */
int zm__check_ranges(const zm_array *array, const zm_range *ranges, size_t count, zm_err *err);
/* Turns ascending rows into ranges of consecutive rows (*ranges malloc'd). */
int zm__rows_to_ranges(const zm_array *array, const uint64_t *rows, size_t count,
                       zm_range **ranges, size_t *range_count, zm_err *err);
/* Past this many pieces, HDF5-path reads take the whole span instead. */
#define ZM__MANY_RANGES 32
/* Gathers ranges of a chunked array on the direct path (read_chunked.c):
 * range i to row out_row[i] of out. */
int zm__gather_chunked(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                       const uint64_t *out_row, uint8_t *out, unsigned flags, zm_err *err);

/* ---- A chunk index in one pass (btree.c) ------------------------------------ */

/* Fills entries of the array's chunk index (allocated) from its version 1
 * B-tree: every chunk's (wanted NULL; one pass over the tree) or those of
 * the wanted chunks (ascending; only the nodes on their paths read): the
 * address (absolute), stored size and filter mask, ZM__CHUNK_ABSENT for a
 * chunk never written. Entries already known are left as they are. Called
 * under the array's index_mutex. -ENOTSUP for any layout or index it does
 * not read (then, and from then on, HDF5 looks chunks up one by one). */
int zm__chunk_index_read(zm_source *source, zm_array *array, const uint64_t *wanted, size_t count,
                         zm_err *err);

/* ---- Variable-length strings read directly (vlen.c) ------------------------ */

/* Strings of a contiguous 1-d array of variable-length strings
 * (array->vlen_direct): the rows given (ascending; NULL: rows [0, count)),
 * their heap ids read from the dataset and their bytes from the global
 * heap collections, in the pool, without HDF5. -EAGAIN: a string holds a
 * NUL (HDF5's reading stops there; the caller reads through HDF5). */
int zm__vlen_read(zm_source *source, zm_array *array, const uint64_t *rows, size_t count,
                  zm_strings *out, zm_err *err);

/* A pass being counted: begun by the thread that plans it, counted by
 * whichever threads read its parts, ended by the planner. NULL when there
 * was no memory to count it (counting is then skipped). */
struct zm__pass {
    zm_source_pass shown;
    _Atomic uint64_t done;
    struct timespec began;
    struct zm__pass *next;
};
struct zm__pass *zm__pass_begin(zm_source *source, const zm_array *array, const char *unit,
                                uint64_t total);
void zm__pass_step(struct zm__pass *pass);
void zm__pass_end(zm_source *source, struct zm__pass *pass);

/* ---- Building the model (model.c) ------------------------------------------- */

zm_element *zm__element_new(zm_element_kind kind, const char *parent_path, const char *name);
void zm__element_free(zm_element *element);
int zm__element_add_child(zm_element *parent, zm_element *child);
/* Sets encoding and what the file held; strings are copied where owned. */
void zm__element_set_encoding(zm_element *element, const char *type, const char *version);
void zm__element_set_stored_as(zm_element *element, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets an element's shape (and rank) from an array's presented shape. */
void zm__element_shape_from(zm_element *element, const zm_array *array);
/* Orders a dict's children by name. */
void zm__element_sort_children(zm_element *element);

/* ---- HDF5 helpers (hdf5.c; arrays: hdf5_array.c); call with the HDF5 lock held - */

/* Describes a dataset (or one member of a compound dataset) as an array and
 * registers it with the source. presented_transposed: a 2-d dataset shown
 * as its transpose. */
/* The array's dataset, opened again by its path; called under the HDF5
 * lock, closed with H5Dclose. It must be the object described (the file is
 * read-only and held open): another one is EIO naming the array. */
hid_t zm__array_dataset(const zm_array *array, zm_err *err);

int zm__array_open(zm_source *source, hid_t file, const char *dataset_path, const char *field,
                   int presented_transposed, zm_array **out, zm_err *err);
/* An array held in memory: numeric values (copied) or strings (taken). */
int zm__array_memory(zm_source *source, const char *label, zm_dtype dtype, unsigned rank,
                     const uint64_t *shape, const void *values, zm_strings *strings,
                     zm_array **out, zm_err *err);
void zm__array_free(zm_array *array);
/* A new array (its serial set, nothing else), and its registration with
 * the source (which frees it when closed). */
zm_array *zm__array_new(void);
int zm__array_register(zm_source *source, zm_array *array);

/* ---- Zarr stores' arrays (zarr_array.c) ---------------------------------------- */

struct zm__zarr_array;
void zm__zarr_array_free(struct zm__zarr_array *zarr);
/* Reads and decodes chunk (numbered row-major over the array's grid) of a
 * Zarr array into raw (raw_size bytes, native order): a chunk never
 * written is the fill value, where the array has one. */
int zm__zarr_chunk(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                   size_t raw_size, zm_err *err);
/* The first values values of a 1-d Zarr chunk alone, where its codecs let
 * a part be decoded (zm__zarr_decode_prefix): 1 when done, 0 when not (the
 * caller decodes it whole, having read nothing it keeps), or an error.
 * raw holds capacity bytes: with room for the whole chunk, the part costs
 * about its share of the chunk's decoding. */
int zm__zarr_chunk_prefix(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                          size_t capacity, uint64_t values, zm_err *err);
/* The strings of the given rows (ascending; NULL: every row) of a Zarr
 * string array, per_row values a row. */
int zm__zarr_read_strings(zm_source *source, zm_array *array, const uint64_t *rows, size_t count,
                          uint64_t per_row, zm_strings *out, zm_err *err);

/* Whether path names an object of the file, or ends with an external or
 * user-defined link (which exists, but is never followed: opening through
 * it fails, and zm__h5_outside says why). */
int zm__h5_exists(hid_t location, const char *path);
/* H5O_TYPE_GROUP, H5O_TYPE_DATASET, or -1. */
int zm__h5_object_type(hid_t location, const char *path);
/* The object at path from location (links followed), or location itself
 * when path is NULL. -ENOENT when there is none, -EIO when HDF5 cannot
 * describe it. */
int zm__h5_describe(hid_t location, const char *path, zm__h5_object *out);
int zm__h5_has_attribute(hid_t location, const char *object, const char *name);
/* A string attribute (fixed or variable length, scalar or one element);
 * malloc'd into *out. -ENOENT when absent. */
int zm__h5_attribute_string(hid_t location, const char *object, const char *name, char **out);
/* An integer array attribute; *values malloc'd. */
int zm__h5_attribute_integers(hid_t location, const char *object, const char *name,
                              int64_t **values, size_t *count);
/* A string array attribute (e.g. column-order); *out holds count strings. */
int zm__h5_attribute_strings(hid_t location, const char *object, const char *name,
                             zm_strings *out);
int zm__h5_attribute_bool(hid_t location, const char *object, const char *name, int *value);
/* An object reference attribute, resolved to the referenced object's path. */
int zm__h5_attribute_reference(hid_t location, const char *object, const char *name,
                               char **path);
/* String i of a caller's list (context): its bytes, *length of them. */
typedef const char *(*zm__string_piece)(const void *context, size_t i, size_t *length);
/* Sets *out to count strings, string i being at(context, i) (asked for
 * twice: once to size, once to copy). 0, or -ENOMEM with *out empty. */
int zm__strings_from(size_t count, zm__string_piece at, const void *context, zm_strings *out);
/* The same for count NUL-terminated names. */
int zm__strings_of_names(const char *const *names, size_t count, zm_strings *out);
/* Strings grown one at a time: zero-initialised to start, then s holds
 * them (its bytes NUL-terminated once one is added). */
typedef struct zm__strings_builder {
    zm_strings s;
    size_t items, bytes; /* capacities */
} zm__strings_builder;
/* Appends text (length bytes): 0, or -ENOMEM (b as it was). */
int zm__strings_add(zm__strings_builder *b, const char *text, size_t length);
/* Names of a group's links, in name order. */
int zm__h5_list(hid_t location, const char *group, zm_strings *names);
/* The members of a compound dataset. */
int zm__h5_compound_members(hid_t location, const char *dataset, zm_strings *names);
/* Reads count strings of an attribute or dataset selection of the given file
 * type into *out. reader(buffer, memtype) does the read. */
typedef herr_t (*zm__string_reader)(void *context, hid_t memtype, void *buffer);
int zm__read_strings(hid_t file_type, size_t count, zm__string_reader reader, void *context,
                     hid_t space_for_reclaim, zm_strings *out);
/* The memory type of one value as reads return it (hdf5_array.c): native
 * order and the presented size. */
hid_t zm__value_memory_type(hid_t stored_type);

/* HDF5-path reads (hdf5_read.c); they take the HDF5 lock themselves. */
int zm__h5_read_ranges(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                       void *out, zm_err *err);
int zm__h5_read_strings(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                        zm_strings *out, zm_err *err);
/* Registers our lzf, zstd and blosc decoders with HDF5 (at each open, lock held). */
void zm__h5_register_filters(void);

/* ---- Nothing outside the source (confine.c); HDF5 lock held ------------------ */

/* An element refused because its values (or a link on its path) lie outside
 * the source: external storage, a virtual dataset, an external or
 * user-defined link. Readers leave the element out (zm__source_skip, with
 * the reason) where the model can do without it; elsewhere the open fails
 * with the reason. */
#define ZM__OUTSIDE (-EXDEV)

/* Before a file is opened (again at each: idempotent): external links made
 * untraversable (their class replaced by one that refuses), the filter
 * plugin path pinned to the system directory. */
void zm__h5_confine(void);
/* The one directory HDF5 may load filter plugins from. */
const char *zm__h5_plugin_directory(void);
/* A file access list with the sec2 driver (whatever the environment says);
 * the caller closes it. */
hid_t zm__h5_file_access(void);
/* 1 if a link on path (from location) is an external or user-defined link,
 * or a soft link whose target crosses one, with why ("an external link to
 * FILE:/PATH is not followed" for the path's own last link, else naming the
 * link); 0 otherwise (also for a path that does not exist). One step a
 * level; soft links followed at most 16 times. */
int zm__h5_outside(hid_t location, const char *path, char *why, size_t size);
/* Refuses (ZM__OUTSIDE, with the reason) a dataset just opened whose values
 * lie outside the source: in another file, external storage, a virtual
 * dataset. Call it before asking anything else of the dataset: HDF5 opens a
 * virtual dataset's source files when asked its extent or values. */
int zm__h5_dataset_check(hid_t file, hid_t dataset, const char *label, zm_err *err);
/* Chunk addresses: not looked up yet, or never written (the fill value). */
#define ZM__CHUNK_UNKNOWN UINT64_MAX
#define ZM__CHUNK_ABSENT (UINT64_MAX - 1)
/* Looks up the chunks not known yet among chunks[0 .. count) (HDF5 lock held). */
int zm__h5_chunk_lookup(zm_array *array, const uint64_t *chunks, size_t count, zm_err *err);
/* HDF5 1.14 and later list a dataset's chunks in one pass (H5Dchunk_iter);
 * 1.10 has only the lookups above, which walk the index from its start each
 * time, so there btree.c reads the index itself. */
#define ZM__H5_HAS_CHUNK_ITER H5_VERSION_GE(1, 14, 0)
#if ZM__H5_HAS_CHUNK_ITER
/* Every chunk's entry of the array's index, from one H5Dchunk_iter pass
 * (HDF5 lock held; entries known already are kept). */
int zm__h5_chunk_iterate(zm_array *array, zm_err *err);
#endif
/* A chunk's offset in the source file from the address HDF5 reports: from
 * 1.14.4 on it counts the user block, before it did not (HDF5 issue 3003). */
#if H5_VERSION_GE(1, 14, 4)
#define ZM__H5_CHUNK_OFFSET(array, address) ((uint64_t)(address))
#else
#define ZM__H5_CHUNK_OFFSET(array, address) ((array)->base_address + (uint64_t)(address))
#endif

/* ---- Format readers -------------------------------------------------------------- */

int zm__read_h5ad(zm_source *source, zm_err *err);
/* An AnnData whose groups are under base ("" for the file's root,
 * "/mod/rna" for a modality) into source's model; extra root names
 * (MuData's "obsmap", "varmap" read as dicts; "mod" left to the caller)
 * are not listed as skipped. */
int zm__read_anndata(zm_source *source, const char *base, int mudata, zm_err *err);
int zm__read_h5mu(zm_source *source, zm_err *err);
void zm__modalities_free(zm_source *source);
/* A modality of source (mudata.c): a source of its own reading source's
 * file, with an empty model. */
zm_source *zm__modality_new(zm_source *parent);
/* Makes room for count modalities (names, sources and rows NULL). */
int zm__modalities_alloc(zm_source *source, size_t count, zm_err *err);
/* 10x files with several feature types or genomes as modalities
 * (tenx_multi.c): the source's single AnnData model (the whole matrix)
 * made into global annotations and modalities, or left as it is. */
int zm__10x_feature_modalities(zm_source *source, zm_err *err);
void zm__window_free(struct zm_window *window);
/* Each global cell's row in each modality (obsmap), once the global model
 * is validated. */
int zm__mudata_map(zm_source *source, zm_err *err);
int zm__read_loom(zm_source *source, zm_err *err);
int zm__read_10x(zm_source *source, zm_err *err);

/* Records an element the model leaves out and why. */
void zm__source_skip(zm_source *source, const char *path, const char *why);
/* The line recorded for path ("PATH: why"), or NULL. */
const char *zm__source_skip_reason(const zm_source *source, const char *path);
/* Makes reads of array check every value is in [min, limit). */
int zm__array_check_values(zm_array *array, int64_t min, int64_t limit, const char *what);

/* A sparse matrix's parts: types, lengths, and its indices checked on
 * every read (validate.c; zm__validate applies it to every one). */
int zm__validate_sparse(zm_element *e, zm_err *err);
/* Checks the model's parts agree (shapes, indptr, indices, codes). */
int zm__validate(zm_source *source, zm_err *err);
/* Reads and verifies Cellucid's priority record (priority.c): 0 whether or
 * not it verifies; -EINVAL for prefix counts that contradict X (the file is
 * refused), -ENOMEM. */
int zm__priority_read(zm_source *source, zm_err *err);
void zm__priority_free(zm_priority *priority);

#endif
