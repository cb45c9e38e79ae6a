#!/usr/bin/python3
"""Zarr stores as sources (issue 23): every view of an AnnData stored as a Zarr store, in every
form, is byte for byte the view of the same AnnData stored as .h5ad, through live mounts; and a
damaged or changed store gives a clear error, never other bytes.

Sources:
  - tests/source/make_zarr_sources.py (run here, into a temporary directory): two objects
    written by Debian's anndata 0.8 as .h5ad and as Zarr v2 in 13 forms (every compressor
    numcodecs has that anndata writers use, '/' chunk keys, F order, consolidated or not, small
    ragged chunks, zips stored, deflated and with names written twice);
  - ../shared/data/modern (where it is here): anndata 0.13 and zarr-python 3's files, the same
    objects as .h5ad, v2 directory and zip, v3 directory sharded (anndata's default), unsharded
    and multi-shard, and v3 zip.

For each Zarr form, the views file/, full/, two uniform ones, a blocks/ one with B=3 and a where/
one are walked through the mount of the store and of the .h5ad: the same files, the same bytes,
the root's source record (zarrmount.source in .zattrs, and in .zmetadata) aside. Views of blocks
with the default B0 are not compared: B0 follows the source's own chunks (spec: "blocks"), which
the two containers choose apart. inspect names the container and the Zarr version.

Shared data's v2 stores (zarr/10x-10k-subset.legacy-0.6.zarr, a pre-0.7 layout; the two anndata
0.7 ZipStores in synthetic/): each view equals anndata.read_zarr of the store subset to its cells
(anndata 0.8, or readers.py's zarr-python reading where anndata is not installed). zarr-python 2
cannot open the v3 stores; theirs is the comparison with the .h5ad above.

Damage (copies of a store, changed here): a chunk file missing from a sparse matrix's pointers,
a truncated shard, a shard index pointing past its shard, a metadata document that is not JSON, a
compressor we do not have, chunks claiming far more than their array's shape, and a store changed
under a mount: each a clear error naming what was wrong; a struct array's chunk never written
reads as each field's own fill; a missing chunk where the array has a fill value reads as that value (what Zarr says).
Every mount is unmounted in every outcome. Prints TAP.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from live_mount import BINARY, Mount, check, report  # noqa: E402
import readers  # noqa: E402
import views as V  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SHARED = os.environ.get("ZM_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
MODERN = os.path.join(SHARED, "modern")
OPTIONS = ("cache_dir=none", "ahead_idle=0")


def inspect(path):
    done = subprocess.run([BINARY, "inspect", path, "--json"], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return json.loads(done.stdout)


def views(n, where):
    """The views compared; where: an obs column and value ("passed/true") for a where/ view."""
    third, half = max(1, n // 3), max(1, n // 2)
    return ["file", "full", f"uniform/seed0/k={third}", f"uniform/seed7/k={half}",
            f"blocks/B=3/seed5/k={max(1, n // 4)}", f"where/{where}/uniform/seed0/k=3"]


def without_source(text):
    """A root .zattrs (or a .zmetadata holding it) with zarrmount.source taken out."""
    doc = json.loads(text)
    for attrs in (doc, doc.get("metadata", {}).get(".zattrs", {})):
        if isinstance(attrs, dict) and isinstance(attrs.get("zarrmount"), dict):
            attrs["zarrmount"].pop("source", None)
    return json.dumps(doc, sort_keys=True).encode()


def walk(top):
    """{relative path: bytes} of every file below top; directories as None."""
    if not os.path.isdir(top):
        raise FileNotFoundError(f"{top}: no such view")
    files = {}
    for directory, dirs, names in os.walk(top):
        dirs.sort()
        rel = os.path.relpath(directory, top)
        files[rel + "/"] = None
        for name in sorted(names):
            path = os.path.join(directory, name)
            key = os.path.normpath(os.path.join(rel, name))
            with open(path, "rb") as f:
                data = f.read()
            if key in (".zattrs", ".zmetadata"):
                data = without_source(data)
            files[key] = data
    return files


def first_difference(got, want):
    for key in sorted(set(got) | set(want)):
        if key not in got:
            return f"{key}: only in the reference's view"
        if key not in want:
            return f"{key}: only in the Zarr store's view"
        if got[key] != want[key]:
            a, b = got[key] or b"", want[key] or b""
            at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            return f"{key}: {len(a)} bytes against {len(b)}, first difference at byte {at}"
    return None


def compare_forms(label, h5ad, forms, where):
    """Every view of each form's mount equals the .h5ad's, file for file."""
    n = inspect(h5ad)["nObs"]
    wanted = {}
    with Mount(h5ad, *OPTIONS, debug=False) as mount:
        for view in views(n, where):
            try:
                wanted[view] = walk(os.path.join(mount.point, view))
            except Exception:
                check(f"{label}.h5ad {view}: walked", False, traceback.format_exc())
    for form, path in forms:
        try:
            info = inspect(path)
            container = "zarr-zip" if path.endswith(".zip") else "zarr-directory"
            check(f"{label} {form}: inspect names the container ({container}) and Zarr version",
                  info.get("container") == container and info.get("zarrFormat") in (2, 3)
                  and info["nObs"] == n, json.dumps({k: info.get(k) for k in ("container", "zarrFormat", "nObs")}))
            with Mount(path, *OPTIONS, debug=False) as mount:
                with open(os.path.join(mount.point, ".zarrmount", "info.json")) as f:
                    mounted = json.load(f)
                check(f"{label} {form}: info.json names the container and Zarr version",
                      mounted.get("container") == container and mounted.get("zarrFormat") == info.get("zarrFormat"))
                for view in views(n, where):
                    if view not in wanted:
                        continue
                    got = walk(os.path.join(mount.point, view))
                    why = first_difference(got, wanted[view])
                    check(f"{label} {form} {view}: every file is the .h5ad view's ({len(got)} entries)",
                          why is None, why or "")
        except Exception:
            check(f"{label} {form}: mounted and walked", False, traceback.format_exc())


def made_sources(out):
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "source", "make_zarr_sources.py"),
                    out], check=True, timeout=600)
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def modern_forms(stem):
    suffixes = [("v2 directory", ".v2.zarr"), ("v2 zip", ".v2.zarr.zip"),
                ("v3 directory (sharded)", ".v3.zarr"), ("v3 directory (unsharded)", ".v3-unsharded.zarr"),
                ("v3 directory (multi-shard)", ".v3-sharded.zarr"), ("v3 zip", ".v3.zarr.zip")]
    return [(form, os.path.join(MODERN, stem + suffix)) for form, suffix in suffixes]


def shared_references():
    """Each shared v2 store's views against anndata.read_zarr of the store."""
    if not readers.have_anndata():
        check(f"shared data's v2 stores against anndata.read_zarr # SKIP {readers.ANNDATA_MISSING}", True)
        return
    import zarr
    stores = [os.path.join(SHARED, "zarr", "10x-10k-subset.legacy-0.6.zarr"),
              os.path.join(SHARED, "synthetic", "anndata-0.7.0-archive.zarr.zip"),
              os.path.join(SHARED, "synthetic", "anndata-0.7.8-archive.zarr.zip")]
    for path in stores:
        name = os.path.relpath(path, SHARED)
        if not os.path.exists(path):
            check(f"{name} # SKIP ../shared/data is not here", True)
            continue
        source = zarr.ZipStore(path, mode="r") if path.endswith(".zip") else path
        ref = V.read_view(source)
        n = inspect(path)["nObs"]
        with Mount(path, *OPTIONS, debug=False) as mount:
            for view, method, order in (("file", "file", V.order_of("file", n)),
                                        ("full", "full", V.order_of("uniform", n, 0, n)),
                                        (f"uniform/seed3/k={max(1, n // 3)}", "uniform",
                                         V.order_of("uniform", n, 3, max(1, n // 3)))):
                V.attempt(f"{name} {view}: anndata.read_zarr of the view is the store's, subset to its cells",
                          lambda: V.check_view(V.read_view(os.path.join(mount.point, view)), ref, order,
                                               method, n))


# ---- damage -------------------------------------------------------------------------------

def refused(path, *words):
    """The mount of path is refused, its one line naming every word."""
    try:
        with Mount(path, *OPTIONS, debug=False):
            return False, "mounted"
    except RuntimeError as e:
        text = str(e)
        return all(w in text for w in words), text


def read_error(point, view_file):
    try:
        with open(os.path.join(point, view_file), "rb") as f:
            f.read()
        return None
    except OSError as e:
        return e.errno


def crc32c(data):
    """CRC-32C (Castagnoli), bit by bit: Debian 12 packages no Python module for it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def damage(work, made):
    if made:
        damage_made(work, made)
    else:
        check(f"damage of the made v2 stores # SKIP {readers.ANNDATA_MISSING}", True)
    damage_shards(work)
    damage_claims(work)
    record_fills(work)


def damage_made(work, made):
    base = made["sparse"]["none"]  # uncompressed, unconsolidated: each document its own file

    # A chunk file missing from a sparse matrix's pointers: the fill value (0) there makes them
    # descend, and the view's X is EIO, the log saying why.
    store = os.path.join(work, "missing.zarr")
    shutil.copytree(made["sparse"]["small-chunks"], store)
    os.remove(os.path.join(store, "X", "indptr", "1"))
    with Mount(store, *OPTIONS, debug=False) as mount:
        code = read_error(mount.point, "full/X/indptr/0")
        log = mount.log().decode(errors="replace")
        check("a chunk of X/indptr missing: EIO for the view's X, the log naming X's indptr",
              code == 5 and "X: indptr is not monotone" in log, f"errno {code}\n{log[-600:]}")

    # A missing chunk where the array has a fill value: that value (as Zarr reads it).
    store = os.path.join(work, "filled.zarr")
    shutil.copytree(base, store)
    os.remove(os.path.join(store, "layers", "dense", "0.0"))
    with Mount(store, *OPTIONS, debug=False) as mount:
        import numpy as np
        import zarr
        got = zarr.open_group(os.path.join(mount.point, "file"), mode="r")["layers/dense"][...]
        check("a missing chunk with a fill value: the fill value, as zarr-python reads the store",
              np.array_equal(got, zarr.open_group(store, mode="r")["layers/dense"][...]))

    # Metadata that is not JSON: the mount refused, naming the document.
    store = os.path.join(work, "badjson.zarr")
    shutil.copytree(base, store)
    with open(os.path.join(store, "obsm", "X_pca", ".zarray"), "w") as f:
        f.write('{"zarr_format": 2, "shape": [')
    ok, text = refused(store, "obsm/X_pca/.zarray")
    check("a .zarray that is not JSON: the mount refused in one line naming it", ok, text)

    # A compressor we do not have: the array left out with why (inspect), the rest served.
    store = os.path.join(work, "lzma.zarr")
    shutil.copytree(base, store)
    with open(os.path.join(store, "obsm", "X_pca", ".zarray")) as f:
        meta = json.load(f)
    meta["compressor"] = {"id": "lzma", "preset": 6}
    with open(os.path.join(store, "obsm", "X_pca", ".zarray"), "w") as f:
        json.dump(meta, f)
    info = inspect(store)
    said = [line for line in info["skipped"] if "X_pca" in line]
    check("an unknown compressor: that array left out, inspect saying it names lzma",
          len(said) == 1 and "lzma" in said[0], json.dumps(info["skipped"]))

    # Changed under a mount: EIO from then on, never another version's bytes.
    store = os.path.join(work, "changed.zarr")
    shutil.copytree(base, store)
    with Mount(store, *OPTIONS, debug=False) as mount:
        first = read_error(mount.point, "full/X/data/0")
        chunk = os.path.join(store, "X", "data", "0")
        with open(chunk, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(bytes([data[0] ^ 1]) + data[1:])
        st = os.stat(chunk)
        os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        code = read_error(mount.point, "uniform/seed3/k=5/X/data/0")
        check("a chunk file changed under the mount: EIO for what is read after",
              first is None and code == 5, f"before {first}, after {code}")



def damage_shards(work):
    """v3 damage: a truncated shard, and a shard index pointing past the shard."""
    sharded = os.path.join(MODERN, "modern-tiny-300x120.v3-sharded.zarr")
    if not os.path.isdir(sharded):
        check("v3 shard damage # SKIP ../shared/data/modern is not here", True)
        return
    def past_end(b):
        """The last inner chunk's offset moved past the shard, the index's CRC-32C made anew:
        only the bounds check can catch it."""
        index = b[-4 - 16 * per_shard:-4]
        index = index[:-16] + (len(b) + 4096).to_bytes(8, "little") + index[-8:]
        return b[:-4 - 16 * per_shard] + index + crc32c(index).to_bytes(4, "little")

    with open(os.path.join(sharded, "X", "data", "zarr.json")) as f:
        meta = json.load(f)
    sharding = next(c for c in meta["codecs"] if c["name"] == "sharding_indexed")
    per_shard = 1
    for outer, inner in zip(meta["chunk_grid"]["configuration"]["chunk_shape"],
                            sharding["configuration"]["chunk_shape"]):
        per_shard *= outer // inner
    for what, change in (("truncated", lambda b: b[: len(b) // 2]),
                         ("index pointing past its end", past_end)):
        store = os.path.join(work, f"shard-{len(what)}.zarr")
        shutil.copytree(sharded, store)
        shard_dir = os.path.join(store, "X", "data", "c")
        shard = os.path.join(shard_dir, sorted(os.listdir(shard_dir))[0])
        with open(shard, "rb") as f:
            data = f.read()
        with open(shard, "wb") as f:
            f.write(change(data))
        with Mount(store, *OPTIONS, debug=False) as mount:
            code = read_error(mount.point, "file/X/data/0")
            log = mount.log().decode(errors="replace")
            check(f"a v3 shard {what}: EIO, and the log names the shard", code == 5 and "X/data/c/" in log,
                  f"errno {code}\n{log[-600:]}")


def damage_claims(work):
    """Chunks claiming far more than the shape they hold (valid Zarr, a chunk file never
    written): refused when the store is opened, naming the array, not allocated and filled
    (10^9 values for 300 had a read ask 8 GB)."""
    base = os.path.join(MODERN, "modern-tiny-300x120.v2.zarr")
    if not os.path.isdir(base):
        check("chunk claims # SKIP ../shared/data/modern is not here", True)
        return
    store = os.path.join(work, "claims.zarr")
    shutil.copytree(base, store)
    for root, dirs, files in os.walk(store):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    key = "obs/total_counts/.zarray"
    with open(os.path.join(store, key)) as f:
        meta = json.load(f)
    meta["chunks"] = [10**9]
    with open(os.path.join(store, key), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(store, ".zmetadata")) as f:
        consolidated = json.load(f)
    consolidated["metadata"][key] = meta
    with open(os.path.join(store, ".zmetadata"), "w") as f:
        json.dump(consolidated, f)
    os.remove(os.path.join(store, "obs", "total_counts", "0"))
    ok, text = refused(store, "obs/total_counts", "chunks claim 8000000000 bytes")
    check("chunks of 10^9 values over 300: the mount refused, naming the array and its claim",
          ok, text)


def record_fills(work):
    """A struct array's chunk never written: each field its own fill, wherever the field lies
    in the record (a field past the record's first 16 bytes read other memory as its fill)."""
    base = os.path.join(SHARED, "zarr", "pbmc68k_reduced.zarr")
    if not os.path.isdir(base):
        check("record fills # SKIP ../shared/data/zarr is not here", True)
        return
    store = os.path.join(work, "fills.zarr")
    shutil.copytree(base, store)
    for root, dirs, files in os.walk(store):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    path = "uns/rank_genes_groups/scores"
    with open(os.path.join(store, path, "zarr.json")) as f:
        meta = json.load(f)
    fields = [f["name"] for f in meta["data_type"]["configuration"]["fields"]]
    meta["fill_value"] = {name: i + 0.5 for i, name in enumerate(fields)}
    with open(os.path.join(store, path, "zarr.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(store, "zarr.json")) as f:
        root = json.load(f)
    root["consolidated_metadata"]["metadata"][path]["fill_value"] = meta["fill_value"]
    with open(os.path.join(store, "zarr.json"), "w") as f:
        json.dump(root, f)
    shutil.rmtree(os.path.join(store, path, "c"))
    out = os.path.join(work, "fills-export")
    done = subprocess.run([BINARY, "export", store, "full", out, "--codec", "none"],
                          capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, path, "0"), "rb") as f:
        first = struct.unpack_from(f"<{len(fields)}f", f.read())
    check("a struct array's chunk never written: every field its fill (uns/rank_genes_groups/scores)",
          done.returncode == 0 and list(first) == [i + 0.5 for i in range(len(fields))],
          f"{done.stderr.strip()} {first}")


def main():
    work = tempfile.mkdtemp(prefix="zm-zarr-sources-")
    try:
        # The generator writes with anndata (Debian 13 packages none): there, the made forms
        # and their damage are skipped, saying so; the rest runs.
        made = made_sources(os.path.join(work, "made")) if readers.have_anndata() else {}
        if not made:
            check(f"the made Zarr v2 forms # SKIP {readers.ANNDATA_MISSING}", True)
        for name, forms in sorted(made.items()):
            compare_forms(name, forms["h5ad"],
                          [(form, path) for form, path in sorted(forms.items()) if form != "h5ad"],
                          "passed/true")
        if os.path.isdir(MODERN):
            for stem in ("modern-tiny-300x120", "modern-pbmc-1200x400"):
                compare_forms(stem, os.path.join(MODERN, stem + ".h5ad"), modern_forms(stem), "passed_qc/true")
        else:
            check("the modern/ stores # SKIP ../shared/data/modern is not here", True)
        # The shared v3 ZipStore and the directory it was unpacked into: the same views.
        shared_dir = os.path.join(SHARED, "zarr", "pbmc68k_reduced.zarr")
        if os.path.isdir(shared_dir):
            compare_forms("zarr/pbmc68k_reduced", shared_dir, [("zip", shared_dir + ".zip")], "phase/G1")
        shared_references()
        damage(work, made)
    except Exception:
        check("the test ran to its end", False, traceback.format_exc())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
