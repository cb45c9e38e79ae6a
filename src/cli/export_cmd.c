/* `zarrmount export SOURCE VIEW DIRECTORY`: writes one view of the tree as a
 * Zarr directory store, file by file, exactly the bytes a mount serves (what
 * `cp -r MNT/VIEW DIRECTORY` gives), without FUSE. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zarrmount/cli.h"
#include "zarrmount/tree.h"

struct walk {
    zm_tree *tree;
    const char *tree_path;
    const char *disk_path;
    zm_err *err;
    uint64_t files, bytes;
    /* A file's bytes on their way (malloc'd: as thread-local storage, every
     * thread of the daemon, which links this file, had its own MiB). */
    uint8_t *buffer;
    size_t buffer_size;
};

static int copy_file(struct walk *w, const char *tree_path, const char *disk_path)
{
    int fd = open(disk_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return zm_err_set(w->err, -errno, "%s: cannot create: %s", disk_path, strerror(errno));
    uint8_t *buffer = w->buffer;
    uint64_t offset = 0;
    int rc = 0;
    for (;;) {
        size_t done = 0;
        rc = zm__tree_read(w->tree, tree_path, offset, w->buffer_size, buffer, &done, w->err);
        if (rc != 0 || done == 0)
            break;
        if (write(fd, buffer, done) != (ssize_t)done) {
            rc = zm_err_set(w->err, -errno, "%s: cannot write: %s", disk_path, strerror(errno));
            break;
        }
        offset += done;
    }
    if (close(fd) != 0 && rc == 0)
        rc = zm_err_set(w->err, -errno, "%s: cannot write: %s", disk_path, strerror(errno));
    w->files++;
    w->bytes += offset;
    return rc;
}

static int walk_directory(struct walk *w, const char *tree_path, const char *disk_path);

struct entry_context {
    struct walk *w;
    const char *tree_path, *disk_path;
};

static int visit(void *context, const char *name, const zm_node *node)
{
    struct entry_context *c = context;
    size_t tn = strlen(c->tree_path) + strlen(name) + 2, dn = strlen(c->disk_path) + strlen(name) + 2;
    char *tree_path = malloc(tn), *disk_path = malloc(dn);
    if (tree_path == NULL || disk_path == NULL) {
        free(tree_path);
        free(disk_path);
        return zm_err_set(c->w->err, -ENOMEM, "out of memory");
    }
    snprintf(tree_path, tn, "%s%s%s", c->tree_path, *c->tree_path ? "/" : "", name);
    snprintf(disk_path, dn, "%s/%s", c->disk_path, name);
    int rc = node->kind == ZM_NODE_DIRECTORY ? walk_directory(c->w, tree_path, disk_path)
                                             : copy_file(c->w, tree_path, disk_path);
    free(tree_path);
    free(disk_path);
    return rc;
}

static int walk_directory(struct walk *w, const char *tree_path, const char *disk_path)
{
    if (mkdir(disk_path, 0755) != 0 && errno != EEXIST)
        return zm_err_set(w->err, -errno, "%s: cannot create: %s", disk_path, strerror(errno));
    struct entry_context c = {w, tree_path, disk_path};
    return zm__tree_list(w->tree, tree_path, visit, &c, w->err);
}

int zm_export_main(const char *source, const char *view, const char *directory, const char *codec,
                 unsigned threads, uint64_t chunk_bytes, int layout_anndata, int index_int32)
{
    /* A one-shot copy keeps nothing on disk. */
    zm_tree_options options = {.source = source, .codec = codec, .threads = threads,
                               .chunk_bytes = chunk_bytes, .cache_dir = "none",
                               .layout_anndata = layout_anndata, .index_int32 = index_int32};
    zm_tree *tree;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_open(&options, &tree, &err);
    if (rc != 0) {
        fprintf(stderr, "zarrmount export: %s\n", err.reason);
        return 2;
    }
    /* The view must be a directory of the tree. */
    zm_node node;
    rc = zm__tree_lookup(tree, view, &node, &err);
    if (rc == 0 && node.kind != ZM_NODE_DIRECTORY)
        rc = zm_err_set(&err, -ENOTDIR, "%s: not a view directory", view);
    struct walk w = {tree, view, directory, &err, 0, 0, malloc(1 << 20), 1 << 20};
    if (rc == 0 && w.buffer == NULL)
        rc = zm_err_set(&err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = walk_directory(&w, view, directory);
    free(w.buffer);
    zm__tree_close(tree);
    if (rc != 0) {
        fprintf(stderr, "zarrmount export: %s\n", err.reason);
        return rc == -ENOENT || rc == -EINVAL || rc == -ENOTDIR ? 2 : 1;
    }
    fprintf(stderr, "zarrmount export: %s/%s: %llu files, %llu bytes in %s\n", source, view,
            (unsigned long long)w.files, (unsigned long long)w.bytes, directory);
    return 0;
}
