"""What judging apart from the backend costs: `opcase run` of one suite by two checkouts, alternately.

    python3 tests/bench/bench_judge_apart.py BEFORE_CHECKOUT AFTER_CHECKOUT [CASES] [RUNS]

Each checkout runs its own code (its directory first on PYTHONPATH) on the same case files, with the
reference loaded as a foreign backend (tests/bad_backends.py:object_backend), so that both judge a
backend that runs in a worker process.  Runs alternate (the machine is shared and noisy: a ratio
taken in one session means more than either time alone); it prints each side's median wall time,
their ratio and the load average before and after.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_run(checkout: Path, cases: Path) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(checkout / "tests")])}
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(cases), "--backend",
                               "bad_backends:object_backend", "--json", str(Path(scratch) / "r.json")],
                              env=env, cwd=scratch, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    before, after = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    cases = Path(sys.argv[3]).resolve() if len(sys.argv) > 3 else before / "cases"
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    print(f"load average before: {os.getloadavg()}")
    times: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(runs):
        times["before"].append(one_run(before, cases))
        times["after"].append(one_run(after, cases))
    print(f"load average after: {os.getloadavg()}")
    medians = {side: statistics.median(values) for side, values in times.items()}
    for side, values in times.items():
        print(f"{side:6}: median {medians[side]:.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"after / before: {medians['after'] / medians['before']:.3f}")


if __name__ == "__main__":
    main()
