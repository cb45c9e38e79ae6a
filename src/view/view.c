/* A view: the cells of a selection over a source in view order, kept for
 * the layers above (by source row, the inverse map), what other layers
 * attach to it, and the lookup of its store's nodes by path. The store
 * itself is laid out in store.c, its sparse matrices in sparse.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <pthread.h>
#include <sys/mman.h>
#include <string.h>

#include "zarrmount/config.h"

#include "view/view_internal.h"

/* What another layer keeps for a view (zm_view_attach), released with it. */
struct attachment {
    const void *key;
    void *data;
    zm_view_release release;
    struct attachment *next;
};

uint64_t zm_view_rows(const zm_view *view) { return view->rows; }
const uint32_t *zm_view_order(const zm_view *view, zm_err *err)
{
    return zm__order_made(view, err) == 0 ? view->order : NULL;
}
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
    /* The mod/ group's children are the parts' roots: the parts free them. */
    if (view->mod_group != NULL)
        view->mod_group->child_count = 0;
    zm__node_free(view->root);
    zm__parts_free(view);
    for (size_t i = 0; i < view->sparse_count; i++) {
        zm__sparse_free(view->sparses[i]);
    }
    free(view->sparses);
    free(view->order);
    free(view->inverse);
    free(view->by_source);
    zm_view_set_unref(view->spec.set);
    pthread_mutex_destroy(&view->mutex);
    pthread_mutex_destroy(&view->layout_mutex);
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
int zm__index_store(zm_store_node *node)
{
    /* A part's nodes (under mod/NAME/) were indexed with the part. */
    if (node->is_array || node->child_count == 0 || node->children_by_name != NULL)
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
        rc = zm__index_store(node->children[i]);
    return rc;
}

/* An array of a few bytes a cell: at atlas scale tens of MB read at
 * random (by view order), so in huge pages where the kernel gives them:
 * one TLB entry and one page fault per 2 MiB, not per 4 KiB (with the
 * pointers asked for ahead, building a view of 10M cells went from 0.41
 * to 0.30 s). free() releases it. */
void *zm__big_alloc(size_t bytes)
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
const uint64_t *zm__cells_by_source(zm_view *view, unsigned *bits, uint64_t **owned, zm_err *err)
{
    uint64_t n = view->rows;
    int keep = 2 * n <= zm_source_n_obs(view->source);
    *owned = NULL;
    if (zm__order_made(view, err) != 0)
        return NULL;
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
    uint64_t *cells = zm__big_alloc((n ? n : 1) * sizeof *cells);
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
    kept->cells = zm__cells_by_source(view, &kept->bits, &owned, err);
    return kept->cells ? 0 : err->code;
}

uint64_t zm_view_bytes(zm_view *view)
{
    uint64_t n = zm_source_n_obs(view->source), k = view->rows;
    pthread_mutex_lock(&view->mutex);
    uint64_t bytes = (view->order ? k * sizeof *view->order : 0) +
                     (view->inverse ? n * sizeof *view->inverse : 0) +
                     (view->by_source ? k * sizeof *view->by_source : 0);
    pthread_mutex_unlock(&view->mutex);
    for (size_t i = 0; i < view->sparse_count; i++) {
        const zm_view_sparse *s = view->sparses[i];
        const zm_element *e = s->element;
        if (atomic_load_explicit(&s->deferred, memory_order_acquire))
            continue; /* nothing held yet */
        uint64_t source_majors = e->sparse_format == ZM_SPARSE_CSR ? e->shape[0] : e->shape[1];
        bytes += (s->majors + 1) * sizeof *s->indptr;
        if (s->source_indptr != NULL && s->source_indptr != s->indptr)
            bytes += (source_majors + 1) * sizeof *s->source_indptr;
        bytes += (s->source_start ? s->majors : 0) * sizeof *s->source_start +
                 (s->source_end ? s->majors : 0) * sizeof *s->source_end;
    }
    for (size_t i = 0; i < view->part_count; i++)
        bytes += k * sizeof *view->part_maps[i] + zm_view_bytes(view->parts[i]);
    return bytes;
}

const uint32_t *zm_view_inverse(zm_view *view, zm_err *err)
{
    if (zm__order_made(view, err) != 0)
        return NULL;
    pthread_mutex_lock(&view->mutex);
    if (view->inverse == NULL) {
        uint64_t n = zm_source_n_obs(view->source);
        uint32_t *inverse = zm__big_alloc(n * sizeof *inverse);
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

void zm__view_locks_init(zm_view *view)
{
    pthread_mutex_init(&view->mutex, NULL);
    pthread_mutex_init(&view->layout_mutex, NULL);
}

/* The order of a view of every cell (under mutex once the view is shared): file order for
 * file/ and for full/ of a priority-ordered file (its rows are its seed's
 * priority order, as verified when it opened), else the kernel's priority
 * order of seed 0. */
static int make_order(zm_view *view, zm_err *err)
{
    uint64_t n = view->rows;
    if (view->identity) {
        view->order = zm__big_alloc((n ? n : 1) * sizeof *view->order);
        if (view->order == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", n);
        for (uint64_t i = 0; i < n; i++)
            view->order[i] = (uint32_t)i;
        return 0;
    }
    zm_view_request made;
    int rc = zm_view_request_make(view->source, &view->spec, &made, err);
    if (rc != 0)
        return rc;
    zm_selection selection;
    rc = zm_select(&made.request, &selection, err);
    zm_view_request_free(&made);
    if (rc != 0)
        return rc;
    if (selection.k != n) {
        zm_selection_free(&selection);
        return zm_err_set(err, -EIO, "full/: the kernel kept %" PRIu64 " of %" PRIu64 " cells",
                          selection.k, n);
    }
    view->order = selection.order;
    selection.order = NULL;
    zm_selection_free(&selection);
    return 0;
}

int zm__order_made(const zm_view *view_c, zm_err *err)
{
    /* The order is the view's state made late, not a change of the view. */
    zm_view *view = (zm_view *)view_c;
    if (!atomic_load_explicit(&view->order_deferred, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&view->mutex);
    int rc = 0;
    if (atomic_load_explicit(&view->order_deferred, memory_order_relaxed)) {
        rc = make_order(view, err);
        if (rc == 0)
            atomic_store_explicit(&view->order_deferred, 0, memory_order_release);
    }
    pthread_mutex_unlock(&view->mutex);
    return rc;
}

static int select_cells(zm_view *view, zm_err *err)
{
    uint64_t n = zm_source_n_obs(view->source);
    /* full/ and file/ are in the priority order of the file's seed and in
     * file order: the same order in a priority-ordered file. */
    const zm_priority *p = zm_source_priority(view->source);
    if (view->spec.kind == ZM_VIEW_FULL || view->spec.kind == ZM_VIEW_FILE)
        view->spec.seed = p->verified ? p->seed : 0;
    const zm_view_set *set = view->spec.set;
    if ((view->spec.kind == ZM_VIEW_FULL || view->spec.kind == ZM_VIEW_FILE) && set == NULL &&
        n > 0 && zm_source_modality_count(view->source) == 0) {
        /* Every cell: what the store's structure needs is known now, its
         * order made when first asked for (a MuData's parts need it now). */
        view->rows = n;
        view->identity = view->spec.kind == ZM_VIEW_FILE || p->verified;
        view->prefix = 1;
        zm_cellset_digest_all(n, view->digest);
        atomic_store_explicit(&view->order_deferred, 1, memory_order_relaxed);
        return 0;
    }
    if (view->spec.kind == ZM_VIEW_FILE && set != NULL) {
        /* A set's cells in file order (its original positions ascending,
         * but in a priority-ordered file, whose rows are not). */
        view->rows = set->count;
        view->order = zm__big_alloc((set->count ? set->count : 1) * sizeof *view->order);
        if (view->order == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", set->count);
        for (uint64_t i = 0; i < set->count; i++)
            view->order[i] = p->verified ? p->stored[set->positions[i]] : set->positions[i];
        if (p->verified) {
            uint64_t *rows = malloc((set->count ? set->count : 1) * sizeof *rows);
            int rc = rows ? 0 : zm_err_set(err, -ENOMEM, "out of memory ordering cells");
            for (uint64_t i = 0; rc == 0 && i < set->count; i++)
                rows[i] = view->order[i];
            if (rc == 0)
                rc = zm_sort_u64(rows, set->count, err);
            for (uint64_t i = 0; rc == 0 && i < set->count; i++)
                view->order[i] = (uint32_t)rows[i];
            free(rows);
            if (rc != 0)
                return rc;
        }
        view->identity = set->count == n;
        view->prefix = set->count > 0 && view->order[set->count - 1] == set->count - 1;
        memcpy(view->digest, set->digest, sizeof view->digest);
        return 0;
    }
    if (view->spec.kind == ZM_VIEW_FILE) {
        view->rows = n;
        view->identity = 1;
        view->prefix = n > 0;
        zm_cellset_digest_all(n, view->digest);
        return make_order(view, err); /* now: a MuData's parts need it */
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
    /* The kernel named original positions; the view's rows are stored
     * rows (a priority-ordered file's permutation). The digest names the
     * original positions, as every boundary does. */
    if (p->verified)
        for (uint64_t i = 0; i < view->rows; i++)
            view->order[i] = p->stored[view->order[i]];
    zm_cellset_digest(selection.positions, selection.k, selection.n, view->digest);
    zm_selection_free(&selection);
    /* Every cell in file order (full/ of a priority-ordered file, or any
     * view keeping every cell in its seed's order): the file's rows as
     * they are. */
    int identity = view->rows == n;
    uint64_t last = 0;
    for (uint64_t i = 0; i < view->rows; i++) {
        identity = identity && view->order[i] == i;
        last = view->order[i] > last ? view->order[i] : last;
    }
    view->identity = identity;
    /* Distinct rows, the largest rows − 1: the stored prefix (a uniform
     * subsample under a priority-ordered file's seed). */
    view->prefix = view->rows > 0 && last == view->rows - 1;
    return 0;
}

/* Per-cell inputs of the kernel (strata codes, coordinates: by stored row)
 * put in original order through a priority-ordered file's permutation: the
 * value of original position p is that of stored row stored[p]. */
int zm_view_to_original_order(zm_source *source, void *values, size_t size, zm_err *err)
{
    const zm_priority *priority = zm_source_priority(source);
    uint64_t n = zm_source_n_obs(source);
    if (!priority->verified)
        return 0;
    uint8_t *copy = malloc((n ? n : 1) * size);
    if (copy == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", n);
    memcpy(copy, values, n * size);
    for (uint64_t p = 0; p < n; p++)
        memcpy((uint8_t *)values + p * size, copy + (uint64_t)priority->stored[p] * size, size);
    free(copy);
    return 0;
}

int zm_view_request_make(zm_source *source, const zm_view_spec *spec, zm_view_request *out,
                         zm_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t n = zm_source_n_obs(source);
    const zm_priority *priority = zm_source_priority(source);
    zm_request *r = &out->request;
    *r = (zm_request){.method = ZM_METHOD_UNIFORM, .n = n, .seed = spec->seed, .k = spec->k};
    if (spec->set != NULL) {
        r->set = spec->set->positions;
        r->set_count = spec->set->count;
    }
    switch (spec->kind) {
    case ZM_VIEW_FULL:
        /* The priority order of the file's seed: a priority-ordered file's
         * rows as stored, else seed 0's. */
        r->seed = priority->verified ? priority->seed : 0;
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
        if (rc == 0)
            rc = zm_view_to_original_order(source, out->strata.codes, sizeof *out->strata.codes,
                                           err);
        if (rc != 0) {
            zm_view_request_free(out);
            return rc;
        }
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
        if (rc == 0)
            rc = zm_view_to_original_order(source, out->coords, count * sizeof *out->coords, err);
        if (rc != 0) {
            zm_view_request_free(out);
            return rc;
        }
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

int zm_view_create(zm_source *source, const zm_view_spec *spec, uint64_t chunk_bytes,
                   zm_view **out, zm_err *err)
{
    *out = NULL;
    zm_view *view = calloc(1, sizeof *view);
    if (view == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    view->source = source;
    view->spec = *spec;
    if (spec->set != NULL)
        zm_view_set_ref(spec->set); /* the view's own, let go in zm_view_free */
    view->chunk_bytes = chunk_bytes ? chunk_bytes : ZM_DEFAULT_CHUNK_BYTES;
    zm__view_locks_init(view);
    int rc = select_cells(view, err);
    if (rc == 0)
        rc = zm__parts_make(view, err); /* a MuData's modalities, which its store holds */
    if (rc == 0)
        rc = zm__build_store(view, err);
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
    if (spec->kind == ZM_VIEW_FILE && spec->set != NULL) {
        /* The set's cells, by original position. */
        zm_selection *s = &out->selection;
        uint64_t k = spec->set->count;
        out->made.request.n = n;
        s->n = n;
        s->k = k;
        s->positions = malloc((k ? k : 1) * sizeof *s->positions);
        s->order = malloc((k ? k : 1) * sizeof *s->order);
        if (s->positions == NULL || s->order == NULL) {
            zm_selection_free(s);
            return zm_err_set(err, -ENOMEM, "out of memory ordering %" PRIu64 " cells", k);
        }
        memcpy(s->positions, spec->set->positions, k * sizeof *s->positions);
        memcpy(s->order, spec->set->positions, k * sizeof *s->order);
        return 0;
    }
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
