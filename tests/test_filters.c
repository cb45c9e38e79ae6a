/* Tests for HDF5 filter pipeline decoding without HDF5 (src/source/filters.c).
 *
 * The main evidence is tests/data/filters/vectors.bin.gz: chunks written by
 * HDF5 itself through h5py and hdf5plugin (deflate, shuffle, fletcher32, lzf,
 * blosc with several inner codecs, zstd, and pipelines combining them in
 * several orders, including hand-written filter masks), each with the
 * pipeline HDF5 reports and the bytes HDF5 decodes the chunk to.
 * tests/source/make_filter_vectors.py writes it; the file format is described
 * there. On top of that: every stored byte flipped and every truncation of
 * every vector must fail cleanly (no read or write out of bounds: inputs and
 * outputs end at a guard page, and ASan watches our own code), wrong sizes
 * must be refused, and a few properties are checked on
 * inputs built here with zlib, libzstd and c-blosc.
 *
 * The vectors file is found through $ZM_FILTER_VECTORS, else under
 * $ZM_SOURCE_ROOT/tests, else next to this source file (as compiled), else
 * under tests/ of the working directory.
 */
#include <blosc.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "source/filters.h"

/* ---- the vectors file --------------------------------------------------- */

typedef struct vector {
    char name[96];
    size_t element_size, raw_size;
    unsigned filter_mask;
    const uint8_t *stored;
    size_t stored_size;
    const uint8_t *expected;
    size_t expected_size;
    zm__filter filters[ZM__FILTER_MAX];
    unsigned count;
} vector;

typedef struct vectors {
    uint8_t *data; /* the whole file, decompressed; blobs point into it */
    size_t size;
    vector *v;
    size_t n;
} vectors;

typedef struct reader {
    const uint8_t *p, *end;
    bool bad;
} reader;

static uint32_t rd_u32(reader *r)
{
    if (r->end - r->p < 4) {
        r->bad = true;
        return 0;
    }
    uint32_t x = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
                 (uint32_t)r->p[3] << 24;
    r->p += 4;
    return x;
}

static uint16_t rd_u16(reader *r)
{
    if (r->end - r->p < 2) {
        r->bad = true;
        return 0;
    }
    uint16_t x = (uint16_t)(r->p[0] | r->p[1] << 8);
    r->p += 2;
    return x;
}

static const uint8_t *rd_bytes(reader *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

static void rd_string(reader *r, char *dst, size_t cap)
{
    size_t n = rd_u16(r);
    const uint8_t *s = rd_bytes(r, n);
    if (s == NULL)
        return;
    size_t keep = n < cap - 1 ? n : cap - 1;
    memcpy(dst, s, keep);
    dst[keep] = '\0';
}

static gzFile open_vectors(void)
{
    const char *env = getenv("ZM_FILTER_VECTORS");
    if (env != NULL && env[0] != '\0')
        return gzopen(env, "rb");
    char path[4096];
    const char *root = getenv("ZM_SOURCE_ROOT");
    if (root != NULL && root[0] != '\0') {
        snprintf(path, sizeof path, "%s/tests/data/filters/vectors.bin.gz", root);
        return gzopen(path, "rb");
    }
    /* Next to this file: __FILE__ is the path the compiler was given,
     * relative to where it ran, which is where tests usually run too. */
    const char *slash = strrchr(__FILE__, '/');
    int dir = slash ? (int)(slash - __FILE__) : 0;
    snprintf(path, sizeof path, "%.*s%sdata/filters/vectors.bin.gz", dir, __FILE__,
             slash ? "/" : "");
    gzFile f = gzopen(path, "rb");
    if (f == NULL)
        f = gzopen("tests/data/filters/vectors.bin.gz", "rb");
    return f;
}

static void load_vectors(vectors *vs)
{
    memset(vs, 0, sizeof *vs);
    gzFile f = open_vectors();
    cr_assert_not_null(f, "cannot open tests/data/filters/vectors.bin.gz (set ZM_FILTER_VECTORS)");
    size_t cap = 1 << 20;
    vs->data = malloc(cap);
    for (;;) {
        if (vs->size == cap)
            vs->data = realloc(vs->data, cap *= 2);
        int n = gzread(f, vs->data + vs->size, (unsigned)(cap - vs->size));
        cr_assert_geq(n, 0, "vectors file unreadable");
        if (n == 0)
            break;
        vs->size += (size_t)n;
    }
    gzclose(f);

    reader r = {vs->data, vs->data + vs->size, false};
    const uint8_t *magic = rd_bytes(&r, 8);
    cr_assert(magic != NULL && memcmp(magic, "ZMFV0001", 8) == 0, "bad vectors magic");
    size_t nblobs = rd_u32(&r);
    const uint8_t **blob = calloc(nblobs, sizeof *blob);
    size_t *blob_size = calloc(nblobs, sizeof *blob_size);
    for (size_t i = 0; i < nblobs && !r.bad; i++) {
        blob_size[i] = rd_u32(&r);
        blob[i] = rd_bytes(&r, blob_size[i]);
    }
    vs->n = rd_u32(&r);
    vs->v = calloc(vs->n, sizeof *vs->v);
    for (size_t i = 0; i < vs->n && !r.bad; i++) {
        vector *v = &vs->v[i];
        rd_string(&r, v->name, sizeof v->name);
        v->element_size = rd_u32(&r);
        v->raw_size = rd_u32(&r);
        v->filter_mask = rd_u32(&r);
        uint32_t sb = rd_u32(&r), eb = rd_u32(&r);
        v->count = rd_u32(&r);
        cr_assert(sb < nblobs && eb < nblobs && v->count <= ZM__FILTER_MAX, "bad vector %zu", i);
        v->stored = blob[sb];
        v->stored_size = blob_size[sb];
        v->expected = blob[eb];
        v->expected_size = blob_size[eb];
        for (unsigned k = 0; k < v->count && !r.bad; k++) {
            zm__filter *fl = &v->filters[k];
            fl->id = rd_u32(&r);
            fl->flags = rd_u32(&r);
            fl->cd_count = rd_u32(&r);
            for (size_t c = 0; c < fl->cd_count; c++) {
                uint32_t value = rd_u32(&r);
                if (c < ZM__FILTER_MAX_CD)
                    fl->cd_values[c] = value;
            }
            rd_string(&r, fl->name, sizeof fl->name);
        }
    }
    cr_assert(!r.bad && r.p == r.end, "vectors file malformed");
    free(blob);
    free(blob_size);
}

static void free_vectors(vectors *vs)
{
    free(vs->data);
    free(vs->v);
}

/* ---- helpers ------------------------------------------------------------ */

/* A buffer whose last byte is followed by an inaccessible page, so that a
 * read or write past its end faults even in code ASan does not instrument
 * (zlib, libzstd and c-blosc are not built with it). */
typedef struct guarded {
    uint8_t *base, *data;
    size_t length;
} guarded;

static uint8_t *guarded_alloc(guarded *g, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (n + page - 1) / page;
    g->length = (pages + 1) * page;
    g->base = mmap(NULL, g->length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(g->base, MAP_FAILED);
    cr_assert_eq(mprotect(g->base + pages * page, page, PROT_NONE), 0);
    g->data = g->base + pages * page - n;
    return g->data;
}

static void guarded_free(guarded *g)
{
    munmap(g->base, g->length);
}

/* Decodes `in` through the given pipeline from and into buffers that end
 * exactly at a guard page (see guarded), so any access past the end of the
 * input or the output faults. Returns the result; *out_copy (if not NULL)
 * receives a malloc'd copy of the output, to free. */
static int decode_with(const vector *v, const zm__filter *filters, unsigned count, unsigned mask,
                       const uint8_t *in, size_t in_size, size_t raw_size, uint8_t **out_copy,
                       zm_err *err)
{
    guarded gin, gout;
    uint8_t *in_copy = guarded_alloc(&gin, in_size);
    if (in_size > 0)
        memcpy(in_copy, in, in_size);
    uint8_t *out = guarded_alloc(&gout, raw_size);
    zm_err_clear(err);
    int rc = zm__filter_decode(filters, count, mask, v->element_size, in_copy, in_size, out,
                               raw_size, err);
    if (out_copy) {
        *out_copy = malloc(raw_size > 0 ? raw_size : 1);
        if (raw_size > 0)
            memcpy(*out_copy, out, raw_size);
    }
    guarded_free(&gin);
    guarded_free(&gout);
    return rc;
}

static int decode(const vector *v, const uint8_t *in, size_t in_size, size_t raw_size,
                  uint8_t **out, zm_err *err)
{
    return decode_with(v, v->filters, v->count, v->filter_mask, in, in_size, raw_size, out, err);
}

static const vector *find(const vectors *vs, const char *name)
{
    for (size_t i = 0; i < vs->n; i++)
        if (strcmp(vs->v[i].name, name) == 0)
            return &vs->v[i];
    cr_assert_fail("no vector named %s", name);
    return NULL;
}

/* The last filter that ran when the chunk was written (the first decoded),
 * or 0 when every filter was skipped. */
static unsigned outermost(const vector *v)
{
    for (unsigned k = v->count; k-- > 0;)
        if (!(v->filter_mask >> k & 1u))
            return v->filters[k].id;
    return 0;
}

static bool has_filter(const vector *v, unsigned id)
{
    for (unsigned k = 0; k < v->count; k++)
        if (v->filters[k].id == id && !(v->filter_mask >> k & 1u))
            return true;
    return false;
}

static void assert_one_line(const zm_err *err)
{
    cr_assert(err->reason[0] != '\0', "empty reason");
    cr_assert(strchr(err->reason, '\n') == NULL, "reason spans lines: %s", err->reason);
}

/* ---- every HDF5 vector decodes to what HDF5 decodes it to --------------- */

Test(filters, hdf5_vectors_decode_exactly)
{
    vectors vs;
    load_vectors(&vs);
    cr_assert_geq(vs.n, 40);
    unsigned seen[7] = {0}; /* deflate, shuffle, fletcher32, lzf, blosc, zstd, masked */
    for (size_t i = 0; i < vs.n; i++) {
        const vector *v = &vs.v[i];
        cr_assert_eq(v->expected_size, v->raw_size, "%s", v->name);
        zm_err err;
        uint8_t *out;
        int rc = decode(v, v->stored, v->stored_size, v->raw_size, &out, &err);
        cr_assert_eq(rc, 0, "%s: %d %s", v->name, rc, err.reason);
        cr_assert_eq(err.code, 0, "%s", v->name);
        cr_assert(memcmp(out, v->expected, v->raw_size) == 0, "%s: wrong bytes", v->name);
        free(out);
        seen[0] += has_filter(v, ZM__FILTER_DEFLATE);
        seen[1] += has_filter(v, ZM__FILTER_SHUFFLE);
        seen[2] += has_filter(v, ZM__FILTER_FLETCHER32);
        seen[3] += has_filter(v, ZM__FILTER_LZF);
        seen[4] += has_filter(v, ZM__FILTER_BLOSC);
        seen[5] += has_filter(v, ZM__FILTER_ZSTD);
        seen[6] += v->filter_mask != 0;
    }
    for (int k = 0; k < 7; k++)
        cr_assert_geq(seen[k], 3, "too few vectors of kind %d", k);
    free_vectors(&vs);
}

Test(filters, vectors_cover_what_they_claim)
{
    vectors vs;
    load_vectors(&vs);
    /* LZF that could not shrink the chunk: stored raw, its bit set. */
    const vector *v = find(&vs, "lzf_incompressible");
    cr_assert_eq(v->filter_mask, 1u);
    cr_assert_eq(v->stored_size, v->raw_size);
    /* Fletcher32 over an odd number of bytes. */
    v = find(&vs, "fletcher32_u1_odd");
    cr_assert_eq(v->raw_size % 2, 1u);
    /* Shuffle over a byte count that is not a multiple of the element:
     * fletcher32 ran first, adding 4 bytes. */
    v = find(&vs, "fletcher32_shuffle_S3");
    cr_assert_eq(v->filters[0].id, ZM__FILTER_FLETCHER32);
    cr_assert_eq(v->filters[1].id, ZM__FILTER_SHUFFLE);
    cr_assert_eq(v->filters[1].cd_values[0], 3u);
    cr_assert_neq((v->raw_size + 4) % 3, 0u);
    v = find(&vs, "fletcher32_shuffle_deflate_compound13");
    cr_assert_eq(v->element_size, 13u);
    /* Blosc buffers hold several blocks in the big vector. */
    v = find(&vs, "blosc_zstd1_shuffle_f4_64k");
    size_t nbytes, cbytes, blocksize;
    blosc_cbuffer_sizes(v->stored, &nbytes, &cbytes, &blocksize);
    cr_assert_eq(nbytes, v->raw_size);
    cr_assert_lt(blocksize, nbytes, "want a multi-block blosc buffer");
    /* A zstd frame without its content size. */
    v = find(&vs, "zstd_nosize_f4");
    cr_assert_eq(ZSTD_getFrameContentSize(v->stored, v->stored_size), ZSTD_CONTENTSIZE_UNKNOWN);
    free_vectors(&vs);
}

/* ---- corrupt input ------------------------------------------------------ */

/* Flips bytes of every vector's stored chunk. Decoding must fail with -EIO
 * and a reason, or succeed; it must never crash or touch memory it does not
 * own. Under an outermost fletcher32 a single changed byte is always caught.
 * Deflate's adler32 catches nearly all, but not all: a one-bit flip in the
 * stream can change three output bytes by +1, -2, +1, which adler32 cannot
 * see (zlib and so HDF5 accept such a chunk too). */
static void flip_all(unsigned char pattern)
{
    vectors vs;
    load_vectors(&vs);
    for (size_t i = 0; i < vs.n; i++) {
        const vector *v = &vs.v[i];
        uint8_t *in = malloc(v->stored_size);
        memcpy(in, v->stored, v->stored_size);
        size_t step = v->stored_size / 1500 + 1;
        unsigned outer = outermost(v);
        size_t failed = 0, tried = 0;
        for (size_t pos = 0; pos < v->stored_size; pos += step) {
            in[pos] ^= pattern;
            zm_err err;
            uint8_t *out;
            int rc = decode(v, in, v->stored_size, v->raw_size, &out, &err);
            in[pos] ^= pattern;
            tried++;
            if (rc != 0) {
                cr_assert_eq(rc, -EIO, "%s byte %zu: rc %d (%s)", v->name, pos, rc, err.reason);
                cr_assert_eq(err.code, -EIO);
                assert_one_line(&err);
                failed++;
            }
            if (outer == ZM__FILTER_FLETCHER32)
                cr_assert_neq(rc, 0, "%s byte %zu: fletcher32 missed a changed byte", v->name, pos);
            free(out);
        }
        if (outer == ZM__FILTER_DEFLATE)
            cr_assert_geq(failed * 10, tried * 9, "%s: deflate caught only %zu of %zu", v->name,
                          failed, tried);
        free(in);
    }
    free_vectors(&vs);
}

Test(filters, flipped_bytes_fail_cleanly)
{
    flip_all(0xff);
}

Test(filters, flipped_low_bits_fail_cleanly)
{
    flip_all(0x01);
}

/* Random multi-byte damage, a deterministic sequence, for codecs whose
 * single-byte flips all land in literal data. */
Test(filters, random_damage_fails_cleanly)
{
    vectors vs;
    load_vectors(&vs);
    uint64_t state = 42;
    for (size_t i = 0; i < vs.n; i++) {
        const vector *v = &vs.v[i];
        uint8_t *in = malloc(v->stored_size);
        for (int round = 0; round < 200; round++) {
            memcpy(in, v->stored, v->stored_size);
            for (int k = 0; k < 8; k++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                in[(state >> 33) % v->stored_size] = (uint8_t)(state >> 13);
            }
            zm_err err;
            int rc = decode(v, in, v->stored_size, v->raw_size, NULL, &err);
            cr_assert(rc == 0 || rc == -EIO, "%s: rc %d (%s)", v->name, rc, err.reason);
            if (rc != 0)
                assert_one_line(&err);
        }
        free(in);
    }
    free_vectors(&vs);
}

/* Every proper prefix of every stored chunk must be refused: a chunk cut
 * short never decodes to the full raw size. */
Test(filters, truncated_input_fails)
{
    vectors vs;
    load_vectors(&vs);
    for (size_t i = 0; i < vs.n; i++) {
        const vector *v = &vs.v[i];
        size_t step = v->stored_size / 700 + 1;
        for (size_t len = 0; len < v->stored_size; len += (len < 64 ? 1 : step)) {
            zm_err err;
            int rc = decode(v, v->stored, len, v->raw_size, NULL, &err);
            cr_assert_eq(rc, -EIO, "%s cut to %zu of %zu bytes: rc %d (%s)", v->name, len,
                         v->stored_size, rc, err.reason);
            assert_one_line(&err);
        }
    }
    free_vectors(&vs);
}

/* A wrong raw size is refused with a reason that says what was expected,
 * and nothing is written past the (exactly sized) output buffer. */
Test(filters, wrong_raw_size_fails)
{
    vectors vs;
    load_vectors(&vs);
    for (size_t i = 0; i < vs.n; i++) {
        const vector *v = &vs.v[i];
        size_t sizes[] = {0, 1, v->raw_size - 1, v->raw_size + 1, v->raw_size * 2, v->raw_size / 2};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            zm_err err;
            int rc = decode(v, v->stored, v->stored_size, sizes[k], NULL, &err);
            cr_assert_eq(rc, -EIO, "%s with raw size %zu: rc %d", v->name, sizes[k], rc);
            assert_one_line(&err);
            cr_assert(strstr(err.reason, "expected") || strstr(err.reason, "more than") ||
                          strstr(err.reason, "truncated") || strstr(err.reason, "corrupt"),
                      "%s: unhelpful reason: %s", v->name, err.reason);
        }
    }
    free_vectors(&vs);
}

Test(filters, size_mismatch_reason)
{
    vectors vs;
    load_vectors(&vs);
    const vector *v = find(&vs, "deflate1_f4");
    zm_err err;
    int rc = decode(v, v->stored, v->stored_size, v->raw_size + 1, NULL, &err);
    cr_assert_eq(rc, -EIO);
    cr_assert_str_eq(err.reason, "deflate: decoded 4096 bytes, expected 4097");
    rc = decode(v, v->stored, v->stored_size, v->raw_size - 1, NULL, &err);
    cr_assert_eq(rc, -EIO);
    cr_assert_str_eq(err.reason, "deflate: decodes to more than the 4095 bytes expected");
    free_vectors(&vs);
}

Test(filters, deflate_corrupt_reason_names_zlib_message)
{
    vectors vs;
    load_vectors(&vs);
    const vector *v = find(&vs, "deflate9_f4");
    uint8_t *in = malloc(v->stored_size);
    memcpy(in, v->stored, v->stored_size);
    in[v->stored_size - 1] ^= 0x55; /* inside the adler32 trailer */
    zm_err err;
    cr_assert_eq(decode(v, in, v->stored_size, v->raw_size, NULL, &err), -EIO);
    cr_assert_str_eq(err.reason, "deflate: stream corrupt (incorrect data check)");
    in[0] = 0x00; /* not a zlib header */
    cr_assert_eq(decode(v, in, v->stored_size, v->raw_size, NULL, &err), -EIO);
    cr_assert(strncmp(err.reason, "deflate: stream corrupt (", 25) == 0, "%s", err.reason);
    free(in);
    free_vectors(&vs);
}

/* ---- fletcher32 --------------------------------------------------------- */

Test(filters, fletcher32_mismatch_and_legacy_checksum)
{
    vectors vs;
    load_vectors(&vs);
    const vector *v = find(&vs, "fletcher32_u1_odd");
    uint8_t *in = malloc(v->stored_size);
    memcpy(in, v->stored, v->stored_size);
    /* The value HDF5 before 1.6.3 wrote on little-endian hosts (bytes
     * swapped within each 16-bit half) is accepted too, as HDF5 does. */
    uint8_t *sum = in + v->stored_size - 4;
    uint8_t t = sum[0];
    sum[0] = sum[1];
    sum[1] = t;
    t = sum[2];
    sum[2] = sum[3];
    sum[3] = t;
    zm_err err;
    uint8_t *out;
    int rc = decode(v, in, v->stored_size, v->raw_size, &out, &err);
    cr_assert_eq(rc, 0, "%s", err.reason);
    cr_assert(memcmp(out, v->expected, v->raw_size) == 0);
    free(out);
    /* Anything else is a mismatch. */
    sum[0] ^= 1;
    rc = decode(v, in, v->stored_size, v->raw_size, NULL, &err);
    cr_assert_eq(rc, -EIO);
    cr_assert(strncmp(err.reason, "fletcher32 checksum mismatch", 28) == 0, "%s", err.reason);
    /* Data changed under an intact checksum. */
    memcpy(in, v->stored, v->stored_size);
    in[v->stored_size - 5] ^= 0x80; /* the odd last byte */
    rc = decode(v, in, v->stored_size, v->raw_size, NULL, &err);
    cr_assert_eq(rc, -EIO);
    cr_assert(strncmp(err.reason, "fletcher32 checksum mismatch", 28) == 0, "%s", err.reason);
    free(in);
    free_vectors(&vs);
}

/* The HDF5 algorithm on inputs whose sums need the 360-word reduction and
 * on tiny ones, checked against values worked out independently here (the
 * plain definition: sums of big-endian words modulo 65535, in ones'
 * complement, so a non-zero multiple of 65535 is 0xffff). */
static uint32_t reference_fletcher32(const uint8_t *d, size_t n)
{
    uint64_t s1 = 0, s2 = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        s1 += (uint32_t)d[i] << 8 | d[i + 1];
        s2 += s1;
    }
    if (n % 2) {
        s1 += (uint32_t)d[n - 1] << 8;
        s2 += s1;
    }
    /* An end-around-carry sum is 0 only when nothing was added. */
    uint32_t r1 = (uint32_t)(s1 % 65535), r2 = (uint32_t)(s2 % 65535);
    if (r1 == 0 && s1 != 0)
        r1 = 0xffff;
    if (r2 == 0 && s2 != 0)
        r2 = 0xffff;
    return r2 << 16 | r1;
}

Test(filters, fletcher32_matches_definition)
{
    size_t lengths[] = {0, 1, 2, 3, 719, 720, 721, 722, 5000, 65537};
    uint64_t state = 7;
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
        size_t n = lengths[k];
        uint8_t *buf = malloc(n + 4);
        for (size_t i = 0; i < n; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (uint8_t)(state >> 40) | 0x80; /* high bytes: sums overflow soonest */
        }
        uint32_t c = reference_fletcher32(buf, n);
        buf[n] = (uint8_t)c;
        buf[n + 1] = (uint8_t)(c >> 8);
        buf[n + 2] = (uint8_t)(c >> 16);
        buf[n + 3] = (uint8_t)(c >> 24);
        zm__filter f = {.id = ZM__FILTER_FLETCHER32};
        uint8_t *out = malloc(n + 1);
        zm_err err;
        int rc = zm__filter_decode(&f, 1, 0, 1, buf, n + 4, out, n, &err);
        cr_assert_eq(rc, 0, "length %zu: %s", n, err.reason);
        cr_assert(n == 0 || memcmp(out, buf, n) == 0);
        free(out);
        free(buf);
    }
}

/* ---- shuffle ------------------------------------------------------------ */

Test(filters, unshuffle_leftover_bytes_stay_in_place)
{
    /* 3 elements of 4 bytes, then 2 leftover bytes, as HDF5 shuffles them:
     * byte 0 of each element, byte 1 of each, ..., then the leftovers. */
    const uint8_t shuffled[] = {0x10, 0x20, 0x30, 0x11, 0x21, 0x31, 0x12,
                                0x22, 0x32, 0x13, 0x23, 0x33, 0xaa, 0xbb};
    const uint8_t plain[] = {0x10, 0x11, 0x12, 0x13, 0x20, 0x21, 0x22,
                             0x23, 0x30, 0x31, 0x32, 0x33, 0xaa, 0xbb};
    zm__filter f = {.id = ZM__FILTER_SHUFFLE, .cd_count = 1, .cd_values = {4}};
    uint8_t out[sizeof plain];
    zm_err err;
    cr_assert_eq(zm__filter_decode(&f, 1, 0, 4, shuffled, sizeof shuffled, out, sizeof out, &err),
                 0);
    cr_assert(memcmp(out, plain, sizeof plain) == 0);
    /* One element plus leftovers, and 1-byte elements: nothing to undo. */
    uint8_t small[] = {1, 2, 3, 4, 5};
    cr_assert_eq(zm__filter_decode(&f, 1, 0, 4, small, 5, out, 5, &err), 0);
    cr_assert(memcmp(out, small, 5) == 0);
    f.cd_values[0] = 1;
    cr_assert_eq(zm__filter_decode(&f, 1, 0, 1, shuffled, sizeof shuffled, out, sizeof out, &err),
                 0);
    cr_assert(memcmp(out, shuffled, sizeof shuffled) == 0);
}

Test(filters, shuffle_element_size_from_cd_values_or_dataset)
{
    vectors vs;
    load_vectors(&vs);
    const vector *v = find(&vs, "shuffle_only_f8");
    zm__filter f = v->filters[0];
    cr_assert_eq(f.cd_values[0], 8u);
    zm_err err;
    uint8_t *out;
    /* cd_values[0] wins over the element size passed in, as in HDF5... */
    cr_assert_eq(decode_with(v, &f, 1, 0, v->stored, v->stored_size, v->raw_size, &out, &err), 0);
    cr_assert(memcmp(out, v->expected, v->raw_size) == 0);
    free(out);
    /* ...and the dataset's element size is used when cd_values has none. */
    f.cd_count = 0;
    vector v2 = *v;
    cr_assert_eq(decode_with(&v2, &f, 1, 0, v->stored, v->stored_size, v->raw_size, &out, &err), 0);
    cr_assert(memcmp(out, v->expected, v->raw_size) == 0);
    free(out);
    v2.element_size = 4;
    cr_assert_eq(decode_with(&v2, &f, 1, 0, v->stored, v->stored_size, v->raw_size, &out, &err), 0);
    cr_assert(memcmp(out, v->expected, v->raw_size) != 0);
    free(out);
    v2.element_size = 0;
    cr_assert_eq(decode_with(&v2, &f, 1, 0, v->stored, v->stored_size, v->raw_size, NULL, &err),
                 -EIO);
    cr_assert_str_eq(err.reason, "shuffle: element size is 0");
    free_vectors(&vs);
}

/* ---- filter masks and unsupported filters ------------------------------- */

Test(filters, filter_mask_skips_filters)
{
    vectors vs;
    load_vectors(&vs);
    const vector *v = find(&vs, "deflate9_f4");
    zm_err err;
    /* Skipping deflate makes the stored bytes the raw chunk: wrong size. */
    cr_assert_eq(
        decode_with(v, v->filters, v->count, 1, v->stored, v->stored_size, v->raw_size, NULL, &err),
        -EIO);
    cr_assert(strstr(err.reason, "every filter skipped"), "%s", err.reason);
    /* With every filter skipped, the stored bytes come back as they are. */
    uint8_t *out;
    cr_assert_eq(
        decode_with(v, v->filters, v->count, 1, v->expected, v->raw_size, v->raw_size, &out, &err),
        0);
    cr_assert(memcmp(out, v->expected, v->raw_size) == 0);
    free(out);
    /* An unsupported filter that was skipped does not matter. */
    zm__filter two[2] = {{.id = ZM__FILTER_SZIP, .name = "szip"}, v->filters[0]};
    cr_assert_eq(decode_with(v, two, 2, 1, v->stored, v->stored_size, v->raw_size, &out, &err), 0,
                 "%s", err.reason);
    cr_assert(memcmp(out, v->expected, v->raw_size) == 0);
    free(out);
    cr_assert_eq(decode_with(v, two, 2, 0, v->stored, v->stored_size, v->raw_size, NULL, &err),
                 -ENOTSUP);
    cr_assert_str_eq(err.reason, "szip is not supported");
    free_vectors(&vs);
}

Test(filters, unsupported_filters_are_named)
{
    uint8_t in[16] = {0}, out[16];
    zm_err err;
    struct {
        zm__filter f;
        const char *reason;
    } cases[] = {
        {{.id = ZM__FILTER_SZIP}, "szip is not supported"},
        {{.id = ZM__FILTER_NBIT, .name = "nbit"}, "nbit is not supported"},
        {{.id = ZM__FILTER_SCALEOFFSET, .name = "scaleoffset"}, "scaleoffset is not supported"},
        {{.id = 32008, .name = "bitshuffle; see https://github.com/kiyo-masui/bitshuffle"},
         "filter 32008 (\"bitshuffle; see https://github.com/kiyo-masui/bitshuffle\") is not "
         "supported"},
        {{.id = 307}, "filter 307 is not supported"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int rc = zm__filter_decode(&cases[k].f, 1, 0, 1, in, sizeof in, out, sizeof out, &err);
        cr_assert_eq(rc, -ENOTSUP);
        cr_assert_str_eq(err.reason, cases[k].reason);
        cr_assert_eq(zm__filter_supported(cases[k].f.id), 0);
    }
    unsigned ok[] = {1, 2, 3, 32000, 32001, 32015};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
        cr_assert_eq(zm__filter_supported(ok[k]), 1);
    char buf[32];
    cr_assert_str_eq(zm__filter_name(32015, buf), "zstd");
    cr_assert_str_eq(zm__filter_name(32001, buf), "blosc");
    cr_assert_str_eq(zm__filter_name(4294967295u, buf), "filter 4294967295");
    /* A pipeline longer than the struct array holds. */
    zm__filter many[ZM__FILTER_MAX + 1];
    memset(many, 0, sizeof many);
    for (int k = 0; k <= ZM__FILTER_MAX; k++)
        many[k].id = ZM__FILTER_SHUFFLE;
    cr_assert_eq(
        zm__filter_decode(many, ZM__FILTER_MAX + 1, 0, 1, in, sizeof in, out, sizeof out, &err),
        -ENOTSUP);
}

/* ---- inputs built here -------------------------------------------------- */

/* A megabyte of float32 samples that compress moderately, like measurements. */
static uint8_t *make_samples(size_t bytes)
{
    uint8_t *buf = malloc(bytes);
    uint64_t state = 99;
    for (size_t i = 0; i < bytes / 4; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((int)(i % 977) - 400) * 0.25f + (float)((state >> 60) & 3);
        memcpy(buf + 4 * i, &x, 4);
    }
    return buf;
}

Test(filters, large_chunks_round_trip)
{
    size_t raw = (1u << 20) + 12; /* a leftover for shuffle to leave alone */
    uint8_t *data = make_samples(raw);
    uint8_t *out = malloc(raw);
    zm_err err;

    /* deflate, via zlib's compress (the zlib wrapper H5Zdeflate writes). */
    uLongf zlen = compressBound(raw);
    uint8_t *z = malloc(zlen);
    cr_assert_eq(compress2(z, &zlen, data, raw, 6), Z_OK);
    zm__filter deflate = {.id = ZM__FILTER_DEFLATE, .cd_count = 1, .cd_values = {6}};
    cr_assert_eq(zm__filter_decode(&deflate, 1, 0, 4, z, zlen, out, raw, &err), 0, "%s",
                 err.reason);
    cr_assert(memcmp(out, data, raw) == 0);
    free(z);

    /* zstd, two frames back to back, the second without a content size. */
    size_t half = raw / 2;
    size_t cap = ZSTD_compressBound(raw) * 2;
    uint8_t *zs = malloc(cap);
    size_t a = ZSTD_compress(zs, cap, data, half, 3);
    cr_assert(!ZSTD_isError(a));
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
    size_t b = ZSTD_compress2(cctx, zs + a, cap - a, data + half, raw - half);
    cr_assert(!ZSTD_isError(b));
    ZSTD_freeCCtx(cctx);
    zm__filter zstd = {.id = ZM__FILTER_ZSTD};
    cr_assert_eq(zm__filter_decode(&zstd, 1, 0, 4, zs, a + b, out, raw, &err), 0, "%s", err.reason);
    cr_assert(memcmp(out, data, raw) == 0);
    cr_assert_eq(zm__filter_decode(&zstd, 1, 0, 4, zs, a + b, out, raw - 1, &err), -EIO);
    cr_assert_str_eq(err.reason, "zstd: decodes to more than the 1048587 bytes expected");

    /* blosc with its own shuffle, then zstd over it: the blosc stage's
     * input size is unknown until zstd has run. */
    size_t bcap = raw + BLOSC_MAX_OVERHEAD;
    uint8_t *bl = malloc(bcap);
    int bn = blosc_compress_ctx(5, BLOSC_SHUFFLE, 4, raw, data, bl, bcap, "lz4", 0, 1);
    cr_assert_gt(bn, 0);
    zm__filter blosc = {.id = ZM__FILTER_BLOSC};
    cr_assert_eq(zm__filter_decode(&blosc, 1, 0, 4, bl, (size_t)bn, out, raw, &err), 0, "%s",
                 err.reason);
    cr_assert(memcmp(out, data, raw) == 0);
    size_t zb = ZSTD_compress(zs, cap, bl, (size_t)bn, 1);
    cr_assert(!ZSTD_isError(zb));
    zm__filter pipe[3] = {blosc, zstd, {.id = ZM__FILTER_FLETCHER32}};
    /* Append a fletcher32 computed by the decoder's definition: decode the
     * pair without it first, then check the trio refuses a bad checksum. */
    cr_assert_eq(zm__filter_decode(pipe, 2, 0, 4, zs, zb, out, raw, &err), 0, "%s", err.reason);
    cr_assert(memcmp(out, data, raw) == 0);
    zs[zb] = zs[zb + 1] = zs[zb + 2] = zs[zb + 3] = 0;
    cr_assert_eq(zm__filter_decode(pipe, 3, 0, 4, zs, zb + 4, out, raw, &err), -EIO);
    cr_assert(strncmp(err.reason, "fletcher32 checksum mismatch", 28) == 0, "%s", err.reason);
    /* Skipping the zstd stage leaves blosc facing a zstd frame. */
    cr_assert_eq(zm__filter_decode(pipe, 2, 2, 4, zs, zb, out, raw, &err), -EIO);
    cr_assert(strncmp(err.reason, "blosc: ", 7) == 0, "%s", err.reason);
    free(bl);
    free(zs);

    /* shuffle then deflate, the usual h5py pair, with the leftover bytes. */
    uint8_t *sh = malloc(raw);
    size_t n = raw / 4;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < 4; j++)
            sh[j * n + i] = data[i * 4 + j];
    memcpy(sh + n * 4, data + n * 4, raw - n * 4);
    zlen = compressBound(raw);
    z = malloc(zlen);
    cr_assert_eq(compress2(z, &zlen, sh, raw, 1), Z_OK);
    zm__filter sd[2] = {{.id = ZM__FILTER_SHUFFLE, .cd_count = 1, .cd_values = {4}}, deflate};
    cr_assert_eq(zm__filter_decode(sd, 2, 0, 4, z, zlen, out, raw, &err), 0, "%s", err.reason);
    cr_assert(memcmp(out, data, raw) == 0);
    free(z);
    free(sh);
    free(out);
    free(data);
}

/* A stream that decodes far beyond the chunk, at a stage whose size is not
 * known ahead (deflate under zstd), is cut off rather than followed. */
Test(filters, unknown_size_stage_is_bounded)
{
    size_t big = 64u << 20;
    uint8_t *zeros = calloc(1, big);
    size_t cap = ZSTD_compressBound(big);
    uint8_t *zs = malloc(cap);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
    size_t n = ZSTD_compress2(cctx, zs, cap, zeros, big);
    ZSTD_freeCCtx(cctx);
    cr_assert(!ZSTD_isError(n));
    free(zeros);
    zm__filter pipe[2] = {{.id = ZM__FILTER_DEFLATE}, {.id = ZM__FILTER_ZSTD}};
    uint8_t out[4096];
    zm_err err;
    cr_assert_eq(zm__filter_decode(pipe, 2, 0, 1, zs, n, out, sizeof out, &err), -EIO);
    cr_assert(strncmp(err.reason, "zstd: decodes to more than", 26) == 0, "%s", err.reason);
    free(zs);
}

Test(filters, empty_and_tiny_inputs)
{
    zm_err err;
    uint8_t out[8];
    unsigned ids[] = {ZM__FILTER_DEFLATE, ZM__FILTER_LZF,        ZM__FILTER_ZSTD,
                      ZM__FILTER_BLOSC,   ZM__FILTER_FLETCHER32, ZM__FILTER_SHUFFLE};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        zm__filter f = {.id = ids[k], .cd_count = 1, .cd_values = {4}};
        uint8_t one = 0;
        int rc = zm__filter_decode(&f, 1, 0, 4, &one, 0, out, sizeof out, &err);
        cr_assert_eq(rc, -EIO, "filter %u, empty input", ids[k]);
        assert_one_line(&err);
        rc = zm__filter_decode(&f, 1, 0, 4, &one, 1, out, sizeof out, &err);
        cr_assert_eq(rc, -EIO, "filter %u, one byte", ids[k]);
        assert_one_line(&err);
    }
    /* A NULL err is allowed. */
    zm__filter f = {.id = ZM__FILTER_DEFLATE};
    cr_assert_eq(zm__filter_decode(&f, 1, 0, 1, out, sizeof out, out, 1, NULL), -EIO);
}

/* ---- threads ------------------------------------------------------------ */

typedef struct decode_job {
    const vectors *vs;
    int rounds;
    int failures;
} decode_job;

static void *decode_all(void *arg)
{
    decode_job *job = arg;
    for (int r = 0; r < job->rounds; r++) {
        for (size_t i = 0; i < job->vs->n; i++) {
            const vector *v = &job->vs->v[i];
            zm_err err;
            uint8_t *out;
            if (decode(v, v->stored, v->stored_size, v->raw_size, &out, &err) != 0 ||
                memcmp(out, v->expected, v->raw_size) != 0)
                job->failures++;
            free(out);
        }
    }
    return NULL;
}

Test(filters, concurrent_decoding)
{
    vectors vs;
    load_vectors(&vs);
    pthread_t t[8];
    decode_job jobs[8];
    for (int k = 0; k < 8; k++) {
        jobs[k] = (decode_job){&vs, 5, 0};
        cr_assert_eq(pthread_create(&t[k], NULL, decode_all, &jobs[k]), 0);
    }
    for (int k = 0; k < 8; k++) {
        pthread_join(t[k], NULL);
        cr_assert_eq(jobs[k].failures, 0);
    }
    free_vectors(&vs);
}

/* ---- A part of a deflate chunk -------------------------------------------------- */

typedef struct stored_bytes {
    const uint8_t *bytes;
    size_t size;
    size_t reads;
    size_t read_bytes;
} stored_bytes;

static int read_from(void *context, size_t offset, void *buffer, size_t size, zm_err *err)
{
    stored_bytes *s = context;
    if (offset + size > s->size)
        return zm_err_set(err, -EIO, "read past the stored bytes");
    memcpy(buffer, s->bytes + offset, size);
    s->reads++;
    s->read_bytes += size;
    return 0;
}

Test(filters, inflate_prefix_reads_about_its_share)
{
    size_t raw_size = 1 << 18;
    uint8_t *raw = malloc(raw_size);
    uint32_t x = 12345;
    for (size_t i = 0; i < raw_size; i++) {
        x = x * 1103515245u + 12345u;
        raw[i] = (uint8_t)((x >> 16) % 7 == 0 ? x >> 24 : i / 1024);
    }
    uLongf packed_size = compressBound(raw_size);
    uint8_t *packed = malloc(packed_size);
    cr_assert_eq(compress2(packed, &packed_size, raw, raw_size, 4), Z_OK);
    uint8_t *out = malloc(raw_size);
    size_t wants[] = {0, 1, 4096, raw_size / 10, raw_size / 2, raw_size - 1, raw_size};
    for (size_t w = 0; w < sizeof wants / sizeof wants[0]; w++) {
        stored_bytes s = {packed, packed_size, 0, 0};
        size_t read_bytes = 0;
        zm_err err = {0};
        memset(out, 0xee, raw_size);
        int rc = zm__inflate_prefix(read_from, &s, packed_size, raw_size, out, wants[w],
                                    &read_bytes, &err);
        cr_assert_eq(rc, 0, "%zu bytes: %s", wants[w], err.reason);
        cr_expect(memcmp(out, raw, wants[w]) == 0, "%zu bytes: wrong values", wants[w]);
        if (wants[w] < raw_size)
            cr_expect_eq(out[wants[w]], 0xee, "%zu bytes: wrote past the part", wants[w]);
        cr_expect_eq(read_bytes, s.read_bytes);
        cr_expect_leq(read_bytes, packed_size);
        /* About its share of the stored bytes: never the whole for a tenth. */
        if (wants[w] <= raw_size / 10)
            cr_expect_lt(read_bytes, packed_size / 4, "%zu bytes read %zu of %lu", wants[w],
                         read_bytes, (unsigned long)packed_size);
    }
    /* A damaged stream and a short one fail with a reason. */
    uint8_t *damaged = malloc(packed_size);
    memcpy(damaged, packed, packed_size);
    for (size_t i = 2; i < packed_size; i += 97)
        damaged[i] ^= 0x5a;
    stored_bytes bad = {damaged, packed_size, 0, 0};
    size_t read_bytes;
    zm_err err = {0};
    cr_expect_eq(zm__inflate_prefix(read_from, &bad, packed_size, raw_size, out, raw_size / 2,
                                    &read_bytes, &err),
                 -EIO);
    cr_expect(strstr(err.reason, "deflate") != NULL, "%s", err.reason);
    stored_bytes shorter = {packed, packed_size / 3, 0, 0};
    zm_err_clear(&err);
    cr_expect_eq(zm__inflate_prefix(read_from, &shorter, packed_size / 3, raw_size, out, raw_size,
                                    &read_bytes, &err),
                 -EIO);
    cr_expect(strstr(err.reason, "ends after") != NULL, "%s", err.reason);
    /* The reader's failure is the caller's. */
    stored_bytes past = {packed, packed_size / 3, 0, 0};
    zm_err_clear(&err);
    cr_expect_eq(zm__inflate_prefix(read_from, &past, packed_size, raw_size, out, raw_size,
                                    &read_bytes, &err),
                 -EIO);
    cr_expect(strstr(err.reason, "read past") != NULL, "%s", err.reason);
    free(damaged);
    free(out);
    free(packed);
    free(raw);
}
