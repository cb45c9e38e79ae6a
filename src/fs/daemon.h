/* Internal to the fs module: going to the background.
 *
 * fuse_daemonize forks after the mount, which is too late for us: opening
 * the tree opens the source, which starts the decode threads, and a fork
 * keeps only the forking thread (the daemon's reads would wait forever on
 * a pool that is not there). So the daemon forks first, before anything
 * starts a thread, and the parent waits: it exits 0 when the child says it
 * has mounted, or with the child's own exit status when the child fails
 * before that (the child has printed why on the shared stderr). Shells,
 * mount.fuse3 and systemd see the same status as with -f. */
#ifndef ZARRMOUNT_FS_DAEMON_H
#define ZARRMOUNT_FS_DAEMON_H

#include "zarrmount/error.h"

/* Forks. Returns 0 in the child, with *report the descriptor to tell the
 * parent on; the parent never returns. -errno with a reason if the fork
 * fails (nothing forked then). */
int zm__daemon_fork(int *report, zm_err *err);

/* In the child, once mounted: moves to "/", points stdin, stdout and
 * stderr at /dev/null, sends the log to syslog and releases the parent
 * with status 0. */
void zm__daemon_detach(int report);

#endif
