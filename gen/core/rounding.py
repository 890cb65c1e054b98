"""Rounding float64 results to an output dtype: what the reference does once, and the other ways
`opcase power` plants or tolerates."""
from __future__ import annotations

import numpy as np


# How a float result may be rounded to the output dtype: the reference rounds to nearest once;
# the others are what `opcase power` plants (toward zero, a bug) or tolerates (twice, through
# float32, as a float32 kernel that converts its result to half does).
ROUNDINGS = ("nearest", "toward_zero", "via_float32")


def round_to(array: np.ndarray, dtype, rounding: str = "nearest") -> np.ndarray:
    """Round a float64 result to the output dtype: once to nearest (ties to even) by default."""
    dtype = np.dtype(dtype)
    array = np.asarray(array)
    if dtype.kind in "iu":
        return np.rint(array).astype(dtype)
    if rounding == "via_float32" and dtype.itemsize < 4:
        return array.astype(np.float32).astype(dtype)
    if rounding == "toward_zero" and array.dtype != dtype:
        return round_toward_zero(array, dtype)
    return array.astype(dtype, copy=False)


def round_toward_zero(a64: np.ndarray, dtype) -> np.ndarray:
    """a64 rounded to `dtype` by truncation (toward zero) instead of to nearest."""
    a64 = np.asarray(a64, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = a64.astype(dtype)                                   # past the largest value: inf
        away = np.abs(nearest.astype(np.float64)) > np.abs(a64)      # false for NaN and for exact inf
    return np.where(away, np.nextafter(nearest, np.zeros_like(nearest)), nearest).astype(dtype)
