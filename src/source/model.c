/* The element tree: building, finding, freeing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

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
    free(e->children_by_name);
    zm__element_free(e->categories);
    zm__element_free(e->index);
    free(e->index_name);
    free(e->na_value);
    free(e->stored_as);
    free(e->name);
    free(e->path);
    free(e); /* arrays belong to the source */
}

int zm__element_add_child(zm_element *parent, zm_element *child)
{
    /* Doubling: a group of 100,000 keys is 17 copies, not 100,000. */
    if (parent->child_count == parent->child_capacity) {
        size_t capacity = parent->child_capacity ? 2 * parent->child_capacity : 4;
        zm_element **children = realloc(parent->children, capacity * sizeof *children);
        if (children == NULL)
            return -ENOMEM;
        parent->children = children;
        parent->child_capacity = capacity;
    }
    parent->children[parent->child_count++] = child;
    free(parent->children_by_name); /* the model changed: made again when complete */
    parent->children_by_name = NULL;
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
    free(element->children_by_name);
    element->children_by_name = NULL;
}

/* Slots of children by their element's name; equal names in their order in
 * children (the first is the one found), so the index answers as a scan of
 * the children would. */
static int by_slot(const void *a, const void *b)
{
    zm_element *const *x = *(zm_element *const *const *)a, *const *y =
                                                               *(zm_element *const *const *)b;
    int c = strcmp((*x)->name, (*y)->name);
    return c ? c : (x < y ? -1 : x > y);
}

int zm__element_index(zm_element *e)
{
    if (e == NULL)
        return 0;
    free(e->children_by_name);
    e->children_by_name = NULL;
    if (e->child_count > 0) {
        /* Sorted as copies of children's order, with the place in children
         * breaking ties: sort pointers to the slots, then take the elements. */
        zm_element ***slots = malloc(e->child_count * sizeof *slots);
        e->children_by_name = malloc(e->child_count * sizeof *e->children_by_name);
        if (slots == NULL || e->children_by_name == NULL) {
            free(slots);
            free(e->children_by_name);
            e->children_by_name = NULL;
            return -ENOMEM;
        }
        for (size_t i = 0; i < e->child_count; i++)
            slots[i] = &e->children[i];
        qsort(slots, e->child_count, sizeof *slots, by_slot);
        for (size_t i = 0; i < e->child_count; i++)
            e->children_by_name[i] = *slots[i];
        free(slots);
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < e->child_count; i++)
        rc = zm__element_index(e->children[i]);
    if (rc == 0)
        rc = zm__element_index(e->categories);
    if (rc == 0)
        rc = zm__element_index(e->index);
    return rc;
}

const zm_element *zm_element_child(const zm_element *e, const char *name, size_t n)
{
    if (e == NULL)
        return NULL;
    if (e->children_by_name == NULL) {
        for (size_t i = 0; i < e->child_count; i++)
            if (strlen(e->children[i]->name) == n && memcmp(e->children[i]->name, name, n) == 0)
                return e->children[i];
        return NULL;
    }
    /* The first of the names equal to name[0 .. n). */
    size_t low = 0, high = e->child_count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        const char *m = e->children_by_name[middle]->name;
        size_t length = strlen(m);
        int c = memcmp(m, name, length < n ? length : n);
        if (c < 0 || (c == 0 && length < n))
            low = middle + 1;
        else
            high = middle;
    }
    if (low < e->child_count) {
        const char *m = e->children_by_name[low]->name;
        if (strlen(m) == n && memcmp(m, name, n) == 0)
            return e->children_by_name[low];
    }
    return NULL;
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
    const zm_element *c = zm_element_child(e, path, n);
    return c ? find_in(c, rest) : NULL;
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
    source = zm__source_top(source); /* a modality's go in its source's list */
    /* A reason that starts with the path already (an error's): said once. */
    size_t path_length = strlen(path);
    if (strncmp(why, path, path_length) == 0 && strncmp(why + path_length, ": ", 2) == 0)
        why += path_length + 2;
    /* The list only grows: its capacity doubles whenever its count reaches
     * a power of two (100,000 skipped columns are 17 copies). */
    size_t count = source->skipped_count;
    if ((count & (count - 1)) == 0) {
        char **list = realloc(source->skipped_list, (count ? 2 * count : 1) * sizeof *list);
        if (list == NULL)
            return;
        source->skipped_list = list;
    }
    char **list = source->skipped_list;
    size_t n = strlen(path) + strlen(why) + 3;
    char *line = malloc(n);
    if (line == NULL)
        return;
    snprintf(line, n, "%s: %s", path, why);
    list[source->skipped_count++] = line;
}

size_t zm_source_skipped(const zm_source *source, const char *const **lines)
{
    source = zm__source_top((zm_source *)source);
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
            free(parent->children_by_name);
            parent->children_by_name = NULL;
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
        {"obsmap", ZM_AXIS_OBS, ZM_AXIS_NONE}, {"varmap", ZM_AXIS_VAR, ZM_AXIS_NONE},
    };
    for (size_t i = 0; i < root->child_count; i++)
        for (size_t j = 0; j < sizeof parts / sizeof parts[0]; j++)
            if (strcmp(root->children[i]->name, parts[j].name) == 0)
                zm__set_axes(root->children[i], parts[j].first, parts[j].second);
}

/* ---- Names and paths, never cut short ---------------------------------------------- */

void zm__shown_name(const char *name, size_t n, char *out, size_t size)
{
    if (n <= 48)
        snprintf(out, size, "%.*s", (int)n, name);
    else
        snprintf(out, size, "%.48s...(%zu bytes)", name, n);
}

/* A column-order entry may hold any text; a link or member name too may be
 * longer than a store's key can be. A compound's member names may hold '/'
 * (rec-array fields named after groups: "CD4+/CD25 T Reg"). */
static int child_or_member(zm_source *source, const char *parent, const zm_strings *names, size_t i,
                           int member, char *name, char *path)
{
    size_t n = names->offsets[i + 1] - names->offsets[i];
    const char *text = names->bytes + names->offsets[i];
    const char *base = strcmp(parent, "/") == 0 ? "" : parent;
    const char *why = n > ZM_ELEMENT_NAME_MAX ? "a name longer than 255 bytes (a file name's limit)"
                      : n == 0                ? "an empty name"
                      : !member && memchr(text, '/', n) ? "a name holding '/'"
                      : memchr(text, '\0', n)           ? "a name holding a NUL byte"
                                                        : NULL;
    if (why != NULL) {
        char shown[96], where[ZM__PATH_BUFFER];
        zm__shown_name(text, n, shown, sizeof shown);
        snprintf(where, sizeof where, member ? "%s#%s" : "%s/%s", member ? parent : base, shown);
        zm__source_skip(source, where, why);
        return 1;
    }
    memcpy(name, text, n);
    name[n] = '\0';
    /* parent is at most ZM_ELEMENT_PATH_MAX bytes (the caller's), so this fits. */
    snprintf(path, ZM__PATH_BUFFER, "%s/%s", base, name);
    return 0;
}

int zm__child_at(zm_source *source, const char *parent, const zm_strings *names, size_t i,
                 char *name, char *path)
{
    return child_or_member(source, parent, names, i, 0, name, path);
}

int zm__member_at(zm_source *source, const char *dataset, const zm_strings *names, size_t i,
                  char *name)
{
    char where[ZM__PATH_BUFFER];
    return child_or_member(source, dataset, names, i, 1, name, where);
}

const char *zm__string_at(const zm_strings *s, size_t i, char *buffer, size_t size)
{
    size_t n = s->offsets[i + 1] - s->offsets[i];
    snprintf(buffer, size, "%.*s", (int)n, s->bytes + s->offsets[i]);
    return buffer;
}

/* ---- A set of byte strings, each with a text (names, objects read) ---------------- */

static uint64_t set_hash(const void *key, size_t length)
{
    uint64_t h = XXH3_64bits(key, length);
    return h ? h : 1; /* 0 marks an empty slot */
}

static int set_grow(zm__set *set)
{
    size_t capacity = set->capacity ? 2 * set->capacity : 64;
    zm__set_entry *slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < set->capacity; i++) {
        zm__set_entry *e = &set->slots[i];
        if (e->hash == 0)
            continue;
        size_t at = e->hash & (capacity - 1);
        while (slots[at].hash != 0)
            at = (at + 1) & (capacity - 1);
        slots[at] = *e;
    }
    free(set->slots);
    set->slots = slots;
    set->capacity = capacity;
    return 0;
}

int zm__set_add(zm__set *set, const void *key, size_t length, const char *text, const char **found)
{
    if (found)
        *found = NULL;
    /* At most half full: probes stay short. */
    if (2 * (set->count + 1) > set->capacity && set_grow(set) != 0)
        return -ENOMEM;
    uint64_t h = set_hash(key, length);
    size_t at = h & (set->capacity - 1);
    for (;; at = (at + 1) & (set->capacity - 1)) {
        zm__set_entry *e = &set->slots[at];
        if (e->hash == 0)
            break;
        if (e->hash == h && e->length == length && memcmp(e->key, key, length) == 0) {
            if (found)
                *found = e->text;
            return 1;
        }
    }
    zm__set_entry *e = &set->slots[at];
    e->key = malloc(length ? length : 1);
    e->text = text ? strdup(text) : NULL;
    if (e->key == NULL || (text && e->text == NULL)) {
        free(e->key);
        free(e->text);
        memset(e, 0, sizeof *e);
        return -ENOMEM;
    }
    memcpy(e->key, key, length);
    e->length = length;
    e->hash = h;
    set->count++;
    return 0;
}

int zm__set_find(const zm__set *set, const void *key, size_t length)
{
    if (set->capacity == 0)
        return 0;
    uint64_t h = set_hash(key, length);
    for (size_t at = h & (set->capacity - 1);; at = (at + 1) & (set->capacity - 1)) {
        const zm__set_entry *e = &set->slots[at];
        if (e->hash == 0)
            return 0;
        if (e->hash == h && e->length == length && memcmp(e->key, key, length) == 0)
            return 1;
    }
}

void zm__set_free(zm__set *set)
{
    for (size_t i = 0; i < set->capacity; i++) {
        free(set->slots[i].key);
        free(set->slots[i].text);
    }
    free(set->slots);
    memset(set, 0, sizeof *set);
}

int zm__strings_from(size_t count, zm__string_piece at, const void *context, zm_strings *out)
{
    size_t total = 0, length;
    for (size_t i = 0; i < count; i++) {
        at(context, i, &length);
        total += length;
    }
    out->count = count;
    out->offsets = malloc((count + 1) * sizeof *out->offsets);
    out->bytes = malloc(total + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_strings_free(out);
        return -ENOMEM;
    }
    size_t o = 0;
    for (size_t i = 0; i < count; i++) {
        const char *piece = at(context, i, &length);
        out->offsets[i] = o;
        if (length > 0)
            memcpy(out->bytes + o, piece, length);
        o += length;
    }
    out->offsets[count] = o;
    out->bytes[o] = '\0';
    return 0;
}

static const char *zm__name_at(const void *context, size_t i, size_t *length)
{
    const char *name = ((const char *const *)context)[i];
    *length = strlen(name);
    return name;
}

int zm__strings_of_names(const char *const *names, size_t count, zm_strings *out)
{
    return zm__strings_from(count, zm__name_at, names, out);
}

int zm__strings_add(zm__strings_builder *b, const char *text, size_t length)
{
    if (b->s.offsets == NULL || b->s.count + 1 >= b->items) {
        size_t items = b->items ? 2 * b->items : 64;
        uint64_t *offsets = realloc(b->s.offsets, items * sizeof *offsets);
        if (offsets == NULL)
            return -ENOMEM;
        if (b->items == 0)
            offsets[0] = 0;
        b->s.offsets = offsets;
        b->items = items;
    }
    uint64_t at = b->s.offsets[b->s.count];
    if (at + length + 1 > b->bytes) {
        size_t bytes = b->bytes ? 2 * b->bytes : 1024;
        while (bytes < at + length + 1)
            bytes *= 2;
        char *grown = realloc(b->s.bytes, bytes);
        if (grown == NULL)
            return -ENOMEM;
        b->s.bytes = grown;
        b->bytes = bytes;
    }
    if (length > 0)
        memcpy(b->s.bytes + at, text, length);
    b->s.offsets[++b->s.count] = at + length;
    b->s.bytes[at + length] = '\0';
    return 0;
}
