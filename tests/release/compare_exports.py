#!/usr/bin/python3
"""The same views exported by this machine's build and by another Debian
release's build (in its chroot, scripts/debian-chroot) are the same store.

  compare_exports.py RELEASE OURS OTHER
    RELEASE  13 or sid: the other build's chroot
    OURS     this release's zarrmount binary (build/test/zarrmount)
    OTHER    the other release's binary, a path inside the project
             (build/debian-13/test/zarrmount), run in its chroot

Every source of a small set is exported as two views in every codec by both
builds (`zarrmount export`), then compared file by file:
- metadata documents (.zgroup, .zattrs, .zarray, .zmetadata) byte for byte;
- every chunk's decoded bytes (numcodecs decodes both), always identical;
- every chunk's compressed bytes: identical exactly where docs/mount.md's
  table says the codec is stable between the two releases' library
  versions ("identical"), and different in some chunk where it says
  "differs" (else the table would claim a difference not seen).
Prints TAP, and the measured table with the library versions of each side.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import numcodecs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
# The copies of ../shared/data's files (fixtures/shared/README.md).
SHARED = os.path.join(ROOT, "fixtures", "shared")
TABLE = os.path.join(ROOT, "docs", "mount.md")

SOURCES = [
    os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad"),
    os.path.join(ROOT, "fixtures/sources/h5ad/x-dense.h5ad"),
    os.path.join(ROOT, "fixtures/sources/loom/full.loom"),
    os.path.join(ROOT, "fixtures/sources/10x/v3-two-feature-types.h5"),
    os.path.join(SHARED, "h5ad/pbmc68k_reduced.h5ad"),
    os.path.join(SHARED, "h5ad/dentategyrus-50.anndata-0.7.h5ad"),
    os.path.join(SHARED, "loom/mpfc-starmap-158x3704.loom"),
    os.path.join(SHARED, "10x/v3_filtered_feature_bc_matrix.h5"),
]
def present():
    """The sources this clone has (../shared/data may not be beside it)."""
    return [source for source in SOURCES if os.path.exists(source)]


VIEWS = ["full", "uniform/seed0/k=20"]
CODECS = ["none", "zstd:1", "zstd:3", "zstd:9", "blosc:lz4:5:bitshuffle", "blosc:zstd:1:bitshuffle",
          "blosc:zstd:1", "blosc:lz4", "blosc:lz4hc", "blosc:blosclz", "blosc:zlib"]
METADATA = {".zgroup", ".zattrs", ".zarray", ".zmetadata"}
# The libraries whose versions decide compressed bytes (Debian package names).
LIBRARIES = ["libzstd1", "libblosc1", "liblz4-1", "zlib1g"]


def package_versions(prefix):
    """Versions of LIBRARIES, on this machine or (prefix) in a chroot."""
    command = prefix + ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + [
        name + "*" for name in LIBRARIES]
    done = subprocess.run(command, capture_output=True, text=True)
    versions = {}
    for line in done.stdout.splitlines():
        name, _, version = line.partition(" ")
        for library in LIBRARIES:
            if name.startswith(library) and version:
                versions[library] = version
    return versions


def expected(release):
    """docs/mount.md's column for this release pair: codec -> 'identical'
    or 'differs'."""
    lines = open(TABLE, encoding="utf-8").read().splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0].lower() == "codec":
            column = next((j for j, c in enumerate(cells) if re.search(rf"→ *{re.escape(release)}\b", c)),
                          None)
            if column is None:
                continue
            table = {}
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                codec = cells[0].split()[0].strip("`")
                word = cells[column].split()[0].lower() if len(cells) > column and cells[column] else ""
                table[codec] = word
            return table
    raise SystemExit(f"compare_exports: no codec table for Debian {release} in {TABLE}")


def exports(binary, out):
    """(source, view, codec, directory) for every export, and the commands."""
    jobs = []
    for source in present():
        for view in VIEWS:
            for codec in CODECS:
                name = "/".join([os.path.basename(source), view.replace("/", "_"), codec])
                jobs.append((source, view, codec, os.path.join(out, name),
                             [binary, "export", source, view, os.path.join(out, name), "--codec", codec]))
    return jobs


def run_here(jobs):
    for *_, command in jobs:
        os.makedirs(os.path.dirname(command[4]), exist_ok=True)
        subprocess.run(command, check=True, capture_output=True, text=True)


def run_in_chroot(release, jobs):
    script = "set -e\n" + "".join(f"mkdir -p {shlex.quote(os.path.dirname(command[4]))}\n"
                                   f"{shlex.join(command)} >/dev/null\n" for *_, command in jobs)
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts/debian-chroot"), release, "bash", "-c",
                           script], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"exports in the Debian {release} chroot failed: {done.stderr.strip()[-800:]}")


def files_of(directory):
    found = []
    for parent, _, names in os.walk(directory):
        for name in names:
            found.append(os.path.relpath(os.path.join(parent, name), directory))
    return sorted(found)


def decoder(array_dir, cache):
    if array_dir not in cache:
        meta = json.load(open(os.path.join(array_dir, ".zarray")))
        compressor = meta.get("compressor")
        cache[array_dir] = numcodecs.get_codec(compressor) if compressor else None
    return cache[array_dir]


def compare(ours_dir, other_dir):
    """(problems, chunks, chunks whose compressed bytes differ)."""
    problems, chunks, differing = [], 0, 0
    ours, other = files_of(ours_dir), files_of(other_dir)
    if ours != other:
        only = sorted(set(ours) ^ set(other))
        return [f"different files: {only[:5]}"], 0, 0
    codecs = {}
    for rel in ours:
        a = open(os.path.join(ours_dir, rel), "rb").read()
        b = open(os.path.join(other_dir, rel), "rb").read()
        if os.path.basename(rel) in METADATA:
            if a != b:
                problems.append(f"{rel}: metadata differs")
            continue
        chunks += 1
        if a == b:
            continue
        differing += 1
        codec = decoder(os.path.dirname(os.path.join(ours_dir, rel)), codecs)
        if codec is None:
            problems.append(f"{rel}: an uncompressed chunk differs")
            continue
        if bytes(codec.decode(a)) != bytes(codec.decode(b)):
            problems.append(f"{rel}: decoded values differ")
    return problems, chunks, differing


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    release, ours_binary, other_binary = sys.argv[1:]
    table = expected(release)
    out = os.path.join(ROOT, "build", "releases", f"12-{release}")
    shutil.rmtree(out, ignore_errors=True)
    ours_jobs = exports(os.path.abspath(ours_binary), os.path.join(out, "12"))
    other_jobs = exports(os.path.abspath(other_binary), os.path.join(out, release))
    results = []
    try:
        run_here(ours_jobs)
        run_in_chroot(release, other_jobs)
    except (subprocess.CalledProcessError, RuntimeError) as error:
        detail = getattr(error, "stderr", None) or str(error)
        print("1..1")
        print(f"not ok 1 - export under both builds\n# {detail.strip()[-400:]}")
        return 1
    per_codec = {codec: [0, 0] for codec in CODECS}
    for (source, view, codec, ours_dir, _), (_, _, _, other_dir, _) in zip(ours_jobs, other_jobs):
        problems, chunks, differing = compare(ours_dir, other_dir)
        per_codec[codec][0] += chunks
        per_codec[codec][1] += differing
        label = f"{os.path.basename(source)} {view} --codec {codec}: metadata and decoded values identical"
        results.append((not problems, label, "; ".join(problems[:3])))
    for codec in CODECS:
        chunks, differing = per_codec[codec]
        want = table.get(codec)
        seen = f"{differing} of {chunks} compressed chunks differ"
        if want == "identical":
            results.append((differing == 0, f"{codec}: compressed bytes identical, as the table says ({seen})",
                            ""))
        elif want == "differs" and differing == 0 and len(present()) < len(SOURCES):
            results.append((True, f"{codec}: compressed bytes differ somewhere ({seen}) # SKIP the "
                            f"table's differences were measured over all {len(SOURCES)} sources; "
                            f"{len(SOURCES) - len(present())} are not here (no ../shared/data)", ""))
        elif want == "differs":
            results.append((differing > 0, f"{codec}: compressed bytes differ somewhere, as the table says "
                            f"({seen})", ""))
        else:
            results.append((False, f"{codec}: docs/mount.md has no entry for Debian {release}", seen))
    shutil.rmtree(out, ignore_errors=True)

    print(f"1..{len(results)}")
    for i, (ok, label, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {label}")
        if not ok and detail:
            print(f"# {detail}")
    ours_versions = package_versions([])
    other_versions = package_versions(["bash", os.path.join(ROOT, "scripts/debian-chroot"), release])
    print(f"# libraries, Debian 12: {ours_versions}")
    print(f"# libraries, Debian {release}: {other_versions}")
    print("# | codec | chunks | compressed bytes differing |")
    for codec in CODECS:
        print(f"# | `{codec}` | {per_codec[codec][0]} | {per_codec[codec][1]} |")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
