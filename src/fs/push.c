/* Pushing kept files into the kernel's page cache: see push.h. */
#define FUSE_USE_VERSION 312

#include "fs/push.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zarrmount/log.h"

/* Threads pushing: each reads and checks a file, then the kernel copies it. */
#define PUSHERS 2
/* Listings followed at once (the most recently listed directories). */
#define LISTINGS 32
/* The slots of the inode -> listing map (chained). */
#define MAP_BUCKETS 4096

typedef struct job {
    struct job *next;
    uint64_t inode;
    uint64_t size; /* as listed */
} job;

typedef struct listing {
    uint64_t directory; /* 0: a free slot */
    uint64_t *inodes, *sizes;
    size_t count, capacity;
    size_t frontier;    /* the first entry not pushed (nor queued) */
    uint64_t used;      /* for replacing the least recently used listing */
} listing;

/* Where a listed file is: listing slot and position. */
typedef struct place {
    struct place *next;
    uint64_t inode;
    unsigned slot;
    size_t at;
} place;

struct zm__pusher {
    struct fuse_session *session;
    zm_tree *tree;
    zm__inodes *inodes;
    uint64_t window;
    pthread_t threads[PUSHERS];
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    job *head, *tail;
    int stop;
    listing listings[LISTINGS];
    place *map[MAP_BUCKETS];
    uint64_t clock;
};

/* ---- The listings (under lock) -------------------------------------------------------- */

static place **map_slot(zm__pusher *p, uint64_t inode)
{
    place **at = &p->map[inode % MAP_BUCKETS];
    while (*at != NULL && (*at)->inode != inode)
        at = &(*at)->next;
    return at;
}

static void map_remove(zm__pusher *p, uint64_t inode, unsigned slot)
{
    place **at = map_slot(p, inode);
    if (*at != NULL && (*at)->slot == slot) {
        place *gone = *at;
        *at = gone->next;
        free(gone);
    }
}

static void listing_clear(zm__pusher *p, unsigned slot)
{
    listing *l = &p->listings[slot];
    for (size_t i = 0; i < l->count; i++)
        map_remove(p, l->inodes[i], slot);
    l->count = 0;
    l->frontier = 0;
}

/* The slot of directory's listing: its own, or a free or the least
 * recently used one, cleared. */
static unsigned listing_of(zm__pusher *p, uint64_t directory)
{
    unsigned chosen = 0;
    for (unsigned i = 0; i < LISTINGS; i++) {
        if (p->listings[i].directory == directory)
            return i;
        if (p->listings[i].used < p->listings[chosen].used)
            chosen = i;
    }
    listing_clear(p, chosen);
    p->listings[chosen].directory = directory;
    return chosen;
}

void zm__pusher_listed(zm__pusher *p, uint64_t directory, int64_t offset, const uint64_t *inodes,
                       size_t count)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    unsigned slot = listing_of(p, directory);
    listing *l = &p->listings[slot];
    l->used = ++p->clock;
    if (offset == 0)
        listing_clear(p, slot);
    for (size_t i = 0; i < count; i++) {
        char *path = NULL;
        zm_node node;
        if (zm__inodes_get(p->inodes, inodes[i], &path, &node) != 0)
            continue;
        free(path);
        if (node.kind != ZM_NODE_FILE || node.live || node.size == 0 || node.size == ZM_SIZE_UNKNOWN)
            continue;
        place **at = map_slot(p, inodes[i]);
        if (*at != NULL)
            continue; /* listed already (another directory's link to it: none here) */
        if (l->count == l->capacity) {
            size_t capacity = l->capacity ? l->capacity * 2 : 64;
            uint64_t *grown_inodes = realloc(l->inodes, capacity * sizeof *grown_inodes);
            if (grown_inodes == NULL)
                break;
            l->inodes = grown_inodes;
            uint64_t *grown_sizes = realloc(l->sizes, capacity * sizeof *grown_sizes);
            if (grown_sizes == NULL)
                break;
            l->sizes = grown_sizes;
            l->capacity = capacity;
        }
        place *where = malloc(sizeof *where);
        if (where == NULL)
            break;
        *where = (place){NULL, inodes[i], slot, l->count};
        *at = where;
        l->inodes[l->count] = inodes[i];
        l->sizes[l->count] = node.size;
        l->count++;
    }
    pthread_mutex_unlock(&p->lock);
}

static void queue_locked(zm__pusher *p, uint64_t inode, uint64_t size)
{
    job *j = malloc(sizeof *j);
    if (j == NULL)
        return;
    *j = (job){NULL, inode, size};
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
}

void zm__pusher_read(zm__pusher *p, uint64_t inode)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    place *where = *map_slot(p, inode);
    listing *l = where ? &p->listings[where->slot] : NULL;
    /* Read at or past the window's end (the tripwire, or a reader that
     * outran or skipped the pushes): the next window goes. Reads inside it
     * (a file not pushed yet) change nothing. */
    if (l != NULL && where->at + 1 >= l->frontier) {
        l->used = ++p->clock;
        size_t from = where->at + 1;
        uint64_t planned = 0;
        size_t i = from;
        for (; i < l->count && (planned == 0 || planned + l->sizes[i] <= p->window); i++) {
            planned += l->sizes[i];
            queue_locked(p, l->inodes[i], l->sizes[i]);
        }
        l->frontier = i;
        pthread_cond_broadcast(&p->wake);
    }
    pthread_mutex_unlock(&p->lock);
}

/* ---- Pushing ----------------------------------------------------------------------------- */

static void push_one(zm__pusher *p, const job *j)
{
    char *path = NULL;
    zm_node node;
    if (zm__inodes_get(p->inodes, j->inode, &path, &node) != 0)
        return; /* forgotten since */
    uint8_t *bytes;
    size_t size;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_read_kept(p->tree, path, &bytes, &size, &err);
    free(path);
    if (rc != 0)
        return; /* not kept (made when read), or damaged (said in the log) */
    if (size == node.size && size > 0) {
        struct fuse_bufvec data = FUSE_BUFVEC_INIT(size);
        data.buf[0].mem = bytes;
        /* -ENOENT: the kernel forgot the inode meanwhile; nothing to do. */
        (void)fuse_lowlevel_notify_store(p->session, j->inode, 0, &data, 0);
    }
    free(bytes);
}

static void *run(void *context)
{
    zm__pusher *p = context;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        job *j = p->head;
        if (j == NULL) {
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        }
        p->head = j->next;
        if (p->head == NULL)
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        push_one(p, j);
        free(j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int zm__pusher_start(struct fuse_session *session, zm_tree *tree, zm__inodes *inodes, uint64_t window,
                     zm__pusher **out)
{
    *out = NULL;
    zm__pusher *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -ENOMEM;
    p->session = session;
    p->tree = tree;
    p->inodes = inodes;
    p->window = window;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    int rc = 0;
    for (int i = 0; i < PUSHERS && rc == 0; i++)
        if ((rc = pthread_create(&p->threads[i], NULL, run, p)) == 0)
            p->started++;
    if (p->started == 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return -rc;
    }
    *out = p;
    return 0;
}

void zm__pusher_stop(zm__pusher *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    while (p->head) {
        job *next = p->head->next;
        free(p->head);
        p->head = next;
    }
    for (unsigned i = 0; i < LISTINGS; i++) {
        listing_clear(p, i);
        free(p->listings[i].inodes);
        free(p->listings[i].sizes);
    }
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
