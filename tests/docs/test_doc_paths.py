#!/usr/bin/python3
"""The documents name only files that exist (issue 19).

Every path under src/, tests/, include/, fixtures/, scripts/ or bench/ that
docs/*.md, docs/zarrmount.1, README.md or CONTRIBUTING.md mention must exist
in the repository: a glob (tests/fuzz/fuzz_*.c) must match something, braces
(src/fs/{tree,export}.c) name every alternative, a directory must be one, and
a program (bench/bench_select) is named by its source (bench/bench_select.c).
A file named alone in backticks (`chunk_cache.c`, any .c, .h, .py or .sh) must
exist somewhere in the repository. Each document is one check, naming every
path it mentions that is not there.

fixtures/shared/README.md's table names exactly the files of fixtures/shared,
each with its size and sha256; where ../shared/data is beside the clone
(ZM_SHARED_DATA), each copy is still byte for byte its file there.

Prints TAP. Needs ZM_SOURCE_ROOT.
"""
import glob
import hashlib
import os
import re
import sys

ROOT = os.path.abspath(os.environ.get("ZM_SOURCE_ROOT", "."))
SHARED = os.environ.get("ZM_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
COPIES = os.path.join(ROOT, "fixtures", "shared")
TOPS = ("src", "tests", "include", "fixtures", "scripts", "bench")
# A path starts a word (not after a letter, a dot or a slash: build/test/tests/...
# is not one) and runs over the characters paths here use.
PATH = re.compile(r"(?<![\w./-])((?:%s)/[-\w./*{},+=]*)" % "|".join(TOPS))
BARE = re.compile(r"`([\w.-]+\.(?:c|h|py|sh))`")
SKIPPED_DIRS = {".git", "build", "subprojects", "__pycache__"}

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))


def documents():
    names = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    names += [os.path.join(ROOT, name) for name in ("docs/zarrmount.1", "README.md", "CONTRIBUTING.md")]
    return [name for name in names if os.path.exists(name)]


def text_of(document):
    with open(document, encoding="utf-8") as f:
        text = f.read()
    if document.endswith(".1"):
        # roff: font changes and escaped hyphens inside the words.
        text = re.sub(r"\\f[BIRP]|\\f\(..", " ", text).replace("\\-", "-").replace("\\&", "")
    return text


def expand(path):
    """A path with {a,b} braces as the paths it names."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    out = []
    for alternative in match.group(1).split(","):
        out += expand(path[:match.start()] + alternative + path[match.end():])
    return out


def exists(path):
    full = os.path.join(ROOT, path)
    if any(c in path for c in "*?["):
        return bool(glob.glob(full))
    if path.endswith("/"):
        return os.path.isdir(full)
    # A program is named by its source.
    return os.path.exists(full) or os.path.exists(full + ".c")


def repository_names():
    names = set()
    for directory, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("build")]
        names.update(files)
    return names


def mentioned(text):
    """The repository paths a text mentions, and the files it names alone."""
    paths = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".,:;")
        if path.count("{") != path.count("}"):
            path = path.split("{")[0]
        paths.update(expand(path))
    return sorted(paths), sorted(set(BARE.findall(text)))


def check_documents():
    names = repository_names()
    total = 0
    for document in documents():
        name = os.path.relpath(document, ROOT)
        paths, bare = mentioned(text_of(document))
        missing = [p for p in paths if not exists(p)]
        missing += [f"{b} (named alone: no file of that name)" for b in bare if b not in names]
        total += len(paths) + len(bare)
        check(f"{name}: the {len(paths)} paths and {len(bare)} files it names exist", not missing,
              "not in the repository: " + ", ".join(missing))
    check(f"the documents name files at all ({total} mentions)", total > 50,
          "the scan found almost no paths: is ZM_SOURCE_ROOT the repository?")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_shared_copies():
    readme = os.path.join(COPIES, "README.md")
    with open(readme, encoding="utf-8") as f:
        rows = [line.split("|")[1:-1] for line in f if line.startswith("| `")]
    listed = {}
    for cells in rows:
        listed[cells[0].strip().strip("`")] = (int(cells[4]), cells[5].strip().strip("`"))
    present = set()
    for directory, _, files in os.walk(COPIES):
        for file in files:
            relative = os.path.relpath(os.path.join(directory, file), COPIES)
            if relative not in ("README.md", "SHA256SUMS"):
                present.add(relative)
    check(f"fixtures/shared/README.md lists exactly the {len(present)} files of fixtures/shared",
          set(listed) == present and present,
          f"not listed: {sorted(present - set(listed))}; listed, not there: {sorted(set(listed) - present)}")
    wrong = [name for name in sorted(present & set(listed))
             if (os.path.getsize(os.path.join(COPIES, name)), sha256(os.path.join(COPIES, name))) != listed[name]]
    check("fixtures/shared: every file has the size and sha256 its README gives", not wrong,
          "differ: " + ", ".join(wrong))
    with open(os.path.join(COPIES, "SHA256SUMS")) as f:
        sums = dict(reversed(line.split()) for line in f if line.strip())
    check("fixtures/shared/SHA256SUMS agrees with the README",
          sums == {name: digest for name, (_, digest) in listed.items()})
    if not os.path.isdir(SHARED):
        check(f"fixtures/shared: each copy is its file in ../shared/data # SKIP {SHARED} is not here "
              "(../shared/data is not beside this clone)", True)
        return
    differ = [name for name in sorted(present)
              if not os.path.exists(os.path.join(SHARED, name))
              or sha256(os.path.join(SHARED, name)) != sha256(os.path.join(COPIES, name))]
    check("fixtures/shared: each copy is byte for byte its file in ../shared/data", not differ,
          "missing or different in ../shared/data: " + ", ".join(differ))


def main():
    check_documents()
    check_shared_copies()
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).splitlines():
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
