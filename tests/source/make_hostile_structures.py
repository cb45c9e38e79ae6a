#!/usr/bin/python3
"""Write sources whose structure is hostile: link cycles, lattices, deep nesting, wide groups,
and sizes a file claims but does not store (issue 17, "Bounded work on any structure").

    /usr/bin/python3 tests/source/make_hostile_structures.py OUT_DIR [--only NAME...]
                                                             [--columns N] [--keys N]

Writes into OUT_DIR (one line printed per file):

  cycle.h5ad           uns/g/up is a soft link to /uns and uns/g/hard a hard link to /uns (a
                       cycle through both kinds), uns/g/self a soft link to uns/g; uns/g/v a
                       dataset with a second hard link uns/v_again.
  lattice.h5ad         a 30-level diamond lattice of hard links in uns: group i holds a and b,
                       both links to group i + 1 (2^30 paths to the last group, 31 groups).
  deep.h5ad            12,000 nested groups uns/deep/d/d/...; uns/long: groups with 200-byte
                       names until a path passes what a mount holds; uns/edge: a dataframe
                       whose path is 767 bytes with a 255-byte index name, a group of 768;
                       uns/<300-byte name>; two names sharing their first 511 bytes.
  wide-obs.h5ad        obs with --columns columns (60,000): int8 columns, every 100th a
                       categorical; column c00001 listed twice in column-order.
  wide-uns.h5ad        uns/many, a dict of --keys keys (100,000), each a small int array.
  claim-obs-index.h5ad obs/_index claims 10^9 rows, chunked, no chunk written (X a CSR matrix
                       of 10^9 rows whose indptr claims as much).
  claim-x.h5ad         a 100-cell obs, and an X claiming 10^9 x 10 float32 values,
                       contiguous and never allocated.
  claim-x.loom         /matrix claims 10 genes x 10^9 cells, chunked, no chunk written, and
                       col_attrs has no CellID (a reader would name 10^9 cells itself).
  claim-cells.10x.h5   a 10x v3 matrix whose shape says 10^9 barcodes; barcodes and indptr
                       claim as many, chunked, nothing written.
  claim-categories.h5ad  obs/kind a categorical whose categories claim 10^9 strings.
  claim-uns.h5ad       uns/big claims 10^12 float64 values, chunked, nothing written.
  holes.h5ad           X (1000 x 10, chunks of 10 rows) with one chunk in 8 written: chunks
                       left to the fill value within the bound (served as HDF5 reads them).
  claim-holes.h5ad     uns/sparse claims 2^31 int8 values in 2^21 chunks, one written (the file
                       3 MB: more bytes than chunks claimed).

Only Debian's python3 with h5py 3.7 and numpy; the anndata 0.8 layout (encoding-type and
encoding-version attributes, as fixtures/generate-sources.py writes it). Deterministic: no
randomness, no timestamps (track_times off). Wide groups are written with h5py's low-level
API (60,000 datasets in about two seconds rather than fifteen).
"""

import argparse
import os
import sys

import h5py
import numpy as np
from h5py import h5a, h5d, h5p, h5s, h5t

BILLION = 10**9
N_OBS, N_VARS = 20, 10


def fixed_string_type(text):
    t = h5t.C_S1.copy()
    t.set_size(max(1, len(text)))
    t.set_cset(h5t.CSET_UTF8)
    return t


class Writer:
    """Datasets and attributes the fast way: one dataset creation plist (no times), string
    attribute types made once."""

    def __init__(self):
        self.dcpl = h5p.create(h5p.DATASET_CREATE)
        self.dcpl.set_obj_track_times(False)
        self.scalar = h5s.create(h5s.SCALAR)
        self.types = {}

    def attr(self, obj, name, text):
        if text not in self.types:
            self.types[text] = fixed_string_type(text)
        a = h5a.create(obj, name.encode(), self.types[text], self.scalar)
        a.write(np.array(text.encode()), mtype=self.types[text])

    def encoded(self, obj, kind, version):
        self.attr(obj, "encoding-type", kind)
        self.attr(obj, "encoding-version", version)

    def array(self, group, name, values, kind="array"):
        values = np.ascontiguousarray(values)
        space = h5s.create_simple(values.shape) if values.shape else self.scalar
        tid = h5t.py_create(values.dtype, logical=True)
        d = h5d.create(group.id, name.encode() if isinstance(name, str) else name, tid, space,
                       dcpl=self.dcpl)
        d.write(h5s.ALL, h5s.ALL, values)
        self.encoded(d, kind, "0.2.0")
        return d


W = None


def strings(values):
    return np.array(values, dtype=h5py.string_dtype())


def new_file(path, libver=("earliest", "v108")):
    if os.path.exists(path):
        os.remove(path)
    f = h5py.File(path, "w", libver=libver, track_order=False)
    f.attrs["encoding-type"] = "anndata"
    f.attrs["encoding-version"] = "0.1.0"
    return f


def dataframe(f, name, index, columns=None, order=None):
    g = f.create_group(name, track_order=False)
    g.attrs["_index"] = "_index"
    g.attrs["column-order"] = strings(order if order is not None else (columns or []))
    g.attrs["encoding-type"] = "dataframe"
    g.attrs["encoding-version"] = "0.2.0"
    d = g.create_dataset("_index", data=strings(index), track_times=False)
    d.attrs["encoding-type"] = "string-array"
    d.attrs["encoding-version"] = "0.2.0"
    return g


def dict_group(parent, name):
    g = parent.create_group(name, track_order=False)
    g.attrs["encoding-type"] = "dict"
    g.attrs["encoding-version"] = "0.1.0"
    return g


def categorical(parent, name, codes, categories):
    g = parent.create_group(name, track_order=False)
    g.attrs["encoding-type"] = "categorical"
    g.attrs["encoding-version"] = "0.2.0"
    g.attrs["ordered"] = False
    c = g.create_dataset("codes", data=np.asarray(codes, dtype=np.int8), track_times=False)
    c.attrs["encoding-type"] = "array"
    c.attrs["encoding-version"] = "0.2.0"
    k = g.create_dataset("categories", data=strings(categories), track_times=False)
    k.attrs["encoding-type"] = "string-array"
    k.attrs["encoding-version"] = "0.2.0"
    return g


def standard(f, n_obs=N_OBS, n_vars=N_VARS, obs=True, x=True):
    """var, X (dense float32, value = row * 100 + column), the empty mappings; obs unless
    the caller makes its own."""
    if obs:
        dataframe(f, "obs", [f"cell{i}" for i in range(n_obs)])
    dataframe(f, "var", [f"gene{j}" for j in range(n_vars)])
    if x:
        values = (np.arange(n_obs)[:, None] * 100 + np.arange(n_vars)[None, :]).astype(np.float32)
        d = f.create_dataset("X", data=values, track_times=False)
        d.attrs["encoding-type"] = "array"
        d.attrs["encoding-version"] = "0.2.0"
    for name in ("layers", "obsm", "varm", "obsp", "varp"):
        dict_group(f, name)


def done(out, name):
    print(f"wrote {name} ({os.path.getsize(os.path.join(out, name))} bytes)")


# ---- Links --------------------------------------------------------------------------------

def write_cycle(out):
    name = "cycle.h5ad"
    with new_file(os.path.join(out, name)) as f:
        standard(f)
        uns = dict_group(f, "uns")
        g = dict_group(uns, "g")
        W.array(g, "v", np.arange(5, dtype=np.int32))
        g["up"] = h5py.SoftLink("/uns")
        g["hard"] = uns  # a second hard link to /uns, inside it
        g["self"] = h5py.SoftLink("/uns/g")
        uns["v_again"] = g["v"]  # one dataset, two names
        W.array(uns, "w", np.arange(3, dtype=np.int64))
    done(out, name)


def write_lattice(out, levels=30):
    name = "lattice.h5ad"
    with new_file(os.path.join(out, name)) as f:
        standard(f)
        uns = dict_group(f, "uns")
        group = dict_group(uns, "lattice")
        for level in range(levels):
            W.array(group, "level", np.array(level, dtype=np.int32), kind="numeric-scalar")
            below = dict_group(group, "a")
            group["b"] = below
            group = below
        W.array(group, "bottom", np.arange(4, dtype=np.int16))
    done(out, name)


def write_deep(out, depth=12000):
    name = "deep.h5ad"
    with new_file(os.path.join(out, name)) as f:
        standard(f)
        uns = dict_group(f, "uns")
        g = dict_group(uns, "deep")
        for level in range(depth):
            W.array(g, "at", np.array(level, dtype=np.int32), kind="numeric-scalar")
            g = g.create_group("d", track_order=False)
        # Long names: 200 bytes a level, until a path is longer than a mount holds.
        g = dict_group(uns, "long")
        for level in range(6):
            W.array(g, "at", np.array(level, dtype=np.int32), kind="numeric-scalar")
            g = dict_group(g, chr(ord("a") + level) * 200)
        # At the edge: a dataframe whose path is 767 bytes (the longest an element may have)
        # with an index named in 255 bytes (a store path of 1022 bytes), and a group whose
        # path is 768 bytes.
        g = dict_group(dict_group(dict_group(uns, "edge"), "e" * 255), "f" * 255)
        frame = g.create_group("g" * 245, track_order=False)
        frame.attrs["_index"] = "i" * 255
        frame.attrs["column-order"] = strings([])
        frame.attrs["encoding-type"] = "dataframe"
        frame.attrs["encoding-version"] = "0.2.0"
        index = frame.create_dataset("i" * 255, data=strings(["r0", "r1", "r2"]), track_times=False)
        index.attrs["encoding-type"] = "string-array"
        index.attrs["encoding-version"] = "0.2.0"
        dict_group(g, "h" * 246)
        # A name longer than a file name may be, and two that share their first 511 bytes
        # (a reader that cut names at 511 bytes would read one for the other).
        W.array(uns, "n" * 300, np.arange(3, dtype=np.int8))
        W.array(uns, "p" * 511, np.array([1, 1, 1], dtype=np.int8))
        W.array(uns, "p" * 511 + "q", np.array([2, 2, 2], dtype=np.int8))
    done(out, name)


# ---- Wide groups --------------------------------------------------------------------------

def column_name(i):
    return f"c{i:05d}" if i < 100000 else f"c{i}"


def write_wide_obs(out, columns=60000, name="wide-obs.h5ad"):
    # The column-order attribute of 60,000 names is larger than 64 KiB: dense attribute
    # storage, which needs the 1.8 object header format.
    with new_file(os.path.join(out, name), libver=("v108", "v108")) as f:
        standard(f, obs=False)
        names = [column_name(i) for i in range(columns)]
        g = dataframe(f, "obs", [f"cell{i}" for i in range(N_OBS)],
                      order=names + ([names[1]] if columns > 1 else []))
        rows = np.arange(N_OBS)
        for i, column in enumerate(names):
            if i % 100 == 99:
                categorical(g, column, (rows + i) % 3, ["x", "y", "z"])
            else:
                W.array(g, column, ((rows + i) % 128).astype(np.int8))
        dict_group(f, "uns")
    done(out, name)


def write_wide_uns(out, keys=100000, name="wide-uns.h5ad"):
    with new_file(os.path.join(out, name), libver=("v108", "v108")) as f:
        standard(f)
        uns = dict_group(f, "uns")
        many = dict_group(uns, "many")
        for i in range(keys):
            W.array(many, f"k{i:06d}", np.array([i, i + 1], dtype=np.int32))
    done(out, name)


# ---- Claims -------------------------------------------------------------------------------

def unwritten(parent, name, shape, dtype, chunks=None, kind="array"):
    """A dataset of this shape with no value written: chunked (no chunk allocated) or
    contiguous (allocated late: never)."""
    d = parent.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks, track_times=False)
    d.attrs["encoding-type"] = kind
    d.attrs["encoding-version"] = "0.2.0"
    return d


def write_claim_obs_index(out):
    name = "claim-obs-index.h5ad"
    with new_file(os.path.join(out, name)) as f:
        g = f.create_group("obs")
        g.attrs["_index"] = "_index"
        g.attrs["column-order"] = strings([])
        g.attrs["encoding-type"] = "dataframe"
        g.attrs["encoding-version"] = "0.2.0"
        unwritten(g, "_index", (BILLION,), h5py.string_dtype(), chunks=(1 << 20,),
                  kind="string-array")
        standard(f, n_obs=BILLION, obs=False, x=False)
        x = f.create_group("X")
        x.attrs["encoding-type"] = "csr_matrix"
        x.attrs["encoding-version"] = "0.1.0"
        x.attrs["shape"] = np.array([BILLION, N_VARS], dtype=np.int64)
        for part, n, dtype in (("data", 0, np.float32), ("indices", 0, np.int32),
                               ("indptr", BILLION + 1, np.int64)):
            x.create_dataset(part, shape=(n,), dtype=dtype, chunks=(1 << 20,), maxshape=(None,),
                             track_times=False)
        dict_group(f, "uns")
    done(out, name)


def write_claim_x(out):
    name = "claim-x.h5ad"
    with new_file(os.path.join(out, name)) as f:
        dataframe(f, "obs", [f"cell{i}" for i in range(100)])
        standard(f, n_obs=100, obs=False, x=False)
        unwritten(f, "X", (BILLION, N_VARS), np.float32)
        dict_group(f, "uns")
    done(out, name)


def write_claim_loom(out):
    name = "claim-x.loom"
    path = os.path.join(out, name)
    if os.path.exists(path):
        os.remove(path)
    with h5py.File(path, "w") as f:
        f.create_dataset("matrix", shape=(N_VARS, BILLION), dtype=np.float32,
                         chunks=(N_VARS, 1 << 16), track_times=False)
        f.create_group("layers")
        rows = f.create_group("row_attrs")
        rows.create_dataset("Gene", data=strings([f"gene{j}" for j in range(N_VARS)]),
                            track_times=False)
        f.create_group("col_attrs")
        f.create_group("row_graphs")
        f.create_group("col_graphs")
        f.attrs["LOOM_SPEC_VERSION"] = "3.0.0"
    done(out, name)


def write_claim_10x(out):
    name = "claim-cells.10x.h5"
    path = os.path.join(out, name)
    if os.path.exists(path):
        os.remove(path)
    with h5py.File(path, "w") as f:
        m = f.create_group("matrix")
        m.create_dataset("barcodes", shape=(BILLION,), dtype="S18", chunks=(1 << 16,),
                         track_times=False)
        m.create_dataset("data", shape=(0,), dtype=np.int32, chunks=(1 << 16,),
                         maxshape=(None,), track_times=False)
        m.create_dataset("indices", shape=(0,), dtype=np.int64, chunks=(1 << 16,),
                         maxshape=(None,), track_times=False)
        m.create_dataset("indptr", shape=(BILLION + 1,), dtype=np.int64, chunks=(1 << 16,),
                         track_times=False)
        m.create_dataset("shape", data=np.array([N_VARS, BILLION], dtype=np.int32),
                         track_times=False)
        features = m.create_group("features")
        features.create_dataset("id", data=np.array([f"ENSG{j:05d}" for j in range(N_VARS)],
                                                    dtype="S9"), track_times=False)
        features.create_dataset("name", data=np.array([f"gene{j}" for j in range(N_VARS)],
                                                      dtype="S8"), track_times=False)
        features.create_dataset("feature_type", data=np.array([b"Gene Expression"] * N_VARS),
                                track_times=False)
        features.create_dataset("genome", data=np.array([b"GRCh38"] * N_VARS),
                                track_times=False)
    done(out, name)


def write_claim_categories(out):
    name = "claim-categories.h5ad"
    with new_file(os.path.join(out, name)) as f:
        g = dataframe(f, "obs", [f"cell{i}" for i in range(N_OBS)], columns=["kind"])
        c = g.create_group("kind")
        c.attrs["encoding-type"] = "categorical"
        c.attrs["encoding-version"] = "0.2.0"
        c.attrs["ordered"] = False
        codes = c.create_dataset("codes", data=np.zeros(N_OBS, dtype=np.int8), track_times=False)
        codes.attrs["encoding-type"] = "array"
        codes.attrs["encoding-version"] = "0.2.0"
        unwritten(c, "categories", (BILLION,), h5py.string_dtype(), chunks=(1 << 16,),
                  kind="string-array")
        standard(f, obs=False)
        dict_group(f, "uns")
    done(out, name)


def write_claim_uns(out):
    name = "claim-uns.h5ad"
    with new_file(os.path.join(out, name)) as f:
        standard(f)
        uns = dict_group(f, "uns")
        unwritten(uns, "big", (10**12,), np.float64, chunks=(1 << 17,))
    done(out, name)


def write_holes(out):
    name = "holes.h5ad"
    with new_file(os.path.join(out, name)) as f:
        standard(f, n_obs=1000, x=False)
        # One chunk in 8 written, the others left to the fill value (HDF5's own way of storing
        # zeros): 174 KB unstored, within the bound, served as HDF5 reads them.
        x = f.create_dataset("X", shape=(1000, N_VARS), dtype=np.float32, chunks=(10, N_VARS),
                             fillvalue=0, track_times=False)
        x.attrs["encoding-type"] = "array"
        x.attrs["encoding-version"] = "0.2.0"
        for c in range(0, 100, 8):
            rows = np.arange(c * 10, c * 10 + 10)
            x[c * 10:c * 10 + 10] = (rows[:, None] * 100 + np.arange(N_VARS)[None, :]).astype(np.float32)
        dict_group(f, "uns")
    done(out, name)


def write_claim_holes(out):
    name = "claim-holes.h5ad"
    with new_file(os.path.join(out, name)) as f:
        standard(f)
        uns = dict_group(f, "uns")
        # 3 MB of the file's own, so that 2^21 chunks are not more than the file has bytes:
        # the bound that refuses is then the unwritten chunks' (one of 2^21 written).
        W.array(uns, "padding", (np.arange(3 << 20) % 251).astype(np.uint8))
        sparse = unwritten(uns, "sparse", (1 << 31,), np.int8, chunks=(1024,))
        sparse[0:1024] = 1
    done(out, name)


WRITERS = {
    "cycle": write_cycle,
    "lattice": write_lattice,
    "deep": write_deep,
    "wide-obs": None,  # takes --columns
    "wide-uns": None,  # takes --keys
    "claim-obs-index": write_claim_obs_index,
    "claim-x": write_claim_x,
    "claim-x-loom": write_claim_loom,
    "claim-cells-10x": write_claim_10x,
    "claim-categories": write_claim_categories,
    "claim-uns": write_claim_uns,
    "holes": write_holes,
    "claim-holes": write_claim_holes,
}


def main():
    global W
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--only", nargs="*", choices=sorted(WRITERS), default=None)
    parser.add_argument("--columns", type=int, default=60000)
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--name", default=None, help="the file name (with one of --only)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    W = Writer()
    for what in args.only if args.only is not None else WRITERS:
        if what == "wide-obs":
            write_wide_obs(args.out, args.columns, args.name or "wide-obs.h5ad")
        elif what == "wide-uns":
            write_wide_uns(args.out, args.keys, args.name or "wide-uns.h5ad")
        else:
            WRITERS[what](args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
