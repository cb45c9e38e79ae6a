#!/usr/bin/python3
"""xarray's _ARRAY_DIMENSIONS (issue 24, docs/mount.md "xarray"): every array of every view
carries the dimensions the rule names, .zmetadata's attributes are the .zattrs files', and
xarray.open_zarr(GROUP, consolidated=False) opens every group of the store as a Dataset whose
variables have those dimensions and the values zarr-python reads; anndata and zarr-python read
the views as before (no stray attribute anywhere).

Sources: a small .h5ad written here with anndata (dense X and layers, dense obsp and varp, an
obsm dataframe, nullable and categorical columns, a uns dataframe), the fixtures full-csr.h5ad
(sparse X, layers, obsp, varp, raw) and mudata/two-modalities.h5mu (mod/NAME/..., obsmap), and a
Zarr store whose arrays carry _ARRAY_DIMENSIONS of their own (the rule's replace them).
The expected dimensions are computed here from the rule as docs/mount.md states it.
"""
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
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import zarr  # noqa: E402
import xarray  # noqa: E402

import h5ad_writer  # noqa: E402
from live_mount import BINARY, Mount, check, report  # noqa: E402
from readers import ANNDATA_MISSING, anndata, have_anndata  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
FULL_CSR = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
MUDATA = os.path.join(ROOT, "fixtures/sources/mudata/two-modalities.h5mu")

PLACES = {"X": ("obs", "var"), "layers": ("obs", "var"), "obs": ("obs", None),
          "var": ("var", None), "obsm": ("obs", None), "varm": ("var", None),
          "obsp": ("obs", "obs_2"), "varp": ("var", "var_2"), "obsmap": ("obs", None),
          "varmap": ("var", None)}
TABLES = ("dataframe", "categorical", "nullable-integer", "nullable-boolean",
          "nullable-string-array")


def write_dense_source(path):
    """A small AnnData with every dense place and the table kinds (h5ad_writer: anndata 0.8's
    layout on every release)."""
    rng = np.random.default_rng(24)
    n, m = 30, 12
    obs = pd.DataFrame({
        "cell_type": pd.Categorical(rng.choice(["a", "b", "c"], n)),
        "count": rng.integers(0, 100, n).astype(np.int32),
        "score": rng.random(n),
        "maybe": pd.array([None if i % 5 == 0 else i for i in range(n)], dtype="Int32"),
        "label": [f"cell{i}" for i in range(n)],
    }, index=[f"c{i}" for i in range(n)])
    var = pd.DataFrame({"symbol": [f"g{j}" for j in range(m)],
                        "kind": pd.Categorical(rng.choice(["x", "y"], m))},
                       index=[f"gene{j}" for j in range(m)])
    frame = pd.DataFrame({"u": rng.random(n), "batch": pd.Categorical(rng.choice(["p", "q"], n))},
                         index=obs.index)
    table = pd.DataFrame({"x": [1, 2, 3], "c": pd.Categorical(["u", "v", "u"])},
                         index=["r0", "r1", "r2"])
    h5ad_writer.write_h5ad(
        path, X=rng.random((n, m)).astype(np.float32), obs=obs, var=var,
        layers={"scaled": rng.random((n, m))},
        obsm={"X_pca": rng.random((n, 5)), "X_umap": rng.random((n, 2)), "frame": frame},
        varm={"PCs": rng.random((m, 5))},
        obsp={"distances": rng.random((n, n)),
              "sparse_graph": sp.random(n, n, density=0.1, format="csr", random_state=1)},
        varp={"correlation": rng.random((m, m))},
        uns={"matrix": rng.random((3, 4)), "name": "dense", "k": 7, "table": table,
             "nested": {"deeper": {"weights": np.arange(4.0)}}})


def encoding_of(group):
    attrs = group.attrs.asdict() if hasattr(group.attrs, "asdict") else dict(group.attrs)
    return attrs.get("encoding-type")


def expected_dims(root):
    """{array path: dims} for a store (zarr group) by the rule, written independently of C."""
    want = {}

    def array(path, name, shape, row, column):
        dims = []
        for d in range(len(shape)):
            named = row if d == 0 else column if d == 1 else None
            dims.append(named if named is not None else f"{name}_dim_{d}")
        want[path] = dims

    def under(group, path, name, row, column):
        kind = encoding_of(group)
        if row is None and kind in TABLES:
            row = f"{name}_dim_0"
        for key, item in group.arrays():
            p = f"{path}/{key}"
            if kind in ("csr_matrix", "csc_matrix"):
                want[p] = ["indptr_dim_0" if key == "indptr" else "nnz"]
            elif kind == "categorical" and key == "categories":
                want[p] = [f"{name}_categories"]
            else:
                array(p, key, item.shape, row, column)
        for key, sub in group.groups():
            under(sub, f"{path}/{key}", key, row, column)

    def anndata_root(group, path):
        for key, item in group.arrays():
            row, column = PLACES.get(key, (None, None))
            array(f"{path}{key}", key, item.shape, row, column)
        for key, sub in group.groups():
            if key == "mod" and encoding_of(group) == "MuData":
                for name, part in sub.groups():
                    anndata_root(part, f"{path}mod/{name}/")
            elif key == "raw":
                anndata_root(sub, f"{path}raw/")
            else:
                row, column = PLACES.get(key, (None, None))
                under(sub, f"{path}{key}", key, row, column)

    anndata_root(root, "")
    return want


def all_groups(group, path=""):
    yield path, group
    for key, sub in group.groups():
        yield from all_groups(sub, f"{path}/{key}" if path else key)


def check_view(point, view, label):
    top = os.path.join(point, view)
    root = zarr.open_group(top, mode="r")
    want = expected_dims(root)
    # Every array, by the rule.
    got, wrong = {}, []
    for path in want:
        with open(os.path.join(top, path, ".zattrs")) as f:
            got[path] = json.load(f).get("_ARRAY_DIMENSIONS")
        if got[path] != want[path]:
            wrong.append(f"{path}: {got[path]} != {want[path]}")
    check(f"{label}: all {len(want)} arrays carry _ARRAY_DIMENSIONS as the rule says",
          want and not wrong, "\n".join(wrong[:8]))
    # .zmetadata holds the .zattrs files' attributes.
    with open(os.path.join(top, ".zmetadata")) as f:
        meta = json.load(f)["metadata"]
    differ = []
    for key, attrs in meta.items():
        if key.endswith(".zattrs"):
            with open(os.path.join(top, key)) as f:
                if json.load(f) != attrs:
                    differ.append(key)
    dims_in_meta = sum(1 for p in want if meta.get(f"{p}/.zattrs", {}).get("_ARRAY_DIMENSIONS") == want[p])
    check(f"{label}: .zmetadata's attributes are the .zattrs files' ({dims_in_meta} arrays' dims)",
          not differ and dims_in_meta == len(want), "\n".join(differ[:8]))
    # xarray opens every group that holds arrays, with those dims and zarr's values.
    opened, problems = 0, []
    for path, group in all_groups(root):
        names = [k for k, _ in group.arrays()]
        if not names:
            continue
        try:
            ds = xarray.open_zarr(os.path.join(top, path), consolidated=False,
                                  mask_and_scale=False, decode_times=False)
            for name in names:
                p = f"{path}/{name}" if path else name
                variable = ds[name]
                if list(variable.dims) != want[p]:
                    problems.append(f"{p}: xarray dims {variable.dims} != {want[p]}")
                    continue
                value, reference = variable.values, group[name][...]
                same = (np.array_equal(value, reference, equal_nan=True)
                        if reference.dtype.kind in "fc" else
                        value.shape == reference.shape and
                        list(np.asarray(value).ravel()) == list(np.asarray(reference).ravel()))
                if not same:
                    problems.append(f"{p}: xarray's values differ from zarr-python's")
            opened += 1
        except Exception:
            problems.append(f"{path or '/'}: {traceback.format_exc().strip().splitlines()[-1]}")
    check(f"{label}: xarray.open_zarr opens all {opened} groups with arrays, dims and values right",
          opened and not problems, "\n".join(problems[:8]))
    return want


def check_anndata(point, view, source, label, rows):
    """anndata reads the view with the source's columns and keys: no stray attribute."""
    if not have_anndata():
        check(f"{label}: anndata.read_zarr reads the source's columns # SKIP {ANNDATA_MISSING}", True)
        return
    top = os.path.join(point, view)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = anndata.read_zarr(top)
        src = anndata.read_h5ad(source)
    same = (list(got.obs.columns) == list(src.obs.columns) + ["cellucid_original_position"]
            and list(got.var.columns) == list(src.var.columns)
            and sorted(got.obsm) == sorted(src.obsm) and sorted(got.layers) == sorted(src.layers)
            and sorted(got.obsp) == sorted(src.obsp) and sorted(got.varp) == sorted(src.varp)
            and got.n_obs == rows and got.n_vars == src.n_vars
            and sorted(k for k in got.uns if k != "cellucid") == sorted(src.uns))
    detail = f"obs {list(got.obs.columns)} var {list(got.var.columns)} uns {sorted(got.uns)}"
    positions = np.asarray(got.obs["cellucid_original_position"])
    x_got = got.X.toarray() if sp.issparse(got.X) else np.asarray(got.X)
    x_src = src.X.toarray() if sp.issparse(src.X) else np.asarray(src.X)
    same = same and np.array_equal(x_got, x_src[positions])
    stray = [k for k in list(got.obs.columns) + list(got.var.columns) if "ARRAY_DIMENSIONS" in k]
    check(f"{label}: anndata.read_zarr reads the source's columns, keys and X (nothing stray)",
          same and not stray, detail)


def write_zarr_source(dense, path):
    """A Zarr store (dense.h5ad's full/ exported) whose arrays carry _ARRAY_DIMENSIONS of their
    own, as a store xarray wrote would: X ["a", "b"], obs/_index ["rows"] (no .zmetadata, so
    that the source reads these)."""
    done = subprocess.run([BINARY, "export", dense, "full", path, "--codec", "none"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for part, dims in (("X", ["a", "b"]), ("obs/_index", ["rows"]), ("obsm/X_pca", ["p", "q"])):
        with open(os.path.join(path, part, ".zattrs")) as f:
            attrs = json.load(f)
        attrs["_ARRAY_DIMENSIONS"] = dims
        with open(os.path.join(path, part, ".zattrs"), "w") as f:
            json.dump(attrs, f)
    os.remove(os.path.join(path, ".zmetadata"))


def main():
    work = tempfile.mkdtemp(prefix="zm-xarray-")
    try:
        dense = os.path.join(work, "dense.h5ad")
        write_dense_source(dense)
        store = os.path.join(work, "own-dims.zarr")
        write_zarr_source(dense, store)
        with Mount(store, "codec=none", debug=False) as mount:
            want = check_view(mount.point, "uniform/seed0/k=12", "own-dims.zarr uniform/seed0/k=12")
            check("own-dims.zarr: the source's own _ARRAY_DIMENSIONS are replaced by the rule's",
                  want.get("X") == ["obs", "var"] and want.get("obs/_index") == ["obs"] and
                  want.get("obsm/X_pca") == ["obs", "X_pca_dim_1"], str(want.get("X")))
        for source, views, label in ((dense, ("full", "uniform/seed0/k=12"), "dense.h5ad"),
                                     (FULL_CSR, ("full", "uniform/seed0/k=20"), "full-csr.h5ad"),
                                     (MUDATA, ("full", "uniform/seed0/k=25"), "two-modalities.h5mu")):
            with Mount(source, "codec=none", debug=False) as mount:
                for view in views:
                    want = check_view(mount.point, view, f"{label} {view}")
                    if source == dense:
                        rows = 30 if view == "full" else 12
                        check(f"{label} {view}: dense obsp/varp are (obs, obs_2) and (var, var_2)",
                              want.get("obsp/distances") == ["obs", "obs_2"] and
                              want.get("varp/correlation") == ["var", "var_2"], str(want))
                    if source != MUDATA:
                        check_anndata(mount.point, view, source, f"{label} {view}",
                                      30 if source == dense and view == "full" else
                                      12 if source == dense else 60 if view == "full" else 20)
                    else:
                        check(f"{label} {view}: modalities' arrays are named too",
                              any(p.startswith("mod/rna/obs/") for p in want) and
                              want.get("mod/rna/X/data") == ["nnz"] and
                              want.get("obsmap/rna") == ["obs"], str(sorted(want))[:400])
    except Exception:
        check("the test ran", False, traceback.format_exc())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
