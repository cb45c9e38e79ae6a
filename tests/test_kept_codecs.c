/* The disk cache and the codec libraries (src/tree/files.c over src/cache/disk.c):
 * a chunk kept on disk by one build is served again by a build linked to the
 * same codec libraries, and never by one linked to another version of a
 * library that makes that codec's bytes: there it misses and the chunk is
 * made afresh (and filed apart), so a mount never serves one library's chunks
 * beside another's. codec=none is made by no library, so its entries stay
 * shared. .zarrmount/info.json lists the libraries as the build runs them.
 *
 * "Another build" is this one told to report another version
 * (zm__codec_library_pretend, internal to the zarr module, for tests only):
 * the versions are the one thing that tells builds apart to the cache. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "zarrmount/tree.h"
#include "zarr/zarr_internal.h"
#include "zarrmount/zarr.h"

/* A walked view (its per-cell arrays are gathered whole, so their chunks are
 * kept on disk), in small chunks: many entries. */
#define VIEW "uniform/seed3/k=40"

static char cache_root[64];

static void make_cache_root(void)
{
    snprintf(cache_root, sizeof cache_root, "/tmp/zm-kept-codecs-XXXXXX");
    cr_assert_not_null(mkdtemp(cache_root));
}

static void remove_cache_root(void)
{
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", cache_root);
    cr_expect_eq(system(command), 0);
}

static zm_tree *open_tree(const char *codec)
{
    const char *fixtures = getenv("ZM_FIXTURES_DIR");
    char source[PATH_MAX];
    snprintf(source, sizeof source, "%s/sources/h5ad/full-csr.h5ad",
             fixtures && fixtures[0] ? fixtures : "fixtures");
    zm_tree_options options = {.source = source,
                               .codec = codec,
                               .chunk_bytes = 256,
                               .threads = 1,
                               .cache_dir = cache_root,
                               .ahead_idle_seconds = 0};
    zm_tree *tree = NULL;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm__tree_open(&options, &tree, &err), 0, "%s: %s", source, err.reason);
    return tree;
}

/* A whole file's bytes (malloc'd; *size of them). */
static uint8_t *read_whole(zm_tree *tree, const char *path, size_t *size)
{
    zm_node node;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm__tree_lookup(tree, path, &node, &err), 0, "%s: %s", path, err.reason);
    size_t capacity = 65536, used = 0;
    uint8_t *bytes = malloc(capacity);
    cr_assert_not_null(bytes);
    for (;;) {
        if (capacity - used < 65536) {
            capacity *= 2;
            bytes = realloc(bytes, capacity);
            cr_assert_not_null(bytes);
        }
        size_t done = 0;
        zm_err_clear(&err);
        cr_assert_eq(zm__tree_read(tree, path, used, 65536, bytes + used, &done, &err), 0, "%s: %s",
                     path, err.reason);
        used += done;
        if (done < 65536)
            break;
    }
    *size = used;
    return bytes;
}

/* A directory's entries, each "d", "f" or "l" then its name. */
typedef struct listing {
    char (*names)[256];
    size_t count, capacity;
} listing;

static int collect(void *context, const char *name, const zm_node *node)
{
    listing *l = context;
    if (l->count == l->capacity) {
        l->capacity = l->capacity ? 2 * l->capacity : 64;
        l->names = realloc(l->names, l->capacity * sizeof *l->names);
        cr_assert_not_null(l->names);
    }
    snprintf(l->names[l->count], sizeof l->names[0], "%c%s",
             node->kind == ZM_NODE_DIRECTORY ? 'd'
             : node->kind == ZM_NODE_FILE    ? 'f'
                                             : 'l',
             name);
    l->count++;
    return 0;
}

/* Reads every file under path, as a reader copying it would, folding each
 * one's path and bytes into *digest (FNV-1a); *files counts them. */
static void read_all(zm_tree *tree, const char *path, uint64_t *digest, size_t *files)
{
    listing l = {0};
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm__tree_list(tree, path, collect, &l, &err), 0, "%s: %s", path, err.reason);
    for (size_t i = 0; i < l.count; i++) {
        char child[PATH_MAX];
        snprintf(child, sizeof child, "%s/%s", path, l.names[i] + 1);
        if (l.names[i][0] == 'd') {
            read_all(tree, child, digest, files);
        } else if (l.names[i][0] == 'f') {
            size_t size = 0;
            uint8_t *bytes = read_whole(tree, child, &size);
            for (const char *c = child; *c; c++)
                *digest = (*digest ^ (uint8_t)*c) * 1099511628211ull;
            for (size_t b = 0; b < size; b++)
                *digest = (*digest ^ bytes[b]) * 1099511628211ull;
            free(bytes);
            (*files)++;
        }
    }
    free(l.names);
}

/* The JSON of a .zarrmount file. */
static json_t *mount_file(zm_tree *tree, const char *path)
{
    size_t size = 0;
    uint8_t *bytes = read_whole(tree, path, &size);
    json_error_t error;
    json_t *document = json_loadb((const char *)bytes, size, 0, &error);
    cr_assert_not_null(document, "%s: %s", path, error.text);
    free(bytes);
    return document;
}

/* blosc with zstd (the default before issue 25 made it lz4). */
#define BLOSC_ZSTD "blosc:zstd:1:bitshuffle"

typedef struct visit {
    uint64_t digest;
    size_t files;
    json_int_t hits, misses;
} visit;

/* Mounts (a tree over the cache), reads the whole view, notes what the disk
 * cache did, and unmounts (which files everything made). */
static visit mount_and_read(const char *codec)
{
    zm_tree *tree = open_tree(codec);
    visit v = {.digest = 1469598103934665603ull};
    read_all(tree, VIEW, &v.digest, &v.files);
    json_t *stats = mount_file(tree, ".zarrmount/stats.json");
    json_t *disk = json_object_get(stats, "diskCache");
    cr_assert(json_is_object(disk), "stats.json has no diskCache");
    v.hits = json_integer_value(json_object_get(disk, "hits"));
    v.misses = json_integer_value(json_object_get(disk, "misses"));
    json_decref(stats);
    zm__tree_close(tree);
    return v;
}

/* Directories of spaces (sources, and the libraries their chunks came from)
 * in the cache's current format. */
static int spaces(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/v2", cache_root);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s: no format directory", path);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        count += e->d_name[0] != '.';
    closedir(d);
    return count;
}

Test(kept_codecs, another_library_version_is_never_served, .init = make_cache_root,
     .fini = remove_cache_root)
{
    /* blosc with zstd: its bytes are blosc's and zstd's. */
    visit first = mount_and_read(BLOSC_ZSTD);
    cr_assert_gt(first.misses, 10, "the walk keeps its chunks: %lld misses",
                 (long long)first.misses);
    cr_expect_eq(first.hits, 0);
    cr_expect_eq(spaces(), 1);

    /* The same build: every kept chunk is served from the disk. */
    visit same = mount_and_read(BLOSC_ZSTD);
    cr_expect_eq(same.hits, first.misses, "same libraries: %lld hits of %lld kept",
                 (long long)same.hits, (long long)first.misses);
    cr_expect_eq(same.misses, 0);
    cr_expect_eq(same.digest, first.digest);

    /* A build linked to another zstd: nothing kept is served, every chunk
     * is made afresh and filed apart. */
    cr_assert_eq(zm__codec_library_pretend("zstd", "1.5.999"), 0);
    visit other = mount_and_read(BLOSC_ZSTD);
    cr_expect_eq(other.hits, 0, "another zstd: %lld chunks of the old one served",
                 (long long)other.hits);
    cr_expect_eq(other.misses, first.misses);
    cr_expect_eq(other.digest, first.digest, "the same values, made again");
    cr_expect_eq(spaces(), 2, "filed apart from the old entries");
    /* ... and once made, that build finds its own. */
    visit other_again = mount_and_read(BLOSC_ZSTD);
    cr_expect_eq(other_again.hits, first.misses);
    cr_expect_eq(other_again.misses, 0);

    /* Another blosc: the same. */
    cr_assert_eq(zm__codec_library_pretend("zstd", NULL), 0);
    cr_assert_eq(zm__codec_library_pretend("blosc", "1.99.0"), 0);
    visit other_blosc = mount_and_read(BLOSC_ZSTD);
    cr_expect_eq(other_blosc.hits, 0);
    cr_expect_eq(other_blosc.misses, first.misses);

    /* Another lz4 makes none of blosc:zstd's bytes: its entries are served. */
    cr_assert_eq(zm__codec_library_pretend("blosc", NULL), 0);
    cr_assert_eq(zm__codec_library_pretend("lz4", "9.0.0"), 0);
    visit other_lz4 = mount_and_read(BLOSC_ZSTD);
    cr_expect_eq(other_lz4.hits, first.misses);
    cr_expect_eq(other_lz4.misses, 0);
    cr_assert_eq(zm__codec_library_pretend("lz4", NULL), 0);

    /* Back on the first build, its entries are still there and served. */
    visit back = mount_and_read(BLOSC_ZSTD);
    cr_expect_eq(back.hits, first.misses);
    cr_expect_eq(back.misses, 0);
    cr_expect_eq(back.digest, first.digest);
}

/* The default codec, blosc:lz4:5:bitshuffle: its bytes are blosc's and lz4's,
 * none of zstd's. */
Test(kept_codecs, the_default_is_keyed_by_blosc_and_lz4, .init = make_cache_root,
     .fini = remove_cache_root)
{
    visit first = mount_and_read(NULL);
    cr_assert_gt(first.misses, 10, "the walk keeps its chunks: %lld misses",
                 (long long)first.misses);
    cr_assert_eq(zm__codec_library_pretend("zstd", "1.5.999"), 0);
    visit other_zstd = mount_and_read(NULL);
    cr_expect_eq(other_zstd.hits, first.misses, "the default makes no zstd bytes");
    cr_assert_eq(zm__codec_library_pretend("zstd", NULL), 0);
    cr_assert_eq(zm__codec_library_pretend("lz4", "9.0.0"), 0);
    visit other_lz4 = mount_and_read(NULL);
    cr_expect_eq(other_lz4.hits, 0, "another lz4: %lld chunks of the old one served",
                 (long long)other_lz4.hits);
    cr_expect_eq(other_lz4.misses, first.misses);
    cr_expect_eq(other_lz4.digest, first.digest);
    cr_assert_eq(zm__codec_library_pretend("lz4", NULL), 0);
}

/* zstd:3 calls libzstd alone: another zstd is never served. */
Test(kept_codecs, zstd_alone_is_keyed_by_zstd, .init = make_cache_root, .fini = remove_cache_root)
{
    visit first = mount_and_read("zstd:3");
    cr_assert_gt(first.misses, 10);
    cr_assert_eq(zm__codec_library_pretend("blosc", "1.99.0"), 0);
    visit other_blosc = mount_and_read("zstd:3");
    cr_expect_eq(other_blosc.hits, first.misses, "zstd:3 makes no blosc bytes");
    cr_assert_eq(zm__codec_library_pretend("blosc", NULL), 0);
    cr_assert_eq(zm__codec_library_pretend("zstd", "1.5.999"), 0);
    visit other = mount_and_read("zstd:3");
    cr_expect_eq(other.hits, 0);
    cr_expect_eq(other.misses, first.misses);
    cr_expect_eq(other.digest, first.digest);
}

/* codec=none: a walk's chunks are the values as they lie in the walk,
 * served from there and never kept on disk (a kept one would be as large as
 * the source's bytes it was cut from): another mount, whatever libraries it
 * links, looks nothing up and makes the same bytes. */
Test(kept_codecs, uncompressed_walks_are_not_kept, .init = make_cache_root,
     .fini = remove_cache_root)
{
    visit compressed = mount_and_read(NULL);
    cr_assert_gt(compressed.misses, 10, "the view has walked arrays");
    visit first = mount_and_read("none");
    cr_expect_eq(first.files, compressed.files);
    /* Only per-cell strings are kept (not lent from a walk: read whole
     * through HDF5 on one core), values as they are, which no codec library
     * makes: every build shares them. */
    cr_expect_lt(first.misses, compressed.misses, "%lld of %lld chunks kept with codec none",
                 (long long)first.misses, (long long)compressed.misses);
    cr_expect_eq(first.hits, 0);
    cr_assert_eq(zm__codec_library_pretend("zstd", "1.5.999"), 0);
    cr_assert_eq(zm__codec_library_pretend("blosc", "1.99.0"), 0);
    visit other = mount_and_read("none");
    cr_expect_eq(other.hits, first.misses);
    cr_expect_eq(other.misses, 0);
    cr_expect_eq(other.digest, first.digest);
}

/* info.json lists the libraries and versions the build runs (the same list
 * the disk cache files by): zstd's as libzstd reports its number, and
 * another build's as it would say. */
Test(kept_codecs, info_json_lists_the_codec_libraries, .init = make_cache_root,
     .fini = remove_cache_root)
{
    zm_tree *tree = open_tree(NULL);
    json_t *info = mount_file(tree, ".zarrmount/info.json");
    zm__tree_close(tree);
    json_t *libraries = json_object_get(info, "codecLibraries");
    cr_assert(json_is_object(libraries), "info.json has no codecLibraries object");
    size_t count = 0;
    const zm_codec_library *list = zm_codec_libraries(&count);
    cr_expect_eq(json_object_size(libraries), count);
    for (size_t i = 0; i < count; i++) {
        const char *said = json_string_value(json_object_get(libraries, list[i].name));
        cr_expect_str_eq(said ? said : "(missing)", list[i].version, "%s", list[i].name);
    }
    char zstd[32];
    unsigned n = ZSTD_versionNumber();
    snprintf(zstd, sizeof zstd, "%u.%u.%u", n / 10000, n / 100 % 100, n % 100);
    const char *said = json_string_value(json_object_get(libraries, "zstd"));
    cr_expect_str_eq(said ? said : "(missing)", zstd);
    json_decref(info);

    cr_assert_eq(zm__codec_library_pretend("zstd", "1.5.999"), 0);
    tree = open_tree(NULL);
    info = mount_file(tree, ".zarrmount/info.json");
    zm__tree_close(tree);
    said = json_string_value(json_object_get(json_object_get(info, "codecLibraries"), "zstd"));
    cr_expect_str_eq(said ? said : "(missing)", "1.5.999");
    json_decref(info);
}
