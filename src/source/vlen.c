/* Variable-length strings read without HDF5.
 *
 * HDF5 stores a variable-length string as a heap id in the dataset (its
 * length in bytes, the address of a global heap collection, the object's
 * index in it) and its bytes as an object of that collection. HDF5 reads
 * them one by one under its global lock (a column of ten million obs names
 * took 2.7 s on one core). Here the ids are pread from the dataset and the
 * collections from the file, in the pool: a task takes a block of rows,
 * keeps the few collections its rows lie in (strings written in order lie
 * in collections in order), and copies each string to its place.
 *
 * Collection layout (HDF5 file format, "Global Heap"): "GCOL", version 1,
 * 3 reserved bytes, the collection's size (sizeof_size bytes, the header
 * included); then objects, each an index (u16; 0 is the free space that
 * ends the list), a reference count (u16), 4 reserved bytes, the data's
 * size (sizeof_size bytes) and the data, padded to a multiple of 8. All
 * numbers little-endian. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "source_internal.h"

/* Rows a task takes. */
#define BLOCK_ROWS ((size_t)1 << 16)
/* Collections a task keeps at once (direct-mapped by a hash of the
 * address: the top four bits of a 64-bit multiply, so exactly 16). */
#define KEPT 16
/* Rows of one pread of heap ids: runs of rows closer than this are read
 * as one. */
#define ID_GAP_ROWS 64
/* A collection larger than this is taken for damage. */
#define MAX_COLLECTION ((uint64_t)1 << 30)


struct collection {
    uint64_t address; /* 0: nothing kept (address 0 is the superblock) */
    uint8_t *bytes;
    size_t capacity;
    uint64_t size;
    uint64_t *at;     /* by object index: where its data starts (0: no object) */
    uint64_t *length; /* its data's size */
    uint32_t objects; /* the tables' length: highest index + 1 */
    uint32_t table_capacity;
};

/* Reading every string of an array: the collections, written one after
 * another, are read in windows of this size (a pread a collection of a few
 * KiB each was most of the time of ten million obs names). */
#define WINDOW ((uint64_t)1 << 20)

struct heap {
    zm_source *source;
    zm_array *array;
    struct collection kept[KEPT];
    int windowed;        /* every row is read: collections come by windows */
    uint8_t *window;
    uint64_t window_at;  /* the window's file offset */
    uint64_t window_size;
};

static void heap_free(struct heap *h)
{
    free(h->window);
    for (int i = 0; i < KEPT; i++) {
        free(h->kept[i].bytes);
        free(h->kept[i].at);
        free(h->kept[i].length);
    }
}

static int damaged(const zm_array *array, uint64_t address, const char *what, zm_err *err)
{
    return zm_err_set(err, -EIO, "%s: the global heap collection at %" PRIu64 " %s (corrupt file?)",
                      array->file_path, address, what);
}

/* size bytes at offset of the file: from the window when windowed (a new
 * window read where it does not hold them), else one pread. */
static int heap_read(struct heap *h, uint64_t offset, uint8_t *out, uint64_t size, zm_err *err)
{
    if (!h->windowed || size > WINDOW)
        return zm__read_exact(h->source, offset, out, size, h->array, err);
    if (h->window == NULL || offset < h->window_at ||
        offset + size > h->window_at + h->window_size) {
        uint64_t file_size = (uint64_t)zm_source_get_identity(h->source)->size;
        uint64_t take = file_size - offset < WINDOW ? file_size - offset : WINDOW;
        if (h->window == NULL && (h->window = malloc(WINDOW)) == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", h->array->file_path);
        h->window_size = 0;
        int rc = zm__read_exact(h->source, offset, h->window, take < size ? size : take, h->array,
                                err);
        if (rc != 0)
            return rc;
        h->window_at = offset;
        h->window_size = take < size ? size : take;
    }
    memcpy(out, h->window + (offset - h->window_at), size);
    return 0;
}

/* Reads and indexes the collection at a (relative) address into c. */
static int load(struct heap *h, struct collection *c, uint64_t address, zm_err *err)
{
    const zm_array *array = h->array;
    unsigned ss = array->sizeof_size;
    uint64_t offset = h->array->base_address + address;
    uint8_t header[16];
    c->address = 0;
    uint64_t file_size = (uint64_t)zm_source_get_identity(h->source)->size;
    if (offset > file_size || file_size - offset < 8 + ss)
        return damaged(array, address, "has an impossible size", err);
    int rc = heap_read(h, offset, header, 8 + ss, err);
    if (rc != 0)
        return rc;
    if (memcmp(header, "GCOL", 4) != 0 || header[4] != 1)
        return damaged(array, address, "has no GCOL signature of version 1", err);
    uint64_t size = zm__le(header + 8, ss);
    if (size < 8 + ss || size > MAX_COLLECTION || offset > file_size || size > file_size - offset)
        return damaged(array, address, "has an impossible size", err);
    if (size > c->capacity) {
        uint8_t *grown = realloc(c->bytes, size);
        if (grown == NULL)
            return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        c->bytes = grown;
        c->capacity = size;
    }
    rc = heap_read(h, offset, c->bytes, size, err);
    if (rc != 0)
        return rc;
    c->size = size;
    c->objects = 0;
    uint64_t object_header = 8 + ss;
    for (uint64_t at = 8 + ss; at + object_header <= size;) {
        unsigned index = (unsigned)zm__le(c->bytes + at, 2);
        if (index == 0)
            break; /* free space: the end */
        uint64_t length = zm__le(c->bytes + at + 8, ss);
        uint64_t data = at + object_header;
        if (length > size - data)
            return damaged(array, address, "holds an object past its end", err);
        if (index >= c->table_capacity) {
            uint32_t capacity = c->table_capacity ? c->table_capacity : 256;
            while (capacity <= index)
                capacity *= 2;
            uint64_t *a = realloc(c->at, capacity * sizeof *a);
            if (a != NULL)
                c->at = a;
            uint64_t *l = a ? realloc(c->length, capacity * sizeof *l) : NULL;
            if (l != NULL)
                c->length = l;
            if (a == NULL || l == NULL)
                return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
            c->table_capacity = capacity;
        }
        while (c->objects <= index) {
            c->at[c->objects] = 0;
            c->length[c->objects++] = 0;
        }
        c->at[index] = data;
        c->length[index] = length;
        at = data + ((length + 7) & ~(uint64_t)7);
    }
    c->address = address;
    return 0;
}

/* The bytes of object `index` of the collection at address, at least
 * length of them. */
static int object(struct heap *h, uint64_t address, uint64_t index, uint64_t length,
                  const uint8_t **bytes, zm_err *err)
{
    /* Slots by a hash of the address: collections of 64 KiB, at multiples
     * of it, all fell in one slot of (address >> 12) % KEPT, and rows that
     * went back to an earlier collection (HDF5 fills later strings into
     * collections with room) loaded it again each time. */
    struct collection *c = &h->kept[(address * UINT64_C(0x9E3779B97F4A7C15)) >> 60];
    if (c->address != address) {
        int rc = load(h, c, address, err);
        if (rc != 0)
            return rc;
    }
    if (index >= c->objects || c->at[index] == 0)
        return damaged(h->array, address, "lacks an object a string names", err);
    if (c->length[index] < length)
        return damaged(h->array, address, "holds a string shorter than its id says", err);
    *bytes = c->bytes + c->at[index];
    return 0;
}

struct vlen_read {
    zm_source *source;
    zm_array *array;
    const uint64_t *rows; /* NULL: rows 0 .. count − 1 */
    size_t count;
    size_t blocks;
    uint64_t *block_bytes; /* pass 1: the bytes of each block's strings; then
                            * where each block's strings start */
    zm_strings *out;
    _Atomic int nul;       /* pass 2: a string held a NUL */
    zm_err *errors;        /* one a block */
    struct zm__pass *pass;
    int filling;           /* 0: pass 1 (lengths), 1: pass 2 (bytes) */
};

static uint64_t row_of(const struct vlen_read *r, size_t i)
{
    return r->rows ? r->rows[i] : i;
}

/* One task: a block of rows, in runs of heap ids read at once. */
static int vlen_block(void *context, size_t task)
{
    struct vlen_read *r = context;
    zm_array *array = r->array;
    zm_err *err = &r->errors[task];
    size_t first = task * BLOCK_ROWS, last = first + BLOCK_ROWS < r->count ? first + BLOCK_ROWS : r->count;
    unsigned sa = array->sizeof_addr;
    size_t id_size = 4 + sa + 4;
    struct heap heap = {r->source, array, {{0}}, r->rows == NULL, NULL, 0, 0};
    uint8_t *ids = NULL;
    size_t ids_capacity = 0;
    uint64_t total = 0;
    int rc = 0;
    if (r->filling)
        for (size_t k = first; k < last; k++)
            r->out->offsets[k] += r->block_bytes[task];
    for (size_t i = first; rc == 0 && i < last;) {
        /* A run of rows whose ids are read at once. */
        size_t j = i + 1;
        while (j < last && row_of(r, j) - row_of(r, j - 1) <= ID_GAP_ROWS &&
               row_of(r, j) - row_of(r, i) < BLOCK_ROWS)
            j++;
        uint64_t from = row_of(r, i), span = row_of(r, j - 1) - from + 1;
        if (span * id_size > ids_capacity) {
            uint8_t *grown = realloc(ids, span * id_size);
            if (grown == NULL) {
                rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
                break;
            }
            ids = grown;
            ids_capacity = span * id_size;
        }
        rc = zm__read_exact(r->source, array->contiguous_offset + from * id_size, ids, span * id_size,
                            array, err);
        for (size_t k = i; rc == 0 && k < j; k++) {
            const uint8_t *id = ids + (row_of(r, k) - from) * id_size;
            uint64_t length = zm__le(id, 4), address = zm__le(id + 4, sa), index = zm__le(id + 4 + sa, 4);
            if (!r->filling) { /* offsets within the block, for now */
                r->out->offsets[k] = total;
                total += length;
                continue;
            }
            if (length == 0)
                continue;
            if (address == 0 || (sa < 8 ? address >> (8 * sa) : 0) != 0 ||
                address == (sa == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * sa)) - 1)) {
                rc = zm_err_set(err, -EIO, "%s: row %" PRIu64 ": its string of %" PRIu64
                                " bytes has no heap address (corrupt file?)",
                                array->file_path, row_of(r, k), length);
                break;
            }
            const uint8_t *bytes = NULL;
            rc = object(&heap, address, index, length, &bytes, err);
            if (rc != 0)
                break;
            if (memchr(bytes, '\0', length) != NULL) {
                r->nul = 1;
                rc = -EAGAIN;
                break;
            }
            memcpy(r->out->bytes + r->out->offsets[k], bytes, length);
        }
        i = j;
    }
    if (!r->filling)
        r->block_bytes[task] = total;
    free(ids);
    heap_free(&heap);
    if (r->filling)
        zm__pass_step(r->pass);
    return rc;
}

/* The pass and its error: the first block's that failed. */
static int run(struct vlen_read *r, zm_err *err)
{
    int rc = zm__pool_for(r->source->pool, r->blocks, vlen_block, r);
    if (rc == 0)
        return 0;
    if (r->nul)
        return -EAGAIN;
    for (size_t b = 0; b < r->blocks; b++)
        if (r->errors[b].code != 0) {
            if (err)
                *err = r->errors[b];
            return r->errors[b].code;
        }
    return rc;
}

int zm__vlen_read(zm_source *source, zm_array *array, const uint64_t *rows, size_t count,
                  zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    struct vlen_read r = {source, array, rows, count, (count + BLOCK_ROWS - 1) / BLOCK_ROWS,
                          NULL, out, 0, NULL, NULL, 0};
    size_t blocks = r.blocks ? r.blocks : 1;
    r.block_bytes = calloc(blocks, sizeof *r.block_bytes);
    r.errors = calloc(blocks, sizeof *r.errors);
    out->offsets = malloc((count + 1) * sizeof *out->offsets);
    int rc = r.block_bytes && r.errors && out->offsets
                 ? 0
                 : zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    /* Pass 1: the ids' lengths, so that every string's place is known. */
    if (rc == 0)
        rc = run(&r, err);
    uint64_t total = 0;
    for (size_t b = 0; rc == 0 && b < r.blocks; b++)
        total += r.block_bytes[b];
    if (rc == 0 && (out->bytes = malloc(total + 1)) == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory for %" PRIu64 " bytes of strings of %s", total,
                        array->file_path);
    /* Where each block's strings start. */
    for (size_t b = 0, at = 0; rc == 0 && b < r.blocks; b++) {
        uint64_t n = r.block_bytes[b];
        r.block_bytes[b] = at;
        at += n;
    }
    if (rc == 0)
        out->offsets[count] = total;
    /* Pass 2: the bytes, each string into its place. */
    if (rc == 0) {
        r.filling = 1;
        memset(r.errors, 0, blocks * sizeof *r.errors);
        r.pass = zm__pass_begin(source, array, "rows", r.blocks);
        rc = run(&r, err);
        zm__pass_end(source, r.pass);
    }
    if (rc == 0) {
        out->count = count;
        out->bytes[total] = '\0';
    } else {
        zm_strings_free(out);
    }
    free(r.block_bytes);
    free(r.errors);
    return rc;
}
