/* Cellucid's priority order (the subsampling specification, "Priority-ordered
 * files"): whether a file's rows are stored in the priority order of a seed,
 * verified before anything uses it, and so what each stored row's original
 * position is. Read once when the source opens.
 *
 * The record is uns/cellucid/priority = {seed, specVersion, nObs[, levels]}.
 * It verifies only when the seed is a uint32, specVersion is this kernel's
 * version, nObs is the cell count, the levels (when there) are the
 * specification's prefix levels of nObs, and obs/cellucid_original_position
 * (when there) is the seed's order: row r holds the cell of the r-th lowest
 * rank. A record that does not verify is never refused: the file is read as
 * one Cellucid did not write (each row its own position), and the reason is
 * kept for the log, info.json and inspect. A gene-major X's prefix counts
 * (varm/cellucid_prefix_counts) are checked against X's pointers here, and
 * counts that contradict them refuse the file, as the specification says. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/select.h"

#include "source/source_internal.h"

#define RECORD "uns/cellucid/priority"
#define COLUMN "obs/cellucid_original_position"
#define COUNTS "varm/cellucid_prefix_counts"

const zm_priority *zm_source_priority(const zm_source *source) { return &source->priority; }

void zm__priority_free(zm_priority *p)
{
    free((void *)p->original);
    free((void *)p->stored);
    free((void *)p->levels);
    free((void *)p->level_columns);
    free((void *)p->prefix_counts);
    memset(p, 0, sizeof *p);
}

static int unverified(zm_priority *p, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static int unverified(zm_priority *p, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(p->reason, sizeof p->reason, format, args);
    va_end(args);
    p->verified = 0;
    return 0;
}

/* An integer 0-d element's value: 0, or -EINVAL (not an integer scalar) or a
 * read's error. */
static int read_integer(zm_source *source, const zm_element *e, int64_t *out, zm_err *err)
{
    if (e == NULL || e->kind != ZM_ELEMENT_SCALAR || e->values == NULL)
        return -EINVAL;
    zm_dtype t = zm_array_describe(e->values)->dtype;
    if ((t.type_class != ZM_TYPE_INT && t.type_class != ZM_TYPE_UINT) || t.size > 8)
        return -EINVAL;
    uint8_t raw[8] = {0};
    int rc = zm_array_read_rows(source, e->values, 0, 1, raw, err);
    if (rc != 0)
        return rc;
    /* An unsigned value past INT64_MAX reads INT64_MAX: past every bound. */
    *out = zm_dtype_integer(t, raw, 0);
    return 0;
}

/* The first count values of a 1-d integer array as int64. */
static int read_integers(zm_source *source, const zm_array *array, uint64_t count, int64_t **out,
                         zm_err *err)
{
    const zm_array_info *info = zm_array_describe(array);
    zm_dtype t = info->dtype;
    if ((t.type_class != ZM_TYPE_INT && t.type_class != ZM_TYPE_UINT) || t.size > 8 ||
        info->rank != 1 || info->shape[0] < count)
        return zm_err_set(err, -EINVAL, "%s: not %" PRIu64 " integers", info->file_path, count);
    uint8_t *raw = malloc((count ? count : 1) * t.size);
    int64_t *values = malloc((count ? count : 1) * sizeof *values);
    int rc = raw && values ? zm_array_read_rows(source, array, 0, count, raw, err)
                           : zm_err_set(err, -ENOMEM, "out of memory reading %s", info->file_path);
    for (uint64_t i = 0; rc == 0 && i < count; i++)
        values[i] = zm_dtype_integer(t, raw, i);
    free(raw);
    if (rc != 0) {
        free(values);
        return rc;
    }
    *out = values;
    return 0;
}

static int is_integer_vector(const zm_element *e, uint64_t length)
{
    if (e == NULL || e->kind != ZM_ELEMENT_ARRAY || e->values == NULL || e->rank != 1 ||
        e->shape[0] != length)
        return 0;
    zm_dtype t = zm_array_describe(e->values)->dtype;
    return (t.type_class == ZM_TYPE_INT || t.type_class == ZM_TYPE_UINT) && t.size <= 8;
}

/* The specification's prefix levels of n: n, then each floor(previous × 3 /
 * 4), while at least 1. Where the specification is open (the order and the
 * last level), a record's levels are accepted when they are a run of that
 * chain that starts at n or at the next level and ends anywhere at or
 * above 1, in either order (docs/sources.md, "Priority-ordered files"). On
 * success *ascending holds them smallest first and *columns the record's
 * index of each. */
static int check_levels(const int64_t *levels, uint64_t count, uint64_t n, uint64_t **ascending,
                        uint64_t **columns, char *why, size_t size)
{
    if (count == 0) {
        snprintf(why, size, "its levels are empty");
        return -EINVAL;
    }
    int descending = count == 1 || levels[0] > levels[1];
    uint64_t *sorted = malloc(count * sizeof *sorted), *at = malloc(count * sizeof *at);
    if (sorted == NULL || at == NULL) {
        free(sorted);
        free(at);
        snprintf(why, size, "out of memory");
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < count; i++) {
        uint64_t from = descending ? count - 1 - i : i; /* smallest first */
        at[i] = from;
        sorted[i] = levels[from] < 0 ? 0 : (uint64_t)levels[from];
    }
    /* The largest is n or floor(3n / 4); each next one down the chain. */
    uint64_t expected = n, largest = sorted[count - 1];
    if (largest != n && largest == n * 3 / 4 && n * 3 / 4 >= 1)
        expected = n * 3 / 4;
    int rc = 0;
    for (uint64_t i = count; rc == 0 && i-- > 0;) {
        if (expected < 1 || sorted[i] != expected) {
            snprintf(why, size,
                     "its levels are not the prefix levels of nObs %" PRIu64 " (level %" PRIu64
                     " of %" PRIu64 " is %" PRId64 ", expected %" PRIu64 ")",
                     n, at[i], count, levels[at[i]], expected);
            rc = -EINVAL;
        }
        expected = expected * 3 / 4;
    }
    if (rc != 0) {
        free(sorted);
        free(at);
        return rc;
    }
    *ascending = sorted;
    *columns = at;
    return 0;
}

/* X's prefix counts, verified against X's pointers (per gene: never more
 * than the gene's entries, never fewer at a larger level, every entry at
 * level n). Counts that contradict the matrix refuse the file: -EINVAL. */
static int read_prefix_counts(zm_source *source, zm_priority *p, zm_err *err)
{
    const zm_element *counts = zm_source_find(source, COUNTS);
    const zm_element *x = zm_source_find(source, "X");
    if (counts == NULL)
        return 0;
    if (p->level_count == 0) {
        snprintf(p->note, sizeof p->note,
                 "%s is left unused: uns/cellucid/priority has no levels for it", COUNTS);
        return 0;
    }
    if (x == NULL || x->kind != ZM_ELEMENT_SPARSE || x->sparse_format != ZM_SPARSE_CSC) {
        snprintf(p->note, sizeof p->note, "%s is left unused: X is not a gene-major (CSC) matrix",
                 COUNTS);
        return 0;
    }
    uint64_t genes = x->shape[1], levels = p->level_count;
    if (counts->kind != ZM_ELEMENT_ARRAY || counts->values == NULL || counts->rank != 2 ||
        counts->shape[0] != genes || counts->shape[1] != levels)
        return zm_err_set(err, -EINVAL,
                          "%s: expected an integer array of %" PRIu64 " genes × %" PRIu64
                          " levels (uns/cellucid/priority/levels)", COUNTS, genes, levels);
    zm_dtype t = zm_array_describe(counts->values)->dtype;
    if ((t.type_class != ZM_TYPE_INT && t.type_class != ZM_TYPE_UINT) || t.size > 8)
        return zm_err_set(err, -EINVAL, "%s: holds %s, not integers", COUNTS, zm_dtype_name(t));
    uint64_t cells = genes * levels > 0 ? genes * levels : 1;
    uint8_t *raw = malloc(cells * t.size);
    uint32_t *table = malloc(cells * sizeof *table);
    int64_t *indptr = NULL;
    int rc = raw && table ? zm_array_read_rows(source, counts->values, 0, genes, raw, err)
                          : zm_err_set(err, -ENOMEM, "out of memory reading %s", COUNTS);
    if (rc == 0)
        rc = read_integers(source, x->indptr, genes + 1, &indptr, err);
    for (uint64_t g = 0; rc == 0 && g < genes; g++) {
        int64_t length = indptr[g + 1] - indptr[g];
        if (length < 0) {
            rc = zm_err_set(err, -EIO, "X/indptr is not monotone at gene %" PRIu64, g);
            break;
        }
        int64_t previous = 0;
        for (uint64_t j = 0; rc == 0 && j < levels; j++) {
            int64_t c = zm_dtype_integer(t, raw, g * levels + p->level_columns[j]);
            uint64_t level = p->levels[j];
            if (c < previous || c > length || (int64_t)level < c ||
                (level == p->n && c != length))
                rc = zm_err_set(err, -EINVAL,
                                "%s: gene %" PRIu64 " counts %" PRId64 " entries among the first %"
                                PRIu64 " rows, but it has %" PRId64 " entries%s", COUNTS, g, c,
                                level, length,
                                c < previous ? " and fewer than at a smaller level" : "");
            table[g * levels + j] = (uint32_t)c;
            previous = c;
        }
    }
    free(raw);
    free(indptr);
    if (rc != 0) {
        free(table);
        return rc;
    }
    p->prefix_counts = table;
    p->prefix_genes = genes;
    return 0;
}

int zm__priority_read(zm_source *source, zm_err *err)
{
    zm_priority *p = &source->priority;
    memset(p, 0, sizeof *p);
    uint64_t n = zm_source_n_obs(source);
    p->n = n;
    const zm_element *record = zm_source_find(source, RECORD);
    const zm_element *column = zm_source_find(source, COLUMN);
    if (record == NULL) {
        if (column != NULL)
            unverified(p, "%s has no uns/cellucid/priority record: it names nothing, and each row "
                       "is its own original position", COLUMN);
        return 0;
    }
    p->recorded = 1;
    if (record->kind != ZM_ELEMENT_DICT)
        return unverified(p, "%s is not a dict", RECORD);
    zm_err read_err;
    zm_err_clear(&read_err);
    int64_t seed, version, nobs;
    int rc = read_integer(source, zm_element_child(record, "seed", 4), &seed, &read_err);
    if (rc != 0)
        return unverified(p, "%s/seed is %s", RECORD, rc == -EINVAL ? "missing or not an integer"
                                                                   : read_err.reason);
    if (seed < 0 || seed > (int64_t)UINT32_MAX)
        return unverified(p, "%s/seed %" PRId64 " is not a uint32", RECORD, seed);
    rc = read_integer(source, zm_element_child(record, "specVersion", 11), &version, &read_err);
    if (rc != 0)
        return unverified(p, "%s/specVersion is %s", RECORD,
                          rc == -EINVAL ? "missing or not an integer" : read_err.reason);
    if (version != ZM_SPEC_VERSION)
        return unverified(p, "%s/specVersion is %" PRId64 ", not %d", RECORD, version,
                          ZM_SPEC_VERSION);
    rc = read_integer(source, zm_element_child(record, "nObs", 4), &nobs, &read_err);
    if (rc != 0)
        return unverified(p, "%s/nObs is %s", RECORD, rc == -EINVAL ? "missing or not an integer"
                                                                   : read_err.reason);
    if (nobs < 0 || (uint64_t)nobs != n)
        return unverified(p, "%s/nObs is %" PRId64 " but the file has %" PRIu64
                          " cells (a subset or a combination saved again?)", RECORD, nobs, n);
    const zm_element *levels = zm_element_child(record, "levels", 6);
    if (levels != NULL) {
        if (levels->kind != ZM_ELEMENT_ARRAY || levels->rank != 1 ||
            !is_integer_vector(levels, levels->shape[0]))
            return unverified(p, "%s/levels is not a list of integers", RECORD);
        /* Bounded before it is read: the chain has at most 78 levels. */
        uint64_t chain = 0;
        for (uint64_t l = n; l >= 1; l = l * 3 / 4)
            chain++;
        if (levels->shape[0] > chain)
            return unverified(p, "%s/levels holds %" PRIu64 " levels, but nObs %" PRIu64
                              " has %" PRIu64 " prefix levels", RECORD, levels->shape[0], n, chain);
        int64_t *values = NULL;
        rc = read_integers(source, levels->values, levels->shape[0], &values, &read_err);
        if (rc != 0)
            return rc == -ENOMEM ? zm_err_set(err, rc, "%s", read_err.reason)
                                 : unverified(p, "%s/levels: %s", RECORD, read_err.reason);
        char why[ZM_REASON_MAX];
        uint64_t *ascending = NULL, *columns = NULL;
        rc = check_levels(values, levels->shape[0], n, &ascending, &columns, why, sizeof why);
        free(values);
        if (rc == -ENOMEM)
            return zm_err_set(err, rc, "out of memory reading %s", RECORD);
        if (rc != 0)
            return unverified(p, "%s: %s", RECORD, why);
        p->levels = ascending;
        p->level_columns = columns;
        p->level_count = levels->shape[0];
        p->levels_element = levels;
    }
    /* The seed's order: stored row r is the cell of the r-th lowest rank. */
    zm_request request = {.method = ZM_METHOD_UNIFORM, .n = n, .seed = (uint32_t)seed,
                          .k = n ? n : 1};
    zm_selection order;
    rc = zm_select(&request, &order, err);
    if (rc != 0)
        return rc;
    uint32_t *stored = malloc((n ? n : 1) * sizeof *stored);
    if (stored == NULL) {
        zm_selection_free(&order);
        return zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", n);
    }
    for (uint64_t r = 0; r < n; r++)
        stored[order.order[r]] = (uint32_t)r;
    p->original = order.order;
    order.order = NULL;
    zm_selection_free(&order);
    p->stored = stored;
    p->seed = (uint32_t)seed;
    if (column != NULL) {
        /* Every row's stored position against the seed's order. */
        if (!is_integer_vector(column, n)) {
            zm__priority_free(p);
            p->recorded = 1;
            p->n = n;
            return unverified(p, "%s is not one integer a cell", COLUMN);
        }
        int64_t *positions = NULL;
        rc = read_integers(source, column->values, n, &positions, &read_err);
        uint64_t wrong = n;
        for (uint64_t r = 0; rc == 0 && r < n && wrong == n; r++)
            if (positions[r] != (int64_t)p->original[r])
                wrong = r;
        int64_t found = rc == 0 && wrong < n ? positions[wrong] : 0;
        free(positions);
        if (rc != 0 || wrong < n) {
            uint64_t expected = wrong < n ? p->original[wrong] : 0;
            zm__priority_free(p);
            p->recorded = 1;
            p->n = n;
            if (rc == -ENOMEM)
                return zm_err_set(err, rc, "%s", read_err.reason);
            if (rc != 0)
                return unverified(p, "%s: %s", COLUMN, read_err.reason);
            return unverified(p, "%s is not seed %" PRId64 "'s order (row %" PRIu64 " holds %"
                              PRId64 ", the seed's order %" PRIu64 "): reordered or subset, then "
                              "saved again?", COLUMN, seed, wrong, found, expected);
        }
    }
    p->verified = 1;
    rc = read_prefix_counts(source, p, err);
    if (rc != 0) {
        /* Name the record: the counts are its promise about X. */
        char reason[ZM_REASON_MAX];
        snprintf(reason, sizeof reason, "%s (a priority-ordered file's prefix counts must agree "
                 "with X)", err->reason);
        snprintf(err->reason, sizeof err->reason, "%s", reason);
    }
    return rc;
}
