/* The source reader against what anndata, h5py and loompy read: every
 * element of every fixture (fixtures/sources, and fixtures/shared: the copies
 * of ../shared/data's files) and every other file of ../shared/data where it
 * is beside the clone, whole and as a
 * gather of rows. The reference comes from tests/source/dump_reference.py,
 * which reads .h5ad files with h5py along anndata 0.8's layout (so that it
 * needs no anndata); h5py_reading_agrees_with_anndata holds that reading to
 * anndata's own where anndata is installed. */
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <nettle/sha2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/source.h"

static const char *source_root(void)
{
    const char *dir = getenv("ZM_SOURCE_ROOT");
    return dir ? dir : ".";
}

static const char *shared_data(void)
{
    const char *dir = getenv("ZM_SHARED_DATA");
    return dir ? dir : "../shared/data";
}

typedef struct hasher {
    struct sha256_ctx ctx;
} hasher;

static void hash_init(hasher *h) { sha256_init(&h->ctx); }
static void hash_bytes(hasher *h, const void *bytes, size_t n)
{
    sha256_update(&h->ctx, n, bytes);
}
static void hash_hex(hasher *h, char out[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&h->ctx, sizeof d, d);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* The reference for a file (and the rows selection), from the Python dumper. */
static json_t *reference(const char *file, const char *rows)
{
    char command[32768];
    snprintf(command, sizeof command, "/usr/bin/python3 '%s/tests/source/dump_reference.py' '%s'%s%s",
             source_root(), file, rows ? " --rows " : "", rows ? rows : "");
    FILE *p = popen(command, "r");
    cr_assert_not_null(p);
    json_error_t error;
    json_t *j = json_loadf(p, JSON_DECODE_INT_AS_REAL, &error); /* uint64 maxima in heads */
    pclose(p);
    cr_assert_not_null(j, "%s: the reference dumper printed no JSON (%s)", file, error.text);
    return j;
}

static uint64_t rows_of(const zm_array *a)
{
    const zm_array_info *info = zm_array_describe(a);
    return info->rank == 0 ? 1 : info->shape[0];
}

/* SHA-256 of an array's canonical bytes: numbers as stored (little-endian),
 * strings as UTF-8 each followed by a NUL. rows NULL: every row. */
static int array_sha(zm_source *s, const zm_array *a, const uint64_t *rows, size_t count,
                     char out[65], zm_err *err)
{
    const zm_array_info *info = zm_array_describe(a);
    hasher h;
    hash_init(&h);
    if (info->dtype.type_class == ZM_TYPE_STRING) {
        zm_strings strings;
        int rc = zm_array_read_strings(s, a, rows, count, &strings, err);
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < strings.count; i++) {
            hash_bytes(&h, strings.bytes + strings.offsets[i], strings.offsets[i + 1] - strings.offsets[i]);
            hash_bytes(&h, "", 1);
        }
        zm_strings_free(&strings);
    } else {
        uint64_t n = rows ? count : rows_of(a);
        uint64_t bytes = n * zm_array_row_bytes(a);
        uint8_t *buffer = malloc(bytes + 1);
        int rc = rows ? zm_array_gather_rows(s, a, rows, count, buffer, err)
                      : zm_array_read_rows(s, a, 0, n, buffer, err);
        if (rc != 0) {
            free(buffer);
            return rc;
        }
        hash_bytes(&h, buffer, bytes);
        free(buffer);
    }
    hash_hex(&h, out);
    return 0;
}

static const char *str(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void expect_sha(zm_source *s, const char *file, const char *path, const char *what,
                       const zm_array *a, const uint64_t *rows, size_t count, const char *want)
{
    if (want == NULL)
        return;
    char got[65];
    zm_err err;
    zm_err_clear(&err);
    int rc = array_sha(s, a, rows, count, got, &err);
    cr_expect_eq(rc, 0, "%s: %s %s: read failed: %s", file, path, what, err.reason);
    if (rc == 0)
        cr_expect_str_eq(got, want, "%s: %s %s differs from the reference%s", file, path, what,
                         rows ? " (gathered rows)" : "");
}

static void expect_dtype(const char *file, const char *path, const char *what, const zm_array *a,
                         const char *want)
{
    if (want)
        cr_expect_str_eq(zm_dtype_name(zm_array_describe(a)->dtype), want, "%s: %s %s dtype", file,
                         path, what);
}

static void expect_shape(const char *file, const char *path, const zm_element *e, json_t *shape)
{
    if (!json_is_array(shape))
        return;
    size_t rank = json_array_size(shape);
    if (e->kind == ZM_ELEMENT_DATAFRAME)
        rank = 1; /* the reference adds the column count */
    cr_expect_eq(e->rank, rank, "%s: %s rank %u, reference %zu", file, path, e->rank, rank);
    for (size_t d = 0; d < rank && d < e->rank; d++)
        cr_expect_eq(e->shape[d], (uint64_t)json_number_value(json_array_get(shape, d)),
                     "%s: %s dimension %zu", file, path, d);
}

static const char *kind_of(const zm_element *e)
{
    switch (e->kind) {
    case ZM_ELEMENT_DICT:
        return "dict";
    case ZM_ELEMENT_ARRAY:
        return "array";
    case ZM_ELEMENT_STRING_ARRAY:
        return "string-array";
    case ZM_ELEMENT_SCALAR:
        return "scalar";
    case ZM_ELEMENT_SPARSE:
        return e->sparse_format == ZM_SPARSE_CSR ? "csr" : "csc";
    case ZM_ELEMENT_DATAFRAME:
        return "dataframe";
    case ZM_ELEMENT_CATEGORICAL:
        return "categorical";
    case ZM_ELEMENT_NULLABLE:
        return "nullable";
    case ZM_ELEMENT_RECORDS:
        return "rec-array";
    }
    return "?";
}

/* Every path the model presents, as the reference names them. */
static void model_paths(const zm_element *e, json_t *set)
{
    /* The reference lists the containers' members, not the containers. */
    static const char *const containers[] = {"layers", "obsm", "varm", "obsp", "varp", "raw",
                                             "raw/varm"};
    int container = 0;
    for (size_t i = 0; i < sizeof containers / sizeof containers[0]; i++)
        container |= e->kind == ZM_ELEMENT_DICT && strcmp(e->path, containers[i]) == 0;
    if (e->path[0] && !container)
        json_object_set_new(set, e->path, json_true());
    if (e->kind == ZM_ELEMENT_DATAFRAME && e->index)
        json_object_set_new(set, e->index->path, json_true());
    if (e->kind == ZM_ELEMENT_DICT || e->kind == ZM_ELEMENT_DATAFRAME)
        for (size_t i = 0; i < e->child_count; i++)
            model_paths(e->children[i], set);
}

static void check_sparse_rows(zm_source *s, const char *file, const zm_element *e, json_t *want,
                              const uint64_t *rows, size_t count)
{
    /* A[rows] for CSR: the rows' entry ranges, and pointers counting them. */
    const zm_array_info *ip = zm_array_describe(e->indptr);
    uint64_t major = ip->shape[0];
    uint8_t *pointers = malloc(major * ip->dtype.size);
    zm_err err;
    cr_assert_eq(zm_array_read_rows(s, e->indptr, 0, major, pointers, &err), 0, "%s", err.reason);
    zm_range *ranges = malloc((count ? count : 1) * sizeof *ranges);
    uint8_t *new_pointers = malloc((count + 1) * ip->dtype.size);
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        int64_t a = 0, b = 0;
        memcpy(&a, pointers + rows[i] * ip->dtype.size, ip->dtype.size);
        memcpy(&b, pointers + (rows[i] + 1) * ip->dtype.size, ip->dtype.size);
        ranges[i] = (zm_range){(uint64_t)a, (uint64_t)b};
        memcpy(new_pointers + i * ip->dtype.size, &total, ip->dtype.size);
        total += (uint64_t)(b - a);
    }
    memcpy(new_pointers + count * ip->dtype.size, &total, ip->dtype.size);
    const zm_array *parts[2] = {e->values, e->indices};
    const char *keys[2] = {"data_sha256", "indices_sha256"};
    for (int p = 0; p < 2; p++) {
        size_t size = zm_array_describe(parts[p])->dtype.size;
        uint8_t *buffer = malloc(total * size + 1);
        int rc = zm_array_gather_ranges(s, parts[p], ranges, count, buffer, &err);
        cr_expect_eq(rc, 0, "%s: %s gather: %s", file, e->path, err.reason);
        if (rc == 0 && str(want, keys[p])) {
            hasher h;
            char got[65];
            hash_init(&h);
            hash_bytes(&h, buffer, total * size);
            hash_hex(&h, got);
            cr_expect_str_eq(got, str(want, keys[p]), "%s: %s %s of gathered rows", file, e->path,
                             keys[p]);
        }
        free(buffer);
        /* The same values read as one pass (chunks used in part decoded
         * only as far as needed) and scattered: range i written where
         * range count - 1 - i would be, then put back in order. */
        uint64_t *at = malloc((count ? count : 1) * sizeof *at);
        uint8_t *scattered = malloc(total * size + 1);
        uint8_t *ordered = malloc(total * size + 1);
        uint64_t place = 0;
        for (size_t i = count; i-- > 0;) {
            at[i] = place;
            place += ranges[i].end - ranges[i].start;
        }
        rc = zm_array_scatter_ranges(s, parts[p], ranges, at, count, scattered, ZM_READ_PASS, &err);
        cr_expect_eq(rc, 0, "%s: %s scattered pass: %s", file, e->path, err.reason);
        uint64_t next = 0;
        for (size_t i = 0; rc == 0 && i < count; i++) {
            uint64_t n = ranges[i].end - ranges[i].start;
            memcpy(ordered + next * size, scattered + at[i] * size, n * size);
            next += n;
        }
        if (rc == 0 && str(want, keys[p])) {
            hasher h;
            char got[65];
            hash_init(&h);
            hash_bytes(&h, ordered, total * size);
            hash_hex(&h, got);
            cr_expect_str_eq(got, str(want, keys[p]), "%s: %s %s of rows read in one pass", file,
                             e->path, keys[p]);
        }
        free(at);
        free(scattered);
        free(ordered);
    }
    if (str(want, "indptr_sha256")) {
        hasher h;
        char got[65];
        hash_init(&h);
        hash_bytes(&h, new_pointers, (count + 1) * ip->dtype.size);
        hash_hex(&h, got);
        cr_expect_str_eq(got, str(want, "indptr_sha256"), "%s: %s indptr of gathered rows", file,
                         e->path);
    }
    free(ranges);
    free(new_pointers);
    free(pointers);
}

static void check_element(zm_source *s, const char *file, const char *path, json_t *ref)
{
    const zm_element *e = zm_source_find(s, path);
    cr_expect_not_null(e, "%s: the reference has %s but the model does not", file, path);
    if (e == NULL)
        return;
    const char *kind = str(ref, "kind");
    cr_expect_str_eq(kind_of(e), kind, "%s: %s is %s, reference %s", file, path, kind_of(e), kind);
    if (strcmp(kind_of(e), kind) != 0)
        return;
    expect_shape(file, path, e, json_object_get(ref, "shape"));
    if (!strcmp(kind, "array") || !strcmp(kind, "string-array") || !strcmp(kind, "scalar")) {
        expect_dtype(file, path, "values", e->values, str(ref, "dtype"));
        expect_sha(s, file, path, "values", e->values, NULL, 0, str(ref, "sha256"));
    } else if (!strcmp(kind, "csr") || !strcmp(kind, "csc")) {
        expect_dtype(file, path, "data", e->values, str(ref, "data_dtype"));
        expect_dtype(file, path, "indices", e->indices, str(ref, "indices_dtype"));
        expect_dtype(file, path, "indptr", e->indptr, str(ref, "indptr_dtype"));
        expect_sha(s, file, path, "data", e->values, NULL, 0, str(ref, "data_sha256"));
        expect_sha(s, file, path, "indices", e->indices, NULL, 0, str(ref, "indices_sha256"));
        expect_sha(s, file, path, "indptr", e->indptr, NULL, 0, str(ref, "indptr_sha256"));
    } else if (!strcmp(kind, "categorical")) {
        expect_dtype(file, path, "codes", e->values, str(ref, "codes_dtype"));
        expect_sha(s, file, path, "codes", e->values, NULL, 0, str(ref, "codes_sha256"));
        expect_sha(s, file, path, "categories", e->categories->values, NULL, 0,
                   str(ref, "categories_sha256"));
        json_t *ordered = json_object_get(ref, "ordered");
        if (json_is_boolean(ordered))
            cr_expect_eq(e->ordered, json_is_true(ordered), "%s: %s ordered", file, path);
    } else if (!strcmp(kind, "nullable")) {
        expect_sha(s, file, path, "values", e->values, NULL, 0, str(ref, "values_sha256"));
        expect_sha(s, file, path, "mask", e->mask, NULL, 0, str(ref, "mask_sha256"));
    } else if (!strcmp(kind, "dataframe")) {
        json_t *columns = json_object_get(ref, "columns");
        cr_expect_eq(e->child_count, json_array_size(columns), "%s: %s column count", file, path);
        for (size_t i = 0; i < e->child_count && i < json_array_size(columns); i++)
            cr_expect_str_eq(e->children[i]->name, json_string_value(json_array_get(columns, i)),
                             "%s: %s column %zu", file, path, i);
    } else if (!strcmp(kind, "dict")) {
        json_t *keys = json_object_get(ref, "keys");
        cr_expect_eq(e->child_count, json_array_size(keys), "%s: %s key count", file, path);
    } else if (!strcmp(kind, "rec-array")) {
        json_t *fields = json_object_get(ref, "field_sha256");
        cr_expect_eq(e->child_count, json_object_size(fields), "%s: %s field count", file, path);
        for (size_t i = 0; i < e->child_count; i++)
            expect_sha(s, file, path, e->children[i]->name, e->children[i]->values, NULL, 0,
                       str(fields, e->children[i]->name));
    }
}

static void check_rows(zm_source *s, const char *file, json_t *rows_ref)
{
    json_t *selection = json_object_get(rows_ref, "selection");
    size_t count = json_array_size(selection);
    uint64_t *rows = malloc((count ? count : 1) * sizeof *rows);
    for (size_t i = 0; i < count; i++)
        rows[i] = (uint64_t)json_number_value(json_array_get(selection, i));
    const char *path;
    json_t *want;
    json_object_foreach(json_object_get(rows_ref, "elements"), path, want) {
        const zm_element *e = zm_source_find(s, path);
        if (e == NULL)
            continue; /* reported by the whole-element check */
        switch (e->kind) {
        case ZM_ELEMENT_ARRAY:
        case ZM_ELEMENT_STRING_ARRAY:
            expect_sha(s, file, path, "values", e->values, rows, count, str(want, "sha256"));
            break;
        case ZM_ELEMENT_CATEGORICAL:
            expect_sha(s, file, path, "codes", e->values, rows, count, str(want, "codes_sha256"));
            break;
        case ZM_ELEMENT_NULLABLE:
            expect_sha(s, file, path, "values", e->values, rows, count, str(want, "values_sha256"));
            expect_sha(s, file, path, "mask", e->mask, rows, count, str(want, "mask_sha256"));
            break;
        case ZM_ELEMENT_SPARSE:
            if (e->sparse_format == ZM_SPARSE_CSR)
                check_sparse_rows(s, file, e, want, rows, count);
            break;
        default:
            break;
        }
    }
    free(rows);
}

/* Ascending rows: a run of neighbours, every step-th row (at most ~700),
 * and the last. */
static void rows_for(uint64_t n, char *out, size_t size)
{
    size_t at = 0;
    uint64_t step = n / 600 > 3 ? n / 600 : 3;
    out[0] = '\0';
    for (uint64_t r = 0; r < n && at + 24 < size; r++)
        if (r % step == 0 || r == n - 1 || (r > 7 && r < 12))
            at += (size_t)snprintf(out + at, size - at, "%s%llu", at ? "," : "", (unsigned long long)r);
}

static void check_file(const char *file)
{
    json_t *ref = reference(file, NULL);
    cr_assert_null(json_object_get(ref, "error"), "%s: the reference refused it: %s", file,
                   str(ref, "error"));
    zm_source *s;
    zm_err err;
    zm_err_clear(&err);
    /* The reference reads a 10x file as scanpy's read_10x_h5 does: one
     * AnnData of every feature (a v2 file's first genome), -o
     * layout=anndata's model; its modalities are tested through a mount
     * (mount-mudata). */
    zm_source_options anndata = {.layout_anndata = 1};
    int rc = zm_source_open(file, &anndata, &s, &err);
    cr_assert_eq(rc, 0, "%s: open failed: %s", file, err.reason);
    cr_expect_str_eq(zm_source_format_name(zm_source_get_format(s)), str(ref, "format"), "%s", file);
    cr_expect_eq(zm_source_n_obs(s), (uint64_t)json_number_value(json_object_get(ref, "n_obs")), "%s", file);
    cr_expect_eq(zm_source_n_vars(s), (uint64_t)json_number_value(json_object_get(ref, "n_vars")), "%s", file);

    json_t *elements = json_object_get(ref, "elements");
    const char *path;
    json_t *entry;
    json_object_foreach(elements, path, entry)
        check_element(s, file, path, entry);
    /* Nothing the model presents is missing from the reference. */
    json_t *ours = json_object();
    model_paths(zm_source_root(s), ours);
    json_t *value;
    json_object_foreach(ours, path, value)
        cr_expect_not_null(json_object_get(elements, path),
                           "%s: the model has %s but the reference does not", file, path);
    json_decref(ours);
    json_decref(ref);

    /* Gathers of rows. */
    char rows[16384];
    rows_for(zm_source_n_obs(s), rows, sizeof rows);
    if (rows[0] != '\0') {
        json_t *with_rows = reference(file, rows);
        json_t *rows_ref = json_object_get(with_rows, "rows");
        cr_expect_not_null(rows_ref, "%s: no rows in the reference", file);
        if (rows_ref)
            check_rows(s, file, rows_ref);
        json_decref(with_rows);
    }
    zm_source_close(s);
}

/* Whether name is in directory copies (NULL: none is). */
static bool copied(const char *copies, const char *name)
{
    if (copies == NULL)
        return false;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", copies, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* Every file in a directory whose name ends in one of the suffixes, but those
 * that are in copies too (NULL: none is). The number checked. */
static size_t check_directory_except(const char *dir, const char *copies)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    struct dirent *entry;
    char **names = NULL;
    size_t count = 0;
    while ((entry = readdir(d)) != NULL) {
        const char *dot = strrchr(entry->d_name, '.');
        if (dot && (!strcmp(dot, ".h5ad") || !strcmp(dot, ".loom") || !strcmp(dot, ".h5")) &&
            !copied(copies, entry->d_name)) {
            names = realloc(names, (count + 1) * sizeof *names);
            names[count++] = strdup(entry->d_name);
        }
    }
    closedir(d);
    for (size_t i = 0; i < count; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        check_file(path);
        free(names[i]);
    }
    free(names);
    return count;
}

static void check_directory(const char *dir)
{
    cr_assert_gt(check_directory_except(dir, NULL), 0, "no source files in %s", dir);
}

#define FIXTURE_TEST(name, subdir)                                                                  \
    Test(source, name)                                                              \
    {                                                                                               \
        char dir[4096];                                                                             \
        snprintf(dir, sizeof dir, "%s/fixtures/sources/%s", source_root(), subdir);                 \
        check_directory(dir);                                                                       \
    }

FIXTURE_TEST(fixtures_h5ad, "h5ad")
FIXTURE_TEST(fixtures_filters, "filters")
FIXTURE_TEST(fixtures_layouts, "layouts")
FIXTURE_TEST(fixtures_legacy, "legacy")
FIXTURE_TEST(fixtures_loom, "loom")
FIXTURE_TEST(fixtures_10x, "10x")

/* The copies of ../shared/data's files in fixtures/shared (fixtures/shared/README.md). */
#define SHARED_TEST(name, subdir)                                                                   \
    Test(source, name)                                                                              \
    {                                                                                               \
        char dir[4096];                                                                             \
        snprintf(dir, sizeof dir, "%s/fixtures/shared/%s", source_root(), subdir);                  \
        check_directory(dir);                                                                       \
    }

SHARED_TEST(shared_h5ad, "h5ad")
SHARED_TEST(shared_loom, "loom")
SHARED_TEST(shared_10x, "10x")
SHARED_TEST(shared_synthetic, "synthetic")

/* The files of ../shared/data not copied to fixtures/shared, where it is here. */
Test(source, shared_data_not_copied)
{
    static const char *const subdirs[] = {"h5ad", "loom", "10x", "synthetic"};
    struct stat st;
    if (stat(shared_data(), &st) != 0)
        cr_skip_test("%s is not here (../shared/data is not beside this clone): its files not "
                     "copied to fixtures/shared are not checked", shared_data());
    size_t checked = 0;
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        char dir[4096], copies[4096];
        snprintf(dir, sizeof dir, "%s/%s", shared_data(), subdirs[i]);
        snprintf(copies, sizeof copies, "%s/fixtures/shared/%s", source_root(), subdirs[i]);
        if (stat(dir, &st) == 0)
            checked += check_directory_except(dir, copies);
    }
    if (checked == 0)
        cr_skip_test("every source file of %s/{h5ad,loom,10x,synthetic} is in fixtures/shared, "
                     "checked there", shared_data());
    cr_log_info("%zu files of %s that fixtures/shared has not", checked, shared_data());
}

/* The .h5ad files of a directory but those in copies too (NULL: none is),
 * appended to a shell command line as quoted arguments. */
static void append_h5ad_files(const char *dir, const char *copies, char *command, size_t size)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        const char *dot = strrchr(entry->d_name, '.');
        if (dot && !strcmp(dot, ".h5ad") && !copied(copies, entry->d_name)) {
            size_t at = strlen(command);
            int n = snprintf(command + at, size - at, " '%s/%s'", dir, entry->d_name);
            cr_assert(n > 0 && (size_t)n < size - at, "the command line is too long");
        }
    }
    closedir(d);
}

/* The reference reads .h5ad files with h5py alone, following anndata 0.8's
 * layout and its read-time fixes (Debian 13 has no anndata). Where anndata is
 * installed, its own reading of every .h5ad file above must give the same
 * reference, element for element and for the gathered rows; where the release
 * does not package anndata this is a skip that says so. */
Test(source, h5py_reading_agrees_with_anndata)
{
    static char command[65536];
    snprintf(command, sizeof command,
             "/usr/bin/python3 '%s/tests/source/dump_reference.py' --agree-with-anndata",
             source_root());
    static const char *const fixture_dirs[] = {"h5ad", "filters", "layouts", "legacy"};
    static const char *const shared_dirs[] = {"h5ad", "synthetic"};
    char dir[4096], copies[4096];
    for (size_t i = 0; i < sizeof fixture_dirs / sizeof fixture_dirs[0]; i++) {
        snprintf(dir, sizeof dir, "%s/fixtures/sources/%s", source_root(), fixture_dirs[i]);
        append_h5ad_files(dir, NULL, command, sizeof command);
    }
    for (size_t i = 0; i < sizeof shared_dirs / sizeof shared_dirs[0]; i++) {
        snprintf(copies, sizeof copies, "%s/fixtures/shared/%s", source_root(), shared_dirs[i]);
        append_h5ad_files(copies, NULL, command, sizeof command);
        snprintf(dir, sizeof dir, "%s/%s", shared_data(), shared_dirs[i]);
        struct stat st;
        if (stat(dir, &st) == 0) /* ../shared/data may not be beside the clone */
            append_h5ad_files(dir, copies, command, sizeof command);
    }
    FILE *p = popen(command, "r");
    cr_assert_not_null(p, "cannot run %s", command);
    static char line[1 << 20];
    json_t *header = NULL;
    size_t files = 0, agreed = 0;
    while (fgets(line, sizeof line, p) != NULL) {
        json_error_t error;
        json_t *j = json_loads(line, 0, &error);
        cr_assert_not_null(j, "the agreement check printed a line that is not JSON (%s): %.300s",
                           error.text, line);
        if (header == NULL) {
            header = j;
            continue;
        }
        files++;
        const char *file = str(j, "file");
        if (json_is_true(json_object_get(j, "agree")) && !str(j, "h5py_error")) {
            agreed++;
        } else if (str(j, "h5py_error") || str(j, "anndata_error")) {
            cr_expect_fail("%s: h5py reading: %s; anndata reading: %s", file,
                           str(j, "h5py_error") ? str(j, "h5py_error") : "read",
                           str(j, "anndata_error") ? str(j, "anndata_error") : "read");
        } else {
            json_t *diffs = json_object_get(j, "differences");
            cr_expect_fail("%s: the h5py and anndata readings differ, e.g. %s (%zu differences "
                           "listed)",
                           file, json_string_value(json_array_get(diffs, 0)),
                           json_array_size(diffs));
        }
        json_decref(j);
    }
    int status = pclose(p);
    cr_assert_not_null(header, "the agreement check printed nothing (status %d)", status);
    if (str(header, "skip")) {
        char reason[1024];
        snprintf(reason, sizeof reason, "%s", str(header, "skip"));
        json_decref(header);
        cr_skip_test("%s", reason);
    }
    cr_assert_null(json_object_get(header, "error"), "%s", str(header, "error"));
    cr_assert_eq(status, 0, "the agreement check failed (status %d)", status);
    cr_assert_gt(files, 0, "no .h5ad file was checked");
    const char *version = str(header, "anndata");
    cr_log_info("anndata %s and the h5py reading agree on %zu of %zu .h5ad files",
                version ? version : "(no version)", agreed, files);
    json_decref(header);
}

/* A thread's tally gets exactly what its reads add to the source's counters,
 * the parts decoded on the pool's threads included; a pass is listed with
 * its chunks done and the tally of the thread that began it. gzip1.h5ad's
 * X/data: 683 values in 8 deflated chunks of 97. */
Test(source, tallies_and_passes)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/fixtures/sources/filters/gzip1.h5ad", source_root());
    zm_source_options options = {.threads = 4};
    zm_source *s;
    zm_err err;
    cr_assert_eq(zm_source_open(file, &options, &s, &err), 0, "%s", err.reason);
    const zm_element *x = zm_source_find(s, "X");
    cr_assert_not_null(x);
    const zm_array *data = x->values;
    uint64_t n = zm_array_describe(data)->shape[0];
    cr_assert_eq(n, 683);
    uint64_t *rows = malloc(n * sizeof *rows);
    float *out = malloc(n * sizeof *out);
    for (uint64_t i = 0; i < n; i++)
        rows[i] = i;

    zm_source_stats before, after;
    zm_source_get_stats(s, &before);
    zm_source_tally tally = {0};
    zm_source_tally *previous = zm_source_tally_set(&tally);
    cr_assert_eq(zm_array_scatter_rows(s, data, rows, rows, n, out, ZM_READ_PASS, &err), 0, "%s",
                 err.reason);
    cr_assert_eq(zm_source_tally_set(previous), &tally);
    zm_source_get_stats(s, &after);
    cr_assert_eq(tally.chunks_decoded, 8);
    cr_assert_eq(tally.chunks_decoded, after.chunks_decoded - before.chunks_decoded);
    cr_assert_eq(tally.bytes_read, after.bytes_read - before.bytes_read);
    cr_assert_gt(tally.bytes_read, 0);

    zm_source_pass passes[16];
    size_t count = zm_source_passes(s, passes, 16);
    cr_assert_geq(count, 1);
    cr_assert_eq(passes[0].finished, 1); /* nothing runs now: the newest finished first */
    cr_assert_str_eq(passes[0].what, "/X/data");
    cr_assert_str_eq(passes[0].unit, "chunks");
    cr_assert_eq(passes[0].done, 8);
    cr_assert_eq(passes[0].total, 8);
    cr_assert_eq(passes[0].tally, &tally);

    /* Without a tally, reads count for the source alone. */
    zm_source_get_stats(s, &before);
    cr_assert_eq(zm_array_read_rows(s, data, 0, 10, out, &err), 0, "%s", err.reason);
    zm_source_get_stats(s, &after);
    cr_assert_eq(tally.chunks_decoded, 8);
    free(rows);
    free(out);
    zm_source_close(s);
}
