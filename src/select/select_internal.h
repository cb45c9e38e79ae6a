/* Internal to the select module: the hot-path rank functions inline, and the
 * building blocks the methods share. */
#ifndef ZARRMOUNT_SELECT_INTERNAL_H
#define ZARRMOUNT_SELECT_INTERNAL_H

#include <stdint.h>

#include "zarrmount/select.h"

#define ZM__SEED_SALT 0x9e3779b9u

static inline uint32_t zm__fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* Undoes each step of zm__fmix32 in reverse: an xorshift by s ≥ 16 is its own
 * inverse, by 13 it needs the shifts 13 and 26, and each odd multiplier has an
 * inverse modulo 2^32. */
static inline uint32_t zm__fmix32_inverse(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7ed1b41du; /* 0xc2b2ae35^-1 mod 2^32 */
    h ^= (h >> 13) ^ (h >> 26);
    h *= 0xa5cb9243u; /* 0x85ebca6b^-1 mod 2^32 */
    h ^= h >> 16;
    return h;
}

/* The m lowest-ranked ids of [0, count) under a seed key, written ascending
 * into ids (m entries). O(count) time, O(m) memory beyond a fixed histogram. */
int zm__lowest_ranked(uint64_t count, uint64_t m, uint32_t key, uint32_t *ids, zm_err *err);

/* The same among members[0, count) (strictly ascending ids), or among
 * [0, count) when members is NULL: the m lowest-ranked written ascending. */
int zm__lowest_ranked_of(const uint32_t *members, uint64_t count, uint64_t m, uint32_t key,
                         uint32_t *ids, zm_err *err);

/* Sorts ids (count entries) by fmix32(id ^ key) ascending, in O(count). */
int zm__sort_by_rank(uint32_t *ids, uint64_t count, uint32_t key, zm_err *err);

/* Sorts uint32 values ascending in O(count): one radix pass on the top 11
 * bits, then each bucket on the rest in cache (spread values, as ranks
 * are); LSD passes over the whole array otherwise. */
int zm__radix_sort_u32(uint32_t *values, uint64_t count, zm_err *err);

/* Sorts uint64 values ascending in O(count) (LSD radix). */
int zm__radix_sort_u64(uint64_t *values, uint64_t count, zm_err *err);

/* Stratified and spatial selection over cells grouped into strata by key:
 * the count cells members[0, count) (ascending positions; NULL: positions
 * 0 … count−1), keys[i] the key of the i-th; strata are the distinct keys
 * ascending. missing_key (UINT64_MAX: none) marks the stratum of cells
 * without a category. */
int zm__select_strata(const zm_request *request, const uint32_t *members, uint64_t count,
                      const uint64_t *keys, uint64_t missing_key, zm_allocation allocation,
                      uint64_t minimum, zm_selection *out, zm_err *err);

int zm__select_stratified(const zm_request *request, zm_selection *out, zm_err *err);
int zm__select_spatial(const zm_request *request, zm_selection *out, zm_err *err);

/* Splits k over strata of the given sizes (spec: "Splitting a size over
 * strata"); kept[s] receives each stratum's count. -EINVAL when the minimums
 * do not fit k. */
int zm__split_strata(const uint64_t *sizes, uint64_t count, uint64_t k, uint64_t minimum,
                     zm_allocation allocation, uint64_t *kept, zm_err *err);

/* Spatial: the box of each of the count cells members[0, count) (NULL:
 * positions 0 … count−1), into boxes[i] for the i-th, with the bounds over
 * those cells alone; G^d is the box of a cell with a non-finite coordinate.
 * coords holds a row per position (members index it). */
int zm__spatial_boxes(const double *coords, const uint32_t *members, uint64_t count, unsigned dims,
                      uint64_t grid_size, uint64_t *boxes, zm_err *err);

#endif
