/* Zarr v2 metadata documents and chunk keys.
 *
 * zarr-python 2.13 writes every document with
 *     json.dumps(o, indent=4, sort_keys=True, ensure_ascii=True,
 *                separators=(',', ': '))
 * so zm_zarr_dump reproduces that: Python's pure-Python encoder (the one
 * json uses whenever indent is set), its float repr, its ASCII escapes with
 * lower-case hex digits, and its key order (code points, which for UTF-8 is
 * byte order). jansson's own dump differs in all of these, so it is not used. */
#include "zarr/zarr_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/text.h"

/* Deeper documents are refused; ours are four levels deep, and a limit also
 * stops a document that contains itself (jansson allows building one). */
#define ZM__DUMP_MAX_DEPTH 512

/* ---- Output buffer --------------------------------------------------------- */

typedef struct zm__text {
    char *data;
    size_t length, capacity;
    int failed; /* out of memory: later appends do nothing */
} zm__text;

static void zm__append(zm__text *text, const char *bytes, size_t n)
{
    if (text->failed)
        return;
    if (text->capacity - text->length <= n) {
        size_t capacity = text->capacity ? text->capacity : 256;
        while (capacity - text->length <= n) {
            if (capacity > SIZE_MAX / 2) {
                text->failed = 1;
                return;
            }
            capacity *= 2;
        }
        char *data = realloc(text->data, capacity);
        if (data == NULL) {
            text->failed = 1;
            return;
        }
        text->data = data;
        text->capacity = capacity;
    }
    memcpy(text->data + text->length, bytes, n);
    text->length += n;
    text->data[text->length] = '\0';
}

static void zm__append_string(zm__text *text, const char *s)
{
    zm__append(text, s, strlen(s));
}

static void zm__newline_indent(zm__text *text, unsigned level)
{
    static const char spaces[] = "                                ";
    zm__append(text, "\n", 1);
    for (size_t n = 4 * (size_t)level; n > 0;) {
        size_t step = n < sizeof spaces - 1 ? n : sizeof spaces - 1;
        zm__append(text, spaces, step);
        n -= step;
    }
}

/* ---- Scalars ----------------------------------------------------------------- */

size_t zm__format_python_float(double x, char out[32])
{
    /* json.dumps spells the non-finite values as JavaScript does; jansson
     * refuses to hold them, but the formatting is Python's either way. */
    const char *word = NULL;
    if (isnan(x))
        word = "NaN";
    else if (isinf(x))
        word = x > 0 ? "Infinity" : "-Infinity";
    if (word != NULL) {
        size_t n = strlen(word);
        memcpy(out, word, n + 1);
        return n;
    }
    int n = zm_shortest_decimal(x, out, 32);
    if (n < 0) {
        /* Cannot happen for a finite x and 32 bytes; keep the text valid
         * JSON all the same. */
        memcpy(out, "0.0", 4);
        return 3;
    }
    return (size_t)n;
}

/* Writes a JSON string as Python's encode_basestring_ascii does: printable
 * ASCII as is except " and \, the five short escapes, every other code
 * point as \uXXXX with lower-case hex, astral ones as a surrogate pair. */
static int zm__dump_string(zm__text *text, const char *s, size_t length, zm_err *err)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *bytes = (const unsigned char *)s;
    zm__append(text, "\"", 1);
    size_t run = 0; /* start of the pending run of bytes that need no escape */
    for (size_t at = 0; at < length;) {
        unsigned char c = bytes[at];
        if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') {
            at++;
            continue;
        }
        zm__append(text, s + run, at - run);
        uint32_t code_point = c;
        size_t n = 1;
        if (c >= 0x80) {
            const char *problem = "";
            n = zm__utf8_next(bytes, length, at, &code_point, &problem);
            if (n == 0)
                return zm_err_set(err, -EINVAL,
                                  "JSON document: a string is not valid UTF-8: %s at byte %zu",
                                  problem, at);
        }
        char escape[13];
        size_t escape_length = 2;
        escape[0] = '\\';
        switch (code_point) {
        case '"':
            escape[1] = '"';
            break;
        case '\\':
            escape[1] = '\\';
            break;
        case '\b':
            escape[1] = 'b';
            break;
        case '\f':
            escape[1] = 'f';
            break;
        case '\n':
            escape[1] = 'n';
            break;
        case '\r':
            escape[1] = 'r';
            break;
        case '\t':
            escape[1] = 't';
            break;
        default: {
            uint32_t units[2] = {code_point, 0};
            size_t unit_count = 1;
            if (code_point >= 0x10000) {
                uint32_t v = code_point - 0x10000;
                units[0] = 0xd800 | (v >> 10);
                units[1] = 0xdc00 | (v & 0x3ff);
                unit_count = 2;
            }
            escape_length = 0;
            for (size_t u = 0; u < unit_count; u++) {
                escape[escape_length++] = '\\';
                escape[escape_length++] = 'u';
                for (int shift = 12; shift >= 0; shift -= 4)
                    escape[escape_length++] = hex[(units[u] >> shift) & 0xf];
            }
            break;
        }
        }
        zm__append(text, escape, escape_length);
        at += n;
        run = at;
    }
    zm__append(text, s + run, length - run);
    zm__append(text, "\"", 1);
    return 0;
}

/* ---- Documents ----------------------------------------------------------------- */

typedef struct zm__member {
    const char *key;
    size_t key_length;
    json_t *value;
} zm__member;

/* Python's sort_keys orders str keys by code point; UTF-8 keeps that order
 * byte for byte, and a key that is a prefix of another sorts first. */
static int zm__member_order(const void *a, const void *b)
{
    const zm__member *x = a, *y = b;
    size_t n = x->key_length < y->key_length ? x->key_length : y->key_length;
    int c = memcmp(x->key, y->key, n);
    if (c != 0)
        return c;
    return (x->key_length > y->key_length) - (x->key_length < y->key_length);
}

static int zm__dump_value(zm__text *text, const json_t *value, unsigned level, zm_err *err);

static int zm__dump_object(zm__text *text, const json_t *object, unsigned level, zm_err *err)
{
    size_t count = json_object_size(object);
    if (count == 0) {
        zm__append(text, "{}", 2);
        return 0;
    }
    zm__member *members = malloc(count * sizeof *members);
    if (members == NULL)
        return zm_err_set(err, -ENOMEM, "JSON document: out of memory");
    size_t n = 0;
    /* The iterator walks a const object without changing it; jansson's API
     * just does not say const. */
    json_t *mutable_object = (json_t *)object;
    for (void *it = json_object_iter(mutable_object); it != NULL && n < count;
         it = json_object_iter_next(mutable_object, it)) {
        members[n].key = json_object_iter_key(it);
#if JANSSON_VERSION_HEX >= 0x020e00
        members[n].key_length = json_object_iter_key_len(it);
#else
        members[n].key_length = strlen(members[n].key);
#endif
        members[n].value = json_object_iter_value(it);
        n++;
    }
    qsort(members, n, sizeof *members, zm__member_order);
    int rc = 0;
    zm__append(text, "{", 1);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i > 0)
            zm__append(text, ",", 1);
        zm__newline_indent(text, level + 1);
        rc = zm__dump_string(text, members[i].key, members[i].key_length, err);
        if (rc == 0) {
            zm__append(text, ": ", 2);
            rc = zm__dump_value(text, members[i].value, level + 1, err);
        }
    }
    free(members);
    if (rc != 0)
        return rc;
    zm__newline_indent(text, level);
    zm__append(text, "}", 1);
    return 0;
}

static int zm__dump_array(zm__text *text, const json_t *array, unsigned level, zm_err *err)
{
    size_t count = json_array_size(array);
    if (count == 0) {
        zm__append(text, "[]", 2);
        return 0;
    }
    zm__append(text, "[", 1);
    for (size_t i = 0; i < count; i++) {
        if (i > 0)
            zm__append(text, ",", 1);
        zm__newline_indent(text, level + 1);
        int rc = zm__dump_value(text, json_array_get(array, i), level + 1, err);
        if (rc != 0)
            return rc;
    }
    zm__newline_indent(text, level);
    zm__append(text, "]", 1);
    return 0;
}

static int zm__dump_value(zm__text *text, const json_t *value, unsigned level, zm_err *err)
{
    if (value == NULL)
        return zm_err_set(err, -EINVAL, "JSON document: a value is missing");
    if (level > ZM__DUMP_MAX_DEPTH)
        return zm_err_set(err, -EINVAL,
                          "JSON document: nested deeper than %d levels (or contains itself)",
                          ZM__DUMP_MAX_DEPTH);
    char number[32];
    switch (json_typeof(value)) {
    case JSON_OBJECT:
        return zm__dump_object(text, value, level, err);
    case JSON_ARRAY:
        return zm__dump_array(text, value, level, err);
    case JSON_STRING:
        return zm__dump_string(text, json_string_value(value), json_string_length(value), err);
    case JSON_INTEGER:
        snprintf(number, sizeof number, "%" JSON_INTEGER_FORMAT, json_integer_value(value));
        zm__append_string(text, number);
        return 0;
    case JSON_REAL:
        zm__append(text, number, zm__format_python_float(json_real_value(value), number));
        return 0;
    case JSON_TRUE:
        zm__append(text, "true", 4);
        return 0;
    case JSON_FALSE:
        zm__append(text, "false", 5);
        return 0;
    case JSON_NULL:
        zm__append(text, "null", 4);
        return 0;
    }
    return zm_err_set(err, -EINVAL, "JSON document: a value of unknown type");
}

int zm_zarr_dump(const json_t *document, char **out, size_t *length, zm_err *err)
{
    zm__text text = {NULL, 0, 0, 0};
    int rc = zm__dump_value(&text, document, 0, err);
    if (rc == 0 && text.failed)
        rc = zm_err_set(err, -ENOMEM, "JSON document: out of memory");
    if (rc != 0) {
        free(text.data);
        return rc;
    }
    *out = text.data;
    *length = text.length;
    return 0;
}

static json_t *zm__integer_list(unsigned count, const uint64_t *values)
{
    json_t *list = json_array();
    for (unsigned i = 0; list != NULL && i < count; i++) {
        /* Shapes and chunk sizes past 2^63 cannot be held (or allocated). */
        if (values[i] > (uint64_t)INT64_MAX ||
            json_array_append_new(list, json_integer((json_int_t)values[i])) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* base64 of n zero bytes: zarr's fill value of a structured dtype. */
static json_t *zm__zero_base64(size_t n)
{
    size_t length = (n + 2) / 3 * 4;
    char *text = malloc(length + 1);
    if (text == NULL)
        return NULL;
    memset(text, 'A', length);
    if (n % 3 == 1)
        text[length - 1] = text[length - 2] = '=';
    else if (n % 3 == 2)
        text[length - 1] = '=';
    text[length] = '\0';
    json_t *value = json_string(text);
    free(text);
    return value;
}

static json_t *zm__fill_value(zm_fill fill, size_t record_size)
{
    switch (fill) {
    case ZM_FILL_ZERO_RECORD:
        return zm__zero_base64(record_size);
    case ZM_FILL_ZERO_INT:
        return json_integer(0);
    case ZM_FILL_ZERO_FLOAT:
        return json_real(0.0);
    case ZM_FILL_FALSE:
        return json_false();
    case ZM_FILL_EMPTY_TEXT:
        return json_string("");
    case ZM_FILL_NULL:
        return json_null();
    }
    return NULL;
}

static json_t *zm__filters(int vlen_utf8)
{
    if (!vlen_utf8)
        return json_null();
    json_t *filter = json_pack("{s:s}", "id", "vlen-utf8");
    if (filter == NULL)
        return NULL;
    json_t *list = json_array();
    if (list == NULL || json_array_append_new(list, filter) != 0) {
        json_decref(list);
        return NULL;
    }
    return list;
}

json_t *zm_zarr_array_document(const zm_zarr_array_meta *meta)
{
    if (meta == NULL || meta->rank > ZM_ZARR_MAX_RANK ||
        memchr(meta->dtype, '\0', sizeof meta->dtype) == NULL)
        return NULL;
    json_t *compressor;
    if (meta->codec == NULL || meta->codec->kind == ZM_CODEC_NONE)
        compressor = json_null();
    else
        compressor = zm_codec_config(meta->codec);
    /* json_pack's "o" steals each value, releases them all if it fails,
     * and fails on a NULL one (a part that could not be made). */
    /* clang-format off */
    json_t *dtype = meta->dtype_fields ? json_deep_copy(meta->dtype_fields) : json_string(meta->dtype);
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:s, s:o, s:i}",
                     "chunks", zm__integer_list(meta->rank, meta->chunks),
                     "compressor", compressor,
                     "dtype", dtype,
                     "fill_value", zm__fill_value(meta->fill, meta->record_size),
                     "filters", zm__filters(meta->vlen_utf8),
                     "order", "C",
                     "shape", zm__integer_list(meta->rank, meta->shape),
                     "zarr_format", 2);
    /* clang-format on */
}

json_t *zm_zarr_group_document(void)
{
    return json_pack("{s:i}", "zarr_format", 2);
}

/* ---- Chunk keys ------------------------------------------------------------------ */

void zm_zarr_chunk_key(unsigned rank, const uint64_t *coords, char *out, size_t size)
{
    if (size == 0)
        return;
    if (rank == 0) {
        snprintf(out, size, "0");
        return;
    }
    size_t at = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < rank && at < size; i++) {
        int n = snprintf(out + at, size - at, i == 0 ? "%" PRIu64 : ".%" PRIu64, coords[i]);
        if (n < 0)
            return;
        at += (size_t)n;
    }
}

int zm_zarr_parse_chunk_key(const char *key, unsigned rank, const uint64_t *grid, uint64_t *coords)
{
    if (key == NULL || rank > ZM_ZARR_MAX_RANK)
        return -ENOENT;
    if (rank == 0)
        return strcmp(key, "0") == 0 ? 0 : -ENOENT;
    uint64_t parsed[ZM_ZARR_MAX_RANK];
    const char *p = key;
    for (unsigned i = 0; i < rank; i++) {
        if (i > 0) {
            if (*p != '.')
                return -ENOENT;
            p++;
        }
        if (*p < '0' || *p > '9')
            return -ENOENT;
        /* A canonical number has no leading zero unless it is 0 itself. */
        if (*p == '0' && p[1] >= '0' && p[1] <= '9')
            return -ENOENT;
        uint64_t value = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            unsigned digit = (unsigned)(*p - '0');
            /* Past the grid already, or past 64 bits: no need to read on. */
            if (value >= grid[i] || value > (UINT64_MAX - digit) / 10)
                return -ENOENT;
            value = value * 10 + digit;
        }
        if (value >= grid[i])
            return -ENOENT;
        parsed[i] = value;
    }
    if (*p != '\0')
        return -ENOENT;
    memcpy(coords, parsed, rank * sizeof *coords);
    return 0;
}
