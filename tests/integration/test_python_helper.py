#!/usr/bin/python3
"""contrib/python/zarrmount.py, the Python mount helper, against the real daemon:

- it imports nothing beyond the standard library;
- mount() mounts and is ready (in /proc/self/mountinfo, its root listed), m.path is the
  mount point as a pathlib.Path; keyword options become -o key=value (info.json and
  mountinfo show them) and True a bare flag (noatime, allow_other); mountpoint=None makes a
  private directory, removed after;
- m.view() gives exactly the tree's paths (README's table) for every method and setting, sizes
  k=, share= and pct=, where/ (values escaped: '/', ',', '%', '.', '..', a tab, UTF-8 as it
  is) and sets/: each exists and `zarrmount explain --json` says it is that view (method,
  seed, k, settings, set); a view that does not exist raises FileNotFoundError with explain's
  reason; arguments that name no view are refused before any lookup;
- m.read() is anndata's reading of the view (its first cells explain's), m.stats() the
  stats.json that `zarrmount stats --json` prints;
- errors: a source or option the daemon refuses raises MountError carrying the daemon's own
  line and status; a missing binary is FileNotFoundError; nothing stays mounted or made;
- the mount is gone after the with block, after an exception in it, when the Mount is
  collected, after the interpreter exits without unmounting, and after a SIGTERM; a busy mount
  is detached lazily after the timeout; foreground=True keeps the daemon's status and log.

Mount points live under $ZM_MOUNT_PARENT (run_mount_test.sh unmounts whatever is left there).
No step has a time limit. Prints TAP.
"""
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback

import numpy as np
import pandas as pd
import scipy.sparse

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(ROOT, "contrib", "python")
PARENT = os.environ.get("ZM_MOUNT_PARENT") or tempfile.mkdtemp(prefix="zm-mounts-")
sys.path.insert(0, HERE)
sys.path.insert(0, HELPER)
os.environ["ZARRMOUNT"] = os.path.abspath(BINARY)
tempfile.tempdir = PARENT  # mountpoint=None's private directories, under the test's parent
import h5ad_writer  # noqa: E402
import zarrmount  # noqa: E402

results = []
N = 40
# Category names the tree escapes, and their spellings in a where/ path.
LABELS = {"a/b": "a%2Fb", "x,y": "x%2Cy", "50%": "50%25", ".": "%2E", "..": "%2E%2E",
          "T cell": "T cell", "tab\there": "tab%09here", "zelle-α-ü": "zelle-α-ü"}


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return bool(ok)


def point(name):
    path = os.path.join(PARENT, name)
    os.makedirs(path, exist_ok=True)
    return path


def explain_json(path):
    done = subprocess.run([BINARY, "explain", str(path), "--json"], capture_output=True, text=True)
    return json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}


def write_source(directory):
    """40 cells: a categorical of names that need escaping, a boolean, two embeddings, and a
    set file of obs names."""
    rng = np.random.default_rng(7)
    names = list(LABELS)
    obs = pd.DataFrame({
        "label": pd.Categorical([names[i % len(names)] for i in range(N)], categories=names),
        "flag": np.array([i % 3 == 0 for i in range(N)]),
    }, index=[f"cell_{i:02d}" for i in range(N)])
    X = scipy.sparse.random(N, 12, density=0.3, format="csr", random_state=3, dtype=np.float32)
    path = os.path.join(directory, "helper.h5ad")
    h5ad_writer.write_h5ad(path, X=X, obs=obs, obsm={"X_umap": rng.normal(size=(N, 2)),
                                                     "X_pca": rng.normal(size=(N, 5))})
    sets = os.path.join(directory, "sets")
    os.makedirs(sets, exist_ok=True)
    with open(os.path.join(sets, "picked.txt"), "w") as f:
        f.write("".join(f"cell_{i:02d}\n" for i in range(0, N, 2)))
    return path, sets


def check_import():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import zarrmount; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('anndata', 'numpy', 'pandas', 'h5py', 'zarr', 'scipy', 'dask')))")
    done = subprocess.run([sys.executable, "-c", code, HELPER], capture_output=True, text=True)
    check("import: the module imports only the standard library",
          done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr)
    check("import: the module has a docstring with an example and every public function one",
          "with zarrmount.mount(" in (zarrmount.__doc__ or "") and
          all(getattr(zarrmount, n).__doc__ for n in zarrmount.__all__) and
          all(getattr(zarrmount.Mount, n).__doc__ for n in ("view", "read", "stats", "unmount")))


def mountinfo_line(path):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4] == str(path):
                return line
    return ""


def check_mount_and_options(source):
    at = point("options")
    cache = os.path.join(PARENT, "cache-options")
    with zarrmount.mount(source, at, chunk_size="64K", codec="none", cache_dir=cache,
                         noatime=True, allow_other=True, noexec=False) as m:
        check("mount: m.path is the mount point as a pathlib.Path",
              isinstance(m.path, zarrmount.pathlib.Path) and str(m.path) == os.path.realpath(at), m.path)
        check("mount: ready: in /proc/self/mountinfo and its root lists the tree",
              zarrmount.is_mounted(at) and {"full", "file", "uniform", ".zarrmount"} <= set(os.listdir(m.path)))
        info = m.info()
        check("options: key=value goes to -o (info.json: chunk_size, codec)",
              info["options"]["chunkBytes"] == 65536 and info["options"]["codec"] == "none", info["options"])
        line = mountinfo_line(m.path)
        fields = line.split()
        mount_options = fields[5].split(",")
        super_options = fields[-1].split(",")
        check("options: True is a bare flag (noatime, allow_other), False is left out (noexec)",
              "noatime" in mount_options and "allow_other" in super_options and "noexec" not in mount_options,
              line)
        with open(f"/proc/{m.pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        check("options: the daemon (m.pid) runs with -o cache_dir=..., -o noatime, and no -o noexec",
              f"cache_dir={cache}".encode() in argv and b"noatime" in argv and b"noexec" not in argv, argv)
        check("mount: repr says mounted", "(mounted)" in repr(m) and m.mounted, repr(m))
    check("mount: unmounted after the with block (the given mount point stays)",
          not zarrmount.is_mounted(at) and os.path.isdir(at) and not m.mounted)
    m.unmount()
    check("mount: a second unmount does nothing", not zarrmount.is_mounted(at))

    with zarrmount.mount(source) as m:
        private = m.path
        check("mountpoint=None: a new private directory (under $TMPDIR), mounted",
              str(private).startswith(os.path.realpath(PARENT) + "/zarrmount-") and m.mounted, private)
    check("mountpoint=None: unmounted and removed after", not os.path.exists(private), private)
    parent = tempfile.mkdtemp(prefix="parent-", dir=PARENT)
    with zarrmount.mount(source, parent=parent) as m:
        private = m.path
        check("parent=: the private mount point is made in it",
              str(private).startswith(os.path.realpath(parent) + "/zarrmount-") and m.mounted, private)
    check("parent=: unmounted and removed after, the parent kept",
          not os.path.exists(private) and os.path.isdir(parent), private)
    os.rmdir(parent)

    check("options_from: -o texts and fstab lists as keyword options",
          zarrmount.options_from(["codec=none", "allow_other"]) == {"codec": "none", "allow_other": True}
          and zarrmount.options_from("codec=zstd:3,ro,cache_dir=/x=y") ==
          {"codec": "zstd:3", "ro": True, "cache_dir": "/x=y"}
          and zarrmount.options_from(["codec=none", "codec=blosc:lz4"]) == {"codec": "blosc:lz4"}
          and zarrmount.options_from([]) == {})
    try:
        zarrmount.options_from(["=none"])
        refused = False
    except ValueError as error:
        refused = "no name" in str(error)
    check("options_from: an option with no name is refused", refused)
    with zarrmount.mount(source, **zarrmount.options_from("chunk_size=64K,codec=none")) as m:
        options = m.info()["options"]
        check("options_from: what it gives mounts with those options",
              options["chunkBytes"] == 65536 and options["codec"] == "none", options)


def view_cases():
    """(view arguments, the path, what explain --json must say of it)."""
    where_values = ["a/b", "x,y", "50%", ".", "..", "tab\there", "zelle-α-ü"]
    spelled = ",".join(LABELS[v] for v in where_values)
    return [
        (("full",), {}, "full", {"method": "full", "k": N}),
        (("file",), {}, "file", {"method": "file", "k": N}),
        (("uniform",), {"k": 10}, "uniform/seed0/k=10", {"method": "uniform", "seed": 0, "k": 10}),
        (("uniform", 7), {"k": 3}, "uniform/seed7/k=3", {"method": "uniform", "seed": 7, "k": 3}),
        (("uniform",), {"share": 0.25}, "uniform/seed0/share=0.25", {"kind": "link", "k": 10}),
        (("uniform",), {"share": 1e-05}, "uniform/seed0/share=0.00001", {"kind": "link", "k": 1}),
        (("uniform",), {"share": "0.5"}, "uniform/seed0/share=0.5", {"kind": "link", "k": 20}),
        (("uniform",), {"pct": 50}, "uniform/seed0/pct=50", {"kind": "link", "k": 20}),
        (("blocks",), {"k": 8}, "blocks/seed0/k=8", {"method": "blocks", "k": 8}),
        (("blocks", 2), {"k": 8, "block_size": 4}, "blocks/B=4/seed2/k=8",
         {"method": "blocks", "seed": 2, "k": 8, "blockSize": 4}),
        (("stratified",), {"k": 16, "key": "label"}, "stratified/label/seed0/k=16",
         {"method": "stratified", "field": "label", "allocation": "proportional", "minimum": 0, "k": 16}),
        (("stratified", 3), {"k": 20, "key": "label", "allocation": "balanced", "minimum": 2},
         "stratified/label/balanced/min=2/seed3/k=20",
         {"method": "stratified", "allocation": "balanced", "minimum": 2, "seed": 3, "k": 20}),
        (("stratified",), {"share": 0.5, "key": "flag", "minimum": 1},
         "stratified/flag/proportional/min=1/seed0/share=0.5",
         {"kind": "link", "field": "flag", "minimum": 1, "k": 20}),
        (("spatial",), {"k": 12, "key": "X_umap"}, "spatial/X_umap/seed0/k=12",
         {"method": "spatial", "embedding": "X_umap", "gridSize": 32, "columns": [0, 1], "k": 12}),
        (("spatial",), {"k": 12, "key": "X_pca", "grid": 4, "columns": [0, 3]},
         "spatial/X_pca/G=4/cols=0,3/seed0/k=12",
         {"method": "spatial", "gridSize": 4, "columns": [0, 3], "k": 12}),
        # grid= alone: the helper fills in the first (up to) three columns, as the tree does.
        (("spatial",), {"pct": 25, "key": "X_pca", "grid": 8}, "spatial/X_pca/G=8/cols=0,1,2/seed0/pct=25",
         {"kind": "link", "gridSize": 8, "columns": [0, 1, 2], "k": 10}),
        (("full",), {"where": ("label", ["T cell"])}, "where/label/T cell/full",
         {"method": "full", "where": {"key": "label", "values": ["T cell"], "size": 5}}),
        (("uniform",), {"k": 4, "where": {"label": where_values}},
         f"where/label/{spelled}/uniform/seed0/k=4",
         {"method": "uniform", "k": 4, "where": {"key": "label", "values": where_values, "size": 35}}),
        (("blocks",), {"share": "0.5", "where": ("flag", True), "block_size": 2},
         "where/flag/true/blocks/B=2/seed0/share=0.5", {"kind": "link", "k": 7}),
        (("file",), {"set": "picked"}, "sets/picked/file", {"method": "file", "setSize": 20, "k": 20}),
        (("uniform", 1), {"k": 5, "set": "picked"}, "sets/picked/uniform/seed1/k=5",
         {"method": "uniform", "seed": 1, "k": 5}),
        (("stratified",), {"k": 6, "key": "label", "set": "picked"}, "sets/picked/stratified/label/seed0/k=6",
         {"method": "stratified", "k": 6}),
    ]


def agrees(told, expected):
    for key, want in expected.items():
        got = told.get(key)
        if isinstance(want, dict):
            if not isinstance(got, dict) or any(got.get(k) != v for k, v in want.items()):
                return False
        elif got != want:
            return False
    return True


def check_views(source, sets):
    with zarrmount.mount(source, point("views"), sets=sets) as m:
        for args, kwargs, relative, expected in view_cases():
            label = f"view{args}{kwargs}"
            try:
                path = m.view(*args, **kwargs)
            except Exception:  # noqa: BLE001
                check(f"{label}: {relative}", False, traceback.format_exc(limit=3))
                continue
            told = explain_json(path)
            check(f"{label} is {relative}, which exists", path == m.path / relative and os.path.lexists(path),
                  f"{path}")
            check(f"{label}: zarrmount explain agrees", agrees(told, expected) and
                  told.get("kind") in ("view", "link"), json.dumps(told)[:600])
            if kwargs.get("set"):
                check(f"{label}: explain names the set", (told.get("sets") or {}).get("name") == "picked"
                      or "picked" in json.dumps(told), json.dumps(told)[:400])
            check(f"{label}: view_path gives the same path without a mount",
                  "grid" in kwargs and "columns" not in kwargs or
                  zarrmount.view_path(*args, **kwargs) == relative, relative)
        # A view that does not exist: FileNotFoundError with explain's reason.
        for args, kwargs, relative in ((("stratified",), {"k": 5, "key": "no_such_column"},
                                        "stratified/no_such_column/seed0/k=5"),
                                       (("uniform",), {"k": 3, "where": ("label", "nobody")},
                                        "where/label/nobody/uniform/seed0/k=3"),
                                       (("file",), {"set": "unknown"}, "sets/unknown/file")):
            reason = explain_json(m.path / relative).get("reason", "?")
            try:
                m.view(*args, **kwargs)
                check(f"{relative}: missing view refused", False, "no exception")
            except FileNotFoundError as error:
                check(f"{relative}: FileNotFoundError with explain's reason",
                      reason in str(error) and error.filename == str(m.path / relative), f"{error} / {reason}")
        # Arguments that name no view, refused before any lookup.
        for args, kwargs, kind in ((("median",), {"k": 3}, ValueError),
                                   (("uniform",), {}, ValueError),
                                   (("uniform",), {"k": 3, "share": 0.1}, ValueError),
                                   (("full",), {"k": 3}, ValueError),
                                   (("uniform",), {"k": 0}, ValueError),
                                   (("uniform",), {"k": 3, "block_size": 4}, TypeError),
                                   (("stratified",), {"k": 3}, ValueError),
                                   (("stratified",), {"k": 3, "key": "label", "allocation": "even"}, ValueError),
                                   (("spatial",), {"k": 3, "key": "X_pca", "columns": [0, 1, 2, 3]}, ValueError),
                                   (("uniform",), {"k": 3, "where": ("label", "a"), "set": "picked"}, ValueError),
                                   (("uniform",), {"k": 3, "where": ("label", "")}, ValueError)):
            try:
                m.view(*args, **kwargs)
                check(f"view{args}{kwargs}: refused ({kind.__name__})", False, "no exception")
            except kind as error:
                check(f"view{args}{kwargs}: refused ({kind.__name__})", str(error), error)
            except Exception as error:  # noqa: BLE001
                check(f"view{args}{kwargs}: refused ({kind.__name__})", False, repr(error))
        check_read_and_stats(m)


def check_read_and_stats(m):
    before = m.stats()
    check("stats: a dict of stats.json (views, total), no view read yet",
          isinstance(before, dict) and "total" in before and "uniform/seed11/k=9" not in before["views"],
          sorted(before))
    done = subprocess.run([BINARY, "stats", str(m.path), "--json"], capture_output=True, text=True)
    cli = json.loads(done.stdout)
    check("stats: the same document `zarrmount stats --json` prints",
          sorted(cli) == sorted(before) and cli["source"] == before["source"], done.stderr)
    try:
        import anndata  # noqa: F401
    except ImportError:
        check("# SKIP read: anndata is not installed (Debian 13)", True)
        return
    adata = m.read("uniform", 11, k=9)
    told = explain_json(m.view("uniform", 11, k=9))
    check("read: an AnnData of the view's cells, in explain's order",
          adata.n_obs == 9 and adata.n_vars == 12 and list(adata.obs_names) == told["firstCellNames"][:9],
          (adata, told.get("firstCellNames")))
    adata = m.read("stratified", share=0.5, key="label")
    check("read: through a share= link", adata.n_obs == 20 and set(adata.obs["label"].cat.categories) == set(LABELS),
          adata)
    after = m.stats()
    view = after["views"].get("uniform/seed11/k=9", {})
    check("stats: the view read is counted in a later snapshot",
          view.get("chunksSynthesized", 0) > 0 and after["snapshot"] > before["snapshot"],
          (view, after.get("snapshot"), before.get("snapshot")))


def daemon_line(source, options=()):
    """The line the binary itself prints when it refuses source (or an option)."""
    at = point("direct")
    done = subprocess.run([BINARY, source, at, *options], capture_output=True, text=True)
    return done.returncode, done.stderr.strip()


def check_errors(source):
    for label, bad, options, kwargs in (
            ("a file that is not a source", os.path.join(ROOT, "README.md"), (), {}),
            ("a missing source", os.path.join(PARENT, "no-such.h5ad"), (), {}),
            ("a refused option", source, ("-o", "chunk_size=huge"), {"chunk_size": "huge"}),
            ("an unknown option", source, ("-o", "no_such_option=1"), {"no_such_option": 1})):
        status, line = daemon_line(bad, options)
        before = set(os.listdir(PARENT))
        try:
            with zarrmount.mount(bad, **kwargs):
                check(f"errors: {label} raises MountError", False, "it mounted")
        except zarrmount.MountError as error:
            check(f"errors: {label} raises MountError carrying the daemon's line and status",
                  error.reason == line and error.returncode == status == 2 and line in str(error) and
                  line.count("\n") == 0, f"{error.reason!r} / {line!r}, {error.returncode}")
        check(f"errors: {label}: nothing left mounted or made", set(os.listdir(PARENT)) == before and
              not any(PARENT in p for p in open("/proc/self/mountinfo").read().split()),
              set(os.listdir(PARENT)) ^ before)
    saved = os.environ["ZARRMOUNT"]
    os.environ["ZARRMOUNT"] = os.path.join(PARENT, "no-such-binary")
    try:
        zarrmount.mount(source)
        check("errors: a missing binary raises FileNotFoundError", False, "it mounted")
    except FileNotFoundError as error:
        check("errors: a missing binary raises FileNotFoundError, leaving no directory",
              "no-such-binary" in str(error) and not [p for p in os.listdir(PARENT) if p.startswith("zarrmount-")],
              error)
    finally:
        os.environ["ZARRMOUNT"] = saved


def check_lifetimes(source):
    at = point("exception")
    try:
        with zarrmount.mount(source, at) as m:
            os.listdir(m.path / "full")
            raise KeyError("in the block")
    except KeyError:
        check("lifetime: an exception in the block propagates and the mount is gone",
              not zarrmount.is_mounted(at))

    m = zarrmount.mount(source)
    private = m.path
    del m
    gc.collect()
    check("lifetime: a Mount collected is unmounted (weakref finalizer) and its directory removed",
          not zarrmount.is_mounted(private) and not os.path.exists(private), private)

    # The interpreter exits without unmounting: atexit unmounts (a normal end, sys.exit, and
    # an exception that ends the program).
    # (Each child waits for a line on stdin once mounted, so the mount is seen first; the
    # SIGTERM is sent while it waits.)
    script = ("import os, sys; sys.path.insert(0, sys.argv[1]); import zarrmount; "
              "m = zarrmount.mount(sys.argv[2], sys.argv[3]); print(m.path, flush=True); "
              "sys.stdin.readline(); {end}")
    for label, end, status in (("ends", "pass", 0), ("calls sys.exit(3)", "sys.exit(3)", 3),
                               ("dies of an exception", "raise RuntimeError('boom')", 1),
                               ("takes SIGTERM", "pass", 128 + signal.SIGTERM)):
        at = point("exit-" + label.split()[0])
        child = subprocess.Popen([sys.executable, "-c", script.format(end=end), HELPER, source, at],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        first = child.stdout.readline().strip()
        mounted_then = zarrmount.is_mounted(at)
        if "SIGTERM" in label:
            child.send_signal(signal.SIGTERM)
            out, err = child.communicate()
        else:
            out, err = child.communicate("go\n")
        check(f"lifetime: a process that mounts and {label} leaves no mount",
              first == os.path.realpath(at) and mounted_then and not zarrmount.is_mounted(at) and
              child.returncode == status, f"{first} {mounted_then} status {child.returncode}\n{err}")

    # Busy: a file open on the mount; after the timeout the mount is detached lazily.
    at = point("busy")
    m = zarrmount.mount(source, at)
    pid = m.pid
    f = open(m.path / "full" / ".zattrs", "rb")
    m.unmount(timeout=0.3)
    check("lifetime: a busy mount is detached lazily after the timeout", not zarrmount.is_mounted(at))
    check("lifetime: ... its daemon still serves the open file, which reads",
          zarrmount._proc_start_time(pid) is not None and json.loads(f.read())["encoding-type"] == "anndata")
    f.close()
    while zarrmount._proc_start_time(pid) is not None:  # ends once the file is closed
        zarrmount.time.sleep(0.02)
    check("lifetime: ... and the daemon ends once it is closed", zarrmount._proc_start_time(pid) is None)

    with zarrmount.mount(source, point("foreground"), foreground=True) as m:
        check("foreground=True: the daemon is a child, mounted", m._state.daemon.poll() is None and m.mounted)
    check("foreground=True: its exit status and log are kept",
          m.returncode == 0 and b"serving" in m.log(), (m.returncode, m.log()[-400:]))


def main():
    scratch = tempfile.mkdtemp(prefix="sources-", dir=PARENT)
    source, sets = write_source(scratch)
    for step in (check_import, lambda: check_mount_and_options(source), lambda: check_views(source, sets),
                 lambda: check_errors(source), lambda: check_lifetimes(source)):
        try:
            step()
        except Exception:  # noqa: BLE001
            check(f"{getattr(step, '__name__', 'step')}", False, traceback.format_exc(limit=6))
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-8:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
