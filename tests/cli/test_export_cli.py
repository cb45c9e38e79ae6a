#!/usr/bin/python3
"""`zarrmount export ... --chunk-size SIZE` reads SIZE as the mount's
-o chunk_size= does (src/config/config.c, zm_parse_size): 1M is 1 MiB, the
same store as --chunk-size 1048576 and as the default; 2K is 2048 bytes; a
size that is not one is refused with exit status 2 and one line naming
--chunk-size, before anything is written.

Prints TAP. Needs ZM_BINARY and ZM_SOURCE_ROOT.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
SOURCE = os.path.join(ROOT, "fixtures/sources/h5ad/full-csr.h5ad")
results = []


def check(name, ok, detail=""):
    results.append((ok, name, detail))


def export(out, view, *flags):
    done = subprocess.run([BINARY, "export", SOURCE, view, out, *flags], capture_output=True,
                          text=True, timeout=300)
    return done.returncode, done.stderr


def tree(directory):
    """Every file of a store: relative path -> bytes."""
    files = {}
    for parent, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, directory)] = f.read()
    return files


def chunks_of(files, array):
    return json.loads(files[f"{array}/.zarray"])["chunks"]


def main():
    scratch = tempfile.mkdtemp(prefix="zm-export-cli-")
    try:
        stores = {}
        for label, flags in [("default", []), ("1M", ["--chunk-size", "1M"]),
                             ("1m", ["--chunk-size", "1m"]), ("1MiB", ["--chunk-size", "1MiB"]),
                             ("1048576", ["--chunk-size", "1048576"]),
                             ("2K", ["--chunk-size", "2K"]), ("2048", ["--chunk-size", "2048"])]:
            out = os.path.join(scratch, label)
            code, err = export(out, "full", *flags)
            check(f"export full --chunk-size {label} succeeds", code == 0, err)
            stores[label] = tree(out) if code == 0 else {}
        reference = stores["1048576"]
        check("the store has chunked arrays", "X/data/.zarray" in reference, sorted(reference)[:20])
        for label in ("1M", "1m", "1MiB", "default"):
            check(f"--chunk-size {label} is 1 MiB: the same files, byte for byte, as 1048576",
                  reference and stores[label] == reference,
                  sorted(set(stores[label]) ^ set(reference))[:10])
        check("--chunk-size 2K is 2048 bytes: the same files, byte for byte",
              stores["2K"] and stores["2K"] == stores["2048"],
              sorted(set(stores["2K"]) ^ set(stores["2048"]))[:10])
        if "X/data/.zarray" in reference and "X/data/.zarray" in stores["2K"]:
            small, large = chunks_of(stores["2K"], "X/data"), chunks_of(reference, "X/data")
            check("2K chunks are smaller than 1M chunks (the size reaches the store)",
                  small[0] < large[0] and small[0] * 4 <= 2048, f"{small} vs {large}")

        for bad, says in [("1X", "not a size"), ("M", "not a size"), ("1.5M", "not a size"),
                          ("1MB", "not a size"), ("-1", "not a size"), ("", "not a size"),
                          ("0", "must be more than 0"),
                          ("99999999999999999999999", "too large"), ("16777216T", "too large")]:
            out = os.path.join(scratch, "refused")
            code, err = export(out, "full", "--chunk-size", bad)
            lines = err.strip("\n").split("\n")
            check(f"--chunk-size '{bad}' is refused with status 2", code == 2, f"{code}: {err}")
            check(f"--chunk-size '{bad}': one line naming the option and saying why",
                  len(lines) == 1 and lines[0].startswith("zarrmount export: --chunk-size=")
                  and says in lines[0], err)
            check(f"--chunk-size '{bad}': nothing is written", not os.path.exists(out), out)
        code, err = export(os.path.join(scratch, "refused"), "full", "--chunk-size")
        check("--chunk-size without a value is refused with status 2", code == 2, err)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-6:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
