#!/usr/bin/python3
"""Writes damaged copies of two fixtures, each beside the intact file it was
made from, for tests/integration/test_reader_errors.py:

    make_damaged_sources.py OUT_DIR      (prints the manifest as JSON too)

From fixtures/sources/h5ad/full-csr.h5ad (60 cells, 40 genes, CSR X):

- intact.h5ad: the fixture with X/data and X/indices rewritten in chunks of
  64 values and obs/cell_type/codes in chunks of 8 (uncompressed), so that a
  damaged value spoils one source chunk, not the whole array;
- indices-outside.h5ad: X/indices of cells 24..27 (their first entry each)
  set to 43, outside the matrix's 40 columns;
- codes-outside.h5ad: obs/cell_type/codes of cells 24..27 set to 9, outside
  its 5 categories;
- indptr-not-monotone.h5ad: X/indptr[30] set past the stored values, so that
  the pointers decrease after it and cells 29 and 30 name ranges that do
  not exist.

From fixtures/sources/filters/gzip1.h5ad (X/data deflate in chunks of 97,
obs/n_counts deflate in chunks of 32), copied as gzip-intact.h5ad:

- deflate-x-data.h5ad: X/data's chunk 1 compressed stream overwritten with
  0xff bytes (undecodable);
- deflate-obs-column.h5ad: obs/n_counts's chunk 1 likewise.

Every damaged file is its intact file with bytes changed in place (same
size, same layout), so that a mount of it serves what a mount of the intact
file does except the files that need the damage. The manifest says, for each
damaged file: its intact file, what the damage is (chunk: some files of the
store cannot be made; view: no view can be built), the store arrays whose
chunks need it, the source cells it lies in (a subsample keeping one of them
meets it) and words the daemon's reason must hold.

Deterministic: fixed values, no timestamps (track_times off). Run with
Debian's /usr/bin/python3 (h5py).
"""
import json
import os
import shutil
import sys

import h5py
import numpy as np

ROOT = os.environ.get("ZM_SOURCE_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIXTURES = os.path.join(ROOT, "fixtures", "sources")
DAMAGED_CELLS = [24, 25, 26, 27]


def rechunk(f, path, chunks):
    """Rewrites a dataset in chunks of `chunks` values, attributes kept."""
    data = f[path][...]
    attrs = dict(f[path].attrs)
    del f[path]
    d = f.create_dataset(path, data=data, chunks=(chunks,), track_times=False)
    for name, value in attrs.items():
        d.attrs[name] = value


def chunk_extent(path, dataset, index):
    """(byte offset, stored size) of a dataset's chunk number index."""
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
        return info.byte_offset, info.size


def overwrite_chunk(path, dataset, index):
    offset, size = chunk_extent(path, dataset, index)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * size)


def cells_of_entries(path, first, end):
    """Cells of X (CSR) holding an entry in [first, end)."""
    with h5py.File(path, "r") as f:
        indptr = f["X/indptr"][...]
    return [c for c in range(len(indptr) - 1) if indptr[c] < end and indptr[c + 1] > first]


def same_size(original, copy):
    if os.path.getsize(original) != os.path.getsize(copy):
        raise RuntimeError(f"{copy}: damaging it changed its size")


def make(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    manifest = {}

    intact = os.path.join(out_dir, "intact.h5ad")
    shutil.copy(os.path.join(FIXTURES, "h5ad", "full-csr.h5ad"), intact)
    with h5py.File(intact, "r+") as f:
        rechunk(f, "X/data", 64)
        rechunk(f, "X/indices", 64)
        rechunk(f, "obs/cell_type/codes", 8)
        n_vars = f["var/_index"].shape[0]
        categories = f["obs/cell_type/categories"].shape[0]
        indptr = f["X/indptr"][...]
        stored = int(f["X/indices"].shape[0])

    path = os.path.join(out_dir, "indices-outside.h5ad")
    shutil.copy(intact, path)
    with h5py.File(path, "r+") as f:
        for cell in DAMAGED_CELLS:
            f["X/indices"][indptr[cell]] = n_vars + 3
    same_size(intact, path)
    manifest["indices-outside.h5ad"] = {
        "intact": "intact.h5ad", "kind": "chunk", "arrays": ["X/indices"], "cells": DAMAGED_CELLS,
        "reason": ["indices of X", f"value {n_vars + 3} is outside [0, {n_vars})"]}

    path = os.path.join(out_dir, "codes-outside.h5ad")
    shutil.copy(intact, path)
    with h5py.File(path, "r+") as f:
        codes = f["obs/cell_type/codes"]
        for cell in DAMAGED_CELLS:
            codes[cell] = 9
    same_size(intact, path)
    manifest["codes-outside.h5ad"] = {
        "intact": "intact.h5ad", "kind": "chunk", "arrays": ["obs/cell_type/codes"], "cells": DAMAGED_CELLS,
        "reason": ["codes of obs/cell_type", f"value 9 is outside [-1, {categories})"]}

    path = os.path.join(out_dir, "indptr-not-monotone.h5ad")
    shutil.copy(intact, path)
    with h5py.File(path, "r+") as f:
        f["X/indptr"][30] = stored + 100
    same_size(intact, path)
    manifest["indptr-not-monotone.h5ad"] = {
        "intact": "intact.h5ad", "kind": "view", "arrays": [], "cells": [29, 30],
        "reason": ["X: indptr"]}

    gzip_intact = os.path.join(out_dir, "gzip-intact.h5ad")
    shutil.copy(os.path.join(FIXTURES, "filters", "gzip1.h5ad"), gzip_intact)
    with h5py.File(gzip_intact, "r") as f:
        per_chunk = f["X/data"].chunks[0]
        column_chunk = f["obs/n_counts"].chunks[0]
        n_obs = f["obs/n_counts"].shape[0]

    path = os.path.join(out_dir, "deflate-x-data.h5ad")
    shutil.copy(gzip_intact, path)
    overwrite_chunk(path, "X/data", 1)
    manifest["deflate-x-data.h5ad"] = {
        "intact": "gzip-intact.h5ad", "kind": "chunk", "arrays": ["X/data"],
        "cells": cells_of_entries(gzip_intact, per_chunk, 2 * per_chunk),
        "reason": ["/X/data", "chunk 1", "deflate"]}

    path = os.path.join(out_dir, "deflate-obs-column.h5ad")
    shutil.copy(gzip_intact, path)
    overwrite_chunk(path, "obs/n_counts", 1)
    manifest["deflate-obs-column.h5ad"] = {
        "intact": "gzip-intact.h5ad", "kind": "chunk", "arrays": ["obs/n_counts"],
        "cells": list(range(column_chunk, min(2 * column_chunk, n_obs))),
        "reason": ["/obs/n_counts", "chunk 1", "deflate"]}

    # What each damage is made of, checked here so that a fixture that
    # changed under this script is caught before any mount.
    with h5py.File(os.path.join(out_dir, "indices-outside.h5ad"), "r") as f:
        assert int(np.max(f["X/indices"][...])) == n_vars + 3
    with h5py.File(os.path.join(out_dir, "indptr-not-monotone.h5ad"), "r") as f:
        p = f["X/indptr"][...]
        assert p[31] < p[30] and p[30] > stored

    with open(os.path.join(out_dir, "manifest.json"), "w") as out:
        json.dump(manifest, out, indent=2, sort_keys=True)
    return manifest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    print(json.dumps(make(sys.argv[1]), indent=2, sort_keys=True))
