/* Tests for the mounted tree (src/tree/) over a fixture source, without
 * FUSE: a listed name always exists; explain says what a path is.
 *
 * Cases found by tests/fuzz/fuzz_path.c stay here as regressions.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/tree.h"

static zm_tree *tree;

static void open_tree(void)
{
    const char *fixtures = getenv("ZM_FIXTURES_DIR");
    char source[PATH_MAX];
    snprintf(source, sizeof source, "%s/sources/h5ad/full-csr.h5ad",
             fixtures && fixtures[0] ? fixtures : "fixtures");
    zm_tree_options options = {
        .source = source, .threads = 1, .cache_dir = "none", .ahead_idle_seconds = 0};
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm__tree_open(&options, &tree, &err), 0, "%s: %s", source, err.reason);
}

static void close_tree(void)
{
    zm__tree_close(tree);
    tree = NULL;
}

typedef struct names {
    char text[4096]; /* "a b c " */
    size_t count;
} names;

static int collect(void *context, const char *name, const zm_node *node)
{
    (void)node;
    names *n = context;
    size_t used = strlen(n->text);
    snprintf(n->text + used, sizeof n->text - used, "%s ", name);
    n->count++;
    return 0;
}

/* Lists a directory; every name in it must exist. */
static void expect_listed_names_exist(const char *path, names *listed)
{
    memset(listed, 0, sizeof *listed);
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm__tree_list(tree, path, collect, listed, &err), 0, "%s: %s", path, err.reason);
    char copy[sizeof listed->text];
    memcpy(copy, listed->text, sizeof copy);
    for (char *name = strtok(copy, " "); name != NULL; name = strtok(NULL, " ")) {
        char child[PATH_MAX];
        snprintf(child, sizeof child, "%s/%s", path, name);
        zm_node node;
        zm_err_clear(&err);
        cr_expect_eq(zm__tree_lookup(tree, child, &node, &err), 0,
                     "%s is listed but does not exist: %s", child, err.reason);
    }
}

/* Found by fuzz_path: a seed directory of a stratified view with a minimum
 * listed every size of the ladder (1, 10, 60 cells), but the kernel refuses
 * a size below what the minimum takes (here min(4, stratum) over 6 strata:
 * 23 cells), so `ls` showed k=1 and k=10 and looking them up said ENOENT. */
Test(tree, seed_listing_leaves_out_sizes_the_minimum_refuses, .init = open_tree, .fini = close_tree)
{
    names listed;
    expect_listed_names_exist("stratified/cell_type/balanced/min=4/seed1", &listed);
    cr_expect_str_eq(listed.text, "k=60 ");
    zm_node node;
    zm_err err;
    zm_err_clear(&err);
    cr_expect_eq(
        zm__tree_lookup(tree, "stratified/cell_type/balanced/min=4/seed1/k=10", &node, &err),
        -ENOENT);
    cr_expect(strstr(err.reason, "minimum") != NULL, "%s", err.reason);
}

Test(tree, every_seed_listing_names_views_that_exist, .init = open_tree, .fini = close_tree)
{
    static const char *const fields[] = {"cell_type", "quality", "bool", "label_utf8"};
    static const char *const allocations[] = {"balanced", "proportional"};
    static const unsigned minimums[] = {0, 1, 2, 4, 11, 60};
    for (size_t f = 0; f < 4; f++)
        for (size_t a = 0; a < 2; a++)
            for (size_t m = 0; m < 6; m++) {
                char path[256];
                snprintf(path, sizeof path, "stratified/%s/%s/min=%u/seed0", fields[f],
                         allocations[a], minimums[m]);
                names listed;
                expect_listed_names_exist(path, &listed);
                cr_expect_gt(listed.count, 0, "%s lists nothing", path);
            }
    names listed;
    expect_listed_names_exist("uniform/seed0", &listed);
    cr_expect_str_eq(listed.text, "k=1 k=10 k=60 ");
}

/* Found by fuzz_path: explain called .zarrmount's files directories, with no
 * "holds" for stats.json (the text form printed it through a NULL %s) and a
 * "method" of "full". */
Test(tree, explain_says_mount_files_are_files, .init = open_tree, .fini = close_tree)
{
    static const char *const paths[] = {".zarrmount/info.json", ".zarrmount/stats.json",
                                        ".zarrmount", "uniform/seed0"};
    for (size_t i = 0; i < 4; i++) {
        json_t *explained = NULL;
        zm_err err;
        zm_err_clear(&err);
        cr_assert_eq(zm__tree_explain(tree, paths[i], &explained, &err), 0, "%s: %s", paths[i],
                     err.reason);
        const char *kind = json_string_value(json_object_get(explained, "kind"));
        cr_expect_str_eq(kind ? kind : "(none)", i < 2 ? "file" : "directory", "%s", paths[i]);
        cr_expect(json_is_string(json_object_get(explained, "holds")), "%s holds nothing",
                  paths[i]);
        if (i < 3)
            cr_expect_null(json_object_get(explained, "method"), "%s names a method", paths[i]);
        json_decref(explained);
    }
}

static zm_tree *open_source(const char *relative)
{
    const char *fixtures = getenv("ZM_FIXTURES_DIR");
    char source[PATH_MAX];
    snprintf(source, sizeof source, "%s/sources/%s",
             fixtures && fixtures[0] ? fixtures : "fixtures", relative);
    zm_tree_options options = {
        .source = source, .threads = 1, .cache_dir = "none", .ahead_idle_seconds = 0};
    zm_tree *opened = NULL;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm__tree_open(&options, &opened, &err), 0, "%s: %s", source, err.reason);
    return opened;
}

/* A chunk whose bytes cannot be made (codes outside their categories) is
 * found, with a placeholder size and the reason, so that zarr-python 2 does
 * not take it for a missing chunk and fill it; reading it fails. The
 * array's documents are made and found as ever. */
Test(tree, a_chunk_that_cannot_be_made_is_found_with_its_failure)
{
    zm_tree *damaged = open_source("bad/categorical-code-out-of-range.h5ad");
    zm_node node;
    zm_err err;
    zm_err_clear(&err);
    cr_expect_eq(zm__tree_lookup(damaged, "file/obs/cluster/codes/0", &node, &err), 0, "%s",
                 err.reason);
    cr_expect_eq(node.kind, ZM_NODE_FILE);
    cr_expect_eq(node.error, -EIO);
    cr_expect_eq(node.size, ZM_SIZE_UNMADE);
    cr_expect(strstr(err.reason, "obs/cluster") && strstr(err.reason, "outside"), "%s", err.reason);
    uint8_t buffer[64];
    size_t done = 0;
    zm_err_clear(&err);
    cr_expect_eq(
        zm__tree_read(damaged, "file/obs/cluster/codes/0", 0, sizeof buffer, buffer, &done, &err),
        -EIO);
    cr_expect_eq(done, 0);
    const char *documents[] = {"file/obs/cluster/codes/.zarray", "file/obs/cluster/.zattrs",
                               "file/.zmetadata"};
    for (size_t i = 0; i < 3; i++) {
        zm_err_clear(&err);
        cr_expect_eq(zm__tree_lookup(damaged, documents[i], &node, &err), 0, "%s: %s", documents[i],
                     err.reason);
        cr_expect(node.error == 0 && node.size > 0 && node.size != ZM_SIZE_UNMADE, "%s",
                  documents[i]);
    }
    zm_err_clear(&err);
    cr_expect_eq(zm__tree_lookup(damaged, "file/obs/cluster/codes/1", &node, &err), -ENOENT,
                 "past the chunk grid: no such file");
    zm__tree_close(damaged);
}

/* A damaged indptr: file/, which lays X out when X is first used, is looked
 * up, but X's metadata (its documents are made when looked up) fails with
 * EIO, naming the element, and again when asked again; the view's other
 * documents and the mount's other directories are found. (A subsample
 * keeping a damaged cell fails its own lookup: test_source_bad.) */
Test(tree, a_matrix_that_cannot_be_laid_out_fails_its_metadata)
{
    zm_tree *damaged = open_source("bad/csr-indptr-not-monotone.h5ad");
    zm_node node;
    zm_err err;
    zm_err_clear(&err);
    cr_expect_eq(zm__tree_lookup(damaged, "file", &node, &err), 0, "%s", err.reason);
    const char *documents[] = {"file/X/indptr/.zarray", "file/X/data/.zarray", "file/.zmetadata",
                               "file/X/indptr/.zarray"};
    for (size_t i = 0; i < 4; i++) {
        zm_err_clear(&err);
        int rc = zm__tree_lookup(damaged, documents[i], &node, &err);
        cr_expect(rc == 0 && node.error == -EIO && node.size == ZM_SIZE_UNMADE, "%s: %d %d",
                  documents[i], rc, node.error);
        cr_expect(strstr(err.reason, "indptr") != NULL, "%s: %s", documents[i], err.reason);
    }
    zm_err_clear(&err);
    cr_expect_eq(zm__tree_lookup(damaged, "file/X/.zattrs", &node, &err), 0, "%s", err.reason);
    cr_expect(node.error == 0 && node.size > 0, "file/X/.zattrs");
    zm_err_clear(&err);
    cr_expect_eq(zm__tree_lookup(damaged, "uniform/seed0", &node, &err), 0, "%s", err.reason);
    zm__tree_close(damaged);
}
