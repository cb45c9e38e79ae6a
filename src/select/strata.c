/* Stratified and spatial selection: split k over strata, then keep each
 * stratum's lowest-ranked cells (spec: "Splitting a size over strata"). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "select/select_internal.h"

/* A stable merge sort of indices under a comparison with context: strata and
 * plain values are sorted with it (qsort is neither stable nor contextual). */
typedef int (*index_compare)(uint64_t a, uint64_t b, const void *context);

static int sort_indices(uint64_t *index, uint64_t count, index_compare compare,
                        const void *context, zm_err *err)
{
    if (count < 2)
        return 0;
    uint64_t *tmp = malloc(count * sizeof *tmp);
    if (tmp == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory sorting %llu items",
                          (unsigned long long)count);
    for (uint64_t width = 1; width < count; width *= 2) {
        for (uint64_t lo = 0; lo < count; lo += 2 * width) {
            uint64_t mid = lo + width < count ? lo + width : count;
            uint64_t hi = lo + 2 * width < count ? lo + 2 * width : count;
            uint64_t a = lo, b = mid, t = lo;
            while (a < mid && b < hi)
                tmp[t++] = compare(index[b], index[a], context) < 0 ? index[b++] : index[a++];
            while (a < mid)
                tmp[t++] = index[a++];
            while (b < hi)
                tmp[t++] = index[b++];
        }
        memcpy(index, tmp, count * sizeof *index);
    }
    free(tmp);
    return 0;
}

/* Larger remainder first; the stable sort keeps lower stratum numbers first. */
static int compare_remainder_descending(uint64_t a, uint64_t b, const void *context)
{
    const uint64_t *remainders = context;
    return (remainders[a] < remainders[b]) - (remainders[a] > remainders[b]);
}

int zm__split_strata(const uint64_t *sizes, uint64_t count, uint64_t k, uint64_t minimum,
                     zm_allocation allocation, uint64_t *kept, zm_err *err)
{
    /* 1. Each stratum first gets base_s = min(m, n_s); capacity c_s = n_s − base_s. */
    uint64_t base_total = 0, capacity_total = 0, capacity_max = 0;
    for (uint64_t s = 0; s < count; s++) {
        kept[s] = sizes[s] < minimum ? sizes[s] : minimum;
        base_total += kept[s];
        uint64_t capacity = sizes[s] - kept[s];
        capacity_total += capacity;
        if (capacity > capacity_max)
            capacity_max = capacity;
    }
    if (base_total > k)
        return zm_err_set(err, -EINVAL,
                          "minimum %llu per stratum needs %llu cells over %llu strata, more than k = %llu",
                          (unsigned long long)minimum, (unsigned long long)base_total,
                          (unsigned long long)count, (unsigned long long)k);
    uint64_t rest = k - base_total;
    if (rest >= capacity_total) { /* every stratum whole */
        for (uint64_t s = 0; s < count; s++)
            kept[s] = sizes[s];
        return 0;
    }
    if (rest == 0)
        return 0;

    if (allocation == ZM_ALLOCATION_PROPORTIONAL) {
        /* 2a. Largest remainder: q_s = floor(R·c_s / C), exact since R·c_s <
         * 2^64 (both below 2^32); the R − Σq_s strata with the largest
         * remainders get one more, ties to the lower stratum number. As Σ of
         * the remainders is C·(R − Σq_s), those are all non-zero remainders. */
        uint64_t *remainders = calloc(count ? count : 1, sizeof *remainders);
        uint64_t *ranked = malloc(count * sizeof *ranked);
        if (remainders == NULL || ranked == NULL) {
            free(remainders);
            free(ranked);
            return zm_err_set(err, -ENOMEM, "out of memory splitting over %llu strata",
                              (unsigned long long)count);
        }
        uint64_t given = 0;
        for (uint64_t s = 0; s < count; s++) {
            uint64_t product = rest * (sizes[s] - kept[s]);
            kept[s] += product / capacity_total;
            given += product / capacity_total;
            remainders[s] = product % capacity_total;
            ranked[s] = s;
        }
        int rc = sort_indices(ranked, count, compare_remainder_descending, remainders, err);
        for (uint64_t i = 0; rc == 0 && i < rest - given; i++)
            kept[ranked[i]]++;
        free(remainders);
        free(ranked);
        return rc;
    }

    /* 2b. Water-filling: the largest level L with Σ min(c_s, L) ≤ R, by
     * bisection (invariant: fill(low) ≤ R < fill(high); fill(max c) = C > R). */
    uint64_t low = 0, high = capacity_max;
    while (high - low > 1) {
        uint64_t level = low + (high - low) / 2, fill = 0;
        for (uint64_t s = 0; s < count && fill <= rest; s++) {
            uint64_t capacity = sizes[s] - kept[s];
            fill += capacity < level ? capacity : level;
        }
        if (fill <= rest)
            low = level;
        else
            high = level;
    }
    /* Each stratum gets min(c_s, L); then the R − Σ min(c_s, L)
     * lowest-numbered strata with c_s > L one more. */
    uint64_t level = low, filled = 0;
    for (uint64_t s = 0; s < count; s++) {
        uint64_t capacity = sizes[s] - kept[s];
        filled += capacity < level ? capacity : level;
    }
    uint64_t extra = rest - filled;
    for (uint64_t s = 0; s < count; s++) {
        uint64_t capacity = sizes[s] - kept[s];
        if (capacity > level) {
            kept[s] += level + (extra > 0);
            extra -= extra > 0;
        } else {
            kept[s] += capacity;
        }
    }
    return 0;
}

/* The i-th cell's position: members[i] over a set, i itself over every cell. */
static inline uint32_t member_at(const uint32_t *members, uint64_t i)
{
    return members ? members[i] : (uint32_t)i;
}

/* Keeps each stratum's kept[s] lowest-ranked cells. keys[i] names the i-th
 * cell's stratum; the strata are the distinct keys in ascending order. Over
 * a set the cells are its members, and n below counts them: everything here
 * is over the cells selected from, never the dataset. */
int zm__select_strata(const zm_request *request, const uint32_t *members, uint64_t count,
                      const uint64_t *keys, uint64_t missing_key, zm_allocation allocation,
                      uint64_t minimum, zm_selection *out, zm_err *err)
{
    uint64_t n = count;
    uint32_t key = zm_seed_key(request->seed);
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->n = request->n;

    /* Strata: the distinct keys ascending. */
    uint64_t *distinct = malloc((n ? n : 1) * sizeof *distinct);
    uint32_t *stratum_of = malloc((n ? n : 1) * sizeof *stratum_of);
    uint64_t *cells = malloc((n ? n : 1) * sizeof *cells); /* rank << 32 | position */
    if (distinct == NULL || stratum_of == NULL || cells == NULL) {
        rc = zm_err_set(err, -ENOMEM, "out of memory grouping %llu cells into strata",
                        (unsigned long long)n);
        goto done;
    }
    memcpy(distinct, keys, n * sizeof *distinct);
    if ((rc = zm__radix_sort_u64(distinct, n, err)) != 0)
        goto done;
    uint64_t strata = 0;
    for (uint64_t i = 0; i < n; i++)
        if (i == 0 || distinct[i] != distinct[i - 1])
            distinct[strata++] = distinct[i];

    out->strata = calloc(strata ? strata : 1, sizeof *out->strata);
    uint64_t *sizes = calloc(strata ? strata : 1, sizeof *sizes);
    uint64_t *kept = calloc(strata ? strata : 1, sizeof *kept);
    uint64_t *starts = calloc(strata + 1, sizeof *starts);
    if (out->strata == NULL || sizes == NULL || kept == NULL || starts == NULL) {
        free(sizes);
        free(kept);
        free(starts);
        rc = zm_err_set(err, -ENOMEM, "out of memory over %llu strata", (unsigned long long)strata);
        goto done;
    }
    out->strata_count = strata;
    for (uint64_t i = 0; i < n; i++) {
        /* Binary search: the stratum number of this cell's key. */
        uint64_t lo = 0, hi = strata;
        while (hi - lo > 1) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (distinct[mid] <= keys[i])
                lo = mid;
            else
                hi = mid;
        }
        stratum_of[i] = (uint32_t)lo;
        sizes[lo]++;
    }

    uint64_t k = request->k < n ? request->k : n;
    rc = zm__split_strata(sizes, strata, k, minimum, allocation, kept, err);
    if (rc == 0) {
        /* Group cells by stratum (positions ascending within each), each as
         * rank << 32 | position so that sorting orders by rank. */
        for (uint64_t s = 0; s < strata; s++)
            starts[s + 1] = starts[s] + sizes[s];
        uint64_t *fill = calloc(strata ? strata : 1, sizeof *fill);
        if (fill == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory over %llu strata",
                            (unsigned long long)strata);
        for (uint64_t i = 0; rc == 0 && i < n; i++) {
            uint64_t s = stratum_of[i];
            uint32_t p = member_at(members, i);
            cells[starts[s] + fill[s]++] = (uint64_t)zm__fmix32(p ^ key) << 32 | p;
        }
        free(fill);
    }
    /* Each stratum's kept cells are the first kept[s] of it sorted by rank;
     * they move to the front of the array, in rank order. */
    uint64_t total = 0;
    for (uint64_t s = 0; rc == 0 && s < strata; s++) {
        rc = zm__radix_sort_u64(cells + starts[s], sizes[s], err);
        if (rc == 0) {
            memmove(cells + total, cells + starts[s], kept[s] * sizeof *cells);
            total += kept[s];
            out->strata[s].id = distinct[s];
            out->strata[s].size = sizes[s];
            out->strata[s].kept = kept[s];
            out->strata[s].missing = distinct[s] == missing_key;
        }
    }
    free(sizes);
    free(kept);
    free(starts);
    if (rc != 0)
        goto done;

    out->k = total;
    out->positions = malloc((total ? total : 1) * sizeof *out->positions);
    out->order = malloc((total ? total : 1) * sizeof *out->order);
    if (out->positions == NULL || out->order == NULL) {
        rc = zm_err_set(err, -ENOMEM, "out of memory keeping %llu cells",
                        (unsigned long long)total);
        goto done;
    }
    /* Priority order: every kept cell by rank. */
    if ((rc = zm__radix_sort_u64(cells, total, err)) != 0)
        goto done;
    for (uint64_t i = 0; i < total; i++) {
        out->order[i] = (uint32_t)cells[i];
        out->positions[i] = (uint32_t)cells[i];
    }
    rc = zm__radix_sort_u32(out->positions, total, err);

done:
    free(distinct);
    free(stratum_of);
    free(cells);
    if (rc != 0)
        zm_selection_free(out);
    return rc;
}

int zm__select_stratified(const zm_request *request, zm_selection *out, zm_err *err)
{
    const uint32_t *members = request->set;
    uint64_t n = members ? request->set_count : request->n;
    uint64_t *keys = malloc((n ? n : 1) * sizeof *keys);
    if (keys == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %llu codes", (unsigned long long)n);
    /* Categories 0..C−1 keep their code; every missing value (a negative
     * code) is the stratum after all of them. Only the codes of the cells
     * selected from are read (a set's view may leave the others unread). */
    const int32_t *codes = request->codes;
    int32_t largest = -1;
    for (uint64_t i = 0; i < n; i++)
        if (codes[member_at(members, i)] > largest)
            largest = codes[member_at(members, i)];
    uint64_t missing = (uint64_t)largest + 1;
    for (uint64_t i = 0; i < n; i++) {
        int32_t code = codes[member_at(members, i)];
        keys[i] = code < 0 ? missing : (uint64_t)code;
    }
    int rc = zm__select_strata(request, members, n, keys, missing, request->allocation,
                               request->minimum, out, err);
    free(keys);
    return rc;
}

/* A binary64 value rounded to float32 and widened back, as the viewer holds
 * coordinates. Finite values past float32's range round to ±FLT_MAX or, from
 * the midpoint 2^128 − 2^103 on (which ties to the even 2^128), to ±infinity;
 * written out because C leaves such conversions undefined. */
static double round_to_float32(double x)
{
    if (isfinite(x) && fabs(x) > FLT_MAX) {
        double midpoint = ldexp(1.0, 128) - ldexp(1.0, 103);
        if (fabs(x) >= midpoint)
            return x > 0 ? INFINITY : -INFINITY;
        return x > 0 ? FLT_MAX : -FLT_MAX;
    }
    return (double)(float)x;
}

int zm__spatial_boxes(const double *coords, const uint32_t *members, uint64_t count, unsigned dims,
                      uint64_t grid_size, uint64_t *boxes, zm_err *err)
{
    (void)err;
    double low[3] = {0, 0, 0}, high[3] = {0, 0, 0};
    int any_finite = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t p = member_at(members, i);
        double x[3];
        int finite = 1;
        for (unsigned a = 0; a < dims; a++) {
            x[a] = round_to_float32(coords[p * dims + a]);
            finite &= isfinite(x[a]) != 0;
        }
        if (!finite)
            continue;
        for (unsigned a = 0; a < dims; a++) {
            if (!any_finite || x[a] < low[a])
                low[a] = x[a];
            if (!any_finite || x[a] > high[a])
                high[a] = x[a];
        }
        any_finite = 1;
    }
    uint64_t non_finite_box = 1;
    for (unsigned a = 0; a < dims; a++)
        non_finite_box *= grid_size;
    const double grid = (double)grid_size; /* exact: G < 2^53 */
    for (uint64_t i = 0; i < count; i++) {
        uint64_t p = member_at(members, i);
        /* A row with any non-finite coordinate is in the box past the grid.
         * Its finite coordinates may lie outside the bounds (which only
         * complete rows set), so none of them is placed on the grid. */
        double x[3];
        int finite = 1;
        for (unsigned a = 0; a < dims; a++) {
            x[a] = round_to_float32(coords[p * dims + a]);
            finite &= isfinite(x[a]) != 0;
        }
        if (!finite) {
            boxes[i] = non_finite_box;
            continue;
        }
        uint64_t box = 0, stride = 1;
        for (unsigned a = 0; a < dims; a++) {
            double width = high[a] - low[a];
            uint64_t b = 0;
            if (width != 0) {
                /* Three binary64 operations, each rounded, never fused
                 * (the build passes -ffp-contract=off). */
                double offset = x[a] - low[a];
                double scaled = offset * grid;
                double ratio = scaled / width;
                double cell = floor(ratio);
                b = cell >= (double)(grid_size - 1) ? grid_size - 1 : (uint64_t)cell;
            }
            box += b * stride;
            stride *= grid_size;
        }
        boxes[i] = box;
    }
    return 0;
}

int zm__select_spatial(const zm_request *request, zm_selection *out, zm_err *err)
{
    const uint32_t *members = request->set;
    uint64_t n = members ? request->set_count : request->n;
    uint64_t *boxes = malloc((n ? n : 1) * sizeof *boxes);
    if (boxes == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory placing %llu cells on the grid",
                          (unsigned long long)n);
    int rc = zm__spatial_boxes(request->coords, members, n, request->dims, request->grid_size,
                               boxes, err);
    if (rc == 0)
        rc = zm__select_strata(request, members, n, boxes, UINT64_MAX, ZM_ALLOCATION_BALANCED, 0,
                               out, err);
    free(boxes);
    return rc;
}

static int compare_values(const char *a, size_t alen, const char *b, size_t blen)
{
    /* Byte order of UTF-8 is code-point order. */
    size_t common = alen < blen ? alen : blen;
    int c = memcmp(a, b, common);
    if (c != 0)
        return c;
    return (alen > blen) - (alen < blen);
}

struct values_context {
    const char *const *values;
    const size_t *lengths;
};

static int compare_value_indices(uint64_t a, uint64_t b, const void *context)
{
    const struct values_context *v = context;
    return compare_values(v->values[a], v->lengths[a], v->values[b], v->lengths[b]);
}

int zm_codes_from_values(const char *const *values, const size_t *lengths, uint64_t n,
                         int32_t *codes, uint64_t *category_count, zm_err *err)
{
    /* Sort the present values' indices by value, then number the distinct
     * values in that order. */
    uint64_t *index = malloc((n ? n : 1) * sizeof *index);
    if (index == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory sorting %llu values",
                          (unsigned long long)n);
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        codes[i] = -1;
        if (values[i] != NULL)
            index[m++] = i;
    }
    struct values_context context = {values, lengths};
    int rc = sort_indices(index, m, compare_value_indices, &context, err);
    int64_t code = -1;
    for (uint64_t j = 0; rc == 0 && j < m; j++) {
        if (j == 0 || compare_value_indices(index[j], index[j - 1], &context) != 0)
            code++;
        if (code > INT32_MAX)
            rc = zm_err_set(err, -EINVAL, "more than 2^31 distinct values");
        else
            codes[index[j]] = (int32_t)code;
    }
    free(index);
    if (rc == 0)
        *category_count = (uint64_t)(code + 1);
    return rc;
}
