/* The direct path over chunked arrays: the chunk index made known (btree.c,
 * H5Dchunk_iter or HDF5's lookups), each chunk loaded once (pread, decoded
 * on the pool, kept in the shared cache), and gathers of rows and ranges
 * over the chunks. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/source_internal.h"

/* ---- The chunk index ------------------------------------------------------------ */

/* Makes sure the given chunks' addresses are known: the index's storage is
 * allocated once, and each chunk looked up the first time it is needed. */
static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int zm__resolve_chunks(zm_source *source, zm_array *array, const uint64_t *chunks, size_t count,
                       zm_err *err)
{
    if (array->zarr != NULL)
        return 0; /* a store's chunks are found as they are read (zarr_array.c) */
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

/* A chunk just decoded: its values checked (check: all of it is used, or
 * it is kept for later uses; otherwise the caller checks what it takes),
 * and counted. */
static int checked_and_counted(zm_source *source, zm_array *array, uint64_t chunk,
                               const uint8_t *raw, int check, zm_err *err)
{
    if (check && zm__checked_at_decode(array)) {
        uint64_t origin = chunk * array->chunk[0];
        uint64_t valid = array->storage_shape[0] - origin;
        int rc = zm__check_values(array, raw, valid < array->chunk[0] ? valid : array->chunk[0], err);
        if (rc != 0)
            return rc;
    }
    zm__count_chunk(source);
    return 0;
}

/* Reads and decodes one chunk into raw (chunk_bytes of it), native order. */
/* check: whether to check the values of the whole chunk (all of it is used,
 * or it is kept for later uses); otherwise the caller checks what it takes. */
static int decode_chunk(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                        int check, zm_err *err)
{
    uint64_t raw_size = chunk_bytes(array);
    int rc = 0;
    if (array->zarr != NULL) {
        if ((rc = zm__zarr_chunk(source, array, chunk, raw, raw_size, err)) != 0)
            return rc;
        return checked_and_counted(source, array, chunk, raw, check, err);
    }
    uint64_t address = array->chunk_address[chunk];
    uint32_t stored = array->chunk_stored_size[chunk];
    if (address == ZM__CHUNK_ABSENT) {
        /* Never written: the fill value. */
        zm__fill_values(raw, raw_size / array->info.dtype.size, array);
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
        zm__swap_bytes(raw, raw_size / array->info.dtype.size, array->info.dtype.size);
    return checked_and_counted(source, array, chunk, raw, check, err);
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

static uint64_t chunk_key(const zm_array *array, uint64_t chunk)
{
    struct {
        uint64_t serial, chunk;
    } key_bytes = {array->serial, chunk};
    return zm_cache_key(&key_bytes, sizeof key_bytes);
}

static int get_chunk(zm_source *source, zm_array *array, uint64_t chunk, zm_cache_ref *ref,
                     zm_err *err)
{
    struct chunk_load context = {source, array, chunk};
    return zm_cache_get(source->cache, chunk_key(array, chunk), load_chunk, &context, ref, err);
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
    if (array->zarr != NULL)
        return 0; /* decoded whole (zarr_array.c) */
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
        zm__swap_bytes(raw, values, size);
    zm__count_chunk(source);
    return 1;
}

/* The first `rows` rows (along storage dimension 0) of an unfiltered chunk
 * read into raw, as decode_prefix does for a deflated one: 1 when read, 0
 * when the whole chunk is to be read instead (never written: the fill
 * value), else -errno. */
static int read_prefix(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                       uint64_t rows, zm_err *err)
{
    uint64_t address = array->chunk_address[chunk];
    if (address == ZM__CHUNK_ABSENT)
        return 0;
    uint64_t raw_size = chunk_bytes(array), row_bytes = raw_size / array->chunk[0];
    if (array->chunk_stored_size[chunk] != raw_size)
        return zm_err_set(err, -EIO, "%s: chunk %llu holds %u bytes, expected %llu",
                          array->file_path, (unsigned long long)chunk,
                          array->chunk_stored_size[chunk], (unsigned long long)raw_size);
    int rc = zm__read_exact(source, address, raw, rows * row_bytes, array, err);
    if (rc != 0)
        return rc;
    if (array->info.big_endian)
        zm__swap_bytes(raw, rows * row_bytes / array->info.dtype.size, array->info.dtype.size);
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
    /* A pass decodes its chunks itself, but one the cache holds already
     * (a view's layout kept it: ZM_READ_KEEP) is not decoded again. */
    int kept = g->one_pass && rank == 1 &&
               zm_cache_peek(g->source->cache, chunk_key(array, chunk), &ref);
    /* An unfiltered chunk of an HDF5 file: read where it lies, the part the
     * gather takes, and never kept in the decoded-chunk cache, which would
     * only copy what the page cache holds. */
    int as_stored = zm__chunks_as_stored(array);
    if (kept) {
        /* ref holds it: copied out below, as from any cached chunk. */
    } else if ((g->one_pass && rank == 1) || as_stored) {
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
        /* A zstd stream stops where asked, its cost the part's share: a
         * store's chunk is decoded only as far as the pass needs. */
        if (as_stored)
            rc = rank == 1 && needed < array->chunk[0] /* `needed` counts rank-1 rows */
                     ? read_prefix(g->source, array, chunk, buffer, needed, &g->errors[task])
                     : 0;
        else if (array->zarr != NULL)
            rc = needed < array->chunk[0]
                     ? zm__zarr_chunk_prefix(g->source, array, chunk, buffer, chunk_bytes(array),
                                             needed, &g->errors[task])
                                          : 0;
        else
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
        check_pieces = zm__checked_at_decode(array);
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
                    (rc = zm__check_values(array, ref.bytes + (from - origin[0]) * size, to - from,
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

/* The chunk positions along the rows (step rows each) that hold a row of
 * the ranges (ascending), each once, into a list the caller frees. */
int zm__chunk_positions(const zm_array *array, const zm_range *ranges, size_t count,
                        uint64_t step, uint64_t **out, size_t *out_count, zm_err *err)
{
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
                    return zm_err_set(err, -ENOMEM, "out of memory planning a read of %s",
                                      array->file_path);
                }
                positions = grown;
            }
            positions[position_count++] = p;
        }
    }
    *out = positions;
    *out_count = position_count;
    return 0;
}

int zm__gather_chunked(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                       const uint64_t *out_row, uint8_t *out, unsigned flags, zm_err *err)
{
    if (array->chunk_count == 0)
        return 0; /* a dimension of length 0: no value to read */
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
    size_t position_count = 0;
    int rc = zm__chunk_positions(array, ranges, count, step, &positions, &position_count, err);
    if (rc != 0)
        return rc;
    size_t task_count = position_count * rest;
    struct gather g = {source, array, ranges, count, out_row, out, NULL, rest, NULL, 0, NULL};
    g.one_pass = (flags & ZM_READ_PASS) ||
                 (!(flags & ZM_READ_KEEP) && position_count * rest >= ONE_PASS_CHUNKS);
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
    rc = zm__resolve_chunks(source, array, g.tasks, task_count, err);
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
