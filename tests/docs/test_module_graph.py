#!/usr/bin/python3
"""docs/architecture.md's module graph is the code's (issue 19).

The table between "<!-- module graph: begin -->" and "<!-- module graph:
end -->" lists each module of src/, its public headers and the other modules
it uses. The code's graph is read from the includes: a file of src/M that
includes "zarrmount/H.h" uses the module whose row claims H.h; one that
includes "N/....h" (a private header of module N) uses N. Checks: every
directory of src/ has a row and every row a directory; every public header
is claimed by exactly one row; each row's "uses" is exactly what its files
include; no module includes another's private header; and the graph has no
cycle (data flows one way).

Prints TAP. Needs ZM_SOURCE_ROOT.
"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(os.environ.get("ZM_SOURCE_ROOT", "."))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([\w]+)/([\w]+)\.h"', re.M)
results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))


def table():
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        text = f.read()
    begin = text.index("<!-- module graph: begin -->")
    end = text.index("<!-- module graph: end -->")
    rows = {}
    for line in text[begin:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        names = lambda cell: set(re.findall(r"`([\w.]+)`", cell))
        rows[cells[0].strip("`")] = (names(cells[1]), names(cells[2]))
    return rows


def main():
    rows = table()
    modules = sorted(d for d in os.listdir(os.path.join(ROOT, "src"))
                     if os.path.isdir(os.path.join(ROOT, "src", d)))
    check("every directory of src/ is a row of the table", set(modules) <= set(rows),
          str(sorted(set(modules) - set(rows))))
    check("every row of the table is a directory of src/", set(rows) <= set(modules),
          str(sorted(set(rows) - set(modules))))
    owner = {}
    doubled = []
    for module, (headers, _) in rows.items():
        for header in headers:
            if header in owner:
                doubled.append(header)
            owner[header] = module
    public = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "include", "zarrmount", "*.h")))
    check("every public header is claimed by one row", not doubled and set(public) == set(owner),
          "doubled %s, unclaimed %s, not there %s" % (doubled, sorted(set(public) - set(owner)),
                                                      sorted(set(owner) - set(public))))
    graph = {}
    for module in modules:
        uses = set()
        private = []
        for path in sorted(glob.glob(os.path.join(ROOT, "src", module, "*.[ch]"))):
            with open(path, errors="replace") as f:
                for top, name in INCLUDE.findall(f.read()):
                    if top == "zarrmount":
                        used = owner.get(name + ".h", "?" + name)
                    else:
                        used = top
                        if top != module:
                            private.append("%s: %s/%s.h" % (os.path.basename(path), top, name))
                    if used != module:
                        uses.add(used)
        graph[module] = uses
        check("%s: no private header of another module" % module, not private, "; ".join(private))
        listed = rows.get(module, (set(), set()))[1]
        check("%s: uses exactly what the table says" % module, uses == listed,
              "the code includes %s; the table says %s" % (sorted(uses), sorted(listed)))
    # A cycle: a module reached again from itself.
    cycle = []

    def reach(start, at, seen):
        for nxt in sorted(graph.get(at, ())):
            if nxt == start:
                cycle.append(start)
            elif nxt not in seen:
                seen.add(nxt)
                reach(start, nxt, seen)

    for module in modules:
        reach(module, module, set())
    check("the module graph has no cycle", not cycle, "modules on a cycle: %s" % sorted(set(cycle)))

    print("1..%d" % len(results))
    for i, (ok, name, detail) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
        if not ok and detail:
            print("# " + detail)
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
