"""A baseline's diff1, diff2 and diff4 estimated from a seeded random sample of output units.

At network scale the baseline can cost far more than the float64 golden: mmcv's float16
arithmetic, emulated in numpy, runs at about a tenth of float32's speed.  Where a kernel's
baseline can compute a few *units* of its outputs on their own (an input pixel's output
pixels, a roi's bins: ``Units``), the generator computes the golden in full as always, but
the baseline only on a sample of units, and estimates each metric from the sample.

The metrics are ratios of sums over all elements (diff1 = sum|e-g| / sum|g|, diff2^2 =
sum(e-g)^2 / sum g^2, diff4 = #(e<g) / #(e!=g)), so each is estimated by the ratio of the
sample's sums, and its standard error by the delta method for a ratio estimator under
sampling without replacement:

    R = sum_u a_u / sum_u b_u,   SE(R)^2 = (1 - n/N) / n * var_u(a_u - R b_u) / mean_u(b_u)^2

(n sampled units of N; diff2's relative error is half that of its square).  The sample is a
prefix of a permutation of the units seeded by the case's seed, so a case file stays a
function of (spec, suite, seed); it doubles from FIRST_UNITS until every judged metric's
relative standard error is at most REL_SE_TARGET, or the sample reaches its cap, which the
case's provenance then shows.  Each unit's sums are exact (gen.core.metrics.StreamingCompare),
and so are the totals (math.fsum): the estimate depends on no CPU feature.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from gen.core.metrics import DENOM_OFFSET, StreamingCompare
from gen.core.overlap import Background

REL_SE_TARGET = 0.02
FIRST_UNITS = 32
# The golden values kept for the sample (float64 elements, all outputs: 64 MiB, and twice that
# for their positions in a streamed golden): the sample's cap.  deform_roi_pool's fpn_p2 needs
# 512 of its 998 rois (12544 elements each) for 2 %.
CAPTURE_ELEMENTS = 1 << 23
# Where output units alone can be compared, cases with more output elements than this sample
# the baseline instead of computing it whole.
SAMPLE_ABOVE_ELEMENTS = 1 << 20
_SEED_SALT = 0x5A4D504C45   # keeps the sample's stream apart from the inputs' (same case seed)


@dataclass
class Units:
    """A baseline's outputs, cut into ``count`` units it can compute one by one.

    ``index(units)`` -> {output: tuple of int arrays}, the positions of the given units in each
    output's leading dims (broadcasting to [len(units), ...]; the remaining dims are whole);
    ``values(units)`` -> {output: array}, the baseline's values there, in the output's dtype,
    exactly as its whole computation would give them.
    """
    count: int
    index: Callable[[np.ndarray], dict]
    values: Callable[[np.ndarray], dict]


class GoldenCapture:
    """The float64 golden at the positions of a sample's units, taken from whole arrays or from
    the pieces a streamed golden passes by (each a contiguous run of the C-ordered output)."""

    def __init__(self, units: Units, sample: np.ndarray, shapes: dict):
        self.sample = sample
        self._index = units.index(sample)
        self._shapes = {name: tuple(shapes[name]) for name in self._index}
        self._positions = {}
        self.values = {}
        for name, index in self._index.items():
            lead = np.broadcast_shapes(*(np.shape(i) for i in index))
            self.values[name] = np.empty(lead + self._shapes[name][len(index):], np.float64)

    def add(self, name: str, start: int, block: np.ndarray) -> None:
        """Take the sample's elements from ``block``, elements start.. of output ``name`` in C order."""
        shape = self._shapes[name]
        if start == 0 and block.size == int(np.prod(shape, dtype=np.int64)):
            self.values[name][...] = np.reshape(block, shape)[self._index[name]]
            return
        flat, order = self._flat_positions(name)
        lo, hi = np.searchsorted(flat, [start, start + block.size])
        if lo < hi:
            self.values[name].reshape(-1)[order[lo:hi]] = np.ravel(block)[flat[lo:hi] - start]

    def _flat_positions(self, name: str):
        """The sample's elements of output ``name`` as sorted flat positions, and where each goes."""
        if name not in self._positions:
            shape, lead = self._shapes[name], np.broadcast_arrays(*self._index[name])
            trailing = int(np.prod(shape[len(lead):], dtype=np.int64))
            base = np.ravel_multi_index(tuple(lead), shape[:len(lead)]) * trailing
            flat = (base[..., None] + np.arange(trailing)).reshape(-1)
            order = np.argsort(flat, kind="stable")
            self._positions[name] = (flat[order], order)
        return self._positions[name]


def sample_order(units: Units, seed: int, shapes: dict) -> np.ndarray:
    """The units in sampling order, as many as the golden capture holds."""
    rng = np.random.default_rng([seed, _SEED_SALT])
    probe = units.index(np.zeros(1, np.int64))
    per_unit = sum(int(np.prod(np.broadcast_shapes(*(np.shape(i) for i in index)), dtype=np.int64))
                   * int(np.prod(tuple(shapes[name])[len(index):], dtype=np.int64))
                   for name, index in probe.items())
    cap = min(units.count, max(FIRST_UNITS, CAPTURE_ELEMENTS // max(1, per_unit)))
    return rng.permutation(units.count)[:cap]


@dataclass
class Estimate:
    stats: dict            # output -> {"diff1", "diff2", "diff4", "nan_inf_mismatch"}
    rel_se: dict           # output -> {metric: relative standard error}
    sampled: int
    count: int

    def note(self, name: str, metric: str) -> str:
        """What the case's provenance says about the estimate."""
        if self.sampled >= self.count:
            return f"; every one of {self.count} units computed"
        rel = self.rel_se[name].get(metric)
        shown = "n/a" if rel is None or not math.isfinite(rel) else f"{rel:.2%}"
        return (f"; estimated from {self.sampled} of {self.count} output units sampled "
                f"(seeded), relative standard error {shown}")


def estimate(units: Units, capture: GoldenCapture, dtypes: dict, metrics, out_of_range) -> Estimate:
    """Grow the sample (a prefix of capture.sample) until each metric in ``metrics`` has a relative
    standard error of at most REL_SE_TARGET, or the sample is whole; ``out_of_range(name,
    mismatches)`` is called on NaN/Inf pattern mismatches (it raises)."""
    sample = capture.sample
    sums = {name: [] for name in capture.values}
    size = min(FIRST_UNITS, len(sample))
    done = 0
    while True:
        chunk = sample[done:size]
        baseline = _values_on_two_threads(units, chunk)
        for name, golden in capture.values.items():
            for i in range(len(chunk)):
                stream = StreamingCompare(dtypes[name])
                stream.add(baseline[name][i], golden[done + i])
                sums[name].append(stream.sums())
        done = size
        result = _ratios(sums, units.count)
        for name, stats in result.stats.items():
            if stats["nan_inf_mismatch"]:
                out_of_range(name, stats["nan_inf_mismatch"])
        converged = all(result.rel_se[name].get(m, 0.0) <= REL_SE_TARGET for name in sums for m in metrics)
        if converged or size >= len(sample):
            return result
        size = min(2 * size, len(sample))


def _values_on_two_threads(units: Units, chunk: np.ndarray) -> dict:
    """units.values(chunk), its first half computed on a thread of its own beside the second:
    units are computed one by one (Units), so the halves put together are the same values."""
    if len(chunk) < 2:
        return units.values(chunk)
    middle = len(chunk) // 2
    first = Background(lambda: units.values(chunk[:middle]))
    try:
        second = units.values(chunk[middle:])
    finally:
        first.wait()
    first = first.result()
    return {name: np.concatenate([first[name], second[name]]) for name in second}


_RATIOS = {"diff1": ("sum_abs_diff", "sum_abs_golden"), "diff2": ("sum_sq_diff", "sum_sq_golden"),
           "diff4": ("n_less", "n_unequal")}


def _ratios(sums: dict, count: int) -> Estimate:
    stats, rel_se = {}, {}
    n = len(next(iter(sums.values())))
    for name, rows in sums.items():
        stats[name] = {"nan_inf_mismatch": sum(r["nan_inf_mismatch"] for r in rows)}
        rel_se[name] = {}
        for metric, (top, bottom) in _RATIOS.items():
            a = np.array([float(r[top]) for r in rows])
            b = np.array([float(r[bottom]) for r in rows])
            total_a, total_b = math.fsum(a) * count / n, math.fsum(b) * count / n
            if metric == "diff4":
                ratio = total_a / total_b if total_b else None
            else:
                ratio = total_a / (total_b + DENOM_OFFSET)
            rel = _relative_se(a, b, ratio, n, count)
            if metric == "diff2":
                ratio, rel = math.sqrt(ratio), rel / 2
            stats[name][metric] = ratio
            rel_se[name][metric] = rel
    return Estimate(stats, rel_se, n, count)


def _relative_se(a: np.ndarray, b: np.ndarray, ratio, n: int, count: int) -> float:
    """The ratio estimate's standard error over the ratio (delta method); 0 once every unit is in."""
    if n >= count or ratio is None:     # every unit in; or diff4 with no unequal element to count
        return 0.0
    if not ratio or n < 2:
        return math.inf
    residual = a - ratio * b
    mean_residual = math.fsum(residual) / n
    variance = math.fsum((residual - mean_residual) ** 2) / (n - 1)
    mean_b = math.fsum(b) / n
    return math.sqrt((1 - n / count) * variance / n) / mean_b / ratio
