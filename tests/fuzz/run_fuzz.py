#!/usr/bin/python3
"""Runs libFuzzer targets (tests/fuzz/fuzz_<target>.c) over their corpora for a
bounded time each and prints one TAP line per target with what it did:

    ok 3 - fuzz share: 81234 runs in 8 s, cov 612, ft 2101, corpus 57 (31 KiB), no crash

A dictionary of the target's tokens (dict/<target>.dict) is given when there is
one. The committed corpus (CORPUS/<target>/) is copied into a working directory
first, so the repository is never written; libFuzzer adds what it finds there.
With --work the working corpus persists (bench/fuzz keeps one between runs);
without, it is a temporary directory removed at the end. A crash, a leak, a
sanitizer report, a timeout or an out-of-memory is "not ok", with the end of
libFuzzer's output as TAP comments; its input is kept under --artifacts
(default BUILD/fuzz-artifacts/): add it to CORPUS/<target>/ and to a unit test.

Usage: run_fuzz.py --build DIR --corpus DIR [--seconds S] [--jobs J]
                   [--work DIR] [--artifacts DIR] [--merge DIR] TARGET...
--merge DIR adds, after the runs, the working inputs that reach code DIR/<target>/
does not (libFuzzer's -merge=1 over edges, not hit counts: a small corpus to commit).
Environment: ZM_FUZZ_SECONDS and ZM_FUZZ_JOBS are the defaults of --seconds and --jobs.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

DONE = re.compile(r"^Done (\d+) runs in (\d+) second")
STATUS = re.compile(r"^#(\d+)\s+\S+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")
EXECUTED = re.compile(r"^stat::number_of_executed_units: (\d+)")
PEAK_RSS = re.compile(r"^stat::peak_rss_mb: +(\d+)")


def copy_corpus(source, destination):
    os.makedirs(destination, exist_ok=True)
    if not os.path.isdir(source):
        return 0
    copied = 0
    for name in sorted(os.listdir(source)):
        path = os.path.join(source, name)
        if os.path.isfile(path) and not os.path.exists(os.path.join(destination, name)):
            shutil.copyfile(path, os.path.join(destination, name))
            copied += 1
    return copied


def corpus_size(directory):
    files = [os.path.join(directory, f) for f in os.listdir(directory)]
    files = [f for f in files if os.path.isfile(f)]
    return len(files), sum(os.path.getsize(f) for f in files)


def run_target(options, name, work):
    binary = os.path.join(options.build, f"fuzz_{name}")
    corpus = os.path.join(work, name)
    copy_corpus(os.path.join(options.corpus, name), corpus)
    artifacts = os.path.join(options.artifacts, name)
    os.makedirs(artifacts, exist_ok=True)
    command = [
        binary,
        f"-max_total_time={options.seconds}",
        f"-rss_limit_mb={options.rss_limit_mb}",
        f"-timeout={options.timeout}",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
    ]
    dictionary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dict", f"{name}.dict")
    if os.path.isfile(dictionary):
        command.append(f"-dict={dictionary}")
    command.append(corpus)
    # Undefined behaviour stops the run like a crash (meson's test environment
    # says so too; a run from the command line may not).
    env = dict(os.environ)
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    if "halt_on_error=1" not in env["UBSAN_OPTIONS"]:
        env["UBSAN_OPTIONS"] += ":halt_on_error=1"
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=options.seconds * 3 + 120, env=env)
        output = result.stdout.decode("utf-8", "replace")
        code = result.returncode
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode("utf-8", "replace")
        code = "timeout"
    runs = seconds = None
    coverage = features = rss = None
    for line in output.splitlines():
        m = PEAK_RSS.match(line)
        if m:
            rss = int(m.group(1))
        m = DONE.match(line)
        if m:
            runs, seconds = int(m.group(1)), int(m.group(2))
        m = EXECUTED.match(line)
        if m and runs is None:
            runs = int(m.group(1))
        m = STATUS.match(line)
        if m:
            coverage, features = int(m.group(2)), int(m.group(3))
    count, size = corpus_size(corpus)
    merged = None
    if options.merge and code == 0:
        target_dir = os.path.join(options.merge, name)
        os.makedirs(target_dir, exist_ok=True)
        before = len(os.listdir(target_dir))
        # Edges only (no hit counts): tens of inputs a target, not thousands.
        subprocess.run([binary, "-merge=1", "-use_counters=0",
                        f"-rss_limit_mb={options.rss_limit_mb}", target_dir, corpus],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        merged = len(os.listdir(target_dir)) - before
    return {"name": name, "code": code, "output": output, "runs": runs, "seconds": seconds,
            "coverage": coverage, "features": features, "rss": rss, "count": count, "size": size,
            "merged": merged, "artifacts": artifacts}


def describe(r):
    parts = [f"{r['runs'] if r['runs'] is not None else '?'} runs in "
             f"{r['seconds'] if r['seconds'] is not None else '?'} s"]
    if r["coverage"] is not None:
        parts.append(f"cov {r['coverage']}, ft {r['features']}")
    parts.append(f"corpus {r['count']} ({(r['size'] + 1023) // 1024} KiB)")
    if r["rss"] is not None:
        parts.append(f"peak RSS {r['rss']} MB")
    if r["merged"] is not None:
        parts.append(f"{r['merged']} merged")
    return ", ".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("ZM_FUZZ_SECONDS", "8")))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("ZM_FUZZ_JOBS", "2")))
    parser.add_argument("--work")
    parser.add_argument("--artifacts")
    parser.add_argument("--merge")
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    parser.add_argument("--timeout", type=int, default=25, help="seconds one input may take")
    parser.add_argument("targets", nargs="+")
    options = parser.parse_args()
    options.artifacts = options.artifacts or os.path.join(options.build, "fuzz-artifacts")

    temporary = None
    work = options.work
    if work is None:
        temporary = tempfile.mkdtemp(prefix="zarrmount-fuzz-")
        work = temporary
    print(f"1..{len(options.targets)}", flush=True)
    failed = 0
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            futures = [pool.submit(run_target, options, name, work) for name in options.targets]
            for number, future in enumerate(futures, 1):
                r = future.result()
                if r["code"] == 0:
                    print(f"ok {number} - fuzz {r['name']}: {describe(r)}, no crash", flush=True)
                    continue
                failed += 1
                kept = sorted(os.listdir(r["artifacts"]))
                print(f"not ok {number} - fuzz {r['name']}: exit {r['code']} after "
                      f"{describe(r)}; inputs kept in {r['artifacts']}: {', '.join(kept[-3:])}",
                      flush=True)
                for line in r["output"].splitlines()[-40:]:
                    print(f"# {line}")
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
