/* Internal to the source module: the container an AnnData is stored in,
 * as the AnnData reader (anndata.c) walks it.
 *
 * anndata writes the same encodings into HDF5 files and Zarr stores: groups
 * with attributes, arrays, and the encoding attributes on both. The reader
 * walks either through these calls; hdf5.c answers them from an HDF5 file
 * (the HDF5 lock held), zarr_source.c from a Zarr store's metadata. Paths
 * are the container's own, from its root, with a leading '/' ("/obs/louvain").
 */
#ifndef ZARRMOUNT_SOURCE_CONTAINER_H
#define ZARRMOUNT_SOURCE_CONTAINER_H

#include <stddef.h>
#include <stdint.h>

#include "source/source_internal.h"

/* What a path names. */
#define ZM__NODE_NONE   (-1) /* nothing */
#define ZM__NODE_GROUP  0
#define ZM__NODE_ARRAY  1
#define ZM__NODE_OTHER  2    /* something that is neither (an HDF5 named type, a link never followed) */

/* What an array's values are, where the array reader does not take them. */
#define ZM__VALUES_PLAIN     0 /* numbers or strings: an array element */
#define ZM__VALUES_RECORDS   1 /* a structured (compound) type: one array per field */
#define ZM__VALUES_REFERENCE 2 /* HDF5 object references */

typedef struct zm__container zm__container;

typedef struct zm__container_ops {
    /* ZM__NODE_*. */
    int (*node_type)(const zm__container *c, const char *path);
    /* The node's type and an identity that is the same whatever path
     * reaches it (a group read once however many links lead to it). */
    int (*identify)(const zm__container *c, const char *path, int *type, zm__h5_object_id *id);
    int (*has_attribute)(const zm__container *c, const char *path, const char *name);
    /* As the zm__h5_attribute_* calls (source_internal.h): 0, or -ENOENT
     * when absent, another negative errno when not of that type. */
    int (*attribute_string)(const zm__container *c, const char *path, const char *name, char **out);
    int (*attribute_integers)(const zm__container *c, const char *path, const char *name,
                              int64_t **values, size_t *count);
    int (*attribute_strings)(const zm__container *c, const char *path, const char *name,
                             zm_strings *out);
    int (*attribute_bool)(const zm__container *c, const char *path, const char *name, int *value);
    /* An object reference attribute, as the path it references (HDF5 only). */
    int (*attribute_reference)(const zm__container *c, const char *path, const char *name,
                               char **target);
    /* A group's children's names, in name order. */
    int (*list)(const zm__container *c, const char *path, zm_strings *names);
    /* ZM__VALUES_* of an array. */
    int (*values)(const zm__container *c, const char *path);
    /* A structured array's field names, in field order. */
    int (*fields)(const zm__container *c, const char *path, zm_strings *names);
    /* 1 with why when path lies behind something never followed (an HDF5
     * external link); 0 otherwise. */
    int (*outside)(const zm__container *c, const char *path, char *why, size_t size);
    /* The array (or one field of a structured array) as a zm_array of the
     * source: -ENOTSUP for values it does not take (r->err says why). */
    int (*array_open)(zm_source *source, const zm__container *c, const char *path,
                      const char *field, zm_array **out, zm_err *err);
    /* The container's name in messages ("HDF5 file", "Zarr store"). */
    const char *what;
} zm__container_ops;

struct zm__container {
    const zm__container_ops *ops;
    void *state; /* the HDF5 file (a hid_t's storage) or the Zarr tree */
};

/* The container of an HDF5 source's file (hdf5.c). */
void zm__h5_container(zm_source *source, zm__container *out);

/* An AnnData whose groups are under base ("" for the root, "/mod/rna" for
 * a modality) into source's model, read through c (anndata.c). mudata: the
 * root is MuData's (its obsmap, varmap and mod are not listed as skipped). */
int zm__read_anndata_in(zm_source *source, const zm__container *c, const char *base, int mudata,
                        zm_err *err);

#endif
