/* The file's default block size B0 for the blocks method (subsampling spec,
 * "blocks"): about four chunks of the dominant per-cell array, from the
 * layout alone. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

/* A chunked array with a filter is read by chunks; anything else (stored in
 * one piece, or unfiltered chunks) is read byte by byte. */
static int read_by_chunks(const zm_array *array)
{
    const zm_array_info *info = zm_array_describe(array);
    return info->layout == ZM_LAYOUT_CHUNKED && info->filter_count > 0;
}

/* The extent of an array's chunk along the cells. */
static uint64_t chunk_rows(const zm_array *array)
{
    const zm_array_info *info = zm_array_describe(array);
    return info->chunk_shape[info->transposed ? 1 : 0];
}

/* ceil(65536 / bytes per cell), for arrays read byte by byte. */
static uint64_t bytes_rule(uint64_t numerator_cells, uint64_t bytes_total)
{
    /* bytes per cell = bytes_total / numerator_cells, so B = ceil(65536 ·
     * cells / bytes_total). */
    if (bytes_total == 0)
        return 1;
    unsigned __int128 b = ((unsigned __int128)65536 * numerator_cells + bytes_total - 1) / bytes_total;
    return b < 1 ? 1 : b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

/* Whether the first stored values of a float matrix include a negative one:
 * scaled data (scanpy's scale), which the default expression rule passes over
 * for raw.X. */
static int looks_scaled(zm_source *source, const zm_element *m)
{
    const zm_array *values = m->values;
    const zm_array_info *info = zm_array_describe(values);
    if (info->dtype.type_class != ZM_TYPE_FLOAT || info->rank == 0 || info->shape[0] == 0)
        return 0;
    uint64_t rows = m->kind == ZM_ELEMENT_SPARSE ? (info->shape[0] < 4096 ? info->shape[0] : 4096) : 1;
    uint64_t count = rows * zm_array_row_bytes(values) / info->dtype.size;
    uint8_t *buffer = malloc(rows * zm_array_row_bytes(values) + 1);
    zm_err err;
    int scaled = 0;
    if (buffer && zm_array_read_rows(source, values, 0, rows, buffer, &err) == 0)
        for (uint64_t i = 0; i < count && !scaled; i++)
            scaled = info->dtype.size == 4 ? ((float *)buffer)[i] < 0
                   : info->dtype.size == 8 ? ((double *)buffer)[i] < 0
                                           : 0;
    free(buffer);
    return scaled;
}

/* The expression matrix genes are read from by default (M). */
static const zm_element *expression_matrix(zm_source *source, char *why, size_t size)
{
    const zm_element *named = zm_source_find(source, "uns/cellucid/defaults/expression");
    if (named && named->kind == ZM_ELEMENT_SCALAR &&
        zm_array_describe(named->values)->dtype.type_class == ZM_TYPE_STRING) {
        zm_strings s;
        zm_err err;
        if (zm_array_read_strings(source, named->values, NULL, 0, &s, &err) == 0) {
            char path[256];
            snprintf(path, sizeof path, "%s", s.bytes);
            zm_strings_free(&s);
            if (strncmp(path, "raw.", 4) == 0)
                path[3] = '/';
            const zm_element *m = zm_source_find(source, path);
            if (m) {
                snprintf(why, size, "named by uns/cellucid/defaults/expression");
                return m;
            }
        }
    }
    const zm_element *x = zm_source_find(source, "X");
    const zm_element *raw = zm_source_find(source, "raw/X");
    if (raw && (!x || raw->shape[1] > x->shape[1] || looks_scaled(source, x))) {
        snprintf(why, size, !x ? "raw/X (no X)" : raw->shape[1] > x->shape[1]
                                                      ? "raw/X holds more genes than X"
                                                      : "X holds scaled values");
        return raw;
    }
    if (x) {
        snprintf(why, size, "X");
        return x;
    }
    const zm_element *layers = zm_source_find(source, "layers");
    if (layers && layers->child_count > 0) {
        snprintf(why, size, "the first layer (no X)");
        return layers->children[0];
    }
    return NULL;
}

static int block_size_of(zm_source *source, zm_block_size *out, zm_err *err);

/* A MuData's B0 is its first modality's (mod-order's first): the global
 * cells have no matrix of their own, and the blocks rule's purpose, a block
 * a few of the matrix's chunks, holds for the modality read first. */
int zm_source_default_block_size(zm_source *source, zm_block_size *out, zm_err *err)
{
    if (source->modality_count == 0)
        return block_size_of(source, out, err);
    int rc = block_size_of(source->modalities[0], out, err);
    if (rc != 0)
        return rc;
    const char *name = source->modality_names[0];
    char element[sizeof out->element], explanation[sizeof out->explanation];
    if (out->element[0])
        snprintf(element, sizeof element, "mod/%s/%s", name, out->element);
    else
        snprintf(element, sizeof element, "mod/%s", name);
    snprintf(explanation, sizeof explanation, "the first modality, %s: %s", name, out->explanation);
    memcpy(out->element, element, sizeof element);
    memcpy(out->explanation, explanation, sizeof explanation);
    return 0;
}

static int block_size_of(zm_source *source, zm_block_size *out, zm_err *err)
{
    (void)err;
    memset(out, 0, sizeof *out);
    char why[128] = "";
    const zm_element *m = expression_matrix(source, why, sizeof why);
    uint64_t n = source->n_obs;

    if (m && m->kind == ZM_ELEMENT_SPARSE && m->sparse_format == ZM_SPARSE_CSR) {
        const zm_array_info *indices = zm_array_describe(m->indices);
        uint64_t nnz = indices->shape[0];
        if (nnz > 0 && n > 0) {
            snprintf(out->element, sizeof out->element, "%s/indices", m->path);
            if (read_by_chunks(m->indices)) {
                /* B = max(1, round(4 × chunk / m)), m = nnz / n stored values a
                 * cell: round(4 · chunk · n / nnz), half up, in integers. */
                uint64_t chunk = indices->chunk_shape[0];
                unsigned __int128 b = ((unsigned __int128)8 * chunk * n + nnz) / (2 * (unsigned __int128)nnz);
                out->block_size = b < 1 ? 1 : b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
                out->rule = "csr-index-chunks";
                snprintf(out->explanation, sizeof out->explanation,
                         "M = %s (%s): CSR, index chunks of %" PRIu64 " entries, %.2f values a cell: "
                         "about four index chunks", m->path, why, chunk, (double)nnz / (double)n);
            } else {
                out->block_size = bytes_rule(n, nnz * indices->dtype.size);
                out->rule = "bytes-64KiB";
                snprintf(out->explanation, sizeof out->explanation,
                         "M = %s (%s): CSR whose index is read byte by byte: the cells whose index "
                         "bytes fill 64 KiB", m->path, why);
            }
            return 0;
        }
    }
    if (m && m->kind == ZM_ELEMENT_ARRAY && m->rank == 2) {
        const zm_array_info *info = zm_array_describe(m->values);
        snprintf(out->element, sizeof out->element, "%s", m->path);
        if (read_by_chunks(m->values)) {
            out->block_size = 4 * chunk_rows(m->values);
            out->rule = "dense-chunk-rows";
            snprintf(out->explanation, sizeof out->explanation,
                     "M = %s (%s): dense, chunks of %" PRIu64 " cells: four chunks' rows", m->path,
                     why, chunk_rows(m->values));
        } else {
            out->block_size = bytes_rule(1, info->shape[1] * info->dtype.size);
            out->rule = "bytes-64KiB";
            snprintf(out->explanation, sizeof out->explanation,
                     "M = %s (%s): dense and read byte by byte: the cells whose %" PRIu64
                     " values fill 64 KiB", m->path, why, info->shape[1]);
        }
        return 0;
    }
    /* The obsm array with one row per cell and the most columns. */
    const zm_element *obsm = zm_source_find(source, "obsm"), *best = NULL;
    for (size_t i = 0; obsm && i < obsm->child_count; i++) {
        const zm_element *c = obsm->children[i];
        if (c->kind == ZM_ELEMENT_ARRAY && c->rank == 2 && c->shape[0] == n &&
            (!best || c->shape[1] > best->shape[1]))
            best = c;
    }
    const char *reason = !m ? "no expression matrix" : m->kind == ZM_ELEMENT_SPARSE
                                                           ? (m->sparse_format == ZM_SPARSE_CSC ? "M is CSC" : "M holds no value")
                                                           : "M has another encoding";
    if (best) {
        snprintf(out->element, sizeof out->element, "%s", best->path);
        if (read_by_chunks(best->values)) {
            out->block_size = 4 * chunk_rows(best->values);
            out->rule = "obsm-chunk-rows";
            snprintf(out->explanation, sizeof out->explanation,
                     "%s; the widest obsm array %s has chunks of %" PRIu64 " cells: four chunks' rows",
                     reason, best->path, chunk_rows(best->values));
        } else {
            const zm_array_info *info = zm_array_describe(best->values);
            out->block_size = bytes_rule(1, info->shape[1] * info->dtype.size);
            out->rule = "bytes-64KiB";
            snprintf(out->explanation, sizeof out->explanation,
                     "%s; the widest obsm array %s is read byte by byte: the cells whose values "
                     "fill 64 KiB", reason, best->path);
        }
        return 0;
    }
    out->block_size = 1;
    out->rule = "one";
    snprintf(out->explanation, sizeof out->explanation, "%s and no obsm array: B = 1", reason);
    return 0;
}
