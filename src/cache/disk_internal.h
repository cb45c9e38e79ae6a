/* Internal to the disk cache (disk.c: opening it, its names and files, the
 * census; disk_read.c: finding and checking entries; disk_write.c: filing
 * entries and evicting): its layout's constants, the cache's state, and the
 * pieces the three share. The layout and the trust rules are described in
 * disk.c. */
#ifndef ZARRMOUNT_CACHE_DISK_INTERNAL_H
#define ZARRMOUNT_CACHE_DISK_INTERNAL_H

#include "zarrmount/cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define DISK_FORMAT      2
#define DISK_FORMAT_NAME "v2"
#define DISK_MAGIC       "ZMCACHE"
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
    /* Payloads this process checked, as they were then (struct checked, in
     * disk_read.c): lent again without hashing them while they are
     * unchanged. */
    pthread_mutex_t checked_lock;
    struct checked *checked;
    size_t checked_count;
};

/* ---- Names (disk.c) -------------------------------------------------------------- */

enum file_kind { K_OTHER, K_TEMPORARY, K_ENTRY, K_DATA };

/* The names of space's directory and of key's header in it. */
void zm__disk_names_of(const char *space, const char *key, char space_name[17], char entry[24]);
/* The payload's name beside a header (<stem>.entry). */
void zm__disk_data_name(const char *entry, uint64_t payload_xxh3, char out[48]);
/* A file's path, for messages only (nothing is opened by it). */
void zm__disk_describe(const zm_disk *disk, const char *format, const char *space_name,
                       const char *name, char *out, size_t size);

/* ---- Opening the cache's own files (disk.c) ---------------------------------------- */

/* A directory of the cache: name in parent, never through a link. 0 (*fd
 * set), -ENOENT (none), -ELOOP (something else by that name: a symbolic
 * link or a file, not the cache's), -errno. With create, made (0700) if
 * missing. */
int zm__disk_open_directory(int parent, const char *name, int create, int *fd);
/* The space directory of the current format (or of format, "v1"). */
int zm__disk_open_space(const zm_disk *disk, const char *format, const char *space_name, int create,
                        int *fd);
/* One of the cache's files as it was seen: its status, and the generation
 * its file system gave its inode where it tells one (FS_IOC_GETVERSION:
 * ext4, XFS, Btrfs). A file made where one was removed may get the same
 * inode number at once (ext4 hands it out again), so the inode alone does
 * not tell the two apart: the generation does, and without one the
 * modification time does (the new file's is the later). A listing (the
 * census, eviction) sees files without opening them: by their times. */
struct zm__disk_seen {
    struct stat st;
    uint64_t generation;
    int has_generation;
};
/* One of the cache's files for reading: name in directory, a regular file,
 * never through a link (a FIFO does not block the open). 0 (*fd, *seen
 * set), -ENOENT, -ELOOP (a symbolic link or not a regular file: not the
 * cache's), -errno. */
int zm__disk_open_own(int directory, const char *name, int *fd, struct zm__disk_seen *seen);
/* name in directory as it is now, without keeping it open: 0 (*seen set),
 * -ENOENT, -ELOOP (not a regular file), -errno. */
int zm__disk_see(int directory, const char *name, struct zm__disk_seen *seen);
/* Whether now (a regular file) is the file seen before. */
int zm__disk_same_file(const struct zm__disk_seen *now, const struct zm__disk_seen *before);
/* Whether name in directory is absent or one of the cache's files (a
 * regular file): what the cache may replace or remove. */
int zm__disk_replaceable(int directory, const char *name, struct stat *st);
/* Removes one of the cache's files, if it still is the file seen: 0 (gone),
 * -EEXIST (another file is there now: it stays), -errno. */
int zm__disk_remove_seen(zm_disk *disk, int directory, const char *name,
                         const struct zm__disk_seen *seen);
/* A new temporary name of this process's (tmp.<pid>.<n>). */
void zm__disk_temporary_name(zm_disk *disk, char name[64]);

/* ---- Walking the cache's files (disk.c) -------------------------------------------- */

/* One of the cache's files as a walk meets it. */
struct visit {
    int format;              /* n of v<n> */
    const char *format_name; /* "v<n>" */
    const char *space_name;
    int space_fd; /* its directory */
    const char *name;
    enum file_kind kind;
    char stem[17];
    const struct zm__disk_seen *seen;
};

typedef void (*visit_fn)(void *context, const struct visit *v);

/* Calls visit for every one of the cache's files (all formats): regular
 * files with the cache's names in DIRECTORY/v<n>/<16 hex>/, each directory
 * opened without following a link. Anything else is counted in the disk's
 * foreign files and never visited. */
void zm__disk_walk_files(zm_disk *disk, visit_fn visit, void *context);

/* ---- Entries (disk_read.c, disk_write.c) ------------------------------------------- */

/* The header's own hash: of its fields before header_xxh3, the space and
 * the key. */
uint64_t zm__disk_header_hash(const struct disk_header *h, const char *space, const char *key);
/* Files an entry (zm_disk_put's work), evicting first if it would pass the
 * bound; under put_lock. */
int zm__disk_put_locked(zm_disk *disk, const char *space, const char *key, const void *bytes,
                        size_t size, zm_err *err);
/* A cache found above its bound when opened (cache_max lowered since it
 * was filled) evicts down to it at once, least recently used first, not
 * only when a mount next writes. */
void zm__disk_shrink(zm_disk *disk);

#endif
