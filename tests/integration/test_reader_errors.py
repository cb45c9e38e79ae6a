#!/usr/bin/python3
"""A damaged source is an error for every reader, never zeros.

Sources from tests/source/make_damaged_sources.py (made here, each beside the
intact file it was made from): sparse indices outside the matrix, a
categorical's codes outside its categories, a corrupt deflate chunk in X/data
and in an obs column (some files of a store cannot be made), and a
non-monotone indptr (no subsample keeping a damaged cell can be built; a whole
view's matrix cannot be opened). Each is mounted live (through
run_mount_test.sh) beside its intact file, and file/, full/ and a subsample
that keeps a damaged cell are read:

- a file that cannot be made exists (os.path.isfile: zarr-python 2 asks it
  before reading a chunk, and takes "no" for a missing chunk, which it fills
  with the fill value), has a size above 0, and its open or read fails with
  EIO; a view that cannot be built fails its own lookup with EIO; file/ and
  full/, which lay a matrix out when it is first used (their lookup reads no
  pointers), fail its metadata documents (.zarray, .zmetadata) with EIO;
- zarr-python (2 or 3: zarr.open_group, then the array read), anndata
  (anndata.read_zarr, then X and obs; skipped, saying why, where anndata is
  not installed: Debian 13 packages none) and dask (dask.array.from_zarr
  over the array) raise, never return fill values;
- the log names the file, the element and why;
- every other file reads exactly the intact file's bytes.

dask.array.from_zarr given a path goes through fsspec (zarr's FSStore), whose
getitems in zarr before 2.17 drops every chunk that fails to read and fills
it (zarr-python#1578, fixed by #1604): no file system can make it raise, so
that reading is skipped with its reason on such a zarr (checked on a newer
one).

Prints TAP. Needs ZM_BINARY and ZM_SOURCE_ROOT.
"""
import errno
import json
import os
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import readers  # noqa: E402  (first: it quiets the readers' warnings)
import live_mount  # noqa: E402
from live_mount import Mount, check, report  # noqa: E402

import dask.array  # noqa: E402
import h5py  # noqa: E402
import zarr  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", os.path.join(HERE, "..", ".."))
GENERATOR = os.path.join(ROOT, "tests", "source", "make_damaged_sources.py")
# Small chunk files, so that an array is many files and only some of them
# need a damaged source chunk; no disk cache (nothing kept between mounts).
OPTIONS = ("cache_dir=none", "chunk_size=64")
SUBSAMPLE_K = 30
ZARR_VERSION = readers.ZARR_VERSION
ZARR = f"zarr-python {ZARR_VERSION[0]}"


def skip(name, reason):
    """A TAP skip: counted, not failed."""
    check(f"{name} # SKIP {reason}", True)


def files_of(root):
    out = []
    for directory, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(directory, n), root) for n in names]
    return sorted(out)


def read_or_errno(path):
    """The file's bytes, or the errno its open or read gave."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        return error.errno


def size_or_errno(path):
    """The file's size by lstat, or minus the errno the lookup gave."""
    try:
        return os.lstat(path).st_size
    except OSError as error:
        return -error.errno


def contents(root):
    return {name: read_or_errno(os.path.join(root, name)) for name in files_of(root)}


def raised(call):
    """The exception call raises, or None (and what it returned)."""
    try:
        return None, call()
    except Exception as error:  # noqa: BLE001: any reader's own exception is an error raised
        return error, None


def shown(error, value):
    return f"raised {type(error).__name__}: {error}" if error else f"returned {str(value)[:200]}"


def is_eio(error):
    return isinstance(error, OSError) and error.errno == errno.EIO


def same_document(name, a, b):
    """Root documents record the source's size: equal but for it."""
    if a == b:
        return True
    if name not in (".zattrs", ".zmetadata") or isinstance(a, int) or isinstance(b, int):
        return False
    da, db = json.loads(a), json.loads(b)
    for doc in (da, db):
        record = doc["metadata"][".zattrs"] if name == ".zmetadata" else doc
        record["zarrmount"]["source"].pop("bytes", None)
    return da == db


def source_names(path):
    with h5py.File(path, "r") as f:
        index = f["obs"].attrs["_index"]
        return [v.decode() if isinstance(v, bytes) else str(v) for v in f["obs"][index][...]]


def subsample_keeping(intact, source, cells):
    """A uniform subsample of SUBSAMPLE_K cells that keeps one of cells,
    found on the intact file's mount: its key."""
    names = source_names(source)
    wanted = {names[c] for c in cells}
    for seed in range(64):
        key = f"uniform/seed{seed}/k={SUBSAMPLE_K}"
        group = readers.open_group(intact.path(key).decode())
        index = readers.attrs(group["obs"])["_index"]
        if wanted & set(str(v) for v in readers.read(group["obs"][index])):
            return key
    raise RuntimeError(f"no seed below 64 keeps one of the cells {cells}")


def read_with_readers(view_path, array, label, expect_eio):
    """zarr-python, anndata and dask over one view: each must raise."""
    error, value = raised(lambda: readers.read(readers.open_group(view_path)[array]))
    check(f"{label}: {ZARR} (open_group, read {array}) raises",
          error is not None and (is_eio(error) or not expect_eio), shown(error, value))

    def with_anndata():
        adata = readers.anndata.read_zarr(view_path)
        return adata.X.sum(), adata.obs.describe(include="all"), adata.obsm, adata.obsp

    name = f"{label}: anndata.read_zarr (then X, obs) raises"
    if readers.have_anndata():
        error, value = raised(with_anndata)
        check(name, error is not None, shown(error, value))
    else:
        skip(name, readers.ANNDATA_MISSING)
    error, value = raised(lambda: dask.array.from_zarr(
        readers.open_array(os.path.join(view_path, array))).compute())
    check(f"{label}: dask.array.from_zarr(zarr array {array}).compute() raises",
          error is not None and (is_eio(error) or not expect_eio), shown(error, value))
    name = f"{label}: dask.array.from_zarr(path, component={array}).compute() raises"
    if expect_eio and ZARR_VERSION < (2, 17):
        skip(name, f"zarr {zarr.__version__}'s FSStore fills any chunk that fails to read "
             "(zarr-python#1578, fixed in 2.17)")
    else:
        error, value = raised(lambda: dask.array.from_zarr(view_path, component=array).compute())
        check(name, error is not None, shown(error, value))


def chunk_damage(work, name, entry, intact_path):
    source = os.path.join(work, name)
    arrays = entry["arrays"]
    with Mount(intact_path, *OPTIONS, debug=False) as intact, \
            Mount(source, *OPTIONS, debug=False) as damaged:
        subsample = subsample_keeping(intact, intact_path, entry["cells"])
        for view in ("file", "full", subsample):
            label = f"{name}: {view}/"
            good = contents(intact.path(view).decode())
            check(f"{label} the intact file's mount reads every file",
                  not [p for p, v in good.items() if isinstance(v, int)])
            root = damaged.path(view).decode()
            got = contents(root)
            check(f"{label} the same files are listed", sorted(got) == sorted(good),
                  str(sorted(set(got) ^ set(good))[:5]))
            failed = sorted(p for p, v in got.items() if isinstance(v, int))
            check(f"{label} files that need the damage fail, with EIO",
                  failed and all(got[p] == errno.EIO for p in failed), str([(p, got[p]) for p in failed][:5]))
            check(f"{label} ... only chunks of {', '.join(arrays)}",
                  all(any(p.startswith(a + "/") for a in arrays) and os.path.basename(p)[0] != "." for p in failed),
                  str(failed[:5]))
            sizes = {p: size_or_errno(os.path.join(root, p)) for p in failed}
            check(f"{label} each of them exists (os.path.isfile) with a size above 0",
                  all(os.path.isfile(os.path.join(root, p)) for p in failed)
                  and all(size > 0 for size in sizes.values()), str(list(sizes.items())[:5]))
            check(f"{label} ... and fails again when read again (the failure stays)",
                  all(read_or_errno(os.path.join(root, p)) == errno.EIO for p in failed))
            wrong = [p for p, v in got.items() if not isinstance(v, int) and not same_document(p, v, good.get(p))]
            check(f"{label} every other file is the intact file's bytes", not wrong, str(wrong[:5]))
            for array in arrays:
                read_with_readers(root, array, label, expect_eio=True)
        log = damaged.log().decode(errors="replace")
        alive = damaged.alive()
        stats = json.loads(read_or_errno(damaged.path(".zarrmount/stats.json")))
        intact_stats = json.loads(read_or_errno(intact.path(".zarrmount/stats.json")))
    lines = [line for line in log.splitlines() if "cannot be made" in line]
    check(f"{name}: the log names a file that failed, the element and why",
          lines and all(all(piece in line for piece in entry["reason"]) for line in lines)
          and any("file/" + a + "/" in line for line in lines for a in arrays), log[-1500:])
    check(f"{name}: stats.json counts the failures (none on the intact file's mount)",
          stats["views"]["file"]["failed"] > 0 and stats["total"]["failed"] >= stats["views"]["file"]["failed"]
          and intact_stats["total"]["failed"] == 0,
          f'{stats["total"]["failed"]}, intact {intact_stats["total"]["failed"]}')
    check(f"{name}: the daemon stayed up", alive)


def view_damage(work, name, entry, intact_path):
    source = os.path.join(work, name)
    with Mount(intact_path, *OPTIONS, debug=False) as intact, \
            Mount(source, *OPTIONS, debug=False) as damaged:
        subsample = subsample_keeping(intact, intact_path, entry["cells"])
        for view in ("file", "full", subsample):
            label = f"{name}: {view}/"
            root = damaged.path(view).decode()
            error, value = raised(lambda: os.stat(root))
            if view in ("file", "full"):
                check(f"{label} the view's lookup reads no pointers: it succeeds", error is None,
                      shown(error, value))
                for doc in ("X/indptr/.zarray", "X/indices/.zarray", "X/data/.zarray", ".zmetadata"):
                    got = read_or_errno(os.path.join(root, doc))
                    check(f"{label} {doc}: the matrix's metadata fails with EIO", got == errno.EIO,
                          str(got)[:200])
                got = read_or_errno(os.path.join(root, "obs/.zattrs"))
                check(f"{label} ... its other documents read", not isinstance(got, int), str(got))
            else:
                check(f"{label} the view's lookup fails with EIO", is_eio(error), shown(error, value))
            read_with_readers(root, "X/indices", label, expect_eio=False)
        check(f"{name}: the mount's own files still read",
              not isinstance(read_or_errno(damaged.path(".zarrmount/info.json")), int)
              and sorted(os.listdir(damaged.path().decode()))[:2] == [".zarrmount", "blocks"])
        log = damaged.log().decode(errors="replace")
        alive = damaged.alive()
    lines = [line for line in log.splitlines() if line.startswith("zarrmount: lookup ")]
    check(f"{name}: the log names the view, the element and why",
          lines and all(all(piece in line for piece in entry["reason"]) for line in lines), log[-1500:])
    lines = [line for line in log.splitlines() if "cannot be made" in line]
    check(f"{name}: ... and for file/ and full/ the matrix's documents, the element and why",
          all(any(f"{view}/X/indptr/.zarray" in line and all(piece in line for piece in entry["reason"])
                  for line in lines) for view in ("file", "full")), log[-1500:])
    check(f"{name}: the daemon stayed up", alive)


def known_size(work, manifest):
    """With codec=none a chunk's size is known from its shape, without making
    it: the lookup gives it, exact, and the read fails."""
    name = "codes-outside.h5ad"
    entry = manifest[name]
    array = entry["arrays"][0]
    with Mount(os.path.join(work, entry["intact"]), "codec=none", *OPTIONS, debug=False) as intact, \
            Mount(os.path.join(work, name), "codec=none", *OPTIONS, debug=False) as damaged:
        chunk = os.path.join(array, "0")
        size = size_or_errno(intact.path("file/" + chunk))
        path = damaged.path("file/" + chunk).decode()
        check(f"{name}, codec=none: the chunk is found with its exact size",
              os.path.isfile(path) and size > 0 and size_or_errno(path) == size,
              f"{size_or_errno(path)} vs {size}")
        check(f"{name}, codec=none: its read fails with EIO", read_or_errno(path) == errno.EIO)
        error, value = raised(lambda: readers.read(readers.open_group(damaged.path("file").decode())[array]))
        check(f"{name}, codec=none: {ZARR} raises", is_eio(error), shown(error, value))


def source_changed(work, manifest):
    """A reader that opened an array before its source changed, then reads
    its chunks: the chunks are found and fail to be read, so zarr-python
    raises rather than filling them (the lookup does not fail for the
    change: only building a view or making a file checks the source)."""
    intact = os.path.join(work, manifest["indices-outside.h5ad"]["intact"])
    copy = os.path.join(work, "changing.h5ad")
    with open(intact, "rb") as f, open(copy, "wb") as out:
        out.write(f.read())
    with Mount(copy, *OPTIONS, debug=False) as m:
        array = readers.open_group(m.path("file").decode())["X/indices"]
        with open(copy, "ab") as f:
            f.write(b"changed")
        # A chunk never looked up before: its lookup reaches the daemon.
        chunk = m.path("file/X/indices/3").decode()
        check("source changed: a chunk of a view built before is still found", os.path.isfile(chunk))
        check("source changed: its read fails with EIO", read_or_errno(chunk) == errno.EIO)
        error, value = raised(lambda: readers.read(array))
        check(f"source changed: {ZARR} reading an array opened before raises", is_eio(error),
              shown(error, value))
        error, value = raised(lambda: os.stat(m.path("uniform/seed7/k=20").decode()))
        check("source changed: a view not built before fails its lookup with EIO", is_eio(error),
              shown(error, value))
        log = m.log().decode(errors="replace")
    check("source changed: the log says why", "changed since it was mounted" in log, log[-600:])


def run(name, body):
    try:
        body()
    except Exception:  # noqa: BLE001
        check(name, False, traceback.format_exc(limit=6))


def main():
    work = tempfile.mkdtemp(prefix="zm-reader-errors-", dir=live_mount.PARENT)
    made = subprocess.run(["/usr/bin/python3", GENERATOR, work], capture_output=True, text=True)
    if not check("the damaged sources are made", made.returncode == 0, made.stderr):
        return report()
    manifest = json.loads(made.stdout)
    for name in sorted(manifest):
        entry = manifest[name]
        intact = os.path.join(work, entry["intact"])
        body = chunk_damage if entry["kind"] == "chunk" else view_damage
        run(name, lambda: body(work, name, entry, intact))
    run("codec=none", lambda: known_size(work, manifest))
    run("source changed", lambda: source_changed(work, manifest))
    return report()


if __name__ == "__main__":
    sys.exit(main())
