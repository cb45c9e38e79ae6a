/* The selection kernel against brute-force readings of the spec and its
 * stated properties (nested sizes, B = 1 equal to uniform, prefix order). */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
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
    cr_assert_eq(zm__spatial_boxes(coords, NULL, n, dims, grid, boxes, NULL), 0);
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

/* ---- over a set of cells ------------------------------------------------------ */

/* A small generator for the random cases (the same cases on every run). */
static uint64_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 11;
}

/* A random strictly ascending set of about density × n cells of n, at least
 * one; *count its size. */
static uint32_t *random_set(uint64_t n, double density, uint64_t *state, uint64_t *count)
{
    uint32_t *set = malloc((n ? n : 1) * sizeof *set);
    uint64_t c = 0;
    for (uint64_t p = 0; p < n; p++)
        if ((double)(next_random(state) % 1000000) < density * 1000000.0)
            set[c++] = (uint32_t)p;
    if (c == 0)
        set[c++] = (uint32_t)(next_random(state) % n);
    *count = c;
    return set;
}

static zm_selection select_ok(const zm_request *request)
{
    zm_selection s;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_select(request, &s, &err);
    cr_assert_eq(rc, 0, "select (%s, n = %llu, k = %llu, |S| = %llu) failed: %s",
                 zm_method_name(request->method), (unsigned long long)request->n,
                 (unsigned long long)request->k, (unsigned long long)request->set_count,
                 err.reason);
    return s;
}

/* Two selections are the same bytes: k, n, positions, order and strata. */
static void expect_same_selection(const zm_selection *a, const zm_selection *b, const char *what)
{
    cr_assert_eq(a->n, b->n, "%s: n", what);
    cr_assert_eq(a->k, b->k, "%s: k %llu against %llu", what, (unsigned long long)a->k,
                 (unsigned long long)b->k);
    cr_assert(a->k == 0 || memcmp(a->positions, b->positions, a->k * sizeof *a->positions) == 0,
              "%s: positions differ", what);
    cr_assert(a->k == 0 || memcmp(a->order, b->order, a->k * sizeof *a->order) == 0,
              "%s: order differs", what);
    cr_assert_eq(a->strata_count, b->strata_count, "%s: strata count", what);
    for (size_t s = 0; s < a->strata_count; s++) {
        cr_assert_eq(a->strata[s].id, b->strata[s].id, "%s: stratum %zu id", what, s);
        cr_assert_eq(a->strata[s].size, b->strata[s].size, "%s: stratum %zu size", what, s);
        cr_assert_eq(a->strata[s].kept, b->strata[s].kept, "%s: stratum %zu kept", what, s);
        cr_assert_eq(a->strata[s].missing, b->strata[s].missing, "%s: stratum %zu missing", what,
                     s);
    }
}

static void expect_cells(const zm_selection *s, const uint32_t *positions, const uint32_t *order,
                         uint64_t k, const char *what)
{
    cr_assert_eq(s->k, k, "%s: k = %llu, want %llu", what, (unsigned long long)s->k,
                 (unsigned long long)k);
    for (uint64_t i = 0; i < k; i++) {
        cr_expect_eq(s->positions[i], positions[i], "%s: positions[%llu] = %u, want %u", what,
                     (unsigned long long)i, s->positions[i], positions[i]);
        cr_expect_eq(s->order[i], order[i], "%s: order[%llu] = %u, want %u", what,
                     (unsigned long long)i, s->order[i], order[i]);
    }
}

/* Hand-computed: n = 10, S = {1, 3, 4, 7, 8}, seed 0. The ranks of S's cells
 * are 4: 0x06dee630 < 7: 0x2703de93 < 1: 0x6f0b28e6 < 3: 0xe7c2db91 <
 * 8: 0xf2a239bc, so k = 2 keeps {4, 7} and k = 3 adds 1. Cells 2 (0x226eb3e8)
 * and 6 (0x30cf8226) rank below 1 but are not in S. */
Test(set, uniform_by_hand)
{
    const uint32_t set[] = {1, 3, 4, 7, 8};
    zm_request r = {.method = ZM_METHOD_UNIFORM, .n = 10, .k = 2, .set = set, .set_count = 5};
    zm_selection s = select_ok(&r);
    expect_cells(&s, (uint32_t[]){4, 7}, (uint32_t[]){4, 7}, 2, "k = 2");
    zm_selection_free(&s);
    r.k = 3;
    s = select_ok(&r);
    expect_cells(&s, (uint32_t[]){1, 4, 7}, (uint32_t[]){4, 7, 1}, 3, "k = 3");
    cr_expect_eq(s.n, 10u);
    zm_selection_free(&s);
    r.k = 99; /* k ≥ |S| keeps S */
    s = select_ok(&r);
    expect_cells(&s, (uint32_t[]){1, 3, 4, 7, 8}, (uint32_t[]){4, 7, 1, 3, 8}, 5, "k = 99");
    zm_selection_free(&s);
}

/* Hand-computed: n = 10, B = 3, S = {0, 2, 4, 5, 9}, seed 0. The source's
 * blocks are j = 0 [0, 3) holding {0, 2} of S, j = 1 [3, 6) holding {4, 5},
 * j = 2 [6, 9) holding none and j = 3 [9, 10) holding {9}. Block ranks: j = 2
 * 0x226eb3e8 (takes no part: no cell of S), j = 1 0x6f0b28e6, j = 0
 * 0xaa3e5b61, j = 3 0xe7c2db91. So blocks come j = 1, 0, 3. */
Test(set, blocks_by_hand)
{
    const uint32_t set[] = {0, 2, 4, 5, 9};
    zm_request r = {
        .method = ZM_METHOD_BLOCKS, .n = 10, .block_size = 3, .set = set, .set_count = 5};
    struct {
        uint64_t k;
        uint32_t positions[5], order[5];
    } const cases[] = {
        {1, {4}, {4}},                   /* block 1 gives its first cell of S */
        {2, {4, 5}, {4, 5}},             /* block 1 whole */
        {3, {0, 4, 5}, {4, 5, 0}},       /* block 0 would exceed: its first 1 */
        {4, {0, 2, 4, 5}, {4, 5, 0, 2}}, /* blocks 1 and 0 whole */
        {5, {0, 2, 4, 5, 9}, {4, 5, 0, 2, 9}},
        {6, {0, 2, 4, 5, 9}, {4, 5, 0, 2, 9}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        r.k = cases[c].k;
        zm_selection s = select_ok(&r);
        expect_cells(&s, cases[c].positions, cases[c].order, cases[c].k < 5 ? cases[c].k : 5,
                     "blocks by hand");
        zm_selection_free(&s);
    }
}

/* Hand-computed: codes 0 1 2 0 1 − 2 0 − 1 (position 0 … 9), S every cell
 * but 2 and 6 (the category 2 cells), seed 0, k = 4 proportional. In S:
 * category 0 = {0, 3, 7}, 1 = {1, 4, 9}, missing = {5, 8}; category 2 takes
 * no part. R = 4 over 3, 3, 2 (C = 8): q = 1, 1, 1, remainders 4, 4, 0: the
 * one left to category 0. Lowest ranks: 0: 7 (0x2703de93), 0 (0xaa3e5b61);
 * 1: 4 (0x06dee630); missing: 5 (0x7287af0c). The missing stratum is one past
 * the largest code in S, 2, which is category 2's code: missing says which. */
Test(set, stratified_by_hand)
{
    int32_t codes[] = {0, 1, 2, 0, 1, -1, 2, 0, -1, 1};
    const uint32_t set[] = {0, 1, 3, 4, 5, 7, 8, 9};
    zm_request r = {.method = ZM_METHOD_STRATIFIED,
                    .n = 10,
                    .k = 4,
                    .codes = codes,
                    .allocation = ZM_ALLOCATION_PROPORTIONAL,
                    .set = set,
                    .set_count = 8};
    zm_selection s = select_ok(&r);
    expect_cells(&s, (uint32_t[]){0, 4, 5, 7}, (uint32_t[]){4, 7, 5, 0}, 4, "stratified");
    cr_assert_eq(s.strata_count, 3u);
    const zm_stratum want[] = {{0, 3, 2, 0}, {1, 3, 1, 0}, {2, 2, 1, 1}};
    for (size_t t = 0; t < 3; t++) {
        cr_expect_eq(s.strata[t].id, want[t].id, "stratum %zu id", t);
        cr_expect_eq(s.strata[t].size, want[t].size, "stratum %zu size", t);
        cr_expect_eq(s.strata[t].kept, want[t].kept, "stratum %zu kept", t);
        cr_expect_eq(s.strata[t].missing, want[t].missing, "stratum %zu missing", t);
    }
    /* The codes of cells outside S are never read: anything there gives
     * the same selection. */
    codes[2] = codes[6] = INT32_MAX;
    zm_selection other = select_ok(&r);
    expect_same_selection(&s, &other, "codes outside S changed");
    zm_selection_free(&other);
    zm_selection_free(&s);

    /* Over every cell the missing stratum is 3, after category 2. */
    codes[2] = codes[6] = 2;
    r.set = NULL;
    r.set_count = 0;
    s = select_ok(&r);
    cr_assert_eq(s.strata_count, 4u);
    cr_expect_eq(s.strata[3].id, 3u);
    cr_expect(s.strata[3].missing && !s.strata[2].missing);
    zm_selection_free(&s);
}

/* Hand-computed: 1-D coords 0 10 1 2 NaN 3, S = {2, 3, 4, 5}, G = 2, k = 3.
 * Over S's finite cells low = 1, high = 3 (w = 2): x = 1 is box 0, x = 2 and
 * 3 box 1, NaN box 2 (G^d). (Over every cell low = 0, high = 10 put 1, 2 and
 * 3 in box 0.) Balanced 3 over 1, 2, 1: one each; box 1 keeps 5 (0x7287af0c
 * below 3's 0xe7c2db91). Order by rank: 4 (0x06dee630), 2 (0x226eb3e8), 5. */
Test(set, spatial_by_hand)
{
    double coords[] = {0, 10, 1, 2, NAN, 3};
    const uint32_t set[] = {2, 3, 4, 5};
    zm_request r = {.method = ZM_METHOD_SPATIAL,
                    .n = 6,
                    .k = 3,
                    .coords = coords,
                    .dims = 1,
                    .grid_size = 2,
                    .set = set,
                    .set_count = 4};
    zm_selection s = select_ok(&r);
    expect_cells(&s, (uint32_t[]){2, 4, 5}, (uint32_t[]){4, 2, 5}, 3, "spatial");
    cr_assert_eq(s.strata_count, 3u);
    const uint64_t ids[] = {0, 1, 2}, sizes[] = {1, 2, 1};
    for (size_t t = 0; t < 3; t++) {
        cr_expect_eq(s.strata[t].id, ids[t], "box %zu id", t);
        cr_expect_eq(s.strata[t].size, sizes[t], "box %zu size", t);
        cr_expect_eq(s.strata[t].kept, 1u, "box %zu kept", t);
    }
    /* Coordinates outside S are never read. */
    coords[0] = -1e30;
    coords[1] = INFINITY;
    zm_selection other = select_ok(&r);
    expect_same_selection(&s, &other, "coords outside S changed");
    zm_selection_free(&other);
    zm_selection_free(&s);

    /* The boxes themselves, over S. */
    uint64_t boxes[4];
    cr_assert_eq(zm__spatial_boxes(coords, set, 4, 1, 2, boxes, NULL), 0);
    cr_expect(boxes[0] == 0 && boxes[1] == 1 && boxes[2] == 2 && boxes[3] == 1);
}

static void expect_refused(const zm_request *request, const char *phrase)
{
    zm_selection s;
    zm_err err;
    zm_err_clear(&err);
    cr_expect_eq(zm_request_check(request, &err), -EINVAL, "not refused (want \"%s\")", phrase);
    cr_expect(strstr(err.reason, phrase) != NULL, "reason \"%s\" does not say \"%s\"", err.reason,
              phrase);
    cr_expect(strchr(err.reason, '\n') == NULL, "reason is not one line: %s", err.reason);
    zm_err_clear(&err);
    cr_expect_eq(zm_select(request, &s, &err), -EINVAL);
    cr_expect(strstr(err.reason, phrase) != NULL, "select: \"%s\"", err.reason);
}

Test(set, refusals)
{
    zm_request r = {.method = ZM_METHOD_UNIFORM, .n = 10, .k = 3};
    r.set = (const uint32_t[]){1, 5, 5};
    r.set_count = 3;
    expect_refused(&r, "not strictly ascending: set[2] = 5 after 5");
    r.set = (const uint32_t[]){4, 2};
    r.set_count = 2;
    expect_refused(&r, "not strictly ascending: set[1] = 2 after 4");
    r.set = (const uint32_t[]){0, 9, 10};
    r.set_count = 3;
    expect_refused(&r, "set[2] = 10 is past the last cell (n = 10)");
    r.set = (const uint32_t[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    r.set_count = 11;
    expect_refused(&r, "11 cells, more than the 10");
    r.set = (const uint32_t[]){0};
    r.set_count = 0;
    expect_refused(&r, "the set holds no cell");
    r.set = NULL;
    r.set_count = 4;
    expect_refused(&r, "without its positions");
    /* n = 0: no set fits. */
    r.n = 0;
    r.set = (const uint32_t[]){0};
    r.set_count = 1;
    expect_refused(&r, "more than the 0");
    /* Each method checks the set. */
    r.n = 10;
    r.set = (const uint32_t[]){3, 3};
    r.set_count = 2;
    r.method = ZM_METHOD_BLOCKS;
    r.block_size = 2;
    expect_refused(&r, "not strictly ascending");
    cr_expect_eq(zm_set_check((const uint32_t[]){0, 3, 9}, 3, 10, NULL), 0);
}

/* Brute-force readings over a set. Uniform: S sorted by rank, the first k. */
static void naive_uniform_set(const uint32_t *set, uint64_t count, uint64_t k, uint32_t seed,
                              uint32_t *positions, uint32_t *order)
{
    ranked *all = malloc(count * sizeof *all);
    for (uint64_t i = 0; i < count; i++)
        all[i] = (ranked){zm_rank(seed, set[i]), set[i]};
    qsort(all, count, sizeof *all, by_rank);
    for (uint64_t i = 0; i < k; i++)
        order[i] = positions[i] = all[i].position;
    qsort(positions, k, sizeof *positions, by_value);
    free(all);
}

/* Blocks: S's cells grouped by block, the groups sorted by their block's
 * rank, concatenated, the first k. */
static void naive_blocks_set(const uint32_t *set, uint64_t count, uint64_t k, uint32_t seed,
                             uint64_t b, uint32_t *positions, uint32_t *order)
{
    ranked *groups = malloc(count * sizeof *groups); /* (block rank, first index in S) */
    uint64_t g = 0;
    for (uint64_t i = 0; i < count; i++)
        if (i == 0 || set[i] / b != set[i - 1] / b)
            groups[g++] = (ranked){zm_rank(seed, (uint32_t)(set[i] / b)), (uint32_t)i};
    qsort(groups, g, sizeof *groups, by_rank);
    uint64_t taken = 0;
    for (uint64_t t = 0; t < g && taken < k; t++)
        for (uint64_t i = groups[t].position;
             i < count && set[i] / b == set[groups[t].position] / b && taken < k; i++)
            order[taken++] = set[i];
    memcpy(positions, order, k * sizeof *order);
    qsort(positions, k, sizeof *positions, by_value);
    free(groups);
}

/* Stratified and spatial: keys[i] the i-th cell of S's stratum; strata the
 * distinct keys ascending, split by zm__split_strata (tested above), each
 * stratum's lowest-ranked kept, the whole by rank. */
static void naive_strata_set(const uint32_t *set, uint64_t count, const uint64_t *keys, uint64_t k,
                             uint32_t seed, uint64_t minimum, zm_allocation allocation,
                             uint32_t *positions, uint32_t *order, uint64_t *kept_total)
{
    uint64_t *distinct = malloc(count * sizeof *distinct);
    memcpy(distinct, keys, count * sizeof *distinct);
    qsort(distinct, count, sizeof *distinct, compare_u64_test);
    uint64_t strata = 0;
    for (uint64_t i = 0; i < count; i++)
        if (i == 0 || distinct[i] != distinct[i - 1])
            distinct[strata++] = distinct[i];
    uint64_t *sizes = calloc(strata, sizeof *sizes), *kept = calloc(strata, sizeof *kept);
    for (uint64_t i = 0; i < count; i++)
        for (uint64_t s = 0; s < strata; s++)
            sizes[s] += keys[i] == distinct[s];
    cr_assert_eq(
        zm__split_strata(sizes, strata, k < count ? k : count, minimum, allocation, kept, NULL), 0);
    ranked *members = malloc(count * sizeof *members);
    uint64_t total = 0;
    for (uint64_t s = 0; s < strata; s++) {
        uint64_t m = 0;
        for (uint64_t i = 0; i < count; i++)
            if (keys[i] == distinct[s])
                members[m++] = (ranked){zm_rank(seed, set[i]), set[i]};
        qsort(members, m, sizeof *members, by_rank);
        for (uint64_t i = 0; i < kept[s]; i++)
            positions[total++] = members[i].position;
    }
    qsort(positions, total, sizeof *positions, by_value);
    for (uint64_t i = 0; i < total; i++)
        members[i] = (ranked){zm_rank(seed, positions[i]), positions[i]};
    qsort(members, total, sizeof *members, by_rank);
    for (uint64_t i = 0; i < total; i++)
        order[i] = members[i].position;
    *kept_total = total;
    free(members);
    free(distinct);
    free(sizes);
    free(kept);
}

/* A coordinate rounded to float32 and widened back. Through a volatile:
 * gcc 12 -O2's SLP vectorizer drops the round trip of
 * `double v[2] = {(float)a, (float)b}` when v is tested with isnan (it
 * widens a and b unrounded), which this reading fell into. */
static double float32(double x)
{
    volatile float f = (float)x;
    return f;
}

/* A 2-D box over S's finite cells, written out again: coordinates in
 * float32's range with a few NaN, so the float rounding is a plain cast. */
static void naive_boxes_set(const double *coords, const uint32_t *set, uint64_t count,
                            uint64_t grid, uint64_t *boxes)
{
    double low[2] = {INFINITY, INFINITY}, high[2] = {-INFINITY, -INFINITY};
    for (uint64_t i = 0; i < count; i++) {
        double x = float32(coords[set[i] * 2]), y = float32(coords[set[i] * 2 + 1]);
        if (isnan(x) || isnan(y))
            continue;
        low[0] = fmin(low[0], x);
        high[0] = fmax(high[0], x);
        low[1] = fmin(low[1], y);
        high[1] = fmax(high[1], y);
    }
    for (uint64_t i = 0; i < count; i++) {
        double v[2] = {float32(coords[set[i] * 2]), float32(coords[set[i] * 2 + 1])};
        if (isnan(v[0]) || isnan(v[1])) {
            boxes[i] = grid * grid;
            continue;
        }
        uint64_t b[2];
        for (int a = 0; a < 2; a++) {
            double w = high[a] - low[a];
            double cell = w == 0 ? 0 : floor((v[a] - low[a]) * (double)grid / w);
            b[a] = cell >= (double)(grid - 1) ? grid - 1 : (uint64_t)cell;
        }
        boxes[i] = b[0] + grid * b[1];
    }
}

/* Random sets against the brute-force readings, every method; and every set
 * of the same requests run again as set = every position, byte for byte the
 * selection of set = NULL. */
Test(set, random_requests_match_brute_force)
{
    uint64_t state = 0x5e7c0de5ull;
    const uint64_t sizes[] = {1, 2, 9, 100, 1000, 5000, 20011, 70000};
    const double densities[] = {0.001, 0.05, 0.3, 0.9, 1.0};
    for (size_t ni = 0; ni < sizeof sizes / sizeof sizes[0]; ni++)
        for (size_t di = 0; di < sizeof densities / sizeof densities[0]; di++)
            for (int method = 0; method < 4; method++) {
                uint64_t n = sizes[ni], count;
                uint32_t *set = random_set(n, densities[di], &state, &count);
                uint32_t seed = (uint32_t)next_random(&state);
                uint64_t k = 1 + next_random(&state) % (count + count / 4 + 1);
                uint64_t b = 1 + next_random(&state) % (next_random(&state) % 2 ? 5 : 300);
                int32_t *codes = malloc(n * sizeof *codes);
                double *coords = malloc(2 * n * sizeof *coords);
                uint64_t *keys = malloc(count * sizeof *keys);
                for (uint64_t p = 0; p < n; p++) {
                    int32_t c = (int32_t)(next_random(&state) % 7);
                    codes[p] = c == 6 ? -1 : c;
                    coords[2 * p] = next_random(&state) % 50 == 0
                                        ? NAN
                                        : (double)(next_random(&state) % 1000) / 7;
                    coords[2 * p + 1] = (double)(next_random(&state) % 100) - 50;
                }
                zm_request r = {.method = (zm_method)method,
                                .n = n,
                                .k = k,
                                .seed = seed,
                                .block_size = b,
                                .codes = codes,
                                .coords = coords,
                                .dims = 2,
                                .grid_size = 1 + next_random(&state) % 9,
                                .allocation = next_random(&state) % 2 ? ZM_ALLOCATION_BALANCED
                                                                      : ZM_ALLOCATION_PROPORTIONAL,
                                .set = set,
                                .set_count = count};
                uint64_t want_k = k < count ? k : count;
                uint32_t *positions = malloc(count * sizeof *positions);
                uint32_t *order = malloc(count * sizeof *order);
                if (method == ZM_METHOD_UNIFORM) {
                    naive_uniform_set(set, count, want_k, seed, positions, order);
                } else if (method == ZM_METHOD_BLOCKS) {
                    naive_blocks_set(set, count, want_k, seed, b, positions, order);
                } else {
                    if (method == ZM_METHOD_STRATIFIED) {
                        int32_t largest = -1;
                        for (uint64_t i = 0; i < count; i++)
                            largest = codes[set[i]] > largest ? codes[set[i]] : largest;
                        for (uint64_t i = 0; i < count; i++)
                            keys[i] =
                                codes[set[i]] < 0 ? (uint64_t)largest + 1 : (uint64_t)codes[set[i]];
                    } else {
                        naive_boxes_set(coords, set, count, r.grid_size, keys);
                    }
                    uint64_t total;
                    naive_strata_set(set, count, keys, k, seed, 0,
                                     method == ZM_METHOD_SPATIAL ? ZM_ALLOCATION_BALANCED
                                                                 : r.allocation,
                                     positions, order, &total);
                    cr_assert_eq(total, want_k);
                }
                zm_selection s = select_ok(&r);
                char what[128];
                snprintf(what, sizeof what, "%s n = %llu |S| = %llu k = %llu B = %llu",
                         zm_method_name(r.method), (unsigned long long)n, (unsigned long long)count,
                         (unsigned long long)k, (unsigned long long)b);
                expect_cells(&s, positions, order, want_k, what);
                cr_assert_eq(s.n, n);
                zm_selection_free(&s);

                /* set = every position is set = NULL, byte for byte. */
                uint32_t *every = malloc(n * sizeof *every);
                for (uint64_t p = 0; p < n; p++)
                    every[p] = (uint32_t)p;
                zm_request all = r;
                all.set = every;
                all.set_count = n;
                all.k = 1 + next_random(&state) % (n + 2);
                zm_request none = all;
                none.set = NULL;
                none.set_count = 0;
                zm_selection sa = select_ok(&all), sn = select_ok(&none);
                expect_same_selection(&sa, &sn, what);
                char da[17], dn[17];
                zm_cellset_digest(sa.positions, sa.k, sa.n, da);
                zm_cellset_digest(sn.positions, sn.k, sn.n, dn);
                cr_assert_str_eq(da, dn);
                zm_selection_free(&sa);
                zm_selection_free(&sn);
                free(every);
                free(positions);
                free(order);
                free(keys);
                free(codes);
                free(coords);
                free(set);
            }
}

/* Larger: set = every position against set = NULL where the kernel's
 * uniform and blocks take their other paths (the histogram over many cells,
 * the short last block, k near n). */
Test(set, every_position_is_no_set_at_scale)
{
    const uint64_t n = 1000003;
    uint32_t *every = malloc(n * sizeof *every);
    for (uint64_t p = 0; p < n; p++)
        every[p] = (uint32_t)p;
    const uint64_t ks[] = {1, 7, 999, 250000, 999999, 1000003};
    const uint64_t bs[] = {1, 10, 4096, 1000003, 5000000};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (size_t bi = 0; bi < sizeof bs / sizeof bs[0]; bi++)
            for (int method = 0; method < 2; method++) {
                if (method == ZM_METHOD_UNIFORM && bi > 0)
                    continue;
                zm_request none = {.method = (zm_method)method,
                                   .n = n,
                                   .k = ks[ki],
                                   .seed = (uint32_t)(ki * 7 + bi),
                                   .block_size = bs[bi]};
                zm_request all = none;
                all.set = every;
                all.set_count = n;
                zm_selection sn = select_ok(&none), sa = select_ok(&all);
                expect_same_selection(&sa, &sn, zm_method_name(none.method));
                zm_selection_free(&sn);
                zm_selection_free(&sa);
            }
    free(every);
}

/* Nested over a set: for uniform and blocks, the cells kept at k are kept at
 * every k' > k, and the first k of the priority order at k' are the
 * selection at k. */
Test(set, uniform_and_blocks_nested_over_a_set)
{
    uint64_t state = 77, count;
    const uint64_t n = 200000;
    uint32_t *set = random_set(n, 0.2, &state, &count);
    for (int method = 0; method < 2; method++) {
        zm_request big = {.method = method ? ZM_METHOD_BLOCKS : ZM_METHOD_UNIFORM,
                          .n = n,
                          .k = count * 3 / 4,
                          .seed = 5,
                          .block_size = 29,
                          .set = set,
                          .set_count = count};
        zm_selection sb = select_ok(&big);
        const uint64_t ks[] = {1, 5, 6, 7, 100, 1000, count / 2, count * 3 / 4 - 1};
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            zm_request small = big;
            small.k = ks[i];
            zm_selection ss = select_ok(&small);
            cr_assert_eq(memcmp(ss.order, sb.order, ks[i] * sizeof *ss.order), 0,
                         "%s: order prefix at k = %llu", zm_method_name(big.method),
                         (unsigned long long)ks[i]);
            uint64_t j = 0;
            for (uint64_t t = 0; t < ss.k; t++) {
                while (j < sb.k && sb.positions[j] < ss.positions[t])
                    j++;
                cr_assert(j < sb.k && sb.positions[j] == ss.positions[t],
                          "%s: kept(%llu) is not within kept(%llu)", zm_method_name(big.method),
                          (unsigned long long)ks[i], (unsigned long long)big.k);
            }
            zm_selection_free(&ss);
        }
        zm_selection_free(&sb);
    }
    free(set);
}

/* n = 2^32 − 1: a set of a million spread cells and a small k takes the walk
 * up through the ranks (a bisection in S each step); a set of 3,000 cells the
 * small path; both against brute force. Blocks with a block past 2^32 cells
 * holds all of S in block 0. */
Test(set, largest_n)
{
    const uint64_t n = UINT32_MAX;
    const uint64_t counts[] = {1000000, 3000};
    for (size_t c = 0; c < 2; c++) {
        uint64_t count = counts[c];
        uint32_t *set = malloc(count * sizeof *set);
        uint64_t step = n / count;
        for (uint64_t i = 0; i < count; i++)
            set[i] = (uint32_t)(i * step + (i * 2654435761u) % step);
        const uint64_t ks[] = {1, 5, 100, count / 3};
        uint32_t *positions = malloc(count * sizeof *positions);
        uint32_t *order = malloc(count * sizeof *order);
        for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
            zm_request r = {.method = ZM_METHOD_UNIFORM,
                            .n = n,
                            .k = ks[t],
                            .seed = 11,
                            .set = set,
                            .set_count = count};
            naive_uniform_set(set, count, ks[t], 11, positions, order);
            zm_selection s = select_ok(&r);
            expect_cells(&s, positions, order, ks[t], "uniform at n = 2^32 - 1");
            zm_selection_free(&s);
            r.method = ZM_METHOD_BLOCKS;
            r.block_size = 1000;
            naive_blocks_set(set, count, ks[t], 11, 1000, positions, order);
            s = select_ok(&r);
            expect_cells(&s, positions, order, ks[t], "blocks at n = 2^32 - 1");
            zm_selection_free(&s);
            r.block_size = UINT64_MAX;
            s = select_ok(&r);
            for (uint64_t i = 0; i < ks[t]; i++) /* one block: S's first k, ascending */
                cr_assert(s.positions[i] == set[i] && s.order[i] == set[i]);
            zm_selection_free(&s);
        }
        free(positions);
        free(order);
        free(set);
    }
}

/* Every non-empty set of up to 8 cells, every k, a few B: uniform and
 * blocks against the brute-force readings. */
Test(set, every_small_set)
{
    for (uint64_t n = 1; n <= 8; n++)
        for (uint32_t mask = 1; mask < (1u << n); mask++) {
            uint32_t set[8], positions[8], order[8];
            uint64_t count = 0;
            for (uint32_t p = 0; p < n; p++)
                if (mask >> p & 1)
                    set[count++] = p;
            for (uint64_t k = 1; k <= count + 1; k++) {
                uint64_t want = k < count ? k : count;
                zm_request r = {.method = ZM_METHOD_UNIFORM,
                                .n = n,
                                .k = k,
                                .seed = mask,
                                .set = set,
                                .set_count = count};
                naive_uniform_set(set, count, want, mask, positions, order);
                zm_selection s = select_ok(&r);
                expect_cells(&s, positions, order, want, "uniform, a small set");
                zm_selection_free(&s);
                for (uint64_t b = 1; b <= 4; b++) {
                    r.method = ZM_METHOD_BLOCKS;
                    r.block_size = b;
                    naive_blocks_set(set, count, want, mask, b, positions, order);
                    s = select_ok(&r);
                    expect_cells(&s, positions, order, want, "blocks, a small set");
                    zm_selection_free(&s);
                }
            }
        }
}
