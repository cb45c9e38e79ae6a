/* libFuzzer target: the Zarr reader's metadata (src/source/zarr_meta.c)
 * and codecs (src/source/zarr_codecs.c), over a directory store of a few
 * documents and one chunk.
 *
 * Input: a flags byte, then up to three parts separated by the line
 * "\n--\n" (which no JSON document holds; the chunk, last, may): the root
 * document, the child array's document, and a chunk's bytes. Flags bit 0:
 * Zarr v3, the parts written as "zarr.json", "a/zarr.json" and "a/c/0";
 * else v2, as ".zgroup" (bit 1: ".zmetadata", consolidated metadata),
 * "a/.zarray" and "a/0"; bit 2: the child's document is also written for
 * a second child, "b" (no chunk). A part that is absent or empty is not
 * written.
 * The store is opened (zm__store_open, zm__ztree_open) and every node
 * reachable from the root walked (zm__ztree_node, zm__ztree_children; at
 * most NODES_MAX); each array's chunk keys are made (zm__zarray_chunk_key),
 * and the chunk's bytes are decoded through the chain of each array that
 * zm__zarray_supported accepts whose chunk holds at most RAW_MAX bytes
 * (zm__zarr_decode, zm__zarr_decode_strings, zm__zarr_decode_prefix; a
 * shard through zm__zshard_index, then its inner chunks).
 *
 * Properties (besides no crash, leak or UB, and time and memory bounded
 * whatever shapes, chunks and sizes the metadata claims): every failure is
 * a negative errno value the header allows, with a one-line reason; a
 * store with no root document is no Zarr store; the format is the one
 * written; a node is kept (asked twice, the same node), has the path
 * asked, an object of attributes, and an array exactly when it is one; a
 * group's children are sorted, each once, each a name (no '/', not "." or
 * ".."), each a node (never -ENOENT), an array's children -ENOTDIR; an
 * array's rank, chunks and codec count are within bounds, a readable one
 * has its fill (one value, as fill[] holds it), records packed field after
 * field, a shard whose inner chunks divide it and whose index size is 16
 * bytes an inner chunk (and 4 a crc32c); chunk keys spell the path, the
 * "c" of v3's default encoding and the coordinates with the array's
 * separator, and a buffer one byte short is -ENAMETOOLONG; the chunk at
 * the key the array gives is the bytes written; decoding twice gives the
 * same; a chain without compressors decodes exactly when the chunk has
 * the values' size and every crc32c matches (a bitwise CRC-32C here), and
 * its values then encode back to the chunk's bytes; through any chain,
 * values encoded here (numpy's transpose and F order, byte swaps,
 * numcodecs' vlen-utf8 framing, and zstd, zlib, gzip, bz2, lz4 and blosc
 * by their libraries) decode back to themselves; a prefix decodes to the
 * whole chunk's first bytes; a shard index is accepted exactly when its
 * CRC-32C matches and every entry lies in the shard, clear of the index
 * and of every other entry, and gives those entries.
 */
#include <blosc.h>
#include <bzlib.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "fuzz.h"
#include "source/zarr_store.h"

#define SEPARATOR      "\n--\n"
#define NODES_MAX      256
#define DECODES_MAX    4
#define RAW_MAX        ((uint64_t)1 << 20) /* bytes of one chunk's values decoded */
#define ROUND_TRIP_MAX ((size_t)256 << 10) /* bytes of values encoded and decoded back */
#define STRINGS_MAX    65536               /* strings of one chunk encoded for the round trip */
#define INNER_MAX      8                   /* inner chunks of a shard decoded */

/* ---- the store on disk --------------------------------------------------------------- */

static char base[64]; /* a directory of this process's, holding the store */

static void remove_base(void)
{
    if (base[0] != '\0')
        rmdir(base);
}

/* The files written for one input, in the order they were made. */
typedef struct written {
    char paths[10][128];
    bool directory[10];
    unsigned count;
} written;

static void made(written *w, const char *path, bool directory)
{
    if (w->count == sizeof w->paths / sizeof w->paths[0])
        abort();
    snprintf(w->paths[w->count], sizeof w->paths[0], "%s", path);
    w->directory[w->count++] = directory;
}

static void make_dir(written *w, const char *path)
{
    if (mkdir(path, 0755) != 0)
        abort();
    made(w, path, true);
}

static void write_part(written *w, const char *path, const uint8_t *bytes, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        abort();
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, bytes + done, size - done);
        if (n <= 0)
            abort();
        done += (size_t)n;
    }
    close(fd);
    made(w, path, false);
}

static void remove_written(written *w)
{
    for (unsigned i = w->count; i-- > 0;)
        if ((w->directory[i] ? rmdir(w->paths[i]) : unlink(w->paths[i])) != 0)
            abort();
    w->count = 0;
}

/* ---- references ----------------------------------------------------------------------- */

/* CRC-32C bit by bit (reflected Castagnoli, 0x82F63B78), a table a byte. */
static uint32_t crc32c_table[256];

static uint32_t reference_crc32c(const uint8_t *p, size_t n)
{
    if (crc32c_table[1] == 0)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = b;
            for (int k = 0; k < 8; k++)
                c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
            crc32c_table[b] = c;
        }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = (c >> 8) ^ crc32c_table[(c ^ p[i]) & 0xff];
    return c ^ 0xFFFFFFFFu;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t read64(const uint8_t *p, int big_endian)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[big_endian ? 7 - i : i] << (8 * i);
    return v;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The product of dims, or UINT64_MAX past it. */
static uint64_t product(const uint64_t *dims, unsigned rank)
{
    uint64_t n = 1;
    for (unsigned d = 0; d < rank; d++) {
        if (dims[d] != 0 && n > UINT64_MAX / dims[d])
            return UINT64_MAX;
        n *= dims[d];
    }
    return n;
}

/* numpy's transpose: out (shape t[j] = s[perm[j]]) from in (shape s, C
 * order): out[j...] = in[i...] where i[perm[j]] = j[j]. */
static void transpose(const uint8_t *in, uint8_t *out, unsigned rank, const uint64_t *s,
                      const unsigned *perm, size_t item)
{
    uint64_t t[ZM_MAX_RANK], strides[ZM_MAX_RANK], index[ZM_MAX_RANK] = {0};
    uint64_t total = product(s, rank), step = 1;
    for (unsigned d = rank; d-- > 0;) {
        strides[d] = step;
        step *= s[d];
    }
    for (unsigned j = 0; j < rank; j++)
        t[j] = s[perm[j]];
    for (uint64_t o = 0; o < total; o++) {
        uint64_t from = 0;
        for (unsigned j = 0; j < rank; j++)
            from += index[j] * strides[perm[j]];
        memcpy(out + o * item, in + from * item, item);
        for (unsigned j = rank; j-- > 0;) {
            if (++index[j] < t[j])
                break;
            index[j] = 0;
        }
    }
}

/* A growing byte buffer. */
typedef struct buffer {
    uint8_t *bytes;
    size_t size;
} buffer;

static void set_buffer(buffer *b, uint8_t *bytes, size_t size)
{
    free(b->bytes);
    b->bytes = bytes;
    b->size = size;
}

static uint8_t *alloc(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    if (p == NULL)
        abort();
    return p;
}

/* One bytes-to-bytes codec's encoding, as the writer's library makes it:
 * 0, or -1 when the library cannot (the round trip is then skipped). */
static int encode_bytes(const zm__zcodec *codec, size_t item_size, buffer *b)
{
    const uint8_t *in = b->bytes;
    size_t n = b->size;
    switch (codec->id) {
    case ZM__ZCODEC_ZSTD: {
        size_t cap = ZSTD_compressBound(n);
        uint8_t *out = alloc(cap);
        size_t made = ZSTD_compress(out, cap, in, n, 1);
        if (ZSTD_isError(made))
            abort();
        set_buffer(b, out, made);
        return 0;
    }
    case ZM__ZCODEC_ZLIB: {
        uLongf cap = compressBound((uLong)n);
        uint8_t *out = alloc(cap);
        if (compress2(out, &cap, in, (uLong)n, 1) != Z_OK)
            abort();
        set_buffer(b, out, cap);
        return 0;
    }
    case ZM__ZCODEC_GZIP: {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            abort();
        size_t cap = deflateBound(&zs, (uLong)n) + 32;
        uint8_t *out = alloc(cap);
        zs.next_in = (Bytef *)in;
        zs.avail_in = (uInt)n;
        zs.next_out = out;
        zs.avail_out = (uInt)cap;
        if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
            abort();
        size_t made = zs.total_out;
        deflateEnd(&zs);
        set_buffer(b, out, made);
        return 0;
    }
    case ZM__ZCODEC_LZ4: {
        int cap = LZ4_compressBound((int)n);
        uint8_t *out = alloc((size_t)cap + 4);
        put32(out, (uint32_t)n);
        int made = n ? LZ4_compress_default((const char *)in, (char *)out + 4, (int)n, cap) : 0;
        if (n && made <= 0)
            abort();
        set_buffer(b, out, (size_t)made + 4);
        return 0;
    }
    case ZM__ZCODEC_BZ2: {
        unsigned cap = (unsigned)(n + n / 100 + 601);
        uint8_t *out = alloc(cap);
        if (BZ2_bzBuffToBuffCompress((char *)out, &cap, (char *)in, (unsigned)n, 1, 0, 0) != BZ_OK)
            abort();
        set_buffer(b, out, cap);
        return 0;
    }
    case ZM__ZCODEC_BLOSC: {
        size_t typesize = item_size >= 1 && item_size <= 255 ? item_size : 1;
        size_t cap = n + BLOSC_MAX_OVERHEAD;
        uint8_t *out = alloc(cap);
        int made = blosc_compress_ctx(5, BLOSC_SHUFFLE, typesize, n, in, out, cap, "lz4", 0, 1);
        if (made <= 0) {
            free(out);
            return -1;
        }
        set_buffer(b, out, (size_t)made);
        return 0;
    }
    case ZM__ZCODEC_CRC32C: {
        uint8_t *out = alloc(n + 4);
        if (n)
            memcpy(out, in, n);
        put32(out + n, reference_crc32c(in, n));
        set_buffer(b, out, n + 4);
        return 0;
    }
    default:
        return -1;
    }
}

/* Where a chain's parts lie (as zarr_codecs.c takes them): array-to-array
 * codecs [0, array_end), the array-to-bytes one (or none), bytes-to-bytes
 * [bytes_start, count). -1 for a chain of another shape. */
typedef struct chain {
    unsigned array_end, bytes_start;
    const zm__zcodec *array_to_bytes;
    bool compressed; /* a compressor among the bytes-to-bytes codecs */
    unsigned checksums;
} chain;

static int split_chain(const zm__zcodec *codecs, unsigned count, chain *c)
{
    unsigned i = 0;
    while (i < count && codecs[i].id == ZM__ZCODEC_TRANSPOSE)
        i++;
    c->array_end = i;
    c->array_to_bytes = NULL;
    if (i < count && (codecs[i].id == ZM__ZCODEC_BYTES || codecs[i].id == ZM__ZCODEC_VLEN_UTF8))
        c->array_to_bytes = &codecs[i++];
    c->bytes_start = i;
    c->compressed = false;
    c->checksums = 0;
    for (; i < count; i++) {
        zm__zcodec_id id = codecs[i].id;
        if (id == ZM__ZCODEC_CRC32C)
            c->checksums++;
        else if (id == ZM__ZCODEC_ZSTD || id == ZM__ZCODEC_ZLIB || id == ZM__ZCODEC_GZIP ||
                 id == ZM__ZCODEC_LZ4 || id == ZM__ZCODEC_BZ2 || id == ZM__ZCODEC_BLOSC)
            c->compressed = true;
        else
            return -1;
    }
    return 0;
}

/* A chunk as its chain would store it. values: the chunk's values in C
 * order (raw bytes; numbers native), or strings (VLEN). 0 with *out, or -1
 * (a chain the encoders here do not make). */
typedef struct chunk_form {
    const zm__zcodec *codecs;
    unsigned count;
    int fortran_order;
    unsigned rank;
    const uint64_t *shape;
    size_t item_size; /* VLEN: 0 */
    bool strings;
} chunk_form;

static int encode_chunk(const chunk_form *f, const uint8_t *values, size_t raw,
                        const zm_strings *strings, buffer *out)
{
    chain c;
    if (split_chain(f->codecs, f->count, &c) < 0 || (f->fortran_order && c.array_end > 0))
        return -1;
    /* The values' order as stored: for strings, which value stands where. */
    uint64_t count = product(f->shape, f->rank);
    size_t item = f->strings ? sizeof(uint64_t) : f->item_size;
    size_t size = (size_t)count * item;
    uint8_t *cur = alloc(size);
    if (f->strings) {
        for (uint64_t i = 0; i < count; i++)
            memcpy(cur + i * item, &i, sizeof i);
    } else if (size) {
        memcpy(cur, values, size);
    }
    uint64_t shape[ZM_MAX_RANK];
    memcpy(shape, f->shape, f->rank * sizeof *shape);
    unsigned reverse[ZM_MAX_RANK];
    for (unsigned d = 0; d < f->rank; d++)
        reverse[d] = f->rank - 1 - d;
    for (unsigned k = 0; k < c.array_end + (f->fortran_order && f->rank > 1); k++) {
        const unsigned *perm = f->fortran_order ? reverse : f->codecs[k].order;
        uint8_t *next = alloc(size);
        transpose(cur, next, f->rank, shape, perm, item);
        uint64_t t[ZM_MAX_RANK];
        for (unsigned j = 0; j < f->rank; j++)
            t[j] = shape[perm[j]];
        memcpy(shape, t, sizeof t);
        free(cur);
        cur = next;
    }
    buffer b = {cur, size};
    if (f->strings) {
        /* numcodecs' VLenUTF8: the count, then each value's length and bytes. */
        size_t total = 4 + 4 * (size_t)count + (size_t)strings->offsets[strings->count];
        uint8_t *framed = alloc(total), *p = framed;
        put32(p, (uint32_t)count);
        p += 4;
        for (uint64_t i = 0; i < count; i++) {
            uint64_t s;
            memcpy(&s, cur + i * item, sizeof s);
            size_t n = (size_t)(strings->offsets[s + 1] - strings->offsets[s]);
            put32(p, (uint32_t)n);
            memcpy(p + 4, strings->bytes + strings->offsets[s], n);
            p += 4 + n;
        }
        set_buffer(&b, framed, total);
    } else {
        (void)raw;
        const zm__zcodec *ab = c.array_to_bytes;
        if (ab != NULL && ab->big_endian && ab->word_size > 1)
            for (size_t at = 0; at + ab->word_size <= b.size; at += ab->word_size)
                for (unsigned x = 0, y = ab->word_size - 1; x < y; x++, y--) {
                    uint8_t t = b.bytes[at + x];
                    b.bytes[at + x] = b.bytes[at + y];
                    b.bytes[at + y] = t;
                }
    }
    for (unsigned i = c.bytes_start; i < f->count; i++)
        if (encode_bytes(&f->codecs[i], f->item_size, &b) < 0) {
            free(b.bytes);
            return -1;
        }
    *out = b;
    return 0;
}

/* ---- decoding ---------------------------------------------------------------------------- */

static const int decode_allowed[] = {-EIO, -ENOMEM, -ENOTSUP};

static void check_strings(const zm_strings *s, uint64_t count, const char *what)
{
    ZM_FUZZ_CHECK(s->count == count, "%s: %zu strings, the shape holds %llu", what, s->count,
                  (unsigned long long)count);
    for (size_t i = 0; i < s->count; i++)
        ZM_FUZZ_CHECK(s->offsets[i] <= s->offsets[i + 1], "%s: string %zu ends before it starts",
                      what, i);
    ZM_FUZZ_CHECK(s->bytes[s->offsets[s->count]] == '\0', "%s: strings not NUL-terminated", what);
}

static bool same_strings(const zm_strings *a, const zm_strings *b)
{
    if (a->count != b->count)
        return false;
    size_t total = (size_t)a->offsets[a->count];
    return memcmp(a->offsets, b->offsets, (a->count + 1) * sizeof *a->offsets) == 0 &&
           (total == 0 || memcmp(a->bytes, b->bytes, total) == 0);
}

/* Values of a chunk for the round trip when none were decoded: the
 * chunk's bytes over and over (numbers), or strings cut from them. */
static void made_up_values(const uint8_t *chunk, size_t chunk_size, uint8_t *raw, size_t size)
{
    for (size_t i = 0; i < size; i++)
        raw[i] = chunk_size ? chunk[i % chunk_size] : (uint8_t)i;
}

static void made_up_strings(const uint8_t *chunk, size_t chunk_size, uint64_t count, zm_strings *s)
{
    s->count = (size_t)count;
    s->offsets = malloc(((size_t)count + 1) * sizeof *s->offsets);
    s->bytes = malloc((size_t)count * 7 + 1);
    if (s->offsets == NULL || s->bytes == NULL)
        abort();
    size_t at = 0;
    for (uint64_t i = 0; i < count; i++) {
        s->offsets[i] = at;
        size_t n = chunk_size ? chunk[i % chunk_size] % 8 : i % 3;
        for (size_t k = 0; k < n && k < 7; k++)
            s->bytes[at++] = chunk_size ? (char)chunk[(i + k) % chunk_size] : 'x';
    }
    s->offsets[count] = at;
    s->bytes[at] = '\0';
}

/* values (or strings) encoded through the chain and decoded back. */
static void check_round_trip(const chunk_form *f, const uint8_t *values, size_t raw,
                             const zm_strings *strings, const char *what)
{
    buffer encoded = {NULL, 0};
    if (encode_chunk(f, values, raw, strings, &encoded) < 0)
        return;
    zm_err err;
    zm_err_clear(&err);
    if (f->strings) {
        zm_strings back;
        int rc = zm__zarr_decode_strings(f->codecs, f->count, f->fortran_order, f->rank, f->shape,
                                         encoded.bytes, encoded.size, &back, &err);
        ZM_FUZZ_CHECK(rc == 0 || rc == -ENOMEM, "%s: %zu strings encoded do not decode back: %s",
                      what, strings->count, err.reason);
        if (rc == 0) {
            ZM_FUZZ_CHECK(same_strings(&back, strings),
                          "%s: %zu strings encoded decode to other strings", what, strings->count);
            zm_strings_free(&back);
        }
    } else {
        uint8_t *back = alloc(raw);
        int rc = zm__zarr_decode(f->codecs, f->count, f->fortran_order, f->rank, f->shape,
                                 f->item_size, encoded.bytes, encoded.size, back, raw, &err);
        ZM_FUZZ_CHECK(rc == 0 || rc == -ENOMEM,
                      "%s: %zu bytes of values encoded do not decode back: %s", what, raw,
                      err.reason);
        if (rc == 0)
            ZM_FUZZ_CHECK(raw == 0 || memcmp(back, values, raw) == 0,
                          "%s: %zu bytes of values encoded decode to other values", what, raw);
        free(back);
    }
    free(encoded.bytes);
}

/* Whether a chain without compressors should decode the chunk: its size
 * is the values' and a crc32c each, and every CRC-32C (the last codec's
 * outermost) matches. */
static bool plain_chunk_valid(const chunk_form *f, const chain *c, const uint8_t *chunk,
                              size_t chunk_size, size_t raw)
{
    if (chunk_size != raw + 4 * (size_t)c->checksums)
        return false;
    size_t n = chunk_size;
    for (unsigned i = 0; i < c->checksums; i++) {
        if (le32(chunk + n - 4) != reference_crc32c(chunk, n - 4))
            return false;
        n -= 4;
    }
    (void)f;
    return true;
}

/* One chunk's bytes through a chain (f), every way it can be decoded. */
static void decode_chunk(const chunk_form *f, const uint8_t *chunk, size_t chunk_size,
                         const char *what)
{
    uint64_t count = product(f->shape, f->rank);
    chain c;
    bool plain = split_chain(f->codecs, f->count, &c) == 0 && !c.compressed;
    zm_err err;
    if (f->strings) {
        /* Whatever count the shape claims: the decoder allocates by the
         * bytes it decodes (libFuzzer's malloc limit stops it otherwise). */
        zm_strings s[2];
        int rc[2];
        for (int i = 0; i < 2; i++) {
            zm_err_clear(&err);
            rc[i] = zm__zarr_decode_strings(f->codecs, f->count, f->fortran_order, f->rank,
                                            f->shape, chunk, chunk_size, &s[i], &err);
            /* More strings than numcodecs' 32-bit count can say: the shape
             * is refused (-EINVAL) before any byte is decoded. */
            if (count > UINT32_MAX)
                ZM_FUZZ_CHECK(rc[i] == -EINVAL, "%s: %llu strings a chunk: %d (%s)", what,
                              (unsigned long long)count, rc[i], err.reason);
            else if (rc[i] != 0)
                zm_fuzz_check_failure(rc[i], &err, decode_allowed, 3, "zm__zarr_decode_strings");
            else
                check_strings(&s[i], count, what);
        }
        if (rc[0] != -ENOMEM && rc[1] != -ENOMEM)
            ZM_FUZZ_CHECK(rc[0] == rc[1], "%s: strings decoded twice: %d, then %d", what, rc[0],
                          rc[1]);
        if (rc[0] == 0 && rc[1] == 0)
            ZM_FUZZ_CHECK(same_strings(&s[0], &s[1]), "%s: strings decoded twice differ", what);
        if (count <= STRINGS_MAX) {
            zm_strings values = {0};
            if (rc[0] == 0)
                values = s[0], s[0] = (zm_strings){0};
            else
                made_up_strings(chunk, chunk_size, count, &values);
            if (values.offsets[values.count] + 4 * values.count <= ROUND_TRIP_MAX)
                check_round_trip(f, NULL, 0, &values, what);
            zm_strings_free(&values);
        }
        zm_strings_free(&s[0]);
        zm_strings_free(&s[1]);
        return;
    }
    if (count == UINT64_MAX || f->item_size == 0 || count > RAW_MAX / f->item_size)
        return;
    size_t raw = (size_t)count * f->item_size;
    uint8_t *out[2];
    int rc[2];
    for (int i = 0; i < 2; i++) {
        out[i] = alloc(raw);
        zm_err_clear(&err);
        rc[i] = zm__zarr_decode(f->codecs, f->count, f->fortran_order, f->rank, f->shape,
                                f->item_size, chunk, chunk_size, out[i], raw, &err);
        if (rc[i] != 0)
            zm_fuzz_check_failure(rc[i], &err, decode_allowed, 3, "zm__zarr_decode");
    }
    if (rc[0] != -ENOMEM && rc[1] != -ENOMEM)
        ZM_FUZZ_CHECK(rc[0] == rc[1], "%s: decoded twice: %d, then %d", what, rc[0], rc[1]);
    if (rc[0] == 0 && rc[1] == 0)
        ZM_FUZZ_CHECK(raw == 0 || memcmp(out[0], out[1], raw) == 0, "%s: decoded twice differ",
                      what);
    if (plain && rc[0] != -ENOMEM) {
        bool valid = plain_chunk_valid(f, &c, chunk, chunk_size, raw);
        ZM_FUZZ_CHECK((rc[0] == 0) == valid,
                      "%s: a chain without compressors: %zu bytes (%u crc32c) for %zu of values "
                      "%s, decoding %d",
                      what, chunk_size, c.checksums, raw, valid ? "valid" : "invalid", rc[0]);
        if (rc[0] == 0) {
            buffer again = {NULL, 0};
            if (encode_chunk(f, out[0], raw, NULL, &again) == 0) {
                ZM_FUZZ_CHECK(again.size == chunk_size &&
                                  (chunk_size == 0 || memcmp(again.bytes, chunk, chunk_size) == 0),
                              "%s: decoded values do not encode back to the chunk's bytes", what);
                free(again.bytes);
            }
        }
    }
    /* The first values alone, where the chain allows it. */
    if (rc[0] == 0 && raw > 0 &&
        zm__zarr_prefix_decodable(f->codecs, f->count, f->fortran_order, f->rank)) {
        size_t needed = f->item_size * (1 + (size_t)(count / 3));
        uint8_t *prefix = alloc(needed);
        zm_err_clear(&err);
        int p = zm__zarr_decode_prefix(f->codecs, f->count, f->fortran_order, f->rank, f->shape,
                                       f->item_size, chunk, chunk_size, prefix, needed, needed,
                                       &err);
        ZM_FUZZ_CHECK(p == 1 || p == -ENOMEM,
                      "%s: the first %zu bytes of a chunk that decodes: %d (%s)", what, needed, p,
                      err.reason);
        if (p == 1)
            ZM_FUZZ_CHECK(memcmp(prefix, out[0], needed) == 0,
                          "%s: the first %zu bytes decoded alone differ", what, needed);
        free(prefix);
        /* With room for the whole chunk: block by block, straight into it. */
        prefix = alloc(raw);
        zm_err_clear(&err);
        p = zm__zarr_decode_prefix(f->codecs, f->count, f->fortran_order, f->rank, f->shape,
                                   f->item_size, chunk, chunk_size, prefix, raw, needed, &err);
        ZM_FUZZ_CHECK(p == 1 || p == -ENOMEM || needed > raw,
                      "%s: the first %zu bytes of a chunk that decodes, with room for all: %d (%s)",
                      what, needed, p, err.reason);
        if (p == 1)
            ZM_FUZZ_CHECK(memcmp(prefix, out[0], needed) == 0,
                          "%s: the first %zu bytes decoded block by block differ", what, needed);
        free(prefix);
    }
    if (raw <= ROUND_TRIP_MAX) {
        uint8_t *values = out[0];
        if (rc[0] != 0)
            made_up_values(chunk, chunk_size, values, raw);
        check_round_trip(f, values, raw, NULL, what);
    }
    free(out[0]);
    free(out[1]);
}

typedef struct span {
    uint64_t offset, size;
} span;

static int span_order(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* A shard: its index read as zarr_array.c reads it, checked against the
 * rules here, then its first inner chunks decoded. */
static void decode_shard(const zm__zarray *a, const uint8_t *shard, size_t shard_size)
{
    const zm__zshard *sh = a->shard;
    size_t index_bytes = sh->index_bytes;
    zm_err err;
    if (index_bytes > 0) {
        /* An index of another size than the metadata's is refused. */
        zm_err_clear(&err);
        uint64_t none[1];
        int rc = zm__zshard_index(sh, shard, index_bytes - 1, shard_size, none, none, &err);
        static const int io[] = {-EIO};
        ZM_FUZZ_CHECK(rc != 0, "an index of %zu bytes accepted for %zu", index_bytes - 1,
                      index_bytes);
        zm_fuzz_check_failure(rc, &err, io, 1, "zm__zshard_index (its size)");
    }
    if (shard_size < index_bytes)
        return; /* zarr_array.c refuses it before reading */
    const uint8_t *index = shard + (sh->index_at_start ? 0 : shard_size - index_bytes);
    size_t n = (size_t)sh->per_shard;
    uint64_t *offsets = malloc((n ? n : 1) * sizeof *offsets);
    uint64_t *sizes = malloc((n ? n : 1) * sizeof *sizes);
    if (offsets == NULL || sizes == NULL)
        abort();
    zm_err_clear(&err);
    int rc = zm__zshard_index(sh, index, index_bytes, shard_size, offsets, sizes, &err);
    static const int allowed[] = {-EIO, -ENOMEM};
    if (rc != 0)
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__zshard_index");

    /* The same rules, here: CRC-32Cs from the last, then the entries. */
    bool valid = true;
    int big_endian = 0;
    size_t body = index_bytes;
    for (unsigned i = sh->index_codec_count; i-- > 0 && valid;) {
        const zm__zcodec *codec = &sh->index_codecs[i];
        if (codec->id == ZM__ZCODEC_CRC32C) {
            valid = body >= 4 && le32(index + body - 4) == reference_crc32c(index, body - 4);
            body -= body >= 4 ? 4 : body;
        } else if (codec->id == ZM__ZCODEC_BYTES) {
            big_endian = codec->big_endian;
        }
    }
    valid = valid && body == n * 16;
    uint64_t index_start = sh->index_at_start ? 0 : shard_size - index_bytes;
    span *spans = malloc((n ? n : 1) * sizeof *spans);
    if (spans == NULL)
        abort();
    size_t present = 0;
    for (size_t i = 0; i < n && valid; i++) {
        uint64_t offset = read64(index + 16 * i, big_endian);
        uint64_t nbytes = read64(index + 16 * i + 8, big_endian);
        if (offset == UINT64_MAX && nbytes == UINT64_MAX)
            continue;
        if (offset > shard_size || nbytes > shard_size - offset)
            valid = false;
        else if (nbytes > 0 && offset < index_start + index_bytes && offset + nbytes > index_start)
            valid = false;
        else if (nbytes > 0)
            spans[present++] = (span){offset, nbytes};
    }
    if (valid && present > 1) {
        qsort(spans, present, sizeof *spans, span_order);
        for (size_t j = 1; j < present && valid; j++)
            valid = spans[j - 1].offset + spans[j - 1].size <= spans[j].offset;
    }
    free(spans);
    if (rc != -ENOMEM)
        ZM_FUZZ_CHECK((rc == 0) == valid, "a shard index %s here, zm__zshard_index %d (%s)",
                      valid ? "valid" : "invalid", rc, err.reason);
    if (rc == 0) {
        chunk_form f = {sh->codecs, sh->codec_count, a->fortran_order,           a->rank,
                        sh->inner,  a->item_size,    a->value == ZM__ZVALUE_VLEN};
        unsigned decoded = 0;
        for (size_t i = 0; i < n && decoded < INNER_MAX; i++) {
            uint64_t offset = read64(index + 16 * i, big_endian);
            uint64_t nbytes = read64(index + 16 * i + 8, big_endian);
            bool absent = offset == UINT64_MAX && nbytes == UINT64_MAX;
            ZM_FUZZ_CHECK(absent ? offsets[i] == UINT64_MAX && sizes[i] == UINT64_MAX
                                 : offsets[i] == offset && sizes[i] == nbytes,
                          "inner chunk %zu: %llu bytes at %llu, the index says %llu at %llu", i,
                          (unsigned long long)sizes[i], (unsigned long long)offsets[i],
                          (unsigned long long)nbytes, (unsigned long long)offset);
            if (absent)
                continue;
            char what[64];
            snprintf(what, sizeof what, "inner chunk %zu", i);
            decode_chunk(&f, shard + offset, (size_t)nbytes, what);
            decoded++;
        }
    }
    free(offsets);
    free(sizes);
}

/* ---- the tree ------------------------------------------------------------------------------ */

typedef struct input {
    int format;        /* 2 or 3 */
    bool consolidated; /* v2: the root document is .zmetadata */
    bool second_child; /* the child's document also at "b" */
    const uint8_t *parts[3];
    size_t sizes[3];
    bool present[3];
} input;

typedef struct walk {
    const input *in;
    zm__store *store;
    zm__ztree *tree;
    unsigned nodes, decodes;
    const char *chunk_key; /* where the chunk was written */
} walk;

/* The chunk key the spec spells: path, '/', then v3's "c" and each
 * coordinate after the separator, or v2's coordinates joined by it ("0"
 * for a 0-d array). */
static void spelled_key(const zm__zarray *a, const char *path, const uint64_t *coords, char *key,
                        size_t size)
{
    size_t at = (size_t)snprintf(key, size, "%s%s", path, path[0] ? "/" : "");
    if (a->key_prefix_c) {
        at += (size_t)snprintf(key + at, size - at, "c");
        for (unsigned d = 0; d < a->rank; d++)
            at += (size_t)snprintf(key + at, size - at, "%c%llu", a->separator,
                                   (unsigned long long)coords[d]);
    } else if (a->rank == 0) {
        snprintf(key + at, size - at, "0");
    } else {
        for (unsigned d = 0; d < a->rank; d++)
            at +=
                (size_t)snprintf(key + at, size - at, "%s%llu", d ? (char[]){a->separator, 0} : "",
                                 (unsigned long long)coords[d]);
    }
}

static void check_chunk_keys(walk *w, const zm__znode *node)
{
    const zm__zarray *a = node->array;
    uint64_t first[ZM_MAX_RANK] = {0}, last[ZM_MAX_RANK] = {0};
    for (unsigned d = 0; d < a->rank; d++)
        last[d] = a->shape[d] == 0 ? 0 : (a->shape[d] - 1) / a->chunks[d];
    const uint64_t *coords[2] = {first, last};
    for (int k = 0; k < 2; k++) {
        char key[4096], spelled[4096];
        int rc = zm__zarray_chunk_key(a, node->path, coords[k], key, sizeof key);
        spelled_key(a, node->path, coords[k], spelled, sizeof spelled);
        if (strlen(spelled) >= sizeof key) {
            ZM_FUZZ_CHECK(rc == -ENAMETOOLONG, "%s: a key of %zu bytes made in %zu: %d", node->path,
                          strlen(spelled), sizeof key, rc);
            continue;
        }
        ZM_FUZZ_CHECK(rc == 0, "%s: no chunk key (%d)", node->path, rc);
        ZM_FUZZ_CHECK(strcmp(key, spelled) == 0, "%s: chunk key \"%s\", the spec spells \"%s\"",
                      node->path, key, spelled);
        size_t n = strlen(key);
        char tight[4096];
        ZM_FUZZ_CHECK(zm__zarray_chunk_key(a, node->path, coords[k], tight, n) == -ENAMETOOLONG,
                      "%s: a key of %zu bytes made in %zu", node->path, n, n);
        ZM_FUZZ_CHECK(zm__zarray_chunk_key(a, node->path, coords[k], tight, n + 1) == 0 &&
                          strcmp(tight, key) == 0,
                      "%s: a key of %zu bytes not made in %zu", node->path, n, n + 1);
        /* The chunk written is the one the key names. */
        if (k == 0 && w->chunk_key != NULL && strcmp(key, w->chunk_key) == 0) {
            uint8_t *bytes = NULL;
            size_t size = 0;
            zm_err err;
            zm_err_clear(&err);
            rc = zm__store_get(w->store, key, SIZE_MAX - 1, &bytes, &size, NULL, &err);
            ZM_FUZZ_CHECK(
                rc == 0 && size == w->in->sizes[2] && memcmp(bytes, w->in->parts[2], size) == 0,
                "%s: the chunk written is not what the store gives (%d: %s)", key, rc, err.reason);
            free(bytes);
        }
    }
}

static void check_array(walk *w, const zm__znode *node)
{
    const zm__zarray *a = node->array;
    const char *path = node->path;
    ZM_FUZZ_CHECK(a->zarr_format == zm__ztree_format(w->tree), "%s: a v%d array in a v%d tree",
                  path, a->zarr_format, zm__ztree_format(w->tree));
    ZM_FUZZ_CHECK(a->rank <= ZM_MAX_RANK, "%s: rank %u", path, a->rank);
    ZM_FUZZ_CHECK(a->codec_count <= ZM__ZCODEC_MAX, "%s: %u codecs", path, a->codec_count);
    for (unsigned d = 0; d < a->rank; d++)
        ZM_FUZZ_CHECK(a->chunks[d] >= 1, "%s: chunks[%u] is 0", path, d);
    ZM_FUZZ_CHECK(a->separator == '.' || a->separator == '/', "%s: separator '%c'", path,
                  a->separator);
    check_chunk_keys(w, node);
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__zarray_supported(a, &err);
    static const int unsupported[] = {-ENOTSUP};
    if (rc != 0) {
        zm_fuzz_check_failure(rc, &err, unsupported, 1, "zm__zarray_supported");
        return;
    }
    bool strings = a->value == ZM__ZVALUE_VLEN;
    ZM_FUZZ_CHECK(strings || a->item_size > 0, "%s: a readable type of 0 bytes", path);
    ZM_FUZZ_CHECK(a->fill_bytes != NULL, "%s: readable, and no fill", path);
    if (strings) {
        ZM_FUZZ_CHECK(a->fill_bytes[a->fill_size] == '\0', "%s: a fill string not NUL-terminated",
                      path);
    } else {
        ZM_FUZZ_CHECK(a->fill_size == a->item_size, "%s: a fill of %zu bytes for values of %zu",
                      path, a->fill_size, a->item_size);
        if (a->fill_size <= sizeof a->fill)
            ZM_FUZZ_CHECK(memcmp(a->fill, a->fill_bytes, a->fill_size) == 0,
                          "%s: fill[] is not the fill", path);
    }
    if (a->value == ZM__ZVALUE_RECORDS) {
        size_t offset = 0;
        for (size_t i = 0; i < a->field_count; i++) {
            ZM_FUZZ_CHECK(a->fields[i].offset == offset, "%s: field %zu at %zu, not %zu", path, i,
                          a->fields[i].offset, offset);
            offset += a->fields[i].size;
        }
        ZM_FUZZ_CHECK(offset == a->item_size, "%s: fields of %zu bytes in records of %zu", path,
                      offset, a->item_size);
    }
    const zm__zshard *sh = a->shard;
    if (sh != NULL) {
        uint64_t per = 1;
        for (unsigned d = 0; d < a->rank; d++) {
            ZM_FUZZ_CHECK(sh->inner[d] >= 1 && a->chunks[d] % sh->inner[d] == 0,
                          "%s: inner chunks of %llu in shards of %llu", path,
                          (unsigned long long)sh->inner[d], (unsigned long long)a->chunks[d]);
            per *= a->chunks[d] / sh->inner[d];
        }
        ZM_FUZZ_CHECK(per == sh->per_shard, "%s: %llu inner chunks, %llu said", path,
                      (unsigned long long)per, (unsigned long long)sh->per_shard);
        size_t checksums = 0;
        for (unsigned i = 0; i < sh->index_codec_count; i++)
            checksums += sh->index_codecs[i].id == ZM__ZCODEC_CRC32C;
        ZM_FUZZ_CHECK(sh->index_bytes == 16 * per + 4 * checksums,
                      "%s: an index of %zu bytes for %llu inner chunks and %zu crc32c", path,
                      sh->index_bytes, (unsigned long long)per, checksums);
    }
    if (!w->in->present[2] || w->decodes >= DECODES_MAX)
        return;
    w->decodes++;
    const uint8_t *chunk = w->in->parts[2];
    size_t chunk_size = w->in->sizes[2];
    if (sh != NULL) {
        decode_shard(a, chunk, chunk_size);
        return;
    }
    chunk_form f = {a->codecs, a->codec_count, a->fortran_order, a->rank,
                    a->chunks, a->item_size,   strings};
    decode_chunk(&f, chunk, chunk_size, path);
}

/* A name of a group's children: one component of a path. */
static void check_children(const zm_strings *names, const char *path)
{
    for (size_t i = 0; i < names->count; i++) {
        const char *s = names->bytes + names->offsets[i];
        size_t n = (size_t)(names->offsets[i + 1] - names->offsets[i]);
        ZM_FUZZ_CHECK(n > 0 && memchr(s, '/', n) == NULL && memchr(s, '\0', n) == NULL &&
                          !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.'),
                      "%s: child %zu \"%.*s\" is no name", path, i, (int)n, s);
        if (i > 0) {
            const char *p = names->bytes + names->offsets[i - 1];
            size_t m = (size_t)(names->offsets[i] - names->offsets[i - 1]);
            int c = memcmp(p, s, m < n ? m : n);
            ZM_FUZZ_CHECK(c < 0 || (c == 0 && m < n), "%s: children \"%.*s\" then \"%.*s\"", path,
                          (int)m, p, (int)n, s);
        }
    }
}

static void walk_node(walk *w, const char *path, bool listed)
{
    if (w->nodes >= NODES_MAX)
        return;
    w->nodes++;
    const zm__znode *node;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__ztree_node(w->tree, path, &node, &err);
    static const int allowed[] = {-EINVAL, -ENOMEM};
    if (rc != 0) {
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__ztree_node");
        ZM_FUZZ_CHECK(listed || path[0] != '\0', "the root of an open tree: %s", err.reason);
        return;
    }
    const zm__znode *again;
    ZM_FUZZ_CHECK(zm__ztree_node(w->tree, path, &again, &err) == 0 && again == node,
                  "%s: asked twice, another node", path);
    ZM_FUZZ_CHECK(strcmp(node->path, path) == 0, "node \"%s\" asked as \"%s\"", node->path, path);
    ZM_FUZZ_CHECK(json_is_object(node->attributes), "%s: attributes are no object", path);
    ZM_FUZZ_CHECK((node->kind == ZM__ZNODE_ARRAY) == (node->array != NULL),
                  "%s: kind %d with array %p", path, (int)node->kind, (void *)node->array);

    zm_strings names;
    zm_err_clear(&err);
    rc = zm__ztree_children(w->tree, path, &names, &err);
    if (node->kind == ZM__ZNODE_ARRAY) {
        static const int notdir[] = {-ENOTDIR};
        ZM_FUZZ_CHECK(rc != 0, "%s: an array has children", path);
        zm_fuzz_check_failure(rc, &err, notdir, 1, "zm__ztree_children (an array)");
        check_array(w, node);
        return;
    }
    static const int nomem[] = {-ENOMEM};
    if (rc != 0) {
        zm_fuzz_check_failure(rc, &err, nomem, 1, "zm__ztree_children");
        return;
    }
    check_children(&names, path);
    zm_strings twice;
    zm_err_clear(&err);
    if (zm__ztree_children(w->tree, path, &twice, &err) == 0) {
        ZM_FUZZ_CHECK(same_strings(&names, &twice), "%s: children asked twice differ", path);
        zm_strings_free(&twice);
    }
    size_t path_length = strlen(path);
    for (size_t i = 0; i < names.count && w->nodes < NODES_MAX; i++) {
        size_t n = (size_t)(names.offsets[i + 1] - names.offsets[i]);
        char *child = (char *)alloc(path_length + n + 2);
        sprintf(child, "%s%s%.*s", path, path_length ? "/" : "", (int)n,
                names.bytes + names.offsets[i]);
        walk_node(w, child, true);
        free(child);
    }
    zm_strings_free(&names);
}

/* ---- one input --------------------------------------------------------------------------- */

static const uint8_t *find(const uint8_t *data, size_t size, const char *needle)
{
    return memmem(data, size, needle, strlen(needle));
}

static input split(const uint8_t *data, size_t size)
{
    input in;
    memset(&in, 0, sizeof in);
    unsigned flags = size ? data[0] : 0;
    in.format = flags & 1 ? 3 : 2;
    in.consolidated = in.format == 2 && (flags & 2);
    in.second_child = flags & 4;
    const uint8_t *p = size ? data + 1 : data, *end = data + size;
    for (int i = 0; i < 3 && p != NULL; i++) {
        const uint8_t *next = i < 2 ? find(p, (size_t)(end - p), SEPARATOR) : NULL;
        in.parts[i] = p;
        in.sizes[i] = (size_t)((next ? next : end) - p);
        in.present[i] = in.sizes[i] > 0;
        p = next ? next + strlen(SEPARATOR) : NULL;
    }
    return in;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    struct stat st;
    const char *tmp =
        stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
            ? "/dev/shm"
            : "/tmp";
    snprintf(base, sizeof base, "%s/zm-fuzz-zarr-meta-XXXXXX", tmp);
    if (mkdtemp(base) == NULL)
        abort();
    atexit(remove_base);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input in = split(data, size);
    const bool v3 = in.format == 3;
    const char *names[3] = {v3                ? "zarr.json"
                            : in.consolidated ? ".zmetadata"
                                              : ".zgroup",
                            v3 ? "a/zarr.json" : "a/.zarray", v3 ? "a/c/0" : "a/0"};
    written w = {0};
    char store_path[128], path[256];
    snprintf(store_path, sizeof store_path, "%s/store", base);
    make_dir(&w, store_path);
    if (in.present[0]) {
        snprintf(path, sizeof path, "%s/%s", store_path, names[0]);
        write_part(&w, path, in.parts[0], in.sizes[0]);
    }
    if (in.present[1] || in.present[2]) {
        snprintf(path, sizeof path, "%s/a", store_path);
        make_dir(&w, path);
    }
    if (in.present[1]) {
        snprintf(path, sizeof path, "%s/%s", store_path, names[1]);
        write_part(&w, path, in.parts[1], in.sizes[1]);
    }
    if (in.present[1] && in.second_child) {
        snprintf(path, sizeof path, "%s/b", store_path);
        make_dir(&w, path);
        snprintf(path, sizeof path, "%s/b/%s", store_path, v3 ? "zarr.json" : ".zarray");
        write_part(&w, path, in.parts[1], in.sizes[1]);
    }
    if (in.present[2]) {
        if (v3) {
            snprintf(path, sizeof path, "%s/a/c", store_path);
            make_dir(&w, path);
        }
        snprintf(path, sizeof path, "%s/%s", store_path, names[2]);
        write_part(&w, path, in.parts[2], in.sizes[2]);
    }

    int fd = open(store_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        abort();
    zm__store *store = NULL;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__store_open(fd, store_path, &store, &err);
    ZM_FUZZ_CHECK(rc == 0, "a directory of %u files does not open: %s", w.count, err.reason);
    zm__ztree *tree = NULL;
    zm_err_clear(&err);
    rc = zm__ztree_open(store, &tree, &err);
    if (rc != 0) {
        static const int allowed[] = {-EINVAL, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__ztree_open");
        ZM_FUZZ_CHECK(tree == NULL, "a failed open gave a tree");
    } else {
        ZM_FUZZ_CHECK(in.present[0], "a tree opened with no root document");
        ZM_FUZZ_CHECK(zm__ztree_format(tree) == in.format, "v%d written, v%d read", in.format,
                      zm__ztree_format(tree));
        if (in.consolidated)
            ZM_FUZZ_CHECK(zm__ztree_consolidated(tree), ".zmetadata read, not consolidated");
        ZM_FUZZ_CHECK(zm__ztree_bytes_read(tree) >= in.sizes[0],
                      "%llu bytes of documents read, the root's %zu",
                      (unsigned long long)zm__ztree_bytes_read(tree), in.sizes[0]);
        walk wk = {&in, store, tree, 0, 0, in.present[2] ? names[2] : NULL};
        walk_node(&wk, "", false);
        const zm__znode *node;
        zm_err_clear(&err);
        static const int bad_path[] = {-EINVAL};
        rc = zm__ztree_node(tree, "a/../a", &node, &err);
        ZM_FUZZ_CHECK(rc != 0, "\"a/../a\" is a node");
        zm_fuzz_check_failure(rc, &err, bad_path, 1, "zm__ztree_node (a/../a)");
        zm__ztree_close(tree);
    }
    zm__store_close(store);
    close(fd);
    remove_written(&w);
    return 0;
}
