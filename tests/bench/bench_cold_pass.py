"""What the cold pass (harness.judge.cold_pass) costs: wall time of `opcase run PATHS --backend
state_backends:stateless --jobs J` (the reference, in worker processes) with two checkouts, runs
interleaved, the same cases for both.

    python3 tests/bench/bench_cold_pass.py BEFORE_TREE AFTER_TREE PATHS... [--jobs J] [--tries N]

Each tree is a checkout's root (`git archive COMMIT | tar -x -C DIR`); each run is `python -m
harness.cli` from that root, with its own tests/ on PYTHONPATH.  Prints each try's seconds and the
least of each.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def once(tree: str, paths: list[str], jobs: int) -> float:
    env = {**os.environ, "PYTHONPATH": os.path.join(tree, "tests")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", *map(os.path.abspath, paths), "--backend",
                           "state_backends:stateless", "--jobs", str(jobs)], cwd=tree, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{tree}: exit {done.returncode}\n{done.stdout[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    times = {"before": [], "after": []}
    for _ in range(args.tries):
        for name in ("before", "after"):
            times[name].append(once(getattr(args, name), args.paths, args.jobs))
            print(f"{name} {times[name][-1]:.1f} s", flush=True)
    least = {name: min(t) for name, t in times.items()}
    print(f"least: before {least['before']:.1f} s, after {least['after']:.1f} s "
          f"({least['after'] / least['before']:.2f}x); load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
