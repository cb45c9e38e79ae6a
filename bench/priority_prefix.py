#!/usr/bin/python3
"""A priority-ordered file's prefix against the same view of the unordered file (issue 20), side
by side in one run, on a generated 200,000-cell file (tests/integration/make_priority_sources.py:
200 genes, 2,000,000 stored values, CSR X gzip-4 in chunks of 16,384 entries):

  original.h5ad         the cells in their own order;
  priority-seed7.h5ad   the same cells in the priority order of seed 7, with Cellucid's record,
                        so uniform/seed7/k=K is its rows [0, K).

For K = 1% and 10% of the cells, the view uniform/seed7/k=K of each file, each on a fresh mount
(cache_dir=none, ahead_idle=0: no disk cache, no work ahead):

  - the source bytes reading the view's X takes (its counters in .zarrmount/stats.json: making
    its files and building it), against the floor: the compressed bytes of the source chunks
    the prefix's entries and rows lie in (h5py's chunk index), plus obsp's prefix (building a
    view reads its graph's pointers and indices too; the counters do not split them);
  - the wall time of reading every file of the view's X (best of 3 mounts);
  - the wall time of anndata.read_zarr of the whole view, timed inside its own process around
    the read (best of 3 mounts).

Prints each pair with its ratio, and checks the target of the issue: the prefix reads at most
1.2 times its floor (and the unordered view nearly all of X, which is what the prefix saves).

Usage: bench/priority_prefix.py [BUILD_DIR] [--data DIR] [--cells N]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from benchlib import mounted, python, read_tree  # noqa: E402
import make_priority_sources as gen  # noqa: E402

CELLS = 200_000
X_CHUNK = 16_384
INDPTR_CHUNK = 16_384
SEED = 7
REPEATS = 3
BOUND = 1.2


def sources(directory, cells):
    """The two files, written once into directory (again if the manifest says other sizes)."""
    manifest_path = os.path.join(directory, "manifest.json")
    want = {"cells": cells, "xChunk": X_CHUNK, "indptrChunk": INDPTR_CHUNK}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if all(manifest.get(k) == v for k, v in want.items()) and \
                all(os.path.exists(manifest["files"].get(n, {}).get("path", "")) for n in ("original", f"priority-seed{SEED}")):
            return manifest
    print(f"writing the sources into {directory} (once)", flush=True)
    return gen.generate(directory, cells, gen.N_GENES, only={"original", f"priority-seed{SEED}"},
                        x_chunk=X_CHUNK, indptr_chunk=INDPTR_CHUNK)


def stats(point):
    with open(os.path.join(point, ".zarrmount/stats.json"), "rb") as f:
        return json.loads(f.read())


def source_bytes(snapshot, key):
    v = snapshot["views"].get(key, {})
    return v.get("source", {}).get("bytesRead", 0) + v.get("build", {}).get("source", {}).get("bytesRead", 0)


def measure(binary, source, key):
    """(source bytes X took, best seconds to read X, best seconds of read_zarr, stored values)."""
    read_bytes, x_times, zarr_times, nnz = None, [], [], None
    for _ in range(REPEATS):
        with mounted(binary, source, "ahead_idle=0", cache="none") as (point, _):
            os.sync()
            before = source_bytes(stats(point), key)
            t = time.perf_counter()
            read_tree(os.path.join(point, key, "X"))
            x_times.append(time.perf_counter() - t)
            used = source_bytes(stats(point), key) - before
            read_bytes = used if read_bytes is None else read_bytes
        with mounted(binary, source, "ahead_idle=0", cache="none") as (point, _):
            _, out = python("import sys,time,warnings;warnings.simplefilter('ignore');import anndata;"
                            "t=time.perf_counter();a=anndata.read_zarr(sys.argv[1]);"
                            "print(time.perf_counter()-t, a.X.nnz)", os.path.join(point, key))
            seconds, values = out.split()
            zarr_times.append(float(seconds))
            if nnz is not None and int(values) != nnz:
                raise RuntimeError(f"{key}: read_zarr read {values} values, then {nnz}")
            nnz = int(values)
    return read_bytes, min(x_times), min(zarr_times), nnz


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build", nargs="?", default="build/release")
    p.add_argument("--data", default=os.environ.get("ZM_BENCH_DATA", "/var/tmp/zarrmount-bench"))
    p.add_argument("--cells", type=int, default=CELLS)
    a = p.parse_args()
    binary = os.path.join(a.build, "zarrmount")
    manifest = sources(os.path.join(a.data, f"priority-{a.cells}"), a.cells)
    original = manifest["files"]["original"]["path"]
    ordered = manifest["files"][f"priority-seed{SEED}"]["path"]
    for path in (original, ordered):  # warm the sources, as every run below reads them warm
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    info = json.loads(subprocess.run([binary, "inspect", ordered, "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    print(f"priority record of {os.path.basename(ordered)}: {info.get('priority')}")
    n = manifest["cells"]
    results = []
    for k in (n // 100, n // 10):
        key = f"uniform/seed{SEED}/k={k}"
        floor, whole, entries = gen.csr_prefix_floor(ordered, k)
        graph, graph_whole = gen.graph_bytes(ordered, k)
        ours = measure(binary, ordered, key)
        theirs = measure(binary, original, key)
        # The same cells: the same stored values (a mount reading the file as unordered keeps others).
        results.append((f"{key}: both views hold the same {theirs[3]} stored values (the prefix's {ours[3]})",
                        ours[3] == theirs[3]))
        print(f"== {key} ({k / n:.0%} of {n} cells, {entries} of X's entries)")
        print(f"   {'':34} {'prefix (priority file)':>24} {'unordered file':>16} {'ratio':>7}")
        print(f"   {'source bytes, X and build (MiB)':34} {ours[0] / 2**20:24.2f} {theirs[0] / 2**20:16.2f} "
              f"{theirs[0] / max(1, ours[0]):7.1f}x")
        print(f"   {'reading X (s, best of 3)':34} {ours[1]:24.4f} {theirs[1]:16.4f} {theirs[1] / ours[1]:7.1f}x")
        print(f"   {'anndata.read_zarr (s, best of 3)':34} {ours[2]:24.4f} {theirs[2]:16.4f} "
              f"{theirs[2] / ours[2]:7.1f}x")
        print(f"   floor: the prefix's chunks {floor / 2**20:.2f} MiB + obsp's prefix {graph / 2**20:.2f} MiB; "
              f"all of X {whole / 2**20:.2f} MiB (+ obsp's pointers and indices {graph_whole / 2**20:.2f} MiB)")
        bound = BOUND * (floor + graph)
        results.append((f"{key}: the prefix reads {ours[0] / 2**20:.2f} MiB, at most {BOUND} x its floor "
                        f"({bound / 2**20:.2f} MiB)", ours[0] <= bound))
        results.append((f"{key}: the unordered view reads nearly all of X (at least "
                        f"{(theirs[0] - graph_whole) / 2**20:.2f} of {whole / 2**20:.2f} MiB)",
                        theirs[0] - graph_whole >= 0.9 * whole))
    for text, ok in results:
        print(f"{'PASS' if ok else 'MISS'}  {text}")
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
