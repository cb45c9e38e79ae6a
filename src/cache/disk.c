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
 * found there is left alone, and counted as foreign (zm_disk_foreign).
 *
 * This file opens the cache: the directory checked private, the names of
 * its files, opening them without following a link, the walk over them
 * and the census (and leftovers removed) at open, and its counters.
 * Lookups are in disk_read.c, writing and eviction in disk_write.c. */
#include "cache/disk_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <linux/fs.h> /* FS_IOC_GETVERSION */

/* A payload filed with no header (a crash between the two renames, or a
 * header removed under a reader) is removed at open once this old: a
 * younger one may be another mount's write in progress. */
#define ORPHAN_SECONDS 600
/* Symbolic links above the cache directory followed before giving up. */
#define LINKS_ABOVE_MAX 8

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
void zm__disk_names_of(const char *space, const char *key, char space_name[17], char entry[24])
{
    snprintf(space_name, 17, "%016" PRIx64, (uint64_t)XXH3_64bits(space, strlen(space)));
    snprintf(entry, 24, "%016" PRIx64 ".entry", (uint64_t)XXH3_64bits(key, strlen(key)));
}

/* The payload's name beside a header (<stem>.entry). */
void zm__disk_data_name(const char *entry, uint64_t payload_xxh3, char out[48])
{
    snprintf(out, 48, "%.16s-%016" PRIx64 ".data", entry, payload_xxh3);
}

/* A file's path, for messages only (nothing is opened by it). */
void zm__disk_describe(const zm_disk *disk, const char *format, const char *space_name,
                       const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s/%s/%s", disk->directory, format, space_name, name);
}

/* ---- Opening the cache's own files ------------------------------------------------- */

/* A directory of the cache: name in parent, never through a link. 0 (*fd
 * set), -ENOENT (none), -ELOOP (something else by that name: a symbolic
 * link or a file, not the cache's), -errno. With create, made (0700) if
 * missing. */
int zm__disk_open_directory(int parent, const char *name, int create, int *fd)
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
int zm__disk_open_space(const zm_disk *disk, const char *format, const char *space_name, int create,
                        int *fd)
{
    if (format == NULL)
        return zm__disk_open_directory(disk->format_fd, space_name, create, fd);
    int format_fd;
    int rc = zm__disk_open_directory(disk->directory_fd, format, 0, &format_fd);
    if (rc != 0)
        return rc;
    rc = zm__disk_open_directory(format_fd, space_name, create, fd);
    close(format_fd);
    return rc;
}

/* The generation of fd's inode, where its file system tells one. */
static void generation_of(int fd, struct zm__disk_seen *seen)
{
    /* Declared as a long; ext4, XFS and Btrfs write an int into it. */
    long generation = 0;
    seen->has_generation = ioctl(fd, FS_IOC_GETVERSION, &generation) == 0;
    seen->generation = seen->has_generation ? (uint64_t)generation : 0;
}

/* One of the cache's files for reading: name in directory, a regular file,
 * never through a link (a FIFO does not block the open). 0 (*fd, *seen set),
 * -ENOENT, -ELOOP (a symbolic link or not a regular file: not the
 * cache's), -errno. */
int zm__disk_open_own(int directory, const char *name, int *fd, struct zm__disk_seen *seen)
{
    *fd = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0)
        return errno == ELOOP ? -ELOOP : -errno;
    int rc = fstat(*fd, &seen->st) != 0 ? -errno : S_ISREG(seen->st.st_mode) ? 0 : -ELOOP;
    if (rc != 0) {
        close(*fd);
        *fd = -1;
        return rc;
    }
    generation_of(*fd, seen);
    /* Read as any file is (the kernel may read it for a reader). */
    (void)fcntl(*fd, F_SETFL, 0);
    return 0;
}

int zm__disk_see(int directory, const char *name, struct zm__disk_seen *seen)
{
    seen->has_generation = 0;
    seen->generation = 0;
    /* Its type first: anything but a regular file is never opened (a
     * device's open may do something). */
    if (fstatat(directory, name, &seen->st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (!S_ISREG(seen->st.st_mode))
        return -ELOOP;
    int fd;
    struct zm__disk_seen opened;
    int rc = zm__disk_open_own(directory, name, &fd, &opened);
    if (rc == -ENOENT || rc == -ELOOP) /* gone or replaced since */
        return rc;
    if (rc != 0) /* not ours to read: known by its status */
        return 0;
    if (opened.st.st_dev == seen->st.st_dev && opened.st.st_ino == seen->st.st_ino)
        *seen = opened;
    close(fd);
    return 0;
}

int zm__disk_same_file(const struct zm__disk_seen *now, const struct zm__disk_seen *before)
{
    if (!S_ISREG(now->st.st_mode) || now->st.st_dev != before->st.st_dev ||
        now->st.st_ino != before->st.st_ino)
        return 0;
    if (now->has_generation && before->has_generation)
        return now->generation == before->generation;
    return now->st.st_mtim.tv_sec == before->st.st_mtim.tv_sec &&
           now->st.st_mtim.tv_nsec == before->st.st_mtim.tv_nsec;
}

void zm__disk_temporary_name(zm_disk *disk, char name[64])
{
    snprintf(name, 64, "tmp.%d.%" PRIu64, (int)getpid(), (uint64_t)++disk->temporary);
}

/* Whether name in directory is absent or one of the cache's files (a
 * regular file): what the cache may replace or remove. */
int zm__disk_replaceable(int directory, const char *name, struct stat *st)
{
    if (fstatat(directory, name, st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT;
    return S_ISREG(st->st_mode);
}

/* ---- Census and leftovers --------------------------------------------------------- */

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
void zm__disk_walk_files(zm_disk *disk, visit_fn visit, void *context)
{
    struct foreign f = {0, ""};
    DIR *top = open_listing(disk->directory_fd);
    struct dirent *e;
    while (top != NULL && (e = readdir(top)) != NULL) {
        int format, format_fd;
        if (dot_or_dotdot(e->d_name))
            continue;
        if (!is_format_name(e->d_name, &format) ||
            zm__disk_open_directory(disk->directory_fd, e->d_name, 0, &format_fd) != 0) {
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
                zm__disk_open_directory(format_fd, s->d_name, 0, &space_fd) != 0) {
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
                struct zm__disk_seen seen;
                v.kind = kind_of(n->d_name, v.stem);
                int gone = 0, ours = v.kind != K_OTHER;
                if (ours) {
                    /* Its status alone (a census of many files opens none):
                     * those removed from a listing are old (crash leftovers,
                     * the least recently used), told from a file filed
                     * since by their time. */
                    int rc = fstatat(space_fd, n->d_name, &seen.st, AT_SYMLINK_NOFOLLOW) != 0
                                 ? -errno
                             : S_ISREG(seen.st.st_mode) ? 0
                                                        : -ELOOP;
                    seen.has_generation = 0;
                    seen.generation = 0;
                    gone = rc == -ENOENT; /* removed since it was listed */
                    ours = rc == 0;
                }
                if (gone || !ours) {
                    if (!gone)
                        foreign_file(disk, &f, e->d_name, s->d_name, n->d_name);
                    continue;
                }
                v.seen = &seen;
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
    zm_disk *disk;
    uint64_t bytes, entries;
};

/* Whether a payload of the current format has no header naming it. */
static int orphaned(const struct visit *v)
{
    if (time(NULL) - v->seen->st.st_mtime < ORPHAN_SECONDS)
        return 0;
    char entry[24];
    snprintf(entry, sizeof entry, "%.16s.entry", v->name);
    int fd;
    struct zm__disk_seen seen;
    int rc = zm__disk_open_own(v->space_fd, entry, &fd, &seen);
    if (rc != 0)
        return rc == -ENOENT;
    struct disk_header h;
    ssize_t n = pread(fd, &h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h)
        return 0; /* damaged: the next read removes both */
    char named[48];
    zm__disk_data_name(entry, h.payload_xxh3, named);
    return strcmp(named, v->name) != 0; /* replaced by another payload */
}

/* Removes one of the cache's files, if it still is the file seen. It is
 * claimed first, moved to a temporary name of ours, so that the file
 * checked is the file removed: another thread or mount filing the entry
 * again meanwhile renames a new file to the name, which then either stays
 * unclaimed or is put back. While claimed the name is free, and a reader
 * finds no entry there (a miss, as after the removal). */
int zm__disk_remove_seen(zm_disk *disk, int directory, const char *name,
                         const struct zm__disk_seen *seen)
{
    struct stat st;
    if (fstatat(directory, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISREG(st.st_mode) || st.st_dev != seen->st.st_dev || st.st_ino != seen->st.st_ino)
        return -EEXIST;
    char claimed[64];
    zm__disk_temporary_name(disk, claimed);
    if (renameat(directory, name, directory, claimed) != 0)
        return errno == ENOENT ? 0 : -errno;
    struct zm__disk_seen now;
    if (zm__disk_see(directory, claimed, &now) == 0 && zm__disk_same_file(&now, seen))
        return unlinkat(directory, claimed, 0) == 0 || errno == ENOENT ? 0 : -errno;
    /* Another file (filed again under the name since it was seen): put
     * back, unless a newer one was filed meanwhile, which stays. */
    if (renameat2(directory, claimed, directory, name, RENAME_NOREPLACE) != 0) {
        int unsupported = errno == EINVAL || errno == ENOSYS;
        if (!unsupported || linkat(directory, claimed, directory, name, 0) == 0 || errno == EEXIST)
            (void)unlinkat(directory, claimed, 0);
    }
    return -EEXIST;
}

/* At open: count what is there, and remove temporary files a crash left
 * and payloads nothing names. */
static void count_file(void *context, const struct visit *v)
{
    struct census *c = context;
    if (v->kind == K_TEMPORARY) {
        if (left_by_crash(v->name, &v->seen->st))
            (void)zm__disk_remove_seen(c->disk, v->space_fd, v->name, v->seen);
        return;
    }
    if (v->kind == K_DATA && v->format == DISK_FORMAT && orphaned(v) &&
        zm__disk_remove_seen(c->disk, v->space_fd, v->name, v->seen) == 0)
        return;
    c->bytes += (uint64_t)v->seen->st.st_size;
    if (v->kind != K_DATA)
        c->entries++;
}

/* DIRECTORY/v<format>, made if missing, checked private as the directory
 * is. */
static int open_format(zm_disk *disk, zm_err *err)
{
    int rc = zm__disk_open_directory(disk->directory_fd, DISK_FORMAT_NAME, 1, &disk->format_fd);
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
    struct census c = {disk, 0, 0};
    zm__disk_walk_files(disk, count_file, &c);
    disk->bytes_held = c.bytes;
    disk->entries = c.entries;
    zm__disk_shrink(disk);
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
    zm__disk_names_of(space, "", space_name, entry);
    int space_fd;
    if (zm__disk_open_space(disk, NULL, space_name, 0, &space_fd) != 0)
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
