/* The rank of a cell, and the sorting and selection that order cells by it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "select/select_internal.h"

uint32_t zm_fmix32(uint32_t h) { return zm__fmix32(h); }
uint32_t zm_fmix32_inverse(uint32_t h) { return zm__fmix32_inverse(h); }
uint32_t zm_seed_key(uint32_t seed) { return zm__fmix32(seed ^ ZM__SEED_SALT); }
uint32_t zm_rank(uint32_t seed, uint32_t position)
{
    return zm__fmix32(position ^ zm_seed_key(seed));
}

#define RADIX_BITS 11
#define RADIX_SIZE (1u << RADIX_BITS)
#define RADIX_MASK (RADIX_SIZE - 1)

/* LSD radix passes over bits [0, to) of values[0, count), `bits` bits a
 * pass (at most RADIX_BITS), through scratch; the result ends in values. */
static void radix_passes(uint32_t *values, uint32_t *scratch, uint64_t count, unsigned to,
                         unsigned bits)
{
    uint32_t *src = values, *dst = scratch;
    const uint32_t mask = (1u << bits) - 1;
    for (unsigned shift = 0; shift < to; shift += bits) {
        uint64_t offsets[RADIX_SIZE];
        memset(offsets, 0, ((size_t)mask + 1) * sizeof *offsets);
        for (uint64_t i = 0; i < count; i++)
            offsets[(src[i] >> shift) & mask]++;
        uint64_t sum = 0;
        for (uint32_t b = 0; b <= mask; b++) {
            uint64_t c = offsets[b];
            offsets[b] = sum;
            sum += c;
        }
        for (uint64_t i = 0; i < count; i++)
            dst[offsets[(src[i] >> shift) & mask]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != values)
        memcpy(values, src, count * sizeof *values);
}

/* Values of one top digit: sorted on their low 21 bits, by insertion when
 * a few, else by three passes of 7 bits (a bucket of a few thousand values
 * stays in the core's cache, where passes over the whole array would not,
 * and 128 counters a pass cost little to clear). */
static void sort_low_21(uint32_t *values, uint32_t *scratch, uint64_t count)
{
    if (count > 16) {
        radix_passes(values, scratch, count, 21, 7);
        return;
    }
    for (uint64_t i = 1; i < count; i++) {
        uint32_t v = values[i];
        uint64_t j = i;
        for (; j > 0 && values[j - 1] > v; j--)
            values[j] = values[j - 1];
        values[j] = v;
    }
}

/* The largest bucket of the top digit sorted in cache; a larger one (values
 * piled into few buckets) sends the whole array to the plain passes. */
#define MSD_LARGEST_BUCKET 65536

int zm__radix_sort_u32(uint32_t *values, uint64_t count, zm_err *err)
{
    if (count < 2)
        return 0;
    uint32_t *scratch = malloc(count * sizeof *scratch);
    if (scratch == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory sorting %llu values",
                          (unsigned long long)count);
    /* Spread over the whole range (ranks are): one pass on the top 11 bits
     * into scratch, then each bucket sorted on the rest while it is in
     * cache, back into values. One pass over memory instead of three. A
     * few values, or values piled into few buckets, take the plain passes. */
    uint64_t offsets[RADIX_SIZE + 1] = {0};
    for (uint64_t i = 0; i < count; i++)
        offsets[(values[i] >> 21) + 1]++;
    uint64_t largest = 0;
    for (unsigned b = 1; b <= RADIX_SIZE; b++)
        largest = offsets[b] > largest ? offsets[b] : largest;
    if (count < RADIX_SIZE * 8 || largest > MSD_LARGEST_BUCKET) {
        radix_passes(values, scratch, count, 32, RADIX_BITS);
        free(scratch);
        return 0;
    }
    for (unsigned b = 1; b <= RADIX_SIZE; b++)
        offsets[b] += offsets[b - 1];
    uint64_t next[RADIX_SIZE];
    memcpy(next, offsets, sizeof next);
    for (uint64_t i = 0; i < count; i++)
        scratch[next[values[i] >> 21]++] = values[i];
    for (unsigned b = 0; b < RADIX_SIZE; b++) {
        uint64_t from = offsets[b], n = offsets[b + 1] - from;
        sort_low_21(scratch + from, values + from, n);
        memcpy(values + from, scratch + from, n * sizeof *values);
    }
    free(scratch);
    return 0;
}

int zm__radix_sort_u64(uint64_t *values, uint64_t count, zm_err *err)
{
    if (count < 2)
        return 0;
    uint64_t *scratch = malloc(count * sizeof *scratch);
    if (scratch == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory sorting %llu values",
                          (unsigned long long)count);
    /* Skip the high passes whose digits are all zero (keys are often small). */
    uint64_t all = 0;
    for (uint64_t i = 0; i < count; i++)
        all |= values[i];
    uint64_t *src = values, *dst = scratch;
    for (unsigned shift = 0; shift < 64 && (all >> shift) != 0; shift += RADIX_BITS) {
        uint64_t offsets[RADIX_SIZE] = {0};
        for (uint64_t i = 0; i < count; i++)
            offsets[(src[i] >> shift) & RADIX_MASK]++;
        uint64_t sum = 0;
        for (unsigned b = 0; b < RADIX_SIZE; b++) {
            uint64_t c = offsets[b];
            offsets[b] = sum;
            sum += c;
        }
        for (uint64_t i = 0; i < count; i++)
            dst[offsets[(src[i] >> shift) & RADIX_MASK]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != values)
        memcpy(values, src, count * sizeof *values);
    free(scratch);
    return 0;
}

int zm__sort_by_rank(uint32_t *ids, uint64_t count, uint32_t key, zm_err *err)
{
    /* Sort the ranks themselves, then map each rank back to its id through
     * fmix32's inverse: half the memory of sorting (rank, id) pairs. */
    for (uint64_t i = 0; i < count; i++)
        ids[i] = zm__fmix32(ids[i] ^ key);
    int rc = zm__radix_sort_u32(ids, count, err);
    if (rc != 0)
        return rc;
    for (uint64_t i = 0; i < count; i++)
        ids[i] = zm__fmix32_inverse(ids[i]) ^ key;
    return 0;
}

static int compare_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Below this many ids, ranking them all and sorting is simplest and fastest. */
#define SMALL_COUNT 4096

/* The i-th id: members[i] over a set, i itself over every id. */
static inline uint32_t member_at(const uint32_t *members, uint64_t i)
{
    return members ? members[i] : (uint32_t)i;
}

/* Whether id is one of the ids: below count over every id, found by
 * bisection in the ascending members over a set. */
static int is_member(const uint32_t *members, uint64_t count, uint32_t id)
{
    if (members == NULL)
        return id < count;
    uint64_t lo = 0, hi = count;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (members[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < count && members[lo] == id;
}

int zm__lowest_ranked(uint64_t count, uint64_t m, uint32_t key, uint32_t *ids, zm_err *err)
{
    return zm__lowest_ranked_of(NULL, count, m, key, ids, err);
}

int zm__lowest_ranked_of(const uint32_t *members, uint64_t count, uint64_t m, uint32_t key,
                         uint32_t *ids, zm_err *err)
{
    if (m > count)
        m = count;
    if (m == 0)
        return 0;
    if (m == count) {
        for (uint64_t i = 0; i < count; i++)
            ids[i] = member_at(members, i);
        return 0;
    }
    /* Few cells of many: walk the ranks upward from 0 instead of the ids.
     * Rank r belongs to id fmix32^-1(r) ^ key, which counts when it is one
     * of the ids; the first m such ids are the m lowest-ranked. That takes
     * about m · 2^32 / count steps against 2 · count for the passes below
     * (each step a bisection over a set's members), and keeps a request
     * like k = 5 of n = 2^32 − 1 instant. */
    double steps = (double)m * 4294967296.0 / (double)count;
    if (members != NULL)
        steps *= 1.0 + (double)zm_bit_length_u64(count);
    if (steps < 2.0 * (double)count) {
        uint64_t found = 0;
        for (uint64_t r = 0; found < m && r <= UINT32_MAX; r++) {
            uint32_t id = zm__fmix32_inverse((uint32_t)r) ^ key;
            if (is_member(members, count, id))
                ids[found++] = id;
        }
        return zm__radix_sort_u32(ids, m, err);
    }
    if (count <= SMALL_COUNT) {
        uint32_t ranks[SMALL_COUNT];
        for (uint64_t i = 0; i < count; i++)
            ranks[i] = zm__fmix32(member_at(members, i) ^ key);
        qsort(ranks, count, sizeof *ranks, compare_u32);
        for (uint64_t i = 0; i < m; i++)
            ids[i] = zm__fmix32_inverse(ranks[i]) ^ key;
        qsort(ids, m, sizeof *ids, compare_u32);
        return 0;
    }

    /* Pass 1: a histogram of the ranks' top 16 bits finds the bucket b that
     * holds the m-th lowest rank. Counts fit uint32 since count < 2^32. */
    uint32_t *histogram = calloc(1u << 16, sizeof *histogram);
    if (histogram == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory ranking %llu cells",
                          (unsigned long long)count);
    for (uint64_t i = 0; i < count; i++)
        histogram[zm__fmix32(member_at(members, i) ^ key) >> 16]++;
    uint64_t below = 0;
    uint32_t bucket = 0;
    while (below + histogram[bucket] < m)
        below += histogram[bucket++];
    uint64_t in_bucket = histogram[bucket];
    free(histogram);

    /* Pass 2: every id ranked below bucket b is kept; those in b are kept up
     * to the threshold rank, found among b's ranks alone (about count/65536).
     * Ids are gathered in their order, ascending. */
    uint32_t *bucket_ranks = malloc(in_bucket * sizeof *bucket_ranks);
    uint32_t *gathered = malloc((below + in_bucket) * sizeof *gathered);
    if (bucket_ranks == NULL || gathered == NULL) {
        free(bucket_ranks);
        free(gathered);
        return zm_err_set(err, -ENOMEM, "out of memory selecting %llu of %llu cells",
                          (unsigned long long)m, (unsigned long long)count);
    }
    uint64_t g = 0, c = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t id = member_at(members, i);
        uint32_t top = zm__fmix32(id ^ key) >> 16;
        if (top <= bucket) {
            gathered[g++] = id;
            if (top == bucket)
                bucket_ranks[c++] = zm__fmix32(id ^ key);
        }
    }
    qsort(bucket_ranks, in_bucket, sizeof *bucket_ranks, compare_u32);
    uint32_t threshold = bucket_ranks[m - below - 1];
    free(bucket_ranks);

    uint64_t kept = 0;
    for (uint64_t i = 0; i < g; i++)
        if (zm__fmix32(gathered[i] ^ key) <= threshold)
            ids[kept++] = gathered[i];
    free(gathered);
    /* Ranks are a bijection, so exactly m ranks are at or below the threshold. */
    if (kept != m)
        return zm_err_set(err, -EIO, "internal error: selected %llu cells, expected %llu",
                          (unsigned long long)kept, (unsigned long long)m);
    return 0;
}

int zm_sort_u64(uint64_t *values, uint64_t count, zm_err *err)
{
    return zm__radix_sort_u64(values, count, err);
}
