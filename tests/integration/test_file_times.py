#!/usr/bin/python3
"""File times (docs/mount.md, "File times"): every path's atime, mtime and
ctime are derived from what makes its bytes (the source's content, the
options that change bytes, the store format version) and its path, not
taken from the source's mtime, so that an HTTP server on the mount gives
validators (ETag, Last-Modified) that change when the bytes do.

- two mounts of the same source and options give every path the same times,
  atime, mtime and ctime alike, between 2001-01-01 and 2020-12-31;
- another chunk_size, codec or layout gives every path another time;
- a copy of the source at another path with its mtime kept (cp -p) gives
  the same times; the copy touched, or a byte added with its mtime put
  back, gives others; the same for a directory store (../shared/data's
  pbmc68k_reduced.zarr) copied, then one of its files touched;
  .zarrmount/info.json's time is its own bytes';
  stats.json's is now;
- nginx (Debian's, as a child process with its own prefix and config in a
  temporary directory, on a free port of 127.0.0.1; killed in every outcome)
  serving the mount: after a remount with another chunk_size, a conditional
  GET of a .zarray and of a chunk with the first mount's ETag
  (If-None-Match) or Last-Modified (If-Modified-Since) is answered 200 with
  the new bytes, and after a remount with the first options 304.

Every mount is unmounted in every outcome (run by run_mount_test.sh, which
also unmounts whatever a crash leaves). No step has a time limit. Prints TAP.
"""
import calendar
import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
# Mounts go through the Python helper (contrib/python/zarrmount.py), foreground.
sys.path.insert(0, os.path.join(ROOT, "contrib", "python"))
import zarrmount  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_child  # noqa: E402
from nginx_child import NGINX  # noqa: E402
SOURCE = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
PARENT = os.environ.get("ZM_MOUNT_PARENT")
SHARED = os.environ.get("ZM_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
# A directory store (its identity: the files' total size, the newest mtime, the manifest's digest).
STORE = os.path.join(SHARED, "zarr", "pbmc68k_reduced.zarr")
# A .zarray and a chunk whose bytes another chunk_size changes (60 float64 values: 8 rows a
# chunk at 64 bytes, 9 at 72). The .zarray keeps its size ("chunks": [8] or [9]): with the
# source's mtime as every file's, nginx's ETag ("<mtime>-<size>") would not change (issue 24).
ZARRAY = "full/obs/float64/.zarray"
CHUNK = "full/obs/float64/0"
TIME_LOW = calendar.timegm((2001, 1, 1, 0, 0, 0)) * 10**9
TIME_HIGH = calendar.timegm((2021, 1, 1, 0, 0, 0)) * 10**9
results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return bool(ok)


@contextlib.contextmanager
def mounted(source, *options, point=None):
    """Mounts source (a foreground daemon, through the Python helper) at point, or a new
    directory; always unmounts. A refused mount raises zarrmount.MountError (a RuntimeError)
    with the daemon's reason."""
    with zarrmount.mount(source, point, parent=PARENT, binary=os.path.abspath(BINARY),
                         foreground=True, **zarrmount.options_from(("cache_dir=none",) + options)) as mount:
        yield str(mount.path)


def times_of(point):
    """{path: (atime_ns, mtime_ns, ctime_ns)} of the root, .zarrmount/info.json and all of full/."""
    out = {}
    for relative in ["", ".zarrmount", ".zarrmount/info.json", "full"]:
        st = os.lstat(os.path.join(point, relative))
        out[relative] = (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)
    for directory, names, files in os.walk(os.path.join(point, "full")):
        for name in names + files:
            full = os.path.join(directory, name)
            st = os.lstat(full)
            out[os.path.relpath(full, point)] = (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)
    return out


def mount_times(source, *options):
    with mounted(source, *options) as point:
        return times_of(point)


def store_times(source):
    """{path: mtime_ns} of a directory store's mount: the root, full/ and full/obs/'s entries,
    and full/X/.zarray (no chunk)."""
    with mounted(source) as point:
        paths = ["", "full", "full/X", "full/X/.zarray", "full/obs"]
        paths += [os.path.join("full/obs", name) for name in sorted(os.listdir(os.path.join(point, "full/obs")))]
        return {p: os.lstat(os.path.join(point, p)).st_mtime_ns for p in paths}


def check_store(work):
    if not os.path.isdir(STORE):
        check(f"a directory store's copy # SKIP no {STORE}", True)
        return
    first = store_times(STORE)
    copy = os.path.join(work, "copy.zarr")
    shutil.copytree(STORE, copy, copy_function=shutil.copy2)
    copied = store_times(copy)
    check("a directory store copied elsewhere (mtimes kept): the same times",
          len(first) > 5 and copied == first, [p for p in first if copied.get(p) != first[p]][:5])
    chunk = next(os.path.join(d, f) for d, _, files in sorted(os.walk(os.path.join(copy, "obs")))
                 for f in sorted(files) if not f.startswith("."))
    st = os.stat(chunk)
    os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    touched = store_times(copy)
    same = [p for p in first if touched.get(p) == first[p]]
    check("the copy with one chunk file touched: every path has another time", not same, same[:5])


def all_differ(a, b):
    """The paths both have whose mtime is the same in both (none, if all differ)."""
    return [p for p in a if p in b and a[p][1] == b[p][1]]


def check_times(work):
    options = ("chunk_size=64",)
    first = mount_times(SOURCE, *options)
    check("a mount's paths have times (the root, info.json, full/ and all it holds)",
          len(first) > 100 and ZARRAY in first and CHUNK in first, len(first))
    check("atime, mtime and ctime are one time",
          all(a == m == c for a, m, c in first.values()),
          [p for p, t in first.items() if len(set(t)) != 1][:5])
    check("every time is between 2001-01-01 and 2020-12-31 (never in the future)",
          all(TIME_LOW <= m < TIME_HIGH for _, m, _ in first.values()),
          [(p, m) for p, (_, m, _) in first.items() if not TIME_LOW <= m < TIME_HIGH][:5])
    source_mtime = os.stat(SOURCE).st_mtime_ns
    check("no path has the source's mtime", all(m != source_mtime for _, m, _ in first.values()))
    check("paths have times of their own (distinct)",
          len({m for _, m, _ in first.values()}) == len(first))
    again = mount_times(SOURCE, *options)
    check("a second mount of the same source and options: the same times", again == first,
          [p for p in first if again.get(p) != first[p]][:5])
    for label, other in [("another chunk_size", ("chunk_size=4096",)),
                         ("another codec", ("chunk_size=64", "codec=none")),
                         ("another blosc compressor", ("chunk_size=64", "codec=blosc:lz4")),
                         ("layout=anndata", ("chunk_size=64", "layout=anndata")),
                         ("index_dtype=int32", ("chunk_size=64", "index_dtype=int32"))]:
        try:
            times = mount_times(SOURCE, *other)
        except RuntimeError as error:
            check(f"{label}: every path has another time", False, error)
            continue
        same = all_differ(first, times)
        check(f"{label}: every path has another time", not same and len(times) > 100, same[:5])

    # Content, not place: a copy at another path, its mtime kept.
    copy = os.path.join(work, "copy.h5ad")
    shutil.copy2(SOURCE, copy)
    copied = mount_times(copy, *options)
    info = ".zarrmount/info.json"
    same_paths = {p: t for p, t in copied.items() if p != info}
    check("a copy of the source at another path (mtime kept): the same times",
          same_paths == {p: t for p, t in first.items() if p != info},
          [p for p in same_paths if first.get(p) != same_paths[p]][:5])
    check("info.json (which names the source's path and inode) has its own bytes' time",
          copied[info] != first[info])
    st = os.stat(copy)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    touched = mount_times(copy, *options)
    same = all_differ(first, touched)
    check("the copy touched (mtime +1 s): every path has another time", not same, same[:5])
    with open(copy, "ab") as f:
        f.write(b"\0")
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    grown = mount_times(copy, *options)
    same = all_differ(first, grown)
    check("the copy a byte longer, its mtime put back: every path has another time", not same, same[:5])

    before = time.time_ns() - 10**9
    with mounted(SOURCE, *options) as point:
        stats = os.stat(os.path.join(point, ".zarrmount/stats.json"))
    check("stats.json (a snapshot at every lookup) has the time it was taken",
          stats.st_mtime_ns >= before, (stats.st_mtime_ns, before))


@contextlib.contextmanager
def nginx_serving(root, prefix):
    """Debian's nginx (nginx_child.py) serving root on a free port of 127.0.0.1 until the block
    ends. Yields the port."""
    port, = nginx_child.free_ports(1)
    conf = f"""daemon off;
master_process off;
worker_processes 1;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/temp/body;
    proxy_temp_path {prefix}/temp/proxy;
    fastcgi_temp_path {prefix}/temp/fastcgi;
    uwsgi_temp_path {prefix}/temp/uwsgi;
    scgi_temp_path {prefix}/temp/scgi;
    types {{ application/octet-stream bin; }}
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ }}
    }}
}}
"""
    with nginx_child.running(prefix, conf, [port]):
        yield port


def get(port, path, headers=None):
    """(status, {header: value} lowercased, body) of a GET."""
    return nginx_child.request(port, "GET", "/" + path, headers)


def check_nginx(work):
    if not os.path.exists(NGINX):
        check("nginx is installed (contrib/debian-packages.txt)", False, NGINX)
        return
    point = tempfile.mkdtemp(prefix="zm-times-nginx-", dir=PARENT)
    try:
        with nginx_serving(point, os.path.join(work, "nginx")) as port:
            first = {}
            with mounted(SOURCE, "chunk_size=64", point=point):
                for path in [ZARRAY, CHUNK]:
                    status, headers, body = get(port, path)
                    st = os.stat(os.path.join(point, path))
                    check(f"nginx: GET {path}: 200, its bytes", status == 200 and body == open(os.path.join(point, path), "rb").read(),
                          status)
                    check(f"nginx: {path}: ETag is the derived mtime and the size",
                          headers.get("etag") == f'"{st.st_mtime_ns // 10**9:x}-{st.st_size:x}"', headers.get("etag"))
                    first[path] = (headers.get("etag"), headers.get("last-modified"), body)
            with mounted(SOURCE, "chunk_size=72", point=point):
                check(f"nginx: another chunk_size: {ZARRAY} has other bytes of the same size",
                      os.stat(os.path.join(point, ZARRAY)).st_size == len(first[ZARRAY][2]) and
                      open(os.path.join(point, ZARRAY), "rb").read() != first[ZARRAY][2])
                for path in [ZARRAY, CHUNK]:
                    etag, modified, body = first[path]
                    status, headers, new_body = get(port, path, {"If-None-Match": etag})
                    check(f"nginx: another chunk_size: {path}: other bytes, another ETag and Last-Modified",
                          new_body != body and headers.get("etag") != etag and headers.get("last-modified") != modified,
                          (headers.get("etag"), etag, headers.get("last-modified"), modified))
                    check(f"nginx: another chunk_size: {path}: If-None-Match the first ETag: 200 with the new bytes",
                          status == 200 and new_body == open(os.path.join(point, path), "rb").read(), status)
                    status, _, since_body = get(port, path, {"If-Modified-Since": modified})
                    check(f"nginx: another chunk_size: {path}: If-Modified-Since the first Last-Modified: 200",
                          status == 200 and since_body == new_body, status)
            with mounted(SOURCE, "chunk_size=64", point=point):
                for path in [ZARRAY, CHUNK]:
                    etag, modified, body = first[path]
                    status, headers, _ = get(port, path, {"If-None-Match": etag})
                    check(f"nginx: the first options again: {path}: If-None-Match the first ETag: 304",
                          status == 304 and headers.get("etag") == etag, (status, headers.get("etag"), etag))
                    status, _, _ = get(port, path, {"If-Modified-Since": modified})
                    check(f"nginx: the first options again: {path}: If-Modified-Since: 304", status == 304, status)
                    status, _, again = get(port, path)
                    check(f"nginx: the first options again: {path}: the first bytes", status == 200 and again == body)
    finally:
        os.rmdir(point)


def main():
    work = tempfile.mkdtemp(prefix="zm-times-work-", dir=PARENT)
    try:
        for step in [check_times, check_store, check_nginx]:
            try:
                step(work)
            except Exception:
                check(f"{step.__name__} ran", False, traceback.format_exc())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-8:]:
                print(f"# {line}")
    return 0 if results and all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
