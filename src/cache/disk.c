/* Work kept across mounts: entries in a directory, each filed under a space
 * (what it belongs to: a source's identity) and a key, checked by xxh3 on
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
 * Eviction removes whatever is oldest, other formats first. */
#include "zarrmount/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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

#define DISK_FORMAT 2
#define DISK_MAGIC "ZMCACHE"
/* Evicting goes below the bound by this share, so that every write past
 * it does not rescan the directory. */
#define EVICT_TO_PERCENT 90
/* A payload filed with no header (a crash between the two renames, or a
 * header removed under a reader) is removed at open once this old: a
 * younger one may be another mount's write in progress. */
#define ORPHAN_SECONDS 600
/* The longest header: the space and key are a source identity and a path. */
#define HEADER_MAX (64 * 1024)

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
    char *root;          /* DIRECTORY/v<format> */
    char *directory;     /* DIRECTORY */
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
    uint64_t key;         /* xxh3 of space and key; 0: an empty slot */
    uint64_t length, xxh3;
    dev_t dev;
    ino_t ino;
    struct timespec mtime, ctime;
    time_t touched;       /* when its header's time was last moved (for eviction) */
};

/* Slots of the table (open addressing); past half full it starts again
 * empty: a forgotten entry is checked again, nothing else. */
#define CHECKED_SLOTS 65536
/* A header's time moves at most this often when its payload is lent. */
#define TOUCH_SECONDS 60

void zm_disk_default_directory(char *out, size_t size)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg != NULL && xdg[0] == '/')
        snprintf(out, size, "%s/zarrmount", xdg);
    else
        snprintf(out, size, "/var/tmp/zarrmount");
}

static int make_directory(const char *path, zm_err *err)
{
    if (mkdir(path, 0700) == 0 || errno == EEXIST)
        return 0;
    return zm_err_set(err, -errno, "cannot make the cache directory %s: %s", path, strerror(errno));
}

/* mkdir -p */
static int make_directories(const char *path, zm_err *err)
{
    char *copy = strdup(path);
    if (copy == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (char *p = copy + 1; rc == 0 && *p; p++)
        if (*p == '/') {
            *p = '\0';
            rc = make_directory(copy, err);
            *p = '/';
        }
    if (rc == 0)
        rc = make_directory(copy, err);
    free(copy);
    return rc;
}

/* ---- Names ---------------------------------------------------------------------- */

enum file_kind { K_OTHER, K_TEMPORARY, K_ENTRY, K_DATA };

/* What a file of the current format is by its name: "<16 hex>.entry",
 * "<16 hex>-<16 hex>.data", "tmp.<pid>.<n>", or anything else. stem gets
 * the key's hash (the first 16 characters) for entries and payloads. */
static enum file_kind kind_of(const char *name, char stem[17])
{
    if (strncmp(name, "tmp.", 4) == 0)
        return K_TEMPORARY;
    size_t length = strlen(name);
    for (int i = 0; i < 16; i++)
        if (length < 16 || !((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return K_OTHER;
    memcpy(stem, name, 16);
    stem[16] = '\0';
    if (length == 22 && strcmp(name + 16, ".entry") == 0)
        return K_ENTRY;
    if (length == 38 && name[16] == '-' && strcmp(name + 33, ".data") == 0)
        return K_DATA;
    return K_OTHER;
}

/* DIRECTORY/v<format>/<space hash> */
static void space_path(const char *root, const char *space, char *out, size_t size)
{
    snprintf(out, size, "%s/%016" PRIx64, root, (uint64_t)XXH3_64bits(space, strlen(space)));
}

/* .../<key hash>.entry, in root's layout */
static void entry_path(const char *root, const char *space, const char *key, char *out, size_t size)
{
    char directory[4096];
    space_path(root, space, directory, sizeof directory);
    snprintf(out, size, "%s/%016" PRIx64 ".entry", directory, (uint64_t)XXH3_64bits(key, strlen(key)));
}

/* .../<key hash>-<payload hash>.data beside entry (a path ending ".entry") */
static void data_path(const char *entry, uint64_t payload_xxh3, char *out, size_t size)
{
    size_t stem = strlen(entry) - strlen(".entry");
    snprintf(out, size, "%.*s-%016" PRIx64 ".data", (int)stem, entry, payload_xxh3);
}

/* ---- Census and leftovers --------------------------------------------------------- */

/* Calls visit for every file under the cache directory (every format):
 * its path, name and stat. */
typedef void (*visit_fn)(void *context, const char *path, const char *name, const struct stat *st);

static void walk_files(const char *directory, int depth, visit_fn visit, void *context)
{
    DIR *d = opendir(directory);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || (e->d_name[1] == '.' && e->d_name[2] == '\0')))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", directory, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < 3)
            walk_files(path, depth + 1, visit, context);
        else if (S_ISREG(st.st_mode))
            visit(context, path, e->d_name, &st);
    }
    closedir(d);
}

/* Whether a temporary file (tmp.<pid>.<n>) is one a crash left: its
 * process is gone (or is this one, just started), or it is a day old (the
 * number taken by another process since). Another live mount sharing the
 * directory may be writing it. */
static int left_by_crash(const char *name, const struct stat *st)
{
    char *end;
    long pid = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || pid <= 0 || pid == (long)getpid())
        return 1;
    if (time(NULL) - st->st_mtime > 24 * 3600)
        return 1;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

struct census {
    uint64_t bytes, entries;
};

/* Whether a payload of the current format has no header naming it. */
static int orphaned(const char *path, const struct stat *st)
{
    if (time(NULL) - st->st_mtime < ORPHAN_SECONDS)
        return 0;
    char entry[4200];
    snprintf(entry, sizeof entry, "%.*s.entry", (int)(strlen(path) - strlen("-0123456789abcdef.data")),
             path);
    int fd = open(entry, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT;
    struct disk_header h;
    ssize_t n = pread(fd, &h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h)
        return 0; /* damaged: the next read removes both */
    char named[4300];
    data_path(entry, h.payload_xxh3, named, sizeof named);
    return strcmp(named, path) != 0; /* replaced by another payload */
}

/* At open: count what is there, and remove temporary files a crash left
 * and payloads nothing names. */
static void count_file(void *context, const char *path, const char *name, const struct stat *st)
{
    struct census *c = context;
    char stem[17];
    enum file_kind kind = kind_of(name, stem);
    if (kind == K_TEMPORARY) {
        if (left_by_crash(name, st))
            unlink(path);
        return;
    }
    if (kind == K_DATA && orphaned(path, st) && unlink(path) == 0)
        return;
    c->bytes += (uint64_t)st->st_size;
    if (kind != K_DATA)
        c->entries++;
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
    disk->directory = strdup(directory);
    size_t length = strlen(directory) + 16;
    disk->root = malloc(length);
    if (disk->directory == NULL || disk->root == NULL) {
        zm_disk_close(disk);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    snprintf(disk->root, length, "%s/v%d", directory, DISK_FORMAT);
    disk->capacity = max_bytes;
    int rc = make_directories(disk->root, err);
    if (rc == 0 && access(disk->root, R_OK | W_OK | X_OK) != 0)
        rc = zm_err_set(err, -errno, "cache directory %s: %s", disk->root, strerror(errno));
    if (rc != 0) {
        zm_disk_close(disk);
        return rc;
    }
    struct census c = {0, 0};
    walk_files(directory, 0, count_file, &c);
    disk->bytes_held = c.bytes;
    disk->entries = c.entries;
    *out = disk;
    return 0;
}

void zm_disk_close(zm_disk *disk)
{
    if (disk == NULL)
        return;
    free(disk->root);
    free(disk->directory);
    free(disk->checked);
    pthread_mutex_destroy(&disk->checked_lock);
    pthread_mutex_destroy(&disk->lock);
    pthread_mutex_destroy(&disk->put_lock);
    free(disk);
}

int zm_disk_has_space(zm_disk *disk, const char *space)
{
    char directory[4096];
    space_path(disk->root, space, directory, sizeof directory);
    DIR *d = opendir(directory);
    if (d == NULL)
        return 0;
    int found = 0;
    struct dirent *e;
    char stem[17];
    while (!found && (e = readdir(d)) != NULL)
        found = kind_of(e->d_name, stem) == K_ENTRY;
    closedir(d);
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

/* The whole of a file, and (seen) the file it was. */
static int read_path(const char *path, size_t limit, uint8_t **bytes, size_t *size, struct stat *seen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = seen != NULL && fstat(fd, seen) != 0 ? -errno : 0;
    if (rc == 0)
        rc = read_fd(fd, limit, bytes, size);
    close(fd);
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
static int names(const struct disk_header *h, const uint8_t *file, const char *space, const char *key)
{
    size_t space_length = strlen(space), key_length = strlen(key);
    return h->space_length == space_length && h->key_length == key_length &&
           memcmp(file + sizeof *h, space, space_length) == 0 &&
           memcmp(file + sizeof *h + space_length, key, key_length) == 0;
}

/* Removes path, if it is still the file seen (NULL: whatever it is). A file
 * filed again under the name meanwhile (another thread or mount rebuilt the
 * entry: a new file, renamed into place) stays. */
static void forget_file(zm_disk *disk, const char *path, const struct stat *seen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    if (seen != NULL && (st.st_dev != seen->st_dev || st.st_ino != seen->st_ino))
        return;
    if (unlink(path) != 0)
        return;
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held = disk->bytes_held > (uint64_t)st.st_size ? disk->bytes_held - (uint64_t)st.st_size : 0;
    pthread_mutex_unlock(&disk->lock);
}

/* Removes a damaged entry (the files of it that were seen), its header first. */
static void forget_entry(zm_disk *disk, const char *entry, const struct stat *entry_seen,
                         const char *data, const struct stat *data_seen)
{
    forget_file(disk, entry, entry_seen);
    if (data != NULL)
        forget_file(disk, data, data_seen);
    pthread_mutex_lock(&disk->lock);
    disk->entries = disk->entries ? disk->entries - 1 : 0;
    pthread_mutex_unlock(&disk->lock);
}

/* An entry found, its payload open and of the right length, not yet
 * checked against its hash. */
struct found {
    char entry[4200], data[4300];
    struct stat entry_seen, data_seen; /* the files read */
    int fd;
    uint64_t length, xxh3;
};

static int put_locked(zm_disk *disk, const char *space, const char *key, const void *bytes,
                      size_t size, zm_err *err);

/* Moves an entry of format 1 (header, names and payload in one file) to
 * the current format. 0 when there was one and it moved; -ENOENT when there
 * is none (or it was damaged: then it is removed). */
static int migrate(zm_disk *disk, const char *space, const char *key)
{
    char root[4200], path[4300];
    snprintf(root, sizeof root, "%s/v1", disk->directory);
    entry_path(root, space, key, path, sizeof path);
    uint8_t *file;
    size_t length;
    struct stat seen;
    if (read_path(path, (size_t)1 << 40, &file, &length, &seen) != 0)
        return -ENOENT;
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
        forget_file(disk, path, &seen);
        pthread_mutex_lock(&disk->lock);
        disk->entries = disk->entries ? disk->entries - 1 : 0;
        pthread_mutex_unlock(&disk->lock);
    }
    free(file);
    return rc == 0 ? 0 : -ENOENT;
}

/* Finds an entry's header: checked and naming space and key (f->entry,
 * f->entry_seen, f->length, f->xxh3 set). -ENOENT (none), -EBADMSG
 * (damaged: removed, err says why), -errno. */
static int find_header(zm_disk *disk, const char *space, const char *key, struct found *f, int migrated,
                       zm_err *err)
{
    f->fd = -1;
    entry_path(disk->root, space, key, f->entry, sizeof f->entry);
    uint8_t *file;
    size_t length;
    int rc = read_path(f->entry, HEADER_MAX, &file, &length, &f->entry_seen);
    if (rc == -ENOENT && !migrated && migrate(disk, space, key) == 0)
        return find_header(disk, space, key, f, 1, err);
    if (rc == -ENOENT)
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    struct disk_header h;
    const char *why = rc == -EFBIG ? "longer than any header" : NULL;
    if (rc != 0 && why == NULL)
        return zm_err_set(err, rc, "cache entry %s: %s", f->entry, strerror(-rc));
    if (why == NULL)
        why = check_header(file, length, DISK_FORMAT, &h);
    if (why != NULL) {
        free(file);
        forget_entry(disk, f->entry, &f->entry_seen, NULL, NULL);
        disk->damaged++;
        return zm_err_set(err, -EBADMSG, "cache entry %s was %s: removed", f->entry, why);
    }
    int ours = names(&h, file, space, key);
    free(file);
    if (!ours) /* another key with the same hash: not ours (the put replaces it) */
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    data_path(f->entry, h.payload_xxh3, f->data, sizeof f->data);
    f->length = h.payload_length;
    f->xxh3 = h.payload_xxh3;
    return 0;
}

/* Finds an entry: its header checked and naming space and key, its payload
 * opened and of the length the header gives. -ENOENT (none), -EBADMSG
 * (damaged: removed, err says why), -errno. */
static int find(zm_disk *disk, const char *space, const char *key, struct found *f, int migrated,
                zm_err *err)
{
    int rc = find_header(disk, space, key, f, migrated, err);
    if (rc != 0)
        return rc;
    f->fd = open(f->data, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 && errno == ENOENT) {
        /* Evicted under us, or removed by hand: the header names nothing. */
        forget_entry(disk, f->entry, &f->entry_seen, NULL, NULL);
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    }
    if (f->fd < 0)
        return zm_err_set(err, -errno, "cache entry %s: %s", f->data, strerror(errno));
    if (fstat(f->fd, &f->data_seen) != 0) {
        rc = -errno;
        close(f->fd);
        f->fd = -1;
        return zm_err_set(err, rc, "cache entry %s: %s", f->data, strerror(-rc));
    }
    if ((uint64_t)f->data_seen.st_size != f->length) {
        close(f->fd);
        f->fd = -1;
        forget_entry(disk, f->entry, &f->entry_seen, f->data, &f->data_seen);
        disk->damaged++;
        return zm_err_set(err, -EBADMSG, "cache entry %s was truncated or extended: removed", f->data);
    }
    return 0;
}

/* After a payload failed its hash: removed, never served. */
static int damaged(zm_disk *disk, struct found *f, zm_err *err)
{
    close(f->fd);
    f->fd = -1;
    forget_entry(disk, f->entry, &f->entry_seen, f->data, &f->data_seen);
    disk->damaged++;
    return zm_err_set(err, -EBADMSG, "cache entry %s: its bytes are damaged: removed", f->data);
}

int zm_disk_get(zm_disk *disk, const char *space, const char *key, uint8_t **bytes, size_t *size,
                zm_err *err)
{
    *bytes = NULL;
    *size = 0;
    struct found f;
    int rc = find(disk, space, key, &f, 0, err);
    if (rc != 0) {
        disk->misses++;
        return rc;
    }
    uint8_t *payload;
    size_t length;
    rc = read_fd(f.fd, (size_t)f.length, &payload, &length);
    if (rc == 0 && (length != f.length || XXH3_64bits(payload, length) != f.xxh3)) {
        free(payload);
        disk->misses++;
        return damaged(disk, &f, err);
    }
    close(f.fd);
    if (rc != 0) {
        disk->misses++;
        return zm_err_set(err, rc, "cache entry %s: %s", f.data, strerror(-rc));
    }
    /* Its last use, for eviction. */
    (void)utimensat(AT_FDCWD, f.entry, NULL, 0);
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
    char entry[4200], data[4300];
    entry_path(disk->root, space, key, entry, sizeof entry);
    data_path(entry, c.xxh3, data, sizeof data);
    int opened = open(data, O_RDONLY | O_CLOEXEC);
    if (opened < 0)
        return -ENOENT;
    struct stat st;
    if (fstat(opened, &st) != 0 || !same_file(&c, &st)) {
        close(opened);
        return -ENOENT;
    }
    time_t now = time(NULL);
    if (now - c.touched >= TOUCH_SECONDS) {
        (void)utimensat(AT_FDCWD, entry, NULL, 0);
        c.touched = now;
        checked_put(disk, &c);
    }
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
        disk->misses++;
        return rc;
    }
    struct stat before;
    if (fstat(f.fd, &before) != 0) {
        rc = -errno;
        close(f.fd);
        disk->misses++;
        return zm_err_set(err, rc, "cache entry %s: %s", f.data, strerror(-rc));
    }
    if (f.length > 0) {
        /* Checked where it lies: mapped, not copied. */
        void *map = mmap(NULL, (size_t)f.length, PROT_READ, MAP_SHARED | MAP_POPULATE, f.fd, 0);
        if (map == MAP_FAILED) {
            rc = -errno;
            close(f.fd);
            disk->misses++;
            return zm_err_set(err, rc, "cache entry %s: %s", f.data, strerror(-rc));
        }
        uint64_t hash = XXH3_64bits(map, (size_t)f.length);
        munmap(map, (size_t)f.length);
        if (hash != f.xxh3) {
            disk->misses++;
            return damaged(disk, &f, err);
        }
    }
    (void)utimensat(AT_FDCWD, f.entry, NULL, 0);
    /* Remembered as it was before it was read: a write during the check
     * moved its ctime, and the next open checks it again. */
    struct checked c = {id, f.length, f.xxh3, before.st_dev, before.st_ino, before.st_mtim,
                        before.st_ctim, time(NULL)};
    checked_put(disk, &c);
    disk->hits++;
    *fd = f.fd;
    *size = f.length;
    return 0;
}

int zm_disk_size(zm_disk *disk, const char *space, const char *key, uint64_t *size)
{
    struct found f;
    zm_err ignored;
    int rc = find_header(disk, space, key, &f, 0, &ignored);
    if (rc == 0)
        *size = f.length;
    return rc;
}

/* ---- Eviction ------------------------------------------------------------------------ */

/* One entry as eviction sees it: its header and payloads (current format:
 * grouped by key hash), or a file of another format alone. */
struct aged {
    char *path;     /* the file; for the current format, any file of the group */
    char stem[17];  /* key hash (current format), "" otherwise */
    int kind;
    uint64_t size;
    struct timespec used; /* the header's time: touched on every read */
    int old_format;
};

struct aged_list {
    struct aged *items;
    size_t count, capacity;
    const char *current_root;
};

static void collect_file(void *context, const char *path, const char *name, const struct stat *st)
{
    struct aged_list *l = context;
    char stem[17] = "";
    int current = strncmp(path, l->current_root, strlen(l->current_root)) == 0 &&
                  path[strlen(l->current_root)] == '/';
    enum file_kind kind = kind_of(name, stem);
    if (kind == K_TEMPORARY)
        return;
    if (l->count == l->capacity) {
        size_t capacity = l->capacity ? l->capacity * 2 : 256;
        struct aged *grown = realloc(l->items, capacity * sizeof *grown);
        if (grown == NULL)
            return;
        l->items = grown;
        l->capacity = capacity;
    }
    char *copy = strdup(path);
    if (copy == NULL)
        return;
    struct aged *a = &l->items[l->count++];
    *a = (struct aged){copy, "", kind, (uint64_t)st->st_size, st->st_mtim, !current};
    if (current && (kind == K_ENTRY || kind == K_DATA))
        memcpy(a->stem, stem, sizeof a->stem);
}

/* The directory part of a path, for grouping. */
static size_t directory_length(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) : 0;
}

/* Files of one group side by side: same directory, same stem, the header
 * first. */
static int by_group(const void *a, const void *b)
{
    const struct aged *x = a, *y = b;
    size_t dx = directory_length(x->path), dy = directory_length(y->path);
    int c = dx != dy ? (dx < dy ? -1 : 1) : strncmp(x->path, y->path, dx);
    if (c == 0)
        c = strcmp(x->stem, y->stem);
    if (c == 0 && x->stem[0] == '\0')
        c = strcmp(x->path, y->path);
    if (c == 0)
        c = (x->kind != K_ENTRY) - (y->kind != K_ENTRY);
    return c;
}

/* Whether b belongs to a's entry: the same key hash in the same directory. */
static int same_group(const struct aged *a, const struct aged *b)
{
    size_t length = directory_length(a->path);
    return a->stem[0] != '\0' && strcmp(a->stem, b->stem) == 0 &&
           directory_length(b->path) == length && strncmp(a->path, b->path, length) == 0;
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

/* Removes the least recently used entries until the cache holds at most
 * target bytes, counting what is really on disk (other mounts write too). */
static void evict_to(zm_disk *disk, uint64_t target)
{
    struct aged_list l = {NULL, 0, 0, disk->root};
    walk_files(disk->directory, 0, collect_file, &l);
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
    if (groups != NULL)
        qsort(groups, group_count, sizeof *groups, by_age);
    size_t removed = 0, entries = 0;
    for (size_t g = 0; g < group_count; g++) {
        int header = l.items[groups[g].first].kind == K_ENTRY || groups[g].old_format;
        entries += header;
        if (total <= target)
            continue;
        /* The header first (sorted first): the entry is gone once it is. */
        int gone = 1;
        for (size_t i = groups[g].first; i < groups[g].first + groups[g].count; i++)
            if (unlink(l.items[i].path) != 0 && errno != ENOENT)
                gone = 0;
        if (gone) {
            total -= groups[g].size;
            removed += header;
            entries -= header;
        }
    }
    for (size_t i = 0; i < l.count; i++)
        free(l.items[i].path);
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

/* Writes parts to a new temporary file in directory and renames it to
 * path. */
static int write_file(zm_disk *disk, const char *directory, const char *path, const void *const *parts,
                      const size_t *lengths, int count, zm_err *err)
{
    char temporary[4300];
    snprintf(temporary, sizeof temporary, "%s/tmp.%d.%" PRIu64, directory, (int)getpid(),
             (uint64_t)++disk->temporary);
    int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return zm_err_set(err, -errno, "cannot write to the cache (%s): %s", temporary,
                          strerror(errno));
    int rc = 0;
    for (int i = 0; rc == 0 && i < count; i++) {
        size_t done = 0;
        while (rc == 0 && done < lengths[i]) {
            ssize_t n = write(fd, (const uint8_t *)parts[i] + done, lengths[i] - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                rc = zm_err_set(err, n < 0 ? -errno : -EIO, "cannot write to the cache (%s): %s",
                                temporary, n < 0 ? strerror(errno) : "no space written");
            else
                done += (size_t)n;
        }
    }
    if (close(fd) != 0 && rc == 0)
        rc = zm_err_set(err, -errno, "cannot write to the cache (%s): %s", temporary, strerror(errno));
    if (rc == 0 && rename(temporary, path) != 0)
        rc = zm_err_set(err, -errno, "cannot file a cache entry (%s): %s", path, strerror(errno));
    if (rc != 0)
        unlink(temporary);
    return rc;
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
        return zm_err_set(err, -ENAMETOOLONG, "%s: a key of %zu bytes is too long for the cache", key,
                          key_length);
    pthread_mutex_lock(&disk->lock);
    int over = disk->bytes_held + total > disk->capacity;
    pthread_mutex_unlock(&disk->lock);
    if (over)
        evict_to(disk, disk->capacity / 100 * EVICT_TO_PERCENT > total
                           ? disk->capacity / 100 * EVICT_TO_PERCENT - total
                           : 0);

    char directory[4096], entry[4200], data[4300], previous_data[4300] = "";
    space_path(disk->root, space, directory, sizeof directory);
    entry_path(disk->root, space, key, entry, sizeof entry);
    int rc = make_directory(directory, err);
    if (rc != 0)
        return rc;
    struct disk_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, DISK_MAGIC, sizeof h.magic);
    h.format = DISK_FORMAT;
    h.space_length = (uint32_t)space_length;
    h.key_length = (uint32_t)key_length;
    h.payload_length = size;
    h.payload_xxh3 = XXH3_64bits(bytes, size);
    h.header_xxh3 = header_hash(&h, space, key);
    data_path(entry, h.payload_xxh3, data, sizeof data);

    /* What it replaces, to count and to remove once replaced. */
    uint64_t replaced = 0;
    int replacing = 0;
    struct stat st;
    if (stat(entry, &st) == 0) {
        replacing = 1;
        replaced += (uint64_t)st.st_size;
        struct disk_header old;
        int fd = open(entry, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (pread(fd, &old, sizeof old, 0) == (ssize_t)sizeof old) {
                data_path(entry, old.payload_xxh3, previous_data, sizeof previous_data);
                if (strcmp(previous_data, data) == 0 || stat(previous_data, &st) != 0)
                    previous_data[0] = '\0';
                else
                    replaced += (uint64_t)st.st_size;
            }
            close(fd);
        }
    }
    uint64_t same_payload = stat(data, &st) == 0 ? (uint64_t)st.st_size : 0;

    /* The payload first, the header last: the entry exists once it does. */
    const void *payload_parts[1] = {bytes};
    size_t payload_lengths[1] = {size};
    rc = write_file(disk, directory, data, payload_parts, payload_lengths, 1, err);
    const void *header_parts[3] = {&h, space, key};
    size_t header_lengths[3] = {sizeof h, space_length, key_length};
    if (rc == 0)
        rc = write_file(disk, directory, entry, header_parts, header_lengths, 3, err);
    if (rc != 0)
        return rc;
    if (previous_data[0])
        unlink(previous_data);
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
    pthread_mutex_unlock(&disk->lock);
    stats->capacity_bytes = disk->capacity;
}
