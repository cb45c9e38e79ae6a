/* explain: what a path of the tree is, resolved without reading a chunk
 * (zm__tree_explain: a directory, a share= or pct= link and the size rule,
 * or a view: method, n, k, seed, settings and where they came from, digest,
 * strata, first cells); the command over it is src/cli/explain_cmd.c. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree/tree_internal.h"
#include "zarrmount/text.h"

/* ---- explain ---------------------------------------------------------------------- */

/* The obs index names of count source rows (any order), or NULL. */
static json_t *cell_names(zm_tree *t, const uint32_t *rows, size_t count)
{
    const zm_element *obs = zm_source_find(t->source, "obs");
    if (obs == NULL || obs->index == NULL || obs->index->kind != ZM_ELEMENT_STRING_ARRAY ||
        count == 0)
        return NULL;
    uint64_t *sorted = malloc(count * sizeof *sorted);
    if (sorted == NULL)
        return NULL;
    size_t unique = 0;
    for (size_t i = 0; i < count; i++)
        sorted[i] = rows[i];
    for (size_t i = 1; i < count; i++) /* insertion sort: a few rows */
        for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            uint64_t swap = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = swap;
        }
    for (size_t i = 0; i < count; i++)
        if (unique == 0 || sorted[unique - 1] != sorted[i])
            sorted[unique++] = sorted[i];
    zm_strings s;
    zm_err err;
    json_t *names = NULL;
    if (zm_array_read_strings(t->source, obs->index->values, sorted, unique, &s, &err) == 0) {
        names = json_array();
        for (size_t i = 0; i < count; i++) {
            size_t at = 0;
            while (sorted[at] != rows[i])
                at++;
            json_array_append_new(names, json_stringn(s.bytes + s.offsets[at],
                                                      s.offsets[at + 1] - s.offsets[at]));
        }
        zm_strings_free(&s);
    }
    free(sorted);
    return names;
}

/* A spatial box number as its coordinates on the grid. */
static json_t *box_name(uint64_t box, uint64_t grid, unsigned dims)
{
    uint64_t all = 1;
    for (unsigned d = 0; d < dims; d++)
        all *= grid;
    if (box >= all)
        return json_string("(a coordinate not finite)");
    json_t *coords = json_array();
    for (unsigned d = 0; d < dims; d++) {
        json_array_append_new(coords, json_integer((json_int_t)(box % grid)));
        box /= grid;
    }
    return coords;
}

/* A MuData's modalities in a view: how many of the view's cells each
 * measured, which are its rows in mod/NAME/. */
static void explain_modalities(zm_tree *t, const zm_selection *selection, json_t *out)
{
    size_t count = zm_source_modality_count(t->source);
    if (count == 0)
        return;
    const zm_priority *priority = zm_source_priority(t->source);
    json_t *list = json_array();
    for (size_t m = 0; m < count; m++) {
        const uint32_t *rows_of = zm_source_modality_rows(t->source, m);
        uint64_t rows = 0;
        for (uint64_t i = 0; i < selection->k; i++) {
            uint32_t stored = priority->verified ? priority->stored[selection->order[i]]
                                                 : selection->order[i];
            rows += rows_of[stored] != ZM_SOURCE_ABSENT;
        }
        const zm_source *modality = zm_source_modality(t->source, m);
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:I, s:I}", "name", zm_source_modality_name(t->source, m),
                            "store", "mod/", "nObs", (json_int_t)zm_source_n_obs(modality), "rows",
                            (json_int_t)rows));
        json_t *last = json_array_get(list, json_array_size(list) - 1);
        char store[ZM_VIEW_KEY_MAX + 8];
        snprintf(store, sizeof store, "mod/%s/", zm_source_modality_name(t->source, m));
        json_object_set_new(last, "store", json_string(store));
    }
    json_object_set_new(out, "modalities", list);
    json_object_set_new(out, "modalityRule",
                        json_string("each modality's rows are the view's cells it measured "
                                    "(obsmap/NAME > 0), in view order; obsmap/NAME gives each "
                                    "cell's 1-based row there, 0 for none"));
}

static int explain_view(zm_tree *t, const target *tg, json_t *out, zm_err *err)
{
    const zm_view_spec *spec = &tg->spec;
    uint64_t n = zm_source_n_obs(t->source);
    json_object_set_new(out, "view", json_string(tg->key));
    json_object_set_new(out, "method", json_string(zm_view_kind_name(spec->kind)));
    json_object_set_new(out, "nObs", json_integer((json_int_t)n));
    /* Over a set: which cells, and from where (the file, or the filter). */
    if (spec->set != NULL) {
        json_object_set(out, tg->base[0] == 'w' ? "where" : "set", spec->set->record);
        json_object_set_new(out, "setSize", json_integer((json_int_t)spec->set->count));
    }
    if (tg->rest[0])
        json_object_set_new(out, "inside", json_string(tg->rest));
    /* The cells the view layer selects for the spec, as it does for the
     * view itself, without building it. */
    zm_view_selection chosen;
    int rc = zm_view_select(t->source, spec, &chosen, err);
    if (rc != 0)
        return rc;
    const zm_view_request *made = &chosen.made;
    const zm_selection *selection = &chosen.selection;
    const zm_request *r = &made->request;
    char digest[17];
    zm_cellset_digest(selection->positions, selection->k, selection->n, digest);
    if (spec->kind == ZM_VIEW_FILE) {
        /* Over a set: the set's cells (selection->k), in file order. */
        json_object_set_new(out, "k", json_integer((json_int_t)selection->k));
        json_object_set_new(out, "digest", json_string(digest));
        json_object_set_new(out, "rule",
                            json_string(spec->set != NULL
                                            ? "every cell of the set, in file order, no selection"
                                            : "every cell, in file order: the source as it is, "
                                              "no selection"));
        zm_view_selection_free(&chosen);
        return 0;
    }
    json_object_set_new(out, "seed", json_integer(r->seed));
    json_object_set_new(out, "kRequested", json_integer((json_int_t)r->k));
    json_object_set_new(out, "k", json_integer((json_int_t)selection->k));
    json_object_set_new(out, "digest", json_string(digest));
    /* A priority-ordered file: the kernel ran over original positions; a
     * selection of its stored rows [0, k) is read as one prefix. */
    const zm_priority *priority = zm_source_priority(t->source);
    json_t *said = zm_tree_priority_json(t->source);
    if (said != NULL)
        json_object_set_new(out, "priority", said);
    if (priority->verified) {
        uint64_t last = 0;
        for (uint64_t i = 0; i < selection->k; i++)
            if (priority->stored[selection->positions[i]] > last)
                last = priority->stored[selection->positions[i]];
        if (selection->k > 0 && last == selection->k - 1)
            json_object_set_new(out, "read",
                                json_string("the file's stored rows [0, k): each per-cell array as "
                                            "one prefix, a CSR matrix as its first entries, a "
                                            "gene-major X by its prefix counts"));
    }
    switch (spec->kind) {
    case ZM_VIEW_FULL:
        json_object_set_new(out, "rule",
                            json_string(priority->verified
                                            ? "every cell in the priority order of the file's "
                                              "seed: the rows as the file stores them"
                                            : "every cell in the priority order of seed 0 (the "
                                              "uniform method with k = n)"));
        break;
    case ZM_VIEW_UNIFORM:
        json_object_set_new(out, "rule", json_string("the k cells of lowest rank(seed, position), "
                                                     "in rank order"));
        break;
    case ZM_VIEW_BLOCKS:
        json_object_set_new(out, "blockSize", json_integer((json_int_t)spec->block_size));
        json_object_set_new(
            out, "blockSizeFrom",
            spec->block_size_given
                ? json_string("the path (B=)")
                : json_pack("{s:s, s:s, s:s}", "rule", t->b0.rule, "element", t->b0.element,
                            "explanation", t->b0.explanation));
        json_object_set_new(out, "rule",
                            json_string("blocks of B neighbouring cells in file order, taken whole "
                                        "in order of rank(seed, block number) until the next would "
                                        "pass k; that one gives its first cells"));
        break;
    case ZM_VIEW_STRATIFIED:
        json_object_set_new(out, "field", json_string(spec->field));
        json_object_set_new(out, "allocation", json_string(zm_allocation_name(spec->allocation)));
        json_object_set_new(out, "minimum", json_integer((json_int_t)spec->minimum));
        json_object_set_new(out, "rule",
                            json_string("each category keeps min(m, its cells) first; the rest of k "
                                        "is split over the categories with room (proportional: "
                                        "largest remainder; balanced: water-filling); each keeps "
                                        "its lowest-ranked cells"));
        break;
    case ZM_VIEW_SPATIAL: {
        json_t *columns = json_array();
        for (unsigned c = 0; c < r->dims; c++)
            json_array_append_new(columns, json_integer(made->columns[c]));
        json_object_set_new(out, "embedding", json_string(spec->embedding));
        json_object_set_new(out, "columns", columns);
        json_object_set_new(out, "gridSize", json_integer((json_int_t)r->grid_size));
        json_object_set_new(out, "rule",
                            json_string("cells placed on a grid of G boxes per axis over the "
                                        "columns (as float32), k split balanced over the occupied "
                                        "boxes, each keeping its lowest-ranked cells"));
        break;
    }
    case ZM_VIEW_FILE:
        break;
    }
    if (selection->strata_count > 0) {
        json_t *strata = json_array();
        for (size_t i = 0; i < selection->strata_count; i++) {
            const zm_stratum *s = &selection->strata[i];
            json_t *name;
            if (spec->kind == ZM_VIEW_STRATIFIED)
                name = !s->missing && s->id < made->strata.count
                           ? json_stringn(made->strata.names.bytes + made->strata.names.offsets[s->id],
                                          made->strata.names.offsets[s->id + 1] -
                                              made->strata.names.offsets[s->id])
                           : json_string("(missing)");
            else
                name = box_name(s->id, r->grid_size, r->dims);
            json_array_append_new(strata, json_pack("{s:I, s:o, s:I, s:I}", "stratum",
                                                    (json_int_t)s->id, "name", name ? name : json_null(),
                                                    "cells", (json_int_t)s->size, "kept",
                                                    (json_int_t)s->kept));
        }
        json_object_set_new(out, "strata", strata);
    }
    size_t first = selection->k < 10 ? (size_t)selection->k : 10;
    json_t *cells = json_array();
    for (size_t i = 0; i < first; i++)
        json_array_append_new(cells, json_integer(selection->order[i]));
    json_object_set_new(out, "firstCells", cells);
    /* Names are read by stored row: a priority-ordered file's rows are
     * not its cells' original positions. */
    uint32_t rows[10];
    for (size_t i = 0; i < first; i++)
        rows[i] = priority->verified ? priority->stored[selection->order[i]] : selection->order[i];
    json_t *names = cell_names(t, rows, first);
    if (names != NULL)
        json_object_set_new(out, "firstCellNames", names);
    explain_modalities(t, selection, out);
    zm_view_selection_free(&chosen);
    return 0;
}

int zm__tree_explain(zm_tree *t, const char *path, json_t **out, zm_err *err)
{
    *out = NULL;
    target tg;
    int rc = zm__parse_path(t, path, &tg, err);
    if (rc != 0)
        return rc;
    /* The path as JSON holds it: UTF-8 (it may be any bytes). */
    size_t length = strlen(path);
    char *shown = malloc(length + 1);
    if (shown != NULL)
        zm_text_utf8_copy(shown, length + 1, path);
    json_t *e = shown ? json_pack("{s:s}", "path", shown) : NULL;
    free(shown);
    if (e == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    static const char *const what[] = {
        [T_ROOT] = "the mount: one directory a method (full, file, uniform, blocks, stratified, "
                   "spatial), where/ and sets/ (the methods over sets of cells) and .zarrmount",
        [T_INFO_DIR] = "the mount's own files",
        [T_INFO_FILE] = "the source, its identity, the version and the options",
        [T_STATS_FILE] = "the mount's counters, per view and in total (a new snapshot at every "
                         "open)",
        [T_METHOD] = "a method: its settings, then seeds",
        [T_BLOCK] = "blocks of this size: seeds",
        [T_FIELD] = "the settings of the method over this key, or seeds at the defaults",
        [T_ALLOC] = "minimums per category",
        [T_MINIMUM] = "seeds",
        [T_GRID] = "columns of the embedding",
        [T_COLUMNS] = "seeds",
        [T_SEED] = "sizes: k=<K> views, share= and pct= links to them",
        [T_SETS] = "the sets of -o sets=DIR, each a link to the version of the set it names now",
        [T_WHERE] = "the obs columns that can filter (categoricals, strings, booleans)",
        [T_WHERE_KEY] = "the column's values (categories, true and false, or a string column's "
                        "values when it has at most 1000): each a set of the cells holding it",
        [T_SET] = "the methods over the set's cells: file, full, uniform, blocks, stratified, "
                  "spatial",
        [T_VIEW] = "",
        [T_LINK] = "",
    };
    /* A set's name, a link to its version: what the set is, from where. */
    if (tg.kind == T_LINK && tg.set_link) {
        json_object_set_new(e, "kind", json_string("link"));
        json_object_set_new(e, "target", json_string(tg.link));
        json_object_set_new(e, "holds", json_string("the set's version it names now: its "
                                                    "methods"));
        json_object_set(e, "set", tg.spec.set->record);
        zm__target_clear(&tg);
        *out = e;
        return 0;
    }
    switch (tg.kind) {
    case T_LINK: {
        /* The size rule, then the view the link names. */
        const char *slash = strrchr(path, '/');
        const char *leaf = slash ? slash + 1 : path;
        json_object_set_new(e, "kind", json_string("link"));
        json_object_set_new(e, "target", json_string(tg.link));
        json_object_set_new(e, "size", json_string(leaf));
        json_object_set_new(
            e, "sizeRule",
            json_string("k = min(n, max(1, floor((2nP + Q) / 2Q))) for the exact fraction P/Q the "
                        "decimal names (a percentage over 100), in exact integer arithmetic"));
        char view_path[2048];
        snprintf(view_path, sizeof view_path, "%.*s%s", (int)(leaf - path), path, tg.link);
        target viewed;
        rc = zm__parse_path(t, view_path, &viewed, err);
        if (rc == 0) {
            rc = explain_view(t, &viewed, e, err);
            zm__target_clear(&viewed);
        }
        break;
    }
    case T_VIEW:
        json_object_set_new(e, "kind", json_string("view"));
        rc = explain_view(t, &tg, e, err);
        break;
    default: {
        /* .zarrmount's two files, or a directory; only a method's own
         * directories name the method. */
        int file = tg.kind == T_INFO_FILE || tg.kind == T_STATS_FILE;
        json_object_set_new(e, "kind", json_string(file ? "file" : "directory"));
        json_object_set_new(e, "holds", json_string(what[tg.kind]));
        if (!file && tg.kind != T_ROOT && tg.kind != T_INFO_DIR && tg.kind != T_SETS &&
            tg.kind != T_WHERE && tg.kind != T_WHERE_KEY && tg.kind != T_SET)
            json_object_set_new(e, "method", json_string(zm_view_kind_name(tg.spec.kind)));
        if (tg.spec.set != NULL)
            json_object_set(e, tg.base[0] == 'w' ? "where" : "set", tg.spec.set->record);
        break;
    }
    }
    zm__target_clear(&tg);
    if (rc != 0) {
        json_decref(e);
        return rc == -EINVAL ? -ENOENT : rc;
    }
    *out = e;
    return 0;
}
