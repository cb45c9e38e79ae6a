#!/usr/bin/python3
"""Cellucid's own priority-ordered files through a mount (issue 20; the specification's
"Priority-ordered files", ../shared/seeds/subsampling-spec.txt). The sources are written at test
time by make_priority_sources.py (an ordinary file, the files Cellucid writes from it, files
whose record does not verify, a gene-major file with prefix counts and broken copies of it):

- a verified file (seeds 0, 7 and 4000000000; one with levels ascending and stopped early):
  info.json, `inspect --json` and `explain --json` say {"verified": true, "seed": S} (the text
  of inspect says so too); every view named below keeps the cells `zarrmount select` gives on
  the original, and equals the same view of the original cell for cell (the position column,
  the obs index and columns, X, obsm and obsp rows, var, varm, uns); file/ is the stored order
  (the original's rows in the seed's order, the stored position column); full/ is the stored
  rows as they are with the record {seed: S, specVersion: 1, nObs: n}; no other view carries
  uns/cellucid/priority;
- a uniform view under the file's seed is the stored prefix: the source bytes its X reads (its
  view's counters in stats.json, reading and building) are at most 1.2 times the compressed
  bytes of the source chunks its rows and entries lie in (computed here with h5py), where the
  same view of the original reads nearly all of X; the same for a gene-major X with prefix
  counts (each gene's counted entries and one more);
- prefix counts inconsistent with the matrix (above a gene's entries, decreasing) are refused
  with one line; counts that disagree with the stored rows make the prefix view's X fail with
  EIO, and nothing of it read is wrong;
- a record that does not verify (wrong nObs, another seed's order, a subset saved again, a
  renumbered prefix, wrong levels, another specVersion, a position column with no record): the
  file mounts and is read as one Cellucid did not write (each row its own position, the views
  those of `select` over its own rows), info.json, inspect and explain say why, and the log
  says it once;
- round trips: anndata.read_zarr of full/ (of the mount, and of `zarrmount export`) written
  back with write_h5ad is a verified priority file whose views keep the original's cells.

Mounts use cache_dir=none and ahead_idle=0 (no disk cache, no work ahead: the counters count a
reader's own requests). Every mount is unmounted in every outcome (run by run_mount_test.sh,
which also unmounts whatever a crash leaves). No step has a time limit. Prints TAP.
"""
import errno
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import h5py  # noqa: E402
import numcodecs  # noqa: E402

import live_mount  # noqa: E402
from live_mount import BINARY, PARENT, Mount, check, report  # noqa: E402
import make_priority_sources as gen  # noqa: E402
import readers  # noqa: E402
import views  # noqa: E402
from views import Differ  # noqa: E402

OPTIONS = ("cache_dir=none", "ahead_idle=0")
N = gen.N_CELLS
K = 300                  # the subsample size most views take (a tenth)
PREFIX_BOUND = 1.2       # a prefix reads at most this times the bytes of its chunks
NEARLY_ALL = 0.9         # the unordered file's same view reads at least this share of X
POSITION = "cellucid_original_position"
PREFIX_COUNTS = "cellucid_prefix_counts"


# ---- Views and their reference cells ---------------------------------------------------------

def uniform(seed, k):
    return f"uniform/seed{seed}/k={k}", {"method": "uniform", "seed": seed, "k": k}


def blocks(block_size, seed, k):
    return (f"blocks/B={block_size}/seed{seed}/k={k}",
            {"method": "blocks", "seed": seed, "k": k, "blockSize": block_size})


def stratified(field, seed, k, allocation=None, minimum=None):
    request = {"method": "stratified", "field": field, "seed": seed, "k": k}
    if allocation is None:
        return f"stratified/{field}/seed{seed}/k={k}", request
    request.update(allocation=allocation, minimum=minimum)
    return f"stratified/{field}/{allocation}/min={minimum}/seed{seed}/k={k}", request


def spatial(key, seed, k, grid=None, columns=None):
    request = {"method": "spatial", "embedding": key, "seed": seed, "k": k}
    if grid is None:
        return f"spatial/{key}/seed{seed}/k={k}", request
    request.update(gridSize=grid, columns=columns)
    return f"spatial/{key}/G={grid}/cols={','.join(map(str, columns))}/seed{seed}/k={k}", request


def views_of_seed(seed):
    """The views a verified CSR file of this seed is checked on (a few of each method: under the
    file's own seed, where uniform is the stored prefix, and under others)."""
    other = 7 if seed != 7 else 0
    out = [uniform(seed, K), uniform(other, K), blocks(16, seed, 500), stratified("cell_type", seed, K),
           spatial("X_umap", seed, K)]
    if seed == 0:
        out += [uniform(0, 1)]
    if seed == 7:
        out += [uniform(7, N - 1), uniform(4294967295, 1000), blocks(1, 7, K), blocks(100, 3, 450),
                stratified("donor", 5, 200, "balanced", 10), spatial("X_umap", 2, 250, 8, [1, 0])]
    return out


CSC_VIEWS = [uniform(gen.CSC_SEED, gen.CSC_PREFIX_K), uniform(gen.CSC_SEED, 1000), uniform(gen.CSC_SEED, 5),
             uniform(0, K), blocks(16, gen.CSC_SEED, K), stratified("cell_type", 1, K)]
UNVERIFIED_VIEWS = [uniform(7, K), blocks(16, 0, 500), stratified("cell_type", 7, K)]


_selected = {}


def select(source, request, n):
    """The cells `zarrmount select` keeps, in their priority order (--source for a field or an
    embedding, read from that file as the mount reads it)."""
    key = (source, json.dumps(request, sort_keys=True), n)
    if key not in _selected:
        body = dict(request, n=n)
        args = [BINARY, "select"]
        if "field" in request or "embedding" in request:
            args += ["--source", source]
            del body["n"]
        done = subprocess.run(args, input=json.dumps(body), capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"zarrmount select {body}: {done.stdout.strip()} {done.stderr.strip()}")
        _selected[key] = np.asarray(json.loads(done.stdout)["order"], dtype=np.int64)
    return _selected[key]


# ---- Reading and comparing -------------------------------------------------------------------

def read_json(path):
    with open(path, "rb") as f:
        return json.loads(f.read())


def read_view(mount, view):
    return views.read_view(os.path.join(mount.point, view))


def positions_of(adata):
    column = adata.obs.get(POSITION)
    if column is None:
        raise Differ(f"/obs: no {POSITION} column")
    if column.dtype != np.uint32:
        raise Differ(f"/obs/{POSITION}: dtype {column.dtype}, not uint32")
    return column.to_numpy().astype(np.int64)


def first_difference(got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"{len(got)} rows, {len(want)} expected (first {got[:6].tolist()} vs {want[:6].tolist()})"
    where = np.flatnonzero(got != want)
    return (f"{len(where)} of {len(want)} differ, first at row {where[0]}: {got[where[0]]} "
            f"instead of {want[where[0]]}" if len(where) else "")


def record_of(adata):
    """uns['cellucid']['priority'] as plain values (ints; levels a list), or None."""
    record = adata.uns.get("cellucid", {}).get("priority") if hasattr(adata.uns.get("cellucid", {}), "get") \
        else None
    if record is None:
        return None
    out = {}
    for key, value in record.items():
        value = np.asarray(value)
        out[key] = [int(v) for v in value.ravel()] if value.ndim else int(value)
    return out


def without_record(uns):
    """uns without cellucid/priority (and without cellucid when nothing else is left in it)."""
    uns = dict(uns)
    if "cellucid" in uns:
        rest = {k: v for k, v in dict(uns["cellucid"]).items() if k != "priority"}
        if rest:
            uns["cellucid"] = rest
        else:
            del uns["cellucid"]
    return uns


def same_cells(got, want, varm_ignored=()):
    """Raises Differ where two views differ in any per-cell or per-gene element (obs with its
    index, X, obsm, obsp, layers, var, varm); uns is left to the caller."""
    views.same(got.obs, want.obs, "/obs")
    views.same(got.X, want.X, "/X")
    for part in ("obsm", "obsp", "layers"):
        views.same(dict(getattr(got, part)), dict(getattr(want, part)), f"/{part}")
    views.same(got.var, want.var, "/var")
    views.same({k: v for k, v in dict(got.varm).items() if k not in varm_ignored},
               {k: v for k, v in dict(want.varm).items() if k not in varm_ignored}, "/varm")


def stripped(adata):
    """The source as it would be without Cellucid's records: no position column (a view puts its
    own in its place), no uns/cellucid/priority."""
    out = readers.subset(adata, np.arange(adata.n_obs))
    if POSITION in out.obs.columns:
        out.obs = out.obs.drop(columns=[POSITION])
    out.uns = without_record(out.uns)
    return out


def expected_view(ref, order):
    """ref cut to order, with the position column a view adds (last, as a view appends it)."""
    out = readers.subset(ref, order)
    out.obs[POSITION] = np.asarray(order, dtype=np.uint32)
    return out


def attempt(name, call):
    """Runs call(); a Differ or any error is that check's failure, with its reason."""
    try:
        call()
        check(name, True)
    except Differ as e:
        check(name, False, str(e))
    except Exception as e:  # noqa: BLE001  (a failing read is the check's failure, said)
        check(name, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}")


# ---- What the mount and the commands say about the record ------------------------------------

def said_priority(mount, source, label, want_verified, want_seed=None, ordinary=False):
    """info.json, inspect --json, inspect's text and explain --json agree on the record (an
    ordinary file, with neither a record nor a position column, need not have a line of text)."""
    info = read_json(os.path.join(mount.point, ".zarrmount/info.json"))
    priority = info.get("priority")
    ok = isinstance(priority, dict) and priority.get("verified") is want_verified
    if ok and want_verified:
        ok = priority.get("seed") == want_seed and "reason" not in priority
    if ok and not want_verified:
        reason = priority.get("reason")
        ok = isinstance(reason, str) and reason.strip() and "\n" not in reason and "seed" not in priority
    expected = {"verified": True, "seed": want_seed} if want_verified else {"verified": False, "reason": "..."}
    check(f"{label}: info.json says priority {expected}", ok, f"info.json priority: {priority!r}")
    done = subprocess.run([BINARY, "inspect", source, "--json"], capture_output=True, text=True, timeout=600)
    inspected = json.loads(done.stdout).get("priority") if done.returncode == 0 else done.stderr
    check(f"{label}: inspect --json has the same priority object",
          isinstance(priority, dict) and inspected == priority,
          f"inspect: {inspected!r}\ninfo.json: {priority!r}")
    text = subprocess.run([BINARY, "inspect", source], capture_output=True, text=True, timeout=600).stdout
    lines = [line for line in text.splitlines() if "priority" in line.lower()]
    if want_verified:
        said = [line for line in lines if "verified" in line and "not verified" not in line and str(want_seed) in line]
        what = f"verified, seed {want_seed}"
    else:
        reason = (priority or {}).get("reason") or "\0"
        said = [line for line in lines if reason in line]
        what = "not verified, with info.json's reason"
    if not ordinary:
        check(f"{label}: inspect's text has a line saying the record is {what}", said,
              "\n".join(lines) or "no line of inspect's output names the priority record")
    done = subprocess.run([BINARY, "explain", source, "full", "--json"], capture_output=True, text=True,
                          timeout=600)
    explained = json.loads(done.stdout).get("priority") if done.returncode == 0 else done.stderr
    check(f"{label}: explain full --json has the same priority object",
          isinstance(priority, dict) and explained == priority,
          f"explain: {explained!r}\ninfo.json: {priority!r}")
    return priority


# ---- Verified CSR files -------------------------------------------------------------------

class OriginalViews:
    """The views of an unordered original, read once from one mount and kept. The first reading
    of a subsample is checked against `zarrmount select` on the original (the reference every
    other file is held to must itself keep select's cells)."""

    def __init__(self, source, label):
        self.source, self.label = source, label
        self.cache = {}
        self.mount = None

    def get(self, view, request=None):
        if view not in self.cache:
            if self.mount is None:
                self.mount = Mount(self.source, *OPTIONS, debug=False)
            self.cache[view] = read_view(self.mount, view)
            if request is not None:
                why = first_difference(positions_of(self.cache[view]), select(self.source, request, N))
                check(f"{self.label}: {view} keeps select's cells (the reference)", not why, why)
        return self.cache[view]

    def close(self):
        if self.mount is not None:
            self.mount.__exit__(None, None, None)
            self.mount = None


def check_original(original, label):
    """The original's own views keep select's cells (the reference every other file meets), and
    its full/ is seed 0's order with the record of seed 0."""
    order0 = select(original.source, {"method": "uniform", "seed": 0, "k": N}, N)

    def full():
        got = original.get("full")
        why = first_difference(positions_of(got), order0)
        if why:
            raise Differ(f"/obs/{POSITION}: {why}")
        if record_of(got) != {"seed": 0, "specVersion": 1, "nObs": N}:
            raise Differ(f"/uns/cellucid/priority: {record_of(got)!r}")
    attempt(f"{label}: full/ is seed 0's priority order with the record {{seed: 0, specVersion: 1, nObs: {N}}}",
            full)
    original.get("file")
    said_priority(original.mount, original.source, label, False, ordinary=True)


def check_verified_view(mount, original, source, view, request, label, varm_ignored=()):
    """One view of a verified file: select's cells on the original, then the original's view."""
    def run():
        got = read_view(mount, view)
        want_order = select(original.source, request, N)
        why = first_difference(positions_of(got), want_order)
        if why:
            raise Differ(f"/obs/{POSITION} is not select's cells on the original: {why}")
        if record_of(got) is not None:
            raise Differ(f"/uns/cellucid/priority: a subsample carries the record {record_of(got)!r}")
        want = original.get(view, request)
        same_cells(got, want, varm_ignored)
        views.same(without_record(got.uns), without_record(want.uns), "/uns")
    attempt(f"{label}: {view} keeps select's cells on the original and equals the original's view, "
            f"with no priority record", run)


def check_file_and_full(mount, original, source, seed, label, varm_ignored=(), levels=None):
    order = gen.priority_order(seed, N)
    stored = views.reference(source)

    def file_view():
        got = read_view(mount, "file")
        why = first_difference(positions_of(got), order)
        if why:
            raise Differ(f"/obs/{POSITION} is not the stored column (seed {seed}'s order): {why}")
        if record_of(got) is not None:
            raise Differ(f"/uns/cellucid/priority: file/ carries the record {record_of(got)!r}")
        # The original's rows in the stored order (its file/ view cut to the permutation).
        want = readers.subset(original.get("file"), order)
        same_cells(got, want, varm_ignored)
        views.same(without_record(got.uns), without_record(want.uns), "/uns")
    attempt(f"{label}: file/ is the stored order: the original's rows in seed {seed}'s order, "
            f"its position column the permutation", file_view)

    def full_view():
        got = read_view(mount, "full")
        why = first_difference(positions_of(got), order)
        if why:
            raise Differ(f"/obs/{POSITION}: {why}")
        record = record_of(got)
        want = {"seed": seed, "specVersion": 1, "nObs": N}
        if record is None or {k: v for k, v in record.items() if k != "levels"} != want:
            raise Differ(f"/uns/cellucid/priority: {record!r}, not {want}")
        if "levels" in record and record["levels"] != [int(v) for v in levels or []]:
            raise Differ(f"/uns/cellucid/priority/levels: {record['levels']} where the source has {levels}")
        # The stored rows as they are, as anndata reads the file itself.
        same_cells(got, stored, varm_ignored)
        views.same(without_record(got.uns), without_record(stored.uns), "/uns")
        # And the same cells as the original's uniform view of every cell under seed S.
        same_cells(got, original.get(f"uniform/seed{seed}/k={N}", {"method": "uniform", "seed": seed, "k": N}),
                   varm_ignored)
    attempt(f"{label}: full/ is the stored rows as they are, with the record {{seed: {seed}, specVersion: 1, "
            f"nObs: {N}}}", full_view)


def check_verified_csr(manifest, original):
    for seed in gen.SEEDS:
        entry = manifest["files"][f"priority-seed{seed}"]
        source, label = entry["path"], f"priority-seed{seed}"
        with Mount(source, *OPTIONS, debug=False) as mount:
            said_priority(mount, source, label, True, seed)
            check_file_and_full(mount, original, source, seed, label, levels=entry.get("levels"))
            for view, request in views_of_seed(seed):
                check_verified_view(mount, original, source, view, request, label)
        # `select --source` reads a field or an embedding as the mount does: by original position.
        for view, request in views_of_seed(seed):
            if "field" in request or "embedding" in request:
                got, want = select(source, request, N), select(original.source, request, N)
                why = first_difference(got, want)
                check(f"{label}: select --source on it keeps the original's cells for {view}", not why, why)
    # The record alone (no position column) verifies, and names the cells just the same.
    entry = manifest["files"]["record-no-column"]
    source, label = entry["path"], "record-no-column"
    with Mount(source, *OPTIONS, debug=False) as mount:
        said_priority(mount, source, label, True, 7)
        order = gen.priority_order(7, N)
        want = readers.subset(original.get("file"), order)
        want.obs = want.obs.drop(columns=[POSITION])
        want.obs[POSITION] = order.astype(np.uint32)

        def file_view():
            got = read_view(mount, "file")
            why = first_difference(positions_of(got), order)
            if why:
                raise Differ(f"/obs/{POSITION} is not the record's (seed 7's) order: {why}")
            same_cells(got, want)
        attempt(f"{label}: file/ names the stored rows by the record's positions (seed 7's order)", file_view)
        for view, request in (uniform(7, K), uniform(0, K), stratified("cell_type", 7, K), spatial("X_umap", 7, K)):
            check_verified_view(mount, original, source, view, request, label)


# ---- Bytes a prefix reads -------------------------------------------------------------------

chunk_bytes, stored_bytes = gen.chunk_bytes, gen.stored_bytes
csr_prefix_floor, graph_bytes = gen.csr_prefix_floor, gen.graph_bytes


def csc_prefix_floor(source, k):
    """A gene-major X's prefix of k cells: for the smallest level >= k, each gene's counted
    entries and the next one (when it has one) in data and indices, and indptr whole; plus the
    counts themselves (read to find the ranges); and the bytes of all of X."""
    with h5py.File(source, "r") as f:
        X = f["X"]
        levels = [int(v) for v in f["uns/cellucid/priority/levels"][()]]
        j = min((i for i, level in enumerate(levels) if level >= k), key=lambda i: levels[i])
        counts = f["varm/" + PREFIX_COUNTS][()][:, j]
        indptr = X["indptr"][()]
        touched = {"data": set(), "indices": set()}
        for g in range(len(indptr) - 1):
            start, stop = int(indptr[g]), int(indptr[g + 1])
            end = min(stop, start + int(counts[g]) + 1)
            for name in touched:
                per = X[name].chunks[0]
                if end > start:
                    touched[name].update(range(start // per, (end - 1) // per + 1))
        floor = sum(X[name].id.get_chunk_info_by_coord((c * X[name].chunks[0],)).size
                    for name in touched for c in touched[name]) + stored_bytes(X["indptr"])
        counts_bytes = stored_bytes(f["varm/" + PREFIX_COUNTS])
        whole = sum(stored_bytes(X[name]) for name in ("data", "indices", "indptr"))
    return floor, counts_bytes, whole, levels[j]


def read_tree(root):
    """Every file under root read once (chunks and metadata); the files read."""
    count = 0
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            with open(os.path.join(directory, name), "rb") as f:
                while f.read(1 << 20):
                    pass
            count += 1
    return count


def view_source_bytes(mount, key):
    """Source bytes the view read: making its files and building it."""
    snapshot = read_json(os.path.join(mount.point, ".zarrmount/stats.json"))
    v = snapshot["views"].get(key, {})
    return v.get("source", {}).get("bytesRead", 0) + v.get("build", {}).get("source", {}).get("bytesRead", 0)


def x_bytes_read(source, key):
    """A fresh mount of source: the source bytes reading all of view key's X takes."""
    with Mount(source, *OPTIONS, debug=False) as mount:
        before = view_source_bytes(mount, key)
        files = read_tree(os.path.join(mount.point, key, "X"))
        return view_source_bytes(mount, key) - before, files


def check_prefix_bytes(manifest):
    """The prefix view under the file's seed reads about k/n of X; the same view of the unordered
    original reads nearly all of it."""
    entry = manifest["files"]["priority-seed7"]
    key = f"uniform/seed7/k={K}"
    floor, whole, end = csr_prefix_floor(entry["path"], K)
    graph, _ = graph_bytes(entry["path"], K)
    got, files = x_bytes_read(entry["path"], key)
    bound = PREFIX_BOUND * (floor + graph)
    check(f"priority-seed7: {key}'s X (entries [0, {end}), rows [0, {K}]) reads at most "
          f"{PREFIX_BOUND} x its chunks' {floor} bytes (+{graph} of obsp's prefix): {got} bytes",
          0 < got <= bound, f"{got} source bytes read for {files} files of X; the prefix's chunks hold {floor}, "
          f"the bound is {bound:.0f}; all of X is {whole} bytes")
    original = manifest["files"]["original"]["path"]
    _, graph_whole = graph_bytes(original, K)
    theirs, files = x_bytes_read(original, key)
    check(f"original: the same view's X reads nearly all of X (at least {theirs - graph_whole} of {whole} "
          f"bytes, {NEARLY_ALL:.0%} wanted)", theirs - graph_whole >= NEARLY_ALL * whole,
          f"{theirs} source bytes for {files} files, of which at most {graph_whole} obsp's; X stores {whole}")
    check(f"the prefix reads a fraction of what the unordered file's view reads ({got} vs {theirs} bytes)",
          0 < got and got * 3 <= theirs, f"prefix {got}, unordered {theirs}")

    entry = manifest["files"]["priority-csc-seed11"]
    k = gen.CSC_PREFIX_K
    key = f"uniform/seed{gen.CSC_SEED}/k={k}"
    floor, counts_bytes, whole, level = csc_prefix_floor(entry["path"], k)
    graph, _ = graph_bytes(entry["path"], k)
    got, files = x_bytes_read(entry["path"], key)
    bound = PREFIX_BOUND * (floor + counts_bytes + graph)
    check(f"priority-csc-seed11: {key}'s gene-major X (each gene's counted entries below level {level}, "
          f"and one more) reads at most {PREFIX_BOUND} x its chunks' {floor} bytes (+{counts_bytes} of the "
          f"counts, +{graph} of obsp's prefix): {got} bytes", 0 < got <= bound,
          f"{got} source bytes for {files} files of X; the counted ranges' chunks hold {floor}, the bound is "
          f"{bound:.0f}; all of X is {whole} bytes")
    original = manifest["files"]["original-csc"]["path"]
    _, graph_whole = graph_bytes(original, k)
    theirs, files = x_bytes_read(original, key)
    check(f"original-csc: the same view's X reads nearly all of X (at least {theirs - graph_whole} of "
          f"{whole} bytes)", theirs - graph_whole >= NEARLY_ALL * whole,
          f"{theirs} source bytes for {files} files, of which at most {graph_whole} obsp's; X stores {whole}")


# ---- The gene-major file and its broken counts ------------------------------------------------

def check_csc(manifest):
    entry = manifest["files"]["priority-csc-seed11"]
    source, label = entry["path"], "priority-csc-seed11"
    original = OriginalViews(manifest["files"]["original-csc"]["path"], "original-csc")
    try:
        with Mount(source, *OPTIONS, debug=False) as mount:
            said_priority(mount, source, label, True, gen.CSC_SEED)
            check_file_and_full(mount, original, source, gen.CSC_SEED, label, varm_ignored=(PREFIX_COUNTS,),
                                levels=entry["levels"])
            for view, request in CSC_VIEWS:
                check_verified_view(mount, original, source, view, request, label, varm_ignored=(PREFIX_COUNTS,))

            def full_counts():
                got = read_view(mount, "full")
                record = record_of(got)
                if record is not None and "levels" in record and PREFIX_COUNTS in got.varm:
                    with h5py.File(source, "r") as f:
                        views.same(np.asarray(got.varm[PREFIX_COUNTS]), f["varm/" + PREFIX_COUNTS][()],
                                   f"/varm/{PREFIX_COUNTS}")
            attempt(f"{label}: full/'s prefix counts, where it carries them with levels, are the source's "
                    "(its rows are the stored rows)", full_counts)
    finally:
        original.close()
    return original


def try_mount(source):
    """Mounts source in the foreground: (exit status, output) if it refused, (None, log) if it
    mounted (then unmounted at once)."""
    point = tempfile.mkdtemp(prefix="zm-priority-", dir=PARENT)
    daemon = subprocess.Popen([BINARY, source, point, "-f"] + [a for o in OPTIONS for a in ("-o", o)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=live_mount.daemon_env())
    try:
        while point not in live_mount.mounted_points():
            if daemon.poll() is not None:
                return daemon.returncode, daemon.stdout.read().decode(errors="replace")
            time.sleep(0.02)
        return None, "it mounted"
    finally:
        if point in live_mount.mounted_points():
            subprocess.run(["fusermount3", "-u", point], capture_output=True)
        if daemon.poll() is None:
            daemon.wait(timeout=60)
        daemon.stdout.close()
        os.rmdir(point)


def check_counts_refused(manifest):
    for name in ("counts-exceed", "counts-decrease"):
        entry = manifest["files"][name]
        status, output = try_mount(entry["path"])
        lines = [line for line in output.splitlines() if line.strip()]
        check(f"{name}: prefix counts inconsistent with the matrix ({entry['broken']}) are refused: "
              "status 2, one line naming the prefix counts",
              status == 2 and len(lines) == 1 and "prefix" in lines[0].lower(),
              f"status {status}: {output.strip()[-600:]}")


def chunk_values(path, meta):
    """A chunk file's values, decoded as its .zarray says; or the errno reading it gave."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return e.errno
    if meta.get("compressor"):
        data = numcodecs.get_codec(meta["compressor"]).decode(data)
    for spec in reversed(meta.get("filters") or []):
        data = numcodecs.get_codec(spec).decode(data)
    return np.frombuffer(bytes(data), dtype=np.dtype(meta["dtype"]))


def x_files(mount, view):
    """{relative path: the file's bytes or errno} of every file of the view's X."""
    out = {}
    root = os.path.join(mount.point, view, "X")
    try:
        names = os.listdir(root)
    except OSError as e:
        return {"X": e.errno}
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path):
            for child in os.listdir(path):
                out[f"{name}/{child}"] = path + "/" + child
        else:
            out[name] = path
    return out


def served_x(mount, view):
    """{relative path: values, errno, or metadata dict} of the view's X, each file read alone."""
    out = {}
    files = x_files(mount, view)
    if isinstance(files.get("X"), int):
        return files
    metas = {}
    for rel, path in sorted(files.items()):
        if rel.endswith(".zarray") or rel.endswith(".zattrs") or rel.endswith(".zgroup"):
            try:
                out[rel] = read_json(path)
                if rel.endswith(".zarray"):
                    metas[rel.split("/")[0]] = out[rel]
            except OSError as e:
                out[rel] = e.errno
    for rel, path in sorted(files.items()):
        array = rel.split("/")[0]
        if rel in out or array not in metas:
            continue
        out[rel] = chunk_values(path, metas[array])
    return out


def check_counts_wrong(manifest):
    """Counts that disagree with the stored rows: the prefix view's X fails with EIO; nothing it
    serves differs from what the true prefix holds."""
    good = manifest["files"]["priority-csc-seed11"]["path"]
    view = f"uniform/seed{gen.CSC_SEED}/k={gen.CSC_PREFIX_K}"
    with Mount(good, *OPTIONS, debug=False) as mount:
        truth = served_x(mount, view)
    for name in ("counts-over", "counts-under"):
        entry = manifest["files"][name]
        try:
            with Mount(entry["path"], *OPTIONS, debug=False) as mount:
                served = served_x(mount, view)
                errors = sorted(rel for rel, v in served.items() if isinstance(v, int) and not isinstance(v, bool))
                wrong = []
                for rel, value in served.items():
                    if rel in errors:
                        continue
                    want = truth.get(rel)
                    if isinstance(value, dict) or isinstance(want, dict):
                        if not isinstance(value, dict) or not isinstance(want, dict) or \
                                {k: value.get(k) for k in ("shape", "chunks", "dtype")} != \
                                {k: want.get(k) for k in ("shape", "chunks", "dtype")}:
                            wrong.append(f"{rel}: {value!r} where the true prefix has {want!r}")
                    elif not isinstance(want, np.ndarray) or not np.array_equal(value, want):
                        wrong.append(f"{rel}: {value[:8]!r}... where the true prefix has "
                                     f"{want[:8] if isinstance(want, np.ndarray) else want!r}")
                eio = [rel for rel in errors if served[rel] == errno.EIO]
                other = [f"{rel}: {os.strerror(served[rel])}" for rel in errors if served[rel] != errno.EIO]
                check(f"{name}: counts that disagree with the stored rows ({entry['broken']}): reading {view}'s X "
                      "fails with EIO", eio and not other,
                      f"EIO on {eio[:6]}; other errors {other[:6]}; {len(served)} files of X read")
                check(f"{name}: ... and no file of X it serves differs from the true prefix's", not wrong,
                      "\n".join(wrong[:6]))

                def whole():
                    try:
                        read_view(mount, view)
                    except Exception:  # noqa: BLE001  (any error: the reader did not get wrong values)
                        return
                    raise Differ("anndata.read_zarr read the view without an error")
                attempt(f"{name}: anndata.read_zarr of {view} fails", whole)
        except RuntimeError as e:
            check(f"{name}: the file mounts (its counts agree with the matrix; only its rows disagree)", False, e)


# ---- Records that do not verify --------------------------------------------------------------

def check_unverified(manifest):
    names = [n for n, e in sorted(manifest["files"].items()) if e["kind"] == "unverified"]
    for name in names:
        entry = manifest["files"][name]
        source, n = entry["path"], entry["nObs"]
        try:
            mount = Mount(source, *OPTIONS, debug=False)
        except RuntimeError as e:
            check(f"{name}: a record that does not verify ({entry['why']}) is never refused", False, e)
            continue
        with mount:
            check(f"{name}: a record that does not verify ({entry['why']}) mounts", True)
            priority = said_priority(mount, source, name, False)
            ref = stripped(views.reference(source))

            def one_view(view, request):
                got = read_view(mount, view)
                order = select(source, request, n) if request else np.arange(n)
                why = first_difference(positions_of(got), order)
                if why:
                    by = "select on the file" if request else "file order"
                    raise Differ(f"/obs/{POSITION} is not each row its own position ({by}): {why}")
                if record_of(got) is not None:
                    raise Differ(f"/uns/cellucid/priority: {record_of(got)!r} (the source's record, copied)")
                want = expected_view(ref, order)
                same_cells(got, want)
                views.same(without_record(got.uns), without_record(want.uns), "/uns")
            attempt(f"{name}: file/ is the file's rows, each its own position", lambda: one_view("file", None))
            for view, request in UNVERIFIED_VIEWS:
                attempt(f"{name}: {view} is select's cells over the file's own rows",
                        lambda view=view, request=request: one_view(view, request))

            def full():
                got = read_view(mount, "full")
                order = select(source, {"method": "uniform", "seed": 0, "k": n}, n)
                why = first_difference(positions_of(got), order)
                if why:
                    raise Differ(f"/obs/{POSITION} is not seed 0's order of the file's rows: {why}")
                if record_of(got) != {"seed": 0, "specVersion": 1, "nObs": n}:
                    raise Differ(f"/uns/cellucid/priority: {record_of(got)!r}")
                same_cells(got, expected_view(ref, order))
            attempt(f"{name}: full/ is seed 0's order of the file's rows, with its own record (nObs {n})", full)
        log = mount.log().decode(errors="replace")
        reason = (priority or {}).get("reason")
        said = [line for line in log.splitlines() if reason and reason in line]
        check(f"{name}: the log says why once (info.json's reason)", len(said) == 1,
              f"{len(said)} lines name {reason!r}:\n{log[-1500:]}" if reason else "info.json gives no reason")


# ---- Round trips ------------------------------------------------------------------------------

def write_back(store, path):
    """anndata.read_zarr(store) written with write_h5ad (the reader of the views where anndata
    is missing cannot write: counted as skipped)."""
    readers.anndata.read_zarr(store).write_h5ad(path)


def check_round_trip(directory, manifest, original):
    if not readers.have_anndata():
        check(f"round trips through anndata # SKIP {readers.ANNDATA_MISSING}", True)
        return
    trips = []
    with Mount(manifest["files"]["original"]["path"], *OPTIONS, debug=False) as mount:
        path = os.path.join(directory, "roundtrip-original.h5ad")
        attempt("round trip: anndata.read_zarr(MNT/full) of the original written with write_h5ad",
                lambda: write_back(os.path.join(mount.point, "full"), path))
        trips.append(("roundtrip-original", path, 0, "the mount's full/ of the original"))
    with Mount(manifest["files"]["priority-seed7"]["path"], *OPTIONS, debug=False) as mount:
        path = os.path.join(directory, "roundtrip-seed7.h5ad")
        attempt("round trip: anndata.read_zarr(MNT/full) of priority-seed7 written with write_h5ad",
                lambda: write_back(os.path.join(mount.point, "full"), path))
        trips.append(("roundtrip-seed7", path, 7, "the mount's full/ of priority-seed7"))
    exported = os.path.join(directory, "export-full")
    done = subprocess.run([BINARY, "export", manifest["files"]["original"]["path"], "full", exported],
                          capture_output=True, text=True, timeout=600)
    check("round trip: zarrmount export ORIGINAL full DIR", done.returncode == 0, done.stderr)
    if done.returncode == 0:
        path = os.path.join(directory, "roundtrip-export.h5ad")
        attempt("round trip: anndata.read_zarr of the exported full/ written with write_h5ad",
                lambda: write_back(exported, path))
        trips.append(("roundtrip-export", path, 0, "zarrmount export's full/"))
    for label, path, seed, what in trips:
        if not os.path.exists(path):
            continue
        try:
            mount = Mount(path, *OPTIONS, debug=False)
        except RuntimeError as e:
            check(f"{label}: {what} written back mounts", False, e)
            continue
        with mount:
            said_priority(mount, path, label, True, seed)
            check_file_and_full_trip(mount, original, path, seed, label)
            for view, request in (uniform(seed, K), uniform(3, K), blocks(16, 7, 500), stratified("cell_type", 0, K),
                                  spatial("X_umap", 1, K)):
                check_verified_view(mount, original, path, view, request, label)


def check_file_and_full_trip(mount, original, path, seed, label):
    """A file written back from full/: its file/ is seed S's order, with the positions the
    original gave its cells."""
    order = gen.priority_order(seed, N)

    def file_view():
        got = read_view(mount, "file")
        why = first_difference(positions_of(got), order)
        if why:
            raise Differ(f"/obs/{POSITION}: {why}")
        same_cells(got, readers.subset(original.get("file"), order))
    attempt(f"{label}: file/ holds the original's cells in seed {seed}'s order, named by their original "
            "positions", file_view)


def main():
    directory = tempfile.mkdtemp(prefix="zm-priority-sources-", dir=PARENT)
    try:
        manifest = gen.generate(directory)
        check(f"the sources are written ({len(manifest['files'])} files, {N} cells)", True)
    except Exception:  # noqa: BLE001  (said, and nothing else can run)
        check("the sources are written", False, traceback.format_exc()[-2000:])
        return report()
    original = OriginalViews(manifest["files"]["original"]["path"], "original")
    steps = [
        ("the original", lambda: check_original(original, "original")),
        ("verified CSR files", lambda: check_verified_csr(manifest, original)),
        ("the bytes a prefix reads", lambda: check_prefix_bytes(manifest)),
        ("the gene-major file", lambda: check_csc(manifest)),
        ("prefix counts inconsistent with the matrix", lambda: check_counts_refused(manifest)),
        ("prefix counts that disagree with the rows", lambda: check_counts_wrong(manifest)),
        ("records that do not verify", lambda: check_unverified(manifest)),
        ("round trips", lambda: check_round_trip(directory, manifest, original)),
    ]
    try:
        for what, step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001  (a step that breaks is one failure; the others still run)
                check(f"{what}: the step ran to its end", False, traceback.format_exc()[-2000:])
    finally:
        original.close()
    return report()


if __name__ == "__main__":
    sys.exit(main())
