/* loom files, presented the way anndata's read_loom presents them: the
 * genes × cells /matrix and /layers as cells × genes, col_attrs as obs
 * (CellID the index, 2-d attributes with several columns as obsm),
 * row_attrs as var (Gene the index), col_graphs and row_graphs as obsp and
 * varp (coordinate lists turned into CSR matrices when the file is opened). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/source_internal.h"
#include "source/formats.h"

/* A range index "0", "1", ... as strings (anndata's default names). */
int zm__range_index(zm_source *source, const char *label, uint64_t n, zm_element *parent,
                    const char *name, zm_element **out, zm_err *err)
{
    *out = NULL;
    zm_strings s = {0};
    s.count = n;
    s.offsets = malloc((n + 1) * sizeof *s.offsets);
    s.bytes = malloc(n * 11 + 1);
    if (s.offsets == NULL || s.bytes == NULL) {
        zm_strings_free(&s);
        return zm_err_set(err, -ENOMEM, "out of memory naming %llu rows", (unsigned long long)n);
    }
    uint64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        s.offsets[i] = at;
        at += (uint64_t)sprintf(s.bytes + at, "%llu", (unsigned long long)i);
    }
    s.offsets[n] = at;
    zm_array *array;
    uint64_t shape[1] = {n};
    int rc = zm__array_memory(source, label, (zm_dtype){ZM_TYPE_STRING, 0}, 1, shape, NULL, &s,
                              &array, err);
    if (rc != 0)
        return rc;
    zm_element *e = zm__element_new(ZM_ELEMENT_STRING_ARRAY, parent->path, name);
    if (e == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    e->values = array;
    zm__element_shape_from(e, array);
    zm__element_set_encoding(e, "string-array", "0.2.0");
    zm__element_set_stored_as(e, "a range index made by the reader");
    *out = e;
    return 0;
}

int zm__array_element(zm_source *source, const char *h5path, const char *field, int transposed,
                      const char *parent, const char *name, zm_element **out, zm_err *err)
{
    *out = NULL;
    zm_array *array;
    int rc = zm__array_open(source, source->file, h5path, field, transposed, &array, err);
    if (rc != 0)
        return rc;
    const zm_array_info *info = zm_array_describe(array);
    int string = info->dtype.type_class == ZM_TYPE_STRING;
    zm_element *e = zm__element_new(info->rank == 0 ? ZM_ELEMENT_SCALAR
                                    : string        ? ZM_ELEMENT_STRING_ARRAY
                                                    : ZM_ELEMENT_ARRAY,
                                    parent, name);
    if (e == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    e->values = array;
    zm__element_shape_from(e, array);
    if (info->rank == 0)
        zm__element_set_encoding(e, string ? "string" : "numeric-scalar", "0.2.0");
    else
        zm__element_set_encoding(e, string ? "string-array" : "array", "0.2.0");
    *out = e;
    return 0;
}

/* Reads a whole 1-d numeric array as doubles or int64s. */
int zm__read_whole(zm_source *source, zm_array *array, int as_double, void **out, zm_err *err)
{
    const zm_array_info *info = zm_array_describe(array);
    /* Rows of more than one value would not fit the buffers below. */
    if (info->rank > 1)
        return zm_err_set(err, -EINVAL, "%s: expected a 1-d array, not %u-d", info->file_path,
                          info->rank);
    /* The buffers are as large as the array claims to be: as far as the
     * file stores it. */
    zm__hdf5_lock();
    int stored = zm__h5_check_stored(source, array, 0, err);
    zm__hdf5_unlock();
    if (stored != 0)
        return stored;
    uint64_t n = info->rank == 0 ? 1 : info->shape[0];
    uint8_t *raw = malloc(n * info->dtype.size + 1);
    void *values = malloc(n * 8 + 1);
    int rc = raw && values ? zm_array_read_rows(source, array, 0, info->rank == 0 ? 1 : n, raw, err)
                           : zm_err_set(err, -ENOMEM, "out of memory reading %s", info->file_path);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        const uint8_t *v = raw + i * info->dtype.size;
        double d = 0;
        int64_t k = 0;
        switch (info->dtype.type_class) {
        case ZM_TYPE_FLOAT:
            if (info->dtype.size == 4) {
                float f;
                memcpy(&f, v, 4);
                d = f;
            } else if (info->dtype.size == 8) {
                memcpy(&d, v, 8);
            } else {
                rc = zm_err_set(err, -ENOTSUP, "%s: half floats here are not supported", info->file_path);
            }
            /* Out of int64's range (or NaN) the conversion is undefined. */
            if (rc == 0 && !as_double && !(d > -9223372036854775808.0 && d < 9223372036854775808.0))
                rc = zm_err_set(err, -EINVAL, "%s: value %g (entry %llu) is not an integer",
                                info->file_path, d, (unsigned long long)i);
            k = rc == 0 && !as_double ? (int64_t)d : 0;
            break;
        case ZM_TYPE_INT:
        case ZM_TYPE_BOOL:
        case ZM_TYPE_UINT: {
            uint64_t u = 0;
            memcpy(&u, v, info->dtype.size);
            if (info->dtype.type_class == ZM_TYPE_INT && info->dtype.size < 8 &&
                (u >> (info->dtype.size * 8 - 1)) & 1)
                u |= ~0ULL << (info->dtype.size * 8);
            k = (int64_t)u;
            d = info->dtype.type_class == ZM_TYPE_UINT ? (double)u : (double)k;
            break;
        }
        default:
            rc = zm_err_set(err, -EINVAL, "%s: expected numbers", info->file_path);
        }
        if (as_double)
            ((double *)values)[i] = d;
        else
            ((int64_t *)values)[i] = k;
    }
    free(raw);
    if (rc != 0) {
        free(values);
        return rc;
    }
    *out = values;
    return 0;
}

/* A coordinate-list graph (a, b, w) as a CSR matrix of n × n, duplicates
 * summed, held in memory (like scipy's coo → csr). */
static int graph_element(zm_source *source, const char *h5path, uint64_t n, const char *parent,
                         const char *name, zm_element **out, zm_err *err)
{
    *out = NULL;
    char path[ZM__PATH_BUFFER];
    zm_array *parts[3];
    static const char *const names[] = {"a", "b", "w"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", h5path, names[i]);
        char why[ZM_REASON_MAX];
        if (zm__h5_object_type(source->file, path) != H5O_TYPE_DATASET)
            return zm__h5_outside(source->file, path, why, sizeof why)
                       ? zm_err_set(err, ZM__OUTSIDE, "%s: %s", path, why)
                       : zm_err_set(err, -EINVAL, "%s: a loom graph needs a, b and w", h5path);
        int rc = zm__array_open(source, source->file, path, NULL, 0, &parts[i], err);
        if (rc != 0)
            return rc;
    }
    uint64_t m = zm_array_describe(parts[0])->shape[0];
    if (zm_array_describe(parts[1])->shape[0] != m || zm_array_describe(parts[2])->shape[0] != m)
        return zm_err_set(err, -EINVAL, "%s: a, b and w differ in length", h5path);
    int64_t *a = NULL, *b = NULL;
    double *w = NULL;
    int rc = zm__read_whole(source, parts[0], 0, (void **)&a, err);
    if (rc == 0)
        rc = zm__read_whole(source, parts[1], 0, (void **)&b, err);
    if (rc == 0)
        rc = zm__read_whole(source, parts[2], 1, (void **)&w, err);
    int64_t *indptr = calloc(n + 1, sizeof *indptr);
    int64_t *fill = calloc(n + 1, sizeof *fill);
    int64_t *indices = malloc((m ? m : 1) * sizeof *indices);
    double *data = malloc((m ? m : 1) * sizeof *data);
    if (rc == 0 && (!indptr || !fill || !indices || !data))
        rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", h5path);
    for (uint64_t i = 0; rc == 0 && i < m; i++)
        if (a[i] < 0 || (uint64_t)a[i] >= n || b[i] < 0 || (uint64_t)b[i] >= n)
            rc = zm_err_set(err, -EINVAL, "%s: edge %llu joins %lld and %lld, outside 0..%llu",
                            h5path, (unsigned long long)i, (long long)a[i], (long long)b[i],
                            (unsigned long long)n - 1);
    uint64_t nnz = 0;
    if (rc == 0) {
        /* Counting sort by row, then each row's entries by column, summing
         * repeated (row, column) pairs. */
        for (uint64_t i = 0; i < m; i++)
            indptr[a[i] + 1]++;
        for (uint64_t r = 0; r < n; r++)
            indptr[r + 1] += indptr[r];
        memcpy(fill, indptr, (n + 1) * sizeof *fill);
        int64_t *order = malloc((m ? m : 1) * sizeof *order);
        if (order == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", h5path);
        for (uint64_t i = 0; rc == 0 && i < m; i++)
            order[fill[a[i]]++] = (int64_t)i;
        uint64_t at = 0;
        for (uint64_t r = 0; rc == 0 && r < n; r++) {
            int64_t from = indptr[r], to = indptr[r + 1];
            /* Insertion sort: rows of a kNN graph are short. */
            for (int64_t x = from + 1; x < to; x++) {
                int64_t v = order[x], y = x - 1;
                while (y >= from && b[order[y]] > b[v]) {
                    order[y + 1] = order[y];
                    y--;
                }
                order[y + 1] = v;
            }
            indptr[r] = (int64_t)at;
            for (int64_t x = from; x < to; x++) {
                int64_t e = order[x];
                if (at > (uint64_t)indptr[r] && indices[at - 1] == b[e])
                    data[at - 1] += w[e];
                else {
                    indices[at] = b[e];
                    data[at++] = w[e];
                }
            }
        }
        indptr[n] = (int64_t)at;
        nnz = at;
        free(order);
    }
    zm_element *e = NULL;
    if (rc == 0) {
        e = zm__element_new(ZM_ELEMENT_SPARSE, parent, name);
        uint64_t shape_data[1] = {nnz}, shape_indptr[1] = {n + 1};
        rc = e ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
        /* As scipy builds it: data in w's type, 32-bit indices when they fit. */
        zm_dtype w_type = zm_array_describe(parts[2])->dtype;
        int narrow = n < INT32_MAX && nnz < INT32_MAX;
        void *data_out = data, *indices_out = indices, *indptr_out = indptr;
        float *data32 = NULL;
        int32_t *indices32 = NULL, *indptr32 = NULL;
        if (rc == 0 && w_type.type_class == ZM_TYPE_FLOAT && w_type.size == 4) {
            data32 = malloc((nnz ? nnz : 1) * sizeof *data32);
            for (uint64_t i = 0; data32 && i < nnz; i++)
                data32[i] = (float)data[i];
            data_out = data32;
        } else {
            w_type = (zm_dtype){ZM_TYPE_FLOAT, 8};
        }
        if (rc == 0 && narrow) {
            indices32 = malloc((nnz ? nnz : 1) * sizeof *indices32);
            indptr32 = malloc((n + 1) * sizeof *indptr32);
            for (uint64_t i = 0; indices32 && i < nnz; i++)
                indices32[i] = (int32_t)indices[i];
            for (uint64_t i = 0; indptr32 && i <= n; i++)
                indptr32[i] = (int32_t)indptr[i];
            indices_out = indices32;
            indptr_out = indptr32;
        }
        if (rc == 0 && (data_out == NULL || indices_out == NULL || indptr_out == NULL))
            rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", h5path);
        zm_dtype index_type = {ZM_TYPE_INT, narrow ? 4 : 8};
        if (rc == 0)
            rc = zm__array_memory(source, h5path, w_type, 1, shape_data, data_out, NULL, &e->values,
                                  err);
        if (rc == 0)
            rc = zm__array_memory(source, h5path, index_type, 1, shape_data, indices_out, NULL,
                                  &e->indices, err);
        if (rc == 0)
            rc = zm__array_memory(source, h5path, index_type, 1, shape_indptr, indptr_out, NULL,
                                  &e->indptr, err);
        free(data32);
        free(indices32);
        free(indptr32);
        if (rc == 0) {
            e->sparse_format = ZM_SPARSE_CSR;
            e->rank = 2;
            e->shape[0] = e->shape[1] = n;
            zm__element_set_encoding(e, "csr_matrix", "0.1.0");
            zm__element_set_stored_as(e, "loom graph (a, b, w), made CSR at open");
        }
    }
    free(a);
    free(b);
    free(w);
    free(indptr);
    free(fill);
    free(indices);
    free(data);
    if (rc != 0) {
        zm__element_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* col_attrs or row_attrs: a dataframe (index_key the index) and a mapping of
 * the 2-d attributes with more than one column. matrix (/matrix) says how
 * many rows there are (n). */
static int axis_attrs(zm_source *source, const char *h5group, const char *index_key, uint64_t n,
                      const char *frame_name, const char *mapping_name, zm_element *root,
                      const zm_array *matrix, zm_err *err)
{
    zm_element *df = zm__element_new(ZM_ELEMENT_DATAFRAME, "", frame_name);
    zm_element *mapping = zm__element_new(ZM_ELEMENT_DICT, "", mapping_name);
    if (df == NULL || mapping == NULL) {
        zm__element_free(df);
        zm__element_free(mapping);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    zm__element_set_encoding(df, "dataframe", "0.2.0");
    zm__element_set_encoding(mapping, "dict", "0.1.0");
    zm__element_set_stored_as(df, "loom %s", h5group + 1);
    zm__element_set_stored_as(mapping, "loom %s with several columns", h5group + 1);
    zm_strings names = {0};
    int rc = zm__h5_list(source->file, h5group, &names);
    for (size_t i = 0; rc == 0 && i < names.count; i++) {
        char key[ZM_ELEMENT_NAME_MAX + 1], path[ZM__PATH_BUFFER];
        if (zm__child_at(source, h5group, &names, i, key, path) != 0)
            continue;
        if (zm__h5_object_type(source->file, path) != H5O_TYPE_DATASET) {
            char why[ZM_REASON_MAX];
            if (zm__h5_outside(source->file, path, why, sizeof why))
                zm__source_skip(source, path, why);
            continue;
        }
        int is_index = strcmp(key, index_key) == 0;
        zm_element *e = NULL;
        rc = zm__array_element(source, path, NULL, 0, is_index ? df->path : df->path, key, &e, err);
        if (rc == -ENOTSUP || rc == ZM__OUTSIDE) {
            zm__source_skip(source, path, err->reason);
            zm_err_clear(err);
            rc = 0;
            continue;
        }
        if (rc != 0)
            break;
        zm__element_set_stored_as(e, "loom attribute");
        /* loompy escapes XML entities in stored strings and unescapes them
         * when it reads; so do we. */
        if (e->values->info.dtype.type_class == ZM_TYPE_STRING)
            e->values->xml_unescape = 1;
        if (e->rank == 0 || e->shape[0] != n) {
            rc = zm_err_set(err, -EINVAL, "%s: %llu values, expected %llu", path,
                            (unsigned long long)(e->rank ? e->shape[0] : 0), (unsigned long long)n);
            zm__element_free(e);
            break;
        }
        if (is_index && e->rank == 1 && df->index == NULL) {
            df->index = e;
            df->index_name = strdup(key);
        } else if (e->rank == 2 && e->shape[1] > 1) {
            free(e->path);
            size_t len = strlen(mapping_name) + strlen(key) + 2;
            e->path = malloc(len);
            snprintf(e->path, len, "%s/%s", mapping_name, key);
            rc = zm__element_add_child(mapping, e);
        } else if (e->rank <= 2) {
            /* (n, 1) attributes are one column. */
            e->rank = 1;
            rc = zm__element_add_child(df, e);
        } else {
            zm__source_skip(source, path, "an attribute of more than 2 dimensions");
            zm__element_free(e);
        }
    }
    zm_strings_free(&names);
    /* How many rows there are is believed as far as the file stores them:
     * the index whole, or (when the reader names the rows itself, 19 bytes
     * a row) /matrix whole. */
    if (rc == 0)
        rc = zm__h5_check_stored(source, df->index ? df->index->values : matrix, 1, err);
    if (rc == 0 && df->index == NULL) {
        rc = zm__range_index(source, h5group, n, df, "_index", &df->index, err);
        if (rc == 0)
            df->index_name = strdup("_index");
    }
    df->rank = 1;
    df->shape[0] = n;
    if (rc == 0)
        rc = zm__element_add_child(root, df);
    else
        zm__element_free(df);
    if (rc == 0)
        rc = zm__element_add_child(root, mapping);
    else
        zm__element_free(mapping);
    return rc;
}

int zm__read_loom(zm_source *source, zm_err *err)
{
    zm__hdf5_lock();
    int rc = 0;
    zm_element *root = zm__element_new(ZM_ELEMENT_DICT, "", "");
    if (root == NULL) {
        zm__hdf5_unlock();
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    source->root = root;
    zm__element_set_encoding(root, "anndata", "0.1.0");
    zm__element_set_stored_as(root, "loom");
    zm_element *x = NULL;
    rc = zm__array_element(source, "/matrix", NULL, 1, "", "X", &x, err);
    if (rc == 0 && x->rank != 2)
        rc = zm_err_set(err, -EINVAL, "%s: /matrix must be 2-d", source->path);
    if (rc == 0) {
        zm__element_set_stored_as(x, "loom /matrix (genes × cells)");
        source->n_obs = x->shape[0];
        source->n_vars = x->shape[1];
        rc = zm__element_add_child(root, x);
    } else {
        zm__element_free(x);
    }
    if (rc == 0)
        rc = axis_attrs(source, "/col_attrs", "CellID", source->n_obs, "obs", "obsm", root,
                        x->values, err);
    if (rc == 0)
        rc = axis_attrs(source, "/row_attrs", "Gene", source->n_vars, "var", "varm", root,
                        x->values, err);

    static const char *const kinds[][3] = {{"/layers", "layers", ""}, {"/col_graphs", "obsp", ""},
                                           {"/row_graphs", "varp", ""}};
    for (int k = 0; rc == 0 && k < 3; k++) {
        zm_element *dict = zm__element_new(ZM_ELEMENT_DICT, "", kinds[k][1]);
        if (dict == NULL) {
            rc = zm_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        zm__element_set_encoding(dict, "dict", "0.1.0");
        zm__element_set_stored_as(dict, "loom %s", kinds[k][0] + 1);
        zm_strings names = {0};
        char why[ZM_REASON_MAX];
        if (zm__h5_outside(source->file, kinds[k][0], why, sizeof why))
            zm__source_skip(source, kinds[k][0], why);
        else if (zm__h5_exists(source->file, kinds[k][0]) &&
                 zm__h5_list(source->file, kinds[k][0], &names) != 0)
            rc = zm_err_set(err, -EIO, "%s: cannot list the group", kinds[k][0]);
        for (size_t i = 0; rc == 0 && i < names.count; i++) {
            char key[ZM_ELEMENT_NAME_MAX + 1], path[ZM__PATH_BUFFER];
            if (zm__child_at(source, kinds[k][0], &names, i, key, path) != 0)
                continue;
            zm_element *e = NULL;
            if (k == 0) {
                rc = zm__array_element(source, path, NULL, 1, dict->path, key, &e, err);
                if (rc == 0 && (e->rank != 2 || e->shape[0] != source->n_obs ||
                                e->shape[1] != source->n_vars)) {
                    rc = zm_err_set(err, -EINVAL, "%s: its shape differs from /matrix", path);
                    zm__element_free(e);
                    e = NULL;
                }
                if (e)
                    zm__element_set_stored_as(e, "loom layer (genes × cells)");
            } else {
                rc = graph_element(source, path, k == 1 ? source->n_obs : source->n_vars, dict->path,
                                   key, &e, err);
            }
            if (rc == ZM__OUTSIDE) { /* a layer or graph outside the source: left out */
                zm__source_skip(source, path, err->reason);
                zm_err_clear(err);
                rc = 0;
                e = NULL;
            }
            if (rc == 0 && e)
                rc = zm__element_add_child(dict, e);
        }
        zm_strings_free(&names);
        if (rc == 0)
            rc = zm__element_add_child(root, dict);
        else
            zm__element_free(dict);
    }
    zm__hdf5_unlock();
    if (rc != 0)
        return rc;
    zm__set_root_axes(root);
    return 0;
}
