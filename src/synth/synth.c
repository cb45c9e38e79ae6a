/* The bytes of one chunk of a view's store: rows of per-cell arrays
 * gathered in view order, strings, sparse entries and records, each chunk
 * made alone or cut from its array's walk (walk.c, passes.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/config.h"

#include "synth_internal.h"

static int by_source(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    return (x->source > y->source) - (x->source < y->source);
}

/* Sorts pairs by source (rows of a view: below 2^32) in two passes of a
 * 16-bit radix sort; a few with qsort. */
static void sort_pairs(pair *pairs, uint64_t count)
{
    if (count < 256) {
        qsort(pairs, count, sizeof *pairs, by_source);
        return;
    }
    /* Digits as wide as the largest source row needs, in passes of at most
     * 11 bits: a chunk's rows of ten million cells sort in 3 passes of 8
     * bits, with counts that fit in L1. */
    uint64_t largest = 0;
    for (uint64_t i = 0; i < count; i++)
        largest = pairs[i].source > largest ? pairs[i].source : largest;
    unsigned bits = 1;
    while (bits < 64 && (largest >> bits) != 0)
        bits++;
    unsigned passes = (bits + 10) / 11, width = (bits + passes - 1) / passes;
    size_t buckets = (size_t)1 << width;
    pair *other = malloc(count * sizeof *other);
    size_t *counts = malloc(buckets * sizeof *counts);
    if (other == NULL || counts == NULL) {
        free(other);
        free(counts);
        qsort(pairs, count, sizeof *pairs, by_source);
        return;
    }
    pair *from = pairs, *to = other;
    for (unsigned pass = 0, shift = 0; pass < passes; pass++, shift += width) {
        memset(counts, 0, buckets * sizeof *counts);
        for (uint64_t i = 0; i < count; i++)
            counts[(from[i].source >> shift) & (buckets - 1)]++;
        size_t at = 0;
        for (size_t d = 0; d < buckets; d++) {
            size_t c = counts[d];
            counts[d] = at;
            at += c;
        }
        for (uint64_t i = 0; i < count; i++)
            to[counts[(from[i].source >> shift) & (buckets - 1)]++] = from[i];
        pair *swap = from;
        from = to;
        to = swap;
    }
    if (from != pairs) /* an odd number of passes */
        memcpy(pairs, from, count * sizeof *pairs);
    free(other);
    free(counts);
}

/* Source rows of view rows [from, to), sorted, with their output slots
 * (NULL: out of memory, for them or for the view's order). */
pair *zm__sorted_rows(const zm_view *view, uint64_t from, uint64_t to)
{
    zm_err err;
    const uint32_t *order = zm_view_order(view, &err);
    pair *pairs = order ? malloc((to - from ? to - from : 1) * sizeof *pairs) : NULL;
    if (pairs == NULL)
        return NULL;
    zm_view_kept kept;
    if (from == 0 && to == zm_view_rows(view) && to > 4096 &&
        zm_view_kept_get((zm_view *)view, &kept, &err) == 0) {
        /* Every row of the view (a walk): the view's cells in source
         * order, no sort. */
        uint64_t cursor = zm_view_kept_seek(&kept, 0), at = 0, p, v;
        while (at < to && zm_view_kept_next(&kept, &cursor, kept.n, &p, &v))
            pairs[at++] = (pair){p, v};
        return pairs;
    }
    int ascending = 1;
    for (uint64_t i = from; i < to; i++) {
        pairs[i - from] = (pair){order[i], i - from};
        ascending &= i == from || order[i] > order[i - 1];
    }
    if (!ascending)
        sort_pairs(pairs, to - from);
    return pairs;
}

/* Rows [from, to) of a per-cell array in view order, row_bytes each, into out. */
static int cell_rows(zm_view *view, const zm_array *array, uint64_t from, uint64_t to, uint8_t *out,
                     unsigned read_flags, zm_err *err)
{
    uint64_t count = to - from;
    if (count == 0)
        return 0;
    uint64_t *rows = malloc(count * sizeof *rows);
    uint64_t *slots = malloc(count * sizeof *slots);
    int rc = rows && slots ? 0 : zm_err_set(err, -ENOMEM, "out of memory gathering rows");
    pair *pairs = NULL;
    zm_view_kept kept;
    zm_err ignored;
    if (rc == 0 && from == 0 && to == zm_view_rows(view) && to > 4096 &&
        zm_view_kept_get(view, &kept, &ignored) == 0) {
        /* Every row of the view (a walk): its cells in source order,
         * straight into the lists the gather takes (no pairs between: at
         * atlas scale they were a third of a walk's memory). */
        uint64_t cursor = zm_view_kept_seek(&kept, 0), at = 0, p, v;
        while (at < count && zm_view_kept_next(&kept, &cursor, kept.n, &p, &v)) {
            rows[at] = p;
            slots[at++] = v;
        }
    } else if (rc == 0) {
        pairs = zm__sorted_rows(view, from, to);
        if (pairs == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory gathering rows");
        for (uint64_t i = 0; rc == 0 && i < count; i++) {
            rows[i] = pairs[i].source;
            slots[i] = pairs[i].slot;
        }
    }
    /* Each row read straight into its place. */
    if (rc == 0)
        rc = zm_array_scatter_rows(zm_view_source(view), array, rows, slots, count, out,
                                   (from == 0 && to == zm_view_rows(view) ? ZM_READ_PASS : 0) |
                                       read_flags,
                                   err);
    free(pairs);
    free(rows);
    free(slots);
    return rc;
}


/* Strings of rows [from, to) (view order when per_cell), as vlen-utf8 of
 * `padded` rows (the rest empty). */
/* A chunk's strings encoded vlen-utf8; a refusal (a string that is not
 * UTF-8, ...) is EIO naming the source object it came from. */
static int encode_strings(const zm_store_node *node, size_t count, const uint64_t *offsets,
                          const char *bytes, uint8_t **raw, size_t *raw_size, zm_err *err)
{
    zm_err why;
    zm_err_clear(&why);
    int rc = zm_vlen_utf8_encode(count, offsets, bytes, raw, raw_size, &why);
    if (rc == -EINVAL)
        rc = -EIO; /* the source's bytes, not the caller's request */
    if (rc != 0)
        zm_err_set(err, rc, "%s: %s",
                   node->source ? zm_array_describe(node->source)->file_path : node->name, why.reason);
    return rc;
}

/* A chunk of a per-cell string array from its walk in memory (every source
 * value, by source row): view rows [from, to) in order, then empty items up
 * to `items`. */
static int walked_strings(zm_view *view, const zm_store_node *node, const zm_strings *all,
                          const uint32_t *slot, uint64_t from, uint64_t to, uint64_t items,
                          uint64_t per_row, uint8_t **raw, size_t *raw_size, zm_err *err)
{
    const uint32_t *order = slot ? slot : zm_view_order(view, err);
    if (order == NULL)
        return err->code;
    uint64_t total = 0;
    for (uint64_t v = from; v < to; v++)
        total += all->offsets[((uint64_t)order[v] + 1) * per_row] - all->offsets[(uint64_t)order[v] * per_row];
    uint64_t *offsets = malloc((items + 1) * sizeof *offsets);
    char *bytes = malloc(total + 1);
    if (offsets == NULL || bytes == NULL) {
        free(offsets);
        free(bytes);
        return zm_err_set(err, -ENOMEM, "out of memory for a chunk of %" PRIu64 " strings", items);
    }
    uint64_t at = 0, k = 0;
    for (uint64_t v = from; v < to; v++) {
        uint64_t first = (uint64_t)order[v] * per_row;
        uint64_t start = all->offsets[first], end = all->offsets[first + per_row];
        memcpy(bytes + at, all->bytes + start, end - start);
        for (uint64_t j = 0; j < per_row; j++)
            offsets[k++] = at + (all->offsets[first + j] - start);
        at += end - start;
    }
    while (k <= items)
        offsets[k++] = at;
    int rc = encode_strings(node, items, offsets, bytes, raw, raw_size, err);
    free(offsets);
    free(bytes);
    return rc;
}

static int strings_chunk(zm_synth *synth, zm_view *view, const zm_store_node *node, uint64_t from,
                         uint64_t to, uint64_t padded, int per_cell, uint8_t **raw,
                         size_t *raw_size, zm_err *err)
{
    uint64_t count = to - from;
    uint64_t per_row = 1;
    for (unsigned d = 1; d < node->meta.rank; d++)
        per_row *= node->meta.shape[d];
    if (count > 0 && per_cell && node->grid[0] > 1) {
        struct zm_walk *w = NULL;
        int rc = zm__walk_of(synth, view, node, &w, err);
        if (rc != 0)
            return rc;
        if (w->fd >= 0) { /* spilled: the chunk's records, already in view order */
            uint64_t *offsets = NULL;
            char *bytes = NULL;
            rc = zm__cut_spilled_strings(w, from / node->meta.chunks[0], padded * per_row, &offsets,
                                     &bytes, err);
            if (rc == 0)
                rc = encode_strings(node, padded * per_row, offsets, bytes, raw, raw_size, err);
            free(offsets);
            free(bytes);
        } else {
            /* Every value of the array in memory, by source row: the
             * chunk's items taken in view order, one copy, no sort. */
            rc = walked_strings(view, node, &w->strings, w->string_slot, from, to, padded * per_row,
                                per_row, raw, raw_size, err);
        }
        zm__walk_put(w);
        return rc;
    }
    pair *pairs = per_cell ? zm__sorted_rows(view, from, to) : NULL;
    uint64_t *rows = malloc((count ? count : 1) * sizeof *rows);
    int rc = rows && (!per_cell || pairs) ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    for (uint64_t i = 0; rc == 0 && i < count; i++)
        rows[i] = per_cell ? pairs[i].source : from + i;
    zm_strings got = {0};
    if (rc == 0 && count > 0)
        rc = zm_array_read_strings(zm_view_source(view), node->source, rows, count, &got, err);
    /* Put items in view order, then pad with empty strings. */
    uint64_t items = padded * per_row;
    uint64_t *offsets = malloc((items + 1) * sizeof *offsets);
    uint64_t *slot_item = malloc((count * per_row + 1) * sizeof *slot_item);
    char *bytes = malloc((count ? got.offsets[got.count] : 0) + 1);
    if (rc == 0 && (!offsets || !slot_item || !bytes))
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        /* Item j of gathered row i goes to slot (pairs[i].slot or i). */
        uint64_t *from_item = calloc(items + 1, sizeof *from_item);
        uint8_t *present = calloc(items + 1, 1);
        if (from_item == NULL || present == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        for (uint64_t i = 0; rc == 0 && i < count; i++) {
            uint64_t slot = per_cell ? pairs[i].slot : i;
            for (uint64_t j = 0; j < per_row; j++) {
                from_item[slot * per_row + j] = i * per_row + j;
                present[slot * per_row + j] = 1;
            }
        }
        uint64_t at = 0;
        for (uint64_t k = 0; rc == 0 && k < items; k++) {
            offsets[k] = at;
            if (present[k]) {
                uint64_t g = from_item[k];
                uint64_t n = got.offsets[g + 1] - got.offsets[g];
                memcpy(bytes + at, got.bytes + got.offsets[g], n);
                at += n;
            }
        }
        offsets[items] = at;
        free(from_item);
        free(present);
        if (rc == 0)
            rc = encode_strings(node, items, offsets, bytes, raw, raw_size, err);
    }
    zm_strings_free(&got);
    free(offsets);
    free(slot_item);
    free(bytes);
    free(rows);
    free(pairs);
    return rc;
}

/* Sparse pointers and indices keep the source's integer type, whatever its
 * width (values of the view fit it: they are at most the source's). */
static void put_index(uint8_t *out, size_t size, int64_t value)
{
    switch (size) {
    case 1: {
        uint8_t v = (uint8_t)value;
        memcpy(out, &v, 1);
        break;
    }
    case 2: {
        uint16_t v = (uint16_t)value;
        memcpy(out, &v, 2);
        break;
    }
    case 4: {
        uint32_t v = (uint32_t)value;
        memcpy(out, &v, 4);
        break;
    }
    default:
        memcpy(out, &value, 8);
    }
}

typedef struct entry {
    int64_t index;   /* the view's minor index */
    uint64_t order;  /* position in the source row: keeps sorting stable */
} entry;

static int by_index(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->index != y->index)
        return (x->index > y->index) - (x->index < y->index);
    return (x->order > y->order) - (x->order < y->order);
}

/* Entries [e0, e1) of a sparse matrix in the view: its data or indices. */
int zm__entries_chunk(zm_view *view, const zm_store_node *node, uint64_t e0, uint64_t e1,
                      uint8_t *out, unsigned read_flags, zm_err *err)
{
    zm_view_sparse_info s;
    int rc = zm_view_sparse_get(view, node->sparse, &s, err);
    if (rc != 0 || e1 <= e0)
        return rc;
    const zm_element *e = s.element;
    zm_source *source = zm_view_source(view);
    const uint32_t *order = s.order; /* made where rows are cells (per_cell_rows) */
    size_t size = node->value_size;
    /* The view majors overlapping [e0, e1). */
    uint64_t lo = 0, hi = s.rows;
    while (lo < hi) { /* first major whose end is past e0 */
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)s.indptr[mid + 1] <= e0)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t first = lo, last = first;
    while (last < s.rows && (uint64_t)s.indptr[last] < e1)
        last++;
    uint64_t majors = last - first;
    if (majors == 0)
        return 0;

    if (!s.per_cell_columns) {
        /* Entries map one to one: each major's source range, clipped. */
        /* The view's majors by source position (sorted_rows: the inverse
         * map for a whole walk, a sort otherwise), each read straight into
         * its place. */
        pair *pairs = s.per_cell_rows ? zm__sorted_rows(view, first, last) : malloc(majors * sizeof *pairs);
        zm_range *ranges = malloc(majors * sizeof *ranges);
        uint64_t *dest = malloc(majors * sizeof *dest);
        if (!pairs || !ranges || !dest) {
            free(pairs);
            free(ranges);
            free(dest);
            return zm_err_set(err, -ENOMEM, "out of memory");
        }
        if (!s.per_cell_rows)
            for (uint64_t i = 0; i < majors; i++)
                pairs[i] = (pair){first + i, i};
        for (uint64_t i = 0; i < majors; i++) {
            uint64_t v = first + pairs[i].slot; /* the view major */
            uint64_t source_start, source_end;
            zm_view_source_range(&s, v, &source_start, &source_end);
            uint64_t vstart = (uint64_t)s.indptr[v], vend = (uint64_t)s.indptr[v + 1];
            uint64_t a = vstart > e0 ? vstart : e0, b2 = vend < e1 ? vend : e1;
            uint64_t sstart = source_start + (a - vstart);
            ranges[i] = (zm_range){sstart, sstart + (b2 - a)};
            dest[i] = a - e0;
        }
        /* All of the view's entries at once: a walk. */
        unsigned flags = (e0 == 0 && e1 == (uint64_t)s.indptr[s.rows] ? ZM_READ_PASS : 0) | read_flags;
        rc = zm_array_scatter_ranges(source, node->source, ranges, dest, majors, out, flags, err);
        free(pairs);
        free(ranges);
        free(dest);
        return rc;
    }

    /* Cells along the minor axis too (obsp; CSC of per-cell matrices): each
     * major's entries filtered to kept cells, renumbered, ascending. */
    const uint32_t *inverse = zm_view_inverse(view, err);
    if (inverse == NULL)
        return -ENOMEM;
    const zm_array_info *index_info = zm_array_describe(e->indices);
    size_t index_size = index_info->dtype.size;
    size_t value_size = zm_array_describe(e->values)->dtype.size;
    pair *pairs = malloc(majors * sizeof *pairs);
    zm_range *ranges = malloc(majors * sizeof *ranges);
    if (!pairs || !ranges) {
        free(pairs);
        free(ranges);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < majors; i++) {
        uint64_t m = s.per_cell_rows ? order[first + i] : first + i;
        pairs[i] = (pair){m, first + i};
    }
    if (s.per_cell_rows)
        qsort(pairs, majors, sizeof *pairs, by_source);
    uint64_t total = 0;
    for (uint64_t i = 0; i < majors; i++) {
        zm_view_source_range(&s, pairs[i].slot, &ranges[i].start, &ranges[i].end);
        total += ranges[i].end - ranges[i].start;
    }
    uint8_t *indices = malloc(total * index_size + 1);
    uint8_t *values = node->part == ZM_PART_DATA ? malloc(total * value_size + 1) : NULL;
    entry *row = malloc((total ? total : 1) * sizeof *row);
    if (!indices || !row || (node->part == ZM_PART_DATA && !values))
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = zm_array_gather_ranges(source, e->indices, ranges, majors, indices, err);
    if (rc == 0 && values)
        rc = zm_array_gather_ranges(source, e->values, ranges, majors, values, err);
    uint64_t at = 0;
    for (uint64_t i = 0; rc == 0 && i < majors; i++) {
        uint64_t n = ranges[i].end - ranges[i].start, kept = 0;
        for (uint64_t j = 0; j < n; j++) {
            uint32_t v = inverse[zm_dtype_integer(index_info->dtype, indices, at + j)];
            if (v != ZM_VIEW_NOT_KEPT)
                row[kept++] = (entry){v, at + j};
        }
        qsort(row, kept, sizeof *row, by_index);
        uint64_t vstart = (uint64_t)s.indptr[pairs[i].slot];
        for (uint64_t j = 0; j < kept; j++) {
            uint64_t position = vstart + j;
            if (position < e0 || position >= e1)
                continue;
            uint8_t *dst = out + (position - e0) * size;
            if (node->part == ZM_PART_INDICES)
                put_index(dst, size, row[j].index);
            else
                memcpy(dst, values + row[j].order * value_size, value_size);
        }
        at += n;
    }
    free(indices);
    free(values);
    free(row);
    free(pairs);
    free(ranges);
    return rc;
}

/* Records [from, to) of a rec-array, packed: each field's values, strings as
 * UTF-32LE padded with zeros to the field's width. */
static int records_chunk(zm_view *view, const zm_store_node *node, uint64_t from, uint64_t to,
                         uint8_t *out, zm_err *err)
{
    const zm_element *e = node->element;
    zm_source *source = zm_view_source(view);
    size_t offset = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < e->child_count; i++) {
        const zm_array *a = e->children[i]->values;
        size_t width = node->field_sizes[i];
        if (zm_array_describe(a)->dtype.type_class == ZM_TYPE_STRING) {
            uint64_t *rows = malloc((to - from + 1) * sizeof *rows);
            zm_strings s = {0};
            rc = rows ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
            for (uint64_t r = from; rc == 0 && r < to; r++)
                rows[r - from] = r;
            if (rc == 0 && to > from)
                rc = zm_array_read_strings(source, a, rows, to - from, &s, err);
            for (uint64_t r = 0; rc == 0 && r < to - from; r++) {
                uint8_t *utf32 = NULL;
                size_t size = 0, points = 0;
                rc = zm_utf32_encode(s.bytes + s.offsets[r], s.offsets[r + 1] - s.offsets[r], &utf32,
                                     &size, &points, err);
                /* An empty string encodes as one NUL code point; it pads. */
                if (rc == 0)
                    memcpy(out + r * node->value_size + offset, utf32,
                           points == 0 ? 0 : (size < width ? size : width));
                free(utf32);
            }
            zm_strings_free(&s);
            free(rows);
        } else if (to > from) {
            uint8_t *values = malloc((to - from) * width);
            rc = values ? zm_array_read_rows(source, a, from, to - from, values, err)
                        : zm_err_set(err, -ENOMEM, "out of memory");
            for (uint64_t r = 0; rc == 0 && r < to - from; r++)
                memcpy(out + r * node->value_size + offset, values + r * width, width);
            free(values);
        }
        offset += width;
    }
    return rc;
}

/* Bytes of one index along dimension 0 of an array node. */
uint64_t zm__row_bytes_of(const zm_store_node *node)
{
    uint64_t bytes = node->value_size;
    for (unsigned d = 1; d < node->meta.rank; d++)
        bytes *= node->meta.shape[d];
    return bytes;
}

/* Values of rows [from, to) of an array node (numbers, not strings) into
 * out, rows after rows. */
int zm__fill_chunk(zm_synth *synth, zm_view *view, const zm_store_node *node, uint64_t from,
                   uint64_t to, uint8_t *out, unsigned read_flags, zm_err *err)
{
    zm_source *source = zm_view_source(view);
    int rc = 0;
    switch (node->producer) {
    case ZM_PRODUCE_CELL_ROWS:
        if (node->cell_columns) {
            /* Whole source rows first, then the kept columns in view order. */
            uint64_t width = zm_array_describe(node->source)->shape[1];
            uint8_t *rows = malloc((to - from) * width * node->value_size + 1);
            rc = rows ? cell_rows(view, node->source, from, to, rows, read_flags, err)
                      : zm_err_set(err, -ENOMEM, "out of memory");
            const uint32_t *order = rc == 0 ? zm_view_order(view, err) : NULL;
            rc = rc == 0 && order == NULL ? err->code : rc;
            uint64_t columns = node->meta.shape[1];
            for (uint64_t r = 0; rc == 0 && r < to - from; r++)
                for (uint64_t j = 0; j < columns; j++)
                    memcpy(out + (r * columns + j) * node->value_size,
                           rows + (r * width + order[j]) * node->value_size, node->value_size);
            free(rows);
        } else if (from == 0 && to == node->meta.shape[0] && to > 4096 &&
                   !zm_view_is_identity(view)) {
            /* The whole of a reordered column in one chunk (the codes of a
             * million cells): read in spans, each kept row copied to its
             * place, as a walk does; a range a row took ten times as long. */
            struct zm_walk whole = {.synth = synth, .row_bytes = zm__row_bytes_of(node)};
            zm_err_clear(&whole.err);
            zm_view_kept kept;
            rc = zm_view_kept_get(view, &kept, err);
            if (rc == 0 && (rc = zm__span_walk(view, node, &whole, &kept, out, 0, to)) != 0)
                *err = whole.err;
        } else {
            rc = cell_rows(view, node->source, from, to, out, read_flags, err);
        }
        break;
    case ZM_PRODUCE_ROWS:
    case ZM_PRODUCE_SCALAR:
        if (to > from)
            rc = zm_array_read_rows(source, node->source, from, to - from, out, err);
        break;
    case ZM_PRODUCE_CONSTANT:
        memcpy(out, &node->constant, 8);
        break;
    case ZM_PRODUCE_POSITIONS: {
        /* Each row's original position: its source row, or in a
         * priority-ordered file the position the file names for it. */
        const uint32_t *order = zm_view_order(view, err);
        const uint32_t *original = zm_source_priority(source)->original;
        if (order == NULL) {
            rc = err->code;
            break;
        }
        if (original == NULL) {
            memcpy(out, order + from, (to - from) * 4);
            break;
        }
        for (uint64_t i = from; i < to; i++) {
            uint32_t position = original[order[i]];
            memcpy(out + (i - from) * 4, &position, 4);
        }
        break;
    }
    case ZM_PRODUCE_INDPTR: {
        zm_view_sparse_info s;
        rc = zm_view_sparse_get(view, node->sparse, &s, err);
        for (uint64_t i = from; rc == 0 && i < to; i++)
            put_index(out + (i - from) * node->value_size, node->value_size, s.indptr[i]);
        break;
    }
    case ZM_PRODUCE_ENTRIES:
        rc = zm__entries_chunk(view, node, from, to, out, read_flags, err);
        break;
    case ZM_PRODUCE_OBSMAP:
        memcpy(out, zm_view_part_map(view, node->modality) + from, (to - from) * 4);
        break;
    case ZM_PRODUCE_RECORDS:
        rc = records_chunk(view, node, from, to, out, err);
        break;
    default:
        rc = zm_err_set(err, -EINVAL, "internal error: unknown producer");
    }
    return rc;
}

/* Whether chunks of this array are cut from a one-pass gather of all of
 * it: per-cell values in a reordered view, in more than one chunk (each
 * chunk alone would touch nearly every source chunk). */
int zm_synth_walks(const zm_view *view, const zm_store_node *node)
{
    view = zm_view_of(view, node); /* a modality's node: its part's cells */
    if (node->meta.rank == 0 || node->grid[0] < 2)
        return 0;
    if (node->producer == ZM_PRODUCE_CELL_ROWS)
        return !zm_view_is_identity(view);
    if (node->producer == ZM_PRODUCE_ENTRIES) {
        zm_view_sparse_info s;
        zm_view_sparse_axes(node->sparse, &s);
        return s.per_cell_rows || s.per_cell_columns;
    }
    return 0;
}

int zm_synth_walk_direct(const zm_synth *synth, const zm_view *view, const zm_store_node *node)
{
    view = zm_view_of(view, node);
    if (synth == NULL || atomic_load(&((zm_synth *)synth)->indirect) ||
        !zm_synth_walks(view, node) || node->source == NULL || node->value_size == 0)
        return 0;
    if (node->producer == ZM_PRODUCE_CELL_ROWS) {
        if (node->cell_columns)
            return 0;
    } else {
        zm_view_sparse_info s;
        zm_view_sparse_axes(node->sparse, &s);
        if (node->producer != ZM_PRODUCE_ENTRIES || s.per_cell_columns)
            return 0;
    }
    /* At most twice what walks may hold in memory: the map's pages of the
     * array walked count in the daemon's resident memory until the walk
     * ends (zm_array_release_mapped), as a walk's memory would. */
    uint64_t bytes = node->value_size;
    for (unsigned d = 0; d < node->meta.rank; d++)
        bytes *= node->meta.shape[d];
    if (bytes / 2 > atomic_load(&((zm_synth *)synth)->limit) || bytes > zm_config_memory() / 8)
        return 0; /* (the walk asks the kernel ahead for at most an eighth of memory) */
    zm_view_kept kept;
    zm_err err;
    return zm_array_mapped(zm_view_source(view), node->source) &&
           zm_view_kept_get((zm_view *)view, &kept, &err) == 0 && kept.count * 2 >= kept.n;
}

/* Indices (count of them, size bytes each, native order) less shift: the
 * window's checked them to lie at or past it (zm_element_window). */
static void unshift_indices(uint8_t *values, uint64_t count, size_t size, uint64_t shift)
{
    for (uint64_t i = 0; i < count; i++) {
        uint64_t u = 0;
        memcpy(&u, values + i * size, size);
        u -= shift;
        memcpy(values + i * size, &u, size);
    }
}

/* A column window's indices are the file's, window_first more than its
 * own: each value made is taken back to the window's columns by this. */
static uint64_t window_shift(const zm_store_node *node)
{
    return node->producer == ZM_PRODUCE_ENTRIES && node->part == ZM_PART_INDICES &&
                   node->element->window != NULL
               ? node->element->window_first
               : 0;
}

/* -o index_dtype=int32 over 64-bit (or narrower) values: made at the
 * source's width, then narrowed; 32-bit values are served as they are. */
static int narrowed(const zm_store_node *node)
{
    return node->index_int32 && node->value_size != 4;
}

/* Whether a walk's values of node are served as they lie there (a chunk
 * can be lent from the walk). */
static int served_as_walked(const zm_store_node *node)
{
    return window_shift(node) == 0 && !narrowed(node);
}

int zm_synth_chunk_lends(const zm_view *view, const zm_store_node *node, const uint64_t *coords)
{
    const zm_zarr_array_meta *m = &node->meta;
    if (m->rank == 0 || node->producer == ZM_PRODUCE_CELL_STRINGS ||
        node->producer == ZM_PRODUCE_STRINGS || node->producer == ZM_PRODUCE_STRING_SCALAR ||
        node->value_size == 0 || (coords[0] + 1) * m->chunks[0] > m->shape[0] ||
        !served_as_walked(node))
        return 0;
    view = zm_view_of(view, node);
    return zm_synth_walks(view, node) && zm__walk_in_memory(view, node);
}

int zm_synth_chunk(zm_synth *synth, zm_view *view, const zm_store_node *node, const uint64_t *coords,
                   uint8_t **raw, size_t *raw_size, size_t *typesize, int *borrowed, zm_err *err)
{
    *raw = NULL;
    *raw_size = 0;
    if (borrowed)
        *borrowed = 0;
    view = zm_view_of(view, node); /* a modality's node: its part's cells */
    const zm_zarr_array_meta *m = &node->meta;
    *typesize = node->value_size ? node->value_size : 1;
    zm_source *source = zm_view_source(view);

    /* Rows (along dimension 0) this chunk covers; other dimensions are whole. */
    uint64_t chunk_rows = m->rank ? m->chunks[0] : 1;
    uint64_t from = m->rank ? coords[0] * chunk_rows : 0;
    uint64_t to = m->rank ? from + chunk_rows : 1;
    if (m->rank && to > m->shape[0])
        to = m->shape[0];
    uint64_t per_row_values = 1;
    for (unsigned d = 1; d < m->rank; d++)
        per_row_values *= m->chunks[d];

    if (node->producer == ZM_PRODUCE_CELL_STRINGS || node->producer == ZM_PRODUCE_STRINGS)
        return strings_chunk(synth, view, node, from, to, chunk_rows,
                             node->producer == ZM_PRODUCE_CELL_STRINGS, raw, raw_size, err);

    if (node->producer == ZM_PRODUCE_STRING_SCALAR) {
        zm_strings s;
        int rc = zm_array_read_strings(source, node->source, NULL, 0, &s, err);
        if (rc != 0)
            return rc;
        size_t points;
        rc = zm_utf32_encode(s.bytes, s.offsets[s.count > 0 ? 1 : 0], raw, raw_size, &points, err);
        zm_strings_free(&s);
        *typesize = 4;
        return rc;
    }

    size_t bytes = (size_t)(chunk_rows * per_row_values * node->value_size);
    uint64_t shift = window_shift(node);
    int narrow = narrowed(node);
    if (!served_as_walked(node))
        borrowed = NULL; /* its values are made, not lent as they lie */
    struct zm_walk *w = NULL;
    if (zm_synth_walks(view, node)) {
        int rc = zm__walk_of(synth, view, node, &w, err);
        if (rc != 0)
            return rc;
    }
    unsigned read_flags = 0;
    if (w != NULL && w->direct) {
        /* A direct walk: every chunk is made alone, copied from the map
         * (the walk asked for the whole array ahead). */
        zm__walk_put(w);
        w = NULL;
        read_flags = ZM_READ_MAPPED;
    }
    if (w != NULL && w->bytes != NULL && from * per_row_values * node->value_size < w->released) {
        /* Its rows' memory given back (the chunk was done with and is
         * asked for again): made alone, as without a walk. */
        zm__walk_put(w);
        w = NULL;
    }
    if (w != NULL && w->bytes != NULL && borrowed && to - from == chunk_rows && bytes > 0) {
        /* A whole chunk of a walk in memory: its rows lie there as they are. */
        *raw = w->bytes + from * per_row_values * node->value_size;
        *raw_size = bytes;
        *borrowed = 1;
        return 0; /* the walk in use until zm_synth_chunk_done */
    }
    /* Zero is the fill value: a chunk cut from a walk, or made for a direct
     * one (each of its rows, or entries, copied from the source), has every
     * row but its padding written; the others are made on zeros. */
    uint64_t row_bytes = per_row_values * node->value_size;
    int written = w != NULL || read_flags == ZM_READ_MAPPED;
    uint8_t *out = written ? malloc(bytes ? bytes : 1) : calloc(bytes ? bytes : 1, 1);
    if (out == NULL) {
        if (w != NULL)
            zm__walk_put(w);
        return zm_err_set(err, -ENOMEM, "out of memory for a %zu-byte chunk", bytes);
    }
    if (written)
        memset(out + (to - from) * row_bytes, 0, bytes - (to - from) * row_bytes);
    int rc = 0;
    if (w != NULL && w->fd >= 0 && w->in_order) {
        rc = zm__read_all(w->fd, out, (to - from) * row_bytes, from * row_bytes, err);
    } else if (w != NULL && w->fd >= 0) {
        rc = zm__cut_spilled(view, node, w, from, to, out, err);
    } else if (w != NULL) {
        if (w->bytes != NULL)
            memcpy(out, w->bytes + from * row_bytes, (to - from) * row_bytes);
        else
            memset(out, 0, bytes);
    } else {
        rc = zm__fill_chunk(synth, view, node, from, to, out, read_flags, err);
    }
    if (w != NULL)
        zm__walk_put(w);
    if (rc == 0 && shift != 0)
        unshift_indices(out, (to - from) * per_row_values, node->value_size, shift);
    if (rc == 0 && narrow) {
        /* Served as int32 (the view checked they fit). Wider values are
         * narrowed in place: value i is read before bytes [4i, 4i + 4) are
         * written, which lie below it. */
        uint64_t count = chunk_rows * per_row_values;
        uint8_t *to = node->value_size > 4 ? out : malloc(count * 4 + 1);
        if (to == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory for a %zu-byte chunk", (size_t)(count * 4));
        for (uint64_t i = 0; rc == 0 && i < count; i++) {
            uint64_t u = 0;
            memcpy(&u, out + i * node->value_size, node->value_size);
            int32_t v = (int32_t)u;
            memcpy(to + i * 4, &v, 4);
        }
        if (rc == 0) {
            if (to != out)
                free(out);
            out = to;
            bytes = (size_t)(count * 4);
            *typesize = 4;
        }
    }
    if (rc != 0) {
        free(out);
        return rc;
    }
    *raw = out;
    *raw_size = bytes;
    return 0;
}
