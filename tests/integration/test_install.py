#!/usr/bin/python3
"""The Debian package, as a user meets it (issue 24; suite 'package').

scripts/package builds zarrmount_VERSION_ARCH.deb (a release build of its
own, kept in BUILD/package-build between runs), and then, in order:
- the .deb holds what `meson install` installs (plus the copyright), its
  Depends name libfuse3 and fuse3; `dpkg -i` installs it;
- the .deb's version, `zarrmount --version`'s and `-V`'s first line and the
  man page's .TH are meson's project version; `man -w zarrmount` finds it;
- `mount -t fuse.zarrmount SRC MNT -o ro` mounts through mount.fuse3 with
  the installed /usr/bin/zarrmount, whose file/ view holds the source's X;
  `umount MNT` unmounts and the daemon ends;
- every option mount(8) and fstab pass is taken (nosuid, nodev, noexec,
  noatime, nofail, _netdev, defaults, x-systemd.*), and ours pass through
  (codec=, chunk_size=, cache_dir=); without ro (mount(8) then passes rw)
  the mount is refused in one line; a mount over a mounted point and over
  a non-empty directory are refused, -o nonempty allows the latter;
- an /etc/fstab line mounts with `mount MNT` (the file restored after);
- the example systemd units pass `systemd-analyze verify` and their Options=
  mount (started as units only where systemd is PID 1: not in a container);
- `dpkg --purge` removes it, in every outcome, leaving the machine as it
  was. Skipped (saying why) if a zarrmount package is installed already, or
  not run as root.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

BINARY = os.environ.get("ZM_BINARY", "build/test/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SOURCE = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
PARENT = os.environ.get("ZM_MOUNT_PARENT") or tempfile.mkdtemp(prefix="zm-mounts-")
PACKAGE_BUILD = os.path.join(os.path.dirname(os.path.abspath(BINARY)), "package-build")
FSTAB = "/etc/fstab"
INSTALLED = "/usr/bin/zarrmount"
# What mount(8) runs with: the system's PATH only (so the installed zarrmount
# is the one mount.fuse3 finds), the test's disk cache (not /var/cache).
SYSTEM_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", os.path.join(PARENT, "cache")),
              "LANG": "C.UTF-8"}

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))
    return bool(ok)


def skip(name, reason):
    results.append((True, f"{name} # SKIP {reason}", ""))


def report():
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-12:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


def run(*command, env=None, **kwargs):
    return subprocess.run(list(command), capture_output=True, text=True, env=env or SYSTEM_ENV, **kwargs)


def package_state():
    """dpkg's status of zarrmount ("" if dpkg knows no such package)."""
    done = run("dpkg-query", "-W", "-f=${db:Status-Abbrev}", "zarrmount")
    state = done.stdout.strip() if done.returncode == 0 else ""
    # "un" and "pn": known to dpkg, not installed (nothing of it on the machine).
    return "" if state.startswith(("un", "pn")) else state


def dpkg(*args):
    """dpkg ARGS, waiting while another dpkg or apt holds the lock."""
    for _ in range(120):
        done = run("dpkg", *args)
        if done.returncode == 0 or "lock" not in done.stderr:
            return done
        time.sleep(5)
    return done


def mounts_at(point):
    """The /proc/self/mountinfo entries (type, source, options) at point."""
    found = []
    with open("/proc/self/mountinfo", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            at = fields.index("-")
            if fields[4].replace("\\040", " ") == point:
                found.append((fields[at + 1], fields[at + 2], fields[5].split(",")))
    return found


def daemons_of(point):
    """(pid, executable) of each process whose command line names point."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if point.encode() in args:
                found.append((int(pid), os.readlink(f"/proc/{pid}/exe")))
        except OSError:
            pass
    return found


def wait_gone(point):
    for _ in range(600):
        if not daemons_of(point) and not mounts_at(point):
            return True
        time.sleep(0.05)
    return False


def unmount(point):
    """umount POINT (as root, mount(8)'s own way); 0 once it is gone and its daemon ended."""
    done = run("umount", point)
    gone = wait_gone(point)
    if not gone or done.returncode != 0:
        run("umount", "-l", point)
        for pid, _ in daemons_of(point):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return done.returncode == 0 and gone


def new_point(name):
    point = os.path.join(PARENT, name)
    os.makedirs(point, exist_ok=True)
    return point


def source_x():
    with h5py.File(SOURCE, "r") as f:
        return {name: f["X"][name][:] for name in ("data", "indices", "indptr")}, f["X"].attrs["shape"]


def read_file_view(point):
    """The file/ view's X as served (zarr .zarray and raw arrays, through zarr-python)."""
    import zarr
    group = zarr.open_group(os.path.join(point, "file"), mode="r")
    return {name: group["X"][name][:] for name in ("data", "indices", "indptr")}, \
        tuple(group["X"].attrs["shape"])


def check_view(label, point):
    try:
        served, shape = read_file_view(point)
        wanted, wanted_shape = source_x()
        same = tuple(wanted_shape) == shape and all(np.array_equal(served[k], wanted[k]) for k in wanted)
        check(f"{label}: file/X read with zarr-python is the source's X (h5py)", same, f"{shape} {tuple(wanted_shape)}")
    except Exception as error:
        check(f"{label}: file/X read with zarr-python is the source's X (h5py)", False, repr(error))


def info_options(point):
    with open(os.path.join(point, ".zarrmount", "info.json")) as f:
        return json.load(f).get("options", {})


# ---- Build, contents, versions ----------------------------------------------------------

def build_package():
    out = tempfile.mkdtemp(prefix="zm-deb-", dir=PARENT)
    env = dict(os.environ, ZM_PACKAGE_BUILD=PACKAGE_BUILD)
    done = run("bash", os.path.join(ROOT, "scripts/package"), out, env=env, cwd=ROOT)
    deb = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    ok = done.returncode == 0 and re.fullmatch(r".*/zarrmount_[^_]+_[a-z0-9]+\.deb", deb) and os.path.isfile(deb)
    check("scripts/package builds zarrmount_VERSION_ARCH.deb", ok, done.stdout + done.stderr)
    return deb if ok else None


def check_contents(deb):
    listing = run("dpkg-deb", "-c", deb).stdout.splitlines()
    files = {line.split()[-1].lstrip(".") for line in listing if not line.startswith("d")}
    owners = {line.split()[1] for line in listing}
    wanted = {INSTALLED, "/usr/share/man/man1/zarrmount.1.gz", "/usr/share/doc/zarrmount/copyright",
              "/usr/share/doc/zarrmount/README.md", "/usr/share/doc/zarrmount/docs/mount.md",
              "/usr/share/doc/zarrmount/examples/mnt-atlas.mount",
              "/usr/share/doc/zarrmount/examples/mnt-atlas.automount",
              "/usr/share/doc/zarrmount/examples/zarrmount.conf",
              "/usr/share/doc/zarrmount/docs/web.md", "/usr/share/doc/zarrmount/docs/cluster.md",
              "/usr/lib/python3/dist-packages/zarrmount.py"}
    check("the .deb holds the program, the man page (gzip), the docs, the copyright, the example units and "
          "nginx block, the Python helper, all root's",
          wanted <= files and owners == {"root/root"}, f"missing {sorted(wanted - files)}; owners {owners}")
    # `meson install` installs the same set (the .deb adds the copyright; the man page gzipped).
    staging = tempfile.mkdtemp(prefix="zm-install-", dir=PARENT)
    done = run("meson", "install", "-C", PACKAGE_BUILD, "--no-rebuild", "--destdir", staging, env=dict(os.environ))
    installed = set()
    for directory, _, names in os.walk(staging):
        installed |= {os.path.join(directory, n)[len(staging):] for n in names}
    packaged = {f[:-3] if f.endswith(".1.gz") else f for f in files} - {"/usr/share/doc/zarrmount/copyright"}
    check("meson install installs what the .deb holds", done.returncode == 0 and installed == packaged,
          f"{done.stderr}\nonly meson: {sorted(installed - packaged)}\nonly .deb: {sorted(packaged - installed)}")
    depends = run("dpkg-deb", "-f", deb, "Depends").stdout
    check("Depends: the shared libraries (dpkg-shlibdeps: libfuse3, libhdf5, ...) and fuse3 (mount.fuse3)",
          re.search(r"\blibfuse3-3\b", depends) and re.search(r"\blibhdf5", depends)
          and re.search(r"(^|, )fuse3($|,)", depends.strip()), depends)


def project_version():
    done = run("meson", "introspect", "--projectinfo", PACKAGE_BUILD, env=dict(os.environ))
    return json.loads(done.stdout)["version"] if done.returncode == 0 else None


def check_versions(deb):
    version = project_version()
    deb_version = run("dpkg-deb", "-f", deb, "Version").stdout.strip()
    long = run(INSTALLED, "--version").stdout.splitlines()
    short = run(INSTALLED, "-V").stdout.splitlines()
    page = run("sh", "-c", "zcat /usr/share/man/man1/zarrmount.1.gz | grep -m1 '^\\.TH'").stdout
    th = re.search(r'"zarrmount ([^"]+)"', page)
    seen = {"meson": version, "deb": deb_version, "--version": long[0] if long else None,
            "-V": short[0] if short else None, "man": th.group(1) if th else None}
    check("one version: meson's project version, the .deb's, --version's and -V's first line, the man page's",
          version and deb_version == version and seen["--version"] == f"zarrmount {version}"
          and seen["-V"] == seen["--version"] and seen["man"] == version and long == short, str(seen))
    done = run("man", "-w", "zarrmount")
    check("man -w zarrmount: the installed page", done.returncode == 0
          and done.stdout.strip() == "/usr/share/man/man1/zarrmount.1.gz", done.stdout + done.stderr)


def check_python_helper():
    """The installed helper is Debian's python3's module `zarrmount`, and it mounts with the
    installed program (PATH), away from the source tree."""
    code = ("import sys, zarrmount, zarrmount as z; print(z.__file__)\n"
            "with z.mount(sys.argv[1], mountpoint=sys.argv[2]) as m:\n"
            "    print(sorted(p.name for p in m.path.iterdir()))\n")
    point = new_point("python")
    done = run("/usr/bin/python3", "-c", code, os.path.abspath(SOURCE), point, cwd="/",
               env=dict(SYSTEM_ENV, PATH="/usr/bin:/bin"))
    lines = done.stdout.splitlines()
    check("the installed Python helper: /usr/bin/python3 imports zarrmount from dist-packages and mounts "
          "with /usr/bin/zarrmount", done.returncode == 0 and lines[:1] == ["/usr/lib/python3/dist-packages/zarrmount.py"]
          and len(lines) > 1 and "'full'" in lines[1] and not mounts_at(point), done.stdout + done.stderr)


# ---- mount(8), fstab, systemd -----------------------------------------------------------

def check_mount8():
    point = new_point("mnt-ro")
    done = run("mount", "-t", "fuse.zarrmount", SOURCE, point, "-o", "ro")
    entries = mounts_at(point)
    daemons = daemons_of(point)
    if not check("mount -t fuse.zarrmount SRC MNT -o ro: mounted (fuse.zarrmount, ro) by the installed zarrmount",
                 done.returncode == 0 and len(entries) == 1 and entries[0][0] == "fuse.zarrmount"
                 and "ro" in entries[0][2] and [exe for _, exe in daemons] == [INSTALLED],
                 f"exit {done.returncode} {done.stderr} {entries} {daemons}"):
        unmount(point)
        return
    check_view("mount -o ro", point)
    # A second mount over the first: refused before anything is mounted.
    again = run("mount", "-t", "fuse.zarrmount", SOURCE, point, "-o", "ro")
    check("mount(8) over a mounted point: refused, one line, still one mount",
          again.returncode != 0 and "is already mounted" in again.stderr and len(mounts_at(point)) == 1,
          f"exit {again.returncode} {again.stderr!r} {mounts_at(point)}")
    check("umount MNT: unmounted, the daemon ended", unmount(point))

    # Every option fstab and mount(8) pass, and ours.
    options = ("ro,nosuid,nodev,noexec,noatime,relatime,lazytime,nofail,_netdev,defaults,comment=zm-test,"
               "x-systemd.automount,"
               "x-systemd.idle-timeout=60,codec=zstd:3,chunk_size=256K,cache_dir=none")
    done = run("mount", "-t", "fuse.zarrmount", SOURCE, point, "-o", options)
    entries = mounts_at(point)
    flags = entries[0][2] if entries else []
    if check(f"mount -o {options}: mounted, nosuid,nodev,noexec,noatime on the mount",
             done.returncode == 0 and all(f in flags for f in ("ro", "nosuid", "nodev", "noexec", "noatime")),
             f"exit {done.returncode} {done.stderr} {entries}"):
        got = info_options(point)
        check("our options through mount(8): codec=zstd:3, chunk_size=256K (info.json)",
              got.get("codec") == "zstd:3" and got.get("chunkBytes") == 262144, str(got))
        check("umount after the options: unmounted, the daemon ended", unmount(point))

    # Without ro mount(8) passes rw: refused in one line, nothing mounted.
    done = run("mount", "-t", "fuse.zarrmount", SOURCE, point)
    said = [line for line in done.stderr.splitlines() if "zarrmount" in line]
    check("mount without -o ro (mount(8) passes rw): refused, one line saying read-only, nothing mounted",
          done.returncode != 0 and len(said) == 1 and "option rw" in said[0] and "read-only" in said[0]
          and not mounts_at(point) and not daemons_of(point), f"exit {done.returncode} {done.stderr!r}")

    # A directory holding a file: refused; -o nonempty mounts over it.
    busy = new_point("mnt-busy")
    with open(os.path.join(busy, "kept"), "w") as f:
        f.write("kept\n")
    done = run("mount", "-t", "fuse.zarrmount", SOURCE, busy, "-o", "ro")
    check("mount(8) over a non-empty directory: refused, one line naming -o nonempty, nothing mounted",
          done.returncode != 0 and "is not empty" in done.stderr and "nonempty" in done.stderr
          and not mounts_at(busy), f"exit {done.returncode} {done.stderr!r}")
    done = run("mount", "-t", "fuse.zarrmount", SOURCE, busy, "-o", "ro,nonempty")
    if check("mount(8) -o ro,nonempty over it: mounted", done.returncode == 0 and len(mounts_at(busy)) == 1,
             f"exit {done.returncode} {done.stderr!r}"):
        check("-o nonempty: unmounted, the directory's file is there again",
              unmount(busy) and os.path.exists(os.path.join(busy, "kept")))


def check_fstab():
    point = new_point("mnt-fstab")
    with open(FSTAB, "rb") as f:
        original = f.read()
    STATE["fstab"] = original
    line = (f"{SOURCE} {point} fuse.zarrmount ro,nofail,_netdev,noatime,nodiratime,nosuid,nodev,defaults,users,"
            f"comment=zm-test,x-systemd.automount,x-systemd.idle-timeout=60,codec=none,chunk_size=64K,"
            f"cache_dir=none 0 0\n")
    try:
        with open(FSTAB, "ab") as f:
            if original and not original.endswith(b"\n"):
                f.write(b"\n")
            f.write(line.encode())
        done = run("mount", point)
        entries = mounts_at(point)
        if check("an /etc/fstab line (ro, fstab-only options, x-systemd.*, ours): `mount MNT` mounts",
                 done.returncode == 0 and len(entries) == 1 and entries[0][0] == "fuse.zarrmount"
                 and entries[0][1] == SOURCE, f"exit {done.returncode} {done.stderr} {entries}\n{line}"):
            got = info_options(point)
            check("fstab: codec=none and chunk_size=64K taken (info.json)",
                  got.get("codec") == "none" and got.get("chunkBytes") == 65536, str(got))
            check_view("fstab", point)
            check("fstab: umount MNT unmounts, the daemon ended", unmount(point))
    finally:
        if mounts_at(point):
            unmount(point)
        with open(FSTAB, "wb") as f:
            f.write(original)
        STATE["fstab"] = None
    with open(FSTAB, "rb") as f:
        check("/etc/fstab restored byte for byte", f.read() == original)


def unit_options(path):
    with open(path) as f:
        return dict(re.findall(r"^(\w+)=(.*)$", f.read(), re.M))


def check_systemd():
    examples = "/usr/share/doc/zarrmount/examples"
    mount_unit, automount_unit = f"{examples}/mnt-atlas.mount", f"{examples}/mnt-atlas.automount"
    fields = unit_options(mount_unit)
    check("the example mount unit: Type=fuse.zarrmount, What=, Where=/mnt/atlas, Options= with ro",
          fields.get("Type") == "fuse.zarrmount" and fields.get("What") and fields.get("Where") == "/mnt/atlas"
          and "ro" in fields.get("Options", "").split(","), str(fields))
    check("the example automount unit: Where=/mnt/atlas", unit_options(automount_unit).get("Where") == "/mnt/atlas")
    # The example's Options=, as systemd passes them to mount(8).
    point = new_point("mnt-unit")
    done = run("mount", "-t", fields.get("Type", "?"), SOURCE, point, "-o", fields.get("Options", ""))
    if check(f"the example unit's Options={fields.get('Options')}: mount(8) mounts with them",
             done.returncode == 0 and len(mounts_at(point)) == 1, f"exit {done.returncode} {done.stderr}"):
        check("the example unit's options: unmounted", unmount(point))
    analyze = run("sh", "-c", "command -v systemd-analyze").stdout.strip()
    if not analyze:
        skip("systemd-analyze verify of the example units", "systemd-analyze is not installed")
    else:
        done = run(analyze, "verify", mount_unit, automount_unit)
        check("systemd-analyze verify: both example units (and their man:zarrmount(1))",
              done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(),
              done.stdout + done.stderr)
    with open("/proc/1/comm") as f:
        init = f.read().strip()
    if init != "systemd":
        skip("the example units started by systemd",
             f"PID 1 is {init!r}, not systemd (a container): checked with systemd-analyze verify and their Options=")
        return
    # systemd is PID 1: the example, pointed at a mount point of ours, started and stopped.
    where = new_point("mnt-systemd")
    name = run("systemd-escape", "-p", "--suffix=mount", where).stdout.strip()
    unit = f"/run/systemd/system/{name}"
    with open(mount_unit) as f:
        text = f.read().replace("What=/data/atlas.h5ad", f"What={SOURCE}").replace("Where=/mnt/atlas", f"Where={where}")
    try:
        with open(unit, "w") as f:
            f.write(text)
        run("systemctl", "daemon-reload")
        done = run("systemctl", "start", name)
        check("systemd: the example mount unit starts (mounted)", done.returncode == 0 and len(mounts_at(where)) == 1,
              done.stderr + run("journalctl", "-n", "20", "-u", name).stdout)
        done = run("systemctl", "stop", name)
        check("systemd: the unit stops (unmounted, the daemon ended)", done.returncode == 0 and wait_gone(where),
              done.stderr)
    finally:
        if mounts_at(where):
            unmount(where)
        if os.path.exists(unit):
            os.unlink(unit)
        run("systemctl", "daemon-reload")


STATE = {"fstab": None, "installed": False}  # what stopped() must undo


def stopped(number, _frame):
    if STATE["fstab"] is not None:
        with open(FSTAB, "wb") as f:
            f.write(STATE["fstab"])
    for name in os.listdir(PARENT):
        if mounts_at(os.path.join(PARENT, name)):
            subprocess.run(["umount", "-l", os.path.join(PARENT, name)], capture_output=True)
    if STATE["installed"]:
        subprocess.Popen(["dpkg", "--purge", "zarrmount"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    print(f"# stopped by signal {number}: /etc/fstab restored, dpkg --purge zarrmount started", flush=True)
    os._exit(1)


def main():
    if os.geteuid() != 0:
        skip("the Debian package", "not root: dpkg -i, mount(8) and /etc/fstab need root")
        return report()
    before = package_state()
    if before:
        skip("the Debian package", f"a zarrmount package is on this machine already (dpkg: {before}): "
             "not replaced by the test")
        return report()
    # meson test stops a test that runs out of time with SIGTERM to its process group, and
    # SIGKILL half a second later: /etc/fstab is restored at once, and the purge runs in a
    # session of its own, which outlives the group.
    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGINT, stopped)
    deb = build_package()
    if deb is None:
        return report()
    check_contents(deb)
    try:
        STATE["installed"] = True
        done = dpkg("-i", deb)
        if check("dpkg -i: installed", done.returncode == 0 and package_state().startswith("ii")
                 and os.access(INSTALLED, os.X_OK), done.stdout + done.stderr):
            check_versions(deb)
            check_python_helper()
            check_mount8()
            check_fstab()
            check_systemd()
    finally:
        for point in os.listdir(PARENT):
            if mounts_at(os.path.join(PARENT, point)):
                unmount(os.path.join(PARENT, point))
        done = dpkg("--purge", "zarrmount")
        check("dpkg --purge: removed, nothing of it left (program, man page, docs)",
              done.returncode == 0 and package_state() == ""
              and not os.path.exists(INSTALLED) and not os.path.exists("/usr/share/doc/zarrmount")
              and not os.path.exists("/usr/share/man/man1/zarrmount.1.gz"), done.stdout + done.stderr)
    return report()


if __name__ == "__main__":
    sys.exit(main())
