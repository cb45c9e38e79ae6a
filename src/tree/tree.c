/* The mounted tree as paths: the views (full/, file/, uniform/, blocks/,
 * stratified/, spatial/), each an AnnData Zarr store whose files are made
 * when read, and .zarrmount/. Opening and closing the tree, and its entry
 * points: lookup, getattr, listings, reads, links. No FUSE here: fuse.c
 * serves these calls. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tree/tree_internal.h"
#include "zarrmount/log.h"
#include "zarrmount/text.h"

/* ---- The API ---------------------------------------------------------------------- */

static void ladder(uint64_t n, uint64_t *sizes, size_t *count)
{
    *count = 0;
    for (uint64_t k = 1; k < n && *count < 20; k *= 10)
        sizes[(*count)++] = k;
    if (n > 0)
        sizes[(*count)++] = n;
}

/* The cells a stratified view's minimum takes before anything is split:
 * over the occupied strata, the sum of min(minimum, the stratum's cells).
 * The kernel refuses a smaller k, so a listing leaves such sizes out (a
 * listed name always exists). 0 when no size need be left out. */
static uint64_t minimum_cells(zm_tree *t, const zm_view_spec *spec)
{
    if (spec->kind != ZM_VIEW_STRATIFIED || spec->minimum == 0)
        return 0;
    zm_field_strata strata;
    zm_err ignored;
    if (zm_view_field_strata(t->source, spec->field, &strata, &ignored) != 0)
        return 0;
    uint64_t n = zm_source_n_obs(t->source), total = 0;
    /* Strata 0..count-1 by code, the missing values after them: over the
     * set's cells (codes are by stored row), or every cell. */
    const zm_view_set *set = spec->set;
    const zm_priority *priority = zm_source_priority(t->source);
    uint64_t *sizes = calloc(strata.count + 1, sizeof *sizes);
    int known = sizes != NULL;
    for (uint64_t i = 0; known && i < (set ? set->count : n); i++) {
        uint64_t p = set ? set->positions[i] : i;
        int32_t code = strata.codes[set && priority->verified ? priority->stored[p] : p];
        if (code >= 0 && (uint64_t)code >= strata.count)
            known = 0;
        else
            sizes[code < 0 ? strata.count : (uint64_t)code]++;
    }
    for (uint64_t s = 0; known && s <= strata.count; s++)
        total += sizes[s] < spec->minimum ? sizes[s] : spec->minimum;
    free(sizes);
    zm_field_strata_free(&strata);
    return known ? total : 0;
}

/* A file the structure holds whose bytes could not be made (rc, the reason
 * in err): found, with a size that is not its own and the failure, which
 * the FUSE layer keeps with its inode (so that no later success is served
 * under this size) and answers every open and read of it with. */
static void unmade(view_stats *vs, zm_node *node, int rc)
{
    node->error = rc == -ENOENT ? -EIO : rc; /* a file the structure holds is no missing one */
    node->size = ZM_SIZE_UNMADE;
    vs->failed++;
}

static int lookup_target(zm_tree *t, const char *path, const target *target_in, view_stats *vs,
                         zm_node *node, zm_err *err)
{
    target tg = *target_in;
    int rc;
    memset(node, 0, sizeof *node);
    node->kind = ZM_NODE_DIRECTORY;
    if (tg.kind == T_STATS_FILE) {
        node->kind = ZM_NODE_FILE;
        node->live = 1;
        return zm__take_snapshot(t, &node->size, &node->snapshot);
    }
    if (tg.kind == T_INFO_FILE) {
        node->kind = ZM_NODE_FILE;
        node->size = t->info_size;
        return 0;
    }
    if (tg.kind == T_LINK) {
        node->kind = ZM_NODE_LINK;
        node->size = strlen(tg.link);
        /* sets/NAME moves when its file changes: the kernel keeps neither
         * the name nor the link, and an inode for each version. */
        if (tg.set_link) {
            node->live = 1;
            node->snapshot = zm__set_link_snapshot(tg.spec.set->digest);
        }
        return 0;
    }
    if (tg.kind != T_VIEW)
        return 0;
    /* A view is built from the source as it is now: not from a file that
     * changed since the mount. One built before still answers for its
     * names (the source as it was), and its files fail to be read. */
    if (!zm__view_built(t, tg.key) && (rc = zm__tree_check_source(t, err)) != 0)
        return rc;
    zm_view *view;
    if ((rc = zm__view_get(t, &tg, &view, 1, err)) != 0)
        /* A request the kernel refuses (a minimum that does not fit, ...)
         * names no view: the path does not exist. */
        return rc == -EINVAL ? -ENOENT : rc;
    zm__ahead_touch(t, vs);
    place w;
    rc = zm__locate(view, tg.rest, &w, err);
    if (rc == 0 && w.file != F_NONE) {
        node->kind = ZM_NODE_FILE;
        uint64_t size;
        if (zm__known_size(t, &w, &size) || zm__size_get(t, zm__file_key(view, path, &w), &size) ||
            zm__kept_size(t, view, path, &w, &size)) {
            node->size = size;
        } else {
            /* Its size is its bytes' (compressed): made now. That they
             * cannot be made is no reason to say the file is missing. */
            zm_cache_ref ref;
            int made = zm__tree_check_source(t, err);
            if (made == 0)
                made = zm__with_file(t, view, vs, path, &w, &ref, err);
            if (made == 0) {
                node->size = ref.size;
                zm_cache_release(t->files, &ref);
            } else {
                unmade(vs, node, made);
            }
        }
    }
    zm__view_release(t, view);
    return rc;
}

int zm__tree_lookup(zm_tree *t, const char *path, zm_node *node, zm_err *err)
{
    int64_t began = zm__monotonic_ns();
    target tg;
    int rc = zm__parse_path(t, path, &tg, err);
    view_stats *vs = rc == 0 ? zm__stats_of_target(t, &tg) : &t->outside;
    vs->lookups++;
    if (rc == 0) {
        rc = lookup_target(t, path, &tg, vs, node, err);
        zm__target_clear(&tg);
    }
    if (rc == -ENOENT)
        zm__note_refusal(t, vs, path, err);
    vs->busy_nanoseconds += (uint64_t)(zm__monotonic_ns() - began);
    return rc;
}

int zm__tree_getattr(zm_tree *t, const char *path, zm_node *node, zm_err *err)
{
    target tg;
    uint64_t serial = zm__snapshot_serial_of(path);
    int rc = zm__parse_path(t, serial ? STATS_PATH : path, &tg, err);
    if (rc != 0)
        return rc;
    if (tg.kind != T_STATS_FILE) {
        zm__target_clear(&tg);
        return zm__tree_lookup(t, path, node, err);
    }
    memset(node, 0, sizeof *node);
    node->kind = ZM_NODE_FILE;
    node->live = 1;
    pthread_mutex_lock(&t->stats_mutex);
    snapshot *s = zm__find_snapshot(t, serial);
    if (s != NULL) {
        node->size = s->size;
        node->snapshot = s->serial;
    }
    pthread_mutex_unlock(&t->stats_mutex);
    if (s == NULL && serial != 0)
        return zm_err_set(err, -ESTALE, "%s: this snapshot is gone: open the file again", path);
    return s != NULL ? 0 : zm__take_snapshot(t, &node->size, &node->snapshot);
}

void zm__tree_count_open(zm_tree *t, const char *path)
{
    target tg;
    zm_err err;
    if (zm__parse_path(t, path, &tg, &err) == 0) {
        zm__stats_of_target(t, &tg)->opens++;
        zm__target_clear(&tg);
    } else {
        t->outside.opens++;
    }
}

void zm__tree_count_unmade(zm_tree *t, const char *path, int read)
{
    target tg;
    zm_err err;
    view_stats *vs = zm__parse_path(t, path, &tg, &err) == 0 ? zm__stats_of_target(t, &tg) : &t->outside;
    zm__target_clear(&tg);
    if (read)
        vs->reads++;
    else
        vs->opens++;
    vs->failed++;
}

/* The size of chunk number `chunk` (named name) of the array at w (a
 * directory at path), if known without making it; else ZM_SIZE_UNKNOWN. */
static uint64_t chunk_size_known(zm_tree *t, zm_view *view, const char *path, const place *w,
                                 const char *name, uint64_t chunk)
{
    place c = *w;
    c.file = F_CHUNK;
    const zm_store_node *n = w->node;
    for (int d = (int)n->meta.rank - 1; d >= 0; d--) {
        c.coords[d] = chunk % n->grid[d];
        chunk /= n->grid[d];
    }
    char full[2048];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", path, name) >= sizeof full)
        return ZM_SIZE_UNKNOWN;
    uint64_t size;
    if (zm__known_size(t, &c, &size) || zm__size_get(t, zm__file_key(view, full, &c), &size) ||
        zm__kept_size(t, view, full, &c, &size))
        return size;
    return ZM_SIZE_UNKNOWN;
}

static int emit_name(zm__tree_emit emit, void *context, const char *name, zm_node_kind kind,
                     uint64_t size)
{
    zm_node node = {.kind = kind, .size = size};
    return emit(context, name, &node);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

struct list_keys {
    zm__tree_emit emit;
    void *context;
};

static int emit_key(void *context, const char *key)
{
    struct list_keys *k = context;
    /* Keys that cannot be a path component are left out of listings. */
    if (key[0] == '\0' || strchr(key, '/') || !strcmp(key, ".") || !strcmp(key, ".."))
        return 0;
    return emit_name(k->emit, k->context, key, ZM_NODE_DIRECTORY, 0);
}

/* The seed listings show: the file's own in a priority-ordered file (its
 * uniform subsamples are the stored prefixes), else 0. */
static int emit_default_seed(zm_tree *t, zm__tree_emit emit, void *context)
{
    const zm_priority *p = zm_source_priority(t->source);
    char name[24];
    snprintf(name, sizeof name, "seed%" PRIu32, p->verified ? p->seed : 0);
    return emit_name(emit, context, name, ZM_NODE_DIRECTORY, 0);
}

struct list_links {
    zm__tree_emit emit;
    void *context;
};

/* A set's name, a link to its version (sets/NAME -> NAME@DIGEST). */
static int emit_link(void *context, const char *name, const char *link)
{
    struct list_links *l = context;
    /* Without attributes: the kernel then looks the name up (a live
     * link, whose version it must not keep) rather than keep it. */
    (void)link;
    return emit_name(l->emit, l->context, name, ZM_NODE_LINK, ZM_SIZE_UNKNOWN);
}

static int list_target(zm_tree *t, const char *path, const target *target_in, zm__tree_emit emit,
                       void *context, zm_err *err)
{
    target tg = *target_in;
    int rc = 0;
    char name[64];
    switch (tg.kind) {
    case T_ROOT: {
        static const char *const names[] = {".zarrmount", "blocks",     "file",    "full", "sets",
                                            "spatial",    "stratified", "uniform", "where"};
        for (size_t i = 0; i < 9; i++) {
            if (!strcmp(names[i], "sets") && t->sets_dir == NULL)
                continue; /* no -o sets= */
            if ((rc = emit_name(emit, context, names[i], ZM_NODE_DIRECTORY, 0)) != 0)
                return rc;
        }
        return 0;
    }
    case T_SET: {
        /* The methods over the set. */
        static const char *const names[] = {"blocks", "file", "full", "spatial", "stratified",
                                            "uniform"};
        for (size_t i = 0; i < 6; i++)
            if ((rc = emit_name(emit, context, names[i], ZM_NODE_DIRECTORY, 0)) != 0)
                return rc;
        return 0;
    }
    case T_SETS: {
        struct list_links l = {emit, context};
        return zm__sets_list(t, emit_link, &l);
    }
    case T_WHERE: {
        struct list_keys k = {emit, context};
        return zm_view_where_fields(t->source, emit_key, &k);
    }
    case T_WHERE_KEY: {
        struct list_keys k = {emit, context};
        return zm_view_where_values(t->source, tg.spec.field, emit_key, &k, err);
    }
    case T_LINK:
        return zm_err_set(err, -ENOTDIR, "%s: a link, not a directory", path);
    case T_FIELD:
        if (tg.spec.kind == ZM_VIEW_STRATIFIED) {
            static const char *const names[] = {"balanced", "proportional"};
            for (size_t i = 0; i < 2; i++)
                if ((rc = emit_name(emit, context, names[i], ZM_NODE_DIRECTORY, 0)) != 0)
                    return rc;
            return emit_default_seed(t, emit, context);
        }
        snprintf(name, sizeof name, "G=%d", ZM_DEFAULT_GRID_SIZE);
        if ((rc = emit_name(emit, context, name, ZM_NODE_DIRECTORY, 0)) != 0)
            return rc;
        return emit_default_seed(t, emit, context);
    case T_ALLOC:
        return emit_name(emit, context, "min=0", ZM_NODE_DIRECTORY, 0);
    case T_GRID: {
        /* The default columns, as many of them as the grid fits (G^d <
         * 2^53): a listed name always exists. */
        char cols[48] = "cols=";
        zm_err ignored;
        while (tg.spec.column_count > 1 &&
               zm__grid_fits(tg.spec.embedding, tg.spec.grid_size, tg.spec.column_count, &ignored) != 0)
            tg.spec.column_count--;
        for (unsigned i = 0; i < tg.spec.column_count; i++)
            snprintf(cols + strlen(cols), sizeof cols - strlen(cols), "%s%u", i ? "," : "", i);
        return emit_name(emit, context, cols, ZM_NODE_DIRECTORY, 0);
    }
    case T_MINIMUM:
    case T_COLUMNS:
        return emit_default_seed(t, emit, context);
    case T_INFO_DIR:
        /* stats.json's size is known only when it is looked up (a new
         * snapshot): listed without one, so the kernel looks it up. */
        if ((rc = emit_name(emit, context, "info.json", ZM_NODE_FILE, t->info_size)) != 0)
            return rc;
        return emit_name(emit, context, "stats.json", ZM_NODE_FILE, ZM_SIZE_UNKNOWN);
    case T_INFO_FILE:
    case T_STATS_FILE:
        return zm_err_set(err, -ENOTDIR, "%s: not a directory", path);
    case T_METHOD:
        if (tg.spec.kind == ZM_VIEW_STRATIFIED || tg.spec.kind == ZM_VIEW_SPATIAL) {
            struct list_keys k = {emit, context};
            return tg.spec.kind == ZM_VIEW_STRATIFIED
                       ? zm_view_strata_fields(t->source, emit_key, &k)
                       : zm_view_embeddings(t->source, emit_key, &k);
        }
        if (tg.spec.kind == ZM_VIEW_BLOCKS) {
            snprintf(name, sizeof name, "B=%" PRIu64, t->b0.block_size);
            if ((rc = emit_name(emit, context, name, ZM_NODE_DIRECTORY, 0)) != 0)
                return rc;
        }
        return emit_default_seed(t, emit, context);
    case T_BLOCK:
        return emit_default_seed(t, emit, context);
    case T_SEED: {
        uint64_t sizes[24];
        size_t count;
        ladder(tg.spec.set ? tg.spec.set->count : zm_source_n_obs(t->source), sizes, &count);
        uint64_t least = minimum_cells(t, &tg.spec);
        for (size_t i = 0; i < count; i++) {
            if (sizes[i] < least)
                continue;
            snprintf(name, sizeof name, "k=%" PRIu64, sizes[i]);
            if ((rc = emit_name(emit, context, name, ZM_NODE_DIRECTORY, 0)) != 0)
                return rc;
        }
        return 0;
    }
    case T_VIEW:
        break;
    }
    zm_view *view;
    if ((rc = zm__view_get(t, &tg, &view, 1, err)) != 0)
        return rc;
    zm__ahead_touch(t, zm__stats_for(t, tg.key));
    place w;
    rc = zm__locate(view, tg.rest, &w, err);
    if (rc == 0 && w.file != F_NONE)
        rc = zm_err_set(err, -ENOTDIR, "%s: not a directory", path);
    if (rc == 0) {
        const zm_store_node *n = w.node;
        /* Names in order: the metadata files, then children or chunk keys. */
        size_t count = 0, capacity = 16;
        char **names = malloc(capacity * sizeof *names);
        int *dirs = NULL;
        if (n->attrs)
            names[count++] = strdup(".zattrs");
        names[count++] = strdup(n->is_array ? ".zarray" : ".zgroup");
        if (!n->is_array && n == zm_view_root(view))
            names[count++] = strdup(".zmetadata");
        size_t files_end = count;
        if (!n->is_array) {
            for (size_t i = 0; i < n->child_count; i++) {
                if (count == capacity)
                    names = realloc(names, (capacity *= 2) * sizeof *names);
                names[count++] = strdup(n->children[i]->name);
            }
        } else {
            uint64_t chunks = 1;
            for (unsigned d = 0; d < n->meta.rank; d++)
                chunks *= n->grid[d];
            for (uint64_t c = 0; c < chunks; c++) {
                uint64_t coords[ZM_ZARR_MAX_RANK], rest = c;
                for (int d = (int)n->meta.rank - 1; d >= 0; d--) {
                    coords[d] = rest % n->grid[d];
                    rest /= n->grid[d];
                }
                char key[128];
                zm_zarr_chunk_key(n->meta.rank, coords, key, sizeof key);
                if (count == capacity)
                    names = realloc(names, (capacity *= 2) * sizeof *names);
                names[count++] = strdup(key);
            }
        }
        dirs = calloc(count + 1, sizeof *dirs);
        for (size_t i = files_end; i < count && !n->is_array; i++)
            dirs[i] = 1;
        for (size_t i = 0; rc == 0 && i < count; i++) {
            /* A chunk's size when it is known without making it (made
             * before, or kept on disk): the listing then carries the
             * attributes, and the kernel looks up none of them. */
            uint64_t size = ZM_SIZE_UNKNOWN;
            if (n->is_array && i >= files_end)
                size = chunk_size_known(t, view, path, &w, names[i], i - files_end);
            rc = emit_name(emit, context, names[i], dirs[i] ? ZM_NODE_DIRECTORY : ZM_NODE_FILE,
                           dirs[i] ? 0 : size);
        }
        for (size_t i = 0; i < count; i++)
            free(names[i]);
        free(names);
        free(dirs);
    }
    zm__view_release(t, view);
    (void)by_name;
    return rc;
}

int zm__tree_list(zm_tree *t, const char *path, zm__tree_emit emit, void *context, zm_err *err)
{
    int64_t began = zm__monotonic_ns();
    target tg;
    int rc = zm__parse_path(t, path, &tg, err);
    view_stats *vs = rc == 0 ? zm__stats_of_target(t, &tg) : &t->outside;
    vs->listings++;
    if (rc == 0) {
        rc = list_target(t, path, &tg, emit, context, err);
        zm__target_clear(&tg);
    }
    if (rc == -ENOENT)
        zm__note_refusal(t, vs, path, err);
    vs->busy_nanoseconds += (uint64_t)(zm__monotonic_ns() - began);
    return rc;
}

/* The bytes of a read, from offset, at most size of them: counted in the
 * view's bytes served, then sent (a reader who has them finds them counted). */
static void send_part(view_stats *vs, const uint8_t *bytes, uint64_t total, uint64_t offset,
                      size_t size, zm__tree_sink send, void *context, size_t *done)
{
    *done = offset < total ? (total - offset < size ? (size_t)(total - offset) : size) : 0;
    vs->bytes_served += *done;
    send(context, *done ? bytes + offset : bytes, *done);
}

static int read_target(zm_tree *t, const char *path, const target *target_in, uint64_t serial,
                       view_stats *vs, uint64_t offset, size_t size, zm__tree_sink send,
                       void *context, size_t *done, zm_err *err)
{
    target tg = *target_in;
    int rc;
    if (tg.kind == T_STATS_FILE) {
        /* The snapshot of the lookup that gave the inode (serial), or
         * the newest for STATS_PATH itself: its part copied under the
         * lock, sent outside it. */
        uint8_t *part = NULL;
        size_t length = 0;
        pthread_mutex_lock(&t->stats_mutex);
        snapshot *s = zm__find_snapshot(t, serial);
        if (s != NULL && offset < s->size) {
            length = s->size - offset < size ? s->size - offset : size;
            part = malloc(length);
            if (part != NULL)
                memcpy(part, s->bytes + offset, length);
        }
        pthread_mutex_unlock(&t->stats_mutex);
        if (s == NULL && serial != 0)
            return zm_err_set(err, -ESTALE, "%s: this snapshot is gone: open the file again", path);
        if (length > 0 && part == NULL)
            return zm_err_set(err, -ENOMEM, "%s: out of memory", path);
        send_part(vs, part, length, 0, length, send, context, done);
        free(part);
        return 0;
    }
    if (tg.kind == T_INFO_FILE) {
        send_part(vs, (const uint8_t *)t->info, t->info_size, offset, size, send, context, done);
        return 0;
    }
    if (tg.kind != T_VIEW)
        return zm_err_set(err, -EISDIR, "%s: a directory", path);
    zm_view *view;
    if ((rc = zm__view_get(t, &tg, &view, 1, err)) != 0)
        return rc;
    zm__ahead_touch(t, vs);
    place w;
    rc = zm__locate(view, tg.rest, &w, err);
    if (rc == 0 && w.file == F_NONE)
        rc = zm_err_set(err, -EISDIR, "%s: a directory", path);
    /* With codec none, a whole chunk of a walk in memory is its bytes as
     * they lie there: served from the walk, never copied into the cache. */
    int walked = rc == 0 && w.file == F_CHUNK && t->codec.kind == ZM_CODEC_NONE &&
                 w.node->meta.rank > 0 && zm_synth_walks(view, w.node);
    int sent = 0;
    uint64_t file_size = 0;
    if (walked && zm_synth_chunk_lends(view, w.node, w.coords)) {
        uint8_t *raw;
        size_t raw_size, typesize;
        int borrowed = 0;
        zm_source_tally *previous = zm_source_tally_set(zm__tally_of(vs, view, w.node));
        rc = zm_synth_chunk(t->synth, view, w.node, w.coords, &raw, &raw_size, &typesize,
                            &borrowed, err);
        zm_source_tally_set(previous);
        if (rc != 0) {
            vs->failed++;
        } else {
            /* Not lent after all (taken back meanwhile and spilled when made
             * again): the copy made is served, once. */
            send_part(vs, raw, raw_size, offset, size, send, context, done);
            zm_synth_chunk_done(view, w.node, raw, borrowed);
            file_size = raw_size;
            sent = 1;
            if (offset == 0)
                zm__walk_chain(t, view, path, &w);
        }
    }
    if (rc == 0 && !sent) {
        zm_cache_ref ref;
        rc = zm__with_file(t, view, vs, path, &w, &ref, err);
        if (rc != 0)
            vs->failed++;
        if (rc == 0) {
            send_part(vs, ref.bytes, ref.size, offset, size, send, context, done);
            file_size = ref.size;
            zm_cache_release(t->files, &ref);
        }
    }
    /* Its last byte served: once all of a walk's chunks are, the walk's
     * memory may go to the next (zm_synth_walk_served). */
    if (rc == 0 && walked && offset + *done >= file_size &&
        zm_synth_walk_served(view, w.node, w.coords[0]))
        zm__walk_retired(t, view);
    zm__view_release(t, view);
    return rc;
}

int zm__tree_send(zm_tree *t, const char *path, uint64_t offset, size_t size, zm__tree_sink send,
                  void *context, size_t *done, zm_err *err)
{
    int64_t began = zm__monotonic_ns();
    *done = 0;
    target tg;
    uint64_t serial = zm__snapshot_serial_of(path);
    int rc = zm__parse_path(t, serial ? STATS_PATH : path, &tg, err);
    view_stats *vs = rc == 0 ? zm__stats_of_target(t, &tg) : &t->outside;
    vs->reads++;
    if (rc == 0) {
        rc = read_target(t, path, &tg, serial, vs, offset, size, send, context, done, err);
        zm__target_clear(&tg);
    }
    if (rc == -ENOENT)
        zm__note_refusal(t, vs, path, err);
    vs->busy_nanoseconds += (uint64_t)(zm__monotonic_ns() - began);
    return rc;
}

static void copy_out(void *buffer, const void *bytes, size_t size)
{
    if (size > 0)
        memcpy(buffer, bytes, size);
}

int zm__tree_read(zm_tree *t, const char *path, uint64_t offset, size_t size, void *buffer,
                  size_t *done, zm_err *err)
{
    return zm__tree_send(t, path, offset, size, copy_out, buffer, done, err);
}

int zm__tree_readlink(zm_tree *t, const char *path, char *target_out, size_t size, zm_err *err)
{
    target tg;
    int rc = zm__parse_path(t, path, &tg, err);
    if (rc != 0)
        return rc;
    zm__target_clear(&tg);
    if (tg.kind != T_LINK)
        return zm_err_set(err, -EINVAL, "%s: not a link", path);
    if (strlen(tg.link) >= size)
        return zm_err_set(err, -ENAMETOOLONG, "%s: the link does not fit", path);
    memcpy(target_out, tg.link, strlen(tg.link) + 1);
    return 0;
}

size_t zm__tree_skipped(zm_tree *t, const char *const **lines)
{
    return zm_source_skipped(t->source, lines);
}

int zm__tree_check_source(zm_tree *t, zm_err *err)
{
    struct stat st;
    if (stat(t->source_path, &st) != 0)
        return zm_err_set(err, -EIO, "%s: the source is gone (%s): remount", t->source_path,
                          strerror(errno));
    int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    int directory = strcmp(zm_source_container(t->source), "zarr-directory") == 0;
    /* A directory store's size and time are its files' (its manifest):
     * its own stat says only that it is the same directory, and the store
     * checks the rest (its metadata here, each chunk file as it is read). */
    if (st.st_dev != t->identity.device || st.st_ino != t->identity.inode ||
        (!directory && (st.st_size != t->identity.size || mtime != t->identity.mtime_ns)))
        return zm_err_set(err, -EIO, "%s: the source changed since it was mounted: remount to serve "
                          "the new file", t->source_path);
    zm_err why;
    zm_err_clear(&why);
    if (directory && zm_source_check_store(t->source, &why) != 0)
        return zm_err_set(err, -EIO, "%s: the source changed since it was mounted (%s): remount to "
                          "serve the new store", t->source_path, why.reason);
    return 0;
}

int zm__tree_open(const zm_tree_options *options, zm_tree **out, zm_err *err)
{
    *out = NULL;
    zm_tree *t = calloc(1, sizeof *t);
    if (t == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&t->mutex, NULL);
    pthread_mutex_init(&t->sets_mutex, NULL);
    pthread_mutex_init(&t->disk_mutex, NULL);
    pthread_cond_init(&t->disk_wake, NULL);
    pthread_cond_init(&t->changed, NULL);
    pthread_mutex_init(&t->stats_mutex, NULL);
    pthread_mutex_init(&t->snapshot_taking, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t->mounted);
    t->outside.key = "";
    t->more_views.key = "(more views)";
    t->source_path = strdup(options->source);
    size_t source_length = strlen(options->source);
    t->source_text = malloc(source_length + 1);
    if (t->source_text != NULL)
        zm_text_utf8_copy(t->source_text, source_length + 1, options->source);
    t->chunk_bytes = options->chunk_bytes ? options->chunk_bytes : ZM_DEFAULT_CHUNK_BYTES;
    t->layout_anndata = options->layout_anndata;
    t->index_int32 = options->index_int32;
    uint64_t memory = options->cache_bytes ? options->cache_bytes : ZM_DEFAULT_CACHE_BYTES;
    t->cache_bytes = memory / 2 ? memory / 2 : 1;
    t->synth = zm_synth_create(memory / 4);
    t->ahead_threads = options->threads ? options->threads : zm_config_cores();
    double idle = options->ahead_idle_seconds < 0 ? ZM_DEFAULT_AHEAD_IDLE_SECONDS : options->ahead_idle_seconds;
    t->ahead_idle_ns = (int64_t)(idle * 1e9);
    t->ahead_rate = options->ahead_rate;
    int rc = 0;
    if (options->codec)
        rc = zm_codec_parse(options->codec, &t->codec, err);
    else
        t->codec = zm_codec_default();
    uint64_t walks = memory / 4;
    if (rc == 0 && t->codec.kind == ZM_CODEC_NONE) {
        /* A walked array's chunks are then served from its walk, never
         * kept in the file cache: most of the file cache's share goes to
         * walks (what is left holds documents and the other chunks). */
        t->cache_bytes = memory / 8 ? memory / 8 : 1;
        walks += memory / 2 - memory / 8;
        /* Served from a walk in memory as they lie, made ahead of the
         * reader: never made alone from the source (a direct walk). */
        if (t->synth != NULL)
            zm_synth_set_direct(t->synth, 0);
    }
    zm_source_options so = {.threads = options->threads,
                            .layout_anndata = options->layout_anndata,
                            .chunk_cache_bytes = memory / 4 ? (size_t)(memory / 4) : 1};
    if (rc == 0 && t->synth == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = zm_source_open(options->source, &so, &t->source, err);
    if (rc == 0) {
        /* What the decoded-chunk cache can never use goes to walks: a
         * source of contiguous datasets fits its walks in memory, not in
         * spill files. */
        uint64_t need = zm_source_chunk_cache_need(t->source), quarter = memory / 4;
        zm_synth_set_walk_memory(t->synth, walks + (need < quarter ? quarter - need : 0));
        rc = zm_source_default_block_size(t->source, &t->b0, err);
    }
    if (rc == 0 && t->index_int32)
        rc = zm_view_index_int32_check(t->source, err); /* refused now, not view by view */
    if (rc == 0) {
        zm__read_source_head(t);
        zm__times_open(t);
        rc = zm__open_disk(t, options, err);
    }
    if (rc == 0)
        rc = zm__sets_open(t, options->sets_dir, err);
    if (rc == 0)
        rc = zm_cache_create(t->cache_bytes, &t->files);
    if (rc == 0) {
        /* Said once: which cells the views name, and why. */
        const zm_priority *p = zm_source_priority(t->source);
        if (p->verified)
            zm_log(LOG_INFO, "priority: the rows are in seed %" PRIu32 "'s priority order "
                   "(uns/cellucid/priority verified): cells are named by their original "
                   "positions, full/ is the rows as stored%s%s", p->seed, p->note[0] ? "; " : "",
                   p->note);
        else if (p->reason[0])
            zm_log(LOG_WARNING, "priority: %s; read as a file Cellucid did not write (each row "
                   "its own original position)", p->reason);
        t->identity = *zm_source_get_identity(t->source);
        char codec[64];
        zm_codec_format(&t->codec, codec, sizeof codec);
        json_t *info = json_pack(
            "{s:s, s:s, s:{s:I, s:I, s:I, s:I}, s:s, s:I, s:I, s:{s:I, s:s, s:s}, s:{s:s, s:I, s:I}}",
            "version", ZM_VERSION, "source", t->source_text, "identity", "device",
            (json_int_t)t->identity.device, "inode", (json_int_t)t->identity.inode, "size",
            (json_int_t)t->identity.size, "mtimeNs", (json_int_t)t->identity.mtime_ns, "format",
            zm_source_format_name(zm_source_get_format(t->source)), "nObs",
            (json_int_t)zm_source_n_obs(t->source), "nVars", (json_int_t)zm_source_n_vars(t->source),
            "defaultBlockSize", "blockSize", (json_int_t)t->b0.block_size, "rule", t->b0.rule,
            "element", t->b0.element, "options", "codec", codec, "chunkBytes",
            (json_int_t)t->chunk_bytes, "cacheBytes",
            (json_int_t)memory);
        /* -o index_dtype=int32, when given (it changes bytes). */
        if (info != NULL && t->index_int32)
            json_object_set_new(json_object_get(info, "options"), "indexDtype", json_string("int32"));
        /* The sets directory, which explain of a path of the mount reads. */
        if (info != NULL && t->sets_dir != NULL) {
            char shown[4096];
            zm_text_utf8_copy(shown, sizeof shown, t->sets_dir);
            json_object_set_new(json_object_get(info, "options"), "sets", json_string(shown));
        }
        /* What holds the source's bytes, and a Zarr store's version and
         * manifest digest (a directory store's identity). */
        if (info != NULL) {
            json_object_set_new(info, "container", json_string(zm_source_container(t->source)));
            if (zm_source_zarr_format(t->source) > 0)
                json_object_set_new(info, "zarrFormat",
                                    json_integer(zm_source_zarr_format(t->source)));
            if (t->identity.digest != 0) {
                char digest[24];
                snprintf(digest, sizeof digest, "%016llx", (unsigned long long)t->identity.digest);
                json_object_set_new(json_object_get(info, "identity"), "manifest",
                                    json_string(digest));
            }
        }
        json_t *priority = zm_tree_priority_json(t->source);
        if (info != NULL && priority != NULL)
            json_object_set_new(info, "priority", priority);
        else
            json_decref(priority);
        /* A MuData's modalities, in the order each view's mod/ holds them. */
        if (info != NULL && zm_source_modality_count(t->source) > 0) {
            json_t *mods = json_array();
            for (size_t i = 0; i < zm_source_modality_count(t->source); i++) {
                /* Each of its cells is one global cell (obsmap, checked). */
                zm_source *m = zm_source_modality(t->source, i);
                json_array_append_new(mods, json_pack("{s:s, s:I, s:I}", "name",
                                                      zm_source_modality_name(t->source, i),
                                                      "nObs", (json_int_t)zm_source_n_obs(m),
                                                      "nVars", (json_int_t)zm_source_n_vars(m)));
            }
            json_object_set_new(info, "modalities", mods);
        }
        /* Elements the source holds but the stores leave out, each with why
         * (as `zarrmount inspect` lists them). */
        const char *const *skipped;
        size_t skipped_count = zm_source_skipped(t->source, &skipped);
        json_t *list = json_array();
        for (size_t i = 0; list != NULL && i < skipped_count; i++) {
            char line[ZM_REASON_MAX + 1024];
            zm_text_utf8_copy(line, sizeof line, skipped[i]);
            json_array_append_new(list, json_string(line));
        }
        if (info != NULL && list != NULL)
            json_object_set_new(info, "skipped", list);
        else
            json_decref(list);
        /* The libraries that make chunk bytes, as they run: compressed
         * chunks are the same bytes on two machines where these are the
         * same (and the disk cache files entries by them). */
        size_t library_count;
        const zm_codec_library *libraries = zm_codec_libraries(&library_count);
        json_t *versions = json_object();
        for (size_t i = 0; versions != NULL && i < library_count; i++)
            if (json_object_set_new(versions, libraries[i].name,
                                    json_string(libraries[i].version)) != 0) {
                json_decref(versions);
                versions = NULL;
            }
        if (info != NULL && versions != NULL)
            json_object_set_new(info, "codecLibraries", versions);
        else {
            json_decref(versions);
            json_decref(info);
            info = NULL;
        }
        char *text = info ? json_dumps(info, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
        json_decref(info);
        if (text == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        else {
            size_t n = strlen(text);
            t->info = malloc(n + 2);
            memcpy(t->info, text, n);
            t->info[n] = '\n';
            t->info_size = n + 1;
            free(text);
            zm__times_of_info(t);
        }
    }
    if (rc != 0) {
        zm__tree_close(t);
        return rc;
    }
    if (options->progress != NULL) {
        t->progress = options->progress;
        t->progress_context = options->progress_context;
        zm__start_teller(t);
    }
    *out = t;
    return 0;
}

void zm__tree_close(zm_tree *t)
{
    if (t == NULL)
        return;
    zm__stop_teller(t);
    t->closing = 1;
    pthread_mutex_lock(&t->mutex);
    while (t->ahead_running > 0)
        pthread_cond_wait(&t->changed, &t->mutex);
    pthread_mutex_unlock(&t->mutex);
    for (size_t i = 0; i < t->ahead_count; i++)
        free(t->ahead[i]);
    free(t->ahead);
    for (size_t i = 0; i < t->view_count; i++) {
        zm_view_free(t->views[i].view);
        free(t->views[i].key);
    }
    zm__sets_close(t); /* after the views, which hold sets of their own */
    zm_synth_free(t->synth);
    zm__stop_disk_writer(t); /* its queue holds entries of the file cache */
    zm_cache_destroy(t->files);
    zm_disk_close(t->disk);
    zm_source_close(t->source);
    free(t->sizes.keys);
    free(t->sizes.sizes);
    free(t->info);
    for (size_t i = 0; i < t->view_stats_count; i++) {
        free(t->view_stats[i]->key);
        free(t->view_stats[i]);
    }
    free(t->view_stats);
    while (t->snapshots != NULL) {
        snapshot *next = t->snapshots->next;
        free(t->snapshots->bytes);
        free(t->snapshots);
        t->snapshots = next;
    }
    pthread_mutex_destroy(&t->stats_mutex);
    pthread_mutex_destroy(&t->snapshot_taking);
    free(t->source_path);
    free(t->source_text);
    pthread_mutex_destroy(&t->mutex);
    pthread_mutex_destroy(&t->disk_mutex);
    pthread_cond_destroy(&t->disk_wake);
    pthread_cond_destroy(&t->changed);
    free(t);
}

const zm_synth *zm__tree_synth(const zm_tree *t)
{
    return t->synth;
}

json_t *zm_tree_priority_json(const zm_source *source)
{
    const zm_priority *p = zm_source_priority(source);
    char text[ZM_REASON_MAX];
    if (!p->verified) {
        zm_text_utf8_copy(text, sizeof text,
                          p->reason[0] ? p->reason
                                       : "no uns/cellucid/priority record: each row is its own "
                                         "original position");
        return json_pack("{s:b, s:b, s:s}", "verified", 0, "recorded", p->recorded, "reason",
                         text);
    }
    json_t *out = json_pack("{s:b, s:b, s:I}", "verified", 1, "recorded", 1, "seed",
                            (json_int_t)p->seed);
    if (out != NULL && p->level_count > 0)
        json_object_set_new(out, "levels", json_integer((json_int_t)p->level_count));
    if (out != NULL && p->prefix_counts != NULL)
        json_object_set_new(out, "prefixCounts", json_true());
    if (out != NULL && p->note[0]) {
        zm_text_utf8_copy(text, sizeof text, p->note);
        json_object_set_new(out, "note", json_string(text));
    }
    return out;
}

int zm__tree_changes(zm_tree *t, const char *path)
{
    /* sets/ and sets/NAME: a set file may come, go or change while
     * mounted (a mount without -o sets= has no sets/). */
    if (strcmp(path, "sets") == 0)
        return t->sets_dir != NULL;
    return strncmp(path, "sets/", 5) == 0 && strchr(path + 5, '/') == NULL;
}
