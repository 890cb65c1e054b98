"""Accuracy metrics between an evaluated output and its golden (gen/core/README.md, Accuracy).

`compare` streams over both arrays in flattened C order, converting a bounded block at a time
to float64, so inputs may be read-only memmaps of many GB: the float64 working set is three
block-sized buffers, never a whole-array temporary.

Definitions (`e` evaluated output, `b` golden, both as float64; sums over the compared elements):
  diff1   = sum|e-b| / (sum|b| + 1e-9)
  diff2   = sqrt(sum (e-b)^2 / (sum b^2 + 1e-9))
  diff3   = max over elements of |e-b| / (|b| + 1e-9), or |e-b| where |b| < eps
            (eps = 1e-4 for float16 outputs, 1e-6 for float32, 0 otherwise)
  diff3_2 = max |e-b|
  diff4   = #(e < b) / #(e != b); None when no element differs

NaN/Inf policy: the NaN/+Inf/-Inf pattern of the two arrays must match position by position
(mismatches are counted in `nan_inf_mismatch`); the metrics are computed over the elements where
both values are finite. A metric that comes out NaN or Inf is returned as such; `passes` fails it.
"""

from __future__ import annotations

import math

import numpy as np

from gen.core.casefile import drop_pages

__all__ = ["compare", "judgement", "passes", "small_golden_eps"]

# Keeps the relative error finite where the golden is zero (gen/core/README.md, Accuracy).
DENOM_OFFSET = 1e-9
# Below this |golden|, diff3 takes the absolute error instead of the relative one.
_SMALL_GOLDEN_EPS = {np.dtype(np.float16): 1e-4, np.dtype(np.float32): 1e-6}
# mlu-ops' diff4 rule only asks whether there are at least this many distinct (e, b) pairs.
_UNIQUE_PAIRS_CAP = 100
# Largest block converted to float64 at once, so that the ~15 passes over a block run in cache.
# On the 2-core dev VM, 100 M float32 pairs took 0.37 s in 128 Ki blocks and 0.74 s in 1 Mi.
_CACHE_BLOCK_ELEMS = 1 << 17
THRESHOLD_METRICS = ("diff1", "diff2", "diff3", "diff3_2")


# How often a pass over memory-mapped operands lets the OS reclaim what it has read.
_RELEASE_EVERY_ELEMS = 1 << 24


def small_golden_eps(dtype) -> float:
    """The |golden| below which diff3 uses the absolute error: 1e-4 half, 1e-6 float, else 0."""
    return _SMALL_GOLDEN_EPS.get(np.dtype(dtype), 0.0)


def compare(actual, golden, dtype, *, chunk_elems=1 << 20, worst_k=10) -> dict:
    """Compare `actual` against `golden` and return the metrics (gen/core/README.md, Accuracy) with diagnostics.

    `actual` and `golden` are arrays of the same shape (bool, integer or floating dtypes, possibly
    read-only memmaps or non-contiguous views); `dtype` is the output's dtype (or its numpy name)
    and decides diff3's eps. At most `chunk_elems` elements of each are converted to float64 at a
    time; chunks above 128 Ki elements are processed in 128 Ki pieces, which stay in cache.

    Returned keys (plain Python values):
      diff1, diff2, diff3, diff3_2: floats (NaN/Inf passed through); diff4: float or None;
      n: elements compared (both finite); n_unequal, n_greater (e > b), n_less (e < b);
      n_unique_unequal_pairs: distinct (e, b) value pairs among the unequal elements, counted
        exactly below 100 and reported as 100 with n_unique_unequal_pairs_capped True from 100 on;
      nan_inf_mismatch: positions whose NaN/+Inf/-Inf pattern differs; nan_golden, inf_golden;
      worst_abs / worst_rel: up to `worst_k` compared elements with nonzero error, by absolute
        error / by diff3's per-element measure, descending (ties: lower flat index first);
      worst_nan_inf: the first `worst_k` pattern mismatches in flat order.
    Each worst entry is {index, flat, golden, actual, abs_err, rel_err}: `index` is the position
    in the array's shape, rel_err is diff3's per-element measure, and non-finite floats are given
    as the strings 'nan', 'inf', '-inf' so that the result serializes to strict JSON.
    """
    actual = _as_array(actual, "actual")
    golden = _as_array(golden, "golden")
    if actual.shape != golden.shape:
        raise ValueError(
            f"shape mismatch: actual has shape {actual.shape}, golden has shape {golden.shape}"
        )
    if chunk_elems < 1:
        raise ValueError(f"chunk_elems must be positive, got {chunk_elems}")
    if worst_k < 0:
        raise ValueError(f"worst_k must be >= 0, got {worst_k}")
    eps = small_golden_eps(dtype)
    size = golden.size
    block_elems = max(1, min(int(chunk_elems), _CACHE_BLOCK_ELEMS, size))

    accumulator = _Accumulator(actual.dtype, golden.dtype, eps, block_elems, int(worst_k))
    # Overflow and inf - inf are expected on the way and handled.
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, size, block_elems):
            stop = min(start + block_elems, size)
            accumulator.add_block(
                _flat_slice(actual, start, stop), _flat_slice(golden, start, stop), start
            )
            if stop % _RELEASE_EVERY_ELEMS < block_elems:
                _release(actual, golden, stop)
    _release(actual, golden, size)
    return _summarize(accumulator, actual, golden, eps)


def _release(actual, golden, upto: int) -> None:
    """Memory-mapped operands (multi-GB case files) give back the pages already compared."""
    for array in (actual, golden):
        if isinstance(array, np.memmap):
            drop_pages(array, upto)


def passes(metric: str, value, threshold: float, stats: dict) -> bool:
    """Whether `value` of `metric` (from `compare`, whose result is `stats`) is acceptable (see judgement)."""
    return judgement(metric, value, threshold, stats)[0]


def judgement(metric: str, value, threshold: float, stats: dict) -> tuple[bool, str]:
    """(whether `value` of `metric` is acceptable, how it was judged where not by `value <= threshold`).

    diff1, diff2, diff3, diff3_2: pass when the value is present, finite and <= threshold; the note is ''.
    diff4 follows the mlu-ops gtest rule (gen/core/README.md, Accuracy), whose threshold bounds nothing: a negative
    threshold means diff4 is not judged; with fewer than 100 distinct unequal (e, b) pairs, or no
    unequal element at all, it is not judged either; otherwise it fails only when it is exactly 0.0 or
    1.0 (every unequal element errs in the same direction), so that a one-sided bias over a handful of
    values is not called a rounding bias.  The note says which of these decided.
    """
    if metric == "diff4":
        if threshold < 0:
            return True, "not judged: a negative threshold"
        if value is None:
            return True, "not judged: no element differs"
        pairs = stats["n_unique_unequal_pairs"]
        if pairs < _UNIQUE_PAIRS_CAP:
            return True, f"not judged: {pairs} distinct unequal pairs, under {_UNIQUE_PAIRS_CAP}"
        if value == 0.0 or value == 1.0:
            return False, (f"every differing element is {'above' if value == 0.0 else 'below'} the golden "
                           f"(at least {_UNIQUE_PAIRS_CAP} distinct pairs)")
        return True, "errors on both sides of the golden (diff4 fails only at 0 or 1)"
    if metric in THRESHOLD_METRICS or metric == "exact":
        return value is not None and math.isfinite(value) and value <= threshold, ""
    raise ValueError(f"unknown metric {metric!r}; expected diff1, diff2, diff3, diff3_2, diff4 or exact")


def exact_mismatches(actual: np.ndarray, golden: np.ndarray, undetermined=None) -> int:
    """The "exact" metric: how many elements differ from the golden, an undetermined element
    (casefile.Undetermined: a near-tie) counting only when it is none of its acceptable answers."""
    a, b = np.asarray(actual).reshape(-1), np.asarray(golden).reshape(-1)
    differ = np.flatnonzero(a != b)
    if undetermined is None or not differ.size or not undetermined.index.size:
        return int(differ.size)
    at = np.searchsorted(undetermined.index, differ)
    listed = (at < undetermined.index.size) & (undetermined.index[np.minimum(at, undetermined.index.size - 1)] == differ)
    wrong = int(np.count_nonzero(~listed))
    for element, slot in zip(differ[listed], at[listed]):
        answers = undetermined.acceptable[undetermined.offsets[slot]:undetermined.offsets[slot + 1]]
        wrong += int(a[element] not in answers)
    return wrong


def _as_array(array, name: str) -> np.ndarray:
    array = array if isinstance(array, np.ndarray) else np.asarray(array)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} has dtype {array.dtype}; expected bool, integer or float")
    return array


def _flat_slice(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Elements [start, stop) of the array in C order; a view when the array is C-contiguous."""
    if array.flags.c_contiguous:
        return array.reshape(-1)[start:stop]
    return array.flat[start:stop]


class StreamingCompare:
    """The metrics of compare() over pieces that arrive one after another in flat order.

    For goldens too large to hold: the generator feeds each float64 golden piece as the
    reference yields it, with the baseline's matching piece.  No worst-element lists.
    """

    def __init__(self, dtype):
        self._eps = small_golden_eps(dtype)
        self._accumulator: _Accumulator | None = None
        self._offset = 0

    def add(self, actual, golden) -> None:
        actual, golden = np.ravel(actual), np.ravel(golden)
        if actual.shape != golden.shape:
            raise ValueError(f"piece shape mismatch: actual {actual.shape}, golden {golden.shape}")
        if self._accumulator is None:
            self._accumulator = _Accumulator(actual.dtype, golden.dtype, self._eps, _CACHE_BLOCK_ELEMS, 0)
        with np.errstate(over="ignore", invalid="ignore"):
            for start in range(0, golden.size, _CACHE_BLOCK_ELEMS):
                stop = min(start + _CACHE_BLOCK_ELEMS, golden.size)
                self._accumulator.add_block(actual[start:stop], golden[start:stop], self._offset + start)
        self._offset += golden.size

    def result(self) -> dict:
        return _metrics(self._current())

    def sums(self) -> dict:
        """The sums and counts the metrics are ratios of: sum_abs_diff, sum_abs_golden, sum_sq_diff,
        sum_sq_golden (each added exactly from fixed-order block sums), n_less, n_unequal, n and
        nan_inf_mismatch; for estimators that combine them over samples (gen.sampled)."""
        acc = self._current()
        return {"sum_abs_diff": _exact_sum(acc.sum_abs_diff), "sum_abs_golden": _exact_sum(acc.sum_abs_golden),
                "sum_sq_diff": _exact_sum(acc.sum_sq_diff), "sum_sq_golden": _exact_sum(acc.sum_sq_golden),
                "n_less": acc.n_less, "n_unequal": acc.n_greater + acc.n_less, "n": acc.n,
                "nan_inf_mismatch": acc.nan_inf_mismatch}

    def _current(self) -> "_Accumulator":
        if self._accumulator is None:
            return _Accumulator(np.float64, np.float64, self._eps, 1, 0)
        return self._accumulator


class _Accumulator:
    """Running sums, counts and worst elements over the blocks seen so far, in flat order."""

    def __init__(self, actual_dtype, golden_dtype, eps: float, block_elems: int, worst_k: int):
        self._eps = eps
        self._golden64 = np.empty(block_elems, dtype=np.float64)
        self._diff = np.empty(block_elems, dtype=np.float64)
        self._abs_diff = np.empty(block_elems, dtype=np.float64)
        self._square = np.empty(block_elems, dtype=np.float64)
        self._mask = np.empty(block_elems, dtype=bool)
        # Per-block partial sums (_fixed_order_sum), added exactly (math.fsum) at the end.
        self.sum_abs_diff: list[float] = []
        self.sum_sq_diff: list[float] = []
        self.sum_abs_golden: list[float] = []
        self.sum_sq_golden: list[float] = []
        self.max_abs_err = 0.0
        self.max_rel_err = 0.0
        self.n = 0
        self.n_greater = 0
        self.n_less = 0
        self.nan_inf_mismatch = 0
        self.nan_golden = 0
        self.inf_golden = 0
        self.unique_pairs = _UniquePairs(actual_dtype, golden_dtype)
        self.worst_abs = _TopK(worst_k)
        self.worst_rel = _TopK(worst_k)
        self.first_mismatches = _FirstPositions(worst_k)

    def add_block(self, actual, golden, offset: int) -> None:
        """Add elements offset .. offset + len(golden) - 1 of the flattened arrays."""
        golden64, diff = self._load(actual, golden)
        if self._accumulate(actual, golden, golden64, diff, offset, check_finite=True):
            self.n += len(golden)
            return
        # The block holds a NaN or Inf. _accumulate overwrote golden64, so load it again.
        golden64, diff = self._load(actual, golden)
        excluded = self._exclude_nonfinite(actual, golden64, diff, offset)
        self._accumulate(actual, golden, golden64, diff, offset, check_finite=False)
        self.n += len(golden) - excluded

    def _load(self, actual, golden):
        """The block's golden and actual - golden in float64, in the accumulator's buffers."""
        m = len(golden)
        golden64, diff = self._golden64[:m], self._diff[:m]
        np.copyto(golden64, golden)
        # Cast, then subtract in float64: a ufunc that casts an input on the fly is about 3x
        # slower than a cast copy. The |diff| buffer is free until _accumulate fills it.
        actual64 = actual
        if actual.dtype != np.float64:
            actual64 = self._abs_diff[:m]
            np.copyto(actual64, actual)
        np.subtract(actual64, golden64, out=diff)
        return golden64, diff

    def _exclude_nonfinite(self, actual, golden64, diff, offset: int) -> int:
        """Check the NaN/Inf pattern and take the pairs holding a NaN or Inf out of the block.

        Only positions with a non-finite difference can hold one. Such a pair is neutralized by
        setting its golden and difference to 0, which adds nothing to any sum, count, maximum or
        worst list; the caller leaves it out of n. Returns the number of pairs taken out.
        """
        finite = np.isfinite(diff, out=self._mask[: len(diff)])
        suspects = np.flatnonzero(np.logical_not(finite, out=finite))
        actual_values = np.asarray(actual[suspects], dtype=np.float64)
        golden_values = golden64[suspects]
        # A finite pair whose float64 difference overflowed stays in, with an infinite error.
        nonfinite = ~(np.isfinite(actual_values) & np.isfinite(golden_values))
        positions = suspects[nonfinite]
        actual_values, golden_values = actual_values[nonfinite], golden_values[nonfinite]

        golden_nan = np.isnan(golden_values)
        self.nan_golden += int(np.count_nonzero(golden_nan))
        self.inf_golden += int(np.count_nonzero(np.isinf(golden_values)))
        # Patterns match when both are NaN or when the values are equal (same-signed Inf).
        matched = (actual_values == golden_values) | (np.isnan(actual_values) & golden_nan)
        mismatches = positions[~matched]
        self.nan_inf_mismatch += len(mismatches)
        self.first_mismatches.add(mismatches + offset)

        diff[positions] = 0.0
        golden64[positions] = 0.0
        return len(positions)

    def _accumulate(self, actual, golden, golden64, diff, offset: int, *, check_finite) -> bool:
        """Add the block's pairs given golden64 = golden and diff = actual - golden in float64.

        Overwrites golden64. With check_finite, returns False having added nothing when the block
        holds a NaN or Inf: a finite sum of absolute values proves every value finite, so the
        common all-finite case needs no per-element test. Does not count n.
        """
        m = len(diff)
        abs_diff = np.abs(diff, out=self._abs_diff[:m])
        sum_abs_diff = _fixed_order_sum(abs_diff)
        abs_golden = np.abs(golden64, out=golden64)
        sum_abs_golden = _fixed_order_sum(abs_golden)
        if check_finite and not math.isfinite(sum_abs_diff + sum_abs_golden):
            return False

        self.sum_abs_diff.append(sum_abs_diff)
        self.sum_abs_golden.append(sum_abs_golden)
        square = self._square[:m]
        self.sum_sq_diff.append(_fixed_order_sum(np.multiply(abs_diff, abs_diff, out=square)))
        self.sum_sq_golden.append(_fixed_order_sum(np.multiply(abs_golden, abs_golden, out=square)))
        block_max_abs = float(np.maximum.reduce(abs_diff))
        self.max_abs_err = max(self.max_abs_err, block_max_abs)

        mask = self._mask[:m]
        n_greater = int(np.count_nonzero(np.greater(diff, 0.0, out=mask)))
        n_less = int(np.count_nonzero(np.less(diff, 0.0, out=mask)))
        self.n_greater += n_greater
        self.n_less += n_less
        if n_greater + n_less and not self.unique_pairs.capped:
            unequal = np.flatnonzero(np.not_equal(diff, 0.0, out=mask))
            self.unique_pairs.add(actual, golden, unequal)

        rel_err = self._relative_errors(abs_diff, abs_golden)
        block_max_rel = float(np.maximum.reduce(rel_err))
        self.max_rel_err = max(self.max_rel_err, block_max_rel)

        has_error = lambda: abs_diff > 0.0  # noqa: E731
        self.worst_abs.add_block(abs_diff, block_max_abs, has_error, offset)
        self.worst_rel.add_block(rel_err, block_max_rel, has_error, offset)
        return True

    def _relative_errors(self, abs_diff, abs_golden):
        """diff3's per-element measure, written over abs_golden; also overwrites the mask."""
        m = len(abs_diff)
        small_golden = None
        if self._eps > 0.0 and float(np.minimum.reduce(abs_golden)) < self._eps:
            small_golden = np.less(abs_golden, self._eps, out=self._mask[:m])
        denominator = np.add(abs_golden, DENOM_OFFSET, out=abs_golden)
        rel_err = np.divide(abs_diff, denominator, out=denominator)
        if small_golden is not None:
            np.copyto(rel_err, abs_diff, where=small_golden)
        return rel_err


class _TopK:
    """The k largest scores seen, ties broken by lower flat index.

    Blocks arrive in increasing flat order, so an element that only ties the current k-th score
    can never enter; a block whose maximum does not beat it is skipped without a pass.
    """

    def __init__(self, k: int):
        self.k = k
        self.scores = np.empty(0, dtype=np.float64)
        self.flat = np.empty(0, dtype=np.int64)

    def add_block(self, scores, block_max: float, has_error, offset: int) -> None:
        """Consider a block's `scores` at the positions where `has_error()` is true."""
        full = len(self.scores) == self.k
        if self.k == 0 or (full and block_max <= self.scores[-1]):
            return
        candidates = np.flatnonzero(scores > self.scores[-1] if full else has_error())
        candidates = _largest(scores, candidates, self.k)
        self._merge(scores[candidates], candidates + offset)

    def _merge(self, scores, flat) -> None:
        scores = np.concatenate([self.scores, scores])
        flat = np.concatenate([self.flat, flat])
        order = np.lexsort((flat, -scores))[: self.k]
        self.scores, self.flat = scores[order], flat[order]


def _largest(scores, candidates, k: int):
    """The k of `candidates` (ascending positions) with the largest scores, ties to lower ones."""
    if len(candidates) <= k:
        return candidates
    candidate_scores = scores[candidates]
    kth = np.partition(candidate_scores, len(candidates) - k)[len(candidates) - k]
    above = candidates[candidate_scores > kth]
    tied = candidates[candidate_scores == kth][: k - len(above)]
    return np.concatenate([above, tied])


class _FirstPositions:
    """The first k flat positions offered, given in increasing order."""

    def __init__(self, k: int):
        self.k = k
        self.flat: list[int] = []

    def add(self, flat) -> None:
        self.flat.extend(int(i) for i in flat[: self.k - len(self.flat)])


class _UniquePairs:
    """Distinct (actual, golden) value pairs among unequal elements, counted up to the cap.

    When both sides have dtypes of at most 32 bits, a pair is keyed by the two values' bit
    patterns packed into one uint64; otherwise by a complex128 holding the two values as float64,
    the precision in which they are compared. Either way -0.0 is first turned into +0.0 so that
    equal values share a key.
    """

    def __init__(self, actual_dtype, golden_dtype):
        self._actual_bits = _bits32(actual_dtype)
        self._golden_bits = _bits32(golden_dtype)
        self._packed = self._actual_bits is not None and self._golden_bits is not None
        self._known = self._keys(np.empty(0, actual_dtype), np.empty(0, golden_dtype))
        self.capped = False

    @property
    def count(self) -> int:
        return _UNIQUE_PAIRS_CAP if self.capped else len(self._known)

    def add(self, actual, golden, positions) -> None:
        """Add the pairs (actual[i], golden[i]) for i in positions, stopping at the cap."""
        batch = 256  # the cap is usually reached within the first few hundred pairs
        start = 0
        while start < len(positions) and not self.capped:
            batch_positions = positions[start : start + batch]
            keys = _distinct(self._keys(actual[batch_positions], golden[batch_positions]))
            self._known = _distinct(np.concatenate([self._known, keys]))
            self.capped = len(self._known) >= _UNIQUE_PAIRS_CAP
            start, batch = start + batch, batch * 8

    def _keys(self, actual_values, golden_values):
        if self._packed:
            high = self._actual_bits(actual_values).astype(np.uint64)
            low = self._golden_bits(golden_values).astype(np.uint64)
            return (high << np.uint64(32)) | low
        keys = np.empty(len(actual_values), dtype=np.complex128)
        keys.real = actual_values
        keys.imag = golden_values
        return keys + 0.0


def _bits32(dtype):
    """A map from values of `dtype` to uint32 keys, one-to-one on values, or None if too wide."""
    dtype = np.dtype(dtype)
    if dtype.itemsize > 4:
        return None
    if dtype.kind == "f":
        return lambda values: (values.astype(np.float32) + np.float32(0.0)).view(np.uint32)
    # Integers of at most 32 bits: reduction mod 2**32 is one-to-one on the dtype's range.
    return lambda values: values.astype(np.uint32)


def _distinct(keys):
    """The distinct values of a 1-D array of uint64 or (finite) complex128 keys."""
    if keys.dtype == np.uint64:
        keys = np.sort(keys)
        return keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    # Sorting complex numbers is slow. Group by a hash instead, which sorts fast when there are
    # few distinct keys, and confirm that each group holds one key; a collision falls back.
    hashes = _complex_key_hash(keys)
    order = np.argsort(hashes)
    hashes, keys = hashes[order], keys[order]
    group_starts = np.flatnonzero(np.concatenate([[True], hashes[1:] != hashes[:-1]]))
    group_first = np.repeat(group_starts, np.diff(np.append(group_starts, len(keys))))
    if np.array_equal(keys, keys[group_first]):
        return keys[group_starts]
    return np.unique(keys)


def _complex_key_hash(keys):
    """A uint64 mix of the two float64 halves of each complex128 key."""
    halves = keys.view(np.uint64)
    return halves[0::2] ^ (halves[1::2] * np.uint64(0x9E3779B97F4A7C15))


def _fixed_order_sum(values) -> float:
    """sum(values) of a 1-D contiguous float64 block, added in an order fixed by the code alone.

    np.add.reduce adds a contiguous float64 run pairwise, with eight scalar accumulators per
    128-element leaf, whichever SIMD features the CPU has; BLAS ddot (used here before) picks a
    kernel per CPU type, and OpenBLAS's kernels add in different orders, so sums over the same
    block differed in their last bits between machines, and with them the dynamic thresholds.
    The blocks are cut at fixed positions and their sums added exactly (math.fsum), so every
    metric is a function of the two arrays alone.  tests/test_thresholds_policy.py checks it
    under other OpenBLAS cores and with numpy's dispatched CPU features turned off.
    """
    return float(np.add.reduce(values))


def _exact_sum(partials: list[float]) -> float:
    try:
        return math.fsum(partials)
    except OverflowError:  # finite partials whose sum overflows
        return float(sum(partials))


def _summarize(accumulator: _Accumulator, actual, golden, eps: float) -> dict:
    def report(flat_positions):
        return [_element_report(actual, golden, int(flat), eps) for flat in flat_positions]

    acc = accumulator
    return {**_metrics(acc),
            "worst_abs": report(acc.worst_abs.flat),
            "worst_rel": report(acc.worst_rel.flat),
            "worst_nan_inf": report(acc.first_mismatches.flat)}


def _metrics(acc: _Accumulator) -> dict:
    n_unequal = acc.n_greater + acc.n_less
    sum_abs_golden = _exact_sum(acc.sum_abs_golden)
    sum_sq_golden = _exact_sum(acc.sum_sq_golden)
    return {
        "diff1": _exact_sum(acc.sum_abs_diff) / (sum_abs_golden + DENOM_OFFSET),
        "diff2": math.sqrt(_exact_sum(acc.sum_sq_diff) / (sum_sq_golden + DENOM_OFFSET)),
        "diff3": acc.max_rel_err,
        "diff3_2": acc.max_abs_err,
        "diff4": acc.n_less / n_unequal if n_unequal else None,
        "n": acc.n,
        "n_unequal": n_unequal,
        "n_greater": acc.n_greater,
        "n_less": acc.n_less,
        "n_unique_unequal_pairs": acc.unique_pairs.count,
        "n_unique_unequal_pairs_capped": acc.unique_pairs.capped,
        "nan_inf_mismatch": acc.nan_inf_mismatch,
        "nan_golden": acc.nan_golden,
        "inf_golden": acc.inf_golden,
    }


def _element_report(actual, golden, flat: int, eps: float) -> dict:
    index = tuple(int(i) for i in np.unravel_index(flat, golden.shape))
    actual_value, golden_value = float(actual[index]), float(golden[index])
    abs_err = abs(actual_value - golden_value)
    rel_err = abs_err if abs(golden_value) < eps else abs_err / (abs(golden_value) + DENOM_OFFSET)
    return {
        "index": list(index),
        "flat": flat,
        "golden": json_float(golden_value),
        "actual": json_float(actual_value),
        "abs_err": json_float(abs_err),
        "rel_err": json_float(rel_err),
    }


def json_float(value: float):
    """The float itself, or 'nan' / 'inf' / '-inf', which strict JSON cannot hold as numbers."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value
