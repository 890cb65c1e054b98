"""Every kernel's float64 golden against this machine's limits, both measured in the same run.

    python tests/bench/bench_goldens.py [--select TEXT] [--max-elements E] [--repeat R] [--against CHECKOUT]

First the machine: one core's float64 multiply-add peak (a single-threaded float64 matrix
product, in a subprocess with every BLAS thread count set to 1: dgemm keeps the FMA units
busy, so this is a little under the true peak) and one core's copy bandwidth (np.copyto of
256 MB arrays, bytes copied per second).  Every time here is the process's CPU time, not the
wall clock: on a shared machine time spent waiting for a core would count against whatever
was measured then (caches and memory shared with other work still slow both sides).  Then, per kernel found in specs/ and per case of its
network suite (the first dtype of each), the golden's time (the reference in float64: best and
median of R calls, a call under 20 ms timed as the mean of a batch; a reference that yields its outputs in pieces is timed piece by piece, as
`opcase gen` streams it) and its throughput as a fraction of both limits:

    of FMA peak = theory_ops / (seconds * 2 * multiply-adds per second)   (the spec's theory_ops,
                                                                          2 per multiply-add)
    of copy     = theory_io_bytes / (seconds * copy bytes per second)    (inputs + outputs)

The load average is printed throughout: the machine may be shared, and a loaded machine shows
as a gap between best and median.

--against CHECKOUT compares instead: per network case of the selected kernels, the float64 golden
of another checkout (say `git worktree add /tmp/old <commit>`) and of this one, each timed in a
fresh process of its own code (best of R calls, CPU seconds of the process, so that time spent
descheduled on a shared machine does not count), old and new alternating, --rounds times; it
prints both, the ratio old / new and whether the goldens are the same bits.  The network suites' total time, kernel by kernel with the load
average beside it: tests/bench/bench_network_suite.py.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
# Runs from a checkout without installing the package.
sys.path.insert(0, str(REPO))
from gen.core.registry import known_ops, spec_for  # noqa: E402
from gen.generate import Generator, builds_in_memory, plan_suite  # noqa: E402
from harness.judge.efficiency import theory_io_bytes, theory_ops  # noqa: E402

_PEAK_PROBE = """
import time, numpy as np
n = 2048
a, b = np.random.default_rng(0).random((2, n, n))
best = float("inf")
for _ in range(5):
    start = time.process_time(); a @ b; best = min(best, time.process_time() - start)
print(n ** 3 / best)
"""
_ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                      "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def multiply_add_peak() -> float:
    """float64 multiply-adds per second of one core (single-threaded dgemm)."""
    done = subprocess.run([sys.executable, "-c", _PEAK_PROBE], env={**os.environ, **_ONE_THREAD},
                          capture_output=True, text=True, check=True)
    return float(done.stdout)


def copy_bandwidth(megabytes: int = 256, repeat: int = 5) -> float:
    """Bytes per second np.copyto moves between two arrays far larger than any cache."""
    source = np.ones(megabytes << 17)          # 8-byte elements
    target = np.empty_like(source)
    best = min(_seconds(lambda: np.copyto(target, source)) for _ in range(repeat))
    return source.nbytes / best


def _seconds(fn) -> float:
    """CPU seconds of this process spent in fn (time descheduled on a shared machine does not count)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def _seconds_per_call(fn, batch: int) -> float:
    """CPU seconds per call of fn, over `batch` calls in a row."""
    return _seconds(lambda: [fn() for _ in range(batch)]) / batch


def _batch(fn) -> int:
    """How many calls of fn take about 20 ms: a shorter call is timed as the mean of that many, since the
    timers' resolution and the machine's noise are tens of microseconds."""
    return max(1, min(10000, int(0.02 / max(_seconds(fn), 1e-6))))


def golden_call(spec, plan, case):
    """A function computing the case's float64 golden the way `opcase gen` does (whole, or in pieces)."""
    present = {n: t.data for n, t in case.inputs.items() if not t.absent}
    out_shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
    params = dict(case.params)
    if builds_in_memory(spec, plan):
        return lambda: spec.reference_fn(present, params, compute_dtype=np.float64, out_shapes=out_shapes)

    def pieces():
        for _ in spec.reference_blocks_fn(present, params, compute_dtype=np.float64, out_shapes=out_shapes):
            pass
    return pieces


def network_cases(op: str, max_elements: int | None):
    """(plan, case with inputs) for the first dtype of each network case of ``op``."""
    spec = spec_for(op)
    generator = Generator(spec)
    seen = set()
    for plan in plan_suite(spec, "network"):
        base = plan.name.rsplit("-", 1)[0]
        if base in seen:
            continue
        seen.add(base)
        case = generator._with_inputs(plan)
        elements = sum(int(np.prod(t.shape, dtype=np.int64)) for t in [*case.inputs.values(), *case.outputs.values()])
        if max_elements is not None and elements > max_elements:
            print(f"  {base}: {elements:,} elements, over --max-elements: skipped")
            continue
        yield plan, case


def bench_goldens(select: str, max_elements: int | None, repeat: int, peak: float, bandwidth: float) -> None:
    print(f"\n{'kernel / network case':<48} {'best cpu s':>10} {'median':>9} {'of FMA peak':>12} {'of copy':>8}  load")
    for op in known_ops():
        if select not in op:
            continue
        spec = spec_for(op)
        total = {"seconds": 0.0, "ops": 0.0, "bytes": 0}
        for plan, case in network_cases(op, max_elements):
            call = golden_call(spec, plan, case)
            batch = _batch(call)
            times = [_seconds_per_call(call, batch) for _ in range(repeat)]
            best = min(times)
            ops, _ = theory_ops(case)
            io_bytes = theory_io_bytes(case)
            total["seconds"] += best
            total["ops"] += ops or 0.0
            total["bytes"] += io_bytes
            of_peak = f"{ops / (best * 2 * peak):12.2%}" if ops else f"{'-':>12}"
            print(f"{op + ' ' + plan.name.rsplit('-', 1)[0]:<48} {best:10.3f} {statistics.median(times):9.3f} "
                  f"{of_peak} {io_bytes / (best * bandwidth):8.2%}  {load()}", flush=True)
        if total["seconds"] > 0:
            of_peak = f"{total['ops'] / (total['seconds'] * 2 * peak):12.2%}" if total["ops"] else f"{'-':>12}"
            print(f"{op + ' (all network cases)':<48} {total['seconds']:10.3f} {'':>9} {of_peak} "
                  f"{total['bytes'] / (total['seconds'] * bandwidth):8.2%}\n", flush=True)


# Times one network case's float64 golden with the code of the checkout first on sys.path (any
# version of opcase with gen.generate's Generator and plan_suite); prints CPU and wall seconds
# (best of R; a call under 20 ms as the mean of a batch of calls) and a digest of the outputs.
_GOLDEN_PROBE = """
import hashlib, json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from gen.core.registry import spec_for
from gen.generate import Generator, plan_suite
op, name, repeat = sys.argv[2], sys.argv[3], int(sys.argv[4])
spec = spec_for(op)
plan = next(p for p in plan_suite(spec, "network") if p.name == name)
case = Generator(spec)._with_inputs(plan)
present = {n: t.data for n, t in case.inputs.items() if not t.absent}
shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
golden = lambda: spec.reference_fn(present, dict(case.params), compute_dtype=np.float64, out_shapes=shapes)
# A call far shorter than the timers' noise is timed as the mean of a batch of calls lasting about 20 ms.
c = time.process_time()
result = golden()
batch = max(1, min(10000, int(0.02 / max(time.process_time() - c, 1e-6))))
cpu, wall = [], []
for _ in range(repeat):
    c, w = time.process_time(), time.perf_counter()
    for _ in range(batch):
        result = golden()
    cpu.append((time.process_time() - c) / batch)
    wall.append((time.perf_counter() - w) / batch)
digest = hashlib.sha256(b"".join(np.ascontiguousarray(result[k]).tobytes() for k in sorted(result))).hexdigest()
print(json.dumps({"cpu": min(cpu), "wall": min(wall), "digest": digest}))
"""


def _probe(checkout: Path, op: str, name: str, repeat: int) -> dict:
    import json
    done = subprocess.run([sys.executable, "-c", _GOLDEN_PROBE, str(checkout), op, name, str(repeat)],
                          env={**os.environ, **_ONE_THREAD}, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def compare_goldens(select: str, against: Path, repeat: int, rounds: int, max_elements: int | None) -> None:
    """Old (``against``) against new (this checkout) golden times per network case, alternating."""
    print(f"\n{'kernel / network case':<48} {'old cpu ms':>10} {'new cpu ms':>10} {'old/new':>8}  bits       load")
    for op in known_ops():
        if select not in op:
            continue
        for plan, _ in network_cases(op, max_elements):
            old, new = [], []
            for _ in range(rounds):
                old.append(_probe(against, op, plan.name, repeat))
                new.append(_probe(REPO, op, plan.name, repeat))
            best_old, best_new = min(o["cpu"] for o in old), min(n["cpu"] for n in new)
            same = "same" if {o["digest"] for o in old} == {n["digest"] for n in new} else "DIFFERENT"
            print(f"{op + ' ' + plan.name.rsplit('-', 1)[0]:<48} {best_old * 1e3:10.3f} {best_new * 1e3:10.3f} "
                  f"{best_old / best_new:7.2f}x  {same:<9}  {load()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--select", default="", help="only the kernels whose name contains this")
    parser.add_argument("--max-elements", type=int, default=None, help="skip network cases with more elements")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout: time its goldens against this one's, alternating")
    parser.add_argument("--rounds", type=int, default=2, help="with --against: old/new alternations per case")
    args = parser.parse_args()
    print(f"load average {load()}")
    if args.against is not None:
        compare_goldens(args.select, args.against.resolve(), args.repeat, args.rounds, args.max_elements)
        return
    peak = multiply_add_peak()
    bandwidth = copy_bandwidth()
    print(f"this machine, one core: {peak / 1e9:.1f} G float64 multiply-adds/s (single-threaded dgemm), "
          f"{bandwidth / 1e9:.1f} GB/s copy (np.copyto, 256 MB)   load {load()}")
    bench_goldens(args.select, args.max_elements, args.repeat, peak, bandwidth)


if __name__ == "__main__":
    main()
