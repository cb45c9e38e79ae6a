/* The view registry: the views built, by key, each held while in use and
 * the least recently used one let go when MAX_VIEWS are built; a new one
 * waits for a view to be let go, or is refused (work ahead). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tree/tree_internal.h"

/* ---- Views --------------------------------------------------------------------- */

/* The view for a key, built on first use; held until view_release. When
 * MAX_VIEWS views are held at once, a new one waits until one is let go
 * (wait), or is refused with -EBUSY (!wait: work ahead, which can do
 * without). */
int zm__view_get(zm_tree *t, const target *tg, zm_view **out, int wait, zm_err *err)
{
    pthread_mutex_lock(&t->mutex);
    for (;;) {
        for (size_t i = 0; i < t->view_count; i++)
            if (!strcmp(t->views[i].key, tg->key)) {
                t->views[i].refs++;
                t->views[i].last_used = ++t->clock;
                *out = t->views[i].view;
                pthread_mutex_unlock(&t->mutex);
                return 0;
            }
        if (!t->building)
            break;
        pthread_cond_wait(&t->changed, &t->mutex);
    }
    t->building = 1;
    pthread_mutex_unlock(&t->mutex);

    /* What building reads (the cells' index pointers, ...) is the view's. */
    view_stats *vs = zm__stats_for(t, tg->key);
    zm_source_tally *previous = zm_source_tally_set(&vs->build);
    struct timespec began;
    clock_gettime(CLOCK_MONOTONIC, &began);
    zm_view *view = NULL;
    zm_view_spec spec = tg->spec;
    spec.index_int32 = t->index_int32;
    int rc = zm_view_create(t->source, &spec, t->chunk_bytes, &view, err);
    zm_source_tally_set(previous);
    if (rc == 0) {
        vs->builds++;
        vs->build_nanoseconds += (uint64_t)(zm__seconds_since(&began) * 1e9);
    }
    if (rc == -EINVAL)
        rc = -ENOENT; /* refused by the kernel: the path names no view */

    pthread_mutex_lock(&t->mutex);
    if (rc == 0) {
        size_t victim = MAX_VIEWS;
        int waiting = 0;
        while (t->view_count == MAX_VIEWS) {
            /* Forget the least recently used view nobody holds. */
            victim = MAX_VIEWS;
            for (size_t i = 0; i < t->view_count; i++)
                if (t->views[i].refs == 0 &&
                    (victim == MAX_VIEWS || t->views[i].last_used < t->views[victim].last_used))
                    victim = i;
            if (victim < MAX_VIEWS || !wait)
                break;
            /* Every view is held: readers hold theirs for one request, work
             * ahead for longer, but synthesis ahead lets go when a reader
             * waits (raised to normal priority until it has), and encoding
             * ahead when its array is done. No holder waits for a view. */
            if (!waiting) {
                waiting = 1;
                t->view_waiters++;
                pthread_mutex_unlock(&t->mutex);
                zm__ahead_make_way(t);
                pthread_mutex_lock(&t->mutex);
                continue;
            }
            pthread_cond_wait(&t->changed, &t->mutex);
        }
        if (waiting)
            t->view_waiters--;
        if (victim < MAX_VIEWS) {
            zm__forget_ahead(t, t->views[victim].view);
            zm_view_free(t->views[victim].view);
            free(t->views[victim].key);
            t->views[victim] = t->views[--t->view_count];
        }
        if (t->view_count < MAX_VIEWS) {
            view_entry *e = &t->views[t->view_count++];
            e->key = strdup(tg->key);
            e->view = view;
            e->refs = 1;
            e->last_used = ++t->clock;
            *out = view;
        } else {
            zm_view_free(view);
            rc = zm_err_set(err, -EBUSY, "%s: too many views in use at once", tg->key);
        }
    }
    /* Only now: a second build of the same key would make a second entry. */
    t->building = 0;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mutex);
    return rc;
}

/* count more holds of a view the caller holds (for threads it starts), or
 * fewer (-1: one it took back). Under the tree's mutex. */
void zm__view_hold_locked(zm_tree *t, zm_view *view, int count)
{
    for (size_t i = 0; i < t->view_count; i++)
        if (t->views[i].view == view)
            t->views[i].refs += count;
}

/* Under the tree's mutex. */
void zm__view_release_locked(zm_tree *t, zm_view *view)
{
    for (size_t i = 0; i < t->view_count; i++)
        if (t->views[i].view == view && --t->views[i].refs == 0 && t->view_waiters > 0)
            pthread_cond_broadcast(&t->changed);
}

void zm__view_release(zm_tree *t, zm_view *view)
{
    pthread_mutex_lock(&t->mutex);
    zm__view_release_locked(t, view);
    pthread_mutex_unlock(&t->mutex);
}

/* Whether the view with this key is built (its structure in memory). */
int zm__view_built(zm_tree *t, const char *key)
{
    int built = 0;
    pthread_mutex_lock(&t->mutex);
    for (size_t i = 0; i < t->view_count && !built; i++)
        built = !strcmp(t->views[i].key, key);
    pthread_mutex_unlock(&t->mutex);
    return built;
}
