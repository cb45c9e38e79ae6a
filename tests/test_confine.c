/* Nothing outside the source (src/source/confine.c): copies of the fixtures
 * whose elements are made to live in other files with HDF5's own API
 * (external storage, a virtual dataset over a FIFO, external, soft and
 * user-defined links) open with those elements left out, each listed as
 * skipped with why; HDF5 itself can no longer follow an external link; the
 * plugin path is the system's whatever HDF5_PLUGIN_PATH says. Every test is
 * a process of its own (criterion), so each sets HDF5 up from the start. */
#include <criterion/criterion.h>
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/source_internal.h"
#include "zarrmount/source.h"

static const char MARKER[] = "ZM!confine-test!"; /* 16 bytes: the other files' contents */

static char work[256];

static void make_work(void)
{
    snprintf(work, sizeof work, "%s/zm-confine-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    cr_assert_not_null(mkdtemp(work));
}

static void remove_work(void)
{
    char command[512];
    snprintf(command, sizeof command, "rm -rf '%s'", work);
    cr_expect_eq(system(command), 0);
}

static void in_work(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", work, name);
}

/* A copy of a fixture in the work directory, its path in out. */
static void copy_fixture(const char *relative, const char *name, char *out, size_t size)
{
    const char *root = getenv("ZM_SOURCE_ROOT");
    char from[4096];
    snprintf(from, sizeof from, "%s/fixtures/sources/%s", root ? root : ".", relative);
    in_work(out, size, name);
    FILE *in = fopen(from, "rb"), *copy = fopen(out, "wb");
    cr_assert(in && copy, "cannot copy %s", from);
    char buffer[65536];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, in)) > 0)
        cr_assert_eq(fwrite(buffer, 1, n, copy), n);
    fclose(in);
    fclose(copy);
}

/* A plain file of size bytes, the marker repeated. */
static void write_secret(const char *path, size_t size)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    for (size_t i = 0; i < size; i++)
        fputc(MARKER[i % 16], f);
    fclose(f);
    chmod(path, 0600);
}

/* Another HDF5 file: /d (60 × 40 float32) and /col (60 float32), the
 * marker's bytes. */
static void write_other(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert_geq(f, 0);
    float values[60 * 40];
    for (size_t i = 0; i < sizeof values; i++)
        ((char *)values)[i] = MARKER[i % 16];
    hsize_t matrix[2] = {60, 40}, column[1] = {60};
    const char *names[] = {"/d", "/col"};
    hid_t spaces[] = {H5Screate_simple(2, matrix, NULL), H5Screate_simple(1, column, NULL)};
    for (int i = 0; i < 2; i++) {
        hid_t d = H5Dcreate2(f, names[i], H5T_IEEE_F32LE, spaces[i], H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT);
        cr_assert_geq(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
        H5Dclose(d);
        H5Sclose(spaces[i]);
    }
    H5Fclose(f);
}

static void string_attribute(hid_t object, const char *name, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(value));
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert_geq(H5Awrite(a, type, value), 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
}

/* Replaces the 60 × 40 float32 /X by a dataset made with dcpl (an array
 * element of anndata 0.8). */
static void replace_x(hid_t f, hid_t dcpl, hid_t space)
{
    cr_assert_geq(H5Ldelete(f, "/X", H5P_DEFAULT), 0);
    hid_t d = H5Dcreate2(f, "/X", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    cr_assert_geq(d, 0);
    string_attribute(d, "encoding-type", "array");
    string_attribute(d, "encoding-version", "0.2.0");
    H5Dclose(d);
}

static zm_source *open_source(const char *path)
{
    zm_source *s = NULL;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_source_open(path, NULL, &s, &err);
    cr_assert_eq(rc, 0, "%s: %s", path, err.reason);
    return s;
}

/* The skipped line of path, which must hold every needle. */
static void expect_skipped(const zm_source *s, const char *path, const char *needle,
                           const char *needle2)
{
    const char *const *lines;
    size_t count = zm_source_skipped(s, &lines);
    size_t n = strlen(path);
    for (size_t i = 0; i < count; i++) {
        if (strncmp(lines[i], path, n) != 0 || strncmp(lines[i] + n, ": ", 2) != 0)
            continue;
        cr_expect(strstr(lines[i], needle) != NULL, "\"%s\" lacks \"%s\"", lines[i], needle);
        if (needle2)
            cr_expect(strstr(lines[i], needle2) != NULL, "\"%s\" lacks \"%s\"", lines[i], needle2);
        return;
    }
    cr_expect_fail("%s is not listed as skipped (%zu lines)", path, count);
}

Test(confine, external_storage_is_never_read)
{
    make_work();
    char path[4096], secret[4096];
    copy_fixture("h5ad/x-dense.h5ad", "x.h5ad", path, sizeof path);
    in_work(secret, sizeof secret, "secret.bin");
    write_secret(secret, 60 * 40 * 4);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    cr_assert_geq(H5Pset_external(dcpl, secret, 0, 60 * 40 * 4), 0);
    hsize_t dims[2] = {60, 40};
    hid_t space = H5Screate_simple(2, dims, NULL);
    replace_x(f, dcpl, space);
    H5Sclose(space);
    H5Pclose(dcpl);
    H5Fclose(f);

    zm_source *s = open_source(path);
    cr_expect_null(zm_source_find(s, "X"), "X is served");
    cr_expect_not_null(zm_source_find(s, "layers/dense"), "the rest is still served");
    expect_skipped(s, "/X", "external storage", secret);
    zm_source_close(s);
    remove_work();
}

/* An unlimited mapping: HDF5 opens its source for the extent (H5Dget_space),
 * which on a FIFO waits for a writer for ever. */
Test(confine, virtual_dataset_over_a_fifo_is_never_opened, .timeout = 120)
{
    make_work();
    char path[4096], fifo[4096];
    copy_fixture("h5ad/x-dense.h5ad", "x.h5ad", path, sizeof path);
    in_work(fifo, sizeof fifo, "fifo.h5");
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hsize_t dims[2] = {60, 40}, max[2] = {H5S_UNLIMITED, 40};
    hsize_t start[2] = {0, 0}, stride[2] = {1, 1}, count[2] = {H5S_UNLIMITED, 1},
            block[2] = {1, 40};
    hid_t space = H5Screate_simple(2, dims, max), from = H5Screate_simple(2, dims, max);
    cr_assert_geq(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, stride, count, block), 0);
    cr_assert_geq(H5Sselect_hyperslab(from, H5S_SELECT_SET, start, stride, count, block), 0);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    cr_assert_geq(H5Pset_virtual(dcpl, space, fifo, "/d", from), 0);
    replace_x(f, dcpl, space);
    H5Sclose(space);
    H5Sclose(from);
    H5Pclose(dcpl);
    H5Fclose(f);
    cr_assert_eq(mkfifo(fifo, 0600), 0);

    zm_source *s = open_source(path);
    cr_expect_null(zm_source_find(s, "X"), "X is served");
    expect_skipped(s, "/X", "a virtual dataset", fifo);
    zm_source_close(s);
    remove_work();
}

Test(confine, external_links_are_never_followed)
{
    make_work();
    char path[4096], other[4096];
    copy_fixture("h5ad/x-dense.h5ad", "x.h5ad", path, sizeof path);
    in_work(other, sizeof other, "other.h5");
    write_other(other);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    /* A column listed in column-order, a dict entry, and a soft link to one. */
    cr_assert_geq(H5Ldelete(f, "/obs/n_counts", H5P_DEFAULT), 0);
    cr_assert_geq(H5Lcreate_external(other, "/col", f, "/obs/n_counts", H5P_DEFAULT, H5P_DEFAULT),
                  0);
    cr_assert_geq(H5Lcreate_external(other, "/d", f, "/uns/e", H5P_DEFAULT, H5P_DEFAULT), 0);
    cr_assert_geq(H5Lcreate_soft("/uns/e", f, "/uns/s", H5P_DEFAULT, H5P_DEFAULT), 0);
    cr_assert_geq(H5Lcreate_soft("e", f, "/uns/relative", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);

    zm_source *s = open_source(path);
    cr_expect_null(zm_source_find(s, "obs/n_counts"));
    cr_expect_not_null(zm_source_find(s, "obs/is_doublet"), "the other columns are served");
    char target[4200];
    snprintf(target, sizeof target, "an external link to %s:/col is not followed", other);
    expect_skipped(s, "/obs/n_counts", target, NULL);
    snprintf(target, sizeof target, "an external link to %s:/d is not followed", other);
    expect_skipped(s, "/uns/e", target, NULL);
    snprintf(target, sizeof target, "/uns/e is an external link to %s:/d, not followed", other);
    expect_skipped(s, "/uns/s", target, NULL);
    expect_skipped(s, "/uns/relative", target, NULL);

    /* HDF5 itself no longer follows one, whoever asks. */
    cr_expect_gt(H5Lis_registered(H5L_TYPE_EXTERNAL), 0);
    zm__hdf5_lock();
    hid_t g = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    cr_assert_geq(g, 0);
    hid_t d = H5Dopen2(g, "/obs/n_counts", H5P_DEFAULT);
    cr_expect_lt(d, 0, "HDF5 followed an external link");
    if (d >= 0)
        H5Dclose(d);
    cr_expect_leq(H5Oexists_by_name(g, "/uns/s", H5P_DEFAULT), 0);
    char why[512];
    cr_expect_eq(zm__h5_outside(g, "/obs/_index", why, sizeof why), 0);
    cr_expect_eq(zm__h5_outside(g, "/no/such/path", why, sizeof why), 0);
    H5Fclose(g);
    zm__hdf5_unlock();
    zm_source_close(s);
    remove_work();
}

/* A required part behind an external link: refused, saying which and why. */
Test(confine, obs_behind_an_external_link_is_refused)
{
    make_work();
    char path[4096], other[4096];
    copy_fixture("h5ad/x-dense.h5ad", "x.h5ad", path, sizeof path);
    copy_fixture("h5ad/x-dense.h5ad", "other.h5ad", other, sizeof other);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert_geq(H5Ldelete(f, "/obs", H5P_DEFAULT), 0);
    cr_assert_geq(H5Lcreate_external(other, "/obs", f, "/obs", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);

    zm_source *s = (zm_source *)0x1;
    zm_err err;
    zm_err_clear(&err);
    cr_expect_lt(zm_source_open(path, NULL, &s, &err), 0);
    cr_expect_null(s);
    char needle[4200];
    snprintf(needle, sizeof needle, "/obs: an external link to %s:/obs is not followed", other);
    cr_expect(strstr(err.reason, needle) != NULL, "\"%s\" lacks \"%s\"", err.reason, needle);
    remove_work();
}

static hid_t refuse(const char *name, hid_t group, const void *value, size_t size, hid_t lapl,
                    hid_t dxpl)
{
    (void)name, (void)group, (void)value, (void)size, (void)lapl, (void)dxpl;
    return H5I_INVALID_HID;
}

Test(confine, user_defined_links_are_never_followed)
{
    make_work();
    char path[4096];
    copy_fixture("h5ad/x-dense.h5ad", "x.h5ad", path, sizeof path);
    const H5L_class_t class = {
        H5L_LINK_CLASS_T_VERS, (H5L_type_t)65, "test", NULL, NULL, NULL, refuse, NULL, NULL};
    cr_assert_geq(H5Lregister(&class), 0);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert_geq(H5Lcreate_ud(f, "/uns/mine", (H5L_type_t)65, "x", 1, H5P_DEFAULT, H5P_DEFAULT),
                  0);
    H5Fclose(f);
    cr_assert_geq(H5Lunregister((H5L_type_t)65), 0);

    zm_source *s = open_source(path);
    cr_expect_null(zm_source_find(s, "uns/mine"));
    expect_skipped(s, "/uns/mine", "a user-defined link (class 65) is not followed", NULL);
    zm_source_close(s);
    remove_work();
}

Test(confine, loom_and_10x_columns_behind_external_links)
{
    make_work();
    char loom[4096], tenx[4096], other[4096];
    copy_fixture("loom/full.loom", "x.loom", loom, sizeof loom);
    copy_fixture("10x/v3-two-feature-types.h5", "x.h5", tenx, sizeof tenx);
    in_work(other, sizeof other, "other.h5");
    write_other(other);
    hid_t f = H5Fopen(loom, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert_geq(H5Lcreate_external(other, "/col", f, "/col_attrs/evil", H5P_DEFAULT, H5P_DEFAULT),
                  0);
    cr_assert_geq(H5Lcreate_external(other, "/d", f, "/layers/evil", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
    f = H5Fopen(tenx, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert_geq(H5Ldelete(f, "/matrix/features/id", H5P_DEFAULT), 0);
    cr_assert_geq(
        H5Lcreate_external(other, "/col", f, "/matrix/features/id", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);

    zm_source *s = open_source(loom);
    cr_expect_null(zm_source_find(s, "obs/evil"));
    cr_expect_null(zm_source_find(s, "layers/evil"));
    expect_skipped(s, "/col_attrs/evil", "an external link to", ":/col is not followed");
    expect_skipped(s, "/layers/evil", "an external link to", ":/d is not followed");
    zm_source_close(s);
    s = open_source(tenx);
    cr_expect_null(zm_source_find(s, "var/gene_ids"));
    expect_skipped(s, "/matrix/features/id", "an external link to", ":/col is not followed");
    zm_source_close(s);
    remove_work();
}

/* HDF5_PLUGIN_PATH (read when HDF5 starts) names a directory the test made:
 * the path is the system's alone afterwards, and the LZ4 plugin from it
 * still decodes. */
Test(confine, plugin_path_is_the_systems)
{
    make_work();
    setenv("HDF5_PLUGIN_PATH", work, 1);
    char path[4096];
    copy_fixture("filters/unsupported-lz4.h5ad", "lz4.h5ad", path, sizeof path);
    zm_source *s = open_source(path);
    zm__hdf5_lock();
    unsigned count = 0;
    cr_expect_geq(H5PLsize(&count), 0);
    cr_expect_eq(count, 1, "%u plugin directories", count);
    char directory[4096] = "";
    H5PLget(0, directory, sizeof directory);
    zm__hdf5_unlock();
    cr_expect_str_eq(directory, zm__h5_plugin_directory());
    const zm_element *x = zm_source_find(s, "X");
    cr_assert_not_null(x);
    const zm_array *a = x->values;
    const zm_array_info *info = zm_array_describe(a);
    cr_expect_eq(info->data_path, ZM_PATH_HDF5, "lz4 is decoded by HDF5's plugin");
    uint64_t rows = info->shape[0];
    void *values = malloc(rows * zm_array_row_bytes(a) + 1);
    zm_err err;
    zm_err_clear(&err);
    cr_expect_eq(zm_array_read_rows(s, a, 0, rows, values, &err), 0, "%s", err.reason);
    free(values);
    zm_source_close(s);
    remove_work();
}

/* HDF5 closed and started again in the process (H5close): the next open
 * confines it again. */
Test(confine, confined_again_after_h5close)
{
    make_work();
    char path[4096], other[4096];
    copy_fixture("h5ad/x-dense.h5ad", "x.h5ad", path, sizeof path);
    in_work(other, sizeof other, "other.h5");
    write_other(other);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert_geq(H5Lcreate_external(other, "/d", f, "/uns/e", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
    zm_source_close(open_source(path));
    zm__hdf5_lock();
    H5close();
    /* HDF5's own class again: the link is followed. */
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/uns/e", H5P_DEFAULT);
    cr_expect_geq(d, 0, "the test does not reach another file without zarrmount's confinement");
    if (d >= 0)
        H5Dclose(d);
    H5Fclose(f);
    zm__hdf5_unlock();

    zm_source *s = open_source(path);
    expect_skipped(s, "/uns/e", "an external link to", ":/d is not followed");
    zm__hdf5_lock();
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    d = H5Dopen2(f, "/uns/e", H5P_DEFAULT);
    cr_expect_lt(d, 0, "HDF5 followed an external link after it started again");
    if (d >= 0)
        H5Dclose(d);
    H5Fclose(f);
    zm__hdf5_unlock();
    zm_source_close(s);
    remove_work();
}

/* A described dataset is closed (libhdf5 keeps ~13 KB for each open one)
 * and opened again by its path only where a call needs it: the very object
 * described, or EIO saying so. */
Test(confine, datasets_are_closed_once_described_and_reopened_as_themselves)
{
    char path[512];
    make_work();
    copy_fixture("h5ad/full-csr.h5ad", "x.h5ad", path, sizeof path);
    zm_source *s = open_source(path);
    zm__hdf5_lock();
    cr_expect_eq(H5Fget_obj_count(s->file, H5F_OBJ_DATASET), 0, "datasets left open");
    size_t reopened = 0;
    zm_array *first = NULL;
    for (size_t i = 0; i < s->array_count; i++) {
        zm_array *a = s->arrays[i];
        if (a->h5_path == NULL)
            continue;
        zm_err err;
        zm_err_clear(&err);
        hid_t d = zm__array_dataset(a, &err);
        cr_expect_geq(d, 0, "%s: %s", a->file_path, err.reason);
        if (d >= 0)
            H5Dclose(d);
        reopened++;
        if (first == NULL)
            first = a;
    }
    cr_assert_gt(reopened, 0);
    /* Another object than the one described (as if the path had changed). */
    zm_err err;
    zm_err_clear(&err);
    first->id.bytes[sizeof first->id.bytes - 1] ^= 1;
    cr_expect_lt(zm__array_dataset(first, &err), 0);
    cr_expect_eq(err.code, -EIO);
    cr_expect(strstr(err.reason, first->file_path) != NULL && strstr(err.reason, "another object"),
              "%s", err.reason);
    first->id.bytes[sizeof first->id.bytes - 1] ^= 1;
    cr_expect_eq(H5Fget_obj_count(s->file, H5F_OBJ_DATASET), 0, "datasets left open");
    zm__hdf5_unlock();
    zm_source_close(s);
    remove_work();
}
