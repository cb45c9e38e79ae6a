/* Tests for the decode thread pool (src/source/pool.c): every item runs
 * exactly once, on the caller and the workers, loops from several threads
 * at once each get their own items, errors come back, nested loops do not
 * deadlock, and the pool starts and stops cleanly. Run under TSan too. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "source/pool.h"
#include "zarrmount/source.h"

static void sleep_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* Counts every run of every item, and sums the indices. */
typedef struct sum_loop {
    size_t count;
    _Atomic unsigned *runs;
    _Atomic uint64_t sum;
    long delay_us;
} sum_loop;

static int sum_item(void *context, size_t index)
{
    sum_loop *s = context;
    atomic_fetch_add(&s->runs[index], 1);
    atomic_fetch_add(&s->sum, index);
    if (s->delay_us)
        sleep_us(s->delay_us);
    return 0;
}

static void check_sum_loop(zm__pool *pool, size_t count, long delay_us)
{
    sum_loop s = {.count = count, .delay_us = delay_us};
    s.runs = calloc(count ? count : 1, sizeof *s.runs);
    cr_assert_eq(zm__pool_for(pool, count, sum_item, &s), 0);
    cr_assert_eq(atomic_load(&s.sum), (uint64_t)count * (count ? count - 1 : 0) / 2);
    for (size_t i = 0; i < count; i++)
        cr_assert_eq(atomic_load(&s.runs[i]), 1u, "item %zu ran %u times", i,
                     atomic_load(&s.runs[i]));
    free(s.runs);
}

Test(pool, sums_with_various_widths)
{
    unsigned widths[] = {1, 2, 3, 8, 0};
    size_t counts[] = {0, 1, 2, 3, 7, 100, 10007, 200000};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        zm__pool *pool;
        cr_assert_eq(zm__pool_create(widths[w], &pool), 0);
        if (widths[w] > 0)
            cr_assert_eq(zm__pool_width(pool), widths[w] + 1);
        else
            cr_assert_geq(zm__pool_width(pool), 2u);
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            check_sum_loop(pool, counts[c], 0);
        zm__pool_destroy(pool);
    }
}

Test(pool, null_pool_runs_inline_in_order)
{
    cr_assert_eq(zm__pool_width(NULL), 1u);
    check_sum_loop(NULL, 1000, 0);
    zm__pool_destroy(NULL);
}

/* Records which thread ran each item. */
typedef struct who_loop {
    pthread_t *thread;
    size_t *order;
    _Atomic size_t next;
} who_loop;

static int who_item(void *context, size_t index)
{
    who_loop *w = context;
    w->thread[index] = pthread_self();
    w->order[atomic_fetch_add(&w->next, 1)] = index;
    sleep_us(500);
    return 0;
}

Test(pool, null_pool_uses_caller_sequentially)
{
    pthread_t thread[50];
    size_t order[50];
    who_loop w = {thread, order, 0};
    cr_assert_eq(zm__pool_for(NULL, 50, who_item, &w), 0);
    for (size_t i = 0; i < 50; i++) {
        cr_assert(pthread_equal(thread[i], pthread_self()));
        cr_assert_eq(order[i], i);
    }
}

Test(pool, workers_and_caller_share_the_work)
{
    zm__pool *pool;
    cr_assert_eq(zm__pool_create(4, &pool), 0);
    pthread_t thread[200];
    size_t order[200];
    who_loop w = {thread, order, 0};
    cr_assert_eq(zm__pool_for(pool, 200, who_item, &w), 0);
    size_t distinct = 0, by_caller = 0;
    for (size_t i = 0; i < 200; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = pthread_equal(thread[i], thread[j]);
        distinct += !seen;
        by_caller += pthread_equal(thread[i], pthread_self()) != 0;
    }
    cr_assert_geq(distinct, 2u, "only one thread ran the items");
    cr_assert_gt(by_caller, 0u, "the caller did not participate");
    zm__pool_destroy(pool);
}

/* Several threads run loops on one pool at once; each must see exactly its
 * own items, each once. */
typedef struct caller_job {
    zm__pool *pool;
    size_t count;
    int rounds;
    long delay_us;
} caller_job;

static void *caller(void *arg)
{
    caller_job *job = arg;
    for (int r = 0; r < job->rounds; r++)
        check_sum_loop(job->pool, job->count + (size_t)r, job->delay_us);
    return NULL;
}

static void concurrent_callers(unsigned workers, int callers, size_t count, int rounds,
                               long delay_us)
{
    zm__pool *pool;
    cr_assert_eq(zm__pool_create(workers, &pool), 0);
    pthread_t t[16];
    caller_job jobs[16];
    for (int k = 0; k < callers; k++) {
        jobs[k] = (caller_job){pool, count + (size_t)k * 13, rounds, delay_us};
        cr_assert_eq(pthread_create(&t[k], NULL, caller, &jobs[k]), 0);
    }
    for (int k = 0; k < callers; k++)
        pthread_join(t[k], NULL);
    zm__pool_destroy(pool);
}

Test(pool, loops_from_several_threads_at_once)
{
    concurrent_callers(1, 8, 50, 20, 0);
    concurrent_callers(4, 8, 1000, 20, 0);
    concurrent_callers(16, 16, 3, 200, 0);
    concurrent_callers(3, 6, 40, 3, 200);
}

/* Errors: the first non-zero result comes back, and every item still runs. */
typedef struct fail_loop {
    _Atomic size_t ran;
    size_t fail_every;
} fail_loop;

static int fail_item(void *context, size_t index)
{
    fail_loop *f = context;
    atomic_fetch_add(&f->ran, 1);
    if (f->fail_every && index % f->fail_every == 5)
        return index % 2 ? -EIO : -ENOMEM;
    return 0;
}

Test(pool, errors_propagate_and_every_item_runs)
{
    zm__pool *pools[3] = {NULL, NULL, NULL};
    cr_assert_eq(zm__pool_create(1, &pools[1]), 0);
    cr_assert_eq(zm__pool_create(6, &pools[2]), 0);
    for (int p = 0; p < 3; p++) {
        fail_loop f = {0, 1000000};
        cr_assert_eq(zm__pool_for(pools[p], 1000, fail_item, &f), -EIO); /* only item 5 */
        cr_assert_eq(atomic_load(&f.ran), 1000u);
        fail_loop g = {0, 10};
        int rc = zm__pool_for(pools[p], 1000, fail_item, &g);
        cr_assert(rc == -EIO || rc == -ENOMEM, "rc %d", rc);
        cr_assert_eq(atomic_load(&g.ran), 1000u);
        fail_loop h = {0, 0};
        cr_assert_eq(zm__pool_for(pools[p], 1000, fail_item, &h), 0);
        /* On a NULL pool the order is fixed, so the first error is item 5's. */
        if (p == 0)
            cr_assert_eq(rc, -EIO);
    }
    zm__pool_destroy(pools[1]);
    zm__pool_destroy(pools[2]);
}

/* An item that runs a loop of its own on the same pool: the caller always
 * runs its own items, so this finishes even with every worker busy. */
typedef struct nest {
    zm__pool *pool;
    _Atomic uint64_t total;
} nest;

static int inner_item(void *context, size_t index)
{
    nest *n = context;
    atomic_fetch_add(&n->total, index + 1);
    return 0;
}

static int outer_item(void *context, size_t index)
{
    (void)index;
    nest *n = context;
    return zm__pool_for(n->pool, 10, inner_item, n);
}

Test(pool, nested_loops_do_not_deadlock)
{
    unsigned widths[] = {1, 4};
    for (size_t w = 0; w < 2; w++) {
        nest n = {NULL, 0};
        cr_assert_eq(zm__pool_create(widths[w], &n.pool), 0);
        cr_assert_eq(zm__pool_for(n.pool, 20, outer_item, &n), 0);
        cr_assert_eq(atomic_load(&n.total), 20u * 55u);
        zm__pool_destroy(n.pool);
    }
}

Test(pool, create_and_destroy_repeatedly)
{
    for (int i = 0; i < 50; i++) {
        zm__pool *pool;
        cr_assert_eq(zm__pool_create((unsigned)(i % 5) + 1, &pool), 0);
        if (i % 2)
            check_sum_loop(pool, 64, 0);
        zm__pool_destroy(pool);
    }
}

/* Destroy while another thread is inside a loop: destroy waits for it. */
typedef struct slow_job {
    zm__pool *pool;
    sum_loop s;
    _Atomic int started;
    int rc;
} slow_job;

static int slow_item(void *context, size_t index)
{
    slow_job *j = context;
    atomic_store(&j->started, 1);
    return sum_item(&j->s, index);
}

static void *slow_caller(void *arg)
{
    slow_job *j = arg;
    j->rc = zm__pool_for(j->pool, 40, slow_item, j);
    return NULL;
}

Test(pool, destroy_waits_for_running_loops)
{
    slow_job j = {.s = {.count = 40, .delay_us = 2000}};
    j.s.runs = calloc(40, sizeof *j.s.runs);
    cr_assert_eq(zm__pool_create(2, &j.pool), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, slow_caller, &j), 0);
    while (!atomic_load(&j.started))
        sleep_us(100);
    zm__pool_destroy(j.pool);
    /* Every item had run by the time destroy returned. */
    for (size_t i = 0; i < 40; i++)
        cr_assert_eq(atomic_load(&j.s.runs[i]), 1u);
    pthread_join(t, NULL);
    cr_assert_eq(j.rc, 0);
    free(j.s.runs);
}

/* Work ahead of readers (a background flag set on the calling thread):
 * workers take a reader's loop first, run background items at idle
 * priority and ordinary ones at normal priority, and a cleared flag makes
 * the background loop ordinary. */
typedef struct tagged_loop {
    pthread_t caller;
    _Atomic unsigned by_workers; /* items run by a worker */
    _Atomic unsigned idle_runs;  /* items run at SCHED_IDLE by a worker */
    _Atomic unsigned normal_runs;
    _Atomic unsigned done;
    long delay_us;
} tagged_loop;

static int tagged_item(void *context, size_t index)
{
    (void)index;
    tagged_loop *t = context;
    if (!pthread_equal(pthread_self(), t->caller)) {
        atomic_fetch_add(&t->by_workers, 1);
        if (sched_getscheduler(0) == SCHED_IDLE)
            atomic_fetch_add(&t->idle_runs, 1);
        else
            atomic_fetch_add(&t->normal_runs, 1);
    }
    sleep_us(t->delay_us);
    atomic_fetch_add(&t->done, 1);
    return 0;
}

typedef struct background_run {
    zm__pool *pool;
    tagged_loop loop;
    size_t count;
    _Atomic int flag;
} background_run;

static void *run_background(void *context)
{
    background_run *b = context;
    b->loop.caller = pthread_self();
    zm_source_background_set(&b->flag);
    zm__pool_for(b->pool, b->count, tagged_item, &b->loop);
    zm_source_background_set(NULL);
    return NULL;
}

Test(pool, readers_loops_go_before_work_ahead)
{
    zm__pool *pool;
    cr_assert_eq(zm__pool_create(2, &pool), 0);
    background_run b = {.pool = pool, .count = 400, .flag = 1, .loop.delay_us = 1000};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, run_background, &b), 0);
    while (b.loop.done < 20)
        sleep_us(1000);
    /* A reader's loop while the background one is queued: workers take it. */
    tagged_loop reader = {.caller = pthread_self(), .delay_us = 2000};
    cr_assert_eq(zm__pool_for(pool, 40, tagged_item, &reader), 0);
    cr_expect_gt(reader.by_workers, 0, "workers kept to the background loop");
    cr_expect_eq(reader.idle_runs, 0, "a reader's items ran at idle priority");
    cr_expect_lt(b.loop.done, b.count, "the background loop was not behind the reader's");
    unsigned idle_before = b.loop.idle_runs, normal_before = b.loop.normal_runs;
    cr_expect_gt(idle_before, 0, "background items never ran at idle priority");
    /* A reader now waits for the background work: it turns ordinary. */
    b.flag = 0;
    pthread_join(thread, NULL);
    cr_expect_eq(b.loop.done, b.count);
    cr_expect_gt(b.loop.normal_runs, normal_before, "a cleared flag left the loop at idle priority");
    zm__pool_destroy(pool);
}
