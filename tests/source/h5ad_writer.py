"""Writes an .h5ad file in anndata 0.8's layout with h5py alone.

The test generators need small AnnData files, and Debian 13 does not package anndata, so
this writes what anndata 0.8.0's write_h5ad writes for the kinds of elements they use,
following its writers (anndata/_io/h5ad.py and _io/specs/methods.py): the root with
encoding-type "anndata" 0.1.0; X, obs, var, obsm, varm, obsp, varp, layers and uns in that
order (empty mappings still written as groups); every element's encoding-type and
encoding-version attributes; no compression or chunking but for sparse matrices'
data/indices/indptr, which anndata writes resizable (maxshape (None,), so chunked).

    write_h5ad(path, X, obs, var, obsm={}, varm={}, obsp={}, varp={}, layers={}, uns={})

X: a 2-D numpy array or a scipy CSR/CSC matrix; obs, var: pandas DataFrames whose columns
are numeric or bool numpy-backed, str (object) or categorical; obsm ... layers: mappings of
arrays / sparse matrices; uns: a mapping of str, int, float, bool, arrays and mappings.
tests/source/dump_reference.py reads such a file as anndata 0.8 does (and, where anndata
is installed, --agree-with-anndata holds that reading to anndata's own).
"""
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

STR = h5py.string_dtype(encoding="utf-8")


def _encoding(obj, kind, version):
    obj.attrs.setdefault("encoding-type", kind)
    obj.attrs.setdefault("encoding-version", version)


def _array(group, key, value):
    value = np.asarray(value)
    if value.dtype.kind in "UO":
        group.create_dataset(key, data=value.astype(STR), dtype=STR)
        _encoding(group[key], "string-array", "0.2.0")
    else:
        group.create_dataset(key, data=value)
        _encoding(group[key], "array", "0.2.0")


def _sparse(group, key, value):
    fmt = "csr" if sp.isspmatrix_csr(value) else "csc"
    g = group.create_group(key)
    g.attrs["shape"] = value.shape
    for part in ("data", "indices", "indptr"):
        g.create_dataset(part, data=getattr(value, part), maxshape=(None,))
    _encoding(g, f"{fmt}_matrix", "0.1.0")


def _categorical(group, key, value):
    g = group.create_group(key)
    g.attrs["ordered"] = bool(value.ordered)
    _array(g, "codes", value.codes)
    _array(g, "categories", value.categories.to_numpy())
    _encoding(g, "categorical", "0.2.0")


def _dataframe(group, key, df):
    if "_index" in df.columns:
        raise ValueError("'_index' is a reserved name for dataframe columns")
    g = group.create_group(key)
    g.attrs["column-order"] = [str(c) for c in df.columns]
    index_name = df.index.name if df.index.name is not None else "_index"
    g.attrs["_index"] = str(index_name)
    _array(g, index_name, df.index.to_numpy())
    for name, series in df.items():
        _elem(g, str(name), series.array if isinstance(series.dtype, pd.CategoricalDtype)
              else series.to_numpy())
    _encoding(g, "dataframe", "0.2.0")


def _mapping(group, key, mapping):
    g = group.create_group(key)
    for k, v in mapping.items():
        _elem(g, k, v)
    _encoding(g, "dict", "0.1.0")


def _elem(group, key, value):
    if isinstance(value, pd.DataFrame):
        _dataframe(group, key, value)
    elif isinstance(value, pd.Categorical):
        _categorical(group, key, value)
    elif sp.issparse(value):
        _sparse(group, key, value)
    elif isinstance(value, dict):
        _mapping(group, key, value)
    elif isinstance(value, str):
        group.create_dataset(key, data=np.array(value, dtype=STR))
        _encoding(group[key], "string", "0.2.0")
    elif isinstance(value, (bool, int, float, np.number, np.bool_)):
        group.create_dataset(key, data=np.array(value))
        _encoding(group[key], "numeric-scalar", "0.2.0")
    elif isinstance(value, np.ndarray):
        _array(group, key, value)
    else:
        raise TypeError(f"{key}: no anndata 0.8 encoding written here for {type(value).__name__}")


def write_h5ad(path, X, obs, var, obsm=None, varm=None, obsp=None, varp=None, layers=None,
               uns=None):
    with h5py.File(path, "w") as f:
        f.attrs.setdefault("encoding-type", "anndata")
        f.attrs.setdefault("encoding-version", "0.1.0")
        if X is not None:
            _elem(f, "X", X)
        _dataframe(f, "obs", obs)
        _dataframe(f, "var", var)
        for key, mapping in (("obsm", obsm), ("varm", varm), ("obsp", obsp), ("varp", varp),
                             ("layers", layers), ("uns", uns)):
            _mapping(f, key, dict(mapping or {}))
