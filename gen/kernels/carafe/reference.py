"""carafe forward/backward (design doc 000; README.md beside this file).

    output[n, ho, wo, c] = sum_{kh,kw} input[n, ho//s - r + kh, wo//s - r + kw, c] * mask[n, ho, wo, (g*k + kh)*k + kw]

with r = (k-1)//2, g = c // (C//G), and taps outside the map skipped.

Every input pixel (i, j) serves the s*s output pixels (i*s + a, j*s + b), and all of
them read the same k x k window around (i, j).  So per input pixel and group the forward
is one small contraction over the taps

    out[(a, b), c] = sum_tap mask[(a, b), tap] * window[tap, c]

The window is never copied k*k times: a "row stack" interleaves the k input rows a pixel
row needs, stack[i, col, kh, c] = input[i - r + kh, col - r, c], and the window of pixel j
is then the block stack[i, j:j+k], which a strided view hands to np.einsum as is.  The
backward uses the same two pieces:

- grad_mask[(a, b), tap] = sum_c grad_output[(a, b), c] * window[tap, c], and
- grad_input is a gather, not a scatter: input pixel (i, j) receives from the output
  pixels of the k x k input pixels around it, a window of k*s x k*s output pixels; a row
  stack of grad_output (k*s output rows per input row, step s) makes that window one
  strided block again, and grad_input[i, j] = sum over the block of weights * block, where
  the weights are the mask entries that tie each of those output pixels back to (i, j).

The contractions run in np.einsum's own loops, not BLAS: they add the products one by one
in a fixed order, so the results (float64 goldens and the float32 'lowp' baseline that
sets dynamic thresholds alike) are the same bits whatever BLAS kernel a CPU selects,
while OpenBLAS's float32 results differ between, say, its Haswell and Sandybridge kernels.

Where a C compiler is found (gen/native.py), float64 goldens with 2 or more channels per group run
those contractions as C loops instead (carafe_kernel.c: the forward; carafe_backward_kernel.c:
grad_mask and grad_input), each doing numpy's float64 operations in numpy's order, so the bits are
the same either way; their float16/float32 inputs are widened by gen/widen.c into buffers reused
from chunk to chunk.  They run on the CPUs where they were measured faster than numpy, those with
AVX2 (FASTER_THAN_NUMPY_WITH), two chunks at a time on two threads (each chunk whole on one, so the
same bits).  OPCASE_NO_CC=1 runs numpy.

Rows are processed in chunks (down to a single row), so temporaries are bounded by one
row's stack per thread: at most about 170 MB at the largest network shape (W = 512, C = 2048),
and three chunks' outputs in flight (gen.core.overlap.ordered_map).
"""
from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

import numpy as np

from gen.values import softmax_groups
from numpy.lib.stride_tricks import as_strided

from gen import native, widen
from gen.core.overlap import ordered_map
from gen.kernels.shared import scratch_pool
from gen.kernels.shared.reference import assemble

# Elements of the largest per-chunk array (a row stack, or the outputs a chunk writes):
# small enough to stay in cache, which measured faster than larger chunks.
_CHUNK_ELEMENTS = 1 << 18


def _params(params) -> tuple[int, int, int]:
    k, G, s = int(params["kernel_size"]), int(params["group_size"]), int(params["scale_factor"])
    if k < 1 or k % 2 == 0 or G < 1 or s < 1:
        raise ValueError(f"carafe needs an odd kernel_size >= 1, group_size >= 1 and scale_factor >= 1, "
                         f"got {k}, {G}, {s}")
    return k, G, s


def _rows_per_chunk(elements_per_row: int) -> int:
    return max(1, _CHUNK_ELEMENTS // max(1, elements_per_row))


def _new_row_stack(rows: int, cols: int, depth: int, pad: int, C: int, dtype) -> np.ndarray:
    """A zeroed buffer [rows, cols + 2*pad, depth, C] for _fill_row_stack, reused across chunks
    (its padding columns stay zero; fresh allocations per chunk cost page faults)."""
    return np.zeros((rows, cols + 2 * pad, depth, C), dtype=dtype)


def _fill_row_stack(stack: np.ndarray, image: np.ndarray, first_row: int, step: int, pad: int,
                    zeroed: bool = False) -> np.ndarray:
    """stack[i, pad + col, d, :] = image[first_row + step*i + d, col, :], zero outside the image.

    image is [rows, cols, C]; `zeroed`: the stack is all zeros already (fresh from _new_row_stack), so
    the rows outside the image are left as they are.  Laid out this way, the `depth` image rows one stack row
    needs sit next to each other in every column, so a window of columns is one block
    with a single row stride (see _windows).  Returns the stack.
    """
    rows, cols, _ = image.shape
    count, _, depth, _ = stack.shape
    if stack.size <= _SMALL_STACK:
        # One gather instead of three slicings per stacked row: a small case's golden is mostly fixed costs.
        source, outside = _stack_rows(count, depth, first_row, step, rows)
        gathered = image[source]                                               # [count, depth, cols, C]
        gathered[outside] = 0
        stack[:, pad:pad + cols] = gathered.transpose(0, 2, 1, 3)
        return stack
    for d in range(depth):
        # Stack rows lo .. hi read image rows first_row + d + step*i inside [0, rows) (integer bounds: a small
        # case's golden is mostly this loop's fixed cost).
        start = first_row + d
        lo = min(count, max(0, -(start // step)))
        hi = max(lo, min(count, -((start - rows) // step)))
        if lo and not zeroed:
            stack[:lo, :, d] = 0
        if hi < count and not zeroed:
            stack[hi:, :, d] = 0
        if lo < hi:
            stack[lo:hi, pad:pad + cols, d] = image[start + step * lo:start + step * (hi - 1) + 1:step]
    return stack


# Stacks of at most this many elements are filled by one gather (_fill_row_stack).
_SMALL_STACK = 1 << 12


@functools.lru_cache(maxsize=256)
def _stack_rows(count: int, depth: int, first_row: int, step: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """[count, depth]: the image row stack row i, depth d reads (first_row + step*i + d, clamped into the
    image), and whether it lies outside the image (read-only)."""
    source = first_row + step * np.arange(count)[:, None] + np.arange(depth)[None, :]
    outside = (source < 0) | (source >= rows)
    clamped = np.clip(source, 0, max(rows - 1, 0))
    clamped.flags.writeable = outside.flags.writeable = False
    return clamped, outside


def _windows(stack: np.ndarray, count: int, col_step: int, width: int, groups: int) -> np.ndarray:
    """View [rows, count, groups, width, depth, Cg] of the stack's column windows, no copy.

    Window j starts at stack column j*col_step and spans `width` columns of `depth`
    stacked rows each: entry (col, d) of window j is stack[:, j*col_step + col, d].
    """
    rows, _, depth, C = stack.shape
    item = stack.itemsize
    strides = (stack.strides[0], col_step * depth * C * item, (C // groups) * item, depth * C * item, C * item, item)
    shape = (rows, count, groups, width, depth, C // groups)
    if not (stack.flags.c_contiguous and all(shape)):
        return as_strided(stack, shape=shape, strides=strides, writeable=False)
    # A C-ordered stack: the view made directly (as_strided's own checks cost more than a small case's einsum).
    view = np.ndarray(shape, dtype=stack.dtype, buffer=stack, strides=strides)
    view.flags.writeable = False
    return view


# The tap masks below are computed once per shape (read-only): on a small case they cost more than its arithmetic.
@functools.lru_cache(maxsize=256)
def _taps_inside(size: int, k: int) -> np.ndarray:
    """[size, k]: whether tap t of position p reads a position p - r + t inside [0, size)."""
    source = np.arange(size)[:, None] - (k - 1) // 2 + np.arange(k)[None, :]
    inside = (source >= 0) & (source < size)
    inside.flags.writeable = False
    return inside


def _chunk_taps_outside(row_ok: np.ndarray, col_ok: np.ndarray) -> np.ndarray:
    """[rows, W, 1, 1, 1, kh, kw]: the taps of a chunk that fall outside the map."""
    return ~(row_ok[:, None, None, None, None, :, None] & col_ok[None, :, None, None, None, None, :])


@functools.lru_cache(maxsize=64)
def _taps_outside(H: int, W: int, k: int, i0: int, i1: int) -> np.ndarray:
    """_chunk_taps_outside of input rows i0 .. i1 of an H x W map."""
    outside = _chunk_taps_outside(_taps_inside(H, k)[i0:i1], _taps_inside(W, k))
    outside.flags.writeable = False
    return outside


def _input_windows(image: np.ndarray, k: int, G: int, rows: int, dtype):
    """Yield (i0, i1, windows) over chunks of input rows; windows [i1-i0, W, G, kw, kh, Cg]."""
    H, W, C = image.shape
    r = (k - 1) // 2
    stack = _new_row_stack(min(rows, H), W, k, r, C, dtype)
    for i0 in range(0, H, rows):
        i1 = min(H, i0 + rows)
        chunk = _fill_row_stack(stack[:i1 - i0], image, i0 - r, 1, r, zeroed=i0 == 0)
        yield i0, i1, _windows(chunk, W, 1, k, G)


def _chunk_windows(image: np.ndarray, k: int, G: int, i0: int, i1: int, dtype) -> np.ndarray:
    """The windows [i1-i0, W, G, kw, kh, Cg] of input rows i0 .. i1 in a row stack of their own."""
    H, W, C = image.shape
    r = (k - 1) // 2
    return _windows(_fill_row_stack(_new_row_stack(i1 - i0, W, k, r, C, dtype), image, i0 - r, 1, r, zeroed=True),
                    W, 1, k, G)


def _rows_for_input_windows(W: int, C: int, k: int, s: int) -> int:
    """Input rows per chunk: bounds the row stack and the [rows, W, (a, b), C] outputs written per chunk."""
    return _rows_per_chunk(max((W + k) * k * C, s * s * W * C))


def _per_pixel(array7: np.ndarray) -> np.ndarray:
    """View [H, W, G, a, b, ...] of an array [H, a, W, b, G, ...] at output resolution (a, b: the s x s phases)."""
    return array7.transpose(0, 2, 4, 1, 3, *range(5, array7.ndim))


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    # assemble's work, except that the compiled loop writes its pieces in place (no copy of the output).
    output = np.zeros(_forward_shapes(inputs, params)["output"], dtype=compute_dtype)
    for _, index, block in forward_blocks(inputs, params, compute_dtype, into=output):
        if not np.may_share_memory(block, output):
            output[index] = block
    return {"output": output}


def _forward_shapes(inputs, params) -> dict:
    _, _, s = _params(params)
    N, H, W, C = inputs["input"].shape
    return {"output": (N, s * H, s * W, C)}


def forward_blocks(inputs, params, compute_dtype=np.float64, out_shapes=None, into=None):
    """The forward as ("output", (n, output rows), block) pieces, in order (see gen.kernels.shared.reference.assemble).
    With `into` (the whole output, C-ordered), a piece may be computed in place there and be a view of it."""
    k, G, s = _params(params)
    image_batch, mask = inputs["input"], inputs["mask"]
    N, H, W, C = image_batch.shape
    if N * H * W * C == 0 or mask.size == 0:
        return
    for n in range(N):
        with np.errstate(invalid="ignore"):    # nan/inf inputs are legitimate cases (doc 3.7)
            target = None if into is None else into[n]
            for i0, i1, block in _forward_image(image_batch[n], mask[n], k, G, s, compute_dtype, target):
                yield "output", (n, slice(i0 * s, i1 * s)), block


def _forward_image(image, mask, k, G, s, dtype, target=None):
    """output[(a, b), c] = sum over taps of mask[(a, b), tap] * window[tap, c], per input pixel and group;
    yields (i0, i1, output rows i0*s .. i1*s) per chunk of input rows (the compiled loop writes them into
    `target`, the image's whole output, where one is given)."""
    H, W, C = image.shape
    mask_pixels = _per_pixel(mask.reshape(H, s, W, s, G, k, k))
    row_ok, col_ok = _taps_inside(H, k), _taps_inside(W, k)
    fits = C % G == 0 and C // G >= 2 and mask.shape == (H * s, W * s, G * k * k)
    compiled = _compiled_forward() if fits and dtype == np.float64 else None
    if compiled is not None:
        float64_rows = _Float64Rows()

        def rows_of(chunk):
            i0, i1 = chunk
            block = (np.empty(((i1 - i0) * s, W * s, C), dtype=dtype) if target is None
                     else target[i0 * s:i1 * s])
            if _forward_rows_compiled(compiled, image, mask, k, G, s, i0, i1, block, float64_rows):
                block[...] = _forward_rows(mask_pixels, row_ok, col_ok, _chunk_windows(image, k, G, i0, i1, dtype),
                                           i0, i1, s, dtype)
            return i0, i1, block
        # Larger chunks than numpy's (no row stack to keep in cache): fewer input rows converted twice.
        yield from ordered_map(float64_rows.releasing(rows_of), _compiled_chunks(H, s * s * W * C, _COMPILED_CHUNK_ELEMENTS))
        return
    for i0, i1, windows in _input_windows(image, k, G, _rows_for_input_windows(W, C, k, s), dtype):
        yield i0, i1, _forward_rows(mask_pixels, row_ok, col_ok, windows, i0, i1, s, dtype,
                                    None if target is None else target[i0 * s:i1 * s])


def _forward_rows(mask_pixels, row_ok, col_ok, windows, i0, i1, s, dtype, block=None) -> np.ndarray:
    """Output rows i0*s .. i1*s from the windows [i1-i0, W, G, kw, kh, Cg] of input rows i0 .. i1, written
    into `block` (C-ordered, those rows' shape) where given, else into a new array."""
    _, W, G, _, _, Cg = windows.shape
    if block is None:
        block = np.empty(((i1 - i0) * s, W * s, G * Cg), dtype=dtype)
    out_pixels = _per_pixel(block.reshape(i1 - i0, s, W, s, G, Cg))
    # Outside taps get weight 0 so that a non-finite mask value there is skipped rather
    # than multiplied by the zero padding.
    weights = mask_pixels[i0:i1].astype(dtype)                               # [rows, W, G, a, b, kh, kw]
    np.copyto(weights, 0, where=_taps_outside(len(row_ok), len(col_ok), row_ok.shape[1], i0, i1))
    np.einsum("pwgabhv,pwgvhc->pwgabc", weights, windows, out=out_pixels)
    return block


# The forward's loop in C (carafe_kernel.c): the same operations in the same order as the einsum
# above, so the same bits, several times faster.  Only where np.einsum's loop runs over the channels
# of a group (2 or more): with one channel per group its loop runs over the taps instead, adding
# them in another grouping.  Shapes that do not fit take the numpy path, which says what is wrong.
_KERNEL_SOURCE = Path(__file__).with_name("carafe_kernel.c")
# Output elements per call of the C loop (8 MB): chunks of this size measured fastest (2 to 16 input rows
# at the network shapes, against 1 row with numpy's chunks: each call converts its k-1 halo rows again).
_COMPILED_CHUNK_ELEMENTS = 1 << 20


def _compiled_forward():
    return _compiled(_KERNEL_SOURCE, "carafe_forward_rows")


# The CPU feature carafe's C loops need to beat numpy's einsum (README, "Compiled loops"): measured faster
# with AVX-512 and, since their sums come in 4-double vectors where the CPU has no AVX-512, with AVX2
# (GCC keeps a vector wider than the CPU's registers in memory: the 8-double loops alone ran up to 3.8x
# slower than numpy on an AVX2 CPU).  The SSE2 clone was never measured, so numpy runs there.
# OPCASE_NATIVE_ANY_CPU=1 runs the C loops anyway.
FASTER_THAN_NUMPY_WITH = "avx2"


def _compiled(source: Path, name: str, layout: int = 2):
    """The C function `name` of `source`, or None (no compiler, OPCASE_NO_CC, a CPU on which numpy is faster):
    every loop of carafe's C files takes (rows of one input from row `lo`, long lo, rows of another, output,
    H, W, C, G, k, s, i0, i1), then the first input's layout in `layout` numbers (see _call_compiled)."""
    if not native.suits_this_cpu(FASTER_THAN_NUMPY_WITH):
        return None
    library = native.load(source)
    if library is None:
        return None
    function = getattr(library, name)
    function.restype = ctypes.c_int
    pointers = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    function.argtypes = pointers + [ctypes.c_long] * (8 + layout)
    return function


def _forward_rows_compiled(function, image, mask, k, G, s, i0, i1, block, float64_rows) -> bool:
    """Output rows i0*s .. i1*s into `block` by the C loop; whether one of them is NaN (then numpy's NaN is the
    one to keep: see carafe_kernel.c)."""
    H, W, C = image.shape
    lo, hi = _halo_rows(H, k, i0, i1)
    return _call_compiled(function, float64_rows("image", image[lo:hi]), lo,
                          float64_rows("mask", mask[i0 * s:i1 * s]), block, H, W, C, G, k, s, i0, i1)


def _halo_rows(H: int, k: int, i0: int, i1: int) -> tuple[int, int]:
    """The input rows the windows of rows i0 .. i1 reach, clipped to the map."""
    r = (k - 1) // 2
    return max(0, i0 - r), min(H, i1 + r)


class _PerThread:
    """Buffers by name, each thread its own: the C loops' chunks are computed on two threads at once
    (_chunk_by_chunk), and each reuses its buffers from chunk to chunk."""

    def __init__(self):
        self._local = threading.local()

    def buffers(self) -> dict:
        """This thread's buffers by name."""
        if not hasattr(self._local, "buffers"):
            self._local.buffers = {}
        return self._local.buffers


class _Float64Rows(_PerThread):
    """The rows a C loop reads, as C-ordered float64 (widened by gen/widen.py), in buffers reused from chunk
    to chunk and from call to call (gen.kernels.shared.scratch_pool; each thread its own while a chunk runs):
    a fresh array per chunk costs its page faults, as much as the widening itself."""

    def __call__(self, name: str, rows: np.ndarray) -> np.ndarray:
        """`rows` as C-ordered float64."""
        if rows.dtype == np.float64 and rows.flags.c_contiguous:
            return rows
        buffer = self._buffer(name, rows.size)
        return widen.to_float64(rows, buffer[:rows.size].reshape(rows.shape))

    def blocked(self, name: str, rows: np.ndarray, B: int) -> np.ndarray:
        """[rows, pixels, C] `rows` as float64 [C/B, rows, pixels, B] (widen.to_float64_blocked)."""
        count, pixels, C = rows.shape
        size = (C // B) * widen.blocked_layout(count, pixels, C, B)[1] if rows.size else 1
        view, _ = widen.to_float64_blocked(rows, B, self._buffer(name, size))
        return view

    def _buffer(self, name: str, size: int) -> np.ndarray:
        buffers = self.buffers()
        buffer = buffers.get(name)
        if buffer is None or buffer.size < size:
            if buffer is not None:
                scratch_pool.give(name, buffer)
            buffer = buffers[name] = scratch_pool.take(name, size)
        return buffer

    def release(self) -> None:
        """Hand this thread's buffers back to gen.kernels.shared.scratch_pool (the chunk is done with them)."""
        buffers = self.buffers()
        for name, buffer in buffers.items():
            scratch_pool.give(name, buffer)
        buffers.clear()

    def releasing(self, rows_of):
        """rows_of, handing this thread's buffers back once each chunk is computed (release)."""
        def released(chunk):
            try:
                return rows_of(chunk)
            finally:
                self.release()
        return released


def _chunk_by_chunk(rows_of, chunks, compiled: bool):
    """rows_of(chunk) for each chunk, in order: with the C loops, computed on two threads (the loops release
    the GIL, and each chunk is computed whole by one thread, so the bits are the same), which keeps both
    cores busy where nothing else runs beside a large case's golden; numpy's path, one after the other."""
    return ordered_map(rows_of, chunks) if compiled else map(rows_of, chunks)


def _call_compiled(function, rows, lo, other, block, *sizes) -> bool:
    """One call of a C loop (see _compiled) writing `block`; whether an output is NaN.  `rows` is C-ordered
    [rows, pixels, C], or blocked [C/B, rows, pixels, B] (_Float64Rows.blocked): its layout is passed last,
    as (row stride, pixel stride) or (row stride, block stride, B), in elements."""
    assert block.flags.c_contiguous and block.dtype == np.float64 and other.flags.c_contiguous
    assert rows.strides[-1] == 8 and other.dtype == rows.dtype == np.float64
    layout = ((rows.strides[0] // 8, rows.strides[1] // 8) if rows.ndim == 3 else
              (rows.strides[1] // 8, rows.strides[0] // 8, rows.shape[-1]))
    made_nan = function(native.address(rows), lo, native.address(other), native.address(block), *sizes, *layout)
    if made_nan < 0:
        raise MemoryError("carafe's compiled loop could not allocate its scratch")
    return bool(made_nan)


def backward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    return assemble(backward_blocks(inputs, params, compute_dtype), _backward_shapes(inputs), compute_dtype)


def _backward_shapes(inputs) -> dict:
    return {"grad_input": tuple(inputs["input"].shape), "grad_mask": tuple(inputs["mask"].shape)}


def backward_blocks(inputs, params, compute_dtype=np.float64, out_shapes=None):
    """The backward as (output, (n, rows), block) pieces; each output's pieces come in order."""
    k, G, s = _params(params)
    image_batch, mask, grad_output = inputs["input"], inputs["mask"], inputs["grad_output"]
    N, H, W, C = image_batch.shape
    if N * H * W * C == 0 or mask.size == 0:
        return
    for n in range(N):
        with np.errstate(invalid="ignore"):    # nan/inf inputs are legitimate cases (doc 3.7)
            for i0, i1, block in _grad_mask_of_image(image_batch[n], grad_output[n], k, G, s, compute_dtype):
                yield "grad_mask", (n, slice(i0 * s, i1 * s)), block
            for i0, i1, block in _grad_input_of_image(mask[n], grad_output[n], k, G, s, compute_dtype):
                yield "grad_input", (n, slice(i0, i1)), block


def _grad_mask_of_image(image, grad_output, k, G, s, dtype):
    """grad_mask[(a, b), tap] = sum over c of grad_output[(a, b), c] * window[tap, c], per input pixel and
    group; yields (i0, i1, grad_mask rows i0*s .. i1*s) per chunk of input rows."""
    H, W, C = image.shape
    grad_pixels = _per_pixel(grad_output.reshape(H, s, W, s, G, C // G))
    row_ok, col_ok = _taps_inside(H, k), _taps_inside(W, k)
    compiled = _compiled_backward("carafe_grad_mask_rows", image.shape, G, dtype)
    float64_rows = _Float64Rows()

    def rows_of(chunk):
        i0, i1 = chunk
        if compiled is not None:
            block = np.empty(((i1 - i0) * s, W * s, G * k * k), dtype=dtype)
            lo, hi = _halo_rows(H, k, i0, i1)
            if not _call_compiled(compiled, float64_rows("image", image[lo:hi]), lo,
                                  float64_rows("grad", grad_output[i0 * s:i1 * s]), block,
                                  H, W, C, G, k, s, i0, i1):
                return i0, i1, block
        return i0, i1, _grad_mask_rows(grad_pixels, row_ok, col_ok, _chunk_windows(image, k, G, i0, i1, dtype),
                                       i0, i1, dtype)
    # One chunking whichever path runs: a streamed case's float32 baseline (numpy) must yield the
    # pieces its float64 golden (C) yields; rows are independent, so chunks change no bits.  No halo
    # on grad_output here: the forward's smaller chunks, whose buffers stay in cache, measured faster.
    yield from _chunk_by_chunk(float64_rows.releasing(rows_of), _compiled_chunks(H, s * s * W * max(C, G * k * k),
                                                                                 _COMPILED_CHUNK_ELEMENTS),
                               compiled is not None)


def _grad_mask_rows(grad_pixels, row_ok, col_ok, windows, i0, i1, dtype) -> np.ndarray:
    """grad_mask rows i0*s .. i1*s from the windows [i1-i0, W, G, kw, kh, Cg] of input rows i0 .. i1."""
    _, W, G, k, _, _ = windows.shape
    s = grad_pixels.shape[3]
    block = np.empty(((i1 - i0) * s, W * s, G * k * k), dtype=dtype)
    target = _per_pixel(block.reshape(i1 - i0, s, W, s, G, k, k))            # [rows, W, G, a, b, kh, kw]
    grads = grad_pixels[i0:i1].astype(dtype)                                 # [rows, W, G, a, b, Cg]
    np.einsum("pwgabc,pwgvhc->pwgabhv", grads, windows, out=target)
    # A tap outside the map has no input: its gradient is 0, not grad_output * padding.
    np.copyto(target, 0, where=_taps_outside(len(row_ok), len(col_ok), row_ok.shape[1], i0, i1))
    return block


def _grad_input_of_image(mask, grad_output, k, G, s, dtype):
    """grad_input[i, j] = sum over the k*s x k*s output pixels around (i, j) of mask * grad_output;
    yields (i0, i1, grad_input rows i0 .. i1) per chunk.

    Output pixel (i' s + a, j' s + b) with i' = i - r + u reaches input row i through tap
    kh = 2r - u (and likewise for columns), so the weight of window entry (v, b; u, a) is
    mask[i' s + a, j' s + b, g, 2r - u, 2r - v].
    """
    H, W, C = mask.shape[0] // s, mask.shape[1] // s, grad_output.shape[-1]
    r, span = (k - 1) // 2, k * s
    mask7 = mask.reshape(H, s, W, s, G, k, k)
    compiled = _compiled_backward("carafe_grad_input_rows", (H, W, C), G, dtype, layout=3)
    float64_rows, stacks = _Float64Rows(), _PerThread()

    def rows_of(chunk):
        i0, i1 = chunk
        if compiled is not None:
            block = np.empty((i1 - i0, W, C), dtype=dtype)
            lo, hi = _halo_rows(H, k, i0, i1)
            grad_rows = float64_rows.blocked("grad", grad_output[lo * s:hi * s], _channel_block(C // G))
            if not _call_compiled(compiled, grad_rows, lo * s, float64_rows("mask", mask[lo * s:hi * s]), block,
                                  H, W, C, G, k, s, i0, i1):
                return i0, i1, block
        # numpy's row stack holds k*s grad_output rows per input row: a chunk's rows a few at a time.
        stack_rows = min(i1 - i0, max(1, _NUMPY_HALO_CHUNK_ELEMENTS // (s * s * W * (C + G * k * k))))
        stack = stacks.buffers().get("stack")
        if stack is None or len(stack) < stack_rows:
            stack = stacks.buffers()["stack"] = _new_row_stack(stack_rows, s * W, span, r * s, C, dtype)
        if stack_rows == i1 - i0:
            return i0, i1, _grad_input_rows(mask7, grad_output, stack[:i1 - i0], i0, i1, k, s, dtype)
        block = np.empty((i1 - i0, W, C), dtype=dtype)
        for a in range(i0, i1, stack_rows):
            b = min(i1, a + stack_rows)
            block[a - i0:b - i0] = _grad_input_rows(mask7, grad_output, stack[:b - a], a, b, k, s, dtype)
        return i0, i1, block
    # One chunking whichever path runs, as grad_mask's above.
    yield from _chunk_by_chunk(float64_rows.releasing(rows_of),
                               _compiled_chunks(H, s * s * W * (C + G * k * k), _COMPILED_HALO_CHUNK_ELEMENTS),
                               compiled is not None)


def _grad_input_rows(mask7, grad_output, stack, i0, i1, k, s, dtype) -> np.ndarray:
    """grad_input rows i0 .. i1, with `stack` (a row stack of i1 - i0 rows) as the grad_output windows' buffer."""
    G, C = mask7.shape[4], grad_output.shape[-1]
    W, r = mask7.shape[2], (k - 1) // 2
    chunk = _fill_row_stack(stack, grad_output, (i0 - r) * s, s, r * s)
    windows = _windows(chunk, W, s, k * s, G)                            # [rows, W, G, (v, b), (u, a), Cg]
    weights = _grad_input_weights(mask7, i0, i1, k, s, dtype)            # [rows, W, G, (v, b), (u, a)]
    block = np.empty((i1 - i0, W, C), dtype=dtype)
    np.einsum("pwgxy,pwgxyc->pwgc", weights, windows, out=block.reshape(i1 - i0, W, G, C // G))
    return block


# The backward's loops in C (carafe_backward_kernel.c), in numpy's order of additions as the forward's are,
# under the same condition (2 or more channels per group: np.einsum's loops run over the channels then).
_BACKWARD_SOURCE = Path(__file__).with_name("carafe_backward_kernel.c")
# Elements widened to float64 per call of grad_input's C loop (64 MB): each call widens the grad_output rows
# of its k-1 halo input rows again, so larger chunks than the forward's.  On an AVX2 CPU (2026-11-28) 64 MB
# took half the time of 16 MB at the network shapes (fewer rows widened twice), and 128 MB was no faster.
_COMPILED_HALO_CHUNK_ELEMENTS = 1 << 23
# numpy's grad_input runs each such chunk a part of this many elements at a time, which bounds its row stack.
_NUMPY_HALO_CHUNK_ELEMENTS = 1 << 21


def _compiled_backward(name: str, image_shape, G: int, dtype, layout: int = 2):
    """The C loop `name` where it gives numpy's bits (float64, 2+ channels per group), else None."""
    C = image_shape[-1]
    fits = dtype == np.float64 and C % G == 0 and C // G >= 2
    return _compiled(_BACKWARD_SOURCE, name, layout) if fits else None


def _channel_block(Cg: int) -> int:
    """Channels per block of grad_input's blocked grad_output (a block never straddles two groups)."""
    return 32 if Cg % 32 == 0 else Cg


def _compiled_chunks(H: int, elements_per_row: int, elements: int):
    """(i0, i1) chunks of input rows for the backward's C loops, about `elements` widened elements each."""
    rows = max(1, elements // max(1, elements_per_row))
    for i0 in range(0, H, rows):
        yield i0, min(H, i0 + rows)


def _grad_input_weights(mask7, i0, i1, k, s, dtype):
    """[rows, W, G, (v, b), (u, a)]: the mask entry linking each window entry of _grad_input_of_image to its pixel."""
    H, _, W, _, G, _, _ = mask7.shape
    r = (k - 1) // 2
    count = i1 - i0
    weights = np.zeros((count, W, G, k, s, k, s), dtype=dtype)
    for u in range(k):
        src_i0, src_i1 = max(0, i0 + u - r), min(H, i1 + u - r)       # output pixel rows i' = i - r + u
        if src_i0 >= src_i1:
            continue
        dst_i0 = src_i0 - (i0 + u - r)
        for v in range(k):
            src_j0, src_j1 = max(0, v - r), min(W, W + v - r)
            if src_j0 >= src_j1:
                continue
            dst_j0 = src_j0 - (v - r)
            block = mask7[src_i0:src_i1, :, src_j0:src_j1, :, :, 2 * r - u, 2 * r - v]   # [i', a, j', b, G]
            weights[dst_i0:dst_i0 + src_i1 - src_i0, dst_j0:dst_j0 + src_j1 - src_j0, :, v, :, u, :] = \
                block.transpose(0, 2, 4, 3, 1)
    return weights.reshape(count, W, G, k * s, k * s)


# ----------------------------------------------------------------------------- value generators

def softmax_masks(rng: np.random.Generator, ctx, std: float = 1.0):
    """Masks as CARAFE's kernel predictor makes them: logits ~ N(0, std), softmax over the
    k*k taps of each group at each output pixel (mask channel (g*k + kh)*k + kw)."""
    shape = tuple(ctx.shapes["mask"])
    k = int(ctx.params["kernel_size"])
    taps = k * k
    if k < 1 or shape[-1] % taps:
        raise ValueError(f"softmax_masks: mask channels {shape[-1]} are not groups of {taps} taps; "
                         "give malformed masks plain values")
    return softmax_groups(rng.normal(0.0, float(std), size=shape), taps)
