#!/usr/bin/python3
"""The source reader against h5py and anndata, in one run, on the synthetic
1,000,000-cell x 2,000-gene CSR .h5ad (about 1e8 stored values), uncompressed
and gzip-4 chunked (bench/make_synthetic_h5ad.py writes them, once, into
the bench data folder).

Measured, warm (each file read once before timing; the files fit in memory):
  - a full read of X (data, indices, indptr): zarrmount vs h5py reading the
    three datasets whole;
  - gathers of 1% and 10% of the rows, uniform at random and in blocks of the
    file's B0 (the blocks method): zarrmount vs anndata's backed mode
    (read_h5ad(backed="r").X[rows]) for the same rows;
  - the gzip full read with one decode thread and with two.
Prints every time and the ratio peer / zarrmount (higher is better for us),
and checks the targets of the source issue.

Usage: bench/source_vs_h5py.py [BUILD_DIR] [--data DIR] [--timeout SECONDS]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def ours(build, path, mode, fraction=None, threads=2, rows_out=None):
    args = [os.path.join(build, "bench", "bench_source"), path, mode]
    if mode != "full":
        args.append(str(fraction))
    args.append(str(threads))
    if rows_out:
        args.append(rows_out)
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


PEER = r"""
import sys, time, json, warnings
import numpy as np, h5py
warnings.simplefilter("ignore")
path, mode = sys.argv[1], sys.argv[2]
if mode == "full":
    t = time.perf_counter()
    with h5py.File(path, "r") as f:
        data = f["X/data"][:]; indices = f["X/indices"][:]; indptr = f["X/indptr"][:]
    print(json.dumps({"seconds": time.perf_counter() - t, "entries": int(data.size),
                      "dataSum": float(data.astype(np.float64).sum())}))
else:
    import anndata
    rows = np.fromfile(sys.argv[3], dtype="<i8")
    adata = anndata.read_h5ad(path, backed="r")
    t = time.perf_counter()
    sub = adata.X[rows]
    print(json.dumps({"seconds": time.perf_counter() - t, "entries": int(sub.nnz),
                      "dataSum": float(sub.data.astype(np.float64).sum())}))
"""


def peer(path, mode, rows_file=None, timeout=600):
    args = ["/usr/bin/python3", "-c", PEER, path, mode] + ([rows_file] if rows_file else [])
    try:
        out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=timeout).stdout
        return json.loads(out)
    except subprocess.TimeoutExpired:
        return {"seconds": None}


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build", nargs="?", default="build/release")
    p.add_argument("--data", default=os.environ.get("ZM_BENCH_DATA", "/var/tmp/zarrmount-bench"))
    p.add_argument("--timeout", type=float, default=600)
    a = p.parse_args()
    files = {name: os.path.join(a.data, f"synthetic-1M-{name}.h5ad") for name in ("uncompressed", "gzip4")}
    if not all(os.path.exists(f) for f in files.values()):
        os.makedirs(a.data, exist_ok=True)
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_synthetic_h5ad.py"), a.data], check=True)
    for f in files.values():
        warm(f)

    rows_file = os.path.join(a.data, "rows.i8")
    results = []
    print(f"{'file':<13} {'read':<13} {'rows':>8} {'zarrmount':>10} {'peer':>10} {'ratio':>7}  peer / notes")
    for name, path in files.items():
        o = ours(a.build, path, "full")
        h = peer(path, "full")
        if h["seconds"] is not None and abs(h["dataSum"] - o["dataSum"]) > 1e-6 * max(1, abs(o["dataSum"])):
            print(f"MISMATCH {name} full read: {h['dataSum']} vs {o['dataSum']}")
        results.append((name, "full", o, h, "h5py"))
        for mode in ("random", "blocks"):
            for fraction in (0.01, 0.1):
                o = ours(a.build, path, mode, fraction, rows_out=rows_file)
                h = peer(path, mode, rows_file, a.timeout)
                if h["seconds"] is not None and h["entries"] != o["entries"]:
                    print(f"MISMATCH {name} {mode} {fraction}: {h['entries']} vs {o['entries']} entries")
                results.append((name, f"{mode} {fraction:.0%}", o, h, "anndata backed"))
    for name, label, o, h, who in results:
        ratio = f"{h['seconds'] / o['seconds']:6.1f}x" if h["seconds"] else "   n/a"
        hs = f"{h['seconds']:9.3f}s" if h["seconds"] else f">{a.timeout:.0f}s".rjust(10)
        extra = f", {o['chunksDecoded']} chunks decoded" if o["chunksDecoded"] else ""
        print(f"{name:<13} {label:<13} {o['rows']:>8} {o['seconds']:9.3f}s {hs} {ratio}  {who}; "
              f"{o['bytesRead'] / 2**20:.0f} MiB read{extra}, B0 = {o['blockSize']}")

    one = ours(a.build, files["gzip4"], "full", threads=1)
    two = ours(a.build, files["gzip4"], "full", threads=2)
    print(f"gzip4 full read: 1 decode thread {one['seconds']:.3f}s, 2 threads {two['seconds']:.3f}s: "
          f"{one['seconds'] / two['seconds']:.2f}x")

    # The targets.
    def ratio(name, label):
        for n, l, o, h, _ in results:
            if n == name and l == label and h["seconds"]:
                return h["seconds"] / o["seconds"]
        return float("inf")
    checks = [
        ("full read at least as fast as h5py (uncompressed)", ratio("uncompressed", "full") >= 1.0),
        ("full read at least as fast as h5py (gzip4)", ratio("gzip4", "full") >= 1.0),
        ("uncompressed random 1% at least 5x backed mode", ratio("uncompressed", "random 1%") >= 5),
        ("gzip4 blocks 1% at least 10x backed mode", ratio("gzip4", "blocks 1%") >= 10),
        ("two decode threads at least 1.6x one", one["seconds"] / two["seconds"] >= 1.6),
    ]
    for text, ok in checks:
        print(f"{'PASS' if ok else 'MISS'}  {text}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
