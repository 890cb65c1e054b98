"""border_align forward's value generators.  Its reference is gen.kernels.border_align.reference:forward
(mmcv's forward in float64: P+1 points per border, start included, advancing by repeated
addition, the first maximum kept).

The family's box generator reads the map size from the backward's grad_input [N, H, W, 4C];
the forward's input has that very shape, so `boxes` hands it over under that name.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from gen.kernels.border_align import reference as border_align

# The forward doc's worked example (section 1.2, pool_size 1; mmcv's own test input) in mmcv's
# layout input [N, 4C, H, W] with N = C = 1, H = 3, W = 4; its boxes are the backward's example
# boxes, and the doc's printed forward output is the backward example's grad_output (argmax_idx
# the backward example's argmax_idx).
DOC_EXAMPLE_INPUT_NCHW = [[[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
                           [[6, 7, 5, 8], [2, 1, 3, 4], [12, 9, 11, 10]],
                           [[-2, -3, 2, 0], [-4, -5, 1, -1], [-1, -1, -1, -1]],
                           [[0, -1, 2, 1], [-4, -3, -2, -1], [-1, -2, -3, -4]]]]


def boxes(rng: np.random.Generator, ctx, mode: str = "inside", extent: float = 0.5):
    """boxes [N, K, 4] on the map of `input` [N, H, W, 4C]: gen.kernels.border_align.reference.boxes' modes, and

    - grid:      every border point on the quarter-pixel grid inside the map (x1, y1 multiples
                 of 1/4, sides pool_size times a stride of 0, 1/4 or 1/2): the points, their
                 repeated additions and their bilinear weights are exact in float16 too, so every
                 precision samples the same points with the same weights (which of equal samples
                 is first does not depend on rounding);
    - off_pixel: like grid, but every point a quarter, half or three quarters of a pixel off
                 both axes' pixels and short of the last row and column (stride 0 or 1 pixel):
                 all four bilinear weights are positive, so no 0 * inf ever makes a NaN.
    """
    if mode in ("grid", "off_pixel"):
        N, K, _ = (int(d) for d in ctx.shapes["boxes"])
        _, H, W, _ = (int(d) for d in ctx.shapes["input"])
        pool_size = int(ctx.params["pool_size"])
        sides = _off_pixel_sides if mode == "off_pixel" else _grid_sides
        x1, x2 = sides(rng, (N, K), W, pool_size)
        y1, y2 = sides(rng, (N, K), H, pool_size)
        return np.stack([x1, y1, x2, y2], axis=-1)
    shapes = {**ctx.shapes, "grad_input": ctx.shapes["input"]}
    return border_align.boxes(rng, dataclasses.replace(ctx, shapes=shapes), mode=mode, extent=extent)


def _grid_sides(rng, shape, size: int, pool_size: int):
    """Start and end [shape] along an axis of ``size`` pixels: quarter-pixel start, side
    pool_size * stride with stride in {0, 1/4, 1/2}, both inside [0, size - 1]."""
    quarters = 4 * (size - 1)                                    # the last pixel, in quarters
    widest = min(2, quarters // pool_size)                       # stride in quarters: 0 .. 2
    stride = rng.integers(0, widest, size=shape, endpoint=True)
    start = rng.integers(0, quarters - pool_size * stride, endpoint=True)
    return start / 4.0, (start + pool_size * stride) / 4.0


def _off_pixel_sides(rng, shape, size: int, pool_size: int):
    """Start and end [shape] along an axis of ``size`` >= 2 pixels: start a quarter, half or three
    quarters past a pixel, side pool_size * stride with stride 0 or 1 pixel, the end before the
    last pixel."""
    quarters = 4 * (size - 1)
    stride = np.where(rng.random(shape) < 0.5, 0, 4) * (4 * pool_size + 3 <= quarters)
    fraction = rng.integers(1, 4, size=shape)
    whole = rng.integers(0, (quarters - 1 - pool_size * stride - fraction) // 4, endpoint=True)
    start = 4 * whole + fraction
    return start / 4.0, (start + pool_size * stride) / 4.0


def nonfinite(rng: np.random.Generator, ctx, nan: float = 0.02, inf: float = 0.02):
    """input [N, H, W, 4C] normal(0, 1) with a fraction ``nan`` of NaN and ``inf`` of infinities,
    +inf in the even channels, -inf in the odd ones: no sample mixes the two, so every NaN in
    the output comes from a NaN of the input (its bits fixed), never from inf - inf (whose sign
    depends on the CPU's arithmetic paths)."""
    shape = tuple(int(d) for d in ctx.shapes["input"])
    values = rng.normal(0.0, 1.0, size=shape)
    signed_inf = np.where(np.arange(shape[-1]) % 2 == 0, np.inf, -np.inf)
    draw = rng.random(shape)
    values = np.where(draw < inf, np.broadcast_to(signed_inf, shape), values)
    return np.where((draw >= inf) & (draw < inf + nan), np.nan, values)


def doc_example(rng: np.random.Generator, ctx, tensor: str):
    """The doc 1.2 worked example in the NHWC layouts: input [1, 3, 4, 4], boxes [1, 12, 4]."""
    if tensor == "input":
        return np.array(DOC_EXAMPLE_INPUT_NCHW, dtype=np.float64).transpose(0, 2, 3, 1).copy()
    if tensor == "boxes":
        return np.array(border_align.DOC_EXAMPLE_BOXES, dtype=np.float64)[None]
    raise ValueError(f"doc_example: no tensor {tensor!r}")


# ----------------------------------------------------------------------------- argmax_idx's near-ties

# How far below the largest sample another still counts as its tie: this many ulps of the
# dtype, of the largest bilinear sum of magnitudes (sum of w_k |v_k|) among the border's
# samples: the rounding error of four products and three additions in the dtype, with room.
_TIE_ULPS = 4


def _point_models(boxes, pool_size: int, dtype):
    """The ways a right kernel may place a border's points, each as [P+1] (y, x) arrays of [K, 4]
    (N leading): float64 repeated addition (the reference), repeated addition in the dtype (mmcv:
    ``x += stride`` in T) and in float32 (a float accumulator), and start + i * stride in the dtype."""
    models = []
    for position_dtype, multiply in ((np.float64, False), (dtype, False), (np.float32, False), (dtype, True)):
        start_x, start_y, step_x, step_y = border_align._border_lines(boxes, pool_size, position_dtype)
        if multiply:
            points = [(start_y + step_y * position_dtype(i), start_x + step_x * position_dtype(i))
                      for i in range(pool_size + 1)]
        else:
            points, x, y = [(start_y, start_x)], start_x, start_y
            for _ in range(pool_size):
                x, y = x + step_x, y + step_y
                points.append((y, x))
        models.append(points)
    return models


def _repeats_an_earlier_sample(exact: np.ndarray, in_dtype: np.ndarray) -> np.ndarray:
    """[P+1, ...]: whether sample j equals some earlier sample i both in float64 and in the dtype
    (the same point, or points clamped onto the same pixels, or exact small-integer sums): such a
    tie every kernel computes alike, so the earlier sample stays first and j can never win."""
    repeats = np.zeros(exact.shape, dtype=bool)
    for j in range(1, exact.shape[0]):
        same = (exact[:j] == exact[j]) & (in_dtype[:j] == in_dtype[j])
        repeats[j] = same.any(axis=0)
    return repeats


def argmax_near_ties(inputs, params, dtype, golden):
    """Where argmax_idx's golden is not determined, and what is right there: {flat index: answers}.

    The golden is the first of the largest samples in float64.  A kernel in ``dtype`` places its
    points in the dtype (repeated additions drift) and rounds each bilinear sum, so a sample within
    rounding of the largest may come out on top instead: every sample within _TIE_ULPS ulps (of
    the border's largest sum of magnitudes) of the largest, under any of _point_models' placements,
    is an acceptable answer, unless it repeats an earlier sample exactly (then the earlier one
    stays first in every kernel: integer features on grid points, coinciding or clamped points).
    A border with a NaN or infinite sample or corner is determined: no rounding reorders those
    (a NaN never wins, a NaN start stays, the first infinity stays).
    """
    features, boxes = inputs["input"], inputs["boxes"]
    pool_size = int(params["pool_size"])
    t = np.dtype(dtype).type
    N, H, W, C4 = features.shape
    if golden.size == 0 or H == 0 or W == 0:
        return {}
    models = _point_models(np.asarray(boxes, dtype=np.float64), pool_size, t)
    tolerance_unit = _TIE_ULPS * float(np.finfo(t).eps)
    answers = {}
    for n in range(N):
        image = np.asarray(features[n], dtype=np.float64)

        def sampled(points, source=image, dt=np.float64):
            return np.stack([border_align._sample_borders(source, y[n].astype(dt), x[n].astype(dt), dt)
                             for y, x in points]).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            exact = sampled(models[0])
            in_dtype = sampled(models[1], features[n], t)
            magnitude = sampled(models[0], np.abs(image)).max(axis=0)                # [K, 4, C]
            decided = ~np.isfinite(magnitude) | ~np.isfinite(exact).all(axis=0)
            tolerance = tolerance_unit * magnitude
            acceptable = np.zeros(exact.shape, dtype=bool)
            for points in models:
                values = sampled(points)
                acceptable |= values >= values.max(axis=0) - tolerance
        acceptable &= ~_repeats_an_earlier_sample(exact, in_dtype)
        several = (acceptable.sum(axis=0) > 1) & ~decided
        for flat in np.flatnonzero(several):
            index = np.unravel_index(flat, several.shape)
            choices = set(np.flatnonzero(acceptable[(slice(None), *index)]).tolist())
            choices.add(int(golden[n][index]))
            answers[n * several.size + int(flat)] = sorted(choices)
    return answers


# ----------------------------------------------------------------------------- argmax_idx's candidates

def argmax_candidates(inputs, params) -> np.ndarray:
    """[P+1, N, K, 4, C] float64: every sample argmax_idx chooses among, point i of each border, as the reference
    computes them (float64 points by repeated addition).  What `opcase power`'s tie mutant reads to find the
    samples equal to the chosen one (SELECTION_CANDIDATES, harness/studies/tie_mutants.py)."""
    features, boxes = inputs["input"], inputs["boxes"]
    pool_size = int(params["pool_size"])
    start_x, start_y, step_x, step_y = border_align._border_lines(boxes, pool_size, np.float64)
    samples = np.empty((pool_size + 1, *boxes.shape[:2], 4, features.shape[-1] // 4))
    with np.errstate(invalid="ignore", over="ignore"):
        for n in range(features.shape[0]):
            x, y = start_x[n], start_y[n]
            for i in range(pool_size + 1):
                if i:
                    x, y = x + step_x[n], y + step_y[n]
                samples[i, n] = border_align._sample_borders(features[n], y, x, np.float64)
    return samples


# {op: {selection output: candidates(inputs, params)}}: a selection whose candidates are no tensor's axis.
SELECTION_CANDIDATES = {"border_align_forward": {"argmax_idx": argmax_candidates}}
