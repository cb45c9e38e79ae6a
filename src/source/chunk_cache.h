/* Internal to the source module: a bounded cache of decoded chunks shared
 * by every request, keyed by a 64-bit xxh3 hash, with single flight (a chunk
 * that several threads need at once is decoded by one of them, once). */
#ifndef ZARRMOUNT_SOURCE_CHUNK_CACHE_H
#define ZARRMOUNT_SOURCE_CHUNK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"

typedef struct zm__chunk_cache zm__chunk_cache;

/* A held chunk: its bytes stay valid until zm__chunk_cache_release. */
typedef struct zm__chunk_ref {
    const uint8_t *bytes;
    size_t size;
    void *entry; /* internal */
} zm__chunk_ref;

/* hits: gets answered without running the loader (from the cache, or by
 * sharing another thread's successful load); misses: loads run;
 * evictions: entries dropped to fit the capacity; loads_failed: loads that
 * failed; bytes_held, entries: decoded chunks in the cache, held or not. */
typedef struct zm__chunk_cache_stats {
    uint64_t hits, misses, evictions, loads_failed;
    uint64_t bytes_held, entries;
    uint64_t capacity_bytes;
} zm__chunk_cache_stats;

/* capacity_bytes bounds the bytes of entries nobody holds (held entries are
 * never evicted, so a burst may pass it until released). 0 disables
 * keeping: every get loads, but concurrent gets of one key still share. */
int zm__chunk_cache_create(size_t capacity_bytes, zm__chunk_cache **out);
/* Frees the cache and every chunk in it; no get may be in flight and no ref
 * held. */
void zm__chunk_cache_destroy(zm__chunk_cache *cache);

/* Produces a chunk's bytes: fills *bytes (malloc'd; the cache takes it) and
 * *size, or returns a negative errno with err set. */
typedef int (*zm__chunk_loader)(void *context, uint8_t **bytes, size_t *size, zm_err *err);

/* Returns the chunk for key, loading it with loader(context) on a miss.
 * If another thread is loading the same key, waits for that load instead of
 * loading again. A failed load is not cached (the next get tries again) and
 * its error goes to every waiter. On success ref holds the chunk. */
int zm__chunk_cache_get(zm__chunk_cache *cache, uint64_t key, zm__chunk_loader loader,
                        void *context, zm__chunk_ref *ref, zm_err *err);
/* Gives back a ref from a successful get (ref->entry NULL: does nothing). A
 * loader must not get its own key (it would wait for itself); other keys
 * are fine. */
void zm__chunk_cache_release(zm__chunk_cache *cache, zm__chunk_ref *ref);

void zm__chunk_cache_get_stats(zm__chunk_cache *cache, zm__chunk_cache_stats *stats);

/* xxh3-64 of a byte string (libxxhash), for building keys. */
uint64_t zm__chunk_key(const void *bytes, size_t length);

#endif
