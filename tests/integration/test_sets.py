#!/usr/bin/python3
"""Views of a user's own cells through a live mount (issue 21): sets/NAME/ (the files of
-o sets=DIR: Cellucid cell sets NAME.json and obs-name files NAME.txt) and
where/KEY/VALUES/ (obs values), every method over them, against set_rules.py's independent
reading of the rules (../shared/seeds/subsampling-spec.txt; nothing there calls zarrmount).

Sources: fixtures/sources/h5ad/full-csr.h5ad (60 cells: cell_type with missing codes, quality,
label_utf8 and barcode strings, bool, nullable_bool; obsm X_umap, X_pca); escapes.h5ad, written
here with h5ad_writer.py (1500 cells: a categorical whose names hold '/', ',', '%', '.', '..',
control bytes, 0x7F and non-ASCII, a string column with such values, a string column of 1500
distinct values, bool, nullable bool, obs names two cells share, embeddings with NaN and inf,
X in small chunks so that blocks have many blocks); and make_priority_sources.py's original and
its seed-7 priority-ordered file (800 cells), where sets name cells by original position.

- Random sets (JSON and txt) and where/ filters (categorical incl. escaped names, string
  column, boolean, nullable boolean, several values): under each, views of every method (file,
  full, uniform, blocks with and without B=, stratified with and without a minimum, spatial
  with and without G=/cols=, share= and pct= links, k above |S|) keep the reading's cells in
  its order (obs/cellucid_original_position, uint32); X rows and obs (every column, the index)
  are the source's rows of those cells; the root .zattrs records the method, k, nObs, the
  digest of the kept cells and the set (name, digest, size and file; or key, values and size);
  the set's digest is the specification's digest of its positions (checked against
  `zarrmount select`'s own digests and kept bytes).
- S = every cell (kept "", and where/bool/false,true/): each method equals the root's same
  view.
- uniform and blocks stay nested over S.
- Sets that do not verify (wrong digest, wrong nObs, a position past n, cut LEB128, every cell
  written as n zero gaps rather than no bytes, not JSON, an unknown name, a name two cells share,
  both NAME.json and NAME.txt): not listed, ENOENT,
  `zarrmount explain MNT/sets/NAME` exits 2 saying why, the daemon's log says why once.
- A set file changed while mounted (replaced, rewritten in place, broken, removed, a new one
  added): sets/NAME links to the new digest; files of the old NAME@OLD/ opened before read
  whole and consistent (the old cells); new lookups give the new version.
- Listings: sets/ (the sets that verify, each a link), sets/NAME@D/ and where/K/V/ (the six
  methods), where/ (as stratified/), where/KEY/ (escaped values; none for a string column of
  more than 1000 values, which still resolve); non-canonical spellings are ENOENT.
- The kernel: `zarrmount select` with "set" (and --set FILE) keeps the reading's cells.

Mounts use cache_dir=none and ahead_idle=0. Every mount is unmounted in every outcome (run by
run_mount_test.sh, which also unmounts whatever a crash leaves). No step has a time limit but
the wait for a changed set to show (SET_CHANGE_WAIT seconds, turning a hang into a failure).
Prints TAP.
"""
import base64
import errno
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import h5py  # noqa: E402
import numcodecs  # noqa: E402

from live_mount import BINARY, PARENT, Mount, check, error_of, report  # noqa: E402
import h5ad_writer  # noqa: E402
import make_priority_sources as gen  # noqa: E402
import readers  # noqa: E402
import set_rules as R  # noqa: E402
import views  # noqa: E402
from views import Differ, attempt, first_difference  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
FULL_CSR = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
OPTIONS = ("cache_dir=none", "ahead_idle=0")
POSITION = "cellucid_original_position"
METHODS = ["blocks", "file", "full", "spatial", "stratified", "uniform"]
PRIORITY_CELLS = 800
SET_CHANGE_WAIT = 30.0   # seconds a changed set file may take to show through the mount
MTIME_STEP = 0.05        # a pause before rewriting a file in place, so its mtime (coarse) moves on
RNG = random.Random(21)


# ---- Commands --------------------------------------------------------------------------------

def run_json(args, stdin=None):
    done = subprocess.run([BINARY, *args], input=stdin, capture_output=True, timeout=600)
    try:
        document = json.loads(done.stdout)
    except ValueError:
        document = None
    return done.returncode, document, done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")


def explain(path):
    """(exit status, the JSON document or None, the output) of `zarrmount explain PATH --json`."""
    return run_json(["explain", path, "--json"])


def fs(path):
    """A path (bytes or str) as the str the file calls take (other bytes kept by surrogateescape)."""
    return os.fsdecode(path) if isinstance(path, bytes) else path


def join(*parts):
    return os.path.join(*[fs(p) for p in parts if p != "" and p != b""])


# ---- Sources ---------------------------------------------------------------------------------

class Source:
    """What the reading needs of a source, by original position: each obs column, names,
    embeddings, X; for a priority-ordered file the stored row of each position."""

    def __init__(self, path, label, priority_seed=None):
        self.path, self.label = path, label
        code, info, text = run_json(["inspect", path, "--json"])
        if code != 0:
            raise RuntimeError(f"zarrmount inspect {path}: {text}")
        self.n = info["nObs"]
        self.b0 = info["defaultBlockSize"]["blockSize"]
        with h5py.File(path, "r") as f:
            self.X = readers.read_elem(f["X"]).tocsr()
            self.obs = readers.read_df(f["obs"])
            self.obsm = {key: np.asarray(f["obsm"][key][()]) for key in f["obsm"]
                         if isinstance(f["obsm"][key], h5py.Dataset) and f["obsm"][key].ndim == 2
                         and f["obsm"][key].dtype.kind in "fiu"}
        self.seed = 0
        self.row_of = np.arange(self.n)
        self.stored_row = None
        if priority_seed is not None:
            positions = self.obs[POSITION].to_numpy().astype(np.int64)
            self.row_of = np.argsort(positions)
            self.stored_row = self.row_of
            self.seed = priority_seed
        self.names = [str(x) for x in np.asarray(self.obs.index)[self.row_of]]

    def column(self, key):
        return self.obs[key].iloc[self.row_of]

    def where(self, key, values):
        """The ascending positions whose value of key is one of values (str; 'true'/'false')."""
        column = self.column(key)
        wanted = set(values)
        if isinstance(column.dtype, pd.CategoricalDtype):
            categories = [str(c) for c in column.cat.categories]
            codes = column.cat.codes.to_numpy()
            return np.flatnonzero([c >= 0 and categories[c] in wanted for c in codes])
        if isinstance(column.array, pd.arrays.BooleanArray):
            array = column.array
            mask, data = np.asarray(array._mask), np.asarray(array._data)
            return np.flatnonzero([not m and ("true" if d else "false") in wanted for m, d in zip(mask, data)])
        if column.dtype == bool:
            return np.flatnonzero([("true" if d else "false") in wanted for d in column.to_numpy()])
        return np.flatnonzero([str(v) in wanted for v in column.to_numpy()])

    def strata(self, key):
        """Each position's stratum under the specification (categorical codes then missing;
        plain values in code-point order then missing)."""
        column = self.column(key)
        if isinstance(column.dtype, pd.CategoricalDtype):
            return R.categorical_strata(column.cat.codes.to_numpy(), len(column.cat.categories))
        if isinstance(column.array, pd.arrays.BooleanArray):
            return R.value_strata(list(np.asarray(column.array._data)), list(np.asarray(column.array._mask)))
        return R.value_strata([v if isinstance(v, (bool, np.bool_)) else str(v) for v in column.to_numpy()])

    def coordinates(self, key, columns=None):
        values = self.obsm[key][self.row_of]
        if columns is None:
            columns = list(range(min(3, values.shape[1])))
        return values[:, columns]

    def positions_of_names(self, names):
        index = {}
        for p, name in enumerate(self.names):
            index.setdefault(name, []).append(p)
        return np.sort(np.asarray([index[name][0] for name in names], dtype=np.int64))


# ---- The generated source with hostile values ------------------------------------------------

ESCAPES_CELLS = 1500
TISSUES = ["lung", "liver", "CD4/CD8", "a,b", "50%", "Zelle-\u00fc", "\u65e5\u672c\u8a9e", ".", "..",
           "tab\there", "new\nline", "del\x7fx", "sp ace", ".hidden", "x%2Fy", "na\u00efve T/NK, memory",
           "unused"]
DONORS = ["d/1", "d,2", "d%3", "d\u00fc4", ".", "d 5"]
DUPLICATES = {10: "dup-A", 11: "dup-A", 20: "dup-B", 21: "dup-B", 22: "dup-B"}
SPECIAL_NAMES = {5: "\u540d\u524d-5", 6: "with space 6", 7: "comma,7", 8: "per%cent-8"}


def write_escapes(path):
    """escapes.h5ad (ESCAPES_CELLS cells), deterministic."""
    rng = np.random.default_rng(2101)
    n = ESCAPES_CELLS
    X = sp.random(n, 20, density=0.2, format="csr", dtype=np.float32, random_state=rng,
                  data_rvs=lambda size: rng.integers(1, 20, size=size).astype(np.float32))
    X.sort_indices()
    codes = rng.integers(0, len(TISSUES) - 1, size=n)  # "unused" has no cell
    codes[rng.random(n) < 0.03] = -1
    names = [f"c{i:05d}" for i in range(n)]
    for i, name in {**DUPLICATES, **SPECIAL_NAMES}.items():
        names[i] = name
    flag_mask = rng.random(n) < 0.1
    obs = pd.DataFrame({
        "tissue": pd.Categorical.from_codes(codes, categories=TISSUES),
        "donor_text": np.array([DONORS[i] for i in rng.integers(0, len(DONORS), size=n)], dtype=object),
        "uid": np.array([f"u-{i:05d}-{rng.integers(0, 10**6):06d}" for i in range(n)], dtype=object),
        "flag": rng.random(n) < 0.4,
        "flag_nullable": pd.arrays.BooleanArray(rng.random(n) < 0.5, flag_mask),
        "score": rng.random(n).astype(np.float32),
    }, index=pd.Index(names))
    umap = rng.normal(0, 5, size=(n, 2)).astype(np.float32)
    umap[:8, 1] = np.nan
    umap[8, 0] = np.inf
    pca = rng.normal(0, 2, size=(n, 5))
    h5ad_writer.write_h5ad(path, X=X, obs=obs, obsm={"X_umap": umap, "X_pca": pca}, compression="gzip")
    gen.rechunk(path, "X", {"data": 64, "indices": 64, "indptr": 64})


# ---- Set files -------------------------------------------------------------------------------

def write_json_set(directory, name, positions, n, **broken):
    with open(os.path.join(directory, name + ".json"), "w") as f:
        json.dump(R.cell_set_document(positions, n, **broken), f)


def write_txt_set(directory, name, names):
    with open(os.path.join(directory, name + ".txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")


def random_set(n, size, avoid=()):
    pool = [p for p in range(n) if p not in set(avoid)]
    return np.sort(np.asarray(RNG.sample(pool, size), dtype=np.int64))


# ---- Views over a set and their reading ------------------------------------------------------

class SetCase:
    """One set as the mount names it: its directory under the mount (sets/NAME, where/K/V), its
    positions and the record its stores carry."""

    def __init__(self, label, base, positions, record_kind, record, n):
        self.label, self.base = label, base
        self.positions = np.sort(np.asarray(positions, dtype=np.int64))
        self.record_kind, self.record = record_kind, record
        self.record.setdefault("size", len(self.positions))
        self.digest = R.digest(self.positions, n)


def view_list(src, S, stratify, embedding, second_stratify=None, second_embedding=None):
    """(path under the set's directory, expected order or None if refused, the link's k or None)."""
    m = len(S)
    K = max(1, m // 2)
    out = [("file", R.file_order(S, src.stored_row), None),
           ("full", R.full_order(S, src.seed), None),
           (f"uniform/seed0/k={K}", R.uniform(S, 0, K), None),
           (f"uniform/seed4294967295/k={m + 3}", R.uniform(S, 4294967295, m + 3), None)]
    k = R.share_size("0.5", m)
    out.append(("uniform/seed3/share=0.5", R.uniform(S, 3, k), k))
    out.append((f"blocks/seed1/k={K}", R.blocks(S, 1, K, src.b0), None))
    out.append((f"blocks/B=3/seed2/k={K}", R.blocks(S, 2, K, 3), None))
    k = R.share_size("40", m, percent=True)
    out.append(("blocks/B=1/seed5/pct=40", R.blocks(S, 5, k, 1), k))
    out.append((f"stratified/{stratify}/seed0/k={K}", R.over_strata(S, src.strata(stratify), 0, K), None))
    key = second_stratify or stratify
    out.append((f"stratified/{key}/balanced/min=1/seed2/k={K}",
                R.over_strata(S, src.strata(key), 2, K, "balanced", 1), None))
    k = R.share_size("0.25", m)
    out.append((f"stratified/{key}/proportional/min=0/seed7/share=0.25",
                R.over_strata(S, src.strata(key), 7, k), k))
    out.append((f"spatial/{embedding}/seed0/k={K}", R.spatial(S, src.coordinates(embedding), 0, K), None))
    key = second_embedding or embedding
    columns = [1, 0] if src.obsm[key].shape[1] == 2 else [0, 2]
    text = ",".join(map(str, columns))
    out.append((f"spatial/{key}/G=4/cols={text}/seed1/k={K}",
                R.spatial(S, src.coordinates(key, columns), 1, K, 4), None))
    return out


def method_of(view):
    return view.split("/")[0]


def read_store(path):
    """(root's view record, obs, X) of the store at path."""
    group = readers.open_group(path)
    record = readers.attrs(group)["zarrmount"]["view"]
    return record, readers.read_df(group["obs"]), readers.read_elem(group["X"])


def subset_record(got, want, where):
    """Raises Differ unless got (a dict) holds want's keys with want's values."""
    if not isinstance(got, dict):
        raise Differ(f"{where}: {got!r}, not an object with {sorted(want)}")
    for key, value in want.items():
        if key == "file":
            if not isinstance(got.get("file"), str) or os.path.basename(got["file"]) != value:
                raise Differ(f"{where}.file: {got.get('file')!r}, not a path to {value}")
        elif got.get(key) != value:
            raise Differ(f"{where}.{key}: {got.get(key)!r}, not {value!r}")


def check_store(src, case, view, order, store_path, compare_to=None):
    """The store holds order's cells (positions, X rows, obs) and records the view and the set."""
    record, obs, X = read_store(store_path)
    views.check_positions(obs, order, "/obs")
    rows = src.row_of[np.asarray(order, dtype=np.int64)]
    views.same(X, src.X[rows], "/X")
    want = src.obs.iloc[rows]
    views.same(obs.drop(columns=[POSITION]), want.drop(columns=[c for c in want.columns if c == POSITION]), "/obs")
    method = method_of(view)
    want_record = {"method": method, "k": len(order), "nObs": src.n, "digest": R.digest(np.sort(order), src.n)}
    if method == "blocks":
        want_record["blockSize"] = int(view.split("/")[1][2:]) if view.split("/")[1].startswith("B=") else src.b0
    subset_record(record, want_record, ".zattrs zarrmount.view")
    # The set's name is checked once a set (check_set_name), not in every store.
    want_set = {k: v for k, v in case.record.items() if k != "name"}
    if case.record_kind == "sets":
        want_set["digest"] = case.digest
    subset_record(record.get(case.record_kind), want_set, f".zattrs zarrmount.view.{case.record_kind}")
    if compare_to is not None:
        other = compare_to(record, obs, X)
        if other:
            raise Differ(other)


def check_case(mount, src, case, view_specs):
    """Every view of the list over the case's set."""
    if case.record_kind == "sets":
        check_set_name(mount, case)
    for view, order, link_k in view_specs:
        label = f"{src.label}: {case.label}: {view}"
        path = join(mount.point, case.base, view)
        if order is None:
            code = error_of(os.stat, path)
            check(f"{label}: refused (a minimum that does not fit): ENOENT", code == errno.ENOENT,
                  f"stat gives {errno.errorcode.get(code, code) if code else 'success'}")
            continue
        store = path
        if link_k is not None:
            try:
                target = os.readlink(path)
            except OSError as e:
                check(f"{label}: a link to k={link_k} (the share of |S| = {len(case.positions)})", False,
                      f"readlink: {e}")
                continue
            check(f"{label}: a link to k={link_k} (the share of |S| = {len(case.positions)})",
                  target == f"k={link_k}", f"links to {target!r}")
            store = join(os.path.dirname(path), target)
        attempt(f"{label}: {len(order)} cells as the reading keeps them, X and obs their rows, "
                f".zattrs records the view and the set", lambda: check_store(src, case, view, order, store))


def check_set_name(mount, case):
    """A store over a set file's set records its name: NAME, the file's name without its
    extension (the record sits under "sets" already)."""
    try:
        record = read_store(join(mount.point, case.base, "file"))[0].get("sets") or {}
    except Exception as e:  # noqa: BLE001  (a failing read is the check's failure, said)
        record = {"error": str(e)}
    check(f"{case.label}: the stores' .zattrs name the set {case.record['name']!r}",
          record.get("name") == case.record["name"], f"zarrmount.view.sets: {record}")


def check_listing_of_set(mount, case):
    path = join(mount.point, case.base)
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        names = f"listdir: {e}"
    check(f"{case.label}: {case.base}/ lists the six methods", names == METHODS, f"lists {names}")


def check_set_explain(mount, case, view):
    """explain of a view over the set says the set and its size."""
    code, document, text = explain(join(mount.point, case.base, view))
    ok = code == 0 and isinstance(document, dict)
    detail = text[-600:]
    if ok:
        said = document.get("set" if case.record_kind == "sets" else "where")
        ok = document.get("setSize") == len(case.positions) and isinstance(said, dict)
        if ok and case.record_kind == "sets":
            ok = said.get("digest") == case.digest
    check(f"{case.label}: explain {case.base}/{view} says the set (size {len(case.positions)}"
          f"{', digest ' + case.digest if case.record_kind == 'sets' else ''})", ok, detail)


def kernel_agrees(src, case, stratify, embedding):
    """`zarrmount select` with "set" keeps the reading's cells (the kernel, apart from the tree)."""
    S = [int(p) for p in case.positions]
    K = max(1, len(S) // 2)
    requests = [({"method": "uniform", "n": src.n, "seed": 0, "k": K}, R.uniform(S, 0, K)),
                ({"method": "blocks", "n": src.n, "seed": 2, "k": K, "blockSize": 3}, R.blocks(S, 2, K, 3)),
                ({"method": "stratified", "field": stratify, "seed": 0, "k": K},
                 R.over_strata(S, src.strata(stratify), 0, K)),
                ({"method": "spatial", "embedding": embedding, "seed": 0, "k": K},
                 R.spatial(S, src.coordinates(embedding), 0, K))]
    wrong = []
    for request, want in requests:
        body = dict(request, set=S)
        args = ["select"] + (["--source", src.path] if "n" not in request else [])
        code, document, text = run_json(args, json.dumps(body).encode())
        got = document.get("order") if isinstance(document, dict) else None
        if got is None or list(got) != [int(p) for p in want]:
            wrong.append(f"{request['method']}: {text.strip()[:300]}")
    check(f"{src.label}: {case.label}: zarrmount select with \"set\" keeps the reading's cells "
          f"(uniform, blocks, stratified, spatial)", not wrong, "\n".join(wrong))


# ---- Every cell ------------------------------------------------------------------------------

ROOT_VIEWS = ["file", "full", "uniform/seed0/k=20", "uniform/seed9/k=60", "blocks/seed1/k=25", "blocks/B=4/seed2/k=30",
              "stratified/cell_type/seed0/k=20", "stratified/quality/balanced/min=2/seed3/k=15",
              "spatial/X_umap/seed0/k=20", "spatial/X_pca/G=4/cols=0,2/seed1/k=20"]


def check_every_cell(mount, src, base, label):
    """Each method over S = every cell is the root's same view (cells, X, obs, the record but the
    set)."""
    for view in ROOT_VIEWS:
        def run(view=view):
            mine = read_store(join(mount.point, base, view))
            root = read_store(join(mount.point, view))
            views.same(mine[1], root[1], "/obs")
            views.same(mine[2], root[2], "/X")
            record = {k: v for k, v in mine[0].items() if k not in ("sets", "where")}
            if record != root[0]:
                raise Differ(f".zattrs zarrmount.view {record} vs the root's {root[0]}")
        attempt(f"{src.label}: {label} (every cell): {view} equals the root's {view}", run)


def check_nested(mount, src, case):
    """uniform and blocks over S: a smaller k's cells are the first cells of a larger k's."""
    m = len(case.positions)
    sizes = sorted({1, max(1, m // 5), max(1, m // 2), m})
    for family in ("uniform/seed9", "blocks/B=3/seed4", "blocks/seed6"):
        def run(family=family):
            previous = None
            for k in sizes:
                _, obs, _ = read_store(join(mount.point, case.base, f"{family}/k={k}"))
                order = obs[POSITION].to_numpy().astype(np.int64)
                if len(order) != k:
                    raise Differ(f"k={k}: {len(order)} cells")
                if not set(order) <= set(case.positions.tolist()):
                    raise Differ(f"k={k}: cells outside the set: {sorted(set(order) - set(case.positions.tolist()))[:5]}")
                if previous is not None and list(order[:len(previous)]) != list(previous):
                    raise Differ(f"k={k} does not start with the {len(previous)} cells of the smaller k")
                previous = order
        attempt(f"{src.label}: {case.label}: {family} nested over S (k = {sizes})", run)


# ---- Sets that do not verify -----------------------------------------------------------------

def check_refused_set(mount, sets_dir, name, why_words, listed):
    """Not listed, ENOENT, explain exits 2 with a reason naming why, the log says why once."""
    label = f"sets/{name} ({why_words[0]})"
    check(f"{label}: not listed in sets/", name not in listed, f"sets/ lists {listed}")
    codes = {call.__name__: error_of(call, join(mount.point, "sets", name)) for call in (os.lstat, os.stat)}
    codes["listdir"] = error_of(os.listdir, join(mount.point, "sets", name))
    check(f"{label}: lstat, stat and listdir give ENOENT", set(codes.values()) == {errno.ENOENT},
          " ".join(f"{k}={errno.errorcode.get(v, v) if v else 'ok'}" for k, v in codes.items()))
    code, document, text = explain(join(mount.point, "sets", name))
    reason = (document or {}).get("reason", "") if isinstance(document, dict) else ""
    said = [w for w in why_words if w.lower() in reason.lower()]
    check(f"{label}: explain exits 2 and says why ({' or '.join(repr(w) for w in why_words)})",
          code == 2 and said, f"exit {code}: {text.strip()[-500:]}")
    lines = [line for line in mount.log().decode(errors="replace").splitlines() if f"sets/{name}" in line]
    check(f"{label}: the daemon's log says why, once",
          len(lines) == 1 and any(w.lower() in lines[0].lower() for w in why_words),
          "\n".join(lines[-4:]) or "no line names it")


# ---- The mounts ------------------------------------------------------------------------------

def full_csr_checks(work):
    src = Source(FULL_CSR, "full-csr")
    n = src.n
    sets_dir = os.path.join(work, "sets-full-csr")
    os.makedirs(sets_dir)
    cases = []
    # Cellucid cell sets: one from `zarrmount select` as it prints it, random ones of ours.
    code, selected, text = run_json(["select"], json.dumps({"method": "uniform", "n": n, "k": 17, "seed": 11}).encode())
    if code == 0:
        mine = base64.b64encode(R.encode_kept(selected["positions"], n)).decode()
        check("zarrmount select's kept and digest are set_rules.py's encoding and digest of its positions",
              selected["kept"] == mine and selected["digest"] == R.digest(selected["positions"], n),
              f"select: {selected['kept']} {selected['digest']}; here: {mine} {R.digest(selected['positions'], n)}")
        with open(os.path.join(sets_dir, "from-select.json"), "w") as f:
            json.dump({"cells": {"kept": selected["kept"], "digest": selected["digest"],
                                 "spec": {"method": "uniform", "nObs": n, "k": 17, "seed": 11}}}, f)
        cases.append(SetCase("from-select.json", "sets/from-select", selected["positions"], "sets",
                             {"name": "from-select", "file": "from-select.json"}, n))
    else:
        check("zarrmount select makes a cell set", False, text)
    for name, size in (("random-a", 23), ("random-b", 41), ("one-cell", 1)):
        S = random_set(n, size)
        write_json_set(sets_dir, name, S, n)
        cases.append(SetCase(f"{name}.json", f"sets/{name}", S, "sets", {"name": name, "file": name + ".json"}, n))
    for name, size in (("names-a", 19), ("names-b", 35)):
        S = random_set(n, size)
        names = [src.names[p] for p in S]
        RNG.shuffle(names)  # a set: the file's order means nothing
        write_txt_set(sets_dir, name, names)
        cases.append(SetCase(f"{name}.txt", f"sets/{name}", S, "sets", {"name": name, "file": name + ".txt"}, n))
    every = np.arange(n)
    write_json_set(sets_dir, "all-empty", every, n)                      # kept "": every cell
    # Every cell is written as no bytes: n zero gaps are not the encoding (the kernel's decoder
    # refuses them, saying so).
    write_json_set(sets_dir, "all-zeros", every, n,
                   kept=base64.b64encode(R.encode_gaps(every)).decode())
    # Sets that do not verify.
    S = random_set(n, 12)
    write_json_set(sets_dir, "bad-digest", S, n, digest_text="0123456789abcdef")
    write_json_set(sets_dir, "bad-nobs", S, n + 1, n_obs=n + 1)          # a set of a 61-cell source
    past = np.append(random_set(n, 5), n)
    write_json_set(sets_dir, "past-n", past, n)                          # digest of positions with 60
    write_json_set(sets_dir, "cut-short", S, n,
                   kept=base64.b64encode(R.encode_gaps(S) + b"\x80").decode())
    with open(os.path.join(sets_dir, "not-json.json"), "w") as f:
        f.write('{"cells": {"kept": ')
    write_txt_set(sets_dir, "unknown-name", [src.names[3], "cell_999", src.names[7]])
    write_json_set(sets_dir, "both", S, n)
    write_txt_set(sets_dir, "both", [src.names[p] for p in S])
    refused = {"bad-digest": ["digest"], "bad-nobs": ["nObs", "61"], "past-n": ["60", "position"],
               "cut-short": ["LEB128", "varint", "cut", "truncat", "kept"], "not-json": ["JSON"],
               "unknown-name": ["cell_999"], "both": ["both", ".txt"], "all-zeros": ["every cell"]}
    # where/ filters.
    where_cases = [("cell_type", ["T cell"]), ("cell_type", ["B cell", "NK", "Monocyte"]),
                   ("quality", ["high"]), ("label_utf8", [str(src.column("label_utf8").iloc[4]), str(src.column("label_utf8").iloc[31])]),
                   ("barcode", [str(src.column("barcode").iloc[p]) for p in (2, 9, 44, 50, 58)]),
                   ("bool", ["true"]), ("nullable_bool", ["false"])]
    for key, values in where_cases:
        base = b"where/" + key.encode() + b"/" + R.where_component(values)
        cases.append(SetCase(f"where {key} = {values}", base, src.where(key, values), "where",
                             {"key": key, "values": values}, n))

    with Mount(FULL_CSR, *OPTIONS, f"sets={sets_dir}", debug=False) as mount:
        try:
            listed = sorted(os.listdir(join(mount.point, "sets")))
        except OSError as e:
            listed = [f"listdir: {e}"]
        want = sorted(c.base.split("/", 1)[1] for c in cases if c.record_kind == "sets") + ["all-empty"]
        check("full-csr: sets/ lists exactly the sets that verify", listed == sorted(want),
              f"lists {listed}, want {sorted(want)}")
        for case in cases:
            if case.record_kind != "sets":
                continue
            name = case.base.split("/", 1)[1]
            try:
                target = os.readlink(join(mount.point, case.base))
            except OSError as e:
                target = f"readlink: {e}"
            check(f"full-csr: sets/{name} is a link to {name}@{case.digest} (the digest of its cells)",
                  target == f"{name}@{case.digest}", f"links to {target!r}")
        root = sorted(os.listdir(mount.point))
        check("full-csr: the root lists sets and where", "sets" in root and "where" in root, f"lists {root}")
        check("full-csr: where/ lists the obs keys stratified/ lists",
              sorted(os.listdir(join(mount.point, "where"))) == sorted(os.listdir(join(mount.point, "stratified"))),
              f"where/ {sorted(os.listdir(join(mount.point, 'where')))}, "
              f"stratified/ {sorted(os.listdir(join(mount.point, 'stratified')))}")
        check_where_listing(mount, src, "cell_type")
        check_where_listing(mount, src, "bool")
        check_where_listing(mount, src, "nullable_bool")
        check_where_listing(mount, src, "label_utf8")
        for case in cases:
            check_listing_of_set(mount, case)
            check_case(mount, src, case, view_list(src, case.positions, "cell_type", "X_umap", "quality", "X_pca"))
            check_set_explain(mount, case, "uniform/seed0/k=1")
        explained_link(mount, cases[1])
        for case in cases[1:3] + cases[-3:-2]:
            check_nested(mount, src, case)
        for base, label in (("sets/all-empty", "sets/all-empty (kept \"\")"),
                            ("where/bool/false,true", "where/bool/false,true")):
            check_every_cell(mount, src, base, label)
        for name, words in refused.items():
            check_refused_set(mount, sets_dir, name, words, listed)
        for case in cases[1:2] + cases[-3:-2]:
            kernel_agrees(src, case, "cell_type", "X_umap")
        check_select_set_file(src, os.path.join(sets_dir, "random-a.json"), cases[1])


def explained_link(mount, case):
    """explain of sets/NAME names the set, its digest and its file."""
    code, document, text = explain(join(mount.point, case.base))
    said = (document or {}).get("set") if isinstance(document, dict) else None
    ok = code == 0 and isinstance(said, dict) and said.get("digest") == case.digest and \
        isinstance(said.get("file"), str) and said["file"].endswith(case.record["file"])
    check(f"explain {case.base}: the set, its digest {case.digest} and its file", ok, text[-600:])


def check_select_set_file(src, set_file, case):
    """`zarrmount select --source FILE --set SETFILE` runs the method over the set."""
    K = max(1, len(case.positions) // 2)
    code, document, text = run_json(["select", "--source", src.path, "--set", set_file],
                                    json.dumps({"method": "uniform", "seed": 0, "k": K}).encode())
    got = document.get("order") if isinstance(document, dict) else None
    check(f"zarrmount select --set {os.path.basename(set_file)}: uniform k={K} over the set keeps the reading's cells",
          got == [int(p) for p in R.uniform(case.positions, 0, K)], text.strip()[-400:])


def check_where_listing(mount, src, key):
    """where/KEY/ lists escaped values: every value some cell holds, nothing that does not resolve."""
    path = join(mount.point, "where", key)
    try:
        names = sorted(os.fsencode(name) for name in os.listdir(path))
    except OSError as e:
        check(f"{src.label}: where/{key}/ lists", False, f"listdir: {e}")
        return
    column = src.column(key)
    if isinstance(column.dtype, pd.CategoricalDtype):
        held = {str(c) for c in column.dropna().unique()}
    elif isinstance(column.array, pd.arrays.BooleanArray):
        held = {"true" if v else "false" for v in column.dropna().unique()}
    elif column.dtype == bool:
        held = {"true" if v else "false" for v in column.unique()}
    else:
        held = {str(v) for v in column.unique()}
    want = {R.escape(v) for v in held}
    unresolved = [name for name in names if error_of(os.stat, join(path, name))]
    check(f"{src.label}: where/{key}/ lists the {len(want)} values cells hold, escaped, each resolving",
          want <= set(names) and not unresolved,
          f"missing {sorted(want - set(names))[:6]}; listed but not resolving {unresolved[:6]}; listed {names[:10]}")


def check_floor(path, sets_dir, n):
    """A view of a set reads only the source chunks holding its cells: a set of the first
    twentieth of the rows reads about that share of X, not all of it (a fresh mount, no disk
    cache, nothing made ahead: the view's own counters in stats.json)."""
    first = np.arange(0, max(1, n // 20), dtype=np.int64)
    os.makedirs(sets_dir, exist_ok=True)
    write_json_set(sets_dir, "first", first, n)
    with h5py.File(path, "r") as f:
        stored = sum(f["X"][part].id.get_storage_size() for part in ("data", "indices", "indptr"))
    with Mount(path, *OPTIONS, f"sets={sets_dir}", debug=False) as mount:
        link = os.readlink(join(mount.point, "sets", "first"))
        store = join(mount.point, "sets", "first", "file")
        for part in ("data", "indices", "indptr"):
            directory = join(store, "X", part)
            for name in os.listdir(directory):
                if not name.startswith("."):
                    with open(join(directory, name), "rb") as chunk:
                        chunk.read()
        with open(join(mount.point, ".zarrmount", "stats.json"), "rb") as f:
            views = json.load(f)["views"]
    key = "sets/" + link + "/file"
    read = views.get(key, {}).get("source", {}).get("bytesRead")
    check(f"escapes: sets/first/file/ (the first {len(first)} of {n} rows) reads a share of X's "
          f"{stored} stored bytes, not all of them", read is not None and 0 < read <= stored * 0.25,
          f"{read} bytes read by {key} (views: {sorted(views)[:6]})")


def escapes_checks(work):
    path = os.path.join(work, "escapes.h5ad")
    write_escapes(path)
    src = Source(path, "escapes")
    n = src.n
    sets_dir = os.path.join(work, "sets-escapes")
    os.makedirs(sets_dir)
    cases = []
    S = random_set(n, 300)
    write_json_set(sets_dir, "big", S, n)
    cases.append(SetCase("big.json", "sets/big", S, "sets", {"name": "big", "file": "big.json"}, n))
    picked = list(SPECIAL_NAMES) + list(random_set(n, 40, avoid=list(DUPLICATES) + list(SPECIAL_NAMES)))
    write_txt_set(sets_dir, "special-names", ["", *[src.names[p] for p in picked], ""])  # blank lines ignored
    cases.append(SetCase("special-names.txt", "sets/special-names", np.sort(picked), "sets",
                         {"name": "special-names", "file": "special-names.txt"}, n))
    write_txt_set(sets_dir, "dup-name", [src.names[3], "dup-A"])
    for values in (["CD4/CD8"], ["a,b", "50%"], ["."], [".."], ["tab\there", "new\nline", "del\x7fx"],
                   ["Zelle-\u00fc", "\u65e5\u672c\u8a9e", "na\u00efve T/NK, memory"], ["x%2Fy", ".hidden", "sp ace"]):
        base = b"where/tissue/" + R.where_component(values)
        cases.append(SetCase(f"where tissue = {values!r}", base, src.where("tissue", values), "where",
                             {"key": "tissue", "values": values}, n))
    for key, values in (("donor_text", ["d/1", "d,2"]), ("donor_text", ["."]), ("donor_text", ["d%3", "d\u00fc4", "d 5"]),
                        ("flag", ["false"]), ("flag_nullable", ["true"]), ("uid", [str(src.column("uid").iloc[77])])):
        base = b"where/" + key.encode() + b"/" + R.where_component(values)
        cases.append(SetCase(f"where {key} = {values!r}", base, src.where(key, values), "where",
                             {"key": key, "values": values}, n))

    with Mount(path, *OPTIONS, f"sets={sets_dir}", debug=False) as mount:
        listed = sorted(os.listdir(join(mount.point, "sets")))
        check("escapes: sets/ lists big and special-names (not dup-name)", listed == ["big", "special-names"],
              f"lists {listed}")
        for key in ("tissue", "donor_text", "flag", "flag_nullable"):
            check_where_listing(mount, src, key)
        try:
            uid = os.listdir(join(mount.point, "where/uid"))
        except OSError as e:
            uid = [f"listdir: {e}"]
        check(f"escapes: where/uid/ (a string column of {n} distinct values) lists none of them", uid == [],
              f"lists {len(uid)}: {uid[:5]}")
        for case in cases:
            check_listing_of_set(mount, case)
            check_case(mount, src, case, view_list(src, case.positions, "tissue", "X_umap", "donor_text", "X_pca"))
        for case in cases[:1] + cases[2:3]:
            check_nested(mount, src, case)
        check_set_explain(mount, cases[2], "full")
        kernel_agrees(src, cases[0], "tissue", "X_umap")
        check_refused_set(mount, sets_dir, "dup-name", ["dup-A"], listed)
        check_non_canonical(mount)
    check_floor(path, os.path.join(work, "sets-floor"), n)


NON_CANONICAL = [
    (b"where/tissue/CD4%2fCD8", "lowercase hex"),
    (b"where/tissue/%6Cung", "an escaped byte that need not be ('l')"),
    (b"where/tissue/lun%67", "an escaped byte that need not be ('g')"),
    (b"where/tissue/a,b", "a raw ',' inside a category name"),
    (b"where/tissue/CD4/CD8", "a raw '/' (two components)"),
    (b"where/tissue/50%", "a raw '%'"),
    (b"where/tissue/50%2", "a '%' with one hex digit"),
    (b"where/tissue/50%zz", "a '%' without hex digits"),
    (b"where/tissue/%2e", "'.' in lowercase hex"),
    (b"where/tissue/%2E.", "'..' half escaped"),
    (b"where/tissue/.%2E", "'..' half escaped"),
    (b"where/tissue/%2Ehidden", "'.hidden' with its dot escaped"),
    (b"where/tissue/x%2Fy", "'x%2Fy' unescaped (it names 'x/y')"),
    (b"where/tissue/tab\there", "a raw tab"),
    (b"where/tissue/del\x7fx", "a raw 0x7F"),
    (b"where/tissue/sp%20ace", "an escaped space"),
    (b"where/tissue/Zelle-%C3%BC", "escaped UTF-8 bytes"),
    (b"where/tissue/lung,", "an empty value after ','"),
    (b"where/tissue/,lung", "an empty value before ','"),
    (b"where/tissue/Lung", "another case"),
    (b"where/flag/True", "'True' for true"),
    (b"where/flag/1", "'1' for true"),
    (b"where/donor_text/d%2f1", "lowercase hex in a string value"),
    (b"where/score/0.5", "a column of numbers"),
    (b"where/nope/lung", "an obs key that does not exist"),
    (b"where/tissue/unused", "a category no cell holds: no cells"),
    (b"where/tissue/lung,lung", "a value listed twice"),
    (b"where/donor_text/nobody", "a string no cell holds: no cells"),
]


# Spellings of a value that exists, with the one that resolves: explain's reason gives it.
RESPELLED = [(b"where/tissue/CD4%2fCD8", "CD4%2FCD8"), (b"where/tissue/%6Cung", "lung"),
             (b"where/tissue/%2e", "%2E"), (b"where/tissue/%2Ehidden", ".hidden"),
             (b"where/tissue/sp%20ace", "sp ace"), (b"where/tissue/Zelle-%C3%BC", "Zelle-\u00fc"),
             (b"where/tissue/tab\there", "tab%09here"), (b"where/tissue/del\x7fx", "del%7Fx")]


def check_non_canonical(mount):
    for path, what in NON_CANONICAL:
        code = error_of(os.stat, join(mount.point, path))
        check(f"escapes: {path!r}: ENOENT ({what})", code == errno.ENOENT,
              f"stat gives {errno.errorcode.get(code, code) if code else 'success'}")
    for path, right in RESPELLED:
        code, document, text = explain(join(mount.point, path))
        reason = (document or {}).get("reason") or "" if isinstance(document, dict) else ""
        check(f"escapes: explain {path!r} exits 2 and gives the spelling that resolves, {right!r}",
              code == 2 and right in reason, text[-400:])


def priority_checks(work):
    out = os.path.join(work, "priority")
    manifest = gen.generate(out, cells=PRIORITY_CELLS, only={"original", "priority-seed7"})
    original = Source(manifest["files"]["original"]["path"], "original")
    ordered = Source(manifest["files"]["priority-seed7"]["path"], "priority-seed7", priority_seed=7)
    n = original.n
    sets_dir = os.path.join(work, "sets-priority")
    os.makedirs(sets_dir)
    cases = []
    S = random_set(n, 150)
    write_json_set(sets_dir, "chosen", S, n)
    cases.append(SetCase("chosen.json", "sets/chosen", S, "sets", {"name": "chosen", "file": "chosen.json"}, n))
    S = random_set(n, 60)
    write_txt_set(sets_dir, "by-name", [original.names[p] for p in S])
    cases.append(SetCase("by-name.txt", "sets/by-name", S, "sets", {"name": "by-name", "file": "by-name.txt"}, n))
    cases.append(SetCase("where cell_type = T-CD4, NK", b"where/cell_type/T-CD4,NK",
                         original.where("cell_type", ["T-CD4", "NK"]), "where",
                         {"key": "cell_type", "values": ["T-CD4", "NK"]}, n))
    same = original.where("cell_type", ["T-CD4", "NK"]).tolist() == ordered.where("cell_type", ["T-CD4", "NK"]).tolist()
    check("priority-seed7: where cell_type = T-CD4, NK names the same original positions in both files "
          "(the reading)", same)
    seen = {}
    for src in (original, ordered):
        with Mount(src.path, *OPTIONS, f"sets={sets_dir}", debug=False) as mount:
            for case in cases:
                specs = view_list(src, case.positions, "cell_type", "X_umap", "donor")
                check_case(mount, src, case, specs)
                for view, order, link in specs:
                    if order is None or link is not None:
                        continue
                    try:
                        _, obs, X = read_store(join(mount.point, case.base, view))
                        seen.setdefault((case.label, view), []).append((obs[POSITION].to_numpy(), X))
                    except Exception:  # noqa: BLE001  (check_case said why)
                        pass
            check_nested(mount, src, cases[0])
    for (label, view), got in seen.items():
        if len(got) != 2 or view in ("file", "full"):
            continue
        (a, xa), (b, xb) = got
        ok = list(a) == list(b)
        detail = first_difference(b, a)
        if ok:
            try:
                views.same(xb, xa, "/X")
            except Differ as e:
                ok, detail = False, str(e)
        check(f"priority-seed7: {label}: {view} keeps the original's cells in its order, with its X rows", ok, detail)


# ---- A set file changed while mounted ---------------------------------------------------------

def read_fd(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while True:
        piece = os.read(fd, 1 << 20)
        if not piece:
            return data
        data += piece


def decode_chunk(zarray, raw):
    data = raw
    if zarray.get("compressor"):
        data = numcodecs.get_codec(zarray["compressor"]).decode(data)
    for spec in reversed(zarray.get("filters") or []):
        data = numcodecs.get_codec(spec).decode(data)
    values = np.frombuffer(bytes(data), dtype=np.dtype(zarray["dtype"]))
    return values[:zarray["shape"][0]]


def wait_for_link(mount, name, want):
    """readlink sets/NAME until it is want (or the path is gone, for want None), at most
    SET_CHANGE_WAIT seconds; (what it was last, seconds waited)."""
    began = time.monotonic()
    while True:
        try:
            got = os.readlink(join(mount.point, "sets", name))
        except OSError as e:
            got = None if e.errno == errno.ENOENT else f"readlink: {e}"
        waited = time.monotonic() - began
        if got == want or waited > SET_CHANGE_WAIT:
            return got, waited
        time.sleep(0.05)


def view_positions(path):
    _, obs, _ = read_store(path)
    return obs[POSITION].to_numpy().astype(np.int64)


def expect_positions(path, want, what):
    """Raises Differ unless the store at path holds want's cells in want's order."""
    why = first_difference(view_positions(path), want)
    if why:
        raise Differ(f"{what}: {why}")


def changes_checks(work):
    src = Source(FULL_CSR, "full-csr")
    n = src.n
    sets_dir = os.path.join(work, "sets-changing")
    os.makedirs(sets_dir)
    first = random_set(n, 30)
    write_json_set(sets_dir, "moving", first, n)
    old = R.digest(first, n)
    K = 10
    old_order = R.uniform(first, 0, K)
    with Mount(FULL_CSR, *OPTIONS, f"sets={sets_dir}", debug=False) as mount:
        got, _ = wait_for_link(mount, "moving", f"moving@{old}")
        check(f"changes: sets/moving links to moving@{old}", got == f"moving@{old}", f"links to {got!r}")
        # A reader opens files of the old version (through the link and by its digest).
        store = join(mount.point, "sets/moving", f"uniform/seed0/k={K}")
        opened = {}
        try:
            for name in (".zmetadata", ".zattrs", f"obs/{POSITION}/.zarray", f"obs/{POSITION}/0", "X/indptr/0",
                         "X/indptr/.zarray"):
                opened[name] = os.open(join(store, name), os.O_RDONLY)
            by_digest = os.open(join(mount.point, f"sets/moving@{old}/file/obs/{POSITION}/0"), os.O_RDONLY)
            by_digest_meta = os.open(join(mount.point, f"sets/moving@{old}/file/obs/{POSITION}/.zarray"), os.O_RDONLY)
            # A first piece read before the change.
            os.read(opened[f"obs/{POSITION}/0"], 4)
        except OSError as e:
            check("changes: files of sets/moving open", False, str(e))
            return
        # Replaced (a new inode): the link follows.
        second = random_set(n, 25)
        new = R.digest(second, n)
        write_json_set(sets_dir, ".moving.tmp", second, n)
        os.replace(os.path.join(sets_dir, ".moving.tmp.json"), os.path.join(sets_dir, "moving.json"))
        got, waited = wait_for_link(mount, "moving", f"moving@{new}")
        check(f"changes: replaced, sets/moving links to moving@{new} (after {waited:.2f} s)", got == f"moving@{new}",
              f"links to {got!r}")
        # The files opened before read whole and the old cells.
        def old_reader():
            zarray = json.loads(read_fd(opened[f"obs/{POSITION}/.zarray"]))
            positions = decode_chunk(zarray, read_fd(opened[f"obs/{POSITION}/0"]))
            why = first_difference(positions, old_order)
            if why:
                raise Differ(f"obs/{POSITION}/0 opened before: {why}")
            metadata = json.loads(read_fd(opened[".zmetadata"]))["metadata"]
            view = metadata[".zattrs"]["zarrmount"]["view"]
            if view.get("k") != K or (view.get("sets") or {}).get("digest") != old:
                raise Differ(f".zmetadata opened before records {view}")
            if json.loads(read_fd(opened[".zattrs"]))["zarrmount"]["view"] != view:
                raise Differ(".zattrs and .zmetadata opened before disagree")
            indptr = decode_chunk(json.loads(read_fd(opened["X/indptr/.zarray"])), read_fd(opened["X/indptr/0"]))
            want = np.concatenate([[0], np.cumsum(np.diff(src.X.indptr)[old_order])])
            if list(indptr[:K + 1]) != list(want):
                raise Differ(f"X/indptr/0 opened before: {indptr[:K + 1].tolist()}, the old cells' {want.tolist()}")
            zarray = json.loads(read_fd(by_digest_meta))
            positions = decode_chunk(zarray, read_fd(by_digest))
            why = first_difference(positions, first)
            if why:
                raise Differ(f"moving@{old}/file/obs/{POSITION}/0 opened before: {why}")
        attempt("changes: files of the old version opened before the change read whole, the old cells "
                "(positions, X/indptr, .zmetadata and .zattrs agree)", old_reader)
        for fd in list(opened.values()) + [by_digest, by_digest_meta]:
            os.close(fd)
        # New lookups: the new version.
        def new_lookups():
            expect_positions(join(mount.point, "sets/moving", f"uniform/seed0/k={K}"), R.uniform(second, 0, K),
                             f"sets/moving/uniform/seed0/k={K}")
            expect_positions(join(mount.point, f"sets/moving@{new}/file"), second, f"sets/moving@{new}/file")
        attempt("changes: new lookups through sets/moving give the new version's cells", new_lookups)
        # The old version by its digest: gone, or the old cells (never the new ones).
        old_path = join(mount.point, f"sets/moving@{old}/file")
        code = error_of(os.stat, old_path)
        if code == 0:
            attempt(f"changes: sets/moving@{old}/file, looked up again, is still the old cells",
                    lambda: expect_positions(old_path, first, f"sets/moving@{old}/file"))
        else:
            check(f"changes: sets/moving@{old}/ looked up again is ENOENT (no longer kept)", code == errno.ENOENT,
                  errno.errorcode.get(code, code))
        # Rewritten in place (same inode, another size).
        third = random_set(n, 9)
        time.sleep(MTIME_STEP)
        write_json_set(sets_dir, "moving", third, n)
        third_digest = R.digest(third, n)
        got, waited = wait_for_link(mount, "moving", f"moving@{third_digest}")
        check(f"changes: rewritten in place, sets/moving links to moving@{third_digest} (after {waited:.2f} s)",
              got == f"moving@{third_digest}", f"links to {got!r}")
        attempt("changes: the rewritten set's file/ holds its cells",
                lambda: expect_positions(join(mount.point, "sets/moving/file"), third, "sets/moving/file"))
        # Broken (the same size: only the mtime says it changed): no longer resolves, not
        # listed, explain says why.
        time.sleep(MTIME_STEP)
        log_before = len(mount.log())
        write_json_set(sets_dir, "moving", third, n, digest_text="ffffffffffffffff")
        got, waited = wait_for_link(mount, "moving", None)
        check(f"changes: a digest broken in place: sets/moving no longer resolves (after {waited:.2f} s)", got is None,
              f"links to {got!r}")
        listed = os.listdir(join(mount.point, "sets"))
        check("changes: the broken set is not listed", "moving" not in listed, f"lists {listed}")
        code, document, text = explain(join(mount.point, "sets/moving"))
        check("changes: explain sets/moving exits 2 saying the digest does not match",
              code == 2 and "digest" in ((document or {}).get("reason") or ""), text[-400:])
        # A new file while mounted; then the set removed.
        fresh = random_set(n, 7)
        write_json_set(sets_dir, "fresh", fresh, n)
        got, waited = wait_for_link(mount, "fresh", f"fresh@{R.digest(fresh, n)}")
        check(f"changes: a new file: sets/fresh links to its version (after {waited:.2f} s)",
              got == f"fresh@{R.digest(fresh, n)}", f"links to {got!r}")
        listed = sorted(os.listdir(join(mount.point, "sets")))
        check("changes: sets/ lists fresh", listed == ["fresh"], f"lists {listed}")
        os.remove(os.path.join(sets_dir, "fresh.json"))
        got, waited = wait_for_link(mount, "fresh", None)
        check(f"changes: removed: sets/fresh no longer resolves (after {waited:.2f} s)", got is None,
              f"links to {got!r}")
        listed = sorted(os.listdir(join(mount.point, "sets")))
        check("changes: sets/ lists nothing once fresh is removed and moving is broken", listed == [], f"lists {listed}")
        code, document, text = explain(join(mount.point, "sets/fresh"))
        check("changes: explain sets/fresh exits 2 once it is removed", code == 2 and (document or {}).get("reason"),
              text[-400:])
        lines = mount.log()[log_before:].decode(errors="replace").splitlines()
        moving = [line for line in lines if "sets/moving" in line]
        check("changes: from the break on, the log names sets/moving once, saying the digest does not match, "
              "and says fresh is gone",
              len(moving) == 1 and "digest" in moving[0] and any("sets/fresh" in line for line in lines),
              "\n".join(lines[-12:]))


def no_sets_option():
    """Without -o sets=: sets/ is not listed and does not exist; where/ is there."""
    with Mount(FULL_CSR, *OPTIONS, debug=False) as mount:
        root = sorted(os.listdir(mount.point))
        code = error_of(os.stat, join(mount.point, "sets"))
        check("without -o sets=: the root lists where but not sets, and sets/ is ENOENT",
              "where" in root and "sets" not in root and code == errno.ENOENT, f"lists {root}; stat sets: {code}")
        code, document, text = explain(join(mount.point, "sets"))
        check("without -o sets=: explain MNT/sets exits 2 saying to mount with -o sets=",
              code == 2 and "sets=" in ((document or {}).get("reason") or ""), text[-300:])


def main():
    work = tempfile.mkdtemp(prefix="zm-sets-", dir=PARENT)
    for step in (full_csr_checks, escapes_checks, priority_checks, changes_checks):
        try:
            step(work)
        except Exception:  # noqa: BLE001
            check(f"{step.__name__} ran to its end", False, traceback.format_exc(limit=6))
    try:
        no_sets_option()
    except Exception:  # noqa: BLE001
        check("no_sets_option ran to its end", False, traceback.format_exc(limit=6))
    return report()


if __name__ == "__main__":
    sys.exit(main())
