/* The mounted tree as paths: the views (full/, file/, uniform/, blocks/),
 * each an AnnData Zarr store whose files are made when read, and
 * .zarrmount/info.json. No FUSE here: fuse.c serves these calls. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "fs/log.h"
#include "fs/tree.h"
#include "zarrmount/cache.h"
#include "zarrmount/config.h"
#include "zarrmount/source.h"
#include "zarrmount/synth.h"
#include "zarrmount/view.h"
#include "zarrmount/zarr.h"

#define MAX_VIEWS 32

/* Views counted one by one; more distinct views than this share one line. */
#define MAX_VIEW_STATS 1024
/* Refused paths remembered with their reasons, newest first. */
#define REFUSALS_KEPT 8
/* Works (passes and encoding ahead) shown at once. */
#define WORKS_SHOWN 32
/* A work running this long is told to the log, every PROGRESS_EVERY seconds. */
#define PROGRESS_AFTER_SECONDS 3.0
#define PROGRESS_EVERY_SECONDS 5.0
/* stats.json snapshots kept at once, at most (each goes when the kernel
 * forgets its inode; past this, the oldest goes first). */
#define SNAPSHOTS_KEPT 256
/* The name of a snapshot's inode: the file's path, "@" and its serial. */
#define STATS_PATH ".zarrmount/stats.json"

/* What a view cost since the mount, by its key. Requests counted are the
 * ones that reached the daemon (the kernel answers the rest from what it
 * keeps). Kept for the mount's life, even when the view itself is dropped
 * and built again. */
typedef struct view_stats {
    char *key;         /* the view's key; "" for paths outside views */
    uint64_t key_hash; /* of the key: every request finds its view's counters */
    _Atomic uint64_t lookups, opens, listings, reads, bytes_served, refused;
    /* Requests that met a file whose bytes could not be made: lookups that
     * found one (answered, the file marked failed), its opens and reads
     * (refused with EIO). */
    _Atomic uint64_t failed;
    _Atomic uint64_t chunks_made, documents_made; /* loads of the file cache, by kind */
    /* Files the kernel read straight from the disk cache (FUSE passthrough):
     * their opens and their bytes (whether read whole or not). */
    _Atomic uint64_t passthrough_opens, passthrough_bytes;
    /* Files written into the kernel's page cache from the disk cache after a
     * listing (fs/push.h), and their bytes. */
    _Atomic uint64_t pushed_files, pushed_bytes;
    _Atomic uint64_t builds, build_nanoseconds;
    /* Time the daemon took over its lookups, listings and reads (building
     * it, making files and the reads from disk included): against a
     * reader's own time, which side the time went to. */
    _Atomic uint64_t busy_nanoseconds;
    zm_cache_account cache; /* its gets of synthesized files, and what its loads hold */
    zm_source_tally source; /* what making its files read */
    zm_source_tally build;  /* what building it read (its cells, index pointers) */
    /* Synthesis ahead (one worker per view at most; state under the tree's
     * mutex): the view's chunks made before they are asked for. */
    _Atomic int ahead_state;         /* ahead_state values; changed under the tree's mutex */
    _Atomic int64_t last_read_ns;    /* the last request a reader made in the view */
    _Atomic uint64_t ahead_chunks, ahead_bytes, ahead_runs;
    _Atomic uint64_t ahead_total;    /* chunks in the view's store */
    _Atomic uint64_t ahead_run_chunks; /* chunks made (or found made) by the running worker */
    _Atomic int ahead_background;    /* the worker's pool flag: 0 while a reader waits for it */
    _Atomic pid_t ahead_tid;         /* the worker's thread */
    const zm_store_node *_Atomic ahead_node; /* the array it makes a chunk of, or NULL */
    struct timespec ahead_began;
    char ahead_reason[256];          /* why it stopped failing */
} view_stats;

enum ahead_state { AHEAD_NONE, AHEAD_RUNNING, AHEAD_IDLE, AHEAD_BOUND, AHEAD_DONE, AHEAD_FAILED };
static const char *const ahead_state_names[] = {"none", "running", "stopped: idle",
                                                "stopped: cache bound", "done", "failed"};

typedef struct refusal {
    char path[256];
    char reason[256];
} refusal;

typedef struct view_entry {
    char *key;          /* "uniform/seed0/k=1000", "blocks/B=64/seed3/k=10", "full", "file" */
    zm_view *view;
    int refs;
    uint64_t last_used;
} view_entry;

/* Exact sizes of files already made, by path hash (open addressing). */
typedef struct size_map {
    uint64_t *keys, *sizes;
    size_t capacity, count;
} size_map;

struct zm_tree {
    char *source_path;
    char *source_text; /* source_path as UTF-8 (other bytes as '?'): JSON holds nothing else */
    zm_source *source;
    zm_source_identity identity;
    /* Chunks of walked views kept across mounts, filed under the source's
     * identity and the codec libraries that make the chunks' bytes (NULL:
     * off, or the directory could not be used). */
    zm_disk *disk;
    char disk_space[512];
    _Atomic int disk_failed; /* a write failed: said once in the log */
    _Atomic int disk_read_failed; /* an entry was damaged or unreadable: said once */
    /* Chunks the disk cache holds reach readers by the kernel (passthrough,
     * or pushed into its page cache): nothing makes them ahead in memory. */
    _Atomic int kernel_reads_kept;
    /* Entries go to disk from a queue, by a thread that runs only when a
     * core is idle: a walk is never slowed by filing what it made. */
    pthread_mutex_t disk_mutex;
    pthread_cond_t disk_wake;
    struct disk_job *disk_head, *disk_tail;
    uint64_t disk_queued;
    int disk_stop;
    int disk_writing;
    pthread_t disk_writer;
    zm_codec codec;
    uint64_t chunk_bytes;
    zm_block_size b0;
    zm_cache *files;
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    view_entry views[MAX_VIEWS];
    size_t view_count;
    int building;        /* a view is being built (one at a time) */
    _Atomic int view_waiters; /* requests waiting for a view to be let go (under mutex) */
    uint64_t clock;
    size_map sizes;
    char *info;          /* .zarrmount/info.json */
    size_t info_size;
    uint64_t cache_bytes;
    /* Encoding ahead: the arrays being (or made) encoded in the background,
     * their shared states, and the threads still at it (close waits). */
    struct ahead **ahead;
    size_t ahead_count;
    int ahead_running;
    unsigned ahead_threads;
    _Atomic int closing;      /* encoding ahead stops at its next chunk */
    /* Synthesis ahead: a view's workers stop when no reader has asked
     * anything of it for ahead_idle_ns (0: never start), and make at most
     * ahead_rate chunks a second (0: as fast as an idle core goes). */
    int64_t ahead_idle_ns;
    double ahead_rate;
    /* Counters (.zarrmount/stats.json): per view, and for paths outside
     * views; the refused paths last seen; the snapshot served. */
    pthread_mutex_t stats_mutex;
    view_stats **view_stats;
    size_t view_stats_count, view_stats_capacity;
    view_stats outside, more_views;
    refusal refusals[REFUSALS_KEPT];
    unsigned refusals_next, refusals_count;
    /* stats.json: every lookup takes a snapshot, newest first here, read
     * under a path (an inode) of its own until the kernel forgets it: the
     * kernel has one size for an inode, and takes a large file in several
     * reads, so readers sharing one inode could see two snapshots mixed.
     * Snapshots are taken one at a time (their documents can be large). */
    struct snapshot *snapshots;
    size_t snapshot_count;
    size_t snapshot_last_size;
    uint64_t snapshot_serial;
    pthread_mutex_t snapshot_taking;
    struct timespec mounted;
    /* The progress teller (options.progress): a thread waking every second. */
    void (*progress)(void *context, const char *line);
    void *progress_context;
    pthread_t teller;
    int telling;
    pthread_mutex_t teller_mutex;
    pthread_cond_t teller_wake;
    int teller_stop;
};

/* ---- Sizes ----------------------------------------------------------------- */

static int size_get(zm_tree *t, uint64_t key, uint64_t *size)
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

/* ---- Paths --------------------------------------------------------------------- */

/* A path in a reason: at most SHOWN_MAX bytes of it, then "..." (a name may
 * be 4095 bytes long; the reason must keep its last words). For "%.*s%s". */
#define SHOWN_MAX 120
#define SHOWN(text)                                                                                \
    (int)(strlen(text) > SHOWN_MAX ? SHOWN_MAX : strlen(text)), (text),                            \
        strlen(text) > SHOWN_MAX ? "..." : ""

/* A canonical decimal (no sign, no leading zero) in [low, high]. */
static int parse_number(const char *text, size_t length, uint64_t low, uint64_t high, uint64_t *out)
{
    if (length == 0 || length > 20 || (text[0] == '0' && length > 1))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] < '0' || text[i] > '9')
            return -1;
        unsigned digit = (unsigned)(text[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    if (v < low || v > high)
        return -1;
    *out = v;
    return 0;
}

/* A view's key: the method's path with every setting spelled out. */
#define ZM__VIEW_KEY 640

typedef enum target_kind {
    T_ROOT,
    T_INFO_DIR,
    T_INFO_FILE,
    T_STATS_FILE, /* .zarrmount/stats.json */
    T_METHOD,     /* uniform/, blocks/, stratified/, spatial/ */
    T_BLOCK,      /* blocks/B=<B>/ */
    T_FIELD,      /* stratified/<obs key>/, spatial/<obsm key>/ */
    T_ALLOC,      /* stratified/<key>/<allocation>/ */
    T_MINIMUM,    /* stratified/<key>/<allocation>/min=<m>/ */
    T_GRID,       /* spatial/<key>/G=<G>/ */
    T_COLUMNS,    /* spatial/<key>/G=<G>/cols=<i,j,l>/ */
    T_SEED,       /* .../seed<S>/ */
    T_LINK,       /* .../seed<S>/share=<x> or pct=<x>: a link to k=<K> */
    T_VIEW,       /* a view, and a path inside it */
} target_kind;

typedef struct target {
    target_kind kind;
    zm_view_spec spec;
    char key[ZM__VIEW_KEY];  /* the view's key */
    char link[64];           /* T_LINK: the k= directory it points to */
    const char *rest;    /* inside the view */
} target;

static size_t component(const char *p) { const char *s = strchr(p, '/'); return s ? (size_t)(s - p) : strlen(p); }

/* The next component of *p (its length), moving *p past it. */
static size_t take(const char **p, const char **part)
{
    *part = *p;
    size_t n = component(*p);
    *p = (*p)[n] ? *p + n + 1 : *p + n;
    return n;
}

/* "seed<S>", then nothing (T_SEED), or a size: k=<K> (a view), share= or
 * pct= (a link to the k= it resolves to). */
static int parse_seed_and_size(zm_tree *t, const char *p, const char *prefix, target *out,
                               zm_err *err)
{
    const char *part;
    size_t n = take(&p, &part);
    uint64_t seed;
    if (n < 5 || strncmp(part, "seed", 4) || parse_number(part + 4, n - 4, 0, UINT32_MAX, &seed) != 0)
        return zm_err_set(err, -ENOENT,
                          "%.*s: expected seed<S> with S a canonical decimal in 0..4294967295",
                          (int)(n > 80 ? 80 : n), part);
    out->spec.seed = (uint32_t)seed;
    if (*p == '\0') {
        out->kind = T_SEED;
        return 0;
    }
    n = take(&p, &part);
    uint64_t n_obs = zm_source_n_obs(t->source);
    if ((n > 6 && !strncmp(part, "share=", 6)) || (n > 4 && !strncmp(part, "pct=", 4))) {
        int share = part[0] == 's';
        size_t skip = share ? 6 : 4;
        char text[64];
        if (n - skip >= sizeof text)
            return zm_err_set(err, -ENOENT, "%.*s: too long a size", (int)(n > 80 ? 80 : n), part);
        memcpy(text, part + skip, n - skip);
        text[n - skip] = '\0';
        uint64_t k;
        zm_err why;
        zm_err_clear(&why);
        if (zm_size_from_text(text, share ? ZM_SHARE_FRACTION : ZM_SHARE_PERCENT, n_obs, &k, &why) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: %s", (int)n, part, why.reason);
        snprintf(out->link, sizeof out->link, "k=%" PRIu64, k);
        if (*p == '\0') {
            out->kind = T_LINK;
            return 0;
        }
        /* A path through the link (the kernel follows links itself; explain
         * gets them whole): the k= view it names. */
        out->spec.k = k;
        goto view;
    }
    if (n < 3 || strncmp(part, "k=", 2))
        return zm_err_set(err, -ENOENT, "%.*s: expected k=<K>, share=<fraction> or pct=<percent>",
                          (int)(n > 80 ? 80 : n), part);
    if (parse_number(part + 2, n - 2, 0, UINT64_MAX, &out->spec.k) != 0)
        return zm_err_set(err, -ENOENT, "%.*s: k is a canonical decimal", (int)(n > 80 ? 80 : n),
                          part);
    if (out->spec.k == 0)
        return zm_err_set(err, -ENOENT, "%.*s: k = 0 is refused: a subsample keeps at least one cell",
                          (int)n, part);
view:
    out->kind = T_VIEW;
    out->rest = p;
    int length = snprintf(out->key, sizeof out->key, "%s/seed%u/k=%" PRIu64, prefix,
                          out->spec.seed, out->spec.k);
    if (length < 0 || (size_t)length >= sizeof out->key)
        return zm_err_set(err, -ENAMETOOLONG, "%s: too long a view", prefix);
    return 0;
}

/* A key from the path: one component, at most ZM_VIEW_KEY_MAX - 1 bytes. */
static int copy_key(const char *part, size_t n, char *key, zm_err *err)
{
    if (n == 0 || n >= ZM_VIEW_KEY_MAX)
        return zm_err_set(err, -ENOENT, "%.*s: not a key", (int)(n > 80 ? 80 : n), part);
    memcpy(key, part, n);
    key[n] = '\0';
    return 0;
}

static int parse_stratified(zm_tree *t, const char *p, target *out, zm_err *err)
{
    const char *part;
    size_t n = take(&p, &part);
    int rc = copy_key(part, n, out->spec.field, err);
    if (rc != 0)
        return rc;
    if ((rc = zm_view_field_check(t->source, out->spec.field, err)) != 0)
        return rc == -EINVAL || rc == -ENOENT ? -ENOENT : rc;
    out->spec.allocation = ZM_ALLOCATION_PROPORTIONAL;
    out->spec.minimum = 0;
    if (*p == '\0') {
        out->kind = T_FIELD;
        return 0;
    }
    if (strncmp(p, "seed", 4) != 0) {
        n = take(&p, &part);
        char name[32] = "";
        if (n < sizeof name)
            memcpy(name, part, n);
        if (zm_allocation_from_name(name, &out->spec.allocation) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: expected proportional, balanced or seed<S>",
                              (int)(n > 80 ? 80 : n), part);
        if (*p == '\0') {
            out->kind = T_ALLOC;
            return 0;
        }
        n = take(&p, &part);
        if (n < 5 || strncmp(part, "min=", 4) ||
            parse_number(part + 4, n - 4, 0, UINT32_MAX, &out->spec.minimum) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: expected min=<m>, m a canonical decimal",
                              (int)(n > 80 ? 80 : n), part);
        if (*p == '\0') {
            out->kind = T_MINIMUM;
            return 0;
        }
    }
    char prefix[ZM__VIEW_KEY];
    snprintf(prefix, sizeof prefix, "stratified/%s/%s/min=%" PRIu64, out->spec.field,
             zm_allocation_name(out->spec.allocation), out->spec.minimum);
    return parse_seed_and_size(t, p, prefix, out, err);
}

/* The kernel's refusal of a grid that does not depend on the cells: G^d <
 * 2^53 (d the number of columns), as ENOENT with its reason. */
static int grid_fits(const char *embedding, uint64_t grid_size, unsigned dims, zm_err *err)
{
    double origin = 0;
    zm_request check = {.method = ZM_METHOD_SPATIAL, .n = 1, .k = 1, .coords = &origin,
                        .dims = dims, .grid_size = grid_size};
    zm_err why;
    zm_err_clear(&why);
    if (dims > 0 && zm_request_check(&check, &why) != 0)
        return zm_err_set(err, -ENOENT, "spatial/%s: %s", embedding, why.reason);
    return 0;
}

static int parse_spatial(zm_tree *t, const char *p, target *out, zm_err *err)
{
    const char *part;
    size_t n = take(&p, &part);
    int rc = copy_key(part, n, out->spec.embedding, err);
    if (rc != 0)
        return rc;
    uint64_t columns;
    if ((rc = zm_view_embedding_columns(t->source, out->spec.embedding, &columns, err)) != 0)
        return rc == -EINVAL || rc == -ENOENT ? -ENOENT : rc;
    out->spec.grid_size = ZM_DEFAULT_GRID_SIZE;
    int columns_given = 0;
    out->spec.column_count = columns < 3 ? (unsigned)columns : 3;
    for (unsigned c = 0; c < out->spec.column_count; c++)
        out->spec.columns[c] = c;
    if (*p == '\0') {
        out->kind = T_FIELD;
        return 0;
    }
    if (strncmp(p, "seed", 4) != 0) {
        n = take(&p, &part);
        if (n < 3 || strncmp(part, "G=", 2) ||
            parse_number(part + 2, n - 2, 1, UINT64_MAX, &out->spec.grid_size) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: expected G=<G> (G ≥ 1, canonical) or seed<S>",
                              (int)(n > 80 ? 80 : n), part);
        /* A grid no column fits (G ≥ 2^53) holds nothing: it does not exist. */
        if ((rc = grid_fits(out->spec.embedding, out->spec.grid_size, 1, err)) != 0)
            return rc;
        if (*p == '\0') {
            out->kind = T_GRID;
            return 0;
        }
        n = take(&p, &part);
        if (n < 6 || strncmp(part, "cols=", 5))
            return zm_err_set(err, -ENOENT, "%.*s: expected cols=<i>[,<j>[,<l>]]",
                              (int)(n > 80 ? 80 : n), part);
        unsigned count = 0;
        const char *c = part + 5, *end = part + n;
        for (;;) {
            const char *comma = memchr(c, ',', (size_t)(end - c));
            size_t length = comma ? (size_t)(comma - c) : (size_t)(end - c);
            uint64_t column;
            if (count == 3 || parse_number(c, length, 0, UINT32_MAX, &column) != 0)
                return zm_err_set(err, -ENOENT,
                                  "%.*s: one to three columns, canonical decimals, comma-separated",
                                  (int)(n > 80 ? 80 : n), part);
            if (column >= columns)
                return zm_err_set(err, -ENOENT, "%.*s: obsm/%s has %" PRIu64 " columns",
                                  (int)(n > 80 ? 80 : n), part, out->spec.embedding, columns);
            out->spec.columns[count++] = (unsigned)column;
            if (comma == NULL)
                break;
            c = comma + 1;
        }
        out->spec.column_count = count;
        columns_given = 1;
    }
    /* The refusal that does not depend on the cells, here: G^d < 2^53 (a
     * cols= directory whose grid is refused does not exist either). */
    rc = grid_fits(out->spec.embedding, out->spec.grid_size, out->spec.column_count, err);
    if (rc != 0)
        return rc;
    if (columns_given && *p == '\0') {
        out->kind = T_COLUMNS;
        return 0;
    }
    char prefix[ZM__VIEW_KEY], cols[48] = "";
    for (unsigned i = 0; i < out->spec.column_count; i++)
        snprintf(cols + strlen(cols), sizeof cols - strlen(cols), "%s%u", i ? "," : "",
                 out->spec.columns[i]);
    snprintf(prefix, sizeof prefix, "spatial/%s/G=%" PRIu64 "/cols=%s", out->spec.embedding,
             out->spec.grid_size, cols);
    return parse_seed_and_size(t, p, prefix, out, err);
}

static int parse_path(zm_tree *t, const char *path, target *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    out->rest = "";
    if (*path == '\0') {
        out->kind = T_ROOT;
        return 0;
    }
    const char *p = path, *part;
    size_t n = take(&p, &part);
    if (n == 10 && !strncmp(part, ".zarrmount", 10)) {
        if (*p == '\0')
            out->kind = T_INFO_DIR;
        else if (!strcmp(p, "info.json"))
            out->kind = T_INFO_FILE;
        else if (!strcmp(p, "stats.json"))
            out->kind = T_STATS_FILE;
        else
            return zm_err_set(err, -ENOENT, "%.*s%s: no such file", SHOWN(path));
        return 0;
    }
    if ((n == 4 && !strncmp(part, "full", 4)) || (n == 4 && !strncmp(part, "file", 4))) {
        out->kind = T_VIEW;
        out->spec.kind = part[1] == 'u' ? ZM_VIEW_FULL : ZM_VIEW_FILE;
        out->spec.k = 1;
        snprintf(out->key, sizeof out->key, "%.4s", part);
        out->rest = p;
        return 0;
    }
    int blocks = n == 6 && !strncmp(part, "blocks", 6);
    int uniform = n == 7 && !strncmp(part, "uniform", 7);
    int stratified = n == 10 && !strncmp(part, "stratified", 10);
    int spatial = n == 7 && !strncmp(part, "spatial", 7);
    if (!blocks && !uniform && !stratified && !spatial)
        return zm_err_set(err, -ENOENT,
                          "%.*s: no such view (full, file, uniform, blocks, stratified, spatial)",
                          (int)(n > 80 ? 80 : n), part);
    out->spec.kind = blocks ? ZM_VIEW_BLOCKS
                   : uniform ? ZM_VIEW_UNIFORM
                   : stratified ? ZM_VIEW_STRATIFIED
                                : ZM_VIEW_SPATIAL;
    out->spec.block_size = t->b0.block_size;
    if (*p == '\0') {
        out->kind = T_METHOD;
        return 0;
    }
    if (stratified)
        return parse_stratified(t, p, out, err);
    if (spatial)
        return parse_spatial(t, p, out, err);
    if (blocks && !strncmp(p, "B=", 2)) {
        n = take(&p, &part);
        if (parse_number(part + 2, n - 2, 1, UINT64_MAX >> 1, &out->spec.block_size) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: a block size is B=<integer ≥ 1> in canonical decimal",
                              (int)(n > 80 ? 80 : n), part);
        out->spec.block_size_given = 1;
        if (*p == '\0') {
            out->kind = T_BLOCK;
            return 0;
        }
    }
    char prefix[64];
    if (blocks)
        snprintf(prefix, sizeof prefix, "blocks/B=%" PRIu64, out->spec.block_size);
    else
        snprintf(prefix, sizeof prefix, "uniform");
    return parse_seed_and_size(t, p, prefix, out, err);
}

/* ---- Counters -------------------------------------------------------------------- */

static double seconds_since(const struct timespec *began)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - began->tv_sec) + (double)(now.tv_nsec - began->tv_nsec) / 1e9;
}

/* The counters of the view with this key, made on first use. */
static view_stats *stats_for(zm_tree *t, const char *key)
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
static view_stats *stats_of_target(zm_tree *t, const target *tg)
{
    return tg->kind == T_VIEW ? stats_for(t, tg->key) : &t->outside;
}

/* The length of the valid UTF-8 sequence p starts with (as jansson checks
 * it: no overlong form, no surrogate, nothing past U+10FFFF), or 0. */
static size_t utf8_sequence(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t length = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
                    : p[0] >= 0xe0 && p[0] <= 0xef ? 3
                    : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                                   : 0;
    if (length == 0)
        return 0;
    uint32_t value = p[0] & (0x7fu >> length);
    for (size_t i = 1; i < length; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        value = value << 6 | (p[i] & 0x3fu);
    }
    if ((length == 3 && value < 0x800) || (length == 4 && value < 0x10000) || value > 0x10ffff ||
        (value >= 0xd800 && value <= 0xdfff))
        return 0;
    return length;
}

void zm__utf8_copy(char *out, size_t size, const char *text)
{
    size_t at = 0;
    const unsigned char *p = (const unsigned char *)text;
    while (*p && at + 1 < size) {
        size_t length = utf8_sequence(p);
        if (length == 0) {
            out[at++] = '?';
            p++;
            continue;
        }
        if (at + length >= size)
            break;
        memcpy(out + at, p, length);
        at += length;
        p += length;
    }
    out[at] = '\0';
}

/* Counts a refused path (one that does not exist: ENOENT) and keeps its
 * reason, which the log shows only with -d. */
static void note_refusal(zm_tree *t, view_stats *vs, const char *path, const zm_err *err)
{
    vs->refused++;
    pthread_mutex_lock(&t->stats_mutex);
    refusal *r = &t->refusals[t->refusals_next];
    zm__utf8_copy(r->path, sizeof r->path, path);
    zm__utf8_copy(r->reason, sizeof r->reason,
                  err && err->reason[0] ? err->reason : "no such file");
    t->refusals_next = (t->refusals_next + 1) % REFUSALS_KEPT;
    if (t->refusals_count < REFUSALS_KEPT)
        t->refusals_count++;
    pthread_mutex_unlock(&t->stats_mutex);
}

/* ---- Views --------------------------------------------------------------------- */

static void forget_ahead(zm_tree *t, const zm_view *view);
static void ahead_make_way(zm_tree *t);

/* The view for a key, built on first use; held until view_release. When
 * MAX_VIEWS views are held at once, a new one waits until one is let go
 * (wait), or is refused with -EBUSY (!wait: work ahead, which can do
 * without). */
static int view_get(zm_tree *t, const target *tg, zm_view **out, int wait, zm_err *err)
{
    pthread_mutex_lock(&t->mutex);
    for (;;) {
        for (size_t i = 0; i < t->view_count; i++)
            if (!strcmp(t->views[i].key, tg->key)) {
                t->views[i].refs++;
                t->views[i].last_used = ++t->clock;
                *out = t->views[i].view;
                pthread_mutex_unlock(&t->mutex);
                return 0;
            }
        if (!t->building)
            break;
        pthread_cond_wait(&t->changed, &t->mutex);
    }
    t->building = 1;
    pthread_mutex_unlock(&t->mutex);

    /* What building reads (the cells' index pointers, ...) is the view's. */
    view_stats *vs = stats_for(t, tg->key);
    zm_source_tally *previous = zm_source_tally_set(&vs->build);
    struct timespec began;
    clock_gettime(CLOCK_MONOTONIC, &began);
    zm_view *view = NULL;
    int rc = zm_view_create(t->source, &tg->spec, t->chunk_bytes, &view, err);
    zm_source_tally_set(previous);
    if (rc == 0) {
        vs->builds++;
        vs->build_nanoseconds += (uint64_t)(seconds_since(&began) * 1e9);
    }
    if (rc == -EINVAL)
        rc = -ENOENT; /* refused by the kernel: the path names no view */

    pthread_mutex_lock(&t->mutex);
    if (rc == 0) {
        size_t victim = MAX_VIEWS;
        int waiting = 0;
        while (t->view_count == MAX_VIEWS) {
            /* Forget the least recently used view nobody holds. */
            victim = MAX_VIEWS;
            for (size_t i = 0; i < t->view_count; i++)
                if (t->views[i].refs == 0 &&
                    (victim == MAX_VIEWS || t->views[i].last_used < t->views[victim].last_used))
                    victim = i;
            if (victim < MAX_VIEWS || !wait)
                break;
            /* Every view is held: readers hold theirs for one request, work
             * ahead for longer, but synthesis ahead lets go when a reader
             * waits (raised to normal priority until it has), and encoding
             * ahead when its array is done. No holder waits for a view. */
            if (!waiting) {
                waiting = 1;
                t->view_waiters++;
                pthread_mutex_unlock(&t->mutex);
                ahead_make_way(t);
                pthread_mutex_lock(&t->mutex);
                continue;
            }
            pthread_cond_wait(&t->changed, &t->mutex);
        }
        if (waiting)
            t->view_waiters--;
        if (victim < MAX_VIEWS) {
            forget_ahead(t, t->views[victim].view);
            zm_view_free(t->views[victim].view);
            free(t->views[victim].key);
            t->views[victim] = t->views[--t->view_count];
        }
        if (t->view_count < MAX_VIEWS) {
            view_entry *e = &t->views[t->view_count++];
            e->key = strdup(tg->key);
            e->view = view;
            e->refs = 1;
            e->last_used = ++t->clock;
            *out = view;
        } else {
            zm_view_free(view);
            rc = zm_err_set(err, -EBUSY, "%s: too many views in use at once", tg->key);
        }
    }
    /* Only now: a second build of the same key would make a second entry. */
    t->building = 0;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
    return rc;
}

/* count more holds of a view the caller holds (for threads it starts), or
 * fewer (-1: one it took back). Under the tree's mutex. */
static void view_hold_locked(zm_tree *t, zm_view *view, int count)
{
    for (size_t i = 0; i < t->view_count; i++)
        if (t->views[i].view == view)
            t->views[i].refs += count;
}

/* Under the tree's mutex. */
static void view_release_locked(zm_tree *t, zm_view *view)
{
    for (size_t i = 0; i < t->view_count; i++)
        if (t->views[i].view == view && --t->views[i].refs == 0 && t->view_waiters > 0)
            pthread_cond_broadcast(&t->changed);
}

static void view_release(zm_tree *t, zm_view *view)
{
    pthread_mutex_lock(&t->mutex);
    view_release_locked(t, view);
    pthread_mutex_unlock(&t->mutex);
}

/* ---- Inside a view --------------------------------------------------------------- */

typedef enum file_kind { F_NONE, F_ZGROUP, F_ZATTRS, F_ZARRAY, F_ZMETADATA, F_CHUNK } file_kind;

typedef struct place {
    const zm_store_node *node; /* the group or array, or the file's node */
    file_kind file;
    uint64_t coords[ZM_ZARR_MAX_RANK];
    char store_path[1024];     /* the node's path in the store */
} place;

static int locate(zm_view *view, const char *rest, place *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    const zm_store_node *node = zm_view_root(view);
    const char *p = rest;
    size_t at = 0;
    while (*p) {
        size_t n = component(p);
        const char *next = p[n] ? p + n + 1 : p + n;
        /* By name in O(log n): an ls of 100,000 columns is as many lookups. */
        const zm_store_node *child = zm_view_child(node, p, n);
        if (child) {
            /* The store path names the node in caches: never cut short (a
             * cut path could be another node's). The source keeps element
             * paths short enough (ZM_ELEMENT_PATH_MAX) for this to fit. */
            size_t length = strlen(child->name) + (at ? 1 : 0);
            if (at + length >= sizeof out->store_path)
                return zm_err_set(err, -ENAMETOOLONG,
                                  "%.*s%s: the store path is longer than %zu "
                                  "bytes",
                                  SHOWN(rest), sizeof out->store_path - 1);
            at += (size_t)snprintf(out->store_path + at, sizeof out->store_path - at, "%s%s",
                                   at ? "/" : "", child->name);
            node = child;
            p = next;
            continue;
        }
        if (*next != '\0')
            return zm_err_set(err, -ENOENT, "%.*s%s: no such element", SHOWN(rest));
        /* The last component: a file of this node. */
        out->node = node;
        if (!strcmp(p, ".zattrs") && node->attrs)
            out->file = F_ZATTRS;
        else if (!node->is_array && !strcmp(p, ".zgroup"))
            out->file = F_ZGROUP;
        else if (!node->is_array && node == zm_view_root(view) && !strcmp(p, ".zmetadata"))
            out->file = F_ZMETADATA;
        else if (node->is_array && !strcmp(p, ".zarray"))
            out->file = F_ZARRAY;
        else if (node->is_array &&
                 zm_zarr_parse_chunk_key(p, node->meta.rank, node->grid, out->coords) == 0)
            out->file = F_CHUNK;
        else
            return zm_err_set(err, -ENOENT, "%.*s%s: no such file", SHOWN(rest));
        return 0;
    }
    out->node = node;
    out->file = F_NONE;
    return 0;
}

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

struct make_context {
    zm_tree *tree;
    zm_view *view;
    const place *where;
    view_stats *stats;
    const char *key; /* the file's cache key, as text */
};

static int make_file_bytes(struct make_context *c, uint8_t **bytes, size_t *size, zm_err *err);

/* Whether an array's chunks are worth keeping across mounts: those cut
 * from a walk (making one again means walking the whole array), and per-cell
 * strings of a reordered view (read whole through HDF5, on one core). */
static int kept_on_disk(const zm_view *view, const zm_store_node *node)
{
    return zm_synth_walks(view, node) ||
           (node->producer == ZM_PRODUCE_CELL_STRINGS && !zm_view_is_identity(view) &&
            node->meta.rank > 0);
}
/* The disk cache's key of a chunk: its file key and what else makes its
 * bytes (the codec and the chunk size, which options change). */
static void disk_key_of(const zm_tree *t, const char *file_key, char *out, size_t size)
{
    char codec[64];
    zm_codec_format(&t->codec, codec, sizeof codec);
    snprintf(out, size, "%s|codec=%s|blocksize=%d|chunk=%" PRIu64, file_key, codec, t->codec.blocksize,
             t->chunk_bytes);
}

static int make_chunk(struct make_context *c, uint8_t **bytes, size_t *size, zm_err *err);
static void queue_for_disk(zm_tree *t, const char *key, const uint8_t *bytes, size_t size);

/* A damaged or unreadable entry, said once in the log. */
static void kept_failed(zm_tree *t, int rc, const zm_err *err)
{
    if (rc != 0 && rc != -ENOENT && atomic_exchange(&t->disk_read_failed, 1) == 0)
        zm__log(LOG_WARNING, "the disk cache %s (%s): such entries are never served, but made again "
                "from the source", rc == -EBADMSG ? "had a damaged entry" : "could not be read",
                err->reason);
}

/* Makes a file's bytes (the cache's loader), counted for its view: what it
 * reads from the source (on this thread and on the pool's for it) too. */
static int make_file(void *context, uint8_t **bytes, size_t *size, zm_err *err)
{
    struct make_context *c = context;
    if (c->where->file == F_CHUNK)
        c->stats->chunks_made++;
    else
        c->stats->documents_made++;
    zm_source_tally *previous = zm_source_tally_set(&c->stats->source);
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
        if (t->disk != NULL && kept_on_disk(c->view, w->node)) {
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
        if (rc == 0 && disk_key[0])
            queue_for_disk(t, disk_key, *bytes, *size);
        return rc;
    }
    default:
        return zm_err_set(err, -EISDIR, "not a file");
    }
}

/* ---- The disk writer ------------------------------------------------------------- */

struct disk_job {
    struct disk_job *next;
    char *key;
    uint8_t *bytes;
    size_t size;
};

/* What may wait in memory to be filed; past it, the thread that made a
 * chunk files it itself (a write to the page cache: far less than making
 * the chunk took), so that memory stays bounded and nothing is lost. */
#define DISK_QUEUE_BYTES ((uint64_t)16 << 20)

static void file_now(zm_tree *t, const char *key, const uint8_t *bytes, size_t size)
{
    zm_err why;
    zm_err_clear(&why);
    if (zm_disk_put(t->disk, t->disk_space, key, bytes, size, &why) != 0 &&
        atomic_exchange(&t->disk_failed, 1) == 0)
        zm__log(LOG_WARNING, "the disk cache could not keep a chunk (%s): serving goes on "
                "from memory and the source", why.reason);
}

static void queue_for_disk(zm_tree *t, const char *key, const uint8_t *bytes, size_t size)
{
    struct disk_job *job = malloc(sizeof *job);
    char *copy = strdup(key);
    uint8_t *data = malloc(size ? size : 1);
    pthread_mutex_lock(&t->disk_mutex);
    int writing = !t->disk_stop && t->disk_writing;
    int room = writing && t->disk_queued + size <= DISK_QUEUE_BYTES;
    if (room && job && copy && data) {
        memcpy(data, bytes, size);
        *job = (struct disk_job){NULL, copy, data, size};
        if (t->disk_tail)
            t->disk_tail->next = job;
        else
            t->disk_head = job;
        t->disk_tail = job;
        t->disk_queued += size;
        job = NULL;
        copy = NULL;
        data = NULL;
        pthread_cond_signal(&t->disk_wake);
    }
    pthread_mutex_unlock(&t->disk_mutex);
    if (writing && !room)
        file_now(t, key, bytes, size);
    free(job);
    free(copy);
    free(data);
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
        file_now(t, job->key, job->bytes, job->size);
        pthread_mutex_lock(&t->disk_mutex);
        t->disk_queued -= job->size;
        free(job->key);
        free(job->bytes);
        free(job);
    }
    pthread_mutex_unlock(&t->disk_mutex);
    return NULL;
}

/* Files what is queued, then stops the writer. */
static void stop_disk_writer(zm_tree *t)
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
        int rc = zm_synth_chunk(c->view, w->node, w->coords, &raw, &raw_size, &typesize,
                                encode ? &borrowed : NULL, err);
        if (rc != 0)
            return rc;
        if (!encode) {
            *bytes = raw;
            *size = raw_size;
            return 0;
        }
        rc = zm_codec_encode(&c->tree->codec, typesize, raw, raw_size, bytes, size, err);
        zm_synth_chunk_done(w->node, raw, borrowed);
        return rc;
    }
}

/* A file's size without making it, when geometry gives it. */
static int known_size(zm_tree *t, const place *w, uint64_t *size)
{
    if (w->file != F_CHUNK || w->node->meta.vlen_utf8 || w->node->producer == ZM_PRODUCE_STRING_SCALAR)
        return 0;
    if (w->node->meta.rank > 0 && t->codec.kind != ZM_CODEC_NONE)
        return 0;
    uint64_t values = 1;
    for (unsigned d = 0; d < w->node->meta.rank; d++)
        values *= w->node->meta.chunks[d];
    *size = values * w->node->value_size;
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

static uint64_t file_key(zm_view *view, const char *full_path, const place *w)
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
        zm_err err;
        if (zm_view_sparse_get(view, n->sparse, &s, &err) != 0 || !s.per_cell_rows ||
            s.per_cell_columns)
            return;
    }
    char chunk[ZM_ZARR_CHUNK_KEY_MAX];
    zm_zarr_chunk_key(n->meta.rank, w->coords, chunk, sizeof chunk);
    size_t at = (size_t)snprintf(key, size, "nested|%s|%u|%" PRIu64 "|%s|%s|",
                                 spec->kind == ZM_VIEW_BLOCKS ? "blocks" : "uniform",
                                 spec->kind == ZM_VIEW_FULL ? 0 : spec->seed,
                                 spec->kind == ZM_VIEW_BLOCKS ? spec->block_size : 0, w->store_path,
                                 chunk);
    for (unsigned d = 0; d < n->meta.rank && at < size; d++)
        at += (size_t)snprintf(key + at, size - at, "%" PRIu64 ",", n->meta.chunks[d]);
}

static int file_in_cache(zm_tree *t, zm_view *view, view_stats *vs, const char *full_path,
                         const place *w, zm_cache_ref *ref, zm_err *err)
{
    char key_text[1600];
    file_key_text(view, full_path, w, key_text, sizeof key_text);
    struct make_context c = {t, view, w, vs, key_text};
    uint64_t key = path_key(key_text);
    int rc = zm_cache_get_for(t->files, key, make_file, &c, &vs->cache, ref, err);
    if (rc == 0)
        size_put(t, key, ref->size);
    return rc;
}

/* A kept chunk's size from its disk cache header, without reading it (its
 * bytes are checked when they are read: made again, they are the same). */
static int kept_size(zm_tree *t, zm_view *view, const char *path, const place *w, uint64_t *size)
{
    if (t->disk == NULL || w->file != F_CHUNK || !kept_on_disk(view, w->node))
        return 0;
    char key_text[1600], disk_key[2048];
    file_key_text(view, path, w, key_text, sizeof key_text);
    disk_key_of(t, key_text, disk_key, sizeof disk_key);
    if (zm_disk_size(t->disk, t->disk_space, disk_key, size) != 0)
        return 0;
    size_put(t, path_key(key_text), *size);
    return 1;
}

/* ---- Encoding ahead --------------------------------------------------------------- */

/* Once a walked array's values are gathered (one pass over the source), its
 * chunks still have to be encoded one by one, and readers like tar or cp ask
 * for them one at a time. Threads encode the array's chunks ahead into the
 * cache meanwhile (a reader asking for one being made waits for it: the
 * cache is single flight), so a walk uses every core. */
struct ahead {
    zm_tree *tree;
    char key[ZM__VIEW_KEY];   /* the view */
    /* The view itself, held by each running thread: node is one of its
     * arrays, so it must not be freed (evicted) while they use it. */
    zm_view *view;
    char store_path[1024];    /* the array in the view */
    const zm_store_node *node;
    uint64_t chunks;
    _Atomic uint64_t next;
    int handed_on;            /* the next array's walk was taken on (under the tree's mutex) */
    view_stats *stats;        /* the view's counters */
    /* Progress, for stats.json and the log. */
    _Atomic uint64_t done; /* chunks encoded (or found made) */
    _Atomic int running;   /* threads still encoding */
    struct timespec began;
};

static void start_ahead(zm_tree *t, zm_view *view, const char *key, const place *w);

/* Forgets the arrays of a view about to be freed (evicted): none is being
 * encoded (its threads hold the view), and a node of a later view may be
 * allocated where one of these was. Under the tree's mutex. */
static void forget_ahead(zm_tree *t, const zm_view *view)
{
    size_t kept = 0;
    for (size_t i = 0; i < t->ahead_count; i++) {
        if (t->ahead[i]->view == view)
            free(t->ahead[i]);
        else
            t->ahead[kept++] = t->ahead[i];
    }
    t->ahead_count = kept;
}

/* Visits every array of the view's store, depth first, with its store
 * path; a visit returning non-zero stops the walk. */
typedef int (*array_visit)(void *context, const zm_store_node *node, const char *path);

static void each_array(zm_view *view, array_visit visit, void *context)
{
    struct frame {
        const zm_store_node *node;
        size_t child;
        size_t length;
    } stack[64];
    char current[1024] = "";
    int depth = 0;
    stack[0] = (struct frame){zm_view_root(view), 0, 0};
    while (depth >= 0) {
        struct frame *f = &stack[depth];
        if (f->child == f->node->child_count) {
            depth--;
            continue;
        }
        const zm_store_node *c = f->node->children[f->child++];
        size_t length = f->length;
        int n = snprintf(current + length, sizeof current - length, "%s%s", length ? "/" : "", c->name);
        if (n < 0 || (size_t)n >= sizeof current - length)
            continue;
        if (c->is_array) {
            if (visit(context, c, current))
                return;
        } else if (depth + 1 < 64) {
            stack[++depth] = (struct frame){c, 0, length + (size_t)n};
        }
    }
}

/* The place and full path ("<view key>/<store path>/<chunk key>") of
 * chunk c, counted in C order, of the array at store_path. */
static void chunk_place(const char *key, const char *store_path, const zm_store_node *node,
                        uint64_t c, place *w, char *path, size_t size)
{
    memset(w, 0, sizeof *w);
    w->node = node;
    w->file = F_CHUNK;
    for (int d = (int)node->meta.rank - 1; d >= 0; d--) {
        w->coords[d] = c % node->grid[d];
        c /= node->grid[d];
    }
    snprintf(w->store_path, sizeof w->store_path, "%s", store_path);
    char chunk[ZM_ZARR_CHUNK_KEY_MAX];
    zm_zarr_chunk_key(node->meta.rank, w->coords, chunk, sizeof chunk);
    snprintf(path, size, "%s/%s/%s", key, store_path, chunk);
}

/* The array that follows a given one in the store's order and is walked,
 * not walked yet. */
struct next_walk {
    zm_view *view;
    const zm_store_node *after, *found;
    int seen;
    char path[1024];
};

static int find_next_walk(void *context, const zm_store_node *node, const char *path)
{
    struct next_walk *s = context;
    if (s->seen && !zm_synth_walk_started(node) && zm_synth_walks(s->view, node)) {
        s->found = node;
        snprintf(s->path, sizeof s->path, "%s", path);
        return 1;
    }
    s->seen |= node == s->after;
    return 0;
}

/* Walks the array after a->node (the next walked one in the store's order)
 * and starts encoding it ahead. */
static void walk_next(struct ahead *a, zm_view *view)
{
    zm_tree *t = a->tree;
    if (t->closing)
        return;
    struct next_walk next = {.view = view, .after = a->node};
    each_array(view, find_next_walk, &next);
    if (next.found == NULL)
        return;
    place w;
    char path[1400];
    chunk_place(a->key, next.path, next.found, 0, &w, path, sizeof path);
    zm_cache_ref ref;
    zm_err err;
    /* Making chunk 0 walks the array; encoding its others starts. */
    if (file_in_cache(t, view, a->stats, path, &w, &ref, &err) == 0) {
        zm_cache_release(t->files, &ref);
        start_ahead(t, view, a->key, &w);
    }
}

static void *encode_ahead(void *context)
{
    struct ahead *a = context;
    zm_tree *t = a->tree;
    zm_err err;
    zm_view *view = a->view; /* held for this thread by start_ahead */
    {
        /* One thread first walks the next array (this one's walk is done),
         * so that walking it overlaps encoding this one: a walk that waits
         * for the reader, or for this array's last chunks, leaves cores
         * idle. Walks still run one after another, each starting the next. */
        pthread_mutex_lock(&t->mutex);
        int hand_on = !a->handed_on;
        a->handed_on = 1;
        pthread_mutex_unlock(&t->mutex);
        if (hand_on)
            walk_next(a, view);
        for (uint64_t c; !t->closing && (c = a->next++) < a->chunks;) {
            place w;
            char path[1400];
            chunk_place(a->key, a->store_path, a->node, c, &w, path, sizeof path);
            uint64_t kept;
            if (t->kernel_reads_kept && kept_size(t, view, path, &w, &kept)) {
                a->done++; /* the kernel reads it from the disk cache */
                continue;
            }
            zm_cache_ref ref;
            if (file_in_cache(t, view, a->stats, path, &w, &ref, &err) != 0)
                break;
            zm_cache_release(t->files, &ref);
            a->done++;
        }
        /* Every chunk made: the walk's memory may go to the next walk
         * (zm_synth_walk_retire). Said by whichever thread made the last. */
        if (!t->closing && a->done >= a->chunks && zm_synth_walk_started(a->node))
            zm_synth_walk_retire(a->node);
    }
    /* The view goes with the last use of a: once it is let go, it may be
     * evicted, and a freed with it (forget_ahead). */
    pthread_mutex_lock(&t->mutex);
    view_release_locked(t, view);
    a->running--;
    t->ahead_running--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

/* An array's values unencoded: what a walk of it holds. */
static uint64_t array_raw_bytes(const zm_store_node *node)
{
    uint64_t raw = node->value_size;
    for (unsigned d = 0; d < node->meta.rank; d++)
        raw *= node->meta.shape[d];
    return raw;
}

/* Starts encoding ahead the array at w of view (held by the caller). */
static void start_ahead(zm_tree *t, zm_view *view, const char *key, const place *w)
{
    const zm_store_node *node = w->node;
    uint64_t chunks = 1, raw = array_raw_bytes(node);
    for (unsigned d = 0; d < node->meta.rank; d++)
        chunks *= node->grid[d];
    /* Only arrays made by a walk (or, with a disk cache, filed by one: its
     * chunks are then read from the disk ahead of the reader), and only
     * what the cache can hold encoded (taken as half the raw size, a low
     * estimate of what the codecs give on single-cell values); a larger
     * array is encoded as it is read. */
    if (t->closing || t->codec.kind == ZM_CODEC_NONE || (!zm_synth_walk_started(node) && t->disk == NULL) ||
        chunks < 4 ||
        raw / 2 > t->cache_bytes)
        return;
    pthread_mutex_lock(&t->mutex);
    for (size_t i = 0; i < t->ahead_count; i++)
        if (t->ahead[i]->node == node) {
            pthread_mutex_unlock(&t->mutex);
            return;
        }
    struct ahead **list = realloc(t->ahead, (t->ahead_count + 1) * sizeof *list);
    struct ahead *a = list ? calloc(1, sizeof *a) : NULL;
    if (list)
        t->ahead = list;
    if (a == NULL) {
        pthread_mutex_unlock(&t->mutex);
        return;
    }
    t->ahead[t->ahead_count++] = a;
    a->tree = t;
    a->view = view;
    snprintf(a->key, sizeof a->key, "%s", key);
    snprintf(a->store_path, sizeof a->store_path, "%s", w->store_path);
    a->node = node;
    a->chunks = chunks;
    a->next = 0;
    a->stats = stats_for(t, key);
    clock_gettime(CLOCK_MONOTONIC, &a->began);
    for (unsigned i = 0; i < t->ahead_threads; i++) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        t->ahead_running++;
        a->running++;
        view_hold_locked(t, view, 1);
        if (pthread_create(&thread, &attr, encode_ahead, a) != 0) {
            t->ahead_running--;
            a->running--;
            view_hold_locked(t, view, -1);
        }
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&t->mutex);
}

static void *hand_on_early(void *context)
{
    struct ahead *a = context;
    zm_tree *t = a->tree;
    walk_next(a, a->view); /* held for this thread by start_next_walk_early */
    view_release(t, a->view);
    free(a);
    pthread_mutex_lock(&t->mutex);
    t->ahead_running--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

/* A walk of strings runs on one core (HDF5 reads them under its lock): the
 * walk of the array after it starts at once on another thread, rather than
 * when the strings are done. */
static void start_next_walk_early(zm_tree *t, zm_view *view, const char *key, const place *w)
{
    if (t->closing || w->file != F_CHUNK || zm_synth_walk_started(w->node) ||
        w->node->producer != ZM_PRODUCE_CELL_STRINGS || !zm_synth_walks(view, w->node))
        return;
    struct ahead *a = calloc(1, sizeof *a);
    if (a == NULL)
        return;
    a->tree = t;
    a->view = view;
    snprintf(a->key, sizeof a->key, "%s", key);
    snprintf(a->store_path, sizeof a->store_path, "%s", w->store_path);
    a->node = w->node;
    a->stats = stats_for(t, key);
    pthread_mutex_lock(&t->mutex);
    t->ahead_running++;
    view_hold_locked(t, view, 1);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, hand_on_early, a) != 0) {
        t->ahead_running--;
        view_hold_locked(t, view, -1);
        free(a);
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_unlock(&t->mutex);
}

static void ahead_raise(view_stats *vs, const zm_store_node *node);

static int with_file(zm_tree *t, zm_view *view, view_stats *vs, const char *full_path,
                     const place *w, zm_cache_ref *ref, zm_err *err)
{
    /* full_path is "<view key>/<store path>/<chunk key>". */
    char key[ZM__VIEW_KEY] = "";
    if (w->file == F_CHUNK) {
        const char *chunk = strrchr(full_path, '/');
        size_t tail = strlen(w->store_path) + (chunk ? strlen(chunk) : 0) + 1;
        size_t length = strlen(full_path);
        if (chunk && length > tail && length - tail < sizeof key)
            snprintf(key, sizeof key, "%.*s", (int)(length - tail), full_path);
    }
    if (key[0])
        start_next_walk_early(t, view, key, w);
    ahead_raise(vs, w->node);
    int rc = file_in_cache(t, view, vs, full_path, w, ref, err);
    if (rc == 0 && key[0] &&
        (zm_synth_walk_started(w->node) ||
         (t->disk != NULL && !t->kernel_reads_kept && kept_on_disk(view, w->node))))
        start_ahead(t, view, key, w);
    return rc;
}

/* ---- Synthesis ahead ----------------------------------------------------------------- */

/* Once a reader opens a view, one worker per view makes its chunks before
 * they are asked for, in priority order: the chunks holding the first cells
 * first, across every array of the store (chunk c of an array of g row
 * chunks comes at c / g). It runs at idle priority and hands its decodes to
 * the pool as background work, so readers' requests go first; it stops when
 * no reader has asked anything of the view for a while (it starts again at
 * the next request), when what it made would fill half the file cache (more
 * would evict its own work), or when every chunk is made. A reader that
 * asks for a chunk of the array the worker is making one of would wait for
 * it: the worker is then raised to normal priority until that chunk is
 * done, so a reader never waits behind idle-priority work. */

static int64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

typedef struct ahead_array {
    const zm_store_node *node;
    char path[1024];
    uint64_t chunks, next; /* chunks in C order; the next to make */
} ahead_array;

/* Every array of the view's store with at least one chunk, with its path. */
struct array_list {
    ahead_array *items;
    size_t count, capacity;
};

static int collect_array(void *context, const zm_store_node *node, const char *path)
{
    struct array_list *list = context;
    uint64_t chunks = 1;
    for (unsigned d = 0; d < node->meta.rank; d++)
        chunks *= node->grid[d];
    if (chunks == 0 || (node->meta.rank > 0 && node->meta.shape[0] == 0))
        return 0;
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 32;
        ahead_array *grown = realloc(list->items, capacity * sizeof *grown);
        if (grown == NULL)
            return 1; /* the arrays so far */
        list->items = grown;
        list->capacity = capacity;
    }
    ahead_array *a = &list->items[list->count++];
    *a = (ahead_array){.node = node, .chunks = chunks};
    snprintf(a->path, sizeof a->path, "%s", path);
    return 0;
}

static ahead_array *ahead_arrays(zm_view *view, size_t *count)
{
    struct array_list list = {0};
    each_array(view, collect_array, &list);
    *count = list.count;
    return list.items;
}

/* Where the next chunk of an array lies in priority order: the share of
 * its rows before it (0 for a 0-d array). */
static double ahead_position(const ahead_array *a)
{
    const zm_store_node *node = a->node;
    if (node->meta.rank == 0 || node->grid[0] == 0)
        return 0;
    uint64_t per_row_chunk = a->chunks / node->grid[0];
    return (double)(a->next / per_row_chunk) / (double)node->grid[0];
}

/* Whether the worker may make an array whose chunks need a walk not made
 * yet: not a walk of strings (HDF5 reads them under its global lock, which
 * a reader's own HDF5 reads would then wait behind), and not one larger
 * than what is left of its share of the cache (a walk holds the whole
 * array: a reader that opens an atlas's full/ for its obs must not find
 * the daemon gathering all of X). Readers still walk whatever they ask. */
static int ahead_may_walk(zm_view *view, const zm_store_node *node, uint64_t room)
{
    if (!zm_synth_walks(view, node) && !(node->producer == ZM_PRODUCE_CELL_STRINGS &&
                                         !zm_view_is_identity(view) && node->meta.rank > 0))
        return 1;
    if (zm_synth_walk_started(node))
        return 1; /* walked already: its chunks are cut, not gathered */
    if (node->producer == ZM_PRODUCE_CELL_STRINGS)
        return 0;
    return array_raw_bytes(node) <= room;
}

static void set_idle_priority(int idle)
{
    struct sched_param param = {0};
    (void)pthread_setschedparam(pthread_self(), idle ? SCHED_IDLE : SCHED_OTHER, &param);
}

typedef struct ahead_worker {
    zm_tree *tree;
    view_stats *stats;
} ahead_worker;

static int ahead_run(zm_tree *t, view_stats *vs, zm_view *view)
{
    size_t count = 0;
    ahead_array *arrays = ahead_arrays(view, &count);
    uint64_t bound = t->cache_bytes / 2, made = 0;
    int state = AHEAD_DONE;
    int64_t started = monotonic_ns();
    uint64_t chunks_this_run = 0, total = 0;
    for (size_t i = 0; i < count; i++)
        total += arrays[i].chunks;
    vs->ahead_total = total;
    vs->ahead_run_chunks = 0;
    for (;;) {
        /* A reader waits for a view to be let go: this one goes (it starts
         * again at its view's next request). */
        if (t->closing || t->view_waiters > 0) {
            state = AHEAD_IDLE;
            break;
        }
        if (monotonic_ns() - vs->last_read_ns > t->ahead_idle_ns) {
            state = AHEAD_IDLE;
            break;
        }
        if (made >= bound) {
            state = AHEAD_BOUND;
            break;
        }
        /* The chunk nearest the first cells, earlier arrays first on ties. */
        ahead_array *a = NULL;
        double best = 2;
        for (size_t i = 0; i < count; i++) {
            if (arrays[i].next >= arrays[i].chunks)
                continue;
            double at = ahead_position(&arrays[i]);
            if (at < best) {
                best = at;
                a = &arrays[i];
            }
        }
        if (a == NULL)
            break; /* every chunk made */
        if (a->next == 0 && !ahead_may_walk(view, a->node, bound - (made < bound ? made : bound))) {
            a->next = a->chunks; /* left to readers */
            continue;
        }
        if (t->ahead_rate > 0) {
            /* At most ahead_rate chunks a second since this run began. */
            int64_t due = started + (int64_t)((double)chunks_this_run * 1e9 / t->ahead_rate);
            int64_t wait = due - monotonic_ns();
            if (wait > 0) {
                struct timespec pause = {wait / 1000000000, wait % 1000000000};
                nanosleep(&pause, NULL);
                continue; /* look at idleness again first */
            }
        }
        place w;
        char path[1400];
        chunk_place(vs->key, a->path, a->node, a->next++, &w, path, sizeof path);
        /* Back to idle priority if a reader raised it for the last chunk. */
        if (!vs->ahead_background) {
            set_idle_priority(1);
            vs->ahead_background = 1;
        }
        uint64_t kept;
        if (t->kernel_reads_kept && kept_size(t, view, path, &w, &kept))
            continue; /* the kernel reads it from the disk cache */
        vs->ahead_node = a->node;
        zm_cache_ref ref;
        zm_err err;
        zm_err_clear(&err);
        int rc = file_in_cache(t, view, vs, path, &w, &ref, &err);
        vs->ahead_node = NULL;
        if (rc != 0) {
            pthread_mutex_lock(&t->mutex);
            snprintf(vs->ahead_reason, sizeof vs->ahead_reason, "%s", err.reason);
            pthread_mutex_unlock(&t->mutex);
            zm__log(LOG_WARNING, "synthesis ahead of %s stopped: %s", vs->key, err.reason);
            state = AHEAD_FAILED;
            break;
        }
        made += ref.size;
        vs->ahead_bytes += ref.size;
        zm_cache_release(t->files, &ref);
        vs->ahead_chunks++;
        vs->ahead_run_chunks++;
        chunks_this_run++;
    }
    free(arrays);
    return state;
}

static void *synthesize_ahead(void *context)
{
    ahead_worker *worker = context;
    zm_tree *t = worker->tree;
    view_stats *vs = worker->stats;
    free(worker);
    vs->ahead_tid = (pid_t)syscall(SYS_gettid);
    set_idle_priority(1);
    vs->ahead_background = 1;
    const _Atomic int *own = zm_source_background_set(&vs->ahead_background);
    int state = AHEAD_FAILED;
    target tg;
    zm_err err;
    zm_err_clear(&err);
    zm_view *view = NULL;
    int rc = parse_path(t, vs->key, &tg, &err);
    if (rc == 0 && (rc = view_get(t, &tg, &view, 0, &err)) == 0) {
        state = ahead_run(t, vs, view);
        view_release(t, view);
    } else if (rc == -EBUSY) {
        state = AHEAD_IDLE; /* every view is in use: again at the view's next request */
    } else {
        pthread_mutex_lock(&t->mutex);
        snprintf(vs->ahead_reason, sizeof vs->ahead_reason, "%s", err.reason);
        pthread_mutex_unlock(&t->mutex);
    }
    zm_source_background_set(own);
    vs->ahead_tid = 0;
    pthread_mutex_lock(&t->mutex);
    vs->ahead_state = state;
    t->ahead_running--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

/* A reader asked something of the view: note it, and start its worker if
 * none runs (again after it stopped idle; not after it made everything,
 * filled its share of the cache or failed). */
static void ahead_touch(zm_tree *t, view_stats *vs)
{
    if (t->ahead_idle_ns <= 0 || vs == &t->outside || vs == &t->more_views || t->closing)
        return;
    vs->last_read_ns = monotonic_ns();
    if (vs->ahead_state != AHEAD_NONE && vs->ahead_state != AHEAD_IDLE)
        return; /* an unlocked look first: this is every request's path */
    pthread_mutex_lock(&t->mutex);
    if ((vs->ahead_state == AHEAD_NONE || vs->ahead_state == AHEAD_IDLE) && !t->closing) {
        ahead_worker *worker = malloc(sizeof *worker);
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (worker != NULL) {
            *worker = (ahead_worker){t, vs};
            vs->ahead_state = AHEAD_RUNNING;
            vs->ahead_runs++;
            clock_gettime(CLOCK_MONOTONIC, &vs->ahead_began);
            t->ahead_running++;
            if (pthread_create(&thread, &attr, synthesize_ahead, worker) != 0) {
                t->ahead_running--;
                vs->ahead_state = AHEAD_FAILED;
                snprintf(vs->ahead_reason, sizeof vs->ahead_reason, "cannot start a thread");
                free(worker);
            }
        }
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&t->mutex);
}

/* A reader is about to need a chunk of node: if the view's worker is making
 * one of the same array (the same chunk, or the walk every chunk of it
 * waits for), it runs at normal priority until that chunk is done. */
static void ahead_raise(view_stats *vs, const zm_store_node *node)
{
    if (vs->ahead_node != node || node == NULL || !vs->ahead_background)
        return;
    vs->ahead_background = 0; /* its pool work is ordinary from now on */
    pid_t tid = vs->ahead_tid;
    struct sched_param param = {0};
    if (tid > 0)
        (void)sched_setscheduler(tid, SCHED_OTHER, &param);
}

/* A reader waits for a view to be let go (view_get): every worker runs at
 * normal priority until it stops, at its next chunk, so that the reader
 * does not wait behind idle-priority work. */
static view_stats **stats_list(zm_tree *t, size_t *count);

static void ahead_make_way(zm_tree *t)
{
    size_t count;
    view_stats **views = stats_list(t, &count);
    for (size_t i = 0; i < count; i++) {
        view_stats *vs = views[i];
        pid_t tid = vs->ahead_tid;
        if (tid > 0 && vs->ahead_background) {
            vs->ahead_background = 0;
            struct sched_param param = {0};
            (void)sched_setscheduler(tid, SCHED_OTHER, &param);
        }
    }
    free(views);
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
static view_stats **stats_list(zm_tree *t, size_t *count)
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
    view_stats **views = stats_list(t, &view_count);
    zm_source_pass passes[WORKS_SHOWN];
    size_t pass_count = zm_source_passes(t->source, passes, WORKS_SHOWN);
    for (size_t i = 0; i < pass_count && count < capacity; i++) {
        const zm_source_pass *p = &passes[i];
        if (p->finished && !finished)
            continue;
        work *w = &out[count++];
        const char *key = "", *doing = "reading";
        for (size_t v = 0; v < view_count; v++) {
            if (p->tally == &views[v]->source)
                key = views[v]->key;
            else if (p->tally == &views[v]->build) {
                key = views[v]->key;
                doing = "building: reading";
            }
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
        w->seconds = seconds_since(&a->began);
        w->finished = 0;
    }
    pthread_mutex_unlock(&t->mutex);
    views = stats_list(t, &view_count);
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
        w->seconds = seconds_since(&began);
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
    json_object_set_new(o, "source", tally_json(&vs->source));
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
    json_t *ahead = json_pack("{s:s, s:I, s:I, s:I}", "state", ahead_state_names[state], "chunks",
                              (json_int_t)vs->ahead_chunks, "bytes", (json_int_t)vs->ahead_bytes,
                              "runs", (json_int_t)vs->ahead_runs);
    if (state == AHEAD_FAILED)
        json_object_set_new(ahead, "reason", json_string(reason));
    json_object_set_new(o, "ahead", ahead);
    return o;
}

static json_t *stats_document(zm_tree *t, uint64_t serial)
{
    size_t view_count;
    view_stats **list = stats_list(t, &view_count);
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
    zm_synth_get_walk_stats(&ws);
    json_object_set_new(sum, "walks",
                        json_pack("{s:I, s:I, s:I, s:I, s:I}", "heldBytes", (json_int_t)ws.held_bytes,
                                  "limitBytes", (json_int_t)ws.limit_bytes, "spilled",
                                  (json_int_t)ws.spilled, "spilledBytes",
                                  (json_int_t)ws.spilled_bytes, "reclaimed",
                                  (json_int_t)ws.reclaimed));

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
                     rounded(seconds_since(&t->mounted), 1e-3), "total", sum, "views", views,
                     "outsideViews", requests_json(&outside), "works", running, "recentWorks",
                     recent, "refusals", refused, "diskCache", disk);
}

typedef struct snapshot {
    struct snapshot *next;
    uint64_t serial;
    char *bytes;
    size_t size;
} snapshot;

/* The snapshot with this serial (0: the newest), or NULL. Under stats_mutex. */
static snapshot *find_snapshot(zm_tree *t, uint64_t serial)
{
    snapshot *s = t->snapshots;
    while (s != NULL && serial != 0 && s->serial != serial)
        s = s->next;
    return s;
}

/* The serial of a snapshot's path, STATS_PATH "@<serial>" (0 for any
 * other path: STATS_PATH itself means the newest). */
static uint64_t snapshot_serial_of(const char *path)
{
    size_t n = strlen(STATS_PATH);
    uint64_t serial;
    if (strncmp(path, STATS_PATH, n) != 0 || path[n] != '@' ||
        parse_number(path + n + 1, strlen(path + n + 1), 1, UINT64_MAX, &serial) != 0)
        return 0;
    return serial;
}

/* Takes a new snapshot of the counters as stats.json, for a lookup; its
 * size to *size, its serial to *serial. Two snapshots in a row never have
 * the same size: the kernel drops the pages it kept of a file whose size
 * changes (FUSE keeps pages across opens, and this daemon lets the kernel
 * open files without asking), should it read the file as STATS_PATH. */
static int take_snapshot(zm_tree *t, uint64_t *size, uint64_t *serial)
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
        if (long_work && (!told || seconds_since(&last_told) >= PROGRESS_EVERY_SECONDS)) {
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

static void start_teller(zm_tree *t)
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

static void stop_teller(zm_tree *t)
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
    /* Strata 0..count-1 by code, the missing values after them. */
    uint64_t *sizes = calloc(strata.count + 1, sizeof *sizes);
    int known = sizes != NULL;
    for (uint64_t p = 0; known && p < n; p++) {
        int32_t code = strata.codes[p];
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

/* Whether the view with this key is built (its structure in memory). */
static int view_built(zm_tree *t, const char *key)
{
    int built = 0;
    pthread_mutex_lock(&t->mutex);
    for (size_t i = 0; i < t->view_count && !built; i++)
        built = !strcmp(t->views[i].key, key);
    pthread_mutex_unlock(&t->mutex);
    return built;
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
        return take_snapshot(t, &node->size, &node->snapshot);
    }
    if (tg.kind == T_INFO_FILE) {
        node->kind = ZM_NODE_FILE;
        node->size = t->info_size;
        return 0;
    }
    if (tg.kind == T_LINK) {
        node->kind = ZM_NODE_LINK;
        node->size = strlen(tg.link);
        return 0;
    }
    if (tg.kind != T_VIEW)
        return 0;
    /* A view is built from the source as it is now: not from a file that
     * changed since the mount. One built before still answers for its
     * names (the source as it was), and its files fail to be read. */
    if (!view_built(t, tg.key) && (rc = zm__tree_check_source(t, err)) != 0)
        return rc;
    zm_view *view;
    if ((rc = view_get(t, &tg, &view, 1, err)) != 0)
        /* A request the kernel refuses (a minimum that does not fit, ...)
         * names no view: the path does not exist. */
        return rc == -EINVAL ? -ENOENT : rc;
    ahead_touch(t, vs);
    place w;
    rc = locate(view, tg.rest, &w, err);
    if (rc == 0 && w.file != F_NONE) {
        node->kind = ZM_NODE_FILE;
        uint64_t size;
        if (known_size(t, &w, &size) || size_get(t, file_key(view, path, &w), &size) ||
            kept_size(t, view, path, &w, &size)) {
            node->size = size;
        } else {
            /* Its size is its bytes' (compressed): made now. That they
             * cannot be made is no reason to say the file is missing. */
            zm_cache_ref ref;
            int made = zm__tree_check_source(t, err);
            if (made == 0)
                made = with_file(t, view, vs, path, &w, &ref, err);
            if (made == 0) {
                node->size = ref.size;
                zm_cache_release(t->files, &ref);
            } else {
                unmade(vs, node, made);
            }
        }
    }
    view_release(t, view);
    return rc;
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
    int rc = parse_path(t, path, &tg, err);
    if (rc != 0)
        return rc;
    if (tg.kind != T_VIEW)
        return zm_err_set(err, -ENOENT, "%s: not kept on disk", path);
    zm_view *view;
    if ((rc = view_get(t, &tg, &view, 1, err)) != 0)
        return rc;
    place w;
    rc = locate(view, tg.rest, &w, err);
    if (rc == 0 && (w.file != F_CHUNK || !kept_on_disk(view, w.node)))
        rc = zm_err_set(err, -ENOENT, "%s: not kept on disk", path);
    if (rc != 0) {
        view_release(t, view);
        return rc;
    }
    char key_text[1600];
    file_key_text(view, path, &w, key_text, sizeof key_text);
    disk_key_of(t, key_text, disk_key, key_size);
    *file_key_out = path_key(key_text);
    *view_out = view;
    *vs_out = stats_of_target(t, &tg);
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
    view_release(t, view);
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

int zm__tree_lookup(zm_tree *t, const char *path, zm_node *node, zm_err *err)
{
    int64_t began = monotonic_ns();
    target tg;
    int rc = parse_path(t, path, &tg, err);
    view_stats *vs = rc == 0 ? stats_of_target(t, &tg) : &t->outside;
    vs->lookups++;
    if (rc == 0)
        rc = lookup_target(t, path, &tg, vs, node, err);
    if (rc == -ENOENT)
        note_refusal(t, vs, path, err);
    vs->busy_nanoseconds += (uint64_t)(monotonic_ns() - began);
    return rc;
}

int zm__tree_getattr(zm_tree *t, const char *path, zm_node *node, zm_err *err)
{
    target tg;
    uint64_t serial = snapshot_serial_of(path);
    int rc = parse_path(t, serial ? STATS_PATH : path, &tg, err);
    if (rc != 0 || tg.kind != T_STATS_FILE)
        return rc != 0 ? rc : zm__tree_lookup(t, path, node, err);
    memset(node, 0, sizeof *node);
    node->kind = ZM_NODE_FILE;
    node->live = 1;
    pthread_mutex_lock(&t->stats_mutex);
    snapshot *s = find_snapshot(t, serial);
    if (s != NULL) {
        node->size = s->size;
        node->snapshot = s->serial;
    }
    pthread_mutex_unlock(&t->stats_mutex);
    if (s == NULL && serial != 0)
        return zm_err_set(err, -ESTALE, "%s: this snapshot is gone: open the file again", path);
    return s != NULL ? 0 : take_snapshot(t, &node->size, &node->snapshot);
}

void zm__tree_count_open(zm_tree *t, const char *path)
{
    target tg;
    zm_err err;
    if (parse_path(t, path, &tg, &err) == 0)
        stats_of_target(t, &tg)->opens++;
    else
        t->outside.opens++;
}

void zm__tree_count_unmade(zm_tree *t, const char *path, int read)
{
    target tg;
    zm_err err;
    view_stats *vs = parse_path(t, path, &tg, &err) == 0 ? stats_of_target(t, &tg) : &t->outside;
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
    if (known_size(t, &c, &size) || size_get(t, file_key(view, full, &c), &size) ||
        kept_size(t, view, full, &c, &size))
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

static int list_target(zm_tree *t, const char *path, const target *target_in, zm__tree_emit emit,
                       void *context, zm_err *err)
{
    target tg = *target_in;
    int rc = 0;
    char name[64];
    switch (tg.kind) {
    case T_ROOT: {
        static const char *const names[] = {".zarrmount", "blocks",     "file",   "full",
                                            "spatial",    "stratified", "uniform"};
        for (size_t i = 0; i < 7; i++)
            if ((rc = emit_name(emit, context, names[i], ZM_NODE_DIRECTORY, 0)) != 0)
                return rc;
        return 0;
    }
    case T_LINK:
        return zm_err_set(err, -ENOTDIR, "%s: a link, not a directory", path);
    case T_FIELD:
        if (tg.spec.kind == ZM_VIEW_STRATIFIED) {
            static const char *const names[] = {"balanced", "proportional", "seed0"};
            for (size_t i = 0; i < 3; i++)
                if ((rc = emit_name(emit, context, names[i], ZM_NODE_DIRECTORY, 0)) != 0)
                    return rc;
            return 0;
        }
        snprintf(name, sizeof name, "G=%d", ZM_DEFAULT_GRID_SIZE);
        if ((rc = emit_name(emit, context, name, ZM_NODE_DIRECTORY, 0)) != 0)
            return rc;
        return emit_name(emit, context, "seed0", ZM_NODE_DIRECTORY, 0);
    case T_ALLOC:
        return emit_name(emit, context, "min=0", ZM_NODE_DIRECTORY, 0);
    case T_GRID: {
        /* The default columns, as many of them as the grid fits (G^d <
         * 2^53): a listed name always exists. */
        char cols[48] = "cols=";
        zm_err ignored;
        while (tg.spec.column_count > 1 &&
               grid_fits(tg.spec.embedding, tg.spec.grid_size, tg.spec.column_count, &ignored) != 0)
            tg.spec.column_count--;
        for (unsigned i = 0; i < tg.spec.column_count; i++)
            snprintf(cols + strlen(cols), sizeof cols - strlen(cols), "%s%u", i ? "," : "", i);
        return emit_name(emit, context, cols, ZM_NODE_DIRECTORY, 0);
    }
    case T_MINIMUM:
    case T_COLUMNS:
        return emit_name(emit, context, "seed0", ZM_NODE_DIRECTORY, 0);
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
        return emit_name(emit, context, "seed0", ZM_NODE_DIRECTORY, 0);
    case T_BLOCK:
        return emit_name(emit, context, "seed0", ZM_NODE_DIRECTORY, 0);
    case T_SEED: {
        uint64_t sizes[24];
        size_t count;
        ladder(zm_source_n_obs(t->source), sizes, &count);
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
    if ((rc = view_get(t, &tg, &view, 1, err)) != 0)
        return rc;
    ahead_touch(t, stats_for(t, tg.key));
    place w;
    rc = locate(view, tg.rest, &w, err);
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
    view_release(t, view);
    (void)by_name;
    return rc;
}

int zm__tree_list(zm_tree *t, const char *path, zm__tree_emit emit, void *context, zm_err *err)
{
    int64_t began = monotonic_ns();
    target tg;
    int rc = parse_path(t, path, &tg, err);
    view_stats *vs = rc == 0 ? stats_of_target(t, &tg) : &t->outside;
    vs->listings++;
    if (rc == 0)
        rc = list_target(t, path, &tg, emit, context, err);
    if (rc == -ENOENT)
        note_refusal(t, vs, path, err);
    vs->busy_nanoseconds += (uint64_t)(monotonic_ns() - began);
    return rc;
}

static int read_target(zm_tree *t, const char *path, const target *target_in, uint64_t serial,
                       view_stats *vs, uint64_t offset, size_t size, void *buffer, size_t *done,
                       zm_err *err)
{
    target tg = *target_in;
    int rc;
    if (tg.kind == T_STATS_FILE) {
        /* The snapshot of the lookup that gave the inode (serial), or
         * the newest for STATS_PATH itself. */
        pthread_mutex_lock(&t->stats_mutex);
        snapshot *s = find_snapshot(t, serial);
        if (s != NULL && offset < s->size) {
            *done = s->size - offset < size ? s->size - offset : size;
            memcpy(buffer, s->bytes + offset, *done);
        }
        pthread_mutex_unlock(&t->stats_mutex);
        if (s == NULL && serial != 0)
            return zm_err_set(err, -ESTALE, "%s: this snapshot is gone: open the file again", path);
        return 0;
    }
    if (tg.kind == T_INFO_FILE) {
        if (offset < t->info_size) {
            *done = t->info_size - offset < size ? t->info_size - offset : size;
            memcpy(buffer, t->info + offset, *done);
        }
        return 0;
    }
    if (tg.kind != T_VIEW)
        return zm_err_set(err, -EISDIR, "%s: a directory", path);
    zm_view *view;
    if ((rc = view_get(t, &tg, &view, 1, err)) != 0)
        return rc;
    ahead_touch(t, vs);
    place w;
    rc = locate(view, tg.rest, &w, err);
    if (rc == 0 && w.file == F_NONE)
        rc = zm_err_set(err, -EISDIR, "%s: a directory", path);
    if (rc == 0) {
        zm_cache_ref ref;
        rc = with_file(t, view, vs, path, &w, &ref, err);
        if (rc != 0)
            vs->failed++;
        if (rc == 0) {
            if (offset < ref.size) {
                *done = ref.size - offset < size ? ref.size - offset : size;
                memcpy(buffer, ref.bytes + offset, *done);
            }
            zm_cache_release(t->files, &ref);
        }
    }
    view_release(t, view);
    return rc;
}

int zm__tree_read(zm_tree *t, const char *path, uint64_t offset, size_t size, void *buffer,
                  size_t *done, zm_err *err)
{
    int64_t began = monotonic_ns();
    *done = 0;
    target tg;
    uint64_t serial = snapshot_serial_of(path);
    int rc = parse_path(t, serial ? STATS_PATH : path, &tg, err);
    view_stats *vs = rc == 0 ? stats_of_target(t, &tg) : &t->outside;
    vs->reads++;
    if (rc == 0)
        rc = read_target(t, path, &tg, serial, vs, offset, size, buffer, done, err);
    if (rc == 0)
        vs->bytes_served += *done;
    else if (rc == -ENOENT)
        note_refusal(t, vs, path, err);
    vs->busy_nanoseconds += (uint64_t)(monotonic_ns() - began);
    return rc;
}

int zm__tree_readlink(zm_tree *t, const char *path, char *target_out, size_t size, zm_err *err)
{
    target tg;
    int rc = parse_path(t, path, &tg, err);
    if (rc != 0)
        return rc;
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
    if (st.st_dev != t->identity.device || st.st_ino != t->identity.inode ||
        st.st_size != t->identity.size || mtime != t->identity.mtime_ns)
        return zm_err_set(err, -EIO, "%s: the source changed since it was mounted: remount to serve "
                          "the new file", t->source_path);
    return 0;
}

/* The disk cache, if wanted and usable: entries filed under the source's
 * size, modification time, inode and a hash of its first 64 KiB (the HDF5
 * superblock and root metadata), so a changed source never meets an old
 * entry, and under the versions of the codec libraries that make the
 * chunks' bytes, so a library upgrade never meets one either. A directory that cannot be used is said once in the log and the
 * mount goes on without it, except one given with -o cache_dir= that is
 * not private to the mount's user (anyone else who could write to it could
 * forge what is served): then the mount is refused (-EPERM, err says why). */
static int open_disk(zm_tree *t, const zm_tree_options *options, zm_err *err)
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
        zm__log(LOG_WARNING, "no disk cache (%s): chunks are kept in memory only", why.reason);
        return 0;
    }
    uint8_t head[65536];
    ssize_t got = zm_source_read_raw(t->source, 0, head, sizeof head);
    const zm_source_identity *id = zm_source_get_identity(t->source);
    /* The codec's libraries and their versions (zm_codec_build) file its
     * chunks apart: another zstd may make other bytes for the same values,
     * and a mount must never serve one library's chunks beside another's.
     * After an upgrade the old entries are never read again, and go as the
     * bound evicts them. codec=none adds nothing: its chunks are the values
     * as they are, which no codec library makes, so they stay shared. */
    char build[256];
    zm_codec_build(&t->codec, build, sizeof build);
    snprintf(t->disk_space, sizeof t->disk_space, "source|%lld|%lld|%llu|%016llx%s%s",
             (long long)id->size, (long long)id->mtime_ns, (unsigned long long)id->inode,
             (unsigned long long)XXH3_64bits(head, got > 0 ? (size_t)got : 0),
             build[0] ? "|codecs=" : "", build);
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
        zm__log(LOG_WARNING, "no disk cache (%s): chunks are kept in memory only", why.reason);
        t->disk = NULL;
        return 0;
    }
    char example[256];
    uint64_t foreign = zm_disk_foreign(t->disk, example, sizeof example);
    if (foreign > 0)
        zm__log(LOG_INFO,
                "the disk cache %s holds %llu files that are not its own (first: %s): "
                "left alone, never read, counted or removed",
                directory, (unsigned long long)foreign, example);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    t->disk_writing = pthread_create(&t->disk_writer, NULL, disk_writer, t) == 0;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (!t->disk_writing) {
        zm__log(LOG_WARNING,
                "no disk cache (cannot start its writer): chunks are kept in memory only");
        zm_disk_close(t->disk);
        t->disk = NULL;
    }
    return 0;
}

int zm__tree_open(const zm_tree_options *options, zm_tree **out, zm_err *err)
{
    *out = NULL;
    zm_tree *t = calloc(1, sizeof *t);
    if (t == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&t->mutex, NULL);
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
        zm__utf8_copy(t->source_text, source_length + 1, options->source);
    t->chunk_bytes = options->chunk_bytes ? options->chunk_bytes : ZM_DEFAULT_CHUNK_BYTES;
    uint64_t memory = options->cache_bytes ? options->cache_bytes : ZM_DEFAULT_CACHE_BYTES;
    t->cache_bytes = memory / 2 ? memory / 2 : 1;
    zm_synth_set_walk_memory(memory / 4);
    t->ahead_threads = options->threads ? options->threads : zm_config_cores();
    double idle = options->ahead_idle_seconds < 0 ? ZM_DEFAULT_AHEAD_IDLE_SECONDS : options->ahead_idle_seconds;
    t->ahead_idle_ns = (int64_t)(idle * 1e9);
    t->ahead_rate = options->ahead_rate;
    int rc = 0;
    if (options->codec)
        rc = zm_codec_parse(options->codec, &t->codec, err);
    else
        t->codec = zm_codec_default();
    zm_source_options so = {.threads = options->threads,
                            .chunk_cache_bytes = memory / 4 ? (size_t)(memory / 4) : 1};
    if (rc == 0)
        rc = zm_source_open(options->source, &so, &t->source, err);
    if (rc == 0)
        rc = zm_source_default_block_size(t->source, &t->b0, err);
    if (rc == 0)
        rc = open_disk(t, options, err);
    if (rc == 0)
        rc = zm_cache_create(t->cache_bytes, &t->files);
    if (rc == 0) {
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
        /* Elements the source holds but the stores leave out, each with why
         * (as `zarrmount inspect` lists them). */
        const char *const *skipped;
        size_t skipped_count = zm_source_skipped(t->source, &skipped);
        json_t *list = json_array();
        for (size_t i = 0; list != NULL && i < skipped_count; i++) {
            char line[ZM_REASON_MAX + 1024];
            zm__utf8_copy(line, sizeof line, skipped[i]);
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
        }
    }
    if (rc != 0) {
        zm__tree_close(t);
        return rc;
    }
    if (options->progress != NULL) {
        t->progress = options->progress;
        t->progress_context = options->progress_context;
        start_teller(t);
    }
    *out = t;
    return 0;
}

void zm__tree_close(zm_tree *t)
{
    if (t == NULL)
        return;
    stop_teller(t);
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
    zm_cache_destroy(t->files);
    stop_disk_writer(t);
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

static int explain_view(zm_tree *t, const target *tg, json_t *out, zm_err *err)
{
    const zm_view_spec *spec = &tg->spec;
    uint64_t n = zm_source_n_obs(t->source);
    json_object_set_new(out, "view", json_string(tg->key));
    json_object_set_new(out, "method", json_string(zm_view_kind_name(spec->kind)));
    json_object_set_new(out, "nObs", json_integer((json_int_t)n));
    if (tg->rest[0])
        json_object_set_new(out, "inside", json_string(tg->rest));
    if (spec->kind == ZM_VIEW_FILE) {
        char digest[17];
        uint32_t *all = malloc((n ? n : 1) * sizeof *all);
        if (all == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory");
        for (uint64_t i = 0; i < n; i++)
            all[i] = (uint32_t)i;
        zm_cellset_digest(all, n, n, digest);
        free(all);
        json_object_set_new(out, "k", json_integer((json_int_t)n));
        json_object_set_new(out, "digest", json_string(digest));
        json_object_set_new(out, "rule", json_string("every cell, in file order: the source as "
                                                     "it is, no selection"));
        return 0;
    }
    zm_view_request made;
    int rc = zm_view_request_make(t->source, spec, &made, err);
    if (rc != 0)
        return rc;
    zm_selection selection;
    rc = zm_select(&made.request, &selection, err);
    if (rc != 0) {
        zm_view_request_free(&made);
        return rc;
    }
    const zm_request *r = &made.request;
    char digest[17];
    zm_cellset_digest(selection.positions, selection.k, selection.n, digest);
    json_object_set_new(out, "seed", json_integer(r->seed));
    json_object_set_new(out, "kRequested", json_integer((json_int_t)r->k));
    json_object_set_new(out, "k", json_integer((json_int_t)selection.k));
    json_object_set_new(out, "digest", json_string(digest));
    switch (spec->kind) {
    case ZM_VIEW_FULL:
        json_object_set_new(out, "rule", json_string("every cell in the priority order of seed 0 "
                                                     "(the uniform method with k = n)"));
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
            json_array_append_new(columns, json_integer(made.columns[c]));
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
    if (selection.strata_count > 0) {
        json_t *strata = json_array();
        for (size_t i = 0; i < selection.strata_count; i++) {
            const zm_stratum *s = &selection.strata[i];
            json_t *name;
            if (spec->kind == ZM_VIEW_STRATIFIED)
                name = s->id < made.strata.count
                           ? json_stringn(made.strata.names.bytes + made.strata.names.offsets[s->id],
                                          made.strata.names.offsets[s->id + 1] -
                                              made.strata.names.offsets[s->id])
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
    size_t first = selection.k < 10 ? (size_t)selection.k : 10;
    json_t *cells = json_array();
    for (size_t i = 0; i < first; i++)
        json_array_append_new(cells, json_integer(selection.order[i]));
    json_object_set_new(out, "firstCells", cells);
    json_t *names = cell_names(t, selection.order, first);
    if (names != NULL)
        json_object_set_new(out, "firstCellNames", names);
    zm_selection_free(&selection);
    zm_view_request_free(&made);
    return 0;
}

int zm__tree_explain(zm_tree *t, const char *path, json_t **out, zm_err *err)
{
    *out = NULL;
    target tg;
    int rc = parse_path(t, path, &tg, err);
    if (rc != 0)
        return rc;
    /* The path as JSON holds it: UTF-8 (it may be any bytes). */
    size_t length = strlen(path);
    char *shown = malloc(length + 1);
    if (shown != NULL)
        zm__utf8_copy(shown, length + 1, path);
    json_t *e = shown ? json_pack("{s:s}", "path", shown) : NULL;
    free(shown);
    if (e == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    static const char *const what[] = {
        [T_ROOT] = "the mount: one directory a method (full, file, uniform, blocks, stratified, "
                   "spatial) and .zarrmount",
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
    };
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
        rc = parse_path(t, view_path, &viewed, err);
        if (rc == 0)
            rc = explain_view(t, &viewed, e, err);
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
        if (!file && tg.kind != T_ROOT && tg.kind != T_INFO_DIR)
            json_object_set_new(e, "method", json_string(zm_view_kind_name(tg.spec.kind)));
        break;
    }
    }
    if (rc != 0) {
        json_decref(e);
        return rc == -EINVAL ? -ENOENT : rc;
    }
    *out = e;
    return 0;
}
