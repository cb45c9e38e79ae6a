/* A fixed pool of worker threads running parallel loops.
 *
 * Each zm__pool_for call is a loop: a descriptor on the caller's stack,
 * queued on the pool while it has items nobody has claimed yet. Workers and
 * the calling thread claim items one at a time under the pool's mutex, run
 * them without it, and count them done. The caller claims items of its own
 * loop only, and always can, so a loop finishes even when every worker is
 * busy elsewhere, and a zm__pool_for called from inside an item (a nested
 * loop) cannot deadlock. The caller returns only once every item has
 * finished, and a worker touches a loop only under the mutex, before
 * counting its item done, so the descriptor on the caller's stack is never
 * used after the caller has returned.
 *
 * Items are chunk decodes, each far costlier than a mutex round trip, so
 * one lock per item keeps this simple at no measurable cost.
 *
 * A loop called from a background thread (zm_source_background_set: work
 * done ahead of readers) is claimed by workers only when no ordinary loop
 * is queued, and its items run at idle priority; its flag is read at each
 * claim, so a loop whose work a reader now waits for turns ordinary at once.
 */
#include "source/pool.h"
#include "source/source_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

/* One zm__pool_for call in flight. */
typedef struct zm__loop {
    int (*fn)(void *context, size_t index);
    void *context;
    size_t count;
    size_t next; /* the first item not yet claimed */
    size_t done; /* items finished */
    int result;  /* the first non-zero value an item returned */
    zm_source_tally *tally; /* the caller's: its items' reads count there too */
    const _Atomic int *background; /* the caller's flag: non-zero, work ahead of readers */
    pthread_cond_t finished;
    struct zm__loop *queue_next; /* in the pool's queue while next < count */
    bool queued;
} zm__loop;

struct zm__pool {
    pthread_mutex_t mutex;
    pthread_cond_t work; /* a loop was queued, or stopping */
    pthread_cond_t idle; /* active dropped to 0 */
    zm__loop *head, *tail;
    size_t active; /* zm__pool_for calls inside the pool */
    bool stopping;
    unsigned nthreads;
    pthread_t *threads;
};

/* Takes loop off the queue; it is at the head whenever it has run out of
 * items to claim through the head, but a caller that claimed the last item
 * of its own loop may find it anywhere, so search. Mutex held. */
static void zm__unqueue(zm__pool *pool, zm__loop *loop)
{
    zm__loop **link = &pool->head, *prev = NULL;
    while (*link != loop) {
        prev = *link;
        link = &(*link)->queue_next;
    }
    *link = loop->queue_next;
    if (pool->tail == loop)
        pool->tail = prev;
    loop->queue_next = NULL;
    loop->queued = false;
}

/* Claims the next item of loop, unqueuing the loop when it was the last.
 * Mutex held; loop->next < loop->count. */
static size_t zm__claim(zm__pool *pool, zm__loop *loop)
{
    size_t index = loop->next++;
    if (loop->next == loop->count && loop->queued)
        zm__unqueue(pool, loop);
    return index;
}

/* Runs item index of loop with the mutex released, then records it.
 * Mutex held on entry and on return. */
static bool zm__background(const zm__loop *loop)
{
    return loop->background != NULL && *loop->background != 0;
}

/* A worker's scheduling: idle priority for background items only. */
static void zm__set_idle(bool *idle, bool want)
{
    if (*idle == want)
        return;
    struct sched_param param = {0};
    if (pthread_setschedparam(pthread_self(), want ? SCHED_IDLE : SCHED_OTHER, &param) == 0)
        *idle = want;
}

/* (idle: a worker's scheduling state, NULL for a loop's own caller, whose
 * priority is its own business.) */
static void zm__run(zm__pool *pool, zm__loop *loop, size_t index, bool *idle)
{
    bool background = zm__background(loop);
    pthread_mutex_unlock(&pool->mutex);
    if (idle != NULL)
        zm__set_idle(idle, background);
    zm_source_tally *own = zm_source_tally_set(loop->tally);
    const _Atomic int *own_background = zm_source_background_set(loop->background);
    int rc = loop->fn(loop->context, index);
    zm_source_background_set(own_background);
    zm_source_tally_set(own);
    pthread_mutex_lock(&pool->mutex);
    if (rc != 0 && loop->result == 0)
        loop->result = rc;
    if (++loop->done == loop->count)
        pthread_cond_signal(&loop->finished);
}

static void *zm__worker(void *arg)
{
    zm__pool *pool = arg;
    bool idle = false;
    pthread_mutex_lock(&pool->mutex);
    for (;;) {
        while (pool->head == NULL && !pool->stopping)
            pthread_cond_wait(&pool->work, &pool->mutex);
        if (pool->head == NULL)
            break; /* stopping, and nothing left to claim */
        /* Readers' loops first; work ahead of them only when none waits. */
        zm__loop *loop = pool->head;
        for (zm__loop *l = pool->head; l != NULL; l = l->queue_next)
            if (!zm__background(l)) {
                loop = l;
                break;
            }
        zm__run(pool, loop, zm__claim(pool, loop), &idle);
    }
    pthread_mutex_unlock(&pool->mutex);
    return NULL;
}

int zm__pool_create(unsigned threads, zm__pool **out)
{
    *out = NULL;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (unsigned)cores : 1;
    }
    zm__pool *pool = calloc(1, sizeof *pool);
    if (pool == NULL)
        return -ENOMEM;
    pool->threads = calloc(threads, sizeof *pool->threads);
    if (pool->threads == NULL) {
        free(pool);
        return -ENOMEM;
    }
    int rc = pthread_mutex_init(&pool->mutex, NULL);
    if (rc != 0) {
        free(pool->threads);
        free(pool);
        return -rc;
    }
    rc = pthread_cond_init(&pool->work, NULL);
    if (rc == 0) {
        rc = pthread_cond_init(&pool->idle, NULL);
        if (rc != 0)
            pthread_cond_destroy(&pool->work);
    }
    if (rc != 0) {
        pthread_mutex_destroy(&pool->mutex);
        free(pool->threads);
        free(pool);
        return -rc;
    }
    for (unsigned i = 0; i < threads; i++) {
        rc = pthread_create(&pool->threads[i], NULL, zm__worker, pool);
        if (rc != 0) {
            /* Stop the workers already started: destroy joins what it has. */
            pool->nthreads = i;
            zm__pool_destroy(pool);
            return -rc;
        }
    }
    pool->nthreads = threads;
    *out = pool;
    return 0;
}

void zm__pool_destroy(zm__pool *pool)
{
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->mutex);
    /* Loops already running finish first: their callers still use the
     * pool's mutex on the way out. */
    while (pool->active > 0)
        pthread_cond_wait(&pool->idle, &pool->mutex);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mutex);
    /* Workers drain whatever is still queued before they exit. */
    for (unsigned i = 0; i < pool->nthreads; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->work);
    pthread_cond_destroy(&pool->idle);
    pthread_mutex_destroy(&pool->mutex);
    free(pool->threads);
    free(pool);
}

unsigned zm__pool_width(const zm__pool *pool)
{
    return pool == NULL ? 1 : pool->nthreads + 1;
}

int zm__pool_for(zm__pool *pool, size_t count, int (*fn)(void *context, size_t index),
                 void *context)
{
    if (pool == NULL || count <= 1 || pool->nthreads == 0) {
        /* Inline: no one to share with, or nothing worth sharing. */
        int result = 0;
        for (size_t i = 0; i < count; i++) {
            int rc = fn(context, i);
            if (rc != 0 && result == 0)
                result = rc;
        }
        return result;
    }

    zm__loop loop = {.fn = fn, .context = context, .count = count, .tally = zm__tally_current(),
                     .background = zm__background_current()};
    int rc = pthread_cond_init(&loop.finished, NULL);
    if (rc != 0) {
        /* Without a condition variable to wait on, run the loop alone:
         * slower, still correct. */
        return zm__pool_for(NULL, count, fn, context);
    }

    pthread_mutex_lock(&pool->mutex);
    pool->active++;
    if (pool->tail != NULL)
        pool->tail->queue_next = &loop;
    else
        pool->head = &loop;
    pool->tail = &loop;
    loop.queued = true;
    /* The caller takes items too, so one worker fewer than items suffices. */
    if (count - 1 >= pool->nthreads)
        pthread_cond_broadcast(&pool->work);
    else
        for (size_t i = 0; i < count - 1; i++)
            pthread_cond_signal(&pool->work);

    while (loop.next < loop.count)
        zm__run(pool, &loop, zm__claim(pool, &loop), NULL);
    while (loop.done < loop.count)
        pthread_cond_wait(&loop.finished, &pool->mutex);
    if (--pool->active == 0)
        pthread_cond_broadcast(&pool->idle);
    pthread_mutex_unlock(&pool->mutex);

    pthread_cond_destroy(&loop.finished);
    return loop.result;
}
