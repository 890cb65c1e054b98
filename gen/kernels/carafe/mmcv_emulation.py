"""mmcv 2.2.0's CUDA CARAFE (carafe_cuda_kernel.cuh, the fast kernels behind mmcv.ops.carafe), bit for bit.

Every kernel adds in the order its thread does, in scalar_t (gen.kernels.shared.mmcv_half.ScalarT):

forward (CARAFEForward)
    output[n, ho, wo, c] starts at 0 and takes ``+= input * mask`` over the taps, kh outer,
    kw inner, taps outside the map skipped.
backward, grad_input (CARAFEBackward_Feature, then FeatureSum)
    First at output resolution: hs[n, ph, pw, c] takes ``+= mask * grad_output`` over the
    output pixels (ph + (kh - r) s, pw + (kw - r) s), kh outer, kw inner, those outside the
    output map skipped, the mask entry being that pixel's flipped tap (k-1-kh, k-1-kw), the
    one that reads input pixel (ph // s, pw // s).  Then grad_input[n, i, j, c] starts at 0
    and takes ``+= hs`` over the s x s block (i s + a, j s + b), a outer, b inner.
backward, grad_mask (CARAFEBackward_Mask)
    One warp per (n, ho, wo, mask channel): lane l starts at 0 and takes
    ``+= grad_output * input`` over the group's channels l, l + 32, l + 64, ...; then
    warpReduceSum's tree, ``v[l] += v[l + o]`` for o = 16, 8, 4, 2, 1, leaves the sum in
    lane 0.  A tap whose input pixel is outside the map gets 0.

mmcv's CARAFEForward and CARAFEBackward_Feature fault when G k^2 > 384 (their shared mask
buffer holds 384 mask channels per pixel); the emulation computes those cases by the same
arithmetic all the same, as the design doc's semantics ask.

gen.kernels.carafe.compiled_mmcv computes the same in one C call (the whole kernel, or a list of units)
where a compiler is at hand; the numpy code below is the fallback and the definition both are tested against.
"""
from __future__ import annotations

import numpy as np

from gen.kernels.carafe import compiled_mmcv
from gen.kernels.shared.mmcv_half import ScalarT
from gen.sampled import Units

WARP_SIZE = 32

# Elements of the accumulators one block of pixels works on: small enough to stay in cache
# through the many element-wise passes each tap makes (measured about twice as fast as
# whole-map arrays).
_BLOCK_ELEMENTS = 1 << 16


def _params(params) -> tuple[int, int, int]:
    return int(params["kernel_size"]), int(params["group_size"]), int(params["scale_factor"])


def _inside(lo: int, hi: int, size: int, shift: int) -> tuple[int, int]:
    """The positions p in [lo, hi) whose p + shift is in [0, size), as a range [lo', hi')."""
    return max(lo, -shift), min(hi, size - shift)


def _taps_inside(a0: int, a1: int, b0: int, b1: int, H: int, W: int, k: int, r: int):
    """Yield (kh, kw, i0, i1, j0, j1) for each tap, in mmcv's order (kh, then kw), with the rows
    [i0, i1) and columns [j0, j1) of the block [a0, a1) x [b0, b1) whose tap lies inside the map."""
    for kh in range(k):
        i0, i1 = _inside(a0, a1, H, kh - r)
        for kw in range(k):
            j0, j1 = _inside(b0, b1, W, kw - r)
            if i0 < i1 and j0 < j1:
                yield kh, kw, i0, i1, j0, j1


def _blocks(N: int, H: int, W: int, elements_per_pixel: int):
    """Yield (n, i0, i1, j0, j1): blocks of about _BLOCK_ELEMENTS elements covering [N, H, W] pixels."""
    pixels = max(1, _BLOCK_ELEMENTS // max(1, elements_per_pixel))
    cols = min(W, pixels)
    rows = max(1, pixels // max(1, cols))
    for n in range(N):
        for i0 in range(0, H, rows):
            for j0 in range(0, W, cols):
                yield n, i0, min(H, i0 + rows), j0, min(W, j0 + cols)


def carafe_forward(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    k, G, s = _params(params)
    fast = compiled_mmcv.forward(inputs, k, G, s)
    if fast is not None:
        return {"output": fast}
    image = inputs["input"]
    T = ScalarT(image.dtype)
    N, H, W, C = image.shape
    x, taps = _forward_operands(inputs, k, G, s, carrier=True)
    output = np.zeros((N, H, s, W, s, G, C // G), np.float32)
    if output.size:
        for n, a0, a1, b0, b1 in _blocks(N, H, W, s * s * C):
            output[n, a0:a1, :, b0:b1] = _forward_block(T, x, taps, k, n, a0, a1, b0, b1)
    return {"output": T.result(output.reshape(N, H * s, W * s, C))}


def carafe_forward_units(inputs: dict, params: dict, out_shapes: dict | None = None) -> Units:
    """The forward by input pixel (n, i, j): its s x s output pixels (gen.sampled)."""
    k, G, s = _params(params)
    N, H, W, _ = inputs["input"].shape
    T = ScalarT(inputs["input"].dtype)
    x, taps = _forward_operands(inputs, k, G, s, carrier=False)

    def values(units):
        fast = compiled_mmcv.forward(inputs, k, G, s, units)
        if fast is not None:
            return {"output": fast}
        blocks = [_forward_block(T, x, taps, k, n, i, i + 1, j, j + 1)
                  for n, i, j in zip(*np.unravel_index(units, (N, H, W)))]
        return {"output": T.result(np.reshape(blocks, (len(units), s, s, -1)))}
    return Units(N * H * W, lambda units: {"output": _output_pixels(units, (N, H, W), s)}, values)


def _output_pixels(units, grid, s: int) -> tuple:
    """(n, rows, cols) [units, s, s]: the output pixels of input pixels ``units`` (flat in ``grid``)."""
    n, i, j = (np.asarray(a)[:, None, None] for a in np.unravel_index(units, grid))
    phase = np.arange(s)
    return n, i * s + phase[:, None], j * s + phase[None, :]


def _forward_operands(inputs: dict, k: int, G: int, s: int, carrier: bool):
    """input as [N, H, W, G, Cg] and mask as [N, H, s, W, s, G, k, k]: converted to the float32
    carrier once (``carrier``: the whole kernel, faster), or views of the inputs themselves (a few
    units of a network case, whose inputs may be many GB), which ScalarT converts as it reads
    them, to the same values."""
    image, mask = inputs["input"], inputs["mask"]
    N, H, W, C = image.shape
    if carrier:
        image, mask = image.astype(np.float32), mask.astype(np.float32)
    return image.reshape(N, H, W, G, C // G), mask.reshape(N, H, s, W, s, G, k, k)


def _forward_block(T: ScalarT, x, taps, k, n, a0, a1, b0, b1) -> np.ndarray:
    """The output pixels of input pixels [a0, a1) x [b0, b1) of image n: [a1-a0, s, b1-b0, s, G, Cg]."""
    _, H, W, G, Cg = x.shape
    s, r = taps.shape[2], (k - 1) // 2
    acc = np.zeros((a1 - a0, s, b1 - b0, s, G, Cg), np.float32)
    for kh, kw, i0, i1, j0, j1 in _taps_inside(a0, a1, b0, b1, H, W, k, r):
        window = x[n, i0 + kh - r:i1 + kh - r, None, j0 + kw - r:j1 + kw - r, None]
        weight = taps[n, i0:i1, :, j0:j1, :, :, kh, kw, None]
        part = acc[i0 - a0:i1 - a0, :, j0 - b0:j1 - b0]
        part[...] = T.mac(part, window, weight)
    return acc


def carafe_backward(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    k, G, s = _params(params)
    fast = compiled_mmcv.backward(inputs, k, G, s)
    if fast is not None:
        return dict(zip(("grad_input", "grad_mask"), fast))
    image = inputs["input"]
    T = ScalarT(image.dtype)
    N, H, W, C = image.shape
    operands = _BackwardOperands(inputs, k, G, s, carrier=True)
    grad_input = np.zeros((N, H, W, C), np.float32)
    grad_mask = np.zeros((N, H, s, W, s, G, k, k), np.float32)
    if grad_input.size:
        for n, a0, a1, b0, b1 in _blocks(N, H, W, s * s * C):
            grad_input[n, a0:a1, b0:b1] = _grad_input_block(T, operands, k, n, a0, a1, b0, b1)
    if grad_mask.size and C // G:
        for n, a0, a1, b0, b1 in _blocks(N, H, W, s * s * G * max(operands.lanes, k * k)):
            grad_mask[n, a0:a1, :, b0:b1] = _grad_mask_block(T, operands, k, n, a0, a1, b0, b1)
    return {"grad_input": T.result(grad_input), "grad_mask": T.result(grad_mask.reshape(N, H * s, W * s, G * k * k))}


def carafe_backward_units(inputs: dict, params: dict, out_shapes: dict | None = None) -> Units:
    """The backward by input pixel (n, i, j): its grad_input and the grad_mask of its s x s
    output pixels (gen.sampled)."""
    k, G, s = _params(params)
    N, H, W, C = inputs["input"].shape
    T = ScalarT(inputs["input"].dtype)
    operands = _BackwardOperands(inputs, k, G, s, carrier=False)

    def index(units):
        n, i, j = np.unravel_index(units, (N, H, W))
        return {"grad_input": (n, i, j), "grad_mask": _output_pixels(units, (N, H, W), s)}

    def values(units):
        fast = compiled_mmcv.backward(inputs, k, G, s, units)
        if fast is not None:
            return dict(zip(("grad_input", "grad_mask"), fast))
        pixels = list(zip(*np.unravel_index(units, (N, H, W))))
        grad_input = [_grad_input_block(T, operands, k, n, i, i + 1, j, j + 1) for n, i, j in pixels]
        grad_mask = [_grad_mask_pixel(T, operands, k, n, i, j) if C // G else
                     np.zeros((s, s, G, k, k), np.float32) for n, i, j in pixels]
        return {"grad_input": T.result(np.reshape(grad_input, (len(units), C))),
                "grad_mask": T.result(np.reshape(grad_mask, (len(units), s, s, G * k * k)))}
    return Units(N * H * W, index, values)


class _BackwardOperands:
    """The backward's inputs shaped as its two kernels read them: in the float32 carrier, the
    lane-major copies made once (``carrier``: the whole kernel), or as views of the inputs
    themselves, lane-major block by block (a few units of a network case; see _forward_operands)."""

    def __init__(self, inputs: dict, k: int, G: int, s: int, carrier: bool):
        image, mask, grad_output = inputs["input"], inputs["mask"], inputs["grad_output"]
        N, H, W, C = image.shape
        Cg = C // G
        if carrier:
            image, mask, grad_output = (a.astype(np.float32) for a in (image, mask, grad_output))
        self.s, self.grid = s, (H, W, G)
        self.grads = grad_output.reshape(N, H * s, W * s, G, Cg)
        self.taps = mask.reshape(N, H * s, W * s, G, k, k)
        # Lanes past the last channel keep their 0, and v + 0 is v (no lane sum is ever -0, since
        # each starts at +0): so a group of Cg < 32 channels needs only the first lanes, a power of two.
        self.lanes = WARP_SIZE if Cg >= WARP_SIZE else 1 << max(0, Cg - 1).bit_length()
        self.steps = -(-Cg // self.lanes)
        self._x = image.reshape(N, H, W, G, Cg)
        self._grad = grad_output.reshape(N, H, s, W, s, G, Cg)
        if carrier:
            self._x, self._grad = self._lane_major(self._x), self._lane_major(self._grad)
        self._lane_major_already = carrier

    def _lane_major(self, values):
        return _lane_major(values.astype(np.float32, copy=False), self.steps, self.lanes)

    def x_lanes_at(self, n: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """input[n, rows[t], cols[t]] as [t, G, steps, lanes]."""
        points = self._x[n, rows, cols]
        return points if self._lane_major_already else self._lane_major(points)

    def x_lanes(self, n: int, rows: slice, cols: slice) -> np.ndarray:
        """input[n, rows, cols] as [rows, cols, G, steps, lanes]."""
        block = self._x[n, rows, cols]
        return block if self._lane_major_already else self._lane_major(block)

    def grad_lanes(self, n: int, rows: slice, cols: slice) -> np.ndarray:
        """grad_output of input pixels [rows, cols] of image n as [rows, s, cols, s, G, steps, lanes]."""
        block = self._grad[n, rows, :, cols]
        return block if self._lane_major_already else self._lane_major(block)


def _grad_input_block(T: ScalarT, ops: _BackwardOperands, k, n, a0, a1, b0, b1) -> np.ndarray:
    """CARAFEBackward_Feature at output resolution, then FeatureSum over each s x s block, for
    input pixels [a0, a1) x [b0, b1) of image n: [a1-a0, b1-b0, C]."""
    _, Ho, Wo, G, Cg = ops.grads.shape
    s, r = ops.s, (k - 1) // 2
    p0, p1, q0, q1 = a0 * s, a1 * s, b0 * s, b1 * s            # the block at output resolution
    spread = np.zeros((p1 - p0, q1 - q0, G, Cg), np.float32)
    for kh in range(k):
        dy = (kh - r) * s
        i0, i1 = _inside(p0, p1, Ho, dy)
        for kw in range(k):
            dx = (kw - r) * s
            j0, j1 = _inside(q0, q1, Wo, dx)
            if i0 >= i1 or j0 >= j1:
                continue
            weight = ops.taps[n, i0 + dy:i1 + dy, j0 + dx:j1 + dx, :, k - 1 - kh, k - 1 - kw, None]
            grad = ops.grads[n, i0 + dy:i1 + dy, j0 + dx:j1 + dx]
            part = spread[i0 - p0:i1 - p0, j0 - q0:j1 - q0]
            part[...] = T.mac(part, weight, grad)
    phases = spread.reshape(a1 - a0, s, b1 - b0, s, G * Cg)
    total = np.zeros((a1 - a0, b1 - b0, G * Cg), np.float32)
    for a in range(s):
        for b in range(s):
            total = T.add(total, phases[:, a, :, b])
    return total


def _grad_mask_block(T: ScalarT, ops: _BackwardOperands, k, n, a0, a1, b0, b1) -> np.ndarray:
    """CARAFEBackward_Mask for the output pixels of input pixels [a0, a1) x [b0, b1) of image n:
    per warp, lane sums over strided channels, then the shuffle tree; [a1-a0, s, b1-b0, s, G, k, k]."""
    H, W, G = ops.grid
    s, r = ops.s, (k - 1) // 2
    block = np.zeros((a1 - a0, s, b1 - b0, s, G, k, k), np.float32)
    for kh, kw, i0, i1, j0, j1 in _taps_inside(a0, a1, b0, b1, H, W, k, r):
        window = ops.x_lanes(n, slice(i0 + kh - r, i1 + kh - r), slice(j0 + kw - r, j1 + kw - r))
        window = window[:, None, :, None]
        grad = ops.grad_lanes(n, slice(i0, i1), slice(j0, j1))
        lane = np.zeros(grad.shape[:-2] + (ops.lanes,), np.float32)
        for step in range(ops.steps):
            lane = T.mac(lane, grad[..., step, :], window[..., step, :])
        block[i0 - a0:i1 - a0, :, j0 - b0:j1 - b0, :, :, kh, kw] = _warp_reduce(T, lane)
    return block


def _grad_mask_pixel(T: ScalarT, ops: _BackwardOperands, k, n, i, j) -> np.ndarray:
    """_grad_mask_block for the one input pixel (i, j), all its taps inside the map at once (each
    tap is its own warp, so this only batches independent sums): [s, s, G, k, k]."""
    H, W, G = ops.grid
    s, r = ops.s, (k - 1) // 2
    block = np.zeros((s, s, G, k, k), np.float32)
    taps = [(kh, kw) for kh in range(k) for kw in range(k) if 0 <= i + kh - r < H and 0 <= j + kw - r < W]
    if not taps:
        return block
    kh, kw = (np.array(t) for t in zip(*taps))
    window = ops.x_lanes_at(n, i + kh - r, j + kw - r)[:, None, None]          # [taps, 1, 1, G, steps, lanes]
    grad = ops.grad_lanes(n, slice(i, i + 1), slice(j, j + 1))[0, :, 0]       # [s, s, G, steps, lanes]
    lane = np.zeros((len(taps), s, s, G, ops.lanes), np.float32)
    for step in range(ops.steps):
        lane = T.mac(lane, grad[..., step, :], window[..., step, :])
    block[..., kh, kw] = np.moveaxis(_warp_reduce(T, lane), 0, -1)
    return block


def _lane_major(values: np.ndarray, steps: int, lanes: int) -> np.ndarray:
    """[..., Cg] -> [..., steps, lanes], zero-padded: channel step * lanes + lane is lane `lane`'s step `step`."""
    padded = np.zeros(values.shape[:-1] + (steps * lanes,), np.float32)
    padded[..., :values.shape[-1]] = values
    return padded.reshape(values.shape[:-1] + (steps, lanes))


def _warp_reduce(T: ScalarT, lane: np.ndarray) -> np.ndarray:
    """warpReduceSum as lane 0 sees it: v[l] += v[l + o] for o = lanes/2, ..., 1."""
    offset = lane.shape[-1] // 2
    while offset:
        lane = T.add(lane[..., :offset], lane[..., offset:2 * offset])
        offset //= 2
    return lane[..., 0]
