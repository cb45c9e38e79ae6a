/* A Zarr store's arrays as zm_arrays: described from their metadata, their
 * chunks found in the store (a shard's inner chunks through the shard's
 * index, read once a shard) and decoded on the pool like an HDF5 file's,
 * each chunk a request needs once. Everything above (gathers, the cache,
 * passes, counters) is read_chunked.c's, unchanged. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"
#include "source/zarr_array.h"

/* A shard's index, read on first use. */
typedef struct shard_index {
    int absent;        /* the shard was never written: every inner chunk is the fill value */
    uint64_t *offsets; /* per inner chunk; UINT64_MAX: absent */
    uint64_t *sizes;
} shard_index;

struct zm__zarr_array {
    zm__store *store;
    const zm__zarray *meta; /* the tree's (it lives as long as the source) */
    char *path;             /* the array's path in the store ("X/data") */
    const zm__zfield *field; /* one field of a structured array, else NULL */
    /* Sharded: the shards' grid and each one's index. */
    uint64_t per_shard[ZM_MAX_RANK]; /* inner chunks along each dimension of a shard */
    uint64_t shard_grid[ZM_MAX_RANK];
    uint64_t shard_count;
    pthread_mutex_t shard_mutex;
    _Atomic(shard_index *) *shards; /* shard_count of them, allocated on first use */
};

void zm__zarr_array_free(struct zm__zarr_array *zarr)
{
    if (zarr == NULL)
        return;
    if (zarr->shards != NULL) {
        for (uint64_t i = 0; i < zarr->shard_count; i++) {
            shard_index *s = atomic_load(&zarr->shards[i]);
            if (s != NULL) {
                free(s->offsets);
                free(s->sizes);
                free(s);
            }
        }
        free(zarr->shards);
    }
    pthread_mutex_destroy(&zarr->shard_mutex);
    free(zarr->path);
    free(zarr);
}

/* a × b, or UINT64_MAX past it. */
static uint64_t times(uint64_t a, uint64_t b)
{
    return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

/* ---- Describing --------------------------------------------------------------- */

int zm__zarr_array_open(zm_source *source, zm__store *store, const zm__znode *node,
                        const char *field, uint64_t store_bytes, zm_array **out, zm_err *err)
{
    *out = NULL;
    const zm__zarray *m = node->array;
    const char *path = node->path;
    int rc = zm__zarray_supported(m, err);
    if (rc != 0)
        return rc;
    const zm__zfield *f = NULL;
    if (m->value == ZM__ZVALUE_RECORDS) {
        if (field == NULL)
            return zm_err_set(err, -ENOTSUP, "%s: a structured array (read field by field)", path);
        for (size_t i = 0; i < m->field_count && f == NULL; i++)
            if (strcmp(m->fields[i].name, field) == 0)
                f = &m->fields[i];
        if (f == NULL)
            return zm_err_set(err, -EINVAL, "%s: no field %s", path, field);
        if (f->value == ZM__ZVALUE_VLEN || f->value == ZM__ZVALUE_RECORDS)
            return zm_err_set(err, -ENOTSUP, "%s: field %s is not a number or fixed string", path,
                              field);
    } else if (field != NULL) {
        return zm_err_set(err, -EINVAL, "%s: not a structured array (no field %s)", path, field);
    }
    zm__zvalue value = f ? f->value : m->value;
    int strings = value != ZM__ZVALUE_NUMBER;

    /* What it claims is bounded by what the store holds: values the store
     * does not store are the fill value, and at most 64 MiB of them, or
     * 1024 times the store's bytes (the bound HDF5 sources have). */
    uint64_t values = 1;
    for (unsigned d = 0; d < m->rank; d++)
        values = times(values, m->shape[d]);
    uint64_t item = strings ? (value == ZM__ZVALUE_VLEN ? 1 : (f ? f->size : m->item_size))
                            : (f ? f->dtype.size : m->dtype.size);
    uint64_t claimed = times(values, item ? item : 1);
    uint64_t allowed = times(store_bytes, ZM__UNSTORED_RATIO);
    if (allowed < ZM__UNSTORED_BYTES_MAX)
        allowed = ZM__UNSTORED_BYTES_MAX;
    if (claimed > allowed)
        return zm_err_set(err, -EINVAL,
                          "%s: its shape claims %llu bytes of values, more than 1024 times what "
                          "the store holds (%llu bytes)",
                          path, (unsigned long long)claimed, (unsigned long long)store_bytes);
    /* A chunk is decoded, or filled, whole: its claim is bounded the same way
     * (a chunk larger than the shape is valid Zarr; chunks of 10^9 values
     * over 300 had a read allocate and fill 8 GB). */
    const uint64_t *grain = m->shard ? m->shard->inner : m->chunks;
    uint64_t chunk_values = 1;
    for (unsigned d = 0; d < m->rank; d++)
        chunk_values = times(chunk_values, grain[d]);
    uint64_t chunk_claimed = times(chunk_values, item ? item : 1);
    if (chunk_claimed > allowed)
        return zm_err_set(err, -EINVAL,
                          "%s: its chunks claim %llu bytes of values each, more than 1024 times "
                          "what the store holds (%llu bytes)",
                          path, (unsigned long long)chunk_claimed, (unsigned long long)store_bytes);

    zm_array *array = zm__array_new();
    struct zm__zarr_array *z = calloc(1, sizeof *z);
    if (array == NULL || z == NULL) {
        free(array);
        free(z);
        return zm_err_set(err, -ENOMEM, "out of memory describing %s", path);
    }
    pthread_mutex_init(&z->shard_mutex, NULL);
    array->zarr = z;
    z->store = store;
    z->meta = m;
    z->field = f;
    z->path = strdup(path);
    char label[ZM_ELEMENT_PATH_MAX + ZM_ELEMENT_NAME_MAX + 4];
    snprintf(label, sizeof label, "/%s%s%s", path, f ? "#" : "", f ? f->name : "");
    array->file_path = strdup(label);
    array->info.file_path = array->file_path;
    if (z->path == NULL || array->file_path == NULL) {
        zm__array_free(array);
        return zm_err_set(err, -ENOMEM, "out of memory describing %s", path);
    }
    if (strings)
        array->info.dtype = (zm_dtype){ZM_TYPE_STRING, 0};
    else
        array->info.dtype = f ? f->dtype : m->dtype;
    array->info.rank = m->rank;
    array->storage_rank = m->rank;
    uint64_t chunks = 1;
    for (unsigned d = 0; d < m->rank; d++) {
        array->info.shape[d] = m->shape[d];
        array->storage_shape[d] = m->shape[d];
        /* The read grain: a shard's inner chunks. */
        array->chunk[d] = m->shard ? m->shard->inner[d] : m->chunks[d];
        array->info.chunk_shape[d] = array->chunk[d];
        array->grid[d] = m->shape[d] / array->chunk[d] + (m->shape[d] % array->chunk[d] != 0);
        chunks = times(chunks, array->grid[d]);
        if (m->shard) {
            z->per_shard[d] = m->chunks[d] / m->shard->inner[d];
            z->shard_grid[d] = m->shape[d] / m->chunks[d] + (m->shape[d] % m->chunks[d] != 0);
        }
    }
    array->chunk_count = m->rank == 0 ? 1 : chunks;
    if (m->shard) {
        z->shard_count = 1;
        for (unsigned d = 0; d < m->rank; d++)
            z->shard_count = times(z->shard_count, z->shard_grid[d]);
    }
    array->info.big_endian = f ? f->big_endian : m->big_endian;
    array->info.layout = ZM_LAYOUT_CHUNKED;
    array->info.data_path = ZM_PATH_DIRECT;
    array->info.storage_bytes = 0;
    /* The codecs, for inspect: the chain as the metadata names it. */
    const zm__zcodec *chain = m->shard ? m->shard->codecs : m->codecs;
    unsigned chain_count = m->shard ? m->shard->codec_count : m->codec_count;
    for (unsigned i = 0; i < chain_count && array->info.filter_count < 16; i++) {
        zm_filter_info *fi = &array->info.filters[array->info.filter_count++];
        fi->id = (unsigned)chain[i].id;
        snprintf(fi->name, sizeof fi->name, "%s", chain[i].name);
        fi->level = chain[i].level > 0 ? (unsigned)chain[i].level : 0;
    }
    if (!strings && !m->fill_missing) {
        /* One field's fill lies in the record's (fill_bytes: m->fill holds
         * only its first 16 bytes, and a field may lie past them). */
        size_t size = array->info.dtype.size, at = f ? f->offset : 0;
        if (size <= sizeof array->fill && at <= m->fill_size && size <= m->fill_size - at)
            memcpy(array->fill, m->fill_bytes + at, size);
    }
    rc = zm__array_register(source, array);
    if (rc != 0) {
        zm__array_free(array);
        return zm_err_set(err, rc, "out of memory describing %s", path);
    }
    *out = array;
    return 0;
}

/* ---- Reading a chunk -------------------------------------------------------------- */

/* The stored bytes of key, whole, into *bytes (malloc'd). -ENOENT when the
 * store has no such key. */
static int read_key(zm_source *source, struct zm__zarr_array *z, const char *key, uint8_t **bytes,
                    size_t *size, zm_err *err)
{
    zm__stored stored;
    int rc = zm__store_locate(z->store, key, &stored, err);
    if (rc != 0)
        return rc;
    uint64_t n = stored.deflated ? stored.raw_size : stored.size;
    *bytes = malloc(n ? n : 1);
    if (*bytes == NULL) {
        zm__stored_done(&stored);
        return zm_err_set(err, -ENOMEM, "%s: out of memory for %llu bytes", key,
                          (unsigned long long)n);
    }
    uint64_t read_bytes = 0;
    rc = zm__store_read(z->store, key, &stored, 0, *bytes, n, &read_bytes, err);
    zm__count_bytes(source, read_bytes);
    zm__stored_done(&stored);
    if (rc != 0) {
        free(*bytes);
        *bytes = NULL;
        return rc;
    }
    *size = n;
    return 0;
}

/* A shard's index, read once (under the array's shard mutex). */
static int get_shard(zm_source *source, zm_array *array, uint64_t shard, const char *key,
                     const shard_index **out, zm_err *err)
{
    struct zm__zarr_array *z = array->zarr;
    const zm__zshard *sh = z->meta->shard;
    shard_index *s = z->shards ? atomic_load_explicit(&z->shards[shard], memory_order_acquire)
                               : NULL;
    if (s != NULL) {
        *out = s;
        return 0;
    }
    pthread_mutex_lock(&z->shard_mutex);
    int rc = 0;
    if (z->shards == NULL) {
        if (z->shard_count > ZM__STORE_FILES_MAX)
            rc = zm_err_set(err, -EINVAL, "%s: %llu shards, more than a store may hold",
                            array->file_path, (unsigned long long)z->shard_count);
        else if ((z->shards = calloc(z->shard_count, sizeof *z->shards)) == NULL)
            rc = zm_err_set(err, -ENOMEM, "%s: out of memory for %llu shards", array->file_path,
                            (unsigned long long)z->shard_count);
    }
    if (rc == 0 && (s = atomic_load(&z->shards[shard])) == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
        zm__stored stored;
        int found = rc == 0 ? zm__store_locate(z->store, key, &stored, err) : rc;
        if (found == -ENOENT) {
            zm_err_clear(err);
            s->absent = 1;
        } else if (found != 0) {
            rc = found;
        } else {
            uint64_t shard_size = stored.deflated ? stored.raw_size : stored.size;
            /* The shard holds its index before anything is allocated for
             * it: what the index claims is bounded by the bytes stored. */
            uint8_t *index = NULL;
            if (shard_size < sh->index_bytes)
                rc = zm_err_set(err, -EIO, "%s: the shard holds %llu bytes, fewer than its "
                                "index's %zu (truncated?)", key,
                                (unsigned long long)shard_size, sh->index_bytes);
            else if ((index = malloc(sh->index_bytes ? sh->index_bytes : 1)) == NULL ||
                     (s->offsets = malloc(sh->per_shard * sizeof *s->offsets)) == NULL ||
                     (s->sizes = malloc(sh->per_shard * sizeof *s->sizes)) == NULL)
                rc = zm_err_set(err, -ENOMEM, "%s: out of memory for a shard index", key);
            uint64_t read_bytes = 0;
            if (rc == 0)
                rc = zm__store_read(z->store, key, &stored,
                                    sh->index_at_start ? 0 : shard_size - sh->index_bytes, index,
                                    sh->index_bytes, &read_bytes, err);
            zm__count_bytes(source, read_bytes);
            zm_err inner;
            zm_err_clear(&inner);
            if (rc == 0 && (rc = zm__zshard_index(sh, index, sh->index_bytes, shard_size,
                                                  s->offsets, s->sizes, &inner)) != 0)
                zm_err_set(err, rc, "%s: %s", key, inner.reason);
            free(index);
            zm__stored_done(&stored);
        }
        if (rc == 0) {
            atomic_store_explicit(&z->shards[shard], s, memory_order_release);
        } else if (s != NULL) {
            free(s->offsets);
            free(s->sizes);
            free(s);
            s = NULL;
        }
    }
    pthread_mutex_unlock(&z->shard_mutex);
    *out = s;
    return rc;
}

/* One chunk's stored bytes, wherever they lie: its own key, or its place
 * in its shard (found through the shard's index). *stored NULL (0
 * returned) for a chunk never written; key gets the key named in
 * messages; the chain and shape to decode it with. */
typedef struct stored_chunk {
    uint8_t *bytes; /* malloc'd; NULL: never written */
    size_t size;
    char key[ZM_ELEMENT_PATH_MAX + 256];
    const zm__zcodec *codecs;
    unsigned codec_count;
    const uint64_t *shape;
} stored_chunk;

static int read_stored_chunk(zm_source *source, zm_array *array, uint64_t chunk, stored_chunk *out,
                             zm_err *err)
{
    struct zm__zarr_array *z = array->zarr;
    const zm__zarray *m = z->meta;
    out->bytes = NULL;
    out->size = 0;
    uint64_t coords[ZM_MAX_RANK] = {0}, rest = chunk;
    for (int d = (int)m->rank - 1; d >= 0; d--) {
        coords[d] = rest % array->grid[d];
        rest /= array->grid[d];
    }
    int rc;
    if (m->shard == NULL) {
        out->codecs = m->codecs;
        out->codec_count = m->codec_count;
        out->shape = m->chunks;
        if ((rc = zm__zarray_chunk_key(m, z->path, coords, out->key, sizeof out->key)) != 0)
            return zm_err_set(err, rc, "%s: chunk %llu has no key", array->file_path,
                              (unsigned long long)chunk);
        rc = read_key(source, z, out->key, &out->bytes, &out->size, err);
        if (rc == -ENOENT) {
            zm_err_clear(err);
            return 0;
        }
        return rc;
    }
    /* Sharded: the shard holding it, and its place there (C order over
     * the shard's inner grid). */
    const zm__zshard *sh = m->shard;
    out->codecs = sh->codecs;
    out->codec_count = sh->codec_count;
    out->shape = sh->inner;
    uint64_t shard_coords[ZM_MAX_RANK] = {0}, shard = 0, inner = 0;
    for (unsigned d = 0; d < m->rank; d++) {
        shard_coords[d] = coords[d] / z->per_shard[d];
        shard = shard * z->shard_grid[d] + shard_coords[d];
        inner = inner * z->per_shard[d] + coords[d] % z->per_shard[d];
    }
    if ((rc = zm__zarray_chunk_key(m, z->path, shard_coords, out->key, sizeof out->key)) != 0)
        return zm_err_set(err, rc, "%s: shard %llu has no key", array->file_path,
                          (unsigned long long)shard);
    const shard_index *s;
    if ((rc = get_shard(source, array, shard, out->key, &s, err)) != 0)
        return rc;
    if (s->absent || s->offsets[inner] == UINT64_MAX)
        return 0;
    zm__stored where;
    if ((rc = zm__store_locate(z->store, out->key, &where, err)) != 0)
        return rc == -ENOENT ? zm_err_set(err, -EIO, "%s: shard %s has gone", array->file_path,
                                          out->key)
                             : rc;
    out->size = s->sizes[inner];
    out->bytes = malloc(out->size ? out->size : 1);
    uint64_t read_bytes = 0;
    rc = out->bytes == NULL
             ? zm_err_set(err, -ENOMEM, "%s: out of memory for a chunk", out->key)
             : zm__store_read(z->store, out->key, &where, s->offsets[inner], out->bytes, out->size,
                              &read_bytes, err);
    zm__count_bytes(source, read_bytes);
    zm__stored_done(&where);
    if (rc != 0) {
        free(out->bytes);
        out->bytes = NULL;
    }
    return rc;
}

/* Decodes a chunk's stored bytes into raw (one stored value item bytes):
 * the values of a field taken out of a structured array's records. */
static int decode_values(zm_array *array, const stored_chunk *c, size_t item, uint8_t *raw,
                         size_t raw_size, zm_err *err)
{
    struct zm__zarr_array *z = array->zarr;
    const zm__zarray *m = z->meta;
    uint64_t count = 1;
    for (unsigned d = 0; d < m->rank; d++)
        count *= c->shape[d];
    zm_err inner;
    zm_err_clear(&inner);
    int rc;
    if (z->field == NULL) {
        rc = zm__zarr_decode(c->codecs, c->codec_count, m->fortran_order, m->rank, c->shape,
                             m->item_size, c->bytes, c->size, raw, raw_size, &inner);
    } else {
        size_t record_bytes = count * m->item_size;
        uint8_t *records = malloc(record_bytes ? record_bytes : 1);
        if (records == NULL)
            return zm_err_set(err, -ENOMEM, "%s: out of memory for a chunk", array->file_path);
        rc = zm__zarr_decode(c->codecs, c->codec_count, m->fortran_order, m->rank, c->shape,
                             m->item_size, c->bytes, c->size, records, record_bytes, &inner);
        for (uint64_t i = 0; rc == 0 && i < count; i++)
            memcpy(raw + i * item, records + i * m->item_size + z->field->offset, item);
        free(records);
    }
    if (rc != 0)
        return zm_err_set(err, rc, "%s: %s: %s", array->file_path,
                          c->key, inner.reason);
    return 0;
}

int zm__zarr_chunk(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                   size_t raw_size, zm_err *err)
{
    struct zm__zarr_array *z = array->zarr;
    stored_chunk c;
    int rc = read_stored_chunk(source, array, chunk, &c, err);
    if (rc != 0)
        return rc;
    size_t size = array->info.dtype.size;
    if (c.bytes == NULL) {
        /* Never written: the fill value. A v2 array whose fill_value is
         * null has none; zarr-python 3 reads such a chunk as zeros (and
         * writes stores that rely on it: it leaves out chunks equal to
         * that), and anndata reads them so: array->fill is zeros then. */
        zm__fill_values(raw, raw_size / size, array);
        return 0;
    }
    rc = decode_values(array, &c, size, raw, raw_size, err);
    free(c.bytes);
    /* zm__zarr_decode gives native order (a v2 big-endian dtype has a bytes
     * codec implied); a structured array's records come as stored, each
     * field in its own order. */
    int big = z->field ? z->field->big_endian && z->field->value == ZM__ZVALUE_NUMBER : 0;
    if (rc == 0 && big && size > 1)
        zm__swap_bytes(raw, raw_size / size, size);
    return rc;
}

int zm__zarr_chunk_prefix(zm_source *source, zm_array *array, uint64_t chunk, uint8_t *raw,
                          size_t capacity, uint64_t values, zm_err *err)
{
    struct zm__zarr_array *z = array->zarr;
    const zm__zarray *m = z->meta;
    if (z->field != NULL ||
        !zm__zarr_prefix_decodable(m->shard ? m->shard->codecs : m->codecs,
                                   m->shard ? m->shard->codec_count : m->codec_count,
                                   m->fortran_order, m->rank))
        return 0;
    stored_chunk c;
    int rc = read_stored_chunk(source, array, chunk, &c, err);
    if (rc != 0)
        return rc;
    size_t size = array->info.dtype.size;
    if (c.bytes == NULL) {
        zm__fill_values(raw, values, array);
        return 1;
    }
    zm_err inner;
    zm_err_clear(&inner);
    rc = zm__zarr_decode_prefix(c.codecs, c.codec_count, m->fortran_order, m->rank, c.shape,
                                m->item_size, c.bytes, c.size, raw, capacity, values * size,
                                &inner);
    free(c.bytes);
    if (rc < 0)
        return zm_err_set(err, rc, "%s: %s: %s", array->file_path, c.key, inner.reason);
    if (rc == 1)
        zm__count_chunk(source);
    return rc;
}

/* ---- Strings ------------------------------------------------------------------------ */

/* One code point as UTF-8 into out (4 bytes at most); 0 for one that is
 * not a character. */
static size_t utf8_put(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c >= 0xD800 && c < 0xE000)
        return 0;
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    if (c < 0x110000) {
        out[0] = (char)(0xF0 | c >> 18);
        out[1] = (char)(0x80 | (c >> 12 & 0x3F));
        out[2] = (char)(0x80 | (c >> 6 & 0x3F));
        out[3] = (char)(0x80 | (c & 0x3F));
        return 4;
    }
    return 0;
}

/* Every string of one chunk (C order over the chunk's shape), whatever
 * their stored form. */
static int decode_chunk_strings(zm_source *source, zm_array *array, uint64_t chunk,
                                zm_strings *out, zm_err *err)
{
    struct zm__zarr_array *z = array->zarr;
    const zm__zarray *m = z->meta;
    memset(out, 0, sizeof *out);
    zm__zvalue value = z->field ? z->field->value : m->value;
    stored_chunk c;
    int rc = read_stored_chunk(source, array, chunk, &c, err);
    if (rc != 0)
        return rc;
    uint64_t count = 1;
    for (unsigned d = 0; d < m->rank; d++)
        count *= c.shape[d];
    zm__strings_builder b = {0};
    if (c.bytes == NULL) {
        /* Never written: the fill value, "" (what zarr-python fills strings with). */
        for (uint64_t i = 0; i < count; i++)
            if (zm__strings_add(&b, "", 0) != 0) {
                zm_strings_free(&b.s);
                return zm_err_set(err, -ENOMEM, "out of memory");
            }
        *out = b.s;
        return 0;
    }
    if (value == ZM__ZVALUE_VLEN) {
        zm_err inner;
        zm_err_clear(&inner);
        rc = zm__zarr_decode_strings(c.codecs, c.codec_count, m->fortran_order, m->rank, c.shape,
                                     c.bytes, c.size, out, &inner);
        free(c.bytes);
        if (rc != 0)
            return zm_err_set(err, rc, "%s: %s: %s", array->file_path, c.key, inner.reason);
        zm__count_chunk(source);
        return 0;
    }
    /* Fixed-length bytes or UCS-4: decoded as values, then made strings
     * with the NULs at their ends dropped (as numpy reads them). */
    size_t item = z->field ? z->field->size : m->item_size;
    int big = z->field ? z->field->big_endian : 0; /* whole arrays come native (above) */
    size_t raw_size = count * item;
    uint8_t *raw = malloc(raw_size ? raw_size : 1);
    char *text = malloc(item + 1);
    if (raw == NULL || text == NULL)
        rc = zm_err_set(err, -ENOMEM, "%s: out of memory for a chunk", array->file_path);
    else
        rc = decode_values(array, &c, item, raw, raw_size, err);
    free(c.bytes);
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        const uint8_t *v = raw + i * item;
        size_t n = 0;
        if (value == ZM__ZVALUE_BYTES) {
            n = item;
            while (n > 0 && v[n - 1] == 0)
                n--;
            memcpy(text, v, n);
        } else {
            size_t chars = item / 4;
            while (chars > 0 && zm__le(v + 4 * (chars - 1), 4) == 0)
                chars--;
            for (size_t k = 0; rc == 0 && k < chars; k++) {
                const uint8_t *p = v + 4 * k;
                uint32_t code = big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                                          (uint32_t)p[2] << 8 | p[3]
                                    : (uint32_t)zm__le(p, 4);
                size_t w = utf8_put(code, text + n);
                if (w == 0)
                    rc = zm_err_set(err, -EIO, "%s: value %llu holds U+%04X, not a character",
                                    array->file_path, (unsigned long long)i, code);
                n += w;
            }
        }
        if (rc == 0 && zm__strings_add(&b, text, n) != 0)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
    }
    free(text);
    free(raw);
    if (rc != 0) {
        zm_strings_free(&b.s);
        return rc;
    }
    zm__count_chunk(source);
    *out = b.s;
    return 0;
}

/* A chunk's strings as the cache keeps them: one block, the count (8
 * bytes), count + 1 offsets (8 bytes each) and the bytes. A string column
 * read for each chunk of a view's column (and each view) decodes each of
 * its chunks once, as numbers do. */
struct strings_load {
    zm_source *source;
    zm_array *array;
    uint64_t chunk;
};

static int load_strings(void *context, uint8_t **bytes, size_t *size, zm_err *err)
{
    struct strings_load *l = context;
    zm_strings s;
    int rc = decode_chunk_strings(l->source, l->array, l->chunk, &s, err);
    if (rc != 0)
        return rc;
    size_t text = s.count ? s.offsets[s.count] : 0;
    size_t n = 8 + (s.count + 1) * 8 + text;
    uint8_t *block = malloc(n);
    if (block == NULL) {
        zm_strings_free(&s);
        return zm_err_set(err, -ENOMEM, "%s: out of memory for a chunk's strings",
                          l->array->file_path);
    }
    uint64_t count = s.count;
    memcpy(block, &count, 8);
    if (s.count)
        memcpy(block + 8, s.offsets, (s.count + 1) * 8);
    else
        memset(block + 8, 0, 8);
    memcpy(block + 8 + (s.count + 1) * 8, s.bytes ? s.bytes : "", text);
    zm_strings_free(&s);
    *bytes = block;
    *size = n;
    return 0;
}

/* A cached chunk's strings: ref holds the block; *view points into it
 * (never freed: released with ref). */
static int chunk_strings_ref(zm_source *source, zm_array *array, uint64_t chunk, zm_cache_ref *ref,
                             zm_strings *view, zm_err *err)
{
    struct {
        uint64_t serial, chunk, strings;
    } key_bytes = {array->serial, chunk, 1};
    struct strings_load l = {source, array, chunk};
    int rc = zm_cache_get(source->cache, zm_cache_key(&key_bytes, sizeof key_bytes), load_strings,
                          &l, ref, err);
    if (rc != 0)
        return rc;
    uint64_t count;
    memcpy(&count, ref->bytes, 8);
    view->count = count;
    view->offsets = (uint64_t *)(uintptr_t)(ref->bytes + 8);
    view->bytes = (char *)(uintptr_t)(ref->bytes + 8 + (count + 1) * 8);
    return 0;
}

/* A chunk's strings, copied out of the cache (the caller frees them). */
static int chunk_strings(zm_source *source, zm_array *array, uint64_t chunk, zm_strings *out,
                         zm_err *err)
{
    memset(out, 0, sizeof *out);
    zm_cache_ref ref;
    zm_strings view;
    int rc = chunk_strings_ref(source, array, chunk, &ref, &view, err);
    if (rc != 0)
        return rc;
    size_t text = view.offsets[view.count];
    out->offsets = malloc((view.count + 1) * sizeof *out->offsets);
    out->bytes = malloc(text + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_cache_release(source->cache, &ref);
        zm_strings_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
    }
    memcpy(out->offsets, view.offsets, (view.count + 1) * sizeof *out->offsets);
    memcpy(out->bytes, view.bytes, text);
    out->bytes[text] = '\0';
    out->count = view.count;
    zm_cache_release(source->cache, &ref);
    return 0;
}

/* Every string of the array (C order), chunk after chunk. */
static int all_strings(zm_source *source, zm_array *array, zm_strings *out, zm_err *err)
{
    const zm__zarray *m = array->zarr->meta;
    uint64_t total = 1;
    for (unsigned d = 0; d < m->rank; d++)
        total *= m->shape[d];
    zm__strings_builder b = {0};
    zm_strings *chunks = NULL;
    int rc = 0;
    if (m->rank <= 1) {
        /* Taken straight from each cached chunk, as the rows' path does. */
        for (uint64_t c = 0; rc == 0 && c < array->chunk_count; c++) {
            zm_cache_ref ref;
            zm_strings piece;
            if ((rc = chunk_strings_ref(source, array, c, &ref, &piece, err)) != 0)
                break;
            uint64_t first = c * (m->rank ? array->chunk[0] : 1);
            for (uint64_t i = 0; rc == 0 && i < piece.count && first + i < total; i++)
                if (zm__strings_add(&b, piece.bytes + piece.offsets[i],
                                    piece.offsets[i + 1] - piece.offsets[i]) != 0)
                    rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
            zm_cache_release(source->cache, &ref);
        }
    } else {
        /* n-d: every chunk held, then the values taken in C order. */
        chunks = calloc(array->chunk_count, sizeof *chunks);
        if (chunks == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        for (uint64_t c = 0; rc == 0 && c < array->chunk_count; c++)
            rc = chunk_strings(source, array, c, &chunks[c], err);
        for (uint64_t i = 0; rc == 0 && i < total; i++) {
            uint64_t rest = i, chunk = 0, within = 0, stride_chunk = 1, stride_within = 1;
            for (int d = (int)m->rank - 1; d >= 0; d--) {
                uint64_t x = rest % m->shape[d];
                rest /= m->shape[d];
                chunk += (x / array->chunk[d]) * stride_chunk;
                within += (x % array->chunk[d]) * stride_within;
                stride_chunk *= array->grid[d];
                stride_within *= array->chunk[d];
            }
            const zm_strings *p = &chunks[chunk];
            if (within >= p->count)
                rc = zm_err_set(err, -EIO, "%s: a chunk holds too few strings", array->file_path);
            else if (zm__strings_add(&b, p->bytes + p->offsets[within],
                                 p->offsets[within + 1] - p->offsets[within]) != 0)
                rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
        for (uint64_t c = 0; chunks != NULL && c < array->chunk_count; c++)
            zm_strings_free(&chunks[c]);
        free(chunks);
    }
    if (rc == 0 && b.s.count != total)
        rc = zm_err_set(err, -EIO, "%s: its chunks hold %zu strings, not %llu", array->file_path,
                        b.s.count, (unsigned long long)total);
    if (rc != 0) {
        zm_strings_free(&b.s);
        return rc;
    }
    if (b.s.offsets == NULL) {
        b.s.offsets = calloc(1, sizeof *b.s.offsets);
        b.s.bytes = calloc(1, 1);
        if (b.s.offsets == NULL || b.s.bytes == NULL) {
            zm_strings_free(&b.s);
            return zm_err_set(err, -ENOMEM, "out of memory");
        }
    }
    *out = b.s;
    return 0;
}

int zm__zarr_read_strings(zm_source *source, zm_array *array, const uint64_t *rows, size_t count,
                          uint64_t per_row, zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    const zm__zarray *m = array->zarr->meta;
    uint64_t n_rows = m->rank == 0 ? 1 : m->shape[0];
    for (size_t i = 0; rows != NULL && i < count; i++)
        if (rows[i] >= n_rows || (i > 0 && rows[i] <= rows[i - 1]))
            return zm_err_set(err, -EINVAL, "%s: row %llu is out of order or past the end",
                              array->file_path, (unsigned long long)rows[i]);
    if (rows == NULL || m->rank != 1) {
        zm_strings all;
        int rc = all_strings(source, array, &all, err);
        if (rc != 0 || rows == NULL) {
            if (rc == 0)
                *out = all;
            return rc;
        }
        zm__strings_builder b = {0};
        for (size_t i = 0; rc == 0 && i < count; i++)
            for (uint64_t j = rows[i] * per_row; rc == 0 && j < (rows[i] + 1) * per_row; j++)
                if (zm__strings_add(&b, all.bytes + all.offsets[j],
                                    all.offsets[j + 1] - all.offsets[j]))
                    rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        zm_strings_free(&all);
        if (rc != 0) {
            zm_strings_free(&b.s);
            return rc;
        }
        *out = b.s;
        return 0;
    }
    /* 1-d, some rows: only the chunks they lie in, each decoded once and
     * kept in the cache. */
    zm__strings_builder b = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < count;) {
        uint64_t chunk = rows[i] / array->chunk[0];
        zm_cache_ref ref;
        zm_strings piece;
        if ((rc = chunk_strings_ref(source, array, chunk, &ref, &piece, err)) != 0)
            break;
        uint64_t first = chunk * array->chunk[0];
        for (; rc == 0 && i < count && rows[i] / array->chunk[0] == chunk; i++) {
            uint64_t at = rows[i] - first;
            if (at >= piece.count)
                rc = zm_err_set(err, -EIO, "%s: a chunk holds too few strings", array->file_path);
            else if (zm__strings_add(&b, piece.bytes + piece.offsets[at],
                                 piece.offsets[at + 1] - piece.offsets[at]) != 0)
                rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", array->file_path);
        }
        zm_cache_release(source->cache, &ref);
    }
    if (rc == 0 && b.s.offsets == NULL) {
        b.s.offsets = calloc(1, sizeof *b.s.offsets);
        b.s.bytes = calloc(1, 1);
        if (b.s.offsets == NULL || b.s.bytes == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory");
    }
    if (rc != 0) {
        zm_strings_free(&b.s);
        return rc;
    }
    *out = b.s;
    return 0;
}
