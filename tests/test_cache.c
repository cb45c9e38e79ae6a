/* Tests for the decoded-chunk cache (src/cache/cache.c): hits,
 * misses and evictions counted right, peeks, the capacity respected in LRU order,
 * held chunks never evicted, one load per key however many threads ask at
 * once, and failed loads handed to every waiter and never kept. Run under
 * TSan too. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "zarrmount/cache.h"

static void sleep_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* A loader making `size` bytes that spell out its key, optionally slowly,
 * optionally failing, and counting its calls. */
typedef struct loader_state {
    uint64_t key;
    size_t size;
    long delay_us;
    int fail; /* returned instead of loading, when non-zero */
    const char *reason;
    _Atomic int calls;
} loader_state;

static uint8_t pattern(uint64_t key, size_t i)
{
    return (uint8_t)(key * 31 + i * 7);
}

static int load(void *context, uint8_t **bytes, size_t *size, zm_err *err)
{
    loader_state *l = context;
    atomic_fetch_add(&l->calls, 1);
    if (l->delay_us)
        sleep_us(l->delay_us);
    if (l->fail) {
        if (l->reason)
            return zm_err_set(err, l->fail, "%s", l->reason);
        return l->fail;
    }
    uint8_t *b = malloc(l->size ? l->size : 1);
    for (size_t i = 0; i < l->size; i++)
        b[i] = pattern(l->key, i);
    *bytes = b;
    *size = l->size;
    return 0;
}

static bool holds_pattern(const zm_cache_ref *ref, uint64_t key, size_t size)
{
    if (ref->size != size)
        return false;
    for (size_t i = 0; i < size; i++)
        if (ref->bytes[i] != pattern(key, i))
            return false;
    return true;
}

/* Gets key (loading `size` bytes on a miss) and releases it at once;
 * returns whether the loader ran. */
static bool touch(zm_cache *cache, uint64_t key, size_t size)
{
    loader_state l = {.key = key, .size = size};
    zm_cache_ref ref;
    zm_err err;
    cr_assert_eq(zm_cache_get(cache, key, load, &l, &ref, &err), 0, "%s", err.reason);
    cr_assert(holds_pattern(&ref, key, size));
    zm_cache_release(cache, &ref);
    cr_assert_null(ref.entry);
    return atomic_load(&l.calls) == 1;
}

static zm_cache_stats stats_of(zm_cache *cache)
{
    zm_cache_stats s;
    zm_cache_get_stats(cache, &s);
    return s;
}

Test(cache, hits_and_misses)
{
    zm_cache *cache;
    cr_assert_eq(zm_cache_create(1 << 20, &cache), 0);
    cr_assert(touch(cache, 1, 100));
    cr_assert(!touch(cache, 1, 100));
    cr_assert(!touch(cache, 1, 100));
    cr_assert(touch(cache, 2, 50));
    zm_cache_stats s = stats_of(cache);
    cr_assert_eq(s.misses, 2u);
    cr_assert_eq(s.hits, 2u);
    cr_assert_eq(s.evictions, 0u);
    cr_assert_eq(s.loads_failed, 0u);
    cr_assert_eq(s.entries, 2u);
    cr_assert_eq(s.bytes_held, 150u);
    cr_assert_eq(s.capacity_bytes, 1u << 20);
    zm_cache_destroy(cache);
}

/* A peek finds only what is loaded, loads nothing, and holds what it
 * found as a get does (counted a hit). */
Test(cache, peek)
{
    zm_cache *cache;
    cr_assert_eq(zm_cache_create(1 << 20, &cache), 0);
    zm_cache_ref ref;
    cr_assert_eq(zm_cache_peek(cache, 7, &ref), 0);
    cr_assert_null(ref.bytes);
    zm_cache_stats s = stats_of(cache);
    cr_assert_eq(s.hits + s.misses, 0u);
    cr_assert_eq(s.entries, 0u);
    cr_assert(touch(cache, 7, 64));
    cr_assert_eq(zm_cache_peek(cache, 7, &ref), 1);
    cr_assert(holds_pattern(&ref, 7, 64));
    s = stats_of(cache);
    cr_assert_eq(s.hits, 1u);
    cr_assert_eq(s.misses, 1u);
    zm_cache_release(cache, &ref);
    cr_assert_eq(zm_cache_peek(cache, 8, &ref), 0);
    zm_cache_destroy(cache);
}

/* touch, for an account. */
static bool touch_for(zm_cache *cache, zm_cache_account *account, uint64_t key, size_t size)
{
    loader_state l = {.key = key, .size = size};
    zm_cache_ref ref;
    zm_err err;
    cr_assert_eq(zm_cache_get_for(cache, key, load, &l, account, &ref, &err), 0, "%s", err.reason);
    cr_assert(holds_pattern(&ref, key, size));
    zm_cache_release(cache, &ref);
    return atomic_load(&l.calls) == 1;
}

/* Each account is charged with its own gets and with the entries its loads
 * made until they are evicted; the cache's own counters are their sum. */
Test(cache, accounts)
{
    zm_cache *cache;
    zm_cache_account a = {0}, b = {0}, got;
    cr_assert_eq(zm_cache_create(250, &cache), 0);
    cr_assert(touch_for(cache, &a, 1, 100));
    cr_assert(!touch_for(cache, &b, 1, 100)); /* b's hit on a's entry */
    cr_assert(touch_for(cache, &b, 2, 100));
    zm_cache_account_read(cache, &a, &got);
    cr_assert_eq(got.hits, 0u);
    cr_assert_eq(got.misses, 1u);
    cr_assert_eq(got.bytes_held, 100u);
    cr_assert_eq(got.entries, 1u);
    zm_cache_account_read(cache, &b, &got);
    cr_assert_eq(got.hits, 1u);
    cr_assert_eq(got.misses, 1u);
    cr_assert_eq(got.bytes_held, 100u);
    /* A third entry pushes out the oldest released, a's (b touched it last
     * but a made it). */
    cr_assert(touch_for(cache, &b, 3, 100));
    zm_cache_account_read(cache, &a, &got);
    cr_assert_eq(got.evictions, 1u);
    cr_assert_eq(got.bytes_held, 0u);
    cr_assert_eq(got.entries, 0u);
    zm_cache_account_read(cache, &b, &got);
    cr_assert_eq(got.evictions, 0u);
    cr_assert_eq(got.bytes_held, 200u);
    zm_cache_stats s = stats_of(cache);
    cr_assert_eq(s.hits, 1u);
    cr_assert_eq(s.misses, 3u);
    cr_assert_eq(s.evictions, 1u);
    cr_assert_eq(s.bytes_held, 200u);
    zm_cache_destroy(cache);
}

Test(cache, capacity_and_lru_order)
{
    zm_cache *cache;
    cr_assert_eq(zm_cache_create(300, &cache), 0);
    cr_assert(touch(cache, 1, 100));
    cr_assert(touch(cache, 2, 100));
    cr_assert(touch(cache, 3, 100));
    cr_assert(!touch(cache, 1, 100)); /* 1 is now the most recent; 2 the oldest */
    cr_assert(touch(cache, 4, 100));  /* evicts 2 */
    zm_cache_stats s = stats_of(cache);
    cr_assert_eq(s.evictions, 1u);
    cr_assert_eq(s.entries, 3u);
    cr_assert_eq(s.bytes_held, 300u);
    cr_assert(!touch(cache, 1, 100));
    cr_assert(!touch(cache, 3, 100));
    cr_assert(!touch(cache, 4, 100));
    cr_assert(touch(cache, 2, 100)); /* gone: loads again, evicting 1 (oldest now) */
    cr_assert(touch(cache, 1, 100));
    /* One big chunk pushes out as many as it takes. */
    cr_assert(touch(cache, 5, 250));
    s = stats_of(cache);
    cr_assert_leq(s.bytes_held, 300u);
    cr_assert_eq(s.entries, 1u);
    /* A chunk larger than the whole capacity is served, then not kept. */
    cr_assert(touch(cache, 6, 1000));
    cr_assert(touch(cache, 6, 1000));
    s = stats_of(cache);
    cr_assert_leq(s.bytes_held, 300u);
    zm_cache_destroy(cache);
}

Test(cache, held_entries_are_not_evicted)
{
    zm_cache *cache;
    cr_assert_eq(zm_cache_create(100, &cache), 0);
    loader_state a = {.key = 10, .size = 100}, b = {.key = 11, .size = 100},
                 c = {.key = 12, .size = 100};
    zm_cache_ref ra, rb, rc;
    zm_err err;
    cr_assert_eq(zm_cache_get(cache, 10, load, &a, &ra, &err), 0);
    cr_assert_eq(zm_cache_get(cache, 11, load, &b, &rb, &err), 0);
    cr_assert_eq(zm_cache_get(cache, 12, load, &c, &rc, &err), 0);
    /* 300 bytes held against a capacity of 100: all stay, all intact. */
    zm_cache_stats s = stats_of(cache);
    cr_assert_eq(s.bytes_held, 300u);
    cr_assert_eq(s.evictions, 0u);
    cr_assert(holds_pattern(&ra, 10, 100) && holds_pattern(&rb, 11, 100) &&
              holds_pattern(&rc, 12, 100));
    /* A second holder of a held entry shares it. */
    zm_cache_ref ra2;
    cr_assert_eq(zm_cache_get(cache, 10, load, &a, &ra2, &err), 0);
    cr_assert_eq(ra2.bytes, ra.bytes);
    cr_assert_eq(atomic_load(&a.calls), 1);
    /* Released entries go, down to the capacity; held ones stay. */
    zm_cache_release(cache, &rb);
    s = stats_of(cache);
    cr_assert_eq(s.bytes_held, 200u);
    cr_assert_eq(s.evictions, 1u);
    zm_cache_release(cache, &ra);
    cr_assert(holds_pattern(&ra2, 10, 100)); /* still held through ra2 */
    s = stats_of(cache);
    cr_assert_eq(s.bytes_held, 200u);
    zm_cache_release(cache, &rc);
    s = stats_of(cache);
    cr_assert_eq(s.bytes_held, 100u);
    cr_assert_eq(s.evictions, 2u);
    zm_cache_release(cache, &ra2);
    s = stats_of(cache);
    cr_assert_eq(s.bytes_held, 100u);
    cr_assert_eq(s.entries, 1u);
    cr_assert(!touch(cache, 10, 100)); /* the last released, kept */
    /* Releasing an empty ref does nothing. */
    zm_cache_ref none = {0};
    zm_cache_release(cache, &none);
    zm_cache_release(cache, NULL);
    zm_cache_destroy(cache);
}

Test(cache, zero_capacity_keeps_nothing)
{
    zm_cache *cache;
    cr_assert_eq(zm_cache_create(0, &cache), 0);
    cr_assert(touch(cache, 1, 10));
    cr_assert(touch(cache, 1, 10));
    cr_assert(touch(cache, 2, 0));
    cr_assert(touch(cache, 2, 0));
    zm_cache_stats s = stats_of(cache);
    cr_assert_eq(s.entries, 0u);
    cr_assert_eq(s.bytes_held, 0u);
    cr_assert_eq(s.misses, 4u);
    zm_cache_destroy(cache);
}

/* ---- single flight ------------------------------------------------------ */

typedef struct getter {
    zm_cache *cache;
    uint64_t key;
    loader_state *loader;
    pthread_barrier_t *start;
    int rc;
    zm_err err;
    const uint8_t *bytes;
    bool intact;
} getter;

static void *get_once(void *arg)
{
    getter *g = arg;
    pthread_barrier_wait(g->start);
    zm_cache_ref ref;
    g->rc = zm_cache_get(g->cache, g->key, load, g->loader, &ref, &g->err);
    if (g->rc == 0) {
        g->bytes = ref.bytes;
        g->intact = holds_pattern(&ref, g->key, g->loader->size);
        sleep_us(1000); /* hold a while, so releases overlap */
        zm_cache_release(g->cache, &ref);
    }
    return NULL;
}

static void run_getters(zm_cache *cache, uint64_t key, loader_state *l, int n, getter *g)
{
    pthread_t t[16];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int k = 0; k < n; k++) {
        g[k] = (getter){.cache = cache, .key = key, .loader = l, .start = &start};
        cr_assert_eq(pthread_create(&t[k], NULL, get_once, &g[k]), 0);
    }
    for (int k = 0; k < n; k++)
        pthread_join(t[k], NULL);
    pthread_barrier_destroy(&start);
}

Test(cache, single_flight_loads_once)
{
    size_t capacities[] = {1 << 20, 0};
    for (int c = 0; c < 2; c++) {
        zm_cache *cache;
        cr_assert_eq(zm_cache_create(capacities[c], &cache), 0);
        loader_state l = {.key = 77, .size = 4096, .delay_us = 100000};
        getter g[8];
        run_getters(cache, 77, &l, 8, g);
        cr_assert_eq(atomic_load(&l.calls), 1, "loader ran %d times", atomic_load(&l.calls));
        for (int k = 0; k < 8; k++) {
            cr_assert_eq(g[k].rc, 0);
            cr_assert(g[k].intact);
            cr_assert_eq(g[k].bytes, g[0].bytes);
        }
        zm_cache_stats s = stats_of(cache);
        cr_assert_eq(s.misses, 1u);
        cr_assert_eq(s.hits, 7u);
        cr_assert_eq(s.entries, c == 0 ? 1u : 0u);
        zm_cache_destroy(cache);
    }
}

Test(cache, failed_load_reaches_every_waiter_and_is_not_kept)
{
    zm_cache *cache;
    cr_assert_eq(zm_cache_create(1 << 20, &cache), 0);
    loader_state l = {.key = 5,
                      .size = 64,
                      .delay_us = 100000,
                      .fail = -EIO,
                      .reason = "chunk 5: deflate: stream corrupt (invalid distance too far back)"};
    getter g[8];
    run_getters(cache, 5, &l, 8, g);
    cr_assert_eq(atomic_load(&l.calls), 1);
    for (int k = 0; k < 8; k++) {
        cr_assert_eq(g[k].rc, -EIO);
        cr_assert_eq(g[k].err.code, -EIO);
        cr_assert_str_eq(g[k].err.reason, l.reason);
    }
    zm_cache_stats s = stats_of(cache);
    cr_assert_eq(s.loads_failed, 1u);
    cr_assert_eq(s.entries, 0u);
    cr_assert_eq(s.bytes_held, 0u);
    /* The next get tries again, and this time it works. */
    l.fail = 0;
    l.delay_us = 0;
    zm_cache_ref ref;
    zm_err err;
    cr_assert_eq(zm_cache_get(cache, 5, load, &l, &ref, &err), 0);
    cr_assert_eq(atomic_load(&l.calls), 2);
    cr_assert(holds_pattern(&ref, 5, 64));
    cr_assert_eq(err.code, 0);
    zm_cache_release(cache, &ref);
    cr_assert(!touch(cache, 5, 64));
    zm_cache_destroy(cache);
}

Test(cache, loader_without_reason_or_sign)
{
    zm_cache *cache;
    cr_assert_eq(zm_cache_create(1 << 20, &cache), 0);
    zm_cache_ref ref;
    zm_err err;
    loader_state l = {.key = 1, .size = 8, .fail = -ENOMEM};
    cr_assert_eq(zm_cache_get(cache, 1, load, &l, &ref, &err), -ENOMEM);
    cr_assert_str_eq(err.reason, "chunk load failed (error -12)");
    cr_assert_null(ref.entry);
    l.fail = EIO; /* a positive errno is taken as its negative */
    cr_assert_eq(zm_cache_get(cache, 1, load, &l, &ref, &err), -EIO);
    cr_assert_eq(err.code, -EIO);
    cr_assert_eq(zm_cache_get(NULL, 1, load, &l, &ref, &err), -EINVAL);
    cr_assert_eq(zm_cache_get(cache, 1, NULL, &l, &ref, NULL), -EINVAL);
    cr_assert_eq(stats_of(cache).loads_failed, 2u);
    zm_cache_destroy(cache);
}

/* ---- keys --------------------------------------------------------------- */

Test(cache, keys_are_xxh3)
{
    cr_assert_eq(zm_cache_key("", 0), 0x2d06800538d394c2ull); /* XXH3_64bits of nothing */
    uint64_t parts[2] = {3, 9};
    cr_assert_eq(zm_cache_key(parts, sizeof parts), XXH3_64bits(parts, sizeof parts));
    uint64_t other[2] = {9, 3};
    cr_assert_neq(zm_cache_key(parts, sizeof parts), zm_cache_key(other, sizeof other));
}

/* ---- many threads, many keys -------------------------------------------- */

typedef struct stress {
    zm_cache *cache;
    uint64_t seed;
    _Atomic int bad;
    _Atomic uint64_t successes;
} stress;

static int stress_load(void *context, uint8_t **bytes, size_t *size, zm_err *err)
{
    loader_state *l = context;
    (void)err;
    if (l->key % 17 == 3)
        return zm_err_set(err, -EIO, "key %llu always fails", (unsigned long long)l->key);
    return load(context, bytes, size, err);
}

static void *stress_thread(void *arg)
{
    stress *s = arg;
    uint64_t state = s->seed;
    zm_cache_ref held[4] = {{0}};
    uint64_t held_key[4] = {0};
    for (int i = 0; i < 3000; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t key = (state >> 33) % 100;
        int slot = (int)((state >> 20) % 4);
        if (held[slot].entry) {
            if (!holds_pattern(&held[slot], held_key[slot], 100 + held_key[slot]))
                atomic_fetch_add(&s->bad, 1);
            zm_cache_release(s->cache, &held[slot]);
        }
        loader_state l = {.key = key, .size = 100 + key};
        zm_err err;
        int rc = zm_cache_get(s->cache, key, stress_load, &l, &held[slot], &err);
        if (key % 17 == 3) {
            if (rc != -EIO || strstr(err.reason, "always fails") == NULL)
                atomic_fetch_add(&s->bad, 1);
        } else if (rc != 0 || !holds_pattern(&held[slot], key, 100 + key)) {
            atomic_fetch_add(&s->bad, 1);
        }
        if (rc == 0)
            atomic_fetch_add(&s->successes, 1);
        held_key[slot] = key;
    }
    for (int k = 0; k < 4; k++)
        zm_cache_release(s->cache, &held[k]);
    return NULL;
}

Test(cache, many_threads_many_keys)
{
    zm_cache *cache;
    size_t capacity = 3000; /* about 20 of the 100 chunks */
    cr_assert_eq(zm_cache_create(capacity, &cache), 0);
    pthread_t t[8];
    stress s[8];
    for (int k = 0; k < 8; k++) {
        s[k] = (stress){.cache = cache, .seed = (uint64_t)k * 977 + 1};
        cr_assert_eq(pthread_create(&t[k], NULL, stress_thread, &s[k]), 0);
    }
    uint64_t successes = 0;
    for (int k = 0; k < 8; k++) {
        pthread_join(t[k], NULL);
        cr_assert_eq(atomic_load(&s[k].bad), 0);
        successes += atomic_load(&s[k].successes);
    }
    /* Every successful get was a hit or a load that worked. */
    zm_cache_stats st = stats_of(cache);
    cr_assert_eq(successes, st.hits + st.misses - st.loads_failed);
    cr_assert_leq(st.bytes_held, capacity);
    cr_assert_gt(st.hits, 0u);
    cr_assert_gt(st.evictions, 0u);
    cr_assert_gt(st.loads_failed, 0u);
    zm_cache_destroy(cache);
}
