/* Private to the tree module (src/tree/): struct zm_tree and what its
 * files share. Nothing outside src/tree/ includes it. */
#ifndef ZARRMOUNT_TREE_INTERNAL_H
#define ZARRMOUNT_TREE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "zarrmount/cache.h"
#include "zarrmount/config.h"
#include "zarrmount/source.h"
#include "zarrmount/synth.h"
#include "zarrmount/tree.h"
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
#define ZM__STATS_MODALITIES 8
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
    /* A MuData view's share of the above by modality (its files under
     * mod/NAME/; the first ZM__STATS_MODALITIES of them, in mod/'s order). */
    struct {
        _Atomic uint64_t chunks_made, documents_made;
        zm_source_tally source;
    } modality[ZM__STATS_MODALITIES];
    /* Synthesis ahead (one worker per view at most; state under the tree's
     * mutex): the view's chunks made before they are asked for. */
    _Atomic int ahead_state;         /* ahead_state values; changed under the tree's mutex */
    _Atomic int64_t last_read_ns;    /* the last request a reader made in the view */
    _Atomic uint64_t ahead_chunks, ahead_bytes, ahead_runs;
    _Atomic uint64_t ahead_total;    /* chunks in the view's store */
    _Atomic uint64_t ahead_run_chunks; /* chunks made (or found made) by the running worker */
    _Atomic uint64_t ahead_left;     /* chunks of arrays the last run left to readers */
    _Atomic int ahead_background;    /* the worker's pool flag: 0 while a reader waits for it */
    _Atomic pid_t ahead_tid;         /* the worker's thread */
    const zm_store_node *_Atomic ahead_node; /* the array it makes a chunk of, or NULL */
    struct timespec ahead_began;
    char ahead_reason[256];          /* why it stopped failing */
} view_stats;

enum ahead_state { AHEAD_NONE, AHEAD_RUNNING, AHEAD_IDLE, AHEAD_BOUND, AHEAD_DONE, AHEAD_FAILED };

/* A set file of -o sets=DIR (sets.c): NAME.json or NAME.txt, what it held
 * when last read, and the versions before it still served (a reader that
 * resolved sets/NAME to NAME@DIGEST keeps reading that version). */
#define SET_VERSIONS_KEPT 4
typedef struct set_entry {
    char *name;       /* the file's name without its extension */
    char *file;       /* DIR/NAME.json or DIR/NAME.txt */
    dev_t device;     /* what was read: a change of any of these reads it again */
    ino_t inode;
    off_t size;
    int64_t mtime_ns;
    zm_view_set *set; /* NULL: it did not verify (reason) */
    char reason[ZM_REASON_MAX];
    zm_view_set *old[SET_VERSIONS_KEPT]; /* earlier versions, newest first */
    int present;      /* found by the last scan of DIR */
} set_entry;
/* where/ sets made, the last ones kept for the next lookups. */
#define WHERE_KEPT 16

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
    /* Sets of cells (sets.c): -o sets=DIR's files, read when the mount
     * starts and again when DIR or a file changes, and where/ sets. */
    char *sets_dir;   /* NULL: no sets/ */
    pthread_mutex_t sets_mutex;
    set_entry *sets;
    size_t set_count, set_capacity;
    int64_t sets_dir_mtime_ns;
    ino_t sets_dir_inode;
    int sets_scanned;
    zm_view_set *where[WHERE_KEPT];
    unsigned where_next;
    char *source_path;
    char *source_text; /* source_path as UTF-8 (other bytes as '?'): JSON holds nothing else */
    zm_source *source;
    zm_source_identity identity;
    /* Chunks of walked views kept across mounts, filed under the source's
     * identity and the codec libraries that make the chunks' bytes (NULL:
     * off, or the directory could not be used). */
    zm_disk *disk;
    char disk_space[512];
    uint64_t head_hash; /* xxh3 of the source's first 64 KiB (zm__read_source_head) */
    /* Every path's time is derived from this (times.c): the source's
     * content, the options that change bytes, the store format version. */
    uint64_t time_seed;
    int64_t info_time_ns; /* info.json's: from its own bytes */
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
    zm_synth *synth; /* what the mount gives walks */
    uint64_t chunk_bytes;
    int layout_anndata; /* -o layout=anndata */
    int index_int32; /* -o index_dtype=int32: every view's spec.index_int32 */
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
    /* A next array being walked by encoding ahead where it fits (walk_next):
     * one at a time, so that two never take the same room. */
    int handing_on;
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

/* A path in a reason: at most SHOWN_MAX bytes of it, then "..." (a name may
 * be 4095 bytes long; the reason must keep its last words). For "%.*s%s". */
#define SHOWN_MAX 120
#define SHOWN(text)                                                                                \
    (int)(strlen(text) > SHOWN_MAX ? SHOWN_MAX : strlen(text)), (text),                            \
        strlen(text) > SHOWN_MAX ? "..." : ""

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
    T_SETS,       /* sets/ */
    T_WHERE,      /* where/ */
    T_WHERE_KEY,  /* where/<obs key>/ */
    T_SET,        /* sets/NAME@DIGEST/ or where/KEY/VALUES/: the methods over the set */
} target_kind;

typedef struct target {
    target_kind kind;
    zm_view_spec spec;
    char key[ZM__VIEW_KEY];  /* the view's key */
    char link[320];          /* T_LINK: the k= directory it points to, or NAME@DIGEST */
    int set_link;            /* T_LINK: sets/NAME, a link to its current version */
    char base[ZM__VIEW_KEY]; /* "" at the root, or the set's directory with a '/':
                              * "sets/NAME@DIGEST/", "where/KEY/VALUES/" */
    const char *rest;    /* inside the view */
} target;

/* Lets go of what a parsed target holds (its set). Every zm__parse_path
 * that succeeded is followed by one. */
void zm__target_clear(target *tg);

/* ---- Sets (sets.c) ---- */
int zm__sets_open(zm_tree *t, const char *directory, zm_err *err);
void zm__sets_close(zm_tree *t);
/* The set sets/NAME names (digest NULL: its current version; else the
 * version with that digest, current or kept), with a reference for the
 * caller; -ENOENT with why. */
int zm__set_get(zm_tree *t, const char *name, size_t length, const char *digest, zm_view_set **out,
                zm_err *err);
/* sets/NAME is a link the kernel keeps as an inode of each version it
 * named (zm_node.snapshot: this bit and the version's digest shifted right
 * once), so that a version's link never reads as another's: its inode is
 * "sets/NAME@<snapshot>" (sets/NAME@DIGEST names the version's directory). */
#define SET_LINK_SNAPSHOT (1ULL << 63)
static inline uint64_t zm__set_link_snapshot(const char digest[17])
{
    uint64_t value = 0;
    for (int i = 0; i < 16; i++)
        value = value << 4 | (uint64_t)(digest[i] <= '9' ? digest[i] - '0' : digest[i] - 'a' + 10);
    return SET_LINK_SNAPSHOT | value >> 1;
}
/* The version of sets/NAME whose link has this snapshot, current or kept. */
int zm__set_get_linked(zm_tree *t, const char *name, size_t length, uint64_t snapshot,
                       zm_view_set **out, zm_err *err);
/* The names of the sets that verify now, each a link (to NAME@DIGEST). */
int zm__sets_list(zm_tree *t, int (*emit)(void *context, const char *name, const char *link),
                  void *context);
/* The set where/KEY/VALUES names, with a reference for the caller. */
int zm__where_get(zm_tree *t, const char *key, const char *values, zm_view_set **out, zm_err *err);

typedef enum file_kind { F_NONE, F_ZGROUP, F_ZATTRS, F_ZARRAY, F_ZMETADATA, F_CHUNK } file_kind;

typedef struct place {
    const zm_store_node *node; /* the group or array, or the file's node */
    file_kind file;
    uint64_t coords[ZM_ZARR_MAX_RANK];
    char store_path[1024];     /* the node's path in the store */
} place;

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
    int hand_on_after;        /* ... put off: it did not fit beside the walks held (walked
                               * then, it would spill); taken on when a retire makes room */
    uint64_t hand_on_bytes;   /* what that walk will hold */
    const zm_store_node *hand_on_node; /* and its array */
    view_stats *stats;        /* the view's counters */
    /* Progress, for stats.json and the log. */
    _Atomic uint64_t done; /* chunks encoded (or found made) */
    _Atomic int running;   /* threads still encoding */
    struct timespec began;
};

typedef struct snapshot {
    struct snapshot *next;
    uint64_t serial;
    char *bytes;
    size_t size;
} snapshot;

/* The module's files share these (zm__, private to src/tree/); each is
 * described where it is defined. */

/* ---- paths.c: the path grammar ------------------------------------------ */

/* A canonical decimal in [low, high] (0), or -1. */
int zm__parse_number(const char *text, size_t length, uint64_t low, uint64_t high, uint64_t *out);
/* ENOENT with the kernel's reason when a spatial grid cannot fit dims columns. */
int zm__grid_fits(const char *embedding, uint64_t grid_size, unsigned dims, zm_err *err);
/* What a path of the tree names, or -ENOENT with why it names nothing. */
int zm__parse_path(zm_tree *t, const char *path, target *out, zm_err *err);
/* The place a path inside a view's store names (a node, and which file of it). */
int zm__locate(zm_view *view, const char *rest, place *out, zm_err *err);

/* ---- registry.c: the views built, held and let go ----------------------- */

/* The view for a target's key, built on first use and held until released. */
int zm__view_get(zm_tree *t, const target *tg, zm_view **out, int wait, zm_err *err);
/* Holds taken (count > 0) or given back (< 0) for threads; under the tree's mutex. */
void zm__view_hold_locked(zm_tree *t, zm_view *view, int count);
void zm__view_release_locked(zm_tree *t, zm_view *view);
void zm__view_release(zm_tree *t, zm_view *view);
/* Whether the view with this key is built. */
int zm__view_built(zm_tree *t, const char *key);

/* ---- files.c: making files, their sizes, the disk cache ----------------- */

/* The size of a file made before, by its key (1), or 0. */
int zm__size_get(zm_tree *t, uint64_t key, uint64_t *size);
/* Whether an array's chunks are kept on disk across mounts. */
int zm__kept_on_disk(const zm_tree *t, const zm_view *view, const zm_store_node *node);
/* Where the source reads made for a node of view count (zm_source_tally_set):
 * the view's tally, or its modality's. */
zm_source_tally *zm__tally_of(view_stats *vs, zm_view *view, const zm_store_node *node);
/* Files what is queued, then stops the disk writer. */
void zm__stop_disk_writer(zm_tree *t);
/* A file's size without making it, when geometry gives it (1), or 0. */
int zm__known_size(zm_tree *t, const place *w, uint64_t *size);
/* A file's key in the file cache. */
uint64_t zm__file_key(zm_view *view, const char *full_path, const place *w);
/* A file's bytes from the file cache, made if not there (counted for vs). */
int zm__file_in_cache(zm_tree *t, zm_view *view, view_stats *vs, const char *full_path,
                      const place *w, zm_cache_ref *ref, zm_err *err);
/* A kept chunk's size from the disk cache (1), or 0. */
int zm__kept_size(zm_tree *t, zm_view *view, const char *path, const place *w, uint64_t *size);
/* The disk cache and its writer, if wanted and usable. */
int zm__open_disk(zm_tree *t, const zm_tree_options *options, zm_err *err);

/* ---- times.c: what makes the bytes, and the times derived from it ------ */

/* The options that change a served file's bytes, as text ("codec=...|
 * blocksize=...|chunk=..."): the one place an option that changes bytes is
 * written, for the disk cache's keys and the paths' times alike. */
void zm__bytes_options(const zm_tree *t, char *out, size_t size);
/* Hashes the source's first 64 KiB into t->head_hash. */
void zm__read_source_head(zm_tree *t);
/* The source's identity as text: size, mtime, (inode,) head hash, manifest
 * digest, codec libraries, priority seed, store format version. The disk
 * cache's space has the inode; the times leave it out. */
void zm__source_identity_text(const zm_tree *t, int with_inode, char *out, size_t size);
/* t->time_seed, once the source, codec and options are known; then, once
 * info.json is made, its time. */
void zm__times_open(zm_tree *t);
void zm__times_of_info(zm_tree *t);

/* ---- ahead.c: work ahead of readers ------------------------------------- */

/* Forgets the arrays encoded ahead of a view about to be freed; under the tree's mutex. */
void zm__forget_ahead(zm_tree *t, const zm_view *view);
/* A file for a reader (zm__file_in_cache), with the work ahead it starts. */
int zm__with_file(zm_tree *t, zm_view *view, view_stats *vs, const char *full_path,
                  const place *w, zm_cache_ref *ref, zm_err *err);
int64_t zm__monotonic_ns(void);
/* A reader asked something of the view: its synthesis ahead starts if it may. */
void zm__ahead_touch(zm_tree *t, view_stats *vs);
/* With codec none, a chunk of a walked array served from its walk (at
 * full_path, w): the walks of the arrays after it are made ahead, one
 * after another as they fit (ahead.c). */
void zm__walk_chain(zm_tree *t, zm_view *view, const char *full_path, const place *w);
/* A walk of view retired as its reader read its last chunk: walks put off
 * for want of room are taken on (ahead.c, on a thread of their own). */
void zm__walk_retired(zm_tree *t, zm_view *view);
/* A reader waits for a view to be let go: every worker runs at normal priority. */
void zm__ahead_make_way(zm_tree *t);

/* ---- stats.c: counters, snapshots, the progress teller ------------------ */

double zm__seconds_since(const struct timespec *began);
/* The counters of a view's key (made on first use), or of a target. */
view_stats *zm__stats_for(zm_tree *t, const char *key);
view_stats *zm__stats_of_target(zm_tree *t, const target *tg);
/* Counts a refused path and keeps its reason. */
void zm__note_refusal(zm_tree *t, view_stats *vs, const char *path, const zm_err *err);
/* A copy of the list of view counters (malloc'd). */
view_stats **zm__stats_list(zm_tree *t, size_t *count);
/* stats.json's snapshots: found by serial (under stats_mutex), the serial a
 * path names, a new one taken for a lookup. */
snapshot *zm__find_snapshot(zm_tree *t, uint64_t serial);
uint64_t zm__snapshot_serial_of(const char *path);
int zm__take_snapshot(zm_tree *t, uint64_t *size, uint64_t *serial);
/* The progress teller's thread (options.progress). */
void zm__start_teller(zm_tree *t);
void zm__stop_teller(zm_tree *t);

#endif
