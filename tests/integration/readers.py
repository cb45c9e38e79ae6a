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
  _io/specs/methods.py, _io/h5ad.py and compat/ helpers) element by element:
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


def attrs(node):
    """A node's attributes as a plain dict."""
    return dict(node.attrs.asdict()) if hasattr(node.attrs, "asdict") else dict(node.attrs)


def read(array):
    """Every value of a zarr array; a 0-d array's value as a numpy scalar
    (zarr 2's array[()]; zarr 3 returns a 0-d array there)."""
    value = array[...]
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


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


# ---- Reading an element (anndata 0.8's read_elem) -----------------------------------------

class UnknownEncoding(ValueError):
    pass


def _is_h5(node):
    return isinstance(node, (h5py.Group, h5py.Dataset))


def _group_like(node):
    return isinstance(node, h5py.Group) or is_group(node)


def _attr(node, name, default=KeyError):
    """anndata's _read_attr: HDF5 fixed-length string attributes come as
    bytes from h5py and are decoded; zarr attributes are JSON already."""
    if not _is_h5(node):
        values = attrs(node)
        if name not in values:
            if default is KeyError:
                raise KeyError(name)
            return default
        return values[name]
    if name not in node.attrs:
        if default is KeyError:
            raise KeyError(name)
        return default
    value = node.attrs[name]
    identity = node.attrs.get_id(name)
    string = h5py.check_string_dtype(identity.dtype)
    if string is None or string.length is None:
        return value
    if len(identity.shape) == 0:
        return value.decode("utf-8")
    return [s.decode("utf-8") if isinstance(s, bytes) else s for s in value]


def _as_str(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _values(node):
    """node[()] as anndata reads it: h5py's or zarr's values (a 0-d array as a scalar)."""
    if _is_h5(node):
        return node[()]
    return read(node)


def _strings(node):
    """A string array's values as str objects (h5py's asstr; zarr's are str already)."""
    if _is_h5(node):
        return node.asstr()[()]
    return read(node)


def _from_fixed_length_strings(value):
    """anndata.compat._from_fixed_length_strings."""
    new = []
    for dt in value.dtype.descr:
        item = list(dt)
        kind = dt[1]
        annotated = isinstance(kind, tuple)
        if annotated:
            kind = kind[0]
        if issubclass(np.dtype(kind).type, np.bytes_):
            item[1] = f"U{int(kind[2:])}"
        elif annotated or np.issubdtype(np.dtype(kind), np.str_):
            item[1] = "O"
        new.append(tuple(item))
    return value.astype(new)


def _decode_structured(value, dtype):
    """anndata.compat._decode_structured_array: h5py 3 reads vlen UTF-8
    fields of a compound as bytes."""
    decode = np.frompyfunc(lambda x: x.decode("utf-8"), 1, 1)
    for k, (field, _) in dtype.fields.items():
        check = h5py.check_string_dtype(field)
        if check is not None and check.encoding == "utf-8":
            decode(value[k], out=value[k])
    return value


def _read_dataset_legacy(node):
    """A dataset without encoding attributes (anndata's h5ad.read_dataset /
    zarr.read_dataset)."""
    if _is_h5(node):
        string = h5py.check_string_dtype(node.dtype)
        value = node.asstr()[()] if string is not None and string.encoding == "utf-8" else node[()]
        if not hasattr(value, "dtype"):
            return value
        if issubclass(value.dtype.type, np.bytes_):
            value = value.astype(str)
            if len(value) == 1:
                # Old files stored a string as a one-element array.
                return value[0]
        elif len(value.dtype.descr) > 1:
            dtype = value.dtype
            value = _decode_structured(_from_fixed_length_strings(value), dtype)
        if value.shape == ():
            value = value[()]
        return value
    value = node[...]
    if not hasattr(value, "dtype"):
        return value
    if issubclass(value.dtype.type, np.str_):
        value = value.astype(object)
    elif issubclass(value.dtype.type, np.bytes_):
        value = value.astype(str).astype(object)
    elif len(value.dtype.descr) > 1:
        value = _from_fixed_length_strings(value)
    if value.shape == ():
        value = value[()]
    return value


def _sparse(node, format_name, shape):
    cls = sp.csr_matrix if format_name.startswith("csr") else sp.csc_matrix
    data, indices, indptr = (_values(node[k]) for k in ("data", "indices", "indptr"))
    matrix = cls(tuple(int(s) for s in shape), dtype=data.dtype)
    matrix.data, matrix.indices, matrix.indptr = data, indices, indptr
    return matrix


def _series(node):
    """A dataframe 0.1.0 column: a categorical names its categories by an
    object reference (attribute "categories")."""
    if "categories" in node.attrs:
        if not _is_h5(node):
            raise UnknownEncoding(f"{node.name}: a dataframe 0.1.0 categorical in a Zarr store (zarrmount "
                                  "serves dataframe 0.2.0 only)")
        categories_node = node.parent[node.attrs["categories"]]
        categories = read_elem(categories_node)
        ordered = bool(_attr(categories_node, "ordered", False))
        return pd.Categorical.from_codes(read_elem(node), categories, ordered=ordered)
    return read_elem(node)


def _dataframe(node, version):
    columns = list(_attr(node, "column-order"))
    columns = [_as_str(c) for c in columns]
    index_key = _as_str(_attr(node, "_index"))
    reader = _series if version == "0.1.0" else read_elem
    frame = pd.DataFrame({k: reader(node[k]) for k in columns}, index=reader(node[index_key]),
                         columns=list(columns))
    if index_key != "_index":
        frame.index.name = index_key
    return frame


def _dataframe_legacy(node):
    """A pre-0.7 dataframe: one compound dataset, its first field the index."""
    value = node[()]
    if _is_h5(node):
        frame = pd.DataFrame(_decode_structured(_from_fixed_length_strings(value), node.dtype))
    else:
        frame = pd.DataFrame(_from_fixed_length_strings(value))
    frame.set_index(frame.columns[0], inplace=True)
    return frame


def read_dataframe(node):
    if _group_like(node):
        return read_elem(node)
    return _dataframe_legacy(node)


def read_elem(node):
    """One element, by its encoding-type (anndata 0.8's registry)."""
    kind = _as_str(_attr(node, "encoding-type", ""))
    version = _as_str(_attr(node, "encoding-version", ""))
    if kind == "":
        if _group_like(node):
            if "h5sparse_format" in node.attrs:
                return _sparse(node, _as_str(_attr(node, "h5sparse_format")), _attr(node, "h5sparse_shape"))
            return {k: read_elem(node[k]) for k in node.keys()}
        return _read_dataset_legacy(node)
    if kind in ("anndata", "raw"):
        return _read_anndata_group(node)
    if kind == "dict":
        return {k: read_elem(node[k]) for k in node.keys()}
    if kind in ("array", "numeric-scalar", "bytes"):
        return _values(node)
    if kind == "string-array":
        return _strings(node)
    if kind == "string":
        return node.asstr()[()] if _is_h5(node) else str(read(node))
    if kind == "rec-array":
        value = node[()]
        dtype = value.dtype
        value = _from_fixed_length_strings(value)
        return _decode_structured(value, dtype) if _is_h5(node) else value
    if kind in ("csr_matrix", "csc_matrix"):
        return _sparse(node, kind, _attr(node, "shape"))
    if kind == "dataframe":
        return _dataframe(node, version)
    if kind == "categorical":
        return pd.Categorical.from_codes(codes=read_elem(node["codes"]), categories=read_elem(node["categories"]),
                                         ordered=bool(_attr(node, "ordered")))
    if kind in ("nullable-integer", "nullable-boolean"):
        values = read_elem(node["values"])
        if "mask" in node:
            cls = pd.arrays.IntegerArray if kind == "nullable-integer" else pd.arrays.BooleanArray
            return cls(values, mask=read_elem(node["mask"]))
        return pd.array(values)
    raise UnknownEncoding(f"{node.name}: encoding-type {kind!r} {version} is not one anndata 0.8 reads")


def _read_anndata_group(node):
    """read_anndata: an anndata or raw group read whole (raw/ of a Zarr store
    too: anndata 0.8 reads it as an AnnData and keeps its X, var and varm)."""
    d = {k: read_elem(node[k]) for k in ("X", "obs", "var", "obsm", "varm", "obsp", "varp", "layers", "uns",
                                         "raw") if k in node}
    raw = d.pop("raw", None)
    if isinstance(raw, Data):
        raw = {"X": raw.X, "var": raw.var, "varm": raw.varm}
    return make(**d, raw=raw, dtype=d["X"].dtype if "X" in d else None, own=True)


def _clean_uns(d):
    """anndata.compat._clean_uns: pre-0.7 categories kept in uns['<col>_categories']."""
    delete = set()
    for name, categories in d.get("uns", {}).items():
        if not name.endswith("_categories"):
            continue
        column = name.replace("_categories", "")
        if isinstance(categories, (str, int)):
            categories = [categories]
        for axis in ("obs", "var"):
            if column not in d[axis]:
                continue
            codes = d[axis][column].values
            if not np.all(codes < len(categories)):
                continue
            d[axis][column] = pd.Categorical.from_codes(codes, categories)
            delete.add(name)
    for name in delete:
        del d["uns"][name]


def _legacy_raw(f, modern):
    if modern:
        if any(k.startswith("raw.") for k in f):
            raise ValueError("the file has both the legacy and the current raw")
        return modern
    raw = {}
    if "raw.X" in f:
        raw["X"] = read_elem(f["raw.X"])
    if "raw.var" in f:
        raw["var"] = read_dataframe(f["raw.var"])
    if "raw.varm" in f:
        raw["varm"] = read_elem(f["raw.varm"])
    return raw


def read_h5ad(path):
    """anndata.read_h5ad(path) without anndata: a Data."""
    with h5py.File(path, "r") as f:
        d = {}
        for k in f.keys():
            if k == "raw" or k.startswith("raw."):
                continue
            d[k] = read_dataframe(f[k]) if k in ("obs", "var") else read_elem(f[k])
        raw = {}
        if "raw/X" in f:
            raw["X"] = read_elem(f["raw/X"])
        for k in ("var", "varm"):
            if f"raw/{k}" in f:
                raw[k] = read_elem(f[f"raw/{k}"])
        raw = _legacy_raw(f, raw)
        X = f.get("X")
        if X is not None:
            d["dtype"] = X["data"].dtype if isinstance(X, h5py.Group) else X.dtype
    _clean_uns(d)
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
        d[k] = read_dataframe(root[k]) if k in ("obs", "var") else read_elem(root[k])
    raw = _legacy_raw(root, d.pop("raw", None))
    if isinstance(raw, Data):
        raw = {"X": raw.X, "var": raw.var, "varm": raw.varm}
    if "X" in d:
        d["dtype"] = d["X"].dtype
    _clean_uns(d)
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
