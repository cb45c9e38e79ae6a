#!/usr/bin/python3
"""Print, as one JSON object, what anndata / h5py / loompy read from an HDF5 single-cell file.

    /usr/bin/python3 tests/source/dump_reference.py FILE [--rows R1,R2,...] [--genome NAME] [--pretty]
    /usr/bin/python3 tests/source/dump_reference.py --agree-with-anndata FILE.h5ad...

The C source reader's tests compare their element model with this reference, element by
element.  Only Debian's python3 and apt packages are used: h5py, numpy, scipy, pandas and
loompy (Debian 12: h5py 3.7, numpy 1.24, pandas 1.5, loompy 3.0.7; Debian 13: h5py 3.13,
numpy 2.2, pandas 2.2, loompy 3.0.7), and anndata only for --agree-with-anndata: h5ad files
are read with h5py alone, along anndata 0.8's on-disk layout (model_h5py below), because
Debian 13 does not package anndata.  Filter 32015 (zstd) is registered through h5zstd.py
beside this file, since Debian has no zstd HDF5 plugin.

--agree-with-anndata prints a first line {"anndata": VERSION} and then, for each file, a
line {"file", "agree", "differences": [...]} (or "h5py_error" / "anndata_error" where a
reading refused it) saying whether anndata's own read_h5ad gives the same dump, whole and
for the rows tests/test_source.c gathers.  Where anndata is not installed the only line is
{"skip": REASON} (exit 0) if the release has no python3-anndata, else {"fail": REASON}
(exit 2): see optional_modules.py.

Output
------
    {"format": "h5ad" | "loom" | "10x-v3" | "10x-v2",
     "n_obs": N, "n_vars": M,
     "generation": "0.8+" | "0.7" | "pre-0.7"             (h5ad only)
     "genome": NAME, "genomes": [...]                      (10x-v2 only)
     "elements": {PATH: ENTRY, ...},                       (in model order)
     "rows": {"selection": [...], "elements": {PATH: ROWS_ENTRY, ...}}   (with --rows only)
    }
A file that is not a readable single-cell HDF5 file prints {"error": "one line"} and exits 2;
so does one that anndata 0.8 cannot read, or whose sparse matrices are structurally invalid
(indptr not starting at 0, not monotone, not ending at nnz; indices outside the minor axis).

PATH is the model path as anndata presents the element: X, layers/<k>, obs (the dataframe),
obs/_index, obs/<col>, var, var/_index, var/<col>, obsm/<k>, varm/<k>, obsp/<k>, varp/<k>,
raw/X, raw/var, raw/var/_index, raw/var/<col>, raw/varm/<k>, uns (a dict), uns/<k>/<k2>/...
A dataframe anywhere (obsm/<k>, uns/<k>, ...) gets the same treatment as obs: an entry for
itself, <path>/_index and <path>/<col>.  "_index" is always the index's model name, whatever
the file calls it (its file key is the dataframe entry's "index_key").

ENTRY, every kind has the keys kind, dtype, shape, sha256, head (null where meaningless):
  kind    "array" | "string-array" | "scalar" | "csr" | "csc" | "categorical" | "nullable" |
          "dataframe" | "dict" | "rec-array"
  dtype   numpy dtype string of the values as the FILE stores them, little-endian spelling:
          "<f4", "<i8", "|u1", "|b1" (bool, whether stored as HDF5 enum or not), "str" for
          strings (fixed or variable length); "category" for categoricals.  A file dtype that
          differs from that spelling (big-endian, enum, fixed/vlen string) is in "file_dtype"
          (e.g. ">f4", "enum(|i1)", "|S8 ascii", "vlen utf-8").
  shape   the presented shape (cells x genes orientation for matrices); [] for scalars
  sha256  hex SHA-256 of the canonical bytes:
            numbers: C-order little-endian raw bytes in the stored dtype (bool: 1 byte 0/1)
            strings: UTF-8 bytes of each item followed by one 0x00 byte
  head    the first up to 10 values in C order as JSON (NaN -> "NaN", +-inf -> "Infinity" /
          "-Infinity", a missing categorical / masked nullable value -> null)
  csr/csc:     data_sha256, indices_sha256, indptr_sha256, data_dtype, indices_dtype,
               indptr_dtype (as the file stores them), nnz; head = first values of data
  categorical: codes_dtype, codes_sha256, categories (list), categories_dtype,
               categories_sha256, ordered; head = first labels
  nullable:    nullable_kind ("integer" | "boolean"), values_sha256, mask_sha256 (null when the
               file has no mask), dtype = the values' dtype; head = values with null if masked
  dataframe:   columns (in order), index_name (pandas' index name, null for "_index"),
               index_key (the index's key in the file), shape [rows, columns]
  dict:        keys (in order)
  rec-array:   fields [{"name", "dtype"}], field_sha256 {name: sha256 of that column}
  scalar:      value in head (a 1-list); a legacy 1-element string array read as a str scalar
               has "file_shape": [1]

ROWS_ENTRY (--rows R1,R2,...: 0-based cell positions, in that order, repeats allowed), for
every obs-axis element (X, layers/*, obs/_index, obs/<col>, obsm/* and obsm dataframes'
columns, obsp/*, raw/X):
  array/string-array: sha256, shape of the selected rows  (A[rows])
  csr:         data_sha256, indices_sha256, indptr_sha256, nnz, shape of A[rows] as scipy
               builds it (row order as given, within-row order as in the file); indices and
               indptr in the file's dtypes
  csc:         the same for A[rows] kept as CSC: row indices renumbered to positions in the
               selection, sorted ascending within each column; index dtypes as in the file
  categorical: codes_sha256 (codes as stored);  nullable: values_sha256, mask_sha256
  obsp/*:      as above for A[rows] (all columns), plus "rows_cols" for A[rows][:, rows]
               (the subsampled graph; CSR, indices sorted ascending within each row)

Presentation choices
--------------------
h5ad: the elements, kinds and values anndata 0.8's read_h5ad (in memory) presents, read by
      model_h5py (which follows anndata 0.8's readers and read-time fixes with h5py and
      pandas; --agree-with-anndata compares it with anndata itself); the bytes and dtypes
      come from the file's datasets (h5py), and the two are checked equal.
      Pre-0.7 files: obs/var/obsm/varm compound datasets are split into columns / arrays;
      categoricals come from uns/<col>_categories (and leave uns, as anndata moves them);
      uns/neighbors/{connectivities,distances} appear as obsp/* (as anndata moves them).
loom: as anndata.read_loom with its defaults, except that X is always the main matrix (read_loom
      would take a layer named "spliced") and dtypes are kept (read_loom casts to float32):
      X = /matrix transposed (cells x genes, dense), layers/<k> = /layers/<k> transposed;
      obs = col_attrs, var = row_attrs, in name order; the index is CellID (obs) / Gene (var)
      when present, else "0".."n-1" (the _index entry then has "synthesized": true); a 2-D
      attribute with more than one column goes to obsm/varm, one with shape (n, 1) is a column;
      strings as loompy materialises them (decoded, XML entities unescaped);
      obsp/<g> = col_graphs/<g>, varp/<g> = row_graphs/<g>: CSR of the COO (a, b, w) - a and b
      cast to integers, duplicate (a, b) pairs summed, column indices sorted within rows, data
      in w's dtype, indices/indptr int32 when n and nnz fit, else int64.
10x:  as scanpy.read_10x_h5 (without its int32 -> float32 cast of data): X = CSR cells x
      features from data/indices/indptr/shape (dtypes as stored), obs index = barcodes;
      v3: var index = features/name, columns gene_ids (features/id), feature_types, genome,
      then every other 1-D dataset in features/ in name order (except _all_tag_keys), and
      obs columns = other 1-D datasets of /matrix with one value per barcode (e.g.
      filtered_barcodes); v2: var index = gene_names, column gene_ids (genes); the genome
      group is --genome NAME or else the first one in name order.
"""

import hashlib
import json
import os
import sys
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp
import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import anndata_elements  # noqa: E402  (tests/integration/anndata_elements.py)
import h5zstd  # noqa: E402

warnings.simplefilter("ignore")
h5zstd.register()

HEAD = 10


class RefError(Exception):
    pass


# --------------------------------------------------------------------------------------
# canonical bytes, dtypes, JSON values
# --------------------------------------------------------------------------------------

def sha(b):
    return hashlib.sha256(b).hexdigest()


def dtype_str(dt):
    dt = np.dtype(dt)
    if dt.kind in "OSU":
        return "str"
    if dt.kind == "b":
        return "|b1"
    if dt.subdtype is not None:
        return dtype_str(dt.subdtype[0])
    return dt.newbyteorder("<").str if dt.byteorder not in ("|", "=") or dt.itemsize > 1 else dt.str


def le(arr):
    arr = np.asarray(arr)
    if arr.dtype.kind == "b":
        return np.ascontiguousarray(arr.astype(np.uint8))
    return np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"), copy=False))


def canon_numeric(arr):
    return le(arr).tobytes()


def to_str(x):
    if isinstance(x, (bytes, np.bytes_)):
        return bytes(x).decode("utf-8")
    return str(x)


def canon_strings(values):
    return b"".join(to_str(v).encode("utf-8") + b"\x00" for v in values)


def jval(x):
    if x is None:
        return None
    if isinstance(x, (bytes, np.bytes_)):
        return bytes(x).decode("utf-8", "replace")
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(x, (complex, np.complexfloating)):
        return [jval(x.real), jval(x.imag)]
    if isinstance(x, str):
        return x
    if isinstance(x, (np.void, tuple)):
        return [jval(v) for v in x]
    try:
        if pd.isna(x):
            return None
    except (TypeError, ValueError):
        pass
    return str(x)


def head_of(values):
    if isinstance(values, np.ndarray):
        values = values.reshape(-1)[:HEAD]
        return [jval(v) for v in values]
    return [jval(v) for v in list(values)[:HEAD]]


def entry(kind, dtype=None, shape=None, sha256=None, head=None, **extra):
    e = {"kind": kind, "dtype": dtype, "shape": None if shape is None else [int(s) for s in shape],
         "sha256": sha256, "head": head}
    e.update(extra)
    return e


def e_array(arr, file_dtype=None):
    arr = np.asarray(arr)
    e = entry("array", dtype_str(arr.dtype), arr.shape, sha(canon_numeric(arr)), head_of(arr))
    if file_dtype and file_dtype != e["dtype"]:
        e["file_dtype"] = file_dtype
    return e


def e_strings(values, file_dtype=None, shape=None):
    values = [to_str(v) for v in values]
    e = entry("string-array", "str", shape if shape is not None else [len(values)],
              sha(canon_strings(values)), values[:HEAD])
    if file_dtype:
        e["file_dtype"] = file_dtype
    return e


def sparse_parts(data, indices, indptr):
    return {
        "data_sha256": sha(canon_numeric(data)), "indices_sha256": sha(canon_numeric(indices)),
        "indptr_sha256": sha(canon_numeric(indptr)), "nnz": int(len(data)),
    }


def e_sparse(kind, shape, data, indices, indptr):
    e = entry(kind, dtype_str(data.dtype), shape, None, head_of(data))
    e.update(sparse_parts(data, indices, indptr))
    e.update(data_dtype=dtype_str(data.dtype), indices_dtype=dtype_str(indices.dtype),
             indptr_dtype=dtype_str(indptr.dtype))
    return e


def categories_canon(cats):
    cats = np.asarray(cats)
    if cats.dtype.kind in "OSU":
        return "str", sha(canon_strings(cats))
    return dtype_str(cats.dtype), sha(canon_numeric(cats))


def e_categorical(codes, categories, ordered):
    cdt, csha = categories_canon(categories)
    e = entry("categorical", "category", [len(codes)], None,
              [None if c < 0 or c >= len(categories) else jval(categories[c]) for c in codes[:HEAD]])
    e.update(codes_dtype=dtype_str(codes.dtype), codes_sha256=sha(canon_numeric(codes)),
             categories=[jval(c) for c in categories], categories_dtype=cdt,
             categories_sha256=csha, ordered=bool(ordered))
    return e


def e_nullable(kind, values, mask):
    hd = [None if (mask is not None and m) else jval(v)
          for v, m in zip(values[:HEAD], (mask if mask is not None else values)[:HEAD])]
    e = entry("nullable", dtype_str(values.dtype), [len(values)], None, hd)
    e.update(nullable_kind=kind, values_sha256=sha(canon_numeric(values)),
             mask_sha256=None if mask is None else sha(canon_numeric(mask)))
    return e


def e_dataframe(columns, index_name, index_key, n_rows):
    return entry("dataframe", None, [n_rows, len(columns)], None, None,
                 columns=[str(c) for c in columns], index_name=index_name, index_key=index_key)


def validate_sparse(path, kind, shape, data, indices, indptr):
    """Refuse a structurally invalid CSR/CSC matrix (anndata itself does not check all of it)."""
    n_major, n_minor = (shape[0], shape[1]) if kind == "csr" else (shape[1], shape[0])
    if len(indptr) != n_major + 1:
        raise RefError(f"{path}: indptr has {len(indptr)} entries, expected {n_major + 1}")
    if len(data) != len(indices):
        raise RefError(f"{path}: data has {len(data)} values but indices {len(indices)}")
    if len(indptr) and int(indptr[0]) != 0:
        raise RefError(f"{path}: indptr[0] = {int(indptr[0])}, expected 0")
    if len(indptr) and int(indptr[-1]) != len(data):
        raise RefError(f"{path}: indptr ends at {int(indptr[-1])} but there are {len(data)} values")
    if np.any(np.diff(np.asarray(indptr, dtype=np.int64)) < 0):
        raise RefError(f"{path}: indptr is not monotone")
    if len(indices) and (int(np.min(indices)) < 0 or int(np.max(indices)) >= n_minor):
        raise RefError(f"{path}: indices outside 0..{n_minor - 1}")


def index_dtype_for(n, nnz):
    return np.int32 if max(n, nnz) < 2**31 else np.int64


# --------------------------------------------------------------------------------------
# row selections
# --------------------------------------------------------------------------------------

def rows_array(arr):
    arr = np.asarray(arr)

    def fn(rows):
        sel = arr[rows]
        return {"sha256": sha(canon_numeric(sel)), "shape": list(sel.shape)}
    return fn


def rows_strings(values):
    values = [to_str(v) for v in values]

    def fn(rows):
        sel = [values[r] for r in rows]
        return {"sha256": sha(canon_strings(sel)), "shape": [len(sel)]}
    return fn


def rows_sparse(kind, m, idx_dtype, ptr_dtype, square=False):
    def parts(sub):
        return dict(sparse_parts(sub.data, sub.indices.astype(idx_dtype), sub.indptr.astype(ptr_dtype)),
                    shape=list(sub.shape))

    def fn(rows):
        sub = m[rows]
        if kind == "csc":
            sub = sp.csc_matrix(sub)
            sub.sort_indices()
        else:
            sub = sp.csr_matrix(sub)
        out = parts(sub)
        if square:
            sq = sp.csr_matrix(m[rows][:, rows])
            sq.sort_indices()
            out["rows_cols"] = parts(sq)
        return out
    return fn


def rows_categorical(codes):
    def fn(rows):
        return {"codes_sha256": sha(canon_numeric(codes[rows])), "shape": [len(rows)]}
    return fn


def rows_nullable(values, mask):
    def fn(rows):
        return {"values_sha256": sha(canon_numeric(values[rows])),
                "mask_sha256": None if mask is None else sha(canon_numeric(mask[rows])),
                "shape": [len(rows)]}
    return fn


class Dump:
    def __init__(self):
        self.elements = {}
        self.row_fns = {}

    def add(self, path, e, row_fn=None):
        if path in self.elements:
            raise RefError(f"duplicate model path {path}")
        self.elements[path] = e
        if row_fn is not None:
            self.row_fns[path] = row_fn

    def rows(self, rows):
        return {"selection": rows, "elements": {p: fn(rows) for p, fn in self.row_fns.items()}}


# --------------------------------------------------------------------------------------
# HDF5 helpers
# --------------------------------------------------------------------------------------

class Field:
    """One field of a compound dataset (pre-0.7 obs/var/obsm/varm)."""

    def __init__(self, ds, name):
        self.ds, self.name = ds, name

    @property
    def dtype(self):
        return self.ds.dtype.fields[self.name][0]


_COMPOUND_CACHE = {}


def read_node(node):
    """(values as stored, file dtype description) of a dataset or a compound field."""
    if isinstance(node, Field):
        key = (node.ds.file.filename, node.ds.name)
        if key not in _COMPOUND_CACHE:
            _COMPOUND_CACHE[key] = node.ds[()]
        arr = _COMPOUND_CACHE[key][node.name]
        tid = node.ds.id.get_type()
        mtype = tid.get_member_type(tid.get_member_index(node.name.encode()))
        return arr, file_dtype_desc(node.dtype, mtype)
    if not isinstance(node, h5py.Dataset):
        raise RefError(f"{node.name} is a group where a dataset was expected")
    return node[()], file_dtype_desc(node.dtype, node.id.get_type())


def file_dtype_desc(dt, tid):
    si = h5py.check_string_dtype(dt)
    if si is not None:
        if si.length is None:
            return f"vlen {si.encoding}"
        return f"|S{si.length} {si.encoding}"
    cls = tid.get_class()
    if cls == h5py.h5t.ENUM:
        return f"enum({np.dtype(tid.get_super().dtype).str})"
    if dt.subdtype is not None:
        return dt.subdtype[0].str
    if dt.names:
        return "compound"
    return dt.str


def is_string_dtype(dt):
    return h5py.check_string_dtype(dt) is not None or np.dtype(dt).kind in "OSU"


def decode_all(arr):
    return [to_str(x) for x in np.asarray(arr, dtype=object).reshape(-1)]


def numbers_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


def check(cond, what):
    if not cond:
        raise RefError(f"the file's datasets and the element model disagree: {what}")


# --------------------------------------------------------------------------------------
# h5ad read with h5py alone, as anndata 0.8's read_h5ad reads it
# --------------------------------------------------------------------------------------
#
# The reference must not need anndata (Debian 13 does not package it), so this reads the
# file itself along anndata's on-disk layout, with the element reading that
# tests/integration/readers.py uses too (tests/integration/anndata_elements.py: each
# element's "encoding-type" and "encoding-version" attributes choose its reader, exactly
# the pairs anndata 0.8.0 registers, elements without them read the way anndata 0.8 reads
# 0.6/0.7 files, uns categories moved into obs/var, legacy raw.X / raw.var / raw.varm).
# What model_h5py builds from those is what anndata 0.8's AnnData holds after read_h5ad,
# as numpy / scipy / pandas objects, with the constructor's fixes: uns["neighbors"]
# matrices moved to obsp (_move_adj_mtx), multi-column keys moved to obsm
# (_clean_up_old_format), every aligned mapping checked.  Every step follows anndata 0.8's
# code operation for operation (the same numpy and pandas calls), so that where the values
# are odd the same exceptions and the same conversions happen.  Where anndata is
# installed, --agree-with-anndata checks that both readings give the same dump.

class Model:
    """What read_h5ad returns, as far as the dump looks at it."""

    def __init__(self):
        self.X = None
        self.layers = {}
        self.obs = self.var = None
        self.obsm, self.varm, self.obsp, self.varp = {}, {}, {}, {}
        self.uns = {}
        self.raw = None
        self.n_obs = self.n_vars = 0


class RawModel:
    def __init__(self, X, var, varm):
        self.X, self.var, self.varm = X, var, varm


def frame_for(df):
    """anndata's _gen_dataframe for a DataFrame: a shallow copy with a str index."""
    df = df.copy(deep=False)
    if not pd.api.types.is_string_dtype(df.index):
        df.index = df.index.astype(str)
    return df


def aligned(mapping, what, shape_of, names=None):
    """A mapping aligned to axes (obsm, layers, obsp, ...), each value checked as anndata
    0.8's AlignedMapping does on setting it: the parent's dimensions, and for a dataframe
    the parent's names as its index."""
    if mapping is None:
        return {}
    if isinstance(mapping, np.ndarray):
        if mapping.dtype.fields is None:
            raise RefError(f"{what}: an array with no fields where a mapping was expected")
        mapping = {k: mapping[k] for k in mapping.dtype.fields.keys()}
    if not isinstance(mapping, dict):
        raise RefError(f"{what}: a {type(mapping).__name__} where a mapping was expected")
    out = {}
    for k, v in mapping.items():
        if not hasattr(v, "shape"):
            raise RefError(f"{what}/{k}: a {type(v).__name__} has no shape")
        want = shape_of(v)
        if tuple(v.shape[:len(want)]) != want:
            raise RefError(f"{what}/{k}: shape {tuple(v.shape)}, expected {want} first")
        if names is not None and hasattr(v, "index") and not (v.index == names).all():
            raise RefError(f"{what}/{k}: its index does not match the parent's names")
        out[k] = v
    return out


MULTICOL_KEYS = (("obs", ("obs_keys_multicol", "smp_keys_multicol", "_obs_keys_multicol",
                          "_smp_keys_multicol")),
                 ("var", ("var_keys_multicol", "_var_keys_multicol")))


def model_h5py(f):
    """The h5ad file f as anndata 0.8's read_h5ad presents it (a Model)."""
    try:
        d, raw = anndata_elements.read_h5ad_elements(f)
    except anndata_elements.ReadError as exc:
        raise RefError(str(exc))
    unknown = sorted(set(d) - {"X", "obs", "var", "uns", "obsm", "varm", "obsp", "varp",
                               "layers"})
    if unknown:
        raise RefError(f"top-level element {unknown[0]!r} is not part of an AnnData")

    m = Model()
    X = d.get("X")
    if X is not None:
        if not (isinstance(X, np.ndarray) or sp.issparse(X)):
            raise RefError(f"X is a {type(X).__name__}, not an array or a sparse matrix")
        if len(X.shape) != 2:
            raise RefError(f"X has {len(X.shape)} dimensions, not 2")
        m.X = X
        m.n_obs, m.n_vars = X.shape
    else:
        m.n_obs = len(d["obs"]) if d.get("obs") is not None else 0
        m.n_vars = len(d["var"]) if d.get("var") is not None else 0
    for axis, n in (("obs", m.n_obs), ("var", m.n_vars)):
        df = d.get(axis)
        if df is None or len(df) == 0:
            df = pd.DataFrame(index=pd.RangeIndex(0, n, name=None).astype(str))
        elif not isinstance(df, pd.DataFrame):
            raise RefError(f"{axis} is a {type(df).__name__}, not a dataframe")
        else:
            df = frame_for(df)
        if len(df) != n:
            raise RefError(f"{axis} has {len(df)} rows, but the matrix {n}")
        setattr(m, axis, df)
    uns = d.get("uns")
    m.uns = uns if uns else {}
    if not isinstance(m.uns, dict):
        raise RefError(f"uns is a {type(m.uns).__name__}, not a mapping")
    m.obsm = aligned(d.get("obsm"), "obsm", lambda v: (m.n_obs,), m.obs.index)
    m.varm = aligned(d.get("varm"), "varm", lambda v: (m.n_vars,), m.var.index)
    m.obsp = aligned(d.get("obsp"), "obsp", lambda v: (m.n_obs, m.n_obs))
    m.varp = aligned(d.get("varp"), "varp", lambda v: (m.n_vars, m.n_vars))
    # uns["neighbors"]' adjacency matrices belong in obsp (_move_adj_mtx).
    n = m.uns.get("neighbors", {})
    for k in ("distances", "connectivities"):
        if k in n and isinstance(n[k], (sp.spmatrix, np.ndarray)) and len(n[k].shape) == 2:
            m.obsp.update(aligned({k: n.pop(k)}, "obsp", lambda v: (m.n_obs, m.n_obs)))
    if raw:
        if raw.get("X") is None:
            raise RefError("raw has no X")
        rX = raw["X"]
        rvar = raw.get("var")
        if rvar is None or len(rvar) == 0:
            rvar = pd.DataFrame(index=pd.RangeIndex(0, rX.shape[1], name=None).astype(str))
        else:
            rvar = frame_for(rvar)
        m.raw = RawModel(rX, rvar, aligned(raw.get("varm"), "raw/varm",
                                            lambda v: (rX.shape[1],), rvar.index))
    # Old multi-column obs/var keys become obsm/varm arrays (_clean_up_old_format).
    for axis, keys in MULTICOL_KEYS:
        for k in keys:
            if uns and k in uns:
                multicol = list(uns[k])
                del uns[k]
                break
        else:
            multicol = []
        df = getattr(m, axis)
        for key in multicol:
            cols = [c for c in df.columns if c.startswith(key)]
            values = df[cols].values
            df.drop(cols, axis=1, inplace=True)
            getattr(m, axis + "m")[key] = values
    m.layers = aligned(d.get("layers"), "layers", lambda v: (m.n_obs, m.n_vars))
    return m


def model_anndata(path):
    """The same file as anndata itself reads it (for --agree-with-anndata)."""
    import anndata as ad
    try:
        return ad.read_h5ad(path)
    except Exception as exc:  # noqa: BLE001
        raise RefError(f"anndata cannot read it: {type(exc).__name__}: {one_line(exc)}")


# --------------------------------------------------------------------------------------
# h5ad
# --------------------------------------------------------------------------------------

class H5ad:
    """The dump of an h5ad file: the elements a model (model_h5py's, or anndata's own
    AnnData) presents, each checked against the file's datasets read with h5py."""

    def __init__(self, path, f, model):
        self.f = f
        self.a = model
        if "encoding-type" in f.attrs:
            self.generation = "0.8+"
        elif isinstance(f.get("obs"), h5py.Dataset):
            self.generation = "pre-0.7"
        else:
            self.generation = "0.7"
        self.d = Dump()

    # ---- locating elements in the file
    def get(self, path):
        obj = self.f
        parts = path.split("/")
        for i, part in enumerate(parts):
            if isinstance(obj, h5py.Group):
                if part not in obj:
                    return None
                obj = obj[part]
            elif isinstance(obj, h5py.Dataset) and obj.dtype.names and part in obj.dtype.names \
                    and i == len(parts) - 1:
                return Field(obj, part)
            else:
                return None
        return obj

    def node(self, path):
        cands = [path]
        if path.startswith("raw/"):
            top, _, rest = path[4:].partition("/")
            cands.append(f"raw.{top}" + (f"/{rest}" if rest else ""))
        if path.startswith("obsp/"):
            cands.append("uns/neighbors/" + path[5:])
        for c in cands:
            obj = self.get(c)
            if obj is not None:
                return obj
        raise RefError(f"element {path} not found in the file")

    # ---- element kinds
    def matrix(self, path, v, node, obs_axis, square=False):
        if isinstance(v, pd.DataFrame):
            return self.dataframe(path, v, node, obs_axis)
        if sp.issparse(v):
            kind = "csc" if isinstance(v, sp.csc_matrix) else "csr"
            if not isinstance(node, h5py.Group):
                raise RefError(f"{path}: sparse in the model but not a group in the file")
            data, indices, indptr = (node[k][()] for k in ("data", "indices", "indptr"))
            validate_sparse(path, kind, v.shape, data, indices, indptr)
            check(numbers_equal(data, v.data) and numbers_equal(indices, v.indices)
                  and numbers_equal(indptr, v.indptr), f"{path} sparse arrays")
            e = e_sparse(kind, v.shape, data, indices, indptr)
            e["file_dtype"] = {k: file_dtype_desc(node[k].dtype, node[k].id.get_type())
                               for k in ("data", "indices", "indptr")}
            if all(fd == e[f"{k}_dtype"] for k, fd in e["file_dtype"].items()):
                del e["file_dtype"]
            rf = None
            if obs_axis:
                cls = sp.csc_matrix if kind == "csc" else sp.csr_matrix
                m = cls((data, indices, indptr), shape=v.shape)
                rf = rows_sparse(kind, m, indices.dtype, indptr.dtype, square)
            self.d.add(path, e, rf)
            return
        arr, fdt = read_node(node)
        value = np.asarray(v)
        if value.dtype.names is not None or (arr.dtype.names is not None):
            return self.recarray(path, value, node)
        if is_string_dtype(arr.dtype):
            vals = decode_all(arr)
            check(vals == [to_str(x) for x in value.reshape(-1)], f"{path} strings")
            self.d.add(path, e_strings(vals, fdt, list(value.shape)),
                       rows_strings(vals) if obs_axis else None)
            return
        check(numbers_equal(arr, value), f"{path} values")
        e = e_array(arr, fdt)
        if value.dtype != arr.dtype and dtype_str(value.dtype) != e["dtype"]:
            e["presented_dtype"] = dtype_str(value.dtype)
        self.d.add(path, e, rows_array(arr) if obs_axis else None)

    def recarray(self, path, value, node):
        arr, _ = read_node(node)
        fields, fsha, cols = [], {}, []
        for name in arr.dtype.names:
            col = arr[name]
            if is_string_dtype(arr.dtype.fields[name][0]):
                vals = decode_all(col)
                check(vals == [to_str(x) for x in value[name].reshape(-1)], f"{path}/{name}")
                fields.append({"name": name, "dtype": "str"})
                fsha[name] = sha(canon_strings(vals))
                cols.append(vals)
            else:
                check(numbers_equal(col, value[name]), f"{path}/{name}")
                fields.append({"name": name, "dtype": dtype_str(col.dtype)})
                fsha[name] = sha(canon_numeric(col))
                cols.append(list(col.reshape(len(col), -1)) if col.ndim > 1 else list(col))
        hd = [[jval(c[i]) if not isinstance(c[i], np.ndarray) else [jval(x) for x in c[i]]
               for c in cols] for i in range(min(HEAD, len(arr)))]
        self.d.add(path, entry("rec-array", None, arr.shape, None, hd, fields=fields,
                               field_sha256=fsha))

    def column(self, path, s, node, obs_axis):
        dt = s.dtype
        if isinstance(dt, pd.CategoricalDtype):
            codes_node = node["codes"] if isinstance(node, h5py.Group) else node
            codes, fdt = read_node(codes_node)
            check(numbers_equal(codes.astype(np.int64), s.cat.codes.to_numpy().astype(np.int64)),
                  f"{path} codes")
            cats = s.cat.categories
            cat_values = cats.to_numpy()
            if isinstance(node, h5py.Group) and "categories" in node:
                fc, _ = read_node(node["categories"])
                if not is_string_dtype(fc.dtype):
                    cat_values = fc
            e = e_categorical(codes, list(cat_values), s.cat.ordered)
            if fdt != e["codes_dtype"]:
                e["file_dtype"] = fdt
            self.d.add(path, e, rows_categorical(codes) if obs_axis else None)
            return
        if isinstance(s.array, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):
            if not isinstance(node, h5py.Group):
                raise RefError(f"{path}: nullable in the model but not a group in the file")
            values, _ = read_node(node["values"])
            mask = read_node(node["mask"])[0] if "mask" in node else None
            arr = s.array
            check(numbers_equal(np.asarray(arr.isna()), mask if mask is not None
                                else np.zeros(len(values), bool)), f"{path} mask")
            kind = "boolean" if isinstance(s.array, pd.arrays.BooleanArray) else "integer"
            self.d.add(path, e_nullable(kind, values, mask),
                       rows_nullable(values, mask) if obs_axis else None)
            return
        arr, fdt = read_node(node)
        if is_string_dtype(arr.dtype):
            vals = decode_all(arr)
            check(vals == [to_str(x) for x in s.tolist()], f"{path} strings")
            self.d.add(path, e_strings(vals, fdt), rows_strings(vals) if obs_axis else None)
            return
        arr = np.asarray(arr)
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        check(numbers_equal(arr, s.to_numpy()), f"{path} values")
        self.d.add(path, e_array(arr, fdt), rows_array(arr) if obs_axis else None)

    def dataframe(self, path, df, node, obs_axis):
        if isinstance(node, h5py.Group):
            index_key = node.attrs.get("_index", "_index")
            index_key = to_str(index_key)
            index_node = node[index_key]
            col_node = lambda c: node[c]  # noqa: E731
        elif isinstance(node, h5py.Dataset) and node.dtype.names:
            index_key = node.dtype.names[0]
            index_node = Field(node, index_key)
            col_node = lambda c: Field(node, c)  # noqa: E731
        else:
            raise RefError(f"{path}: dataframe in the model but not a group/compound in the file")
        self.d.add(path, e_dataframe(df.columns, df.index.name, index_key, len(df)))
        arr, fdt = read_node(index_node)
        vals = decode_all(arr)
        check(vals == [str(x) for x in df.index], f"{path} index")
        self.d.add(f"{path}/_index", e_strings(vals, fdt), rows_strings(vals) if obs_axis else None)
        for c in df.columns:
            self.column(f"{path}/{c}", df[c], col_node(c), obs_axis)

    def scalar(self, path, value, node):
        arr, fdt = read_node(node)
        if isinstance(value, (str, bytes, np.str_, np.bytes_)):
            s = to_str(value)
            check(to_str(np.asarray(arr).reshape(-1)[0]) == s, f"{path} string scalar")
            e = entry("scalar", "str", [], sha(canon_strings([s])), [s])
            if fdt:
                e["file_dtype"] = fdt
        else:
            a = np.asarray(arr)
            check(numbers_equal(a.reshape(-1)[0], np.asarray(value)), f"{path} scalar")
            e = entry("scalar", dtype_str(a.dtype), [], sha(canon_numeric(a.reshape(-1)[:1])),
                      [jval(a.reshape(-1)[0])])
        if np.shape(arr) != ():
            e["file_shape"] = list(np.shape(arr))
        self.d.add(path, e)

    def uns(self, path, value, node):
        if isinstance(value, dict) or (hasattr(value, "keys") and not isinstance(value, pd.DataFrame)):
            keys = list(value.keys())
            self.d.add(path, entry("dict", None, None, None, None, keys=[str(k) for k in keys]))
            for k in keys:
                self.uns(f"{path}/{k}", value[k], self.node(f"{path}/{k}"))
            return
        if isinstance(value, pd.DataFrame) or sp.issparse(value):
            return self.matrix(path, value, node, obs_axis=False)
        if isinstance(value, pd.Categorical):
            return self.column(path, pd.Series(value), node, obs_axis=False)
        if isinstance(value, pd.api.extensions.ExtensionArray):
            return self.column(path, pd.Series(value), node, obs_axis=False)
        if isinstance(value, np.ndarray):
            return self.matrix(path, value, node, obs_axis=False)
        return self.scalar(path, value, node)

    def run(self):
        a = self.a
        if a.X is not None:
            self.matrix("X", a.X, self.node("X"), True)
        for k in a.layers.keys():
            if k is None:
                continue  # newer anndata (0.13) lists X itself as layers[None]
            self.matrix(f"layers/{k}", a.layers[k], self.node(f"layers/{k}"), True)
        self.dataframe("obs", a.obs, self.node("obs"), True)
        self.dataframe("var", a.var, self.node("var"), False)
        for attr, obs_axis in (("obsm", True), ("varm", False), ("obsp", True), ("varp", False)):
            m = getattr(a, attr)
            for k in m.keys():
                self.matrix(f"{attr}/{k}", m[k], self.node(f"{attr}/{k}"), obs_axis,
                            square=(attr == "obsp"))
        if a.raw is not None:
            self.matrix("raw/X", a.raw.X, self.node("raw/X"), True)
            self.dataframe("raw/var", a.raw.var, self.node("raw/var"), False)
            for k in a.raw.varm.keys():
                self.matrix(f"raw/varm/{k}", a.raw.varm[k], self.node(f"raw/varm/{k}"), False)
        uns_node = self.get("uns")
        if uns_node is not None or len(a.uns):
            self.uns("uns", dict(a.uns), uns_node)
        out = {"format": "h5ad", "n_obs": int(a.n_obs), "n_vars": int(a.n_vars),
               "generation": self.generation, "elements": self.d.elements}
        return out


# --------------------------------------------------------------------------------------
# loom
# --------------------------------------------------------------------------------------

def coo_to_csr(g, n):
    a = np.asarray(g["a"][()])
    b = np.asarray(g["b"][()])
    w = np.asarray(g["w"][()])
    if a.dtype.kind == "f":
        check(np.all(a == np.floor(a)) and np.all(b == np.floor(b)), f"{g.name} a/b integral")
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    if len(a) and (a.min() < 0 or b.min() < 0 or a.max() >= n or b.max() >= n):
        raise RefError(f"{g.name}: a/b outside 0..{n - 1}")
    m = sp.coo_matrix((w, (a, b)), shape=(n, n)).tocsr()
    m.sum_duplicates()
    m.sort_indices()
    it = index_dtype_for(n, m.nnz)
    return sp.csr_matrix((m.data.astype(w.dtype), m.indices.astype(it), m.indptr.astype(it)), shape=(n, n))


class Loom:
    def __init__(self, path, f):
        self.f = f
        self.d = Dump()

    def axis(self, name, group, idx_name, n, obs_axis):
        from loompy.normalize import materialize_attr_values
        attrs = {k: group[k] for k in group.keys()} if group is not None else {}
        cols, mats = [], []
        for k in sorted(attrs):
            ds = attrs[k]
            if not isinstance(ds, h5py.Dataset):
                continue
            if ds.ndim > 1 and ds.shape[1] > 1:
                mats.append(k)
            else:
                cols.append(k)
        index_key = idx_name if idx_name in cols else None
        columns = [c for c in cols if c != index_key]
        self.d.add(name, e_dataframe(columns, None, index_key, n))
        if index_key is not None:
            vals = decode_all(materialize_attr_values(attrs[index_key][()]))
            e = e_strings(vals, file_dtype_desc(attrs[index_key].dtype, attrs[index_key].id.get_type()))
        else:
            vals = [str(i) for i in range(n)]
            e = e_strings(vals)
            e["synthesized"] = True
        self.d.add(f"{name}/_index", e, rows_strings(vals) if obs_axis else None)
        for c in columns:
            ds = attrs[c]
            raw = ds[()]
            if raw.ndim == 2:
                raw = raw[:, 0]
            fdt = file_dtype_desc(ds.dtype, ds.id.get_type())
            if is_string_dtype(raw.dtype):
                vals = decode_all(materialize_attr_values(raw))
                self.d.add(f"{name}/{c}", e_strings(vals, fdt), rows_strings(vals) if obs_axis else None)
            else:
                self.d.add(f"{name}/{c}", e_array(raw, fdt), rows_array(raw) if obs_axis else None)
        mname = "obsm" if name == "obs" else "varm"
        for k in mats:
            raw = attrs[k][()]
            if is_string_dtype(raw.dtype):
                vals = decode_all(materialize_attr_values(raw.reshape(-1)))
                self.d.add(f"{mname}/{k}", e_strings(vals, None, list(raw.shape)),
                           None)
            else:
                self.d.add(f"{mname}/{k}", e_array(raw), rows_array(raw) if obs_axis else None)

    def run(self):
        f = self.f
        M = f["matrix"]
        n_genes, n_cells = M.shape
        X = np.ascontiguousarray(M[()].T)
        self.d.add("X", e_array(X, file_dtype_desc(M.dtype, M.id.get_type())), rows_array(X))
        if "layers" in f:
            for k in sorted(f["layers"].keys()):
                L = f["layers"][k]
                arr = np.ascontiguousarray(L[()].T)
                self.d.add(f"layers/{k}", e_array(arr, file_dtype_desc(L.dtype, L.id.get_type())),
                           rows_array(arr))
        self.axis("obs", f.get("col_attrs"), "CellID", n_cells, True)
        self.axis("var", f.get("row_attrs"), "Gene", n_genes, False)
        for gname, pname, n, obs_axis in (("col_graphs", "obsp", n_cells, True),
                                          ("row_graphs", "varp", n_genes, False)):
            if gname not in f:
                continue
            for k in sorted(f[gname].keys()):
                m = coo_to_csr(f[gname][k], n)
                self.d.add(f"{pname}/{k}", e_sparse("csr", m.shape, m.data, m.indices, m.indptr),
                           rows_sparse("csr", m, m.indices.dtype, m.indptr.dtype, True) if obs_axis else None)
        return {"format": "loom", "n_obs": int(n_cells), "n_vars": int(n_genes),
                "elements": self.d.elements}


# --------------------------------------------------------------------------------------
# 10x
# --------------------------------------------------------------------------------------

TENX_KEYS = ("barcodes", "data", "indices", "indptr", "shape")


class TenX:
    def __init__(self, path, f, version, genome=None):
        self.f, self.version = f, version
        self.d = Dump()
        self.genome = genome

    def strings(self, path, ds, obs_axis):
        vals = decode_all(ds[()])
        self.d.add(path, e_strings(vals, file_dtype_desc(ds.dtype, ds.id.get_type())),
                   rows_strings(vals) if obs_axis else None)
        return vals

    def column(self, path, ds, obs_axis):
        if is_string_dtype(ds.dtype):
            return self.strings(path, ds, obs_axis)
        arr = ds[()]
        self.d.add(path, e_array(arr, file_dtype_desc(ds.dtype, ds.id.get_type())),
                   rows_array(arr) if obs_axis else None)

    def run(self):
        out = {"format": f"10x-{self.version}"}
        if self.version == "v3":
            g = self.f["matrix"]
        else:
            genomes = tenx_v2_genomes(self.f)
            name = self.genome or genomes[0]
            if name not in genomes:
                raise RefError(f"genome {name!r} not in the file (has {', '.join(genomes)})")
            g = self.f[name]
            out.update(genome=name, genomes=genomes)
        n_features, n_cells = (int(x) for x in g["shape"][()][:2])
        data, indices, indptr = g["data"][()], g["indices"][()], g["indptr"][()]
        validate_sparse("X", "csr", (n_cells, n_features), data, indices, indptr)
        m = sp.csr_matrix((data, indices, indptr), shape=(n_cells, n_features))
        self.d.add("X", e_sparse("csr", (n_cells, n_features), data, indices, indptr),
                   rows_sparse("csr", m, indices.dtype, indptr.dtype))
        obs_cols = []
        if self.version == "v3":
            obs_cols = [k for k in sorted(g.keys()) if k not in TENX_KEYS and k != "features"
                        and isinstance(g[k], h5py.Dataset) and g[k].shape == (n_cells,)]
        self.d.add("obs", e_dataframe(obs_cols, None, "barcodes", n_cells))
        self.strings("obs/_index", g["barcodes"], True)
        for k in obs_cols:
            self.column(f"obs/{k}", g[k], True)
        if self.version == "v3":
            fg = g["features"]
            named = [("gene_ids", "id"), ("feature_types", "feature_type"), ("genome", "genome")]
            named = [(c, k) for c, k in named if k in fg]
            others = [k for k in sorted(fg.keys()) if k not in ("_all_tag_keys", "id", "name",
                      "feature_type", "genome") and isinstance(fg[k], h5py.Dataset)
                      and fg[k].shape == (n_features,)]
            cols = [c for c, _ in named] + others
            self.d.add("var", e_dataframe(cols, None, "features/name", n_features))
            self.strings("var/_index", fg["name"], False)
            for c, k in named:
                self.column(f"var/{c}", fg[k], False)
            for k in others:
                self.column(f"var/{k}", fg[k], False)
        else:
            self.d.add("var", e_dataframe(["gene_ids"], None, "gene_names", n_features))
            self.strings("var/_index", g["gene_names"], False)
            self.column("var/gene_ids", g["genes"], False)
        out.update(n_obs=n_cells, n_vars=n_features, elements=self.d.elements)
        return out


def tenx_v2_genomes(f):
    return [k for k in sorted(f.keys()) if isinstance(f[k], h5py.Group)
            and all(x in f[k] for x in TENX_KEYS + ("genes",))]


# --------------------------------------------------------------------------------------

def one_line(exc):
    return " ".join(str(exc).split())[:300]


def detect(f):
    if isinstance(f.get("matrix"), h5py.Dataset) and "row_attrs" in f and "col_attrs" in f:
        return "loom"
    if "matrix" in f and isinstance(f["matrix"], h5py.Group) and all(k in f["matrix"] for k in TENX_KEYS) \
            and "features" in f["matrix"]:
        return "10x-v3"
    if tenx_v2_genomes(f):
        return "10x-v2"
    if "X" in f or "obs" in f or "var" in f or f.attrs.get("encoding-type") == "anndata":
        return "h5ad"
    raise RefError("not a single-cell HDF5 file (no h5ad, loom or 10x layout)")


def dump(path, rows=None, genome=None, reader="h5py"):
    """The reference for one file; reader "anndata" has anndata read an h5ad file
    rather than model_h5py (loom and 10x files are read the same way either way)."""
    try:
        f = h5py.File(path, "r")
    except Exception as exc:  # noqa: BLE001
        raise RefError(f"cannot open as HDF5: {one_line(exc)}")
    with f:
        fmt = detect(f)
        try:
            if fmt == "h5ad":
                model = model_anndata(path) if reader == "anndata" else model_h5py(f)
                dumper = H5ad(path, f, model)
            elif fmt == "loom":
                dumper = Loom(path, f)
            else:
                dumper = TenX(path, f, fmt[4:], genome)
            out = dumper.run()
        except RefError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise RefError(f"{type(exc).__name__}: {one_line(exc)}")
        if rows == "test":
            rows = test_rows(out["n_obs"]) or None
        if rows is not None:
            n = out["n_obs"]
            bad = [r for r in rows if not 0 <= r < n]
            if bad:
                raise RefError(f"--rows: {bad[0]} is outside 0..{n - 1}")
            out["rows"] = dumper.d.rows(rows)
    return out


def test_rows(n):
    """The rows tests/test_source.c gathers from a file of n cells (its rows_for): a run of
    neighbours, every step-th row and the last."""
    step = n // 600 if n // 600 > 3 else 3
    return [r for r in range(n) if r % step == 0 or r == n - 1 or 7 < r < 12]


def differences(a, b, where="", out=None, limit=20):
    """Where two JSON values differ, as 'path: this vs that' lines (at most limit)."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(dict.fromkeys(list(a) + list(b))):
            if k not in a or k not in b:
                out.append(f"{where}/{k}: only in the {'h5py' if k in a else 'anndata'} reading")
            elif a[k] != b[k]:
                differences(a[k], b[k], f"{where}/{k}", out, limit)
            if len(out) >= limit:
                break
    elif a != b:
        out.append(f"{where}: h5py {json.dumps(a)[:200]} vs anndata {json.dumps(b)[:200]}")
    return out


def agree_with_anndata(files):
    """For each h5ad file, whether the dump from model_h5py equals the dump from anndata's
    own read_h5ad (whole, and the rows tests/test_source.c gathers): one JSON line each,
    after a first line naming the anndata version, or saying why there is none."""
    import optional_modules  # tests/source/optional_modules.py
    status = optional_modules.missing("anndata", "python3-anndata")
    if status is not None:
        kind, reason = status
        print(json.dumps({kind: reason}, ensure_ascii=False))
        return 0 if kind == "skip" else 2
    import anndata
    print(json.dumps({"anndata": anndata.__version__}))
    for path in files:
        outs = {}
        for reader in ("h5py", "anndata"):
            try:
                outs[reader] = dump(path, "test", reader=reader)
            except RefError as exc:
                outs[reader] = {"error": str(exc)}
        h, a = outs["h5py"], outs["anndata"]
        result = {"file": path}
        if "error" in h or "error" in a:
            # Both refusing a file is agreement; the reasons are worded differently.
            result.update(agree=("error" in h) == ("error" in a), h5py_error=h.get("error"),
                          anndata_error=a.get("error"))
        else:
            result.update(agree=h == a, differences=differences(h, a))
        print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0


def main(argv):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="+")
    p.add_argument("--rows", help="comma-separated 0-based cell positions")
    p.add_argument("--genome", help="10x v2: the genome group (default: first in name order)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.add_argument("--agree-with-anndata", action="store_true",
                   help="check that the h5py and the anndata readings of each h5ad file agree")
    args = p.parse_args(argv)
    if args.agree_with_anndata:
        return agree_with_anndata(args.file)
    if len(args.file) != 1:
        p.error("one FILE (several only with --agree-with-anndata)")
    rows = None
    if args.rows is not None:
        try:
            rows = [int(x) for x in args.rows.split(",") if x.strip() != ""]
        except ValueError:
            print(json.dumps({"error": "--rows takes comma-separated integers"}))
            return 2
    try:
        out = dump(args.file[0], rows, args.genome)
    except RefError as exc:
        print(json.dumps({"error": str(exc)}, ensure_ascii=False))
        return 2
    text = json.dumps(out, ensure_ascii=False, allow_nan=False, indent=1 if args.pretty else None)
    sys.stdout.buffer.write(text.encode("utf-8") + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
