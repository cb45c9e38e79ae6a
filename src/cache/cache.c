/* A bounded cache of decoded chunks with single flight.
 *
 * Entries live in a hash table keyed by the caller's 64-bit key. An entry
 * is LOADING while one thread runs the loader for it (others asking for the
 * same key wait on the entry's condition variable rather than load again),
 * READY once it holds bytes, and FAILED briefly when its load failed: a
 * failed entry leaves the table at once, so the next get loads again, and
 * stays alive only until the threads that waited on it have read its error.
 *
 * Each entry counts its references: holders of a zm_cache_ref and threads
 * waiting on its load. A READY entry nobody references sits on the LRU
 * list, least recently released first, and only entries on that list are
 * ever evicted, so bytes handed out stay valid until released. Eviction runs
 * whenever the bytes of READY entries exceed the capacity: after a load and
 * after a release.
 *
 * Everything is under one mutex, held only for table and list updates, never
 * while a loader runs or while a caller uses the bytes.
 */
#include "zarrmount/cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define ZM__CACHE_BUCKETS_MIN 64

typedef enum zm__entry_state { ZM__LOADING, ZM__READY, ZM__FAILED } zm__entry_state;

typedef struct zm__entry {
    uint64_t key;
    zm__entry_state state;
    bool in_table;
    size_t refs; /* holders plus waiters */
    uint8_t *bytes;
    size_t size;
    int error_code;         /* FAILED: what the loader said, for the waiters */
    char *error_reason;     /* (NULL if there was no memory to keep it) */
    pthread_cond_t loaded;  /* state left LOADING */
    struct zm__entry *next; /* hash chain */
    struct zm__entry *lru_prev, *lru_next;
    bool in_lru;
    zm_cache_account *owner; /* whose load made it (NULL: nobody's) */
} zm__entry;

struct zm_cache {
    pthread_mutex_t mutex;
    zm__entry **buckets;
    unsigned bucket_bits; /* 2^bucket_bits buckets */
    size_t table_count;   /* entries in the table, LOADING or READY */
    zm__entry *lru_oldest, *lru_newest;
    size_t capacity;
    zm_cache_stats stats; /* bytes_held, entries: READY entries in the table */
};

uint64_t zm_cache_key(const void *bytes, size_t length)
{
    return XXH3_64bits(bytes, length);
}

/* Fibonacci hashing: the top bits of key × 2^64/φ, so keys that are not
 * hashes (small integers in tests, say) still spread over the buckets. */
static size_t zm__bucket(const zm_cache *cache, uint64_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - cache->bucket_bits));
}

static zm__entry *zm__lookup(const zm_cache *cache, uint64_t key)
{
    for (zm__entry *e = cache->buckets[zm__bucket(cache, key)]; e != NULL; e = e->next)
        if (e->key == key)
            return e;
    return NULL;
}

/* Doubles the table when it holds more entries than buckets. Failing to
 * allocate only leaves chains longer, so it is not an error. */
static void zm__maybe_grow(zm_cache *cache)
{
    size_t nbuckets = (size_t)1 << cache->bucket_bits;
    if (cache->table_count <= nbuckets || cache->bucket_bits >= 8 * sizeof(size_t) - 2)
        return;
    zm__entry **old = cache->buckets;
    zm__entry **grown = calloc(nbuckets * 2, sizeof *grown);
    if (grown == NULL)
        return;
    cache->buckets = grown;
    cache->bucket_bits++;
    for (size_t b = 0; b < nbuckets; b++) {
        zm__entry *e = old[b];
        while (e != NULL) {
            zm__entry *next = e->next;
            size_t i = zm__bucket(cache, e->key);
            e->next = grown[i];
            grown[i] = e;
            e = next;
        }
    }
    free(old);
}

static void zm__table_insert(zm_cache *cache, zm__entry *e)
{
    size_t i = zm__bucket(cache, e->key);
    e->next = cache->buckets[i];
    cache->buckets[i] = e;
    e->in_table = true;
    cache->table_count++;
    zm__maybe_grow(cache);
}

static void zm__table_remove(zm_cache *cache, zm__entry *e)
{
    zm__entry **link = &cache->buckets[zm__bucket(cache, e->key)];
    while (*link != e)
        link = &(*link)->next;
    *link = e->next;
    e->next = NULL;
    e->in_table = false;
    cache->table_count--;
}

static void zm__lru_push(zm_cache *cache, zm__entry *e)
{
    e->lru_next = NULL;
    e->lru_prev = cache->lru_newest;
    if (cache->lru_newest != NULL)
        cache->lru_newest->lru_next = e;
    else
        cache->lru_oldest = e;
    cache->lru_newest = e;
    e->in_lru = true;
}

static void zm__lru_remove(zm_cache *cache, zm__entry *e)
{
    if (e->lru_prev != NULL)
        e->lru_prev->lru_next = e->lru_next;
    else
        cache->lru_oldest = e->lru_next;
    if (e->lru_next != NULL)
        e->lru_next->lru_prev = e->lru_prev;
    else
        cache->lru_newest = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
    e->in_lru = false;
}

static void zm__entry_free(zm__entry *e)
{
    pthread_cond_destroy(&e->loaded);
    free(e->bytes);
    free(e->error_reason);
    free(e);
}

/* Evicts the least recently released unheld entries until the READY bytes
 * fit the capacity (a capacity of 0 keeps nothing unheld, even empty
 * chunks). Mutex held. */
static void zm__evict(zm_cache *cache)
{
    while (cache->lru_oldest != NULL &&
           (cache->capacity == 0 || cache->stats.bytes_held > cache->capacity)) {
        zm__entry *e = cache->lru_oldest;
        zm__lru_remove(cache, e);
        zm__table_remove(cache, e);
        cache->stats.bytes_held -= e->size;
        cache->stats.entries--;
        cache->stats.evictions++;
        if (e->owner != NULL) {
            e->owner->bytes_held -= e->size;
            e->owner->entries--;
            e->owner->evictions++;
        }
        zm__entry_free(e);
    }
}

int zm_cache_create(size_t capacity_bytes, zm_cache **out)
{
    *out = NULL;
    zm_cache *cache = calloc(1, sizeof *cache);
    if (cache == NULL)
        return -ENOMEM;
    cache->bucket_bits = 6;
    cache->buckets = calloc((size_t)1 << cache->bucket_bits, sizeof *cache->buckets);
    if (cache->buckets == NULL) {
        free(cache);
        return -ENOMEM;
    }
    int rc = pthread_mutex_init(&cache->mutex, NULL);
    if (rc != 0) {
        free(cache->buckets);
        free(cache);
        return -rc;
    }
    cache->capacity = capacity_bytes;
    cache->stats.capacity_bytes = capacity_bytes;
    *out = cache;
    return 0;
}

void zm_cache_destroy(zm_cache *cache)
{
    if (cache == NULL)
        return;
    /* No get may be in flight and no ref held: every entry left is in the
     * table, and is ours to free. */
    for (size_t b = 0; b < (size_t)1 << cache->bucket_bits; b++) {
        zm__entry *e = cache->buckets[b];
        while (e != NULL) {
            zm__entry *next = e->next;
            zm__entry_free(e);
            e = next;
        }
    }
    free(cache->buckets);
    pthread_mutex_destroy(&cache->mutex);
    free(cache);
}

static void zm__fill_ref(zm_cache_ref *ref, zm__entry *e)
{
    ref->bytes = e->bytes;
    ref->size = e->size;
    ref->entry = e;
}

/* Drops one reference to an entry that has left the table (failed), freeing
 * it with the last. Mutex held. */
static void zm__unref_detached(zm__entry *e)
{
    if (--e->refs == 0)
        zm__entry_free(e);
}

int zm_cache_get(zm_cache *cache, uint64_t key, zm_cache_loader loader,
                        void *context, zm_cache_ref *ref, zm_err *err)
{
    return zm_cache_get_for(cache, key, loader, context, NULL, ref, err);
}

void zm_cache_account_read(zm_cache *cache, const zm_cache_account *account, zm_cache_account *out)
{
    pthread_mutex_lock(&cache->mutex);
    *out = *account;
    pthread_mutex_unlock(&cache->mutex);
}

int zm_cache_peek(zm_cache *cache, uint64_t key, zm_cache_ref *ref)
{
    ref->bytes = NULL;
    ref->size = 0;
    ref->entry = NULL;
    if (cache == NULL)
        return 0;
    pthread_mutex_lock(&cache->mutex);
    zm__entry *e = zm__lookup(cache, key);
    int found = e != NULL && e->state == ZM__READY;
    if (found) {
        e->refs++;
        if (e->in_lru)
            zm__lru_remove(cache, e);
        cache->stats.hits++;
        zm__fill_ref(ref, e);
    }
    pthread_mutex_unlock(&cache->mutex);
    return found;
}

int zm_cache_get_for(zm_cache *cache, uint64_t key, zm_cache_loader loader, void *context,
                     zm_cache_account *account, zm_cache_ref *ref, zm_err *err)
{
    ref->bytes = NULL;
    ref->size = 0;
    ref->entry = NULL;
    if (cache == NULL || loader == NULL)
        return zm_err_set(err, -EINVAL, "chunk cache: no cache or no loader");

    pthread_mutex_lock(&cache->mutex);
    zm__entry *e = zm__lookup(cache, key);
    if (e != NULL) {
        e->refs++;
        if (e->in_lru)
            zm__lru_remove(cache, e);
        /* Single flight: another thread is loading this key; its result,
         * good or bad, is ours too. */
        while (e->state == ZM__LOADING)
            pthread_cond_wait(&e->loaded, &cache->mutex);
        if (e->state == ZM__READY) {
            cache->stats.hits++;
            if (account != NULL)
                account->hits++;
            zm__fill_ref(ref, e);
            pthread_mutex_unlock(&cache->mutex);
            return 0;
        }
        int rc = e->error_code;
        if (e->error_reason != NULL)
            zm_err_set(err, rc, "%s", e->error_reason);
        else
            zm_err_set(err, rc, "chunk load failed (error %d)", rc);
        zm__unref_detached(e);
        pthread_mutex_unlock(&cache->mutex);
        return rc;
    }

    e = calloc(1, sizeof *e);
    if (e == NULL) {
        pthread_mutex_unlock(&cache->mutex);
        return zm_err_set(err, -ENOMEM, "chunk cache: out of memory");
    }
    int rc = pthread_cond_init(&e->loaded, NULL);
    if (rc != 0) {
        free(e);
        pthread_mutex_unlock(&cache->mutex);
        return zm_err_set(err, -rc, "chunk cache: cannot create a condition variable");
    }
    e->key = key;
    e->state = ZM__LOADING;
    e->refs = 1;
    zm__table_insert(cache, e);
    cache->stats.misses++;
    if (account != NULL)
        account->misses++;
    pthread_mutex_unlock(&cache->mutex);

    /* The load runs without the mutex: other keys proceed meanwhile, and
     * gets of this key find the LOADING entry and wait. */
    zm_err load_err;
    zm_err_clear(&load_err);
    uint8_t *bytes = NULL;
    size_t size = 0;
    rc = loader(context, &bytes, &size, &load_err);
    if (rc == 0 && bytes == NULL && size > 0)
        rc = zm_err_set(&load_err, -EIO, "chunk loader returned %zu bytes but no buffer", size);
    char *reason = NULL;
    if (rc != 0) {
        /* A loader that forgot the sign or the reason still fails clearly. */
        if (rc > 0)
            rc = -rc;
        if (load_err.reason[0] == '\0')
            zm_err_set(&load_err, rc, "chunk load failed (error %d)", rc);
        load_err.code = rc;
        /* The waiters' copy; without memory they get the code alone. */
        reason = strdup(load_err.reason);
    }

    pthread_mutex_lock(&cache->mutex);
    if (rc != 0) {
        /* Not kept: out of the table now, so the next get loads again; the
         * waiters read the error before the last of them frees the entry. */
        zm__table_remove(cache, e);
        cache->stats.loads_failed++;
        e->error_code = rc;
        e->error_reason = reason;
        e->state = ZM__FAILED;
        pthread_cond_broadcast(&e->loaded);
        zm__unref_detached(e);
        pthread_mutex_unlock(&cache->mutex);
        if (err != NULL)
            *err = load_err;
        return rc;
    }
    e->bytes = bytes;
    e->size = size;
    e->state = ZM__READY;
    cache->stats.bytes_held += size;
    cache->stats.entries++;
    e->owner = account;
    if (account != NULL) {
        account->bytes_held += size;
        account->entries++;
    }
    pthread_cond_broadcast(&e->loaded);
    zm__evict(cache);
    zm__fill_ref(ref, e);
    pthread_mutex_unlock(&cache->mutex);
    zm_err_clear(err);
    return 0;
}

void zm_cache_release(zm_cache *cache, zm_cache_ref *ref)
{
    if (cache == NULL || ref == NULL || ref->entry == NULL)
        return;
    zm__entry *e = ref->entry;
    pthread_mutex_lock(&cache->mutex);
    if (--e->refs == 0) {
        zm__lru_push(cache, e);
        zm__evict(cache);
    }
    pthread_mutex_unlock(&cache->mutex);
    ref->bytes = NULL;
    ref->size = 0;
    ref->entry = NULL;
}

void zm_cache_hold(zm_cache *cache, const zm_cache_ref *ref, zm_cache_ref *out)
{
    *out = *ref;
    if (cache == NULL || ref->entry == NULL)
        return;
    zm__entry *e = ref->entry;
    pthread_mutex_lock(&cache->mutex);
    e->refs++; /* held already: not in the LRU list */
    pthread_mutex_unlock(&cache->mutex);
}

void zm_cache_get_stats(zm_cache *cache, zm_cache_stats *stats)
{
    pthread_mutex_lock(&cache->mutex);
    *stats = cache->stats;
    pthread_mutex_unlock(&cache->mutex);
}
