/* The selection kernel against brute-force readings of the spec and its
 * stated properties (nested sizes, B = 1 equal to uniform, prefix order). */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "select/select_internal.h"
#include "zarrmount/select.h"

/* ---- primitives ---------------------------------------------------------- */

Test(rank, fmix32_known_values)
{
    cr_expect_eq(zm_fmix32(0), 0u);
    cr_expect_eq(zm_fmix32(1), 0x514e28b7u);
    cr_expect_eq(zm_fmix32(2), 0x30f4c306u);
    cr_expect_eq(zm_fmix32(0xffffffffu), 0x81f16f39u);
    cr_expect_eq(zm_fmix32(12345), 0x3c46c9dcu);
    cr_expect_eq(zm_seed_key(0), 0x92ca2f0eu);
    cr_expect_eq(zm_seed_key(1), 0x36deb503u);
    cr_expect_eq(zm_rank(0, 0), 0xaa3e5b61u);
    cr_expect_eq(zm_rank(0, 4), 0x06dee630u);
}

Test(rank, inverse_undoes_fmix32)
{
    uint32_t x = 0x12345678u;
    for (int i = 0; i < 1000000; i++) {
        x = x * 1664525u + 1013904223u;
        cr_assert_eq(zm_fmix32_inverse(zm_fmix32(x)), x, "x = %u", x);
    }
    cr_expect_eq(zm_fmix32_inverse(0xffffffffu), zm_fmix32_inverse(0xffffffffu));
    cr_expect_eq(zm_fmix32(zm_fmix32_inverse(0xffffffffu)), 0xffffffffu);
}

/* ---- brute-force readings of uniform and blocks ------------------------- */

typedef struct {
    uint32_t rank, position;
} ranked;

static int by_rank(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Uniform: rank every cell, sort, take the first k. */
static void naive_uniform(uint64_t n, uint64_t k, uint32_t seed, uint32_t *positions,
                          uint32_t *order)
{
    ranked *all = malloc((n ? n : 1) * sizeof *all);
    for (uint64_t p = 0; p < n; p++)
        all[p] = (ranked){zm_rank(seed, (uint32_t)p), (uint32_t)p};
    qsort(all, n, sizeof *all, by_rank);
    for (uint64_t i = 0; i < k; i++)
        order[i] = positions[i] = all[i].position;
    qsort(positions, k, sizeof *positions, by_value);
    free(all);
}

/* Blocks: rank every block, take whole blocks until the next would exceed k. */
static void naive_blocks(uint64_t n, uint64_t k, uint32_t seed, uint64_t b, uint32_t *positions,
                         uint32_t *order)
{
    uint64_t blocks = (n + b - 1) / b;
    ranked *all = malloc((blocks ? blocks : 1) * sizeof *all);
    for (uint64_t j = 0; j < blocks; j++)
        all[j] = (ranked){zm_rank(seed, (uint32_t)j), (uint32_t)j};
    qsort(all, blocks, sizeof *all, by_rank);
    uint64_t taken = 0;
    for (uint64_t i = 0; i < blocks && taken < k; i++) {
        uint64_t start = all[i].position * b, end = start + b < n ? start + b : n;
        for (uint64_t p = start; p < end && taken < k; p++)
            order[taken++] = (uint32_t)p;
    }
    memcpy(positions, order, k * sizeof *order);
    qsort(positions, k, sizeof *positions, by_value);
    free(all);
}

static void expect_selection(const zm_request *request, const uint32_t *positions,
                             const uint32_t *order, uint64_t k)
{
    zm_selection s;
    zm_err err;
    int rc = zm_select(request, &s, &err);
    cr_assert_eq(rc, 0, "select failed: %s", err.reason);
    cr_assert_eq(s.k, k, "k: got %llu want %llu", (unsigned long long)s.k, (unsigned long long)k);
    for (uint64_t i = 0; i < k; i++) {
        cr_assert_eq(s.positions[i], positions[i], "positions[%llu] n=%llu k=%llu",
                     (unsigned long long)i, (unsigned long long)request->n,
                     (unsigned long long)k);
        cr_assert_eq(s.order[i], order[i], "order[%llu] n=%llu k=%llu", (unsigned long long)i,
                     (unsigned long long)request->n, (unsigned long long)k);
    }
    zm_selection_free(&s);
}

Test(uniform, matches_brute_force)
{
    const uint64_t sizes[] = {1, 2, 3, 10, 100, 4095, 4096, 4097, 10000, 70001, 300000};
    const uint32_t seeds[] = {0, 1, 42, 0xffffffffu};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t j = 0; j < sizeof seeds / sizeof seeds[0]; j++) {
            uint64_t n = sizes[i];
            const uint64_t ks[] = {1, 2, n / 100 + 1, n / 3 + 1, n / 2, n - 1, n, n + 5};
            uint32_t *positions = malloc((n + 5) * sizeof *positions);
            uint32_t *order = malloc((n + 5) * sizeof *order);
            for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
                if (ks[t] == 0)
                    continue;
                uint64_t k = ks[t] < n ? ks[t] : n;
                naive_uniform(n, k, seeds[j], positions, order);
                zm_request r = {.method = ZM_METHOD_UNIFORM, .n = n, .k = ks[t], .seed = seeds[j]};
                expect_selection(&r, positions, order, k);
            }
            free(positions);
            free(order);
        }
}

Test(blocks, matches_brute_force)
{
    const uint64_t sizes[] = {1, 7, 10, 100, 1000, 5003, 100000};
    const uint64_t block_sizes[] = {1, 2, 3, 7, 64, 1000, 200000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t j = 0; j < sizeof block_sizes / sizeof block_sizes[0]; j++)
            for (uint32_t seed = 0; seed < 3; seed++) {
                uint64_t n = sizes[i], b = block_sizes[j];
                const uint64_t ks[] = {1, 2, b, b + 1, n / 3 + 1, n / 2 + 1, n - 1, n, 2 * n};
                uint32_t *positions = malloc(2 * n * sizeof *positions);
                uint32_t *order = malloc(2 * n * sizeof *order);
                for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
                    if (ks[t] == 0)
                        continue;
                    uint64_t k = ks[t] < n ? ks[t] : n;
                    naive_blocks(n, k, seed, b, positions, order);
                    zm_request r = {.method = ZM_METHOD_BLOCKS, .n = n, .k = ks[t], .seed = seed,
                                    .block_size = b};
                    expect_selection(&r, positions, order, k);
                }
                free(positions);
                free(order);
            }
}

/* Every k for a short last block: the case where it falls among the chosen. */
Test(blocks, short_last_block_every_k)
{
    for (uint64_t n = 1; n <= 60; n++)
        for (uint64_t b = 1; b <= 9; b++)
            for (uint64_t k = 1; k <= n; k++) {
                uint32_t positions[60], order[60];
                naive_blocks(n, k, 7, b, positions, order);
                zm_request r = {.method = ZM_METHOD_BLOCKS, .n = n, .k = k, .seed = 7,
                                .block_size = b};
                expect_selection(&r, positions, order, k);
            }
}

Test(blocks, block_size_one_is_uniform)
{
    for (uint32_t seed = 0; seed < 4; seed++) {
        zm_request u = {.method = ZM_METHOD_UNIFORM, .n = 50000, .k = 1234, .seed = seed};
        zm_request b = u;
        b.method = ZM_METHOD_BLOCKS;
        b.block_size = 1;
        zm_selection su, sb;
        cr_assert_eq(zm_select(&u, &su, NULL), 0);
        cr_assert_eq(zm_select(&b, &sb, NULL), 0);
        cr_assert_eq(memcmp(su.positions, sb.positions, 1234 * 4), 0);
        cr_assert_eq(memcmp(su.order, sb.order, 1234 * 4), 0);
        zm_selection_free(&su);
        zm_selection_free(&sb);
    }
}

/* Nested: the cells kept at k are kept at every k' > k, and the first k of
 * the priority order at k' are exactly the subsample of size k. */
Test(nested, uniform_and_blocks_prefix_property)
{
    for (int method = 0; method < 2; method++) {
        zm_request big = {.method = method ? ZM_METHOD_BLOCKS : ZM_METHOD_UNIFORM,
                          .n = 100003, .k = 60000, .seed = 99, .block_size = 37};
        zm_selection sb;
        cr_assert_eq(zm_select(&big, &sb, NULL), 0);
        const uint64_t ks[] = {1, 36, 37, 38, 1000, 59999};
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            zm_request small = big;
            small.k = ks[i];
            zm_selection ss;
            cr_assert_eq(zm_select(&small, &ss, NULL), 0);
            cr_assert_eq(memcmp(ss.order, sb.order, ks[i] * 4), 0, "prefix at k=%llu",
                         (unsigned long long)ks[i]);
            /* Every small position is among the big positions. */
            uint64_t j = 0;
            for (uint64_t t = 0; t < ss.k; t++) {
                while (j < sb.k && sb.positions[j] < ss.positions[t])
                    j++;
                cr_assert(j < sb.k && sb.positions[j] == ss.positions[t]);
            }
            zm_selection_free(&ss);
        }
        zm_selection_free(&sb);
    }
}

/* ---- the edge cases table ------------------------------------------------ */

Test(edge, k_zero_refused)
{
    zm_request r = {.method = ZM_METHOD_UNIFORM, .n = 10, .k = 0};
    zm_selection s;
    zm_err err;
    cr_expect_eq(zm_select(&r, &s, &err), -EINVAL);
    cr_expect(strstr(err.reason, "k = 0") != NULL, "%s", err.reason);
}

Test(edge, k_at_least_n_keeps_every_cell)
{
    for (int method = 0; method < 2; method++) {
        zm_request r = {.method = method ? ZM_METHOD_BLOCKS : ZM_METHOD_UNIFORM, .n = 1000,
                        .k = 5000, .block_size = 10};
        zm_selection s;
        cr_assert_eq(zm_select(&r, &s, NULL), 0);
        cr_assert_eq(s.k, 1000u);
        for (uint32_t p = 0; p < 1000; p++)
            cr_assert_eq(s.positions[p], p);
        zm_selection_free(&s);
    }
}

Test(edge, n_past_uint32_refused)
{
    zm_request r = {.method = ZM_METHOD_UNIFORM, .n = (1ULL << 32), .k = 1};
    zm_selection s;
    zm_err err;
    cr_expect_eq(zm_select(&r, &s, &err), -EINVAL);
    cr_expect(strstr(err.reason, "uint32") != NULL, "%s", err.reason);
}

Test(edge, n_zero_keeps_nothing)
{
    zm_request r = {.method = ZM_METHOD_UNIFORM, .n = 0, .k = 3};
    zm_selection s;
    cr_assert_eq(zm_select(&r, &s, NULL), 0);
    cr_expect_eq(s.k, 0u);
    zm_selection_free(&s);
}

/* ---- splitting over strata ----------------------------------------------- */

static void expect_split(const uint64_t *sizes, uint64_t count, uint64_t k, uint64_t minimum,
                         zm_allocation allocation, const uint64_t *want)
{
    uint64_t kept[16];
    zm_err err;
    cr_assert_eq(zm__split_strata(sizes, count, k, minimum, allocation, kept, &err), 0, "%s",
                 err.reason);
    for (uint64_t s = 0; s < count; s++)
        cr_expect_eq(kept[s], want[s], "stratum %llu: got %llu want %llu", (unsigned long long)s,
                     (unsigned long long)kept[s], (unsigned long long)want[s]);
}

Test(split, proportional_largest_remainder)
{
    /* R = 4 over capacities 2, 2, 2: q = 1 each, remainders 2, 2, 2; the one
     * left goes to the lowest stratum. */
    expect_split((uint64_t[]){2, 2, 2}, 3, 4, 0, ZM_ALLOCATION_PROPORTIONAL, (uint64_t[]){2, 1, 1});
    /* 5 over 5, 3, 2: q = 2, 1, 1, remainders 5, 5, 0: tie to stratum 0. */
    expect_split((uint64_t[]){5, 3, 2}, 3, 5, 0, ZM_ALLOCATION_PROPORTIONAL, (uint64_t[]){3, 1, 1});
    /* A larger remainder wins over a lower number: 5 over 4, 3, 3 (C = 10):
     * 20, 15, 15 → q = 2, 1, 1, remainders 0, 5, 5 → one more to stratum 1. */
    expect_split((uint64_t[]){4, 3, 3}, 3, 5, 0, ZM_ALLOCATION_PROPORTIONAL, (uint64_t[]){2, 2, 1});
}

Test(split, balanced_water_filling)
{
    /* 9 over 10, 2, 5: L = 3 fills 3 + 2 + 3 = 8; one more to stratum 0. */
    expect_split((uint64_t[]){10, 2, 5}, 3, 9, 0, ZM_ALLOCATION_BALANCED, (uint64_t[]){4, 2, 3});
    /* 10 over 3, 3, 3, 3: L = 2 fills 8; two more to strata 0 and 1. */
    expect_split((uint64_t[]){3, 3, 3, 3}, 4, 10, 0, ZM_ALLOCATION_BALANCED,
                 (uint64_t[]){3, 3, 2, 2});
    /* 1 cell over 4 strata: stratum 0. */
    expect_split((uint64_t[]){5, 5, 5, 5}, 4, 1, 0, ZM_ALLOCATION_BALANCED,
                 (uint64_t[]){1, 0, 0, 0});
}

Test(split, minimum_per_stratum)
{
    uint64_t kept[3];
    zm_err err;
    /* Bases 2, 1, 2 = 5 > 4: refused. */
    cr_expect_eq(zm__split_strata((uint64_t[]){10, 1, 5}, 3, 4, 2, ZM_ALLOCATION_PROPORTIONAL,
                                  kept, &err), -EINVAL);
    cr_expect(strstr(err.reason, "minimum") != NULL, "%s", err.reason);
    /* Exactly fits. */
    expect_split((uint64_t[]){10, 1, 5}, 3, 5, 2, ZM_ALLOCATION_PROPORTIONAL, (uint64_t[]){2, 1, 2});
    /* R = 3 over capacities 8, 0, 3 (C = 11): q = 2, 0, 0, remainders 2, 0, 9. */
    expect_split((uint64_t[]){10, 1, 5}, 3, 8, 2, ZM_ALLOCATION_PROPORTIONAL, (uint64_t[]){4, 1, 3});
    expect_split((uint64_t[]){10, 1, 5}, 3, 8, 2, ZM_ALLOCATION_BALANCED, (uint64_t[]){4, 1, 3});
}

/* Never more cells than a stratum has; always exactly k in all. */
Test(split, totals_hold_for_random_strata)
{
    uint32_t x = 1;
    for (int trial = 0; trial < 20000; trial++) {
        uint64_t sizes[16], kept[16], count = 1 + trial % 16, n = 0;
        for (uint64_t s = 0; s < count; s++) {
            x = x * 1664525u + 1013904223u;
            sizes[s] = 1 + (x >> 8) % (trial % 3 == 0 ? 5 : 1000);
            n += sizes[s];
        }
        x = x * 1664525u + 1013904223u;
        uint64_t k = 1 + (x >> 4) % n, minimum = trial % 4;
        zm_allocation a = trial % 2 ? ZM_ALLOCATION_BALANCED : ZM_ALLOCATION_PROPORTIONAL;
        int rc = zm__split_strata(sizes, count, k, minimum, a, kept, NULL);
        uint64_t base = 0;
        for (uint64_t s = 0; s < count; s++)
            base += sizes[s] < minimum ? sizes[s] : minimum;
        if (base > k) {
            cr_assert_eq(rc, -EINVAL);
            continue;
        }
        cr_assert_eq(rc, 0);
        uint64_t total = 0;
        for (uint64_t s = 0; s < count; s++) {
            cr_assert(kept[s] <= sizes[s]);
            cr_assert(kept[s] >= (sizes[s] < minimum ? sizes[s] : minimum));
            total += kept[s];
        }
        cr_assert_eq(total, k);
    }
}

/* ---- stratified ------------------------------------------------------------ */

Test(stratified, keeps_lowest_ranked_per_stratum_missing_last)
{
    /* 0: 4 cells, 1: none (takes no part), 2: 3 cells, missing: 3 cells. */
    int32_t codes[] = {0, 2, -1, 0, 2, -5, 0, 2, 0, -1};
    zm_request r = {.method = ZM_METHOD_STRATIFIED, .n = 10, .k = 6, .seed = 3, .codes = codes,
                    .allocation = ZM_ALLOCATION_BALANCED};
    zm_selection s;
    zm_err err;
    cr_assert_eq(zm_select(&r, &s, &err), 0, "%s", err.reason);
    cr_assert_eq(s.strata_count, 3u);
    cr_expect_eq(s.strata[0].id, 0u);
    cr_expect_eq(s.strata[1].id, 2u);
    cr_expect_eq(s.strata[2].id, 3u); /* the missing stratum, after every category */
    cr_expect_eq(s.strata[0].kept + s.strata[1].kept + s.strata[2].kept, 6u);
    /* Balanced 6 over 4, 3, 3: 2 each. Each stratum's kept cells are its
     * lowest-ranked. */
    for (size_t t = 0; t < 3; t++)
        cr_expect_eq(s.strata[t].kept, 2u);
    for (uint64_t i = 0; i < s.k; i++) {
        uint32_t p = s.positions[i];
        int32_t code = codes[p] < 0 ? -1 : codes[p];
        unsigned lower = 0;
        for (uint32_t q = 0; q < 10; q++) {
            int32_t cq = codes[q] < 0 ? -1 : codes[q];
            lower += cq == code && zm_rank(3, q) < zm_rank(3, p);
        }
        cr_expect(lower < 2, "position %u is not among its stratum's 2 lowest", p);
    }
    /* Priority order: by rank. */
    for (uint64_t i = 1; i < s.k; i++)
        cr_expect(zm_rank(3, s.order[i - 1]) < zm_rank(3, s.order[i]));
    zm_selection_free(&s);
}

Test(stratified, values_in_code_point_order)
{
    const char *values[] = {"a", "B", NULL, "\xc3\xa9", "a", "B"};
    size_t lengths[] = {1, 1, 0, 2, 1, 1};
    int32_t codes[6];
    uint64_t categories = 0;
    cr_assert_eq(zm_codes_from_values(values, lengths, 6, codes, &categories, NULL), 0);
    cr_expect_eq(categories, 3u);
    /* "B" (U+0042) < "a" (U+0061) < "é" (U+00E9), whatever a locale says. */
    int32_t want[] = {1, 0, -1, 2, 1, 0};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(codes[i], want[i], "codes[%d]", i);
}

Test(stratified, k_at_least_n_is_never_refused)
{
    int32_t codes[] = {0, 1, 1, 1};
    zm_request r = {.method = ZM_METHOD_STRATIFIED, .n = 4, .k = 4, .codes = codes, .minimum = 9};
    zm_selection s;
    cr_assert_eq(zm_select(&r, &s, NULL), 0);
    cr_expect_eq(s.k, 4u);
    zm_selection_free(&s);
}

/* ---- spatial ----------------------------------------------------------------- */

static void expect_boxes(const double *coords, uint64_t n, unsigned dims, uint64_t grid,
                         const uint64_t *want)
{
    uint64_t boxes[16];
    cr_assert_eq(zm__spatial_boxes(coords, n, dims, grid, boxes, NULL), 0);
    for (uint64_t p = 0; p < n; p++)
        cr_expect_eq(boxes[p], want[p], "cell %llu: box %llu want %llu", (unsigned long long)p,
                     (unsigned long long)boxes[p], (unsigned long long)want[p]);
}

Test(spatial, boxes)
{
    /* The high edge lands in box G − 1; non-finite cells in box G^d. */
    expect_boxes((double[]){0, 0.5, 1, NAN, 0.25}, 5, 1, 2, (uint64_t[]){0, 1, 1, 2, 0});
    /* Two axes: b0 + G·b1; an equal axis is box 0. */
    expect_boxes((double[]){0, 5, 1, 5, 0.5, 5, INFINITY, 5}, 4, 2, 4,
                 (uint64_t[]){0, 3, 2, 16});
    /* No finite cell: every cell in the last box. */
    expect_boxes((double[]){NAN, -INFINITY, NAN}, 3, 1, 32, (uint64_t[]){32, 32, 32});
    /* Values past float32's range: 1e39 rounds to infinity (non-finite),
     * 3.4028235e38 stays finite. */
    expect_boxes((double[]){0, 3.4028235e38, 1e39}, 3, 1, 8, (uint64_t[]){0, 7, 8});
    /* Rounding to float32 first: 0.1 and 0.1f are the same coordinate. */
    expect_boxes((double[]){0, 0.1, (double)0.1f, 1}, 4, 1, 1000, (uint64_t[]){0, 100, 100, 999});
}

/* Found by tests/fuzz/fuzz_request.c ({"method": "spatial", "coords": [[5, 5], [NaN, 2],
 * [3, Infinity], [4, 5]], ...}): a row with a non-finite coordinate does not set the bounds,
 * so its finite ones may lie outside them (3 < 4 here); placing one on the grid converted
 * a negative cell number to uint64 (undefined behaviour) before the non-finite axis sent
 * the row to box G^d. The row goes there without any of its coordinates placed. */
Test(spatial, incomplete_row_outside_the_bounds)
{
    expect_boxes((double[]){5, 5, NAN, 2, 3, INFINITY, 4, 5}, 4, 2, 32,
                 (uint64_t[]){31, 1024, 1024, 0});
    /* Past the high bound too, and with the non-finite axis first. */
    expect_boxes((double[]){0, 0, 1, 1, 1e30, NAN, NAN, -1e30}, 4, 2, 4,
                 (uint64_t[]){0, 15, 16, 16});
}

Test(spatial, grid_limit_refused)
{
    double coords[3] = {0, 1, 2};
    zm_request r = {.method = ZM_METHOD_SPATIAL, .n = 1, .k = 1, .coords = coords, .dims = 3,
                    .grid_size = 1u << 18};
    zm_selection s;
    zm_err err;
    cr_expect_eq(zm_select(&r, &s, &err), -EINVAL);
    cr_expect(strstr(err.reason, "2^53") != NULL, "%s", err.reason);
    r.grid_size = 1u << 17; /* 2^51 boxes: fine */
    cr_expect_eq(zm_select(&r, &s, &err), 0, "%s", err.reason);
    zm_selection_free(&s);
    r.dims = 2;
    r.grid_size = 94906266; /* 94906266^2 > 2^53 */
    cr_expect_eq(zm_select(&r, &s, &err), -EINVAL);
    r.grid_size = 94906265; /* 94906265^2 < 2^53 */
    cr_expect_eq(zm_select(&r, &s, &err), 0, "%s", err.reason);
    zm_selection_free(&s);
    r.grid_size = 0;
    cr_expect_eq(zm_select(&r, &s, &err), -EINVAL);
}

Test(spatial, sparse_regions_keep_their_cells)
{
    /* 1000 cells at 0 and one far away: balanced keeps the lone cell. */
    double coords[1001];
    for (int i = 0; i < 1000; i++)
        coords[i] = 0;
    coords[1000] = 100;
    zm_request r = {.method = ZM_METHOD_SPATIAL, .n = 1001, .k = 10, .coords = coords, .dims = 1,
                    .grid_size = 32};
    zm_selection s;
    cr_assert_eq(zm_select(&r, &s, NULL), 0);
    cr_expect_eq(s.strata_count, 2u);
    cr_expect_eq(s.positions[s.k - 1], 1000u);
    zm_selection_free(&s);
}

static int compare_u32_test(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int compare_u64_test(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* zm_sort_u64 (views sort cells as source row << bits | view row with it)
 * against qsort: keys of every width, small and wide, duplicates, the
 * extremes. */
Test(rank, sort_u64_matches_qsort)
{
    const uint64_t counts[] = {0, 1, 2, 17, 1000, 65537, 300000};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int shape = 0; shape < 4; shape++) {
            uint64_t n = counts[c];
            uint64_t *values = malloc((n ? n : 1) * sizeof *values);
            uint64_t *expected = malloc((n ? n : 1) * sizeof *expected);
            uint64_t state = 0xD1B54A32D192ED03ull * (c + 1) + (uint64_t)shape;
            for (uint64_t i = 0; i < n; i++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                values[i] =
                    shape == 0   ? state                               /* all 64 bits */
                    : shape == 1 ? (state >> 20) << 20 | i % 1024      /* row << bits | view row */
                    : shape == 2 ? (state % 5) * 0x3FFFFFFFFFFFFFFFull /* duplicates, extremes */
                                 : n - i;                              /* small, descending */
                expected[i] = values[i];
            }
            zm_err err = {0};
            cr_assert_eq(zm_sort_u64(values, n, &err), 0, "%s", err.reason);
            qsort(expected, n, sizeof *expected, compare_u64_test);
            cr_expect(n == 0 || memcmp(values, expected, n * sizeof *values) == 0,
                      "count %llu, shape %d: not sorted like qsort", (unsigned long long)n, shape);
            free(values);
            free(expected);
        }
}

/* The radix sort against qsort: spread values (one pass on the top digit,
 * then buckets sorted in cache), values piled into few buckets (plain
 * passes), small counts, duplicates, and the extremes. */
Test(rank, radix_sort_matches_qsort)
{
    const uint64_t counts[] = {0, 1, 2, 17, 1000, 16384, 16385, 300000, 2000000};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int shape = 0; shape < 4; shape++) {
            uint64_t n = counts[c];
            uint32_t *values = malloc((n ? n : 1) * sizeof *values);
            uint32_t *expected = malloc((n ? n : 1) * sizeof *expected);
            uint64_t state = 0x9E3779B97F4A7C15ull * (c + 1) + (uint64_t)shape;
            for (uint64_t i = 0; i < n; i++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(state >> 32);
                values[i] = shape == 0 ? r                       /* spread */
                            : shape == 1 ? r & 0x001FFFFF        /* one top bucket */
                            : shape == 2 ? (r % 7) * 0x7FFFFFFFu /* duplicates at the extremes */
                                         : (uint32_t)(n - i);    /* descending */
                expected[i] = values[i];
            }
            zm_err err = {0};
            cr_assert_eq(zm__radix_sort_u32(values, n, &err), 0, "%s", err.reason);
            qsort(expected, n, sizeof *expected, compare_u32_test);
            cr_expect(n == 0 || memcmp(values, expected, n * sizeof *values) == 0,
                      "count %llu, shape %d: not sorted like qsort", (unsigned long long)n, shape);
            free(values);
            free(expected);
        }
}
