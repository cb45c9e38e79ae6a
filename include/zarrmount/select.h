/* zarrmount select: the selection kernel.
 *
 * Decides which cells a view holds and the order they appear in, exactly as
 * the subsampling specification, version 1, says (docs/kernel.md explains
 * each method for users). Pure: no I/O, no global state; the same request
 * gives the same cells on every machine.
 *
 * Sizes: n, the cells in the dataset, is 0 ≤ n ≤ 2^32 − 1; positions are
 * uint32; counts are 64-bit. A request whose k ≥ n keeps every cell.
 *
 * Over a set: a request may name a set S of cells (zm_request.set), and
 * every method then runs over S alone, by original position (docs/kernel.md,
 * "Over a set of cells"): a cell's rank is rank(seed, p) whatever set holds
 * it, so the same cell is ranked alike in every set, and a uniform sample
 * of k cells of S is the first k cells of S in the whole dataset's priority
 * order: S's part of the whole dataset's uniform sample of the size that
 * holds k of them.
 */
#ifndef ZARRMOUNT_SELECT_H
#define ZARRMOUNT_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/error.h"
#include "zarrmount/text.h" /* zm_shortest_decimal: a binary64 share as text */

#define ZM_SPEC_VERSION 1
#define ZM_N_MAX UINT32_MAX           /* the most cells a dataset may have */
#define ZM_DEFAULT_GRID_SIZE 32       /* spatial: boxes per axis */
#define ZM_GRID_BOXES_LIMIT (1ULL << 53) /* spatial: G^d must stay below */

/* ---- The rank of a cell ------------------------------------------------ */

/* MurmurHash3's finaliser, a bijection on uint32. */
uint32_t zm_fmix32(uint32_t h);
/* Its inverse: zm_fmix32_inverse(zm_fmix32(h)) == h for every h. */
uint32_t zm_fmix32_inverse(uint32_t h);
/* seedKey(seed) = fmix32(seed ^ 0x9e3779b9). */
uint32_t zm_seed_key(uint32_t seed);
/* rank(seed, p) = fmix32(p ^ seedKey(seed)). */
uint32_t zm_rank(uint32_t seed, uint32_t position);

/* ---- Size from a share ------------------------------------------------- */

typedef enum zm_share_kind {
    ZM_SHARE_FRACTION, /* a fraction in (0, 1] */
    ZM_SHARE_PERCENT,  /* a percentage in (0, 100] */
} zm_share_kind;

/* k = min(n, max(1, floor((2nP + Q) / 2Q))) for the exact rational P/Q that the
 * decimal text names ("0.35", "35", "5.960464477539063e-08"), in exact integer
 * arithmetic. Refuses (-EINVAL, with a reason) text that is not a plain
 * decimal number and shares outside (0, 1] (percentages outside (0, 100]).
 * n = 0 gives k = 0. Constant time in n. */
int zm_size_from_text(const char *text, zm_share_kind kind, uint64_t n, uint64_t *k,
                      zm_err *err);

/* The same for a share held as a binary64 number: taken as its shortest
 * round-trip decimal (zm_shortest_decimal), then exactly. */
int zm_size_from_binary64(double share, zm_share_kind kind, uint64_t n, uint64_t *k,
                          zm_err *err);

/* Reads decimal text as the nearest binary64 (ties to even), independently of
 * the C library: correctly rounded for any number of digits. Accepts an
 * optional sign, digits with an optional point, an optional exponent; refuses
 * anything else with -EINVAL. Overflow gives ±infinity, underflow ±0 or a
 * subnormal, as IEEE 754 rounding says. */
int zm_decimal_to_binary64(const char *text, double *out, zm_err *err);

/* ---- Requests and selections -------------------------------------------- */

typedef enum zm_method {
    ZM_METHOD_UNIFORM,
    ZM_METHOD_BLOCKS,
    ZM_METHOD_STRATIFIED,
    ZM_METHOD_SPATIAL,
} zm_method;

typedef enum zm_allocation {
    ZM_ALLOCATION_PROPORTIONAL, /* largest remainder */
    ZM_ALLOCATION_BALANCED,     /* water-filling */
} zm_allocation;

/* One selection request; k already resolved from any share. The arrays are
 * borrowed, never freed by the kernel.
 *
 * set: NULL selects among every cell (0 … n−1). Otherwise the method runs
 * over the set_count cells set[0 … set_count−1], strictly ascending
 * positions below n (1 ≤ set_count ≤ n; an empty set is refused: k ≥ 1 and
 * a view of nothing is not a subsample):
 *   - uniform: the k lowest-ranked cells of S by rank(seed, p);
 *   - blocks: the source's blocks, j = floor(p / B) over 0 … n−1; the
 *     blocks holding a cell of S are taken in order of rank(seed, j), each
 *     with its cells of S, whole, until the next would exceed k; that block
 *     gives its first k − taken cells of S (ascending);
 *   - stratified and spatial: the split over the strata of S alone (a
 *     category's size is its cells in S; a category with no cell in S
 *     takes no part; a spatial axis's low and high are over S's cells with
 *     every coordinate finite, S's other cells in box G^d).
 * k ≥ set_count keeps S. codes and coords stay indexed by position (n
 * entries); only the entries of S's cells are read, so the others may hold
 * anything. With set = 0 … n−1 every result equals set = NULL's. */
typedef struct zm_request {
    zm_method method;
    uint64_t n;          /* cells in the dataset, ≤ ZM_N_MAX */
    uint32_t seed;
    uint64_t k;          /* ≥ 1; k ≥ n (k ≥ set_count) keeps every cell (of S) */
    uint64_t block_size; /* blocks: B ≥ 1 */
    /* stratified: one code per cell, a negative code is a missing value */
    const int32_t *codes;
    zm_allocation allocation;
    uint64_t minimum;    /* cells per stratum before the rest is split */
    /* spatial: n rows of dims values, row-major, as read (any non-finite) */
    const double *coords;
    unsigned dims;       /* 1 to 3 */
    uint64_t grid_size;  /* G ≥ 1 boxes per axis */
    /* the set S of cells to select among, or NULL for every cell */
    const uint32_t *set; /* set_count positions, strictly ascending, each < n */
    uint64_t set_count;  /* |S|: 1 ≤ set_count ≤ n; 0 when set is NULL */
} zm_request;

/* One stratum of a stratified or spatial selection, for explaining it. */
typedef struct zm_stratum {
    uint64_t id;   /* the category code (the missing stratum: one past the
                    * largest code among the cells selected from, which
                    * over a set may be a category's code that S lacks:
                    * missing says which) or the box number (non-finite: G^d) */
    uint64_t size; /* its cells (of S, over a set) */
    uint64_t kept; /* the cells it keeps */
    int missing;   /* stratified: 1 for the stratum of cells with no category */
} zm_stratum;

typedef struct zm_selection {
    uint64_t n;            /* cells in the dataset (the request's n, over a set too) */
    uint64_t k;            /* cells kept: min(request k, n), over a set min(k, set_count) */
    uint32_t *positions;   /* k positions, ascending (a subset of S over a set) */
    uint32_t *order;       /* the same k positions in priority order */
    zm_stratum *strata;    /* stratified and spatial: occupied strata (of S) in number order */
    size_t strata_count;
} zm_selection;

/* Runs a request. On success fills out (free it with zm_selection_free); on
 * failure returns -EINVAL (refused, with the rule that refused it) or -ENOMEM,
 * and out holds nothing. */
int zm_select(const zm_request *request, zm_selection *out, zm_err *err);
void zm_selection_free(zm_selection *selection);

/* Checks a request without selecting: the refusals zm_select would give that
 * do not depend on the cells' codes or coordinates (a minimum that does not
 * fit the strata does: zm_select refuses it), the set included
 * (zm_set_check). O(set_count). */
int zm_request_check(const zm_request *request, zm_err *err);

/* Checks a set of cells for a request over n cells: -EINVAL with a one-line
 * reason for an empty set ("the set holds no cell"), one of more than n
 * cells, a position ≥ n, or positions that are not strictly ascending (a
 * repeat or a step down, named by its index). O(count). */
int zm_set_check(const uint32_t *set, uint64_t count, uint64_t n, zm_err *err);

/* Plain values made categories in code-point order: values[i] (lengths[i]
 * bytes of UTF-8, NULL for a missing value) gets the code of its category
 * among the distinct values sorted by code point. Fills codes (n entries,
 * -1 for missing) and *category_count. */
int zm_codes_from_values(const char *const *values, const size_t *lengths, uint64_t n,
                         int32_t *codes, uint64_t *category_count, zm_err *err);

/* ---- Naming a kept set -------------------------------------------------- */

/* The cell set digest: 16 lowercase hex digits and a NUL into out. */
void zm_cellset_digest(const uint32_t *positions, uint64_t k, uint64_t n, char out[17]);
/* The digest of every cell (positions 0 ... n - 1), without the positions. */
void zm_cellset_digest_all(uint64_t n, char out[17]);

/* The LEB128 gap encoding of ascending positions (every cell: no bytes).
 * *bytes is malloc'd (may be NULL when *length is 0). */
int zm_cellset_encode(const uint32_t *positions, uint64_t k, uint64_t n, uint8_t **bytes,
                      size_t *length, zm_err *err);

/* Decodes bytes back to ascending positions below n. A truncated varint, a
 * non-canonical one, a value past uint32 or a position ≥ n is -EINVAL with a
 * reason, never a crash. No bytes means every cell. */
int zm_cellset_decode(const uint8_t *bytes, size_t length, uint64_t n, uint32_t **positions,
                      uint64_t *k, zm_err *err);

/* ---- Names -------------------------------------------------------------- */

/* Sorts values ascending in O(count) (the kernel's LSD radix sort): views
 * sort their cells by source position with it. */
int zm_sort_u64(uint64_t *values, uint64_t count, zm_err *err);

const char *zm_method_name(zm_method method);
int zm_method_from_name(const char *name, zm_method *method);
const char *zm_allocation_name(zm_allocation allocation);
int zm_allocation_from_name(const char *name, zm_allocation *allocation);

#endif
