/* `zarrmount inspect FILE [--json]`: the element tree a source presents, how
 * each array is stored and read, and the default block size B0. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "zarrmount/cli.h"
#include "zarrmount/source.h"
#include "zarrmount/tree.h"

static const char *kind_name(zm_element_kind kind)
{
    static const char *const names[] = {
        [ZM_ELEMENT_DICT] = "dict",           [ZM_ELEMENT_ARRAY] = "array",
        [ZM_ELEMENT_STRING_ARRAY] = "strings", [ZM_ELEMENT_SCALAR] = "scalar",
        [ZM_ELEMENT_SPARSE] = "sparse",       [ZM_ELEMENT_DATAFRAME] = "dataframe",
        [ZM_ELEMENT_CATEGORICAL] = "categorical", [ZM_ELEMENT_NULLABLE] = "nullable",
        [ZM_ELEMENT_RECORDS] = "records",
    };
    return names[kind];
}

static const char *layout_name(zm_layout layout)
{
    static const char *const names[] = {
        [ZM_LAYOUT_CONTIGUOUS] = "contiguous", [ZM_LAYOUT_CHUNKED] = "chunked",
        [ZM_LAYOUT_COMPACT] = "compact",       [ZM_LAYOUT_FIELD] = "compound member",
        [ZM_LAYOUT_ATTRIBUTE] = "attribute",   [ZM_LAYOUT_VIRTUAL] = "made by the reader",
    };
    return names[layout];
}

static const char *path_name(zm_data_path path)
{
    return path == ZM_PATH_DIRECT ? "direct" : path == ZM_PATH_HDF5 ? "hdf5" : "memory";
}

static void format_shape(char *buffer, size_t size, unsigned rank, const uint64_t *shape)
{
    size_t at = (size_t)snprintf(buffer, size, "(");
    for (unsigned d = 0; d < rank && at < size; d++)
        at += (size_t)snprintf(buffer + at, size - at, "%s%" PRIu64, d ? ", " : "", shape[d]);
    if (at < size)
        snprintf(buffer + at, size - at, rank == 1 ? ",)" : ")");
}

static void describe_array_text(FILE *out, const char *label, const zm_array *array, int depth)
{
    const zm_array_info *info = zm_array_describe(array);
    char shape[128], chunks[128] = "", filters[256] = "";
    format_shape(shape, sizeof shape, info->rank, info->shape);
    if (info->layout == ZM_LAYOUT_CHUNKED) {
        unsigned storage_rank = info->rank; /* chunk shape is in storage order */
        format_shape(chunks, sizeof chunks, storage_rank, info->chunk_shape);
    }
    size_t at = 0;
    for (unsigned i = 0; i < info->filter_count && at < sizeof filters; i++)
        at += (size_t)snprintf(filters + at, sizeof filters - at, "%s%s", i ? "+" : "",
                               info->filters[i].name);
    fprintf(out, "%*s%s %s %s, %s%s%s%s%s, %s%s%s%s%s%s\n", depth * 2, "", label, zm_dtype_name(info->dtype),
            shape, layout_name(info->layout), chunks[0] ? " " : "", chunks, filters[0] ? ", " : "",
            filters, path_name(info->data_path), info->path_reason ? " (" : "",
            info->path_reason ? info->path_reason : "", info->path_reason ? ")" : "",
            info->transposed ? ", stored transposed" : "", info->big_endian ? ", big-endian" : "");
}

static void print_text(FILE *out, const zm_element *e, int depth)
{
    char shape[128];
    format_shape(shape, sizeof shape, e->rank, e->shape);
    if (e->path[0] != '\0')
        fprintf(out, "%*s%s: %s %s [%s %s] — %s\n", depth * 2, "", e->path, kind_name(e->kind),
                e->kind == ZM_ELEMENT_DICT ? "" : shape, e->encoding_type ? e->encoding_type : "",
                e->encoding_version ? e->encoding_version : "", e->stored_as ? e->stored_as : "");
    int inner = depth + 1;
    switch (e->kind) {
    case ZM_ELEMENT_ARRAY:
    case ZM_ELEMENT_STRING_ARRAY:
    case ZM_ELEMENT_SCALAR:
        describe_array_text(out, "values", e->values, inner);
        break;
    case ZM_ELEMENT_SPARSE:
        fprintf(out, "%*s%s\n", inner * 2, "", e->sparse_format == ZM_SPARSE_CSR ? "CSR" : "CSC");
        describe_array_text(out, "data", e->values, inner);
        describe_array_text(out, "indices", e->indices, inner);
        describe_array_text(out, "indptr", e->indptr, inner);
        break;
    case ZM_ELEMENT_CATEGORICAL:
        describe_array_text(out, "codes", e->values, inner);
        if (e->ordered)
            fprintf(out, "%*sordered\n", inner * 2, "");
        print_text(out, e->categories, inner);
        break;
    case ZM_ELEMENT_NULLABLE:
        describe_array_text(out, "values", e->values, inner);
        describe_array_text(out, "mask", e->mask, inner);
        break;
    case ZM_ELEMENT_DATAFRAME:
        fprintf(out, "%*sindex %s\n", inner * 2, "", e->index_name ? e->index_name : "");
        print_text(out, e->index, inner);
        break;
    default:
        break;
    }
    for (size_t i = 0; i < e->child_count; i++)
        print_text(out, e->children[i], e->path[0] ? inner : depth);
}

static json_t *array_json(const zm_array *array)
{
    const zm_array_info *info = zm_array_describe(array);
    json_t *shape = json_array(), *chunks = json_array(), *filters = json_array();
    for (unsigned d = 0; d < info->rank; d++)
        json_array_append_new(shape, json_integer((json_int_t)info->shape[d]));
    if (info->layout == ZM_LAYOUT_CHUNKED)
        for (unsigned d = 0; d < info->rank; d++)
            json_array_append_new(chunks, json_integer((json_int_t)info->chunk_shape[d]));
    for (unsigned i = 0; i < info->filter_count; i++)
        json_array_append_new(filters, json_pack("{s:i, s:s, s:i}", "id", (int)info->filters[i].id,
                                                 "name", info->filters[i].name, "level",
                                                 (int)info->filters[i].level));
    json_t *o = json_pack("{s:s, s:s, s:o, s:s, s:o, s:o, s:s, s:I, s:b, s:b}", "file", info->file_path,
                          "dtype", zm_dtype_name(info->dtype), "shape", shape, "layout",
                          layout_name(info->layout), "chunks", chunks, "filters", filters, "dataPath",
                          path_name(info->data_path), "storageBytes", (json_int_t)info->storage_bytes,
                          "transposed", info->transposed, "bigEndian", info->big_endian);
    if (info->path_reason)
        json_object_set_new(o, "dataPathReason", json_string(info->path_reason));
    if (info->layout == ZM_LAYOUT_CONTIGUOUS && info->data_path == ZM_PATH_DIRECT)
        json_object_set_new(o, "fileOffset", json_integer((json_int_t)info->file_offset));
    return o;
}

static json_t *element_json(const zm_element *e)
{
    json_t *shape = json_array();
    for (unsigned d = 0; d < e->rank; d++)
        json_array_append_new(shape, json_integer((json_int_t)e->shape[d]));
    json_t *o = json_pack("{s:s, s:s, s:o}", "path", e->path, "kind", kind_name(e->kind), "shape", shape);
    if (e->encoding_type)
        json_object_set_new(o, "encodingType", json_string(e->encoding_type));
    if (e->encoding_version)
        json_object_set_new(o, "encodingVersion", json_string(e->encoding_version));
    if (e->stored_as)
        json_object_set_new(o, "storedAs", json_string(e->stored_as));
    static const char *const axes[] = {"none", "obs", "var", "raw-var"};
    json_object_set_new(o, "axes", json_pack("[s, s]", axes[e->axes[0]], axes[e->axes[1]]));
    switch (e->kind) {
    case ZM_ELEMENT_ARRAY:
    case ZM_ELEMENT_STRING_ARRAY:
    case ZM_ELEMENT_SCALAR:
        json_object_set_new(o, "values", array_json(e->values));
        break;
    case ZM_ELEMENT_SPARSE:
        json_object_set_new(o, "format", json_string(e->sparse_format == ZM_SPARSE_CSR ? "csr" : "csc"));
        json_object_set_new(o, "data", array_json(e->values));
        json_object_set_new(o, "indices", array_json(e->indices));
        json_object_set_new(o, "indptr", array_json(e->indptr));
        break;
    case ZM_ELEMENT_CATEGORICAL:
        json_object_set_new(o, "codes", array_json(e->values));
        json_object_set_new(o, "categories", element_json(e->categories));
        json_object_set_new(o, "ordered", json_boolean(e->ordered));
        break;
    case ZM_ELEMENT_NULLABLE:
        json_object_set_new(o, "values", array_json(e->values));
        json_object_set_new(o, "mask", array_json(e->mask));
        break;
    case ZM_ELEMENT_DATAFRAME:
        json_object_set_new(o, "indexName", json_string(e->index_name ? e->index_name : ""));
        json_object_set_new(o, "index", element_json(e->index));
        break;
    default:
        break;
    }
    if (e->kind == ZM_ELEMENT_DICT || e->kind == ZM_ELEMENT_DATAFRAME || e->kind == ZM_ELEMENT_RECORDS) {
        json_t *children = json_array();
        for (size_t i = 0; i < e->child_count; i++)
            json_array_append_new(children, element_json(e->children[i]));
        json_object_set_new(o, e->kind == ZM_ELEMENT_DICT ? "children"
                               : e->kind == ZM_ELEMENT_RECORDS ? "fields" : "columns", children);
    }
    return o;
}

int zm_inspect_main(int argc, char **argv, FILE *out)
{
    const char *file = NULL;
    int as_json = 0;
    zm_source_options options = {0};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = 1;
        else if (strcmp(argv[i], "--layout") == 0 && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "anndata") || !strcmp(argv[i + 1], "mudata")))
            options.layout_anndata = strcmp(argv[++i], "anndata") == 0;
        else if (argv[i][0] == '-' || file != NULL) {
            fprintf(stderr, "zarrmount inspect: unexpected argument '%s'\n"
                            "usage: zarrmount inspect FILE [--json] [--layout anndata]\n", argv[i]);
            return ZM_EXIT_REFUSED;
        } else
            file = argv[i];
    }
    if (file == NULL) {
        fprintf(stderr, "usage: zarrmount inspect FILE [--json] [--layout anndata]\n");
        return ZM_EXIT_REFUSED;
    }
    zm_source *source;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_source_open(file, &options, &source, &err);
    if (rc != 0) {
        fprintf(stderr, "zarrmount inspect: %s\n", err.reason);
        return rc == -ENOMEM ? ZM_EXIT_FAILURE : ZM_EXIT_REFUSED;
    }
    zm_block_size block;
    rc = zm_source_default_block_size(source, &block, &err);
    const char *const *skipped;
    size_t skipped_count = zm_source_skipped(source, &skipped);
    if (as_json) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:I}", "source", file, "format",
                              zm_source_format_name(zm_source_get_format(source)), "nObs",
                              (json_int_t)zm_source_n_obs(source), "nVars",
                              (json_int_t)zm_source_n_vars(source));
        json_object_set_new(o, "container", json_string(zm_source_container(source)));
        if (zm_source_zarr_format(source) > 0)
            json_object_set_new(o, "zarrFormat", json_integer(zm_source_zarr_format(source)));
        json_object_set_new(o, "elements", element_json(zm_source_root(source)));
        if (rc == 0)
            json_object_set_new(o, "defaultBlockSize",
                                json_pack("{s:I, s:s, s:s, s:s}", "blockSize", (json_int_t)block.block_size,
                                          "rule", block.rule, "element", block.element, "explanation",
                                          block.explanation));
        json_t *priority = zm_tree_priority_json(source);
        if (priority != NULL)
            json_object_set_new(o, "priority", priority);
        if (zm_source_modality_count(source) > 0) {
            json_t *mods = json_array();
            for (size_t i = 0; i < zm_source_modality_count(source); i++) {
                zm_source *m = zm_source_modality(source, i);
                json_t *mod = json_pack("{s:s, s:I, s:I}", "name",
                                        zm_source_modality_name(source, i), "nObs",
                                        (json_int_t)zm_source_n_obs(m), "nVars",
                                        (json_int_t)zm_source_n_vars(m));
                json_object_set_new(mod, "elements", element_json(zm_source_root(m)));
                json_array_append_new(mods, mod);
            }
            json_object_set_new(o, "modalities", mods);
        }
        json_t *list = json_array();
        for (size_t i = 0; i < skipped_count; i++)
            json_array_append_new(list, json_string(skipped[i]));
        json_object_set_new(o, "skipped", list);
        json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', out);
        json_decref(o);
    } else {
        char container[48] = "";
        if (zm_source_zarr_format(source) > 0)
            snprintf(container, sizeof container, " (%s, Zarr v%d)", zm_source_container(source),
                     zm_source_zarr_format(source));
        fprintf(out, "%s: %s%s, %" PRIu64 " cells × %" PRIu64 " genes\n", file,
                zm_source_format_name(zm_source_get_format(source)), container,
                zm_source_n_obs(source), zm_source_n_vars(source));
        print_text(out, zm_source_root(source), 0);
        for (size_t i = 0; i < zm_source_modality_count(source); i++) {
            zm_source *m = zm_source_modality(source, i);
            fprintf(out, "modality %s (mod/%s): %" PRIu64 " cells × %" PRIu64 " genes\n",
                    zm_source_modality_name(source, i), zm_source_modality_name(source, i),
                    zm_source_n_obs(m), zm_source_n_vars(m));
            print_text(out, zm_source_root(m), 1);
        }
        if (rc == 0)
            fprintf(out, "default block size B0 = %" PRIu64 " (rule %s, from %s): %s\n",
                    block.block_size, block.rule, block.element, block.explanation);
        const zm_priority *p = zm_source_priority(source);
        if (p->verified)
            fprintf(out, "priority: verified, the rows are seed %" PRIu32 "'s priority order%s%s%s\n",
                    p->seed, p->prefix_counts ? " (a gene-major X with prefix counts)" : "",
                    p->note[0] ? "; " : "", p->note);
        else if (p->reason[0])
            fprintf(out, "priority: not verified (%s): each row is its own original position\n",
                    p->reason);
        for (size_t i = 0; i < skipped_count; i++)
            fprintf(out, "skipped %s\n", skipped[i]);
    }
    zm_source_close(source);
    return ZM_EXIT_OK;
}
