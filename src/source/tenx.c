/* 10x Genomics Cell Ranger .h5, presented as scanpy's read_10x_h5 does: the
 * matrix's per-barcode pointers make it CSR of cells × features; obs is
 * indexed by barcode; var by feature name with gene_ids, feature_types and
 * genome columns (v3) or gene_ids (v2). Every feature type is kept (scanpy's
 * gex_only=False): a multi-modal run's antibody features appear as genes
 * with their feature_types value, when -o layout=anndata asks for one
 * AnnData; else several feature types are modalities (tenx_multi.c). A v2
 * file with several genomes is a modality a genome (tenx_multi.c), or with
 * -o layout=anndata the first (by name), the others listed as skipped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

static int add_column(zm_source *source, zm_element *df, const char *h5path, const char *name,
                      zm_err *err)
{
    char why[ZM_REASON_MAX];
    if (zm__h5_object_type(source->file, h5path) != H5O_TYPE_DATASET) {
        if (zm__h5_outside(source->file, h5path, why, sizeof why))
            zm__source_skip(source, h5path, why);
        return 0;
    }
    zm_element *e = NULL;
    int rc = zm__array_element(source, h5path, NULL, 0, df->path, name, &e, err);
    if (rc == ZM__OUTSIDE) { /* a column outside the source: left out */
        zm__source_skip(source, h5path, err->reason);
        zm_err_clear(err);
        return 0;
    }
    if (rc != 0)
        return rc;
    zm__element_set_stored_as(e, "10x %s", h5path);
    if (e->rank != 1 || e->shape[0] != df->shape[0]) {
        zm__element_free(e);
        return zm_err_set(err, -EINVAL, "%s: expected %llu values", h5path,
                          (unsigned long long)df->shape[0]);
    }
    return zm__element_add_child(df, e);
}

/* 1-d datasets of a group with n values, other than the matrix's own parts
 * and the columns already taken, as columns in name order. */
static int extra_columns(zm_source *source, zm_element *df, const char *group, uint64_t n,
                         zm_err *err)
{
    static const char *const taken[] = {"barcodes", "data", "indices", "indptr", "shape", "id",
                                        "name", "feature_type", "genome", "_all_tag_keys"};
    zm_strings names;
    int rc = zm__h5_list(source->file, group, &names);
    /* The columns' names, in a set: a group of 100,000 datasets is as many
     * look-ups, not a scan of the columns for each. */
    zm__set columns = {0};
    for (size_t c = 0; rc == 0 && c < df->child_count; c++)
        if (zm__set_add(&columns, df->children[c]->name, strlen(df->children[c]->name), NULL,
                        NULL) < 0)
            rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", group);
    for (size_t i = 0; rc == 0 && i < names.count; i++) {
        char key[ZM_ELEMENT_NAME_MAX + 1], path[ZM__PATH_BUFFER];
        if (zm__child_at(source, group, &names, i, key, path) != 0)
            continue;
        int skip = 0;
        for (size_t t = 0; t < sizeof taken / sizeof taken[0]; t++)
            skip |= strcmp(key, taken[t]) == 0;
        if (skip)
            continue;
        if (zm__h5_object_type(source->file, path) != H5O_TYPE_DATASET) {
            char why[ZM_REASON_MAX];
            if (zm__h5_outside(source->file, path, why, sizeof why))
                zm__source_skip(source, path, why);
            continue;
        }
        /* A dataset named like a column the reader made ("gene_ids" from
         * features/id): the column keeps the name, the dataset is left out. */
        int taken_name = strcmp(key, "_index") == 0 || zm__set_find(&columns, key, strlen(key));
        if (taken_name) {
            zm__source_skip(source, path, "its name is a column's already");
            continue;
        }
        zm_element *e = NULL;
        rc = zm__array_element(source, path, NULL, 0, df->path, key, &e, err);
        if (rc == -ENOTSUP || rc == ZM__OUTSIDE) {
            zm__source_skip(source, path, err->reason);
            zm_err_clear(err);
            rc = 0;
            continue;
        }
        if (rc == 0 && (e->rank != 1 || e->shape[0] != n)) {
            zm__element_free(e); /* not one value per row: not a column */
            continue;
        }
        if (rc == 0) {
            zm__element_set_stored_as(e, "10x %s", path);
            rc = zm__element_add_child(df, e);
            if (rc == 0 && zm__set_add(&columns, key, strlen(key), NULL, NULL) < 0)
                rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", group);
        }
    }
    zm_strings_free(&names);
    zm__set_free(&columns);
    return rc;
}

static zm_element *dataframe(const char *name)
{
    zm_element *df = zm__element_new(ZM_ELEMENT_DATAFRAME, "", name);
    if (df) {
        zm__element_set_encoding(df, "dataframe", "0.2.0");
        df->rank = 1;
    }
    return df;
}

/* The genome groups of a v2 file (a group holding genes and the matrix's
 * parts), by name: *out malloc'd, count of them. HDF5 lock held. */
static int genome_groups(zm_source *source, char (**out)[ZM__PATH_BUFFER], size_t *count)
{
    *out = NULL;
    *count = 0;
    zm_strings names;
    int rc = zm__h5_list(source->file, "/", &names);
    if (rc != 0)
        return rc;
    char (*groups)[ZM__PATH_BUFFER] = calloc(names.count ? names.count : 1, sizeof *groups);
    if (groups == NULL) {
        zm_strings_free(&names);
        return -ENOMEM;
    }
    size_t n = 0;
    for (size_t g = 0; g < names.count; g++) {
        char name[ZM_ELEMENT_NAME_MAX + 1], candidate[ZM__PATH_BUFFER], genes[ZM__PATH_BUFFER + 8];
        if (zm__child_at(source, "/", &names, g, name, candidate) != 0)
            continue;
        snprintf(genes, sizeof genes, "%s/genes", candidate);
        if (zm__h5_object_type(source->file, genes) != H5O_TYPE_DATASET)
            continue;
        snprintf(groups[n++], ZM__PATH_BUFFER, "%s", candidate);
    }
    zm_strings_free(&names);
    *out = groups;
    *count = n;
    return 0;
}

/* Every dataset of the file's first two levels (and of /matrix/features)
 * that no element reads is listed as skipped, and every other object at the
 * root: nothing of a 10x file is left out unsaid. HDF5 lock held. */
static void add_used(zm__set *used, const zm_source *source)
{
    for (size_t i = 0; i < source->array_count; i++)
        if (source->arrays[i]->h5_path != NULL)
            zm__set_add(used, source->arrays[i]->h5_path, strlen(source->arrays[i]->h5_path),
                        NULL, NULL);
}

static void list_unread_in(zm_source *source, const zm__set *used, const char *group, int depth)
{
    zm_strings names;
    if (zm__h5_list(source->file, group, &names) != 0)
        return;
    for (size_t i = 0; i < names.count; i++) {
        char name[ZM_ELEMENT_NAME_MAX + 1], path[ZM__PATH_BUFFER];
        if (zm__child_at(source, group, &names, i, name, path) != 0)
            continue;
        int type = zm__h5_object_type(source->file, path);
        if (type == H5O_TYPE_DATASET && zm__set_find(used, path, strlen(path)))
            continue;
        if (type == H5O_TYPE_GROUP && depth < 2) {
            list_unread_in(source, used, path, depth + 1);
            continue;
        }
        if (strcmp(name, "_all_tag_keys") == 0)
            zm__source_skip(source, path, "Cell Ranger's list of the feature tags: each tag is a "
                                          "var column");
        else
            zm__source_skip(source, path, type == H5O_TYPE_DATASET
                                              ? "not part of the 10x layout (not one value a "
                                                "barcode or a feature): not served"
                                              : "not part of the 10x layout: not served");
    }
    zm_strings_free(&names);
}

static void list_unread(zm_source *source)
{
    zm__set used = {0};
    add_used(&used, source);
    for (size_t i = 0; i < source->modality_count; i++)
        add_used(&used, source->modalities[i]);
    zm__hdf5_lock();
    list_unread_in(source, &used, "/", 0);
    zm__hdf5_unlock();
    zm__set_free(&used);
}

static int read_10x(zm_source *source, zm_err *err);

int zm__read_10x(zm_source *source, zm_err *err)
{
    int rc = read_10x(source, err);
    if (rc == 0)
        list_unread(source);
    return rc;
}

static int read_10x(zm_source *source, zm_err *err)
{
    char group[ZM__PATH_BUFFER] = "/matrix";
    if (source->format == ZM_FORMAT_10X_V2) {
        zm__hdf5_lock();
        char (*groups)[ZM__PATH_BUFFER] = NULL;
        size_t count = 0;
        int rc = genome_groups(source, &groups, &count);
        zm__hdf5_unlock();
        if (rc != 0)
            return zm_err_set(err, rc, "%s: cannot list the genomes", source->path);
        /* Several genomes: a modality each (tenx_multi.c), or the first
         * (-o layout=anndata). */
        if (count >= 2 && !source->layout_anndata) {
            rc = zm__10x_genome_modalities(source, (const char(*)[ZM__PATH_BUFFER])groups, count,
                                           err);
            free(groups);
            return rc;
        }
        if (count > 0)
            snprintf(group, sizeof group, "%s", groups[0]);
        for (size_t g = 1; g < count; g++)
            zm__source_skip(source, groups[g],
                            "another genome: -o layout=anndata presents the first genome only "
                            "(without it, each genome is a modality)");
        free(groups);
    }
    int rc = zm__10x_read_group(source, group, err);
    if (rc != 0)
        return rc;
    /* Several feature types: a MuData of them (tenx_multi.c). */
    return zm__10x_feature_modalities(source, err);
}

int zm__10x_read_group(zm_source *source, const char *group, zm_err *err)
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
    zm__element_set_stored_as(root, "10x Genomics %s, %s", zm_source_format_name(source->format),
                              group);

    /* shape = [features, barcodes]. */
    char path[ZM__PATH_BUFFER + 32];
    snprintf(path, sizeof path, "%s/shape", group);
    zm_array *shape_array = NULL;
    int64_t *shape = NULL;
    rc = zm__array_open(source, source->file, path, NULL, 0, &shape_array, err);
    if (rc == 0 && zm_array_describe(shape_array)->shape[0] != 2)
        rc = zm_err_set(err, -EINVAL, "%s: shape must hold 2 values", path);
    if (rc == 0)
        rc = zm__read_whole(source, shape_array, 0, (void **)&shape, err);
    if (rc == 0 && (shape[0] < 0 || shape[1] < 0))
        rc = zm_err_set(err, -EINVAL, "%s: a negative shape", path);
    if (rc == 0) {
        source->n_vars = (uint64_t)shape[0];
        source->n_obs = (uint64_t)shape[1];
    }
    free(shape);

    zm_element *x = NULL;
    if (rc == 0) {
        x = zm__element_new(ZM_ELEMENT_SPARSE, "", "X");
        rc = x ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    }
    static const char *const parts[] = {"data", "indices", "indptr"};
    for (int i = 0; rc == 0 && i < 3; i++) {
        zm_array **target = i == 0 ? &x->values : i == 1 ? &x->indices : &x->indptr;
        snprintf(path, sizeof path, "%s/%s", group, parts[i]);
        rc = zm__array_open(source, source->file, path, NULL, 0, target, err);
    }
    if (rc == 0) {
        x->sparse_format = ZM_SPARSE_CSR;
        x->rank = 2;
        x->shape[0] = source->n_obs;
        x->shape[1] = source->n_vars;
        zm__element_set_encoding(x, "csr_matrix", "0.1.0");
        zm__element_set_stored_as(x, "10x matrix (features × barcodes, per-barcode pointers)");
        rc = zm__element_add_child(root, x);
    } else {
        zm__element_free(x);
    }

    zm_element *obs = rc == 0 ? dataframe("obs") : NULL;
    if (rc == 0 && obs == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        obs->shape[0] = source->n_obs;
        snprintf(path, sizeof path, "%s/barcodes", group);
        rc = zm__array_element(source, path, NULL, 0, obs->path, "_index", &obs->index, err);
        obs->index_name = strdup("_index");
        /* Other 1-d datasets of /matrix with one value a barcode (v3). */
        if (rc == 0 && source->format == ZM_FORMAT_10X_V3)
            rc = extra_columns(source, obs, "/matrix", source->n_obs, err);
        zm__element_set_stored_as(obs, "10x barcodes");
        if (rc == 0 && (obs->index->rank != 1 || obs->index->shape[0] != source->n_obs))
            rc = zm_err_set(err, -EINVAL, "%s: %llu barcodes for %llu cells", path,
                            (unsigned long long)obs->index->shape[0], (unsigned long long)source->n_obs);
        if (rc == 0)
            rc = zm__element_add_child(root, obs);
        else
            zm__element_free(obs);
    }

    zm_element *var = rc == 0 ? dataframe("var") : NULL;
    if (rc == 0 && var == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        var->shape[0] = source->n_vars;
        int v3 = source->format == ZM_FORMAT_10X_V3;
        snprintf(path, sizeof path, v3 ? "%s/features/name" : "%s/gene_names", group);
        rc = zm__array_element(source, path, NULL, 0, var->path, "_index", &var->index, err);
        var->index_name = strdup("_index");
        zm__element_set_stored_as(var, v3 ? "10x features" : "10x genes");
        if (rc == 0 && (var->index->rank != 1 || var->index->shape[0] != source->n_vars))
            rc = zm_err_set(err, -EINVAL, "%s: %llu names for %llu features", path,
                            (unsigned long long)var->index->shape[0], (unsigned long long)source->n_vars);
        if (rc == 0) {
            snprintf(path, sizeof path, v3 ? "%s/features/id" : "%s/genes", group);
            rc = add_column(source, var, path, "gene_ids", err);
        }
        if (rc == 0 && v3) {
            snprintf(path, sizeof path, "%s/features/feature_type", group);
            rc = add_column(source, var, path, "feature_types", err);
            snprintf(path, sizeof path, "%s/features/genome", group);
            if (rc == 0)
                rc = add_column(source, var, path, "genome", err);
            /* Then every other 1-d feature dataset, by name. */
            rc = rc ? rc : extra_columns(source, var, "/matrix/features", source->n_vars, err);
        }
        if (rc == 0)
            rc = zm__element_add_child(root, var);
        else
            zm__element_free(var);
    }
    zm__hdf5_unlock();
    if (rc != 0)
        return rc;
    zm__set_root_axes(root);
    return 0;
}
