/* Sets of cells the tree serves views over: the files of -o sets=DIR
 * (sets/NAME, a link to sets/NAME@DIGEST, the version of the set it names
 * now) and where/ filters of obs columns. A set file is read whole when the
 * mount starts and again when DIR or the file changes (its device, inode,
 * size or mtime), checked on every lookup of sets/ (two stats); a version
 * that no longer is the file's is still served under its NAME@DIGEST for
 * readers that resolved the link before (SET_VERSIONS_KEPT of them), so no
 * reader sees two versions mixed. A file that does not verify is not
 * listed and does not resolve; the log says why, once for each version of
 * the file. The sets themselves are made by the view layer (view.h:
 * zm_view_set_from_file, zm_view_set_where). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zarrmount/log.h"
#include "tree/tree_internal.h"

static int64_t mtime_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* A set's name from a file name: NAME.json or NAME.txt, not hidden, no
 * '@' (sets/NAME@DIGEST names a version). 0 with the name's length and
 * whether it is JSON, or -1: not a set file. */
static int set_file_name(const char *file, size_t *length, int *json)
{
    size_t n = strlen(file);
    if (file[0] == '.' || strchr(file, '@') != NULL)
        return -1;
    if (n > 5 && strcmp(file + n - 5, ".json") == 0) {
        *length = n - 5;
        *json = 1;
        return 0;
    }
    if (n > 4 && strcmp(file + n - 4, ".txt") == 0) {
        *length = n - 4;
        *json = 0;
        return 0;
    }
    return -1;
}

static set_entry *entry_named(zm_tree *t, const char *name, size_t length)
{
    for (size_t i = 0; i < t->set_count; i++)
        if (strlen(t->sets[i].name) == length && memcmp(t->sets[i].name, name, length) == 0)
            return &t->sets[i];
    return NULL;
}

/* The entry's current version becomes the newest of its old ones. */
static void retire(set_entry *e)
{
    if (e->set == NULL)
        return;
    zm_view_set_unref(e->old[SET_VERSIONS_KEPT - 1]);
    memmove(&e->old[1], &e->old[0], (SET_VERSIONS_KEPT - 1) * sizeof e->old[0]);
    e->old[0] = e->set;
    e->set = NULL;
}

/* Reads the entry's file again if it is not what was read (or never was). */
static void refresh_locked(zm_tree *t, set_entry *e)
{
    struct stat st;
    if (stat(e->file, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (e->set != NULL)
            zm_log(LOG_INFO, "sets/%s: %s is gone: the set is no longer served", e->name, e->file);
        retire(e);
        e->device = 0;
        e->inode = 0;
        snprintf(e->reason, sizeof e->reason, "%s: %s", e->file,
                 errno ? strerror(errno) : "not a regular file");
        return;
    }
    if (st.st_dev == e->device && st.st_ino == e->inode && st.st_size == e->size &&
        mtime_of(&st) == e->mtime_ns)
        return;
    e->device = st.st_dev;
    e->inode = st.st_ino;
    e->size = st.st_size;
    e->mtime_ns = mtime_of(&st);
    zm_view_set *set = NULL;
    zm_err why;
    zm_err_clear(&why);
    int rc = zm_view_set_from_file(t->source, e->file, e->name, &set, &why);
    if (rc != 0) {
        /* The version before stays served under its digest, but the
         * name no longer resolves to it. */
        retire(e);
        snprintf(e->reason, sizeof e->reason, "%s", why.reason);
        zm_log(LOG_WARNING, "sets/%s: %s: not served: %s", e->name, e->file, why.reason);
        return;
    }
    if (e->set != NULL && strcmp(e->set->digest, set->digest) == 0) {
        zm_view_set_unref(set); /* the same cells: the version served stays */
        return;
    }
    retire(e);
    e->set = set;
    e->reason[0] = '\0';
    zm_log(LOG_INFO, "sets/%s: %" PRIu64 " cells from %s (digest %s)", e->name, set->count, e->file,
           set->digest);
}

/* Reads DIR again if it changed since it was read: new files are added,
 * removed ones no longer resolve, and a name held by both NAME.json and
 * NAME.txt resolves to neither. */
static void scan_locked(zm_tree *t)
{
    struct stat st;
    if (stat(t->sets_dir, &st) != 0)
        return;
    if (t->sets_scanned && mtime_of(&st) == t->sets_dir_mtime_ns && st.st_ino == t->sets_dir_inode)
        return;
    DIR *dir = opendir(t->sets_dir);
    if (dir == NULL)
        return;
    t->sets_scanned = 1;
    t->sets_dir_mtime_ns = mtime_of(&st);
    t->sets_dir_inode = st.st_ino;
    for (size_t i = 0; i < t->set_count; i++)
        t->sets[i].present = 0;
    struct dirent *d;
    while ((d = readdir(dir)) != NULL) {
        size_t length;
        int json;
        if (set_file_name(d->d_name, &length, &json) != 0 || length > ZM_ELEMENT_NAME_MAX)
            continue;
        set_entry *e = entry_named(t, d->d_name, length);
        char file[4096];
        if ((size_t)snprintf(file, sizeof file, "%s/%s", t->sets_dir, d->d_name) >= sizeof file)
            continue;
        if (e != NULL && e->present && strcmp(e->file, file) != 0) {
            /* NAME.json and NAME.txt: which one is meant is not said. */
            retire(e);
            e->device = 0;
            char reason[ZM_REASON_MAX];
            snprintf(reason, sizeof reason, "both %s.json and %s.txt are in %s: rename one of them",
                     e->name, e->name, t->sets_dir);
            if (strcmp(reason, e->reason) != 0) /* said once */
                zm_log(LOG_WARNING, "sets/%s: not served: %s", e->name, reason);
            snprintf(e->reason, sizeof e->reason, "%s", reason);
            e->present = 2;
            continue;
        }
        if (e == NULL) {
            if (t->set_count == t->set_capacity) {
                size_t capacity = t->set_capacity ? 2 * t->set_capacity : 8;
                set_entry *grown = realloc(t->sets, capacity * sizeof *grown);
                if (grown == NULL)
                    break;
                t->sets = grown;
                t->set_capacity = capacity;
            }
            e = &t->sets[t->set_count];
            memset(e, 0, sizeof *e);
            e->name = strndup(d->d_name, length);
            e->file = strdup(file);
            if (e->name == NULL || e->file == NULL) {
                free(e->name);
                free(e->file);
                break;
            }
            t->set_count++;
        } else if (strcmp(e->file, file) != 0) {
            free(e->file);
            e->file = strdup(file);
            e->device = 0; /* read again */
            if (e->file == NULL) {
                e->present = 0;
                continue;
            }
        }
        e->present = 1;
    }
    closedir(dir);
    for (size_t i = 0; i < t->set_count; i++) {
        set_entry *e = &t->sets[i];
        if (e->present == 2)
            continue;
        if (!e->present) {
            if (e->set != NULL)
                zm_log(LOG_INFO, "sets/%s: %s is gone: the set is no longer served", e->name,
                       e->file);
            retire(e);
            e->device = 0;
            snprintf(e->reason, sizeof e->reason, "no %s.json or %s.txt in %s", e->name, e->name,
                     t->sets_dir);
            continue;
        }
        refresh_locked(t, e);
    }
}

int zm__sets_open(zm_tree *t, const char *directory, zm_err *err)
{
    if (directory == NULL)
        return 0;
    struct stat st;
    if (stat(directory, &st) != 0)
        return zm_err_set(err, -errno, "-o sets=%s: %s", directory, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return zm_err_set(err, -ENOTDIR, "-o sets=%s: not a directory", directory);
    if ((t->sets_dir = strdup(directory)) == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_lock(&t->sets_mutex);
    scan_locked(t);
    pthread_mutex_unlock(&t->sets_mutex);
    return 0;
}

void zm__sets_close(zm_tree *t)
{
    for (size_t i = 0; i < t->set_count; i++) {
        set_entry *e = &t->sets[i];
        zm_view_set_unref(e->set);
        for (int v = 0; v < SET_VERSIONS_KEPT; v++)
            zm_view_set_unref(e->old[v]);
        free(e->name);
        free(e->file);
    }
    free(t->sets);
    for (int i = 0; i < WHERE_KEPT; i++)
        zm_view_set_unref(t->where[i]);
    free(t->sets_dir);
    pthread_mutex_destroy(&t->sets_mutex);
}

int zm__set_get(zm_tree *t, const char *name, size_t length, const char *digest, zm_view_set **out,
                zm_err *err)
{
    *out = NULL;
    if (t->sets_dir == NULL)
        return zm_err_set(err, -ENOENT, "sets/: no sets directory (mount with -o sets=DIR)");
    pthread_mutex_lock(&t->sets_mutex);
    set_entry *e = entry_named(t, name, length);
    /* A version asked for by its digest is found without reading
     * anything; the name alone is the file as it is now. */
    zm_view_set *found = NULL;
    if (e != NULL && digest != NULL) {
        if (e->set != NULL && strcmp(e->set->digest, digest) == 0)
            found = e->set;
        for (int v = 0; found == NULL && v < SET_VERSIONS_KEPT; v++)
            if (e->old[v] != NULL && strcmp(e->old[v]->digest, digest) == 0)
                found = e->old[v];
    }
    if (found == NULL) {
        scan_locked(t);
        e = entry_named(t, name, length);
        if (e != NULL && e->present == 1)
            refresh_locked(t, e);
        if (e != NULL && e->set != NULL && (digest == NULL || strcmp(e->set->digest, digest) == 0))
            found = e->set;
    }
    int rc = 0;
    if (found != NULL)
        *out = zm_view_set_ref(found);
    else if (e == NULL)
        rc = zm_err_set(err, -ENOENT, "sets/%.*s: no %.*s.json or %.*s.txt in %s", (int)length,
                        name, (int)length, name, (int)length, name, t->sets_dir);
    else if (digest != NULL)
        rc = zm_err_set(err, -ENOENT, "sets/%.*s@%s: not a version of the set this mount holds%s%s%s",
                        (int)length, name, digest, e->set ? " (now " : "",
                        e->set ? e->set->digest : "", e->set ? ")" : "");
    else
        rc = zm_err_set(err, -ENOENT, "sets/%.*s: %s", (int)length, name, e->reason);
    pthread_mutex_unlock(&t->sets_mutex);
    return rc;
}

int zm__sets_list(zm_tree *t, int (*emit)(void *context, const char *name, const char *link),
                  void *context)
{
    if (t->sets_dir == NULL)
        return 0;
    pthread_mutex_lock(&t->sets_mutex);
    scan_locked(t);
    /* Names and links copied out: emit runs without the lock. */
    size_t count = 0;
    char **names = malloc((t->set_count ? t->set_count : 1) * sizeof *names);
    for (size_t i = 0; names != NULL && i < t->set_count; i++) {
        set_entry *e = &t->sets[i];
        if (e->present == 1)
            refresh_locked(t, e);
        if (e->present == 1 && e->set != NULL &&
            asprintf(&names[count], "%s%c%s@%s", e->name, '\0', e->name, e->set->digest) > 0)
            count++;
    }
    pthread_mutex_unlock(&t->sets_mutex);
    int rc = names ? 0 : -ENOMEM;
    for (size_t i = 0; i < count; i++) {
        if (rc == 0)
            rc = emit(context, names[i], names[i] + strlen(names[i]) + 1);
        free(names[i]);
    }
    free(names);
    return rc;
}

int zm__where_get(zm_tree *t, const char *key, const char *values, zm_view_set **out, zm_err *err)
{
    char name[2 * ZM_VIEW_KEY_MAX + 16];
    snprintf(name, sizeof name, "where/%s/%s", key, values);
    pthread_mutex_lock(&t->sets_mutex);
    for (int i = 0; i < WHERE_KEPT; i++)
        if (t->where[i] != NULL && strcmp(t->where[i]->name, name) == 0) {
            *out = zm_view_set_ref(t->where[i]);
            pthread_mutex_unlock(&t->sets_mutex);
            return 0;
        }
    pthread_mutex_unlock(&t->sets_mutex);
    /* Made without the lock (it reads an obs column); two threads making
     * the same set keep one. */
    zm_view_set *set = NULL;
    int rc = zm_view_set_where(t->source, key, values, &set, err);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&t->sets_mutex);
    zm_view_set_unref(t->where[t->where_next]);
    t->where[t->where_next] = zm_view_set_ref(set);
    t->where_next = (t->where_next + 1) % WHERE_KEPT;
    pthread_mutex_unlock(&t->sets_mutex);
    *out = set;
    return 0;
}

int zm__set_get_linked(zm_tree *t, const char *name, size_t length, uint64_t snapshot,
                       zm_view_set **out, zm_err *err)
{
    *out = NULL;
    pthread_mutex_lock(&t->sets_mutex);
    set_entry *e = t->sets_dir ? entry_named(t, name, length) : NULL;
    zm_view_set *found = NULL;
    if (e != NULL && e->set != NULL && zm__set_link_snapshot(e->set->digest) == snapshot)
        found = e->set;
    for (int v = 0; e != NULL && found == NULL && v < SET_VERSIONS_KEPT; v++)
        if (e->old[v] != NULL && zm__set_link_snapshot(e->old[v]->digest) == snapshot)
            found = e->old[v];
    if (found != NULL)
        *out = zm_view_set_ref(found);
    pthread_mutex_unlock(&t->sets_mutex);
    return found ? 0
                 : zm_err_set(err, -ESTALE, "sets/%.*s: this version of the link is no longer "
                              "kept: look it up again", (int)length, name);
}
