#!/usr/bin/python3
"""Write the benchmark source: a synthetic 1,000,000-cell x 2,000-gene CSR .h5ad, twice.

    /usr/bin/python3 bench/make_synthetic_h5ad.py OUT_DIR [--cells N] [--genes M] [--per-cell K]

writes, in OUT_DIR,
    synthetic-1M-uncompressed.h5ad   X/data, X/indices, X/indptr contiguous, no filter
    synthetic-1M-gzip4.h5ad          the same values, chunks of 65,536 entries, deflate level 4
and prints the time it took and the file sizes.  (With --cells the names say the cell count,
e.g. synthetic-10K-*.h5ad; use a small --cells to try the script quickly.)

The object (anndata 0.8 encoding; everything but X is written by anndata's own write_elem):
  X        CSR float32, small integer counts (1 + Poisson(0.7)); about 100 stored values per
           cell (about 1e8 in all); indices int32 sorted ascending within each row; indptr
           int64; genes drawn with skewed (log-normal) weights, so some genes are common
  obs      index cell_0000000...; sample: categorical, 20 samples sample_00..sample_19, the
           cells of one sample contiguous in file order, sizes and sequencing depths differing
           by sample; n_genes int32, n_counts float32 (row sums), percent_mito float32
  var      index gene_0000...; highly_variable bool
  obsm     X_umap float32 (n, 2): one blob per sample
  layers, obsp, varm, varp, uns: empty

Values are generated in blocks of 50,000 cells from numpy Generators seeded (SEED, block), in
two passes (counts first, so the datasets can be created contiguous at their final size, then
values), written to both files in the same pass, each write aligned to the 65,536-entry chunks
of the gzip file.  Peak memory stays well under 1 GB.  The output is deterministic.

Above 10,000,000 cells (or with --stream) nothing is held a cell: indptr and the obs columns are
written in blocks as they are made, obs and obsm with h5py in the encoding anndata 0.8 gives
them (the same values and attributes; checked at 10,000 and 120,000 cells against this path).

Do not commit its output (about 0.8 GB uncompressed).
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np
import pandas as pd
import h5py

SEED = 20240607
N_SAMPLES = 20
BLOCK = 50_000
CHUNK = 65_536


def sizes_label(n):
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1000 == 0:
        return f"{n // 1000}K"
    return str(n)


class Design:
    """Everything per cell / per gene that is not X itself."""

    def __init__(self, n_cells, n_genes, per_cell):
        r = np.random.default_rng([SEED, 0])
        self.n_cells, self.n_genes = n_cells, n_genes
        w = r.uniform(0.5, 1.5, size=N_SAMPLES)
        sizes = np.floor(w / w.sum() * n_cells).astype(np.int64)
        sizes[: n_cells - sizes.sum()] += 1
        self.sample_sizes = sizes
        self.sample_starts = np.concatenate([[0], np.cumsum(sizes)])
        self.sample_depth = r.uniform(0.7, 1.3, size=N_SAMPLES)
        g = r.lognormal(0.0, 1.2, size=n_genes)
        self.gene_p = g / g.sum()
        # the mean number of draws per cell, a little above per_cell to make up for repeats
        self.draws = per_cell * 1.06
        self.centers = r.normal(scale=10.0, size=(N_SAMPLES, 2))

    @property
    def sample_codes(self):
        """The sample code of every cell (int8; n bytes)."""
        return self.codes(0, self.n_cells)

    def codes(self, lo, hi):
        """The sample codes of cells lo..hi (the cells of one sample are contiguous)."""
        s = self.sample_starts
        first = np.searchsorted(s, lo, side="right") - 1
        last = np.searchsorted(s, hi, side="left")
        reps = np.minimum(s[first + 1:last + 1], hi) - np.maximum(s[first:last], lo)
        return np.repeat(np.arange(first, last, dtype=np.int8), reps)


def block_columns(design, b):
    """(row within block, column) of the stored values of block b, sorted by row then
    column, plus the block's generator (to draw the values from afterwards)."""
    start = b * BLOCK
    stop = min(start + BLOCK, design.n_cells)
    n = stop - start
    r = np.random.default_rng([SEED, 1 + b])
    depth = design.sample_depth[design.codes(start, stop)]
    lam = design.draws * depth * r.lognormal(0.0, 0.25, size=n)
    k = r.poisson(lam)
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    cols = r.choice(design.n_genes, size=int(k.sum()), p=design.gene_p)
    keys = np.unique(rows * design.n_genes + cols)  # sorted, repeats removed
    return keys // design.n_genes, (keys % design.n_genes).astype(np.int32), n, r


class AlignedWriter:
    """Appends to a 1-D dataset, writing only whole multiples of `align` entries (except at
    the end), so that every chunk of a compressed dataset is written once."""

    def __init__(self, datasets, dtype, align):
        self.datasets, self.align = datasets, align
        self.buf = np.empty(0, dtype=dtype)
        self.pos = 0

    def add(self, values, final=False):
        buf = np.concatenate([self.buf, values]) if len(self.buf) else values
        n = len(buf) if final else (len(buf) // self.align) * self.align
        if n:
            for ds in self.datasets:
                ds[self.pos:self.pos + n] = buf[:n]
            self.pos += n
        self.buf = buf[n:].copy()

    def close(self):
        self.add(np.empty(0, dtype=self.buf.dtype), final=True)


def anndata_writer():
    """anndata's own write_elem (or, without anndata, tests/integration/h5ad_writer.py's)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anndata.experimental warns that pytorch is missing
            from anndata.experimental import write_elem
    except ImportError:
        # Debian 13 packages no anndata: the same layout written with h5py by the tests'
        # writer (checked against anndata's own where it is installed).
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                        "integration"))
        import h5ad_writer

        def write_elem(group, key, value):
            h5ad_writer.write_elem(group, key, value, {})
    return write_elem


def write_rest(f, design, n_genes_per_cell, n_counts):
    """obs, var, obsm and the empty mappings, through anndata's own writer (or, without
    anndata, tests/integration/h5ad_writer.py)."""
    write_elem = anndata_writer()
    r = np.random.default_rng([SEED, 10_000])
    n = design.n_cells
    obs = pd.DataFrame(
        {
            "sample": pd.Categorical.from_codes(design.sample_codes,
                                                [f"sample_{i:02d}" for i in range(N_SAMPLES)]),
            "n_genes": n_genes_per_cell.astype(np.int32),
            "n_counts": n_counts.astype(np.float32),
            "percent_mito": r.beta(2.0, 30.0, size=n).astype(np.float32),
        },
        index=pd.Index([f"cell_{i:07d}" for i in range(n)]),
    )
    var = pd.DataFrame(
        {"highly_variable": np.argsort(np.argsort(-design.gene_p)) < design.n_genes // 10},
        index=pd.Index([f"gene_{j:04d}" for j in range(design.n_genes)]),
    )
    umap = (design.centers[design.sample_codes] + r.normal(size=(n, 2))).astype(np.float32)
    write_elem(f, "obs", obs)
    write_elem(f, "var", var)
    write_elem(f, "obsm", {"X_umap": umap})
    for k in ("layers", "obsp", "varm", "varp", "uns"):
        write_elem(f, k, {})


# -- the streaming path (--stream; on by itself above STREAM_ABOVE cells) ------------------------
# At 10^8 cells the per-cell arrays of the path above (counts, indptr, n_counts: 8 B a cell each)
# and pandas' obs (10^8 Python strings) do not fit in bounded memory; here nothing is held a
# cell: indptr and obs/n_genes are written in pass 1, obs/n_counts in pass 2, then the obs index,
# sample codes, percent_mito and obsm/X_umap in blocks of STREAM_BLOCK cells, with the encoding
# attributes anndata 0.8's write_elem gives them (checked against it: --cells 10000 both ways, read
# with anndata.read_h5ad, obs and obsm equal).  The values are the same as the path above's (the
# same generators, drawn in the same order).

STREAM_ABOVE = 10_000_000
STREAM_BLOCK = 1_000_000


def _spec(node, kind, version):
    node.attrs["encoding-type"] = kind
    node.attrs["encoding-version"] = version


def _array(group, key, shape, dtype):
    ds = group.create_dataset(key, shape=shape, dtype=dtype)
    _spec(ds, "array", "0.2.0")
    return ds


def _strings(group, key, n):
    ds = group.create_dataset(key, shape=(n,), dtype=h5py.string_dtype("utf-8"))
    _spec(ds, "string-array", "0.2.0")
    return ds


def stream_blocks(n, size):
    for lo in range(0, n, size):
        yield lo, min(lo + size, n)


def write_streaming(args, design, paths, t0, block=STREAM_BLOCK):
    n, n_blocks = args.cells, (args.cells + BLOCK - 1) // BLOCK
    files = {k: h5py.File(v, "w") for k, v in paths.items()}
    ds, obs = {}, {}
    for k, f in files.items():
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        g = f.create_group("X")
        g.attrs["encoding-type"] = "csr_matrix"
        g.attrs["encoding-version"] = "0.1.0"
        g.attrs["shape"] = np.array([n, args.genes], dtype=np.int64)
        kw = {} if k == "uncompressed" else {"compression": "gzip", "compression_opts": 4,
                                             "chunks": (min(CHUNK, n + 1),)}
        ds[k, "indptr"] = g.create_dataset("indptr", shape=(n + 1,), dtype=np.int64, **kw)
        o = f.create_group("obs")
        o.attrs["_index"] = "_index"
        o.attrs["column-order"] = ["sample", "n_genes", "n_counts", "percent_mito"]
        _spec(o, "dataframe", "0.2.0")
        obs[k] = o
        for name, dt in (("n_genes", np.int32), ("n_counts", np.float32)):
            ds[k, name] = _array(o, name, (n,), dt)

    # pass 1: stored values per cell, written as indptr and obs/n_genes
    ptr_w = AlignedWriter([ds[k, "indptr"] for k in files], np.int64, CHUNK)
    ptr_w.add(np.zeros(1, dtype=np.int64))
    nnz = 0
    for b in range(n_blocks):
        rows, _, m, _ = block_columns(design, b)
        c = np.bincount(rows, minlength=m)
        ptr_w.add(nnz + np.cumsum(c))
        nnz += int(c.sum())
        for k in files:
            ds[k, "n_genes"][b * BLOCK:b * BLOCK + m] = c.astype(np.int32)
        if (b + 1) % 200 == 0:
            print(f"  pass 1: {min((b + 1) * BLOCK, n):,} cells, {time.time() - t0:.1f} s", flush=True)
    ptr_w.close()
    assert ptr_w.pos == n + 1
    print(f"pass 1: {nnz:,} stored values ({nnz / n:.1f} per cell), {time.time() - t0:.1f} s", flush=True)

    for k, f in files.items():
        kw = {} if k == "uncompressed" else {"compression": "gzip", "compression_opts": 4}
        for name, dt in (("data", np.float32), ("indices", np.int32)):
            chunks = None if k == "uncompressed" else (min(CHUNK, max(nnz, 1)),)
            ds[k, name] = f["X"].create_dataset(name, shape=(nnz,), dtype=dt, chunks=chunks, **kw)

    # pass 2: columns again (same generators), values, and the writes
    data_w = AlignedWriter([ds[k, "data"] for k in files], np.float32, CHUNK)
    idx_w = AlignedWriter([ds[k, "indices"] for k in files], np.int32, CHUNK)
    check = ds["uncompressed", "n_genes"]
    for b in range(n_blocks):
        rows, cols, m, r = block_columns(design, b)
        vals = (1 + r.poisson(0.7, size=len(cols))).astype(np.float32)
        lo = b * BLOCK
        if not np.array_equal(np.bincount(rows, minlength=m), check[lo:lo + m]):
            sys.exit("internal error: pass 2 disagrees with pass 1")
        counts = np.bincount(rows, weights=vals, minlength=m).astype(np.float32)
        for k in files:
            ds[k, "n_counts"][lo:lo + m] = counts
        data_w.add(vals)
        idx_w.add(cols)
        if (b + 1) % 40 == 0 or b + 1 == n_blocks:
            print(f"  {min((b + 1) * BLOCK, n):,} cells written, {time.time() - t0:.1f} s", flush=True)
    data_w.close()
    idx_w.close()
    assert data_w.pos == nnz and idx_w.pos == nnz

    # obs: the index, sample (categorical), percent_mito; then obsm/X_umap, from the generator
    # the path above uses, drawn in the same order (all of percent_mito, then all of X_umap)
    index, codes, mito, umap = {}, {}, {}, {}
    for k, f in files.items():
        o = obs[k]
        index[k] = _strings(o, "_index", n)
        cat = o.create_group("sample")
        _spec(cat, "categorical", "0.2.0")
        cat.attrs["ordered"] = False
        codes[k] = _array(cat, "codes", (n,), np.int8)
        names = _strings(cat, "categories", N_SAMPLES)
        names[:] = np.array([f"sample_{i:02d}" for i in range(N_SAMPLES)], dtype=object)
        mito[k] = _array(o, "percent_mito", (n,), np.float32)
        m = f.create_group("obsm")
        _spec(m, "dict", "0.1.0")
        umap[k] = _array(m, "X_umap", (n, 2), np.float32)
    r = np.random.default_rng([SEED, 10_000])
    for lo, hi in stream_blocks(n, block):
        names = np.array([f"cell_{i:07d}" for i in range(lo, hi)], dtype=object)
        c = design.codes(lo, hi)
        p = r.beta(2.0, 30.0, size=hi - lo).astype(np.float32)
        for k in files:
            index[k][lo:hi] = names
            codes[k][lo:hi] = c
            mito[k][lo:hi] = p
    print(f"  obs written, {time.time() - t0:.1f} s", flush=True)
    for lo, hi in stream_blocks(n, block):
        u = (design.centers[design.codes(lo, hi)] + r.normal(size=(hi - lo, 2))).astype(np.float32)
        for k in files:
            umap[k][lo:hi] = u
    print(f"  obsm written, {time.time() - t0:.1f} s", flush=True)

    # var and the empty mappings through anndata's writer, as the path above
    write_elem = anndata_writer()
    var = pd.DataFrame(
        {"highly_variable": np.argsort(np.argsort(-design.gene_p)) < design.n_genes // 10},
        index=pd.Index([f"gene_{j:04d}" for j in range(design.n_genes)]),
    )
    for f in files.values():
        write_elem(f, "var", var)
        for k in ("layers", "obsp", "varm", "varp", "uns"):
            write_elem(f, k, {})
        f.close()
    return nnz


def write_whole(args, design, paths, t0):
    """The path of the 1M files: per-cell arrays held whole, the rest by anndata's writer."""
    n_blocks = (args.cells + BLOCK - 1) // BLOCK

    # pass 1: stored values per cell
    counts = np.zeros(args.cells, dtype=np.int64)
    for b in range(n_blocks):
        rows, _, n, _ = block_columns(design, b)
        counts[b * BLOCK:b * BLOCK + n] = np.bincount(rows, minlength=n)
    indptr = np.zeros(args.cells + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    print(f"pass 1: {nnz:,} stored values ({nnz / args.cells:.1f} per cell), "
          f"{time.time() - t0:.1f} s", flush=True)

    files = {k: h5py.File(v, "w") for k, v in paths.items()}
    ds = {}
    for k, f in files.items():
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        g = f.create_group("X")
        g.attrs["encoding-type"] = "csr_matrix"
        g.attrs["encoding-version"] = "0.1.0"
        g.attrs["shape"] = np.array([args.cells, args.genes], dtype=np.int64)
        kw = {} if k == "uncompressed" else {"compression": "gzip", "compression_opts": 4}
        for name, dt, length in (("data", np.float32, nnz), ("indices", np.int32, nnz),
                                 ("indptr", np.int64, args.cells + 1)):
            chunks = None if k == "uncompressed" else (min(CHUNK, max(length, 1)),)
            ds[k, name] = g.create_dataset(name, shape=(length,), dtype=dt, chunks=chunks, **kw)
    for k in files:
        ds[k, "indptr"][:] = indptr

    # pass 2: columns again (same generators), values, and the writes
    data_w = AlignedWriter([ds[k, "data"] for k in files], np.float32, CHUNK)
    idx_w = AlignedWriter([ds[k, "indices"] for k in files], np.int32, CHUNK)
    n_counts = np.zeros(args.cells, dtype=np.float64)
    for b in range(n_blocks):
        rows, cols, n, r = block_columns(design, b)
        vals = (1 + r.poisson(0.7, size=len(cols))).astype(np.float32)
        lo = b * BLOCK
        if not np.array_equal(np.bincount(rows, minlength=n), counts[lo:lo + n]):
            sys.exit("internal error: pass 2 disagrees with pass 1")
        n_counts[lo:lo + n] = np.bincount(rows, weights=vals, minlength=n)
        data_w.add(vals)
        idx_w.add(cols)
        if (b + 1) % 4 == 0 or b + 1 == n_blocks:
            print(f"  {min((b + 1) * BLOCK, args.cells):,} cells written, "
                  f"{time.time() - t0:.1f} s", flush=True)
    data_w.close()
    idx_w.close()
    assert data_w.pos == nnz and idx_w.pos == nnz
    for f in files.values():
        write_rest(f, design, counts, n_counts)
        f.close()
    return nnz


def main(argv):
    p = argparse.ArgumentParser(description="Write the synthetic benchmark .h5ad files.")
    p.add_argument("out_dir")
    p.add_argument("--cells", type=int, default=1_000_000)
    p.add_argument("--genes", type=int, default=2_000)
    p.add_argument("--per-cell", type=float, default=100.0)
    p.add_argument("--stream", action="store_true",
                   help=f"write in bounded memory, nothing held a cell (on by itself above "
                        f"{STREAM_ABOVE:,} cells; the same values, another layout in the file)")
    p.add_argument("--stream-block", type=int, default=STREAM_BLOCK, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cells > STREAM_ABOVE:
        args.stream = True
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.time()
    design = Design(args.cells, args.genes, args.per_cell)
    label = sizes_label(args.cells)
    paths = {
        "uncompressed": os.path.join(args.out_dir, f"synthetic-{label}-uncompressed.h5ad"),
        "gzip4": os.path.join(args.out_dir, f"synthetic-{label}-gzip4.h5ad"),
    }
    if args.stream:
        nnz = write_streaming(args, design, paths, t0, args.stream_block)
    else:
        nnz = write_whole(args, design, paths, t0)
    elapsed = time.time() - t0

    # it must read with anndata (backed), and both files must hold the same values
    try:
        if args.cells > STREAM_ABOVE:
            raise ImportError("backed mode reads obs whole")
        import anndata as ad
    except ImportError as e:
        ad = None
        print(f"the files were not read back with anndata ({e}): first rows checked with h5py")
        first = None
        for path in paths.values():
            with h5py.File(path, "r") as f:
                x = f["X"]
                assert tuple(x.attrs["shape"]) == (args.cells, args.genes)
                p = x["indptr"][:6]
                rows = (p, x["data"][p[0]:p[-1]], x["indices"][p[0]:p[-1]], f["obs/_index"][:5],
                        f["obs/_index"][-1:], f["obsm/X_umap"][-5:])
                if first is None:
                    first = rows
                else:
                    assert all(np.array_equal(a, b) for a, b in zip(first, rows))
    for k, path in (paths.items() if ad is not None else ()):
        a = ad.read_h5ad(path, backed="r")
        assert a.shape == (args.cells, args.genes), a.shape
        assert list(a.obs["sample"].cat.categories) == [f"sample_{i:02d}" for i in range(N_SAMPLES)]
        x = a.X[0:5]
        if k == "uncompressed":
            first = x.toarray()
        else:
            assert np.array_equal(first, x.toarray())
        a.file.close()
    print(f"done in {elapsed:.1f} s (+ {time.time() - t0 - elapsed:.1f} s read check): "
          f"{args.cells:,} cells x {args.genes:,} genes, {nnz:,} stored values, "
          f"{N_SAMPLES} samples")
    for path in paths.values():
        print(f"  {path}: {os.path.getsize(path):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
