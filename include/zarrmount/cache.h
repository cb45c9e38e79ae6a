/* zarrmount cache: a bounded cache of chunks (decoded source chunks,
 * synthesized store files) shared by every request, keyed by a 64-bit xxh3 hash, with single flight (a chunk
 * that several threads need at once is decoded by one of them, once). */
#ifndef ZARRMOUNT_CACHE_H
#define ZARRMOUNT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"

typedef struct zm_cache zm_cache;

/* A held chunk: its bytes stay valid until zm_cache_release. */
typedef struct zm_cache_ref {
    const uint8_t *bytes;
    size_t size;
    void *entry; /* internal */
} zm_cache_ref;

/* hits: gets answered without running the loader (from the cache, or by
 * sharing another thread's successful load); misses: loads run;
 * evictions: entries dropped to fit the capacity; loads_failed: loads that
 * failed; bytes_held, entries: decoded chunks in the cache, held or not. */
typedef struct zm_cache_stats {
    uint64_t hits, misses, evictions, loads_failed;
    uint64_t bytes_held, entries;
    uint64_t capacity_bytes;
} zm_cache_stats;

/* capacity_bytes bounds the bytes of entries nobody holds (held entries are
 * never evicted, so a burst may pass it until released). 0 disables
 * keeping: every get loads, but concurrent gets of one key still share. */
int zm_cache_create(size_t capacity_bytes, zm_cache **out);
/* Frees the cache and every chunk in it; no get may be in flight and no ref
 * held. */
void zm_cache_destroy(zm_cache *cache);

/* Produces a chunk's bytes: fills *bytes (malloc'd; the cache takes it) and
 * *size, or returns a negative errno with err set. */
typedef int (*zm_cache_loader)(void *context, uint8_t **bytes, size_t *size, zm_err *err);

/* Returns the chunk for key, loading it with loader(context) on a miss.
 * If another thread is loading the same key, waits for that load instead of
 * loading again. A failed load is not cached (the next get tries again) and
 * its error goes to every waiter. On success ref holds the chunk. */
int zm_cache_get(zm_cache *cache, uint64_t key, zm_cache_loader loader,
                        void *context, zm_cache_ref *ref, zm_err *err);
/* Gives back a ref from a successful get (ref->entry NULL: does nothing). A
 * loader must not get its own key (it would wait for itself); other keys
 * are fine. */
void zm_cache_release(zm_cache *cache, zm_cache_ref *ref);
/* Another hold on the entry ref holds (held: ref came from a get or a
 * peek and is not released yet), given back with zm_cache_release; not
 * counted as a get. A ref holding nothing gives one holding nothing. */
void zm_cache_hold(zm_cache *cache, const zm_cache_ref *ref, zm_cache_ref *out);
/* The chunk for key if the cache holds it loaded now (1, ref held as by a
 * get, counted a hit), else 0 with nothing loaded or waited for: a pass
 * that decodes its chunks itself uses what is kept already. */
int zm_cache_peek(zm_cache *cache, uint64_t key, zm_cache_ref *ref);

void zm_cache_get_stats(zm_cache *cache, zm_cache_stats *stats);

/* One party's share of a shared cache (a mount's view): the gets made for
 * it (hits, misses), and the entries its loads made while they are kept
 * (bytes_held, entries) or when they are evicted (evictions). Updated under
 * the cache's lock: read it with zm_cache_account_read. It must outlive
 * every entry loaded for it (the cache). */
typedef struct zm_cache_account {
    uint64_t hits, misses, evictions, bytes_held, entries;
} zm_cache_account;

/* zm_cache_get, counted in account (NULL: in none). */
int zm_cache_get_for(zm_cache *cache, uint64_t key, zm_cache_loader loader, void *context,
                     zm_cache_account *account, zm_cache_ref *ref, zm_err *err);

void zm_cache_account_read(zm_cache *cache, const zm_cache_account *account, zm_cache_account *out);

/* xxh3-64 of a byte string (libxxhash), for building keys. */
uint64_t zm_cache_key(const void *bytes, size_t length);

/* ---- On disk: work kept across mounts ----------------------------------------- */

/* A directory of entries that outlive a mount: each filed under a space
 * (what it belongs to: the tree's are a source's identity and the codec
 * libraries' versions, zm_codec_build) and a key, with an xxh3 of its
 * bytes checked on every read (a damaged, truncated or foreign entry is
 * removed and reported missing, never served), written under a temporary
 * name and renamed (a crash leaves no half entry), the whole bounded and
 * evicted least recently used first. An entry's bytes are a file of their
 * own, exactly those bytes (zm_disk_open_entry lends it, for the kernel to
 * serve as it lies). A format number in the layout keeps a newer zarrmount
 * off an older one's entries; entries of format 1 are moved to the current
 * format when first read, other formats are evicted first. Entries are in
 * the machine's byte order: another machine's read as damaged. Thread-safe;
 * several processes of one user may share a directory.
 *
 * Whoever can write an entry decides what is served (the checksum finds
 * damage, not a writer who computes it again), so the directory must be
 * private to the user running the mount: a real directory, not a symbolic
 * link, owned by that user and writable by nobody else, below directories
 * owned by root or that user that nobody else may write to unless they are
 * sticky. Only the cache's own files (regular files with its names in its
 * format and space directories) are ever read, counted or removed; a
 * symbolic link inside is never followed. Anything else there is left
 * alone and counted as foreign. */
typedef struct zm_disk zm_disk;

typedef struct zm_disk_stats {
    uint64_t hits, misses, writes, evictions, damaged;
    uint64_t migrated; /* entries of an older format moved to the current one */
    uint64_t bytes_held, entries, capacity_bytes;
    uint64_t foreign; /* files there that are not the cache's own (left alone), at the last walk */
} zm_disk_stats;

/* The directory used when none is given: $XDG_CACHE_HOME/zarrmount when
 * XDG_CACHE_HOME is an absolute path; else /var/cache/zarrmount for root
 * (euid 0); else $HOME/.cache/zarrmount ($HOME absolute) or the user
 * database's home directory's. Never a world-writable place of its own
 * choosing. -ENOENT when there is none (no home), -ENAMETOOLONG. */
int zm_disk_default_directory(char *out, size_t size, zm_err *err);

/* Opens (making it, and what is missing above it, mode 0700) the cache in
 * directory (absolute, without . or .. components), bounded to max_bytes;
 * removes temporary files a crash left. -EPERM when the directory is not
 * private to this user (err names the directory and why: "a symbolic
 * link", "owned by uid 1234", "writable by others", a directory above it
 * that others may change); -EINVAL, -errno with the reason (cannot be made,
 * not writable, ...). */
int zm_disk_open(const char *directory, uint64_t max_bytes, zm_disk **out, zm_err *err);
void zm_disk_close(zm_disk *disk);

/* The entry's bytes in a malloc'd *bytes. -ENOENT if there is none,
 * -EBADMSG if it was damaged (then it is removed, and err says why),
 * -errno if it could not be read. */
int zm_disk_get(zm_disk *disk, const char *space, const char *key, uint8_t **bytes, size_t *size,
                zm_err *err);

/* The entry's bytes as a file: *fd a read-only descriptor of a file
 * holding exactly them (*size bytes), checked against their xxh3 just now;
 * the caller closes it. Errors as zm_disk_get. The file stays readable
 * through *fd even if the entry is evicted or replaced meanwhile. */
int zm_disk_open_entry(zm_disk *disk, const char *space, const char *key, int *fd, uint64_t *size,
                       zm_err *err);

/* The length of an entry's bytes, from its header alone, without reading
 * them (they are checked when read, and an entry found damaged then is made
 * again: the same bytes, so the same length). -ENOENT if there is no entry;
 * other errors as zm_disk_get. Counts neither a hit nor a miss. */
int zm_disk_size(zm_disk *disk, const char *space, const char *key, uint64_t *size);

/* Whether the cache holds at least one entry of space (of the current
 * format), without checking it. */
int zm_disk_has_space(zm_disk *disk, const char *space);

/* Files (or replaces) an entry, evicting the least recently used ones if
 * the bound would be passed. -EFBIG for an entry larger than the bound. */
int zm_disk_put(zm_disk *disk, const char *space, const char *key, const void *bytes, size_t size,
                zm_err *err);

void zm_disk_get_stats(zm_disk *disk, zm_disk_stats *stats);

/* How many files the last walk over the directory (the census at open, an
 * eviction) found that are not the cache's own, and (example, "" if none)
 * the path of the first. */
uint64_t zm_disk_foreign(zm_disk *disk, char *example, size_t size);

#endif
