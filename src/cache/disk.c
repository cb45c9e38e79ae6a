/* Work kept across mounts: entries in a directory, each filed under a space
 * (what it belongs to: a source's identity) and a key, checked by xxh3 on
 * every read (a damaged entry is removed, never served), written under a
 * temporary name and renamed (a crash leaves no half entry under a real
 * name), and the whole bounded, least recently used first out.
 *
 * Layout: DIRECTORY/v<format>/<xxh3 of space>/<xxh3 of key>.entry, each file
 * a header (magic, format, the lengths, the payload's xxh3, the header's
 * own xxh3), the space and key in full (two keys hashing alike are told
 * apart), then the payload. A newer format lives beside an older one and
 * never reads it; eviction removes whatever is oldest, old formats first. */
#include "zarrmount/cache.h"

#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define DISK_FORMAT 1
#define DISK_MAGIC "ZMCACHE"
/* Evicting goes below the bound by this share, so that every write past
 * it does not rescan the directory. */
#define EVICT_TO_PERCENT 90

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
    _Atomic uint64_t hits, misses, writes, evictions, damaged;
    _Atomic uint64_t temporary; /* names of temporary files */
};

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

/* Calls visit for every file under the cache directory (every format):
 * its path, size and last use. */
typedef void (*visit_fn)(void *context, const char *path, const struct stat *st);

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
            visit(context, path, &st);
    }
    closedir(d);
}

struct census {
    uint64_t bytes, entries;
};

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

/* At open: count what is there, and remove temporary files a crash left. */
static void count_file(void *context, const char *path, const struct stat *st)
{
    struct census *c = context;
    const char *name = strrchr(path, '/');
    if (name && strncmp(name + 1, "tmp.", 4) == 0) {
        if (left_by_crash(name + 1, st))
            unlink(path);
        return;
    }
    c->bytes += (uint64_t)st->st_size;
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
    pthread_mutex_destroy(&disk->lock);
    pthread_mutex_destroy(&disk->put_lock);
    free(disk);
}

/* DIRECTORY/v<format>/<space hash>[/<key hash>.entry] */
static void space_path(const zm_disk *disk, const char *space, char *out, size_t size)
{
    snprintf(out, size, "%s/%016" PRIx64, disk->root, (uint64_t)XXH3_64bits(space, strlen(space)));
}

static void entry_path(const zm_disk *disk, const char *space, const char *key, char *out,
                       size_t size)
{
    char directory[4096];
    space_path(disk, space, directory, sizeof directory);
    snprintf(out, size, "%s/%016" PRIx64 ".entry", directory, (uint64_t)XXH3_64bits(key, strlen(key)));
}

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

static int read_file(const char *path, uint8_t **bytes, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
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
    close(fd);
    if (rc != 0) {
        free(buffer);
        return rc;
    }
    *bytes = buffer;
    *size = done;
    return 0;
}

static void forget_file(zm_disk *disk, const char *path, uint64_t size)
{
    if (unlink(path) != 0)
        return;
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held = disk->bytes_held > size ? disk->bytes_held - size : 0;
    disk->entries = disk->entries ? disk->entries - 1 : 0;
    pthread_mutex_unlock(&disk->lock);
}

int zm_disk_get(zm_disk *disk, const char *space, const char *key, uint8_t **bytes, size_t *size,
                zm_err *err)
{
    *bytes = NULL;
    *size = 0;
    char path[4200];
    entry_path(disk, space, key, path, sizeof path);
    uint8_t *file = NULL;
    size_t length = 0;
    int rc = read_file(path, &file, &length);
    if (rc == -ENOENT) {
        disk->misses++;
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    }
    if (rc != 0) {
        disk->misses++;
        return zm_err_set(err, rc, "cache entry %s: %s", path, strerror(-rc));
    }
    struct disk_header h;
    size_t space_length = strlen(space), key_length = strlen(key);
    const char *why = NULL;
    if (length < sizeof h) {
        why = "shorter than its header";
    } else {
        memcpy(&h, file, sizeof h);
        if (memcmp(h.magic, DISK_MAGIC, sizeof h.magic) != 0)
            why = "not a cache entry";
        else if (h.format != DISK_FORMAT)
            why = "of another format";
        else if (h.space_length > length || h.key_length > length ||
                 sizeof h + (uint64_t)h.space_length + h.key_length + h.payload_length != length)
            why = "truncated or extended";
        else if (header_hash(&h, (const char *)file + sizeof h,
                             (const char *)file + sizeof h + h.space_length) != h.header_xxh3)
            why = "its header is damaged";
        else if (XXH3_64bits(file + sizeof h + h.space_length + h.key_length, h.payload_length) !=
                 h.payload_xxh3)
            why = "its bytes are damaged";
    }
    if (why != NULL) {
        /* Never served: removed, and rebuilt by whoever asked. */
        forget_file(disk, path, length);
        free(file);
        disk->damaged++;
        disk->misses++;
        return zm_err_set(err, -EBADMSG, "cache entry %s was %s: removed", path, why);
    }
    if (h.space_length != space_length || h.key_length != key_length ||
        memcmp(file + sizeof h, space, space_length) != 0 ||
        memcmp(file + sizeof h + space_length, key, key_length) != 0) {
        /* Another key with the same hash: not ours (the put replaces it). */
        free(file);
        disk->misses++;
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    }
    size_t offset = sizeof h + space_length + key_length;
    memmove(file, file + offset, (size_t)h.payload_length);
    *bytes = file;
    *size = (size_t)h.payload_length;
    /* Its last use, for eviction. */
    (void)utimensat(AT_FDCWD, path, NULL, 0);
    disk->hits++;
    return 0;
}

struct aged {
    char *path;
    uint64_t size;
    struct timespec used;
    int old_format;
};

struct aged_list {
    struct aged *items;
    size_t count, capacity;
    const char *current_root;
};

static void collect_file(void *context, const char *path, const struct stat *st)
{
    struct aged_list *l = context;
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
    l->items[l->count++] = (struct aged){copy, (uint64_t)st->st_size, st->st_mtim,
                                         strncmp(path, l->current_root, strlen(l->current_root)) != 0};
}

static int by_age(const void *a, const void *b)
{
    const struct aged *x = a, *y = b;
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
    uint64_t total = 0;
    for (size_t i = 0; i < l.count; i++)
        total += l.items[i].size;
    qsort(l.items, l.count, sizeof *l.items, by_age);
    size_t removed = 0;
    for (size_t i = 0; i < l.count && total > target; i++)
        if (strstr(l.items[i].path, "/tmp.") == NULL && unlink(l.items[i].path) == 0) {
            total -= l.items[i].size;
            removed++;
        }
    for (size_t i = 0; i < l.count; i++)
        free(l.items[i].path);
    free(l.items);
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held = total;
    disk->entries = l.count - removed;
    pthread_mutex_unlock(&disk->lock);
    disk->evictions += removed;
}

static int put_locked(zm_disk *disk, const char *space, const char *key, const void *bytes,
                      size_t size, zm_err *err);

int zm_disk_put(zm_disk *disk, const char *space, const char *key, const void *bytes, size_t size,
                zm_err *err)
{
    pthread_mutex_lock(&disk->put_lock);
    int rc = put_locked(disk, space, key, bytes, size, err);
    pthread_mutex_unlock(&disk->put_lock);
    return rc;
}

static int put_locked(zm_disk *disk, const char *space, const char *key, const void *bytes,
                      size_t size, zm_err *err)
{
    size_t space_length = strlen(space), key_length = strlen(key);
    uint64_t total = sizeof(struct disk_header) + space_length + key_length + size;
    if (total > disk->capacity)
        return zm_err_set(err, -EFBIG, "%s: %" PRIu64 " bytes do not fit a %" PRIu64 "-byte cache",
                          key, total, disk->capacity);
    pthread_mutex_lock(&disk->lock);
    int over = disk->bytes_held + total > disk->capacity;
    pthread_mutex_unlock(&disk->lock);
    if (over)
        evict_to(disk, disk->capacity / 100 * EVICT_TO_PERCENT > total
                           ? disk->capacity / 100 * EVICT_TO_PERCENT - total
                           : 0);

    char directory[4096], path[4200], temporary[4300];
    space_path(disk, space, directory, sizeof directory);
    entry_path(disk, space, key, path, sizeof path);
    int rc = make_directory(directory, err);
    if (rc != 0)
        return rc;
    snprintf(temporary, sizeof temporary, "%s/tmp.%d.%" PRIu64, directory, (int)getpid(),
             (uint64_t)++disk->temporary);
    struct disk_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, DISK_MAGIC, sizeof h.magic);
    h.format = DISK_FORMAT;
    h.space_length = (uint32_t)space_length;
    h.key_length = (uint32_t)key_length;
    h.payload_length = size;
    h.payload_xxh3 = XXH3_64bits(bytes, size);
    h.header_xxh3 = header_hash(&h, space, key);
    int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return zm_err_set(err, -errno, "cannot write to the cache (%s): %s", temporary,
                          strerror(errno));
    const void *parts[4] = {&h, space, key, bytes};
    size_t lengths[4] = {sizeof h, space_length, key_length, size};
    for (int i = 0; rc == 0 && i < 4; i++) {
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
    struct stat before;
    int replacing = stat(path, &before) == 0;
    if (rc == 0 && rename(temporary, path) != 0)
        rc = zm_err_set(err, -errno, "cannot file a cache entry (%s): %s", path, strerror(errno));
    if (rc != 0) {
        unlink(temporary);
        return rc;
    }
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held += total;
    if (replacing)
        disk->bytes_held = disk->bytes_held > (uint64_t)before.st_size
                               ? disk->bytes_held - (uint64_t)before.st_size
                               : 0;
    else
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
    pthread_mutex_lock(&disk->lock);
    stats->bytes_held = disk->bytes_held;
    stats->entries = disk->entries;
    pthread_mutex_unlock(&disk->lock);
    stats->capacity_bytes = disk->capacity;
}
