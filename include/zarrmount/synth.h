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

/* Makes the raw (unencoded) bytes of the chunk at grid coordinates coords
 * of an array node. *raw is malloc'd, unless borrowed is not NULL and the
 * chunk is a whole one cut from a walk: then *raw points into the walk
 * (valid while the view lives, never to be written or freed) and *borrowed
 * is 1. The typesize for the codec (1 for strings) goes to *typesize. */
int zm_synth_chunk(zm_view *view, const zm_store_node *node, const uint64_t *coords,
                   uint8_t **raw, size_t *raw_size, size_t *typesize, int *borrowed, zm_err *err);

/* Whether an array's chunks are cut from a one-pass walk of all of it
 * (per-cell values of a reordered view, in more than one chunk). */
int zm_synth_walks(const zm_view *view, const zm_store_node *node);

#endif
