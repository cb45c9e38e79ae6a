/* Making the files of a view: metadata documents and chunks (synthesized,
 * then encoded), the sizes of files made, the chunks kept on disk across
 * mounts (their keys, the passthrough and push reads of them) and the
 * disk writer that files them at idle priority. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zarrmount/log.h"

#include "tree/tree_internal.h"

/* ---- Sizes ----------------------------------------------------------------- */

int zm__size_get(zm_tree *t, uint64_t key, uint64_t *size)
{
    int found = 0;
    pthread_mutex_lock(&t->mutex);
    if (t->sizes.capacity) {
        size_t i = key % t->sizes.capacity;
        while (t->sizes.keys[i] != 0) {
            if (t->sizes.keys[i] == key) {
                *size = t->sizes.sizes[i];
                found = 1;
                break;
            }
            i = (i + 1) % t->sizes.capacity;
        }
    }
    pthread_mutex_unlock(&t->mutex);
    return found;
}

/* Sizes remembered at most (8 MiB of table): past it the table starts
 * again empty. Every size is a file's, which is the same bytes whenever it
 * is made, so a forgotten one is found again by making the file; reading
 * ever more distinct files (views without end) cannot grow the daemon. */
#define SIZES_KEPT ((size_t)1 << 18)

static void size_put(zm_tree *t, uint64_t key, uint64_t size)
{
    key |= 1; /* 0 marks an empty slot */
    pthread_mutex_lock(&t->mutex);
    if (t->sizes.count >= SIZES_KEPT) {
        free(t->sizes.keys);
        free(t->sizes.sizes);
        t->sizes.keys = t->sizes.sizes = NULL;
        t->sizes.capacity = t->sizes.count = 0;
    }
    if ((t->sizes.count + 1) * 2 > t->sizes.capacity) {
        size_t capacity = t->sizes.capacity ? t->sizes.capacity * 2 : 1024;
        uint64_t *keys = calloc(capacity, sizeof *keys), *sizes = calloc(capacity, sizeof *sizes);
        if (keys && sizes) {
            for (size_t i = 0; i < t->sizes.capacity; i++) {
                if (t->sizes.keys[i] == 0)
                    continue;
                size_t j = t->sizes.keys[i] % capacity;
                while (keys[j] != 0)
                    j = (j + 1) % capacity;
                keys[j] = t->sizes.keys[i];
                sizes[j] = t->sizes.sizes[i];
            }
            free(t->sizes.keys);
            free(t->sizes.sizes);
            t->sizes.keys = keys;
            t->sizes.sizes = sizes;
            t->sizes.capacity = capacity;
        } else {
            free(keys);
            free(sizes);
        }
    }
    if (t->sizes.capacity && (t->sizes.count + 1) * 2 <= t->sizes.capacity) {
        size_t i = key % t->sizes.capacity;
        while (t->sizes.keys[i] != 0 && t->sizes.keys[i] != key)
            i = (i + 1) % t->sizes.capacity;
        if (t->sizes.keys[i] == 0)
            t->sizes.count++;
        t->sizes.keys[i] = key;
        t->sizes.sizes[i] = size;
    }
    pthread_mutex_unlock(&t->mutex);
}

static uint64_t path_key(const char *path) { return zm_cache_key(path, strlen(path)) | 1; }

static int dump(json_t *doc, uint8_t **bytes, size_t *size, zm_err *err)
{
    char *text;
    size_t length;
    if (doc == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    int rc = zm_zarr_dump(doc, &text, &length, err);
    json_decref(doc);
    if (rc == 0) {
        *bytes = (uint8_t *)text;
        *size = length;
    }
    return rc;
}

static json_t *array_document(zm_tree *t, const zm_store_node *node)
{
    zm_zarr_array_meta meta = node->meta;
    meta.codec = meta.rank == 0 || t->codec.kind == ZM_CODEC_NONE ? NULL : &t->codec;
    return zm_zarr_array_document(&meta);
}

/* Every metadata document of a store, under its key, for .zmetadata.
 * A node's attributes are copied, never shared: other threads use them at
 * the same time, and jansson's reference count is not all atomic (its
 * json_incref reads the count plainly). */
static void consolidate(zm_tree *t, const zm_store_node *node, const char *path, json_t *metadata)
{
    char key[1200];
    if (node->attrs) {
        snprintf(key, sizeof key, "%s%s.zattrs", path, *path ? "/" : "");
        json_object_set_new(metadata, key, json_deep_copy(node->attrs));
    }
    snprintf(key, sizeof key, "%s%s%s", path, *path ? "/" : "", node->is_array ? ".zarray" : ".zgroup");
    json_object_set_new(metadata, key, node->is_array ? array_document(t, node) : zm_zarr_group_document());
    for (size_t i = 0; !node->is_array && i < node->child_count; i++) {
        char child[1024];
        snprintf(child, sizeof child, "%s%s%s", path, *path ? "/" : "", node->children[i]->name);
        consolidate(t, node->children[i], child, metadata);
    }
}

/* Whether a sparse matrix under node is still to be laid out: full/ and
 * file/ lay out each when it is first used, not when they are looked up. */
static int layouts_deferred(const zm_store_node *node)
{
    if (node->sparse != NULL)
        return !zm_view_sparse_ready(node->sparse);
    for (size_t i = 0; !node->is_array && i < node->child_count; i++)
        if (layouts_deferred(node->children[i]))
            return 1;
    return 0;
}

static int matrices_laid_out(zm_view *view, const zm_store_node *node, zm_err *err)
{
    if (node->sparse != NULL) {
        zm_view_sparse_info info;
        return zm_view_sparse_get(zm_view_of(view, node), node->sparse, &info, err);
    }
    for (size_t i = 0; !node->is_array && i < node->child_count; i++) {
        int rc = matrices_laid_out(view, node->children[i], err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

struct make_context {
    zm_tree *tree;
    zm_view *view;
    const place *where;
    view_stats *stats;
    const char *key; /* the file's cache key, as text */
    /* Set by the load that made a chunk to keep on disk: its disk key, for
     * the writer to file the cache's entry once the load is done. */
    char disk_key[2048];
};

static int make_file_bytes(struct make_context *c, uint8_t **bytes, size_t *size, zm_err *err);

/* Whether an array's chunks are worth keeping across mounts: those cut
 * from a walk (making one again means walking the whole array), and per-cell
 * strings of a reordered view (read whole through HDF5, on one core). With
 * codec none a walk's chunks are not: they are served from the walk itself
 * (read_target), never copied, and a kept one would be as large as the
 * source's bytes it was cut from. */
int zm__kept_on_disk(const zm_tree *t, const zm_view *view, const zm_store_node *node)
{
    if (t->codec.kind == ZM_CODEC_NONE && node->producer != ZM_PRODUCE_CELL_STRINGS &&
        node->producer != ZM_PRODUCE_STRINGS)
        return 0;
    return zm_synth_walks(view, node) ||
           (node->producer == ZM_PRODUCE_CELL_STRINGS &&
            !zm_view_is_identity(zm_view_of(view, node)) && node->meta.rank > 0);
}
/* The disk cache's key of a chunk: its file key and the options that change
 * its bytes (zm__bytes_options). */
static void disk_key_of(const zm_tree *t, const char *file_key, char *out, size_t size)
{
    char options[256];
    zm__bytes_options(t, options, sizeof options);
    snprintf(out, size, "%s|%s", file_key, options);
}

static int make_chunk(struct make_context *c, uint8_t **bytes, size_t *size, zm_err *err);
static void queue_for_disk(zm_tree *t, const char *key, const zm_cache_ref *ref);

/* A damaged or unreadable entry, said once in the log. */
static void kept_failed(zm_tree *t, int rc, const zm_err *err)
{
    if (rc != 0 && rc != -ENOENT && atomic_exchange(&t->disk_read_failed, 1) == 0)
        zm_log(LOG_WARNING, "the disk cache %s (%s): such entries are never served, but made again "
                "from the source", rc == -EBADMSG ? "had a damaged entry" : "could not be read",
                err->reason);
}

/* Makes a file's bytes (the cache's loader), counted for its view: what it
 * reads from the source (on this thread and on the pool's for it) too. */
/* The modality of a view a node is of (its index among the view's parts),
 * or -1: a node of the view's own. */
static int modality_of(zm_view *view, const zm_store_node *node)
{
    size_t part = 0;
    if (node == NULL || node->view == NULL)
        return -1;
    while (part < zm_view_part_count(view) && zm_view_part(view, part) != node->view)
        part++;
    return part >= ZM__STATS_MODALITIES || part >= zm_view_part_count(view) ? -1 : (int)part;
}

zm_source_tally *zm__tally_of(view_stats *vs, zm_view *view, const zm_store_node *node)
{
    int part = modality_of(view, node);
    return part < 0 ? &vs->source : &vs->modality[part].source;
}

static int make_file(void *context, uint8_t **bytes, size_t *size, zm_err *err)
{
    struct make_context *c = context;
    /* A matrix's metadata and chunks need its layout: one made late is the
     * view's building (its reads and time counted there), and a matrix
     * whose pointers are damaged fails its metadata with EIO, as a
     * subsample's lookup does, so that no reader opens an array whose every
     * chunk would fail (zarr-python 2's FSStore fills such chunks). */
    file_kind kind = c->where->file;
    if ((kind == F_ZARRAY || kind == F_ZMETADATA || kind == F_CHUNK) &&
        layouts_deferred(c->where->node)) {
        zm_source_tally *previous = zm_source_tally_set(&c->stats->build);
        struct timespec began;
        clock_gettime(CLOCK_MONOTONIC, &began);
        int rc = matrices_laid_out(c->view, c->where->node, err);
        c->stats->build_nanoseconds += (uint64_t)(zm__seconds_since(&began) * 1e9);
        zm_source_tally_set(previous);
        if (rc != 0)
            return rc;
    }
    if (c->where->file == F_CHUNK)
        c->stats->chunks_made++;
    else
        c->stats->documents_made++;
    /* A modality's file (under mod/NAME/ of a MuData view): counted in the
     * modality's tally, which the view's counters add to its own. */
    int modality = modality_of(c->view, c->where->node);
    size_t part = modality < 0 ? 0 : (size_t)modality;
    if (modality < 0) {
        zm_source_tally *previous = zm_source_tally_set(&c->stats->source);
        int rc = make_file_bytes(c, bytes, size, err);
        zm_source_tally_set(previous);
        return rc;
    }
    if (c->where->file == F_CHUNK)
        c->stats->modality[part].chunks_made++;
    else
        c->stats->modality[part].documents_made++;
    zm_source_tally *previous = zm_source_tally_set(&c->stats->modality[part].source);
    int rc = make_file_bytes(c, bytes, size, err);
    zm_source_tally_set(previous);
    return rc;
}

static int make_file_bytes(struct make_context *c, uint8_t **bytes, size_t *size, zm_err *err)
{
    const place *w = c->where;
    switch (w->file) {
    case F_ZGROUP:
        return dump(zm_zarr_group_document(), bytes, size, err);
    case F_ZATTRS:
        return dump(json_deep_copy(w->node->attrs), bytes, size, err); /* see consolidate */
    case F_ZARRAY:
        return dump(array_document(c->tree, w->node), bytes, size, err);
    case F_ZMETADATA: {
        json_t *metadata = json_object();
        consolidate(c->tree, w->node, "", metadata);
        return dump(json_pack("{s:o, s:i}", "metadata", metadata, "zarr_consolidated_format", 1), bytes,
                    size, err);
    }
    case F_CHUNK: {
        /* A chunk of a walked array is worth keeping across mounts: making
         * it again means walking the whole array. */
        zm_tree *t = c->tree;
        char disk_key[2048] = "";
        if (t->disk != NULL && zm__kept_on_disk(t, c->view, w->node)) {
            disk_key_of(t, c->key, disk_key, sizeof disk_key);
            zm_err miss;
            zm_err_clear(&miss);
            int got = zm_disk_get(t->disk, t->disk_space, disk_key, bytes, size, &miss);
            if (got == 0)
                return 0;
            kept_failed(t, got, &miss);
        }
        int rc = make_chunk(c, bytes, size, err);
        /* The source checked again after its bytes were read: a change
         * that began while this chunk was made (a write moves the file's
         * time before its bytes land) makes the chunk EIO, never kept or
         * served as a mix of old and new bytes. */
        if (rc == 0 && (rc = zm__tree_check_source(t, err)) != 0) {
            free(*bytes);
            *bytes = NULL;
            *size = 0;
            return rc;
        }
        if (rc == 0 && disk_key[0]) /* filed once the cache holds it */
            memcpy(c->disk_key, disk_key, sizeof disk_key);
        return rc;
    }
    default:
        return zm_err_set(err, -EISDIR, "not a file");
    }
}

/* ---- The disk writer ------------------------------------------------------------- */

/* A chunk to file: a hold on the file cache's entry, so that queueing
 * copies nothing and costs no memory while the cache keeps the entry. */
struct disk_job {
    struct disk_job *next;
    char *key;
    zm_cache_ref ref;
};

/* What may wait to be filed (held from the file cache, which cannot evict
 * it meanwhile): half the file cache (a quarter of cache_size), so that a walk's chunks
 * are filed by the idle-priority writer when a core is free (the reader's
 * pauses, the walk's end) rather than by the threads making them. Past it,
 * the thread that made a chunk files it itself (a write to the page cache:
 * far less than making the chunk took), so that memory stays bounded and
 * nothing is lost. */
static uint64_t disk_queue_bytes(const zm_tree *t)
{
    uint64_t half = t->cache_bytes / 2;
    return half > ((uint64_t)16 << 20) ? half : (uint64_t)16 << 20;
}

static void file_now(zm_tree *t, const char *key, const uint8_t *bytes, size_t size)
{
    zm_err why;
    zm_err_clear(&why);
    if (zm_disk_put(t->disk, t->disk_space, key, bytes, size, &why) != 0 &&
        atomic_exchange(&t->disk_failed, 1) == 0)
        zm_log(LOG_WARNING, "the disk cache could not keep a chunk (%s): serving goes on "
                "from memory and the source", why.reason);
}

static void queue_for_disk(zm_tree *t, const char *key, const zm_cache_ref *ref)
{
    struct disk_job *job = malloc(sizeof *job);
    char *copy = strdup(key);
    pthread_mutex_lock(&t->disk_mutex);
    int writing = !t->disk_stop && t->disk_writing;
    int room = writing && t->disk_queued + ref->size <= disk_queue_bytes(t);
    if (room && job && copy) {
        *job = (struct disk_job){NULL, copy, {0}};
        zm_cache_hold(t->files, ref, &job->ref);
        if (t->disk_tail)
            t->disk_tail->next = job;
        else
            t->disk_head = job;
        t->disk_tail = job;
        t->disk_queued += ref->size;
        job = NULL;
        copy = NULL;
        pthread_cond_signal(&t->disk_wake);
    }
    pthread_mutex_unlock(&t->disk_mutex);
    if (writing && (!room || job != NULL))
        file_now(t, key, ref->bytes, ref->size);
    free(job);
    free(copy);
}

static void *disk_writer(void *context)
{
    zm_tree *t = context;
    /* Idle priority: only when nothing else wants a core. */
    struct sched_param idle = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
    pthread_mutex_lock(&t->disk_mutex);
    for (;;) {
        while (t->disk_head == NULL && !t->disk_stop)
            pthread_cond_wait(&t->disk_wake, &t->disk_mutex);
        struct disk_job *job = t->disk_head;
        if (job == NULL)
            break; /* stopping, and everything queued is filed */
        t->disk_head = job->next;
        if (t->disk_head == NULL)
            t->disk_tail = NULL;
        pthread_mutex_unlock(&t->disk_mutex);
        file_now(t, job->key, job->ref.bytes, job->ref.size);
        size_t size = job->ref.size;
        zm_cache_release(t->files, &job->ref);
        pthread_mutex_lock(&t->disk_mutex);
        t->disk_queued -= size;
        free(job->key);
        free(job);
    }
    pthread_mutex_unlock(&t->disk_mutex);
    return NULL;
}

/* Files what is queued, then stops the writer. */
void zm__stop_disk_writer(zm_tree *t)
{
    pthread_mutex_lock(&t->disk_mutex);
    int writing = t->disk_writing;
    t->disk_stop = 1;
    pthread_cond_broadcast(&t->disk_wake);
    pthread_mutex_unlock(&t->disk_mutex);
    if (writing) {
        /* What is left is filed at normal priority: at idle priority on a
         * busy machine, the unmount waited many seconds behind other work. */
        struct sched_param normal = {0};
        (void)pthread_setschedparam(t->disk_writer, SCHED_OTHER, &normal);
        pthread_join(t->disk_writer, NULL);
    }
    t->disk_writing = 0;
}

/* A chunk's bytes: synthesized, then encoded with the mount's codec. */
static int make_chunk(struct make_context *c, uint8_t **bytes, size_t *size, zm_err *err)
{
    const place *w = c->where;
    {
        uint8_t *raw;
        size_t raw_size, typesize;
        int borrowed = 0;
        int encode = w->node->meta.rank > 0 && c->tree->codec.kind != ZM_CODEC_NONE;
        /* Encoding reads a walk's rows where they lie; a file kept as it is
         * needs its own copy. */
        int rc = zm_synth_chunk(c->tree->synth, c->view, w->node, w->coords, &raw, &raw_size,
                                &typesize, encode ? &borrowed : NULL, err);
        if (rc != 0)
            return rc;
        if (!encode) {
            *bytes = raw;
            *size = raw_size;
            return 0;
        }
        rc = zm_codec_encode(&c->tree->codec, typesize, raw, raw_size, bytes, size, err);
        zm_synth_chunk_done(c->view, w->node, raw, borrowed);
        return rc;
    }
}

/* A file's size without making it, when geometry gives it. */
int zm__known_size(zm_tree *t, const place *w, uint64_t *size)
{
    if (w->file != F_CHUNK || w->node->meta.vlen_utf8 || w->node->producer == ZM_PRODUCE_STRING_SCALAR)
        return 0;
    if (w->node->meta.rank > 0 && t->codec.kind != ZM_CODEC_NONE)
        return 0;
    uint64_t values = 1;
    for (unsigned d = 0; d < w->node->meta.rank; d++)
        values *= w->node->meta.chunks[d];
    *size = values * (w->node->index_int32 ? 4 : w->node->value_size);
    return 1;
}

/* The cache key of a file. uniform and blocks are nested: under one seed
 * (and block size) the first cells of every size are the same cells in the
 * same order, so a chunk of per-cell values that lies wholly inside a view's
 * cells is the same bytes in every larger view of that seed (full/ is
 * uniform at seed 0): such chunks are keyed without k and kept once.
 * Chunks whose values depend on the whole kept set (graphs and CSC matrices
 * renumbered over the kept cells, dense obsp) and the last, padded chunk
 * are keyed by their path. */
static void file_key_text(zm_view *view, const char *full_path, const place *w, char *key,
                          size_t size);

uint64_t zm__file_key(zm_view *view, const char *full_path, const place *w)
{
    char key[1600];
    file_key_text(view, full_path, w, key, sizeof key);
    return path_key(key);
}

/* The key as text: the path, or for a nested chunk the seed, settings and
 * chunk without k. */
static void file_key_text(zm_view *view, const char *full_path, const place *w, char *key,
                          size_t size)
{
    snprintf(key, size, "%s", full_path);
    const zm_store_node *n = w->node;
    const zm_view_spec *spec = zm_view_get_spec(view);
    /* stratified and spatial views are not nested: their allocation
     * changes with k. */
    if (w->file != F_CHUNK || spec->kind == ZM_VIEW_FILE || spec->kind == ZM_VIEW_STRATIFIED ||
        spec->kind == ZM_VIEW_SPATIAL || n->meta.rank == 0 || n->cell_columns ||
        (w->coords[0] + 1) * n->meta.chunks[0] > n->meta.shape[0])
        return;
    if (n->producer == ZM_PRODUCE_ENTRIES || n->producer == ZM_PRODUCE_INDPTR) {
        /* Only a matrix whose rows are the cells and whose columns are not:
         * a CSC matrix's pointers count the kept cells of each gene. */
        zm_view_sparse_info s;
        zm_view_sparse_axes(n->sparse, &s);
        if (!s.per_cell_rows || s.per_cell_columns)
            return;
    }
    char chunk[ZM_ZARR_CHUNK_KEY_MAX];
    zm_zarr_chunk_key(n->meta.rank, w->coords, chunk, sizeof chunk);
    size_t at = (size_t)snprintf(key, size, "nested|%s|%u|%" PRIu64 "|%s|%s|",
                                 spec->kind == ZM_VIEW_BLOCKS ? "blocks" : "uniform",
                                 spec->seed, /* full/: its file's seed */
                                 spec->kind == ZM_VIEW_BLOCKS ? spec->block_size : 0, w->store_path,
                                 chunk);
    for (unsigned d = 0; d < n->meta.rank && at < size; d++)
        at += (size_t)snprintf(key + at, size - at, "%" PRIu64 ",", n->meta.chunks[d]);
    /* Nested over the same cells only: a set's views among themselves. */
    const zm_view_set *set = spec->set;
    if (set != NULL && at < size)
        snprintf(key + at, size - at, "|set=%s", set->digest);
}

int zm__file_in_cache(zm_tree *t, zm_view *view, view_stats *vs, const char *full_path,
                      const place *w, zm_cache_ref *ref, zm_err *err)
{
    char key_text[1600];
    file_key_text(view, full_path, w, key_text, sizeof key_text);
    struct make_context c = {t, view, w, vs, key_text, ""};
    uint64_t key = path_key(key_text);
    int rc = zm_cache_get_for(t->files, key, make_file, &c, &vs->cache, ref, err);
    if (rc == 0)
        size_put(t, key, ref->size);
    if (rc == 0 && c.disk_key[0]) /* this call made it: filed once, by one thread */
        queue_for_disk(t, c.disk_key, ref);
    return rc;
}

/* A kept chunk's size from its disk cache header, without reading it (its
 * bytes are checked when they are read: made again, they are the same). */
int zm__kept_size(zm_tree *t, zm_view *view, const char *path, const place *w, uint64_t *size)
{
    if (t->disk == NULL || w->file != F_CHUNK || !zm__kept_on_disk(t, view, w->node))
        return 0;
    char key_text[1600], disk_key[2048];
    file_key_text(view, path, w, key_text, sizeof key_text);
    disk_key_of(t, key_text, disk_key, sizeof disk_key);
    if (zm_disk_size(t->disk, t->disk_space, disk_key, size) != 0)
        return 0;
    size_put(t, path_key(key_text), *size);
    return 1;
}

/* A file the disk cache holds: its view (held: the caller releases it), the
 * view's counters, its file key (for its size) and its disk key; or
 * -ENOENT. */
static int kept_entry(zm_tree *t, const char *path, zm_view **view_out, view_stats **vs_out,
                      uint64_t *file_key_out, char *disk_key, size_t key_size, zm_err *err)
{
    if (t->disk == NULL)
        return zm_err_set(err, -ENOENT, "%s: no disk cache", path);
    target tg;
    int rc = zm__parse_path(t, path, &tg, err);
    if (rc != 0)
        return rc;
    if (tg.kind != T_VIEW) {
        zm__target_clear(&tg);
        return zm_err_set(err, -ENOENT, "%s: not kept on disk", path);
    }
    zm_view *view;
    rc = zm__view_get(t, &tg, &view, 1, err);
    zm__target_clear(&tg); /* the view holds its set itself */
    if (rc != 0)
        return rc;
    place w;
    rc = zm__locate(view, tg.rest, &w, err);
    if (rc == 0 && (w.file != F_CHUNK || !zm__kept_on_disk(t, view, w.node)))
        rc = zm_err_set(err, -ENOENT, "%s: not kept on disk", path);
    if (rc != 0) {
        zm__view_release(t, view);
        return rc;
    }
    char key_text[1600];
    file_key_text(view, path, &w, key_text, sizeof key_text);
    disk_key_of(t, key_text, disk_key, key_size);
    *file_key_out = path_key(key_text);
    *view_out = view;
    *vs_out = zm__stats_of_target(t, &tg);
    return 0;
}

/* A kept file, lent as a descriptor for passthrough (fd), or read for a
 * push (bytes), and counted so. */
static int kept_file(zm_tree *t, const char *path, int *fd, uint8_t **bytes, uint64_t *size,
                     zm_err *err)
{
    zm_view *view = NULL;
    view_stats *vs = NULL;
    char disk_key[2048];
    uint64_t file_key = 0;
    int rc = kept_entry(t, path, &view, &vs, &file_key, disk_key, sizeof disk_key, err);
    if (rc != 0)
        return rc;
    if (fd != NULL) {
        rc = zm_disk_open_entry(t->disk, t->disk_space, disk_key, fd, size, err);
    } else {
        size_t got = 0;
        rc = zm_disk_get(t->disk, t->disk_space, disk_key, bytes, &got, err);
        *size = got;
    }
    if (rc == 0) {
        size_put(t, file_key, *size);
        atomic_fetch_add(fd != NULL ? &vs->passthrough_opens : &vs->pushed_files, 1);
        atomic_fetch_add(fd != NULL ? &vs->passthrough_bytes : &vs->pushed_bytes, *size);
    }
    kept_failed(t, rc, err);
    zm__view_release(t, view);
    return rc;
}

int zm__tree_open_kept(zm_tree *t, const char *path, int *fd, uint64_t *size, zm_err *err)
{
    *fd = -1;
    *size = 0;
    return kept_file(t, path, fd, NULL, size, err);
}

int zm__tree_read_kept(zm_tree *t, const char *path, uint8_t **bytes, size_t *size, zm_err *err)
{
    *bytes = NULL;
    uint64_t length = 0;
    int rc = kept_file(t, path, NULL, bytes, &length, err);
    *size = (size_t)length;
    return rc;
}

void zm__tree_kernel_reads_kept(zm_tree *t)
{
    t->kernel_reads_kept = 1;
}

int zm__tree_kept_on_disk(zm_tree *t)
{
    return t->disk != NULL && zm_disk_has_space(t->disk, t->disk_space);
}

/* The disk cache, if wanted and usable: entries filed under the source's
 * size, modification time, inode and a hash of its first 64 KiB (the HDF5
 * superblock and root metadata), so a changed source never meets an old
 * entry, and under the versions of the codec libraries that make the
 * chunks' bytes, so a library upgrade never meets one either. A directory that cannot be used is said once in the log and the
 * mount goes on without it, except one given with -o cache_dir= that is
 * not private to the mount's user (anyone else who could write to it could
 * forge what is served): then the mount is refused (-EPERM, err says why). */
int zm__open_disk(zm_tree *t, const zm_tree_options *options, zm_err *err)
{
    if (options->cache_dir != NULL && strcmp(options->cache_dir, "none") == 0)
        return 0;
    int given = options->cache_dir != NULL;
    char directory[4096];
    zm_err why;
    zm_err_clear(&why);
    if (given)
        snprintf(directory, sizeof directory, "%s", options->cache_dir);
    else if (zm_disk_default_directory(directory, sizeof directory, &why) != 0) {
        zm_log(LOG_WARNING, "no disk cache (%s): chunks are kept in memory only", why.reason);
        return 0;
    }
    /* The source's identity (zm__source_identity_text): its size, mtime,
     * inode, the hash of its first 64 KiB or a directory store's manifest
     * digest, the codec libraries that make its chunks' bytes (after an
     * upgrade the old entries are never read again, and go as the bound
     * evicts them), a priority-ordered file's seed and the store format
     * version. */
    zm__source_identity_text(t, 1, t->disk_space, sizeof t->disk_space);
    int rc = zm_disk_open(directory, options->cache_max ? options->cache_max : ZM_DEFAULT_DISK_CACHE_MAX,
                          &t->disk, &why);
    if (rc == -EPERM && given) {
        t->disk = NULL;
        return zm_err_set(err, rc,
                          "-o cache_dir refused: %s; a disk cache must be private to the "
                          "mount's user",
                          why.reason);
    }
    if (rc != 0) {
        zm_log(LOG_WARNING, "no disk cache (%s): chunks are kept in memory only", why.reason);
        t->disk = NULL;
        return 0;
    }
    char example[256];
    uint64_t foreign = zm_disk_foreign(t->disk, example, sizeof example);
    if (foreign > 0)
        zm_log(LOG_INFO,
                "the disk cache %s holds %llu files that are not its own (first: %s): "
                "left alone, never read, counted or removed",
                directory, (unsigned long long)foreign, example);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    t->disk_writing = pthread_create(&t->disk_writer, NULL, disk_writer, t) == 0;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (!t->disk_writing) {
        zm_log(LOG_WARNING,
                "no disk cache (cannot start its writer): chunks are kept in memory only");
        zm_disk_close(t->disk);
        t->disk = NULL;
    }
    return 0;
}
