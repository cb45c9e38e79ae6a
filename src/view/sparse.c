/* A sparse matrix laid out in a view: which majors, in which order, how many
 * entries each keeps, and the source pointers they come from (read for the
 * view's cells only, and checked before anything is served from them). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/config.h"

#include "view/view_internal.h"

/* Value i of raw, integers of the pointer array's type, as int64. */
static int64_t pointer_at(const zm_array_info *info, const uint8_t *raw, uint64_t i)
{
    uint64_t u = 0;
    memcpy(&u, raw + i * info->dtype.size, info->dtype.size);
    if (info->dtype.type_class == ZM_TYPE_INT && info->dtype.size < 8 &&
        (u >> (info->dtype.size * 8 - 1)) & 1)
        u |= ~0ULL << (info->dtype.size * 8);
    return (int64_t)u;
}

static int read_int64s(zm_source *source, const zm_array *array, int64_t **out, zm_err *err)
{
    const zm_array_info *info = zm_array_describe(array);
    uint64_t n = info->shape[0];
    size_t size = info->dtype.size;
    /* Read into the result and widened in place, last value first (value
     * i is read from i * size <= i * 8): no second buffer of an atlas's
     * pointers. */
    int64_t *values = zm__big_alloc(n * sizeof *values);
    int rc = values ? zm_array_read_rows(source, array, 0, n, values, err)
                    : zm_err_set(err, -ENOMEM, "out of memory reading %s", info->file_path);
    const uint8_t *raw = (const uint8_t *)values;
    for (uint64_t i = n; rc == 0 && size < 8 && i-- > 0;) {
        uint64_t u = 0;
        memcpy(&u, raw + i * size, size);
        if (info->dtype.type_class == ZM_TYPE_INT && (u >> (size * 8 - 1)) & 1)
            u |= ~0ULL << (size * 8);
        values[i] = (int64_t)u;
    }
    if (rc != 0) {
        free(values);
        return rc;
    }
    *out = values;
    return 0;
}

/* The pointers of the view's cells only (m and m + 1 for each kept major
 * m), by view row: start[v] and end[v] for v's cell. A subsample reads the
 * indptr chunks its cells lie in, not the whole pointer array, and holds
 * what it read by its own rows. */
static int read_pointers_of(zm_view *view, const zm_array *indptr, int64_t **start_out,
                            int64_t **end_out, zm_err *err)
{
    const zm_array_info *info = zm_array_describe(indptr);
    uint64_t n = view->rows;
    unsigned bits;
    uint64_t *owned;
    const uint64_t *cells = zm__cells_by_source(view, &bits, &owned, err);
    if (cells == NULL)
        return err->code;
    uint64_t *rows = malloc(2 * (n ? n : 1) * sizeof *rows);
    int64_t *start = zm__big_alloc((n ? n : 1) * sizeof *start);
    int64_t *end = zm__big_alloc((n ? n : 1) * sizeof *end);
    uint8_t *raw = malloc(2 * (n ? n : 1) * info->dtype.size);
    int rc = rows && start && end && raw ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    uint64_t count = 0;
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        uint64_t m = cells[i] >> bits;
        if (count == 0 || rows[count - 1] < m)
            rows[count++] = m;
        rows[count++] = m + 1;
    }
    /* One pass: the pointer chunks only as far as the cells need them. */
    uint64_t *places = rc == 0 ? malloc((count ? count : 1) * sizeof *places) : NULL;
    if (rc == 0 && places == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory");
    for (uint64_t i = 0; rc == 0 && i < count; i++)
        places[i] = i;
    if (rc == 0)
        rc = zm_array_scatter_rows(view->source, indptr, rows, places, count, raw, ZM_READ_PASS,
                                   err);
    free(places);
    /* The cells in source order walk the rows read alongside: m is at r
     * and m + 1 right after it. */
    for (uint64_t i = 0, r = 0; rc == 0 && i < n; i++) {
        uint64_t m = cells[i] >> bits, v = cells[i] & (((uint64_t)1 << bits) - 1);
        while (rows[r] < m)
            r++;
        start[v] = pointer_at(info, raw, r);
        end[v] = pointer_at(info, raw, r + 1);
    }
    free(rows);
    free(owned);
    free(raw);
    if (rc != 0) {
        free(start);
        free(end);
        return rc;
    }
    *start_out = start;
    *end_out = end;
    return 0;
}

/* The source pointers a view uses, checked before anything is served from
 * them: all of them (from 0, never decreasing, ending at the stored values)
 * when the view reads the whole array, else each kept cell's pair
 * (0 <= start <= end <= stored values). A source is opened without reading
 * its pointers, so this is where a damaged indptr is refused (-EIO, as
 * damage met by any read). */
static int check_pointers(const zm_view *view, const zm_element *e, const zm_view_sparse *s,
                          uint64_t source_majors, zm_err *err)
{
    int64_t stored = (int64_t)zm_array_describe(e->values)->shape[0];
    if (s->source_start == NULL) {
        const int64_t *p = s->source_indptr;
        if (p[0] != 0)
            return zm_err_set(err, -EIO, "%s: indptr starts at %" PRId64 ", not 0", e->path, p[0]);
        for (uint64_t i = 1; i <= source_majors; i++)
            if (p[i] < p[i - 1])
                return zm_err_set(err, -EIO, "%s: indptr is not monotone (entry %" PRIu64
                                  " is %" PRId64 " after %" PRId64 ")", e->path, i, p[i], p[i - 1]);
        if (p[source_majors] != stored)
            return zm_err_set(err, -EIO, "%s: indptr ends at %" PRId64 " but there are %" PRId64
                              " stored values", e->path, p[source_majors], stored);
        return 0;
    }
    for (uint64_t v = 0; v < view->rows; v++) {
        int64_t from = s->source_start[v], to = s->source_end[v];
        if (from < 0 || to < from || to > stored) {
            uint64_t m = view->order[v];
            return zm_err_set(err, -EIO,
                              "%s: indptr entries %" PRIu64 " and %" PRIu64 " are %" PRId64
                              " and %" PRId64 ", not a range within the %" PRId64 " stored values",
                              e->path, m, m + 1, from, to, stored);
        }
    }
    return 0;
}

/* Lengths of the view's majors (every entry kept) into indptr[i + 1]. */
struct lengths_part {
    const zm_view *view;
    zm_view_sparse *s;
    uint64_t from, to;
};

static void *part_lengths(void *context)
{
    const struct lengths_part *part = context;
    const zm_view_sparse *s = part->s;
    const uint32_t *order = part->view->order; /* made (lay_out) */
    const int64_t *p = s->source_indptr;
    for (uint64_t i = part->from; i < part->to; i++) {
        uint64_t m = s->major_is_cell ? order[i] : i;
        /* Cells in view order read the pointers at random: ask ahead. */
        if (s->major_is_cell && i + 64 < part->to)
            __builtin_prefetch(&p[order[i + 64]]);
        s->indptr[i + 1] = p[m + 1] - p[m];
    }
    return NULL;
}

/* Majors per thread at least: below, one thread. */
#define LENGTHS_PER_THREAD ((uint64_t)1 << 20)
#define LENGTHS_THREADS 4

static void major_lengths(const zm_view *view, zm_view_sparse *s)
{
    long cores = zm_config_cores();
    uint64_t threads = s->majors / LENGTHS_PER_THREAD;
    if (threads > (uint64_t)(cores > 1 ? cores : 1))
        threads = (uint64_t)(cores > 1 ? cores : 1);
    if (threads > LENGTHS_THREADS)
        threads = LENGTHS_THREADS;
    if (threads < 1)
        threads = 1;
    struct lengths_part parts[LENGTHS_THREADS];
    pthread_t ids[LENGTHS_THREADS];
    int started[LENGTHS_THREADS] = {0};
    for (uint64_t t = 0; t < threads; t++) {
        parts[t] = (struct lengths_part){view, s, s->majors * t / threads, s->majors * (t + 1) / threads};
        /* The first part on this thread; a thread that cannot start, too. */
        if (t > 0)
            started[t] = pthread_create(&ids[t], NULL, part_lengths, &parts[t]) == 0;
    }
    part_lengths(&parts[0]);
    for (uint64_t t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else
            part_lengths(&parts[t]);
    }
}

/* A gene-major X of a priority-ordered file, in a view of its stored prefix
 * rows [0, k): each gene's kept entries lie among its first prefix counts
 * for the smallest level L >= k (the specification's prefix read), so only
 * those are read, and one entry more when the gene has it, to check the
 * count: the counted entries' rows are below L, the next one's is not (else
 * the file's counts are wrong: -EIO, never other cells' values). The gene's
 * source range becomes its counted entries. 1: not such a view (the general
 * layout applies). */
static int prefix_layout(zm_view *view, const zm_element *e, zm_view_sparse *s, zm_err *err)
{
    const zm_priority *p = zm_source_priority(view->source);
    uint64_t k = view->rows, genes = s->majors;
    if (!view->prefix || p->prefix_counts == NULL || strcmp(e->path, "X") != 0 ||
        s->major_is_cell || !s->minor_is_cell || p->prefix_genes != genes)
        return 1;
    uint64_t j = 0;
    while (j < p->level_count && p->levels[j] < k)
        j++;
    if (j == p->level_count)
        return 1; /* k past the largest level: every entry is read anyway */
    uint64_t level = p->levels[j];
    const int64_t *indptr = s->source_indptr;
    zm_range *ranges = malloc((genes ? genes : 1) * sizeof *ranges);
    s->source_start = zm__big_alloc((genes ? genes : 1) * sizeof *s->source_start);
    s->source_end = zm__big_alloc((genes ? genes : 1) * sizeof *s->source_end);
    int rc = ranges && s->source_start && s->source_end
                 ? 0 : zm_err_set(err, -ENOMEM, "out of memory laying out %s", e->path);
    uint64_t total = 0;
    for (uint64_t g = 0; rc == 0 && g < genes; g++) {
        uint64_t from = (uint64_t)indptr[g], length = (uint64_t)(indptr[g + 1] - indptr[g]);
        uint64_t counted = p->prefix_counts[g * p->level_count + j];
        uint64_t scan = counted < length ? counted + 1 : length;
        ranges[g] = (zm_range){from, from + scan};
        s->source_start[g] = (int64_t)from;
        s->source_end[g] = (int64_t)(from + counted);
        total += scan;
    }
    const zm_array_info *info = zm_array_describe(e->indices);
    uint8_t *raw = rc == 0 ? malloc((total ? total : 1) * info->dtype.size) : NULL;
    if (rc == 0 && raw == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory laying out %s", e->path);
    /* One read of every gene's counted entries, its chunks kept: the
     * view's chunks read them again (each chunk decoded once). */
    uint64_t *places = rc == 0 ? malloc((genes ? genes : 1) * sizeof *places) : NULL;
    if (rc == 0 && places == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory laying out %s", e->path);
    for (uint64_t g = 0, at = 0; rc == 0 && g < genes; g++) {
        places[g] = at;
        at += ranges[g].end - ranges[g].start;
    }
    if (rc == 0)
        rc = zm_array_scatter_ranges(view->source, e->indices, ranges, places, genes, raw,
                                     ZM_READ_KEEP, err);
    free(places);
    s->indptr[0] = 0;
    for (uint64_t g = 0, at = 0; rc == 0 && g < genes; g++) {
        uint64_t counted = (uint64_t)(s->source_end[g] - s->source_start[g]);
        uint64_t scan = ranges[g].end - ranges[g].start, kept = 0;
        for (uint64_t i = 0; rc == 0 && i < scan; i++) {
            int64_t row = zm_dtype_integer(info->dtype, raw, at + i);
            int below = row >= 0 && (uint64_t)row < level;
            if (i < counted ? !below : below)
                rc = zm_err_set(err, -EIO,
                                "X: varm/cellucid_prefix_counts counts %" PRIu64 " entries of gene %"
                                PRIu64 " among the first %" PRIu64 " rows, but its entry %" PRIu64
                                " is at row %" PRId64, counted, g, level, i, row);
            kept += i < counted && row >= 0 && (uint64_t)row < k;
        }
        s->indptr[g + 1] = s->indptr[g] + (int64_t)kept;
        at += scan;
    }
    free(raw);
    free(ranges);
    return rc;
}

/* The layout's pointers let go (a failed layout's too). */
static void release_pointers(zm_view_sparse *s)
{
    if (s->indptr != s->source_indptr)
        free(s->indptr);
    free(s->source_indptr);
    free(s->source_start);
    free(s->source_end);
    s->indptr = s->source_indptr = s->source_start = s->source_end = NULL;
}

void zm__sparse_free(zm_view_sparse *s)
{
    release_pointers(s);
    free(s);
}

/* A column window of a matrix (a 10x modality's X): each kept row's entries
 * in the window, by view row, from the window's rows (zm_element_window);
 * the length of each is the view's. */
static int window_layout(zm_view *view, const zm_element *e, zm_view_sparse *s, zm_err *err)
{
    zm_window_rows w;
    int rc = zm_element_window(view->source, e, &w, err);
    if (rc != 0)
        return rc;
    s->source_start = zm__big_alloc((s->majors ? s->majors : 1) * sizeof *s->source_start);
    s->indptr = zm__big_alloc((s->majors + 1) * sizeof *s->indptr);
    if (s->source_start == NULL || s->indptr == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory laying out %s", e->path);
    s->indptr[0] = 0;
    for (uint64_t v = 0; v < s->majors; v++) {
        uint64_t m = s->major_is_cell ? view->order[v] : v;
        const int64_t *at = w.at + m * w.stride;
        s->source_start[v] = at[0];
        s->indptr[v + 1] = s->indptr[v] + (at[1] - at[0]);
    }
    return 0;
}

static int add_layout(zm_view *view, zm_view_sparse *s, zm_err *err)
{
    zm_view_sparse **list = realloc(view->sparses, (view->sparse_count + 1) * sizeof *list);
    if (list == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    view->sparses = list;
    view->sparses[view->sparse_count++] = s;
    return 0;
}

/* The pointers of a layout whose axes are set (s->element, major_is_cell,
 * minor_is_cell, majors): read, checked, and the view's made from them. A
 * failure leaves none. */
static int lay_out(zm_view *view, zm_view_sparse *s, zm_err *err)
{
    const zm_element *e = s->element;
    if (e->window != NULL) {
        int rc = zm__order_made(view, err);
        if (rc == 0)
            rc = window_layout(view, e, s, err);
        if (rc != 0)
            release_pointers(s);
        return rc;
    }
    int csr = e->sparse_format == ZM_SPARSE_CSR;
    uint64_t source_majors = csr ? e->shape[0] : e->shape[1];
    /* Cells as majors are read in view order: the order is made first. */
    int rc = s->major_is_cell ? zm__order_made(view, err) : 0;
    if (rc == 0)
        rc = s->major_is_cell && s->majors < source_majors
                 ? read_pointers_of(view, e->indptr, &s->source_start, &s->source_end, err)
                 : read_int64s(view->source, e->indptr, &s->source_indptr, err);
    if (rc == 0)
        rc = check_pointers(view, e, s, source_majors, err);
    /* Majors in source order, every entry kept (the whole file, or genes
     * as majors of a per-cell matrix whose cells are not its minors): the
     * view's pointers are the source's, held once. */
    int same = rc == 0 && !s->major_is_cell && !s->minor_is_cell && s->majors == source_majors;
    s->indptr = rc != 0 ? NULL : same ? s->source_indptr : zm__big_alloc((s->majors + 1) * sizeof *s->indptr);
    if (rc == 0 && s->indptr == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory laying out %s", e->path);
    const uint32_t *inverse = NULL;
    if (rc == 0 && s->minor_is_cell && (inverse = zm_view_inverse(view, err)) == NULL)
        rc = -ENOMEM;
    if (rc == 0 && !same && !s->minor_is_cell && s->source_start != NULL) {
        /* A subsample, every entry of each kept cell: its pointers are held
         * by view row already. Its length is the view's, so the end goes. */
        s->indptr[0] = 0;
        for (uint64_t i = 0; i < s->majors; i++)
            s->indptr[i + 1] = s->indptr[i] + (s->source_end[i] - s->source_start[i]);
        free(s->source_end);
        s->source_end = NULL;
    } else if (rc == 0 && !same && !s->minor_is_cell) {
        /* Every entry of each major kept: the lengths in the view's order
         * (read at random, on several threads at atlas scale), then their
         * running sum. */
        s->indptr[0] = 0;
        major_lengths(view, s);
        for (uint64_t i = 1; i <= s->majors; i++)
            s->indptr[i] += s->indptr[i - 1];
    } else if (rc == 0 && !same && (rc = prefix_layout(view, e, s, err)) != 1) {
        /* Laid out from the prefix counts (or refused by them). */
    } else if (rc == 1 || (rc == 0 && !same)) {
        rc = 0;
        s->indptr[0] = 0;
        /* Kept entries of each major: (cells as minors) those whose cell is
         * in the view: one pass over the majors' indices. */
        for (uint64_t i = 0; rc == 0 && i < s->majors; i++) {
            uint64_t m = s->major_is_cell ? view->order[i] : i;
            /* Cells in view order read the pointers at random: ask ahead. */
            if (s->source_start == NULL && s->major_is_cell && i + 64 < s->majors)
                __builtin_prefetch(&s->source_indptr[view->order[i + 64]]);
            int64_t from = s->source_start ? s->source_start[i] : s->source_indptr[m];
            int64_t to = s->source_start ? s->source_end[i] : s->source_indptr[m + 1];
            int64_t kept = to - from;
            if (s->minor_is_cell && kept > 0) {
                const zm_array_info *info = zm_array_describe(e->indices);
                uint8_t *raw = malloc((size_t)kept * info->dtype.size);
                zm_range range = {(uint64_t)from, (uint64_t)to};
                rc = raw ? zm_array_gather_ranges(view->source, e->indices, &range, 1, raw, err)
                         : zm_err_set(err, -ENOMEM, "out of memory laying out %s", e->path);
                kept = 0;
                for (int64_t j = 0; rc == 0 && j < to - from; j++)
                    kept += inverse[zm_dtype_integer(info->dtype, raw, (uint64_t)j)] != ZM_VIEW_NOT_KEPT;
                free(raw);
            }
            s->indptr[i + 1] = s->indptr[i] + kept;
        }
    }
    if (rc != 0)
        release_pointers(s);
    return rc;
}

uint64_t zm__sparse_entries(const zm_view_sparse *s)
{
    /* A deferred layout keeps every stored value (checked when it is made). */
    if (atomic_load_explicit(&s->deferred, memory_order_acquire))
        return zm_array_describe(s->element->values)->shape[0];
    return (uint64_t)s->indptr[s->majors];
}

/* Lays out a sparse matrix in the view: which majors, in which order, and
 * how many entries each keeps. */
int zm__sparse_layout(zm_view *view, const zm_element *e, zm_view_sparse **out, zm_err *err)
{
    zm_view_sparse *s = calloc(1, sizeof *s);
    if (s == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    s->element = e;
    s->view = view;
    uint64_t source_majors;
    if (e->window != NULL) {
        s->major_is_cell = e->axes[0] == ZM_AXIS_OBS && !view->identity;
        s->majors = source_majors = view->rows;
    } else {
        int csr = e->sparse_format == ZM_SPARSE_CSR;
        s->major_is_cell = (csr ? e->axes[0] : e->axes[1]) == ZM_AXIS_OBS;
        s->minor_is_cell = (csr ? e->axes[1] : e->axes[0]) == ZM_AXIS_OBS;
        if (view->identity)
            s->major_is_cell = s->minor_is_cell = 0; /* every cell, in file order */
        source_majors = csr ? e->shape[0] : e->shape[1];
        s->majors = s->major_is_cell ? view->rows : source_majors;
    }
    /* Every entry of every major kept (its entries are the stored values):
     * laid out when first read, so that a lookup of full/ reads no
     * pointers. */
    int rc = 0;
    if (e->window == NULL && !s->minor_is_cell && s->majors == source_majors)
        atomic_store_explicit(&s->deferred, 1, memory_order_relaxed);
    else
        rc = lay_out(view, s, err);
    if (rc == 0)
        rc = add_layout(view, s, err);
    if (rc != 0) {
        zm__sparse_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void zm_view_sparse_axes(const zm_view_sparse *sparse, zm_view_sparse_info *info)
{
    *info = (zm_view_sparse_info){.element = sparse->element,
                                  .per_cell_rows = sparse->major_is_cell,
                                  .per_cell_columns = sparse->minor_is_cell,
                                  .rows = sparse->majors};
}

int zm_view_sparse_ready(const zm_view_sparse *sparse)
{
    return !atomic_load_explicit(&sparse->deferred, memory_order_acquire);
}

/* A deferred layout made (its view's layout_mutex held), checked against
 * the length its store gave its entries. */
static int deferred_layout(zm_view_sparse *s, zm_err *err)
{
    if (s->failure.code != 0) {
        *err = s->failure;
        return s->failure.code;
    }
    /* Its entries are then the stored values, as its store said:
     * check_pointers refuses pointers that do not start at 0 and end there. */
    int rc = lay_out(s->view, s, err);
    if (rc == -EIO)
        s->failure = *err; /* the source is damaged: said again, not read again */
    return rc;
}

int zm_view_sparse_get(zm_view *view, zm_view_sparse *sparse, zm_view_sparse_info *info,
                       zm_err *err)
{
    (void)view; /* the layout is its own view's (a modality's part for its matrices) */
    if (atomic_load_explicit(&sparse->deferred, memory_order_acquire)) {
        zm_view *owner = sparse->view;
        pthread_mutex_lock(&owner->layout_mutex);
        int rc = 0;
        if (atomic_load_explicit(&sparse->deferred, memory_order_relaxed)) {
            rc = deferred_layout(sparse, err);
            if (rc == 0)
                atomic_store_explicit(&sparse->deferred, 0, memory_order_release);
        }
        pthread_mutex_unlock(&owner->layout_mutex);
        if (rc != 0)
            return rc;
    }
    zm_view_sparse_axes(sparse, info);
    info->indptr = sparse->indptr;
    info->source_indptr = sparse->source_indptr;
    info->source_start = sparse->source_start;
    info->source_end = sparse->source_end;
    /* Made by the layout where rows are cells; else unused, and perhaps
     * being made now for another array. */
    info->order = sparse->major_is_cell ? sparse->view->order : NULL;
    return 0;
}
