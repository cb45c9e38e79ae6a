#!/usr/bin/python3
"""10x Genomics files with several feature types or genomes as MuData stores (issue 22),
through a live mount, against an independent reading with h5py and scipy (nothing here calls
zarrmount but the mount itself and set_rules.py's reading of the selection kernel).

Sources: fixtures/sources/10x/v3-two-feature-types.h5 (Gene Expression, Antibody Capture),
fixtures/sources/10x/v2-two-genomes.h5 (two genomes, disjoint barcodes), and files written here:
three-types.h5 (Gene Expression, Antibody Capture, CRISPR Guide Capture; the matrix in small
gzip chunks so that a view's rows cross many; int32 indices; a barcode with no entries of one
type, one with a column repeated), peaks.h5 (Gene Expression and Peaks: rna and atac),
interleaved.h5 (types not in runs: served as one AnnData, said in info.json's skipped),
descending.h5 (a barcode's indices descending: its modalities' X fail with EIO, the rest
serves), and v2-overlap.h5 (three genomes whose barcodes overlap in part).

For each view (file/, full/, uniform at two seeds and sizes, blocks, one with a modality left
with no rows where the file has one): the global obs are the kernel's cells in its order
(set_rules), obs/_index their barcodes; each modality (mod/NAME/, named as mudata names the
feature types: rna, prot, atac, others by their type) holds the view's cells it measured in
view order, its X the matrix's columns of that type (CSR, values, indices, indptr), its var
those features' rows, its obs the cells' barcodes; obsmap/NAME renumbers (1-based rows in the
modality, 0 for none); varmap/NAME is the type's features, 1-based; anndata.read_zarr reads
each modality alone and zarr.open_consolidated the view; uniform views nest in every
modality. -o layout=anndata serves one AnnData (X of every feature; a v2 file's first genome).

Every mount is unmounted in every outcome (run_mount_test.sh). Prints TAP.
"""
import errno
import json
import os
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import h5py  # noqa: E402
import zarr  # noqa: E402

from live_mount import Mount, check, report  # noqa: E402
import readers  # noqa: E402
import set_rules as R  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
FIXTURES = os.path.join(ROOT, "fixtures", "sources", "10x")
OPTIONS = ("cache_dir=none", "ahead_idle=0")
NAMES = {"Gene Expression": "rna", "Antibody Capture": "prot", "Peaks": "atac"}


# ---- Writing sources -------------------------------------------------------------------

def write_v3(path, types, n_cells, seed, descending_row=None, chunks=64):
    """A v3 file: features of each (type, count) in runs as given, the matrix CSC by barcode
    (features x barcodes) with int32 indices, in gzip chunks of `chunks` entries."""
    rng = np.random.default_rng(seed)
    feature_types = [t for t, count in types for _ in range(count)]
    n_features = len(feature_types)
    dense = (rng.random((n_features, n_cells)) < 0.3) * rng.integers(1, 50, (n_features, n_cells))
    if n_cells > 3:
        first = feature_types.index(feature_types[-1])
        dense[first:, 2] = 0  # barcode 2 has no entries of the last type
    m = sp.csc_matrix(dense.astype(np.int32))
    m.sort_indices()
    data, indices, indptr = list(m.data), list(m.indices), list(m.indptr)
    if n_cells > 4 and indptr[4] > indptr[3]:
        # Barcode 3 repeats its first column (scipy keeps such duplicates).
        at = indptr[3]
        data.insert(at, 7)
        indices.insert(at, indices[at])
        indptr = indptr[:4] + [p + 1 for p in indptr[4:]]
    if descending_row is not None and indptr[descending_row + 1] - indptr[descending_row] >= 2:
        a, b = indptr[descending_row], indptr[descending_row + 1]
        indices[a:b] = indices[a:b][::-1]
        data[a:b] = data[a:b][::-1]
    with h5py.File(path, "w") as f:
        g = f.create_group("matrix")
        kw = dict(chunks=(chunks,), compression="gzip") if len(data) > chunks else {}
        g.create_dataset("data", data=np.array(data, dtype=np.int32), **kw)
        g.create_dataset("indices", data=np.array(indices, dtype=np.int32), **kw)
        g.create_dataset("indptr", data=np.array(indptr, dtype=np.int64))
        g.create_dataset("shape", data=np.array([n_features, n_cells], dtype=np.int32))
        g.create_dataset("barcodes", data=np.array([f"BC{seed}_{i:05d}-1".encode() for i in range(n_cells)]))
        fg = g.create_group("features")
        fg.create_dataset("_all_tag_keys", data=np.array([b"genome"]))
        fg.create_dataset("feature_type", data=np.array([t.encode() for t in feature_types]))
        fg.create_dataset("genome", data=np.array([b"GRCh38" if t == "Gene Expression" else b""
                                                   for t in feature_types]))
        fg.create_dataset("id", data=np.array([f"ID{i:04d}".encode() for i in range(n_features)]))
        fg.create_dataset("name", data=np.array([f"{t.split()[0][:4]}{i}".encode()
                                                 for i, t in enumerate(feature_types)]))


def write_v2(path, genomes, seed):
    """A v2 file: genomes (name, barcodes, genes), each its own matrix."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        for name, barcodes, genes in genomes:
            dense = (rng.random((genes, len(barcodes))) < 0.4) * rng.integers(1, 9, (genes, len(barcodes)))
            m = sp.csc_matrix(dense.astype(np.int32))
            g = f.create_group(name)
            g.create_dataset("data", data=m.data)
            g.create_dataset("indices", data=m.indices.astype(np.int64))
            g.create_dataset("indptr", data=m.indptr.astype(np.int64))
            g.create_dataset("shape", data=np.array([genes, len(barcodes)], dtype=np.int32))
            g.create_dataset("barcodes", data=np.array([b.encode() for b in barcodes]))
            g.create_dataset("genes", data=np.array([f"{name}_G{i}".encode() for i in range(genes)]))
            g.create_dataset("gene_names", data=np.array([f"{name}-g{i}".encode() for i in range(genes)]))


# ---- The independent reading -------------------------------------------------------------

def decode(values):
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def window(X, c0, c1):
    """Columns [c0, c1) of a CSR matrix, each row's entries in them as stored, in order
    (a column repeated kept), their columns taken back by c0."""
    data, indices, indptr = [], [], [0]
    for r in range(X.shape[0]):
        for j in range(X.indptr[r], X.indptr[r + 1]):
            if c0 <= X.indices[j] < c1:
                data.append(X.data[j])
                indices.append(X.indices[j] - c0)
        indptr.append(len(data))
    return Raw(np.array(data, dtype=X.data.dtype), np.array(indices, dtype=X.indices.dtype),
               np.array(indptr, dtype=np.int64), (X.shape[0], c1 - c0))


class Raw:
    """A CSR matrix as its three arrays, rows taken as stored."""

    def __init__(self, data, indices, indptr, shape):
        self.data, self.indices, self.indptr, self.shape = data, indices, np.asarray(indptr), shape

    @staticmethod
    def of(m):
        return Raw(m.data, m.indices, m.indptr, m.shape)

    def __getitem__(self, rows):
        data, indices, indptr = [], [], [0]
        for r in rows:
            a, b = self.indptr[r], self.indptr[r + 1]
            data.extend(self.data[a:b])
            indices.extend(self.indices[a:b])
            indptr.append(len(data))
        return Raw(np.array(data, dtype=self.data.dtype), np.array(indices, dtype=self.indices.dtype),
                   np.array(indptr, dtype=np.int64), (len(rows), self.shape[1]))


class Source:
    """What a 10x file is, read with h5py: the global barcodes and features, and each
    modality (name, barcodes, X cells x features, feature names, global rows)."""

    def __init__(self, path):
        self.path = path
        with h5py.File(path, "r") as f:
            if "matrix" in f:
                self.read_v3(f["matrix"])
            else:
                self.read_v2(f)

    @staticmethod
    def matrix(g):
        """The matrix as cells x features, CSR, its entries as stored (duplicates kept)."""
        shape = g["shape"][:]
        return sp.csr_matrix((g["data"][:], g["indices"][:], g["indptr"][:]),
                             shape=(int(shape[1]), int(shape[0])))

    def read_v3(self, g):
        X = self.matrix(g)
        self.barcodes = decode(g["barcodes"][:])
        types = decode(g["features/feature_type"][:])
        names = decode(g["features/name"][:])
        self.features = names
        self.modalities = []
        order = []
        for t in types:
            if t not in order:
                order.append(t)
        for t in order:
            cols = [i for i, x in enumerate(types) if x == t]
            sub = window(X, cols[0], cols[-1] + 1)
            self.modalities.append(dict(name=NAMES.get(t, t), cols=cols, X=sub,
                                        var=[names[i] for i in cols], rows=np.arange(len(self.barcodes)),
                                        barcodes=self.barcodes))
        self.n = len(self.barcodes)

    def read_v2(self, f):
        self.barcodes = []
        self.modalities = []
        self.features = []
        for name in sorted(f.keys()):
            g = f[name]
            barcodes = decode(g["barcodes"][:])
            for b in barcodes:
                if b not in self.barcodes:
                    self.barcodes.append(b)
            names = decode(g["gene_names"][:])
            self.features += names
            self.modalities.append(dict(name=name, X=Raw.of(self.matrix(g)), var=names, barcodes=barcodes))
        index = {b: i for i, b in enumerate(self.barcodes)}
        for m in self.modalities:
            m["global"] = np.array([index[b] for b in m["barcodes"]], dtype=np.int64)
        self.n = len(self.barcodes)

    def modality_rows(self, m, cells):
        """The modality's rows of the view's cells it has, in view order."""
        if "global" not in m:
            return np.asarray(cells, dtype=np.int64)
        where = {g: r for r, g in enumerate(m["global"])}
        return np.array([where[c] for c in cells if c in where], dtype=np.int64)


def csr_of(group):
    shape = tuple(group.attrs["shape"])
    return sp.csr_matrix((group["data"][:], group["indices"][:], group["indptr"][:]), shape=shape)


def same_csr(got, want):
    """Equal as stored: shape, pointers, indices and values entry for entry."""
    return (tuple(got.shape) == tuple(want.shape) and np.array_equal(got.indptr, want.indptr)
            and np.array_equal(got.indices, want.indices) and np.array_equal(got.data, want.data))


def check_view(label, src, store, cells):
    z = zarr.open_consolidated(store)
    positions = z["obs/cellucid_original_position"][:]
    check(f"{label}: the kernel's cells in its order", np.array_equal(positions, cells),
          f"{positions[:10]} vs {cells[:10]}")
    check(f"{label}: obs/_index is their barcodes",
          list(readers.read(z["obs/_index"])) == [src.barcodes[c] for c in cells])
    check(f"{label}: mod/'s mod-order", z["mod"].attrs["mod-order"] == [m["name"] for m in src.modalities],
          str(z["mod"].attrs.asdict()))
    check(f"{label}: root .zattrs say MuData", z.attrs["encoding-type"] == "MuData")
    first = 0
    for m in src.modalities:
        name = m["name"]
        rows = src.modality_rows(m, cells)
        g = z[f"mod/{name}"]
        X = csr_of(g["X"])
        want = m["X"][rows]
        check(f"{label}: mod/{name}/X is the {len(rows)} rows' columns of its type", same_csr(X, want),
              f"shape {X.shape} vs {want.shape}")
        check(f"{label}: mod/{name}/var is its features",
              list(readers.read(g["var/_index"])) == m["var"])
        check(f"{label}: mod/{name}/obs/_index", list(readers.read(g["obs/_index"])) ==
              [m["barcodes"][r] for r in rows])
        om = z[f"obsmap/{name}"][:]
        expected, c = [], 0
        kept = set(rows.tolist()) if "global" not in m else None
        for cell in cells:
            measured = (cell in kept) if kept is not None else (cell in set(m["global"].tolist()))
            if measured:
                c += 1
            expected.append(c if measured else 0)
        check(f"{label}: obsmap/{name} renumbered", om.dtype == np.uint32 and list(om) == expected,
              f"{list(om[:12])} vs {expected[:12]}")
        vm = z[f"varmap/{name}"][:]
        width = len(m["var"])
        if "cols" in m:
            want_vm = [m["cols"].index(f) + 1 if f in m["cols"] else 0 for f in range(len(src.features))]
        else:
            want_vm = [f - first + 1 if first <= f < first + width else 0 for f in range(len(src.features))]
        check(f"{label}: varmap/{name}", list(vm) == want_vm)
        first += width
        if readers.have_anndata():
            import anndata
            a = anndata.read_zarr(os.path.join(store, "mod", name))
            check(f"{label}: anndata.read_zarr(mod/{name}) reads it alone",
                  a.shape == (len(rows), width) and same_csr(sp.csr_matrix(a.X), want),
                  f"{a.shape}")
    return z


def views_of(n):
    out = [("file", np.arange(n)), ("full", R.full_order(np.arange(n), 0))]
    for seed, k in ((0, max(1, n // 3)), (5, max(1, (2 * n) // 3)), (0, 1)):
        out.append((f"uniform/seed{seed}/k={k}", R.uniform(np.arange(n), seed, k)))
    out.append((f"blocks/B=4/seed2/k={max(1, n // 2)}", R.blocks(np.arange(n), 2, max(1, n // 2), 4)))
    return out


def check_source(path, label):
    src = Source(path)
    with Mount(path, *OPTIONS, debug=False) as mount:
        point = mount.point
        info = json.load(open(os.path.join(point, ".zarrmount", "info.json")))
        check(f"{label}: info.json lists the modalities",
              [m["name"] for m in info.get("modalities", [])] == [m["name"] for m in src.modalities],
              str(info.get("modalities")))
        for view, cells in views_of(src.n):
            try:
                check_view(f"{label} {view}", src, os.path.join(point, view), cells)
            except Exception:  # noqa: BLE001
                check(f"{label} {view}: read", False, traceback.format_exc(limit=4))
        # Nested: a smaller uniform view's rows are a prefix of a larger one's, in each modality.
        small, large = max(1, src.n // 4), max(1, src.n // 2)
        a = zarr.open_consolidated(os.path.join(point, f"uniform/seed0/k={small}"))
        b = zarr.open_consolidated(os.path.join(point, f"uniform/seed0/k={large}"))
        for m in src.modalities:
            x, y = csr_of(a[f"mod/{m['name']}/X"]), csr_of(b[f"mod/{m['name']}/X"])
            check(f"{label}: uniform k={small} nests in k={large} in mod/{m['name']}",
                  x.shape[0] <= y.shape[0] and same_csr(x, y[:x.shape[0]]))
    with Mount(path, *OPTIONS, "layout=anndata", debug=False) as mount:
        z = zarr.open_consolidated(os.path.join(mount.point, "file"))
        first = src.modalities[0]
        with h5py.File(path, "r") as f:
            g = f["matrix"] if "matrix" in f else f[sorted(f.keys())[0]]
            want = Source.matrix(g)
        check(f"{label}: layout=anndata serves one AnnData (X of {'every feature' if 'cols' in first else 'the first genome'})",
              z.attrs["encoding-type"] == "anndata" and "mod" not in z and same_csr(csr_of(z["X"]), want))


def main():
    scratch = tempfile.mkdtemp(prefix="zm-tenx-")
    try:
        three = os.path.join(scratch, "three-types.h5")
        write_v3(three, [("Gene Expression", 40), ("Antibody Capture", 7), ("CRISPR Guide Capture", 5)], 90, 3)
        peaks = os.path.join(scratch, "peaks.h5")
        write_v3(peaks, [("Gene Expression", 12), ("Peaks", 20)], 30, 4)
        overlap = os.path.join(scratch, "v2-overlap.h5")
        cells = [f"C{i:03d}-1" for i in range(30)]
        write_v2(overlap, [("GRCh38", cells[:20], 9), ("mm10", cells[10:25], 6), ("zz_virus", cells[5:30:3], 3)], 5)
        for path, label in ((os.path.join(FIXTURES, "v3-two-feature-types.h5"), "v3-two-feature-types"),
                            (three, "three-types"), (peaks, "peaks"),
                            (os.path.join(FIXTURES, "v2-two-genomes.h5"), "v2-two-genomes"),
                            (overlap, "v2-overlap")):
            try:
                check_source(path, label)
            except Exception:  # noqa: BLE001
                check(f"{label}: mounted and read", False, traceback.format_exc(limit=4))
        # Feature types that are not one run each: one AnnData, and info.json says why.
        interleaved = os.path.join(scratch, "interleaved.h5")
        write_v3(interleaved, [("Gene Expression", 5), ("Antibody Capture", 3), ("Gene Expression", 4)], 20, 6)
        with Mount(interleaved, *OPTIONS, debug=False) as mount:
            info = json.load(open(os.path.join(mount.point, ".zarrmount", "info.json")))
            z = zarr.open_consolidated(os.path.join(mount.point, "file"))
            check("interleaved types: one AnnData, the reason in skipped",
                  z.attrs["encoding-type"] == "anndata" and "X" in z and
                  any(line.startswith("/matrix/features/feature_type: ") and "not one run" in line
                      for line in info["skipped"]), str(info["skipped"]))
        # Indices that descend within a barcode: a view, whose modalities' X cannot be laid
        # out, fails its lookup with EIO (as a damaged indptr does), the log saying why; -o
        # layout=anndata still serves the matrix as it is.
        descending = os.path.join(scratch, "descending.h5")
        write_v3(descending, [("Gene Expression", 10), ("Antibody Capture", 4)], 12, 7, descending_row=5)
        with Mount(descending, *OPTIONS, debug=False) as mount:
            code = 0
            try:
                os.listdir(os.path.join(mount.point, "file", "mod", "rna", "X"))
            except OSError as error:
                code = error.errno
            log = mount.log().decode(errors="replace")
            check("descending indices: the view is EIO, the log says why",
                  code == errno.EIO and "descend" in log, f"errno {code}; log {log[-600:]}")
        with Mount(descending, *OPTIONS, "layout=anndata", debug=False) as mount:
            z = zarr.open_consolidated(os.path.join(mount.point, "file"))
            with h5py.File(descending, "r") as f:
                want = Source.matrix(f["matrix"])
            check("descending indices: layout=anndata serves the matrix as stored",
                  same_csr(csr_of(z["X"]), want))
    finally:
        import shutil
        shutil.rmtree(scratch, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
