#!/usr/bin/python3
"""The core library without FUSE (issue 19): libzarrmount-core.a names no
libfuse symbol (fuse_*, defined or undefined), and defines or calls none of
the symbols the FUSE layer's objects (libzarrmount-fs.a, meson.build's
fs_sources) define. The fs set is read from those objects with nm, so a new
fs file or function is covered without a list to keep.

Usage: core_symbols.py NM LIBZARRMOUNT-CORE.a LIBZARRMOUNT-FS.a. Prints TAP.
"""
import subprocess
import sys


def symbols(nm, archive, defined_only):
    """{name: [member, ...]}: the archive's external symbols (defined ones,
    or defined and undefined), with the objects that name them."""
    # POSIX format: "archive[member]: name type [value size]".
    flags = ["-g", "-A", "-P"] + (["--defined-only"] if defined_only else [])
    done = subprocess.run([nm, *flags, archive], capture_output=True, text=True, check=True)
    found = {}
    for line in done.stdout.splitlines():
        where, _, rest = line.partition("]: ")
        fields = rest.split()
        if not rest or len(fields) < 2:
            continue
        member = where.rpartition("[")[2].rpartition("/")[2]
        found.setdefault(fields[0], []).append(f"{member} ({fields[1]})")
    return found


def main():
    nm, core, fs = sys.argv[1:4]
    core_names = symbols(nm, core, defined_only=False)
    fs_defined = symbols(nm, fs, defined_only=True)
    results = []
    # Neither set may be empty: an nm that printed nothing would pass the
    # checks below without having looked.
    results.append((len(core_names) > 0, "the core's symbols are read",
                    f"{len(core_names)} names in {core}"))
    results.append((len(fs_defined) > 0, "the fs objects' defined symbols are read",
                    f"{len(fs_defined)} names in {fs}"))
    fuse = sorted(name for name in core_names if name.startswith("fuse_"))
    results.append((not fuse, "the core names no fuse_ symbol",
                    "; ".join(f"{n}: {', '.join(core_names[n])}" for n in fuse)))
    shared = sorted(set(core_names) & set(fs_defined))
    results.append((not shared, "the core defines or calls no symbol an fs object defines",
                    "; ".join(f"{n}: core {', '.join(core_names[n])}, fs {', '.join(fs_defined[n])}"
                              for n in shared)))
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if detail:
            print(f"# {detail}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
