#!/usr/bin/python3
"""Issue 25's last target, 10^8 cells, one command:

    /usr/bin/python3 bench/scale.py [BUILD] [--data /var/tmp/zm-scale] [--cells N] [--debug-log DIR]

On the synthetic generator's two files at N cells (default 10^8) x 2,000 genes, about 10 values
a cell (bench/make_synthetic_h5ad.py, its streaming path; written into --data if missing, after
checking the disk has room, else skipped with the reason): the "uncompressed" file (X contiguous)
and the gzip-4 one (chunks of 65,536 entries).  For each, page cache dropped first:

  mount       from the daemon's exec to the mount point answering `stat` of full/.zattrs.
              Target: under 1 s.
  view read   zarr-python (a fresh /usr/bin/python3) reading X (data, indices, indptr) and every
              array of obs of blocks/seed0/k=<0.1% of the cells>/ (atlas_scale.py's 0.1% blocks
              view), the page cache dropped after the mount; the time around the reads.
              Target: under 1 s.  The peer (information): h5py reading the same cells' rows of X
              and obs from the source in a fresh process.
  memory      the daemon's peak memory over the view read against the bound of docs/performance.md:
              cache_size (1 GiB by default) + 8 B a cell + 64 MiB.  Target: <= 1.  The peak is
              its resident memory less the source's pages it maps (benchlib.OwnPeak: the kernel's
              page cache, which direct copies read from); VmHWM, which counts them, is printed too.
  view alone  the same read and VmHWM on a second fresh mount where full/ is never looked up (its
              mount time the root answering stat), for information: what the view costs without
              full/ built (building full/ reads and holds X's pointers of every cell); and
              X alone (no obs) on a third fresh mount.

Prints one line a measure: ours, the target (or the peer), the ratio, PASS/MISS (or info); exits
1 if a target is missed.  --debug-log DIR mounts with -d and keeps each daemon's log there.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import PYTHON, OwnPeak, drop_caches, leftover_mounts, rchar, unmount, vm_hwm  # noqa: E402
from atlas_scale import label_of  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
CACHE_SIZE = GiB  # the mount's default cache_size
MINE = set()      # our mount points (another benchmark may be mounting its own beside us)
FRAC = 0.001      # the view: 0.1% of the cells, blocks
# disk the two files take a cell (10 values a cell): X 8 B a value + 8 B indptr in the first,
# about 3.4 B a value in the gzip-4 one; obs and obsm about 62 B a cell in each (the index's
# variable-length strings in the global heap are most of it); measured at 10^7 cells
BYTES_A_CELL = 265

ZARR_READ = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
import zarr
t = time.perf_counter()
g = zarr.open_group(sys.argv[1], mode="r")
n = 0
for name in ("data", "indices", "indptr"):
    n += g["X"][name][:].nbytes
def arrays(group):
    for _, a in group.arrays():
        yield a
    for _, sub in group.groups():
        yield from arrays(sub)
for a in (arrays(g["obs"]) if sys.argv[2:] != ["X"] else ()):
    n += a[:].nbytes
print(time.perf_counter() - t, n, g["X"]["indptr"].shape[0] - 1)
"""

# The same cells' rows from the source with h5py: X's rows (runs of consecutive cells read as one
# slice) and every obs column at those rows.
H5PY_READ = r"""
import json, sys, time
import numpy as np, h5py
pos = np.array(json.load(open(sys.argv[2])), dtype=np.int64)
t = time.perf_counter()
n = 0
with h5py.File(sys.argv[1], "r") as f:
    x = f["X"]
    order = np.sort(pos)
    cut = np.flatnonzero(np.diff(order) != 1) + 1
    starts, stops = order[np.r_[0, cut]], order[np.r_[cut - 1, len(order) - 1]] + 1
    ptr = x["indptr"]
    for a, b in zip(starts, stops):
        p = ptr[a:b + 1]
        n += p.nbytes + x["data"][p[0]:p[-1]].nbytes + x["indices"][p[0]:p[-1]].nbytes
    def columns(g):
        for key in g:
            if isinstance(g[key], h5py.Group):
                yield from columns(g[key])
            else:
                yield g[key]
    for d in columns(f["obs"]):
        if d.shape and d.shape[0] == x.attrs["shape"][0]:
            for a, b in zip(starts, stops):
                n += np.asarray(d[a:b]).nbytes
        else:
            n += np.asarray(d[()]).nbytes
print(time.perf_counter() - t, n, len(pos))
"""


@contextlib.contextmanager
def timed_mount(binary, source, debug_log=None, probe="full/.zattrs"):
    """Mounts SOURCE in the foreground (fresh mount point, fresh disk cache) and yields
    (point, pid, seconds from the exec to PROBE answering stat, seconds from the exec to the
    mount point's root answering stat); always unmounts.  With probe None, the two are one."""
    point = tempfile.mkdtemp(prefix="zm-bench-")
    cache = tempfile.mkdtemp(prefix="zm-bench-cache-", dir="/var/tmp")
    args = [binary, source, point, "-f", "-o", f"cache_dir={cache}"] + (["-d"] if debug_log else [])
    err = open(debug_log, "w") if debug_log else subprocess.DEVNULL
    probe = probe and os.path.join(point, probe)
    MINE.add(point)
    dev = os.stat(point).st_dev
    t = time.perf_counter()
    daemon = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 300
        up = None
        while True:
            try:
                if up is None and os.stat(point).st_dev != dev:
                    up = time.perf_counter() - t  # the root answers: the mount is up
                if up is not None:
                    if probe:
                        os.stat(probe)
                    break
            except OSError:
                pass
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mount of {source} failed")
            time.sleep(0.001)
        seconds = time.perf_counter() - t
        yield point, daemon.pid, seconds, up
    finally:
        unmount(point, daemon)
        shutil.rmtree(cache, ignore_errors=True)
        if debug_log:
            err.close()


class Bench:
    def __init__(self, a):
        self.a = a
        self.binary = os.path.abspath(os.path.join(a.build, "zarrmount"))
        self.missed = 0

    def line(self, what, ours, other, target=None, higher=False):
        """ours against a target (PASS/MISS; the ratio ours/target) or a peer (info)."""
        ratio = ours / other if other else float("nan")
        if target is None:
            verdict = "info"
        else:
            ok = ratio <= 1
            verdict = "PASS" if ok else "MISS"
            self.missed += not ok
        print(f"{what:<66} {ours:>10.3f} {other:>10.3f} {ratio:>6.2f}  {verdict}", flush=True)

    def ensure(self):
        """The two files, written if missing; None and the reason if the disk is too small."""
        a = self.a
        label = label_of(a.cells)
        paths = {k: os.path.join(a.data, f"synthetic-{label}-{k}.h5ad") for k in ("uncompressed", "gzip4")}
        if all(os.path.exists(p) for p in paths.values()):
            return paths, None
        os.makedirs(a.data, exist_ok=True)
        need = BYTES_A_CELL * a.cells
        free = shutil.disk_usage(a.data).free
        if free < need * 1.1:
            return None, (f"the two {label} files need about {need / GiB:.1f} GiB, {a.data} has "
                          f"{free / GiB:.1f} GiB free")
        print(f"# writing the synthetic {label} files (10 values a cell) in {a.data} "
              f"(about {need / GiB:.1f} GiB; {free / GiB:.0f} GiB free)", flush=True)
        t = time.perf_counter()
        subprocess.run(["nice", "-n", "10", PYTHON, os.path.join(HERE, "make_synthetic_h5ad.py"), a.data,
                        "--cells", str(a.cells), "--per-cell", "10", "--stream"], check=True)
        print(f"# written in {time.perf_counter() - t:.0f} s", flush=True)
        return paths, None

    def positions(self, source, k):
        info = json.loads(subprocess.run([self.binary, "inspect", source, "--json"], check=True,
                                         capture_output=True, text=True).stdout)
        req = {"method": "blocks", "n": info["nObs"], "k": k, "seed": 0, "summary": False,
               "blockSize": info["defaultBlockSize"]["blockSize"]}
        return json.loads(subprocess.run([self.binary, "select"], input=json.dumps(req), check=True,
                                         capture_output=True, text=True).stdout)["positions"]

    @staticmethod
    def read_view(point, view, *only):
        """zarr-python's read of the view's X and obs (only X with "X") in a fresh process, the
        page cache dropped first: (seconds around the reads, bytes, rows, the process's wall
        seconds)."""
        drop_caches()
        t = time.perf_counter()
        out = subprocess.run([PYTHON, "-c", ZARR_READ, os.path.join(point, view), *only], check=True,
                             capture_output=True, text=True).stdout
        wall = time.perf_counter() - t
        read_s, read_bytes, rows = out.split()
        return float(read_s), int(read_bytes), int(rows), wall

    def one(self, kind, source):
        n = self.a.cells
        k = max(1, round(n * FRAC))
        view = f"blocks/seed0/k={k}"
        size = os.path.getsize(source)
        log = (os.path.join(self.a.debug_log, f"{kind}.log") if self.a.debug_log else None)
        cold = drop_caches()
        state = "page cache dropped" if cold else "page cache NOT dropped (not root)"
        print(f"# {os.path.basename(source)} ({size / GiB:.2f} GiB), {state}", flush=True)
        with timed_mount(self.binary, source, log) as (point, pid, mount_s, up_s):
            mounted_hwm = vm_hwm(pid)
            before = rchar(pid)
            with OwnPeak(pid, source) as own:
                read_s, read_bytes, rows, wall = self.read_view(point, view)
            hwm = vm_hwm(pid)
            used = rchar(pid) - before
        if rows != k:
            raise RuntimeError(f"{view}: {rows} rows read, {k} asked for")
        bound = CACHE_SIZE + 8 * n + 64 * MiB
        self.line(f"{kind}: mount (exec to stat of full/.zattrs), s", mount_s, 1.0, target=True)
        self.line(f"{kind}: {view} X + obs, zarr-python ({read_bytes / MiB:.0f} MiB), s", read_s, 1.0,
                  target=True)
        self.line(f"{kind}: daemon memory (less the mapped source) over the view read vs bound, MiB",
                  own.peak / MiB, bound / MiB, target=True)
        self.line(f"{kind}: daemon VmHWM after the view read (the mapped source's pages too) vs bound, "
                  f"MiB", hwm / MiB, bound / MiB)
        print(f"# {kind}: the mount point's root answered stat {up_s:.3f} s after the exec; the "
              f"rest of the mount time is the lookup of full/ (which reads nothing a cell: its order "
              f"and X's layout are made when first used)", flush=True)
        print(f"# {kind}: the read's process took {wall:.3f} s in all (start and imports included); "
              f"daemon VmHWM {mounted_hwm / MiB:.0f} MiB once mounted; bound = cache_size "
              f"{CACHE_SIZE / MiB:.0f} MiB + 8 B x {n:,} cells + 64 MiB; the daemon read (rchar) "
              f"{used / MiB:.0f} MiB for the view", flush=True)
        # The same view on a fresh mount where full/ is never looked up: what the view alone costs.
        log = (os.path.join(self.a.debug_log, f"{kind}-view.log") if self.a.debug_log else None)
        drop_caches()
        with timed_mount(self.binary, source, log, probe=None) as (point, pid, up_s, _):
            up_hwm = vm_hwm(pid)
            before = rchar(pid)
            alone_s, _, _, _ = self.read_view(point, view)
            alone_hwm = vm_hwm(pid)
            alone_used = rchar(pid) - before
        self.line(f"{kind}: view alone (fresh mount, no full/): mount point up, s", up_s, 1.0)
        self.line(f"{kind}: view alone: {view} X + obs, zarr-python, s", alone_s, 1.0)
        self.line(f"{kind}: view alone: daemon VmHWM after the read vs bound, MiB", alone_hwm / MiB,
                  bound / MiB)
        print(f"# {kind}: view alone: daemon VmHWM {up_hwm / MiB:.0f} MiB once mounted; the daemon read "
              f"(rchar) {alone_used / MiB:.0f} MiB for the view", flush=True)
        # X alone, on a third fresh mount: the view's matrix without its obs columns.
        drop_caches()
        with timed_mount(self.binary, source, probe=None) as (point, pid, _, _):
            before = rchar(pid)
            x_s, x_bytes, _, _ = self.read_view(point, view, "X")
            x_hwm = vm_hwm(pid)
            x_used = rchar(pid) - before
        self.line(f"{kind}: view alone: X only ({x_bytes / MiB:.0f} MiB), zarr-python, s", x_s, 1.0)
        print(f"# {kind}: X only: daemon VmHWM {x_hwm / MiB:.0f} MiB, read (rchar) {x_used / MiB:.0f} MiB",
              flush=True)
        rows_file = tempfile.mktemp(prefix="zm-bench-rows-", suffix=".json", dir="/var/tmp")
        try:
            with open(rows_file, "w") as f:
                json.dump(self.positions(source, k), f)
            drop_caches()
            out = subprocess.run([PYTHON, "-c", H5PY_READ, source, rows_file], check=True,
                                 capture_output=True, text=True).stdout
        finally:
            os.unlink(rows_file)
        peer_s, peer_bytes, peer_rows = out.split()
        self.line(f"{kind}: the view read vs h5py the same rows from the source, s", read_s,
                  float(peer_s))
        print(f"# {kind}: h5py read {int(peer_bytes) / MiB:.0f} MiB of X and obs for {peer_rows} cells",
              flush=True)

    def run(self):
        paths, why = self.ensure()
        if paths is None:
            print(f"# 10^8 cells skipped: {why}")
            return 0
        print(f"# {'measure':<64} {'ours':>10} {'target':>10} {'ratio':>6}  verdict "
              f"(peer lines: ours, peer, ours/peer)", flush=True)
        for kind in ("uncompressed", "gzip4"):
            self.one(kind, paths[kind])
        return 1 if self.missed else 0


def left_behind():
    return [p for p in leftover_mounts() if p in MINE]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build", nargs="?", default="build/release")
    p.add_argument("--data", default=os.environ.get("ZM_BENCH_SCALE", "/var/tmp/zm-scale"))
    p.add_argument("--cells", type=lambda s: int(float(s)), default=100_000_000)
    p.add_argument("--debug-log", help="mount with -d and keep each daemon's log in this directory")
    a = p.parse_args()
    if a.debug_log:
        os.makedirs(a.debug_log, exist_ok=True)
    start = time.perf_counter()
    try:
        rc = Bench(a).run()
    finally:
        left = left_behind()
        if left:
            print(f"error: mounts left behind: {left}", file=sys.stderr)
    print(f"# {time.perf_counter() - start:.0f} s in all")
    return 1 if left_behind() else rc


if __name__ == "__main__":
    sys.exit(main())
