#!/usr/bin/python3
"""The selection kernel against numpy, in one run, over the same ranks.

For n = 10^7 and 10^8 and k = 1% and 50% of n, times:
  - zarrmount's kernel (bench_select: uniform, and blocks with B = 1000), and
  - numpy: the ranks of all n cells computed vectorised, np.argpartition for
    the k lowest, then the same two outputs (positions ascending, and the
    priority order by rank),
checks that both keep the same cells (the first ranks in priority order),
and prints each time with the ratio numpy / kernel and the kernel's peak
memory (n = 10^8 must stay within 2 GB).

Usage: bench/select_vs_numpy.py [BUILD_DIR] [--quick]
  BUILD_DIR defaults to build/release; --quick runs n = 10^6 and 10^7 only.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

SEED = 0


def fmix32(h):
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    h = h ^ (h >> np.uint32(16))
    return h


def numpy_uniform(n, k):
    """Returns (seconds, the first three cells of the priority order)."""
    start = time.perf_counter()
    with np.errstate(over="ignore"):
        key = fmix32(np.uint32(SEED) ^ np.uint32(0x9E3779B9))
        ranks = fmix32(np.arange(n, dtype=np.uint32) ^ key)
    kept = np.argpartition(ranks, k - 1)[:k] if k < n else np.arange(n)
    order = kept[np.argsort(ranks[kept], kind="stable")]
    positions = np.sort(kept)
    seconds = time.perf_counter() - start
    del ranks, positions
    return seconds, [int(x) for x in order[:3]]


def kernel(build_dir, method, n, k, block=None):
    args = [os.path.join(build_dir, "bench", "bench_select"), method, str(n), str(k)]
    if block:
        args.append(str(block))
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build_dir = args[0] if args else "build/release"
    sizes = [10**6, 10**7] if "--quick" in sys.argv else [10**7, 10**8]
    print(f"{'n':>11} {'k':>11} {'kernel uniform':>15} {'numpy':>9} {'ratio':>7} "
          f"{'kernel blocks':>14} {'kernel peak':>12}")
    ok = True
    for n in sizes:
        for share in (0.01, 0.5):
            k = int(n * share)
            ours = kernel(build_dir, "uniform", n, k)
            blocks = kernel(build_dir, "blocks", n, k, 1000)
            theirs, head = numpy_uniform(n, k)
            if head != ours["orderHead"]:
                print(f"MISMATCH n={n} k={k}: numpy order starts {head}, kernel {ours['orderHead']}")
                ok = False
            peak = max(ours["maxRssBytes"], blocks["maxRssBytes"])
            print(f"{n:>11} {k:>11} {ours['seconds']:>14.3f}s {theirs:>8.3f}s "
                  f"{theirs / ours['seconds']:>6.1f}x {blocks['seconds']:>13.3f}s "
                  f"{peak / 2**20:>9.0f} MiB")
            if n >= 10**8 and peak > 2 * 2**30:
                print(f"OVER BUDGET: n={n} k={k} peaked at {peak / 2**30:.2f} GiB (limit 2 GiB)")
                ok = False
    print("ratio = numpy seconds / kernel seconds (higher is better for the kernel)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
