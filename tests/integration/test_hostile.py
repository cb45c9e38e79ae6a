#!/usr/bin/python3
"""Malformed and hostile paths against a live mount (issue 7, "Paths").

Mounts fixtures/sources/h5ad/full-csr.h5ad with the real zarrmount (-d, so
that every name that does not exist is logged with its reason; -o sets= with
the sets the list names, written by write_sets) and tries
every path of hostile_paths.txt: stat, lstat, open for reading and listing
each give the errno the list expects (ENOENT, or ENAMETOOLONG and ENOTDIR
where the kernel decides, EINVAL for readlink of what is not a link; a few
documented forms and kernel-normalized paths exist), and for every ENOENT
the daemon logged "lookup PATH: missing: REASON" for the name the kernel
asked about, with the reason the list names (the refusal branch in
src/tree/paths.c). Then several thousand more hostile names, each new (the
kernel keeps names that do not exist, so only new ones reach the daemon).

The daemon's resident memory (VmRSS and VmHWM from /proc/PID/status) is
taken after a warm-up (valid views read, a first batch of hostile names),
after the list (grown by less than LIST_GROWTH_BOUND_KIB) and after the
extra names (grown by less than EXTRA_GROWTH_BOUND_KIB since the list).
Then valid paths still read the same bytes, directories at the edge of a
refusal list only names that exist, the daemon is alive, stats.json still
parses and keeps a refused name that is not UTF-8 (as '?'), the daemon
logged no sanitizer report, and it exits 0 when unmounted; a source whose
own path is not UTF-8 mounts, and `zarrmount explain --json` of a path that
is not UTF-8 is JSON. No step has a time limit. Prints TAP, one line
a path.
"""
import errno
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import live_mount  # noqa: E402
from live_mount import (EXPECTED, SANITIZED, SOURCE_CELLS, Mount, as_logged, check, check_open_files,  # noqa: E402
                        error_of, failing_path, load_list, missing_lines, mounted_points, report,
                        sanitizer_report, shown)

# Growth of the daemon's VmRSS allowed over the list, from the warm-up: the
# list's paths that exist (and the views that the refused names inside views
# sit in) build about 40 views, of which the daemon keeps 32, and make their
# chunks ahead in a thread each (whose malloc arenas stay): 32 MiB, plus 64
# KiB a cell of the source for the views' per-cell state. Any allocation sized
# by a number in a path (k = 2^64 - 1, B = 2^63 - 1, G near 2^53, min =
# 2^32 - 1) would pass it by far.
LIST_GROWTH_BOUND_KIB = (32 * 1024 + 64 * SOURCE_CELLS) * (2 if SANITIZED else 1)
# Growth allowed over EXTRA_NAMES more refused names (each new, so each
# reaches the daemon), once the list's views are built and their workers are
# done: 4 MiB, that is less than 420 bytes a refused name. (Both doubled under
# AddressSanitizer, whose allocator keeps metadata and a quarantine.)
EXTRA_NAMES = 10000
EXTRA_GROWTH_BOUND_KIB = 4 * 1024 * (2 if SANITIZED else 1)


# The sets of the mount's -o sets=DIR that hostile_paths.txt names (its header): the cells of
# squares.json, the obs names of names.txt, and bad.json, squares with a wrong digest.
SQUARES = [1, 4, 9, 16, 25, 36, 49]
SQUARES_DIGEST = "ce0722014cee9b39"
NAMES = ["cell_000", "cell_059"]


def write_sets():
    """The sets directory the list's sets/ paths are tried against (its digests are written in
    the list, and computed here again from the specification's digest: set_rules.py)."""
    import set_rules
    directory = os.path.join(live_mount.PARENT, "hostile-sets")
    os.makedirs(directory, exist_ok=True)
    document = set_rules.cell_set_document(SQUARES, SOURCE_CELLS)
    check(f"squares.json's digest is the list's ({SQUARES_DIGEST})", document["cells"]["digest"] == SQUARES_DIGEST,
          document["cells"]["digest"])
    with open(os.path.join(directory, "squares.json"), "w") as f:
        json.dump(document, f)
    document["cells"]["digest"] = "0" * 16
    with open(os.path.join(directory, "bad.json"), "w") as f:
        json.dump(document, f)
    with open(os.path.join(directory, "names.txt"), "w") as f:
        f.write("\n".join(NAMES) + "\n")
    return directory


def open_read(path):
    os.close(os.open(path, os.O_RDONLY))


CALLS = (("stat", os.stat), ("lstat", os.lstat), ("open", open_read), ("listdir", os.listdir))


def try_path(mount, expected, path):
    """({call: errno}, as expected?)."""
    full = mount.path(path)
    if expected == "EINVAL":
        codes = {"readlink": error_of(os.readlink, full), "stat": error_of(os.stat, full)}
        return codes, codes == {"readlink": errno.EINVAL, "stat": 0}
    if expected == "OK":
        codes = {"stat": error_of(os.stat, full)}
        return codes, codes["stat"] == 0
    codes = {name: error_of(call, full) for name, call in CALLS}
    # "ENOENT|ENAMETOOLONG": either, the same from every call.
    allowed = [EXPECTED[e] for e in expected.split("|")]
    return codes, len(set(codes.values())) == 1 and next(iter(codes.values())) in allowed


def names(codes):
    return " ".join(f"{call}={errno.errorcode.get(code, 'ok') if code else 'ok'}" for call, code in codes.items())


def hostile_names(first, count):
    """count new hostile names, each reaching a refusal branch."""
    templates = [
        "nope{i}", "uniform/seed0{i}", "uniform/seed{big32}", "uniform/seed0/k=0{i}",
        "uniform/seed0/k={big64}", "uniform/seed0/share=1{i}", "uniform/seed0/pct=1e{i3}",
        "blocks/B=0{i}", "stratified/nope{i}", "stratified/cell_type/balanced/min={big32}",
        "spatial/X_umap/G={big53}", "spatial/X_pca/G=32/cols={i10}", "full/X/data/{i1}",
        "full/nope{i}", "{long}{i}", "stratified/{key}{i}",
    ]
    out = []
    for n in range(first, first + count):
        i = n // len(templates)
        text = templates[n % len(templates)].format(
            i=i, big32=4294967296 + i, big64=18446744073709551616 + i, i3=3 + i, big53=9007199254740992 + i,
            i10=10 + i, i1=1 + i, long="a" * 1000, key="c" * 300)
        out.append(text.encode() if n % 7 else text.encode() + b"\xc0\x80")
    return out


def read_fresh(path):
    """Reads path whole after dropping the kernel's pages, so the daemon serves it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        data = b""
        while True:
            piece = os.read(fd, 1 << 20)
            if not piece:
                return data
            data += piece
    finally:
        os.close(fd)


VALID = [b"full/.zmetadata", b"full/X/data/0", b"file/obs/cell_type/codes/0", b"uniform/seed0/k=10/.zmetadata",
         b"uniform/seed0/k=10/X/data/0", b"blocks/seed3/k=20/obsm/X_pca/0.0",
         b"stratified/cell_type/balanced/min=2/seed1/k=30/.zmetadata",
         b"spatial/X_umap/G=8/cols=0,1/seed2/k=15/obs/cell_type/codes/0", b".zarrmount/info.json"]


def warm_up(mount):
    """Valid views read (their bytes kept), and a first batch of hostile names."""
    kept = {}
    for directory in (b"", b"uniform/seed0", b"blocks", b"stratified", b"spatial", b"full/obs"):
        os.listdir(mount.path(directory))
    for path in VALID:
        kept[path] = read_fresh(mount.path(path))
    for path in hostile_names(0, 400):
        error_of(os.stat, mount.path(path))
    return kept


def wait_quiet(mount, seconds=60):
    """Waits (at most seconds: this is no assertion) until no view's worker
    is making chunks ahead and no pass is running, so that memory is taken
    between requests, not in the middle of work they started."""
    for _ in range(int(seconds / 0.1)):
        with open(mount.path(b".zarrmount/stats.json"), "rb") as f:
            stats = json.loads(f.read())
        running = [key for key, view in stats["views"].items() if view.get("ahead", {}).get("state") == "running"]
        if not running and not stats["works"]:
            return
        time.sleep(0.1)


def check_list(mount, entries):
    """Every path of the list: the errnos, then the daemon's reasons."""
    tried = []
    for number, expected, category, path, reason in entries:
        codes, ok = try_path(mount, expected, path)
        tried.append((number, expected, category, path, reason, codes, ok,
                      failing_path(mount.path(), path) if expected.startswith("ENOENT") else None))
    logged = missing_lines(mount.log())
    reasons = 0
    for number, expected, category, path, reason, codes, ok, failing in tried:
        detail = f"line {number}: {names(codes)}"
        label = f"[{category}] {expected}: {shown(path)}"
        if expected.startswith("ENOENT") and set(codes.values()) == {errno.ENOENT}:
            expected = "ENOENT"  # the daemon refused it: it logged why
            label = f"[{category}] {expected}: {shown(path)}"
        if ok and expected == "ENOENT":
            lines = logged.get(as_logged(failing), []) if failing is not None else []
            said = [r for r in lines if r.strip() and (reason is None or reason.encode() in r)]
            if failing is None:
                ok, detail = False, detail + "; no name of it is missing (it leaves the mount?)"
            elif not said:
                ok = False
                detail += f"; no 'lookup {as_logged(failing)!r}: missing: ...{reason or ''}...' in the log"
                detail += f" (logged: {lines[:2]!r})"
            else:
                reasons += 1
                label += f" (logged: {shown(said[0].decode(errors='replace'), 70)})"
        check(label, ok, detail)
    return tried, reasons


LISTED = {b"spatial/X_pca/G=208063": [b"cols=0,1,2"], b"spatial/X_pca/G=208064": [b"cols=0,1"],
          b"spatial/X_pca/G=94906266": [b"cols=0"], b"spatial/X_umap/G=9007199254740991": [b"cols=0"],
          b"stratified/cell_type/balanced/min=4294967295": [b"seed0"],
          b"uniform/seed4294967295": [b"k=1", b"k=10", b"k=60"]}


def check_listings(mount):
    """Directories at the edge of a refusal list only names that exist (a
    grid lists as many default columns as G^d < 2^53 allows)."""
    for directory, want in LISTED.items():
        names = sorted(os.listdir(mount.path(directory)))
        missing = [n for n in names if error_of(os.stat, mount.path(directory + b"/" + n))]
        check(f"listing {directory.decode()}: {b', '.join(names).decode()}, each exists",
              names == want and not missing, f"listed {names}, want {want}; missing {missing}")


def check_stats(mount):
    """stats.json parses, counts refusals, and keeps a name that is not UTF-8."""
    name = b"utf8-regression\xff\xfe"
    error_of(os.stat, mount.path(name))
    # A snapshot may be reused for a moment (one being read is kept): a few
    # tries, no time limit asserted.
    for _ in range(50):
        with open(mount.path(b".zarrmount/stats.json"), "rb") as f:
            stats = json.loads(f.read())
        kept = [r for r in stats["refusals"] if r.get("path") == "utf8-regression??"]
        if kept:
            break
        time.sleep(0.1)
    check("stats.json: a refused name that is not UTF-8 is kept (its bad bytes as '?')",
          kept and kept[0].get("reason", "").startswith("utf8-regression??:"), json.dumps(stats["refusals"][:2]))
    return stats


def check_source_name():
    """A source whose path is not UTF-8 mounts (info.json and stats.json,
    which hold only UTF-8, show its other bytes as '?')."""
    directory = os.path.join(live_mount.PARENT.encode(), b"sources-\xe9t\xe9")
    os.makedirs(directory, exist_ok=True)
    source = os.path.join(directory, b"caf\xe9.h5ad")
    shutil.copy(live_mount.SOURCE, source)
    # fsname: /proc/mounts would show the path as it is, and other tests read
    # it as UTF-8.
    with Mount(source, "fsname=zarrmount-latin1-source", debug=False) as mount:
        info = json.loads(open(mount.path(b".zarrmount/info.json"), "rb").read())
        stats = json.loads(open(mount.path(b".zarrmount/stats.json"), "rb").read())
        check("a source named in Latin-1 mounts; info.json and stats.json name it with '?'",
              info["source"].endswith("/sources-?t?/caf?.h5ad") and stats["source"] == info["source"]
              and open(mount.path(b"full/.zgroup"), "rb").read().startswith(b"{"), info["source"])


def check_explain(entries):
    """`zarrmount explain SOURCE PATH --json` with a path that is not UTF-8:
    JSON (which holds only UTF-8) with the path's other bytes as '?', exit 2
    and the reason when it does not exist."""
    for number, expected, category, path, reason in entries:
        try:
            path.decode("utf-8")
            continue
        except UnicodeDecodeError:
            pass
        if len(path) > 4000:
            continue
        done = subprocess.run([live_mount.BINARY, "explain", live_mount.SOURCE, path, "--json"], capture_output=True)
        try:
            document = json.loads(done.stdout)
        except ValueError:
            document = {}
        ok = (done.returncode in (0, 2) and "?" in document.get("path", "")
              and (done.returncode == 0 or document.get("reason")))
        check(f"explain --json: {shown(path)}: exit {done.returncode}, {document.get('kind')}", ok,
              f"line {number}: {done.stdout[-300:]!r} {done.stderr[-300:]!r}")


def main():
    entries = load_list()
    counts = {}
    for _, expected, category, _, _ in entries:
        counts[expected] = counts.get(expected, 0) + 1
    check(f"hostile_paths.txt: {len(entries)} paths, at least 300 refused "
          f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})",
          len(entries) - counts.get("OK", 0) >= 300)
    mount = None
    try:
        mount = Mount(live_mount.SOURCE, f"sets={write_sets()}")
        kept = warm_up(mount)
        wait_quiet(mount)
        before = mount.memory()
        tried, reasons = check_list(mount, entries)
        refused = sum(1 for t in tried if t[1].startswith("ENOENT") and set(t[5].values()) == {errno.ENOENT})
        check(f"the daemon logged a reason for every ENOENT path ({reasons} of {refused})", reasons == refused)
        wait_quiet(mount)
        after_list = mount.memory()
        for path in hostile_names(400, EXTRA_NAMES):
            error_of(os.stat, mount.path(path))
        wait_quiet(mount)
        after_extra = mount.memory()
        growth_list = after_list["VmRSS"] - before["VmRSS"]
        growth_extra = after_extra["VmRSS"] - after_list["VmRSS"]
        figures = (f"VmRSS {before['VmRSS']} KiB after the warm-up, {after_list['VmRSS']} after the list, "
                   f"{after_extra['VmRSS']} after {EXTRA_NAMES} more names; VmHWM {before['VmHWM']} KiB after "
                   f"the warm-up, {after_extra['VmHWM']} at the end")
        check(f"memory over the list: VmRSS grew {growth_list} KiB (bound {LIST_GROWTH_BOUND_KIB})",
              growth_list < LIST_GROWTH_BOUND_KIB, figures)
        check(f"peak memory over the list: VmHWM grew {after_list['VmHWM'] - before['VmHWM']} KiB "
              f"(bound {LIST_GROWTH_BOUND_KIB})", after_list["VmHWM"] - before["VmHWM"] < LIST_GROWTH_BOUND_KIB,
              figures)
        check(f"memory stays flat over {EXTRA_NAMES} more refused names: VmRSS grew {growth_extra} KiB "
              f"(bound {EXTRA_GROWTH_BOUND_KIB})", growth_extra < EXTRA_GROWTH_BOUND_KIB, figures)
        print(f"# {figures}", file=sys.stderr)
        check("the daemon is alive after every path", mount.alive())
        log = mount.log()
        trouble = [word for word in (b"too many views", b"out of memory", b"Input/output error", b"a bug")
                   if word in log]
        check("no path made the daemon fail (nothing but 'missing' for names that do not exist)", not trouble,
              repr(trouble))
        check_open_files(mount, "after every path")
        for path, data in kept.items():
            check(f"still served, the same bytes: {path.decode()}", read_fresh(mount.path(path)) == data)
        check_listings(mount)
        check_stats(mount)
    except Exception:  # noqa: BLE001
        check("hostile paths", False, traceback.format_exc(limit=4))
    finally:
        if mount is not None:
            status = mount.stop()
            log = mount.log()
            check("unmounted: the daemon exits 0", status == 0, f"status {status}")
            check("no sanitizer report in the daemon's log", not sanitizer_report(log),
                  log[-3000:].decode(errors="replace"))
            check("no mount left behind", mount.point not in mounted_points())
    try:
        check_explain(entries)
        check_source_name()
    except Exception:  # noqa: BLE001
        check("a source named in Latin-1", False, traceback.format_exc(limit=4))
    return report()


if __name__ == "__main__":
    sys.exit(main())
