#!/usr/bin/python3
"""Writes the same AnnData objects as .h5ad and as Zarr v2 stores in many forms, with Debian's
anndata 0.8 and zarr-python 2: the sources tests/integration/test_zarr_sources.py mounts side by
side (every view of a Zarr form must be byte for byte the view of the .h5ad form).

    make_zarr_sources.py OUTDIR

writes OUTDIR/NAME.h5ad and OUTDIR/NAME.FORM.zarr (a directory) or .zarr.zip for each object and
form, and OUTDIR/manifest.json listing them. Forms:
  blosc        write_zarr's default (Blosc lz4, shuffle), '.' separated chunk keys
  zstd, zlib, gzip, bz2, lz4, none   another compressor for every array (none: uncompressed)
  slash        a DirectoryStore with dimension_separator '/' (chunk keys "0/1")
  fortran      every array in F order
  consolidated zarr.consolidate_metadata afterwards (.zmetadata)
  small-chunks every array rewritten with small chunks (several chunks along every axis, a
               ragged last one), consolidated
  zip          a zarr.ZipStore (members stored)
  zip-deflated a zarr.ZipStore with ZIP_DEFLATED members
  zip-rewritten  a ZipStore whose .zattrs/.zgroup were written twice (the last entry wins)
Deterministic for a given seed; nothing here reads zarrmount.
"""
import json
import os
import shutil
import sys
import warnings
import zipfile

warnings.simplefilter("ignore")
import anndata  # noqa: E402
from anndata._io.zarr import write_zarr  # noqa: E402  (0.8's, which takes dataset options)
import numcodecs  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import zarr  # noqa: E402


def make_object(seed, n, m, sparse_x):
    rng = np.random.default_rng(seed)
    counts = rng.poisson(0.4, size=(n, m)).astype(np.float32)
    X = sp.csr_matrix(counts) if sparse_x else counts
    names = [f"cell{i:05d}-{rng.integers(0, 10**6):06d}" for i in range(n)]
    cell_type = pd.Categorical(rng.choice(["T cell", "B cell", "NK", "Mono", "DC"], size=n),
                               categories=["B cell", "DC", "Mono", "NK", "T cell"])
    codes = cell_type.codes.copy()
    codes[rng.random(n) < 0.1] = -1  # missing
    cell_type = pd.Categorical.from_codes(codes, categories=cell_type.categories)
    stage = pd.Categorical(rng.choice(["G1", "S", "G2M"], size=n), categories=["G1", "S", "G2M"],
                           ordered=True)
    n_genes = pd.array(rng.integers(0, 500, size=n), dtype="Int64")
    n_genes[rng.random(n) < 0.2] = pd.NA
    doublet = pd.array(rng.random(n) < 0.3, dtype="boolean")
    doublet[rng.random(n) < 0.15] = pd.NA
    pct = rng.random(n)
    pct[rng.random(n) < 0.1] = np.nan
    obs = pd.DataFrame({
        "cell_type": cell_type,
        "stage": stage,
        "n_genes_nullable": n_genes,
        "is_doublet": doublet,
        "pct_mito": pct,
        "total": rng.integers(0, 10**6, size=n),
        "passed": rng.random(n) < 0.5,
        "batch": pd.Categorical(rng.choice(["b1", "b2"], size=n)),
    }, index=pd.Index(names))
    var = pd.DataFrame({
        "gene_ids": [f"ENSG{j:08d}" for j in range(m)],
        "highly_variable": rng.random(m) < 0.3,
        "mean": rng.random(m).astype(np.float32),
        "n_cells": rng.integers(0, n, size=m).astype(np.int32),
    }, index=pd.Index([f"GENE{j:04d}" for j in range(m)]))
    adata = anndata.AnnData(X=X, obs=obs, var=var)
    adata.obsm["X_pca"] = rng.standard_normal((n, 7)).astype(np.float32)
    adata.obsm["X_umap"] = rng.standard_normal((n, 2))
    adata.varm["PCs"] = rng.standard_normal((m, 7)).astype(np.float32)
    adata.layers["counts"] = sp.csr_matrix(counts.astype(np.int32))
    adata.layers["csc"] = sp.csc_matrix(counts.astype(np.float64))
    adata.layers["dense"] = (counts * 2).astype(np.float64)
    knn = sp.random(n, n, density=min(1.0, 5 / max(n, 1)), format="csr", random_state=seed,
                    dtype=np.float32)
    adata.obsp["connectivities"] = knn
    adata.uns["title"] = "a title — ünïcode"
    adata.uns["n_pcs"] = 7
    adata.uns["resolution"] = 0.5
    adata.uns["flag"] = True
    adata.uns["labels"] = np.array(["α", "beta", "γ"], dtype=object)
    adata.uns["int_matrix"] = np.arange(12, dtype=np.int64).reshape(3, 4)
    adata.uns["nested"] = {"params": {"k": 15, "metric": "cosine"}, "values": np.linspace(0, 1, 5)}
    adata.uns["cell_type_colors"] = np.array(["#111111", "#222222", "#333333", "#444444", "#555555"],
                                             dtype=object)
    if sparse_x:
        raw_counts = np.concatenate([counts, rng.poisson(0.3, size=(n, 4)).astype(np.float32)], 1)
        raw = anndata.AnnData(X=sp.csr_matrix(raw_counts),
                              var=pd.DataFrame({"mt": rng.random(m + 4) < 0.1},
                                               index=[f"RAW{j:04d}" for j in range(m + 4)]))
        adata.raw = raw
    adata.strings_to_categoricals()
    return adata


COMPRESSORS = {
    "zstd": numcodecs.Zstd(level=3),
    "zlib": numcodecs.Zlib(level=5),
    "gzip": numcodecs.GZip(level=4),
    "bz2": numcodecs.BZ2(level=5),
    "lz4": numcodecs.LZ4(acceleration=1),
    "none": None,
}


def arrays(group, prefix=""):
    for name, item in group.items():
        path = f"{prefix}{name}"
        if isinstance(item, zarr.Array):
            yield path, item
        else:
            yield from arrays(item, path + "/")


def rechunk(path):
    """Every array of the store at path written again with small chunks: several along each
    axis (about a fifth of it), a ragged last one; attributes, compressor and filters kept."""
    root = zarr.open_group(path, mode="a")
    for name, a in list(arrays(root)):
        if a.ndim == 0:
            continue
        data = a[...]
        attrs = dict(a.attrs)
        chunks = tuple(max(1, -(-s // 5) - 1) if s > 1 else 1 for s in a.shape)
        kwargs = {"compressor": a.compressor, "filters": a.filters, "fill_value": a.fill_value,
                  "order": a.order}
        if a.dtype == object:
            kwargs["object_codec"] = numcodecs.VLenUTF8()
            kwargs["filters"] = None
        parent, _, leaf = name.rpartition("/")
        group = root[parent] if parent else root
        del group[leaf]
        b = group.create_dataset(leaf, shape=a.shape, dtype=a.dtype, chunks=chunks, **kwargs)
        b[...] = data
        b.attrs.update(attrs)
    zarr.consolidate_metadata(path)


def write_forms(adata, out, name):
    made = {}
    base = os.path.join(out, f"{name}.h5ad")
    adata.write_h5ad(base)
    made["h5ad"] = base

    def directory(form, **kwargs):
        p = os.path.join(out, f"{name}.{form}.zarr")
        shutil.rmtree(p, ignore_errors=True)
        write_zarr(p, adata, **kwargs)
        made[form] = p
        return p

    directory("blosc")
    for form, compressor in COMPRESSORS.items():
        directory(form, compressor=compressor)
    p = os.path.join(out, f"{name}.slash.zarr")
    shutil.rmtree(p, ignore_errors=True)
    write_zarr(zarr.DirectoryStore(p, dimension_separator="/"), adata)
    made["slash"] = p
    directory("fortran", order="F")
    zarr.consolidate_metadata(directory("consolidated"))
    rechunk(directory("small-chunks"))

    p = os.path.join(out, f"{name}.zip.zarr.zip")
    with zarr.ZipStore(p, mode="w") as store:
        write_zarr(store, adata)
    made["zip"] = p
    p = os.path.join(out, f"{name}.zip-deflated.zarr.zip")
    with zarr.ZipStore(p, mode="w", compression=zipfile.ZIP_DEFLATED) as store:
        write_zarr(store, adata)
    made["zip-deflated"] = p
    # Metadata written twice, the first time wrong: a reader must take the last entry (as
    # zipfile and zarr do; zarr's own ZipStore writes names twice when a key is set again).
    p = os.path.join(out, f"{name}.zip-rewritten.zarr.zip")
    with zipfile.ZipFile(made["zip"]) as good, zipfile.ZipFile(p, "w") as z:
        z.writestr(".zattrs", json.dumps({"encoding-type": "not-anndata"}))
        z.writestr("obs/.zattrs", json.dumps({"_index": "nothing", "column-order": ["nothing"]}))
        z.writestr("X/0.0", b"not a chunk")
        for info in good.infolist():
            z.writestr(info, good.read(info))
    made["zip-rewritten"] = p
    return made


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    manifest = {}
    for name, seed, n, m, sparse_x in (("dense", 1, 57, 23, False), ("sparse", 2, 83, 31, True)):
        manifest[name] = write_forms(make_object(seed, n, m, sparse_x), out, name)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
