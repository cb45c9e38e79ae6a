/* The chunk index read in one pass (src/source/btree.c, and with HDF5 1.14
 * and later H5Dchunk_iter) against HDF5's own lookups, chunk by chunk, for
 * every chunked array of every fixture (fixtures/sources, and fixtures/shared:
 * the copies of ../shared/data's files) and of the other files of
 * ../shared/data where it is beside the clone. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/source/source_internal.h"

static unsigned files_seen, arrays_read, arrays_left, arrays_iterated, chunks_compared;

static int has_suffix(const char *name, const char *suffix)
{
    size_t n = strlen(name), m = strlen(suffix);
    return n >= m && strcmp(name + n - m, suffix) == 0;
}

static void forget(zm_array *array)
{
    for (uint64_t i = 0; i < array->chunk_count; i++)
        array->chunk_address[i] = ZM__CHUNK_UNKNOWN;
}

/* The index as HDF5's lookups give it, chunk by chunk: the reference. */
struct index {
    uint64_t *address;
    uint32_t *size, *mask;
};

static void expect_same(const char *file, const zm_array *array, const struct index *want,
                        const char *how)
{
    for (uint64_t i = 0; i < array->chunk_count; i++) {
        cr_expect_eq(want->address[i], array->chunk_address[i], "%s: %s: %s: chunk %llu's address",
                     file, array->file_path, how, (unsigned long long)i);
        if (want->address[i] != ZM__CHUNK_ABSENT) {
            cr_expect_eq(want->size[i], array->chunk_stored_size[i], "%s: %s: %s: chunk %llu's size",
                         file, array->file_path, how, (unsigned long long)i);
            cr_expect_eq(want->mask[i], array->chunk_filter_mask[i], "%s: %s: %s: chunk %llu's mask",
                         file, array->file_path, how, (unsigned long long)i);
        }
        chunks_compared++;
    }
}

static void compare_array(const char *file, zm_source *source, zm_array *array)
{
    uint64_t n = array->chunk_count;
    if (n == 0 || array->index_allocated)
        return;
    array->chunk_address = malloc(n * sizeof *array->chunk_address);
    array->chunk_stored_size = calloc(n, sizeof *array->chunk_stored_size);
    array->chunk_filter_mask = calloc(n, sizeof *array->chunk_filter_mask);
    cr_assert(array->chunk_address && array->chunk_stored_size && array->chunk_filter_mask);
    zm_err err;
    zm_err_clear(&err);

    /* HDF5's lookups, chunk by chunk. */
    struct index want = {malloc(n * sizeof *want.address), malloc(n * sizeof *want.size),
                         malloc(n * sizeof *want.mask)};
    uint64_t *all = malloc(n * sizeof *all);
    cr_assert(want.address && want.size && want.mask && all);
    for (uint64_t i = 0; i < n; i++)
        all[i] = i;
    forget(array);
    zm__hdf5_lock();
    int rc = zm__h5_chunk_lookup(array, all, n, &err);
    zm__hdf5_unlock();
    cr_assert_eq(rc, 0, "%s: %s: HDF5's lookups: %s", file, array->file_path, err.reason);
    memcpy(want.address, array->chunk_address, n * sizeof *want.address);
    memcpy(want.size, array->chunk_stored_size, n * sizeof *want.size);
    memcpy(want.mask, array->chunk_filter_mask, n * sizeof *want.mask);
    free(all);

    /* The B-tree read by btree.c (what HDF5 1.10 builds use): first the
     * paths to every seventh chunk only, then the whole index. */
    forget(array);
    uint64_t *some = malloc((n / 7 + 1) * sizeof *some);
    size_t some_count = 0;
    for (uint64_t i = 0; i < n; i += 7)
        some[some_count++] = i;
    rc = zm__chunk_index_read(source, array, some, some_count, &err);
    for (size_t i = 0; rc == 0 && i < some_count; i++)
        cr_expect_neq(array->chunk_address[some[i]], ZM__CHUNK_UNKNOWN,
                      "%s: %s: a wanted chunk is known after a partial read", file, array->file_path);
    free(some);
    if (rc == 0)
        rc = zm__chunk_index_read(source, array, NULL, 0, &err);
    cr_expect(rc == 0 || rc == -ENOTSUP, "%s: %s: %d %s", file, array->file_path, rc, err.reason);
    if (rc != 0) {
        for (uint64_t i = 0; i < n; i++)
            cr_expect_eq(array->chunk_address[i], ZM__CHUNK_UNKNOWN,
                         "%s: %s: a refused index leaves every chunk unknown", file, array->file_path);
        arrays_left++;
    } else {
        expect_same(file, array, &want, "the B-tree read in one pass");
        arrays_read++;
    }

#if ZM__H5_HAS_CHUNK_ITER
    /* HDF5's own one pass (1.14 and later), for every index type. */
    forget(array);
    zm__hdf5_lock();
    rc = zm__h5_chunk_iterate(array, &err);
    zm__hdf5_unlock();
    cr_expect_eq(rc, 0, "%s: %s: H5Dchunk_iter: %s", file, array->file_path, err.reason);
    if (rc == 0) {
        expect_same(file, array, &want, "H5Dchunk_iter");
        arrays_iterated++;
    }
#endif
    free(want.address);
    free(want.size);
    free(want.mask);
    /* Left allocated and filled: the source frees it. */
    array->index_allocated = 1;
}

static void compare_file(const char *path)
{
    zm_source *source;
    zm_err err;
    zm_err_clear(&err);
    if (zm_source_open(path, NULL, &source, &err) != 0)
        return; /* not a source (the bad ones are tested elsewhere) */
    files_seen++;
    for (size_t i = 0; i < source->array_count; i++)
        if (source->arrays[i]->info.layout == ZM_LAYOUT_CHUNKED)
            compare_array(path, source, source->arrays[i]);
    zm_source_close(source);
}

/* Every source under directory, but those whose relative path is under
 * copies too (NULL: none is). */
static void compare_tree(const char *directory, const char *copies)
{
    DIR *dir = opendir(directory);
    if (dir == NULL)
        return;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] == '.' || strcmp(entry->d_name, "bad") == 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", directory, entry->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        char copy[4096];
        snprintf(copy, sizeof copy, "%s/%s", copies ? copies : "", entry->d_name);
        struct stat copy_st;
        bool is_copied = copies != NULL && stat(copy, &copy_st) == 0;
        if (S_ISDIR(st.st_mode))
            compare_tree(path, is_copied ? copy : NULL);
        else if (is_copied)
            continue; /* read in fixtures/shared */
        else if (has_suffix(path, ".h5ad") || has_suffix(path, ".h5") || has_suffix(path, ".loom"))
            compare_file(path);
    }
    closedir(dir);
}

Test(chunk_index, one_pass_equals_hdf5s_lookups, .timeout = 600)
{
    const char *fixtures = getenv("ZM_FIXTURES_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/sources", fixtures ? fixtures : "fixtures");
    compare_tree(path, NULL);
    snprintf(path, sizeof path, "%s/shared", fixtures ? fixtures : "fixtures");
    compare_tree(path, NULL);
    cr_log_info("%u files, %u arrays read in one pass by btree.c, %u left to HDF5, %u listed by "
                "H5Dchunk_iter (%u chunks compared)",
                files_seen, arrays_read, arrays_left, arrays_iterated, chunks_compared);
    cr_expect_gt(files_seen, 40, "the fixtures were found");
    cr_expect_gt(arrays_read, 50, "most chunked arrays are read in one pass");
    cr_expect_gt(arrays_left, 0, "version 4 layouts (layouts/) are left to HDF5");
#if ZM__H5_HAS_CHUNK_ITER
    cr_expect_eq(arrays_iterated, arrays_read + arrays_left, "H5Dchunk_iter lists every array");
#endif
}

/* The files of ../shared/data not copied to fixtures/shared (its modern/, for
 * one), where it is beside the clone. */
Test(chunk_index, shared_data_not_copied_equals_hdf5s_lookups, .timeout = 600)
{
    const char *fixtures = getenv("ZM_FIXTURES_DIR");
    const char *shared = getenv("ZM_SHARED_DATA");
    struct stat st;
    if (shared == NULL || stat(shared, &st) != 0)
        cr_skip_test("%s is not here (../shared/data is not beside this clone): its files not "
                     "copied to fixtures/shared are not compared", shared ? shared : "ZM_SHARED_DATA");
    char copies[4096];
    snprintf(copies, sizeof copies, "%s/shared", fixtures ? fixtures : "fixtures");
    compare_tree(shared, copies);
    if (files_seen == 0)
        cr_skip_test("every source file of %s is in fixtures/shared, compared there", shared);
    cr_log_info("%u files of %s that fixtures/shared has not, %u arrays read in one pass by "
                "btree.c, %u left to HDF5, %u listed by H5Dchunk_iter (%u chunks compared)",
                files_seen, shared, arrays_read, arrays_left, arrays_iterated, chunks_compared);
#if ZM__H5_HAS_CHUNK_ITER
    cr_expect_eq(arrays_iterated, arrays_read + arrays_left, "H5Dchunk_iter lists every array");
#endif
}
