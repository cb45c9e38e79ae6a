/* Walks in synth: their memory taken back once their chunks are all made
 * (zm_synth_walk_retire), never while a chunk is borrowed from them, and a
 * walk taken back made again with the same bytes. The views of a test
 * share one zm_synth (as a mount's do), made when the test first needs it:
 * each test runs in a process of its own (criterion), so its walk counters
 * start at zero. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zarrmount/source.h"
#include "zarrmount/synth.h"
#include "zarrmount/view.h"

/* What the test's views give walks. Walks gather (in memory or spilled)
 * unless a test says they may be direct (zm_synth_walk_direct): the
 * fixtures' arrays are contiguous or in unfiltered chunks, so they would
 * be, and hold nothing. */
static zm_synth *test_synth(void)
{
    static zm_synth *synth;
    if (synth == NULL) {
        synth = zm_synth_create(ZM_SYNTH_DEFAULT_WALK_MEMORY);
        cr_assert_not_null(synth);
        zm_synth_set_direct(synth, 0);
    }
    return synth;
}

typedef struct fixture {
    zm_source *source;
    zm_view *view;
    const zm_store_node *data, *indices, *column;
    uint64_t walk_bytes; /* what a walk of X/data (or X/indices) holds */
} fixture;

/* full/ of a 60-cell CSR file, in chunks of 256 bytes: X/data and
 * X/indices (693 values of 4 bytes each) are walked, several chunks each. */
static void open_fixture(fixture *f)
{
    char path[4096];
    const char *root = getenv("ZM_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/fixtures/sources/h5ad/full-csr.h5ad", root ? root : ".");
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm_source_open(path, NULL, &f->source, &err), 0, "%s", err.reason);
    zm_view_spec spec = {.kind = ZM_VIEW_FULL, .k = 1};
    cr_assert_eq(zm_view_create(f->source, &spec, 256, &f->view, &err), 0, "%s", err.reason);
    f->data = zm_view_find(f->view, "X/data");
    f->indices = zm_view_find(f->view, "X/indices");
    f->column = zm_view_find(f->view, "obs/int32");
    cr_assert(f->data && f->indices && f->column);
    cr_assert(zm_synth_walks(f->view, f->data) && zm_synth_walks(f->view, f->indices));
    cr_assert_gt(f->data->grid[0], 1);
    f->walk_bytes = f->data->meta.shape[0] * f->data->value_size;
    cr_assert_eq(f->walk_bytes, f->indices->meta.shape[0] * f->indices->value_size);
}

static void close_fixture(fixture *f)
{
    zm_view_free(f->view);
    zm_source_close(f->source);
}

/* Chunk c of an array, copied; the chunk itself given back unless keep. */
static uint8_t *chunk(fixture *f, const zm_store_node *node, uint64_t c, int borrow, size_t *size,
                      int *borrowed, uint8_t **kept)
{
    uint64_t coords[ZM_ZARR_MAX_RANK] = {c};
    uint8_t *raw;
    size_t typesize;
    int b = 0;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm_synth_chunk(test_synth(), f->view, node, coords, &raw, size, &typesize,
                                borrow ? &b : NULL, &err),
                 0, "%s", err.reason);
    uint8_t *copy = malloc(*size);
    cr_assert_not_null(copy);
    memcpy(copy, raw, *size);
    if (borrowed)
        *borrowed = b;
    if (kept)
        *kept = raw;
    else
        zm_synth_chunk_done(f->view, node, raw, b);
    return copy;
}

static zm_synth_walk_stats walk_stats(void)
{
    zm_synth_walk_stats s;
    zm_synth_get_walk_stats(test_synth(), &s);
    return s;
}

Test(walks, retired_walk_memory_goes_to_the_next_walk)
{
    fixture f;
    open_fixture(&f);
    /* Room for one of the two walks, not both. */
    zm_synth_set_walk_memory(test_synth(), f.walk_bytes * 3 / 2);
    size_t size0, size1;
    uint8_t *first = chunk(&f, f.data, 1, 0, &size0, NULL, NULL);
    zm_synth_walk_stats s = walk_stats();
    cr_expect_eq(s.held_bytes, f.walk_bytes, "X/data held in memory");
    cr_expect_eq(s.spilled, 0);

    /* Not retired: X/indices does not fit beside it and is spilled. */
    fixture g;
    open_fixture(&g);
    free(chunk(&g, g.indices, 0, 0, &size1, NULL, NULL));
    s = walk_stats();
    cr_expect_eq(s.spilled, 1, "a walk that does not fit beside one not retired is spilled");
    cr_expect_eq(s.reclaimed, 0);
    close_fixture(&g);

    /* Retired: the next walk takes its memory. */
    zm_synth_walk_retire(f.view, f.data);
    free(chunk(&f, f.indices, 0, 0, &size1, NULL, NULL));
    s = walk_stats();
    cr_expect_eq(s.reclaimed, 1, "X/data's memory taken back for X/indices");
    cr_expect_eq(s.held_bytes, f.walk_bytes, "X/indices held in memory");
    cr_expect_eq(s.spilled, 1, "and not spilled");

    /* X/data asked again: walked again (spilled now: X/indices holds the
     * memory, not retired), the same bytes. */
    uint8_t *again = chunk(&f, f.data, 1, 0, &size1, NULL, NULL);
    cr_expect_eq(size1, size0);
    cr_expect(memcmp(first, again, size0) == 0, "a walk made again gives the same chunk");
    s = walk_stats();
    cr_expect_eq(s.spilled, 2);
    free(first);
    free(again);
    close_fixture(&f);
    cr_expect_eq(walk_stats().held_bytes, 0, "every walk let go with its view");
}

Test(walks, a_borrowed_walk_is_not_taken_back)
{
    fixture f;
    open_fixture(&f);
    zm_synth_set_walk_memory(test_synth(), f.walk_bytes * 3 / 2);
    size_t size, other;
    int borrowed = 0;
    uint8_t *raw = NULL;
    uint8_t *copy = chunk(&f, f.data, 0, 1, &size, &borrowed, &raw);
    cr_assert_eq(borrowed, 1, "a whole chunk of a walk in memory is lent");
    zm_synth_walk_retire(f.view, f.data);
    free(chunk(&f, f.indices, 0, 0, &other, NULL, NULL));
    zm_synth_walk_stats s = walk_stats();
    cr_expect_eq(s.reclaimed, 0, "a walk lent out is kept");
    cr_expect_eq(s.spilled, 1, "the next walk is spilled instead");
    cr_expect(memcmp(copy, raw, size) == 0, "the lent chunk still holds its values");
    zm_synth_chunk_done(f.view, f.data, raw, borrowed);
    /* Given back: now it can go. */
    free(chunk(&f, f.column, 0, 0, &other, NULL, NULL));
    free(copy);
    close_fixture(&f);
}

/* Every chunk (of 64 bytes) of an array of a view of `file`, walked with walks limited to
 * `limit` bytes, after a walk of `blocker` (if any) holds its memory. */
static int last_direct; /* whether all_chunks' walk was direct */

static uint8_t **all_chunks(const char *file, const char *array, const char *blocker,
                            uint64_t limit, uint64_t *grid, size_t **sizes, uint64_t *spilled)
{
    char path[4096];
    const char *root = getenv("ZM_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/fixtures/sources/%s", root ? root : ".", file);
    fixture f = {0};
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm_source_open(path, NULL, &f.source, &err), 0, "%s", err.reason);
    zm_view_spec spec = {.kind = ZM_VIEW_FULL, .k = 1};
    cr_assert_eq(zm_view_create(f.source, &spec, 64, &f.view, &err), 0, "%s", err.reason);
    zm_synth_set_walk_memory(test_synth(), limit);
    zm_synth_walk_stats before = walk_stats();
    size_t size;
    if (blocker)
        free(chunk(&f, zm_view_find(f.view, blocker), 0, 0, &size, NULL, NULL));
    const zm_store_node *node = zm_view_find(f.view, array);
    cr_assert(node && zm_synth_walks(f.view, node) && node->grid[0] > 1, "%s %s", file, array);
    *grid = node->grid[0];
    uint8_t **chunks = calloc(*grid, sizeof *chunks);
    *sizes = calloc(*grid, sizeof **sizes);
    for (uint64_t c = 0; c < *grid; c++)
        chunks[c] = chunk(&f, node, c, 0, &(*sizes)[c], NULL, NULL);
    *spilled = walk_stats().spilled - before.spilled;
    last_direct = zm_synth_walk_direct(test_synth(), f.view, node);
    close_fixture(&f);
    return chunks;
}

static void expect_same(uint8_t **a, size_t *as, uint8_t **b, size_t *bs, uint64_t grid,
                        const char *what)
{
    for (uint64_t c = 0; c < grid; c++) {
        cr_expect_eq(as[c], bs[c], "%s: chunk %llu", what, (unsigned long long)c);
        cr_expect(as[c] == bs[c] && memcmp(a[c], b[c], as[c]) == 0, "%s: chunk %llu", what,
                  (unsigned long long)c);
        free(a[c]);
        free(b[c]);
    }
    free(a);
    free(b);
    free(as);
    free(bs);
}

Test(walks, a_column_spilled_in_bands_is_the_column_in_memory)
{
    /* A 240-byte column (60 cells of int32) spilled: it does not fit beside
     * X/data's walk (2,772 bytes), and is a few batches large (the limit's
     * eighth, 359 bytes): made in bands, a pass over the source each. */
    uint64_t grid, spilled_memory, spilled_bands;
    size_t *sm, *sb;
    uint8_t **memory = all_chunks("h5ad/full-csr.h5ad", "obs/int32", NULL, (uint64_t)1 << 30,
                                  &grid, &sm, &spilled_memory);
    uint8_t **bands = all_chunks("h5ad/full-csr.h5ad", "obs/int32", "X/data", 2772 + 100, &grid,
                                 &sb, &spilled_bands);
    cr_expect_eq(spilled_memory, 0);
    cr_expect_eq(spilled_bands, 1);
    expect_same(memory, sm, bands, sb, grid, "obs/int32 banded");
}

Test(walks, rows_spilled_in_sorted_batches_are_the_rows_in_memory)
{
    /* A dense X of 60 cells x 40 float32 (9,600 bytes) with walks limited
     * to a byte: batches of 256 bytes, far more than a few, sorted by chunk. */
    uint64_t grid, spilled_memory, spilled_batches;
    size_t *sm, *sb;
    uint8_t **memory = all_chunks("h5ad/x-dense.h5ad", "X", NULL, (uint64_t)1 << 30, &grid, &sm,
                                  &spilled_memory);
    uint8_t **batches = all_chunks("h5ad/x-dense.h5ad", "X", NULL, 1, &grid, &sb, &spilled_batches);
    cr_expect_eq(spilled_memory, 0);
    cr_expect_eq(spilled_batches, 1);
    expect_same(memory, sm, batches, sb, grid, "dense X in batches");
}

Test(walks, direct_walks_make_the_chunks_a_gathering_walk_makes)
{
    /* The same chunks (of 64 bytes) whether a walk gathers the array in
     * one pass or is direct (each chunk's rows copied from the mapped
     * source): entries in unfiltered chunks, contiguous columns of
     * several widths, a dense matrix of rows. */
    static const char *const cases[][2] = {
        {"h5ad/full-csr.h5ad", "X/data"},   {"h5ad/full-csr.h5ad", "X/indices"},
        {"h5ad/full-csr.h5ad", "obs/int32"}, {"h5ad/full-csr.h5ad", "obs/int16"},
        {"h5ad/full-csr.h5ad", "obs/float64"}, {"h5ad/full-csr.h5ad", "obsm/X_pca"},
        {"h5ad/x-dense.h5ad", "X"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t grid, spilled;
        size_t *gs, *ds;
        zm_synth_set_direct(test_synth(), 0);
        uint8_t **gathered = all_chunks(cases[i][0], cases[i][1], NULL, (uint64_t)1 << 30, &grid,
                                        &gs, &spilled);
        cr_expect_eq(last_direct, 0, "%s", cases[i][1]);
        zm_synth_set_direct(test_synth(), 1);
        uint64_t held_before = walk_stats().held_bytes;
        uint8_t **direct = all_chunks(cases[i][0], cases[i][1], NULL, (uint64_t)1 << 30, &grid,
                                      &ds, &spilled);
        cr_expect_eq(last_direct, 1, "%s %s is walked directly", cases[i][0], cases[i][1]);
        cr_expect_eq(walk_stats().held_bytes, held_before, "a direct walk holds nothing");
        expect_same(gathered, gs, direct, ds, grid, cases[i][1]);
    }
}

Test(walks, a_source_cut_short_under_a_direct_walk_fails_with_eio)
{
    /* The map faults (SIGBUS) on pages the file no longer has: the read
     * fails with EIO and a reason, and the process goes on. */
    char from[4096], path[] = "/tmp/zm-test-synth-XXXXXX";
    const char *root = getenv("ZM_SOURCE_ROOT");
    snprintf(from, sizeof from, "%s/fixtures/sources/h5ad/full-csr.h5ad", root ? root : ".");
    int out = mkstemp(path);
    cr_assert_geq(out, 0);
    FILE *in = fopen(from, "rb");
    cr_assert_not_null(in);
    char buffer[65536];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, in)) > 0)
        cr_assert_eq(write(out, buffer, n), (ssize_t)n);
    fclose(in);
    zm_synth_set_direct(test_synth(), 1);
    fixture f;
    zm_err err;
    zm_err_clear(&err);
    cr_assert_eq(zm_source_open(path, NULL, &f.source, &err), 0, "%s", err.reason);
    zm_view_spec spec = {.kind = ZM_VIEW_FULL, .k = 1};
    cr_assert_eq(zm_view_create(f.source, &spec, 256, &f.view, &err), 0, "%s", err.reason);
    const zm_store_node *node = zm_view_find(f.view, "X/data");
    cr_assert(node && zm_synth_walk_direct(test_synth(), f.view, node));
    size_t size;
    free(chunk(&f, node, 0, 0, &size, NULL, NULL)); /* the file mapped */
    cr_assert_eq(ftruncate(out, 0), 0);
    close(out);
    uint64_t coords[ZM_ZARR_MAX_RANK] = {1};
    uint8_t *raw = NULL;
    size_t raw_size, typesize;
    int rc = zm_synth_chunk(test_synth(), f.view, node, coords, &raw, &raw_size, &typesize, NULL,
                            &err);
    cr_expect_eq(rc, -EIO, "%d %s", rc, err.reason);
    cr_expect(strstr(err.reason, "ends before") != NULL, "%s", err.reason);
    if (rc == 0)
        zm_synth_chunk_done(f.view, node, raw, 0);
    close_fixture(&f);
    unlink(path);
}
