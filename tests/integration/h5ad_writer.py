#!/usr/bin/python3
"""Writes .h5ad files with h5py in anndata 0.8's layout, so that the tests
make their own sources the same way on every release (Debian 13 packages no
anndata).

    write_h5ad(path, X=..., obs=..., var=..., obsm={...}, varm={...},
               obsp={...}, varp={...}, layers={...}, uns={...},
               raw={"X": ..., "var": ..., "varm": {...}}, compression=None)

What anndata 0.8's AnnData(...).write_h5ad(path, compression=...) writes
(_io/h5ad.py, _io/specs/methods.py): the root marked anndata 0.1.0; X, raw,
obs, var, obsm, varm, obsp, varp, layers and uns in that order, every one of
them written even when empty; each element with its encoding-type and
encoding-version attributes:

- numeric and boolean arrays: array 0.2.0, one dataset;
- strings (object or "U" arrays, string columns, the index): string-array
  0.2.0, variable-length UTF-8;
- scipy CSR / CSC: a csr_matrix / csc_matrix 0.1.0 group with "shape" and
  data, indices and indptr, each resizable (maxshape None, so chunked);
- pandas frames: dataframe 0.2.0 with "_index" and "column-order" (an empty
  order is an empty float array, as h5py stores []);
- categoricals: categorical 0.2.0 with "ordered", codes and categories;
- nullable integers / booleans: nullable-integer / nullable-boolean 0.1.0,
  values and mask;
- dicts: dict 0.1.0; str: string 0.2.0; numbers: numeric-scalar 0.2.0 (both
  scalars uncompressed, as h5py refuses to compress them).

compression (e.g. "gzip") goes to every dataset but the scalars, as
anndata's dataset_kwargs do. X is stored as float32 unless dtype says
otherwise (anndata 0.8's AnnData(X) without dtype). One step of anndata's is
left out on purpose: write_h5ad makes a string column with repeated values
categorical (strings_to_categoricals); here a column is written as it is
given, so give a pd.Categorical where a categorical is meant.

Where anndata is installed, tests/integration/test_export.py checks that
anndata.read_h5ad reads what this writes as the objects it was given.
"""
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp


def _spec(node, kind, version):
    node.attrs["encoding-type"] = kind
    node.attrs["encoding-version"] = version


def _dataset(group, key, data, options, **extra):
    return group.create_dataset(key, data=data, **extra, **options)


def _strings(group, key, values, options):
    text = h5py.string_dtype("utf-8")
    values = np.asarray(values, dtype=object)
    node = group.create_dataset(key, data=values.astype(text), dtype=text, **options)
    _spec(node, "string-array", "0.2.0")


def write_elem(group, key, value, options):
    """One element under group[key], as anndata 0.8's write_elem does."""
    if isinstance(value, dict):
        child = group.create_group(key)
        _spec(child, "dict", "0.1.0")
        for k, v in value.items():
            write_elem(child, k, v, options)
    elif isinstance(value, pd.DataFrame):
        _frame(group, key, value, options)
    elif isinstance(value, pd.Categorical):
        child = group.create_group(key)
        _spec(child, "categorical", "0.2.0")
        child.attrs["ordered"] = bool(value.ordered)
        write_elem(child, "codes", np.asarray(value.codes), options)
        write_elem(child, "categories", np.asarray(value.categories._values), options)
    elif isinstance(value, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):
        child = group.create_group(key)
        _spec(child, "nullable-integer" if isinstance(value, pd.arrays.IntegerArray) else "nullable-boolean",
              "0.1.0")
        write_elem(child, "mask", np.asarray(value._mask), options)
        write_elem(child, "values", np.asarray(value._data), options)
    elif sp.issparse(value):
        kind = {"csr": "csr_matrix", "csc": "csc_matrix"}.get(value.format)
        if kind is None:
            raise TypeError(f"{key}: a {value.format} matrix (anndata writes CSR and CSC)")
        child = group.create_group(key)
        _spec(child, kind, "0.1.0")
        child.attrs["shape"] = value.shape
        # anndata 0.8 makes the three resizable (so HDF5 chunks them).
        for part in ("data", "indices", "indptr"):
            _dataset(child, part, getattr(value, part), options, maxshape=(None,))
    elif isinstance(value, str):
        node = group.create_dataset(key, data=np.array(value, dtype=h5py.string_dtype("utf-8")))
        _spec(node, "string", "0.2.0")
    elif isinstance(value, (bool, int, float, np.number, np.bool_)):
        node = group.create_dataset(key, data=np.array(value))
        _spec(node, "numeric-scalar", "0.2.0")
    else:
        array = np.asarray(value)
        if array.dtype.kind in "OU":
            _strings(group, key, array, options)
        elif array.dtype.kind in "biufc":
            _spec(_dataset(group, key, array, options), "array", "0.2.0")
        else:
            raise TypeError(f"{key}: {type(value).__name__} of {array.dtype} is not written by this writer")


def _frame(group, key, frame, options):
    if "_index" in frame.columns:
        raise ValueError(f"{key}: '_index' is a reserved name for dataframe columns")
    child = group.create_group(key)
    columns = [str(c) for c in frame.columns]
    child.attrs["column-order"] = columns if columns else np.array([], dtype=np.float64)
    index_name = frame.index.name if frame.index.name is not None else "_index"
    child.attrs["_index"] = index_name
    _spec(child, "dataframe", "0.2.0")
    write_elem(child, index_name, np.asarray(frame.index.astype(str), dtype=object), options)
    for name, series in frame.items():
        # The column's own array (anndata writes series._values): a
        # Categorical, a nullable array, or numpy values.
        values = series.array if isinstance(series.dtype, pd.api.extensions.ExtensionDtype) else series.to_numpy()
        write_elem(child, str(name), values, options)


def _default_frame(frame, n):
    if frame is None:
        return pd.DataFrame(index=pd.RangeIndex(n).astype(str))
    return frame


def write_h5ad(path, X=None, obs=None, var=None, obsm=None, varm=None, obsp=None, varp=None, layers=None,
               uns=None, raw=None, compression=None, dtype=np.float32):
    """An AnnData's parts written to path as anndata 0.8's write_h5ad writes them."""
    options = {} if compression is None else {"compression": compression}
    if X is not None:
        X = X.astype(dtype) if X.dtype != np.dtype(dtype) else X
        n_obs, n_vars = X.shape
    else:
        n_obs = 0 if obs is None else len(obs)
        n_vars = 0 if var is None else len(var)
    obs, var = _default_frame(obs, n_obs), _default_frame(var, n_vars)
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        if X is not None:
            write_elem(f, "X", X, options)
        if raw is not None:
            group = f.create_group("raw")
            _spec(group, "raw", "0.1.0")
            write_elem(group, "X", raw["X"], options)
            write_elem(group, "var", _default_frame(raw.get("var"), raw["X"].shape[1]), options)
            write_elem(group, "varm", dict(raw.get("varm") or {}), options)
        write_elem(f, "obs", obs, options)
        write_elem(f, "var", var, options)
        for name, part in (("obsm", obsm), ("varm", varm), ("obsp", obsp), ("varp", varp), ("layers", layers),
                           ("uns", uns)):
            write_elem(f, name, dict(part or {}), options)
