#!/usr/bin/python3
"""An independent reading, in plain Python and numpy, of what a view over a set of cells holds
(issue 21; ../shared/seeds/subsampling-spec.txt), for tests/integration/test_sets.py. Nothing
here calls zarrmount: the test holds the mount to it.

- The specification's rank, its cell set digest and its cell set encoding (LEB128 gaps, base64
  in a Cellucid cell set file); the exact size of a share or a percentage.
- Every method over a set S of original positions (ascending), each returning the kept cells
  in their priority order:
    file      S in file order (original position ascending; a priority-ordered file: its
              stored rows ascending, which the caller gives as a key);
    full      S in the priority order of a seed (0, or a priority-ordered file's seed);
    uniform   the k lowest-ranked cells of S (k >= |S| keeps S), by rank;
    blocks    the source's blocks j = floor(p / B) holding a cell of S, in order of
              rank(seed, j), each with its cells of S, whole, until the next would exceed k;
              that one gives its first k - taken cells of S (ascending); by block rank, then
              position;
    stratified / spatial
              the specification's split over the strata of S alone (a stratum's size is its
              cells in S; a spatial axis's low and high over S's finite cells), each stratum
              keeping its lowest-ranked cells; by rank.
- where/ values: the escaping of a value into one path component and the parsing back (the
  only spelling that resolves).
"""
import base64
from fractions import Fraction

import numpy as np

U32 = np.uint32
MASK = 0xFFFFFFFF


# ---- Rank -------------------------------------------------------------------------------------

def fmix32(h):
    """MurmurHash3's finaliser, modulo 2^32 (a Python int or a numpy uint32 array)."""
    if isinstance(h, (int, np.integer)):
        h = int(h) & MASK
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & MASK
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & MASK
        return h ^ (h >> 16)
    h = np.asarray(h, dtype=U32).copy()
    with np.errstate(over="ignore"):
        h ^= h >> U32(16)
        h *= U32(0x85EBCA6B)
        h ^= h >> U32(13)
        h *= U32(0xC2B2AE35)
        h ^= h >> U32(16)
    return h


def seed_key(seed):
    return fmix32((int(seed) ^ 0x9E3779B9) & MASK)


def rank(seed, positions):
    """rank(seed, p) = fmix32(p ^ seedKey(seed)), as int64 (so sorting never wraps)."""
    p = np.asarray(positions, dtype=np.int64).astype(U32)
    return fmix32(p ^ U32(seed_key(seed))).astype(np.int64)


def by_rank(seed, positions):
    """positions (any order) sorted by rank (a bijection: no ties)."""
    positions = np.asarray(positions, dtype=np.int64)
    return positions[np.argsort(rank(seed, positions), kind="stable")]


def lowest_ranked(seed, positions, m):
    """The m lowest-ranked of positions, ascending."""
    return np.sort(by_rank(seed, positions)[:m])


# ---- Digest and encoding ---------------------------------------------------------------------

def _rotl32(x, r):
    return ((x << r) | (x >> (32 - r))) & MASK


def digest(positions, n):
    """The specification's cell set digest of ascending positions among n cells."""
    positions = [int(p) for p in positions]
    k = len(positions)
    a = (0x811C9DC5 ^ n) & MASK
    b = (0x9E3779B9 ^ k) & MASK
    for p in positions:
        a = ((a ^ p) * 0x01000193) & MASK
        x = (b ^ p) & MASK
        b = ((_rotl32(x, 13) * 5) + 0xE6546B64) & MASK
    return f"{fmix32(a ^ k):08x}{fmix32(b ^ n):08x}"


def encode_gaps(positions):
    """LEB128 of each gap from the previous position (the first from -1) minus one."""
    out = bytearray()
    previous = -1
    for p in positions:
        gap = int(p) - previous - 1
        previous = int(p)
        while True:
            byte = gap & 0x7F
            gap >>= 7
            out.append(byte | (0x80 if gap else 0))
            if not gap:
                break
    return bytes(out)


def encode_kept(positions, n):
    """A session's cells.kept bytes: every cell is no bytes, else the gaps."""
    positions = [int(p) for p in positions]
    if positions == list(range(n)):
        return b""
    return encode_gaps(positions)


def decode_kept(data, n):
    """The positions the bytes name (no bytes: every cell)."""
    if not data:
        return list(range(n))
    positions, value, shift, previous = [], 0, 0, -1
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            previous = previous + 1 + value
            positions.append(previous)
            value, shift = 0, 0
    if shift:
        raise ValueError("the last varint is cut short")
    return positions


def cell_set_document(positions, n, kept=None, digest_text=None, n_obs=None, extra_spec=None):
    """A Cellucid cell set file's JSON object for positions (each part replaceable, to make
    files that do not verify)."""
    if kept is None:
        kept = base64.b64encode(encode_kept(positions, n)).decode()
    spec = {"method": "selection", "nObs": n if n_obs is None else n_obs, "k": len(positions)}
    spec.update(extra_spec or {})
    return {"cells": {"kept": kept, "digest": digest(positions, n) if digest_text is None else digest_text,
                      "spec": spec}}


# ---- Sizes -----------------------------------------------------------------------------------

def share_size(text, size, percent=False):
    """k = min(size, max(1, floor((2 size P + Q) / (2 Q)))) for the share P/Q the decimal text
    names (a percentage over 100)."""
    share = Fraction(text)
    if percent:
        share /= 100
    if not (0 < share <= 1):
        raise ValueError(f"{text}: not a share in (0, 1]")
    p, q = share.numerator, share.denominator
    return min(size, max(1, (2 * size * p + q) // (2 * q)))


# ---- Methods over S --------------------------------------------------------------------------

def file_order(S, stored_row=None):
    """S in file order: ascending, or by the stored row of each position."""
    S = np.asarray(S, dtype=np.int64)
    if stored_row is None:
        return np.sort(S)
    return S[np.argsort(np.asarray(stored_row)[S], kind="stable")]


def full_order(S, seed=0):
    return by_rank(seed, S)


def uniform(S, seed, k):
    S = np.asarray(S, dtype=np.int64)
    return by_rank(seed, S)[:min(k, len(S))]


def blocks(S, seed, k, B):
    """The blocks method over S, in its priority order (block rank, then position)."""
    S = np.sort(np.asarray(S, dtype=np.int64))
    numbers = S // B
    held = np.unique(numbers)
    taken = []
    for j in held[np.argsort(rank(seed, held), kind="stable")]:
        cells = S[numbers == j]
        room = k - len(taken)
        if room <= 0:
            break
        if len(cells) > room:
            taken.extend(cells[:room])
            break
        taken.extend(cells)
    return np.asarray(taken, dtype=np.int64)


def split(sizes, k, allocation="proportional", minimum=0):
    """The specification's split of k over strata of the given sizes (occupied ones only, in
    number order): what each keeps. None if the minimum does not fit."""
    sizes = [int(s) for s in sizes]
    base = [min(minimum, s) for s in sizes]
    if sum(base) > k:
        return None
    rest = k - sum(base)
    capacity = [s - b for s, b in zip(sizes, base)]
    total = sum(capacity)
    extra = [0] * len(sizes)
    if rest and total:
        if allocation == "proportional":
            quotas = [rest * c // total for c in capacity]
            remainders = [rest * c % total for c in capacity]
            left = rest - sum(quotas)
            winners = sorted(range(len(sizes)), key=lambda s: (-remainders[s], s))[:left]
            for s in winners:
                quotas[s] += 1
            extra = quotas
        else:
            # The largest level L with sum(min(c, L)) <= rest.
            low, high = 0, max(capacity)
            while low < high:
                middle = (low + high + 1) // 2
                if sum(min(c, middle) for c in capacity) <= rest:
                    low = middle
                else:
                    high = middle - 1
            level = low
            extra = [min(c, level) for c in capacity]
            left = rest - sum(extra)
            for s in range(len(sizes)):
                if left and capacity[s] > level:
                    extra[s] += 1
                    left -= 1
    return [b + e for b, e in zip(base, extra)]


def over_strata(S, stratum_of, seed, k, allocation="proportional", minimum=0):
    """S split over its strata (stratum_of[p] the stratum number of position p), each stratum
    keeping its lowest-ranked cells; the kept cells by rank. None: refused."""
    S = np.sort(np.asarray(S, dtype=np.int64))
    k = min(k, len(S))
    strata = np.asarray(stratum_of)[S]
    occupied = np.unique(strata)
    members = [S[strata == s] for s in occupied]
    counts = split([len(m) for m in members], k, allocation, minimum)
    if counts is None:
        return None
    kept = np.concatenate([lowest_ranked(seed, m, c) for m, c in zip(members, counts)])
    return by_rank(seed, kept)


def categorical_strata(codes, categories_count):
    """Stratum numbers of a categorical: its codes, a missing code (negative) stratum C."""
    codes = np.asarray(codes, dtype=np.int64)
    return np.where(codes < 0, categories_count, codes)


def value_strata(values, missing=None):
    """Plain values made categories in code-point order (strings as their UTF-8 bytes sort, as
    code points do), missing ones (mask True) after them."""
    values = list(values)
    present = [v for i, v in enumerate(values) if missing is None or not missing[i]]
    categories = sorted(set(present))
    number = {v: i for i, v in enumerate(categories)}
    return np.asarray([len(categories) if missing is not None and missing[i] else number[v]
                       for i, v in enumerate(values)], dtype=np.int64)


def spatial_boxes(S, coordinates, grid):
    """Each position's box over S (an array over every position; only S's entries mean
    anything): coordinates rounded to float32 then widened, low and high over S's finite
    cells, a cell with a non-finite coordinate in box G^d."""
    S = np.sort(np.asarray(S, dtype=np.int64))
    x = np.asarray(coordinates, dtype=np.float64).astype(np.float32).astype(np.float64)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    d = x.shape[1]
    finite = np.all(np.isfinite(x), axis=1)
    inside = S[finite[S]]
    box = np.zeros(len(x), dtype=np.int64)
    for a in range(d):
        column = x[:, a]
        b = np.zeros(len(x), dtype=np.int64)
        if len(inside):
            low, high = column[inside].min(), column[inside].max()
            w = high - low
            if w != 0:
                with np.errstate(invalid="ignore"):
                    t = np.floor(((column - low) * float(grid)) / w)
                t = np.where(finite, t, 0)
                b = np.minimum(grid - 1, t).astype(np.int64)
        box += b * grid ** a
    box[~finite] = grid ** d
    return box


def spatial(S, coordinates, seed, k, grid=32):
    return over_strata(S, spatial_boxes(S, coordinates, grid), seed, k, "balanced", 0)


# ---- where/ values ---------------------------------------------------------------------------

def escape(value):
    """One where/ value (bytes or str) as its path component: %XX (uppercase hex) for '%', '/',
    ',', bytes below 0x20 and 0x7F, and for every byte of a value that is '.' or '..'."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if value in (b".", b".."):
        return "".join(f"%{c:02X}" for c in value).encode()
    out = bytearray()
    for c in value:
        if c in b"%/," or c < 0x20 or c == 0x7F:
            out += f"%{c:02X}".encode()
        else:
            out.append(c)
    return bytes(out)


def where_component(values):
    """The path component of several values (bytes)."""
    return b",".join(escape(v) for v in values)


def selected(column_values, wanted, missing=None):
    """Ascending positions whose value is one of wanted (missing ones never)."""
    wanted = set(wanted)
    return np.asarray([p for p, v in enumerate(column_values)
                       if (missing is None or not missing[p]) and v in wanted], dtype=np.int64)

