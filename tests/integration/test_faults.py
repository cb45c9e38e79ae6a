#!/usr/bin/python3
"""Faults a shared mount must survive, injected into a live daemon:

- a corrupted source chunk (flipped bytes under fletcher32, undecodable
  deflate, LZF, Zstandard and Blosc streams): EIO for the files that need
  it, a log line naming the element and the chunk, every other file still
  reads, byte for byte what a mount of the intact file serves; a string
  that is not UTF-8: EIO naming the element;
- the source modified in place, truncated, replaced or deleted while
  mounted: reads give EIO with a log line, never a byte of the new file
  (also while 8 readers walk during the change); the daemon stays up; a
  remount serves the new file, or refuses a broken one in one line;
- the disk cache full, unwritable, or corrupted (flipped, truncated,
  emptied, garbage entries): the mount serves the right bytes from memory
  and the source and says so once in the log;
- SIGKILL of the daemon mid-walk: ENOTCONN, `fusermount3 -u` clears it, a
  new mount on the same disk cache serves the right bytes, and a half
  entry a crash left is never used;
- SIGTERM and `fusermount3 -u` while 16 readers are active: clean exit, no
  hang, no mount left.

Every mount is unmounted in every outcome (and run_mount_test.sh clears its
directory). Prints TAP. Needs ZM_BINARY and ZM_SOURCE_ROOT.
"""
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import h5py
import xxhash

ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
BINARY = os.environ.get("ZM_BINARY", "build/test/zarrmount")
PARENT = os.environ.get("ZM_MOUNT_PARENT")
FIXTURES = os.path.join(ROOT, "fixtures", "sources")
# Bounds on waiting for something that must happen (not speed targets:
# sanitizer builds on a busy machine are slow).
WAIT = 120
results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return ok


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


def error_name(error):
    return errno.errorcode.get(error.errno, str(error.errno))


class Mount:
    """A foreground daemon on a new mount point, its log in a file."""

    def __init__(self, source, *options, point=None):
        self.point = point or tempfile.mkdtemp(prefix="zm-fault-", dir=PARENT)
        self.log_path = self.point + ".log"
        args = [BINARY, source, self.point, "-f"]
        for option in options:
            args += ["-o", option]
        self.log_file = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self.log_file, stderr=self.log_file)
        deadline = time.monotonic() + WAIT
        self.mounted = False
        while time.monotonic() < deadline:
            if is_mounted(self.point):
                self.mounted = True
                break
            if self.process.poll() is not None:
                break
            time.sleep(0.05)

    def path(self, *parts):
        return os.path.join(self.point, *parts)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self):
        return self.process.poll() is None and is_mounted(self.point)

    def stats(self):
        with open(self.path(".zarrmount", "stats.json")) as f:
            return json.load(f)

    def close(self):
        if is_mounted(self.point):
            subprocess.run(["fusermount3", "-u", self.point], capture_output=True)
        try:
            self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if is_mounted(self.point):
            subprocess.run(["fusermount3", "-u", "-z", self.point], capture_output=True)
        self.log_file.close()
        with contextlib.suppress(OSError):
            os.rmdir(self.point)


@contextlib.contextmanager
def mounted(source, *options):
    mount = Mount(source, *options)
    try:
        if not mount.mounted:
            raise RuntimeError(f"mount of {source} failed: {mount.log().strip()}")
        yield mount
    finally:
        mount.close()


def files_of(root):
    out = []
    for directory, _, names in os.walk(root):
        out += [os.path.join(directory, name) for name in names]
    return sorted(out)


def read_whole(path):
    with open(path, "rb") as f:
        return f.read()


def digests(root):
    """xxh3 of every file under root by relative path (errors as 'E<name>')."""
    out = {}
    for path in files_of(root):
        try:
            out[os.path.relpath(path, root)] = xxhash.xxh3_64_hexdigest(read_whole(path))
        except OSError as error:
            out[os.path.relpath(path, root)] = "E" + error_name(error)
    return out


def names_of(root):
    """Relative paths of every file under root, listed without reading."""
    return [os.path.relpath(p, root) for p in files_of(root)]


def reference(source, views, *options):
    with mounted(source, "cache_dir=none", *options) as m:
        return {view: digests(m.path(view)) for view in views}


def run(name, body):
    try:
        body()
    except Exception:  # noqa: BLE001
        check(name, False, traceback.format_exc(limit=4))


# ---- Corrupted source chunks ---------------------------------------------------------------

def chunk_of(path, dataset, index):
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
        return info.byte_offset, info.size


def corrupt(path, dataset, index, how):
    offset, size = chunk_of(path, dataset, index)
    with open(path, "r+b") as f:
        if how == "flip":
            f.seek(offset + size // 3)
            byte = f.read(1)
            f.seek(offset + size // 3)
            f.write(bytes([byte[0] ^ 0x5A]))
        else:  # undecodable: the whole stream overwritten
            f.seek(offset)
            f.write(b"\xff" * size)


CORRUPTIONS = [
    ("filters/fletcher32.h5ad", "flip", "fletcher32"),
    ("filters/shuffle-gzip6-fletcher32.h5ad", "flip", "fletcher32"),
    ("filters/gzip1.h5ad", "fill", "deflate"),
    ("filters/lzf.h5ad", "fill", "lzf"),
    ("filters/zstd.h5ad", "fill", "zstd"),
    ("filters/blosc-lz4-shuffle.h5ad", "fill", "blosc"),
]
# Small output chunks, so that X/data of file/ is many files and only some
# of them need the damaged source chunk.
SMALL = "chunk_size=64"


def corrupted_chunks(scratch):
    for name, how, codec in CORRUPTIONS:
        label = f"corrupt chunk ({os.path.basename(name)}, {how})"
        source = os.path.join(FIXTURES, name)
        copy = os.path.join(scratch, os.path.basename(name))
        shutil.copy(source, copy)
        corrupt(copy, "X/data", 1, how)
        good = reference(source, ["file", "full"], SMALL)
        with mounted(copy, "cache_dir=none", SMALL) as m:
            got = {view: digests(m.path(view)) for view in ("file", "full")}
            alive = m.alive()
            log = m.log()
        for view in ("file", "full"):
            failed = sorted(p for p, d in got[view].items() if d.startswith("E"))
            wrong = sorted(p for p, d in got[view].items() if not d.startswith("E") and d != good[view].get(p))
            check(f"{label}: {view}/ has the same files", sorted(got[view]) == sorted(good[view]))
            check(f"{label}: {view}/ files that need the chunk give EIO", failed and
                  all(got[view][p] == "EEIO" for p in failed), str(failed[:5]))
            check(f"{label}: {view}/ only X/ files fail", all(p.startswith("X/") for p in failed), str(failed[:5]))
            check(f"{label}: {view}/ every other file reads, the intact file's bytes", not wrong, str(wrong[:5]))
        if True:
            file_x = [p for p in got["file"] if p.startswith("X/data/") and not p.endswith((".zarray", ".zattrs"))]
            ok_x = [p for p in file_x if not got["file"][p].startswith("E")]
            check(f"{label}: file/ X/data chunks clear of the damage still read", ok_x, f"{len(ok_x)} of {len(file_x)}")
        lines = [line for line in log.splitlines() if "/X/data" in line and "chunk 1" in line]
        check(f"{label}: the log names element and chunk", lines and codec in lines[0], log[-600:])
        check(f"{label}: the daemon stayed up", alive)


def bad_strings(scratch):
    """A string of the obs index that is not UTF-8 (h5py writes what it is
    given): EIO for the files that hold it, naming the element; the rest
    reads."""
    source = os.path.join(FIXTURES, "h5ad/full-csr.h5ad")
    copy = os.path.join(scratch, "bad-utf8.h5ad")
    shutil.copy(source, copy)
    with h5py.File(copy, "r+") as f:
        name = f["obs"].attrs["_index"]
        values = f["obs"][name][...]
        values[3] = b"ab\xffcd"
        del f["obs"][name]
        f["obs"].create_dataset(name, data=values, dtype=h5py.string_dtype("utf-8"))
    good = reference(source, ["file", "full"])
    with mounted(copy, "cache_dir=none") as m:
        got = {view: digests(m.path(view)) for view in ("file", "full")}
        log = m.log()
    for view in ("file", "full"):
        failed = sorted(p for p, d in got[view].items() if d.startswith("E"))
        check(f"a string not UTF-8: {view}/obs/_index chunks give EIO",
              failed and all(p.startswith("obs/_index/") and got[view][p] == "EEIO" for p in failed), str(failed))
        # The root .zattrs records the source's size, which h5py's rewrite
        # changed: it (and .zmetadata, which holds it) must differ in that only.
        wrong = [p for p, d in got[view].items() if not d.startswith("E") and d != good[view].get(p)
                 and p not in (".zattrs", ".zmetadata")]
        check(f"a string not UTF-8: the rest of {view}/ reads the intact file's bytes", not wrong, str(wrong[:5]))
        with mounted(source, "cache_dir=none") as intact, mounted(copy, "cache_dir=none") as damaged:
            for name in (".zattrs", ".zmetadata"):
                a = json.loads(read_whole(intact.path(view, name)))
                b = json.loads(read_whole(damaged.path(view, name)))
                record = (lambda doc: doc["metadata"][".zattrs"]) if name == ".zmetadata" else (lambda doc: doc)
                record(a)["zarrmount"]["source"].pop("bytes")
                record(b)["zarrmount"]["source"].pop("bytes")
                check(f"a string not UTF-8: {view}/{name} differs only in the source's size", a == b)
    check("a string not UTF-8: the log names the element and the item",
          "/obs/_index: vlen-utf8: item" in log and "not valid UTF-8" in log, log[-400:])


# ---- The source changed while mounted ------------------------------------------------------

def change(copy, how, new):
    if how == "modified":      # new bytes in place: same inode
        with open(copy, "r+b") as f:
            f.write(read_whole(new))
            f.truncate()
    elif how == "truncated":
        os.truncate(copy, os.path.getsize(copy) // 2)
    elif how == "replaced":    # a new file renamed over it
        shutil.copy(new, copy + ".new")
        os.replace(copy + ".new", copy)
    elif how == "deleted":
        os.unlink(copy)


def source_changes(scratch):
    old = os.path.join(FIXTURES, "h5ad/full-csr.h5ad")
    new = os.path.join(FIXTURES, "legacy/anndata-0.7-csr.h5ad")
    views = ["file", "full", "uniform/seed2/k=30"]
    old_ref = reference(old, views, SMALL)
    new_ref = reference(new, views, SMALL)
    for how in ("modified", "truncated", "replaced", "deleted"):
        label = f"source {how} while mounted"
        copy = os.path.join(scratch, f"changing-{how}.h5ad")
        shutil.copy(old, copy)
        with mounted(copy, "cache_dir=none", SMALL) as m:
            before = digests(m.path("file"))
            check(f"{label}: before, the mount serves the file", before == old_ref["file"])
            change(copy, how, new)
            # The daemon's watcher drops what the kernel keeps; until then
            # a read may be served from pages of the old file.
            probe = m.path("file", "obs", ".zattrs")
            deadline = time.monotonic() + WAIT
            outcome = None
            while time.monotonic() < deadline:
                try:
                    read_whole(probe)
                except OSError as error:
                    outcome = error_name(error)
                    break
                time.sleep(0.1)
            check(f"{label}: reads give EIO", outcome == "EIO", str(outcome))
            after = {view: digests(m.path(view)) for view in views}
            mixed = [(v, p) for v in views for p, d in after[v].items()
                     if not d.startswith("E") and d != old_ref[v].get(p)]
            served = [(v, p) for v in views for p, d in after[v].items() if not d.startswith("E")]
            check(f"{label}: no byte of the new file is served", not mixed, str(mixed[:5]))
            check(f"{label}: every file read after the change is EIO", not served, str(served[:5]))
            with contextlib.suppress(OSError):
                os.stat(m.path("uniform", "seed9", "k=12"))
            log = m.log()
            said = "changed since it was mounted" in log or "the source is gone" in log
            check(f"{label}: the log says why (remount)", said and "remount" in log, log[-400:])
            check(f"{label}: the daemon stays up", m.alive())
        if how in ("modified", "replaced"):
            with mounted(copy, "cache_dir=none", SMALL) as m:
                again = {view: digests(m.path(view)) for view in views}
            check(f"{label}: a remount serves the new file", again == new_ref)
        else:
            point = tempfile.mkdtemp(prefix="zm-fault-", dir=PARENT)
            try:
                done = subprocess.run([BINARY, copy, point, "-f", "-o", "cache_dir=none"], capture_output=True,
                                      text=True, timeout=WAIT)
            finally:
                if is_mounted(point):
                    subprocess.run(["fusermount3", "-u", point], capture_output=True)
                os.rmdir(point)
            lines = done.stderr.strip().splitlines()
            check(f"{label}: a remount is refused in one line naming the file",
                  done.returncode != 0 and len(lines) == 1 and os.path.basename(copy) in lines[0], done.stderr)


def change_during_walks(scratch):
    """8 readers walk full/ and a subsample over and over while the source
    is rewritten in place: whatever they read is the old file's bytes or
    EIO, never a mix."""
    old = os.path.join(FIXTURES, "h5ad/full-csr.h5ad")
    # The new file: the same layout with other values in X, so that chunks
    # read after the change decode without complaint (only the daemon's
    # own check of the source can tell).
    new = os.path.join(scratch, "new-values.h5ad")
    shutil.copy(old, new)
    with h5py.File(new, "r+") as f:
        f["X/data"][...] = f["X/data"][...] + 1
    views = ["full", "uniform/seed4/k=25"]
    old_ref = reference(old, views, SMALL)
    copy = os.path.join(scratch, "changing-under-readers.h5ad")
    shutil.copy(old, copy)
    stop = threading.Event()
    tally = {"files": 0, "eio": 0, "other": [], "mixed": []}
    lock = threading.Lock()
    with mounted(copy, "cache_dir=none", SMALL, "cache_size=64K") as m:
        names = {view: names_of(m.path(view)) for view in views}

        def reader(i):
            view = views[i % len(views)]
            while not stop.is_set():
                for name in names[view][i % 3::1]:
                    try:
                        digest = xxhash.xxh3_64_hexdigest(read_whole(m.path(view, name)))
                        with lock:
                            tally["files"] += 1
                            if digest != old_ref[view][name]:
                                tally["mixed"].append(f"{view}/{name}")
                    except OSError as error:
                        with lock:
                            if error.errno == errno.EIO:
                                tally["eio"] += 1
                            else:
                                tally["other"].append(error_name(error))
                    if stop.is_set():
                        break

        threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(8)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + WAIT
        while tally["files"] < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        # The new bytes land a piece at a time while the readers read.
        data, was = read_whole(new), read_whole(copy)
        with open(copy, "r+b") as f:
            for at in range(0, len(data), 512):
                if data[at:at + 512] != was[at:at + 512]:
                    f.seek(at)
                    f.write(data[at:at + 512])
                    f.flush()
                    time.sleep(0.002)
            f.truncate(len(data))
        time.sleep(1)
        stop.set()
        for thread in threads:
            thread.join(WAIT)
        alive = m.alive()
    check("source rewritten under 8 readers: reads went on before the change", tally["files"] >= 40, str(tally["files"]))
    check("source rewritten under 8 readers: no mixed or new bytes served", not tally["mixed"], str(tally["mixed"][:5]))
    check("source rewritten under 8 readers: failures are EIO only", not tally["other"] and tally["eio"] > 0,
          f"EIO {tally['eio']}, other {tally['other'][:5]}")
    check("source rewritten under 8 readers: no reader hung, the daemon stayed up",
          not any(t.is_alive() for t in threads) and alive)


# ---- The disk cache ---------------------------------------------------------------------------

@contextlib.contextmanager
def tmpfs(path, *options):
    """A tmpfs at path, its root 0700 (a cache directory must be private to
    the daemon's user: tmpfs makes its root 1777 by default)."""
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("mode=0700",) + options), "tmpfs", path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"mount tmpfs: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", path], capture_output=True)


def log_lines(log, text):
    return [line for line in log.splitlines() if text in line]


def disk_faults(scratch):
    source = os.path.join(FIXTURES, "h5ad/full-csr.h5ad")
    view = "uniform/seed3/k=40"
    good = reference(source, [view, "full"], SMALL)[view]
    # Full: a 24 KiB file system under a 64 MiB bound.
    with tmpfs(os.path.join(scratch, "tiny"), "size=24k") as tiny:
        with mounted(source, f"cache_dir={tiny}", "cache_max=64M", SMALL) as m:
            got = digests(m.path(view))
            got_full = digests(m.path("full"))
            writes = m.stats()["diskCache"]["writes"]
            log = m.log()
        check("disk cache full: the mount serves the right bytes", got == good)
        check("disk cache full: ... for every view", not [d for d in got_full.values() if d.startswith("E")])
        said = log_lines(log, "disk cache could not keep")
        check("disk cache full: said once in the log", len(said) == 1 and "No space left" in said[0], log[-500:])
        check("disk cache full: what fitted was kept", writes > 0, str(writes))
    # Unwritable: a read-only file system, and a path through a file.
    with tmpfs(os.path.join(scratch, "ro"), "ro", "size=1m") as ro:
        for label, directory in (("read-only", ro), ("through a file", os.path.join(scratch, "a-file", "cache"))):
            if label == "through a file":
                with open(os.path.join(scratch, "a-file"), "w") as f:
                    f.write("not a directory")
            with mounted(source, f"cache_dir={directory}", SMALL) as m:
                got = digests(m.path(view))
                stats = m.stats()
                log = m.log()
            check(f"disk cache unwritable ({label}): the mount serves the right bytes", got == good)
            check(f"disk cache unwritable ({label}): said once in the log, then off",
                  len(log_lines(log, "disk cache")) == 1 and stats["diskCache"] is None, log[-400:])
    # Corrupted: every entry damaged one of four ways, and garbage beside them.
    cache = os.path.join(scratch, "cache")
    with mounted(source, f"cache_dir={cache}", SMALL) as m:
        digests(m.path(view))
    entries = sorted(p for p in files_of(cache) if p.endswith(".entry"))
    check("disk cache corrupted: entries were filed", len(entries) >= 8, str(len(entries)))
    # Each entry is a header and a payload: every other entry has its header
    # damaged, the others their payload (what the kernel would serve).
    payloads = {os.path.basename(p)[:16]: p for p in files_of(cache) if p.endswith(".data")}
    for i, entry in enumerate(entries):
        path = entry if (i // 4) % 2 == 0 else payloads.get(os.path.basename(entry)[:16], entry)
        size = os.path.getsize(path)
        if i % 4 == 0 and size > 0:
            with open(path, "r+b") as f:
                f.seek(size // 2)
                b = f.read(1)
                f.seek(size // 2)
                f.write(bytes([b[0] ^ 1]))
        elif i % 4 == 1 or (i % 4 == 0 and size == 0):
            os.truncate(path, size // 2) if size > 1 else open(path, "ab").write(b"x")
        elif i % 4 == 2:
            os.truncate(path, 0) if size > 0 else open(path, "ab").write(b"x")
        else:
            with open(path, "wb") as f:
                f.write(os.urandom(max(size, 1)))
    with open(os.path.join(os.path.dirname(entries[0]), "garbage.entry"), "wb") as f:
        f.write(b"ZMCACHE\0" + os.urandom(100))
    with mounted(source, f"cache_dir={cache}", SMALL) as m:
        got = digests(m.path(view))
        damaged = m.stats()["diskCache"]["damaged"]
        log = m.log()
    check("disk cache corrupted: a damaged entry is never served", got == good)
    check("disk cache corrupted: every damaged entry found", damaged >= len(entries), f"{damaged} of {len(entries)}")
    check("disk cache corrupted: said once in the log", len(log_lines(log, "damaged entry")) == 1, log[-400:])
    with mounted(source, f"cache_dir={cache}", SMALL) as m:
        again = digests(m.path(view))
        stats = m.stats()["diskCache"]
    check("disk cache corrupted: rebuilt, then served from the disk", again == good and stats["hits"] >= len(entries)
          and stats["damaged"] == 0, str(stats))


# ---- Daemon killed; unmount under load -------------------------------------------------------

def readers_on(m, views, count, stop, outcomes):
    names = {view: names_of(m.path(view)) for view in views}

    def body(i):
        view = views[i % len(views)]
        reads = 0
        try:
            while not stop.is_set():
                for name in names[view][i % 5:]:
                    read_whole(m.path(view, name))
                    reads += 1
                    if stop.is_set():
                        break
            outcomes[i] = ("done", reads)
        except OSError as error:
            outcomes[i] = (error_name(error), reads)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def killed(scratch):
    source = os.path.join(FIXTURES, "h5ad/full-csr.h5ad")
    views = ["full", "uniform/seed5/k=45", "blocks/seed1/k=30"]
    good = reference(source, views, SMALL)
    cache = os.path.join(scratch, "kill-cache")
    m = Mount(source, f"cache_dir={cache}", SMALL, "cache_size=64K")
    stop = threading.Event()
    outcomes = [None] * 8
    try:
        check("SIGKILL: mounts", m.mounted, m.log())
        threads = readers_on(m, views, 8, stop, outcomes)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and m.stats()["diskCache"]["writes"] < 5:
            time.sleep(0.05)
        m.process.send_signal(signal.SIGKILL)
        m.process.wait(timeout=WAIT)
        # (stat of the mount point itself may be answered from what the
        # kernel remembers; listing it asks the daemon.)
        try:
            os.listdir(m.point)
            seen = "no error"
        except OSError as error:
            seen = error_name(error)
        check("SIGKILL mid-read: the mount point reports ENOTCONN", seen == "ENOTCONN", seen)
        stop.set()
        for thread in threads:
            thread.join(WAIT)
        check("SIGKILL mid-read: every reader got an error or finished, none hung",
              not any(t.is_alive() for t in threads), str(outcomes))
        done = subprocess.run(["fusermount3", "-u", m.point], capture_output=True, text=True, timeout=WAIT)
        check("SIGKILL: fusermount3 -u clears the mount point", done.returncode == 0 and not is_mounted(m.point),
              done.stderr)
    finally:
        stop.set()
        m.close()
    # What a crash mid-write leaves: a temporary file of a dead process and
    # an entry cut short under its real name (a file system without
    # ordered writes). Neither is ever served.
    entries = sorted(p for p in files_of(cache) if p.endswith(".entry"))
    check("SIGKILL: entries were filed before the kill", entries, str(len(entries)))
    if entries:
        directory = os.path.dirname(entries[0])
        with open(os.path.join(directory, f"tmp.{m.process.pid}.999"), "wb") as f:
            f.write(read_whole(entries[0])[:40])
        os.truncate(entries[-1], os.path.getsize(entries[-1]) - 7)
    with mounted(source, f"cache_dir={cache}", SMALL) as again:
        got = {view: digests(again.path(view)) for view in views}
        stats = again.stats()["diskCache"]
    check("SIGKILL: a new mount on the same disk cache serves the right bytes", got == good)
    check("SIGKILL: the new mount used the disk cache", stats["hits"] > 0, str(stats))
    check("SIGKILL: the half entry was found and not served", stats["damaged"] >= 1, str(stats))
    left = [p for p in files_of(cache) if os.path.basename(p).startswith(f"tmp.{m.process.pid}.")]
    check("SIGKILL: the dead daemon's temporary files are gone", not left, str(left))


def unmount_under_load(scratch, how):
    source = os.path.join(FIXTURES, "h5ad/full-csr.h5ad")
    views = ["full", "file", "uniform/seed6/k=50", "blocks/seed2/k=40"]
    m = Mount(source, "cache_dir=none", SMALL, "cache_size=64K")
    stop = threading.Event()
    outcomes = [None] * 16
    label = f"{how} while 16 readers are active"
    try:
        check(f"{label}: mounts", m.mounted, m.log())
        threads = readers_on(m, views, 16, stop, outcomes)
        time.sleep(0.5)
        check(f"{label}: the readers are reading", sum(t.is_alive() for t in threads) == 16, str(outcomes))
        if how == "SIGTERM":
            m.process.send_signal(signal.SIGTERM)
        else:
            # Busy (files open) is the kernel's answer while readers hold
            # files; the readers are told to stop, as a user would.
            done = subprocess.run(["fusermount3", "-u", m.point], capture_output=True, text=True, timeout=WAIT)
            if done.returncode != 0:
                stop.set()
                deadline = time.monotonic() + WAIT
                while done.returncode != 0 and time.monotonic() < deadline:
                    time.sleep(0.1)
                    done = subprocess.run(["fusermount3", "-u", m.point], capture_output=True, text=True,
                                          timeout=WAIT)
            check(f"{label}: fusermount3 -u succeeds", done.returncode == 0, done.stderr)
        try:
            status = m.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            status = "hung"
        stop.set()
        for thread in threads:
            thread.join(WAIT)
        check(f"{label}: the daemon exits 0, no hang", status == 0, f"{status}: {m.log()[-400:]}")
        check(f"{label}: no mount is left", not is_mounted(m.point))
        check(f"{label}: every reader finished or got an error, none hung",
              not any(t.is_alive() for t in threads) and
              all(o is not None and o[0] in ("done", "ENOTCONN", "EIO", "ECONNABORTED", "ENODEV", "ENOENT")
                  for o in outcomes), str(outcomes))
        check(f"{label}: the readers read before it", sum(o[1] for o in outcomes if o) > 16, str(outcomes))
        check(f"{label}: the log says unmounted", "unmounted" in m.log(), m.log()[-300:])
    finally:
        stop.set()
        m.close()


def main():
    scratch = tempfile.mkdtemp(prefix="zm-faults-", dir=PARENT)
    try:
        run("corrupted chunks", lambda: corrupted_chunks(scratch))
        run("strings not UTF-8", lambda: bad_strings(scratch))
        run("source changes", lambda: source_changes(scratch))
        run("source changed during walks", lambda: change_during_walks(scratch))
        run("disk cache faults", lambda: disk_faults(scratch))
        run("SIGKILL", lambda: killed(scratch))
        run("SIGTERM under load", lambda: unmount_under_load(scratch, "SIGTERM"))
        run("fusermount3 under load", lambda: unmount_under_load(scratch, "fusermount3 -u"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok and detail:
            for line in str(detail).splitlines()[:20]:
                print(f"  # {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
