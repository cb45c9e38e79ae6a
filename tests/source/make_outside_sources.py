#!/usr/bin/python3
"""Writes, into the directory given, valid .h5ad files (anndata 0.8 layout) one
of whose elements lives outside the file: HDF5 external storage, a virtual
dataset (VDS) over another file or over a FIFO, an external link to a
dataset, to a column, to the whole obs. Each comes with a twin: the same file
without the hostile element, which a mount must serve byte for byte like the
rest of the hostile one. tests/integration/test_confinement.py mounts them.

Every file outside the source holds a marker, 16 bytes repeated, unique to
it: no byte sequence a mount serves (raw or decoded) may contain one. The
secrets behind external storage and VDS are made root-only (0600) by the
test, as /etc/shadow would be.

manifest.json lists the cases:
    {"name", "file", "twin" (or null), "element" (the model path left out),
     "h5path" (the element's HDF5 path), "reason" (a piece of the reason the
     mount gives), "refused" (true: the file cannot be mounted without it),
     "outside" (files outside the source), "markers" (hex), "fifo" (paths)}

Deterministic: fixed seeds, track_times off; paths inside the files are the
absolute paths of the output directory (so two runs into the same directory
write the same bytes). Run with Debian's /usr/bin/python3 (h5py 3.7 or
later; no anndata needed: the base file is written with h5py in anndata
0.8's layout by tests/integration/h5ad_writer.py).
    /usr/bin/python3 tests/source/make_outside_sources.py DIR
"""

import hashlib
import json
import os
import shutil
import sys
import warnings

import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

warnings.simplefilter("ignore")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import h5ad_writer  # noqa: E402

N_OBS, N_VARS = 40, 12
# Chunks of the files' own arrays stay unchunked (anndata's default for dense
# arrays): every dataset here is contiguous, so the direct path reads it.


def marker(name):
    """16 bytes unique to name, none of them NUL (so strings keep them)."""
    digest = hashlib.sha256(b"zarrmount-outside-" + name.encode()).digest()
    return b"ZM!" + bytes(0x21 + b % 90 for b in digest[:13])


def secret_bytes(name, size):
    m = marker(name)
    return (m * (size // len(m) + 1))[:size]


def write_secret(out, name, size):
    path = os.path.join(out, name)
    with open(path, "wb") as f:
        f.write(secret_bytes(name, size))
    return path


def base_parts(sparse_x):
    """The parts of the base AnnData (h5ad_writer.write_h5ad's arguments)."""
    rng = np.random.default_rng(20241217)
    counts = rng.poisson(0.7, size=(N_OBS, N_VARS)).astype(np.float32)
    x = sp.csr_matrix(counts) if sparse_x else counts
    obs = pd.DataFrame({
        "score": rng.normal(size=N_OBS),
        "depth": rng.integers(100, 5000, size=N_OBS).astype(np.int64),
        "cell_type": pd.Categorical(rng.choice(["B", "T", "NK"], size=N_OBS)),
    }, index=[f"cell{i:03d}" for i in range(N_OBS)])
    var = pd.DataFrame({"gene_len": rng.integers(300, 9000, size=N_VARS).astype(np.int64)},
                       index=[f"gene{j:02d}" for j in range(N_VARS)])
    obsm = {"X_umap": rng.normal(size=(N_OBS, 2)).astype(np.float32),
            "X_pca": rng.normal(size=(N_OBS, 5)).astype(np.float32)}
    return {"X": x, "obs": obs, "var": var, "obsm": obsm, "layers": {"counts": counts.astype(np.int32)},
            "uns": {"note": "confinement fixture"}}


def write_base(path, sparse_x):
    h5ad_writer.write_h5ad(path, **base_parts(sparse_x))


def attrs_of(obj):
    return {k: obj.attrs[k] for k in obj.attrs}


def set_attrs(obj, attrs):
    for k, v in attrs.items():
        obj.attrs[k] = v


def drop_column(f, frame, column):
    """Removes a dataframe column and its name from column-order."""
    del f[f"{frame}/{column}"]
    order = [c.decode() if isinstance(c, bytes) else c for c in f[frame].attrs["column-order"]]
    order.remove(column)
    f[frame].attrs["column-order"] = np.array(order, dtype=object) if order else np.array([], "f8")


def replace_external(f, h5path, secret):
    """The dataset at h5path becomes external storage over secret (its shape,
    dtype and attributes kept)."""
    old = f[h5path]
    shape, dtype, attrs = old.shape, old.dtype, attrs_of(old)
    del f[h5path]
    size = int(np.prod(shape)) * dtype.itemsize
    new = f.create_dataset(h5path, shape=shape, dtype=dtype, external=[(secret, 0, size)],
                           track_times=False)
    set_attrs(new, attrs)


def replace_virtual(f, h5path, source_file, source_name, unlimited=False):
    """The dataset at h5path becomes a VDS over source_file:source_name."""
    old = f[h5path]
    shape, dtype, attrs = old.shape, old.dtype, attrs_of(old)
    del f[h5path]
    if unlimited:
        # An unlimited mapping: with HDF5's default view (last available) an
        # open of the VDS looks at the source's extent, i.e. opens it.
        maxshape = (None,) + shape[1:]
        layout = h5py.VirtualLayout(shape=shape, dtype=dtype, maxshape=maxshape)
        source = h5py.VirtualSource(source_file, source_name, shape=shape, dtype=dtype,
                                    maxshape=maxshape)
        layout[0:h5py.h5s.UNLIMITED] = source[0:h5py.h5s.UNLIMITED]
    else:
        layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
        layout[...] = h5py.VirtualSource(source_file, source_name, shape=shape, dtype=dtype)
    new = f.create_virtual_dataset(h5path, layout)
    set_attrs(new, attrs)


def other_file(path, datasets):
    """An HDF5 file of datasets {name: (shape, dtype, bytes)} (values are the
    bytes given, so a marker shows as it is)."""
    with h5py.File(path, "w") as f:
        for name, (shape, dtype, raw) in datasets.items():
            values = np.frombuffer(raw, dtype=dtype).reshape(shape)
            f.create_dataset(name, data=values, track_times=False)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_outside_sources.py DIR")
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    cases = []

    def paths(name):
        return os.path.join(out, name + ".h5ad"), os.path.join(out, name + ".twin.h5ad")

    def case(name, element, h5path, reason, outside, markers, twin=True, refused=False,
             fifo=()):
        file, twin_path = paths(name)
        cases.append({"name": name, "file": file, "twin": twin_path if twin else None,
                      "element": element, "h5path": h5path, "reason": reason,
                      "refused": refused, "outside": outside,
                      "markers": [m.hex() for m in markers], "fifo": list(fifo)})
        print(f"wrote {os.path.basename(file)}")

    def start(name, sparse_x=False):
        """The hostile file and its twin, both the same base to begin with."""
        file, twin = paths(name)
        write_base(file, sparse_x)
        shutil.copyfile(file, twin)
        return file, twin

    # 1. Dense X: external storage over a root-only secret.
    file, twin = start("x-external")
    secret = write_secret(out, "secret-x.bin", N_OBS * N_VARS * 4)
    with h5py.File(file, "r+") as f:
        replace_external(f, "X", secret)
    with h5py.File(twin, "r+") as f:
        del f["X"]
    case("x-external", "X", "/X", "external storage", [secret], [marker("secret-x.bin")])

    # 2. An obs column: external storage.
    file, twin = start("obs-column-external")
    secret = write_secret(out, "secret-obs.bin", N_OBS * 8)
    with h5py.File(file, "r+") as f:
        replace_external(f, "obs/score", secret)
    with h5py.File(twin, "r+") as f:
        drop_column(f, "obs", "score")
    case("obs-column-external", "obs/score", "/obs/score", "external storage", [secret],
         [marker("secret-obs.bin")])

    # 3. A sparse X whose data is a VDS over another (root-only) file: the
    # whole X is left out.
    file, twin = start("x-data-vds", sparse_x=True)
    other = os.path.join(out, "other-vds.h5")
    with h5py.File(file, "r") as f:
        nnz = f["X/data"].shape[0]
    other_file(other, {"d": ((nnz,), np.float32, secret_bytes("other-vds.h5", nnz * 4))})
    with h5py.File(file, "r+") as f:
        replace_virtual(f, "X/data", other, "d")
    with h5py.File(twin, "r+") as f:
        del f["X"]
    case("x-data-vds", "X", "/X", "virtual dataset", [other], [marker("other-vds.h5")])

    # 4. VDS over a FIFO (opening it would wait for a writer for ever): an
    # unlimited mapping in obsm/X_pca and a fixed one in layers/counts.
    file, twin = start("vds-fifo")
    fifo = os.path.join(out, "fifo.h5")
    with h5py.File(file, "r+") as f:
        replace_virtual(f, "obsm/X_pca", fifo, "d", unlimited=True)
        replace_virtual(f, "layers/counts", fifo, "c")
    with h5py.File(twin, "r+") as f:
        del f["obsm/X_pca"]
        del f["layers/counts"]
    if os.path.lexists(fifo):
        os.remove(fifo)
    os.mkfifo(fifo, 0o600)
    case("vds-fifo", "obsm/X_pca", "/obsm/X_pca", "virtual dataset", [fifo], [], fifo=[fifo])
    cases[-1]["also"] = [{"element": "layers/counts", "h5path": "/layers/counts"}]

    # 5. obsm/X_umap: an external link to a dataset in another file.
    file, twin = start("obsm-external-link")
    other = os.path.join(out, "other-link.h5")
    umap = secret_bytes("other-link.h5", N_OBS * 2 * 4)
    depth = secret_bytes("other-link.h5", N_OBS * 8)
    other_file(other, {"umap": ((N_OBS, 2), np.float32, umap),
                       "depth": ((N_OBS,), np.int64, depth)})
    with h5py.File(other, "r+") as f:
        f["umap"].attrs["encoding-type"] = "array"
        f["umap"].attrs["encoding-version"] = "0.2.0"
        f["depth"].attrs["encoding-type"] = "array"
        f["depth"].attrs["encoding-version"] = "0.2.0"
    with h5py.File(file, "r+") as f:
        del f["obsm/X_umap"]
        f["obsm/X_umap"] = h5py.ExternalLink(other, "/umap")
    with h5py.File(twin, "r+") as f:
        del f["obsm/X_umap"]
    case("obsm-external-link", "obsm/X_umap", "/obsm/X_umap",
         f"an external link to {other}:/umap is not followed", [other],
         [marker("other-link.h5")])

    # 6. An obs column: an external link.
    file, twin = start("obs-column-external-link")
    with h5py.File(file, "r+") as f:
        del f["obs/depth"]
        f["obs/depth"] = h5py.ExternalLink(other, "/depth")
    with h5py.File(twin, "r+") as f:
        drop_column(f, "obs", "depth")
    case("obs-column-external-link", "obs/depth", "/obs/depth",
         f"an external link to {other}:/depth is not followed", [other],
         [marker("other-link.h5")])

    # 7. /obs itself an external link (to a complete obs in another file):
    # an .h5ad needs obs, so the file is refused, naming the link.
    file, _ = paths("obs-external-link")
    write_base(file, False)
    other_obs = os.path.join(out, "other-obs.h5")
    with h5py.File(file, "r") as f, h5py.File(other_obs, "w") as g:
        f.copy("obs", g, name="obs")
        names = np.array([secret_bytes("other-obs.h5", 16).decode()] * N_OBS, dtype=object)
        del g["obs/_index"]
        g["obs"].create_dataset("_index", data=names, dtype=h5py.string_dtype(),
                                track_times=False)
        g["obs/_index"].attrs["encoding-type"] = "string-array"
        g["obs/_index"].attrs["encoding-version"] = "0.2.0"
    with h5py.File(file, "r+") as f:
        del f["obs"]
        f["obs"] = h5py.ExternalLink(other_obs, "/obs")
    case("obs-external-link", "obs", "/obs",
         f"an external link to {other_obs}:/obs is not followed", [other_obs],
         [marker("other-obs.h5")], twin=False, refused=True)

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
