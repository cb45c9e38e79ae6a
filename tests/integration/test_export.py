#!/usr/bin/python3
"""Every view of every source, written by `zarrmount export` (the bytes a
mount serves), read back with anndata.read_zarr, equals anndata's reading
of the source subset to the view's cells in the view's order. Also zarr-python
reads every array. Prints TAP.

Without anndata (Debian 13 packages none) the source is read with h5py and
the store with zarr-python, by tests/integration/readers.py under anndata
0.8's rules. Where anndata is installed, each source also checks those
readers themselves: the source and every exported view read by readers.py
equal anndata's readings, element by element and type by type (the same
classes and dtypes), and so does a subset of each; without anndata that
check is skipped, saying why. h5ad_writer.py (how the tests write their own
sources) is checked first: read back it is the object written, and where
anndata is installed it writes anndata's layout.
"""
import collections.abc
import os
import shutil
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import views  # noqa: E402
import readers  # noqa: E402
import h5ad_writer  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402


def sources():
    return views.sources()


def every_array(group):
    for _, array in readers.walk_arrays(group):
        readers.read(array)


def kinds(value, where, out):
    """{path: (class, dtype, shape)} of every element under value."""
    if isinstance(value, collections.abc.Mapping):
        out[where] = "mapping"
        for k, v in value.items():
            kinds(v, f"{where}/{k}", out)
    elif isinstance(value, pd.DataFrame):
        out[where] = ("DataFrame", list(value.columns), str(value.index.dtype), value.index.name,
                      type(value.index).__name__)
        for c in value.columns:
            out[f"{where}/{c}"] = str(value[c].dtype)
    else:
        out[where] = (type(value).__name__, str(getattr(value, "dtype", "")), getattr(value, "shape", None))
    return out


def kinds_of(adata):
    out = {}
    kinds(adata.X, "/X", out)
    for part in ("obs", "var", "obsm", "varm", "obsp", "varp", "layers", "uns"):
        value = getattr(adata, part)
        kinds(value if isinstance(value, pd.DataFrame) else dict(value), f"/{part}", out)
    if adata.raw is not None:
        kinds(adata.raw.X, "/raw/X", out)
        kinds(adata.raw.var, "/raw/var", out)
        kinds(dict(adata.raw.varm), "/raw/varm", out)
    return out


def agree(ours, theirs, what, names="readers.py vs anndata"):
    """Raises Differ unless readers.py's object equals anndata's (or the two
    named), with the same classes and dtypes everywhere."""
    try:
        views.compare(ours, theirs)
    except views.Differ as error:
        raise views.Differ(f"{what}: {error}")
    mine, anndatas = kinds_of(ours), kinds_of(theirs)
    wrong = {k: (mine.get(k), anndatas.get(k)) for k in sorted(set(mine) | set(anndatas))
             if mine.get(k) != anndatas.get(k)}
    if wrong:
        raise views.Differ(f"{what}: {names}: {wrong}")


def writer_sample():
    """Every kind of element h5ad_writer.py writes, as the parts of an AnnData."""
    rng = np.random.default_rng(3)
    n, m = 50, 12
    X = sp.random(n, m, density=0.2, format="csr", dtype=np.float32, random_state=3)
    obs = pd.DataFrame({
        "kind": pd.Categorical(rng.choice(["a", "b", "c"], n)),
        "grade": pd.Categorical(rng.choice(["lo", "hi"], n), categories=["lo", "hi"], ordered=True),
        "score": rng.normal(size=n),
        "count": rng.integers(0, 100, n).astype(np.int32),
        "flag": rng.random(n) < 0.5,
        "label": [f"cell-{i}-\u00fc" for i in range(n)],
        "maybe": pd.array([None if i % 7 == 0 else i for i in range(n)], dtype="Int64"),
        "yes": pd.array([None if i % 5 == 0 else bool(i % 2) for i in range(n)], dtype="boolean"),
    }, index=[f"c{i:03d}" for i in range(n)])
    var = pd.DataFrame({"mean": np.asarray(X.mean(0)).ravel(), "symbol": [f"S{j}" for j in range(m)]},
                       index=[f"g{j:02d}" for j in range(m)])
    parts = {
        "X": X, "obs": obs, "var": var,
        "obsm": {"X_umap": rng.normal(size=(n, 2)).astype(np.float32),
                 "X_sparse": sp.random(n, 4, density=0.3, format="csr", dtype=np.float64, random_state=5)},
        "varm": {"PCs": rng.normal(size=(m, 3))},
        "obsp": {"connectivities": sp.random(n, n, density=0.1, format="csr", dtype=np.float32, random_state=4)},
        "varp": {},
        "layers": {"counts": X.astype(np.int32), "csc": sp.csc_matrix(X), "dense": X.toarray()},
        "uns": {"note": "h5ad_writer", "n": np.int64(5), "pi": np.float64(3.5), "flag": np.bool_(True),
                "names": np.array(["x", "y"], dtype=object), "nested": {"a": np.arange(3), "b": "deep"}},
    }
    raw = {"X": X[:, :m - 2].copy(), "var": var.iloc[:m - 2].copy(), "varm": {}}
    return parts, raw


def _plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def layout(path):
    """{HDF5 path: what it is}: datasets' dtypes, shapes, chunks, filters and
    limits, every node's attributes with their HDF5 types."""
    import h5py
    out = {}

    def attributes(node):
        return {k: (_plain(node.attrs[k]), str(node.attrs.get_id(k).dtype), node.attrs.get_id(k).shape)
                for k in node.attrs}

    def visit(name, node):
        if isinstance(node, h5py.Dataset):
            string = h5py.check_string_dtype(node.dtype)
            out[name] = ("dataset", str(node.dtype), string.encoding if string else None, node.shape, node.chunks,
                         node.compression, node.maxshape, attributes(node))
        else:
            out[name] = ("group", attributes(node))
    with h5py.File(path, "r") as f:
        out["/"] = ("group", attributes(f))
        f.visititems(visit)
    return out


def check_writer(scratch, results):
    """h5ad_writer.py writes what anndata 0.8 writes: read back (by readers.py
    here; by anndata where installed) it is the object given, and where
    anndata is installed its write_h5ad of that object has the same layout."""
    parts, raw = writer_sample()
    path = os.path.join(scratch, "written.h5ad")
    h5ad_writer.write_h5ad(path, **parts, raw=raw, compression="gzip")
    label = "h5ad_writer.py: readers.py reads back the object written"
    try:
        agree(views.reference(path, own=True), readers.make(**parts, raw=raw, own=True), "read back",
              "read back vs written")
        results.append((True, label, ""))
    except Exception as error:  # noqa: BLE001
        results.append((False, label, str(error) if isinstance(error, views.Differ) else traceback.format_exc(3)))
    label = "h5ad_writer.py: anndata.read_h5ad reads back the object written"
    layout_label = "h5ad_writer.py: the file's layout is anndata's write_h5ad's (groups, datasets, attributes)"
    if not readers.have_anndata():
        results.append((True, f"{label} # SKIP {readers.ANNDATA_MISSING}", ""))
        results.append((True, f"{layout_label} # SKIP {readers.ANNDATA_MISSING}", ""))
        return
    try:
        agree(readers.anndata.read_h5ad(path), readers.make(**parts, raw=raw), "read back", "read back vs written")
        results.append((True, label, ""))
    except Exception as error:  # noqa: BLE001
        results.append((False, label, str(error) if isinstance(error, views.Differ) else traceback.format_exc(3)))
    theirs = os.path.join(scratch, "anndata.h5ad")
    readers.make(**parts, raw=raw).write_h5ad(theirs, compression="gzip")
    mine, anndatas = layout(path), layout(theirs)
    wrong = {k: (mine.get(k), anndatas.get(k)) for k in sorted(set(mine) | set(anndatas))
             if mine.get(k) != anndatas.get(k)}
    results.append((not wrong, layout_label, "\n".join(f"{k}: {a} vs {b}" for k, (a, b) in wrong.items())))


def main():
    results = []
    scratch = tempfile.mkdtemp(prefix="zm-export-")
    try:
        check_writer(scratch, results)
        _, why = views.shared_rest()
        if why:
            results.append((True, f"the files of ../shared/data not copied to fixtures/shared # SKIP {why}", ""))
        for path in sources():
            name = views.display_name(path)
            try:
                info, view_list = views.views_for(path)
                ref = views.reference(path)
            except Exception as error:  # noqa: BLE001
                results.append((False, f"{name}: setup", str(error)))
                continue
            # readers.py against anndata: the source, a subset of it, and every view below.
            validation = f"{name}: readers.py reads the source and each view as anndata does"
            disagreement = None
            if readers.have_anndata():
                try:
                    ours = views.reference(path, own=True)
                    agree(ours, ref, "the source")
                    # A third of the cells in a random order, and the last cell alone (which
                    # leaves most categories unused: they are dropped, with their colors).
                    for rows in (np.random.default_rng(1).permutation(ref.n_obs)[:max(1, ref.n_obs // 3)],
                                 np.arange(ref.n_obs)[-1:]):
                        agree(readers.subset(ours, rows), readers.subset(ref, rows),
                              f"the source's rows {list(rows[:3])}...")
                except Exception as error:  # noqa: BLE001
                    disagreement = str(error) if isinstance(error, views.Differ) else traceback.format_exc(limit=3)
            # Small chunks too: many chunks an array, cut from one-pass walks.
            view_list = view_list + [(v, m, s_, k_, b_, "1024") for v, m, s_, k_, b_ in view_list
                                     if v.startswith(("full", "blocks/B=3"))]
            for entry in view_list:
                view, method, seed, k, b = entry[:5]
                chunk = entry[5] if len(entry) > 5 else None
                out = os.path.join(scratch, "store")
                shutil.rmtree(out, ignore_errors=True)
                label = f"{name} {view}" + (f" (chunks of {chunk} bytes)" if chunk else "")
                try:
                    views.run_json  # the binary is shared
                    args = [views.BINARY, "export", path, view, out] + (["--chunk-size", chunk] if chunk else [])
                    args += views.layout_args(path)
                    done = __import__("subprocess").run(args, capture_output=True, text=True, timeout=600)
                    if done.returncode != 0:
                        raise views.Differ(f"export failed: {done.stderr.strip()}")
                    order = views.order_of("file" if method == "file" else method, info["nObs"], seed, k, b)
                    got = views.read_view(out)
                    if readers.have_anndata() and disagreement is None:
                        try:
                            agree(views.read_view(out, own=True), got, view)
                        except Exception as error:  # noqa: BLE001
                            disagreement = str(error) if isinstance(error, views.Differ) else \
                                traceback.format_exc(limit=3)
                    views.check_view(got, ref, order, "full" if view == "full" else method, info["nObs"])
                    every_array(readers.open_group(out))
                    results.append((True, label, ""))
                except Exception as error:  # noqa: BLE001
                    detail = str(error) if isinstance(error, views.Differ) else traceback.format_exc(limit=3)
                    results.append((False, label, detail))
            if readers.have_anndata():
                results.append((disagreement is None, validation, disagreement or ""))
            else:
                results.append((True, f"{validation} # SKIP {readers.ANNDATA_MISSING}", ""))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (ok, label, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {label}")
        if not ok:
            for line in detail.strip().splitlines()[-6:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
