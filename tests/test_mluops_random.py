"""opcase's emulation of mluop_gtest's random data against the real thing: libstdc++'s
engine and distributions compiled here, and the C library's logf."""
from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
import time

import numpy as np
import pytest

import needs
from harness.mluops import random_data as rd

# generateRandomData's draw, reduced to what it does with the engine and the distributions.
REFERENCE_CPP = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

static unsigned bits(float f) { uint32_t u; std::memcpy(&u, &f, sizeof u); return u; }

// usage: ref uniform|gaussian|uniform_floor SEED A B SKIP COUNT  (A, B: bounds or mu, sigma)
int main(int argc, char **argv) {
  if (argc != 7) return 2;
  const char *dist = argv[1];
  int seed = atoi(argv[2]);
  float a = strtof(argv[3], nullptr), b = strtof(argv[4], nullptr);
  long skip = atol(argv[5]), count = atol(argv[6]);
  std::default_random_engine re(seed);
  if (!strcmp(dist, "gaussian")) {
    std::normal_distribution<float> dis(a, b);
    for (long i = 0; i < skip; ++i) dis(re);
    for (long i = 0; i < count; ++i) printf("%08x\n", bits(dis(re)));
    return 0;
  }
  float upper = std::nexttoward(b, -std::numeric_limits<float>::infinity());
  std::uniform_real_distribution<float> dis(a, upper);
  for (long i = 0; i < skip; ++i) dis(re);
  for (long i = 0; i < count; ++i) {
    float v = dis(re);
    if (!strcmp(dist, "uniform_floor")) {
      int x = std::floor(v);
      printf("%d\n", x);
    } else {
      printf("%08x\n", bits(v));
    }
  }
  return 0;
}
"""

# The seed whose first engine output is m - 1, so that float(x - 1) rounds up to 2^31 and
# generate_canonical's "result == 1" fix-up runs.
FIXUP_SEED = (rd.MINSTD_MODULUS - 1) * pow(rd.MINSTD_MULTIPLIER, -1, rd.MINSTD_MODULUS) % rd.MINSTD_MODULUS
SEEDS = [23, 0, 1, -5, 233, 2**31 - 1, -2**31, FIXUP_SEED]
COUNT = 3001


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Run the compiled libstdc++ reference; returns a function giving its output lines."""
    compiler = shutil.which("g++")
    if compiler is None:
        needs.skip_without("g++", "to build the libstdc++ reference draw")
    build = tmp_path_factory.mktemp("mluops_random")
    source = build / "reference.cpp"
    source.write_text(REFERENCE_CPP)
    binary = build / "reference"
    # No contracted multiply-adds, as in mluop_gtest's x86-64 build (-mavx2 -mf16c, no -mfma).
    subprocess.run([compiler, "-O1", "-std=c++17", "-ffp-contract=off", str(source), "-o", str(binary)],
                   check=True, capture_output=True)

    def run(dist: str, seed: int, a: float, b: float, count: int = COUNT, skip: int = 0) -> list[str]:
        args = [str(binary), dist, str(seed), float(a).hex(), float(b).hex(), str(skip), str(count)]
        return subprocess.run(args, check=True, capture_output=True, text=True).stdout.split()
    return run


def _bits(lines: list[str]) -> np.ndarray:
    return np.array([int(v, 16) for v in lines], dtype=np.uint32)


def _f32(v) -> float:
    return float(np.float32(v))


@pytest.fixture(scope="module")
def libm_logf_mode():
    """Which of opcase's logf emulations this machine's C library matches bit for bit."""
    name = ctypes.util.find_library("m")
    if name is None:
        pytest.skip("no C math library to compare logf with")
    libm = ctypes.CDLL(name)
    libm.logf.restype, libm.logf.argtypes = ctypes.c_float, [ctypes.c_float]
    rng = np.random.default_rng(7)
    inputs = np.concatenate([rng.random(60_000, dtype=np.float32),
                             rng.integers(1, 0x7F800000, 60_000).astype(np.uint32).view(np.float32)])
    expected = np.array([libm.logf(float(v)) for v in inputs], dtype=np.float32).view(np.uint32)
    for mode, emulation in [(rd.LOGF_GLIBC, rd.glibc_logf), (rd.LOGF_CORRECTLY_ROUNDED, rd.correctly_rounded_logf)]:
        if np.array_equal(emulation(inputs).view(np.uint32), expected):
            return mode
    pytest.skip("this C library's logf is neither glibc 2.28-2.40's nor correctly rounded")


# --------------------------------------------------------------------------- the engine

def test_seeding_matches_libstdcxx():
    # linear_congruential_engine::seed: the int seed wraps to unsigned long, then mod m, 0 -> 1.
    assert rd.minstd_initial_state(23) == 23
    assert rd.minstd_initial_state(0) == 1
    assert rd.minstd_initial_state(2**31 - 1) == 1
    assert rd.minstd_initial_state(-1) == (2**64 - 1) % (2**31 - 1)


def test_engine_jump_ahead_matches_stepping():
    state, stepped = rd.minstd_initial_state(-77), []
    for _ in range(2000):
        state = state * rd.MINSTD_MULTIPLIER % rd.MINSTD_MODULUS
        stepped.append(state)
    assert rd.engine_outputs(-77, 0, 2000).tolist() == stepped
    assert rd.engine_outputs(-77, 1234, 500).tolist() == stepped[1234:1734]


def test_known_first_values_of_seed_23():
    # libstdc++ (g++ 12) output for uniform_real_distribution<float>(-1, nexttoward(1, -inf)), seed 23.
    recipe = rd.RandomRecipe(rd.UNIFORM, 23, lower=-1.0, upper=1.0)
    assert [f"{v:08x}" for v in rd.draw_floats(recipe, 5).view(np.uint32)] == \
        ["bf7fe868", "bf7302d1", "be77f788", "3dc88300", "befc441a"]


# --------------------------------------------------------------------------- against libstdc++

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("lower,upper", [(-1, 1), (0, 1), (1, 10), (0, 1000), (-3.5, 7.25), (1e-30, 1e-29),
                                         (-1e30, 1e30), (0.1, 0.3)])
def test_uniform_matches_libstdcxx(reference, seed, lower, upper):
    lower, upper = _f32(lower), _f32(upper)
    expected = _bits(reference("uniform", seed, lower, upper))
    got = rd.draw_floats(rd.RandomRecipe(rd.UNIFORM, seed, lower=lower, upper=upper), COUNT).view(np.uint32)
    np.testing.assert_array_equal(got, expected)


def test_uniform_constant_when_bounds_equal():
    got = rd.draw_floats(rd.RandomRecipe(rd.UNIFORM, 5, lower=2.5, upper=2.5), 10)
    assert (got == np.float32(2.5)).all()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mu,sigma", [(0, 1), (3, 0.5), (-2, 10), (0.1, 1e-3)])
def test_gaussian_matches_libstdcxx(reference, libm_logf_mode, seed, mu, sigma):
    mu, sigma = _f32(mu), _f32(sigma)
    expected = _bits(reference("gaussian", seed, mu, sigma))
    recipe = rd.RandomRecipe(rd.GAUSSIAN, seed, mu=mu, sigma=sigma)
    np.testing.assert_array_equal(rd.draw_floats(recipe, COUNT, logf=libm_logf_mode).view(np.uint32), expected)


@pytest.mark.parametrize("dist,a,b", [("uniform", -1, 1), ("gaussian", 0, 1)])
def test_draw_across_block_boundary(reference, libm_logf_mode, dist, a, b):
    # Engine outputs are computed in blocks of 2^20; read a window that straddles one.
    skip = (1 << 20) - 700
    expected = _bits(reference(dist, 23, a, b, count=1500, skip=skip))
    recipe = rd.RandomRecipe(dist, 23, lower=a, upper=b) if dist == rd.UNIFORM else \
        rd.RandomRecipe(dist, 23, mu=a, sigma=b)
    got = rd.draw_floats(recipe, skip + 1500, logf=libm_logf_mode)[skip:]
    np.testing.assert_array_equal(got.view(np.uint32), expected)


@pytest.mark.parametrize("lower,upper", [(0, 1), (0, 1000), (-50.5, 50.5)])
def test_int32_floors_like_mluop_gtest(reference, lower, upper):
    expected = np.array(reference("uniform_floor", 23, lower, upper), dtype=np.int32)
    recipe = rd.RandomRecipe(rd.UNIFORM, 23, lower=_f32(lower), upper=_f32(upper))
    np.testing.assert_array_equal(rd.draw(recipe, np.int32, COUNT), expected)


def test_logf_emulation_matches_libm(libm_logf_mode):
    # The fixture already compared 120k inputs; here the special values.
    special = np.array([1.0, 0.0, -0.0, np.inf, -1.0, np.nan, 1e-45, 1e-40, 2.0**-126, 3.4e38], np.float32)
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.logf.restype, libm.logf.argtypes = ctypes.c_float, [ctypes.c_float]
    expected = np.array([libm.logf(float(v)) for v in special], dtype=np.float32)
    got = rd._LOGF[libm_logf_mode](special)
    same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
    assert same.all(), (got, expected)


# --------------------------------------------------------------------------- chunking and dtypes

@pytest.mark.parametrize("dist", [rd.UNIFORM, rd.GAUSSIAN])
def test_fill_in_chunks_equals_one_draw(dist):
    recipe = rd.RandomRecipe(dist, 99, lower=-2.0, upper=3.0, mu=1.0, sigma=2.0)
    whole = rd.draw_floats(recipe, 10_001)
    out = np.empty((73, 137), np.float32)
    rd.fill(recipe, out, chunk=1000)
    np.testing.assert_array_equal(out.reshape(-1).view(np.uint32), whole.view(np.uint32))


def test_half_ties_round_away_from_zero():
    one = np.float32(1.0)
    half_ulp = np.float32(2.0**-11)                  # halfway between 1 and the next half
    values = np.array([one + half_ulp, -(one + half_ulp), one + 3 * half_ulp, 2.0**-25, -(2.0**-25),
                       one + half_ulp * np.float32(1.5), 65504.0, 65519.0, 65520.0, np.inf, np.nan, -0.0],
                      dtype=np.float32)
    got = rd.float32_to_float16_ties_away(values)
    expected = np.array([1 + 2.0**-10, -(1 + 2.0**-10), 1 + 2 * 2.0**-10, 2.0**-24, -(2.0**-24),
                         1 + 2.0**-10, 65504.0, 65504.0, np.inf, np.inf, np.nan, -0.0], dtype=np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


def test_half_conversion_equals_numpy_off_ties():
    values = rd.draw_floats(rd.RandomRecipe(rd.UNIFORM, 3, lower=-100.0, upper=100.0), 100_000)
    halves = rd.float32_to_float16_ties_away(values)
    differs = halves.view(np.uint16) != values.astype(np.float16).view(np.uint16)
    # Only exact ties differ: those have 13 trailing zero bits below the half's last bit but one.
    assert ((values[differs].view(np.uint32) & 0x1FFF) == 0x1000).all()


def test_unsupported_dtype_is_refused():
    with pytest.raises(rd.RandomDataError, match="bool"):
        rd.check_dtype(np.dtype(np.bool_))
    with pytest.raises(rd.RandomDataError, match="int8"):
        rd.check_dtype(np.dtype(np.int8))         # quantized by mluop_gtest unless convert_dtype
    rd.check_dtype(np.dtype(np.int8), convert_dtype=True)


@pytest.mark.slow
def test_256m_uniform_draw_is_fast():
    out = np.empty(1 << 28, np.float32)
    # CPU seconds, not wall time: on a shared machine (or beside the other test processes) the wall
    # clock counts other work too; an element-by-element draw would take hours of CPU either way.
    start = time.process_time()
    rd.fill(rd.RandomRecipe(rd.UNIFORM, 23, lower=-1.0, upper=1.0), out)
    assert time.process_time() - start < 60
    np.testing.assert_array_equal(out[:5].view(np.uint32),
                                  np.array([0xBF7FE868, 0xBF7302D1, 0xBE77F788, 0x3DC88300, 0xBEFC441A], np.uint32))
