"""Time, disk and peak memory of `opcase gen --suite network`, kernel by kernel.

    python tests/bench/bench_network_suite.py [--out DIR] [--keep] [--baseline B] [SPEC ...]
    python tests/bench/bench_network_suite.py --against CHECKOUT [--select REGEX] [SPEC ...]

Runs `opcase gen SPEC --suite network -o OUT/<op>` (this checkout's, whatever is installed)
for each spec (default: every committed spec) in a child process, with the spec's baseline
for dynamic thresholds unless --baseline names another, then prints a Markdown table: cases, wall time, bytes on disk and
the child's peak RSS, with the load average (1 minute) before and after each kernel: the
machine may be shared.  Each kernel's cases are deleted after measuring unless --keep, so
the largest (carafe: tens of GB) never need to share the disk.

With --against, each kernel's suite is generated twice, by this checkout and by CHECKOUT (another
checkout of opcase, e.g. `git worktree add /tmp/old <commit>`), the two alternating which goes
first from kernel to kernel, each run's cases deleted before the next; the table shows both times,
their ratio and the load average (1 minute) before each, and the totals.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def measure(spec: Path, out: Path, baseline: str | None, checkout: Path = REPO,
            select: str | None = None) -> tuple[int, float, int, float]:
    wrapper = [sys.executable, "-c",
               "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
               sys.executable, "-m", "harness.cli", "gen", str(spec), "--suite", "network", "-o", str(out),
               *(["--baseline", baseline] if baseline else []), *(["--select", select] if select else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    # run from the checkout: `python -m` puts the working directory first on sys.path
    done = subprocess.run(wrapper, capture_output=True, text=True, env=env, cwd=checkout)
    if done.returncode:
        sys.exit(f"{spec}: {done.stderr.strip() or done.stdout.strip()}")
    peak_kb = int(done.stdout.split()[-1])
    seconds = time.perf_counter() - start
    files = [p for p in out.rglob("*") if p.is_file()]
    cases = sum(p.suffix == ".opcase" for p in files)
    return cases, seconds, sum(p.stat().st_size for p in files), peak_kb / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--out", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--baseline", default=None, help="backend for dynamic thresholds (default: each spec's)")
    parser.add_argument("--against", default=None, help="another checkout, timed kernel by kernel beside this one")
    parser.add_argument("--select", default=None, help="only the network cases whose name matches this (gen --select)")
    args = parser.parse_args()
    specs = [Path(s) for s in args.specs] or sorted((REPO / "specs").glob("*.yaml"))
    root = Path(args.out or tempfile.mkdtemp(prefix="opcase-network-", dir=Path.home()))
    if args.against:
        compare(specs, root, args.baseline, Path(args.against).resolve(), args.select)
        shutil.rmtree(root, ignore_errors=True)
        return
    print("| kernel | cases | time | disk | peak RSS | load before / after |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    totals = [0, 0.0, 0]
    for spec in specs:
        out = root / spec.stem
        load_before = os.getloadavg()[0]
        cases, seconds, size, rss = measure(spec, out, args.baseline)
        totals = [totals[0] + cases, totals[1] + seconds, totals[2] + size]
        print(f"| {spec.stem} | {cases} | {seconds:.0f} s | {size / 1e9:.2f} GB | {rss:.2f} GB | "
              f"{load_before:.1f} / {os.getloadavg()[0]:.1f} |", flush=True)
        if not args.keep:
            shutil.rmtree(out)
    print(f"| all | {totals[0]} | {totals[1]:.0f} s | {totals[2] / 1e9:.2f} GB | | |")
    if not args.keep and not args.out:
        shutil.rmtree(root, ignore_errors=True)


def compare(specs: list[Path], root: Path, baseline: str | None, other: Path, select: str | None = None) -> None:
    """Each kernel's network suite by ``other`` and by this checkout, alternating which goes first."""
    print(f"this checkout: {REPO}; against: {other}")
    print("| kernel | cases against / this | against | this | ratio | load before against / this |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    totals = [0.0, 0.0]
    for position, spec in enumerate(specs):
        if not (other / "specs" / spec.name).is_file():
            # a kernel the other checkout does not have: nothing to compare, and not in the totals
            print(f"| {spec.stem} | not in {other.name} | | | | |", flush=True)
            continue
        sides = [("against", other), ("this", REPO)]
        if position % 2:
            sides.reverse()
        seconds, loads, cases = {}, {}, {}
        for side, checkout in sides:
            out = root / side / spec.stem
            loads[side] = os.getloadavg()[0]
            # each checkout's own spec: the kernel as that checkout defines it
            cases[side], seconds[side], _, _ = measure(checkout / "specs" / spec.name, out, baseline, checkout, select)
            shutil.rmtree(out)
        totals = [totals[0] + seconds["against"], totals[1] + seconds["this"]]
        print(f"| {spec.stem} | {cases['against']} / {cases['this']} | {seconds['against']:.1f} s | {seconds['this']:.1f} s | "
              f"{seconds['this'] / seconds['against']:.2f} | {loads['against']:.1f} / {loads['this']:.1f} |",
              flush=True)
    print(f"| all | | {totals[0]:.1f} s | {totals[1]:.1f} s | {totals[1] / totals[0]:.2f} | "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end |", flush=True)


if __name__ == "__main__":
    main()
