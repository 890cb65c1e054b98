"""mmcv 2.2.0's border_align_backward_cuda_kernel in T (gen.kernels.shared.mmcv_half), in one fixed order.

One thread per (n, c, k) and border e (threadIdx.y of a 128 x 4 block, index
(n*C + c)*K + k along x).  Each thread finds its point, start + stride * argmax (for float32
one fma, like the deform_roi_pool fusions), takes its four bilinear weights (the
bilinear_interpolate_gradient arithmetic, gen.kernels.deform_roi_pool.mmcv_emulation.bilinear_corners) and
atomicAdds grad_output * w_i into grad_input, each add rounded to T.  A point more than one
pixel outside the map gets weights 0 and adds grad_output * 0 at a stray address (index -1,
-1 of its channel plane): for a finite grad_output that changes nothing, and it is left out.

The atomicAdds have no fixed order on the GPU, so neither have mmcv's float16 and float32
sums.  This emulation applies them in the order that matched mmcv's conformance outputs on
most elements: block by block, within a block the first atomicAdd (w1) of all its warps, then
the second and so on, warp by warp, lane by lane.  (Thread by thread, four adds each, matched
far fewer elements, and its diff1 / diff2 strayed 10-17 % from mmcv's on some cases.)

gen.kernels.border_align.compiled_mmcv_backward computes the same (both orders) in one C call where a
compiler is at hand; the numpy code below is the fallback and the definition both are tested against.
"""
from __future__ import annotations

import numpy as np

from gen.kernels.border_align import compiled_mmcv_backward
from gen.kernels.deform_roi_pool.mmcv_emulation import as_t, bilinear_corners, mul_add
from gen.kernels.shared.mmcv_half import ScalarT

BORDERS = 4          # top, left, bottom, right: threadIdx.y
_BLOCK_X = 128       # the launcher's dim3 block(128, 4)


def border_align_backward(inputs: dict, params: dict, out_shapes: dict | None = None, *, atomic_order=None) -> dict:
    """grad_output [N, K, 4, C], boxes [N, K, 4], argmax_idx [N, K, 4, C] -> grad_input [N, H, W, 4C] in T.

    H and W are not in the inputs: out_shapes['grad_input'] = (N, H, W, 4C) gives them.
    ``atomic_order(threads)``: the order of the atomicAdds (default: the one that matched mmcv).
    """
    if not out_shapes or "grad_input" not in out_shapes:
        raise ValueError("border_align_backward needs out_shapes['grad_input'] = (N, H, W, 4C) for the map size")
    grad_output, boxes, argmax_idx = inputs["grad_output"], inputs["boxes"], inputs["argmax_idx"]
    dtype = grad_output.dtype.type
    pool_size = int(params["pool_size"])
    N, H, W, C4 = (int(d) for d in out_shapes["grad_input"])
    K, C = boxes.shape[1], C4 // BORDERS
    if atomic_order in (None, _thread_by_thread):
        fast = compiled_mmcv_backward.border_align_backward(grad_output, boxes, argmax_idx, pool_size, (N, H, W, C4),
                                                            atomic_order is _thread_by_thread)
        if fast is not None:
            return {"grad_input": fast}
    grad_input = np.zeros((N, H, W, C4), dtype=dtype)
    if grad_input.size == 0 or grad_output.size == 0:
        return {"grad_input": grad_input}

    if atomic_order is not None or np.any((argmax_idx < 0) | (argmax_idx > pool_size)):
        return _in_order(grad_output, boxes, argmax_idx, pool_size, (N, H, W, C4), atomic_order or _atomic_order)

    # A thread's point depends on its channel only through argmax_idx, one of P+1 values: every
    # (n, k, border) point of each value is computed once, [N, K, 4, P+1], and each thread takes
    # its own (elementwise arithmetic: the same bits as computed thread by thread).
    start_x, start_y, step_x, step_y = (a[..., None] for a in _border_lines(boxes.astype(dtype, copy=False), pool_size))
    values = as_t(np.arange(pool_size + 1), dtype)
    x, y = mul_add(step_x, values, start_x), mul_add(step_y, values, start_y)       # [N, K, 4, V]
    rows, cols, weights, inside = bilinear_corners(y, x, H, W)                      # [4 corners, N, K, 4, V]
    pixel = (np.arange(N)[:, None, None, None] * H + rows) * W + cols

    # The atomicAdds in _atomic_order's order, built in that layout [block, corner, border, lane]
    # (thread = block * 128 + lane = (n*C + c)*K + k); the lanes past the last thread dropped.
    threads = N * C * K
    blocks = -(-threads // _BLOCK_X)

    def by_block(per_thread):
        """[N, C, K, 4 borders] (broadcast) -> [block, border, lane], the missing lanes' copies of thread 0."""
        flat = np.broadcast_to(per_thread, (N, C, K, BORDERS)).reshape(threads, BORDERS)
        padded = np.concatenate([flat, np.broadcast_to(flat[:1], (blocks * _BLOCK_X - threads, BORDERS))])
        return np.ascontiguousarray(padded.reshape(blocks, _BLOCK_X, BORDERS).transpose(0, 2, 1))
    line = (np.arange(N)[:, None, None, None] * K + np.arange(K)[None, None, :, None]) * BORDERS + np.arange(BORDERS)
    point = by_block(line * (pool_size + 1) + argmax_idx.transpose(0, 3, 1, 2))      # into [N, K, 4, V]
    real = (np.arange(blocks * _BLOCK_X) < threads).reshape(blocks, 1, _BLOCK_X)
    keep = np.broadcast_to((real & inside.reshape(-1)[point])[:, None], (blocks, 4, BORDERS, _BLOCK_X))
    channel = by_block(np.arange(BORDERS) * C + np.arange(C)[None, :, None, None])
    targets = pixel.reshape(4, -1)[:, point].transpose(1, 0, 2, 3) * C4 + channel[:, None]
    contributions = by_block(grad_output.transpose(0, 3, 1, 2))[:, None] * \
        weights.reshape(4, -1)[:, point].transpose(1, 0, 2, 3)
    # np.add.at adds element by element in the given order, each sum rounded to T: atomicAdd's arithmetic.
    np.add.at(grad_input.reshape(-1), targets[keep], contributions[keep])
    return {"grad_input": ScalarT(dtype).result(grad_input)}


def _in_order(grad_output, boxes, argmax_idx, pool_size: int, shape, atomic_order) -> dict:
    """border_align_backward with its atomicAdds in the order ``atomic_order(threads)`` gives
    (flat indices into [4 corners, threads, 4 borders]), every thread's point computed."""
    N, H, W, C4 = shape
    dtype = grad_output.dtype.type
    K, C = boxes.shape[1], C4 // BORDERS
    grad_input = np.zeros(shape, dtype=dtype)
    # Thread layout [N, C, K, 4]: mmcv's grad_output and argmax_idx (NCHW-like) order.
    start_x, start_y, step_x, step_y = (a[:, None] for a in _border_lines(boxes.astype(dtype, copy=False), pool_size))
    index = as_t(argmax_idx.transpose(0, 3, 1, 2), dtype)
    x, y = mul_add(step_x, index, start_x), mul_add(step_y, index, start_y)
    rows, cols, weights, inside = bilinear_corners(y, x, H, W)                  # [4 corners, N, C, K, 4]
    contributions = grad_output.transpose(0, 3, 1, 2)[None] * weights
    n = np.arange(N)[:, None, None, None]
    channel = np.arange(BORDERS)[None, None, None, :] * C + np.arange(C)[None, :, None, None]
    targets = ((n * H + rows) * W + cols) * C4 + channel
    # Every atomicAdd in its turn, those of outside points left out.
    order = atomic_order(N * C * K)
    order = order[np.broadcast_to(inside, targets.shape).reshape(-1)[order]]
    np.add.at(grad_input.reshape(-1), targets.reshape(-1)[order], contributions.reshape(-1)[order])
    return {"grad_input": ScalarT(dtype).result(grad_input)}


def _border_lines(boxes, pool_size: int):
    """Start and step of each border's points in T: ``x = box start; x += x_stride * (T)argmax``
    (strides box_width / pool_size: T / int, the int converted to T); four [..., 4 borders] arrays."""
    dtype = boxes.dtype.type
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    stride_w = (x2 - x1) / as_t(pool_size, dtype)
    stride_h = (y2 - y1) / as_t(pool_size, dtype)
    zero = np.zeros_like(stride_w)
    return (np.stack([x1, x1, x2, x2], axis=-1), np.stack([y1, y1, y2, y2], axis=-1),
            np.stack([stride_w, zero, -stride_w, zero], axis=-1), np.stack([zero, stride_h, zero, -stride_h], axis=-1))


def _atomic_order(threads: int) -> np.ndarray:
    """Flat indices into arrays [4 corners, threads, 4 borders] (threads = N*C*K, C order) that
    list their atomicAdds block by block, then corner, then border (threadIdx.y), warp and lane
    (threadIdx.x, warps being runs of 32).

    The kernel's grid-stride loop visits index blocks of 128 in ascending order; the last
    block is partial (its missing threads are skipped)."""
    blocks = -(-threads // _BLOCK_X)
    block, corner, border, x = np.ogrid[:blocks, :4, :BORDERS, :_BLOCK_X]
    thread = block * _BLOCK_X + x
    flat = (corner * threads + thread) * BORDERS + border                      # [block, corner, border, x]
    return flat[np.broadcast_to(thread < threads, flat.shape)]


def _thread_by_thread(threads: int) -> np.ndarray:
    """The atomicAdds thread after thread (threads in index order, each its borders, each its four
    corners): the order of a GPU that runs one thread at a time, another order mmcv may take."""
    thread, border, corner = np.ogrid[:threads, :BORDERS, :4]
    return ((corner * threads + thread) * BORDERS + border).reshape(-1)


def atomic_adds_thread_by_thread(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    """mmcv's arithmetic with its atomicAdds applied thread by thread (another order its atomics allow)"""
    return border_align_backward(inputs, params, out_shapes, atomic_order=_thread_by_thread)


# `opcase explain`'s variants of the kernel (gen.core.registry.explain_variants): the atomicAdds
# have no fixed order, so each order is an arithmetic a right kernel may have.
VARIANTS = {"border_align_backward": {"atomic_adds_thread_by_thread": atomic_adds_thread_by_thread}}
