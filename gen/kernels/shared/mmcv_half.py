"""The scalar arithmetic of mmcv's CUDA kernels, as numpy array operations.

mmcv's kernels compute in their template type ``scalar_t`` (``T``): ``float`` or PyTorch's
``at::Half`` (c10/util/Half-inl.h).  What that means for each result's bits:

at::Half
    Every operator between two Halfs converts both to float, computes in float and
    converts the result back to Half (``__float2half_rn``: round to nearest, ties to even).
    Computing a float32 result and rounding it to float16 equals the correctly rounded
    half result for + - * / (float32 has 24 >= 2*11 + 2 significant bits, so the double
    rounding is innocuous), which is what the h* functions below do.  Since every
    operator returns a Half, ``a * b + c`` is two roundings: nothing is fused.
    Mixed operands follow C++ overloads: Half op float gives a float (no rounding to
    half), Half op double a double, Half op int a Half (the int converted to Half first);
    a float or double assigned to a Half is rounded then (a double goes through float:
    see half_from_double).  ``h += x`` with a float x rounds x to Half first, then adds.

float
    Plain IEEE float32 arithmetic, which numpy's float32 operations are, except that
    nvcc contracts ``a * b + c`` into one fused multiply-add by default (--fmad=true):
    see fma32.

The kernels' results are rounded the same way on any GPU; only the order of operations
matters, which each kernel's emulation follows.
"""
from __future__ import annotations

import numpy as np

F16, F32, F64 = np.float16, np.float32, np.float64


def half(x) -> np.ndarray:
    """float -> at::Half: round each float32 value to float16 (nearest, ties to even)."""
    return np.asarray(x, F32).astype(F16)


def half_from_double(x) -> np.ndarray:
    """double -> at::Half: Half has only a float constructor, so the double is rounded to
    float first and then to half (two roundings, which can differ from one)."""
    return np.asarray(x, F64).astype(F32).astype(F16)


def _f32(x) -> np.ndarray:
    return np.asarray(x).astype(F32, copy=False)


def hadd(a, b) -> np.ndarray:
    """at::Half a + b."""
    return (_f32(a) + _f32(b)).astype(F16)


def hsub(a, b) -> np.ndarray:
    """at::Half a - b."""
    return (_f32(a) - _f32(b)).astype(F16)


def hmul(a, b) -> np.ndarray:
    """at::Half a * b."""
    return (_f32(a) * _f32(b)).astype(F16)


def hdiv(a, b) -> np.ndarray:
    """at::Half a / b."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (_f32(a) / _f32(b)).astype(F16)


# float64 bits below float32's 23 fraction bits: the round bit and 28 sticky bits.
_BELOW_F32 = np.uint64((1 << 29) - 1)
_F32_MIDPOINT = np.uint64(1 << 28)
_STICKY = np.uint64((1 << 28) - 1)
_F32_MIN_NORMAL = 2.0 ** -126


def fma32(a, b, c) -> np.ndarray:
    """fmaf(a, b, c): float32 a * b + c with a single rounding, as nvcc emits for ``a * b + c``.

    The float32 product is exact in float64, and the float64 sum p + c is rounded once
    more; rounding that to float32 is the correctly rounded result unless the float64 sum
    lies exactly halfway between two float32 values after having been rounded itself.
    Those rare elements are found and moved one float64 step towards the exact sum (its
    TwoSum error), so that the final rounding goes the way the exact value would.
    """
    a, b, c = (np.asarray(v, F32) for v in (a, b, c))
    if not (a.shape == b.shape == c.shape):
        if not np.broadcast_shapes(a.shape, b.shape, c.shape):   # scalars: numpy would return a numpy scalar
            return fma32(a.reshape(1), b, c).reshape(())
        # Views of one shape: the sum below is made in place, and the midpoint fix indexes all three.
        a, b, c = np.broadcast_arrays(a, b, c)
    elif not a.shape:
        return fma32(a.reshape(1), b.reshape(1), c.reshape(1)).reshape(())
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.multiply(a, b, dtype=F64)      # exact: 24 + 24 significant bits
        total += c
        # Every float32 midpoint, normal or subnormal, has its 28 lowest float64 bits clear;
        # sums with some of them set (nearly all) need no second look.
        bits = total.view(np.uint64)
        candidates = np.flatnonzero((bits & _STICKY) == 0)
        if candidates.size:
            _fix_midpoints(total, candidates, a, b, c)
        return total.astype(F32)


def _fix_midpoints(total: np.ndarray, candidates: np.ndarray, a, b, c) -> None:
    """Move each sum that lies on a float32 midpoint but was rounded one float64 step towards its exact value."""
    index = np.unravel_index(candidates, total.shape)
    sums = total[index]
    ties = _float32_midpoints(sums)
    if not ties.any():
        return
    index = tuple(axis[ties] for axis in index)
    sums = sums[ties]
    product = np.broadcast_to(a, total.shape)[index].astype(F64) * np.broadcast_to(b, total.shape)[index]
    addend = np.broadcast_to(c, total.shape)[index].astype(F64)
    addend_part = sums - product                                      # TwoSum: the exact error of the sum
    error = (product - (sums - addend_part)) + (addend - addend_part)
    total[index] = np.where(error > 0, np.nextafter(sums, np.inf),
                            np.where(error < 0, np.nextafter(sums, -np.inf), sums))


def _float32_midpoints(values: np.ndarray) -> np.ndarray:
    """Where each value of a 1-d float64 array lies exactly halfway between two adjacent float32 values."""
    normal = (values.view(np.uint64) & _BELOW_F32) == _F32_MIDPOINT
    ties = normal & np.isfinite(values) & (np.abs(values) >= _F32_MIN_NORMAL)
    tiny = np.abs(values) < _F32_MIN_NORMAL
    if tiny.any():
        # float32 subnormals are the multiples of 2**-149: a midpoint is an odd multiple of 2**-150.
        scaled = values[tiny] * 2.0 ** 150
        ties[tiny] = (scaled == np.floor(scaled)) & (np.abs(np.fmod(scaled, 2.0)) == 1.0)
    return ties


_F32_EXPONENT = np.uint32(0x7F800000)
# Exponent fields of 2**-14 and 2**16: below the first, half has the fixed spacing of its
# subnormals (2**-24); above the second, every value rounds to inf anyway.
_HALF_EXPONENT_MIN, _HALF_EXPONENT_MAX = np.uint32((127 - 14) << 23), np.uint32((127 + 16) << 23)
_SHIFTER = np.uint32((13 << 23) | 0x400000)   # x -> 1.5 * 2**(exponent of x + 13), bitwise
_HALF_OVERFLOW = F32(65536.0)                  # 65520 and above round to 65536 here: inf in half


def round_to_half(x) -> np.ndarray:
    """A float32 array's values rounded to float16 (nearest, ties to even), kept in float32.

    The same as ``x.astype(float16).astype(float32)`` (checked over all 2**32 float32 bit
    patterns, NaNs compared as NaN) at a third of its cost: adding and subtracting
    1.5 * 2**(e + 13), e the exponent of x clamped to half's range [-14, 16], rounds x
    in float32 arithmetic to a multiple of 2**(e - 10), the spacing of halves at x.
    """
    x = np.asarray(x, F32)
    shifter = x.view(np.uint32) & _F32_EXPONENT
    # np.clip's own arithmetic on integers, without its wrapper's checks (a third of this
    # function's time on the few elements of a small case's arrays).
    np.maximum(shifter, _HALF_EXPONENT_MIN, out=shifter)
    np.minimum(shifter, _HALF_EXPONENT_MAX, out=shifter)
    shifter += _SHIFTER
    shifter = shifter.view(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = x + shifter
        rounded -= shifter
    np.copysign(rounded, x, out=rounded)             # a half that rounds to 0 keeps its sign
    overflow = np.abs(rounded) >= _HALF_OVERFLOW
    if overflow.any():
        rounded[overflow] = np.copysign(F32(np.inf), rounded[overflow])
    return rounded


def canonical_nan(x: np.ndarray) -> np.ndarray:
    """x with every NaN replaced by the GPU's canonical NaN (0x7fffffff; 0x7fff in half): CUDA's
    float arithmetic returns that NaN whatever NaN went in, where numpy propagates payloads."""
    x = np.array(x, copy=True)
    nan = np.isnan(x)
    if nan.any():
        x[nan] = np.array(0x7fffffff, np.uint32).view(F32).astype(x.dtype)
    return x


class ScalarT:
    """The statements ``acc += a * b`` and ``acc += b`` of a kernel in its ``scalar_t``.

    Values are carried as float32 arrays whatever the dtype (a half value is exact in
    float32), so a kernel's emulation reads the same for both dtypes; ``result`` turns
    the float32 carrier into the tensor dtype at the end.
    """

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(F16), np.dtype(F32)):
            raise ValueError(f"mmcv's kernels compute in float16 or float32, not {self.dtype}")
        self.is_half = self.dtype == np.dtype(F16)

    def mac(self, acc, a, b) -> np.ndarray:
        """acc += a * b: one fused multiply-add in float (nvcc contracts it); in at::Half the
        product is rounded to half, then the sum (a Half times a float-held half value is a
        float, rounded to Half when added: the same two roundings)."""
        if self.is_half:
            with np.errstate(invalid="ignore", over="ignore"):     # nan and inf are data here
                return round_to_half(acc + round_to_half(np.multiply(a, b, dtype=F32)))
        return fma32(a, b, acc)

    def add(self, acc, b) -> np.ndarray:
        """acc += b."""
        with np.errstate(invalid="ignore", over="ignore"):
            total = np.add(acc, b, dtype=F32)
        return round_to_half(total) if self.is_half else total

    def result(self, carrier: np.ndarray) -> np.ndarray:
        """The float32 carrier as a tensor of this dtype, with the GPU's NaN."""
        return canonical_nan(np.asarray(carrier, F32).astype(self.dtype))
