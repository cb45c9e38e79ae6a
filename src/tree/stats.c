/* The counters of the mount, per view (.zarrmount/stats.json): requests,
 * what making files read and cost, refused paths, the works in progress;
 * the snapshots of stats.json, and the progress teller that tells long work
 * to the log. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tree/tree_internal.h"
#include "zarrmount/text.h"

static const char *const ahead_state_names[] = {"none", "running", "stopped: idle",
                                                "stopped: cache bound", "done", "failed"};

/* ---- Counters -------------------------------------------------------------------- */

double zm__seconds_since(const struct timespec *began)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - began->tv_sec) + (double)(now.tv_nsec - began->tv_nsec) / 1e9;
}

/* The counters of the view with this key, made on first use. */
view_stats *zm__stats_for(zm_tree *t, const char *key)
{
    uint64_t hash = zm_cache_key(key, strlen(key));
    pthread_mutex_lock(&t->stats_mutex);
    view_stats *found = NULL;
    for (size_t i = 0; i < t->view_stats_count && !found; i++)
        if (t->view_stats[i]->key_hash == hash && !strcmp(t->view_stats[i]->key, key))
            found = t->view_stats[i];
    if (found == NULL && t->view_stats_count < MAX_VIEW_STATS) {
        if (t->view_stats_count == t->view_stats_capacity) {
            size_t capacity = t->view_stats_capacity ? t->view_stats_capacity * 2 : 16;
            view_stats **grown = realloc(t->view_stats, capacity * sizeof *grown);
            if (grown != NULL) {
                t->view_stats = grown;
                t->view_stats_capacity = capacity;
            }
        }
        view_stats *vs =
            t->view_stats_count < t->view_stats_capacity ? calloc(1, sizeof *vs) : NULL;
        if (vs != NULL && (vs->key = strdup(key)) != NULL) {
            vs->key_hash = hash;
            t->view_stats[t->view_stats_count++] = vs;
            found = vs;
        } else {
            free(vs);
        }
    }
    pthread_mutex_unlock(&t->stats_mutex);
    /* Past the limit (or out of memory) views share one line. */
    return found ? found : &t->more_views;
}

/* Where a request for a target is counted. */
view_stats *zm__stats_of_target(zm_tree *t, const target *tg)
{
    return tg->kind == T_VIEW ? zm__stats_for(t, tg->key) : &t->outside;
}

/* Counts a refused path (one that does not exist: ENOENT) and keeps its
 * reason, which the log shows only with -d. */
void zm__note_refusal(zm_tree *t, view_stats *vs, const char *path, const zm_err *err)
{
    vs->refused++;
    pthread_mutex_lock(&t->stats_mutex);
    refusal *r = &t->refusals[t->refusals_next];
    zm_text_utf8_copy(r->path, sizeof r->path, path);
    zm_text_utf8_copy(r->reason, sizeof r->reason,
                  err && err->reason[0] ? err->reason : "no such file");
    t->refusals_next = (t->refusals_next + 1) % REFUSALS_KEPT;
    if (t->refusals_count < REFUSALS_KEPT)
        t->refusals_count++;
    pthread_mutex_unlock(&t->stats_mutex);
}

/* ---- Stats: the snapshot and the works in progress ---------------------------------- */

/* Long work, running or lately finished: a pass over the source (a walk, a
 * view's index pointers) or the chunks of a walked array encoded ahead. */
typedef struct work {
    char view[ZM__VIEW_KEY]; /* "" outside any view */
    char what[1100];
    const char *unit;
    uint64_t done, total;
    double seconds;
    int finished;
} work;

/* A copy of the list of view counters (they live as long as the tree), so
 * that no lock is held while they are read. malloc'd; NULL if empty. */
view_stats **zm__stats_list(zm_tree *t, size_t *count)
{
    pthread_mutex_lock(&t->stats_mutex);
    *count = t->view_stats_count;
    view_stats **list = *count ? malloc(*count * sizeof *list) : NULL;
    if (list != NULL)
        memcpy(list, t->view_stats, *count * sizeof *list);
    else
        *count = 0;
    pthread_mutex_unlock(&t->stats_mutex);
    return list;
}

/* Up to capacity works: passes running, encoding running, then (with
 * finished) passes lately done. */
static size_t list_works(zm_tree *t, work *out, size_t capacity, int finished)
{
    size_t count = 0, view_count;
    view_stats **views = zm__stats_list(t, &view_count);
    zm_source_pass passes[WORKS_SHOWN];
    size_t pass_count = zm_source_passes(t->source, passes, WORKS_SHOWN);
    for (size_t i = 0; i < pass_count && count < capacity; i++) {
        const zm_source_pass *p = &passes[i];
        if (p->finished && !finished)
            continue;
        work *w = &out[count++];
        const char *key = "", *doing = "reading";
        for (size_t v = 0; v < view_count; v++) {
            if (p->tally == &views[v]->source) {
                key = views[v]->key;
            } else if (p->tally == &views[v]->build) {
                key = views[v]->key;
                doing = "building: reading";
            }
            for (size_t m = 0; m < ZM__STATS_MODALITIES; m++)
                if (p->tally == &views[v]->modality[m].source)
                    key = views[v]->key;
        }
        snprintf(w->view, sizeof w->view, "%s", key);
        snprintf(w->what, sizeof w->what, "%s %s", doing, p->what);
        w->unit = p->unit;
        w->done = p->done;
        w->total = p->total;
        w->seconds = p->seconds;
        w->finished = p->finished;
    }
    free(views);
    pthread_mutex_lock(&t->mutex);
    for (size_t i = 0; i < t->ahead_count && count < capacity; i++) {
        struct ahead *a = t->ahead[i];
        if (a->running == 0 || a->done >= a->chunks)
            continue;
        work *w = &out[count++];
        snprintf(w->view, sizeof w->view, "%s", a->key);
        snprintf(w->what, sizeof w->what, "encoding ahead %s", a->store_path);
        w->unit = "chunks";
        w->done = a->done;
        w->total = a->chunks;
        w->seconds = zm__seconds_since(&a->began);
        w->finished = 0;
    }
    pthread_mutex_unlock(&t->mutex);
    views = zm__stats_list(t, &view_count);
    for (size_t i = 0; i < view_count && count < capacity; i++) {
        view_stats *vs = views[i];
        pthread_mutex_lock(&t->mutex);
        int running = vs->ahead_state == AHEAD_RUNNING;
        struct timespec began = vs->ahead_began;
        pthread_mutex_unlock(&t->mutex);
        if (!running)
            continue;
        work *w = &out[count++];
        snprintf(w->view, sizeof w->view, "%s", vs->key);
        snprintf(w->what, sizeof w->what, "synthesizing ahead (first cells first)");
        w->unit = "chunks";
        w->done = vs->ahead_run_chunks;
        w->total = vs->ahead_total > w->done ? vs->ahead_total : w->done;
        w->seconds = zm__seconds_since(&began);
        w->finished = 0;
    }
    free(views);
    return count;
}

/* Times to the millisecond and rates to a tenth: what a person reads. */
static double rounded(double value, double unit)
{
    return (double)llround(value / unit) * unit;
}

static double work_rate(const work *w)
{
    return w->seconds > 0 ? (double)w->done / w->seconds : 0;
}

/* "VIEW: WHAT: 45% (1234 of 2741 chunks), 310 chunks/s, about 5 s left". */
static void work_line(const work *w, char *line, size_t size)
{
    double rate = work_rate(w);
    double percent = w->total ? 100.0 * (double)w->done / (double)w->total : 100.0;
    int at = snprintf(line, size, "%s%s%s: %.0f%% (%" PRIu64 " of %" PRIu64 " %s), %.0f %s/s",
                      w->view, w->view[0] ? ": " : "", w->what, percent, w->done, w->total, w->unit,
                      rate, w->unit);
    if (at < 0 || (size_t)at >= size)
        return;
    double left = rate > 0 ? (double)(w->total - w->done) / rate : 0;
    if (rate > 0 && left < 1)
        snprintf(line + at, size - (size_t)at, ", under a second left");
    else if (rate > 0)
        snprintf(line + at, size - (size_t)at, ", about %.0f s left", left);
    else
        snprintf(line + at, size - (size_t)at, ", time left unknown yet");
}

static json_t *work_json(const work *w)
{
    double rate = work_rate(w);
    json_t *o =
        json_pack("{s:s, s:s, s:I, s:I, s:s, s:f, s:f}", "view", w->view, "what", w->what, "done",
                  (json_int_t)w->done, "total", (json_int_t)w->total, "unit", w->unit, "seconds",
                  rounded(w->seconds, 1e-3), "rate", rounded(rate, 0.1));
    if (o != NULL && !w->finished)
        json_object_set_new(o, "secondsLeft",
                            rate > 0 ? json_real(rounded((double)(w->total - w->done) / rate, 1e-3))
                                     : json_null());
    return o;
}

static json_t *tally_json(const zm_source_tally *s)
{
    return json_pack("{s:I, s:I, s:I}", "chunksDecoded", (json_int_t)s->chunks_decoded, "bytesRead",
                     (json_int_t)s->bytes_read, "hdf5Reads", (json_int_t)s->hdf5_reads);
}

/* The requests of a view (or outside views, or a total). */
typedef struct requests {
    uint64_t lookups, opens, listings, reads, bytes_served, refused, failed, chunks_made;
    uint64_t documents_made;
    uint64_t passthrough_opens, passthrough_bytes, pushed_files, pushed_bytes, busy_nanoseconds;
} requests;

static void add_requests(requests *r, const view_stats *vs)
{
    r->lookups += vs->lookups;
    r->opens += vs->opens;
    r->listings += vs->listings;
    r->reads += vs->reads;
    r->bytes_served += vs->bytes_served;
    r->refused += vs->refused;
    r->failed += vs->failed;
    r->chunks_made += vs->chunks_made;
    r->documents_made += vs->documents_made;
    r->passthrough_opens += vs->passthrough_opens;
    r->passthrough_bytes += vs->passthrough_bytes;
    r->pushed_files += vs->pushed_files;
    r->pushed_bytes += vs->pushed_bytes;
    r->busy_nanoseconds += vs->busy_nanoseconds;
}

static json_t *requests_json(const requests *r)
{
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I}, s:{s:I, s:I}, s:f}", "lookups",
        (json_int_t)r->lookups, "opens", (json_int_t)r->opens, "listings", (json_int_t)r->listings,
        "reads", (json_int_t)r->reads, "bytesServed", (json_int_t)r->bytes_served, "refused",
        (json_int_t)r->refused, "failed", (json_int_t)r->failed, "chunksSynthesized",
        (json_int_t)r->chunks_made, "documentsSynthesized", (json_int_t)r->documents_made,
        "passthrough", "opens", (json_int_t)r->passthrough_opens, "bytes",
        (json_int_t)r->passthrough_bytes, "pushed", "files", (json_int_t)r->pushed_files, "bytes",
        (json_int_t)r->pushed_bytes, "daemonSeconds",
        rounded((double)r->busy_nanoseconds / 1e9, 1e-6));
}

static json_t *view_json(zm_tree *t, const view_stats *vs)
{
    requests r = {0};
    add_requests(&r, vs);
    json_t *o = requests_json(&r);
    zm_cache_account c;
    zm_cache_account_read(t->files, &vs->cache, &c);
    json_object_set_new(o, "cache",
                        json_pack("{s:I, s:I, s:I, s:I, s:I}", "hits", (json_int_t)c.hits, "misses",
                                  (json_int_t)c.misses, "evictions", (json_int_t)c.evictions,
                                  "bytesHeld", (json_int_t)c.bytes_held, "entries",
                                  (json_int_t)c.entries));
    /* What making its files read: its modalities' files' too. */
    zm_source_tally read = {0};
    read.chunks_decoded = vs->source.chunks_decoded;
    read.bytes_read = vs->source.bytes_read;
    read.hdf5_reads = vs->source.hdf5_reads;
    for (size_t m = 0; m < ZM__STATS_MODALITIES; m++) {
        read.chunks_decoded += vs->modality[m].source.chunks_decoded;
        read.bytes_read += vs->modality[m].source.bytes_read;
        read.hdf5_reads += vs->modality[m].source.hdf5_reads;
    }
    json_object_set_new(o, "source", tally_json(&read));
    /* A MuData view's modalities: their share of the files made and of what
     * making them read. */
    size_t modalities = zm_source_modality_count(t->source);
    if (modalities > 0 && vs->key[0]) {
        json_t *mods = json_object();
        for (size_t i = 0; i < modalities && i < ZM__STATS_MODALITIES; i++)
            json_object_set_new(
                mods, zm_source_modality_name(t->source, i),
                json_pack("{s:I, s:I, s:o}", "chunksSynthesized",
                          (json_int_t)vs->modality[i].chunks_made, "documentsSynthesized",
                          (json_int_t)vs->modality[i].documents_made, "source",
                          tally_json(&vs->modality[i].source)));
        json_object_set_new(o, "modalities", mods);
    }
    /* What the view holds for its cells now (0 when it is not built). */
    uint64_t held = 0;
    pthread_mutex_lock(&t->mutex);
    for (size_t i = 0; i < t->view_count; i++)
        if (strcmp(t->views[i].key, vs->key) == 0)
            held = zm_view_bytes(t->views[i].view);
    pthread_mutex_unlock(&t->mutex);
    json_object_set_new(o, "build",
                        json_pack("{s:I, s:f, s:o, s:I}", "builds", (json_int_t)vs->builds,
                                  "seconds", rounded((double)vs->build_nanoseconds / 1e9, 1e-3),
                                  "source", tally_json(&vs->build), "bytesHeld", (json_int_t)held));
    pthread_mutex_lock(&t->mutex);
    int state = vs->ahead_state;
    char reason[sizeof vs->ahead_reason];
    snprintf(reason, sizeof reason, "%s", vs->ahead_reason);
    pthread_mutex_unlock(&t->mutex);
    json_t *ahead = json_pack("{s:s, s:I, s:I, s:I, s:I}", "state", ahead_state_names[state],
                              "chunks", (json_int_t)vs->ahead_chunks, "bytes",
                              (json_int_t)vs->ahead_bytes, "runs", (json_int_t)vs->ahead_runs,
                              "leftToReaders", (json_int_t)vs->ahead_left);
    if (state == AHEAD_FAILED)
        json_object_set_new(ahead, "reason", json_string(reason));
    json_object_set_new(o, "ahead", ahead);
    return o;
}

static json_t *stats_document(zm_tree *t, uint64_t serial)
{
    size_t view_count;
    view_stats **list = zm__stats_list(t, &view_count);
    json_t *views = json_object();
    requests total = {0};
    for (size_t i = 0; i < view_count; i++) {
        json_object_set_new(views, list[i]->key, view_json(t, list[i]));
        add_requests(&total, list[i]);
    }
    free(list);
    if (t->more_views.lookups || t->more_views.listings || t->more_views.reads)
        json_object_set_new(views, "(more views)", view_json(t, &t->more_views));
    add_requests(&total, &t->more_views);
    requests outside = {0};
    add_requests(&outside, &t->outside);
    add_requests(&total, &t->outside);

    json_t *sum = requests_json(&total);
    zm_cache_stats c;
    zm_cache_get_stats(t->files, &c);
    json_object_set_new(sum, "cache",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "hits", (json_int_t)c.hits,
                                  "misses", (json_int_t)c.misses, "evictions",
                                  (json_int_t)c.evictions, "bytesHeld", (json_int_t)c.bytes_held,
                                  "entries", (json_int_t)c.entries, "capacityBytes",
                                  (json_int_t)c.capacity_bytes));
    zm_source_stats s;
    zm_source_get_stats(t->source, &s);
    json_object_set_new(
        sum, "source",
        json_pack("{s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}}", "chunksDecoded",
                  (json_int_t)s.chunks_decoded, "bytesRead", (json_int_t)s.bytes_read, "hdf5Reads",
                  (json_int_t)s.hdf5_reads, "chunkCache", "hits", (json_int_t)s.cache_hits,
                  "misses", (json_int_t)s.cache_misses, "evictions", (json_int_t)s.cache_evictions,
                  "bytesHeld", (json_int_t)s.cache_bytes));

    zm_synth_walk_stats ws;
    zm_synth_get_walk_stats(t->synth, &ws);
    json_object_set_new(sum, "walks",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "heldBytes",
                                  (json_int_t)ws.held_bytes, "limitBytes",
                                  (json_int_t)ws.limit_bytes, "spilled", (json_int_t)ws.spilled,
                                  "spilledBytes", (json_int_t)ws.spilled_bytes, "reclaimed",
                                  (json_int_t)ws.reclaimed, "releasedBytes",
                                  (json_int_t)ws.released_bytes));

    work works[WORKS_SHOWN];
    size_t work_count = list_works(t, works, WORKS_SHOWN, 1);
    json_t *running = json_array(), *recent = json_array();
    for (size_t i = 0; i < work_count; i++)
        json_array_append_new(works[i].finished ? recent : running, work_json(&works[i]));

    json_t *refused = json_array();
    pthread_mutex_lock(&t->stats_mutex);
    for (unsigned i = 0; i < t->refusals_count; i++) {
        const refusal *r = &t->refusals[(t->refusals_next + REFUSALS_KEPT - 1 - i) % REFUSALS_KEPT];
        json_array_append_new(refused,
                              json_pack("{s:s, s:s}", "path", r->path, "reason", r->reason));
    }
    pthread_mutex_unlock(&t->stats_mutex);

    /* The disk cache (null when off): across mounts, so it is not per view. */
    json_t *disk = json_null();
    if (t->disk != NULL) {
        zm_disk_stats d;
        zm_disk_get_stats(t->disk, &d);
        disk = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "hits",
                         (json_int_t)d.hits, "misses", (json_int_t)d.misses, "writes",
                         (json_int_t)d.writes, "evictions", (json_int_t)d.evictions, "damaged",
                         (json_int_t)d.damaged, "migrated", (json_int_t)d.migrated, "foreign",
                         (json_int_t)d.foreign,
                         "bytesHeld", (json_int_t)d.bytes_held, "entries", (json_int_t)d.entries,
                         "capacityBytes", (json_int_t)d.capacity_bytes);
    }
    return json_pack("{s:s, s:s, s:I, s:f, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "version", ZM_VERSION,
                     "source", t->source_text, "snapshot", (json_int_t)serial, "uptimeSeconds",
                     rounded(zm__seconds_since(&t->mounted), 1e-3), "total", sum, "views", views,
                     "outsideViews", requests_json(&outside), "works", running, "recentWorks",
                     recent, "refusals", refused, "diskCache", disk);
}

/* The snapshot with this serial (0: the newest), or NULL. Under stats_mutex. */
snapshot *zm__find_snapshot(zm_tree *t, uint64_t serial)
{
    snapshot *s = t->snapshots;
    while (s != NULL && serial != 0 && s->serial != serial)
        s = s->next;
    return s;
}

/* The serial of a snapshot's path, STATS_PATH "@<serial>" (0 for any
 * other path: STATS_PATH itself means the newest). */
uint64_t zm__snapshot_serial_of(const char *path)
{
    size_t n = strlen(STATS_PATH);
    uint64_t serial;
    if (strncmp(path, STATS_PATH, n) != 0 || path[n] != '@' ||
        zm__parse_number(path + n + 1, strlen(path + n + 1), 1, UINT64_MAX, &serial) != 0)
        return 0;
    return serial;
}

/* Takes a new snapshot of the counters as stats.json, for a lookup; its
 * size to *size, its serial to *serial. Two snapshots in a row never have
 * the same size: the kernel drops the pages it kept of a file whose size
 * changes (FUSE keeps pages across opens, and this daemon lets the kernel
 * open files without asking), should it read the file as STATS_PATH. */
int zm__take_snapshot(zm_tree *t, uint64_t *size, uint64_t *serial)
{
    pthread_mutex_lock(&t->snapshot_taking);
    pthread_mutex_lock(&t->stats_mutex);
    uint64_t number = ++t->snapshot_serial;
    pthread_mutex_unlock(&t->stats_mutex);
    json_t *document = stats_document(t, number);
    char *text = document ? json_dumps(document, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(document);
    size_t length = text ? strlen(text) : 0;
    char *bytes = text ? malloc(length + 3) : NULL;
    snapshot *s = bytes ? malloc(sizeof *s) : NULL;
    if (s == NULL) {
        free(bytes);
        free(text);
        pthread_mutex_unlock(&t->snapshot_taking);
        return -ENOMEM;
    }
    memcpy(bytes, text, length);
    free(text);
    bytes[length++] = '\n';
    pthread_mutex_lock(&t->stats_mutex);
    if (length == t->snapshot_last_size)
        bytes[length++] = '\n';
    *s = (snapshot){t->snapshots, number, bytes, length};
    t->snapshots = s;
    t->snapshot_last_size = length;
    if (++t->snapshot_count > SNAPSHOTS_KEPT) {
        /* The kernel forgets inodes it no longer uses; should it not,
         * the oldest snapshot goes (a read of it fails). */
        snapshot **last = &t->snapshots;
        while ((*last)->next != NULL)
            last = &(*last)->next;
        free((*last)->bytes);
        free(*last);
        *last = NULL;
        t->snapshot_count--;
    }
    *size = length;
    *serial = number;
    pthread_mutex_unlock(&t->stats_mutex);
    pthread_mutex_unlock(&t->snapshot_taking);
    return 0;
}

void zm__tree_release_snapshot(zm_tree *t, uint64_t serial)
{
    pthread_mutex_lock(&t->stats_mutex);
    for (snapshot **at = &t->snapshots; *at != NULL; at = &(*at)->next)
        if ((*at)->serial == serial) {
            snapshot *gone = *at;
            *at = gone->next;
            free(gone->bytes);
            free(gone);
            t->snapshot_count--;
            break;
        }
    pthread_mutex_unlock(&t->stats_mutex);
}

/* The progress teller: every second, the works running longer than
 * PROGRESS_AFTER_SECONDS, told every PROGRESS_EVERY_SECONDS. */
static int same_work(const work *a, const work *b)
{
    return !strcmp(a->view, b->view) && !strcmp(a->what, b->what);
}

/* Tells that the works told about before and no longer running are done,
 * with what they took when the source kept it (passes). */
static void tell_done(zm_tree *t, work *told, size_t *told_count, const work *running,
                      size_t running_count)
{
    work finished[WORKS_SHOWN];
    size_t finished_count = 0;
    for (size_t i = 0; i < *told_count;) {
        int still = 0;
        for (size_t j = 0; j < running_count && !still; j++)
            still = same_work(&told[i], &running[j]);
        if (still) {
            i++;
            continue;
        }
        if (finished_count == 0)
            finished_count = list_works(t, finished, WORKS_SHOWN, 1);
        char line[1400];
        const work *w = NULL;
        for (size_t j = 0; j < finished_count && !w; j++)
            if (finished[j].finished && same_work(&finished[j], &told[i]))
                w = &finished[j];
        if (w)
            snprintf(line, sizeof line, "%s%s%s: done, %" PRIu64 " %s in %.1f s (%.0f %s/s)",
                     w->view, w->view[0] ? ": " : "", w->what, w->done, w->unit, w->seconds,
                     work_rate(w), w->unit);
        else
            snprintf(line, sizeof line, "%s%s%s: done", told[i].view, told[i].view[0] ? ": " : "",
                     told[i].what);
        t->progress(t->progress_context, line);
        told[i] = told[--*told_count];
    }
}

static void *tell_progress(void *context)
{
    zm_tree *t = context;
    struct timespec last_told = {0, 0};
    int told = 0;
    work told_works[WORKS_SHOWN]; /* on this thread's stack: TLS would cost every thread */
    size_t told_count = 0;
    pthread_mutex_lock(&t->teller_mutex);
    while (!t->teller_stop) {
        struct timespec wake;
        clock_gettime(CLOCK_MONOTONIC, &wake);
        wake.tv_sec += 1;
        pthread_cond_timedwait(&t->teller_wake, &t->teller_mutex, &wake);
        if (t->teller_stop)
            break;
        pthread_mutex_unlock(&t->teller_mutex);
        work works[WORKS_SHOWN];
        size_t count = list_works(t, works, WORKS_SHOWN, 0);
        int long_work = 0;
        for (size_t i = 0; i < count; i++)
            long_work |= works[i].seconds >= PROGRESS_AFTER_SECONDS;
        tell_done(t, told_works, &told_count, works, count);
        if (long_work && (!told || zm__seconds_since(&last_told) >= PROGRESS_EVERY_SECONDS)) {
            for (size_t i = 0; i < count; i++) {
                if (works[i].seconds < PROGRESS_AFTER_SECONDS)
                    continue;
                char line[1400];
                work_line(&works[i], line, sizeof line);
                t->progress(t->progress_context, line);
                int known = 0;
                for (size_t j = 0; j < told_count && !known; j++)
                    known = same_work(&told_works[j], &works[i]);
                if (!known && told_count < WORKS_SHOWN)
                    told_works[told_count++] = works[i];
            }
            clock_gettime(CLOCK_MONOTONIC, &last_told);
            told = 1;
        }
        pthread_mutex_lock(&t->teller_mutex);
    }
    pthread_mutex_unlock(&t->teller_mutex);
    return NULL;
}

void zm__start_teller(zm_tree *t)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&t->teller_wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&t->teller_mutex, NULL);
    t->telling = pthread_create(&t->teller, NULL, tell_progress, t) == 0;
    if (!t->telling) {
        pthread_cond_destroy(&t->teller_wake);
        pthread_mutex_destroy(&t->teller_mutex);
    }
}

void zm__stop_teller(zm_tree *t)
{
    if (!t->telling)
        return;
    pthread_mutex_lock(&t->teller_mutex);
    t->teller_stop = 1;
    pthread_cond_signal(&t->teller_wake);
    pthread_mutex_unlock(&t->teller_mutex);
    pthread_join(t->teller, NULL);
    pthread_cond_destroy(&t->teller_wake);
    pthread_mutex_destroy(&t->teller_mutex);
    t->telling = 0;
}
