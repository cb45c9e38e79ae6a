/* The disk cache's lookups: an entry's header found and checked, its
 * payload read or lent (as a descriptor, for FUSE passthrough) only once
 * its bytes match their hash, a damaged entry removed and never served, an
 * entry of format 1 moved to the current format when found, and the
 * payloads this process has checked remembered so that they are lent
 * again without reading every byte. The layout and trust rules are in
 * disk.c. */
#include "cache/disk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* A payload checked against its hash, and its file as it was then: a file
 * written to since has another ctime (which no one can set back), so an
 * unchanged identity means unchanged bytes, and checking it again would
 * only cost a read of every byte at every open. */
struct checked {
    uint64_t key; /* xxh3 of space and key; 0: an empty slot */
    uint64_t length, xxh3;
    struct zm__disk_seen seen; /* its payload's file when checked */
    time_t touched;            /* when its header's time was last moved (for eviction) */
};

/* Slots of the table (open addressing); past half full it starts again
 * empty: a forgotten entry is checked again, nothing else. */
#define CHECKED_SLOTS 65536
/* A header's time moves at most this often when its payload is lent. */
#define TOUCH_SECONDS 60

/* ---- Reading ------------------------------------------------------------------------ */

uint64_t zm__disk_header_hash(const struct disk_header *h, const char *space, const char *key)
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
                    struct zm__disk_seen *seen)
{
    int fd;
    int rc = zm__disk_open_own(directory, name, &fd, seen);
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
    if (zm__disk_header_hash(h, (const char *)file + sizeof *h,
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
static void forget_file(zm_disk *disk, int directory, const char *name,
                        const struct zm__disk_seen *seen)
{
    if (zm__disk_remove_seen(disk, directory, name, seen) != 0)
        return;
    uint64_t size = (uint64_t)seen->st.st_size;
    pthread_mutex_lock(&disk->lock);
    disk->bytes_held = disk->bytes_held > size ? disk->bytes_held - size : 0;
    pthread_mutex_unlock(&disk->lock);
}

/* An entry found, its payload open and of the right length, not yet
 * checked against its hash. */
struct found {
    int space_fd; /* its space directory (-1: none open) */
    char space_name[17], entry[24], data[48];
    struct zm__disk_seen entry_seen, data_seen; /* the files read */
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

/* Removes a damaged entry, counted first: another thread that then finds
 * it gone makes its chunk again and may answer a read of stats.json at
 * once, which must count it (counted after the removal, a thread held up
 * between the two, by its time slice or by the cache's lock, left it out). */
static void forget_damaged(zm_disk *disk, struct found *f, int with_data)
{
    disk->damaged++;
    forget_entry(disk, f, with_data);
}

/* Moves an entry of format 1 (header, names and payload in one file) to
 * the current format. 0 when there was one and it moved; -ENOENT when there
 * is none (or it was damaged: then it is removed). */
static int migrate(zm_disk *disk, const char *space, const char *key)
{
    char space_name[17], entry[24];
    zm__disk_names_of(space, key, space_name, entry);
    int space_fd;
    if (zm__disk_open_space(disk, "v1", space_name, 0, &space_fd) != 0)
        return -ENOENT;
    uint8_t *file;
    size_t length;
    struct zm__disk_seen seen;
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
        rc = zm__disk_put_locked(disk, space, key, file + offset, (size_t)h.payload_length,
                                 &ignored);
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
    zm__disk_names_of(space, key, f->space_name, f->entry);
    char path[4200];
    zm__disk_describe(disk, DISK_FORMAT_NAME, f->space_name, f->entry, path, sizeof path);
    int rc = zm__disk_open_space(disk, NULL, f->space_name, 0, &f->space_fd);
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
        forget_damaged(disk, f, 0);
        return zm_err_set(err, -EBADMSG, "cache entry %s was %s: removed", path, why);
    }
    int ours = names(&h, file, space, key);
    free(file);
    if (!ours) /* another key with the same hash: not ours (the put replaces it) */
        return zm_err_set(err, -ENOENT, "%s: not in the cache", key);
    zm__disk_data_name(f->entry, h.payload_xxh3, f->data);
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
    zm__disk_describe(disk, DISK_FORMAT_NAME, f->space_name, f->data, path, sizeof path);
    rc = zm__disk_open_own(f->space_fd, f->data, &f->fd, &f->data_seen);
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
    if ((uint64_t)f->data_seen.st.st_size != f->length) {
        close(f->fd);
        f->fd = -1;
        forget_damaged(disk, f, 1);
        return zm_err_set(err, -EBADMSG, "cache entry %s was truncated or extended: removed", path);
    }
    return 0;
}

/* After a payload failed its hash: removed, never served. */
static int damaged(zm_disk *disk, struct found *f, zm_err *err)
{
    close(f->fd);
    f->fd = -1;
    forget_damaged(disk, f, 1);
    char path[4200];
    zm__disk_describe(disk, DISK_FORMAT_NAME, f->space_name, f->data, path, sizeof path);
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
        zm__disk_describe(disk, DISK_FORMAT_NAME, f.space_name, f.data, path, sizeof path);
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

/* Whether a payload is as it was when checked: the same file (its inode
 * and generation), its length, and its times (a write moves them). */
static int same_file(const struct checked *c, const struct zm__disk_seen *now)
{
    const struct stat *st = &now->st, *then = &c->seen.st;
    return zm__disk_same_file(now, &c->seen) && (uint64_t)st->st_size == c->length &&
           st->st_mtim.tv_sec == then->st_mtim.tv_sec &&
           st->st_mtim.tv_nsec == then->st_mtim.tv_nsec &&
           st->st_ctim.tv_sec == then->st_ctim.tv_sec &&
           st->st_ctim.tv_nsec == then->st_ctim.tv_nsec;
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
    zm__disk_names_of(space, key, space_name, entry);
    zm__disk_data_name(entry, c.xxh3, data);
    int space_fd, opened;
    struct zm__disk_seen seen;
    if (zm__disk_open_space(disk, NULL, space_name, 0, &space_fd) != 0)
        return -ENOENT;
    if (zm__disk_open_own(space_fd, data, &opened, &seen) != 0 || !same_file(&c, &seen)) {
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
    zm__disk_describe(disk, DISK_FORMAT_NAME, f.space_name, f.data, path, sizeof path);
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
    struct checked c = {id, f.length, f.xxh3, f.data_seen, time(NULL)};
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
