/* Internal to the fs module: what the FUSE operations (fuse.c, fuse_dir.c)
 * and the mount's life (mount.c) share: the mounted file system's state,
 * its open files and directories, and the helpers every operation uses. */
#ifndef ZARRMOUNT_FS_FUSE_INTERNAL_H
#define ZARRMOUNT_FS_FUSE_INTERNAL_H

#define FUSE_USE_VERSION 312

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include <fuse_lowlevel.h>

#include "fs/inodes.h"
#include "fs/options.h"
#include "fs/passthrough.h"
#include "fs/push.h"
#include "zarrmount/tree.h"

/* Every open file and directory is on one list, so that those the kernel
 * never releases (the connection ends while they are open: SIGTERM during
 * reads) are freed when the session is over. */
typedef struct zm__handle {
    struct zm__handle *previous;
    struct zm__handle *next;
    int is_directory;
} zm__handle;

typedef struct zm__fs {
    zm__fs_config config;
    zm_tree *tree;
    zm__inodes *inodes;
    mode_t file_mode;      /* permission bits of files */
    mode_t directory_mode; /* and of directories */
    pthread_mutex_t handles_lock;
    zm__handle handles; /* the list's head */
    /* The kernel can do without open and release (FUSE_NO_OPEN_SUPPORT):
     * the first open answers ENOSYS and no file open costs a round trip
     * again; reads then come without a handle and find their path by inode. */
    atomic_int no_open;
    atomic_int readahead_widened; /* zm__widen_readahead was tried */
    /* Likewise for directories (FUSE_NO_OPENDIR_SUPPORT): readdir then
     * comes without a handle, and the last listing is kept here (its refs
     * count this slot and each readdir using it) so that the readdirs of one
     * large directory do not list it again each time. */
    atomic_int no_opendir;
    /* FUSE passthrough (passthrough.h) was asked for at INIT: files the
     * disk cache holds are then opened for the kernel to read from it, and
     * every open is answered (no no_open). backing_refused: the kernel
     * refused a backing file (said once in the log; the daemon serves). */
    int passthrough;
    atomic_int backing_refused;
    zm__backings *backings;
    /* Without passthrough, with a disk cache: listed files it holds are
     * pushed into the kernel's page cache (fs/push.h). */
    zm__pusher *pusher;
    pthread_mutex_t listing_lock;
    struct zm__dir *listing;
    /* The source watcher: a change drops every page the kernel keeps. */
    struct fuse_session *session;
    pthread_t watcher;
    int watching;
    int watcher_stop[2]; /* a pipe: written to stop the watcher */
    struct timespec began; /* the mount's start: -d times requests from it */
} zm__fs;

/* An open file: its path, so that reads go to the tree without the table,
 * and (passthrough asked for) its inode and how its open was answered. */
typedef struct zm__file {
    zm__handle handle;
    uint64_t inode;
    int mode; /* ZM__OPEN_CACHED or ZM__OPEN_PASSTHROUGH; 0: not counted */
    char path[];
} zm__file;

/* An open directory: its listing, taken once, at the first readdir (the
 * kernel answers from its own cache without one when it can), so that
 * readdir's offsets index a fixed list. The kernel never runs two readdirs
 * of one open directory at once. */
typedef struct zm__dir_entry {
    char *name;
    zm_node node;
} zm__dir_entry;

typedef struct zm__dir {
    zm__handle handle;
    unsigned refs; /* a kept listing (no opendir): users, the slot included */
    char *path;
    uint64_t inode;
    uint64_t parent_inode;
    int listed;
    zm__dir_entry *entries;
    size_t count;
    size_t capacity;
} zm__dir;

/* The operations libfuse calls (fuse.c). */
extern const struct fuse_lowlevel_ops zm__operations;

/* Frees the handles still open when the session is over. */
void zm__handles_free_all(zm__fs *fs);
void zm__dir_free(zm__dir *dir);

/* The file system of a request; with -d, the request's clock starts. */
zm__fs *zm__fs_of(fuse_req_t req);
/* One -d line for req: what, how long it took, and when since the mount. */
void zm__trace(fuse_req_t req, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* -d logs every request; the arguments are not even formatted otherwise. */
#define ZM__TRACE(fs, req, ...)                                                                    \
    do {                                                                                           \
        if ((fs)->config.debug)                                                                    \
            zm__trace((req), __VA_ARGS__);                                                         \
    } while (0)

const char *zm__shown(const char *path);
void zm__reply_failure(zm__fs *fs, fuse_req_t req, const char *operation, const char *path, int rc,
                       const zm_err *err);
char *zm__join(const char *directory, const char *name);
mode_t zm__type_bits(zm_node_kind kind);
/* An entry's attributes: path (the inode's, as remembered) gives its times. */
void zm__fill_entry(const zm__fs *fs, uint64_t inode, const char *path, const zm_node *node,
                    struct fuse_entry_param *entry);
void zm__handle_add(zm__fs *fs, zm__handle *handle);
void zm__handle_remove(zm__fs *fs, zm__handle *handle);
void zm__forget(zm__fs *fs, uint64_t inode, uint64_t count);

/* The directory operations (fuse_dir.c). */
void zm__op_opendir(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi);
void zm__op_readdir(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                    struct fuse_file_info *fi);
void zm__op_readdirplus(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                        struct fuse_file_info *fi);
void zm__op_releasedir(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi);

#endif
