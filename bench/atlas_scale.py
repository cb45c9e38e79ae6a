#!/usr/bin/python3
"""The atlas-scale benchmark (issue 6), one command:

    /usr/bin/python3 bench/atlas_scale.py [BUILD_DIR] [--data DIR] [--data-pc10 DIR] [--quick] [--out docs]

On the synthetic generator's files (bench/make_synthetic_h5ad.py, written if missing):
1M cells x 2,000 genes with about 100 values a cell (uncompressed and gzip-4, in --data), and
10M cells x 2,000 genes with about 10 values a cell (in --data-pc10; 10 a cell at 10M keeps the
files at 1.7 GB + 1 GB and their generation under a minute).  The n-scaling series (e) uses 10
values a cell at every n (1e5, 1e6, 1e7; written to --data-pc10), so that only n changes.

 (a) a cold walk of full/ (`tar cf - full | wc -c`, every file read, page cache dropped first
     when we may) against the physical limit measured in the same run: reading the source's
     bytes once (from a dropped page cache, the same as the walk), plus inflating its
     compressed chunks once (none in an uncompressed file), plus compressing the walk's raw
     output bytes once with the store's own codec (its .zarray compressor, on the array's item
     size) on as many threads as cores.  Target: walk <= 1.5 x limit.
 (b) anndata.read_zarr of uniform and blocks views at k = 0.1%, 1%, 10% through a fresh mount
     against anndata's backed mode subsetting the same cells (read_h5ad(backed="r")[rows]
     .to_memory()), each timed around the read in its own process, the two checked to hold the
     same number of stored values.  Target: >= 10x at 1% (the other sizes are printed).
 (c) a warm re-read (tar, best of 3) of full/ and of a uniform 10% view against the same files
     copied to tmpfs (/dev/shm; skipped, saying why, when they would not fit).  Target: >= 0.9x.
 (d) source bytes the daemon reads (its rchar; synthesis ahead off, whose reads are for files
     not asked for) for X of blocks views, and of uniform views of a file written in priority order (full/ of the 1M gzip-4 file rewritten as a gzip-4 .h5ad,
     chunked as the generator does), against the floor: the stored bytes of every source chunk
     of X holding a kept cell, once.  Target: <= 1.2x.
 (e) scaling: read time and the daemon's peak memory (VmHWM just before unmount) against k
     (from (b), n = 1M) and against n (1e5 to 1e7, 1% views and a walk of full/); a PNG plot
     and a table with --out.
 (f) a second mount of the same file with the same disk cache walks full/ again from the disk
     cache (with the default options: kept files pushed into the page cache ahead of the walk);
     against the tmpfs copy of (c).  Target: >= 0.9x.  The same with passthrough=on (the kernel
     reads kept files from the disk cache itself) is printed for information.
 (g) issue 25's file, what anndata's write_h5ad writes by default (contiguous, uncompressed, obsm
     50 + 2 columns; bench/contiguous.py makes it from the 1M gzip-4 file): a cold walk of full/
     against the limit (target <= 1.3) and against anndata's read_h5ad + write_zarr (at least
     1.5x faster), and the walk with codec=none against bindfs serving its export (<= 1.3x).
 (m) memory: the daemon's peak on each walk of full/ against the default cache_size (1 GiB)
     plus 8 bytes a cell plus 64 MiB.  Target: <= 1.

Every mount starts with an empty private disk cache (cache_dir= under /var/tmp) except each
pair of (f), which share one.  Prints PASS/MISS (or info), the numbers, the ratio and the target for
each; exits 1 if a target is missed (after writing the table and plot with --out).

--quick: 1M files only for (a)-(d) and (f), k = 1% only in (b) and (d), n = 1e5 and 1e6 in (e):
a few minutes.  --out DIR: writes DIR/performance-scaling.png and rewrites the table between
<!-- bench:begin --> and <!-- bench:end --> in DIR/performance.md.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import (COMPRESS, DECODE, PYTHON, drop_caches, leftover_mounts, mounted, python, rchar,  # noqa: E402
                      read_tree, tar_walk, vm_hwm, OwnPeak)

MiB = 2 ** 20
CACHE_SIZE = 2 ** 30  # the mount's default cache_size

OURS_READ = r"""
import sys, time, warnings
def hwm():  # this process's peak since exec (ru_maxrss would carry the parent's over exec)
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
warnings.simplefilter("ignore")
import anndata
t = time.perf_counter()
a = anndata.read_zarr(sys.argv[1])
sec = time.perf_counter() - t
print(sec, a.X.nnz, a.n_obs, hwm())
"""

PEER_READ = r"""
import sys, json, time, warnings
def hwm():  # this process's peak since exec (ru_maxrss would carry the parent's over exec)
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
warnings.simplefilter("ignore")
import anndata
rows = json.load(open(sys.argv[2]))
t = time.perf_counter()
a = anndata.read_h5ad(sys.argv[1], backed="r")
b = a[rows].to_memory()
sec = time.perf_counter() - t
print(sec, b.X.nnz, b.n_obs, hwm())
"""

# full/ of a mount rewritten as a .h5ad in that (priority) order: X as the generator writes it
# (gzip-4, chunks of 65,536 entries), the rest through anndata's writer; without what the mount
# adds (uns/cellucid, obs/cellucid_original_position), so the file mounts like any other.
REWRITE = r"""
import os, sys, warnings
warnings.simplefilter("ignore")
import numpy as np, h5py, anndata
from anndata.experimental import write_elem
a = anndata.read_zarr(sys.argv[1])
out = sys.argv[2]
C = 65536
obs = a.obs.drop(columns=["cellucid_original_position"], errors="ignore")
uns = dict(a.uns)
uns.pop("cellucid", None)
X = a.X.tocsr()
with h5py.File(out + ".part", "w") as f:
    f.attrs["encoding-type"] = "anndata"
    f.attrs["encoding-version"] = "0.1.0"
    g = f.create_group("X")
    g.attrs["encoding-type"] = "csr_matrix"
    g.attrs["encoding-version"] = "0.1.0"
    g.attrs["shape"] = np.array(X.shape, dtype=np.int64)
    for name, arr in (("data", X.data.astype(np.float32)), ("indices", X.indices.astype(np.int32)),
                      ("indptr", X.indptr.astype(np.int64))):
        g.create_dataset(name, data=arr, chunks=(min(C, max(len(arr), 1)),), compression="gzip",
                         compression_opts=4)
    write_elem(f, "obs", obs)
    write_elem(f, "var", a.var)
    write_elem(f, "obsm", dict(a.obsm))
    for k in ("layers", "obsp", "varm", "varp"):
        write_elem(f, k, {})
    write_elem(f, "uns", uns)
os.rename(out + ".part", out)
print(X.shape[0], X.nnz)
"""


def label_of(n):
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1000 == 0:
        return f"{n // 1000}K"
    return str(n)


def pct(frac):
    return f"{frac * 100:g}%"


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        ram = int(f.readline().split()[1]) * 1024
    return {"nproc": os.cpu_count(), "ram": f"{ram / 2 ** 30:.1f} GiB", "kernel": platform.release(),
            "cpu": cpu, "date": datetime.date.today().isoformat()}


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def tree_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def settle(point, limit=30.0):
    """Waits until the mount has no long work running and its disk cache stopped filing (the
    writer is an idle-priority thread), then syncs: nothing of one step runs into the next."""
    last, deadline = None, time.monotonic() + limit
    while time.monotonic() < deadline:
        with open(os.path.join(point, ".zarrmount/stats.json")) as f:
            s = json.load(f)
        now = (s["diskCache"]["writes"], s["diskCache"]["bytesHeld"])
        if not s["works"] and now == last:
            break
        last = now
        time.sleep(0.2)
    os.sync()


def best_tar(root, rel, times=3):
    return min(tar_walk(root, rel)[0] for _ in range(times))


class Bench:
    def __init__(self, args):
        self.args = args
        self.binary = os.path.abspath(os.path.join(args.build, "zarrmount"))
        self.quick = args.quick
        self.results = []   # (item, ok or None, text)
        self.scaling = []   # dicts, for the table and the plot
        self.tmpfs = {}     # (source, view) -> seconds, for (f)
        self.infos = {}
        self.chunk_sizes = {}
        self.cold = None
        self.log_lines = []

    # -- plumbing --------------------------------------------------------------------------
    def log(self, text):
        print(text, flush=True)

    def result(self, item, ok, text):
        tag = "info" if ok is None else ("PASS" if ok else "MISS")
        line = f"{tag}  ({item}) {text}"
        self.results.append((item, ok, text))
        print(line, flush=True)

    def memory_bound(self, nm, n, own, hwm):
        """The issue's memory target for a walk of full/: the daemon's peak within the cache
        (cache_size, 1 GiB by default: files, decoded source chunks and walks) plus 8 bytes a
        cell plus a small constant (64 MiB). The peak is the daemon's own memory (benchlib.OwnPeak:
        resident memory less the source file's pages it maps for direct walks, the kernel's page
        cache); VmHWM, which counts those too, is printed beside it."""
        bound = CACHE_SIZE + 8 * n + 64 * MiB
        self.result("m", own <= bound,
                    f"{nm}: walk of full/: daemon peak {own / MiB:.0f} MiB (VmHWM {hwm / MiB:.0f} MiB with "
                    f"the source's mapped pages) vs cache {CACHE_SIZE / MiB:.0f} MiB "
                    f"+ 8 B x {n:,} cells + 64 MiB = {bound / MiB:.0f} MiB: ratio {own / bound:.2f} (target <= 1)")

    def info(self, source):
        if source not in self.infos:
            self.infos[source] = json.loads(subprocess.run(
                [self.binary, "inspect", source, "--json"], check=True, capture_output=True, text=True).stdout)
        return self.infos[source]

    def select(self, source, method, k):
        info = self.info(source)
        req = {"method": method, "n": info["nObs"], "k": k, "seed": 0, "summary": False}
        if method == "blocks":
            req["blockSize"] = info["defaultBlockSize"]["blockSize"]
        return json.loads(subprocess.run([self.binary, "select"], input=json.dumps(req), check=True,
                                         capture_output=True, text=True).stdout)["positions"]

    def ensure(self, directory, n, per_cell):
        """The generator's two files for n cells (per_cell values a cell) in directory."""
        label = label_of(n)
        paths = {kind: os.path.join(directory, f"synthetic-{label}-{kind}.h5ad") for kind in ("uncompressed", "gzip4")}
        if not all(os.path.exists(p) for p in paths.values()):
            self.log(f"writing the synthetic {label} files ({per_cell:g} values a cell) in {directory}")
            os.makedirs(directory, exist_ok=True)
            subprocess.run([PYTHON, os.path.join(HERE, "make_synthetic_h5ad.py"), directory, "--cells", str(n),
                            "--per-cell", str(per_cell)], check=True, stdout=subprocess.DEVNULL)
        return paths

    @staticmethod
    def warm(source):
        with open(source, "rb") as f:
            while f.read(1 << 24):
                pass

    def name(self, source):
        return os.path.basename(source).replace("synthetic-", "").replace(".h5ad", "")

    # -- (a) and (c) on full/ --------------------------------------------------------------
    def walk_vs_limit(self, source):
        nm = self.name(source)
        threads = os.cpu_count()
        # The limit's read: the source's bytes once, from where the walk will read them.
        cold = drop_caches()
        self.cold = cold
        t = time.perf_counter()
        with open(source, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass
        read_s = time.perf_counter() - t
        size = os.path.getsize(source)
        # The limit's decoding: the source's compressed chunks inflated once (none if it has none).
        dec = json.loads(python(DECODE, source, str(threads))[1])
        if not cold:
            self.warm(source)
        os.sync()
        drop_caches()
        with mounted(self.binary, source) as (point, pid):
            with OwnPeak(pid, source) as own:
                walk_s, walked = tar_walk(point, "full")
                src = rchar(pid)
                settle(point)
                warm = best_tar(point, "full")
                _, out = python(COMPRESS, os.path.join(point, "full"), str(threads))
                comp = json.loads(out)
            hwm = vm_hwm(pid)
            shm_s, why = self.tmpfs_copy(point, "full")
        limit = read_s + dec["seconds"] + comp["seconds"]
        decoded = (f" + inflate {dec['stored'] / MiB:.0f} MiB to {dec['raw'] / MiB:.0f} MiB ({threads} threads) "
                   f"{dec['seconds']:.3f} s" if dec["chunks"] else "")
        decoded += "".join(f" (not in the limit: decoding {n}, a filter other than deflate and shuffle)"
                           for n in dec["other"])
        shuffles = {0: "noshuffle", 2: "bitshuffle"}  # byte shuffle (1) is left unsaid, as in codec=
        codecs = ", ".join(":".join([str(c[f]) for f in ("id", "cname", "clevel") if f in c] +
                                    ([shuffles[c["shuffle"]]] if c.get("shuffle") in shuffles else []))
                           for c in map(json.loads, comp["codecs"]))
        ratio = walk_s / limit
        state = "cold (page cache dropped)" if cold else "warm (page cache could not be dropped)"
        self.result("a", ratio <= 1.5,
                    f"{nm}: cold walk of full/ ({walked / MiB:.0f} MiB) {walk_s:.3f} s vs limit {limit:.3f} s "
                    f"= read {size / MiB:.0f} MiB {state} {read_s:.3f} s{decoded} + compress {comp['raw'] / MiB:.0f} MiB "
                    f"to {comp['recompressed'] / MiB:.0f} MiB ({codecs}, "
                    f"{threads} threads) {comp['seconds']:.3f} s: ratio {ratio:.2f} (target <= 1.5)")
        self.result("a", None, f"{nm}: the walk's daemon read {src / MiB:.0f} MiB of the source's "
                               f"{size / MiB:.0f} MiB (rchar: read calls, not copies from the mapped "
                               f"source of a direct walk)")
        self.memory_bound(nm, self.info(source)["nObs"], own.peak, hwm)
        if shm_s is None:
            self.result("c", None, f"{nm}: full/ on tmpfs skipped: {why}")
        else:
            self.tmpfs[source, "full"] = shm_s
            self.result("c", shm_s / warm >= 0.9,
                        f"{nm}: warm re-read of full/ ({walked / MiB:.0f} MiB, tar, best of 3) {warm:.3f} s vs "
                        f"tmpfs {shm_s:.3f} s: ratio {shm_s / warm:.2f} (target >= 0.9)")
        n = self.info(source)["nObs"]
        self.scaling.append({"series": "a", "file": nm, "n": n, "view": "full (tar walk, cold)", "k": n,
                             "seconds": walk_s, "peak": hwm, "peer": limit, "peer_peak": None})

    def tmpfs_copy(self, point, rel):
        """Copies point/rel to /dev/shm and times tar there (best of 3); (None, why) if it won't fit."""
        need = tree_bytes(os.path.join(point, rel))
        free = shutil.disk_usage("/dev/shm").free
        avail = mem_available()
        if need * 1.1 > free or need + 2 * 2 ** 30 > avail:
            return None, (f"{need / MiB:.0f} MiB would not fit (/dev/shm free {free / MiB:.0f} MiB, "
                          f"memory available {avail / MiB:.0f} MiB)")
        shm = tempfile.mkdtemp(prefix="zm-bench-", dir="/dev/shm")
        try:
            shutil.copytree(os.path.join(point, rel), os.path.join(shm, rel))
            tar_walk(shm, rel)
            return best_tar(shm, rel), None
        finally:
            shutil.rmtree(shm, ignore_errors=True)

    # -- (c) on a uniform view ---------------------------------------------------------------
    def warm_view(self, source, frac):
        nm = self.name(source)
        n = self.info(source)["nObs"]
        view = f"uniform/seed0/k={round(n * frac)}"
        with mounted(self.binary, source) as (point, _):
            _, size = tar_walk(point, view)   # cold: made once
            settle(point)
            warm = best_tar(point, view)
            shm_s, why = self.tmpfs_copy(point, view)
        if shm_s is None:
            self.result("c", None, f"{nm}: {view} on tmpfs skipped: {why}")
            return
        self.result("c", shm_s / warm >= 0.9,
                    f"{nm}: warm re-read of {view} ({size / MiB:.0f} MiB, tar, best of 3) {warm:.4f} s vs "
                    f"tmpfs {shm_s:.4f} s: ratio {shm_s / warm:.2f} (target >= 0.9)")

    # -- (b) ---------------------------------------------------------------------------------
    def read_view(self, source, method, frac, series="b", peer=True):
        nm = self.name(source)
        n = self.info(source)["nObs"]
        k = max(1, round(n * frac))
        with mounted(self.binary, source) as (point, pid):
            _, out = python(OURS_READ, f"{point}/{method}/seed0/k={k}")
            hwm = vm_hwm(pid)
        ours, nnz, rows, ours_rss = out.split()
        ours, ours_rss = float(ours), int(ours_rss)
        row = {"series": series, "file": nm, "n": n, "view": method, "k": k, "seconds": ours, "peak": hwm,
               "client_peak": ours_rss, "peer": None, "peer_peak": None}
        self.scaling.append(row)
        if not peer:
            return row
        rows_file = tempfile.mktemp(prefix="zm-bench-rows-", suffix=".json", dir="/var/tmp")
        try:
            with open(rows_file, "w") as f:
                json.dump(self.select(source, method, k), f)
            _, out2 = python(PEER_READ, source, rows_file)
        finally:
            os.unlink(rows_file)
        theirs, nnz2, rows2, theirs_rss = out2.split()
        if (nnz, rows) != (nnz2, rows2):
            raise RuntimeError(f"(b) {nm} {method} k={k}: the two sides read different matrices "
                               f"({rows} rows, {nnz} values vs {rows2} rows, {nnz2} values)")
        theirs = float(theirs)
        row["peer"], row["peer_peak"] = theirs, int(theirs_rss)
        ratio = theirs / ours
        target = frac == 0.01
        self.result("b", (ratio >= 10) if target else None,
                    f"{nm}: {method}/seed0/k={k} ({pct(frac)}, {int(nnz):,} values) read_zarr via a fresh mount "
                    f"{ours:.3f} s vs backed subsetting {theirs:.3f} s: ratio {ratio:.2f} "
                    f"(target {'>= 10' if target else 'none at ' + pct(frac)}); daemon peak {hwm / MiB:.0f} MiB, "
                    f"read_zarr process {ours_rss / MiB:.0f} MiB, backed process {int(theirs_rss) / MiB:.0f} MiB")
        return row

    # -- (d) ---------------------------------------------------------------------------------
    def x_chunks(self, source):
        """Per dataset of X: (chunk length, stored bytes of each chunk), and indptr."""
        if source not in self.chunk_sizes:
            import h5py
            out = {}
            with h5py.File(source, "r") as f:
                x = f["X"]
                indptr = x["indptr"][:]
                for name in ("data", "indices", "indptr"):
                    ds = x[name]
                    if ds.chunks is None:
                        out[name] = (None, ds.dtype.itemsize)
                        continue
                    c = ds.chunks[0]
                    sizes = np.zeros((ds.shape[0] + c - 1) // c, dtype=np.int64)
                    for i in range(ds.id.get_num_chunks()):
                        ci = ds.id.get_chunk_info(i)
                        sizes[ci.chunk_offset[0] // c] = ci.size
                    out[name] = (c, sizes)
            self.chunk_sizes[source] = (out, indptr)
        return self.chunk_sizes[source]

    def floor(self, source, positions):
        """Stored bytes of every chunk of X holding a kept cell, once."""
        chunks, indptr = self.x_chunks(source)
        pos = np.asarray(positions, dtype=np.int64)
        lo, hi = indptr[pos], indptr[pos + 1]
        m = hi > lo
        total = 0
        for name in ("data", "indices"):
            c, sizes = chunks[name]
            if c is None:
                total += int((hi - lo).sum()) * sizes
                continue
            diff = np.zeros(len(sizes) + 1, dtype=np.int64)
            np.add.at(diff, lo[m] // c, 1)
            np.add.at(diff, (hi[m] - 1) // c + 1, -1)
            total += int(sizes[np.cumsum(diff)[:-1] > 0].sum())
        c, sizes = chunks["indptr"]
        if c is None:
            total += 2 * len(pos) * sizes
        else:
            touched = np.zeros(len(sizes), dtype=bool)
            touched[pos // c] = True
            touched[(pos + 1) // c] = True
            total += int(sizes[touched].sum())
        stored = sum(int(s.sum()) if c is not None else 0 for c, s in chunks.values())
        return total, stored

    def source_bytes(self, source, method, frac, what):
        nm = self.name(source)
        n = self.info(source)["nObs"]
        k = max(1, round(n * frac))
        floor, stored = self.floor(source, self.select(source, method, k))
        # Synthesis ahead off: its reads are for files the reader has not asked for (obs columns,
        # embeddings), which would count against X here.
        with mounted(self.binary, source, "ahead_idle=0") as (point, pid):
            before = rchar(pid)
            served = read_tree(os.path.join(point, f"{method}/seed0/k={k}/X"))
            used = rchar(pid) - before
            with open(os.path.join(point, ".zarrmount/stats.json")) as f:
                counted = json.load(f)["total"]["source"]["bytesRead"]
        ratio = used / floor
        self.result("d", ratio <= 1.2,
                    f"{nm}: {method}/seed0/k={k} ({pct(frac)}) X: the daemon read {used / MiB:.2f} MiB (stats.json: "
                    f"{counted / MiB:.2f} MiB in all) vs floor {floor / MiB:.2f} MiB (chunks of X holding a kept cell): "
                    f"ratio {ratio:.2f} (target <= 1.2); {what}; {used / stored:.3f} of X's stored "
                    f"{stored / MiB:.0f} MiB for k/n = {k / n:.3f}; {used / served:.2f} source bytes a byte served")

    def priority_file(self, source):
        out = os.path.join(os.path.dirname(source), "priority-" + os.path.basename(source))
        if not os.path.exists(out):
            self.log(f"writing {out}: full/ of {os.path.basename(source)} in its priority order")
            with mounted(self.binary, source) as (point, _):
                python(REWRITE, os.path.join(point, "full"), out)
        return out

    # -- (f) ---------------------------------------------------------------------------------
    def second_mount(self, source, passthrough=False):
        """(f) with the default options (kept files pushed into the page cache ahead of the walk);
        with passthrough, the same walk with passthrough=on, for information."""
        nm = self.name(source)
        cache = tempfile.mkdtemp(prefix="zm-bench-cache-", dir="/var/tmp")
        options = ("passthrough=on",) if passthrough else ()
        try:
            with mounted(self.binary, source, *options, cache=cache) as (point, _):
                first, size = tar_walk(point, "full")
                settle(point)
            with mounted(self.binary, source, *options, cache=cache) as (point, pid):
                os.sync()
                again, _ = tar_walk(point, "full")
                rewalk, _ = tar_walk(point, "full")
                with open(os.path.join(point, ".zarrmount/stats.json")) as f:
                    stats = json.load(f)
                disk, total = stats["diskCache"], stats["total"]
                shm_s = self.tmpfs.get((source, "full"))
                why = None
                if shm_s is None:
                    shm_s, why = self.tmpfs_copy(point, "full")
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        how = (f"passthrough opens {total['passthrough']['opens']}, pushed {total['pushed']['files']}, "
               f"daemon reads {total['reads']}")
        if shm_s is None:
            self.result("f", None, f"{nm}: second walk of full/ {again:.3f} s; tmpfs skipped: {why}")
            return
        target = not passthrough
        self.result("f", (shm_s / again >= 0.9) if target else None,
                    f"{nm}{'' if target else ' (passthrough=on)'}: full/ ({size / MiB:.0f} MiB) walked by a "
                    f"second mount from the disk cache {again:.3f} s, again {rewalk:.3f} s (first mount's cold "
                    f"walk {first:.3f} s; disk cache hits {disk['hits']}, misses {disk['misses']}; {how}) vs "
                    f"tmpfs {shm_s:.3f} s: ratio {shm_s / again:.2f}" + (" (target >= 0.9)" if target else ""))

    # -- (e) n series ------------------------------------------------------------------------
    def n_point(self, source):
        nm = self.name(source)
        n = self.info(source)["nObs"]
        self.warm(source)
        with mounted(self.binary, source) as (point, pid):
            os.sync()
            with OwnPeak(pid, source) as own:
                walk_s, walked = tar_walk(point, "full")
            hwm = vm_hwm(pid)
        self.scaling.append({"series": "n", "file": nm, "n": n, "view": "full (tar walk)", "k": n,
                             "seconds": walk_s, "peak": own.peak, "peer": None, "peer_peak": None})
        self.result("e", None, f"{nm}: n={n:,}: walk of full/ ({walked / MiB:.0f} MiB) {walk_s:.3f} s, "
                               f"daemon peak {own.peak / MiB:.0f} MiB (VmHWM {hwm / MiB:.0f} MiB)")
        self.memory_bound(nm, n, own.peak, hwm)
        for method in ("uniform", "blocks"):
            row = self.read_view(source, method, 0.01, series="n", peer=False)
            self.result("e", None, f"{nm}: n={n:,}: {method} 1% (k={row['k']:,}) read_zarr {row['seconds']:.3f} s, "
                                   f"daemon peak {row['peak'] / MiB:.0f} MiB, read_zarr process "
                                   f"{row['client_peak'] / MiB:.0f} MiB")

    # -- the run -----------------------------------------------------------------------------
    def files_people_write(self, data):
        """(g) bench/contiguous.py's (a) and (b) on issue 25's file (written into data from the
        1M gzip-4 file if missing): a cold walk of full/ against the limit and against anndata's
        read_h5ad + write_zarr, and the walk with codec=none against bindfs."""
        import contiguous
        b = contiguous.Bench(argparse.Namespace(build=os.path.dirname(self.binary), data=data,
                                                cells=self.args.cells, runs=1 if self.quick else 2,
                                                codec=None))
        source = b.ensure_source()
        b.part_a(source)
        b.part_b(source)
        for what, ours, peer, ratio, target in b.rows:
            goal = "" if target is None else f" (target <= {target})"
            self.result("g", None if target is None else ratio <= target,
                        f"{os.path.basename(source)}: {what}: {ours:.3f} s vs {peer:.3f} s: ratio {ratio:.2f}{goal}")

    def run(self):
        a = self.args
        one = self.ensure(a.data, a.cells, 100)
        g1, u1 = one["gzip4"], one["uncompressed"]
        ten = None if self.quick else self.ensure(a.data_pc10, 10_000_000, 10)
        fracs = [0.01] if self.quick else [0.001, 0.01, 0.1]
        for s in (g1, u1) + (() if ten is None else (ten["gzip4"], ten["uncompressed"])):
            self.warm(s)
        self.log(f"# machine: {machine()}; build {self.binary}")
        self.log("# files: 1M cells x 2,000 genes, ~100 values a cell; 10M cells x 2,000 genes, ~10 values a "
                 "cell; the n series (e): ~10 values a cell at every n")

        self.log("== (a) cold walk of full/ vs the physical limit; (c) warm re-read of full/ vs tmpfs")
        for s in [g1, u1] + ([] if ten is None else [ten["gzip4"], ten["uncompressed"]]):
            self.walk_vs_limit(s)
        self.log("== (g) the file anndata's write_h5ad writes by default (contiguous, uncompressed; "
                 "issue 25, bench/contiguous.py)")
        self.files_people_write(a.data)
        self.log("== (c) warm re-read of a uniform 10% view vs tmpfs")
        self.warm_view(g1, 0.1)
        self.log("== (b) read_zarr of uniform and blocks views vs anndata backed mode subsetting (source warm)")
        for s in [g1] + ([] if ten is None else [ten["gzip4"]]):
            self.warm(s)
            for method in ("uniform", "blocks"):
                for frac in fracs:
                    row = self.read_view(s, method, frac)
                    if s == g1:
                        row["series"] = "k"
        self.log("== (d) source bytes read vs the floor (each source chunk of X holding a kept cell, once)")
        for s in [g1] + ([] if ten is None else [ten["gzip4"]]):
            for frac in fracs:
                self.source_bytes(s, "blocks", frac, "blocks of the file's B0")
        prio = self.priority_file(g1)
        for frac in fracs:
            self.source_bytes(prio, "uniform", frac, "the file written in the priority order of seed 0")
        self.log("== (f) a second mount walks full/ from the disk cache")
        for s in [g1] + ([] if ten is None else [ten["gzip4"]]):
            self.second_mount(s)
            self.second_mount(s, passthrough=True)
        self.log("== (e) scaling with n (gzip-4, ~10 values a cell at every n)")
        ns = [n for n in (100_000, 1_000_000) if n <= a.cells] + ([] if self.quick else [10_000_000])
        for n in ns:
            self.n_point(self.ensure(a.data_pc10, n, 10)["gzip4"])

    def summary(self):
        print("\n== summary")
        for item, ok, text in self.results:
            if ok is not None:
                print(f"{'PASS' if ok else 'MISS'}  ({item}) {text}")
        missed = [r for r in self.results if r[1] is False]
        print(f"{len([r for r in self.results if r[1]])} targets met, {len(missed)} missed")
        return 1 if missed else 0

    # -- --out -------------------------------------------------------------------------------
    def plot(self, path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(2, 2, figsize=(11, 8))
        ks = [r for r in self.scaling if r["series"] == "k"]
        for method, mark in (("uniform", "o"), ("blocks", "s")):
            rs = sorted((r for r in ks if r["view"] == method), key=lambda r: r["k"])
            if not rs:
                continue
            x = [r["k"] for r in rs]
            ax[0][0].plot(x, [r["seconds"] for r in rs], marker=mark, label=f"{method}: read_zarr via the mount")
            if all(r["peer"] for r in rs):
                ax[0][0].plot(x, [r["peer"] for r in rs], marker=mark, ls="--", label=f"{method}: anndata backed")
            ax[1][0].plot(x, [r["peak"] / MiB for r in rs], marker=mark, label=f"{method}: daemon VmHWM")
            if all(r["peer_peak"] for r in rs):
                ax[1][0].plot(x, [r["peer_peak"] / MiB for r in rs], marker=mark, ls="--",
                              label=f"{method}: backed process peak")
        n1 = ks[0]["n"] if ks else 0
        ax[0][0].set_title(f"against k (n = {n1:,}, gzip-4, ~100 values a cell)")
        ns = [r for r in self.scaling if r["series"] == "n"]
        for view, mark in (("full (tar walk)", "^"), ("uniform", "o"), ("blocks", "s")):
            rs = sorted((r for r in ns if r["view"] == view), key=lambda r: r["n"])
            if not rs:
                continue
            lab = view if view.startswith("full") else f"{view} 1% read_zarr"
            ax[0][1].plot([r["n"] for r in rs], [r["seconds"] for r in rs], marker=mark, label=lab)
            ax[1][1].plot([r["n"] for r in rs], [r["peak"] / MiB for r in rs], marker=mark, label=lab)
        ax[0][1].set_title("against n (gzip-4, ~10 values a cell)")
        for a in ax.flat:
            a.set_xscale("log")
            a.grid(True, which="both", alpha=0.3)
            a.legend(fontsize=8)
        for a in ax[0]:
            a.set_yscale("log")
            a.set_ylabel("seconds")
        for a in ax[1]:
            a.set_ylabel("peak memory (MiB)")
        ax[1][0].set_xlabel("k (cells kept)")
        ax[1][1].set_xlabel("n (cells in the file)")
        m = machine()
        fig.suptitle(f"zarrmount atlas scale: {m['cpu']}, {m['nproc']} cores, {m['ram']}, {m['date']}"
                     + (" (--quick)" if self.quick else ""), fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)

    def table(self):
        m = machine()
        cmd = "/usr/bin/python3 bench/atlas_scale.py build/release --out docs" + (" --quick" if self.quick else "")
        lines = [f"Measured {m['date']} by `{cmd}` on {m['cpu']}, {m['nproc']} cores, {m['ram']} RAM, "
                 f"Linux {m['kernel']}; release build; page cache "
                 f"{'dropped before each (a) step' if self.cold else 'not droppable here: (a) read warm on both sides'}.",
                 "", "| item | result | measured |", "|---|---|---|"]
        for item, ok, text in self.results:
            tag = "info" if ok is None else ("PASS" if ok else "**MISS**")
            lines.append(f"| ({item}) | {tag} | {text.replace('|', '/')} |")
        lines += ["", "Scaling (e): read time and peak memory; the plot is "
                      "[performance-scaling.png](performance-scaling.png).", "",
                  "| series | file | n | view | k | time (s) | daemon peak (MiB) | peer time (s) | peer peak (MiB) |",
                  "|---|---|---:|---|---:|---:|---:|---:|---:|"]
        for r in self.scaling:
            peer = "" if r["peer"] is None else f"{r['peer']:.3f}"
            peer_peak = "" if r["peer_peak"] is None else f"{r['peer_peak'] / MiB:.0f}"
            if r["series"] == "a":
                peer += " (limit)"
            lines.append(f"| {r['series']} | {r['file']} | {r['n']:,} | {r['view']} | {r['k']:,} | {r['seconds']:.3f} | "
                         f"{r['peak'] / MiB:.0f} | {peer} | {peer_peak} |")
        return "\n".join(lines)

    def write_out(self, out):
        os.makedirs(out, exist_ok=True)
        self.plot(os.path.join(out, "performance-scaling.png"))
        doc = os.path.join(out, "performance.md")
        text = open(doc).read() if os.path.exists(doc) else "# Performance\n\n<!-- bench:begin -->\n<!-- bench:end -->\n"
        begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
        if begin not in text or end not in text:
            text = text.rstrip("\n") + f"\n\n{begin}\n{end}\n"
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        with open(doc, "w") as f:
            f.write(f"{head}{begin}\n{self.table()}\n{end}{tail}")
        self.log(f"wrote {doc} and {os.path.join(out, 'performance-scaling.png')}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build", nargs="?", default="build/release")
    p.add_argument("--data", default=os.environ.get("ZM_BENCH_DATA", "/var/tmp/zarrmount-bench"),
                   help="where the 1M files (~100 values a cell) are or are written")
    p.add_argument("--data-pc10", default=os.environ.get("ZM_BENCH_DATA_PC10", "/var/tmp/zm-10m"),
                   help="where the ~10-values-a-cell files (1e5, 1e6, 1e7 cells) are or are written")
    p.add_argument("--quick", action="store_true", help="a reduced run (a few minutes)")
    p.add_argument("--cells", type=int, default=1_000_000,
                   help="cells of the main files (1M; a smaller number tries the script quickly)")
    p.add_argument("--out", help="write performance-scaling.png and the table of performance.md here (docs)")
    a = p.parse_args()
    bench = Bench(a)
    start = time.perf_counter()
    try:
        bench.run()
    finally:
        left = leftover_mounts()
        if left:
            print(f"error: mounts left behind: {left}", file=sys.stderr)
    rc = bench.summary()
    if a.out:
        bench.write_out(a.out)
    print(f"# {time.perf_counter() - start:.0f} s in all")
    return 1 if leftover_mounts() else rc


if __name__ == "__main__":
    sys.exit(main())
