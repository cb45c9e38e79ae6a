/* Bad sources: every way a file can be broken gives an error that names the
 * element and the problem, at open or at the read that meets it; never a
 * crash (this runs under ASan too), never values served as if nothing were
 * wrong. The files are written by fixtures/generate-sources.py. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zarrmount/source.h"
#include "zarrmount/view.h"

static void bad_path(const char *name, char *out, size_t size)
{
    const char *root = getenv("ZM_SOURCE_ROOT");
    snprintf(out, size, "%s/fixtures/sources/bad/%s", root ? root : ".", name);
}

/* Opening fails with a reason holding every needle. */
static void expect_open_fails(const char *name, const char *needle, const char *needle2)
{
    char path[4096];
    bad_path(name, path, sizeof path);
    zm_source *s = (zm_source *)0x1;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_source_open(path, NULL, &s, &err);
    cr_assert_lt(rc, 0, "%s opened", name);
    cr_expect_null(s);
    cr_expect(strstr(err.reason, needle) != NULL, "%s: reason \"%s\" lacks \"%s\"", name, err.reason,
              needle);
    if (needle2)
        cr_expect(strstr(err.reason, needle2) != NULL, "%s: reason \"%s\" lacks \"%s\"", name,
                  err.reason, needle2);
    cr_expect(strchr(err.reason, '\n') == NULL, "%s: a reason is one line", name);
}

/* Reads every value of every array under e; returns the first failure. */
static int read_all(zm_source *s, const zm_element *e, zm_err *err)
{
    const zm_array *arrays[4] = {e->values, e->indices, e->indptr, e->mask};
    for (int i = 0; i < 4; i++) {
        const zm_array *a = arrays[i];
        if (a == NULL)
            continue;
        const zm_array_info *info = zm_array_describe(a);
        int rc;
        if (info->dtype.type_class == ZM_TYPE_STRING) {
            zm_strings strings;
            rc = zm_array_read_strings(s, a, NULL, 0, &strings, err);
            if (rc == 0)
                zm_strings_free(&strings);
        } else {
            uint64_t rows = info->rank == 0 ? 1 : info->shape[0];
            void *buffer = malloc(rows * zm_array_row_bytes(a) + 1);
            rc = zm_array_read_rows(s, a, 0, rows, buffer, err);
            free(buffer);
        }
        if (rc != 0)
            return rc;
    }
    if (e->categories) {
        int rc = read_all(s, e->categories, err);
        if (rc != 0)
            return rc;
    }
    if (e->index) {
        int rc = read_all(s, e->index, err);
        if (rc != 0)
            return rc;
    }
    for (size_t i = 0; i < e->child_count; i++) {
        int rc = read_all(s, e->children[i], err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Opens fine (the damage is inside values), but reading meets it. */
static void expect_read_fails(const char *name, const char *needle, const char *needle2)
{
    char path[4096];
    bad_path(name, path, sizeof path);
    zm_source *s;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm_source_open(path, NULL, &s, &err), 0, "%s: %s", name, err.reason);
    zm_err_clear(&err);
    int rc = read_all(s, zm_source_root(s), &err);
    cr_expect_eq(rc, -EIO, "%s: reading every value gave %d (%s)", name, rc, err.reason);
    cr_expect(strstr(err.reason, needle) != NULL, "%s: reason \"%s\" lacks \"%s\"", name, err.reason,
              needle);
    if (needle2)
        cr_expect(strstr(err.reason, needle2) != NULL, "%s: reason \"%s\" lacks \"%s\"", name,
                  err.reason, needle2);
    /* The same read fails again the same way: a bad chunk is never cached. */
    zm_err again;
    zm_err_clear(&again);
    cr_expect_eq(read_all(s, zm_source_root(s), &again), -EIO);
    cr_expect_str_eq(again.reason, err.reason);
    zm_source_close(s);
}

Test(bad, not_hdf5) { expect_open_fails("not-hdf5.h5ad", "not an HDF5 file", "expected"); }
Test(bad, random_bytes) { expect_open_fails("random-bytes.h5ad", "not an HDF5 file", NULL); }
Test(bad, empty_file) { expect_open_fails("empty.h5ad", "not an HDF5 file", NULL); }
Test(bad, signature_only) { expect_open_fails("signature-only.h5ad", "cannot open", NULL); }
Test(bad, truncated) { expect_open_fails("truncated.h5ad", "truncated", NULL); }
Test(bad, not_single_cell)
{
    expect_open_fails("not-single-cell.h5", "not an AnnData .h5ad", "loom");
}
/* Opens fine (a source is opened without reading its pointers), but every
 * view that uses the damaged pointers is refused with the reason: the whole
 * file's views always; a subsample exactly when it keeps the damaged row. */
static void expect_view_fails(const char *name, uint64_t bad_row, const char *needle,
                              const char *subsample_needle)
{
    char path[4096];
    bad_path(name, path, sizeof path);
    zm_source *s;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm_source_open(path, NULL, &s, &err), 0, "%s: %s", name, err.reason);
    zm_view_kind whole[] = {ZM_VIEW_FULL, ZM_VIEW_FILE};
    for (int i = 0; i < 2; i++) {
        /* A whole view reads X's pointers when X is first laid out (its
         * lookup reads none): -EIO then, and the same said again. */
        zm_view_spec spec = {.kind = whole[i], .k = 1};
        zm_view *view = NULL;
        zm_err_clear(&err);
        cr_assert_eq(zm_view_create(s, &spec, 1 << 20, &view, &err), 0, "%s: a whole view: %s",
                     name, err.reason);
        const zm_store_node *x = zm_view_find(view, "X/data");
        cr_assert(x != NULL && x->sparse != NULL, "%s: X/data", name);
        for (int again = 0; again < 2; again++) {
            zm_view_sparse_info info;
            zm_err_clear(&err);
            cr_expect_eq(zm_view_sparse_get(view, x->sparse, &info, &err), -EIO,
                         "%s: a whole view's X laid out (%d)", name, again);
            cr_expect(strstr(err.reason, needle) != NULL, "%s: reason \"%s\" lacks \"%s\"", name,
                      err.reason, needle);
        }
        zm_view_free(view);
    }
    int refused = 0, served = 0;
    for (uint32_t seed = 0; seed < 12; seed++) {
        zm_view_spec spec = {.kind = ZM_VIEW_UNIFORM, .seed = seed, .k = 30};
        zm_view *view = NULL;
        zm_err_clear(&err);
        int rc = zm_view_create(s, &spec, 1 << 20, &view, &err);
        if (rc == 0) {
            const uint32_t *order = zm_view_order(view, &err);
            cr_assert_not_null(order, "%s", err.reason);
            for (uint64_t r = 0; r < zm_view_rows(view); r++)
                cr_expect_neq(order[r], bad_row, "%s: seed %u keeps the damaged row, served", name, seed);
            zm_view_free(view);
            served++;
        } else {
            cr_expect_eq(rc, -EIO);
            cr_expect(strstr(err.reason, subsample_needle) != NULL, "%s: reason \"%s\" lacks \"%s\"",
                      name, err.reason, subsample_needle);
            refused++;
        }
    }
    cr_expect(refused > 0 && served > 0, "%s: %d refused, %d served", name, refused, served);
    zm_source_close(s);
}

Test(bad, indptr_not_monotone)
{
    expect_view_fails("csr-indptr-not-monotone.h5ad", 10, "X: indptr is not monotone",
                      "X: indptr entries 10 and 11 are 125 and 112");
}
Test(bad, indptr_end)
{
    expect_view_fails("csr-indptr-end-mismatch.h5ad", 59, "X: indptr ends at 690 but there are 683",
                      "entries 59 and 60 are 673 and 690, not a range within the 683 stored values");
}
Test(bad, obs_length) { expect_open_fails("obs-length-mismatch.h5ad", "cells", "X"); }
Test(bad, indices_out_of_range)
{
    expect_read_fails("csr-indices-out-of-range.h5ad", "indices of X", "outside");
}
Test(bad, codes_out_of_range)
{
    expect_read_fails("categorical-code-out-of-range.h5ad", "codes of obs/", "outside");
}
Test(bad, corrupt_deflate) { expect_read_fails("corrupt-deflate-chunk.h5ad", "/X/data: chunk", "deflate"); }
/* HDF5 would read the missing heap object unchecked; the direct reader refuses. */
Test(bad, corrupt_string_heap_id)
{
    expect_read_fails("corrupt-string-heap-id.h5ad", "/obs/_index", "lacks an object");
}
Test(bad, fletcher32) { expect_read_fails("fletcher32-mismatch.h5ad", "chunk", "fletcher32"); }

/* A file that is not there, and a directory. */
Test(bad, missing_and_directory)
{
    zm_source *s;
    zm_err err;
    cr_expect_eq(zm_source_open("/nonexistent/file.h5ad", NULL, &s, &err), -ENOENT);
    cr_expect(strstr(err.reason, "No such file") != NULL, "%s", err.reason);
    /* A directory is a Zarr store: an empty one is none. */
    char empty[] = "/tmp/zm-source-bad-XXXXXX";
    cr_assert_not_null(mkdtemp(empty));
    cr_expect_eq(zm_source_open(empty, NULL, &s, &err), -EINVAL);
    cr_expect(strstr(err.reason, "not a Zarr store") != NULL, "%s", err.reason);
    rmdir(empty);
}
