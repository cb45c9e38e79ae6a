#!/usr/bin/python3
"""Shared by test_hostile.py and test_security.py: a real zarrmount mounted in
the foreground (its log in a file beside the mount point), the daemon's memory
from /proc, the hostile path list (hostile_paths.txt) and its escapes, and TAP.

Mount points live under $ZM_MOUNT_PARENT (run_mount_test.sh makes it and
unmounts whatever is left there in every outcome); Mount.stop unmounts too.
"""
import errno
import os
import re
import signal
import subprocess
import tempfile
import time

from remount import remount_as  # noqa: F401  (test_security.py imports it from here)

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SOURCE = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
SOURCE_CELLS = 60
HERE = os.path.dirname(os.path.abspath(__file__))
LIST = os.path.join(HERE, "hostile_paths.txt")
PARENT = os.environ.get("ZM_MOUNT_PARENT") or tempfile.mkdtemp(prefix="zm-mounts-")

results = []

# An AddressSanitizer build (tests run under one too): its allocator keeps a
# quarantine of freed memory (256 MiB by default), which the daemons here keep
# small so that their resident memory means something.
with open(BINARY, "rb") as _binary:
    SANITIZED = b"libasan" in _binary.read()


def daemon_env():
    env = dict(os.environ)
    if SANITIZED:
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4"
                               ":thread_local_quarantine_size_kb=64").lstrip(":")
    return env


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return bool(ok)


def report():
    """Prints TAP; the exit status."""
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-8:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


def shown(path, limit=90):
    """A path as one printable TAP line."""
    text = repr(path)[2:-1] if isinstance(path, bytes) else path
    return text if len(text) <= limit else f"{text[:limit - 20]}...({len(path)} bytes)"


def error_of(call, *args):
    """The errno call raises, 0 if it succeeds."""
    try:
        result = call(*args)
        if isinstance(result, int) and call is os.open:
            os.close(result)
        return 0
    except OSError as error:
        return error.errno


def mounted_points():
    # Any mount's source may hold bytes that are not UTF-8.
    with open("/proc/mounts", errors="surrogateescape") as f:
        return [line.split()[1] for line in f]


def mount_options(point):
    with open("/proc/mounts", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if fields[1] == point:
                return fields[3].split(",")
    return []


def sanitizer_report(log):
    return b"AddressSanitizer" in log or b"runtime error" in log or b"LeakSanitizer" in log


class Mount:
    """zarrmount SOURCE POINT -f [-d] [-o OPTION]...: mounted on creation,
    unmounted by stop() (and by run_mount_test.sh whatever happens)."""

    def __init__(self, source=SOURCE, *options, debug=True, env=None, mode=0o755):
        self.point = tempfile.mkdtemp(prefix="zm-hostile-", dir=PARENT)
        os.chmod(self.point, mode)
        self.log_path = self.point + ".log"
        args = [BINARY, source, self.point, "-f"] + (["-d"] if debug else [])
        for option in options:
            args += ["-o", option]
        self.log_file = open(self.log_path, "wb")
        self.daemon = subprocess.Popen(args, stdout=self.log_file, stderr=subprocess.STDOUT,
                                       env=env if env is not None else daemon_env())
        self.status = None
        while self.point not in mounted_points():
            if self.daemon.poll() is not None:
                self.stop()
                raise RuntimeError(f"mount failed: {self.log().decode(errors='replace').strip()}")
            time.sleep(0.02)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        status = self.stop()
        log = self.log()
        check(f"{os.path.basename(self.point)}: unmounted, the daemon exits 0 and logged no sanitizer report",
              status == 0 and not sanitizer_report(log), f"status {status}\n{log[-3000:].decode(errors='replace')}")

    def path(self, relative=b""):
        if isinstance(relative, str):
            relative = relative.encode()
        # Joined as text: a path that starts with "/" stays under the mount.
        return self.point.encode() + b"/" + relative if relative else self.point.encode()

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read()

    def alive(self):
        return self.daemon.poll() is None and self.point in mounted_points()

    def memory(self):
        """VmRSS, VmHWM and VmSize of the daemon, in KiB."""
        values = {}
        with open(f"/proc/{self.daemon.pid}/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("VmRSS", "VmHWM", "VmSize"):
                    values[name] = int(rest.split()[0])
        return values

    def stop(self):
        """Unmounts and waits for the daemon; its exit status."""
        if self.point in mounted_points():
            done = subprocess.run(["fusermount3", "-u", self.point], capture_output=True)
            if done.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", self.point], capture_output=True)
        if self.daemon.poll() is None:
            try:
                self.daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.daemon.send_signal(signal.SIGKILL)
                self.daemon.wait()
        self.status = self.daemon.returncode
        self.log_file.close()
        try:
            os.rmdir(self.point)
        except OSError:
            pass
        return self.status


def check_open_files(mount, when):
    """The daemon holds no file open but the source, /dev/fuse and its own
    (pipes, sockets, anonymous inodes, the disk cache, spill files)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(PARENT, "cache")
    other = []
    for fd in os.listdir(f"/proc/{mount.daemon.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{mount.daemon.pid}/fd/{fd}")
        except OSError:
            continue
        allowed = (target == os.path.realpath(SOURCE) or target == "/dev/fuse" or target == "/dev/null"
                   or re.match(r"(pipe|socket|anon_inode):", target) or target.startswith(os.path.realpath(cache))
                   or target.startswith(mount.log_path) or target.endswith(" (deleted)")
                   or target.startswith("/dev/pts/"))
        if not allowed:
            other.append(target)
    check(f"{when}: the daemon holds no other file open", not other, "\n".join(other))


# ---- The list ---------------------------------------------------------------------------

EXPECTED = {"ENOENT": errno.ENOENT, "ENAMETOOLONG": errno.ENAMETOOLONG, "ENOTDIR": errno.ENOTDIR,
            "EINVAL": errno.EINVAL, "OK": 0}


def decode(text):
    """A path as hostile_paths.txt writes it, as bytes (escapes in its header)."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        kind = text[i + 1]
        if kind == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        elif kind == "u":
            end = text.index("}", i)
            out += chr(int(text[i + 3:end], 16)).encode("utf-8", "surrogatepass")
            i = end + 1
        elif kind == "R":
            count_end = text.index("}", i)
            count = int(text[i + 3:count_end])
            # TEXT runs to its matching brace (it may hold escapes with braces).
            depth, j = 0, count_end + 1
            while True:
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            out += decode(text[count_end + 2:j]) * count
            i = j + 1
        else:
            out += {"s": b" ", "t": b"\t", "n": b"\n", "r": b"\r", "\\": b"\\"}[kind]
            i += 2
    return bytes(out)


def load_list(path=LIST):
    """[(line number, expected, category, path bytes, reason piece or None)]."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split(None, 3)
            if len(fields) < 3 or not all(e in EXPECTED for e in fields[0].split("|")):
                raise ValueError(f"{path}:{number}: not EXPECTED CATEGORY PATH [REASON]: {line!r}")
            reason = fields[3] if len(fields) == 4 else None
            entries.append((number, fields[0], fields[1], decode(fields[2]), reason))
    return entries


# ---- What the daemon logs ---------------------------------------------------------------

TRACED_PATH_MAX = 200  # src/fs/fuse.c: ZM__TRACED_PATH_MAX


def as_logged(path):
    """path as -d shows it in "lookup PATH: missing: REASON" (src/fs/log.c
    folds newlines to spaces and other control bytes to '?'; fuse.c cuts long
    paths)."""
    if len(path) > TRACED_PATH_MAX:
        path = path[:TRACED_PATH_MAX] + b"..."
    return bytes(b" "[0] if c in (10, 13) else b"?"[0] if c < 0x20 or c == 0x7f else c for c in path)


def missing_lines(log):
    """{logged path: [reason, ...]} of every "lookup PATH: missing: REASON" line (without the
    request's time, which -d adds at the end)."""
    found = {}
    for match in re.finditer(rb"lookup (.*?): missing: (.*?)(?: \(\d+\.\d{3} ms, at \d+\.\d{6} s\))?$", log,
                             re.M):
        found.setdefault(match.group(1), []).append(match.group(2))
    return found


def failing_path(point, path):
    """Walks path as the kernel does ("" and "." skipped, ".." up, links
    followed) and returns the daemon's path of the first name that does not
    exist, or None if it all exists, leaves the mount or the kernel refuses."""
    queue = path.split(b"/")
    stack = []
    hops = 0
    while queue:
        name = queue.pop(0)
        if name in (b"", b"."):
            continue
        if name == b"..":
            if not stack:
                return None
            stack.pop()
            continue
        candidate = stack + [name]
        try:
            st = os.lstat(os.path.join(point, b"/".join(candidate)))
        except OSError as error:
            return b"/".join(candidate) if error.errno == errno.ENOENT else None
        if (st.st_mode & 0o170000) == 0o120000:
            hops += 1
            if hops > 40:
                return None
            queue = os.readlink(os.path.join(point, b"/".join(candidate))).split(b"/") + queue
            continue
        stack = candidate
    return None
