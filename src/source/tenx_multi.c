/* A 10x Genomics v3 file with several feature types as MuData (the
 * specification: "several feature types ... are a MuData of modalities,
 * each a column window of the one matrix"): the global annotations are the
 * barcodes and every feature; each feature type a modality named as mudata
 * names it (Gene Expression "rna", Antibody Capture "prot", Peaks "atac",
 * any other by its feature type), whose X is the matrix's columns of that
 * type, read from the file's own chunks (its parts are the matrix's), and
 * whose var is those features' rows. -o layout=anndata keeps the single
 * AnnData scanpy's read_10x_h5 makes. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

/* The column windows of one matrix, and where each row's entries in each
 * lie: made on first use (zm_element_window), in one pass over the
 * matrix's indices. */
struct zm_window {
    pthread_mutex_t mutex;
    int state;                 /* 0: not made; 1: made; else the -errno it failed with */
    char reason[ZM_REASON_MAX];
    const zm_array *indices, *indptr;
    uint64_t rows, columns;
    size_t count;              /* windows */
    uint64_t *edges;           /* count + 1 column edges, ascending */
    int64_t *at;               /* rows × (count + 1) entry positions */
};

void zm__window_free(struct zm_window *w)
{
    if (w == NULL)
        return;
    pthread_mutex_destroy(&w->mutex);
    free(w->edges);
    free(w->at);
    free(w);
}

/* Entries read at a time in the pass over the indices. */
#define WINDOW_PIECE ((uint64_t)1 << 20)

static int window_make(zm_source *source, struct zm_window *w, zm_err *err)
{
    size_t stride = w->count + 1;
    int64_t *indptr = NULL;
    /* The matrix's parts are checked here: the global annotations hold no
     * X for the source's checks (validate.c) to see. */
    const zm_array_info *pointers = zm_array_describe(w->indptr);
    if (pointers->rank != 1 || pointers->shape[0] != w->rows + 1)
        return zm_err_set(err, -EIO, "%s: %" PRIu64 " pointers for %" PRIu64 " barcodes (expected "
                          "one more than the barcodes)", pointers->file_path,
                          pointers->rank == 1 ? pointers->shape[0] : 0, w->rows);
    int rc = zm__read_whole(source, (zm_array *)w->indptr, 0, (void **)&indptr, err);
    if (rc != 0)
        return rc;
    const zm_array_info *info = zm_array_describe(w->indices);
    uint64_t nnz = info->shape[0];
    if (indptr[0] != 0 || indptr[w->rows] < 0 || (uint64_t)indptr[w->rows] != nnz) {
        rc = zm_err_set(err, -EIO, "%s: indptr runs from %" PRId64 " to %" PRId64 ", not 0 to "
                        "the %" PRIu64 " stored values", pointers->file_path, indptr[0],
                        indptr[w->rows], nnz);
        free(indptr);
        return rc;
    }
    w->at = malloc((w->rows ? w->rows : 1) * stride * sizeof *w->at);
    uint8_t *piece = malloc(WINDOW_PIECE * info->dtype.size);
    if (w->at == NULL || piece == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory laying out %s's windows", info->file_path);
    /* Row by row, each row's entries read from pieces of the indices in
     * file order: the boundary of each window is its first entry at or past
     * the window's first column. */
    uint64_t piece_start = 0, piece_end = 0;
    for (uint64_t r = 0; rc == 0 && r < w->rows; r++) {
        int64_t from = indptr[r], to = indptr[r + 1];
        if (to < from || from < 0 || (uint64_t)to > nnz) {
            rc = zm_err_set(err, -EIO, "%s: indptr entries %" PRIu64 " and %" PRIu64
                            " are %" PRId64 " and %" PRId64 ", not a range of the stored values",
                            zm_array_describe(w->indptr)->file_path, r, r + 1, from, to);
            break;
        }
        int64_t *at = w->at + r * stride;
        at[0] = from;
        size_t next = 1; /* the next window whose start is not found yet */
        int64_t previous = -1;
        for (int64_t j = from; rc == 0 && j < to; j++) {
            if ((uint64_t)j >= piece_end) {
                piece_start = (uint64_t)j;
                piece_end = nnz - piece_start < WINDOW_PIECE ? nnz : piece_start + WINDOW_PIECE;
                rc = zm_array_read_rows_flags(source, w->indices, piece_start,
                                              piece_end - piece_start, piece, ZM_READ_PASS, err);
                if (rc != 0)
                    break;
            }
            int64_t column = zm_dtype_integer(info->dtype, piece, (uint64_t)j - piece_start);
            /* Ascending, a column repeated or not (scipy keeps duplicates): each
             * window's entries are then one run of the row's. */
            if (column < previous || column < 0 || (uint64_t)column >= w->columns) {
                rc = zm_err_set(err, -EIO,
                                "%s: row %" PRIu64 "'s indices %s (%" PRId64 " after %" PRId64
                                "): its feature types cannot be column windows (mount with -o "
                                "layout=anndata to read it as one matrix)",
                                info->file_path, r,
                                column < 0 || (uint64_t)column >= w->columns ? "leave the matrix"
                                                                              : "descend",
                                column, previous);
                break;
            }
            previous = column;
            while (next < w->count && (uint64_t)column >= w->edges[next])
                at[next++] = j;
        }
        while (next <= w->count)
            at[next++] = to;
    }
    free(piece);
    free(indptr);
    return rc;
}

int zm_element_window(zm_source *source, const zm_element *e, zm_window_rows *out, zm_err *err)
{
    struct zm_window *w = e->window;
    source = zm__source_top(source);
    pthread_mutex_lock(&w->mutex);
    if (w->state == 0) {
        zm_err mine;
        zm_err_clear(&mine);
        int rc = window_make(source, w, &mine);
        w->state = rc == 0 ? 1 : rc;
        snprintf(w->reason, sizeof w->reason, "%s", mine.reason);
        if (rc != 0) {
            free(w->at);
            w->at = NULL;
        }
    }
    int state = w->state;
    pthread_mutex_unlock(&w->mutex);
    if (state != 1)
        return zm_err_set(err, state, "%s", w->reason);
    out->at = w->at + e->window_index;
    out->stride = w->count + 1;
    return 0;
}

/* ---- The modalities ----------------------------------------------------------- */

/* mudata's names for Cell Ranger's feature types; any other keeps its own. */
static const char *modality_name(const char *type)
{
    static const char *const names[][2] = {
        {"Gene Expression", "rna"}, {"Antibody Capture", "prot"}, {"Peaks", "atac"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(type, names[i][0]) == 0)
            return names[i][1];
    return type;
}

static zm_element *child_named(const zm_element *e, const char *name)
{
    for (size_t i = 0; e && i < e->child_count; i++)
        if (strcmp(e->children[i]->name, name) == 0)
            return e->children[i];
    return NULL;
}

/* A new 1-d element of count rows, of like's kind and encoding. */
static zm_element *rows_like(const zm_element *like, const char *parent_path, const char *name,
                             uint64_t count)
{
    zm_element *e = zm__element_new(like->kind, parent_path, name);
    if (e != NULL) {
        e->encoding_type = like->encoding_type;
        e->encoding_version = like->encoding_version;
        e->rank = 1;
        e->shape[0] = count;
    }
    return e;
}

/* A column of a dataframe (a 1-d array or string array) again, under
 * parent_path: the same values (shared array) with rows [first, first +
 * count) of the file's, held in memory when they are not all of them. */
static int column_rows(zm_source *source, const zm_element *column, const char *parent_path,
                       const char *name, uint64_t first, uint64_t count, zm_element **out,
                       zm_err *err)
{
    *out = NULL;
    const zm_array_info *info = zm_array_describe(column->values);
    zm_element *e = rows_like(column, parent_path, name, count);
    if (e == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    e->axes[0] = column->axes[0];
    int rc = 0;
    if (first == 0 && count == column->shape[0]) {
        e->values = column->values;
        zm__element_set_stored_as(e, "%s", column->stored_as ? column->stored_as : "");
    } else if (info->dtype.type_class == ZM_TYPE_STRING) {
        uint64_t *rows = malloc((count ? count : 1) * sizeof *rows);
        zm_strings s = {0};
        rc = rows ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
        for (uint64_t i = 0; rc == 0 && i < count; i++)
            rows[i] = first + i;
        if (rc == 0)
            rc = zm_array_read_strings(source, column->values, rows, count, &s, err);
        free(rows);
        uint64_t shape[1] = {count};
        if (rc == 0)
            rc = zm__array_memory(source, info->file_path, info->dtype, 1, shape, NULL, &s,
                                  &e->values, err);
        else
            zm_strings_free(&s);
        zm__element_set_stored_as(e, "rows %" PRIu64 " to %" PRIu64 " of %s", first,
                                  first + count, info->file_path);
    } else {
        uint8_t *values = malloc((count ? count : 1) * info->dtype.size);
        rc = values ? zm_array_read_rows(source, column->values, first, count, values, err)
                    : zm_err_set(err, -ENOMEM, "out of memory");
        uint64_t shape[1] = {count};
        if (rc == 0)
            rc = zm__array_memory(source, info->file_path, info->dtype, 1, shape, values, NULL,
                                  &e->values, err);
        free(values);
        zm__element_set_stored_as(e, "rows %" PRIu64 " to %" PRIu64 " of %s", first,
                                  first + count, info->file_path);
    }
    if (rc != 0) {
        zm__element_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* A dataframe of rows [first, first + count) of df (obs whole, or var's
 * window), its columns and index as column_rows makes them. */
static int dataframe_rows(zm_source *source, const zm_element *df, uint64_t first, uint64_t count,
                          zm_element **out, zm_err *err)
{
    zm_element *copy = rows_like(df, "", df->name, count);
    if (copy == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    copy->index_name = strdup(df->index_name ? df->index_name : "_index");
    zm__element_set_stored_as(copy, "%s", df->stored_as ? df->stored_as : "");
    int rc = copy->index_name ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0 && df->index)
        rc = column_rows(source, df->index, copy->path, "_index", first, count, &copy->index, err);
    for (size_t i = 0; rc == 0 && i < df->child_count; i++) {
        zm_element *c = NULL;
        rc = column_rows(source, df->children[i], copy->path, df->children[i]->name, first, count,
                         &c, err);
        if (rc == 0 && (rc = zm__element_add_child(copy, c)) != 0) {
            zm__element_free(c);
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        }
    }
    if (rc != 0) {
        zm__element_free(copy);
        return rc;
    }
    *out = copy;
    return 0;
}

/* A 1-d array of n values held in memory (numbers, or strings when strings
 * is not NULL, which it takes) as an element named name under parent. */
static int memory_element(zm_source *source, const zm_element *parent, const char *name,
                          zm_dtype dtype, uint64_t n, const void *values, zm_strings *strings,
                          const char *what, zm_element **out, zm_err *err)
{
    *out = NULL;
    int string = strings != NULL;
    zm_element *e = zm__element_new(string ? ZM_ELEMENT_STRING_ARRAY : ZM_ELEMENT_ARRAY,
                                    parent->path, name);
    if (e == NULL) {
        if (strings)
            zm_strings_free(strings);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    uint64_t shape[1] = {n};
    char label[ZM__PATH_BUFFER];
    snprintf(label, sizeof label, "%s/%s (made by the reader)", parent->path, name);
    int rc = zm__array_memory(source, label, dtype, 1, shape, values, strings, &e->values, err);
    if (rc != 0) {
        zm__element_free(e);
        return rc;
    }
    zm__element_shape_from(e, e->values);
    zm__element_set_encoding(e, string ? "string-array" : "array", "0.2.0");
    zm__element_set_stored_as(e, "%s", what);
    *out = e;
    return 0;
}

/* A 1-d uint32 array held in memory as element parent/name. */
static int uint32_element(zm_source *source, zm_element *parent, const char *name,
                          const uint32_t *values, uint64_t n, const char *what, zm_err *err)
{
    zm_element *e;
    int rc = memory_element(source, parent, name, (zm_dtype){ZM_TYPE_UINT, 4}, n, values, NULL,
                            what, &e, err);
    if (rc == 0 && zm__element_add_child(parent, e) != 0) {
        zm__element_free(e);
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    }
    return rc;
}

static zm_element *dict(zm_element *root, const char *name, const char *stored_as)
{
    zm_element *d = zm__element_new(ZM_ELEMENT_DICT, "", name);
    if (d == NULL)
        return NULL;
    zm__element_set_encoding(d, "dict", "0.1.0");
    zm__element_set_stored_as(d, "%s", stored_as);
    if (zm__element_add_child(root, d) != 0) {
        zm__element_free(d);
        return NULL;
    }
    return d;
}

/* The runs of equal feature types: count runs, each [edges[i], edges[i+1])
 * of type names[i]. 0 with *count 1 for one type; -EINVAL (with *reason)
 * when a type's features are not one run. */
static int feature_runs(const zm_strings *types, uint64_t **edges, char ***names, size_t *count,
                        char *reason, size_t reason_size)
{
    *edges = NULL;
    *names = NULL;
    *count = 0;
    size_t runs = 0, capacity = 4;
    uint64_t *e = malloc((capacity + 1) * sizeof *e);
    char **n = calloc(capacity, sizeof *n);
    if (e == NULL || n == NULL) {
        free(e);
        free(n);
        return -ENOMEM;
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < types->count; i++) {
        const char *t = types->bytes + types->offsets[i];
        size_t length = types->offsets[i + 1] - types->offsets[i];
        if (runs > 0 && strlen(n[runs - 1]) == length && memcmp(n[runs - 1], t, length) == 0)
            continue;
        for (size_t r = 0; r < runs; r++)
            if (strlen(n[r]) == length && memcmp(n[r], t, length) == 0) {
                snprintf(reason, reason_size,
                         "the features of type %.*s are not one run (again at feature %zu): "
                         "served as one AnnData, not as modalities (each must be a column "
                         "window)", (int)(length > 64 ? 64 : length), t, i);
                rc = -EINVAL;
            }
        if (rc != 0)
            break;
        if (length == 0 || memchr(t, '/', length) || memchr(t, 0, length) ||
            length > ZM_ELEMENT_NAME_MAX) {
            snprintf(reason, reason_size, "a feature type (feature %zu) is not a name a store can "
                     "hold: served as one AnnData, not as modalities", i);
            rc = -EINVAL;
            break;
        }
        if (runs == capacity) {
            capacity *= 2;
            uint64_t *grown_e = realloc(e, (capacity + 1) * sizeof *e);
            if (grown_e)
                e = grown_e;
            char **grown_n = realloc(n, capacity * sizeof *n);
            if (grown_n)
                n = grown_n;
            if (grown_e == NULL || grown_n == NULL) {
                rc = -ENOMEM;
                break;
            }
        }
        e[runs] = i;
        n[runs] = strndup(t, length);
        if (n[runs] == NULL) {
            rc = -ENOMEM;
            break;
        }
        runs++;
    }
    e[runs] = types->count;
    if (rc != 0) {
        for (size_t r = 0; r < runs; r++)
            free(n[r]);
        free(n);
        free(e);
        return rc;
    }
    *edges = e;
    *names = n;
    *count = runs;
    return 0;
}

/* The global annotations' obsmap/NAME and varmap/NAME, made from each
 * modality's rows (zm_source_modality_rows) and its genes, which are the
 * global genes' next run: one modality's after another, in order. */
static int global_maps(zm_source *source, const char *obs_why, const char *var_why, zm_err *err)
{
    uint64_t n = source->n_obs, genes = source->n_vars;
    zm_element *obsmap = dict(source->root, "obsmap", obs_why);
    zm_element *varmap = dict(source->root, "varmap", var_why);
    uint32_t *map = malloc(((n > genes ? n : genes) + 1) * sizeof *map);
    int rc = obsmap && varmap && map ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    uint64_t first = 0;
    for (size_t i = 0; rc == 0 && i < source->modality_count; i++) {
        const uint32_t *rows = source->modality_rows[i];
        for (uint64_t g = 0; g < n; g++)
            map[g] = rows[g] == ZM_SOURCE_ABSENT ? 0 : rows[g] + 1;
        rc = uint32_element(source, obsmap, source->modality_names[i], map, n,
                            "made by the reader: 1-based rows, 0 for none", err);
        uint64_t width = source->modalities[i]->n_vars;
        for (uint64_t f = 0; f < genes; f++)
            map[f] = f >= first && f < first + width ? (uint32_t)(f - first + 1) : 0;
        if (rc == 0)
            rc = uint32_element(source, varmap, source->modality_names[i], map, genes,
                                "made by the reader: the modality's genes, 1-based", err);
        first += width;
    }
    free(map);
    return rc;
}

int zm__10x_feature_modalities(zm_source *source, zm_err *err)
{
    if (source->layout_anndata || source->format != ZM_FORMAT_10X_V3)
        return 0;
    zm_element *root = source->root;
    zm_element *x = child_named(root, "X"), *obs = child_named(root, "obs");
    zm_element *var = child_named(root, "var");
    zm_element *types_column = child_named(var, "feature_types");
    if (x == NULL || obs == NULL || var == NULL || types_column == NULL ||
        zm_array_describe(types_column->values)->dtype.type_class != ZM_TYPE_STRING)
        return 0;
    /* The whole matrix's parts, as validate.c checks an X: the global
     * annotations will hold none for it to see. Its indices stay checked
     * against every feature on every read. */
    int rc = zm__validate_sparse(x, err);
    if (rc != 0)
        return rc;
    zm_strings types;
    rc = zm_array_read_strings(source, types_column->values, NULL, 0, &types, err);
    if (rc != 0)
        return rc;
    uint64_t *edges = NULL;
    char **types_of = NULL;
    size_t count = 0;
    char reason[ZM_REASON_MAX] = "";
    rc = feature_runs(&types, &edges, &types_of, &count, reason, sizeof reason);
    zm_strings_free(&types);
    if (rc == -EINVAL) {
        zm__source_skip(source, "/matrix/features/feature_type", reason);
        return 0;
    }
    if (rc != 0)
        return zm_err_set(err, rc, "out of memory reading the feature types");
    if (count < 2) {
        for (size_t i = 0; i < count; i++)
            free(types_of[i]);
        free(types_of);
        free(edges);
        return 0; /* one feature type: the AnnData it is */
    }
    /* Two types mudata names alike (say "rna" and "Gene Expression"):
     * each keeps its feature type's name. */
    const char **names = calloc(count, sizeof *names);
    rc = names ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        names[i] = modality_name(types_of[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[j], names[i]) == 0)
                names[i] = types_of[i];
    }
    struct zm_window *w = rc == 0 ? calloc(1, sizeof *w) : NULL;
    if (rc == 0 && w == NULL)
        rc = -ENOMEM;
    if (rc == 0) {
        pthread_mutex_init(&w->mutex, NULL);
        w->indices = x->indices;
        w->indptr = x->indptr;
        w->rows = source->n_obs;
        w->columns = source->n_vars;
        w->count = count;
        w->edges = edges;
        edges = NULL;
        source->window = w;
    }
    if (rc == 0)
        rc = zm__modalities_alloc(source, count, err);
    else
        rc = zm_err_set(err, -ENOMEM, "out of memory reading the feature types");
    uint64_t n = source->n_obs;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        uint64_t first = w->edges[i], width = w->edges[i + 1] - first;
        zm_source *m = zm__modality_new(source);
        if (m == NULL || (source->modality_names[i] = strdup(names[i])) == NULL) {
            free(m);
            rc = zm_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        source->modalities[i] = m;
        m->format = ZM_FORMAT_10X_V3;
        m->n_obs = n;
        m->n_vars = width;
        m->root = zm__element_new(ZM_ELEMENT_DICT, "", "");
        zm_element *mx = zm__element_new(ZM_ELEMENT_SPARSE, "", "X");
        if (m->root == NULL || mx == NULL || zm__element_add_child(m->root, mx) != 0) {
            zm__element_free(mx);
            rc = zm_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        zm__element_set_encoding(m->root, "anndata", "0.1.0");
        zm__element_set_stored_as(m->root, "10x Genomics 10x-v3, /matrix: the %s features", types_of[i]);
        mx->values = x->values;
        mx->indices = x->indices;
        mx->indptr = x->indptr;
        mx->sparse_format = ZM_SPARSE_CSR;
        mx->rank = 2;
        mx->shape[0] = n;
        mx->shape[1] = width;
        mx->window = w;
        mx->window_first = first;
        mx->window_index = i;
        zm__element_set_encoding(mx, "csr_matrix", "0.1.0");
        zm__element_set_stored_as(mx, "columns %" PRIu64 " to %" PRIu64 " of the 10x matrix "
                                  "(feature type %s)", first, first + width, types_of[i]);
        zm_element *mobs = NULL, *mvar = NULL;
        rc = dataframe_rows(source, obs, 0, n, &mobs, err);
        if (rc == 0 && (rc = zm__element_add_child(m->root, mobs)) != 0) {
            zm__element_free(mobs);
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        }
        if (rc == 0)
            rc = dataframe_rows(source, var, first, width, &mvar, err);
        if (rc == 0 && (rc = zm__element_add_child(m->root, mvar)) != 0) {
            zm__element_free(mvar);
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        }
        if (rc != 0)
            break;
        zm__set_root_axes(m->root);
        if (zm__element_index(m->root) != 0) {
            rc = zm_err_set(err, -ENOMEM, "out of memory indexing the elements");
            break;
        }
        /* Every barcode is a cell of each feature type: the rows as they are. */
        source->modality_rows[i] = malloc((n ? n : 1) * sizeof *source->modality_rows[i]);
        if (source->modality_rows[i] == NULL) {
            rc = zm_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        for (uint64_t c = 0; c < n; c++)
            source->modality_rows[i][c] = (uint32_t)c;
    }
    /* The types' runs are the features in order: each modality's genes
     * the next run, as global_maps takes them. */
    if (rc == 0)
        rc = global_maps(source, "made by the reader: every barcode is a cell of every feature type",
                         "made by the reader: each feature's row in its type's modality", err);
    free(names);
    for (size_t i = 0; i < count; i++)
        free(types_of[i]);
    free(types_of);
    free(edges);
    if (rc != 0)
        return rc;
    /* The global annotations have no matrix of their own: each modality
     * holds its columns. */
    zm__element_free(zm__element_take_child(root, "X"));
    zm__element_set_encoding(root, "MuData", "0.1.0");
    zm__element_set_stored_as(root, "10x Genomics 10x-v3, /matrix: %zu feature types as "
                              "modalities", count);
    zm__set_root_axes(root);
    return 0;
}

/* ---- A v2 file's genomes ---------------------------------------------------------- */

/* A memory string array element parent/name (taking the strings). */
static int strings_element(zm_source *source, zm_element *parent, const char *name,
                           zm__strings_builder *b, const char *what, zm_element **out,
                           zm_err *err)
{
    if (b->s.offsets == NULL && (b->s.offsets = calloc(1, sizeof *b->s.offsets)) == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory"); /* no strings: one offset, 0 */
    zm_strings strings = b->s;
    memset(b, 0, sizeof *b);
    return memory_element(source, parent, name, (zm_dtype){ZM_TYPE_STRING, 0}, strings.count,
                          NULL, &strings, what, out, err);
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a: a table's slots, not a digest */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
    return h;
}

int zm__10x_genome_modalities(zm_source *source, const char (*groups)[ZM__PATH_BUFFER],
                              size_t count, zm_err *err)
{
    int rc = zm__modalities_alloc(source, count, err);
    for (size_t i = 0; rc == 0 && i < count; i++) {
        zm_source *m = zm__modality_new(source);
        if (m == NULL || (source->modality_names[i] = strdup(groups[i] + 1)) == NULL) {
            free(m);
            return zm_err_set(err, -ENOMEM, "out of memory");
        }
        source->modalities[i] = m;
        m->format = ZM_FORMAT_10X_V2;
        rc = zm__10x_read_group(m, groups[i], err);
        if (rc == 0)
            rc = zm__validate(m, err);
    }
    if (rc != 0)
        return rc;
    /* The global cells: each barcode any genome has, in the order the
     * genomes (by name) first name it; a genome naming one twice is
     * refused (its two rows would be one cell). */
    uint64_t total = 0, genes = 0;
    for (size_t i = 0; i < count; i++) {
        total += source->modalities[i]->n_obs;
        genes += source->modalities[i]->n_vars;
    }
    if (total >= UINT32_MAX)
        return zm_err_set(err, -EINVAL, "%s: more barcodes than a view can hold", source->path);
    size_t slots = 64;
    while (slots < 2 * total)
        slots *= 2;
    uint32_t *table = malloc(slots * sizeof *table);
    uint32_t **global_of = calloc(count, sizeof *global_of);
    zm__strings_builder cells = {0};
    if (table == NULL || global_of == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    for (size_t t = 0; rc == 0 && t < slots; t++)
        table[t] = UINT32_MAX;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        zm_source *m = source->modalities[i];
        const zm_element *obs = zm_source_find(m, "obs");
        zm_strings barcodes;
        rc = zm_array_read_strings(m, obs->index->values, NULL, 0, &barcodes, err);
        if (rc != 0)
            break;
        global_of[i] = malloc((m->n_obs ? m->n_obs : 1) * sizeof *global_of[i]);
        if (global_of[i] == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        for (uint64_t r = 0; rc == 0 && r < m->n_obs; r++) {
            const char *b = barcodes.bytes + barcodes.offsets[r];
            size_t length = barcodes.offsets[r + 1] - barcodes.offsets[r];
            size_t slot = hash_bytes(b, length) & (slots - 1);
            while (table[slot] != UINT32_MAX) {
                uint32_t g = table[slot];
                if (cells.s.offsets[g + 1] - cells.s.offsets[g] == length &&
                    memcmp(cells.s.bytes + cells.s.offsets[g], b, length) == 0)
                    break;
                slot = (slot + 1) & (slots - 1);
            }
            if (table[slot] == UINT32_MAX) {
                table[slot] = (uint32_t)cells.s.count;
                if (zm__strings_add(&cells, b, length) != 0)
                    rc = zm_err_set(err, -ENOMEM, "out of memory");
            }
            global_of[i][r] = table[slot];
        }
        zm_strings_free(&barcodes);
    }
    uint64_t n = cells.s.count;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        zm_source *m = source->modalities[i];
        uint32_t *rows = malloc((n ? n : 1) * sizeof *rows);
        source->modality_rows[i] = rows;
        if (rows == NULL) {
            rc = zm_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        for (uint64_t g = 0; g < n; g++)
            rows[g] = ZM_SOURCE_ABSENT;
        for (uint64_t r = 0; rc == 0 && r < m->n_obs; r++) {
            if (rows[global_of[i][r]] != ZM_SOURCE_ABSENT)
                rc = zm_err_set(err, -EINVAL, "%s: genome %s names barcode %" PRIu32 " twice "
                                "(rows %" PRIu32 " and %" PRIu64 ")", source->path,
                                source->modality_names[i], global_of[i][r],
                                rows[global_of[i][r]], r);
            rows[global_of[i][r]] = (uint32_t)r;
        }
    }
    for (size_t i = 0; global_of && i < count; i++)
        free(global_of[i]);
    free(global_of);
    free(table);

    /* The global genes: every genome's, one after another, with the
     * genome each is of. */
    zm__strings_builder names = {0}, ids = {0}, of = {0};
    int with_ids = 1; /* every genome has string gene ids: a column of them */
    for (size_t i = 0; rc == 0 && i < count; i++) {
        zm_source *m = source->modalities[i];
        const zm_element *var = zm_source_find(m, "var");
        const zm_element *id = zm_element_child(var, "gene_ids", 8);
        zm_strings a = {0}, b = {0};
        rc = zm_array_read_strings(m, var->index->values, NULL, 0, &a, err);
        if (id == NULL || zm_array_describe(id->values)->dtype.type_class != ZM_TYPE_STRING)
            with_ids = 0;
        if (rc == 0 && with_ids)
            rc = zm_array_read_strings(m, id->values, NULL, 0, &b, err);
        for (uint64_t f = 0; rc == 0 && f < m->n_vars; f++) {
            const char *genome = source->modality_names[i];
            if (zm__strings_add(&names, a.bytes + a.offsets[f],
                                a.offsets[f + 1] - a.offsets[f]) ||
                zm__strings_add(&of, genome, strlen(genome)) ||
                (with_ids && zm__strings_add(&ids, b.bytes + b.offsets[f],
                                             b.offsets[f + 1] - b.offsets[f])))
                rc = zm_err_set(err, -ENOMEM, "out of memory");
        }
        zm_strings_free(&a);
        zm_strings_free(&b);
    }

    zm_element *root = zm__element_new(ZM_ELEMENT_DICT, "", "");
    zm_element *obs = zm__element_new(ZM_ELEMENT_DATAFRAME, "", "obs");
    zm_element *var = zm__element_new(ZM_ELEMENT_DATAFRAME, "", "var");
    if (rc == 0 && (root == NULL || obs == NULL || var == NULL))
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        source->root = root;
        source->n_obs = n;
        source->n_vars = genes;
        zm__element_set_encoding(root, "MuData", "0.1.0");
        zm__element_set_stored_as(root, "10x Genomics 10x-v2: %zu genomes as modalities", count);
        zm__element_set_encoding(obs, "dataframe", "0.2.0");
        zm__element_set_encoding(var, "dataframe", "0.2.0");
        zm__element_set_stored_as(obs, "made by the reader: every genome's barcodes, once each");
        zm__element_set_stored_as(var, "made by the reader: every genome's genes");
        obs->rank = var->rank = 1;
        obs->shape[0] = n;
        var->shape[0] = genes;
        obs->index_name = strdup("_index");
        var->index_name = strdup("_index");
        rc = zm__element_add_child(root, obs) || zm__element_add_child(root, var) ||
                     !obs->index_name || !var->index_name
                 ? zm_err_set(err, -ENOMEM, "out of memory") : 0;
        if (rc != 0) {
            if (root->child_count < 1)
                zm__element_free(obs);
            if (root->child_count < 2)
                zm__element_free(var);
        }
        obs = var = NULL;
    } else {
        zm__element_free(root);
        zm__element_free(obs);
        zm__element_free(var);
        zm_strings_free(&cells.s);
        zm_strings_free(&names.s);
        zm_strings_free(&ids.s);
        zm_strings_free(&of.s);
        return rc;
    }
    if (rc != 0 || root->child_count < 2) { /* the root is the source's: freed with it */
        zm_strings_free(&cells.s);
        zm_strings_free(&names.s);
        zm_strings_free(&ids.s);
        zm_strings_free(&of.s);
        return rc ? rc : zm_err_set(err, -ENOMEM, "out of memory");
    }
    obs = root->children[0];
    var = root->children[1];
    zm_element *e = NULL;
    rc = strings_element(source, obs, "_index", &cells,
                         "made by the reader: the barcodes", &obs->index, err);
    if (rc == 0)
        rc = strings_element(source, var, "_index", &names,
                             "made by the reader: the genes' names", &var->index, err);
    if (rc == 0 && with_ids &&
        (rc = strings_element(source, var, "gene_ids", &ids,
                              "made by the reader: the genes' ids", &e, err)) == 0 &&
        zm__element_add_child(var, e) != 0) {
        zm__element_free(e);
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    }
    if (rc == 0 &&
        (rc = strings_element(source, var, "genome", &of,
                              "made by the reader: each gene's genome", &e, err)) == 0 &&
        zm__element_add_child(var, e) != 0) {
        zm__element_free(e);
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    }
    zm_strings_free(&cells.s);
    zm_strings_free(&names.s);
    zm_strings_free(&ids.s);
    zm_strings_free(&of.s);
    if (rc == 0)
        rc = global_maps(source, "made by the reader: each barcode's row in each genome, 0 where "
                         "it has none", "made by the reader: each gene's row in its genome", err);
    if (rc == 0)
        zm__set_root_axes(root);
    return rc;
}
