#!/usr/bin/python3
"""Reading AnnData elements as anndata 0.8 reads them, without anndata: the
one implementation that tests/integration/readers.py (read_h5ad, read_zarr,
building a Data) and tests/source/dump_reference.py (model_h5py, building its
Model) both use, so that the tests run where anndata is not packaged
(Debian 13).

It follows anndata 0.8.0's _io/specs/methods.py, _io/h5ad.py, _io/zarr.py and
compat/ helpers operation for operation (the same numpy and pandas calls), so
that where values are odd the same conversions and the same refusals happen:

- read_elem: each element's "encoding-type" and "encoding-version" attributes
  choose its reader, exactly the (group or array, type, version) pairs anndata
  0.8.0 registers (READERS); any other pair is an element anndata 0.8 cannot
  read, and raises ReadError. Both h5py nodes and zarr-python (2 or 3) nodes
  are read; zarr is only touched through nodes the caller opened, so this
  module imports neither zarr nor anndata (dump_reference.py runs once per
  file and per test, and an anndata import costs more than the reading).
- Elements without encoding attributes (0.6/0.7 files): read_dataset (a
  one-element string array as a str, compound datasets with fixed-length
  strings widened and vlen UTF-8 fields decoded), h5sparse groups, dicts.
- Dataframes: 0.2.0, 0.1.0 (categoricals named by an object reference) and the
  pre-0.7 compound dataset (read_df, for obs / var / raw.var).
- The read-time fixes of read_h5ad / read_zarr before the AnnData constructor:
  categories kept in uns/<col>_categories (clean_uns) and the legacy
  raw.X / raw.var / raw.varm (read_legacy_raw); read_h5ad_elements gives the
  keyword arguments read_h5ad passes to AnnData(...).

The caller's constructor steps (a str index, obsm recarrays split,
uns['neighbors'] matrices moved to obsp, multicolumn keys) stay with the
object each caller builds.
"""
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp


class ReadError(ValueError):
    """An element anndata 0.8 would refuse to read, with the reason."""


_MISSING = object()


# ---- nodes: h5py or zarr-python 2 / 3 -----------------------------------------------------

def is_h5(node):
    return isinstance(node, (h5py.Group, h5py.Dataset))


def is_group(node):
    """An h5py or zarr group (a zarr node is only ever given by a caller
    that has imported zarr already)."""
    if is_h5(node):
        return isinstance(node, h5py.Group)
    import zarr
    return isinstance(node, zarr.Group)


def attrs(node):
    """A zarr node's attributes as a plain dict (zarr 3 keeps .attrs in its
    own class, with asdict())."""
    return dict(node.attrs.asdict()) if hasattr(node.attrs, "asdict") else dict(node.attrs)


def read(array):
    """Every value of a zarr array; a 0-d array's value as a numpy scalar
    (zarr 2's array[()]; zarr 3 returns a 0-d array there)."""
    value = array[...]
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def values(node):
    """node[()] as anndata reads it: h5py's or zarr's values (a 0-d array as a scalar)."""
    return node[()] if is_h5(node) else read(node)


def to_str(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value


def read_attr(node, name, default=_MISSING):
    """anndata's _read_attr: HDF5 fixed-length string attributes come as
    bytes from h5py and are decoded; zarr attributes are JSON already. A
    missing attribute is default, or a KeyError without one."""
    if not is_h5(node):
        found = attrs(node)
        if name not in found and default is not _MISSING:
            return default
        return found[name]
    if name not in node.attrs and default is not _MISSING:
        return default
    value = node.attrs[name]
    identity = node.attrs.get_id(name)
    string = h5py.check_string_dtype(identity.dtype)
    if string is None or string.length is None:
        return value
    if len(identity.shape) == 0:
        return value.decode("utf-8")
    return [s.decode("utf-8") if isinstance(s, bytes) else s for s in value]


def encoding_of(node):
    return (to_str(read_attr(node, "encoding-type", "")), to_str(read_attr(node, "encoding-version", "")))


# ---- compat helpers -----------------------------------------------------------------------

def from_fixed_length_strings(value):
    """anndata.compat._from_fixed_length_strings: fixed-length byte fields as
    unicode, variable-length string fields as objects."""
    new_dtype = []
    for dt in value.dtype.descr:
        dt_list = list(dt)
        dt_type = dt[1]
        is_annotated = isinstance(dt_type, tuple)
        if is_annotated:
            dt_type = dt_type[0]
        if issubclass(np.dtype(dt_type).type, np.bytes_):
            dt_list[1] = f"U{int(dt_type[2:])}"
        elif is_annotated or np.issubdtype(np.dtype(dt_type), np.str_):
            dt_list[1] = "O"
        new_dtype.append(tuple(dt_list))
    return value.astype(new_dtype)


def decode_structured_array(arr, dtype):
    """anndata.compat._decode_structured_array: h5py 3 reads vlen UTF-8
    fields of a compound as bytes."""
    decode = np.frompyfunc(lambda x: x.decode("utf-8"), 1, 1)
    for k, (dt, _) in dtype.fields.items():
        si = h5py.check_string_dtype(dt)
        if si is not None and si.encoding == "utf-8":
            decode(arr[k], out=arr[k])
    return arr


# ---- readers, by encoding -----------------------------------------------------------------

def read_dataset(node):
    """A dataset without encoding attributes (anndata 0.8's h5ad.read_dataset
    for HDF5, zarr.read_dataset for Zarr)."""
    if is_h5(node):
        si = h5py.check_string_dtype(node.dtype)
        value = node.asstr()[()] if si is not None and si.encoding == "utf-8" else node[()]
        if not hasattr(value, "dtype"):
            return value
        if issubclass(value.dtype.type, np.bytes_):
            value = value.astype(str)
            # Old files hold a string as a one-element array.
            if len(value) == 1:
                return value[0]
        elif len(value.dtype.descr) > 1:
            dtype = value.dtype
            value = decode_structured_array(from_fixed_length_strings(value), dtype)
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
        value = from_fixed_length_strings(value)
    if value.shape == ():
        value = value[()]
    return value


SPARSE_CLASSES = {"csr": sp.csr_matrix, "csc": sp.csc_matrix}


def read_sparse(group):
    """A CSR/CSC group, encoded (0.7+) or h5sparse (0.6): SparseDataset.to_memory."""
    if "h5sparse_format" in group.attrs:
        fmt = to_str(read_attr(group, "h5sparse_format"))
    else:
        fmt = to_str(read_attr(group, "encoding-type")).replace("_matrix", "")
    if fmt not in SPARSE_CLASSES:
        raise ReadError(f"{group.name}: sparse format {fmt!r} is not csr or csc")
    shape = read_attr(group, "h5sparse_shape", None)
    shape = tuple(int(s) for s in (read_attr(group, "shape") if shape is None else shape))
    data, indices, indptr = (values(group[k]) for k in ("data", "indices", "indptr"))
    matrix = SPARSE_CLASSES[fmt](shape, dtype=data.dtype)
    matrix.data, matrix.indices, matrix.indptr = data, indices, indptr
    return matrix


def read_mapping(group):
    return {k: read_elem(group[k]) for k in group.keys()}


def read_basic(node):
    """An element without encoding attributes (anndata 0.6/0.7 files)."""
    if is_group(node):
        if "h5sparse_format" in node.attrs:
            return read_sparse(node)
        return read_mapping(node)
    return read_dataset(node)


def read_string_array(node):
    """h5py's asstr (vlen and fixed-length alike); zarr's values are str already."""
    return node.asstr()[()] if is_h5(node) else read(node)


def read_string(node):
    return node.asstr()[()] if is_h5(node) else str(read(node))


def read_recarray(node):
    value = node[()]
    dtype = value.dtype
    value = from_fixed_length_strings(value)
    # Only h5py 3 reads vlen UTF-8 fields as bytes (anndata's H5PY_V3 branch).
    return decode_structured_array(value, dtype) if is_h5(node) else value


def _read_dataframe(group, read_column):
    columns = [to_str(c) for c in read_attr(group, "column-order")]
    idx_key = to_str(read_attr(group, "_index"))
    df = pd.DataFrame({k: read_column(group[k]) for k in columns},
                      index=read_column(group[idx_key]), columns=list(columns))
    if idx_key != "_index":
        df.index.name = idx_key
    return df


def read_dataframe_020(group):
    return _read_dataframe(group, read_elem)


def read_series(node):
    """A dataframe 0.1.0 column: codes naming their categories by an object
    reference (attribute "categories"), or values."""
    if "categories" in node.attrs:
        if not is_h5(node):
            # A Zarr store gets its 0.1.0 dataframes from no writer zarrmount
            # or the tests have; its object references would need the store's
            # own resolution, which zarr 2 and 3 spell differently.
            raise ReadError(f"{node.name}: a dataframe 0.1.0 categorical in a Zarr store (zarrmount "
                            "serves dataframe 0.2.0 only)")
        categories_node = node.parent[read_attr(node, "categories")]
        categories = read_elem(categories_node)
        ordered = bool(read_attr(categories_node, "ordered", False))
        return pd.Categorical.from_codes(read_elem(node), categories, ordered=ordered)
    return read_elem(node)


def read_dataframe_010(group):
    """anndata 0.8's read_dataframe_0_1_0: the 0.2.0 layout, columns by read_series."""
    return _read_dataframe(group, read_series)


def read_dataframe_legacy(node):
    """A pre-0.7 dataframe: one compound dataset, the index its first field."""
    value = node[()]
    if is_h5(node):
        df = pd.DataFrame(decode_structured_array(from_fixed_length_strings(value), node.dtype))
    else:
        df = pd.DataFrame(from_fixed_length_strings(value))
    df.set_index(df.columns[0], inplace=True)
    return df


def read_categorical(group):
    return pd.Categorical.from_codes(codes=read_elem(group["codes"]),
                                     categories=read_elem(group["categories"]),
                                     ordered=read_attr(group, "ordered"))


def read_nullable(cls):
    def reader(group):
        if "mask" in group:
            return cls(read_elem(group["values"]), mask=read_elem(group["mask"]))
        return pd.array(read_elem(group["values"]))
    return reader


# The (group or array, encoding-type, encoding-version) readers anndata 0.8.0
# registers for HDF5 and Zarr alike; any other pair is an element anndata 0.8
# cannot read. ("anndata", "0.1.0") and ("raw", "0.1.0") groups are read into
# the caller's own AnnData object: the caller registers them (register).
READERS = {
    (True, "", ""): read_basic,
    (False, "", ""): read_basic,
    (True, "dict", "0.1.0"): read_mapping,
    (False, "array", "0.2.0"): values,
    (False, "string-array", "0.2.0"): read_string_array,
    (False, "rec-array", "0.2.0"): read_recarray,
    (True, "csr_matrix", "0.1.0"): read_sparse,
    (True, "csc_matrix", "0.1.0"): read_sparse,
    (True, "dataframe", "0.2.0"): read_dataframe_020,
    (True, "dataframe", "0.1.0"): read_dataframe_010,
    (True, "categorical", "0.2.0"): read_categorical,
    (True, "nullable-integer", "0.1.0"): read_nullable(pd.arrays.IntegerArray),
    (True, "nullable-boolean", "0.1.0"): read_nullable(pd.arrays.BooleanArray),
    (False, "numeric-scalar", "0.2.0"): values,
    (False, "string", "0.2.0"): read_string,
    (False, "bytes", "0.2.0"): values,
}


def register(group, kind, version, reader):
    """Adds a reader for (group or array, encoding-type, encoding-version)
    (anndata's _REGISTRY.register_read)."""
    READERS[(group, kind, version)] = reader


def read_elem(node):
    """One element, by its encoding (anndata 0.8's read_elem)."""
    kind, version = encoding_of(node)
    group = is_group(node)
    reader = READERS.get((group, kind, version))
    if reader is None:
        what = "group" if group else "array"
        raise ReadError(f"{node.name}: no reader for a {what} with encoding-type {kind!r} "
                        f"version {version!r} (anndata 0.8 has none either)")
    return reader(node)


def read_df(node):
    """obs, var, raw.var (anndata's h5ad.read_dataframe): a group by its
    encoding, a compound dataset as before 0.7."""
    if is_group(node):
        return read_elem(node)
    return read_dataframe_legacy(node)


# ---- read_h5ad's and read_zarr's fixes before AnnData(...) --------------------------------

def clean_uns(d):
    """anndata.compat._clean_uns: categories that 0.6 files keep in
    uns/<column>_categories go back to obs/var."""
    k_to_delete = set()
    for cats_name, cats in d.get("uns", {}).items():
        if not cats_name.endswith("_categories"):
            continue
        name = cats_name.replace("_categories", "")
        if isinstance(cats, (str, int)):
            cats = [cats]
        for ann in ("obs", "var"):
            if name not in d[ann]:
                continue
            codes = d[ann][name].values
            # The axis the categories were for: the one whose codes fit them.
            if not np.all(codes < len(cats)):
                continue
            d[ann][name] = pd.Categorical.from_codes(codes, cats)
            k_to_delete.add(cats_name)
    for cats_name in k_to_delete:
        del d["uns"][cats_name]


def read_legacy_raw(f, modern):
    """anndata's _read_legacy_raw: raw.X, raw.var and raw.varm of pre-0.7
    files, refused beside a current raw."""
    if modern:
        if any(k.startswith("raw.") for k in f):
            raise ReadError("the file has both legacy raw.* and current raw elements")
        return modern
    raw = {}
    if "raw.X" in f:
        raw["X"] = read_elem(f["raw.X"])
    if "raw.var" in f:
        raw["var"] = read_df(f["raw.var"])
    if "raw.varm" in f:
        raw["varm"] = read_elem(f["raw.varm"])
    return raw


def read_h5ad_elements(f):
    """(d, raw) for an open h5py.File, as anndata 0.8's read_h5ad gathers
    them before AnnData(**d, raw=raw, dtype=...): every top-level element but
    raw by its encoding (obs and var by read_df), raw's X, var and varm
    (current or legacy; {} for none), and uns' categories moved (clean_uns).
    An unknown top-level key is left in d, for the constructor to refuse."""
    d = {}
    for k in f.keys():
        if k == "raw" or k.startswith("raw."):
            continue
        d[k] = read_df(f[k]) if k in ("obs", "var") else read_elem(f[k])
    raw = {}
    if "raw/X" in f:
        raw["X"] = read_elem(f["raw/X"])
    for k in ("var", "varm"):
        if f"raw/{k}" in f:
            raw[k] = read_elem(f[f"raw/{k}"])
    raw = read_legacy_raw(f, raw)
    clean_uns(d)
    return d, raw
