/* What stratified and spatial views split the cells by: an obs column's
 * codes (a categorical's as stored, or plain values made categories in
 * code-point order) and an obsm embedding's coordinates. */
#include "zarrmount/view.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/select.h"
#include "view/view_internal.h"

/* Rows read at a time when only some columns of them are kept. */
#define BATCH_ROWS 65536

const zm_element *zm__obs_column(zm_source *source, const char *field, zm_err *err)
{
    const zm_element *obs = zm_source_find(source, "obs");
    /* By name in O(log n): stratified/ lists every column that can split. */
    const zm_element *column = obs != NULL && obs->kind == ZM_ELEMENT_DATAFRAME
                                   ? zm_element_child(obs, field, strlen(field))
                                   : NULL;
    if (column != NULL)
        return column;
    zm_err_set(err, -ENOENT, "obs has no column %s", field);
    return NULL;
}

zm__column_use zm__column_use_of(const zm_element *e)
{
    switch (e->kind) {
    case ZM_ELEMENT_CATEGORICAL:
        return e->rank == 1 ? ZM__COLUMN_CATEGORICAL : ZM__COLUMN_NOT_ONE_VALUE;
    case ZM_ELEMENT_STRING_ARRAY:
        return e->rank == 1 ? ZM__COLUMN_STRINGS : ZM__COLUMN_NOT_ONE_VALUE;
    case ZM_ELEMENT_ARRAY:
        if (e->rank != 1)
            return ZM__COLUMN_NOT_ONE_VALUE;
        return zm_array_describe(e->values)->dtype.type_class == ZM_TYPE_BOOL
                   ? ZM__COLUMN_BOOLEAN
                   : ZM__COLUMN_NUMBERS;
    case ZM_ELEMENT_NULLABLE:
        return e->nullable_boolean ? ZM__COLUMN_BOOLEAN
               : e->nullable_string ? ZM__COLUMN_NULLABLE_STRINGS
                                    : ZM__COLUMN_NUMBERS;
    default:
        return ZM__COLUMN_NOT_VALUES;
    }
}

/* Why a column cannot stratify, or NULL if it can. */
static const char *cannot_stratify(const zm_element *e)
{
    switch (zm__column_use_of(e)) {
    case ZM__COLUMN_CATEGORICAL:
    case ZM__COLUMN_STRINGS:
    case ZM__COLUMN_BOOLEAN:
        return NULL;
    case ZM__COLUMN_NOT_ONE_VALUE:
        return "is not one value a cell";
    case ZM__COLUMN_NUMBERS:
        return "holds numbers (a stratum per value is no stratification: stratify by a "
               "categorical, string or boolean column)";
    case ZM__COLUMN_NULLABLE_STRINGS:
        return "holds strings some cells lack (nullable-string-array), which stratified/ does "
               "not split by yet: stratify by a categorical, string or boolean column";
    case ZM__COLUMN_NOT_VALUES:
        break;
    }
    return "is not a column of values";
}

void zm_field_strata_free(zm_field_strata *s)
{
    if (s == NULL)
        return;
    free(s->codes);
    zm_strings_free(&s->names);
    memset(s, 0, sizeof *s);
}

/* Category names from texts: count items into a zm_strings. */
static int strings_from(const char *const *texts, const size_t *lengths, uint64_t count,
                        zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t total = 0;
    for (uint64_t i = 0; i < count; i++)
        total += lengths[i];
    out->offsets = malloc((count + 1) * sizeof *out->offsets);
    out->bytes = malloc(total + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_strings_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory naming strata");
    }
    uint64_t at = 0;
    for (uint64_t i = 0; i < count; i++) {
        out->offsets[i] = at;
        memcpy(out->bytes + at, texts[i], lengths[i]);
        at += lengths[i];
    }
    out->offsets[count] = at;
    out->bytes[at] = '\0';
    out->count = count;
    return 0;
}

/* Plain values (texts, NULL for missing) made categories in code-point
 * order, named by their values. */
static int strata_of_values(const char *const *values, const size_t *lengths, uint64_t n,
                            zm_field_strata *out, zm_err *err)
{
    out->codes = malloc((n ? n : 1) * sizeof *out->codes);
    if (out->codes == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory coding %" PRIu64 " cells", n);
    int rc = zm_codes_from_values(values, lengths, n, out->codes, &out->count, err);
    if (rc != 0)
        return rc;
    const char **texts = calloc(out->count ? out->count : 1, sizeof *texts);
    size_t *sizes = calloc(out->count ? out->count : 1, sizeof *sizes);
    if (texts == NULL || sizes == NULL) {
        free(texts);
        free(sizes);
        return zm_err_set(err, -ENOMEM, "out of memory naming strata");
    }
    for (uint64_t i = 0; i < n; i++)
        if (out->codes[i] >= 0 && texts[out->codes[i]] == NULL) {
            texts[out->codes[i]] = values[i];
            sizes[out->codes[i]] = lengths[i];
        }
    rc = strings_from(texts, sizes, out->count, &out->names, err);
    free(texts);
    free(sizes);
    return rc;
}

static int64_t integer_at(const uint8_t *bytes, zm_dtype t, uint64_t i)
{
    if (t.type_class == ZM_TYPE_UINT || t.type_class == ZM_TYPE_BOOL) {
        uint64_t u = t.size == 1 ? bytes[i]
                   : t.size == 2 ? ((const uint16_t *)bytes)[i]
                   : t.size == 4 ? ((const uint32_t *)bytes)[i]
                                 : ((const uint64_t *)bytes)[i];
        return u > INT64_MAX ? INT64_MAX : (int64_t)u;
    }
    return t.size == 1 ? ((const int8_t *)bytes)[i]
         : t.size == 2 ? ((const int16_t *)bytes)[i]
         : t.size == 4 ? ((const int32_t *)bytes)[i]
                       : ((const int64_t *)bytes)[i];
}

/* An IEEE binary16 value (numpy float16) as a double: exact. */
static double half_to_double(uint16_t h)
{
    int exponent = (h >> 10) & 0x1f;
    unsigned mantissa = h & 0x3ff;
    double v = exponent == 0    ? ldexp(mantissa, -24)
             : exponent == 0x1f ? (mantissa ? NAN : INFINITY)
                                : ldexp(mantissa + 1024, exponent - 25);
    return h >> 15 ? -v : v;
}

static double real_at(const uint8_t *bytes, zm_dtype t, uint64_t i)
{
    if (t.type_class == ZM_TYPE_FLOAT)
        return t.size == 2 ? half_to_double(((const uint16_t *)bytes)[i])
             : t.size == 4 ? (double)((const float *)bytes)[i]
                           : ((const double *)bytes)[i];
    return (double)integer_at(bytes, t, i);
}

static int read_all(zm_source *source, const zm_array *array, uint64_t rows, uint8_t **out,
                    zm_err *err)
{
    const zm_array_info *info = zm_array_describe(array);
    uint64_t bytes = rows * zm_array_row_bytes(array);
    *out = malloc(bytes ? bytes : 1);
    if (*out == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", info->file_path);
    int rc = zm_array_read_rows(source, array, 0, rows, *out, err);
    if (rc != 0) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

static int categorical_strata(zm_source *source, const zm_element *e, uint64_t n,
                              zm_field_strata *out, zm_err *err)
{
    uint8_t *raw = NULL;
    int rc = read_all(source, e->values, n, &raw, err);
    if (rc != 0)
        return rc;
    zm_dtype t = zm_array_describe(e->values)->dtype;
    const zm_element *c = e->categories;
    out->count = c->shape[0];
    out->codes = malloc((n ? n : 1) * sizeof *out->codes);
    if (out->codes == NULL) {
        free(raw);
        return zm_err_set(err, -ENOMEM, "out of memory coding %" PRIu64 " cells", n);
    }
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = integer_at(raw, t, i);
        out->codes[i] = v < 0 ? -1 : (int32_t)v; /* below the category count: checked on read */
    }
    free(raw);
    if (c->kind == ZM_ELEMENT_STRING_ARRAY)
        return zm_array_read_strings(source, c->values, NULL, 0, &out->names, err);
    /* Numeric categories, named by their values. */
    uint8_t *values = NULL;
    if ((rc = read_all(source, c->values, out->count, &values, err)) != 0)
        return rc;
    zm_dtype ct = zm_array_describe(c->values)->dtype;
    char (*texts)[32] = malloc((out->count ? out->count : 1) * sizeof *texts);
    const char **pointers = malloc((out->count ? out->count : 1) * sizeof *pointers);
    size_t *lengths = malloc((out->count ? out->count : 1) * sizeof *lengths);
    if (texts && pointers && lengths) {
        for (uint64_t i = 0; i < out->count; i++) {
            if (ct.type_class == ZM_TYPE_FLOAT)
                zm_shortest_decimal(real_at(values, ct, i), texts[i], sizeof texts[i]);
            else
                snprintf(texts[i], sizeof texts[i], "%" PRId64, integer_at(values, ct, i));
            pointers[i] = texts[i];
            lengths[i] = strlen(texts[i]);
        }
        rc = strings_from(pointers, lengths, out->count, &out->names, err);
    } else {
        rc = zm_err_set(err, -ENOMEM, "out of memory naming strata");
    }
    free(texts);
    free(pointers);
    free(lengths);
    free(values);
    return rc;
}

static int plain_strata(zm_source *source, const zm_element *e, uint64_t n, zm_field_strata *out,
                        zm_err *err)
{
    const char **values = malloc((n ? n : 1) * sizeof *values);
    size_t *lengths = malloc((n ? n : 1) * sizeof *lengths);
    if (values == NULL || lengths == NULL) {
        free(values);
        free(lengths);
        return zm_err_set(err, -ENOMEM, "out of memory reading obs/%s", e->name);
    }
    int rc;
    if (e->kind == ZM_ELEMENT_STRING_ARRAY) {
        zm_strings s;
        rc = zm_array_read_strings(source, e->values, NULL, 0, &s, err);
        if (rc == 0 && s.count != n)
            rc = zm_err_set(err, -EIO, "obs/%s holds %zu values for %" PRIu64 " cells", e->name,
                            s.count, n);
        for (uint64_t i = 0; rc == 0 && i < n; i++) {
            values[i] = s.bytes + s.offsets[i];
            lengths[i] = (size_t)(s.offsets[i + 1] - s.offsets[i]);
        }
        if (rc == 0)
            rc = strata_of_values(values, lengths, n, out, err);
        if (rc == 0 || s.offsets)
            zm_strings_free(&s);
    } else {
        /* Booleans, as Python names them; a nullable one's missing values
         * are the missing stratum. */
        uint8_t *raw = NULL, *mask = NULL;
        rc = read_all(source, e->values, n, &raw, err);
        if (rc == 0 && e->kind == ZM_ELEMENT_NULLABLE)
            rc = read_all(source, e->mask, n, &mask, err);
        zm_dtype t = rc == 0 ? zm_array_describe(e->values)->dtype : (zm_dtype){ZM_TYPE_BOOL, 1};
        for (uint64_t i = 0; rc == 0 && i < n; i++) {
            int missing = mask && mask[i];
            int truth = !missing && integer_at(raw, t, i) != 0;
            values[i] = missing ? NULL : truth ? "True" : "False";
            lengths[i] = missing ? 0 : truth ? 4 : 5;
        }
        if (rc == 0)
            rc = strata_of_values(values, lengths, n, out, err);
        free(raw);
        free(mask);
    }
    free(values);
    free(lengths);
    return rc;
}

int zm_view_field_check(zm_source *source, const char *field, zm_err *err)
{
    const zm_element *e = zm__obs_column(source, field, err);
    if (e == NULL)
        return -ENOENT;
    const char *why = cannot_stratify(e);
    return why ? zm_err_set(err, -EINVAL, "obs/%s %s", field, why) : 0;
}

int zm_view_field_strata(zm_source *source, const char *field, zm_field_strata *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    const zm_element *e = zm__obs_column(source, field, err);
    if (e == NULL)
        return -ENOENT;
    const char *why = cannot_stratify(e);
    if (why != NULL)
        return zm_err_set(err, -EINVAL, "obs/%s %s", field, why);
    uint64_t n = zm_source_n_obs(source);
    int rc = e->kind == ZM_ELEMENT_CATEGORICAL ? categorical_strata(source, e, n, out, err)
                                               : plain_strata(source, e, n, out, err);
    if (rc != 0)
        zm_field_strata_free(out);
    return rc;
}

/* ---- Embeddings ------------------------------------------------------------------ */

static int numeric(const zm_array *array)
{
    zm_type_class c = zm_array_describe(array)->dtype.type_class;
    return c == ZM_TYPE_INT || c == ZM_TYPE_UINT || c == ZM_TYPE_FLOAT;
}

/* Why obsm/<key> cannot place cells, or NULL; its columns in *columns. */
static const char *cannot_place(const zm_element *e, uint64_t n, uint64_t *columns)
{
    *columns = 0;
    if (e->kind == ZM_ELEMENT_ARRAY) {
        if (e->rank < 1 || e->rank > 2 || e->shape[0] != n)
            return "is not one row a cell";
        if (!numeric(e->values))
            return "does not hold numbers";
        *columns = e->rank == 2 ? e->shape[1] : 1;
        return *columns ? NULL : "has no column";
    }
    if (e->kind == ZM_ELEMENT_DATAFRAME) {
        for (size_t i = 0; i < e->child_count; i++) {
            const zm_element *c = e->children[i];
            if (c->kind != ZM_ELEMENT_ARRAY || c->rank != 1 || !numeric(c->values))
                return "has a column that does not hold numbers";
        }
        *columns = e->child_count;
        return *columns ? NULL : "has no column";
    }
    return e->kind == ZM_ELEMENT_SPARSE ? "is a sparse matrix, not coordinates"
                                        : "does not hold coordinates";
}

static const zm_element *obsm_entry(zm_source *source, const char *key, zm_err *err)
{
    const zm_element *entry = zm_element_child(zm_source_find(source, "obsm"), key, strlen(key));
    if (entry != NULL)
        return entry;
    zm_err_set(err, -ENOENT, "obsm has no entry %s", key);
    return NULL;
}

int zm_view_embedding_columns(zm_source *source, const char *key, uint64_t *columns, zm_err *err)
{
    const zm_element *e = obsm_entry(source, key, err);
    if (e == NULL)
        return -ENOENT;
    const char *why = cannot_place(e, zm_source_n_obs(source), columns);
    return why ? zm_err_set(err, -EINVAL, "obsm/%s %s", key, why) : 0;
}

int zm_view_embedding_coords(zm_source *source, const char *key, const unsigned *columns,
                             unsigned count, double **coords, zm_err *err)
{
    *coords = NULL;
    uint64_t total;
    int rc = zm_view_embedding_columns(source, key, &total, err);
    if (rc != 0)
        return rc;
    for (unsigned c = 0; c < count; c++)
        if (columns[c] >= total)
            return zm_err_set(err, -EINVAL, "obsm/%s has %" PRIu64 " columns: there is no column %u",
                              key, total, columns[c]);
    const zm_element *e = obsm_entry(source, key, err);
    uint64_t n = zm_source_n_obs(source);
    uint64_t values = n * count;
    double *out = malloc((values ? values : 1) * sizeof *out);
    if (out == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for %" PRIu64 " cells' coordinates", n);
    if (e->kind == ZM_ELEMENT_DATAFRAME) {
        for (unsigned c = 0; rc == 0 && c < count; c++) {
            const zm_array *a = e->children[columns[c]]->values;
            uint8_t *raw = NULL;
            rc = read_all(source, a, n, &raw, err);
            zm_dtype t = rc == 0 ? zm_array_describe(a)->dtype : (zm_dtype){ZM_TYPE_FLOAT, 8};
            for (uint64_t i = 0; rc == 0 && i < n; i++)
                out[i * count + c] = real_at(raw, t, i);
            free(raw);
        }
    } else {
        /* Whole rows in batches, the columns picked from each. */
        zm_dtype t = zm_array_describe(e->values)->dtype;
        uint64_t batch = n < BATCH_ROWS ? n : BATCH_ROWS;
        uint8_t *raw = malloc((batch ? batch : 1) * zm_array_row_bytes(e->values));
        if (raw == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory reading obsm/%s", key);
        for (uint64_t from = 0; rc == 0 && from < n; from += batch) {
            uint64_t rows = n - from < batch ? n - from : batch;
            rc = zm_array_read_rows(source, e->values, from, rows, raw, err);
            for (uint64_t i = 0; rc == 0 && i < rows; i++)
                for (unsigned c = 0; c < count; c++)
                    out[(from + i) * count + c] = real_at(raw, t, i * total + columns[c]);
        }
        free(raw);
    }
    if (rc != 0) {
        free(out);
        return rc;
    }
    *coords = out;
    return 0;
}

int zm_view_strata_fields(zm_source *source, zm_view_key_emit emit, void *context)
{
    const zm_element *obs = zm_source_find(source, "obs");
    if (obs == NULL || obs->kind != ZM_ELEMENT_DATAFRAME)
        return 0;
    for (size_t i = 0; i < obs->child_count; i++)
        if (cannot_stratify(obs->children[i]) == NULL) {
            int rc = emit(context, obs->children[i]->name);
            if (rc != 0)
                return rc;
        }
    return 0;
}

int zm_view_embeddings(zm_source *source, zm_view_key_emit emit, void *context)
{
    const zm_element *obsm = zm_source_find(source, "obsm");
    if (obsm == NULL)
        return 0;
    uint64_t n = zm_source_n_obs(source), columns;
    for (size_t i = 0; i < obsm->child_count; i++)
        if (cannot_place(obsm->children[i], n, &columns) == NULL) {
            int rc = emit(context, obsm->children[i]->name);
            if (rc != 0)
                return rc;
        }
    return 0;
}
