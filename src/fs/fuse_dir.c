/* The FUSE daemon's directories: opendir, readdir and readdirplus, and
 * releasedir. A listing is taken from the tree once (at the first readdir of
 * an open directory, or kept in one slot when the kernel opens directories
 * without asking), so that readdir's offsets index a fixed list. */
#include "fs/fuse_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/log.h"

/* ---- Directories ------------------------------------------------------------------ */

void zm__dir_free(zm__dir *dir)
{
    if (dir == NULL)
        return;
    for (size_t i = 0; i < dir->count; i++)
        free(dir->entries[i].name);
    free(dir->entries);
    free(dir->path);
    free(dir);
}

static int zm__collect(void *context, const char *name, const zm_node *node)
{
    zm__dir *dir = context;
    if (dir->count == dir->capacity) {
        size_t capacity = dir->capacity ? dir->capacity * 2 : 16;
        zm__dir_entry *entries = realloc(dir->entries, capacity * sizeof *entries);
        if (entries == NULL)
            return -ENOMEM;
        dir->entries = entries;
        dir->capacity = capacity;
    }
    char *copy = strdup(name);
    if (copy == NULL)
        return -ENOMEM;
    dir->entries[dir->count].name = copy;
    dir->entries[dir->count].node = *node;
    dir->count++;
    return 0;
}

/* The number of path's parent, for "..": the root is its own parent. */
static uint64_t zm__parent_inode(zm__fs *fs, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return ZM__ROOT_INODE;
    size_t length = (size_t)(slash - path);
    char *parent = strndup(path, length);
    uint64_t inode = parent ? zm__inodes_number(fs->inodes, parent) : 0;
    free(parent);
    return inode;
}

void zm__op_opendir(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi)
{
    zm__fs *fs = zm__fs_of(req);
    zm__dir *dir = calloc(1, sizeof *dir);
    zm_node node;
    int rc = dir ? zm__inodes_get(fs->inodes, inode, &dir->path, &node) : -ENOMEM;
    if (rc == 0 && node.kind != ZM_NODE_DIRECTORY)
        rc = -ENOTDIR;
    if (rc != 0) {
        zm__reply_failure(fs, req, "opendir", dir && dir->path ? dir->path : "(unknown inode)", rc,
                          NULL);
        zm__dir_free(dir);
        return;
    }
    /* A listing that may change (sets/, while the set files change) must
     * not be kept: then the kernel is not told it may open directories
     * without asking, which would have it keep every listing. */
    int changing = zm__tree_changes(fs->tree, dir->path);
    if (atomic_load(&fs->no_opendir) && !zm__tree_changes(fs->tree, "sets")) {
        /* The kernel opens directories by itself from now on and keeps
         * their listings (FOPEN_CACHE_DIR is what it assumes). */
        ZM__TRACE(fs, req, "opendir %s: no opendir needed from now on", zm__shown(dir->path));
        zm__dir_free(dir);
        fuse_reply_err(req, ENOSYS);
        return;
    }
    dir->inode = inode;
    dir->parent_inode = zm__parent_inode(fs, dir->path);
    dir->handle.is_directory = 1;
    zm__handle_add(fs, &dir->handle);
    fi->fh = (uint64_t)(uintptr_t)dir;
    fi->cache_readdir = !changing; /* listings never change: the kernel may keep them */
    fi->keep_cache = !changing;    /* and keep them across opens */
    ZM__TRACE(fs, req, "opendir %s", zm__shown(dir->path));
    if (fuse_reply_open(req, fi) != 0) {
        zm__handle_remove(fs, &dir->handle);
        zm__dir_free(dir);
    }
}

/* Adds entry number `at` of dir (0 ".", 1 "..", then the listing) to buffer
 * if it fits in space: *used gets its size, 0 when it does not fit. With
 * plus, an entry with attributes counts as a lookup of its inode, given in
 * *looked_up (0 when there is none), and *unmade says whether that inode's
 * file is one whose bytes could not be made. -ENOMEM. */
static int zm__add_entry(zm__fs *fs, fuse_req_t req, const zm__dir *dir, size_t at, char *buffer,
                         size_t space, int plus, size_t *used, uint64_t *looked_up, int *unmade)
{
    *used = 0;
    *looked_up = 0;
    *unmade = 0;
    const zm_node dot_node = {.kind = ZM_NODE_DIRECTORY, .size = 0};
    const char *name = at == 0 ? "." : "..";
    const zm_node *node = &dot_node;
    uint64_t inode = at == 0 ? dir->inode : dir->parent_inode;
    char *path = NULL;
    if (at >= 2) {
        name = dir->entries[at - 2].name;
        node = &dir->entries[at - 2].node;
        if ((path = zm__join(dir->path, name)) == NULL)
            return -ENOMEM;
        inode = zm__inodes_number(fs->inodes, path);
    }
    off_t next = (off_t)at + 1;
    int rc = 0;
    if (!plus) {
        struct stat st = {.st_ino = inode, .st_mode = zm__type_bits(node->kind)};
        size_t need = fuse_add_direntry(req, buffer, space, name, &st, next);
        *used = need <= space ? need : 0;
    } else if (fuse_add_direntry_plus(req, NULL, 0, name, NULL, next) <= space) {
        /* "." and "..", and files whose size the listing does not know (it
         * would mean synthesizing them), go without attributes: the kernel
         * looks them up when it needs them. */
        struct fuse_entry_param entry;
        memset(&entry, 0, sizeof entry);
        entry.attr.st_ino = inode;
        entry.attr.st_mode = zm__type_bits(node->kind);
        /* The attributes the inode has if the kernel holds it already (a
         * file found unmade keeps its placeholder size), else the listing's. */
        zm_node held;
        if (path && node->size != ZM_SIZE_UNKNOWN &&
            (rc = zm__inodes_remember_held(fs->inodes, path, node, NULL, &inode, &held)) == 0) {
            zm__fill_entry(fs, inode, path, &held, &entry);
            *looked_up = inode;
            *unmade = held.error != 0;
        }
        if (rc == 0)
            *used = fuse_add_direntry_plus(req, buffer, space, name, &entry, next);
    }
    free(path);
    return rc;
}

static void zm__listing_put(zm__fs *fs, zm__dir *dir)
{
    pthread_mutex_lock(&fs->listing_lock);
    int last = --dir->refs == 0;
    pthread_mutex_unlock(&fs->listing_lock);
    if (last)
        zm__dir_free(dir);
}

/* The listing of a directory the kernel opened without us: the kept one if
 * it is of this inode, else a new one, kept in its place. NULL with *rc set
 * (replied) on failure. */
static zm__dir *zm__listing_get(zm__fs *fs, fuse_req_t req, fuse_ino_t inode, int *rc)
{
    pthread_mutex_lock(&fs->listing_lock);
    zm__dir *dir = fs->listing;
    if (dir && dir->inode == inode) {
        dir->refs++;
        pthread_mutex_unlock(&fs->listing_lock);
        return dir;
    }
    pthread_mutex_unlock(&fs->listing_lock);
    dir = calloc(1, sizeof *dir);
    zm_node node;
    *rc = dir ? zm__inodes_get(fs->inodes, inode, &dir->path, &node) : -ENOMEM;
    if (*rc == 0 && node.kind != ZM_NODE_DIRECTORY)
        *rc = -ENOTDIR;
    zm_err err;
    zm_err_clear(&err);
    if (*rc == 0 && (*rc = zm__tree_list(fs->tree, dir->path, zm__collect, dir, &err)) != 0) {
        zm__reply_failure(fs, req, "list", dir->path, *rc, &err);
        zm__dir_free(dir);
        return NULL;
    }
    if (*rc != 0) {
        zm__reply_failure(fs, req, "readdir", dir && dir->path ? dir->path : "(unknown inode)",
                          *rc, NULL);
        zm__dir_free(dir);
        return NULL;
    }
    dir->inode = inode;
    dir->parent_inode = zm__parent_inode(fs, dir->path);
    dir->listed = 1;
    dir->refs = 2; /* the slot and this readdir */
    ZM__TRACE(fs, req, "list %s: %zu entries", zm__shown(dir->path), dir->count);
    pthread_mutex_lock(&fs->listing_lock);
    zm__dir *old = fs->listing;
    fs->listing = dir;
    int free_old = old && --old->refs == 0;
    pthread_mutex_unlock(&fs->listing_lock);
    if (free_old)
        zm__dir_free(old);
    return dir;
}

static void zm__readdir(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                        struct fuse_file_info *fi, int plus)
{
    zm__fs *fs = zm__fs_of(req);
    zm__dir *dir = (zm__dir *)(uintptr_t)fi->fh;
    zm__dir *kept = NULL;
    if (dir == NULL) {
        int failed = 0;
        if ((kept = dir = zm__listing_get(fs, req, inode, &failed)) == NULL)
            return;
    }
    if (!dir->listed) {
        zm_err err;
        zm_err_clear(&err);
        int rc = zm__tree_list(fs->tree, dir->path, zm__collect, dir, &err);
        if (rc != 0) {
            /* A later readdir of this handle tries again from scratch. */
            for (size_t i = 0; i < dir->count; i++)
                free(dir->entries[i].name);
            dir->count = 0;
            zm__reply_failure(fs, req, "list", dir->path, rc, &err);
            return;
        }
        dir->listed = 1;
        ZM__TRACE(fs, req, "list %s: %zu entries", zm__shown(dir->path), dir->count);
    }
    char *buffer = malloc(size > 0 ? size : 1);
    /* The lookups this reply carries, to take back if it never arrives; and
     * those whose files were made, which may be pushed into the kernel's
     * page cache (one found unmade must never get pages of its own). */
    uint64_t *looked_up = calloc(size / 24 + 1, sizeof *looked_up);
    uint64_t *pushable = calloc(size / 24 + 1, sizeof *pushable);
    size_t used = 0;
    size_t count = 0, pushable_count = 0;
    int rc = buffer && looked_up && pushable ? 0 : -ENOMEM;
    for (size_t at = offset > 0 ? (size_t)offset : 0; rc == 0 && at < dir->count + 2; at++) {
        size_t added;
        int unmade;
        rc = zm__add_entry(fs, req, dir, at, buffer + used, size - used, plus, &added,
                           &looked_up[count], &unmade);
        if (rc != 0 || added == 0)
            break;
        used += added;
        if (looked_up[count] != 0 && !unmade)
            pushable[pushable_count++] = looked_up[count];
        count += looked_up[count] != 0;
    }
    if (rc != 0 && used == 0) {
        zm__reply_failure(fs, req, plus ? "readdirplus" : "readdir", dir->path, rc, NULL);
    } else {
        ZM__TRACE(fs, req, "%s %s from %lld: %zu bytes", plus ? "readdirplus" : "readdir",
                  zm__shown(dir->path), (long long)offset, used);
        /* Told the pusher before the reply: once the reply is out, the
         * reader may read the first file at once, and that read must find
         * the listing. If the reply never arrives, what it pushes for
         * those inodes is refused by the kernel (ENOENT) or is the bytes
         * of whatever file has the inode then: harmless either way. */
        if (plus)
            zm__pusher_listed(fs->pusher, dir->inode, offset, pushable, pushable_count);
        if (fuse_reply_buf(req, buffer, used) != 0)
            for (size_t i = 0; i < count; i++)
                zm__forget(fs, looked_up[i], 1);
    }
    free(pushable);
    free(looked_up);
    free(buffer);
    if (kept)
        zm__listing_put(fs, kept);
}

void zm__op_readdir(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                           struct fuse_file_info *fi)
{
    zm__readdir(req, inode, size, offset, fi, 0);
}

void zm__op_readdirplus(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                               struct fuse_file_info *fi)
{
    zm__readdir(req, inode, size, offset, fi, 1);
}

void zm__op_releasedir(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi)
{
    (void)inode;
    zm__fs *fs = zm__fs_of(req);
    zm__dir *dir = (zm__dir *)(uintptr_t)fi->fh;
    if (dir != NULL) { /* none when the kernel opened without us */
        zm__handle_remove(fs, &dir->handle);
        zm__dir_free(dir);
    }
    fuse_reply_err(req, 0);
}
