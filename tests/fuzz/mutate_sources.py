#!/usr/bin/python3
"""Malformed but HDF5-valid single-cell files: mutated copies of the real fixtures.

    /usr/bin/python3 tests/fuzz/mutate_sources.py --seed S --count N OUT_DIR
    /usr/bin/python3 tests/fuzz/mutate_sources.py --list          (the mutation kinds)

Writes N files into OUT_DIR and OUT_DIR/mutations.json, one record a file:

    {"file": NAME, "base": FIXTURE, "mutation": KIND, "target": HDF5 PATH,
     "element": MODEL PATH, "expect": "error" | "refuse" | "ok" | "same" | "any",
     "detail": TEXT}

Each file is a copy of one fixture of fixtures/sources/ (h5ad of every anndata encoding,
loom, 10x v2 and v3) with one thing changed through h5py, so that HDF5 still reads it:
an attribute (encoding-type/-version, shape, h5sparse_format, column-order, _index, loom and
10x attributes) made wrong, missing or of another type; a dataset given another length, no
values, another rank; another dtype (int, float, string, bool, compound, big-endian, 1-byte
ints); categorical codes out of range, negative, longer or shorter than obs; sparse indptr
not monotone, not starting at 0, not ending at nnz, too long or short, huge or negative;
indices out of range, unsorted, repeated; data and indices of different lengths; loom graphs
and 10x shapes; awkward strings (not UTF-8, NULs, very long); names the reader or the view
uses itself; a valid file of 0, 1 or 2 cells; another chunking and filter pipeline (gzip,
shuffle, lzf, fletcher32, scale-offset, blosc, lz4, bzip2, zstd), or chunks left unwritten
for their fill value. `--list` prints every kind.

"expect" says what a reader must do with it:
  error  the parts now disagree: every read of the element (file/ and full/ views) must fail
         with a message naming it (or the file be refused at open), never serve values;
  ok     still a valid file (only stored differently): file/ and full/ read without errors;
  same   the same values stored another way: every view other than blocks/ (whose block
         size follows the chunk layout) serves the same bytes as the unmutated fixture;
  refuse the file must be refused when it is opened (what the refusal names is free: the
         change made other parts disagree, e.g. a dataframe's index made shorter);
  any    whatever the reader makes of it, short of a crash or a wordless error.

Names say what was changed: "x-csc.X.indptr-not-monotone.seed17-3.h5ad" is the 4th file of
seed 17, x-csc.h5ad with X/indptr made non-monotone. Deterministic: the same seed and count
give byte-identical files (each file's choices come from its own seeded generator, datasets
and groups are written without timestamps and the same calls in the same order). File I of
a run alone: --seed S --first I --count 1 (with the same --bases and --mutations, if any,
which pick among fewer fixtures and kinds): corpus/model/MANIFEST.json says so for each
committed file.

Only Debian's python3-h5py and python3-numpy are needed (hdf5plugin, if present, adds the
blosc/lz4/bzip2 pipelines; tests/source/h5zstd.py the zstd one).
"""

import argparse
import json
import os
import random
import re
import shutil
import sys
import warnings

import numpy as np
import h5py

warnings.simplefilter("ignore")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "fixtures", "sources")

try:  # blosc (32001), lz4 (32004), bzip2 (307) through Debian's plugins
    import hdf5plugin  # noqa: F401

    HAVE_PLUGINS = True
except Exception:  # pragma: no cover - optional
    HAVE_PLUGINS = False
try:
    sys.path.insert(0, os.path.join(ROOT, "tests", "source"))
    import h5zstd  # noqa: E402

    HAVE_ZSTD = bool(h5zstd.register())
except Exception:  # pragma: no cover - optional
    HAVE_ZSTD = False

# The fixtures mutated: (short name, path under fixtures/sources, format). Small ones first:
# the committed corpus is drawn from them.
BASES = [
    ("x-csc", "h5ad/x-csc.h5ad", "h5ad"),
    ("x-dense", "h5ad/x-dense.h5ad", "h5ad"),
    ("no-X", "h5ad/no-X.h5ad", "h5ad"),
    ("empty-nnz", "h5ad/empty-nnz.h5ad", "h5ad"),
    ("full-csr", "h5ad/full-csr.h5ad", "h5ad"),
    ("strings", "h5ad/strings-endian-enum.h5ad", "h5ad"),
    ("csr-chunks-13", "layouts/csr-chunks-13.h5ad", "h5ad"),
    ("shuffle-gzip4", "filters/shuffle-gzip4.h5ad", "h5ad"),
    ("libver-latest", "layouts/libver-latest-chunk-indexes.h5ad", "h5ad"),
    ("ad07-csr", "legacy/anndata-0.7-csr.h5ad", "h5ad"),
    ("ad06-dense", "legacy/anndata-0.6-dense.h5ad", "h5ad"),
    ("ad06-sparse", "legacy/anndata-0.6-sparse.h5ad", "h5ad"),
    ("loom-full", "loom/full.loom", "loom"),
    ("loom-no-ids", "loom/no-ids-int.loom", "loom"),
    ("10x-v3", "10x/v3-two-feature-types.h5", "10x"),
    ("10x-v2", "10x/v2-one-genome.h5", "10x"),
    ("10x-v2-two", "10x/v2-two-genomes.h5", "10x"),
    ("h5mu", "mudata/two-modalities.h5mu", "h5ad"),
]


# ---- Reading a file's structure -------------------------------------------------------

def attr_text(obj, name):
    if name not in obj.attrs:
        return None
    v = obj.attrs[name]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, str):
        return v
    return None


class Structure:
    """What a file holds, as the mutations need it: every dataset and attribute, and the
    single-cell parts (sparse matrices, categoricals, dataframes, ...) with their model
    paths (where zarrmount's element model puts them)."""

    def __init__(self, f, fmt):
        self.fmt = fmt
        self.datasets = []      # HDF5 paths
        self.attributes = []    # (object path, attribute name)
        self.sparse = []        # (group path, "csr"/"csc", shape attribute name or None)
        self.categoricals = []  # (codes dataset path, number of categories, categories path)
        self.dataframes = []    # group paths (anndata >= 0.7)
        self.compounds = []     # compound dataset paths (legacy dataframes, obsm)
        self.nullables = []     # group paths
        self.graphs = []        # loom graph group paths
        self.shape_datasets = []  # 10x shape datasets
        self.n_obs = self.n_vars = None

        def visit(name, obj):
            path = "/" + name
            for a in sorted(obj.attrs.keys()):
                self.attributes.append((path, a))
            if isinstance(obj, h5py.Dataset):
                self.datasets.append(path)
                if obj.dtype.names is not None:
                    self.compounds.append(path)
                return
            keys = set(obj.keys())
            enc = attr_text(obj, "encoding-type")
            if {"data", "indices", "indptr"} <= keys and all(
                    isinstance(obj[k], h5py.Dataset) for k in ("data", "indices", "indptr")):
                if fmt == "10x":
                    self.sparse.append((path, "10x", None))
                elif enc in ("csr_matrix", "csc_matrix"):
                    self.sparse.append((path, enc[:3], "shape"))
                elif attr_text(obj, "h5sparse_format") in ("csr", "csc"):
                    self.sparse.append((path, attr_text(obj, "h5sparse_format"), "h5sparse_shape"))
            if enc == "categorical" and {"codes", "categories"} <= keys:
                self.categoricals.append((path + "/codes", len(obj["categories"]), path + "/categories"))
            if enc == "dataframe":
                self.dataframes.append(path)
            if enc in ("nullable-integer", "nullable-boolean"):
                self.nullables.append(path)
            if fmt == "loom" and {"a", "b", "w"} <= keys:
                self.graphs.append(path)
            if fmt == "10x" and "shape" in keys:
                self.shape_datasets.append(path + "/shape")

        f.visititems(visit)
        for a in sorted(f.attrs.keys()):
            self.attributes.append(("/", a))
        # anndata 0.7: codes with an object reference to their categories.
        for path in self.datasets:
            d = f[path]
            if "categories" in d.attrs and isinstance(d.attrs["categories"], h5py.Reference):
                target = f[d.attrs["categories"]]
                self.categoricals.append((path, len(target), target.name))
        # anndata < 0.7: compound obs/var members with uns/<member>_categories.
        for path in self.compounds:
            if path in ("/obs", "/var", "/raw.var"):
                for m in f[path].dtype.names:
                    cats = "/uns/%s_categories" % m
                    if cats in f and f[path].dtype[m].kind in "iu":
                        self.categoricals.append((path + "#" + m, len(f[cats]), cats))
        if fmt == "h5ad":
            idx = f["obs"]
            self.n_obs = idx.shape[0] if isinstance(idx, h5py.Dataset) else f["obs"][attr_text(idx, "_index") or "_index"].shape[0]
            idx = f["var"]
            self.n_vars = idx.shape[0] if isinstance(idx, h5py.Dataset) else f["var"][attr_text(idx, "_index") or "_index"].shape[0]
        elif fmt == "loom":
            self.n_vars, self.n_obs = f["matrix"].shape
        else:
            shape = f[self.shape_datasets[0]][...] if self.shape_datasets else [0, 0]
            self.n_vars, self.n_obs = int(shape[0]), int(shape[1])

    def model_path(self, h5path):
        """Where the element model puts an HDF5 object (for the messages it must name)."""
        p = h5path.lstrip("/").split("#")[0]
        if self.fmt == "h5ad":
            for old, new in (("raw.X", "raw/X"), ("raw.var", "raw/var"), ("raw.varm", "raw/varm"),
                             ("uns/neighbors/connectivities", "obsp/connectivities"),
                             ("uns/neighbors/distances", "obsp/distances")):
                if p == old or p.startswith(old + "/"):
                    p = new + p[len(old):]
            for suffix in ("/codes", "/categories", "/values", "/mask", "/data", "/indices", "/indptr"):
                if p.endswith(suffix) and "/".join(p.split("/")[:-1]):
                    parent = p[: -len(suffix)]
                    if parent and parent.split("/")[-1] != "uns":
                        return parent
            return p
        if self.fmt == "loom":
            if p == "matrix":
                return "X"
            top, _, rest = p.partition("/")
            top = {"col_attrs": "obs", "row_attrs": "var", "col_graphs": "obsp",
                   "row_graphs": "varp", "layers": "layers"}.get(top, top)
            return top + "/" + rest.split("/")[0] if rest else top
        # 10x: the matrix group is X; barcodes obs, features var.
        last = p.split("/")[-1]
        if last in ("data", "indices", "indptr", "shape") or "/" not in p:
            return "X"
        if last == "barcodes":
            return "obs"
        return "var"


# ---- Writing ---------------------------------------------------------------------------

def dataset_options(d):
    """The creation options of a dataset h5py can write again."""
    opts = {}
    if d.chunks is not None:
        opts["chunks"] = d.chunks
        if d.compression in ("gzip", "lzf"):
            opts["compression"] = d.compression
            if d.compression == "gzip":
                opts["compression_opts"] = d.compression_opts
        opts["shuffle"] = d.shuffle
        opts["fletcher32"] = d.fletcher32
        if d.maxshape != d.shape:
            opts["maxshape"] = tuple(None for _ in d.shape)
    return opts


def replace(f, path, data, keep_layout=True, **options):
    """Replaces a dataset by data (attributes kept; the old one's chunking and filters too,
    where they fit the new shape)."""
    old = f[path]
    attrs = [(k, old.attrs[k]) for k in old.attrs.keys()]
    opts = dataset_options(old) if keep_layout else {}
    data = np.asarray(data) if not isinstance(data, np.ndarray) else data
    if "chunks" in opts:
        if data.ndim == 0 or len(opts["chunks"]) != data.ndim:
            opts = {}
        else:
            opts["chunks"] = tuple(max(1, min(c, max(s, 1))) if s else c
                                   for c, s in zip(opts["chunks"], data.shape))
            if data.dtype.kind in "OSUV" or data.dtype.names is not None:
                opts.pop("shuffle", None)
            if data.dtype.kind in "OU":
                opts.pop("compression", None)
                opts.pop("compression_opts", None)
    opts.update(options)
    del f[path]
    if data.dtype.kind == "U":
        data = data.astype(object)
    if data.dtype.kind == "O":
        opts.setdefault("dtype", h5py.string_dtype("utf-8"))
    try:
        f.create_dataset(path, data=data, track_times=False, **opts)
    except (ValueError, TypeError):
        for k in ("chunks", "compression", "compression_opts", "shuffle", "fletcher32", "maxshape"):
            opts.pop(k, None)
        f.create_dataset(path, data=data, track_times=False, **opts)
    for k, v in attrs:
        try:
            f[path].attrs[k] = v
        except Exception:
            pass


def read_values(f, path):
    """A dataset's values (or a compound member's, for "PATH#member")."""
    if "#" in path:
        p, m = path.split("#")
        return f[p][m]
    return f[path][()]


def write_values(f, path, values, **options):
    if "#" in path:
        p, m = path.split("#")
        old = f[p][()]
        dt = []
        for name in old.dtype.names:
            if name == m:
                v = np.asarray(values)
                dt.append((name, v.dtype, v.shape[1:]) if v.ndim > 1 else (name, v.dtype))
            else:
                dt.append((name, old.dtype[name]))
        new = np.zeros(len(old), dtype=dt)
        for name in old.dtype.names:
            new[name] = values if name == m else old[name]
        replace(f, p, new)
    else:
        replace(f, path, values, **options)


def require_group(parent, name):
    """A group, made without timestamps (a file of the newest format would record the time
    of its making otherwise, and two runs would differ)."""
    if name in parent:
        return parent[name]
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def set_attr(f, path, name, value):
    obj = f[path]
    if value is None:
        if name in obj.attrs:
            del obj.attrs[name]
    else:
        obj.attrs[name] = value


# ---- The mutations ------------------------------------------------------------------------
#
# Each returns (label, expect, element, target, detail) or None when it does not apply to the
# file. label names the mutation ("X.indptr-not-monotone"); element is the model path an
# "error" expectation must name.

MUTATIONS = {}


def mutation(name, weight=1):
    def register(fn):
        MUTATIONS[name] = (fn, weight)
        return fn
    return register


def pick(rng, seq):
    seq = list(seq)
    return seq[rng.randrange(len(seq))] if seq else None


def slug(path):
    p = path.lstrip("/").replace("#", ".")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", p.replace("/", ".")) or "root"


def signed_dtype(d):
    return np.dtype(d).kind == "i"


# -- sparse pointers -------------------------------------------------------------------------

def sparse_target(s, rng):
    g = pick(rng, s.sparse)
    if g is None:
        return None
    return g


@mutation("indptr", 6)
def mutate_indptr(f, s, rng):
    """A sparse matrix's indptr not monotone, not from 0, not ending at nnz, too long or short,
    huge, negative, of another rank or type (narrow integers that fit are still valid)."""
    g = sparse_target(s, rng)
    if g is None:
        return None
    group, _, _ = g
    path = group + "/indptr"
    p = f[path][()].astype(np.int64)
    nnz = f[group + "/data"].shape[0]
    element = s.model_path(group)
    kind = pick(rng, ["not-monotone", "start-nonzero", "end-short", "end-long", "huge", "negative",
                      "longer", "shorter", "empty", "2d", "float", "int8", "uint16", "bigendian",
                      "bool", "string", "all-nnz"])
    dtype = f[path].dtype
    expect, detail = "error", ""
    if kind == "not-monotone":
        cand = [i for i in range(1, len(p) - 1) if p[i + 1] > p[i - 1]]
        if not cand:
            return None
        i = pick(rng, cand)
        p[i] = p[i + 1] + 1 + rng.randrange(3)
        detail = "entry %d raised above entry %d" % (i, i + 1)
    elif kind == "start-nonzero":
        p[0] = 1 + rng.randrange(3)
        if len(p) > 1 and p[1] < p[0]:
            p[1] = p[0]
        detail = "indptr[0] = %d" % p[0]
    elif kind == "end-short":
        if nnz == 0:
            return None
        p[-1] = nnz - 1
        detail = "last = nnz - 1"
    elif kind == "end-long":
        p[-1] = nnz + 1 + rng.randrange(100)
        detail = "last = %d, nnz %d" % (p[-1], nnz)
    elif kind == "huge":
        if dtype.itemsize < 8:
            dtype = np.dtype("<i8")
        i = rng.randrange(1, len(p)) if len(p) > 1 else 0
        p[i:] = 1 << (40 + rng.randrange(22))
        detail = "entries from %d set to %d" % (i, p[i])
    elif kind == "negative":
        if not signed_dtype(dtype):
            dtype = np.dtype("<i8")
        i = rng.randrange(len(p))
        p[i] = -1 - rng.randrange(1000)
        detail = "entry %d = %d" % (i, p[i])
    elif kind == "longer":
        p = np.concatenate([p, [nnz] * (1 + rng.randrange(3))])
    elif kind == "shorter":
        p = p[: max(0, len(p) - 1 - rng.randrange(3))]
    elif kind == "empty":
        p = p[:0]
    elif kind == "2d":
        p = p.reshape(len(p), 1)
    elif kind == "float":
        p = p.astype(np.float64)
        dtype = p.dtype
    elif kind == "int8":
        dtype = np.dtype("i1")
        expect = "ok" if p.max(initial=0) < 128 else "error"
        detail = "max %d" % p.max(initial=0)
    elif kind == "uint16":
        dtype = np.dtype("<u2")
        expect = "ok" if p.max(initial=0) < 65536 else "error"
    elif kind == "bigendian":
        dtype = np.dtype(">i8")
        expect = "ok"
    elif kind == "bool":
        p = p.astype(bool)
        dtype = p.dtype
        expect = "any"
    elif kind == "string":
        p = np.array([str(v) for v in p], dtype=object)
        dtype = None
    elif kind == "all-nnz":
        # Every row empty but the last, which holds everything: valid.
        p[:] = 0
        if len(p):
            p[-1] = nnz
        expect = "ok"
    values = p if dtype is None or kind in ("2d",) else p.astype(dtype)
    if kind == "2d":
        values = p.astype(f[path].dtype)
    write_values(f, path, values)
    return "%s.indptr-%s" % (slug(group), kind), expect, element, path, detail


@mutation("indices", 5)
def mutate_indices(f, s, rng):
    """A sparse matrix's indices out of range, negative, huge, unsorted or repeated within a row
    (both valid), of another length, rank, width or type."""
    g = sparse_target(s, rng)
    if g is None:
        return None
    group, fmt, shape_attr = g
    path = group + "/indices"
    idx = f[path][()].astype(np.int64)
    ptr = f[group + "/indptr"][()].astype(np.int64)
    element = s.model_path(group)
    if fmt == "10x":
        minor = s.n_vars
    else:
        shape = f[group].attrs[shape_attr]
        minor = int(shape[1] if fmt == "csr" else shape[0])
    kind = pick(rng, ["out-of-range", "negative", "huge", "unsorted", "duplicated", "longer",
                      "shorter", "float", "int16", "uint8", "int64", "bigendian", "2d", "string"])
    dtype = f[path].dtype
    expect, detail = "error", ""
    if kind in ("out-of-range", "negative", "huge", "unsorted", "duplicated", "uint8", "int16") and len(idx) == 0:
        return None
    if kind == "out-of-range":
        i = rng.randrange(len(idx))
        idx[i] = minor + rng.randrange(3)
        detail = "indices[%d] = %d, %d columns" % (i, idx[i], minor)
    elif kind == "negative":
        if not signed_dtype(dtype):
            dtype = np.dtype("<i8")
        i = rng.randrange(len(idx))
        idx[i] = -1 - rng.randrange(5)
        detail = "indices[%d] = %d" % (i, idx[i])
    elif kind == "huge":
        dtype = np.dtype("<i8")
        i = rng.randrange(len(idx))
        idx[i] = 1 << (33 + rng.randrange(29))
        detail = "indices[%d] = %d" % (i, idx[i])
    elif kind == "unsorted":
        rows = [r for r in range(len(ptr) - 1) if ptr[r + 1] - ptr[r] > 1]
        if not rows:
            return None
        r = pick(rng, rows)
        idx[ptr[r]:ptr[r + 1]] = idx[ptr[r]:ptr[r + 1]][::-1].copy()
        expect = "ok"
        detail = "row %d reversed" % r
    elif kind == "duplicated":
        rows = [r for r in range(len(ptr) - 1) if ptr[r + 1] - ptr[r] > 1]
        if not rows:
            return None
        r = pick(rng, rows)
        idx[ptr[r] + 1] = idx[ptr[r]]
        expect = "ok"
        detail = "row %d repeats a column" % r
    elif kind == "longer":
        idx = np.concatenate([idx, [0] * (1 + rng.randrange(3))])
    elif kind == "shorter":
        if len(idx) == 0:
            return None
        idx = idx[:-1]
    elif kind == "float":
        dtype = np.dtype("<f8")
    elif kind == "int16":
        dtype = np.dtype("<i2")
        expect = "ok" if minor < 32768 else "any"
    elif kind == "uint8":
        dtype = np.dtype("u1")
        expect = "ok" if minor <= 256 else "any"
    elif kind == "int64":
        dtype = np.dtype("<i8")
        expect = "ok"
    elif kind == "bigendian":
        dtype = np.dtype(">" + dtype.str[1:]) if dtype.itemsize > 1 else dtype
        expect = "ok"
    elif kind == "2d":
        idx = idx.reshape(len(idx), 1)
    elif kind == "string":
        idx = np.array([str(v) for v in idx], dtype=object)
        dtype = None
    write_values(f, path, idx if dtype is None else idx.astype(dtype))
    return "%s.indices-%s" % (slug(group), kind), expect, element, path, detail


@mutation("data", 3)
def mutate_data(f, s, rng):
    """A sparse matrix's data of another length, rank or type (numbers of any kind are valid)."""
    g = sparse_target(s, rng)
    if g is None:
        return None
    group = g[0]
    path = group + "/data"
    data = f[path][()]
    element = s.model_path(group)
    kind = pick(rng, ["longer", "shorter", "empty", "2d", "string", "bool", "int8", "float16",
                      "bigendian", "compound", "uint64", "nan"])
    expect = "error"
    if kind == "longer":
        data = np.concatenate([data, data[:1] if len(data) else np.zeros(1, data.dtype)])
    elif kind == "shorter":
        if len(data) == 0:
            return None
        data = data[:-1]
    elif kind == "empty":
        if len(data) == 0:
            return None
        data = data[:0]
    elif kind == "2d":
        data = data.reshape(len(data), 1)
    elif kind == "string":
        data = np.array([str(v) for v in data], dtype=object)
    elif kind == "bool":
        data = data != 0
        expect = "ok"
    elif kind == "int8":
        data = np.clip(data, -128, 127).astype("i1")
        expect = "ok"
    elif kind == "float16":
        data = data.astype("<f2")
        expect = "ok"
    elif kind == "bigendian":
        data = data.astype(data.dtype.newbyteorder(">")) if data.dtype.itemsize > 1 else data
        expect = "same"
    elif kind == "compound":
        c = np.zeros(len(data), dtype=[("v", data.dtype), ("w", "<i4")])
        c["v"] = data
        data = c
        expect = "any"
    elif kind == "uint64":
        data = np.abs(data).astype("<u8")
        expect = "ok"
    elif kind == "nan":
        if len(data) == 0:
            return None
        data = data.astype("<f8")
        data[rng.randrange(len(data))] = np.nan
        expect = "ok"
    write_values(f, path, data)
    return "%s.data-%s" % (slug(group), kind), expect, element, path, ""


@mutation("sparse-shape", 3)
def mutate_sparse_shape(f, s, rng):
    """A sparse matrix's shape attribute (shape, h5sparse_shape) wrong, missing or mistyped."""
    cands = [g for g in s.sparse if g[2] is not None]
    g = pick(rng, cands)
    if g is None:
        return None
    group, fmt, attr = g
    shape = np.asarray(f[group].attrs[attr]).astype(np.int64)
    element = s.model_path(group)
    kind = pick(rng, ["rows+1", "cols+1", "cols-1", "swapped", "negative", "three", "one",
                      "float", "string", "missing", "huge"])
    expect = "error"
    if kind == "rows+1":
        value = np.array([shape[0] + 1, shape[1]])
    elif kind == "cols+1":
        value = np.array([shape[0], shape[1] + 1])
    elif kind == "cols-1":
        value = np.array([shape[0], max(0, shape[1] - 1)])
    elif kind == "swapped":
        if shape[0] == shape[1]:
            return None
        value = shape[::-1].copy()
    elif kind == "negative":
        value = np.array([-shape[0], shape[1]])
    elif kind == "three":
        value = np.array([shape[0], shape[1], 1])
    elif kind == "one":
        value = np.array([shape[0]])
    elif kind == "float":
        value = shape.astype(np.float64) + 0.5
        expect = "any"
    elif kind == "string":
        value = "%d,%d" % (shape[0], shape[1])
    elif kind == "missing":
        value = None
    elif kind == "huge":
        value = np.array([1 << 62, 1 << 62])
    set_attr(f, group, attr, value)
    if kind in ("cols+1", "cols-1") and element.split("/")[0] in ("obsm", "varm", "uns"):
        expect = "any"  # its columns run along nothing: another count is still a matrix
    return "%s.%s-%s" % (slug(group), attr, kind), expect, element, group, ""


@mutation("sparse-encoding", 2)
def mutate_sparse_encoding(f, s, rng):
    """A sparse matrix's encoding-type / h5sparse_format / encoding-version changed."""
    cands = [g for g in s.sparse if g[2] is not None]
    g = pick(rng, cands)
    if g is None:
        return None
    group, fmt, attr = g
    name = "encoding-type" if attr == "shape" else "h5sparse_format"
    other = {"csr": "csc", "csc": "csr"}[fmt]
    kind = pick(rng, ["swapped", "unknown", "int", "missing", "version", "version-int", "bytes"])
    if kind == "swapped":
        value = other + "_matrix" if attr == "shape" else other
    elif kind == "unknown":
        value = "coo_matrix" if attr == "shape" else "coo"
    elif kind == "int":
        value = np.int64(3)
    elif kind == "missing":
        value = None
    elif kind == "version":
        name, value = "encoding-version", "9.9.9"
    elif kind == "version-int":
        name, value = "encoding-version", np.array([0, 1, 0])
    else:
        value = np.bytes_((fmt + "_matrix" if attr == "shape" else fmt).encode())
    set_attr(f, group, name, value)
    return "%s.%s-%s" % (slug(group), name, kind), "any", s.model_path(group), group, ""


# -- categoricals ------------------------------------------------------------------------------

@mutation("codes", 6)
def mutate_codes(f, s, rng):
    """Categorical codes out of range, negative, huge, longer or shorter than their dataframe,
    of another type or rank (every encoding: groups, anndata 0.7 references, legacy members)."""
    c = pick(rng, s.categoricals)
    if c is None:
        return None
    path, ncat, cats_path = c
    codes = np.asarray(read_values(f, path)).astype(np.int64)
    element = s.model_path(path)
    if "#" in path:  # a legacy compound member
        element = s.model_path(path.split("#")[0]) + "/" + path.split("#")[1]
    elif path.endswith("/codes"):
        element = s.model_path(path[: -len("/codes")])
    kind = pick(rng, ["out-of-range", "negative", "huge", "longer", "shorter", "empty", "float",
                      "string", "2d", "uint8-valid", "uint8-255", "bigendian", "all-missing",
                      "bool"])
    dtype = np.asarray(read_values(f, path)).dtype
    expect, detail = "error", ""
    if kind in ("out-of-range", "negative", "huge", "uint8-255") and len(codes) == 0:
        return None
    if kind == "out-of-range":
        i = rng.randrange(len(codes))
        codes[i] = ncat + rng.randrange(3)
        if codes[i] > np.iinfo(dtype).max:
            dtype = np.dtype("<i8")
        detail = "codes[%d] = %d, %d categories" % (i, codes[i], ncat)
    elif kind == "negative":
        if not signed_dtype(dtype):
            dtype = np.dtype("<i8")
        i = rng.randrange(len(codes))
        codes[i] = -2 - rng.randrange(100)
        if codes[i] < np.iinfo(dtype).min:
            codes[i] = np.iinfo(dtype).min
        detail = "codes[%d] = %d" % (i, codes[i])
    elif kind == "huge":
        dtype = np.dtype("<i8")
        i = rng.randrange(len(codes))
        codes[i] = 1 << (31 + rng.randrange(32))
        detail = "codes[%d] = %d" % (i, codes[i])
    elif kind == "longer":
        codes = np.concatenate([codes, [0] * (1 + rng.randrange(3))])
    elif kind == "shorter":
        if len(codes) == 0:
            return None
        codes = codes[:-1 - rng.randrange(min(3, len(codes)))]
    elif kind == "empty":
        if len(codes) == 0:
            return None
        codes = codes[:0]
    elif kind == "float":
        dtype = np.dtype("<f4")
    elif kind == "string":
        codes = np.array([str(v) for v in codes], dtype=object)
        dtype = None
    elif kind == "2d":
        codes = codes.reshape(len(codes), 1)
    elif kind == "uint8-valid":
        if (codes < 0).any():
            return None
        dtype = np.dtype("u1")
        expect = "ok"
    elif kind == "uint8-255":
        dtype = np.dtype("u1")
        codes[codes < 0] = 255
        codes[rng.randrange(len(codes))] = 255
        expect = "error" if ncat < 255 else "any"
        detail = "codes as uint8, -1 stored as 255"
    elif kind == "bigendian":
        dtype = np.dtype(">i4")
        expect = "ok"
    elif kind == "all-missing":
        codes[:] = -1
        if not signed_dtype(dtype):
            dtype = np.dtype("i1")
        expect = "ok"
    elif kind == "bool":
        codes = codes.astype(bool)
        dtype = None
        expect = "any"
    if "#" in path and kind in ("longer", "shorter", "empty", "2d", "string"):
        return None  # a compound member has the dataset's length and a scalar type
    if "#" in path and kind in ("float", "bool"):
        expect = "any"  # not integers: a plain column (its uns categories stay in uns)
    write_values(f, path, codes if dtype is None else codes.astype(dtype))
    return "%s.codes-%s" % (slug(path.replace("/codes", "")), kind), expect, element, path, detail


@mutation("categories", 2)
def mutate_categories(f, s, rng):
    """Categories fewer, none, numeric, 2-d, repeated or compound; the ordered attribute odd."""
    c = pick(rng, [c for c in s.categoricals if "#" not in c[0]])
    if c is None:
        return None
    path, ncat, cats = c
    element = s.model_path(path[: -len("/codes")] if path.endswith("/codes") else path)
    values = f[cats][()]
    kind = pick(rng, ["empty", "fewer", "int", "2d", "duplicated", "float", "ordered-string",
                      "ordered-missing", "compound"])
    expect = "any"
    codes = np.asarray(f[path][()])
    if kind == "empty":
        values = values[:0]
        expect = "error" if (codes >= 0).any() else "ok"
    elif kind == "fewer":
        if len(values) == 0:
            return None
        values = values[:-1]
        expect = "error" if (codes == len(values)).any() else "ok"
    elif kind == "int":
        values = np.arange(len(values), dtype="<i8") * 10
        expect = "ok"
    elif kind == "float":
        values = np.arange(len(values), dtype="<f8") / 4
        expect = "ok"
    elif kind == "2d":
        values = values.reshape(len(values), 1)
        expect = "error"
    elif kind == "duplicated":
        if len(values) < 2:
            return None
        values = values.copy()
        values[1] = values[0]
    elif kind == "ordered-string":
        set_attr(f, path.rsplit("/", 1)[0] if path.endswith("/codes") else cats, "ordered", "yes")
        return "%s.ordered-string" % slug(path), "any", element, path, ""
    elif kind == "ordered-missing":
        set_attr(f, path.rsplit("/", 1)[0] if path.endswith("/codes") else cats, "ordered", None)
        return "%s.ordered-missing" % slug(path), "any", element, path, ""
    elif kind == "compound":
        c2 = np.zeros(len(values), dtype=[("a", "<i4"), ("b", "<f4")])
        values = c2
    write_values(f, cats, values)
    return "%s.categories-%s" % (slug(path.replace("/codes", "")), kind), expect, element, cats, ""


# -- dataframes ----------------------------------------------------------------------------------

@mutation("dataframe-attrs", 4)
def mutate_dataframe_attrs(f, s, rng):
    """A dataframe's _index, column-order, encoding-type or -version wrong or missing."""
    df = pick(rng, s.dataframes)
    if df is None:
        return None
    g = f[df]
    element = s.model_path(df)
    order = [x.decode() if isinstance(x, bytes) else str(x) for x in np.atleast_1d(g.attrs.get("column-order", []))]
    index = attr_text(g, "_index") or "_index"
    kind = pick(rng, ["index-missing", "index-nonexistent", "index-int", "index-a-column",
                      "order-missing", "order-nonexistent", "order-int", "order-duplicated",
                      "order-empty", "order-has-index", "order-slash", "order-dotdot",
                      "encoding-dict", "encoding-missing", "version-unknown"])
    expect = "any"
    if kind == "index-missing":
        set_attr(f, df, "_index", None)
        expect = "error"
    elif kind == "index-nonexistent":
        set_attr(f, df, "_index", "no_such_column")
        expect = "error"
    elif kind == "index-int":
        set_attr(f, df, "_index", np.int64(7))
        expect = "error"
    elif kind == "index-a-column":
        if not order:
            return None
        set_attr(f, df, "_index", pick(rng, order))
    elif kind == "order-missing":
        set_attr(f, df, "column-order", None)
    elif kind == "order-nonexistent":
        set_attr(f, df, "column-order", np.array(order + ["no_such_column"], dtype=object),)
        expect = "error"
    elif kind == "order-int":
        set_attr(f, df, "column-order", np.arange(3))
    elif kind == "order-duplicated":
        if not order:
            return None
        set_attr(f, df, "column-order", np.array(order + [order[0]], dtype=object))
    elif kind == "order-empty":
        set_attr(f, df, "column-order", np.array([], dtype="f8"))
    elif kind == "order-has-index":
        set_attr(f, df, "column-order", np.array(order + [index], dtype=object))
    elif kind == "order-slash":
        if not order:
            return None
        # A column whose name holds a slash: the HDF5 path then names a nested object.
        set_attr(f, df, "column-order", np.array(order + [index + "/x"], dtype=object))
    elif kind == "order-dotdot":
        set_attr(f, df, "column-order", np.array(order + [".."], dtype=object))
    elif kind == "encoding-dict":
        set_attr(f, df, "encoding-type", "dict")
        expect = "error" if df in ("/obs", "/var") else "any"
    elif kind == "encoding-missing":
        set_attr(f, df, "encoding-type", None)
        expect = "error" if df in ("/obs", "/var") else "any"
    elif kind == "version-unknown":
        set_attr(f, df, "encoding-version", "0.9.0")
    return "%s.%s" % (slug(df), kind), expect, element, df, ""


def dataframe_columns(f, s):
    out = []
    for df in s.dataframes:
        g = f[df]
        index = attr_text(g, "_index") or "_index"
        for k in g.keys():
            if k == "__categories":
                continue
            out.append((df, k, k == index))
    return out


@mutation("column", 5)
def mutate_column(f, s, rng):
    """A dataframe column (or its index) of the wrong length, rank or type."""
    cols = dataframe_columns(f, s)
    c = pick(rng, cols)
    if c is None:
        return None
    df, name, is_index = c
    path = df + "/" + name
    obj = f[path]
    if isinstance(obj, h5py.Group):
        sub = pick(rng, [k for k in obj.keys() if isinstance(obj[k], h5py.Dataset)])
        if sub is None:
            return None
        path = path + "/" + sub
    values = f[path][()]
    element = s.model_path(df + "/" + name)
    kind = pick(rng, ["longer", "shorter", "empty", "2d", "scalar", "to-float", "to-int8",
                      "to-string", "to-bool", "to-compound", "bigendian", "to-fixed-string",
                      "to-uint64-max"])
    expect = "error"
    if values.ndim == 0:
        return None
    if kind == "longer":
        values = np.concatenate([values, values[:1]]) if len(values) else values
        if len(values) == 0:
            return None
    elif kind == "shorter":
        if len(values) == 0:
            return None
        values = values[:-1]
    elif kind == "empty":
        if len(values) == 0:
            return None
        values = values[:0]
    elif kind == "2d":
        values = np.stack([values, values], axis=1)
    elif kind == "scalar":
        values = values[0] if len(values) else values
        expect = "error"
        if len(values.shape if hasattr(values, "shape") else ()) != 0:
            return None
    elif kind == "to-float":
        try:
            values = values.astype("<f8")
        except (ValueError, TypeError):
            values = np.arange(len(values), dtype="<f8")
        expect = "any"
    elif kind == "to-int8":
        values = (np.arange(len(values)) % 100).astype("i1")
        expect = "any"
    elif kind == "to-string":
        values = np.array(["v%s" % (v,) for v in values], dtype=object)
        expect = "any"
    elif kind == "to-bool":
        values = (np.arange(len(values)) % 2).astype(bool)
        expect = "any"
    elif kind == "to-compound":
        c = np.zeros(len(values), dtype=[("a", "<i4"), ("b", "<f8")])
        c["a"] = np.arange(len(values))
        values = c
        expect = "any"
    elif kind == "bigendian":
        if values.dtype.kind not in "iuf" or values.dtype.itemsize == 1:
            return None
        values = values.astype(values.dtype.newbyteorder(">"))
        expect = "same"
    elif kind == "to-fixed-string":
        values = np.array([("s%d" % i).encode() for i in range(len(values))], dtype="S6")
        expect = "any"
    elif kind == "to-uint64-max":
        values = np.full(len(values), np.iinfo(np.uint64).max, dtype="<u8")
        expect = "any"
    write_values(f, path, values)
    if is_index and kind in ("longer", "shorter", "empty"):
        # The index sets the dataframe's length: whatever disagrees with it now (its columns,
        # the matrices along that axis) is what the refusal names.
        others = [k for k in f[df].keys() if k not in (name, "__categories")]
        expect = "refuse" if others else "any"
    if kind in ("longer", "shorter", "empty") and path.endswith("/codes"):
        expect = "error"
    if kind in ("longer", "shorter", "empty", "2d", "scalar") and path.endswith("/categories"):
        # More or fewer categories are still categories (codes are checked against them).
        expect = "any"
    return "%s.%s" % (slug(path), kind), expect, element, path, ""


@mutation("nullable", 2)
def mutate_nullable(f, s, rng):
    """A nullable array's mask or values of another length, rank or type, or missing."""
    g = pick(rng, s.nullables)
    if g is None:
        return None
    element = s.model_path(g)
    kind = pick(rng, ["mask-shorter", "mask-int", "values-2d", "mask-missing", "values-string",
                      "mask-longer", "values-float"])
    expect = "error"
    if kind == "mask-shorter":
        write_values(f, g + "/mask", f[g + "/mask"][()][:-1])
    elif kind == "mask-longer":
        m = f[g + "/mask"][()]
        write_values(f, g + "/mask", np.concatenate([m, m[:1]]))
    elif kind == "mask-int":
        write_values(f, g + "/mask", f[g + "/mask"][()].astype("<i4"))
    elif kind == "values-2d":
        v = f[g + "/values"][()]
        write_values(f, g + "/values", np.stack([v, v], axis=1))
    elif kind == "mask-missing":
        del f[g + "/mask"]
    elif kind == "values-string":
        v = f[g + "/values"][()]
        write_values(f, g + "/values", np.array([str(x) for x in v], dtype=object))
        expect = "any"
    elif kind == "values-float":
        v = f[g + "/values"][()]
        write_values(f, g + "/values", v.astype("<f8"))
        expect = "any"
    return "%s.%s" % (slug(g), kind), expect, element, g, ""


# -- legacy compound dataframes ------------------------------------------------------------------

@mutation("compound", 3)
def mutate_compound(f, s, rng):
    """A legacy compound dataframe or mapping: index missing or numeric, members of another
    shape or type, rows added or removed."""
    path = pick(rng, s.compounds)
    if path is None:
        return None
    old = f[path][()]
    names = list(old.dtype.names)
    element = s.model_path(path)
    kind = pick(rng, ["no-index", "index-int", "member-2d", "member-string", "member-compound",
                      "rows+1", "empty", "one-member", "bigendian-members"])
    expect = "any"
    if kind == "no-index":
        if "index" not in names:
            return None
        keep = [n for n in names if n != "index"]
        new = np.zeros(len(old), dtype=[(n, old.dtype[n]) for n in keep])
        for n in keep:
            new[n] = old[n]
        expect = "error" if path in ("/obs", "/var") else "any"
    elif kind == "index-int":
        if "index" not in names:
            return None
        dt = [(n, "<i8" if n == "index" else old.dtype[n]) for n in names]
        new = np.zeros(len(old), dtype=dt)
        for n in names:
            if n != "index":
                new[n] = old[n]
        new["index"] = np.arange(len(old))
    elif kind == "member-2d":
        m = pick(rng, [n for n in names if n != "index"])
        if m is None:
            return None
        dt = [(n, old.dtype[n], (2,)) if n == m and old.dtype[n].shape == () else (n, old.dtype[n])
              for n in names]
        new = np.zeros(len(old), dtype=dt)
        for n in names:
            if n == m and old.dtype[n].shape == ():
                new[n][:, 0] = old[n]
            else:
                new[n] = old[n]
    elif kind == "member-string":
        m = pick(rng, [n for n in names if n != "index"])
        if m is None:
            return None
        dt = [(n, "S8" if n == m else old.dtype[n]) for n in names]
        new = np.zeros(len(old), dtype=dt)
        for n in names:
            if n != m:
                new[n] = old[n]
            else:
                new[n] = [b"x%d" % i for i in range(len(old))]
    elif kind == "member-compound":
        m = pick(rng, [n for n in names if n != "index"])
        if m is None:
            return None
        inner = np.dtype([("p", "<i4"), ("q", "<f4")])
        dt = [(n, inner if n == m else old.dtype[n]) for n in names]
        new = np.zeros(len(old), dtype=dt)
        for n in names:
            if n != m:
                new[n] = old[n]
    elif kind == "rows+1":
        new = np.concatenate([old, old[:1]])
        expect = "error" if path in ("/obs", "/var", "/obsm", "/varm") else "any"
    elif kind == "empty":
        new = old[:0]
        expect = "error" if path in ("/obsm", "/varm") else "any"
    elif kind == "one-member":
        m = names[0]
        new = np.zeros(len(old), dtype=[(m, old.dtype[m])])
        new[m] = old[m]
        expect = "any"
    elif kind == "bigendian-members":
        dt = []
        for n in names:
            t = old.dtype[n]
            base = t.base if t.shape else t
            if base.kind in "iuf" and base.itemsize > 1:
                base = base.newbyteorder(">")
            dt.append((n, base, t.shape) if t.shape else (n, base))
        new = np.zeros(len(old), dtype=dt)
        for n in names:
            new[n] = old[n]
        expect = "same"
    replace(f, path, new)
    return "%s.compound-%s" % (slug(path), kind), expect, element, path, ""


# -- dense arrays --------------------------------------------------------------------------------

def per_cell_arrays(f, s):
    out = []
    for p in s.datasets:
        d = f[p]
        if d.dtype.names is not None or d.ndim < 1:
            continue
        top = p.split("/")[1]
        if s.fmt == "h5ad" and top in ("X", "layers", "obsm", "varm", "raw.X") and d.ndim == 2:
            out.append(p)
        elif s.fmt == "loom" and (p == "/matrix" or top == "layers") and d.ndim == 2:
            out.append(p)
        elif s.fmt == "loom" and top in ("col_attrs", "row_attrs"):
            out.append(p)
    return out


@mutation("dense", 4)
def mutate_dense(f, s, rng):
    """A dense per-cell or per-gene array with rows or columns added or removed, another rank,
    another type (narrow and big-endian numbers are valid)."""
    path = pick(rng, per_cell_arrays(f, s))
    if path is None:
        return None
    v = f[path][()]
    element = s.model_path(path)
    if s.fmt == "loom" and path.split("/")[1] in ("col_attrs", "row_attrs") and v.ndim == 2 and v.shape[1] > 1:
        element = {"col_attrs": "obsm", "row_attrs": "varm"}[path.split("/")[1]] + "/" + path.split("/")[-1]
    kind = pick(rng, ["rows+1", "rows-1", "cols+1", "empty", "1d", "3d", "float16", "int8",
                      "bool", "bigendian", "string", "compound", "nan-inf", "uint64"])
    expect = "error"
    if kind == "rows+1":
        v = np.concatenate([v, v[:1]])
    elif kind == "rows-1":
        if len(v) == 0:
            return None
        v = v[:-1]
    elif kind == "cols+1":
        if v.ndim != 2:
            return None
        v = np.concatenate([v, v[:, :1]], axis=1)
        top = path.split("/")[1]
        expect = "any" if top in ("obsm", "varm") else "error"
        if s.fmt == "loom" and top in ("col_attrs", "row_attrs"):
            expect = "any"
    elif kind == "empty":
        v = v[:0]
    elif kind == "1d":
        if v.ndim != 2:
            return None
        v = v[:, 0].copy()
        top = path.split("/")[1]
        expect = "any" if top in ("obsm", "varm", "col_attrs", "row_attrs") else "error"
    elif kind == "3d":
        v = v.reshape(v.shape + (1,))
        expect = "any"
    elif kind in ("float16", "int8", "bool", "uint64"):
        if v.dtype.kind not in "iufb":
            return None
        v = {"float16": lambda x: x.astype("<f2"), "int8": lambda x: np.clip(x, -9, 9).astype("i1"),
             "bool": lambda x: x != 0, "uint64": lambda x: np.abs(x).astype("<u8")}[kind](v)
        expect = "ok"
    elif kind == "bigendian":
        if v.dtype.kind not in "iuf" or v.dtype.itemsize == 1:
            return None
        v = v.astype(v.dtype.newbyteorder(">"))
        expect = "same"
    elif kind == "string":
        v = np.array([str(x) for x in v.ravel()], dtype=object).reshape(v.shape)
        expect = "any"
    elif kind == "compound":
        c = np.zeros(v.shape[0], dtype=[("a", "<f4"), ("b", "<i2")])
        v = c
        expect = "any"
    elif kind == "nan-inf":
        if v.dtype.kind != "f" or v.size < 2:
            return None
        v = v.copy()
        v.flat[0] = np.nan
        v.flat[1] = np.inf
        expect = "ok"
    write_values(f, path, v)
    return "%s.%s" % (slug(path), kind), expect, element, path, ""


# -- any dataset: layout and type --------------------------------------------------------------

PIPELINES = [
    ("contiguous", {}),
    ("chunks", {}),
    ("gzip1", {"compression": "gzip", "compression_opts": 1}),
    ("gzip9", {"compression": "gzip", "compression_opts": 9}),
    ("shuffle-gzip", {"compression": "gzip", "compression_opts": 4, "shuffle": True}),
    ("lzf", {"compression": "lzf"}),
    ("shuffle-lzf", {"compression": "lzf", "shuffle": True}),
    ("fletcher32", {"fletcher32": True}),
    ("shuffle-gzip-fletcher32", {"compression": "gzip", "shuffle": True, "fletcher32": True}),
    ("scaleoffset-int", {"scaleoffset": 0}),
]
if HAVE_PLUGINS:
    PIPELINES += [("blosc-lz4", {"compression": 32001, "compression_opts": (0, 0, 0, 0, 5, 1, 1)}),
                  ("blosc-zstd", {"compression": 32001, "compression_opts": (0, 0, 0, 0, 3, 2, 5)}),
                  ("lz4", {"compression": 32004}),
                  ("bzip2", {"compression": 307})]
if HAVE_ZSTD:
    PIPELINES += [("zstd", {"compression": 32015, "compression_opts": (3,)})]


@mutation("relayout", 5)
def mutate_relayout(f, s, rng):
    """The same values in another chunk shape and filter pipeline: must serve the same bytes."""
    cands = [p for p in s.datasets if f[p].ndim >= 1 and f[p].size > 0 and f[p].dtype.names is None]
    path = pick(rng, cands)
    if path is None:
        return None
    d = f[path]
    v = d[()]
    name, opts = pick(rng, PIPELINES)
    opts = dict(opts)
    if v.dtype.kind == "O" and name not in ("contiguous", "chunks"):
        name, opts = "chunks", {}
    if name == "scaleoffset-int" and v.dtype.kind not in "iu":
        name, opts = "gzip1", {"compression": "gzip", "compression_opts": 1}
    if name != "contiguous":
        chunks = tuple(1 + rng.randrange(max(1, n)) for n in v.shape)
        if rng.random() < 0.3:
            opts["maxshape"] = tuple(None for _ in v.shape)
            if rng.random() < 0.5:  # chunks larger than the data (Cell Ranger writes such)
                chunks = tuple(n + 1 + rng.randrange(max(1, n)) for n in v.shape)
        opts["chunks"] = chunks
    replace(f, path, v, keep_layout=False, **opts)
    return ("%s.relayout-%s" % (slug(path), name), "same", s.model_path(path), path,
            "chunks %s" % (opts.get("chunks"),))


@mutation("strings", 3)
def mutate_strings(f, s, rng):
    """A string dataset's values made awkward: not UTF-8, holding NULs, empty, very long,
    repeated, or fixed-length with a character cut in two."""
    cands = [p for p in s.datasets if f[p].ndim == 1 and f[p].dtype.kind in "OS" and len(f[p]) > 0]
    path = pick(rng, cands)
    if path is None:
        return None
    n = len(f[path])
    kind = pick(rng, ["not-utf8", "nul", "empty", "long", "repeated", "cut-utf8", "latin1-vlen",
                      "one-huge"])
    if kind == "not-utf8":
        v = np.array([b"\xff\xfe%d" % i for i in range(n)], dtype=object)
        dt = h5py.string_dtype("ascii")
    elif kind == "nul":
        v = np.array([("a\x00b%d" % i).encode() for i in range(n)], dtype="S8")
        dt = v.dtype
    elif kind == "empty":
        v = np.array([""] * n, dtype=object)
        dt = h5py.string_dtype("utf-8")
    elif kind == "long":
        v = np.array([("é%d" % i) * 500 for i in range(n)], dtype=object)
        dt = h5py.string_dtype("utf-8")
    elif kind == "one-huge":
        v = np.array(["x"] * n, dtype=object)
        v[rng.randrange(n)] = "€" * 300000
        dt = h5py.string_dtype("utf-8")
    elif kind == "repeated":
        v = np.array(["same"] * n, dtype=object)
        dt = h5py.string_dtype("utf-8")
    elif kind == "cut-utf8":
        v = np.array([("é" * 3).encode()[:5] for _ in range(n)], dtype="S5")
        dt = v.dtype
    else:
        v = np.array([("caf\xe9%d" % i).encode("latin-1") for i in range(n)], dtype=object)
        dt = h5py.string_dtype("ascii")
    old = f[path]
    attrs = [(k, old.attrs[k]) for k in old.attrs.keys()]
    del f[path]
    f.create_dataset(path, data=np.array(v, dtype=dt), dtype=dt, track_times=False)
    for k, a in attrs:
        f[path].attrs[k] = a
    return "%s.strings-%s" % (slug(path), kind), "any", s.model_path(path), path, ""


@mutation("holes", 2)
def mutate_holes(f, s, rng):
    """The same values in small chunks, those holding only the fill value never written (HDF5
    gives the fill value for them): must serve the same bytes."""
    cands = [p for p in s.datasets if f[p].ndim >= 1 and f[p].size > 1 and f[p].dtype.kind in "iuf"
             and f[p].dtype.names is None]
    path = pick(rng, cands)
    if path is None:
        return None
    v = f[path][()]
    flat = v.reshape(-1)
    values, counts = np.unique(flat[~np.isnan(flat)] if v.dtype.kind == "f" else flat, return_counts=True)
    fill = values[np.argmax(counts)] if len(values) else 0
    chunks = tuple(1 + rng.randrange(max(1, min(n, 4))) for n in v.shape)
    old = f[path]
    attrs = [(k, old.attrs[k]) for k in old.attrs.keys()]
    del f[path]
    opts = {}
    if rng.random() < 0.5:
        opts = {"compression": "gzip", "compression_opts": 1}
    d = f.create_dataset(path, shape=v.shape, dtype=v.dtype, chunks=chunks, fillvalue=fill,
                         track_times=False, **opts)
    written = 0
    for index in np.ndindex(*[(n + c - 1) // c for n, c in zip(v.shape, chunks)]):
        region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, chunks, v.shape))
        part = v[region]
        if not np.array_equal(part, np.full(part.shape, fill, dtype=v.dtype)):
            d[region] = part
            written += 1
    for k, a in attrs:
        d.attrs[k] = a
    return ("%s.holes" % slug(path), "same", s.model_path(path), path,
            "chunks %s, fill %r, %d chunks written" % (chunks, fill.item() if hasattr(fill, "item") else fill, written))


def truncate_rows(f, path, m, n):
    """Keeps the first m rows of a dataset of n rows (anything else left as it is)."""
    d = f[path]
    if isinstance(d, h5py.Dataset) and d.ndim >= 1 and d.shape[0] == n and d.dtype.names is None:
        write_values(f, path, d[()][:m])


@mutation("few-cells", 2)
def mutate_few_cells(f, s, rng):
    """A valid file of 0, 1 or 2 cells: the first m rows of everything along obs."""
    if s.fmt != "h5ad" or "/obs" not in s.dataframes or s.compounds:
        return None
    if any(g.startswith("/obs/") or "__categories" in g for g in s.dataframes if g != "/obs"):
        return None
    if any("categories" in f[p].attrs for p in s.datasets):
        return None  # anndata 0.7 references: left alone
    n = s.n_obs
    m = pick(rng, [0, 1, 2])
    # Sparse matrices with cells along an axis.
    for group, fmt, attr in list(s.sparse):
        top = group.split("/")[1]
        shape = [int(x) for x in f[group].attrs[attr]]
        if top in ("obsp",) or group.startswith("/uns"):
            del f[group]
            continue
        if shape[0] != n:
            continue
        ptr = f[group + "/indptr"][()]
        if fmt == "csr":
            nnz = int(ptr[m])
            write_values(f, group + "/indptr", ptr[: m + 1])
            write_values(f, group + "/data", f[group + "/data"][()][:nnz])
            write_values(f, group + "/indices", f[group + "/indices"][()][:nnz])
        else:
            idx = f[group + "/indices"][()]
            data = f[group + "/data"][()]
            keep = idx < m
            counts = [int(keep[ptr[j]:ptr[j + 1]].sum()) for j in range(len(ptr) - 1)]
            write_values(f, group + "/indptr", np.concatenate([[0], np.cumsum(counts)]).astype(ptr.dtype))
            write_values(f, group + "/data", data[keep])
            write_values(f, group + "/indices", idx[keep])
        f[group].attrs[attr] = np.array([m, shape[1]])
    for p in list(s.datasets):
        top = p.split("/")[1]
        if p not in f or top not in ("obs", "obsm", "layers", "X", "raw", "obsmap"):
            continue
        if p.endswith(("/indptr", "/data", "/indices")) and p.rsplit("/", 1)[0] in [g for g, _, _ in s.sparse]:
            continue
        if p.endswith("/categories") or top == "raw" and not p.startswith("/raw/X"):
            continue
        truncate_rows(f, p, m, n)
    # A MuData file's modalities keep their rows, which obsmap now maps (in part) to no global
    # cell: refused, each of a modality's rows being one global cell's.
    if "mod" in f:
        return "obs.few-cells-%d" % m, "refuse", "obsmap", "/obsmap", "%d of %d global cells" % (m, n)
    return "obs.few-cells-%d" % m, "ok", "obs", "/obs", "%d of %d cells" % (m, n)


@mutation("retype", 4)
def mutate_retype(f, s, rng):
    """Any dataset as another type (the reader may refuse or serve, not crash)."""
    cands = [p for p in s.datasets if f[p].dtype.names is None]
    path = pick(rng, cands)
    if path is None:
        return None
    v = f[path][()]
    kind = pick(rng, ["int8", "uint8", "int16", "float16", "float64", "bool", "vlen-string",
                      "fixed-string", "compound", "bigendian", "enum", "empty", "scalar", "2d",
                      "array-member", "opaque", "uint64-max", "int64-min"])
    shape = np.shape(v)
    n = int(np.prod(shape)) if shape else 1
    if kind in ("int8", "uint8", "int16", "float16", "float64", "bool"):
        try:
            v = np.asarray(v).astype({"int8": "i1", "uint8": "u1", "int16": "<i2", "float16": "<f2",
                                      "float64": "<f8", "bool": "?"}[kind])
        except (ValueError, TypeError):
            v = (np.arange(n) % 7).reshape(shape).astype({"int8": "i1", "uint8": "u1", "int16": "<i2",
                                                          "float16": "<f2", "float64": "<f8",
                                                          "bool": "?"}[kind])
        write_values(f, path, v)
    elif kind == "vlen-string":
        write_values(f, path, np.array(["s%d" % i for i in range(n)], dtype=object).reshape(shape))
    elif kind == "fixed-string":
        write_values(f, path, np.array([b"f%d" % i for i in range(n)], dtype="S5").reshape(shape))
    elif kind == "compound":
        c = np.zeros(shape, dtype=[("a", "<i4"), ("b", "<f8")])
        write_values(f, path, c)
    elif kind == "bigendian":
        a = np.asarray(v)
        if a.dtype.kind not in "iuf" or a.dtype.itemsize == 1:
            return None
        write_values(f, path, a.astype(a.dtype.newbyteorder(">")))
        return "%s.retype-bigendian" % slug(path), "same", s.model_path(path), path, ""
    elif kind == "enum":
        dt = h5py.enum_dtype({"A": 0, "B": 1, "C": 2}, basetype="i1")
        old = f[path]
        attrs = [(k, old.attrs[k]) for k in old.attrs.keys()]
        del f[path]
        f.create_dataset(path, data=(np.arange(n) % 3).reshape(shape).astype("i1"), dtype=dt,
                         track_times=False)
        for k, a in attrs:
            f[path].attrs[k] = a
    elif kind == "empty":
        if len(shape) == 0:
            return None
        write_values(f, path, np.asarray(v)[:0])
    elif kind == "scalar":
        write_values(f, path, np.float64(1.5))
    elif kind == "2d":
        a = np.asarray(v).reshape(-1)
        write_values(f, path, np.stack([a, a], axis=1))
    elif kind == "array-member":
        old = f[path]
        attrs = [(k, old.attrs[k]) for k in old.attrs.keys()]
        del f[path]
        f.create_dataset(path, shape=shape, dtype=np.dtype(("<f4", (3,))), track_times=False)
        for k, a in attrs:
            f[path].attrs[k] = a
    elif kind == "opaque":
        write_values(f, path, np.zeros(shape, dtype="V4"))
    elif kind == "uint64-max":
        write_values(f, path, np.full(shape, np.iinfo(np.uint64).max, dtype="<u8"))
    elif kind == "int64-min":
        write_values(f, path, np.full(shape, np.iinfo(np.int64).min, dtype="<i8"))
    return "%s.retype-%s" % (slug(path), kind), "any", s.model_path(path), path, ""


@mutation("attribute", 4)
def mutate_attribute(f, s, rng):
    """Any attribute removed, or given another type or value."""
    a = pick(rng, s.attributes)
    if a is None:
        return None
    path, name = a
    kind = pick(rng, ["missing", "int", "float", "string", "empty-string", "bytes", "array",
                      "empty-array", "bool", "long-string", "nul-string"])
    value = {"missing": None, "int": np.int64(-3), "float": np.float64(2.5), "string": "zzz",
             "empty-string": "", "bytes": np.bytes_(b"\xff\xfe"), "array": np.arange(4),
             "empty-array": np.zeros(0, dtype="<i8"), "bool": np.bool_(True),
             "long-string": "x" * 5000, "nul-string": np.bytes_(b"a\x00b")}[kind]
    try:
        set_attr(f, path, name, value)
    except Exception:
        return None
    return "%s@%s-%s" % (slug(path), slug(name), kind), "any", s.model_path(path), path, ""


@mutation("encoding", 3)
def mutate_encoding(f, s, rng):
    """An element's encoding-type made another known one, or unknown."""
    cands = [(p, n) for p, n in s.attributes if n == "encoding-type"]
    c = pick(rng, cands)
    if c is None:
        return None
    path = c[0]
    value = pick(rng, ["anndata", "raw", "dataframe", "categorical", "string-array", "array",
                       "csr_matrix", "csc_matrix", "dict", "numeric-scalar", "string",
                       "nullable-integer", "nullable-boolean", "rec-array", "awkward-array",
                       "mystery"])
    set_attr(f, path, "encoding-type", value)
    return "%s.encoding-%s" % (slug(path), value), "any", s.model_path(path), path, ""


@mutation("remove", 2)
def mutate_remove(f, s, rng):
    """An object removed."""
    cands = s.datasets + sorted({p.rsplit("/", 1)[0] for p in s.datasets if p.count("/") > 1})
    path = pick(rng, cands)
    if path is None:
        return None
    del f[path]
    return "%s.removed" % slug(path), "any", s.model_path(path), path, ""


@mutation("add", 2)
def mutate_add(f, s, rng):
    """A column, key or dataset added under a name the reader or the view uses itself."""
    if s.fmt == "h5ad" and s.dataframes:
        kind = pick(rng, ["obs-cellucid_original_position", "column-dot-name", "column-dunder",
                          "uns-cellucid-priority", "uns-cellucid-dataset", "column-named-index"])
        df = "/obs" if "/obs" in s.dataframes else pick(rng, s.dataframes)
        g = f[df]
        n = s.n_obs if df == "/obs" else len(g[attr_text(g, "_index") or "_index"])
        order = [x.decode() if isinstance(x, bytes) else str(x)
                 for x in np.atleast_1d(g.attrs.get("column-order", []))]
        name = {"obs-cellucid_original_position": "cellucid_original_position",
                "column-dot-name": ".zattrs", "column-dunder": "__categories_x",
                "column-named-index": "_index" if (attr_text(g, "_index") or "_index") != "_index"
                else "index"}.get(kind)
        if kind.startswith("uns-"):
            if "uns" not in f or not isinstance(f["uns"], h5py.Group):
                return None
            c = require_group(f["uns"], "cellucid")
            if kind == "uns-cellucid-priority":
                p = require_group(c, "priority")
                p.create_dataset("seed", data=np.int64(5), track_times=False)
            else:
                c.create_dataset("priority", data=np.arange(3), track_times=False)
            return "uns.%s" % kind, "any", "uns", "/uns/cellucid", ""
        if name in g:
            return None
        g.create_dataset(name, data=np.arange(n, dtype="<i8"), track_times=False)
        g[name].attrs["encoding-type"] = "array"
        g[name].attrs["encoding-version"] = "0.2.0"
        g.attrs["column-order"] = np.array(order + [name], dtype=object)
        return "%s.add-%s" % (slug(df), kind), "any", s.model_path(df), df + "/" + name, ""
    if s.fmt == "10x":
        group = s.shape_datasets[0].rsplit("/", 1)[0] if s.shape_datasets else None
        if group is None:
            return None
        kind = pick(rng, ["features-gene_ids", "features-feature_types", "matrix-_index",
                          "matrix-barcodes-copy"])
        if kind.startswith("features-"):
            if "features" not in f[group]:
                return None
            name = kind.split("-", 1)[1]
            src = f[group + "/features/id"][()]
            f[group + "/features"].create_dataset(name, data=src, track_times=False)
            return "%s.add-%s" % (slug(group), kind), "any", "var", group + "/features/" + name, ""
        name = {"matrix-_index": "_index", "matrix-barcodes-copy": "barcodes_copy"}[kind]
        f[group].create_dataset(name, data=f[group + "/barcodes"][()], track_times=False)
        return "%s.add-%s" % (slug(group), kind), "any", "obs", group + "/" + name, ""
    return None


# -- loom ---------------------------------------------------------------------------------------

@mutation("loom-graph", 4)
def mutate_loom_graph(f, s, rng):
    """A loom graph's a, b or w out of range, negative, shorter, 2-d or of another type."""
    g = pick(rng, s.graphs)
    if g is None:
        return None
    element = s.model_path(g)
    n = s.n_obs if g.startswith("/col_graphs") else s.n_vars
    part = pick(rng, ["a", "b", "w"])
    v = f[g + "/" + part][()]
    kind = pick(rng, ["out-of-range", "negative", "shorter", "2d", "string", "float", "huge",
                      "empty-all", "duplicates", "uint8"])
    expect = "error"
    if kind == "out-of-range":
        if part == "w" or len(v) == 0:
            return None
        v = v.astype("<i8")
        v[rng.randrange(len(v))] = n + rng.randrange(3)
    elif kind == "negative":
        if part == "w" or len(v) == 0:
            return None
        v = v.astype("<i8")
        v[rng.randrange(len(v))] = -1
    elif kind == "huge":
        if part == "w" or len(v) == 0:
            return None
        v = v.astype("<i8")
        v[rng.randrange(len(v))] = 1 << 62
    elif kind == "shorter":
        if len(v) == 0:
            return None
        v = v[:-1]
    elif kind == "2d":
        v = np.stack([v, v], axis=1)
    elif kind == "string":
        v = np.array([str(x) for x in v], dtype=object)
    elif kind == "float":
        v = v.astype("<f8") + (0.5 if part != "w" else 0)
        expect = "any"
    elif kind == "empty-all":
        for p in ("a", "b", "w"):
            write_values(f, g + "/" + p, f[g + "/" + p][()][:0])
        return "%s.graph-empty" % slug(g), "ok", element, g, ""
    elif kind == "duplicates":
        a, b, w = (f[g + "/" + p][()] for p in ("a", "b", "w"))
        if len(a) == 0:
            return None
        for p, x in (("a", a), ("b", b), ("w", w)):
            write_values(f, g + "/" + p, np.concatenate([x, x[:3]]))
        return "%s.graph-duplicates" % slug(g), "ok", element, g, ""
    elif kind == "uint8":
        if part == "w" or n > 255:
            return None
        v = v.astype("u1")
        expect = "ok"
    write_values(f, g + "/" + part, v)
    return "%s.%s-%s" % (slug(g), part, kind), expect, element, g + "/" + part, ""


@mutation("loom-shape", 3)
def mutate_loom_shape(f, s, rng):
    """A loom matrix, layer or attribute of another shape; CellID numeric or 2-d; no col_attrs."""
    if s.fmt != "loom":
        return None
    kind = pick(rng, ["matrix-genes+1", "matrix-cells+1", "matrix-1d", "matrix-3d", "layer-cells+1",
                      "col-attr-longer", "row-attr-shorter", "cellid-int", "cellid-2d",
                      "no-col-attrs", "matrix-empty", "spec-version"])
    m = f["matrix"][()]
    if kind == "matrix-genes+1":
        write_values(f, "/matrix", np.concatenate([m, m[:1]]))
        return "matrix.genes+1", "error", "X", "/matrix", ""
    if kind == "matrix-cells+1":
        write_values(f, "/matrix", np.concatenate([m, m[:, :1]], axis=1))
        return "matrix.cells+1", "error", "X", "/matrix", ""
    if kind == "matrix-1d":
        write_values(f, "/matrix", m[0])
        return "matrix.1d", "error", "X", "/matrix", ""
    if kind == "matrix-3d":
        write_values(f, "/matrix", m.reshape(m.shape + (1,)))
        return "matrix.3d", "error", "X", "/matrix", ""
    if kind == "matrix-empty":
        write_values(f, "/matrix", m[:0, :0])
        return "matrix.empty", "error", "X", "/matrix", ""
    if kind == "layer-cells+1":
        layer = pick(rng, ["/layers/" + k for k in f["layers"].keys()])
        if layer is None:
            return None
        v = f[layer][()]
        write_values(f, layer, np.concatenate([v, v[:, :1]], axis=1))
        return "%s.cells+1" % slug(layer), "error", s.model_path(layer), layer, ""
    if kind in ("col-attr-longer", "row-attr-shorter"):
        group = "/col_attrs" if kind.startswith("col") else "/row_attrs"
        a = pick(rng, [group + "/" + k for k in f[group].keys()])
        if a is None:
            return None
        v = f[a][()]
        v = np.concatenate([v, v[:1]]) if kind == "col-attr-longer" else v[:-1]
        write_values(f, a, v)
        return "%s.%s" % (slug(a), kind), "error", s.model_path(a), a, ""
    if kind == "cellid-int":
        if "CellID" not in f["col_attrs"]:
            return None
        write_values(f, "/col_attrs/CellID", np.arange(s.n_obs, dtype="<i8"))
        return "col_attrs.CellID-int", "any", "obs", "/col_attrs/CellID", ""
    if kind == "cellid-2d":
        if "CellID" not in f["col_attrs"]:
            return None
        v = f["col_attrs/CellID"][()]
        write_values(f, "/col_attrs/CellID", np.stack([v, v], axis=1))
        return "col_attrs.CellID-2d", "any", "obs", "/col_attrs/CellID", ""
    if kind == "no-col-attrs":
        del f["col_attrs"]
        return "col_attrs.removed", "any", "obs", "/col_attrs", ""
    if kind == "spec-version":
        if "attrs" in f and "LOOM_SPEC_VERSION" in f["attrs"]:
            write_values(f, "/attrs/LOOM_SPEC_VERSION", np.float64(99.5))
        f.attrs["LOOM_SPEC_VERSION"] = np.int64(-1)
        return "loom.spec-version", "any", "", "/", ""
    return None


# -- 10x ------------------------------------------------------------------------------------------

@mutation("10x-shape", 4)
def mutate_10x_shape(f, s, rng):
    """A 10x shape dataset wrong, of another length, rank or type, huge, NaN."""
    path = pick(rng, s.shape_datasets)
    if path is None:
        return None
    shape = f[path][()].astype(np.int64)
    kind = pick(rng, ["cells+1", "cells-1", "features+1", "features-1", "swapped", "negative",
                      "three", "one", "float", "2d", "string", "huge", "zero", "float-huge",
                      "bigendian", "uint8"])
    expect = "error"
    if kind == "cells+1":
        v = np.array([shape[0], shape[1] + 1])
    elif kind == "cells-1":
        v = np.array([shape[0], shape[1] - 1])
    elif kind == "features+1":
        v = np.array([shape[0] + 1, shape[1]])
    elif kind == "features-1":
        v = np.array([shape[0] - 1, shape[1]])
    elif kind == "swapped":
        v = shape[::-1].copy()
    elif kind == "negative":
        v = np.array([shape[0], -shape[1]])
    elif kind == "three":
        v = np.array([shape[0], shape[1], 1])
    elif kind == "one":
        v = np.array([shape[0]])
    elif kind == "float":
        v = shape.astype("<f8")
        expect = "any"
    elif kind == "float-huge":
        v = np.array([1e300, np.nan])
    elif kind == "2d":
        v = np.stack([shape, shape], axis=1)
    elif kind == "string":
        v = np.array([str(x) for x in shape], dtype=object)
    elif kind == "huge":
        v = np.array([shape[0], 1 << 40])
    elif kind == "zero":
        v = np.array([0, 0])
    elif kind == "bigendian":
        v = shape.astype(">i8")
        expect = "same"
    elif kind == "uint8":
        if shape.max() > 255:
            return None
        v = shape.astype("u1")
        expect = "same"
    write_values(f, path, v)
    return "%s.%s" % (slug(path), kind), expect, "X", path, ""


@mutation("10x-names", 3)
def mutate_10x_names(f, s, rng):
    """10x barcodes, feature names and ids of another length, rank or type, or odd bytes."""
    if s.fmt != "10x":
        return None
    group = s.shape_datasets[0].rsplit("/", 1)[0] if s.shape_datasets else None
    if group is None:
        return None
    cands = [p for p in s.datasets if p.startswith(group + "/") and p.rsplit("/", 1)[1] not in
             ("data", "indices", "indptr", "shape")]
    path = pick(rng, cands)
    if path is None:
        return None
    v = f[path][()]
    kind = pick(rng, ["longer", "shorter", "2d", "int", "vlen", "empty", "nul-bytes", "utf8-bad"])
    name = path.rsplit("/", 1)[1]
    core = name in ("barcodes", "name", "gene_names", "id", "genes", "feature_type", "genome")
    expect = "error" if core and kind in ("longer", "shorter", "2d", "empty") else "any"
    if name == "_all_tag_keys":
        expect = "any"
    if kind == "longer":
        v = np.concatenate([v, v[:1]])
    elif kind == "shorter":
        if len(v) == 0:
            return None
        v = v[:-1]
    elif kind == "2d":
        v = np.stack([v, v], axis=1)
    elif kind == "int":
        v = np.arange(len(v), dtype="<i4")
    elif kind == "vlen":
        v = np.array([x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in v],
                     dtype=object)
        expect = "ok"
    elif kind == "empty":
        v = v[:0]
    elif kind == "nul-bytes":
        v = np.array([b"a\x00b" for _ in v], dtype="S4")
    elif kind == "utf8-bad":
        v = np.array([b"\xff\xfe%d" % i for i in range(len(v))], dtype="S6")
    write_values(f, path, v)
    return "%s.%s" % (slug(path), kind), expect, s.model_path(path), path, ""


@mutation("uns", 2)
def mutate_uns(f, s, rng):
    """uns entries: whatever values; the reader must serve or skip them."""
    if s.fmt != "h5ad" or "uns" not in f:
        return None
    kind = pick(rng, ["scalar-compound", "empty-2d", "vlen-2d", "huge-string", "nested-deep",
                      "ref-array", "bool-array", "utf8-bad", "uns-as-dataset", "big-scalar",
                      "string-0d-empty", "records-empty"])
    uns = f["uns"]
    if kind == "scalar-compound":
        uns.create_dataset("fz_scalar", data=np.zeros((), dtype=[("a", "<i4"), ("b", "<f8")]),
                           track_times=False)
    elif kind == "empty-2d":
        uns.create_dataset("fz_empty", data=np.zeros((0, 3), dtype="<f4"), track_times=False)
    elif kind == "vlen-2d":
        uns.create_dataset("fz_vlen2d", data=np.array([["a", "bb"], ["ccc", ""]], dtype=object),
                           dtype=h5py.string_dtype(), track_times=False)
    elif kind == "huge-string":
        uns.create_dataset("fz_huge", data="é" * 100000, dtype=h5py.string_dtype(),
                           track_times=False)
    elif kind == "nested-deep":
        g = uns
        for i in range(40):
            g = require_group(g, "d%d" % i)
        g.create_dataset("leaf", data=np.arange(3), track_times=False)
    elif kind == "ref-array":
        refs = np.array([f["obs"].ref] * 3, dtype=h5py.ref_dtype)
        uns.create_dataset("fz_refs", data=refs, track_times=False)
    elif kind == "bool-array":
        uns.create_dataset("fz_bool", data=np.array([True, False] * 5), track_times=False)
    elif kind == "utf8-bad":
        uns.create_dataset("fz_bad", data=np.array([b"\xff\xfe", b"ok"], dtype="S2"),
                           track_times=False)
    elif kind == "uns-as-dataset":
        del f["uns"]
        f.create_dataset("uns", data=np.arange(5), track_times=False)
    elif kind == "big-scalar":
        uns.create_dataset("fz_big", data=np.uint64(2 ** 64 - 1), track_times=False)
    elif kind == "string-0d-empty":
        uns.create_dataset("fz_empty_string", data="", dtype=h5py.string_dtype(), track_times=False)
    elif kind == "records-empty":
        uns.create_dataset("fz_records", data=np.zeros(0, dtype=[("n", "S3"), ("v", "<f4")]),
                           track_times=False)
    return "uns.%s" % kind, "any", "uns", "/uns", ""


# ---- Driving -----------------------------------------------------------------------------------

def object_references(f, s):
    """Attributes holding an object reference (anndata 0.7 codes -> categories), with the
    path they name."""
    out = []
    for path in s.datasets:
        for k in f[path].attrs.keys():
            v = f[path].attrs[k]
            if isinstance(v, h5py.Reference) and v:
                out.append((path, k, f[v].name))
    return out


def repoint(f, references):
    """A dataset written again is a new object: references to the old one are pointed at it
    (unless the mutation took the reference itself away)."""
    for path, k, target in references:
        if path in f and target in f and k in f[path].attrs and \
                isinstance(f[path].attrs[k], h5py.Reference):
            f[path].attrs[k] = f[target].ref


def presented_10x(path, target):
    """Whether an HDF5 path of a 10x file is under the matrix group zarrmount presents
    (v3: /matrix; v2: the first genome group by name)."""
    with h5py.File(path, "r") as f:
        if "matrix" in f:
            group = "/matrix"
        else:
            groups = sorted(k for k in f.keys() if isinstance(f[k], h5py.Group) and "genes" in f[k])
            group = "/" + groups[0] if groups else "/"
    return target == group or target.startswith(group + "/")


def mutation_names():
    return sorted(MUTATIONS)


def make_one(out_dir, seed, i, bases=None, kinds=None):
    """Writes mutated file i of seed into out_dir; returns its record."""
    rng = random.Random("zarrmount-model %d %d" % (seed, i))
    bases = bases or BASES
    for attempt in range(64):
        short, rel, fmt = bases[rng.randrange(len(bases))]
        names = kinds or mutation_names()
        weights = [MUTATIONS[n][1] for n in names]
        chosen = rng.choices(names, weights)[0]
        ext = os.path.splitext(rel)[1]
        tmp = os.path.join(out_dir, ".partial-%d-%d%s" % (seed, i, ext))
        shutil.copyfile(os.path.join(FIXTURES, rel), tmp)
        result = None
        try:
            with h5py.File(tmp, "r+") as f:
                s = Structure(f, fmt)
                references = object_references(f, s)
                result = MUTATIONS[chosen][0](f, s, rng)
                if result is not None:
                    repoint(f, references)
        except Exception as error:  # a mutation h5py cannot write: try another
            result = None
            if os.environ.get("ZM_MUTATE_DEBUG"):
                print("mutate_sources: %s %s on %s: %r" % (seed, chosen, rel, error), file=sys.stderr)
        if result is None:
            os.remove(tmp)
            continue
        label, expect, element, target, detail = result
        if fmt == "10x" and not presented_10x(os.path.join(FIXTURES, rel), target):
            expect = "any"  # another genome of a v2 file: listed as skipped, never read
        name = "%s.%s.seed%d-%d%s" % (short, label, seed, i, ext)
        if len(name) > 200:
            name = name[:180] + ".seed%d-%d%s" % (seed, i, ext)
        os.replace(tmp, os.path.join(out_dir, name))
        return {"file": name, "base": rel, "mutation": chosen, "label": label, "target": target,
                "element": element, "expect": expect, "detail": detail}
    raise RuntimeError("no mutation applied for seed %d file %d" % (seed, i))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--first", type=int, default=0, help="index of the first file")
    parser.add_argument("--bases", default="", help="comma-separated short names of the bases")
    parser.add_argument("--mutations", default="", help="comma-separated mutation kinds (--list)")
    parser.add_argument("--list", action="store_true", help="print the mutation kinds")
    args = parser.parse_args()
    if args.list:
        for n in mutation_names():
            doc = " ".join((MUTATIONS[n][0].__doc__ or "").split())
            print("%-16s %s" % (n, doc))
        return 0
    if not args.out_dir:
        parser.error("OUT_DIR is needed")
    bases = [b for b in BASES if not args.bases or b[0] in args.bases.split(",")]
    kinds = [k for k in mutation_names() if k in args.mutations.split(",")] if args.mutations else None
    if not bases or (args.mutations and not kinds):
        parser.error("no such base or mutation kind")
    os.makedirs(args.out_dir, exist_ok=True)
    records = [make_one(args.out_dir, args.seed, i, bases, kinds)
               for i in range(args.first, args.first + args.count)]
    path = os.path.join(args.out_dir, "mutations.json")
    with open(path, "w") as out:
        json.dump(records, out, indent=1, sort_keys=True)
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
