/* Work kept across mounts: entries in a directory, each filed under a space
 * (what it belongs to: for the tree, a source's identity and the versions of
 * the codec libraries that made the bytes) and a key, checked by xxh3 on
 * every read (a damaged entry is removed, never served), written under a
 * temporary name and renamed (a crash leaves no half entry under a real
 * name), and the whole bounded, least recently used first out.
 *
 * Layout (format 2): DIRECTORY/v2/<xxh3 of space>/ holds for each key
 *   <xxh3 of key>.entry                  the header: magic, format, the
 *                                        lengths, the payload's xxh3, the
 *                                        header's own xxh3, then the space
 *                                        and the key in full (two keys
 *                                        hashing alike are told apart);
 *   <xxh3 of key>-<payload xxh3>.data    the payload, exactly its bytes, so
 *                                        that the kernel can serve it as it
 *                                        lies (FUSE passthrough).
 * The payload is filed first and the header last: an entry exists once its
 * header does. A replaced payload has another name, so a reader holding the
 * old header never meets the new bytes. A newer format lives beside an
 * older one; format 1 (DIRECTORY/v1, the header and the payload in one
 * file) is still read, and an entry found there is moved to format 2.
 * Eviction removes whatever is oldest, other formats first.
 *
 * Trust. Whoever can write an entry decides what a mount serves: the xxh3
 * of a payload finds accidental damage (a flipped bit, a cut or half-written
 * file), not a writer who can compute it again. So the directory is used
 * only if it is private to the user running the mount: a real directory
 * (not a symbolic link) owned by that user and writable by nobody else,
 * below directories that only root or that user can change (each owned by
 * one of them, writable by nobody else unless sticky: OpenSSH's rule for a
 * secure path). It is opened component by component, each from its checked
 * parent, never following a link at the end of a name, and every operation
 * on the cache's files is made relative to it (openat, unlinkat, renameat,
 * fstatat, each without following a link), so a symbolic link placed
 * anywhere inside is neither followed nor served. Only the cache's own
 * files are ever counted, read, replaced or removed: regular files named as
 * it names them (<16 hex>.entry, <16 hex>-<16 hex>.data, tmp.<pid>.<n>), in
 * a space directory (<16 hex>) of a format directory (v<n>). Anything else
 * found there is left alone, and counted as foreign (zm_disk_foreign). */
#include "zarrmount/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define DISK_FORMAT      2
#define DISK_FORMAT_NAME "v2"
#define DISK_MAGIC       "ZMCACHE"
/* Evicting goes below the bound by this share, so that every write past
 * it does not rescan the directory. */
#define EVICT_TO_PERCENT 90
/* A payload filed with no header (a crash between the two renames, or a
 * header removed under a reader) is removed at open once this old: a
 * younger one may be another mount's write in progress. */
#define ORPHAN_SECONDS 600
/* The longest header: the space and key are a source identity and a path. */
#define HEADER_MAX (64 * 1024)
/* Symbolic links above the cache directory followed before giving up. */
#define LINKS_ABOVE_MAX 8

struct disk_header {
    char magic[8];
    uint32_t format;
    uint32_t space_length;
    uint32_t key_length;
    uint32_t reserved;
    uint64_t payload_length;
    uint64_t payload_xxh3;
    uint64_t header_xxh3; /* of everything above, the space and the key */
};

struct zm_disk {
    char *directory;  /* DIRECTORY, for messages */
    int directory_fd; /* DIRECTORY, checked private: every file operation is relative to it */
    int format_fd;    /* DIRECTORY/v<format> */
    uint64_t capacity;
    pthread_mutex_t lock;
    /* Puts one at a time: checking the bound, evicting and writing are one
     * step, or two threads could each make room for one entry and write
     * two. (Other processes sharing the directory can pass the bound by
     * what they are writing, until their next put evicts.) */
    pthread_mutex_t put_lock;
    uint64_t bytes_held; /* what this process knows of (scanned at open, then kept) */
    uint64_t entries;
    _Atomic uint64_t hits, misses, writes, evictions, damaged, migrated;
    _Atomic uint64_t temporary; /* names of temporary files */
    /* Files under the directory that are not the cache's own, as the last
     * walk over it found them (under lock), and the first of them. */
    uint64_t foreign;
    char foreign_example[256];
    /* Payloads this process checked, as they were then (see struct checked):
     * lent again without hashing them while they are unchanged. */
    pthread_mutex_t checked_lock;
    struct checked *checked;
    size_t checked_count;
};

/* A payload checked against its hash, and its file as it was then: a file
 * written to since has another ctime (which no one can set back), so an
 * unchanged identity means unchanged bytes, and checking it again would
 * only cost a read of every byte at every open. */
struct checked {
    uint64_t key; /* xxh3 of space and key; 0: an empty slot */
    uint64_t length, xxh3;
    dev_t dev;
    ino_t ino;
    struct timespec mtime, ctime;
    time_t touched; /* when its header's time was last moved (for eviction) */
};

/* Slots of the table (open addressing); past half full it starts again
 * empty: a forgotten entry is checked again, nothing else. */
#define CHECKED_SLOTS 65536
/* A header's time moves at most this often when its payload is lent. */
#define TOUCH_SECONDS 60

int zm_disk_default_directory(char *out, size_t size, zm_err *err)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int written;
    if (xdg != NULL && xdg[0] == '/') {
        written = snprintf(out, size, "%s/zarrmount", xdg);
    } else if (geteuid() == 0) {
        written = snprintf(out, size, "/var/cache/zarrmount");
    } else if (home != NULL && home[0] == '/') {
        written = snprintf(out, size, "%s/.cache/zarrmount", home);
    } else {
        /* No usable $HOME: the user database's home, as a login would set. */
        struct passwd entry, *found = NULL;
        char buffer[4096];
        if (getpwuid_r(geteuid(), &entry, buffer, sizeof buffer, &found) != 0 || found == NULL ||
            found->pw_dir == NULL || found->pw_dir[0] != '/') {
            if (size > 0)
                out[0] = '\0';
            return zm_err_set(err, -ENOENT,
                              "no default cache directory: $XDG_CACHE_HOME and $HOME are not "
                              "absolute paths and uid %u has no home directory",
                              (unsigned)geteuid());
        }
        written = snprintf(out, size, "%s/.cache/zarrmount", found->pw_dir);
    }
    if (written < 0 || (size_t)written >= size)
        return zm_err_set(err, -ENAMETOOLONG, "the default cache directory's path is too long");
    return 0;
}

/* ---- Trust ------------------------------------------------------------------------ */

/* Why the directory st cannot hold this user's cache (a directory owned by
 * the user that nobody else may write to), or NULL. */
static const char *why_not_private(const struct stat *st, char *why, size_t size)
{
    unsigned self = (unsigned)geteuid();
    if (!S_ISDIR(st->st_mode))
        snprintf(why, size, "not a directory");
    else if (st->st_uid != geteuid())
        snprintf(why, size, "owned by uid %u, not by uid %u who runs the mount",
                 (unsigned)st->st_uid, self);
    else if ((st->st_mode & (S_IWGRP | S_IWOTH)) == (S_IWGRP | S_IWOTH))
        snprintf(why, size, "writable by its group and by others (mode %04o)",
                 (unsigned)(st->st_mode & 07777));
    else if (st->st_mode & S_IWGRP)
        snprintf(why, size, "writable by its group (mode %04o)", (unsigned)(st->st_mode & 07777));
    else if (st->st_mode & S_IWOTH)
        snprintf(why, size, "writable by others (mode %04o)", (unsigned)(st->st_mode & 07777));
    else
        return NULL;
    return why;
}

/* Why a directory above the cache could let someone else swap what is
 * below it, or NULL: it must be owned by root or the user, and writable by
 * nobody else unless sticky (then others cannot rename or remove what is
 * not theirs, as in /tmp). */
static const char *why_not_safe_above(const struct stat *st, char *why, size_t size)
{
    if (st->st_uid != 0 && st->st_uid != geteuid())
        snprintf(why, size, "owned by uid %u, neither root nor uid %u who runs the mount",
                 (unsigned)st->st_uid, (unsigned)geteuid());
    else if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
        snprintf(why, size, "writable by %s and not sticky (mode %04o)",
                 (st->st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(st->st_mode & 07777));
    else
        return NULL;
    return why;
}

/* An error of mkdirat or faccessat, with EPERM (a file system that makes no
 * directories, an immutable one) told apart from -EPERM, "not private". */
static int make_error(int error)
{
    return error == EPERM ? -EACCES : -error;
}

#define COMPONENTS_MAX 512

/* Opens directory (absolute) as the cache's directory, making what is
 * missing (0700): from "/" down, each component opened from its parent
 * (checked first) without following a link, the last one checked private.
 * A symbolic link above the last component is followed only if root or the
 * user owns it, by resolving the path up to it and starting again. -EPERM
 * when it is not private (err says which directory and why), -errno. */
static int open_private(const char *directory, int *out, zm_err *err)
{
    *out = -1;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", directory) >= (int)sizeof path)
        return zm_err_set(err, -ENAMETOOLONG, "cache directory %s: the path is too long",
                          directory);
    char why[160];
    for (int links = 0;; links++) {
        struct {
            size_t start, end;
        } parts[COMPONENTS_MAX];
        size_t count = 0;
        for (size_t at = 0; path[at] != '\0';) {
            if (path[at] == '/') {
                at++;
                continue;
            }
            size_t end = at;
            while (path[end] != '\0' && path[end] != '/')
                end++;
            if ((end - at == 1 && path[at] == '.') ||
                (end - at == 2 && path[at] == '.' && path[at + 1] == '.'))
                return zm_err_set(err, -EINVAL,
                                  "cache directory %s: give it without . or .. components",
                                  directory);
            if (end - at > NAME_MAX || count == COMPONENTS_MAX)
                return zm_err_set(err, -ENAMETOOLONG, "cache directory %s: the path is too long",
                                  directory);
            parts[count].start = at;
            parts[count].end = end;
            count++;
            at = end;
        }
        int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return zm_err_set(err, -errno, "cache directory %s: cannot open /: %s", directory,
                              strerror(errno));
        int rc = 0;
        size_t followed = count; /* the component that is a link to follow, if < count */
        for (size_t i = 0; rc == 0 && i <= count; i++) {
            /* The directory fd is: "/" (i == 0) or path up to component i - 1. */
            int shown = i == 0 ? 1 : (int)parts[i - 1].end;
            struct stat st;
            if (fstat(fd, &st) != 0) {
                rc = zm_err_set(err, -errno, "cache directory %s: %.*s: %s", directory, shown, path,
                                strerror(errno));
                break;
            }
            if (i == count) {
                if (why_not_private(&st, why, sizeof why) != NULL)
                    rc = zm_err_set(err, -EPERM, "cache directory %s is %s", directory, why);
                break;
            }
            if (why_not_safe_above(&st, why, sizeof why) != NULL) {
                rc = zm_err_set(err, -EPERM, "cache directory %s: %.*s above it is %s", directory,
                                shown, path, why);
                break;
            }
            char name[NAME_MAX + 1];
            size_t length = parts[i].end - parts[i].start;
            memcpy(name, path + parts[i].start, length);
            name[length] = '\0';
            /* O_PATH: a directory above may let the user through without
             * letting it list (mode 0711). */
            int flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
            int next = openat(fd, name, flags);
            if (next < 0 && errno == ENOENT) {
                if (mkdirat(fd, name, 0700) == 0)
                    /* Exactly 0700, whatever the umask. Its parent was
                     * checked: nobody else can have swapped it since, and
                     * it is checked itself once opened. */
                    (void)fchmodat(fd, name, 0700, 0);
                else if (errno != EEXIST)
                    rc = zm_err_set(err, make_error(errno),
                                    "cannot make the cache directory %.*s: %s", (int)parts[i].end,
                                    path, strerror(errno));
                if (rc == 0)
                    next = openat(fd, name, flags);
            }
            if (rc == 0 && next < 0) {
                int error = errno;
                struct stat link;
                int seen = fstatat(fd, name, &link, AT_SYMLINK_NOFOLLOW) == 0;
                if (seen && S_ISLNK(link.st_mode) && i + 1 == count)
                    rc =
                        zm_err_set(err, -EPERM, "cache directory %s is a symbolic link", directory);
                else if (seen && S_ISLNK(link.st_mode) && link.st_uid != 0 &&
                         link.st_uid != geteuid())
                    rc = zm_err_set(err, -EPERM,
                                    "cache directory %s: %.*s above it is a symbolic link owned by "
                                    "uid %u, neither root nor uid %u who runs the mount",
                                    directory, (int)parts[i].end, path, (unsigned)link.st_uid,
                                    (unsigned)geteuid());
                else if (seen && S_ISLNK(link.st_mode))
                    followed = i;
                else if (error == ENOTDIR || (seen && !S_ISDIR(link.st_mode)))
                    rc = zm_err_set(err, -ENOTDIR, "cache directory %s: %.*s is not a directory",
                                    directory, (int)parts[i].end, path);
                else
                    rc = zm_err_set(err, -error, "cache directory %s: %.*s: %s", directory,
                                    (int)parts[i].end, path, strerror(error));
            }
            if (rc != 0 || followed < count) {
                if (next >= 0)
                    close(next);
                break;
            }
            close(fd);
            fd = next;
        }
        if (rc == 0 && followed == count) {
            *out = fd;
            return 0;
        }
        close(fd);
        if (rc != 0)
            return rc;
        /* A link above: resolve the path up to it (through links root or
         * the user made: its directory was checked) and start again. */
        if (links == LINKS_ABOVE_MAX)
            return zm_err_set(err, -ELOOP, "cache directory %s: too many symbolic links above it",
                              directory);
        char prefix[PATH_MAX], real[PATH_MAX];
        snprintf(prefix, sizeof prefix, "%.*s", (int)parts[followed].end, path);
        if (realpath(prefix, real) == NULL)
            return zm_err_set(err, -errno, "cache directory %s: %s: %s", directory, prefix,
                              strerror(errno));
        char again[PATH_MAX];
        if (snprintf(again, sizeof again, "%s%s", real, path + parts[followed].end) >=
            (int)sizeof again)
            return zm_err_set(err, -ENAMETOOLONG, "cache directory %s: the path is too long",
                              directory);
        memcpy(path, again, sizeof path);
    }
}

/* ---- Names ---------------------------------------------------------------------- */

enum file_kind { K_OTHER, K_TEMPORARY, K_ENTRY, K_DATA };

static int is_hex(const char *text, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f')))
            return 0;
    return 1;
}

static int is_digits(const char *text, size_t length)
{
    if (length == 0)
        return 0;
    for (size_t i = 0; i < length; i++)
        if (text[i] < '0' || text[i] > '9')
            return 0;
    return 1;
}

/* What a file is by its name, strictly: "<16 hex>.entry",
 * "<16 hex>-<16 hex>.data", "tmp.<pid>.<n>" (decimal, no sign), or
 * anything else (not the cache's). stem gets the key's hash (the first 16
 * characters) for entries and payloads. */
static enum file_kind kind_of(const char *name, char stem[17])
{
    size_t length = strlen(name);
    if (length > 4 && memcmp(name, "tmp.", 4) == 0) {
        const char *dot = strchr(name + 4, '.');
        if (dot == NULL || dot - (name + 4) > 10 || length - (size_t)(dot + 1 - name) > 20 ||
            !is_digits(name + 4, (size_t)(dot - (name + 4))) ||
            !is_digits(dot + 1, length - (size_t)(dot + 1 - name)) || name[4] == '0')
            return K_OTHER;
        return K_TEMPORARY;
    }
    if (length < 16 || !is_hex(name, 16))
        return K_OTHER;
    memcpy(stem, name, 16);
    stem[16] = '\0';
    if (length == 22 && strcmp(name + 16, ".entry") == 0)
        return K_ENTRY;
    if (length == 38 && name[16] == '-' && is_hex(name + 17, 16) && strcmp(name + 33, ".data") == 0)
        return K_DATA;
    return K_OTHER;
}

/* Whether name is a format directory's (v<n>: decimal, no leading zero);
 * *format gets n. */
static int is_format_name(const char *name, int *format)
{
    size_t length = strlen(name);
    if (length < 2 || length > 8 || name[0] != 'v' || !is_digits(name + 1, length - 1) ||
        (name[1] == '0' && length > 2))
        return 0;
    *format = atoi(name + 1);
    return 1;
}

static int is_space_name(const char *name)
{
    return strlen(name) == 16 && is_hex(name, 16);
}

/* The names of space's directory and of key's header in it. */
static void names_of(const char *space, const char *key, char space_name[17], char entry[24])
{
    snprintf(space_name, 17, "%016" PRIx64, (uint64_t)XXH3_64bits(space, strlen(space)));
    snprintf(entry, 24, "%016" PRIx64 ".entry", (uint64_t)XXH3_64bits(key, strlen(key)));
}

/* The payload's name beside a header (<stem>.entry). */
static void data_name(const char *entry, uint64_t payload_xxh3, char out[48])
{
    snprintf(out, 48, "%.16s-%016" PRIx64 ".data", entry, payload_xxh3);
}

/* A file's path, for messages only (nothing is opened by it). */
static void describe(const zm_disk *disk, const char *format, const char *space_name,
                     const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s/%s/%s", disk->directory, format, space_name, name);
}

/* ---- Opening the cache's own files ------------------------------------------------- */

/* A directory of the cache: name in parent, never through a link. 0 (*fd
 * set), -ENOENT (none), -ELOOP (something else by that name: a symbolic
 * link or a file, not the cache's), -errno. With create, made (0700) if
 * missing. */
static int open_directory(int parent, const char *name, int create, int *fd)
{
    int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    *fd = openat(parent, name, flags);
    if (*fd < 0 && errno == ENOENT && create) {
        if (mkdirat(parent, name, 0700) == 0 || errno == EEXIST)
            *fd = openat(parent, name, flags);
        else
            return make_error(errno);
    }
    if (*fd >= 0)
        return 0;
    int error = errno;
    struct stat st;
    if (error == ENOTDIR || error == ELOOP)
        return fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? -ELOOP : -ENOENT;
    return -error;
}

/* The space directory of the current format (or of format, "v1"). */
static int open_space(const zm_disk *disk, const char *format, const char *space_name, int create,
                      int *fd)
{
    if (format == NULL)
        return open_directory(disk->format_fd, space_name, create, fd);
    int format_fd;
    int rc = open_directory(disk->directory_fd, format, 0, &format_fd);
    if (rc != 0)
        return rc;
    rc = open_directory(format_fd, space_name, create, fd);
    close(format_fd);
    return rc;
}

/* One of the cache's files for reading: name in directory, a regular file,
 * never through a link (a FIFO does not block the open). 0 (*fd, *st set),
 * -ENOENT, -ELOOP (a symbolic link or not a regular file: not the
 * cache's), -errno. */
static int open_own(int directory, const char *name, int *fd, struct stat *st)
{
    *fd = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0)
        return errno == ELOOP ? -ELOOP : -errno;
    int rc = fstat(*fd, st) != 0 ? -errno : S_ISREG(st->st_mode) ? 0 : -ELOOP;
    if (rc != 0) {
        close(*fd);
        *fd = -1;
        return rc;
    }
    /* Read as any file is (the kernel may read it for a reader). */
    (void)fcntl(*fd, F_SETFL, 0);
    return 0;
}

/* Whether name in directory is absent or one of the cache's files (a
 * regular file): what the cache may replace or remove. */
static int replaceable(int directory, const char *name, struct stat *st)
{
    if (fstatat(directory, name, st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT;
    return S_ISREG(st->st_mode);
}

/* ---- Census and leftovers --------------------------------------------------------- */

/* One of the cache's files as a walk meets it. */
struct visit {
    int format;              /* n of v<n> */
    const char *format_name; /* "v<n>" */
    const char *space_name;
    int space_fd; /* its directory */
    const char *name;
    enum file_kind kind;
    char stem[17];
    const struct stat *st;
};

typedef void (*visit_fn)(void *context, const struct visit *v);

struct foreign {
    uint64_t count;
    char example[256];
};

static void foreign_file(const zm_disk *disk, struct foreign *f, const char *a, const char *b,
                         const char *c)
{
    if (f->count++ == 0)
        snprintf(f->example, sizeof f->example, "%s/%s%s%s%s%s", disk->directory, a, b ? "/" : "",
                 b ? b : "", c ? "/" : "", c ? c : "");
}

static DIR *open_listing(int directory)
{
    int fd = openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (d == NULL)
        close(fd);
    return d;
}

static int dot_or_dotdot(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* Calls visit for every one of the cache's files (all formats): regular
 * files with the cache's names in DIRECTORY/v<n>/<16 hex>/, each directory
 * opened without following a link. Anything else is counted in the disk's
 * foreign files and never visited. */
static void walk_files(zm_disk *disk, visit_fn visit, void *context)
{
    struct foreign f = {0, ""};
    DIR *top = open_listing(disk->directory_fd);
    struct dirent *e;
    while (top != NULL && (e = readdir(top)) != NULL) {
        int format, format_fd;
        if (dot_or_dotdot(e->d_name))
            continue;
        if (!is_format_name(e->d_name, &format) ||
            open_directory(disk->directory_fd, e->d_name, 0, &format_fd) != 0) {
            foreign_file(disk, &f, e->d_name, NULL, NULL);
            continue;
        }
        DIR *spaces = open_listing(format_fd);
        struct dirent *s;
        while (spaces != NULL && (s = readdir(spaces)) != NULL) {
            int space_fd;
            if (dot_or_dotdot(s->d_name))
                continue;
            if (!is_space_name(s->d_name) ||
                open_directory(format_fd, s->d_name, 0, &space_fd) != 0) {
                foreign_file(disk, &f, e->d_name, s->d_name, NULL);
                continue;
            }
            DIR *files = open_listing(space_fd);
            struct dirent *n;
            while (files != NULL && (n = readdir(files)) != NULL) {
                if (dot_or_dotdot(n->d_name))
                    continue;
                struct visit v = {format,    e->d_name, s->d_name, space_fd,
                                  n->d_name, K_OTHER,   "",        NULL};
                struct stat st;
                v.kind = kind_of(n->d_name, v.stem);
                int gone = 0, ours = v.kind != K_OTHER;
                if (ours && fstatat(space_fd, n->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
                    gone = errno == ENOENT; /* removed since it was listed */
                else if (ours)
                    ours = S_ISREG(st.st_mode);
                if (gone || !ours) {
                    if (!gone)
                        foreign_file(disk, &f, e->d_name, s->d_name, n->d_name);
                    continue;
                }
                v.st = &st;
                visit(context, &v);
            }
            if (files != NULL)
                closedir(files);
            close(space_fd);
        }
        if (spaces != NULL)
            closedir(spaces);
        close(format_fd);
    }
    if (top != NULL)
        closedir(top);
    pthread_mutex_lock(&disk->lock);
    disk->foreign = f.count;
    memcpy(disk->foreign_example, f.example, sizeof disk->foreign_example);
    pthread_mutex_unlock(&disk->lock);
}

/* Whether a temporary file (tmp.<pid>.<n>) is one a crash left: its
 * process is gone (or is this one, just started), or it is a day old (the
 * number taken by another process since). Another live mount sharing the
 * directory may be writing it. */
static int left_by_crash(const char *name, const struct stat *st)
{
    long pid = strtol(name + 4, NULL, 10);
    if (pid <= 0 || pid == (long)getpid())
        return 1;
    if (time(NULL) - st->st_mtime > 24 * 3600)
        return 1;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

struct census {
    uint64_t bytes, entries;
};

/* Whether a payload of the current format has no header naming it. */
static int orphaned(const struct visit *v)
{
    if (time(NULL) - v->st->st_mtime < ORPHAN_SECONDS)
        return 0;
    char entry[24];
    snprintf(entry, sizeof entry, "%.16s.entry", v->name);
    int fd;
    struct stat st;
    int rc = open_own(v->space_fd, entry, &fd, &st);
    if (rc != 0)
        return rc == -ENOENT;
    struct disk_header h;
    ssize_t n = pread(fd, &h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h)
        return 0; /* damaged: the next read removes both */
    char named[48];
    data_name(entry, h.payload_xxh3, named);
    return strcmp(named, v->name) != 0; /* replaced by another payload */
}

/* Removes one of the cache's files, if it still is the regular file seen. */
static int remove_seen(int directory, const char *name, const struct stat *seen)
{
    struct stat st;
    if (fstatat(directory, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISREG(st.st_mode) || st.st_dev != seen->st_dev || st.st_ino != seen->st_ino)
        return -EEXIST;
    return unlinkat(directory, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
}

/* At open: count what is there, and remove temporary files a crash left
 * and payloads nothing names. */
static void count_file(void *context, const struct visit *v)
{
    struct census *c = context;
    if (v->kind == K_TEMPORARY) {
        if (left_by_crash(v->name, v->st))
            (void)remove_seen(v->space_fd, v->name, v->st);
        return;
    }
    if (v->kind == K_DATA && v->format == DISK_FORMAT && orphaned(v) &&
        remove_seen(v->space_fd, v->name, v->st) == 0)
        return;
    c->bytes += (uint64_t)v->st->st_size;
    if (v->kind != K_DATA)
        c->entries++;
}

/* DIRECTORY/v<format>, made if missing, checked private as the directory
 * is. */
static int open_format(zm_disk *disk, zm_err *err)
{
    int rc = open_directory(disk->directory_fd, DISK_FORMAT_NAME, 1, &disk->format_fd);
    if (rc == -ELOOP)
        return zm_err_set(err, -EPERM,
                          "cache directory %s: %s/%s is a symbolic link or not a directory",
                          disk->directory, disk->directory, DISK_FORMAT_NAME);
    if (rc != 0)
        return zm_err_set(err, rc, "cannot make the cache directory %s/%s: %s", disk->directory,
                          DISK_FORMAT_NAME, strerror(-rc));
    struct stat st;
    char why[160];
    if (fstat(disk->format_fd, &st) != 0)
        return zm_err_set(err, -errno, "cache directory %s/%s: %s", disk->directory,
                          DISK_FORMAT_NAME, strerror(errno));
    if (why_not_private(&st, why, sizeof why) != NULL)
        return zm_err_set(err, -EPERM, "cache directory %s: %s/%s is %s", disk->directory,
                          disk->directory, DISK_FORMAT_NAME, why);
    if (faccessat(disk->directory_fd, DISK_FORMAT_NAME, R_OK | W_OK | X_OK, AT_EACCESS) != 0)
        return zm_err_set(err, make_error(errno), "cache directory %s/%s: %s", disk->directory,
                          DISK_FORMAT_NAME, strerror(errno));
    return 0;
}

int zm_disk_open(const char *directory, uint64_t max_bytes, zm_disk **out, zm_err *err)
{
    *out = NULL;
    if (directory == NULL || directory[0] != '/')
        return zm_err_set(err, -EINVAL, "cache directory %s: give an absolute path",
                          directory ? directory : "(none)");
    zm_disk *disk = calloc(1, sizeof *disk);
    if (disk == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&disk->lock, NULL);
    pthread_mutex_init(&disk->put_lock, NULL);
    pthread_mutex_init(&disk->checked_lock, NULL);
    disk->directory_fd = -1;
    disk->format_fd = -1;
    disk->directory = strdup(directory);
    if (disk->directory == NULL) {
        zm_disk_close(disk);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    disk->capacity = max_bytes;
    int rc = open_private(directory, &disk->directory_fd, err);
    if (rc == 0)
        rc = open_format(disk, err);
    if (rc != 0) {
        zm_disk_close(disk);
        return rc;
    }
    struct census c = {0, 0};
    walk_files(disk, count_file, &c);
    disk->bytes_held = c.bytes;
    disk->entries = c.entries;
    *out = disk;
    return 0;
}

void zm_disk_close(zm_disk *disk)
{
    if (disk == NULL)
        return;
    if (disk->format_fd >= 0)
        close(disk->format_fd);
    if (disk->directory_fd >= 0)
        close(disk->directory_fd);
    free(disk->directory);
    free(disk->checked);
    pthread_mutex_destroy(&disk->checked_lock);
    pthread_mutex_destroy(&disk->lock);
    pthread_mutex_destroy(&disk->put_lock);
    free(disk);
}

uint64_t zm_disk_foreign(zm_disk *disk, char *example, size_t size)
{
    pthread_mutex_lock(&disk->lock);
    uint64_t count = disk->foreign;
    if (size > 0)
        snprintf(example, size, "%s", count ? disk->foreign_example : "");
    pthread_mutex_unlock(&disk->lock);
    return count;
}

int zm_disk_has_space(zm_disk *disk, const char *space)
{
    char space_name[17], entry[24];
    names_of(space, "", space_name, entry);
    int space_fd;
    if (open_space(disk, NULL, space_name, 0, &space_fd) != 0)
        return 0;
    DIR *d = open_listing(space_fd);
    int found = 0;
    struct dirent *e;
    char stem[17];
    struct stat st;
    while (d != NULL && !found && (e = readdir(d)) != NULL)
        found = kind_of(e->d_name, stem) == K_ENTRY &&
                fstatat(space_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    if (d != NULL)
        closedir(d);
    close(space_fd);
    return found;
}

/* ---- Reading ------------------------------------------------------------------------ */

static uint64_t header_hash(const struct disk_header *h, const char *space, const char *key)
{
    XXH3_state_t *state = XXH3_createState();
    if (state == NULL)
        return 0;
    XXH3_64bits_reset(state);
    XXH3_64bits_update(state, h, offsetof(struct disk_header, header_xxh3));
    XXH3_64bits_update(state, space, h->space_length);
    XXH3_64bits_update(state, key, h->key_length);
    uint64_t hash = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    return hash;
}

/* The whole of an open file, up to limit bytes (-EFBIG past it). */
static int read_fd(int fd, size_t limit, uint8_t **bytes, size_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if ((uint64_t)st.st_size > limit)
        return -EFBIG;
    uint8_t *buffer = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    size_t done = 0;
    int rc = buffer ? 0 : -ENOMEM;
    while (rc == 0 && done < (size_t)st.st_size) {
        ssize_t n = pread(fd, buffer + done, (size_t)st.st_size - done, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = n < 0 ? -errno : -EIO;
        else
            done += (size_t)n;
    }
    if (rc != 0) {
        free(buffer);
        return rc;
    }
    *bytes = buffer;
    *size = done;
    return 0;
}

/* The whole of one of the cache's files, and (seen) the file it was. */
static int read_own(int directory, const char *name, size_t limit, uint8_t **bytes, size_t *size,
                    struct stat *seen)
{
    int fd;
    int rc = open_own(directory, name, &fd, seen);
    if (rc == 0) {
        rc = read_fd(fd, limit, bytes, size);
        close(fd);
    }
    return rc;
}

/* Why a header (file: length bytes, the whole header file in format 2, the
 * whole entry in format 1) is not one of format's, or NULL; then *h is it. */
static const char *check_header(const uint8_t *file, size_t length, uint32_t format,
                                struct disk_header *h)
{
    if (length < sizeof *h)
        return "shorter than its header";
    memcpy(h, file, sizeof *h);
    if (memcmp(h->magic, DISK_MAGIC, sizeof h->magic) != 0)
        return "not a cache entry";
    if (h->format != format)
        return "of another format";
    uint64_t named = sizeof *h + (uint64_t)h->space_length + h->key_length;
    if (h->space_length > length || h->key_length > length ||
        named + (format == 1 ? h->payload_length : 0) != length)
        return "truncated or extended";
    if (header_hash(h, (const char *)file + sizeof *h,
                    (const char *)file + sizeof *h + h->space_length) != h->header_xxh3)
        return "its header is damaged";
    return NULL;
}

/* Whether a checked header is the one of space and key (not another key
 * with the same hash). */
static int names(const struct disk_header *h, const uint8_t *file, const char *space,
                 const char *key)
{
    size_t space_length = strlen(space), key_length = strlen(key);
    return h->space_length == space_length && h->key_length == key_length &&
           memcmp(file + sizeof *h, space, space_length) == 0 &&
           memcmp(file + sizeof *h + space_length, key, key_length) == 0;
}

/* Removes one of the cache's files (name in directory), if it is still the
 * file seen: a file filed again under the name meanwhile (another thread or
 * mount rebuilt the entry: a new file, renamed into place) stays, and so
 * does anything that is not a regular file. */
static void forget_file(zm_disk *disk, int directory, const char *name, const struct stat *seen)
{
    if (remove_seen(directory, name, seen) != 0)
        return;
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held =
        disk->bytes_held > (uint64_t)seen->st_size ? disk->bytes_held - (uint64_t)seen->st_size : 0;
    pthread_mutex_unlock(&disk->lock);
}

/* An entry found, its payload open and of the right length, not yet
 * checked against its hash. */
struct found {
    int space_fd; /* its space directory (-1: none open) */
    char space_name[17], entry[24], data[48];
    struct stat entry_seen, data_seen; /* the files read */
    int fd;
    uint64_t length, xxh3;
};

static void found_close(struct found *f)
{
    if (f->fd >= 0)
        close(f->fd);
    if (f->space_fd >= 0)
        close(f->space_fd);
    f->fd = f->space_fd = -1;
}

/* Removes a damaged entry (the files of it that were seen), its header
 * first. */
static void forget_entry(zm_disk *disk, struct found *f, int with_data)
{
    forget_file(disk, f->space_fd, f->entry, &f->entry_seen);
    if (with_data)
        forget_file(disk, f->space_fd, f->data, &f->data_seen);
    pthread_mutex_lock(&disk->lock);
    disk->entries = disk->entries ? disk->entries - 1 : 0;
    pthread_mutex_unlock(&disk->lock);
}

static int put_locked(zm_disk *disk, const char *space, const char *key, const void *bytes,
                      size_t size, zm_err *err);

/* Moves an entry of format 1 (header, names and payload in one file) to
 * the current format. 0 when there was one and it moved; -ENOENT when there
 * is none (or it was damaged: then it is removed). */
static int migrate(zm_disk *disk, const char *space, const char *key)
{
    char space_name[17], entry[24];
    names_of(space, key, space_name, entry);
    int space_fd;
    if (open_space(disk, "v1", space_name, 0, &space_fd) != 0)
        return -ENOENT;
    uint8_t *file;
    size_t length;
    struct stat seen;
    if (read_own(space_fd, entry, (size_t)1 << 40, &file, &length, &seen) != 0) {
        close(space_fd);
        return -ENOENT;
    }
    struct disk_header h;
    const char *why = check_header(file, length, 1, &h);
    int ours = why == NULL && names(&h, file, space, key);
    size_t offset = sizeof h + h.space_length + h.key_length;
    if (why == NULL && XXH3_64bits(file + offset, h.payload_length) != h.payload_xxh3)
        why = "damaged";
    int rc = -ENOENT;
    if (why == NULL && ours) {
        zm_err ignored;
        pthread_mutex_lock(&disk->put_lock);
        rc = put_locked(disk, space, key, file + offset, (size_t)h.payload_length, &ignored);
        pthread_mutex_unlock(&disk->put_lock);
        if (rc == 0)
            disk->migrated++;
    }
    if (why != NULL || rc == 0) {
        /* Moved, or never to be served. */
        forget_file(disk, space_fd, entry, &seen);
        pthread_mutex_lock(&disk->lock);
        disk->entries = disk->entries ? disk->entries - 1 : 0;
        pthread_mutex_unlock(&disk->lock);
    }
    free(file);
    close(space_fd);
    return rc == 0 ? 0 : -ENOENT;
}

/* Finds an entry's header: checked and naming space and key (f->space_fd
 * open, f->entry, f->entry_seen, f->data, f->length, f->xxh3 set; close it
 * with found_close whatever the result). -ENOENT (none; also for a file by
 * its name that is not the cache's: never read), -EBADMSG (damaged:
 * removed, err says why), -errno. */
static int find_header(zm_disk *disk, const char *space, const char *key, struct found *f,
                       int migrated, zm_err *err)
{
    f->fd = -1;
    f->space_fd = -1;
    names_of(space, key, f->space_name, f->entry);
    char path[4200];
    describe(disk, DISK_FORMAT_NAME, f->space_name, f->entry, path, sizeof path);
    int rc = open_space(disk, NULL, f->space_name, 0, &f->space_fd);
    uint8_t *file = NULL;
    size_t length = 0;
    if (rc == 0)
        rc = read_own(f->space_fd, f->entry, HEADER_MAX, &file, &length, &f->entry_seen);
    if (rc == -ENOENT && !migrated && migrate(disk, space, key) == 0) {
        found_close(f);
        return find_header(disk, space, key, f, 1, err);
    }
    if (rc == -ENOENT)
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    if (rc == -ELOOP)
        return zm_err_set(err, -ENOENT,
                          "%s: not in the cache (%s is not the cache's file: left alone)", key,
                          path);
    struct disk_header h;
    const char *why = rc == -EFBIG ? "longer than any header" : NULL;
    if (rc != 0 && why == NULL)
        return zm_err_set(err, rc, "cache entry %s: %s", path, strerror(-rc));
    if (why == NULL)
        why = check_header(file, length, DISK_FORMAT, &h);
    if (why != NULL) {
        free(file);
        forget_entry(disk, f, 0);
        disk->damaged++;
        return zm_err_set(err, -EBADMSG, "cache entry %s was %s: removed", path, why);
    }
    int ours = names(&h, file, space, key);
    free(file);
    if (!ours) /* another key with the same hash: not ours (the put replaces it) */
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    data_name(f->entry, h.payload_xxh3, f->data);
    f->length = h.payload_length;
    f->xxh3 = h.payload_xxh3;
    return 0;
}

/* Finds an entry: its header checked and naming space and key, its payload
 * opened and of the length the header gives. -ENOENT (none), -EBADMSG
 * (damaged: removed, err says why), -errno. found_close it in every case. */
static int find(zm_disk *disk, const char *space, const char *key, struct found *f, int migrated,
                zm_err *err)
{
    int rc = find_header(disk, space, key, f, migrated, err);
    if (rc != 0)
        return rc;
    char path[4200];
    describe(disk, DISK_FORMAT_NAME, f->space_name, f->data, path, sizeof path);
    rc = open_own(f->space_fd, f->data, &f->fd, &f->data_seen);
    if (rc == -ENOENT) {
        /* Evicted under us, or removed by hand: the header names nothing. */
        forget_entry(disk, f, 0);
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    }
    if (rc == -ELOOP)
        return zm_err_set(err, -ENOENT,
                          "%s: not in the cache (%s is not the cache's file: left alone)", key,
                          path);
    if (rc != 0)
        return zm_err_set(err, rc, "cache entry %s: %s", path, strerror(-rc));
    if ((uint64_t)f->data_seen.st_size != f->length) {
        close(f->fd);
        f->fd = -1;
        forget_entry(disk, f, 1);
        disk->damaged++;
        return zm_err_set(err, -EBADMSG, "cache entry %s was truncated or extended: removed", path);
    }
    return 0;
}

/* After a payload failed its hash: removed, never served. */
static int damaged(zm_disk *disk, struct found *f, zm_err *err)
{
    close(f->fd);
    f->fd = -1;
    forget_entry(disk, f, 1);
    disk->damaged++;
    char path[4200];
    describe(disk, DISK_FORMAT_NAME, f->space_name, f->data, path, sizeof path);
    return zm_err_set(err, -EBADMSG, "cache entry %s: its bytes are damaged: removed", path);
}

/* Moves an entry's header's time (its last use, for eviction). */
static void touch(int space_fd, const char *entry)
{
    (void)utimensat(space_fd, entry, NULL, AT_SYMLINK_NOFOLLOW);
}

int zm_disk_get(zm_disk *disk, const char *space, const char *key, uint8_t **bytes, size_t *size,
                zm_err *err)
{
    *bytes = NULL;
    *size = 0;
    struct found f;
    int rc = find(disk, space, key, &f, 0, err);
    if (rc != 0) {
        found_close(&f);
        disk->misses++;
        return rc;
    }
    uint8_t *payload;
    size_t length;
    rc = read_fd(f.fd, (size_t)f.length, &payload, &length);
    if (rc == 0 && (length != f.length || XXH3_64bits(payload, length) != f.xxh3)) {
        free(payload);
        disk->misses++;
        rc = damaged(disk, &f, err);
        found_close(&f);
        return rc;
    }
    if (rc != 0) {
        char path[4200];
        describe(disk, DISK_FORMAT_NAME, f.space_name, f.data, path, sizeof path);
        found_close(&f);
        disk->misses++;
        return zm_err_set(err, rc, "cache entry %s: %s", path, strerror(-rc));
    }
    touch(f.space_fd, f.entry);
    found_close(&f);
    disk->hits++;
    *bytes = payload;
    *size = length;
    return 0;
}

static uint64_t checked_key(const char *space, const char *key)
{
    XXH3_state_t *state = XXH3_createState();
    if (state == NULL)
        return 0;
    XXH3_64bits_reset(state);
    XXH3_64bits_update(state, space, strlen(space) + 1);
    XXH3_64bits_update(state, key, strlen(key));
    uint64_t hash = XXH3_64bits_digest(state) | 1; /* never 0 */
    XXH3_freeState(state);
    return hash;
}

static int same_file(const struct checked *c, const struct stat *st)
{
    return c->dev == st->st_dev && c->ino == st->st_ino && (uint64_t)st->st_size == c->length &&
           c->mtime.tv_sec == st->st_mtim.tv_sec && c->mtime.tv_nsec == st->st_mtim.tv_nsec &&
           c->ctime.tv_sec == st->st_ctim.tv_sec && c->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

/* The slot of key (found, or the empty one where it would go); NULL when
 * there is no table. Under checked_lock. */
static struct checked *checked_slot(zm_disk *disk, uint64_t key)
{
    if (disk->checked == NULL)
        return NULL;
    size_t i = key % CHECKED_SLOTS;
    while (disk->checked[i].key != 0 && disk->checked[i].key != key)
        i = (i + 1) % CHECKED_SLOTS;
    return &disk->checked[i];
}

/* Whether key's payload was checked by this process; *c gets what it was. */
static int checked_get(zm_disk *disk, uint64_t key, struct checked *c)
{
    pthread_mutex_lock(&disk->checked_lock);
    struct checked *slot = checked_slot(disk, key);
    int found = slot != NULL && slot->key == key;
    if (found)
        *c = *slot;
    pthread_mutex_unlock(&disk->checked_lock);
    return found;
}

static void checked_put(zm_disk *disk, const struct checked *c)
{
    pthread_mutex_lock(&disk->checked_lock);
    if (disk->checked == NULL || disk->checked_count >= CHECKED_SLOTS / 2) {
        free(disk->checked);
        disk->checked = calloc(CHECKED_SLOTS, sizeof *disk->checked);
        disk->checked_count = 0;
    }
    struct checked *slot = checked_slot(disk, c->key);
    if (slot != NULL) {
        if (slot->key == 0)
            disk->checked_count++;
        *slot = *c;
    }
    pthread_mutex_unlock(&disk->checked_lock);
}

/* Lends a payload checked earlier and unchanged since: 0, or -ENOENT when
 * it must be found and checked afresh. */
static int lend_checked(zm_disk *disk, const char *space, const char *key, uint64_t id, int *fd,
                        uint64_t *size)
{
    struct checked c;
    if (!checked_get(disk, id, &c))
        return -ENOENT;
    char space_name[17], entry[24], data[48];
    names_of(space, key, space_name, entry);
    data_name(entry, c.xxh3, data);
    int space_fd, opened;
    struct stat st;
    if (open_space(disk, NULL, space_name, 0, &space_fd) != 0)
        return -ENOENT;
    if (open_own(space_fd, data, &opened, &st) != 0 || !same_file(&c, &st)) {
        if (opened >= 0)
            close(opened);
        close(space_fd);
        return -ENOENT;
    }
    time_t now = time(NULL);
    if (now - c.touched >= TOUCH_SECONDS) {
        touch(space_fd, entry);
        c.touched = now;
        checked_put(disk, &c);
    }
    close(space_fd);
    *fd = opened;
    *size = c.length;
    return 0;
}

int zm_disk_open_entry(zm_disk *disk, const char *space, const char *key, int *fd, uint64_t *size,
                       zm_err *err)
{
    *fd = -1;
    *size = 0;
    uint64_t id = checked_key(space, key);
    if (lend_checked(disk, space, key, id, fd, size) == 0) {
        disk->hits++;
        return 0;
    }
    struct found f;
    int rc = find(disk, space, key, &f, 0, err);
    if (rc != 0) {
        found_close(&f);
        disk->misses++;
        return rc;
    }
    char path[4200];
    describe(disk, DISK_FORMAT_NAME, f.space_name, f.data, path, sizeof path);
    /* Remembered as it was before it was read (f.data_seen): a write during
     * the check moved its ctime, and the next open checks it again. */
    if (f.length > 0) {
        /* Checked where it lies: mapped, not copied. */
        void *map = mmap(NULL, (size_t)f.length, PROT_READ, MAP_SHARED | MAP_POPULATE, f.fd, 0);
        if (map == MAP_FAILED) {
            rc = -errno;
            found_close(&f);
            disk->misses++;
            return zm_err_set(err, rc, "cache entry %s: %s", path, strerror(-rc));
        }
        uint64_t hash = XXH3_64bits(map, (size_t)f.length);
        munmap(map, (size_t)f.length);
        if (hash != f.xxh3) {
            disk->misses++;
            rc = damaged(disk, &f, err);
            found_close(&f);
            return rc;
        }
    }
    touch(f.space_fd, f.entry);
    struct checked c = {id,
                        f.length,
                        f.xxh3,
                        f.data_seen.st_dev,
                        f.data_seen.st_ino,
                        f.data_seen.st_mtim,
                        f.data_seen.st_ctim,
                        time(NULL)};
    checked_put(disk, &c);
    disk->hits++;
    *fd = f.fd;
    *size = f.length;
    f.fd = -1;
    found_close(&f);
    return 0;
}

int zm_disk_size(zm_disk *disk, const char *space, const char *key, uint64_t *size)
{
    struct found f;
    zm_err ignored;
    int rc = find_header(disk, space, key, &f, 0, &ignored);
    if (rc == 0)
        *size = f.length;
    found_close(&f);
    return rc;
}

/* ---- Eviction ------------------------------------------------------------------------ */

/* One of the cache's files as eviction sees it: grouped by entry (current
 * format: a header and its payloads, by key hash), a file of another
 * format alone. */
struct aged {
    char format_name[12], space_name[17], name[48];
    char stem[17]; /* key hash (current format), "" otherwise */
    int kind;
    uint64_t size;
    dev_t dev;
    ino_t ino;
    struct timespec used; /* the header's time: touched on every read */
    int old_format;
};

struct aged_list {
    struct aged *items;
    size_t count, capacity;
};

static void collect_file(void *context, const struct visit *v)
{
    struct aged_list *l = context;
    if (v->kind == K_TEMPORARY)
        return;
    if (l->count == l->capacity) {
        size_t capacity = l->capacity ? l->capacity * 2 : 256;
        struct aged *grown = realloc(l->items, capacity * sizeof *grown);
        if (grown == NULL)
            return;
        l->items = grown;
        l->capacity = capacity;
    }
    int current = v->format == DISK_FORMAT;
    struct aged *a = &l->items[l->count++];
    memset(a, 0, sizeof *a);
    snprintf(a->format_name, sizeof a->format_name, "%s", v->format_name);
    snprintf(a->space_name, sizeof a->space_name, "%s", v->space_name);
    snprintf(a->name, sizeof a->name, "%s", v->name);
    a->kind = v->kind;
    a->size = (uint64_t)v->st->st_size;
    a->dev = v->st->st_dev;
    a->ino = v->st->st_ino;
    a->used = v->st->st_mtim;
    a->old_format = !current;
    if (current)
        memcpy(a->stem, v->stem, sizeof a->stem);
}

/* Files of one group side by side: same directory, same stem, the header
 * first. */
static int by_group(const void *a, const void *b)
{
    const struct aged *x = a, *y = b;
    int c = strcmp(x->format_name, y->format_name);
    if (c == 0)
        c = strcmp(x->space_name, y->space_name);
    if (c == 0)
        c = strcmp(x->stem, y->stem);
    if (c == 0 && x->stem[0] == '\0')
        c = strcmp(x->name, y->name);
    if (c == 0)
        c = (x->kind != K_ENTRY) - (y->kind != K_ENTRY);
    return c;
}

/* Whether b belongs to a's entry: the same key hash in the same directory. */
static int same_group(const struct aged *a, const struct aged *b)
{
    return a->stem[0] != '\0' && strcmp(a->stem, b->stem) == 0 &&
           strcmp(a->space_name, b->space_name) == 0 && strcmp(a->format_name, b->format_name) == 0;
}

static int later(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec != b->tv_sec ? a->tv_sec > b->tv_sec : a->tv_nsec > b->tv_nsec;
}

struct group {
    size_t first, count; /* in the sorted list */
    uint64_t size;
    struct timespec used;
    int old_format;
};

static int by_age(const void *a, const void *b)
{
    const struct group *x = a, *y = b;
    if (x->old_format != y->old_format)
        return y->old_format - x->old_format; /* other formats first */
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    return (x->used.tv_nsec > y->used.tv_nsec) - (x->used.tv_nsec < y->used.tv_nsec);
}

/* Removes a group's files, the header first (sorted first): the entry is
 * gone once it is. Whether they are all gone; a file that is no longer the
 * one seen (refiled meanwhile) stays, and so do the rest of its group. */
static int remove_group(zm_disk *disk, const struct aged *items, const struct group *g)
{
    const struct aged *first = &items[g->first];
    int format_fd, space_fd;
    if (open_directory(disk->directory_fd, first->format_name, 0, &format_fd) != 0)
        return 0;
    int rc = open_directory(format_fd, first->space_name, 0, &space_fd);
    close(format_fd);
    if (rc != 0)
        return 0;
    int gone = 1;
    for (size_t i = g->first; gone && i < g->first + g->count; i++) {
        struct stat seen = {0};
        seen.st_dev = items[i].dev;
        seen.st_ino = items[i].ino;
        if (remove_seen(space_fd, items[i].name, &seen) != 0)
            gone = 0;
    }
    close(space_fd);
    return gone;
}

/* Removes the least recently used entries until the cache holds at most
 * target bytes, counting what is really on disk (other mounts write too). */
static void evict_to(zm_disk *disk, uint64_t target)
{
    struct aged_list l = {NULL, 0, 0};
    walk_files(disk, collect_file, &l);
    if (l.count > 0)
        qsort(l.items, l.count, sizeof *l.items, by_group);
    struct group *groups = malloc((l.count ? l.count : 1) * sizeof *groups);
    size_t group_count = 0;
    uint64_t total = 0;
    for (size_t i = 0; groups != NULL && i < l.count;) {
        size_t j = i + 1;
        while (j < l.count && same_group(&l.items[i], &l.items[j]))
            j++;
        struct group g = {i, j - i, 0, l.items[i].used, l.items[i].old_format};
        for (size_t at = i; at < j; at++) {
            const struct aged *a = &l.items[at];
            g.size += a->size;
            /* The header says when the entry was last used; payloads with
             * none, when they were written. */
            if (l.items[i].kind != K_ENTRY && later(&a->used, &g.used))
                g.used = a->used;
        }
        total += g.size;
        groups[group_count++] = g;
        i = j;
    }
    if (groups != NULL && group_count > 0)
        qsort(groups, group_count, sizeof *groups, by_age);
    size_t removed = 0, entries = 0;
    for (size_t g = 0; g < group_count; g++) {
        int header = l.items[groups[g].first].kind == K_ENTRY || groups[g].old_format;
        entries += header;
        if (total <= target)
            continue;
        if (remove_group(disk, l.items, &groups[g])) {
            total -= groups[g].size;
            removed += header;
            entries -= header;
        }
    }
    free(l.items);
    free(groups);
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held = total;
    disk->entries = entries;
    pthread_mutex_unlock(&disk->lock);
    disk->evictions += removed;
}

/* ---- Writing -------------------------------------------------------------------------- */

int zm_disk_put(zm_disk *disk, const char *space, const char *key, const void *bytes, size_t size,
                zm_err *err)
{
    pthread_mutex_lock(&disk->put_lock);
    int rc = put_locked(disk, space, key, bytes, size, err);
    pthread_mutex_unlock(&disk->put_lock);
    return rc;
}

/* Writes parts to a new temporary file in the space directory and renames
 * it to name there. */
static int write_file(zm_disk *disk, int space_fd, const char *space_name, const char *name,
                      const void *const *parts, const size_t *lengths, int count, zm_err *err)
{
    char temporary[64], path[4200];
    snprintf(temporary, sizeof temporary, "tmp.%d.%" PRIu64, (int)getpid(),
             (uint64_t)++disk->temporary);
    describe(disk, DISK_FORMAT_NAME, space_name, temporary, path, sizeof path);
    int fd =
        openat(space_fd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return zm_err_set(err, -errno, "cannot write to the cache (%s): %s", path, strerror(errno));
    int rc = 0;
    for (int i = 0; rc == 0 && i < count; i++) {
        size_t done = 0;
        while (rc == 0 && done < lengths[i]) {
            ssize_t n = write(fd, (const uint8_t *)parts[i] + done, lengths[i] - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                rc = zm_err_set(err, n < 0 ? -errno : -EIO, "cannot write to the cache (%s): %s",
                                path, n < 0 ? strerror(errno) : "no space written");
            else
                done += (size_t)n;
        }
    }
    if (close(fd) != 0 && rc == 0)
        rc = zm_err_set(err, -errno, "cannot write to the cache (%s): %s", path, strerror(errno));
    if (rc == 0 && renameat(space_fd, temporary, space_fd, name) != 0) {
        describe(disk, DISK_FORMAT_NAME, space_name, name, path, sizeof path);
        rc = zm_err_set(err, -errno, "cannot file a cache entry (%s): %s", path, strerror(errno));
    }
    if (rc != 0)
        unlinkat(space_fd, temporary, 0);
    return rc;
}

static int put_in_space(zm_disk *disk, int space_fd, const char *space_name, const char *entry,
                        const char *space, const char *key, const void *bytes, size_t size,
                        uint64_t total, zm_err *err)
{
    size_t space_length = strlen(space), key_length = strlen(key);
    struct disk_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, DISK_MAGIC, sizeof h.magic);
    h.format = DISK_FORMAT;
    h.space_length = (uint32_t)space_length;
    h.key_length = (uint32_t)key_length;
    h.payload_length = size;
    h.payload_xxh3 = XXH3_64bits(bytes, size);
    h.header_xxh3 = header_hash(&h, space, key);
    char data[48], previous_data[48] = "", path[4200];
    data_name(entry, h.payload_xxh3, data);

    /* Only the cache's own files are replaced: a name taken by anything
     * else (a symbolic link, a directory) is left alone and the entry not
     * kept. */
    struct stat st;
    const char *taken = !replaceable(space_fd, entry, &st)  ? entry
                        : !replaceable(space_fd, data, &st) ? data
                                                            : NULL;
    if (taken != NULL) {
        describe(disk, DISK_FORMAT_NAME, space_name, taken, path, sizeof path);
        return zm_err_set(err, -EEXIST,
                          "%s is not the cache's file (not a regular file): left "
                          "alone, the entry not kept",
                          path);
    }

    /* What it replaces, to count and to remove once replaced. */
    uint64_t replaced = 0;
    int replacing = 0;
    int fd;
    if (open_own(space_fd, entry, &fd, &st) == 0) {
        replacing = 1;
        replaced += (uint64_t)st.st_size;
        struct disk_header old;
        if (pread(fd, &old, sizeof old, 0) == (ssize_t)sizeof old) {
            data_name(entry, old.payload_xxh3, previous_data);
            if (strcmp(previous_data, data) == 0 ||
                fstatat(space_fd, previous_data, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
                !S_ISREG(st.st_mode))
                previous_data[0] = '\0';
            else
                replaced += (uint64_t)st.st_size;
        }
        close(fd);
    }
    uint64_t same_payload =
        fstatat(space_fd, data, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)st.st_size : 0;

    /* The payload first, the header last: the entry exists once it does. */
    const void *payload_parts[1] = {bytes};
    size_t payload_lengths[1] = {size};
    int rc = write_file(disk, space_fd, space_name, data, payload_parts, payload_lengths, 1, err);
    const void *header_parts[3] = {&h, space, key};
    size_t header_lengths[3] = {sizeof h, space_length, key_length};
    if (rc == 0)
        rc = write_file(disk, space_fd, space_name, entry, header_parts, header_lengths, 3, err);
    if (rc != 0)
        return rc;
    if (previous_data[0] && replaceable(space_fd, previous_data, &st))
        unlinkat(space_fd, previous_data, 0);
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held += total;
    replaced += same_payload;
    disk->bytes_held = disk->bytes_held > replaced ? disk->bytes_held - replaced : 0;
    if (!replacing)
        disk->entries++;
    pthread_mutex_unlock(&disk->lock);
    disk->writes++;
    return 0;
}

static int put_locked(zm_disk *disk, const char *space, const char *key, const void *bytes,
                      size_t size, zm_err *err)
{
    size_t space_length = strlen(space), key_length = strlen(key);
    uint64_t header_size = sizeof(struct disk_header) + space_length + key_length;
    uint64_t total = header_size + size;
    if (total > disk->capacity)
        return zm_err_set(err, -EFBIG, "%s: %" PRIu64 " bytes do not fit a %" PRIu64 "-byte cache",
                          key, total, disk->capacity);
    if (header_size > HEADER_MAX)
        return zm_err_set(err, -ENAMETOOLONG, "%s: a key of %zu bytes is too long for the cache",
                          key, key_length);
    pthread_mutex_lock(&disk->lock);
    int over = disk->bytes_held + total > disk->capacity;
    pthread_mutex_unlock(&disk->lock);
    if (over)
        evict_to(disk, disk->capacity / 100 * EVICT_TO_PERCENT > total
                           ? disk->capacity / 100 * EVICT_TO_PERCENT - total
                           : 0);

    char space_name[17], entry[24];
    names_of(space, key, space_name, entry);
    int space_fd;
    int rc = open_space(disk, NULL, space_name, 1, &space_fd);
    if (rc == -ELOOP)
        return zm_err_set(err, -EEXIST,
                          "%s/%s/%s is not the cache's directory (a symbolic link or "
                          "a file): left alone, the entry not kept",
                          disk->directory, DISK_FORMAT_NAME, space_name);
    if (rc != 0)
        return zm_err_set(err, rc, "cannot make the cache directory %s/%s/%s: %s", disk->directory,
                          DISK_FORMAT_NAME, space_name, strerror(-rc));
    rc = put_in_space(disk, space_fd, space_name, entry, space, key, bytes, size, total, err);
    close(space_fd);
    return rc;
}

void zm_disk_get_stats(zm_disk *disk, zm_disk_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    stats->hits = disk->hits;
    stats->misses = disk->misses;
    stats->writes = disk->writes;
    stats->evictions = disk->evictions;
    stats->damaged = disk->damaged;
    stats->migrated = disk->migrated;
    pthread_mutex_lock(&disk->lock);
    stats->bytes_held = disk->bytes_held;
    stats->entries = disk->entries;
    stats->foreign = disk->foreign;
    pthread_mutex_unlock(&disk->lock);
    stats->capacity_bytes = disk->capacity;
}
