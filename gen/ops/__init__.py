"""Float64 reference implementations, one small module per operator.

Each reference is ``fn(inputs, params, compute_dtype=np.float64) -> {output: array}``:
vectorized numpy, arithmetic in ``compute_dtype`` (float64 for goldens; the ``lowp``
backend passes float32 to model typical hardware), layouts as the design docs state.
"""
import numpy as np


def assemble(blocks, shapes: dict, dtype) -> dict:
    """Whole outputs from a reference's pieces.

    A streaming reference (``<fn>_blocks``) yields ``(output, index, block)``: ``index`` a
    tuple of leading integers and at most one slice, so that each piece is a contiguous run of
    the C-ordered output, and each output's pieces come in order.  What no piece covers is 0
    (empty tensors yield nothing).  The generator writes such pieces straight to disk instead.
    """
    outputs = {name: np.zeros(shape, dtype=dtype) for name, shape in shapes.items()}
    for name, index, block in blocks:
        outputs[name][index] = block
    return outputs


def exact_dtype(source: np.ndarray, compute_dtype) -> np.dtype:
    """For kernels that only move values: a dtype that holds every value of ``source`` exactly
    and is no wider than needed (the source's own, unless ``compute_dtype`` is narrower)."""
    source_dtype, compute_dtype = np.dtype(source.dtype), np.dtype(compute_dtype)
    return source_dtype if np.can_cast(source_dtype, compute_dtype, "safe") else compute_dtype
