#!/usr/bin/python3
"""anndata 0.11's nullable-string-array (pandas' "string" dtype, written as values, a bool mask
and an na-value attribute) served as it is stored, through a live mount, against h5py.

Sources: fixtures/sources/h5ad/full-csr.h5ad copied with obs columns added here (one with
na-value "NA", one "NaN", one with an na-value no reader knows, one whose values are not
strings), and ../shared/data/modern's .h5ad files (written by anndata 0.13) where they are.

For file/, full/ and two uniform views: obs/<column> is a nullable-string-array group whose
values (vlen-utf8 strings, "string-array") and mask are the source's rows of the view's cells,
its na-value the file's; an unknown na-value is left out and said in info.json's skipped; values
that are not strings are refused at open in one line; stratified/ and where/ do not offer the
column and explain says why. Every mount is unmounted in every outcome. Prints TAP.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import h5py  # noqa: E402

from live_mount import BINARY, Mount, check, report  # noqa: E402
import readers  # noqa: E402
import set_rules as R  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SHARED = os.environ.get("ZM_SHARED_DATA", "../shared/data")
BASE = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
OPTIONS = ("cache_dir=none", "ahead_idle=0")


def add_column(f, name, values, mask, na_value):
    """A nullable-string-array obs column as anndata 0.11's writer lays it out."""
    g = f["obs"].create_group(name)
    g.attrs["encoding-type"] = "nullable-string-array"
    g.attrs["encoding-version"] = "0.1.0"
    if na_value is not None:
        g.attrs["na-value"] = na_value
    v = g.create_dataset("values", data=np.array(values, dtype=object), dtype=h5py.string_dtype("utf-8"))
    v.attrs["encoding-type"], v.attrs["encoding-version"] = "string-array", "0.2.0"
    m = g.create_dataset("mask", data=np.asarray(mask, dtype=bool))
    m.attrs["encoding-type"], m.attrs["encoding-version"] = "array", "0.2.0"
    order = list(f["obs"].attrs["column-order"]) + [name]
    f["obs"].attrs["column-order"] = np.array(order, dtype=h5py.string_dtype("utf-8"))


def text(values):
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def check_columns(label, path, columns):
    """columns: {name: na-value or None}: every view serves each as stored."""
    with h5py.File(path, "r") as f:
        n = f["obs"][f["obs"].attrs["_index"]].shape[0]
        stored = {c: (text(f[f"obs/{c}/values"][()]), f[f"obs/{c}/mask"][()]) for c in columns}
    with Mount(path, *OPTIONS, debug=False) as mount:
        for view, cells in (("file", np.arange(n)), ("full", R.full_order(np.arange(n), 0)),
                            (f"uniform/seed0/k={max(1, n // 3)}", R.uniform(np.arange(n), 0, max(1, n // 3))),
                            (f"uniform/seed9/k={max(1, n // 2)}", R.uniform(np.arange(n), 9, max(1, n // 2)))):
            try:
                z = readers.open_group(os.path.join(mount.point, view))
                for column, na_value in columns.items():
                    g = z[f"obs/{column}"]
                    attrs = readers.attrs(g)
                    values, mask = stored[column]
                    got_values = text(readers.read(g["values"]))
                    got_mask = np.asarray(readers.read(g["mask"]))
                    want_attrs = {"encoding-type": "nullable-string-array", "encoding-version": "0.1.0"}
                    if na_value is not None:
                        want_attrs["na-value"] = na_value
                    check(f"{label} {view}: obs/{column} is the source's nullable strings of its cells",
                          dict(attrs) == want_attrs and got_values == [values[c] for c in cells]
                          and np.array_equal(got_mask, mask[cells])
                          and readers.attrs(g["values"]).get("encoding-type") == "string-array",
                          f"{dict(attrs)}; {got_values[:4]} vs {[values[c] for c in cells][:4]}")
                order = readers.attrs(z["obs"])["column-order"]
                check(f"{label} {view}: column-order lists them", all(c in order for c in columns))
            except Exception:  # noqa: BLE001
                check(f"{label} {view}: read", False, traceback.format_exc(limit=4))
        listed = set(os.listdir(os.path.join(mount.point, "stratified")))
        check(f"{label}: stratified/ and where/ do not offer them",
              not (set(columns) & listed) and not (set(columns) & set(os.listdir(os.path.join(mount.point, "where")))))
        column = next(iter(columns))
        told = subprocess.run([BINARY, "explain", os.path.join(mount.point, "where", column)],
                              capture_output=True, text=True, timeout=60)
        check(f"{label}: explain where/{column} says why",
              told.returncode == 2 and "nullable-string-array" in told.stdout + told.stderr,
              told.stdout + told.stderr)
        with open(os.path.join(mount.point, ".zarrmount", "info.json")) as f:
            return json.load(f)


def main():
    scratch = tempfile.mkdtemp(prefix="zm-nullable-")
    try:
        path = os.path.join(scratch, "strings.h5ad")
        shutil.copyfile(BASE, path)
        rng = np.random.default_rng(11)
        with h5py.File(path, "r+") as f:
            n = f["obs"][f["obs"].attrs["_index"]].shape[0]
            words = ["", "donor-α", "捐献者", "NA", "x,y/z", "%41"]
            for name, na_value in (("label_na", "NA"), ("label_nan", "NaN"), ("label_odd", "missing")):
                values = [words[i] for i in rng.integers(0, len(words), n)]
                mask = rng.random(n) < 0.3
                add_column(f, name, values, mask, na_value)
        try:
            info = check_columns("strings.h5ad", path, {"label_na": "NA", "label_nan": "NaN", "label_odd": None})
            check("strings.h5ad: an na-value no reader knows is left out, said in skipped",
                  any(line.startswith("/obs/label_odd: ") for line in info["skipped"]), str(info["skipped"]))
            check("strings.h5ad: the others are not skipped",
                  not any(line.startswith(("/obs/label_na:", "/obs/label_nan:")) for line in info["skipped"]))
        except Exception:  # noqa: BLE001
            check("strings.h5ad: mounted and read", False, traceback.format_exc(limit=4))
        # Values that are not strings: refused at open, in one line naming the column.
        bad = os.path.join(scratch, "numbers.h5ad")
        shutil.copyfile(BASE, bad)
        with h5py.File(bad, "r+") as f:
            n = f["obs"][f["obs"].attrs["_index"]].shape[0]
            add_column(f, "label", ["a"] * n, np.zeros(n, dtype=bool), "NA")
            del f["obs/label/values"]
            f["obs/label"].create_dataset("values", data=np.arange(n, dtype=np.int32))
        done = subprocess.run([BINARY, "inspect", bad], capture_output=True, text=True, timeout=60)
        check("numbers as a nullable-string-array's values: refused in one line naming it",
              done.returncode == 2 and "/obs/label" in done.stderr and "strings" in done.stderr
              and len(done.stderr.strip().splitlines()) == 1, done.stderr)
        # anndata 0.13's own files.
        modern = os.path.join(SHARED, "modern")
        files = sorted(p for p in (os.listdir(modern) if os.path.isdir(modern) else []) if p.endswith(".h5ad"))
        if not files:
            check(f"../shared/data/modern's .h5ad files # SKIP {modern} is not here", True)
        for name in files:
            source = os.path.join(modern, name)
            with h5py.File(source, "r") as f:
                columns = {k: (f[f"obs/{k}"].attrs.get("na-value")) for k in f["obs"]
                           if isinstance(f[f"obs/{k}"], h5py.Group)
                           and f[f"obs/{k}"].attrs.get("encoding-type") == "nullable-string-array"}
            if not columns:
                continue
            try:
                check_columns(name, source, columns)
            except Exception:  # noqa: BLE001
                check(f"{name}: mounted and read", False, traceback.format_exc(limit=4))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
