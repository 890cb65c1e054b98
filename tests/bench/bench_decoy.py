"""What the decoy call (harness.worker.decoy) costs: backend time of the judged calls alone against the
same calls with their decoys, and the harness's own cost of the decoy (its copies), for the
reference and lowp backends on every valid case under DIR, in one run; per case and per call
the least of five interleaved tries (the machine is shared).

    python3 tests/bench/bench_decoy.py DIR
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from gen.core.backend import Backend
from gen.core.casefile import find, load
from gen.core.verdict import request_for
from harness.backends.builtin import lowp, reference
from harness.worker.decoy import decoy_first

TRIES = 5


def _timed(base: Backend):
    spent = [0.0]

    def run(request):
        start = time.perf_counter()
        try:
            return base.run(request)
        finally:
            spent[0] += time.perf_counter() - start
    return Backend(name=base.name, origin="bench", run=run), spent


def _backend_seconds(backend: Backend, spent: list, request) -> float:
    spent[0] = 0.0
    try:
        backend.run(request)
    except Exception:  # noqa: BLE001 - a rejected call costs what it costs
        pass
    return spent[0]


def measure(directory: Path, base: Backend, tries: int = TRIES) -> tuple[int, float, float, float, float, float]:
    """(valid cases, judged calls alone, decoy calls, judged calls after their decoys, the harness's
    copies, the least decoy-plus-judged pair), each a sum over the cases of the least of ``tries``
    interleaved tries.  Each call's least alone is the figure: a try the shared machine preempts
    (a few ms, often) then counts once, not in whichever of the two calls it hit, as it does in
    the least pair (the statistic this bench had before)."""
    backend, spent = _timed(base)
    cases = alone_s = decoy_s = judged_s = copies_s = pairs_s = 0.0
    for path in find([directory]):
        case = load(path)
        if case.expect == "rejected":
            continue
        request = request_for(case)
        _backend_seconds(backend, spent, request)          # warm-up, untimed
        alone, decoys, judged_after, copies = [], [], [], []
        for _ in range(tries):
            alone.append(_backend_seconds(backend, spent, request))
            spent[0] = 0.0
            start = time.perf_counter()
            judged = decoy_first(backend, request)
            decoys.append(spent[0])
            copies.append(time.perf_counter() - start - spent[0])
            judged_after.append(_backend_seconds(backend, spent, judged))
        alone_s += min(alone)
        decoy_s += min(decoys)
        judged_s += min(judged_after)
        copies_s += min(copies)
        pairs_s += min(d + j for d, j in zip(decoys, judged_after))
        cases += 1
    return int(cases), alone_s, decoy_s, judged_s, copies_s, pairs_s


def main() -> None:
    directory = Path(sys.argv[1])
    print(f"load average {os.getloadavg()[0]:.1f}")
    for base in (reference(), lowp()):
        cases, alone, decoy, judged, copies, pairs = measure(directory, base)
        both = decoy + judged
        print(f"{directory} {base.name}: {cases} valid cases; backend time: judged calls {alone:.3f} s, with "
              f"decoys {both:.3f} s ({both / alone:.2f}x: decoys {decoy:.3f} s, judged after them {judged:.3f} s); "
              f"the harness's decoy copies {copies:.3f} s; least pairs {pairs:.3f} s ({pairs / alone:.2f}x)")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
