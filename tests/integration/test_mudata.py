#!/usr/bin/python3
"""MuData .h5mu sources through a live mount (issue 22), every view against an independent
reading of the source (h5py and read_elem: anndata 0.8's where installed, anndata_elements.py's
otherwise; the cells and order of each view from set_rules.py, the tests' reading of the
selection kernel; nothing here asks zarrmount what a view should hold but B0, as test_sets.py
does).

Sources: tests/source/make_mudata_sources.py's three files, written at test time into a
temporary directory (three-modalities.h5mu: 3,000 cells, rna / prot / atac in shuffled orders
with cells of none; one-modality-all-cells.h5mu; partial-order.h5mu: a mod-order naming one
of three modalities, no axis), and ../shared/data/modern/modern-citeseq-800.h5mu where
../shared is here (a TAP skip saying so where it is not; its reading is checked against its
modern-citeseq-800.expect.npz first).

For each source, over file/, full/, uniform/ (seeds 0 and 3, two k each), blocks/ (B0 and
B=), stratified/ over a global categorical, spatial/ over a global embedding, a where/ filter
over the categorical and a sets/ set of obs names (-o sets=DIR):
- the root .zattrs: encoding-type MuData, encoding-version and axis as the source's root has
  them, the zarrmount record (method, nObs, k, seed, digest; source format h5mu, nObs, nVars,
  bytes); no global X;
- the global cells and their order (obs/cellucid_original_position, uint32) are the reading's;
  obs, obsm and obsp (cut both ways) their rows; var, varm, varp, uns as stored (full/'s uns
  has the priority record besides);
- mod/.zattrs mod-order: the source's mod-order when each of its names is a group of /mod, then
  the other groups in the file's order; mod/ holds exactly those;
- each modality mod/NAME, read alone with anndata.read_zarr: its rows are the view's cells it
  measured, in view order (obsmap/NAME[g] - 1 of each); X (dense, CSR, CSC), layers, obs (every
  column, the index; cellucid_original_position its rows in the modality), obsm, obsp (cut
  both ways), var, varm, varp, uns as the reading has them;
- obsmap/NAME: the 1-based row of each view cell in mod/NAME, 0 where it has none (uint32);
  varmap/NAME as stored;
- zarr.open_consolidated(VIEW) opens and lists the same arrays as the directory, mod/NAME's
  among them;
- uniform/seed0 k1 < k2 nested: the global cells and every modality's rows;
- a view of so few cells that some modality measured none of them is still a store anndata
  reads (shape (0, genes));
- file/ serves every HDF5 object of the source at its path (a dataset as an array, a group as
  a group) or .zarrmount/info.json lists it (or a group holding it) as skipped, and nothing
  else is served but obs/cellucid_original_position (global and each modality's);
  `zarrmount inspect --json`'s skipped lines are info.json's; file/'s arrays are the source's
  datasets value for value where its order is the file's (global ones, modalities whose rows
  are in global order, every modality's var, varm, varp and uns).

Mounts use cache_dir=none and ahead_idle=0; run by run_mount_test.sh, which unmounts whatever is
left in every outcome. Prints TAP.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "source"))
warnings.simplefilter("ignore")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import zarr  # noqa: E402

from live_mount import BINARY, PARENT, Mount, check, report  # noqa: E402
import make_mudata_sources  # noqa: E402
import readers  # noqa: E402
import set_rules as R  # noqa: E402
import views  # noqa: E402
from views import Differ, attempt, first_difference  # noqa: E402

try:
    from anndata._io.specs import read_elem  # noqa: E402
except ImportError:  # Debian 13: anndata 0.8's rules, without anndata (readers.py)
    read_elem = readers.read_elem

OPTIONS = ("cache_dir=none", "ahead_idle=0")
POSITION = "cellucid_original_position"
SHARED = os.environ.get("ZM_SHARED_DATA", "../shared/data")
SHARED_H5MU = os.path.join(SHARED, "modern", "modern-citeseq-800.h5mu")
SHARED_EXPECT = os.path.join(SHARED, "modern", "modern-citeseq-800.expect.npz")
RNG = random.Random(22)


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def run_json(args):
    done = subprocess.run([BINARY, *args], capture_output=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"zarrmount {' '.join(args)}: {done.stdout.decode(errors='replace')}"
                           f"{done.stderr.decode(errors='replace')}")
    return json.loads(done.stdout)


# ---- The reading -----------------------------------------------------------------------------

def parts_of(adata):
    """An AnnData's (or readers.Data's) elements as plain dicts."""
    return {"X": adata.X, "obs": adata.obs, "var": adata.var, "obsm": dict(adata.obsm), "varm": dict(adata.varm),
            "obsp": dict(adata.obsp), "varp": dict(adata.varp), "layers": dict(adata.layers), "uns": dict(adata.uns)}


def rows_of(value, rows):
    if isinstance(value, pd.DataFrame):
        return value.iloc[rows]
    if sp.issparse(value):
        return value[rows]
    return np.asarray(value)[rows]


def pair_of(value, rows):
    if sp.issparse(value):
        return value[rows][:, rows]
    return np.asarray(value)[np.ix_(rows, rows)]


class Reading:
    """A .h5mu as h5py and read_elem read it: the global annotations, obsmap and varmap, each
    modality (read_elem of /mod/NAME), the modalities' order and every HDF5 object."""

    def __init__(self, path, label, stratify, embedding, where_values):
        self.path, self.label = path, label
        self.stratify, self.embedding, self.where_values = stratify, embedding, where_values
        self.bytes = os.path.getsize(path)
        with h5py.File(path, "r") as f:
            self.root_attrs = {k: (text(v) if isinstance(v, (str, bytes)) else v) for k, v in f.attrs.items()}
            self.glob = {key: read_elem(f[key]) for key in ("obs", "var", "obsm", "varm", "obsp", "varp", "uns")
                         if key in f}
            for key in ("obsm", "varm", "obsp", "varp", "uns"):
                self.glob.setdefault(key, {})
            self.obsmap = {m: f["obsmap"][m][()] for m in f["obsmap"]}
            self.varmap = {m: f["varmap"][m][()] for m in f["varmap"]} if "varmap" in f else {}
            groups = [m for m in f["mod"] if isinstance(f["mod"][m], h5py.Group)]
            stored = [text(x) for x in f["mod"].attrs.get("mod-order", [])]
            if stored and all(m in groups for m in stored) and len(set(stored)) == len(stored):
                self.mod_order = stored + [m for m in groups if m not in stored]
            else:
                self.mod_order = groups
            self.mods = {m: parts_of(read_elem(f["mod"][m])) for m in self.mod_order}
            self.objects = []
            f.visititems(lambda name, node: self.objects.append((name, isinstance(node, h5py.Group))))
        self.n = len(self.glob["obs"])
        self.n_vars = len(self.glob["var"])
        self.names = [str(x) for x in self.glob["obs"].index]
        info = run_json(["inspect", path, "--json"])
        self.b0 = info["defaultBlockSize"]["blockSize"]
        self.inspect_skipped = info.get("skipped")

    # The kernel's inputs, by global position.
    def strata(self):
        column = self.glob["obs"][self.stratify]
        return R.categorical_strata(column.cat.codes.to_numpy(), len(column.cat.categories))

    def coordinates(self):
        values = np.asarray(self.glob["obsm"][self.embedding])
        return values[:, :min(3, values.shape[1])]

    def where(self, values):
        column = self.glob["obs"][self.stratify]
        categories = [str(c) for c in column.cat.categories]
        codes = column.cat.codes.to_numpy()
        return np.flatnonzero([c >= 0 and categories[c] in set(values) for c in codes])

    # A view's modalities.
    def modality_rows(self, m, order):
        """The rows of modality m a view of order holds, in view order."""
        rows = self.obsmap[m][np.asarray(order, dtype=np.int64)].astype(np.int64)
        return rows[rows > 0] - 1

    def view_obsmap(self, m, order):
        rows = self.obsmap[m][np.asarray(order, dtype=np.int64)]
        out = np.zeros(len(order), dtype=np.uint32)
        out[rows > 0] = np.arange(1, int((rows > 0).sum()) + 1, dtype=np.uint32)
        return out


def check_reading_against_expect(src):
    """The reading of the shared example equals its expect.npz (made by anndata 0.13 from the
    objects written): obsmap, varmap, names, mod-order, each modality's X and obs names."""
    z = np.load(SHARED_EXPECT)
    problems = []
    if list(z["mod_order"]) != src.mod_order:
        problems.append(f"mod_order {list(z['mod_order'])} vs {src.mod_order}")
    if list(z["obs_names"]) != src.names:
        problems.append("obs_names")
    for m in src.mod_order:
        for kind, mapping in (("obsmap", src.obsmap), ("varmap", src.varmap)):
            if not np.array_equal(z[f"{kind}/{m}"], mapping[m]) or mapping[m].dtype != np.uint32:
                problems.append(f"{kind}/{m}")
        mod = src.mods[m]
        if list(z[f"mod/{m}/obs_names"]) != [str(x) for x in mod["obs"].index]:
            problems.append(f"mod/{m}/obs_names")
        X = mod["X"]
        if str(z[f"mod/{m}/X/format"]) == "csr":
            want = sp.csr_matrix((z[f"mod/{m}/X/data"], z[f"mod/{m}/X/indices"], z[f"mod/{m}/X/indptr"]),
                                 shape=tuple(z[f"mod/{m}/X/shape"]))
            if not sp.issparse(X) or X.format != "csr" or (X != want).nnz:
                problems.append(f"mod/{m}/X")
        elif not np.array_equal(np.asarray(X, dtype=np.float64), z[f"mod/{m}/X/dense"]):
            problems.append(f"mod/{m}/X")
    check(f"{src.label}: the reading (h5py, read_elem) equals modern-citeseq-800.expect.npz "
          "(names, mod-order, obsmap, varmap, each modality's X and obs names)", not problems, "; ".join(problems))


# ---- Views and their expected cells ----------------------------------------------------------

class ViewCase:
    def __init__(self, path, order, method, seed=None, base=None):
        self.path, self.order, self.method, self.seed = path, np.asarray(order, dtype=np.int64), method, seed
        self.base = base  # sets/NAME or where/KEY/VALUES, or None for the root's


def view_cases(src, set_name, set_positions):
    n = src.n
    every = np.arange(n)
    k1, k2 = max(1, n // 10), max(2, n // 3)
    cases = [ViewCase("file", every, "file"), ViewCase("full", R.full_order(every, 0), "full")]
    for seed in (0, 3):
        for k in (k1, k2):
            cases.append(ViewCase(f"uniform/seed{seed}/k={k}", R.uniform(every, seed, k), "uniform", seed))
    k = max(1, n // 4)
    cases.append(ViewCase(f"blocks/seed0/k={k}", R.blocks(every, 0, k, src.b0), "blocks", 0))
    cases.append(ViewCase(f"blocks/B=37/seed1/k={k}", R.blocks(every, 1, k, 37), "blocks", 1))
    k = max(1, n // 5)
    cases.append(ViewCase(f"stratified/{src.stratify}/seed0/k={k}", R.over_strata(every, src.strata(), 0, k),
                          "stratified", 0))
    cases.append(ViewCase(f"spatial/{src.embedding}/seed0/k={k}", R.spatial(every, src.coordinates(), 0, k),
                          "spatial", 0))
    S = src.where(src.where_values)
    base = "where/" + src.stratify + "/" + R.where_component(src.where_values).decode()
    cases.append(ViewCase(f"{base}/file", S, "file", base=base))
    k = max(1, len(S) // 2)
    cases.append(ViewCase(f"{base}/uniform/seed0/k={k}", R.uniform(S, 0, k), "uniform", 0, base=base))
    base = f"sets/{set_name}"
    cases.append(ViewCase(f"{base}/full", R.full_order(set_positions, 0), "full", base=base))
    k = max(1, len(set_positions) // 3)
    cases.append(ViewCase(f"{base}/uniform/seed2/k={k}", R.uniform(set_positions, 2, k), "uniform", 2, base=base))
    return cases, (k1, k2)


def small_case(src):
    """A uniform view of so few cells that some modality measured none of them (None if every
    cell is every modality's)."""
    every = np.arange(src.n)
    for k in (1, 2, 3):
        for seed in range(64):
            order = R.uniform(every, seed, k)
            if any(len(src.modality_rows(m, order)) == 0 for m in src.mod_order):
                return ViewCase(f"uniform/seed{seed}/k={k}", order, "uniform", seed)
    return None


# ---- One view --------------------------------------------------------------------------------

def check_root_attrs(src, case, attrs):
    if attrs.get("encoding-type") != "MuData":
        raise Differ(f".zattrs encoding-type {attrs.get('encoding-type')!r}, not 'MuData'")
    if attrs.get("encoding-version") != src.root_attrs.get("encoding-version"):
        raise Differ(f".zattrs encoding-version {attrs.get('encoding-version')!r}, the source's "
                     f"{src.root_attrs.get('encoding-version')!r}")
    if "axis" in src.root_attrs:
        if attrs.get("axis") != int(src.root_attrs["axis"]):
            raise Differ(f".zattrs axis {attrs.get('axis')!r}, the source's {src.root_attrs['axis']!r}")
    elif "axis" in attrs:
        raise Differ(f".zattrs axis {attrs['axis']!r}, the source has none")
    record = attrs.get("zarrmount") or {}
    view, source = record.get("view") or {}, record.get("source") or {}
    want = {"method": case.method, "nObs": src.n, "k": len(case.order), "digest": R.digest(np.sort(case.order), src.n)}
    if case.seed is not None:
        want["seed"] = case.seed
    for key, value in want.items():
        if view.get(key) != value:
            raise Differ(f".zattrs zarrmount.view.{key} = {view.get(key)!r}, not {value!r} ({view})")
    want = {"format": "h5mu", "nObs": src.n, "nVars": src.n_vars, "bytes": src.bytes}
    for key, value in want.items():
        if source.get(key) != value:
            raise Differ(f".zattrs zarrmount.source.{key} = {source.get(key)!r}, not {value!r}")


def without_priority(uns, case, n):
    """full/'s uns holds cellucid/priority {seed 0, specVersion 1, nObs} besides the source's
    (views.check_view's rule): checked and taken out."""
    if case.method != "full":
        return uns
    uns = dict(uns)
    cellucid = dict(uns.get("cellucid") or {})
    priority = cellucid.pop("priority", None)
    if priority is None or {k: int(v) for k, v in priority.items()} != {"seed": 0, "specVersion": 1, "nObs": n}:
        raise Differ(f"/uns/cellucid/priority: {priority!r}")
    if cellucid:
        uns["cellucid"] = cellucid
    else:
        uns.pop("cellucid", None)
    return uns


def check_global(src, case, group):
    """The root's elements: obs/obsm/obsp rows, the rest as stored, obsmap, varmap, mod/."""
    keys = set(group.keys())
    if "X" in keys:
        raise Differ("the store has a global X")
    obs = read_elem(group["obs"])
    if POSITION not in obs.columns:
        raise Differ(f"/obs: no {POSITION} column")
    if obs[POSITION].dtype != np.uint32:
        raise Differ(f"/obs/{POSITION}: dtype {obs[POSITION].dtype}, not uint32")
    why = first_difference(obs[POSITION].to_numpy(), case.order)
    if why:
        raise Differ(f"/obs/{POSITION}: {why}")
    views.same(obs.drop(columns=[POSITION]), src.glob["obs"].iloc[case.order], "/obs")
    obsm = read_elem(group["obsm"]) if "obsm" in keys else {}
    views.same(obsm, {k: rows_of(v, case.order) for k, v in src.glob["obsm"].items()}, "/obsm")
    obsp = read_elem(group["obsp"]) if "obsp" in keys else {}
    views.same(obsp, {k: pair_of(v, case.order) for k, v in src.glob["obsp"].items()}, "/obsp")
    views.same(read_elem(group["var"]), src.glob["var"], "/var")
    for key in ("varm", "varp"):
        views.same(read_elem(group[key]) if key in keys else {}, src.glob[key], f"/{key}")
    uns = without_priority(read_elem(group["uns"]) if "uns" in keys else {}, case, src.n)
    views.same(uns, src.glob["uns"], "/uns")
    obsmap = read_elem(group["obsmap"])
    if sorted(obsmap) != sorted(src.mod_order):
        raise Differ(f"/obsmap holds {sorted(obsmap)}, not the modalities {sorted(src.mod_order)}")
    for m in src.mod_order:
        got = np.asarray(obsmap[m])
        if got.dtype != np.uint32:
            raise Differ(f"/obsmap/{m}: dtype {got.dtype}, not uint32")
        why = first_difference(got, src.view_obsmap(m, case.order))
        if why:
            raise Differ(f"/obsmap/{m}: {why}")
    if src.varmap:
        varmap = read_elem(group["varmap"])
        views.same(varmap, src.varmap, "/varmap")
    mod = group["mod"]
    order = readers.attrs(mod).get("mod-order")
    if order != src.mod_order:
        raise Differ(f"/mod/.zattrs mod-order {order!r}, not {src.mod_order!r}")
    if sorted(mod.keys()) != sorted(src.mod_order):
        raise Differ(f"/mod holds {sorted(mod.keys())}, not {sorted(src.mod_order)}")


def read_modality(store):
    """anndata.read_zarr(VIEW/mod/NAME) (readers.read_zarr where anndata is not installed)."""
    return views.read_view(store)


def check_modality(src, case, m, store):
    """mod/NAME read alone: the rows the reading gives, every element."""
    rows = src.modality_rows(m, case.order)
    attrs = readers.attrs(readers.open_group(store))
    if (attrs.get("encoding-type"), attrs.get("encoding-version")) != ("anndata", "0.1.0"):
        raise Differ(f"/mod/{m}/.zattrs: encoding {attrs.get('encoding-type')!r} {attrs.get('encoding-version')!r}")
    got = parts_of(read_modality(store))
    want = src.mods[m]
    obs = got["obs"]
    views.check_positions(obs, rows, f"/mod/{m}/obs")
    if got["X"] is None or got["X"].shape != (len(rows), want["X"].shape[1]):
        raise Differ(f"/mod/{m}/X: shape {None if got['X'] is None else got['X'].shape}, "
                     f"not {(len(rows), want['X'].shape[1])}")
    views.same(got["X"], rows_of(want["X"], rows), f"/mod/{m}/X")
    views.same(obs.drop(columns=[POSITION]), want["obs"].iloc[rows], f"/mod/{m}/obs")
    for key in ("obsm", "layers"):
        views.same(got[key], {k: rows_of(v, rows) for k, v in want[key].items()}, f"/mod/{m}/{key}")
    views.same(got["obsp"], {k: pair_of(v, rows) for k, v in want["obsp"].items()}, f"/mod/{m}/obsp")
    for key in ("var", "varm", "varp", "uns"):
        views.same(got[key], want[key], f"/mod/{m}/{key}")
    return rows


def check_consolidated(src, store):
    """zarr.open_consolidated opens the view; its arrays are the directory's, mod/NAME's among them."""
    consolidated = zarr.open_consolidated(store, mode="r")
    listed = sorted(path for path, _ in readers.walk_arrays(consolidated))
    walked = sorted(path for path, _ in readers.walk_arrays(readers.open_group(store)))
    if listed != walked:
        raise Differ(f".zmetadata lists {len(listed)} arrays, the directory holds {len(walked)}: "
                     f"{sorted(set(listed) ^ set(walked))[:6]}")
    for m in src.mod_order:
        if f"mod/{m}/obs/{POSITION}" not in listed or not any(p.startswith(f"mod/{m}/X") for p in listed):
            raise Differ(f".zmetadata lists no mod/{m}/obs/{POSITION} or mod/{m}/X")
        if not np.array_equal(readers.read(consolidated["obsmap"][m]), readers.read(readers.open_array(
                os.path.join(store, "obsmap", m)))):
            raise Differ(f"obsmap/{m} read through .zmetadata differs")


def check_view(mount, src, case):
    store = os.path.join(mount.point, case.path)
    label = f"{src.label}: {case.path}"

    attempt(f"{label}: .zattrs: MuData, the source's encoding-version and axis, the view's and the source's "
            "record", lambda: check_root_attrs(src, case, readers.attrs(readers.open_group(store))))
    attempt(f"{label}: {len(case.order)} global cells as the reading keeps them; obs, obsm, obsp, var, varm, "
            "varp, uns, obsmap, varmap, mod-order", lambda: check_global(src, case, readers.open_group(store)))
    rows = {}
    for m in src.mod_order:
        expected = len(src.modality_rows(m, case.order))
        rows[m] = attempt(f"{label}: mod/{m} ({expected} rows) read alone: its rows in view order, X, layers, obs, "
                          "obsm, obsp, var, varm, varp, uns", lambda m=m: check_modality(src, case, m,
                                                                                       os.path.join(store, "mod", m)))
    attempt(f"{label}: zarr.open_consolidated lists the directory's arrays, each modality's among them",
            lambda: check_consolidated(src, store))
    return rows


def check_nested(mount, src, k1, k2):
    def run():
        orders, mods = [], []
        for k in (k1, k2):
            store = os.path.join(mount.point, f"uniform/seed0/k={k}")
            group = readers.open_group(store)
            orders.append(readers.read(group["obs"][POSITION]).astype(np.int64))
            mods.append({m: readers.read(group["mod"][m]["obs"][POSITION]).astype(np.int64) for m in src.mod_order})
        if list(orders[1][:len(orders[0])]) != list(orders[0]):
            raise Differ(f"k={k1}'s cells are not the first of k={k2}'s")
        for m in src.mod_order:
            small, large = mods[0][m], mods[1][m]
            if len(small) > len(large) or list(large[:len(small)]) != list(small):
                raise Differ(f"mod/{m}: k={k1}'s {len(small)} rows are not the first of k={k2}'s {len(large)}")
    attempt(f"{src.label}: uniform/seed0 k={k1} and k={k2} nested: the global cells and each modality's rows", run)


def check_small(mount, src):
    case = small_case(src)
    if case is None:
        check(f"{src.label}: a view where some modality has no row # SKIP every cell is measured by every "
              "modality", True)
        return
    empty = [m for m in src.mod_order if len(src.modality_rows(m, case.order)) == 0]
    check_view(mount, src, case)

    def shapes():
        for m in empty:
            got = read_modality(os.path.join(mount.point, case.path, "mod", m))
            want = (0, src.mods[m]["X"].shape[1])
            if tuple(got.X.shape) != want or got.n_obs != 0:
                raise Differ(f"mod/{m}: X {got.X.shape}, n_obs {got.n_obs}, not {want}")
    attempt(f"{src.label}: {case.path}: mod/{', '.join(empty)} (no row) read as (0, genes) stores", shapes)


# ---- file/ and the skipped list --------------------------------------------------------------

def served_nodes(root):
    """{path: is_group} of every Zarr node under root (directories holding .zgroup / .zarray)."""
    out = {}
    for directory, names, files in os.walk(root):
        relative = os.path.relpath(directory, root)
        if relative == ".":
            continue
        if ".zgroup" in files:
            out[relative] = True
        elif ".zarray" in files:
            out[relative] = False
            names[:] = []
    return out


def check_file_walk(mount, src):
    try:
        with open(os.path.join(mount.point, ".zarrmount", "info.json")) as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        check(f"{src.label}: .zarrmount/info.json reads", False, str(e))
        return
    skipped = info.get("skipped")
    check(f"{src.label}: info.json's skipped lines are `zarrmount inspect --json`'s",
          isinstance(skipped, list) and skipped == src.inspect_skipped,
          f"info.json {skipped!r}; inspect {src.inspect_skipped!r}")
    skipped = skipped if isinstance(skipped, list) else []
    skipped_paths = {line.split(": ", 1)[0].strip("/") for line in skipped}

    served = served_nodes(os.path.join(mount.point, "file"))

    def listed(path):
        """path is listed as skipped, or a group holding it that is not served is."""
        parts = path.split("/")
        return path in skipped_paths or any("/".join(parts[:i]) in skipped_paths and "/".join(parts[:i]) not in served
                                            for i in range(1, len(parts)))

    wrong = []
    for path, is_group in src.objects:
        if path in served:
            if served[path] != is_group:
                wrong.append(f"/{path}: a {'group' if is_group else 'dataset'} served as "
                             f"{'a group' if served[path] else 'an array'}")
        elif not listed(path):
            wrong.append(f"/{path}: a {'group' if is_group else 'dataset'} neither served nor listed as skipped")
    check(f"{src.label}: file/ serves each of the source's {len(src.objects)} HDF5 objects at its path or "
          "info.json lists it as skipped", not wrong, "\n".join(wrong[:12]))
    known = {path for path, _ in src.objects}
    added = {f"obs/{POSITION}"} | {f"mod/{m}/obs/{POSITION}" for m in src.mod_order}
    extra = sorted(path for path in served if path not in known and path not in added)
    missing_added = sorted(added - set(served))
    check(f"{src.label}: file/ serves nothing else but obs/{POSITION} (global and each modality's)",
          not extra and not missing_added, f"extra {extra[:12]}; missing {missing_added}")
    strays = [line for line in skipped if line.split(": ", 1)[0].strip("/") not in known | {""}]
    check(f"{src.label}: each of info.json's {len(skipped)} skipped lines names an object of the source and why "
          "(\"HDF5PATH: why\")", not strays and all(": " in line for line in skipped), "\n".join(strays[:8]))


def stored_values(dataset):
    """A dataset's values as h5py holds them, strings as str."""
    if h5py.check_string_dtype(dataset.dtype) is not None:
        values = dataset.asstr()[()]
        return np.asarray(values, dtype=object)
    return np.asarray(dataset[()])


def check_file_values(mount, src):
    """file/ keeps each cell where the file has it, so its arrays are the source's datasets value
    for value (shape, dtype up to byte order), where the view's order is the file's: every global
    dataset, a modality's datasets where its rows are in global order already (obsmap ascending),
    and every modality's var, varm, varp and uns."""
    in_order = set()
    for m in src.mod_order:
        rows = src.obsmap[m][src.obsmap[m] > 0].astype(np.int64)
        if np.array_equal(rows, np.arange(1, len(rows) + 1)):
            in_order.add(m)

    def compared(path):
        parts = path.split("/")
        if parts[0] == "obsmap":
            return len(parts) == 2 and parts[1] in in_order
        if parts[0] != "mod":
            return True
        return len(parts) > 2 and (parts[1] in in_order or parts[2] in ("var", "varm", "varp", "uns"))

    def run():
        wrong, count = [], 0
        with h5py.File(src.path, "r") as f:
            for path, is_group in src.objects:
                if is_group or not compared(path):
                    continue
                served = os.path.join(mount.point, "file", path)
                if not os.path.exists(os.path.join(served, ".zarray")):
                    continue  # file/'s walk says whether it had to be
                count += 1
                want = stored_values(f[path])
                got = readers.read(readers.open_array(served))
                got = np.asarray(got)
                try:
                    views.same(got if got.dtype.kind != "U" else got.astype(object), want, f"/{path}")
                except Differ as e:
                    wrong.append(str(e))
        if wrong:
            raise Differ("\n".join(wrong[:10]))
        if count == 0:
            raise Differ("no dataset compared")
        return count
    attempt(f"{src.label}: file/'s arrays are the source's datasets, value for value (global ones, "
            f"modalities in global order: {sorted(in_order) or 'none'}, every modality's var/varm/varp/uns)", run)


# ---- A source --------------------------------------------------------------------------------

def check_source(work, src):
    sets_dir = os.path.join(work, f"sets-{src.label}")
    os.makedirs(sets_dir)
    positions = np.sort(np.asarray(RNG.sample(range(src.n), max(3, src.n // 4)), dtype=np.int64))
    names = [src.names[p] for p in positions]
    RNG.shuffle(names)  # a set: the file's order means nothing
    with open(os.path.join(sets_dir, "chosen.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")
    cases, (k1, k2) = view_cases(src, "chosen", positions)
    with Mount(src.path, *OPTIONS, f"sets={sets_dir}", debug=False) as mount:
        for case in cases:
            check_view(mount, src, case)
        check_nested(mount, src, k1, k2)
        check_small(mount, src)
        check_file_walk(mount, src)
        check_file_values(mount, src)


# Files whose obsmap or /mod cannot say which cells the modalities measured: each refused at
# open (zarrmount inspect exits 2, as a mount does) with one line naming what is wrong.
REFUSALS = [
    ("an obsmap row past the modality's rows", lambda f: put_obsmap(f, "rna", 0, 10 ** 6),
     "not a row of modality rna"),
    ("two cells naming one modality row", lambda f: put_obsmap(f, "rna", measured(f, "rna")[1],
                                                                 first_row(f, "rna")),
     "for two cells"),
    ("a modality row no cell names", lambda f: put_obsmap(f, "rna", first_cell(f, "rna"), 0),
     "each of its rows must be one global cell's"),
    ("a negative obsmap", lambda f: retype_obsmap(f, "rna", np.int64, -1), "not a row of modality rna"),
    ("obsmap of floats", lambda f: retype_obsmap(f, "rna", np.float32, None), "must hold integers"),
    ("no obsmap for a modality", lambda f: f.__delitem__("obsmap/rna"), "obsmap/rna must be"),
    ("an obsmap one short", lambda f: resize_obsmap(f, "rna", -1), "obsmap/rna"),
    ("/mod with no modality", lambda f: [f["mod"].__delitem__(k) for k in list(f["mod"].keys())],
     "/mod holds no modality"),
]


def first_row(f, name):
    values = f[f"obsmap/{name}"][()]
    return int(values[values > 0][0])


def measured(f, name):
    """The global cells the modality measured, ascending."""
    return [int(c) for c in np.flatnonzero(f[f"obsmap/{name}"][()] > 0)]


def first_cell(f, name):
    return measured(f, name)[0]


def put_obsmap(f, name, cell, value):
    values = f[f"obsmap/{name}"][()]
    values[cell] = value
    f[f"obsmap/{name}"][...] = values


def retype_obsmap(f, name, dtype, first):
    values = f[f"obsmap/{name}"][()].astype(dtype)
    if first is not None:
        values[first_cell(f, name)] = first
    attrs = dict(f[f"obsmap/{name}"].attrs)
    del f[f"obsmap/{name}"]
    f[f"obsmap/{name}"] = values
    f[f"obsmap/{name}"].attrs.update(attrs)


def resize_obsmap(f, name, by):
    values = f[f"obsmap/{name}"][()]
    attrs = dict(f[f"obsmap/{name}"].attrs)
    del f[f"obsmap/{name}"]
    f[f"obsmap/{name}"] = values[:len(values) + by]
    f[f"obsmap/{name}"].attrs.update(attrs)


def check_refusals(work, base):
    import shutil
    for what, damage, reason in REFUSALS:
        path = os.path.join(work, "refused.h5mu")
        shutil.copyfile(base, path)
        with h5py.File(path, "r+") as f:
            damage(f)
        done = subprocess.run([BINARY, "inspect", path], capture_output=True, text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        check(f"refused, {what}: exit 2, one line saying why",
              done.returncode == 2 and len(lines) == 1 and reason in lines[0],
              f"exit {done.returncode}: {done.stderr.strip()[:400]}")


def sources(work):
    """(Reading or None, label, why it is not here)."""
    out = []
    manifest = make_mudata_sources.generate(os.path.join(work, "sources"))
    for name, entry in manifest["files"].items():
        problems = make_mudata_sources.check_file(entry["path"], entry["cells_of_none"],
                                                  entry.get("encoding_version", make_mudata_sources.MUDATA_VERSION))
        check(f"{name}.h5mu: written as make_mudata_sources.py says (read back: layout, obsmap invariants)",
              not problems, "\n".join(problems))
        out.append((entry["path"], name))
    return out


def main():
    work = tempfile.mkdtemp(prefix="zm-mudata-", dir=PARENT)
    listed = []
    try:
        listed = sources(work)
    except Exception:  # noqa: BLE001
        check("make_mudata_sources.py writes the sources", False, traceback.format_exc(limit=6))
    readings = []
    for path, name in listed:
        try:
            readings.append(Reading(path, name, "celltype", "X_umap", ["NK", "Mono/DC"]))
        except Exception:  # noqa: BLE001
            check(f"{name}: read independently", False, traceback.format_exc(limit=6))
    # The committed fixture (model-mutations' fuzzed base), as it is in the clone.
    committed = os.path.join(os.environ.get("ZM_SOURCE_ROOT", "."), "fixtures", "sources", "mudata",
                             "two-modalities.h5mu")
    try:
        readings.append(Reading(committed, "fixtures/two-modalities", "celltype", "X_umap", ["NK", "T"]))
    except Exception:  # noqa: BLE001
        check("fixtures/sources/mudata/two-modalities.h5mu: read independently", False,
              traceback.format_exc(limit=6))
    if os.path.exists(SHARED_H5MU):
        try:
            shared = Reading(SHARED_H5MU, "modern-citeseq-800", "wnn_cluster", "X_wnn_umap", None)
            categories = [str(c) for c in shared.glob["obs"]["wnn_cluster"].cat.categories]
            shared.where_values = categories[:2]
            check_reading_against_expect(shared)
            readings.append(shared)
        except Exception:  # noqa: BLE001
            check("modern-citeseq-800.h5mu: read independently", False, traceback.format_exc(limit=6))
    else:
        check(f"modern-citeseq-800.h5mu # SKIP {SHARED_H5MU} is not here (../shared/data is not beside this clone)",
              True)
    committed_ok = os.path.exists(committed)
    if committed_ok:
        try:
            check_refusals(work, committed)
        except Exception:  # noqa: BLE001
            check("refusals: every damaged file was made and opened", False, traceback.format_exc(limit=6))
    for src in readings:
        try:
            check_source(work, src)
        except Exception:  # noqa: BLE001
            check(f"{src.label}: every check ran to its end", False, traceback.format_exc(limit=6))
    return report()


if __name__ == "__main__":
    sys.exit(main())
