#!/usr/bin/python3
"""Shared by the integration tests: the views to check for a source, the
reference AnnData each must equal, and a comparison that says where two
objects differ.

A view's reference is what anndata reads from the source, subset to the
view's cells in its order (anndata.read_h5ad(SOURCE)[order]); order comes
from `zarrmount select` (and B0 from `zarrmount inspect --json`). loom and 10x
sources are read as docs/sources.md presents them.

Where anndata is not installed (Debian 13 packages none), the sources are read
with h5py and the views with zarr-python, by readers.py under anndata 0.8's
rules; own=True asks for those readers where anndata is installed too.
"""
import json
import math
import os
import subprocess
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp

warnings.simplefilter("ignore")
import h5py  # noqa: E402

import sys as _sys
_sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "source"))
import h5zstd  # noqa: E402  (zstd-filtered fixtures: Debian has no zstd HDF5 plugin)
import readers  # noqa: E402

h5zstd.register()

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")


def run_json(args, stdin=None):
    done = subprocess.run([BINARY, *args], input=stdin, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"zarrmount {' '.join(args)}: {done.stdout}{done.stderr}")
    return json.loads(done.stdout)


def order_of(method, n, seed=0, k=None, block_size=None):
    if method == "file":
        return np.arange(n)
    request = {"method": "blocks" if method == "blocks" else "uniform", "n": n, "seed": seed,
               "k": n if k is None else k}
    if method == "blocks":
        request["blockSize"] = block_size
    if n == 0:
        return np.arange(0)
    return np.array(run_json(["select"], json.dumps(request))["order"], dtype=np.int64)


def sources():
    """Every source the integration tests read: the fixtures (fixtures/shared
    among them) and the rest of ../shared/data where it is here
    (ZM_ONLY=substring keeps the ones whose path has it)."""
    import glob
    root = os.environ.get("ZM_SOURCE_ROOT", ".")
    files = []
    for pattern in ("fixtures/sources/h5ad/*.h5ad", "fixtures/sources/filters/*.h5ad",
                    "fixtures/sources/layouts/*.h5ad", "fixtures/sources/legacy/*.h5ad",
                    "fixtures/sources/10x/*.h5", "fixtures/sources/loom/*.loom"):
        files += sorted(glob.glob(os.path.join(root, pattern)))
    # The copies of ../shared/data's files (fixtures/shared/README.md), then its
    # other files where it is beside the clone (shared_rest says which).
    copies = os.path.join(root, "fixtures", "shared")
    for pattern in ("h5ad/*.h5ad", "10x/*.h5", "loom/*.loom", "synthetic/*.h5ad", "synthetic/*.h5"):
        files += sorted(glob.glob(os.path.join(copies, pattern)))
    files += shared_rest()[0]
    only = os.environ.get("ZM_ONLY")
    return [f for f in files if not only or only in f]


def shared_rest():
    """The files of ../shared/data the integration tests read that are not
    copied to fixtures/shared, and why there are none if there are none."""
    import glob
    root = os.environ.get("ZM_SOURCE_ROOT", ".")
    shared = os.environ.get("ZM_SHARED_DATA", "../shared/data")
    copies = os.path.join(root, "fixtures", "shared")
    if not os.path.isdir(shared):
        return [], f"{shared} is not here (../shared/data is not beside this clone)"
    rest = []
    for pattern in ("h5ad/*.h5ad", "10x/*.h5", "loom/*.loom", "synthetic/*.h5ad", "synthetic/*.h5"):
        rest += [f for f in sorted(glob.glob(os.path.join(shared, pattern)))
                 if not os.path.exists(os.path.join(copies, os.path.relpath(f, shared)))]
    return rest, None if rest else "every one is in fixtures/shared, read there"


def display_name(path):
    root = os.environ.get("ZM_SOURCE_ROOT", ".")
    shared = os.environ.get("ZM_SHARED_DATA", "../shared/data")
    return os.path.relpath(path, root if path.startswith(root) else shared)


# The references here read a 10x file as scanpy's read_10x_h5 does, one AnnData (a v2 file's
# first genome): its mounts and exports here take -o layout=anndata. Its MuData layout (a
# modality a feature type or genome) is test_mudata.py's.
def layout_options(path):
    """The mount options (-o) a source is read with here."""
    return ["layout=anndata"] if path.endswith(".h5") else []


def layout_args(path):
    """The same for `zarrmount export` and `inspect`."""
    return ["--layout", "anndata"] if path.endswith(".h5") else []


def views_for(path):
    """(view path, method, seed, k, B) to check for a source."""
    info = run_json(["inspect", path, "--json"] + layout_args(path))
    n, b0 = info["nObs"], info["defaultBlockSize"]["blockSize"]
    views = [("file", "file", 0, n, None), ("full", "uniform", 0, n, None)]
    if n >= 1:
        views.append(("uniform/seed0/k=1", "uniform", 0, 1, None))
    if n >= 2:
        views.append((f"uniform/seed4294967295/k={n - 1}", "uniform", 4294967295, n - 1, None))
        views.append((f"uniform/seed7/k={max(1, n // 3)}", "uniform", 7, max(1, n // 3), None))
        views.append((f"blocks/seed0/k={max(1, n // 2)}", "blocks", 0, max(1, n // 2), b0))
        views.append((f"blocks/B=3/seed5/k={max(1, n // 4)}", "blocks", 5, max(1, n // 4), 3))
    return info, views


# ---- references ------------------------------------------------------------------------

def _strings(ds):
    values = ds[()]
    return np.array([v.decode() if isinstance(v, bytes) else str(v) for v in np.ravel(values)], dtype=object)


def read_10x(path, own=False):
    with h5py.File(path, "r") as f:
        group = "matrix" if "matrix" in f else sorted(k for k in f if isinstance(f[k], h5py.Group) and "genes" in f[k])[0]
        g = f[group]
        n_features, n_cells = (int(x) for x in g["shape"][()])
        X = sp.csr_matrix((g["data"][()], g["indices"][()], g["indptr"][()]), shape=(n_cells, n_features))
        obs = pd.DataFrame(index=pd.Index(_strings(g["barcodes"])))
        if group == "matrix":
            feats = g["features"]
            var = pd.DataFrame(index=pd.Index(_strings(feats["name"])))
            var["gene_ids"] = _strings(feats["id"])
            if "feature_type" in feats:
                var["feature_types"] = _strings(feats["feature_type"])
            if "genome" in feats:
                var["genome"] = _strings(feats["genome"])
            for key in sorted(feats):
                if key in ("id", "name", "feature_type", "genome", "_all_tag_keys"):
                    continue
                ds = feats[key]
                if isinstance(ds, h5py.Dataset) and ds.ndim == 1 and ds.shape[0] == n_features:
                    var[key] = _strings(ds) if ds.dtype.kind in "SOU" else ds[()]
            for key in sorted(g):
                if key in ("barcodes", "data", "indices", "indptr", "shape"):
                    continue
                ds = g[key]
                if isinstance(ds, h5py.Dataset) and ds.ndim == 1 and ds.shape[0] == n_cells:
                    obs[key] = _strings(ds) if ds.dtype.kind in "SOU" else ds[()]
        else:
            var = pd.DataFrame(index=pd.Index(_strings(g["gene_names"])))
            var["gene_ids"] = _strings(g["genes"])
    return readers.make(X=X, obs=obs, var=var, dtype=X.dtype, own=own)


def _loom_attrs(group, n, index_key):
    import html
    frame, mapping, index = {}, {}, None
    for key in sorted(group):
        ds = group[key]
        if not isinstance(ds, h5py.Dataset):
            continue
        values = ds[()]
        if values.dtype.kind in "SOU":
            flat = [html.unescape(v.decode() if isinstance(v, bytes) else str(v)) for v in np.ravel(values)]
            values = np.array(flat, dtype=object).reshape(values.shape)
        if key == index_key and values.ndim == 1 and index is None:
            index = values
        elif values.ndim == 2 and values.shape[1] > 1:
            mapping[key] = values
        else:
            frame[key] = values.reshape(n)
    if index is None:
        index = np.array([str(i) for i in range(n)], dtype=object)
    return pd.DataFrame(frame, index=pd.Index(index)), mapping


def _loom_graph(group, n):
    a, b, w = group["a"][()].astype(np.int64), group["b"][()].astype(np.int64), group["w"][()]
    m = sp.coo_matrix((w, (a, b)), shape=(n, n)).tocsr()
    m.sum_duplicates()
    m.sort_indices()
    if n < 2**31 and m.nnz < 2**31:
        m.indices = m.indices.astype(np.int32)
        m.indptr = m.indptr.astype(np.int32)
    return m


def read_loom(path, own=False):
    """As docs/sources.md says zarrmount presents a loom file."""
    with h5py.File(path, "r") as f:
        X = f["matrix"][()].T
        n_obs, n_vars = X.shape
        obs, obsm = _loom_attrs(f["col_attrs"], n_obs, "CellID")
        var, varm = _loom_attrs(f["row_attrs"], n_vars, "Gene")
        layers = {k: f["layers"][k][()].T for k in (f["layers"] if "layers" in f else [])}
        obsp = {k: _loom_graph(f["col_graphs"][k], n_obs) for k in (f["col_graphs"] if "col_graphs" in f else [])}
        varp = {k: _loom_graph(f["row_graphs"][k], n_vars) for k in (f["row_graphs"] if "row_graphs" in f else [])}
    return readers.make(X=X, obs=obs, var=var, obsm=obsm, varm=varm, layers=layers, obsp=obsp,
                        varp=varp, dtype=X.dtype, own=own)


def reference(path, own=False):
    """The source as anndata reads it (own, or no anndata: as readers.py does)."""
    if path.endswith(".h5ad"):
        return readers.read_h5ad(path) if own or not readers.have_anndata() else readers.anndata.read_h5ad(path)
    if path.endswith(".h5"):
        return read_10x(path, own)
    if path.endswith(".loom"):
        return read_loom(path, own)
    raise NotImplementedError(path)


def read_view(store, own=False):
    """A view (or any AnnData Zarr store) as anndata.read_zarr reads it (own,
    or no anndata: as readers.py does with zarr-python)."""
    if own or not readers.have_anndata():
        return readers.read_zarr(store)
    return readers.anndata.read_zarr(store)


# ---- comparison ------------------------------------------------------------------------

class Differ(Exception):
    pass


def _arrays(a, b, where):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise Differ(f"{where}: shape {a.shape} vs {b.shape}")
    if a.dtype.names or b.dtype.names:
        # Rec-arrays: the same fields and values; a string field may be
        # fixed- or variable-length depending on how it was stored.
        if a.dtype.names != b.dtype.names:
            raise Differ(f"{where}: fields {a.dtype.names} vs {b.dtype.names}")
        for name in a.dtype.names:
            _arrays(a[name], b[name], f"{where}.{name}")
        return
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        if [str(x) for x in a.ravel()] != [str(x) for x in b.ravel()]:
            raise Differ(f"{where}: strings differ")
        return
    # Byte order is storage: a big-endian source is served little-endian.
    if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
        raise Differ(f"{where}: dtype {a.dtype} vs {b.dtype}")
    if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
        raise Differ(f"{where}: values differ")


def _sparse(a, b, where):
    if a.format != b.format:
        raise Differ(f"{where}: {a.format} vs {b.format}")
    if a.shape != b.shape or a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
        raise Differ(f"{where}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}")
    a, b = a.copy(), b.copy()
    a.sort_indices()
    b.sort_indices()
    _arrays(a.indptr.astype(np.int64), b.indptr.astype(np.int64), f"{where}.indptr")
    _arrays(a.indices.astype(np.int64), b.indices.astype(np.int64), f"{where}.indices")
    _arrays(a.data, b.data, f"{where}.data")


def _frames(a, b, where):
    if list(a.columns) != list(b.columns):
        raise Differ(f"{where}: columns {list(a.columns)} vs {list(b.columns)}")
    _arrays(np.asarray(a.index, dtype=object), np.asarray(b.index, dtype=object), f"{where}.index")
    for c in a.columns:
        x, y = a[c], b[c]
        if isinstance(x.dtype, pd.CategoricalDtype) or isinstance(y.dtype, pd.CategoricalDtype):
            if not (isinstance(x.dtype, pd.CategoricalDtype) and isinstance(y.dtype, pd.CategoricalDtype)):
                raise Differ(f"{where}/{c}: {x.dtype} vs {y.dtype}")
            _arrays(np.asarray(x.cat.categories), np.asarray(y.cat.categories), f"{where}/{c}.categories")
            _arrays(x.cat.codes.to_numpy(), y.cat.codes.to_numpy(), f"{where}/{c}.codes")
            if x.cat.ordered != y.cat.ordered:
                raise Differ(f"{where}/{c}: ordered {x.cat.ordered} vs {y.cat.ordered}")
        elif (x.dtype.newbyteorder("=") if isinstance(x.dtype, np.dtype) else str(x.dtype)) != \
                (y.dtype.newbyteorder("=") if isinstance(y.dtype, np.dtype) else str(y.dtype)):
            raise Differ(f"{where}/{c}: dtype {x.dtype} vs {y.dtype}")
        elif hasattr(x, "array") and isinstance(x.array, pd.arrays.BaseMaskedArray if hasattr(pd.arrays, "BaseMaskedArray") else ()):
            if not x.equals(y):
                raise Differ(f"{where}/{c}: values differ")
        else:
            try:
                _arrays(x.to_numpy(), y.to_numpy(), f"{where}/{c}")
            except TypeError:
                if not x.equals(y):
                    raise Differ(f"{where}/{c}: values differ")


def same(a, b, where="/"):
    if isinstance(a, pd.api.extensions.ExtensionArray) or isinstance(b, pd.api.extensions.ExtensionArray):
        # Nullable arrays: equal values and the same missing ones.
        if str(getattr(a, "dtype", "")) != str(getattr(b, "dtype", "")) or \
                not pd.Series(a).equals(pd.Series(b)):
            raise Differ(f"{where}: {a!r} vs {b!r}")
        return
    if sp.issparse(a) or sp.issparse(b):
        if not (sp.issparse(a) and sp.issparse(b)):
            raise Differ(f"{where}: sparse vs dense")
        return _sparse(a, b, where)
    if isinstance(a, pd.DataFrame) or isinstance(b, pd.DataFrame):
        if not (isinstance(a, pd.DataFrame) and isinstance(b, pd.DataFrame)):
            raise Differ(f"{where}: dataframe vs {type(b).__name__}")
        return _frames(a, b, where)
    if isinstance(a, dict) or hasattr(a, "keys") and not isinstance(a, np.ndarray):
        ka, kb = sorted(a.keys()), sorted(b.keys())
        if ka != kb:
            raise Differ(f"{where}: keys {ka} vs {kb}")
        for k in ka:
            same(a[k], b[k], f"{where}/{k}")
        return
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return _arrays(a, b, where)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return
    if a != b and not (np.ndim(a) == 0 and np.ndim(b) == 0 and np.asarray(a) == np.asarray(b)):
        raise Differ(f"{where}: {a!r} vs {b!r}")


def check_view(store, ref, order, method, nobs):
    """Raises Differ if the store (an AnnData read from it) is not ref[order]."""
    got = store
    positions = got.obs.get("cellucid_original_position")
    if positions is None:
        raise Differ("/obs: no cellucid_original_position column")
    _arrays(positions.to_numpy().astype(np.int64), np.asarray(order, dtype=np.int64), "/obs/cellucid_original_position")
    if positions.dtype != np.uint32:
        raise Differ(f"/obs/cellucid_original_position: dtype {positions.dtype}")
    got.obs = got.obs.drop(columns=["cellucid_original_position"])
    if method == "full":
        priority = got.uns.get("cellucid", {}).get("priority")
        if priority is None or {k: int(v) for k, v in priority.items()} != {"seed": 0, "specVersion": 1, "nObs": nobs}:
            raise Differ(f"/uns/cellucid/priority: {priority!r}")
        del got.uns["cellucid"]["priority"]
        if not got.uns["cellucid"]:
            del got.uns["cellucid"]
    # Views keep every category of a categorical (codes stay the source's,
    # the same in every view); anndata's subsetting drops the categories no
    # kept cell uses (and their colors in uns). Compare as anndata would
    # present both: subset each, which prunes both the same way.
    want = readers.subset(ref, order)
    got = readers.subset(got, np.arange(got.n_obs))
    compare(got, want)


def compare(got, want):
    """Raises Differ where two AnnData (or readers.Data) objects differ."""
    same(got.X, want.X, "/X")
    for part in ("obs", "var"):
        same(getattr(got, part), getattr(want, part), f"/{part}")
    for part in ("obsm", "varm", "obsp", "varp", "layers"):
        same(dict(getattr(got, part)), dict(getattr(want, part)), f"/{part}")
    same(dict(got.uns), dict(want.uns), "/uns")
    if (got.raw is None) != (want.raw is None):
        raise Differ("/raw: present in one only")
    if got.raw is not None:
        same(got.raw.X, want.raw.X, "/raw/X")
        same(got.raw.var, want.raw.var, "/raw/var")
        same(dict(got.raw.varm), dict(want.raw.varm), "/raw/varm")


def attempt(name, call):
    """Runs call() as one check of live_mount's TAP: a Differ or any error is that check's
    failure, with its reason; returns what call returned, or None."""
    import traceback
    from live_mount import check
    try:
        result = call()
        check(name, True)
        return result
    except Differ as e:
        check(name, False, str(e))
    except Exception as e:  # noqa: BLE001  (a failing read is the check's failure, said)
        check(name, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}")
    return None


def first_difference(got, want):
    """Where two lists of rows (cells) first differ, in words; "" when they are equal."""
    got, want = np.asarray(got, dtype=np.int64), np.asarray(want, dtype=np.int64)
    if got.shape != want.shape:
        return f"{len(got)} rows, {len(want)} expected (first {got[:8].tolist()} vs {want[:8].tolist()})"
    where = np.flatnonzero(got != want)
    return (f"{len(where)} of {len(want)} differ, first at row {where[0]}: {got[where[0]]} instead of "
            f"{want[where[0]]} (got {got[:8].tolist()}..., want {want[:8].tolist()}...)" if len(where) else "")


def check_positions(obs, want, where):
    """A store's obs (a DataFrame) has cellucid_original_position, uint32, equal to want (the
    rows or positions expected, in order): else a Differ saying where and how."""
    column = "cellucid_original_position"
    if column not in obs.columns:
        raise Differ(f"{where}: no {column} column")
    if obs[column].dtype != np.uint32:
        raise Differ(f"{where}/{column}: dtype {obs[column].dtype}, not uint32")
    why = first_difference(obs[column].to_numpy(), want)
    if why:
        raise Differ(f"{where}/{column}: {why}")
