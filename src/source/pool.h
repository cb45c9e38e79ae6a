/* Internal to the source module: a fixed pool of worker threads that runs
 * loops in parallel (chunk decoding). */
#ifndef ZARRMOUNT_SOURCE_POOL_H
#define ZARRMOUNT_SOURCE_POOL_H

#include <stddef.h>

typedef struct zm__pool zm__pool;

/* Starts threads workers (0: one per online core). Returns 0 or -errno. */
int zm__pool_create(unsigned threads, zm__pool **out);
/* Stops and joins the workers; waits for loops still running. */
void zm__pool_destroy(zm__pool *pool);
/* How many threads a loop can use (workers + the caller). */
unsigned zm__pool_width(const zm__pool *pool);

/* Runs fn(context, i) for every i in [0, count), spread over the workers
 * and the calling thread, and returns when all have finished. Several
 * threads may call zm__pool_for at once; each call waits only for its own
 * items. Returns 0, or the first non-zero value an fn returned (every item
 * still runs, so each can clean up). A NULL pool runs the loop inline. */
int zm__pool_for(zm__pool *pool, size_t count, int (*fn)(void *context, size_t index),
                 void *context);

#endif
