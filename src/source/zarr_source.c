/* An AnnData Zarr store as a source: the store opened (a directory or a
 * zip), its metadata read, and the AnnData in it read into the model by
 * the same reader as an .h5ad's (anndata.c), through the container calls
 * here. Nothing here calls HDF5. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "source/container.h"
#include "source/zarr_array.h"

typedef struct zarr_container {
    zm_source *source;
    zm__store *store;
    zm__ztree *tree;
    uint64_t store_bytes;
    /* The first metadata error met: the open fails with it (a store whose
     * metadata is damaged is never served in part). */
    zm_err failure;
} zarr_container;

static zarr_container *state_of(const zm__container *c)
{
    return c->state;
}

/* A container path ("/obs/x", "/") as a store path ("obs/x", ""). */
static const char *store_path(const char *path)
{
    while (*path == '/')
        path++;
    return path;
}

/* The node at path, or NULL (none, or bad metadata: the failure kept). */
static const zm__znode *node_at(const zm__container *c, const char *path)
{
    zarr_container *z = state_of(c);
    char trimmed[ZM_ELEMENT_PATH_MAX + ZM_ELEMENT_NAME_MAX + 2];
    snprintf(trimmed, sizeof trimmed, "%s", store_path(path));
    size_t n = strlen(trimmed);
    while (n > 0 && trimmed[n - 1] == '/')
        trimmed[--n] = '\0';
    const zm__znode *node = NULL;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__ztree_node(z->tree, trimmed, &node, &err);
    if (rc == -ENOENT)
        return NULL;
    if (rc != 0) {
        if (z->failure.code == 0)
            z->failure = err;
        return NULL;
    }
    return node;
}

static int zarr_node_type(const zm__container *c, const char *path)
{
    const zm__znode *node = node_at(c, path);
    if (node == NULL)
        return ZM__NODE_NONE;
    return node->kind == ZM__ZNODE_GROUP ? ZM__NODE_GROUP : ZM__NODE_ARRAY;
}

static int zarr_identify(const zm__container *c, const char *path, int *type, zm__h5_object_id *id)
{
    /* A store has no links: a node is its path. */
    *type = zarr_node_type(c, path);
    if (*type == ZM__NODE_NONE)
        return -ENOENT;
    const char *p = store_path(path);
    XXH128_hash_t h = XXH3_128bits(p, strlen(p));
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, &h.low64, 8);
    memcpy(id->bytes + 8, &h.high64, 8);
    uint64_t length = strlen(p);
    memcpy(id->bytes + 16, &length, 8);
    return 0;
}

static json_t *attribute(const zm__container *c, const char *path, const char *name)
{
    const zm__znode *node = node_at(c, path);
    return node && node->attributes ? json_object_get(node->attributes, name) : NULL;
}

static int zarr_has_attribute(const zm__container *c, const char *path, const char *name)
{
    return attribute(c, path, name) != NULL;
}

static int zarr_attribute_string(const zm__container *c, const char *path, const char *name,
                                 char **out)
{
    *out = NULL;
    json_t *v = attribute(c, path, name);
    if (v == NULL)
        return -ENOENT;
    if (!json_is_string(v))
        return -EINVAL;
    *out = strndup(json_string_value(v), json_string_length(v));
    return *out ? 0 : -ENOMEM;
}

static int zarr_attribute_integers(const zm__container *c, const char *path, const char *name,
                                   int64_t **values, size_t *count)
{
    *values = NULL;
    *count = 0;
    json_t *v = attribute(c, path, name);
    if (v == NULL)
        return -ENOENT;
    if (json_is_integer(v)) {
        if ((*values = malloc(sizeof **values)) == NULL)
            return -ENOMEM;
        (*values)[0] = json_integer_value(v);
        *count = 1;
        return 0;
    }
    if (!json_is_array(v))
        return -EINVAL;
    size_t n = json_array_size(v);
    *values = malloc((n ? n : 1) * sizeof **values);
    if (*values == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_array_get(v, i);
        if (!json_is_integer(item)) {
            free(*values);
            *values = NULL;
            return -EINVAL;
        }
        (*values)[i] = json_integer_value(item);
    }
    *count = n;
    return 0;
}

/* String i of a JSON list of strings, or the one string where a list is
 * meant (a list of one). */
static const char *json_string_at(const void *context, size_t i, size_t *length)
{
    const json_t *v = context;
    const json_t *item = json_is_string(v) ? v : json_array_get(v, i);
    *length = json_string_length(item);
    return json_string_value(item);
}

static int zarr_attribute_strings(const zm__container *c, const char *path, const char *name,
                                  zm_strings *out)
{
    memset(out, 0, sizeof *out);
    json_t *v = attribute(c, path, name);
    if (v == NULL)
        return -ENOENT;
    if (json_is_string(v))
        return zm__strings_from(1, json_string_at, v, out);
    if (!json_is_array(v))
        return -EINVAL;
    size_t n = json_array_size(v);
    for (size_t i = 0; i < n; i++)
        if (!json_is_string(json_array_get(v, i)))
            return -EINVAL;
    return zm__strings_from(n, json_string_at, v, out);
}

static int zarr_attribute_bool(const zm__container *c, const char *path, const char *name,
                               int *value)
{
    json_t *v = attribute(c, path, name);
    if (v == NULL)
        return -ENOENT;
    if (json_is_boolean(v))
        *value = json_is_true(v);
    else if (json_is_integer(v))
        *value = json_integer_value(v) != 0;
    else
        return -EINVAL;
    return 0;
}

/* anndata 0.7 wrote a categorical column's "categories" as the path of
 * its categories from the dataframe's group ("__categories/cell_type"):
 * a store's reference, resolved here (never past the store's root). */
static int zarr_attribute_reference(const zm__container *c, const char *path, const char *name,
                                    char **target)
{
    *target = NULL;
    json_t *v = attribute(c, path, name);
    if (v == NULL)
        return -ENOENT;
    if (!json_is_string(v))
        return -EINVAL;
    const char *relative = json_string_value(v);
    const char *slash = strrchr(path, '/');
    size_t parent = slash ? (size_t)(slash - path) : 0;
    if (relative[0] == '\0' || relative[0] == '/' || strstr(relative, "..") != NULL ||
        parent + 1 + strlen(relative) > ZM_ELEMENT_PATH_MAX)
        return -EINVAL;
    size_t n = parent + 1 + strlen(relative) + 1;
    if ((*target = malloc(n)) == NULL)
        return -ENOMEM;
    snprintf(*target, n, "%.*s/%s", (int)parent, path, relative);
    if (zarr_node_type(c, *target) != ZM__NODE_ARRAY) {
        free(*target);
        *target = NULL;
        return -EINVAL;
    }
    return 0;
}

static int zarr_list(const zm__container *c, const char *path, zm_strings *names)
{
    zarr_container *z = state_of(c);
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__ztree_children(z->tree, store_path(path), names, &err);
    if (rc != 0 && rc != -ENOENT && z->failure.code == 0)
        z->failure = err;
    return rc;
}

static int zarr_values(const zm__container *c, const char *path)
{
    const zm__znode *node = node_at(c, path);
    return node && node->array && node->array->value == ZM__ZVALUE_RECORDS ? ZM__VALUES_RECORDS
                                                                           : ZM__VALUES_PLAIN;
}

static int zarr_fields(const zm__container *c, const char *path, zm_strings *names)
{
    memset(names, 0, sizeof *names);
    const zm__znode *node = node_at(c, path);
    if (node == NULL || node->array == NULL || node->array->value != ZM__ZVALUE_RECORDS)
        return -EINVAL;
    const zm__zarray *m = node->array;
    size_t total = 0;
    for (size_t i = 0; i < m->field_count; i++)
        total += strlen(m->fields[i].name);
    names->offsets = malloc((m->field_count + 1) * sizeof *names->offsets);
    names->bytes = malloc(total + 1);
    if (names->offsets == NULL || names->bytes == NULL) {
        zm_strings_free(names);
        return -ENOMEM;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < m->field_count; i++) {
        size_t n = strlen(m->fields[i].name);
        names->offsets[i] = at;
        memcpy(names->bytes + at, m->fields[i].name, n);
        at += n;
    }
    names->offsets[m->field_count] = at;
    names->bytes[at] = '\0';
    names->count = m->field_count;
    return 0;
}

static int zarr_outside(const zm__container *c, const char *path, char *why, size_t size)
{
    (void)c;
    (void)path;
    (void)why;
    (void)size;
    return 0; /* a store's nodes are all its own */
}

static int zarr_array_open(zm_source *source, const zm__container *c, const char *path,
                           const char *field, zm_array **out, zm_err *err)
{
    *out = NULL;
    zarr_container *z = state_of(c);
    const zm__znode *node = node_at(c, path);
    if (node == NULL || node->kind != ZM__ZNODE_ARRAY)
        return z->failure.code != 0 ? (*err = z->failure, z->failure.code)
                                    : zm_err_set(err, -EINVAL, "%s: not an array", path);
    zm_array *array;
    int rc = zm__zarr_array_open(source, z->store, node, field, z->store_bytes, &array, err);
    if (rc != 0 || array->info.rank != 0) {
        *out = array;
        return rc;
    }
    /* A 0-d array (a scalar in uns): its one value read now and held. */
    const zm_array_info *info = zm_array_describe(array);
    if (info->dtype.type_class == ZM_TYPE_STRING) {
        zm_strings s;
        if ((rc = zm__zarr_read_strings(source, array, NULL, 0, 1, &s, err)) != 0)
            return rc;
        return zm__array_memory(source, info->file_path, info->dtype, 0, NULL, NULL, &s, out, err);
    }
    uint8_t value[16];
    if ((rc = zm__zarr_chunk(source, array, 0, value, info->dtype.size, err)) != 0)
        return rc;
    return zm__array_memory(source, info->file_path, info->dtype, 0, NULL, value, NULL, out, err);
}

static const zm__container_ops zarr_container_ops = {
    .node_type = zarr_node_type,
    .identify = zarr_identify,
    .has_attribute = zarr_has_attribute,
    .attribute_string = zarr_attribute_string,
    .attribute_integers = zarr_attribute_integers,
    .attribute_strings = zarr_attribute_strings,
    .attribute_bool = zarr_attribute_bool,
    .attribute_reference = zarr_attribute_reference,
    .list = zarr_list,
    .values = zarr_values,
    .fields = zarr_fields,
    .outside = zarr_outside,
    .array_open = zarr_array_open,
    .what = "Zarr store",
};

int zm__read_zarr(zm_source *source, zm_err *err)
{
    int rc = zm__store_open(source->fd, source->path, &source->store, err);
    if (rc == 0)
        rc = zm__ztree_open(source->store, &source->ztree, err);
    if (rc != 0)
        return rc;
    zm__store_identity(source->store, &source->identity);
    zm__count_bytes(source, zm__ztree_bytes_read(source->ztree));
    zarr_container z = {source, source->store, source->ztree, (uint64_t)source->identity.size, {0}};
    zm__container c = {&zarr_container_ops, &z};
    /* What the root says it is: an AnnData (anndata ≥ 0.8 says so; 0.7
     * wrote no attributes on the root, so obs and var say it). */
    char *encoding = NULL;
    c.ops->attribute_string(&c, "/", "encoding-type", &encoding);
    if (z.failure.code != 0) {
        free(encoding);
        *err = z.failure;
        return z.failure.code;
    }
    if (encoding != NULL && strcmp(encoding, "anndata") != 0) {
        rc = zm_err_set(err, -EINVAL,
                        "%s: a Zarr store whose root is encoded as \"%s\", not an AnnData%s",
                        source->path, encoding,
                        strcmp(encoding, "MuData") == 0 ? " (MuData Zarr stores are not read yet: "
                                                          "write the MuData as .h5mu)"
                                                        : "");
        free(encoding);
        return rc;
    }
    free(encoding);
    if (c.ops->node_type(&c, "/obs") == ZM__NODE_NONE ||
        c.ops->node_type(&c, "/var") == ZM__NODE_NONE) {
        if (z.failure.code != 0) {
            *err = z.failure;
            return z.failure.code;
        }
        return zm_err_set(err, -EINVAL, "%s: a Zarr store, but not an AnnData (no obs and var)",
                          source->path);
    }
    rc = zm__read_anndata_in(source, &c, "", 0, err);
    if (rc == 0 && z.failure.code != 0) {
        *err = z.failure;
        rc = z.failure.code;
    }
    return rc;
}

int zm__zarr_check(const zm_source *source, zm_err *err)
{
    return source->store ? zm__store_check(source->store, err) : 0;
}

void zm__zarr_close(zm_source *source)
{
    zm__ztree_close(source->ztree);
    source->ztree = NULL;
    zm__store_close(source->store);
    source->store = NULL;
}
