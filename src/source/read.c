/* Reading values: a read checked and sent down its path (HDF5, memory, or
 * the direct path: HDF5 says where the bytes are, we pread and decode them
 * on our own threads), the direct path over contiguous values, the checks
 * of the values read, and the public reads of rows and ranges. Chunked
 * values are gathered in read_chunked.c, strings read in read_strings.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/source_internal.h"

uint64_t zm_array_row_bytes(const zm_array *array)
{
    uint64_t bytes = array->info.dtype.size;
    for (unsigned d = 1; d < array->info.rank; d++)
        bytes *= array->info.shape[d];
    return bytes;
}

uint64_t zm__row_count(const zm_array *array)
{
    return array->info.rank == 0 ? 1 : array->info.shape[0];
}

/* pread until done: a short read means the file ends early. */
int zm__read_exact(zm_source *source, uint64_t offset, void *buffer, size_t size,
                      const zm_array *array, zm_err *err)
{
    size_t done = 0;
    while (done < size) {
        ssize_t n = pread(source->fd, (uint8_t *)buffer + done, size - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return zm_err_set(err, -EIO, "%s: reading %zu bytes at offset %llu failed: %s",
                              array->file_path, size, (unsigned long long)offset, strerror(errno));
        if (n == 0)
            return zm_err_set(err, -EIO,
                              "%s: the file ends before offset %llu (truncated?); %zu bytes were needed",
                              array->file_path, (unsigned long long)(offset + done), size);
        done += (size_t)n;
    }
    zm__count_bytes(source, size);
    return 0;
}

void zm__swap_bytes(uint8_t *bytes, size_t count, size_t size)
{
    for (size_t i = 0; i < count; i++, bytes += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = bytes[a];
            bytes[a] = bytes[b];
            bytes[b] = t;
        }
}

void zm__fill_values(uint8_t *bytes, size_t count, const zm_array *array)
{
    size_t size = array->info.dtype.size;
    for (size_t i = 0; i < count; i++)
        memcpy(bytes + i * size, array->fill, size);
}

/* Every value within [value_min, value_limit): indices below their
 * dimension, codes below their category count. A pass for the extremes
 * (which the compiler vectorizes), and only on a failure a second one to
 * name the first value outside. */
#define ZM__EXTREMES(type)                                                                         \
    do {                                                                                           \
        const type *v = values;                                                                    \
        type lo = v[0], hi = v[0];                                                                 \
        for (uint64_t i = 1; i < count; i++) {                                                     \
            lo = v[i] < lo ? v[i] : lo;                                                            \
            hi = v[i] > hi ? v[i] : hi;                                                            \
        }                                                                                          \
        low = (int64_t)lo;                                                                         \
        high = (int64_t)hi;                                                                        \
    } while (0)

int64_t zm_dtype_integer(zm_dtype t, const void *values, uint64_t i)
{
    uint64_t u = 0;
    memcpy(&u, (const uint8_t *)values + i * t.size, t.size);
    if (t.type_class == ZM_TYPE_INT)
        return t.size < 8 && (u >> (t.size * 8 - 1)) & 1 ? (int64_t)(u | ~0ULL << (t.size * 8))
                                                       : (int64_t)u;
    return u > INT64_MAX ? INT64_MAX : (int64_t)u;
}

int zm__check_values(const zm_array *array, const void *values, uint64_t count, zm_err *err)
{
    const zm_dtype t = array->info.dtype;
    if (count == 0 || (t.type_class != ZM_TYPE_INT && t.type_class != ZM_TYPE_UINT))
        return 0;
    int64_t low, high;
    if (t.type_class == ZM_TYPE_INT) {
        if (t.size == 1)
            ZM__EXTREMES(int8_t);
        else if (t.size == 2)
            ZM__EXTREMES(int16_t);
        else if (t.size == 4)
            ZM__EXTREMES(int32_t);
        else
            ZM__EXTREMES(int64_t);
    } else {
        uint64_t top;
        if (t.size == 1)
            ZM__EXTREMES(uint8_t);
        else if (t.size == 2)
            ZM__EXTREMES(uint16_t);
        else if (t.size == 4)
            ZM__EXTREMES(uint32_t);
        else {
            const uint64_t *v = values;
            uint64_t lo = v[0];
            top = v[0];
            for (uint64_t i = 1; i < count; i++) {
                lo = v[i] < lo ? v[i] : lo;
                top = v[i] > top ? v[i] : top;
            }
            low = lo > INT64_MAX ? INT64_MAX : (int64_t)lo;
            high = top > INT64_MAX ? INT64_MAX : (int64_t)top;
        }
    }
    if (low >= array->value_min && high < array->value_limit)
        return 0;
    for (uint64_t i = 0; i < count; i++) {
        int64_t v = zm_dtype_integer(t, values, i);
        if (v < array->value_min || v >= array->value_limit)
            return zm_err_set(err, -EIO, "%s: value %lld is outside [%lld, %lld): the file's parts "
                              "disagree", array->check_what, (long long)v,
                              (long long)array->value_min, (long long)array->value_limit);
    }
    return 0;
}

/* Whether values are checked as their chunks are decoded (on the pool, each
 * chunk once) rather than after a read. */
int zm__checked_at_decode(const zm_array *array)
{
    return array->check_values && array->info.data_path == ZM_PATH_DIRECT &&
           array->info.layout == ZM_LAYOUT_CHUNKED && array->storage_rank == 1;
}

/* Contiguous values: one pread per run of kept rows, runs closer than this
 * merged (a read costs about as much as this many bytes copied), pieces of
 * at most PIECE_BYTES read in parallel. */
#define MERGE_GAP_BYTES 8192
#define PIECE_BYTES (4u << 20)

struct piece {
    size_t first, last;     /* ranges first .. last − 1 */
    uint64_t from, to;      /* rows, or within one range a part of it */
};

struct contiguous {
    zm_source *source;
    zm_array *array;
    const zm_range *ranges;
    const uint64_t *out_row;
    uint8_t *out;
    struct piece *pieces;
    zm_err *errors;
    struct zm__pass *pass; /* counted while it runs (a pass) */
};

static int read_piece_counted(void *context, size_t index);

static int read_piece(void *context, size_t index)
{
    struct contiguous *c = context;
    int rc = read_piece_counted(context, index);
    zm__pass_step(c->pass);
    return rc;
}

static int read_piece_counted(void *context, size_t index)
{
    struct contiguous *c = context;
    const struct piece *p = &c->pieces[index];
    zm_array *array = c->array;
    uint64_t row_bytes = zm_array_row_bytes(array);
    size_t size = array->info.dtype.size;
    uint64_t base = array->contiguous_offset;
    int rc;
    if (p->last == p->first + 1) {
        /* Part of one range: straight into its place. */
        const zm_range *r = &c->ranges[p->first];
        uint8_t *dst = c->out + (c->out_row[p->first] + p->from - r->start) * row_bytes;
        rc = zm__read_exact(c->source, base + p->from * row_bytes, dst, (p->to - p->from) * row_bytes,
                        array, &c->errors[index]);
        if (rc == 0 && array->info.big_endian)
            zm__swap_bytes(dst, (p->to - p->from) * row_bytes / size, size);
        return rc;
    }
    uint8_t *span = malloc((p->to - p->from) * row_bytes);
    rc = span ? zm__read_exact(c->source, base + p->from * row_bytes, span, (p->to - p->from) * row_bytes,
                           array, &c->errors[index])
              : zm_err_set(&c->errors[index], -ENOMEM, "out of memory reading %s", array->file_path);
    for (size_t i = p->first; rc == 0 && i < p->last; i++) {
        uint8_t *dst = c->out + c->out_row[i] * row_bytes;
        uint64_t bytes = (c->ranges[i].end - c->ranges[i].start) * row_bytes;
        memcpy(dst, span + (c->ranges[i].start - p->from) * row_bytes, bytes);
        if (array->info.big_endian)
            zm__swap_bytes(dst, bytes / size, size);
    }
    free(span);
    return rc;
}

static int gather_contiguous(zm_source *source, zm_array *array, const zm_range *ranges,
                             size_t count, const uint64_t *out_row, uint8_t *out, unsigned flags,
                             zm_err *err)
{
    uint64_t row_bytes = zm_array_row_bytes(array);
    size_t size = array->info.dtype.size;
    if (array->contiguous_offset == UINT64_MAX) {
        for (size_t r = 0; r < count; r++)
            zm__fill_values(out + out_row[r] * row_bytes,
                            (ranges[r].end - ranges[r].start) * row_bytes / size, array);
        return 0;
    }
    if (row_bytes == 0)
        return 0;
    /* Plan the pieces. */
    size_t capacity = 64, n = 0;
    struct piece *pieces = malloc(capacity * sizeof *pieces);
    uint64_t piece_rows = PIECE_BYTES / row_bytes ? PIECE_BYTES / row_bytes : 1;
    for (size_t r = 0; pieces && r < count;) {
        if (ranges[r].end == ranges[r].start) {
            r++;
            continue;
        }
        size_t s = r + 1;
        while (s < count && (ranges[s].start - ranges[s - 1].end) * row_bytes < MERGE_GAP_BYTES &&
               (ranges[s].end - ranges[r].start) <= piece_rows)
            s++;
        uint64_t from = ranges[r].start, to = ranges[s - 1].end;
        /* A single long range is cut into pieces read in parallel. */
        uint64_t step = s == r + 1 ? piece_rows : to - from;
        for (uint64_t at = from; at < to; at += step) {
            if (n == capacity) {
                capacity *= 2;
                struct piece *grown = realloc(pieces, capacity * sizeof *grown);
                if (grown == NULL) {
                    free(pieces);
                    pieces = NULL;
                    break;
                }
                pieces = grown;
            }
            pieces[n++] = (struct piece){r, s, at, at + step < to ? at + step : to};
        }
        r = s;
    }
    zm_err *errors = pieces ? calloc(n ? n : 1, sizeof *errors) : NULL;
    if (pieces == NULL || errors == NULL) {
        free(pieces);
        return zm_err_set(err, -ENOMEM, "out of memory planning a read of %s", array->file_path);
    }
    struct contiguous c = {source, array, ranges, out_row, out, pieces, errors, NULL};
    if (flags & ZM_READ_PASS)
        c.pass = zm__pass_begin(source, array, "pieces", n);
    int rc = zm__pool_for(n > 1 ? source->pool : NULL, n, read_piece, &c);
    zm__pass_end(source, c.pass);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            if (errors[i].code != 0) {
                if (err)
                    *err = errors[i];
                rc = errors[i].code;
                break;
            }
    free(errors);
    free(pieces);
    return rc;
}

int zm__check_ranges(const zm_array *array, const zm_range *ranges, size_t count, zm_err *err)
{
    uint64_t rows = zm__row_count(array), previous = 0;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].start == ranges[i].end && ranges[i].end <= rows)
            continue; /* empty: reads nothing, wherever it is */
        if (ranges[i].start > ranges[i].end || ranges[i].end > rows || ranges[i].start < previous)
            return zm_err_set(err, -EINVAL,
                              "%s: rows [%llu, %llu) are out of order or past its %llu rows",
                              array->file_path, (unsigned long long)ranges[i].start,
                              (unsigned long long)ranges[i].end, (unsigned long long)rows);
        previous = ranges[i].end;
    }
    return 0;
}

/* Reads ranges into out: one after another, or (dest not NULL) range i at
 * row dest[i]. */
static int read_ranges(zm_source *source, const zm_array *const_array, const zm_range *ranges,
                       size_t count, const uint64_t *dest, void *out, unsigned flags, zm_err *err)
{
    zm_array *array = (zm_array *)const_array;
    if (array->info.dtype.type_class == ZM_TYPE_STRING)
        return zm_err_set(err, -EINVAL, "%s holds strings: read it with zm_array_read_strings",
                          array->file_path);
    int rc = zm__check_ranges(array, ranges, count, err);
    if (rc != 0)
        return rc;
    /* Empty ranges read nothing: leave them out (they may sit anywhere). */
    uint64_t *out_row = malloc((count ? count : 1) * sizeof *out_row);
    zm_range *kept = malloc((count ? count : 1) * sizeof *kept);
    if (out_row == NULL || kept == NULL) {
        free(out_row);
        free(kept);
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    }
    /* Ranges that follow one another in the source and in the output are
     * one (the rows of a walk's batch, each its own range, are mostly one
     * run: its chunks then decode straight into place). */
    uint64_t at = 0;
    size_t nonempty = 0;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].end == ranges[i].start)
            continue;
        uint64_t to = dest ? dest[i] : at;
        if (nonempty > 0 && kept[nonempty - 1].end == ranges[i].start &&
            out_row[nonempty - 1] + (kept[nonempty - 1].end - kept[nonempty - 1].start) == to)
            kept[nonempty - 1].end = ranges[i].end;
        else {
            out_row[nonempty] = to;
            kept[nonempty++] = ranges[i];
        }
        at += ranges[i].end - ranges[i].start;
    }
    ranges = kept;
    count = nonempty;
    uint64_t row_bytes = zm_array_row_bytes(array);
    uint8_t *packed = NULL; /* HDF5 reads ranges one after another: scattered after */
    if (dest != NULL && array->info.data_path == ZM_PATH_HDF5) {
        packed = malloc(at * row_bytes + 1);
        if (packed == NULL) {
            free(out_row);
            free(kept);
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
    }
    uint8_t *final_out = out;
    uint64_t *final_row = out_row;
    uint64_t *packed_row = NULL;
    if (packed != NULL) {
        packed_row = malloc((count ? count : 1) * sizeof *packed_row);
        if (packed_row == NULL) {
            free(packed);
            free(out_row);
            free(kept);
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
        uint64_t p = 0;
        for (size_t i = 0; i < count; i++) {
            packed_row[i] = p;
            p += ranges[i].end - ranges[i].start;
        }
        out = packed;
        out_row = packed_row;
    }
    switch (array->info.data_path) {
    case ZM_PATH_MEMORY:
        for (size_t i = 0; i < count; i++)
            memcpy((uint8_t *)out + out_row[i] * row_bytes,
                   (uint8_t *)array->memory + ranges[i].start * row_bytes,
                   (ranges[i].end - ranges[i].start) * row_bytes);
        break;
    case ZM_PATH_HDF5:
        if (count > ZM__MANY_RANGES) {
            /* As for strings: one read of the span, then the pieces. */
            zm_range span = {ranges[0].start, ranges[count - 1].end};
            uint8_t *all = malloc((span.end - span.start) * row_bytes + 1);
            rc = all ? zm__h5_read_ranges(source, array, &span, 1, all, err)
                     : zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
            for (size_t i = 0; rc == 0 && i < count; i++)
                memcpy((uint8_t *)out + out_row[i] * row_bytes, all + (ranges[i].start - span.start) * row_bytes,
                       (ranges[i].end - ranges[i].start) * row_bytes);
            free(all);
        } else {
            rc = zm__h5_read_ranges(source, array, ranges, count, out, err);
        }
        break;
    case ZM_PATH_DIRECT:
        /* Many short runs (a chunk of a reordered view: rows from all over
         * the source) of a mapped array are copied from the map of the
         * file (mapped.c), not read a run or a chunk's part a pread. */
        if ((flags & ZM_READ_MAPPED) && count > 0 &&
            at * row_bytes / count < ZM__MAPPED_RUN_BYTES && zm_array_mapped(source, array))
            rc = zm__mapped_gather(source, array, ranges, count, out_row, out, flags, err);
        else if (array->info.layout == ZM_LAYOUT_CHUNKED)
            rc = zm__gather_chunked(source, array, ranges, count, out_row, out, flags, err);
        else
            rc = gather_contiguous(source, array, ranges, count, out_row, out, flags, err);
        break;
    }
    if (packed != NULL) {
        for (size_t i = 0; rc == 0 && i < count; i++)
            memcpy(final_out + final_row[i] * row_bytes, packed + packed_row[i] * row_bytes,
                   (ranges[i].end - ranges[i].start) * row_bytes);
        free(packed);
        free(packed_row);
        out = final_out;
        out_row = final_row;
    }
    if (rc == 0 && array->check_values && !zm__checked_at_decode(array)) {
        if (dest == NULL) {
            rc = zm__check_values(array, out, at * row_bytes / array->info.dtype.size, err);
        } else {
            uint64_t per_row = row_bytes / array->info.dtype.size;
            for (size_t i = 0; rc == 0 && i < count; i++)
                rc = zm__check_values(array, (uint8_t *)out + out_row[i] * row_bytes,
                                      (ranges[i].end - ranges[i].start) * per_row, err);
        }
    }
    free(out_row);
    free(kept);
    return rc;
}

void zm_array_prefetch(zm_source *source, const zm_array *array, uint64_t max_bytes)
{
    if (array == NULL || array->zarr != NULL || array->info.data_path != ZM_PATH_DIRECT || source->fd < 0)
        return;
    if (array->info.layout != ZM_LAYOUT_CHUNKED && array->info.layout != ZM_LAYOUT_CONTIGUOUS)
        return;
    if (array->info.layout == ZM_LAYOUT_CONTIGUOUS) {
        if (array->contiguous_offset == UINT64_MAX)
            return; /* never written: the fill value */
        uint64_t bytes = array->stored_size;
        for (unsigned d = 0; d < array->storage_rank; d++)
            bytes *= array->storage_shape[d];
        if (bytes > max_bytes)
            return;
        (void)posix_fadvise(source->fd, (off_t)array->contiguous_offset, (off_t)bytes,
                            POSIX_FADV_WILLNEED);
        return;
    }
    if (!atomic_load_explicit(&array->index_complete, memory_order_acquire) &&
        array->chunk_count > 0 && array->chunk_count <= SIZE_MAX / sizeof(uint64_t)) {
        /* Not indexed yet: the whole index read now (one pass over its
         * B-tree, a few tens of KiB), so that the chunks can be asked for. */
        uint64_t *all = malloc((size_t)array->chunk_count * sizeof *all);
        zm_err ignored;
        for (uint64_t c = 0; all != NULL && c < array->chunk_count; c++)
            all[c] = c;
        if (all != NULL)
            (void)zm__resolve_chunks(source, (zm_array *)array, all, (size_t)array->chunk_count,
                                     &ignored);
        free(all);
    }
    if (!atomic_load_explicit(&array->index_complete, memory_order_acquire) ||
        array->chunk_address == NULL || array->chunk_stored_size == NULL)
        return;
    uint64_t from = 0, to = 0, total = 0;
    for (uint64_t c = 0; c < array->chunk_count; c++)
        if (array->chunk_address[c] != ZM__CHUNK_ABSENT && array->chunk_address[c] != ZM__CHUNK_UNKNOWN)
            total += array->chunk_stored_size[c];
    if (total > max_bytes)
        return;
    for (uint64_t c = 0; c <= array->chunk_count; c++) {
        uint64_t at = c < array->chunk_count ? array->chunk_address[c] : ZM__CHUNK_ABSENT;
        int stored = at != ZM__CHUNK_ABSENT && at != ZM__CHUNK_UNKNOWN;
        if (stored && to > from && at == to) {
            to += array->chunk_stored_size[c];
            continue;
        }
        if (to > from)
            (void)posix_fadvise(source->fd, (off_t)from, (off_t)(to - from), POSIX_FADV_WILLNEED);
        from = to = 0;
        if (stored) {
            from = at;
            to = at + array->chunk_stored_size[c];
        }
    }
}

int zm_array_read_rows(zm_source *source, const zm_array *array, uint64_t start, uint64_t count,
                       void *out, zm_err *err)
{
    return zm_array_read_rows_flags(source, array, start, count, out, 0, err);
}

int zm_array_read_rows_flags(zm_source *source, const zm_array *array, uint64_t start,
                             uint64_t count, void *out, unsigned flags, zm_err *err)
{
    zm_range range = {start, start + count};
    return read_ranges(source, array, &range, 1, NULL, out, flags, err);
}

/* Turns ascending rows into ranges of consecutive rows. */
int zm__rows_to_ranges(const zm_array *array, const uint64_t *rows, size_t count, zm_range **ranges,
                       size_t *range_count, zm_err *err)
{
    *ranges = malloc((count ? count : 1) * sizeof **ranges);
    if (*ranges == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (i > 0 && rows[i] <= rows[i - 1]) {
            free(*ranges);
            *ranges = NULL;
            return zm_err_set(err, -EINVAL, "%s: rows must ascend (%llu after %llu)",
                              array->file_path, (unsigned long long)rows[i],
                              (unsigned long long)rows[i - 1]);
        }
        if (n > 0 && (*ranges)[n - 1].end == rows[i])
            (*ranges)[n - 1].end++;
        else
            (*ranges)[n++] = (zm_range){rows[i], rows[i] + 1};
    }
    *range_count = n;
    return 0;
}

int zm_array_gather_rows(zm_source *source, const zm_array *array, const uint64_t *rows,
                         size_t count, void *out, zm_err *err)
{
    zm_range *ranges;
    size_t n;
    int rc = zm__rows_to_ranges(array, rows, count, &ranges, &n, err);
    if (rc == 0)
        rc = read_ranges(source, array, ranges, n, NULL, out, 0, err);
    free(ranges);
    return rc;
}

int zm_array_scatter_rows(zm_source *source, const zm_array *array, const uint64_t *rows,
                          const uint64_t *out_rows, size_t count, void *out, unsigned flags,
                          zm_err *err)
{
    /* A range a row: read_ranges makes one of rows consecutive in the
     * source and in the output. */
    zm_range *ranges = malloc((count ? count : 1) * sizeof *ranges);
    if (ranges == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    int rc = 0;
    for (size_t i = 0; i < count; i++) {
        if (i > 0 && rows[i] <= rows[i - 1]) {
            rc = zm_err_set(err, -EINVAL, "%s: rows must ascend (%llu after %llu)",
                            array->file_path, (unsigned long long)rows[i],
                            (unsigned long long)rows[i - 1]);
            break;
        }
        ranges[i] = (zm_range){rows[i], rows[i] + 1};
    }
    if (rc == 0)
        rc = read_ranges(source, array, ranges, count, out_rows, out, flags, err);
    free(ranges);
    return rc;
}

int zm_array_gather_ranges(zm_source *source, const zm_array *array, const zm_range *ranges,
                           size_t count, void *out, zm_err *err)
{
    if (array->info.rank != 1)
        return zm_err_set(err, -EINVAL, "%s: ranges are read from 1-d arrays only",
                          array->file_path);
    return read_ranges(source, array, ranges, count, NULL, out, 0, err);
}

int zm_array_scatter_ranges(zm_source *source, const zm_array *array, const zm_range *ranges,
                            const uint64_t *out_at, size_t count, void *out, unsigned flags,
                            zm_err *err)
{
    if (array->info.rank != 1)
        return zm_err_set(err, -EINVAL, "%s: ranges are read from 1-d arrays only",
                          array->file_path);
    return read_ranges(source, array, ranges, count, out_at, out, flags, err);
}
