#!/usr/bin/python3
"""The daemon under valgrind memcheck for a scripted session (issue 7).

The daemon runs in the foreground under
`valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99`
with small chunks, a small memory cache (files evicted, walks spilled) and a
disk cache of its own; the session mounts a fixture source, looks views up,
walks views whole (every file compared with `zarrmount export` of the same
view, which runs without FUSE), reads chunks of full/ (a reordered view: walks of
per-cell arrays, obsp and a CSC layer), lists and stats, reads
.zarrmount/stats.json and info.json, asks for paths that do not exist, and
unmounts with fusermount3 -u. The views: one per method (full/, uniform,
blocks, stratified, spatial), two reached through share=/pct= links. Memcheck must report no error and no definite
leak, and the daemon must exit with status 0.

tests/stress/valgrind.supp holds suppressions for system libraries only,
each with the reason it is not ours; an empty file means none were needed.

Skipped (TAP "# SKIP") when valgrind is not installed or the binary is built
with a sanitizer (ASan and TSan cannot run under valgrind). The mount lives
under $ZM_MOUNT_PARENT (run by tests/integration/run_mount_test.sh, which
unmounts whatever a crash leaves); it is unmounted in every outcome. No step
has a time limit beyond generous timeouts that end a hung run. Prints TAP.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
CHUNK_BYTES = 256
# One view per method, two of them through their share=/pct= links.
VIEWS = ["full", "uniform/seed3/k=40", "blocks/seed1/pct=50", "stratified/cell_type/seed2/k=30",
         "spatial/X_umap/seed4/share=0.5"]

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))


def is_mounted(point):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == point for line in f)


def sanitizer():
    with open(BINARY, "rb") as f:
        data = f.read()
    return next((s for s, mark in (("thread", b"__tsan_init"), ("address", b"__asan_init")) if mark in data),
                None)


def files_under(top):
    out = {}
    for directory, _, names in os.walk(top):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, top)] = f.read()
    return out


def session(point):
    """The scripted session: what a reader does, every answer checked."""
    for view in VIEWS:
        top = os.path.join(point, view)
        check(f"{view} is a directory", os.path.isdir(top))
        resolved = os.path.join(os.path.dirname(view), os.readlink(top)) if os.path.islink(top) else view
        exported = tempfile.mkdtemp(prefix="export-", dir=os.path.dirname(point))
        target = os.path.join(exported, "view")
        done = subprocess.run([BINARY, "export", SOURCE, resolved, target, "--chunk-size", str(CHUNK_BYTES)],
                              capture_output=True, text=True, timeout=600)
        reference = files_under(target) if done.returncode == 0 else {}
        shutil.rmtree(exported, ignore_errors=True)
        served = files_under(top)
        differ = sorted(p for p in set(served) | set(reference) if served.get(p) != reference.get(p))
        check(f"{view}: {len(served)} files read whole, equal to zarrmount export of {resolved}",
              done.returncode == 0 and served and not differ, done.stderr + str(differ[:5]))

    # Chunks of a reordered view: the first chunk of each per-cell array
    # walks it; the next ones are cut from the walk (or spilled file).
    full = os.path.join(point, "full")
    read = 0
    for element in ("X/data", "X/indices", "X/indptr", "obsp/connectivities/data", "layers/counts/data",
                    "obs/_index", "obs/cell_type/codes", "obsm/X_pca"):
        directory = os.path.join(full, element)
        chunks = sorted(n for n in os.listdir(directory) if not n.startswith("."))
        for name in chunks[:3] + chunks[-1:]:
            with open(os.path.join(directory, name), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read()
            if len(data) != size:
                check(f"full/{element}/{name}: read whole ({size} bytes)", False, f"{len(data)} read")
            read += 1
    check(f"full/: {read} chunks read whole", read > 0)

    stats = 0
    for directory, dirnames, names in os.walk(os.path.join(point, "file")):
        for name in dirnames + names:
            os.lstat(os.path.join(directory, name))
            stats += 1
    check(f"file/: {stats} entries listed and stat'ed", stats > 0)
    for path in (".zarrmount/stats.json", ".zarrmount/info.json"):
        with open(os.path.join(point, path), "rb") as f:
            data = f.read()
        check(f"{path}: {len(data)} bytes", len(data) > 0)
    missing = 0
    for path in ("uniform/seed0/k=0", "full/X/nope", "stratified/no-such-key", "full/X/data/999999"):
        missing += not os.path.exists(os.path.join(point, path))
    check("paths that do not exist do not", missing == 4)


def main():
    if shutil.which("valgrind") is None:
        print("1..0 # SKIP valgrind is not installed")
        return 0
    kind = sanitizer()
    if kind:
        print(f"1..0 # SKIP the binary is built with -fsanitize={kind}, which valgrind cannot run")
        return 0
    parent = os.environ.get("ZM_MOUNT_PARENT") or tempfile.mkdtemp(prefix="zm-valgrind-")
    point = tempfile.mkdtemp(prefix="zm-valgrind-", dir=parent)
    log_path = os.path.join(parent, "valgrind.log")
    suppressions = os.path.join(HERE, "valgrind.supp")
    command = ["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite",
               "--errors-for-leak-kinds=definite", "--error-exitcode=99", "--num-callers=30",
               f"--log-file={log_path}"]
    if os.path.exists(suppressions):
        command.append(f"--suppressions={suppressions}")
    command += [BINARY, SOURCE, point, "-f", "-o",
                f"chunk_size={CHUNK_BYTES},cache_size=64K,cache_dir={os.path.join(parent, 'disk')},"
                "cache_max=256K,threads=2,ahead_idle=1"]
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    status = None
    try:
        deadline = time.monotonic() + 300
        while not is_mounted(point):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mount failed: {daemon.stderr.read().decode(errors='replace')}")
            time.sleep(0.1)
        check("mounted under valgrind", True)
        session(point)
    except Exception:
        check("session", False, traceback.format_exc())
    finally:
        for _ in range(100):
            if not is_mounted(point) or subprocess.run(["fusermount3", "-u", point],
                                                       capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        if is_mounted(point):
            subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
        try:
            status = daemon.wait(timeout=600)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        os.rmdir(point)
    log = open(log_path, errors="replace").read() if os.path.exists(log_path) else ""
    summary = [line.split("==", 2)[-1].strip() for line in log.splitlines()
               if "ERROR SUMMARY" in line or "definitely lost" in line]
    errors_zero = any("ERROR SUMMARY: 0 errors" in line for line in log.splitlines())
    definite = [line for line in log.splitlines() if "definitely lost:" in line]
    no_definite = all(" 0 bytes in 0 blocks" in line for line in definite)
    check(f"memcheck: no error ({'; '.join(summary)})", errors_zero, log[-6000:])
    check("memcheck: no definite leak", no_definite, log[-6000:])
    check(f"daemon exited with status 0 under valgrind (status {status})", status == 0, log[-3000:])
    check("no mount left behind", not is_mounted(point))

    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok and detail:
            for line in str(detail).splitlines()[-80:]:
                print(f"#   {line}")
    return 1 if any(not ok for ok, _, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
