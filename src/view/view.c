/* A view: the cells of a selection over a source, and the AnnData Zarr store
 * they make (groups, attributes, arrays and where their chunks come from). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>

#include "zarrmount/config.h"
#include "zarrmount/view.h"

struct zm_view_sparse {
    const zm_element *element;
    int major_is_cell, minor_is_cell;
    uint64_t majors;          /* view majors (rows of CSR, columns of CSC) */
    int64_t *indptr;          /* view pointers, majors + 1 */
    /* Where each major's entries lie in the source: the source's pointers
     * (source majors + 1), or, for a subsample's cells as majors, each view
     * major's first entry (source_start) and, when its cells are the minors
     * too, its end (source_end): 8 or 16 bytes a kept cell, not 8 a source
     * cell. */
    int64_t *source_indptr;
    int64_t *source_start, *source_end;
};

struct zm_view {
    zm_source *source;
    zm_view_spec spec;
    uint64_t chunk_bytes;
    uint64_t rows;       /* cells in the view */
    uint32_t *order;     /* view row → source row */
    int identity;        /* order is 0, 1, 2, ... */
    char digest[17];
    zm_store_node *root;
    pthread_mutex_t mutex;
    uint32_t *inverse;   /* source row → view row or ZM_VIEW_NOT_KEPT, made when first needed */
    /* A subsample's cells in source order, each source row << by_source_bits
     * | view row: 8 bytes a kept cell where the inverse map takes 4 a source
     * cell; made when first needed, for views of at most half the source. */
    uint64_t *by_source;
    unsigned by_source_bits;
    zm_view_sparse **sparses;
    size_t sparse_count;
    struct attachment *attachments; /* added under mutex, read without it */
};

/* What another layer keeps for a view (zm_view_attach), released with it. */
struct attachment {
    const void *key;
    void *data;
    zm_view_release release;
    struct attachment *next;
};

uint64_t zm_view_rows(const zm_view *view) { return view->rows; }
const uint32_t *zm_view_order(const zm_view *view) { return view->order; }
zm_source *zm_view_source(const zm_view *view) { return view->source; }
const zm_view_spec *zm_view_get_spec(const zm_view *view) { return &view->spec; }
const char *zm_view_digest(const zm_view *view) { return view->digest; }
int zm_view_is_identity(const zm_view *view) { return view->identity; }
const zm_store_node *zm_view_root(const zm_view *view) { return view->root; }

void *zm_view_attach(zm_view *view, const void *key, void *data, zm_view_release release)
{
    pthread_mutex_lock(&view->mutex);
    struct attachment *a = view->attachments;
    while (a != NULL && a->key != key)
        a = a->next;
    if (a == NULL && (a = malloc(sizeof *a)) != NULL) {
        *a = (struct attachment){key, data, release, view->attachments};
        /* Published whole: zm_view_attached reads the list without the
         * mutex (an entry is never changed or taken out before the view
         * is freed). */
        __atomic_store_n(&view->attachments, a, __ATOMIC_RELEASE);
    }
    void *attached = a ? a->data : NULL;
    pthread_mutex_unlock(&view->mutex);
    return attached;
}

/* Without the mutex, which a thread making the inverse map holds for long:
 * synth asks for its walks on every chunk. */
void *zm_view_attached(const zm_view *view, const void *key)
{
    const struct attachment *a = __atomic_load_n(&view->attachments, __ATOMIC_ACQUIRE);
    while (a != NULL && a->key != key)
        a = a->next;
    return a ? a->data : NULL;
}

static void node_free(zm_store_node *node)
{
    if (node == NULL)
        return;
    for (size_t i = 0; i < node->child_count; i++)
        node_free(node->children[i]);
    free(node->children);
    free(node->children_by_name);
    free(node->field_sizes);
    json_decref((json_t *)node->meta.dtype_fields);
    json_decref(node->attrs);
    free(node->name);
    free(node);
}

static void sparse_free(zm_view_sparse *s)
{
    if (s->indptr != s->source_indptr)
        free(s->indptr);
    free(s->source_indptr);
    free(s->source_start);
    free(s->source_end);
    free(s);
}

void zm_view_free(zm_view *view)
{
    if (view == NULL)
        return;
    /* Released first: what other layers keep may refer to the nodes. */
    while (view->attachments != NULL) {
        struct attachment *a = view->attachments;
        view->attachments = a->next;
        if (a->release)
            a->release(a->data);
        free(a);
    }
    node_free(view->root);
    for (size_t i = 0; i < view->sparse_count; i++) {
        sparse_free(view->sparses[i]);
    }
    free(view->sparses);
    free(view->order);
    free(view->inverse);
    free(view->by_source);
    pthread_mutex_destroy(&view->mutex);
    free(view);
}

const zm_store_node *zm_view_child(const zm_store_node *group, const char *name, size_t n)
{
    if (group == NULL || group->is_array)
        return NULL;
    if (group->children_by_name == NULL) { /* while the store is laid out */
        for (size_t i = 0; i < group->child_count; i++)
            if (strlen(group->children[i]->name) == n && !memcmp(group->children[i]->name, name, n))
                return group->children[i];
        return NULL;
    }
    /* The first name not below name[0 .. n): equal ones keep child order. */
    size_t low = 0, high = group->child_count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        const char *m = group->children_by_name[middle]->name;
        size_t length = strlen(m);
        int c = memcmp(m, name, length < n ? length : n);
        if (c < 0 || (c == 0 && length < n))
            low = middle + 1;
        else
            high = middle;
    }
    if (low < group->child_count) {
        const zm_store_node *c = group->children_by_name[low];
        if (strlen(c->name) == n && memcmp(c->name, name, n) == 0)
            return c;
    }
    return NULL;
}

const zm_store_node *zm_view_find(const zm_view *view, const char *path)
{
    const zm_store_node *node = view->root;
    while (node && *path) {
        const char *slash = strchr(path, '/');
        size_t n = slash ? (size_t)(slash - path) : strlen(path);
        node = zm_view_child(node, path, n);
        path = slash ? slash + 1 : path + n;
    }
    return node;
}

/* Slots of children by their node's name, equal names in child order. */
static int by_slot(const void *a, const void *b)
{
    zm_store_node *const *x = *(zm_store_node *const *const *)a;
    zm_store_node *const *y = *(zm_store_node *const *const *)b;
    int c = strcmp((*x)->name, (*y)->name);
    return c ? c : (x < y ? -1 : x > y);
}

/* Orders every group's children by name, once the store is laid out. */
static int index_store(zm_store_node *node)
{
    if (node->is_array || node->child_count == 0)
        return 0;
    zm_store_node ***slots = malloc(node->child_count * sizeof *slots);
    node->children_by_name = malloc(node->child_count * sizeof *node->children_by_name);
    if (slots == NULL || node->children_by_name == NULL) {
        free(slots);
        free(node->children_by_name);
        node->children_by_name = NULL;
        return -ENOMEM;
    }
    for (size_t i = 0; i < node->child_count; i++)
        slots[i] = &node->children[i];
    qsort(slots, node->child_count, sizeof *slots, by_slot);
    for (size_t i = 0; i < node->child_count; i++)
        node->children_by_name[i] = *slots[i];
    free(slots);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < node->child_count; i++)
        rc = index_store(node->children[i]);
    return rc;
}

/* An array of a few bytes a cell: at atlas scale tens of MB read at
 * random (by view order), so in huge pages where the kernel gives them:
 * one TLB entry and one page fault per 2 MiB, not per 4 KiB (with the
 * pointers asked for ahead, building a view of 10M cells went from 0.41
 * to 0.30 s). free() releases it. */
static void *big_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < 2 * huge)
        return malloc(bytes ? bytes : 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, (bytes + huge - 1) / huge * huge) != 0)
        return NULL;
    (void)madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);
    return p;
}

/* The view's cells sorted by source row, each source row << *bits | view
 * row: the view's own list (a subsample of at most half the source's cells:
 * kept, *owned NULL) or one made for the caller to free (*owned). */
static const uint64_t *cells_by_source(zm_view *view, unsigned *bits, uint64_t **owned, zm_err *err)
{
    uint64_t n = view->rows;
    int keep = 2 * n <= zm_source_n_obs(view->source);
    *owned = NULL;
    if (keep) {
        pthread_mutex_lock(&view->mutex);
        if (view->by_source != NULL) {
            *bits = view->by_source_bits;
            pthread_mutex_unlock(&view->mutex);
            return view->by_source;
        }
    }
    /* As few bits as the view rows need: as few radix passes as the two. */
    unsigned b = 1;
    while (b < 32 && ((uint64_t)1 << b) < n)
        b++;
    uint64_t *cells = big_alloc((n ? n : 1) * sizeof *cells);
    int rc = cells ? 0 : zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", n);
    for (uint64_t v = 0; rc == 0 && v < n; v++)
        cells[v] = (uint64_t)view->order[v] << b | v;
    if (rc == 0)
        rc = zm_sort_u64(cells, n, err);
    if (rc != 0) {
        free(cells);
        cells = NULL;
    }
    if (keep) {
        view->by_source = cells;
        view->by_source_bits = b;
        pthread_mutex_unlock(&view->mutex);
    } else {
        *owned = cells;
    }
    *bits = b;
    return cells;
}

int zm_view_kept_get(zm_view *view, zm_view_kept *kept, zm_err *err)
{
    uint64_t n = zm_source_n_obs(view->source);
    *kept = (zm_view_kept){.count = view->rows, .n = n};
    if (2 * view->rows > n) {
        kept->inverse = zm_view_inverse(view, err);
        return kept->inverse ? 0 : err->code;
    }
    uint64_t *owned;
    kept->cells = cells_by_source(view, &kept->bits, &owned, err);
    return kept->cells ? 0 : err->code;
}

uint64_t zm_view_bytes(zm_view *view)
{
    uint64_t n = zm_source_n_obs(view->source), k = view->rows;
    pthread_mutex_lock(&view->mutex);
    uint64_t bytes = k * sizeof *view->order + (view->inverse ? n * sizeof *view->inverse : 0) +
                     (view->by_source ? k * sizeof *view->by_source : 0);
    pthread_mutex_unlock(&view->mutex);
    for (size_t i = 0; i < view->sparse_count; i++) {
        const zm_view_sparse *s = view->sparses[i];
        const zm_element *e = s->element;
        uint64_t source_majors = e->sparse_format == ZM_SPARSE_CSR ? e->shape[0] : e->shape[1];
        bytes += (s->majors + 1) * sizeof *s->indptr;
        if (s->source_indptr != NULL && s->source_indptr != s->indptr)
            bytes += (source_majors + 1) * sizeof *s->source_indptr;
        bytes += (s->source_start ? s->majors : 0) * sizeof *s->source_start +
                 (s->source_end ? s->majors : 0) * sizeof *s->source_end;
    }
    return bytes;
}

const uint32_t *zm_view_inverse(zm_view *view, zm_err *err)
{
    pthread_mutex_lock(&view->mutex);
    if (view->inverse == NULL) {
        uint64_t n = zm_source_n_obs(view->source);
        uint32_t *inverse = big_alloc(n * sizeof *inverse);
        if (inverse != NULL) {
            for (uint64_t p = 0; p < n; p++)
                inverse[p] = ZM_VIEW_NOT_KEPT;
            for (uint64_t i = 0; i < view->rows; i++)
                inverse[view->order[i]] = (uint32_t)i;
        }
        view->inverse = inverse;
    }
    pthread_mutex_unlock(&view->mutex);
    if (view->inverse == NULL)
        zm_err_set(err, -ENOMEM, "out of memory mapping cells");
    return view->inverse;
}

/* ---- Selection ------------------------------------------------------------- */

static int select_cells(zm_view *view, zm_err *err)
{
    uint64_t n = zm_source_n_obs(view->source);
    if (view->spec.kind == ZM_VIEW_FILE) {
        view->rows = n;
        view->identity = 1;
        view->order = malloc((n ? n : 1) * sizeof *view->order);
        if (view->order == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", n);
        for (uint64_t i = 0; i < n; i++)
            view->order[i] = (uint32_t)i;
        zm_cellset_digest(view->order, n, n, view->digest);
        return 0;
    }
    zm_view_request made;
    int rc = zm_view_request_make(view->source, &view->spec, &made, err);
    if (rc != 0)
        return rc;
    if (view->spec.kind == ZM_VIEW_SPATIAL) {
        memcpy(view->spec.columns, made.columns, sizeof view->spec.columns);
        view->spec.column_count = made.request.dims;
        view->spec.grid_size = made.request.grid_size;
    }
    zm_selection selection;
    rc = zm_select(&made.request, &selection, err);
    zm_view_request_free(&made);
    if (rc != 0)
        return rc;
    view->rows = selection.k;
    view->order = selection.order;
    selection.order = NULL;
    zm_cellset_digest(selection.positions, selection.k, selection.n, view->digest);
    zm_selection_free(&selection);
    return 0;
}

int zm_view_request_make(zm_source *source, const zm_view_spec *spec, zm_view_request *out,
                         zm_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t n = zm_source_n_obs(source);
    zm_request *r = &out->request;
    *r = (zm_request){.method = ZM_METHOD_UNIFORM, .n = n, .seed = spec->seed, .k = spec->k};
    switch (spec->kind) {
    case ZM_VIEW_FULL:
        r->seed = 0;
        r->k = n ? n : 1;
        break;
    case ZM_VIEW_FILE:
        return zm_err_set(err, -EINVAL, "file/ selects no cells: it is every cell in file order");
    case ZM_VIEW_UNIFORM:
        break;
    case ZM_VIEW_BLOCKS:
        r->method = ZM_METHOD_BLOCKS;
        r->block_size = spec->block_size;
        break;
    case ZM_VIEW_STRATIFIED: {
        r->method = ZM_METHOD_STRATIFIED;
        r->allocation = spec->allocation;
        r->minimum = spec->minimum;
        int rc = zm_view_field_strata(source, spec->field, &out->strata, err);
        if (rc != 0)
            return rc;
        r->codes = out->strata.codes;
        break;
    }
    case ZM_VIEW_SPATIAL: {
        r->method = ZM_METHOD_SPATIAL;
        r->grid_size = spec->grid_size ? spec->grid_size : ZM_DEFAULT_GRID_SIZE;
        uint64_t columns;
        int rc = zm_view_embedding_columns(source, spec->embedding, &columns, err);
        if (rc != 0)
            return rc;
        unsigned count = spec->column_count;
        if (count == 0) {
            count = columns < 3 ? (unsigned)columns : 3;
            for (unsigned c = 0; c < count; c++)
                out->columns[c] = c;
        } else {
            memcpy(out->columns, spec->columns, sizeof out->columns);
        }
        r->dims = count;
        rc = zm_view_embedding_coords(source, spec->embedding, out->columns, count, &out->coords,
                                      err);
        if (rc != 0)
            return rc;
        r->coords = out->coords;
        break;
    }
    }
    return 0;
}

void zm_view_request_free(zm_view_request *request)
{
    zm_field_strata_free(&request->strata);
    free(request->coords);
    request->coords = NULL;
}

/* ---- Sparse layout ----------------------------------------------------------- */

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
    int64_t *values = big_alloc(n * sizeof *values);
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
    const uint64_t *cells = cells_by_source(view, &bits, &owned, err);
    if (cells == NULL)
        return err->code;
    uint64_t *rows = malloc(2 * (n ? n : 1) * sizeof *rows);
    int64_t *start = big_alloc((n ? n : 1) * sizeof *start);
    int64_t *end = big_alloc((n ? n : 1) * sizeof *end);
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
    const uint32_t *order = part->view->order;
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

/* Lays out a sparse matrix in the view: which majors, in which order, and
 * how many entries each keeps. */
static int sparse_layout(zm_view *view, const zm_element *e, zm_view_sparse **out, zm_err *err)
{
    zm_view_sparse *s = calloc(1, sizeof *s);
    if (s == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    int csr = e->sparse_format == ZM_SPARSE_CSR;
    s->element = e;
    s->major_is_cell = (csr ? e->axes[0] : e->axes[1]) == ZM_AXIS_OBS;
    s->minor_is_cell = (csr ? e->axes[1] : e->axes[0]) == ZM_AXIS_OBS;
    if (view->identity)
        s->major_is_cell = s->minor_is_cell = 0; /* every cell, in file order */
    uint64_t source_majors = csr ? e->shape[0] : e->shape[1];
    s->majors = s->major_is_cell ? view->rows : source_majors;
    int rc = s->major_is_cell && s->majors < source_majors
                 ? read_pointers_of(view, e->indptr, &s->source_start, &s->source_end, err)
                 : read_int64s(view->source, e->indptr, &s->source_indptr, err);
    if (rc == 0)
        rc = check_pointers(view, e, s, source_majors, err);
    /* Majors in source order, every entry kept (the whole file, or genes
     * as majors of a per-cell matrix whose cells are not its minors): the
     * view's pointers are the source's, held once. */
    int same = rc == 0 && !s->major_is_cell && !s->minor_is_cell && s->majors == source_majors;
    s->indptr = rc != 0 ? NULL : same ? s->source_indptr : big_alloc((s->majors + 1) * sizeof *s->indptr);
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
    } else if (rc == 0 && !same) {
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
    if (rc != 0) {
        sparse_free(s);
        return rc;
    }
    zm_view_sparse **list = realloc(view->sparses, (view->sparse_count + 1) * sizeof *list);
    if (list == NULL) {
        sparse_free(s);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    view->sparses = list;
    view->sparses[view->sparse_count++] = s;
    *out = s;
    return 0;
}

int zm_view_sparse_get(zm_view *view, zm_view_sparse *sparse, zm_view_sparse_info *info,
                       zm_err *err)
{
    (void)err;
    info->element = sparse->element;
    info->per_cell_rows = sparse->major_is_cell;
    info->per_cell_columns = sparse->minor_is_cell;
    info->rows = sparse->majors;
    info->indptr = sparse->indptr;
    info->source_indptr = sparse->source_indptr;
    info->source_start = sparse->source_start;
    info->source_end = sparse->source_end;
    info->order = view->order;
    return 0;
}

/* ---- The store ------------------------------------------------------------------ */

static zm_store_node *node_new(const char *name, int is_array)
{
    zm_store_node *node = calloc(1, sizeof *node);
    if (node) {
        node->name = strdup(name);
        node->is_array = is_array;
        if (node->name == NULL) {
            free(node);
            return NULL;
        }
    }
    return node;
}

static int node_add(zm_store_node *parent, zm_store_node *child)
{
    /* Doubling: 100,000 columns are 17 copies of the list, not 100,000. */
    if (parent->child_count == parent->child_capacity) {
        size_t capacity = parent->child_capacity ? 2 * parent->child_capacity : 4;
        zm_store_node **children = realloc(parent->children, capacity * sizeof *children);
        if (children == NULL)
            return -ENOMEM;
        parent->children = children;
        parent->child_capacity = capacity;
    }
    parent->children[parent->child_count++] = child;
    return 0;
}

static json_t *encoding(const char *type, const char *version)
{
    return json_pack("{s:s, s:s}", "encoding-type", type, "encoding-version", version);
}

/* A key Zarr can hold: no '/', not empty, not "." or "..", not a metadata
 * file's name. */
static int valid_key(const char *name)
{
    return name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..") &&
           strcmp(name, ".zarray") && strcmp(name, ".zgroup") && strcmp(name, ".zattrs") &&
           strcmp(name, ".zmetadata");
}

static void set_chunks(zm_store_node *node, uint64_t rows_per_chunk)
{
    zm_zarr_array_meta *m = &node->meta;
    if (m->rank == 0)
        return;
    uint64_t rows = rows_per_chunk < m->shape[0] ? rows_per_chunk : m->shape[0];
    m->chunks[0] = rows ? rows : 1;
    for (unsigned d = 1; d < m->rank; d++)
        m->chunks[d] = m->shape[d] ? m->shape[d] : 1;
    for (unsigned d = 0; d < m->rank; d++)
        node->grid[d] = m->shape[d] ? (m->shape[d] + m->chunks[d] - 1) / m->chunks[d] : 0;
}

static void set_dtype(zm_store_node *node, zm_dtype dtype)
{
    snprintf(node->meta.dtype, sizeof node->meta.dtype, "%s", zm_dtype_name(dtype));
    node->value_size = dtype.size;
    node->meta.fill = dtype.type_class == ZM_TYPE_FLOAT ? ZM_FILL_ZERO_FLOAT
                    : dtype.type_class == ZM_TYPE_BOOL  ? ZM_FILL_FALSE
                                                        : ZM_FILL_ZERO_INT;
}

struct builder {
    zm_view *view;
    zm_err *err;
};

/* An array node for an array-like element (numbers or strings, any rank). */
static int array_node(struct builder *b, const char *name, const zm_element *e, const zm_array *a,
                      int per_cell, const char *encoding_type, zm_store_node **out)
{
    *out = NULL;
    const zm_array_info *info = zm_array_describe(a);
    zm_store_node *node = node_new(name, 1);
    if (node == NULL)
        return zm_err_set(b->err, -ENOMEM, "out of memory");
    node->element = e;
    node->source = a;
    if (encoding_type)
        node->attrs = encoding(encoding_type, "0.2.0");
    zm_zarr_array_meta *m = &node->meta;
    int string = info->dtype.type_class == ZM_TYPE_STRING;
    if (e->kind == ZM_ELEMENT_SCALAR) {
        m->rank = 0;
        if (string) {
            /* numpy <U{n}: n = the string's code points. */
            zm_strings s;
            int rc = zm_array_read_strings(zm_view_source(b->view), a, NULL, 0, &s, b->err);
            if (rc != 0) {
                node_free(node);
                return rc;
            }
            uint8_t *utf32 = NULL;
            size_t size = 0, points = 0;
            rc = zm_utf32_encode(s.bytes, s.offsets[s.count > 0 ? 1 : 0], &utf32, &size, &points,
                                 b->err);
            zm_strings_free(&s);
            free(utf32);
            if (rc != 0) {
                node_free(node);
                return rc;
            }
            snprintf(m->dtype, sizeof m->dtype, "<U%zu", points);
            m->fill = ZM_FILL_EMPTY_TEXT;
            node->producer = ZM_PRODUCE_STRING_SCALAR;
        } else {
            set_dtype(node, info->dtype);
            node->producer = ZM_PRODUCE_SCALAR;
        }
        *out = node;
        return 0;
    }
    /* The element's shape: a loom (n, 1) attribute is a column of n. */
    m->rank = e->rank;
    memcpy(m->shape, e->shape, sizeof(uint64_t) * e->rank);
    if (per_cell)
        m->shape[0] = b->view->rows;
    /* A dense obsp matrix: its columns are the cells too. */
    if (per_cell && info->rank == 2 && e->axes[1] == ZM_AXIS_OBS && !b->view->identity) {
        m->shape[1] = b->view->rows;
        node->cell_columns = 1;
    }
    uint64_t rows_per_chunk;
    if (string) {
        snprintf(m->dtype, sizeof m->dtype, "|O");
        m->vlen_utf8 = 1;
        m->fill = ZM_FILL_ZERO_INT;
        node->value_size = 1;
        node->producer = per_cell ? ZM_PRODUCE_CELL_STRINGS : ZM_PRODUCE_STRINGS;
        rows_per_chunk = b->view->chunk_bytes / 32; /* about 32 bytes a string */
    } else {
        set_dtype(node, info->dtype);
        node->producer = per_cell ? ZM_PRODUCE_CELL_ROWS : ZM_PRODUCE_ROWS;
        uint64_t row_bytes = node->value_size;
        for (unsigned d = 1; d < m->rank; d++)
            row_bytes *= m->shape[d];
        rows_per_chunk = row_bytes ? b->view->chunk_bytes / row_bytes : b->view->chunk_bytes;
    }
    set_chunks(node, rows_per_chunk ? rows_per_chunk : 1);
    *out = node;
    return 0;
}

static int element_node(struct builder *b, const zm_element *e, const char *name, int is_root_obs,
                        zm_store_node **out);

static int add_element(struct builder *b, zm_store_node *parent, const zm_element *e,
                       const char *name, int is_root_obs)
{
    zm_store_node *child = NULL;
    int rc = element_node(b, e, name, is_root_obs, &child);
    if (rc == 0 && child && node_add(parent, child) != 0) {
        node_free(child);
        rc = zm_err_set(b->err, -ENOMEM, "out of memory");
    }
    return rc;
}

static int sparse_node(struct builder *b, const zm_element *e, const char *name, zm_store_node **out)
{
    zm_view_sparse *s = NULL;
    int rc = sparse_layout(b->view, e, &s, b->err);
    if (rc != 0)
        return rc;
    zm_store_node *group = node_new(name, 0);
    if (group == NULL)
        return zm_err_set(b->err, -ENOMEM, "out of memory");
    int csr = e->sparse_format == ZM_SPARSE_CSR;
    uint64_t shape[2] = {e->shape[0], e->shape[1]};
    for (int d = 0; d < 2; d++)
        if (e->axes[d] == ZM_AXIS_OBS)
            shape[d] = b->view->rows;
    group->attrs = json_pack("{s:s, s:s, s:[I, I]}", "encoding-type", csr ? "csr_matrix" : "csc_matrix",
                             "encoding-version", "0.1.0", "shape", (json_int_t)shape[0],
                             (json_int_t)shape[1]);
    uint64_t nnz = (uint64_t)s->indptr[s->majors];
    static const char *const names[] = {"data", "indices", "indptr"};
    const zm_array *arrays[] = {e->values, e->indices, e->indptr};
    for (int part = 0; rc == 0 && part < 3; part++) {
        zm_store_node *node = node_new(names[part], 1);
        if (node == NULL || node_add(group, node) != 0) {
            node_free(node);
            rc = zm_err_set(b->err, -ENOMEM, "out of memory");
            break;
        }
        node->element = e;
        node->source = arrays[part];
        node->part = (zm_sparse_part)part;
        node->sparse = s;
        node->producer = part == ZM_PART_INDPTR ? ZM_PRODUCE_INDPTR : ZM_PRODUCE_ENTRIES;
        set_dtype(node, zm_array_describe(arrays[part])->dtype);
        node->meta.rank = 1;
        node->meta.shape[0] = part == ZM_PART_INDPTR ? s->majors + 1 : nnz;
        set_chunks(node, b->view->chunk_bytes / node->value_size);
    }
    if (rc != 0) {
        node_free(group);
        return rc;
    }
    *out = group;
    return 0;
}

/* A rec-array as anndata writes it to Zarr: a structured dtype with each
 * string field made fixed-length "<U{n}", n the longest value's UTF-8 bytes
 * (anndata's _to_fixed_length_strings), records packed. */
static int records_node(struct builder *b, const zm_element *e, const char *name,
                        zm_store_node **out)
{
    zm_store_node *node = node_new(name, 1);
    json_t *fields = json_array();
    if (node == NULL || fields == NULL) {
        node_free(node);
        json_decref(fields);
        return zm_err_set(b->err, -ENOMEM, "out of memory");
    }
    node->attrs = encoding("rec-array", "0.2.0");
    node->element = e;
    node->producer = ZM_PRODUCE_RECORDS;
    node->field_sizes = calloc(e->child_count + 1, sizeof *node->field_sizes);
    int rc = node->field_sizes ? 0 : zm_err_set(b->err, -ENOMEM, "out of memory");
    size_t record = 0;
    for (size_t i = 0; rc == 0 && i < e->child_count; i++) {
        const zm_element *f = e->children[i];
        const zm_array_info *info = zm_array_describe(f->values);
        char dtype[32];
        if (info->dtype.type_class == ZM_TYPE_STRING) {
            zm_strings s;
            rc = zm_array_read_strings(zm_view_source(b->view), f->values, NULL, 0, &s, b->err);
            size_t longest = 0;
            for (size_t j = 0; rc == 0 && j < s.count; j++)
                if (s.offsets[j + 1] - s.offsets[j] > longest)
                    longest = s.offsets[j + 1] - s.offsets[j];
            if (rc == 0)
                zm_strings_free(&s);
            snprintf(dtype, sizeof dtype, "<U%zu", longest);
            node->field_sizes[i] = 4 * longest;
        } else {
            snprintf(dtype, sizeof dtype, "%s", zm_dtype_name(info->dtype));
            node->field_sizes[i] = info->dtype.size;
        }
        record += node->field_sizes[i];
        json_array_append_new(fields, json_pack("[s, s]", f->name, dtype));
    }
    if (rc != 0) {
        json_decref(fields);
        node_free(node);
        return rc;
    }
    node->meta.dtype_fields = fields;
    node->meta.record_size = record;
    node->meta.fill = ZM_FILL_ZERO_RECORD;
    snprintf(node->meta.dtype, sizeof node->meta.dtype, "|V%zu", record);
    node->value_size = record;
    node->meta.rank = 1;
    node->meta.shape[0] = e->shape[0];
    set_chunks(node, record ? b->view->chunk_bytes / record : 1);
    *out = node;
    return 0;
}

static int element_node(struct builder *b, const zm_element *e, const char *name, int is_root_obs,
                        zm_store_node **out)
{
    *out = NULL;
    if (!valid_key(name))
        return 0; /* a name Zarr cannot hold: left out */
    int per_cell = e->axes[0] == ZM_AXIS_OBS;
    int rc = 0;
    switch (e->kind) {
    case ZM_ELEMENT_ARRAY:
        return array_node(b, name, e, e->values, per_cell, "array", out);
    case ZM_ELEMENT_STRING_ARRAY:
        return array_node(b, name, e, e->values, per_cell, "string-array", out);
    case ZM_ELEMENT_SCALAR:
        return array_node(b, name, e, e->values, 0,
                          zm_array_describe(e->values)->dtype.type_class == ZM_TYPE_STRING
                              ? "string" : "numeric-scalar", out);
    case ZM_ELEMENT_SPARSE:
        return sparse_node(b, e, name, out);
    case ZM_ELEMENT_RECORDS:
        return records_node(b, e, name, out);
    case ZM_ELEMENT_CATEGORICAL:
    case ZM_ELEMENT_NULLABLE: {
        zm_store_node *group = node_new(name, 0), *first = NULL, *second = NULL;
        if (group == NULL)
            return zm_err_set(b->err, -ENOMEM, "out of memory");
        if (e->kind == ZM_ELEMENT_CATEGORICAL) {
            group->attrs = json_pack("{s:s, s:s, s:b}", "encoding-type", "categorical",
                                     "encoding-version", "0.2.0", "ordered", e->ordered);
            rc = array_node(b, "codes", e, e->values, per_cell, "array", &first);
            if (rc == 0)
                rc = array_node(b, "categories", e->categories, e->categories->values, 0,
                                e->categories->kind == ZM_ELEMENT_STRING_ARRAY ? "string-array" : "array",
                                &second);
        } else {
            group->attrs = encoding(e->nullable_boolean ? "nullable-boolean" : "nullable-integer", "0.1.0");
            rc = array_node(b, "values", e, e->values, per_cell, "array", &first);
            if (rc == 0)
                rc = array_node(b, "mask", e, e->mask, per_cell, "array", &second);
        }
        if (rc == 0 && (node_add(group, first) != 0 || (first = NULL, node_add(group, second) != 0)))
            rc = zm_err_set(b->err, -ENOMEM, "out of memory");
        else if (rc == 0)
            first = second = NULL;
        node_free(first);
        node_free(second);
        if (rc != 0) {
            node_free(group);
            return rc;
        }
        *out = group;
        return 0;
    }
    case ZM_ELEMENT_DATAFRAME: {
        zm_store_node *group = node_new(name, 0);
        if (group == NULL)
            return zm_err_set(b->err, -ENOMEM, "out of memory");
        const char *index_name = e->index_name && valid_key(e->index_name) ? e->index_name : "_index";
        /* The root obs gains the view's cellucid_original_position: a source
         * column of that name (a file made from a view) gives way to it, so
         * that the store holds one column of each name and the column means
         * what it says: the row's position in this source. */
        const char *own = is_root_obs ? "cellucid_original_position" : NULL;
        json_t *order = json_array();
        for (size_t i = 0; i < e->child_count; i++)
            if (valid_key(e->children[i]->name) && strcmp(e->children[i]->name, index_name) != 0 &&
                (own == NULL || strcmp(e->children[i]->name, own) != 0))
                json_array_append_new(order, json_string(e->children[i]->name));
        if (is_root_obs)
            json_array_append_new(order, json_string("cellucid_original_position"));
        group->attrs = json_pack("{s:s, s:o, s:s, s:s}", "_index", index_name, "column-order", order,
                                 "encoding-type", "dataframe", "encoding-version", "0.2.0");
        if (e->index)
            rc = add_element(b, group, e->index, index_name, 0);
        for (size_t i = 0; rc == 0 && i < e->child_count; i++)
            if (strcmp(e->children[i]->name, index_name) != 0 &&
                (own == NULL || strcmp(e->children[i]->name, own) != 0))
                rc = add_element(b, group, e->children[i], e->children[i]->name, 0);
        if (rc == 0 && is_root_obs) {
            /* Each row's position in the source. */
            zm_store_node *node = node_new("cellucid_original_position", 1);
            if (node == NULL || node_add(group, node) != 0) {
                node_free(node);
                rc = zm_err_set(b->err, -ENOMEM, "out of memory");
            } else {
                node->attrs = encoding("array", "0.2.0");
                node->producer = ZM_PRODUCE_POSITIONS;
                node->element = e;
                node->meta.rank = 1;
                node->meta.shape[0] = b->view->rows;
                set_dtype(node, (zm_dtype){ZM_TYPE_UINT, 4});
                set_chunks(node, b->view->chunk_bytes / 4);
            }
        }
        if (rc != 0) {
            node_free(group);
            return rc;
        }
        *out = group;
        return 0;
    }
    case ZM_ELEMENT_DICT: {
        zm_store_node *group = node_new(name, 0);
        if (group == NULL)
            return zm_err_set(b->err, -ENOMEM, "out of memory");
        group->attrs = encoding(strcmp(e->path, "raw") == 0 ? "raw" : "dict", "0.1.0");
        for (size_t i = 0; rc == 0 && i < e->child_count; i++)
            rc = add_element(b, group, e->children[i], e->children[i]->name, 0);
        if (rc != 0) {
            node_free(group);
            return rc;
        }
        *out = group;
        return 0;
    }
    }
    return 0;
}

/* A 0-d int64 the view makes (the priority record). */
static int constant_node(zm_store_node *parent, const char *name, int64_t value)
{
    zm_store_node *node = node_new(name, 1);
    if (node == NULL || node_add(parent, node) != 0) {
        node_free(node);
        return -ENOMEM;
    }
    node->attrs = encoding("numeric-scalar", "0.2.0");
    node->producer = ZM_PRODUCE_CONSTANT;
    node->constant = value;
    node->meta.rank = 0;
    set_dtype(node, (zm_dtype){ZM_TYPE_INT, 8});
    return 0;
}

static zm_store_node *child(zm_store_node *parent, const char *name)
{
    for (size_t i = 0; parent && i < parent->child_count; i++)
        if (strcmp(parent->children[i]->name, name) == 0)
            return parent->children[i];
    return NULL;
}

static zm_store_node *group_child(zm_store_node *parent, const char *name)
{
    zm_store_node *c = child(parent, name);
    if (c != NULL)
        return c->is_array ? NULL : c;
    c = node_new(name, 0);
    if (c == NULL || node_add(parent, c) != 0) {
        node_free(c);
        return NULL;
    }
    c->attrs = encoding("dict", "0.1.0");
    return c;
}

const char *zm_view_kind_name(zm_view_kind kind)
{
    static const char *const names[] = {"full", "file", "uniform", "blocks", "stratified", "spatial"};
    return names[kind];
}

static int build_store(zm_view *view, zm_err *err)
{
    struct builder b = {view, err};
    const zm_element *root = zm_source_root(view->source);
    zm_store_node *store = node_new("", 0);
    if (store == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    view->root = store;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < root->child_count; i++) {
        const zm_element *e = root->children[i];
        rc = add_element(&b, store, e, e->name, strcmp(e->path, "obs") == 0);
    }
    if (rc != 0)
        return rc;

    /* full/: Cellucid's priority record in uns/cellucid/priority. */
    if (view->spec.kind == ZM_VIEW_FULL) {
        zm_store_node *uns = group_child(store, "uns");
        zm_store_node *cellucid = uns ? group_child(uns, "cellucid") : NULL;
        zm_store_node *priority = cellucid ? group_child(cellucid, "priority") : NULL;
        if (priority == NULL || priority->child_count > 0)
            return zm_err_set(err, -EINVAL, "uns/cellucid/priority exists in the source already");
        if (constant_node(priority, "seed", 0) || constant_node(priority, "specVersion", ZM_SPEC_VERSION) ||
            constant_node(priority, "nObs", (int64_t)zm_source_n_obs(view->source)))
            return zm_err_set(err, -ENOMEM, "out of memory");
    }

    /* The root says what the store is, so a copy still says it. */
    json_t *v = json_pack("{s:s, s:I, s:I, s:I, s:s}", "method", zm_view_kind_name(view->spec.kind), "nObs",
                          (json_int_t)zm_source_n_obs(view->source), "k", (json_int_t)view->rows,
                          "seed", (json_int_t)(view->spec.kind == ZM_VIEW_FILE ? 0 : view->spec.seed),
                          "digest", view->digest);
    if (view->spec.kind == ZM_VIEW_FULL || view->spec.kind == ZM_VIEW_FILE)
        json_object_set_new(v, "seed", json_integer(0));
    if (view->spec.kind == ZM_VIEW_BLOCKS)
        json_object_set_new(v, "blockSize", json_integer((json_int_t)view->spec.block_size));
    if (view->spec.kind == ZM_VIEW_STRATIFIED) {
        json_object_set_new(v, "field", json_string(view->spec.field));
        json_object_set_new(v, "allocation", json_string(zm_allocation_name(view->spec.allocation)));
        json_object_set_new(v, "minimum", json_integer((json_int_t)view->spec.minimum));
    }
    if (view->spec.kind == ZM_VIEW_SPATIAL) {
        json_t *columns = json_array();
        for (unsigned c = 0; c < view->spec.column_count; c++)
            json_array_append_new(columns, json_integer(view->spec.columns[c]));
        json_object_set_new(v, "embedding", json_string(view->spec.embedding));
        json_object_set_new(v, "columns", columns);
        json_object_set_new(v, "gridSize", json_integer((json_int_t)view->spec.grid_size));
    }
    if (view->spec.kind == ZM_VIEW_FILE)
        json_object_del(v, "seed");
    const zm_source_identity *id = zm_source_get_identity(view->source);
    json_t *src = json_pack("{s:s, s:I, s:I, s:I}", "format",
                            zm_source_format_name(zm_source_get_format(view->source)), "nObs",
                            (json_int_t)zm_source_n_obs(view->source), "nVars",
                            (json_int_t)zm_source_n_vars(view->source), "bytes", (json_int_t)id->size);
    store->attrs = json_pack("{s:s, s:s, s:{s:o, s:o}}", "encoding-type", "anndata", "encoding-version",
                             "0.1.0", "zarrmount", "view", v, "source", src);
    if (store->attrs == NULL || index_store(store) != 0)
        return zm_err_set(err, -ENOMEM, "out of memory");
    return 0;
}

int zm_view_create(zm_source *source, const zm_view_spec *spec, uint64_t chunk_bytes,
                   zm_view **out, zm_err *err)
{
    *out = NULL;
    zm_view *view = calloc(1, sizeof *view);
    if (view == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    view->source = source;
    view->spec = *spec;
    view->chunk_bytes = chunk_bytes ? chunk_bytes : ZM_DEFAULT_CHUNK_BYTES;
    pthread_mutex_init(&view->mutex, NULL);
    int rc = select_cells(view, err);
    if (rc == 0)
        rc = build_store(view, err);
    if (rc != 0) {
        zm_view_free(view);
        return rc;
    }
    *out = view;
    return 0;
}

/* ---- Selections without a view ------------------------------------------------ */

int zm_view_select(zm_source *source, const zm_view_spec *spec, zm_view_selection *out,
                   zm_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t n = zm_source_n_obs(source);
    if (spec->kind == ZM_VIEW_FILE) {
        zm_selection *s = &out->selection;
        out->made.request.n = n;
        s->n = s->k = n;
        s->positions = malloc((n ? n : 1) * sizeof *s->positions);
        s->order = malloc((n ? n : 1) * sizeof *s->order);
        if (s->positions == NULL || s->order == NULL) {
            zm_selection_free(s);
            return zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", n);
        }
        for (uint64_t i = 0; i < n; i++)
            s->positions[i] = s->order[i] = (uint32_t)i;
        return 0;
    }
    int rc = zm_view_request_make(source, spec, &out->made, err);
    if (rc == 0)
        rc = zm_select(&out->made.request, &out->selection, err);
    if (rc != 0)
        zm_view_request_free(&out->made);
    return rc;
}

void zm_view_selection_free(zm_view_selection *selection)
{
    zm_selection_free(&selection->selection);
    zm_view_request_free(&selection->made);
}
