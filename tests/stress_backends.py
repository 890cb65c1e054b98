"""Backends with one planted bug of each class the stress suite is there to catch, for
tests/test_stress.py (loadable by worker processes as `stress_backends:NAME`).

Each is the built-in reference, for every kernel, with one bug; most fire only where real ones
do: past a size, in a value regime or dtype, in a channel count that is no multiple of a width.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from gen.core.rounding import round_to, round_toward_zero

# The vector width whose last, partial block the channel-tail bugs drop.

from harness.backends.builtin import run_in_dtype, check_request
NARROW_BLOCK, WIDE_BLOCK = 16, 64
# Float32 represents every whole number up to this one, and only every other one past it.
FLOAT32_EXACT = 2**24


def _reference(request):
    return run_in_dtype(request, np.float64)


def flush_subnormal_inputs(request):
    """Flushes float16 subnormal inputs to zero before computing (an FTZ load)."""
    def flushed(array):
        if array.dtype != np.float16:
            return array
        return np.where(np.abs(array) < np.finfo(np.float16).smallest_normal, np.float16(0), array)
    return _reference(replace(request, inputs={n: flushed(a) for n, a in request.inputs.items()}))


def truncated_results(request):
    """Rounds every result toward zero instead of to nearest: a bias of half an ulp on average,
    which zero-mean data hides in diff1/diff2 and all-positive data shows."""
    spec = check_request(request)
    out_shapes = {name: tuple(o.shape) for name, o in request.outputs.items()}
    results = spec.reference_fn(dict(request.inputs), dict(request.params), compute_dtype=np.float64,
                                out_shapes=out_shapes)
    return {name: round_toward_zero(results[name], o.dtype) for name, o in request.outputs.items()}


def batch_as_first(request):
    """Computes every image of a batch from the first one's inputs (n > 0 read as n = 0): each input
    with an axis of role batch (the spec's axis roles) is read at batch index 0 only."""
    spec = check_request(request)

    def first(name, a):
        axes = spec.inputs[name].axes
        if len(axes) != a.ndim or "batch" not in axes or a.shape[axes.index("batch")] < 2:
            return a
        return np.broadcast_to(np.take(a, [0], axis=axes.index("batch")), a.shape)
    return _reference(replace(request, inputs={n: first(n, a) for n, a in request.inputs.items()}))


def _drop_last_partial_block(request, block: int):
    out = _reference(request)
    for name, array in out.items():
        size = array.shape[-1] if array.ndim else 0
        if size > block and size % block:
            array[..., size // block * block:] = 0
    return out


def channel_tail_16(request):
    """Never writes the last, partial 16-wide block of the innermost dimension."""
    return _drop_last_partial_block(request, NARROW_BLOCK)


def channel_tail_64(request):
    """Never writes the last, partial 64-wide block of the innermost dimension."""
    return _drop_last_partial_block(request, WIDE_BLOCK)


def _float32_positions(count: int) -> np.ndarray:
    """Flat positions 0..count-1 as float32 arithmetic computes them: past 2^24, every other one."""
    return np.arange(count, dtype=np.float64).astype(np.float32).astype(np.int64)


def float32_index(request):
    """Computes flat element positions in float32, in its loads and its stores: past 2^24
    elements a tensor's odd positions are read from and written to their even neighbours."""
    def loaded(array):
        if array.size <= FLOAT32_EXACT:
            return array
        return array.reshape(-1)[_float32_positions(array.size)].reshape(array.shape)
    out = _reference(replace(request, inputs={n: loaded(a) for n, a in request.inputs.items()}))
    for name, array in out.items():
        if array.size > FLOAT32_EXACT:
            stored = np.zeros_like(array)
            stored.reshape(-1)[_float32_positions(array.size)] = array.reshape(-1)
            out[name] = stored
    return out


def half_accumulation(request):
    """Float16 cases computed and accumulated in float16 (half atomics); float32 ones right."""
    dtypes = {np.dtype(o.dtype) for o in request.outputs.values()}
    if dtypes != {np.dtype(np.float16)}:
        return _reference(request)
    with np.errstate(over="ignore", invalid="ignore"):
        return {name: round_to(array, np.float16) for name, array in run_in_dtype(request, np.float16).items()}
