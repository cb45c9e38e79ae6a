/* Zarr metadata, v2 and v3, into one tree of groups and arrays (see
 * zarr_store.h).
 *
 * What each document may hold follows the Zarr v2 spec and the v3 core
 * spec, and where they leave room, what zarr-python (2.13 and 3.x) and
 * numcodecs write and accept: v2 dtypes as numpy spells them, v3 data types
 * by zarr-python 3's names (also the extension types anndata's files carry:
 * "struct", "fixed_length_utf32", "null_terminated_bytes"), fill values in
 * every form either writes, codecs by their v2 ids, v3 names and
 * zarr-python 3's "numcodecs.*" names.
 *
 * Every document is untrusted: read with the store's size limit, its
 * nesting bounded before jansson sees it, every number checked (ranks,
 * shapes, chunks, products that would overflow) with a reason naming the
 * key. A codec or data type we cannot decode is valid metadata: the array's
 * node says so (zm__zarray_supported) and only what reads it fails.
 *
 * Threads: zm__ztree_node and zm__ztree_children keep what they read (a
 * store whose metadata is not consolidated is read lazily), so they must be
 * called from one thread at a time; the source builds its model in one
 * thread. The nodes they return stay valid, unchanged, until
 * zm__ztree_close, and may be read from any thread.
 */
#include "source/source_internal.h"
#include "source/zarr_store.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/text.h"

/* How deep a metadata document may nest (objects and arrays): far above
 * what Zarr's own structure needs (a consolidated v3 root nests a node's
 * attributes at depth 5) and what anndata writes into attributes, far
 * below what would exhaust a stack in a recursive reader. */
#define ZM__JSON_DEPTH_MAX 256

/* Fields of one structured dtype. */
#define ZM__FIELDS_MAX 4096

/* Inner chunks of one shard: an index of 16 bytes each, read whole. */
#define ZM__SHARD_CHUNKS_MAX ((uint64_t)1 << 24)

/* Bytes of one stored value (a fixed-length string "<U16384", "|S65536",
 * a record) read at most. Its fill is made when the metadata is read, so
 * a type of more ("<U4000000000" is 16 GB a value) is valid metadata we do
 * not read, refused on use rather than allocated and filled for nothing
 * but its claim. */
#define ZM__VALUE_BYTES_MAX ((size_t)64 << 10)

/* ---- documents ------------------------------------------------------------------ */

/* Whether c ends a bare token (NaN, a number) in JSON text. */
static bool zm__delimiter(unsigned char c)
{
    return c == ',' || c == ']' || c == '}' || c == ':' || c == ' ' || c == '\t' || c == '\n' ||
           c == '\r';
}

/* Checks a document's nesting before parsing it, and rewrites the two
 * things Python's json module writes that JSON (and jansson) has no room
 * for: NaN, Infinity and -Infinity (zarr 2 writes attributes, and very old
 * versions fill values, with allow_nan), which become the strings "NaN",
 * "Infinity" and "-Infinity" (the spelling Zarr itself gives them as fill
 * values); and integers past int64 (a uint64 fill value), which become
 * strings of their digits, so that jansson can read the rest. *out is text
 * (NULL when nothing needed rewriting). */
static int zm__json_prepare(const char *key, const char *text, size_t size, char **out,
                            size_t *out_size, zm_err *err)
{
    *out = NULL;
    *out_size = 0;
    char *copy = NULL;
    size_t at = 0; /* bytes of text copied so far (copy != NULL) */
    size_t used = 0, cap = 0;
    size_t depth = 0;
    bool in_string = false, escape = false;
    for (size_t i = 0; i < size; i++) {
        unsigned char c = (unsigned char)text[i];
        if (in_string) {
            if (escape)
                escape = false;
            else if (c == '\\')
                escape = true;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
            continue;
        }
        if (c == '[' || c == '{') {
            if (++depth > ZM__JSON_DEPTH_MAX) {
                free(copy); /* a NaN or a big integer before may have begun it */
                return zm_err_set(err, -EINVAL, "%s: nested deeper than %d levels", key,
                                  ZM__JSON_DEPTH_MAX);
            }
            continue;
        }
        if (c == ']' || c == '}') {
            if (depth > 0)
                depth--;
            continue;
        }
        bool token_start = i == 0 || zm__delimiter((unsigned char)text[i - 1]) ||
                           text[i - 1] == '[' || text[i - 1] == '{';
        if (!token_start)
            continue;
        size_t length = 0;
        bool quote = false;
        if (c == 'N' && size - i >= 3 && memcmp(text + i, "NaN", 3) == 0) {
            length = 3;
            quote = true;
        } else if (c == 'I' && size - i >= 8 && memcmp(text + i, "Infinity", 8) == 0) {
            length = 8;
            quote = true;
        } else if (c == '-' && size - i >= 9 && memcmp(text + i, "-Infinity", 9) == 0) {
            length = 9;
            quote = true;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            /* An integer's digits: past 18 of them, it may not fit int64. */
            size_t j = i + (c == '-'), digits = 0;
            while (j < size && text[j] >= '0' && text[j] <= '9')
                j++, digits++;
            bool integer = j == size || zm__delimiter((unsigned char)text[j]);
            if (integer && digits > 18) {
                errno = 0;
                char *end;
                if (c == '-')
                    (void)strtoll(text + i, &end, 10);
                else
                    (void)strtoull(text + i, &end, 10);
                /* Past int64 for jansson: negative or positive. */
                if (errno == ERANGE || (c != '-' && strtoull(text + i, NULL, 10) > INT64_MAX)) {
                    length = j - i;
                    quote = true;
                }
            }
            if (!quote) {
                i = j > i ? j - 1 : i;
                continue;
            }
        }
        if (!quote || (i + length < size && !zm__delimiter((unsigned char)text[i + length])))
            continue;
        if (copy == NULL) {
            /* Each rewrite adds two quotes to at least three bytes. */
            cap = size + size / 3 * 2 + 16;
            if ((copy = malloc(cap)) == NULL)
                return zm_err_set(err, -ENOMEM, "%s: out of memory for %zu bytes", key, cap);
        }
        size_t before = i - at;
        memcpy(copy + used, text + at, before);
        used += before;
        copy[used++] = '"';
        memcpy(copy + used, text + i, length);
        used += length;
        copy[used++] = '"';
        at = i + length;
        i = at - 1;
    }
    if (copy != NULL) {
        memcpy(copy + used, text + at, size - at);
        used += size - at;
        copy[used] = '\0';
        *out = copy;
        *out_size = used;
    }
    return 0;
}

/* A metadata document, parsed: -ENOENT when the store has no such key. */
static int zm__read_json(zm__store *store, const char *key, uint64_t *bytes_read, json_t **out,
                         zm_err *err)
{
    *out = NULL;
    uint8_t *bytes = NULL;
    size_t size = 0;
    int rc = zm__store_get(store, key, ZM__STORE_METADATA_MAX, &bytes, &size, bytes_read, err);
    if (rc < 0)
        return rc;
    char *rewritten = NULL;
    size_t rewritten_size = 0;
    rc = zm__json_prepare(key, (const char *)bytes, size, &rewritten, &rewritten_size, err);
    if (rc < 0) {
        free(bytes);
        return rc;
    }
    json_error_t error;
    json_t *doc = rewritten ? json_loadb(rewritten, rewritten_size, 0, &error)
                            : json_loadb((const char *)bytes, size, 0, &error);
    free(rewritten);
    free(bytes);
    if (doc == NULL)
        return zm_err_set(err, -EINVAL, "%s: not valid JSON (line %d, column %d: %.200s)", key,
                          error.line, error.column, error.text);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return zm_err_set(err, -EINVAL, "%s: not a JSON object", key);
    }
    *out = doc;
    return 0;
}

/* ---- numbers in metadata -------------------------------------------------------- */

/* A non-negative JSON integer. */
static int zm__get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* shape or chunk_shape: at most ZM_MAX_RANK non-negative integers
 * (positive when positive). */
static int zm__parse_dims(json_t *v, const char *where, const char *field, bool positive,
                          unsigned *rank, uint64_t *dims, zm_err *err)
{
    if (!json_is_array(v))
        return zm_err_set(err, -EINVAL, "%s: %s is not a list of integers", where, field);
    size_t n = json_array_size(v);
    if (n > ZM_MAX_RANK)
        return zm_err_set(err, -EINVAL, "%s: %s has %zu dimensions (at most %d)", where, field, n,
                          ZM_MAX_RANK);
    for (size_t d = 0; d < n; d++) {
        if (zm__get_u64(json_array_get(v, d), &dims[d]) < 0)
            return zm_err_set(err, -EINVAL, "%s: %s[%zu] is not a non-negative integer", where,
                              field, d);
        if (positive && dims[d] == 0)
            return zm_err_set(err, -EINVAL,
                              "%s: %s[%zu] is 0 (a chunk has at least one value "
                              "along each dimension)",
                              where, field, d);
    }
    *rank = (unsigned)n;
    return 0;
}

/* The product of dims times item_size, or -EINVAL when it passes
 * uint64 (or size_t where the values must be held in memory at once). */
static int zm__dims_bytes(const uint64_t *dims, unsigned rank, size_t item_size, bool in_memory,
                          const char *where, const char *field, uint64_t *out, zm_err *err)
{
    uint64_t n = 1;
    for (unsigned d = 0; d < rank; d++) {
        if (dims[d] != 0 && n > UINT64_MAX / dims[d])
            return zm_err_set(err, -EINVAL, "%s: %s holds more than 2^64 values", where, field);
        n *= dims[d];
    }
    uint64_t size = item_size > 0 ? item_size : 1;
    if (n > UINT64_MAX / size || (in_memory && n * size > SIZE_MAX))
        return zm_err_set(err, -EINVAL, "%s: %s takes more bytes than %s", where, field,
                          in_memory ? "memory holds" : "2^64");
    *out = n;
    return 0;
}

/* ---- data types --------------------------------------------------------------------- */

static void zm__set_unsupported(zm__zarray *a, const char *fmt, const char *what)
{
    if (a->unsupported[0] == '\0')
        snprintf(a->unsupported, sizeof a->unsupported, fmt, what);
}

/* One numpy type string ("<f4", "|b1", "|S18", ">U10", "|O") into a value
 * type. Returns 0 (value, dtype, size, big_endian set; *unsupported a
 * reason when numpy has the type and we do not read it) or -EINVAL. */
typedef struct zm__simple_type {
    zm__zvalue value;
    zm_dtype dtype;
    size_t size;
    int big_endian;
    const char *unsupported; /* why not, or NULL */
} zm__simple_type;

static int zm__numpy_type(const char *text, zm__simple_type *t)
{
    memset(t, 0, sizeof *t);
    char order = text[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return -1;
    char kind = text[1];
    if (kind == '\0')
        return -1;
    const char *digits = text + 2;
    uint64_t n = 0;
    size_t count = 0;
    while (digits[count] >= '0' && digits[count] <= '9') {
        if (n > UINT32_MAX)
            return -1;
        n = n * 10 + (uint64_t)(digits[count] - '0');
        count++;
    }
    const char *rest = digits + count;
    t->big_endian = order == '>';
    switch (kind) {
    case 'b':
    case 'i':
    case 'u':
    case 'f':
        if (*rest != '\0' || count == 0)
            return -1;
        if (kind == 'b' && n != 1)
            return -1;
        if ((kind == 'i' || kind == 'u') && n != 1 && n != 2 && n != 4 && n != 8)
            return -1;
        if (kind == 'f' && n != 2 && n != 4 && n != 8 && n != 16)
            return -1;
        t->value = ZM__ZVALUE_NUMBER;
        t->size = (size_t)n;
        t->dtype.size = (unsigned)n;
        t->dtype.type_class = kind == 'b'   ? ZM_TYPE_BOOL
                              : kind == 'i' ? ZM_TYPE_INT
                              : kind == 'u' ? ZM_TYPE_UINT
                                            : ZM_TYPE_FLOAT;
        if (kind == 'f' && n == 2)
            t->unsupported = "float16";
        if (kind == 'f' && n == 16)
            t->unsupported = "long double";
        if (n == 1)
            t->big_endian = 0;
        return 0;
    case 'S':
    case 'U':
        if (*rest != '\0' || count == 0)
            return -1;
        if (n == 0)
            return -1;
        t->value = kind == 'S' ? ZM__ZVALUE_BYTES : ZM__ZVALUE_UNICODE;
        t->size = kind == 'S' ? (size_t)n : (size_t)n * 4;
        t->dtype.type_class = ZM_TYPE_STRING;
        if (kind == 'S')
            t->big_endian = 0;
        return 0;
    case 'O':
        if (*rest != '\0' || (count > 0 && n != 8))
            return -1;
        t->value = ZM__ZVALUE_VLEN;
        t->dtype.type_class = ZM_TYPE_STRING;
        t->big_endian = 0;
        return 0;
    case 'c':
        if (*rest != '\0' || (n != 8 && n != 16 && n != 32))
            return -1;
        t->value = ZM__ZVALUE_NUMBER;
        t->size = (size_t)n;
        t->unsupported = "complex";
        return 0;
    case 'm':
    case 'M':
        /* "<M8[ns]": datetimes and timedeltas, 8 bytes with a unit. */
        if (count == 0 || n != 8 || (*rest != '\0' && *rest != '['))
            return -1;
        t->value = ZM__ZVALUE_NUMBER;
        t->size = 8;
        t->unsupported = kind == 'M' ? "datetime64" : "timedelta64";
        return 0;
    case 'V':
        if (*rest != '\0' || count == 0 || n == 0)
            return -1;
        t->value = ZM__ZVALUE_BYTES;
        t->size = (size_t)n;
        t->unsupported = "raw void";
        return 0;
    default:
        return -1;
    }
}

/* v2 structured dtype: [[name, type], ...] (a field of a shape, or of
 * another structured type, is numpy's too, and not read), packed as numpy
 * packs it without align: each field right after the one before. */
static int zm__v2_fields(json_t *list, zm__zarray *a, const char *where, zm_err *err)
{
    size_t n = json_array_size(list);
    if (n == 0)
        return zm_err_set(err, -EINVAL, "%s: dtype is a structured type with no field", where);
    if (n > ZM__FIELDS_MAX)
        return zm_err_set(err, -EINVAL, "%s: dtype has %zu fields (at most %d)", where, n,
                          ZM__FIELDS_MAX);
    a->fields = calloc(n, sizeof *a->fields);
    if (a->fields == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory for %zu fields", where, n);
    a->field_count = n;
    size_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *f = json_array_get(list, i);
        json_t *name = json_array_get(f, 0), *type = json_array_get(f, 1);
        if (!json_is_array(f) || json_array_size(f) < 2 || json_array_size(f) > 3 ||
            !json_is_string(name))
            return zm_err_set(err, -EINVAL,
                              "%s: dtype field %zu is not [name, type] or [name, type, shape]",
                              where, i);
        const char *field_name = json_string_value(name);
        if (strlen(field_name) >= sizeof a->fields[i].name)
            return zm_err_set(err, -EINVAL, "%s: dtype field %zu's name is longer than %zu bytes",
                              where, i, sizeof a->fields[i].name - 1);
        for (size_t j = 0; j < i; j++)
            if (strcmp(a->fields[j].name, field_name) == 0)
                return zm_err_set(err, -EINVAL, "%s: dtype names field \"%s\" twice", where,
                                  field_name);
        zm__zfield *field = &a->fields[i];
        snprintf(field->name, sizeof field->name, "%s", field_name);
        zm__simple_type t;
        if (json_is_array(type) || json_array_size(f) == 3) {
            /* Nested or with a shape: numpy's, not ours. Its size is not
             * needed: the array is refused whole. */
            zm__set_unsupported(a, "data type: field \"%.100s\" is nested or has a shape",
                                field_name);
            field->value = ZM__ZVALUE_BYTES;
            continue;
        }
        if (!json_is_string(type) || zm__numpy_type(json_string_value(type), &t) < 0)
            return zm_err_set(err, -EINVAL, "%s: dtype field \"%s\" has no numpy type", where,
                              field_name);
        if (t.value == ZM__ZVALUE_VLEN)
            zm__set_unsupported(a, "data type: field \"%.100s\" holds Python objects", field_name);
        else if (t.unsupported != NULL)
            zm__set_unsupported(a, "data type: a field of %s is not supported", t.unsupported);
        field->value = t.value;
        field->dtype = t.dtype;
        field->big_endian = t.big_endian;
        field->size = t.size;
        field->offset = offset;
        if (t.size > SIZE_MAX - offset)
            return zm_err_set(err, -EINVAL, "%s: dtype's fields take more bytes than memory holds",
                              where);
        offset += t.size;
    }
    a->value = ZM__ZVALUE_RECORDS;
    a->item_size = offset;
    a->dtype.type_class = ZM_TYPE_STRING; /* no single number type: fields say theirs */
    a->dtype.size = 0;
    snprintf(a->dtype_name, sizeof a->dtype_name, "structured (%zu fields)", n);
    return 0;
}

/* ---- fill values ---------------------------------------------------------------------- */

static void zm__store_native(uint8_t *to, const void *value, size_t size)
{
    memcpy(to, value, size);
}

static void zm__reverse(uint8_t *bytes, size_t size)
{
    for (size_t a = 0, b = size ? size - 1 : 0; a < b; a++, b--) {
        uint8_t t = bytes[a];
        bytes[a] = bytes[b];
        bytes[b] = t;
    }
}

static int zm__hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One number's fill, from JSON, into to (t's size, native order). 1 when
 * the JSON value cannot be this number (the caller names it), 0 done. */
static int zm__number_fill(json_t *v, zm_dtype t, uint8_t *to)
{
    if (t.type_class == ZM_TYPE_BOOL) {
        uint8_t b;
        if (json_is_boolean(v))
            b = json_is_true(v);
        else if (json_is_integer(v))
            b = json_integer_value(v) != 0;
        else if (json_is_real(v))
            b = json_real_value(v) != 0;
        else
            return 1;
        to[0] = b;
        return 0;
    }
    if (t.type_class == ZM_TYPE_FLOAT) {
        double d;
        if (json_is_integer(v)) {
            d = (double)json_integer_value(v);
        } else if (json_is_real(v)) {
            d = json_real_value(v);
        } else if (json_is_string(v)) {
            const char *s = json_string_value(v);
            size_t n = strlen(s);
            if (strcmp(s, "NaN") == 0) {
                /* The quiet NaNs numpy makes of float("nan"). */
                if (t.size == 4) {
                    uint32_t bits = 0x7fc00000u;
                    zm__store_native(to, &bits, 4);
                } else {
                    uint64_t bits = 0x7ff8000000000000ull;
                    zm__store_native(to, &bits, 8);
                }
                return 0;
            } else if (strcmp(s, "Infinity") == 0) {
                d = INFINITY;
            } else if (strcmp(s, "-Infinity") == 0) {
                d = -INFINITY;
            } else if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
                /* v3: the value's bits, most significant first. */
                if (n - 2 != 2 * (size_t)t.size)
                    return 1;
                uint8_t bits[8];
                for (unsigned i = 0; i < t.size; i++) {
                    int hi = zm__hex_digit(s[2 + 2 * i]), lo = zm__hex_digit(s[3 + 2 * i]);
                    if (hi < 0 || lo < 0)
                        return 1;
                    bits[i] = (uint8_t)(hi << 4 | lo);
                }
                zm__reverse(bits, t.size); /* to little-endian, this machine's order */
                memcpy(to, bits, t.size);
                return 0;
            } else {
                /* numpy reads a number's text too (np.array("1.5", "f4")). */
                char *end;
                d = strtod(s, &end);
                if (end == s || *end != '\0')
                    return 1;
            }
        } else {
            return 1;
        }
        if (t.size == 4) {
            float f = (float)d;
            zm__store_native(to, &f, 4);
        } else {
            zm__store_native(to, &d, 8);
        }
        return 0;
    }
    /* Integers: numpy truncates a real toward zero, reads true as 1 and
     * a string of digits (a uint64 past int64, which zm__json_prepare
     * quoted) as its number; out of range is an error. */
    bool is_unsigned = t.type_class == ZM_TYPE_UINT;
    int64_t sv = 0;
    uint64_t uv = 0;
    bool negative = false;
    if (json_is_boolean(v)) {
        sv = json_is_true(v);
        uv = (uint64_t)sv;
    } else if (json_is_integer(v)) {
        sv = json_integer_value(v);
        negative = sv < 0;
        uv = (uint64_t)sv;
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!isfinite(d) || d <= -9223372036854775809.0 || d >= 18446744073709551616.0)
            return 1;
        d = trunc(d);
        negative = d < 0;
        if (negative)
            sv = (int64_t)d;
        else
            uv = (uint64_t)d;
        if (!negative)
            sv = uv > INT64_MAX ? INT64_MAX : (int64_t)uv;
        else
            uv = (uint64_t)sv;
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        if (s[0] == '-') {
            sv = strtoll(s, &end, 10);
            negative = true;
            uv = (uint64_t)sv;
        } else {
            uv = strtoull(s, &end, 10);
            sv = uv > INT64_MAX ? INT64_MAX : (int64_t)uv;
        }
        if (end == s || *end != '\0' || errno == ERANGE ||
            !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
            return 1;
    } else {
        return 1;
    }
    unsigned bits = t.size * 8;
    if (is_unsigned) {
        if (negative || (bits < 64 && uv >> bits != 0))
            return 1;
    } else {
        if (!negative && uv > (uint64_t)INT64_MAX)
            return 1;
        if (bits < 64) {
            int64_t low = -((int64_t)1 << (bits - 1)), high = ((int64_t)1 << (bits - 1)) - 1;
            if (sv < low || sv > high)
                return 1;
        }
    }
    uint64_t raw = is_unsigned ? uv : (uint64_t)sv;
    /* This machine is little-endian (zarrmount reads native order as
     * little-endian throughout): the low bytes first. */
    for (unsigned i = 0; i < t.size; i++)
        to[i] = (uint8_t)(raw >> (8 * i));
    return 0;
}

/* Decodes one UTF-8 sequence; the code point, or -1. */
static int32_t zm__utf8_next(const unsigned char **p, const unsigned char *end)
{
    const unsigned char *s = *p;
    unsigned char c = s[0];
    size_t length = c < 0x80                 ? 1
                    : c >= 0xc2 && c <= 0xdf ? 2
                    : c >= 0xe0 && c <= 0xef ? 3
                    : c >= 0xf0 && c <= 0xf4 ? 4
                                             : 0;
    if (length == 0 || (size_t)(end - s) < length)
        return -1;
    uint32_t value = length == 1 ? c : c & (0x7fu >> length);
    for (size_t i = 1; i < length; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        value = value << 6 | (s[i] & 0x3fu);
    }
    *p = s + length;
    return (int32_t)value;
}

/* A text fill (UNICODE: UCS-4 in native order; BYTES: its bytes), cut or
 * padded with NULs to size bytes, as numpy makes np.array(text, "<U10"). */
static int zm__text_fill(const char *text, size_t length, bool ucs4, uint8_t *to, size_t size)
{
    memset(to, 0, size);
    if (!ucs4) {
        memcpy(to, text, length < size ? length : size);
        return 0;
    }
    const unsigned char *p = (const unsigned char *)text, *end = p + length;
    size_t at = 0;
    while (p < end && at + 4 <= size) {
        int32_t cp = zm__utf8_next(&p, end);
        if (cp < 0)
            return 1;
        uint32_t u = (uint32_t)cp;
        memcpy(to + at, &u, 4);
        at += 4;
    }
    return 0;
}

/* A number written as numpy would write it as text ("0" for 0), for a text
 * fill numpy makes of a number. */
static int zm__number_text(json_t *v, char *buffer, size_t size)
{
    if (json_is_integer(v))
        return snprintf(buffer, size, "%lld", (long long)json_integer_value(v));
    if (json_is_boolean(v))
        return snprintf(buffer, size, "%s", json_is_true(v) ? "True" : "False");
    return -1;
}

/* One value's fill (a field's, or the array's) into to, t's bytes: 0,
 * 1 (the caller names what was wrong). */
static int zm__value_fill(json_t *v, zm__zvalue value, zm_dtype dtype, size_t size, int zarr_format,
                          uint8_t *to)
{
    switch (value) {
    case ZM__ZVALUE_NUMBER:
        return zm__number_fill(v, dtype, to);
    case ZM__ZVALUE_BYTES: {
        if (json_is_string(v)) {
            /* Base64 (v2's and zarr-python 3's encoding of bytes); v2 read
             * text that is not as the text itself, as zarr 2 leniently does. */
            const char *s = json_string_value(v);
            size_t n = json_string_length(v);
            uint8_t *decoded = NULL;
            size_t decoded_size = 0;
            if (zm_base64_decode(s, n, &decoded, &decoded_size) == 0) {
                zm__text_fill((const char *)decoded, decoded_size, false, to, size);
                free(decoded);
                return 0;
            }
            if (zarr_format == 3)
                return 1;
            return zm__text_fill(s, n, false, to, size);
        }
        char text[32];
        int n = zarr_format == 2 ? zm__number_text(v, text, sizeof text) : -1;
        if (n < 0)
            return 1;
        return zm__text_fill(text, (size_t)n, false, to, size);
    }
    case ZM__ZVALUE_UNICODE: {
        if (json_is_string(v))
            return zm__text_fill(json_string_value(v), json_string_length(v), true, to, size);
        char text[32];
        int n = zarr_format == 2 ? zm__number_text(v, text, sizeof text) : -1;
        if (n < 0)
            return 1;
        return zm__text_fill(text, (size_t)n, true, to, size);
    }
    default:
        return 1;
    }
}

/* No fill the metadata gives (null, or v2's structured and object fills we
 * cannot make): fill_missing, and the type's zero, as zarr-python 3 reads
 * a chunk never written (zarr_store.h). */
static int zm__default_fill(zm__zarray *a, const char *where, zm_err *err)
{
    a->fill_missing = 1;
    size_t size = a->value == ZM__ZVALUE_VLEN ? 0 : a->item_size;
    if ((a->fill_bytes = calloc(1, size + 1)) == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory for the fill value", where);
    a->fill_size = size;
    return 0;
}

static int zm__parse_fill(json_t *v, zm__zarray *a, const char *where, zm_err *err)
{
    a->fill_missing = 1;
    if (a->unsupported[0] != '\0')
        return 0; /* a type we do not read: its fill is not needed */
    if (v == NULL || json_is_null(v))
        return zm__default_fill(a, where, err);
    if (a->value == ZM__ZVALUE_VLEN) {
        /* A string fill; zarr 2's default for objects, 0, is no string. */
        if (!json_is_string(v))
            return zm__default_fill(a, where, err);
        size_t n = json_string_length(v);
        if ((a->fill_bytes = malloc(n + 1)) == NULL)
            return zm_err_set(err, -ENOMEM, "%s: out of memory for the fill value", where);
        memcpy(a->fill_bytes, json_string_value(v), n + 1);
        a->fill_size = n;
        a->fill_missing = 0;
        return 0;
    }
    size_t size = a->item_size;
    uint8_t *fill = calloc(1, size > 0 ? size : 1);
    if (fill == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory for the fill value", where);
    int bad = 0;
    if (a->value == ZM__ZVALUE_RECORDS) {
        if (json_is_string(v)) {
            /* Base64 of one record as stored (v2, zarr-python 3's
             * "structured"); numpy pads or cuts it to the record. */
            uint8_t *decoded = NULL;
            size_t decoded_size = 0;
            if (zm_base64_decode(json_string_value(v), json_string_length(v), &decoded,
                                 &decoded_size) == 0) {
                memcpy(fill, decoded, decoded_size < size ? decoded_size : size);
                free(decoded);
            } else {
                bad = 1;
            }
        } else if (json_is_object(v) && a->zarr_format == 3) {
            /* "struct": each field's own fill by name. */
            for (size_t i = 0; i < a->field_count && !bad; i++) {
                const zm__zfield *f = &a->fields[i];
                json_t *fv = json_object_get(v, f->name);
                if (fv == NULL) {
                    bad = 1;
                    break;
                }
                bad = zm__value_fill(fv, f->value, f->dtype, f->size, 3, fill + f->offset);
                if (!bad && f->big_endian && f->value == ZM__ZVALUE_NUMBER)
                    zm__reverse(fill + f->offset, f->size);
                if (!bad && f->big_endian && f->value == ZM__ZVALUE_UNICODE)
                    for (size_t k = 0; k + 4 <= f->size; k += 4)
                        zm__reverse(fill + f->offset + k, 4);
            }
        } else {
            bad = 1;
        }
        if (bad && a->zarr_format == 2) {
            /* zarr 2 itself fails on a structured fill it cannot decode,
             * zarr-python 3 makes zeros of it: no fill, the zero record. */
            free(fill);
            return zm__default_fill(a, where, err);
        }
    } else {
        bad = zm__value_fill(v, a->value, a->dtype, size, a->zarr_format, fill);
    }
    if (bad) {
        free(fill);
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        int rc = zm_err_set(err, -EINVAL, "%s: fill_value %.80s is not a value of %s", where,
                            text ? text : "(unprintable)", a->dtype_name);
        free(text);
        return rc;
    }
    a->fill_bytes = fill;
    a->fill_size = size;
    a->fill_missing = 0;
    if (size <= sizeof a->fill)
        memcpy(a->fill, fill, size);
    return 0;
}

/* ---- codecs ------------------------------------------------------------------------ */

static int zm__add_codec(zm__zcodec *codecs, unsigned *count, zm__zcodec_id id, const char *name,
                         const char *where, zm_err *err)
{
    if (*count >= ZM__ZCODEC_MAX)
        return zm_err_set(err, -EINVAL, "%s: more than %d codecs", where, ZM__ZCODEC_MAX);
    zm__zcodec *c = &codecs[(*count)++];
    memset(c, 0, sizeof *c);
    c->id = id;
    c->word_size = 1;
    snprintf(c->name, sizeof c->name, "%s", name);
    return 0;
}

static int zm__json_level(json_t *config, const char *key)
{
    json_t *v = json_object_get(config, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : 0;
}

/* A compressor or checksum named the numcodecs way (a v2 id, or a v3
 * "numcodecs.NAME" without its prefix): its id, or ZM__ZCODEC_OTHER. */
static zm__zcodec_id zm__numcodecs_id(const char *id, json_t *config, int *level)
{
    /* Each compressor, and the configuration key holding its level. */
    static const struct {
        const char *id;
        zm__zcodec_id codec;
        const char *level;
    } compressors[] = {
        {"blosc", ZM__ZCODEC_BLOSC, "clevel"}, {"zstd", ZM__ZCODEC_ZSTD, "level"},
        {"zlib", ZM__ZCODEC_ZLIB, "level"},    {"gzip", ZM__ZCODEC_GZIP, "level"},
        {"lz4", ZM__ZCODEC_LZ4, "acceleration"}, {"bz2", ZM__ZCODEC_BZ2, "level"},
    };
    *level = 0;
    for (size_t i = 0; i < sizeof compressors / sizeof compressors[0]; i++)
        if (strcmp(id, compressors[i].id) == 0) {
            *level = zm__json_level(config, compressors[i].level);
            return compressors[i].codec;
        }
    if (strcmp(id, "crc32c") == 0) {
        /* numcodecs' CRC32C puts its checksum at the end unless told
         * otherwise: then it is v3's crc32c. */
        json_t *location = json_object_get(config, "location");
        if (location == NULL || json_is_null(location) ||
            (json_is_string(location) && strcmp(json_string_value(location), "end") == 0))
            return ZM__ZCODEC_CRC32C;
        return ZM__ZCODEC_OTHER;
    }
    return ZM__ZCODEC_OTHER;
}

/* v2: filters (each {"id": ...}) then the compressor. */
static int zm__v2_codecs(json_t *doc, zm__zarray *a, const char *where, zm_err *err)
{
    json_t *filters = json_object_get(doc, "filters");
    json_t *compressor = json_object_get(doc, "compressor");
    if (filters != NULL && !json_is_null(filters) && !json_is_array(filters))
        return zm_err_set(err, -EINVAL, "%s: filters is neither null nor a list", where);
    if (compressor != NULL && !json_is_null(compressor) && !json_is_object(compressor))
        return zm_err_set(err, -EINVAL, "%s: compressor is neither null nor an object", where);
    /* A big-endian dtype implies a byte order to undo (zarr_store.h). */
    if (a->value == ZM__ZVALUE_NUMBER || a->value == ZM__ZVALUE_UNICODE) {
        if (a->big_endian && a->item_size > 1) {
            int rc =
                zm__add_codec(a->codecs, &a->codec_count, ZM__ZCODEC_BYTES, "bytes", where, err);
            if (rc < 0)
                return rc;
            a->codecs[0].big_endian = 1;
            a->codecs[0].word_size = a->value == ZM__ZVALUE_UNICODE ? 4 : (unsigned)a->item_size;
        }
    }
    size_t n = json_is_array(filters) ? json_array_size(filters) : 0;
    for (size_t i = 0; i < n; i++) {
        json_t *f = json_array_get(filters, i);
        json_t *id = json_object_get(f, "id");
        if (!json_is_object(f) || !json_is_string(id))
            return zm_err_set(err, -EINVAL, "%s: filter %zu has no \"id\"", where, i);
        const char *name = json_string_value(id);
        if (strcmp(name, "vlen-utf8") == 0) {
            if (a->value != ZM__ZVALUE_VLEN || i != 0)
                return zm_err_set(err, -EINVAL, "%s: filter vlen-utf8 %s", where,
                                  a->value != ZM__ZVALUE_VLEN ? "on a dtype that is not |O"
                                                              : "after another filter");
            int rc =
                zm__add_codec(a->codecs, &a->codec_count, ZM__ZCODEC_VLEN_UTF8, name, where, err);
            if (rc < 0)
                return rc;
            continue;
        }
        if (i == 0 && a->value == ZM__ZVALUE_VLEN)
            zm__set_unsupported(a, "object codec \"%.64s\" is not supported (only vlen-utf8)",
                                name);
        int rc = zm__add_codec(a->codecs, &a->codec_count, ZM__ZCODEC_OTHER, name, where, err);
        if (rc < 0)
            return rc;
    }
    if (a->value == ZM__ZVALUE_VLEN && n == 0)
        zm__set_unsupported(a, "%s", "data type |O without an object codec (filters name none)");
    if (json_is_object(compressor)) {
        json_t *id = json_object_get(compressor, "id");
        if (!json_is_string(id))
            return zm_err_set(err, -EINVAL, "%s: compressor has no \"id\"", where);
        int level = 0;
        zm__zcodec_id cid = zm__numcodecs_id(json_string_value(id), compressor, &level);
        int rc = zm__add_codec(a->codecs, &a->codec_count, cid, json_string_value(id), where, err);
        if (rc < 0)
            return rc;
        a->codecs[a->codec_count - 1].level = level;
    }
    return 0;
}

static bool zm__v3_bytes_to_bytes(zm__zcodec_id id)
{
    return id == ZM__ZCODEC_BLOSC || id == ZM__ZCODEC_ZSTD || id == ZM__ZCODEC_GZIP ||
           id == ZM__ZCODEC_ZLIB || id == ZM__ZCODEC_LZ4 || id == ZM__ZCODEC_BZ2 ||
           id == ZM__ZCODEC_CRC32C;
}

static int zm__v3_chain(json_t *list, zm__zarray *a, unsigned rank, const uint64_t *chunk_shape,
                        zm__zcodec *codecs, unsigned *count, bool inner, const char *where,
                        zm_err *err);

/* sharding_indexed's configuration, for an array whose chunk grid is the
 * shards. */
static int zm__v3_sharding(json_t *config, zm__zarray *a, const char *where, zm_err *err)
{
    if (a->shard != NULL)
        return zm_err_set(err, -EINVAL, "%s: sharding_indexed twice in one chain", where);
    if (!json_is_object(config))
        return zm_err_set(err, -EINVAL, "%s: sharding_indexed has no configuration", where);
    zm__zshard *s = calloc(1, sizeof *s);
    if (s == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", where);
    a->shard = s;
    unsigned rank = 0;
    int rc = zm__parse_dims(json_object_get(config, "chunk_shape"), where,
                            "sharding_indexed chunk_shape", true, &rank, s->inner, err);
    if (rc < 0)
        return rc;
    if (rank != a->rank)
        return zm_err_set(err, -EINVAL,
                          "%s: sharding_indexed chunk_shape has %u dimensions, the array %u", where,
                          rank, a->rank);
    uint64_t per = 1;
    for (unsigned d = 0; d < rank; d++) {
        if (a->chunks[d] % s->inner[d] != 0)
            return zm_err_set(err, -EINVAL,
                              "%s: sharding_indexed chunk_shape[%u] (%llu) does not divide the "
                              "shard's %llu",
                              where, d, (unsigned long long)s->inner[d],
                              (unsigned long long)a->chunks[d]);
        uint64_t along = a->chunks[d] / s->inner[d];
        if (per > ZM__SHARD_CHUNKS_MAX / along)
            return zm_err_set(err, -EINVAL,
                              "%s: sharding_indexed: a shard of more than %llu inner chunks", where,
                              (unsigned long long)ZM__SHARD_CHUNKS_MAX);
        per *= along;
    }
    s->per_shard = per;
    uint64_t inner_values;
    if ((rc = zm__dims_bytes(s->inner, rank, a->item_size, true, where,
                             "sharding_indexed chunk_shape", &inner_values, err)) < 0)
        return rc;
    json_t *location = json_object_get(config, "index_location");
    if (location == NULL ||
        (json_is_string(location) && strcmp(json_string_value(location), "end") == 0))
        s->index_at_start = 0;
    else if (json_is_string(location) && strcmp(json_string_value(location), "start") == 0)
        s->index_at_start = 1;
    else
        return zm_err_set(err, -EINVAL,
                          "%s: sharding_indexed index_location is not \"start\" or \"end\"", where);
    json_t *codecs = json_object_get(config, "codecs");
    if (!json_is_array(codecs))
        return zm_err_set(err, -EINVAL, "%s: sharding_indexed has no codecs list", where);
    if ((rc = zm__v3_chain(codecs, a, rank, s->inner, s->codecs, &s->codec_count, true, where,
                           err)) < 0)
        return rc;
    /* The index: a uint64 array of (inner chunks, 2), through bytes and
     * crc32c only (a fixed size, read before anything else). */
    json_t *index_codecs = json_object_get(config, "index_codecs");
    if (!json_is_array(index_codecs))
        return zm_err_set(err, -EINVAL, "%s: sharding_indexed has no index_codecs list", where);
    size_t n = json_array_size(index_codecs);
    size_t index_bytes = (size_t)per * 16;
    bool seen_bytes = false;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(index_codecs, i);
        json_t *name = json_is_string(c) ? c : json_object_get(c, "name");
        if (!json_is_string(name))
            return zm_err_set(err, -EINVAL, "%s: sharding_indexed index codec %zu has no name",
                              where, i);
        const char *text = json_string_value(name);
        json_t *cc = json_is_object(c) ? json_object_get(c, "configuration") : NULL;
        zm__zcodec_id id = ZM__ZCODEC_OTHER;
        if (strcmp(text, "bytes") == 0 && !seen_bytes) {
            id = ZM__ZCODEC_BYTES;
        } else if (strcmp(text, "crc32c") == 0 && seen_bytes) {
            id = ZM__ZCODEC_CRC32C;
        } else if (strncmp(text, "numcodecs.", 10) == 0 && seen_bytes) {
            int level;
            if (zm__numcodecs_id(text + 10, cc, &level) == ZM__ZCODEC_CRC32C)
                id = ZM__ZCODEC_CRC32C;
        }
        if ((rc = zm__add_codec(s->index_codecs, &s->index_codec_count, id, text, where, err)) < 0)
            return rc;
        zm__zcodec *codec = &s->index_codecs[s->index_codec_count - 1];
        if (id == ZM__ZCODEC_BYTES) {
            seen_bytes = true;
            json_t *endian = json_object_get(cc, "endian");
            if (json_is_string(endian) && strcmp(json_string_value(endian), "big") == 0)
                codec->big_endian = 1;
            codec->word_size = 8;
        } else if (id == ZM__ZCODEC_CRC32C) {
            index_bytes += 4;
        }
    }
    if (!seen_bytes)
        return zm_err_set(err, -EINVAL, "%s: sharding_indexed index_codecs has no bytes codec",
                          where);
    s->index_bytes = index_bytes;
    return 0;
}

/* A v3 codecs list into codecs: array-to-array codecs, one array-to-bytes
 * codec, bytes-to-bytes codecs, in that order. */
static int zm__v3_chain(json_t *list, zm__zarray *a, unsigned rank, const uint64_t *chunk_shape,
                        zm__zcodec *codecs, unsigned *count, bool inner, const char *where,
                        zm_err *err)
{
    (void)chunk_shape;
    size_t n = json_array_size(list);
    if (n == 0)
        return zm_err_set(err, -EINVAL, "%s: codecs is empty (an array-to-bytes codec is needed)",
                          where);
    /* 0: array-to-array codecs may come; 1: after the array-to-bytes one. */
    int stage = 0;
    bool unknown = false;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(list, i);
        json_t *name_v = json_is_string(c) ? c : json_object_get(c, "name");
        if (!json_is_string(name_v))
            return zm_err_set(err, -EINVAL, "%s: codec %zu has no name", where, i);
        const char *name = json_string_value(name_v);
        json_t *config = json_is_object(c) ? json_object_get(c, "configuration") : NULL;
        if (config != NULL && !json_is_object(config))
            return zm_err_set(err, -EINVAL, "%s: codec %s's configuration is not an object", where,
                              name);
        zm__zcodec_id id = ZM__ZCODEC_OTHER;
        int level = 0;
        if (strcmp(name, "bytes") == 0)
            id = ZM__ZCODEC_BYTES;
        else if (strcmp(name, "transpose") == 0)
            id = ZM__ZCODEC_TRANSPOSE;
        else if (strcmp(name, "vlen-utf8") == 0)
            id = ZM__ZCODEC_VLEN_UTF8;
        else if (strcmp(name, "sharding_indexed") == 0)
            id = inner ? ZM__ZCODEC_OTHER : ZM__ZCODEC_SHARDING; /* one level of shards */
        else if (strcmp(name, "blosc") == 0 || strcmp(name, "zstd") == 0 ||
                 strcmp(name, "gzip") == 0 || strcmp(name, "crc32c") == 0)
            id = zm__numcodecs_id(name, config, &level);
        else if (strncmp(name, "numcodecs.", 10) == 0)
            id = zm__numcodecs_id(name + 10, config, &level);
        int rc = zm__add_codec(codecs, count, id, name, where, err);
        if (rc < 0)
            return rc;
        zm__zcodec *codec = &codecs[*count - 1];
        codec->level = level;
        if (id == ZM__ZCODEC_OTHER) {
            unknown = true;
            continue;
        }
        if (id == ZM__ZCODEC_TRANSPOSE) {
            if (stage != 0)
                return zm_err_set(err, -EINVAL, "%s: transpose after the array-to-bytes codec",
                                  where);
            json_t *order = json_object_get(config, "order");
            if (json_is_string(order)) {
                /* Early v3 drafts' "C" and "F". */
                const char *o = json_string_value(order);
                if (strcmp(o, "C") != 0 && strcmp(o, "F") != 0)
                    return zm_err_set(err, -EINVAL, "%s: transpose order \"%.16s\"", where, o);
                for (unsigned d = 0; d < rank; d++)
                    codec->order[d] = o[0] == 'C' ? d : rank - 1 - d;
                continue;
            }
            if (!json_is_array(order) || json_array_size(order) != rank)
                return zm_err_set(err, -EINVAL,
                                  "%s: transpose order is not a list of %u dimensions", where,
                                  rank);
            bool seen[ZM_MAX_RANK] = {false};
            for (unsigned d = 0; d < rank; d++) {
                uint64_t o;
                if (zm__get_u64(json_array_get(order, d), &o) < 0 || o >= rank || seen[o])
                    return zm_err_set(err, -EINVAL,
                                      "%s: transpose order is not a permutation of 0..%u", where,
                                      rank - 1);
                seen[o] = true;
                codec->order[d] = (unsigned)o;
            }
            continue;
        }
        if (id == ZM__ZCODEC_BYTES || id == ZM__ZCODEC_VLEN_UTF8 || id == ZM__ZCODEC_SHARDING) {
            if (stage != 0)
                return zm_err_set(err, -EINVAL, "%s: a second array-to-bytes codec (%s)", where,
                                  name);
            stage = 1;
            if (id == ZM__ZCODEC_SHARDING) {
                if ((rc = zm__v3_sharding(config, a, where, err)) < 0)
                    return rc;
                continue;
            }
            bool strings = a->value == ZM__ZVALUE_VLEN;
            if (strings != (id == ZM__ZCODEC_VLEN_UTF8))
                return zm_err_set(err, -EINVAL, "%s: codec %s cannot encode data type %s", where,
                                  name, a->dtype_name);
            if (id == ZM__ZCODEC_BYTES) {
                json_t *endian = json_object_get(config, "endian");
                if (endian != NULL &&
                    !(json_is_string(endian) && (strcmp(json_string_value(endian), "little") == 0 ||
                                                 strcmp(json_string_value(endian), "big") == 0)))
                    return zm_err_set(err, -EINVAL, "%s: bytes endian is not \"little\" or \"big\"",
                                      where);
                codec->big_endian = endian != NULL && strcmp(json_string_value(endian), "big") == 0;
                codec->word_size = a->value == ZM__ZVALUE_NUMBER    ? (unsigned)a->item_size
                                   : a->value == ZM__ZVALUE_UNICODE ? 4
                                                                    : 1;
                if (a->value == ZM__ZVALUE_NUMBER)
                    a->big_endian = codec->big_endian && a->item_size > 1;
                if (a->value == ZM__ZVALUE_RECORDS && codec->big_endian)
                    for (size_t f = 0; f < a->field_count; f++)
                        a->fields[f].big_endian =
                            a->fields[f].value != ZM__ZVALUE_BYTES && a->fields[f].size > 1;
            }
            continue;
        }
        /* Bytes to bytes. */
        if (zm__v3_bytes_to_bytes(id) && stage != 1)
            return zm_err_set(err, -EINVAL, "%s: codec %s before the array-to-bytes codec", where,
                              name);
    }
    if (stage == 0 && !unknown)
        return zm_err_set(err, -EINVAL, "%s: codecs have no array-to-bytes codec", where);
    return 0;
}

/* ---- v3 data types ----------------------------------------------------------------- */

/* A v3 data type that is one value (not "struct"): a name, or an object
 * with a name and a configuration. */
static int zm__v3_simple_type(json_t *v, zm__simple_type *t, char *name, size_t name_size,
                              const char *where, zm_err *err)
{
    memset(t, 0, sizeof *t);
    json_t *name_v = json_is_string(v) ? v : json_object_get(v, "name");
    if (!json_is_string(name_v))
        return zm_err_set(err, -EINVAL, "%s: data_type has no name", where);
    const char *s = json_string_value(name_v);
    snprintf(name, name_size, "%s", s);
    json_t *config = json_is_object(v) ? json_object_get(v, "configuration") : NULL;
    static const struct {
        const char *name;
        zm_type_class type_class;
        unsigned size;
    } numbers[] = {
        {"bool", ZM_TYPE_BOOL, 1},     {"int8", ZM_TYPE_INT, 1},      {"int16", ZM_TYPE_INT, 2},
        {"int32", ZM_TYPE_INT, 4},     {"int64", ZM_TYPE_INT, 8},     {"uint8", ZM_TYPE_UINT, 1},
        {"uint16", ZM_TYPE_UINT, 2},   {"uint32", ZM_TYPE_UINT, 4},   {"uint64", ZM_TYPE_UINT, 8},
        {"float32", ZM_TYPE_FLOAT, 4}, {"float64", ZM_TYPE_FLOAT, 8},
    };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        if (strcmp(s, numbers[i].name) == 0) {
            t->value = ZM__ZVALUE_NUMBER;
            t->dtype.type_class = numbers[i].type_class;
            t->dtype.size = numbers[i].size;
            t->size = numbers[i].size;
            return 0;
        }
    if (strcmp(s, "string") == 0 || strcmp(s, "variable_length_utf8") == 0) {
        t->value = ZM__ZVALUE_VLEN;
        t->dtype.type_class = ZM_TYPE_STRING;
        return 0;
    }
    if (strcmp(s, "fixed_length_utf32") == 0 || strcmp(s, "null_terminated_bytes") == 0 ||
        strcmp(s, "fixed_length_ascii") == 0) {
        uint64_t length;
        if (zm__get_u64(json_object_get(config, "length_bytes"), &length) < 0 || length == 0 ||
            length > UINT32_MAX)
            return zm_err_set(err, -EINVAL, "%s: data_type %s has no length_bytes", where, s);
        bool ucs4 = strcmp(s, "fixed_length_utf32") == 0;
        if (ucs4 && length % 4 != 0)
            return zm_err_set(err, -EINVAL,
                              "%s: data_type %s: length_bytes %llu is not whole characters", where,
                              s, (unsigned long long)length);
        t->value = ucs4 ? ZM__ZVALUE_UNICODE : ZM__ZVALUE_BYTES;
        t->dtype.type_class = ZM_TYPE_STRING;
        t->size = (size_t)length;
        return 0;
    }
    /* Types zarr-python 3 has and we do not read: valid, refused on use. */
    static const char *const known[] = {
        "float16",          "complex64",         "complex128", "bytes", "variable_length_bytes",
        "numpy.datetime64", "numpy.timedelta64", "raw_bits"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(s, known[i]) == 0) {
            t->unsupported = known[i];
            break;
        }
    if (t->unsupported == NULL && s[0] == 'r' && s[1] >= '0' && s[1] <= '9')
        t->unsupported = "raw bits";
    if (t->unsupported == NULL)
        t->unsupported = s;
    /* The size of a type we do not read does not matter: the array is
     * refused whole; 1 keeps the arithmetic below defined. */
    t->value = ZM__ZVALUE_NUMBER;
    t->size = 1;
    return 0;
}

static int zm__v3_dtype(json_t *v, zm__zarray *a, const char *where, zm_err *err)
{
    json_t *name_v = json_is_string(v) ? v : json_object_get(v, "name");
    const char *name = json_is_string(name_v) ? json_string_value(name_v) : "";
    if (json_is_object(v) && (strcmp(name, "struct") == 0 || strcmp(name, "structured") == 0)) {
        /* Records: "struct" lists {name, data_type} objects, zarr-python
         * 3.1's "structured" [name, data_type] pairs; packed in order. */
        json_t *fields = json_object_get(json_object_get(v, "configuration"), "fields");
        size_t n = json_array_size(fields);
        if (!json_is_array(fields) || n == 0)
            return zm_err_set(err, -EINVAL, "%s: data_type %s has no fields", where, name);
        if (n > ZM__FIELDS_MAX)
            return zm_err_set(err, -EINVAL, "%s: data_type has %zu fields (at most %d)", where, n,
                              ZM__FIELDS_MAX);
        if ((a->fields = calloc(n, sizeof *a->fields)) == NULL)
            return zm_err_set(err, -ENOMEM, "%s: out of memory for %zu fields", where, n);
        a->field_count = n;
        size_t offset = 0;
        for (size_t i = 0; i < n; i++) {
            json_t *f = json_array_get(fields, i), *fname, *ftype;
            if (json_is_object(f)) {
                fname = json_object_get(f, "name");
                ftype = json_object_get(f, "data_type");
            } else {
                fname = json_array_get(f, 0);
                ftype = json_array_get(f, 1);
            }
            if (!json_is_string(fname) || ftype == NULL)
                return zm_err_set(err, -EINVAL, "%s: data_type field %zu has no name and type",
                                  where, i);
            zm__zfield *field = &a->fields[i];
            const char *field_name = json_string_value(fname);
            if (strlen(field_name) >= sizeof field->name)
                return zm_err_set(err, -EINVAL,
                                  "%s: data_type field %zu's name is longer than %zu bytes", where,
                                  i, sizeof field->name - 1);
            for (size_t j = 0; j < i; j++)
                if (strcmp(a->fields[j].name, field_name) == 0)
                    return zm_err_set(err, -EINVAL, "%s: data_type names field \"%s\" twice", where,
                                      field_name);
            snprintf(field->name, sizeof field->name, "%s", field_name);
            zm__simple_type t;
            char type_name[64];
            json_t *fn = json_is_string(ftype) ? ftype : json_object_get(ftype, "name");
            if (json_is_string(fn) && (strcmp(json_string_value(fn), "struct") == 0 ||
                                       strcmp(json_string_value(fn), "structured") == 0)) {
                zm__set_unsupported(a, "data type: field \"%.100s\" is itself a struct",
                                    field_name);
                continue;
            }
            int rc = zm__v3_simple_type(ftype, &t, type_name, sizeof type_name, where, err);
            if (rc < 0)
                return rc;
            if (t.value == ZM__ZVALUE_VLEN)
                zm__set_unsupported(a, "data type: field \"%.100s\" is a variable-length string",
                                    field_name);
            else if (t.unsupported != NULL)
                zm__set_unsupported(a, "data type: a field of %.64s is not supported",
                                    t.unsupported);
            field->value = t.value;
            field->dtype = t.dtype;
            field->size = t.size;
            field->offset = offset;
            if (t.size > SIZE_MAX - offset)
                return zm_err_set(err, -EINVAL,
                                  "%s: data_type's fields take more bytes than "
                                  "memory holds",
                                  where);
            offset += t.size;
        }
        a->value = ZM__ZVALUE_RECORDS;
        a->item_size = offset;
        a->dtype.type_class = ZM_TYPE_STRING;
        snprintf(a->dtype_name, sizeof a->dtype_name, "%s (%zu fields)", name, n);
        return 0;
    }
    zm__simple_type t;
    int rc = zm__v3_simple_type(v, &t, a->dtype_name, sizeof a->dtype_name, where, err);
    if (rc < 0)
        return rc;
    if (t.unsupported != NULL)
        zm__set_unsupported(a, "data type \"%.100s\" is not supported", t.unsupported);
    a->value = t.value;
    a->dtype = t.dtype;
    a->item_size = t.size;
    return 0;
}

/* ---- arrays -------------------------------------------------------------------------- */

static void zm__zarray_free(zm__zarray *a)
{
    if (a == NULL)
        return;
    free(a->fields);
    free(a->fill_bytes);
    free(a->shard);
    free(a);
}

/* What every array needs once its type and chunks are known: sizes that
 * fit, chunks that can be held. */
static int zm__check_sizes(zm__zarray *a, const char *where, zm_err *err)
{
    if (a->item_size > ZM__VALUE_BYTES_MAX && a->unsupported[0] == '\0')
        snprintf(a->unsupported, sizeof a->unsupported,
                 "data type \"%.64s\": values of %zu bytes each, more than the %zu read",
                 a->dtype_name, a->item_size, ZM__VALUE_BYTES_MAX);
    uint64_t values;
    int rc = zm__dims_bytes(a->shape, a->rank, a->item_size, false, where, "shape", &values, err);
    if (rc < 0)
        return rc;
    return zm__dims_bytes(a->chunks, a->rank, a->item_size, a->shard == NULL, where,
                          a->zarr_format == 2 ? "chunks" : "chunk_shape", &values, err);
}

/* What a v2 and a v3 array document end alike with: the fill value
 * (required) parsed and the sizes checked; then *out is a, or a is freed. */
static int zm__array_finish(json_t *doc, zm__zarray *a, const char *where, zm__zarray **out,
                            zm_err *err)
{
    int rc;
    if (json_object_get(doc, "fill_value") == NULL)
        rc = zm_err_set(err, -EINVAL, "%s: fill_value is missing", where);
    else if ((rc = zm__check_sizes(a, where, err)) >= 0 &&
             (rc = zm__parse_fill(json_object_get(doc, "fill_value"), a, where, err)) >= 0) {
        *out = a;
        return 0;
    }
    zm__zarray_free(a);
    return rc;
}

static int zm__v2_array(json_t *doc, const char *where, zm__zarray **out, zm_err *err)
{
    *out = NULL;
    zm__zarray *a = calloc(1, sizeof *a);
    if (a == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", where);
    a->zarr_format = 2;
    a->fill_missing = 1;
    int rc = 0;
    json_t *format = json_object_get(doc, "zarr_format");
    if (!json_is_integer(format) || json_integer_value(format) != 2) {
        rc = zm_err_set(err, -EINVAL, "%s: zarr_format is not 2", where);
        goto fail;
    }
    unsigned chunk_rank = 0;
    if ((rc = zm__parse_dims(json_object_get(doc, "shape"), where, "shape", false, &a->rank,
                             a->shape, err)) < 0 ||
        (rc = zm__parse_dims(json_object_get(doc, "chunks"), where, "chunks", true, &chunk_rank,
                             a->chunks, err)) < 0)
        goto fail;
    if (chunk_rank != a->rank) {
        rc = zm_err_set(err, -EINVAL, "%s: chunks has %u dimensions, shape %u", where, chunk_rank,
                        a->rank);
        goto fail;
    }
    json_t *dtype = json_object_get(doc, "dtype");
    if (json_is_string(dtype)) {
        zm__simple_type t;
        const char *text = json_string_value(dtype);
        if (zm__numpy_type(text, &t) < 0) {
            rc = zm_err_set(err, -EINVAL, "%s: dtype \"%.64s\" is not a numpy type", where, text);
            goto fail;
        }
        snprintf(a->dtype_name, sizeof a->dtype_name, "%s", text);
        if (t.unsupported != NULL)
            snprintf(a->unsupported, sizeof a->unsupported,
                     "data type \"%.64s\" (%s) is not supported", text, t.unsupported);
        a->value = t.value;
        a->dtype = t.dtype;
        a->item_size = t.size;
        a->big_endian = t.big_endian && t.size > 1;
    } else if (json_is_array(dtype)) {
        if ((rc = zm__v2_fields(dtype, a, where, err)) < 0)
            goto fail;
    } else {
        rc = zm_err_set(err, -EINVAL, "%s: dtype is neither a string nor a list of fields", where);
        goto fail;
    }
    json_t *order = json_object_get(doc, "order");
    if (!json_is_string(order) || (strcmp(json_string_value(order), "C") != 0 &&
                                   strcmp(json_string_value(order), "F") != 0)) {
        rc = zm_err_set(err, -EINVAL, "%s: order is not \"C\" or \"F\"", where);
        goto fail;
    }
    a->fortran_order = json_string_value(order)[0] == 'F';
    json_t *separator = json_object_get(doc, "dimension_separator");
    a->separator = '.';
    if (separator != NULL && !json_is_null(separator)) {
        const char *s = json_string_value(separator);
        if (s == NULL || (strcmp(s, ".") != 0 && strcmp(s, "/") != 0)) {
            rc = zm_err_set(err, -EINVAL, "%s: dimension_separator is not \".\" or \"/\"", where);
            goto fail;
        }
        a->separator = s[0];
    }
    if ((rc = zm__v2_codecs(doc, a, where, err)) < 0)
        goto fail;
    return zm__array_finish(doc, a, where, out, err);
fail:
    zm__zarray_free(a);
    return rc;
}

static int zm__v3_array(json_t *doc, const char *where, zm__zarray **out, zm_err *err)
{
    *out = NULL;
    zm__zarray *a = calloc(1, sizeof *a);
    if (a == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", where);
    a->zarr_format = 3;
    a->fill_missing = 1;
    int rc = 0;
    if ((rc = zm__parse_dims(json_object_get(doc, "shape"), where, "shape", false, &a->rank,
                             a->shape, err)) < 0)
        goto fail;
    json_t *grid = json_object_get(doc, "chunk_grid");
    json_t *grid_name = json_object_get(grid, "name");
    if (!json_is_string(grid_name)) {
        rc = zm_err_set(err, -EINVAL, "%s: chunk_grid has no name", where);
        goto fail;
    }
    if (strcmp(json_string_value(grid_name), "regular") != 0) {
        /* Another grid: valid, not one we read. The rank's chunks stand
         * at 1 so that nothing below divides by 0. */
        snprintf(a->unsupported, sizeof a->unsupported,
                 "chunk_grid \"%.64s\" is not supported (only regular)",
                 json_string_value(grid_name));
        for (unsigned d = 0; d < a->rank; d++)
            a->chunks[d] = 1;
    } else {
        unsigned chunk_rank = 0;
        if ((rc = zm__parse_dims(
                 json_object_get(json_object_get(grid, "configuration"), "chunk_shape"), where,
                 "chunk_shape", true, &chunk_rank, a->chunks, err)) < 0)
            goto fail;
        if (chunk_rank != a->rank) {
            rc = zm_err_set(err, -EINVAL, "%s: chunk_shape has %u dimensions, shape %u", where,
                            chunk_rank, a->rank);
            goto fail;
        }
    }
    json_t *encoding = json_object_get(doc, "chunk_key_encoding");
    json_t *encoding_name = json_object_get(encoding, "name");
    if (!json_is_string(encoding_name) ||
        (strcmp(json_string_value(encoding_name), "default") != 0 &&
         strcmp(json_string_value(encoding_name), "v2") != 0)) {
        rc = zm_err_set(err, -EINVAL, "%s: chunk_key_encoding is not \"default\" or \"v2\"", where);
        goto fail;
    }
    a->key_prefix_c = strcmp(json_string_value(encoding_name), "default") == 0;
    a->separator = a->key_prefix_c ? '/' : '.';
    json_t *separator = json_object_get(json_object_get(encoding, "configuration"), "separator");
    if (separator != NULL) {
        const char *s = json_string_value(separator);
        if (s == NULL || (strcmp(s, ".") != 0 && strcmp(s, "/") != 0)) {
            rc = zm_err_set(err, -EINVAL, "%s: chunk_key_encoding separator is not \".\" or \"/\"",
                            where);
            goto fail;
        }
        a->separator = s[0];
    }
    json_t *data_type = json_object_get(doc, "data_type");
    if (data_type == NULL) {
        rc = zm_err_set(err, -EINVAL, "%s: data_type is missing", where);
        goto fail;
    }
    if ((rc = zm__v3_dtype(data_type, a, where, err)) < 0)
        goto fail;
    json_t *codecs = json_object_get(doc, "codecs");
    if (!json_is_array(codecs)) {
        rc = zm_err_set(err, -EINVAL, "%s: codecs is not a list", where);
        goto fail;
    }
    if ((rc = zm__v3_chain(codecs, a, a->rank, a->chunks, a->codecs, &a->codec_count, false, where,
                           err)) < 0)
        goto fail;
    if (a->shard != NULL && a->codec_count > 1)
        /* Codecs around the shard would make it one chunk to decode whole
         * before its index could be read: valid, not what we read. */
        snprintf(a->unsupported, sizeof a->unsupported, "%s",
                 "codecs besides sharding_indexed around a shard are not supported");
    if (a->shard != NULL) {
        /* A sharded array's byte order is its inner chunks'. */
        for (unsigned i = 0; i < a->shard->codec_count; i++)
            if (a->shard->codecs[i].id == ZM__ZCODEC_BYTES && a->value == ZM__ZVALUE_NUMBER)
                a->big_endian = a->shard->codecs[i].big_endian && a->item_size > 1;
    }
    /* An extension the document says must be understood (an object with
     * "must_understand": true among the keys v3 does not define). */
    static const char *const known[] = {
        "zarr_format",        "node_type",  "shape",  "data_type",  "chunk_grid",
        "chunk_key_encoding", "fill_value", "codecs", "attributes", "storage_transformers",
        "dimension_names"};
    const char *field;
    json_t *value;
    json_object_foreach(doc, field, value)
    {
        bool defined = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0] && !defined; i++)
            defined = strcmp(field, known[i]) == 0;
        if (!defined && json_is_true(json_object_get(value, "must_understand")))
            snprintf(a->unsupported, sizeof a->unsupported,
                     "extension \"%.64s\" must be understood and is not supported", field);
    }
    json_t *transformers = json_object_get(doc, "storage_transformers");
    if (transformers != NULL &&
        !(json_is_array(transformers) && json_array_size(transformers) == 0))
        snprintf(a->unsupported, sizeof a->unsupported, "%s",
                 "storage_transformers are not supported");
    return zm__array_finish(doc, a, where, out, err);
fail:
    zm__zarray_free(a);
    return rc;
}

int zm__zarray_supported(const zm__zarray *array, zm_err *err)
{
    if (array->unsupported[0] != '\0')
        return zm_err_set(err, -ENOTSUP, "%s", array->unsupported);
    for (unsigned i = 0; i < array->codec_count; i++)
        if (array->codecs[i].id == ZM__ZCODEC_OTHER)
            return zm_err_set(err, -ENOTSUP, "codec \"%s\" is not supported",
                              array->codecs[i].name);
    const zm__zshard *s = array->shard;
    if (s != NULL) {
        for (unsigned i = 0; i < s->codec_count; i++)
            if (s->codecs[i].id == ZM__ZCODEC_OTHER)
                return zm_err_set(err, -ENOTSUP,
                                  "codec \"%s\" (within sharding_indexed) is not supported",
                                  s->codecs[i].name);
        for (unsigned i = 0; i < s->index_codec_count; i++)
            if (s->index_codecs[i].id == ZM__ZCODEC_OTHER)
                return zm_err_set(err, -ENOTSUP,
                                  "index codec \"%s\" of sharding_indexed is not supported",
                                  s->index_codecs[i].name);
    }
    return 0;
}

int zm__zarray_chunk_key(const zm__zarray *array, const char *path, const uint64_t *coords,
                         char *key, size_t size)
{
    size_t at = 0;
    int n;
    if (path[0] != '\0') {
        n = snprintf(key, size, "%s/", path);
        if (n < 0 || (size_t)n >= size)
            return -ENAMETOOLONG;
        at = (size_t)n;
    }
    if (array->key_prefix_c) {
        /* v3 default: "c", then each coordinate after a separator. */
        n = snprintf(key + at, size - at, "c");
        if (n < 0 || (size_t)n >= size - at)
            return -ENAMETOOLONG;
        at += (size_t)n;
        for (unsigned d = 0; d < array->rank; d++) {
            n = snprintf(key + at, size - at, "%c%llu", array->separator,
                         (unsigned long long)coords[d]);
            if (n < 0 || (size_t)n >= size - at)
                return -ENAMETOOLONG;
            at += (size_t)n;
        }
        return 0;
    }
    /* v2 and v3's "v2": the coordinates joined; a 0-d array's one chunk "0". */
    if (array->rank == 0) {
        n = snprintf(key + at, size - at, "0");
        return n < 0 || (size_t)n >= size - at ? -ENAMETOOLONG : 0;
    }
    for (unsigned d = 0; d < array->rank; d++) {
        if (d > 0) {
            n = snprintf(key + at, size - at, "%c", array->separator);
            if (n < 0 || (size_t)n >= size - at)
                return -ENAMETOOLONG;
            at += (size_t)n;
        }
        n = snprintf(key + at, size - at, "%llu", (unsigned long long)coords[d]);
        if (n < 0 || (size_t)n >= size - at)
            return -ENAMETOOLONG;
        at += (size_t)n;
    }
    return 0;
}

/* ---- the tree ------------------------------------------------------------------------ */

typedef struct zm__zentry {
    zm__znode node;      /* what callers see: first, so a node is its entry */
    zm_strings children; /* known when children_known */
    int children_known;
    struct zm__zentry *next; /* in its hash bucket */
} zm__zentry;

struct zm__ztree {
    zm__store *store;
    int format;
    int consolidated;
    uint64_t bytes_read;
    zm__zentry **buckets;
    size_t bucket_count, entry_count;
};

static uint64_t zm__hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static zm__zentry *zm__find(const zm__ztree *tree, const char *path)
{
    if (tree->bucket_count == 0)
        return NULL;
    for (zm__zentry *e = tree->buckets[zm__hash(path) % tree->bucket_count]; e; e = e->next)
        if (strcmp(e->node.path, path) == 0)
            return e;
    return NULL;
}

static void zm__entry_free(zm__zentry *e)
{
    free(e->node.path);
    json_decref(e->node.attributes);
    zm__zarray_free(e->node.array);
    zm_strings_free(&e->children);
    free(e);
}

static int zm__insert(zm__ztree *tree, zm__zentry *e)
{
    if (tree->entry_count + 1 > tree->bucket_count * 2) {
        size_t count = tree->bucket_count ? tree->bucket_count * 2 : 64;
        zm__zentry **buckets = calloc(count, sizeof *buckets);
        if (buckets == NULL)
            return -ENOMEM;
        for (size_t b = 0; b < tree->bucket_count; b++)
            for (zm__zentry *x = tree->buckets[b], *next; x; x = next) {
                next = x->next;
                size_t at = zm__hash(x->node.path) % count;
                x->next = buckets[at];
                buckets[at] = x;
            }
        free(tree->buckets);
        tree->buckets = buckets;
        tree->bucket_count = count;
    }
    size_t at = zm__hash(e->node.path) % tree->bucket_count;
    e->next = tree->buckets[at];
    tree->buckets[at] = e;
    tree->entry_count++;
    return 0;
}

/* A node path: names joined by '/', none empty, "." or "..". */
static bool zm__path_valid(const char *path, size_t length)
{
    if (length == 0)
        return true;
    size_t start = 0;
    for (size_t i = 0; i <= length; i++) {
        if (i < length && path[i] == '\0')
            return false;
        if (i == length || path[i] == '/') {
            size_t n = i - start;
            if (n == 0 || (n == 1 && path[start] == '.') ||
                (n == 2 && path[start] == '.' && path[start + 1] == '.'))
                return false;
            start = i + 1;
        }
    }
    return true;
}

/* A node from its documents: kind, attributes (NULL: none), array (v2's
 * .zarray or v3's whole document, NULL for a group). */
static int zm__make_node(zm__ztree *tree, const char *path, zm__znode_kind kind, json_t *attributes,
                         json_t *array_doc, const char *where, zm__zentry **out, zm_err *err)
{
    *out = NULL;
    if (attributes != NULL && !json_is_object(attributes))
        return zm_err_set(err, -EINVAL, "%s: attributes are not a JSON object", where);
    zm__zentry *e = calloc(1, sizeof *e);
    if (e == NULL || (e->node.path = strdup(path)) == NULL) {
        free(e);
        return zm_err_set(err, -ENOMEM, "%s: out of memory", where);
    }
    e->node.kind = kind;
    e->node.attributes = attributes ? json_incref(attributes) : json_object();
    int rc = 0;
    if (e->node.attributes == NULL) {
        rc = zm_err_set(err, -ENOMEM, "%s: out of memory", where);
    } else if (kind == ZM__ZNODE_ARRAY) {
        rc = tree->format == 2 ? zm__v2_array(array_doc, where, &e->node.array, err)
                               : zm__v3_array(array_doc, where, &e->node.array, err);
    }
    if (rc == 0 && zm__insert(tree, e) < 0)
        rc = zm_err_set(err, -ENOMEM, "%s: out of memory", where);
    if (rc < 0) {
        zm__entry_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* A v3 node document's kind (its node_type), checking its zarr_format. */
static int zm__v3_kind(json_t *doc, const char *where, zm__znode_kind *kind, zm_err *err)
{
    json_t *format = json_object_get(doc, "zarr_format");
    if (!json_is_integer(format) || json_integer_value(format) != 3)
        return zm_err_set(err, -EINVAL, "%s: zarr_format is not 3", where);
    json_t *type = json_object_get(doc, "node_type");
    const char *t = json_string_value(type);
    if (t != NULL && strcmp(t, "group") == 0)
        *kind = ZM__ZNODE_GROUP;
    else if (t != NULL && strcmp(t, "array") == 0)
        *kind = ZM__ZNODE_ARRAY;
    else
        return zm_err_set(err, -EINVAL, "%s: node_type is not \"group\" or \"array\"", where);
    return 0;
}

static int zm__key(char *key, size_t size, const char *path, const char *name)
{
    int n = path[0] ? snprintf(key, size, "%s/%s", path, name) : snprintf(key, size, "%s", name);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* Reads one node's documents from the store (metadata not consolidated). */
static int zm__read_node(zm__ztree *tree, const char *path, zm__zentry **out, zm_err *err)
{
    char key[4096];
    *out = NULL;
    if (tree->format == 3) {
        if (zm__key(key, sizeof key, path, "zarr.json") < 0)
            return zm_err_set(err, -ENAMETOOLONG, "%.200s: path too long", path);
        json_t *doc;
        int rc = zm__read_json(tree->store, key, &tree->bytes_read, &doc, err);
        if (rc < 0)
            return rc;
        zm__znode_kind kind;
        if ((rc = zm__v3_kind(doc, key, &kind, err)) == 0)
            rc = zm__make_node(tree, path, kind, json_object_get(doc, "attributes"), doc, key, out,
                               err);
        json_decref(doc);
        return rc;
    }
    /* v2: an array if it has .zarray (zarr 2 asks that first), else a
     * group if it has .zgroup; .zattrs may hold either's attributes. */
    json_t *doc = NULL, *attributes = NULL;
    zm__znode_kind kind = ZM__ZNODE_ARRAY;
    if (zm__key(key, sizeof key, path, ".zarray") < 0)
        return zm_err_set(err, -ENAMETOOLONG, "%.200s: path too long", path);
    int rc = zm__read_json(tree->store, key, &tree->bytes_read, &doc, err);
    if (rc == -ENOENT) {
        kind = ZM__ZNODE_GROUP;
        zm__key(key, sizeof key, path, ".zgroup");
        rc = zm__read_json(tree->store, key, &tree->bytes_read, &doc, err);
        if (rc == 0) {
            json_t *format = json_object_get(doc, "zarr_format");
            if (!json_is_integer(format) || json_integer_value(format) != 2)
                rc = zm_err_set(err, -EINVAL, "%s: zarr_format is not 2", key);
        }
    }
    if (rc < 0) {
        json_decref(doc);
        return rc;
    }
    char where[4096];
    snprintf(where, sizeof where, "%s", key);
    zm__key(key, sizeof key, path, ".zattrs");
    rc = zm__read_json(tree->store, key, &tree->bytes_read, &attributes, err);
    if (rc == 0 || rc == -ENOENT)
        rc = zm__make_node(tree, path, kind, attributes, doc, where, out, err);
    json_decref(attributes);
    json_decref(doc);
    return rc;
}

/* v2 .zmetadata: {"metadata": {"obs/.zattrs": {...}, "obs/x/.zarray": {...}},
 * "zarr_consolidated_format": 1}. */
static int zm__v2_consolidated(zm__ztree *tree, json_t *doc, zm_err *err)
{
    json_t *format = json_object_get(doc, "zarr_consolidated_format");
    if (!json_is_integer(format) || json_integer_value(format) != 1)
        return zm_err_set(err, -EINVAL, ".zmetadata: zarr_consolidated_format is not 1");
    json_t *metadata = json_object_get(doc, "metadata");
    if (!json_is_object(metadata))
        return zm_err_set(err, -EINVAL, ".zmetadata: metadata is not an object");
    /* Nodes first (.zarray before .zgroup, as zarr 2 asks), then each
     * .zattrs onto its node. */
    for (int pass = 0; pass < 3; pass++) {
        const char *wanted = pass == 0 ? ".zarray" : pass == 1 ? ".zgroup" : ".zattrs";
        size_t wanted_length = strlen(wanted);
        const char *key;
        size_t key_length;
        json_t *value;
        json_object_keylen_foreach(metadata, key, key_length, value)
        {
            const char *slash = memrchr(key, '/', key_length);
            const char *name = slash ? slash + 1 : key;
            size_t name_length = key_length - (size_t)(name - key);
            if (name_length != wanted_length || memcmp(name, wanted, wanted_length) != 0)
                continue;
            size_t path_length = slash ? (size_t)(slash - key) : 0;
            if (!zm__path_valid(key, path_length) || (slash != NULL && path_length == 0))
                return zm_err_set(err, -EINVAL, ".zmetadata: key \"%.200s\" is not a node's", key);
            char where[4096];
            snprintf(where, sizeof where, ".zmetadata: %.*s", (int)key_length, key);
            char *path = strndup(key, path_length);
            if (path == NULL)
                return zm_err_set(err, -ENOMEM, ".zmetadata: out of memory");
            zm__zentry *existing = zm__find(tree, path);
            int rc = 0;
            if (!json_is_object(value)) {
                rc = zm_err_set(err, -EINVAL, "%s: not a JSON object", where);
            } else if (pass == 2) {
                if (existing != NULL) {
                    json_decref(existing->node.attributes);
                    existing->node.attributes = json_incref(value);
                }
            } else if (existing == NULL) {
                if (pass == 1) {
                    json_t *f = json_object_get(value, "zarr_format");
                    if (!json_is_integer(f) || json_integer_value(f) != 2)
                        rc = zm_err_set(err, -EINVAL, "%s: zarr_format is not 2", where);
                }
                zm__zentry *e;
                if (rc == 0)
                    rc = zm__make_node(tree, path, pass == 0 ? ZM__ZNODE_ARRAY : ZM__ZNODE_GROUP,
                                       NULL, value, where, &e, err);
            }
            free(path);
            if (rc < 0)
                return rc;
        }
    }
    if (zm__find(tree, "") == NULL)
        return zm_err_set(err, -EINVAL, ".zmetadata: holds no .zgroup for the root");
    return 0;
}

/* v3 consolidated_metadata {kind: "inline", metadata: {path: node}}, under
 * prefix (a group's own consolidated metadata names its nodes from it). */
static int zm__v3_consolidated(zm__ztree *tree, json_t *metadata, const char *prefix,
                               unsigned depth, zm_err *err)
{
    if (depth > ZM__JSON_DEPTH_MAX)
        return zm_err_set(err, -EINVAL, "zarr.json: consolidated metadata nested too deep");
    const char *key;
    size_t key_length;
    json_t *value;
    json_object_keylen_foreach(metadata, key, key_length, value)
    {
        if (key_length == 0 || !zm__path_valid(key, key_length))
            return zm_err_set(err, -EINVAL,
                              "zarr.json: consolidated metadata key \"%.200s\" is not a node's",
                              key);
        size_t prefix_length = strlen(prefix);
        char *path = malloc(prefix_length + key_length + 2);
        if (path == NULL)
            return zm_err_set(err, -ENOMEM, "zarr.json: out of memory");
        if (prefix_length > 0)
            sprintf(path, "%s/%.*s", prefix, (int)key_length, key);
        else
            sprintf(path, "%.*s", (int)key_length, key);
        char where[4096];
        snprintf(where, sizeof where, "zarr.json: consolidated \"%.3000s\"", path);
        int rc = 0;
        zm__znode_kind kind;
        if (!json_is_object(value))
            rc = zm_err_set(err, -EINVAL, "%s: not a JSON object", where);
        else if (zm__find(tree, path) != NULL)
            rc = 0; /* named twice (nested and flat): the first holds */
        else if ((rc = zm__v3_kind(value, where, &kind, err)) == 0) {
            zm__zentry *e;
            rc = zm__make_node(tree, path, kind, json_object_get(value, "attributes"), value, where,
                               &e, err);
            json_t *inner = json_object_get(value, "consolidated_metadata");
            json_t *inner_metadata = json_object_get(inner, "metadata");
            if (rc == 0 && kind == ZM__ZNODE_GROUP && json_is_object(inner_metadata))
                rc = zm__v3_consolidated(tree, inner_metadata, path, depth + 1, err);
        }
        free(path);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The children of every node, once all are known (consolidated): each
 * node's name joins its parent's list, sorted bytewise. */
typedef struct zm__child {
    zm__zentry *parent;
    const char *name;
} zm__child;

static int zm__child_order(const void *a, const void *b)
{
    const zm__child *x = a, *y = b;
    if (x->parent != y->parent)
        return (uintptr_t)x->parent < (uintptr_t)y->parent ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int zm__link_children(zm__ztree *tree, zm_err *err)
{
    zm__child *all = calloc(tree->entry_count ? tree->entry_count : 1, sizeof *all);
    const char **names = calloc(tree->entry_count ? tree->entry_count : 1, sizeof *names);
    if (all == NULL || names == NULL) {
        free(all);
        free(names);
        return zm_err_set(err, -ENOMEM, "metadata: out of memory for %zu nodes", tree->entry_count);
    }
    size_t n = 0;
    for (size_t b = 0; b < tree->bucket_count; b++)
        for (zm__zentry *e = tree->buckets[b]; e; e = e->next) {
            e->children_known = 1;
            if (e->node.path[0] == '\0')
                continue;
            const char *slash = strrchr(e->node.path, '/');
            char *parent_path = strndup(e->node.path, slash ? (size_t)(slash - e->node.path) : 0);
            if (parent_path == NULL) {
                free(all);
                free(names);
                return zm_err_set(err, -ENOMEM, "metadata: out of memory");
            }
            zm__zentry *parent = zm__find(tree, parent_path);
            free(parent_path);
            /* A node whose parent is no group (zarr would not reach it
             * through the tree) is nobody's child. */
            if (parent == NULL || parent->node.kind != ZM__ZNODE_GROUP)
                continue;
            all[n].parent = parent;
            all[n].name = slash ? slash + 1 : e->node.path;
            n++;
        }
    if (n > 1)
        qsort(all, n, sizeof *all, zm__child_order);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        size_t j = i;
        while (j < n && all[j].parent == all[i].parent) {
            names[j - i] = all[j].name;
            j++;
        }
        if (zm__strings_of_names(names, j - i, &all[i].parent->children) < 0)
            rc = zm_err_set(err, -ENOMEM, "metadata: out of memory");
        i = j;
    }
    free(all);
    free(names);
    return rc;
}

int zm__ztree_open(zm__store *store, zm__ztree **out, zm_err *err)
{
    *out = NULL;
    zm__ztree *tree = calloc(1, sizeof *tree);
    if (tree == NULL)
        return zm_err_set(err, -ENOMEM, "metadata: out of memory");
    tree->store = store;
    json_t *doc = NULL;
    int rc = zm__read_json(store, "zarr.json", &tree->bytes_read, &doc, err);
    if (rc == 0) {
        tree->format = 3;
        zm__znode_kind kind;
        zm__zentry *root;
        if ((rc = zm__v3_kind(doc, "zarr.json", &kind, err)) < 0 ||
            (rc = zm__make_node(tree, "", kind, json_object_get(doc, "attributes"), doc,
                                "zarr.json", &root, err)) < 0)
            goto fail;
        json_t *consolidated = json_object_get(doc, "consolidated_metadata");
        json_t *kind_v = json_object_get(consolidated, "kind");
        json_t *metadata = json_object_get(consolidated, "metadata");
        /* Only "inline" is defined; another kind is read node by node. */
        if (kind == ZM__ZNODE_GROUP && json_is_object(consolidated) && json_is_string(kind_v) &&
            strcmp(json_string_value(kind_v), "inline") == 0) {
            if (!json_is_object(metadata)) {
                rc = zm_err_set(err, -EINVAL,
                                "zarr.json: consolidated_metadata has no metadata "
                                "object");
                goto fail;
            }
            if ((rc = zm__v3_consolidated(tree, metadata, "", 0, err)) < 0 ||
                (rc = zm__link_children(tree, err)) < 0)
                goto fail;
            tree->consolidated = 1;
        }
        json_decref(doc);
        *out = tree;
        return 0;
    }
    if (rc != -ENOENT)
        goto fail;
    tree->format = 2;
    rc = zm__read_json(store, ".zmetadata", &tree->bytes_read, &doc, err);
    if (rc == 0) {
        if ((rc = zm__v2_consolidated(tree, doc, err)) < 0 ||
            (rc = zm__link_children(tree, err)) < 0)
            goto fail;
        tree->consolidated = 1;
        json_decref(doc);
        *out = tree;
        return 0;
    }
    if (rc != -ENOENT)
        goto fail;
    zm__zentry *root;
    rc = zm__read_node(tree, "", &root, err);
    if (rc == -ENOENT) {
        rc = zm_err_set(err, -EINVAL,
                        "not a Zarr store (no zarr.json, .zgroup or .zmetadata at its root)");
        goto fail;
    }
    if (rc < 0)
        goto fail;
    *out = tree;
    return 0;
fail:
    json_decref(doc);
    zm__ztree_close(tree);
    return rc;
}

void zm__ztree_close(zm__ztree *tree)
{
    if (tree == NULL)
        return;
    for (size_t b = 0; b < tree->bucket_count; b++)
        for (zm__zentry *e = tree->buckets[b], *next; e; e = next) {
            next = e->next;
            zm__entry_free(e);
        }
    free(tree->buckets);
    free(tree);
}

int zm__ztree_format(const zm__ztree *tree)
{
    return tree->format;
}
int zm__ztree_consolidated(const zm__ztree *tree)
{
    return tree->consolidated;
}
uint64_t zm__ztree_bytes_read(const zm__ztree *tree)
{
    return tree->bytes_read;
}

int zm__ztree_node(zm__ztree *tree, const char *path, const zm__znode **out, zm_err *err)
{
    *out = NULL;
    size_t length = strlen(path);
    if (!zm__path_valid(path, length))
        return zm_err_set(err, -EINVAL, "\"%.200s\" is not a node's path", path);
    zm__zentry *e = zm__find(tree, path);
    if (e == NULL) {
        if (tree->consolidated)
            return zm_err_set(err, -ENOENT, "%.200s: no such group or array", path);
        int rc = zm__read_node(tree, path, &e, err);
        if (rc == -ENOENT)
            return zm_err_set(err, -ENOENT, "%.200s: no such group or array", path);
        if (rc < 0)
            return rc;
    }
    *out = &e->node;
    return 0;
}

static int zm__name_order(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether name, below path, is a node: its directory holds its document. */
static int zm__is_node(zm__ztree *tree, const char *path, const char *name, bool *is_node,
                       zm_err *err)
{
    char child[4096];
    *is_node = false;
    if (zm__key(child, sizeof child, path, name) < 0)
        return 0; /* too long to be a node we could name */
    zm_strings below = {0};
    zm_err ignored;
    int rc = zm__store_list(tree->store, child, &below, &ignored);
    if (rc == -ENOENT || rc == -ENOTDIR)
        return 0;
    if (rc < 0)
        return zm_err_set(err, rc, "%s", ignored.reason);
    for (size_t i = 0; i < below.count && !*is_node; i++) {
        const char *s = below.bytes + below.offsets[i];
        size_t n = (size_t)(below.offsets[i + 1] - below.offsets[i]);
        if (tree->format == 3)
            *is_node = n == 9 && memcmp(s, "zarr.json", 9) == 0;
        else
            *is_node = (n == 7 && (memcmp(s, ".zarray", 7) == 0 || memcmp(s, ".zgroup", 7) == 0));
    }
    zm_strings_free(&below);
    return 0;
}

int zm__ztree_children(zm__ztree *tree, const char *path, zm_strings *names, zm_err *err)
{
    memset(names, 0, sizeof *names);
    const zm__znode *node;
    int rc = zm__ztree_node(tree, path, &node, err);
    if (rc < 0)
        return rc;
    if (node->kind != ZM__ZNODE_GROUP)
        return zm_err_set(err, -ENOTDIR, "%.200s: an array, not a group", path);
    zm__zentry *e = (zm__zentry *)node;
    if (!e->children_known) {
        zm_strings listed = {0};
        rc = zm__store_list(tree->store, path, &listed, err);
        if (rc < 0 && rc != -ENOENT)
            return rc;
        rc = 0; /* nothing below: no children */
        const char **kept = calloc(listed.count ? listed.count : 1, sizeof *kept);
        char *copy = malloc((listed.count ? listed.offsets[listed.count] : 0) + listed.count + 1);
        if (kept == NULL || copy == NULL) {
            free(kept);
            free(copy);
            zm_strings_free(&listed);
            return zm_err_set(err, -ENOMEM, "%.200s: out of memory for its children", path);
        }
        size_t count = 0, at = 0;
        for (size_t i = 0; i < listed.count && rc >= 0; i++) {
            size_t n = (size_t)(listed.offsets[i + 1] - listed.offsets[i]);
            memcpy(copy + at, listed.bytes + listed.offsets[i], n);
            copy[at + n] = '\0';
            bool is_node = false;
            if (memchr(copy + at, '\0', n) == NULL && zm__path_valid(copy + at, n) &&
                memchr(copy + at, '/', n) == NULL) {
                rc = zm__is_node(tree, path, copy + at, &is_node, err);
                if (is_node)
                    kept[count++] = copy + at;
            }
            at += n + 1;
        }
        if (rc >= 0) {
            /* The store lists bytewise already; sorted here all the same,
             * so that the order is ours to promise. */
            if (count > 1)
                qsort(kept, count, sizeof *kept, zm__name_order);
            rc = zm__strings_of_names(kept, count, &e->children) < 0
                     ? zm_err_set(err, -ENOMEM, "%.200s: out of memory for its children", path)
                     : 0;
            if (rc == 0)
                e->children_known = 1;
        }
        free(kept);
        free(copy);
        zm_strings_free(&listed);
        if (rc < 0)
            return rc;
    }
    const zm_strings *c = &e->children;
    size_t total = c->count ? (size_t)c->offsets[c->count] : 0;
    names->count = c->count;
    names->offsets = malloc((c->count + 1) * sizeof *names->offsets);
    names->bytes = malloc(total + 1);
    if (names->offsets == NULL || names->bytes == NULL) {
        zm_strings_free(names);
        return zm_err_set(err, -ENOMEM, "%.200s: out of memory for its children", path);
    }
    if (c->count > 0)
        memcpy(names->offsets, c->offsets, (c->count + 1) * sizeof *names->offsets);
    else
        names->offsets[0] = 0;
    if (total > 0)
        memcpy(names->bytes, c->bytes, total);
    names->bytes[total] = '\0';
    return 0;
}
