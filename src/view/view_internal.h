/* Internal to the view module: the view's and a sparse layout's structs, and
 * the functions its files call across each other: view.c (the view, its
 * cells and their lookups), sparse.c (a sparse matrix's layout), store.c
 * (the store's nodes), strata.c (obs columns as categories) and sets.c (sets
 * of cells). */
#ifndef ZARRMOUNT_VIEW_INTERNAL_H
#define ZARRMOUNT_VIEW_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "zarrmount/view.h"

struct zm_view_sparse {
    const zm_element *element;
    int major_is_cell, minor_is_cell;
    uint64_t majors;          /* view majors (rows of CSR, columns of CSC) */
    int64_t *indptr;          /* view pointers, majors + 1 */
    /* Where each major's entries lie in the source: the source's pointers
     * (source majors + 1), or, for a subsample's cells as majors, each view
     * major's first entry (source_start) and, when its cells are the minors
     * too, its end (source_end): 8 or 16 bytes a kept cell, not 8 a source
     * cell. */
    int64_t *source_indptr;
    int64_t *source_start, *source_end;
    /* A layout that keeps every entry of every major needs nothing read to
     * give its shape (its entries are the stored values): it is laid out
     * when first asked for (zm_view_sparse_get), under its view's
     * layout_mutex. 1 while the pointers above are not made yet; a layout
     * that found the source damaged keeps why (failure.code -EIO). */
    atomic_int deferred;
    zm_err failure;
    struct zm_view *view; /* the view whose matrix it is (a part's, for a modality's) */
};

/* What another layer keeps for a view (view.c). */
struct attachment;

struct zm_view {
    zm_source *source;
    zm_view_spec spec;
    uint64_t chunk_bytes;
    uint64_t rows;       /* cells in the view */
    uint32_t *order;     /* view row → source row */
    /* full/ and file/ of every cell know their rows, identity, prefix and
     * digest without their order, which is made when first asked for
     * (zm__order_made), under mutex: a lookup of full/ reads nothing per
     * cell. 1 while order is not made yet. */
    atomic_int order_deferred;
    int identity;        /* order is 0, 1, 2, ... */
    int prefix;          /* the cells are source rows [0, rows), in any order */
    char digest[17];
    zm_store_node *root;
    pthread_mutex_t mutex;
    pthread_mutex_t layout_mutex; /* deferred sparse layouts (which take mutex) */
    uint32_t *inverse;   /* source row → view row or ZM_VIEW_NOT_KEPT, made when first needed */
    /* A subsample's cells in source order, each source row << by_source_bits
     * | view row: 8 bytes a kept cell where the inverse map takes 4 a source
     * cell; made when first needed, for views of at most half the source. */
    uint64_t *by_source;
    unsigned by_source_bits;
    zm_view_sparse **sparses;
    size_t sparse_count;
    struct attachment *attachments; /* added under mutex, read without it */
    /* A MuData view's modalities (parts.c): each a view over the modality
     * whose rows are this view's cells it measured, and each view row's
     * 1-based row in it (0: none). A part's owner is the view. */
    zm_view *owner;
    size_t part_count;
    zm_view **parts;
    char **part_names;
    uint32_t **part_maps;
    zm_store_node *mod_group; /* the store's mod/ group, whose children are the parts' roots */
};

/* In view.c: an array of a few bytes a cell, in huge pages where it is big
 * (freed with free()); the view's cells by source row; every group's children
 * ordered by name, which zm_view_child searches. */
void *zm__big_alloc(size_t bytes);
/* A view's locks, made once it is allocated (zm_view_create, a part). */
void zm__view_locks_init(zm_view *view);
/* The view's order made (a deferred one now), or why not. */
int zm__order_made(const zm_view *view, zm_err *err);
const uint64_t *zm__cells_by_source(zm_view *view, unsigned *bits, uint64_t **owned, zm_err *err);
int zm__index_store(zm_store_node *node);

/* In sparse.c: a sparse matrix laid out in the view (kept in view->sparses):
 * now, or when first asked for where its shape needs nothing read (every
 * entry of every major kept: its entries are the stored values). */
int zm__sparse_layout(zm_view *view, const zm_element *e, zm_view_sparse **out, zm_err *err);
/* Entries the view's matrix keeps (its data's length). */
uint64_t zm__sparse_entries(const zm_view_sparse *s);
void zm__sparse_free(zm_view_sparse *s);

/* In parts.c: a MuData view's parts (before its store is built), and their
 * freeing. */
int zm__parts_make(zm_view *view, zm_err *err);
void zm__parts_free(zm_view *view);

/* In store.c: the store's nodes from the source's elements (view->root). */
int zm__build_store(zm_view *view, zm_err *err);
void zm__node_free(zm_store_node *node);

/* In strata.c: what an obs column is as one category a cell, which is what
 * stratified/ splits by and where/ filters by (one rule for both): a
 * categorical, plain strings, booleans (a nullable boolean's too), or why it
 * is none of them. */
typedef enum zm__column_use {
    ZM__COLUMN_CATEGORICAL,
    ZM__COLUMN_STRINGS,
    ZM__COLUMN_BOOLEAN,
    ZM__COLUMN_NOT_ONE_VALUE, /* not one value a cell (rank 2, ...) */
    ZM__COLUMN_NUMBERS,       /* numbers: each value its own category */
    ZM__COLUMN_NOT_VALUES,    /* not a column of values (a dataframe, sparse, ...) */
    ZM__COLUMN_NULLABLE_STRINGS, /* strings some cells lack (nullable-string-array) */
} zm__column_use;
zm__column_use zm__column_use_of(const zm_element *column);
/* obs/<key>, or NULL with -ENOENT in err ("obs has no column KEY"). */
const zm_element *zm__obs_column(zm_source *source, const char *key, zm_err *err);

#endif
