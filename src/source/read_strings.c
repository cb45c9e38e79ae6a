/* Reading strings: rows of a string array, from memory, through vlen.c's
 * direct reads, or through HDF5 (in spans, or one span picked from for
 * scattered rows), with loom's XML entities unescaped. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/source_internal.h"

/* The items of the given rows (per_row items each, in that order) of a
 * string set read before: *out holds count · per_row strings. */
static int strings_pick(const zm_strings *all, const uint64_t *rows, size_t count,
                        uint64_t per_row, zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += all->offsets[(rows[i] + 1) * per_row] - all->offsets[rows[i] * per_row];
    out->count = count * per_row;
    out->offsets = malloc((out->count + 1) * sizeof *out->offsets);
    out->bytes = malloc(total + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_strings_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory picking %zu strings", count);
    }
    uint64_t at = 0, item = 0;
    for (size_t i = 0; i < count; i++)
        for (uint64_t j = rows[i] * per_row; j < (rows[i] + 1) * per_row; j++) {
            uint64_t n = all->offsets[j + 1] - all->offsets[j];
            out->offsets[item++] = at;
            memcpy(out->bytes + at, all->bytes + all->offsets[j], n);
            at += n;
        }
    out->offsets[item] = at;
    out->bytes[at] = '\0';
    return 0;
}

/* Writes code point c as UTF-8 at out; returns the bytes written. */
static size_t put_utf8(char *out, uint32_t c)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* Replaces XML character references (&#233; &#xE9;) and the five XML
 * entities in every string, in place (each replacement is shorter): what
 * loompy does (html.unescape) for the strings it stored escaped. */
static void xml_unescape(zm_strings *s)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    uint64_t out = 0;
    for (size_t i = 0; i < s->count; i++) {
        uint64_t from = s->offsets[i], to = s->offsets[i + 1];
        s->offsets[i] = out;
        for (uint64_t j = from; j < to;) {
            char *p = s->bytes + j;
            if (*p == '&' && j + 1 < to) {
                size_t replaced = 0;
                if (p[1] == '#') {
                    int hex = j + 2 < to && (p[2] == 'x' || p[2] == 'X');
                    uint64_t k = j + 2 + (uint64_t)hex;
                    uint32_t c = 0;
                    int digits = 0;
                    while (k < to && digits < 8 &&
                           (hex ? strchr("0123456789abcdefABCDEF", s->bytes[k]) != NULL
                                : (s->bytes[k] >= '0' && s->bytes[k] <= '9')) && s->bytes[k]) {
                        char d = s->bytes[k];
                        c = c * (hex ? 16 : 10) +
                            (uint32_t)(d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
                        k++;
                        digits++;
                    }
                    if (digits > 0 && k < to && s->bytes[k] == ';' && c > 0 && c <= 0x10ffff &&
                        (c < 0xd800 || c > 0xdfff)) {
                        out += put_utf8(s->bytes + out, c);
                        j = k + 1;
                        continue;
                    }
                } else {
                    for (size_t e = 0; e < sizeof named / sizeof named[0] && !replaced; e++) {
                        size_t n = strlen(named[e].name);
                        if (j + 1 + n <= to && memcmp(p + 1, named[e].name, n) == 0) {
                            s->bytes[out++] = named[e].c;
                            j += 1 + n;
                            replaced = 1;
                        }
                    }
                    if (replaced)
                        continue;
                }
            }
            s->bytes[out++] = s->bytes[j++];
        }
    }
    s->offsets[s->count] = out;
    s->bytes[out] = '\0';
}

static int read_strings_raw(zm_source *source, zm_array *array, const uint64_t *rows,
                            size_t count, zm_strings *out, zm_err *err);

int zm_array_read_strings(zm_source *source, const zm_array *const_array, const uint64_t *rows,
                          size_t count, zm_strings *out, zm_err *err)
{
    zm_array *array = (zm_array *)const_array;
    int rc = read_strings_raw(source, array, rows, count, out, err);
    if (rc == 0 && array->xml_unescape)
        xml_unescape(out);
    return rc;
}

/* Rows of strings read through HDF5 at once, at most: variable-length
 * strings come back as one allocation each, so a whole column of an atlas
 * in one read would hold ten million of them at once. */
#define STRING_SPAN_ROWS ((uint64_t)1 << 18)

/* The strings of rows [span.start, span.end), read in spans of at most
 * STRING_SPAN_ROWS rows, appended one after another. */
static int read_span_strings(zm_source *source, zm_array *array, zm_range span, uint64_t per_row,
                             zm_strings *out, zm_err *err)
{
    if (span.end - span.start <= STRING_SPAN_ROWS)
        return zm__h5_read_strings(source, array, &span, 1, out, err);
    memset(out, 0, sizeof *out);
    uint64_t items = (span.end - span.start) * per_row;
    size_t capacity = 1 << 20, used = 0;
    out->offsets = malloc((items + 1) * sizeof *out->offsets);
    out->bytes = malloc(capacity);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_strings_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    }
    int rc = 0;
    for (uint64_t at = span.start; rc == 0 && at < span.end; at += STRING_SPAN_ROWS) {
        zm_range part = {at, span.end - at < STRING_SPAN_ROWS ? span.end : at + STRING_SPAN_ROWS};
        zm_strings piece;
        rc = zm__h5_read_strings(source, array, &part, 1, &piece, err);
        if (rc != 0)
            break;
        size_t n = piece.offsets[piece.count];
        if (used + n + 1 > capacity) {
            while (used + n + 1 > capacity)
                capacity *= 2;
            char *grown = realloc(out->bytes, capacity);
            if (grown == NULL) {
                zm_strings_free(&piece);
                rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
                break;
            }
            out->bytes = grown;
        }
        memcpy(out->bytes + used, piece.bytes, n);
        for (size_t i = 0; i < piece.count; i++)
            out->offsets[out->count + i] = used + piece.offsets[i];
        out->count += piece.count;
        used += n;
        zm_strings_free(&piece);
    }
    if (rc != 0) {
        zm_strings_free(out);
        return rc;
    }
    out->offsets[out->count] = used;
    out->bytes[used] = '\0';
    return 0;
}

static int read_strings_raw(zm_source *source, zm_array *array, const uint64_t *rows,
                            size_t count, zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    if (array->info.dtype.type_class != ZM_TYPE_STRING)
        return zm_err_set(err, -EINVAL, "%s does not hold strings", array->file_path);
    uint64_t per_row = 1;
    for (unsigned d = 1; d < array->info.rank; d++)
        per_row *= array->info.shape[d];
    if (array->info.data_path == ZM_PATH_MEMORY) {
        if (rows != NULL)
            return strings_pick(&array->memory_strings, rows, count, per_row, out, err);
        uint64_t all_rows = zm__row_count(array);
        uint64_t *every = malloc((all_rows ? all_rows : 1) * sizeof *every);
        if (every == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        for (uint64_t i = 0; i < all_rows; i++)
            every[i] = i;
        int rc = strings_pick(&array->memory_strings, every, all_rows, per_row, out, err);
        free(every);
        return rc;
    }
    if (array->zarr != NULL)
        return zm__zarr_read_strings(source, array, rows, count, per_row, out, err);
    if (array->vlen_direct) {
        /* Rows ascending and inside the array: their ids are read as they are. */
        for (size_t i = 0; rows != NULL && i < count; i++)
            if (rows[i] >= zm__row_count(array) || (i > 0 && rows[i] <= rows[i - 1]))
                return zm_err_set(err, -EINVAL, "%s: row %llu is out of order or past the end",
                                  array->file_path, (unsigned long long)rows[i]);
        int rc = zm__vlen_read(source, array, rows, rows ? count : zm__row_count(array), out, err);
        if (rc != -EAGAIN)
            return rc;
        /* A string holds a NUL, where HDF5's reading ends it: as HDF5 reads. */
    }
    if (rows == NULL && array->storage_rank > 0)
        return read_span_strings(source, array, (zm_range){0, zm__row_count(array)}, per_row, out,
                                 err);
    if (rows == NULL)
        return zm__h5_read_strings(source, array, NULL, 0, out, err);
    if (count > ZM__MANY_RANGES) {
        /* HDF5 builds a selection of many pieces slowly (about a tenth of a
         * millisecond a piece): read the span the rows lie in at once and
         * pick them, far cheaper for scattered rows. */
        zm_range span = {rows[0], rows[count - 1] + 1};
        zm_strings all;
        int rc = zm__check_ranges(array, &span, 1, err);
        if (rc == 0)
            rc = read_span_strings(source, array, span, per_row, &all, err);
        if (rc != 0)
            return rc;
        uint64_t *shifted = malloc(count * sizeof *shifted);
        if (shifted == NULL) {
            zm_strings_free(&all);
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
        for (size_t i = 0; i < count; i++)
            shifted[i] = rows[i] - span.start;
        rc = strings_pick(&all, shifted, count, per_row, out, err);
        free(shifted);
        zm_strings_free(&all);
        return rc;
    }
    zm_range *ranges;
    size_t n;
    int rc = zm__rows_to_ranges(array, rows, count, &ranges, &n, err);
    if (rc == 0)
        rc = zm__check_ranges(array, ranges, n, err);
    if (rc == 0)
        rc = zm__h5_read_strings(source, array, ranges, n, out, err);
    free(ranges);
    return rc;
}
