#!/usr/bin/python3
"""`zarrmount inspect` as a user runs it: every source file (fixtures and
shared/data) in text and JSON, the default block size B0 of a few files
computed by hand from the spec's rules, and refusals of bad files.

Prints TAP. Needs ZM_BINARY and ZM_SOURCE_ROOT; ZM_SHARED_DATA where ../shared/data is.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SHARED = os.environ.get("ZM_SHARED_DATA", "../shared/data")
COPIES = os.path.join(ROOT, "fixtures", "shared")
results = []


def check(name, ok, detail=""):
    results.append((ok, name, detail))


def inspect(path, *flags):
    done = subprocess.run([BINARY, "inspect", path, *flags], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def sources():
    files = []
    for pattern in ("fixtures/sources/h5ad/*", "fixtures/sources/filters/*", "fixtures/sources/layouts/*",
                    "fixtures/sources/legacy/*", "fixtures/sources/loom/*", "fixtures/sources/10x/*"):
        files += sorted(glob.glob(os.path.join(ROOT, pattern)))
    # The copies of ../shared/data's files (fixtures/shared/README.md), then its
    # other files where it is beside the clone.
    for pattern in ("h5ad/*.h5ad", "loom/*.loom", "10x/*.h5", "synthetic/*.h5ad", "synthetic/*.h5"):
        files += sorted(glob.glob(os.path.join(COPIES, pattern)))
    if not os.path.isdir(SHARED):
        check(f"inspect the files of {SHARED} not copied to fixtures/shared # SKIP {SHARED} is not here "
              "(../shared/data is not beside this clone)", True)
        return files
    rest = []
    for pattern in ("h5ad/*.h5ad", "loom/*.loom", "10x/*.h5", "synthetic/*.h5ad", "synthetic/*.h5"):
        rest += [f for f in sorted(glob.glob(os.path.join(SHARED, pattern)))
                 if not os.path.exists(os.path.join(COPIES, os.path.relpath(f, SHARED)))]
    if not rest:
        check(f"inspect the files of {SHARED} not copied to fixtures/shared # SKIP every one is in "
              "fixtures/shared, inspected there", True)
    return files + rest


def walk(element):
    yield element
    for key in ("children", "columns", "fields"):
        for child in element.get(key, []):
            yield from walk(child)
    for key in ("index", "categories"):
        if key in element:
            yield from walk(element[key])


def every_file():
    for path in sources():
        name = os.path.relpath(path, ROOT if path.startswith(ROOT) else SHARED)
        code, out, err = inspect(path)
        check(f"text: {name}", code == 0 and "default block size B0 = " in out and out.startswith(path),
              f"exit {code}: {err[:300]}")
        code, out, err = inspect(path, "--json")
        try:
            doc = json.loads(out)
        except ValueError:
            doc = None
        ok = (code == 0 and doc is not None and doc["source"] == path
              and doc["format"] in ("h5ad", "loom", "10x-v3", "10x-v2")
              and doc["defaultBlockSize"]["blockSize"] >= 1 and doc["defaultBlockSize"]["rule"])
        if ok:
            arrays = [e[k] for e in walk(doc["elements"]) for k in ("values", "data", "indices", "indptr", "codes", "mask") if k in e]
            ok = all(a["dataPath"] in ("direct", "hdf5", "memory") for a in arrays) and \
                all(a["dataPath"] == "direct" or a.get("dataPathReason") for a in arrays)
        check(f"json: {name}", ok, f"exit {code}: {err[:300]}")


def block_sizes():
    # Computed by hand from the spec's rules (docs/sources.md):
    cases = [
        # CSR X, index chunks of 2005 (gzip), 4010 values over 50 cells: round(4 * 2005 / 80.2) = 100.
        (f"{COPIES}/h5ad/dentategyrus-50.anndata-0.7.h5ad", 100, "csr-index-chunks", "X/indices"),
        # X is scaled, so raw/X: index chunks of 2725 (gzip), 174400 values over 700 cells:
        # round(4 * 2725 * 700 / 174400) = round(43.75) = 44.
        (f"{COPIES}/h5ad/pbmc68k_reduced.h5ad", 44, "csr-index-chunks", "raw/X/indices"),
        # Dense X stored contiguous, 4 float32 genes a cell: 65536 / 16 = 4096.
        (f"{COPIES}/h5ad/t-cells-8x4.h5ad", 4096, "bytes-64KiB", "X"),
        # Dense X chunked 7 cells (lzf): 4 * 7 = 28.
        (f"{COPIES}/h5ad/pbmc10k-protein-200cells.anndata-0.7-dense-lzf.h5ad", 28, "dense-chunk-rows", "X"),
        # No X and no obsm: 1.
        (f"{COPIES}/synthetic/anndata-0.11.4-archive-noX.h5ad", 1, "one", ""),
    ]
    for path, want, rule, element in cases:
        code, out, _ = inspect(path, "--json")
        got = json.loads(out)["defaultBlockSize"] if code == 0 else {}
        check(f"B0 of {os.path.basename(path)} is {want} ({rule})",
              got.get("blockSize") == want and got.get("rule") == rule and got.get("element") == element,
              f"got {got}")


def refusals():
    for path in sorted(glob.glob(os.path.join(ROOT, "fixtures/sources/bad/*"))):
        code, out, err = inspect(path)
        name = os.path.basename(path)
        # Broken structure is refused at open; damage inside values (and
        # sparse pointers, checked by the views that use them) is found when
        # they are read, which inspect does not do.
        if code == 0:
            check(f"opens (damage is inside values): {name}",
                  name in ("categorical-code-out-of-range.h5ad", "corrupt-deflate-chunk.h5ad",
                           "corrupt-string-heap-id.h5ad",
                           "csr-indices-out-of-range.h5ad", "fletcher32-mismatch.h5ad",
                           "csr-indptr-end-mismatch.h5ad", "csr-indptr-not-monotone.h5ad"))
        else:
            check(f"refused in one line: {name}",
                  code == 2 and err.count("\n") == 1 and err.startswith("zarrmount inspect: ") and out == "",
                  f"exit {code}, stderr {err!r}")
    code, _, err = inspect("/nonexistent.h5ad")
    check("a missing file is refused", code == 2 and "No such file" in err, err)
    done = subprocess.run([BINARY, "inspect"], capture_output=True, text=True)
    check("no file is a usage error", done.returncode == 2 and "usage" in done.stderr)
    # A FIFO (nobody writing) named as the source: refused at once, not waited on. A directory
    # is a Zarr store: one that holds a FIFO is refused at once too (a store is read only from
    # its own files), and an empty one is no Zarr store.
    scratch = tempfile.mkdtemp(prefix="zm-inspect-")
    empty = os.path.join(scratch, "empty.zarr")
    try:
        fifo = os.path.join(scratch, "pipe.h5ad")
        os.mkfifo(fifo)
        os.mkdir(empty)
        for label, path, words in (("a FIFO", fifo, "neither a regular file nor a directory"),
                                   ("a directory holding a FIFO", scratch, "pipe.h5ad is a FIFO"),
                                   ("an empty directory", empty, "not a Zarr store")):
            try:
                code, _, err = inspect(path)
                check(f"{label} is refused in one line: {words}",
                      code == 2 and words in err and err.count("\n") == 1, err)
            except subprocess.TimeoutExpired:
                check(f"{label} is refused in one line: {words}", False, "it waited")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    every_file()
    block_sizes()
    refusals()
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            print(f"# {detail}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
