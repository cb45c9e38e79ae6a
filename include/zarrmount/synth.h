/* zarrmount synth: the bytes of one chunk of a view's store, before the
 * codec: values gathered from the source in the view's order, each source
 * chunk a request needs decoded once (the source's gathers), padded to the
 * full chunk shape as Zarr v2 stores edge chunks. */
#ifndef ZARRMOUNT_SYNTH_H
#define ZARRMOUNT_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"
#include "zarrmount/view.h"

/* What a mount gives walks (a walk: a per-cell array of a reordered view,
 * gathered whole in one pass over the source the first time one of its
 * chunks is asked for; chunks are then cut from it). One a mount (tree),
 * passed to zm_synth_chunk: walks may hold walk_memory bytes in memory at
 * once (a mount gives them a quarter of cache_size; the default, for a
 * caller with no cache_size, is a quarter of the default 1 GiB). A walk
 * that does not fit in what is left goes to a spill file in batches
 * ($ZM_SPILL_DIR, $TMPDIR, else /var/tmp): the daemon then holds one batch
 * (about 64 MiB) of it, not the array. NULL when out of memory. */
#define ZM_SYNTH_DEFAULT_WALK_MEMORY ((uint64_t)256 << 20)
typedef struct zm_synth zm_synth;
zm_synth *zm_synth_create(uint64_t walk_memory);
/* The creator's hold let go: it is freed when the views whose walks hold
 * its memory are freed too (it may go before or after them). */
void zm_synth_free(zm_synth *synth);
void zm_synth_set_walk_memory(zm_synth *synth, uint64_t bytes);
/* What a new walk may hold in memory now: what walks are not holding, and
 * what retired walks no one reads would give back. */
uint64_t zm_synth_walk_room(zm_synth *synth);
/* The walks of a zm_synth so far. */
typedef struct zm_synth_walk_stats {
    uint64_t held_bytes;   /* held in memory now */
    uint64_t limit_bytes;  /* what they may hold */
    uint64_t spilled;      /* walks made in batches through a spill file */
    uint64_t spilled_bytes;
    uint64_t reclaimed;    /* walks whose memory was taken back for another */
    uint64_t released_bytes; /* given back early: walks' bytes under chunks done with */
} zm_synth_walk_stats;
void zm_synth_get_walk_stats(const zm_synth *synth, zm_synth_walk_stats *out);

/* Walks are synth's alone: it keeps a view's walks with the view
 * (zm_view_attach) and frees them when the view is freed. A view's walks
 * hold the memory of the zm_synth that first made one of them. */

/* Makes the raw (unencoded) bytes of the chunk at grid coordinates coords
 * of an array node. *raw is malloc'd, unless borrowed is not NULL and the
 * chunk is a whole one cut from a walk: then *raw points into the walk
 * (never to be written or freed) and *borrowed is 1. Either way the chunk
 * is given back with zm_synth_chunk_done. The typesize for the codec (1 for
 * strings) goes to *typesize: the codec is the caller's, not synth's. */
int zm_synth_chunk(zm_synth *synth, zm_view *view, const zm_store_node *node,
                   const uint64_t *coords, uint8_t **raw, size_t *raw_size, size_t *typesize,
                   int *borrowed, zm_err *err);
/* Whether zm_synth_chunk would lend the chunk at coords now (a whole chunk
 * of a walk in memory, its values as they lie). */
int zm_synth_chunk_lends(const zm_view *view, const zm_store_node *node, const uint64_t *coords);
/* The end of a chunk's use: a malloc'd one freed, a borrowed one's walk let
 * go (it is not taken back while borrowed from). */
void zm_synth_chunk_done(const zm_view *view, const zm_store_node *node, uint8_t *raw,
                         int borrowed);

/* Says that every chunk of an array has been made (encoded and kept): its
 * walk's memory may be taken back when a new walk would not fit in what
 * walks may hold (oldest such walk first, never one in use), and the walk
 * is made again should one of its chunks be asked for after that. */
void zm_synth_walk_retire(const zm_view *view, const zm_store_node *node);
/* Says that the caller will retire a walk (expect 1: it is making every
 * chunk of the array), or will not after all (0). A new walk that does not
 * fit in what walks may hold waits a while (at most 2 s) for an expected
 * walk to retire, rather than spill. */
void zm_synth_walk_expect(const zm_view *view, const zm_store_node *node, int expect);
/* Says that row chunk `chunk` of a walked array is done with: with codec
 * none, its last byte served from the walk (zm_synth_chunk lends whole
 * chunks of a walk in memory rather than copying them into a cache); else
 * made and kept. Once every row chunk has been, the walk is retired (as by
 * zm_synth_walk_retire); before, the walk's memory under its chunks done
 * from the first on is given back in steps (a chunk there asked for again
 * is made alone). 1 when either made room for other walks; else 0. */
int zm_synth_walk_served(const zm_view *view, const zm_store_node *node, uint64_t chunk);
/* Makes the array's walk now unless it is made (walking ahead of a reader). */
int zm_synth_walk_make(zm_synth *synth, zm_view *view, const zm_store_node *node, zm_err *err);

/* Whether an array's chunks are cut from a one-pass walk of all of it
 * (per-cell values of a reordered view, in more than one chunk). */
int zm_synth_walks(const zm_view *view, const zm_store_node *node);
/* Whether the array's walk is direct: numbers whose source is mapped
 * (zm_array_mapped), in a view keeping at least half its source's cells,
 * of at most twice what walks may hold. Such a walk gathers nothing and
 * holds no memory: each
 * chunk is made alone, its rows copied from the page cache, which is
 * asked for the whole array ahead when the walk begins; the chunks are
 * still encoded ahead of the reader, on every core. */
int zm_synth_walk_direct(const zm_synth *synth, const zm_view *view, const zm_store_node *node);
/* Whether walks may be direct (on by default): off where chunks are served
 * as they lie in a walk, unencoded (codec none), which a walk in memory
 * serves with no copy and makes ahead of the reader. */
void zm_synth_set_direct(zm_synth *synth, int direct);
/* Whether a walk of the array was begun (made, being made, or failed):
 * safe to ask from any thread. */
int zm_synth_walk_started(const zm_view *view, const zm_store_node *node);

#endif
