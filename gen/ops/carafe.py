"""carafe forward/backward (design doc 000, OPS.md).

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

Rows are processed in chunks (down to a single row), so temporaries are bounded by one
row's stack: at most about 170 MB at the largest network shape (W = 512, C = 2048).
"""
from __future__ import annotations

import numpy as np

from gen.values import softmax_groups
from numpy.lib.stride_tricks import as_strided

from gen.ops import assemble

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


def _fill_row_stack(stack: np.ndarray, image: np.ndarray, first_row: int, step: int, pad: int) -> np.ndarray:
    """stack[i, pad + col, d, :] = image[first_row + step*i + d, col, :], zero outside the image.

    image is [rows, cols, C].  Laid out this way, the `depth` image rows one stack row
    needs sit next to each other in every column, so a window of columns is one block
    with a single row stride (see _windows).  Returns the stack.
    """
    rows, cols, _ = image.shape
    count, _, depth, _ = stack.shape
    for d in range(depth):
        source = first_row + d + step * np.arange(count)
        inside = np.flatnonzero((source >= 0) & (source < rows))
        lo, hi = (inside[0], inside[-1] + 1) if inside.size else (count, count)
        stack[:lo, :, d] = 0
        stack[hi:, :, d] = 0
        if lo < hi:
            stack[lo:hi, pad:pad + cols, d] = image[source[lo]:source[hi - 1] + 1:step]
    return stack


def _windows(stack: np.ndarray, count: int, col_step: int, width: int, groups: int) -> np.ndarray:
    """View [rows, count, groups, width, depth, Cg] of the stack's column windows, no copy.

    Window j starts at stack column j*col_step and spans `width` columns of `depth`
    stacked rows each: entry (col, d) of window j is stack[:, j*col_step + col, d].
    """
    rows, _, depth, C = stack.shape
    item = stack.itemsize
    return as_strided(stack, shape=(rows, count, groups, width, depth, C // groups),
                      strides=(stack.strides[0], col_step * depth * C * item, (C // groups) * item,
                               depth * C * item, C * item, item),
                      writeable=False)


def _taps_inside(size: int, k: int) -> np.ndarray:
    """[size, k]: whether tap t of position p reads a position p - r + t inside [0, size)."""
    source = np.arange(size)[:, None] - (k - 1) // 2 + np.arange(k)[None, :]
    return (source >= 0) & (source < size)


def _chunk_taps_outside(row_ok: np.ndarray, col_ok: np.ndarray) -> np.ndarray:
    """[rows, W, 1, 1, 1, kh, kw]: the taps of a chunk that fall outside the map."""
    return ~(row_ok[:, None, None, None, None, :, None] & col_ok[None, :, None, None, None, None, :])


def _input_windows(image: np.ndarray, k: int, G: int, rows: int, dtype):
    """Yield (i0, i1, windows) over chunks of input rows; windows [i1-i0, W, G, kw, kh, Cg]."""
    H, W, C = image.shape
    r = (k - 1) // 2
    stack = _new_row_stack(min(rows, H), W, k, r, C, dtype)
    for i0 in range(0, H, rows):
        i1 = min(H, i0 + rows)
        chunk = _fill_row_stack(stack[:i1 - i0], image, i0 - r, 1, r)
        yield i0, i1, _windows(chunk, W, 1, k, G)


def _rows_for_input_windows(W: int, C: int, k: int, s: int) -> int:
    """Input rows per chunk: bounds the row stack and the [rows, W, (a, b), C] outputs written per chunk."""
    return _rows_per_chunk(max((W + k) * k * C, s * s * W * C))


def _per_pixel(array7: np.ndarray) -> np.ndarray:
    """View [H, W, G, a, b, ...] of an array [H, a, W, b, G, ...] at output resolution (a, b: the s x s phases)."""
    return array7.transpose(0, 2, 4, 1, 3, *range(5, array7.ndim))


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    return assemble(forward_blocks(inputs, params, compute_dtype), _forward_shapes(inputs, params), compute_dtype)


def _forward_shapes(inputs, params) -> dict:
    _, _, s = _params(params)
    N, H, W, C = inputs["input"].shape
    return {"output": (N, s * H, s * W, C)}


def forward_blocks(inputs, params, compute_dtype=np.float64, out_shapes=None):
    """The forward as ("output", (n, output rows), block) pieces, in order (see gen.ops.assemble)."""
    k, G, s = _params(params)
    image_batch, mask = inputs["input"], inputs["mask"]
    N, H, W, C = image_batch.shape
    if N * H * W * C == 0 or mask.size == 0:
        return
    for n in range(N):
        with np.errstate(invalid="ignore"):    # nan/inf inputs are legitimate cases (doc 3.7)
            for i0, i1, block in _forward_image(image_batch[n], mask[n], k, G, s, compute_dtype):
                yield "output", (n, slice(i0 * s, i1 * s)), block


def _forward_image(image, mask, k, G, s, dtype):
    """output[(a, b), c] = sum over taps of mask[(a, b), tap] * window[tap, c], per input pixel and group;
    yields (i0, i1, output rows i0*s .. i1*s) per chunk of input rows."""
    H, W, C = image.shape
    mask_pixels = _per_pixel(mask.reshape(H, s, W, s, G, k, k))
    row_ok, col_ok = _taps_inside(H, k), _taps_inside(W, k)
    for i0, i1, windows in _input_windows(image, k, G, _rows_for_input_windows(W, C, k, s), dtype):
        block = np.empty(((i1 - i0) * s, W * s, C), dtype=dtype)
        out_pixels = _per_pixel(block.reshape(i1 - i0, s, W, s, G, C // G))
        # Outside taps get weight 0 so that a non-finite mask value there is skipped rather
        # than multiplied by the zero padding.
        weights = mask_pixels[i0:i1].astype(dtype)                               # [rows, W, G, a, b, kh, kw]
        np.copyto(weights, 0, where=_chunk_taps_outside(row_ok[i0:i1], col_ok))
        np.einsum("pwgabhv,pwgvhc->pwgabc", weights, windows, out=out_pixels)
        yield i0, i1, block


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
    for i0, i1, windows in _input_windows(image, k, G, _rows_for_input_windows(W, C, k, s), dtype):
        block = np.empty(((i1 - i0) * s, W * s, G * k * k), dtype=dtype)
        target = _per_pixel(block.reshape(i1 - i0, s, W, s, G, k, k))            # [rows, W, G, a, b, kh, kw]
        grads = grad_pixels[i0:i1].astype(dtype)                                 # [rows, W, G, a, b, Cg]
        np.einsum("pwgabc,pwgvhc->pwgabhv", grads, windows, out=target)
        # A tap outside the map has no input: its gradient is 0, not grad_output * padding.
        np.copyto(target, 0, where=_chunk_taps_outside(row_ok[i0:i1], col_ok))
        yield i0, i1, block


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
    rows = _rows_per_chunk(max((s * W + 2 * r * s) * span * C, W * span * span * G))
    stack = _new_row_stack(min(rows, H), s * W, span, r * s, C, dtype)
    for i0 in range(0, H, rows):
        i1 = min(H, i0 + rows)
        chunk = _fill_row_stack(stack[:i1 - i0], grad_output, (i0 - r) * s, s, r * s)
        windows = _windows(chunk, W, s, span, G)                         # [rows, W, G, (v, b), (u, a), Cg]
        weights = _grad_input_weights(mask7, i0, i1, k, s, dtype)        # [rows, W, G, (v, b), (u, a)]
        block = np.empty((i1 - i0, W, C), dtype=dtype)
        np.einsum("pwgxy,pwgxyc->pwgc", weights, windows, out=block.reshape(i1 - i0, W, G, C // G))
        yield i0, i1, block


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
