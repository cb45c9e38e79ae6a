/* The disk cache's writes: an entry filed (its payload first, then its
 * header, each under a temporary name and renamed, replacing only the
 * cache's own files), and the least recently used entries evicted first
 * when it would pass its bound. The layout and trust rules are in disk.c. */
#include "cache/disk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* Evicting goes below the bound by this share, so that every write past
 * it does not rescan the directory. */
#define EVICT_TO_PERCENT 90

/* ---- Eviction ------------------------------------------------------------------------ */

/* One of the cache's files as eviction sees it: grouped by entry (current
 * format: a header and its payloads, by key hash), a file of another
 * format alone. */
struct aged {
    char format_name[12], space_name[17], name[48];
    char stem[17]; /* key hash (current format), "" otherwise */
    int kind;
    uint64_t size;
    struct zm__disk_seen seen;
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
    a->size = (uint64_t)v->seen->st.st_size;
    a->seen = *v->seen;
    a->used = v->seen->st.st_mtim;
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
    if (zm__disk_open_directory(disk->directory_fd, first->format_name, 0, &format_fd) != 0)
        return 0;
    int rc = zm__disk_open_directory(format_fd, first->space_name, 0, &space_fd);
    close(format_fd);
    if (rc != 0)
        return 0;
    int gone = 1;
    for (size_t i = g->first; gone && i < g->first + g->count; i++)
        if (zm__disk_remove_seen(disk, space_fd, items[i].name, &items[i].seen) != 0)
            gone = 0;
    close(space_fd);
    return gone;
}

/* Removes the least recently used entries until the cache holds at most
 * target bytes, counting what is really on disk (other mounts write too). */
static void evict_to(zm_disk *disk, uint64_t target)
{
    struct aged_list l = {NULL, 0, 0};
    zm__disk_walk_files(disk, collect_file, &l);
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

void zm__disk_shrink(zm_disk *disk)
{
    pthread_mutex_lock(&disk->put_lock);
    pthread_mutex_lock(&disk->lock);
    int over = disk->bytes_held > disk->capacity;
    pthread_mutex_unlock(&disk->lock);
    if (over)
        evict_to(disk, disk->capacity / 100 * EVICT_TO_PERCENT);
    pthread_mutex_unlock(&disk->put_lock);
}

/* ---- Writing -------------------------------------------------------------------------- */

int zm_disk_put(zm_disk *disk, const char *space, const char *key, const void *bytes, size_t size,
                zm_err *err)
{
    pthread_mutex_lock(&disk->put_lock);
    int rc = zm__disk_put_locked(disk, space, key, bytes, size, err);
    pthread_mutex_unlock(&disk->put_lock);
    return rc;
}

/* Writes parts to a new temporary file in the space directory and renames
 * it to name there. */
static int write_file(zm_disk *disk, int space_fd, const char *space_name, const char *name,
                      const void *const *parts, const size_t *lengths, int count, zm_err *err)
{
    char temporary[64], path[4200];
    zm__disk_temporary_name(disk, temporary);
    zm__disk_describe(disk, DISK_FORMAT_NAME, space_name, temporary, path, sizeof path);
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
        zm__disk_describe(disk, DISK_FORMAT_NAME, space_name, name, path, sizeof path);
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
    h.header_xxh3 = zm__disk_header_hash(&h, space, key);
    char data[48], previous_data[48] = "", path[4200];
    zm__disk_data_name(entry, h.payload_xxh3, data);

    /* Only the cache's own files are replaced: a name taken by anything
     * else (a symbolic link, a directory) is left alone and the entry not
     * kept. */
    struct stat st;
    const char *taken = !zm__disk_replaceable(space_fd, entry, &st)  ? entry
                        : !zm__disk_replaceable(space_fd, data, &st) ? data
                                                                     : NULL;
    if (taken != NULL) {
        zm__disk_describe(disk, DISK_FORMAT_NAME, space_name, taken, path, sizeof path);
        return zm_err_set(err, -EEXIST,
                          "%s is not the cache's file (not a regular file): left "
                          "alone, the entry not kept",
                          path);
    }

    /* What it replaces, to count and to remove once replaced. */
    uint64_t replaced = 0;
    int replacing = 0;
    int fd;
    struct zm__disk_seen header_seen, previous_seen;
    if (zm__disk_open_own(space_fd, entry, &fd, &header_seen) == 0) {
        replacing = 1;
        replaced += (uint64_t)header_seen.st.st_size;
        struct disk_header old;
        if (pread(fd, &old, sizeof old, 0) == (ssize_t)sizeof old) {
            zm__disk_data_name(entry, old.payload_xxh3, previous_data);
            if (strcmp(previous_data, data) == 0 ||
                zm__disk_see(space_fd, previous_data, &previous_seen) != 0)
                previous_data[0] = '\0';
            else
                replaced += (uint64_t)previous_seen.st.st_size;
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
    if (previous_data[0])
        (void)zm__disk_remove_seen(disk, space_fd, previous_data, &previous_seen);
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

int zm__disk_put_locked(zm_disk *disk, const char *space, const char *key, const void *bytes,
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
    zm__disk_names_of(space, key, space_name, entry);
    int space_fd;
    int rc = zm__disk_open_space(disk, NULL, space_name, 1, &space_fd);
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
