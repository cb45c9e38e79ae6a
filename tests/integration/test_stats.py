#!/usr/bin/python3
"""The mount's counters (.zarrmount/stats.json and `zarrmount stats`), as a
user of a lazy store checks them (docs/mount.md, "Stats"):

- opening a view (looking it up, listing it, reading its metadata) makes no
  chunk and reads no source chunk for its files; what building it reads
  (its cells' index pointers) is counted apart, under "build";
- reading one chunk synthesizes exactly that chunk and reads exactly the
  source chunks (and their stored bytes) it needs, computed here from the
  HDF5 chunk layout with h5py; a walked array's first chunk reads the
  source chunks holding the view's cells, its next chunk reads nothing;
- reading it again, once the kernel has dropped its pages
  (posix_fadvise DONTNEED, so the read reaches the daemon), is a cache hit;
- refused paths are counted, per view and in total, with their reasons;
- stats.json is a fresh, complete snapshot at every open, its size exact;
- `zarrmount stats MNT --json` is that JSON, the table prints every view,
  and --watch redraws until interrupted;
- synthesis ahead: once a view is read, a worker makes its chunks, first
  cells first, and says so; it stops when the view is idle (and starts
  again at the next request), stops at its share of the file cache, makes
  the bytes a reader would (all but per-cell strings, left to readers), and
  is off with ahead_idle=0.
(The counting checks mount with ahead_idle=0: they count what a reader's
own requests cost.)

Mounts go through contrib/python/zarrmount.py, the Python helper, which
unmounts in every outcome (and run_mount_test.sh, which
also unmounts whatever a crash leaves). No step has a time limit. Prints TAP.
"""
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import h5py
import numpy as np

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
# Mounts go through the Python helper, which runs $ZARRMOUNT.
sys.path.insert(0, os.path.join(ROOT, "contrib", "python"))
os.environ["ZARRMOUNT"] = os.path.abspath(BINARY)
import zarrmount  # noqa: E402
SOURCES = [
    # Chunked arrays of several chunks each, deflated: reads are countable.
    os.path.join(ROOT, "fixtures/sources/filters/gzip1.h5ad"),
    # One chunk an array, and contiguous obs columns (read by pread).
    os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad"),
]
CHUNK_BYTES = 64  # -o chunk_size: a few rows a chunk, so arrays have several
results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))


@contextlib.contextmanager
def mounted(source, *options):
    """Mounts source in a new directory through the Python helper (contrib/python/zarrmount.py),
    which unmounts in every outcome; yields the mount point."""
    point = tempfile.mkdtemp(prefix="zm-stats-", dir=os.environ.get("ZM_MOUNT_PARENT"))
    try:
        with zarrmount.mount(source, point, **dict(option.split("=", 1) for option in options)) as m:
            yield str(m.path)
    finally:
        os.rmdir(point)


def read_to_end(fd):
    data = b""
    while True:
        piece = os.read(fd, 1 << 20)
        if not piece:
            return data
        data += piece


def stats(point):
    """One snapshot: the file read whole through one descriptor, whose fstat
    size must be exactly what was read."""
    fd = os.open(os.path.join(point, ".zarrmount/stats.json"), os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        data = read_to_end(fd)
    finally:
        os.close(fd)
    if size != len(data):
        raise AssertionError(f"stats.json: fstat says {size} bytes, read gave {len(data)}")
    return json.loads(data)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def reread_from_daemon(path):
    """Drops the kernel's pages of path, then reads it: the read reaches the
    daemon (the kernel otherwise serves a file it read before itself)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return read_to_end(fd)
    finally:
        os.close(fd)


def source_cost(h5, name, rows):
    """Source chunks and stored bytes a read of the given rows (along the
    first dimension) of dataset `name` takes: each chunk holding one of
    them, once; a contiguous dataset is pread row by row range."""
    d = h5[name]
    rows = sorted(set(rows))
    if d.chunks is None:
        # Runs of rows, merged when less than MERGE_GAP_BYTES (8 KiB) apart
        # and at most PIECE_BYTES (4 MiB) long (src/source/read.c): a read
        # costs about what copying that many bytes does.
        row_bytes = d.dtype.itemsize * (int(np.prod(d.shape[1:])) if d.ndim > 1 else 1)
        piece_rows = max(1, (4 << 20) // row_bytes)
        spans = []
        for r in rows:
            if spans and (r - spans[-1][1]) * row_bytes < 8192 and r + 1 - spans[-1][0] <= piece_rows:
                spans[-1][1] = r + 1
            else:
                spans.append([r, r + 1])
        return 0, sum(b - a for a, b in spans) * row_bytes
    per = d.chunks[0]
    wanted = sorted({r // per for r in rows})
    stored = 0
    if d.ndim == 1 and d.id.get_create_plist().get_nfilters() == 0:
        # Unfiltered chunks are read where they lie (src/source/read_chunked.c):
        # each chunk from its start to the last row wanted of it.
        for c in wanted:
            last = max(r for r in rows if r // per == c)
            stored += (last + 1 - c * per) * d.dtype.itemsize
        return len(wanted), stored
    for c in wanted:
        for other in range(-(-d.shape[1] // d.chunks[1]) if d.ndim > 1 else 1):
            coords = (c * per,) + ((other * d.chunks[1],) if d.ndim > 1 else ())
            stored += d.id.get_chunk_info_by_coord(coords).size
    return len(wanted) * (-(-d.shape[1] // d.chunks[1]) if d.ndim > 1 else 1), stored


def delta(after, before, *keys):
    a, b = after, before
    for k in keys:
        a, b = a.get(k, {}) if isinstance(a, dict) else 0, b.get(k, {}) if isinstance(b, dict) else 0
    return (a or 0) - (b or 0)


def view(snapshot, key):
    return snapshot["views"].get(key, {})


def sparse_pointer_chunks(h5):
    """Chunks of every index pointer array (what building a view may read)."""
    count = 0

    def visit(name, item):
        nonlocal count
        if isinstance(item, h5py.Dataset) and name.endswith("indptr"):
            count += item.id.get_num_chunks() if item.chunks else 0

    h5.visititems(visit)
    return count


def a_column(h5):
    """An obs column of numbers (to read chunks of)."""
    for name in ("obs/n_counts", "obs/float32"):
        if name in h5 and isinstance(h5[name], h5py.Dataset):
            return name
    raise RuntimeError("no numeric obs column")


def check_file_view(path, h5, label):
    """file/: rows in file order, no walks: a chunk reads its own rows."""
    column = a_column(h5)
    with mounted(path, f"chunk_size={CHUNK_BYTES}", "ahead_idle=0") as point:
        s0 = stats(point)
        check(f"{label}: a fresh mount has no view counters yet", "file" not in s0["views"])
        root = os.path.join(point, "file")
        os.listdir(root)
        for meta in (".zgroup", ".zattrs", ".zmetadata", f"{column}/.zarray", f"{column}/.zattrs",
                     "X/.zattrs", "X/data/.zarray"):
            read_file(os.path.join(root, meta))
        os.listdir(os.path.join(root, column))
        s1 = stats(point)
        v = view(s1, "file")
        check(f"{label}: opening a view synthesizes no chunk", v.get("chunksSynthesized") == 0, v)
        check(f"{label}: opening a view reads no source chunk for its files",
              v["source"]["chunksDecoded"] == 0 and v["source"]["bytesRead"] == 0, v)
        check(f"{label}: its metadata documents are made and counted",
              v["documentsSynthesized"] >= 5 and v["cache"]["misses"] == v["documentsSynthesized"], v)
        check(f"{label}: building it is counted apart: once, reading at most its index pointers",
              v["build"]["builds"] == 1 and
              v["build"]["source"]["chunksDecoded"] <= sparse_pointer_chunks(h5), v["build"])
        check(f"{label}: lookups and listings reach the view's counters",
              v["lookups"] >= 8 and v["listings"] >= 2, v)

        # One chunk of a column: its rows' source chunks, nothing else.
        rows_per_chunk = json.loads(read_file(os.path.join(root, column, ".zarray")))["chunks"][0]
        chunk = os.path.join(root, column, "0")
        s1 = stats(point)
        read_file(chunk)
        s2 = stats(point)
        chunks, stored = source_cost(h5, column, range(min(rows_per_chunk, h5[column].shape[0])))
        v1, v2 = view(s1, "file"), view(s2, "file")
        check(f"{label}: reading one chunk synthesizes one",
              delta(v2, v1, "chunksSynthesized") == 1 and delta(v2, v1, "cache", "misses") == 1,
              (v1, v2))
        check(f"{label}: ... reading only the source chunks it needs ({chunks}, {stored} bytes)",
              delta(v2, v1, "source", "chunksDecoded") == chunks and
              delta(v2, v1, "source", "bytesRead") == stored, (v1["source"], v2["source"]))
        check(f"{label}: ... and the total counts the same",
              delta(s2["total"], s1["total"], "source", "chunksDecoded") == chunks and
              delta(s2["total"], s1["total"], "chunksSynthesized") == 1, (s1["total"], s2["total"]))
        check(f"{label}: the bytes it holds are the file's", v2["cache"]["bytesHeld"] -
              v1["cache"]["bytesHeld"] == os.stat(chunk).st_size, (v1["cache"], v2["cache"]))

        data = reread_from_daemon(chunk)
        s3 = stats(point)
        v3 = view(s3, "file")
        check(f"{label}: reading it again is a cache hit",
              delta(v3, v2, "cache", "hits") >= 1 and delta(v3, v2, "cache", "misses") == 0 and
              delta(v3, v2, "reads") >= 1 and delta(v3, v2, "bytesServed") == len(data), (v2, v3))
        check(f"{label}: ... that synthesizes nothing and reads no source",
              delta(v3, v2, "chunksSynthesized") == 0 and
              delta(v3, v2, "source", "chunksDecoded") == 0 and
              delta(v3, v2, "source", "bytesRead") == 0, (v2, v3))
        # The daemon's time over the view's requests: it grew with them, holds the view's
        # builds (made during a lookup), and the total holds every view's.
        check(f"{label}: daemonSeconds grows with the requests answered",
              v1["daemonSeconds"] > 0 and delta(v2, v1, "daemonSeconds") > 0 and
              delta(v3, v2, "daemonSeconds") >= 0, (v1["daemonSeconds"], v2["daemonSeconds"], v3["daemonSeconds"]))
        check(f"{label}: ... and holds the view's builds",
              v3["daemonSeconds"] + 0.0015 >= v3["build"]["seconds"], (v3["daemonSeconds"], v3["build"]))
        check(f"{label}: ... the total holds every view's and the outside's",
              s3["total"]["daemonSeconds"] + 1e-5 * (len(s3["views"]) + 1) >=
              sum(x["daemonSeconds"] for x in s3["views"].values()) + s3["outsideViews"]["daemonSeconds"],
              (s3["total"]["daemonSeconds"], {k: x["daemonSeconds"] for k, x in s3["views"].items()}))

        # The entries of a sparse matrix: the data chunks of its first entries.
        entries = json.loads(read_file(os.path.join(root, "X/data/.zarray")))["chunks"][0]
        s3 = stats(point)
        read_file(os.path.join(root, "X/data/0"))
        s4 = stats(point)
        chunks, stored = source_cost(h5, "X/data", range(min(entries, h5["X/data"].shape[0])))
        v3, v4 = view(s3, "file"), view(s4, "file")
        check(f"{label}: a chunk of X/data reads its entries' source chunks ({chunks}, {stored} bytes)",
              delta(v4, v3, "chunksSynthesized") == 1 and
              delta(v4, v3, "source", "chunksDecoded") == chunks and
              delta(v4, v3, "source", "bytesRead") == stored, (v3, v4))

        # Refused paths, per view and in total, with reasons.
        for missing in ("file/no_such_array", "file/X/data/999999", "uniform/seed0/k=0"):
            try:
                os.stat(os.path.join(point, missing))
                check(f"{label}: {missing} is refused", False, "it exists")
            except OSError as e:
                check(f"{label}: {missing} is refused (ENOENT)", e.errno == errno.ENOENT, e)
        s5 = stats(point)
        check(f"{label}: refused paths count in their view",
              delta(view(s5, "file"), v4, "refused") == 2, view(s5, "file"))
        check(f"{label}: ... and in the total",
              delta(s5["total"], s4["total"], "refused") == 3, s5["total"])
        refused = [r["path"] for r in s5["refusals"]]
        check(f"{label}: the refusals are listed newest first, with reasons",
              refused[:3] == ["uniform/seed0/k=0", "file/X/data/999999", "file/no_such_array"] and
              all(r["reason"] for r in s5["refusals"]), s5["refusals"])

        check_snapshots_and_cli(point, label)


def check_walk(path, h5, label):
    """A subsample: its per-cell arrays are walked (gathered whole in one
    pass) at their first chunk. codec=none: no chunk is encoded ahead, so
    exactly the chunks read are made. passthrough=off: every read reaches
    the daemon (with it, a chunk an earlier mount kept on disk is read by the
    kernel from there)."""
    column = a_column(h5)
    key = "uniform/seed0/k=30"
    with mounted(path, f"chunk_size={CHUNK_BYTES}", "codec=none", "ahead_idle=0", "passthrough=off") as point:
        root = os.path.join(point, key)
        os.listdir(root)
        read_file(os.path.join(root, ".zmetadata"))
        grid = json.loads(read_file(os.path.join(root, column, ".zarray")))
        s1 = stats(point)
        v1 = view(s1, key)
        check(f"{label}: opening {key} synthesizes no chunk and reads nothing for its files",
              v1["chunksSynthesized"] == 0 and v1["source"]["chunksDecoded"] == 0 and
              v1["source"]["bytesRead"] == 0, v1)
        read_file(os.path.join(root, column, "0"))
        s2 = stats(point)
        v2 = view(s2, key)
        read_file(os.path.join(root, column, "1"))
        s3 = stats(point)
        v3 = view(s3, key)
        # The view's cells, from a chunk that reads no source.
        positions = np.concatenate([
            np.frombuffer(read_file(os.path.join(root, "obs/cellucid_original_position", str(c))),
                          dtype="<u4")
            for c in range(-(-30 // json.loads(read_file(os.path.join(
                root, "obs/cellucid_original_position/.zarray")))["chunks"][0]))])[:30]
        chunks, stored = source_cost(h5, column, [int(p) for p in positions])
        check(f"{label}: {column} has several chunks in {key} (walked)",
              grid["shape"][0] > grid["chunks"][0], grid)
        check(f"{label}: its first chunk synthesizes one chunk",
              delta(v2, v1, "chunksSynthesized") == 1, (v1, v2))
        check(f"{label}: ... and the walk reads the source chunks of the view's cells "
              f"({chunks}, {stored} bytes)",
              delta(v2, v1, "source", "chunksDecoded") == chunks and
              delta(v2, v1, "source", "bytesRead") == stored, (v1["source"], v2["source"]))
        check(f"{label}: its next chunk is cut from the walk: one made, no source read",
              delta(v3, v2, "chunksSynthesized") == 1 and
              delta(v3, v2, "source", "chunksDecoded") == 0 and
              delta(v3, v2, "source", "bytesRead") == 0, (v2, v3))
        walks = [w for w in s3["recentWorks"] if w["view"] == key and
                 w["what"] == f"reading /{column}"]
        check(f"{label}: the walk is listed as a finished work, done = total",
              len(walks) == 1 and walks[0]["done"] == walks[0]["total"] and
              walks[0]["unit"] in ("chunks", "pieces") and "secondsLeft" not in walks[0],
              s3["recentWorks"])
        check(f"{label}: nothing is in progress once reads are done",
              s3["works"] == [], s3["works"])
        s4 = stats(point)
        reread_from_daemon(os.path.join(root, column, "0"))
        s5 = stats(point)
        # codec=none: a whole chunk of a walk in memory is served from the
        # walk (never copied into the file cache): nothing made, nothing
        # looked up. (Being served from a walk starts the walk of the next
        # array ahead, whose source reads count in the view's.)
        check(f"{label}: the walked chunk read again is served from the walk: nothing made",
              delta(view(s5, key), view(s4, key), "reads") >= 1 and
              delta(view(s5, key), view(s4, key), "chunksSynthesized") == 0 and
              delta(view(s5, key), view(s4, key), "cache", "misses") == 0 and
              delta(view(s5, key), view(s4, key), "cache", "hits") == 0,
              (view(s4, key), view(s5, key)))


def filtered_chunks(h5):
    """Whether any dataset of the file is chunked with a filter (or is a loom's
    matrix, stored transposed): what the daemon's decoded-chunk cache keeps."""
    found = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.chunks is not None and (
                obj.id.get_create_plist().get_nfilters() > 0 or
                (h5.filename.endswith(".loom") and name == "matrix")):
            found.append(name)
    h5.visititems(visit)
    return bool(found)


def check_spilled_walk(path, h5, label):
    """Walks beyond what walks may hold in memory (a quarter of cache_size)
    go through a spill file in batches: the same bytes as walks held in
    memory, for the whole source and for a subsample."""
    keys = ("full", "uniform/seed1/k=30")
    options = (f"chunk_size={CHUNK_BYTES}", "cache_dir=none", "ahead_idle=0")
    with mounted(path, *options) as point:
        held = {key: tree_digest(os.path.join(point, key)) for key in keys}
        s_held = stats(point)
    with mounted(path, *options, "cache_size=1K") as point:
        spilled = {key: tree_digest(os.path.join(point, key)) for key in keys}
        s_spilled = stats(point)
    check(f"{label}: walks are held in memory by default (none spilled)",
          s_held["total"]["walks"]["spilled"] == 0 and s_held["total"]["walks"]["heldBytes"] > 0,
          s_held["total"]["walks"])
    # A quarter, and the decoded-chunk cache's quarter too where the source has no
    # filtered chunk for it to keep (zm_source_chunk_cache_need).
    with h5py.File(path, "r") as f:
        limit = 256 if filtered_chunks(f) else 512
    check(f"{label}: with cache_size=1K walks are spilled, none held "
          f"(limit {limit} bytes)",
          s_spilled["total"]["walks"]["spilled"] > 0 and
          s_spilled["total"]["walks"]["heldBytes"] <= limit and
          s_spilled["total"]["walks"]["limitBytes"] == limit, s_spilled["total"]["walks"])
    for key in keys:
        differ = sorted(name for name in held[key] if spilled[key].get(name) != held[key][name])
        check(f"{label}: {key}: every file the same, walks spilled or held "
              f"({len(held[key])} files)",
              not differ and held[key].keys() == spilled[key].keys(), differ[:5])


def check_snapshots_and_cli(point, label):
    a, b = stats(point), stats(point)
    check(f"{label}: every open of stats.json is a new snapshot", b["snapshot"] > a["snapshot"],
          (a["snapshot"], b["snapshot"]))
    check(f"{label}: the total adds up the views and paths outside them",
          b["total"]["lookups"] == b["outsideViews"]["lookups"] +
          sum(v["lookups"] for v in b["views"].values()) and
          b["total"]["cache"]["hits"] == sum(v["cache"]["hits"] for v in b["views"].values()),
          b)
    for _ in range(3):
        done = subprocess.run(["cat", os.path.join(point, ".zarrmount/stats.json")],
                              capture_output=True)
        try:
            json.loads(done.stdout)
            ok = done.returncode == 0
        except ValueError as e:
            ok = e
        check(f"{label}: cat stats.json gives complete JSON", ok is True, ok)
    with open(os.path.join(point, ".zarrmount/stats.json")) as f:
        check(f"{label}: Python's open().read() gives complete JSON",
              isinstance(json.loads(f.read()), dict))
    check(f"{label}: .zarrmount lists stats.json",
          sorted(os.listdir(os.path.join(point, ".zarrmount"))) == ["info.json", "stats.json"])

    done = subprocess.run([BINARY, "stats", point, "--json"], capture_output=True, text=True)
    got = json.loads(done.stdout) if done.returncode == 0 else {}
    now = stats(point)
    same = (done.returncode == 0 and set(got) == set(now) and set(got["views"]) == set(now["views"]) and
            all(got["views"][k] == now["views"][k] for k in got["views"]))
    check(f"{label}: zarrmount stats --json is stats.json", same, done.stderr or (got, now))
    done = subprocess.run([BINARY, "stats", point], capture_output=True, text=True)
    lines = done.stdout.splitlines()
    check(f"{label}: zarrmount stats prints a table of every view and the total",
          done.returncode == 0 and any(l.startswith("VIEW") for l in lines) and
          all(any(l.split()[:1] == [k] for l in lines) for k in now["views"]) and
          any(l.startswith("total ") for l in lines) and
          any(l.startswith("(outside views)") for l in lines), done.stdout + done.stderr)
    disk = now["diskCache"]
    said = [l for l in lines if l.startswith("Disk cache:")]
    # The counters move while the disk writer files entries: the form, not the numbers.
    form = (r"Disk cache: \d+ hits, \d+ misses, \d+ written, \d+ evicted, \d+ damaged, \d+ moved "
            r"from an older format; \d+ entries, [\d.]+ [KMGT]?i?B held of [\d.]+ [KMGT]?i?B\.$")
    check(f"{label}: zarrmount stats says what the disk cache did",
          len(said) == 1 and (said[0] == "Disk cache: off." if disk is None else re.match(form, said[0])), said)

    watcher = subprocess.Popen([BINARY, "stats", point, "--watch"], stdout=subprocess.PIPE)
    try:
        frames, text = 0, b""
        while frames < 2:
            line = watcher.stdout.readline()
            if not line:
                break
            text += line
            frames += line.startswith(b"Work in progress")
        watcher.send_signal(signal.SIGINT)
        rest = watcher.stdout.read()
        code = watcher.wait()
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    check(f"{label}: zarrmount stats --watch redraws, and Ctrl-C ends it cleanly",
          frames == 2 and text.count(b"\033[H\033[2J") >= 2 and code == 0, (frames, code, rest[-200:]))


def check_cli_refusals():
    done = subprocess.run([BINARY, "stats"], capture_output=True, text=True)
    check("zarrmount stats without a mount point: exit 2 and a reason",
          done.returncode == 2 and "MOUNTPOINT" in done.stderr, done.stderr)
    with tempfile.TemporaryDirectory() as empty:
        done = subprocess.run([BINARY, "stats", empty], capture_output=True, text=True)
        check("zarrmount stats on a directory that is no mount: exit 1, saying so",
              done.returncode == 1 and "not a zarrmount mount" in done.stderr, done.stderr)


def tree_digest(root):
    """Every file under root, by relative path: its bytes."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            out[os.path.relpath(path, root)] = read_file(path)
    return out


def wait_for(point, key, predicate, what):
    """Polls the view's counters until predicate holds (no time limit on
    the daemon: a generous deadline only keeps a broken build from hanging
    the run)."""
    deadline = time.monotonic() + 300
    while True:
        v = stats(point)["views"].get(key, {})
        if predicate(v.get("ahead", {})):
            return v
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: never happened; last {v.get('ahead')}")
        time.sleep(0.1)


def check_ahead():
    path = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
    key = "uniform/seed2/k=50"
    small = "chunk_size=256"
    with mounted(path, small, "ahead_idle=0") as point:
        want = tree_digest(os.path.join(point, key))
        off = stats(point)["views"][key]["ahead"]
    check("ahead: off with ahead_idle=0", off["state"] == "none" and off["chunks"] == 0, off)

    # Paced (ahead_rate) so that an idle second stops it half way. No disk
    # cache: chunks an earlier mount kept there are the kernel's to read
    # (the worker passes them over), and a read that reaches the daemon makes
    # them from there, which would count as chunks the worker left.
    with mounted(path, small, "ahead_idle=1", "ahead_rate=40", "cache_dir=none") as point:
        root = os.path.join(point, key)
        check("ahead: nothing runs before a view is read", key not in stats(point)["views"])
        read_file(os.path.join(root, ".zattrs"))
        running = wait_for(point, key, lambda a: a.get("chunks", 0) > 0, "starting")
        snapshot = stats(point)
        works = [w for w in snapshot["works"] if w["view"] == key and "ahead" in w["what"]]
        check("ahead: reading a view starts its worker, shown as a work in progress",
              running["ahead"]["state"] in ("running", "stopped: idle") and
              (works or running["ahead"]["state"] != "running"), snapshot["works"])
        idle = wait_for(point, key, lambda a: a.get("state") == "stopped: idle", "stopping when idle")
        made = idle["ahead"]["chunks"]
        time.sleep(2.5)
        still = stats(point)["views"][key]
        check("ahead: it stops when nobody reads the view, part way",
              0 < made and still["ahead"]["chunks"] == made and still["ahead"]["state"] == "stopped: idle" and
              not [w for w in stats(point)["works"] if w["view"] == key and "ahead" in w["what"]],
              f"{made} then {still['ahead']}")
        check("ahead: ... before it made every chunk (paced)", still["chunksSynthesized"] < len(want) - 3,
              f"{still['chunksSynthesized']} of {len(want)} files")
        # First cells first: an array's first chunk is made, its last not
        # yet (a var column: not walked, so reading one chunk makes only it).
        var = os.path.join(root, "var")
        column = next(c for c in sorted(os.listdir(var))
                      if os.path.isdir(os.path.join(var, c)) and
                      len([n for n in os.listdir(os.path.join(var, c)) if n.isdigit()]) > 1)
        chunks = sorted((n for n in os.listdir(os.path.join(var, column)) if n.isdigit()), key=int)
        before = stats(point)["views"][key]["chunksSynthesized"]
        read_file(os.path.join(var, column, chunks[0]))
        first = stats(point)["views"][key]["chunksSynthesized"]
        read_file(os.path.join(var, column, chunks[-1]))
        last = stats(point)["views"][key]["chunksSynthesized"]
        check(f"ahead: first cells first (var/{column}: its first chunk was made ahead, its last not yet)",
              first == before and last == before + 1, f"{before} -> {first} -> {last}")
        again = wait_for(point, key, lambda a: a.get("runs", 0) >= 2, "starting again")
        check("ahead: a request after idleness starts it again", again["ahead"]["runs"] >= 2, again["ahead"])
        # Keep reading (a file a tenth of a second, from the daemon) until it
        # has made every chunk.
        deadline = time.monotonic() + 300
        while stats(point)["views"][key]["ahead"]["state"] != "done" and time.monotonic() < deadline:
            reread_from_daemon(os.path.join(root, ".zattrs"))  # the kernel would answer a plain read
            time.sleep(0.1)
        done = stats(point)["views"][key]
        got = tree_digest(root)
        final = stats(point)["views"][key]
        check("ahead: while the view is read it goes through every chunk", done["ahead"]["state"] == "done", done["ahead"])
        check("ahead: the bytes made ahead are the bytes a reader makes", got == want,
              [k for k in want if got.get(k) != want[k]][:5])
        # ... except chunks of per-cell strings, whose walk the worker leaves
        # to readers (HDF5 reads strings under its global lock).
        strings = 0
        for name in want:
            parent = os.path.dirname(name)
            if os.path.basename(name)[0].isdigit() and parent + "/.zarray" in want:
                dtype = json.loads(want[parent + "/.zarray"])["dtype"]
                strings += dtype.startswith("<U") or dtype == "|O"
        # ... and of any walk it leaves to readers (one larger than its share of
        # the walks' memory, or while an encoding ahead of the view runs):
        # stats.json counts them, strings among them.
        left = done["ahead"]["leftToReaders"]
        check("ahead: a reader then finds every chunk made but those it left to readers (strings)",
              done["chunksSynthesized"] <= final["chunksSynthesized"] <= done["chunksSynthesized"] + left,
              f"{done['chunksSynthesized']} -> {final['chunksSynthesized']} ({left} left to readers, "
              f"{strings} string chunks)")

    # Bounded by the cache: cache_size=16K gives files 8 KiB, and the worker
    # at most half of that (and a chunk).
    with mounted(path, small, "cache_size=16K", "ahead_idle=30") as point:
        read_file(os.path.join(point, key, ".zattrs"))
        bound = wait_for(point, key, lambda a: a.get("state") not in (None, "running"), "stopping")
        check("ahead: it stops at its share of the file cache",
              bound["ahead"]["state"] == "stopped: cache bound" and 4 * 1024 <= bound["ahead"]["bytes"] < 4 * 1024 + 4096,
              bound["ahead"])

    for option in ("ahead_idle=-1", "ahead_idle=soon", "ahead_rate=1e9x"):
        done = subprocess.run([BINARY, path, "/nonexistent-mount-point", "-o", option], capture_output=True, text=True)
        check(f"ahead: -o {option} is refused in one line naming it",
              done.returncode == 2 and option.split("=")[0] in done.stderr and done.stderr.count("\n") == 1, done.stderr)


def main():
    try:
        check_ahead()
    except Exception:  # noqa: BLE001
        check("ahead", False, traceback.format_exc(limit=4))
    for path in SOURCES:
        label = os.path.relpath(path, ROOT)
        with h5py.File(path, "r") as h5:
            for test in (check_file_view, check_walk, check_spilled_walk):
                try:
                    test(path, h5, label)
                except Exception:  # noqa: BLE001
                    check(f"{label}: {test.__name__}", False, traceback.format_exc(limit=4))
    # Spilled walks of the other layouts: loom (genes × cells, read across),
    # 10x (CSC of genes: its cells are columns) and an h5ad whose X is CSC
    # (its entries renumbered over the kept cells, walked in order).
    for name in ("loom/full.loom", "10x/v3-two-feature-types.h5", "h5ad/x-csc.h5ad"):
        path = os.path.join(ROOT, "fixtures/sources", name)
        try:
            check_spilled_walk(path, None, name)
        except Exception:  # noqa: BLE001
            check(f"{name}: check_spilled_walk", False, traceback.format_exc(limit=4))
    check_cli_refusals()
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-8:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
