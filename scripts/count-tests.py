#!/usr/bin/python3
"""Counts test results in meson's test logs and prints "N passed, N failed".

Each TAP result line ("ok ..." / "not ok ...") of a test counts as one test;
a test that printed no TAP counts once by its own result. Usage:
count-tests.py BUILD_DIR_OR_TESTLOG_JSON...

Before the counts it lists every failure (the test, its "not ok" line and
the first lines of its diagnostics), so the tail of a CI log, often all
that is kept, names what failed.
"""
import json
import re
import sys

TAP_LINE = re.compile(r"^(not ok|ok)\b(.*)$")


FAILURES = []  # (build, test, line, diagnostics)


def count(build_dir):
    passed = failed = skipped = 0
    path = build_dir if build_dir.endswith(".json") else f"{build_dir}/meson-logs/testlog.json"
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as error:
        print(f"count-tests: no test log in {build_dir}: {error.strerror}")
        return 0, 1, 0
    for line in lines:
        entry = json.loads(line)
        result = entry.get("result")
        output = entry.get("stdout") or entry.get("stdo") or ""
        output_lines = output.splitlines()
        results = [TAP_LINE.match(l) for l in output_lines]
        for at, r in enumerate(results):
            if r and r.group(1) == "not ok":
                notes = []
                for l in output_lines[at + 1:at + 6]:
                    if not l.startswith("#"):
                        break
                    notes.append(l[:200])
                FAILURES.append((build_dir, entry.get("name", "?"), output_lines[at][:200], notes))
        results = [r for r in results if r]
        if results:
            for r in results:
                if r.group(1) == "ok":
                    if re.search(r"#\s*skip", r.group(2), re.I):
                        skipped += 1
                    else:
                        passed += 1
                else:
                    failed += 1
            # A crash after some results still fails the test as a whole.
            if result not in ("OK", "EXPECTEDFAIL", "SKIP") and all(r.group(1) == "ok" for r in results):
                failed += 1
                FAILURES.append((build_dir, entry.get("name", "?"), f"{result} after its last result", []))
        elif result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
            FAILURES.append((build_dir, entry.get("name", "?"), f"{result}", []))
    return passed, failed, skipped


def main():
    passed = failed = skipped = 0
    for build_dir in sys.argv[1:]:
        p, f, s = count(build_dir)
        print(f"{build_dir}: {p} passed, {f} failed, {s} skipped")
        passed, failed, skipped = passed + p, failed + f, skipped + s
    for build, test, line, notes in FAILURES:
        print(f"failed: {build} / {test}: {line}")
        for note in notes:
            print(f"    {note}")
    summary = f"{passed} passed, {failed} failed"
    if skipped:
        summary += f", {skipped} skipped"
    print(summary)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
