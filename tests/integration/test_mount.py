#!/usr/bin/python3
"""The mount, as readers use it: for every source, mount it, and check that
anndata.read_zarr of each view (full/, file/, uniform at several seeds and
sizes, blocks with the default and an explicit B) equals anndata's reading
of the source subset to the view's cells in its order; that zarr-python and
dask.array.from_zarr read every array; that `cp -r` of a view reads back the
same; that refused paths are ENOENT; that two mounts of one source give
byte-identical trees, for every codec; and that info.json lists the codec
libraries at the versions they report. Every mount is unmounted in every
outcome. Prints TAP.

Without anndata (Debian 13 packages none) sources are read with h5py and
views with zarr-python, by readers.py under anndata 0.8's rules (which
test_export.py checks against anndata where it is installed); each source
then counts one skipped check, the reading by anndata.read_zarr itself. The
sources made here are written with h5py in anndata 0.8's layout
(h5ad_writer.py) on every release.

Needs ZM_BINARY, ZM_SOURCE_ROOT (and ZM_SHARED_DATA where ../shared/data is).
ZM_ONLY=substring limits the sources.
"""
import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import views  # noqa: E402
import readers  # noqa: E402
import h5ad_writer  # noqa: E402

import numpy as np  # noqa: E402
import dask.array  # noqa: E402
import xxhash  # noqa: E402

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SHARED = os.environ.get("ZM_SHARED_DATA", "../shared/data")
results = []


def check(name, ok, detail=""):
    results.append((ok, name, detail))


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


@contextlib.contextmanager
def mounted(source, *options):
    """Mounts source in a new directory (foreground daemon); always unmounts."""
    point = tempfile.mkdtemp(prefix="zm-mnt-", dir=os.environ.get("ZM_MOUNT_PARENT"))
    args = [views.BINARY, source, point, "-f"]
    for option in options:
        args += ["-o", option]
    log = tempfile.TemporaryFile()
    daemon = subprocess.Popen(args, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not is_mounted(point):
            if daemon.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"mount failed: {log.read().decode(errors='replace').strip()}")
            if time.monotonic() > deadline:
                raise RuntimeError("mount did not appear within 60 s")
            time.sleep(0.05)
        yield point
    finally:
        if is_mounted(point):
            subprocess.run(["fusermount3", "-u", point], capture_output=True)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        if is_mounted(point):
            subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
        os.rmdir(point)
        log.close()


def sources():
    _, why = views.shared_rest()
    if why:
        check(f"the files of ../shared/data not copied to fixtures/shared # SKIP {why}", True)
    return views.sources()


def read_every_array(store):
    for _, array in readers.walk_arrays(readers.open_group(store)):
        readers.read(array)
        if array.dtype.kind not in "OUV" and array.ndim > 0:
            dask.array.from_zarr(array).compute()


def anndata_itself(name):
    """Without anndata the views were read by readers.py: the reading by
    anndata.read_zarr itself is one skipped check a source."""
    if not readers.have_anndata():
        check(f"{name}: anndata.read_zarr reads the views # SKIP {readers.ANNDATA_MISSING}", True)


def tree_digest(root):
    """xxh3 of every file under root, by relative path."""
    digests = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                digests[os.path.relpath(path, root)] = xxhash.xxh3_64_hexdigest(f.read())
    return digests


def check_source(path):
    name = views.display_name(path)
    info, view_list = views.views_for(path)
    ref = views.reference(path)
    anndata_itself(name)
    with mounted(path, *views.layout_options(path)) as point:
        for view, method, seed, k, b in view_list:
            label = f"{name} {view}"
            try:
                order = views.order_of(method, info["nObs"], seed, k, b)
                got = views.read_view(os.path.join(point, view))
                views.check_view(got, ref, order, "full" if view == "full" else method, info["nObs"])
                read_every_array(os.path.join(point, view))
                check(label, True)
            except Exception as error:  # noqa: BLE001
                check(label, False, str(error) if isinstance(error, views.Differ) else traceback.format_exc(limit=3))
        # Refused and non-canonical paths do not exist.
        bad = ["uniform/seed0/k=0", "uniform/seed4294967296/k=1", "uniform/seed01/k=1",
               "uniform/seed0/k=01", "uniform/seed-1/k=1", "blocks/B=0/seed0/k=1", "nothing",
               "uniform/seed0/k=1/no-such-element", "full/no-such-element/.zarray"]
        for p in bad:
            try:
                os.stat(os.path.join(point, p))
                check(f"{name} ENOENT for {p}", False, "exists")
            except OSError as error:
                check(f"{name} ENOENT for {p}", error.errno == errno.ENOENT, str(error))


def select_source(path, request):
    """zarrmount select --source PATH: (result, None) or (None, refusal)."""
    done = subprocess.run([views.BINARY, "select", "--source", path], input=json.dumps(request),
                          capture_output=True, text=True, timeout=600)
    out = json.loads(done.stdout)
    if done.returncode == 2:
        return None, out["error"]
    if done.returncode != 0:
        raise RuntimeError(f"select --source {path}: {done.stdout}{done.stderr}")
    return out, None


def method_views(path, ref, n):
    """(view path, request) for stratified and spatial views of a source."""
    out = []
    fields = [c for c in ref.obs.columns if str(ref.obs[c].dtype) == "category"]
    if fields and n >= 2:
        f = fields[0]
        cats = int(ref.obs[f].nunique()) + 1
        out.append((f"stratified/{f}/seed1/k={max(1, n // 3)}",
                    {"method": "stratified", "field": f, "seed": 1, "k": max(1, n // 3)}))
        for allocation, seed in (("proportional", 2), ("balanced", 3)):
            k = max(1, min(n, max(n // 2, cats)))
            out.append((f"stratified/{f}/{allocation}/min=1/seed{seed}/k={k}",
                        {"method": "stratified", "field": f, "seed": seed, "k": k,
                         "allocation": allocation, "minimum": 1}))
    embeddings = [e for e in ref.obsm.keys()
                  if getattr(ref.obsm[e], "ndim", 0) == 2 and ref.obsm[e].shape[1] >= 1
                  and np.issubdtype(np.asarray(ref.obsm[e]).dtype, np.number)]
    if embeddings and n >= 2:
        e = embeddings[0]
        width = ref.obsm[e].shape[1]
        k = max(1, n // 3)
        out.append((f"spatial/{e}/seed0/k={k}", {"method": "spatial", "embedding": e, "seed": 0, "k": k}))
        out.append((f"spatial/{e}/G=5/cols=0/seed4/k={k}",
                    {"method": "spatial", "embedding": e, "seed": 4, "k": k, "gridSize": 5, "columns": [0]}))
        if width >= 2:
            out.append((f"spatial/{e}/G=7/cols=1,0/seed5/k={k}",
                        {"method": "spatial", "embedding": e, "seed": 5, "k": k, "gridSize": 7, "columns": [1, 0]}))
        if width >= 3:
            out.append((f"spatial/{e}/G=3/cols=0,1,2/seed6/k={k}",
                        {"method": "spatial", "embedding": e, "seed": 6, "k": k, "gridSize": 3,
                         "columns": [0, 1, 2]}))
    return fields, embeddings, out


def check_methods(path):
    """stratified and spatial views against the source subset to select's
    order; share= and pct= links; listings; refusals are ENOENT."""
    name = views.display_name(path)
    ref = views.reference(path)
    n = ref.n_obs
    fields, embeddings, view_list = method_views(path, ref, n)
    with mounted(path, *views.layout_options(path)) as point:
        listed = set(os.listdir(os.path.join(point, "stratified")))
        check(f"{name} stratified/ lists every categorical obs column", set(fields) <= listed,
              f"{sorted(fields)} vs {sorted(listed)}")
        listed = set(os.listdir(os.path.join(point, "spatial")))
        check(f"{name} spatial/ lists the numeric embeddings", set(embeddings) <= listed,
              f"{sorted(embeddings)} vs {sorted(listed)}")
        for view, request in view_list:
            label = f"{name} {view}"
            try:
                result, refusal = select_source(path, request)
                target = os.path.join(point, view)
                if refusal is not None:
                    code = 0
                    try:
                        os.stat(target)
                    except OSError as error:
                        code = error.errno
                    check(label + " (refused: ENOENT)", code == errno.ENOENT, refusal)
                    continue
                got = views.read_view(target)
                attrs = json.load(open(os.path.join(target, ".zattrs")))["zarrmount"]["view"]
                if attrs["digest"] != result["digest"]:
                    raise views.Differ(f"digest {attrs['digest']}, select says {result['digest']}")
                for key in ("field", "allocation", "minimum", "embedding", "columns", "gridSize"):
                    if key in request and attrs.get(key) != request[key]:
                        raise views.Differ(f".zattrs {key} = {attrs.get(key)}, asked {request[key]}")
                # explain says the same without reading a chunk.
                told = views.run_json(["explain", target, "--json"])
                if (told["digest"], told["k"], told["firstCells"]) != (result["digest"], result["k"], result["order"][:10]):
                    raise views.Differ(f"explain: {told['digest']} k={told['k']} {told['firstCells']}")
                if "strata" in told and (sum(x["cells"] for x in told["strata"]) != n
                                         or sum(x["kept"] for x in told["strata"]) != result["k"]):
                    raise views.Differ(f"explain: strata do not add up: {told['strata']}")
                views.check_view(got, ref, np.array(result["order"], dtype=np.int64), request["method"], n)
                check(label, True)
            except Exception as error:  # noqa: BLE001
                check(label, False, str(error) if isinstance(error, views.Differ) else traceback.format_exc(limit=3))
        # share= and pct= are links to the k= the kernel computes.
        links = [("uniform/seed0", "share", "0.5", {"method": "uniform"}),
                 ("uniform/seed0", "pct", "12.5", {"method": "uniform"}),
                 ("blocks/seed3", "share", "0.25", {"method": "blocks", "blockSize": 4})]
        if fields:
            links.append((f"stratified/{fields[0]}/seed1", "pct", "50", {"method": "uniform"}))
        if embeddings:
            links.append((f"spatial/{embeddings[0]}/seed0", "share", "0.1", {"method": "uniform"}))
        for directory, kind, value, request in links:
            if n == 0:
                break
            request = dict(request, n=n, sizeOnly=True)
            request["share" if kind == "share" else "percent"] = value
            k = views.run_json(["select"], json.dumps(request))["k"]
            link = os.path.join(point, directory, f"{kind}={value}")
            try:
                target = os.readlink(link)
                ok = target == f"k={k}" and os.path.isdir(link) and os.path.samefile(link, os.path.join(point, directory, target))
                check(f"{name} {directory}/{kind}={value} -> k={k}", ok, target)
            except OSError as error:
                check(f"{name} {directory}/{kind}={value} -> k={k}", False, str(error))
        bad = ["stratified/no-such-column/seed0/k=1", "spatial/no-such-embedding/seed0/k=1",
               "uniform/seed0/share=0", "uniform/seed0/share=1.5", "uniform/seed0/pct=0",
               "uniform/seed0/pct=101", "uniform/seed0/share=abc"]
        if fields:
            bad += [f"stratified/{fields[0]}/even/min=0/seed0/k=1", f"stratified/{fields[0]}/balanced/min=01/seed0/k=1",
                    f"stratified/{fields[0]}/balanced/min={n + 1}/seed0/k=1"]
        if embeddings:
            bad += [f"spatial/{embeddings[0]}/G=0/cols=0/seed0/k=1", f"spatial/{embeddings[0]}/G=1/cols=-1/seed0/k=1",
                    f"spatial/{embeddings[0]}/G=1/cols=1.5/seed0/k=1",
                    f"spatial/{embeddings[0]}/G=4294967296/cols=0,0/seed0/k=1",
                    f"spatial/{embeddings[0]}/G=1/cols=0,0,0,0/seed0/k=1",
                    f"spatial/{embeddings[0]}/G=1/cols=99999/seed0/k=1"]
        for p in bad:
            try:
                os.stat(os.path.join(point, p))
                check(f"{name} ENOENT for {p}", False, "exists")
            except OSError as error:
                check(f"{name} ENOENT for {p}", error.errno == errno.ENOENT, str(error))
            told = subprocess.run([views.BINARY, "explain", os.path.join(point, p)], capture_output=True,
                                  text=True, timeout=600)
            check(f"{name} explain says why {p} does not exist",
                  told.returncode == 2 and "does not exist: " in told.stdout, told.stdout + told.stderr)


def files_under(root):
    out = []
    for directory, _, files in os.walk(root):
        out += [os.path.join(directory, f) for f in files]
    return out


def stats_of(point):
    with open(os.path.join(point, ".zarrmount", "stats.json")) as f:
        return json.load(f)


def disk_cache():
    """Chunks of walked views kept across mounts: a remount serves them from
    the disk (the same bytes, fewer source reads); damaged entries are
    removed and rebuilt, never served; a changed source never reuses the old
    entries; the bound holds; cache_dir=none keeps nothing."""
    source = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
    scratch = tempfile.mkdtemp(prefix="zm-disk-")
    view = "uniform/seed3/k=40"
    try:
        cache = os.path.join(scratch, "cache")
        options = (f"cache_dir={cache}", "chunk_size=256")
        with mounted(source, *options) as point:
            first = tree_digest(os.path.join(point, view))
            # Bytes, not chunks decoded: a direct walk's chunks copy the
            # source's values where they lie and decode no chunk.
            read_first = stats_of(point)["total"]["source"]["bytesRead"]
        entries = [f for f in files_under(cache) if f.endswith(".entry")]
        check("disk cache: a walk files its chunks", len(entries) > 10, str(len(entries)))
        with mounted(source, *options) as point:
            again = tree_digest(os.path.join(point, view))
            stats = stats_of(point)
            read_again = stats["total"]["source"]["bytesRead"]
        check("disk cache: a remount serves the same bytes", again == first)
        check("disk cache: ... reading fewer source bytes", read_again < read_first and stats["diskCache"]["hits"] > 10,
              f"{read_again} vs {read_first}; {stats['diskCache']}")
        check("disk cache: ... the walk's kept files pushed into the kernel's cache ahead of it",
              stats["total"]["pushed"]["files"] > 10, str(stats["total"]["pushed"]))
        # With passthrough the kernel reads kept chunks from the disk cache itself.
        release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
        if os.geteuid() != 0 or release < (6, 9):
            check(f"disk cache, passthrough # SKIP needs root and Linux 6.9+ (have {os.uname().release})", True)
        else:
            with mounted(source, *options, "passthrough=on") as point:
                through = tree_digest(os.path.join(point, view))
                stats = stats_of(point)
            check("disk cache, passthrough: a remount serves the same bytes", through == first)
            check("disk cache, passthrough: kept chunks are read by the kernel from the disk cache",
                  stats["total"]["passthrough"]["opens"] > 10 and stats["total"]["pushed"]["files"] == 0,
                  str(stats["total"]))
        # Damage every entry's bytes (its payload, what the kernel would
        # serve): each is found out, removed and rebuilt.
        payloads = [f for f in files_under(cache) if f.endswith(".data")]
        check("disk cache: each entry's bytes are a file of their own", len(payloads) == len(entries),
              f"{len(payloads)} payloads, {len(entries)} entries")
        for path in payloads:
            if os.path.getsize(path) == 0:
                continue
            with open(path, "r+b") as f:
                f.seek(-1, os.SEEK_END)
                last = f.read(1)
                f.seek(-1, os.SEEK_END)
                f.write(bytes([last[0] ^ 0x20]))
        with mounted(source, *options) as point:
            repaired = tree_digest(os.path.join(point, view))
            damaged = stats_of(point)["diskCache"]["damaged"]
        check("disk cache: damaged entries are never served", repaired == first)
        check("disk cache: ... and are counted and rebuilt", damaged >= len(entries) and
              len([f for f in files_under(cache) if f.endswith(".entry")]) >= len(entries), str(damaged))
        # A changed source (a copy, then its time changed) files apart.
        copy = os.path.join(scratch, "copy.h5ad")
        shutil.copy(source, copy)
        with mounted(copy, *options) as point:
            tree_digest(os.path.join(point, view))
        spaces = set(os.listdir(os.path.join(cache, "v2")))
        os.utime(copy, (1, 1))
        with mounted(copy, *options) as point:
            changed = tree_digest(os.path.join(point, view))
            hits = stats_of(point)["diskCache"]["hits"]
        check("disk cache: a changed source never reuses the old entries",
              changed == first and hits == 0 and len(set(os.listdir(os.path.join(cache, "v2")))) == len(spaces) + 1,
              f"hits {hits}")
        # The bound holds.
        small = os.path.join(scratch, "small")
        with mounted(source, f"cache_dir={small}", "cache_max=16K", "chunk_size=256") as point:
            tree_digest(os.path.join(point, "full"))
        held = sum(os.path.getsize(f) for f in files_under(small))
        check("disk cache: the bound holds", 0 < held <= 16 * 1024, str(held))
        # none keeps nothing.
        with mounted(source, "cache_dir=none", "chunk_size=256") as point:
            tree_digest(os.path.join(point, view))
            off = stats_of(point)["diskCache"]
        check("disk cache: cache_dir=none keeps nothing", off is None, str(off))
    except Exception:  # noqa: BLE001
        check("disk cache", False, traceback.format_exc(limit=3))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def codec_libraries():
    """info.json lists the codec libraries the daemon makes chunk bytes with,
    each at the version the library itself reports at run time: asked here
    through ctypes of the same shared libraries (by their version numbers
    where they have one, another call than the daemon's)."""
    import ctypes
    source = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
    try:
        with mounted(source, "cache_dir=none") as point:
            with open(os.path.join(point, ".zarrmount", "info.json")) as f:
                got = json.load(f).get("codecLibraries")

        def dotted(number, base):
            return f"{number // (base * base)}.{number // base % base}.{number % base}"

        blosc = ctypes.CDLL("libblosc.so.1")
        blosc.blosc_get_version_string.restype = ctypes.c_char_p
        complib, version = ctypes.c_char_p(), ctypes.c_char_p()
        blosc.blosc_get_complib_info(b"blosclz", ctypes.byref(complib), ctypes.byref(version))
        zlib = ctypes.CDLL("libz.so.1")
        zlib.zlibVersion.restype = ctypes.c_char_p
        expected = {
            "blosc": blosc.blosc_get_version_string().decode(),
            "blosclz": version.value.decode(),
            "lz4": dotted(ctypes.CDLL("liblz4.so.1").LZ4_versionNumber(), 100),
            "zlib": zlib.zlibVersion().decode(),
            "zstd": dotted(ctypes.CDLL("libzstd.so.1").ZSTD_versionNumber(), 100),
        }
        check("info.json lists the codec libraries at the versions they report", got == expected,
              f"info.json {got}, the libraries {expected}")
    except Exception:  # noqa: BLE001
        check("info.json lists the codec libraries", False, traceback.format_exc(limit=3))


def copy_and_identity():
    source = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
    info, _ = views.views_for(source)
    ref = views.reference(source)
    scratch = tempfile.mkdtemp(prefix="zm-copy-")
    try:
        with mounted(source) as point:
            out = os.path.join(scratch, "out.zarr")
            subprocess.run(["cp", "-r", os.path.join(point, "uniform/seed0/k=20"), out], check=True)
            got = views.read_view(out)
            views.check_view(got, ref, views.order_of("uniform", info["nObs"], 0, 20), "uniform", info["nObs"])
            check("cp -r of a view reads back the same object", True)
            sizes_ok = all(os.path.getsize(os.path.join(d, f)) == len(open(os.path.join(d, f), "rb").read())
                           for d, _, fs in os.walk(os.path.join(point, "blocks/seed0/k=30")) for f in fs)
            check("every file's size is exactly the bytes read", sizes_ok)
        # Nested views share their chunks (kept once): with small chunks,
        # smaller and larger views of one seed, and full/, all read right.
        with mounted(source, "chunk_size=256") as point:
            for view, method, seed, k in (("uniform/seed0/k=50", "uniform", 0, 50),
                                          ("uniform/seed0/k=20", "uniform", 0, 20),
                                          ("full", "full", 0, info["nObs"]),
                                          ("blocks/B=4/seed2/k=40", "blocks", 2, 40),
                                          ("blocks/B=4/seed2/k=13", "blocks", 2, 13)):
                got = views.read_view(os.path.join(point, view))
                order = views.order_of("uniform" if method == "full" else method, info["nObs"], seed, k, 4)
                try:
                    views.check_view(got, ref, order, method, info["nObs"])
                    check(f"nested views with shared chunks: {view}", True)
                except views.Differ as error:
                    check(f"nested views with shared chunks: {view}", False, str(error))
        shuffles = {"blosc:zstd:1": 1, "blosc:lz4:5": 1, "blosc:zstd:1:bitshuffle": 2,
                    "blosc:lz4:5:noshuffle": 0}
        for codec in ("blosc:zstd:1", "blosc:lz4:5", "blosc:zstd:1:bitshuffle", "blosc:lz4:5:noshuffle",
                      "zstd:3", "none"):
            trees = []
            for _ in range(2):
                with mounted(source, f"codec={codec}") as point:
                    view = os.path.join(point, "uniform/seed3/k=40")
                    trees.append(tree_digest(view))
                    if len(trees) == 1:
                        # The values, through zarr-python's own decoders.
                        try:
                            views.check_view(views.read_view(view), ref,
                                             views.order_of("uniform", info["nObs"], 3, 40), "uniform",
                                             info["nObs"])
                            values = True
                        except views.Differ as error:
                            values = str(error)
                        with open(os.path.join(view, "X", "data", ".zarray")) as f:
                            compressor = json.load(f)["compressor"]
            check(f"two mounts give byte-identical trees (codec {codec})", trees[0] == trees[1] and len(trees[0]) > 10)
            check(f"codec {codec}: zarr-python reads the view's values", values is True, values)
            if codec in shuffles:
                check(f"codec {codec}: .zarray's blosc shuffle is {shuffles[codec]}",
                      compressor and compressor.get("shuffle") == shuffles[codec], compressor)
    except Exception:  # noqa: BLE001
        check("copy and identity", False, traceback.format_exc(limit=3))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def many_cells():
    """A source of 2.5 million cells: enough that a view lays out X's index
    pointers on several threads. The pointers of full/ and of a uniform view
    are the source's row lengths in the view's order (its
    cellucid_original_position), summed."""
    n, genes = 2_500_000, 7
    scratch = tempfile.mkdtemp(prefix="zm-many-")
    try:
        path = os.path.join(scratch, "many.h5ad")
        rng = np.random.default_rng(5)
        lengths = rng.integers(0, 4, n)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        nnz = int(indptr[-1])
        import pandas as pd
        import scipy.sparse
        matrix = scipy.sparse.csr_matrix((np.ones(nnz, np.float32), rng.integers(0, genes, nnz).astype(np.int32),
                                          indptr), shape=(n, genes))
        h5ad_writer.write_h5ad(path, X=matrix, obs=pd.DataFrame(index=pd.RangeIndex(n).astype(str)),
                               var=pd.DataFrame(index=[f"g{i}" for i in range(genes)]))
        with mounted(path, "cache_dir=none", "codec=none") as point:
            for view in ("full", "uniform/seed2/k=1500000"):
                root = readers.open_group(os.path.join(point, view))
                positions = readers.read(root["obs/cellucid_original_position"]).astype(np.int64)
                got = readers.read(root["X/indptr"])
                want = np.concatenate([[0], np.cumsum(lengths[positions])])
                check(f"2.5M cells, {view}: X's index pointers are the row lengths in the view's order",
                      got.shape == want.shape and np.array_equal(got, want), f"{got[:5]} vs {want[:5]}")
        # A subsample holds its own cells' pointers, not a slot for each of the source's (8
        # bytes a source cell: 20 MB here), and its walks visit its cells from a list of them in
        # source order, not a map from every source cell (4 bytes each: 10 MB). What the view
        # holds is in stats.json (build.bytesHeld); small chunks make X/data a walk.
        with mounted(path, "cache_dir=none", "ahead_idle=0", "chunk_size=16K") as point:
            for view in ("uniform/seed0/k=20000", "blocks/seed0/k=20000"):
                data = readers.open_group(os.path.join(point, view))["X/data"]
                values = readers.read(data)
                with open(os.path.join(point, ".zarrmount/stats.json")) as f:
                    stats = json.load(f)
                # blocks/seed0 is blocks/B=<B0>/seed0 (the view's key in stats.json).
                method, rest = view.split("/", 1)
                held = max(v["build"]["bytesHeld"] for k, v in stats["views"].items()
                           if k == view or (k.startswith(method + "/B=") and k.endswith("/" + rest)))
                check(f"2.5M cells, {view}: after walking X/data ({data.nchunks} chunks, {values.size} values) "
                      f"the view holds {held} bytes for its cells: under 64 a kept cell",
                      data.nchunks > 1 and 0 < held < 64 * 20000, list(stats["views"]))
            with open(os.path.join(point, ".zarrmount/stats.json")) as f:
                full_before = json.load(f)["views"].get("full", {}).get("build", {}).get("bytesHeld", 0)
            os.stat(os.path.join(point, "full"))
            with open(os.path.join(point, ".zarrmount/stats.json")) as f:
                looked_up = json.load(f)["views"]["full"]["build"]["bytesHeld"]
            # Its lookup holds nothing a cell: the order and X's layout are made when X is
            # first used (its metadata read).
            check(f"2.5M cells, full: looked up, the view holds {looked_up} bytes: none a cell",
                  full_before == 0 and looked_up < 4096, looked_up)
            with open(os.path.join(point, "full/X/indptr/.zarray")) as f:
                f.read()
            with open(os.path.join(point, ".zarrmount/stats.json")) as f:
                full = json.load(f)["views"]["full"]["build"]["bytesHeld"]
            # full/ with X laid out: its order, and X's pointers, its own and the source's
            # (4 + 8 + 8 bytes a cell).
            check(f"2.5M cells, full: X's metadata read, the view holds {full} bytes: 20 a cell",
                  full == 4 * n + 2 * 8 * (n + 1), full)
    except Exception:  # noqa: BLE001
        check("2.5M cells", False, traceback.format_exc(limit=3))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def whole_columns():
    """Per-cell columns of 20,000 cells each fit one chunk: in a reordered view
    that chunk is the whole column gathered in the view's order (read in spans,
    each kept row copied), for 1-byte codes, floats, booleans and 2-D rows."""
    n = 20_000
    scratch = tempfile.mkdtemp(prefix="zm-whole-")
    try:
        import pandas as pd
        path = os.path.join(scratch, "whole.h5ad")
        rng = np.random.default_rng(9)
        obs = pd.DataFrame({"kind": pd.Categorical(rng.choice(["a", "b", "c"], n)),
                            "score": rng.random(n).astype(np.float32), "flag": rng.random(n) > 0.5},
                           index=[f"c{i}" for i in range(n)])
        umap = rng.random((n, 2)).astype(np.float32)
        h5ad_writer.write_h5ad(path, X=np.zeros((n, 3), np.float32), obs=obs, obsm={"X_umap": umap},
                               compression="gzip")
        with mounted(path, "cache_dir=none") as point:
            for view in ("full", "uniform/seed1/k=15000", "blocks/seed0/k=9000"):
                root = readers.open_group(os.path.join(point, view))
                at = readers.read(root["obs/cellucid_original_position"]).astype(np.int64)
                codes = root["obs/kind/codes"]
                check(f"{view}: obs/kind/codes is one chunk of {len(at)} cells", codes.nchunks == 1, str(codes.chunks))
                want = {"obs/kind/codes": obs["kind"].cat.codes.to_numpy()[at], "obs/score": obs["score"].to_numpy()[at],
                        "obs/flag": obs["flag"].to_numpy()[at], "obsm/X_umap": umap[at]}
                for name, values in want.items():
                    got = readers.read(root[name])
                    check(f"{view}: {name} is the source's rows in the view's order",
                          got.shape == values.shape and np.array_equal(got, values), f"{got[:3]} vs {values[:3]}")
    except Exception:  # noqa: BLE001
        check("whole columns", False, traceback.format_exc(limit=3))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    for path in sources():
        try:
            check_source(path)
        except Exception:  # noqa: BLE001
            check(f"{path}: mount", False, traceback.format_exc(limit=3))
        try:
            check_methods(path)
        except Exception:  # noqa: BLE001
            check(f"{path}: stratified and spatial views", False, traceback.format_exc(limit=3))
    codec_libraries()
    if not os.environ.get("ZM_ONLY"):
        copy_and_identity()
        disk_cache()
        many_cells()
        whole_columns()
    print(f"1..{len(results)}")
    for i, (ok, label, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {label}")
        if not ok:
            for line in str(detail).strip().splitlines()[-6:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
