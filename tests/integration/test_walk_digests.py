#!/usr/bin/python3
"""The bytes served stay the bytes served (issue 19): a few views of a few
fixtures, exported by `zarrmount export` and walked through a real mount, each
reduced to one digest of the whole walk, equal the digests recorded in
walk-digests.json (beside this file) by the build before the refactor.

A walk's digest is SHA-256 over its entries sorted by relative path (bytes):
"d PATH\\n" for a directory, "f PATH SIZE\\n" then the file's bytes for a file,
"l PATH TARGET\\n" for a symbolic link. Every export is made twice and the two
walks must agree (exports are deterministic), and a mount's walk of a view
must equal the export of the same view.

Views under codec=none have the same bytes on every machine; those under a
compressing codec only where the codec libraries' versions are the ones
recorded (.zarrmount/info.json's codecLibraries), and are skipped, saying so,
elsewhere.

  run_mount_test.sh test_walk_digests.py            compare (prints TAP)
  run_mount_test.sh test_walk_digests.py --record   write walk-digests.json

Record only from the build whose bytes are the reference (the file says which
commit it came from). Needs ZM_BINARY and ZM_SOURCE_ROOT.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import live_mount  # noqa: E402
from live_mount import check  # noqa: E402

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
# Mounts go through the Python helper (contrib/python/zarrmount.py), which runs $ZARRMOUNT.
sys.path.insert(0, os.path.join(ROOT, "contrib", "python"))
os.environ["ZARRMOUNT"] = os.path.abspath(BINARY)
import zarrmount  # noqa: E402
FIXTURES = os.path.join(ROOT, "fixtures", "sources")
RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "walk-digests.json")

# Sources under fixtures/sources: dense, CSR with every element kind, CSC,
# loom, 10x v3 and v2, the pre-0.7 layout and CSR in many small chunks.
SOURCES = ("h5ad/x-dense.h5ad", "h5ad/full-csr.h5ad", "h5ad/x-csc.h5ad", "loom/full.loom",
           "10x/v3-two-feature-types.h5", "10x/v2-two-genomes.h5", "legacy/anndata-0.6-sparse.h5ad",
           "layouts/csr-chunks-13.h5ad")
# Compressing codecs, on two sources only (their bytes depend on library versions).
COMPRESSED = {"h5ad/full-csr.h5ad": ("blosc:zstd:1", "zstd:3"), "loom/full.loom": ("blosc:zstd:1",)}
# The mounted walks: (source, codec, views).
MOUNTED = (("h5ad/full-csr.h5ad", "none", ("full", "uniform/seed0/k=20")),
           ("loom/full.loom", "blosc:zstd:1", ("full",)))


def walk_digest(top):
    """(sha256 hex, files, bytes) of everything under top."""
    entries = []
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(directory, name)
            entries.append((os.fsencode(os.path.relpath(path, top)), path))
    entries.sort()
    digest = hashlib.sha256()
    count = size = 0
    for relative, path in entries:
        if os.path.islink(path):
            digest.update(b"l " + relative + b" " + os.fsencode(os.readlink(path)) + b"\n")
        elif os.path.isdir(path):
            digest.update(b"d " + relative + b"\n")
        else:
            with open(path, "rb") as f:
                data = f.read()
            digest.update(b"f " + relative + b" " + str(len(data)).encode() + b"\n" + data)
            count += 1
            size += len(data)
    return digest.hexdigest(), count, size


def layout(name):
    """10x files as one AnnData (-o layout=anndata): the bytes recorded before their MuData
    layout, which keeps them byte for byte; their MuData stores are recorded under keys of
    their own ("layout=mudata")."""
    return ["--layout", "anndata"] if name.startswith("10x/") else []


def n_obs(source, extra=()):
    done = subprocess.run([BINARY, "inspect", source, "--json", *extra], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"inspect failed: {done.stderr.strip()}")
    return json.loads(done.stdout)["nObs"]


def views_of(n):
    views = ["full", f"uniform/seed0/k={max(1, n // 3)}"]
    if n >= 2:
        views.append(f"blocks/seed0/k={max(1, n // 2)}")
    return views


def cases():
    """(key, source, view, extra export arguments, codec)."""
    out = []
    for name in SOURCES:
        source = os.path.join(FIXTURES, name)
        views = views_of(n_obs(source, layout(name)))
        for view in views:
            out.append((f"export {name} {view} codec=none", source, view,
                        ["--codec", "none"] + layout(name), "none"))
        if layout(name):
            for view in views_of(n_obs(source)):
                out.append((f"export {name} {view} codec=none layout=mudata", source, view,
                            ["--codec", "none"], "none"))
        for codec in COMPRESSED.get(name, ()):
            for view in views[:2]:
                out.append((f"export {name} {view} codec={codec}", source, view, ["--codec", codec], codec))
        if name == "h5ad/full-csr.h5ad":
            out.append((f"export {name} full codec=none chunk-size=4096", source, "full",
                        ["--codec", "none", "--chunk-size", "4096"], "none"))
    return out


def export(scratch, source, view, extra):
    out = tempfile.mkdtemp(prefix="export-", dir=scratch)
    os.rmdir(out)
    done = subprocess.run([BINARY, "export", source, view, out] + extra, capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"export failed: {done.stderr.strip()}")
    try:
        return walk_digest(out)
    finally:
        shutil.rmtree(out)


def commit():
    done = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def main(record):
    scratch = tempfile.mkdtemp(prefix="zm-digests-")
    got = {}
    libraries = None
    try:
        # The mounts first: their info.json names the codec libraries.
        for name, codec, views in MOUNTED:
            try:
                # Through the Python helper, the daemon in the foreground: its exit status and
                # log are checked once it is unmounted.
                point = tempfile.mkdtemp(prefix="zm-digests-", dir=live_mount.PARENT)
                with zarrmount.mount(os.path.join(FIXTURES, name), point, codec=codec, foreground=True,
                                     env=live_mount.daemon_env()) as mount:
                    libraries = mount.info()["codecLibraries"]
                    for view in views:
                        got[f"mount {name} {view} codec={codec}"] = (walk_digest(str(mount.path / view)), codec)
                check(f"{os.path.basename(point)}: unmounted, the daemon exits 0 and logged no sanitizer report",
                      mount.returncode == 0 and not live_mount.sanitizer_report(mount.log()),
                      f"status {mount.returncode}\n{mount.log()[-3000:].decode(errors='replace')}")
                os.rmdir(point)
            except Exception:
                check(f"mount {name} codec={codec}: walked", False, traceback.format_exc())
        for key, source, view, extra, codec in cases():
            try:
                first = export(scratch, source, view, extra)
                second = export(scratch, source, view, extra)
                check(f"{key}: the same bytes when exported twice", first == second,
                      f"{first} then {second}")
                got[key] = (first, codec)
            except Exception:
                check(f"{key}: exported", False, traceback.format_exc())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # A mount's walk of a view is the export of that view.
    for name, codec, views in MOUNTED:
        for view in views:
            mounted = got.get(f"mount {name} {view} codec={codec}")
            exported = got.get(f"export {name} {view} codec={codec}")
            if mounted and exported:
                check(f"mount {name} {view} codec={codec}: the walk equals the export", mounted == exported,
                      f"mount {mounted[0]}, export {exported[0]}")

    if record:
        failed = [name for ok, name, _ in live_mount.results if not ok]
        if failed:
            print("not recorded: " + "; ".join(failed), file=sys.stderr)
            return 1
        doc = {
            "about": "Digests of whole walks of exported and mounted views (tests/integration/"
                     "test_walk_digests.py); written by its --record.",
            "recordedFrom": commit(),
            "codecLibraries": libraries,
            "walks": {key: {"sha256": d[0], "files": d[1], "bytes": d[2]}
                      for key, (d, _) in sorted(got.items())},
        }
        with open(RECORD, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"recorded {len(got)} walks from {doc['recordedFrom']} in {RECORD}")
        return 0

    with open(RECORD) as f:
        recorded = json.load(f)
    same_libraries = libraries == recorded["codecLibraries"]
    for key, (digest, codec) in got.items():
        want = recorded["walks"].get(key)
        if codec != "none" and not same_libraries:
            check(f"{key}: as recorded # SKIP compressed bytes depend on the codec libraries: "
                  f"recorded with {recorded['codecLibraries']}, these are {libraries}", True)
            continue
        check(f"{key}: as recorded from {recorded['recordedFrom'][:7]}",
              want is not None and [want["sha256"], want["files"], want["bytes"]] == list(digest),
              f"recorded {want}, now {digest}")
    for key in sorted(set(recorded["walks"]) - set(got)):
        check(f"{key}: recorded and walked again", False, "this walk was not made")
    return live_mount.report()


if __name__ == "__main__":
    sys.exit(main("--record" in sys.argv[1:]))
