/* The selection kernel's entry point: request checks, uniform and blocks, and
 * the priority order of every method. Stratified and spatial live in strata.c. */
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

int zm_request_check(const zm_request *request, zm_err *err)
{
    if (request->n > ZM_N_MAX)
        return zm_err_set(err, -EINVAL, "n = %llu is outside uint32 (at most 4294967295 cells)",
                          (unsigned long long)request->n);
    if (request->k == 0)
        return zm_err_set(err, -EINVAL, "k = 0 is refused: a subsample keeps at least one cell");
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

static int select_uniform(const zm_request *request, zm_selection *out, zm_err *err)
{
    uint64_t n = request->n, k = request->k < n ? request->k : n;
    uint32_t key = zm_seed_key(request->seed);
    int rc = allocate_selection(out, n, k, err);
    if (rc == 0)
        rc = zm__lowest_ranked(n, k, key, out->positions, err);
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
        return select_blocks(request, out, err);
    case ZM_METHOD_STRATIFIED:
        return zm__select_stratified(request, out, err);
    case ZM_METHOD_SPATIAL:
        return zm__select_spatial(request, out, err);
    }
    return zm_err_set(err, -EINVAL, "unknown method");
}
