/* The source file mapped read-only, for gathers of many short runs of a
 * contiguous dataset: a chunk of a reordered view holds rows from all over
 * the source, and a pread a row is a system call a few hundred bytes (the
 * walk in file order avoids that at the cost of a buffer the size of the
 * array). From the map each run is a memcpy from the page cache.
 *
 * A map can fault where a pread would fail: a file cut short under the
 * mount raises SIGBUS on a page past its new end. The copies run under a
 * guard (a thread's jump buffer, taken by a SIGBUS handler installed
 * once), so such a read fails with EIO and a reason, as a pread past the
 * end does, rather than ending the daemon. A SIGBUS outside a guarded copy
 * goes to the action there was before. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pool.h"
#include "source_internal.h"

static _Thread_local sigjmp_buf *volatile guard;
static struct sigaction previous;
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static int handler_installed;

static void on_bus(int sig, siginfo_t *info, void *context)
{
    sigjmp_buf *jump = guard;
    if (jump != NULL) {
        guard = NULL;
        siglongjmp(*jump, 1);
    }
    /* Not one of our copies: what was there before takes it (the default
     * ends the process as the fault is raised again on return). */
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) {
            previous.sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL);
}

static void install_handler(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_bus;
    sigemptyset(&action.sa_mask);
    /* SA_NODEFER: the handler leaves by siglongjmp without restoring the
     * mask, so SIGBUS must not be blocked while it runs. */
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    handler_installed = sigaction(SIGBUS, &action, &previous) == 0;
}

/* The map of the source's file (its top's: a modality shares its parent's
 * file), made on first use; NULL where there is none to be had (a Zarr
 * store, an empty file, mmap refused: reads then use pread). */
static const uint8_t *source_map(zm_source *source)
{
    source = zm__source_top(source);
    const uint8_t *map = atomic_load_explicit(&source->map, memory_order_acquire);
    if (map != NULL || atomic_load_explicit(&source->map_failed, memory_order_relaxed))
        return map;
    pthread_once(&handler_once, install_handler);
    pthread_mutex_lock(&source->map_mutex);
    map = atomic_load_explicit(&source->map, memory_order_relaxed);
    if (map == NULL && !source->map_failed) {
        /* A source that is no Zarr store is a regular file (checked when
         * it was opened), of identity.size bytes. */
        if (!handler_installed || source->fd < 0 || source->store != NULL ||
            source->identity.size == 0) {
            atomic_store(&source->map_failed, 1);
        } else {
            void *m =
                mmap(NULL, (size_t)source->identity.size, PROT_READ, MAP_SHARED, source->fd, 0);
            if (m == MAP_FAILED) {
                atomic_store(&source->map_failed, 1);
            } else {
                source->map_size = source->identity.size;
                map = m;
                atomic_store_explicit(&source->map, map, memory_order_release);
            }
        }
    }
    pthread_mutex_unlock(&source->map_mutex);
    return map;
}

void zm_array_release_mapped(zm_source *source, const zm_array *array)
{
    zm_source *top = zm__source_top(source);
    const uint8_t *map = atomic_load_explicit(&top->map, memory_order_acquire);
    if (map == NULL || array == NULL)
        return;
    /* The array's span of the file: its values, or its chunks from the
     * first to the last (the whole map while its index is not read). */
    uint64_t from = 0, to = top->map_size;
    if (array->info.layout == ZM_LAYOUT_CONTIGUOUS && array->contiguous_offset != UINT64_MAX) {
        from = array->contiguous_offset;
        to = from + zm_array_row_bytes(array) * zm__row_count(array);
    } else if (array->info.layout == ZM_LAYOUT_CHUNKED &&
               atomic_load_explicit(&array->index_complete, memory_order_acquire) &&
               array->chunk_address != NULL && array->chunk_stored_size != NULL) {
        from = UINT64_MAX;
        to = 0;
        for (uint64_t c = 0; c < array->chunk_count; c++) {
            uint64_t at = array->chunk_address[c];
            if (at == ZM__CHUNK_ABSENT || at == ZM__CHUNK_UNKNOWN)
                continue;
            from = at < from ? at : from;
            to = at + array->chunk_stored_size[c] > to ? at + array->chunk_stored_size[c] : to;
        }
    }
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    from = from / page * page;
    to = to > top->map_size ? top->map_size : to;
    /* Only our page tables' entries go: the page cache keeps the pages, and
     * a copy running meanwhile maps them again as it reads. */
    if (from < to)
        (void)madvise((void *)(map + from), (size_t)(to - from), MADV_DONTNEED);
}

void zm__source_unmap(zm_source *source)
{
    const uint8_t *map = atomic_load(&source->map);
    if (map != NULL)
        munmap((void *)map, (size_t)source->map_size);
    atomic_store(&source->map, NULL);
}

int zm_array_mapped(zm_source *source, const zm_array *array)
{
    if (array == NULL || array->zarr != NULL || array->info.data_path != ZM_PATH_DIRECT)
        return 0;
    if (array->info.layout == ZM_LAYOUT_CONTIGUOUS) {
        if (array->contiguous_offset == UINT64_MAX)
            return 0;
        uint64_t bytes = zm_array_row_bytes(array) * zm__row_count(array);
        zm_source *top = zm__source_top(source);
        return source_map(source) != NULL && array->contiguous_offset <= top->map_size &&
               bytes <= top->map_size - array->contiguous_offset;
    }
    /* Unfiltered chunks of a 1-d dataset (anndata's sparse matrices, which
     * h5py writes resizable, so chunked): each read where it lies. */
    return array->info.layout == ZM_LAYOUT_CHUNKED && array->storage_rank == 1 &&
           !array->info.transposed && zm__chunks_as_stored(array) && source_map(source) != NULL;
}

/* What a guarded copy copies: ranges of an array from the map. */
struct copies {
    const uint8_t *map;
    const zm_array *array;
    const zm_range *ranges;
    const uint64_t *out_row;
    uint8_t *out;
    uint64_t row_bytes;
    const size_t *first;   /* part i copies ranges first[i] .. first[i + 1] − 1 */
    struct zm__pass *pass; /* counted while it runs (a pass), or NULL */
};

/* How many ranges ahead a copy asks the CPU for the next source bytes: the
 * ranges of a walk in priority order lie anywhere in the map, each a few
 * hundred bytes, so a copy that waits for each one's cache misses in turn
 * is bound by memory latency, not bandwidth. */
#define PREFETCH_AHEAD 16

/* The first bytes of a range asked for early (a hint: it never faults). */
static inline void prefetch_range(const uint8_t *from, uint64_t bytes)
{
    __builtin_prefetch(from, 0, 0);
    if (bytes > 64)
        __builtin_prefetch(from + 64, 0, 0);
}

/* Where range i's first value lies in the map, or NULL (empty, or in an
 * absent chunk). */
static inline const uint8_t *range_source(const struct copies *c, size_t i)
{
    const zm_array *array = c->array;
    if (c->ranges[i].start >= c->ranges[i].end)
        return NULL;
    if (array->info.layout == ZM_LAYOUT_CONTIGUOUS)
        return c->map + array->contiguous_offset + c->ranges[i].start * c->row_bytes;
    uint64_t step = array->chunk[0], at = c->ranges[i].start, chunk = at / step;
    uint64_t address = array->chunk_address[chunk];
    return address == ZM__CHUNK_ABSENT ? NULL
                                       : c->map + address + (at - chunk * step) * c->row_bytes;
}

/* Ranges [a, b) copied. A chunked array's chunks were checked to lie in
 * the map, whole (zm__mapped_gather), or are absent (the fill value). */
static __attribute__((noinline)) void copy_ranges(const struct copies *c, size_t a, size_t b)
{
    const zm_array *array = c->array;
    uint64_t size = c->row_bytes;
    for (size_t i = a; i < b && i < a + PREFETCH_AHEAD; i++) {
        const uint8_t *from = range_source(c, i);
        if (from != NULL)
            prefetch_range(from, (c->ranges[i].end - c->ranges[i].start) * size);
    }
    if (array->info.layout == ZM_LAYOUT_CONTIGUOUS) {
        const uint8_t *from = c->map + array->contiguous_offset;
        for (size_t i = a; i < b; i++) {
            const uint8_t *ahead = i + PREFETCH_AHEAD < b ? range_source(c, i + PREFETCH_AHEAD) : NULL;
            if (ahead != NULL)
                prefetch_range(ahead, (c->ranges[i + PREFETCH_AHEAD].end -
                                       c->ranges[i + PREFETCH_AHEAD].start) * size);
            memcpy(c->out + c->out_row[i] * size, from + c->ranges[i].start * size,
                   (c->ranges[i].end - c->ranges[i].start) * size);
        }
        return;
    }
    uint64_t step = array->chunk[0];
    for (size_t i = a; i < b; i++) {
        if (i + PREFETCH_AHEAD < b) {
            const uint8_t *ahead = range_source(c, i + PREFETCH_AHEAD);
            if (ahead != NULL)
                prefetch_range(ahead, (c->ranges[i + PREFETCH_AHEAD].end -
                                       c->ranges[i + PREFETCH_AHEAD].start) * size);
        }
        uint8_t *to = c->out + c->out_row[i] * size;
        for (uint64_t at = c->ranges[i].start; at < c->ranges[i].end;) {
            uint64_t chunk = at / step, origin = chunk * step;
            uint64_t end = c->ranges[i].end < origin + step ? c->ranges[i].end : origin + step;
            uint64_t address = array->chunk_address[chunk];
            if (address == ZM__CHUNK_ABSENT)
                zm__fill_values(to, end - at, array);
            else
                memcpy(to, c->map + address + (at - origin) * size, (end - at) * size);
            to += (end - at) * size;
            at = end;
        }
    }
}

/* copy_ranges under the guard: it takes no lock and allocates nothing, so
 * leaving from the middle of one of its copies is safe. */
static int guarded_copy(const struct copies *c, size_t a, size_t b)
{
    sigjmp_buf jump;
    if (sigsetjmp(jump, 0) != 0)
        return -EIO;
    guard = &jump;
    copy_ranges(c, a, b);
    guard = NULL;
    return 0;
}

static int copy_part(void *context, size_t index)
{
    const struct copies *c = context;
    int rc = guarded_copy(c, c->first[index], c->first[index + 1]);
    zm__pass_step(c->pass);
    return rc;
}

/* Copies of more than this are split into parts of about this size,
 * copied on the pool (a walk's whole array); a chunk's are copied inline. */
#define PART_BYTES ((uint64_t)4 << 20)

/* A chunked array's chunks holding the ranges: found in its index, each
 * checked to be stored whole (unfiltered: its raw size) within the file. */
static int check_chunks(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                        zm_err *err)
{
    uint64_t step = array->chunk[0], raw = step * array->info.dtype.size;
    uint64_t *chunks = NULL;
    size_t n = 0;
    int rc = zm__chunk_positions(array, ranges, count, step, &chunks, &n, err);
    if (rc != 0)
        return rc;
    rc = zm__resolve_chunks(source, array, chunks, n, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        zm__count_chunk(source); /* read, as a decode of it would be counted */
    uint64_t map_size = zm__source_top(source)->map_size;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint64_t address = array->chunk_address[chunks[i]];
        if (address == ZM__CHUNK_ABSENT)
            continue;
        if (address == ZM__CHUNK_UNKNOWN)
            rc = zm_err_set(err, -EIO, "%s: chunk %llu was not found in its index",
                            array->file_path, (unsigned long long)chunks[i]);
        else if (array->chunk_stored_size[chunks[i]] != raw)
            rc = zm_err_set(err, -EIO, "%s: chunk %llu holds %u bytes, expected %llu",
                            array->file_path, (unsigned long long)chunks[i],
                            array->chunk_stored_size[chunks[i]], (unsigned long long)raw);
        else if (address > map_size || raw > map_size - address)
            rc = zm_err_set(err, -EIO,
                            "%s: chunk %llu lies past the end of the file (%llu bytes at %llu)",
                            array->file_path, (unsigned long long)chunks[i],
                            (unsigned long long)raw, (unsigned long long)address);
    }
    free(chunks);
    return rc;
}

int zm__mapped_gather(zm_source *source, const zm_array *const_array, const zm_range *ranges,
                      size_t count, const uint64_t *out_row, uint8_t *out, unsigned flags,
                      zm_err *err)
{
    zm_array *array = (zm_array *)const_array;
    if (!zm_array_mapped(source, array))
        return zm_err_set(err, -EINVAL, "internal error: %s is not mapped", array->file_path);
    int chunked = array->info.layout == ZM_LAYOUT_CHUNKED;
    int rc = chunked ? check_chunks(source, array, ranges, count, err) : 0;
    if (rc != 0)
        return rc;
    struct copies c = {atomic_load_explicit(&zm__source_top(source)->map, memory_order_acquire),
                       array,
                       ranges,
                       out_row,
                       out,
                       zm_array_row_bytes(array),
                       NULL,
                       NULL};
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += (ranges[i].end - ranges[i].start) * c.row_bytes;
    size_t *first = NULL, parts = 0;
    if (total > 2 * PART_BYTES && count > 1 && source->pool != NULL &&
        (first = malloc((size_t)(total / PART_BYTES + 2) * sizeof *first)) != NULL) {
        uint64_t in_part = 0;
        first[parts++] = 0;
        for (size_t i = 0; i < count; i++) {
            in_part += (ranges[i].end - ranges[i].start) * c.row_bytes;
            if (in_part >= PART_BYTES && i + 1 < count && parts < total / PART_BYTES + 1) {
                first[parts++] = i + 1;
                in_part = 0;
            }
        }
        first[parts] = count;
        c.first = first;
        if (flags & ZM_READ_PASS)
            c.pass = zm__pass_begin(source, array, "pieces", parts);
        rc = zm__pool_for(source->pool, parts, copy_part, &c);
        zm__pass_end(source, c.pass);
        free(first);
    } else {
        if (flags & ZM_READ_PASS)
            c.pass = zm__pass_begin(source, array, "pieces", 1);
        rc = guarded_copy(&c, 0, count);
        zm__pass_step(c.pass);
        zm__pass_end(source, c.pass);
    }
    if (rc != 0)
        return zm_err_set(err, -EIO,
                          "%s: the file ends before its values do (cut short while mounted?)",
                          array->file_path);
    size_t size = array->info.dtype.size;
    for (size_t i = 0; array->info.big_endian && i < count; i++)
        zm__swap_bytes(out + out_row[i] * c.row_bytes,
                       (ranges[i].end - ranges[i].start) * c.row_bytes / size, size);
    /* Values checked as chunks are decoded (zm__checked_at_decode) are
     * checked here, where the copies stand for the decoding. */
    for (size_t i = 0; rc == 0 && chunked && zm__checked_at_decode(array) && i < count; i++)
        rc = zm__check_values(array, out + out_row[i] * c.row_bytes,
                              (ranges[i].end - ranges[i].start) * c.row_bytes / size, err);
    if (rc != 0)
        return rc;
    zm__count_bytes(source, total);
    return 0;
}
