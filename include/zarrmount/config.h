/* zarrmount: the options a tree is served with, and their defaults, written
 * once. The mount command line (src/fs/options.c) and the cli commands
 * (export) read what they are given into a zm_config, sizes through
 * zm_parse_size; an option not given stays "the default" (0, or -1 for
 * ahead_idle_seconds), which zm_config_resolve turns into the value below:
 * nowhere else is a default written.
 *
 * No FUSE here: the core library, the unit tests and the cli link it. */
#ifndef ZARRMOUNT_CONFIG_H
#define ZARRMOUNT_CONFIG_H

#include <stdint.h>

#include "zarrmount/error.h"

/* Raw bytes a chunk aims at (-o chunk_size, export --chunk-size). */
#define ZM_DEFAULT_CHUNK_BYTES ((uint64_t)1 << 20)
/* What the daemon keeps in memory for reuse (-o cache_size): half for
 * synthesized files, a quarter for decoded source chunks, a quarter for
 * walks (larger walks are spilled to disk in batches). */
#define ZM_DEFAULT_CACHE_BYTES ((uint64_t)1 << 30)
/* The most the disk cache holds (-o cache_max). */
#define ZM_DEFAULT_DISK_CACHE_MAX ((uint64_t)4 << 30)
/* Synthesis ahead stops when a view has been idle this long (-o ahead_idle). */
#define ZM_DEFAULT_AHEAD_IDLE_SECONDS 5.0
/* The most threads -o threads= may ask for. */
#define ZM_MAX_THREADS 1024u
/* How far ahead of a walking reader kept files are pushed into the page
 * cache: an eighth of the memory cache, at most this (a window is one round
 * trip; more only costs memory the reader may not want). */
#define ZM_PUSH_WINDOW_MAX ((uint64_t)64 << 20)

typedef struct zm_config {
    const char *codec;         /* "blosc:zstd:1" etc.; NULL: the default (zm_codec_default, blosc:lz4:5:bitshuffle) */
    uint64_t chunk_bytes;      /* raw bytes a chunk aims at; 0: the default */
    uint64_t cache_bytes;      /* memory kept for reuse, split as ZM_DEFAULT_CACHE_BYTES says;
                                * 0: the default */
    const char *cache_dir;     /* the disk cache; NULL: the default directory; "none": off */
    const char *sets_dir;      /* -o sets=DIR, made absolute; NULL: no sets/ */
    int layout_anndata;        /* -o layout=anndata: a 10x file with several feature types
                                * or genomes as one AnnData (0: the default, MuData) */
    uint64_t cache_max;        /* the disk cache's bound; 0: the default */
    int index_int32;           /* -o index_dtype=int32: sparse indices and indptr as <i4 */
    /* Threads that read, decode and encode chunks: the source's decode pool
     * (the reading thread and threads - 1 workers) and the threads that
     * encode a walked array's other chunks ahead (this many). 0: one per
     * core. */
    unsigned threads;
    double ahead_idle_seconds; /* synthesis ahead stops after this idle; 0: off; -1: the default */
    double ahead_rate;         /* chunks a second made ahead; 0: no limit */
} zm_config;

/* Every option "the default" (not given). */
void zm_config_unset(zm_config *config);

/* given with every "the default" replaced by its value (threads:
 * zm_config_cores()); given and resolved may be the same. */
void zm_config_resolve(const zm_config *given, zm_config *resolved);

/* The defaults: every field as a mount without options has it. */
void zm_config_defaults(zm_config *config);

/* The processors online, at least 1: the default number of threads. */
unsigned zm_config_cores(void);

/* The machine's physical memory in bytes (0 when it cannot be told):
 * what is asked of the kernel ahead is an eighth of it at most. */
uint64_t zm_config_memory(void);

/* The push window for a memory cache of cache_bytes (resolved; see
 * ZM_PUSH_WINDOW_MAX). */
uint64_t zm_config_push_window(uint64_t cache_bytes);

/* "256M", "1G", "4096", "64KiB" (K, M, G, T: powers of 1024, an optional
 * "iB" after the letter) into bytes; more than 0. -EINVAL with a one-line
 * reason naming option ("chunk_size", "--chunk-size"): "OPTION=TEXT: not a
 * size (...)", "...: too large", "...: must be more than 0". */
int zm_parse_size(const char *option, const char *text, uint64_t *bytes, zm_err *err);

/* "1" to ZM_MAX_THREADS into a number of threads. -EINVAL with a reason
 * naming option. */
int zm_parse_threads(const char *option, const char *text, unsigned *threads, zm_err *err);

#endif
