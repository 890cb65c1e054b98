"""mmcv 2.2.0's CUDA CARAFE (carafe_cuda_kernel.cuh, the fast kernels behind mmcv.ops.carafe), bit for bit.

Every kernel adds in the order its thread does, in scalar_t (gen.mmcv.half.ScalarT):

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
"""
from __future__ import annotations

import numpy as np

from gen.mmcv.half import ScalarT

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
    image, mask = inputs["input"], inputs["mask"]
    T = ScalarT(image.dtype)
    N, H, W, C = image.shape
    r, Cg = (k - 1) // 2, C // G
    x = image.astype(np.float32).reshape(N, H, W, G, Cg)
    taps = mask.astype(np.float32).reshape(N, H, s, W, s, G, k, k)
    output = np.zeros((N, H, s, W, s, G, Cg), np.float32)
    if output.size == 0:
        return {"output": T.result(output.reshape(N, H * s, W * s, C))}
    for n, a0, a1, b0, b1 in _blocks(N, H, W, s * s * C):
        acc = output[n, a0:a1, :, b0:b1]                        # a view: the block's output pixels
        for kh, kw, i0, i1, j0, j1 in _taps_inside(a0, a1, b0, b1, H, W, k, r):
            window = x[n, i0 + kh - r:i1 + kh - r, None, j0 + kw - r:j1 + kw - r, None]
            weight = taps[n, i0:i1, :, j0:j1, :, :, kh, kw, None]
            part = acc[i0 - a0:i1 - a0, :, j0 - b0:j1 - b0]
            part[...] = T.mac(part, window, weight)
    return {"output": T.result(output.reshape(N, H * s, W * s, C))}


def carafe_backward(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    k, G, s = _params(params)
    image, mask, grad_output = inputs["input"], inputs["mask"], inputs["grad_output"]
    T = ScalarT(image.dtype)
    grad_input = _grad_input(T, mask, grad_output, k, G, s, image.shape)
    grad_mask = _grad_mask(T, image, grad_output, k, G, s)
    return {"grad_input": T.result(grad_input), "grad_mask": T.result(grad_mask)}


def _grad_input(T: ScalarT, mask, grad_output, k, G, s, shape) -> np.ndarray:
    """CARAFEBackward_Feature at output resolution, then FeatureSum over each s x s block."""
    N, H, W, C = shape
    r, Cg = (k - 1) // 2, C // G
    Ho, Wo = H * s, W * s
    grads = grad_output.astype(np.float32).reshape(N, Ho, Wo, G, Cg)
    taps = mask.astype(np.float32).reshape(N, Ho, Wo, G, k, k)
    grad_input = np.zeros((N, H, W, C), np.float32)
    if grad_input.size == 0:
        return grad_input
    for n, a0, a1, b0, b1 in _blocks(N, H, W, s * s * C):
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
                weight = taps[n, i0 + dy:i1 + dy, j0 + dx:j1 + dx, :, k - 1 - kh, k - 1 - kw, None]
                grad = grads[n, i0 + dy:i1 + dy, j0 + dx:j1 + dx]
                part = spread[i0 - p0:i1 - p0, j0 - q0:j1 - q0]
                part[...] = T.mac(part, weight, grad)
        phases = spread.reshape(a1 - a0, s, b1 - b0, s, C)
        total = np.zeros((a1 - a0, b1 - b0, C), np.float32)
        for a in range(s):
            for b in range(s):
                total = T.add(total, phases[:, a, :, b])
        grad_input[n, a0:a1, b0:b1] = total
    return grad_input


def _grad_mask(T: ScalarT, image, grad_output, k, G, s) -> np.ndarray:
    """CARAFEBackward_Mask: per warp, lane sums over strided channels, then the shuffle tree."""
    N, H, W, C = image.shape
    r, Cg = (k - 1) // 2, C // G
    grad_mask = np.zeros((N, H, s, W, s, G, k, k), np.float32)
    if grad_mask.size == 0 or Cg == 0:
        return grad_mask.reshape(N, H * s, W * s, G * k * k)
    # Lanes past the last channel keep their 0, and v + 0 is v (no lane sum is ever -0, since
    # each starts at +0): so a group of Cg < 32 channels needs only the first lanes, a power of two.
    lanes = WARP_SIZE if Cg >= WARP_SIZE else 1 << (Cg - 1).bit_length()
    steps = -(-Cg // lanes)
    x = _lane_major(image.astype(np.float32).reshape(N, H, W, G, Cg), steps, lanes)
    grads = _lane_major(grad_output.astype(np.float32).reshape(N, H, s, W, s, G, Cg), steps, lanes)
    for n, a0, a1, b0, b1 in _blocks(N, H, W, s * s * G * max(lanes, k * k)):
        for kh, kw, i0, i1, j0, j1 in _taps_inside(a0, a1, b0, b1, H, W, k, r):
            window = x[n, i0 + kh - r:i1 + kh - r, None, j0 + kw - r:j1 + kw - r, None]
            grad = grads[n, i0:i1, :, j0:j1]
            lane = np.zeros(grad.shape[:-2] + (lanes,), np.float32)
            for step in range(steps):
                lane = T.mac(lane, grad[..., step, :], window[..., step, :])
            grad_mask[n, i0:i1, :, j0:j1, :, :, kh, kw] = _warp_reduce(T, lane)
    return grad_mask.reshape(N, H * s, W * s, G * k * k)


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
