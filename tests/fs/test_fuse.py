#!/usr/bin/python3
"""The FUSE daemon (src/fs/fuse.c and friends) mounted for real over the mock
tree (tests/fs/mock_tree.c): attributes, listings, reads of every size and
offset, coreutils on the mount, links, failures, EROFS for every change (from
the kernel and, after a remount rw, from our handlers), concurrent readers,
SIGTERM while reads run, fusermount3 -u, the background daemon, refused
command lines and sources, allow_other permissions and mount.fuse3's form.

Prints TAP. Needs root, /dev/fuse and fusermount3. ZM_MOCK_BINARY is the
zarrmount-mock binary (default /tmp/zarrmount-mock). Every mount is
unmounted whatever happens: each test runs under a watchdog that kills the
daemons (the kernel then fails every waiting request) and lazily unmounts,
and the end of the run unmounts anything left.
"""
import errno
import mmap
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from remount import remount_as  # noqa: E402  (tests/integration/remount.py)

BINARY = os.environ.get("ZM_MOCK_BINARY", "/tmp/zarrmount-mock")
TEST_SECONDS = 90       # the watchdog's limit for one test
WAIT_SECONDS = 15       # for a mount to appear, a daemon to end, a thread to finish
results = []
WORK = tempfile.mkdtemp(prefix="zm-fuse-")
os.chmod(WORK, 0o755)   # nobody must reach the mount points for the allow_other tests
SOURCE = os.path.join(WORK, "sample.h5ad")
with open(SOURCE, "wb") as f:
    f.write(b"\x89HDF\r\n\x1a\n not really, the mock only stats it")
# Sanitizer reports of the daemons (which may have no stderr) go to files.
ASAN_LOG = os.path.join(WORK, "sanitizer")
ENV = dict(os.environ)
for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    ENV[name] = (ENV.get(name, "") + f":log_path={ASAN_LOG}").lstrip(":")


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return ok


# ---- What the mock tree holds (tests/fs/mock_tree.c) -----------------------------------

MULTIPLIER = 0x9E3779B97F4A7C15


def pattern(seed, size):
    words = [((offset + seed) * MULTIPLIER) & 0xFFFFFFFFFFFFFFFF for offset in range(0, size + 7, 8)]
    return struct.pack(f"<{len(words)}Q", *words)[:size]


TEXTS = {
    "README": b"zarrmount mock tree: a fixed tree for the FUSE tests.\n",
    "empty": b"",
    "full/.zgroup": b'{\n    "zarr_format": 2\n}',
    "full/X/.zarray": b'{\n    "chunks": [1024, 1],\n    "zarr_format": 2\n}',
    "full/X/.zattrs": b"{}",
}
PATTERNS = {"big.bin": (1, 3 << 20), "full/X/0.0": (2, 4096), "full/X/0.1": (3, 4097),
            "full/X/1.0": (4, 1)}
SLOW = [f"trouble/slow{i:02d}" for i in range(16)]
FILES = {path: data for path, data in TEXTS.items()}
FILES.update({path: pattern(seed, size) for path, (seed, size) in PATTERNS.items()})
FILES.update({f"many/f{i:04d}": f"file {i:04d}\n".encode() for i in range(1000)})
SLOW_DATA = {path: pattern(16 + i, 1 << 20) for i, path in enumerate(SLOW)}
DIRECTORIES = ["full", "full/X", "many", "trouble", "trouble/badlist"]
ROOT_NAMES = ["README", "big.bin", "empty", "full", "link", "many", "options", "trouble"]
TROUBLE_NAMES = sorted(["badlist", "eio_read", "flaky", "unmade"] + [p.split("/")[1] for p in SLOW])
# The size a file whose bytes could not be made reports (include/zarrmount/tree.h: ZM_SIZE_UNMADE).
UNMADE_SIZE = 4096


# ---- Mounts ------------------------------------------------------------------------------

def unescape(field):
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_entry(path):
    """(fstype, source, options) of the mount at path, or None."""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            source, point, fstype, options = line.split()[:4]
            if unescape(point) == path:
                return fstype, unescape(source), options.split(",")
    return None


def daemon_pids(mountpoint):
    """Processes of ours whose command line names mountpoint."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        program = os.path.basename(argv[0]).decode(errors="replace")
        if program in ("zarrmount", os.path.basename(BINARY)) and mountpoint.encode() in argv:
            pids.append(int(entry))
    return pids


def wait_until(condition, seconds=WAIT_SECONDS):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


class Mount:
    """A daemon and its mount point. stop() and kill() leave nothing mounted."""
    every = []

    def __init__(self, *args, source=SOURCE, foreground=True, program=BINARY, env=None, trailing=()):
        """Runs PROGRAM [-f] ARGS SOURCE MOUNTPOINT TRAILING and waits for the mount."""
        self.mountpoint = tempfile.mkdtemp(dir=WORK, prefix="mnt-")
        os.chmod(self.mountpoint, 0o755)
        self.log_path = self.mountpoint + ".log"
        self.command = [program] + (["-f"] if foreground else []) + list(args) + [source, self.mountpoint] + \
            list(trailing)
        self.returncode = None
        Mount.every.append(self)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            env=env or ENV)
        self.mounted = wait_until(lambda: self.is_mounted() or self.process.poll() is not None)
        self.mounted = self.is_mounted()

    def path(self, relative=""):
        return os.path.join(self.mountpoint, relative) if relative else self.mountpoint

    def is_mounted(self):
        return mount_entry(self.mountpoint) is not None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait(self, seconds=WAIT_SECONDS):
        """The exit status of the process started (the daemon itself with -f), or None."""
        try:
            self.returncode = self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def stop(self):
        if self.is_mounted():
            subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True, timeout=WAIT_SECONDS)
        if self.wait() is None or daemon_pids(self.mountpoint) and not wait_until(
                lambda: not daemon_pids(self.mountpoint)):
            self.kill()
        if self.is_mounted():
            self.kill()

    def kill(self):
        """The last resort: without its daemon the kernel fails every waiting request."""
        for pid in daemon_pids(self.mountpoint) + ([self.process.pid] if self.process.poll() is None else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait(5)
        if self.is_mounted():
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True, timeout=WAIT_SECONDS)


def stop_everything():
    for mount in Mount.every:
        try:
            mount.kill() if mount.process.poll() is None or daemon_pids(mount.mountpoint) else None
            if mount.is_mounted():
                subprocess.run(["fusermount3", "-u", "-z", mount.mountpoint], capture_output=True, timeout=WAIT_SECONDS)
        except Exception as error:  # keep cleaning the others
            print(f"# cleanup of {mount.mountpoint}: {error!r}", file=sys.stderr)


def run(name, test):
    """Runs one test under the watchdog; whatever happens, its mounts go."""
    fired = threading.Event()

    def watchdog():
        fired.set()
        stop_everything()

    timer = threading.Timer(TEST_SECONDS, watchdog)
    timer.daemon = True
    timer.start()
    try:
        test()
    except Exception as error:
        check(f"{name}: ran to the end", False, repr(error))
    finally:
        timer.cancel()
        if fired.is_set():
            check(f"{name}: finished within {TEST_SECONDS} s", False, "the watchdog killed the daemons")
        for mount in list(Mount.every):
            mount.stop()
            check(f"{name}: nothing left mounted at {os.path.basename(mount.mountpoint)}",
                  not mount.is_mounted() and not daemon_pids(mount.mountpoint))
        Mount.every.clear()


def read_all(path, piece=1 << 16, flags=0):
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        parts = []
        while True:
            part = os.read(fd, piece)
            if not part:
                return b"".join(parts)
            parts.append(part)
    finally:
        os.close(fd)


def error_of(call, *args):
    try:
        call(*args)
    except OSError as error:
        return error.errno
    return 0


def in_threads(targets, seconds=60):
    """Runs each callable in a thread; returns (results or exceptions, all finished)."""
    outcomes = [None] * len(targets)

    def body(i):
        try:
            outcomes[i] = targets[i]()
        except BaseException as error:
            outcomes[i] = error

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(targets))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return outcomes, not any(thread.is_alive() for thread in threads)


# ---- Tests ---------------------------------------------------------------------------------

def test_attributes():
    mount = Mount()
    if not check("mounts in the foreground", mount.mounted, mount.log()):
        return
    fstype, source, options = mount_entry(mount.mountpoint)
    check("/proc/mounts: fuse.zarrmount, the source as fsname, read-only",
          fstype == "fuse.zarrmount" and source == SOURCE and "ro" in options, f"{fstype} {source} {options}")
    source_stat = os.stat(SOURCE)
    sizes_ok = all(os.stat(mount.path(p)).st_size == len(data) for p, data in FILES.items())
    check("stat: every file has its exact size", sizes_ok)
    options_size = os.stat(mount.path("options")).st_size
    check("stat: a synthesized text file's size is its content's", options_size == len(read_all(mount.path("options"))))
    files = [os.lstat(mount.path(p)) for p in ["README", "empty", "big.bin", "full/X/0.1"]]
    check("stat: files are regular, 0444, one link",
          all(stat.S_ISREG(s.st_mode) and stat.S_IMODE(s.st_mode) == 0o444 and s.st_nlink == 1 for s in files))
    dirs = [os.lstat(mount.path(p)) for p in [""] + DIRECTORIES]
    check("stat: directories are 0555", all(stat.S_ISDIR(s.st_mode) and stat.S_IMODE(s.st_mode) == 0o555 for s in dirs))
    link = os.lstat(mount.path("link"))
    check("stat: the link is a 0777 symlink sized as its target",
          stat.S_ISLNK(link.st_mode) and stat.S_IMODE(link.st_mode) == 0o777 and link.st_size == len("full/X/.zarray"))
    everything = files + dirs + [link]
    check("stat: owner and group are the source's",
          all(s.st_uid == source_stat.st_uid and s.st_gid == source_stat.st_gid for s in everything))
    # The mock's times (mock_tree.c, zm__tree_time_ns): the source's whole seconds plus the
    # path's length in seconds and in nanoseconds; atime, mtime and ctime alike.
    timed = ["README", "empty", "big.bin", "full/X/0.1", ""] + DIRECTORIES + ["link"]
    def mock_time(p):
        return (source_stat.st_mtime_ns // 10**9 + len(p)) * 10**9 + len(p)
    check("stat: times are the tree's, for the path (atime, mtime and ctime alike)",
          all(s.st_mtime_ns == mock_time(p) and s.st_ctime_ns == mock_time(p) and s.st_atime_ns == mock_time(p)
              for p, s in zip(timed, everything)),
          [(p, s.st_mtime_ns, mock_time(p)) for p, s in zip(timed, everything)])
    check("stat: st_blocks counts 512-byte blocks", os.stat(mount.path("big.bin")).st_blocks == (3 << 20) // 512)
    check("stat: the root is inode 1", os.stat(mount.path()).st_ino == 1)
    paths = list(FILES) + DIRECTORIES + ["link", "options"]
    inodes = {p: os.lstat(mount.path(p)).st_ino for p in paths}
    check("stat: inode numbers are distinct", len(set(inodes.values())) == len(paths))
    check("stat: inode numbers are below 2^53", all(0 < i < 2 ** 53 for i in inodes.values()))
    again = {p: os.lstat(mount.path(p)).st_ino for p in paths}
    check("stat: inode numbers are stable", inodes == again)
    d_inodes = {entry.name: entry.inode() for entry in os.scandir(mount.path())}
    check("readdir: d_ino is stat's st_ino",
          all(d_inodes[name] == os.lstat(mount.path(name)).st_ino for name in ROOT_NAMES), str(d_inodes))
    check("stat: one device for the whole mount",
          len({os.lstat(mount.path(p)).st_dev for p in paths}) == 1)
    mount.stop()
    second = Mount()
    check("stat: the same inode numbers on the next mount of the same tree",
          second.mounted and {p: os.lstat(second.path(p)).st_ino for p in paths} == inodes)
    statvfs = os.statvfs(second.path())
    check("statfs: read-only", statvfs.f_flag & os.ST_RDONLY and statvfs.f_namemax == 255)
    check("getxattr: no data", error_of(os.getxattr, second.path("README"), "user.test") == errno.ENODATA)
    check("listxattr: empty", os.listxattr(second.path("README")) == [] and os.listxattr(second.path("full")) == [])


def test_listing():
    mount = Mount()
    if not check("mounts", mount.mounted, mount.log()):
        return
    # First thing on a fresh mount: readdirplus gives the sizes it knows and
    # leaves the others (listed as unknown) to lookups.
    listing = subprocess.run(["ls", "-la", mount.path(), mount.path("full/X")], capture_output=True, text=True,
                             timeout=WAIT_SECONDS)
    sizes = {}
    directory = ""
    for line in listing.stdout.splitlines():
        if line.endswith(":"):
            directory = "" if line[:-1] == mount.path() else "full/X/"
        elif len(line.split()) >= 9 and line[0] == "-":
            sizes[directory + line.split()[8]] = int(line.split()[4])
    expected = {p: len(d) for p, d in FILES.items() if p.count("/") == 0 or p.startswith("full/X/")}
    expected["options"] = sizes.get("options")
    check("ls -l on a fresh mount: exact sizes, listed as unknown or not", sizes == expected,
          f"{sizes} vs {expected}")
    check("listing: the root", sorted(os.listdir(mount.path())) == ROOT_NAMES, str(os.listdir(mount.path())))
    check("listing: full/X", sorted(os.listdir(mount.path("full/X"))) == [".zarray", ".zattrs", "0.0", "0.1", "1.0"])
    many = os.listdir(mount.path("many"))
    check("listing: 1000 entries over several readdir calls",
          sorted(many) == [f"f{i:04d}" for i in range(1000)], f"{len(many)} entries")
    check("listing: the same order every time", os.listdir(mount.path("many")) == many)
    with os.scandir(mount.path("full")) as entries:
        kinds = {entry.name: (entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False))
                 for entry in entries}
    check("listing: entry types (d_type)", kinds == {".zgroup": (False, True), "X": (True, False)}, str(kinds))
    check("listing: trouble/ (an entry that fails lookup is not listed)",
          sorted(os.listdir(mount.path("trouble"))) == TROUBLE_NAMES)
    listing = subprocess.run(["ls", "-la", mount.path("full")], capture_output=True, text=True, timeout=WAIT_SECONDS)
    names = [line.split()[-1] for line in listing.stdout.splitlines()[1:]]
    check("listing: . and .. are listed", names[:2] == [".", ".."] or {".", ".."} <= set(names), listing.stdout)


def test_reads():
    mount = Mount()
    if not check("mounts", mount.mounted, mount.log()):
        return
    whole = {p: read_all(mount.path(p)) for p in FILES}
    bad = [p for p, data in whole.items() if data != FILES[p]]
    check("read: every file, whole, with open/read", not bad, str(bad[:5]))
    big = FILES["big.bin"]
    for piece in (1, 4095, 4096, 65537, 1 << 20, 4 << 20):
        if piece == 1:
            data = read_all(mount.path("full/X/0.1"), piece)
            check("read: 1 byte at a time", data == FILES["full/X/0.1"])
            continue
        check(f"read: big.bin in pieces of {piece} bytes", read_all(mount.path("big.bin"), piece) == big)
    # O_DIRECT sends each read to the daemon as asked, past the page cache.
    fd = os.open(mount.path("big.bin"), os.O_RDONLY | os.O_DIRECT)
    try:
        wrong = []
        size = len(big)
        for offset in (0, 1, 7, 4095, 4096, 65535, (1 << 20) - 3, size - 4097, size - 10, size - 1):
            for count in (1, 7, 4096, 4097, 131072, 1 << 20, 3 << 20):
                if os.pread(fd, count, offset) != big[offset:offset + count]:
                    wrong.append((offset, count))
        check("read: many offsets and sizes (O_DIRECT)", not wrong, str(wrong[:5]))
        check("read: at the end of file, nothing", os.pread(fd, 4096, size) == b"")
        check("read: past the end of file, nothing", os.pread(fd, 4096, size + 12345) == b"")
        check("read: across the end, the rest", os.pread(fd, 100, size - 30) == big[-30:])
    finally:
        os.close(fd)
    check("read: an empty file", read_all(mount.path("empty")) == b"")
    check("read: through the link", read_all(mount.path("link")) == FILES["full/X/.zarray"])
    check("readlink", os.readlink(mount.path("link")) == "full/X/.zarray")
    cat = subprocess.run(["cat", mount.path("big.bin"), mount.path("README")], capture_output=True, timeout=WAIT_SECONDS)
    check("cat", cat.returncode == 0 and cat.stdout == big + FILES["README"])
    destination = tempfile.mkdtemp(dir=WORK, prefix="copy-")
    copy = subprocess.run(["cp", "-r", mount.path("full"), mount.path("many"), destination],
                          capture_output=True, text=True, timeout=60)
    copied = all(open(os.path.join(destination, p), "rb").read() == data
                 for p, data in FILES.items() if p.startswith(("full/", "many/")))
    check("cp -r", copy.returncode == 0 and copied, copy.stderr)
    copy = subprocess.run(["cp", "-P", mount.path("link"), destination], capture_output=True, text=True, timeout=WAIT_SECONDS)
    check("cp -P copies the link", copy.returncode == 0 and os.readlink(os.path.join(destination, "link")) == "full/X/.zarray")
    shutil.rmtree(destination)
    listing = subprocess.run(["ls", "-l", mount.path("full/X")], capture_output=True, text=True, timeout=WAIT_SECONDS)
    rows = {line.split()[-1]: line.split() for line in listing.stdout.splitlines()[1:]}
    check("ls -l: modes and sizes",
          all(rows[name][0] == "-r--r--r--" and int(rows[name][4]) == len(FILES["full/X/" + name])
              for name in (".zarray", ".zattrs", "0.0", "0.1", "1.0") if name in rows) and len(rows) == 3,
          listing.stdout)
    listing = subprocess.run(["ls", "-la", mount.path("full/X")], capture_output=True, text=True, timeout=WAIT_SECONDS)
    check("ls -la: every entry", len(listing.stdout.splitlines()) == 8 and listing.returncode == 0, listing.stdout)
    du = subprocess.run(["du", "-b", "-s", mount.path("full"), mount.path("many")], capture_output=True, text=True,
                        timeout=WAIT_SECONDS)
    totals = [int(line.split()[0]) for line in du.stdout.splitlines()]
    expected = [sum(len(d) for p, d in FILES.items() if p.startswith(prefix)) for prefix in ("full/", "many/")]
    check("du -b: apparent sizes add up", du.returncode == 0 and totals == expected, f"{du.stdout} vs {expected}")


def test_failures():
    source = os.path.join(WORK, "changing.h5ad")
    shutil.copy(SOURCE, source)
    mount = Mount(source=source)
    if not check("mounts", mount.mounted, mount.log()):
        return
    check("EIO: a path whose lookup fails", all(error_of(os.stat, mount.path("trouble/eio")) == errno.EIO for _ in range(5)))
    check("EIO: a file whose read fails", error_of(read_all, mount.path("trouble/eio_read")) == errno.EIO)
    check("EIO: a directory whose listing fails", error_of(os.listdir, mount.path("trouble/badlist")) == errno.EIO)
    check("ENOENT: a missing name", all(error_of(os.stat, mount.path("full/nothing")) == errno.ENOENT for _ in range(3)))
    check("read: still fine after failures", read_all(mount.path("README")) == FILES["README"])
    with open(source, "ab") as f:
        f.write(b"changed")
    # A file the kernel holds no page of reaches the daemon, which checks
    # the source on every read.
    check("source changed: a file not read before fails with EIO",
          error_of(read_all, mount.path("big.bin")) == errno.EIO)
    # Pages the kernel kept are dropped by the daemon's watcher as soon as
    # it sees the change; after that every read fails too.
    deadline = time.monotonic() + WAIT_SECONDS
    while error_of(read_all, mount.path("README")) != errno.EIO and time.monotonic() < deadline:
        time.sleep(0.05)
    check("source changed: cached files fail with EIO once the watcher saw it",
          all(error_of(read_all, mount.path(p)) == errno.EIO for p in ("README", "big.bin", "README")))
    log = mount.log()
    check("log: one line per failure reason, not per request",
          log.count("synthesis failed") == 1 and log.count("chunk could not be read") == 1
          and log.count("cannot list trouble/badlist") == 1 and log.count("remount") == 1, log)
    check("log: missing names are not failures", "full/nothing" not in log, log)


def drop_dentries():
    """Asks the kernel to drop the dentries and inodes nobody uses (FUSE
    then forgets them: its inodes go with their last reference)."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def test_unmade():
    """A file the tree finds but cannot make the bytes of (zm_node.error):
    the lookup answers (zarr-python 2 asks os.path.isfile before reading, and
    a failed lookup would be a missing chunk to it, filled in); the open (on
    a fresh mount, the first one reaches the daemon) and every read fail
    with EIO; the failure stays with the inode (the mock would serve the
    file if asked: a daemon that asked it again would serve bytes under a
    size that is not theirs) until the kernel forgets it; the log says why
    once."""
    mount = Mount()
    if not check("mounts", mount.mounted, mount.log()):
        return
    unmade = mount.path("trouble/unmade")
    st = os.stat(unmade)
    check("unmade: found, a regular file with the placeholder size (more than 0)",
          stat.S_ISREG(st.st_mode) and st.st_size == UNMADE_SIZE and os.path.isfile(unmade), str(st))
    check("unmade: the first open (answered by the daemon) fails with EIO",
          error_of(os.open, unmade, os.O_RDONLY) == errno.EIO)
    check("read: other files read meanwhile", read_all(mount.path("README")) == FILES["README"])
    # The kernel now opens files by itself (no-open mode): the reads fail.
    check("unmade: every read fails with EIO, never the bytes the tree would now give",
          all(error_of(read_all, unmade, piece) == errno.EIO for piece in (1, 4096, 1 << 16) for _ in range(3)))
    fd = None
    try:
        fd = os.open(unmade, os.O_RDONLY)
        check("unmade: pread at an offset fails too", error_of(os.pread, fd, 100, 2000) == errno.EIO)
    except OSError as error:
        check("unmade: pread at an offset fails too", error.errno == errno.EIO, str(error))
    finally:
        if fd is not None:
            os.close(fd)
    listing = subprocess.run(["ls", "-l", mount.path("trouble")], capture_output=True, text=True,
                             timeout=WAIT_SECONDS)
    rows = {line.split()[-1]: line.split() for line in listing.stdout.splitlines()[1:]}
    check("unmade: ls -l lists it with the placeholder size",
          "unmade" in rows and int(rows["unmade"][4]) == UNMADE_SIZE, listing.stdout)
    check("unmade: stat is unchanged", os.stat(unmade).st_size == UNMADE_SIZE)
    # A file found unmade at its first lookup only: its inode keeps the
    # failure while the kernel holds it; a lookup after it forgot tries again.
    flaky = mount.path("trouble/flaky")
    check("flaky: found unmade", os.stat(flaky).st_size == UNMADE_SIZE)
    check("flaky: reads fail while the kernel holds the inode",
          all(error_of(read_all, flaky) == errno.EIO for _ in range(3)) and os.stat(flaky).st_size == UNMADE_SIZE)
    deadline = time.monotonic() + WAIT_SECONDS
    size = UNMADE_SIZE
    while size == UNMADE_SIZE and time.monotonic() < deadline:
        drop_dentries()
        time.sleep(0.1)
        size = os.stat(flaky).st_size
    check("flaky: once the kernel forgot it, a new lookup makes it", size == 777, str(size))
    check("flaky: then it reads its bytes", error_of(read_all, flaky) == 0 and read_all(flaky) == pattern(7, 777))
    log = mount.log()
    said = [line for line in log.splitlines() if "trouble/unmade" in line]
    check("unmade: the log says why, once, naming the file and the reason",
          len(said) == 1 and "a damaged source chunk" in said[0] and "EIO" in said[0], log)
    check("unmade: the daemon stays up", mount.is_mounted() and mount.process.poll() is None)


def open_and_write(path, flags):
    """Opens for writing and writes a byte: where the kernel opens files
    without the daemon, the write is what the daemon refuses."""
    fd = os.open(path, flags)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


def erofs_battery(mount, label):
    p = mount.path
    calls = {
        "open O_WRONLY": (open_and_write, p("README"), os.O_WRONLY),
        "open O_RDWR": (open_and_write, p("big.bin"), os.O_RDWR),
        "open O_CREAT": (os.open, p("new-file"), os.O_WRONLY | os.O_CREAT, 0o644),
        "mkdir": (os.mkdir, p("new-dir")),
        "unlink": (os.unlink, p("README")),
        "rmdir": (os.rmdir, p("full/X")),
        "rename": (os.rename, p("README"), p("README2")),
        "link": (os.link, p("README"), p("README3")),
        "symlink": (os.symlink, "README", p("new-link")),
        "chmod": (os.chmod, p("README"), 0o644),
        "chown": (os.chown, p("README"), 1, 1),
        "truncate": (os.truncate, p("README"), 0),
        "utime": (os.utime, p("README"), (1, 1)),
        "setxattr": (os.setxattr, p("README"), "user.test", b"1"),
        "removexattr": (os.removexattr, p("README"), "user.test"),
        "mknod": (os.mkfifo, p("new-fifo")),
    }
    for name, (call, *args) in calls.items():
        code = error_of(call, *args)
        check(f"EROFS ({label}): {name}", code == errno.EROFS, errno.errorcode.get(code, str(code)))
    check(f"EROFS ({label}): nothing changed",
          read_all(p("README")) == FILES["README"] and sorted(os.listdir(p())) == ROOT_NAMES)


def test_read_only():
    mount = Mount("-d")
    if not check("mounts", mount.mounted, mount.log()):
        return
    erofs_battery(mount, "kernel, ro mount")
    # A remount rw lets the requests through to the daemon's own handlers.
    remount = remount_as(mount.path(), "rw", WAIT_SECONDS)
    if check("remount rw (to reach the handlers)", remount.returncode == 0, remount.stderr):
        erofs_battery(mount, "daemon handlers")
        back = remount_as(mount.path(), "ro", WAIT_SECONDS)
        check("remount ro again", back.returncode == 0, back.stderr)
        log = mount.log()
        handled = ["create", "mkdir", "unlink", "rmdir", "rename", "link", "symlink", "setattr", "setxattr",
                   "removexattr", "mknod"]
        missing = [name for name in handled if f"{name}: read-only file system" not in log]
        check("EROFS: answered by the daemon's handlers (-d log)", not missing, str(missing))
        check("EROFS: open for writing (or its write) refused by the daemon",
              "for writing: read-only" in log or "write: read-only" in log)
    check("-d: logs every request", "lookup README: inode" in mount.log() and "pid " in mount.log())
    # Each request's line ends with how long it took and when it was answered since the mount
    # began.
    timed = re.findall(r"pid \d+: lookup README: inode .* \((\d+\.\d{3}) ms, at (\d+\.\d{6}) s\)$",
                       mount.log(), re.M)
    check("-d: a request's line says how long it took and when", timed != [], mount.log()[-2000:])
    answered = [float(at) for line in mount.log().splitlines()
                for at in re.findall(r"pid \d+: .* \(\d+\.\d{3} ms, at (\d+\.\d{6}) s\)$", line)]
    check("-d: times since the mount began, none negative",
          len(answered) > 10 and min(answered) >= 0 and all(float(took) >= 0 for took, _ in timed), str(answered[:5]))


def test_concurrency():
    stats = os.path.join(WORK, "concurrency-stats")
    mount = Mount(env=dict(ENV, ZM_MOCK_STATS=stats))
    if not check("mounts", mount.mounted, mount.log()):
        return
    big = FILES["big.bin"]
    pieces = [4096, 65536, 131072, 1 << 20, 12345, 3 << 20, 8192, 100000] * 2
    readers = [lambda piece=piece: read_all(mount.path("big.bin"), piece, os.O_DIRECT) == big for piece in pieces]
    outcomes, finished = in_threads(readers)
    check("16 concurrent readers of one file (O_DIRECT)", finished and all(o is True for o in outcomes), str(outcomes))
    readers = [lambda path=path: read_all(mount.path(path), 1 << 17) == SLOW_DATA[path] for path in SLOW]
    outcomes, finished = in_threads(readers)
    check("16 concurrent readers of 16 slow files", finished and all(o is True for o in outcomes), str(outcomes))
    # Counted by the mock, not timed: reads of different files did not wait
    # for one another.
    most = int(open(stats).read()) if os.path.exists(stats) else 0
    check("slow reads were served in parallel", most >= 2, f"at most {most} at once")


def test_sigterm_while_reading():
    mount = Mount()
    if not check("mounts", mount.mounted, mount.log()):
        return
    readers = [lambda path=path: read_all(mount.path(path), 1 << 16, os.O_DIRECT) == SLOW_DATA[path] for path in SLOW]
    outcomes = [None] * len(readers)

    def body(i):
        try:
            outcomes[i] = readers[i]()
        except OSError as error:
            outcomes[i] = errno.errorcode.get(error.errno, str(error.errno))

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(readers))]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    check("readers are still reading when SIGTERM comes", sum(t.is_alive() for t in threads) == 16)
    mount.process.send_signal(signal.SIGTERM)
    status = mount.wait()
    check("SIGTERM while 16 readers are active: the daemon exits 0", status == 0, f"exit {status}: {mount.log()}")
    check("SIGTERM: the mount is gone", not mount.is_mounted())
    deadline = time.monotonic() + WAIT_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    check("SIGTERM: every reader finished or got an error",
          not any(t.is_alive() for t in threads)
          and all(o is True or o in ("ENOTCONN", "EIO", "ECONNABORTED", "ENODEV") for o in outcomes), str(outcomes))
    check("SIGTERM: the log says unmounted", "unmounted" in mount.log(), mount.log())


def test_sigint_and_fusermount():
    mount = Mount()
    if check("mounts", mount.mounted, mount.log()):
        read_all(mount.path("big.bin"))
        mount.process.send_signal(signal.SIGINT)
        status = mount.wait()
        check("SIGINT: the daemon exits 0 and unmounts", status == 0 and not mount.is_mounted(), f"exit {status}")
    mount = Mount()
    if check("mounts", mount.mounted, mount.log()):
        read_all(mount.path("README"))
        done = subprocess.run(["fusermount3", "-u", mount.path()], capture_output=True, text=True, timeout=WAIT_SECONDS)
        status = mount.wait()
        check("fusermount3 -u: the daemon exits 0", done.returncode == 0 and status == 0, f"{done.stderr} exit {status}")
        check("fusermount3 -u: the mount is gone", not mount.is_mounted())
        log = mount.log().strip().splitlines()
        check("fusermount3 -u: the log says serving, then unmounted",
              len(log) == 2 and "serving" in log[0] and "unmounted" in log[1], str(log))


def test_daemon():
    mount = Mount(foreground=False)
    status = mount.wait()
    check("background: the command returns 0 once mounted", status == 0 and mount.mounted, f"exit {status}: {mount.log()}")
    if not mount.mounted:
        return
    pids = daemon_pids(mount.mountpoint)
    check("background: one daemon process stays", len(pids) == 1, str(pids))
    check("background: reads work (the daemon forked before opening the tree)",
          read_all(mount.path("big.bin")) == FILES["big.bin"], mount.log())
    options = read_all(mount.path("options")).decode()
    check("the tree's threads do not take the stop signals", "helper_blocks_sigterm=1" in options, options)
    check("background: nothing on the terminal after starting", mount.log() == "", mount.log())
    done = subprocess.run(["fusermount3", "-u", mount.path()], capture_output=True, text=True, timeout=WAIT_SECONDS)
    check("background: fusermount3 -u ends the daemon",
          done.returncode == 0 and wait_until(lambda: not daemon_pids(mount.mountpoint)) and not mount.is_mounted(),
          done.stderr)
    mount = Mount(foreground=False)
    if mount.wait() == 0 and mount.mounted:
        for pid in daemon_pids(mount.mountpoint):
            os.kill(pid, signal.SIGTERM)
        check("background: SIGTERM ends the daemon and unmounts",
              wait_until(lambda: not daemon_pids(mount.mountpoint)) and not mount.is_mounted())


def refused(args, source=SOURCE, mountpoint=None, foreground=True):
    """Runs a command that must fail: (exit status, stderr, mounted afterwards)."""
    mountpoint = mountpoint or tempfile.mkdtemp(dir=WORK, prefix="refused-")
    command = [BINARY] + (["-f"] if foreground else []) + list(args) + ([source] if source else []) + \
              ([mountpoint] if mountpoint != "-" else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_SECONDS, env=ENV)
    except subprocess.TimeoutExpired:
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True)
        return None, "timed out", False
    mounted = mountpoint != "-" and mount_entry(mountpoint) is not None
    if mounted:
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True, timeout=WAIT_SECONDS)
    return done.returncode, done.stderr, mounted


def test_refusals():
    bad_source = os.path.join(WORK, "broken.bad")
    with open(bad_source, "wb") as f:
        f.write(b"not hdf5")
    not_a_directory = os.path.join(WORK, "plain-file")
    open(not_a_directory, "w").close()
    cases = [
        ("a missing source", [], os.path.join(WORK, "missing.h5ad"), None, True, "No such file"),
        ("a source the tree refuses", [], bad_source, None, True, "not an HDF5 file"),
        ("a source the tree refuses, in the background", [], bad_source, None, False, "not an HDF5 file"),
        ("a directory as source, the mount point inside it", [], WORK, None, True, "lies inside the source store"),
        ("an unknown codec", ["-o", "codec=bogus"], SOURCE, None, True, "codec 'bogus'"),
        ("an unknown codec, in the background", ["-o", "codec=bogus"], SOURCE, None, False, "codec 'bogus'"),
        ("an empty codec", ["-o", "codec="], SOURCE, None, True, "codec="),
        ("a bad passthrough", ["-o", "passthrough=sometimes"], SOURCE, None, True, "passthrough=sometimes: give on or off"),
        ("a bad cache size", ["-o", "cache_size=lots"], SOURCE, None, True, "cache_size=lots"),
        ("a zero chunk size", ["-o", "chunk_size=0"], SOURCE, None, True, "chunk_size=0"),
        ("a bad size suffix", ["-o", "chunk_size=12Q"], SOURCE, None, True, "chunk_size=12Q"),
        ("an overflowing size", ["-o", "cache_size=99999999999T"], SOURCE, None, True, "too large"),
        ("bad threads", ["-o", "threads=many"], SOURCE, None, True, "threads=many"),
        ("zero threads", ["-o", "threads=0"], SOURCE, None, True, "threads=0"),
        ("an unknown -o option", ["-o", "no_such_option"], SOURCE, None, True, "no_such_option"),
        ("an unknown flag", ["--frobnicate"], SOURCE, None, True, "--frobnicate"),
        ("-o without a value", ["-o"], None, "-", True, "-o"),
        ("a missing mount point", [], SOURCE, "-", True, "MOUNTPOINT"),
        ("a mount point that is a file", [], SOURCE, not_a_directory, True, "not a directory"),
        ("a mount point that does not exist", [], SOURCE, os.path.join(WORK, "nowhere"), True, "No such file"),
        ("an extra argument", ["extra-argument"], SOURCE, None, True, "unexpected argument"),
        # mount(8) passes rw unless told ro: a read-only file system says so.
        ("-o rw", ["-o", "rw,noatime"], SOURCE, None, True, "option rw: zarrmount is a read-only filesystem"),
    ]
    for name, args, source, mountpoint, foreground, words in cases:
        if name == "-o without a value":
            status, stderr, mounted = refused([SOURCE, tempfile.mkdtemp(dir=WORK), "-o"], source=None,
                                              mountpoint="-", foreground=foreground)
        else:
            status, stderr, mounted = refused(args, source, mountpoint, foreground)
        one_line = stderr.count("\n") == 1 and stderr.startswith("zarrmount: ")
        check(f"refused, exit 2, one line, nothing mounted: {name}",
              status == 2 and one_line and words in stderr and not mounted,
              f"exit {status}, mounted {mounted}, stderr {stderr!r}")


def test_options():
    mount = Mount("-o", "cache_size=1G", "-o", "chunk_size=256K,threads=3", "-o", "codec=zstd:3")
    if check("mounts with every tree option", mount.mounted, mount.log()):
        options = read_all(mount.path("options")).decode()
        check("options reach the tree: 1G, 256K, 3 threads, zstd:3",
              "cache_bytes=1073741824\n" in options and "chunk_bytes=262144\n" in options
              and "threads=3\n" in options and "codec=zstd:3\n" in options, options)
        mount.stop()
    mount = Mount("-o", "cache_size=268435456,chunk_size=2MiB")
    if check("mounts with sizes in bytes and MiB", mount.mounted, mount.log()):
        options = read_all(mount.path("options")).decode()
        check("sizes: bytes and MiB", "cache_bytes=268435456\n" in options and "chunk_bytes=2097152\n" in options, options)
        mount.stop()
    mount = Mount()
    if check("mounts with no options", mount.mounted, mount.log()):
        options = read_all(mount.path("options")).decode()
        check("defaults: the tree's own (0 for sizes, threads and codec)",
              "cache_bytes=0\n" in options and "chunk_bytes=0\n" in options
              and "codec=(default)\n" in options and "threads=0\n" in options, options)
        mount.stop()
    mount = Mount("-o", "ro,noatime,nosuid,nodev,noexec")
    if check("mounts with -o ro,noatime,nosuid,nodev,noexec", mount.mounted, mount.log()):
        _, _, options = mount_entry(mount.mountpoint)
        check("-o ro,noatime,...: read-only, the mount flags passed on",
              all(o in options for o in ("ro", "noatime", "nosuid", "nodev", "noexec")), f"{options} {mount.log()}")
        # A second mount over the first would stack (libfuse 3 allows it): refused.
        done = subprocess.run([BINARY, "-f", SOURCE, mount.mountpoint], capture_output=True, text=True,
                              timeout=WAIT_SECONDS, env=ENV)
        status, stderr = done.returncode, done.stderr
        entries = sum(1 for line in open("/proc/self/mountinfo") if line.split()[4] == mount.mountpoint)
        check("a mount over a mounted point: refused, exit 2, one line, still one mount",
              status == 2 and stderr.count("\n") == 1 and "already mounted" in stderr and entries == 1
              and mount.is_mounted(), f"exit {status}, {entries} mounts, stderr {stderr!r}")
        mount.stop()
    # A directory that holds entries: refused (the mount would hide them), unless -o nonempty.
    busy = tempfile.mkdtemp(dir=WORK, prefix="nonempty-")
    with open(os.path.join(busy, "kept.txt"), "w") as f:
        f.write("still here\n")
    status, stderr, mounted = refused([], SOURCE, busy)
    check("a mount point that holds a file: refused, exit 2, one line, nothing mounted",
          status == 2 and stderr.count("\n") == 1 and "is not empty" in stderr and "-o nonempty" in stderr
          and not mounted, f"exit {status}, mounted {mounted}, stderr {stderr!r}")
    process = subprocess.run([BINARY, SOURCE, busy, "-o", "nonempty"], capture_output=True, text=True,
                             timeout=WAIT_SECONDS, env=ENV)
    mounted = mount_entry(busy) is not None
    if mounted:
        hidden = not os.path.exists(os.path.join(busy, "kept.txt"))
        subprocess.run(["fusermount3", "-u", busy], capture_output=True, timeout=WAIT_SECONDS)
        wait_until(lambda: not daemon_pids(busy))
    check("-o nonempty: mounts over a directory that holds a file (hidden while mounted, there after)",
          process.returncode == 0 and mounted and hidden and not daemon_pids(busy)
          and os.path.exists(os.path.join(busy, "kept.txt")), f"exit {process.returncode} {process.stderr!r}")
    mount = Mount("-d", foreground=False)
    check("-d implies -f: the process stays in the foreground",
          mount.mounted and mount.process.poll() is None and "serving" in mount.log())
    done = subprocess.run([BINARY, "--help"], capture_output=True, text=True, timeout=WAIT_SECONDS)
    text = " ".join(done.stdout.split())
    wanted = ["-f", "-d", "codec=", "chunk_size=", "cache_size=", "threads=", "allow_other", "-o ro", "--help",
              "--version", "default 1M", "default 1G", "one per core",
              "default blosc:lz4:5:bitshuffle: fast to make and to decode, compresses counts well; blosc alone is zstd:1 with byte shuffle",
              "fuse.zarrmount ro,allow_other 0 0"]
    missing = [w for w in wanted if w not in text]
    check("--help: every option, the defaults and why this codec", done.returncode == 0 and not missing, str(missing))
    done = subprocess.run([BINARY, "--version"], capture_output=True, text=True, timeout=WAIT_SECONDS)
    check("--version", done.returncode == 0 and done.stdout.startswith("zarrmount ") and "FUSE library 3." in done.stdout,
          done.stdout)
    short = subprocess.run([BINARY, "-V"], capture_output=True, text=True, timeout=WAIT_SECONDS)
    check("-V prints what --version prints", short.returncode == 0 and short.stdout == done.stdout,
          f"{short.stdout!r} {done.stdout!r}")


def as_nobody(*command):
    return subprocess.run(list(command), capture_output=True, text=True, timeout=WAIT_SECONDS, user=65534, group=65534)


def test_allow_other():
    mount = Mount()
    if check("mounts without allow_other", mount.mounted, mount.log()):
        check("without allow_other: other users cannot enter the mount",
              as_nobody("cat", mount.path("README")).returncode != 0)
        mount.stop()
    private = os.path.join(WORK, "private.h5ad")
    shutil.copy(SOURCE, private)
    os.chown(private, 1234, 5678)
    os.chmod(private, 0o640)
    # mount.fuse3's order: SOURCE MOUNTPOINT -o ro,allow_other,dev,suid
    mount = Mount(source=private, foreground=False, trailing=["-o", "ro,allow_other,dev,suid", "-f"])
    if not check("mounts in mount.fuse3's argument order", mount.mounted, mount.log()):
        return
    _, _, options = mount_entry(mount.mountpoint)
    check("allow_other: default_permissions is added", "allow_other" in options and "default_permissions" in options,
          str(options))
    readme = os.stat(mount.path("README"))
    full = os.stat(mount.path("full"))
    check("allow_other: files carry the source's read bits (0440), directories 0550",
          stat.S_IMODE(readme.st_mode) == 0o440 and stat.S_IMODE(full.st_mode) == 0o550,
          f"{oct(readme.st_mode)} {oct(full.st_mode)}")
    check("allow_other: owner and group are the source's", readme.st_uid == 1234 and readme.st_gid == 5678)
    check("allow_other: another user cannot read a 0640 source's files",
          as_nobody("cat", mount.path("README")).returncode != 0)
    check("allow_other: root still reads", read_all(mount.path("README")) == FILES["README"])
    mount.stop()
    public = os.path.join(WORK, "public.h5ad")
    shutil.copy(SOURCE, public)
    os.chmod(public, 0o644)
    mount = Mount("-o", "allow_other", source=public)
    if check("mounts a 0644 source with allow_other", mount.mounted, mount.log()):
        done = as_nobody("cat", mount.path("README"))
        check("allow_other: another user reads a 0644 source's files", done.returncode == 0
              and done.stdout.encode() == FILES["README"], done.stderr)
        done = as_nobody("ls", mount.path("full/X"))
        check("allow_other: another user lists directories", done.returncode == 0 and "0.0" in done.stdout, done.stderr)


def test_mount_helper():
    helper = shutil.which("mount.fuse3") or "/sbin/mount.fuse3"
    if not os.path.exists(helper):
        check("mount.fuse3 # SKIP not installed", True)
        return
    bin_dir = tempfile.mkdtemp(dir=WORK, prefix="bin-")
    os.symlink(os.path.abspath(BINARY), os.path.join(bin_dir, "zarrmount"))
    env = dict(ENV, PATH=bin_dir + ":" + ENV.get("PATH", "/usr/bin:/bin"))
    # What an fstab line `SOURCE MNT fuse.zarrmount ro,allow_other,... 0 0` runs.
    mount = Mount(source=SOURCE, program=helper, foreground=False, env=env,
                  trailing=["-t", "zarrmount", "-o", "ro,allow_other,defaults,noatime,x-systemd.automount,"
                                                     "comment=zarrmount-test,_netdev,nofail"])
    status = mount.wait()
    check("mount.fuse3 -t zarrmount -o ro,allow_other,defaults,x-systemd...: mounts",
          status == 0 and mount.is_mounted(), f"exit {status}: {mount.log()}")
    if not mount.is_mounted():
        return
    fstype, source, options = mount_entry(mount.mountpoint)
    check("mount.fuse3: fuse.zarrmount, read-only, allow_other",
          fstype == "fuse.zarrmount" and source == SOURCE and "ro" in options and "allow_other" in options,
          f"{fstype} {source} {options}")
    check("mount.fuse3: reads work", read_all(mount.path("big.bin")) == FILES["big.bin"])
    done = subprocess.run(["fusermount3", "-u", mount.path()], capture_output=True, text=True, timeout=WAIT_SECONDS)
    check("mount.fuse3: fusermount3 -u ends the daemon",
          done.returncode == 0 and wait_until(lambda: not daemon_pids(mount.mountpoint)) and not mount.is_mounted())


def mock_log(cache):
    """What the mock tree did with the disk cache: ("kept"|"read", path) pairs."""
    try:
        with open(os.path.join(cache, "log")) as f:
            return [tuple(line.split(" ", 1)) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def test_passthrough():
    """Files the disk cache holds are read by the kernel from the cache's own
    file (FUSE passthrough): the right bytes, by read and mmap, with no read
    reaching the daemon; every open of a file while it is open uses the same
    backing file; other files are served as before; off turns it off."""
    cache = tempfile.mkdtemp(dir=WORK, prefix="cache-")
    mount = Mount("-o", f"cache_dir={cache},passthrough=on")
    if not check("passthrough=on: mounts", mount.mounted, mount.log()):
        return
    # The daemon says what the kernel answered once INIT is answered: the
    # mount can be in use an instant before the line is written.
    said = ("passthrough: files the disk cache holds", "no FUSE passthrough", "passthrough=on needs root")
    wait_until(lambda: any(line in mount.log() for line in said))
    log = mount.log()
    if "no FUSE passthrough" in log:
        check("passthrough # SKIP this kernel has no FUSE passthrough (Linux 6.9+)", True)
        return
    check("passthrough=on: asked for at INIT", "passthrough: files the disk cache holds" in log, log)
    kept = ["big.bin", "full/X/0.0", "full/X/0.1", "full/X/1.0"]
    check("passthrough: kept files read right", all(read_all(mount.path(p), 1 << 16) == FILES[p] for p in kept))
    check("passthrough: sizes right", all(os.stat(mount.path(p)).st_size == len(FILES[p]) for p in kept))
    check("passthrough: other files still served by the daemon", read_all(mount.path("README")) == FILES["README"]
          and ("read", "README") in mock_log(cache))
    done = mock_log(cache)
    check("passthrough: each kept file lent by the disk cache", all(("kept", p) in done for p in kept), str(done))
    check("passthrough: no read of a kept file reached the daemon",
          not [p for what, p in done if what == "read" and p in kept], str(done))
    # One backing file while the file stays open, whatever opens it meanwhile.
    before = len(mock_log(cache))
    first = os.open(mount.path("big.bin"), os.O_RDONLY)
    try:
        second = read_all(mount.path("big.bin"), 1 << 20)
        third = os.open(mount.path("big.bin"), os.O_RDONLY)
        with open(third, "rb", closefd=True) as f:
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
                by_map = bytes(mapped)
        by_first = os.pread(first, 3 << 20, 0)
    finally:
        os.close(first)
    lent = [p for what, p in mock_log(cache)[before:] if what == "kept"]
    check("passthrough: concurrent opens read right (read, pread, mmap)",
          second == FILES["big.bin"] and by_map == FILES["big.bin"] and by_first == FILES["big.bin"])
    check("passthrough: opens while open reuse one backing file", lent == ["big.bin"], str(lent))
    # Racing opens and closes of the same files from many threads: every
    # open is answered as the others still open were (else the kernel
    # fails it with EIO).
    def churn(path):
        return all(read_all(mount.path(path), 4096) == FILES[path] for _ in range(40))
    outcomes, finished = in_threads([lambda p=p: churn(p) for p in kept * 4])
    check("passthrough: 16 threads opening and reading kept files", finished and all(o is True for o in outcomes),
          str(outcomes))
    mount.stop()
    # Off: the daemon serves every read, and nothing is lent.
    cache = tempfile.mkdtemp(dir=WORK, prefix="cache-")
    mount = Mount("-o", f"cache_dir={cache},passthrough=off")
    if check("passthrough=off: mounts", mount.mounted, mount.log()):
        check("passthrough=off: reads right", all(read_all(mount.path(p)) == FILES[p] for p in kept))
        done = mock_log(cache)
        check("passthrough=off: nothing lent, every read by the daemon",
              not [p for what, p in done if what == "kept"] and ("read", "big.bin") in done, str(done))
    mount.stop()
    # The default is off: not asked for, even on a remount.
    cache = tempfile.mkdtemp(dir=WORK, prefix="cache-")
    mount = Mount("-o", f"cache_dir={cache}")
    if check("passthrough by default: mounts", mount.mounted, mount.log()):
        check("passthrough by default: not asked for", "passthrough" not in mount.log(), mount.log())
        check("passthrough by default: reads right", read_all(mount.path("full/X/0.1")) == FILES["full/X/0.1"])
    mount.stop()
    # No disk cache: not asked for (no open answered needlessly).
    mount = Mount()
    if check("no disk cache: mounts", mount.mounted, mount.log()):
        check("no disk cache: passthrough not asked for", "passthrough" not in mount.log(), mount.log())
        check("no disk cache: reads right", read_all(mount.path("big.bin")) == FILES["big.bin"])



def resident_pages(path):
    """(pages of path the kernel's page cache holds, pages of path), by
    mincore on a mapping of it (mapping reads nothing)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            return -1, pages
        try:
            vector = (ctypes.c_ubyte * pages)()
            if libc.mincore(address, size, vector) != 0:
                return -1, pages
            return sum(v & 1 for v in vector), pages
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def test_push():
    """Without passthrough, once a reader reads a listed file, the kept files
    after it in the listing are pushed into the kernel's page cache, a window
    at a time: their reads never reach the daemon. A listing alone pushes
    nothing; the first file past a window is read by the daemon and moves
    the window on."""
    cache = tempfile.mkdtemp(dir=WORK, prefix="cache-")
    mount = Mount("-o", f"cache_dir={cache},passthrough=off")
    if not check("push: mounts", mount.mounted, mount.log()):
        return
    after = ["full/X/0.1", "full/X/1.0"]
    names = sorted(os.listdir(mount.path("full/X")))  # a listing: readdirplus
    check("push: the listing", names == [".zarray", ".zattrs", "0.0", "0.1", "1.0"], str(names))
    time.sleep(0.2)
    check("push: a listing alone pushes nothing",
          not mock_log(cache) and all(resident_pages(mount.path(p))[0] == 0 for p in after), str(mock_log(cache)))
    check("push: the first file reads right", read_all(mount.path("full/X/0.0")) == FILES["full/X/0.0"])
    pushed = wait_until(lambda: all(resident_pages(mount.path(p))[0] == resident_pages(mount.path(p))[1]
                                    for p in after))
    check("push: the files after it are then in the kernel's page cache",
          pushed, str({p: resident_pages(mount.path(p)) for p in after}))
    check("push: they read right", all(read_all(mount.path(p)) == FILES[p] for p in after))
    done = mock_log(cache)
    check("push: each pushed once, and no read of them reached the daemon",
          sorted(p for what, p in done if what == "pushed") == after and
          not [p for what, p in done if what == "read" and p in after], str(done))
    mount.stop()
    # A window of 2 KiB (an eighth of cache_size): one file a window, the
    # next one a tripwire read by the daemon.
    cache = tempfile.mkdtemp(dir=WORK, prefix="cache-")
    mount = Mount("-o", f"cache_dir={cache},passthrough=off,cache_size=16K")
    if not check("push, small window: mounts", mount.mounted, mount.log()):
        return
    os.listdir(mount.path("full/X"))
    read_all(mount.path("full/X/0.0"))
    check("push, small window: the next file is pushed",
          wait_until(lambda: resident_pages(mount.path("full/X/0.1"))[0] == 2), str(mock_log(cache)))
    time.sleep(0.2)
    check("push, small window: ... and not the one after (the tripwire)",
          resident_pages(mount.path("full/X/1.0"))[0] == 0, str(mock_log(cache)))
    check("push, small window: all read right", all(read_all(mount.path(p)) == FILES[p]
                                                    for p in ["full/X/0.1", "full/X/1.0"]))
    done = mock_log(cache)
    check("push, small window: the tripwire was read by the daemon, the pushed file not",
          ("read", "full/X/1.0") in done and ("read", "full/X/0.1") not in done, str(done))
    check("push: a file never listed is read as usual", read_all(mount.path("big.bin")) == FILES["big.bin"]
          and ("read", "big.bin") in mock_log(cache), str(mock_log(cache)))


def test_no_sanitizer_reports():
    reports = [name for name in os.listdir(WORK) if name.startswith("sanitizer")]
    logs = [name for name in os.listdir(WORK) if name.endswith(".log")]
    noisy = []
    for name in logs:
        with open(os.path.join(WORK, name), errors="replace") as f:
            text = f.read()
        if "Sanitizer" in text or "runtime error:" in text:
            noisy.append(name)
    details = ""
    for name in reports[:2]:
        with open(os.path.join(WORK, name), errors="replace") as f:
            details += f.read()[:2000]
    check("no sanitizer reports from any daemon", not reports and not noisy, details or str(noisy))


def main():
    if not os.path.exists(BINARY):
        print(f"1..0 # SKIP {BINARY} not built (set ZM_MOCK_BINARY)")
        return 0
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("1..0 # SKIP needs root and /dev/fuse")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # meson's timeout: still clean up
    try:
        for name, test in [("attributes", test_attributes), ("listing", test_listing), ("reads", test_reads),
                           ("failures", test_failures), ("unmade", test_unmade), ("read-only", test_read_only),
                           ("concurrency", test_concurrency), ("sigterm", test_sigterm_while_reading),
                           ("sigint-fusermount", test_sigint_and_fusermount), ("daemon", test_daemon),
                           ("refusals", test_refusals), ("options", test_options),
                           ("allow_other", test_allow_other), ("mount.fuse3", test_mount_helper),
                           ("passthrough", test_passthrough), ("push", test_push)]:
            run(name, test)
        test_no_sanitizer_reports()
    finally:
        stop_everything()
        left = [m.mountpoint for m in Mount.every if m.is_mounted()]
        with open("/proc/self/mounts") as mounts:
            left += [line.split()[1] for line in mounts if WORK in line]
        check("no mount left behind", not left, str(left))
        if not left:
            shutil.rmtree(WORK, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok and detail:
            for line in str(detail).splitlines()[:20]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
