/* Internal to the source module: a Zarr store's arrays as zm_arrays
 * (zarr_array.c), and the store as the container the AnnData reader walks
 * (zarr_source.c). */
#ifndef ZARRMOUNT_SOURCE_ZARR_ARRAY_H
#define ZARRMOUNT_SOURCE_ZARR_ARRAY_H

#include "source/source_internal.h"
#include "source/zarr_store.h"

/* The array at node (or one field of a structured array) as an array of
 * the source, its chunks read from store. store_bytes: what the store
 * holds, bounding what the array may claim (zm__h5_check_stored's bound).
 * -ENOTSUP (with why) for a codec we do not decode or a structured array
 * asked for whole. */
int zm__zarr_array_open(zm_source *source, zm__store *store, const zm__znode *node,
                        const char *field, uint64_t store_bytes, zm_array **out, zm_err *err);

/* Opens source->fd (a directory or a zip file) as a Zarr store and reads
 * the AnnData in it into the model (zarr_source.c). */
int zm__read_zarr(zm_source *source, zm_err *err);
/* Whether the store is still what it was opened as. */
int zm__zarr_check(const zm_source *source, zm_err *err);
void zm__zarr_close(zm_source *source);

#endif
