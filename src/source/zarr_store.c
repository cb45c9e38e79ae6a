/* The Zarr store: a directory or a zip file, read by key.
 *
 * A directory store is walked once when it opens: every file below it, by
 * its relative path, with its size and mtime, into a manifest sorted by
 * path (keys are found by binary search, listings are ranges of it). Keys
 * are opened beneath the store's own descriptor, never through a symbolic
 * link, and each file opened is compared with the manifest, so a store
 * that changes under a mount is said to have changed (-EIO) instead of
 * mixing old metadata with new chunks.
 *
 * A zip store's central directory is read once, by hand. libzip and
 * minizip read members through their own handles and hand back bytes,
 * never where a member's data lies; a mount needs exactly that offset, to
 * pread a chunk of a stored member straight through the descriptor it was
 * opened and checked with, on many threads at once, without a library's
 * per-archive state or locks. The format's few records (end of central
 * directory, zip64's locator and record, central and local headers) are
 * read as APPNOTE.TXT describes them and as Python's zipfile (which zarr's
 * ZipStore writes and reads through) takes them: a name written twice is
 * its last entry, a prefix before the archive (a self-extractor's) is
 * allowed for. Every length and offset read is checked against the file
 * before it is used.
 */
#include "source/zarr_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

/* Zip records (APPNOTE.TXT 4.3): signatures and fixed sizes. */
#define ZM__ZIP_EOCD_SIG       0x06054b50u
#define ZM__ZIP_EOCD_SIZE      22
#define ZM__ZIP_COMMENT_MAX    65535
#define ZM__ZIP64_LOCATOR_SIG  0x07064b50u
#define ZM__ZIP64_LOCATOR_SIZE 20
#define ZM__ZIP64_EOCD_SIG     0x06064b50u
#define ZM__ZIP64_EOCD_SIZE    56
#define ZM__ZIP_CENTRAL_SIG    0x02014b50u
#define ZM__ZIP_CENTRAL_SIZE   46
#define ZM__ZIP_LOCAL_SIG      0x04034b50u
#define ZM__ZIP_LOCAL_SIZE     30
#define ZM__ZIP64_EXTRA_ID     0x0001u
#define ZM__ZIP_FLAG_ENCRYPTED 0x0001u
#define ZM__ZIP_STORED         0
#define ZM__ZIP_DEFLATED       8

/* Deflate gives at most 1032 bytes for one byte of stream (a run of one
 * value: 258 bytes per 2 bits); a member claiming more is lying about its
 * size, and is refused before that much memory is asked for. */
#define ZM__DEFLATE_RATIO_MAX 1032u

/* Bytes one pread asks for at most (Linux returns at most about 2 GiB). */
#define ZM__PREAD_MAX ((size_t)1 << 30)

/* One key of the store. */
typedef struct zm__entry {
    const char *key; /* NUL-terminated, in the store's names */
    size_t key_at;   /* while building: its offset in the names */
    size_t key_len;
    uint64_t size;          /* directory: the file's bytes; zip: the member's stored bytes */
    int64_t mtime_ns;       /* directory */
    uint64_t raw_size;      /* zip: its uncompressed size */
    uint64_t header_offset; /* zip: its local header (the archive's prefix added) */
    uint32_t crc32;         /* zip */
    uint16_t method, flags; /* zip */
    size_t order;           /* zip: its place in the central directory */
} zm__entry;

/* One directory of a directory store (its root is ""), for zm__store_check:
 * a file added or removed changes its directory's mtime. */
typedef struct zm__dir {
    size_t path_at;
    const char *path;
    uint64_t size;
    int64_t mtime_ns;
} zm__dir;

struct zm__store {
    zm__store_kind kind;
    int fd;
    char *path;
    zm__entry *entries; /* sorted by key (strcmp: bytewise), each key once */
    size_t count;
    char *names;
    zm_source_identity identity;
    /* Zip: each member's data offset, read from its local header on first
     * use (0: not yet; a member's data never starts at 0); where the
     * central directory starts (members lie before it). */
    _Atomic uint64_t *data_offsets;
    uint64_t central_start;
    /* Directory: the keys zm__store_get read (checked by zm__store_check):
     * a flag per entry, and the entries flagged, in a list (the check runs
     * at every read of a mount: it walks the documents read, never every
     * file), and its directories. */
    atomic_uchar *got;
    pthread_mutex_t got_mutex;
    size_t *got_list;
    size_t got_count, got_capacity;
    zm__dir *dirs;
    size_t dir_count;
    char *dir_names;
};

static uint16_t zm__le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t zm__le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t zm__le64(const uint8_t *p)
{
    return (uint64_t)zm__le32(p) | (uint64_t)zm__le32(p + 4) << 32;
}

static int64_t zm__mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int zm__entry_order(const void *a, const void *b)
{
    const zm__entry *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c != 0)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* A key names a file beneath the store and nothing else: no leading '/',
 * no empty component, no "." or "..". */
static bool zm__key_valid(const char *key, size_t length)
{
    if (length == 0 || key[0] == '/' || key[length - 1] == '/')
        return false;
    const char *p = key, *end = key + length;
    while (p < end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t n = slash ? (size_t)(slash - p) : (size_t)(end - p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n + 1;
    }
    return memchr(key, '\0', length) == NULL;
}

/* The entry of key, or NULL. */
static const zm__entry *zm__find(const zm__store *store, const char *key)
{
    size_t lo = 0, hi = store->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(store->entries[mid].key, key);
        if (c == 0)
            return &store->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The first entry whose key is not below key (bytewise). */
static size_t zm__lower_bound(const zm__store *store, const char *key, size_t length)
{
    size_t lo = 0, hi = store->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const zm__entry *e = &store->entries[mid];
        size_t n = e->key_len < length ? e->key_len : length;
        int c = memcmp(e->key, key, n);
        if (c < 0 || (c == 0 && e->key_len < length))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Exactly size bytes at offset of fd, or -EIO naming the key and where the
 * file ended. */
static int zm__pread_full(const zm__store *store, const char *key, int fd, void *buffer,
                          size_t size, uint64_t offset, uint64_t *bytes_read, zm_err *err)
{
    uint8_t *p = buffer;
    size_t done = 0;
    if (offset > (uint64_t)INT64_MAX || size > (uint64_t)INT64_MAX - offset)
        return zm_err_set(err, -EIO, "%s: %s: bytes at offset %llu are beyond any file",
                          store->path, key, (unsigned long long)offset);
    while (done < size) {
        size_t want = size - done < ZM__PREAD_MAX ? size - done : ZM__PREAD_MAX;
        ssize_t n = pread(fd, p + done, want, (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return zm_err_set(err, -EIO, "%s: %s: cannot read %zu bytes at offset %llu: %s",
                              store->path, key, want, (unsigned long long)(offset + done),
                              strerror(errno));
        if (n == 0)
            return zm_err_set(err, -EIO,
                              "%s: %s: the file ends at offset %llu, %zu bytes short of the %zu "
                              "asked from offset %llu",
                              store->path, key, (unsigned long long)(offset + done), size - done,
                              size, (unsigned long long)offset);
        done += (size_t)n;
        if (bytes_read != NULL)
            *bytes_read += (uint64_t)n;
    }
    return 0;
}

/* ---- Directory stores ------------------------------------------------------ */

typedef struct zm__walk {
    zm__store *store;
    zm__entry *entries;
    size_t count, capacity;
    zm__dir *dirs;
    size_t dir_count, dir_capacity;
    char *names;
    size_t names_length, names_capacity;
    char *dir_names;
    size_t dir_names_length, dir_names_capacity;
    char path[PATH_MAX]; /* the relative path being walked */
} zm__walk;

/* Appends length bytes and a NUL to a growing buffer; the offset they
 * start at into *at. */
static int zm__append(char **buffer, size_t *length, size_t *capacity, const char *bytes, size_t n,
                      size_t *at)
{
    if (*capacity - *length < n + 1) {
        size_t grown = *capacity ? *capacity : 4096;
        while (grown - *length < n + 1)
            grown *= 2;
        char *bigger = realloc(*buffer, grown);
        if (bigger == NULL)
            return -ENOMEM;
        *buffer = bigger;
        *capacity = grown;
    }
    memcpy(*buffer + *length, bytes, n);
    (*buffer)[*length + n] = '\0';
    *at = *length;
    *length += n + 1;
    return 0;
}

static int zm__grow(void **array, size_t *capacity, size_t count, size_t item)
{
    if (count < *capacity)
        return 0;
    size_t grown = *capacity ? *capacity * 2 : 256;
    void *bigger = realloc(*array, grown * item);
    if (bigger == NULL)
        return -ENOMEM;
    *array = bigger;
    *capacity = grown;
    return 0;
}

static const char *zm__file_kind(mode_t mode)
{
    if (S_ISLNK(mode))
        return "a symbolic link";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    return "not a regular file or directory";
}

static int zm__add_dir(zm__walk *w, size_t length, const struct stat *st, zm_err *err)
{
    if (zm__grow((void **)&w->dirs, &w->dir_capacity, w->dir_count, sizeof *w->dirs) != 0)
        return zm_err_set(err, -ENOMEM, "%s: out of memory listing its directories",
                          w->store->path);
    zm__dir *d = &w->dirs[w->dir_count];
    if (zm__append(&w->dir_names, &w->dir_names_length, &w->dir_names_capacity, w->path, length,
                   &d->path_at) != 0)
        return zm_err_set(err, -ENOMEM, "%s: out of memory listing its directories",
                          w->store->path);
    d->size = (uint64_t)st->st_size;
    d->mtime_ns = zm__mtime_ns(st);
    w->dir_count++;
    return 0;
}

/* Lists the directory dirfd (taken: closed here), whose relative path is
 * w->path[0 .. length), depth levels below the root. */
static int zm__walk_dir(zm__walk *w, int dirfd, size_t length, unsigned depth, zm_err *err)
{
    const char *root = w->store->path;
    DIR *dir = fdopendir(dirfd);
    if (dir == NULL) {
        int e = errno;
        close(dirfd);
        return zm_err_set(err, -e, "%s: cannot list %s: %s", root, length ? w->path : ".",
                          strerror(e));
    }
    int rc = 0;
    for (;;) {
        w->path[length] = '\0';
        errno = 0;
        struct dirent *d = readdir(dir);
        if (d == NULL) {
            int e = errno;
            if (e != 0)
                rc = zm_err_set(err, -e, "%s: cannot list %s: %s", root, length ? w->path : ".",
                                strerror(e));
            break;
        }
        const char *name = d->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        size_t n = strlen(name);
        size_t sub = length ? length + 1 + n : n;
        if (sub >= sizeof w->path) {
            rc = zm_err_set(err, -EINVAL, "%s: %.*s/%s: a path longer than %zu bytes", root,
                            (int)length, w->path, name, sizeof w->path - 1);
            break;
        }
        if (length)
            w->path[length] = '/';
        memcpy(w->path + (length ? length + 1 : 0), name, n + 1);
        if (w->count + w->dir_count >= ZM__STORE_FILES_MAX) {
            rc = zm_err_set(err, -EINVAL, "%s: more than %u files and directories (at %s)", root,
                            ZM__STORE_FILES_MAX, w->path);
            break;
        }
        struct stat st;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = zm_err_set(err, -errno, "%s: %s: cannot stat: %s", root, w->path, strerror(errno));
            break;
        }
        if (S_ISREG(st.st_mode)) {
            if (zm__grow((void **)&w->entries, &w->capacity, w->count, sizeof *w->entries) != 0) {
                rc = zm_err_set(err, -ENOMEM, "%s: out of memory listing its files", root);
                break;
            }
            zm__entry *e = &w->entries[w->count];
            memset(e, 0, sizeof *e);
            if (zm__append(&w->names, &w->names_length, &w->names_capacity, w->path, sub,
                           &e->key_at) != 0) {
                rc = zm_err_set(err, -ENOMEM, "%s: out of memory listing its files", root);
                break;
            }
            e->key_len = sub;
            e->size = (uint64_t)st.st_size;
            e->raw_size = e->size;
            e->mtime_ns = zm__mtime_ns(&st);
            w->count++;
        } else if (S_ISDIR(st.st_mode)) {
            if (depth + 1 > ZM__STORE_DEPTH_MAX) {
                rc = zm_err_set(err, -EINVAL, "%s: %s: directories nested deeper than %d levels",
                                root, w->path, ZM__STORE_DEPTH_MAX);
                break;
            }
            /* O_NOFOLLOW: the directory stat'ed above may have been
             * replaced by a link since; the one opened is checked to be
             * the one stat'ed. */
            int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            struct stat opened;
            if (fd < 0 || fstat(fd, &opened) != 0) {
                rc = zm_err_set(err, errno == ELOOP ? -EINVAL : -errno, "%s: %s: cannot open: %s",
                                root, w->path, strerror(errno));
                if (fd >= 0)
                    close(fd);
                break;
            }
            if (opened.st_dev != st.st_dev || opened.st_ino != st.st_ino) {
                close(fd);
                rc = zm_err_set(err, -EIO, "%s: %s: replaced while the store was listed", root,
                                w->path);
                break;
            }
            if ((rc = zm__add_dir(w, sub, &opened, err)) != 0) {
                close(fd);
                break;
            }
            if ((rc = zm__walk_dir(w, fd, sub, depth + 1, err)) != 0)
                break;
        } else {
            /* A mount serves the source's own bytes: a link (or a device)
             * would serve another file's, whatever it points at. */
            rc = zm_err_set(err, -EINVAL,
                            "%s: %s is %s: a directory store is read only from its own files", root,
                            w->path, zm__file_kind(st.st_mode));
            break;
        }
    }
    closedir(dir);
    return rc;
}

static int zm__open_directory(zm__store *store, const struct stat *st, zm_err *err)
{
    zm__walk *w = calloc(1, sizeof *w);
    if (w == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", store->path);
    w->store = store;
    int rc = 0;
    int fd = openat(store->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        rc = zm_err_set(err, -errno, "%s: cannot open: %s", store->path, strerror(errno));
        goto done;
    }
    if ((rc = zm__add_dir(w, 0, st, err)) != 0) {
        close(fd);
        goto done;
    }
    if ((rc = zm__walk_dir(w, fd, 0, 0, err)) != 0)
        goto done;

    for (size_t i = 0; i < w->count; i++)
        w->entries[i].key = w->names + w->entries[i].key_at;
    for (size_t i = 0; i < w->dir_count; i++)
        w->dirs[i].path = w->dir_names + w->dirs[i].path_at;
    /* (An empty store has no entries array: qsort must not see NULL.) */
    if (w->count > 1)
        qsort(w->entries, w->count, sizeof *w->entries, zm__entry_order);
    store->got = calloc(w->count ? w->count : 1, sizeof *store->got);
    XXH64_state_t *hash = XXH64_createState();
    if (store->got == NULL || hash == NULL) {
        XXH64_freeState(hash);
        rc = zm_err_set(err, -ENOMEM, "%s: out of memory", store->path);
        goto done;
    }
    for (size_t i = 0; i < w->count; i++)
        atomic_init(&store->got[i], 0);

    /* The manifest's digest: each file's path (with its NUL, so that no two
     * manifests run together alike), size and mtime, little-endian, in
     * path order. */
    XXH64_reset(hash, 0);
    uint64_t total = 0;
    int64_t newest = 0;
    for (size_t i = 0; i < w->count; i++) {
        const zm__entry *e = &w->entries[i];
        uint8_t fields[16];
        for (int b = 0; b < 8; b++) {
            fields[b] = (uint8_t)(e->size >> (8 * b));
            fields[8 + b] = (uint8_t)((uint64_t)e->mtime_ns >> (8 * b));
        }
        XXH64_update(hash, e->key, e->key_len + 1);
        XXH64_update(hash, fields, sizeof fields);
        total += e->size;
        if (i == 0 || e->mtime_ns > newest)
            newest = e->mtime_ns;
    }
    store->identity.device = st->st_dev;
    store->identity.inode = st->st_ino;
    store->identity.size = (off_t)total;
    store->identity.mtime_ns = newest;
    store->identity.digest = XXH64_digest(hash);
    XXH64_freeState(hash);

    store->entries = w->entries, w->entries = NULL;
    store->count = w->count;
    store->names = w->names, w->names = NULL;
    store->dirs = w->dirs, w->dirs = NULL;
    store->dir_count = w->dir_count;
    store->dir_names = w->dir_names, w->dir_names = NULL;
done:
    free(w->entries);
    free(w->names);
    free(w->dirs);
    free(w->dir_names);
    free(w);
    return rc;
}

/* Opens key beneath the store's directory without following any link
 * (openat2's RESOLVE_NO_SYMLINKS; where the kernel has no openat2, one
 * component at a time with O_NOFOLLOW). A descriptor, or -errno. */
static int zm__open_beneath(int dirfd, const char *key)
{
    /* O_NONBLOCK: a FIFO put where a file was is found by fstat, not
     * waited on. */
    const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    static atomic_int no_openat2;
    if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
        struct open_how how = {
            .flags = (uint64_t)flags,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, dirfd, key, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        if (errno != ENOSYS)
            return -errno;
        atomic_store_explicit(&no_openat2, 1, memory_order_relaxed);
    }
    int at = dirfd;
    const char *p = key;
    char component[NAME_MAX + 1];
    for (;;) {
        const char *slash = strchr(p, '/');
        if (slash == NULL) {
            int fd = openat(at, p, flags);
            int e = errno;
            if (at != dirfd)
                close(at);
            return fd >= 0 ? fd : -e;
        }
        size_t n = (size_t)(slash - p);
        if (n > NAME_MAX) {
            if (at != dirfd)
                close(at);
            return -ENAMETOOLONG;
        }
        memcpy(component, p, n);
        component[n] = '\0';
        int next = openat(at, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        if (at != dirfd)
            close(at);
        if (next < 0)
            return -e;
        at = next;
        p = slash + 1;
    }
}

static int zm__locate_file(zm__store *store, const char *key, const zm__entry *e, zm__stored *out,
                           zm_err *err)
{
    int fd = zm__open_beneath(store->fd, key);
    if (fd < 0) {
        if (fd == -ENOENT || fd == -ENOTDIR || fd == -ENAMETOOLONG) {
            if (e == NULL)
                return zm_err_set(err, -ENOENT, "%s: no key %s", store->path, key);
            return zm_err_set(err, -EIO, "%s: %s is gone since the store was opened", store->path,
                              key);
        }
        if (fd == -ELOOP || fd == -EXDEV)
            return zm_err_set(err, -EIO,
                              "%s: %s is reached through a symbolic link now: the store changed "
                              "since it was opened",
                              store->path, key);
        return zm_err_set(err, -EIO, "%s: %s: cannot open: %s", store->path, key, strerror(-fd));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e2 = errno;
        close(fd);
        return zm_err_set(err, -EIO, "%s: %s: cannot stat: %s", store->path, key, strerror(e2));
    }
    int rc = 0;
    if (e == NULL && S_ISDIR(st.st_mode))
        rc = zm_err_set(err, -ENOENT, "%s: no key %s (a directory)", store->path, key);
    else if (e == NULL)
        rc = zm_err_set(err, -EIO, "%s: %s appeared since the store was opened", store->path, key);
    else if (!S_ISREG(st.st_mode))
        rc = zm_err_set(err, -EIO, "%s: %s is %s now: the store changed since it was opened",
                        store->path, key, zm__file_kind(st.st_mode));
    else if ((uint64_t)st.st_size != e->size || zm__mtime_ns(&st) != e->mtime_ns)
        rc = zm_err_set(err, -EIO,
                        "%s: %s changed since the store was opened (%llu bytes, mtime %lld ns; "
                        "was %llu bytes, mtime %lld ns)",
                        store->path, key, (unsigned long long)st.st_size,
                        (long long)zm__mtime_ns(&st), (unsigned long long)e->size,
                        (long long)e->mtime_ns);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    out->fd = fd;
    out->owned = 1;
    out->offset = 0;
    out->size = e->size;
    out->raw_size = e->size;
    return 0;
}

/* ---- Zip stores ------------------------------------------------------------ */

static const char *zm__zip_method_name(unsigned method)
{
    switch (method) {
    case 1:
        return "shrink";
    case 6:
        return "implode";
    case 9:
        return "deflate64";
    case 12:
        return "bzip2";
    case 14:
        return "lzma";
    case 93:
        return "zstd";
    case 95:
        return "xz";
    case 98:
        return "ppmd";
    case 99:
        return "AES encryption";
    default:
        return "unknown";
    }
}

/* The end of central directory record: where the central directory lies
 * and how big it is, the archive's prefix worked out. */
typedef struct zm__zip_end {
    uint64_t central_offset; /* in the file */
    uint64_t central_size;
    uint64_t prefix; /* bytes before the archive (offsets in it are relative) */
} zm__zip_end;

static int zm__zip_find_end(zm__store *store, uint64_t file_size, zm__zip_end *end, zm_err *err)
{
    const char *path = store->path;
    if (file_size < ZM__ZIP_EOCD_SIZE)
        return zm_err_set(err, -EINVAL,
                          "%s: not a zip file (%llu bytes, too short for an end of central "
                          "directory record)",
                          path, (unsigned long long)file_size);
    size_t tail_size = (size_t)(file_size < ZM__ZIP_EOCD_SIZE + ZM__ZIP_COMMENT_MAX
                                    ? file_size
                                    : ZM__ZIP_EOCD_SIZE + ZM__ZIP_COMMENT_MAX);
    uint8_t *tail = malloc(tail_size);
    if (tail == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", path);
    uint64_t tail_at = file_size - tail_size;
    int rc = zm__pread_full(store, "end of central directory", store->fd, tail, tail_size, tail_at,
                            NULL, err);
    if (rc != 0) {
        free(tail);
        return rc;
    }
    /* The last signature whose comment fits in the file (a comment may
     * hold the signature's bytes; the record after it is the real one). */
    size_t at = SIZE_MAX;
    for (size_t i = tail_size - ZM__ZIP_EOCD_SIZE + 1; i-- > 0;) {
        if (zm__le32(tail + i) == ZM__ZIP_EOCD_SIG &&
            i + ZM__ZIP_EOCD_SIZE + zm__le16(tail + i + 20) <= tail_size) {
            at = i;
            break;
        }
    }
    if (at == SIZE_MAX) {
        free(tail);
        return zm_err_set(err, -EINVAL,
                          "%s: not a zip file (no end of central directory record in its last "
                          "%zu bytes)",
                          path, tail_size);
    }
    const uint8_t *eocd = tail + at;
    uint64_t eocd_at = tail_at + at;
    uint64_t central_size = zm__le32(eocd + 12);
    uint64_t central_offset = zm__le32(eocd + 16);
    unsigned central_entries = zm__le16(eocd + 10);
    free(tail);

    /* The central directory ends where the record after it starts: the
     * zip64 end record when there is one, else the end record. */
    uint64_t central_end = eocd_at;
    uint8_t locator[ZM__ZIP64_LOCATOR_SIZE];
    if (eocd_at >= ZM__ZIP64_LOCATOR_SIZE &&
        (rc = zm__pread_full(store, "zip64 end of central directory locator", store->fd, locator,
                             sizeof locator, eocd_at - ZM__ZIP64_LOCATOR_SIZE, NULL, err)) != 0)
        return rc;
    if (eocd_at >= ZM__ZIP64_LOCATOR_SIZE && zm__le32(locator) == ZM__ZIP64_LOCATOR_SIG) {
        uint64_t locator_at = eocd_at - ZM__ZIP64_LOCATOR_SIZE;
        if (zm__le32(locator + 4) != 0 || zm__le32(locator + 16) > 1)
            return zm_err_set(err, -EINVAL,
                              "%s: a zip archive spanning %u disks (only single-file archives "
                              "are read)",
                              path, zm__le32(locator + 16));
        /* The zip64 end record is where Python's zipfile looks for it
         * (just before the locator), or where the locator says (the two
         * differ only for an archive with a prefix or extensible data). */
        uint8_t record[ZM__ZIP64_EOCD_SIZE];
        uint64_t candidates[2] = {
            locator_at >= ZM__ZIP64_EOCD_SIZE ? locator_at - ZM__ZIP64_EOCD_SIZE : UINT64_MAX,
            zm__le64(locator + 8)};
        uint64_t record_at = UINT64_MAX;
        for (int c = 0; c < 2 && record_at == UINT64_MAX; c++) {
            if (candidates[c] > locator_at || locator_at - candidates[c] < ZM__ZIP64_EOCD_SIZE)
                continue;
            if ((rc = zm__pread_full(store, "zip64 end of central directory record", store->fd,
                                     record, sizeof record, candidates[c], NULL, err)) != 0)
                return rc;
            if (zm__le32(record) == ZM__ZIP64_EOCD_SIG)
                record_at = candidates[c];
        }
        /* No record: as Python's zipfile, the end record's own values,
         * unless they say they are in the zip64 record. */
        if (record_at == UINT64_MAX && (central_entries == UINT16_MAX ||
                                        central_size == UINT32_MAX || central_offset == UINT32_MAX))
            return zm_err_set(err, -EINVAL,
                              "%s: a zip64 end of central directory locator (at offset %llu) "
                              "with no zip64 end record where it says",
                              path, (unsigned long long)locator_at);
        if (record_at != UINT64_MAX) {
            central_size = zm__le64(record + 40);
            central_offset = zm__le64(record + 48);
            central_end = record_at;
        }
    }
    if (central_size > central_end || central_offset > central_end - central_size)
        return zm_err_set(err, -EINVAL,
                          "%s: its central directory (%llu bytes at offset %llu) lies outside "
                          "the file (its end record is at offset %llu)",
                          path, (unsigned long long)central_size,
                          (unsigned long long)central_offset, (unsigned long long)central_end);
    end->central_size = central_size;
    end->prefix = central_end - central_size - central_offset;
    end->central_offset = central_offset + end->prefix;
    return 0;
}

/* One central directory entry's zip64 extra field (0x0001): the 64-bit
 * values of the fields whose 32-bit ones are 0xFFFFFFFF, in this order. */
static int zm__zip64_extra(const zm__store *store, size_t index, const uint8_t *extra,
                           size_t length, zm__entry *e, zm_err *err)
{
    size_t p = 0;
    while (p + 4 <= length) {
        unsigned id = zm__le16(extra + p), n = zm__le16(extra + p + 2);
        if (p + 4 + n > length)
            return zm_err_set(err, -EINVAL,
                              "%s: central directory entry %zu: its extra field 0x%04x runs past "
                              "the entry's extra fields",
                              store->path, index, id);
        if (id == ZM__ZIP64_EXTRA_ID) {
            const uint8_t *f = extra + p + 4;
            size_t used = 0;
            uint64_t *fields[3] = {&e->raw_size, &e->size, &e->header_offset};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != UINT32_MAX)
                    continue;
                if (used + 8 > n)
                    return zm_err_set(err, -EINVAL,
                                      "%s: central directory entry %zu: its zip64 extra field is "
                                      "too short (%u bytes) for the sizes it must hold",
                                      store->path, index, n);
                *fields[i] = zm__le64(f + used);
                used += 8;
            }
        }
        p += 4 + n;
    }
    return 0;
}

static int zm__open_zip(zm__store *store, const struct stat *st, zm_err *err)
{
    const char *path = store->path;
    uint64_t file_size = (uint64_t)st->st_size;
    zm__zip_end end = {0};
    int rc = zm__zip_find_end(store, file_size, &end, err);
    if (rc != 0)
        return rc;
    uint8_t *central = malloc(end.central_size ? end.central_size : 1);
    if (central == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory for its central directory (%llu bytes)",
                          path, (unsigned long long)end.central_size);
    zm__entry *entries = NULL;
    size_t count = 0, capacity = 0;
    char *names = NULL;
    size_t names_length = 0, names_capacity = 0;
    if ((rc = zm__pread_full(store, "central directory", store->fd, central, end.central_size,
                             end.central_offset, NULL, err)) != 0)
        goto fail;

    /* As Python's zipfile: entries until the central directory's bytes are
     * used up (the record's count is 16 bits where zip64 is not used, and
     * writers let it wrap). */
    size_t index = 0;
    for (uint64_t p = 0; p < end.central_size; index++) {
        const uint8_t *h = central + p;
        if (end.central_size - p < ZM__ZIP_CENTRAL_SIZE || zm__le32(h) != ZM__ZIP_CENTRAL_SIG) {
            rc = zm_err_set(err, -EINVAL, "%s: central directory entry %zu (offset %llu): %s", path,
                            index, (unsigned long long)(end.central_offset + p),
                            end.central_size - p < ZM__ZIP_CENTRAL_SIZE
                                ? "truncated"
                                : "not a central directory header (bad signature)");
            goto fail;
        }
        size_t name_length = zm__le16(h + 28), extra_length = zm__le16(h + 30),
               comment_length = zm__le16(h + 32);
        uint64_t entry_size = ZM__ZIP_CENTRAL_SIZE + name_length + extra_length + comment_length;
        if (entry_size > end.central_size - p) {
            rc = zm_err_set(err, -EINVAL,
                            "%s: central directory entry %zu (offset %llu): its name and extra "
                            "fields run past the central directory",
                            path, index, (unsigned long long)(end.central_offset + p));
            goto fail;
        }
        if (index >= ZM__STORE_FILES_MAX) {
            rc = zm_err_set(err, -EINVAL, "%s: more than %u members", path, ZM__STORE_FILES_MAX);
            goto fail;
        }
        const char *name = (const char *)h + ZM__ZIP_CENTRAL_SIZE;
        zm__entry e = {0};
        e.flags = zm__le16(h + 8);
        e.method = zm__le16(h + 10);
        e.crc32 = zm__le32(h + 16);
        e.size = zm__le32(h + 20);
        e.raw_size = zm__le32(h + 24);
        e.header_offset = zm__le32(h + 42);
        e.order = index;
        e.key_len = name_length;
        if ((rc = zm__zip64_extra(store, index, h + ZM__ZIP_CENTRAL_SIZE + name_length,
                                  extra_length, &e, err)) != 0)
            goto fail;
        p += entry_size;
        /* Directory entries are no keys; names no key can spell ("..",
         * "a//b", a NUL) could never be read, and are left out. */
        if (!zm__key_valid(name, name_length))
            continue;
        if (e.header_offset > UINT64_MAX - end.prefix) {
            rc = zm_err_set(err, -EINVAL,
                            "%s: member %.*s: local header offset %llu is beyond "
                            "the file",
                            path, (int)name_length, name, (unsigned long long)e.header_offset);
            goto fail;
        }
        e.header_offset += end.prefix;
        if (zm__grow((void **)&entries, &capacity, count, sizeof *entries) != 0 ||
            zm__append(&names, &names_length, &names_capacity, name, name_length, &e.key_at) != 0) {
            rc = zm_err_set(err, -ENOMEM, "%s: out of memory reading its central directory", path);
            goto fail;
        }
        entries[count++] = e;
    }
    free(central);
    central = NULL;

    for (size_t i = 0; i < count; i++)
        entries[i].key = names + entries[i].key_at;
    /* A name written twice is its last entry (Python's zipfile keeps the
     * last one it reads; zarr's ZipStore rewrites metadata so). An empty
     * archive has no entries array: qsort must not see NULL. */
    if (count > 1)
        qsort(entries, count, sizeof *entries, zm__entry_order);
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        if (i + 1 < count && strcmp(entries[i].key, entries[i + 1].key) == 0)
            continue;
        entries[kept++] = entries[i];
    }
    store->data_offsets = malloc((kept ? kept : 1) * sizeof *store->data_offsets);
    if (store->data_offsets == NULL) {
        rc = zm_err_set(err, -ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (size_t i = 0; i < kept; i++)
        atomic_init(&store->data_offsets[i], 0);
    store->entries = entries;
    store->count = kept;
    store->names = names;
    store->central_start = end.central_offset;
    store->identity.device = st->st_dev;
    store->identity.inode = st->st_ino;
    store->identity.size = st->st_size;
    store->identity.mtime_ns = zm__mtime_ns(st);
    store->identity.digest = 0;
    return 0;
fail:
    free(central);
    free(entries);
    free(names);
    return rc;
}

static int zm__locate_member(zm__store *store, const char *key, const zm__entry *e, zm__stored *out,
                             zm_err *err)
{
    const char *path = store->path;
    if (e == NULL)
        return zm_err_set(err, -ENOENT, "%s: no member %s", path, key);
    if (e->flags & ZM__ZIP_FLAG_ENCRYPTED)
        return zm_err_set(err, -ENOTSUP, "%s: member %s is encrypted (method %u): not read", path,
                          key, e->method);
    if (e->method != ZM__ZIP_STORED && e->method != ZM__ZIP_DEFLATED)
        return zm_err_set(err, -ENOTSUP,
                          "%s: member %s is compressed with method %u (%s): only stored (0) and "
                          "deflate (8) are read",
                          path, key, e->method, zm__zip_method_name(e->method));
    if (e->method == ZM__ZIP_STORED && e->size != e->raw_size)
        return zm_err_set(err, -EIO,
                          "%s: member %s is stored, yet its sizes differ (%llu stored, %llu "
                          "uncompressed)",
                          path, key, (unsigned long long)e->size, (unsigned long long)e->raw_size);
    if (e->method == ZM__ZIP_DEFLATED && e->raw_size / ZM__DEFLATE_RATIO_MAX > e->size + 1)
        return zm_err_set(err, -EIO,
                          "%s: member %s claims %llu bytes inflated from %llu: more than deflate "
                          "can give",
                          path, key, (unsigned long long)e->raw_size, (unsigned long long)e->size);
    size_t i = (size_t)(e - store->entries);
    uint64_t data = atomic_load_explicit(&store->data_offsets[i], memory_order_acquire);
    if (data == 0) {
        /* The local header's name and extra lengths may differ from the
         * central directory's: the data starts after the local ones. Two
         * threads may both read it: they find the same offset. */
        uint64_t at = e->header_offset;
        if (at > store->central_start || store->central_start - at < ZM__ZIP_LOCAL_SIZE)
            return zm_err_set(err, -EIO,
                              "%s: member %s: its local header (offset %llu) is not before the "
                              "central directory (offset %llu)",
                              path, key, (unsigned long long)at,
                              (unsigned long long)store->central_start);
        size_t want = ZM__ZIP_LOCAL_SIZE + e->key_len;
        uint8_t small[ZM__ZIP_LOCAL_SIZE + 256];
        uint8_t *header = want <= sizeof small ? small : malloc(want);
        if (header == NULL)
            return zm_err_set(err, -ENOMEM, "%s: out of memory", path);
        if (want > store->central_start - at)
            want = (size_t)(store->central_start - at);
        int rc = zm__pread_full(store, key, store->fd, header, want, at, NULL, err);
        if (rc == 0 && zm__le32(header) != ZM__ZIP_LOCAL_SIG)
            rc = zm_err_set(err, -EIO,
                            "%s: member %s: no local header at offset %llu (bad signature)", path,
                            key, (unsigned long long)at);
        size_t name_length = rc == 0 ? zm__le16(header + 26) : 0;
        uint64_t extra_length = rc == 0 ? zm__le16(header + 28) : 0;
        if (rc == 0 && (name_length != e->key_len || want < ZM__ZIP_LOCAL_SIZE + name_length ||
                        memcmp(header + ZM__ZIP_LOCAL_SIZE, key, name_length) != 0))
            rc =
                zm_err_set(err, -EIO,
                           "%s: member %s: its local header (offset %llu) names another file "
                           "(%.*s)",
                           path, key, (unsigned long long)at,
                           (int)(want - ZM__ZIP_LOCAL_SIZE < name_length ? want - ZM__ZIP_LOCAL_SIZE
                                                                         : name_length),
                           (const char *)header + ZM__ZIP_LOCAL_SIZE);
        if (header != small)
            free(header);
        if (rc != 0)
            return rc;
        data = at + ZM__ZIP_LOCAL_SIZE + name_length + extra_length;
        if (data > store->central_start || e->size > store->central_start - data)
            return zm_err_set(err, -EIO,
                              "%s: member %s: its %llu bytes at offset %llu run into the central "
                              "directory (offset %llu)",
                              path, key, (unsigned long long)e->size, (unsigned long long)data,
                              (unsigned long long)store->central_start);
        atomic_store_explicit(&store->data_offsets[i], data, memory_order_release);
    }
    out->fd = store->fd;
    out->owned = 0;
    out->offset = data;
    out->size = e->size;
    out->deflated = e->method == ZM__ZIP_DEFLATED;
    out->raw_size = e->raw_size;
    out->crc32 = e->crc32;
    return 0;
}

/* Inflates a deflated member's stored bytes into exactly raw_size bytes at
 * out and checks them against its CRC-32. */
static int zm__inflate(const zm__store *store, const char *key, const zm__stored *stored,
                       const uint8_t *in, uint8_t *out, zm_err *err)
{
    const char *path = store->path;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        return zm_err_set(err, -ENOMEM, "%s: %s: cannot start inflating", path, key);
    uint8_t none = 0;
    uint64_t in_given = 0, out_given = 0;
    zs.next_in = (Bytef *)in;
    zs.next_out = stored->raw_size ? out : &none;
    int rc = 0;
    for (;;) {
        if (zs.avail_in == 0 && in_given < stored->size) {
            uint64_t n = stored->size - in_given;
            zs.next_in = (Bytef *)in + in_given;
            zs.avail_in = n > UINT_MAX ? UINT_MAX : (uInt)n;
            in_given += zs.avail_in;
        }
        if (zs.avail_out == 0 && out_given < stored->raw_size) {
            uint64_t n = stored->raw_size - out_given;
            zs.next_out = out + out_given;
            zs.avail_out = n > UINT_MAX ? UINT_MAX : (uInt)n;
            out_given += zs.avail_out;
        }
        int z = inflate(&zs, Z_NO_FLUSH);
        if (z == Z_STREAM_END)
            break;
        if (z == Z_OK)
            continue;
        if (z == Z_BUF_ERROR && zs.avail_out == 0 && out_given == stored->raw_size)
            rc = zm_err_set(err, -EIO, "%s: %s: inflates to more than its %llu bytes", path, key,
                            (unsigned long long)stored->raw_size);
        else if (z == Z_BUF_ERROR && zs.avail_in == 0 && in_given == stored->size)
            rc = zm_err_set(err, -EIO,
                            "%s: %s: its %llu stored bytes end before its deflate stream does "
                            "(%llu of %llu bytes inflated)",
                            path, key, (unsigned long long)stored->size,
                            (unsigned long long)zs.total_out, (unsigned long long)stored->raw_size);
        else if (z == Z_MEM_ERROR)
            rc = zm_err_set(err, -ENOMEM, "%s: %s: out of memory inflating", path, key);
        else
            rc = zm_err_set(err, -EIO, "%s: %s: not a deflate stream (%s, after %llu bytes)", path,
                            key, zs.msg ? zs.msg : "zlib error", (unsigned long long)zs.total_out);
        break;
    }
    uint64_t produced = zs.total_out;
    inflateEnd(&zs);
    if (rc != 0)
        return rc;
    if (produced != stored->raw_size)
        return zm_err_set(err, -EIO, "%s: %s: inflates to %llu bytes, not the %llu it claims", path,
                          key, (unsigned long long)produced, (unsigned long long)stored->raw_size);
    uint32_t crc = (uint32_t)crc32_z(0, out, (size_t)stored->raw_size);
    if (crc != stored->crc32)
        return zm_err_set(err, -EIO,
                          "%s: %s: CRC-32 of its inflated bytes is %08x, the central directory's "
                          "is %08x",
                          path, key, crc, stored->crc32);
    return 0;
}

/* ---- The interface --------------------------------------------------------- */

int zm__store_open(int fd, const char *path, zm__store **out, zm_err *err)
{
    *out = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return zm_err_set(err, -errno, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return zm_err_set(err, -EINVAL, "%s is %s: a Zarr store is a directory or a zip file", path,
                          zm__file_kind(st.st_mode));
    zm__store *store = calloc(1, sizeof *store);
    if (store != NULL)
        pthread_mutex_init(&store->got_mutex, NULL);
    if (store == NULL || (store->path = strdup(path)) == NULL) {
        free(store);
        return zm_err_set(err, -ENOMEM, "%s: out of memory", path);
    }
    store->fd = fd;
    store->kind = S_ISDIR(st.st_mode) ? ZM__STORE_DIRECTORY : ZM__STORE_ZIP;
    int rc = store->kind == ZM__STORE_DIRECTORY ? zm__open_directory(store, &st, err)
                                                : zm__open_zip(store, &st, err);
    if (rc != 0) {
        zm__store_close(store);
        return rc;
    }
    *out = store;
    return 0;
}

void zm__store_close(zm__store *store)
{
    if (store == NULL)
        return;
    free(store->entries);
    free(store->names);
    free(store->data_offsets);
    free(store->got);
    free(store->got_list);
    pthread_mutex_destroy(&store->got_mutex);
    free(store->dirs);
    free(store->dir_names);
    free(store->path);
    free(store);
}

zm__store_kind zm__store_get_kind(const zm__store *store)
{
    return store->kind;
}

/* zm__store_locate, with the key's entry (NULL when the store has none). */
static int zm__locate(zm__store *store, const char *key, zm__stored *out, const zm__entry **entry,
                      zm_err *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    *entry = NULL;
    if (!zm__key_valid(key, strlen(key)))
        return zm_err_set(err, -ENOENT,
                          "%s: \"%s\" is not a key of a store (an empty, \".\" or "
                          "\"..\" component, or a leading '/')",
                          store->path, key);
    const zm__entry *e = zm__find(store, key);
    *entry = e;
    return store->kind == ZM__STORE_DIRECTORY ? zm__locate_file(store, key, e, out, err)
                                              : zm__locate_member(store, key, e, out, err);
}

int zm__store_locate(zm__store *store, const char *key, zm__stored *out, zm_err *err)
{
    const zm__entry *e;
    return zm__locate(store, key, out, &e, err);
}

void zm__stored_done(zm__stored *stored)
{
    if (stored == NULL)
        return;
    if (stored->owned && stored->fd >= 0)
        close(stored->fd);
    stored->fd = -1;
    stored->owned = 0;
}

int zm__store_read(zm__store *store, const char *key, const zm__stored *stored, uint64_t offset,
                   void *buffer, size_t size, uint64_t *bytes_read, zm_err *err)
{
    if (offset > stored->raw_size || size > stored->raw_size - offset)
        return zm_err_set(
            err, -EIO, "%s: %s: bytes [%llu, %llu) asked, past the end of its %llu bytes",
            store->path, key, (unsigned long long)offset, (unsigned long long)(offset + size),
            (unsigned long long)stored->raw_size);
    if (!stored->deflated) {
        if (store->kind == ZM__STORE_DIRECTORY || offset != 0 || size != stored->size)
            return zm__pread_full(store, key, stored->fd, buffer, size, stored->offset + offset,
                                  bytes_read, err);
        /* A stored member read whole is checked against its CRC-32, as it
         * would be inflated. */
        int rc =
            zm__pread_full(store, key, stored->fd, buffer, size, stored->offset, bytes_read, err);
        uint32_t crc = rc == 0 ? (uint32_t)crc32_z(0, buffer, size) : 0;
        if (rc == 0 && crc != stored->crc32)
            rc = zm_err_set(err, -EIO,
                            "%s: %s: CRC-32 of its bytes is %08x, the central directory's is %08x",
                            store->path, key, crc, stored->crc32);
        return rc;
    }
    /* Deflate cannot start in the middle: the member is inflated whole
     * (and so its CRC-32 can be checked), then the range taken. */
    if (stored->raw_size >= SIZE_MAX || stored->size >= SIZE_MAX)
        return zm_err_set(err, -ENOMEM, "%s: %s: too large to inflate here", store->path, key);
    uint8_t *in = malloc(stored->size ? (size_t)stored->size : 1);
    int direct = offset == 0 && size == stored->raw_size && size > 0;
    uint8_t *whole = direct ? buffer : malloc(stored->raw_size ? (size_t)stored->raw_size : 1);
    int rc = 0;
    if (in == NULL || whole == NULL)
        rc = zm_err_set(err, -ENOMEM, "%s: %s: out of memory inflating %llu bytes", store->path,
                        key, (unsigned long long)stored->raw_size);
    if (rc == 0)
        rc = zm__pread_full(store, key, stored->fd, in, (size_t)stored->size, stored->offset,
                            bytes_read, err);
    if (rc == 0)
        rc = zm__inflate(store, key, stored, in, whole, err);
    if (rc == 0 && !direct && size > 0)
        memcpy(buffer, whole + offset, size);
    free(in);
    if (!direct)
        free(whole);
    return rc;
}

int zm__store_get(zm__store *store, const char *key, size_t limit, uint8_t **bytes, size_t *size,
                  uint64_t *bytes_read, zm_err *err)
{
    *bytes = NULL;
    *size = 0;
    zm__stored stored;
    const zm__entry *e;
    int rc = zm__locate(store, key, &stored, &e, err);
    if (rc != 0)
        return rc;
    if (stored.raw_size > limit || stored.raw_size >= SIZE_MAX) {
        zm__stored_done(&stored);
        return zm_err_set(err, -EFBIG, "%s: %s is %llu bytes, more than the %zu it may be",
                          store->path, key, (unsigned long long)stored.raw_size, limit);
    }
    uint8_t *value = malloc((size_t)stored.raw_size + 1);
    if (value == NULL) {
        zm__stored_done(&stored);
        return zm_err_set(err, -ENOMEM, "%s: %s: out of memory for its %llu bytes", store->path,
                          key, (unsigned long long)stored.raw_size);
    }
    rc = zm__store_read(store, key, &stored, 0, value, (size_t)stored.raw_size, bytes_read, err);
    zm__stored_done(&stored);
    if (rc != 0) {
        free(value);
        return rc;
    }
    value[stored.raw_size] = '\0';
    if (store->kind == ZM__STORE_DIRECTORY &&
        !atomic_exchange_explicit(&store->got[e - store->entries], 1, memory_order_relaxed)) {
        pthread_mutex_lock(&store->got_mutex);
        if (zm__grow((void **)&store->got_list, &store->got_capacity, store->got_count,
                     sizeof *store->got_list) == 0)
            store->got_list[store->got_count++] = (size_t)(e - store->entries);
        else
            rc = -ENOMEM;
        pthread_mutex_unlock(&store->got_mutex);
        if (rc != 0) {
            free(value);
            return zm_err_set(err, -ENOMEM, "%s: %s: out of memory", store->path, key);
        }
    }
    *bytes = value;
    *size = (size_t)stored.raw_size;
    return 0;
}

typedef struct zm__name {
    const char *bytes;
    size_t length;
} zm__name;

static int zm__name_order(const void *a, const void *b)
{
    const zm__name *x = a, *y = b;
    size_t n = x->length < y->length ? x->length : y->length;
    int c = memcmp(x->bytes, y->bytes, n);
    if (c != 0)
        return c;
    return x->length < y->length ? -1 : x->length > y->length;
}

int zm__store_list(zm__store *store, const char *prefix, zm_strings *names, zm_err *err)
{
    memset(names, 0, sizeof *names);
    size_t length = strlen(prefix);
    if (length > 0 && prefix[length - 1] == '/')
        length--;
    if (length > 0 && !zm__key_valid(prefix, length))
        return zm_err_set(err, -ENOENT, "%s: \"%s\" is not a path of a store", store->path, prefix);
    /* The keys below prefix are those starting "prefix/": one range of the
     * sorted keys. */
    char *below = malloc(length + 2);
    if (below == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", store->path);
    memcpy(below, prefix, length);
    below[length] = '/';
    size_t skip = length ? length + 1 : 0;
    size_t first = zm__lower_bound(store, below, skip);
    size_t last = first;
    while (last < store->count && store->entries[last].key_len >= skip &&
           memcmp(store->entries[last].key, below, skip) == 0)
        last++;
    free(below);
    if (last == first)
        return zm_err_set(err, -ENOENT, "%s: nothing below \"%s\"", store->path, prefix);

    zm__name *found = malloc((last - first) * sizeof *found);
    if (found == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory", store->path);
    for (size_t i = first; i < last; i++) {
        const zm__entry *e = &store->entries[i];
        const char *rest = e->key + skip;
        const char *slash = memchr(rest, '/', e->key_len - skip);
        found[i - first].bytes = rest;
        found[i - first].length = slash ? (size_t)(slash - rest) : e->key_len - skip;
    }
    /* The names are not in order as the keys are ("a.b" sorts before
     * "a/x", so "a" comes after "a.b"), nor each once: sorted here. */
    size_t n = last - first;
    if (n > 1)
        qsort(found, n, sizeof *found, zm__name_order);
    size_t count = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        if (count > 0 && zm__name_order(&found[count - 1], &found[i]) == 0)
            continue;
        found[count++] = found[i];
        total += found[i].length;
    }
    names->offsets = malloc((count + 1) * sizeof *names->offsets);
    names->bytes = malloc(total + 1);
    if (names->offsets == NULL || names->bytes == NULL) {
        free(found);
        zm_strings_free(names);
        return zm_err_set(err, -ENOMEM, "%s: out of memory", store->path);
    }
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        names->offsets[i] = at;
        memcpy(names->bytes + at, found[i].bytes, found[i].length);
        at += found[i].length;
    }
    names->offsets[count] = at;
    names->bytes[at] = '\0';
    names->count = count;
    free(found);
    return 0;
}

void zm__store_identity(const zm__store *store, zm_source_identity *out)
{
    *out = store->identity;
}

static int zm__check_stat(const zm__store *store, const char *what, const struct stat *st,
                          int directory, uint64_t size, int64_t mtime_ns, zm_err *err)
{
    if (directory ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
        return zm_err_set(err, -EIO, "%s: %s is %s now: the store changed since it was opened",
                          store->path, what,
                          S_ISREG(st->st_mode)   ? "a regular file"
                          : S_ISDIR(st->st_mode) ? "a directory"
                                                 : zm__file_kind(st->st_mode));
    if ((uint64_t)st->st_size != size || zm__mtime_ns(st) != mtime_ns)
        return zm_err_set(err, -EIO,
                          "%s: %s changed since the store was opened (%llu bytes, mtime %lld ns; "
                          "was %llu bytes, mtime %lld ns)%s",
                          store->path, what, (unsigned long long)st->st_size,
                          (long long)zm__mtime_ns(st), (unsigned long long)size,
                          (long long)mtime_ns,
                          directory ? ": a file in it was added, removed or renamed" : "");
    return 0;
}

int zm__store_check(zm__store *store, zm_err *err)
{
    struct stat st;
    if (store->kind == ZM__STORE_ZIP) {
        if (fstat(store->fd, &st) != 0)
            return zm_err_set(err, -EIO, "%s: cannot stat: %s", store->path, strerror(errno));
        return zm__check_stat(store, "the zip file", &st, 0, (uint64_t)store->identity.size,
                              store->identity.mtime_ns, err);
    }
    /* The path still names the directory the store was opened from (a
     * store renamed into its place is another store). */
    if (stat(store->path, &st) != 0)
        return zm_err_set(err, -EIO, "%s: gone since the store was opened (%s)", store->path,
                          strerror(errno));
    if (st.st_dev != store->identity.device || st.st_ino != store->identity.inode)
        return zm_err_set(err, -EIO,
                          "%s: names another directory than the one the store was opened from",
                          store->path);
    /* The documents read at open. A chunk file is checked as it is opened
     * (zm__store_locate: a file changed, gone, or new where the manifest
     * had none is EIO), so every byte served is covered without stating
     * every directory at every read. */
    int rc = 0;
    pthread_mutex_lock(&store->got_mutex);
    for (size_t i = 0; rc == 0 && i < store->got_count; i++) {
        const zm__entry *e = &store->entries[store->got_list[i]];
        if (fstatat(store->fd, e->key, &st, AT_SYMLINK_NOFOLLOW) != 0)
            rc = zm_err_set(err, -EIO, "%s: %s is gone since the store was opened (%s)",
                            store->path, e->key, strerror(errno));
        else
            rc = zm__check_stat(store, e->key, &st, 0, e->size, e->mtime_ns, err);
    }
    pthread_mutex_unlock(&store->got_mutex);
    return rc;
}
