#!/usr/bin/python3
"""A Zarr v3 sharded store as the source against the same AnnData as .h5ad (issue 23): a full
walk and a uniform 1% view of each, through fresh mounts, side by side; the ratio printed, the
target within 1.2x of the .h5ad's time.

    /usr/bin/python3 bench/zarr_vs_h5ad.py [BUILD] [--data DIR] [--cells N]

The .h5ad is make_synthetic_h5ad.py's gzip4 file (1M cells by default, made if missing); the
store is that file written again by h5ad_to_zarr_v3.py with zarr-python 3 in a Debian 13 chroot
(scripts/debian-chroot), as anndata 0.13 lays it out (sharded, zstd). Both live under the
project's build/bench-zarr/ (the chroot sees the project's folder only). Each figure is the best
of three runs, each on a fresh mount with a fresh disk cache: what a first reader waits for.
Both mounts read from the page cache (the sources are read once before), so the figures are
the reader's work, not the disk's. Prints one line a measure: ours (Zarr), peer (.h5ad),
ratio, target.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchlib import mounted, tar_walk  # noqa: E402


def warm(path):
    for directory, _, files in os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [os.path.basename(path)])]:
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                while f.read(1 << 24):
                    pass


def best_walk(binary, source, view, runs=3):
    best, size = None, None
    for _ in range(runs):
        with mounted(binary, source) as (point, _):
            seconds, size = tar_walk(point, view)
        best = seconds if best is None else min(best, seconds)
    return best, size


def label(n):
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}K" if n % 1000 == 0 else str(n)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build", nargs="?", default="build/release")
    p.add_argument("--data", default=os.path.join(ROOT, "build", "bench-zarr"))
    p.add_argument("--cells", type=int, default=1_000_000)
    a = p.parse_args()
    binary = os.path.join(a.build, "zarrmount")
    os.makedirs(a.data, exist_ok=True)
    name = label(a.cells)
    h5ad = os.path.join(a.data, f"synthetic-{name}-gzip4.h5ad")
    store = os.path.join(a.data, f"synthetic-{name}.v3-sharded.zarr")
    if not os.path.exists(h5ad):
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_synthetic_h5ad.py"), a.data,
                        "--cells", str(a.cells)], check=True)
    if not os.path.exists(os.path.join(store, "zarr.json")):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "debian-chroot"), "13", "/usr/bin/python3",
                        os.path.join(HERE, "h5ad_to_zarr_v3.py"), h5ad, store], check=True)
    warm(h5ad)
    warm(store)
    k = max(1, a.cells // 100)
    rows = []
    for what, view in (("full walk (full/)", "full"), (f"uniform 1% (k={k})", f"uniform/seed0/k={k}")):
        ours, ours_bytes = best_walk(binary, store, view)
        peer, peer_bytes = best_walk(binary, h5ad, view)
        if ours_bytes != peer_bytes:
            raise RuntimeError(f"{what}: the store's view is {ours_bytes} bytes, the .h5ad's {peer_bytes}")
        ratio = ours / peer
        rows.append((what, ours, peer, ratio, ours_bytes))
    print(f"{'measure':<26} {'zarr v3 (s)':>12} {'.h5ad (s)':>10} {'ratio':>7}  target")
    for what, ours, peer, ratio, size in rows:
        verdict = "ok" if ratio <= 1.2 else "MISSED"
        print(f"{what:<26} {ours:>12.3f} {peer:>10.3f} {ratio:>7.2f}  <= 1.2 {verdict}  ({size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
