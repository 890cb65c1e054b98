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

mmcv's fast forward faults when G k^2 > 384 (its shared mask buffer holds 384 channels per
pixel); the emulation computes those cases by the same arithmetic all the same.
"""
from __future__ import annotations

import numpy as np

from gen.mmcv.half import ScalarT

WARP_SIZE = 32


def _params(params) -> tuple[int, int, int]:
    return int(params["kernel_size"]), int(params["group_size"]), int(params["scale_factor"])


def _inside(size: int, shift: int) -> tuple[int, int]:
    """The positions p in [0, size) whose p + shift is in [0, size) too, as a range [lo, hi)."""
    return max(0, -shift), min(size, size - shift)


def carafe_forward(inputs: dict, params: dict) -> dict:
    k, G, s = _params(params)
    image, mask = inputs["input"], inputs["mask"]
    T = ScalarT(image.dtype)
    N, H, W, C = image.shape
    r = (k - 1) // 2
    x = image.astype(np.float32).reshape(N, H, W, G, C // G) if C else image.astype(np.float32)
    taps = mask.astype(np.float32).reshape(N, H, s, W, s, G, k, k)
    acc = np.zeros((N, H, s, W, s, G, C // G), np.float32)
    if acc.size:
        for kh in range(k):
            i0, i1 = _inside(H, kh - r)
            for kw in range(k):
                j0, j1 = _inside(W, kw - r)
                if i0 >= i1 or j0 >= j1:
                    continue
                window = x[:, i0 + kh - r:i1 + kh - r, None, j0 + kw - r:j1 + kw - r, None]
                weight = taps[:, i0:i1, :, j0:j1, :, :, kh, kw, None]
                acc[:, i0:i1, :, j0:j1] = T.mac(acc[:, i0:i1, :, j0:j1], window, weight)
    return {"output": T.result(acc.reshape(N, H * s, W * s, C))}


def carafe_backward(inputs: dict, params: dict) -> dict:
    k, G, s = _params(params)
    image, mask, grad_output = inputs["input"], inputs["mask"], inputs["grad_output"]
    T = ScalarT(image.dtype)
    N, H, W, C = image.shape
    grad_input = _grad_input(T, mask, grad_output, k, G, s, H, W, C)
    grad_mask = _grad_mask(T, image, grad_output, k, G, s)
    return {"grad_input": T.result(grad_input), "grad_mask": T.result(grad_mask)}


def _grad_input(T: ScalarT, mask, grad_output, k, G, s, H, W, C) -> np.ndarray:
    """CARAFEBackward_Feature at output resolution, then FeatureSum over each s x s block."""
    N = grad_output.shape[0]
    r = (k - 1) // 2
    Ho, Wo, Cg = H * s, W * s, (C // G if G else 0)
    grads = grad_output.astype(np.float32).reshape(N, Ho, Wo, G, Cg)
    taps = mask.astype(np.float32).reshape(N, Ho, Wo, G, k, k)
    spread = np.zeros((N, Ho, Wo, G, Cg), np.float32)
    if spread.size:
        for kh in range(k):
            dy = (kh - r) * s
            i0, i1 = _inside(Ho, dy)
            for kw in range(k):
                dx = (kw - r) * s
                j0, j1 = _inside(Wo, dx)
                if i0 >= i1 or j0 >= j1:
                    continue
                weight = taps[:, i0 + dy:i1 + dy, j0 + dx:j1 + dx, :, k - 1 - kh, k - 1 - kw, None]
                grad = grads[:, i0 + dy:i1 + dy, j0 + dx:j1 + dx]
                spread[:, i0:i1, j0:j1] = T.mac(spread[:, i0:i1, j0:j1], weight, grad)
    blocks = spread.reshape(N, H, s, W, s, C)
    total = np.zeros((N, H, W, C), np.float32)
    for a in range(s):
        for b in range(s):
            total = T.add(total, blocks[:, :, a, :, b])
    return total


def _grad_mask(T: ScalarT, image, grad_output, k, G, s) -> np.ndarray:
    """CARAFEBackward_Mask: per warp, lane sums over strided channels, then the shuffle tree."""
    N, H, W, C = image.shape
    r = (k - 1) // 2
    Cg = C // G if G else 0
    grad_mask = np.zeros((N, H, s, W, s, G, k, k), np.float32)
    if grad_mask.size == 0 or Cg == 0:
        return grad_mask.reshape(N, H * s, W * s, G * k * k)
    # Lanes past the last channel keep their 0, and v + 0 is v (no lane sum is ever -0, since
    # each starts at +0): so a group of Cg < 32 channels needs only the first lanes, a power of two.
    lanes = WARP_SIZE if Cg >= WARP_SIZE else 1 << (Cg - 1).bit_length()
    steps = -(-Cg // lanes)
    x = _lane_major(image.astype(np.float32).reshape(N, H, W, G, Cg), steps, lanes)
    grads = _lane_major(grad_output.astype(np.float32).reshape(N, H, s, W, s, G, Cg), steps, lanes)
    for kh in range(k):
        i0, i1 = _inside(H, kh - r)
        for kw in range(k):
            j0, j1 = _inside(W, kw - r)
            if i0 >= i1 or j0 >= j1:
                continue
            window = x[:, i0 + kh - r:i1 + kh - r, None, j0 + kw - r:j1 + kw - r, None]
            grad = grads[:, i0:i1, :, j0:j1]
            lane = np.zeros(grad.shape[:-2] + (lanes,), np.float32)
            for step in range(steps):
                lane = T.mac(lane, grad[..., step, :], window[..., step, :])
            grad_mask[:, i0:i1, :, j0:j1, :, :, kh, kw] = _warp_reduce(T, lane)
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
