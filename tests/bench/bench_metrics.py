"""Throughput of gen.core.metrics.compare on float32 pairs.

    python tests/bench/bench_metrics.py [ELEMENTS] [--repeat R]

ELEMENTS defaults to 100_000_000 (800 MB of golden + actual). The target is >= 1 GB/s of input.
Reported next to two yardsticks measured in the same run: a plain np.copyto of both arrays into
preallocated arrays (memory bandwidth), and a straightforward whole-array numpy formulation of
the same metrics (on at most 10 M elements, where its float64 temporaries fit comfortably).
Times are the best of R runs; other load on the machine shows as a gap between best and median.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# Runs from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gen.core.metrics import compare  # noqa: E402

WHOLE_ARRAY_MAX_ELEMS = 10_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("elements", nargs="?", type=int, default=100_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    actual, golden = make_pair(args.elements)
    input_gb = (actual.nbytes + golden.nbytes) / 1e9
    print(f"elements {args.elements:,}  input {input_gb:.3f} GB (float32 golden + actual)")
    print(f"load average before: {os.getloadavg()[0]:.2f}  cores: {os.cpu_count()}")

    compare_times = timings(lambda: compare(actual, golden, "float32"), args.repeat)
    copy_times = timings(copy_into(actual, golden), args.repeat)
    report("compare", compare_times, input_gb)
    report("np.copyto both", copy_times, input_gb)
    print(f"compare / copy time ratio: {min(compare_times) / min(copy_times):.2f}")

    subset = min(args.elements, WHOLE_ARRAY_MAX_ELEMS)
    actual_sub, golden_sub = actual[:subset], golden[:subset]
    subset_gb = input_gb * subset / args.elements
    whole_times = timings(lambda: whole_array_metrics(actual_sub, golden_sub), args.repeat)
    subset_times = timings(lambda: compare(actual_sub, golden_sub, "float32"), args.repeat)
    print(f"on the first {subset:,} elements:")
    report("  compare", subset_times, subset_gb)
    report("  whole-array numpy", whole_times, subset_gb)
    print(f"  compare / whole-array time ratio: {min(subset_times) / min(whole_times):.2f}")
    check_agreement(
        compare(actual_sub, golden_sub, "float32"), whole_array_metrics(actual_sub, golden_sub)
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def make_pair(n: int):
    """A float32 golden and an actual off by ~1e-3 relative noise, with some exact matches."""
    rng = np.random.default_rng(0)
    golden = rng.standard_normal(n, dtype=np.float32)
    actual = rng.standard_normal(n, dtype=np.float32)
    actual *= np.float32(1e-3)
    actual += golden
    actual[::7] = golden[::7]
    return actual, golden


def copy_into(actual, golden):
    # Touch the targets first so the timing excludes page faults.
    actual_copy, golden_copy = np.ones_like(actual), np.ones_like(golden)

    def copy():
        np.copyto(actual_copy, actual)
        np.copyto(golden_copy, golden)

    return copy


def whole_array_metrics(actual, golden, eps=1e-6) -> dict:
    """The metrics written the obvious way, with whole-array float64 temporaries."""
    e = actual.astype(np.float64)
    b = golden.astype(np.float64)
    d = np.abs(e - b)
    abs_b = np.abs(b)
    unequal = np.count_nonzero(e != b)
    return {
        "diff1": d.sum() / (abs_b.sum() + 1e-9),
        "diff2": np.sqrt((d**2).sum() / ((b**2).sum() + 1e-9)),
        "diff3": np.where(abs_b < eps, d, d / (abs_b + 1e-9)).max(),
        "diff3_2": d.max(),
        "diff4": np.count_nonzero(e < b) / unequal if unequal else None,
    }


def check_agreement(result: dict, expected: dict) -> None:
    for key, value in expected.items():
        if not np.isclose(result[key], value, rtol=1e-9, atol=0):
            raise SystemExit(f"compare disagrees with the whole-array formulation on {key}: "
                             f"{result[key]} vs {value}")


def timings(run, repeat: int) -> list[float]:
    run()  # warm-up: first-touch page faults, thread start-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def report(name: str, times: list[float], gb: float) -> None:
    best, median = min(times), statistics.median(times)
    print(f"{name:<22} best {best:.3f} s  {gb / best:.2f} GB/s   "
          f"(median {median:.3f} s, {gb / median:.2f} GB/s)")


if __name__ == "__main__":
    main()
