"""`opcase power`'s measure (harness.studies.power.measure) on one kernel's cases under DIR, with only the
mutants that act on counts and ties: the generic count and tie mutants and the planted ``counts_in_uint16``
and ``ties_across_*`` bugs (gen/REACH.md).  Every case is judged with the base as `opcase power` judges it,
smallest first, and a mutant killed by two shapes is judged on no further case, as there; what is left out
is the other mutants and the controls, which on the default suites' network cases take most of power's time.

    python3 tests/bench/bench_power_reach.py DIR OP

Prints power's table, each kill with its cases and shapes and the first cases that fail it, the seconds
taken and the load average.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from gen.kernels.shared.planted_counts import COUNT_BUG
from gen.reach import TIE_BUG_PREFIX
from harness.backends import load_backend
from harness.studies import power
from harness.studies.mutants import mutants as all_mutants

REACH_MUTANTS = ("count_in_int16", "count_in_uint16", "ties_to_later_segment_64", "ties_to_last_candidate")


def reach_only(spec, base_name):
    return [m for m in all_mutants(spec, base_name)
            if m.name in REACH_MUTANTS or m.name == COUNT_BUG or m.name.startswith(TIE_BUG_PREFIX)]


def main(root: Path, op: str) -> int:
    files = sorted(p for p in (root / op).rglob("*.opcase"))
    if not files:
        print(f"no case of {op} under {root}", file=sys.stderr)
        return 2
    power.mutants, power.controls = reach_only, (lambda spec: [])
    start = time.perf_counter()
    doc = power.measure(files, load_backend("reference"), "reference")
    seconds = time.perf_counter() - start
    print("\n".join(power.table_lines(doc, kills=True)))
    for m in doc["mutants"]:
        if m["verdict"] == "killed":
            print(f"{m['name']}: {', '.join(f['case'] for f in m['failing_cases'])}")
    print(f"{len(files)} case files, {seconds:.1f} s, load average {os.getloadavg()[0]:.1f}")
    return 0 if doc["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
