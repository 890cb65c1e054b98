"""three_nn_forward: for each point of ``unknown`` [B, N, 3], its three nearest points of ``known``
[B, M, 3] in the same batch (mlu-ops three_nn_forward design doc 1.2; mmcv's three_nn before its
sqrt): ``dist2`` [B, N, 3] the squared distances, nearest first, ``idx`` [B, N, 3] int32 their
indices in ``known``.

The doc's formula dist2 = (xu - xk)^2 + (yu - yk)^2 + (zu - zk)^2, and its reference interface's
(mmcv's) selection: the points are scanned in index order and one takes a place only when it is
strictly nearer than the point there, the best distances starting at 1e40.  So equal distances
keep index order (the first three of the points ordered by (distance, index)), a NaN distance never
enters, and where fewer than three points have a distance below 1e40 (M < 3, NaN or infinite
coordinates) the rest of the slots keep distance 1e40 (inf in half and float) and index 0.
"""
from __future__ import annotations

import numpy as np

from gen.kernels.three_nn import compiled

NEIGHBOURS = 3
# The best distance a slot starts from (mmcv: double best = 1e40): a distance must be below it.
NO_DISTANCE = 1e40
# Distances computed per chunk of unknown points: [B, rows, M] arrays of about this many elements
# (small enough that the passes over a chunk find it in cache).
_CHUNK_ELEMENTS = 1 << 18


def squared_distances(unknown, known, dtype=np.float64) -> np.ndarray:
    """[B, n, M]: the doc's ((xu - xk)^2 + (yu - yk)^2) + (zu - zk)^2 of every pair, each operation
    rounded to ``dtype``."""
    u = np.asarray(unknown).astype(dtype, copy=False)
    k = np.asarray(known).astype(dtype, copy=False)
    total = diff = None
    with np.errstate(invalid="ignore", over="ignore"):           # nan and inf are data here
        for axis in range(3):
            diff = np.subtract(u[:, :, axis, None], k[:, None, :, axis], out=diff)
            np.multiply(diff, diff, out=diff)
            if total is None:
                total, diff = diff, None
            else:
                total += diff
    return total


def nearest(distances: np.ndarray, count: int = NEIGHBOURS):
    """distances [..., M] (float64, overwritten) -> (dist2 [..., count] float64, idx [..., count]
    int32): the first ``count`` points ordered by (distance, index) among those below NO_DISTANCE;
    inf and index 0 where there are fewer."""
    shape = distances.shape[:-1]
    dist2 = np.full(shape + (count,), np.inf)
    idx = np.zeros(shape + (count,), dtype=np.int32)
    if distances.shape[-1] == 0:
        return dist2, idx
    remaining = distances
    remaining[~(remaining < NO_DISTANCE)] = np.inf                    # NaN compares false: out too
    for slot in range(count):
        first = np.argmin(remaining, axis=-1)[..., None]             # argmin: the first of equal minima
        value = np.take_along_axis(remaining, first, axis=-1)
        dist2[..., slot] = value[..., 0]
        idx[..., slot] = np.where(np.isfinite(value), first, 0)[..., 0]
        np.put_along_axis(remaining, first, np.inf, axis=-1)
    return dist2, idx


def chunks(unknown, known):
    """Slices of the unknown points' axis, each with [B, rows, M] distances near _CHUNK_ELEMENTS."""
    B, N = unknown.shape[:2]
    rows = max(1, _CHUNK_ELEMENTS // max(1, B * known.shape[1]))
    for start in range(0, N, rows):
        yield slice(start, min(N, start + rows))


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    """unknown [B, N, 3], known [B, M, 3] -> dist2 [B, N, 3] (float64), idx [B, N, 3] int32; the
    distances computed in ``compute_dtype`` (the selection compares them as they come out)."""
    unknown, known = inputs["unknown"], inputs["known"]
    fast = compiled.forward(unknown, known, compute_dtype)
    if fast is not None:
        return {"dist2": fast[0], "idx": fast[1]}
    B, N = unknown.shape[:2]
    dist2 = np.empty((B, N, NEIGHBOURS))
    idx = np.empty((B, N, NEIGHBOURS), dtype=np.int32)
    for rows in chunks(unknown, known):
        d = squared_distances(unknown[:, rows], known, compute_dtype).astype(np.float64)
        dist2[:, rows], idx[:, rows] = nearest(d)
    return {"dist2": dist2, "idx": idx}


# ----------------------------------------------------------------------------- value generators

# CenterPoint's point-cloud range (nuScenes): x and y in [-51.2, 51.2] m, z in [-5, 3] m.
_SCENE_LOW, _SCENE_HIGH = np.array([-51.2, -51.2, -5.0]), np.array([51.2, 51.2, 3.0])


def points(rng: np.random.Generator, ctx, mode: str = "scene", low: float = -10.0, high: float = 10.0):
    """unknown [B, N, 3] and known [B, M, 3], drawn together:

    - scene:            unknown uniform in CenterPoint's range; known a random subset of the unknown
                        points of its batch (PointNet++'s feature propagation: the sparser level is
                        sampled from the denser one), so some distances are exactly 0; uniform
                        in the range too where M > N;
    - duplicate_known:  uniform in [low, high], every known point from the second on a copy of an
                        earlier one with probability 1/3: exact ties, which index order decides;
    - unknown_on_known: uniform in [low, high], each unknown point a copy of a random known point:
                        a nearest distance of exactly 0.
    """
    B, N, _ = (int(d) for d in ctx.shapes["unknown"])
    M = int(ctx.shapes["known"][1])
    if mode == "scene":
        unknown = rng.uniform(_SCENE_LOW, _SCENE_HIGH, size=(B, N, 3))
        if M <= N:
            known = np.stack([unknown[b, np.sort(rng.choice(N, size=M, replace=False))] for b in range(B)])
        else:
            known = rng.uniform(_SCENE_LOW, _SCENE_HIGH, size=(B, M, 3))
        return {"unknown": unknown, "known": known.reshape(B, M, 3)}
    unknown = rng.uniform(low, high, size=(B, N, 3))
    known = rng.uniform(low, high, size=(B, M, 3))
    if mode == "duplicate_known":
        for b in range(B):
            for m in range(1, M):
                if rng.random() < 1 / 3:
                    known[b, m] = known[b, rng.integers(0, m)]
        return {"unknown": unknown, "known": known}
    if mode == "unknown_on_known":
        if M:
            unknown = np.stack([known[b, rng.integers(0, M, size=N)] for b in range(B)])
        return {"unknown": unknown, "known": known}
    raise ValueError(f"points: unknown mode {mode!r}")


# ----------------------------------------------------------------------------- idx's near-ties

# How near two distances may come before a kernel computing in the dtype may order them either
# way: this many ulps of the dtype, of the distance (the subtraction, square and two additions
# each round once: under 5 ulps of relative error, all terms being positive), plus as many of its
# smallest subnormal (squares below it vanish).
_TIE_ULPS = 8


def _exact_components(unknown, known, dtype):
    """For one unknown point [3] and points [C, 3]: (|u - k| per axis in dtype [C, 3], whether every
    step of the distance is exact in dtype [C]: then every order of the sums gives the same value)."""
    t = np.dtype(dtype).type
    with np.errstate(invalid="ignore", over="ignore"):
        exact_diff = unknown.astype(np.float64) - known.astype(np.float64)
        diff = unknown.astype(t) - known.astype(t)
        square = exact_diff * exact_diff
        sums = np.stack([square[:, 0] + square[:, 1], square[:, 0] + square[:, 2], square[:, 1] + square[:, 2],
                         square.sum(axis=1)], axis=1)
        exact = ((diff.astype(np.float64) == exact_diff).all(axis=1)
                 & (square.astype(t).astype(np.float64) == square).all(axis=1)
                 & (sums.astype(t).astype(np.float64) == sums).all(axis=1))
    return np.abs(diff), exact


def _row_answers(unknown, known, golden_row, dtype):
    """The acceptable answers of one unknown point [3]'s three slots among known [M, 3]: {slot: sorted
    answers} where more than one is right (golden_row [3]: the golden indices)."""
    t = np.dtype(dtype).type
    d = squared_distances(unknown[None, None], known[None])[0, 0]
    finite = np.flatnonzero(d < NO_DISTANCE)
    if finite.size == 0:
        return {}
    values = d[finite]
    tolerance = _TIE_ULPS * (float(np.finfo(t).eps) * values + float(np.finfo(t).smallest_subnormal))
    third = np.sort(values)[min(NEIGHBOURS, values.size) - 1]
    third_reach = third + _TIE_ULPS * (float(np.finfo(t).eps) * third + float(np.finfo(t).smallest_subnormal))
    near = values - tolerance <= third_reach
    candidates, values, tolerance = finite[near], values[near], tolerance[near]
    components, exact = _exact_components(unknown, known[candidates], t)
    # Twins: equal distances that every order of computation gives alike (the same |differences|
    # axis by axis, or every step exact): index order decides between them in every kernel.
    twins = ((values[:, None] == values[None, :])
             & ((components[:, None, :] == components[None, :, :]).all(axis=2) | (exact[:, None] & exact[None, :])))
    before = (values[:, None] + tolerance[:, None] < values[None, :] - tolerance[None, :]) \
        | (twins & (candidates[:, None] < candidates[None, :]))
    lowest = before.sum(axis=0)                                  # points surely nearer than each
    highest = candidates.size - 1 - before.sum(axis=1)           # points that may be nearer
    answers = {}
    for slot in range(NEIGHBOURS):
        choices = set(candidates[(lowest <= slot) & (slot <= highest)].tolist())
        choices.add(int(golden_row[slot]))
        if len(choices) > 1:
            answers[slot] = sorted(choices)
    return answers


def idx_near_ties(inputs, params, dtype, golden):
    """Where idx's golden is not determined, and what is right there: {flat index: answers}.

    A kernel computing the distances in ``dtype`` orders two points either way when their float64
    distances are within rounding of each other (_TIE_ULPS): a slot accepts every point that is
    surely behind at most that many others and may be behind at least that many.  Twins (see
    _row_answers) are no near-tie: the lower index comes first in every kernel.  Rows whose first
    four distances lie apart by more than their rounding are determined and skipped.
    """
    unknown, known = inputs["unknown"], inputs["known"]
    B, N = unknown.shape[:2]
    t = np.dtype(dtype).type
    eps, tiny = float(np.finfo(t).eps), float(np.finfo(t).smallest_subnormal)
    answers = {}
    for rows in chunks(unknown, known):
        d = squared_distances(unknown[:, rows], known)
        with np.errstate(invalid="ignore"):
            first_four, _ = nearest(d, NEIGHBOURS + 1)              # by (distance, index)
            reach = _TIE_ULPS * (eps * first_four + tiny)
            apart = (first_four[..., :-1] + reach[..., :-1] < first_four[..., 1:] - reach[..., 1:]) \
                | ~np.isfinite(first_four[..., 1:])
        for b, row in zip(*np.nonzero(~apart.all(axis=-1))):
            n = rows.start + int(row)
            for slot, choices in _row_answers(unknown[b, n], known[b], golden[b, n], t).items():
                answers[(b * N + n) * NEIGHBOURS + slot] = choices
    return answers


# The doc's example (section 1.2: B = 2, N = 3, M = 4, torch.rand inputs as it prints them, four
# decimals) and the idx it prints for them.
DOC_EXAMPLE_UNKNOWN = [[[0.9381, 0.2671, 0.9055], [0.7244, 0.6917, 0.0026], [0.3927, 0.0399, 0.7615]],
                       [[0.1387, 0.6927, 0.5180], [0.6640, 0.8528, 0.6928], [0.4866, 0.9297, 0.5870]]]
DOC_EXAMPLE_KNOWN = [[[0.5020, 0.7031, 0.4423], [0.3479, 0.4305, 0.2259], [0.1832, 0.1273, 0.2115],
                      [0.7557, 0.5998, 0.4678]],
                     [[0.5281, 0.0788, 0.6776], [0.2943, 0.5079, 0.5893], [0.0043, 0.9342, 0.9288],
                      [0.0495, 0.1189, 0.7149]]]
DOC_EXAMPLE_IDX = [[[3, 0, 1], [3, 0, 1], [2, 1, 3]], [[1, 2, 3], [1, 2, 0], [1, 2, 0]]]


def doc_example(rng: np.random.Generator, ctx, tensor: str):
    """The doc 1.2 example's unknown [2, 3, 3] or known [2, 4, 3]."""
    if tensor == "unknown":
        return np.array(DOC_EXAMPLE_UNKNOWN, dtype=np.float64)
    if tensor == "known":
        return np.array(DOC_EXAMPLE_KNOWN, dtype=np.float64)
    raise ValueError(f"doc_example: no tensor {tensor!r}")
