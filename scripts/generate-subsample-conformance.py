#!/usr/bin/python3
"""Generate fixtures/subsample_conformance.json: the subsampling conformance fixture.

This is a plain-Python reading of the subsampling specification, version 1
(shared/seeds/subsampling-spec.txt, the normative part from "Terms" to "Cell set
encoding" plus "Priority order: the order a subsample's cells open in").  It is
written from the specification alone, independent of the C selection kernel, so
that the fixture can hold the C code to the specification rather than to itself.

Requests and results follow docs/select-contract.md (the `zarrmount select`
request/result contract): every case carries a `request` exactly as
`zarrmount select` reads it and an `expect` exactly as it must answer (or a
`refused` reason, for requests it must refuse with exit status 2).

Only the Python 3 standard library is used; no floating-point shortcut is taken
where the specification asks for exact arithmetic (sizes from shares are
fractions.Fraction over decimal text; float32 rounding is done in integers).
Binary64 arithmetic is used exactly where the specification asks for it (the
spatial box formula), and Python floats are IEEE binary64 with round-to-nearest-
even, one rounding per operation.

Output is deterministic: no clock, no hash randomisation, no random module; all
generated data comes from a counter-based generator built on fmix32.

Usage: /usr/bin/python3 scripts/generate-subsample-conformance.py [output-path]
"""

import base64
import json
import math
import os
import re
import struct
import sys
import time
from fractions import Fraction

SPEC_VERSION = 1
GENERATOR = "scripts/generate-subsample-conformance.py"

U32 = 0xFFFFFFFF
TWO32 = 1 << 32
TWO53 = 1 << 53


# ---------------------------------------------------------------------------
# The rank of a cell (spec: "The rank of a cell")
# ---------------------------------------------------------------------------

def fmix32(h):
    """MurmurHash3's finaliser, a bijection on uint32 (spec: fmix32)."""
    h &= U32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & U32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & U32
    h ^= h >> 16
    return h


# Inverse of fmix32 (not in the spec; used only to enumerate positions by
# ascending rank when n is close to 2^32, where ranking every position is too
# slow in Python, and cross-checked against the direct method).
_INV_85EBCA6B = pow(0x85EBCA6B, -1, TWO32)
_INV_C2B2AE35 = pow(0xC2B2AE35, -1, TWO32)


def fmix32_inverse(h):
    h &= U32
    h ^= h >> 16                      # x ^ (x >>> 16) is its own inverse on 32 bits
    h = (h * _INV_C2B2AE35) & U32
    h ^= (h >> 13) ^ (h >> 26)        # inverse of x ^ (x >>> 13)
    h = (h * _INV_85EBCA6B) & U32
    h ^= h >> 16
    return h


def seed_key(seed):
    """seedKey(seed) = fmix32(seed ^ 0x9e3779b9)."""
    return fmix32(seed ^ 0x9E3779B9)


def rank(seed, p):
    """rank(seed, p) = fmix32(p ^ seedKey(seed))."""
    return fmix32(p ^ seed_key(seed))


def all_ranks(n, seed):
    """rank(seed, p) for every p in [0, n), fmix32 inlined for speed."""
    key = seed_key(seed)
    out = [0] * n
    for p in range(n):
        h = p ^ key
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & 0xFFFFFFFF
        out[p] = h ^ (h >> 16)
    return out


def by_rank(cells, seed):
    """Cells ordered by rank(seed, p); rank is a bijection so ties cannot occur
    (spec: "ties (which cannot occur) would be broken by the smaller position")."""
    key = seed_key(seed)
    return sorted(cells, key=lambda p: (fmix32(p ^ key), p))


# Cache of the full rank order of [0, n) for the large uniform cases.
_RANK_ORDER_CACHE = {}


def rank_order_prefix(n, seed, k):
    """The k lowest-ranked positions of [0, n), in ascending rank (k <= n)."""
    if k == 0:
        return []
    # When n is close to 2^32 (or k is small), walk ranks 0, 1, 2, ... and map each
    # back to its position: rank is a bijection of uint32, so the positions met in
    # this walk that are < n are exactly the cells in ascending rank.
    expected_steps = k * (TWO32 / max(n, 1))
    if expected_steps <= 3_000_000:
        key = seed_key(seed)
        out = []
        r = 0
        while len(out) < k:
            p = fmix32_inverse(r) ^ key
            if p < n:
                out.append(p)
            r += 1
        return out
    cache_key = (n, seed)
    if cache_key not in _RANK_ORDER_CACHE:
        ranks = all_ranks(n, seed)
        _RANK_ORDER_CACHE[cache_key] = sorted(range(n), key=ranks.__getitem__)
    return _RANK_ORDER_CACHE[cache_key][:k]


# ---------------------------------------------------------------------------
# Size from a share (spec: "Size from a share")
# ---------------------------------------------------------------------------

class Refused(Exception):
    """A request the specification or the contract refuses."""


# Decimal text accepted as a share or percentage: digits, an optional fraction
# part and an optional exponent ("0.35", "1", "1.0", "1e-3", "35", "5E-1").
# A leading minus is recognised only so that a negative share is refused as out
# of range rather than as unreadable.
_DECIMAL_RE = re.compile(r"^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$")


def decimal_text_fraction(text):
    """The exact rational a decimal text names (never through binary64)."""
    if not isinstance(text, str) or not _DECIMAL_RE.match(text):
        raise Refused("share is not a decimal number")
    return Fraction(text)       # Fraction parses decimal text exactly


def shortest_decimal(x):
    """The shortest round-trip decimal of a binary64 (spec: Python repr(x))."""
    return repr(float(x))


def share_fraction(value, kind):
    """The share as an exact fraction in (0, 1], or Refused.

    value: a str (decimal text, taken exactly) or a float (binary64, taken as its
    shortest round-trip decimal, then exactly).  kind: "fraction" or "percent"
    (a percentage text over 100)."""
    if isinstance(value, bool):
        raise Refused("share is not a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Refused("share is not finite")
        f = Fraction(shortest_decimal(value))
    elif isinstance(value, int):
        f = Fraction(value)     # a JSON integer is its own shortest decimal
    else:
        f = decimal_text_fraction(value)
    if kind == "percent":
        if not (0 < f <= 100):
            raise Refused("percent must be in (0, 100]")
        f = f / 100
    else:
        if not (0 < f <= 1):
            raise Refused("share must be in (0, 1]")
    return f


def size_from_share(n, f):
    """k = min(n, max(1, floor((2nP + Q) / (2Q)))) for share = P/Q: n x share
    rounded half up, in integer arithmetic."""
    P, Q = f.numerator, f.denominator
    return min(n, max(1, (2 * n * P + Q) // (2 * Q)))


# ---------------------------------------------------------------------------
# Methods (spec: "Methods")
# ---------------------------------------------------------------------------

def select_uniform(n, k, seed):
    """uniform: the k lowest-ranked of all n cells; priority order by rank.
    Returns (order) — the kept cells in priority order."""
    return rank_order_prefix(n, seed, min(k, n))


def select_blocks(n, k, seed, B):
    """blocks: block j = positions [jB, min(n, (j+1)B)), 0 <= j < ceil(n/B); blocks
    taken in order of rank(seed, j), whole, until the next would exceed k; that
    block contributes its first k - taken cells.  Priority order: by rank of the
    block, then position within (exactly the order blocks takes them in)."""
    k = min(k, n)
    nblocks = -(-n // B)
    key = seed_key(seed)
    order = []
    taken = 0
    if nblocks <= 4_000_000:
        block_order = sorted(range(nblocks), key=lambda j: fmix32(j ^ key))
    else:
        block_order = None
    if block_order is None:
        # Many blocks (n near 2^32 with a small B): walk block ranks upwards.
        def gen():
            r = 0
            while True:
                j = fmix32_inverse(r) ^ key
                if j < nblocks:
                    yield j
                r += 1
        block_iter = gen()
    else:
        block_iter = iter(block_order)
    while taken < k:
        j = next(block_iter)
        start = j * B
        end = min(n, (j + 1) * B)
        size = end - start
        take = min(size, k - taken)      # whole, or the first k - taken cells
        order.extend(range(start, start + take))
        taken += take
    return order


def split_over_strata(sizes, k, minimum, allocation):
    """Spec "Splitting a size over strata": sizes are the occupied strata's sizes
    in stratum-number order.  Returns the count each stratum keeps, or Refused.

    1. base_s = min(m, n_s); refuse if sum(base) > k.
    2. R = k - sum(base) over the strata with capacity c_s = n_s - base_s > 0:
       proportional (largest remainder, ties to the lower stratum number) or
       balanced (water-filling; leftover to the lowest-numbered with c_s > L).
    3. stratum s keeps base_s + q_s."""
    base = [min(minimum, ns) for ns in sizes]
    if sum(base) > k:
        raise Refused("minimum per stratum does not fit k")
    R = k - sum(base)
    cap = [ns - b for ns, b in zip(sizes, base)]
    q = [0] * len(sizes)
    roomy = [s for s in range(len(sizes)) if cap[s] > 0]
    if R > 0 and roomy:
        C = sum(cap[s] for s in roomy)
        if allocation == "proportional":
            rem = {}
            for s in roomy:
                q[s] = (R * cap[s]) // C
                rem[s] = (R * cap[s]) % C          # exact remainder
            extra = R - sum(q)
            # largest remainders first, ties to the lower stratum number
            for s in sorted(roomy, key=lambda s: (-rem[s], s))[:extra]:
                q[s] += 1
        elif allocation == "balanced":
            # largest level L with sum(min(c_s, L)) <= R (binary search; the sum is
            # nondecreasing in L and R < C whenever k < n, so L < max(c))
            def filled(L):
                return sum(min(cap[s], L) for s in roomy)
            lo, hi = 0, max(cap[s] for s in roomy)
            if filled(hi) <= R:
                lo = hi
            else:
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if filled(mid) <= R:
                        lo = mid
                    else:
                        hi = mid
            L = lo
            for s in roomy:
                q[s] = min(cap[s], L)
            extra = R - sum(q)
            for s in [s for s in roomy if cap[s] > L][:extra]:
                q[s] += 1
        else:
            raise Refused("unknown allocation")
        if sum(q) != R:
            raise AssertionError("allocation does not add up")
    counts = [b + x for b, x in zip(base, q)]
    for c, ns in zip(counts, sizes):
        assert 0 <= c <= ns, "a stratum never gets more cells than it has"
    return counts


def select_strata(strata, k, seed, minimum, allocation, n):
    """Keep, in each occupied stratum (a list of positions, in stratum-number
    order), its allocated number of lowest-ranked cells.  k >= n keeps every cell
    (no subsample, never refused).  Priority order: by rank(seed, p)."""
    if k >= n:
        return by_rank(range(n), seed)
    counts = split_over_strata([len(s) for s in strata], k, minimum, allocation)
    kept = []
    for cells, c in zip(strata, counts):
        kept.extend(by_rank(cells, seed)[:c])
    return by_rank(kept, seed)


def stratified_strata(codes):
    """Spec "stratified": strata are codes 0 .. C-1 in order, then one more
    stratum for every cell without a category (a negative or null code); a
    category with no cell takes no part."""
    groups = {}
    missing = []
    for p, c in enumerate(codes):
        if c is None or c < 0:
            missing.append(p)
        else:
            groups.setdefault(c, []).append(p)
    strata = [groups[c] for c in sorted(groups)]
    if missing:
        strata.append(missing)
    return strata


def values_to_codes(values):
    """Plain values become categories in code-point order (Python's sorted() on
    str compares code points; never a locale's order); null is missing."""
    cats = sorted(set(v for v in values if v is not None))
    index = {v: i for i, v in enumerate(cats)}
    return [None if v is None else index[v] for v in values]


# ---- spatial -------------------------------------------------------------

FLT_MAX = float.fromhex("0x1.fffffep+127")


def to_float32(x):
    """Round a binary64 to the nearest float32 (ties to even), returned as the
    binary64 that holds it exactly.  Values at or beyond FLT_MAX + half an ulp
    (2^128 - 2^103) round to infinity.  Done in exact integer arithmetic."""
    if math.isnan(x) or math.isinf(x) or x == 0.0:
        return x
    sign = -1.0 if x < 0 else 1.0
    a = abs(x)
    m, e = math.frexp(a)            # a = m * 2^e, 0.5 <= m < 1
    if e > 128:
        return sign * math.inf
    q = max(e - 24, -149)           # float32 quantum at this binade (subnormal: 2^-149)
    scaled = math.ldexp(a, -q)      # exact: a power-of-two scaling of a double
    r = round(scaled)               # Python rounds a float half to even, exactly
    if r.bit_length() + q > 128:    # r * 2^q >= 2^128: beyond FLT_MAX + half an ulp
        return sign * math.inf
    return sign * math.ldexp(r, q)


def _float32_native(x):
    """Cross-check only: the platform's (float) cast through struct's native 'f'."""
    return struct.unpack("@f", struct.pack("@f", x))[0]


NONFINITE_JSON = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def coord_value(v):
    """A request coordinate: a JSON number (binary64), or null / "NaN" /
    "Infinity" / "-Infinity" for a non-finite value."""
    if v is None:
        return math.nan
    if isinstance(v, str):
        if v in NONFINITE_JSON:
            return NONFINITE_JSON[v]
        raise Refused("coordinate is not a number")
    if isinstance(v, bool):
        raise Refused("coordinate is not a number")
    if isinstance(v, RawNumber):
        return float(v.text)
    return float(v)


# Wrong readings of the box formula, used only to choose test cells and sizes that
# tell them apart from the specified one (never to compute an expectation).
BOX_ALTERNATIVES = {
    "exact rational": lambda x, low, w, G: math.floor(
        (Fraction(x) - Fraction(low)) * G / Fraction(w)),
    "(x - low) / w * G": lambda x, low, w, G: math.floor(((x - low) / w) * G),
    "(x - low) * (G / w)": lambda x, low, w, G: math.floor((x - low) * (G / w)),
    "float32 arithmetic": lambda x, low, w, G: math.floor(
        to_float32(to_float32(to_float32(x - low) * G) / to_float32(w))),
}


def spatial_boxes(coords, G, formula=None):
    """Spec "spatial": coordinates rounded to float32, widened to binary64; per axis
    low/high over the cells whose every coordinate is finite; w = high - low;
    b = 0 if w == 0 or no finite cell, else min(G-1, floor(((x - low) * G) / w)),
    each operation one binary64 rounding; box = b0 + G*b1 + G^2*b2; a cell with any
    non-finite coordinate is in box G^d.  Returns (box per cell, d)."""
    d = len(coords[0])
    pts = [[to_float32(coord_value(v)) for v in row] for row in coords]
    finite = [all(math.isfinite(v) for v in row) for row in pts]
    low = [None] * d
    high = [None] * d
    for row, ok in zip(pts, finite):
        if not ok:
            continue
        for a in range(d):
            v = row[a]
            if low[a] is None or v < low[a]:
                low[a] = v
            if high[a] is None or v > high[a]:
                high[a] = v
    Gf = float(G)                       # exact: G^d < 2^53, so G < 2^53
    boxes = []
    for row, ok in zip(pts, finite):
        if not ok:
            boxes.append(G ** d)
            continue
        box = 0
        mult = 1
        for a in range(d):
            w = high[a] - low[a]
            if w == 0:
                b = 0
            elif formula is None:
                t = row[a] - low[a]     # one binary64 op
                t = t * Gf              # one binary64 op
                t = t / w               # one binary64 op
                b = min(G - 1, math.floor(t))
            else:
                b = min(G - 1, BOX_ALTERNATIVES[formula](row[a], low[a], w, G))
            box += b * mult
            mult *= G
        boxes.append(box)
    return boxes, d


def spatial_strata(coords, G, formula=None):
    boxes, _ = spatial_boxes(coords, G, formula)
    groups = {}
    for p, b in enumerate(boxes):
        groups.setdefault(b, []).append(p)
    return [groups[b] for b in sorted(groups)]      # occupied boxes ascending


# ---------------------------------------------------------------------------
# Cell set digest and encoding (spec: "Cell set digest", "Cell set encoding")
# ---------------------------------------------------------------------------

def digest(n, positions):
    """16 lowercase hex digits from two 32-bit lanes over the ascending positions;
    k = len(positions) (for every cell, positions 0 .. n-1 and k = n)."""
    k = len(positions)
    a = 0x811C9DC5 ^ n
    b = 0x9E3779B9 ^ k
    for p in positions:
        a = ((a ^ p) * 0x01000193) & 0xFFFFFFFF
        x = b ^ p
        x = ((x << 13) | (x >> 19)) & 0xFFFFFFFF          # rotl32(x, 13)
        b = (x * 5 + 0xE6546B64) & 0xFFFFFFFF
    return "%08x%08x" % (fmix32(a ^ k), fmix32(b ^ n))


def leb128(v):
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_cells(n, positions):
    """For each ascending position, the gap from the previous one (the first from
    -1) minus one, as an unsigned LEB128 varint; every cell is no bytes."""
    if len(positions) == n:
        return b""
    out = bytearray()
    prev = -1
    for p in positions:
        out += leb128(p - prev - 1)
        prev = p
    return bytes(out)


def b64(data):
    return base64.b64encode(data).decode("ascii")


def decode_cells(n, data):
    """Reference decoder (used to check the encodings and the malformed inputs):
    rejects truncated varints, non-canonical varints, values over uint32 and
    positions >= n."""
    if not data:
        return list(range(n))
    positions = []
    prev = -1
    i = 0
    while i < len(data):
        v = 0
        shift = 0
        start = i
        while True:
            if i >= len(data):
                raise ValueError("truncated varint")
            byte = data[i]
            i += 1
            v |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if i - start > 1 and data[i - 1] == 0:
            raise ValueError("non-canonical varint")
        if v > U32:
            raise ValueError("value overflows uint32")
        p = prev + 1 + v
        if p >= n:
            raise ValueError("position >= n")
        positions.append(p)
        prev = p
    if len(positions) == n:
        raise ValueError("every cell written out (must be no bytes)")
    return positions


# ---------------------------------------------------------------------------
# The request interpreter (docs/select-contract.md)
# ---------------------------------------------------------------------------

class RawNumber:
    """A JSON number written with a chosen text (not Python's repr), to test that
    a number is read as binary64 first (e.g. an exact 18-digit text)."""

    def __init__(self, text):
        self.text = text


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v):
    """A JSON number from the request as the C side sees it: int or binary64."""
    if isinstance(v, RawNumber):
        f = float(v.text)
        return int(v.text) if re.match(r"^-?[0-9]+$", v.text) else f
    return v


def resolve_size(req, n):
    """Exactly one of k, share, percent; returns the requested k (may exceed n)."""
    given = [key for key in ("k", "share", "percent") if key in req]
    if len(given) != 1:
        raise Refused("exactly one of k, share, percent must be given")
    key = given[0]
    v = _number(req[key])
    if key == "k":
        if not _is_int(v):
            raise Refused("k is not an integer")
        if v < 1:
            raise Refused("k must be at least 1" if v < 0 else "k = 0")
        return v
    kind = "fraction" if key == "share" else "percent"
    if not (isinstance(v, (str, float)) or _is_int(v)):
        raise Refused("share is not a number or decimal text")
    return size_from_share(n, share_fraction(v, kind))


def select(req):
    """Answer one request as `zarrmount select` must: the expect object, or
    raise Refused."""
    method = req.get("method")
    if method not in ("uniform", "blocks", "stratified", "spatial"):
        raise Refused("unknown method")

    data_len = None
    codes = None
    coords = None
    if method == "stratified":
        has_codes, has_values = "codes" in req, "values" in req
        if has_codes == has_values:
            raise Refused("stratified needs exactly one of codes, values")
        if has_codes:
            codes = req["codes"]
            for c in codes:
                if c is not None and not _is_int(c):
                    raise Refused("a code is not an integer")
        else:
            values = req["values"]
            for v in values:
                if v is not None and not isinstance(v, str):
                    raise Refused("a value is not a string")
            codes = values_to_codes(values)
        data_len = len(codes)
    elif method == "spatial":
        if "coords" not in req:
            raise Refused("spatial needs coords")
        coords = req["coords"]
        data_len = len(coords)

    if "n" in req:
        n = req["n"]
        if not _is_int(n) or n < 0 or n > U32:
            raise Refused("n outside 0 .. 2^32 - 1")
        if data_len is not None and data_len != n:
            raise Refused("codes/values/coords length differs from n")
    elif data_len is not None:
        n = data_len
    else:
        raise Refused("n is required")

    seed = req.get("seed", 0)
    if not _is_int(seed) or seed < 0 or seed > U32:
        raise Refused("seed outside uint32")

    k_req = resolve_size(req, n)
    k = min(k_req, n)

    # Method settings.
    if method == "blocks":
        B = req.get("blockSize")
        if not _is_int(B) or B < 1:
            raise Refused("blockSize must be an integer >= 1")
    minimum = 0
    allocation = "proportional"
    if method == "stratified":
        allocation = req.get("allocation", "proportional")
        if allocation not in ("proportional", "balanced"):
            raise Refused("unknown allocation")
        minimum = req.get("minimum", 0)
        if not _is_int(minimum) or minimum < 0:
            raise Refused("minimum must be an integer >= 0")
    if method == "spatial":
        G = req.get("gridSize", 32)
        if not _is_int(G) or G < 1:
            raise Refused("gridSize must be an integer >= 1")
        if n == 0:
            raise Refused("spatial with no cells has no columns")
        d = len(coords[0]) if isinstance(coords[0], list) else 0
        if not 1 <= d <= 3:
            raise Refused("coords need 1 to 3 columns")
        for row in coords:
            if not isinstance(row, list) or len(row) != d:
                raise Refused("coords rows differ in length")
        if G ** d >= TWO53:
            raise Refused("gridSize^d >= 2^53")

    if req.get("sizeOnly"):
        return {"k": k}

    if method == "uniform":
        order = select_uniform(n, k_req, seed)
    elif method == "blocks":
        order = select_blocks(n, k_req, seed, B)
    elif method == "stratified":
        order = select_strata(stratified_strata(codes), k_req, seed, minimum,
                              allocation, n)
    else:
        # spatial: balanced, no minimum, over the occupied boxes
        strata = spatial_strata(coords, G)
        order = select_strata(strata, k_req, seed, 0, "balanced", n)

    positions = sorted(order)
    assert len(positions) == k and len(set(positions)) == k
    enc = encode_cells(n, positions)
    result = {"k": k}
    if req.get("summary"):
        result["positionsHead"] = positions[:20]
        result["positionsTail"] = positions[-20:] if positions else []
        result["orderHead"] = order[:20]
        result["orderTail"] = order[-20:] if order else []
    else:
        result["positions"] = positions
        result["order"] = order
    result["digest"] = digest(n, positions)
    result["kept"] = b64(enc)
    return result


# ---------------------------------------------------------------------------
# Deterministic generated data (counter-based, fmix32; no random module)
# ---------------------------------------------------------------------------

def prng(stream, i):
    """A uint32 drawn from (stream, i): reproducible in any language."""
    return fmix32((fmix32(stream ^ 0x5BD1E995) + i * 0x9E3779B9 + 0x7F4A7C15) & U32)


def prng_below(stream, i, m):
    return (prng(stream, i) * m) >> 32


# ---------------------------------------------------------------------------
# Building the fixture
# ---------------------------------------------------------------------------

CASES = []
_CASE_NAMES = set()


def add_case(name, request, expect_refused=None):
    """Add a case; its expectation is computed by the reference interpreter.
    expect_refused: the caller's expectation that it is refused (checked)."""
    assert name not in _CASE_NAMES, name
    _CASE_NAMES.add(name)
    try:
        expect = select(request)
    except Refused as r:
        if expect_refused is False:
            raise AssertionError("unexpected refusal in %s: %s" % (name, r))
        CASES.append({"name": name, "request": request, "refused": str(r)})
        return None
    if expect_refused:
        raise AssertionError("expected a refusal in %s" % name)
    CASES.append({"name": name, "request": request, "expect": expect})
    return expect


def fmix32_table():
    vals = [0, 1, 2, 3, 0xFFFFFFFF, 0xFFFFFFFE, 0x9E3779B9, 0x80000000, 0x7FFFFFFF,
            0x85EBCA6B, 0xC2B2AE35, 0x811C9DC5, 0x01000193, 0xE6546B64, 0xDEADBEEF,
            0x12345678, 0x0000FFFF, 0xFFFF0000, 0x00010000, 0x0000E000, 42, 1000]
    vals += [1 << i for i in range(2, 32, 3)]
    i = 0
    while len(vals) < 52:
        vals.append(prng(1, i))
        i += 1
    out = []
    for h in vals:
        f = fmix32(h)
        assert fmix32_inverse(f) == h
        out.append([h, f])
    return out


def seedkey_table():
    seeds = [0, 1, 2, 42, 7, 1234, 0x9E3779B9, 0xFFFFFFFF, 0xFFFFFFFE, 0x80000000,
             0x7FFFFFFF, 0xDEADBEEF, 65536, 123456789, 4000000000]
    i = 0
    while len(seeds) < 20:
        seeds.append(prng(2, i))
        i += 1
    return [[s, seed_key(s)] for s in seeds]


def rank_table():
    seeds = [0, 1, 42, 0xFFFFFFFF, 0x9E3779B9, 0xDEADBEEF]
    ps = [0, 1, 2, 3, 10, 255, 256, 65535, 65536, 1000000, 0x9E3779B9,
          0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
    out = []
    for s in seeds:
        for p in ps:
            out.append([s, p, rank(s, p)])
    i = 0
    while len(out) < 110:
        s, p = prng(3, 2 * i), prng(3, 2 * i + 1)
        out.append([s, p, rank(s, p)])
        i += 1
    return out


def bits_hex(x):
    return struct.pack(">d", x).hex()


def sig_digits(text):
    mant = text.lower().split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    return len(mant.rstrip("0")) if "." in text.split("e")[0] else len(mant)


def find_16_digit_traps(kind, small, large):
    """Doubles x whose shortest round-trip text D has 16 significant digits and an
    n <= 2^32 - 1 at which n*D and n*x (and n times x's 17-digit text) fall on
    opposite sides of a half: so k from D (the spec's rule) differs from k
    computed from the exact binary value and from the 17-digit text.

    Search: pick n and m, target t = (2m + 1) / (2n) (n*t = m + 1/2 exactly; for a
    percentage 100 t), D = t to 16 significant digits, x = binary64(D); keep x when
    repr(x) is a 16-digit text and the counts differ.  `small` traps have k <= 12
    (full cases are cheap), `large` ones any k."""
    found = []
    n_small = n_large = 0
    stream = 10 if kind == "fraction" else 110
    scale = 1 if kind == "fraction" else 100
    i = 0
    while (n_small < small or n_large < large) and i < 2_000_000:
        n = 1000 + prng_below(stream, i, U32 - 1000)
        want_small = n_small < small
        m = prng_below(stream + 2, i, 12 if want_small else n)
        i += 1
        t = Fraction(2 * m + 1, 2 * n) * scale
        if t > scale:
            continue
        D = "%.15e" % float(t)        # 16 significant digits (a candidate text)
        x = float(D)
        r = repr(x)
        if sig_digits(r) != 16:
            continue
        kD = size_from_share(n, Fraction(r) / scale)
        kx = size_from_share(n, Fraction(x) / scale)
        t17 = "%.16e" % x
        k17 = size_from_share(n, Fraction(t17) / scale)
        if kD != kx and kD != k17:
            if kD <= 12:
                if n_small >= small:
                    continue
                n_small += 1
            else:
                if n_large >= large:
                    continue
                n_large += 1
            found.append({"kind": kind, "x": x, "shortest": r, "text17": t17, "n": n,
                          "k": kD, "kExactBinary": kx, "k17": k17})
    return found


def shares_table(traps):
    out = []

    def text(kind, t, n):
        try:
            k = size_from_share(n, share_fraction(t, kind))
            out.append({"kind": kind, "text": t, "n": n, "k": k})
        except Refused as r:
            out.append({"kind": kind, "text": t, "n": n, "refused": str(r)})

    def binary(kind, x, n):
        k = size_from_share(n, share_fraction(x, kind))
        out.append({"kind": kind, "binary64": bits_hex(x), "shortest": repr(x),
                    "n": n, "k": k})
        return k

    N32 = U32
    # The spec's traps.
    assert repr(2.0 ** -24) == "5.960464477539063e-08"
    assert repr(2.0 ** -25) == "2.9802322387695312e-08"
    assert binary("fraction", 2.0 ** -24, 25165824) == 2
    assert binary("fraction", 2.0 ** -25, 50331648) == 1
    # The texts a wrong converter would produce for those doubles.
    text("fraction", "5.960464477539062e-08", 25165824)       # another double: k = 1
    text("fraction", "2.9802322387695313e-08", 50331648)      # tie broken upward: k = 2
    text("fraction", "2.98023223876953125e-08", 50331648)     # the exact value: 1.5 -> 2
    # 16-digit shares whose 17-digit text rounds the other way.
    for t in traps:
        binary(t["kind"], t["x"], t["n"])
        text(t["kind"], t["shortest"], t["n"])
        text(t["kind"], t["text17"], t["n"])
    # Ordinary shares, as text.
    for t, n in [("0.35", 1000), ("0.35", 10), ("0.35", 0), ("0.5", 3), ("0.5", 1),
                 ("0.5", 0), ("1", 7), ("1.0", 7), ("1e-3", 1000), ("1e-3", 999),
                 ("1e-3", 1500), ("1E-3", 2500), ("5e-1", 9), ("0.350", 20),
                 ("0.001", 1), ("0.0000001", 10), ("1e-400", 5),
                 ("0.3", 5), ("0.29999999999999999", 5), ("0.49999999999999999999", 3),
                 ("0.1", 15), ("0.25", 2), ("0.75", 2), ("0.15", 10), ("0.05", 10),
                 ("0.35", N32), ("0.5", N32), ("1", N32), ("1e-9", N32),
                 ("0.0000000001", N32), ("0.9999999999", N32), ("0.99999999999", N32),
                 ("0.123456789012345678901234567890", N32),
                 ("2.3283064365386963e-10", N32), ("1.1641532182693481e-10", N32),
                 ("1.16415321826934814453125e-10", N32)]:
        text("fraction", t, n)
    for t, n in [("35", 1000), ("0.5", 1000), ("0.5", 100), ("0.5", 300), ("100", 17),
                 ("100.0", 17), ("1e2", 17), ("12.5", 8), ("0.35", 10000),
                 ("0.35", N32), ("50", N32), ("0.0001", N32), ("1e-20", 12),
                 ("33.333333333333333", 3), ("66.666666666666667", 3), ("35", 0)]:
        text("percent", t, n)
    # Ordinary shares as binary64 numbers.
    for x, n in [(0.35, 1000), (0.1, 15), (0.3, 5), (0.5, 3), (1.0, 9), (1 / 3, 3),
                 (2 / 3, 3), (1 / 3, N32), (0.7, N32), (0.35, N32), (1e-9, N32),
                 (5e-324, 10), (1e-300, N32), (0.1 + 0.2, 10),
                 (0.49999999999999994, 1), (0.49999999999999994, 3),
                 (2.0 ** -32, N32), (2.0 ** -33, N32), (2.0 ** -33 * 3, N32)]:
        binary("fraction", x, n)
    for x, n in [(35.0, 1000), (0.5, 1000), (100.0, 9), (33.33, 300), (12.5, 8),
                 (1e-7, N32), (50.0, N32), (100 / 3, 3), (0.1, 4321)]:
        binary("percent", x, n)
    # Refused shares.
    for t in ["0", "0.0", "-0.5", "1.5", "1.0000000000000000001", "2", "", "abc",
              "NaN", "Infinity", "1e400", "0e5", "-0"]:
        text("fraction", t, 100)
    for t in ["0", "150", "100.0000000000001", "-1", "", "x35", "1e3"]:
        text("percent", t, 100)
    return out


def digests_table():
    out = []
    sets = [(0, []), (1, [0]), (5, [0, 1, 2, 3, 4]), (5, [2]), (10, [0, 9]),
            (10, [3, 4, 5]), (100, [1, 17, 42, 99]), (U32, [0]), (U32, [U32 - 1]),
            (U32, [0, 1, 0x80000000, U32 - 1]), (1000, list(range(0, 1000, 7)))]
    for n, ps in sets:
        out.append({"n": n, "positions": ps, "digest": digest(n, ps)})
    for i in range(6):
        n = 50 + prng_below(20, i, 5000)
        ps = sorted(set(prng_below(21 + i, j, n) for j in range(1 + i * 9)))
        out.append({"n": n, "positions": ps, "digest": digest(n, ps)})
    return out


def encodings_table():
    out = []
    sets = [(0, []), (1, [0]), (3, [0, 1, 2]), (3, [1]), (10, [0]), (10, [9]),
            (10, [0, 1, 2]), (10, [0, 2, 4, 6, 8]), (200, [127]), (200, [128]),
            (200, [0, 128]), (300, [0, 129, 258]), (20000, [16383, 16384, 19999]),
            (3000000, [2097151, 2097152]), (U32, [U32 - 1]), (U32, [0, U32 - 1]),
            (U32, [0x0FFFFFFF, 0x10000000]), (U32, list(range(10)))]
    for n, ps in sets:
        data = encode_cells(n, ps)
        assert decode_cells(n, data) == ps
        out.append({"n": n, "positions": ps, "kept": b64(data)})
    return out


def malformed_table():
    bad = [
        (10, bytes([0x80]), "truncated varint: last byte has the 0x80 bit"),
        (300, bytes([0x05, 0xFF]), "truncated varint after a complete one"),
        (U32, bytes([0xFF, 0xFF, 0xFF, 0xFF]), "truncated varint: four continuation bytes"),
        (5, bytes([0x05]), "position 5 >= n = 5"),
        (10, bytes([0x03, 0x06]), "position 10 >= n = 10 (gap accumulates)"),
        (0, bytes([0x00]), "position 0 >= n = 0"),
        (U32, bytes([0xFE, 0xFF, 0xFF, 0xFF, 0x0F, 0x00]),
         "position 2^32 - 1 >= n = 2^32 - 1"),
        (U32, bytes([0x80, 0x80, 0x80, 0x80, 0x10]), "value 2^32 overflows uint32"),
        (U32, bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x1F]), "value 2^33 - 1 overflows uint32"),
        (U32, bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7F]), "value 2^35 - 1 overflows uint32"),
        (U32, bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), "six-byte varint overflows uint32"),
        (10, bytes([0x80, 0x00]), "non-canonical varint: 0 with a redundant 0x80 0x00 tail"),
        (10, bytes([0x81, 0x00]), "non-canonical varint: 1 written in two bytes"),
        (10, bytes([0x02, 0x83, 0x80, 0x00]), "non-canonical varint: 3 written in three bytes"),
        (U32, bytes([0x80, 0x80, 0x80, 0x80, 0x00]), "non-canonical varint: 0 written in five bytes"),
        (3, bytes([0x00, 0x00, 0x00]), "every cell written out: every cell must be no bytes"),
    ]
    out = []
    for n, data, why in bad:
        try:
            decode_cells(n, data)
        except ValueError:
            out.append({"n": n, "kept": b64(data), "why": why})
        else:
            raise AssertionError("reference decoder accepts %r" % why)
    return out


# ---- cases ---------------------------------------------------------------

def uniform_cases(traps):
    for k in [5, 1]:
        add_case("uniform n=0 k=%d" % k, {"method": "uniform", "n": 0, "k": k})
    add_case("uniform n=1 k=1", {"method": "uniform", "n": 1, "k": 1})
    add_case("uniform n=1 k=3", {"method": "uniform", "n": 1, "k": 3})
    for k in [1, 2, 3, 5, 9, 10, 11, 100]:
        add_case("uniform n=10 k=%d seed=0" % k, {"method": "uniform", "n": 10, "k": k})
    add_case("uniform n=10 k=4 seed omitted (default 0)",
             {"method": "uniform", "n": 10, "k": 4})
    add_case("uniform n=10 k=4 seed=0 explicit",
             {"method": "uniform", "n": 10, "seed": 0, "k": 4})
    add_case("uniform n=10 k=4 seed=1", {"method": "uniform", "n": 10, "seed": 1, "k": 4})
    for seed in [0, 1, 42, 0xDEADBEEF, 0xFFFFFFFF]:
        for k in [10, 250]:
            add_case("uniform n=1000 k=%d seed=%d" % (k, seed),
                     {"method": "uniform", "n": 1000, "seed": seed, "k": k})
    add_case("uniform n=1000 k=n seed=3", {"method": "uniform", "n": 1000, "seed": 3, "k": 1000})
    add_case("uniform n=1000 k>n seed=3", {"method": "uniform", "n": 1000, "seed": 3, "k": 1001})
    add_case("uniform n=10 k=2^32-1", {"method": "uniform", "n": 10, "k": U32})
    add_case("uniform n=10 k=2^32 (k beyond uint32 keeps every cell)",
             {"method": "uniform", "n": 10, "k": TWO32})
    # Shares and percentages, text and number.
    share_reqs = [
        ("share text 0.35", {"share": "0.35"}),
        ("share number 0.35", {"share": 0.35}),
        ("percent text 35", {"percent": "35"}),
        ("percent number 35", {"percent": 35}),
        ("percent number 35.5", {"percent": 35.5}),
        ("percent text 0.5", {"percent": "0.5"}),
        ("percent text 100", {"percent": "100"}),
        ("share text 1", {"share": "1"}),
        ("share text 1.0", {"share": "1.0"}),
        ("share number 1", {"share": 1}),
        ("share text 1e-3", {"share": "1e-3"}),
        ("share text 0.0005 (0.5 cells rounds up)", {"share": "0.0005"}),
        ("share text 0.0004999 (tiny share keeps 1)", {"share": "0.0004999"}),
        ("share text 0.0015 (1.5 cells rounds half up)", {"share": "0.0015"}),
        ("share number 0.0015", {"share": 0.0015}),
        ("share number 5e-324 keeps 1", {"share": 5e-324}),
    ]
    for label, extra in share_reqs:
        req = {"method": "uniform", "n": 1000, "seed": 9}
        req.update(extra)
        add_case("uniform n=1000 seed=9 %s" % label, req, expect_refused=False)
    add_case("uniform n=0 share 0.5 (size 0 from a share over no cells)",
             {"method": "uniform", "n": 0, "share": "0.5"})
    add_case("uniform n=5 share text 0.3 (1.5 -> 2)", {"method": "uniform", "n": 5, "share": "0.3"})
    add_case("uniform n=5 share text 0.29999999999999999 (exact text -> 1)",
             {"method": "uniform", "n": 5, "share": "0.29999999999999999"})
    add_case("uniform n=5 share number written 0.29999999999999999 (binary64 0.3 -> 2)",
             {"method": "uniform", "n": 5, "share": RawNumber("0.29999999999999999")})
    add_case("uniform n=3 share text 0.49999999999999999999 (-> 1)",
             {"method": "uniform", "n": 3, "share": "0.49999999999999999999"})
    # The spec's binary64 traps as full cases (tiny k, huge n: positions via the
    # rank walk).
    add_case("uniform n=25165824 share 2^-24 (k=2)",
             {"method": "uniform", "n": 25165824, "share": 2.0 ** -24})
    add_case("uniform n=50331648 share 2^-25 (k=1)",
             {"method": "uniform", "n": 50331648, "share": 2.0 ** -25})
    add_case("uniform n=50331648 share 2^-25 written exactly 2.98023223876953125e-08 (still k=1)",
             {"method": "uniform", "n": 50331648, "share": RawNumber("2.98023223876953125e-08")})
    add_case("uniform n=50331648 share text 2.98023223876953125e-08 (exact text: 1.5 -> k=2)",
             {"method": "uniform", "n": 50331648, "share": "2.98023223876953125e-08"})
    add_case("uniform n=50331648 share number written with 17 digits rounded up 2.9802322387695313e-08 (same binary64 -> k=1)",
             {"method": "uniform", "n": 50331648, "share": RawNumber("2.9802322387695313e-08")})
    for t in traps:
        key = "share" if t["kind"] == "fraction" else "percent"
        if t["k"] <= 12:
            add_case("uniform 16-digit %s trap n=%d %s %s (k=%d)"
                     % (key, t["n"], key, t["shortest"], t["k"]),
                     {"method": "uniform", "n": t["n"], "seed": 5, key: t["x"]})
            add_case("uniform 16-digit %s trap n=%d %s written %s (same binary64, k=%d)"
                     % (key, t["n"], key, t["text17"], t["k"]),
                     {"method": "uniform", "n": t["n"], "seed": 5, key: RawNumber(t["text17"])})
    # n = 2^32 - 1 with tiny shares: full positions near the top of uint32.
    add_case("uniform n=2^32-1 share text 1e-9", {"method": "uniform", "n": U32, "share": "1e-9"})
    add_case("uniform n=2^32-1 k=5 seed=0xffffffff",
             {"method": "uniform", "n": U32, "seed": U32, "k": 5})
    add_case("uniform n=2^32-1 percent number 1e-7",
             {"method": "uniform", "n": U32, "seed": 77, "percent": 1e-7})
    add_case("uniform n=2^32-1 k=1", {"method": "uniform", "n": U32, "k": 1})


def size_only_cases(traps):
    N = U32
    reqs = [
        ("share text 0.35", {"share": "0.35"}),
        ("share number 0.35", {"share": 0.35}),
        ("share text 0.5", {"share": "0.5"}),
        ("share number 1/3", {"share": 1 / 3}),
        ("share text 1", {"share": "1"}),
        ("share number 1", {"share": 1}),
        ("share number 0.7", {"share": 0.7}),
        ("share text 0.123456789012345678901234567890", {"share": "0.123456789012345678901234567890"}),
        ("percent text 35", {"percent": "35"}),
        ("percent number 35", {"percent": 35}),
        ("percent number 33.33", {"percent": 33.33}),
        ("percent text 0.0001", {"percent": "0.0001"}),
        ("percent text 100", {"percent": "100"}),
        ("share text 1e-12 (keeps 1)", {"share": "1e-12"}),
        ("share number 2^-33", {"share": 2.0 ** -33}),
        ("share number 3*2^-33 (1.5 -> 2)", {"share": 3 * 2.0 ** -33}),
        ("k=5", {"k": 5}),
        ("k=2^32-1", {"k": U32}),
        ("k=2^32-2", {"k": U32 - 1}),
    ]
    for label, extra in reqs:
        req = {"method": "uniform", "n": N, "sizeOnly": True}
        req.update(extra)
        add_case("sizeOnly n=2^32-1 %s" % label, req, expect_refused=False)
    for label, extra in [("share text 0.5", {"share": "0.5"}), ("k=3", {"k": 3}),
                         ("percent number 50", {"percent": 50})]:
        req = {"method": "uniform", "n": 0, "sizeOnly": True}
        req.update(extra)
        add_case("sizeOnly n=0 %s" % label, req, expect_refused=False)
    for t in traps:
        key = "share" if t["kind"] == "fraction" else "percent"
        add_case("sizeOnly 16-digit %s trap n=%d %s number %s" % (key, t["n"], key, t["shortest"]),
                 {"method": "uniform", "n": t["n"], key: t["x"], "sizeOnly": True})
        add_case("sizeOnly 16-digit %s trap n=%d %s text %s" % (key, t["n"], key, t["shortest"]),
                 {"method": "uniform", "n": t["n"], key: t["shortest"], "sizeOnly": True})
        add_case("sizeOnly 17-digit text of the %s trap n=%d %s text %s"
                 % (key, t["n"], key, t["text17"]),
                 {"method": "uniform", "n": t["n"], key: t["text17"], "sizeOnly": True})
        add_case("sizeOnly 16-digit %s trap n=%d %s number written %s (same binary64)"
                 % (key, t["n"], key, t["text17"]),
                 {"method": "uniform", "n": t["n"], key: RawNumber(t["text17"]), "sizeOnly": True})
    add_case("sizeOnly n=25165824 share 2^-24", {"method": "uniform", "n": 25165824,
                                                 "share": 2.0 ** -24, "sizeOnly": True})
    add_case("sizeOnly n=50331648 share 2^-25", {"method": "uniform", "n": 50331648,
                                                 "share": 2.0 ** -25, "sizeOnly": True})
    add_case("sizeOnly share 0 refused", {"method": "uniform", "n": 100, "share": 0,
                                          "sizeOnly": True}, expect_refused=True)
    add_case("sizeOnly percent text 150 refused", {"method": "uniform", "n": 100,
                                                   "percent": "150", "sizeOnly": True},
             expect_refused=True)


def blocks_cases():
    # B = 1 equals uniform.
    for n, k, seed in [(10, 4, 0), (1000, 37, 42), (1000, 1000, 1)]:
        add_case("blocks n=%d B=1 k=%d seed=%d" % (n, k, seed),
                 {"method": "blocks", "n": n, "seed": seed, "k": k, "blockSize": 1})
        add_case("uniform n=%d k=%d seed=%d (equals blocks B=1)" % (n, k, seed),
                 {"method": "uniform", "n": n, "seed": seed, "k": k})
        a = select({"method": "blocks", "n": n, "seed": seed, "k": k, "blockSize": 1})
        b = select({"method": "uniform", "n": n, "seed": seed, "k": k})
        assert a == b
    # B = 7, n not a multiple (short last block).
    for k in [1, 7, 8, 20, 45, 50, 100]:
        add_case("blocks n=50 B=7 k=%d seed=0" % k,
                 {"method": "blocks", "n": 50, "k": k, "blockSize": 7})
    # Seeds where the short last block is among the blocks chosen.
    key_found = 0
    seed = 0
    while key_found < 2:
        order = select_blocks(50, 20, seed, 7)
        nblocks = 8
        ranked = sorted(range(nblocks), key=lambda j: rank(seed, j))
        # the short block 7 ([49, 50)) taken whole before the last block
        if 49 in order and ranked.index(7) < 2:
            add_case("blocks n=50 B=7 k=20 seed=%d (short last block chosen whole)" % seed,
                     {"method": "blocks", "n": 50, "seed": seed, "k": 20, "blockSize": 7})
            key_found += 1
        seed += 1
    seed = 0
    while True:
        ranked = sorted(range(8), key=lambda j: rank(seed, j))
        if ranked[0] == 7:
            add_case("blocks n=50 B=7 k=3 seed=%d (short last block first, partly)" % seed,
                     {"method": "blocks", "n": 50, "seed": seed, "k": 3, "blockSize": 7})
            add_case("blocks n=50 B=7 k=2 seed=%d (short last block first, partly)" % seed,
                     {"method": "blocks", "n": 50, "seed": seed, "k": 2, "blockSize": 7})
            break
        seed += 1
    # B > n: one block, the first k cells.
    add_case("blocks n=10 B=16 k=4", {"method": "blocks", "n": 10, "seed": 3, "k": 4, "blockSize": 16})
    add_case("blocks n=10 B=2^32-1 k=4", {"method": "blocks", "n": 10, "k": 4, "blockSize": U32})
    add_case("blocks n=10 B=10 k=10", {"method": "blocks", "n": 10, "k": 10, "blockSize": 10})
    # k not a multiple of B.
    for seed in [0, 1, 0xFFFFFFFF]:
        add_case("blocks n=1000 B=64 k=100 seed=%d" % seed,
                 {"method": "blocks", "n": 1000, "seed": seed, "k": 100, "blockSize": 64})
    add_case("blocks n=1000 B=3 k=500 seed=11", {"method": "blocks", "n": 1000, "seed": 11,
                                                 "k": 500, "blockSize": 3})
    add_case("blocks n=1000 B=64 k=2000 (every cell, block order)",
             {"method": "blocks", "n": 1000, "seed": 2, "k": 2000, "blockSize": 64})
    add_case("blocks n=0 B=4 k=3", {"method": "blocks", "n": 0, "k": 3, "blockSize": 4})
    add_case("blocks n=1000 B=10 share text 0.35", {"method": "blocks", "n": 1000,
                                                    "share": "0.35", "blockSize": 10})
    add_case("blocks n=1000 B=10 percent number 12.34", {"method": "blocks", "n": 1000,
                                                         "percent": 12.34, "blockSize": 10})
    # Near the top of uint32.
    add_case("blocks n=2^32-1 B=2^20 k=3 seed=9",
             {"method": "blocks", "n": U32, "seed": 9, "k": 3, "blockSize": 1 << 20})
    add_case("blocks n=2^32-1 B=1000 k=2500 seed=0 summary",
             {"method": "blocks", "n": U32, "k": 2500, "blockSize": 1000, "summary": True})


def nested_cases():
    for k in [1, 2, 5, 50, 200, 499, 500]:
        add_case("nested uniform n=500 seed=7 k=%d" % k,
                 {"method": "uniform", "n": 500, "seed": 7, "k": k})
    for k in [1, 10, 16, 17, 100, 333, 499, 500]:
        add_case("nested blocks n=500 B=16 seed=7 k=%d" % k,
                 {"method": "blocks", "n": 500, "seed": 7, "k": k, "blockSize": 16})
    # self-check: nested
    for method, extra in [("uniform", {}), ("blocks", {"blockSize": 16})]:
        prev = set()
        for k in range(1, 501):
            req = {"method": method, "n": 500, "seed": 7, "k": k}
            req.update(extra)
            cur = set(select(req)["positions"])
            assert prev <= cur
            prev = cur


def stratified_cases():
    codes20 = [0, 1, None, 2, 0, 0, -1, 1, 2, 2, 0, None, 1, 0, 3, 3, -5, 0, 2, 1]
    for alloc in ["proportional", "balanced"]:
        for k in [1, 4, 7, 13, 19]:
            add_case("stratified n=20 missing null and negative %s k=%d" % (alloc, k),
                     {"method": "stratified", "n": 20, "seed": 1, "k": k,
                      "codes": codes20, "allocation": alloc})
    add_case("stratified n=20 allocation default (proportional) k=7 n omitted",
             {"method": "stratified", "seed": 1, "k": 7, "codes": codes20})
    add_case("stratified n=20 k=20 every cell", {"method": "stratified", "k": 20, "codes": codes20})
    add_case("stratified n=20 k=25 minimum 100 (every cell, never refused)",
             {"method": "stratified", "k": 25, "codes": codes20, "minimum": 100})
    # Empty categories (codes 1, 3, 4 and 6 have no cell).
    codes_gaps = [0, 2, 5, 5, 7, 0, 2, 2, 5, 7, 7, 7, 0, 2, 5]
    for alloc in ["proportional", "balanced"]:
        add_case("stratified empty categories %s k=6" % alloc,
                 {"method": "stratified", "seed": 4, "k": 6, "codes": codes_gaps,
                  "allocation": alloc})
        add_case("stratified empty categories %s minimum 1 k=5" % alloc,
                 {"method": "stratified", "seed": 4, "k": 5, "codes": codes_gaps,
                  "allocation": alloc, "minimum": 1})
    # One huge stratum and several tiny ones.
    big = []
    for p in range(1006):
        big.append(0)
    for c, cnt in [(1, 1), (2, 2), (3, 3)]:
        big.extend([c] * cnt)
    big.append(None)
    # interleave deterministically so positions are mixed
    perm = sorted(range(len(big)), key=lambda i: prng(30, i))
    big = [big[i] for i in perm]
    for alloc in ["proportional", "balanced"]:
        for k, m in [(50, 0), (50, 1), (50, 2), (5, 1), (4, 0), (300, 0), (1010, 0)]:
            add_case("stratified one huge several tiny %s k=%d minimum %d" % (alloc, k, m),
                     {"method": "stratified", "n": len(big), "seed": 8, "k": k,
                      "codes": big, "allocation": alloc, "minimum": m})
    # Minimum larger than some strata sizes: strata 1, 2, 10, 20 cells.
    sizes = [1, 2, 10, 20]
    codes_m = []
    for c, cnt in enumerate(sizes):
        codes_m.extend([c] * cnt)
    codes_m = [codes_m[i] for i in sorted(range(len(codes_m)), key=lambda i: prng(31, i))]
    for alloc in ["proportional", "balanced"]:
        add_case("stratified minimum 5 over strata 1,2,10,20 %s k=15" % alloc,
                 {"method": "stratified", "seed": 2, "k": 15, "codes": codes_m,
                  "allocation": alloc, "minimum": 5})
        add_case("stratified minimum 5 exactly fitting k=13 %s" % alloc,
                 {"method": "stratified", "seed": 2, "k": 13, "codes": codes_m,
                  "allocation": alloc, "minimum": 5})
        add_case("stratified minimum 5 over strata 1,2,10,20 %s k=12 refused" % alloc,
                 {"method": "stratified", "seed": 2, "k": 12, "codes": codes_m,
                  "allocation": alloc, "minimum": 5}, expect_refused=True)
    # Ties in remainders: three strata of 10, k = 10 (each 3.33: the lowest gets the
    # extra); four strata of 5, k = 6 (each 1.5: the two lowest get one more).
    ties3 = [i % 3 for i in range(30)]
    ties4 = [i % 4 for i in range(20)]
    for alloc in ["proportional", "balanced"]:
        add_case("stratified ties 3x10 k=10 %s" % alloc,
                 {"method": "stratified", "seed": 6, "k": 10, "codes": ties3, "allocation": alloc})
        add_case("stratified ties 4x5 k=6 %s" % alloc,
                 {"method": "stratified", "seed": 6, "k": 6, "codes": ties4, "allocation": alloc})
    # Remainder ties that differ from a float computation: strata with capacities
    # 7, 7, 3, 3 and missing 1 at R = 10.
    codes_r = [0] * 7 + [1] * 7 + [2] * 3 + [3] * 3 + [None]
    for alloc in ["proportional", "balanced"]:
        for k in [3, 10, 11]:
            add_case("stratified capacities 7,7,3,3,1 %s k=%d" % (alloc, k),
                     {"method": "stratified", "seed": 12, "k": k, "codes": codes_r,
                      "allocation": alloc})
    # Water-filling with leftover: capacities 5, 1, 5, 3 at R = 10 and 11.
    codes_w = [0] * 5 + [1] * 1 + [2] * 5 + [3] * 3
    for k in [10, 11, 2, 13]:
        add_case("stratified balanced capacities 5,1,5,3 k=%d" % k,
                 {"method": "stratified", "seed": 13, "k": k, "codes": codes_w,
                  "allocation": "balanced"})
        add_case("stratified proportional capacities 5,1,5,3 k=%d" % k,
                 {"method": "stratified", "seed": 13, "k": k, "codes": codes_w,
                  "allocation": "proportional"})
    # Only missing cells.
    add_case("stratified every code missing k=3",
             {"method": "stratified", "k": 3, "codes": [None, -1, -2, None, -7]})
    add_case("stratified n=0 k=1", {"method": "stratified", "n": 0, "k": 1, "codes": []})
    add_case("stratified share text 0.5 n=20", {"method": "stratified", "share": "0.5",
                                                "codes": codes20, "seed": 3})
    add_case("stratified percent number 30 n=20 balanced",
             {"method": "stratified", "percent": 30, "codes": codes20, "seed": 3,
              "allocation": "balanced"})
    # Values: code-point order, not a locale's: "B" < "a" < "é" and more.
    vals = ["a", "B", "é", None, "a", "A", "b", "É", "Z", "é", "e\u0301", "", "a",
            "B", "\uff41", "\U0001F600", "z", None, "é", "b", "\U0001F600", "\uff41",
            "Zebra", "zebra", "", "B", "a", "é"]
    assert sorted(set(v for v in vals if v is not None)) == \
        ["", "A", "B", "Z", "Zebra", "a", "b", "e\u0301", "z", "zebra", "É", "é",
         "\uff41", "\U0001F600"]
    for alloc in ["proportional", "balanced"]:
        for k in [5, 14, 20]:
            add_case("stratified values code-point order %s k=%d" % (alloc, k),
                     {"method": "stratified", "seed": 21, "k": k, "values": vals,
                      "allocation": alloc})
        add_case("stratified values code-point order %s minimum 1 k=15" % alloc,
                 {"method": "stratified", "seed": 21, "k": 15, "values": vals,
                  "allocation": alloc, "minimum": 1})
    vals2 = ["a", "B", "é"] * 3 + ["a"] * 6 + [None]
    add_case("stratified values B < a < é k=4",
             {"method": "stratified", "seed": 0, "k": 4, "values": vals2})
    add_case("stratified values B < a < é balanced k=4",
             {"method": "stratified", "seed": 0, "k": 4, "values": vals2,
              "allocation": "balanced"})
    # Codes equivalent to vals2 under code-point order ("B"=0, "a"=1, "é"=2).
    index = {"B": 0, "a": 1, "é": 2}
    codes2 = [None if v is None else index[v] for v in vals2]
    add_case("stratified codes equal to values B < a < é k=4",
             {"method": "stratified", "seed": 0, "k": 4, "codes": codes2})
    assert select({"method": "stratified", "seed": 0, "k": 4, "codes": codes2}) == \
        select({"method": "stratified", "seed": 0, "k": 4, "values": vals2})
    # Large: n = 20,000 with generated codes (skewed sizes, empty categories, missing).
    n = 20000
    codes_big = []
    for i in range(n):
        u = prng(40, i)
        if u % 97 == 0:
            codes_big.append(None)
        elif u % 89 == 0:
            codes_big.append(-1)
        else:
            # skewed: category c with weight ~ 1/(c+1) over 0..39, skipping 13 and 27
            c = (prng(41, i) % 40) * (prng(42, i) % 40) // 40
            if c in (13, 27):
                c = 14
            codes_big.append(c)
    for alloc, k, m, nn in [("proportional", 2000, 0, 20000), ("balanced", 500, 5, 20000),
                            ("balanced", 400, 0, 5000), ("proportional", 700, 10, 5000)]:
        add_case("stratified large n=%d %s k=%d minimum %d summary" % (nn, alloc, k, m),
                 {"method": "stratified", "n": nn, "seed": 99, "k": k, "codes": codes_big[:nn],
                  "allocation": alloc, "minimum": m, "summary": True})


def next_float32(x, up):
    """The neighbouring float32 of a float32 value x (finite, positive here)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return struct.unpack("<f", struct.pack("<I", bits + (1 if up else -1)))[0]


def spatial_rounding_traps(low_text, high_text, G, want):
    """Float32 coordinates in [low, high] near box boundaries whose box under the
    specified binary64 formula ((x - low) * G) / w differs from the exact
    rational box, from the other order of operations ((x - low) / w * G), or
    from the same formula in float32 arithmetic.  Returns (low, high, picks)."""
    low = to_float32(float(low_text))
    high = to_float32(float(high_text))
    w = high - low
    picks = []
    for j in range(1, G):
        t = Fraction(low) + Fraction(j) * Fraction(w) / G      # exact boundary
        centre = to_float32(float(t))
        xs = [centre]
        a = b = centre
        for _ in range(8):
            a = next_float32(a, False)
            b = next_float32(b, True)
            xs += [a, b]
        for x in xs:
            if not (low <= x <= high):
                continue
            spec = min(G - 1, math.floor(((x - low) * G) / w))
            if any(min(G - 1, alt(x, low, w, G)) != spec
                   for alt in BOX_ALTERNATIVES.values()):
                picks.append(x)
        if len(picks) >= want:
            break
    return low, high, sorted(set(picks))


def spatial_kept(coords, G, k, seed, formula=None):
    return sorted(select_strata(spatial_strata(coords, G, formula), k, seed, 0, "balanced",
                                len(coords)))


def discriminating_spatial_sizes(coords, G):
    """A few (k, seed) at which the specified box formula keeps other cells than
    each wrong reading (greedy cover of BOX_ALTERNATIVES)."""
    n = len(coords)
    left = [f for f in BOX_ALTERNATIVES
            if spatial_strata(coords, G, f) != spatial_strata(coords, G)]
    chosen = []
    while left:
        best = None
        for seed in range(8):
            for k in range(1, n):
                spec = spatial_kept(coords, G, k, seed)
                beaten = [f for f in left if spatial_kept(coords, G, k, seed, f) != spec]
                if beaten and (best is None or len(beaten) > len(best[2])):
                    best = (k, seed, beaten)
        if best is None:
            break
        chosen.append(best)
        left = [f for f in left if f not in best[2]]
    return chosen


def spatial_cases():
    # 1 column.
    xs = [((prng(50, i) % 1000) / 10.0) for i in range(30)]
    for k in [1, 5, 10, 29]:
        add_case("spatial 1 column n=30 k=%d" % k,
                 {"method": "spatial", "seed": 3, "k": k, "coords": [[x] for x in xs]})
    # 2 columns: a dense cluster and a sparse spread.
    pts2 = []
    for i in range(60):
        if i < 45:
            pts2.append([1.0 + (prng(51, i) % 100) / 1000.0, 2.0 + (prng(52, i) % 100) / 1000.0])
        else:
            pts2.append([(prng(53, i) % 1000) / 10.0, (prng(54, i) % 1000) / 10.0])
    for k, G in [(10, None), (20, None), (10, 2), (10, 7), (15, 1000), (10, 1)]:
        req = {"method": "spatial", "n": 60, "seed": 4, "k": k, "coords": pts2}
        name = "spatial 2 columns cluster+spread n=60 k=%d" % k
        if G is not None:
            req["gridSize"] = G
            name += " G=%d" % G
        add_case(name, req)
    # 3 columns.
    pts3 = [[(prng(55, i) % 200) / 8.0 - 12.5, (prng(56, i) % 50) * 0.3,
             -((prng(57, i) % 31) ** 2) / 4.0] for i in range(80)]
    for k, G in [(10, 4), (25, 2), (40, None), (12, 7)]:
        req = {"method": "spatial", "seed": 5, "k": k, "coords": pts3}
        name = "spatial 3 columns n=80 k=%d" % k
        if G is not None:
            req["gridSize"] = G
            name += " G=%d" % G
        add_case(name, req)
    # Constant axis.
    pts_c = [[x, 5.0] for x in xs]
    add_case("spatial 2 columns constant second axis k=8 G=4",
             {"method": "spatial", "seed": 6, "k": 8, "coords": pts_c, "gridSize": 4})
    add_case("spatial 1 column every value equal k=3",
             {"method": "spatial", "seed": 6, "k": 3, "coords": [[2.5]] * 12})
    add_case("spatial 3 columns constant first axis with -0.0 and 0.0 k=4 G=3",
             {"method": "spatial", "seed": 6, "k": 4, "gridSize": 3,
              "coords": [[0.0 if i % 2 else -0.0, float(i), float(i % 3)] for i in range(12)]})
    # Non-finite cells in every written form.
    pts_nf = [[1.0, 2.0], [None, 1.0], [3.0, "NaN"], ["Infinity", 0.5], [0.25, "-Infinity"],
              [2.0, 2.0], [0.0, 0.0], [1.5, 1.5], [None, None], [2.5, 0.5], [0.5, 2.5],
              [1.0, 1.0]]
    for k in [2, 5, 8, 11]:
        add_case("spatial non-finite cells (null, NaN, +-Infinity) k=%d G=2" % k,
                 {"method": "spatial", "seed": 7, "k": k, "coords": pts_nf, "gridSize": 2})
    # No finite cell at all: every cell in the last box (uniform over them).
    pts_none = [[None], ["NaN"], ["Infinity"], ["-Infinity"], [None], ["NaN"]]
    add_case("spatial no finite cell k=3",
             {"method": "spatial", "seed": 8, "k": 3, "coords": pts_none})
    assert select({"method": "spatial", "seed": 8, "k": 3, "coords": pts_none})["positions"] == \
        select({"method": "uniform", "n": 6, "seed": 8, "k": 3})["positions"]
    # Huge values: 1e39 and 3.5e38 round to float32 infinity (non-finite, last box);
    # 3.4028235e38 and 3.4028235677973362e38 round to FLT_MAX (finite).
    just_below = math.nextafter(2.0 ** 128 - 2.0 ** 103, 0)
    assert to_float32(just_below) == FLT_MAX and to_float32(2.0 ** 128 - 2.0 ** 103) == math.inf
    pts_huge = [[1e39], [-1e39], [3.5e38], [3.4028235e38], [just_below],
                [2.0 ** 128 - 2.0 ** 103], [-3.4028235e38], [0.0], [1.0], [-1.0], [1e38],
                [-1e38], [1e300], [1e-46], [-5e-46]]
    for k in [3, 6, 10]:
        add_case("spatial huge values (float32 overflow to inf, FLT_MAX) k=%d G=8" % k,
                 {"method": "spatial", "seed": 9, "k": k, "coords": pts_huge, "gridSize": 8})
    # Subnormal float32 values (no flush to zero).
    pts_sub = [[0.0], [1e-46], [1e-45], [2e-45], [3e-45], [4.2e-45], [5e-45], [7e-45],
               [1.1e-44], [1.4e-45]]
    add_case("spatial subnormal float32 coordinates k=4 G=4",
             {"method": "spatial", "seed": 10, "k": 4, "coords": pts_sub, "gridSize": 4})
    add_case("spatial subnormal float32 coordinates k=2 G=1000",
             {"method": "spatial", "seed": 10, "k": 2, "coords": pts_sub, "gridSize": 1000})
    # Cells exactly on the high edge: box G - 1 (G = 7 so (w * 7) / w is not trivial).
    pts_edge = [[0.0, 0.0], [0.7, 0.7], [0.7, 0.0], [0.0, 0.7], [0.35, 0.35], [0.1, 0.6],
                [0.6, 0.1], [0.7, 0.35], [0.2, 0.2], [0.3, 0.3]]
    for G in [7, 3, 1000]:
        add_case("spatial cells on the high edge G=%d k=5" % G,
                 {"method": "spatial", "seed": 11, "k": 5, "coords": pts_edge, "gridSize": G})
    # Float32 rounding first: doubles at float32 midpoints (ties to even) and
    # doubles that fall in another box before rounding.
    mid_below_1 = 1.0 - 2.0 ** -25      # float32 tie between 1 - 2^-24 and 1: -> 1.0
    mid_above_1 = 1.0 + 2.0 ** -24      # tie between 1 and 1 + 2^-23: -> 1.0
    assert to_float32(mid_below_1) == 1.0 and to_float32(mid_above_1) == 1.0
    pts_mid = [[0.0], [2.0], [mid_below_1], [mid_above_1], [1.0 - 2.0 ** -24],
               [1.0 - 3 * 2.0 ** -26], [0.5], [1.5], [1.0 + 3 * 2.0 ** -25]]
    for k in [2, 4, 6]:
        add_case("spatial float32 ties to even at a box edge G=2 k=%d" % k,
                 {"method": "spatial", "seed": 12, "k": k, "coords": pts_mid, "gridSize": 2})
    # Rounding-sensitive boxes (the binary64 op order matters): cells on box
    # boundaries where a wrong reading of the formula (BOX_ALTERNATIVES) puts
    # them in another box, with sizes and seeds chosen so that each wrong
    # reading keeps other cells in at least one case.
    u09 = to_float32(0.9)
    u015 = to_float32(0.15)
    designed = [
        # low + j*u exactly (float32): (x - low) * (G / w) falls short of j
        ("boundaries low=-2.5 step=float32(0.9) G=4",
         [[-2.5 + j * u09] for j in range(5)] + [[-2.5 + 0.5 * u09], [-2.5 + 2.5 * u09]], 4),
        # (x - low) / w * G falls short of 15 at j = 15
        ("boundaries low=-2.5 step=float32(0.15) G=22",
         [[-2.5 + j * u015] for j in range(23)], 22),
        # x - low and w round in binary64 (low = 2^-60): the exact box is lower
        ("inexact subtraction low=2^-60 high=1 G=4",
         [[2.0 ** -60], [1.0], [0.5], [0.25], [0.75], [0.125], [0.625]], 4),
    ]
    designed = [(label, [[to_float32(v) for v in row] for row in pts], G)
                for label, pts, G in designed]
    low, high, picks = spatial_rounding_traps("-3.3", "12.9", 10, 12)
    designed.append(("float32 arithmetic differs low=-3.3 high=12.9 G=10",
                     [[low], [high]] + [[x] for x in picks], 10))
    for label, pts, G in designed:
        sizes = discriminating_spatial_sizes(pts, G)
        assert sizes, label
        for k, seed, beaten in sizes:
            add_case("spatial op order: %s k=%d seed=%d (not %s)"
                     % (label, k, seed, "; not ".join(beaten)),
                     {"method": "spatial", "seed": seed, "k": k, "coords": pts, "gridSize": G})
    # Big grids near the 2^53 limit.
    add_case("spatial 1 column G=2^53-1 (allowed) k=3",
             {"method": "spatial", "seed": 14, "k": 3, "coords": [[x] for x in xs[:10]],
              "gridSize": TWO53 - 1})
    add_case("spatial 2 columns G=2^26 (G^2 = 2^52, allowed) k=4",
             {"method": "spatial", "seed": 14, "k": 4, "coords": pts2[:20],
              "gridSize": 1 << 26})
    # Share forms.
    add_case("spatial share text 0.25 n=60", {"method": "spatial", "share": "0.25", "coords": pts2})
    add_case("spatial percent number 10 n=60", {"method": "spatial", "percent": 10, "coords": pts2})
    add_case("spatial k=100 > n=60 every cell", {"method": "spatial", "k": 100, "coords": pts2})
    # Large: n = 20,000, 2 columns, clustered, short decimals (float32 rounding matters).
    n = 20000
    big = []
    for i in range(n):
        cl = prng(60, i) % 5
        cx, cy = [(0, 0), (50, 10), (-30, 40), (10, -60), (80, 80)][cl]
        spread = [2, 5, 10, 20, 40][cl]
        # Irwin-Hall-ish in integers: sum of three uniforms, centred, over 100
        sx = sum(prng(61 + j, i) % (spread * 100) for j in range(3)) - 3 * spread * 50
        sy = sum(prng(64 + j, i) % (spread * 100) for j in range(3)) - 3 * spread * 50
        x = (cx * 100 + sx) / 100.0
        y = (cy * 100 + sy) / 100.0
        if prng(67, i) % 1000 == 0:
            x = "NaN"
        big.append([x, y])
    add_case("spatial large n=20000 2 columns k=2000 summary",
             {"method": "spatial", "n": n, "seed": 100, "k": 2000, "coords": big,
              "summary": True})
    add_case("spatial large n=5000 2 columns G=8 k=500 summary",
             {"method": "spatial", "n": 5000, "seed": 100, "k": 500, "coords": big[:5000],
              "gridSize": 8, "summary": True})


def refusal_cases():
    R = True
    add_case("k=0 refused", {"method": "uniform", "n": 10, "k": 0}, R)
    add_case("negative k refused", {"method": "uniform", "n": 10, "k": -3}, R)
    add_case("seed = 2^32 refused", {"method": "uniform", "n": 10, "k": 3, "seed": TWO32}, R)
    add_case("seed negative refused", {"method": "uniform", "n": 10, "k": 3, "seed": -1}, R)
    add_case("n = 2^32 refused", {"method": "uniform", "n": TWO32, "k": 3}, R)
    add_case("n negative refused", {"method": "uniform", "n": -1, "k": 3}, R)
    add_case("minimum that does not fit k refused",
             {"method": "stratified", "k": 5, "minimum": 2, "codes": [0, 0, 1, 1, 2, 2, 2, 2]}, R)
    add_case("gridSize^d >= 2^53: G=2^18 with 3 columns refused",
             {"method": "spatial", "k": 1, "gridSize": 1 << 18,
              "coords": [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]}, R)
    add_case("gridSize^d >= 2^53: G=2^27 with 2 columns (2^54) refused",
             {"method": "spatial", "k": 1, "gridSize": 1 << 27,
              "coords": [[0.0, 1.0], [1.0, 2.0]]}, R)
    add_case("gridSize^d >= 2^53: G=2^53 with 1 column refused",
             {"method": "spatial", "k": 1, "gridSize": TWO53, "coords": [[0.0], [1.0]]}, R)
    add_case("gridSize 0 refused",
             {"method": "spatial", "k": 1, "gridSize": 0, "coords": [[0.0], [1.0]]}, R)
    add_case("share 0 refused", {"method": "uniform", "n": 10, "share": 0}, R)
    add_case("share number 0.0 refused", {"method": "uniform", "n": 10, "share": 0.0}, R)
    add_case("share number -0.0 refused", {"method": "uniform", "n": 10, "share": -0.0}, R)
    add_case("share text 0 refused", {"method": "uniform", "n": 10, "share": "0"}, R)
    add_case("share text 1.5 refused", {"method": "uniform", "n": 10, "share": "1.5"}, R)
    add_case("share number 1.5 refused", {"method": "uniform", "n": 10, "share": 1.5}, R)
    add_case("share number -0.5 refused", {"method": "uniform", "n": 10, "share": -0.5}, R)
    add_case("share text 1.0000000000000000001 refused (exact text above 1)",
             {"method": "uniform", "n": 10, "share": "1.0000000000000000001"}, R)
    add_case("share text empty refused", {"method": "uniform", "n": 10, "share": ""}, R)
    add_case("share text garbage refused", {"method": "uniform", "n": 10, "share": "abc"}, R)
    add_case("percent text 150 refused", {"method": "uniform", "n": 10, "percent": "150"}, R)
    add_case("percent number 150 refused", {"method": "uniform", "n": 10, "percent": 150}, R)
    add_case("percent text 0 refused", {"method": "uniform", "n": 10, "percent": "0"}, R)
    add_case("percent number 0 refused", {"method": "uniform", "n": 10, "percent": 0}, R)
    add_case("both k and share refused", {"method": "uniform", "n": 10, "k": 3, "share": "0.5"}, R)
    add_case("both share and percent refused",
             {"method": "uniform", "n": 10, "share": "0.5", "percent": "50"}, R)
    add_case("neither k nor share nor percent refused", {"method": "uniform", "n": 10}, R)
    add_case("blocks with blockSize 0 refused",
             {"method": "blocks", "n": 10, "k": 3, "blockSize": 0}, R)
    add_case("blocks without blockSize refused", {"method": "blocks", "n": 10, "k": 3}, R)
    add_case("unknown method refused", {"method": "random", "n": 10, "k": 3}, R)
    add_case("codes length != n refused",
             {"method": "stratified", "n": 5, "k": 2, "codes": [0, 1, 0, 1]}, R)
    add_case("values length != n refused",
             {"method": "stratified", "n": 3, "k": 2, "values": ["a", "b", "a", "b"]}, R)
    add_case("coords length != n refused",
             {"method": "spatial", "n": 3, "k": 2, "coords": [[0.0], [1.0]]}, R)
    add_case("unknown allocation refused",
             {"method": "stratified", "k": 2, "codes": [0, 1, 0, 1], "allocation": "equal"}, R)


def main():
    t0 = time.time()
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
        "subsample_conformance.json"))

    # Self-checks of the independent pieces against each other.
    for i in range(20000):
        x = struct.unpack("<d", struct.pack("<Q", (prng(70, 2 * i) << 32) | prng(70, 2 * i + 1)))[0]
        for v in (x, x * 1e-300 if math.isfinite(x) else x, math.ldexp(abs(x) % 1 + 1, 127 + i % 3 - 1)
                  if math.isfinite(x) else 1.0):
            if math.isnan(v):
                continue
            try:
                b = _float32_native(v)
            except OverflowError:       # a Python whose native pack refuses overflow
                continue
            a = to_float32(v)
            assert a == b and math.copysign(1, a) == math.copysign(1, b), (v, a, b)
    assert rank_order_prefix(1000, 5, 1000) == by_rank(range(1000), 5)
    r = all_ranks(3000, 17)
    assert sorted(range(3000), key=r.__getitem__)[:40] == rank_order_prefix(3000, 17, 40)

    traps = find_16_digit_traps("fraction", 5, 4)
    percent_traps = find_16_digit_traps("percent", 1, 2)

    fixture_sections = []
    fixture_sections.append(("fmix32", fmix32_table()))
    fixture_sections.append(("seedKey", seedkey_table()))
    fixture_sections.append(("rank", rank_table()))
    fixture_sections.append(("shares", shares_table(traps + percent_traps)))
    fixture_sections.append(("digests", digests_table()))
    fixture_sections.append(("encodings", encodings_table()))
    fixture_sections.append(("malformedEncodings", malformed_table()))

    uniform_cases(traps + percent_traps)
    size_only_cases(traps + percent_traps)
    blocks_cases()
    nested_cases()
    stratified_cases()
    spatial_cases()
    refusal_cases()
    # Large summary cases.
    add_case("uniform large n=2000000 k=20000 seed=0 summary",
             {"method": "uniform", "n": 2000000, "seed": 0, "k": 20000, "summary": True})
    add_case("uniform large n=2000000 k=1000000 seed=0 summary",
             {"method": "uniform", "n": 2000000, "seed": 0, "k": 1000000, "summary": True})
    add_case("blocks large n=2000000 B=1000 k=300000 seed=0 summary",
             {"method": "blocks", "n": 2000000, "seed": 0, "k": 300000, "blockSize": 1000,
              "summary": True})
    add_case("uniform n=10 k=5 summary (fewer than 20: head and tail are all)",
             {"method": "uniform", "n": 10, "k": 5, "summary": True})
    add_case("uniform n=0 k=1 summary", {"method": "uniform", "n": 0, "k": 1, "summary": True})
    fixture_sections.append(("cases", CASES))

    # Write: one JSON value a line, deterministic.
    raw_texts = []

    def encode(obj):
        def walk(v):
            if isinstance(v, RawNumber):
                raw_texts.append(v.text)
                return "@@RAW%d@@" % (len(raw_texts) - 1)
            if isinstance(v, dict):
                return {kk: walk(vv) for kk, vv in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v
        s = json.dumps(walk(obj), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return re.sub(r'"@@RAW(\d+)@@"', lambda m: raw_texts[int(m.group(1))], s)

    parts = ['{\n"specVersion":%d,\n"generator":%s' % (SPEC_VERSION, json.dumps(GENERATOR))]
    for name, items in fixture_sections:
        body = ",\n".join(encode(x) for x in items)
        parts.append('"%s":[\n%s\n]' % (name, body))
    text = ",\n".join(parts) + "\n}\n"
    json.loads(text)                     # the file is valid JSON
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)

    kinds = {}
    for c in CASES:
        r = c["request"]
        kind = "refused" if "refused" in c else (
            "sizeOnly" if r.get("sizeOnly") else
            "%s%s" % (r.get("method"), " summary" if r.get("summary") else ""))
        kinds[kind] = kinds.get(kind, 0) + 1
    sys.stderr.write("wrote %s: %d bytes, %d cases %s, %.1f s\n"
                     % (out_path, len(text.encode("utf-8")), len(CASES), kinds, time.time() - t0))
    for t in traps + percent_traps:
        sys.stderr.write("trap: %s x=%s bits=%s n=%d k=%d (17-digit %s -> %d, exact binary -> %d)\n"
                         % (t["kind"], t["shortest"], bits_hex(t["x"]), t["n"], t["k"], t["text17"],
                            t["k17"], t["kExactBinary"]))


if __name__ == "__main__":
    main()
