/* Walks: the tables of a view's walks (synth's own, attached to the view and
 * freed with it), what a mount gives walks in memory (zm_synth), taking a
 * retired walk's memory back for a new one, and the spill files walks go to
 * above that. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "zarrmount/config.h"

#include "synth_internal.h"

/* ---- What a mount gives walks -------------------------------------------------- */

zm_synth *zm_synth_create(uint64_t walk_memory)
{
    zm_synth *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    atomic_init(&s->limit, walk_memory);
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->room, &attr);
    pthread_condattr_destroy(&attr);
    return s;
}

/* A reference let go: the last (the creator's, or a view's walks') frees it. */
static void synth_put(zm_synth *s)
{
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    free(s->retired);
    pthread_cond_destroy(&s->room);
    pthread_mutex_destroy(&s->mutex);
    free(s);
}

void zm_synth_free(zm_synth *synth)
{
    synth_put(synth);
}

void zm_synth_set_direct(zm_synth *synth, int direct)
{
    atomic_store(&synth->indirect, !direct);
}

void zm_synth_set_walk_memory(zm_synth *synth, uint64_t bytes)
{
    atomic_store(&synth->limit, bytes);
}

uint64_t zm_synth_walk_room(zm_synth *synth)
{
    uint64_t limit = atomic_load(&synth->limit), held = atomic_load(&synth->held);
    uint64_t room = held < limit ? limit - held : 0;
    pthread_mutex_lock(&synth->mutex);
    for (size_t i = 0; i < synth->retired_count; i++) {
        struct zm_walk *w = synth->retired[i];
        /* A walk being made or read holds its mutex: not counted. */
        if (pthread_mutex_trylock(&w->mutex) != 0)
            continue;
        if (w->claimed && w->state == 1 && w->users == 0)
            room += w->size - w->released;
        pthread_mutex_unlock(&w->mutex);
    }
    pthread_mutex_unlock(&synth->mutex);
    return room;
}

void zm_synth_get_walk_stats(const zm_synth *synth, zm_synth_walk_stats *out)
{
    zm_synth *s = (zm_synth *)synth; /* atomic loads only */
    out->held_bytes = atomic_load(&s->held);
    out->limit_bytes = atomic_load(&s->limit);
    out->spilled = atomic_load(&s->spilled);
    out->spilled_bytes = atomic_load(&s->spilled_bytes);
    out->reclaimed = atomic_load(&s->reclaimed);
    out->released_bytes = atomic_load(&s->released_bytes);
}

/* Batches of a walk: their buffer is at most 32 MiB and an eighth of what
 * walks may hold (a small cache_size makes small batches, many of them);
 * their rows at most a sixteenth of that many. */
#define BATCH_BYTES_MAX ((uint64_t)32 << 20)
uint64_t zm__batch_bytes(const zm_synth *synth)
{
    uint64_t bytes = atomic_load(&((zm_synth *)synth)->limit) / 8;
    return bytes < 256 ? 256 : bytes > BATCH_BYTES_MAX ? BATCH_BYTES_MAX : bytes;
}

uint64_t zm__batch_rows(const zm_synth *synth)
{
    uint64_t rows = zm__batch_bytes(synth) / 16;
    return rows < 64 ? 64 : rows;
}

static int claim_walk_memory(zm_synth *s, uint64_t size)
{
    uint64_t held = atomic_load(&s->held);
    do {
        if (held + size > atomic_load(&s->limit))
            return 0;
    } while (!atomic_compare_exchange_weak(&s->held, &held, held + size));
    return 1;
}

/* Off the list of retired walks, under s->mutex. */
static void unlist_locked(zm_synth *s, struct zm_walk *walk)
{
    for (size_t i = 0; walk->listed && i < s->retired_count; i++)
        if (s->retired[i] == walk) {
            memmove(s->retired + i, s->retired + i + 1,
                    (s->retired_count - i - 1) * sizeof *s->retired);
            s->retired_count--;
            break;
        }
    walk->listed = 0;
}

/* What a walk holds in memory let go; it is made again if asked for.
 * Under its mutex, with no user. */
static void release_values(struct zm_walk *w)
{
    if (w->bytes != NULL && w->size > w->released)
        munmap(w->bytes + w->released, w->size - w->released);
    w->bytes = NULL;
    zm_strings_free(&w->strings);
    memset(&w->strings, 0, sizeof w->strings);
    free(w->string_slot);
    w->string_slot = NULL;
    free(w->served);
    w->served = NULL;
    w->served_count = 0;
    w->done_prefix = 0;
    if (w->claimed)
        atomic_fetch_sub(&w->synth->held, w->size - w->released);
    w->released = 0;
    w->claimed = 0;
    w->direct = 0;
    w->state = 0;
}

/* Walks in memory: up to this, anonymous pages (in huge pages from this
 * size on); above, a shared map of an unlinked spill file (spill_map). */
#define WALK_MEMORY_BYTES ((size_t)1 << 30)
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

/* Under w's mutex with no user: the bytes of its chunks [0, done_prefix)
 * given back, whole pages of them (huge pages where the walk is in them),
 * so that the next walk fits sooner (an array of 400 MB walked while the
 * one before it is still being encoded). In steps of an eighth of the
 * walk, at most 32 MiB: a few calls a walk. Only a walk in anonymous
 * memory of whole rows a chunk (every dimension but the first in one
 * chunk), counted in what walks hold. Returns the bytes given back. */
static size_t release_prefix(struct zm_walk *w, const zm_store_node *node)
{
    if (w->state != 1 || w->bytes == NULL || w->fd >= 0 || !w->claimed || w->users > 0 ||
        w->size > WALK_MEMORY_BYTES)
        return 0;
    for (unsigned d = 1; d < node->meta.rank; d++)
        if (node->grid[d] != 1)
            return 0;
    uint64_t end = w->done_prefix * node->meta.chunks[0] * w->row_bytes;
    if (end >= w->size)
        return 0; /* every chunk served: the walk retires whole */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t align = w->size >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : page;
    uintptr_t step = w->size / 8 < ((uintptr_t)32 << 20) ? w->size / 8 : (uintptr_t)32 << 20;
    uintptr_t base = (uintptr_t)w->bytes;
    uintptr_t cut = (base + (uintptr_t)end) & ~(align - 1);
    if (cut <= base + w->released || cut - (base + w->released) < (step > page ? step : page))
        return 0;
    size_t from = w->released, to = (size_t)(cut - base);
    if (munmap(w->bytes + from, to - from) != 0)
        return 0;
    w->released = to;
    atomic_fetch_sub(&w->synth->held, to - from);
    atomic_fetch_add(&w->synth->released_bytes, to - from);
    return to - from;
}

/* How long a new walk that does not fit waits for walks that are to
 * retire (the encoding ahead of a walked array retires it when the last
 * chunk is made, a moment after a reader has read it): spilling costs the
 * array written and read back once more. A bound, should one never come. */
#define ROOM_WAIT_NS ((int64_t)2000000000)

static int reclaim_once(uint64_t size, struct zm_walk *self);
static void unexpect_locked(zm_synth *s, struct zm_walk *w);

/* Claims size bytes of walk memory for self, taking back retired walks'
 * (oldest first, none in use) while it does not fit, and waiting a while
 * for walks expected to retire. */
static int claim_reclaiming(uint64_t size, struct zm_walk *self)
{
    zm_synth *s = self->synth;
    if (claim_walk_memory(s, size))
        return 1;
    if (size > atomic_load(&s->limit))
        return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t deadline = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + ROOM_WAIT_NS;
    for (;;) {
        if (reclaim_once(size, self))
            return 1;
        pthread_mutex_lock(&s->mutex);
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t at = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
        int wait = s->expected > 0 && at < deadline;
        if (wait) {
            /* In slices: a walk whose last reader goes gives its memory
             * back with no signal. */
            int64_t until = at + 100000000 < deadline ? at + 100000000 : deadline;
            struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
            (void)pthread_cond_timedwait(&s->room, &s->mutex, &ts);
        }
        pthread_mutex_unlock(&s->mutex);
        if (!wait)
            return reclaim_once(size, self);
    }
}

/* One try at claiming size bytes, taking back retired walks' memory. */
static int reclaim_once(uint64_t size, struct zm_walk *self)
{
    zm_synth *s = self->synth;
    if (claim_walk_memory(s, size))
        return 1;
    int claimed = 0;
    pthread_mutex_lock(&s->mutex);
    for (size_t i = 0; !claimed && i < s->retired_count;) {
        struct zm_walk *c = s->retired[i];
        /* A walk being made or read holds its mutex: passed over. */
        if (c == self || pthread_mutex_trylock(&c->mutex) != 0) {
            i++;
            continue;
        }
        int gone = !c->claimed || c->state != 1; /* spilled, failed, or taken back */
        if (!gone && c->users == 0) {
            release_values(c);
            atomic_fetch_add(&s->reclaimed, 1);
            gone = 1;
        }
        pthread_mutex_unlock(&c->mutex);
        if (gone)
            unlist_locked(s, c);
        else
            i++;
        claimed = claim_walk_memory(s, size);
    }
    pthread_mutex_unlock(&s->mutex);
    return claimed;
}

static void walk_free(struct zm_walk *walk)
{
    if (walk == NULL)
        return;
    zm_synth *s = walk->synth;
    pthread_mutex_lock(&s->mutex);
    unlist_locked(s, walk);
    unexpect_locked(s, walk);
    pthread_mutex_unlock(&s->mutex);
    if (walk->direct) /* the source's pages it mapped are let go */
        zm_array_release_mapped(walk->direct_source, walk->direct_array);
    /* Its given-back prefix is no longer its own (other maps may lie there). */
    if (walk->bytes != NULL && walk->size > walk->released)
        munmap(walk->bytes + walk->released, walk->size - walk->released);
    if (walk->claimed)
        atomic_fetch_sub(&s->held, walk->size - walk->released);
    for (uint64_t c = 0; walk->block_at && c < walk->chunk_count; c++)
        free(walk->block_at[c]);
    free(walk->block_at);
    free(walk->block_count);
    free(walk->block_fill);
    if (walk->fd >= 0)
        close(walk->fd);
    zm_strings_free(&walk->strings);
    free(walk->string_slot);
    free(walk->served);
    pthread_mutex_destroy(&walk->mutex);
    free(walk);
}

/* ---- A view's walks ------------------------------------------------------------ */

/* The walks of one view, by node (open addressing on the node's address),
 * attached to the view under the address of walks_key and freed with it.
 * They hold the memory of the zm_synth that first asked for one. */
typedef struct view_walks {
    zm_synth *synth;
    pthread_mutex_t mutex;
    const zm_store_node **nodes;
    struct zm_walk **walks;
    size_t capacity, count; /* capacity a power of two */
} view_walks;

static const char walks_key;

static size_t slot_of(const view_walks *t, const zm_store_node *node)
{
    uint64_t h = (uint64_t)(uintptr_t)node * UINT64_C(0x9E3779B97F4A7C15);
    size_t i = (size_t)(h >> 32) & (t->capacity - 1);
    while (t->nodes[i] != NULL && t->nodes[i] != node)
        i = (i + 1) & (t->capacity - 1);
    return i;
}

/* The walk of node in t, or NULL; under t->mutex. */
static struct zm_walk *find_locked(const view_walks *t, const zm_store_node *node)
{
    return t->capacity ? t->walks[slot_of(t, node)] : NULL;
}

/* w put in t as node's walk (none there yet), under t->mutex: 0 or -ENOMEM. */
static int insert_locked(view_walks *t, const zm_store_node *node, struct zm_walk *w)
{
    if (2 * (t->count + 1) > t->capacity) {
        view_walks grown = {.capacity = t->capacity ? 2 * t->capacity : 16};
        grown.nodes = calloc(grown.capacity, sizeof *grown.nodes);
        grown.walks = calloc(grown.capacity, sizeof *grown.walks);
        if (grown.nodes == NULL || grown.walks == NULL) {
            free(grown.nodes);
            free(grown.walks);
            return -ENOMEM;
        }
        for (size_t i = 0; i < t->capacity; i++)
            if (t->nodes[i] != NULL) {
                size_t j = slot_of(&grown, t->nodes[i]);
                grown.nodes[j] = t->nodes[i];
                grown.walks[j] = t->walks[i];
            }
        free(t->nodes);
        free(t->walks);
        t->nodes = grown.nodes;
        t->walks = grown.walks;
        t->capacity = grown.capacity;
    }
    size_t i = slot_of(t, node);
    t->nodes[i] = node;
    t->walks[i] = w;
    t->count++;
    return 0;
}

/* The view is freed: its walks with it. */
static void view_walks_release(void *data)
{
    view_walks *t = data;
    for (size_t i = 0; i < t->capacity; i++)
        walk_free(t->walks[i]);
    free(t->nodes);
    free(t->walks);
    pthread_mutex_destroy(&t->mutex);
    synth_put(t->synth);
    free(t);
}

/* The view's walks, made (for synth) when first needed; NULL when out of
 * memory. */
static view_walks *walks_of(zm_synth *synth, zm_view *view)
{
    view_walks *t = zm_view_attached(view, &walks_key);
    if (t != NULL || synth == NULL)
        return t;
    view_walks *made = calloc(1, sizeof *made);
    if (made == NULL)
        return NULL;
    made->synth = synth;
    pthread_mutex_init(&made->mutex, NULL);
    atomic_fetch_add(&synth->refs, 1);
    t = zm_view_attach(view, &walks_key, made, view_walks_release);
    if (t != made) /* another thread's came first, or none could be */
        view_walks_release(made);
    return t;
}

/* The walk of node in view's table, or NULL: safe from any thread. */
static struct zm_walk *walk_found(const zm_view *view, const zm_store_node *node)
{
    view = zm_view_of(view, node); /* a modality's node: its part's walks */
    view_walks *t = zm_view_attached(view, &walks_key);
    if (t == NULL)
        return NULL;
    pthread_mutex_lock(&t->mutex);
    struct zm_walk *w = find_locked(t, node);
    pthread_mutex_unlock(&t->mutex);
    return w;
}

int zm_synth_walk_started(const zm_view *view, const zm_store_node *node)
{
    return walk_found(view, node) != NULL;
}

int zm__walk_in_memory(const zm_view *view, const zm_store_node *node)
{
    struct zm_walk *w = walk_found(view, node);
    if (w == NULL)
        return 0;
    pthread_mutex_lock(&w->mutex);
    int in = w->state == 1 && w->bytes != NULL;
    pthread_mutex_unlock(&w->mutex);
    return in;
}

/* Under s->mutex: w no longer expected to retire. */
static void unexpect_locked(zm_synth *s, struct zm_walk *w)
{
    if (w->expected) {
        w->expected = 0;
        s->expected--;
    }
    pthread_cond_broadcast(&s->room);
}

void zm_synth_walk_expect(const zm_view *view, const zm_store_node *node, int expect)
{
    struct zm_walk *w = walk_found(view, node);
    if (w == NULL)
        return;
    zm_synth *s = w->synth;
    pthread_mutex_lock(&s->mutex);
    if (expect && !w->expected && !w->listed) {
        w->expected = 1;
        s->expected++;
    } else if (!expect) {
        unexpect_locked(s, w);
    }
    pthread_mutex_unlock(&s->mutex);
}

void zm_synth_walk_retire(const zm_view *view, const zm_store_node *node)
{
    struct zm_walk *w = walk_found(view, node);
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mutex);
    zm_source *direct = w->direct ? w->direct_source : NULL;
    const zm_array *array = w->direct_array;
    pthread_mutex_unlock(&w->mutex);
    if (direct != NULL) /* the source's pages it mapped are let go */
        zm_array_release_mapped(direct, array);
    zm_synth *s = w->synth;
    pthread_mutex_lock(&s->mutex);
    unexpect_locked(s, w);
    if (!w->listed) {
        if (s->retired_count == s->retired_capacity) {
            size_t capacity = s->retired_capacity ? s->retired_capacity * 2 : 16;
            struct zm_walk **grown = realloc(s->retired, capacity * sizeof *grown);
            if (grown == NULL) { /* kept: it is only not taken back */
                pthread_mutex_unlock(&s->mutex);
                return;
            }
            s->retired = grown;
            s->retired_capacity = capacity;
        }
        s->retired[s->retired_count++] = w;
        w->listed = 1;
    }
    pthread_mutex_unlock(&s->mutex);
}

int zm_synth_walk_served(const zm_view *view, const zm_store_node *node, uint64_t chunk)
{
    struct zm_walk *w = walk_found(view, node);
    uint64_t chunks = node->meta.rank ? node->grid[0] : 1;
    if (w == NULL || chunk >= chunks)
        return 0;
    int all = 0;
    size_t released = 0;
    pthread_mutex_lock(&w->mutex);
    if (w->state == 1 && w->bytes != NULL) {
        if (w->served == NULL)
            w->served = calloc((size_t)chunks, 1);
        if (w->served != NULL && !w->served[chunk]) {
            w->served[chunk] = 1;
            all = ++w->served_count == chunks;
            while (w->done_prefix < chunks && w->served[w->done_prefix])
                w->done_prefix++;
        }
        if (!all)
            released = release_prefix(w, node);
    }
    pthread_mutex_unlock(&w->mutex);
    if (all)
        zm_synth_walk_retire(view, node);
    if (released > 0) {
        /* A walk waiting for room (claim_reclaiming) looks again. */
        zm_synth *s = w->synth;
        pthread_mutex_lock(&s->mutex);
        pthread_cond_broadcast(&s->room);
        pthread_mutex_unlock(&s->mutex);
    }
    return all || released > 0;
}

int zm_synth_walk_make(zm_synth *synth, zm_view *view, const zm_store_node *node, zm_err *err)
{
    struct zm_walk *w = NULL;
    int rc = zm__walk_of(synth, zm_view_of(view, node), node, &w, err);
    if (rc == 0 && w != NULL)
        zm__walk_put(w);
    return rc;
}

/* A use of a walk's values (zm__walk_of) ends. */
void zm__walk_put(struct zm_walk *w)
{
    pthread_mutex_lock(&w->mutex);
    w->users--;
    pthread_mutex_unlock(&w->mutex);
}

void zm_synth_chunk_done(const zm_view *view, const zm_store_node *node, uint8_t *raw,
                         int borrowed)
{
    if (!borrowed) {
        free(raw);
        return;
    }
    struct zm_walk *w = walk_found(view, node); /* lent from: it is there */
    if (w != NULL)
        zm__walk_put(w);
}

static int make_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w);

int zm__walk_of(zm_synth *synth, zm_view *view, const zm_store_node *node, struct zm_walk **out,
                zm_err *err)
{
    view_walks *t = walks_of(synth, view);
    if (t == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_lock(&t->mutex);
    struct zm_walk *w = find_locked(t, node);
    if (w == NULL && (w = calloc(1, sizeof *w)) != NULL) {
        pthread_mutex_init(&w->mutex, NULL);
        w->fd = -1;
        w->synth = t->synth;
        if (insert_locked(t, node, w) != 0) {
            pthread_mutex_destroy(&w->mutex);
            free(w);
            w = NULL;
        }
    }
    pthread_mutex_unlock(&t->mutex);
    if (w == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_lock(&w->mutex);
    if (w->state == 0) {
        zm_err_clear(&w->err);
        int rc = make_walk(view, node, w);
        w->state = rc == 0 ? 1 : rc;
    }
    int state = w->state;
    if (state < 0 && err)
        *err = w->err;
    if (state == 1)
        w->users++; /* until zm__walk_put */
    pthread_mutex_unlock(&w->mutex);
    if (state < 0)
        return state;
    *out = w;
    return 0;
}

/* ---- Spill files --------------------------------------------------------------- */

/* Where the temporary files go: $ZM_SPILL_DIR, $TMPDIR, then /var/tmp. */
static const char *spill_directory(void)
{
    const char *dir = getenv("ZM_SPILL_DIR");
    if (dir == NULL || *dir == '\0')
        dir = getenv("TMPDIR");
    return dir && *dir ? dir : "/var/tmp";
}

/* Walks up to this size are held in anonymous memory; larger ones in a
 * spill file the kernel can write out. */

/* An unlinked temporary file in the spill directory, or −1. */
int zm__spill_file(zm_err *err)
{
    const char *dir = spill_directory();
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/zarrmount-walk-XXXXXX", dir);
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0)
            unlink(path);
    }
    if (fd < 0)
        zm_err_set(err, -errno, "cannot make a spill file in %s: %s", dir, strerror(errno));
    return fd;
}

static uint8_t *spill_map(size_t size, zm_err *err)
{
    if (size <= WALK_MEMORY_BYTES) {
        /* In huge pages where the kernel has them (transparent huge
         * pages, "madvise"), which take a 404 MB walk's 100,000 page
         * faults and TLB misses down to 200: those few faults come as the
         * walk's threads first write each, so its pages are zeroed on all
         * of them (populating them at once, on one thread, before the walk
         * took 0.1-0.5 s longer on a million cells). In small pages they
         * are populated at once: one call makes every page, rather than a
         * fault per page (measured: a tenth off a cold walk of a million
         * cells). A kernel without MADV_POPULATE_WRITE (before 5.14)
         * faults them in as the walk writes. */
        void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map != MAP_FAILED) {
            int huge = 0;
#ifdef MADV_HUGEPAGE
            if (size >= HUGE_PAGE_BYTES)
                huge = madvise(map, size, MADV_HUGEPAGE) == 0;
#endif
#ifdef MADV_POPULATE_WRITE
            if (!huge)
                (void)madvise(map, size, MADV_POPULATE_WRITE);
#else
            (void)huge;
#endif
            return map;
        }
    }
    int fd = zm__spill_file(err);
    if (fd < 0)
        return NULL;
    if (ftruncate(fd, (off_t)size) != 0) {
        zm_err_set(err, -errno, "cannot size a %zu-byte spill file in %s: %s", size,
                   spill_directory(), strerror(errno));
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        zm_err_set(err, -errno, "cannot map a %zu-byte spill file: %s", size, strerror(errno));
        return NULL;
    }
    return map;
}

int zm__write_all(int fd, const uint8_t *bytes, size_t size, uint64_t offset, zm_err *err)
{
    while (size > 0) {
        ssize_t n = pwrite(fd, bytes, size, (off_t)offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return zm_err_set(err, n < 0 ? -errno : -EIO, "cannot write a spill file in %s: %s",
                              spill_directory(), n < 0 ? strerror(errno) : "nothing written");
        bytes += n;
        size -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

int zm__read_all(int fd, uint8_t *bytes, size_t size, uint64_t offset, zm_err *err)
{
    while (size > 0) {
        ssize_t n = pread(fd, bytes, size, (off_t)offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return zm_err_set(err, n < 0 ? -errno : -EIO, "cannot read back a spill file: %s",
                              n < 0 ? strerror(errno) : "it ends early");
        bytes += n;
        size -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

/* The end of a walk's pass: a failed spill's file closed, a spill made
 * counted (bytes: what its file holds). */
int zm__end_pass(struct zm_walk *w, int rc, int spilled, uint64_t bytes)
{
    if (rc != 0 && w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (rc == 0 && spilled) {
        atomic_fetch_add(&w->synth->spilled, 1);
        atomic_fetch_add(&w->synth->spilled_bytes, bytes);
    }
    return rc;
}

/* Gathers the whole array: strings as they are stored (picked per chunk),
 * numbers in view order, in memory or spilled. */
static int make_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    if (node->producer == ZM_PRODUCE_CELL_STRINGS) {
        uint64_t per_row = 1;
        for (unsigned d = 1; d < node->meta.rank; d++)
            per_row *= node->meta.shape[d];
        /* A view of fewer than half the source's cells reads only its own
         * rows' strings (their ids and the heap collections they lie in:
         * a blocks view's runs of cells touch few), in source order; a
         * larger one reads every string, the collections in windows. */
        zm_view_kept kept;
        int rc = zm_view_kept_get(view, &kept, &w->err);
        if (rc != 0)
            return rc;
        int own_rows = kept.count * 2 < kept.n && kept.count == node->meta.shape[0];
        uint64_t rows = own_rows ? kept.count : kept.n;
        w->size = (size_t)(rows * per_row * STRING_WALK_BYTES_PER_VALUE);
        w->claimed = claim_reclaiming(w->size, w);
        if (!w->claimed)
            return zm__spill_strings_walk(view, node, w);
        uint64_t *list = NULL;
        if (own_rows) {
            /* Source rows in file order, and each view row's place among them. */
            list = malloc((kept.count ? kept.count : 1) * sizeof *list);
            w->string_slot = malloc((node->meta.shape[0] ? node->meta.shape[0] : 1) *
                                    sizeof *w->string_slot);
            if (list == NULL || w->string_slot == NULL)
                rc = zm_err_set(&w->err, -ENOMEM, "out of memory for a walk of %" PRIu64 " strings",
                                kept.count);
            uint64_t cursor = zm_view_kept_seek(&kept, 0), p, v, i = 0;
            while (rc == 0 && i < kept.count && zm_view_kept_next(&kept, &cursor, kept.n, &p, &v)) {
                if (v >= kept.count) {
                    rc = zm_err_set(&w->err, -EIO, "a kept cell past the view's rows");
                    break;
                }
                list[i] = p;
                w->string_slot[v] = (uint32_t)i++;
            }
            if (rc == 0 && i != kept.count)
                rc = zm_err_set(&w->err, -EIO, "the view keeps %" PRIu64 " cells, not %" PRIu64, i,
                                kept.count);
        }
        if (rc == 0)
            rc = zm_array_read_strings(zm_view_source(view), node->source, list,
                                       own_rows ? (size_t)kept.count : 0, &w->strings, &w->err);
        free(list);
        if (rc != 0) {
            free(w->string_slot);
            w->string_slot = NULL;
            atomic_fetch_sub(&w->synth->held, w->size);
            w->claimed = 0;
        }
        return rc;
    }
    w->row_bytes = zm__row_bytes_of(node);
    w->size = (size_t)(node->meta.shape[0] * w->row_bytes);
    if (w->size == 0)
        return 0;
    if (zm_synth_walk_direct(w->synth, view, node)) {
        /* Nothing gathered: the page cache is asked for the whole array
         * now, so that a cold source is read in file order, once. */
        w->direct = 1;
        w->direct_source = zm_view_source(view);
        w->direct_array = node->source;
        w->size = 0;
        zm_array_prefetch(zm_view_source(view), node->source, zm_config_memory() / 8);
        return 0;
    }
    w->claimed = claim_reclaiming(w->size, w);
    int batches = zm__can_spill(node), in_order = !batches && zm__renumbered(node);
    if (!w->claimed && batches)
        return zm__batch_walk(view, node, w);
    if (!w->claimed && in_order)
        return zm__in_order_walk(view, node, w);
    w->bytes = spill_map(w->size, &w->err);
    int rc = w->bytes == NULL ? w->err.code : 0;
    if (rc == 0)
        rc = batches    ? zm__batch_walk(view, node, w)
             : in_order ? zm__in_order_walk(view, node, w)
                        : zm__fill_chunk(w->synth, view, node, 0, node->meta.shape[0], w->bytes, 0,
                                                         &w->err);
    if (rc != 0 && w->bytes) {
        munmap(w->bytes, w->size);
        w->bytes = NULL;
    }
    if (rc != 0 && w->claimed) {
        atomic_fetch_sub(&w->synth->held, w->size);
        w->claimed = 0;
    }
    return rc;
}
