/* What makes a served file's bytes, written down once: the options that
 * change them (zm__bytes_options) and the source they come from
 * (zm__source_identity_text), for the disk cache's keys and for the times
 * every path of the tree is given (zm__tree_time_ns). docs/mount.md, "File
 * times", says the rule. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "tree/tree_internal.h"

/* Every option that changes the bytes of a file the tree serves is written
 * here, and only here: the disk cache files chunks under it (disk_key_of)
 * and the times of every path are derived from it (zm__times_open), so an
 * option added here keeps both right and an option left out of here breaks
 * both. An option's default writes what it wrote before it existed (or
 * nothing), so that entries kept by an earlier build are still found. */
void zm__bytes_options(const zm_tree *t, char *out, size_t size)
{
    char codec[64];
    zm_codec_format(&t->codec, codec, sizeof codec);
    /* index_dtype=int32 (sparse indices and indptr as int32) said only when
     * given, as layout=anndata is. */
    snprintf(out, size, "codec=%s|blocksize=%d|chunk=%" PRIu64 "%s%s", codec, t->codec.blocksize,
             t->chunk_bytes, t->layout_anndata ? "|layout=anndata" : "",
             t->index_int32 ? "|index=int32" : "");
}

/* Reads the source's first 64 KiB (an HDF5 file's superblock and root
 * metadata) for its hash: what it is, besides its size and mtime. */
void zm__read_source_head(zm_tree *t)
{
    uint8_t head[65536];
    ssize_t got = zm_source_read_raw(t->source, 0, head, sizeof head);
    t->head_hash = XXH3_64bits(head, got > 0 ? (size_t)got : 0);
}

void zm__source_identity_text(const zm_tree *t, int with_inode, char *out, size_t size)
{
    const zm_source_identity *id = zm_source_get_identity(t->source);
    /* The codec's libraries and their versions (zm_codec_build): another
     * zstd may make other bytes for the same values, and a mount must never
     * serve one library's chunks beside another's. codec=none adds nothing:
     * its chunks are the values as they are, which no codec library makes. */
    char build[256];
    zm_codec_build(&t->codec, build, sizeof build);
    /* A priority-ordered file's stores name its cells by original position
     * (its verified record's seed): other stores than those of a mount that
     * read it as an ordinary file (zarrmount before issue 20), whose
     * subsamples held other cells. */
    const zm_priority *priority = zm_source_priority(t->source);
    char ordered[32] = "";
    if (priority->verified)
        snprintf(ordered, sizeof ordered, "|priority=%" PRIu32, priority->seed);
    /* A directory store has no bytes of its own to hash: its manifest's
     * digest names its version. */
    char digest[40] = "";
    if (id->digest != 0)
        snprintf(digest, sizeof digest, "|manifest=%016llx", (unsigned long long)id->digest);
    char inode[32] = "";
    if (with_inode)
        snprintf(inode, sizeof inode, "|%llu", (unsigned long long)id->inode);
    snprintf(out, size, "source|%lld|%lld%s|%016llx%s%s%s%s|store=%d", (long long)id->size,
             (long long)id->mtime_ns, inode, (unsigned long long)t->head_hash, digest,
             build[0] ? "|codecs=" : "", build, ordered, ZM_STORE_FORMAT_VERSION);
}

/* Times run from 2001-01-01 to 2020-12-31, whole seconds plus a derived
 * nanosecond part: plausible, and in the past on every machine, so that
 * none is "in the future" (tar and make warn of such files, and HTTP
 * wants no Last-Modified later than the response's Date). 631 million
 * seconds: two stores sharing a path and a size share a time once in
 * 600 million pairs. */
#define TIME_FIRST_SECOND INT64_C(978307200) /* 2001-01-01T00:00:00Z */
#define TIME_SECONDS      INT64_C(631152000) /* to 2021-01-01T00:00:00Z */

static int64_t time_of_hash(uint64_t hash)
{
    int64_t seconds = TIME_FIRST_SECOND + (int64_t)(hash % (uint64_t)TIME_SECONDS);
    int64_t nanoseconds = (int64_t)((hash >> 32) % 1000000000u);
    return seconds * 1000000000 + nanoseconds;
}

void zm__times_open(zm_tree *t)
{
    /* Content, not place: the inode (and the source's path) are left out,
     * so that two machines serving copies of one file (cp -p, rsync -a:
     * the mtime kept) give every path the same time, and an HTTP cache in
     * front of them one validator. The mtime stays in: a file rewritten in
     * place past its first 64 KiB keeps its size and head hash. */
    char identity[512], options[256], text[1024];
    zm__source_identity_text(t, 0, identity, sizeof identity);
    zm__bytes_options(t, options, sizeof options);
    snprintf(text, sizeof text, "zarrmount times|%s|%s", identity, options);
    t->time_seed = XXH3_64bits(text, strlen(text));
}

void zm__times_of_info(zm_tree *t)
{
    /* info.json says more than what makes the stores (the source's path
     * and inode, the memory cache's size, the sets directory): its time is
     * its own bytes'. */
    t->info_time_ns = time_of_hash(XXH3_64bits_withSeed(t->info, t->info_size, t->time_seed));
}

int64_t zm__tree_time_ns(zm_tree *t, const char *path, const zm_node *node)
{
    /* stats.json: a new snapshot at every lookup, made now (two in a row
     * never have one size, so nginx's ETag tells them apart too). */
    if (node->live && node->kind == ZM_NODE_FILE) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    }
    if (strcmp(path, ".zarrmount/info.json") == 0)
        return t->info_time_ns;
    /* A snapshot's own inode, "<path>@<snapshot>" (sets/NAME, a link to its
     * current version): the path without the suffix, and the snapshot. */
    size_t length = strlen(path);
    uint64_t hash;
    if (node->snapshot != 0) {
        char suffix[32];
        size_t suffix_length = (size_t)snprintf(suffix, sizeof suffix, "@%llu",
                                                (unsigned long long)node->snapshot);
        if (length > suffix_length && strcmp(path + length - suffix_length, suffix) == 0)
            length -= suffix_length;
        uint8_t serial[8]; /* little-endian: the same time on every machine */
        for (int i = 0; i < 8; i++)
            serial[i] = (uint8_t)(node->snapshot >> (8 * i));
        hash = XXH3_64bits_withSeed(path, length, t->time_seed);
        hash = XXH3_64bits_withSeed(serial, sizeof serial, hash);
    } else {
        hash = XXH3_64bits_withSeed(path, length, t->time_seed);
    }
    return time_of_hash(hash);
}
