#!/usr/bin/python3
"""The element model over malformed but HDF5-valid files (meson test "model-mutations").

Generates ZM_MODEL_COUNT (default 240) mutated fixtures with tests/fuzz/mutate_sources.py
under a fixed seed (ZM_MODEL_SEED, default 20241130) into a temporary directory, takes the
committed corpus (tests/fuzz/corpus/model/, each file described in its MANIFEST.json), and
runs tests/fuzz/model_driver (ZM_MODEL_DRIVER) over all of them: each file opened,
inspected and every file of its views read, in a child process of its own.

One TAP line a file. A file fails when its child crashed, hung, leaked or met a sanitizer;
when the driver saw a problem (an error with an empty reason, a name listed twice in a
directory, a file whose bytes are not its size); or when the outcome contradicts what the
mutation made of the file:
  error  the file view and the full view must each fail for the element (the file refused
         at open, the view refused, or a file under the element failing), with a reason that
         names it (its model path, or the HDF5 object that was changed);
  refuse the file is refused at open (whatever the reason names);
  ok     the file opens and file/ and full/ read without an error;
  same   every view but blocks/ serves the bytes of the unmutated fixture;
  any    anything short of the failures above.
Corpus entries with a "regression" field get a second line naming the bug they caught.

Usage: test_model_mutations.py [--count N] [--seed S] [--no-corpus] [--jobs J] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("ZM_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "fixtures", "sources")
CORPUS = os.path.join(HERE, "corpus", "model")
GENERATOR = os.path.join(HERE, "mutate_sources.py")
# Views compared for "same": blocks/ follows the chunk layout (its default block size).
SAME_VIEWS_SKIP = ("blocks/",)


def find_driver():
    driver = os.environ.get("ZM_MODEL_DRIVER")
    if driver and os.path.exists(driver):
        return driver
    for build in ("build/test", "build/asan"):
        candidate = os.path.join(ROOT, build, "tests", "model_driver")
        if os.path.exists(candidate):
            return candidate
    sys.exit("model_driver not found: set ZM_MODEL_DRIVER")


def generate(out_dir, seed, count, first=0):
    subprocess.run([sys.executable, GENERATOR, "--seed", str(seed), "--count", str(count),
                    "--first", str(first), out_dir], check=True)
    with open(os.path.join(out_dir, "mutations.json")) as f:
        records = json.load(f)
    for r in records:
        r["path"] = os.path.join(out_dir, r["file"])
    return records


def run_driver(driver, paths, jobs=2, timeout_per_file=120):
    """Runs the driver over paths in jobs processes; returns {path: report} and
    {path: stderr section} (only for files whose child failed)."""
    reports, stderr_of = {}, {}
    if not paths:
        return reports, stderr_of
    jobs = max(1, min(jobs, len(paths)))
    parts = [paths[i::jobs] for i in range(jobs)]
    procs = []
    for part in parts:
        # Refusals quote what the file holds: stderr need not be UTF-8.
        out = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        err = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        p = subprocess.Popen([driver, "--timeout", str(timeout_per_file)] + part, stdout=out,
                             stderr=err)
        procs.append((p, out, err, part))
    for p, out, err, part in procs:
        p.wait()
        out.seek(0)
        err.seek(0)
        for line in out:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "crash" in r and r["file"] in reports:
                reports[r["file"]]["crash"] = r["crash"]  # died after its report (a leak)
            else:
                reports[r["file"]] = r
        current, sections = None, {}
        for line in err:
            if line.startswith("== model_driver: "):
                current = line[len("== model_driver: "):].rstrip("\n")
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
        for path in part:
            if path not in reports:
                reports[path] = {"file": path, "crash": "no report (the driver itself died)"}
            if "crash" in reports[path]:
                stderr_of[path] = "".join(sections.get(path, []))[:8000]
    return reports, stderr_of


def view_errors(report, view):
    """(status, reasons) of a view: status "missing", "refused", "errors" or "ok"."""
    for v in report.get("views", []):
        if v["view"] == view:
            if v["status"] != "ok":
                return "refused", [v.get("reason", "")]
            errors = v.get("errors", [])
            return ("errors" if errors else "ok"), [e["path"] + ": " + e["reason"] for e in errors]
    return "missing", []


def outcome(report):
    """refused (at open), errors (some view or file failed), success, or crash."""
    if "crash" in report:
        return "crash"
    if report.get("open") != "ok":
        return "refused"
    for v in report.get("views", []):
        if v["status"] != "ok" or v.get("errors"):
            return "errors"
    return "success"


def digests(report):
    return {v["view"]: v.get("digest") for v in report.get("views", [])
            if v.get("digest") and not v["view"].startswith(SAME_VIEWS_SKIP)}


def names_for(record):
    """Texts an error about the mutated element may name it by."""
    out = set()
    element = record.get("element") or ""
    if element:
        out.add(element)
    target = (record.get("target") or "").lstrip("/").split("#")[0]
    if target:
        out.add(target)
        if "/" in target:
            out.add(target.rsplit("/", 1)[0])
    return [n for n in out if n]


def judge(record, report, base_report=None):
    """Returns (ok, summary, diagnostics)."""
    diag = []
    if "crash" in report:
        return False, "crash: " + report["crash"], diag
    if report.get("problems"):
        return False, "problems: " + "; ".join(report["problems"][:3]), diag
    result = outcome(report)
    expect = record.get("expect", "any")
    element = record.get("element") or ""
    names = names_for(record)
    if expect == "error":
        if result == "refused":
            if names and not any(n in report.get("reason", "") for n in names):
                return False, "refused, but not naming %s: %s" % (element, report.get("reason")), diag
            return True, "refused: " + report.get("reason", ""), diag
        store = element.split("#")[0]
        for view in ("file", "full"):
            status, reasons = view_errors(report, view)
            if status == "missing":
                return False, "view %s missing" % view, diag
            if status == "ok":
                return False, "%s/ served %s without an error (expected one: %s)" % (
                    view, element, record.get("detail") or record.get("label")), diag
            ours = [r for r in reasons if r.startswith("%s/%s/" % (view, store)) or
                    any(n in r for n in names)]
            if not ours:
                return False, "%s/ failed, but not for %s: %s" % (view, element, reasons[:2]), diag
            if status == "errors":
                named = [r for r in ours if any(n in r.split(": ", 1)[-1] for n in names)]
                if not named:
                    return False, "%s/: an error for %s that does not name it: %s" % (
                        view, element, ours[0]), diag
        status, reasons = view_errors(report, "file")
        return True, "error as expected: " + (reasons[0] if reasons else ""), diag
    if expect == "refuse":
        if result != "refused":
            return False, "not refused at open (%s)" % result, diag
        return True, "refused: " + report.get("reason", ""), diag
    if expect == "ok":
        if result == "refused":
            return False, "refused a valid file: " + report.get("reason", ""), diag
        for view in ("file", "full"):
            status, reasons = view_errors(report, view)
            if status != "ok":
                return False, "%s/ failed on a valid file: %s" % (view, reasons[:2]), diag
        return True, result, diag
    if expect == "same":
        if base_report is None:
            return False, "no report of the unmutated fixture", diag
        if result == "refused" and outcome(base_report) != "refused":
            return False, "refused what the fixture serves: " + report.get("reason", ""), diag
        mine, theirs = digests(report), digests(base_report)
        differ = sorted(v for v in theirs if mine.get(v) != theirs[v])
        if differ:
            for view in differ[:3]:
                status, reasons = view_errors(report, view)
                diag.append("%s: %s %s" % (view, status, reasons[:2]))
            return False, "serves other bytes than the fixture in %s" % ", ".join(differ[:4]), diag
        return True, "same bytes as the fixture", diag
    return True, result + (": " + report.get("reason", "") if result == "refused" else ""), diag


def load_corpus():
    manifest = os.path.join(CORPUS, "MANIFEST.json")
    if not os.path.exists(manifest):
        return []
    with open(manifest) as f:
        records = json.load(f)
    for r in records:
        r["path"] = os.path.join(CORPUS, r["file"])
    return records


def check(records, driver, jobs, emit):
    """Runs and judges records; emit(ok, text, diag) per file. Returns the reports."""
    bases = sorted({r["base"] for r in records if r.get("expect") == "same"})
    base_paths = [os.path.join(FIXTURES, b) for b in bases]
    paths = [r["path"] for r in records]
    reports, stderr_of = run_driver(driver, base_paths + paths, jobs)
    base_reports = {b: reports.get(os.path.join(FIXTURES, b)) for b in bases}
    for r in records:
        report = reports[r["path"]]
        ok, text, diag = judge(r, report, base_reports.get(r["base"]))
        if not ok and r["path"] in stderr_of:
            diag += stderr_of[r["path"]].splitlines()[:60]
        r["outcome"] = outcome(report)
        r["ok"] = ok
        emit(ok, r, text, diag)
        if r.get("regression"):
            emit(ok, dict(r, file="regression: " + r["regression"]), text, [])
    return reports


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=int(os.environ.get("ZM_MODEL_COUNT", "240")))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("ZM_MODEL_SEED", "20241130")))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("ZM_MODEL_JOBS", "2")))
    parser.add_argument("--no-corpus", action="store_true")
    parser.add_argument("--keep", help="keep the generated files in this directory")
    args = parser.parse_args()
    driver = find_driver()
    started = time.monotonic()
    workdir = args.keep or tempfile.mkdtemp(prefix="zm-model-")
    try:
        records = [] if args.no_corpus else load_corpus()
        records += generate(workdir, args.seed, args.count)
        print("1..%d" % (len(records) + sum(1 for r in records if r.get("regression"))))
        n = [0]
        failed = [0]

        def emit(ok, record, text, diag):
            n[0] += 1
            name = record["file"]
            text = " ".join(text.split())[:300]
            print("%s %d - %s: %s" % ("ok" if ok else "not ok", n[0], name, text))
            if not ok:
                failed[0] += 1
                print("#   mutation %s (%s), expect %s, element %s, base %s" % (
                    record.get("label"), record.get("detail") or "", record.get("expect"),
                    record.get("element"), record.get("base")))
                for line in diag:
                    print("#   " + line.rstrip())
            sys.stdout.flush()

        check(records, driver, args.jobs, emit)
        counts = {}
        kinds = {}
        for r in records:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
            kinds[r["mutation"]] = kinds.get(r["mutation"], 0) + 1
        print("# %d files (%d corpus, %d generated with seed %d) in %.1f s: %s" % (
            len(records), len(records) - args.count, args.count, args.seed,
            time.monotonic() - started, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
        print("# mutation kinds: " + ", ".join("%s %d" % kv for kv in sorted(kinds.items())))
        return 1 if failed[0] else 0
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
