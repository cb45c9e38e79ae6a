/* A MuData view's parts: one view a modality, whose rows are the view's
 * cells the modality measured, in view order, so that a prefix of the
 * view's cells is a prefix of every modality's rows (the specification's
 * "a prefix of the cells is a prefix of every modality"). The kernel never
 * runs for a part: its cells follow from the view's and the source's
 * obsmap (zm_source_modality_rows). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "view/view_internal.h"

size_t zm_view_part_count(const zm_view *view) { return view->part_count; }
zm_view *zm_view_part(const zm_view *view, size_t i) { return view->parts[i]; }
const char *zm_view_part_name(const zm_view *view, size_t i) { return view->part_names[i]; }
const uint32_t *zm_view_part_map(const zm_view *view, size_t i) { return view->part_maps[i]; }
zm_view *zm_view_owner(const zm_view *view) { return view->owner; }

/* Marks every node of a part's store as the part's. */
static void own_nodes(zm_store_node *node, zm_view *part)
{
    node->view = part;
    for (size_t i = 0; i < node->child_count; i++)
        own_nodes(node->children[i], part);
}

/* Part i of view: its rows from the view's order, its map, its store. */
static int part_make(zm_view *view, size_t i, zm_err *err)
{
    zm_source *source = view->source;
    zm_source *modality = zm_source_modality(source, i);
    const uint32_t *rows_of = zm_source_modality_rows(source, i);
    const char *name = zm_source_modality_name(source, i);
    uint64_t k = view->rows, n = zm_source_n_obs(modality);
    uint32_t *map = zm__big_alloc((k ? k : 1) * sizeof *map);
    zm_view *part = calloc(1, sizeof *part);
    view->part_maps[i] = map;
    view->parts[i] = part;
    view->part_names[i] = strdup(name);
    if (map == NULL || part == NULL || view->part_names[i] == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory laying out modality %s", name);
    part->source = modality;
    part->owner = view;
    part->spec = view->spec;
    part->spec.set = NULL; /* the view's; a part keeps no reference of its own */
    part->chunk_bytes = view->chunk_bytes;
    zm__view_locks_init(part);
    uint64_t count = 0;
    for (uint64_t v = 0; v < k; v++)
        count += rows_of[view->order[v]] != ZM_SOURCE_ABSENT;
    part->rows = count;
    part->order = zm__big_alloc((count ? count : 1) * sizeof *part->order);
    if (part->order == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory laying out modality %s", name);
    uint64_t c = 0, last = 0;
    int identity = count == n;
    for (uint64_t v = 0; v < k; v++) {
        uint32_t r = rows_of[view->order[v]];
        if (r == ZM_SOURCE_ABSENT) {
            map[v] = 0;
            continue;
        }
        identity = identity && r == c;
        last = r > last ? r : last;
        part->order[c++] = r;
        map[v] = (uint32_t)c;
    }
    part->identity = identity;
    part->prefix = count > 0 && last == count - 1;
    /* The digest of the part's cells: its rows of the modality. */
    uint64_t *sorted = malloc((count ? count : 1) * sizeof *sorted);
    uint32_t *positions = malloc((count ? count : 1) * sizeof *positions);
    int rc = sorted && positions ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    for (uint64_t j = 0; rc == 0 && j < count; j++)
        sorted[j] = part->order[j];
    if (rc == 0)
        rc = zm_sort_u64(sorted, count, err);
    for (uint64_t j = 0; rc == 0 && j < count; j++)
        positions[j] = (uint32_t)sorted[j];
    if (rc == 0)
        zm_cellset_digest(positions, count, n, part->digest);
    free(sorted);
    free(positions);
    if (rc == 0)
        rc = zm__build_store(part, err);
    if (rc == 0)
        own_nodes(part->root, part);
    return rc;
}

int zm__parts_make(zm_view *view, zm_err *err)
{
    size_t count = zm_source_modality_count(view->source);
    if (count == 0)
        return 0;
    view->parts = calloc(count, sizeof *view->parts);
    view->part_names = calloc(count, sizeof *view->part_names);
    view->part_maps = calloc(count, sizeof *view->part_maps);
    if (view->parts == NULL || view->part_names == NULL || view->part_maps == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory laying out the modalities");
    view->part_count = count;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < count; i++)
        rc = part_make(view, i, err);
    return rc;
}

void zm__parts_free(zm_view *view)
{
    for (size_t i = 0; i < view->part_count; i++) {
        zm_view_free(view->parts[i]);
        free(view->part_names[i]);
        free(view->part_maps[i]);
    }
    free(view->parts);
    free(view->part_names);
    free(view->part_maps);
}
