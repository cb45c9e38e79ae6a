/* AnnData: every encoding anndata has written, in an HDF5 file (.h5ad,
 * MuData's modalities) or a Zarr store, read into the model through the
 * container's calls (container.h).
 *
 *  - anndata ≥ 0.8: encoding-type / encoding-version attributes everywhere.
 *  - anndata 0.7: dataframes as groups (encoding-type dataframe 0.1.0), a
 *    categorical column as integer codes whose "categories" attribute is an
 *    object reference to __categories/<column>; no attributes on the root.
 *  - anndata < 0.7: obs and var as compound datasets, categories in
 *    uns/<column>_categories, sparse matrices as groups with h5sparse_format
 *    and h5sparse_shape, raw as raw.X / raw.var / raw.varm, obsm and varm as
 *    compound datasets with one array member per key.
 * Zarr stores hold the same encodings from 0.7 on (anndata's zarr writer
 * came with 0.7), and the legacy structured arrays of older ones. The whole
 * read runs with the HDF5 lock held: an HDF5 container's calls need it, a
 * Zarr store's do not mind it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/container.h"
#include "source/formats.h"
#include "source/source_internal.h"

typedef struct reader {
    zm_source *source;
    const zm__container *c;
    zm_err *err;
    const char *base; /* the AnnData's group: "" (the file's root) or "/mod/NAME" */
    /* Every group read, by its identity in the file, with the path it was
     * read at: a group is read once, however many links lead to it. */
    zm__set groups;
} reader;

/* Levels below the root: "/uns/a" is 2. */
static unsigned depth_of(const char *h5path)
{
    unsigned depth = 0;
    for (const char *c = h5path; *c; c++)
        depth += *c == '/' && c[1] != '\0';
    return depth;
}

/* Whether the group at h5path is read here: 1 if so (it is remembered), 0
 * if it was read already (recorded as skipped, naming where), -ENOMEM. */
static int first_visit(reader *r, const char *h5path)
{
    int type;
    zm__h5_object_id id;
    if (r->c->ops->identify(r->c, h5path, &type, &id) != 0)
        return 1; /* what it is not is said where it is read */
    const char *first = NULL;
    int rc = zm__set_add(&r->groups, id.bytes, sizeof id.bytes, h5path, &first);
    if (rc < 0)
        return zm_err_set(r->err, -ENOMEM, "out of memory reading %s", h5path);
    if (rc == 0)
        return 1;
    char why[ZM__PATH_BUFFER + 64];
    snprintf(why, sizeof why, "a second link to %s: read once there", first);
    zm__source_skip(r->source, h5path, why);
    return 0;
}

static int fail_oom(reader *r, const char *what)
{
    return zm_err_set(r->err, -ENOMEM, "out of memory reading %s", what);
}

/* An array element from a dataset (or a member of a compound dataset). */
static int dataset_element(reader *r, const char *h5path, const char *field, const char *parent,
                           const char *name, zm_element **out)
{
    *out = NULL;
    zm_array *array;
    int rc = r->c->ops->array_open(r->source, r->c, h5path, field, &array, r->err);
    if (rc != 0)
        return rc;
    const zm_array_info *info = zm_array_describe(array);
    int string = info->dtype.type_class == ZM_TYPE_STRING;
    zm_element_kind kind = info->rank == 0 ? ZM_ELEMENT_SCALAR
                           : string        ? ZM_ELEMENT_STRING_ARRAY
                                           : ZM_ELEMENT_ARRAY;
    zm_element *e = zm__element_new(kind, parent, name);
    if (e == NULL)
        return fail_oom(r, h5path);
    e->values = array;
    zm__element_shape_from(e, array);
    if (kind == ZM_ELEMENT_SCALAR)
        zm__element_set_encoding(e, string ? "string" : "numeric-scalar", "0.2.0");
    else
        zm__element_set_encoding(e, string ? "string-array" : "array", "0.2.0");
    *out = e;
    return 0;
}

static int read_any(reader *r, const char *h5path, const char *parent, const char *name,
                    zm_element **out);

/* A sparse matrix group: data, indices, indptr and its shape. */
static int sparse_element(reader *r, const char *h5path, const char *parent, const char *name,
                          int csc, const char *shape_attribute, zm_element **out)
{
    *out = NULL;
    int64_t *shape = NULL;
    size_t shape_count = 0;
    if (r->c->ops->attribute_integers(r->c, h5path, shape_attribute, &shape, &shape_count) != 0 ||
        shape_count != 2 || shape[0] < 0 || shape[1] < 0) {
        free(shape);
        return zm_err_set(r->err, -EINVAL, "%s: a sparse matrix without a valid \"%s\" attribute",
                          h5path, shape_attribute);
    }
    zm_element *e = zm__element_new(ZM_ELEMENT_SPARSE, parent, name);
    if (e == NULL) {
        free(shape);
        return fail_oom(r, h5path);
    }
    e->sparse_format = csc ? ZM_SPARSE_CSC : ZM_SPARSE_CSR;
    e->rank = 2;
    e->shape[0] = (uint64_t)shape[0];
    e->shape[1] = (uint64_t)shape[1];
    free(shape);
    zm__element_set_encoding(e, csc ? "csc_matrix" : "csr_matrix", "0.1.0");
    static const char *const parts[] = {"data", "indices", "indptr"};
    zm_array **targets[] = {&e->values, &e->indices, &e->indptr};
    for (int i = 0; i < 3; i++) {
        char path[ZM__PATH_BUFFER];
        snprintf(path, sizeof path, "%s/%s", h5path, parts[i]);
        if (r->c->ops->node_type(r->c, path) != ZM__NODE_ARRAY) {
            zm__element_free(e);
            return zm_err_set(r->err, -EINVAL, "%s: a sparse matrix without %s", h5path, parts[i]);
        }
        int rc = r->c->ops->array_open(r->source, r->c, path, NULL, targets[i], r->err);
        if (rc != 0) {
            zm__element_free(e);
            return rc;
        }
        const zm_array_info *info = zm_array_describe(*targets[i]);
        if (info->rank != 1 || (i > 0 && info->dtype.type_class != ZM_TYPE_INT &&
                                info->dtype.type_class != ZM_TYPE_UINT) ||
            info->dtype.type_class == ZM_TYPE_STRING) {
            zm__element_free(e);
            return zm_err_set(r->err, -EINVAL, "%s: %s must be a 1-d %s array", h5path, parts[i],
                              i > 0 ? "integer" : "numeric");
        }
    }
    *out = e;
    return 0;
}

/* A categorical: codes and categories (an element of their own). */
static zm_element *categorical_from(reader *r, zm_element *codes, zm_element *categories,
                                    int ordered)
{
    (void)r;
    zm_element *e = zm__element_new(ZM_ELEMENT_CATEGORICAL, "", "");
    if (e == NULL)
        return NULL;
    free(e->name);
    free(e->path);
    e->name = codes->name;
    e->path = codes->path;
    codes->name = NULL;
    codes->path = NULL;
    e->values = codes->values;
    e->rank = codes->rank;
    memcpy(e->shape, codes->shape, sizeof e->shape);
    zm__element_free(codes);
    free(categories->name);
    free(categories->path);
    categories->name = strdup("categories");
    size_t n = strlen(e->path) + 12;
    categories->path = malloc(n);
    if (categories->path)
        snprintf(categories->path, n, "%s/categories", e->path);
    e->categories = categories;
    if (categories->stored_as == NULL)
        zm__element_set_stored_as(categories, "the categories");
    e->ordered = ordered;
    zm__element_set_encoding(e, "categorical", "0.2.0");
    return e;
}

static int categorical_group(reader *r, const char *h5path, const char *parent, const char *name,
                             zm_element **out)
{
    *out = NULL;
    char codes_path[ZM__PATH_BUFFER], categories_path[ZM__PATH_BUFFER];
    snprintf(codes_path, sizeof codes_path, "%s/codes", h5path);
    snprintf(categories_path, sizeof categories_path, "%s/categories", h5path);
    zm_element *codes = NULL, *categories = NULL;
    int rc = dataset_element(r, codes_path, NULL, parent, name, &codes);
    if (rc == 0)
        rc = dataset_element(r, categories_path, NULL, parent, "categories", &categories);
    int ordered = 0;
    r->c->ops->attribute_bool(r->c, h5path, "ordered", &ordered);
    if (rc == 0 && (codes->kind != ZM_ELEMENT_ARRAY || codes->rank != 1 ||
                    (zm_array_describe(codes->values)->dtype.type_class != ZM_TYPE_INT &&
                     zm_array_describe(codes->values)->dtype.type_class != ZM_TYPE_UINT)))
        rc = zm_err_set(r->err, -EINVAL, "%s: categorical codes must be 1-d integers", h5path);
    if (rc == 0 && categories->rank != 1)
        rc = zm_err_set(r->err, -EINVAL, "%s: categories must be 1-d", h5path);
    if (rc != 0) {
        zm__element_free(codes);
        zm__element_free(categories);
        return rc;
    }
    *out = categorical_from(r, codes, categories, ordered);
    if (*out == NULL)
        return fail_oom(r, h5path);
    zm__element_set_stored_as(*out, "categorical group (codes, categories)");
    return 0;
}

/* A nullable group: values and a bool mask (1 = missing): integers (kind
 * 0), booleans (1) or strings (2, anndata 0.11's nullable-string-array,
 * with its na-value attribute). */
static int nullable_group(reader *r, const char *h5path, const char *parent, const char *name,
                          int kind, zm_element **out)
{
    *out = NULL;
    zm_element *e = zm__element_new(ZM_ELEMENT_NULLABLE, parent, name);
    if (e == NULL)
        return fail_oom(r, h5path);
    char path[ZM__PATH_BUFFER];
    snprintf(path, sizeof path, "%s/values", h5path);
    int rc = r->c->ops->array_open(r->source, r->c, path, NULL, &e->values, r->err);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/mask", h5path);
        rc = r->c->ops->array_open(r->source, r->c, path, NULL, &e->mask, r->err);
    }
    if (rc == 0 && (zm_array_describe(e->values)->rank != 1 || zm_array_describe(e->mask)->rank != 1 ||
                    zm_array_describe(e->mask)->dtype.type_class != ZM_TYPE_BOOL ||
                    zm_array_describe(e->mask)->shape[0] != zm_array_describe(e->values)->shape[0]))
        rc = zm_err_set(r->err, -EINVAL, "%s: a nullable array needs 1-d values and a bool mask of "
                        "the same length", h5path);
    int strings = rc == 0 && zm_array_describe(e->values)->dtype.type_class == ZM_TYPE_STRING;
    if (rc == 0 && strings != (kind == 2))
        rc = zm_err_set(r->err, -EINVAL, "%s: a %s array's values must be %s", h5path,
                        kind == 2 ? "nullable-string" : "nullable", kind == 2 ? "strings" : "numbers");
    if (rc == 0 && kind == 2 &&
        r->c->ops->attribute_string(r->c, h5path, "na-value", &e->na_value) == 0 &&
        strcmp(e->na_value, "NA") != 0 && strcmp(e->na_value, "NaN") != 0) {
        /* anndata writes "NA" (pd.NA) or "NaN" (np.nan): another is no reader's. */
        free(e->na_value);
        e->na_value = NULL;
        zm__source_skip(r->source, h5path, "its na-value attribute is neither NA nor NaN: served "
                                           "without it (readers take NA)");
    }
    if (rc != 0) {
        zm__element_free(e);
        return rc;
    }
    e->nullable_boolean = kind == 1;
    e->nullable_string = kind == 2;
    zm__element_shape_from(e, e->values);
    zm__element_set_encoding(e, kind == 1   ? "nullable-boolean"
                                : kind == 2 ? "nullable-string-array"
                                            : "nullable-integer",
                             "0.1.0");
    zm__element_set_stored_as(e, "%s group (values, mask)", e->encoding_type);
    *out = e;
    return 0;
}

/* anndata 0.7: a codes dataset whose "categories" attribute references the
 * categories dataset. Turns the column into a categorical if so. */
static int maybe_referenced_categories(reader *r, const char *h5path, zm_element **column)
{
    if (!r->c->ops->has_attribute(r->c, h5path, "categories"))
        return 0;
    char *target = NULL;
    if (r->c->ops->attribute_reference(r->c, h5path, "categories", &target) != 0)
        return zm_err_set(r->err, -EINVAL, "%s: its \"categories\" attribute is not a reference",
                          h5path);
    zm_element *categories = NULL;
    int rc = dataset_element(r, target, NULL, "", "categories", &categories);
    /* anndata 0.7 keeps "ordered" on the categories dataset. */
    int ordered = 0;
    if (r->c->ops->attribute_bool(r->c, target, "ordered", &ordered) != 0)
        r->c->ops->attribute_bool(r->c, h5path, "ordered", &ordered);
    free(target);
    if (rc != 0)
        return rc;
    zm_element *e = categorical_from(r, *column, categories, ordered);
    if (e == NULL)
        return fail_oom(r, h5path);
    zm__element_set_stored_as(e, "anndata 0.7 codes with a reference to __categories");
    *column = e;
    return 0;
}

/* A dataframe group (anndata ≥ 0.7). */
static int dataframe_group(reader *r, const char *h5path, const char *parent, const char *name,
                           zm_element **out)
{
    *out = NULL;
    zm_element *df = zm__element_new(ZM_ELEMENT_DATAFRAME, parent, name);
    if (df == NULL)
        return fail_oom(r, h5path);
    zm__element_set_encoding(df, "dataframe", "0.2.0");
    char *index_name = NULL;
    int rc = 0;
    if (r->c->ops->attribute_string(r->c, h5path, "_index", &index_name) != 0) {
        zm__element_free(df);
        return zm_err_set(r->err, -EINVAL, "%s: a dataframe without an \"_index\" attribute", h5path);
    }
    df->index_name = index_name;
    char path[ZM__PATH_BUFFER];
    size_t index_length = strlen(index_name);
    if (index_length == 0 || index_length > ZM_ELEMENT_NAME_MAX || strchr(index_name, '/')) {
        char shown[96];
        zm__shown_name(index_name, index_length, shown, sizeof shown);
        zm__element_free(df);
        return zm_err_set(r->err, -EINVAL,
                          "%s: its index name \"%s\" cannot name an element "
                          "(empty, holding '/', or longer than 255 bytes)",
                          h5path, shown);
    }
    snprintf(path, sizeof path, "%s/%s", h5path, index_name);
    if (r->c->ops->node_type(r->c, path) != ZM__NODE_ARRAY)
        rc = zm_err_set(r->err, -EINVAL, "%s: its index %s is missing", h5path, index_name);
    if (rc == 0)
        rc = dataset_element(r, path, NULL, df->path, index_name, &df->index);
    if (rc == 0 && df->index->rank != 1)
        rc = zm_err_set(r->err, -EINVAL, "%s: its index must be 1-d", h5path);
    zm_strings columns = {0};
    if (rc == 0 && r->c->ops->attribute_strings(r->c, h5path, "column-order", &columns) != 0)
        columns.count = 0;
    /* The names taken (a set: 100,000 columns are 100,000 look-ups, not
     * 5 * 10^9 comparisons). */
    zm__set taken = {0};
    for (size_t i = 0; rc == 0 && i < columns.count; i++) {
        char column[ZM_ELEMENT_NAME_MAX + 1];
        if (zm__child_at(r->source, h5path, &columns, i, column, path) != 0)
            continue;
        zm_element *c = NULL;
        if (!(r->c->ops->node_type(r->c, path) != ZM__NODE_NONE)) {
            rc = zm_err_set(r->err, -EINVAL, "%s: column %s is listed but missing", h5path, column);
            break;
        }
        /* Listed twice: one column (a store holds each name once). */
        int repeated = zm__set_add(&taken, column, strlen(column), NULL, NULL);
        if (repeated < 0) {
            rc = fail_oom(r, h5path);
            break;
        }
        if (repeated) {
            zm__source_skip(r->source, path, "listed more than once in column-order: served once");
            continue;
        }
        rc = read_any(r, path, df->path, column, &c);
        if (rc == 0 && c == NULL)
            continue; /* skipped, with its reason recorded */
        if (rc == 0 && (c->kind == ZM_ELEMENT_DICT || c->kind == ZM_ELEMENT_SPARSE ||
                        c->kind == ZM_ELEMENT_DATAFRAME || c->rank != 1))
            rc = zm_err_set(r->err, -EINVAL, "%s: column %s is not a 1-d column", h5path, column);
        if (rc == 0 && zm__element_add_child(df, c) != 0)
            rc = fail_oom(r, h5path);
        if (rc != 0)
            zm__element_free(c);
    }
    zm_strings_free(&columns);
    zm__set_free(&taken);
    if (rc != 0) {
        zm__element_free(df);
        return rc;
    }
    df->rank = 1;
    df->shape[0] = df->index->shape[0];
    char *version = NULL;
    r->c->ops->attribute_string(r->c, h5path, "encoding-version", &version);
    zm__element_set_stored_as(df, "dataframe group %s", version ? version : "");
    free(version);
    *out = df;
    return 0;
}

/* Reads a group's children into a dict element. */
static int dict_group(reader *r, const char *h5path, const char *parent, const char *name,
                      zm_element **out)
{
    *out = NULL;
    zm_element *dict = zm__element_new(ZM_ELEMENT_DICT, parent, name);
    if (dict == NULL)
        return fail_oom(r, h5path);
    zm__element_set_encoding(dict, "dict", "0.1.0");
    zm_strings names;
    int rc = r->c->ops->list(r->c, h5path, &names);
    if (rc != 0) {
        zm__element_free(dict);
        return zm_err_set(r->err, -EIO, "%s: cannot list the group", h5path);
    }
    for (size_t i = 0; rc == 0 && i < names.count; i++) {
        char child[ZM_ELEMENT_NAME_MAX + 1], path[ZM__PATH_BUFFER];
        if (zm__child_at(r->source, h5path, &names, i, child, path) != 0)
            continue;
        zm_element *c = NULL;
        rc = read_any(r, path, dict->path, child, &c);
        if (rc == 0 && c != NULL && zm__element_add_child(dict, c) != 0) {
            zm__element_free(c);
            rc = fail_oom(r, h5path);
        }
    }
    zm_strings_free(&names);
    if (rc != 0) {
        zm__element_free(dict);
        return rc;
    }
    *out = dict;
    return 0;
}

/* A structured (compound) array, anndata's rec-array: one array per field. */
static int records_dataset(reader *r, const char *h5path, const char *parent, const char *name,
                           zm_element **out)
{
    *out = NULL;
    zm_strings members;
    if (r->c->ops->fields(r->c, h5path, &members) != 0)
        return zm_err_set(r->err, -EINVAL, "%s: cannot read its structure", h5path);
    zm_element *e = zm__element_new(ZM_ELEMENT_RECORDS, parent, name);
    int rc = e ? 0 : fail_oom(r, h5path);
    for (size_t i = 0; rc == 0 && i < members.count; i++) {
        char member[ZM_ELEMENT_NAME_MAX + 1];
        if (zm__member_at(r->source, h5path, &members, i, member) != 0)
            continue;
        zm_element *c = NULL;
        rc = dataset_element(r, h5path, member, e->path, member, &c);
        if (rc == 0 && (c->rank != 1 || zm__element_add_child(e, c) != 0)) {
            rc = c->rank != 1 ? zm_err_set(r->err, -ENOTSUP, "%s: field %s is not 1-d", h5path, member)
                              : fail_oom(r, h5path);
            zm__element_free(c);
        }
    }
    zm_strings_free(&members);
    if (rc == -ENOTSUP) {
        zm__source_skip(r->source, h5path, r->err->reason);
        zm_err_clear(r->err);
        zm__element_free(e);
        return 0;
    }
    if (rc != 0) {
        zm__element_free(e);
        return rc;
    }
    e->rank = 1;
    e->shape[0] = e->child_count ? e->children[0]->shape[0] : 0;
    zm__element_set_encoding(e, "rec-array", "0.2.0");
    zm__element_set_stored_as(e, "compound dataset");
    *out = e;
    return 0;
}

/* Before anndata 0.7 a string was written as a one-element array of
 * fixed-length bytes; anndata reads that back as a str scalar. */
static void legacy_string_scalar(zm_element *e)
{
    if (e->kind != ZM_ELEMENT_STRING_ARRAY || e->rank != 1 || e->shape[0] != 1 ||
        e->values->vlen_string)
        return;
    e->kind = ZM_ELEMENT_SCALAR;
    e->rank = 0;
    zm__element_set_encoding(e, "string", "0.2.0");
    zm__element_set_stored_as(e, "one-element fixed-length string array (legacy scalar)");
}

/* Any element at h5path, by its encoding attributes or its shape. *out may
 * be NULL on success: an element the model leaves out (recorded). */
static int read_any(reader *r, const char *h5path, const char *parent, const char *name,
                    zm_element **out)
{
    *out = NULL;
    int type = r->c->ops->node_type(r->c, h5path);
    /* Bounded whatever the file holds: no path beyond what a mount holds
     * (never cut short), no nesting beyond ZM_ELEMENT_DEPTH_MAX, each group
     * read once (a cycle, through soft or hard links, is a second link). */
    if (strlen(h5path) > ZM_ELEMENT_PATH_MAX) {
        zm__source_skip(r->source, h5path, "its path is longer than 767 bytes");
        return 0;
    }
    if (depth_of(h5path) > ZM_ELEMENT_DEPTH_MAX) {
        zm__source_skip(r->source, h5path, "nested more than 64 levels below the root");
        return 0;
    }
    if (type == ZM__NODE_GROUP) {
        int first = first_visit(r, h5path);
        if (first <= 0)
            return first;
    }
    char *encoding = NULL;
    r->c->ops->attribute_string(r->c, h5path, "encoding-type", &encoding);
    int rc = 0;
    if (type == ZM__NODE_GROUP) {
        char *sparse = NULL;
        if (encoding && (strcmp(encoding, "csr_matrix") == 0 || strcmp(encoding, "csc_matrix") == 0))
            rc = sparse_element(r, h5path, parent, name, encoding[2] == 'c', "shape", out);
        else if (r->c->ops->attribute_string(r->c, h5path, "h5sparse_format", &sparse) == 0) {
            int csc = strcmp(sparse, "csc") == 0;
            if (!csc && strcmp(sparse, "csr") != 0)
                rc = zm_err_set(r->err, -EINVAL, "%s: h5sparse_format \"%s\" is neither csr nor csc",
                                h5path, sparse);
            else if ((rc = sparse_element(r, h5path, parent, name, csc, "h5sparse_shape", out)) == 0)
                zm__element_set_stored_as(*out, "legacy h5sparse group");
            free(sparse);
        } else if (encoding && strcmp(encoding, "dataframe") == 0)
            rc = dataframe_group(r, h5path, parent, name, out);
        else if (encoding && strcmp(encoding, "categorical") == 0)
            rc = categorical_group(r, h5path, parent, name, out);
        else if (encoding && strcmp(encoding, "nullable-integer") == 0)
            rc = nullable_group(r, h5path, parent, name, 0, out);
        else if (encoding && strcmp(encoding, "nullable-boolean") == 0)
            rc = nullable_group(r, h5path, parent, name, 1, out);
        else if (encoding && strcmp(encoding, "nullable-string-array") == 0)
            rc = nullable_group(r, h5path, parent, name, 2, out);
        else if (!encoding || strcmp(encoding, "dict") == 0 || strcmp(encoding, "raw") == 0 ||
                 strcmp(encoding, "anndata") == 0)
            rc = dict_group(r, h5path, parent, name, out);
        else {
            char why[256];
            snprintf(why, sizeof why, "encoding \"%s\" is not supported", encoding);
            zm__source_skip(r->source, h5path, why);
        }
        if (rc == 0 && *out && (*out)->stored_as == NULL)
            zm__element_set_stored_as(*out, "group, encoding %s", encoding ? encoding : "none");
    } else if (type == ZM__NODE_ARRAY) {
        /* Described as an array first: one open of the dataset, not two,
         * for all but the types the array reader does not take. */
        rc = dataset_element(r, h5path, NULL, parent, name, out);
        int records = 0;
        if (rc == -ENOTSUP) {
            int values = r->c->ops->values(r->c, h5path);
            records = values == ZM__VALUES_RECORDS;
            if (!records)
                zm__source_skip(r->source, h5path,
                                values == ZM__VALUES_REFERENCE
                                    ? "an array of object references is not supported"
                                    : r->err->reason);
            zm_err_clear(r->err);
            rc = records ? records_dataset(r, h5path, parent, name, out) : 0;
        }
        if (!records) {
            if (rc == 0 && *out)
                rc = maybe_referenced_categories(r, h5path, out);
            if (rc == 0 && *out && !encoding)
                legacy_string_scalar(*out);
            if (rc == 0 && *out && (*out)->stored_as == NULL)
                zm__element_set_stored_as(*out, "dataset%s%s", encoding ? ", encoding " : "",
                                          encoding ? encoding : "");
        }
    } else {
        char why[ZM_REASON_MAX];
        zm__source_skip(r->source, h5path,
                        r->c->ops->outside(r->c, h5path, why, sizeof why)
                            ? why
                            : "neither a group nor a dataset");
    }
    if (rc == ZM__OUTSIDE) {
        /* A part of it lies outside the source (the reason names which): the
         * whole element is left out, never served in part. */
        zm__source_skip(r->source, h5path, r->err->reason);
        zm_err_clear(r->err);
        zm__element_free(*out);
        *out = NULL;
        rc = 0;
    }
    free(encoding);
    return rc;
}

/* ---- Legacy (anndata < 0.7) ------------------------------------------------------- */

/* A compound dataframe: the "index" member is the index; a column whose
 * uns/<column>_categories exists is categorical. Those uns entries are used
 * up (anndata drops them from uns). */
static int legacy_dataframe(reader *r, const char *h5path, const char *parent, const char *name,
                            zm_strings *used_categories, zm_element **out)
{
    *out = NULL;
    zm_strings members;
    if (r->c->ops->fields(r->c, h5path, &members) != 0)
        return zm_err_set(r->err, -EINVAL, "%s: a legacy dataframe must be a compound dataset", h5path);
    zm_element *df = zm__element_new(ZM_ELEMENT_DATAFRAME, parent, name);
    if (df == NULL) {
        zm_strings_free(&members);
        return fail_oom(r, h5path);
    }
    zm__element_set_encoding(df, "dataframe", "0.2.0");
    zm__element_set_stored_as(df, "legacy compound dataset");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < members.count; i++) {
        char member[ZM_ELEMENT_NAME_MAX + 1];
        if (zm__member_at(r->source, h5path, &members, i, member) != 0)
            continue;
        int is_index = strcmp(member, "index") == 0 || strcmp(member, "_index") == 0;
        zm_element *c = NULL;
        rc = dataset_element(r, h5path, member, df->path, member, &c);
        if (rc != 0)
            break;
        zm__element_set_stored_as(c, "legacy compound member");
        if (is_index && df->index == NULL) {
            df->index = c;
            df->index_name = strdup(member);
            continue;
        }
        char categories_path[ZM__PATH_BUFFER];
        snprintf(categories_path, sizeof categories_path, "%s/uns/%s_categories", r->base, member);
        if (r->c->ops->node_type(r->c, categories_path) == ZM__NODE_ARRAY &&
            c->kind == ZM_ELEMENT_ARRAY) {
            zm_element *categories = NULL;
            rc = dataset_element(r, categories_path, NULL, "", "categories", &categories);
            if (rc != 0) {
                zm__element_free(c); /* the column: not in the dataframe yet */
                break;
            }
            if (rc == 0) {
                zm_element *cat = categorical_from(r, c, categories, 0);
                if (cat == NULL) {
                    rc = fail_oom(r, h5path);
                    break;
                }
                zm__element_set_stored_as(cat, "legacy compound member, categories in uns/%s_categories",
                                          member);
                c = cat;
                /* Remember the uns entry as used. */
                size_t n = strlen(member) + 11;
                char *used = realloc(used_categories->bytes,
                                     (used_categories->count ? used_categories->offsets[used_categories->count] : 0) + n + 1);
                uint64_t *offsets = realloc(used_categories->offsets,
                                            (used_categories->count + 2) * sizeof *offsets);
                if (used == NULL || offsets == NULL) {
                    free(used);
                    rc = fail_oom(r, h5path);
                    break;
                }
                used_categories->bytes = used;
                used_categories->offsets = offsets;
                if (used_categories->count == 0)
                    used_categories->offsets[0] = 0;
                uint64_t at = used_categories->offsets[used_categories->count];
                snprintf(used + at, n + 1, "%s_categories", member);
                used_categories->offsets[++used_categories->count] = at + strlen(used + at);
            }
        }
        if (rc == 0 && zm__element_add_child(df, c) != 0) {
            zm__element_free(c);
            rc = fail_oom(r, h5path);
        }
    }
    zm_strings_free(&members);
    if (rc == 0 && df->index == NULL)
        rc = zm_err_set(r->err, -EINVAL, "%s: a legacy dataframe without an index member", h5path);
    if (rc != 0) {
        zm__element_free(df);
        return rc;
    }
    df->rank = 1;
    df->shape[0] = df->index->shape[0];
    *out = df;
    return 0;
}

/* Legacy obsm/varm: one compound dataset, one (n, k) member per key. */
static int legacy_mapping(reader *r, const char *h5path, const char *parent, const char *name,
                          zm_element **out)
{
    *out = NULL;
    zm_strings members;
    if (r->c->ops->fields(r->c, h5path, &members) != 0)
        return zm_err_set(r->err, -EINVAL, "%s: expected a compound dataset", h5path);
    zm_element *dict = zm__element_new(ZM_ELEMENT_DICT, parent, name);
    int rc = dict ? 0 : fail_oom(r, h5path);
    if (dict) {
        zm__element_set_encoding(dict, "dict", "0.1.0");
        zm__element_set_stored_as(dict, "legacy compound dataset");
    }
    for (size_t i = 0; rc == 0 && i < members.count; i++) {
        char member[ZM_ELEMENT_NAME_MAX + 1];
        if (zm__member_at(r->source, h5path, &members, i, member) != 0)
            continue;
        zm_element *c = NULL;
        rc = dataset_element(r, h5path, member, dict->path, member, &c);
        if (rc == 0) {
            zm__element_set_stored_as(c, "legacy compound member");
            if (zm__element_add_child(dict, c) != 0) {
                zm__element_free(c);
                rc = fail_oom(r, h5path);
            }
        }
    }
    zm_strings_free(&members);
    if (rc != 0) {
        zm__element_free(dict);
        return rc;
    }
    *out = dict;
    return 0;
}

static int is_compound(reader *r, const char *h5path)
{
    return r->c->ops->node_type(r->c, h5path) == ZM__NODE_ARRAY &&
           r->c->ops->values(r->c, h5path) == ZM__VALUES_RECORDS;
}

/* A top-level part: obs/var (dataframes), obsm/varm (dicts or legacy
 * compounds), anything else by its encoding. */
static int read_part(reader *r, const char *h5path, const char *parent, const char *name,
                     int dataframe, int mapping, zm_strings *used_categories, zm_element **out)
{
    *out = NULL;
    if (!(r->c->ops->node_type(r->c, h5path) != ZM__NODE_NONE)) {
        char why[ZM_REASON_MAX]; /* "/raw/X" behind an external link /raw */
        if (r->c->ops->outside(r->c, h5path, why, sizeof why))
            zm__source_skip(r->source, h5path, why);
        return 0;
    }
    if (dataframe && is_compound(r, h5path))
        return legacy_dataframe(r, h5path, parent, name, used_categories, out);
    if (mapping && is_compound(r, h5path))
        return legacy_mapping(r, h5path, parent, name, out);
    return read_any(r, h5path, parent, name, out);
}

static int add(reader *r, zm_element *parent, zm_element *child)
{
    if (child == NULL)
        return 0;
    if (zm__element_add_child(parent, child) != 0) {
        zm__element_free(child);
        return fail_oom(r, parent->path);
    }
    return 0;
}

/* Drops the uns entries a legacy categorical used: one pass over uns with
 * the used names in a set. */
static int drop_used_categories(reader *r, zm_element *uns, const zm_strings *used)
{
    if (uns == NULL || used->count == 0)
        return 0;
    zm__set names = {0};
    int rc = 0;
    for (size_t u = 0; rc == 0 && u < used->count; u++) {
        size_t n = used->offsets[u + 1] - used->offsets[u];
        if (zm__set_add(&names, used->bytes + used->offsets[u], n, NULL, NULL) < 0)
            rc = -ENOMEM;
    }
    size_t kept = 0;
    for (size_t i = 0; rc == 0 && i < uns->child_count; i++) {
        zm_element *c = uns->children[i];
        if (zm__set_find(&names, c->name, strlen(c->name)))
            zm__element_free(c);
        else
            uns->children[kept++] = c;
    }
    if (rc == 0)
        uns->child_count = kept;
    zm__set_free(&names);
    return rc == 0 ? 0 : fail_oom(r, "uns");
}

static zm_element *child_named(zm_element *e, const char *name)
{
    for (size_t i = 0; e && i < e->child_count; i++)
        if (strcmp(e->children[i]->name, name) == 0)
            return e->children[i];
    return NULL;
}

/* anndata moves uns/neighbors/{distances, connectivities} (2-d matrices,
 * written there before obsp existed) to obsp when it reads a file. */
static int move_neighbors_matrices(reader *r, zm_element *root)
{
    zm_element *neighbors = child_named(child_named(root, "uns"), "neighbors");
    static const char *const names[] = {"distances", "connectivities"};
    for (int i = 0; neighbors && i < 2; i++) {
        zm_element *m = child_named(neighbors, names[i]);
        if (m == NULL || !(m->kind == ZM_ELEMENT_SPARSE || (m->kind == ZM_ELEMENT_ARRAY && m->rank == 2)))
            continue;
        zm_element *obsp = child_named(root, "obsp");
        if (obsp == NULL) {
            obsp = zm__element_new(ZM_ELEMENT_DICT, "", "obsp");
            if (obsp == NULL || add(r, root, obsp) != 0)
                return fail_oom(r, "obsp");
            zm__element_set_encoding(obsp, "dict", "0.1.0");
            zm__element_set_stored_as(obsp, "made by the reader for uns/neighbors matrices");
        }
        zm__element_take_child(neighbors, names[i]);
        zm__element_free(zm__element_take_child(obsp, names[i]));
        if (zm__element_repath(m, "obsp") != 0 || add(r, obsp, m) != 0)
            return fail_oom(r, "obsp");
        zm__set_axes(m, ZM_AXIS_OBS, ZM_AXIS_OBS);
        zm__element_set_stored_as(m, "uns/neighbors/%s (moved to obsp, as anndata does)", names[i]);
    }
    return 0;
}

/* The names an AnnData's group holds that anndata reads (legacy ones too),
 * and MuData's own at its root: any other is listed as skipped. */
static int known_root_name(const char *name, int mudata)
{
    static const char *const names[] = {"obs",   "var",   "X",     "layers", "obsm",  "varm",
                                        "obsp",  "varp",  "raw",   "raw.X",  "raw.var",
                                        "raw.varm", "uns"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return 1;
    return mudata && (!strcmp(name, "mod") || !strcmp(name, "obsmap") || !strcmp(name, "varmap"));
}

/* Every name in the group at base that is not part of the layout read:
 * listed as skipped, so that nothing of the file is left out unsaid. */
static void skip_unknown(reader *r, int mudata)
{
    const char *group = r->base[0] ? r->base : "/";
    zm_strings names;
    if (r->c->ops->list(r->c, group, &names) != 0)
        return;
    for (size_t i = 0; i < names.count; i++) {
        char name[ZM_ELEMENT_NAME_MAX + 1], path[ZM__PATH_BUFFER];
        size_t length = names.offsets[i + 1] - names.offsets[i];
        if (length > ZM_ELEMENT_NAME_MAX || memchr(names.bytes + names.offsets[i], 0, length))
            continue; /* the structure's bounds say these (hdf5.c) */
        memcpy(name, names.bytes + names.offsets[i], length);
        name[length] = '\0';
        if (known_root_name(name, mudata))
            continue;
        snprintf(path, sizeof path, "%s/%s", r->base, name);
        zm__source_skip(r->source, path,
                        mudata ? "not part of MuData's layout (mudata reads it as an extra "
                                 "element; zarrmount serves only the layout's)"
                               : "not part of AnnData's layout (anndata does not read it)");
    }
    zm_strings_free(&names);
}

int zm__read_h5ad(zm_source *source, zm_err *err)
{
    return zm__read_anndata(source, "", 0, err);
}

int zm__read_anndata(zm_source *source, const char *base, int mudata, zm_err *err)
{
    zm__container c;
    zm__h5_container(source, &c);
    return zm__read_anndata_in(source, &c, base, mudata, err);
}

int zm__read_anndata_in(zm_source *source, const zm__container *c, const char *base, int mudata,
                        zm_err *err)
{
    reader r = {source, c, err, base, {0}};
    zm__hdf5_lock();
    int rc = 0;
    zm_strings used = {0};
    zm_element *root = zm__element_new(ZM_ELEMENT_DICT, "", "");
    if (root == NULL) {
        zm__hdf5_unlock();
        return fail_oom(&r, "the root");
    }
    zm__element_set_encoding(root, "anndata", "0.1.0");
    char *version = NULL;
    const char *top = base[0] ? base : "/";
    c->ops->attribute_string(c, top, "encoding-version", &version);
    if (mudata)
        zm__element_set_stored_as(root, "MuData %s", version ? version : "without encoding attributes");
    else
        zm__element_set_stored_as(root, version ? "anndata %s"
                                                : "anndata without encoding attributes (< 0.8)",
                                  version);
    free(version);
    source->root = root;
    /* The root is read (by parts): a link back to it is a second link. */
    rc = first_visit(&r, top) < 0 ? -ENOMEM : 0;
    char path[ZM__PATH_BUFFER];

    struct {
        const char *h5path, *name;
        int dataframe, mapping;
        zm_axis first, second;
    } const parts[] = {
        {"/obs", "obs", 1, 0, ZM_AXIS_OBS, ZM_AXIS_NONE},
        {"/var", "var", 1, 0, ZM_AXIS_VAR, ZM_AXIS_NONE},
        {"/X", "X", 0, 0, ZM_AXIS_OBS, ZM_AXIS_VAR},
        {"/layers", "layers", 0, 0, ZM_AXIS_OBS, ZM_AXIS_VAR},
        {"/obsm", "obsm", 0, 1, ZM_AXIS_OBS, ZM_AXIS_NONE},
        {"/varm", "varm", 0, 1, ZM_AXIS_VAR, ZM_AXIS_NONE},
        {"/obsp", "obsp", 0, 0, ZM_AXIS_OBS, ZM_AXIS_OBS},
        {"/varp", "varp", 0, 0, ZM_AXIS_VAR, ZM_AXIS_VAR},
        /* MuData: each global cell's (gene's) row in each modality. */
        {"/obsmap", "obsmap", 0, 0, ZM_AXIS_OBS, ZM_AXIS_NONE},
        {"/varmap", "varmap", 0, 0, ZM_AXIS_VAR, ZM_AXIS_NONE},
    };
    for (size_t i = 0; rc == 0 && i < sizeof parts / sizeof parts[0]; i++) {
        zm_element *e = NULL;
        if (!mudata && (!strcmp(parts[i].name, "obsmap") || !strcmp(parts[i].name, "varmap")))
            continue;
        snprintf(path, sizeof path, "%s%s", base, parts[i].h5path);
        rc = read_part(&r, path, "", parts[i].name, parts[i].dataframe, parts[i].mapping, &used, &e);
        if (rc == 0 && e) {
            zm__set_axes(e, parts[i].first, parts[i].second);
            rc = add(&r, root, e);
        }
    }

    /* raw: a group (≥ 0.7) or raw.X / raw.var / raw.varm (< 0.7). */
    int raw_first = 1;
    char raw_group[ZM__PATH_BUFFER], raw_x[ZM__PATH_BUFFER];
    snprintf(raw_group, sizeof raw_group, "%s/raw", base);
    snprintf(raw_x, sizeof raw_x, "%s/raw.X", base);
    if (rc == 0 && c->ops->node_type(c, raw_group) == ZM__NODE_GROUP &&
        (raw_first = first_visit(&r, raw_group)) < 0)
        rc = raw_first;
    if (rc == 0 && raw_first &&
        ((c->ops->node_type(c, raw_group) != ZM__NODE_NONE) || (c->ops->node_type(c, raw_x) != ZM__NODE_NONE))) {
        zm_element *raw = zm__element_new(ZM_ELEMENT_DICT, "", "raw");
        rc = raw ? 0 : fail_oom(&r, "raw");
        if (raw) {
            zm__element_set_encoding(raw, "raw", "0.1.0");
            int legacy = !(c->ops->node_type(c, raw_group) != ZM__NODE_NONE);
            zm__element_set_stored_as(raw, legacy ? "legacy raw.X, raw.var, raw.varm" : "group");
            static const char *const names[] = {"X", "var", "varm"};
            for (int i = 0; rc == 0 && i < 3; i++) {
                snprintf(path, sizeof path, "%s%s%s", base, legacy ? "/raw." : "/raw/", names[i]);
                zm_element *e = NULL;
                rc = read_part(&r, path, "raw", names[i], i == 1, i == 2, &used, &e);
                if (rc == 0 && e) {
                    zm__set_axes(e, i == 0 ? ZM_AXIS_OBS : ZM_AXIS_RAW_VAR,
                             i == 0 ? ZM_AXIS_RAW_VAR : ZM_AXIS_NONE);
                    rc = add(&r, raw, e);
                }
            }
            if (rc == 0)
                rc = add(&r, root, raw);
            else
                zm__element_free(raw);
        }
    }

    if (rc == 0) {
        zm_element *uns = NULL;
        snprintf(path, sizeof path, "%s/uns", base);
        rc = read_part(&r, path, "", "uns", 0, 0, &used, &uns);
        if (rc == 0 && uns) {
            rc = drop_used_categories(&r, uns, &used);
            if (rc == 0)
                rc = add(&r, root, uns);
            else
                zm__element_free(uns);
        }
    }
    zm_strings_free(&used);
    zm__set_free(&r.groups);
    if (rc == 0)
        skip_unknown(&r, mudata);
    zm__hdf5_unlock();
    if (rc == 0)
        rc = move_neighbors_matrices(&r, root);
    if (rc != 0)
        return rc;

    zm_element *obs = child_named(root, "obs"), *var = child_named(root, "var");
    if (obs == NULL || obs->kind != ZM_ELEMENT_DATAFRAME || var == NULL ||
        var->kind != ZM_ELEMENT_DATAFRAME) {
        /* Left out (outside the source, say): that is why. */
        int no_obs = obs == NULL || obs->kind != ZM_ELEMENT_DATAFRAME;
        snprintf(path, sizeof path, "%s%s", base, no_obs ? "/obs" : "/var");
        const char *why = zm__source_skip_reason(source, path);
        if (base[0])
            return zm_err_set(err, -EINVAL, "%s: the modality %s needs obs and var dataframes%s%s%s",
                              source->path, base, why ? " (" : "", why ? why : "", why ? ")" : "");
        return zm_err_set(err, -EINVAL, "%s: an %s needs obs and var dataframes%s%s%s",
                          source->path, mudata ? ".h5mu" : ".h5ad", why ? " (" : "", why ? why : "",
                          why ? ")" : "");
    }
    source->n_obs = obs->shape[0];
    source->n_vars = var->shape[0];
    return 0;
}
