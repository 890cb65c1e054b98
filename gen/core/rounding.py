"""Rounding float64 results to an output dtype: what the reference does once, and the other ways
`opcase power` plants or tolerates."""
from __future__ import annotations

import numpy as np


# How a float result may be rounded to the output dtype: the reference rounds to nearest once;
# the others are what `opcase power` plants (toward zero, a bug) or tolerates (twice, through
# float32, as a float32 kernel that converts its result to half does), and what `opcase explain`
# compares with (ties away from zero, as C's round() and some conversion instructions do).
ROUNDINGS = ("nearest", "toward_zero", "via_float32", "half_away_from_zero")


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
    if rounding == "half_away_from_zero" and array.dtype.itemsize > dtype.itemsize:
        return round_half_away_from_zero(array, dtype)
    with np.errstate(over="ignore"):      # past the largest finite value: ±inf, IEEE's rounding to nearest
        return array.astype(dtype, copy=False)


def round_toward_zero(a64: np.ndarray, dtype) -> np.ndarray:
    """a64 rounded to `dtype` by truncation (toward zero) instead of to nearest."""
    a64 = np.asarray(a64, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = a64.astype(dtype)                                   # past the largest value: inf
        away = np.abs(nearest.astype(np.float64)) > np.abs(a64)      # false for NaN and for exact inf
    return np.where(away, np.nextafter(nearest, np.zeros_like(nearest)), nearest).astype(dtype)


def round_half_away_from_zero(a64: np.ndarray, dtype) -> np.ndarray:
    """a64 rounded to `dtype` to nearest, ties away from zero (not to even).

    The two candidates are the truncation and the next value away from zero; their midpoint is
    exact in float64 for float16 and float32 targets, so comparing with it decides exactly."""
    a64 = np.asarray(a64, dtype=np.float64)
    toward = round_toward_zero(a64, dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = a64.astype(dtype)
        away = np.nextafter(toward, np.where(a64 < 0, -np.inf, np.inf).astype(dtype))
        midpoint = (toward.astype(np.float64) + away.astype(np.float64)) / 2
        result = np.where(np.abs(a64) >= np.abs(midpoint), away, toward)
    # Past the largest value and NaN: as the nearest rounding does.
    return np.where(np.isfinite(nearest) & np.isfinite(result), result, nearest).astype(dtype)
