/* Work ahead of readers: encoding a walked array's chunks ahead on every
 * core, the next walk started early, and synthesis ahead (one idle-priority
 * worker per view making its chunks in priority order). Every thread of
 * this work is started by one function, start_worker. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "zarrmount/log.h"

#include "tree/tree_internal.h"

/* ---- The workers ----------------------------------------------------------------- */

static void set_idle_priority(int idle)
{
    struct sched_param param = {0};
    (void)pthread_setschedparam(pthread_self(), idle ? SCHED_IDLE : SCHED_OTHER, &param);
}

/* A worker as start_worker hands it to its thread. */
struct worker_start {
    void *(*run)(void *);
    void *context;
    int idle;
};

static void *worker_main(void *context)
{
    struct worker_start start = *(struct worker_start *)context;
    free(context);
    if (start.idle)
        set_idle_priority(1);
    return start.run(start.context);
}

/* Every thread of the work ahead starts here: run on a detached thread
 * (nothing joins it: the tree's ahead_running counts it, under the tree's
 * mutex, until it ends, and closing waits for that), at idle priority from
 * its first step when idle (synthesis ahead: only when a core has nothing
 * else to do), else at the caller's. 0, or -errno when no thread started
 * (the caller takes back what it counted). The tree's two long-lived
 * threads, which are joined, start on their own: the disk writer
 * (files.c) and the progress teller (stats.c). */
static int start_worker(void *(*run)(void *), void *context, int idle)
{
    struct worker_start *start = malloc(sizeof *start);
    if (start == NULL)
        return -ENOMEM;
    *start = (struct worker_start){run, context, idle};
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t thread;
        rc = pthread_create(&thread, &attr, worker_main, start);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0)
        free(start);
    return -rc;
}

/* A worker that holds view (counted in ahead_running) started on run,
 * under the tree's mutex: 0, or -1 with nothing held when none started. */
static int start_holding(zm_tree *t, zm_view *view, void *(*run)(void *), void *context)
{
    t->ahead_running++;
    zm__view_hold_locked(t, view, 1);
    if (start_worker(run, context, 0) == 0)
        return 0;
    t->ahead_running--;
    zm__view_hold_locked(t, view, -1);
    return -1;
}

/* The end of a worker started by start_holding: its view let go. */
static void worker_done(zm_tree *t, zm_view *view)
{
    pthread_mutex_lock(&t->mutex);
    zm__view_release_locked(t, view);
    t->ahead_running--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
}

/* ---- Encoding ahead --------------------------------------------------------------- */

static void start_ahead(zm_tree *t, zm_view *view, const char *key, const place *w);

/* Forgets the arrays of a view about to be freed (evicted): none is being
 * encoded (its threads hold the view), and a node of a later view may be
 * allocated where one of these was. Under the tree's mutex. */
void zm__forget_ahead(zm_tree *t, const zm_view *view)
{
    size_t kept = 0;
    for (size_t i = 0; i < t->ahead_count; i++) {
        if (t->ahead[i]->view == view)
            free(t->ahead[i]);
        else
            t->ahead[kept++] = t->ahead[i];
    }
    t->ahead_count = kept;
}

/* Visits every array of the view's store, depth first, with its store
 * path; a visit returning non-zero stops the walk. */
typedef int (*array_visit)(void *context, const zm_store_node *node, const char *path);

static void each_array(zm_view *view, array_visit visit, void *context)
{
    struct frame {
        const zm_store_node *node;
        size_t child;
        size_t length;
    } stack[64];
    char current[1024] = "";
    int depth = 0;
    stack[0] = (struct frame){zm_view_root(view), 0, 0};
    while (depth >= 0) {
        struct frame *f = &stack[depth];
        if (f->child == f->node->child_count) {
            depth--;
            continue;
        }
        const zm_store_node *c = f->node->children[f->child++];
        size_t length = f->length;
        int n = snprintf(current + length, sizeof current - length, "%s%s", length ? "/" : "", c->name);
        if (n < 0 || (size_t)n >= sizeof current - length)
            continue;
        if (c->is_array) {
            if (visit(context, c, current))
                return;
        } else if (depth + 1 < 64) {
            stack[++depth] = (struct frame){c, 0, length + (size_t)n};
        }
    }
}

/* The place and full path ("<view key>/<store path>/<chunk key>") of
 * chunk c, counted in C order, of the array at store_path. */
static void chunk_place(const char *key, const char *store_path, const zm_store_node *node,
                        uint64_t c, place *w, char *path, size_t size)
{
    memset(w, 0, sizeof *w);
    w->node = node;
    w->file = F_CHUNK;
    for (int d = (int)node->meta.rank - 1; d >= 0; d--) {
        w->coords[d] = c % node->grid[d];
        c /= node->grid[d];
    }
    snprintf(w->store_path, sizeof w->store_path, "%s", store_path);
    char chunk[ZM_ZARR_CHUNK_KEY_MAX];
    zm_zarr_chunk_key(node->meta.rank, w->coords, chunk, sizeof chunk);
    snprintf(path, size, "%s/%s/%s", key, store_path, chunk);
}

/* The array that follows a given one in the store's order and is walked,
 * not walked yet. */
struct next_walk {
    zm_view *view;
    const zm_store_node *after, *found;
    int seen;
    char path[1024];
};

static int find_next_walk(void *context, const zm_store_node *node, const char *path)
{
    struct next_walk *s = context;
    if (s->seen && !zm_synth_walk_started(s->view, node) && zm_synth_walks(s->view, node)) {
        s->found = node;
        snprintf(s->path, sizeof s->path, "%s", path);
        return 1;
    }
    s->seen |= node == s->after;
    return 0;
}

/* Whether the walk after node's in the store's order is direct. */
static int next_is_direct(zm_tree *t, zm_view *view, const zm_store_node *node)
{
    struct next_walk next = {.view = view, .after = node};
    each_array(view, find_next_walk, &next);
    return next.found != NULL && zm_synth_walk_direct(t->synth, view, next.found);
}

static uint64_t array_raw_bytes(const zm_store_node *node);
static void chain_walk(zm_tree *t, zm_view *view, const char *key, const place *w);

/* Walks the array after a->node (the next walked one in the store's order)
 * and starts encoding it ahead. With only_if_room, a walk that would not
 * fit in what walks may hold now (it would spill, while this one's memory
 * comes back once its chunks are encoded) is not begun: 1 then, the caller
 * to hand on once this one retires; else 0. */
static int walk_next(struct ahead *a, zm_view *view, int only_if_room, const zm_store_node *only)
{
    zm_tree *t = a->tree;
    if (t->closing)
        return 0;
    struct next_walk next = {.view = view, .after = a->node};
    each_array(view, find_next_walk, &next);
    /* A walk put off is taken on only if no one else took it meanwhile (a
     * reader walking it hands on to the next itself). */
    if (next.found == NULL || (only != NULL && next.found != only))
        return 0;
    int turn = 0;
    if (only_if_room) {
        pthread_mutex_lock(&t->mutex);
        /* A direct walk holds no memory: it always fits. */
        uint64_t bytes =
            zm_synth_walk_direct(t->synth, view, next.found) ? 0 : array_raw_bytes(next.found);
        if (t->handing_on || bytes > zm_synth_walk_room(t->synth)) {
            a->hand_on_bytes = bytes;
            a->hand_on_node = next.found;
            a->hand_on_after = 1;
            pthread_mutex_unlock(&t->mutex);
            return 1;
        }
        t->handing_on = turn = 1;
        pthread_mutex_unlock(&t->mutex);
    }
    place w;
    char path[1400];
    chunk_place(a->key, next.path, next.found, 0, &w, path, sizeof path);
    zm_cache_ref ref;
    zm_err err;
    int chain = 0;
    if (t->codec.kind == ZM_CODEC_NONE) {
        /* Nothing to encode: the walk is made, for its reader to be served
         * from, and the one after it taken on (its hand-on the chain's). */
        zm_source_tally *previous = zm_source_tally_set(zm__tally_of(a->stats, view, next.found));
        chain = zm_synth_walk_make(t->synth, view, next.found, &err) == 0;
        zm_source_tally_set(previous);
    } else if (zm__file_in_cache(t, view, a->stats, path, &w, &ref, &err) == 0) {
        /* Making chunk 0 walks the array; encoding its others starts. */
        zm_cache_release(t->files, &ref);
        start_ahead(t, view, a->key, &w);
    }
    if (turn) {
        pthread_mutex_lock(&t->mutex);
        t->handing_on = 0;
        pthread_mutex_unlock(&t->mutex);
    }
    if (chain)
        chain_walk(t, view, a->key, &w);
    return 0;
}

/* After a walk retired: a next walk of the view put off for want of room
 * (walk_next) is taken on now if it fits. One that never fits is walked
 * when a reader asks for it, as without encoding ahead. Under no lock; the
 * caller's thread holds the view, which holds every entry of its own. */
static void hand_on_put_off(zm_tree *t, zm_view *view)
{
    if (t->closing)
        return;
    uint64_t room = zm_synth_walk_room(t->synth);
    struct ahead *go = NULL;
    const zm_store_node *node = NULL;
    pthread_mutex_lock(&t->mutex);
    for (size_t i = 0; go == NULL && i < t->ahead_count; i++) {
        struct ahead *e = t->ahead[i];
        if (e->view == view && e->hand_on_after && e->hand_on_bytes <= room) {
            e->hand_on_after = 0;
            go = e;
            node = e->hand_on_node;
        }
    }
    pthread_mutex_unlock(&t->mutex);
    if (go != NULL)
        (void)walk_next(go, view, 1, node);
}

static void *encode_ahead(void *context)
{
    struct ahead *a = context;
    zm_tree *t = a->tree;
    zm_err err;
    zm_view *view = a->view; /* held for this thread by start_ahead */
    {
        /* One thread first walks the next array (this one's walk is done),
         * so that walking it overlaps encoding this one: a walk that waits
         * for the reader, or for this array's last chunks, leaves cores
         * idle. Walks still run one after another, each starting the next. */
        pthread_mutex_lock(&t->mutex);
        int hand_on = !a->handed_on;
        a->handed_on = 1;
        pthread_mutex_unlock(&t->mutex);
        /* A direct next walk (zm_synth_walk_direct) has nothing to gather
         * ahead: its chunks are made as they are encoded, so it is begun
         * once this array's chunks are all taken, and the threads go from
         * one array to the next as the reader does. */
        int later = hand_on && next_is_direct(t, view, a->node);
        if (hand_on && !later)
            (void)walk_next(a, view, 1, NULL);
        for (uint64_t c; !t->closing && (c = a->next++) < a->chunks;) {
            place w;
            char path[1400];
            chunk_place(a->key, a->store_path, a->node, c, &w, path, sizeof path);
            uint64_t kept;
            if (t->kernel_reads_kept && zm__kept_size(t, view, path, &w, &kept)) {
                a->done++; /* the kernel reads it from the disk cache */
            } else {
                zm_cache_ref ref;
                if (zm__file_in_cache(t, view, a->stats, path, &w, &ref, &err) != 0)
                    break;
                zm_cache_release(t->files, &ref);
                a->done++;
            }
            /* Made: the walk's memory under the chunks made from the first
             * on goes back, and a next walk put off for want of it may go. */
            if (zm_synth_walk_served(view, a->node, c))
                hand_on_put_off(t, view);
        }
        if (later) {
            /* The array's last chunks (made by the other threads) done
             * first, and its walk retired (below), so that the source's
             * pages it mapped are let go before the next array's are (each
             * a direct walk: the daemon then maps one array at a time). A
             * bound, should a chunk never end. */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 2;
            pthread_mutex_lock(&t->mutex);
            while (a->running > 1 && !t->closing &&
                   pthread_cond_timedwait(&t->changed, &t->mutex, &until) == 0)
                ;
            pthread_mutex_unlock(&t->mutex);
        }
        /* Every chunk made: the walk's memory may go to the next walk
         * (zm_synth_walk_retire). Said by whichever thread made the last. */
        if (!t->closing && a->done >= a->chunks && zm_synth_walk_started(view, a->node)) {
            zm_synth_walk_retire(view, a->node);
            hand_on_put_off(t, view);
        }
        if (later)
            (void)walk_next(a, view, 1, NULL);
    }
    /* The last thread out, every chunk not made (closing, an error): the
     * walk will not be retired by this encoding after all. */
    pthread_mutex_lock(&t->mutex);
    int last = a->running == 1;
    pthread_mutex_unlock(&t->mutex);
    if (last && a->done < a->chunks)
        zm_synth_walk_expect(view, a->node, 0);
    /* The view goes with the last use of a: once it is let go, it may be
     * evicted, and a freed with it (zm__forget_ahead). */
    pthread_mutex_lock(&t->mutex);
    zm__view_release_locked(t, view);
    a->running--;
    t->ahead_running--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

/* An array's values unencoded: what a walk of it holds. */
static uint64_t array_raw_bytes(const zm_store_node *node)
{
    uint64_t raw = node->value_size;
    for (unsigned d = 0; d < node->meta.rank; d++)
        raw *= node->meta.shape[d];
    return raw;
}

/* A prefetch on a thread of its own: asking the kernel for a few hundred
 * MB blocks the caller until most of the reads are queued, which would
 * hold up a reader's request or the encoding. */
struct prefetch {
    zm_tree *tree;
    zm_view *view; /* held for the thread */
    zm_source *source;
    const zm_array *array;
    uint64_t max_bytes;
};

static void *prefetch_run(void *context)
{
    struct prefetch p = *(struct prefetch *)context;
    free(context);
    zm_array_prefetch(p.source, p.array, p.max_bytes);
    worker_done(p.tree, p.view);
    return NULL;
}

/* The source of the array walked after node in the store's order is asked
 * for ahead (zm_array_prefetch), so that a cold source's disk time for it
 * overlaps this array's encoding: only where that walk reads the whole of
 * it (the view keeps at least half the source's cells) and it is at most
 * an eighth of the machine's memory. On a thread of its own (prefetch_run). */
static void prefetch_next(zm_tree *t, zm_view *view, const zm_store_node *node)
{
    struct next_walk next = {.view = view, .after = node};
    each_array(view, find_next_walk, &next);
    if (t->closing || next.found == NULL || next.found->source == NULL)
        return;
    zm_view *part = zm_view_of(view, next.found);
    zm_view_kept kept;
    zm_err err;
    if (zm_view_kept_get(part, &kept, &err) != 0 || kept.count * 2 < kept.n)
        return;
    struct prefetch *p = malloc(sizeof *p);
    if (p == NULL)
        return;
    *p = (struct prefetch){t, view, zm_view_source(part), next.found->source,
                           zm_config_memory() / 8};
    pthread_mutex_lock(&t->mutex);
    if (start_holding(t, view, prefetch_run, p) != 0)
        free(p);
    pthread_mutex_unlock(&t->mutex);
}

/* An entry of the work ahead (zeroed) for the array at w of view. */
static void entry_init(struct ahead *a, zm_tree *t, zm_view *view, const char *key, const place *w)
{
    a->tree = t;
    a->view = view;
    snprintf(a->key, sizeof a->key, "%s", key);
    snprintf(a->store_path, sizeof a->store_path, "%s", w->store_path);
    a->node = w->node;
    a->stats = zm__stats_for(t, key);
}

/* A new entry of the work ahead for the array at w of view, under the
 * tree's mutex; NULL when the array has one already (or out of memory). */
static struct ahead *new_entry_locked(zm_tree *t, zm_view *view, const char *key, const place *w)
{
    for (size_t i = 0; i < t->ahead_count; i++)
        if (t->ahead[i]->node == w->node)
            return NULL;
    struct ahead **list = realloc(t->ahead, (t->ahead_count + 1) * sizeof *list);
    struct ahead *a = list ? calloc(1, sizeof *a) : NULL;
    if (list)
        t->ahead = list;
    if (a == NULL)
        return NULL;
    t->ahead[t->ahead_count++] = a;
    entry_init(a, t, view, key, w);
    return a;
}

/* Starts encoding ahead the array at w of view (held by the caller). */
static void start_ahead(zm_tree *t, zm_view *view, const char *key, const place *w)
{
    const zm_store_node *node = w->node;
    uint64_t chunks = 1, raw = array_raw_bytes(node);
    for (unsigned d = 0; d < node->meta.rank; d++)
        chunks *= node->grid[d];
    /* Only arrays made by a walk (or, with a disk cache, filed by one: its
     * chunks are then read from the disk ahead of the reader), and only
     * what the cache can hold encoded (taken as half the raw size, a low
     * estimate of what the codecs give on single-cell values); a larger
     * array is encoded as it is read. With codec none there is nothing to
     * encode: a walk's chunks are served from it (zm__walk_chain). */
    if (t->closing || t->codec.kind == ZM_CODEC_NONE ||
        (!zm_synth_walk_started(view, node) && t->disk == NULL) || chunks < 4 ||
        raw / 2 > t->cache_bytes)
        return;
    pthread_mutex_lock(&t->mutex);
    struct ahead *a = new_entry_locked(t, view, key, w);
    if (a == NULL) {
        pthread_mutex_unlock(&t->mutex);
        return;
    }
    /* Its walk's memory comes back when every chunk is made (encode_ahead). */
    zm_synth_walk_expect(view, node, 1);
    a->chunks = chunks;
    a->next = 0;
    clock_gettime(CLOCK_MONOTONIC, &a->began);
    for (unsigned i = 0; i < t->ahead_threads; i++) {
        t->ahead_running++;
        a->running++;
        zm__view_hold_locked(t, view, 1);
        if (start_worker(encode_ahead, a, 0) != 0) {
            t->ahead_running--;
            a->running--;
            zm__view_hold_locked(t, view, -1);
        }
    }
    pthread_mutex_unlock(&t->mutex);
    prefetch_next(t, view, node);
}

/* The view key of a chunk's full path ("<view key>/<store path>/<chunk
 * key>"): 1, or 0 with key empty. */
static int view_key_of(const char *full_path, const place *w, char key[ZM__VIEW_KEY])
{
    key[0] = 0;
    const char *chunk = strrchr(full_path, '/');
    size_t tail = strlen(w->store_path) + (chunk ? strlen(chunk) : 0) + 1;
    size_t length = strlen(full_path);
    if (chunk && length > tail && length - tail < ZM__VIEW_KEY)
        snprintf(key, ZM__VIEW_KEY, "%.*s", (int)(length - tail), full_path);
    return key[0] != 0;
}

/* ---- Walking ahead, with codec none ----------------------------------------------- */

static void *walk_on(void *context)
{
    struct ahead *a = context; /* the array's entry: its view held for this thread */
    zm_tree *t = a->tree;
    zm_view *view = a->view;
    (void)walk_next(a, view, 1, NULL);
    worker_done(t, view);
    return NULL;
}

/* The walk of the array at w (made) is served from: the next array's walk
 * is made on a thread of its own while the reader reads this one, if it
 * fits beside the walks held (else once a walk retires: hand_on_put_off),
 * and so on along the store. Once per array. */
static void chain_walk(zm_tree *t, zm_view *view, const char *key, const place *w)
{
    if (t->closing)
        return;
    pthread_mutex_lock(&t->mutex);
    struct ahead *a = new_entry_locked(t, view, key, w);
    if (a == NULL) {
        pthread_mutex_unlock(&t->mutex);
        return;
    }
    a->handed_on = 1;
    (void)start_holding(t, view, walk_on, a);
    pthread_mutex_unlock(&t->mutex);
    prefetch_next(t, view, w->node);
}

/* A walk retired on a thread of its own: what was put off is taken on. */
struct retired_walk {
    zm_tree *tree;
    zm_view *view; /* held for the thread */
};

static void *after_retire(void *context)
{
    struct retired_walk r = *(struct retired_walk *)context;
    free(context);
    hand_on_put_off(r.tree, r.view);
    worker_done(r.tree, r.view);
    return NULL;
}

void zm__walk_chain(zm_tree *t, zm_view *view, const char *full_path, const place *w)
{
    char key[ZM__VIEW_KEY];
    if (t->codec.kind == ZM_CODEC_NONE && w->file == F_CHUNK && view_key_of(full_path, w, key) &&
        zm_synth_walk_started(view, w->node))
        chain_walk(t, view, key, w);
}

void zm__walk_retired(zm_tree *t, zm_view *view)
{
    struct retired_walk *r = malloc(sizeof *r);
    if (r == NULL || t->closing) {
        free(r);
        return;
    }
    *r = (struct retired_walk){t, view};
    pthread_mutex_lock(&t->mutex);
    if (start_holding(t, view, after_retire, r) != 0)
        free(r);
    pthread_mutex_unlock(&t->mutex);
}

static void *hand_on_early(void *context)
{
    struct ahead *a = context;
    zm_tree *t = a->tree;
    zm_view *view = a->view; /* held for this thread by start_next_walk_early */
    walk_next(a, view, 0, NULL);
    free(a);
    worker_done(t, view);
    return NULL;
}

/* A walk of strings runs on one core (HDF5 reads them under its lock): the
 * walk of the array after it starts at once on another thread, rather than
 * when the strings are done. */
static void start_next_walk_early(zm_tree *t, zm_view *view, const char *key, const place *w)
{
    if (t->closing || w->file != F_CHUNK || zm_synth_walk_started(view, w->node) ||
        w->node->producer != ZM_PRODUCE_CELL_STRINGS || !zm_synth_walks(view, w->node))
        return;
    struct ahead *a = calloc(1, sizeof *a);
    if (a == NULL)
        return;
    entry_init(a, t, view, key, w);
    pthread_mutex_lock(&t->mutex);
    if (start_holding(t, view, hand_on_early, a) != 0)
        free(a);
    pthread_mutex_unlock(&t->mutex);
}

static void ahead_raise(view_stats *vs, const zm_store_node *node);

int zm__with_file(zm_tree *t, zm_view *view, view_stats *vs, const char *full_path,
                  const place *w, zm_cache_ref *ref, zm_err *err)
{
    char key[ZM__VIEW_KEY] = "";
    if (w->file == F_CHUNK)
        (void)view_key_of(full_path, w, key);
    if (key[0])
        start_next_walk_early(t, view, key, w);
    ahead_raise(vs, w->node);
    int rc = zm__file_in_cache(t, view, vs, full_path, w, ref, err);
    if (rc == 0 && key[0] &&
        (zm_synth_walk_started(view, w->node) ||
         (t->disk != NULL && !t->kernel_reads_kept && zm__kept_on_disk(t, view, w->node))))
        start_ahead(t, view, key, w);
    return rc;
}

/* ---- Synthesis ahead ----------------------------------------------------------------- */

/* Once a reader opens a view, one worker per view makes its chunks before
 * they are asked for, in priority order: the chunks holding the first cells
 * first, across every array of the store (chunk c of an array of g row
 * chunks comes at c / g). It runs at idle priority and hands its decodes to
 * the pool as background work, so readers' requests go first; it stops when
 * no reader has asked anything of the view for a while (it starts again at
 * the next request), when what it made would fill half the file cache (more
 * would evict its own work), or when every chunk is made. A reader that
 * asks for a chunk of the array the worker is making one of would wait for
 * it: the worker is then raised to normal priority until that chunk is
 * done, so a reader never waits behind idle-priority work. */

int64_t zm__monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

typedef struct ahead_array {
    const zm_store_node *node;
    char path[1024];
    uint64_t chunks, next; /* chunks in C order; the next to make */
} ahead_array;

/* Every array of the view's store with at least one chunk, with its path. */
struct array_list {
    ahead_array *items;
    size_t count, capacity;
};

static int collect_array(void *context, const zm_store_node *node, const char *path)
{
    struct array_list *list = context;
    uint64_t chunks = 1;
    for (unsigned d = 0; d < node->meta.rank; d++)
        chunks *= node->grid[d];
    if (chunks == 0 || (node->meta.rank > 0 && node->meta.shape[0] == 0))
        return 0;
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 32;
        ahead_array *grown = realloc(list->items, capacity * sizeof *grown);
        if (grown == NULL)
            return 1; /* the arrays so far */
        list->items = grown;
        list->capacity = capacity;
    }
    ahead_array *a = &list->items[list->count++];
    *a = (ahead_array){.node = node, .chunks = chunks};
    snprintf(a->path, sizeof a->path, "%s", path);
    return 0;
}

static ahead_array *ahead_arrays(zm_view *view, size_t *count)
{
    struct array_list list = {0};
    each_array(view, collect_array, &list);
    *count = list.count;
    return list.items;
}

/* Where the next chunk of an array lies in priority order: the share of
 * its rows before it (0 for a 0-d array). */
static double ahead_position(const ahead_array *a)
{
    const zm_store_node *node = a->node;
    if (node->meta.rank == 0 || node->grid[0] == 0)
        return 0;
    uint64_t per_row_chunk = a->chunks / node->grid[0];
    return (double)(a->next / per_row_chunk) / (double)node->grid[0];
}

/* Whether the worker may make an array whose chunks need a walk not made
 * yet: not a walk of strings (HDF5 reads them under its global lock, which
 * a reader's own HDF5 reads would then wait behind), and not one larger
 * than what is left of its share of the cache (a walk holds the whole
 * array: a reader that opens an atlas's full/ for its obs must not find
 * the daemon gathering all of X), nor one that would spill. Readers still
 * walk whatever they ask. */
static int ahead_may_walk(zm_tree *t, zm_view *view, const zm_store_node *node, uint64_t room)
{
    if (!zm_synth_walks(view, node) && !(node->producer == ZM_PRODUCE_CELL_STRINGS &&
                                         !zm_view_is_identity(zm_view_of(view, node)) &&
                                         node->meta.rank > 0))
        return 1;
    if (zm_synth_walk_started(view, node))
        return 1; /* walked already: its chunks are cut, not gathered */
    if (node->producer == ZM_PRODUCE_CELL_STRINGS)
        return 0;
    /* Nor one of more than an eighth of what walks may hold (nothing
     * retires a walk made here: it would keep from a reader's walk the room
     * that spares it a spill), nor one that does not fit now, nor any while a reader walks the store in its order (tar,
     * cp -r): encoding ahead walks each next array as room comes back, and
     * a walk made here, which nothing retires, would take that room. */
    zm_synth_walk_stats walks;
    zm_synth_get_walk_stats(t->synth, &walks);
    uint64_t raw = array_raw_bytes(node);
    if (raw > room || raw > walks.limit_bytes / 8 || raw > zm_synth_walk_room(t->synth))
        return 0;
    int walking = 0;
    pthread_mutex_lock(&t->mutex);
    for (size_t i = 0; i < t->ahead_count && !walking; i++)
        walking = t->ahead[i]->view == view && t->ahead[i]->running > 0;
    pthread_mutex_unlock(&t->mutex);
    return !walking;
}

typedef struct ahead_worker {
    zm_tree *tree;
    view_stats *stats;
} ahead_worker;

static int ahead_run(zm_tree *t, view_stats *vs, zm_view *view)
{
    size_t count = 0;
    ahead_array *arrays = ahead_arrays(view, &count);
    uint64_t bound = t->cache_bytes / 2, made = 0;
    int state = AHEAD_DONE;
    int64_t started = zm__monotonic_ns();
    uint64_t chunks_this_run = 0, total = 0;
    for (size_t i = 0; i < count; i++)
        total += arrays[i].chunks;
    vs->ahead_total = total;
    vs->ahead_run_chunks = 0;
    vs->ahead_left = 0;
    for (;;) {
        /* A reader waits for a view to be let go: this one goes (it starts
         * again at its view's next request). */
        if (t->closing || t->view_waiters > 0) {
            state = AHEAD_IDLE;
            break;
        }
        if (zm__monotonic_ns() - vs->last_read_ns > t->ahead_idle_ns) {
            state = AHEAD_IDLE;
            break;
        }
        if (made >= bound) {
            state = AHEAD_BOUND;
            break;
        }
        /* The chunk nearest the first cells, earlier arrays first on ties. */
        ahead_array *a = NULL;
        double best = 2;
        for (size_t i = 0; i < count; i++) {
            if (arrays[i].next >= arrays[i].chunks)
                continue;
            double at = ahead_position(&arrays[i]);
            if (at < best) {
                best = at;
                a = &arrays[i];
            }
        }
        if (a == NULL)
            break; /* every chunk made */
        if (a->next == 0 && !ahead_may_walk(t, view, a->node, bound - (made < bound ? made : bound))) {
            vs->ahead_left += a->chunks;
            a->next = a->chunks; /* left to readers */
            continue;
        }
        if (t->ahead_rate > 0) {
            /* At most ahead_rate chunks a second since this run began. */
            int64_t due = started + (int64_t)((double)chunks_this_run * 1e9 / t->ahead_rate);
            int64_t wait = due - zm__monotonic_ns();
            if (wait > 0) {
                struct timespec pause = {wait / 1000000000, wait % 1000000000};
                nanosleep(&pause, NULL);
                continue; /* look at idleness again first */
            }
        }
        place w;
        char path[1400];
        chunk_place(vs->key, a->path, a->node, a->next++, &w, path, sizeof path);
        /* Back to idle priority if a reader raised it for the last chunk. */
        if (!vs->ahead_background) {
            set_idle_priority(1);
            vs->ahead_background = 1;
        }
        uint64_t kept;
        if (t->kernel_reads_kept && zm__kept_size(t, view, path, &w, &kept))
            continue; /* the kernel reads it from the disk cache */
        vs->ahead_node = a->node;
        zm_cache_ref ref;
        zm_err err;
        zm_err_clear(&err);
        int rc = zm__file_in_cache(t, view, vs, path, &w, &ref, &err);
        vs->ahead_node = NULL;
        if (rc != 0) {
            pthread_mutex_lock(&t->mutex);
            snprintf(vs->ahead_reason, sizeof vs->ahead_reason, "%s", err.reason);
            pthread_mutex_unlock(&t->mutex);
            zm_log(LOG_WARNING, "synthesis ahead of %s stopped: %s", vs->key, err.reason);
            state = AHEAD_FAILED;
            break;
        }
        made += ref.size;
        vs->ahead_bytes += ref.size;
        zm_cache_release(t->files, &ref);
        vs->ahead_chunks++;
        vs->ahead_run_chunks++;
        chunks_this_run++;
    }
    free(arrays);
    return state;
}

static void *synthesize_ahead(void *context)
{
    ahead_worker *worker = context;
    zm_tree *t = worker->tree;
    view_stats *vs = worker->stats;
    free(worker);
    vs->ahead_tid = (pid_t)syscall(SYS_gettid); /* at idle priority already (start_worker) */
    vs->ahead_background = 1;
    const _Atomic int *own = zm_source_background_set(&vs->ahead_background);
    int state = AHEAD_FAILED;
    target tg;
    zm_err err;
    zm_err_clear(&err);
    zm_view *view = NULL;
    int rc = zm__parse_path(t, vs->key, &tg, &err);
    if (rc == 0) {
        rc = zm__view_get(t, &tg, &view, 0, &err);
        zm__target_clear(&tg);
    }
    if (rc == 0) {
        state = ahead_run(t, vs, view);
        zm__view_release(t, view);
    } else if (rc == -EBUSY) {
        state = AHEAD_IDLE; /* every view is in use: again at the view's next request */
    } else {
        pthread_mutex_lock(&t->mutex);
        snprintf(vs->ahead_reason, sizeof vs->ahead_reason, "%s", err.reason);
        pthread_mutex_unlock(&t->mutex);
    }
    zm_source_background_set(own);
    vs->ahead_tid = 0;
    pthread_mutex_lock(&t->mutex);
    vs->ahead_state = state;
    t->ahead_running--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

/* A reader asked something of the view: note it, and start its worker if
 * none runs (again after it stopped idle; not after it made everything,
 * filled its share of the cache or failed). */
void zm__ahead_touch(zm_tree *t, view_stats *vs)
{
    if (t->ahead_idle_ns <= 0 || vs == &t->outside || vs == &t->more_views || t->closing)
        return;
    vs->last_read_ns = zm__monotonic_ns();
    if (vs->ahead_state != AHEAD_NONE && vs->ahead_state != AHEAD_IDLE)
        return; /* an unlocked look first: this is every request's path */
    pthread_mutex_lock(&t->mutex);
    if ((vs->ahead_state == AHEAD_NONE || vs->ahead_state == AHEAD_IDLE) && !t->closing) {
        ahead_worker *worker = malloc(sizeof *worker);
        if (worker != NULL) {
            *worker = (ahead_worker){t, vs};
            vs->ahead_state = AHEAD_RUNNING;
            vs->ahead_runs++;
            clock_gettime(CLOCK_MONOTONIC, &vs->ahead_began);
            t->ahead_running++;
            if (start_worker(synthesize_ahead, worker, 1) != 0) {
                t->ahead_running--;
                vs->ahead_state = AHEAD_FAILED;
                snprintf(vs->ahead_reason, sizeof vs->ahead_reason, "cannot start a thread");
                free(worker);
            }
        }
    }
    pthread_mutex_unlock(&t->mutex);
}

/* A reader is about to need a chunk of node: if the view's worker is making
 * one of the same array (the same chunk, or the walk every chunk of it
 * waits for), it runs at normal priority until that chunk is done. */
static void ahead_raise(view_stats *vs, const zm_store_node *node)
{
    if (vs->ahead_node != node || node == NULL || !vs->ahead_background)
        return;
    vs->ahead_background = 0; /* its pool work is ordinary from now on */
    pid_t tid = vs->ahead_tid;
    struct sched_param param = {0};
    if (tid > 0)
        (void)sched_setscheduler(tid, SCHED_OTHER, &param);
}

/* A reader waits for a view to be let go (zm__view_get): every worker runs at
 * normal priority until it stops, at its next chunk, so that the reader
 * does not wait behind idle-priority work. */

void zm__ahead_make_way(zm_tree *t)
{
    size_t count;
    view_stats **views = zm__stats_list(t, &count);
    for (size_t i = 0; i < count; i++) {
        view_stats *vs = views[i];
        pid_t tid = vs->ahead_tid;
        if (tid > 0 && vs->ahead_background) {
            vs->ahead_background = 0;
            struct sched_param param = {0};
            (void)sched_setscheduler(tid, SCHED_OTHER, &param);
        }
    }
    free(views);
}
