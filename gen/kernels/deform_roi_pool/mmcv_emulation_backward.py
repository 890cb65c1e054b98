"""mmcv 2.2.0's deform_roi_pool_backward_cuda_kernel in T (gen.kernels.shared.mmcv_half), in one fixed order.

One thread per grad_output element (roi n, channel c, ph, pw): index ((n*C + c)*PH + ph)*PW + pw,
blocks of 512 (THREADS_PER_BLOCK).  Each thread computes its bin exactly as the forward does
(gen.kernels.deform_roi_pool.mmcv_emulation: the same fma fusions, taken over unverified: no mmcv capture of the
backward exists yet), ``g = grad_output / count`` with count = grid_h * grid_w in T, and for each
sample (iy, ix) inside the map atomicAdds ``g * w1 .. g * w4`` into grad_input and, with an
offset,

    ogx = gamma * roi_width  * g * (v11 * (y - y_low) + v10 * (y_high - y) + v01 * (y_low - y) + v00 * (y - y_high))
    ogy = gamma * roi_height * g * (v11 * (x - x_low) + v01 * (x_high - x) + v10 * (x_low - x) + v00 * (x - x_high))

into grad_offset: products left to right, each rounded to T; the four-term sum fused for
float32 as the forward's bilinear sum is (ScalarT.mac); (y, x) the unclamped sample.

The atomicAdds have no fixed order on the GPU.  This emulation applies them as
gen.kernels.border_align.mmcv_emulation does: block by block, within a block sample step by step ((iy, ix), as
the threads of a block run their loops together), then statement (w1..w4; ogx and ogy go to
other elements), warp by warp, lane by lane.  Each add is rounded to T (np.add.at in T).

gen.kernels.deform_roi_pool.compiled_mmcv_backward computes the same in one C call where a compiler
is at hand; the numpy code below is the fallback and the definition both are tested against.
"""
from __future__ import annotations

import numpy as np

from gen.kernels.deform_roi_pool import compiled_mmcv_backward
from gen.kernels.deform_roi_pool.mmcv_emulation import as_t, bilinear_corners, mul_add, rounded, to_int
from gen.core.overlap import ordered_map
from gen.kernels.shared.mmcv_half import F32, ScalarT
from gen.kernels.shared.reference import check_emulated_steps

_BLOCK = 512                        # THREADS_PER_BLOCK of mmcv's pytorch_cuda_helper.hpp
# Elements of the per-chunk arrays [blocks, steps, 4 corners, 512 lanes].
_CHUNK_ELEMENTS = 1 << 22


def deform_roi_pool_backward(inputs: dict, params: dict, out_shapes: dict | None = None, *,
                             thread_by_thread: bool = False) -> dict:
    """grad_output [R, PH, PW, C], input [N, H, W, C], rois [R, 5], offset [R, 2, PH, PW] (or None)
    -> grad_input [N, H, W, C], grad_offset [R, 2, PH, PW] in T (grad_offset 0 without an offset)."""
    _check_steps(inputs, params)
    fast = compiled_mmcv_backward.deform_roi_pool_backward(inputs, params, thread_by_thread)
    if fast is not None:
        return fast
    grad_output, features, rois = inputs["grad_output"], inputs["input"], inputs["rois"]
    offset = inputs.get("offset")
    dtype = features.dtype.type
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    N, H, W, C = features.shape
    R = rois.shape[0]
    T = ScalarT(dtype)
    grad_input = np.zeros(N * H * W * C, dtype=dtype)
    grad_offset = np.zeros(R * 2 * PH * PW, dtype=dtype)
    if grad_output.size and H and W:
        batch = to_int(rois[:, 0])
        if np.any((batch < 0) | (batch >= N)):
            # mmcv would write outside its grad_input: nothing to emulate.
            raise ValueError(f"deform_roi_pool_backward: rois[:, 0] holds batch indices outside [0, {N})")
        geometry = _Geometry(rois, offset, params, dtype)
        threads = R * C * PH * PW
        blocks = -(-threads // _BLOCK)

        def adds(block_range):
            first, last = block_range
            thread = np.arange(first * _BLOCK, min(threads, last * _BLOCK))
            return _block_chunk(T, thread, grad_output, features, batch, geometry, offset is not None,
                                thread_by_thread)
        # Chunks are computed apart (two at a time, on threads) and their atomicAdds applied in
        # turn, chunk after chunk: the order of the adds, and so every sum, as in one thread.
        for input_adds, offset_adds in ordered_map(adds, _chunks(geometry, blocks, C * PH * PW)):
            np.add.at(grad_input, *input_adds)
            if offset_adds is not None:
                with np.errstate(over="ignore", invalid="ignore"):   # inf + -inf is NaN in mmcv's half sums too
                    np.add.at(grad_offset, *offset_adds)
    return {"grad_input": T.result(grad_input.reshape(N, H, W, C)),
            "grad_offset": T.result(grad_offset.reshape(R, 2, PH, PW))}


def _chunks(geo, blocks: int, threads_per_roi: int):
    """Ranges [first, last) of blocks, each filling about _CHUNK_ELEMENTS slots: a chunk's
    slots are its blocks times the sample steps of its largest grid.  The adds go block after
    block whatever the chunks, so their sizes change no sum; sized by their own grids (not by
    the largest of all rois) they keep numpy's arrays long and its calls few."""
    first_roi = np.arange(blocks) * _BLOCK // threads_per_roi
    last_roi = np.minimum((np.arange(blocks) + 1) * _BLOCK - 1, threads_per_roi * len(geo.grid_h) - 1) // threads_per_roi
    first, grid_h, grid_w = 0, 0, 0
    for block in range(blocks):
        rois = slice(int(first_roi[block]), int(last_roi[block]) + 1)
        high = max(grid_h, int(geo.grid_h[rois].max()))
        wide = max(grid_w, int(geo.grid_w[rois].max()))
        if block > first and (block + 1 - first) * max(1, high * wide) * 4 * _BLOCK > _CHUNK_ELEMENTS:
            yield first, block
            first, high, wide = block, int(geo.grid_h[rois].max()), int(geo.grid_w[rois].max())
        grid_h, grid_w = high, wide
    yield first, blocks


def _check_steps(inputs: dict, params: dict) -> None:
    """Refuse a call whose rois' largest grids (rows and columns apart, as a chunk of rois holding both
    would take them) exceed MAX_EMULATED_STEPS, before either path: the compiled loop would compute what
    numpy cannot, and a case would differ between machines with and without a compiler."""
    grad_output, features, rois = inputs["grad_output"], inputs["input"], inputs["rois"]
    if not (grad_output.size and features.shape[1] and features.shape[2]) or rois.shape[0] == 0:
        return
    sampling_ratio = int(params["sampling_ratio"])
    if sampling_ratio > 0:
        steps = float(sampling_ratio) ** 2
    else:
        grid_h, grid_w = _adaptive_grids(rois, params, features.dtype.type)[6:]
        steps = float(max(int(grid_h.max()), 0)) * max(int(grid_w.max()), 0)
    check_emulated_steps("deform_roi_pool_backward", steps)


def _adaptive_grids(rois, params, dtype) -> tuple:
    """(start_w, start_h, roi_w, roi_h, bin_h, bin_w, grid_h, grid_w) per roi, in T: the kernel's preamble, with
    sampling_ratio 0's grids (ceil of the bin size)."""
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    scale, minus_half = as_t(params["spatial_scale"], dtype), dtype(-0.5)
    start_w, start_h = mul_add(rois[:, 1], scale, minus_half), mul_add(rois[:, 2], scale, minus_half)
    roi_w = mul_add(rois[:, 3], scale, minus_half) - start_w
    roi_h = mul_add(rois[:, 4], scale, minus_half) - start_h
    bin_h, bin_w = roi_h / as_t(PH, dtype), roi_w / as_t(PW, dtype)
    return start_w, start_h, roi_w, roi_h, bin_h, bin_w, to_int(np.ceil(bin_h.astype(F32))), to_int(np.ceil(bin_w.astype(F32)))


class _Geometry:
    """Per roi and per bin values of the kernel's preamble, in T (as gen.kernels.deform_roi_pool.mmcv_emulation's forward)."""

    def __init__(self, rois, offset, params, dtype):
        PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
        sampling_ratio = int(params["sampling_ratio"])
        self.gamma = as_t(params["gamma"], dtype)
        R = rois.shape[0]
        start_w, start_h, self.roi_w, self.roi_h, self.bin_h, self.bin_w, grid_h, grid_w = \
            _adaptive_grids(rois, params, dtype)
        if sampling_ratio > 0:
            self.grid_h = self.grid_w = np.full(R, sampling_ratio, dtype=np.int64)
        else:
            self.grid_h, self.grid_w = grid_h, grid_w
        # ``const T count = roi_bin_grid_h * roi_bin_grid_w``: no max(.., 1) in the backward; a
        # bin without samples never uses it.
        self.count = as_t(self.grid_h * self.grid_w, dtype)
        start_h = np.broadcast_to(start_h[:, None, None], (R, PH, PW))
        start_w = np.broadcast_to(start_w[:, None, None], (R, PH, PW))
        if offset is not None:
            start_w = mul_add((self.gamma * self.roi_w)[:, None, None], offset[:, 0], start_w)
            start_h = mul_add((self.gamma * self.roi_h)[:, None, None], offset[:, 1], start_h)
        self.bin_y0 = mul_add(as_t(np.arange(PH), dtype)[None, :, None], self.bin_h[:, None, None], start_h)
        self.bin_x0 = mul_add(as_t(np.arange(PW), dtype)[None, None, :], self.bin_w[:, None, None], start_w)


# Sample steps computed together per pass (slots [steps, 4 corners, padded threads] of the
# chunk): a small case's whole grid is one pass, a large chunk goes a few steps at a time, so
# that the per-pass temporaries stay near this many elements.
_STEP_GROUP_ELEMENTS = 1 << 18


def _block_chunk(T: ScalarT, thread, grad_output, features, batch, geo: _Geometry, with_offset: bool,
                 thread_by_thread: bool = False) -> tuple:
    """The atomicAdds of the threads ``thread`` (whole blocks, ascending) in the fixed order (or,
    ``thread_by_thread``, block by block, each thread's adds in turn, lane after lane): (targets,
    values) into grad_input, and into grad_offset (None without an offset), for np.add.at.

    The sample geometry (point, corners, weights, inside) depends on the roi and the bin, not on
    the channel: it is computed once per (roi, bin) of the chunk and gathered to the threads.
    The threads are padded to whole blocks, so that [thread] is a view [block, lane]."""
    _, PH, PW, C = grad_output.shape
    blocks = -(-thread.size // _BLOCK)
    padded = thread[0] + np.arange(blocks * _BLOCK)
    real = padded <= thread[-1]
    padded = np.where(real, padded, thread[-1])       # padding threads repeat the last, unused
    pw, ph = padded % PW, (padded // PW) % PH
    c, n = (padded // (PW * PH)) % C, padded // (PW * PH * C)
    rois = slice(int(n[0]), int(n[-1]) + 1)
    with np.errstate(divide="ignore", invalid="ignore"):      # count 0: a bin without samples
        g = grad_output.reshape(-1)[((n * PH + ph) * PW + pw) * C + c] / geo.count[n]
        # (gamma * roi_width) * g, rounded twice
        scales = (geo.gamma * geo.roi_w[n] * g, geo.gamma * geo.roi_h[n] * g) if with_offset else None
    # The samples are computed for the real threads only (a small case's one block is mostly padding).
    real_threads = thread.size
    bin_of_thread = ((n - rois.start) * PH + ph) * PW + pw
    chunk = _Chunk(geo, rois, batch, features, bin_of_thread[:real_threads], c[:real_threads])

    # Slots [block, step, corner, lane]; a slot a thread does not fill adds nothing.
    steps_h, steps_w = int(chunk.grid_h.max(initial=0)), int(chunk.grid_w.max(initial=0))
    steps = steps_h * steps_w
    slots = (blocks, max(steps, 1), _BLOCK)
    input_target = np.zeros(slots[:2] + (4, _BLOCK), dtype=np.int64)
    input_value = np.zeros(slots[:2] + (4, _BLOCK), dtype=features.dtype)
    input_used = np.zeros(slots[:2] + (4, _BLOCK), dtype=bool)
    offset_value = np.zeros((2,) + slots, dtype=features.dtype)
    offset_used = np.zeros((2,) + slots, dtype=bool)
    group = max(1, _STEP_GROUP_ELEMENTS // (4 * padded.size))
    for first in range(0, steps, group):
        step = np.arange(first, min(steps, first + group))
        target, value, used, offsets = chunk.samples(T, step // steps_w, step % steps_w, g[:real_threads],
                                                     scales and tuple(scale[:real_threads] for scale in scales))
        target, value, used = (_by_block(blocks, _padded(a, padded.size)) for a in (target, value, used))
        input_target[:, step], input_value[:, step], input_used[:, step] = target, value, used[:, :, None, :]
        for channel, value in enumerate(offsets):
            offset_value[channel][:, step] = _by_block(blocks, _padded(value, padded.size))
            offset_used[channel][:, step] = used
    input_adds = _in_add_order(thread_by_thread, (0, 3, 1, 2), input_target, input_value, input_used)
    if not with_offset:
        return input_adds, None
    bin_index = (n * 2 * PH + ph) * PW + pw
    target = np.broadcast_to(np.stack([bin_index, bin_index + PH * PW]).reshape(2, blocks, 1, _BLOCK), (2,) + slots)
    return input_adds, _in_add_order(thread_by_thread, (0, 1, 3, 2), target, offset_value, offset_used)


class _Chunk:
    """A chunk's rois and threads: the samples of a group of steps (iy, ix), per thread."""

    def __init__(self, geo: _Geometry, rois: slice, batch, features, bin_of_thread, channel):
        self.dtype = features.dtype.type
        _, self.H, self.W, self.C = features.shape
        self.flat_features = features.reshape(-1)
        self.grid_h, self.grid_w = geo.grid_h[rois, None, None], geo.grid_w[rois, None, None]
        self.y0, self.x0 = geo.bin_y0[rois], geo.bin_x0[rois]
        self.bin_h, self.bin_w = geo.bin_h[rois, None, None], geo.bin_w[rois, None, None]
        self.image_base = (batch[rois] * self.H)[:, None, None]
        self.bin_of_thread, self.channel = bin_of_thread, channel

    def samples(self, T: ScalarT, iy, ix, g, scales) -> tuple:
        """For steps (iy[s], ix[s]): the grad_input targets and values [s, 4 corners, thread], used
        [s, thread] and, with ``scales``, the two grad_offset values [s, thread]; each element
        computed by the operations, in T, of the step-by-step loop."""
        dtype, H, W = self.dtype, self.H, self.W
        iy, ix = iy[:, None, None, None], ix[:, None, None, None]          # [step, roi, PH, PW]
        with np.errstate(divide="ignore", invalid="ignore"):
            y = self.y0 + as_t(iy + 0.5, dtype) * self.bin_h / as_t(self.grid_h, dtype)
            x = self.x0 + as_t(ix + 0.5, dtype) * self.bin_w / as_t(self.grid_w, dtype)
            rows, cols, weights, inside = bilinear_corners(y, x, H, W)      # per (step, roi, bin)
            S = iy.shape[0]
            used = (inside & (iy < self.grid_h) & (ix < self.grid_w)).reshape(S, -1)[:, self.bin_of_thread]
            pixel_index = (((self.image_base + rows) * W + cols) * self.C).reshape(4, S, -1)[:, :, self.bin_of_thread]
            pixel_index += self.channel
            # A slot no thread fills holds 0, as np.zeros left it (its value is never added).
            target = np.where(used, pixel_index, 0).transpose(1, 0, 2)
            value = np.where(used, g * weights.reshape(4, S, -1)[:, :, self.bin_of_thread],
                             dtype(0)).transpose(1, 0, 2)
            if scales is None:
                return target, value, used, ()
            pixel = self.flat_features[pixel_index].astype(F32)                  # v00, v10, v01, v11
            y_low, y_high = as_t(rows[0], dtype), as_t(rows[2], dtype)
            x_low, x_high = as_t(cols[0], dtype), as_t(cols[1], dtype)
            along_x = _four_terms(T, pixel, self._per_thread([y - y_low, y_high - y, y_low - y, y - y_high]),
                                  (3, 1, 2, 0))
            along_y = _four_terms(T, pixel, self._per_thread([x - x_low, x_high - x, x_low - x, x - x_high]),
                                  (3, 2, 1, 0))
            with np.errstate(over="ignore"):                    # half overflows to ±inf, as mmcv's does
                offsets = tuple(np.where(used, scale * along.astype(dtype), dtype(0))
                                for scale, along in zip(scales, (along_x, along_y)))
        return target, value, used, offsets

    def _per_thread(self, factors) -> list:
        """Per (step, roi, bin) arrays in T, [step, thread] in the float32 carrier (cast before the gather)."""
        return [factor.astype(F32).reshape(factor.shape[0], -1)[:, self.bin_of_thread] for factor in factors]


def _by_block(blocks: int, per_thread):
    """[..., padded threads] -> [block, ..., lane]."""
    shaped = per_thread.reshape(per_thread.shape[:-1] + (blocks, _BLOCK))
    return np.moveaxis(shaped, -2, 0)


def _in_add_order(thread_by_thread: bool, lanes_before_steps, target, value, used) -> tuple:
    """(targets, values) of the used slots, in the order the adds happen: slot by slot, or (thread by
    thread) with each lane's steps before the next lane's (``lanes_before_steps``: that transpose)."""
    if thread_by_thread:
        target, value, used = (a.transpose(*lanes_before_steps) for a in (target, value, used))
    order = used.reshape(-1)
    return target.reshape(-1)[order], value.reshape(-1)[order]


def _padded(per_thread, threads: int) -> np.ndarray:
    """[..., real threads] -> [..., threads]: the padding threads' slots 0 (False), unused."""
    padded = np.zeros(per_thread.shape[:-1] + (threads,), dtype=per_thread.dtype)
    padded[..., :per_thread.shape[-1]] = per_thread
    return padded


def _four_terms(T: ScalarT, pixel, factors, corners) -> np.ndarray:
    """``p[a]*f0 + p[b]*f1 + p[c]*f2 + p[d]*f3`` in T (float32 fused as nvcc does: ScalarT.mac),
    the pixels p [4, S] (v00, v10, v01, v11) in the float32 carrier, the factors in T."""
    first = corners[0]
    total = rounded(T, np.multiply(pixel[first], factors[0].astype(F32, copy=False), dtype=F32))
    for corner, factor in zip(corners[1:], factors[1:]):
        total = T.mac(total, pixel[corner], factor.astype(F32, copy=False))
    return total


def atomic_adds_thread_by_thread(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    """mmcv's arithmetic with its atomicAdds applied thread by thread (another order its atomics allow)"""
    return deform_roi_pool_backward(inputs, params, out_shapes, thread_by_thread=True)


# `opcase explain`'s variants of the kernel (gen.core.registry.explain_variants): the atomicAdds
# have no fixed order, so each order is an arithmetic a right kernel may have.
VARIANTS = {"deform_roi_pool_backward": {"atomic_adds_thread_by_thread": atomic_adds_thread_by_thread}}
