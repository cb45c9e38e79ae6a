#!/usr/bin/python3
"""Beyond one machine (docs/cluster.md): every node mounts the same source and a
dask.distributed cluster reads through its nodes' mounts.

Two mounts of one fixture stand for two nodes, each with its own disk cache (-o cache_dir) and
its own thread count (-o threads), both mounted through contrib/python/zarrmount.py. A
LocalCluster of two worker processes (one thread each) stands for the cluster: each worker is
given its node's mount as its working directory (client.run), and every process reads the one
path /proc/self/cwd/VIEW/X, which leads each to its own node's mount, as /mnt/atlas/VIEW/X
does on each node of a real cluster. Over a full view and a subsample, X in several chunks:

- every file of the view is byte for byte the same through both mounts;
- column sums and means of X and of obsm/X_pca, made with dask.array.from_zarr on worker 1
  alone, on worker 2 alone and spread over both, are equal to each other and to h5py's
  reading of the source's rows (the view's cells, obs/cellucid_original_position);
- each mount's stats.json shows that its worker read through it.

The cluster is shut down and both mounts unmounted in every outcome (run_mount_test.sh
unmounts whatever is left). Skipped, saying why, where python3-distributed is not installed.
Prints TAP.
"""
import logging
import os
import sys
import tempfile
import traceback

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
PARENT = os.environ.get("ZM_MOUNT_PARENT") or tempfile.mkdtemp(prefix="zm-mounts-")
SOURCE = os.path.join(ROOT, "fixtures/sources/h5ad/x-dense.h5ad")
# Small chunks: X (60 x 40 float32) and obsm/X_pca in several chunks each.
CHUNK_SIZE = "1K"
VIEWS = ("full", "uniform/seed0/k=25")
sys.path.insert(0, os.path.join(ROOT, "contrib", "python"))
os.environ["ZARRMOUNT"] = os.path.abspath(BINARY)

try:
    import distributed
except ImportError as error:
    print(f"1..0 # SKIP python3-distributed is not installed ({error})")
    sys.exit(0)

import dask.array as da  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402

import zarrmount  # noqa: E402

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return bool(ok)


# The one path every node reads a view by: on a real cluster the mount point, the same on each
# node (/mnt/atlas); here, with two "nodes" on one machine, /proc/self/cwd, which each process
# resolves to its own working directory, its node's mount (set_node_mount).
SHARED = "/proc/self/cwd"


def set_node_mount(path):
    """Run on a worker (and the client): its node's mount, where SHARED leads."""
    os.chdir(path)
    return os.getpid()


def node_mount():
    return os.path.realpath(SHARED)


def files_of(top):
    """{relative path: bytes} of every file under top."""
    out = {}
    for directory, _, files in os.walk(top):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, top)] = f.read()
    return out


def expressions(view, tag="shared"):
    """Column sums and means of X and obsm/X_pca of a view, as dask arrays read by the shared
    path: each process reads them through its node's mount. Graphs of another tag share no
    keys: a worker cannot be handed chunks another worker still holds from an earlier compute."""
    X = da.from_zarr(f"{SHARED}/{view}/X", name=f"{tag}-X-{view}")
    pca = da.from_zarr(f"{SHARED}/{view}/obsm/X_pca", name=f"{tag}-X_pca-{view}")
    return X, pca, [X.sum(axis=0), X.mean(axis=0), pca.sum(axis=0), pca.mean(axis=0),
                    (X.astype("float64") ** 2).sum()]


def reference(view, mount):
    """The same numbers from h5py's reading of the source's rows of the view's cells."""
    positions = np.asarray(
        da.from_zarr(os.path.join(mount, view, "obs", "cellucid_original_position")).compute(),
        dtype=np.int64)
    with h5py.File(SOURCE, "r") as f:
        X = f["X"][:][positions]
        pca = f["obsm/X_pca"][:][positions]
    return positions, [X.sum(axis=0), X.mean(axis=0), pca.sum(axis=0), pca.mean(axis=0),
                       (X.astype("float64") ** 2).sum()]


def close(a, b):
    return all(np.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(a, b)) and len(a) == len(b)


def view_reads(m, view):
    entry = m.stats()["views"].get(view, {})
    return entry.get("reads", 0)


def run(client, mounts):
    workers = sorted(client.scheduler_info()["workers"])
    check("cluster: two worker processes of one thread each",
          len(workers) == 2 and all(w["nthreads"] == 1 for w in client.scheduler_info()["workers"].values()),
          client.scheduler_info()["workers"])
    pids = {}
    for worker, m in zip(workers, mounts):
        pids.update(client.run(set_node_mount, str(m.path), workers=[worker]))
    # The client is on a node too (the first): it reads the arrays' metadata there.
    set_node_mount(str(mounts[0].path))
    told = client.run(node_mount)
    check("cluster: each worker reads through its own mount",
          [told[w] for w in workers] == [str(m.path) for m in mounts] and len(set(pids.values())) == 2, told)
    for view in VIEWS:
        X, pca, exprs = expressions(view)
        check(f"{view}: X is read in {X.numblocks[0]} chunks, obsm/X_pca in {pca.numblocks[0]}",
              X.numblocks[0] > 1 and (pca.numblocks[0] > 1 or view != "full"), (X.numblocks, pca.numblocks))
        positions, want = reference(view, str(mounts[0].path))
        got = []
        for index, worker in enumerate(workers):
            # Pinned to one worker: every chunk read through that worker's mount (the first
            # reads of these files there: no kernel cache serves them).
            before = [view_reads(m, view) for m in mounts]
            own = expressions(view, f"worker{index + 1}")[2]
            got.append(client.gather(client.compute(own, workers=[worker], allow_other_workers=False)))
            after = [view_reads(m, view) for m in mounts]
            check(f"{view}: computed on worker {index + 1} alone, read through mount {index + 1} only",
                  after[index] > before[index] and after[1 - index] == before[1 - index], (before, after))
        spread = client.gather(client.compute(exprs))
        check(f"{view}: worker 1's sums and means equal worker 2's",
              all(np.array_equal(a, b) for a, b in zip(got[0], got[1])), (got[0][0][:4], got[1][0][:4]))
        check(f"{view}: ... and the cluster's spread over both", close(spread, got[0]), (spread[0][:4], got[0][0][:4]))
        check(f"{view}: ... and h5py's reading of the source's rows ({len(positions)} cells)",
              close(got[0], want) and len(positions) == X.shape[0], (got[0][0][:4], want[0][:4]))
        # Last, as it reads every file (the kernel then serves them itself).
        one, two = (files_of(m.path / view) for m in mounts)
        check(f"{view}: every file byte for byte the same through both mounts ({len(one)} files)",
              one == two and len(one) > 10 and any(k.startswith("X/") and k != "X/.zarray" for k in one),
              sorted(set(one) ^ set(two))[:5] or [k for k in one if one[k] != two.get(k)][:5])


def main():
    mounts = []
    cluster = client = None
    here = os.getcwd()
    try:
        for index, threads in enumerate((1, 2)):
            point = tempfile.mkdtemp(prefix=f"zm-node{index + 1}-", dir=PARENT)
            cache = os.path.join(PARENT, f"cache-node{index + 1}")
            mounts.append(zarrmount.mount(SOURCE, point, cache_dir=cache, threads=threads,
                                          chunk_size=CHUNK_SIZE))
        infos = [m.info()["options"] for m in mounts]
        daemons = []
        for m in mounts:
            with open(f"/proc/{m._state.pid}/cmdline", "rb") as f:
                daemons.append(f.read().split(b"\0"))
        check("mounts: one source, two nodes: their daemons run with their own threads and cache_dir",
              all(f"threads={t}".encode() in d and f"cache_dir={PARENT}/cache-node{i + 1}".encode() in d
                  for i, (t, d) in enumerate(zip((1, 2), daemons))), daemons)
        check("mounts: ... and the same chunk size and codec", infos[0] == infos[1], infos)
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                           dashboard_address=None, silence_logs=logging.ERROR)
        client = distributed.Client(cluster)
        run(client, mounts)
        caches = [sorted(files_of(os.path.join(PARENT, f"cache-node{i + 1}"))) for i in range(2)]
        check("mounts: each node kept its walked chunks in its own disk cache",
              all(caches) and caches[0] == caches[1], caches)
    except Exception:  # noqa: BLE001
        check("cluster", False, traceback.format_exc(limit=6))
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        os.chdir(here)
        for m in mounts:
            m.unmount()
            os.rmdir(m.path)
    check("mounts: both unmounted, the cluster shut down",
          not any(zarrmount.is_mounted(m.path) for m in mounts) and (cluster is None or cluster.status.name == "closed"),
          cluster and cluster.status)
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-8:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
