#!/usr/bin/python3
"""A disk cache only where it is private (issue 17, "Trust boundaries"),
against the real zarrmount on fixtures/sources/h5ad/full-csr.h5ad:

- as root, -o cache_dir= naming a directory that is not private to root
  (owned by another user; mode 0777, 0770, 0757 or 1777; a symbolic link to
  a good directory; below a directory others may write that is not
  sticky) refuses the mount in one line naming the directory and why; the
  daemon exits 2, nothing is mounted and nothing is written there;
- a default directory ($XDG_CACHE_HOME/zarrmount) that is not private
  (below a world-writable directory; owned by another user) mounts without
  a disk cache (stats.json diskCache null), said in one log line naming it,
  and nothing is made there;
- foreign files in a private cache (other names, someone's directory, a
  symbolic link named like an entry or a payload pointing at a victim's
  file, a space directory that is a link to a copy of the mount's own
  entries elsewhere) survive a mount that walks views and evicts under a
  tiny bound; the victim's files are untouched; the bytes served are a
  cacheless mount's; the log says once that they are left alone;
- a second, unprivileged user (made with useradd, removed with userdel -r in
  every outcome) runs the daemon with -o allow_other: its default cache is
  ~/.cache/zarrmount, 0700 and its own (every file in it too); root reads
  the mount through allow_other and gets a root mount's bytes; a cache
  directory of root's given to it is refused; the daemon holds no file open
  but the source, /dev/fuse and its own cache. For that run /dev/fuse is
  made 0666 and /etc/fuse.conf given user_allow_other, both restored
  exactly afterwards, whatever happens.

No step has a time limit (a generous timeout turns a hang into a failure).
Prints TAP. Needs root.
"""
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import traceback

import xxhash

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_mount import (BINARY, PARENT, SOURCE, Mount, check, daemon_env, mounted_points,  # noqa: E402
                        report, sanitizer_report)

NOBODY = 65534
CHUNK = "chunk_size=256"
VIEWS = ("uniform/seed3/k=40", "full")
WAIT = 120  # seconds for what must happen (a hang, not slowness, fails)
REFUSED = 2  # the daemon's exit status for a refused start (src/fs/fuse.c)


def tree_digest(root):
    """xxh3 of every file under root, by relative path."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = xxhash.xxh3_64_hexdigest(f.read())
    return out


def served(mount):
    return {view: tree_digest(mount.path(view).decode()) for view in VIEWS}


def stats(mount):
    with open(mount.path(".zarrmount/stats.json"), "rb") as f:
        return json.load(f)


def listing(directory):
    """Every path under directory (links not followed), with what it is."""
    out = {}
    for here, directories, files in os.walk(directory):
        for name in directories + files:
            path = os.path.join(here, name)
            st = os.lstat(path)
            what = (os.readlink(path) if stat.S_ISLNK(st.st_mode) else
                    open(path, "rb").read() if stat.S_ISREG(st.st_mode) else stat.S_IFMT(st.st_mode))
            out[os.path.relpath(path, directory)] = what
    return out


def new_point(name, owner=None):
    point = os.path.join(PARENT, name)
    os.makedirs(point, exist_ok=True)
    if owner is not None:
        os.chown(point, owner, owner)
    return point


def start_refused(options, env=None, user=None, point_owner=None):
    """Runs the daemon that must refuse to start: its exit status, its log
    (stderr and stdout) and whether anything got mounted."""
    point = new_point(f"refused-{len(os.listdir(PARENT))}", point_owner)
    args = [BINARY, SOURCE if user is None else user["source"], point, "-f"]
    for option in options:
        args += ["-o", option]
    try:
        done = subprocess.run(args, capture_output=True, timeout=WAIT, env=env or daemon_env(),
                              stdin=subprocess.DEVNULL, **({} if user is None else
                                                           {"user": user["uid"], "group": user["gid"],
                                                            "extra_groups": []}))
        status, log = done.returncode, (done.stdout + done.stderr).decode(errors="replace")
    except subprocess.TimeoutExpired as timeout:
        status, log = "hung", (timeout.stderr or b"").decode(errors="replace")
    was_mounted = point in mounted_points()
    if was_mounted:
        subprocess.run(["fusermount3", "-u", point], capture_output=True)
    os.rmdir(point)
    return status, log, was_mounted


def check_refused(label, directory, why, status, log, was_mounted):
    lines = [line for line in log.splitlines() if directory in line]
    check(f"{label}: refused (exit {REFUSED}), nothing mounted", status == REFUSED and not was_mounted,
          f"status {status}, mounted {was_mounted}\n{log}")
    check(f"{label}: one line names {os.path.basename(directory)} and why ({why})",
          len(lines) == 1 and "refused" in lines[0] and why in lines[0], log)


# ---- -o cache_dir= not private: refused ------------------------------------------------------

def untrusted_directories(base):
    """(label, directory given, the reason's words, directory that must stay as it was)."""
    os.makedirs(base, mode=0o755)
    cases = []
    for mode, why in ((0o777, "writable by its group and by others"), (0o770, "writable by its group"),
                      (0o757, "writable by others"), (0o1777, "writable by its group and by others")):
        path = os.path.join(base, f"mode-{mode:04o}")
        os.mkdir(path)
        os.chmod(path, mode)
        cases.append((f"a directory of mode {mode:04o}", path, why, path))
    path = os.path.join(base, "nobodys")
    os.mkdir(path, 0o700)
    os.chown(path, NOBODY, NOBODY)
    cases.append(("a directory owned by nobody", path, f"owned by uid {NOBODY}", path))
    good = os.path.join(base, "good")
    os.mkdir(good, 0o700)
    link = os.path.join(base, "link")
    os.symlink(good, link)
    cases.append(("a symbolic link to a good directory", link, "is a symbolic link", good))
    shared = os.path.join(base, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    cases.append(("a directory below a world-writable one (not sticky)", os.path.join(shared, "cache"),
                  "above it is writable by others and not sticky", shared))
    for _, _, _, kept in cases:
        if not os.path.islink(kept) and os.stat(kept).st_uid == 0:
            with open(os.path.join(kept, "theirs"), "w") as f:
                f.write("someone else's")
    return cases


def check_given_refused():
    cases = untrusted_directories(os.path.join(PARENT, "given"))
    for label, directory, why, kept in cases:
        before = listing(kept)
        status, log, was_mounted = start_refused([f"cache_dir={directory}"])
        check_refused(f"-o cache_dir=, {label}", directory, why, status, log, was_mounted)
        check(f"-o cache_dir=, {label}: nothing written there", listing(kept) == before,
              f"{before} -> {listing(kept)}")
    return len(cases)


# ---- The default not private: no disk cache -------------------------------------------------

def check_default_untrusted():
    base = os.path.join(PARENT, "default")
    os.makedirs(base, mode=0o755)
    shared = os.path.join(base, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    theirs = os.path.join(base, "theirs")
    os.makedirs(os.path.join(theirs, "zarrmount"), mode=0o700)
    os.chown(os.path.join(theirs, "zarrmount"), NOBODY, NOBODY)
    count = 0
    for label, xdg, why in (("below a world-writable directory", os.path.join(shared, "xdg"),
                             "above it is writable by others and not sticky"),
                            ("owned by nobody", theirs, f"owned by uid {NOBODY}")):
        env = daemon_env()
        env["XDG_CACHE_HOME"] = xdg
        before = listing(base)
        directory = os.path.join(xdg, "zarrmount")
        with Mount(SOURCE, CHUNK, debug=False, env=env) as mount:
            got = served(mount)
            disk = stats(mount)["diskCache"]
            log = mount.log().decode(errors="replace")
        lines = [line for line in log.splitlines() if directory in line]
        check(f"default cache {label}: mounts with no disk cache (diskCache null)", disk is None and got, str(disk))
        check(f"default cache {label}: one log line names it and why ({why})",
              len(lines) == 1 and "no disk cache" in lines[0] and why in lines[0], log)
        check(f"default cache {label}: nothing made or written there", listing(base) == before,
              f"{sorted(before)} -> {sorted(listing(base))}")
        count += 1
    return count


# ---- Foreign files in a private cache ---------------------------------------------------------

def check_foreign_files():
    base = os.path.join(PARENT, "foreign")
    cache = os.path.join(base, "cache")
    victim = os.path.join(base, "victim")
    os.makedirs(victim, mode=0o755)
    secret = os.path.join(victim, "secret")
    with open(secret, "wb") as f:
        f.write(b"the victim's secret " * 20)
    with Mount(SOURCE, "cache_dir=none", CHUNK, debug=False) as mount:
        reference = served(mount)
    # A first mount files the walked views' chunks.
    with Mount(SOURCE, f"cache_dir={cache}", CHUNK, debug=False) as mount:
        first = served(mount)
    check("foreign: a first mount serves a cacheless mount's bytes", first == reference)
    spaces = [os.path.join(cache, "v2", name) for name in os.listdir(os.path.join(cache, "v2"))]
    entries = sorted(os.path.join(space, name) for space in spaces for name in os.listdir(space)
                     if name.endswith(".entry"))
    payloads = sorted(os.path.join(space, name) for space in spaces for name in os.listdir(space)
                      if name.endswith(".data"))
    if not check("foreign: the first mount filed entries", len(entries) > 10 and len(spaces) == 1,
                 f"{len(entries)} entries in {len(spaces)} spaces"):
        return 0
    space = spaces[0]
    # A copy of the mount's own entries elsewhere (genuine names and
    # checksums), for a space directory that is a link to it.
    copy = os.path.join(victim, "copied-space")
    shutil.copytree(space, copy, symlinks=True)
    # Entries and payloads replaced by links to the victim's file.
    for path in entries[:3] + payloads[-3:]:
        os.unlink(path)
        os.symlink(secret, path)
    foreign = {
        os.path.join(cache, "notes.txt"): b"notes",
        os.path.join(cache, "v2", "README"): b"readme",
        os.path.join(space, "garbage.entry"): b"garbage",
        os.path.join(space, "tmp.12"): b"not a temporary file of the cache's",
        os.path.join(space, "tmp.1.2.3"): b"nor this",
        os.path.join(space, "0123456789ABCDEF.entry"): b"upper case",
        os.path.join(cache, "v2", "someone", "0123456789abcdef.entry"): b"someone's",
        os.path.join(space, "fedcba9876543210.entry", "inside"): b"in a directory named like an entry",
    }
    for path, content in foreign.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    links = {path: secret for path in entries[:3] + payloads[-3:]}
    victim_before = listing(victim)
    # Mount with a tiny bound: walking both views evicts many times over.
    with Mount(SOURCE, f"cache_dir={cache}", "cache_max=16K", CHUNK, debug=False) as mount:
        got = served(mount)
        disk = stats(mount)["diskCache"]
        log = mount.log().decode(errors="replace")
    check("foreign: the bytes served are a cacheless mount's (no link followed)", got == reference)
    check("foreign: the mount evicted", disk is not None and disk["evictions"] > 0, str(disk))
    check("foreign: stats.json counts the foreign files (diskCache.foreign)",
          disk is not None and disk.get("foreign", 0) > 0, str(disk))
    said = [line for line in log.splitlines() if "not its own" in line]
    check("foreign: the log says once that foreign files are left alone",
          len(said) == 1 and "left alone" in said[0] and cache in said[0], log)
    gone = [path for path, content in foreign.items() if not os.path.isfile(path) or
            open(path, "rb").read() != content]
    check(f"foreign: {len(foreign)} foreign files survive the census and eviction", not gone, str(gone))
    moved = [path for path, target in links.items() if not os.path.islink(path) or os.readlink(path) != target]
    check(f"foreign: {len(links)} links named like entries and payloads are left as they were", not moved,
          str(moved))
    check("foreign: the victim's files are untouched", listing(victim) == victim_before)
    # The space directory itself a link to the copy of its entries.
    shutil.rmtree(space)
    os.symlink(copy, space)
    copy_before = listing(copy)
    with Mount(SOURCE, f"cache_dir={cache}", "cache_max=16K", CHUNK, debug=False) as mount:
        got = served(mount)
        disk = stats(mount)["diskCache"]
        log = mount.log().decode(errors="replace")
    check("foreign: a space that is a link: the bytes served are a cacheless mount's", got == reference)
    check("foreign: a space that is a link: nothing read through it (no hit)",
          disk is not None and disk["hits"] == 0, str(disk))
    check("foreign: a space that is a link: nothing written or removed through it", listing(copy) == copy_before)
    check("foreign: a space that is a link: the link stays", os.readlink(space) == copy)
    said = [line for line in log.splitlines() if "could not keep" in line]
    check("foreign: a space that is a link: the writes it refused are said once", len(said) == 1 and
          "left alone" in said[0], log)
    return len(foreign) + len(links)


# ---- A second, unprivileged user with allow_other ------------------------------------------

class Restored:
    """A file's bytes (or a device's mode), its mode and owner, put back
    exactly on restore()."""

    def __init__(self, path, keep_bytes):
        self.path = path
        st = os.stat(path)
        self.mode, self.uid, self.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
        self.content = open(path, "rb").read() if keep_bytes else None

    def restore(self):
        if self.content is not None:
            with open(self.path, "wb") as f:
                f.write(self.content)
        os.chown(self.path, self.uid, self.gid)
        os.chmod(self.path, self.mode)

    def same(self):
        st = os.stat(self.path)
        return ((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (self.mode, self.uid, self.gid)
                and (self.content is None or open(self.path, "rb").read() == self.content))


def user_daemon(user, point, *options):
    args = [BINARY, user["source"], point, "-f"]
    for option in options:
        args += ["-o", option]
    log = open(point + ".log", "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=user["env"], user=user["uid"], group=user["gid"], extra_groups=[])
    deadline = time.monotonic() + WAIT
    while point not in mounted_points() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process, log


def stop_daemon(process, point):
    if point in mounted_points():
        done = subprocess.run(["fusermount3", "-u", point], capture_output=True)
        if done.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
    try:
        return process.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def open_files(pid, allowed_prefixes, allowed):
    other = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target in allowed or re.match(r"(pipe|socket|anon_inode):", target) or any(
                target == prefix or target.startswith(prefix + "/") for prefix in allowed_prefixes):
            continue
        # A walk's spill file (O_TMPFILE, never named) in the spill directory.
        if re.fullmatch(r"/var/tmp/#\d+ \(deleted\)", target):
            continue
        other.append(target)
    return other


def check_second_user():
    name = f"zmtest{os.getpid()}"
    fuse_device = Restored("/dev/fuse", keep_bytes=False)
    fuse_conf_existed = os.path.exists("/etc/fuse.conf")
    fuse_conf = Restored("/etc/fuse.conf", keep_bytes=True) if fuse_conf_existed else None
    parent_mode = stat.S_IMODE(os.stat(PARENT).st_mode)
    made_user = False
    count = 0
    process = None
    try:
        done = subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                              capture_output=True, text=True)
        made_user = done.returncode == 0
        if not check(f"second user: useradd {name}", made_user, done.stderr):
            return 0
        entry = pwd.getpwnam(name)
        home = entry.pw_dir
        os.chmod("/dev/fuse", 0o666)
        if fuse_conf_existed:
            with open("/etc/fuse.conf", "ab") as f:
                f.write(b"\nuser_allow_other\n")
        else:
            with open("/etc/fuse.conf", "wb") as f:
                f.write(b"user_allow_other\n")
        os.chmod(PARENT, 0o711)  # others may pass through to their mount point, not list
        area = os.path.join(PARENT, "second")
        os.makedirs(area, mode=0o755)
        source = os.path.join(area, "source.h5ad")
        shutil.copy(SOURCE, source)
        os.chmod(source, 0o644)
        env = {"HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8"}
        if "ASAN_OPTIONS" in daemon_env():
            env["ASAN_OPTIONS"] = daemon_env()["ASAN_OPTIONS"]
        for variable in ("UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if variable in os.environ:
                env[variable] = os.environ[variable]
        user = {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": home, "source": source, "env": env}
        point = new_point("second/point", entry.pw_uid)
        process, log = user_daemon(user, point, "allow_other", CHUNK)
        log_path = point + ".log"
        mounted = point in mounted_points()
        if not check(f"second user: {name} mounts with -o allow_other", mounted,
                     open(log_path, "rb").read().decode(errors="replace")):
            return 0
        cache = os.path.join(home, ".cache", "zarrmount")
        try:
            as_other = {view: tree_digest(os.path.join(point, view)) for view in VIEWS}
            other_error = ""
        except OSError as error:
            as_other, other_error = None, repr(error)
        check("second user: root reads the mount through allow_other", as_other is not None, other_error)
        other = open_files(process.pid, [os.path.realpath(cache)],
                           {os.path.realpath(source), "/dev/fuse", "/dev/null", log_path})
        check("second user: the daemon holds no file open but the source, /dev/fuse and its own cache",
              not other, "\n".join(other))
        status = stop_daemon(process, point)
        process = None
        log.close()
        text = open(log_path, "rb").read()
        check("second user: the daemon exits 0 and logged no sanitizer report",
              status == 0 and not sanitizer_report(text), f"status {status}\n{text.decode(errors='replace')}")
        with Mount(source, CHUNK, "cache_dir=none", debug=False) as mount:
            as_root = served(mount)
        check("second user: root reading another user's mount gets a root mount's bytes", as_other == as_root)
        # Its cache: the default for a user, private, its own.
        wrong = []
        for directory in (os.path.join(home, ".cache"), cache):
            st = os.lstat(directory) if os.path.lexists(directory) else None
            if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != entry.pw_uid or \
                    stat.S_IMODE(st.st_mode) != 0o700:
                wrong.append(f"{directory}: {None if st is None else (oct(st.st_mode), st.st_uid)}")
        files = 0
        for here, directories, names in os.walk(cache):
            for each in directories + names:
                st = os.lstat(os.path.join(here, each))
                files += stat.S_ISREG(st.st_mode)
                if st.st_uid != entry.pw_uid or st.st_mode & 0o077:
                    wrong.append(f"{os.path.join(here, each)}: {oct(st.st_mode)} uid {st.st_uid}")
        check(f"second user: its default cache is {cache}, 0700, its own, with every file in it",
              not wrong and files > 0, "\n".join(wrong) or f"{files} files")
        # A directory of root's given to it: refused.
        theirs = os.path.join(area, "roots-cache")
        os.mkdir(theirs, 0o755)
        status, text, was_mounted = start_refused([f"cache_dir={theirs}"], env=env, user=user,
                                                  point_owner=entry.pw_uid)
        check_refused("second user, -o cache_dir= of root's", theirs, f"owned by uid 0, not by uid {entry.pw_uid}",
                      status, text, was_mounted)
        check("second user, -o cache_dir= of root's: nothing written there", os.listdir(theirs) == [])
        count = 1
    finally:
        if process is not None:
            stop_daemon(process, os.path.join(PARENT, "second", "point"))
        if made_user:
            done = subprocess.run(["userdel", "-r", name], capture_output=True, text=True)
            check(f"second user: userdel -r {name}", done.returncode in (0, 12) and not os.path.exists(f"/home/{name}")
                  and subprocess.run(["id", name], capture_output=True).returncode != 0, done.stderr)
        fuse_device.restore()
        if fuse_conf_existed:
            fuse_conf.restore()
        elif os.path.exists("/etc/fuse.conf"):
            os.unlink("/etc/fuse.conf")
        os.chmod(PARENT, parent_mode)
        check("second user: /dev/fuse and /etc/fuse.conf are as they were",
              fuse_device.same() and (fuse_conf.same() if fuse_conf_existed else not os.path.exists("/etc/fuse.conf")))
    return count


def on_signal(number, frame):
    raise SystemExit(f"signal {number}")


def main():
    if os.geteuid() != 0:
        print("1..0 # SKIP needs root (chown, useradd, /dev/fuse)")
        return 0
    # A timeout's SIGTERM still restores /dev/fuse and /etc/fuse.conf.
    signal.signal(signal.SIGTERM, on_signal)
    figures = {}
    for name, test in (("given", check_given_refused), ("default", check_default_untrusted),
                       ("foreign", check_foreign_files), ("second user", check_second_user)):
        try:
            figures[name] = test()
        except Exception:  # noqa: BLE001
            check(name, False, traceback.format_exc(limit=4))
    left = [p for p in mounted_points() if p.startswith(PARENT + "/")]
    check("no mount left behind", not left, repr(left))
    print(f"# figures: {figures}", file=sys.stderr)
    return report()


if __name__ == "__main__":
    sys.exit(main())
