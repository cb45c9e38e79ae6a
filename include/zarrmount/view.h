/* zarrmount view: a selection over a source, laid out as an AnnData Zarr
 * store. A view knows which source row each of its rows is (its cells in
 * priority order, or file order), and the store's nodes: groups with their
 * attributes, and arrays with their shape, chunks, dtype and where each
 * chunk's values come from. The bytes of a chunk are made by synth. */
#ifndef ZARRMOUNT_VIEW_H
#define ZARRMOUNT_VIEW_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"
#include "zarrmount/select.h"
#include "zarrmount/source.h"
#include "zarrmount/zarr.h"

struct json_t;

typedef enum zm_view_kind {
    ZM_VIEW_FULL,    /* every cell in the priority order of seed 0 */
    ZM_VIEW_FILE,    /* every cell in file order */
    ZM_VIEW_UNIFORM, /* the uniform subsample (seed, k) */
    ZM_VIEW_BLOCKS,  /* the blocks subsample (seed, k, block size) */
    ZM_VIEW_STRATIFIED, /* split over an obs column's categories */
    ZM_VIEW_SPATIAL,    /* split over the boxes of an embedding's grid */
} zm_view_kind;

#define ZM_VIEW_KEY_MAX 256 /* an obs or obsm key, with its NUL */

typedef struct zm_view_spec {
    zm_view_kind kind;
    uint32_t seed;
    uint64_t k;          /* requested size (≥ 1); k ≥ n keeps every cell */
    uint64_t block_size; /* blocks */
    int block_size_given;/* B in the path (else the file's B0) */
    /* stratified */
    char field[ZM_VIEW_KEY_MAX];
    zm_allocation allocation;
    uint64_t minimum;
    /* spatial */
    char embedding[ZM_VIEW_KEY_MAX];
    unsigned columns[3];
    unsigned column_count; /* 0: the first min(3, columns) */
    uint64_t grid_size;    /* 0: ZM_DEFAULT_GRID_SIZE */
    /* The cells the method runs over (sets/NAME/, where/KEY/VALUES/), or
     * NULL for every cell. Borrowed: zm_view_create takes a reference of
     * its own, let go when the view is freed. */
    struct zm_view_set *set;
    /* -o index_dtype=int32: sparse indices and indptr served as <i4 (the
     * tree's, not the path's). */
    int index_int32;
} zm_view_spec;

/* ---- What stratified and spatial views split by ------------------------------ */

/* An obs column's strata: one code per cell (negative: missing, the extra
 * stratum) and the category names in stratum order. From a categorical
 * column (codes and categories as stored), or a string or boolean column
 * (values made categories in code-point order). -ENOENT for an unknown
 * key; -EINVAL with the reason for a column that cannot stratify. */
typedef struct zm_field_strata {
    int32_t *codes;
    uint64_t count;   /* categories */
    zm_strings names; /* count names */
} zm_field_strata;
int zm_view_field_strata(zm_source *source, const char *field, zm_field_strata *out, zm_err *err);
/* Whether obs/<field> can stratify, from the element model alone (reads
 * nothing): 0, or -ENOENT / -EINVAL with the reason. */
int zm_view_field_check(zm_source *source, const char *field, zm_err *err);
void zm_field_strata_free(zm_field_strata *strata);

/* An embedding: obsm/<key>, an array with one row a cell (or a dataframe of
 * numeric columns). Its number of columns, and n × count coordinates of the
 * given columns, as binary64. -ENOENT / -EINVAL with the reason. */
int zm_view_embedding_columns(zm_source *source, const char *key, uint64_t *columns, zm_err *err);
int zm_view_embedding_coords(zm_source *source, const char *key, const unsigned *columns,
                             unsigned count, double **coords, zm_err *err);

/* The obs keys that can stratify, and the obsm keys that can place cells,
 * in the file's order. emit returns non-zero to stop (returned). */
typedef int (*zm_view_key_emit)(void *context, const char *key);
int zm_view_strata_fields(zm_source *source, zm_view_key_emit emit, void *context);
int zm_view_embeddings(zm_source *source, zm_view_key_emit emit, void *context);

/* The kernel request a spec makes (not for file/, which selects nothing):
 * codes or coordinates read from the source, and the columns and grid size
 * filled in. */
typedef struct zm_view_request {
    zm_request request;
    zm_field_strata strata; /* stratified */
    double *coords;         /* spatial */
    unsigned columns[3];    /* spatial: the columns used */
} zm_view_request;
int zm_view_request_make(zm_source *source, const zm_view_spec *spec, zm_view_request *out,
                         zm_err *err);
/* Per-cell values read by stored row (n of size bytes each) put in the
 * order of original positions, which the kernel selects over: a no-op but
 * for a priority-ordered file (zm_source_priority), whose permutation it
 * applies. zm_view_request_make does it for the codes and coordinates it
 * reads. */
int zm_view_to_original_order(zm_source *source, void *values, size_t size, zm_err *err);
void zm_view_request_free(zm_view_request *request);

/* Where an array's chunks come from. */
typedef enum zm_producer {
    ZM_PRODUCE_CELL_ROWS,   /* rows of a per-cell array, in view order */
    ZM_PRODUCE_ROWS,        /* rows of an array as stored (not per cell) */
    ZM_PRODUCE_CELL_STRINGS,/* per-cell strings, in view order */
    ZM_PRODUCE_STRINGS,     /* strings as stored */
    ZM_PRODUCE_SCALAR,      /* a 0-d number */
    ZM_PRODUCE_STRING_SCALAR, /* a 0-d string as numpy <U */
    ZM_PRODUCE_CONSTANT,    /* a 0-d number the view makes (priority record) */
    ZM_PRODUCE_POSITIONS,   /* obs/cellucid_original_position */
    ZM_PRODUCE_INDPTR,      /* a sparse matrix's pointers in the view */
    ZM_PRODUCE_ENTRIES,     /* a sparse matrix's data or indices in the view */
    ZM_PRODUCE_RECORDS,     /* a structured array (rec-array) as packed records */
    ZM_PRODUCE_OBSMAP,      /* MuData obsmap/NAME: each view cell's row in the modality's part */
} zm_producer;

/* Which part of a sparse matrix an ENTRIES/INDPTR array is. */
typedef enum zm_sparse_part { ZM_PART_DATA, ZM_PART_INDICES, ZM_PART_INDPTR } zm_sparse_part;

typedef struct zm_view zm_view;
typedef struct zm_view_sparse zm_view_sparse; /* a sparse matrix laid out in the view */

typedef struct zm_store_node zm_store_node;
struct zm_store_node {
    char *name;
    int is_array;
    struct json_t *attrs;     /* .zattrs (NULL: none) */
    /* arrays */
    zm_zarr_array_meta meta;  /* meta.codec NULL: the mount's codec is its own */
    zm_producer producer;
    const zm_element *element;
    const zm_array *source;   /* the source array values come from */
    zm_sparse_part part;
    zm_view_sparse *sparse;   /* INDPTR / ENTRIES */
    int64_t constant;         /* CONSTANT */
    size_t value_size;        /* bytes per value (numbers) as synth makes them */
    int index_int32;          /* INDPTR / ENTRIES' indices: served as int32, narrowed from
                               * value_size bytes (-o index_dtype=int32) */
    int cell_columns;         /* CELL_ROWS of a dense obsp matrix: columns are cells too */
    size_t *field_sizes;      /* RECORDS: bytes of each field in a record */
    size_t modality;          /* OBSMAP: which modality (part) */
    /* The view whose cells this node's rows are when it is not the view it
     * was found through: a modality's part (zm_view_part) for the nodes
     * under mod/NAME/ of a MuData view; NULL otherwise. zm_view_of says. */
    struct zm_view *view;
    uint64_t grid[ZM_ZARR_MAX_RANK];
    /* groups */
    size_t child_count;
    zm_store_node **children;
    size_t child_capacity;
    /* The children ordered by name, for lookups in O(log n) (a listing of
     * 100,000 columns is as many lookups); made when the store is laid out. */
    zm_store_node **children_by_name;
};

/* Builds a view of a source: selects its cells (zm_select) and lays out the
 * store. Refusals of the kernel are -EINVAL with its reason. chunk_bytes is
 * the raw size a chunk aims at. */
int zm_view_create(zm_source *source, const zm_view_spec *spec, uint64_t chunk_bytes,
                   zm_view **out, zm_err *err);
/* Whether every sparse matrix of the source (its modalities' too) can be
 * served with int32 indices and indptr (-o index_dtype=int32): each axis at
 * most 2^31 long and at most INT32_MAX entries stored. -EOVERFLOW naming the
 * first element that cannot. */
int zm_view_index_int32_check(zm_source *source, zm_err *err);
void zm_view_free(zm_view *view);

/* What another layer keeps for a view (synth its walks), under a key of its
 * own (the address of something it owns): attached once, found by the key
 * from any thread, and released (release(data), unless NULL) when the view
 * is freed, before its nodes. zm_view_attach returns what is attached under
 * key now: data, or what another thread attached first (then data is not
 * the view's, and the caller keeps it); NULL when out of memory. */
typedef void (*zm_view_release)(void *data);
void *zm_view_attach(zm_view *view, const void *key, void *data, zm_view_release release);
void *zm_view_attached(const zm_view *view, const void *key);

const zm_store_node *zm_view_root(const zm_view *view);
/* The node at a store path ("X/data"; "" the root), or NULL. */
const zm_store_node *zm_view_find(const zm_view *view, const char *path);
/* The child of a group named name[0 .. length), or NULL (an array has none). */
const zm_store_node *zm_view_child(const zm_store_node *group, const char *name, size_t length);
/* Cells in the view, and source row of each view row: full/ and file/
 * make their order when first asked for (NULL: err says why not). */
uint64_t zm_view_rows(const zm_view *view);
const uint32_t *zm_view_order(const zm_view *view, zm_err *err);
zm_source *zm_view_source(const zm_view *view);
const zm_view_spec *zm_view_get_spec(const zm_view *view);
/* A kind's method name as paths and .zattrs spell it ("full", "uniform", ...). */
const char *zm_view_kind_name(zm_view_kind kind);
/* Whether the view's rows are the source's in file order (file/). */
int zm_view_is_identity(const zm_view *view);
/* The cell set digest of the view's cells. */
const char *zm_view_digest(const zm_view *view);
/* Bytes the view holds for its cells now: its order, the way back from
 * source cells its walks made (map or list), and its sparse matrices'
 * pointers. */
uint64_t zm_view_bytes(zm_view *view);

/* ---- Modalities: a MuData view's parts ----------------------------------------
 *
 * A view of a multimodal source (zm_source_modality_count) selects global
 * cells; each modality is a part, a view of its own over the modality's
 * source whose rows are the view's cells it measured, in view order. Its
 * store is the group mod/NAME/ of the view's, and the view's obsmap/NAME
 * gives each view cell's row in it. A part is the view's: freed with it. */
size_t zm_view_part_count(const zm_view *view);
zm_view *zm_view_part(const zm_view *view, size_t i);
const char *zm_view_part_name(const zm_view *view, size_t i);
/* Each view row's 1-based row in part i, 0 where it is none of its cells. */
const uint32_t *zm_view_part_map(const zm_view *view, size_t i);
/* The view a part belongs to; NULL for a view that is no part. */
zm_view *zm_view_owner(const zm_view *view);
/* The view a node found through view belongs to: its part's for a node
 * under mod/NAME/, else view. Everything asked of a node's cells (order,
 * sparse layout, walks) is asked of this view. */
static inline zm_view *zm_view_of(const zm_view *view, const zm_store_node *node)
{
    return node->view ? node->view : (zm_view *)view;
}

/* Sparse layout (synth uses these). */
typedef struct zm_view_sparse_info {
    const zm_element *element;
    int per_cell_rows;   /* rows are cells (CSR of X, layers, obsm, raw/X, obsp) */
    int per_cell_columns;/* columns are cells too (obsp): renumbered, others dropped */
    uint64_t rows;       /* view rows (major dimension) */
    const int64_t *indptr; /* view pointers, rows + 1 */
    /* Where each view row's entries lie in the source (zm_view_source_range):
     * by the source's pointers (source_indptr, by source row), or, for a
     * subsample of cells as rows, by view row (source_start; source_end when
     * cells are the columns too, else the length is the view's). */
    const int64_t *source_indptr;
    const int64_t *source_start, *source_end;
    const uint32_t *order; /* per_cell_rows: the source row of each view row (else NULL) */
} zm_view_sparse_info;
/* A matrix's layout, made when first asked for where its shape needed
 * nothing read (every entry of every major kept): -EIO for a damaged
 * source's pointers, said again to every later call. */
int zm_view_sparse_get(zm_view *view, zm_view_sparse *sparse, zm_view_sparse_info *info,
                       zm_err *err);
/* Only its axes (element, per_cell_rows, per_cell_columns, rows), the
 * pointers NULL: nothing laid out, nothing to fail. */
void zm_view_sparse_axes(const zm_view_sparse *sparse, zm_view_sparse_info *info);
/* Whether its layout is made (zm_view_sparse_get then reads nothing). */
int zm_view_sparse_ready(const zm_view_sparse *sparse);

/* The source entries [*start, *end) of view row v. */
static inline void zm_view_source_range(const zm_view_sparse_info *s, uint64_t v, uint64_t *start,
                                        uint64_t *end)
{
    if (s->source_start != NULL) {
        *start = (uint64_t)s->source_start[v];
        *end = s->source_end ? (uint64_t)s->source_end[v]
                             : *start + (uint64_t)(s->indptr[v + 1] - s->indptr[v]);
        return;
    }
    uint64_t m = s->per_cell_rows ? s->order[v] : v;
    *start = (uint64_t)s->source_indptr[m];
    *end = (uint64_t)s->source_indptr[m + 1];
}
/* The view position of each source cell, or ZM_VIEW_NOT_KEPT: 4 bytes a
 * source cell, made on first use. */
#define ZM_VIEW_NOT_KEPT UINT32_MAX
const uint32_t *zm_view_inverse(zm_view *view, zm_err *err);

/* The view's cells in source order, as walks visit them: through the
 * inverse map (a view of most of the source's cells), or, for a subsample
 * of at most half of them, a list sorted by source row (8 bytes a kept
 * cell, not 4 a source cell). Go through it with a cursor: */
typedef struct zm_view_kept {
    const uint32_t *inverse; /* source row → view row, or NULL: */
    const uint64_t *cells;   /* source row << bits | view row, ascending */
    unsigned bits;
    uint64_t count; /* cells in the view */
    uint64_t n;     /* cells in the source */
} zm_view_kept;
int zm_view_kept_get(zm_view *view, zm_view_kept *kept, zm_err *err);

/* A cursor at the first kept cell whose source row is p or later. */
static inline uint64_t zm_view_kept_seek(const zm_view_kept *k, uint64_t p)
{
    if (k->inverse != NULL)
        return p;
    uint64_t lo = 0, hi = k->count;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((k->cells[mid] >> k->bits) < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The kept cell at *cursor, if its source row is below p1: 1 with its
 * source row *p and view row *v, the cursor past it; else 0. */
static inline int zm_view_kept_next(const zm_view_kept *k, uint64_t *cursor, uint64_t p1,
                                    uint64_t *p, uint64_t *v)
{
    if (k->inverse != NULL) {
        uint64_t c = *cursor;
        while (c < p1 && k->inverse[c] == ZM_VIEW_NOT_KEPT)
            c++;
        if (c >= p1) {
            *cursor = c;
            return 0;
        }
        *p = c;
        *v = k->inverse[c];
        *cursor = c + 1;
        return 1;
    }
    if (*cursor >= k->count || (k->cells[*cursor] >> k->bits) >= p1)
        return 0;
    *p = k->cells[*cursor] >> k->bits;
    *v = k->cells[*cursor] & (((uint64_t)1 << k->bits) - 1);
    (*cursor)++;
    return 1;
}

/* The view row of the cell `ahead` places past the cursor, or
 * ZM_VIEW_NOT_KEPT: for asking ahead for what it will need. */
static inline uint64_t zm_view_kept_ahead(const zm_view_kept *k, uint64_t cursor, uint64_t ahead)
{
    if (k->inverse != NULL)
        return cursor + ahead < k->n ? k->inverse[cursor + ahead] : ZM_VIEW_NOT_KEPT;
    return cursor + ahead < k->count ? k->cells[cursor + ahead] & (((uint64_t)1 << k->bits) - 1)
                                     : ZM_VIEW_NOT_KEPT;
}

/* What a spec selects, without building its view (zm_view_create selects
 * the same cells): the kernel request it makes (made: its columns, grid
 * size and the strata's names filled in) and the selection, for `explain`.
 * file/ selects nothing: its selection is every cell in file order and made
 * holds only n. Free with zm_view_selection_free. */
typedef struct zm_view_selection {
    zm_view_request made;
    zm_selection selection;
} zm_view_selection;
int zm_view_select(zm_source *source, const zm_view_spec *spec, zm_view_selection *out,
                   zm_err *err);
void zm_view_selection_free(zm_view_selection *selection);

/* ---- Sets of cells ---------------------------------------------------------------
 *
 * A user's own cells, which every method can then run over (sets/NAME/ and
 * where/KEY/VALUES/ in a mount, select --set): from a file (a Cellucid cell
 * set, or obs names one a line) or from an obs column's values. A set is
 * made once and shared, counted: whoever keeps one holds a reference. */
typedef struct zm_view_set {
    _Atomic unsigned refs;   /* zm_view_set_ref / zm_view_set_unref (freed at 0) */
    uint32_t *positions;     /* the cells, as original positions, strictly ascending */
    uint64_t count;          /* >= 1 */
    uint64_t n;              /* cells of the source it is a set of */
    char digest[17];         /* zm_cellset_digest(positions, count, n) */
    char *name;              /* "sets/NAME" or "where/KEY/VALUES" as the path spells it */
    /* What a store's root .zattrs records and explain shows: a file's set
     * {"name": NAME, "digest", "size": count, "file": path}; where/'s
     * {"key": KEY, "values": [the values, decoded, in the path's order],
     * "size": count}. */
    struct json_t *record;
} zm_view_set;
zm_view_set *zm_view_set_ref(zm_view_set *set);
void zm_view_set_unref(zm_view_set *set); /* NULL: nothing */

/* The largest set file read: past it a file is refused (-EFBIG). A
 * Cellucid set of n cells takes at most about 7n bytes of base64; a file of
 * names as many bytes as its lines. */
#define ZM_VIEW_SET_FILE_MAX ((uint64_t)1 << 30)

/* A set from a file, chosen by its extension: NAME.json, a Cellucid cell set
 * ({"cells": {"kept": base64 of the LEB128 gaps, "digest", "spec": {"nObs",
 * ...}}}: used only when nObs is the source's cell count, every position is
 * below it and the digest is the decoded positions'; its positions are
 * original positions); NAME.txt, obs names one a line (UTF-8; a leading
 * byte order mark skipped, a trailing "\r" stripped, lines empty or of
 * spaces and tabs alone ignored; every other line, every byte of it, names
 * exactly one cell, and no cell twice). name is NAME. The file is read
 * whole, in one pass, and refused if it changed while read. Returns 0 with
 * *out (one reference), or: -EINVAL with the reason for a file that is not
 * a set of this source's cells (which line, which field, which rule); -EFBIG
 * past ZM_VIEW_SET_FILE_MAX; -EAGAIN when it changed while read; open's and
 * read's -errno; -ENOMEM; a read of obs's index's -EIO. */
int zm_view_set_from_file(zm_source *source, const char *path, const char *name,
                          zm_view_set **out, zm_err *err);

/* Whether obs/<key> can filter cells (a categorical, string, boolean or
 * nullable boolean column, one value a cell, whose key is UTF-8: the
 * columns that can stratify): 0, or -ENOENT with the reason. Reads
 * nothing. */
int zm_view_where_check(zm_source *source, const char *key, zm_err *err);
/* The obs keys where/ lists: those zm_view_where_check takes, in the file's
 * order (zm_view_strata_fields' but for a key that is not UTF-8). emit
 * returns non-zero to stop (returned). */
int zm_view_where_fields(zm_source *source, zm_view_key_emit emit, void *context);

/* The set where/KEY/VALUES names: values is that path component as spelled,
 * values escaped (zm_view_where_escape) and separated by ",", in any order.
 * The cells whose obs/<key> is one of the values: a categorical's category
 * names (one it does not have refused), any strings of a string column,
 * "true" and "false" for a boolean. A cell whose value is missing (code -1,
 * a nullable boolean's mask) is in no such set. -ENOENT with the reason for
 * anything that names no cell, or is not the canonical spelling (a value
 * escaped otherwise, empty, listed twice, or not UTF-8); -ENOMEM; a read's
 * -EIO. */
int zm_view_set_where(zm_source *source, const char *key, const char *values, zm_view_set **out,
                      zm_err *err);

/* The most values where/<key>/ lists of a string column: one with more
 * distinct values lists none (any of them still resolves). */
#define ZM_VIEW_WHERE_LISTED_MAX 1000
/* The longest escaped value: one path component (NAME_MAX). */
#define ZM_VIEW_WHERE_COMPONENT_MAX 255

/* The values where/<key>/ lists, each escaped as a path component: a
 * categorical's categories in their order, a boolean's false then true, a
 * string column's distinct values in code-point order when it has at most
 * ZM_VIEW_WHERE_LISTED_MAX of them. Only values that resolve are listed:
 * held by at least one cell, not empty, UTF-8, at most
 * ZM_VIEW_WHERE_COMPONENT_MAX bytes escaped, and a name two categories share
 * once. Returns 0, emit's non-zero value (it stopped), or a negative errno
 * with err (-ENOENT as zm_view_where_check says). */
int zm_view_where_values(zm_source *source, const char *key, zm_view_key_emit emit, void *context,
                         zm_err *err);

/* One value (length bytes, any bytes) as a path component: "%XX" (uppercase
 * hex) for '%', '/', ',', bytes below 0x20 and 0x7F, and for each byte of a
 * value that is "." or ".."; every other byte (UTF-8 included) as it is.
 * Writes it and a NUL into out (size bytes); returns the bytes written (the
 * NUL not counted), or -ENAMETOOLONG when they do not fit. */
int zm_view_where_escape(const char *value, size_t length, char *out, size_t size);
/* Its inverse, for one value's spelling (length bytes, no ","): the value
 * and a NUL into out (size bytes; the value may hold a NUL byte), returning
 * its length; -ENOENT for a spelling zm_view_where_escape does not write (a
 * "%" not followed by two uppercase hex digits, a byte escaped that need
 * not be, one left as it is that must be escaped); -ENAMETOOLONG when out is
 * too small. */
int zm_view_where_unescape(const char *component, size_t length, char *out, size_t size);

#endif
