"""Helpers shared by the mount benchmarks (bench/mount_vs_anndata.py, bench/atlas_scale.py):
mounting with a private disk cache and always unmounting, the daemon's counters from /proc,
and timed Python subprocesses.  Run everything with Debian's /usr/bin/python3."""
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time

PYTHON = "/usr/bin/python3"


def is_mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == os.path.realpath(path) for line in f)


def leftover_mounts(prefix="zm-bench-"):
    """Mount points of ours still in /proc/mounts (there should be none)."""
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if prefix in line.split()[1]]


@contextlib.contextmanager
def mounted(binary, source, *options, cache=None):
    """Mounts SOURCE in the foreground on a fresh directory and yields (mount point, daemon pid);
    unmounts in every outcome (fusermount3 -u, then -u -z).  Every mount starts with an empty
    disk cache of its own (a cold mount is cold), unless it is given one to share, or none at all
    (cache="none": nothing is filed, so a count of what it reads is the reader's alone)."""
    point = tempfile.mkdtemp(prefix="zm-bench-")
    keep = cache is not None
    if cache is None:
        cache = tempfile.mkdtemp(prefix="zm-bench-cache-", dir="/var/tmp")
    options = (f"cache_dir={cache}",) + options
    args = [binary, source, point, "-f"] + [a for o in options for a in ("-o", o)]
    daemon = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not is_mounted(point):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mount failed")
            time.sleep(0.05)
        yield point, daemon.pid
    finally:
        unmount(point, daemon)
        if not keep:
            shutil.rmtree(cache, ignore_errors=True)


def unmount(point, daemon):
    """Unmounts point and ends its daemon (a Popen) in every case: fusermount3 -u, a minute for
    the daemon to exit (then it is killed), -u -z if still mounted; the directory removed."""
    subprocess.run(["fusermount3", "-u", point], capture_output=True)
    try:
        daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
    if is_mounted(point):
        subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
    with contextlib.suppress(OSError):
        os.rmdir(point)


def rchar(pid):
    """Bytes the process has read by read()-like calls (/proc/PID/io)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def vm_hwm(pid):
    """The process's peak resident memory in bytes (VmHWM of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def own_rss(pid, source):
    """The process's resident memory in bytes less the pages of `source` it maps: zarrmount maps
    the source file for its direct walks (src/source/mapped.c), and those pages are the kernel's
    page cache (clean, shared with every reader of the file, dropped under pressure), which a
    read through pread would have filled all the same."""
    real = os.path.realpath(source)
    total = mapped = 0
    in_source = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if len(head) >= 5 and "-" in head[0] and not line.startswith(("Rss", "Size")) \
                    and not head[0].endswith(":"):
                in_source = len(head) == 6 and head[5].strip() == real
            elif line.startswith("Rss:"):
                kib = int(line.split()[1])
                total += kib
                if in_source:
                    mapped += kib
    return (total - mapped) * 1024


class OwnPeak:
    """The peak of own_rss, sampled every `every` seconds on a thread while the `with` block runs
    (and once at its end): the daemon's own memory, where VmHWM also counts the mapped source."""

    def __init__(self, pid, source, every=0.05):
        self.pid, self.source, self.every, self.peak = pid, source, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        with contextlib.suppress(OSError, ValueError):
            self.peak = max(self.peak, own_rss(self.pid, self.source))

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        return False


def python(code, *args):
    """Runs CODE in a fresh /usr/bin/python3 after a sync (so no writeback of an earlier step runs
    during this one); returns (wall seconds including start and imports, stdout)."""
    os.sync()
    t = time.perf_counter()
    out = subprocess.run([PYTHON, "-c", code, *args], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def read_tree(root):
    """Reads every file under ROOT as Python (zarr) would; returns the bytes read."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                total += len(f.read())
    return total


def tar_walk(root, rel):
    """`cd ROOT && tar cf - REL | wc -c`: every file read once; returns (seconds, bytes)."""
    t = time.perf_counter()
    out = subprocess.run(f"cd '{root}' && tar cf - '{rel}' | wc -c", shell=True, check=True,
                         capture_output=True, text=True).stdout
    return time.perf_counter() - t, int(out.strip())


def drop_caches():
    """Empties the page cache if we may (root, not refused); True if it did."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


# The limit's compression (atlas_scale (a), contiguous (a)): every chunk file of a store's arrays
# decompressed beforehand (keeping the filters' output: the bytes the codec compressed), then
# compressed again with the array's own compressor on THREADS threads (numcodecs releases the
# GIL; blosc's own threads off, as every chunk is one block), only that timed.  The raw bytes
# are handed over as an array of the .zarray's dtype, so that blosc's shuffle works on the
# store's item size, as the store's own chunks were made (as bytes, blosc took an item size of
# 1: byte shuffle did nothing and bit shuffle shuffled bits within bytes, and the limit
# compressed worse than the walk: 509 MiB where the walk's store held 195).  Object (strings)
# and structured dtypes stay bytes.
# argv: ROOT THREADS; prints JSON: seconds, raw, stored, recompressed, chunks, plain, codecs.
COMPRESS = r"""
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import numcodecs, numcodecs.blosc
root, threads = sys.argv[1], int(sys.argv[2])
numcodecs.blosc.use_threads = False
work, stored, raw, plain, codecs = [], 0, 0, 0, set()
for d, _, files in os.walk(root):
    if ".zarray" not in files:
        continue
    meta = json.load(open(os.path.join(d, ".zarray")))
    comp = meta.get("compressor")
    codec = numcodecs.get_codec(dict(comp)) if comp else None
    if comp:
        codecs.add(json.dumps(comp, sort_keys=True))
    dtype = np.dtype(meta["dtype"]) if isinstance(meta["dtype"], str) else None
    numeric = dtype is not None and dtype.kind in "biufc" and not meta.get("filters")
    for name in files:
        if name.startswith("."):
            continue
        b = open(os.path.join(d, name), "rb").read()
        stored += len(b)
        if codec is None:
            plain += len(b)
            continue
        r = bytes(codec.decode(b))
        raw += len(r)
        work.append((codec, np.frombuffer(r, dtype=dtype) if numeric else r))
t = time.perf_counter()
with ThreadPoolExecutor(threads) as ex:
    out = sum(len(c) for c in ex.map(lambda w: w[0].encode(w[1]), work))
sec = time.perf_counter() - t
print(json.dumps({"seconds": sec, "raw": raw, "stored": stored, "recompressed": out, "chunks": len(work),
                  "plain": plain, "codecs": sorted(codecs)}))
"""


# The limit's decoding (atlas_scale (a), contiguous (a)): a source's compressed chunks inflated
# once, as they must be for their values to be served at all.  Every chunk of every deflate
# dataset of an HDF5 file is read raw (read_direct_chunk, untimed), then inflated on THREADS
# threads (zlib releases the GIL), only that timed; shuffle is undone with numpy, timed too.
# Contiguous and unfiltered datasets cost nothing here: their bytes are read as they are.
# Any other filter is named in "other" (its decoding is then not in the limit: none of the bench
# files has one).  argv: FILE THREADS; prints JSON: seconds, chunks, stored, raw, other.
DECODE = r"""
import json, sys, time, zlib
from concurrent.futures import ThreadPoolExecutor
import h5py, numpy as np
path, threads = sys.argv[1], int(sys.argv[2])
work, other = [], set()
def visit(name, obj):
    if not isinstance(obj, h5py.Dataset) or obj.chunks is None:
        return
    plist = obj.id.get_create_plist()
    filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    if not filters:
        return
    if any(f not in (h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE) for f in filters):
        other.add(name)
        return
    at = {f: 1 << i for i, f in enumerate(filters)}  # a chunk's filter mask: bit i, filter i skipped
    for i in range(obj.id.get_num_chunks()):
        mask, raw = obj.id.read_direct_chunk(obj.id.get_chunk_info(i).chunk_offset)
        applied = [f in at and not mask & at[f] for f in (h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_DEFLATE)]
        work.append((raw, obj.dtype.itemsize if applied[0] else 0, applied[1]))
with h5py.File(path, "r") as f:
    f.visititems(visit)
def decode(w):
    raw, shuffle, deflated = w
    b = zlib.decompress(raw) if deflated else raw
    if shuffle > 1:
        b = np.frombuffer(b, np.uint8).reshape(shuffle, -1).T.tobytes()
    return len(b)
t = time.perf_counter()
with ThreadPoolExecutor(threads) as ex:
    out = sum(ex.map(decode, work))
print(json.dumps({"seconds": time.perf_counter() - t, "chunks": len(work),
                  "stored": sum(len(w[0]) for w in work), "raw": out, "other": sorted(other)}))
"""
