/* The store a view makes: its groups, attributes and arrays (each with its
 * Zarr metadata and where its chunks come from), built from the source's
 * elements, with the root's record of the view and Cellucid's priority. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view/view_internal.h"

static zm_store_node *node_new(const char *name, int is_array)
{
    zm_store_node *node = calloc(1, sizeof *node);
    if (node) {
        node->name = strdup(name);
        node->is_array = is_array;
        if (node->name == NULL) {
            free(node);
            return NULL;
        }
    }
    return node;
}

void zm__node_free(zm_store_node *node)
{
    if (node == NULL)
        return;
    for (size_t i = 0; i < node->child_count; i++)
        zm__node_free(node->children[i]);
    free(node->children);
    free(node->children_by_name);
    free(node->field_sizes);
    json_decref((json_t *)node->meta.dtype_fields);
    json_decref(node->attrs);
    free(node->name);
    free(node);
}

static int node_add(zm_store_node *parent, zm_store_node *child)
{
    /* Doubling: 100,000 columns are 17 copies of the list, not 100,000. */
    if (parent->child_count == parent->child_capacity) {
        size_t capacity = parent->child_capacity ? 2 * parent->child_capacity : 4;
        zm_store_node **children = realloc(parent->children, capacity * sizeof *children);
        if (children == NULL)
            return -ENOMEM;
        parent->children = children;
        parent->child_capacity = capacity;
    }
    parent->children[parent->child_count++] = child;
    return 0;
}

static json_t *encoding(const char *type, const char *version)
{
    return json_pack("{s:s, s:s}", "encoding-type", type, "encoding-version", version);
}

/* A key Zarr can hold: no '/', not empty, not "." or "..", not a metadata
 * file's name. */
static int valid_key(const char *name)
{
    return name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..") &&
           strcmp(name, ".zarray") && strcmp(name, ".zgroup") && strcmp(name, ".zattrs") &&
           strcmp(name, ".zmetadata");
}

static void set_chunks(zm_store_node *node, uint64_t rows_per_chunk)
{
    zm_zarr_array_meta *m = &node->meta;
    if (m->rank == 0)
        return;
    uint64_t rows = rows_per_chunk < m->shape[0] ? rows_per_chunk : m->shape[0];
    m->chunks[0] = rows ? rows : 1;
    for (unsigned d = 1; d < m->rank; d++)
        m->chunks[d] = m->shape[d] ? m->shape[d] : 1;
    for (unsigned d = 0; d < m->rank; d++)
        node->grid[d] = m->shape[d] ? (m->shape[d] + m->chunks[d] - 1) / m->chunks[d] : 0;
}

static void set_dtype(zm_store_node *node, zm_dtype dtype)
{
    snprintf(node->meta.dtype, sizeof node->meta.dtype, "%s", zm_dtype_name(dtype));
    node->value_size = dtype.size;
    node->meta.fill = dtype.type_class == ZM_TYPE_FLOAT ? ZM_FILL_ZERO_FLOAT
                    : dtype.type_class == ZM_TYPE_BOOL  ? ZM_FILL_FALSE
                                                        : ZM_FILL_ZERO_INT;
}

struct builder {
    zm_view *view;
    zm_err *err;
};

/* An array node for an array-like element (numbers or strings, any rank). */
static int array_node(struct builder *b, const char *name, const zm_element *e, const zm_array *a,
                      int per_cell, const char *encoding_type, zm_store_node **out)
{
    *out = NULL;
    const zm_array_info *info = zm_array_describe(a);
    zm_store_node *node = node_new(name, 1);
    if (node == NULL)
        return zm_err_set(b->err, -ENOMEM, "out of memory");
    node->element = e;
    node->source = a;
    if (encoding_type)
        node->attrs = encoding(encoding_type, "0.2.0");
    zm_zarr_array_meta *m = &node->meta;
    int string = info->dtype.type_class == ZM_TYPE_STRING;
    if (e->kind == ZM_ELEMENT_SCALAR) {
        m->rank = 0;
        if (string) {
            /* numpy <U{n}: n = the string's code points. */
            zm_strings s;
            int rc = zm_array_read_strings(zm_view_source(b->view), a, NULL, 0, &s, b->err);
            if (rc != 0) {
                zm__node_free(node);
                return rc;
            }
            uint8_t *utf32 = NULL;
            size_t size = 0, points = 0;
            rc = zm_utf32_encode(s.bytes, s.offsets[s.count > 0 ? 1 : 0], &utf32, &size, &points,
                                 b->err);
            zm_strings_free(&s);
            free(utf32);
            if (rc != 0) {
                zm__node_free(node);
                return rc;
            }
            snprintf(m->dtype, sizeof m->dtype, "<U%zu", points);
            m->fill = ZM_FILL_EMPTY_TEXT;
            node->producer = ZM_PRODUCE_STRING_SCALAR;
        } else {
            set_dtype(node, info->dtype);
            node->producer = ZM_PRODUCE_SCALAR;
        }
        *out = node;
        return 0;
    }
    /* The element's shape: a loom (n, 1) attribute is a column of n. */
    m->rank = e->rank;
    memcpy(m->shape, e->shape, sizeof(uint64_t) * e->rank);
    if (per_cell)
        m->shape[0] = b->view->rows;
    /* A dense obsp matrix: its columns are the cells too. */
    if (per_cell && info->rank == 2 && e->axes[1] == ZM_AXIS_OBS && !b->view->identity) {
        m->shape[1] = b->view->rows;
        node->cell_columns = 1;
    }
    uint64_t rows_per_chunk;
    if (string) {
        snprintf(m->dtype, sizeof m->dtype, "|O");
        m->vlen_utf8 = 1;
        m->fill = ZM_FILL_ZERO_INT;
        node->value_size = 1;
        node->producer = per_cell ? ZM_PRODUCE_CELL_STRINGS : ZM_PRODUCE_STRINGS;
        rows_per_chunk = b->view->chunk_bytes / 32; /* about 32 bytes a string */
    } else {
        set_dtype(node, info->dtype);
        node->producer = per_cell ? ZM_PRODUCE_CELL_ROWS : ZM_PRODUCE_ROWS;
        uint64_t row_bytes = node->value_size;
        for (unsigned d = 1; d < m->rank; d++)
            row_bytes *= m->shape[d];
        rows_per_chunk = row_bytes ? b->view->chunk_bytes / row_bytes : b->view->chunk_bytes;
    }
    set_chunks(node, rows_per_chunk ? rows_per_chunk : 1);
    *out = node;
    return 0;
}

static int element_node(struct builder *b, const zm_element *e, const char *name, int is_root_obs,
                        zm_store_node **out);

/* Whether a view carries the source's prefix counts: only full/ of a
 * priority-ordered file (its rows are the file's, its record has the
 * levels they count by). */
static int keeps_prefix_counts(const zm_view *view)
{
    return view->spec.kind == ZM_VIEW_FULL && zm_source_priority(view->source)->prefix_counts;
}

/* The source's priority record describes the source: no view carries it
 * (full/ has its own, made below), nor its prefix counts but full/ of a
 * priority-ordered file. */
static int left_out(const struct builder *b, const zm_element *e)
{
    if (strcmp(e->path, "uns/cellucid/priority") == 0)
        return 1;
    if (strcmp(e->path, "varm/cellucid_prefix_counts") == 0)
        return !keeps_prefix_counts(b->view);
    return 0;
}

static int add_element(struct builder *b, zm_store_node *parent, const zm_element *e,
                       const char *name, int is_root_obs)
{
    if (left_out(b, e))
        return 0;
    zm_store_node *child = NULL;
    int rc = element_node(b, e, name, is_root_obs, &child);
    if (rc == 0 && child && node_add(parent, child) != 0) {
        zm__node_free(child);
        rc = zm_err_set(b->err, -ENOMEM, "out of memory");
    }
    return rc;
}

/* -o index_dtype=int32: whether a sparse matrix's indices and indptr fit
 * int32 in every view. Its indices lie below its minor axis's length and a
 * view's indptr at most the entries stored, so the source's element bounds
 * every view's (a view that would fit is refused too: one rule, said at
 * mount). */
static int index_int32_fits(const zm_element *e, const char *prefix, zm_err *err)
{
    int csr = e->sparse_format == ZM_SPARSE_CSR;
    uint64_t minor = csr ? e->shape[1] : e->shape[0];
    uint64_t stored = zm_array_describe(e->indices)->shape[0];
    if (minor > (uint64_t)INT32_MAX + 1)
        return zm_err_set(err, -EOVERFLOW, "%s%s: index_dtype=int32: its %" PRIu64 " %s do not fit "
                          "int32 indices", prefix, e->path, minor, csr ? "columns" : "rows");
    if (stored > (uint64_t)INT32_MAX)
        return zm_err_set(err, -EOVERFLOW, "%s%s: index_dtype=int32: its %" PRIu64 " entries do "
                          "not fit an int32 indptr", prefix, e->path, stored);
    return 0;
}

static int index_int32_walk(const zm_element *e, const char *prefix, zm_err *err)
{
    if (e->kind == ZM_ELEMENT_SPARSE)
        return index_int32_fits(e, prefix, err);
    for (size_t i = 0; i < e->child_count; i++) {
        int rc = index_int32_walk(e->children[i], prefix, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int zm_view_index_int32_check(zm_source *source, zm_err *err)
{
    int rc = index_int32_walk(zm_source_root(source), "", err);
    for (size_t i = 0; rc == 0 && i < zm_source_modality_count(source); i++) {
        char prefix[ZM_ELEMENT_NAME_MAX + 8];
        snprintf(prefix, sizeof prefix, "mod/%s/", zm_source_modality_name(source, i));
        rc = index_int32_walk(zm_source_root(zm_source_modality(source, i)), prefix, err);
    }
    return rc;
}

static int sparse_node(struct builder *b, const zm_element *e, const char *name, zm_store_node **out)
{
    zm_view_sparse *s = NULL;
    int rc = b->view->spec.index_int32 ? index_int32_fits(e, "", b->err) : 0;
    if (rc == 0)
        rc = zm__sparse_layout(b->view, e, &s, b->err);
    if (rc != 0)
        return rc;
    zm_store_node *group = node_new(name, 0);
    if (group == NULL)
        return zm_err_set(b->err, -ENOMEM, "out of memory");
    int csr = e->sparse_format == ZM_SPARSE_CSR;
    uint64_t shape[2] = {e->shape[0], e->shape[1]};
    for (int d = 0; d < 2; d++)
        if (e->axes[d] == ZM_AXIS_OBS)
            shape[d] = b->view->rows;
    group->attrs = json_pack("{s:s, s:s, s:[I, I]}", "encoding-type", csr ? "csr_matrix" : "csc_matrix",
                             "encoding-version", "0.1.0", "shape", (json_int_t)shape[0],
                             (json_int_t)shape[1]);
    uint64_t nnz = zm__sparse_entries(s);
    static const char *const names[] = {"data", "indices", "indptr"};
    const zm_array *arrays[] = {e->values, e->indices, e->indptr};
    for (int part = 0; rc == 0 && part < 3; part++) {
        zm_store_node *node = node_new(names[part], 1);
        if (node == NULL || node_add(group, node) != 0) {
            zm__node_free(node);
            rc = zm_err_set(b->err, -ENOMEM, "out of memory");
            break;
        }
        node->element = e;
        node->source = arrays[part];
        node->part = (zm_sparse_part)part;
        node->sparse = s;
        node->producer = part == ZM_PART_INDPTR ? ZM_PRODUCE_INDPTR : ZM_PRODUCE_ENTRIES;
        set_dtype(node, zm_array_describe(arrays[part])->dtype);
        if (part != ZM_PART_DATA && b->view->spec.index_int32) {
            /* Made at the source's width, served narrowed (synth). */
            node->index_int32 = 1;
            snprintf(node->meta.dtype, sizeof node->meta.dtype, "<i4");
        }
        node->meta.rank = 1;
        node->meta.shape[0] = part == ZM_PART_INDPTR ? s->majors + 1 : nnz;
        set_chunks(node, b->view->chunk_bytes / node->value_size);
    }
    if (rc != 0) {
        zm__node_free(group);
        return rc;
    }
    *out = group;
    return 0;
}

/* A rec-array as anndata writes it to Zarr: a structured dtype with each
 * string field made fixed-length "<U{n}", n the longest value's UTF-8 bytes
 * (anndata's _to_fixed_length_strings), records packed. */
static int records_node(struct builder *b, const zm_element *e, const char *name,
                        zm_store_node **out)
{
    zm_store_node *node = node_new(name, 1);
    json_t *fields = json_array();
    if (node == NULL || fields == NULL) {
        zm__node_free(node);
        json_decref(fields);
        return zm_err_set(b->err, -ENOMEM, "out of memory");
    }
    node->attrs = encoding("rec-array", "0.2.0");
    node->element = e;
    node->producer = ZM_PRODUCE_RECORDS;
    node->field_sizes = calloc(e->child_count + 1, sizeof *node->field_sizes);
    int rc = node->field_sizes ? 0 : zm_err_set(b->err, -ENOMEM, "out of memory");
    size_t record = 0;
    for (size_t i = 0; rc == 0 && i < e->child_count; i++) {
        const zm_element *f = e->children[i];
        const zm_array_info *info = zm_array_describe(f->values);
        char dtype[32];
        if (info->dtype.type_class == ZM_TYPE_STRING) {
            zm_strings s;
            rc = zm_array_read_strings(zm_view_source(b->view), f->values, NULL, 0, &s, b->err);
            size_t longest = 0;
            for (size_t j = 0; rc == 0 && j < s.count; j++)
                if (s.offsets[j + 1] - s.offsets[j] > longest)
                    longest = s.offsets[j + 1] - s.offsets[j];
            if (rc == 0)
                zm_strings_free(&s);
            snprintf(dtype, sizeof dtype, "<U%zu", longest);
            node->field_sizes[i] = 4 * longest;
        } else {
            snprintf(dtype, sizeof dtype, "%s", zm_dtype_name(info->dtype));
            node->field_sizes[i] = info->dtype.size;
        }
        record += node->field_sizes[i];
        json_array_append_new(fields, json_pack("[s, s]", f->name, dtype));
    }
    if (rc != 0) {
        json_decref(fields);
        zm__node_free(node);
        return rc;
    }
    node->meta.dtype_fields = fields;
    node->meta.record_size = record;
    node->meta.fill = ZM_FILL_ZERO_RECORD;
    snprintf(node->meta.dtype, sizeof node->meta.dtype, "|V%zu", record);
    node->value_size = record;
    node->meta.rank = 1;
    node->meta.shape[0] = e->shape[0];
    set_chunks(node, record ? b->view->chunk_bytes / record : 1);
    *out = node;
    return 0;
}

/* obsmap/NAME of a MuData view: each view cell's 1-based row in the part of
 * modality NAME, 0 where it is none of its cells (uint32, as mudata
 * writes it), from the part's map. NULL *out: e is no modality's map. */
static int obsmap_node(struct builder *b, const zm_element *e, const char *name,
                       zm_store_node **out)
{
    *out = NULL;
    const zm_view *view = b->view;
    size_t part = 0;
    while (part < view->part_count && strcmp(view->part_names[part], name) != 0)
        part++;
    if (part == view->part_count)
        return 0;
    zm_store_node *node = node_new(name, 1);
    if (node == NULL)
        return zm_err_set(b->err, -ENOMEM, "out of memory");
    node->attrs = encoding("array", "0.2.0");
    node->producer = ZM_PRODUCE_OBSMAP;
    node->element = e;
    node->modality = part;
    node->meta.rank = 1;
    node->meta.shape[0] = view->rows;
    set_dtype(node, (zm_dtype){ZM_TYPE_UINT, 4});
    set_chunks(node, view->chunk_bytes / 4);
    *out = node;
    return 0;
}

static int element_node(struct builder *b, const zm_element *e, const char *name, int is_root_obs,
                        zm_store_node **out)
{
    *out = NULL;
    if (!valid_key(name))
        return 0; /* a name Zarr cannot hold: left out */
    if (b->view->part_count > 0 && strncmp(e->path, "obsmap/", 7) == 0 && e->rank == 1)
        return obsmap_node(b, e, name, out);
    int per_cell = e->axes[0] == ZM_AXIS_OBS;
    int rc = 0;
    switch (e->kind) {
    case ZM_ELEMENT_ARRAY:
        return array_node(b, name, e, e->values, per_cell, "array", out);
    case ZM_ELEMENT_STRING_ARRAY:
        return array_node(b, name, e, e->values, per_cell, "string-array", out);
    case ZM_ELEMENT_SCALAR:
        return array_node(b, name, e, e->values, 0,
                          zm_array_describe(e->values)->dtype.type_class == ZM_TYPE_STRING
                              ? "string" : "numeric-scalar", out);
    case ZM_ELEMENT_SPARSE:
        return sparse_node(b, e, name, out);
    case ZM_ELEMENT_RECORDS:
        return records_node(b, e, name, out);
    case ZM_ELEMENT_CATEGORICAL:
    case ZM_ELEMENT_NULLABLE: {
        zm_store_node *group = node_new(name, 0), *first = NULL, *second = NULL;
        if (group == NULL)
            return zm_err_set(b->err, -ENOMEM, "out of memory");
        if (e->kind == ZM_ELEMENT_CATEGORICAL) {
            group->attrs = json_pack("{s:s, s:s, s:b}", "encoding-type", "categorical",
                                     "encoding-version", "0.2.0", "ordered", e->ordered);
            rc = array_node(b, "codes", e, e->values, per_cell, "array", &first);
            if (rc == 0)
                rc = array_node(b, "categories", e->categories, e->categories->values, 0,
                                e->categories->kind == ZM_ELEMENT_STRING_ARRAY ? "string-array" : "array",
                                &second);
        } else {
            group->attrs = encoding(e->encoding_type, "0.1.0");
            if (e->nullable_string && e->na_value)
                json_object_set_new(group->attrs, "na-value", json_string(e->na_value));
            rc = array_node(b, "values", e, e->values, per_cell,
                            e->nullable_string ? "string-array" : "array", &first);
            if (rc == 0)
                rc = array_node(b, "mask", e, e->mask, per_cell, "array", &second);
        }
        if (rc == 0 && (node_add(group, first) != 0 || (first = NULL, node_add(group, second) != 0)))
            rc = zm_err_set(b->err, -ENOMEM, "out of memory");
        else if (rc == 0)
            first = second = NULL;
        zm__node_free(first);
        zm__node_free(second);
        if (rc != 0) {
            zm__node_free(group);
            return rc;
        }
        *out = group;
        return 0;
    }
    case ZM_ELEMENT_DATAFRAME: {
        zm_store_node *group = node_new(name, 0);
        if (group == NULL)
            return zm_err_set(b->err, -ENOMEM, "out of memory");
        const char *index_name = e->index_name && valid_key(e->index_name) ? e->index_name : "_index";
        /* The root obs gains the view's cellucid_original_position: a source
         * column of that name (a file made from a view) gives way to it, so
         * that the store holds one column of each name and the column means
         * what it says: the row's position in this source. */
        const char *own = is_root_obs ? "cellucid_original_position" : NULL;
        json_t *order = json_array();
        for (size_t i = 0; i < e->child_count; i++)
            if (valid_key(e->children[i]->name) && strcmp(e->children[i]->name, index_name) != 0 &&
                (own == NULL || strcmp(e->children[i]->name, own) != 0))
                json_array_append_new(order, json_string(e->children[i]->name));
        if (is_root_obs)
            json_array_append_new(order, json_string("cellucid_original_position"));
        group->attrs = json_pack("{s:s, s:o, s:s, s:s}", "_index", index_name, "column-order", order,
                                 "encoding-type", "dataframe", "encoding-version", "0.2.0");
        if (e->index)
            rc = add_element(b, group, e->index, index_name, 0);
        for (size_t i = 0; rc == 0 && i < e->child_count; i++)
            if (strcmp(e->children[i]->name, index_name) != 0 &&
                (own == NULL || strcmp(e->children[i]->name, own) != 0))
                rc = add_element(b, group, e->children[i], e->children[i]->name, 0);
        if (rc == 0 && is_root_obs) {
            /* Each row's position in the source. */
            zm_store_node *node = node_new("cellucid_original_position", 1);
            if (node == NULL || node_add(group, node) != 0) {
                zm__node_free(node);
                rc = zm_err_set(b->err, -ENOMEM, "out of memory");
            } else {
                node->attrs = encoding("array", "0.2.0");
                node->producer = ZM_PRODUCE_POSITIONS;
                node->element = e;
                node->meta.rank = 1;
                node->meta.shape[0] = b->view->rows;
                set_dtype(node, (zm_dtype){ZM_TYPE_UINT, 4});
                set_chunks(node, b->view->chunk_bytes / 4);
            }
        }
        if (rc != 0) {
            zm__node_free(group);
            return rc;
        }
        *out = group;
        return 0;
    }
    case ZM_ELEMENT_DICT: {
        zm_store_node *group = node_new(name, 0);
        if (group == NULL)
            return zm_err_set(b->err, -ENOMEM, "out of memory");
        group->attrs = encoding(strcmp(e->path, "raw") == 0 ? "raw" : "dict", "0.1.0");
        for (size_t i = 0; rc == 0 && i < e->child_count; i++)
            rc = add_element(b, group, e->children[i], e->children[i]->name, 0);
        if (rc != 0) {
            zm__node_free(group);
            return rc;
        }
        *out = group;
        return 0;
    }
    }
    return 0;
}

/* A 0-d int64 the view makes (the priority record). */
static int constant_node(zm_store_node *parent, const char *name, int64_t value)
{
    zm_store_node *node = node_new(name, 1);
    if (node == NULL || node_add(parent, node) != 0) {
        zm__node_free(node);
        return -ENOMEM;
    }
    node->attrs = encoding("numeric-scalar", "0.2.0");
    node->producer = ZM_PRODUCE_CONSTANT;
    node->constant = value;
    node->meta.rank = 0;
    set_dtype(node, (zm_dtype){ZM_TYPE_INT, 8});
    return 0;
}

static zm_store_node *child(zm_store_node *parent, const char *name)
{
    for (size_t i = 0; parent && i < parent->child_count; i++)
        if (strcmp(parent->children[i]->name, name) == 0)
            return parent->children[i];
    return NULL;
}

static zm_store_node *group_child(zm_store_node *parent, const char *name)
{
    zm_store_node *c = child(parent, name);
    if (c != NULL)
        return c->is_array ? NULL : c;
    c = node_new(name, 0);
    if (c == NULL || node_add(parent, c) != 0) {
        zm__node_free(c);
        return NULL;
    }
    c->attrs = encoding("dict", "0.1.0");
    return c;
}

/* xarray's _ARRAY_DIMENSIONS on every array (docs/mount.md, "xarray"): axis
 * 0 is `row` and axis 1 `column` where the array's place names them (obs,
 * var, obs_2, var_2), any other axis NAME_dim_I (NAME the array's, or of a
 * table outside obs and var its group's: its columns share their rows); a
 * sparse matrix's data and indices are "nnz" and its indptr "indptr_dim_0";
 * a categorical's categories are COLUMN_categories. A source's own _ARRAY_DIMENSIONS is
 * never served: this one replaces it. */
static int set_dims(zm_store_node *node, const char *row, const char *column)
{
    json_t *dims = json_array();
    if (dims == NULL)
        return -ENOMEM;
    for (unsigned d = 0; d < node->meta.rank; d++) {
        const char *named = d == 0 ? row : d == 1 ? column : NULL;
        char own[ZM_ELEMENT_NAME_MAX + 32];
        if (named == NULL)
            snprintf(own, sizeof own, "%s_dim_%u", node->name, d);
        if (json_array_append_new(dims, json_string(named ? named : own)) != 0) {
            json_decref(dims);
            return -ENOMEM;
        }
    }
    if (node->attrs == NULL && (node->attrs = json_object()) == NULL) {
        json_decref(dims);
        return -ENOMEM;
    }
    return json_object_set_new(node->attrs, "_ARRAY_DIMENSIONS", dims) == 0 ? 0 : -ENOMEM;
}

static const char *encoding_of(const zm_store_node *node)
{
    const json_t *type = node->attrs ? json_object_get(node->attrs, "encoding-type") : NULL;
    return type ? json_string_value(type) : NULL;
}

static int dims_under(zm_store_node *node, const char *row, const char *column)
{
    if (node->is_array)
        return set_dims(node, row, column);
    const char *type = encoding_of(node);
    int sparse = type && (!strcmp(type, "csr_matrix") || !strcmp(type, "csc_matrix"));
    int categorical = type && !strcmp(type, "categorical");
    /* A table's rows outside obs and var (a dataframe in uns, a nullable's
     * values and mask): one dimension, the group's. */
    char rows[ZM_ELEMENT_NAME_MAX + 32];
    if (row == NULL && type && (categorical || !strcmp(type, "dataframe") ||
                                !strncmp(type, "nullable-", 9))) {
        snprintf(rows, sizeof rows, "%s_dim_0", node->name);
        row = rows;
    }
    for (size_t i = 0; i < node->child_count; i++) {
        zm_store_node *c = node->children[i];
        int rc;
        if (sparse && c->is_array) {
            rc = set_dims(c, strcmp(c->name, "indptr") ? "nnz" : "indptr_dim_0", NULL);
        } else if (categorical && c->is_array && !strcmp(c->name, "categories")) {
            char own[ZM_ELEMENT_NAME_MAX + 32];
            snprintf(own, sizeof own, "%s_categories", node->name);
            rc = set_dims(c, own, NULL);
        } else {
            rc = dims_under(c, row, column);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* An AnnData's groups (the store's root, a modality's, raw's): which axis
 * each names. A MuData's mod/ is its parts' own (each named at its build). */
static int dims_of_root(zm_store_node *root, int skip_mod)
{
    static const struct {
        const char *group, *row, *column;
    } places[] = {
        {"X", "obs", "var"},       {"layers", "obs", "var"},  {"obs", "obs", NULL},
        {"var", "var", NULL},      {"obsm", "obs", NULL},     {"varm", "var", NULL},
        {"obsp", "obs", "obs_2"},  {"varp", "var", "var_2"},  {"obsmap", "obs", NULL},
        {"varmap", "var", NULL},
    };
    for (size_t i = 0; i < root->child_count; i++) {
        zm_store_node *c = root->children[i];
        if (skip_mod && !strcmp(c->name, "mod"))
            continue;
        if (!c->is_array && !strcmp(c->name, "raw")) {
            int rc = dims_of_root(c, 0);
            if (rc != 0)
                return rc;
            continue;
        }
        const char *row = NULL, *column = NULL;
        for (size_t p = 0; p < sizeof places / sizeof places[0]; p++)
            if (!strcmp(c->name, places[p].group)) {
                row = places[p].row;
                column = places[p].column;
            }
        int rc = dims_under(c, row, column);
        if (rc != 0)
            return rc;
    }
    return 0;
}

const char *zm_view_kind_name(zm_view_kind kind)
{
    static const char *const names[] = {"full", "file", "uniform", "blocks", "stratified", "spatial"};
    return names[kind];
}

int zm__build_store(zm_view *view, zm_err *err)
{
    struct builder b = {view, err};
    const zm_element *root = zm_source_root(view->source);
    zm_store_node *store = node_new("", 0);
    if (store == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    view->root = store;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < root->child_count; i++) {
        const zm_element *e = root->children[i];
        rc = add_element(&b, store, e, e->name, strcmp(e->path, "obs") == 0);
    }
    if (rc != 0)
        return rc;

    /* A MuData's modalities: mod/NAME/, each its part's store. */
    if (view->part_count > 0) {
        zm_store_node *mod = node_new("mod", 0);
        json_t *order = json_array();
        if (mod == NULL || order == NULL || node_add(store, mod) != 0) {
            zm__node_free(mod);
            json_decref(order);
            return zm_err_set(err, -ENOMEM, "out of memory");
        }
        view->mod_group = mod;
        mod->attrs = json_pack("{s:o}", "mod-order", order);
        for (size_t i = 0; i < view->part_count; i++) {
            zm_store_node *root = view->parts[i]->root;
            char *name = strdup(view->part_names[i]);
            if (name == NULL || node_add(mod, root) != 0) {
                free(name);
                return zm_err_set(err, -ENOMEM, "out of memory");
            }
            free(root->name);
            root->name = name;
            json_array_append_new(order, json_string(name));
        }
    }

    /* full/: Cellucid's priority record in uns/cellucid/priority (of the
     * whole store: a modality's rows are no priority order of their own). */
    if (view->spec.kind == ZM_VIEW_FULL && view->owner == NULL) {
        zm_store_node *levels = NULL;
        zm_store_node *uns = group_child(store, "uns");
        zm_store_node *cellucid = uns ? group_child(uns, "cellucid") : NULL;
        zm_store_node *priority = cellucid ? group_child(cellucid, "priority") : NULL;
        if (priority == NULL || priority->child_count > 0)
            return zm_err_set(err, -EINVAL, "uns/cellucid/priority: cannot make full/'s record");
        if (constant_node(priority, "seed", view->spec.seed) ||
            constant_node(priority, "specVersion", ZM_SPEC_VERSION) ||
            constant_node(priority, "nObs", (int64_t)zm_source_n_obs(view->source)))
            return zm_err_set(err, -ENOMEM, "out of memory");
        /* The levels the prefix counts it carries count by. */
        if (keeps_prefix_counts(view) &&
            (rc = element_node(&b, zm_source_priority(view->source)->levels_element, "levels", 0,
                               &levels)) == 0 &&
            node_add(priority, levels) != 0) {
            zm__node_free(levels);
            return zm_err_set(err, -ENOMEM, "out of memory");
        }
        if (rc != 0)
            return rc;
    }

    /* The root says what the store is, so a copy still says it. */
    json_t *v = json_pack("{s:s, s:I, s:I, s:I, s:s}", "method", zm_view_kind_name(view->spec.kind), "nObs",
                          (json_int_t)zm_source_n_obs(view->source), "k", (json_int_t)view->rows,
                          "seed", (json_int_t)view->spec.seed, "digest", view->digest);
    /* The cells the method ran over: the set's record (its name or
     * filter, digest and size). */
    const zm_view_set *set = view->spec.set;
    if (set != NULL && set->record != NULL)
        json_object_set(v, strncmp(set->name, "where/", 6) == 0 ? "where" : "sets", set->record);
    if (view->spec.kind == ZM_VIEW_BLOCKS)
        json_object_set_new(v, "blockSize", json_integer((json_int_t)view->spec.block_size));
    if (view->spec.kind == ZM_VIEW_STRATIFIED) {
        json_object_set_new(v, "field", json_string(view->spec.field));
        json_object_set_new(v, "allocation", json_string(zm_allocation_name(view->spec.allocation)));
        json_object_set_new(v, "minimum", json_integer((json_int_t)view->spec.minimum));
    }
    if (view->spec.kind == ZM_VIEW_SPATIAL) {
        json_t *columns = json_array();
        for (unsigned c = 0; c < view->spec.column_count; c++)
            json_array_append_new(columns, json_integer(view->spec.columns[c]));
        json_object_set_new(v, "embedding", json_string(view->spec.embedding));
        json_object_set_new(v, "columns", columns);
        json_object_set_new(v, "gridSize", json_integer((json_int_t)view->spec.grid_size));
    }
    if (view->spec.kind == ZM_VIEW_FILE)
        json_object_del(v, "seed");
    const zm_source_identity *id = zm_source_get_identity(view->source);
    json_t *src = json_pack("{s:s, s:I, s:I, s:I}", "format",
                            zm_source_format_name(zm_source_get_format(view->source)), "nObs",
                            (json_int_t)zm_source_n_obs(view->source), "nVars",
                            (json_int_t)zm_source_n_vars(view->source), "bytes", (json_int_t)id->size);
    if (view->owner != NULL) {
        /* A modality: its own cells, the view's record beside. */
        size_t i = 0;
        while (i < view->owner->part_count && view->owner->parts[i] != view)
            i++;
        json_object_set_new(v, "modality", json_string(view->owner->part_names[i]));
        /* The source is the root's to say: its size is no modality's. */
        json_object_del(src, "bytes");
        json_object_set_new(src, "format", json_string("modality"));
    }
    int mudata = view->part_count > 0;
    /* A MuData's version is its file's (mudata writes 0.1.0), else 0.1.0. */
    const char *version = mudata && zm_source_modality_version(view->source)
                              ? zm_source_modality_version(view->source) : "0.1.0";
    store->attrs = json_pack("{s:s, s:s, s:{s:o, s:o}}", "encoding-type", mudata ? "MuData" : "anndata",
                             "encoding-version", version, "zarrmount", "view", v, "source", src);
    if (store->attrs != NULL && mudata && zm_source_modality_axis(view->source) > -2)
        json_object_set_new(store->attrs, "axis",
                            json_integer(zm_source_modality_axis(view->source)));
    if (store->attrs == NULL || dims_of_root(store, view->part_count > 0) != 0 ||
        zm__index_store(store) != 0)
        return zm_err_set(err, -ENOMEM, "out of memory");
    return 0;
}
