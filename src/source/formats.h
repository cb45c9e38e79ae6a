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
/* Item i of a string set as a NUL-terminated string in buffer. */
const char *zm__string_at(const zm_strings *strings, size_t i, char *buffer, size_t size);

#endif
