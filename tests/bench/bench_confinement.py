"""What confining the workers costs: wall time of `opcase run PATHS --backend state_backends:stateless
--jobs J` (opcase's reference, in worker processes) on several sides, runs interleaved, the same cases
for every side; the sides come in pairs, WITHOUT WITH, and each pair's cost is printed three ways: the
ratio of the least tries, of the medians, and the median of the tries' own ratios (the two runs of a try
are next to each other in time, so that ratio is the least touched by a load that drifts).

    python3 tests/bench/bench_confinement.py WITHOUT WITH [WITHOUT WITH...] --paths PATHS... [--jobs J] [--tries N]

A SIDE is a checkout's root (`git archive COMMIT | tar -x -C DIR`), run as `python -m harness.cli`
from that root with its own tests/ on PYTHONPATH; or ROOT:unconfined, the same checkout with the
workers' OS layers patched out in the measured process and its workers only (this file, run as the
opcase command: see _unconfined below).  The unconfined side has no private HOME, no
PR_SET_NO_NEW_PRIVS, no user namespace attempt, no Landlock, and a dumpable judge; what stays is the
shape of today's judging itself (the judge loads and checksums each case and hands its inputs over
in sealed memory, no path), which only an older checkout shows without (its SIDE as a plain root).

    python3 tests/bench/bench_confinement.py --parts ROOT CASE [--tries N]

times, in ROOT's code, the parts a worker could wait on: a worker's start up to its backend loaded (from
the judge), the confinement itself within it (the import finders' listing and confine_self, the
imports they share with the worker's own left out), and the judge's load, checksums and sealing of CASE,
which the judge does while the worker starts.

This is a measurement only: opcase itself has no switch that turns a layer off.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

UNCONFINED = "OPCASE_BENCH_UNCONFINED"


def _unconfined() -> None:
    """Patch the confinement layers out of this process (and, as spawn re-runs this file as each
    worker's __mp_main__ before the worker's own code, out of every worker it starts)."""
    sys.path.insert(0, os.getcwd())   # the checkout being measured, not the one this file is in
    from harness.worker import confine
    confine.confine_self = lambda private_dir, readable, close_outside=None: ["none (tests/bench/bench_confinement.py)"]
    confine.protect_judge = lambda: "judge not dumpable: none (tests/bench/bench_confinement.py)"
    confine.backend_readable = lambda backend_spec: []


if os.environ.get(UNCONFINED) == "1":
    _unconfined()


def once(side: str, paths: list[str], jobs: int) -> float:
    tree, _, mode = side.partition(":")
    env = {**os.environ, "PYTHONPATH": os.path.join(tree, "tests"), UNCONFINED: "1" if mode else "0"}
    command = [os.path.abspath(__file__), "--run-opcase"] if mode else ["-m", "harness.cli"]
    started = time.monotonic()
    done = subprocess.run([sys.executable, *command, "run", *map(os.path.abspath, paths), "--backend",
                           "state_backends:stateless", "--jobs", str(jobs)], cwd=tree, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{side}: exit {done.returncode}\n{done.stdout[-2000:]}")
    if mode and "none (tests/bench/bench_confinement.py)" not in done.stdout:
        sys.exit(f"{side}: the layers were not patched out:\n{done.stdout[-2000:]}")
    return took


_PARTS = r"""
import os, statistics, sys, tempfile, time
sys.path.insert(0, os.getcwd())
from gen.core.casefile import load
from harness.backends import module_and_attr
from harness.judge.worker_process import WorkerProcess, make_run_dir
from harness.worker import case_job, confine
import harness.worker.serve, harness.backends.builtin
spec, case_path, tries = sys.argv[1], sys.argv[2], int(sys.argv[3])
started, sealed = [], []
for _ in range(tries):
    t = time.perf_counter()
    worker = WorkerProcess(spec, make_run_dir(), 1)
    assert worker.await_loaded(time.monotonic() + 120)[0] == "loaded"
    started.append(time.perf_counter() - t)
    worker.stop()
    t = time.perf_counter()
    for fd in case_job.seal_inputs(load(case_path)):
        os.close(fd)
    sealed.append(time.perf_counter() - t)
t = time.perf_counter()
confine.backend_readable(spec)
layers = confine.confine_self(tempfile.mkdtemp(), [])
confined = time.perf_counter() - t
print(f"a worker's start to its backend loaded: median {statistics.median(started) * 1e3:.0f} ms, least {min(started) * 1e3:.0f} ms")
print(f"the judge's load, checksums and sealing of the case: median {statistics.median(sealed) * 1e3:.0f} ms, least {min(sealed) * 1e3:.0f} ms")
print(f"the confinement within a worker's start: {confined * 1e3:.1f} ms ({'; '.join(layers)})")
"""


def parts(tree: str, case: str, tries: int) -> None:
    env = {**os.environ, "PYTHONPATH": os.path.join(tree, "tests")}
    subprocess.run([sys.executable, "-c", _PARTS, "state_backends:stateless", os.path.abspath(case), str(tries)],
                   cwd=tree, env=env, check=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sides", nargs="+")
    parser.add_argument("--paths", nargs="+", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    if len(args.sides) % 2:
        parser.error("the sides come in pairs: WITHOUT WITH")
    times: dict[str, list[float]] = {side: [] for side in args.sides}
    loads = []
    for number in range(args.tries):
        # Interleaved: each try starts one pair further on, a pair's two runs next to each other, the one
        # without first on even tries and last on odd ones, so that no side always follows the same one.
        pairs = list(zip(args.sides[::2], args.sides[1::2]))
        pairs = pairs[number % len(pairs):] + pairs[:number % len(pairs)]
        turn = [side for pair in pairs for side in (pair if number % 2 == 0 else pair[::-1])]
        for side in turn:
            times[side].append(once(side, args.paths, args.jobs))
            loads.append(os.getloadavg()[0])
            print(f"try {number + 1} {side} {times[side][-1]:.2f} s (load {loads[-1]:.1f})", flush=True)
    for side, taken in times.items():
        print(f"{side}: least {min(taken):.2f} s, median {statistics.median(taken):.2f} s, "
              f"tries {', '.join(f'{t:.2f}' for t in taken)}")
    for without, with_ in zip(args.sides[::2], args.sides[1::2]):
        a, b = times[without], times[with_]
        paired = statistics.median(y / x for x, y in zip(a, b))
        print(f"{with_} against {without}: least {min(b) / min(a):.3f}x, median {statistics.median(b) / statistics.median(a):.3f}x, "
              f"median of the tries' ratios {paired:.3f}x")
    print(f"load average {min(loads):.1f} to {max(loads):.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run-opcase"]:
        from harness.cli import main as opcase
        opcase(sys.argv[2:], prog_name="opcase")
    elif sys.argv[1:2] == ["--parts"]:
        parts(sys.argv[2], sys.argv[3], int(sys.argv[5]) if sys.argv[4:5] == ["--tries"] else 5)
    else:
        main()
