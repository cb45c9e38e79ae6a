/* The passes of walks: a whole array gathered at once, in spans of source
 * rows, in batches placed in memory or spilled to a file in regions, in
 * bands, or in batches of a renumbered matrix's majors; and chunks cut back
 * from a spilled walk. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth_internal.h"


static int put_block(struct zm_walk *w, uint64_t c, const uint8_t *bytes, size_t size,
                     uint64_t *file_end, zm_err *err)
{
    uint64_t *grown = realloc(w->block_at[c], (w->block_count[c] + 1) * sizeof *grown);
    if (grown == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for a spilled walk of strings");
    w->block_at[c] = grown;
    int rc = zm__write_all(w->fd, bytes, size, *file_end, err);
    if (rc != 0)
        return rc;
    grown[w->block_count[c]++] = *file_end;
    *file_end += STRING_BLOCK;
    return 0;
}

/* The pass of a spilled walk of strings: source rows in file order, in
 * batches; each value appended as a record (its item in the chunk, its
 * length, its bytes) to its chunk's buffer, a full buffer written as one
 * block of the spill file. The daemon holds a batch and a block a chunk. */
int zm__spill_strings_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    zm_err *err = &w->err;
    zm_source *source = zm_view_source(view);
    zm_view_kept kept;
    if (zm_view_kept_get(view, &kept, err) != 0)
        return err->code;
    uint64_t per_row = 1;
    for (unsigned d = 1; d < node->meta.rank; d++)
        per_row *= node->meta.shape[d];
    uint64_t chunk_rows = node->meta.chunks[0], chunks = node->grid[0];
    w->chunk_count = chunks;
    w->block_at = calloc(chunks, sizeof *w->block_at);
    w->block_count = calloc(chunks, sizeof *w->block_count);
    w->block_fill = calloc(chunks, sizeof *w->block_fill);
    uint8_t **buffer = calloc(chunks, sizeof *buffer);
    uint64_t batch = zm__batch_rows(w->synth);
    batch = batch < ((uint64_t)1 << 18) ? batch : (uint64_t)1 << 18;
    uint64_t *rows = malloc(batch * sizeof *rows), *view_rows = malloc(batch * sizeof *view_rows);
    int rc = w->block_at && w->block_count && w->block_fill && buffer && rows && view_rows
                 ? 0
                 : zm_err_set(err, -ENOMEM, "out of memory for a spilled walk of strings");
    if (rc == 0 && (w->fd = zm__spill_file(err)) < 0)
        rc = err->code;
    uint64_t n = zm_source_n_obs(source), file_end = 0, cursor = zm_view_kept_seek(&kept, 0);
    for (uint64_t p0 = 0; rc == 0 && p0 < n; p0 += batch) {
        uint64_t p1 = n - p0 < batch ? n : p0 + batch, p, v;
        size_t count = 0;
        while (zm_view_kept_next(&kept, &cursor, p1, &p, &v)) {
            rows[count] = p;
            view_rows[count++] = v;
        }
        if (count == 0)
            continue;
        zm_strings got;
        rc = zm_array_read_strings(source, node->source, rows, count, &got, err);
        for (size_t i = 0; rc == 0 && i < count; i++) {
            uint64_t v = view_rows[i], c = v / chunk_rows;
            for (uint64_t j = 0; rc == 0 && j < per_row; j++) {
                uint64_t g = i * per_row + j;
                uint64_t length = got.offsets[g + 1] - got.offsets[g];
                uint32_t head[2] = {(uint32_t)((v - c * chunk_rows) * per_row + j), (uint32_t)length};
                if (length > UINT32_MAX) {
                    rc = zm_err_set(err, -EFBIG, "a string of %" PRIu64 " bytes", length);
                    break;
                }
                if (buffer[c] == NULL && (buffer[c] = malloc(STRING_BLOCK)) == NULL) {
                    rc = zm_err_set(err, -ENOMEM, "out of memory for a spilled walk of strings");
                    break;
                }
                /* The record, across as many blocks as it takes. */
                const uint8_t *parts[2] = {(const uint8_t *)head, (const uint8_t *)got.bytes + got.offsets[g]};
                uint64_t sizes[2] = {sizeof head, length};
                for (int k = 0; rc == 0 && k < 2; k++) {
                    uint64_t done = 0;
                    while (rc == 0 && done < sizes[k]) {
                        size_t room = STRING_BLOCK - w->block_fill[c];
                        size_t take = sizes[k] - done < room ? (size_t)(sizes[k] - done) : room;
                        memcpy(buffer[c] + w->block_fill[c], parts[k] + done, take);
                        w->block_fill[c] += (uint32_t)take;
                        done += take;
                        if (w->block_fill[c] == STRING_BLOCK) {
                            rc = put_block(w, c, buffer[c], STRING_BLOCK, &file_end, err);
                            w->block_fill[c] = 0;
                        }
                    }
                }
            }
        }
        zm_strings_free(&got);
    }
    /* Each chunk's last, partly filled block. */
    for (uint64_t c = 0; rc == 0 && c < chunks; c++)
        if (w->block_fill[c] > 0)
            rc = put_block(w, c, buffer[c], w->block_fill[c], &file_end, err);
    for (uint64_t c = 0; buffer && c < chunks; c++)
        free(buffer[c]);
    free(buffer);
    free(rows);
    free(view_rows);
    return zm__end_pass(w, rc, 1, file_end);
}

/* The strings of chunk c of a spilled walk, items in view order: offsets
 * (items + 1) and bytes, malloc'd. Items no record names stay empty. */
int zm__cut_spilled_strings(const struct zm_walk *w, uint64_t c, uint64_t items,
                               uint64_t **offsets_out, char **bytes_out, zm_err *err)
{
    uint32_t blocks = w->block_count[c];
    size_t stream_size = blocks == 0 ? 0 : (size_t)(blocks - 1) * STRING_BLOCK +
                                                (w->block_fill[c] ? w->block_fill[c] : STRING_BLOCK);
    uint8_t *stream = malloc(stream_size + 1);
    uint64_t *start = calloc(items + 1, sizeof *start), *length = calloc(items + 1, sizeof *length);
    int rc = stream && start && length ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t b = 0; rc == 0 && b < blocks; b++) {
        size_t size = b + 1 < blocks ? STRING_BLOCK : stream_size - (size_t)b * STRING_BLOCK;
        rc = zm__read_all(w->fd, stream + (size_t)b * STRING_BLOCK, size, w->block_at[c][b], err);
    }
    uint64_t total = 0;
    for (size_t at = 0; rc == 0 && at < stream_size;) {
        uint32_t head[2];
        if (stream_size - at < sizeof head) {
            rc = zm_err_set(err, -EIO, "internal error: a spilled walk of strings ends in a record");
            break;
        }
        memcpy(head, stream + at, sizeof head);
        at += sizeof head;
        if (head[0] >= items || head[1] > stream_size - at) {
            rc = zm_err_set(err, -EIO, "internal error: a spilled walk of strings names item %u of %"
                            PRIu64, head[0], items);
            break;
        }
        start[head[0]] = at;
        length[head[0]] = head[1];
        total += head[1];
        at += head[1];
    }
    char *bytes = rc == 0 ? malloc(total + 1) : NULL;
    if (rc == 0 && bytes == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        uint64_t at = 0;
        for (uint64_t k = 0; k < items; k++) {
            memcpy(bytes + at, stream + start[k], length[k]);
            start[k] = at; /* now the offset in bytes */
            at += length[k];
        }
        start[items] = at;
        *offsets_out = start;
        *bytes_out = bytes;
        start = NULL;
    }
    free(stream);
    free(start);
    free(length);
    return rc;
}

/* Whether a walk of this array can be spilled: values of a cell are one
 * run of bytes in the array (per-cell rows, or a matrix's entries when only
 * its rows are cells). */
int zm__can_spill(const zm_store_node *node)
{
    if (node->producer == ZM_PRODUCE_CELL_ROWS)
        return !node->cell_columns;
    if (node->producer != ZM_PRODUCE_ENTRIES)
        return 0;
    zm_view_sparse_info s;
    zm_view_sparse_axes(node->sparse, &s);
    return s.per_cell_rows && !s.per_cell_columns;
}

/* Where the values of view row v lie in the array, in bytes. */
static void row_extent(const struct zm_walk *w, const zm_view_sparse_info *s, size_t value_size,
                       uint64_t v, uint64_t *start, uint64_t *end)
{
    if (s != NULL) {
        *start = (uint64_t)s->indptr[v] * value_size;
        *end = (uint64_t)s->indptr[v + 1] * value_size;
    } else {
        *start = v * w->row_bytes;
        *end = *start + w->row_bytes;
    }
}

/* Source rows a span read takes at most, in bytes. */
#define SPAN_BYTES ((uint64_t)8 << 20)
#define SPAN_ROWS ((uint64_t)1 << 20)

/* The pass of an in-memory walk of fixed-size rows in spans of source rows
 * (whole chunks when chunked): a span that is mostly kept is read as one
 * range (its chunks decoded straight into a buffer, a contiguous array read
 * in large pieces) and each kept row copied to its place; a sparse one
 * reads its kept rows only. Listing each row as a range of its own cost
 * about ten times the copy for narrow rows (codes, a float column). */
int zm__span_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w,
                     const zm_view_kept *kept, uint8_t *out, uint64_t v0, uint64_t v1)
{
    zm_err *err = &w->err;
    zm_source *source = zm_view_source(view);
    const zm_array_info *info = zm_array_describe(node->source);
    uint64_t n = zm_source_n_obs(source), rb = w->row_bytes;
    /* As large as a batch of a spilled walk at most: what a walk holds
     * besides its values follows cache_size. */
    uint64_t bytes = zm__batch_bytes(w->synth);
    bytes = SPAN_BYTES < bytes ? SPAN_BYTES : bytes;
    uint64_t span = bytes / rb ? bytes / rb : 1;
    span = span < SPAN_ROWS ? span : SPAN_ROWS;
    uint64_t batch = zm__batch_rows(w->synth);
    span = span < batch ? span : batch;
    if (info->layout == ZM_LAYOUT_CHUNKED && !info->transposed && info->chunk_shape[0] > 0) {
        uint64_t c = info->chunk_shape[0];
        span = span < c ? c : span / c * c;
    }
    uint8_t *buffer = malloc(span * rb);
    uint64_t *rows = malloc(span / 4 * sizeof *rows + 8), *dest = malloc(span / 4 * sizeof *dest + 8);
    int rc = buffer && rows && dest ? 0 : zm_err_set(err, -ENOMEM, "out of memory for a walk");
    uint64_t cursor = zm_view_kept_seek(kept, 0);
    for (uint64_t p0 = 0; rc == 0 && p0 < n; p0 += span) {
        uint64_t p1 = n - p0 < span ? n : p0 + span, count = 0, first = p1, last = p0;
        uint64_t at = cursor, p, v; /* the span's first kept cell */
        while (zm_view_kept_next(kept, &cursor, p1, &p, &v))
            if (v >= v0 && v < v1) {
                count++;
                first = first < p ? first : p;
                last = p;
            }
        if (count == 0)
            continue;
        if (count * 4 < last + 1 - first) { /* few kept: those rows only */
            for (uint64_t c = at, i = 0; zm_view_kept_next(kept, &c, p1, &p, &v);)
                if (v >= v0 && v < v1) {
                    rows[i] = p;
                    dest[i++] = v - v0;
                }
            rc = zm_array_scatter_rows(source, node->source, rows, dest, count, out, ZM_READ_PASS,
                                       err);
            continue;
        }
        /* From the first row kept to the last: no more than a fraction. */
        rc = zm_array_read_rows_flags(source, node->source, first, last + 1 - first, buffer,
                                      ZM_READ_PASS, err);
        for (uint64_t c = at; rc == 0 && zm_view_kept_next(kept, &c, p1, &p, &v);)
            if (v >= v0 && v < v1)
                zm__copy_run(out + (v - v0) * rb, buffer + (p - first) * rb, rb);
    }
    free(buffer);
    free(rows);
    free(dest);
    return rc;
}

/* A spilled walk of fixed-size rows at most this many batches large is made
 * in bands of whole chunks, a batch at most each, a pass over the source a
 * band: a band is written once in view order (read back as it lies, no
 * sort), and a few passes over a column cost less than sorting its rows by
 * chunk twice. */
#define BANDS_MAX 4

static int banded_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w,
                       const zm_view_kept *kept)
{
    zm_err *err = &w->err;
    uint64_t rows = node->meta.shape[0], chunk_rows = node->meta.chunks[0];
    uint64_t band = zm__batch_bytes(w->synth) / (chunk_rows * w->row_bytes) * chunk_rows;
    band = band < chunk_rows ? chunk_rows : band;
    if ((w->fd = zm__spill_file(err)) < 0)
        return err->code;
    w->in_order = 1;
    uint8_t *out = malloc(band * w->row_bytes);
    int rc = out ? 0 : zm_err_set(err, -ENOMEM, "out of memory for a walk");
    for (uint64_t v0 = 0; rc == 0 && v0 < rows; v0 += band) {
        uint64_t v1 = rows - v0 < band ? rows : v0 + band;
        rc = zm__span_walk(view, node, w, kept, out, v0, v1);
        if (rc == 0)
            rc = zm__write_all(w->fd, out, (v1 - v0) * w->row_bytes, v0 * w->row_bytes, err);
    }
    free(out);
    return zm__end_pass(w, rc, 1, w->size);
}

/* The pass of a walk in batches of source rows in file order: into its
 * place in memory (w->bytes), or spilled (see struct zm_walk). Either way
 * the row lists are a batch's, not the array's. */
int zm__batch_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    int spill = w->bytes == NULL;
    zm_err *err = &w->err;
    zm_source *source = zm_view_source(view);
    zm_view_sparse_info sparse, *s = NULL;
    if (node->producer == ZM_PRODUCE_ENTRIES) {
        int rc = zm_view_sparse_get(view, node->sparse, &sparse, err);
        if (rc != 0)
            return rc;
        s = &sparse;
    }
    zm_view_kept kept;
    if (zm_view_kept_get(view, &kept, err) != 0)
        return err->code;
    if (!spill && s == NULL)
        return zm__span_walk(view, node, w, &kept, w->bytes, 0, node->meta.shape[0]);
    if (spill && s == NULL && w->size <= BANDS_MAX * zm__batch_bytes(w->synth))
        return banded_walk(view, node, w, &kept);
    size_t value_size = node->value_size;
    uint64_t region = node->meta.chunks[0] * w->row_bytes, regions = node->grid[0];
    if (spill && (w->fd = zm__spill_file(err)) < 0)
        return err->code;
    /* Taken once: a batch's rows and (spilled) bytes. */
    size_t batch = (size_t)zm__batch_rows(w->synth);
    size_t capacity = spill ? (size_t)zm__batch_bytes(w->synth) : SIZE_MAX;
    uint64_t *rows = malloc(batch * sizeof *rows);
    uint64_t *dest = malloc(batch * sizeof *dest);
    zm_range *ranges = s ? malloc(batch * sizeof *ranges) : NULL;
    /* Spilled: where each row of the batch lies in the array, its length
     * and the chunk it starts in (looked up once, in file order). */
    uint64_t *where = spill ? malloc(batch * sizeof *where) : NULL;
    uint64_t *lengths = spill ? malloc(batch * sizeof *lengths) : NULL;
    uint32_t *chunk_of = spill ? malloc(batch * sizeof *chunk_of) : NULL;
    double per_region = 1.0 / (double)region;
    uint64_t *filled = spill ? calloc(regions, sizeof *filled) : NULL;
    uint64_t *counts = spill ? malloc(regions * sizeof *counts) : NULL;
    uint64_t *at = spill ? malloc(regions * sizeof *at) : NULL;
    uint8_t *staging = spill ? malloc(capacity) : NULL, *sorted = spill ? malloc(capacity) : NULL;
    int rc = rows && dest && (ranges || !s) &&
                     (!spill || (filled && counts && at && staging && sorted && where && lengths && chunk_of))
                 ? 0
                 : zm_err_set(err, -ENOMEM, "out of memory for a walk");
    uint64_t n = zm_source_n_obs(source), cursor = zm_view_kept_seek(&kept, 0);
    for (int more = 1; rc == 0 && more;) {
        /* The next batch: kept source rows in file order. */
        size_t count = 0;
        uint64_t bytes = 0, p, v;
        while (count < batch) {
            /* The view's pointers are read in random order: ask ahead. */
            uint64_t ahead = zm_view_kept_ahead(&kept, cursor, 16);
            if (s && ahead != ZM_VIEW_NOT_KEPT) {
                __builtin_prefetch(&s->indptr[ahead]);
                if (s->source_start)
                    __builtin_prefetch(&s->source_start[ahead]);
            }
            uint64_t here = cursor;
            if (!(more = zm_view_kept_next(&kept, &cursor, n, &p, &v)))
                break;
            /* The row's source entries: by source row, or (a subsample's
             * pointers) by view row, as long as its view row. */
            uint64_t from = 0, to = 0;
            if (s && s->source_start) {
                from = (uint64_t)s->source_start[v];
                to = from + (uint64_t)(s->indptr[v + 1] - s->indptr[v]);
            } else if (s) {
                from = (uint64_t)s->source_indptr[p];
                to = (uint64_t)s->source_indptr[p + 1];
            }
            uint64_t length = s ? (to - from) * value_size : w->row_bytes;
            if (count > 0 && bytes + length > capacity) {
                cursor = here; /* the next batch's first */
                break;
            }
            rows[count] = p;
            if (spill) {
                dest[count] = s ? bytes / value_size : count;
                uint64_t a = s ? (uint64_t)s->indptr[v] * value_size : v * w->row_bytes;
                uint64_t c = (uint64_t)((double)a * per_region);
                while (c > 0 && c * region > a)
                    c--;
                while ((c + 1) * region <= a)
                    c++;
                where[count] = a;
                lengths[count] = length;
                chunk_of[count] = (uint32_t)c;
            } else
                dest[count] = s ? (uint64_t)s->indptr[v] : v;
            if (s)
                ranges[count] = (zm_range){from, to};
            count++;
            bytes += length;
        }
        if (count == 0)
            break;
        if (!spill) { /* each row straight into its place */
            rc = s ? zm_array_scatter_ranges(source, node->source, ranges, dest, count, w->bytes,
                                             ZM_READ_PASS, err)
                   : zm_array_scatter_rows(source, node->source, rows, dest, count, w->bytes,
                                           ZM_READ_PASS, err);
            continue;
        }
        if (bytes > capacity) { /* one row larger than a batch */
            uint8_t *a = realloc(staging, bytes), *b = a ? realloc(sorted, bytes) : NULL;
            staging = a ? a : staging;
            sorted = b ? b : sorted;
            if (!a || !b) {
                rc = zm_err_set(err, -ENOMEM, "out of memory for a %" PRIu64 "-byte row", bytes);
                break;
            }
            capacity = bytes;
        }
        rc = s ? zm_array_scatter_ranges(source, node->source, ranges, dest, count, staging,
                                         ZM_READ_PASS, err)
               : zm_array_scatter_rows(source, node->source, rows, dest, count, staging,
                                       ZM_READ_PASS, err);
        if (rc != 0)
            break;
        /* Sorted by region, in file order within each (a counting sort),
         * rows across a region's edge split in two. */
        memset(counts, 0, regions * sizeof *counts);
        for (int copy = 0; copy < 2; copy++) {
            uint64_t from = 0;
            for (size_t i = 0; i < count; i++) {
                uint64_t a = where[i], b = a + lengths[i], c = chunk_of[i];
                for (; a < b; c++) { /* once for most rows: they lie in one chunk */
                    uint64_t end = (c + 1) * region < b ? (c + 1) * region : b;
                    if (copy) {
                        zm__copy_run(sorted + at[c], staging + from, end - a);
                        at[c] += end - a;
                    } else {
                        counts[c] += end - a;
                    }
                    from += end - a;
                    a = end;
                }
            }
            if (!copy)
                for (uint64_t c = 0, sum = 0; c < regions; c++) {
                    at[c] = sum;
                    sum += counts[c];
                }
        }
        for (uint64_t c = 0; rc == 0 && c < regions; c++) {
            if (counts[c] == 0)
                continue;
            if (filled[c] + counts[c] > region) {
                rc = zm_err_set(err, -EIO, "internal error: chunk %" PRIu64 " of a spilled walk overflows",
                                c);
                break;
            }
            rc = zm__write_all(w->fd, sorted + at[c] - counts[c], counts[c], c * region + filled[c], err);
            filled[c] += counts[c];
        }
    }
    /* Every region holds its chunk's bytes. */
    for (uint64_t c = 0; rc == 0 && spill && c < regions; c++) {
        uint64_t expect = w->size - c * region < region ? w->size - c * region : region;
        if (filled[c] != expect)
            rc = zm_err_set(err, -EIO, "internal error: chunk %" PRIu64 " of a spilled walk holds %"
                            PRIu64 " bytes, not %" PRIu64, c, filled[c], expect);
    }
    free(rows);
    free(dest);
    free(ranges);
    free(where);
    free(lengths);
    free(chunk_of);
    free(filled);
    free(counts);
    free(at);
    free(staging);
    free(sorted);
    return zm__end_pass(w, rc, spill, w->size);
}

/* Rows [from, to) (along dimension 0) of a spilled walk into out: the
 * chunk's region read back, each view row put in place in source order. */
int zm__cut_spilled(zm_view *view, const zm_store_node *node, struct zm_walk *w, uint64_t from,
                       uint64_t to, uint8_t *out, zm_err *err)
{
    zm_view_sparse_info sparse, *s = NULL;
    if (node->producer == ZM_PRODUCE_ENTRIES) {
        int rc = zm_view_sparse_get(view, node->sparse, &sparse, err);
        if (rc != 0)
            return rc;
        s = &sparse;
    }
    uint64_t a0 = from * w->row_bytes, a1 = to * w->row_bytes, length = a1 - a0;
    if (length == 0)
        return 0;
    /* The view rows with values in [from, to). */
    uint64_t first = from, last = to;
    if (s != NULL) {
        uint64_t lo = 0, hi = s->rows;
        while (lo < hi) { /* the first row ending past from */
            uint64_t mid = lo + (hi - lo) / 2;
            if ((uint64_t)s->indptr[mid + 1] <= from)
                lo = mid + 1;
            else
                hi = mid;
        }
        first = last = lo;
        while (last < s->rows && (uint64_t)s->indptr[last] < to)
            last++;
    }
    uint8_t *region = malloc(length);
    pair *pairs = last > first ? zm__sorted_rows(view, first, last) : NULL;
    int rc = region && (pairs || last == first) ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = zm__read_all(w->fd, region, length, a0, err);
    uint64_t taken = 0;
    for (uint64_t i = 0; rc == 0 && i < last - first; i++) {
        uint64_t a, b;
        row_extent(w, s, node->value_size, first + pairs[i].slot, &a, &b);
        a = a < a0 ? a0 : a;
        b = b > a1 ? a1 : b;
        if (b <= a)
            continue;
        zm__copy_run(out + (a - a0), region + taken, b - a);
        taken += b - a;
    }
    if (rc == 0 && taken != length)
        rc = zm_err_set(err, -EIO, "internal error: a spilled chunk of %" PRIu64
                        " bytes gave back %" PRIu64, length, taken);
    free(region);
    free(pairs);
    return rc;
}

/* Whether a walk is of a sparse matrix whose columns are cells too (obsp,
 * or a CSC matrix of cells): its majors' entries are filtered and
 * renumbered, so each major's run of the view is made from its source run
 * as a whole (entries_chunk). */
int zm__renumbered(const zm_store_node *node)
{
    if (node->producer != ZM_PRODUCE_ENTRIES)
        return 0;
    zm_view_sparse_info s;
    zm_view_sparse_axes(node->sparse, &s);
    return s.per_cell_columns;
}

/* The walk of a renumbered matrix in batches of the view's majors: each
 * batch's entries are one run of the array (the view keeps a major's
 * entries together, majors in order), made by entries_chunk into their
 * place in memory (w->bytes) or written there in a spill file. The batches
 * bound what a walk holds at once. A CSC matrix of cells (genes as majors,
 * in source order) is one pass over the source; obsp (cells as majors, in
 * view order) reads its source chunks again for each batch. */
int zm__in_order_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    zm_err *err = &w->err;
    zm_view_sparse_info s;
    int rc = zm_view_sparse_get(view, node->sparse, &s, err);
    if (rc != 0)
        return rc;
    size_t size = node->value_size;
    int spill = w->bytes == NULL;
    if (spill && (w->fd = zm__spill_file(err)) < 0)
        return err->code;
    w->in_order = spill;
    uint8_t *buffer = NULL;
    size_t capacity = 0;
    uint64_t limit = zm__batch_bytes(w->synth) / 4; /* source entries a batch takes */
    for (uint64_t m0 = 0; rc == 0 && m0 < s.rows;) {
        uint64_t m1 = m0, entries = 0;
        while (m1 < s.rows && (m1 == m0 || entries < limit)) {
            uint64_t start, end;
            zm_view_source_range(&s, m1, &start, &end);
            entries += end - start;
            m1++;
        }
        uint64_t e0 = (uint64_t)s.indptr[m0], e1 = (uint64_t)s.indptr[m1];
        if (e1 > e0) {
            uint8_t *out = w->bytes ? w->bytes + e0 * size : NULL;
            if (out == NULL) {
                if ((e1 - e0) * size > capacity) {
                    uint8_t *grown = realloc(buffer, (e1 - e0) * size);
                    if (grown == NULL) {
                        rc = zm_err_set(err, -ENOMEM, "out of memory for a walk");
                        break;
                    }
                    buffer = grown;
                    capacity = (e1 - e0) * size;
                }
                out = buffer;
            }
            rc = zm__entries_chunk(view, node, e0, e1, out, 0, err);
            if (rc == 0 && spill)
                rc = zm__write_all(w->fd, out, (e1 - e0) * size, e0 * size, err);
        }
        m0 = m1;
    }
    free(buffer);
    return zm__end_pass(w, rc, spill, w->size);
}
