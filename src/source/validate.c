/* Checks that a source's parts agree before anything is served from it:
 * lengths along each axis and of sparse parts, and (on every read) indices
 * and category codes within their bounds. Sparse pointers are checked by the
 * view that uses them (view.c), for the cells it uses. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

int zm__array_check_values(zm_array *array, int64_t min, int64_t limit, const char *what)
{
    array->check_values = 1;
    array->value_min = min;
    array->value_limit = limit;
    free(array->check_what);
    array->check_what = strdup(what);
    return array->check_what ? 0 : -ENOMEM;
}

static uint64_t axis_length(const zm_source *source, zm_axis axis, uint64_t raw_vars)
{
    switch (axis) {
    case ZM_AXIS_OBS:
        return source->n_obs;
    case ZM_AXIS_VAR:
        return source->n_vars;
    case ZM_AXIS_RAW_VAR:
        return raw_vars;
    default:
        return UINT64_MAX;
    }
}

static const char *axis_name(zm_axis axis)
{
    return axis == ZM_AXIS_OBS ? "cells" : axis == ZM_AXIS_VAR ? "genes" : "raw genes";
}

int zm__validate_sparse(zm_element *e, zm_err *err)
{
    const zm_array_info *data = zm_array_describe(e->values);
    const zm_array_info *indices = zm_array_describe(e->indices);
    const zm_array_info *indptr = zm_array_describe(e->indptr);
    int csr = e->sparse_format == ZM_SPARSE_CSR;
    uint64_t major = csr ? e->shape[0] : e->shape[1], minor = csr ? e->shape[1] : e->shape[0];
    /* Every format's parts, whoever read them (a 10x matrix's are taken
     * as they are): values are numbers, pointers and indices integers. */
    const zm_array_info *parts[] = {data, indices, indptr};
    static const char *const part_names[] = {"data", "indices", "indptr"};
    for (int i = 0; i < 3; i++) {
        zm_type_class c = parts[i]->dtype.type_class;
        int integer = c == ZM_TYPE_INT || c == ZM_TYPE_UINT;
        if (parts[i]->rank != 1 || c == ZM_TYPE_STRING || (i > 0 && !integer))
            return zm_err_set(err, -EINVAL, "%s: %s must be a 1-d %s array (it is %u-d %s)",
                              e->path, part_names[i], i > 0 ? "integer" : "numeric",
                              parts[i]->rank, zm_dtype_name(parts[i]->dtype));
    }
    if (indptr->shape[0] != major + 1)
        return zm_err_set(err, -EINVAL, "%s: indptr has %" PRIu64 " entries, expected %" PRIu64
                          " (one more than its %" PRIu64 " %s)", e->path, indptr->shape[0], major + 1,
                          major, csr ? "rows" : "columns");
    if (data->shape[0] != indices->shape[0])
        return zm_err_set(err, -EINVAL, "%s: data has %" PRIu64 " values but indices %" PRIu64,
                          e->path, data->shape[0], indices->shape[0]);
    /* The pointers themselves are checked where they are used (a view
     * checks those of its cells as it lays itself out), so opening a source
     * reads nothing of X however many cells it has. */
    int rc = 0;
    if (rc == 0) {
        char what[512];
        snprintf(what, sizeof what, "indices of %s", e->path);
        rc = zm__array_check_values(e->indices, 0, (int64_t)minor, what);
    }
    return rc;
}

static int check(zm_source *source, zm_element *e, uint64_t raw_vars, zm_err *err)
{
    /* Both dimensions an element runs along (a layer or obsp entry too
     * has two: one of fewer dimensions is not a matrix of the file's). */
    for (int d = 0; d < 2; d++) {
        uint64_t want = axis_length(source, e->axes[d], raw_vars);
        if (want == UINT64_MAX || e->kind == ZM_ELEMENT_DICT)
            continue;
        if (e->rank <= (unsigned)d && d > 0)
            return zm_err_set(err, -EINVAL, "%s: %u-d, but its dimension %d must run along the %" PRIu64
                              " %s", e->path, e->rank, d, want, axis_name(e->axes[d]));
        if (e->rank <= (unsigned)d || e->shape[d] != want)
            return zm_err_set(err, -EINVAL, "%s: %" PRIu64 " along dimension %d, but there are %" PRIu64
                              " %s", e->path, e->rank > (unsigned)d ? e->shape[d] : 0, d, want,
                              axis_name(e->axes[d]));
    }
    int rc = 0;
    switch (e->kind) {
    case ZM_ELEMENT_SPARSE:
        rc = zm__validate_sparse(e, err);
        break;
    case ZM_ELEMENT_CATEGORICAL: {
        /* Whichever encoding made it (a group, anndata 0.7's referenced
         * categories, a legacy compound member): integer codes, 1-d
         * categories. */
        const zm_array_info *codes = zm_array_describe(e->values);
        if (codes->rank != 1 ||
            (codes->dtype.type_class != ZM_TYPE_INT && codes->dtype.type_class != ZM_TYPE_UINT))
            return zm_err_set(err, -EINVAL, "%s: categorical codes must be 1-d integers (they are "
                              "%u-d %s)", e->path, codes->rank, zm_dtype_name(codes->dtype));
        if (e->categories->rank != 1)
            return zm_err_set(err, -EINVAL, "%s: categories must be 1-d (they are %u-d)", e->path,
                              e->categories->rank);
        char what[512];
        snprintf(what, sizeof what, "codes of %s", e->path);
        rc = zm__array_check_values(e->values, -1, (int64_t)e->categories->shape[0], what);
        break;
    }
    case ZM_ELEMENT_DATAFRAME:
        if (zm__element_name_index(e) != 0)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        for (size_t i = 0; rc == 0 && i < e->child_count; i++)
            if (e->children[i]->shape[0] != e->shape[0])
                rc = zm_err_set(err, -EINVAL, "%s: %" PRIu64 " values, but its dataframe has %" PRIu64
                                " rows", e->children[i]->path, e->children[i]->shape[0], e->shape[0]);
        break;
    default:
        break;
    }
    for (size_t i = 0; rc == 0 && i < e->child_count; i++)
        rc = check(source, e->children[i], raw_vars, err);
    if (rc == 0 && e->kind == ZM_ELEMENT_DATAFRAME && e->index)
        rc = check(source, e->index, raw_vars, err);
    return rc;
}

/* What each array claims against what the file stores, before anything is
 * sized from a claim: the cell and gene counts come from the axes' indexes,
 * which must be stored whole; any other array may leave chunks unwritten
 * (HDF5 gives their fill value), within bounds (zm__h5_check_stored). */
static int check_stored(zm_source *source, zm_err *err)
{
    static const char *const axes[] = {"obs", "var", "raw/var"};
    int rc = 0;
    zm__hdf5_lock();
    for (size_t i = 0; rc == 0 && i < sizeof axes / sizeof axes[0]; i++) {
        const zm_element *df = zm_source_find(source, axes[i]);
        if (df && df->kind == ZM_ELEMENT_DATAFRAME && df->index && df->index->values)
            rc = zm__h5_check_stored(source, df->index->values, 1, err);
    }
    for (size_t i = 0; rc == 0 && i < source->array_count; i++)
        rc = zm__h5_check_stored(source, source->arrays[i], 0, err);
    zm__hdf5_unlock();
    return rc;
}

int zm__validate(zm_source *source, zm_err *err)
{
    int rc = check_stored(source, err);
    if (rc != 0)
        return rc;
    const zm_element *raw_var = zm_source_find(source, "raw/var");
    uint64_t raw_vars = raw_var ? raw_var->shape[0] : UINT64_MAX;
    const zm_element *raw_x = zm_source_find(source, "raw/X");
    if (raw_x && !raw_var)
        raw_vars = raw_x->rank == 2 ? raw_x->shape[1] : 0;
    rc = check(source, source->root, raw_vars, err);
    /* The model is complete: its children are ordered by name for lookups. */
    if (rc == 0 && zm__element_index(source->root) != 0)
        rc = zm_err_set(err, -ENOMEM, "out of memory indexing the elements");
    return rc;
}
