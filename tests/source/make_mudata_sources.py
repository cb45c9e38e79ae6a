#!/usr/bin/python3
"""Writes the MuData .h5mu sources of tests/integration/test_mudata.py (issue 22), laid out as
mudata's own writer _write_h5mu lays them out (scverse/mudata src/mudata/_core/io.py; the
details in ../shared/data/modern/README.md, "modern-citeseq-800.h5mu"): every element by
anndata 0.8's write_elem (h5ad_writer.py's where anndata is not installed), a 512-byte HDF5
userblock starting "MuData (format-version=0.1.0;...", root attributes encoding-type "MuData",
encoding-version "0.1.0", axis 0 and the encoder's; /mod/NAME groups marked anndata 0.1.0;
the /mod attribute mod-order; /obsmap/NAME and /varmap/NAME uint32, one per global cell or
gene, 1-based rows of the modality, 0 where it has none; global obsm/NAME and varm/NAME boolean
masks of the same.

    /usr/bin/python3 tests/source/make_mudata_sources.py OUT_DIR [--seed S] [--check]

Writes into OUT_DIR:

  three-modalities.h5mu   3,000 global cells. rna (~70 % of the cells), prot (~60 %, so
                          cells are rna-only, prot-only or both), atac (~8 %) and ~10 % of the
                          cells measured by none; each modality's rows a SHUFFLED order of its
                          cells (obsmap not monotonic); mod-order ["rna", "prot", "atac"]
                          (not the file's alphabetical order). rna: X CSR float32 gzip in
                          chunks of RNA_CHUNK entries (indptr RNA_INDPTR_CHUNK rows), layer
                          "counts" CSR, obsm X_pca, obsp distances (CSR), varm PCs. prot: X
                          dense float32, layer "raw" dense, obsm X_adt float64, obsp
                          connectivities. atac: X CSC float32, obsm X_lsi, obsp neighbors.
                          Each modality's obs: a categorical with missing codes, a
                          nullable-integer, a nullable-boolean, a string column; var with
                          strings; uns nested dicts. Global obs: celltype categorical with
                          missing codes, donor strings, batch_n nullable-integer, rna:n_counts
                          float with NaN where absent; obsm X_umap float32 (n, 2); obsp wnn
                          (CSR); var feature_types categorical, gene_name strings; uns nested.
  one-modality-all-cells.h5mu
                          800 cells, one modality "rna" holding every cell in global order
                          (obsmap 1..n), X CSR.
  partial-order.h5mu      600 cells, modalities alpha, beta, gamma (alpha covers ~50 %, beta
                          ~40 %, gamma ~30 %, shuffled; some cells in none); mod-order
                          ["gamma"] names only one, so the order served is gamma, alpha, beta;
                          no root axis attribute. beta's X is dense, gamma's CSC.
  stray-objects.h5mu       300 cells, modalities w and x; mod-order ["x", "nope"] names one /mod
                          does not hold (so the order served is the file's: w, x); objects no
                          layout names: a root group /extra (a dataset /extra/values), a dataset
                          /mod/stray (not a modality), a dataset /mod/x/notes (not an AnnData
                          element); the root's encoding-version (and the userblock's
                          format-version) STRAY_VERSION, a later one than mudata writes today.
  manifest.json           {"seed", "files": {name: {"path", "cells", "modalities", "mod_order",
                          "cells_of_none", and for stray-objects "encoding_version"}}}.

Deterministic from the seed (numpy's default_rng): two runs write the same bytes. --check reads
every file back with h5py and read_elem and checks the obsmap invariants the README gives
(uint32; the modality's obs names at obsmap - 1 are the global cells'; the non-zero values a
permutation of 1..n_mod; the masks are obsmap > 0; varmap the same for genes), exiting 1 on a
failure.
"""
import argparse
import json
import os
import sys
import warnings

import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

warnings.simplefilter("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

try:
    from anndata._io.specs import write_elem as _anndata_write_elem
    import anndata
    ENCODER = ("make_mudata_sources.py (anndata._io.specs.write_elem)", anndata.__version__)
except ImportError:  # Debian 13 packages no anndata: the tests' own writer of its layout
    _anndata_write_elem = None
    import h5ad_writer
    ENCODER = ("make_mudata_sources.py (h5ad_writer.write_elem)", "anndata-0.8-layout")

USERBLOCK = 512
MUDATA_VERSION = "0.1.0"
RNA_CHUNK = 256          # entries a chunk of rna's X/data and X/indices
RNA_INDPTR_CHUNK = 64    # rows a chunk of rna's X/indptr
DEFAULT_SEED = 22
STRAY_VERSION = "0.1.1"  # stray-objects.h5mu's root encoding-version: a later one than mudata writes


def put(group, key, value, **dataset_kwargs):
    """One element written as anndata 0.8's write_elem writes it."""
    if _anndata_write_elem is not None:
        _anndata_write_elem(group, key, value, dataset_kwargs=dataset_kwargs)
    else:
        h5ad_writer.write_elem(group, key, value, dataset_kwargs)


# ---- Content ---------------------------------------------------------------------------------

def barcodes(rng, n, prefix):
    letters = np.array(list("ACGT"))
    return [f"{prefix}{''.join(rng.choice(letters, 10))}-{i}" for i in range(n)]


def counts_csr(rng, n, m, density):
    X = sp.random(n, m, density=density, format="csr", dtype=np.float32, random_state=rng,
                  data_rvs=lambda size: rng.integers(1, 30, size=size).astype(np.float32))
    X.sort_indices()
    return X


def knn_graph(rng, n, neighbours):
    """A CSR float32 graph of `neighbours` others a row (no diagonal), indices sorted."""
    if n < 2:
        return sp.csr_matrix((n, n), dtype=np.float32)
    neighbours = min(neighbours, n - 1)
    rows = np.repeat(np.arange(n), neighbours)
    columns = np.concatenate([rng.choice(np.delete(np.arange(n), i), neighbours, replace=False) for i in range(n)])
    weights = rng.random(len(rows)).astype(np.float32)
    graph = sp.csr_matrix((weights, (rows, columns)), shape=(n, n))
    graph.sort_indices()
    return graph


def categorical(rng, n, categories, missing):
    codes = rng.integers(0, len(categories), size=n)
    codes[rng.random(n) < missing] = -1
    return pd.Categorical.from_codes(codes, categories=categories)


def nullable_int(rng, n, missing):
    return pd.arrays.IntegerArray(rng.integers(0, 5000, size=n).astype(np.int64), rng.random(n) < missing)


def nullable_bool(rng, n, missing):
    return pd.arrays.BooleanArray(rng.random(n) < 0.5, rng.random(n) < missing)


def modality_obs(rng, names, label):
    n = len(names)
    words = ["alpha", "b\u00eata", "gamma/\u03b3", "d,elta", "eps ilon"]
    return pd.DataFrame({
        f"{label}_cluster": categorical(rng, n, [f"{label}-c{i}" for i in range(5)], 0.07),
        f"{label}_n_features": nullable_int(rng, n, 0.1),
        f"{label}_passed": nullable_bool(rng, n, 0.15),
        f"{label}_note": np.array([f"{words[i % len(words)]} {rng.integers(0, 100)}" for i in range(n)],
                                  dtype=object),
    }, index=pd.Index(names))


def modality_var(rng, names, kind):
    return pd.DataFrame({
        "gene_ids": np.array([f"ENS{kind[:1].upper()}{rng.integers(10**6, 10**7)}" for _ in names], dtype=object),
        "feature_types": pd.Categorical([kind] * len(names)),
        "highly_variable": rng.random(len(names)) < 0.3,
    }, index=pd.Index(names))


class Modality:
    """A modality's AnnData parts and which global cells it measured, in its row order."""

    def __init__(self, name, cells, X, obs, var, obsm=None, varm=None, obsp=None, layers=None, uns=None,
                 x_kwargs=None):
        self.name, self.cells = name, np.asarray(cells, dtype=np.int64)
        self.X, self.obs, self.var = X, obs, var
        self.obsm, self.varm, self.obsp = obsm or {}, varm or {}, obsp or {}
        self.layers, self.uns = layers or {}, uns or {}
        self.x_kwargs = x_kwargs or {}


def member_rows(rng, n, share, shuffled=True):
    """The global cells a modality measured (a share of n), in its row order."""
    cells = np.flatnonzero(rng.random(n) < share)
    return rng.permutation(cells) if shuffled else cells


def make_modality(rng, name, cells, global_names, n_vars, x_format, x_kwargs=None, dense_layer=False,
                  sparse_layer=False, obsm_key="X_pca", obsm_dims=10, obsm_dtype=np.float32, obsp_key="distances",
                  varm=True):
    m = len(cells)
    names = [global_names[g] for g in cells]
    var_names = [f"{name}-{i:04d}" for i in range(n_vars)]
    counts = counts_csr(rng, m, n_vars, 0.12)
    X = {"csr": counts, "csc": counts.tocsc(), "dense": counts.toarray()}[x_format]
    if x_format == "csc":
        X.sort_indices()
    layers = {}
    if dense_layer:
        layers["raw"] = (counts.toarray() * 2 + 1).astype(np.float32)
    if sparse_layer:
        layers["counts"] = counts_csr(rng, m, n_vars, 0.05)
    uns = {"modality": name, "params": {"n_top": int(rng.integers(5, 50)), "method": f"{name}-norm",
                                        "nested": {"deeper": {"level": 3, "weights": rng.random(4)}}},
           f"{name}_cluster_colors": np.array([f"#{i:02x}{i:02x}aa" for i in range(5)], dtype=object)}
    return Modality(name, cells, X, modality_obs(rng, names, name), modality_var(rng, var_names, name),
                    obsm={obsm_key: rng.normal(size=(m, obsm_dims)).astype(obsm_dtype)},
                    varm={"PCs": rng.normal(size=(n_vars, 4)).astype(np.float32)} if varm else {},
                    obsp={obsp_key: knn_graph(rng, m, 6)}, layers=layers, uns=uns, x_kwargs=x_kwargs)


# ---- The MuData layout -----------------------------------------------------------------------

def write_h5mu(path, global_names, obs, modalities, mod_order, obsm=None, obsp=None, uns=None, axis=0,
               extra_var=None, version=MUDATA_VERSION):
    """mudata's _write_h5mu: global annotations, obsmap/varmap, then /mod/NAME element by element;
    the userblock's header written after the file is closed."""
    n = len(global_names)
    var = pd.concat([m.var[["gene_ids"]] for m in modalities])
    var["feature_types"] = pd.Categorical(np.concatenate([[m.name] * len(m.var) for m in modalities]))
    var["gene_name"] = np.array([f"{v.split('-')[0]} gene {v.split('-')[1]}" for v in var.index], dtype=object)
    if extra_var is not None:
        extra_var(var)
    obsmap, varmap, obs_masks, var_masks = {}, {}, {}, {}
    start = 0
    for m in modalities:
        rows = np.zeros(n, dtype=np.uint32)
        rows[m.cells] = np.arange(1, len(m.cells) + 1, dtype=np.uint32)
        obsmap[m.name] = rows
        genes = np.zeros(len(var), dtype=np.uint32)
        genes[start:start + len(m.var)] = np.arange(1, len(m.var) + 1, dtype=np.uint32)
        start += len(m.var)
        varmap[m.name] = genes
        obs_masks[m.name] = rows > 0
        var_masks[m.name] = genes > 0
    global_obsm = dict(obsm or {})
    global_obsm.update(obs_masks)
    with h5py.File(path, "w", userblock_size=USERBLOCK) as f:
        put(f, "obs", obs)
        put(f, "var", var)
        put(f, "obsm", global_obsm)
        put(f, "varm", var_masks)
        put(f, "obsp", dict(obsp or {}))
        put(f, "varp", {})
        put(f, "uns", dict(uns or {}))
        put(f, "obsmap", obsmap)
        put(f, "varmap", varmap)
        if axis is not None:
            f.attrs["axis"] = axis
        mod = f.require_group("mod")
        for m in modalities:
            group = mod.require_group(m.name)
            put(group, "X", m.X, **m.x_kwargs)
            put(group, "obs", m.obs)
            put(group, "var", m.var)
            put(group, "obsm", m.obsm)
            put(group, "varm", m.varm)
            put(group, "obsp", m.obsp)
            put(group, "varp", {})
            put(group, "layers", m.layers)
            put(group, "uns", m.uns)
            group.attrs["encoding-type"] = "anndata"
            group.attrs["encoding-version"] = "0.1.0"
            group.attrs["encoder"], group.attrs["encoder-version"] = ENCODER
        if mod_order is not None:
            mod.attrs["mod-order"] = np.array(mod_order, dtype=h5py.string_dtype("utf-8"))
        f.attrs["encoding-type"] = "MuData"
        f.attrs["encoding-version"] = version
        f.attrs["encoder"], f.attrs["encoder-version"] = ENCODER
    header = (f"MuData (format-version={version};creator=make_mudata_sources.py;"
              f"creator-version={ENCODER[1]})").encode()
    with open(path, "r+b") as f:
        f.write(header + b"\0" * (USERBLOCK - len(header)))


def global_obs(rng, names, modalities):
    n = len(names)
    obs = pd.DataFrame({
        "celltype": categorical(rng, n, ["T", "B", "NK", "Mono/DC", "Plasma, IgG", "Platelet"], 0.06),
        "donor": np.array([f"donor-{d}" for d in rng.integers(0, 7, size=n)], dtype=object),
        "batch_n": nullable_int(rng, n, 0.05),
    }, index=pd.Index(names))
    first = modalities[0]
    column = np.full(n, np.nan)
    column[first.cells] = np.asarray(first.X.sum(axis=1)).ravel()
    obs[f"{first.name}:n_counts"] = column
    return obs


def three_modalities(path, rng):
    n = 3000
    names = barcodes(rng, n, "c")
    # Membership drawn together so that every combination occurs (rna-only, prot-only, both,
    # all three, none).
    draw = rng.random((n, 3))
    rna = rng.permutation(np.flatnonzero(draw[:, 0] < 0.7))
    prot = rng.permutation(np.flatnonzero(draw[:, 1] < 0.6))
    atac = rng.permutation(np.flatnonzero(draw[:, 2] < 0.08))
    chunked = {"compression": "gzip", "chunks": (RNA_CHUNK,)}
    modalities = [
        make_modality(rng, "rna", rna, names, 200, "csr", x_kwargs=chunked, sparse_layer=True),
        make_modality(rng, "prot", prot, names, 25, "dense", dense_layer=True, obsm_key="X_adt", obsm_dims=5,
                      obsm_dtype=np.float64, obsp_key="connectivities", varm=False),
        make_modality(rng, "atac", atac, names, 150, "csc", obsm_key="X_lsi", obsm_dims=4, obsp_key="neighbors"),
    ]
    obs = global_obs(rng, names, modalities)
    umap = rng.normal(0, 4, size=(n, 2)).astype(np.float32)
    uns = {"wnn": {"params": {"n_neighbors": 12, "modalities": np.array(["rna", "prot"], dtype=object)},
                   "weights": {"rna": 0.6, "prot": 0.4}},
           "note": "three modalities, shuffled rows", "celltype_colors":
           np.array(["#aa0000", "#00aa00", "#0000aa", "#aaaa00", "#00aaaa", "#aa00aa"], dtype=object)}
    write_h5mu(path, names, obs, modalities, ["rna", "prot", "atac"], obsm={"X_umap": umap},
               obsp={"wnn": knn_graph(rng, n, 8)}, uns=uns)
    # rna's indptr in chunks of rows too (write_elem gives the three one chunking).
    with h5py.File(path, "r+") as f:
        group = f["mod/rna/X"]
        values = group["indptr"][()]
        del group["indptr"]
        group.create_dataset("indptr", data=values, chunks=(RNA_INDPTR_CHUNK,), maxshape=(None,),
                             compression="gzip")
    return {"cells": n, "modalities": ["atac", "prot", "rna"], "mod_order": ["rna", "prot", "atac"],
            "cells_of_none": True}


def one_modality_all_cells(path, rng):
    n = 800
    names = barcodes(rng, n, "s")
    rna = make_modality(rng, "rna", np.arange(n), names, 120, "csr")
    obs = global_obs(rng, names, [rna])
    umap = rng.normal(0, 2, size=(n, 2)).astype(np.float32)
    write_h5mu(path, names, obs, [rna], ["rna"], obsm={"X_umap": umap}, obsp={"wnn": knn_graph(rng, n, 5)},
               uns={"note": "one modality, every cell"})
    return {"cells": n, "modalities": ["rna"], "mod_order": ["rna"], "cells_of_none": False}


def partial_order(path, rng):
    n = 600
    names = barcodes(rng, n, "p")
    alpha = member_rows(rng, n, 0.5)
    beta = member_rows(rng, n, 0.4)
    gamma = member_rows(rng, n, 0.3)
    modalities = [
        make_modality(rng, "alpha", alpha, names, 60, "csr"),
        make_modality(rng, "beta", beta, names, 12, "dense", dense_layer=True, varm=False),
        make_modality(rng, "gamma", gamma, names, 40, "csc"),
    ]
    obs = global_obs(rng, names, modalities)
    umap = rng.normal(0, 3, size=(n, 2)).astype(np.float32)
    write_h5mu(path, names, obs, modalities, ["gamma"], obsm={"X_umap": umap}, uns={"note": "a partial mod-order"},
               axis=None)
    return {"cells": n, "modalities": ["alpha", "beta", "gamma"], "mod_order": ["gamma"], "cells_of_none": True}


def stray_objects(path, rng):
    n = 300
    names = barcodes(rng, n, "x")
    modalities = [make_modality(rng, "x", member_rows(rng, n, 0.7), names, 30, "csr"),
                  make_modality(rng, "w", member_rows(rng, n, 0.6), names, 10, "dense", varm=False)]
    obs = global_obs(rng, names, modalities)
    umap = rng.normal(0, 3, size=(n, 2)).astype(np.float32)
    write_h5mu(path, names, obs, modalities, ["x", "nope"], obsm={"X_umap": umap}, uns={"note": "stray objects"},
               version=STRAY_VERSION)
    with h5py.File(path, "r+") as f:
        f.create_group("extra").create_dataset("values", data=np.arange(5, dtype=np.int16))
        f["mod"].create_dataset("stray", data=np.arange(3, dtype=np.float64))
        f["mod/x"].create_dataset("notes", data=np.array(["a", "b"], dtype=h5py.string_dtype("utf-8")))
    return {"cells": n, "modalities": ["w", "x"], "mod_order": ["x", "nope"], "cells_of_none": True,
            "encoding_version": STRAY_VERSION}


FILES = {"three-modalities": three_modalities, "one-modality-all-cells": one_modality_all_cells,
         "partial-order": partial_order, "stray-objects": stray_objects}


def generate(directory, seed=DEFAULT_SEED):
    """Writes every file into directory; the manifest (also written as manifest.json)."""
    os.makedirs(directory, exist_ok=True)
    manifest = {"seed": seed, "files": {}}
    for i, (name, make) in enumerate(FILES.items()):
        path = os.path.join(directory, name + ".h5mu")
        entry = make(path, np.random.default_rng([seed, i]))
        entry["path"] = path
        manifest["files"][name] = entry
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


# ---- Reading back ----------------------------------------------------------------------------

def check_file(path, cells_of_none=None, version=MUDATA_VERSION):
    """The problems of one .h5mu against the layout and the obsmap invariants ([] if none);
    cells_of_none True (False): some cell (no cell) is measured by no modality; version the root's
    encoding-version."""
    import readers  # noqa: F401  (registers the anndata group reader when anndata is missing)
    from anndata_elements import read_elem as own_read_elem
    read_elem = own_read_elem
    try:
        from anndata._io.specs import read_elem
    except ImportError:
        pass
    problems = []
    with open(path, "rb") as f:
        head = f.read(USERBLOCK)
    if not head.startswith(f"MuData (format-version={version};".encode()):
        problems.append(f"userblock starts {head[:40]!r}")
    with h5py.File(path, "r") as f:
        if f.userblock_size != USERBLOCK:
            problems.append(f"userblock of {f.userblock_size} bytes")
        if f.attrs.get("encoding-type") != "MuData" or f.attrs.get("encoding-version") != version:
            problems.append(f"root attributes {dict(f.attrs)}")
        names = np.asarray(read_elem(f["obs"]).index)
        genes = np.asarray(read_elem(f["var"]).index)
        n = len(names)
        covered = np.zeros(n, dtype=bool)
        for m in [m for m in f["mod"] if isinstance(f["mod"][m], h5py.Group)]:
            group = f["mod"][m]
            if group.attrs.get("encoding-type") != "anndata" or group.attrs.get("encoding-version") != "0.1.0":
                problems.append(f"/mod/{m}: attributes {dict(group.attrs)}")
            adata = read_elem(group)
            for axis, mapping, mask, own, whole in (("obs", "obsmap", "obsm", adata.obs_names, names),
                                                    ("var", "varmap", "varm", adata.var_names, genes)):
                values = f[mapping][m][()]
                if values.dtype != np.uint32 or values.shape != (len(whole),):
                    problems.append(f"/{mapping}/{m}: {values.dtype} {values.shape}")
                    continue
                kept = values[values > 0]
                if sorted(kept.tolist()) != list(range(1, len(own) + 1)):
                    problems.append(f"/{mapping}/{m}: its non-zero values are not a permutation of 1..{len(own)}")
                    continue
                if [str(x) for x in np.asarray(own)[kept - 1]] != [str(x) for x in whole[values > 0]]:
                    problems.append(f"/{mapping}/{m}: the modality's {axis} names at {mapping} - 1 are not "
                                    "the global ones")
                if not np.array_equal(f[mask][m][()], values > 0):
                    problems.append(f"/{mask}/{m}: not {mapping}/{m} > 0")
            covered |= f["obsmap"][m][()] > 0
            for key, value in adata.obsp.items():
                if value.shape != (adata.n_obs, adata.n_obs):
                    problems.append(f"/mod/{m}/obsp/{key}: shape {value.shape}")
        order = f["mod"].attrs.get("mod-order")
        if order is None or h5py.check_string_dtype(f["mod"].attrs.get_id("mod-order").dtype) is None:
            problems.append(f"/mod: mod-order {order!r} is not an attribute of strings")
        if cells_of_none is not None and cells_of_none == bool(covered.all()):
            problems.append(f"{int((~covered).sum())} cells are measured by no modality, "
                            f"{'some' if cells_of_none else 'none'} expected")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--check", action="store_true", help="read every file back and check it")
    args = parser.parse_args()
    manifest = generate(args.directory, args.seed)
    failed = False
    if args.check:
        for name, entry in manifest["files"].items():
            version = entry.get("encoding_version", MUDATA_VERSION)
            problems = check_file(entry["path"], entry["cells_of_none"], version)
            print(f"{name}: {'ok' if not problems else 'FAILED'}")
            for problem in problems:
                print(f"  {problem}")
            failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
