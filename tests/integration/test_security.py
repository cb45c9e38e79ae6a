#!/usr/bin/python3
"""Security of a live mount (issue 7, "Security"), against the real
zarrmount on fixtures/sources/h5ad/full-csr.h5ad:

- read-only everywhere: every call that would change something is EROFS,
  call by call, on files, directories and links of each kind: first as the
  kernel answers on the ro mount, then (after `mount -o remount,rw`) as the
  daemon's own handlers answer, where writes through a descriptor the kernel
  opened by itself (write, fallocate, ftruncate, copy_file_range) reach them
  too; nothing changed afterwards;
- allow_other: default_permissions is on; files carry the source's read bits
  (no write bit, no execute bit), directories those plus search, links 0777,
  owned by the source's owner and group, for several source modes; a 0640
  source owned by another user is readable by a member of its group and not
  by nobody, a 0644 source is readable by nobody; without allow_other nobody
  cannot even look;
- nothing outside the source is reachable: a walk of the whole listed tree
  finds no link and nothing whose real path leaves the mount; every share=
  and pct= link (probed under every seed directory of every method) points
  to a k= directory beside it: inside the mount and inside its method's tree;
  the daemon holds no file open but the source, /dev/fuse and its own;
- no request makes the daemon allocate without bound: views with k near 2^32
  and 2^64, B near 2^63, G at the edge of 2^53 for 1, 2 and 3 columns, the
  largest minimum and seed, read (metadata, a walked chunk), and deep paths:
  the daemon's peak resident memory stays below MEMORY_BOUND_KIB.

Every mount is unmounted in every outcome (and run_mount_test.sh unmounts
whatever a crash leaves). No step has a time limit. Prints TAP.
"""
import errno
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_mount import (PARENT, SANITIZED, SOURCE, SOURCE_CELLS, Mount, check, check_open_files,  # noqa: E402
                        error_of, mount_options, mounted_points, remount_as, report)

NOBODY = 65534
OWNER, GROUP, MEMBER = 1234, 5678, 4321  # the private source's owner, group and a member of it
# The daemon's peak resident memory after the allocation probes, over its
# resident memory once mounted and warmed up: 32 MiB (the views the probes
# build, 32 kept, their chunks made ahead, malloc arenas of their threads)
# plus 64 KiB a cell of the source. An allocation sized by k, B, G or the
# minimum (2^32 cells: 16 GiB of positions) is far past it. Doubled under
# AddressSanitizer (its allocator keeps metadata and a quarantine).
MEMORY_BOUND_KIB = (32 * 1024 + 64 * SOURCE_CELLS) * (2 if SANITIZED else 1)


# ---- Read-only, call by call ---------------------------------------------------------------

def write_through(path, flags):
    """Opens path with flags and writes a byte: where the kernel opens files
    without asking the daemon, the write is what the daemon refuses."""
    fd = os.open(path, flags)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


def on_writable_fd(path, action):
    """Opens path for writing and does action(fd) (refused at the open or at
    the action)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        action(fd)
    finally:
        os.close(fd)


def copy_into(path, other):
    """copy_file_range from another file of the mount (across file systems
    the kernel refuses it with EXDEV before asking)."""
    source = os.open(other, os.O_RDONLY)
    try:
        on_writable_fd(path, lambda fd: os.copy_file_range(source, fd, 16))
    finally:
        os.close(source)


def file_calls(p, other):
    return {
        "open O_WRONLY": (write_through, p, os.O_WRONLY),
        "open O_RDWR": (write_through, p, os.O_RDWR),
        "open O_WRONLY|O_APPEND": (write_through, p, os.O_WRONLY | os.O_APPEND),
        "open O_RDONLY|O_TRUNC": (os.open, p, os.O_RDONLY | os.O_TRUNC),
        "open O_WRONLY|O_TRUNC": (write_through, p, os.O_WRONLY | os.O_TRUNC),
        "open O_WRONLY|O_CREAT (existing)": (write_through, p, os.O_WRONLY | os.O_CREAT),
        "truncate": (os.truncate, p, 0),
        "unlink": (os.unlink, p),
        "rename away": (os.rename, p, p + b".moved"),
        "rename over another file": (os.rename, p, other),
        "link": (os.link, p, p + b".hardlink"),
        "chmod": (os.chmod, p, 0o666),
        "chown": (os.chown, p, 1, 1),
        "utime (times)": (os.utime, p, (1, 1)),
        "utime (now)": (os.utime, p, None),
        "setxattr user.": (os.setxattr, p, "user.test", b"1"),
        "setxattr trusted.": (os.setxattr, p, "trusted.test", b"1"),
        "removexattr": (os.removexattr, p, "user.test"),
    }


def descriptor_calls(p, other):
    """What only a descriptor open for writing can do (reaches the daemon
    once the mount is rw)."""
    return {
        "pwrite": (on_writable_fd, p, lambda fd: os.pwrite(fd, b"x", 0)),
        "ftruncate": (on_writable_fd, p, lambda fd: os.ftruncate(fd, 0)),
        "fallocate": (on_writable_fd, p, lambda fd: os.posix_fallocate(fd, 0, 4096)),
        "copy_file_range into it": (copy_into, p, other),
    }


def directory_calls(p, other):
    """Removing or renaming a mount point is EBUSY on any file system, and
    unlink of a directory EISDIR once the mount is writable: not asked."""
    calls = {
        "mkdir inside": (os.mkdir, p + b"/new-dir"),
        "create a file inside": (os.open, p + b"/new-file", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
        "mknod a fifo inside": (os.mkfifo, p + b"/new-fifo"),
        "mknod a file inside": (os.mknod, p + b"/new-node", 0o644 | stat.S_IFREG),
        "symlink inside": (os.symlink, b"k=1", p + b"/new-link"),
        "chmod": (os.chmod, p, 0o777),
        "chown": (os.chown, p, 1, 1),
        "utime": (os.utime, p, (1, 1)),
        "setxattr": (os.setxattr, p, "user.test", b"1"),
        "removexattr": (os.removexattr, p, "user.test"),
    }
    if other is not None:  # not the root
        calls.update({"rmdir": (os.rmdir, p), "rename away": (os.rename, p, p + b".moved"),
                      "rename over another directory": (os.rename, p, other)})
    return calls


def link_calls(p):
    """(rmdir of a link is ENOTDIR and user. attributes on links EPERM on any
    writable file system: not asked.)"""
    return {
        "unlink": (os.unlink, p),
        "rename away": (os.rename, p, p + b".moved"),
        "lchown": (os.lchown, p, 1, 1),
        "utime (no follow)": (utime_nofollow, p),
        "setxattr (no follow)": (setxattr_nofollow, p),
        "removexattr (no follow)": (removexattr_nofollow, p),
        "chmod (follows to its directory)": (os.chmod, p, 0o777),
        "mkdir through it": (os.mkdir, p + b"/new-dir"),
    }


def utime_nofollow(p):
    os.utime(p, (1, 1), follow_symlinks=False)


def setxattr_nofollow(p):
    os.setxattr(p, "trusted.test", b"1", follow_symlinks=False)


def removexattr_nofollow(p):
    os.removexattr(p, "trusted.test", follow_symlinks=False)


TARGETS = {
    "file (.zgroup of a view)": ("file", b"uniform/seed0/k=10/.zgroup", b"uniform/seed0/k=10/.zattrs"),
    "file (a chunk)": ("file", b"uniform/seed0/k=10/X/data/0", b"uniform/seed0/k=10/X/indptr/0"),
    "file (.zmetadata of full/)": ("file", b"full/.zmetadata", b"full/.zgroup"),
    "file (.zarrmount/info.json)": ("file", b".zarrmount/info.json", b".zarrmount/stats.json"),
    "directory (the root)": ("directory", b"", None),
    "directory (a method)": ("directory", b"stratified", b"uniform"),
    "directory (a seed)": ("directory", b"blocks/B=7/seed3", b"blocks/B=7/seed4"),
    "directory (a view)": ("directory", b"spatial/X_umap/seed0/k=10", b"spatial/X_umap/seed0/k=11"),
    "directory (an array)": ("directory", b"full/obsm/X_pca", b"full/obsm/X_umap"),
    "link (share=)": ("link", b"uniform/seed0/share=0.5", None),
    "link (pct=)": ("link", b"stratified/cell_type/balanced/min=1/seed2/pct=50", None),
}


def erofs_battery(mount, phase):
    tested = 0
    for label, (kind, relative, other) in TARGETS.items():
        p = mount.path(relative)
        if kind == "file":
            calls = file_calls(p, mount.path(other))
            if phase == "daemon":
                calls.update(descriptor_calls(p, mount.path(other)))
        elif kind == "directory":
            calls = directory_calls(p, mount.path(other) if other else None)
        else:
            calls = link_calls(p)
        for name, (call, *args) in calls.items():
            code = error_of(call, *args)
            check(f"EROFS ({phase}): {label}: {name}", code == errno.EROFS, errno.errorcode.get(code, str(code)))
            tested += 1
        if kind == "file" and phase == "daemon":
            check(f"EROFS ({phase}): {label}: access(W_OK) is refused", not os.access(p, os.W_OK))
            tested += 1
    return tested


def snapshot(mount):
    """What the battery must leave as it was."""
    out = {}
    for label, (kind, relative, _) in TARGETS.items():
        p = mount.path(relative)
        st = os.lstat(p)
        out[label] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_size, st.st_mtime_ns,
                      open(p, "rb").read() if kind == "file" and b"stats.json" not in relative else
                      os.readlink(p) if kind == "link" else sorted(os.listdir(p)))
    return out


def check_read_only():
    with Mount(SOURCE, "codec=none") as mount:
        check("mounted read-only (ro in /proc/mounts)", "ro" in mount_options(mount.point))
        before = snapshot(mount)
        count = erofs_battery(mount, "kernel")
        check("EROFS (kernel): nothing changed", snapshot(mount) == before)
        done = remount_as(mount.point, "rw")
        if check("remount rw (so that the daemon's handlers answer)", done.returncode == 0, done.stderr):
            try:
                count += erofs_battery(mount, "daemon")
            finally:
                back = remount_as(mount.point, "ro")
                check("remount ro again", back.returncode == 0, back.stderr)
            log = mount.log().decode(errors="replace")
            handled = ["create", "mkdir", "unlink", "rmdir", "rename", "link", "symlink", "setattr", "setxattr",
                       "removexattr", "mknod", "write", "fallocate", "copy_file_range"]
            missing = [name for name in handled if not re.search(rf"\b{name}\b[^\n]*read-only file system", log)]
            check("EROFS (daemon): every kind of change reached a handler that refused it (-d log)", not missing,
                  str(missing))
        check("EROFS: nothing changed after both batteries", snapshot(mount) == before)
        check("the daemon is alive after the batteries", mount.alive())
    return count


# ---- Permissions with allow_other ---------------------------------------------------------

def as_user(uid, gid, *command):
    done = subprocess.run(list(command), capture_output=True, user=uid, group=gid, extra_groups=[])
    done.stdout = done.stdout.decode(errors="replace")
    done.stderr = done.stderr.decode(errors="replace")
    return done


def source_copy(name, mode, uid=0, gid=0):
    directory = os.path.join(PARENT, "sources")
    os.makedirs(directory, mode=0o711, exist_ok=True)
    path = os.path.join(directory, name)
    shutil.copy(SOURCE, path)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def check_modes(mount, mode, uid, gid, label):
    read = mode & 0o444
    want = {"file": read, "directory": read | (read >> 2), "link": 0o777}
    wrong = []
    for relative, kind in ((b"full/.zgroup", "file"), (b"uniform/seed0/k=10/X/data/0", "file"),
                           (b".zarrmount/info.json", "file"), (b"", "directory"), (b"full/obsm", "directory"),
                           (b"uniform/seed0/k=10", "directory"), (b"uniform/seed0/pct=10", "link")):
        st = os.lstat(mount.path(relative))
        if stat.S_IMODE(st.st_mode) != want[kind] or st.st_uid != uid or st.st_gid != gid:
            wrong.append(f"{relative!r}: {oct(stat.S_IMODE(st.st_mode))} {st.st_uid}:{st.st_gid}, want "
                         f"{oct(want[kind])} {uid}:{gid}")
    check(f"allow_other, {label}: files {oct(want['file'])}, directories {oct(want['directory'])}, links 0o777, "
          f"owned {uid}:{gid}", not wrong, "\n".join(wrong))


def check_allow_other():
    os.chmod(PARENT, 0o711)  # other users may pass through to the mount points, not list them
    public = source_copy("public.h5ad", 0o644)
    with Mount(public, debug=False) as mount:
        done = as_user(NOBODY, NOBODY, "cat", mount.path("full/.zgroup"))
        check("without allow_other: nobody cannot read the mount", done.returncode != 0, done.stdout)
        done = as_user(NOBODY, NOBODY, "stat", mount.point)
        check("without allow_other: nobody cannot even stat its root", done.returncode != 0, done.stdout)
    private = source_copy("private.h5ad", 0o640, OWNER, GROUP)
    with Mount(private, "allow_other", debug=False) as mount:
        options = mount_options(mount.point)
        check("allow_other: default_permissions is on (/proc/mounts)",
              "allow_other" in options and "default_permissions" in options, str(options))
        check_modes(mount, 0o640, OWNER, GROUP, "a 0640 source")
        for who, uid, gid, may in (("nobody", NOBODY, NOBODY, False), ("the source's owner", OWNER, NOBODY, True),
                                   ("a member of the source's group", MEMBER, GROUP, True)):
            for what, command in (("read a file", ["cat", mount.path("uniform/seed0/k=10/.zattrs")]),
                                  ("read a chunk", ["cat", mount.path("full/X/data/0")]),
                                  ("list a view", ["ls", mount.path("uniform/seed0/k=10")]),
                                  ("read info.json", ["cat", mount.path(".zarrmount/info.json")])):
                done = as_user(uid, gid, *command)
                check(f"allow_other, a 0640 source: {who} {'can' if may else 'cannot'} {what}",
                      (done.returncode == 0) == may, done.stderr.strip())
        done = as_user(NOBODY, NOBODY, "/usr/bin/python3", "-c",
                       "import os,sys\ntry: os.open(sys.argv[1], os.O_WRONLY)\n"
                       "except OSError as e: print(e.errno)", mount.path("full/.zgroup"))
        check("allow_other: writing is refused to other users too", done.stdout.strip() in (str(errno.EROFS),
              str(errno.EACCES)), done.stdout + done.stderr)
        check("allow_other: root reads a 0640 source", open(mount.path("full/.zgroup"), "rb").read().startswith(b"{"))
    with Mount(public, "allow_other", debug=False) as mount:
        check_modes(mount, 0o644, 0, 0, "a 0644 source")
        for what, command in (("reads a file", ["cat", mount.path("uniform/seed0/k=10/.zattrs")]),
                              ("reads a chunk", ["cat", mount.path("full/X/data/0")]),
                              ("lists a view", ["ls", mount.path("uniform/seed0/k=10")]),
                              ("follows a share= link", ["ls", mount.path("uniform/seed0/share=0.5/")])):
            done = as_user(NOBODY, NOBODY, *command)
            check(f"allow_other, a 0644 source: nobody {what}", done.returncode == 0, done.stderr.strip())
        done = as_user(NOBODY, NOBODY, "/usr/bin/python3", "-c",
                       "import os,sys\ntry: os.open(sys.argv[1], os.O_WRONLY)\n"
                       "except OSError as e: print(e.errno)", mount.path("full/.zgroup"))
        check("allow_other, a 0644 source: nobody's open for writing is EROFS", done.stdout.strip() == str(errno.EROFS),
              done.stdout + done.stderr)
    # The directories above the source do not protect the mount: a 0644 file
    # in a 0700 directory is readable by nobody directly, by everyone through
    # an allow_other mount (docs/mount.md, "Permissions"); the log says so.
    hidden_directory = os.path.join(PARENT, "hidden-home")
    os.makedirs(hidden_directory, exist_ok=True)
    os.chmod(hidden_directory, 0o700)
    hidden = os.path.join(hidden_directory, "public-inside.h5ad")
    shutil.copyfile(SOURCE, hidden)
    os.chmod(hidden, 0o644)
    done = as_user(NOBODY, NOBODY, "cat", hidden)
    check("a 0644 source in a 0700 directory: nobody cannot read it directly", done.returncode != 0,
          done.stdout)
    with Mount(hidden, "allow_other", debug=False) as mount:
        done = as_user(NOBODY, NOBODY, "cat", mount.path("full/.zgroup"))
        check("a 0644 source in a 0700 directory: nobody reads it through an allow_other mount",
              done.returncode == 0, done.stderr.strip())
        log = mount.log().decode(errors="replace")
        check("a 0644 source in a 0700 directory: the log says the directory does not protect the mount",
              f"allow_other: {hidden_directory} keeps other users out of the source" in log, log)
    for mode in (0o600, 0o604, 0o755, 0o400):
        path = source_copy(f"mode-{mode:o}.h5ad", mode, OWNER, GROUP)
        with Mount(path, "allow_other", debug=False) as mount:
            check_modes(mount, mode, OWNER, GROUP, f"a {mode:04o} source")
            done = as_user(NOBODY, NOBODY, "cat", mount.path("full/.zgroup"))
            check(f"allow_other, a {mode:04o} source: nobody {'can' if mode & 0o004 else 'cannot'} read",
                  (done.returncode == 0) == bool(mode & 0o004), done.stderr.strip())


# ---- Nothing outside the source -------------------------------------------------------------

LINK_PROBES = (b"share=0.5", b"share=1", b"share=1e-9", b"share=+0.25", b"pct=100", b"pct=33.3", b"pct=0.001")


def check_confinement():
    with Mount(SOURCE, "codec=none", debug=False) as mount:
        root = os.path.realpath(mount.point).encode()
        entries = directories = 0
        links, escaped, seeds = [], [], []
        # where/ holds every method again under each value of each column: one value's
        # tree stands for them all (mount-sets reads where/ itself), so that the walk stays
        # the size of the root's.
        where = os.path.join(mount.path(), b"where")
        one_value = os.path.join(where, b"cell_type", b"T cell")
        for directory, subdirectories, files in os.walk(mount.path(), followlinks=False):
            if directory.rstrip(b"/") == where or directory.rstrip(b"/") == os.path.dirname(one_value):
                subdirectories[:] = [d for d in subdirectories
                                     if os.path.join(directory, d) in (os.path.dirname(one_value), one_value)]
            directories += 1
            entries += len(subdirectories) + len(files)
            real = os.path.realpath(directory)
            if real != root and not real.startswith(root + b"/"):
                escaped.append(directory)
            for name in subdirectories + files:
                if os.path.islink(os.path.join(directory, name)):
                    links.append(os.path.join(directory, name))
            if re.fullmatch(rb"seed[0-9]+", os.path.basename(directory)):
                seeds.append(directory)
        check(f"walk: {entries} entries in {directories} directories, none outside the mount", not escaped,
              repr(escaped[:5]))
        check("walk: listings hold no link (share= and pct= are looked up, not listed)", not links, repr(links[:5]))
        methods = {os.path.relpath(s, mount.path()).split(b"/")[0] for s in seeds}
        check(f"walk: seed directories under every method ({len(seeds)})",
              methods == {b"uniform", b"blocks", b"stratified", b"spatial", b"where"}, repr(methods))
        bad = []
        probed = 0
        for seed in seeds:
            method_tree = os.path.relpath(seed, mount.path()).split(b"/")[0]
            for probe in LINK_PROBES:
                link = os.path.join(seed, probe)
                probed += 1
                st = os.lstat(link)
                target = os.readlink(link)
                real = os.path.realpath(link)
                if not stat.S_ISLNK(st.st_mode) or not re.fullmatch(rb"k=[1-9][0-9]*", target):
                    bad.append(f"{link!r}: {target!r}")
                elif real != os.path.join(os.path.realpath(seed), target) or not os.path.isdir(real):
                    bad.append(f"{link!r} -> {real!r}: not the k= directory beside it")
                elif not real.startswith(os.path.join(root, method_tree) + b"/"):
                    bad.append(f"{link!r} -> {real!r}: outside its method's tree")
                elif not os.path.isfile(os.path.join(link, b".zgroup")):
                    bad.append(f"{link!r}: its store has no .zgroup")
        check(f"links: {probed} share=/pct= links under {len(seeds)} seed directories point to the k= directory "
              f"beside them (inside the mount and their method's tree)", not bad and probed > 0, "\n".join(bad[:8]))
        check_open_files(mount, "after the walk")
        check("the daemon is alive after the walk", mount.alive())
        return entries, probed


# ---- Allocation bound --------------------------------------------------------------------------

BIG_VIEWS = [
    b"uniform/seed0/k=4294967295", b"uniform/seed4294967295/k=4294967296", b"uniform/seed1/k=18446744073709551615",
    b"blocks/B=9223372036854775807/seed0/k=4294967295", b"blocks/B=4294967296/seed2/k=18446744073709551615",
    b"blocks/B=1/seed3/k=4294967297",
    b"stratified/cell_type/balanced/min=4294967295/seed0/k=18446744073709551615",
    b"stratified/label_utf8/proportional/min=4294967295/seed4294967295/k=4294967296",
    b"spatial/X_umap/G=9007199254740991/cols=1/seed0/k=4294967295",
    b"spatial/X_umap/G=94906265/cols=0,1/seed1/k=18446744073709551615",
    b"spatial/X_pca/G=208063/cols=9,0,4/seed2/k=4294967296",
    b"spatial/X_pca/G=1/cols=0,1,2/seed3/k=4294967295",
]


def check_allocation():
    with Mount(SOURCE, debug=False) as mount:
        for view in (b"full", b"uniform/seed0/k=10"):
            open(mount.path(view + b"/.zmetadata"), "rb").read()
            open(mount.path(view + b"/X/data/0"), "rb").read()
        base = mount.memory()
        failed = []
        for view in BIG_VIEWS:
            try:
                metadata = json.loads(open(mount.path(view + b"/.zmetadata"), "rb").read())
                attrs = metadata["metadata"][".zattrs"]
                n_obs = metadata["metadata"]["obs/_index/.zarray"]["shape"][0]
                chunk = open(mount.path(view + b"/X/data/0"), "rb").read()
                os.listdir(mount.path(view + b"/obs"))
                if n_obs != SOURCE_CELLS or not chunk:
                    failed.append(f"{view!r}: {n_obs} cells, {len(chunk)} bytes of X/data/0 ({attrs})")
            except Exception as error:  # noqa: BLE001
                failed.append(f"{view!r}: {error!r}")
        check(f"{len(BIG_VIEWS)} views with k near 2^32 and 2^64, B near 2^63, G near 2^53 and the largest minimum "
              f"and seed: each holds the source's {SOURCE_CELLS} cells and reads", not failed, "\n".join(failed))
        deep = 0
        for path in (b"full" + b"/." * 1500 + b"/X", b"uniform/" + b"seed0/../" * 400 + b"seed0",
                     b"full/X" + b"/data/.." * 500, b"a/" * 2000 + b"a"):
            deep += 1
            error_of(os.stat, mount.path(path))
        after = mount.memory()
        growth = after["VmHWM"] - base["VmRSS"]
        check(f"allocation bound: peak VmHWM {after['VmHWM']} KiB is {growth} KiB over the warmed-up VmRSS "
              f"{base['VmRSS']} KiB (bound {MEMORY_BOUND_KIB} KiB: 32 MiB + 64 KiB x {SOURCE_CELLS} cells"
              f"{', doubled under ASan' if SANITIZED else ''})", growth < MEMORY_BOUND_KIB, str(after))
        check("the daemon is alive after the allocation probes", mount.alive())
        check_open_files(mount, "after the allocation probes")
        return len(BIG_VIEWS) + deep


def main():
    figures = {}
    for name, test in (("read-only", check_read_only), ("allow_other", check_allow_other),
                       ("confinement", check_confinement), ("allocation", check_allocation)):
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
