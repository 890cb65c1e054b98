"""Whether repeated calls of a backend on one case agree (`opcase run --repeat N --bitwise`).

Each further call (warm-up and timed) is compared with the judged first one.  Bit for bit by
default: a deterministic kernel returns the same bits for the same inputs, NaN payloads
included.  A case whose spec declares ``nondeterministic_sums`` (its kernel adds floats in any
order, with atomics) may differ in its last bits from call to call; there only the verdict must
agree: every threshold passed or failed alike, NaN/Inf mismatches present or absent alike.
"""
from __future__ import annotations

import numpy as np

from gen.core.casefile import Case
from harness.reports.report import coordinates

# Elements compared per block, so that comparing two network-scale outputs makes no full-size temporary.
_BLOCK_ELEMS = 1 << 20


def _bits(array: np.ndarray) -> np.ndarray:
    """The array's elements as unsigned integers of their width (every case dtype is 1 to 8 bytes
    wide): equal exactly when bit for bit equal, NaN payloads included."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat.view(f"u{flat.dtype.itemsize}")


def first_difference(first: np.ndarray, other: np.ndarray) -> tuple[int, int] | None:
    """(flat index of the first element whose bits differ, how many differ), or None when equal."""
    a, b = _bits(first), _bits(other)
    first_at, count = None, 0
    for start in range(0, a.size, _BLOCK_ELEMS):
        unequal = np.flatnonzero(a[start:start + _BLOCK_ELEMS] != b[start:start + _BLOCK_ELEMS])
        if unequal.size and first_at is None:
            first_at = start + int(unequal[0])
        count += unequal.size
    return None if first_at is None else (first_at, count)


def verdict(thresholds: dict, metrics: dict) -> dict:
    """What a judged call decided, per output: each threshold passed or not, NaN/Inf mismatches or not."""
    return {name: ([v["passed"] for v in verdicts], bool(metrics.get(name, {}).get("nan_inf_mismatch")))
            for name, verdicts in thresholds.items()}


class RepeatCheck:
    """Compares each further call's outputs with the judged call's; remembers the first disagreement.

    ``first`` is the judged call's outputs (kept only for the bitwise comparison), ``judged`` its
    CaseResult, ``measure(outputs, scratch)`` fills a scratch CaseResult's metrics and thresholds
    (the runner's judging, without the verdict's other checks).
    """

    def __init__(self, case: Case, first: dict, judged, measure, new_scratch, copy: bool = True):
        self.case = case
        self.only_verdict = case.nondeterministic_sums
        # A copy (``copy``): a backend may hand back one buffer that each call overwrites; the
        # judge's read-only files of a worker's outputs (harness.judge.workers) need none.
        self.first = None if self.only_verdict else {name: np.array(array, copy=copy) for name, array in first.items()}
        self.first_verdict = verdict(judged.thresholds, judged.metrics)
        self.measure, self.new_scratch = measure, new_scratch
        self.calls = 1
        self.problem = ""
        self.details: dict = {}

    @property
    def mode(self) -> str:
        return "verdict" if self.only_verdict else "bitwise"

    def __call__(self, outputs: dict) -> None:
        self.calls += 1
        if self.problem:
            return   # the first disagreement is the one reported; later calls are only timed
        if self.only_verdict:
            self._compare_verdicts(outputs)
        else:
            self._compare_bits(outputs)

    def _compare_bits(self, outputs: dict) -> None:
        for name, first in self.first.items():
            found = first_difference(first, outputs[name])
            if found is None:
                continue
            flat, count = found
            index = np.unravel_index(flat, first.shape)
            layout = self.case.outputs[name].layout
            was, now = first.reshape(-1)[flat], outputs[name].reshape(-1)[flat]
            width = first.dtype.itemsize * 2
            self.details = {"call": self.calls, "output": name, "index": [int(i) for i in index],
                            "first": repr(was.item()), "now": repr(now.item()), "n_differ": count}
            self.problem = (f"call {self.calls} returned other bits than the judged call 1: "
                            f"{coordinates(name, index, layout)} = {now.item()!r} (0x{_bits(now).item():0{width}x}), "
                            f"call 1 gave {was.item()!r} (0x{_bits(was).item():0{width}x}); "
                            f"{count} of {first.size} elements differ")
            return

    def _compare_verdicts(self, outputs: dict) -> None:
        scratch = self.new_scratch()
        self.measure(self.case, outputs, scratch)
        now = verdict(scratch.thresholds, scratch.metrics)
        for name, (passed, nan_inf) in self.first_verdict.items():
            again, again_nan_inf = now[name]
            if passed != again or nan_inf != again_nan_inf:
                changed = [f"{v['metric']} {'passed' if v['passed'] else 'failed'} ({v['actual']:.3g})"
                           for v, before in zip(scratch.thresholds[name], passed) if v["passed"] != before]
                if nan_inf != again_nan_inf:
                    changed.append("NaN/Inf mismatches " + ("appeared" if again_nan_inf else "vanished"))
                self.details = {"call": self.calls, "output": name, "changed": changed}
                self.problem = (f"call {self.calls} got another verdict than the judged call 1 "
                                f"(the kernel may sum in any order, so only verdicts must agree): "
                                f"{name}: " + ", ".join(changed))
                return
