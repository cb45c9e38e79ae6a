#!/usr/bin/python3
"""Stress test of the daemon under load (issue 7, "Load").

Many readers at once over six views of one mount (one per method: full/,
file/, uniform, blocks, stratified and spatial, four of them reached through
their share= or pct= links), for a bounded time, every byte compared with a
single-threaded reference:

1. The source: by default a deterministic synthetic .h5ad written here
   (--cells cells, CSR X and layers deflated in chunks, a CSC layer, obsp,
   raw, categorical, string and boolean obs columns, obsm embeddings), or
   --source FILE.
2. The reference: a mount with one decode thread, no synthesis ahead, no disk
   cache and the default (large) memory cache, read by one reader: every file
   of the six views, and of the --churn-views small views that make the
   stress mount evict views (more than it keeps at once), kept in memory
   with its xxh3. One view is checked against `zarrmount export` too.
3. The stress mount: the same codec and chunk size (so the same bytes), with
   a small cache_size (the file cache evicts, walks spill to disk, the source
   chunk cache evicts), a small disk cache (cache_max), --threads decode
   threads and synthesis ahead that stops after 1 s idle and starts again.
   --readers threads each repeat, until --duration seconds have passed, a
   random mix of: whole-view walks (every file read and compared), random
   slices of random files at random offsets and sizes (compared with the
   reference's bytes), `ls -lRa` of a view (sizes compared), stat storms
   (known paths with their sizes, names that do not exist, --other-views
   views at random seeds and sizes), re-opens of one file, reads of the
   churn views, and reads of .zarrmount/stats.json (whole, of the size fstat
   said) and info.json. Before most reads the kernel's pages of the file are
   dropped (POSIX_FADV_DONTNEED), so that the reads reach the daemon.
4. Meanwhile a watchdog samples the daemon's VmRSS and VmHWM and watches
   every reader's heartbeat: a reader whose current step has not returned
   for --stall seconds (or a daemon that died) ends the run; a stall is a
   deadlock, reported with every daemon thread's stack (gdb -batch -p PID)
   and the readers' Python stacks, then the daemon is killed.
5. At the end the mount is unmounted; the daemon must exit with status 0
   and its log must hold no sanitizer report (ASan, UBSan, LeakSanitizer,
   ThreadSanitizer), and no mount may be left behind.

The memory bound (docs/mount.md, "Memory"): the daemon's resident memory
once mounted, plus twice what it may hold: cache_size, per-cell state for
as many views as it keeps at once (MAX_VIEWS = 32; 8 bytes a cell for the
order and the map back, 16 bytes a cell for each sparse matrix whose rows
or columns are cells) and the disk cache's write queue (the file cache's
entries it holds beyond that cache's bound: a quarter of cache_size, at
least 16 MiB); twice,
because glibc keeps what is freed in its arenas for reuse (the daemon has
one arena a core: measured on 2 cores, a 10-minute run on 20,000 cells held
76 MB in use in 150 MB of heap); plus --memory-slack MiB (64 by default: up
to 64 FUSE worker threads and the threads working ahead, each with a stack
touched, the stats.json snapshots being read, and the JSON documents they
are made from).
Under a sanitizer the bound is not meaningful (ASan keeps 256 MiB of freed
memory in quarantine, TSan shadows every byte several times): the peak is
reported and the check is skipped.

Mounts live under $ZM_MOUNT_PARENT (run by tests/integration/run_mount_test.sh,
which unmounts whatever a crash leaves); every mount is unmounted in every
outcome. No assertion depends on how fast anything runs: durations only bound
the run. Prints TAP; --summary adds a plain summary (bench/stress).
"""
import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import xxhash

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
HERE = os.path.dirname(os.path.abspath(__file__))

MAX_VIEWS = 32                      # src/tree/tree_internal.h: views the daemon keeps at once
DISK_QUEUE_FLOOR = 16 << 20         # src/tree/files.c (disk_queue_bytes): chunks waiting to be
                                    # filed on disk, at most max(this, cache_size / 4)
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer",
                     "ThreadSanitizer: ", "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer")

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))


def skip(name, why):
    results.append((True, name, f"# SKIP {why}"))


def diag(line):
    print(f"# {line}", flush=True)


def size_arg(text):
    """A SIZE as the mount reads it: bytes, or a number with K, M, G or T."""
    match = re.fullmatch(r"(\d+)([KMGT]?)(?:I?B)?", text.strip().upper())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    return int(match.group(1)) << (10 * " KMGT".index(match.group(2) or " "))


def mib(n):
    return f"{n / (1 << 20):.1f} MiB"


# ---- The source ---------------------------------------------------------------------------

def make_source(path, cells, genes=200, seed=20240607):
    """A deterministic .h5ad with every kind of per-cell element a view walks:
    CSR X and layers (deflated, in chunks), a CSC layer (cells as columns),
    obsp (cells both ways), raw, categorical / string / boolean / numeric obs
    columns, obsm embeddings, and a string uns scalar. Written with h5py in
    anndata 0.8's layout (tests/integration/h5ad_writer.py), so that no
    anndata is needed (Debian 13 packages none)."""
    import warnings
    warnings.simplefilter("ignore")
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
    import h5ad_writer

    r = np.random.default_rng(seed)
    X = sp.random(cells, genes, density=0.08, format="csr", dtype=np.float32, random_state=seed)
    X.data = np.floor(X.data * 10 + 1).astype(np.float32)
    types = np.array([f"type_{i}" for i in range(7)])
    obs = pd.DataFrame({
        "cell_type": pd.Categorical(types[r.integers(0, 7, cells)]),
        "batch": pd.Categorical(r.choice(["a", "b", "c"], cells)),
        "n_counts": np.asarray(X.sum(1)).ravel().astype(np.float32),
        "score": r.normal(size=cells),
        "flag": r.random(cells) < 0.3,
        "label": [f"cell-{i:06d}-{'x' * (i % 7)}" for i in range(cells)],
    }, index=[f"c{i:06d}" for i in range(cells)])
    var = pd.DataFrame({"mean": np.asarray(X.mean(0)).ravel()}, index=[f"g{j:04d}" for j in range(genes)])
    obsm = {"X_umap": r.normal(size=(cells, 2)).astype(np.float32),
            "X_pca": r.normal(size=(cells, 10)).astype(np.float32)}
    layers = {"counts": X.astype(np.int32), "csc": sp.csc_matrix(X)}
    k = 6
    rows = np.repeat(np.arange(cells), k)
    cols = r.integers(0, cells, cells * k)
    obsp = {"connectivities": sp.csr_matrix((r.random(cells * k).astype(np.float32), (rows, cols)),
                                            shape=(cells, cells))}
    h5ad_writer.write_h5ad(path, X=X, obs=obs, var=var, obsm=obsm, obsp=obsp, layers=layers,
                           uns={"note": "stress"}, raw={"X": X, "var": var, "varm": {}}, compression="gzip")


def inspect(source):
    done = subprocess.run([BINARY, "inspect", source, "--json"], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"zarrmount inspect {source}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def per_cell_sparse_count(info):
    """Sparse matrices whose rows (or columns) are cells: each costs 16 bytes
    a cell of a view (docs/mount.md, "Memory")."""
    n = info["nObs"]
    count = 0

    def walk(e):
        nonlocal count
        if isinstance(e, dict):
            if e.get("kind") == "sparse" and n in (e.get("shape") or [])[:2]:
                count += 1
            for v in e.values():
                walk(v)
        elif isinstance(e, list):
            for v in e:
                walk(v)
    walk(info.get("elements"))
    return count


# ---- Mounts -------------------------------------------------------------------------------

def binary_sanitizer():
    with open(BINARY, "rb") as f:
        data = f.read()
    if b"__tsan_init" in data:
        return "thread"
    if b"__asan_init" in data:
        return "address"
    return None


def mounted_points(prefix):
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(prefix)]


def is_mounted(point):
    return point in mounted_points(point)


class Mount:
    """A foreground daemon on a new directory; its stderr goes to a log file."""

    def __init__(self, parent, name, source, options, env=None):
        self.point = tempfile.mkdtemp(prefix=f"zm-stress-{name}-", dir=parent)
        self.log_path = os.path.join(parent, f"{os.path.basename(self.point)}.log")
        args = [BINARY, source, self.point, "-f"]
        for option in options:
            args += ["-o", option]
        self.args = args
        self.log = open(self.log_path, "wb")
        self.daemon = subprocess.Popen(args, stdout=self.log, stderr=self.log, env=env)
        while not is_mounted(self.point):
            if self.daemon.poll() is not None:
                raise RuntimeError(f"mount failed: {self.log_text().strip()}")
            time.sleep(0.05)

    def log_text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def memory(self):
        """(VmRSS, VmHWM) in bytes, or None once the daemon is gone."""
        try:
            with open(f"/proc/{self.daemon.pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)
        except (OSError, KeyError, ValueError):
            return None

    def unmount(self, timeout):
        """Unmounts and waits for the daemon: its exit status, or None if it
        had to be killed."""
        for _ in range(50):
            if not is_mounted(self.point):
                break
            if subprocess.run(["fusermount3", "-u", self.point], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        if is_mounted(self.point):
            subprocess.run(["fusermount3", "-u", "-z", self.point], capture_output=True)
        try:
            return self.daemon.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Where it is stuck, before it is killed.
            for line in gdb_dump(self.daemon.pid).splitlines():
                if line.startswith(("Thread ", "#")):
                    diag(f"exit stalled: {line}")
            self.kill()
            return None

    def kill(self):
        if self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait()
        if is_mounted(self.point):
            subprocess.run(["fusermount3", "-u", "-z", self.point], capture_output=True)

    def close(self):
        if self.daemon.poll() is None or is_mounted(self.point):
            self.unmount(timeout=60)
        self.log.close()
        with contextlib.suppress(OSError):
            os.rmdir(self.point)


# ---- The reference ------------------------------------------------------------------------

class ViewRef:
    def __init__(self, path):
        self.path = path          # as readers name it (maybe a share=/pct= link)
        self.target = path        # the k= directory it resolves to
        self.files = {}           # relative path -> bytes
        self.hashes = {}          # relative path -> xxh3_64
        self.dirs = set()         # relative directories ("" the view itself)
        self.chunk_files = []     # files not named .z*: chunks

    @property
    def names(self):
        return sorted(self.files)


def read_reference(point, path):
    """Every file of a view, read by one reader."""
    ref = ViewRef(path)
    top = os.path.join(point, path)
    if os.path.islink(top):
        ref.target = os.path.join(os.path.dirname(path), os.readlink(top))
    for directory, dirnames, filenames in os.walk(top):
        dirnames.sort()
        rel_dir = os.path.relpath(directory, top)
        ref.dirs.add("" if rel_dir == "." else rel_dir)
        for name in sorted(filenames):
            full = os.path.join(directory, name)
            rel = os.path.relpath(full, top)
            with open(full, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read()
            if len(data) != size:
                raise RuntimeError(f"{path}/{rel}: fstat says {size} bytes, read gave {len(data)}")
            ref.files[rel] = data
            ref.hashes[rel] = xxhash.xxh3_64_intdigest(data)
    ref.chunk_files = [n for n in ref.names if not os.path.basename(n).startswith(".z")]
    return ref


def choose_views(point, info):
    """Six views, one per method (fewer if the source has no column to
    stratify or no embedding), four reached through share=/pct= links."""
    n = info["nObs"]
    views = ["full", "file", "uniform/seed7/share=0.3", "blocks/B=64/seed3/pct=40"]
    strat = sorted(os.listdir(os.path.join(point, "stratified")))
    key = "cell_type" if "cell_type" in strat else (strat[0] if strat else None)
    if key:
        k = max(1, int(n * 0.25))
        for candidate in (f"stratified/{key}/balanced/min=2/seed1/k={k}", f"stratified/{key}/seed1/k={k}"):
            if os.path.isdir(os.path.join(point, candidate)):
                views.append(candidate)
                break
    spatial = sorted(os.listdir(os.path.join(point, "spatial")))
    key = "X_umap" if "X_umap" in spatial else (spatial[0] if spatial else None)
    if key:
        for candidate in (f"spatial/{key}/G=4/cols=0,1/seed2/share=0.3", f"spatial/{key}/seed2/share=0.3"):
            if os.path.isdir(os.path.join(point, candidate)):
                views.append(candidate)
                break
    return views


def churn_views(count, n):
    """Small views beyond the six: together more than the daemon keeps at
    once, so that reading them evicts views and builds them again."""
    views = []
    for i in range(count):
        k = max(1, min(n, 20 + 7 * i))
        views.append(f"uniform/seed{1000 + i}/k={k}" if i % 2 == 0 else f"blocks/seed{1000 + i}/k={k}")
    return views


# ---- The readers --------------------------------------------------------------------------

def raise_error(error):
    raise error


class Counter:
    __slots__ = ("ops", "bytes", "errors", "mismatches")

    def __init__(self):
        self.ops = self.bytes = self.errors = self.mismatches = 0


class Stop(Exception):
    pass


class Reader(threading.Thread):
    """One reader: a random mix of operations until stopped. Everything it
    counts is its own (summed once it has finished)."""

    KINDS = (("walk", 10), ("slice", 40), ("ls", 6), ("stat", 12), ("reopen", 10),
             ("churn", 14), ("meta", 8))

    def __init__(self, index, seed, point, refs, churn, other_views, info_bytes, n_obs, stop):
        super().__init__(name=f"reader-{index}", daemon=True)
        self.index = index
        self.rng = random.Random(f"{seed}-{index}")
        self.point = point
        self.refs = refs
        self.churn = churn
        self.other_views = other_views
        self.info_bytes = info_bytes
        self.n_obs = n_obs
        self.stop = stop
        self.counters = {}              # view (or "churn", "mount") -> Counter
        self.kinds = {k: 0 for k, _ in self.KINDS}
        self.failures = []              # the first few errors and mismatches, described
        self.beat = time.monotonic()    # when the last step returned
        self.doing = "starting"         # what the current step is
        self.finished = False
        self.crashed = None

    # -- bookkeeping
    def counter(self, view):
        c = self.counters.get(view)
        if c is None:
            c = self.counters[view] = Counter()
        return c

    def step(self, what):
        if self.stop.is_set():
            raise Stop()
        self.beat = time.monotonic()
        self.doing = what

    def error(self, view, what, exc):
        self.counter(view).errors += 1
        if len(self.failures) < 20:
            self.failures.append(f"error: {what}: {exc!r}")

    def mismatch(self, view, what, detail):
        self.counter(view).mismatches += 1
        if len(self.failures) < 20:
            self.failures.append(f"mismatch: {what}: {detail}")

    def full(self, ref, rel):
        return os.path.join(self.point, ref.path, rel)

    # -- operations
    def read_whole(self, view, ref, rel, drop):
        path = self.full(ref, rel)
        self.step(f"read {path}")
        expected = ref.files[rel]
        c = self.counter(view)
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                if drop:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                pieces = []
                while True:
                    self.step(f"read {path}")
                    piece = os.read(fd, self.rng.choice((4096, 65536, 1 << 20)))
                    if not piece:
                        break
                    pieces.append(piece)
                data = b"".join(pieces)
            finally:
                os.close(fd)
        except OSError as exc:
            self.error(view, f"read {path}", exc)
            return
        c.ops += 1
        c.bytes += len(data)
        if size != len(expected):
            self.mismatch(view, path, f"fstat size {size}, reference {len(expected)}")
        elif xxhash.xxh3_64_intdigest(data) != ref.hashes[rel]:
            at = next((i for i, (a, b) in enumerate(zip(data, expected)) if a != b), min(len(data), len(expected)))
            self.mismatch(view, path, f"{len(data)} bytes read, reference {len(expected)}; first difference at {at}")

    def read_slice(self, view, ref, rel):
        path = self.full(ref, rel)
        expected = ref.files[rel]
        size = len(expected)
        offset = self.rng.randrange(0, size + 1)
        length = self.rng.randrange(1, max(2, size - offset + 64)) if self.rng.random() < 0.8 else \
            self.rng.randrange(1, 8192)
        self.step(f"slice {path} at {offset}, {length} bytes")
        c = self.counter(view)
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if self.rng.random() < 0.85:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                data = os.pread(fd, length, offset)
            finally:
                os.close(fd)
        except OSError as exc:
            self.error(view, f"pread {path} at {offset}, {length} bytes", exc)
            return
        c.ops += 1
        c.bytes += len(data)
        if data != expected[offset:offset + length]:
            self.mismatch(view, f"{path} at {offset}, {length} bytes",
                          f"{len(data)} bytes read, reference slice {len(expected[offset:offset + length])}")

    def op_walk(self):
        view = self.rng.choice(list(self.refs))
        ref = self.refs[view]
        drop = self.rng.random() < 0.7
        top = os.path.join(self.point, ref.path)
        seen = []
        try:
            for directory, dirnames, filenames in os.walk(top, onerror=raise_error):
                self.step(f"walk {directory}")
                for name in filenames:
                    rel = os.path.relpath(os.path.join(directory, name), top)
                    seen.append(rel)
                    if rel in ref.files:
                        self.read_whole(view, ref, rel, drop)
        except OSError as exc:
            self.error(view, f"walk {top}", exc)
            return
        if sorted(seen) != ref.names:
            self.mismatch(view, f"walk {top}", f"{len(seen)} files listed, reference {len(ref.names)}")
        self.counter(view).ops += 1

    def op_slice(self):
        view = self.rng.choice(list(self.refs))
        ref = self.refs[view]
        names = ref.chunk_files if ref.chunk_files and self.rng.random() < 0.85 else ref.names
        rel = self.rng.choice(names)
        if self.rng.random() < 0.25:
            self.read_whole(view, ref, rel, drop=True)
        else:
            self.read_slice(view, ref, rel)

    def op_ls(self):
        """`ls -lRa` of a view (it also asks for extended attributes): every
        file listed with its reference size."""
        view = self.rng.choice(list(self.refs))
        ref = self.refs[view]
        top = os.path.join(self.point, ref.path) + "/"
        self.step(f"ls -lRa {top}")
        try:
            done = subprocess.run(["ls", "-lRa", "--time-style=+%s", top], capture_output=True, text=True,
                                  env={**os.environ, "LC_ALL": "C"}, timeout=3600)
        except subprocess.TimeoutExpired as exc:
            self.error(view, f"ls -lRa {top}", exc)
            return
        self.step(f"ls -lRa {top}: checking")
        if done.returncode != 0:
            self.error(view, f"ls -lRa {top}", RuntimeError(done.stderr.strip()[:300]))
            return
        sizes, directory = {}, ""
        for line in done.stdout.splitlines():
            if line.endswith(":") and line.startswith(top):
                directory = line[len(top):-1]
                continue
            fields = line.split()
            if len(fields) == 7 and fields[0].startswith("-"):
                sizes[os.path.join(directory, fields[6])] = int(fields[4])
        expected = {rel: len(data) for rel, data in ref.files.items()}
        c = self.counter(view)
        c.ops += 1
        if sizes != expected:
            wrong = sorted(set(sizes.items()) ^ set(expected.items()))[:3]
            self.mismatch(view, f"ls -lRa {top}", f"{len(sizes)} files listed, reference {len(expected)}: {wrong}")

    def op_stat(self):
        """A storm of stat calls: known paths (sizes compared), names that do
        not exist (ENOENT), and views never looked up before."""
        for _ in range(self.rng.randrange(20, 120)):
            roll = self.rng.random()
            if roll < 0.8:
                view = self.rng.choice(list(self.refs))
                ref = self.refs[view]
                if self.rng.random() < 0.2:
                    rel = self.rng.choice(sorted(ref.dirs))
                    path = os.path.join(self.point, ref.path, rel)
                    self.step(f"stat {path}")
                    try:
                        st = os.stat(path)
                    except OSError as exc:
                        self.error(view, f"stat {path}", exc)
                        continue
                    self.counter(view).ops += 1
                    if not (st.st_mode & 0o040000):
                        self.mismatch(view, path, "not a directory")
                    continue
                rel = self.rng.choice(ref.names)
                path = self.full(ref, rel)
                self.step(f"stat {path}")
                try:
                    st = os.lstat(path)
                except OSError as exc:
                    self.error(view, f"lstat {path}", exc)
                    continue
                self.counter(view).ops += 1
                if st.st_size != len(ref.files[rel]):
                    self.mismatch(view, path, f"st_size {st.st_size}, reference {len(ref.files[rel])}")
            elif roll < 0.92:
                view = self.rng.choice(list(self.refs))
                ref = self.refs[view]
                rel = self.rng.choice(sorted(ref.dirs))
                name = self.rng.choice((".zarray", ".zgroup", ".zattrs", "nope", "999999", "0.0.0"))
                if os.path.join(rel, name) in ref.files or os.path.join(rel, name) in ref.dirs:
                    continue
                path = os.path.join(self.point, ref.path, rel, name)
                self.step(f"stat {path} (missing)")
                try:
                    os.lstat(path)
                    self.mismatch(view, path, "exists; the reference has no such file")
                except FileNotFoundError:
                    self.counter(view).ops += 1
                except OSError as exc:
                    self.error(view, f"lstat {path}", exc)
            else:
                path = os.path.join(self.point, self.rng.choice(self.other_views),
                                    self.rng.choice((".zattrs", "obs/.zattrs", "X", ".zmetadata")))
                self.step(f"stat {path} (a new view)")
                try:
                    os.stat(path)
                    self.counter("mount").ops += 1
                except OSError as exc:
                    self.error("mount", f"stat {path}", exc)

    def op_reopen(self):
        view = self.rng.choice(list(self.refs))
        ref = self.refs[view]
        rel = self.rng.choice(ref.names)
        path = self.full(ref, rel)
        expected = ref.files[rel]
        c = self.counter(view)
        for _ in range(self.rng.randrange(5, 40)):
            self.step(f"reopen {path}")
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    size = os.fstat(fd).st_size
                    data = None
                    if self.rng.random() < 0.3 and expected:
                        at = self.rng.randrange(0, len(expected))
                        data = os.pread(fd, 1, at)
                finally:
                    os.close(fd)
            except OSError as exc:
                self.error(view, f"open {path}", exc)
                continue
            c.ops += 1
            if size != len(expected):
                self.mismatch(view, path, f"fstat size {size}, reference {len(expected)}")
            if data is not None and data != expected[at:at + 1]:
                self.mismatch(view, f"{path} at {at}", "1 byte differs")

    def op_churn(self):
        view = self.rng.choice(list(self.churn))
        ref = self.churn[view]
        for _ in range(self.rng.randrange(1, 6)):
            rel = self.rng.choice(ref.names)
            self.read_whole("churn", ref, rel, drop=True)

    def op_meta(self):
        stats = os.path.join(self.point, ".zarrmount/stats.json")
        self.step(f"read {stats}")
        c = self.counter("mount")
        try:
            fd = os.open(stats, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                pieces = []
                while True:
                    piece = os.read(fd, 65536)
                    if not piece:
                        break
                    pieces.append(piece)
            finally:
                os.close(fd)
            data = b"".join(pieces)
            c.ops += 1
            c.bytes += len(data)
            # One snapshot, whole, of the size fstat said, whatever other
            # readers open meanwhile (each open has a snapshot of its own).
            if len(data) != size:
                self.mismatch("mount", stats, f"fstat says {size} bytes, read gave {len(data)}")
            json.loads(data)
        except OSError as exc:
            self.error("mount", f"read {stats}", exc)
        except ValueError as exc:
            self.mismatch("mount", stats, f"not JSON: {exc}")
        info = os.path.join(self.point, ".zarrmount/info.json")
        self.step(f"read {info}")
        try:
            with open(info, "rb") as f:
                data = f.read()
            c.ops += 1
            c.bytes += len(data)
            if data != self.info_bytes:
                self.mismatch("mount", info, "differs from its first reading")
        except OSError as exc:
            self.error("mount", f"read {info}", exc)

    def run(self):
        kinds, weights = zip(*self.KINDS)
        try:
            while not self.stop.is_set():
                kind = self.rng.choices(kinds, weights)[0]
                getattr(self, f"op_{kind}")()
                self.kinds[kind] += 1
        except Stop:
            pass
        except Exception:  # a bug of this script: say so, do not hide it
            self.crashed = traceback.format_exc()
        self.doing = "finished"
        self.finished = True


# ---- The run ------------------------------------------------------------------------------

def gdb_dump(pid):
    if shutil.which("gdb") is None:
        return "gdb is not installed: no stacks"
    try:
        done = subprocess.run(["gdb", "-batch", "-p", str(pid), "-ex", "thread apply all bt"],
                              capture_output=True, text=True, timeout=300)
        return done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        return "gdb did not finish"


def python_stacks(readers):
    frames = sys._current_frames()
    lines = []
    for r in readers:
        if r.finished or r.ident not in frames:
            continue
        lines.append(f"{r.name}: {r.doing} (for {time.monotonic() - r.beat:.0f} s)")
        lines += ["  " + l for l in "".join(traceback.format_stack(frames[r.ident])).splitlines()[-6:]]
    return "\n".join(lines)


def daemon_env(sanitizer):
    env = dict(os.environ)
    if sanitizer == "thread":
        # Report every race, do not stop at the first: the exit status (66)
        # and the log say there were any.
        options = ["halt_on_error=0", "second_deadlock_stack=1", "history_size=4"]
        suppressions = os.path.join(HERE, "tsan.supp")
        if os.path.exists(suppressions):
            options.append(f"suppressions={suppressions}")
        env["TSAN_OPTIONS"] = ":".join(options + [env.get("TSAN_OPTIONS", "")]).strip(":")
    return env


def run(args):
    parent = os.environ.get("ZM_MOUNT_PARENT")
    if parent is None:
        parent = tempfile.mkdtemp(prefix="zm-stress-")
    work = tempfile.mkdtemp(prefix="work-", dir=parent)
    sanitizer = binary_sanitizer()
    stall = args.stall * (4 if sanitizer else 1)
    diag(f"binary {BINARY}" + (f" (built with -fsanitize={sanitizer})" if sanitizer else ""))

    # 1. The source.
    if args.source:
        source = os.path.abspath(args.source)
    else:
        source = os.path.join(work, f"stress-{args.cells}.h5ad")
        make_source(source, args.cells)
    info = inspect(source)
    n_obs = info["nObs"]
    diag(f"source {source}: {n_obs} cells x {info['nVars']} genes")
    check("source opened", n_obs > 0)

    common = [f"chunk_size={args.chunk_size}"] + ([f"codec={args.codec}"] if args.codec else [])
    # 2. The reference: one reader, one decode thread, nothing ahead, nothing on disk.
    began = time.monotonic()
    reference = Mount(parent, "reference", source,
                      common + ["threads=1", "ahead_idle=0", "cache_dir=none"], env=daemon_env(sanitizer))
    try:
        views = choose_views(reference.point, info)
        refs = {v: read_reference(reference.point, v) for v in views}
        churn = {v: read_reference(reference.point, v) for v in churn_views(args.churn_views, n_obs)}
    finally:
        reference_status = reference.unmount(timeout=stall)
        reference_log = reference.log_text()
        reference.close()
    check("reference mount read and unmounted (status 0)", reference_status == 0,
          reference_log.strip()[-2000:])
    files = sum(len(r.files) for r in refs.values())
    total = sum(len(d) for r in refs.values() for d in r.files.values())
    diag(f"reference: {len(views)} views, {files} files, {total} bytes; {len(churn)} churn views, "
         f"{sum(len(r.files) for r in churn.values())} files ({time.monotonic() - began:.1f} s)")
    check(f"six views, one per method ({', '.join(views)})", len(views) == 6 or args.source,
          f"only {len(views)}")

    # The reference agrees with `zarrmount export` (no FUSE) on one view.
    exported = os.path.join(work, "export")
    view = refs[views[2]]
    done = subprocess.run([BINARY, "export", source, view.target, exported, "--chunk-size",
                           str(args.chunk_size)] + (["--codec", args.codec] if args.codec else []),
                          capture_output=True, text=True, timeout=3600, env=daemon_env(sanitizer))
    same = done.returncode == 0
    for rel, h in view.hashes.items():
        if not same:
            break
        with open(os.path.join(exported, rel), "rb") as f:
            same = xxhash.xxh3_64_intdigest(f.read()) == h
    check(f"reference of {view.path} equals zarrmount export of {view.target}", same, done.stderr.strip()[-1000:])
    shutil.rmtree(exported, ignore_errors=True)

    # 3. The stress mount.
    disk = os.path.join(work, "disk-cache")
    options = common + [f"cache_size={args.cache_size}", f"cache_dir={disk}", f"cache_max={args.cache_max}",
                        f"threads={args.threads}", f"ahead_idle={args.ahead_idle}"]
    stress = Mount(parent, "stress", source, options, env=daemon_env(sanitizer))
    deadlock = died = False
    peak_rss = peak_hwm = 0
    readers = []
    status = None
    try:
        check("stress mount up (" + ",".join(options) + ")", True)
        with open(os.path.join(stress.point, ".zarrmount/info.json"), "rb") as f:
            info_bytes = f.read()
        baseline = stress.memory()[0]
        sparse = per_cell_sparse_count(info)
        per_cell = MAX_VIEWS * n_obs * (8 + 16 * sparse)
        queue = max(DISK_QUEUE_FLOOR, args.cache_size // 4)
        held = args.cache_size + per_cell + queue
        bound = baseline + 2 * held + args.memory_slack * (1 << 20)
        diag(f"memory bound {mib(bound)} = resident once mounted {mib(baseline)} + 2 x (cache_size "
             f"{mib(args.cache_size)} + per-cell state {mib(per_cell)} ({MAX_VIEWS} views x {n_obs} cells x "
             f"(8 + 16 x {sparse} sparse)) + disk queue {mib(queue)}) + {args.memory_slack} MiB")

        stop = threading.Event()
        # Views only looked at (stat), at random seeds and sizes: a bounded
        # set, so that what the daemon keeps per path (inodes, sizes) stays
        # bounded too, but larger than the views it keeps at once.
        pick = random.Random(f"{args.seed}-views")
        other_views = [f"{pick.choice(('uniform', 'blocks'))}/seed{pick.randrange(1 << 32)}/"
                       f"k={pick.randrange(1, n_obs + 1)}" for _ in range(args.other_views)]
        readers = [Reader(i, args.seed, stress.point, refs, churn, other_views, info_bytes, n_obs, stop)
                   for i in range(args.readers)]
        began = time.monotonic()
        for r in readers:
            r.start()
        diag(f"{len(readers)} readers for {args.duration} s (seed {args.seed}; deadlock after {stall} s "
             "without a step returning)")
        last_report = began
        while True:
            time.sleep(0.2)
            now = time.monotonic()
            m = stress.memory()
            if m:
                peak_rss, peak_hwm = max(peak_rss, m[0]), max(peak_hwm, m[1])
            if stress.daemon.poll() is not None:
                died = True
                break
            stuck = [r for r in readers if not r.finished and now - r.beat > stall]
            if stuck:
                deadlock = True
                break
            if now - began >= args.duration:
                break
            if args.progress and now - last_report >= args.progress:
                ops = sum(c.ops for r in readers for c in list(r.counters.values()))
                diag(f"{now - began:.0f} s: {ops} operations, resident {mib(m[0]) if m else '?'}")
                last_report = now
        stop.set()
        elapsed = time.monotonic() - began
        # Every reader finishes its current step; one that does not within
        # the stall time waits on a request the daemon never answers.
        deadline = time.monotonic() + stall
        while not deadlock and not died and any(not r.finished for r in readers):
            if time.monotonic() > deadline:
                deadlock = True
                break
            if stress.daemon.poll() is not None:
                died = True
                break
            m = stress.memory()
            if m:
                peak_rss, peak_hwm = max(peak_rss, m[0]), max(peak_hwm, m[1])
            time.sleep(0.1)
        m = stress.memory()
        if m:
            peak_rss, peak_hwm = max(peak_rss, m[0]), max(peak_hwm, m[1])
        if deadlock:
            diag("deadlock: readers stuck:")
            for line in python_stacks(readers).splitlines():
                diag(line)
            diag("daemon threads:")
            for line in gdb_dump(stress.daemon.pid).splitlines():
                diag(line)
            stress.kill()
        alive = stress.daemon.poll() is None
        if not alive:
            status = stress.daemon.returncode
            diag(f"the daemon ended with status {status}"
                 + (f" ({signal.Signals(-status).name})" if status < 0 else ""))
        final = None
        if alive:
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(stress.point, ".zarrmount/stats.json"), "rb") as f:
                    final = json.loads(f.read())
        for r in readers:
            r.join(timeout=10)
        if alive:
            stopping = time.monotonic()
            diag(f"readers stopped {stopping - began - elapsed:.1f} s after the end; unmounting")
            status = stress.unmount(timeout=stall)
            diag(f"the daemon exited {time.monotonic() - stopping:.1f} s after the unmount began")
    finally:
        log = stress.log_text()
        stress.close()

    # 4. What happened.
    totals, per_view = Counter(), {}
    kinds = {}
    failures = []
    for r in readers:
        for view, c in r.counters.items():
            v = per_view.setdefault(view, Counter())
            for field in Counter.__slots__:
                setattr(v, field, getattr(v, field) + getattr(c, field))
                setattr(totals, field, getattr(totals, field) + getattr(c, field))
        for k, count in r.kinds.items():
            kinds[k] = kinds.get(k, 0) + count
        failures += [f"{r.name}: {f}" for f in r.failures]
        if r.crashed:
            failures.append(f"{r.name} crashed:\n{r.crashed}")
    for view in views + ["churn", "mount"]:
        c = per_view.get(view, Counter())
        check(f"view {view}: {c.ops} operations, {c.bytes} bytes, {c.errors} errors, {c.mismatches} mismatches",
              c.ops > 0 and c.errors == 0 and c.mismatches == 0)
    diag("operations by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    for f in failures[:40]:
        diag(f)
    check(f"errors = 0 ({totals.errors})", totals.errors == 0)
    check(f"mismatches = 0 ({totals.mismatches})", totals.mismatches == 0)
    check("no reader crashed", not any(r.crashed for r in readers))
    check(f"no deadlock (no step stalled {stall} s)", not deadlock)
    check("daemon alive through the run", not died, log.strip()[-3000:])
    if sanitizer:
        skip(f"memory within bound (peak VmHWM {mib(peak_hwm)})",
             f"-fsanitize={sanitizer} keeps its own memory (quarantine, shadow)")
    else:
        check(f"memory within bound (peak VmHWM {mib(peak_hwm)}, VmRSS {mib(peak_rss)} <= {mib(bound)})",
              peak_hwm <= bound)
    reports = [line for line in log.splitlines() if any(s in line for s in SANITIZER_REPORTS)]
    first = min((log.find(s) for s in SANITIZER_REPORTS if s in log), default=-1)
    check(f"daemon exited cleanly (status {status}, {len(reports)} sanitizer report lines)",
          status == 0 and not reports,
          (log[first:first + 60000] if first >= 0 else log.strip()[-6000:]) if (status != 0 or reports) else "")
    check("no mount left behind", not mounted_points(parent + "/"))
    if final:
        t = final["total"]
        ahead_runs = sum(v.get("ahead", {}).get("runs", 0) for v in final["views"].values())
        diag(f"daemon: {t['reads']} reads, {t['lookups']} lookups, {t['chunksSynthesized']} chunks made, "
             f"file cache {t['cache']['hits']} hits / {t['cache']['misses']} misses / "
             f"{t['cache']['evictions']} evictions, source chunk cache {t['source']['chunkCache']['evictions']} "
             f"evictions, walks spilled {t['walks']['spilled']}, synthesis ahead runs {ahead_runs}, "
             f"disk cache {final['diskCache']}, views counted {len(final['views'])}")
        if args.cache_size <= (1 << 20) and args.ahead_idle > 0:
            check("the workload evicted, spilled walks and synthesized ahead",
                  t["cache"]["evictions"] > 0 and t["walks"]["spilled"] > 0 and ahead_runs > 0)
    summary = {
        "readers": args.readers, "views": len(views), "duration": round(elapsed, 1),
        "operations": totals.ops, "bytes": totals.bytes, "errors": totals.errors,
        "mismatches": totals.mismatches, "peak_rss": peak_rss, "peak_hwm": peak_hwm,
        "bound": None if sanitizer else bound, "deadlock": deadlock, "daemon_status": status,
    }
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=float(os.environ.get("ZM_STRESS_DURATION", 30)),
                   help="seconds the readers run (default 30, or $ZM_STRESS_DURATION)")
    p.add_argument("--readers", type=int, default=int(os.environ.get("ZM_STRESS_READERS", 16)))
    p.add_argument("--source", help="the source to mount (default: a synthetic .h5ad written here)")
    p.add_argument("--cells", type=int, default=int(os.environ.get("ZM_STRESS_CELLS", 3000)),
                   help="cells of the synthetic source (default 3000)")
    p.add_argument("--chunk-size", type=size_arg, default=8 << 10, help="-o chunk_size (default 8K)")
    p.add_argument("--codec", default=None, help="-o codec (default: the mount's default)")
    p.add_argument("--cache-size", type=size_arg, default=512 << 10, help="-o cache_size (default 512K)")
    p.add_argument("--cache-max", type=size_arg, default=1 << 20, help="-o cache_max (default 1M)")
    p.add_argument("--threads", type=int, default=4, help="-o threads (default 4)")
    p.add_argument("--ahead-idle", type=float, default=1, help="-o ahead_idle (default 1)")
    p.add_argument("--churn-views", type=int, default=36,
                   help=f"small views read besides the six (default 36: with the six, more than {MAX_VIEWS})")
    p.add_argument("--other-views", type=int, default=256,
                   help="views at random seeds and sizes that stat storms look at (default 256)")
    p.add_argument("--stall", type=float, default=60,
                   help="seconds a step may take before the run counts as deadlocked (x4 under a sanitizer)")
    p.add_argument("--memory-slack", type=int, default=64, help="MiB of the memory bound's constant")
    p.add_argument("--seed", default=os.environ.get("ZM_STRESS_SEED", str(random.randrange(1 << 30))),
                   help="the readers' random seed (printed; give it to repeat a run's choices)")
    p.add_argument("--progress", type=float, default=0, help="print progress every this many seconds")
    p.add_argument("--summary", action="store_true", help="print a plain summary at the end")
    args = p.parse_args()
    summary = None
    try:
        summary = run(args)
    except Exception:
        check("stress run", False, traceback.format_exc())
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        directive = f" {detail}" if detail.startswith("# SKIP") else ""
        print(f"{'ok' if ok else 'not ok'} {i} - {name}{directive}")
        if not ok and detail:
            for line in detail.splitlines():
                print(f"#   {line}")
    if args.summary and summary:
        s = summary
        print(f"readers     {s['readers']}")
        print(f"views       {s['views']} (+ churn views)")
        print(f"duration    {s['duration']} s")
        print(f"operations  {s['operations']}")
        print(f"bytes       {s['bytes']} ({mib(s['bytes'])})")
        print(f"errors      {s['errors']}")
        print(f"mismatches  {s['mismatches']}")
        print(f"peak memory VmHWM {mib(s['peak_hwm'])}, VmRSS {mib(s['peak_rss'])}"
              + (f" (bound {mib(s['bound'])})" if s["bound"] else " (no bound under a sanitizer)"))
        print(f"deadlock    {'yes' if s['deadlock'] else 'no'}; daemon exit status {s['daemon_status']}")
    failed = sum(1 for ok, _, _ in results if not ok)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
