/* Internal to the source module: helpers the format readers share. */
#ifndef ZARRMOUNT_SOURCE_FORMATS_H
#define ZARRMOUNT_SOURCE_FORMATS_H

#include "source/source_internal.h"

/* An array, string array or scalar element for a dataset (HDF5 lock held). */
int zm__array_element(zm_source *source, const char *h5path, const char *field, int transposed,
                      const char *parent, const char *name, zm_element **out, zm_err *err);
/* A string array "0", "1", ... of n rows held in memory. */
int zm__range_index(zm_source *source, const char *label, uint64_t n, zm_element *parent,
                    const char *name, zm_element **out, zm_err *err);
/* A whole 1-d numeric array as doubles (as_double) or int64s; *out malloc'd. */
int zm__read_whole(zm_source *source, zm_array *array, int as_double, void **out, zm_err *err);
/* Sets what an element's dimensions run along, through dataframes and dicts. */
void zm__set_axes(zm_element *element, zm_axis first, zm_axis second);

/* Gives an element (and everything under it) a new parent path. */
int zm__element_repath(zm_element *element, const char *parent_path);
/* Names a dataframe's index "_index" (the file's key stays in index_name). */
int zm__element_name_index(zm_element *dataframe);
/* Takes a named child out of a dict (the caller owns it), or NULL. */
zm_element *zm__element_take_child(zm_element *parent, const char *name);

/* The axes of the standard parts of a root (X, layers, obs, obsm, var,
 * varm, obsp, varp); raw is set by the reader that has it. */
void zm__set_root_axes(zm_element *root);
/* A path buffer: an element's path (at most ZM_ELEMENT_PATH_MAX bytes), a
 * slash and a name (at most ZM_ELEMENT_NAME_MAX), a NUL. */
#define ZM__PATH_BUFFER (ZM_ELEMENT_PATH_MAX + 1 + ZM_ELEMENT_NAME_MAX + 1)

/* One 10x matrix group ("/matrix", "/GENOME") as the source's AnnData
 * model (tenx.c), and a v2 file's genomes as modalities (tenx_multi.c). */
int zm__10x_read_group(zm_source *source, const char *group, zm_err *err);
int zm__10x_genome_modalities(zm_source *source, const char (*groups)[ZM__PATH_BUFFER],
                              size_t count, zm_err *err);
/* Name i of names, a child of the group (or compound) at parent (at most
 * ZM_ELEMENT_PATH_MAX bytes), into name (ZM_ELEMENT_NAME_MAX + 1 bytes) and
 * its path into path (ZM__PATH_BUFFER bytes): 0, or 1 when it cannot be an
 * element (empty, longer than a file name may be, holding '/' or NUL),
 * recorded as skipped with why. Nothing is cut short: a cut name could be
 * another element's. */
int zm__child_at(zm_source *source, const char *parent, const zm_strings *names, size_t i,
                 char *name, char *path);
/* The same for member i of a compound dataset, whose names may hold '/'. */
int zm__member_at(zm_source *source, const char *dataset, const zm_strings *names, size_t i,
                  char *name);
/* A name as a reason shows it: cut at 48 bytes, with its length. */
void zm__shown_name(const char *name, size_t length, char *out, size_t size);
/* Item i of a string set as a NUL-terminated string in buffer. */
const char *zm__string_at(const zm_strings *strings, size_t i, char *buffer, size_t size);

/* Orders every element's children by name for zm_element_child (the model
 * is complete: nothing is added after). -ENOMEM. */
int zm__element_index(zm_element *root);

/* A set of byte strings, each with a text kept beside it (the names a
 * dataframe holds; the objects read, with the path each was read at). */
typedef struct zm__set_entry {
    uint64_t hash; /* 0: an empty slot */
    size_t length;
    char *key;
    char *text;
} zm__set_entry;
typedef struct zm__set {
    zm__set_entry *slots;
    size_t capacity, count;
} zm__set;
/* Adds key (length bytes) with a copy of text (may be NULL): 0 when added,
 * 1 when it was there already (*found, if not NULL, is the text it was added
 * with), -ENOMEM. */
int zm__set_add(zm__set *set, const void *key, size_t length, const char *text, const char **found);
/* Whether key (length bytes) is in the set. */
int zm__set_find(const zm__set *set, const void *key, size_t length);
void zm__set_free(zm__set *set);

/* ---- The structure of a file, bounded (hdf5.c; HDF5 lock held) ------------------------- */

/* The type (H5O_TYPE_GROUP, H5O_TYPE_DATASET, ...) and identity of the
 * object at path (links followed). -ENOENT when there is none. */
int zm__h5_identify(hid_t location, const char *path, int *type, zm__h5_object_id *id);

/* Whether the file stores what an HDF5-backed array claims, before anything
 * is allocated for the claimed size. whole (an axis's index, which sets how
 * many cells or genes there are): every chunk written, a contiguous one
 * allocated. Otherwise the values it does not store (chunks never written,
 * a contiguous dataset never allocated: HDF5 gives the fill value for them)
 * are bounded: at most ZM__UNSTORED_BYTES_MAX bytes of them, or
 * ZM__UNSTORED_RATIO times those it stores; and at most one chunk a byte of
 * the file (a chunk index costs 16 bytes a chunk in memory). -EINVAL naming
 * the array, its claim and what the file holds. Arrays made in memory are
 * not checked. */
#define ZM__UNSTORED_BYTES_MAX ((uint64_t)64 << 20)
#define ZM__UNSTORED_RATIO     1024
int zm__h5_check_stored(zm_source *source, const zm_array *array, int whole, zm_err *err);

#endif
