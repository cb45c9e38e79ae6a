"""A plain-Python reading of the selection rules over a set of cells (issue 21;
docs/kernel.md, "Over a set of cells"), written from the subsampling
specification (version 1: "Terms", "The rank of a cell", "Methods",
"Splitting a size over strata", "Priority order", "Cell set digest", "Cell
set encoding") and the rules for a set alone, independent of the C kernel
(src/select/). tests/cli/test_select_sets.py holds `zarrmount select` to it.

Every method runs over a set S of cells, by original position:
- uniform: the k lowest-ranked cells of S by rank(seed, p);
- blocks: the source's blocks j = p // B; the blocks holding a cell of S
  taken in order of rank(seed, j), each with its cells of S, whole, until the
  next would exceed k; that block gives its first k - taken cells of S;
- stratified and spatial: the split over the strata of S alone;
- k >= |S| keeps S; a share or percentage is of |S|.

Written differently from the kernel where it can be: whole sorts instead of
histograms and radix passes, water-filling by sorted capacities instead of
bisection, float32 rounding by numpy. Python floats are binary64 with one
rounding per operation, as the spatial box formula asks.
"""
import base64
import math
from fractions import Fraction

import numpy

U32 = 0xFFFFFFFF


class Refused(Exception):
    """The request is refused; the message says why."""


def fmix32(h):
    h &= U32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & U32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & U32
    h ^= h >> 16
    return h


def rank(seed, p):
    return fmix32(p ^ fmix32(seed ^ 0x9E3779B9))


def size_of(count, k=None, share=None, percent=None):
    """k from an exact count or from a share (text: exact decimal; a float:
    its shortest round-trip decimal, repr) of count cells."""
    if k is not None:
        return k
    text = share if share is not None else percent
    value = Fraction(text if isinstance(text, str) else repr(text))
    if percent is not None:
        value /= 100
    if not 0 < value <= 1:
        raise Refused("share outside (0, 1]")
    if count == 0:
        return 1
    size = (2 * count * value.numerator + value.denominator) // (2 * value.denominator)
    return min(count, max(1, size))


def check_set(cells, n):
    if len(cells) == 0:
        raise Refused("the set holds no cell")
    if len(cells) > n:
        raise Refused("more than the dataset")
    for i, p in enumerate(cells):
        if p >= n:
            raise Refused(f"set[{i}] past the last cell")
        if i > 0 and p <= cells[i - 1]:
            raise Refused(f"set[{i}] not strictly ascending")


def uniform(cells, k, seed):
    """(positions ascending, priority order)."""
    order = sorted(cells, key=lambda p: rank(seed, p))[:k]
    return sorted(order), order


def blocks(cells, k, seed, block):
    groups = {}
    for p in cells:  # ascending, so each group ascends too
        groups.setdefault(p // block, []).append(p)
    order = []
    for j in sorted(groups, key=lambda j: rank(seed, j)):
        order.extend(groups[j])
    order = order[:k]
    return sorted(order), order


def split(sizes, k, minimum, allocation):
    """Each stratum's count (spec: "Splitting a size over strata")."""
    base = [min(minimum, size) for size in sizes]
    if sum(base) > k:
        raise Refused("the minimum per stratum does not fit k")
    rest = k - sum(base)
    capacity = [size - b for size, b in zip(sizes, base)]
    total = sum(capacity)
    if rest == 0 or total == 0:
        return base
    if allocation == "proportional":
        quota = [rest * c // total for c in capacity]
        remainder = [rest * c % total for c in capacity]
        extra = rest - sum(quota)
        for s in sorted(range(len(sizes)), key=lambda s: (-remainder[s], s))[:extra]:
            quota[s] += 1
        return [b + q for b, q in zip(base, quota)]
    # Water-filling: the largest level L with sum(min(c, L)) <= rest, found
    # over the capacities sorted ascending: between the i-th and the next,
    # the fill is the i smaller ones whole and L for each of the others.
    ordered = sorted(capacity)
    level, below = ordered[-1], 0
    for i, c in enumerate(ordered):
        if below + c * (len(ordered) - i) > rest:
            level = (rest - below) // (len(ordered) - i)
            break
        below += c
    extra = rest - sum(min(c, level) for c in capacity)
    kept = []
    for b, c in zip(base, capacity):
        give = min(c, level)
        if c > level and extra > 0:
            give += 1
            extra -= 1
        kept.append(b + give)
    return kept


def by_strata(cells, keys, k, seed, minimum, allocation):
    """keys[i] the stratum key of cells[i]; strata the distinct keys
    ascending. (positions, order, [(key, size, kept)])."""
    strata = sorted(set(keys))
    members = {key: [] for key in strata}
    for p, key in zip(cells, keys):
        members[key].append(p)
    counts = split([len(members[key]) for key in strata], k, minimum, allocation)
    kept = []
    for key, count in zip(strata, counts):
        kept.extend(sorted(members[key], key=lambda p: rank(seed, p))[:count])
    order = sorted(kept, key=lambda p: rank(seed, p))
    table = [(key, len(members[key]), count) for key, count in zip(strata, counts)]
    return sorted(kept), order, table


def stratified(cells, codes, k, seed, minimum=0, allocation="proportional"):
    """codes: one per position (None or negative: missing); only S's are read.
    The missing stratum comes after every category of S."""
    present = [codes[p] for p in cells if codes[p] is not None and codes[p] >= 0]
    missing = (max(present) if present else -1) + 1
    keys = [missing if codes[p] is None or codes[p] < 0 else codes[p] for p in cells]
    return by_strata(cells, keys, k, seed, minimum, allocation)


def codes_of_values(values):
    """Plain values made categories in code-point order (None: missing)."""
    categories = sorted({v for v in values if v is not None})
    code = {v: i for i, v in enumerate(categories)}
    return [None if v is None else code[v] for v in values]


def float32(x):
    with numpy.errstate(over="ignore"):
        return float(numpy.float32(x))


def boxes(cells, coords, grid):
    """The box of each cell of S: bounds over S's cells whose every
    coordinate is finite; a cell with a non-finite one in box grid^d."""
    dims = len(coords[cells[0]])
    rows = [[float32(x) for x in coords[p]] for p in cells]
    finite = [r for r in rows if all(math.isfinite(x) for x in r)]
    low = [min(r[a] for r in finite) if finite else 0.0 for a in range(dims)]
    high = [max(r[a] for r in finite) if finite else 0.0 for a in range(dims)]
    out = []
    for r in rows:
        if not all(math.isfinite(x) for x in r):
            out.append(grid ** dims)
            continue
        box = 0
        for a in range(dims):
            width = high[a] - low[a]
            b = 0 if width == 0 else min(grid - 1, math.floor(((r[a] - low[a]) * grid) / width))
            box += b * grid ** a
        out.append(box)
    return out


def spatial(cells, coords, k, seed, grid=32):
    return by_strata(cells, boxes(cells, coords, grid), k, seed, 0, "balanced")


def digest(positions, n):
    """The cell set digest (spec: "Cell set digest")."""
    k = len(positions)
    a = (0x811C9DC5 ^ n) & U32
    b = (0x9E3779B9 ^ k) & U32
    for p in positions:
        a = ((a ^ p) * 0x01000193) & U32
        x = b ^ p
        b = ((((x << 13) | (x >> 19)) & U32) * 5 + 0xE6546B64) & U32
    return f"{fmix32(a ^ k):08x}{fmix32(b ^ n):08x}"


def kept(positions, n):
    """The LEB128 gap encoding, base64 (every cell: no bytes)."""
    if len(positions) == n:
        return ""
    out, previous = bytearray(), -1
    for p in positions:
        gap = p - previous - 1
        previous = p
        while True:
            byte = gap & 0x7F
            gap >>= 7
            out.append(byte | (0x80 if gap else 0))
            if not gap:
                break
    return base64.b64encode(bytes(out)).decode()


def select(request):
    """The result `zarrmount select` must print for a request (a dict as its
    JSON reads), or raises Refused."""
    n = request["n"] if "n" in request else len(request.get("codes") or request.get("values")
                                                or request.get("coords"))
    cells = request.get("set")
    if cells is None:
        cells = list(range(n))
    else:
        check_set(cells, n)
    k = size_of(len(cells), request.get("k"), request.get("share"), request.get("percent"))
    k_kept = min(k, len(cells))
    seed = request.get("seed", 0)
    method = request["method"]
    if method == "uniform":
        positions, order = uniform(cells, k_kept, seed)
    elif method == "blocks":
        positions, order = blocks(cells, k_kept, seed, request["blockSize"])
    elif method == "stratified":
        codes = request["codes"] if "codes" in request else codes_of_values(request["values"])
        positions, order, _ = stratified(cells, codes, k_kept, seed, request.get("minimum", 0),
                                         request.get("allocation", "proportional"))
    elif method == "spatial":
        positions, order, _ = spatial(cells, request["coords"], k_kept, seed,
                                      request.get("gridSize", 32))
    else:
        raise Refused(f"unknown method {method}")
    return {"k": len(positions), "positions": positions, "order": order,
            "digest": digest(positions, n), "kept": kept(positions, n)}
