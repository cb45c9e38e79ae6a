#!/usr/bin/python3
"""What the tests read with, on every Python stack they run on: Debian 12
(zarr-python 2.13, anndata 0.8) and Debian 13 (zarr-python 3.0, no anndata
package at all).

Two things live here, so that no test re-implements them:

- Zarr-python 2 and 3 behind one set of calls: open_group, open_array,
  members, attrs, read (an array's values, a 0-d array as a numpy scalar as
  zarr 2 gives it) and is_array. zarr 3 has no Group.items, returns 0-d
  arrays where zarr 2 returns scalars and keeps .attrs in its own class.

- An AnnData reader that needs no anndata: read_h5ad (h5py) and read_zarr
  (zarr-python) build a Data object, and Data.subset(rows) is what
  `adata[rows].copy()` makes. Both follow anndata 0.8's reading rules (its
  _io/specs/methods.py, _io/h5ad.py and compat/ helpers) element by element,
  with the element reading of anndata_elements.py (which
  tests/source/dump_reference.py reads h5ad files with too):
  the same encodings (dataframe 0.1.0 and 0.2.0, categorical, csr/csc,
  nullable-integer/boolean, string, numeric-scalar, rec-array, dict), the same
  pre-0.7 fallbacks (compound obs/var/obsm datasets, uns/<col>_categories,
  raw.X / raw.var / raw.varm, h5sparse groups, one-element string arrays as
  str) and the same AnnData-constructor steps (a str index, obsm recarrays
  split, uns['neighbors'] matrices moved to obsp, multicolumn keys). Where
  anndata is installed, tests read with anndata as they always did, and
  test_export.py checks that these readers give what anndata gives, source by
  source and view by view; where it is not, the tests read with these, and a
  check that only anndata itself can make is counted as skipped with
  ANNDATA_MISSING as its reason.

make() builds the reference object a test computes by hand (10x, loom): an
AnnData where anndata exists, a Data otherwise, with the same normalisation.
"""
import collections.abc
import copy
import warnings

import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

warnings.simplefilter("ignore")
import zarr  # noqa: E402

from anndata_elements import (  # noqa: E402,F401  (attrs and read are the zarr 2/3 calls below too)
    attrs, clean_uns, read, read_df, read_elem, read_h5ad_elements, read_legacy_raw, register)

try:
    import anndata  # noqa: E402
except ImportError:
    anndata = None

ANNDATA_MISSING = "anndata is not packaged in this release"
ZARR_VERSION = tuple(int(p) for p in zarr.__version__.split("+")[0].split(".")[:2])


def have_anndata():
    return anndata is not None


# ---- zarr-python 2 and 3 ------------------------------------------------------------------

def open_group(path):
    return zarr.open_group(str(path), mode="r")


def open_array(path):
    return zarr.open_array(str(path), mode="r")


def is_array(node):
    return isinstance(node, zarr.Array)


def is_group(node):
    return isinstance(node, zarr.Group)


def members(group):
    """[(name, node)] of a group's children in name order (zarr 2's
    Group.items(); zarr 3 has Group.members() instead)."""
    return [(name, group[name]) for name in sorted(group.keys())]


def walk_arrays(group, prefix=""):
    """(path, array) of every array under group, depth first in name order."""
    for name, node in members(group):
        if is_array(node):
            yield prefix + name, node
        else:
            yield from walk_arrays(node, prefix + name + "/")


# ---- An AnnData without anndata -----------------------------------------------------------

class Raw:
    """adata.raw: X, var and varm (anndata.Raw)."""

    def __init__(self, X, var, varm):
        self.X = X
        self.var = var
        self.varm = varm

    @property
    def n_vars(self):
        return self.X.shape[1]


class Data:
    """What anndata.AnnData holds once read into memory, made by make(),
    read_h5ad() or read_zarr(); the attributes the tests use have anndata's
    names and types (pandas frames, dicts of numpy / scipy / pandas values)."""

    def __init__(self, X, obs, var, obsm, varm, obsp, varp, layers, uns, raw, n_obs, n_vars):
        self.X, self.obs, self.var = X, obs, var
        self.obsm, self.varm, self.obsp, self.varp, self.layers = obsm, varm, obsp, varp, layers
        self.uns, self.raw = uns, raw
        self.n_obs, self.n_vars = n_obs, n_vars

    @property
    def obs_names(self):
        return self.obs.index

    @property
    def var_names(self):
        return self.var.index

    def subset(self, rows):
        """adata[rows].copy() for an integer array of rows (anndata 0.8's
        AnnData._init_as_view, then copy): every per-cell element cut to
        rows in that order, obsp both ways, sparse n_obs x n_obs matrices in
        uns both ways, raw's rows; then every categorical of obs and var
        loses the categories no kept row uses, and uns['<col>_colors'] with
        them."""
        rows = np.asarray(rows, dtype=np.int64)
        uns = _slice_uns_sparse(copy.deepcopy(self.uns), rows, self.n_obs)
        obs = self.obs.iloc[rows].copy()
        var = self.var.copy()
        _remove_unused_categories(self.obs, obs, uns)
        _remove_unused_categories(self.var, var, uns)
        X = None if self.X is None else _subset_rows(self.X, rows)
        raw = None
        if self.raw is not None:
            raw = Raw(_subset_rows(self.raw.X, rows), self.raw.var.copy(), _copied(self.raw.varm))
        return Data(X, obs, var,
                    {k: _subset_rows(v, rows) for k, v in self.obsm.items()}, _copied(self.varm),
                    {k: _subset_pair(v, rows) for k, v in self.obsp.items()}, _copied(self.varp),
                    {k: _subset_rows(v, rows) for k, v in self.layers.items()}, uns, raw,
                    len(rows), self.n_vars)


def _copied(mapping):
    return {k: v.copy() if hasattr(v, "copy") else v for k, v in mapping.items()}


def _subset_rows(value, rows):
    if isinstance(value, pd.DataFrame):
        return value.iloc[rows].copy()
    if sp.issparse(value):
        return value[rows].copy()
    return np.asarray(value)[rows].copy()


def _subset_pair(value, rows):
    """An obsp matrix cut to rows both ways (anndata's _subset with two index
    arrays: a[rows[:, None], rows] for sparse, np.ix_ for dense)."""
    if sp.issparse(value):
        return value[rows.reshape(-1, 1), rows].copy()
    return np.asarray(value)[np.ix_(rows, rows)].copy()


def _find_sparse(d, n, keys, paths):
    for k, v in d.items():
        if isinstance(v, collections.abc.Mapping):
            _find_sparse(v, n, (*keys, k), paths)
        elif sp.issparse(v) and v.shape == (n, n):
            paths.append((*keys, k))
    return paths


def _slice_uns_sparse(uns, rows, n_obs):
    """anndata 0.8's _slice_uns_sparse_matrices: uns matrices of n_obs x
    n_obs (old neighbors graphs) are cut with the cells."""
    for path in _find_sparse(uns, n_obs, (), []):
        d = uns
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = _subset_pair(d[path[-1]], rows)
    return uns


def _remove_unused_categories(full, sub, uns):
    """anndata 0.8's AnnData._remove_unused_categories."""
    for k in full:
        if not isinstance(full[k].dtype, pd.CategoricalDtype):
            continue
        all_categories = full[k].cat.categories
        sub[k] = sub[k].cat.remove_unused_categories()
        color_key = f"{k}_colors"
        if color_key not in uns:
            continue
        colors = uns[color_key]
        if np.array(colors).ndim == 0:
            uns[color_key] = np.array(colors)[(None,)]
        elif len(colors) != len(all_categories):
            del uns[color_key]
        else:
            keep = np.where(np.isin(all_categories, sub[k].cat.categories))[0]
            uns[color_key] = np.array(colors)[(keep,)]


def subset(adata, rows):
    """adata[rows].copy() for an AnnData or a Data."""
    rows = np.asarray(rows, dtype=np.int64)
    if isinstance(adata, Data):
        return adata.subset(rows)
    return adata[rows].copy()


def _frame(anno, length):
    """anndata 0.8's _gen_dataframe: no frame is an empty one indexed
    "0".."n-1"; a frame whose index is not strings gets a str index."""
    if anno is None:
        return pd.DataFrame(index=pd.RangeIndex(0, length).astype(str))
    anno = anno.copy(deep=False)
    if not pd.api.types.is_string_dtype(anno.index):
        anno.index = anno.index.astype(str)
    return anno


def _to_dict(value):
    """anndata's convert_to_dict: a record array becomes a dict of its fields."""
    if value is None:
        return {}
    if isinstance(value, np.ndarray):
        if value.dtype.fields is None:
            raise TypeError(f"an array of {value.dtype} where a mapping belongs")
        return {k: value[k] for k in value.dtype.fields}
    return dict(value)


def _move_adjacency(uns, obsp):
    """anndata's _move_adj_mtx: uns['neighbors'] distances/connectivities go to obsp."""
    neighbors = uns.get("neighbors", {})
    for k in ("distances", "connectivities"):
        if k in neighbors and (sp.issparse(neighbors[k]) or isinstance(neighbors[k], np.ndarray)) \
                and len(neighbors[k].shape) == 2:
            obsp[k] = neighbors.pop(k)


def _split_multicolumns(uns, frames, maps):
    """AnnData._clean_up_old_format: uns['obs_keys_multicol'] (and the other
    old spellings) name obs columns to gather into one obsm array."""
    for bases, axis in ((["obs", "smp"], "obs"), (["var"], "var")):
        keys = []
        for k in [f"{p}{base}_keys_multicol" for p in ["", "_"] for base in bases]:
            if uns and k in uns:
                keys = list(uns[k])
                del uns[k]
                break
        for key in keys:
            frame = frames[axis]
            columns = [c for c in frame.columns if c.startswith(key)]
            maps[axis][key] = frame[columns].values
            frame.drop(columns, axis=1, inplace=True)


def make(X=None, obs=None, var=None, obsm=None, varm=None, obsp=None, varp=None, layers=None, uns=None,
         raw=None, dtype=None, own=False):
    """anndata.AnnData(...) where anndata exists (and own is false), else a
    Data built the same way (the constructor's normalisation). raw is a dict
    with X, var and varm."""
    if anndata is not None and not own:
        return anndata.AnnData(X=X, obs=obs, var=var, obsm=obsm, varm=varm, obsp=obsp, varp=varp,
                               layers=layers, uns=uns, raw=raw, dtype=dtype)
    if X is not None:
        dtype = np.dtype(np.float32 if dtype is None else dtype)
        X = X.astype(dtype) if sp.issparse(X) and X.dtype != dtype else \
            X if sp.issparse(X) else np.asarray(X, dtype=dtype)
        n_obs, n_vars = X.shape
    else:
        n_obs = 0 if obs is None else len(obs)
        n_vars = 0 if var is None else len(var)
    obs, var = _frame(obs, n_obs), _frame(var, n_vars)
    uns = dict(uns or {})
    maps = {"obs": _to_dict(obsm), "var": _to_dict(varm)}
    obsp = _to_dict(obsp)
    _move_adjacency(uns, obsp)
    raw_object = None
    if raw:
        raw_X = raw.get("X")
        raw_object = Raw(raw_X, _frame(raw.get("var"), raw_X.shape[1]), _to_dict(raw.get("varm")))
    _split_multicolumns(uns, {"obs": obs, "var": var}, maps)
    return Data(X, obs, var, maps["obs"], maps["var"], obsp, _to_dict(varp), _to_dict(layers), uns,
                raw_object, n_obs, n_vars)


# ---- Reading an element (anndata 0.8's read_elem): anndata_elements.py ---------------------


def _read_anndata_group(node):
    """read_anndata: an anndata or raw group read whole (raw/ of a Zarr store
    too: anndata 0.8 reads it as an AnnData and keeps its X, var and varm)."""
    d = {k: read_elem(node[k]) for k in ("X", "obs", "var", "obsm", "varm", "obsp", "varp", "layers", "uns",
                                         "raw") if k in node}
    raw = d.pop("raw", None)
    if isinstance(raw, Data):
        raw = {"X": raw.X, "var": raw.var, "varm": raw.varm}
    return make(**d, raw=raw, dtype=d["X"].dtype if "X" in d else None, own=True)


for _kind in ("anndata", "raw"):
    register(True, _kind, "0.1.0", _read_anndata_group)


def read_h5ad(path):
    """anndata.read_h5ad(path) without anndata: a Data."""
    with h5py.File(path, "r") as f:
        d, raw = read_h5ad_elements(f)
        X = f.get("X")
        if X is not None:
            d["dtype"] = X["data"].dtype if isinstance(X, h5py.Group) else X.dtype
    # An unknown top-level key fails here as it fails anndata (an unexpected keyword).
    return make(**d, raw=raw or None, own=True)


def read_zarr(path):
    """anndata.read_zarr(path) without anndata: a Data."""
    root = open_group(path)
    if "encoding-type" in attrs(root):
        return _read_anndata_group(root)
    d = {}
    for k in root.keys():
        if k.startswith("raw."):
            continue
        d[k] = read_df(root[k]) if k in ("obs", "var") else read_elem(root[k])
    raw = read_legacy_raw(root, d.pop("raw", None))
    if isinstance(raw, Data):
        raw = {"X": raw.X, "var": raw.var, "varm": raw.varm}
    if "X" in d:
        d["dtype"] = d["X"].dtype
    clean_uns(d)
    return make(**d, raw=raw or None, own=True)


def reader_of_h5ad():
    """(name, read) for .h5ad sources: anndata's where installed, ours otherwise."""
    if anndata is not None:
        return f"anndata {anndata.__version__}", anndata.read_h5ad
    return f"h5py {h5py.__version__} (anndata 0.8's rules)", read_h5ad


def reader_of_zarr():
    """(name, read) for Zarr stores: anndata's where installed, ours otherwise."""
    if anndata is not None:
        return f"anndata {anndata.__version__}", anndata.read_zarr
    return f"zarr-python {zarr.__version__} (anndata 0.8's rules)", read_zarr
