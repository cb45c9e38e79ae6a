#!/usr/bin/python3
"""Writes the sources of the priority-ordered files tests (issue 20; the specification's
"Priority-ordered files", ../shared/seeds/subsampling-spec.txt): an ordinary file, the files
Cellucid would write from it (rows in the priority order of a seed, uns['cellucid']['priority'],
obs['cellucid_original_position']), and files whose record does not verify.

    /usr/bin/python3 tests/integration/make_priority_sources.py OUT_DIR [--cells N] [--genes G]
                                    [--only NAME,...] [--x-chunk ENTRIES] [--indptr-chunk ROWS]

Writes into OUT_DIR, and OUT_DIR/manifest.json describing each file (what it is, its seed, the
level and k its prefix counts were made for):

  original.h5ad           the base AnnData in its own order: a sparse CSR X (float32 counts,
                          gzip, chunks of X_CHUNK entries, indptr in chunks of INDPTR_CHUNK rows);
                          obs: cell_type (categorical, some cells missing), n_counts (float32),
                          donor (strings anndata writes as a categorical), barcode (plain
                          strings, each its own); obsm X_umap (2 float32 columns); obsp
                          connectivities (a kNN graph); var: means, highly_variable; uns: title.
  priority-seed0.h5ad, priority-seed7.h5ad, priority-seed4000000000.h5ad
                          the original's rows in the priority order of that seed (row r the
                          cell of the r-th lowest rank), obsp cut both ways, the record
                          {seed, specVersion: 1, nObs}, the position column (uint32, last obs
                          column); X chunked as the original's. The last one's record also has
                          levels, in ascending order and stopped early (levels >= LEVELS_STOP).
  original-csc.h5ad       a base of fewer, denser genes with a gene-major X (CSC, sorted
                          indices, gzip, chunks of CSC_CHUNK entries).
  priority-csc-seed11.h5ad  its rows in seed 11's order; varm['cellucid_prefix_counts'] (n_vars x
                          L int64: gene g's stored values among the first levels[j] rows) and the
                          record's levels (the whole chain n, floor(3n/4), ... 1, descending).
  counts-exceed.h5ad      as priority-csc-seed11, one gene's count above its stored values:
                          inconsistent with the matrix (a mount refuses it).
  counts-decrease.h5ad    one gene's count larger at a lower level than at the next higher one
                          (refused).
  counts-over.h5ad        one gene's count one too many at the level of CSC_PREFIX_K (still at
                          most its entries and monotone): a counted entry at a row >= the level,
                          seen only when the prefix is read (EIO).
  counts-under.h5ad       one gene's count one too few at that level: the next entry is at a row
                          below the level (EIO).
  record-no-column.h5ad   priority-seed7 without the position column: the record alone, which
                          verifies (the column is checked only when it is there).
  Files whose record does not verify (read as files Cellucid did not write):
  bad-nobs.h5ad           priority-seed7 with the record's nObs one short.
  bad-seed-order.h5ad     priority-seed7's rows and position column, the record saying seed 3.
  bad-subset.h5ad         priority-seed7 read with anndata, the cells of one cell type left out,
                          written again (uns and the position column kept).
  bad-prefix-renumbered.h5ad  priority-seed7's first PREFIX_SUBSET rows, the record's nObs set to
                          their count: the position column is not seed 7's order of that many.
  bad-levels.h5ad         priority-seed7 with levels that are not the chain (halves).
  bad-spec-version.h5ad   priority-seed7 with specVersion 2.
  column-no-record.h5ad   priority-seed7 without uns['cellucid']: a position column alone.

Deterministic: every random value from numpy's default_rng(BASE_SEED). The rank is the
specification's, computed in numpy in uint32 arithmetic (fmix32 of p ^ seedKey(seed)).
Only Debian's python3: written and read with anndata 0.8 where it is installed, else (Debian 13
packages none) with h5ad_writer.py and readers.py, which write and read anndata 0.8's layout
and subset as it does (then h5py rechunks X, and edits the records, either way).
"""
import argparse
import json
import os
import sys
import warnings

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from set_rules import fmix32, rank, seed_key  # noqa: E402,F401
import pandas as pd
import scipy.sparse as sp

warnings.simplefilter("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5ad_writer  # noqa: E402
import readers  # noqa: E402

BASE_SEED = 20
N_CELLS, N_GENES, DENSITY = 3000, 200, 0.05
CSC_GENES, CSC_DENSITY = 50, 0.3
X_CHUNK = 512          # entries a chunk of X/data and X/indices (CSR): many chunks
INDPTR_CHUNK = 256     # rows a chunk of X/indptr
CSC_CHUNK = 64         # entries a chunk of the CSC X's data and indices
LEVELS_STOP = 100      # the seed-4000000000 file's levels stop at the last one >= this
PREFIX_SUBSET = 1000   # rows bad-prefix-renumbered keeps
CSC_SEED = 11
CSC_PREFIX_K = 200     # the k the prefix counts are broken for (counts-over, counts-under)
SEEDS = (0, 7, 4000000000)
FROM_SEVEN = ("record-no-column", "bad-nobs", "bad-seed-order", "bad-subset", "bad-prefix-renumbered", "bad-levels",
              "bad-spec-version", "column-no-record")
CELL_TYPES = ["B", "NK", "T-CD4", "T-CD8", "mono", "DC"]

U32 = np.uint32


# ---- The specification's rank ------------------------------------------------------------

# fmix32, seed_key and rank: set_rules.py, the tests' one reading of the specification's rank.


def priority_order(seed, n):
    """The positions 0 .. n-1 by ascending rank (no two share one: rank is a bijection)."""
    return np.argsort(rank(seed, np.arange(n, dtype=np.int64)), kind="stable").astype(np.int64)


def prefix_levels(n):
    """The level chain n, floor(3n/4), floor(3 * that / 4), ... down to the last positive one."""
    levels = []
    level = n
    while level > 0:
        levels.append(level)
        level = level * 3 // 4
    return levels


# ---- The base AnnData ----------------------------------------------------------------------

def make_base(n, genes, density, rng, fmt="csr"):
    """An AnnData of n cells: X sparse (fmt), every obs/obsm/obsp/var element the tests read."""
    X = sp.random(n, genes, density=density, format="csr", dtype=np.float32, random_state=rng,
                  data_rvs=lambda size: rng.integers(1, 30, size=size).astype(np.float32))
    X.sort_indices()
    codes = rng.integers(0, len(CELL_TYPES), size=n)
    # About 2% of cells have no cell type (a missing code: the last stratum).
    codes[rng.random(n) < 0.02] = -1
    cell_type = pd.Categorical.from_codes(codes, categories=CELL_TYPES)
    donors = [f"donor-{d}" for d in range(5)]
    obs = pd.DataFrame({
        "cell_type": cell_type,
        "n_counts": np.asarray(X.sum(axis=1)).ravel().astype(np.float32),
        # A categorical as anndata's write_h5ad makes a string column with repeated values.
        "donor": pd.Categorical.from_codes(rng.integers(0, 5, size=n), categories=donors),
        # Every value its own: plain strings, as anndata writes them.
        "barcode": np.array([f"BC{i:06d}-{b}" for i, b in enumerate(rng.integers(0, 10**6, size=n))],
                            dtype=object),
    }, index=pd.Index([f"cell-{i:06d}" for i in range(n)]))
    # Clusters by cell type, so spatial strata are uneven.
    centres = rng.normal(0, 8, size=(len(CELL_TYPES) + 1, 2))
    umap = (centres[codes] + rng.normal(0, 1.5, size=(n, 2))).astype(np.float32)
    # A kNN graph of 5 random neighbours a cell.
    neighbours = 5
    rows = np.repeat(np.arange(n), neighbours)
    cols = rng.integers(0, n, size=n * neighbours)
    graph = sp.coo_matrix((rng.random(n * neighbours).astype(np.float32), (rows, cols)), shape=(n, n)).tocsr()
    graph.sum_duplicates()
    graph.sort_indices()
    var = pd.DataFrame({
        "means": np.asarray(X.mean(axis=0)).ravel().astype(np.float32),
        "highly_variable": rng.random(genes) < 0.2,
    }, index=pd.Index([f"gene-{g:04d}" for g in range(genes)]))
    if fmt == "csc":
        X = X.tocsc()
        X.sort_indices()
    return readers.make(X=X, obs=obs, var=var, obsm={"X_umap": umap}, obsp={"connectivities": graph},
                        uns={"title": "priority-ordered files test base"}, dtype=np.float32)


def in_priority_order(adata, seed, levels=None):
    """The AnnData Cellucid writes from adata: its rows in seed's priority order, the record and
    the position column (obsp cut both ways by anndata's subsetting)."""
    order = priority_order(seed, adata.n_obs)
    out = readers.subset(adata, order)
    if sp.issparse(out.X) and out.X.format == "csc":
        out.X.sort_indices()
    out.obs["cellucid_original_position"] = order.astype(np.uint32)
    record = {"seed": int(seed), "specVersion": 1, "nObs": int(adata.n_obs)}
    if levels is not None:
        record["levels"] = np.asarray(levels, dtype=np.int64)
    out.uns["cellucid"] = {"priority": record}
    return out


def prefix_counts(X, levels):
    """counts[g, j] = stored values of gene g among rows [0, levels[j])."""
    X = sp.csc_matrix(X)
    counts = np.zeros((X.shape[1], len(levels)), dtype=np.int64)
    for g in range(X.shape[1]):
        rows = np.sort(X.indices[X.indptr[g]:X.indptr[g + 1]])
        counts[g] = np.searchsorted(rows, np.asarray(levels), side="left")
    return counts


# ---- What a prefix must read ---------------------------------------------------------------

def chunk_bytes(dataset, first, last):
    """Compressed bytes of the chunks of a 1-d chunked dataset holding elements [first, last)
    (a contiguous one: those elements' bytes)."""
    if last <= first:
        return 0
    if not dataset.chunks:
        return (last - first) * dataset.dtype.itemsize
    per = dataset.chunks[0]
    return sum(dataset.id.get_chunk_info_by_coord((c * per,)).size for c in range(first // per, (last - 1) // per + 1))


def stored_bytes(dataset):
    """Bytes a dataset stores (the sum of its chunks' compressed sizes)."""
    if not dataset.chunks:
        return dataset.id.get_storage_size()
    return sum(dataset.id.get_chunk_info(i).size for i in range(dataset.id.get_num_chunks()))


def csr_prefix_floor(path, k):
    """(floor, whole, entries): the compressed bytes of the source chunks the prefix [0, k) of a
    CSR X lies in (entries [0, indptr[k]) of data and indices, rows [0, k] of indptr), all of
    X's stored bytes, and indptr[k]."""
    with h5py.File(path, "r") as f:
        X = f["X"]
        end = int(X["indptr"][k])
        floor = chunk_bytes(X["data"], 0, end) + chunk_bytes(X["indices"], 0, end) + \
            chunk_bytes(X["indptr"], 0, k + 1)
        whole = sum(stored_bytes(X[name]) for name in ("data", "indices", "indptr"))
    return floor, whole, end


def graph_bytes(path, k, key="obsp/connectivities"):
    """(prefix, whole) of a CSR obsp matrix's indptr and indices: what building a view may read
    of it besides X (the mount's counters count a view's build whole, not by element): for the
    prefix [0, k), rows [0, k] of indptr and their entries' indices (to keep columns < k); for
    any view at most both whole."""
    with h5py.File(path, "r") as f:
        g = f[key]
        end = int(g["indptr"][k])
        prefix = chunk_bytes(g["indptr"], 0, k + 1) + chunk_bytes(g["indices"], 0, end)
        whole = stored_bytes(g["indptr"]) + stored_bytes(g["indices"])
    return prefix, whole


# ---- Writing -------------------------------------------------------------------------------

def rechunk(path, element, chunks):
    """Rewrites element's datasets (a sparse group's data, indices, indptr) gzip-compressed in
    chunks of the given length, attributes kept: anndata 0.8 leaves chunking to h5py."""
    with h5py.File(path, "r+") as f:
        group = f[element]
        for name, length in chunks.items():
            d = group[name]
            values, attributes = d[()], dict(d.attrs)
            del group[name]
            new = group.create_dataset(name, data=values, chunks=(max(1, min(length, len(values))),),
                                       compression="gzip", compression_opts=4)
            for key, value in attributes.items():
                new.attrs[key] = value


def write(adata, path, csc=False, x_chunk=X_CHUNK, indptr_chunk=INDPTR_CHUNK):
    """adata written gzip-compressed (anndata's write_h5ad, or h5ad_writer's without anndata),
    then X rechunked."""
    if readers.have_anndata():
        adata.write_h5ad(path, compression="gzip")
    else:
        h5ad_writer.write_h5ad(path, X=adata.X, obs=adata.obs, var=adata.var, obsm=adata.obsm, varm=adata.varm,
                               obsp=adata.obsp, uns=adata.uns, compression="gzip")
    entries = CSC_CHUNK if csc else x_chunk
    rechunk(path, "X", {"data": entries, "indices": entries, "indptr": indptr_chunk})


def set_record(path, **values):
    """Changes (or, given None, removes) fields of uns/cellucid/priority in place."""
    with h5py.File(path, "r+") as f:
        group = f["uns/cellucid/priority"]
        for key, value in values.items():
            if key in group:
                del group[key]
            if value is None:
                continue
            d = group.create_dataset(key, data=value)
            d.attrs["encoding-type"] = "array" if np.ndim(value) else "numeric-scalar"
            d.attrs["encoding-version"] = "0.2.0"


def set_counts(path, counts):
    with h5py.File(path, "r+") as f:
        f["varm/cellucid_prefix_counts"][...] = counts


def read_h5ad(path):
    return readers.anndata.read_h5ad(path) if readers.have_anndata() else readers.read_h5ad(path)


def copy_file(src, dst):
    with open(src, "rb") as a, open(dst, "wb") as b:
        b.write(a.read())


def generate(out, cells=N_CELLS, genes=N_GENES, only=None, x_chunk=X_CHUNK, indptr_chunk=INDPTR_CHUNK):
    """Writes the files (those named in only, if given) and manifest.json; returns the manifest.
    x_chunk and indptr_chunk set the CSR files' X chunks (entries, rows)."""
    os.makedirs(out, exist_ok=True)
    chunking = {"x_chunk": x_chunk, "indptr_chunk": indptr_chunk}
    rng = np.random.default_rng(BASE_SEED)
    base = make_base(cells, genes, DENSITY, rng)
    # The CSC base draws from its own generator, so --only leaves every file the same.
    csc_base = make_base(cells, CSC_GENES, CSC_DENSITY, np.random.default_rng(BASE_SEED + 1), fmt="csc")
    manifest = {"cells": cells, "genes": genes, "xChunk": x_chunk, "indptrChunk": indptr_chunk, "files": {}}

    def wanted(name):
        return only is None or name in only

    def record(name, **fields):
        manifest["files"][name] = dict(path=os.path.join(out, name + ".h5ad"), **fields)
        return manifest["files"][name]["path"]

    if wanted("original"):
        write(base, record("original", kind="original", verified=False, nObs=cells), **chunking)
    for seed in SEEDS:
        name = f"priority-seed{seed}"
        # These files are made from seed 7's.
        if not wanted(name) and not (seed == 7 and any(wanted(n) for n in FROM_SEVEN)):
            continue
        levels = None
        if seed == 4000000000:
            levels = [level for level in prefix_levels(cells) if level >= LEVELS_STOP][::-1]
        path = record(name, kind="priority", verified=True, seed=seed, nObs=cells, original="original",
                      levels=levels)
        write(in_priority_order(base, seed, levels), path, **chunking)
    if any(wanted(n) for n in ("original-csc", "priority-csc-seed11", "counts-exceed", "counts-decrease",
                               "counts-over", "counts-under")):
        write(csc_base, record("original-csc", kind="original", verified=False, nObs=cells), csc=True)
        levels = prefix_levels(cells)
        stored = in_priority_order(csc_base, CSC_SEED, levels)
        counts = prefix_counts(stored.X, levels)
        stored.varm["cellucid_prefix_counts"] = counts
        csc_path = record("priority-csc-seed11", kind="priority", verified=True, seed=CSC_SEED, nObs=cells,
                          original="original-csc", levels=levels)
        write(stored, csc_path, csc=True)
        entries = np.diff(sp.csc_matrix(stored.X).indptr)
        # The level a prefix of CSC_PREFIX_K cells reads: the smallest level >= k.
        j = min((i for i, level in enumerate(levels) if level >= CSC_PREFIX_K), key=lambda i: levels[i])
        assert levels == sorted(levels, reverse=True), "the chain is written descending"
        broken = {}
        # Exceeding: a gene's count at the top level one above its stored values.
        c = counts.copy()
        g = int(np.argmax(entries > 0))
        c[g, 0] = entries[g] + 1
        broken["counts-exceed"] = (c, f"gene {g}: count {entries[g] + 1} at level {levels[0]}, "
                                      f"{entries[g]} stored values")
        # Decreasing: a lower level's count above the next higher level's (both within entries).
        c = counts.copy()
        g = int(np.flatnonzero(counts[:, j - 1] < entries)[0])
        c[g, j] = counts[g, j - 1] + 1
        broken["counts-decrease"] = (c, f"gene {g}: count {c[g, j]} at level {levels[j]} above "
                                        f"{counts[g, j - 1]} at level {levels[j - 1]}")
        # Over by one at the prefix's level, still monotone and within entries.
        c = counts.copy()
        g = int(np.flatnonzero(counts[:, j] < counts[:, j - 1])[0])
        c[g, j] += 1
        broken["counts-over"] = (c, f"gene {g}: count {c[g, j]} at level {levels[j]}, "
                                    f"{counts[g, j]} rows below it")
        # Under by one at that level, still monotone.
        c = counts.copy()
        g = int(np.flatnonzero(counts[:, j] > counts[:, j + 1])[0])
        c[g, j] -= 1
        broken["counts-under"] = (c, f"gene {g}: count {c[g, j]} at level {levels[j]}, "
                                     f"{counts[g, j]} rows below it")
        for name, (c, what) in broken.items():
            if not wanted(name):
                continue
            path = record(name, kind="counts-refused" if name in ("counts-exceed", "counts-decrease")
                          else "counts-wrong", verified=True, seed=CSC_SEED, nObs=cells, original="original-csc",
                          levels=levels, prefixK=CSC_PREFIX_K, prefixLevel=levels[j], broken=what)
            copy_file(csc_path, path)
            set_counts(path, c)

    seven = os.path.join(out, "priority-seed7.h5ad")
    if wanted("bad-nobs"):
        path = record("bad-nobs", kind="unverified", verified=False, nObs=cells, why="nObs")
        copy_file(seven, path)
        set_record(path, nObs=np.int64(cells - 1))
    if wanted("bad-seed-order"):
        path = record("bad-seed-order", kind="unverified", verified=False, nObs=cells, why="seed 3's order")
        copy_file(seven, path)
        set_record(path, seed=np.int64(3))
    if wanted("bad-subset"):
        adata = read_h5ad(seven)
        subset = readers.subset(adata, np.flatnonzero((adata.obs["cell_type"] != "NK").to_numpy()))
        path = record("bad-subset", kind="unverified", verified=False, nObs=subset.n_obs, why="a subset")
        write(subset, path, **chunking)
    if wanted("bad-prefix-renumbered"):
        adata = read_h5ad(seven)
        subset = readers.subset(adata, np.arange(PREFIX_SUBSET))
        subset.uns["cellucid"]["priority"]["nObs"] = PREFIX_SUBSET
        path = record("bad-prefix-renumbered", kind="unverified", verified=False, nObs=PREFIX_SUBSET,
                      why="a prefix renumbered")
        write(subset, path, **chunking)
    if wanted("bad-levels"):
        path = record("bad-levels", kind="unverified", verified=False, nObs=cells, why="levels")
        copy_file(seven, path)
        halves, level = [], cells
        while level > 0:
            halves.append(level)
            level //= 2
        set_record(path, levels=np.asarray(halves, dtype=np.int64))
    if wanted("bad-spec-version"):
        path = record("bad-spec-version", kind="unverified", verified=False, nObs=cells, why="specVersion")
        copy_file(seven, path)
        set_record(path, specVersion=np.int64(2))
    if wanted("record-no-column"):
        path = record("record-no-column", kind="priority", verified=True, seed=7, nObs=cells, original="original",
                      levels=None)
        copy_file(seven, path)
        with h5py.File(path, "r+") as f:
            del f["obs/cellucid_original_position"]
            order = [c for c in f["obs"].attrs["column-order"] if c != "cellucid_original_position"]
            f["obs"].attrs["column-order"] = order
    if wanted("column-no-record"):
        path = record("column-no-record", kind="unverified", verified=False, nObs=cells, why="no record")
        copy_file(seven, path)
        with h5py.File(path, "r+") as f:
            del f["uns/cellucid"]
    for entry in manifest["files"].values():
        if entry.get("levels") is not None:
            entry["levels"] = [int(v) for v in entry["levels"]]
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--cells", type=int, default=N_CELLS)
    p.add_argument("--genes", type=int, default=N_GENES)
    p.add_argument("--only", default=None, help="comma-separated names of the files to write")
    p.add_argument("--x-chunk", type=int, default=X_CHUNK, help="entries a chunk of a CSR X's data and indices")
    p.add_argument("--indptr-chunk", type=int, default=INDPTR_CHUNK, help="rows a chunk of X/indptr")
    a = p.parse_args()
    manifest = generate(a.out, a.cells, a.genes, None if a.only is None else set(a.only.split(",")),
                        a.x_chunk, a.indptr_chunk)
    for name, entry in sorted(manifest["files"].items()):
        print(f"{entry['path']}: {entry['kind']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
