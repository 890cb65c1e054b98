"""three_nn_forward: an independent copy of the kernel (written from the design doc's formula and
its reference interface's selection, not from the reference), with knobs that plant one realistic bug each."""
from __future__ import annotations

import numpy as np

# Unknown points per chunk: about this many distances, the expanded square's matrix product over a
# chunk's rows and every known point (its shape, and so its bits, as they have always been).
_ROWS_ELEMENTS = 1 << 21
# Known points per block: a block's distances (rows x points) about this many, so that the passes
# that pick its three nearest find it in cache.
_BLOCK_ELEMENTS = 1 << 15


def three_nn(unknown, known, *, tie="first", known_batch="own", last_point=True, distance_dtype=np.float64,
             sqrt=False, known_layout="points", order="doc"):
    """dist2 and idx [B, N, 3]: the first three points by (distance, index) whose distance is below
    1e40; inf and index 0 where there are fewer.

    Bugs: tie "last" puts the later of equal distances first (``<=`` for ``<`` in the scan);
    known_batch "first" reads batch 0's known points in every batch (a batch offset left out);
    last_point False scans known points 0 .. M-2; distance_dtype float16 computes the distances
    in half; sqrt returns distances (mmcv's Python wrapper's sqrt moved into the kernel);
    known_layout "xyz_planes" reads known as [B, 3, M] (mlu-ops' transposed workspace taken
    for the input).  Not bugs: order "yz_first" adds dx^2 + (dy^2 + dz^2), order "expanded"
    computes |u|^2 - 2 u.k + |k|^2 (in float64: in float32 its cancellation is no right kernel).
    """
    B, N, _ = unknown.shape
    M = known.shape[1]
    if known_layout == "xyz_planes":
        known = known.reshape(B, 3, M).transpose(0, 2, 1)
    if not last_point:
        known, M = known[:, :max(0, M - 1)], max(0, M - 1)
    dist2 = np.full((B, N, 3), np.inf)
    idx = np.zeros((B, N, 3), dtype=np.int32)
    if M == 0:
        return dist2, idx
    step = max(1, _ROWS_ELEMENTS // M)
    for b in range(B):
        with np.errstate(over="ignore"):   # a coordinate past the dtype's range is inf there, as on the device
            points = known[0 if known_batch == "first" else b].astype(distance_dtype)
        for start in range(0, N, step):
            with np.errstate(over="ignore"):
                u = unknown[b, start:start + step].astype(distance_dtype)
            found, first = _nearest_three(u, points, order, tie)
            dist2[b, start:start + step], idx[b, start:start + step] = found, np.where(np.isfinite(found), first, 0)
    return (np.sqrt(dist2) if sqrt else dist2), idx


def _block_distances(u, points, order):
    """[rows, points] squared distances in the points' dtype, each operation rounded to it."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = [np.subtract.outer(u[:, axis], points[:, axis]) for axis in range(3)]
        s = [diff * diff for diff in s]
        return s[0] + (s[1] + s[2]) if order == "yz_first" else (s[0] + s[1]) + s[2]


def _nearest_three(u, points, order, tie):
    """The chunk's three nearest per row, (float64 distances, indices), ordered by distance and then
    by index (tie "first") or by index the other way (tie "last"), searched block by block of known
    points: each block's three by three argmins, merged into the running three (the earlier points'
    three first on a tie for "first", the block's first for "last")."""
    rows, M = len(u), len(points)
    best = np.full((rows, 3), np.inf)
    best_idx = np.zeros((rows, 3), dtype=np.int64)
    cross = None
    if order == "expanded":
        with np.errstate(invalid="ignore", over="ignore"):
            cross = 2.0 * (u @ points.T)
            u_sq, points_sq = (u * u).sum(axis=1)[:, None], (points * points).sum(axis=1)[None, :]
    width = max(3, _BLOCK_ELEMENTS // rows)
    row_of = np.arange(rows)[:, None]
    for lo in range(0, M, width):
        hi = min(M, lo + width)
        if cross is None:
            d = _block_distances(u, points[lo:hi], order)
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.maximum((u_sq - cross[:, lo:hi]) + points_sq[:, lo:hi], 0.0)
        d = d.astype(np.float64)
        d[~(d < 1e40)] = np.inf                                   # NaN compares false: out too
        scan = d[:, ::-1] if tie == "last" else d
        picks = min(3, hi - lo)
        block = np.full((rows, 3), np.inf)
        block_idx = np.zeros((rows, 3), dtype=np.int64)
        for slot in range(picks):
            j = np.argmin(scan, axis=1)[:, None]                 # argmin: the first of equal minima
            block[:, slot:slot + 1] = np.take_along_axis(scan, j, axis=1)
            np.put_along_axis(scan, j, np.inf, axis=1)
            block_idx[:, slot:slot + 1] = (hi - 1 - j) if tie == "last" else (lo + j)
        merged = [best, block] if tie == "first" else [block, best]
        merged_idx = [best_idx, block_idx] if tie == "first" else [block_idx, best_idx]
        values, indices = np.concatenate(merged, axis=1), np.concatenate(merged_idx, axis=1)
        keep = np.argsort(values, axis=1, kind="stable")[:, :3]
        best, best_idx = values[row_of, keep], indices[row_of, keep]
    return best, best_idx


def segmented_three_nn(unknown, known, segment: int):
    """A search in segments of ``segment`` known points, each segment's three merged into the running
    three with ``<=`` (the segment's candidates first): an exact tie across segments goes to the later
    point, though within a segment the earlier wins.  The bug a split search makes."""
    B, N, _ = unknown.shape
    M = known.shape[1]
    dist2, idx = np.full((B, N, 3), np.inf), np.zeros((B, N, 3), dtype=np.int64)
    for start in range(0, M, segment):
        part_d, part_i = three_nn(unknown, known[:, start:start + segment])
        part_i = np.where(np.isfinite(part_d), part_i + start, 0)
        d = np.concatenate([part_d, dist2], axis=2)
        i = np.concatenate([part_i, idx], axis=2)
        order = np.argsort(d, axis=2, kind="stable")[..., :3]
        dist2, idx = np.take_along_axis(d, order, axis=2), np.take_along_axis(i, order, axis=2)
    return dist2, np.where(np.isfinite(dist2), idx, 0).astype(np.int32)


def counted_in_uint16(unknown, known):
    """N and M kept in 16 bits: the first N mod 2^16 points searched over the first M mod 2^16 known
    points; the other points' slots left at 0."""
    n, m = unknown.shape[1] % 2**16, known.shape[1] % 2**16
    dist2 = np.zeros(unknown.shape)
    idx = np.zeros(unknown.shape, dtype=np.int32)
    dist2[:, :n], idx[:, :n] = three_nn(unknown[:, :n], known[:, :m])
    return dist2, idx


def three_nn_compute(search=three_nn, **bug):
    def compute(request):
        i = request.inputs
        dist2, idx = search(i["unknown"], i["known"], **bug)
        return {"dist2": dist2, "idx": idx}
    return compute


CORRECT = {"three_nn_forward": three_nn_compute()}

PLANTED = {
    "three_nn_forward": {
        "ties_keep_last": three_nn_compute(tie="last"),
        "batch_offset_missing": three_nn_compute(known_batch="first"),
        "last_known_point_skipped": three_nn_compute(last_point=False),
        "distances_in_half": three_nn_compute(distance_dtype=np.float16),
        "sqrt_distances": three_nn_compute(sqrt=True),
        "known_read_as_xyz_planes": three_nn_compute(known_layout="xyz_planes"),
        "ties_across_segments_256": three_nn_compute(segmented_three_nn, segment=256),
        "counts_in_uint16": three_nn_compute(counted_in_uint16),
    },
}

# Not bugs, which every case must pass: the sum in another order, computed in float32 as a GPU
# kernel would (its near-ties ordered otherwise than the golden's), and the expanded square in float64.
CONTROLS = {
    "three_nn_forward": {
        "sum_yz_first_float32": three_nn_compute(order="yz_first", distance_dtype=np.float32),
        "expanded_square": three_nn_compute(order="expanded"),
    },
}
