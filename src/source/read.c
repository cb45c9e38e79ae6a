/* Reading values: the direct path (HDF5 says where the chunks are; we pread
 * and decode them on our own threads, each chunk once, kept in the shared
 * cache), and the dispatch to the HDF5 and memory paths. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/source_internal.h"

uint64_t zm_array_row_bytes(const zm_array *array)
{
    uint64_t bytes = array->info.dtype.size;
    for (unsigned d = 1; d < array->info.rank; d++)
        bytes *= array->info.shape[d];
    return bytes;
}

static uint64_t row_count(const zm_array *array)
{
    return array->info.rank == 0 ? 1 : array->info.shape[0];
}

/* pread until done: a short read means the file ends early. */
int zm__read_exact(zm_source *source, uint64_t offset, void *buffer, size_t size,
                      const zm_array *array, zm_err *err)
{
    size_t done = 0;
    while (done < size) {
        ssize_t n = pread(source->fd, (uint8_t *)buffer + done, size - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return zm_err_set(err, -EIO, "%s: reading %zu bytes at offset %llu failed: %s",
                              array->file_path, size, (unsigned long long)offset, strerror(errno));
        if (n == 0)
            return zm_err_set(err, -EIO,
                              "%s: the file ends before offset %llu (truncated?); %zu bytes were needed",
                              array->file_path, (unsigned long long)(offset + done), size);
        done += (size_t)n;
    }
    zm__count_bytes(source, size);
    return 0;
}

static void swap_bytes(uint8_t *bytes, size_t count, size_t size)
{
    for (size_t i = 0; i < count; i++, bytes += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = bytes[a];
            bytes[a] = bytes[b];
            bytes[b] = t;
        }
}

static void fill_values(uint8_t *bytes, size_t count, const zm_array *array)
{
    size_t size = array->info.dtype.size;
    for (size_t i = 0; i < count; i++)
        memcpy(bytes + i * size, array->fill, size);
}

/* ---- The chunk index ------------------------------------------------------------ */

/* Makes sure the given chunks' addresses are known: the index's storage is
 * allocated once, and each chunk looked up the first time it is needed. */
static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int resolve_chunks(zm_source *source, zm_array *array, const uint64_t *chunks, size_t count,
                          zm_err *err)
{
    if (!array->index_allocated) {
        pthread_mutex_lock(&array->index_mutex);
        if (!array->index_allocated) {
            uint64_t n = array->chunk_count;
            array->chunk_address = malloc(n * sizeof *array->chunk_address);
            array->chunk_stored_size = calloc(n, sizeof *array->chunk_stored_size);
            array->chunk_filter_mask = calloc(n, sizeof *array->chunk_filter_mask);
            if (array->chunk_address && array->chunk_stored_size && array->chunk_filter_mask) {
                for (uint64_t i = 0; i < n; i++)
                    array->chunk_address[i] = ZM__CHUNK_UNKNOWN;
                array->index_allocated = 1;
            } else {
                free(array->chunk_address);
                free(array->chunk_stored_size);
                free(array->chunk_filter_mask);
                array->chunk_address = NULL;
                array->chunk_stored_size = NULL;
                array->chunk_filter_mask = NULL;
            }
        }
        pthread_mutex_unlock(&array->index_mutex);
        if (!array->index_allocated)
            return zm_err_set(err, -ENOMEM, "%s: out of memory indexing %llu chunks",
                              array->file_path, (unsigned long long)array->chunk_count);
    }
    /* Every entry is written under index_mutex (once: unknown, then known
     * for good), and a request reads its chunks' entries only after this
     * has seen them known under the mutex, or the whole index complete:
     * so it sees each address with its stored size and filter mask. */
    if (atomic_load_explicit(&array->index_complete, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&array->index_mutex);
    /* Read the chunk index ourselves where we can: btree.c reads a version
     * 1 B-tree (what h5py and anndata write), all of it when a request wants
     * an eighth of the chunks or more, else just the paths to the chunks it
     * wants (a 0.1% subsample reads a few KiB of the index). HDF5's lookup
     * of one chunk walks the index from its start, in 1.10 and in 1.14
     * alike (measured: 50 and 25 ms a lookup among 200,000 chunks), so for
     * the indexes btree.c leaves (version 4 layouts) HDF5 1.14 and later
     * list all of them in one H5Dchunk_iter pass (0.13 s for those 200,000);
     * only 1.10 is left to its lookups there. */
    if (!array->index_complete &&
        (array->btree_state >= 0 || (ZM__H5_HAS_CHUNK_ITER && !array->iterate_refused))) {
        uint64_t *unknown = malloc((count ? count : 1) * sizeof *unknown);
        size_t wanted = 0;
        for (size_t i = 0; unknown != NULL && i < count; i++)
            if (array->chunk_address[chunks[i]] == ZM__CHUNK_UNKNOWN)
                unknown[wanted++] = chunks[i];
        if (unknown != NULL && wanted > 0) {
            qsort(unknown, wanted, sizeof *unknown, by_u64);
            size_t kept = 1;
            for (size_t i = 1; i < wanted; i++)
                if (unknown[i] != unknown[kept - 1])
                    unknown[kept++] = unknown[i];
            int whole = kept * 8 >= array->chunk_count;
            zm_err why;
            zm_err_clear(&why);
            int rc = -ENOTSUP;
            if (array->btree_state >= 0)
                rc = zm__chunk_index_read(source, array, whole ? NULL : unknown, whole ? 0 : kept,
                                          &why);
            if (rc == 0 && whole)
                atomic_store_explicit(&array->index_complete, 1, memory_order_release);
#if ZM__H5_HAS_CHUNK_ITER
            if (rc == -ENOTSUP && !array->iterate_refused) {
                /* Entries btree.c filled before it refused are kept. */
                zm__hdf5_lock();
                rc = zm__h5_chunk_iterate(array, &why);
                zm__hdf5_unlock();
                if (rc == 0)
                    atomic_store_explicit(&array->index_complete, 1, memory_order_release);
                else if (rc != -ENOMEM)
                    array->iterate_refused = 1; /* not tried again for every request */
            }
#endif
            if (rc == -ENOMEM) {
                pthread_mutex_unlock(&array->index_mutex);
                free(unknown);
                if (err)
                    *err = why;
                return rc;
            }
        }
        free(unknown);
    }
    /* What is still unknown, HDF5 looks up (its lock inside ours, as in
     * zm__chunk_index_read). */
    zm__hdf5_lock();
    int rc = zm__h5_chunk_lookup(array, chunks, count, err);
    zm__hdf5_unlock();
    pthread_mutex_unlock(&array->index_mutex);
    return rc;
}

/* Every value within [value_min, value_limit): indices below their
 * dimension, codes below their category count. A pass for the extremes
 * (which the compiler vectorizes), and only on a failure a second one to
 * name the first value outside. */
#define ZM__EXTREMES(type)                                                                         \
    do {                                                                                           \
        const type *v = values;                                                                    \
        type lo = v[0], hi = v[0];                                                                 \
        for (uint64_t i = 1; i < count; i++) {                                                     \
            lo = v[i] < lo ? v[i] : lo;                                                            \
            hi = v[i] > hi ? v[i] : hi;                                                            \
        }                                                                                          \
        low = (int64_t)lo;                                                                         \
        high = (int64_t)hi;                                                                        \
    } while (0)

int64_t zm_dtype_integer(zm_dtype t, const void *values, uint64_t i)
{
    uint64_t u = 0;
    memcpy(&u, (const uint8_t *)values + i * t.size, t.size);
    if (t.type_class == ZM_TYPE_INT)
        return t.size < 8 && (u >> (t.size * 8 - 1)) & 1 ? (int64_t)(u | ~0ULL << (t.size * 8))
                                                       : (int64_t)u;
    return u > INT64_MAX ? INT64_MAX : (int64_t)u;
}

static int check_values(const zm_array *array, const void *values, uint64_t count, zm_err *err)
{
    const zm_dtype t = array->info.dtype;
    if (count == 0 || (t.type_class != ZM_TYPE_INT && t.type_class != ZM_TYPE_UINT))
        return 0;
    int64_t low, high;
    if (t.type_class == ZM_TYPE_INT) {
        if (t.size == 1)
            ZM__EXTREMES(int8_t);
        else if (t.size == 2)
            ZM__EXTREMES(int16_t);
        else if (t.size == 4)
            ZM__EXTREMES(int32_t);
        else
            ZM__EXTREMES(int64_t);
    } else {
        uint64_t top;
        if (t.size == 1)
            ZM__EXTREMES(uint8_t);
        else if (t.size == 2)
            ZM__EXTREMES(uint16_t);
        else if (t.size == 4)
            ZM__EXTREMES(uint32_t);
        else {
            const uint64_t *v = values;
            uint64_t lo = v[0];
            top = v[0];
            for (uint64_t i = 1; i < count; i++) {
                lo = v[i] < lo ? v[i] : lo;
                top = v[i] > top ? v[i] : top;
            }
            low = lo > INT64_MAX ? INT64_MAX : (int64_t)lo;
            high = top > INT64_MAX ? INT64_MAX : (int64_t)top;
        }
    }
    if (low >= array->value_min && high < array->value_limit)
        return 0;
    for (uint64_t i = 0; i < count; i++) {
        int64_t v = zm_dtype_integer(t, values, i);
        if (v < array->value_min || v >= array->value_limit)
            return zm_err_set(err, -EIO, "%s: value %lld is outside [%lld, %lld): the file's parts "
                              "disagree", array->check_what, (long long)v,
                              (long long)array->value_min, (long long)array->value_limit);
    }
    return 0;
}

/* Whether values are checked as their chunks are decoded (on the pool, each
 * chunk once) rather than after a read. */
static int checked_at_decode(const zm_array *array)
{
    return array->check_values && array->info.data_path == ZM_PATH_DIRECT &&
           array->info.layout == ZM_LAYOUT_CHUNKED && array->storage_rank == 1;
}

/* ---- Loading one chunk --------------------------------------------------------------- */

static uint64_t chunk_bytes(const zm_array *array)
{
    uint64_t bytes = array->info.dtype.size;
    for (unsigned d = 0; d < array->storage_rank; d++)
        bytes *= array->chunk[d];
    return bytes;
}

struct chunk_load {
    zm_source *source;
    zm_array *array;
    uint64_t chunk;
};

/* Reads and decodes one chunk into raw (chunk_bytes of it), native order. */
/* check: whether to check the values of the whole chunk (all of it is used,
 * or it is kept for later uses); otherwise the caller checks what it takes. */
static int decode_chunk(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                        int check, zm_err *err)
{
    uint64_t raw_size = chunk_bytes(array);
    uint64_t address = array->chunk_address[chunk];
    uint32_t stored = array->chunk_stored_size[chunk];
    int rc = 0;
    if (address == ZM__CHUNK_ABSENT) {
        /* Never written: the fill value. */
        fill_values(raw, raw_size / array->info.dtype.size, array);
    } else if (array->filter_count == 0) {
        if (stored != raw_size)
            rc = zm_err_set(err, -EIO, "%s: chunk %llu holds %u bytes, expected %llu",
                            array->file_path, (unsigned long long)chunk, stored,
                            (unsigned long long)raw_size);
        else
            rc = zm__read_exact(source, address, raw, raw_size, array, err);
    } else {
        uint8_t *packed = malloc(stored ? stored : 1);
        if (packed == NULL)
            rc = zm_err_set(err, -ENOMEM, "%s: out of memory for a %u-byte chunk", array->file_path,
                            stored);
        else
            rc = zm__read_exact(source, address, packed, stored, array, err);
        if (rc == 0) {
            zm_err inner;
            zm_err_clear(&inner);
            rc = zm__filter_decode(array->filters, array->filter_count,
                                   array->chunk_filter_mask[chunk], array->info.dtype.size, packed,
                                   stored, raw, raw_size, &inner);
            if (rc != 0)
                zm_err_set(err, rc == -ENOMEM ? -ENOMEM : -EIO, "%s: chunk %llu: %s",
                           array->file_path, (unsigned long long)chunk, inner.reason);
        }
        free(packed);
    }
    if (rc != 0)
        return rc;
    /* Stored bytes of a big-endian array are swapped; the fill value was
     * asked of HDF5 in native order already. */
    if (array->info.big_endian && address != ZM__CHUNK_ABSENT)
        swap_bytes(raw, raw_size / array->info.dtype.size, array->info.dtype.size);
    if (check && checked_at_decode(array)) {
        uint64_t origin = chunk * array->chunk[0];
        uint64_t valid = array->storage_shape[0] - origin;
        rc = check_values(array, raw, valid < array->chunk[0] ? valid : array->chunk[0], err);
        if (rc != 0)
            return rc;
    }
    zm__count_chunk(source);
    return 0;
}

static int load_chunk(void *context, uint8_t **bytes, size_t *size, zm_err *err)
{
    struct chunk_load *c = context;
    uint64_t raw_size = chunk_bytes(c->array);
    uint8_t *raw = malloc(raw_size ? raw_size : 1);
    if (raw == NULL)
        return zm_err_set(err, -ENOMEM, "%s: out of memory for a %llu-byte chunk",
                          c->array->file_path, (unsigned long long)raw_size);
    int rc = decode_chunk(c->source, c->array, c->chunk, raw, 1, err);
    if (rc != 0) {
        free(raw);
        return rc;
    }
    *bytes = raw;
    *size = raw_size;
    return 0;
}

static int get_chunk(zm_source *source, zm_array *array, uint64_t chunk, zm_cache_ref *ref,
                     zm_err *err)
{
    struct {
        uint64_t serial, chunk;
    } key_bytes = {array->serial, chunk};
    struct chunk_load context = {source, array, chunk};
    return zm_cache_get(source->cache, zm_cache_key(&key_bytes, sizeof key_bytes),
                               load_chunk, &context, ref, err);
}

/* ---- Gathers over chunks ------------------------------------------------------------- */

struct gather {
    zm_source *source;
    zm_array *array;
    const zm_range *ranges;
    size_t range_count;
    const uint64_t *out_row; /* output row of each range's first row */
    uint8_t *out;
    uint64_t *tasks;         /* chunk numbers to visit */
    uint64_t rest_chunks;    /* chunks per step along the row dimension */
    zm_err *errors;          /* one per task */
    int one_pass;            /* a pass over many chunks: partly used ones are not kept */
    struct zm__pass *pass;   /* counted while it runs (one_pass) */
};

/* A gather visiting at least this many chunks is a pass (a walk, a view's
 * index pointers): its partly used chunks are decoded into a buffer of the
 * thread's, not kept in the cache, where they would only push out chunks
 * that smaller reads share and cost fresh memory each. */
#define ONE_PASS_CHUNKS 64
/* The thread's buffer is kept up to this size between chunks. */
#define SCRATCH_KEEP_BYTES ((size_t)16 << 20)

/* Each thread's buffer, freed when the thread ends. */
typedef struct scratch_buffer {
    uint8_t *bytes;
    size_t size;
} scratch_buffer;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *buffer)
{
    scratch_buffer *b = buffer;
    if (b != NULL)
        free(b->bytes);
    free(b);
}

static void scratch_init(void)
{
    (void)pthread_key_create(&scratch_key, scratch_free);
}

static uint8_t *scratch(size_t size)
{
    pthread_once(&scratch_once, scratch_init);
    scratch_buffer *b = pthread_getspecific(scratch_key);
    if (b == NULL) {
        if ((b = calloc(1, sizeof *b)) == NULL || pthread_setspecific(scratch_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (size > b->size) {
        free(b->bytes);
        b->bytes = malloc(size ? size : 1);
        b->size = b->bytes ? size : 0;
    }
    return b->bytes;
}

static void scratch_trim(void)
{
    scratch_buffer *b = pthread_getspecific(scratch_key);
    if (b != NULL && b->size > SCRATCH_KEEP_BYTES) {
        free(b->bytes);
        b->bytes = NULL;
        b->size = 0;
    }
}

struct stored_at {
    zm_source *source;
    const zm_array *array;
    uint64_t address;
};

static int read_stored(void *context, size_t offset, void *buffer, size_t size, zm_err *err)
{
    struct stored_at *at = context;
    return zm__read_exact(at->source, at->address + offset, buffer, size, at->array, err);
}

/* Decodes the first `values` values of a 1-d chunk stored by deflate alone,
 * reading only as much of it as they need. 1 if done, 0 if the chunk is not
 * stored that way (decode it whole), or a negative errno. */
static int decode_prefix(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                         uint64_t values, zm_err *err)
{
    uint64_t address = array->chunk_address[chunk];
    if (address == ZM__CHUNK_ABSENT || array->filter_count != 1 ||
        array->filters[0].id != ZM__FILTER_DEFLATE || array->chunk_filter_mask[chunk] != 0)
        return 0;
    size_t size = array->info.dtype.size;
    struct stored_at at = {source, array, address};
    size_t read_bytes = 0;
    zm_err inner;
    zm_err_clear(&inner);
    int rc = zm__inflate_prefix(read_stored, &at, array->chunk_stored_size[chunk],
                                chunk_bytes(array), raw, values * size, &read_bytes, &inner);
    if (rc != 0)
        return zm_err_set(err, rc, "%s: chunk %llu: %s", array->file_path, (unsigned long long)chunk,
                          inner.reason);
    if (array->info.big_endian)
        swap_bytes(raw, values, size);
    zm__count_chunk(source);
    return 1;
}

/* The first range that ends after row. */
static size_t first_range_after(const struct gather *g, uint64_t row)
{
    size_t lo = 0, hi = g->range_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->ranges[mid].end <= row)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Copies one chunk's part of the kept rows into the output (rows first). */
static int gather_chunk_part(void *context, size_t task)
{
    struct gather *g = context;
    zm_array *array = g->array;
    uint64_t chunk = g->tasks[task];
    unsigned rank = array->storage_rank;
    if (rank == 1) {
        /* A whole chunk inside one range of a 1-d array (a walk, a long run
         * of entries): decode it straight into its place, bypassing the
         * cache: nobody reads the same entries twice in a row. */
        uint64_t origin = chunk * array->chunk[0];
        if (origin + array->chunk[0] <= array->storage_shape[0]) {
            size_t r = first_range_after(g, origin);
            if (r < g->range_count && g->ranges[r].start <= origin &&
                g->ranges[r].end >= origin + array->chunk[0])
                return decode_chunk(g->source, array, chunk,
                                    g->out + (g->out_row[r] + origin - g->ranges[r].start) *
                                                 array->info.dtype.size,
                                    1, &g->errors[task]);
        }
    }
    zm_cache_ref ref;
    memset(&ref, 0, sizeof ref);
    int rc;
    int check_pieces = 0, scratched = 0;
    if (g->one_pass && rank == 1) {
        uint8_t *buffer = scratch(chunk_bytes(array));
        if (buffer == NULL)
            return zm_err_set(&g->errors[task], -ENOMEM, "%s: out of memory for a chunk",
                              array->file_path);
        /* The values of this chunk the pass takes lie before `needed`. */
        uint64_t origin0 = chunk * array->chunk[0], needed = 0;
        for (size_t r = first_range_after(g, origin0);
             r < g->range_count && g->ranges[r].start < origin0 + array->chunk[0]; r++) {
            uint64_t end = g->ranges[r].end < origin0 + array->chunk[0] ? g->ranges[r].end
                                                                        : origin0 + array->chunk[0];
            needed = end - origin0;
        }
        /* Inflating a part of a chunk with ISA-L costs what libdeflate
         * takes for all of it when the part is two thirds (single-cell
         * values: 1.7 and 2.6 GB/s; indices 0.8 and 1.0 GB/s): up to that,
         * the part alone is read and inflated. */
        rc = needed * 3 <= array->chunk[0] * 2
                 ? decode_prefix(g->source, array, chunk, buffer, needed, &g->errors[task])
                 : 0;
        if (rc == 0)
            rc = decode_chunk(g->source, array, chunk, buffer, 0, &g->errors[task]);
        else if (rc == 1)
            rc = 0;
        if (rc != 0)
            return rc;
        ref.bytes = buffer;
        scratched = 1;
        check_pieces = checked_at_decode(array);
    } else {
        rc = get_chunk(g->source, array, chunk, &ref, &g->errors[task]);
        if (rc != 0)
            return rc;
    }
    size_t size = array->info.dtype.size;
    uint64_t origin[ZM_MAX_RANK], valid[ZM_MAX_RANK], rest = chunk;
    for (int d = (int)rank - 1; d >= 0; d--) {
        origin[d] = (rest % array->grid[d]) * array->chunk[d];
        rest /= array->grid[d];
        uint64_t left = array->storage_shape[d] - origin[d];
        valid[d] = left < array->chunk[d] ? left : array->chunk[d];
    }
    uint64_t row_bytes = zm_array_row_bytes(array);

    if (!array->info.transposed) {
        /* Rows along storage dimension 0. Within a row, copy runs along the
         * last dimension, walking the dimensions between. */
        uint64_t chunk_row_values = 1, inner = 1;
        for (unsigned d = 1; d < rank; d++)
            chunk_row_values *= array->chunk[d];
        for (unsigned d = 1; d + 1 < rank; d++)
            inner *= valid[d];
        uint64_t run = rank >= 2 ? valid[rank - 1] * size : size;
        for (size_t r = first_range_after(g, origin[0]);
             r < g->range_count && g->ranges[r].start < origin[0] + valid[0]; r++) {
            uint64_t from = g->ranges[r].start > origin[0] ? g->ranges[r].start : origin[0];
            uint64_t to = g->ranges[r].end < origin[0] + valid[0] ? g->ranges[r].end : origin[0] + valid[0];
            if (rank <= 1) {
                memcpy(g->out + (g->out_row[r] + from - g->ranges[r].start) * size,
                       ref.bytes + (from - origin[0]) * size, (to - from) * size);
                if (check_pieces &&
                    (rc = check_values(array, ref.bytes + (from - origin[0]) * size, to - from,
                                       &g->errors[task])) != 0)
                    return rc;
                continue;
            }
            for (uint64_t row = from; row < to; row++) {
                const uint8_t *src_row = ref.bytes + (row - origin[0]) * chunk_row_values * size;
                uint8_t *dst_row = g->out + (g->out_row[r] + row - g->ranges[r].start) * row_bytes;
                for (uint64_t i = 0; i < inner; i++) {
                    /* Index i over dimensions 1 .. rank−2 of the valid block. */
                    uint64_t src = 0, dst = 0, rem = i;
                    uint64_t src_stride = array->chunk[rank - 1], dst_stride = array->storage_shape[rank - 1];
                    for (int d = (int)rank - 2; d >= 1; d--) {
                        uint64_t idx = rem % valid[d];
                        rem /= valid[d];
                        src += idx * src_stride;
                        dst += (origin[d] + idx) * dst_stride;
                        src_stride *= array->chunk[d];
                        dst_stride *= array->storage_shape[d];
                    }
                    dst += origin[rank - 1];
                    memcpy(dst_row + dst * size, src_row + src * size, run);
                }
            }
        }
    } else {
        /* Loom: storage genes × cells, rows are cells (storage dimension 1). */
        uint64_t genes = array->storage_shape[0];
        for (size_t r = first_range_after(g, origin[1]);
             r < g->range_count && g->ranges[r].start < origin[1] + valid[1]; r++) {
            uint64_t from = g->ranges[r].start > origin[1] ? g->ranges[r].start : origin[1];
            uint64_t to = g->ranges[r].end < origin[1] + valid[1] ? g->ranges[r].end : origin[1] + valid[1];
            for (uint64_t cell = from; cell < to; cell++) {
                uint8_t *dst = g->out + (g->out_row[r] + cell - g->ranges[r].start) * genes * size;
                const uint8_t *src = ref.bytes + (cell - origin[1]) * size;
                for (uint64_t gene = 0; gene < valid[0]; gene++)
                    memcpy(dst + (origin[0] + gene) * size, src + gene * array->chunk[1] * size, size);
            }
        }
    }
    if (scratched)
        scratch_trim();
    else
        zm_cache_release(g->source->cache, &ref);
    return 0;
}

/* One task of a gather, counted in its pass. */
static int gather_chunk(void *context, size_t task)
{
    struct gather *g = context;
    int rc = gather_chunk_part(context, task);
    zm__pass_step(g->pass);
    return rc;
}

static int gather_chunked(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                          const uint64_t *out_row, uint8_t *out, unsigned flags, zm_err *err)
{
    if (array->chunk_count == 0)
        return 0; /* a dimension of length 0: no value to read */
    int rc;
    unsigned row_dim = array->info.transposed ? 1 : 0;
    uint64_t step = array->chunk[row_dim];
    /* Chunks per position along the row dimension, and their stride in the
     * row-major chunk numbering. */
    uint64_t rest = array->chunk_count / array->grid[row_dim];
    uint64_t stride = 1;
    for (unsigned d = row_dim + 1; d < array->storage_rank; d++)
        stride *= array->grid[d];

    /* Chunk positions along the rows that hold a kept row, each once. */
    uint64_t *positions = NULL;
    size_t position_count = 0, capacity = 0;
    for (size_t r = 0; r < count; r++) {
        if (ranges[r].end <= ranges[r].start)
            continue;
        uint64_t first = ranges[r].start / step, last = (ranges[r].end - 1) / step;
        for (uint64_t p = first; p <= last; p++) {
            if (position_count > 0 && positions[position_count - 1] >= p)
                continue;
            if (position_count == capacity) {
                capacity = capacity ? capacity * 2 : 64;
                uint64_t *grown = realloc(positions, capacity * sizeof *grown);
                if (grown == NULL) {
                    free(positions);
                    return zm_err_set(err, -ENOMEM, "out of memory planning a read");
                }
                positions = grown;
            }
            positions[position_count++] = p;
        }
    }
    size_t task_count = position_count * rest;
    struct gather g = {source, array, ranges, count, out_row, out, NULL, rest, NULL, 0, NULL};
    g.one_pass = (flags & ZM_READ_PASS) || position_count * rest >= ONE_PASS_CHUNKS;
    g.tasks = malloc((task_count ? task_count : 1) * sizeof *g.tasks);
    g.errors = calloc(task_count ? task_count : 1, sizeof *g.errors);
    if (g.tasks == NULL || g.errors == NULL) {
        free(positions);
        free(g.tasks);
        free(g.errors);
        return zm_err_set(err, -ENOMEM, "out of memory planning a read of %zu chunks", task_count);
    }
    /* Enumerate the chunks: every combination of the other dimensions'
     * chunk coordinates with each needed row position. */
    size_t t = 0;
    for (size_t p = 0; p < position_count; p++) {
        for (uint64_t o = 0; o < rest; o++) {
            /* o enumerates the other dimensions; split it around row_dim. */
            uint64_t low = o % stride, high = o / stride;
            g.tasks[t++] = (high * array->grid[row_dim] + positions[p]) * stride + low;
        }
    }
    free(positions);
    rc = resolve_chunks(source, array, g.tasks, task_count, err);
    if (rc != 0) {
        free(g.tasks);
        free(g.errors);
        return rc;
    }
    if (g.one_pass)
        g.pass = zm__pass_begin(source, array, "chunks", task_count);
    rc = zm__pool_for(source->pool, task_count, gather_chunk, &g);
    zm__pass_end(source, g.pass);
    if (rc != 0) {
        for (size_t i = 0; i < task_count; i++)
            if (g.errors[i].code != 0) {
                if (err)
                    *err = g.errors[i];
                rc = g.errors[i].code;
                break;
            }
    }
    free(g.tasks);
    free(g.errors);
    return rc;
}

/* Contiguous values: one pread per run of kept rows, runs closer than this
 * merged (a read costs about as much as this many bytes copied), pieces of
 * at most PIECE_BYTES read in parallel. */
#define MERGE_GAP_BYTES 8192
#define PIECE_BYTES (4u << 20)

struct piece {
    size_t first, last;     /* ranges first .. last − 1 */
    uint64_t from, to;      /* rows, or within one range a part of it */
};

struct contiguous {
    zm_source *source;
    zm_array *array;
    const zm_range *ranges;
    const uint64_t *out_row;
    uint8_t *out;
    struct piece *pieces;
    zm_err *errors;
    struct zm__pass *pass; /* counted while it runs (a pass) */
};

static int read_piece_counted(void *context, size_t index);

static int read_piece(void *context, size_t index)
{
    struct contiguous *c = context;
    int rc = read_piece_counted(context, index);
    zm__pass_step(c->pass);
    return rc;
}

static int read_piece_counted(void *context, size_t index)
{
    struct contiguous *c = context;
    const struct piece *p = &c->pieces[index];
    zm_array *array = c->array;
    uint64_t row_bytes = zm_array_row_bytes(array);
    size_t size = array->info.dtype.size;
    uint64_t base = array->contiguous_offset;
    int rc;
    if (p->last == p->first + 1) {
        /* Part of one range: straight into its place. */
        const zm_range *r = &c->ranges[p->first];
        uint8_t *dst = c->out + (c->out_row[p->first] + p->from - r->start) * row_bytes;
        rc = zm__read_exact(c->source, base + p->from * row_bytes, dst, (p->to - p->from) * row_bytes,
                        array, &c->errors[index]);
        if (rc == 0 && array->info.big_endian)
            swap_bytes(dst, (p->to - p->from) * row_bytes / size, size);
        return rc;
    }
    uint8_t *span = malloc((p->to - p->from) * row_bytes);
    rc = span ? zm__read_exact(c->source, base + p->from * row_bytes, span, (p->to - p->from) * row_bytes,
                           array, &c->errors[index])
              : zm_err_set(&c->errors[index], -ENOMEM, "out of memory reading %s", array->file_path);
    for (size_t i = p->first; rc == 0 && i < p->last; i++) {
        uint8_t *dst = c->out + c->out_row[i] * row_bytes;
        uint64_t bytes = (c->ranges[i].end - c->ranges[i].start) * row_bytes;
        memcpy(dst, span + (c->ranges[i].start - p->from) * row_bytes, bytes);
        if (array->info.big_endian)
            swap_bytes(dst, bytes / size, size);
    }
    free(span);
    return rc;
}

static int gather_contiguous(zm_source *source, zm_array *array, const zm_range *ranges,
                             size_t count, const uint64_t *out_row, uint8_t *out, unsigned flags,
                             zm_err *err)
{
    uint64_t row_bytes = zm_array_row_bytes(array);
    size_t size = array->info.dtype.size;
    if (array->contiguous_offset == UINT64_MAX) {
        for (size_t r = 0; r < count; r++)
            fill_values(out + out_row[r] * row_bytes,
                        (ranges[r].end - ranges[r].start) * row_bytes / size, array);
        return 0;
    }
    if (row_bytes == 0)
        return 0;
    /* Plan the pieces. */
    size_t capacity = 64, n = 0;
    struct piece *pieces = malloc(capacity * sizeof *pieces);
    uint64_t piece_rows = PIECE_BYTES / row_bytes ? PIECE_BYTES / row_bytes : 1;
    for (size_t r = 0; pieces && r < count;) {
        if (ranges[r].end == ranges[r].start) {
            r++;
            continue;
        }
        size_t s = r + 1;
        while (s < count && (ranges[s].start - ranges[s - 1].end) * row_bytes < MERGE_GAP_BYTES &&
               (ranges[s].end - ranges[r].start) <= piece_rows)
            s++;
        uint64_t from = ranges[r].start, to = ranges[s - 1].end;
        /* A single long range is cut into pieces read in parallel. */
        uint64_t step = s == r + 1 ? piece_rows : to - from;
        for (uint64_t at = from; at < to; at += step) {
            if (n == capacity) {
                capacity *= 2;
                struct piece *grown = realloc(pieces, capacity * sizeof *grown);
                if (grown == NULL) {
                    free(pieces);
                    pieces = NULL;
                    break;
                }
                pieces = grown;
            }
            pieces[n++] = (struct piece){r, s, at, at + step < to ? at + step : to};
        }
        r = s;
    }
    zm_err *errors = pieces ? calloc(n ? n : 1, sizeof *errors) : NULL;
    if (pieces == NULL || errors == NULL) {
        free(pieces);
        return zm_err_set(err, -ENOMEM, "out of memory planning a read of %s", array->file_path);
    }
    struct contiguous c = {source, array, ranges, out_row, out, pieces, errors, NULL};
    if (flags & ZM_READ_PASS)
        c.pass = zm__pass_begin(source, array, "pieces", n);
    int rc = zm__pool_for(n > 1 ? source->pool : NULL, n, read_piece, &c);
    zm__pass_end(source, c.pass);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            if (errors[i].code != 0) {
                if (err)
                    *err = errors[i];
                rc = errors[i].code;
                break;
            }
    free(errors);
    free(pieces);
    return rc;
}

static int check_ranges(const zm_array *array, const zm_range *ranges, size_t count, zm_err *err)
{
    uint64_t rows = row_count(array), previous = 0;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].start == ranges[i].end && ranges[i].end <= rows)
            continue; /* empty: reads nothing, wherever it is */
        if (ranges[i].start > ranges[i].end || ranges[i].end > rows || ranges[i].start < previous)
            return zm_err_set(err, -EINVAL,
                              "%s: rows [%llu, %llu) are out of order or past its %llu rows",
                              array->file_path, (unsigned long long)ranges[i].start,
                              (unsigned long long)ranges[i].end, (unsigned long long)rows);
        previous = ranges[i].end;
    }
    return 0;
}

/* Past this many pieces, HDF5-path reads take the whole span instead. */
#define MANY_RANGES 32


/* Reads ranges into out: one after another, or (dest not NULL) range i at
 * row dest[i]. */
static int read_ranges(zm_source *source, const zm_array *const_array, const zm_range *ranges,
                       size_t count, const uint64_t *dest, void *out, unsigned flags, zm_err *err)
{
    zm_array *array = (zm_array *)const_array;
    if (array->info.dtype.type_class == ZM_TYPE_STRING)
        return zm_err_set(err, -EINVAL, "%s holds strings: read it with zm_array_read_strings",
                          array->file_path);
    int rc = check_ranges(array, ranges, count, err);
    if (rc != 0)
        return rc;
    /* Empty ranges read nothing: leave them out (they may sit anywhere). */
    uint64_t *out_row = malloc((count ? count : 1) * sizeof *out_row);
    zm_range *kept = malloc((count ? count : 1) * sizeof *kept);
    if (out_row == NULL || kept == NULL) {
        free(out_row);
        free(kept);
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    }
    /* Ranges that follow one another in the source and in the output are
     * one (the rows of a walk's batch, each its own range, are mostly one
     * run: its chunks then decode straight into place). */
    uint64_t at = 0;
    size_t nonempty = 0;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].end == ranges[i].start)
            continue;
        uint64_t to = dest ? dest[i] : at;
        if (nonempty > 0 && kept[nonempty - 1].end == ranges[i].start &&
            out_row[nonempty - 1] + (kept[nonempty - 1].end - kept[nonempty - 1].start) == to)
            kept[nonempty - 1].end = ranges[i].end;
        else {
            out_row[nonempty] = to;
            kept[nonempty++] = ranges[i];
        }
        at += ranges[i].end - ranges[i].start;
    }
    ranges = kept;
    count = nonempty;
    uint64_t row_bytes = zm_array_row_bytes(array);
    uint8_t *packed = NULL; /* HDF5 reads ranges one after another: scattered after */
    if (dest != NULL && array->info.data_path == ZM_PATH_HDF5) {
        packed = malloc(at * row_bytes + 1);
        if (packed == NULL) {
            free(out_row);
            free(kept);
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
    }
    uint8_t *final_out = out;
    uint64_t *final_row = out_row;
    uint64_t *packed_row = NULL;
    if (packed != NULL) {
        packed_row = malloc((count ? count : 1) * sizeof *packed_row);
        if (packed_row == NULL) {
            free(packed);
            free(out_row);
            free(kept);
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
        uint64_t p = 0;
        for (size_t i = 0; i < count; i++) {
            packed_row[i] = p;
            p += ranges[i].end - ranges[i].start;
        }
        out = packed;
        out_row = packed_row;
    }
    switch (array->info.data_path) {
    case ZM_PATH_MEMORY:
        for (size_t i = 0; i < count; i++)
            memcpy((uint8_t *)out + out_row[i] * row_bytes,
                   (uint8_t *)array->memory + ranges[i].start * row_bytes,
                   (ranges[i].end - ranges[i].start) * row_bytes);
        break;
    case ZM_PATH_HDF5:
        if (count > MANY_RANGES) {
            /* As for strings: one read of the span, then the pieces. */
            zm_range span = {ranges[0].start, ranges[count - 1].end};
            uint8_t *all = malloc((span.end - span.start) * row_bytes + 1);
            rc = all ? zm__h5_read_ranges(source, array, &span, 1, all, err)
                     : zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
            for (size_t i = 0; rc == 0 && i < count; i++)
                memcpy((uint8_t *)out + out_row[i] * row_bytes, all + (ranges[i].start - span.start) * row_bytes,
                       (ranges[i].end - ranges[i].start) * row_bytes);
            free(all);
        } else {
            rc = zm__h5_read_ranges(source, array, ranges, count, out, err);
        }
        break;
    case ZM_PATH_DIRECT:
        if (array->info.layout == ZM_LAYOUT_CHUNKED)
            rc = gather_chunked(source, array, ranges, count, out_row, out, flags, err);
        else
            rc = gather_contiguous(source, array, ranges, count, out_row, out, flags, err);
        break;
    }
    if (packed != NULL) {
        for (size_t i = 0; rc == 0 && i < count; i++)
            memcpy(final_out + final_row[i] * row_bytes, packed + packed_row[i] * row_bytes,
                   (ranges[i].end - ranges[i].start) * row_bytes);
        free(packed);
        free(packed_row);
        out = final_out;
        out_row = final_row;
    }
    if (rc == 0 && array->check_values && !checked_at_decode(array)) {
        if (dest == NULL) {
            rc = check_values(array, out, at * row_bytes / array->info.dtype.size, err);
        } else {
            uint64_t per_row = row_bytes / array->info.dtype.size;
            for (size_t i = 0; rc == 0 && i < count; i++)
                rc = check_values(array, (uint8_t *)out + out_row[i] * row_bytes,
                                  (ranges[i].end - ranges[i].start) * per_row, err);
        }
    }
    free(out_row);
    free(kept);
    return rc;
}

int zm_array_read_rows(zm_source *source, const zm_array *array, uint64_t start, uint64_t count,
                       void *out, zm_err *err)
{
    return zm_array_read_rows_flags(source, array, start, count, out, 0, err);
}

int zm_array_read_rows_flags(zm_source *source, const zm_array *array, uint64_t start,
                             uint64_t count, void *out, unsigned flags, zm_err *err)
{
    zm_range range = {start, start + count};
    return read_ranges(source, array, &range, 1, NULL, out, flags, err);
}

/* Turns ascending rows into ranges of consecutive rows. */
static int rows_to_ranges(const zm_array *array, const uint64_t *rows, size_t count,
                          zm_range **ranges, size_t *range_count, zm_err *err)
{
    *ranges = malloc((count ? count : 1) * sizeof **ranges);
    if (*ranges == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (i > 0 && rows[i] <= rows[i - 1]) {
            free(*ranges);
            *ranges = NULL;
            return zm_err_set(err, -EINVAL, "%s: rows must ascend (%llu after %llu)",
                              array->file_path, (unsigned long long)rows[i],
                              (unsigned long long)rows[i - 1]);
        }
        if (n > 0 && (*ranges)[n - 1].end == rows[i])
            (*ranges)[n - 1].end++;
        else
            (*ranges)[n++] = (zm_range){rows[i], rows[i] + 1};
    }
    *range_count = n;
    return 0;
}

int zm_array_gather_rows(zm_source *source, const zm_array *array, const uint64_t *rows,
                         size_t count, void *out, zm_err *err)
{
    zm_range *ranges;
    size_t n;
    int rc = rows_to_ranges(array, rows, count, &ranges, &n, err);
    if (rc == 0)
        rc = read_ranges(source, array, ranges, n, NULL, out, 0, err);
    free(ranges);
    return rc;
}

int zm_array_scatter_rows(zm_source *source, const zm_array *array, const uint64_t *rows,
                          const uint64_t *out_rows, size_t count, void *out, unsigned flags,
                          zm_err *err)
{
    /* A range a row: read_ranges makes one of rows consecutive in the
     * source and in the output. */
    zm_range *ranges = malloc((count ? count : 1) * sizeof *ranges);
    if (ranges == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    int rc = 0;
    for (size_t i = 0; i < count; i++) {
        if (i > 0 && rows[i] <= rows[i - 1]) {
            rc = zm_err_set(err, -EINVAL, "%s: rows must ascend (%llu after %llu)",
                            array->file_path, (unsigned long long)rows[i],
                            (unsigned long long)rows[i - 1]);
            break;
        }
        ranges[i] = (zm_range){rows[i], rows[i] + 1};
    }
    if (rc == 0)
        rc = read_ranges(source, array, ranges, count, out_rows, out, flags, err);
    free(ranges);
    return rc;
}

int zm_array_gather_ranges(zm_source *source, const zm_array *array, const zm_range *ranges,
                           size_t count, void *out, zm_err *err)
{
    if (array->info.rank != 1)
        return zm_err_set(err, -EINVAL, "%s: ranges are read from 1-d arrays only",
                          array->file_path);
    return read_ranges(source, array, ranges, count, NULL, out, 0, err);
}

int zm_array_scatter_ranges(zm_source *source, const zm_array *array, const zm_range *ranges,
                            const uint64_t *out_at, size_t count, void *out, unsigned flags,
                            zm_err *err)
{
    if (array->info.rank != 1)
        return zm_err_set(err, -EINVAL, "%s: ranges are read from 1-d arrays only",
                          array->file_path);
    return read_ranges(source, array, ranges, count, out_at, out, flags, err);
}

/* The items of the given rows (per_row items each, in that order) of a
 * string set read before: *out holds count · per_row strings. */
static int strings_pick(const zm_strings *all, const uint64_t *rows, size_t count,
                        uint64_t per_row, zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += all->offsets[(rows[i] + 1) * per_row] - all->offsets[rows[i] * per_row];
    out->count = count * per_row;
    out->offsets = malloc((out->count + 1) * sizeof *out->offsets);
    out->bytes = malloc(total + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_strings_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory picking %zu strings", count);
    }
    uint64_t at = 0, item = 0;
    for (size_t i = 0; i < count; i++)
        for (uint64_t j = rows[i] * per_row; j < (rows[i] + 1) * per_row; j++) {
            uint64_t n = all->offsets[j + 1] - all->offsets[j];
            out->offsets[item++] = at;
            memcpy(out->bytes + at, all->bytes + all->offsets[j], n);
            at += n;
        }
    out->offsets[item] = at;
    out->bytes[at] = '\0';
    return 0;
}

/* Writes code point c as UTF-8 at out; returns the bytes written. */
static size_t put_utf8(char *out, uint32_t c)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* Replaces XML character references (&#233; &#xE9;) and the five XML
 * entities in every string, in place (each replacement is shorter): what
 * loompy does (html.unescape) for the strings it stored escaped. */
static void xml_unescape(zm_strings *s)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    uint64_t out = 0;
    for (size_t i = 0; i < s->count; i++) {
        uint64_t from = s->offsets[i], to = s->offsets[i + 1];
        s->offsets[i] = out;
        for (uint64_t j = from; j < to;) {
            char *p = s->bytes + j;
            if (*p == '&' && j + 1 < to) {
                size_t replaced = 0;
                if (p[1] == '#') {
                    int hex = j + 2 < to && (p[2] == 'x' || p[2] == 'X');
                    uint64_t k = j + 2 + (uint64_t)hex;
                    uint32_t c = 0;
                    int digits = 0;
                    while (k < to && digits < 8 &&
                           (hex ? strchr("0123456789abcdefABCDEF", s->bytes[k]) != NULL
                                : (s->bytes[k] >= '0' && s->bytes[k] <= '9')) && s->bytes[k]) {
                        char d = s->bytes[k];
                        c = c * (hex ? 16 : 10) +
                            (uint32_t)(d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
                        k++;
                        digits++;
                    }
                    if (digits > 0 && k < to && s->bytes[k] == ';' && c > 0 && c <= 0x10ffff &&
                        (c < 0xd800 || c > 0xdfff)) {
                        out += put_utf8(s->bytes + out, c);
                        j = k + 1;
                        continue;
                    }
                } else {
                    for (size_t e = 0; e < sizeof named / sizeof named[0] && !replaced; e++) {
                        size_t n = strlen(named[e].name);
                        if (j + 1 + n <= to && memcmp(p + 1, named[e].name, n) == 0) {
                            s->bytes[out++] = named[e].c;
                            j += 1 + n;
                            replaced = 1;
                        }
                    }
                    if (replaced)
                        continue;
                }
            }
            s->bytes[out++] = s->bytes[j++];
        }
    }
    s->offsets[s->count] = out;
    s->bytes[out] = '\0';
}

static int read_strings_raw(zm_source *source, zm_array *array, const uint64_t *rows,
                            size_t count, zm_strings *out, zm_err *err);

int zm_array_read_strings(zm_source *source, const zm_array *const_array, const uint64_t *rows,
                          size_t count, zm_strings *out, zm_err *err)
{
    zm_array *array = (zm_array *)const_array;
    int rc = read_strings_raw(source, array, rows, count, out, err);
    if (rc == 0 && array->xml_unescape)
        xml_unescape(out);
    return rc;
}

/* Rows of strings read through HDF5 at once, at most: variable-length
 * strings come back as one allocation each, so a whole column of an atlas
 * in one read would hold ten million of them at once. */
#define STRING_SPAN_ROWS ((uint64_t)1 << 18)

/* The strings of rows [span.start, span.end), read in spans of at most
 * STRING_SPAN_ROWS rows, appended one after another. */
static int read_span_strings(zm_source *source, zm_array *array, zm_range span, uint64_t per_row,
                             zm_strings *out, zm_err *err)
{
    if (span.end - span.start <= STRING_SPAN_ROWS)
        return zm__h5_read_strings(source, array, &span, 1, out, err);
    memset(out, 0, sizeof *out);
    uint64_t items = (span.end - span.start) * per_row;
    size_t capacity = 1 << 20, used = 0;
    out->offsets = malloc((items + 1) * sizeof *out->offsets);
    out->bytes = malloc(capacity);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_strings_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    }
    int rc = 0;
    for (uint64_t at = span.start; rc == 0 && at < span.end; at += STRING_SPAN_ROWS) {
        zm_range part = {at, span.end - at < STRING_SPAN_ROWS ? span.end : at + STRING_SPAN_ROWS};
        zm_strings piece;
        rc = zm__h5_read_strings(source, array, &part, 1, &piece, err);
        if (rc != 0)
            break;
        size_t n = piece.offsets[piece.count];
        if (used + n + 1 > capacity) {
            while (used + n + 1 > capacity)
                capacity *= 2;
            char *grown = realloc(out->bytes, capacity);
            if (grown == NULL) {
                zm_strings_free(&piece);
                rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
                break;
            }
            out->bytes = grown;
        }
        memcpy(out->bytes + used, piece.bytes, n);
        for (size_t i = 0; i < piece.count; i++)
            out->offsets[out->count + i] = used + piece.offsets[i];
        out->count += piece.count;
        used += n;
        zm_strings_free(&piece);
    }
    if (rc != 0) {
        zm_strings_free(out);
        return rc;
    }
    out->offsets[out->count] = used;
    out->bytes[used] = '\0';
    return 0;
}

static int read_strings_raw(zm_source *source, zm_array *array, const uint64_t *rows,
                            size_t count, zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    if (array->info.dtype.type_class != ZM_TYPE_STRING)
        return zm_err_set(err, -EINVAL, "%s does not hold strings", array->file_path);
    uint64_t per_row = 1;
    for (unsigned d = 1; d < array->info.rank; d++)
        per_row *= array->info.shape[d];
    if (array->info.data_path == ZM_PATH_MEMORY) {
        if (rows != NULL)
            return strings_pick(&array->memory_strings, rows, count, per_row, out, err);
        uint64_t all_rows = row_count(array);
        uint64_t *every = malloc((all_rows ? all_rows : 1) * sizeof *every);
        if (every == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        for (uint64_t i = 0; i < all_rows; i++)
            every[i] = i;
        int rc = strings_pick(&array->memory_strings, every, all_rows, per_row, out, err);
        free(every);
        return rc;
    }
    if (array->vlen_direct) {
        /* Rows ascending and inside the array: their ids are read as they are. */
        for (size_t i = 0; rows != NULL && i < count; i++)
            if (rows[i] >= row_count(array) || (i > 0 && rows[i] <= rows[i - 1]))
                return zm_err_set(err, -EINVAL, "%s: row %llu is out of order or past the end",
                                  array->file_path, (unsigned long long)rows[i]);
        int rc = zm__vlen_read(source, array, rows, rows ? count : row_count(array), out, err);
        if (rc != -EAGAIN)
            return rc;
        /* A string holds a NUL, where HDF5's reading ends it: as HDF5 reads. */
    }
    if (rows == NULL && array->storage_rank > 0)
        return read_span_strings(source, array, (zm_range){0, row_count(array)}, per_row, out, err);
    if (rows == NULL)
        return zm__h5_read_strings(source, array, NULL, 0, out, err);
    if (count > MANY_RANGES) {
        /* HDF5 builds a selection of many pieces slowly (about a tenth of a
         * millisecond a piece): read the span the rows lie in at once and
         * pick them, far cheaper for scattered rows. */
        zm_range span = {rows[0], rows[count - 1] + 1};
        zm_strings all;
        int rc = check_ranges(array, &span, 1, err);
        if (rc == 0)
            rc = read_span_strings(source, array, span, per_row, &all, err);
        if (rc != 0)
            return rc;
        uint64_t *shifted = malloc(count * sizeof *shifted);
        if (shifted == NULL) {
            zm_strings_free(&all);
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
        for (size_t i = 0; i < count; i++)
            shifted[i] = rows[i] - span.start;
        rc = strings_pick(&all, shifted, count, per_row, out, err);
        free(shifted);
        zm_strings_free(&all);
        return rc;
    }
    zm_range *ranges;
    size_t n;
    int rc = rows_to_ranges(array, rows, count, &ranges, &n, err);
    if (rc == 0)
        rc = check_ranges(array, ranges, n, err);
    if (rc == 0)
        rc = zm__h5_read_strings(source, array, ranges, n, out, err);
    free(ranges);
    return rc;
}
