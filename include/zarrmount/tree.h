/* The tree module (src/tree/): the mounted tree as paths, without FUSE. The
 * FUSE glue (src/fs/fuse.c) turns kernel requests into these calls; the
 * tree builds the views (full/, file/, uniform/, blocks/) over a source.
 *
 * Paths are relative to the mount point, without leading or trailing
 * slashes: "" is the root, "full/X/data/.zarray" a file. Every call is
 * thread-safe and may block (it synthesizes); none keeps a pointer to path. */
#ifndef ZARRMOUNT_TREE_H
#define ZARRMOUNT_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"

typedef struct zm_tree zm_tree;

/* The version of the stores zarrmount serves: bumped whenever the bytes
 * served for the same source and options change (a document's field, a
 * chunk's layout, a fill value, an encoder's settings). Every path's time
 * is derived from it (zm__tree_time_ns), so that an HTTP cache in front of
 * a mount never answers "not modified" with bytes of the earlier version;
 * the disk cache files entries under it, so that none of them is served
 * by a build that would make other bytes. docs/mount.md, "File times". */
#define ZM_STORE_FORMAT_VERSION 1

/* What a tree serves and how; filled from the mount options. */
typedef struct zm_tree_options {
    const char *source;          /* the HDF5 file */
    const char *codec;           /* "blosc:zstd:1" etc.; NULL: the default */
    uint64_t chunk_bytes;        /* raw bytes a chunk aims at; 0: 1 MiB */
    uint64_t cache_bytes;        /* synthesized chunks kept; 0: the default */
    unsigned threads;            /* decode pool and encoders ahead (config.h); 0: a core each */
    const char *cache_dir;       /* chunks of walked views kept across mounts: NULL for the
                                  * default directory, "none" for no disk cache */
    uint64_t cache_max;          /* the disk cache's bound; 0: 4 GiB */
    const char *sets_dir;        /* -o sets=DIR (absolute): the sets sets/ serves; NULL: none */
    int layout_anndata;          /* -o layout=anndata (zm_source_options.layout_anndata) */
    int index_int32;             /* -o index_dtype=int32 (zm_view_spec.index_int32) */
    /* Synthesis ahead: a view's chunks are made at idle priority once it is
     * read, until no reader has asked anything of it for ahead_idle_seconds
     * (negative: the default, 5; 0: off), at most ahead_rate a second (0:
     * no limit). */
    double ahead_idle_seconds;
    double ahead_rate;
    /* Long work (a walk, encoding ahead) is told here every few seconds
     * while it runs: one line with its percent, rate and time left. NULL:
     * not told (it still shows in .zarrmount/stats.json). */
    void (*progress)(void *context, const char *line);
    void *progress_context;
} zm_tree_options;

/* Opens the source and builds the tree's root. -EINVAL etc. with a reason
 * naming what was wrong (a bad source, a bad option). */
int zm__tree_open(const zm_tree_options *options, zm_tree **out, zm_err *err);
void zm__tree_close(zm_tree *tree);
/* What the mount gives walks (their stats: zm_synth_get_walk_stats). */
struct zm_synth;
const struct zm_synth *zm__tree_synth(const zm_tree *tree);

/* The source's elements the stores leave out, "PATH: why" each
 * (zm_source_skipped). */
size_t zm__tree_skipped(zm_tree *tree, const char *const **lines);

/* Checks the source is still the file that was opened (device, inode, size,
 * mtime): -EIO with a reason saying to remount if not. Called on open(). */
int zm__tree_check_source(zm_tree *tree, zm_err *err);

typedef enum zm_node_kind {
    ZM_NODE_DIRECTORY,
    ZM_NODE_FILE,
    ZM_NODE_LINK, /* a symbolic link (share= / pct= views, later) */
} zm_node_kind;

typedef struct zm_node {
    zm_node_kind kind;
    uint64_t size;   /* files: exact bytes (a compressed chunk is synthesized to know it);
                      * in zm__tree_list, ZM_SIZE_UNKNOWN when knowing it would mean
                      * synthesizing: look the entry up for its attributes */
    int live;        /* changes while mounted (.zarrmount/stats.json): each lookup
                      * takes a new snapshot, and the kernel must keep neither its
                      * name nor its attributes */
    int error;       /* files: 0, or the -errno its bytes could not be made with (the
                      * reason in the err of the call that gave the node). The file
                      * exists (the store's structure says so) and its size is then
                      * ZM_SIZE_UNMADE: it is never served, its open and reads fail */
    uint64_t snapshot; /* a live file's snapshot (0: none). Served under a path of
                        * its own, "<path>@<snapshot>" (an inode of its own: a
                        * reader taking it in several reads while another opens
                        * the file sees one snapshot whole), until released */
} zm_node;

#define ZM_SIZE_UNKNOWN UINT64_MAX
/* The size of a file whose bytes could not be made (zm_node.error): more
 * than 0, so that the kernel asks for its bytes (and the read fails) rather
 * than take it as empty. */
#define ZM_SIZE_UNMADE 4096

/* What a path is. -ENOENT (with a reason for the log) if it does not exist.
 * A file the store's structure holds is found whether or not its bytes can
 * be made: one that cannot be (a damaged source chunk, values outside what
 * their element allows, the source changed) is answered with 0, node->error
 * set and the reason in err, so that a reader asking whether it exists
 * (zarr-python 2's os.path.isfile) is told yes and then fails to read it,
 * rather than taking the failure for a missing chunk and filling it in.
 * -EIO for a directory that cannot be made: a view whose cells or layout
 * cannot be built from the source (a damaged indptr, ...), or one not built
 * yet when the source changed. */
int zm__tree_lookup(zm_tree *tree, const char *path, zm_node *node, zm_err *err);

/* Calls emit for each entry of a directory, in a stable order (the same
 * every time). emit returns non-zero to stop early (then that value is
 * returned). */
typedef int (*zm__tree_emit)(void *context, const char *name, const zm_node *node);
int zm__tree_list(zm_tree *tree, const char *path, zm__tree_emit emit, void *context, zm_err *err);

/* Reads up to size bytes of a file from offset into buffer; *done gets the
 * bytes read (fewer only at the end of the file). */
int zm__tree_read(zm_tree *tree, const char *path, uint64_t offset, size_t size, void *buffer,
                  size_t *done, zm_err *err);
/* zm__tree_read with no copy: on success send is called once with the
 * bytes (done of them, maybe none) where they lie, held until it returns
 * (the FUSE layer replies from there); on failure it is not called. */
typedef void (*zm__tree_sink)(void *context, const void *bytes, size_t size);
int zm__tree_send(zm_tree *tree, const char *path, uint64_t offset, size_t size,
                  zm__tree_sink send, void *context, size_t *done, zm_err *err);

/* What a path is, for `zarrmount explain`, as a JSON object (a json_t *):
 * a directory or a .zarrmount file ("kind": "directory" or "file", with
 * what it "holds"), a link and the size rule, or a view (method, n, k, seed,
 * settings and where they came from, digest, strata, first cells in
 * priority order). Reads no chunk. -ENOENT with the reason a path does not
 * exist (not canonical, refused by the kernel, an unknown key). */
struct json_t;
int zm__tree_explain(zm_tree *tree, const char *path, struct json_t **out, zm_err *err);

/* What a source's Cellucid priority record comes to, as info.json, inspect
 * and explain say it: {"verified": true, "recorded": true, "seed": S[,
 * "levels": L, "prefixCounts": true][, "note": why something is unused]}
 * or {"verified": false, "recorded": whether the file has a record,
 * "reason": why} (a json_t *, NULL when out of memory). */
struct zm_source;
struct json_t *zm_tree_priority_json(const struct zm_source *source);

/* What a live file (zm_node.live) is now, without taking a new snapshot:
 * the kernel asks for attributes between a lookup and the reads. Other
 * paths answer as zm__tree_lookup does. */
int zm__tree_getattr(zm_tree *tree, const char *path, zm_node *node, zm_err *err);

/* The kernel forgot the inode of a snapshot (zm_node.snapshot): it is
 * freed, and "<path>@<snapshot>" no longer read. */
void zm__tree_release_snapshot(zm_tree *tree, uint64_t snapshot);

/* Whether what path names (or that it names nothing) may change while
 * mounted: sets/ (its listing) and a name in it (a set file added, changed
 * or removed). The kernel must then keep neither the listing nor a lookup
 * that found nothing. */
int zm__tree_changes(zm_tree *tree, const char *path);

/* Counts an open of path in its view's counters (the tree sees lookups,
 * listings and reads itself; opens reach only the FUSE layer). */
void zm__tree_count_open(zm_tree *tree, const char *path);

/* Counts an open (read 0) or a read (read 1) of a file whose bytes could
 * not be made, refused by the FUSE layer without asking the tree again: an
 * open or a read answered, and a request that met such a file. */
void zm__tree_count_unmade(zm_tree *tree, const char *path, int read);

/* A file the disk cache holds (a chunk of a walked view), for the kernel to
 * read straight from the cache's own file: *fd a read-only descriptor of
 * exactly its bytes (*size), checked against their hash (or unchanged since
 * it was); the caller closes it. Counted as a passthrough open of its view. -ENOENT when
 * path is no such file or its entry is not there (the daemon serves it);
 * a damaged entry is removed (and logged once) and reported -EBADMSG. */
int zm__tree_open_kept(zm_tree *tree, const char *path, int *fd, uint64_t *size, zm_err *err);

/* The bytes of a file the disk cache holds, checked against their hash:
 * *bytes (malloc'd) and *size. Counted as a push of its view (fs/push.h).
 * Errors as zm__tree_open_kept. */
int zm__tree_read_kept(zm_tree *tree, const char *path, uint8_t **bytes, size_t *size, zm_err *err);

/* Whether the disk cache holds files of this source (a remount). */
int zm__tree_kept_on_disk(zm_tree *tree);
/* Says that chunks the disk cache holds reach readers through the kernel
 * (passthrough, or pushed into its page cache): synthesis and encoding
 * ahead leave them on disk instead of loading them into memory. */
void zm__tree_kernel_reads_kept(zm_tree *tree);


/* The time of a path (its atime, mtime and ctime alike), in nanoseconds
 * since the epoch, for the node a lookup, a listing or a getattr of it
 * gave: an xxh3 of what makes its bytes (the source's content: size, mtime,
 * head hash, manifest digest, codec libraries, priority seed; the options
 * that change bytes; ZM_STORE_FORMAT_VERSION) and of the path, mapped into
 * 2001-01-01..2020-12-31. The same on every mount of the same source
 * content (not its path or inode) and options, on every machine with the
 * same codec libraries; another when any of them changes. .zarrmount/info.json's is derived from its own bytes, a
 * live file's (stats.json) is now. path may end in "@<node->snapshot>"
 * (the inode of a snapshot). Thread-safe, cheap (no I/O). */
int64_t zm__tree_time_ns(zm_tree *tree, const char *path, const zm_node *node);

/* The target of a link. */
int zm__tree_readlink(zm_tree *tree, const char *path, char *target, size_t size, zm_err *err);

#endif
