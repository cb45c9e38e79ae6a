/* The bytes of one chunk of a view's store. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "zarrmount/synth.h"

/* A whole per-cell array of a reordered view, gathered in one pass.
 *
 * Held one of two ways. In memory (anonymous pages), while the walks held so
 * fit what the mount gives walks (zm_synth_set_walk_memory): chunks are then
 * cut from it where they lie. Spilled, above that: the pass goes over the
 * source in batches of rows in file order, each batch read into a staging
 * buffer, sorted by the chunk its rows land in and appended to that chunk's
 * region of an unlinked temporary file (one pwrite a region a batch). A
 * region holds its chunk's bytes in source order; cutting a chunk reads its
 * region back and puts each row in place (its rows in source order are the
 * order they arrived in). The daemon then holds a batch, not the array. */
struct zm_walk {
    pthread_mutex_t mutex;
    int state;      /* 0 not made, 1 made, −errno failed */
    zm_err err;
    uint8_t *bytes; /* in memory: the array's values, unpadded, C order */
    size_t size;    /* the array's bytes */
    int claimed;    /* bytes counts in the memory held by walks */
    int fd;         /* spilled: the temporary file (−1: not spilled) */
    int in_order;   /* spilled with every value at its place (no regions) */
    uint64_t row_bytes; /* bytes of one index along dimension 0 */
    zm_strings strings; /* a per-cell string array: every source value, read once */
    /* A spilled walk of strings: each chunk's records (item, length,
     * bytes) in blocks of the spill file, the blocks of chunk c at
     * block_at[c][0 .. block_count[c]), its last block block_fill[c] full. */
    uint64_t **block_at;
    uint32_t *block_count;
    uint32_t *block_fill;
    uint64_t chunk_count;
    /* Taking back a walk's memory (see zm_synth_walk_retire): the threads
     * using its values now (under mutex), and whether it is on the list of
     * retired walks (under walks_mutex). */
    int users;
    int listed;
};

/* What walks may hold in memory at once, and hold now. */
static _Atomic uint64_t walk_memory_limit = (uint64_t)256 << 20;
static _Atomic uint64_t walk_memory_held;
static _Atomic uint64_t walks_spilled, walks_spilled_bytes, walks_reclaimed;

void zm_synth_set_walk_memory(uint64_t bytes)
{
    atomic_store(&walk_memory_limit, bytes);
}

void zm_synth_get_walk_stats(zm_synth_walk_stats *out)
{
    out->held_bytes = atomic_load(&walk_memory_held);
    out->limit_bytes = atomic_load(&walk_memory_limit);
    out->spilled = atomic_load(&walks_spilled);
    out->spilled_bytes = atomic_load(&walks_spilled_bytes);
    out->reclaimed = atomic_load(&walks_reclaimed);
}

/* Batches of a walk: their buffer is at most 32 MiB and an eighth of what
 * walks may hold (a small cache_size makes small batches, many of them);
 * their rows at most a sixteenth of that many. */
#define BATCH_BYTES_MAX ((uint64_t)32 << 20)
static uint64_t batch_bytes(void)
{
    uint64_t bytes = atomic_load(&walk_memory_limit) / 8;
    return bytes < 256 ? 256 : bytes > BATCH_BYTES_MAX ? BATCH_BYTES_MAX : bytes;
}

static uint64_t batch_rows(void)
{
    uint64_t rows = batch_bytes() / 16;
    return rows < 64 ? 64 : rows;
}

static int claim_walk_memory(uint64_t size)
{
    uint64_t held = atomic_load(&walk_memory_held);
    do {
        if (held + size > atomic_load(&walk_memory_limit))
            return 0;
    } while (!atomic_compare_exchange_weak(&walk_memory_held, &held, held + size));
    return 1;
}

static pthread_mutex_t walks_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Walks whose chunks are all made, oldest first (under walks_mutex): their
 * memory is taken back when a new walk needs it. */
static struct zm_walk **retired;
static size_t retired_count, retired_capacity;

static void unlist_locked(struct zm_walk *walk)
{
    for (size_t i = 0; walk->listed && i < retired_count; i++)
        if (retired[i] == walk) {
            memmove(retired + i, retired + i + 1, (retired_count - i - 1) * sizeof *retired);
            retired_count--;
            break;
        }
    walk->listed = 0;
}

/* What a walk holds in memory let go; it is made again if asked for.
 * Under its mutex, with no user. */
static void release_values(struct zm_walk *w)
{
    if (w->bytes != NULL && w->size > 0)
        munmap(w->bytes, w->size);
    w->bytes = NULL;
    zm_strings_free(&w->strings);
    memset(&w->strings, 0, sizeof w->strings);
    if (w->claimed)
        atomic_fetch_sub(&walk_memory_held, w->size);
    w->claimed = 0;
    w->state = 0;
}

/* Claims size bytes of walk memory for self, taking back retired walks'
 * (oldest first, none in use) while it does not fit. */
static int claim_reclaiming(uint64_t size, struct zm_walk *self)
{
    if (claim_walk_memory(size))
        return 1;
    if (size > atomic_load(&walk_memory_limit))
        return 0;
    int claimed = 0;
    pthread_mutex_lock(&walks_mutex);
    for (size_t i = 0; !claimed && i < retired_count;) {
        struct zm_walk *c = retired[i];
        /* A walk being made or read holds its mutex: passed over. */
        if (c == self || pthread_mutex_trylock(&c->mutex) != 0) {
            i++;
            continue;
        }
        int gone = !c->claimed || c->state != 1; /* spilled, failed, or taken back */
        if (!gone && c->users == 0) {
            release_values(c);
            atomic_fetch_add(&walks_reclaimed, 1);
            gone = 1;
        }
        pthread_mutex_unlock(&c->mutex);
        if (gone)
            unlist_locked(c);
        else
            i++;
        claimed = claim_walk_memory(size);
    }
    pthread_mutex_unlock(&walks_mutex);
    return claimed;
}

void zm_synth_walk_retire(const zm_store_node *node)
{
    struct zm_walk *w = __atomic_load_n(&node->walk, __ATOMIC_ACQUIRE);
    if (w == NULL)
        return;
    pthread_mutex_lock(&walks_mutex);
    if (!w->listed) {
        if (retired_count == retired_capacity) {
            size_t capacity = retired_capacity ? retired_capacity * 2 : 16;
            struct zm_walk **grown = realloc(retired, capacity * sizeof *grown);
            if (grown == NULL) { /* kept: it is only not taken back */
                pthread_mutex_unlock(&walks_mutex);
                return;
            }
            retired = grown;
            retired_capacity = capacity;
        }
        retired[retired_count++] = w;
        w->listed = 1;
    }
    pthread_mutex_unlock(&walks_mutex);
}

/* A use of a walk's values (walk_of) ends. */
static void walk_put(struct zm_walk *w)
{
    pthread_mutex_lock(&w->mutex);
    w->users--;
    pthread_mutex_unlock(&w->mutex);
}

void zm_synth_chunk_done(const zm_store_node *node, uint8_t *raw, int borrowed)
{
    if (borrowed)
        walk_put(node->walk);
    else
        free(raw);
}

void zm__walk_free(struct zm_walk *walk)
{
    if (walk == NULL)
        return;
    pthread_mutex_lock(&walks_mutex);
    unlist_locked(walk);
    pthread_mutex_unlock(&walks_mutex);
    if (walk->bytes != NULL && walk->size > 0)
        munmap(walk->bytes, walk->size);
    if (walk->claimed)
        atomic_fetch_sub(&walk_memory_held, walk->size);
    for (uint64_t c = 0; walk->block_at && c < walk->chunk_count; c++)
        free(walk->block_at[c]);
    free(walk->block_at);
    free(walk->block_count);
    free(walk->block_fill);
    if (walk->fd >= 0)
        close(walk->fd);
    zm_strings_free(&walk->strings);
    pthread_mutex_destroy(&walk->mutex);
    free(walk);
}

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
#define WALK_MEMORY_BYTES ((size_t)1 << 30)

/* An unlinked temporary file in the spill directory, or −1. */
static int spill_file(zm_err *err)
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
        /* Populated at once: one call makes every page, rather than a
         * fault per page as the walk first writes each (measured: a tenth
         * off a cold walk of a million cells). */
        void *map = mmap(NULL, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (map != MAP_FAILED)
            return map;
    }
    int fd = spill_file(err);
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

static int write_all(int fd, const uint8_t *bytes, size_t size, uint64_t offset, zm_err *err)
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

static int read_all(int fd, uint8_t *bytes, size_t size, uint64_t offset, zm_err *err)
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

/* Copies n bytes between buffers that do not overlap: a short run (a
 * sparse row of a few values, sorted or cut by a spilled walk: tens of
 * millions of them at atlas scale) as two overlapping moves of a fixed
 * size rather than a call to memcpy. */
static inline void copy_run(uint8_t *to, const uint8_t *from, size_t n)
{
    typedef struct { uint64_t w[2]; } u128;
    typedef struct { uint64_t w[4]; } u256;
    if (n >= 32 && n <= 64) {
        u256 a, b;
        memcpy(&a, from, 32);
        memcpy(&b, from + n - 32, 32);
        memcpy(to, &a, 32);
        memcpy(to + n - 32, &b, 32);
    } else if (n >= 16 && n < 32) {
        u128 a, b;
        memcpy(&a, from, 16);
        memcpy(&b, from + n - 16, 16);
        memcpy(to, &a, 16);
        memcpy(to + n - 16, &b, 16);
    } else if (n >= 8 && n < 16) {
        uint64_t a, b;
        memcpy(&a, from, 8);
        memcpy(&b, from + n - 8, 8);
        memcpy(to, &a, 8);
        memcpy(to + n - 8, &b, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t a, b;
        memcpy(&a, from, 4);
        memcpy(&b, from + n - 4, 4);
        memcpy(to, &a, 4);
        memcpy(to + n - 4, &b, 4);
    } else if (n > 0 && n < 4) {
        to[0] = from[0];
        to[n / 2] = from[n / 2];
        to[n - 1] = from[n - 1];
    } else if (n > 64) {
        memcpy(to, from, n);
    }
}

typedef struct pair {
    uint64_t source; /* source row (or range start) */
    uint64_t slot;   /* where it goes in the output */
} pair;

static int by_source(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    return (x->source > y->source) - (x->source < y->source);
}

/* Sorts pairs by source (rows of a view: below 2^32) in two passes of a
 * 16-bit radix sort; a few with qsort. */
static void sort_pairs(pair *pairs, uint64_t count)
{
    if (count < 256) {
        qsort(pairs, count, sizeof *pairs, by_source);
        return;
    }
    /* Digits as wide as the largest source row needs, in passes of at most
     * 11 bits: a chunk's rows of ten million cells sort in 3 passes of 8
     * bits, with counts that fit in L1. */
    uint64_t largest = 0;
    for (uint64_t i = 0; i < count; i++)
        largest = pairs[i].source > largest ? pairs[i].source : largest;
    unsigned bits = 1;
    while (bits < 64 && (largest >> bits) != 0)
        bits++;
    unsigned passes = (bits + 10) / 11, width = (bits + passes - 1) / passes;
    size_t buckets = (size_t)1 << width;
    pair *other = malloc(count * sizeof *other);
    size_t *counts = malloc(buckets * sizeof *counts);
    if (other == NULL || counts == NULL) {
        free(other);
        free(counts);
        qsort(pairs, count, sizeof *pairs, by_source);
        return;
    }
    pair *from = pairs, *to = other;
    for (unsigned pass = 0, shift = 0; pass < passes; pass++, shift += width) {
        memset(counts, 0, buckets * sizeof *counts);
        for (uint64_t i = 0; i < count; i++)
            counts[(from[i].source >> shift) & (buckets - 1)]++;
        size_t at = 0;
        for (size_t d = 0; d < buckets; d++) {
            size_t c = counts[d];
            counts[d] = at;
            at += c;
        }
        for (uint64_t i = 0; i < count; i++)
            to[counts[(from[i].source >> shift) & (buckets - 1)]++] = from[i];
        pair *swap = from;
        from = to;
        to = swap;
    }
    if (from != pairs) /* an odd number of passes */
        memcpy(pairs, from, count * sizeof *pairs);
    free(other);
    free(counts);
}

/* Source rows of view rows [from, to), sorted, with their output slots. */
static pair *sorted_rows(const zm_view *view, uint64_t from, uint64_t to)
{
    const uint32_t *order = zm_view_order(view);
    pair *pairs = malloc((to - from ? to - from : 1) * sizeof *pairs);
    if (pairs == NULL)
        return NULL;
    zm_err err;
    zm_view_kept kept;
    if (from == 0 && to == zm_view_rows(view) && to > 4096 &&
        zm_view_kept_get((zm_view *)view, &kept, &err) == 0) {
        /* Every row of the view (a walk): the view's cells in source
         * order, no sort. */
        uint64_t cursor = zm_view_kept_seek(&kept, 0), at = 0, p, v;
        while (at < to && zm_view_kept_next(&kept, &cursor, kept.n, &p, &v))
            pairs[at++] = (pair){p, v};
        return pairs;
    }
    int ascending = 1;
    for (uint64_t i = from; i < to; i++) {
        pairs[i - from] = (pair){order[i], i - from};
        ascending &= i == from || order[i] > order[i - 1];
    }
    if (!ascending)
        sort_pairs(pairs, to - from);
    return pairs;
}

/* Rows [from, to) of a per-cell array in view order, row_bytes each, into out. */
static int cell_rows(zm_view *view, const zm_array *array, uint64_t from, uint64_t to, uint8_t *out,
                     zm_err *err)
{
    uint64_t count = to - from;
    if (count == 0)
        return 0;
    uint64_t *rows = malloc(count * sizeof *rows);
    uint64_t *slots = malloc(count * sizeof *slots);
    int rc = rows && slots ? 0 : zm_err_set(err, -ENOMEM, "out of memory gathering rows");
    pair *pairs = NULL;
    zm_view_kept kept;
    zm_err ignored;
    if (rc == 0 && from == 0 && to == zm_view_rows(view) && to > 4096 &&
        zm_view_kept_get(view, &kept, &ignored) == 0) {
        /* Every row of the view (a walk): its cells in source order,
         * straight into the lists the gather takes (no pairs between: at
         * atlas scale they were a third of a walk's memory). */
        uint64_t cursor = zm_view_kept_seek(&kept, 0), at = 0, p, v;
        while (at < count && zm_view_kept_next(&kept, &cursor, kept.n, &p, &v)) {
            rows[at] = p;
            slots[at++] = v;
        }
    } else if (rc == 0) {
        pairs = sorted_rows(view, from, to);
        if (pairs == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory gathering rows");
        for (uint64_t i = 0; rc == 0 && i < count; i++) {
            rows[i] = pairs[i].source;
            slots[i] = pairs[i].slot;
        }
    }
    /* Each row read straight into its place. */
    if (rc == 0)
        rc = zm_array_scatter_rows(zm_view_source(view), array, rows, slots, count, out,
                                   from == 0 && to == zm_view_rows(view) ? ZM_READ_PASS : 0, err);
    free(pairs);
    free(rows);
    free(slots);
    return rc;
}


static int make_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w);

/* The array's walk, made on first use (or again, once taken back): one
 * thread makes it, others wait. Each use ends with walk_put. */
static int walk_of(zm_view *view, const zm_store_node *node, struct zm_walk **out, zm_err *err)
{
    zm_store_node *n = (zm_store_node *)node;
    pthread_mutex_lock(&walks_mutex);
    struct zm_walk *w = n->walk;
    if (w == NULL) {
        w = calloc(1, sizeof *w);
        if (w) {
            pthread_mutex_init(&w->mutex, NULL);
            w->fd = -1;
            /* Others see it (zm_synth_walk_started) without walks_mutex. */
            __atomic_store_n(&n->walk, w, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&walks_mutex);
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
        w->users++; /* until walk_put */
    pthread_mutex_unlock(&w->mutex);
    if (state < 0)
        return state;
    *out = w;
    return 0;
}

/* A spilled walk of strings: blocks of this size, a buffer a chunk. */
#define STRING_BLOCK ((size_t)32 << 10)
/* Bytes a string walk is taken to hold in memory for each value: its
 * offset and a short string. Above what walks may hold, it is spilled. */
#define STRING_WALK_BYTES_PER_VALUE 24

/* The end of a walk's pass: a failed spill's file closed, a spill made
 * counted (bytes: what its file holds). */
static int end_pass(struct zm_walk *w, int rc, int spilled, uint64_t bytes)
{
    if (rc != 0 && w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (rc == 0 && spilled) {
        atomic_fetch_add(&walks_spilled, 1);
        atomic_fetch_add(&walks_spilled_bytes, bytes);
    }
    return rc;
}

static int put_block(struct zm_walk *w, uint64_t c, const uint8_t *bytes, size_t size,
                     uint64_t *file_end, zm_err *err)
{
    uint64_t *grown = realloc(w->block_at[c], (w->block_count[c] + 1) * sizeof *grown);
    if (grown == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for a spilled walk of strings");
    w->block_at[c] = grown;
    int rc = write_all(w->fd, bytes, size, *file_end, err);
    if (rc != 0)
        return rc;
    grown[w->block_count[c]++] = *file_end;
    *file_end += STRING_BLOCK;
    return 0;
}

/* The pass of a spilled walk of strings: source rows in file order, in
 * batches; each value appended as a record (its item in the chunk, its
 * length, its bytes) to its chunk's buffer, a full buffer written as one
 * block of the spill file. The daemon holds a batch and a block a chunk. */
static int spill_strings_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    zm_err *err = &w->err;
    zm_source *source = zm_view_source(view);
    zm_view_kept kept;
    if (zm_view_kept_get(view, &kept, err) != 0)
        return err->code;
    uint64_t per_row = 1;
    for (unsigned d = 1; d < node->meta.rank; d++)
        per_row *= node->meta.shape[d];
    uint64_t chunk_rows = node->meta.chunks[0], chunks = node->grid[0];
    w->chunk_count = chunks;
    w->block_at = calloc(chunks, sizeof *w->block_at);
    w->block_count = calloc(chunks, sizeof *w->block_count);
    w->block_fill = calloc(chunks, sizeof *w->block_fill);
    uint8_t **buffer = calloc(chunks, sizeof *buffer);
    uint64_t batch = batch_rows() < ((uint64_t)1 << 18) ? batch_rows() : (uint64_t)1 << 18;
    uint64_t *rows = malloc(batch * sizeof *rows), *view_rows = malloc(batch * sizeof *view_rows);
    int rc = w->block_at && w->block_count && w->block_fill && buffer && rows && view_rows
                 ? 0
                 : zm_err_set(err, -ENOMEM, "out of memory for a spilled walk of strings");
    if (rc == 0 && (w->fd = spill_file(err)) < 0)
        rc = err->code;
    uint64_t n = zm_source_n_obs(source), file_end = 0, cursor = zm_view_kept_seek(&kept, 0);
    for (uint64_t p0 = 0; rc == 0 && p0 < n; p0 += batch) {
        uint64_t p1 = n - p0 < batch ? n : p0 + batch, p, v;
        size_t count = 0;
        while (zm_view_kept_next(&kept, &cursor, p1, &p, &v)) {
            rows[count] = p;
            view_rows[count++] = v;
        }
        if (count == 0)
            continue;
        zm_strings got;
        rc = zm_array_read_strings(source, node->source, rows, count, &got, err);
        for (size_t i = 0; rc == 0 && i < count; i++) {
            uint64_t v = view_rows[i], c = v / chunk_rows;
            for (uint64_t j = 0; rc == 0 && j < per_row; j++) {
                uint64_t g = i * per_row + j;
                uint64_t length = got.offsets[g + 1] - got.offsets[g];
                uint32_t head[2] = {(uint32_t)((v - c * chunk_rows) * per_row + j), (uint32_t)length};
                if (length > UINT32_MAX) {
                    rc = zm_err_set(err, -EFBIG, "a string of %" PRIu64 " bytes", length);
                    break;
                }
                if (buffer[c] == NULL && (buffer[c] = malloc(STRING_BLOCK)) == NULL) {
                    rc = zm_err_set(err, -ENOMEM, "out of memory for a spilled walk of strings");
                    break;
                }
                /* The record, across as many blocks as it takes. */
                const uint8_t *parts[2] = {(const uint8_t *)head, (const uint8_t *)got.bytes + got.offsets[g]};
                uint64_t sizes[2] = {sizeof head, length};
                for (int k = 0; rc == 0 && k < 2; k++) {
                    uint64_t done = 0;
                    while (rc == 0 && done < sizes[k]) {
                        size_t room = STRING_BLOCK - w->block_fill[c];
                        size_t take = sizes[k] - done < room ? (size_t)(sizes[k] - done) : room;
                        memcpy(buffer[c] + w->block_fill[c], parts[k] + done, take);
                        w->block_fill[c] += (uint32_t)take;
                        done += take;
                        if (w->block_fill[c] == STRING_BLOCK) {
                            rc = put_block(w, c, buffer[c], STRING_BLOCK, &file_end, err);
                            w->block_fill[c] = 0;
                        }
                    }
                }
            }
        }
        zm_strings_free(&got);
    }
    /* Each chunk's last, partly filled block. */
    for (uint64_t c = 0; rc == 0 && c < chunks; c++)
        if (w->block_fill[c] > 0)
            rc = put_block(w, c, buffer[c], w->block_fill[c], &file_end, err);
    for (uint64_t c = 0; buffer && c < chunks; c++)
        free(buffer[c]);
    free(buffer);
    free(rows);
    free(view_rows);
    return end_pass(w, rc, 1, file_end);
}

/* The strings of chunk c of a spilled walk, items in view order: offsets
 * (items + 1) and bytes, malloc'd. Items no record names stay empty. */
static int cut_spilled_strings(const struct zm_walk *w, uint64_t c, uint64_t items,
                               uint64_t **offsets_out, char **bytes_out, zm_err *err)
{
    uint32_t blocks = w->block_count[c];
    size_t stream_size = blocks == 0 ? 0 : (size_t)(blocks - 1) * STRING_BLOCK +
                                                (w->block_fill[c] ? w->block_fill[c] : STRING_BLOCK);
    uint8_t *stream = malloc(stream_size + 1);
    uint64_t *start = calloc(items + 1, sizeof *start), *length = calloc(items + 1, sizeof *length);
    int rc = stream && start && length ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t b = 0; rc == 0 && b < blocks; b++) {
        size_t size = b + 1 < blocks ? STRING_BLOCK : stream_size - (size_t)b * STRING_BLOCK;
        rc = read_all(w->fd, stream + (size_t)b * STRING_BLOCK, size, w->block_at[c][b], err);
    }
    uint64_t total = 0;
    for (size_t at = 0; rc == 0 && at < stream_size;) {
        uint32_t head[2];
        if (stream_size - at < sizeof head) {
            rc = zm_err_set(err, -EIO, "internal error: a spilled walk of strings ends in a record");
            break;
        }
        memcpy(head, stream + at, sizeof head);
        at += sizeof head;
        if (head[0] >= items || head[1] > stream_size - at) {
            rc = zm_err_set(err, -EIO, "internal error: a spilled walk of strings names item %u of %"
                            PRIu64, head[0], items);
            break;
        }
        start[head[0]] = at;
        length[head[0]] = head[1];
        total += head[1];
        at += head[1];
    }
    char *bytes = rc == 0 ? malloc(total + 1) : NULL;
    if (rc == 0 && bytes == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        uint64_t at = 0;
        for (uint64_t k = 0; k < items; k++) {
            memcpy(bytes + at, stream + start[k], length[k]);
            start[k] = at; /* now the offset in bytes */
            at += length[k];
        }
        start[items] = at;
        *offsets_out = start;
        *bytes_out = bytes;
        start = NULL;
    }
    free(stream);
    free(start);
    free(length);
    return rc;
}

/* Strings of rows [from, to) (view order when per_cell), as vlen-utf8 of
 * `padded` rows (the rest empty). */
/* A chunk's strings encoded vlen-utf8; a refusal (a string that is not
 * UTF-8, ...) is EIO naming the source object it came from. */
static int encode_strings(const zm_store_node *node, size_t count, const uint64_t *offsets,
                          const char *bytes, uint8_t **raw, size_t *raw_size, zm_err *err)
{
    zm_err why;
    zm_err_clear(&why);
    int rc = zm_vlen_utf8_encode(count, offsets, bytes, raw, raw_size, &why);
    if (rc == -EINVAL)
        rc = -EIO; /* the source's bytes, not the caller's request */
    if (rc != 0)
        zm_err_set(err, rc, "%s: %s",
                   node->source ? zm_array_describe(node->source)->file_path : node->name, why.reason);
    return rc;
}

/* A chunk of a per-cell string array from its walk in memory (every source
 * value, by source row): view rows [from, to) in order, then empty items up
 * to `items`. */
static int walked_strings(zm_view *view, const zm_store_node *node, const zm_strings *all,
                          uint64_t from, uint64_t to, uint64_t items, uint64_t per_row,
                          uint8_t **raw, size_t *raw_size, zm_err *err)
{
    const uint32_t *order = zm_view_order(view);
    uint64_t total = 0;
    for (uint64_t v = from; v < to; v++)
        total += all->offsets[((uint64_t)order[v] + 1) * per_row] - all->offsets[(uint64_t)order[v] * per_row];
    uint64_t *offsets = malloc((items + 1) * sizeof *offsets);
    char *bytes = malloc(total + 1);
    if (offsets == NULL || bytes == NULL) {
        free(offsets);
        free(bytes);
        return zm_err_set(err, -ENOMEM, "out of memory for a chunk of %" PRIu64 " strings", items);
    }
    uint64_t at = 0, k = 0;
    for (uint64_t v = from; v < to; v++) {
        uint64_t first = (uint64_t)order[v] * per_row;
        uint64_t start = all->offsets[first], end = all->offsets[first + per_row];
        memcpy(bytes + at, all->bytes + start, end - start);
        for (uint64_t j = 0; j < per_row; j++)
            offsets[k++] = at + (all->offsets[first + j] - start);
        at += end - start;
    }
    while (k <= items)
        offsets[k++] = at;
    int rc = encode_strings(node, items, offsets, bytes, raw, raw_size, err);
    free(offsets);
    free(bytes);
    return rc;
}

static int strings_chunk(zm_view *view, const zm_store_node *node, uint64_t from, uint64_t to,
                         uint64_t padded, int per_cell, uint8_t **raw, size_t *raw_size, zm_err *err)
{
    uint64_t count = to - from;
    uint64_t per_row = 1;
    for (unsigned d = 1; d < node->meta.rank; d++)
        per_row *= node->meta.shape[d];
    if (count > 0 && per_cell && node->grid[0] > 1) {
        struct zm_walk *w = NULL;
        int rc = walk_of(view, node, &w, err);
        if (rc != 0)
            return rc;
        if (w->fd >= 0) { /* spilled: the chunk's records, already in view order */
            uint64_t *offsets = NULL;
            char *bytes = NULL;
            rc = cut_spilled_strings(w, from / node->meta.chunks[0], padded * per_row, &offsets,
                                     &bytes, err);
            if (rc == 0)
                rc = encode_strings(node, padded * per_row, offsets, bytes, raw, raw_size, err);
            free(offsets);
            free(bytes);
        } else {
            /* Every value of the array in memory, by source row: the
             * chunk's items taken in view order, one copy, no sort. */
            rc = walked_strings(view, node, &w->strings, from, to, padded * per_row, per_row, raw,
                                raw_size, err);
        }
        walk_put(w);
        return rc;
    }
    pair *pairs = per_cell ? sorted_rows(view, from, to) : NULL;
    uint64_t *rows = malloc((count ? count : 1) * sizeof *rows);
    int rc = rows && (!per_cell || pairs) ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    for (uint64_t i = 0; rc == 0 && i < count; i++)
        rows[i] = per_cell ? pairs[i].source : from + i;
    zm_strings got = {0};
    if (rc == 0 && count > 0)
        rc = zm_array_read_strings(zm_view_source(view), node->source, rows, count, &got, err);
    /* Put items in view order, then pad with empty strings. */
    uint64_t items = padded * per_row;
    uint64_t *offsets = malloc((items + 1) * sizeof *offsets);
    uint64_t *slot_item = malloc((count * per_row + 1) * sizeof *slot_item);
    char *bytes = malloc((count ? got.offsets[got.count] : 0) + 1);
    if (rc == 0 && (!offsets || !slot_item || !bytes))
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        /* Item j of gathered row i goes to slot (pairs[i].slot or i). */
        uint64_t *from_item = calloc(items + 1, sizeof *from_item);
        uint8_t *present = calloc(items + 1, 1);
        if (from_item == NULL || present == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        for (uint64_t i = 0; rc == 0 && i < count; i++) {
            uint64_t slot = per_cell ? pairs[i].slot : i;
            for (uint64_t j = 0; j < per_row; j++) {
                from_item[slot * per_row + j] = i * per_row + j;
                present[slot * per_row + j] = 1;
            }
        }
        uint64_t at = 0;
        for (uint64_t k = 0; rc == 0 && k < items; k++) {
            offsets[k] = at;
            if (present[k]) {
                uint64_t g = from_item[k];
                uint64_t n = got.offsets[g + 1] - got.offsets[g];
                memcpy(bytes + at, got.bytes + got.offsets[g], n);
                at += n;
            }
        }
        offsets[items] = at;
        free(from_item);
        free(present);
        if (rc == 0)
            rc = encode_strings(node, items, offsets, bytes, raw, raw_size, err);
    }
    zm_strings_free(&got);
    free(offsets);
    free(slot_item);
    free(bytes);
    free(rows);
    free(pairs);
    return rc;
}

/* Sparse pointers and indices keep the source's integer type, whatever its
 * width (values of the view fit it: they are at most the source's). */
static void put_index(uint8_t *out, size_t size, int64_t value)
{
    switch (size) {
    case 1: {
        uint8_t v = (uint8_t)value;
        memcpy(out, &v, 1);
        break;
    }
    case 2: {
        uint16_t v = (uint16_t)value;
        memcpy(out, &v, 2);
        break;
    }
    case 4: {
        uint32_t v = (uint32_t)value;
        memcpy(out, &v, 4);
        break;
    }
    default:
        memcpy(out, &value, 8);
    }
}

typedef struct entry {
    int64_t index;   /* the view's minor index */
    uint64_t order;  /* position in the source row: keeps sorting stable */
} entry;

static int by_index(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->index != y->index)
        return (x->index > y->index) - (x->index < y->index);
    return (x->order > y->order) - (x->order < y->order);
}

/* Entries [e0, e1) of a sparse matrix in the view: its data or indices. */
static int entries_chunk(zm_view *view, const zm_store_node *node, uint64_t e0, uint64_t e1,
                         uint8_t *out, zm_err *err)
{
    zm_view_sparse_info s;
    int rc = zm_view_sparse_get(view, node->sparse, &s, err);
    if (rc != 0 || e1 <= e0)
        return rc;
    const zm_element *e = s.element;
    zm_source *source = zm_view_source(view);
    const uint32_t *order = zm_view_order(view);
    size_t size = node->value_size;
    /* The view majors overlapping [e0, e1). */
    uint64_t lo = 0, hi = s.rows;
    while (lo < hi) { /* first major whose end is past e0 */
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)s.indptr[mid + 1] <= e0)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t first = lo, last = first;
    while (last < s.rows && (uint64_t)s.indptr[last] < e1)
        last++;
    uint64_t majors = last - first;
    if (majors == 0)
        return 0;

    if (!s.per_cell_columns) {
        /* Entries map one to one: each major's source range, clipped. */
        /* The view's majors by source position (sorted_rows: the inverse
         * map for a whole walk, a sort otherwise), each read straight into
         * its place. */
        pair *pairs = s.per_cell_rows ? sorted_rows(view, first, last) : malloc(majors * sizeof *pairs);
        zm_range *ranges = malloc(majors * sizeof *ranges);
        uint64_t *dest = malloc(majors * sizeof *dest);
        if (!pairs || !ranges || !dest) {
            free(pairs);
            free(ranges);
            free(dest);
            return zm_err_set(err, -ENOMEM, "out of memory");
        }
        if (!s.per_cell_rows)
            for (uint64_t i = 0; i < majors; i++)
                pairs[i] = (pair){first + i, i};
        for (uint64_t i = 0; i < majors; i++) {
            uint64_t v = first + pairs[i].slot; /* the view major */
            uint64_t source_start, source_end;
            zm_view_source_range(&s, v, &source_start, &source_end);
            uint64_t vstart = (uint64_t)s.indptr[v], vend = (uint64_t)s.indptr[v + 1];
            uint64_t a = vstart > e0 ? vstart : e0, b2 = vend < e1 ? vend : e1;
            uint64_t sstart = source_start + (a - vstart);
            ranges[i] = (zm_range){sstart, sstart + (b2 - a)};
            dest[i] = a - e0;
        }
        /* All of the view's entries at once: a walk. */
        unsigned flags = e0 == 0 && e1 == (uint64_t)s.indptr[s.rows] ? ZM_READ_PASS : 0;
        rc = zm_array_scatter_ranges(source, node->source, ranges, dest, majors, out, flags, err);
        free(pairs);
        free(ranges);
        free(dest);
        return rc;
    }

    /* Cells along the minor axis too (obsp; CSC of per-cell matrices): each
     * major's entries filtered to kept cells, renumbered, ascending. */
    const uint32_t *inverse = zm_view_inverse(view, err);
    if (inverse == NULL)
        return -ENOMEM;
    const zm_array_info *index_info = zm_array_describe(e->indices);
    size_t index_size = index_info->dtype.size;
    size_t value_size = zm_array_describe(e->values)->dtype.size;
    pair *pairs = malloc(majors * sizeof *pairs);
    zm_range *ranges = malloc(majors * sizeof *ranges);
    if (!pairs || !ranges) {
        free(pairs);
        free(ranges);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < majors; i++) {
        uint64_t m = s.per_cell_rows ? order[first + i] : first + i;
        pairs[i] = (pair){m, first + i};
    }
    if (s.per_cell_rows)
        qsort(pairs, majors, sizeof *pairs, by_source);
    uint64_t total = 0;
    for (uint64_t i = 0; i < majors; i++) {
        zm_view_source_range(&s, pairs[i].slot, &ranges[i].start, &ranges[i].end);
        total += ranges[i].end - ranges[i].start;
    }
    uint8_t *indices = malloc(total * index_size + 1);
    uint8_t *values = node->part == ZM_PART_DATA ? malloc(total * value_size + 1) : NULL;
    entry *row = malloc((total ? total : 1) * sizeof *row);
    if (!indices || !row || (node->part == ZM_PART_DATA && !values))
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = zm_array_gather_ranges(source, e->indices, ranges, majors, indices, err);
    if (rc == 0 && values)
        rc = zm_array_gather_ranges(source, e->values, ranges, majors, values, err);
    uint64_t at = 0;
    for (uint64_t i = 0; rc == 0 && i < majors; i++) {
        uint64_t n = ranges[i].end - ranges[i].start, kept = 0;
        for (uint64_t j = 0; j < n; j++) {
            uint32_t v = inverse[zm_dtype_integer(index_info->dtype, indices, at + j)];
            if (v != ZM_VIEW_NOT_KEPT)
                row[kept++] = (entry){v, at + j};
        }
        qsort(row, kept, sizeof *row, by_index);
        uint64_t vstart = (uint64_t)s.indptr[pairs[i].slot];
        for (uint64_t j = 0; j < kept; j++) {
            uint64_t position = vstart + j;
            if (position < e0 || position >= e1)
                continue;
            uint8_t *dst = out + (position - e0) * size;
            if (node->part == ZM_PART_INDICES)
                put_index(dst, size, row[j].index);
            else
                memcpy(dst, values + row[j].order * value_size, value_size);
        }
        at += n;
    }
    free(indices);
    free(values);
    free(row);
    free(pairs);
    free(ranges);
    return rc;
}

/* Records [from, to) of a rec-array, packed: each field's values, strings as
 * UTF-32LE padded with zeros to the field's width. */
static int records_chunk(zm_view *view, const zm_store_node *node, uint64_t from, uint64_t to,
                         uint8_t *out, zm_err *err)
{
    const zm_element *e = node->element;
    zm_source *source = zm_view_source(view);
    size_t offset = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < e->child_count; i++) {
        const zm_array *a = e->children[i]->values;
        size_t width = node->field_sizes[i];
        if (zm_array_describe(a)->dtype.type_class == ZM_TYPE_STRING) {
            uint64_t *rows = malloc((to - from + 1) * sizeof *rows);
            zm_strings s = {0};
            rc = rows ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
            for (uint64_t r = from; rc == 0 && r < to; r++)
                rows[r - from] = r;
            if (rc == 0 && to > from)
                rc = zm_array_read_strings(source, a, rows, to - from, &s, err);
            for (uint64_t r = 0; rc == 0 && r < to - from; r++) {
                uint8_t *utf32 = NULL;
                size_t size = 0, points = 0;
                rc = zm_utf32_encode(s.bytes + s.offsets[r], s.offsets[r + 1] - s.offsets[r], &utf32,
                                     &size, &points, err);
                /* An empty string encodes as one NUL code point; it pads. */
                if (rc == 0)
                    memcpy(out + r * node->value_size + offset, utf32,
                           points == 0 ? 0 : (size < width ? size : width));
                free(utf32);
            }
            zm_strings_free(&s);
            free(rows);
        } else if (to > from) {
            uint8_t *values = malloc((to - from) * width);
            rc = values ? zm_array_read_rows(source, a, from, to - from, values, err)
                        : zm_err_set(err, -ENOMEM, "out of memory");
            for (uint64_t r = 0; rc == 0 && r < to - from; r++)
                memcpy(out + r * node->value_size + offset, values + r * width, width);
            free(values);
        }
        offset += width;
    }
    return rc;
}

static int span_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w,
                     const zm_view_kept *kept, uint8_t *out, uint64_t v0, uint64_t v1);

/* Bytes of one index along dimension 0 of an array node. */
static uint64_t row_bytes_of(const zm_store_node *node)
{
    uint64_t bytes = node->value_size;
    for (unsigned d = 1; d < node->meta.rank; d++)
        bytes *= node->meta.shape[d];
    return bytes;
}

/* Values of rows [from, to) of an array node (numbers, not strings) into
 * out, rows after rows. */
static int fill_chunk(zm_view *view, const zm_store_node *node, uint64_t from, uint64_t to,
                      uint8_t *out, zm_err *err)
{
    zm_source *source = zm_view_source(view);
    int rc = 0;
    switch (node->producer) {
    case ZM_PRODUCE_CELL_ROWS:
        if (node->cell_columns) {
            /* Whole source rows first, then the kept columns in view order. */
            uint64_t width = zm_array_describe(node->source)->shape[1];
            uint8_t *rows = malloc((to - from) * width * node->value_size + 1);
            rc = rows ? cell_rows(view, node->source, from, to, rows, err)
                      : zm_err_set(err, -ENOMEM, "out of memory");
            const uint32_t *order = zm_view_order(view);
            uint64_t columns = node->meta.shape[1];
            for (uint64_t r = 0; rc == 0 && r < to - from; r++)
                for (uint64_t j = 0; j < columns; j++)
                    memcpy(out + (r * columns + j) * node->value_size,
                           rows + (r * width + order[j]) * node->value_size, node->value_size);
            free(rows);
        } else if (from == 0 && to == node->meta.shape[0] && to > 4096 &&
                   !zm_view_is_identity(view)) {
            /* The whole of a reordered column in one chunk (the codes of a
             * million cells): read in spans, each kept row copied to its
             * place, as a walk does; a range a row took ten times as long. */
            struct zm_walk whole = {.row_bytes = row_bytes_of(node)};
            zm_err_clear(&whole.err);
            zm_view_kept kept;
            rc = zm_view_kept_get(view, &kept, err);
            if (rc == 0 && (rc = span_walk(view, node, &whole, &kept, out, 0, to)) != 0)
                *err = whole.err;
        } else {
            rc = cell_rows(view, node->source, from, to, out, err);
        }
        break;
    case ZM_PRODUCE_ROWS:
    case ZM_PRODUCE_SCALAR:
        if (to > from)
            rc = zm_array_read_rows(source, node->source, from, to - from, out, err);
        break;
    case ZM_PRODUCE_CONSTANT:
        memcpy(out, &node->constant, 8);
        break;
    case ZM_PRODUCE_POSITIONS: {
        const uint32_t *order = zm_view_order(view);
        memcpy(out, order + from, (to - from) * 4);
        break;
    }
    case ZM_PRODUCE_INDPTR: {
        zm_view_sparse_info s;
        rc = zm_view_sparse_get(view, node->sparse, &s, err);
        for (uint64_t i = from; rc == 0 && i < to; i++)
            put_index(out + (i - from) * node->value_size, node->value_size, s.indptr[i]);
        break;
    }
    case ZM_PRODUCE_ENTRIES:
        rc = entries_chunk(view, node, from, to, out, err);
        break;
    case ZM_PRODUCE_RECORDS:
        rc = records_chunk(view, node, from, to, out, err);
        break;
    default:
        rc = zm_err_set(err, -EINVAL, "internal error: unknown producer");
    }
    return rc;
}

/* Whether chunks of this array are cut from a one-pass gather of all of
 * it: per-cell values in a reordered view, in more than one chunk (each
 * chunk alone would touch nearly every source chunk). */
int zm_synth_walk_started(const zm_store_node *node)
{
    return __atomic_load_n(&node->walk, __ATOMIC_ACQUIRE) != NULL;
}

int zm_synth_walks(const zm_view *view, const zm_store_node *node)
{
    if (node->meta.rank == 0 || node->grid[0] < 2)
        return 0;
    if (node->producer == ZM_PRODUCE_CELL_ROWS)
        return !zm_view_is_identity(view);
    if (node->producer == ZM_PRODUCE_ENTRIES) {
        zm_view_sparse_info s;
        zm_err err;
        zm_view_sparse_get((zm_view *)view, node->sparse, &s, &err);
        return s.per_cell_rows || s.per_cell_columns;
    }
    return 0;
}


/* Whether a walk of this array can be spilled: values of a cell are one
 * run of bytes in the array (per-cell rows, or a matrix's entries when only
 * its rows are cells). */
static int can_spill(zm_view *view, const zm_store_node *node)
{
    if (node->producer == ZM_PRODUCE_CELL_ROWS)
        return !node->cell_columns;
    if (node->producer != ZM_PRODUCE_ENTRIES)
        return 0;
    zm_view_sparse_info s;
    zm_err err;
    return zm_view_sparse_get(view, node->sparse, &s, &err) == 0 && s.per_cell_rows &&
           !s.per_cell_columns;
}

/* Where the values of view row v lie in the array, in bytes. */
static void row_extent(const struct zm_walk *w, const zm_view_sparse_info *s, size_t value_size,
                       uint64_t v, uint64_t *start, uint64_t *end)
{
    if (s != NULL) {
        *start = (uint64_t)s->indptr[v] * value_size;
        *end = (uint64_t)s->indptr[v + 1] * value_size;
    } else {
        *start = v * w->row_bytes;
        *end = *start + w->row_bytes;
    }
}

/* Source rows a span read takes at most, in bytes. */
#define SPAN_BYTES ((uint64_t)8 << 20)
#define SPAN_ROWS ((uint64_t)1 << 20)

/* The pass of an in-memory walk of fixed-size rows in spans of source rows
 * (whole chunks when chunked): a span that is mostly kept is read as one
 * range (its chunks decoded straight into a buffer, a contiguous array read
 * in large pieces) and each kept row copied to its place; a sparse one
 * reads its kept rows only. Listing each row as a range of its own cost
 * about ten times the copy for narrow rows (codes, a float column). */
static int span_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w,
                     const zm_view_kept *kept, uint8_t *out, uint64_t v0, uint64_t v1)
{
    zm_err *err = &w->err;
    zm_source *source = zm_view_source(view);
    const zm_array_info *info = zm_array_describe(node->source);
    uint64_t n = zm_source_n_obs(source), rb = w->row_bytes;
    /* As large as a batch of a spilled walk at most: what a walk holds
     * besides its values follows cache_size. */
    uint64_t bytes = SPAN_BYTES < batch_bytes() ? SPAN_BYTES : batch_bytes();
    uint64_t span = bytes / rb ? bytes / rb : 1;
    span = span < SPAN_ROWS ? span : SPAN_ROWS;
    span = span < batch_rows() ? span : batch_rows();
    if (info->layout == ZM_LAYOUT_CHUNKED && !info->transposed && info->chunk_shape[0] > 0) {
        uint64_t c = info->chunk_shape[0];
        span = span < c ? c : span / c * c;
    }
    uint8_t *buffer = malloc(span * rb);
    uint64_t *rows = malloc(span / 4 * sizeof *rows + 8), *dest = malloc(span / 4 * sizeof *dest + 8);
    int rc = buffer && rows && dest ? 0 : zm_err_set(err, -ENOMEM, "out of memory for a walk");
    uint64_t cursor = zm_view_kept_seek(kept, 0);
    for (uint64_t p0 = 0; rc == 0 && p0 < n; p0 += span) {
        uint64_t p1 = n - p0 < span ? n : p0 + span, count = 0, first = p1, last = p0;
        uint64_t at = cursor, p, v; /* the span's first kept cell */
        while (zm_view_kept_next(kept, &cursor, p1, &p, &v))
            if (v >= v0 && v < v1) {
                count++;
                first = first < p ? first : p;
                last = p;
            }
        if (count == 0)
            continue;
        if (count * 4 < last + 1 - first) { /* few kept: those rows only */
            for (uint64_t c = at, i = 0; zm_view_kept_next(kept, &c, p1, &p, &v);)
                if (v >= v0 && v < v1) {
                    rows[i] = p;
                    dest[i++] = v - v0;
                }
            rc = zm_array_scatter_rows(source, node->source, rows, dest, count, out, ZM_READ_PASS,
                                       err);
            continue;
        }
        /* From the first row kept to the last: no more than a fraction. */
        rc = zm_array_read_rows_flags(source, node->source, first, last + 1 - first, buffer,
                                      ZM_READ_PASS, err);
        for (uint64_t c = at; rc == 0 && zm_view_kept_next(kept, &c, p1, &p, &v);)
            if (v >= v0 && v < v1)
                copy_run(out + (v - v0) * rb, buffer + (p - first) * rb, rb);
    }
    free(buffer);
    free(rows);
    free(dest);
    return rc;
}

/* A spilled walk of fixed-size rows at most this many batches large is made
 * in bands of whole chunks, a batch at most each, a pass over the source a
 * band: a band is written once in view order (read back as it lies, no
 * sort), and a few passes over a column cost less than sorting its rows by
 * chunk twice. */
#define BANDS_MAX 4

static int banded_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w,
                       const zm_view_kept *kept)
{
    zm_err *err = &w->err;
    uint64_t rows = node->meta.shape[0], chunk_rows = node->meta.chunks[0];
    uint64_t band = batch_bytes() / (chunk_rows * w->row_bytes) * chunk_rows;
    band = band < chunk_rows ? chunk_rows : band;
    if ((w->fd = spill_file(err)) < 0)
        return err->code;
    w->in_order = 1;
    uint8_t *out = malloc(band * w->row_bytes);
    int rc = out ? 0 : zm_err_set(err, -ENOMEM, "out of memory for a walk");
    for (uint64_t v0 = 0; rc == 0 && v0 < rows; v0 += band) {
        uint64_t v1 = rows - v0 < band ? rows : v0 + band;
        rc = span_walk(view, node, w, kept, out, v0, v1);
        if (rc == 0)
            rc = write_all(w->fd, out, (v1 - v0) * w->row_bytes, v0 * w->row_bytes, err);
    }
    free(out);
    return end_pass(w, rc, 1, w->size);
}

/* The pass of a walk in batches of source rows in file order: into its
 * place in memory (w->bytes), or spilled (see struct zm_walk). Either way
 * the row lists are a batch's, not the array's. */
static int batch_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    int spill = w->bytes == NULL;
    zm_err *err = &w->err;
    zm_source *source = zm_view_source(view);
    zm_view_sparse_info sparse, *s = NULL;
    if (node->producer == ZM_PRODUCE_ENTRIES) {
        int rc = zm_view_sparse_get(view, node->sparse, &sparse, err);
        if (rc != 0)
            return rc;
        s = &sparse;
    }
    zm_view_kept kept;
    if (zm_view_kept_get(view, &kept, err) != 0)
        return err->code;
    if (!spill && s == NULL)
        return span_walk(view, node, w, &kept, w->bytes, 0, node->meta.shape[0]);
    if (spill && s == NULL && w->size <= BANDS_MAX * batch_bytes())
        return banded_walk(view, node, w, &kept);
    size_t value_size = node->value_size;
    uint64_t region = node->meta.chunks[0] * w->row_bytes, regions = node->grid[0];
    if (spill && (w->fd = spill_file(err)) < 0)
        return err->code;
    /* Taken once: a batch's rows and (spilled) bytes. */
    size_t batch = (size_t)batch_rows(), capacity = spill ? (size_t)batch_bytes() : SIZE_MAX;
    uint64_t *rows = malloc(batch * sizeof *rows);
    uint64_t *dest = malloc(batch * sizeof *dest);
    zm_range *ranges = s ? malloc(batch * sizeof *ranges) : NULL;
    /* Spilled: where each row of the batch lies in the array, its length
     * and the chunk it starts in (looked up once, in file order). */
    uint64_t *where = spill ? malloc(batch * sizeof *where) : NULL;
    uint64_t *lengths = spill ? malloc(batch * sizeof *lengths) : NULL;
    uint32_t *chunk_of = spill ? malloc(batch * sizeof *chunk_of) : NULL;
    double per_region = 1.0 / (double)region;
    uint64_t *filled = spill ? calloc(regions, sizeof *filled) : NULL;
    uint64_t *counts = spill ? malloc(regions * sizeof *counts) : NULL;
    uint64_t *at = spill ? malloc(regions * sizeof *at) : NULL;
    uint8_t *staging = spill ? malloc(capacity) : NULL, *sorted = spill ? malloc(capacity) : NULL;
    int rc = rows && dest && (ranges || !s) &&
                     (!spill || (filled && counts && at && staging && sorted && where && lengths && chunk_of))
                 ? 0
                 : zm_err_set(err, -ENOMEM, "out of memory for a walk");
    uint64_t n = zm_source_n_obs(source), cursor = zm_view_kept_seek(&kept, 0);
    for (int more = 1; rc == 0 && more;) {
        /* The next batch: kept source rows in file order. */
        size_t count = 0;
        uint64_t bytes = 0, p, v;
        while (count < batch) {
            /* The view's pointers are read in random order: ask ahead. */
            uint64_t ahead = zm_view_kept_ahead(&kept, cursor, 16);
            if (s && ahead != ZM_VIEW_NOT_KEPT) {
                __builtin_prefetch(&s->indptr[ahead]);
                if (s->source_start)
                    __builtin_prefetch(&s->source_start[ahead]);
            }
            uint64_t here = cursor;
            if (!(more = zm_view_kept_next(&kept, &cursor, n, &p, &v)))
                break;
            /* The row's source entries: by source row, or (a subsample's
             * pointers) by view row, as long as its view row. */
            uint64_t from = 0, to = 0;
            if (s && s->source_start) {
                from = (uint64_t)s->source_start[v];
                to = from + (uint64_t)(s->indptr[v + 1] - s->indptr[v]);
            } else if (s) {
                from = (uint64_t)s->source_indptr[p];
                to = (uint64_t)s->source_indptr[p + 1];
            }
            uint64_t length = s ? (to - from) * value_size : w->row_bytes;
            if (count > 0 && bytes + length > capacity) {
                cursor = here; /* the next batch's first */
                break;
            }
            rows[count] = p;
            if (spill) {
                dest[count] = s ? bytes / value_size : count;
                uint64_t a = s ? (uint64_t)s->indptr[v] * value_size : v * w->row_bytes;
                uint64_t c = (uint64_t)((double)a * per_region);
                while (c > 0 && c * region > a)
                    c--;
                while ((c + 1) * region <= a)
                    c++;
                where[count] = a;
                lengths[count] = length;
                chunk_of[count] = (uint32_t)c;
            } else
                dest[count] = s ? (uint64_t)s->indptr[v] : v;
            if (s)
                ranges[count] = (zm_range){from, to};
            count++;
            bytes += length;
        }
        if (count == 0)
            break;
        if (!spill) { /* each row straight into its place */
            rc = s ? zm_array_scatter_ranges(source, node->source, ranges, dest, count, w->bytes,
                                             ZM_READ_PASS, err)
                   : zm_array_scatter_rows(source, node->source, rows, dest, count, w->bytes,
                                           ZM_READ_PASS, err);
            continue;
        }
        if (bytes > capacity) { /* one row larger than a batch */
            uint8_t *a = realloc(staging, bytes), *b = a ? realloc(sorted, bytes) : NULL;
            staging = a ? a : staging;
            sorted = b ? b : sorted;
            if (!a || !b) {
                rc = zm_err_set(err, -ENOMEM, "out of memory for a %" PRIu64 "-byte row", bytes);
                break;
            }
            capacity = bytes;
        }
        rc = s ? zm_array_scatter_ranges(source, node->source, ranges, dest, count, staging,
                                         ZM_READ_PASS, err)
               : zm_array_scatter_rows(source, node->source, rows, dest, count, staging,
                                       ZM_READ_PASS, err);
        if (rc != 0)
            break;
        /* Sorted by region, in file order within each (a counting sort),
         * rows across a region's edge split in two. */
        memset(counts, 0, regions * sizeof *counts);
        for (int copy = 0; copy < 2; copy++) {
            uint64_t from = 0;
            for (size_t i = 0; i < count; i++) {
                uint64_t a = where[i], b = a + lengths[i], c = chunk_of[i];
                for (; a < b; c++) { /* once for most rows: they lie in one chunk */
                    uint64_t end = (c + 1) * region < b ? (c + 1) * region : b;
                    if (copy) {
                        copy_run(sorted + at[c], staging + from, end - a);
                        at[c] += end - a;
                    } else {
                        counts[c] += end - a;
                    }
                    from += end - a;
                    a = end;
                }
            }
            if (!copy)
                for (uint64_t c = 0, sum = 0; c < regions; c++) {
                    at[c] = sum;
                    sum += counts[c];
                }
        }
        for (uint64_t c = 0; rc == 0 && c < regions; c++) {
            if (counts[c] == 0)
                continue;
            if (filled[c] + counts[c] > region) {
                rc = zm_err_set(err, -EIO, "internal error: chunk %" PRIu64 " of a spilled walk overflows",
                                c);
                break;
            }
            rc = write_all(w->fd, sorted + at[c] - counts[c], counts[c], c * region + filled[c], err);
            filled[c] += counts[c];
        }
    }
    /* Every region holds its chunk's bytes. */
    for (uint64_t c = 0; rc == 0 && spill && c < regions; c++) {
        uint64_t expect = w->size - c * region < region ? w->size - c * region : region;
        if (filled[c] != expect)
            rc = zm_err_set(err, -EIO, "internal error: chunk %" PRIu64 " of a spilled walk holds %"
                            PRIu64 " bytes, not %" PRIu64, c, filled[c], expect);
    }
    free(rows);
    free(dest);
    free(ranges);
    free(where);
    free(lengths);
    free(chunk_of);
    free(filled);
    free(counts);
    free(at);
    free(staging);
    free(sorted);
    return end_pass(w, rc, spill, w->size);
}

/* Rows [from, to) (along dimension 0) of a spilled walk into out: the
 * chunk's region read back, each view row put in place in source order. */
static int cut_spilled(zm_view *view, const zm_store_node *node, struct zm_walk *w, uint64_t from,
                       uint64_t to, uint8_t *out, zm_err *err)
{
    zm_view_sparse_info sparse, *s = NULL;
    if (node->producer == ZM_PRODUCE_ENTRIES) {
        int rc = zm_view_sparse_get(view, node->sparse, &sparse, err);
        if (rc != 0)
            return rc;
        s = &sparse;
    }
    uint64_t a0 = from * w->row_bytes, a1 = to * w->row_bytes, length = a1 - a0;
    if (length == 0)
        return 0;
    /* The view rows with values in [from, to). */
    uint64_t first = from, last = to;
    if (s != NULL) {
        uint64_t lo = 0, hi = s->rows;
        while (lo < hi) { /* the first row ending past from */
            uint64_t mid = lo + (hi - lo) / 2;
            if ((uint64_t)s->indptr[mid + 1] <= from)
                lo = mid + 1;
            else
                hi = mid;
        }
        first = last = lo;
        while (last < s->rows && (uint64_t)s->indptr[last] < to)
            last++;
    }
    uint8_t *region = malloc(length);
    pair *pairs = last > first ? sorted_rows(view, first, last) : NULL;
    int rc = region && (pairs || last == first) ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = read_all(w->fd, region, length, a0, err);
    uint64_t taken = 0;
    for (uint64_t i = 0; rc == 0 && i < last - first; i++) {
        uint64_t a, b;
        row_extent(w, s, node->value_size, first + pairs[i].slot, &a, &b);
        a = a < a0 ? a0 : a;
        b = b > a1 ? a1 : b;
        if (b <= a)
            continue;
        copy_run(out + (a - a0), region + taken, b - a);
        taken += b - a;
    }
    if (rc == 0 && taken != length)
        rc = zm_err_set(err, -EIO, "internal error: a spilled chunk of %" PRIu64
                        " bytes gave back %" PRIu64, length, taken);
    free(region);
    free(pairs);
    return rc;
}

/* Whether a walk is of a sparse matrix whose columns are cells too (obsp,
 * or a CSC matrix of cells): its majors' entries are filtered and
 * renumbered, so each major's run of the view is made from its source run
 * as a whole (entries_chunk). */
static int renumbered(zm_view *view, const zm_store_node *node)
{
    if (node->producer != ZM_PRODUCE_ENTRIES)
        return 0;
    zm_view_sparse_info s;
    zm_err err;
    return zm_view_sparse_get(view, node->sparse, &s, &err) == 0 && s.per_cell_columns;
}

/* The walk of a renumbered matrix in batches of the view's majors: each
 * batch's entries are one run of the array (the view keeps a major's
 * entries together, majors in order), made by entries_chunk into their
 * place in memory (w->bytes) or written there in a spill file. The batches
 * bound what a walk holds at once. A CSC matrix of cells (genes as majors,
 * in source order) is one pass over the source; obsp (cells as majors, in
 * view order) reads its source chunks again for each batch. */
static int in_order_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    zm_err *err = &w->err;
    zm_view_sparse_info s;
    int rc = zm_view_sparse_get(view, node->sparse, &s, err);
    if (rc != 0)
        return rc;
    size_t size = node->value_size;
    int spill = w->bytes == NULL;
    if (spill && (w->fd = spill_file(err)) < 0)
        return err->code;
    w->in_order = spill;
    uint8_t *buffer = NULL;
    size_t capacity = 0;
    uint64_t limit = batch_bytes() / 4; /* source entries a batch takes */
    for (uint64_t m0 = 0; rc == 0 && m0 < s.rows;) {
        uint64_t m1 = m0, entries = 0;
        while (m1 < s.rows && (m1 == m0 || entries < limit)) {
            uint64_t start, end;
            zm_view_source_range(&s, m1, &start, &end);
            entries += end - start;
            m1++;
        }
        uint64_t e0 = (uint64_t)s.indptr[m0], e1 = (uint64_t)s.indptr[m1];
        if (e1 > e0) {
            uint8_t *out = w->bytes ? w->bytes + e0 * size : NULL;
            if (out == NULL) {
                if ((e1 - e0) * size > capacity) {
                    uint8_t *grown = realloc(buffer, (e1 - e0) * size);
                    if (grown == NULL) {
                        rc = zm_err_set(err, -ENOMEM, "out of memory for a walk");
                        break;
                    }
                    buffer = grown;
                    capacity = (e1 - e0) * size;
                }
                out = buffer;
            }
            rc = entries_chunk(view, node, e0, e1, out, err);
            if (rc == 0 && spill)
                rc = write_all(w->fd, out, (e1 - e0) * size, e0 * size, err);
        }
        m0 = m1;
    }
    free(buffer);
    return end_pass(w, rc, spill, w->size);
}

/* Gathers the whole array: strings as they are stored (picked per chunk),
 * numbers in view order, in memory or spilled. */
static int make_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w)
{
    if (node->producer == ZM_PRODUCE_CELL_STRINGS) {
        uint64_t values = node->meta.shape[0];
        for (unsigned d = 1; d < node->meta.rank; d++)
            values *= node->meta.shape[d];
        w->size = (size_t)(values * STRING_WALK_BYTES_PER_VALUE);
        w->claimed = claim_reclaiming(w->size, w);
        if (!w->claimed)
            return spill_strings_walk(view, node, w);
        int rc = zm_array_read_strings(zm_view_source(view), node->source, NULL, 0, &w->strings,
                                       &w->err);
        if (rc != 0) {
            atomic_fetch_sub(&walk_memory_held, w->size);
            w->claimed = 0;
        }
        return rc;
    }
    w->row_bytes = row_bytes_of(node);
    w->size = (size_t)(node->meta.shape[0] * w->row_bytes);
    if (w->size == 0)
        return 0;
    w->claimed = claim_reclaiming(w->size, w);
    int batches = can_spill(view, node), in_order = !batches && renumbered(view, node);
    if (!w->claimed && batches)
        return batch_walk(view, node, w);
    if (!w->claimed && in_order)
        return in_order_walk(view, node, w);
    w->bytes = spill_map(w->size, &w->err);
    int rc = w->bytes == NULL ? w->err.code : 0;
    if (rc == 0)
        rc = batches    ? batch_walk(view, node, w)
             : in_order ? in_order_walk(view, node, w)
                        : fill_chunk(view, node, 0, node->meta.shape[0], w->bytes, &w->err);
    if (rc != 0 && w->bytes) {
        munmap(w->bytes, w->size);
        w->bytes = NULL;
    }
    if (rc != 0 && w->claimed) {
        atomic_fetch_sub(&walk_memory_held, w->size);
        w->claimed = 0;
    }
    return rc;
}

int zm_synth_chunk(zm_view *view, const zm_store_node *node, const uint64_t *coords,
                   uint8_t **raw, size_t *raw_size, size_t *typesize, int *borrowed, zm_err *err)
{
    *raw = NULL;
    *raw_size = 0;
    if (borrowed)
        *borrowed = 0;
    const zm_zarr_array_meta *m = &node->meta;
    *typesize = node->value_size ? node->value_size : 1;
    zm_source *source = zm_view_source(view);

    /* Rows (along dimension 0) this chunk covers; other dimensions are whole. */
    uint64_t chunk_rows = m->rank ? m->chunks[0] : 1;
    uint64_t from = m->rank ? coords[0] * chunk_rows : 0;
    uint64_t to = m->rank ? from + chunk_rows : 1;
    if (m->rank && to > m->shape[0])
        to = m->shape[0];
    uint64_t per_row_values = 1;
    for (unsigned d = 1; d < m->rank; d++)
        per_row_values *= m->chunks[d];

    if (node->producer == ZM_PRODUCE_CELL_STRINGS || node->producer == ZM_PRODUCE_STRINGS)
        return strings_chunk(view, node, from, to, chunk_rows,
                             node->producer == ZM_PRODUCE_CELL_STRINGS, raw, raw_size, err);

    if (node->producer == ZM_PRODUCE_STRING_SCALAR) {
        zm_strings s;
        int rc = zm_array_read_strings(source, node->source, NULL, 0, &s, err);
        if (rc != 0)
            return rc;
        size_t points;
        rc = zm_utf32_encode(s.bytes, s.offsets[s.count > 0 ? 1 : 0], raw, raw_size, &points, err);
        zm_strings_free(&s);
        *typesize = 4;
        return rc;
    }

    size_t bytes = (size_t)(chunk_rows * per_row_values * node->value_size);
    struct zm_walk *w = NULL;
    if (zm_synth_walks(view, node)) {
        int rc = walk_of(view, node, &w, err);
        if (rc != 0)
            return rc;
    }
    if (w != NULL && w->bytes != NULL && borrowed && to - from == chunk_rows && bytes > 0) {
        /* A whole chunk of a walk in memory: its rows lie there as they are. */
        *raw = w->bytes + from * per_row_values * node->value_size;
        *raw_size = bytes;
        *borrowed = 1;
        return 0; /* the walk in use until zm_synth_chunk_done */
    }
    /* Zero is the fill value: a chunk cut from a walk has every row but its
     * padding written, the others are made on zeros. */
    uint64_t row_bytes = per_row_values * node->value_size;
    uint8_t *out = w != NULL ? malloc(bytes ? bytes : 1) : calloc(bytes ? bytes : 1, 1);
    if (out == NULL) {
        if (w != NULL)
            walk_put(w);
        return zm_err_set(err, -ENOMEM, "out of memory for a %zu-byte chunk", bytes);
    }
    if (w != NULL)
        memset(out + (to - from) * row_bytes, 0, bytes - (to - from) * row_bytes);
    int rc = 0;
    if (w != NULL && w->fd >= 0 && w->in_order) {
        rc = read_all(w->fd, out, (to - from) * row_bytes, from * row_bytes, err);
    } else if (w != NULL && w->fd >= 0) {
        rc = cut_spilled(view, node, w, from, to, out, err);
    } else if (w != NULL) {
        if (w->bytes != NULL)
            memcpy(out, w->bytes + from * row_bytes, (to - from) * row_bytes);
        else
            memset(out, 0, bytes);
    } else {
        rc = fill_chunk(view, node, from, to, out, err);
    }
    if (w != NULL)
        walk_put(w);
    if (rc != 0) {
        free(out);
        return rc;
    }
    *raw = out;
    *raw_size = bytes;
    return 0;
}
