#!/usr/bin/python3
"""-o index_dtype=int32 (issue 24, docs/mount.md "Options"): every sparse matrix's indices and
indptr (X, layers, obsm, obsp, varp, raw/X, MuData modalities' and 10x modalities' windows) are
served as <i4 with the values the default mount serves, everything else byte for byte the
default's; anndata and scipy read them; `zarrmount export --index-dtype int32` writes the same
bytes; a source whose sparse matrix could not fit (uns/big: 3,000,000,000 columns declared, two
entries) is refused at mount in one line naming it, and mounts by default; index_dtype=int16 is
refused.

Sources: full-csr.h5ad (int32 already), int64.h5ad written here (anndata, scipy matrices with
int64 indices and indptr: X, a CSC layer, obsp, raw/X), 10x/v3-two-feature-types.h5 (int64,
MuData of column windows) and mudata/two-modalities.h5mu.
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import h5py  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import zarr  # noqa: E402

import h5ad_writer  # noqa: E402
from live_mount import BINARY, Mount, check, report  # noqa: E402
from readers import anndata, have_anndata  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
FIX = os.path.join(ROOT, "fixtures/sources")
VIEWS = ("full", "file", "uniform/seed0/k=17", "blocks/seed3/k=17")


def write_int64(path):
    rng = np.random.default_rng(7)
    n, m = 40, 25

    def wide(matrix):
        matrix.indices = matrix.indices.astype(np.int64)
        matrix.indptr = matrix.indptr.astype(np.int64)
        return matrix
    X = wide(sp.random(n, m, density=0.2, format="csr", dtype=np.float32, random_state=1))
    h5ad_writer.write_h5ad(
        path, X=X, layers={"csc": wide(sp.csc_matrix(X))},
        obsp={"graph": wide(sp.random(n, n, density=0.1, format="csr", random_state=2))},
        obsm={"sparse": wide(sp.random(n, 6, density=0.3, format="csr", random_state=3))},
        raw={"X": wide(X[:, :m - 3].tocsr())})
    with h5py.File(path, "r") as f:
        assert all(f[p].dtype == np.int64 for p in ("X/indices", "X/indptr", "raw/X/indices",
                                                     "layers/csc/indptr", "obsp/graph/indptr")) and f["obsp/graph/indptr"].dtype == np.int64


def write_huge(path):
    """A valid AnnData whose uns/big declares 3e9 columns: its indices cannot be int32."""
    h5ad_writer.write_h5ad(path, X=np.ones((4, 3), dtype=np.float32))
    with h5py.File(path, "a") as f:
        g = f["uns"].create_group("big")
        g.attrs["encoding-type"] = "csr_matrix"
        g.attrs["encoding-version"] = "0.1.0"
        g.attrs["shape"] = np.array([2, 3_000_000_000], dtype=np.int64)
        g["data"] = np.array([1.0, 2.0])
        g["indices"] = np.array([5, 2_999_999_999], dtype=np.int64)
        g["indptr"] = np.array([0, 1, 2], dtype=np.int64)


def attrs_of(node):
    return dict(node.attrs.asdict()) if hasattr(node.attrs, "asdict") else dict(node.attrs)


def sparse_groups(root, path=""):
    kind = attrs_of(root).get("encoding-type")
    if kind in ("csr_matrix", "csc_matrix"):
        yield path, kind
    for key, sub in root.groups():
        yield from sparse_groups(sub, f"{path}/{key}" if path else key)


def metadata_files(top):
    for directory, _, files in os.walk(top):
        for name in files:
            if name in (".zarray", ".zattrs", ".zgroup"):
                yield os.path.relpath(os.path.join(directory, name), top)


def compare_view(default, narrow, label):
    a, b = zarr.open_group(default, mode="r"), zarr.open_group(narrow, mode="r")
    groups = list(sparse_groups(a))
    wrong = []
    for path, _ in groups:
        for part in ("indices", "indptr"):
            x, y = a[f"{path}/{part}"], b[f"{path}/{part}"]
            with open(os.path.join(narrow, path, part, ".zarray")) as f:
                dtype = json.load(f)["dtype"]
            if dtype != "<i4" or not np.array_equal(x[...], y[...]):
                wrong.append(f"{path}/{part}: {dtype}, values equal: {np.array_equal(x[...], y[...])}")
        if not np.array_equal(a[f"{path}/data"][...], b[f"{path}/data"][...]) or \
                a[f"{path}/data"].dtype != b[f"{path}/data"].dtype:
            wrong.append(f"{path}/data differs")
    if label.split()[0] in ("int64.h5ad", "v3-two-feature-types.h5"):
        wide = [f"{p}/{part}" for p, _ in groups for part in ("indices", "indptr")
                if a[f"{p}/{part}"].dtype != np.int64]
        check(f"{label}: the default serves these sources' indices and indptr as int64 (<i8)",
              groups and not wide, "\n".join(wide[:8]))
    check(f"{label}: all {len(groups)} sparse matrices' indices and indptr are <i4 with the default's "
          "values, data as it was", groups and not wrong, "\n".join(wrong[:8]))
    # Everything else is the default's, byte for byte (.zmetadata aside: it holds the dtypes).
    others = []
    for rel in sorted(metadata_files(default)):
        parts = rel.split(os.sep)
        if len(parts) >= 2 and parts[-1] == ".zarray" and parts[-2] in ("indices", "indptr"):
            continue
        if not filecmp.cmp(os.path.join(default, rel), os.path.join(narrow, rel), shallow=False):
            others.append(rel)
    check(f"{label}: every other metadata file is the default's", not others, "\n".join(others[:8]))
    return groups


def check_readers(narrow, default, label, groups):
    problems = []
    b = zarr.open_group(narrow, mode="r")
    for path, kind in groups:
        shape = tuple(b[path].attrs["shape"])
        make = sp.csr_matrix if kind == "csr_matrix" else sp.csc_matrix
        m = make((b[f"{path}/data"][...], b[f"{path}/indices"][...], b[f"{path}/indptr"][...]), shape=shape)
        m.check_format(full_check=True)
        ref = zarr.open_group(default, mode="r")
        r = make((ref[f"{path}/data"][...], ref[f"{path}/indices"][...], ref[f"{path}/indptr"][...]),
                 shape=shape)
        if (m != r).nnz:
            problems.append(f"{path}: scipy's matrices differ")
    if attrs_of(b).get("encoding-type") == "anndata" and have_anndata():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, want = anndata.read_zarr(narrow), anndata.read_zarr(default)
        if sp.issparse(got.X):
            if got.X.indices.dtype != np.int32 or (got.X != want.X).nnz:
                problems.append(f"anndata X: {got.X.indices.dtype}")
        for key in got.layers:
            if sp.issparse(got.layers[key]) and (got.layers[key] != want.layers[key]).nnz:
                problems.append(f"anndata layers/{key}")
        if list(got.obs.columns) != list(want.obs.columns) or got.shape != want.shape:
            problems.append("anndata obs/shape")
    check(f"{label}: scipy (check_format){' and anndata' if have_anndata() else ''} read the int32 "
          "view as the default's",
          not problems, "\n".join(problems[:8]))


def main():
    work = tempfile.mkdtemp(prefix="zm-index-dtype-")
    try:
        int64 = os.path.join(work, "int64.h5ad")
        huge = os.path.join(work, "huge.h5ad")
        write_int64(int64)
        write_huge(huge)
        sources = ((os.path.join(FIX, "h5ad/full-csr.h5ad"), "full-csr.h5ad"), (int64, "int64.h5ad"),
                   (os.path.join(FIX, "10x/v3-two-feature-types.h5"), "v3-two-feature-types.h5"),
                   (os.path.join(FIX, "mudata/two-modalities.h5mu"), "two-modalities.h5mu"))
        for source, label in sources:
            with Mount(source, "codec=none", debug=False) as default, \
                    Mount(source, "codec=none", "index_dtype=int32", debug=False) as narrow:
                options = []
                for point in (default.point, narrow.point):
                    with open(os.path.join(point, ".zarrmount/info.json")) as f:
                        options.append(json.load(f)["options"])
                check(f"{label}: info.json's options say indexDtype int32 only under the option",
                      "indexDtype" not in options[0] and options[1].get("indexDtype") == "int32",
                      str(options))
                for view in VIEWS:
                    d, n = os.path.join(default.point, view), os.path.join(narrow.point, view)
                    groups = compare_view(d, n, f"{label} {view}")
                    check_readers(n, d, f"{label} {view}", groups)
                    if view == "uniform/seed0/k=17":
                        out = os.path.join(work, "export")
                        shutil.rmtree(out, ignore_errors=True)
                        done = subprocess.run([BINARY, "export", source, view, out, "--codec", "none",
                                               "--index-dtype", "int32"], capture_output=True, text=True)
                        differ = [rel for rel in metadata_files(n)
                                  if not filecmp.cmp(os.path.join(n, rel), os.path.join(out, rel), shallow=False)]
                        for path, _ in groups:
                            for part in ("indices", "indptr"):
                                for chunk in os.listdir(os.path.join(n, path, part)):
                                    rel = os.path.join(path, part, chunk)
                                    if not filecmp.cmp(os.path.join(n, rel), os.path.join(out, rel),
                                                       shallow=False):
                                        differ.append(rel)
                        check(f"{label} {view}: export --index-dtype int32 writes the mount's bytes",
                              done.returncode == 0 and not differ, done.stderr + "\n".join(differ[:8]))
        # A source that cannot fit: refused at mount, naming the element; mounted by default.
        with Mount(huge, "codec=none", debug=False) as plain:
            with open(os.path.join(plain.point, "full/uns/big/indices/.zarray")) as f:
                served = json.load(f)["dtype"]
        check("huge.h5ad: mounted by default (uns/big's indices as stored, <i8)", served == "<i8", served)
        try:
            Mount(huge, "codec=none", "index_dtype=int32", debug=False).stop()
            check("huge.h5ad with index_dtype=int32: refused", False, "it mounted")
        except RuntimeError as error:
            lines = [line for line in str(error).splitlines() if "index_dtype" in line]
            check("huge.h5ad with index_dtype=int32: the mount refused in one line naming uns/big",
                  len(lines) == 1 and "uns/big" in lines[0] and "3000000000" in lines[0], str(error))
        done = subprocess.run([BINARY, "export", huge, "full", os.path.join(work, "refused"),
                               "--index-dtype", "int32"], capture_output=True, text=True)
        check("huge.h5ad: export --index-dtype int32 refused (status 2) naming uns/big",
              done.returncode == 2 and "uns/big" in done.stderr and
              not os.path.exists(os.path.join(work, "refused", ".zattrs")), done.stderr)
        point = tempfile.mkdtemp(dir=os.environ.get("ZM_MOUNT_PARENT"))
        done = subprocess.run([BINARY, int64, point, "-f", "-o", "index_dtype=int16"],
                              capture_output=True, text=True, timeout=None)
        check("index_dtype=int16: refused with status 2 in one line",
              done.returncode == 2 and "index_dtype=int16" in done.stderr, done.stderr)
    except Exception:
        check("the test ran", False, traceback.format_exc())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
