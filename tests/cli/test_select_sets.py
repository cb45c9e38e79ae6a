#!/usr/bin/python3
"""`zarrmount select` over a set of cells ("set" in the request, issue 21)
against tests/cli/select_set_reference.py, a plain-Python reading of the
rules: random sets and requests of every method (k, shares and percentages
of |S|, blocks with blocks S holds few or many of, categories S lacks and
missing codes, spatial bounds S narrows, non-finite coordinates, a minimum
that does not fit), each compared on k, positions, order, digest and kept;
set = every cell printing exactly what no set prints; nesting over a set;
n = 2^32 - 1; and the refusals of a set that cannot be one.

Prints TAP. Needs ZM_BINARY (the zarrmount executable). ZM_SELECT_SETS_SEED
changes the random cases (default 21).
"""
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import select_set_reference as reference  # noqa: E402

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
SEED = int(os.environ.get("ZM_SELECT_SETS_SEED", "21"))

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return bool(ok)


def report():
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-8:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


def run(request):
    """(exit code, the result object or None, stdout)."""
    done = subprocess.run([BINARY, "select"], input=json.dumps(request).encode(),
                          capture_output=True, timeout=600)
    out = done.stdout.decode()
    try:
        body = json.loads(out)
    except ValueError:
        body = None
    return done.returncode, body, out


def shown(request, limit=240):
    text = json.dumps(request)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def differences(got, want):
    """What differs between two results, briefly."""
    lines = []
    for key in ("k", "digest", "kept", "positions", "order"):
        if got.get(key) != want.get(key):
            g, w = got.get(key), want.get(key)
            if isinstance(w, list) and isinstance(g, list):
                first = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b),
                             min(len(g), len(w)))
                lines.append(f"{key}: first difference at {first} "
                             f"(got {g[first:first + 5]}, want {w[first:first + 5]}; "
                             f"lengths {len(g)} and {len(w)})")
            else:
                lines.append(f"{key}: got {str(g)[:80]}, want {str(w)[:80]}")
    return "; ".join(lines)


def expect_reference(name, request):
    """The binary's answer equals the reference's, a result or a refusal."""
    try:
        want = reference.select(request)
    except reference.Refused as refused:
        code, body, out = run(request)
        return check(f"{name}: refused ({refused})",
                     code == 2 and isinstance(body, dict) and list(body) == ["error"],
                     f"exit {code}, stdout {out[:300]!r}; request {shown(request)}")
    code, body, out = run(request)
    ok = code == 0 and isinstance(body, dict) and all(body.get(key) == want[key] for key in want)
    detail = (differences(body, want) if isinstance(body, dict) else f"stdout {out[:300]!r}")
    return check(name, ok, f"exit {code}: {detail}; request {shown(request)}")


# ---- random requests ------------------------------------------------------

def random_set(rng, n):
    """A strictly ascending non-empty subset of range(n), of one of several
    shapes: sparse, dense, runs (whole and part blocks), every cell."""
    shape = rng.choice(["sparse", "dense", "runs", "every", "one"])
    if shape == "every":
        return list(range(n))
    if shape == "one":
        return [rng.randrange(n)]
    if shape == "runs":
        cells, p = [], rng.randrange(max(1, n // 10))
        while p < n:
            length = rng.randint(1, 40)
            cells.extend(range(p, min(n, p + length)))
            p += length + rng.randint(1, 80)
        return cells or [rng.randrange(n)]
    density = rng.uniform(0.001, 0.05) if shape == "sparse" else rng.uniform(0.3, 0.95)
    cells = [p for p in range(n) if rng.random() < density]
    return cells or [rng.randrange(n)]


def random_size(rng, count, request):
    """Exactly one of k, share (text or number), percent, over |S|."""
    choice = rng.random()
    if choice < 0.6:
        request["k"] = rng.randint(1, count + count // 5 + 2)
    elif choice < 0.75:
        request["share"] = f"0.{rng.randint(1, 999):03d}"
    elif choice < 0.85:
        request["share"] = rng.choice([0.1, 0.25, 1 / 3, 0.7, 1.0])
    else:
        request["percent"] = f"{rng.randint(1, 100)}.{rng.randint(0, 9)}"


def random_coordinate(rng):
    r = rng.random()
    if r < 0.03:
        return float("nan")
    if r < 0.04:
        return rng.choice([float("inf"), float("-inf")])
    if r < 0.06:
        return rng.choice([3.4028235e38, -1e39, 1e-45])
    return rng.uniform(-100, 100) if rng.random() < 0.8 else float(rng.randint(-5, 5))


def random_request(rng, method):
    n = rng.choice([1, 2, 3, 10, 50, 200, 1000, 3000])
    cells = random_set(rng, n)
    request = {"method": method, "n": n, "seed": rng.randrange(1 << 32), "set": cells}
    random_size(rng, len(cells), request)
    if method == "blocks":
        request["blockSize"] = rng.choice([1, 2, 3, 7, 16, 64, 500, 5000, rng.randint(1, 100)])
    elif method == "stratified":
        categories = rng.randint(1, 12)
        if rng.random() < 0.25:
            names = ["a", "B", "é", "ß", "Z", "a b", "日本", "/", "", "x", "y", "z"]
            request["values"] = [None if rng.random() < 0.1 else rng.choice(names[:categories])
                                 for _ in range(n)]
        else:
            # Some categories only outside S, some codes missing (null, negative).
            request["codes"] = [None if rng.random() < 0.08 else
                                -1 if rng.random() < 0.03 else rng.randrange(categories)
                                for _ in range(n)]
            inside = set(cells)
            for p in range(n):
                if p not in inside and rng.random() < 0.5:
                    request["codes"][p] = categories + rng.randrange(3)
        request["allocation"] = rng.choice(["proportional", "balanced"])
        if rng.random() < 0.3:
            request["minimum"] = rng.randint(0, 6)
    elif method == "spatial":
        dims = rng.randint(1, 3)
        request["coords"] = [[random_coordinate(rng) for _ in range(dims)] for _ in range(n)]
        # Cells outside S far away: S's own bounds must place its cells.
        inside = set(cells)
        for p in range(n):
            if p not in inside and rng.random() < 0.3:
                request["coords"][p] = [rng.choice([1e6, -1e6]) for _ in range(dims)]
        request["gridSize"] = rng.choice([1, 2, 3, 5, 8, 32, 100])
    return request


def random_cases(rng):
    for method in ["uniform", "blocks", "stratified", "spatial"]:
        for i in range(45):
            request = random_request(rng, method)
            expect_reference(f"{method} #{i} (n = {request['n']}, |S| = {len(request['set'])})",
                             request)


def every_cell_is_no_set(rng):
    """set = every position prints byte for byte what no set prints."""
    for method in ["uniform", "blocks", "stratified", "spatial"]:
        for i in range(6):
            request = random_request(rng, method)
            request["set"] = list(range(request["n"]))
            plain = dict(request)
            del plain["set"]
            a, b = run(request), run(plain)
            check(f"{method}: set = every cell is no set #{i} (n = {request['n']})",
                  a[0] == b[0] and a[2] == b[2],
                  f"exit {a[0]} and {b[0]}: {a[2][:200]!r} against {b[2][:200]!r}")


def nested(rng):
    """uniform and blocks over a set: kept(k) within kept(k'), and the order
    at k the first k of the order at k'."""
    for method in ["uniform", "blocks"]:
        n = 2000
        cells = random_set(rng, n)
        while len(cells) < 20:
            cells = random_set(rng, n)
        request = {"method": method, "n": n, "seed": rng.randrange(1 << 32), "set": cells,
                   "blockSize": 13}
        if method == "uniform":
            del request["blockSize"]
        sizes = sorted(rng.sample(range(1, len(cells) + 1), 5))
        answers = []
        for k in sizes:
            code, body, out = run(dict(request, k=k))
            answers.append(body if code == 0 else None)
        ok = all(answers) and all(
            set(small["positions"]) <= set(big["positions"])
            and big["order"][:len(small["order"])] == small["order"]
            for small, big in zip(answers, answers[1:]))
        check(f"{method}: nested over a set (|S| = {len(cells)}, k = {sizes})", ok,
              f"request {shown(request)}")


def largest_n(rng):
    """n = 2^32 - 1, a few cells anywhere in it (no per-cell array)."""
    n = (1 << 32) - 1
    for method in ["uniform", "blocks"]:
        for i in range(3):
            cells = sorted(rng.sample(range(n), rng.randint(1, 300)))
            if i == 0:
                cells[-1] = n - 1  # the last cell of all
            request = {"method": method, "n": n, "seed": rng.randrange(1 << 32), "set": cells,
                       "k": rng.randint(1, len(cells))}
            if method == "blocks":
                request["blockSize"] = rng.choice([1 << 20, 1 << 31, (1 << 62)])
            expect_reference(f"{method}: n = 2^32 - 1, |S| = {len(cells)}", request)


def refusals():
    cases = [
        ("an empty set", {"method": "uniform", "n": 10, "k": 1, "set": []},
         "the set holds no cell"),
        ("a repeated cell", {"method": "uniform", "n": 10, "k": 1, "set": [2, 2]},
         "not strictly ascending: set[1] = 2 after 2"),
        ("a step down", {"method": "blocks", "n": 10, "k": 1, "blockSize": 2, "set": [5, 1]},
         "not strictly ascending: set[1] = 1 after 5"),
        ("a cell past n", {"method": "uniform", "n": 10, "k": 1, "set": [0, 10]},
         "set[1] = 10 is past the last cell (n = 10)"),
        ("more cells than n", {"method": "uniform", "n": 2, "k": 1, "set": [0, 1, 2]},
         "the set holds 3 cells, more than the 2 of the dataset"),
        ("a negative position", {"method": "uniform", "n": 10, "k": 1, "set": [-1]},
         "set[0] is not a cell position"),
        ("a fractional position", {"method": "uniform", "n": 10, "k": 1, "set": [1, 2.5]},
         "set[1] is not a cell position"),
        ("a position past uint32", {"method": "uniform", "n": 10, "k": 1, "set": [4294967296]},
         "set[0] is not a cell position"),
        ("not an array", {"method": "uniform", "n": 10, "k": 1, "set": {"0": 1}},
         "\"set\" must be an array"),
        ("a bad set with sizeOnly", {"method": "uniform", "n": 10, "k": 1, "sizeOnly": True,
                                     "set": [3, 3]}, "not strictly ascending"),
        ("stratified over a bad set", {"method": "stratified", "codes": [0, 1, 0], "k": 1,
                                       "set": [0, 3]}, "past the last cell (n = 3)"),
    ]
    for name, request, needle in cases:
        code, body, out = run(request)
        check(f"refused: {name}",
              code == 2 and isinstance(body, dict) and list(body) == ["error"]
              and needle in body["error"] and out.count("\n") == 1,
              f"exit {code}, stdout {out[:300]!r}")
    # sizeOnly over a set: k = min(k, |S|), a share of |S|.
    for request, want in [
        ({"method": "uniform", "n": 100, "k": 50, "set": [1, 2, 3], "sizeOnly": True}, 3),
        ({"method": "uniform", "n": 100, "share": "0.5", "set": [1, 2, 3, 4, 5],
          "sizeOnly": True}, 3),
        ({"method": "blocks", "n": 100, "percent": "40", "set": list(range(10, 20)),
          "sizeOnly": True}, 4),
    ]:
        code, body, out = run(request)
        check(f"sizeOnly over a set: {shown(request, 90)}", code == 0 and body == {"k": want},
              f"exit {code}, stdout {out[:200]!r}")


def main():
    rng = random.Random(SEED)
    print(f"# random cases from seed {SEED} (ZM_SELECT_SETS_SEED)")
    refusals()
    random_cases(rng)
    every_cell_is_no_set(rng)
    nested(rng)
    largest_n(rng)
    return report()


if __name__ == "__main__":
    sys.exit(main())
