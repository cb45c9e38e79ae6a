#!/usr/bin/python3
"""Nothing outside the source (issue 17, "Trust boundaries"): a mount serves
its one file's own bytes and no other file's, whatever the file points at.

tests/source/make_outside_sources.py writes valid .h5ad files one of whose
elements lives outside the file (external storage over a secret the test
makes root-only, as /etc/shadow is; a virtual dataset over another root-only
file; virtual datasets over a FIFO, which an open would wait on for ever;
external links to a dataset, to a column, to the whole obs), each with a
twin that simply lacks the element. For each file:

- `zarrmount inspect --json` lists the element as skipped with the reason
  (or, for obs, refuses the file naming the link), and returns (a FIFO
  opened would hang it: every step has a generous time limit that turns a
  hang into a failure, never a speed target);
- a mount as root with -o allow_other and default options: the log names
  the element and why, .zarrmount/info.json lists it as skipped; every
  file of file/, full/ and a subsample is read: no byte sequence served,
  raw or decoded with the store's own codec, holds a marker of a file
  outside the source; the tree is, file for file and byte for byte, the
  twin's (the root attributes' record of the source's size aside); the
  daemon holds no descriptor of any file outside the source (/proc/PID/fd)
  and exits 0 when unmounted;
- `zarrmount export` of file/ and full/ under strace opens none of the
  files outside the source (skipped, said so, where strace is missing),
  and writes no marker either.

HDF5_PLUGIN_PATH, HDF5_EXT_PREFIX, HDF5_VDS_PREFIX and HDF5_EXTFILE_PREFIX
are set, for the daemons, to the directory of those files: none of them
may lead HDF5 there. Mount points live under $ZM_MOUNT_PARENT
(run_mount_test.sh unmounts whatever is left). Prints TAP.
"""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import numcodecs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_mount import (BINARY, PARENT, ROOT, SANITIZED, check, daemon_env, mounted_points,  # noqa: E402
                        report, sanitizer_report)

GENERATOR = os.path.join(ROOT, "tests", "source", "make_outside_sources.py")
# A bound on waiting for something that must happen: a hang becomes a
# failure. Not a speed target (sanitizer builds on a busy machine are slow).
WAIT = 120
STORES = ("file", "full", "uniform/seed0/k=10")
IS_ROOT = os.geteuid() == 0
STRACE = shutil.which("strace")


def run(args, env=None):
    """(status, stdout, stderr) of a command, None for the status of one that
    had to be killed after WAIT seconds."""
    try:
        done = subprocess.run(args, capture_output=True, timeout=WAIT, env=env)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        return None, expired.stdout or b"", expired.stderr or b""


class Daemon:
    """zarrmount SOURCE POINT -f -o OPTION...: mounted within WAIT seconds,
    or failed (status), or hung (killed)."""

    def __init__(self, source, options, env):
        self.point = tempfile.mkdtemp(prefix="zm-confine-", dir=PARENT)
        self.log_path = self.point + ".log"
        args = [BINARY, source, self.point, "-f"]
        for option in options:
            args += ["-o", option]
        self.log_file = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self.log_file, stderr=subprocess.STDOUT,
                                        env=env)
        self.mounted = self.hung = False
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.point in mounted_points():
                self.mounted = True
                return
            if self.process.poll() is not None:
                return
            time.sleep(0.05)
        self.hung = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def descriptors(self):
        """Targets of the daemon's open descriptors."""
        out = []
        for fd in os.listdir(f"/proc/{self.process.pid}/fd"):
            with contextlib.suppress(OSError):
                out.append(os.readlink(f"/proc/{self.process.pid}/fd/{fd}"))
        return out

    def stop(self):
        """Unmounts; the daemon's exit status (None if it had to be killed)."""
        if self.point in mounted_points():
            done = subprocess.run(["fusermount3", "-u", self.point], capture_output=True)
            if done.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", self.point], capture_output=True)
        status = None
        try:
            status = self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.log_file.close()
        with contextlib.suppress(OSError):
            os.rmdir(self.point)
        return status


def read_tree(root):
    """{relative path: bytes} of every file of the stores under root, and the
    errors met ([(path, text)])."""
    files, errors = {}, []
    for store in STORES:
        base = os.path.join(root, store)
        if not os.path.isdir(base):
            errors.append((store, "missing"))
            continue
        for directory, _, names in os.walk(base):
            for name in names:
                path = os.path.join(directory, name)
                try:
                    with open(path, "rb") as f:
                        files[os.path.relpath(path, root)] = f.read()
                except OSError as error:
                    errors.append((os.path.relpath(path, root), str(error)))
    return files, errors


def decoded(files):
    """{path: bytes} of every chunk decoded with its array's compressor (the
    raw chunk bytes a reader gets)."""
    out = {}
    for path, data in files.items():
        directory, name = os.path.split(path)
        meta = files.get(os.path.join(directory, ".zarray"))
        if meta is None or name.startswith("."):
            continue
        compressor = json.loads(meta).get("compressor")
        out[path] = numcodecs.get_codec(compressor).decode(data) if compressor else data
        out[path] = bytes(out[path])
    return out


def markers_in(files, markers):
    """Paths whose bytes hold a marker."""
    return sorted(path for path, data in files.items() if any(m in data for m in markers))


def without_size(files):
    """The stores' root attributes record the source's size (which the twin's
    differs in): left out of the comparison, everything else kept."""
    out = dict(files)
    for store in STORES:
        for name in (".zattrs", ".zmetadata"):
            path = os.path.join(store, name)
            if path not in out:
                continue
            document = json.loads(out[path])
            attributes = document.get("metadata", {}).get(".zattrs", document)
            attributes.get("zarrmount", {}).get("source", {}).pop("bytes", None)
            out[path] = json.dumps(document, sort_keys=True).encode()
    return out


def opened_paths(trace):
    """Paths a strace log shows opened (successfully or not)."""
    out = set()
    for line in trace.splitlines():
        if "open" not in line or '"' not in line:
            continue
        out.add(line.split('"')[1])
    return out


def skipped_line(lines, h5path):
    return next((line for line in lines if line.startswith(h5path + ": ")), None)


def check_inspect(case, name):
    status, out, err = run([BINARY, "inspect", case["file"], "--json"])
    if not check(f"{name}: inspect returns", status is not None, err.decode(errors="replace")):
        return
    if case["refused"]:
        text = err.decode(errors="replace")
        check(f"{name}: inspect refuses the file, naming {case['h5path']} and why",
              status == 2 and case["h5path"] + ":" in text and case["reason"] in text, text)
        return
    skipped = json.loads(out).get("skipped", []) if status == 0 else []
    for element in [case] + case.get("also", []):
        line = skipped_line(skipped, element["h5path"])
        check(f"{name}: inspect lists {element['h5path']} as skipped, saying why",
              line is not None and case["reason"] in line, f"status {status}\n{skipped}\n{err}")
    paths = element_paths(json.loads(out).get("elements", {})) if status == 0 else set()
    for element in [case] + case.get("also", []):
        check(f"{name}: inspect's model holds no {element['element']}",
              status == 0 and element["element"] not in paths, sorted(paths))


def element_paths(element):
    """Every model path of an inspect element and those under it."""
    out = {element.get("path", "")}
    for key in ("children",):
        for child in element.get(key, []):
            out |= element_paths(child)
    for key in ("index", "categories"):
        if isinstance(element.get(key), dict):
            out |= element_paths(element[key])
    return out


def check_export(case, name, env, markers, outside):
    """export of file/ and full/ (under strace where there is one)."""
    for view in ("file", "full"):
        target = tempfile.mkdtemp(prefix="zm-confine-export-", dir=PARENT)
        os.rmdir(target)
        trace = target + ".strace"
        args = [BINARY, "export", case["file"], view, target]
        traced = dict(env)
        if STRACE:
            args = [STRACE, "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", trace] + args
            if SANITIZED:  # LeakSanitizer cannot run under ptrace (the mounts check leaks)
                traced["ASAN_OPTIONS"] = traced.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        status, _, err = run(args, env=traced)
        text = err.decode(errors="replace")
        if case["refused"]:
            check(f"{name}: export {view}/ refuses the file (status 2), naming {case['h5path']} "
                  "and why", status == 2 and case["h5path"] + ":" in text and case["reason"] in text,
                  text)
        else:
            check(f"{name}: export {view}/ ends (status 0)", status == 0, text)
        files = {}
        for directory, _, names in os.walk(target):
            for file_name in names:
                path = os.path.join(directory, file_name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, target)] = f.read()
        leaked = markers_in(files, markers) + markers_in(decoded(files), markers)
        check(f"{name}: export {view}/ writes no byte of another file", not leaked, "\n".join(leaked))
        if STRACE:
            with open(trace, errors="replace") as f:
                opened = opened_paths(f.read())
            reached = sorted(p for p in opened if os.path.realpath(p) in outside)
            check(f"{name}: export {view}/ opens no file outside the source (strace)", not reached,
                  "\n".join(reached))
        else:
            check(f"{name}: export {view}/ opens no file outside the source # SKIP no strace", True)
        shutil.rmtree(target, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.remove(trace)


def check_mount(case, name, env, markers, outside):
    options = ["allow_other"] if IS_ROOT else []
    daemon = Daemon(case["file"], options, env)
    try:
        check(f"{name}: the daemon does not hang setting up", not daemon.hung, daemon.log())
        log = daemon.log()
        if case["refused"]:
            status = daemon.process.poll()
            check(f"{name}: the mount is refused (status 2), naming {case['h5path']} and why",
                  not daemon.mounted and status == 2 and case["h5path"] + ":" in log
                  and case["reason"] in log, f"status {status}\n{log}")
            return
        if not check(f"{name}: mounted", daemon.mounted, log):
            return
        for element in [case] + case.get("also", []):
            line = next((x for x in log.splitlines()
                         if f"left out: {element['h5path']}: " in x), None)
            check(f"{name}: the log names {element['h5path']} and why",
                  line is not None and case["reason"] in line, log)
        with open(os.path.join(daemon.point, ".zarrmount", "info.json")) as f:
            skipped = json.load(f).get("skipped", [])
        for element in [case] + case.get("also", []):
            line = skipped_line(skipped, element["h5path"])
            check(f"{name}: info.json lists {element['h5path']} as skipped",
                  line is not None and case["reason"] in line, repr(skipped))
        files, errors = read_tree(daemon.point)
        check(f"{name}: every file of {', '.join(STORES)} reads", not errors and files,
              "\n".join(f"{p}: {e}" for p, e in errors[:10]))
        leaked = markers_in(files, markers) + markers_in(decoded(files), markers)
        check(f"{name}: no served byte sequence holds another file's marker", not leaked,
              "\n".join(leaked))
        held = [t for t in daemon.descriptors() if os.path.realpath(t) in outside]
        check(f"{name}: the daemon holds no descriptor of a file outside the source", not held,
              "\n".join(held))
        source = os.path.realpath(case["file"])
        others = [t for t in daemon.descriptors()
                  if not (t == source or t in ("/dev/fuse", "/dev/null") or t.startswith(
                      ("pipe:", "socket:", "anon_inode:", "/dev/pts/", daemon.log_path,
                       os.environ.get("XDG_CACHE_HOME") or os.path.join(PARENT, "cache")))
                          or t.endswith(" (deleted)"))]
        check(f"{name}: the daemon holds no file open but the source and its own", not others,
              "\n".join(others))
        if case["twin"]:
            twin = Daemon(case["twin"], options, env)
            try:
                if check(f"{name}: its twin mounts", twin.mounted, twin.log()):
                    theirs, their_errors = read_tree(twin.point)
                    mine, yours = without_size(files), without_size(theirs)
                    differ = sorted(p for p in set(mine) | set(yours) if mine.get(p) != yours.get(p))
                    check(f"{name}: the rest of the store is the twin's, byte for byte",
                          not differ and not their_errors and mine,
                          "\n".join(differ[:20]) + repr(their_errors[:5]))
            finally:
                twin_status = twin.stop()
                check(f"{name}: the twin's daemon exits 0", twin_status == 0, twin.log()[-2000:])
    finally:
        status = daemon.stop()
        if not case["refused"] and daemon.mounted:
            log = daemon.log()
            check(f"{name}: unmounted, the daemon exits 0 and logged no sanitizer report",
                  status == 0 and not sanitizer_report(log.encode()), f"status {status}\n{log[-3000:]}")


def main():
    work = tempfile.mkdtemp(prefix="zm-confine-files-", dir=PARENT)
    status, out, err = run(["/usr/bin/python3", GENERATOR, work])
    if not check("the generator writes the files", status == 0, (out + err).decode(errors="replace")):
        return report()
    with open(os.path.join(work, "manifest.json")) as f:
        cases = json.load(f)
    # Root-only, as /etc/shadow is: an allow_other mount must not be a way
    # for anyone else to read them (nor root's daemon a way to serve them).
    for case in cases:
        for path in case["outside"]:
            if os.path.isfile(path):
                os.chmod(path, 0o600)
    env = daemon_env()
    for variable in ("HDF5_PLUGIN_PATH", "HDF5_EXT_PREFIX", "HDF5_VDS_PREFIX", "HDF5_EXTFILE_PREFIX"):
        env[variable] = work
    if not IS_ROOT:
        print("# not root: mounts without allow_other", file=sys.stderr)
    for case in cases:
        name = case["name"]
        markers = [bytes.fromhex(m) for m in case["markers"]]
        outside = {os.path.realpath(p) for p in case["outside"]}
        for step in (check_inspect, check_export, check_mount):
            try:
                if step is check_inspect:
                    step(case, name)
                else:
                    step(case, name, env, markers, outside)
            except Exception:  # noqa: BLE001
                check(f"{name}: {step.__name__}", False, traceback.format_exc(limit=4))
    left = [p for p in mounted_points() if p.startswith(PARENT + "/")]
    check("no mount left behind", not left, repr(left))
    shutil.rmtree(work, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
