/* -o index_dtype=int32's bound (zm_view_index_int32_check, docs/mount.md
 * "Options"): a sparse matrix fits while its minor axis is at most 2^31 long
 * (its indices at most INT32_MAX) and it stores at most INT32_MAX entries
 * (every view's indptr at most that); one past either is -EOVERFLOW naming
 * the element. The claims are set on full-csr.h5ad's model in memory (a file
 * storing 2^31 entries is 8 GiB); mount-index-dtype refuses a file whose
 * declared shape cannot fit. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/source.h"
#include "zarrmount/view.h"

static zm_source *open_source(void)
{
    char path[4096];
    const char *root = getenv("ZM_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/fixtures/sources/h5ad/full-csr.h5ad", root ? root : ".");
    zm_err err;
    zm_err_clear(&err);
    zm_source *source = NULL;
    cr_assert_eq(zm_source_open(path, NULL, &source, &err), 0, "%s", err.reason);
    return source;
}

/* X of the source, writable: the test changes what it claims. */
static zm_element *x_of(zm_source *source)
{
    const zm_element *root = zm_source_root(source);
    for (size_t i = 0; i < root->child_count; i++)
        if (strcmp(root->children[i]->name, "X") == 0) {
            cr_assert_eq(root->children[i]->kind, ZM_ELEMENT_SPARSE);
            cr_assert_eq(root->children[i]->sparse_format, ZM_SPARSE_CSR);
            return root->children[i];
        }
    cr_assert_fail("full-csr.h5ad has no X");
    return NULL;
}

Test(index_dtype, the_fixture_fits)
{
    zm_source *source = open_source();
    zm_err err;
    zm_err_clear(&err);
    cr_expect_eq(zm_view_index_int32_check(source, &err), 0, "%s", err.reason);
    zm_source_close(source);
}

Test(index_dtype, columns_up_to_2_31)
{
    zm_source *source = open_source();
    zm_element *x = x_of(source);
    uint64_t columns = x->shape[1];
    zm_err err;
    zm_err_clear(&err);
    x->shape[1] = (uint64_t)INT32_MAX + 1; /* indices up to INT32_MAX */
    cr_expect_eq(zm_view_index_int32_check(source, &err), 0, "%s", err.reason);
    x->shape[1] = (uint64_t)INT32_MAX + 2;
    cr_expect_eq(zm_view_index_int32_check(source, &err), -EOVERFLOW);
    cr_expect(strstr(err.reason, "X: index_dtype=int32: its 2147483649 columns") == err.reason,
              "%s", err.reason);
    x->shape[1] = columns;
    zm_source_close(source);
}

Test(index_dtype, entries_up_to_int32_max)
{
    zm_source *source = open_source();
    zm_element *x = x_of(source);
    zm_array_info *indices = (zm_array_info *)zm_array_describe(x->indices);
    uint64_t stored = indices->shape[0];
    zm_err err;
    zm_err_clear(&err);
    indices->shape[0] = INT32_MAX;
    cr_expect_eq(zm_view_index_int32_check(source, &err), 0, "%s", err.reason);
    indices->shape[0] = (uint64_t)INT32_MAX + 1;
    cr_expect_eq(zm_view_index_int32_check(source, &err), -EOVERFLOW);
    cr_expect(strstr(err.reason, "X: index_dtype=int32: its 2147483648 entries") == err.reason,
              "%s", err.reason);
    indices->shape[0] = stored;
    zm_source_close(source);
}
