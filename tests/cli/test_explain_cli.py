#!/usr/bin/python3
"""`zarrmount explain SOURCE PATH`: every refusal of the spec's edge cases
that a path can express (and the other reasons a path does not exist)
exits 2 with its reason; views are explained as `zarrmount select` computes
them (k, digest, order, strata), links with the size rule; directories say
what they hold. Reads no chunk. (The MNT/PATH form is tested with the
mount in tests/integration/test_mount.py.)

Prints TAP. Needs ZM_BINARY and ZM_SOURCE_ROOT.
"""
import json
import os
import subprocess
import sys

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SOURCE = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
results = []


def check(name, ok, detail=""):
    results.append((ok, name, detail))


def explain(path, *flags):
    done = subprocess.run([BINARY, "explain", SOURCE, path, *flags], capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stdout, done.stderr


def select(request):
    done = subprocess.run([BINARY, "select", "--source", SOURCE], input=json.dumps(request),
                          capture_output=True, text=True, timeout=300)
    return done.returncode, json.loads(done.stdout)


# (path, a word the reason must hold): the spec's edge cases a path can
# express, then the other ways a path names nothing.
REFUSED = [
    ("uniform/seed0/k=0", "k = 0"),
    ("blocks/seed0/k=0", "k = 0"),
    ("uniform/seed4294967296/k=1", "4294967295"),
    ("uniform/seed-1/k=1", "seed"),
    ("stratified/cell_type/proportional/min=30/seed0/k=10", "minimum"),
    ("stratified/cell_type/balanced/min=11/seed0/k=40", "minimum"),
    ("spatial/X_pca/G=100000000/cols=0,1/seed0/k=1", "2^53"),
    ("spatial/X_pca/G=94906266/cols=0,1/seed0/k=1", "2^53"),
    ("spatial/X_pca/G=4/cols=-1/seed0/k=1", "columns"),
    ("spatial/X_pca/G=4/cols=1.5/seed0/k=1", "columns"),
    ("spatial/X_pca/G=4/cols=10/seed0/k=1", "10 columns"),
    ("spatial/X_pca/G=4/cols=0,1,2,3/seed0/k=1", "one to three"),
    ("spatial/X_pca/G=0/cols=0/seed0/k=1", "G"),
    ("stratified/no-such-column/seed0/k=1", "no column"),
    ("spatial/no-such-embedding/seed0/k=1", "no entry"),
    ("spatial/X_sparse/seed0/k=1", "sparse"),
    ("spatial/df/seed0/k=1", "does not hold numbers"),
    ("stratified/float32/seed0/k=1", "holds numbers"),
    ("stratified/nullable_int64/seed0/k=1", "holds numbers"),
    ("stratified/cell_type/even/min=0/seed0/k=1", "proportional, balanced"),
    ("uniform/seed0/share=0", "share"),
    ("uniform/seed0/share=1.5", "share"),
    ("uniform/seed0/pct=0", "percent"),
    ("uniform/seed0/pct=100.5", "percent"),
    ("uniform/seed0/share=0.5x", "decimal"),
    ("uniform/seed0/k=01", "canonical"),
    ("blocks/B=0/seed0/k=1", "block size"),
    ("nothing", "no such view"),
]


def main():
    for path, word in REFUSED:
        code, out, err = explain(path)
        check(f"{path}: exit 2 with the reason", code == 2 and "does not exist: " in out
              and word.lower() in out.lower(), out + err)
        code, out, _ = explain(path, "--json")
        try:
            told = json.loads(out)
            ok = code == 2 and told["kind"] == "refused" and told["reason"]
        except (ValueError, KeyError):
            ok = False
        check(f"{path}: --json says refused", ok, out)

    # Views: what select computes, strata adding up.
    views = [
        ("uniform/seed7/k=13", {"method": "uniform", "seed": 7, "k": 13}),
        ("uniform/seed0/k=1000", {"method": "uniform", "seed": 0, "k": 1000}),
        ("blocks/B=4/seed2/k=9", {"method": "blocks", "seed": 2, "k": 9, "blockSize": 4}),
        ("stratified/cell_type/seed1/k=20", {"method": "stratified", "field": "cell_type", "seed": 1, "k": 20}),
        ("stratified/quality/balanced/min=2/seed3/k=12",
         {"method": "stratified", "field": "quality", "seed": 3, "k": 12, "allocation": "balanced", "minimum": 2}),
        ("stratified/bool/seed0/k=7", {"method": "stratified", "field": "bool", "seed": 0, "k": 7}),
        ("stratified/label_utf8/seed0/k=7", {"method": "stratified", "field": "label_utf8", "seed": 0, "k": 7}),
        ("spatial/X_umap/seed0/k=11", {"method": "spatial", "embedding": "X_umap", "seed": 0, "k": 11}),
        ("spatial/X_pca/G=3/cols=4,2,0/seed9/k=8",
         {"method": "spatial", "embedding": "X_pca", "seed": 9, "k": 8, "gridSize": 3, "columns": [4, 2, 0]}),
    ]
    for path, request in views:
        code, out, err = explain(path, "--json")
        scode, result = select(dict(request, summary=False))
        try:
            told = json.loads(out)
            ok = (code == 0 and scode == 0 and told["kind"] == "view" and told["k"] == result["k"]
                  and told["digest"] == result["digest"] and told["firstCells"] == result["order"][:10]
                  and told["seed"] == request["seed"])
            if "strata" in told:
                ok = ok and sum(s["cells"] for s in told["strata"]) == told["nObs"] \
                    and sum(s["kept"] for s in told["strata"]) == told["k"] \
                    and all(s["cells"] > 0 for s in told["strata"])
            for key in ("field", "allocation", "minimum", "embedding", "columns", "gridSize"):
                if key in request:
                    ok = ok and told[key] == request[key]
        except (ValueError, KeyError) as error:
            ok, err = False, f"{error}: {err}"
        check(f"{path}: explained as select computes it", ok, out + err)
        code, out, _ = explain(path)
        check(f"{path}: text names the digest", code == 0 and told.get("digest", "?") in out, out)

    # A category with no cell takes no part.
    code, out, _ = explain("stratified/cat_none_used/seed0/k=5", "--json")
    told = json.loads(out) if code == 0 else {}
    check("an empty category takes no part", code == 0 and all(s["cells"] > 0 for s in told.get("strata", [])), out)
    # k >= n keeps every cell: not a refusal.
    code, out, _ = explain("uniform/seed0/k=100000", "--json")
    check("k past n keeps every cell", code == 0 and json.loads(out)["k"] == 60, out)
    # A link: the size rule and the view it names.
    code, out, _ = explain("stratified/cell_type/seed1/pct=25", "--json")
    told = json.loads(out) if code == 0 else {}
    check("pct= is a link to k=15 with the size rule",
          code == 0 and told.get("kind") == "link" and told.get("target") == "k=15" and "sizeRule" in told
          and told.get("k") == 15, out)
    # A path through a link is the k= view it names.
    code, out, _ = explain("stratified/cell_type/seed1/pct=25/X/data", "--json")
    told = json.loads(out) if code == 0 else {}
    check("a path through a link is inside the view it names",
          code == 0 and told.get("view") == "stratified/cell_type/proportional/min=0/seed1/k=15"
          and told.get("inside") == "X/data", out)
    # Inside a view, and directories.
    code, out, _ = explain("blocks/seed0/k=10/X/data", "--json")
    told = json.loads(out) if code == 0 else {}
    check("a path inside a view names the view and the default block size's rule",
          code == 0 and told.get("inside") == "X/data" and "rule" in told.get("blockSizeFrom", {}), out)
    for path in ("", "stratified", "spatial/X_pca", "spatial/X_pca/G=4", "stratified/cell_type/balanced/min=1",
                 "uniform/seed0"):
        code, out, _ = explain(path, "--json")
        check(f"'{path}' is a directory that says what it holds",
              code == 0 and json.loads(out)["kind"] == "directory" and json.loads(out)["holds"], out)
    for path in (".zarrmount/info.json", ".zarrmount/stats.json"):
        code, out, _ = explain(path, "--json")
        told = json.loads(out) if code == 0 else {}
        check(f"'{path}' is a file that says what it holds",
              told.get("kind") == "file" and told.get("holds") and "method" not in told, out)
        code, out, _ = explain(path)
        check(f"'{path}' in text says what it holds", code == 0 and "holds" in out
              and "(null)" not in out, out)
    code, _, err = explain("uniform", "--bogus")
    check("an unknown flag is refused", code == 2 and "unexpected argument" in err, err)

    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-6:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
