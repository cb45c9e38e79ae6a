/* FUSE passthrough with libfuse 3.14: see passthrough.h. The protocol's
 * names are the kernel's (include/uapi/linux/fuse.h); those newer than
 * Debian 12's kernel headers (6.1) are defined here, with the values the
 * kernel gave them in 6.9. */
#define FUSE_USE_VERSION 312

#include "fs/passthrough.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "zarrmount/log.h"

#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH (1ULL << 37) /* INIT flag: a flags2 bit */
#endif
#ifndef FOPEN_PASSTHROUGH
#define FOPEN_PASSTHROUGH (1 << 7)
#endif
#ifndef FUSE_DEV_IOC_BACKING_OPEN
struct fuse_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define FUSE_DEV_IOC_BACKING_OPEN  _IOW(FUSE_DEV_IOC_MAGIC, 1, struct fuse_backing_map)
#define FUSE_DEV_IOC_BACKING_CLOSE _IOW(FUSE_DEV_IOC_MAGIC, 2, uint32_t)
#endif

/* fuse_init_out as of 7.40: the first of 6.1's unused words became the
 * stacking depth of backing files. */
struct zm__init_out {
    uint32_t major, minor, max_readahead, flags;
    uint16_t max_background, congestion_threshold;
    uint32_t max_write, time_gran;
    uint16_t max_pages, map_alignment;
    uint32_t flags2;
    uint32_t max_stack_depth;
    uint32_t unused[6];
};
_Static_assert(sizeof(struct zm__init_out) == sizeof(struct fuse_init_out), "fuse_init_out");
_Static_assert(offsetof(struct zm__init_out, flags2) == offsetof(struct fuse_init_out, flags2),
               "fuse_init_out.flags2");

/* fuse_open_out as of 7.40: the padding became the backing id. */
struct zm__open_out {
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};
_Static_assert(sizeof(struct zm__open_out) == sizeof(struct fuse_open_out), "fuse_open_out");

/* Backing files may sit on a stacking file system (overlayfs: depth 1) but
 * no deeper; ours is then depth 2, the most Linux allows, so nothing stacks
 * on the mount (an overlay over a read-only FUSE mount is not a use). */
#define ZM__STACK_DEPTH 2

/* The kernel's INIT offers passthrough. */
static int offers_passthrough(const struct fuse_buf *buf)
{
    if (buf->flags & FUSE_BUF_IS_FD || buf->size < sizeof(struct fuse_in_header))
        return 0;
    const struct fuse_in_header *in = buf->mem;
    if (in->opcode != FUSE_INIT || buf->size < sizeof *in + sizeof(struct fuse_init_in))
        return 0;
    const struct fuse_init_in *init = (const struct fuse_init_in *)(in + 1);
    return init->major == 7 && (init->flags & FUSE_INIT_EXT) &&
           (init->flags2 & (uint32_t)(FUSE_PASSTHROUGH >> 32));
}

static ssize_t write_all(int fd, const void *bytes, size_t size)
{
    ssize_t n;
    do
        n = write(fd, bytes, size);
    while (n < 0 && errno == EINTR);
    return n;
}

int zm__passthrough_handshake(struct fuse_session *session, int offer, int *granted)
{
    *granted = 0;
    struct fuse_buf buf;
    memset(&buf, 0, sizeof buf);
    int got;
    do
        got = fuse_session_receive_buf(session, &buf);
    while (got == -EINTR);
    if (got <= 0) {
        free(buf.mem);
        return got < 0 ? got : -ENODEV;
    }
    if (!offer || !offers_passthrough(&buf)) {
        fuse_session_process_buf(session, &buf);
        free(buf.mem);
        return 0;
    }
    /* libfuse writes its reply to the session's descriptor: for this one
     * request that descriptor is a pipe, and the reply, read back from it,
     * goes on to the device with passthrough asked for. */
    int device = fuse_session_fd(session);
    int saved = fcntl(device, F_DUPFD_CLOEXEC, 0);
    int pipe_fds[2] = {-1, -1};
    if (saved < 0 || pipe2(pipe_fds, O_CLOEXEC) != 0 || dup3(pipe_fds[1], device, O_CLOEXEC) < 0) {
        zm_log(LOG_WARNING, "passthrough not asked for (%s): the daemon serves every read",
                strerror(errno));
        for (int i = 0; i < 2; i++)
            if (pipe_fds[i] >= 0)
                close(pipe_fds[i]);
        if (saved >= 0)
            close(saved);
        fuse_session_process_buf(session, &buf);
        free(buf.mem);
        return 0;
    }
    fuse_session_process_buf(session, &buf);
    free(buf.mem);
    /* The device back in its place: nothing else can use the session (the
     * loop has not started), so failing here ends the mount. */
    int restored = dup3(saved, device, O_CLOEXEC);
    int restore_errno = errno;
    close(saved);
    close(pipe_fds[1]);
    if (restored < 0) {
        close(pipe_fds[0]);
        zm_log(LOG_ERR, "cannot put the FUSE device back after INIT: %s", strerror(restore_errno));
        return -restore_errno;
    }
    uint8_t reply[4096];
    ssize_t length;
    do
        length = read(pipe_fds[0], reply, sizeof reply);
    while (length < 0 && errno == EINTR);
    close(pipe_fds[0]);
    if (length < (ssize_t)sizeof(struct fuse_out_header)) {
        zm_log(LOG_ERR, "no answer to the kernel's INIT (%s)", length < 0 ? strerror(errno) : "empty");
        return -EIO;
    }
    struct fuse_out_header *out = (struct fuse_out_header *)reply;
    if (out->error == 0 && (size_t)length >= sizeof *out + offsetof(struct zm__init_out, unused)) {
        struct zm__init_out *init = (struct zm__init_out *)(out + 1);
        init->flags |= FUSE_INIT_EXT;
        init->flags2 |= (uint32_t)(FUSE_PASSTHROUGH >> 32);
        init->max_stack_depth = ZM__STACK_DEPTH;
        *granted = 1;
    }
    if (write_all(device, reply, (size_t)length) != length) {
        int rc = -errno;
        zm_log(LOG_ERR, "cannot answer the kernel's INIT: %s", strerror(errno));
        *granted = 0;
        return rc;
    }
    return 0;
}

int zm__backing_open(struct fuse_session *session, int fd)
{
    struct fuse_backing_map map = {.fd = fd, .flags = 0, .padding = 0};
    int id = ioctl(fuse_session_fd(session), FUSE_DEV_IOC_BACKING_OPEN, &map);
    return id > 0 ? id : (id == 0 ? -EIO : -errno);
}

void zm__backing_close(struct fuse_session *session, int id)
{
    uint32_t which = (uint32_t)id;
    if (ioctl(fuse_session_fd(session), FUSE_DEV_IOC_BACKING_CLOSE, &which) != 0)
        zm_log(LOG_WARNING, "cannot give back backing file %d: %s", id, strerror(errno));
}

int zm__reply_open_passthrough(fuse_req_t req, uint64_t fh, int id)
{
    /* No FOPEN_KEEP_CACHE: the kernel refuses it with passthrough (there
     * are no pages of ours to keep). Nothing to flush at close. */
    struct zm__open_out out = {.fh = fh, .open_flags = FOPEN_PASSTHROUGH | FOPEN_NOFLUSH,
                               .backing_id = id};
    return fuse_reply_buf(req, (const char *)&out, sizeof out);
}

/* ---- Per inode: how its open files were answered ------------------------------------ */

typedef struct zm__backing {
    struct zm__backing *next;
    uint64_t inode;
    int id;               /* the backing id while passthrough > 0 */
    unsigned passthrough; /* opens answered with it, not yet released */
    unsigned cached;      /* opens answered through the page cache */
    int deciding;         /* a thread is deciding the first open */
} zm__backing;

#define ZM__BACKING_BUCKETS 1024

struct zm__backings {
    pthread_mutex_t lock;
    pthread_cond_t decided;
    zm__backing *buckets[ZM__BACKING_BUCKETS];
};

int zm__backings_create(zm__backings **out)
{
    zm__backings *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -ENOMEM;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->decided, NULL);
    *out = b;
    return 0;
}

void zm__backings_destroy(zm__backings *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < ZM__BACKING_BUCKETS; i++)
        while (b->buckets[i] != NULL) {
            zm__backing *next = b->buckets[i]->next;
            free(b->buckets[i]);
            b->buckets[i] = next;
        }
    pthread_cond_destroy(&b->decided);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static zm__backing **slot_of(zm__backings *b, uint64_t inode)
{
    zm__backing **at = &b->buckets[inode % ZM__BACKING_BUCKETS];
    while (*at != NULL && (*at)->inode != inode)
        at = &(*at)->next;
    return at;
}

/* Drops an inode's record once nothing of it is open or being decided. */
static void settle(zm__backing **at)
{
    zm__backing *e = *at;
    if (e != NULL && e->passthrough == 0 && e->cached == 0 && !e->deciding) {
        *at = e->next;
        free(e);
    }
}

int zm__backings_begin(zm__backings *b, uint64_t inode, int *id)
{
    *id = 0;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        zm__backing **at = slot_of(b, inode);
        zm__backing *e = *at;
        if (e == NULL) {
            e = calloc(1, sizeof *e);
            if (e == NULL) {
                pthread_mutex_unlock(&b->lock);
                return ZM__OPEN_CACHED; /* counted nowhere: released as nothing */
            }
            e->inode = inode;
            e->deciding = 1;
            *at = e;
            pthread_mutex_unlock(&b->lock);
            return ZM__OPEN_DECIDE;
        }
        if (e->deciding) {
            pthread_cond_wait(&b->decided, &b->lock);
            continue;
        }
        int mode;
        if (e->passthrough > 0) {
            e->passthrough++;
            *id = e->id;
            mode = ZM__OPEN_PASSTHROUGH;
        } else if (e->cached > 0) {
            e->cached++;
            mode = ZM__OPEN_CACHED;
        } else {
            e->deciding = 1; /* a record kept while it was settled: decide again */
            mode = ZM__OPEN_DECIDE;
        }
        pthread_mutex_unlock(&b->lock);
        return mode;
    }
}

void zm__backings_decided(zm__backings *b, uint64_t inode, int id)
{
    pthread_mutex_lock(&b->lock);
    zm__backing *e = *slot_of(b, inode);
    if (e != NULL) {
        e->deciding = 0;
        if (id > 0) {
            e->id = id;
            e->passthrough++;
        } else {
            e->cached++;
        }
    }
    pthread_cond_broadcast(&b->decided);
    pthread_mutex_unlock(&b->lock);
}

int zm__backings_release(zm__backings *b, uint64_t inode, int mode)
{
    int close_id = 0;
    pthread_mutex_lock(&b->lock);
    zm__backing **at = slot_of(b, inode);
    zm__backing *e = *at;
    if (e != NULL) {
        if (mode == ZM__OPEN_PASSTHROUGH && e->passthrough > 0 && --e->passthrough == 0) {
            close_id = e->id;
            e->id = 0;
        } else if (mode == ZM__OPEN_CACHED && e->cached > 0) {
            e->cached--;
        }
        settle(at);
    }
    pthread_mutex_unlock(&b->lock);
    return close_id;
}
