/* Internal to the fs module: pushing kept files into the kernel's page cache
 * ahead of a reader walking a directory.
 *
 * Readers that walk a directory (tar, cp -r, rsync, find then reads) list
 * it first, then read its files in the listing's order. On a remount the
 * disk cache holds most of them. Once such a reader reads a listed file, the
 * pusher writes the files that follow it in the listing, up to `window`
 * bytes, into the kernel's page cache (FUSE_NOTIFY_STORE) from threads of
 * its own, so that the reader's reads of them are answered by the kernel
 * without a round trip to the daemon, as on a local file system. The first
 * file past the window is left alone: when the reader gets to it, its read
 * reaches the daemon and moves the window on (a tripwire). So a listing
 * alone (ls -l) pushes nothing, a reader of one file costs at most one
 * window, and a walk costs one round trip a window. Only files whose disk
 * cache entry checks (xxh3) are pushed; a file read meanwhile is pushed
 * harmlessly (the same bytes); pages the kernel drops are read as usual. */
#ifndef ZARRMOUNT_FS_PUSH_H
#define ZARRMOUNT_FS_PUSH_H

#include <stddef.h>
#include <stdint.h>

#include <fuse_lowlevel.h>

#include "fs/inodes.h"
#include "zarrmount/tree.h"

typedef struct zm__pusher zm__pusher;

/* Starts the pusher's threads. -errno. */
int zm__pusher_start(struct fuse_session *session, zm_tree *tree, zm__inodes *inodes, uint64_t window,
                     zm__pusher **out);
/* A listing of directory `directory` gave the kernel these inodes (each
 * with a lookup counted), its entries from `offset` on: offset 0 starts the
 * directory's listing again. Files of unknown size are not among them. */
void zm__pusher_listed(zm__pusher *pusher, uint64_t directory, int64_t offset, const uint64_t *inodes,
                       size_t count);
/* A read of inode reached the daemon: if it is a listed file at or past
 * its listing's window, the next window is pushed. Never blocks on the
 * pushing. NULL pusher: nothing. */
void zm__pusher_read(zm__pusher *pusher, uint64_t inode);
/* Stops the threads (what is queued is dropped) and frees it. */
void zm__pusher_stop(zm__pusher *pusher);

#endif
