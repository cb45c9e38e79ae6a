/* MuData .h5mu: global annotations (an AnnData-shaped model without X, with
 * obsmap and varmap) and modalities under /mod, each an AnnData read into a
 * source of its own that shares the file with this one (source_internal.h),
 * and each global cell's row in each modality, from /obsmap/NAME (1-based,
 * 0 for a cell the modality did not measure: mudata's own rule). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

size_t zm_source_modality_count(const zm_source *source) { return source->modality_count; }
zm_source *zm_source_modality(const zm_source *source, size_t i) { return source->modalities[i]; }
const char *zm_source_modality_name(const zm_source *source, size_t i)
{
    return source->modality_names[i];
}
const uint32_t *zm_source_modality_rows(const zm_source *source, size_t i)
{
    return source->modality_rows[i];
}
const zm_source *zm_source_parent(const zm_source *source) { return source->parent; }
int zm_source_modality_axis(const zm_source *source) { return source->modality_axis; }

/* A modality: a source reading parent's file through parent's descriptor,
 * threads and cache, with a model of its own. */
zm_source *zm__modality_new(zm_source *parent)
{
    zm_source *m = calloc(1, sizeof *m);
    if (m == NULL || (m->path = strdup(parent->path)) == NULL) {
        free(m);
        return NULL;
    }
    m->parent = parent;
    m->fd = parent->fd;
    m->file = parent->file;
    m->format = ZM_FORMAT_H5AD;
    m->identity = parent->identity;
    m->pool = parent->pool;
    m->cache = parent->cache;
    pthread_mutex_init(&m->passes_mutex, NULL);
    return m;
}

static void modality_free(zm_source *m)
{
    if (m == NULL)
        return;
    zm__element_free(m->root);
    zm__hdf5_lock();
    for (size_t i = 0; i < m->array_count; i++)
        zm__array_free(m->arrays[i]);
    zm__hdf5_unlock();
    free(m->arrays);
    pthread_mutex_destroy(&m->passes_mutex);
    free(m->path);
    free(m);
}

int zm__modalities_alloc(zm_source *source, size_t count, zm_err *err)
{
    source->modalities = calloc(count ? count : 1, sizeof *source->modalities);
    source->modality_rows = calloc(count ? count : 1, sizeof *source->modality_rows);
    source->modality_names = calloc(count ? count : 1, sizeof *source->modality_names);
    source->modality_count = count;
    if (source->modalities == NULL || source->modality_rows == NULL ||
        source->modality_names == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading the modalities");
    return 0;
}

void zm__modalities_free(zm_source *source)
{
    for (size_t i = 0; i < source->modality_count; i++) {
        modality_free(source->modalities ? source->modalities[i] : NULL);
        free(source->modality_names ? source->modality_names[i] : NULL);
        free(source->modality_rows ? source->modality_rows[i] : NULL);
    }
    zm__window_free(source->window);
    source->window = NULL;
    free(source->modalities);
    free(source->modality_names);
    free(source->modality_rows);
    source->modalities = NULL;
    source->modality_names = NULL;
    source->modality_rows = NULL;
    source->modality_count = 0;
}

/* Whether name (length bytes) is among the first count of names. */
static int listed(const zm_strings *names, size_t count, const char *name, size_t length)
{
    for (size_t i = 0; i < count; i++)
        if (names->offsets[i + 1] - names->offsets[i] == length &&
            memcmp(names->bytes + names->offsets[i], name, length) == 0)
            return 1;
    return 0;
}

/* The modalities' names in the order served: the mod-order attribute's when
 * each of its names is a group of /mod (as mudata reads it), then every
 * other group of /mod in the file's order. HDF5 lock held. */
static int modality_order(zm_source *source, zm_strings *groups, char ***out, size_t *count,
                          zm_err *err)
{
    *out = NULL;
    *count = 0;
    zm_strings order = {0};
    int have_order = zm__h5_attribute_strings(source->file, "/mod", "mod-order", &order) == 0;
    for (size_t i = 0; have_order && i < order.count; i++) {
        size_t length = order.offsets[i + 1] - order.offsets[i];
        have_order = listed(groups, groups->count, order.bytes + order.offsets[i], length) &&
                     !listed(&order, i, order.bytes + order.offsets[i], length);
    }
    if (!have_order && order.offsets != NULL && order.count > 0)
        zm__source_skip(source, "/mod",
                        "its mod-order names a modality /mod does not hold (or one twice): "
                        "the modalities are served in the file's order");
    char **names = calloc(groups->count + 1, sizeof *names);
    int rc = names ? 0 : zm_err_set(err, -ENOMEM, "out of memory reading /mod");
    size_t n = 0;
    for (int pass = 0; rc == 0 && pass < 2; pass++) {
        const zm_strings *list = pass == 0 ? &order : groups;
        if (pass == 0 && !have_order)
            continue;
        for (size_t i = 0; rc == 0 && i < list->count; i++) {
            size_t length = list->offsets[i + 1] - list->offsets[i];
            const char *name = list->bytes + list->offsets[i];
            if (pass == 1 && have_order && listed(&order, order.count, name, length))
                continue;
            char path[ZM__PATH_BUFFER];
            if (length > ZM_ELEMENT_NAME_MAX || memchr(name, 0, length) != NULL) {
                char shown[96], why[160];
                zm__shown_name(name, length, shown, sizeof shown);
                snprintf(why, sizeof why, "the modality %s: not a name a store can hold", shown);
                zm__source_skip(source, "/mod", why);
                continue;
            }
            snprintf(path, sizeof path, "/mod/%.*s", (int)length, name);
            if (zm__h5_object_type(source->file, path) != H5O_TYPE_GROUP) {
                zm__source_skip(source, path, "not a group: not a modality");
                continue;
            }
            if ((length == 1 && name[0] == '.') || (length == 2 && !memcmp(name, "..", 2))) {
                zm__source_skip(source, path, "a modality's name a store cannot hold");
                continue;
            }
            names[n] = strndup(name, length);
            if (names[n] == NULL)
                rc = zm_err_set(err, -ENOMEM, "out of memory reading /mod");
            else
                n++;
        }
    }
    zm_strings_free(&order);
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return rc;
    }
    *out = names;
    *count = n;
    return 0;
}

int zm__read_h5mu(zm_source *source, zm_err *err)
{
    int rc = zm__read_anndata(source, "", 1, err);
    if (rc != 0)
        return rc;
    zm__hdf5_lock();
    zm_strings groups = {0};
    char **names = NULL;
    size_t count = 0;
    /* The axis the modalities share (0: cells, 1: genes), as stored. */
    int64_t *axis = NULL;
    size_t axis_count = 0;
    source->modality_axis = -2;
    if (zm__h5_attribute_integers(source->file, "/", "axis", &axis, &axis_count) == 0 &&
        axis_count == 1 && axis[0] >= -1 && axis[0] <= 1)
        source->modality_axis = (int)axis[0];
    else if (axis_count > 0)
        zm__source_skip(source, "/", "its axis attribute is not 0, 1 or -1: left out");
    free(axis);
    if (zm__h5_object_type(source->file, "/mod") != H5O_TYPE_GROUP || zm__h5_list(source->file, "/mod", &groups) != 0)
        rc = zm_err_set(err, -EINVAL, "%s: a MuData .h5mu needs a /mod group of modalities",
                        source->path);
    else
        rc = modality_order(source, &groups, &names, &count, err);
    zm__hdf5_unlock();
    zm_strings_free(&groups);
    if (rc == 0 && count == 0)
        rc = zm_err_set(err, -EINVAL, "%s: /mod holds no modality (an AnnData group)", source->path);
    if (rc == 0 && (rc = zm__modalities_alloc(source, count, err)) == 0) {
        for (size_t i = 0; i < count; i++) {
            source->modality_names[i] = names[i];
            names[i] = NULL;
        }
    }
    for (size_t i = 0; rc == 0 && i < source->modality_count; i++) {
        char base[ZM__PATH_BUFFER];
        snprintf(base, sizeof base, "/mod/%s", source->modality_names[i]);
        zm_source *m = zm__modality_new(source);
        if (m == NULL) {
            rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", base);
            break;
        }
        source->modalities[i] = m;
        rc = zm__read_anndata(m, base, 0, err);
        if (rc == 0)
            rc = zm__validate(m, err);
        if (rc != 0 && err && strncmp(err->reason, base, strlen(base)) != 0 &&
            strstr(err->reason, base) == NULL) {
            char reason[ZM_REASON_MAX];
            snprintf(reason, sizeof reason, "modality %s: %s", source->modality_names[i],
                     err->reason);
            snprintf(err->reason, sizeof err->reason, "%s", reason);
        }
    }
    for (size_t i = 0; names && i < count; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* Each global cell's row in modality i, from obsmap/NAME (validated: its
 * length is the global cells'), checked: every value at most the
 * modality's rows, and each of its rows exactly one cell's. */
static int modality_rows(zm_source *source, size_t i, zm_err *err)
{
    const char *name = source->modality_names[i];
    zm_source *m = source->modalities[i];
    const zm_element *obsmap = zm_source_find(source, "obsmap");
    const zm_element *map = obsmap ? zm_element_child(obsmap, name, strlen(name)) : NULL;
    uint64_t n = source->n_obs, rows = m->n_obs;
    if (map == NULL || map->kind != ZM_ELEMENT_ARRAY || map->rank != 1 || map->shape[0] != n)
        return zm_err_set(err, -EINVAL,
                          "%s: obsmap/%s must be a 1-d array of one integer a global cell (%" PRIu64
                          "): without it, which cells modality %s measured is not known",
                          source->path, name, n, name);
    zm_type_class c = zm_array_describe(map->values)->dtype.type_class;
    if (c != ZM_TYPE_INT && c != ZM_TYPE_UINT)
        return zm_err_set(err, -EINVAL, "%s: obsmap/%s must hold integers (it holds %s)",
                          source->path, name, zm_dtype_name(zm_array_describe(map->values)->dtype));
    int64_t *values = NULL;
    int rc = zm__read_whole(source, map->values, 0, (void **)&values, err);
    if (rc != 0)
        return rc;
    uint32_t *out = malloc((n ? n : 1) * sizeof *out);
    uint8_t *seen = calloc(rows ? rows : 1, 1);
    if (out == NULL || seen == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory reading obsmap/%s", name);
    uint64_t measured = 0;
    for (uint64_t g = 0; rc == 0 && g < n; g++) {
        int64_t v = values[g];
        if (v == 0) {
            out[g] = ZM_SOURCE_ABSENT;
            continue;
        }
        if (v < 0 || (uint64_t)v > rows)
            rc = zm_err_set(err, -EINVAL,
                            "%s: obsmap/%s[%" PRIu64 "] is %" PRId64 ", not a row of modality %s "
                            "(1 to %" PRIu64 ", or 0 for a cell it did not measure)",
                            source->path, name, g, v, name, rows);
        else if (seen[v - 1]++)
            rc = zm_err_set(err, -EINVAL,
                            "%s: obsmap/%s names row %" PRId64 " of modality %s for two cells",
                            source->path, name, v, name);
        else {
            out[g] = (uint32_t)(v - 1);
            measured++;
        }
    }
    if (rc == 0 && measured != rows)
        rc = zm_err_set(err, -EINVAL,
                        "%s: obsmap/%s maps %" PRIu64 " global cells to modality %s, which has "
                        "%" PRIu64 " rows: each of its rows must be one global cell's",
                        source->path, name, measured, name, rows);
    free(values);
    free(seen);
    if (rc != 0) {
        free(out);
        return rc;
    }
    source->modality_rows[i] = out;
    return 0;
}

/* varmap/NAME: one integer a global gene, at most the modality's genes. */
static int check_varmap(zm_source *source, size_t i, zm_err *err)
{
    const char *name = source->modality_names[i];
    const zm_element *varmap = zm_source_find(source, "varmap");
    const zm_element *map = varmap ? zm_element_child(varmap, name, strlen(name)) : NULL;
    if (map == NULL)
        return 0; /* served as the file has it: without */
    if (map->kind != ZM_ELEMENT_ARRAY || map->rank != 1 || map->shape[0] != source->n_vars)
        return zm_err_set(err, -EINVAL,
                          "%s: varmap/%s must be a 1-d array of one integer a global gene (%" PRIu64
                          ")", source->path, name, source->n_vars);
    return 0;
}

/* An obsmap entry that names no modality: listed, not served (the view has
 * no rows to renumber it by; a varmap entry is served as it is). */
static void skip_unmatched(zm_source *source, const char *dict)
{
    const zm_element *maps = zm_source_find(source, dict);
    for (size_t c = 0; maps && c < maps->child_count; c++) {
        const char *name = maps->children[c]->name;
        size_t i = 0;
        while (i < source->modality_count && strcmp(source->modality_names[i], name) != 0)
            i++;
        if (i == source->modality_count) {
            char path[ZM__PATH_BUFFER];
            snprintf(path, sizeof path, "/%s/%s", dict, name);
            zm__source_skip(source, path, "names no modality of /mod: not served");
        }
    }
}

int zm__mudata_map(zm_source *source, zm_err *err)
{
    int rc = 0;
    skip_unmatched(source, "obsmap");
    for (size_t i = 0; rc == 0 && i < source->modality_count; i++) {
        rc = modality_rows(source, i, err);
        if (rc == 0)
            rc = check_varmap(source, i, err);
    }
    return rc;
}
