/* Tests for the Zarr reader's metadata (src/source/zarr_meta.c) and codecs
 * (src/source/zarr_codecs.c).
 *
 * The evidence is what zarr-python wrote and read, never our own output:
 * tests/data/zarr_meta/ holds stores written by zarr 2.13 (numcodecs 0.11)
 * and zarr 3.0.6 (numcodecs 0.16) with the values each was given
 * (tests/source/make_zarr_vectors.py, which says how they were made), and
 * what zarr-python reads from ../shared/data's real stores (anndata 0.13 +
 * zarr 3.4, and the older stores of ../shared/data/zarr). Every array of
 * them is read whole here, chunk by chunk (and shard by shard) through the
 * metadata's codecs, and compared value for value; metadata is compared
 * with the stores' own JSON, read here with jansson directly; chunk keys
 * with the files zarr-python wrote. Damaged and hostile metadata, streams,
 * checksums, shard indexes and string chunks must fail with the errors
 * zarr_store.h promises, and nothing may read or write out of bounds (run
 * under ASan too).
 *
 * The data are found through $ZM_SOURCE_ROOT/tests/data/zarr_meta, else next
 * to this file; the real stores through $ZM_SHARED_DATA (skipped when
 * absent).
 */
#include <blosc.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <nettle/sha2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "source/zarr_store.h"
#include "zarrmount/text.h"


/* ---- helpers ----------------------------------------------------------------------- */

static const char *data_dir(void)
{
    static char path[4096];
    const char *root = getenv("ZM_SOURCE_ROOT");
    if (root != NULL && root[0] != '\0') {
        snprintf(path, sizeof path, "%s/tests/data/zarr_meta", root);
        return path;
    }
    const char *slash = strrchr(__FILE__, '/');
    int dir = slash ? (int)(slash - __FILE__) : 0;
    snprintf(path, sizeof path, "%.*s%sdata/zarr_meta", dir, __FILE__, slash ? "/" : "");
    return path;
}

/* The real stores, or NULL (the test is skipped). */
static const char *shared_dir(void)
{
    const char *shared = getenv("ZM_SHARED_DATA");
    struct stat st;
    if (shared == NULL || stat(shared, &st) < 0 || !S_ISDIR(st.st_mode))
        return NULL;
    return shared;
}

static json_t *load_gz_json(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir(), name);
    gzFile f = gzopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t cap = 1 << 20, size = 0;
    char *text = malloc(cap);
    for (;;) {
        if (size == cap)
            text = realloc(text, cap *= 2);
        int n = gzread(f, text + size, (unsigned)(cap - size));
        cr_assert_geq(n, 0, "%s unreadable", path);
        if (n == 0)
            break;
        size += (size_t)n;
    }
    gzclose(f);
    json_error_t error;
    json_t *doc = json_loadb(text, size, 0, &error);
    free(text);
    cr_assert_not_null(doc, "%s: %s", path, error.text);
    return doc;
}

typedef struct opened {
    int fd;
    zm__store *store;
    zm__ztree *tree;
} opened;

static int open_store(const char *path, opened *o, zm_err *err)
{
    memset(o, 0, sizeof *o);
    o->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(o->fd, 0, "open %s: %s", path, strerror(errno));
    int rc = zm__store_open(o->fd, path, &o->store, err);
    cr_assert_eq(rc, 0, "store %s: %s", path, err->reason);
    return zm__ztree_open(o->store, &o->tree, err);
}

static void open_ok(const char *path, opened *o)
{
    zm_err err;
    int rc = open_store(path, o, &err);
    cr_assert_eq(rc, 0, "%s: %s", path, err.reason);
}

static void close_store(opened *o)
{
    zm__ztree_close(o->tree);
    zm__store_close(o->store);
    close(o->fd);
}

static const zm__znode *node_ok(opened *o, const char *path)
{
    const zm__znode *node;
    zm_err err;
    int rc = zm__ztree_node(o->tree, path, &node, &err);
    cr_assert_eq(rc, 0, "node %s: %d %s", path, rc, err.reason);
    return node;
}

static uint8_t *b64_decode(json_t *v, size_t *size)
{
    uint8_t *bytes = NULL;
    cr_assert(json_is_string(v));
    int rc = zm_base64_decode(json_string_value(v), json_string_length(v), &bytes, size);
    cr_assert_eq(rc, 0, "base64");
    return bytes;
}

static uint64_t product(const uint64_t *dims, unsigned rank)
{
    uint64_t n = 1;
    for (unsigned d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

static void dims_from_json(json_t *list, unsigned *rank, uint64_t *dims)
{
    *rank = (unsigned)json_array_size(list);
    for (unsigned d = 0; d < *rank; d++)
        dims[d] = (uint64_t)json_integer_value(json_array_get(list, d));
}

/* Moves through the coordinates of a grid in C order; 0 past the last. */
static int next_coords(uint64_t *coords, const uint64_t *grid, unsigned rank)
{
    for (unsigned d = rank; d-- > 0;) {
        if (++coords[d] < grid[d])
            return 1;
        coords[d] = 0;
    }
    return 0;
}

/* ---- reading a whole array the way a reader would ------------------------------------ */

/* Values of the whole array: bytes (numbers, bytes, unicode, records) or
 * strings (vlen). */
typedef struct whole {
    uint8_t *bytes;
    char **strings;
    uint64_t count;
} whole;

static void whole_free(whole *w)
{
    free(w->bytes);
    for (uint64_t i = 0; w->strings && i < w->count; i++)
        free(w->strings[i]);
    free(w->strings);
    memset(w, 0, sizeof *w);
}

/* A block of values (origin in the array, shape block) placed into the
 * array, clipped at its edges. */
static void place(whole *w, const zm__zarray *a, const uint64_t *origin, const uint64_t *block,
                  const uint8_t *bytes, const zm_strings *strings)
{
    uint64_t coords[ZM_MAX_RANK] = {0};
    uint64_t n = product(block, a->rank);
    if (n == 0)
        return;
    for (uint64_t i = 0; i < n; i++) {
        /* coords: the value's place in the block (C order). */
        uint64_t at = 0;
        bool inside = true;
        for (unsigned d = 0; d < a->rank; d++) {
            uint64_t c = origin[d] + coords[d];
            inside = inside && c < a->shape[d];
            at = at * a->shape[d] + c;
        }
        if (inside) {
            if (strings != NULL) {
                size_t len = (size_t)(strings->offsets[i + 1] - strings->offsets[i]);
                free(w->strings[at]);
                w->strings[at] = strndup(strings->bytes + strings->offsets[i], len);
            } else {
                memcpy(w->bytes + at * a->item_size, bytes + i * a->item_size, a->item_size);
            }
        }
        next_coords(coords, block, a->rank);
    }
}

/* One chunk's stored bytes through a chain into the whole array. */
static int decode_block(whole *w, const zm__zarray *a, const zm__zcodec *codecs, unsigned count,
                        const uint64_t *origin, const uint64_t *block, const uint8_t *in,
                        size_t in_size, zm_err *err)
{
    if (a->value == ZM__ZVALUE_VLEN) {
        zm_strings s;
        int rc = zm__zarr_decode_strings(codecs, count, a->fortran_order, a->rank, block, in,
                                         in_size, &s, err);
        if (rc < 0)
            return rc;
        cr_assert_eq(s.count, product(block, a->rank));
        place(w, a, origin, block, NULL, &s);
        zm_strings_free(&s);
        return 0;
    }
    size_t raw = (size_t)product(block, a->rank) * a->item_size;
    uint8_t *out = malloc(raw ? raw : 1);
    int rc = zm__zarr_decode(codecs, count, a->fortran_order, a->rank, block, a->item_size, in,
                             in_size, out, raw, err);
    if (rc == 0)
        place(w, a, origin, block, out, NULL);
    free(out);
    return rc;
}

/* The fill over a block never written. */
static void fill_block(whole *w, const zm__zarray *a, const uint64_t *origin, const uint64_t *block)
{
    /* Where the metadata has no fill, the type's zero, as zarr-python 3
     * reads it (zarr_store.h): real v2 stores written by it need that. */
    cr_assert_not_null(a->fill_bytes, "a chunk is missing and the array has no fill");
    uint64_t n = product(block, a->rank);
    if (a->value == ZM__ZVALUE_VLEN) {
        zm_strings s = {n, calloc(n + 1, sizeof(uint64_t)), NULL};
        s.bytes = malloc(n * a->fill_size + 1);
        for (uint64_t i = 0; i < n; i++) {
            memcpy(s.bytes + i * a->fill_size, a->fill_bytes, a->fill_size);
            s.offsets[i + 1] = (i + 1) * a->fill_size;
        }
        place(w, a, origin, block, NULL, &s);
        zm_strings_free(&s);
        return;
    }
    uint8_t *bytes = malloc(n * a->item_size + 1);
    for (uint64_t i = 0; i < n; i++)
        memcpy(bytes + i * a->item_size, a->fill_bytes, a->item_size);
    place(w, a, origin, block, bytes, NULL);
    free(bytes);
}

/* Reads the whole array at path; every chunk decoded through the
 * metadata's chain; missing (may be NULL) gets the keys found absent. */
static int read_whole(opened *o, const char *path, whole *w, json_t *missing, zm_err *err)
{
    const zm__znode *node = node_ok(o, path);
    cr_assert_eq(node->kind, ZM__ZNODE_ARRAY, "%s is not an array", path);
    const zm__zarray *a = node->array;
    int rc = zm__zarray_supported(a, err);
    if (rc < 0)
        return rc;
    memset(w, 0, sizeof *w);
    w->count = product(a->shape, a->rank);
    if (a->value == ZM__ZVALUE_VLEN)
        w->strings = calloc(w->count + 1, sizeof *w->strings);
    else
        w->bytes = calloc(w->count * a->item_size + 1, 1);
    uint64_t grid[ZM_MAX_RANK], coords[ZM_MAX_RANK] = {0};
    for (unsigned d = 0; d < a->rank; d++)
        grid[d] = (a->shape[d] + a->chunks[d] - 1) / a->chunks[d];
    if (product(grid, a->rank) == 0)
        return 0;
    do {
        char key[4096];
        cr_assert_eq(zm__zarray_chunk_key(a, path, coords, key, sizeof key), 0);
        uint64_t origin[ZM_MAX_RANK];
        for (unsigned d = 0; d < a->rank; d++)
            origin[d] = coords[d] * a->chunks[d];
        uint8_t *bytes;
        size_t size;
        rc = zm__store_get(o->store, key, (size_t)1 << 30, &bytes, &size, NULL, err);
        if (rc == -ENOENT) {
            if (missing != NULL)
                json_array_append_new(missing, json_string(key + strlen(path) + 1));
            fill_block(w, a, origin, a->chunks);
            continue;
        }
        cr_assert_eq(rc, 0, "%s: %s", key, err->reason);
        if (a->shard == NULL) {
            rc = decode_block(w, a, a->codecs, a->codec_count, origin, a->chunks, bytes, size, err);
        } else {
            const zm__zshard *s = a->shard;
            cr_assert_geq(size, s->index_bytes);
            const uint8_t *index = s->index_at_start ? bytes : bytes + size - s->index_bytes;
            uint64_t *offsets = calloc(s->per_shard, 8), *sizes = calloc(s->per_shard, 8);
            rc = zm__zshard_index(s, index, s->index_bytes, size, offsets, sizes, err);
            uint64_t inner_grid[ZM_MAX_RANK], inner[ZM_MAX_RANK] = {0};
            for (unsigned d = 0; d < a->rank; d++)
                inner_grid[d] = a->chunks[d] / s->inner[d];
            for (uint64_t i = 0; rc == 0 && i < s->per_shard; i++) {
                uint64_t at[ZM_MAX_RANK];
                for (unsigned d = 0; d < a->rank; d++)
                    at[d] = origin[d] + inner[d] * s->inner[d];
                if (offsets[i] == UINT64_MAX)
                    fill_block(w, a, at, s->inner);
                else
                    rc = decode_block(w, a, s->codecs, s->codec_count, at, s->inner,
                                      bytes + offsets[i], (size_t)sizes[i], err);
                next_coords(inner, inner_grid, a->rank);
            }
            free(offsets);
            free(sizes);
        }
        free(bytes);
        if (rc < 0) {
            whole_free(w);
            return rc;
        }
    } while (next_coords(coords, grid, a->rank));
    return 0;
}

static void sha256_hex(const uint8_t *bytes, size_t size, char out[65])
{
    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, size, bytes);
    sha256_digest(&ctx, sizeof digest, digest);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        sprintf(out + 2 * i, "%02x", digest[i]);
}

/* The array's values against what the writer put in (or zarr read). */
static void check_values(const char *label, const zm__zarray *a, const whole *w, json_t *expect)
{
    json_t *strings = json_object_get(expect, "strings");
    if (strings != NULL) {
        cr_assert_eq(a->value, ZM__ZVALUE_VLEN, "%s: strings expected", label);
        cr_assert_eq(json_array_size(strings), w->count, "%s: %zu strings, read %llu", label,
                     json_array_size(strings), (unsigned long long)w->count);
        for (size_t i = 0; i < w->count; i++)
            cr_assert_str_eq(w->strings[i], json_string_value(json_array_get(strings, i)),
                             "%s: string %zu", label, i);
        return;
    }
    size_t size = (size_t)w->count * a->item_size;
    json_t *values = json_object_get(expect, "values");
    if (values != NULL) {
        size_t expected_size;
        uint8_t *expected = b64_decode(values, &expected_size);
        cr_assert_eq(expected_size, size, "%s: %zu bytes expected, %zu read", label, expected_size,
                     size);
        for (size_t i = 0; i < size; i++)
            if (expected[i] != w->bytes[i])
                cr_assert_fail("%s: byte %zu (value %zu) is 0x%02x, zarr-python's 0x%02x", label, i,
                               i / a->item_size, w->bytes[i], expected[i]);
        free(expected);
    }
    json_t *digest = json_object_get(expect, "sha256");
    if (digest != NULL) {
        char hex[65];
        sha256_hex(w->bytes, size, hex);
        cr_assert_str_eq(hex, json_string_value(digest), "%s: sha256 of %zu bytes", label, size);
    }
}

static const char *kind_name(zm__zvalue v)
{
    switch (v) {
    case ZM__ZVALUE_NUMBER:
        return "number";
    case ZM__ZVALUE_VLEN:
        return "vlen";
    case ZM__ZVALUE_BYTES:
        return "bytes";
    case ZM__ZVALUE_UNICODE:
        return "unicode";
    case ZM__ZVALUE_RECORDS:
        return "records";
    }
    return "?";
}

/* ---- CRC-32C --------------------------------------------------------------------- */

/* A part of a zstd chunk of many blocks (a frame zstd itself wrote, with
 * its checksum, and two frames back to back), decoded alone: with room
 * for the whole chunk block by block, with room for the part through the
 * stream decoder; the same bytes as the whole chunk's, and a stream cut
 * short an error, never a part made up. */
Test(zarr_codecs, zstd_prefix_block_by_block)
{
    const size_t values = 1u << 19; /* 2 MiB of int32: sixteen 128 KiB blocks */
    uint32_t *plain = malloc(values * 4), *out = malloc(values * 4);
    uint32_t state = 12345;
    for (size_t i = 0; i < values; i++) {
        state = state * 1103515245u + 12345u;
        plain[i] = (uint32_t)i / 7 + (state >> 28); /* compressible, not trivially */
    }
    size_t bound = ZSTD_compressBound(values * 4);
    uint8_t *frame = malloc(2 * bound);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    size_t size = ZSTD_compress2(cctx, frame, bound, plain, values * 4);
    cr_assert(!ZSTD_isError(size));
    /* The second frame: the upper half again, after the lower half's frame. */
    size_t half = ZSTD_compress2(cctx, frame + bound, bound, plain, values * 2);
    size_t upper = ZSTD_compress2(cctx, frame + bound + half, bound - half, plain + values / 2,
                                  values * 2);
    cr_assert(!ZSTD_isError(half) && !ZSTD_isError(upper));
    ZSTD_freeCCtx(cctx);
    zm__zcodec chain[2];
    memset(chain, 0, sizeof chain);
    chain[0].id = ZM__ZCODEC_BYTES;
    chain[0].word_size = 4;
    snprintf(chain[0].name, sizeof chain[0].name, "bytes");
    chain[1].id = ZM__ZCODEC_ZSTD;
    snprintf(chain[1].name, sizeof chain[1].name, "zstd");
    uint64_t shape[1] = {values};
    const size_t parts[] = {4, 4000, 131072, 131076, 1000000, values * 2 + 4, values * 4 - 4,
                            values * 4};
    for (int two = 0; two < 2; two++) {
        const uint8_t *in = two ? frame + bound : frame;
        size_t in_size = two ? half + upper : size;
        for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
            for (int room = 0; room < 2; room++) {
                zm_err err;
                zm_err_clear(&err);
                memset(out, 0xAB, values * 4);
                size_t capacity = room ? values * 4 : parts[p];
                int rc = zm__zarr_decode_prefix(chain, 2, 0, 1, shape, 4, in, in_size,
                                                (uint8_t *)out, capacity, parts[p], &err);
                cr_assert_eq(rc, 1, "%s frame(s), %zu bytes, capacity %zu: %d (%s)",
                             two ? "two" : "one", parts[p], capacity, rc, err.reason);
                cr_assert(memcmp(out, plain, parts[p]) == 0, "%zu bytes: other values",
                          parts[p]);
            }
        }
        /* Cut short: the part that lies past the cut is an error. */
        for (int room = 0; room < 2; room++) {
            zm_err err;
            zm_err_clear(&err);
            int rc = zm__zarr_decode_prefix(chain, 2, 0, 1, shape, 4, in, in_size / 2,
                                            (uint8_t *)out, room ? values * 4 : values * 4 - 4,
                                            values * 4 - 4, &err);
            cr_assert_eq(rc, -EIO, "cut short: %d", rc);
            cr_assert(strstr(err.reason, "zstd") != NULL, "%s", err.reason);
        }
    }
    free(plain);
    free(out);
    free(frame);
}

Test(zarr_codecs, crc32c_known_vectors)
{
    /* The check value of the Castagnoli CRC, and RFC 3720's B.4 vectors. */
    cr_assert_eq(zm__crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
    cr_assert_eq(zm__crc32c(NULL, 0), 0u);
    uint8_t b[32];
    memset(b, 0, sizeof b);
    cr_assert_eq(zm__crc32c(b, 32), 0x8A9136AAu);
    memset(b, 0xff, sizeof b);
    cr_assert_eq(zm__crc32c(b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    cr_assert_eq(zm__crc32c(b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    cr_assert_eq(zm__crc32c(b, 32), 0x113FDB5Cu);
}

/* ---- the stores zarr-python wrote --------------------------------------------------- */

/* The names of codecs of a chain, the implied v2 byte order left out. */
static void check_chain(const char *label, const zm__zcodec *codecs, unsigned count, json_t *names,
                        bool implied_bytes)
{
    unsigned skip = implied_bytes && count > 0 && codecs[0].id == ZM__ZCODEC_BYTES ? 1 : 0;
    cr_assert_eq(count - skip, json_array_size(names), "%s: %u codecs, the metadata lists %zu",
                 label, count - skip, json_array_size(names));
    for (unsigned i = skip; i < count; i++)
        cr_assert_str_eq(codecs[i].name, json_string_value(json_array_get(names, i - skip)),
                         "%s: codec %u", label, i);
}

static void check_written_store(const char *store_name, const char *expected_name, int format)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir(), store_name);
    opened o;
    open_ok(path, &o);
    cr_assert_eq(zm__ztree_format(o.tree), format);
    cr_assert_eq(zm__ztree_consolidated(o.tree), 0);
    cr_assert_gt(zm__ztree_bytes_read(o.tree), 0);
    json_t *doc = load_gz_json(expected_name);
    json_t *arrays = json_object_get(doc, "arrays");
    const char *name;
    json_t *e;
    size_t checked = 0;
    json_object_foreach(arrays, name, e)
    {
        const zm__znode *node = node_ok(&o, name);
        cr_assert_eq(node->kind, ZM__ZNODE_ARRAY, "%s", name);
        const zm__zarray *a = node->array;
        cr_assert_eq(a->zarr_format, format);
        cr_assert_str_eq(kind_name(a->value), json_string_value(json_object_get(e, "kind")),
                         "%s: value kind", name);
        unsigned rank;
        uint64_t dims[ZM_MAX_RANK];
        dims_from_json(json_object_get(e, "shape"), &rank, dims);
        cr_assert_eq(a->rank, rank, "%s: rank", name);
        for (unsigned d = 0; d < rank; d++)
            cr_assert_eq(a->shape[d], dims[d], "%s: shape[%u]", name, d);
        dims_from_json(json_object_get(e, "chunks"), &rank, dims);
        for (unsigned d = 0; d < rank; d++)
            cr_assert_eq(a->chunks[d], dims[d], "%s: chunks[%u]", name, d);
        if (format == 2) {
            const char *dt = json_string_value(json_object_get(e, "dtype"));
            if (strcmp(dt, "records") != 0 && a->value != ZM__ZVALUE_VLEN)
                cr_assert_str_eq(a->dtype_name, dt, "%s: dtype", name);
            cr_assert_eq(a->fortran_order,
                         strcmp(json_string_value(json_object_get(e, "order")), "F") == 0);
        }
        check_chain(name, a->codecs, a->codec_count, json_object_get(e, "codecs"), format == 2);
        json_t *inner = json_object_get(e, "inner");
        if (inner != NULL) {
            cr_assert_not_null(a->shard, "%s: sharded", name);
            dims_from_json(inner, &rank, dims);
            for (unsigned d = 0; d < rank; d++)
                cr_assert_eq(a->shard->inner[d], dims[d], "%s: inner[%u]", name, d);
            check_chain(name, a->shard->codecs, a->shard->codec_count,
                        json_object_get(e, "shard_codecs"), false);
            cr_assert_eq(a->shard->index_at_start,
                         strcmp(json_string_value(json_object_get(e, "index_location")), "start") ==
                             0);
        } else {
            cr_assert_null(a->shard, "%s: not sharded", name);
        }
        /* The fill, as numpy makes it of the metadata's fill_value. */
        json_t *fill = json_object_get(e, "fill");
        if (json_is_null(fill)) {
            cr_assert(a->fill_missing, "%s: no fill", name);
            cr_assert_not_null(a->fill_bytes, "%s: the zero for no fill", name);
        } else if (a->value == ZM__ZVALUE_VLEN) {
            cr_assert(!a->fill_missing, "%s: a fill", name);
            cr_assert_str_eq((const char *)a->fill_bytes, json_string_value(fill), "%s: fill",
                             name);
        } else {
            size_t size;
            uint8_t *expected = b64_decode(fill, &size);
            cr_assert(!a->fill_missing, "%s: a fill", name);
            cr_assert_eq(a->fill_size, size, "%s: fill size", name);
            cr_assert_eq(memcmp(a->fill_bytes, expected, size), 0, "%s: fill bytes", name);
            if (size <= sizeof a->fill)
                cr_assert_eq(memcmp(a->fill, expected, size), 0, "%s: fill[]", name);
            free(expected);
        }
        /* Every value, through every chunk (missing ones as the fill). */
        whole w;
        zm_err err;
        json_t *missing = json_array();
        int rc = read_whole(&o, name, &w, missing, &err);
        if (strstr(name, "snappy") != NULL && strstr(blosc_list_compressors(), "snappy") == NULL) {
            /* This c-blosc was built without snappy: a codec we lack. */
            cr_assert_eq(rc, -ENOTSUP, "%s: %d %s", name, rc, err.reason);
            cr_assert(strstr(err.reason, "Snappy") != NULL, "%s: %s", name, err.reason);
            json_decref(missing);
            continue;
        }
        cr_assert_eq(rc, 0, "%s: %d %s", name, rc, err.reason);
        check_values(name, a, &w, e);
        /* The chunk keys zarr-python wrote: every key of the grid is a file
         * or one the writer left out. */
        cr_assert(json_equal(missing, json_object_get(e, "missing")), "%s: missing chunks", name);
        json_decref(missing);
        whole_free(&w);
        checked++;
    }
    cr_assert_gt(checked, 25);
    /* The root lists each top-level group of the arrays, and the empty one. */
    zm_strings names;
    zm_err err;
    cr_assert_eq(zm__ztree_children(o.tree, "", &names, &err), 0, "%s", err.reason);
    json_t *wanted = json_array();
    json_object_foreach(arrays, name, e)
    {
        char top[256];
        snprintf(top, sizeof top, "%.*s", (int)strcspn(name, "/"), name);
        size_t i;
        json_t *v;
        bool seen = false;
        json_array_foreach(wanted, i, v) seen = seen || strcmp(json_string_value(v), top) == 0;
        if (!seen)
            json_array_append_new(wanted, json_string(top));
    }
    json_array_append_new(wanted, json_string("empty_group"));
    cr_assert_eq(names.count, json_array_size(wanted), "root: %zu children, %zu expected",
                 names.count, json_array_size(wanted));
    for (size_t i = 0; i + 1 < names.count; i++)
        cr_assert_lt(strcmp(names.bytes + names.offsets[i], names.bytes + names.offsets[i + 1]), 0);
    zm_strings_free(&names);
    json_decref(wanted);
    cr_assert_eq(zm__ztree_children(o.tree, "empty_group", &names, &err), 0, "%s", err.reason);
    cr_assert_eq(names.count, 0);
    zm_strings_free(&names);
    const zm__znode *group = node_ok(&o, "empty_group");
    cr_assert_str_eq(json_string_value(json_object_get(group->attributes, "note")), "no children");
    group = node_ok(&o, "");
    cr_assert_str_eq(json_string_value(json_object_get(group->attributes, "purpose")),
                     "tests/test_zarr_meta.c");
    json_decref(doc);
    close_store(&o);
}

Test(zarr_meta, v2_store_by_zarr_2)
{
    check_written_store("v2", "expected-v2.json.gz", 2);
}

Test(zarr_meta, v3_store_by_zarr_3)
{
    check_written_store("v3", "expected-v3.json.gz", 3);
}

/* Two trees hold the same nodes: every group's children and every node's
 * kind, attributes and array. */
static void compare_trees(opened *a, opened *b, const char *path, size_t *nodes)
{
    const zm__znode *x = node_ok(a, path), *y = node_ok(b, path);
    (*nodes)++;
    cr_assert_eq(x->kind, y->kind, "%s: kind", path);
    cr_assert(json_equal(x->attributes, y->attributes), "%s: attributes", path);
    if (x->kind == ZM__ZNODE_ARRAY) {
        const zm__zarray *p = x->array, *q = y->array;
        cr_assert_eq(p->rank, q->rank, "%s", path);
        cr_assert_eq(memcmp(p->shape, q->shape, sizeof p->shape), 0, "%s", path);
        cr_assert_eq(memcmp(p->chunks, q->chunks, sizeof p->chunks), 0, "%s", path);
        cr_assert_str_eq(p->dtype_name, q->dtype_name, "%s", path);
        cr_assert_eq(p->codec_count, q->codec_count, "%s", path);
        for (unsigned i = 0; i < p->codec_count; i++)
            cr_assert_str_eq(p->codecs[i].name, q->codecs[i].name, "%s", path);
        cr_assert_eq(p->fill_missing, q->fill_missing, "%s", path);
        cr_assert_eq(p->fill_size, q->fill_size, "%s", path);
        if (!p->fill_missing)
            cr_assert_eq(memcmp(p->fill_bytes, q->fill_bytes, p->fill_size), 0, "%s", path);
        return;
    }
    zm_strings m, n;
    zm_err err;
    cr_assert_eq(zm__ztree_children(a->tree, path, &m, &err), 0, "%s: %s", path, err.reason);
    cr_assert_eq(zm__ztree_children(b->tree, path, &n, &err), 0, "%s: %s", path, err.reason);
    cr_assert_eq(m.count, n.count, "%s: %zu and %zu children", path, m.count, n.count);
    for (size_t i = 0; i < m.count; i++) {
        char child[4096];
        size_t len = (size_t)(m.offsets[i + 1] - m.offsets[i]);
        cr_assert_eq(len, n.offsets[i + 1] - n.offsets[i]);
        cr_assert_eq(memcmp(m.bytes + m.offsets[i], n.bytes + n.offsets[i], len), 0,
                     "%s: child %zu", path, i);
        snprintf(child, sizeof child, "%s%s%.*s", path, path[0] ? "/" : "", (int)len,
                 m.bytes + m.offsets[i]);
        compare_trees(a, b, child, nodes);
    }
    zm_strings_free(&m);
    zm_strings_free(&n);
}

static void check_consolidated_copy(const char *lazy_name, const char *consolidated_name)
{
    char p[4096], q[4096];
    snprintf(p, sizeof p, "%s/%s", data_dir(), lazy_name);
    snprintf(q, sizeof q, "%s/%s", data_dir(), consolidated_name);
    opened a, b;
    open_ok(p, &a);
    open_ok(q, &b);
    cr_assert_eq(zm__ztree_consolidated(a.tree), 0);
    cr_assert_eq(zm__ztree_consolidated(b.tree), 1);
    size_t nodes = 0;
    compare_trees(&a, &b, "", &nodes);
    cr_assert_gt(nodes, 40);
    const zm__znode *node;
    zm_err err;
    cr_assert_eq(zm__ztree_node(b.tree, "no/such", &node, &err), -ENOENT);
    cr_assert_eq(zm__ztree_node(a.tree, "no/such", &node, &err), -ENOENT);
    close_store(&a);
    close_store(&b);
}

Test(zarr_meta, v2_consolidated_is_the_same_tree)
{
    check_consolidated_copy("v2", "v2-consolidated");
}

Test(zarr_meta, v3_consolidated_is_the_same_tree)
{
    check_consolidated_copy("v3", "v3-consolidated");
}

/* ---- the real stores ------------------------------------------------------------------ */

/* The node's metadata against its own JSON document, read here. */
static void check_against_json(opened *o, const char *path, json_t *doc, int format)
{
    const zm__znode *node = node_ok(o, path);
    if (format == 3) {
        const char *type = json_string_value(json_object_get(doc, "node_type"));
        cr_assert_eq(node->kind, strcmp(type, "array") == 0 ? ZM__ZNODE_ARRAY : ZM__ZNODE_GROUP,
                     "%s", path);
        json_t *attrs = json_object_get(doc, "attributes");
        cr_assert(json_equal(node->attributes, attrs ? attrs : json_object()), "%s", path);
        if (node->kind != ZM__ZNODE_ARRAY)
            return;
    } else if (node->kind != ZM__ZNODE_ARRAY) {
        return;
    }
    const zm__zarray *a = node->array;
    unsigned rank;
    uint64_t dims[ZM_MAX_RANK];
    dims_from_json(json_object_get(doc, "shape"), &rank, dims);
    cr_assert_eq(a->rank, rank, "%s", path);
    for (unsigned d = 0; d < rank; d++)
        cr_assert_eq(a->shape[d], dims[d], "%s: shape", path);
    json_t *chunks =
        format == 2
            ? json_object_get(doc, "chunks")
            : json_object_get(json_object_get(json_object_get(doc, "chunk_grid"), "configuration"),
                              "chunk_shape");
    dims_from_json(chunks, &rank, dims);
    for (unsigned d = 0; d < rank; d++)
        cr_assert_eq(a->chunks[d], dims[d], "%s: chunks", path);
    cr_assert_eq(zm__zarray_supported(a, NULL), 0, "%s: %s", path, a->unsupported);
    json_t *fill = json_object_get(doc, "fill_value");
    if (json_is_null(fill))
        cr_assert(a->fill_missing, "%s: fill null", path);
    if (format == 2) {
        json_t *dtype = json_object_get(doc, "dtype");
        if (json_is_string(dtype))
            cr_assert_str_eq(a->dtype_name, json_string_value(dtype), "%s", path);
        else
            cr_assert_eq(a->field_count, json_array_size(dtype), "%s: fields", path);
        json_t *names = json_array();
        json_t *filters = json_object_get(doc, "filters");
        size_t i;
        json_t *f;
        json_array_foreach(filters, i, f) json_array_append(names, json_object_get(f, "id"));
        if (json_is_object(json_object_get(doc, "compressor")))
            json_array_append(names, json_object_get(json_object_get(doc, "compressor"), "id"));
        check_chain(path, a->codecs, a->codec_count, names, true);
        json_decref(names);
        json_t *sep = json_object_get(doc, "dimension_separator");
        cr_assert_eq(a->separator, sep ? json_string_value(sep)[0] : '.', "%s", path);
        cr_assert_eq(a->fortran_order,
                     strcmp(json_string_value(json_object_get(doc, "order")), "F") == 0);
        return;
    }
    json_t *dt = json_object_get(doc, "data_type");
    if (json_is_string(dt))
        cr_assert_str_eq(a->dtype_name, json_string_value(dt), "%s", path);
    else
        cr_assert_eq(
            a->field_count,
            json_array_size(json_object_get(json_object_get(dt, "configuration"), "fields")),
            "%s: fields", path);
    json_t *encoding = json_object_get(doc, "chunk_key_encoding");
    cr_assert_eq(a->key_prefix_c,
                 strcmp(json_string_value(json_object_get(encoding, "name")), "default") == 0);
    json_t *sep = json_object_get(json_object_get(encoding, "configuration"), "separator");
    cr_assert_eq(a->separator, json_string_value(sep)[0], "%s", path);
    json_t *codecs = json_object_get(doc, "codecs");
    json_t *names = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(codecs, i, c) json_array_append(names, json_object_get(c, "name"));
    check_chain(path, a->codecs, a->codec_count, names, false);
    json_decref(names);
    json_t *first = json_array_get(codecs, 0);
    if (strcmp(json_string_value(json_object_get(first, "name")), "sharding_indexed") != 0) {
        cr_assert_null(a->shard, "%s", path);
        return;
    }
    json_t *config = json_object_get(first, "configuration");
    const zm__zshard *s = a->shard;
    cr_assert_not_null(s, "%s", path);
    dims_from_json(json_object_get(config, "chunk_shape"), &rank, dims);
    uint64_t per = 1;
    for (unsigned d = 0; d < rank; d++) {
        cr_assert_eq(s->inner[d], dims[d], "%s: inner", path);
        per *= a->chunks[d] / dims[d];
    }
    cr_assert_eq(s->per_shard, per, "%s", path);
    json_t *location = json_object_get(config, "index_location");
    cr_assert_eq(s->index_at_start,
                 location != NULL && strcmp(json_string_value(location), "start") == 0);
    names = json_array();
    json_array_foreach(json_object_get(config, "codecs"), i, c)
        json_array_append(names, json_object_get(c, "name"));
    check_chain(path, s->codecs, s->codec_count, names, false);
    json_decref(names);
    size_t crcs = 0;
    names = json_array();
    json_array_foreach(json_object_get(config, "index_codecs"), i, c)
    {
        json_array_append(names, json_object_get(c, "name"));
        crcs += strcmp(json_string_value(json_object_get(c, "name")), "crc32c") == 0;
    }
    check_chain(path, s->index_codecs, s->index_codec_count, names, false);
    json_decref(names);
    cr_assert_eq(s->index_bytes, 16 * per + 4 * crcs, "%s: index bytes", path);
}

/* Collects the files below dir (relative to it), metadata left out. */
static void list_files(const char *dir, const char *relative, json_t *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", dir, relative[0] ? "/" : "", relative);
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || e->d_name[1] == 'z' ||
                                    (e->d_name[1] == '.' && e->d_name[2] == '\0')))
            continue;
        if (strcmp(e->d_name, "zarr.json") == 0)
            continue;
        char child[4096];
        snprintf(child, sizeof child, "%s%s%s", relative, relative[0] ? "/" : "", e->d_name);
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, child);
        struct stat st;
        stat(full, &st);
        if (S_ISDIR(st.st_mode)) {
            /* A child node has its own document: not this array's chunks. */
            char doc[8300], doc2[8300];
            snprintf(doc, sizeof doc, "%s/zarr.json", full);
            snprintf(doc2, sizeof doc2, "%s/.zarray", full);
            if (access(doc, F_OK) == 0 || access(doc2, F_OK) == 0)
                continue;
            list_files(dir, child, out);
        } else {
            json_array_append_new(out, json_string(child));
        }
    }
    closedir(d);
}

/* Every chunk file zarr-python wrote for the array is the key of one place
 * of its grid. */
static void check_chunk_files(opened *o, const char *store_dir, const char *path)
{
    const zm__zarray *a = node_ok(o, path)->array;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", store_dir, path);
    json_t *files = json_array();
    list_files(dir, "", files);
    json_t *keys = json_object();
    uint64_t grid[ZM_MAX_RANK], coords[ZM_MAX_RANK] = {0};
    for (unsigned d = 0; d < a->rank; d++)
        grid[d] = (a->shape[d] + a->chunks[d] - 1) / a->chunks[d];
    cr_assert_lt(product(grid, a->rank), 200000);
    if (product(grid, a->rank) > 0)
        do {
            char key[4096];
            cr_assert_eq(zm__zarray_chunk_key(a, "", coords, key, sizeof key), 0);
            json_object_set_new(keys, key, json_true());
        } while (next_coords(coords, grid, a->rank));
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f)
        cr_assert_not_null(json_object_get(keys, json_string_value(f)),
                           "%s: file %s is no chunk key of the grid", path, json_string_value(f));
    cr_assert(json_array_size(files) > 0 || product(grid, a->rank) == 0 || a->fill_bytes != NULL,
              "%s: no chunk file", path);
    json_decref(files);
    json_decref(keys);
}

static size_t check_real_metadata(opened *o, const char *store_dir, int format)
{
    size_t arrays = 0;
    char path[4096];
    if (format == 3) {
        snprintf(path, sizeof path, "%s/zarr.json", store_dir);
        json_t *root = json_load_file(path, 0, NULL);
        cr_assert_not_null(root);
        check_against_json(o, "", root, 3);
        json_t *metadata =
            json_object_get(json_object_get(root, "consolidated_metadata"), "metadata");
        cr_assert(json_is_object(metadata), "%s: consolidated", store_dir);
        const char *key;
        json_t *doc;
        json_object_foreach(metadata, key, doc)
        {
            check_against_json(o, key, doc, 3);
            /* The node's own zarr.json says the same. */
            snprintf(path, sizeof path, "%s/%s/zarr.json", store_dir, key);
            json_t *own = json_load_file(path, 0, NULL);
            cr_assert_not_null(own, "%s", path);
            check_against_json(o, key, own, 3);
            if (strcmp(json_string_value(json_object_get(doc, "node_type")), "array") == 0) {
                check_chunk_files(o, store_dir, key);
                arrays++;
            }
            json_decref(own);
        }
        json_decref(root);
        return arrays;
    }
    snprintf(path, sizeof path, "%s/.zmetadata", store_dir);
    json_t *root = json_load_file(path, 0, NULL);
    if (root != NULL) {
        json_t *metadata = json_object_get(root, "metadata");
        const char *key;
        json_t *doc;
        json_object_foreach(metadata, key, doc)
        {
            size_t n = strlen(key);
            if (n < 7 || strcmp(key + n - 7, ".zarray") != 0)
                continue;
            char node[4096];
            snprintf(node, sizeof node, "%.*s", (int)(n > 8 ? n - 8 : 0), key);
            check_against_json(o, node, doc, 2);
            check_chunk_files(o, store_dir, node);
            arrays++;
        }
        json_decref(root);
        return arrays;
    }
    /* Not consolidated: each array's .zarray below the root. */
    zm_strings names;
    zm_err err;
    cr_assert_eq(zm__ztree_children(o->tree, "", &names, &err), 0, "%s", err.reason);
    for (size_t i = 0; i < names.count; i++) {
        char node[4096];
        snprintf(node, sizeof node, "%.*s", (int)(names.offsets[i + 1] - names.offsets[i]),
                 names.bytes + names.offsets[i]);
        snprintf(path, sizeof path, "%s/%s/.zarray", store_dir, node);
        json_t *doc = json_load_file(path, 0, NULL);
        if (doc == NULL)
            continue;
        check_against_json(o, node, doc, 2);
        check_chunk_files(o, store_dir, node);
        arrays++;
        json_decref(doc);
    }
    zm_strings_free(&names);
    return arrays;
}

static void check_real(const char *expected_name, const char *const *stores, size_t count)
{
    const char *shared = shared_dir();
    if (shared == NULL)
        cr_skip_test("$ZM_SHARED_DATA (../shared/data) is not here: the real stores are not read");
    json_t *doc = load_gz_json(expected_name);
    for (size_t s = 0; s < count; s++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", shared, stores[s]);
        const char *base = strrchr(stores[s], '/') + 1;
        json_t *record = json_object_get(doc, base);
        cr_assert_not_null(record, "%s has no record", base);
        opened o;
        open_ok(dir, &o);
        int format = (int)json_integer_value(json_object_get(record, "format"));
        cr_assert_eq(zm__ztree_format(o.tree), format, "%s", base);
        cr_assert_eq(zm__ztree_consolidated(o.tree),
                     json_is_true(json_object_get(record, "consolidated")), "%s", base);
        const char *group;
        json_t *names;
        json_object_foreach(json_object_get(record, "children"), group, names)
        {
            zm_strings got;
            zm_err err;
            cr_assert_eq(zm__ztree_children(o.tree, group, &got, &err), 0, "%s: %s", base,
                         err.reason);
            cr_assert_eq(got.count, json_array_size(names), "%s %s: %zu children, zarr %zu", base,
                         group, got.count, json_array_size(names));
            for (size_t i = 0; i < got.count; i++) {
                const char *want = json_string_value(json_array_get(names, i));
                cr_assert_eq(got.offsets[i + 1] - got.offsets[i], strlen(want));
                cr_assert_eq(memcmp(got.bytes + got.offsets[i], want, strlen(want)), 0,
                             "%s %s: child %zu is not %s", base, group, i, want);
            }
            zm_strings_free(&got);
        }
        const char *path;
        json_t *e;
        json_object_foreach(json_object_get(record, "arrays"), path, e)
        {
            whole w;
            zm_err err;
            int rc = read_whole(&o, path, &w, NULL, &err);
            cr_assert_eq(rc, 0, "%s %s: %d %s", base, path, rc, err.reason);
            const zm__zarray *a = node_ok(&o, path)->array;
            char label[512];
            snprintf(label, sizeof label, "%s %s", base, path);
            cr_assert_str_eq(kind_name(a->value), json_string_value(json_object_get(e, "kind")),
                             "%s", label);
            check_values(label, a, &w, e);
            whole_free(&w);
        }
        size_t arrays = check_real_metadata(&o, dir, format);
        cr_assert_gt(arrays, 2, "%s: arrays checked against their JSON", base);
        close_store(&o);
    }
    json_decref(doc);
}

Test(zarr_meta, real_v2_stores)
{
    static const char *const stores[] = {"modern/modern-tiny-300x120.v2.zarr",
                                         "zarr/10x-10k-subset.legacy-0.6.zarr"};
    check_real("real-v2.json.gz", stores, 2);
}

Test(zarr_meta, real_v3_stores)
{
    static const char *const stores[] = {
        "modern/modern-tiny-300x120.v3.zarr", "modern/modern-tiny-300x120.v3-unsharded.zarr",
        "modern/modern-tiny-300x120.v3-sharded.zarr", "zarr/pbmc68k_reduced.zarr"};
    check_real("real-v3.json.gz", stores, 4);
}

/* ---- damaged and hostile metadata --------------------------------------------------- */

/* A store made here: files (name, content) under a fresh directory. */
typedef struct scratch {
    char dir[4096];
} scratch;

static void write_file(scratch *s, const char *name, const char *text, size_t size)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    for (char *p = path + strlen(s->dir) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    fwrite(text, 1, size, f);
    fclose(f);
}

static void put(scratch *s, const char *name, const char *text)
{
    write_file(s, name, text, strlen(text));
}

static void scratch_make(scratch *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/zm-zarr-meta-XXXXXX");
    cr_assert_not_null(mkdtemp(s->dir));
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char child[8192];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(child);
            else
                unlink(child);
        }
        closedir(d);
    }
    rmdir(path);
}

/* An array's .zarray (v2) with one field changed; the node's outcome. */
static const char *V2_GROUP = "{\"zarr_format\": 2}";

static int v2_array(const char *zarray, zm_err *err, opened *o, scratch *s)
{
    scratch_make(s);
    put(s, ".zgroup", V2_GROUP);
    put(s, "a/.zarray", zarray);
    int rc = open_store(s->dir, o, err);
    cr_assert_eq(rc, 0, "%s", err->reason);
    const zm__znode *node;
    return zm__ztree_node(o->tree, "a", &node, err);
}

static void v2_array_refused(const char *zarray, int code, const char *words)
{
    opened o;
    scratch s;
    zm_err err;
    int rc = v2_array(zarray, &err, &o, &s);
    cr_assert_eq(rc, code, "%s: %d (%s)", zarray, rc, err.reason);
    cr_assert(strstr(err.reason, "a/.zarray") != NULL, "the reason names the key: %s", err.reason);
    if (words != NULL)
        cr_assert(strstr(err.reason, words) != NULL, "\"%s\" does not say %s", err.reason, words);
    close_store(&o);
    remove_tree(s.dir);
}

#define ZARRAY(shape, chunks, dtype, fill, compressor, filters)                                    \
    "{\"zarr_format\": 2, \"shape\": " shape ", \"chunks\": " chunks ", \"dtype\": " dtype         \
    ", \"fill_value\": " fill ", \"order\": \"C\", \"compressor\": " compressor                    \
    ", \"filters\": " filters "}"

Test(zarr_meta, v2_bad_arrays_refused)
{
    v2_array_refused("{\"zarr_format\": 2, \"shape\": [3]", -EINVAL, "not valid JSON");
    v2_array_refused("[1, 2]", -EINVAL, "not a JSON object");
    v2_array_refused(ZARRAY("[3]", "[0]", "\"<f4\"", "0", "null", "null"), -EINVAL, "chunks[0]");
    v2_array_refused(ZARRAY("[3]", "[2, 2]", "\"<f4\"", "0", "null", "null"), -EINVAL,
                     "dimensions");
    v2_array_refused(
        ZARRAY("[1,1,1,1,1,1,1,1,1]", "[1,1,1,1,1,1,1,1,1]", "\"<f4\"", "0", "null", "null"),
        -EINVAL, "at most 8");
    v2_array_refused(ZARRAY("[-3]", "[2]", "\"<f4\"", "0", "null", "null"), -EINVAL, "shape");
    v2_array_refused(ZARRAY("\"3\"", "[2]", "\"<f4\"", "0", "null", "null"), -EINVAL, "shape");
    v2_array_refused(
        ZARRAY("[4294967296, 4294967296, 4294967296]", "[1, 1, 1]", "\"<f4\"", "0", "null", "null"),
        -EINVAL, "2^64");
    v2_array_refused(ZARRAY("[10]", "[4611686018427387904]", "\"<f8\"", "0", "null", "null"),
                     -EINVAL, "chunks");
    v2_array_refused(ZARRAY("[3]", "[2]", "\"<q9\"", "0", "null", "null"), -EINVAL, "dtype");
    v2_array_refused(ZARRAY("[3]", "[2]", "42", "0", "null", "null"), -EINVAL, "dtype");
    v2_array_refused(ZARRAY("[3]", "[2]", "\"<i4\"", "\"abc\"", "null", "null"), -EINVAL,
                     "fill_value");
    v2_array_refused(ZARRAY("[3]", "[2]", "\"|u1\"", "256", "null", "null"), -EINVAL, "fill_value");
    v2_array_refused(ZARRAY("[3]", "[2]", "\"<i4\"", "0", "\"zstd\"", "null"), -EINVAL,
                     "compressor");
    v2_array_refused(ZARRAY("[3]", "[2]", "\"<i4\"", "0", "{\"level\": 1}", "null"), -EINVAL,
                     "compressor");
    v2_array_refused(ZARRAY("[3]", "[2]", "\"<i4\"", "0", "null", "[{\"id\": \"vlen-utf8\"}]"),
                     -EINVAL, "vlen-utf8");
    v2_array_refused(ZARRAY("[3]", "[2]", "\"<i4\"", "0", "null", "{}"), -EINVAL, "filters");
    v2_array_refused(
        ZARRAY("[3]", "[2]", "[[\"a\", \"<i4\"], [\"a\", \"<f8\"]]", "null", "null", "null"),
        -EINVAL, "twice");
    v2_array_refused("{\"zarr_format\": 3, \"shape\": [3], \"chunks\": [2], \"dtype\": \"<i4\","
                     " \"fill_value\": 0, \"order\": \"C\", \"compressor\": null, "
                     "\"filters\": null}",
                     -EINVAL, "zarr_format");
    v2_array_refused("{\"zarr_format\": 2, \"shape\": [3], \"chunks\": [2], \"dtype\": \"<i4\","
                     " \"fill_value\": 0, \"order\": \"K\", \"compressor\": null, "
                     "\"filters\": null}",
                     -EINVAL, "order");
    v2_array_refused("{\"zarr_format\": 2, \"shape\": [3], \"chunks\": [2], \"dtype\": \"<i4\","
                     " \"order\": \"C\", \"compressor\": null, \"filters\": null}",
                     -EINVAL, "fill_value");
}

/* Valid metadata whose array we cannot read: the node opens, and says why
 * (zm__zarray_supported), naming the codec or type. */
static void v2_array_unsupported(const char *zarray, const char *words)
{
    opened o;
    scratch s;
    zm_err err;
    int rc = v2_array(zarray, &err, &o, &s);
    cr_assert_eq(rc, 0, "%s: %s", zarray, err.reason);
    const zm__znode *node = node_ok(&o, "a");
    rc = zm__zarray_supported(node->array, &err);
    cr_assert_eq(rc, -ENOTSUP, "%s: %d", zarray, rc);
    cr_assert(strstr(err.reason, words) != NULL, "\"%s\" does not say %s", err.reason, words);
    close_store(&o);
    remove_tree(s.dir);
}

Test(zarr_meta, v2_unsupported_said_on_use)
{
    v2_array_unsupported(ZARRAY("[3]", "[2]", "\"<f4\"", "0", "{\"id\": \"lzma\"}", "null"),
                         "codec \"lzma\"");
    v2_array_unsupported(
        ZARRAY("[3]", "[2]", "\"<f4\"", "0", "null", "[{\"id\": \"delta\", \"dtype\": \"<f4\"}]"),
        "codec \"delta\"");
    v2_array_unsupported(ZARRAY("[3]", "[2]", "\"<f2\"", "0", "null", "null"), "float16");
    v2_array_unsupported(ZARRAY("[3]", "[2]", "\"<c8\"", "0", "null", "null"), "complex");
    v2_array_unsupported(ZARRAY("[3]", "[2]", "\"<M8[ns]\"", "0", "null", "null"), "datetime");
    v2_array_unsupported(ZARRAY("[3]", "[2]", "\"|O\"", "0", "null", "[{\"id\": \"json2\"}]"),
                         "\"json2\"");
    v2_array_unsupported(ZARRAY("[3]", "[2]", "\"|O\"", "0", "null", "null"), "object codec");
    v2_array_unsupported(
        ZARRAY("[3]", "[2]", "\"|O\"", "\"\"", "null", "[{\"id\": \"vlen-bytes\"}]"), "vlen-bytes");
    v2_array_unsupported(ZARRAY("[3]", "[2]", "[[\"a\", \"<i4\", [2]]]", "null", "null", "null"),
                         "shape");
    v2_array_unsupported(ZARRAY("[3]", "[2]", "\"<f4\"", "0",
                                "{\"id\": \"crc32c\", \"location\": \"start\"}", "null"),
                         "crc32c");
}

Test(zarr_meta, v2_fill_values)
{
    /* Each fill value as numpy makes it (zarr 2's decode_fill_value). */
    static const struct {
        const char *dtype, *fill;
        const char *bytes; /* hex of the native value; "-" first: fill_missing, then the zero */
    } cases[] = {
        {"\"<f4\"", "\"NaN\"", "0000c07f"},
        {"\"<f4\"", "NaN", "0000c07f"}, /* a bare NaN, as very old zarr wrote it */
        {"\"<f8\"", "\"Infinity\"", "000000000000f07f"},
        {"\"<f8\"", "\"-Infinity\"", "000000000000f0ff"},
        {"\"<f8\"", "-Infinity", "000000000000f0ff"},
        {"\">f8\"", "1.5", "000000000000f83f"},
        {"\"<f4\"", "\"0x3fc00000\"", "0000c03f"},
        {"\"<f4\"", "2", "00000040"},
        {"\"<i2\"", "-2", "feff"},
        {"\"<i4\"", "2.9", "02000000"},
        {"\"<u8\"", "18446744073709551615", "ffffffffffffffff"},
        {"\"<i8\"", "-9223372036854775808", "0000000000000080"},
        {"\"|b1\"", "true", "01"},
        {"\"|b1\"", "0", "00"},
        {"\"<f4\"", "null", "-00000000"},
        {"\"|S4\"", "\"YWI=\"", "61620000"},
        {"\"|S3\"", "0", "300000"},
        {"\"|S3\"", "\"abc\"", "616263"}, /* not base64: zarr 2 takes the text */
        {"\"<U2\"", "\"\\u00e9x\"", "e900000078000000"},
        {"\">U2\"", "\"ab\"", "6100000062000000"},
        {"[[\"a\", \"<i2\"], [\"b\", \"|S1\"]]", "\"AQBh\"", "010061"},
        {"[[\"a\", \"<i2\"], [\"b\", \"|S1\"]]", "0", "-000000"},
        {"\"|O\"", "0", "-"},
        {"\"|O\"", "\"n/a\"", "6e2f61"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char zarray[1024];
        snprintf(zarray, sizeof zarray,
                 "{\"zarr_format\": 2, \"shape\": [3], \"chunks\": [2], \"dtype\": %s, "
                 "\"fill_value\": %s, \"order\": \"C\", \"compressor\": null, \"filters\": %s}",
                 cases[i].dtype, cases[i].fill,
                 strcmp(cases[i].dtype, "\"|O\"") == 0 ? "[{\"id\": \"vlen-utf8\"}]" : "null");
        opened o;
        scratch s;
        zm_err err;
        int rc = v2_array(zarray, &err, &o, &s);
        cr_assert_eq(rc, 0, "%s: %s", zarray, err.reason);
        const zm__zarray *a = node_ok(&o, "a")->array;
        const char *want = cases[i].bytes;
        cr_assert_eq(a->fill_missing, want[0] == '-', "%s", zarray);
        want += want[0] == '-';
        char hex[64] = "";
        for (size_t k = 0; k < a->fill_size && k < 30; k++)
            sprintf(hex + 2 * k, "%02x", a->fill_bytes[k]);
        cr_assert_str_eq(hex, want, "%s", zarray);
        close_store(&o);
        remove_tree(s.dir);
    }
}

Test(zarr_meta, hostile_documents)
{
    scratch s;
    opened o;
    zm_err err;
    /* Not a store at all. */
    scratch_make(&s);
    put(&s, "README", "hello");
    cr_assert_eq(open_store(s.dir, &o, &err), -EINVAL);
    cr_assert(strstr(err.reason, "not a Zarr store") != NULL, "%s", err.reason);
    close_store(&o);
    remove_tree(s.dir);
    /* Nested far deeper than any metadata needs. */
    scratch_make(&s);
    char *deep = malloc(20000);
    size_t n = 0;
    /* A NaN first (the rewrite it starts is freed when the nesting is
     * refused: fuzz_zarr_meta found it leaked). */
    n += (size_t)sprintf(deep, "{\"zarr_format\": 2, \"nan\": NaN, \"x\": ");
    for (int i = 0; i < 5000; i++)
        deep[n++] = '[';
    for (int i = 0; i < 5000; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    write_file(&s, ".zgroup", deep, n);
    free(deep);
    cr_assert_eq(open_store(s.dir, &o, &err), -EINVAL);
    cr_assert(strstr(err.reason, ".zgroup") != NULL && strstr(err.reason, "nested") != NULL, "%s",
              err.reason);
    close_store(&o);
    remove_tree(s.dir);
    /* Wrong formats and kinds. */
    scratch_make(&s);
    put(&s, ".zgroup", "{\"zarr_format\": 3}");
    cr_assert_eq(open_store(s.dir, &o, &err), -EINVAL);
    cr_assert(strstr(err.reason, "zarr_format") != NULL, "%s", err.reason);
    close_store(&o);
    remove_tree(s.dir);
    scratch_make(&s);
    put(&s, "zarr.json", "{\"zarr_format\": 3, \"node_type\": \"folder\"}");
    cr_assert_eq(open_store(s.dir, &o, &err), -EINVAL);
    cr_assert(strstr(err.reason, "node_type") != NULL, "%s", err.reason);
    close_store(&o);
    remove_tree(s.dir);
    /* Consolidated metadata with a key that is no node's path. */
    scratch_make(&s);
    put(&s, ".zmetadata",
        "{\"zarr_consolidated_format\": 1, \"metadata\": {\".zgroup\": "
        "{\"zarr_format\": 2}, \"../x/.zgroup\": {\"zarr_format\": 2}}}");
    cr_assert_eq(open_store(s.dir, &o, &err), -EINVAL);
    cr_assert(strstr(err.reason, "../x/.zgroup") != NULL, "%s", err.reason);
    close_store(&o);
    remove_tree(s.dir);
    scratch_make(&s);
    put(&s, ".zmetadata", "{\"zarr_consolidated_format\": 2, \"metadata\": {}}");
    cr_assert_eq(open_store(s.dir, &o, &err), -EINVAL);
    cr_assert(strstr(err.reason, "zarr_consolidated_format") != NULL, "%s", err.reason);
    close_store(&o);
    remove_tree(s.dir);
    scratch_make(&s);
    put(&s, "zarr.json",
        "{\"zarr_format\": 3, \"node_type\": \"group\", "
        "\"consolidated_metadata\": {\"kind\": \"inline\", \"metadata\": "
        "{\"a//b\": {\"zarr_format\": 3, \"node_type\": \"group\"}}}}");
    cr_assert_eq(open_store(s.dir, &o, &err), -EINVAL);
    cr_assert(strstr(err.reason, "a//b") != NULL, "%s", err.reason);
    close_store(&o);
    remove_tree(s.dir);
    /* Attributes that are not an object; a node path with "..". */
    scratch_make(&s);
    put(&s, ".zgroup", V2_GROUP);
    put(&s, "g/.zgroup", V2_GROUP);
    put(&s, "g/.zattrs", "[1]");
    cr_assert_eq(open_store(s.dir, &o, &err), 0, "%s", err.reason);
    const zm__znode *node;
    cr_assert_eq(zm__ztree_node(o.tree, "g", &node, &err), -EINVAL);
    cr_assert(strstr(err.reason, "g/.zattrs") != NULL, "%s", err.reason);
    cr_assert_eq(zm__ztree_node(o.tree, "../g", &node, &err), -EINVAL);
    cr_assert_eq(zm__ztree_node(o.tree, "g/", &node, &err), -EINVAL);
    cr_assert_eq(zm__ztree_node(o.tree, "nothing", &node, &err), -ENOENT);
    close_store(&o);
    remove_tree(s.dir);
    /* Python's json writes NaN in attributes: the rest is read, the NaN
     * kept as the string Zarr spells it. */
    scratch_make(&s);
    put(&s, ".zgroup", V2_GROUP);
    put(&s, ".zattrs",
        "{\"x\": NaN, \"y\": [Infinity, -Infinity], \"s\": \"NaN inside\", "
        "\"big\": 98765432109876543210}");
    cr_assert_eq(open_store(s.dir, &o, &err), 0, "%s", err.reason);
    node = node_ok(&o, "");
    cr_assert_str_eq(json_string_value(json_object_get(node->attributes, "x")), "NaN");
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(node->attributes, "y"), 1)),
                     "-Infinity");
    cr_assert_str_eq(json_string_value(json_object_get(node->attributes, "s")), "NaN inside");
    cr_assert_str_eq(json_string_value(json_object_get(node->attributes, "big")),
                     "98765432109876543210");
    close_store(&o);
    remove_tree(s.dir);
}

/* A v3 array's zarr.json with the given data type, fill and codecs. */
static int v3_array(const char *fields, opened *o, scratch *s, zm_err *err)
{
    scratch_make(s);
    put(s, "zarr.json", "{\"zarr_format\": 3, \"node_type\": \"group\"}");
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"zarr_format\": 3, \"node_type\": \"array\", \"chunk_key_encoding\": "
             "{\"name\": \"default\", \"configuration\": {\"separator\": \"/\"}}, %s}",
             fields);
    put(s, "a/zarr.json", doc);
    int rc = open_store(s->dir, o, err);
    cr_assert_eq(rc, 0, "%s", err->reason);
    const zm__znode *node;
    return zm__ztree_node(o->tree, "a", &node, err);
}

#define V3_GRID(shape, chunks)                                                                     \
    "\"shape\": " shape ", \"chunk_grid\": {\"name\": \"regular\", \"configuration\": "            \
    "{\"chunk_shape\": " chunks "}}"

static void v3_refused(const char *fields, const char *words)
{
    opened o;
    scratch s;
    zm_err err;
    int rc = v3_array(fields, &o, &s, &err);
    cr_assert_eq(rc, -EINVAL, "%s: %d (%s)", fields, rc, err.reason);
    cr_assert(strstr(err.reason, "a/zarr.json") != NULL, "%s", err.reason);
    cr_assert(strstr(err.reason, words) != NULL, "\"%s\" does not say %s", err.reason, words);
    close_store(&o);
    remove_tree(s.dir);
}

static void v3_unsupported(const char *fields, const char *words)
{
    opened o;
    scratch s;
    zm_err err;
    int rc = v3_array(fields, &o, &s, &err);
    cr_assert_eq(rc, 0, "%s: %s", fields, err.reason);
    rc = zm__zarray_supported(node_ok(&o, "a")->array, &err);
    cr_assert_eq(rc, -ENOTSUP, "%s", fields);
    cr_assert(strstr(err.reason, words) != NULL, "\"%s\" does not say %s", err.reason, words);
    close_store(&o);
    remove_tree(s.dir);
}

static const char *BYTES = "{\"name\": \"bytes\", \"configuration\": {\"endian\": \"little\"}}";

Test(zarr_meta, v3_bad_and_unsupported)
{
    char f[2048];
    v3_refused(V3_GRID("[4]", "[2]") ", \"data_type\": \"int32\", \"fill_value\": 0, "
                                     "\"codecs\": []",
               "codecs");
    v3_refused(V3_GRID("[4]", "[0]") ", \"data_type\": \"int32\", \"fill_value\": 0, "
                                     "\"codecs\": [\"bytes\"]",
               "chunk_shape");
    v3_refused(V3_GRID("[4]", "[2]") ", \"data_type\": \"int32\", \"fill_value\": 0, "
                                     "\"codecs\": [\"zstd\", \"bytes\"]",
               "before the array-to-bytes");
    v3_refused(V3_GRID("[4]", "[2]") ", \"data_type\": \"string\", \"fill_value\": \"\", "
                                     "\"codecs\": [\"bytes\"]",
               "cannot encode");
    v3_refused(V3_GRID("[4]", "[2]") ", \"data_type\": \"int32\", \"fill_value\": \"x\", "
                                     "\"codecs\": [\"bytes\"]",
               "fill_value");
    v3_refused(V3_GRID("[4]", "[2]") ", \"data_type\": \"float32\", \"fill_value\": \"0x7fc0\", "
                                     "\"codecs\": [\"bytes\"]",
               "fill_value");
    v3_refused(V3_GRID("[4, 4]", "[2, 2]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                                           "\"codecs\": [{\"name\": \"transpose\", "
                                           "\"configuration\": {\"order\": [0, 0]}}, "
                                           "\"bytes\"]",
               "permutation");
    v3_refused(
        V3_GRID("[8]", "[8]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                              "\"codecs\": [{\"name\": \"sharding_indexed\", \"configuration\": "
                              "{\"chunk_shape\": [3], \"codecs\": [\"bytes\"], \"index_codecs\": "
                              "[\"bytes\", \"crc32c\"]}}]",
        "does not divide");
    v3_refused(
        V3_GRID("[8]", "[8]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                              "\"codecs\": [{\"name\": \"sharding_indexed\", \"configuration\": "
                              "{\"chunk_shape\": [4], \"codecs\": [\"bytes\"], \"index_codecs\": "
                              "[\"bytes\"], \"index_location\": \"middle\"}}]",
        "index_location");
    v3_refused(V3_GRID("[4]", "[2]") ", \"data_type\": \"int32\", \"fill_value\": 0, "
                                     "\"codecs\": [{\"name\": \"bytes\", \"configuration\": "
                                     "{\"endian\": \"mixed\"}}]",
               "endian");
    snprintf(f, sizeof f,
             V3_GRID("[4]", "[2]") ", \"data_type\": \"int32\", \"fill_value\": 0, "
                                   "\"codecs\": [%s, {\"name\": \"numcodecs.lzma\"}]",
             BYTES);
    v3_unsupported(f, "numcodecs.lzma");
    v3_unsupported(V3_GRID("[4]", "[2]") ", \"data_type\": \"float16\", \"fill_value\": 0, "
                                         "\"codecs\": [\"bytes\"]",
                   "float16");
    v3_unsupported(V3_GRID("[4]", "[2]") ", \"data_type\": \"complex64\", \"fill_value\": [0, 0], "
                                         "\"codecs\": [\"bytes\"]",
                   "complex64");
    v3_unsupported(
        V3_GRID(
            "[8]",
            "[8]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                   "\"codecs\": [{\"name\": \"sharding_indexed\", \"configuration\": "
                   "{\"chunk_shape\": [4], \"codecs\": [\"bytes\", \"lzma\"], \"index_codecs\": "
                   "[\"bytes\", \"crc32c\"]}}]",
        "lzma");
    v3_unsupported("\"shape\": [4], \"chunk_grid\": {\"name\": \"rectilinear\"}, \"data_type\": "
                   "\"int8\", \"fill_value\": 0, \"codecs\": [\"bytes\"]",
                   "rectilinear");
    v3_unsupported(
        V3_GRID("[4]",
                "[2]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                       "\"codecs\": [\"bytes\"], \"storage_transformers\": [{\"name\": \"x\"}]",
        "storage_transformers");
    v3_unsupported(
        V3_GRID("[4]", "[2]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                              "\"codecs\": [\"bytes\"], \"novel\": {\"must_understand\": true}",
        "\"novel\"");
    v3_unsupported(
        V3_GRID("[8]", "[8]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                              "\"codecs\": [{\"name\": \"sharding_indexed\", \"configuration\": "
                              "{\"chunk_shape\": [4], \"codecs\": [\"bytes\"], \"index_codecs\": "
                              "[\"bytes\", \"crc32c\"]}}, \"crc32c\"]",
        "around a shard");
    /* An extension that need not be understood is read past. */
    opened o;
    scratch s;
    zm_err err;
    cr_assert_eq(
        v3_array(V3_GRID("[4]",
                         "[2]") ", \"data_type\": \"int8\", \"fill_value\": 0, "
                                "\"codecs\": [\"bytes\"], \"novel\": {\"must_understand\": false}",
                 &o, &s, &err),
        0, "%s", err.reason);
    cr_assert_eq(zm__zarray_supported(node_ok(&o, "a")->array, &err), 0, "%s", err.reason);
    close_store(&o);
    remove_tree(s.dir);
}

/* A type whose one value claims more than the reader takes (found by
 * fuzz_zarr_meta: "<U4000000000" made the fill of 16 GB when the metadata
 * was read): valid metadata, said on use, no fill made. */
Test(zarr_meta, values_too_large_said_on_use)
{
    const char *v2_words = "more than the 65536 read";
    v2_array_unsupported(ZARRAY("[1]", "[1]", "\"<U4000000000\"", "\"\"", "null", "null"),
                         "values of 16000000000 bytes");
    v2_array_unsupported(ZARRAY("[1]", "[1]", "\"|S65537\"", "\"\"", "null", "null"), v2_words);
    v2_array_unsupported(ZARRAY("[1]", "[1]", "[[\"a\", \"|S40000\"], [\"b\", \"<U10000\"]]",
                                "null", "null", "null"),
                         v2_words);
    v3_unsupported(V3_GRID("[1]", "[1]") ", \"data_type\": {\"name\": \"fixed_length_utf32\", "
                                         "\"configuration\": {\"length_bytes\": 4000000000}}, "
                                         "\"fill_value\": \"\", \"codecs\": [\"bytes\"]",
                   "values of 4000000000 bytes");
    /* The most the reader takes is read. */
    opened o;
    scratch s;
    zm_err err;
    int rc = v2_array(ZARRAY("[1]", "[1]", "\"<U16384\"", "\"x\"", "null", "null"), &err, &o, &s);
    cr_assert_eq(rc, 0, "%s", err.reason);
    const zm__zarray *a = node_ok(&o, "a")->array;
    cr_expect_eq(zm__zarray_supported(a, &err), 0, "%s", err.reason);
    cr_expect_eq(a->fill_size, 65536);
    cr_expect(a->fill_bytes != NULL && a->fill_bytes[0] == 'x' && a->fill_bytes[4] == 0);
    close_store(&o);
    remove_tree(s.dir);
}

Test(zarr_meta, v3_types_fills_and_keys)
{
    /* Data types real files carry (pbmc68k_reduced's struct and
     * fixed_length_utf32; null_terminated_bytes) and fill forms. */
    opened o;
    scratch s;
    zm_err err;
    int rc = v3_array(
        V3_GRID("[5]",
                "[2]") ", \"data_type\": {\"name\": \"struct\", "
                       "\"configuration\": {\"fields\": [{\"name\": \"n\", \"data_type\": "
                       "{\"name\": \"fixed_length_utf32\", \"configuration\": {\"length_bytes\": "
                       "8}}}, {\"name\": \"x\", \"data_type\": \"float32\"}]}}, \"fill_value\": "
                       "{\"n\": \"0\", \"x\": 1.0}, \"codecs\": [\"bytes\", \"zstd\"]",
        &o, &s, &err);
    cr_assert_eq(rc, 0, "%s", err.reason);
    const zm__zarray *a = node_ok(&o, "a")->array;
    cr_assert_eq(a->value, ZM__ZVALUE_RECORDS);
    cr_assert_eq(a->field_count, 2);
    cr_assert_eq(a->item_size, 12);
    cr_assert_eq(a->fields[1].offset, 8);
    cr_assert_eq(a->fields[0].value, ZM__ZVALUE_UNICODE);
    static const uint8_t want[12] = {'0', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x3f};
    cr_assert_eq(a->fill_size, 12);
    cr_assert_eq(memcmp(a->fill_bytes, want, 12), 0);
    char key[64];
    uint64_t coords[1] = {2};
    cr_assert_eq(zm__zarray_chunk_key(a, "a", coords, key, sizeof key), 0);
    cr_assert_str_eq(key, "a/c/2");
    cr_assert_eq(zm__zarray_chunk_key(a, "a", coords, key, 5), -ENAMETOOLONG);
    close_store(&o);
    remove_tree(s.dir);

    rc = v3_array(
        V3_GRID("[]", "[]") ", \"data_type\": {\"name\": \"null_terminated_bytes\", "
                            "\"configuration\": {\"length_bytes\": 3}}, \"fill_value\": \"YWI=\", "
                            "\"codecs\": [\"bytes\"]",
        &o, &s, &err);
    cr_assert_eq(rc, 0, "%s", err.reason);
    a = node_ok(&o, "a")->array;
    cr_assert_eq(a->value, ZM__ZVALUE_BYTES);
    cr_assert_eq(a->rank, 0);
    cr_assert_eq(memcmp(a->fill, "ab\0", 3), 0);
    cr_assert_eq(zm__zarray_chunk_key(a, "a", coords, key, sizeof key), 0);
    cr_assert_str_eq(key, "a/c");
    cr_assert_eq(zm__zarray_chunk_key(a, "", coords, key, sizeof key), 0);
    cr_assert_str_eq(key, "c");
    close_store(&o);
    remove_tree(s.dir);

    rc =
        v3_array(V3_GRID("[4, 4]",
                         "[2, 2]") ", \"data_type\": \"float64\", \"fill_value\": "
                                   "\"0x7ff8000000000001\", \"codecs\": [{\"name\": \"transpose\", "
                                   "\"configuration\": {\"order\": \"F\"}}, {\"name\": \"bytes\", "
                                   "\"configuration\": {\"endian\": \"big\"}}]",
                 &o, &s, &err);
    cr_assert_eq(rc, 0, "%s", err.reason);
    a = node_ok(&o, "a")->array;
    uint64_t bits;
    memcpy(&bits, a->fill, 8);
    cr_assert_eq(bits, 0x7ff8000000000001ull);
    cr_assert_eq(a->codecs[0].order[0], 1);
    cr_assert_eq(a->codecs[0].order[1], 0);
    cr_assert(a->big_endian);
    cr_assert_eq(a->codecs[1].word_size, 8);
    close_store(&o);
    remove_tree(s.dir);
}

/* ---- damaged chunks ------------------------------------------------------------------- */

/* One stored chunk of an array of the written stores, with its metadata. */
typedef struct chunk {
    opened o;
    const zm__zarray *a;
    uint8_t *bytes;
    size_t size;
    size_t raw_size;
} chunk;

static void chunk_load(chunk *c, const char *store, const char *path, const char *key_suffix)
{
    char dir[4096], key[4096];
    snprintf(dir, sizeof dir, "%s/%s", data_dir(), store);
    open_ok(dir, &c->o);
    c->a = node_ok(&c->o, path)->array;
    snprintf(key, sizeof key, "%s/%s", path, key_suffix);
    zm_err err;
    int rc = zm__store_get(c->o.store, key, (size_t)1 << 30, &c->bytes, &c->size, NULL, &err);
    cr_assert_eq(rc, 0, "%s: %s", key, err.reason);
    c->raw_size = (size_t)product(c->a->chunks, c->a->rank) * c->a->item_size;
}

static void chunk_done(chunk *c)
{
    free(c->bytes);
    close_store(&c->o);
}

static int chunk_decode(const chunk *c, const uint8_t *in, size_t size, zm_err *err)
{
    uint8_t *out = malloc(c->raw_size);
    int rc = zm__zarr_decode(c->a->codecs, c->a->codec_count, c->a->fortran_order, c->a->rank,
                             c->a->chunks, c->a->item_size, in, size, out, c->raw_size, err);
    free(out);
    return rc;
}

Test(zarr_codecs, truncated_streams_fail)
{
    /* Every codec's chunk, cut anywhere: -EIO, never a read past its end
     * (each cut is a copy of exactly that size, for ASan). */
    static const char *const arrays[] = {
        "blosc/lz4_shuffle",     "blosc/zstd_bitshuffle", "blosc/zlib_noshuffle",
        "blosc/blosclz_shuffle", "compressors/zstd_1",    "compressors/zlib_9",
        "compressors/gzip",      "compressors/lz4",       "compressors/bz2",
        "compressors/none",
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        chunk c;
        chunk_load(&c, "v2", arrays[i], "0.0");
        zm_err err;
        cr_assert_eq(chunk_decode(&c, c.bytes, c.size, &err), 0, "%s: %s", arrays[i], err.reason);
        size_t step = c.size > 400 ? c.size / 200 : 1;
        for (size_t cut = 0; cut < c.size; cut += step) {
            uint8_t *copy = malloc(cut ? cut : 1);
            memcpy(copy, c.bytes, cut);
            int rc = chunk_decode(&c, copy, cut, &err);
            free(copy);
            cr_assert_eq(rc, -EIO, "%s cut at %zu of %zu: %d", arrays[i], cut, c.size, rc);
            cr_assert(strlen(err.reason) > 0);
        }
        chunk_done(&c);
    }
}

Test(zarr_codecs, corrupt_streams_fail_cleanly)
{
    /* A byte changed: a checksummed stream (zlib, gzip, bz2, crc32c) must
     * say so; any other fails cleanly or decodes to exactly its size. */
    /* checked: 1, a stream's own checksum (zlib, gzip, bz2) catches every
     * change past its header and before its last bytes, whose spare bits
     * (padding to a byte) no checksum covers; 2, crc32c catches all. */
    static const struct {
        const char *store, *path, *key;
        int checked;
    } cases[] = {
        {"v2", "compressors/zlib_1", "0.0", 1},        {"v2", "compressors/gzip", "1.1", 1},
        {"v2", "compressors/bz2", "0.1", 1},           {"v3", "codecs/crc32c", "c/1/1", 2},
        {"v3", "codecs/crc32c_only", "c/0/0", 2},      {"v2", "compressors/zstd_9", "0.0", 0},
        {"v2", "blosc/lz4_shuffle", "0.0", 0},         {"v2", "compressors/lz4", "1.0", 0},
        {"v3", "codecs/numcodecs_crc32c", "c/0/1", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        chunk c;
        chunk_load(&c, cases[i].store, cases[i].path, cases[i].key);
        zm_err err;
        cr_assert_eq(chunk_decode(&c, c.bytes, c.size, &err), 0, "%s: %s", cases[i].path,
                     err.reason);
        uint8_t *copy = malloc(c.size);
        size_t step = c.size > 300 ? c.size / 150 : 1;
        for (size_t at = 0; at < c.size; at += step) {
            memcpy(copy, c.bytes, c.size);
            copy[at] ^= 0x5a;
            int rc = chunk_decode(&c, copy, c.size, &err);
            cr_assert(rc == 0 || rc == -EIO, "%s byte %zu: %d", cases[i].path, at, rc);
            /* A zlib stream's header has a spare bit or two; past it, a
             * changed byte is always caught. */
            if (cases[i].checked == 2 || (cases[i].checked == 1 && at >= 10 && at + 12 < c.size))
                cr_assert_eq(rc, -EIO, "%s byte %zu changed, decoded anyway", cases[i].path, at);
        }
        free(copy);
        chunk_done(&c);
    }
}

Test(zarr_codecs, crc32c_mismatch_names_it)
{
    chunk c;
    chunk_load(&c, "v3", "codecs/crc32c_only", "c/0/0");
    zm_err err;
    c.bytes[c.size - 1] ^= 1; /* the stored checksum itself */
    cr_assert_eq(chunk_decode(&c, c.bytes, c.size, &err), -EIO);
    cr_assert(strstr(err.reason, "crc32c") != NULL && strstr(err.reason, "mismatch") != NULL, "%s",
              err.reason);
    chunk_done(&c);
}

Test(zarr_codecs, sizes_checked)
{
    chunk c;
    chunk_load(&c, "v2", "compressors/zstd_1", "0.0");
    zm_err err;
    uint8_t *out = malloc(c.raw_size + 4);
    /* A chunk asked for as more or fewer bytes than it holds. */
    uint64_t smaller[2] = {c.a->chunks[0], c.a->chunks[1] - 1};
    int rc = zm__zarr_decode(c.a->codecs, c.a->codec_count, 0, 2, smaller, 4, c.bytes, c.size, out,
                             c.raw_size - 4 * c.a->chunks[0], &err);
    cr_assert_eq(rc, -EIO, "%d", rc);
    cr_assert(strstr(err.reason, "zstd") != NULL, "%s", err.reason);
    rc = zm__zarr_decode(c.a->codecs, c.a->codec_count, 0, 2, c.a->chunks, 4, c.bytes, c.size, out,
                         c.raw_size + 4, &err);
    cr_assert_lt(rc, 0);
    free(out);
    chunk_done(&c);
    /* No codec at all: the stored bytes are the chunk, and must be its size. */
    chunk_load(&c, "v2", "compressors/none", "0.0");
    out = malloc(c.raw_size);
    cr_assert_eq(zm__zarr_decode(c.a->codecs, c.a->codec_count, 0, 2, c.a->chunks, 4, c.bytes,
                                 c.size - 1, out, c.raw_size, &err),
                 -EIO);
    free(out);
    chunk_done(&c);
}

/* Builds a vlen-utf8 chunk by hand: count, then (length, bytes) items. */
static size_t vlen_chunk(uint8_t *buf, uint32_t count, const uint32_t *lengths, size_t n_items)
{
    size_t at = 0;
    memcpy(buf, &count, 4);
    at += 4;
    for (size_t i = 0; i < n_items; i++) {
        memcpy(buf + at, &lengths[i], 4);
        at += 4;
        memset(buf + at, 'a' + (int)i, lengths[i]);
        at += lengths[i];
    }
    return at;
}

Test(zarr_codecs, vlen_counts_and_lengths_checked)
{
    zm__zcodec chain[1];
    memset(chain, 0, sizeof chain);
    chain[0].id = ZM__ZCODEC_VLEN_UTF8;
    snprintf(chain[0].name, sizeof chain[0].name, "vlen-utf8");
    uint8_t buf[256];
    uint32_t lengths[3] = {2, 0, 5};
    uint64_t shape[1] = {3};
    zm_strings s;
    zm_err err;
    size_t n = vlen_chunk(buf, 3, lengths, 3);
    cr_assert_eq(zm__zarr_decode_strings(chain, 1, 0, 1, shape, buf, n, &s, &err), 0, "%s",
                 err.reason);
    cr_assert_eq(s.count, 3);
    cr_assert_eq(s.offsets[3], 7);
    cr_assert_eq(memcmp(s.bytes, "aaccccc", 7), 0);
    zm_strings_free(&s);
    /* Another count than the chunk's values. */
    n = vlen_chunk(buf, 4, lengths, 3);
    cr_assert_eq(zm__zarr_decode_strings(chain, 1, 0, 1, shape, buf, n, &s, &err), -EIO);
    cr_assert(strstr(err.reason, "vlen-utf8") != NULL, "%s", err.reason);
    /* A length past the end, and every cut of a good chunk. */
    n = vlen_chunk(buf, 3, lengths, 3);
    uint32_t huge = 0xfffffff0u;
    memcpy(buf + 4 + 4 + 2 + 4 + 0, &huge, 4);
    cr_assert_eq(zm__zarr_decode_strings(chain, 1, 0, 1, shape, buf, n, &s, &err), -EIO);
    n = vlen_chunk(buf, 3, lengths, 3);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        int rc = zm__zarr_decode_strings(chain, 1, 0, 1, shape, copy, cut, &s, &err);
        free(copy);
        cr_assert_eq(rc, -EIO, "cut at %zu: %d", cut, rc);
    }
    /* A shape of 2^32 - 1 strings over a chunk of 8 bytes: refused before
     * 2 x 32 GiB of offsets are asked for (as they were: the lengths must
     * fit in the bytes decoded, 4 a value, whatever the shape claims). */
    uint64_t claimed[1] = {UINT32_MAX};
    uint8_t few[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    cr_assert_eq(zm__zarr_decode_strings(chain, 1, 0, 1, claimed, few, sizeof few, &s, &err), -EIO);
    cr_assert(strstr(err.reason, "cannot hold the lengths of 4294967295 values") != NULL, "%s",
              err.reason);
    /* Strings decoded as numbers, numbers as strings: refused. */
    uint8_t out[16];
    cr_assert_eq(zm__zarr_decode(chain, 1, 0, 1, shape, 4, buf, n, out, 12, &err), -EINVAL);
    zm__zcodec none[1];
    memset(none, 0, sizeof none);
    none[0].id = ZM__ZCODEC_BYTES;
    snprintf(none[0].name, sizeof none[0].name, "bytes");
    cr_assert_eq(zm__zarr_decode_strings(none, 1, 0, 1, shape, buf, n, &s, &err), -EINVAL);
}

Test(zarr_codecs, transpose_and_fortran_order_by_hand)
{
    /* The permutations on a 2x3x4 array of uint16 whose value is its C
     * index: stored transposed by order (2, 0, 1) (numpy's
     * np.transpose(a, (2, 0, 1)) laid out in C order) and in F order. */
    uint16_t c[24], t[24], f[24], out[24];
    for (int i = 0; i < 24; i++)
        c[i] = (uint16_t)i;
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 3; y++)
            for (int z = 0; z < 4; z++) {
                int ci = (x * 3 + y) * 4 + z;
                t[(z * 2 + x) * 3 + y] = c[ci];
                f[x + 2 * (y + 3 * z)] = c[ci];
            }
    zm__zcodec chain[2];
    memset(chain, 0, sizeof chain);
    chain[0].id = ZM__ZCODEC_TRANSPOSE;
    chain[0].order[0] = 2;
    chain[0].order[1] = 0;
    chain[0].order[2] = 1;
    snprintf(chain[0].name, sizeof chain[0].name, "transpose");
    chain[1].id = ZM__ZCODEC_BYTES;
    chain[1].word_size = 2;
    snprintf(chain[1].name, sizeof chain[1].name, "bytes");
    uint64_t shape[3] = {2, 3, 4};
    zm_err err;
    cr_assert_eq(
        zm__zarr_decode(chain, 2, 0, 3, shape, 2, (uint8_t *)t, 48, (uint8_t *)out, 48, &err), 0,
        "%s", err.reason);
    cr_assert_eq(memcmp(out, c, 48), 0);
    cr_assert_eq(
        zm__zarr_decode(chain + 1, 1, 1, 3, shape, 2, (uint8_t *)f, 48, (uint8_t *)out, 48, &err),
        0, "%s", err.reason);
    cr_assert_eq(memcmp(out, c, 48), 0);
    /* Big-endian words swapped too, transposed or not. */
    uint16_t tb[24];
    for (int i = 0; i < 24; i++)
        tb[i] = (uint16_t)(t[i] << 8 | t[i] >> 8);
    chain[1].big_endian = 1;
    cr_assert_eq(
        zm__zarr_decode(chain, 2, 0, 3, shape, 2, (uint8_t *)tb, 48, (uint8_t *)out, 48, &err), 0,
        "%s", err.reason);
    cr_assert_eq(memcmp(out, c, 48), 0);
}

/* ---- sharding's index ---------------------------------------------------------------------- */

static zm__zshard index_shard(unsigned per, bool crc, bool at_start)
{
    zm__zshard s;
    memset(&s, 0, sizeof s);
    s.per_shard = per;
    s.index_codec_count = crc ? 2 : 1;
    s.index_codecs[0].id = ZM__ZCODEC_BYTES;
    s.index_codecs[0].word_size = 8;
    snprintf(s.index_codecs[0].name, sizeof s.index_codecs[0].name, "bytes");
    s.index_codecs[1].id = ZM__ZCODEC_CRC32C;
    snprintf(s.index_codecs[1].name, sizeof s.index_codecs[1].name, "crc32c");
    s.index_bytes = 16 * per + (crc ? 4 : 0);
    s.index_at_start = at_start;
    return s;
}

static size_t make_index(uint8_t *buf, const uint64_t *pairs, unsigned per, bool crc)
{
    for (unsigned i = 0; i < 2 * per; i++)
        for (int b = 0; b < 8; b++)
            buf[8 * i + b] = (uint8_t)(pairs[i] >> (8 * b));
    size_t n = 16 * per;
    if (crc) {
        uint32_t v = zm__crc32c(buf, n);
        memcpy(buf + n, &v, 4);
        n += 4;
    }
    return n;
}

Test(zarr_codecs, shard_index_checked)
{
    uint8_t buf[256];
    uint64_t offsets[4], sizes[4];
    zm_err err;
    zm__zshard s = index_shard(4, true, false);
    const uint64_t A = UINT64_MAX;
    /* The index at the end of a 200-byte shard: chunks at 0..100, one absent. */
    uint64_t good[8] = {0, 30, 30, 40, A, A, 70, 30};
    size_t n = make_index(buf, good, 4, true);
    cr_assert_eq(zm__zshard_index(&s, buf, n, 200, offsets, sizes, &err), 0, "%s", err.reason);
    cr_assert_eq(offsets[1], 30);
    cr_assert_eq(sizes[1], 40);
    cr_assert_eq(offsets[2], A);
    cr_assert_eq(sizes[2], A);
    /* Against the one the real sharded store holds: every present chunk lies
     * before its index. */
    buf[3] ^= 1;
    cr_assert_eq(zm__zshard_index(&s, buf, n, 200, offsets, sizes, &err), -EIO);
    cr_assert(strstr(err.reason, "crc32c") != NULL, "%s", err.reason);
    static const struct {
        uint64_t pairs[8];
        uint64_t shard_size;
        const char *words;
    } bad[] = {
        {{0, 30, 30, 40, A, A, 190, 30}, 200, "past the shard"},
        {{0, 30, 30, 40, A, A, A - 5, 30}, 200, "past the shard"},
        {{0, 30, 30, 40, A, A, 70, 70}, 200, "overlaps the index"},
        {{0, 30, 20, 40, A, A, 70, 30}, 200, "overlap"},
        {{0, 30, 30, 40, A, 3, 70, 30}, 200, "past the shard"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = make_index(buf, bad[i].pairs, 4, true);
        int rc = zm__zshard_index(&s, buf, n, bad[i].shard_size, offsets, sizes, &err);
        cr_assert_eq(rc, -EIO, "case %zu: %d", i, rc);
        cr_assert(strstr(err.reason, bad[i].words) != NULL, "case %zu: %s", i, err.reason);
    }
    /* The index at the start: chunks must lie after it. */
    zm__zshard start = index_shard(4, true, true);
    uint64_t after[8] = {68, 30, 98, 40, A, A, 138, 30};
    n = make_index(buf, after, 4, true);
    cr_assert_eq(zm__zshard_index(&start, buf, n, 200, offsets, sizes, &err), 0, "%s", err.reason);
    uint64_t inside[8] = {60, 30, 98, 40, A, A, 138, 30};
    n = make_index(buf, inside, 4, true);
    cr_assert_eq(zm__zshard_index(&start, buf, n, 200, offsets, sizes, &err), -EIO);
    /* Another index size, a shard shorter than its index. */
    n = make_index(buf, after, 4, true);
    cr_assert_eq(zm__zshard_index(&start, buf, n - 1, 200, offsets, sizes, &err), -EIO);
    cr_assert_eq(zm__zshard_index(&start, buf, n, 10, offsets, sizes, &err), -EIO);
}

Test(zarr_codecs, real_shard_index_damage)
{
    /* A shard zarr 3 wrote: its index read, then each of its entries
     * pushed out of the shard, which the CRC-32C is recomputed over. */
    chunk c;
    chunk_load(&c, "v3", "shards/end", "c/0/0");
    const zm__zshard *s = c.a->shard;
    cr_assert_not_null(s);
    uint64_t *offsets = calloc(s->per_shard, 8), *sizes = calloc(s->per_shard, 8);
    zm_err err;
    uint8_t *index = c.bytes + c.size - s->index_bytes;
    cr_assert_eq(zm__zshard_index(s, index, s->index_bytes, c.size, offsets, sizes, &err), 0, "%s",
                 err.reason);
    for (uint64_t i = 0; i < s->per_shard; i++)
        cr_assert(offsets[i] == UINT64_MAX || offsets[i] + sizes[i] <= c.size - s->index_bytes);
    uint8_t *copy = malloc(s->index_bytes);
    for (uint64_t i = 0; i < s->per_shard; i++) {
        if (offsets[i] == UINT64_MAX)
            continue;
        memcpy(copy, index, s->index_bytes);
        uint64_t past = c.size;
        memcpy(copy + 16 * i, &past, 8);
        uint32_t crc = zm__crc32c(copy, s->index_bytes - 4);
        memcpy(copy + s->index_bytes - 4, &crc, 4);
        cr_assert_eq(zm__zshard_index(s, copy, s->index_bytes, c.size, offsets, sizes, &err), -EIO);
    }
    free(copy);
    free(offsets);
    free(sizes);
    chunk_done(&c);
}

/* ---- streams zarr never writes, numcodecs reads ------------------------------------ */

Test(zarr_codecs, numcodecs_stream_forms)
{
    /* gzip members one after another with zero padding, bzip2 streams one
     * after another, bytes after a zlib or bzip2 stream (ignored) and after
     * a gzip one (refused): as numcodecs 0.11 decodes them
     * (codec-vectors.json.gz). */
    json_t *doc = load_gz_json("codec-vectors.json.gz");
    const char *name;
    json_t *v;
    size_t checked = 0;
    json_object_foreach(json_object_get(doc, "vectors"), name, v)
    {
        char *compressor = json_dumps(json_object_get(v, "compressor"), JSON_COMPACT);
        json_int_t raw = json_integer_value(json_object_get(v, "raw_size"));
        char zarray[1024];
        snprintf(zarray, sizeof zarray,
                 "{\"zarr_format\": 2, \"shape\": [%lld], \"chunks\": [%lld], \"dtype\": \"|u1\", "
                 "\"fill_value\": 0, \"order\": \"C\", \"compressor\": %s, \"filters\": null}",
                 (long long)raw, (long long)raw, compressor);
        free(compressor);
        opened o;
        scratch s;
        zm_err err;
        cr_assert_eq(v2_array(zarray, &err, &o, &s), 0, "%s: %s", name, err.reason);
        const zm__zarray *a = node_ok(&o, "a")->array;
        size_t in_size;
        uint8_t *in = b64_decode(json_object_get(v, "encoded"), &in_size);
        uint8_t *out = malloc((size_t)raw);
        int rc = zm__zarr_decode(a->codecs, a->codec_count, 0, 1, a->chunks, 1, in, in_size, out,
                                 (size_t)raw, &err);
        json_t *decoded = json_object_get(v, "decoded");
        if (json_is_null(decoded)) {
            cr_assert_eq(rc, -EIO, "%s: numcodecs refuses it, decoded: %d", name, rc);
        } else {
            cr_assert_eq(rc, 0, "%s: %s", name, err.reason);
            size_t n;
            uint8_t *want = b64_decode(decoded, &n);
            cr_assert_eq(n, (size_t)raw);
            cr_assert_eq(memcmp(out, want, n), 0, "%s: values", name);
            free(want);
        }
        free(in);
        free(out);
        close_store(&o);
        remove_tree(s.dir);
        checked++;
    }
    cr_assert_eq(checked, 5);
    json_decref(doc);
}

/* ---- listing a store read node by node ----------------------------------------------- */

static void check_listing(int format)
{
    /* A group's children are the names below it that hold a node's
     * document, whatever else lies there (a stray directory or file). */
    scratch s;
    scratch_make(&s);
    const char *group_doc = format == 2 ? ".zgroup" : "zarr.json";
    const char *group = format == 2 ? V2_GROUP : "{\"zarr_format\": 3, \"node_type\": \"group\"}";
    char key[256];
    put(&s, group_doc, group);
    snprintf(key, sizeof key, "g/%s", group_doc);
    put(&s, key, group);
    snprintf(key, sizeof key, "g/b/%s", group_doc);
    put(&s, key, group);
    snprintf(key, sizeof key, "g/.hidden/%s", group_doc);
    put(&s, key, group);
    snprintf(key, sizeof key, "g/a/%s", format == 2 ? ".zarray" : "zarr.json");
    put(&s, key,
        format == 2 ? ZARRAY("[3]", "[2]", "\"<f4\"", "0", "null", "null")
                    : "{\"zarr_format\": 3, \"node_type\": \"array\", "
                      "\"shape\": [3], \"data_type\": \"float32\", \"chunk_grid\": "
                      "{\"name\": \"regular\", \"configuration\": {\"chunk_shape\": "
                      "[2]}}, \"chunk_key_encoding\": {\"name\": \"default\"}, "
                      "\"fill_value\": 0, \"codecs\": [\"bytes\"]}");
    put(&s, "g/junk/x", "not a node");
    put(&s, "g/notes.txt", "not a node");
    put(&s, "g/c/0", "a chunk-like file");
    opened o;
    zm_err err;
    cr_assert_eq(open_store(s.dir, &o, &err), 0, "%s", err.reason);
    cr_assert_eq(zm__ztree_consolidated(o.tree), 0);
    zm_strings names;
    cr_assert_eq(zm__ztree_children(o.tree, "g", &names, &err), 0, "%s", err.reason);
    static const char *const want[] = {".hidden", "a", "b"};
    cr_assert_eq(names.count, 3, "v%d: %zu children", format, names.count);
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(strncmp(names.bytes + names.offsets[i], want[i], strlen(want[i])), 0);
    zm_strings_free(&names);
    cr_assert_eq(zm__ztree_children(o.tree, "g/a", &names, &err), -ENOTDIR);
    cr_assert_eq(zm__ztree_children(o.tree, "g/junk", &names, &err), -ENOENT);
    const zm__znode *node;
    cr_assert_eq(zm__ztree_node(o.tree, "g/junk", &node, &err), -ENOENT);
    cr_assert(strstr(err.reason, "g/junk") != NULL, "%s", err.reason);
    cr_assert_eq(node_ok(&o, "g/a")->kind, ZM__ZNODE_ARRAY);
    /* Asked again: the node kept, the same one. */
    cr_assert_eq(node_ok(&o, "g/a"), node_ok(&o, "g/a"));
    close_store(&o);
    remove_tree(s.dir);
}

Test(zarr_meta, v2_listing_keeps_nodes_only)
{
    check_listing(2);
}
Test(zarr_meta, v3_listing_keeps_nodes_only)
{
    check_listing(3);
}

Test(zarr_meta, v3_consolidated_nested_and_key_defaults)
{
    /* A group's own consolidated metadata names its nodes from it (the
     * v3 form zarr-python reads as nested); a node named both ways is one.
     * Key encodings without a configuration take the spec's separators
     * ("/" for default, "." for v2). */
    static const char *const array_doc =
        "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [4, 4], \"data_type\": "
        "\"int8\", \"chunk_grid\": {\"name\": \"regular\", \"configuration\": {\"chunk_shape\": "
        "[2, 2]}}, \"chunk_key_encoding\": {\"name\": \"%s\"}, \"fill_value\": 0, \"codecs\": "
        "[\"bytes\"]}";
    char x[1024], y[1024], root[4096];
    snprintf(x, sizeof x, array_doc, "default");
    snprintf(y, sizeof y, array_doc, "v2");
    snprintf(root, sizeof root,
             "{\"zarr_format\": 3, \"node_type\": \"group\", \"consolidated_metadata\": "
             "{\"kind\": \"inline\", \"must_understand\": false, \"metadata\": {"
             "\"g\": {\"zarr_format\": 3, \"node_type\": \"group\", \"consolidated_metadata\": "
             "{\"kind\": \"inline\", \"metadata\": {\"x\": %s}}}, \"g/x\": %s, "
             "\"h\": {\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": {\"k\": 1}, "
             "\"consolidated_metadata\": {\"kind\": \"inline\", \"metadata\": {\"y\": %s}}}}}}",
             x, x, y);
    scratch s;
    scratch_make(&s);
    put(&s, "zarr.json", root);
    opened o;
    zm_err err;
    cr_assert_eq(open_store(s.dir, &o, &err), 0, "%s", err.reason);
    cr_assert(zm__ztree_consolidated(o.tree));
    zm_strings names;
    cr_assert_eq(zm__ztree_children(o.tree, "g", &names, &err), 0, "%s", err.reason);
    cr_assert_eq(names.count, 1);
    cr_assert_eq(memcmp(names.bytes, "x", 1), 0);
    zm_strings_free(&names);
    cr_assert_eq(zm__ztree_children(o.tree, "h", &names, &err), 0, "%s", err.reason);
    cr_assert_eq(names.count, 1);
    zm_strings_free(&names);
    cr_assert_eq(json_integer_value(json_object_get(node_ok(&o, "h")->attributes, "k")), 1);
    uint64_t coords[2] = {1, 0};
    char key[64];
    cr_assert_eq(zm__zarray_chunk_key(node_ok(&o, "g/x")->array, "g/x", coords, key, sizeof key),
                 0);
    cr_assert_str_eq(key, "g/x/c/1/0");
    cr_assert_eq(zm__zarray_chunk_key(node_ok(&o, "h/y")->array, "h/y", coords, key, sizeof key),
                 0);
    cr_assert_str_eq(key, "h/y/1.0");
    close_store(&o);
    remove_tree(s.dir);
}
