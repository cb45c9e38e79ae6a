/* synth's own: the walk of an array and what the files of synth share
 * (synth.c makes chunks, walk.c keeps walks and their memory, passes.c
 * gathers whole arrays into walks). Not for other modules. */
#ifndef ZARRMOUNT_SYNTH_INTERNAL_H
#define ZARRMOUNT_SYNTH_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "zarrmount/synth.h"

/* What a mount gives walks (zm_synth_create): the memory they may hold and
 * hold now, what they did, and the walks whose chunks are all made, oldest
 * first, whose memory is taken back when a new walk needs it. */
struct zm_synth {
    _Atomic uint64_t limit, held;
    _Atomic uint64_t spilled, spilled_bytes, reclaimed, released_bytes;
    pthread_mutex_t mutex; /* the retired list, the expected count */
    struct zm_walk **retired;
    size_t retired_count, retired_capacity;
    /* Walks held that a caller said it will retire (zm_synth_walk_expect),
     * and a retire's signal: a new walk that does not fit waits for them a
     * while rather than spill (claim_reclaiming). */
    size_t expected;
    pthread_cond_t room;
    _Atomic unsigned refs; /* the creator's, and each view's walks' */
    _Atomic int indirect; /* no walk is direct (zm_synth_set_direct) */
};

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
 * order they arrived in). The daemon then holds a batch, not the array.
 *
 * Walks belong to their view: synth keeps a table of them attached to it
 * (zm_view_attach), and frees them when the view is freed. */
struct zm_walk {
    zm_synth *synth; /* whose memory it holds */
    pthread_mutex_t mutex;
    int state;      /* 0 not made, 1 made, −errno failed */
    zm_err err;
    uint8_t *bytes; /* in memory: the array's values, unpadded, C order */
    size_t size;    /* the array's bytes */
    int claimed;    /* bytes counts in the memory held by walks */
    int fd;         /* spilled: the temporary file (−1: not spilled) */
    int in_order;   /* spilled with every value at its place (no regions) */
    uint64_t row_bytes; /* bytes of one index along dimension 0 */
    zm_strings strings; /* a per-cell string array: every source value, read once, */
    uint32_t *string_slot; /* ... or only the view's, in source order: view row v's is
                            * row string_slot[v] of strings (NULL: row order[v]) */
    /* A spilled walk of strings: each chunk's records (item, length,
     * bytes) in blocks of the spill file, the blocks of chunk c at
     * block_at[c][0 .. block_count[c]), its last block block_fill[c] full. */
    uint64_t **block_at;
    uint32_t *block_count;
    uint32_t *block_fill;
    uint64_t chunk_count;
    /* Taking back a walk's memory (see zm_synth_walk_retire): the threads
     * using its values now (under mutex), and whether it is on the list of
     * retired walks (under synth->mutex). */
    int users;
    int listed;
    int expected; /* counted in synth->expected (under synth->mutex) */
    /* Row chunks served from the walk to their last byte (codec none:
     * zm_synth_walk_served), under mutex: once all are, it retires. */
    uint8_t *served;
    uint64_t served_count;
    /* Chunks [0, done_prefix) all served (or made and kept), and the bytes
     * [0, released) of an in-memory walk given back (munmap) once they are:
     * a chunk there is made alone, never read from the walk. released
     * changes only under mutex with no user, so a user reads it freely. */
    uint64_t done_prefix;
    size_t released;
    /* Direct (zm_synth_walk_direct): nothing gathered, no memory held;
     * each chunk is made alone from the mapped source, whose pages it
     * touched are let go when it retires or is freed. */
    int direct;
    zm_source *direct_source;
    const zm_array *direct_array;
};

/* A spilled walk of strings: blocks of this size, a buffer a chunk. */
#define STRING_BLOCK ((size_t)32 << 10)
/* Bytes a string walk is taken to hold in memory for each value: its
 * offset and a short string. Above what walks may hold, it is spilled. */
#define STRING_WALK_BYTES_PER_VALUE 24

/* ---- walk.c: walks, their memory and spill files ------------------------------ */

/* The array's walk, made on first use (or again, once taken back): one
 * thread makes it, others wait. Each use ends with zm__walk_put. */
int zm__walk_of(zm_synth *synth, zm_view *view, const zm_store_node *node, struct zm_walk **out,
                zm_err *err);
void zm__walk_put(struct zm_walk *w);
/* Whether the array's walk is made and in memory now (not spilled). */
int zm__walk_in_memory(const zm_view *view, const zm_store_node *node);
/* Batches of a walk: bytes of their buffer, and their rows. */
uint64_t zm__batch_bytes(const zm_synth *synth);
uint64_t zm__batch_rows(const zm_synth *synth);
/* An unlinked temporary file in the spill directory, or −1. */
int zm__spill_file(zm_err *err);
int zm__write_all(int fd, const uint8_t *bytes, size_t size, uint64_t offset, zm_err *err);
int zm__read_all(int fd, uint8_t *bytes, size_t size, uint64_t offset, zm_err *err);
/* The end of a walk's pass: a failed spill's file closed, a spill made
 * counted (bytes: what its file holds). */
int zm__end_pass(struct zm_walk *w, int rc, int spilled, uint64_t bytes);

/* ---- synth.c: chunks made alone ---------------------------------------------- */

typedef struct pair {
    uint64_t source; /* source row (or range start) */
    uint64_t slot;   /* where it goes in the output */
} pair;
/* Source rows of view rows [from, to), sorted, with their output slots. */
pair *zm__sorted_rows(const zm_view *view, uint64_t from, uint64_t to);
/* Entries [e0, e1) of a sparse matrix in the view into out. */
int zm__entries_chunk(zm_view *view, const zm_store_node *node, uint64_t e0, uint64_t e1,
                      uint8_t *out, unsigned read_flags, zm_err *err);
/* Values of rows [from, to) of an array node (numbers, not strings) into
 * out, rows after rows; read_flags are added to the source reads' (a
 * direct walk's chunk: ZM_READ_MAPPED). */
int zm__fill_chunk(zm_synth *synth, zm_view *view, const zm_store_node *node, uint64_t from,
                   uint64_t to, uint8_t *out, unsigned read_flags, zm_err *err);
/* Bytes of one index along dimension 0 of an array node. */
uint64_t zm__row_bytes_of(const zm_store_node *node);

/* ---- passes.c: the passes that make walks, and cutting spilled ones ---------- */

int zm__spill_strings_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w);
int zm__cut_spilled_strings(const struct zm_walk *w, uint64_t c, uint64_t items,
                            uint64_t **offsets, char **bytes, zm_err *err);
int zm__can_spill(const zm_store_node *node);
int zm__span_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w,
                  const zm_view_kept *kept, uint8_t *out, uint64_t v0, uint64_t v1);
int zm__batch_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w);
int zm__cut_spilled(zm_view *view, const zm_store_node *node, struct zm_walk *w, uint64_t from,
                    uint64_t to, uint8_t *out, zm_err *err);
int zm__renumbered(const zm_store_node *node);
int zm__in_order_walk(zm_view *view, const zm_store_node *node, struct zm_walk *w);

/* Copies n bytes between buffers that do not overlap: a short run (a
 * sparse row of a few values, sorted or cut by a spilled walk: tens of
 * millions of them at atlas scale) as two overlapping moves of a fixed
 * size rather than a call to memcpy. */
static inline void zm__copy_run(uint8_t *to, const uint8_t *from, size_t n)
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

#endif
