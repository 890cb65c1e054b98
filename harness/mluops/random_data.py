"""mluop_gtest's random tensor data, reproduced bit for bit in numpy.

A case's ``random_data`` recipe is drawn by mluop_gtest's ``generateRandomData`` (tools.h) into a
float buffer, which ``castDataIn`` then casts to the tensor's dtype.  The draw is libstdc++'s:

* engine: ``std::default_random_engine`` = ``minstd_rand0``, ``x <- 16807 * x mod (2^31 - 1)``,
  constructed from the ``int`` seed (23 when the recipe has none);
* UNIFORM: ``std::uniform_real_distribution<float>(lower, nexttoward(upper, -inf))``, or the
  constant ``lower`` when ``lower == upper``;
* GAUSSIAN: ``std::normal_distribution<float>(mu, sigma)`` (Marsaglia's polar method);
* integer dtypes are floored; half tensors are drawn in float, then cast.

Each function's docstring names the libstdc++ / mluop_gtest code it mirrors.  The emulation
assumes mluop_gtest's x86-64 build (``-mavx2 -mf16c``, no FMA, so no contracted multiply-adds;
an aarch64 build contracts them and draws differently) and a glibc whose ``logf`` is the
table-driven one of glibc 2.28 onwards, or, on request, a correctly rounded ``logf`` (newer
glibc's CORE-MATH one).  The engine is jumped ahead (``x_n = x_0 * a^n mod m``) so that values are computed in
blocks without a Python loop per element.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator

import numpy as np

MINSTD_MULTIPLIER = 16807
MINSTD_MODULUS = 2**31 - 1
DEFAULT_SEED = 23                     # generateRandomData: ``int seed = 23`` unless the recipe has one

UNIFORM = "uniform"
GAUSSIAN = "gaussian"

LOGF_GLIBC = "glibc"                  # glibc >= 2.28: Arm's table-driven logf (< 1 ulp, not CR)
LOGF_CORRECTLY_ROUNDED = "correctly_rounded"

# Engine outputs computed per block: a^1 .. a^BLOCK mod m are tabulated once.
_BLOCK = 1 << 20
# Values produced per chunk when a tensor is filled piece by piece (even: see _NormalDraw).
DEFAULT_CHUNK = 1 << 22

_F32_TWO_POW_M31 = np.float32(2.0**-31)
_F32_BELOW_ONE = np.float32(np.nextafter(np.float32(1), np.float32(0)))


class RandomDataError(ValueError):
    """A recipe (or a dtype) whose values opcase cannot reproduce."""


@dataclass(frozen=True)
class RandomRecipe:
    """What mluop_gtest's generateRandomData uses of a tensor's ``random_data``.

    The bounds and moments are the float32 values the C++ code computes with (``(float)`` of
    the file's float or double field).
    """
    distribution: str                 # UNIFORM or GAUSSIAN
    seed: int = DEFAULT_SEED
    lower: float = -1.0               # UNIFORM
    upper: float = 1.0
    mu: float = 0.0                   # GAUSSIAN
    sigma: float = 1.0
    convert_dtype: bool = False       # floor before casting to int8 / int16 (else they are quantized)

    def __post_init__(self):
        if self.distribution not in (UNIFORM, GAUSSIAN):
            raise RandomDataError(f"distribution {self.distribution!r}: mluop_gtest draws only "
                                  f"{UNIFORM} and {GAUSSIAN}")
        if not -2**31 <= self.seed < 2**31:
            raise RandomDataError(f"seed {self.seed} does not fit the recipe's int32")


# --------------------------------------------------------------------------- the engine

def minstd_initial_state(seed: int) -> int:
    """The engine state after ``std::minstd_rand0 engine(seed)`` with an ``int`` seed.

    The constructor takes ``result_type`` = ``uint_fast32_t`` (64-bit on LP64 Linux), so a
    negative seed wraps modulo 2^64 first; libstdc++'s ``seed()`` then reduces modulo m and
    maps 0 to 1 (the increment is 0, so 0 would be a fixed point).
    """
    state = (seed % 2**64) % MINSTD_MODULUS
    return state if state != 0 else 1


def _multiplier_powers(count: int) -> np.ndarray:
    """a^1 .. a^count mod m as uint64, by doubling the filled prefix."""
    powers = np.empty(count, np.uint64)
    powers[0] = MINSTD_MULTIPLIER
    filled = 1
    while filled < count:
        n = min(filled, count - filled)
        jump = np.uint64(pow(MINSTD_MULTIPLIER, filled, MINSTD_MODULUS))
        powers[filled:filled + n] = (powers[:n] * jump) % np.uint64(MINSTD_MODULUS)
        filled += n
    return powers


@functools.cache
def _powers() -> np.ndarray:
    return _multiplier_powers(_BLOCK)


def engine_outputs(seed: int, start: int, count: int) -> np.ndarray:
    """Outputs ``start .. start+count-1`` (0-based call numbers) of ``minstd_rand0(seed)``, uint64.

    Call n returns ``x0 * a^(n+1) mod m``; both factors are below 2^31, so each product fits
    uint64 exactly.
    """
    x0 = minstd_initial_state(seed)
    powers = _powers()
    out = np.empty(count, np.uint64)
    for offset in range(0, count, _BLOCK):
        n = min(_BLOCK, count - offset)
        base = np.uint64(x0 * pow(MINSTD_MULTIPLIER, start + offset, MINSTD_MODULUS) % MINSTD_MODULUS)
        np.remainder(powers[:n] * base, np.uint64(MINSTD_MODULUS), out=out[offset:offset + n])
    return out


def canonical_floats(outputs: np.ndarray) -> np.ndarray:
    """``std::generate_canonical<float, 24>`` of each engine output (one call per float).

    libstdc++: r = max - min + 1 = 2^31 - 2, log2r = 30, so k = max(1, (24 + 30 - 1) / 30) = 1
    call; sum = float(x - min) rounds to nearest; tmp = float(1 * r) = 2^31; sum / tmp is then
    exact; a result >= 1 (x - 1 rounded up to 2^31) becomes nextafter(1.0f, 0.0f).
    """
    numerators = (outputs.view(np.int64) - 1).astype(np.float32)
    canon = numerators * _F32_TWO_POW_M31
    canon[canon >= np.float32(1)] = _F32_BELOW_ONE
    return canon


# --------------------------------------------------------------------------- distributions

def uniform_floats(recipe: RandomRecipe, start: int, count: int) -> np.ndarray:
    """Values ``start .. start+count-1`` of generateRandomData's UNIFORM float buffer."""
    lower, upper = np.float32(recipe.lower), np.float32(recipe.upper)
    if lower == upper:
        return np.full(count, lower, np.float32)
    # uniform_real_distribution draws from [a, b); mluop_gtest wants upper excluded as well.
    upper = np.nextafter(upper, np.float32(-np.inf))
    span = np.float32(upper - lower)                  # __p.b() - __p.a(), in float
    canon = canonical_floats(engine_outputs(recipe.seed, start, count))
    return canon * span + lower                       # (__aurng() * span) + __p.a(), two roundings


_LOGF_OFF = 0x3F330000
# (1/c, log c) for the 16 subintervals of [OFF, 2*OFF], then ln 2 and the log1p polynomial:
# the constants of glibc's e_logf_data.c (from 2.28).
_LOGF_TABLE = [
    ("0x1.661ec79f8f3bep+0", "-0x1.57bf7808caadep-2"), ("0x1.571ed4aaf883dp+0", "-0x1.2bef0a7c06ddbp-2"),
    ("0x1.49539f0f010bp+0", "-0x1.01eae7f513a67p-2"), ("0x1.3c995b0b80385p+0", "-0x1.b31d8a68224e9p-3"),
    ("0x1.30d190c8864a5p+0", "-0x1.6574f0ac07758p-3"), ("0x1.25e227b0b8eap+0", "-0x1.1aa2bc79c81p-3"),
    ("0x1.1bb4a4a1a343fp+0", "-0x1.a4e76ce8c0e5ep-4"), ("0x1.12358f08ae5bap+0", "-0x1.1973c5a611cccp-4"),
    ("0x1.0953f419900a7p+0", "-0x1.252f438e10c1ep-5"), ("0x1p+0", "0x0p+0"),
    ("0x1.e608cfd9a47acp-1", "0x1.aa5aa5df25984p-5"), ("0x1.ca4b31f026aap-1", "0x1.c5e53aa362eb4p-4"),
    ("0x1.b2036576afce6p-1", "0x1.526e57720db08p-3"), ("0x1.9c2d163a1aa2dp-1", "0x1.bc2860d22477p-3"),
    ("0x1.886e6037841edp-1", "0x1.1058bc8a07ee1p-2"), ("0x1.767dcf5534862p-1", "0x1.4043057b6ee09p-2"),
]
_LOGF_INVC = np.array([float.fromhex(invc) for invc, _ in _LOGF_TABLE])
_LOGF_LOGC = np.array([float.fromhex(logc) for _, logc in _LOGF_TABLE])
_LOGF_LN2 = float.fromhex("0x1.62e42fefa39efp-1")
_LOGF_POLY = [float.fromhex(c) for c in ("-0x1.00ea348b88334p-2", "0x1.5575b0be00b6ap-2",
                                         "-0x1.ffffef20a4123p-2")]


def glibc_logf(x: np.ndarray) -> np.ndarray:
    """glibc's table-driven ``logf`` (2.28 on), in float64 numpy steps.

    x = 2^k z with z in [OFF, 2 OFF); log x = k ln2 + log c + log1p(z/c - 1), the last by a
    degree-4 polynomial, each operation rounded in double exactly as the C code does.
    Non-positive, infinite and NaN inputs follow C's logf (-inf, nan, inf, nan).  This is the
    generic (non-FMA) code; x86-64 glibc runs an FMA build of it on FMA machines, which rounds
    differently only when a result lies within about 2^-50 of a float rounding boundary.
    """
    x = np.asarray(x, np.float32)
    ix = x.view(np.uint32).astype(np.uint32, copy=True)
    special = (ix - np.uint32(0x00800000)) >= np.uint32(0x7F800000 - 0x00800000)
    subnormal = special & (ix > 0) & (ix < 0x00800000)
    # Subnormals are scaled into the normal range first: x * 2^23, exponent lowered by 23.
    ix[subnormal] = (x[subnormal] * np.float32(2.0**23)).view(np.uint32) - np.uint32(23 << 23)
    tmp = ix - np.uint32(_LOGF_OFF)
    i = (tmp >> np.uint32(19)) % np.uint32(16)
    k = tmp.view(np.int32) >> np.int32(23)
    iz = ix - (tmp & np.uint32(0xFF800000))
    z = iz.view(np.float32).astype(np.float64)
    r = z * _LOGF_INVC[i] - 1.0
    y0 = _LOGF_LOGC[i] + k.astype(np.float64) * _LOGF_LN2
    r2 = r * r
    y = _LOGF_POLY[1] * r + _LOGF_POLY[2]
    y = _LOGF_POLY[0] * r2 + y
    y = y * r2 + (y0 + r)
    result = y.astype(np.float32)
    unusual = special & ~subnormal
    if unusual.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            result[unusual] = np.log(x[unusual])
    return result


def correctly_rounded_logf(x: np.ndarray) -> np.ndarray:
    """logf rounded correctly (newer glibc's CORE-MATH logf), via a float64 log."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


_LOGF = {LOGF_GLIBC: glibc_logf, LOGF_CORRECTLY_ROUNDED: correctly_rounded_logf}


class _NormalDraw:
    """``std::normal_distribution<float>`` over one engine, consumed pair by pair.

    Each polar attempt takes two canonical floats: x = 2u - 1 and y = 2v - 1 (the C++ subtracts
    the double 1.0, which is exact, then rounds to float), r2 = x*x + y*y in float; the pair is
    rejected when r2 > 1 or r2 == 0.  An accepted pair gives y*mult first and x*mult next (the
    saved value), mult = sqrt(-2 * log(r2) / r2) in float.  Attempt j uses engine calls 2j and
    2j+1, so candidates are evaluated in bulk and the accepted ones picked out in order.
    """

    def __init__(self, recipe: RandomRecipe, logf: str):
        self._recipe = recipe
        self._logf = _LOGF[logf]
        self._next_attempt = 0

    def pairs(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``count`` accepted pairs as (first, second) outputs, before mu and sigma."""
        xs, ys, r2s = [], [], []
        found = 0
        while found < count:
            wanted = count - found
            attempts = int(wanted * 1.3) + 64        # acceptance is pi/4, about 0.785
            canon = canonical_floats(engine_outputs(self._recipe.seed, 2 * self._next_attempt,
                                                    2 * attempts))
            x = canon[0::2] * np.float32(2) - np.float32(1)
            y = canon[1::2] * np.float32(2) - np.float32(1)
            r2 = x * x + y * y
            accepted = np.flatnonzero(~((r2 > np.float32(1)) | (r2 == np.float32(0))))[:wanted]
            xs.append(x[accepted])
            ys.append(y[accepted])
            r2s.append(r2[accepted])
            found += accepted.size
            self._next_attempt += int(accepted[-1]) + 1 if accepted.size == wanted else attempts
        x, y, r2 = np.concatenate(xs), np.concatenate(ys), np.concatenate(r2s)
        mult = np.sqrt(np.float32(-2) * self._logf(r2) / r2)
        return y * mult, x * mult

    def floats(self, count: int) -> np.ndarray:
        """The next ``count`` values (count even unless it is the last call), with mu and sigma."""
        first, second = self.pairs((count + 1) // 2)
        values = np.empty(2 * first.size, np.float32)
        values[0::2] = first
        values[1::2] = second
        return values[:count] * np.float32(self._recipe.sigma) + np.float32(self._recipe.mu)


def iter_floats(recipe: RandomRecipe, count: int, chunk: int = DEFAULT_CHUNK,
                logf: str = LOGF_GLIBC) -> Iterator[np.ndarray]:
    """generateRandomData's float buffer for ``count`` elements, ``chunk`` values at a time."""
    if chunk <= 0 or chunk % 2:
        raise ValueError(f"chunk must be a positive even number, not {chunk}")
    normal = _NormalDraw(recipe, logf) if recipe.distribution == GAUSSIAN else None
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        yield normal.floats(n) if normal else uniform_floats(recipe, start, n)


def draw_floats(recipe: RandomRecipe, count: int, logf: str = LOGF_GLIBC) -> np.ndarray:
    """The first ``count`` values of generateRandomData's float buffer."""
    if count == 0:
        return np.empty(0, np.float32)
    return next(iter_floats(recipe, count, chunk=count + count % 2, logf=logf))


# --------------------------------------------------------------------------- dtype conversion

def float32_to_float16_ties_away(values: np.ndarray) -> np.ndarray:
    """float -> half rounding to nearest, ties away from zero.

    mluop_gtest casts float inputs to half with ``cnrtCastDataType_V2(..., cnrtRounding_rm)``,
    CNRT's "round to math" mode: nearest, a tie going away from zero.  numpy rounds ties to
    even, so exact ties that numpy rounded toward zero are moved one half-ulp outward.
    """
    values = np.ascontiguousarray(values, np.float32)
    flat = values.reshape(-1)
    with np.errstate(over="ignore"):             # beyond 65520 a half is inf, as intended
        result = flat.astype(np.float16)
        inexact = np.flatnonzero(np.isfinite(flat) & (result.astype(np.float32) != flat))
        x = flat[inexact].astype(np.float64)
        nearest_even = result[inexact]
        outward = np.nextafter(nearest_even, np.where(x < 0, -np.inf, np.inf).astype(np.float16))
    # A tie that went to the inner neighbour: both neighbours are halves, so their midpoint is
    # exact in float64.
    midpoint = (nearest_even.astype(np.float64) + outward.astype(np.float64)) / 2
    went_inward = (midpoint == x) & (np.abs(nearest_even.astype(np.float64)) < np.abs(x))
    result[inexact[went_inward]] = outward[went_inward]
    return result.reshape(values.shape)


_FLOORED_INTEGER_DTYPES = {np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)}


def cast_floats(values: np.ndarray, dtype: np.dtype, convert_dtype: bool = False) -> np.ndarray:
    """generateRandomData's "reset data by dtype" step followed by castDataIn's cast.

    Float stays float; half rounds ties away (see float32_to_float16_ties_away); int32, int64
    and uint8 are floored (``int x = std::floor(v)``) and then converted exactly; int8 / int16
    are floored only with ``convert_dtype`` (otherwise mluop_gtest quantizes them).
    """
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return values
    if dtype == np.float16:
        return float32_to_float16_ties_away(values)
    floored_small = dtype in (np.dtype(np.int8), np.dtype(np.int16)) and convert_dtype
    if dtype in _FLOORED_INTEGER_DTYPES or floored_small:
        floored = np.floor(values)
        info = np.iinfo(dtype)
        if floored.size and (not np.isfinite(floored).all() or floored.min() < info.min
                             or floored.max() > info.max):
            raise RandomDataError(f"random values floored to {dtype.name} leave its range "
                                  f"[{info.min}, {info.max}] (undefined behaviour in mluop_gtest)")
        return floored.astype(dtype)
    raise RandomDataError(f"mluop_gtest's random data for dtype {dtype.name} is not reproduced by opcase "
                          f"(float32, float16, int32, int64, uint8, and int8/int16 with convert_dtype are)")


def check_dtype(dtype: np.dtype, convert_dtype: bool = False) -> None:
    """Raise RandomDataError when random data of ``dtype`` cannot be reproduced."""
    cast_floats(np.zeros(0, np.float32), dtype, convert_dtype)


def draw(recipe: RandomRecipe, dtype: np.dtype, count: int, logf: str = LOGF_GLIBC) -> np.ndarray:
    """The first ``count`` elements of a tensor of ``dtype`` made from ``recipe``."""
    return cast_floats(draw_floats(recipe, count, logf), dtype, recipe.convert_dtype)


def fill(recipe: RandomRecipe, out: np.ndarray, chunk: int = DEFAULT_CHUNK, logf: str = LOGF_GLIBC) -> None:
    """Fill ``out`` (any shape, C order; a memmap works) chunk by chunk, bounding peak memory."""
    if not out.flags.c_contiguous:
        raise ValueError("fill needs a C-contiguous output array")
    flat = out.reshape(-1)
    start = 0
    for values in iter_floats(recipe, flat.size, chunk, logf):
        flat[start:start + values.size] = cast_floats(values, out.dtype, recipe.convert_dtype)
        start += values.size
