/* The element tree: building, finding, freeing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

zm_element *zm__element_new(zm_element_kind kind, const char *parent_path, const char *name)
{
    zm_element *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->kind = kind;
    e->name = strdup(name);
    size_t n = strlen(parent_path) + strlen(name) + 2;
    e->path = malloc(n);
    if (e->name == NULL || e->path == NULL) {
        zm__element_free(e);
        return NULL;
    }
    if (parent_path[0] == '\0')
        snprintf(e->path, n, "%s", name);
    else
        snprintf(e->path, n, "%s/%s", parent_path, name);
    return e;
}

void zm__element_free(zm_element *e)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->child_count; i++)
        zm__element_free(e->children[i]);
    free(e->children);
    zm__element_free(e->categories);
    zm__element_free(e->index);
    free(e->index_name);
    free(e->stored_as);
    free(e->name);
    free(e->path);
    free(e); /* arrays belong to the source */
}

int zm__element_add_child(zm_element *parent, zm_element *child)
{
    zm_element **children = realloc(parent->children, (parent->child_count + 1) * sizeof *children);
    if (children == NULL)
        return -ENOMEM;
    parent->children = children;
    parent->children[parent->child_count++] = child;
    return 0;
}

void zm__element_set_encoding(zm_element *element, const char *type, const char *version)
{
    element->encoding_type = type;
    element->encoding_version = version;
}

void zm__element_set_stored_as(zm_element *element, const char *fmt, ...)
{
    char buffer[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buffer, sizeof buffer, fmt, ap);
    va_end(ap);
    free(element->stored_as);
    element->stored_as = strdup(buffer);
}

void zm__element_shape_from(zm_element *element, const zm_array *array)
{
    element->rank = array->info.rank;
    memcpy(element->shape, array->info.shape, sizeof element->shape);
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(zm_element *const *)a)->name, (*(zm_element *const *)b)->name);
}

void zm__element_sort_children(zm_element *element)
{
    qsort(element->children, element->child_count, sizeof *element->children, by_name);
}

static const zm_element *find_in(const zm_element *e, const char *path)
{
    if (*path == '\0')
        return e;
    const char *slash = strchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : strlen(path);
    const char *rest = slash ? slash + 1 : path + n;
    if (e->kind == ZM_ELEMENT_DATAFRAME && e->index && n == strlen(e->index->name) &&
        strncmp(path, e->index->name, n) == 0)
        return find_in(e->index, rest);
    if (e->kind == ZM_ELEMENT_CATEGORICAL && e->categories && n == strlen("categories") &&
        strncmp(path, "categories", n) == 0)
        return find_in(e->categories, rest);
    for (size_t i = 0; i < e->child_count; i++) {
        const zm_element *c = e->children[i];
        if (strlen(c->name) == n && strncmp(c->name, path, n) == 0)
            return find_in(c, rest);
    }
    return NULL;
}

const zm_element *zm_source_find(const zm_source *source, const char *path)
{
    return find_in(source->root, path);
}

void zm__set_axes(zm_element *e, zm_axis first, zm_axis second)
{
    e->axes[0] = first;
    e->axes[1] = second;
    if (e->kind == ZM_ELEMENT_DATAFRAME) {
        for (size_t i = 0; i < e->child_count; i++)
            zm__set_axes(e->children[i], first, ZM_AXIS_NONE);
        if (e->index)
            zm__set_axes(e->index, first, ZM_AXIS_NONE);
    }
    if (e->kind == ZM_ELEMENT_CATEGORICAL && e->categories)
        zm__set_axes(e->categories, ZM_AXIS_NONE, ZM_AXIS_NONE);
    if (e->kind == ZM_ELEMENT_DICT)
        for (size_t i = 0; i < e->child_count; i++)
            zm__set_axes(e->children[i], first, second);
}

void zm__source_skip(zm_source *source, const char *path, const char *why)
{
    /* A reason that starts with the path already (an error's): said once. */
    size_t path_length = strlen(path);
    if (strncmp(why, path, path_length) == 0 && strncmp(why + path_length, ": ", 2) == 0)
        why += path_length + 2;
    char **list = realloc(source->skipped_list, (source->skipped_count + 1) * sizeof *list);
    if (list == NULL)
        return;
    source->skipped_list = list;
    size_t n = strlen(path) + strlen(why) + 3;
    char *line = malloc(n);
    if (line == NULL)
        return;
    snprintf(line, n, "%s: %s", path, why);
    list[source->skipped_count++] = line;
}

size_t zm_source_skipped(const zm_source *source, const char *const **lines)
{
    *lines = (const char *const *)source->skipped_list;
    return source->skipped_count;
}

/* Gives an element (and everything under it) a new parent path. */
int zm__element_repath(zm_element *e, const char *parent_path)
{
    size_t n = strlen(parent_path) + strlen(e->name) + 2;
    char *path = malloc(n);
    if (path == NULL)
        return -ENOMEM;
    if (parent_path[0] == '\0')
        snprintf(path, n, "%s", e->name);
    else
        snprintf(path, n, "%s/%s", parent_path, e->name);
    free(e->path);
    e->path = path;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < e->child_count; i++)
        rc = zm__element_repath(e->children[i], e->path);
    if (rc == 0 && e->index)
        rc = zm__element_repath(e->index, e->path);
    if (rc == 0 && e->categories)
        rc = zm__element_repath(e->categories, e->path);
    return rc;
}

/* A dataframe's index is "_index" in the model, whatever the file calls it. */
int zm__element_name_index(zm_element *df)
{
    if (df->index == NULL || strcmp(df->index->name, "_index") == 0)
        return 0;
    char *name = strdup("_index");
    if (name == NULL)
        return -ENOMEM;
    free(df->index->name);
    df->index->name = name;
    return zm__element_repath(df->index, df->path);
}

/* Takes a child out of a dict, returning it (or NULL). */
zm_element *zm__element_take_child(zm_element *parent, const char *name)
{
    for (size_t i = 0; parent && i < parent->child_count; i++) {
        zm_element *c = parent->children[i];
        if (strcmp(c->name, name) == 0) {
            memmove(parent->children + i, parent->children + i + 1,
                    (parent->child_count - i - 1) * sizeof *parent->children);
            parent->child_count--;
            return c;
        }
    }
    return NULL;
}

void zm__set_root_axes(zm_element *root)
{
    static const struct {
        const char *name;
        zm_axis first, second;
    } parts[] = {
        {"X", ZM_AXIS_OBS, ZM_AXIS_VAR},      {"layers", ZM_AXIS_OBS, ZM_AXIS_VAR},
        {"obs", ZM_AXIS_OBS, ZM_AXIS_NONE},   {"obsm", ZM_AXIS_OBS, ZM_AXIS_NONE},
        {"var", ZM_AXIS_VAR, ZM_AXIS_NONE},   {"varm", ZM_AXIS_VAR, ZM_AXIS_NONE},
        {"obsp", ZM_AXIS_OBS, ZM_AXIS_OBS},   {"varp", ZM_AXIS_VAR, ZM_AXIS_VAR},
    };
    for (size_t i = 0; i < root->child_count; i++)
        for (size_t j = 0; j < sizeof parts / sizeof parts[0]; j++)
            if (strcmp(root->children[i]->name, parts[j].name) == 0)
                zm__set_axes(root->children[i], parts[j].first, parts[j].second);
}

const char *zm__string_at(const zm_strings *s, size_t i, char *buffer, size_t size)
{
    size_t n = s->offsets[i + 1] - s->offsets[i];
    snprintf(buffer, size, "%.*s", (int)n, s->bytes + s->offsets[i]);
    return buffer;
}
