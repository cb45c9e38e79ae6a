/* The selection kernel's entry point: request checks, uniform and blocks
 * (over every cell or over a set), and the priority order of every method.
 * Stratified and spatial live in strata.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "select/select_internal.h"

static const char *const method_names[] = {
    [ZM_METHOD_UNIFORM] = "uniform",
    [ZM_METHOD_BLOCKS] = "blocks",
    [ZM_METHOD_STRATIFIED] = "stratified",
    [ZM_METHOD_SPATIAL] = "spatial",
};

const char *zm_method_name(zm_method method)
{
    if ((unsigned)method >= sizeof method_names / sizeof method_names[0])
        return "unknown";
    return method_names[method];
}

int zm_method_from_name(const char *name, zm_method *method)
{
    for (unsigned i = 0; i < sizeof method_names / sizeof method_names[0]; i++)
        if (strcmp(name, method_names[i]) == 0) {
            *method = (zm_method)i;
            return 0;
        }
    return -EINVAL;
}

const char *zm_allocation_name(zm_allocation allocation)
{
    return allocation == ZM_ALLOCATION_BALANCED ? "balanced" : "proportional";
}

int zm_allocation_from_name(const char *name, zm_allocation *allocation)
{
    if (strcmp(name, "proportional") == 0)
        *allocation = ZM_ALLOCATION_PROPORTIONAL;
    else if (strcmp(name, "balanced") == 0)
        *allocation = ZM_ALLOCATION_BALANCED;
    else
        return -EINVAL;
    return 0;
}

void zm_selection_free(zm_selection *selection)
{
    if (selection == NULL)
        return;
    free(selection->positions);
    free(selection->order);
    free(selection->strata);
    memset(selection, 0, sizeof *selection);
}

/* G^d, or 0 when it reaches 2^53 (box numbers would no longer be exact). */
static uint64_t grid_boxes(uint64_t grid_size, unsigned dims)
{
    uint64_t boxes = 1;
    for (unsigned a = 0; a < dims; a++) {
        if (grid_size != 0 && boxes > (ZM_GRID_BOXES_LIMIT - 1) / grid_size)
            return 0;
        boxes *= grid_size;
    }
    return boxes < ZM_GRID_BOXES_LIMIT ? boxes : 0;
}

int zm_set_check(const uint32_t *set, uint64_t count, uint64_t n, zm_err *err)
{
    /* k ≥ 1 and a view of nothing is not a subsample: an empty set is
     * refused rather than selected from. */
    if (count == 0)
        return zm_err_set(err, -EINVAL, "the set holds no cell: a subsample keeps at least one");
    if (count > n)
        return zm_err_set(err, -EINVAL,
                          "the set holds %llu cells, more than the %llu of the dataset",
                          (unsigned long long)count, (unsigned long long)n);
    if (set == NULL)
        return zm_err_set(err, -EINVAL, "the set of %llu cells has no positions",
                          (unsigned long long)count);
    for (uint64_t i = 0; i < count; i++) {
        if (set[i] >= n)
            return zm_err_set(err, -EINVAL, "set[%llu] = %u is past the last cell (n = %llu)",
                              (unsigned long long)i, set[i], (unsigned long long)n);
        if (i > 0 && set[i] <= set[i - 1])
            return zm_err_set(err, -EINVAL,
                              "the set is not strictly ascending: set[%llu] = %u after %u",
                              (unsigned long long)i, set[i], set[i - 1]);
    }
    return 0;
}

int zm_request_check(const zm_request *request, zm_err *err)
{
    if (request->n > ZM_N_MAX)
        return zm_err_set(err, -EINVAL, "n = %llu is outside uint32 (at most 4294967295 cells)",
                          (unsigned long long)request->n);
    if (request->k == 0)
        return zm_err_set(err, -EINVAL, "k = 0 is refused: a subsample keeps at least one cell");
    if (request->set == NULL && request->set_count != 0)
        return zm_err_set(err, -EINVAL, "a set of %llu cells is given without its positions",
                          (unsigned long long)request->set_count);
    int rc;
    if (request->set != NULL &&
        (rc = zm_set_check(request->set, request->set_count, request->n, err)) != 0)
        return rc;
    switch (request->method) {
    case ZM_METHOD_UNIFORM:
        break;
    case ZM_METHOD_BLOCKS:
        if (request->block_size == 0)
            return zm_err_set(err, -EINVAL, "blockSize = 0 is refused: a block holds at least one cell");
        break;
    case ZM_METHOD_STRATIFIED:
        if (request->codes == NULL && request->n > 0)
            return zm_err_set(err, -EINVAL, "stratified needs a category per cell");
        if (request->allocation != ZM_ALLOCATION_PROPORTIONAL &&
            request->allocation != ZM_ALLOCATION_BALANCED)
            return zm_err_set(err, -EINVAL, "unknown allocation");
        break;
    case ZM_METHOD_SPATIAL:
        if (request->dims < 1 || request->dims > 3)
            return zm_err_set(err, -EINVAL,
                              "spatial takes 1 to 3 coordinate columns, not %u", request->dims);
        if (request->grid_size == 0)
            return zm_err_set(err, -EINVAL, "gridSize = 0 is refused: at least one box per axis");
        if (grid_boxes(request->grid_size, request->dims) == 0)
            return zm_err_set(err, -EINVAL,
                              "gridSize^d = %llu^%u reaches 2^53: box numbers would not be exact",
                              (unsigned long long)request->grid_size, request->dims);
        if (request->coords == NULL && request->n > 0)
            return zm_err_set(err, -EINVAL, "spatial needs coordinates for every cell");
        break;
    default:
        return zm_err_set(err, -EINVAL, "unknown method %d", (int)request->method);
    }
    return 0;
}

static int allocate_selection(zm_selection *out, uint64_t n, uint64_t k, zm_err *err)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->k = k;
    size_t bytes = (size_t)(k ? k : 1) * sizeof(uint32_t);
    out->positions = malloc(bytes);
    out->order = malloc(bytes);
    if (out->positions == NULL || out->order == NULL) {
        zm_selection_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory keeping %llu cells",
                          (unsigned long long)k);
    }
    return 0;
}

/* Uniform: the k lowest-ranked of the cells selected from (every cell, or
 * the set's). */
static int select_uniform(const zm_request *request, zm_selection *out, zm_err *err)
{
    uint64_t n = request->n, count = request->set ? request->set_count : n;
    uint64_t k = request->k < count ? request->k : count;
    uint32_t key = zm_seed_key(request->seed);
    int rc = allocate_selection(out, n, k, err);
    if (rc == 0)
        rc = zm__lowest_ranked_of(request->set, count, k, key, out->positions, err);
    if (rc == 0) {
        memcpy(out->order, out->positions, k * sizeof *out->order);
        rc = zm__sort_by_rank(out->order, k, key, err);
    }
    if (rc != 0)
        zm_selection_free(out);
    return rc;
}

/* Blocks: cut the cells into blocks of B neighbours, take blocks in rank
 * order until the next would exceed k, and the last one's first cells. */
static int select_blocks(const zm_request *request, zm_selection *out, zm_err *err)
{
    uint64_t n = request->n, k = request->k < n ? request->k : n;
    uint64_t block = request->block_size;
    uint64_t blocks = n == 0 ? 0 : (n - 1) / block + 1;
    uint64_t last_size = n == 0 ? 0 : n - (blocks - 1) * block;
    uint32_t key = zm_seed_key(request->seed);

    int rc = allocate_selection(out, n, k, err);
    if (rc != 0 || k == 0)
        return rc;

    /* The ceil(k/B) lowest-ranked blocks hold k cells unless the short last
     * block is among them and falls short; then one more block is needed. */
    uint64_t wanted = (k - 1) / block + 1;
    uint32_t *chosen = malloc((wanted + 1) * sizeof *chosen);
    if (chosen == NULL) {
        zm_selection_free(out);
        return zm_err_set(err, -ENOMEM, "out of memory choosing %llu blocks",
                          (unsigned long long)wanted);
    }
    rc = zm__lowest_ranked(blocks, wanted, key, chosen, err);
    if (rc == 0 && chosen[wanted - 1] == blocks - 1 &&
        (wanted - 1) * block + last_size < k) {
        wanted++;
        rc = zm__lowest_ranked(blocks, wanted, key, chosen, err);
    }
    if (rc == 0)
        rc = zm__sort_by_rank(chosen, wanted, key, err);
    if (rc != 0) {
        free(chosen);
        zm_selection_free(out);
        return rc;
    }

    /* Priority order: blocks by rank, cells by position; the last block taken
     * contributes its first k − taken cells. */
    uint64_t taken = 0, partial_block = UINT64_MAX, partial_count = 0;
    for (uint64_t i = 0; i < wanted && taken < k; i++) {
        uint64_t start = (uint64_t)chosen[i] * block;
        uint64_t size = chosen[i] == blocks - 1 ? last_size : block;
        uint64_t take = size <= k - taken ? size : k - taken;
        if (take < size) {
            partial_block = chosen[i];
            partial_count = take;
        }
        for (uint64_t c = 0; c < take; c++)
            out->order[taken + c] = (uint32_t)(start + c);
        taken += take;
    }

    /* Ascending positions: the same blocks in block order. */
    rc = zm__radix_sort_u32(chosen, wanted, err);
    if (rc == 0) {
        uint64_t at = 0;
        for (uint64_t i = 0; i < wanted && at < k; i++) {
            uint64_t start = (uint64_t)chosen[i] * block;
            uint64_t size = chosen[i] == blocks - 1 ? last_size : block;
            if (chosen[i] == partial_block)
                size = partial_count;
            for (uint64_t c = 0; c < size; c++)
                out->positions[at++] = (uint32_t)(start + c);
        }
    }
    free(chosen);
    if (rc != 0)
        zm_selection_free(out);
    return rc;
}

/* The end (one past) of the run of set cells from index i that share the
 * block of set[i]: the cells of S in block floor(set[i] / B). (j + 1)·B does
 * not overflow: j = 0 gives B, and j ≥ 1 means B ≤ set[i] < 2^32. */
static uint64_t run_end(const uint32_t *set, uint64_t count, uint64_t i, uint64_t block,
                        uint64_t *j)
{
    *j = set[i] / block;
    uint64_t bound = (*j + 1) * block, e = i + 1;
    while (e < count && set[e] < bound)
        e++;
    return e;
}

#define BLOCK_BUCKETS (1u << 16)

/* Blocks over a set S: the source's blocks (j = floor(p / B)) that hold a
 * cell of S, each with its cells of S, taken in order of rank(seed, j) until
 * the next would exceed k; that block gives its first k − taken cells of S.
 *
 * Blocks hold from 1 to B cells of S, so how many blocks k needs is not
 * known ahead. A histogram of the blocks' rank top 16 bits, each weighted by
 * its cells of S, finds the bucket where k is reached: every block ranked in
 * a bucket below it is taken, and only the blocks up to that bucket are
 * gathered and sorted by rank (about the taken ones and 1/65536 of the
 * rest). O(|S|) time; memory O(blocks gathered) beyond the result, every
 * block named by the index in S of its first cell of S. */
static int select_blocks_of_set(const zm_request *request, zm_selection *out, zm_err *err)
{
    const uint32_t *set = request->set;
    uint64_t n = request->n, count = request->set_count;
    uint64_t k = request->k < count ? request->k : count;
    uint64_t block = request->block_size;
    uint32_t key = zm_seed_key(request->seed);

    int rc = allocate_selection(out, n, k, err);
    if (rc != 0)
        return rc;
    uint64_t *cells_in = calloc(BLOCK_BUCKETS, sizeof *cells_in);
    uint64_t *blocks_in = calloc(BLOCK_BUCKETS, sizeof *blocks_in);
    uint64_t *gathered = NULL;
    uint32_t *chosen = NULL;
    if (cells_in == NULL || blocks_in == NULL) {
        rc = zm_err_set(err, -ENOMEM, "out of memory ranking the blocks of %llu cells",
                        (unsigned long long)count);
        goto done;
    }
    /* Pass 1: each block's cells of S, by its rank's top 16 bits. */
    for (uint64_t i = 0, j; i < count;) {
        uint64_t e = run_end(set, count, i, block, &j);
        uint32_t top = zm__fmix32((uint32_t)j ^ key) >> 16;
        cells_in[top] += e - i;
        blocks_in[top]++;
        i = e;
    }
    /* The bucket where the cells of S reach k (they do: Σ = |S| ≥ k). */
    uint64_t cells_below = 0, wanted_blocks = 0;
    uint32_t last = 0;
    while (cells_below + cells_in[last] < k) {
        cells_below += cells_in[last];
        wanted_blocks += blocks_in[last++];
    }
    wanted_blocks += blocks_in[last];

    /* Pass 2: the blocks ranked up to that bucket, as rank << 32 | the index
     * in S of the block's first cell, so that sorting orders them by rank. */
    gathered = malloc(wanted_blocks * sizeof *gathered);
    chosen = malloc(wanted_blocks * sizeof *chosen);
    if (gathered == NULL || chosen == NULL) {
        rc = zm_err_set(err, -ENOMEM, "out of memory choosing %llu blocks",
                        (unsigned long long)wanted_blocks);
        goto done;
    }
    uint64_t g = 0;
    for (uint64_t i = 0, j; i < count;) {
        uint64_t e = run_end(set, count, i, block, &j);
        uint32_t rank = zm__fmix32((uint32_t)j ^ key);
        if ((rank >> 16) <= last)
            gathered[g++] = (uint64_t)rank << 32 | i;
        i = e;
    }
    if ((rc = zm__radix_sort_u64(gathered, g, err)) != 0)
        goto done;

    /* Priority order: blocks by rank, their cells of S by position; the last
     * block taken gives its first k − taken. */
    uint64_t taken = 0, chosen_count = 0, partial_start = UINT64_MAX, partial_count = 0;
    for (uint64_t t = 0; t < g && taken < k; t++) {
        uint64_t i = (uint32_t)gathered[t], j;
        uint64_t size = run_end(set, count, i, block, &j) - i;
        uint64_t take = size <= k - taken ? size : k - taken;
        if (take < size) {
            partial_start = i;
            partial_count = take;
        }
        memcpy(out->order + taken, set + i, take * sizeof *set);
        chosen[chosen_count++] = (uint32_t)i;
        taken += take;
    }

    /* Ascending positions: the same blocks in block order (the order of
     * their first cells in S). */
    if ((rc = zm__radix_sort_u32(chosen, chosen_count, err)) != 0)
        goto done;
    uint64_t at = 0;
    for (uint64_t c = 0; c < chosen_count; c++) {
        uint64_t i = chosen[c], j;
        uint64_t size = i == partial_start ? partial_count : run_end(set, count, i, block, &j) - i;
        memcpy(out->positions + at, set + i, size * sizeof *set);
        at += size;
    }
    if (taken != k || at != k)
        rc = zm_err_set(err, -EIO, "internal error: blocks kept %llu cells, expected %llu",
                        (unsigned long long)(taken != k ? taken : at), (unsigned long long)k);

done:
    free(cells_in);
    free(blocks_in);
    free(gathered);
    free(chosen);
    if (rc != 0)
        zm_selection_free(out);
    return rc;
}

int zm_select(const zm_request *request, zm_selection *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = zm_request_check(request, err);
    if (rc != 0)
        return rc;
    switch (request->method) {
    case ZM_METHOD_UNIFORM:
        return select_uniform(request, out, err);
    case ZM_METHOD_BLOCKS:
        return request->set ? select_blocks_of_set(request, out, err)
                            : select_blocks(request, out, err);
    case ZM_METHOD_STRATIFIED:
        return zm__select_stratified(request, out, err);
    case ZM_METHOD_SPATIAL:
        return zm__select_spatial(request, out, err);
    }
    return zm_err_set(err, -EINVAL, "unknown method");
}
