/* The inode table (src/fs/inodes.c): numbers stable per path, lookups
 * counted and forgotten, growth, and many threads at once. The kernel
 * decides when it forgets, so the mount tests cannot reach these paths on
 * demand. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/inodes.h"

static const zm_node a_file = {.kind = ZM_NODE_FILE, .size = 42};

static uint64_t remember(zm__inodes *table, const char *path)
{
    uint64_t inode = 0;
    cr_assert_eq(zm__inodes_remember(table, path, &a_file, &inode), 0);
    return inode;
}

static int holds(zm__inodes *table, uint64_t inode, const char *path)
{
    char *held = NULL;
    zm_node node;
    int rc = zm__inodes_get(table, inode, &held, &node);
    int same = rc == 0 && strcmp(held, path) == 0;
    free(held);
    return same;
}

Test(inodes, root_is_one_and_permanent)
{
    zm__inodes *table;
    cr_assert_eq(zm__inodes_create(&table), 0);
    cr_assert(holds(table, ZM__ROOT_INODE, ""));
    zm_node node;
    cr_assert_eq(zm__inodes_get(table, ZM__ROOT_INODE, NULL, &node), 0);
    cr_assert_eq(node.kind, ZM_NODE_DIRECTORY);
    cr_assert_eq(remember(table, ""), ZM__ROOT_INODE);
    zm__inodes_forget(table, ZM__ROOT_INODE, 1000);
    cr_assert(holds(table, ZM__ROOT_INODE, ""));
    cr_assert_eq(zm__inodes_count(table), 1);
    zm__inodes_destroy(table);
}

Test(inodes, numbers_per_path)
{
    zm__inodes *table;
    cr_assert_eq(zm__inodes_create(&table), 0);
    uint64_t predicted = zm__inodes_number(table, "full/X/0.0");
    uint64_t a = remember(table, "full/X/0.0");
    uint64_t b = remember(table, "full/X/0.1");
    cr_assert_eq(a, predicted, "readdir's d_ino is the number lookup gives");
    cr_assert_neq(a, b);
    cr_assert(a >= 2 && a < (UINT64_C(1) << 53));
    cr_assert_eq(remember(table, "full/X/0.0"), a);
    cr_assert(holds(table, a, "full/X/0.0"));
    cr_assert(holds(table, b, "full/X/0.1"));
    zm_node node;
    cr_assert_eq(zm__inodes_get(table, a, NULL, &node), 0);
    cr_assert_eq(node.size, 42);
    zm__inodes_destroy(table);
}

Test(inodes, forget_counts_lookups)
{
    zm__inodes *table;
    cr_assert_eq(zm__inodes_create(&table), 0);
    uint64_t inode = remember(table, "many/f0001");
    remember(table, "many/f0001");
    remember(table, "many/f0001");
    zm__inodes_forget(table, inode, 2);
    cr_assert(holds(table, inode, "many/f0001"), "one lookup is left");
    zm__inodes_forget(table, inode, 1);
    char *path = NULL;
    cr_assert_eq(zm__inodes_get(table, inode, &path, NULL), -ENOENT);
    cr_assert_null(path);
    cr_assert_eq(zm__inodes_count(table), 1);
    /* Forgotten and looked up again: the same number. */
    cr_assert_eq(remember(table, "many/f0001"), inode);
    /* More forgotten than looked up, and unknown numbers: no harm. */
    zm__inodes_forget(table, inode, 99);
    zm__inodes_forget(table, 123456789, 1);
    cr_assert_eq(zm__inodes_count(table), 1);
    zm__inodes_destroy(table);
}

Test(inodes, grows_and_keeps_every_entry)
{
    enum { COUNT = 200000 };
    zm__inodes *table;
    cr_assert_eq(zm__inodes_create(&table), 0);
    uint64_t *inodes = malloc(COUNT * sizeof *inodes);
    char path[64];
    for (int i = 0; i < COUNT; i++) {
        snprintf(path, sizeof path, "blocks/b%d/X/data/%d", i % 97, i);
        inodes[i] = remember(table, path);
    }
    cr_assert_eq(zm__inodes_count(table), COUNT + 1);
    for (int i = 0; i < COUNT; i++) {
        snprintf(path, sizeof path, "blocks/b%d/X/data/%d", i % 97, i);
        cr_assert(holds(table, inodes[i], path), "entry %d", i);
        cr_assert_eq(zm__inodes_number(table, path), inodes[i]);
    }
    for (int i = 0; i < COUNT; i++)
        zm__inodes_forget(table, inodes[i], 1);
    cr_assert_eq(zm__inodes_count(table), 1);
    free(inodes);
    zm__inodes_destroy(table);
}

/* Threads look up and forget paths of a shared set at random; each keeps
 * its own tally and forgets what it still holds at the end, as the kernel
 * would. Then only the root is left, and numbers never changed. */
enum { THREADS = 8, PATHS = 500, STEPS = 40000 };

typedef struct worker {
    zm__inodes *table;
    const uint64_t *expected;
    unsigned seed;
    int failures;
} worker;

static void *work(void *context)
{
    worker *w = context;
    uint64_t held[PATHS] = {0};
    char path[32];
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(rand_r(&w->seed) % PATHS);
        snprintf(path, sizeof path, "v/%d", i);
        if (held[i] > 0 && rand_r(&w->seed) % 2) {
            zm__inodes_forget(w->table, w->expected[i], 1);
            held[i]--;
            continue;
        }
        uint64_t inode = 0;
        if (zm__inodes_remember(w->table, path, &a_file, &inode) != 0 || inode != w->expected[i])
            w->failures++;
        held[i]++;
    }
    for (int i = 0; i < PATHS; i++)
        if (held[i])
            zm__inodes_forget(w->table, w->expected[i], held[i]);
    return NULL;
}

Test(inodes, many_threads)
{
    zm__inodes *table;
    cr_assert_eq(zm__inodes_create(&table), 0);
    uint64_t expected[PATHS];
    char path[32];
    for (int i = 0; i < PATHS; i++) {
        snprintf(path, sizeof path, "v/%d", i);
        expected[i] = zm__inodes_number(table, path);
    }
    worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t] = (worker){.table = table, .expected = expected, .seed = 7u + (unsigned)t};
        cr_assert_eq(pthread_create(&threads[t], NULL, work, &workers[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        cr_assert_eq(workers[t].failures, 0, "thread %d saw a different number", t);
    }
    cr_assert_eq(zm__inodes_count(table), 1);
    zm__inodes_destroy(table);
}
