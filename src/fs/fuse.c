/* The FUSE daemon: kernel requests (libfuse's low-level API) answered from
 * the tree (fs/tree.h), by path. Everything served is immutable for the
 * life of a mount, so the kernel is told to cache names, attributes,
 * missing names, directory listings and file pages for a day, and every
 * call that would change something answers EROFS. */
#define FUSE_USE_VERSION 312

#include "zarrmount/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "fs/daemon.h"
#include "fs/inodes.h"
#include "fs/log.h"
#include "fs/options.h"
#include "fs/passthrough.h"
#include "fs/push.h"
#include "fs/tree.h"
#include "zarrmount/config.h"

#ifndef ZM_VERSION
#define ZM_VERSION "unknown"
#endif

#define ZM__EXIT_OK      0
#define ZM__EXIT_FAILURE 1
#define ZM__EXIT_REFUSED 2

/* Nothing in a mount ever changes (a changed source makes reads fail with
 * EIO instead, and the watcher drops what the kernel keeps), so the kernel
 * may keep what it learnt for a day. */
#define ZM__CACHE_SECONDS 86400.0
/* -d shows at most this much of a missing path, then "...". */
#define ZM__TRACED_PATH_MAX 200
/* st_blksize: the buffer stdio and Python allocate for each open file. At
 * 128 KiB glibc maps and unmaps it on every open (its mmap threshold), which
 * made opening a small cached file eight times slower than on tmpfs; cp
 * reads 128 KiB at a time whatever this says, and the kernel's readahead
 * does not depend on it. */
#define ZM__BLOCK_SIZE 65536
/* Worker threads of the session loop: requests block while a chunk is
 * synthesized, so allow many; keep 10 idle ones around between bursts. */
#define ZM__LOOP_THREADS      64
#define ZM__LOOP_IDLE_THREADS 10
/* Reads and readaheads the kernel keeps in flight at once (libfuse's
 * default is 12): parallel reads are how chunks get made in parallel. */
#define ZM__MAX_BACKGROUND 64

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

/* ---- Helpers ------------------------------------------------------------------ */

/* When this thread's request began (with -d): every operation starts by
 * asking for its file system, so that is where the clock starts. */
static _Thread_local struct timespec zm__request_began;

static double zm__seconds_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static zm__fs *zm__fs_of(fuse_req_t req)
{
    zm__fs *fs = fuse_req_userdata(req);
    if (fs->config.debug)
        clock_gettime(CLOCK_MONOTONIC, &zm__request_began);
    return fs;
}

static void zm__trace(fuse_req_t req, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void zm__trace(fuse_req_t req, const char *fmt, ...)
{
    char line[ZM_REASON_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* How long the request took, and when it was answered since the mount
     * began: where a reader's time went. */
    const zm__fs *fs = fuse_req_userdata(req);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    zm__log(LOG_DEBUG, "pid %d: %s (%.3f ms, at %.6f s)", (int)fuse_req_ctx(req)->pid, line,
            1e3 * zm__seconds_between(&zm__request_began, &now),
            zm__seconds_between(&fs->began, &now));
}

/* -d logs every request; the arguments are not even formatted otherwise. */
#define ZM__TRACE(fs, req, ...)                                                                    \
    do {                                                                                           \
        if ((fs)->config.debug)                                                                    \
            zm__trace((req), __VA_ARGS__);                                                         \
    } while (0)

static const char *zm__shown(const char *path)
{
    return path[0] ? path : "/";
}

/* Answers a failed request: the errno to the caller, the reason to the log
 * once per reason. A missing name is an answer, not a failure, so ENOENT
 * is only traced. */
static void zm__reply_failure(zm__fs *fs, fuse_req_t req, const char *operation, const char *path,
                              int rc, const zm_err *err)
{
    int code = rc < 0 ? -rc : EIO;
    if (code != ENOENT) {
        char what[ZM_REASON_MAX];
        snprintf(what, sizeof what, "%s %s", operation, zm__shown(path));
        if (!zm__log_failure(what, -code, err))
            ZM__TRACE(fs, req, "%s: %s", what, strerror(code));
    } else {
        ZM__TRACE(fs, req, "%s %s: %s: %s", operation, zm__shown(path), strerror(code),
                  err && err->reason[0] ? err->reason : "no such file");
    }
    fuse_reply_err(req, code);
}

/* "directory/name", or "name" in the root; malloc'd. */
static char *zm__join(const char *directory, const char *name)
{
    size_t directory_length = strlen(directory);
    size_t name_length = strlen(name);
    char *path = malloc(directory_length + name_length + 2);
    if (path == NULL)
        return NULL;
    if (directory_length == 0) {
        memcpy(path, name, name_length + 1);
        return path;
    }
    memcpy(path, directory, directory_length);
    path[directory_length] = '/';
    memcpy(path + directory_length + 1, name, name_length + 1);
    return path;
}

static mode_t zm__type_bits(zm_node_kind kind)
{
    switch (kind) {
    case ZM_NODE_DIRECTORY:
        return S_IFDIR;
    case ZM_NODE_LINK:
        return S_IFLNK;
    case ZM_NODE_FILE:
        break;
    }
    return S_IFREG;
}

static const char *zm__kind_name(zm_node_kind kind)
{
    switch (kind) {
    case ZM_NODE_DIRECTORY:
        return "directory";
    case ZM_NODE_LINK:
        return "link";
    case ZM_NODE_FILE:
        break;
    }
    return "file";
}

static void zm__fill_stat(const zm__fs *fs, uint64_t inode, const zm_node *node, struct stat *st)
{
    const struct stat *source = &fs->config.source_stat;
    memset(st, 0, sizeof *st);
    st->st_ino = inode;
    st->st_uid = source->st_uid;
    st->st_gid = source->st_gid;
    st->st_atim = source->st_mtim;
    st->st_mtim = source->st_mtim;
    st->st_ctim = source->st_mtim;
    st->st_blksize = ZM__BLOCK_SIZE;
    /* Directories say 1 link, the usual "not counted": counting would list
     * every subdirectory, and 2 would tell find and du's leaf optimization
     * that a directory has no subdirectories. */
    st->st_nlink = 1;
    st->st_mode = zm__type_bits(node->kind);
    switch (node->kind) {
    case ZM_NODE_DIRECTORY:
        st->st_mode |= fs->directory_mode;
        break;
    case ZM_NODE_LINK:
        st->st_mode |= 0777;
        st->st_size = (off_t)node->size;
        break;
    case ZM_NODE_FILE:
        st->st_mode |= fs->file_mode;
        st->st_size = (off_t)node->size;
        st->st_blocks = (blkcnt_t)((node->size + 511) / 512);
        break;
    }
}

static void zm__fill_entry(const zm__fs *fs, uint64_t inode, const zm_node *node,
                           struct fuse_entry_param *entry)
{
    memset(entry, 0, sizeof *entry);
    entry->ino = inode;
    entry->generation = 1; /* numbers are never reused for another path while known */
    /* A live file (stats.json) is looked up at every open, so that each
     * open sees a new snapshot. */
    entry->attr_timeout = node->live ? 0 : ZM__CACHE_SECONDS;
    entry->entry_timeout = node->live ? 0 : ZM__CACHE_SECONDS;
    zm__fill_stat(fs, inode, node, &entry->attr);
}

static void zm__handle_add(zm__fs *fs, zm__handle *handle)
{
    pthread_mutex_lock(&fs->handles_lock);
    handle->next = fs->handles.next;
    handle->previous = &fs->handles;
    fs->handles.next->previous = handle;
    fs->handles.next = handle;
    pthread_mutex_unlock(&fs->handles_lock);
}

static void zm__handle_remove(zm__fs *fs, zm__handle *handle)
{
    pthread_mutex_lock(&fs->handles_lock);
    handle->previous->next = handle->next;
    handle->next->previous = handle->previous;
    pthread_mutex_unlock(&fs->handles_lock);
}

static void zm__dir_free(zm__dir *dir);

/* Frees the handles still open when the session is over. */
static void zm__handles_free_all(zm__fs *fs)
{
    while (fs->handles.next != &fs->handles) {
        zm__handle *handle = fs->handles.next;
        zm__handle_remove(fs, handle);
        if (handle->is_directory)
            zm__dir_free((zm__dir *)handle);
        else
            free(handle);
    }
}

/* ---- Startup and names ----------------------------------------------------------- */

static void zm__op_init(void *userdata, struct fuse_conn_info *conn)
{
    zm__fs *fs = userdata;
    /* Files need no open: their identity check is made on every read that
     * reaches the daemon, and the watcher drops cached pages on a change.
     * With passthrough asked for they do: an open is when the kernel is
     * given the disk cache's file to read from. */
    if ((conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) && !fs->passthrough)
        atomic_store(&fs->no_open, 1);
    if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT)
        atomic_store(&fs->no_opendir, 1);
    /* Reads of one file may be answered out of order: files are independent
     * of each other and of their own earlier pages. */
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    /* Nothing changes, so there is nothing to invalidate. */
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
    /* An open with O_TRUNC must be refused (a mount remounted rw): without
     * atomic O_TRUNC the kernel asks for it as a setattr of the size, which
     * is EROFS. With it, the open carries the truncation, and in no-open
     * mode the kernel opens files without asking: the open would succeed
     * and truncate nothing. */
    conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
        conn->want |= FUSE_CAP_CACHE_SYMLINKS;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO;
    /* FUSE_CAP_SPLICE_WRITE is left off: it helps replies that come from a
     * file descriptor, and ours are synthesized into memory, which libfuse
     * writes with one writev. */
    /* Large reads: the kernel caps each at max_pages and at the max_read
     * mount option, which libfuse insists this value repeats. */
    conn->max_read = ZM__MAX_READ;
    conn->max_background = ZM__MAX_BACKGROUND;
    conn->congestion_threshold = ZM__MAX_BACKGROUND * 3 / 4;
    conn->time_gran = 1;
}

/* The kernel reads a FUSE file ahead by its backing device's window, 128
 * KiB by default, whatever max_read allows: a reader walking a store (tar,
 * cp) then makes several requests a chunk file. Where we may (root), the
 * window of our mount is widened to max_read. The device comes from
 * /proc/self/mountinfo: a stat of the mount point would ask this daemon
 * (from inside a request, it would wait for itself). Best effort: without
 * it reads are smaller. */
static void zm__widen_readahead(const char *mountpoint)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return;
    char line[8192], device[64] = "";
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned id, parent, major, minor;
        char root[4096], point[4096];
        if (sscanf(line, "%u %u %u:%u %4095s %4095s", &id, &parent, &major, &minor, root, point) == 6 &&
            strcmp(point, mountpoint) == 0)
            snprintf(device, sizeof device, "%u:%u", major, minor); /* the last one mounted there */
    }
    fclose(f);
    if (device[0] == '\0')
        return;
    char path[128];
    snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", device);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        zm__log(LOG_DEBUG, "readahead stays at the kernel's default (%s: %s)", path, strerror(errno));
        return;
    }
    char value[32];
    int n = snprintf(value, sizeof value, "%u\n", ZM__MAX_READ / 1024);
    if (write(fd, value, (size_t)n) != n)
        zm__log(LOG_DEBUG, "readahead stays at the kernel's default (%s: %s)", path, strerror(errno));
    close(fd);
}

/* Takes count lookups away from inode. A snapshot of a live file goes
 * with its inode (nobody can look that inode up again: each lookup of the
 * file takes a new snapshot). */
static void zm__forget(zm__fs *fs, uint64_t inode, uint64_t count)
{
    zm_node node;
    int snapshot = zm__inodes_get(fs->inodes, inode, NULL, &node) == 0 && node.snapshot != 0;
    zm__inodes_forget(fs->inodes, inode, count);
    if (snapshot && zm__inodes_get(fs->inodes, inode, NULL, NULL) == -ENOENT)
        zm__tree_release_snapshot(fs->tree, node.snapshot);
}

/* Says why a file's bytes could not be made: once for each file (a few new
 * lines a second at most), at its lookup and again at a refused open or
 * read if the line was left out then. Its opens and reads fail with EIO. */
static void zm__tell_unmade(const char *path, const char *reason)
{
    char what[ZM_REASON_MAX];
    snprintf(what, sizeof what, "%s: cannot be made, its reads fail with EIO", zm__shown(path));
    zm_err why;
    zm_err_clear(&why);
    snprintf(why.reason, sizeof why.reason, "%s", reason[0] ? reason : "no reason was given");
    zm__log_failure_of(what, -EIO, &why);
}

/* Answers an open or a read of a file whose bytes could not be made (its
 * node's error, kept with the inode since its lookup): EIO, never a try to
 * make it again. Made now, its bytes could not be served under the size the
 * kernel holds, which is not theirs. */
static void zm__refuse_unmade(zm__fs *fs, fuse_req_t req, const char *operation, uint64_t inode,
                              const char *path)
{
    char reason[ZM_REASON_MAX];
    if (zm__inodes_failure(fs->inodes, inode, reason, sizeof reason) != 0)
        reason[0] = '\0';
    zm__tell_unmade(path, reason);
    zm__tree_count_unmade(fs->tree, path, operation[0] == 'r');
    ZM__TRACE(fs, req, "%s %s: %s: its bytes could not be made: %s", operation, path, strerror(EIO),
              reason);
    fuse_reply_err(req, EIO);
}

/* Remembers path for the kernel and answers with its entry: the one the
 * inode already has if the kernel holds it (what it was told before), else
 * node's. failure: why node's bytes could not be made (node->error), or
 * NULL. A snapshot of a live file gets an inode of its own,
 * "path@snapshot": the kernel has one size and one page cache an inode, and
 * a reader taking the file in several reads while another opens it must
 * see one snapshot whole. */
static void zm__reply_entry(zm__fs *fs, fuse_req_t req, const char *path, const zm_node *node,
                            const char *failure)
{
    uint64_t inode;
    zm_node held;
    char *own = NULL;
    if (node->snapshot != 0 && asprintf(&own, "%s@%llu", path, (unsigned long long)node->snapshot) < 0)
        own = NULL;
    int rc =
        node->snapshot != 0 && own == NULL
            ? -ENOMEM
            : zm__inodes_remember_held(fs->inodes, own ? own : path, node, failure, &inode, &held);
    free(own);
    if (rc != 0) {
        if (node->snapshot != 0)
            zm__tree_release_snapshot(fs->tree, node->snapshot);
        zm__reply_failure(fs, req, "lookup", path, rc, NULL);
        return;
    }
    if (held.error != 0) {
        char reason[ZM_REASON_MAX];
        if (zm__inodes_failure(fs->inodes, inode, reason, sizeof reason) != 0)
            reason[0] = '\0';
        zm__tell_unmade(path, reason);
    }
    /* A live file's node is the one of this lookup (a new snapshot). */
    if (node->live)
        held = *node;
    struct fuse_entry_param entry;
    zm__fill_entry(fs, inode, &held, &entry);
    ZM__TRACE(fs, req, "lookup %s: inode %llu, %s of %llu bytes%s", path, (unsigned long long)inode,
              zm__kind_name(held.kind), (unsigned long long)held.size,
              held.error != 0 ? " (its bytes could not be made: opens and reads fail)" : "");
    /* An interrupted request never reached the kernel, which then holds no
     * lookup to forget. */
    if (fuse_reply_entry(req, &entry) != 0)
        zm__forget(fs, inode, 1);
}

static void zm__op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    zm__fs *fs = zm__fs_of(req);
    /* At the first lookup: the kernel has taken our INIT reply, which sets
     * the window too (to the smaller of its own and ours). */
    if (!atomic_load(&fs->readahead_widened) && !atomic_exchange(&fs->readahead_widened, 1))
        zm__widen_readahead(fs->config.mountpoint);
    char *parent_path;
    int rc = zm__inodes_get(fs->inodes, parent, &parent_path, NULL);
    if (rc != 0) {
        zm__reply_failure(fs, req, "lookup", name, rc, NULL);
        return;
    }
    char *path = zm__join(parent_path, name);
    free(parent_path);
    if (path == NULL) {
        zm__reply_failure(fs, req, "lookup", name, -ENOMEM, NULL);
        return;
    }
    zm_err err;
    zm_err_clear(&err);
    zm_node node;
    /* The tree checks the source itself where a lookup needs it (to build
     * a view, to make a file): a file of a view built before the source
     * changed is still found, and its reads fail. A lookup failing instead
     * would tell zarr-python 2 the chunk is missing, and it would fill it. */
    rc = zm__tree_lookup(fs->tree, path, &node, &err);
    if (rc == 0 && node.kind != ZM_NODE_DIRECTORY && node.size == ZM_SIZE_UNKNOWN)
        rc = zm_err_set(&err, -EIO, "%s: the tree gave no size", path);
    if (rc == -ENOENT) {
        /* A missing name stays missing: the kernel may remember that too
         * (readers probe for .zarray, .zgroup and .zattrs everywhere). */
        struct fuse_entry_param missing = {.ino = 0, .entry_timeout = ZM__CACHE_SECONDS};
        /* Shortened: a name may be thousands of bytes, and the reason must fit the line. */
        int length = (int)strnlen(path, ZM__TRACED_PATH_MAX + 1);
        ZM__TRACE(fs, req, "lookup %.*s%s: missing: %s",
                  length > ZM__TRACED_PATH_MAX ? ZM__TRACED_PATH_MAX : length, path,
                  length > ZM__TRACED_PATH_MAX ? "..." : "",
                  err.reason[0] ? err.reason : "no such file");
        fuse_reply_entry(req, &missing);
    } else if (rc != 0) {
        zm__reply_failure(fs, req, "lookup", path, rc, &err);
    } else {
        zm__reply_entry(fs, req, path, &node, node.error != 0 ? err.reason : NULL);
    }
    free(path);
}

static void zm__op_forget(fuse_req_t req, fuse_ino_t inode, uint64_t count)
{
    zm__forget(zm__fs_of(req), inode, count);
    fuse_reply_none(req);
}

static void zm__op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    zm__fs *fs = zm__fs_of(req);
    for (size_t i = 0; i < count; i++)
        zm__forget(fs, forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void zm__op_getattr(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi)
{
    (void)fi;
    zm__fs *fs = zm__fs_of(req);
    zm_node node;
    int rc = zm__inodes_get(fs->inodes, inode, NULL, &node);
    if (rc != 0) {
        zm__reply_failure(fs, req, "getattr", "(unknown inode)", rc, NULL);
        return;
    }
    /* The node came from the lookup that made the inode; it cannot have
     * changed since, unless it is live: then the tree says what it is now. */
    if (node.live) {
        char *path = NULL;
        zm_err err;
        zm_err_clear(&err);
        rc = zm__inodes_get(fs->inodes, inode, &path, NULL);
        if (rc == 0 && (rc = zm__tree_getattr(fs->tree, path, &node, &err)) != 0)
            zm__reply_failure(fs, req, "getattr", path, rc, &err);
        else if (rc != 0)
            zm__reply_failure(fs, req, "getattr", "(unknown inode)", rc, NULL);
        if (rc == 0) {
            struct stat st;
            zm__fill_stat(fs, inode, &node, &st);
            ZM__TRACE(fs, req, "getattr %s: %llu bytes now", path, (unsigned long long)node.size);
            fuse_reply_attr(req, &st, 0);
        }
        free(path);
        return;
    }
    struct stat st;
    zm__fill_stat(fs, inode, &node, &st);
    ZM__TRACE(fs, req, "getattr inode %llu", (unsigned long long)inode);
    fuse_reply_attr(req, &st, ZM__CACHE_SECONDS);
}

static void zm__op_readlink(fuse_req_t req, fuse_ino_t inode)
{
    zm__fs *fs = zm__fs_of(req);
    char *path;
    int rc = zm__inodes_get(fs->inodes, inode, &path, NULL);
    if (rc != 0) {
        zm__reply_failure(fs, req, "readlink", "(unknown inode)", rc, NULL);
        return;
    }
    char target[PATH_MAX];
    zm_err err;
    zm_err_clear(&err);
    rc = zm__tree_readlink(fs->tree, path, target, sizeof target, &err);
    if (rc != 0) {
        zm__reply_failure(fs, req, "readlink", path, rc, &err);
    } else {
        target[sizeof target - 1] = '\0';
        ZM__TRACE(fs, req, "readlink %s: %s", path, target);
        fuse_reply_readlink(req, target);
    }
    free(path);
}

static void zm__op_access(fuse_req_t req, fuse_ino_t inode, int mask)
{
    zm__fs *fs = zm__fs_of(req);
    zm_node node;
    int rc = zm__inodes_get(fs->inodes, inode, NULL, &node);
    if (rc != 0) {
        zm__reply_failure(fs, req, "access", "(unknown inode)", rc, NULL);
        return;
    }
    /* Only asked without default_permissions, that is without allow_other,
     * when the mounting user alone can get here. */
    int code = (mask & W_OK) ? EROFS : ((mask & X_OK) && node.kind == ZM_NODE_FILE) ? EACCES : 0;
    ZM__TRACE(fs, req, "access inode %llu mask %d: %s", (unsigned long long)inode, mask,
              strerror(code));
    fuse_reply_err(req, code);
}

static void zm__op_statfs(fuse_req_t req, fuse_ino_t inode)
{
    (void)inode;
    zm__fs *fs = zm__fs_of(req);
    /* No space, used or free: files exist only while they are read. */
    struct statvfs st;
    memset(&st, 0, sizeof st);
    st.f_bsize = ZM__BLOCK_SIZE;
    st.f_frsize = ZM__BLOCK_SIZE;
    st.f_namemax = NAME_MAX;
    st.f_files = zm__inodes_count(fs->inodes);
    st.f_flag = ST_RDONLY;
    ZM__TRACE(fs, req, "statfs");
    fuse_reply_statfs(req, &st);
}

/* ---- Files ------------------------------------------------------------------------ */

static zm__file *zm__file_new(const char *path)
{
    size_t size = strlen(path) + 1;
    zm__file *file = malloc(sizeof *file + size);
    if (file == NULL)
        return NULL;
    file->handle.is_directory = 0;
    file->inode = 0;
    file->mode = 0;
    memcpy(file->path, path, size);
    return file;
}

/* An open file the kernel will not release (its open was never answered)
 * or has released. */
static void zm__file_forget(zm__fs *fs, zm__file *file)
{
    if (file->mode != 0) {
        int id = zm__backings_release(fs->backings, file->inode, file->mode);
        if (id > 0)
            zm__backing_close(fs->session, id);
    }
    zm__handle_remove(fs, &file->handle);
    free(file);
}

/* With passthrough asked for: answers the open as the inode's other opens
 * were, or, the first, from the disk cache's file when it holds this one.
 * 0 when answered (with passthrough); otherwise the caller answers it
 * through the page cache (file->mode says whether that was counted). */
static int zm__open_passthrough(zm__fs *fs, fuse_req_t req, uint64_t inode, int flags, zm__file *file)
{
    int id;
    int mode = zm__backings_begin(fs->backings, inode, &id);
    if (mode == ZM__OPEN_DECIDE) {
        id = 0;
        int fd;
        uint64_t size;
        zm_err err;
        zm_err_clear(&err);
        /* O_DIRECT through a backing file would take the alignment rules of
         * the file system underneath: such an open (the first) goes through
         * the daemon, which has none. */
        if (!atomic_load(&fs->backing_refused) && !(flags & O_DIRECT) &&
            zm__tree_open_kept(fs->tree, file->path, &fd, &size, &err) == 0) {
            id = zm__backing_open(fs->session, fd);
            close(fd);
            if (id < 0 && atomic_exchange(&fs->backing_refused, 1) == 0)
                zm__log(LOG_WARNING, "the kernel refused FUSE passthrough (%s): the daemon serves "
                        "every read", strerror(-id));
        }
        mode = id > 0 ? ZM__OPEN_PASSTHROUGH : ZM__OPEN_CACHED;
        zm__backings_decided(fs->backings, inode, id > 0 ? id : 0);
    }
    file->inode = inode;
    file->mode = mode;
    if (mode != ZM__OPEN_PASSTHROUGH)
        return -1;
    ZM__TRACE(fs, req, "open %s: passthrough (backing %d)", file->path, id);
    if (zm__reply_open_passthrough(req, (uint64_t)(uintptr_t)file, id) != 0)
        zm__file_forget(fs, file); /* interrupted: never released */
    return 0;
}

static void zm__op_open(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi)
{
    zm__fs *fs = zm__fs_of(req);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        ZM__TRACE(fs, req, "open inode %llu for writing: read-only", (unsigned long long)inode);
        fuse_reply_err(req, EROFS);
        return;
    }
    char *path;
    zm_node node;
    int rc = zm__inodes_get(fs->inodes, inode, &path, &node);
    if (rc != 0) {
        zm__reply_failure(fs, req, "open", "(unknown inode)", rc, NULL);
        return;
    }
    if (node.error != 0) {
        zm__refuse_unmade(fs, req, "open", inode, path);
        free(path);
        return;
    }
    zm_err err;
    zm_err_clear(&err);
    rc = node.kind == ZM_NODE_DIRECTORY ? zm_err_set(&err, -EISDIR, "a directory")
                                        : zm__tree_check_source(fs->tree, &err);
    /* Counted here, though once the kernel opens files by itself (below)
     * it stops asking: see docs/mount.md. */
    if (rc == 0)
        zm__tree_count_open(fs->tree, path);
    if (rc == 0 && atomic_load(&fs->no_open)) {
        /* The kernel opens every file from now on by itself, keeping pages
         * across opens (FOPEN_KEEP_CACHE is what it assumes). */
        ZM__TRACE(fs, req, "open %s: no open needed from now on", path);
        free(path);
        fuse_reply_err(req, ENOSYS);
        return;
    }
    zm__file *file = rc == 0 ? zm__file_new(path) : NULL;
    if (rc == 0 && file == NULL)
        rc = -ENOMEM;
    if (rc != 0) {
        zm__reply_failure(fs, req, "open", path, rc, &err);
        free(path);
        return;
    }
    free(path);
    zm__handle_add(fs, &file->handle);
    fi->fh = (uint64_t)(uintptr_t)file;
    if (fs->passthrough && zm__open_passthrough(fs, req, inode, fi->flags, file) == 0)
        return;
    fi->keep_cache = 1; /* the pages of an earlier open are still right */
    fi->direct_io = 0;  /* the page cache does readahead and keeps results */
    fi->noflush = 1;    /* close has nothing to flush */
    ZM__TRACE(fs, req, "open %s", file->path);
    if (fuse_reply_open(req, fi) != 0)
        zm__file_forget(fs, file);
}

static void zm__op_read(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                        struct fuse_file_info *fi)
{
    zm__fs *fs = zm__fs_of(req);
    char *owned = NULL; /* the path, when the kernel opened without us */
    const char *path;
    if (offset == 0)
        zm__pusher_read(fs->pusher, inode); /* a walking reader's next file: push ahead */
    if (fi->fh != 0) {
        /* Opened through the daemon, which refuses to open a file whose
         * bytes could not be made. */
        path = ((const zm__file *)(uintptr_t)fi->fh)->path;
    } else {
        /* The kernel opened it by itself (no-open mode): nothing refused it. */
        zm_node node;
        int found = zm__inodes_get(fs->inodes, inode, &owned, &node);
        if (found != 0) {
            zm__reply_failure(fs, req, "read", "(unknown inode)", found, NULL);
            return;
        }
        if (node.error != 0) {
            zm__refuse_unmade(fs, req, "read", inode, owned);
            free(owned);
            return;
        }
        path = owned;
    }
    zm_err err;
    zm_err_clear(&err);
    int rc = offset < 0 ? -EINVAL : zm__tree_check_source(fs->tree, &err);
    if (rc != 0) {
        zm__reply_failure(fs, req, "read", path, rc, &err);
        free(owned);
        return;
    }
    /* Up to ZM__MAX_READ bytes; after the first, glibc serves blocks this
     * size from its heap rather than mapping and unmapping each one. */
    char *buffer = malloc(size > 0 ? size : 1);
    if (buffer == NULL) {
        zm__reply_failure(fs, req, "read", path, -ENOMEM, NULL);
        free(owned);
        return;
    }
    size_t done = 0;
    rc = zm__tree_read(fs->tree, path, (uint64_t)offset, size, buffer, &done, &err);
    if (rc != 0) {
        zm__reply_failure(fs, req, "read", path, rc, &err);
    } else {
        done = done < size ? done : size;
        ZM__TRACE(fs, req, "read %s at %lld, %zu bytes: %zu", path, (long long)offset, size, done);
        fuse_reply_buf(req, buffer, done);
    }
    free(buffer);
    free(owned);
}

static void zm__op_release(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi)
{
    (void)inode;
    zm__fs *fs = zm__fs_of(req);
    zm__file *file = (zm__file *)(uintptr_t)fi->fh;
    if (file != NULL) { /* none when the kernel opened without us */
        ZM__TRACE(fs, req, "release %s", file->path);
        zm__file_forget(fs, file);
    }
    fuse_reply_err(req, 0);
}

/* ---- Directories ------------------------------------------------------------------ */

static void zm__dir_free(zm__dir *dir)
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

static void zm__op_opendir(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi)
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
    if (atomic_load(&fs->no_opendir)) {
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
    fi->cache_readdir = 1; /* listings never change: the kernel may keep them */
    fi->keep_cache = 1;    /* and keep them across opens */
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
            zm__fill_entry(fs, inode, &held, &entry);
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

static void zm__op_readdir(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                           struct fuse_file_info *fi)
{
    zm__readdir(req, inode, size, offset, fi, 0);
}

static void zm__op_readdirplus(fuse_req_t req, fuse_ino_t inode, size_t size, off_t offset,
                               struct fuse_file_info *fi)
{
    zm__readdir(req, inode, size, offset, fi, 1);
}

static void zm__op_releasedir(fuse_req_t req, fuse_ino_t inode, struct fuse_file_info *fi)
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

/* ---- Extended attributes: none ------------------------------------------------------ */

static void zm__op_getxattr(fuse_req_t req, fuse_ino_t inode, const char *name, size_t size)
{
    (void)inode;
    (void)size;
    ZM__TRACE(zm__fs_of(req), req, "getxattr %s: none", name);
    fuse_reply_err(req, ENODATA);
}

static void zm__op_listxattr(fuse_req_t req, fuse_ino_t inode, size_t size)
{
    (void)inode;
    ZM__TRACE(zm__fs_of(req), req, "listxattr: none");
    if (size == 0)
        fuse_reply_xattr(req, 0);
    else
        fuse_reply_buf(req, NULL, 0);
}

/* ---- Everything that would change something: EROFS ----------------------------------
 * The mount is read-only, so the kernel refuses these itself; the handlers
 * answer anyway should a request get through (mount -o remount,rw). */

static void zm__refuse(fuse_req_t req, const char *operation)
{
    ZM__TRACE(zm__fs_of(req), req, "%s: read-only file system", operation);
    fuse_reply_err(req, EROFS);
}

static void zm__op_setattr(fuse_req_t req, fuse_ino_t inode, struct stat *attr, int to_set,
                           struct fuse_file_info *fi)
{
    (void)inode, (void)attr, (void)to_set, (void)fi;
    zm__refuse(req, "setattr");
}

static void zm__op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                         dev_t rdev)
{
    (void)parent, (void)name, (void)mode, (void)rdev;
    zm__refuse(req, "mknod");
}

static void zm__op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    zm__refuse(req, "mkdir");
}

static void zm__op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)parent, (void)name;
    zm__refuse(req, "unlink");
}

static void zm__op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)parent, (void)name;
    zm__refuse(req, "rmdir");
}

static void zm__op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    (void)link, (void)parent, (void)name;
    zm__refuse(req, "symlink");
}

static void zm__op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                          fuse_ino_t new_parent, const char *new_name, unsigned int flags)
{
    (void)parent, (void)name, (void)new_parent, (void)new_name, (void)flags;
    zm__refuse(req, "rename");
}

static void zm__op_link(fuse_req_t req, fuse_ino_t inode, fuse_ino_t new_parent,
                        const char *new_name)
{
    (void)inode, (void)new_parent, (void)new_name;
    zm__refuse(req, "link");
}

static void zm__op_write(fuse_req_t req, fuse_ino_t inode, const char *buffer, size_t size,
                         off_t offset, struct fuse_file_info *fi)
{
    (void)inode, (void)buffer, (void)size, (void)offset, (void)fi;
    zm__refuse(req, "write");
}

static void zm__op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                          struct fuse_file_info *fi)
{
    (void)parent, (void)name, (void)mode, (void)fi;
    zm__refuse(req, "create");
}

static void zm__op_setxattr(fuse_req_t req, fuse_ino_t inode, const char *name, const char *value,
                            size_t size, int flags)
{
    (void)inode, (void)name, (void)value, (void)size, (void)flags;
    zm__refuse(req, "setxattr");
}

static void zm__op_removexattr(fuse_req_t req, fuse_ino_t inode, const char *name)
{
    (void)inode, (void)name;
    zm__refuse(req, "removexattr");
}

static void zm__op_fallocate(fuse_req_t req, fuse_ino_t inode, int mode, off_t offset, off_t length,
                             struct fuse_file_info *fi)
{
    (void)inode, (void)mode, (void)offset, (void)length, (void)fi;
    zm__refuse(req, "fallocate");
}

static void zm__op_copy_file_range(fuse_req_t req, fuse_ino_t inode_in, off_t offset_in,
                                   struct fuse_file_info *fi_in, fuse_ino_t inode_out,
                                   off_t offset_out, struct fuse_file_info *fi_out, size_t length,
                                   int flags)
{
    (void)inode_in, (void)offset_in, (void)fi_in, (void)inode_out, (void)offset_out, (void)fi_out,
        (void)length, (void)flags;
    zm__refuse(req, "copy_file_range");
}

static const struct fuse_lowlevel_ops zm__operations = {
    .init = zm__op_init,
    .lookup = zm__op_lookup,
    .forget = zm__op_forget,
    .forget_multi = zm__op_forget_multi,
    .getattr = zm__op_getattr,
    .readlink = zm__op_readlink,
    .access = zm__op_access,
    .statfs = zm__op_statfs,
    .open = zm__op_open,
    .read = zm__op_read,
    .release = zm__op_release,
    .opendir = zm__op_opendir,
    .readdir = zm__op_readdir,
    .readdirplus = zm__op_readdirplus,
    .releasedir = zm__op_releasedir,
    .getxattr = zm__op_getxattr,
    .listxattr = zm__op_listxattr,
    .setattr = zm__op_setattr,
    .mknod = zm__op_mknod,
    .mkdir = zm__op_mkdir,
    .unlink = zm__op_unlink,
    .rmdir = zm__op_rmdir,
    .symlink = zm__op_symlink,
    .rename = zm__op_rename,
    .link = zm__op_link,
    .write = zm__op_write,
    .create = zm__op_create,
    .setxattr = zm__op_setxattr,
    .removexattr = zm__op_removexattr,
    .fallocate = zm__op_fallocate,
    .copy_file_range = zm__op_copy_file_range,
};

/* ---- The mount's life ------------------------------------------------------------- */

/* With allow_other the mount shows the source's own read bits, whatever
 * the directories above it say: a 0644 file in a 0700 home is readable by
 * nobody else there, and by everyone through the mount. Says so once, naming
 * the first directory that keeps out someone the file's bits let in. */
static void zm__warn_hidden_source(const char *source, mode_t file_mode)
{
    char *directory = strdup(source);
    if (directory == NULL)
        return;
    for (char *slash = strrchr(directory, '/'); slash != NULL; slash = strrchr(directory, '/')) {
        *slash = '\0';
        const char *shown = directory[0] ? directory : "/";
        struct stat st;
        if (stat(shown, &st) != 0)
            break;
        /* Search (x) for the group and others who may read the file. */
        int group_kept_out = (file_mode & S_IRGRP) && !(st.st_mode & S_IXGRP);
        int others_kept_out = (file_mode & S_IROTH) && !(st.st_mode & S_IXOTH);
        if (group_kept_out || others_kept_out) {
            zm__log(LOG_WARNING, "allow_other: %s keeps %s out of the source, but the mount shows "
                    "the file's own bits (%04o): through the mount they can read it (chmod the "
                    "source to say who may)", shown, others_kept_out ? "other users" : "its group",
                    (unsigned)(file_mode & 07777));
            break;
        }
        if (!directory[0])
            break;
    }
    free(directory);
}

static void zm__choose_modes(zm__fs *fs)
{
    if (!fs->config.allow_other) {
        /* Only the mounting user can enter the mount at all. */
        fs->file_mode = 0444;
        fs->directory_mode = 0555;
        return;
    }
    /* Everyone can enter: the source's read bits decide who reads, with
     * search bits on directories wherever reading is allowed. */
    mode_t read_bits = fs->config.source_stat.st_mode & 0444;
    fs->file_mode = read_bits;
    fs->directory_mode = read_bits | (read_bits >> 2);
    zm__warn_hidden_source(fs->config.source, fs->config.source_stat.st_mode);
}

/* The tree's progress lines (long work, every few seconds) go to the log. */
static void zm__log_progress(void *context, const char *line)
{
    (void)context;
    zm__log(LOG_INFO, "%s", line);
}

/* Opening the tree (the source, its structure, the disk cache) runs on a
 * thread of its own with the stop signals blocked, so that the threads it
 * starts (the source's decode pool, the disk writer, the progress teller)
 * inherit the mask: libfuse's loop wakes only when a stop signal lands on
 * the thread that waits in it. Meanwhile the calling thread waits for those
 * signals: an open can take long on a large or hostile file, and nothing
 * is mounted yet, so SIGTERM, SIGINT, SIGHUP or SIGQUIT then ends the
 * process at once (after a line saying so) rather than after the open. The
 * disk cache survives that as it survives SIGKILL (docs/reliability.md). */
typedef struct zm__opening {
    zm_tree_options options;
    zm_tree *tree;
    zm_err *err;
    int rc;
    atomic_int done;
} zm__opening;

/* How often the waiting thread looks whether the open has finished: a
 * stop signal is taken at once either way. */
#define ZM__OPEN_POLL_NANOSECONDS 100000000L

static void *zm__open_tree_thread(void *arg)
{
    zm__opening *o = arg;
    o->rc = zm__tree_open(&o->options, &o->tree, o->err);
    atomic_store(&o->done, 1);
    return NULL;
}

static _Noreturn void zm__stopped_while_opening(const char *source, int signal_number)
{
    zm__log(LOG_ERR, "stopped by signal %d (%s) while opening %s: nothing was mounted",
            signal_number, strsignal(signal_number), source);
    /* Die of the signal itself, so that whoever waits sees why. */
    signal(signal_number, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signal_number);
    raise(signal_number);
    pthread_sigmask(SIG_UNBLOCK, &only, NULL);
    _exit(128 + signal_number);
}

static int zm__open_tree(zm__fs *fs, zm_err *err)
{
    const zm__fs_config *config = &fs->config;
    zm__opening opening = {
        .options =
            {
                .source = config->source,
                .codec = config->options.codec,
                .chunk_bytes = config->options.chunk_bytes,
                .cache_bytes = config->options.cache_bytes,
                .cache_dir = config->options.cache_dir,
                .cache_max = config->options.cache_max,
                .threads = config->options.threads,
                .ahead_idle_seconds = config->options.ahead_idle_seconds,
                .ahead_rate = config->options.ahead_rate,
                .progress = zm__log_progress,
                .progress_context = NULL,
            },
        .err = err,
    };
    sigset_t stop_signals, previous;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    sigaddset(&stop_signals, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
    pthread_t opener;
    int rc = pthread_create(&opener, NULL, zm__open_tree_thread, &opening);
    if (rc != 0) {
        /* No thread: open here, as before (signals wait until it is done). */
        zm__open_tree_thread(&opening);
    } else {
        while (!atomic_load(&opening.done)) {
            struct timespec wait = {0, ZM__OPEN_POLL_NANOSECONDS};
            int got = sigtimedwait(&stop_signals, NULL, &wait);
            if (got > 0)
                zm__stopped_while_opening(config->source, got);
        }
        pthread_join(opener, NULL);
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    fs->tree = opening.tree;
    rc = opening.rc;
    if (rc != 0 && err->reason[0] == '\0')
        zm_err_set(err, rc, "%s: %s", config->source, strerror(-rc));
    /* What the source holds but the stores leave out (an element outside
     * the file, an encoding not read): said once, each with why. */
    const char *const *skipped;
    size_t skipped_count = rc == 0 ? zm__tree_skipped(fs->tree, &skipped) : 0;
    for (size_t i = 0; i < skipped_count; i++)
        zm__log(LOG_NOTICE, "%s: left out: %s", config->source, skipped[i]);
    return rc;
}

/* ---- The source watcher -------------------------------------------------------- */

/* Drops every page and attribute the kernel keeps for the mount's inodes, so
 * that later reads reach the daemon (and fail with EIO there). */
static void zm__drop_kernel_cache(zm__fs *fs)
{
    uint64_t *numbers = NULL;
    size_t count = 0;
    if (zm__inodes_numbers(fs->inodes, &numbers, &count) != 0) {
        zm__log(LOG_WARNING, "out of memory listing inodes: cached pages stay until remount");
        return;
    }
    for (size_t i = 0; i < count; i++)
        fuse_lowlevel_notify_inval_inode(fs->session, numbers[i], 0, 0);
    free(numbers);
}

/* Whether an inotify event may mean the source changed: anything on the
 * file itself, or its name in its directory created, moved or deleted. */
static int zm__event_matters(const struct inotify_event *event, int file_watch, const char *name)
{
    if (event->wd == file_watch)
        return 1;
    return event->len > 0 && strcmp(event->name, name) == 0;
}

/* Watches the source (the file, and its directory for a replacement by
 * rename). On a change it checks the identity as a read would; if the
 * source is no longer the mounted file, it logs why (once) and drops what
 * the kernel keeps, so that no reader is served the old file's pages after
 * the new file is in place and every read says to remount. */
static void *zm__watch_source(void *arg)
{
    zm__fs *fs = arg;
    const char *source = fs->config.source;
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) {
        zm__log(LOG_WARNING, "cannot watch %s for changes (%s): reads still check it",
                source, strerror(errno));
        return NULL;
    }
    const char *slash = strrchr(source, '/');
    char *directory = slash ? strndup(source, slash == source ? 1 : (size_t)(slash - source))
                            : strdup(".");
    const char *name = slash ? slash + 1 : source;
    int file_watch = inotify_add_watch(fd, source,
                                       IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF |
                                           IN_MOVE_SELF);
    int directory_watch =
        directory ? inotify_add_watch(fd, directory,
                                      IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE)
                  : -1;
    if (file_watch < 0 || directory_watch < 0)
        zm__log(LOG_WARNING, "cannot watch %s for changes (%s): reads still check it", source,
                strerror(errno));
    _Alignas(struct inotify_event) char events[4096];
    while (file_watch >= 0 || directory_watch >= 0) {
        struct pollfd waits[2] = {{.fd = fd, .events = POLLIN},
                                  {.fd = fs->watcher_stop[0], .events = POLLIN}};
        if (poll(waits, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (waits[1].revents)
            break; /* the mount is ending */
        ssize_t got = read(fd, events, sizeof events);
        if (got <= 0)
            continue;
        int matters = 0;
        for (ssize_t at = 0; at < got;) {
            const struct inotify_event *event = (const struct inotify_event *)(events + at);
            matters |= zm__event_matters(event, file_watch, name);
            at += (ssize_t)(sizeof *event + event->len);
        }
        zm_err err;
        zm_err_clear(&err);
        if (matters && zm__tree_check_source(fs->tree, &err) != 0) {
            zm__log_failure("source", -EIO, &err);
            zm__drop_kernel_cache(fs);
            break; /* a mount never serves again what changed: nothing more to watch */
        }
    }
    free(directory);
    close(fd);
    return NULL;
}

/* Starts the watcher with the stop signals blocked (libfuse's loop wakes
 * only when they land on its own thread). Not fatal if it cannot start. */
static void zm__start_watcher(zm__fs *fs, struct fuse_session *session)
{
    fs->session = session;
    if (pipe2(fs->watcher_stop, O_CLOEXEC) != 0) {
        zm__log(LOG_WARNING, "cannot watch %s for changes (%s): reads still check it",
                fs->config.source, strerror(errno));
        return;
    }
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    fs->watching = pthread_create(&fs->watcher, NULL, zm__watch_source, fs) == 0;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (!fs->watching) {
        close(fs->watcher_stop[0]);
        close(fs->watcher_stop[1]);
        zm__log(LOG_WARNING, "cannot watch %s for changes: reads still check it",
                fs->config.source);
    }
}

static void zm__stop_watcher(zm__fs *fs)
{
    if (!fs->watching)
        return;
    char byte = 1;
    if (write(fs->watcher_stop[1], &byte, 1) != 1)
        zm__log(LOG_WARNING, "cannot stop the source watcher: %s", strerror(errno));
    pthread_join(fs->watcher, NULL);
    close(fs->watcher_stop[0]);
    close(fs->watcher_stop[1]);
    fs->watching = 0;
}

/* How far ahead of a walking reader kept files are pushed: the memory
 * cache's share (zm_config_push_window). */
static uint64_t zm__push_window(const zm__fs_config *config)
{
    zm_config resolved;
    zm_config_resolve(&config->options, &resolved);
    return zm_config_push_window(resolved.cache_bytes);
}

/* Answers the kernel's INIT, asking for passthrough when it is wanted
 * (passthrough=on), as root (the kernel lends backing files to
 * CAP_SYS_ADMIN only). 0, or -errno when the session ended. */
static int zm__handshake(zm__fs *fs, struct fuse_session *session)
{
    int wanted = fs->config.passthrough;
    int offer = wanted && geteuid() == 0 && zm__backings_create(&fs->backings) == 0;
    if (wanted && geteuid() != 0)
        zm__log(LOG_WARNING, "passthrough=on needs root (the kernel lends backing files to "
                "CAP_SYS_ADMIN only): the daemon serves every read");
    /* Read by the init operation, which libfuse calls while answering. */
    fs->passthrough = offer;
    int granted = 0;
    int rc = zm__passthrough_handshake(session, offer, &granted);
    fs->passthrough = granted;
    if (offer && !granted)
        zm__log(LOG_WARNING, "passthrough=on: this kernel has no FUSE passthrough (Linux 6.9 or "
                "later has): the daemon serves every read");
    if (granted)
        zm__log(LOG_INFO, "passthrough: files the disk cache holds are read by the kernel from it");
    return rc;
}

/* Runs the multi-threaded loop until unmounted (0), stopped by a signal
 * (the signal number) or failed (-errno). */
static int zm__run_loop(struct fuse_session *session)
{
    struct fuse_loop_config *loop = fuse_loop_cfg_create();
    if (loop == NULL)
        return -ENOMEM;
    fuse_loop_cfg_set_clone_fd(loop, 1); /* a device descriptor per worker */
    fuse_loop_cfg_set_idle_threads(loop, ZM__LOOP_IDLE_THREADS);
    fuse_loop_cfg_set_max_threads(loop, ZM__LOOP_THREADS);
    int rc = fuse_session_loop_mt(session, loop);
    fuse_loop_cfg_destroy(loop);
    return rc;
}

static const char *zm__fuse_reason(const char *fallback)
{
    const char *captured = zm__log_captured();
    return captured[0] ? captured : fallback;
}

/* From the session to the unmount. report is the daemon's line to its
 * waiting parent (-1 in the foreground). Returns the exit status. */
static int zm__serve(zm__fs *fs, int report)
{
    zm__fs_config *config = &fs->config;
    int status = ZM__EXIT_REFUSED;
    int handlers = 0;
    int mounted = 0;
    zm_err err;
    zm_err_clear(&err);

    /* libfuse says why it fails in its own messages: keep them, and say it
     * in one line of ours. */
    zm__log_capture_fuse(1);
    /* The session first: it checks the FUSE mount options, before the
     * source is opened (which may take a while). */
    struct fuse_session *session =
        fuse_session_new(&config->fuse_args, &zm__operations, sizeof zm__operations, fs);
    if (session == NULL) {
        zm__log(LOG_ERR, "%s", zm__fuse_reason("cannot start a FUSE session"));
        goto done;
    }
    int rc = zm__inodes_create(&fs->inodes);
    if (rc == 0)
        rc = zm__open_tree(fs, &err);
    if (rc != 0) {
        zm__log(LOG_ERR, "%s",
                rc == -ENOMEM && err.reason[0] == '\0' ? "out of memory" : err.reason);
        status = rc == -ENOMEM ? ZM__EXIT_FAILURE : ZM__EXIT_REFUSED;
        goto done;
    }
    status = ZM__EXIT_FAILURE;
    if (fuse_set_signal_handlers(session) != 0) {
        zm__log(LOG_ERR, "%s", zm__fuse_reason("cannot install the signal handlers"));
        goto done;
    }
    handlers = 1;
    if (fuse_session_mount(session, config->mountpoint) != 0) {
        zm__log(LOG_ERR, "cannot mount at %s: %s", config->mountpoint,
                zm__fuse_reason("mount failed"));
        goto done;
    }
    mounted = 1;
    zm__log_capture_fuse(0);
    if (report >= 0) {
        zm__daemon_detach(report);
        report = -1;
    } else if (chdir("/") != 0) {
        /* Not fatal: only keeps the directory busy. */
        zm__log(LOG_WARNING, "cannot change directory to /: %s", strerror(errno));
    }
    zm__log(LOG_INFO, "serving %s at %s", config->source, config->mountpoint);

    fs->session = session;
    rc = zm__handshake(fs, session);
    zm__start_watcher(fs, session);
    /* Without passthrough, a remount pushes kept files ahead of walking
     * readers. (A first mount has none when a walk lists a directory, and
     * what it makes is in memory.) */
    if (rc == 0 && !fs->passthrough && zm__tree_kept_on_disk(fs->tree) &&
        zm__pusher_start(session, fs->tree, fs->inodes, zm__push_window(config), &fs->pusher) != 0)
        zm__log(LOG_WARNING, "cannot start pushing kept files into the page cache: they are read "
                "as usual");
    if (fs->passthrough || fs->pusher != NULL)
        zm__tree_kernel_reads_kept(fs->tree);
    if (rc == 0)
        rc = zm__run_loop(session);
    else if (rc == -ENODEV)
        rc = 0; /* unmounted before INIT */
    zm__pusher_stop(fs->pusher);
    fs->pusher = NULL;
    zm__stop_watcher(fs);
    status = rc < 0 ? ZM__EXIT_FAILURE : ZM__EXIT_OK;
    if (rc < 0)
        zm__log(LOG_ERR, "serving %s failed: %s", config->mountpoint, strerror(-rc));

done:
    zm__log_capture_fuse(0);
    /* Requests still running have finished: the loop joins its workers. */
    if (mounted)
        fuse_session_unmount(session);
    if (handlers)
        fuse_remove_signal_handlers(session);
    if (session)
        fuse_session_destroy(session);
    if (mounted)
        zm__log(LOG_INFO, "unmounted %s", config->mountpoint);
    zm__handles_free_all(fs);
    zm__backings_destroy(fs->backings);
    fs->backings = NULL;
    if (fs->listing)
        zm__dir_free(fs->listing);
    fs->listing = NULL;
    if (fs->tree)
        zm__tree_close(fs->tree);
    zm__inodes_destroy(fs->inodes);
    fs->tree = NULL;
    fs->inodes = NULL;
    /* A daemon that fails before detaching closes its line: the parent then
     * takes this status from waitpid. */
    if (report >= 0)
        close(report);
    return status;
}

static const char *zm__program_name(int argc, char **argv)
{
    if (argc < 1 || argv[0] == NULL)
        return "zarrmount";
    const char *slash = strrchr(argv[0], '/');
    return slash ? slash + 1 : argv[0];
}

int zm_fs_main(int argc, char **argv)
{
    /* Chunks are made and freed by the thousand, each up to a few MiB: kept
     * on the heap (not a fresh mapping each, whose every page faults in
     * zeroed) and not trimmed back after each, glibc's memory is reused.
     * Measured: a fifth of the daemon's time on a walk from the disk cache
     * was page faults of new chunk buffers. */
    mallopt(M_MMAP_THRESHOLD, 8 << 20);
    mallopt(M_TRIM_THRESHOLD, 16 << 20);
    /* An arena a core, not eight: each FUSE thread would otherwise keep
     * its own free memory (measured: 75 MB more at the peak of a walk of
     * ten million cells, no faster). */
    mallopt(M_ARENA_MAX, (int)zm_config_cores());
    zm__fs fs;
    memset(&fs, 0, sizeof fs);
    clock_gettime(CLOCK_MONOTONIC, &fs.began);
    pthread_mutex_init(&fs.handles_lock, NULL);
    pthread_mutex_init(&fs.listing_lock, NULL);
    fs.handles.next = fs.handles.previous = &fs.handles;
    zm_err err;

    zm__log_capture_fuse(1);
    int rc = zm__fs_config_parse(argc, argv, &fs.config, &err);
    zm__log_capture_fuse(0);
    if (rc != 0) {
        zm__log(LOG_ERR, "%s", zm__fuse_reason(err.reason));
        zm__fs_config_free(&fs.config);
        return rc == -ENOMEM ? ZM__EXIT_FAILURE : ZM__EXIT_REFUSED;
    }
    if (fs.config.show_help || fs.config.show_version) {
        if (fs.config.show_help)
            zm__fs_print_help(stdout, zm__program_name(argc, argv));
        else
            printf("zarrmount %s (FUSE library %s)\n", ZM_VERSION, fuse_pkgversion());
        zm__fs_config_free(&fs.config);
        return ZM__EXIT_OK;
    }
    if (fs.config.read_write_ignored)
        zm__log(LOG_WARNING, "option rw ignored: zarrmount mounts read-only");
    /* Paths become absolute before the daemon changes directory to "/". */
    if ((rc = zm__fs_config_resolve(&fs.config, &err)) != 0 ||
        (rc = zm__fs_config_finish_fuse_args(&fs.config, &err)) != 0) {
        zm__log(LOG_ERR, "%s", err.reason);
        zm__fs_config_free(&fs.config);
        return rc == -ENOMEM ? ZM__EXIT_FAILURE : ZM__EXIT_REFUSED;
    }
    zm__choose_modes(&fs);
    zm__log_set_debug(fs.config.debug);

    int report = -1;
    if (!fs.config.foreground && (rc = zm__daemon_fork(&report, &err)) != 0) {
        zm__log(LOG_ERR, "%s", err.reason);
        zm__fs_config_free(&fs.config);
        return ZM__EXIT_FAILURE;
    }
    int status = zm__serve(&fs, report);
    zm__fs_config_free(&fs.config);
    zm__log_close();
    return status;
}
