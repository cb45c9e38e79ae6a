/* Internal to the fs module: the inode numbers the kernel knows, path <->
 * number, thread-safe.
 *
 * The kernel names files by number; the tree by path. An entry lives while
 * the kernel holds it: each lookup (and each readdirplus entry) adds one,
 * forget takes them away, and the entry goes at zero, so memory follows the
 * kernel's inode cache rather than every path ever visited (a `find` over
 * a mount of a large dataset visits millions).
 *
 * A path's number is derived from a hash of the path, so it is the same
 * after the kernel forgot it and looked it up again, the same in readdir's
 * d_ino as in stat's st_ino, and the same on every mount of the same tree.
 * Only when two live paths hash alike (about one chance in 20 000 with a
 * million live paths) does the later one take the next free number.
 * Numbers stay below 2^53 so that JavaScript readers (zarrita on Node,
 * whose stat numbers are doubles) see them exactly. The root is
 * FUSE_ROOT_ID (1) and is never forgotten. */
#ifndef ZARRMOUNT_FS_INODES_H
#define ZARRMOUNT_FS_INODES_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/tree.h"

#define ZM__ROOT_INODE 1

typedef struct zm__inodes zm__inodes;

/* A table holding the root ("", a directory). -ENOMEM. */
int zm__inodes_create(zm__inodes **out);
void zm__inodes_destroy(zm__inodes *table);

/* Finds or adds path, counts one more lookup, and gives its number. The
 * node is stored with a new entry (the tree never changes, so an existing
 * entry keeps its own). -ENOMEM. */
int zm__inodes_remember(zm__inodes *table, const char *path, const zm_node *node, uint64_t *inode);

/* As zm__inodes_remember, and *held gets the node the entry holds: an
 * existing entry's own, which is what the kernel was told before. So a file
 * whose bytes could not be made (zm_node.error) stays failed while the
 * kernel holds its inode (its placeholder size must never front a later
 * success), and one that was made keeps its size; once the kernel forgets
 * it, the next lookup makes a new entry and tries again. failure: why a new
 * entry's bytes could not be made (node->error set; copied), or NULL. */
int zm__inodes_remember_held(zm__inodes *table, const char *path, const zm_node *node,
                             const char *failure, uint64_t *inode, zm_node *held);

/* Why the bytes of inode's file could not be made, copied into reason
 * (size bytes, size >= 1; "" if no reason was kept). -ENOENT for a number
 * the table does not hold, or a file whose node has no error. */
int zm__inodes_failure(zm__inodes *table, uint64_t inode, char *reason, size_t size);

/* Takes count lookups away from inode; at zero the entry goes. Unknown
 * numbers and the root are ignored. */
void zm__inodes_forget(zm__inodes *table, uint64_t inode, uint64_t count);

/* A malloc'd copy of the path of inode (if path is not NULL) and its node
 * (if node is not NULL). -ENOENT for a number the table does not hold,
 * -ENOMEM. */
int zm__inodes_get(zm__inodes *table, uint64_t inode, char **path, zm_node *node);

/* The number path has, or the one it would get, without adding it (readdir
 * reports numbers of entries nobody looked up yet). */
uint64_t zm__inodes_number(zm__inodes *table, const char *path);

/* A malloc'd list of every number held (the root included) in *numbers,
 * their count in *count. -ENOMEM. */
int zm__inodes_numbers(zm__inodes *table, uint64_t **numbers, size_t *count);

/* Entries held (the root included). */
size_t zm__inodes_count(zm__inodes *table);

#endif
