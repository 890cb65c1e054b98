"""border_align backward (design doc 003; README.md beside this file), and the forward that produces argmax_idx.

Borders e = 0 top, 1 left, 2 bottom, 3 right of box (x1, y1, x2, y2) start at (x1, y1)
(top, left) or (x2, y2) (bottom, right) and step by (+w/P, 0), (0, +h/P), (-w/P, 0),
(0, -h/P).  Channel c of border e lives in feature channel e*C + c.

- forward: samples the P+1 points of each border, start included, advancing by repeated
  addition, and keeps the first maximum (strict >) and its index;
- backward: the point of index argmax (start + stride * argmax, a multiplication)
  scatters grad_output * its four bilinear weights into grad_input; points farther than
  one pixel outside the map add nothing.

The map size H, W of the backward's grad_input is not in its inputs: the generator
passes the output shapes, ``out_shapes={'grad_input': (N, H, W, 4C)}``.

Where a C compiler is at hand (gen.native), the backward's float64 golden runs as a compiled loop
(border_align_backward_kernel.c): the same operations and additions in the same order, the same
bits; numpy's path runs where there is none, for other compute dtypes and inputs the loop does not
take, and recomputes an output the loop made NaN (which NaN comes out is numpy's choice).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native, widen
from gen.kernels.shared.reference import check_sample_points
from gen.kernels.border_align import compiled_forward
from gen.kernels.shared.bilinear import bilinear_corners

BORDERS = 4   # top, left, bottom, right
_BACKWARD_SOURCE = Path(__file__).with_name("border_align_backward_kernel.c")


def _pool_size(params) -> int:
    pool_size = int(params["pool_size"])
    if pool_size < 1:
        raise ValueError(f"border_align needs pool_size >= 1, got {pool_size}")
    return pool_size


def _border_lines(boxes: np.ndarray, pool_size: int, dtype):
    """Start point and stride of every border: four [N, K, 4] arrays start_x, start_y, step_x, step_y."""
    boxes = np.asarray(boxes).astype(dtype)
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    stride_w = (x2 - x1) / dtype(pool_size)
    stride_h = (y2 - y1) / dtype(pool_size)
    zero = np.zeros_like(stride_w)
    start_x = np.stack([x1, x1, x2, x2], axis=-1)
    start_y = np.stack([y1, y1, y2, y2], axis=-1)
    step_x = np.stack([stride_w, zero, -stride_w, zero], axis=-1)
    step_y = np.stack([zero, stride_h, zero, -stride_h], axis=-1)
    return start_x, start_y, step_x, step_y


def _sample_borders(image: np.ndarray, y: np.ndarray, x: np.ndarray, dtype) -> np.ndarray:
    """[K, 4, C]: border e of image [H, W, 4C] sampled at the points (y, x) [K, 4]."""
    H, W, C4 = image.shape
    rows, cols, weights, inside = bilinear_corners(y, x, H, W)            # [4 corners, K, 4]
    per_border = image.reshape(H * W, BORDERS, C4 // BORDERS)
    corners = per_border[rows * W + cols, np.arange(BORDERS)].astype(dtype, copy=False)   # [4, K, 4, C]
    # A NaN or Inf corner makes NaN where its weight is 0 (0 * inf), as mmcv's products do inside the
    # map; a point more than a pixel outside reads 0 whatever its parked corners hold (mmcv returns 0).
    with np.errstate(invalid="ignore"):
        corners *= weights[..., None]
        value = corners[0]
        for corner in corners[1:]:
            value += corner
    return np.where(inside[..., None], value, dtype(0))


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    """mmcv border_align forward: input [N, H, W, 4C], boxes [N, K, 4] -> output, argmax_idx [N, K, 4, C]."""
    pool_size = _pool_size(params)
    features, boxes = inputs["input"], inputs["boxes"]
    check_sample_points("border_align", float(boxes.shape[0]) * boxes.shape[1] * BORDERS * (pool_size + 1))
    dtype = np.dtype(compute_dtype).type
    N, H, W, C4 = features.shape
    K = boxes.shape[1]
    output = np.zeros((N, K, BORDERS, C4 // BORDERS), dtype=dtype)
    argmax_idx = np.zeros(output.shape, dtype=np.int32)
    if output.size == 0 or H == 0 or W == 0:
        return {"output": output, "argmax_idx": argmax_idx}
    compiled = compiled_forward.forward(features, boxes, pool_size, compute_dtype)
    if compiled is not None:
        return {"output": compiled[0], "argmax_idx": compiled[1]}
    start_x, start_y, step_x, step_y = _border_lines(boxes, pool_size, dtype)
    for n in range(N):
        x, y = start_x[n], start_y[n]
        best = _sample_borders(features[n], y, x, dtype)
        for i in range(1, pool_size + 1):
            x, y = x + step_x[n], y + step_y[n]
            value = _sample_borders(features[n], y, x, dtype)
            better = value > best
            np.copyto(best, value, where=better)
            argmax_idx[n][better] = i
        output[n] = best
    return {"output": output, "argmax_idx": argmax_idx}


def backward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    if not out_shapes or "grad_input" not in out_shapes:
        raise ValueError("border_align backward needs out_shapes['grad_input'] = (N, H, W, 4C) for the map size")
    pool_size = _pool_size(params)
    grad_output, boxes, argmax_idx = inputs["grad_output"], inputs["boxes"], inputs["argmax_idx"]
    check_sample_points("border_align", float(boxes.shape[0]) * boxes.shape[1] * BORDERS * (pool_size + 1))
    N, H, W, C4 = (int(d) for d in out_shapes["grad_input"])
    dtype = np.dtype(compute_dtype).type
    grad_input = np.zeros((N, H, W, C4), dtype=dtype)
    if grad_input.size == 0 or grad_output.size == 0:
        return {"grad_input": grad_input}
    if dtype is np.float64 and _compiled_backward(grad_output, boxes, argmax_idx, pool_size, grad_input):
        return {"grad_input": grad_input}
    _scatter_backward(grad_output, boxes, argmax_idx, pool_size, grad_input)
    return {"grad_input": grad_input}


def _compiled_backward(grad_output, boxes, argmax_idx, pool_size: int, grad_input: np.ndarray) -> bool:
    """grad_input (zeros, float64) filled by the C loop; False, with grad_input zeros again, where numpy's path
    must run: no compiler, inputs whose shapes or dtypes the loop does not take, or a NaN in the result."""
    function = _backward_loop()
    N, H, W, C4 = grad_input.shape
    C = C4 // BORDERS
    K = boxes.shape[1] if boxes.ndim == 3 else -1
    if (function is None or C4 != BORDERS * C or boxes.shape != (N, K, BORDERS)
            or grad_output.shape != (N, K, BORDERS, C) or argmax_idx.shape != grad_output.shape
            or argmax_idx.dtype != np.int32 or not 1 <= pool_size < 1 << 31
            or any(a.dtype not in (np.float16, np.float32, np.float64) for a in (grad_output, boxes))):
        return False
    gradients = widen.to_float64(np.ascontiguousarray(grad_output))
    corners = widen.to_float64(np.ascontiguousarray(boxes))
    indices = np.ascontiguousarray(argmax_idx)
    status = function(*(native.address(a) for a in (gradients, corners, indices)),
                      N, K, C, H, W, pool_size, _channel_block(H * W, C), native.address(grad_input))
    if status == 0 and not np.isnan(grad_input.min()):
        return True
    grad_input[...] = 0
    return False


def _backward_loop():
    """border_align_backward of the compiled loop, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_BACKWARD_SOURCE, "border_align_backward", [ctypes.c_void_p] * 3 + [ctypes.c_long] * 7 + [ctypes.c_void_p], ctypes.c_int)


def _scatter_backward(grad_output, boxes, argmax_idx, pool_size: int, grad_input: np.ndarray) -> None:
    """grad_input (zeros) filled by numpy, in grad_input's dtype."""
    N, H, W, C4 = grad_input.shape
    dtype = grad_input.dtype.type
    C = C4 // BORDERS
    K = boxes.shape[1]
    start_x, start_y, step_x, step_y = _border_lines(boxes, pool_size, dtype)
    index_values, lookup = _point_lookup(argmax_idx, pool_size, dtype)               # [N, K, 4, V], [N, K, 4, C]
    x = start_x[..., None] + step_x[..., None] * index_values
    y = start_y[..., None] + step_y[..., None] * index_values
    rows, cols, weights, inside = bilinear_corners(y, x, H, W)                         # [4 corners, N, K, 4, V]
    # Each candidate point's four target pixels, as offsets into a block of `width` channels of one image's
    # grad_input, [H*W, width]; a point outside the map targets a dump row past the end instead.  A block
    # of channels is scattered at a time so that its targets stay in cache.
    width = _channel_block(H * W, C)
    base = (rows * W + cols) * width
    base[:, ~inside] = H * W * width
    base, weights = base.reshape(4, N, -1), weights.reshape(4, N, -1)
    for n in range(N):
        gradients = grad_output[n].astype(dtype, copy=False)                             # [K, 4, C]
        flat = grad_input[n].reshape(H * W, BORDERS, C)
        for e in range(BORDERS):
            for c0 in range(0, C, width):
                c1 = min(C, c0 + width)
                picked = lookup[n, :, e, c0:c1]                                           # [K, c1 - c0]
                target = np.stack([base[c, n].take(picked) + np.arange(c1 - c0) for c in range(4)])
                contributions = np.stack([gradients[:, e, c0:c1] * weights[c, n].take(picked)
                                          for c in range(4)])
                sums = _scatter_add(target.reshape(-1), contributions.reshape(-1), (H * W + 1) * width)
                flat[:, e, c0:c1] = sums[:H * W * width].reshape(H * W, width)[:, :c1 - c0]


def _channel_block(pixels: int, channels: int) -> int:
    """Channels per scatter: a block's float64 sums [pixels, block] fit in a core's L2 cache."""
    return max(1, min(channels, (256 << 10) // (8 * max(pixels, 1))))


def _point_lookup(argmax_idx, pool_size: int, dtype):
    """(index_values [N, K, 4, V] as dtype, lookup [N, K, 4, C] int64): the argmax of element (n, k, e, c)
    is index_values[n].reshape(-1)[lookup[n, k, e, c]].  V = pool_size + 1 (every point of a border, computed once for all its
    channels) when the indices lie in [0, pool_size]; otherwise one value per element."""
    argmax_idx = np.asarray(argmax_idx)
    N, K, _, C = argmax_idx.shape
    if argmax_idx.size and argmax_idx.min() >= 0 and argmax_idx.max() <= pool_size:
        values = pool_size + 1
        index_values = np.broadcast_to(np.arange(values, dtype=dtype), (N, K, BORDERS, values))
        first = (np.arange(K * BORDERS, dtype=np.int64) * values).reshape(K, BORDERS, 1)
        return index_values, argmax_idx.astype(np.int64) + first
    index_values = argmax_idx.astype(dtype)
    return index_values, np.broadcast_to(np.arange(K * BORDERS * C, dtype=np.int64).reshape(K, BORDERS, C),
                                         index_values.shape)


def _scatter_add(target: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """[size]: out[target[i]] += values[i], i in order, from zeros, accumulating in values' dtype.

    np.bincount adds its float64 weights one by one in index order, as np.add.at does, and is
    several times faster; it accumulates in float64 only, so other dtypes take np.add.at."""
    if values.dtype == np.float64:
        return np.bincount(target, weights=values, minlength=size)
    out = np.zeros(size, dtype=values.dtype)
    np.add.at(out, target, values)
    return out


# ----------------------------------------------------------------------------- value generators

def _box_locations(rng, N, K, H, W):
    """[N, K] centres (x, y): location k of the map when K = H*W (BorderDet predicts one box
    per location, boxes [N, H*W, 4]), uniform over the map otherwise."""
    if K == H * W:
        row, col = np.divmod(np.arange(K, dtype=float), max(W, 1))
        return np.broadcast_to(col, (N, K)), np.broadcast_to(row, (N, K))
    return rng.uniform(0, max(W - 1, 0), (N, K)), rng.uniform(0, max(H - 1, 0), (N, K))


def boxes(rng: np.random.Generator, ctx, mode: str = "inside", extent: float = 0.5):
    """boxes [N, K, 4] = (x1, y1, x2, y2) in feature-map pixels.

    - inside:    a box around each location, reaching up to `extent` of the map on each
                 side, clipped to [0, W-1] x [0, H-1];
    - edge:      like inside, but each coordinate is moved onto the edge half of the time:
                 x1, y1 in {-0.75, -0.5, 0}, x2 in {W-1, W-0.5, W-0.25}, y2 likewise (the
                 bands [-1, 0) and (size-1, size] where samples clamp or snap to the edge row
                 or column).  Never exactly -1 or size: a point there sits on the jump between
                 "edge value" and "nothing", where any rounding decides the golden;
    - past:      like inside, but each coordinate is moved 1 to 3 pixels past the map's
                 edge half of the time: points beyond [-1, size] add nothing;
    - zero_size: zero width, zero height or both (every point of a border coincides);
    - same_place: one box like inside, K times in each image: every box scatters into the same
                 pixels (the longest atomic-add chains K boxes can make).
    """
    N, K, _ = (int(d) for d in ctx.shapes["boxes"])
    _, H, W, _ = (int(d) for d in ctx.shapes["grad_input"])
    cx, cy = _box_locations(rng, N, K, H, W)
    reach = np.array([W, H, W, H], dtype=float) * float(extent)
    half_sides = rng.uniform(0.25, 1.0, (N, K, 4)) * np.maximum(reach, 0.5)
    box = np.stack([cx - half_sides[..., 0], cy - half_sides[..., 1],
                    cx + half_sides[..., 2], cy + half_sides[..., 3]], axis=-1)
    last = np.array([W - 1, H - 1, W - 1, H - 1], dtype=float).clip(min=0)
    box = np.clip(box, 0, last)
    moved = rng.random((N, K, 4)) < 0.5
    if mode == "inside":
        return box
    if mode == "edge":
        low_edge = rng.choice([-0.75, -0.5, 0.0], size=(N, K, 4))
        high_edge = last + rng.choice([0.0, 0.5, 0.75], size=(N, K, 4))
        edge = np.where(np.arange(4) < 2, low_edge, high_edge)
        return np.where(moved, edge, box)
    if mode == "past":
        beyond = rng.uniform(1.0, 3.0, (N, K, 4))
        past = np.where(np.arange(4) < 2, -1.0 - beyond, last + 1.0 + beyond)
        return np.where(moved, past, box)
    if mode == "zero_size":
        kind = rng.integers(0, 3, (N, K))            # 0: zero width, 1: zero height, 2: both
        box[..., 2] = np.where(kind != 1, box[..., 0], box[..., 2])
        box[..., 3] = np.where(kind != 0, box[..., 1], box[..., 3])
        return box
    if mode == "same_place":
        return np.broadcast_to(box[:, :1], box.shape).copy()
    raise ValueError(f"boxes: mode must be inside, edge, past, zero_size or same_place, got {mode!r}")


def argmax_indices(rng: np.random.Generator, ctx, mode: str = "forward"):
    """argmax_idx [N, K, 4, C] int32 in [0, pool_size].

    - forward: what border_align forward returns for the case's boxes on a random N(0, 1)
               feature map [N, H, W, 4C] (realistic: the index of the first maximum);
    - uniform: integers uniform in [0, pool_size];
    - ends:    only 0 (the start point) and pool_size (the end point).
    """
    shape = tuple(int(d) for d in ctx.shapes["argmax_idx"])
    pool_size = int(ctx.params["pool_size"])
    if mode == "uniform":
        return rng.integers(0, pool_size, size=shape, endpoint=True).astype(np.int32)
    if mode == "ends":
        return np.where(rng.random(shape) < 0.5, 0, pool_size).astype(np.int32)
    if mode != "forward":
        raise ValueError(f"argmax_indices: mode must be forward, uniform or ends, got {mode!r}")
    N, _, _, C = shape
    _, H, W, _ = (int(d) for d in ctx.shapes["grad_input"])
    features = rng.normal(0.0, 1.0, size=(N, H, W, BORDERS * C))
    result = forward({"input": features, "boxes": ctx.inputs["boxes"]}, {"pool_size": pool_size})
    return result["argmax_idx"]


# Doc 003 section 1.2 (pool_size 1), in mmcv's layouts: grad_output [N, C, K, 4],
# boxes [N, K, 4], argmax_idx [N, C, K, 4], grad_input [N, 4C, H, W] with N = C = 1, K = 12, H = 3, W = 4.
# grad_input is as the doc prints it: exactly twice what its inputs give by mmcv's kernel and
# the doc's formula (mmcv's own test data agrees with the half; tests/test_ref_border_align.py).
DOC_EXAMPLE_GRAD_OUTPUT = [[3, 6, 1, 2], [4, 7, -1, 1], [3, 7, 1, 2], [4, 6, -1, 1], [2, 12, -1, -1], [3, 12, -1, 2],
                           [3, 7, 1, 2], [4, 7, -1, 1], [6, 12, -1, -2], [4, 12, -1, 1], [4, 9, -1, 1], [4, 11, -1, 1]]
DOC_EXAMPLE_BOXES = [[0, 0, 2, 1], [1, 0, 3, 1], [1, 0, 2, 1], [0, 0, 3, 1], [0, 0, 1, 2], [0, 0, 2, 2],
                     [1, 0, 2, 1], [1, 0, 3, 1], [0, 1, 1, 2], [0, 0, 3, 2], [1, 0, 3, 2], [2, 0, 3, 2]]
DOC_EXAMPLE_ARGMAX = [[1, 0, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1], [1, 1, 0, 1], [1, 1, 0, 1],
                      [1, 0, 0, 1], [1, 0, 0, 1], [1, 1, 0, 0], [1, 1, 0, 1], [1, 1, 0, 1], [1, 1, 0, 1]]
DOC_EXAMPLE_GRAD_INPUT = [[[0, 4, 24, 48], [0, 12, 0, 0], [0, 0, 0, 0]],
                          [[24, 56, 0, 0], [0, 0, 0, 0], [96, 18, 22, 0]],
                          [[0, 0, 0, 0], [0, 0, 6, -6], [0, -4, -2, -6]],
                          [[0, -2, 16, 12], [0, 0, 0, 0], [0, -4, 0, 0]]]


def doc_example(rng: np.random.Generator, ctx, tensor: str):
    """The doc 1.2 worked example in the NHWC layouts: grad_output / argmax_idx [1, 12, 4, 1], boxes [1, 12, 4]."""
    per_border = {"grad_output": DOC_EXAMPLE_GRAD_OUTPUT, "argmax_idx": DOC_EXAMPLE_ARGMAX}
    if tensor == "boxes":
        return np.array(DOC_EXAMPLE_BOXES, dtype=np.float64)[None]
    if tensor in per_border:
        return np.array(per_border[tensor])[None, :, :, None]
    raise ValueError(f"doc_example: no tensor {tensor!r}")
