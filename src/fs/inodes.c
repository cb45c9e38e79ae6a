#include "fs/inodes.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Numbers are 2 .. 2^53 - 1: 0 is "no inode" to the kernel, 1 the root. */
#define ZM__FIRST_NUMBER    2u
#define ZM__NUMBER_LIMIT    (UINT64_C(1) << 53)
#define ZM__INITIAL_BUCKETS 1024u

typedef struct zm__inode {
    uint64_t number;
    uint64_t path_hash;
    uint64_t lookups;
    zm_node node;
    char *failure; /* why a file's bytes could not be made (node.error), or NULL */
    struct zm__inode *next_by_number; /* chain in by_number */
    struct zm__inode *next_by_path;   /* chain in by_path */
    char path[];
} zm__inode;

/* Two chained hash maps over the same entries, one keyed by number and one
 * by path, grown together. One mutex: every operation is a few pointer
 * steps, far below what synthesizing a file costs, and reads (the hot
 * request) never come here: open copies the path into the file handle. */
struct zm__inodes {
    pthread_mutex_t lock;
    zm__inode **by_number;
    zm__inode **by_path;
    size_t buckets; /* a power of two */
    size_t count;
};

static uint64_t zm__hash_path(const char *path)
{
    uint64_t hash = 0xcbf29ce484222325u; /* FNV-1a, then a finalizer to spread it */
    for (const unsigned char *c = (const unsigned char *)path; *c; c++)
        hash = (hash ^ *c) * 0x100000001b3u;
    hash ^= hash >> 30;
    hash *= 0xbf58476d1ce4e5b9u;
    hash ^= hash >> 27;
    hash *= 0x94d049bb133111ebu;
    hash ^= hash >> 31;
    return hash;
}

static uint64_t zm__preferred_number(uint64_t path_hash)
{
    return ZM__FIRST_NUMBER + path_hash % (ZM__NUMBER_LIMIT - ZM__FIRST_NUMBER);
}

static uint64_t zm__next_number(uint64_t number)
{
    return number + 1 < ZM__NUMBER_LIMIT ? number + 1 : ZM__FIRST_NUMBER;
}

static size_t zm__number_bucket(const zm__inodes *table, uint64_t number)
{
    /* Numbers are hashes already; the root's 1 lands in bucket 1. */
    return (size_t)(number & (table->buckets - 1));
}

static zm__inode *zm__find_number(const zm__inodes *table, uint64_t number)
{
    zm__inode *entry = table->by_number[zm__number_bucket(table, number)];
    while (entry && entry->number != number)
        entry = entry->next_by_number;
    return entry;
}

static zm__inode *zm__find_path(const zm__inodes *table, const char *path, uint64_t path_hash)
{
    zm__inode *entry = table->by_path[path_hash & (table->buckets - 1)];
    while (entry && (entry->path_hash != path_hash || strcmp(entry->path, path) != 0))
        entry = entry->next_by_path;
    return entry;
}

static void zm__link(zm__inodes *table, zm__inode *entry)
{
    size_t by_number = zm__number_bucket(table, entry->number);
    size_t by_path = entry->path_hash & (table->buckets - 1);
    entry->next_by_number = table->by_number[by_number];
    table->by_number[by_number] = entry;
    entry->next_by_path = table->by_path[by_path];
    table->by_path[by_path] = entry;
}

static void zm__unlink(zm__inodes *table, zm__inode *entry)
{
    zm__inode **at = &table->by_number[zm__number_bucket(table, entry->number)];
    while (*at != entry)
        at = &(*at)->next_by_number;
    *at = entry->next_by_number;
    at = &table->by_path[entry->path_hash & (table->buckets - 1)];
    while (*at != entry)
        at = &(*at)->next_by_path;
    *at = entry->next_by_path;
}

/* Doubles the buckets when entries outnumber them. Failing to grow only
 * makes chains longer, so it is not an error. */
static void zm__maybe_grow(zm__inodes *table)
{
    if (table->count <= table->buckets)
        return;
    size_t buckets = table->buckets * 2;
    zm__inode **by_number = calloc(buckets, sizeof *by_number);
    zm__inode **by_path = calloc(buckets, sizeof *by_path);
    if (by_number == NULL || by_path == NULL) {
        free(by_number);
        free(by_path);
        return;
    }
    zm__inode **old_by_number = table->by_number;
    size_t old_buckets = table->buckets;
    free(table->by_path);
    table->by_number = by_number;
    table->by_path = by_path;
    table->buckets = buckets;
    for (size_t i = 0; i < old_buckets; i++) {
        zm__inode *entry = old_by_number[i];
        while (entry) {
            zm__inode *next = entry->next_by_number;
            zm__link(table, entry);
            entry = next;
        }
    }
    free(old_by_number);
}

static zm__inode *zm__new_entry(const char *path, uint64_t path_hash, uint64_t number,
                                const zm_node *node)
{
    size_t length = strlen(path);
    zm__inode *entry = malloc(sizeof *entry + length + 1);
    if (entry == NULL)
        return NULL;
    entry->number = number;
    entry->path_hash = path_hash;
    entry->lookups = 0;
    entry->node = *node;
    entry->failure = NULL;
    memcpy(entry->path, path, length + 1);
    return entry;
}

static void zm__free_entry(zm__inode *entry)
{
    if (entry != NULL)
        free(entry->failure);
    free(entry);
}

int zm__inodes_create(zm__inodes **out)
{
    *out = NULL;
    zm__inodes *table = calloc(1, sizeof *table);
    if (table == NULL)
        return -ENOMEM;
    table->buckets = ZM__INITIAL_BUCKETS;
    table->by_number = calloc(table->buckets, sizeof *table->by_number);
    table->by_path = calloc(table->buckets, sizeof *table->by_path);
    zm_node root_node = {.kind = ZM_NODE_DIRECTORY, .size = 0};
    zm__inode *root = zm__new_entry("", zm__hash_path(""), ZM__ROOT_INODE, &root_node);
    if (table->by_number == NULL || table->by_path == NULL || root == NULL) {
        free(root);
        free(table->by_number);
        free(table->by_path);
        free(table);
        return -ENOMEM;
    }
    pthread_mutex_init(&table->lock, NULL);
    zm__link(table, root);
    table->count = 1;
    *out = table;
    return 0;
}

void zm__inodes_destroy(zm__inodes *table)
{
    if (table == NULL)
        return;
    for (size_t i = 0; i < table->buckets; i++) {
        zm__inode *entry = table->by_number[i];
        while (entry) {
            zm__inode *next = entry->next_by_number;
            zm__free_entry(entry);
            entry = next;
        }
    }
    free(table->by_number);
    free(table->by_path);
    pthread_mutex_destroy(&table->lock);
    free(table);
}

int zm__inodes_remember(zm__inodes *table, const char *path, const zm_node *node, uint64_t *inode)
{
    zm_node held;
    return zm__inodes_remember_held(table, path, node, NULL, inode, &held);
}

int zm__inodes_remember_held(zm__inodes *table, const char *path, const zm_node *node,
                             const char *failure, uint64_t *inode, zm_node *held)
{
    uint64_t path_hash = zm__hash_path(path);
    /* Copied before the lock: a new entry's reason (an existing entry keeps
     * its own, as it keeps its node). */
    char *reason = node->error != 0 && failure != NULL ? strdup(failure) : NULL;
    pthread_mutex_lock(&table->lock);
    zm__inode *entry = zm__find_path(table, path, path_hash);
    if (entry == NULL) {
        uint64_t number = zm__preferred_number(path_hash);
        while (zm__find_number(table, number))
            number = zm__next_number(number);
        entry = zm__new_entry(path, path_hash, number, node);
        if (entry == NULL) {
            pthread_mutex_unlock(&table->lock);
            free(reason);
            return -ENOMEM;
        }
        entry->failure = reason;
        reason = NULL;
        zm__link(table, entry);
        table->count++;
        zm__maybe_grow(table);
    }
    entry->lookups++;
    *inode = entry->number;
    *held = entry->node;
    pthread_mutex_unlock(&table->lock);
    free(reason);
    return 0;
}

void zm__inodes_forget(zm__inodes *table, uint64_t inode, uint64_t count)
{
    if (inode == ZM__ROOT_INODE)
        return;
    pthread_mutex_lock(&table->lock);
    zm__inode *entry = zm__find_number(table, inode);
    if (entry && count < entry->lookups) {
        entry->lookups -= count;
        entry = NULL;
    } else if (entry) {
        zm__unlink(table, entry);
        table->count--;
    }
    pthread_mutex_unlock(&table->lock);
    zm__free_entry(entry);
}

int zm__inodes_get(zm__inodes *table, uint64_t inode, char **path, zm_node *node)
{
    if (path)
        *path = NULL;
    pthread_mutex_lock(&table->lock);
    zm__inode *entry = zm__find_number(table, inode);
    int rc = entry ? 0 : -ENOENT;
    if (entry && path && (*path = strdup(entry->path)) == NULL)
        rc = -ENOMEM;
    if (entry && node)
        *node = entry->node;
    pthread_mutex_unlock(&table->lock);
    return rc;
}

int zm__inodes_failure(zm__inodes *table, uint64_t inode, char *reason, size_t size)
{
    reason[0] = '\0';
    pthread_mutex_lock(&table->lock);
    zm__inode *entry = zm__find_number(table, inode);
    int rc = entry && entry->node.error != 0 ? 0 : -ENOENT;
    if (rc == 0 && entry->failure != NULL)
        snprintf(reason, size, "%s", entry->failure);
    pthread_mutex_unlock(&table->lock);
    return rc;
}

uint64_t zm__inodes_number(zm__inodes *table, const char *path)
{
    uint64_t path_hash = zm__hash_path(path);
    pthread_mutex_lock(&table->lock);
    zm__inode *entry = zm__find_path(table, path, path_hash);
    uint64_t number = entry ? entry->number : zm__preferred_number(path_hash);
    pthread_mutex_unlock(&table->lock);
    return number;
}

int zm__inodes_numbers(zm__inodes *table, uint64_t **numbers, size_t *count)
{
    pthread_mutex_lock(&table->lock);
    uint64_t *list = malloc((table->count ? table->count : 1) * sizeof *list);
    size_t held = 0;
    for (size_t b = 0; list && b < table->buckets; b++)
        for (zm__inode *e = table->by_number[b]; e; e = e->next_by_number)
            list[held++] = e->number;
    pthread_mutex_unlock(&table->lock);
    *numbers = list;
    *count = held;
    return list ? 0 : -ENOMEM;
}

size_t zm__inodes_count(zm__inodes *table)
{
    pthread_mutex_lock(&table->lock);
    size_t count = table->count;
    pthread_mutex_unlock(&table->lock);
    return count;
}
