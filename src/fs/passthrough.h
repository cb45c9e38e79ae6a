/* Internal to the fs module: FUSE passthrough, the kernel reading a file
 * straight from a backing file (here the disk cache's file of exactly its
 * bytes) instead of asking the daemon (Linux 6.9 and later).
 *
 * libfuse 3.14 (Debian 12's) knows nothing of it, so the two places the
 * protocol carries it are written here: the INIT reply (the FUSE_PASSTHROUGH
 * flag and the stacking depth, patched into libfuse's own reply before it
 * reaches the kernel) and the OPEN reply (FOPEN_PASSTHROUGH and a backing
 * id from the FUSE_DEV_IOC_BACKING_OPEN ioctl, sent as the raw reply).
 *
 * The kernel holds one mode per inode while it is open: every open of an
 * inode opened for passthrough must name the same backing file, and none
 * may while it is open through the page cache. zm__backings keeps, per
 * inode, the opens answered and not yet released, so that each open is
 * answered as the ones still open were. */
#ifndef ZARRMOUNT_FS_PASSTHROUGH_H
#define ZARRMOUNT_FS_PASSTHROUGH_H

#include <stdint.h>

#include <fuse_lowlevel.h>

/* Reads the kernel's INIT from session and answers it through libfuse
 * (which calls the init operation). With offer set and the kernel able to,
 * the reply also asks for passthrough; *granted says whether it was asked
 * (the kernel may still refuse: the first backing open says). Call once,
 * after fuse_session_mount and before the loop. 0, or -errno (the session
 * ended: the loop then ends at once too). */
int zm__passthrough_handshake(struct fuse_session *session, int offer, int *granted);

/* Registers fd (a regular file) with the connection: returns its backing
 * id (> 0), or -errno (EPERM: not granted, or not CAP_SYS_ADMIN). */
int zm__backing_open(struct fuse_session *session, int fd);
/* Gives a backing id back (the kernel keeps the file while files opened
 * with it stay open). */
void zm__backing_close(struct fuse_session *session, int id);

/* Answers an open with passthrough to backing id. 0 or -errno (the
 * request was interrupted: nothing will release it). */
int zm__reply_open_passthrough(fuse_req_t req, uint64_t fh, int id);

typedef struct zm__backings zm__backings;

int zm__backings_create(zm__backings **out);
void zm__backings_destroy(zm__backings *backings);

enum zm__open_mode {
    ZM__OPEN_CACHED = 1,      /* through the page cache (the daemon reads) */
    ZM__OPEN_PASSTHROUGH = 2, /* from a backing file */
    ZM__OPEN_DECIDE = 3,      /* nothing open: the caller decides, then calls
                               * zm__backings_decided */
};

/* How an open of inode must be answered: as the opens of it still open
 * (*id is the backing id for ZM__OPEN_PASSTHROUGH), or ZM__OPEN_DECIDE.
 * Waits while another thread decides for the same inode. Each answer but
 * DECIDE counts an open, to be given back by zm__backings_release. */
int zm__backings_begin(zm__backings *backings, uint64_t inode, int *id);
/* After ZM__OPEN_DECIDE: id > 0 for passthrough with that backing id, 0
 * for the page cache. Counts the open. */
void zm__backings_decided(zm__backings *backings, uint64_t inode, int id);
/* An open of mode released (or never answered). Returns the backing id to
 * close when it was the inode's last passthrough open, else 0. */
int zm__backings_release(zm__backings *backings, uint64_t inode, int mode);

#endif
