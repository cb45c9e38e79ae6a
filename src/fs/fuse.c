/* The FUSE daemon: kernel requests (libfuse's low-level API) answered from
 * the tree (zarrmount/tree.h), by path. Everything served is immutable for the
 * life of a mount, so the kernel is told to cache names, attributes,
 * missing names, directory listings and file pages for a day, and every
 * call that would change something answers EROFS. Names, attributes,
 * files and refusals are here; directories are fuse_dir.c's, and the
 * mount's life (start-up, session, loop, source watcher) is mount.c's. */
#include "fs/fuse_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs/log.h"

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
/* Reads and readaheads the kernel keeps in flight at once (libfuse's
 * default is 12): parallel reads are how chunks get made in parallel. */
#define ZM__MAX_BACKGROUND 64

/* ---- Helpers ------------------------------------------------------------------ */

/* When this thread's request began (with -d): every operation starts by
 * asking for its file system, so that is where the clock starts. */
static _Thread_local struct timespec zm__request_began;

static double zm__seconds_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

zm__fs *zm__fs_of(fuse_req_t req)
{
    zm__fs *fs = fuse_req_userdata(req);
    if (fs->config.debug)
        clock_gettime(CLOCK_MONOTONIC, &zm__request_began);
    return fs;
}

void zm__trace(fuse_req_t req, const char *fmt, ...)
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
    zm_log(LOG_DEBUG, "pid %d: %s (%.3f ms, at %.6f s)", (int)fuse_req_ctx(req)->pid, line,
            1e3 * zm__seconds_between(&zm__request_began, &now),
            zm__seconds_between(&fs->began, &now));
}

const char *zm__shown(const char *path)
{
    return path[0] ? path : "/";
}

/* Answers a failed request: the errno to the caller, the reason to the log
 * once per reason. A missing name is an answer, not a failure, so ENOENT
 * is only traced. */
void zm__reply_failure(zm__fs *fs, fuse_req_t req, const char *operation, const char *path,
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
char *zm__join(const char *directory, const char *name)
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

mode_t zm__type_bits(zm_node_kind kind)
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

/* A path's attributes. Its times are the tree's (zm__tree_time_ns): derived
 * from what makes its bytes, not the source's mtime, so that a remount with
 * other options (another chunk size) gives every file a new time, and an
 * HTTP server's validators (nginx's ETag, Last-Modified) change with them. */
static void zm__fill_stat(const zm__fs *fs, uint64_t inode, const char *path, const zm_node *node,
                          struct stat *st)
{
    const struct stat *source = &fs->config.source_stat;
    memset(st, 0, sizeof *st);
    st->st_ino = inode;
    st->st_uid = source->st_uid;
    st->st_gid = source->st_gid;
    int64_t time_ns = zm__tree_time_ns(fs->tree, path, node);
    st->st_mtim.tv_sec = (time_t)(time_ns / 1000000000);
    st->st_mtim.tv_nsec = (long)(time_ns % 1000000000);
    st->st_atim = st->st_mtim;
    st->st_ctim = st->st_mtim;
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

void zm__fill_entry(const zm__fs *fs, uint64_t inode, const char *path, const zm_node *node,
                    struct fuse_entry_param *entry)
{
    memset(entry, 0, sizeof *entry);
    entry->ino = inode;
    entry->generation = 1; /* numbers are never reused for another path while known */
    /* A live file (stats.json) is looked up at every open, so that each
     * open sees a new snapshot. */
    entry->attr_timeout = node->live ? 0 : ZM__CACHE_SECONDS;
    entry->entry_timeout = node->live ? 0 : ZM__CACHE_SECONDS;
    zm__fill_stat(fs, inode, path, node, &entry->attr);
}

void zm__handle_add(zm__fs *fs, zm__handle *handle)
{
    pthread_mutex_lock(&fs->handles_lock);
    handle->next = fs->handles.next;
    handle->previous = &fs->handles;
    fs->handles.next->previous = handle;
    fs->handles.next = handle;
    pthread_mutex_unlock(&fs->handles_lock);
}

void zm__handle_remove(zm__fs *fs, zm__handle *handle)
{
    pthread_mutex_lock(&fs->handles_lock);
    handle->previous->next = handle->next;
    handle->next->previous = handle->previous;
    pthread_mutex_unlock(&fs->handles_lock);
}

/* Frees the handles still open when the session is over. */
void zm__handles_free_all(zm__fs *fs)
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
        zm_log(LOG_DEBUG, "readahead stays at the kernel's default (%s: %s)", path, strerror(errno));
        return;
    }
    char value[32];
    int n = snprintf(value, sizeof value, "%u\n", ZM__MAX_READ / 1024);
    if (write(fd, value, (size_t)n) != n)
        zm_log(LOG_DEBUG, "readahead stays at the kernel's default (%s: %s)", path, strerror(errno));
    close(fd);
}

/* Takes count lookups away from inode. A snapshot of a live file goes
 * with its inode (nobody can look that inode up again: each lookup of the
 * file takes a new snapshot). */
void zm__forget(zm__fs *fs, uint64_t inode, uint64_t count)
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
    zm__fill_entry(fs, inode, path, &held, &entry);
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
        struct fuse_entry_param missing = {
            .ino = 0, .entry_timeout = zm__tree_changes(fs->tree, path) ? 0 : ZM__CACHE_SECONDS};
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
            zm__fill_stat(fs, inode, path, &node, &st);
            ZM__TRACE(fs, req, "getattr %s: %llu bytes now", path, (unsigned long long)node.size);
            fuse_reply_attr(req, &st, 0);
        }
        free(path);
        return;
    }
    /* Its time is its path's. */
    char *path = NULL;
    if ((rc = zm__inodes_get(fs->inodes, inode, &path, NULL)) != 0) {
        zm__reply_failure(fs, req, "getattr", "(unknown inode)", rc, NULL);
        return;
    }
    struct stat st;
    zm__fill_stat(fs, inode, path, &node, &st);
    free(path);
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
                zm_log(LOG_WARNING, "the kernel refused FUSE passthrough (%s): the daemon serves "
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

/* A read's reply, sent by the tree while it holds the bytes. */
struct read_reply {
    zm__fs *fs;
    fuse_req_t req;
    const char *path;
    off_t offset;
    size_t size;
    int sent;
};

static void reply_read(void *context, const void *bytes, size_t size)
{
    struct read_reply *r = context;
    ZM__TRACE(r->fs, r->req, "read %s at %lld, %zu bytes: %zu", r->path, (long long)r->offset,
              r->size, size);
    r->sent = 1;
    fuse_reply_buf(r->req, bytes, size);
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
    /* The reply is sent from where the bytes lie (the file cache's entry,
     * or with codec none a walk), with no copy on the way. */
    struct read_reply reply = {fs, req, path, offset, size, 0};
    size_t done = 0;
    rc = zm__tree_send(fs->tree, path, (uint64_t)offset, size, reply_read, &reply, &done, &err);
    if (rc != 0)
        zm__reply_failure(fs, req, "read", path, rc, &err);
    else if (!reply.sent)
        reply_read(&reply, NULL, 0);
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

const struct fuse_lowlevel_ops zm__operations = {
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
