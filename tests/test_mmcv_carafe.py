"""gen.kernels.carafe.mmcv_emulation (and the scalar arithmetic of gen.kernels.shared.mmcv_half) against mmcv's own CUDA outputs, bit for bit,
and against a literal, one-thread-at-a-time transcription of mmcv's kernels where that data does not reach."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from conftest import generate, mmcv_cuda_case, mmcv_cuda_case_ids, raw_bits, run_cli
from gen.kernels.carafe import mmcv_emulation as carafe
from gen.kernels.shared import mmcv_half as half

KERNELS = ("carafe_forward", "carafe_backward")


def conformance_cases(kernel):
    """(kernel, case id) for every captured case of the kernel."""
    return [(kernel, case) for case in mmcv_cuda_case_ids(kernel)]


def assert_same_bits(actual: dict, expected: dict, label: str):
    assert set(actual) >= set(expected), label
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == want.dtype and got.shape == want.shape, f"{label} {name}"
        differ = np.flatnonzero(raw_bits(got) != raw_bits(want))
        assert differ.size == 0, (f"{label} {name}: {differ.size} of {want.size} elements differ, first at flat "
                                  f"{differ[0]}: {got.flat[differ[0]]!r} != {want.flat[differ[0]]!r}")


@pytest.fixture(params=["numpy", "compiled"])
def emulation_path(request, monkeypatch):
    """The emulation's numpy code (OPCASE_NO_CC=1), or its compiled loop (gen.kernels.carafe.compiled_mmcv,
    skipped without a C compiler): each is held to mmcv's bits on its own."""
    if request.param == "numpy":
        monkeypatch.setenv("OPCASE_NO_CC", "1")
        return request.param
    request.getfixturevalue("fresh_native_cache")
    from gen.kernels.carafe import compiled_mmcv
    assert compiled_mmcv._function("carafe_forward_mmcv", compiled_mmcv._FORWARD_ARGTYPES) is not None
    return request.param


@pytest.mark.parametrize("kernel, case", conformance_cases("carafe_forward") + conformance_cases("carafe_backward"))
def test_bit_exact_with_mmcv_cuda(kernel, case, emulation_path):
    meta, inputs, outputs = mmcv_cuda_case(kernel, case)
    assert meta["op"] == kernel
    assert_same_bits(getattr(carafe, kernel)(inputs, meta["params"]), outputs, meta["name"])


def test_conformance_data_covers_both_dtypes():
    for kernel in KERNELS:
        dtypes = {mmcv_cuda_case(kernel, case)[1]["input"].dtype.name for _, case in conformance_cases(kernel)}
        assert dtypes == {"float16", "float32"}, kernel


@pytest.mark.parametrize("block_elements", [1, 50, 700])
@pytest.mark.parametrize("kernel, case", [("carafe_forward", "45"), ("carafe_backward", "25"),
                                          ("carafe_backward", "38")])
def test_blocks_smaller_than_the_map_give_the_same_bits(monkeypatch, kernel, case, block_elements):
    """The conformance maps fit one block: cut them into many, down to one pixel a block (numpy's blocks: the
    compiled loop has none)."""
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    meta, inputs, outputs = mmcv_cuda_case(kernel, case)
    monkeypatch.setattr(carafe, "_BLOCK_ELEMENTS", block_elements)
    assert_same_bits(getattr(carafe, kernel)(inputs, meta["params"]), outputs, meta["name"])


# ----------------------------------------------------------------------------- scalar arithmetic

def exact_fmaf(a, b, c) -> np.float32:
    """fmaf by rational arithmetic: the float32 nearest a*b + c, ties to even."""
    a, b, c = (np.float32(v) for v in (a, b, c))
    if not all(np.isfinite([a, b, c])):
        with np.errstate(invalid="ignore"):
            return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    with np.errstate(over="ignore"):
        guess = np.float32(float(exact))
    if np.isinf(guess):                    # beyond float32's range (1e30 * 1e30 below)
        return guess
    candidates = [guess, np.nextafter(guess, np.float32(np.inf)), np.nextafter(guess, np.float32(-np.inf))]
    return min(candidates, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.array(v).view(np.uint32)) & 1))


def test_fma32_rounds_once_where_float64_would_round_twice():
    a, tiny = np.float32(1 + 2 ** -12), np.float32(2 ** -70)
    # a*a = 1 + 2^-11 + 2^-24 is a float32 midpoint; the exact sum with 2^-70 lies just above it.
    assert np.float32(float(a) * float(a) + float(tiny)) == np.float32(1 + 2 ** -11)    # the double rounding
    assert half.fma32(a, a, tiny) == np.float32(1 + 2 ** -11 + 2 ** -23)
    assert half.fma32(a, a, -tiny) == np.float32(1 + 2 ** -11)
    assert half.fma32(a, a, np.float32(0)) == np.float32(1 + 2 ** -11)                  # an exact tie: to even


def test_fma32_matches_exact_arithmetic():
    rng = np.random.default_rng(0)
    a = rng.normal(size=3000).astype(np.float32)
    b = rng.normal(size=3000).astype(np.float32)
    # addends that cancel most of the product, tiny ones, and float32 midpoints hit head-on
    product = a.astype(np.float64) * b
    c = np.concatenate([(-product[:1000] * (1 + rng.normal(size=1000) * 1e-6)).astype(np.float32),
                        (rng.normal(size=1000) * 1e-30).astype(np.float32),
                        rng.normal(size=1000).astype(np.float32)])
    a = np.concatenate([a, np.float32([3 * 2 ** -75, 2 ** -100, np.inf, np.nan, 1e30])])
    b = np.concatenate([b, np.float32([2 ** -75, 2 ** -40, 0, 1, 1e30])])
    c = np.concatenate([c, np.float32([0, -2 ** -149, 1, 1, -3e38])])
    got = half.fma32(a, b, c)
    want = np.array([exact_fmaf(*abc) for abc in zip(a, b, c)], np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_half_operations_are_correctly_rounded_half_arithmetic():
    """numpy's own float16 ufuncs compute in float and round once: at::Half's definition."""
    rng = np.random.default_rng(1)
    a = (rng.normal(size=20000) * 10.0 ** rng.integers(-7, 4, 20000)).astype(np.float16)
    b = (rng.normal(size=20000) * 10.0 ** rng.integers(-7, 4, 20000)).astype(np.float16)
    with np.errstate(all="ignore"):
        for ours, native in ((half.hadd, np.add), (half.hsub, np.subtract), (half.hmul, np.multiply),
                             (half.hdiv, np.divide)):
            assert np.array_equal(raw_bits(ours(a, b)), raw_bits(native(a, b))), ours.__name__


def test_round_to_half_is_numpys_conversion():
    """Near every half value and every midpoint between two (where rounding decides), across half's
    subnormals, its overflow threshold and beyond, and at random float32 bit patterns (the whole
    2**32 were checked once, offline)."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    halves = halves[np.isfinite(halves)]
    ordered = np.sort(halves)
    midpoints = (ordered[:-1].astype(np.float64) + ordered[1:]) / 2
    centres = np.concatenate([halves, midpoints.astype(np.float32), np.float32([65520, -65520, 65536, 1e30])])
    near = (centres.view(np.uint32)[:, None].astype(np.int64) + np.arange(-2, 3)).astype(np.uint32).ravel()
    scattered = np.random.default_rng(2).integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([near, scattered]).view(np.float32)
    with np.errstate(all="ignore"):
        ours, numpys = half.round_to_half(x), x.astype(np.float16).astype(np.float32)
    same = (raw_bits(ours) == raw_bits(numpys)) | (np.isnan(ours) & np.isnan(numpys))
    assert same.all(), x[~same][:5]


def test_double_to_half_goes_through_float():
    value = 1 + 2 ** -11 + 2 ** -40       # above the half midpoint, but rounded to float lands on it
    assert half.half_from_double(value) == np.float16(1)
    assert np.float16(value) == np.float16(1 + 2 ** -10)


def test_canonical_nan():
    x = np.array([np.nan, -np.nan, 1.0], np.float32)
    x[0] = np.uint32(0x7fc12345).view(np.float32)
    assert list(raw_bits(half.canonical_nan(x))) == [0x7fffffff, 0x7fffffff, 0x3f800000]
    assert raw_bits(half.canonical_nan(x.astype(np.float16)))[0] == 0x7fff


# ----------------------------------------------------------------------------- literal transcription of the kernels

class Thread:
    """One CUDA thread's scalar_t arithmetic, a value at a time (independent of gen.kernels.shared.mmcv_half.ScalarT)."""

    def __init__(self, dtype):
        self.half = np.dtype(dtype) == np.float16

    def zero(self):
        return np.float16(0) if self.half else np.float32(0)

    def mac(self, acc, a, b):
        """acc += a * b, with a float shared_mask operand or two scalar_t operands: either way
        the Half product (a float) becomes a Half before the Half add; float is fused."""
        with np.errstate(invalid="ignore", over="ignore"):
            if self.half:
                return acc + np.float16(np.float32(a) * np.float32(b))
            return exact_fmaf(a, b, acc)

    def add(self, acc, b):
        with np.errstate(invalid="ignore", over="ignore"):
            return acc + b


def slow_forward(x, mask, k, G, s):
    """CARAFEForward, index arithmetic as in carafe_cuda_kernel.cuh (NHWC, per thread (n, ph, pw, c))."""
    N, down_height, down_width, channels = x.shape
    height, width = down_height * s, down_width * s
    T = Thread(x.dtype)
    out = np.zeros((N, height, width, channels), x.dtype)
    channels_per_group = -(-channels // G)
    for n in range(N):
        for ph in range(height):
            for pw in range(width):
                down_pw, down_ph = pw // s, ph // s
                start_w, end_w = down_pw - (k - 1) // 2, down_pw + (k - 1) // 2 + 1
                start_h, end_h = down_ph - (k - 1) // 2, down_ph + (k - 1) // 2 + 1
                shared_mask = mask[n, ph, pw].astype(np.float32)
                for c in range(channels):
                    mask_group = c // channels_per_group
                    output_val = T.zero()
                    for iy in range(start_h, end_h):
                        for ix in range(start_w, end_w):
                            if iy < 0 or iy > down_height - 1 or ix < 0 or ix > down_width - 1:
                                continue
                            mask_iy = iy - down_ph + (k - 1) // 2
                            mask_ix = ix - down_pw + (k - 1) // 2
                            mask_c = (mask_group * k + mask_iy) * k + mask_ix
                            output_val = T.mac(output_val, x[n, iy, ix, c], shared_mask[mask_c])
                    out[n, ph, pw, c] = output_val
    return out


def slow_backward(x, mask, top_diff, k, G, s):
    """CARAFEBackward_Feature, FeatureSum and CARAFEBackward_Mask (with the shuffle's out-of-range lanes)."""
    N, down_height, down_width, channels = x.shape
    height, width, mask_channels = top_diff.shape[1], top_diff.shape[2], mask.shape[3]
    T = Thread(x.dtype)
    channels_per_group = -(-channels // G)
    spread = np.zeros(top_diff.shape, x.dtype)
    for n in range(N):
        for ph in range(height):
            for pw in range(width):
                start_w, end_w = pw - (k - 1) * s // 2, pw + (k - 1) * s // 2 + 1
                start_h, end_h = ph - (k - 1) * s // 2, ph + (k - 1) * s // 2 + 1
                shared_mask = np.zeros(mask_channels, np.float32)
                for c in range(mask_channels):
                    mask_x = start_w + (c % k) * s
                    mask_y = start_h + (c // k % k) * s
                    if mask_y < 0 or mask_y > height - 1 or mask_x < 0 or mask_x > width - 1:
                        continue
                    mask_group = c // (k * k)
                    shared_mask[c] = mask[n, mask_y, mask_x, (2 * mask_group + 1) * k * k - c - 1]
                for c in range(channels):
                    mask_group = c // channels_per_group
                    output_val = T.zero()
                    for iy in range(start_h, end_h, s):
                        for ix in range(start_w, end_w, s):
                            if iy < 0 or iy > height - 1 or ix < 0 or ix > width - 1:
                                continue
                            mask_iy = (iy - ph + (k - 1) * s // 2) // s
                            mask_ix = (ix - pw + (k - 1) * s // 2) // s
                            mask_c = (mask_group * k + mask_iy) * k + mask_ix
                            output_val = T.mac(output_val, shared_mask[mask_c], top_diff[n, iy, ix, c])
                    spread[n, ph, pw, c] = output_val
    grad_input = np.zeros(x.shape, x.dtype)
    for n, i, j, c in np.ndindex(*x.shape):
        output_val = T.zero()
        for iy in range(i * s, (i + 1) * s):
            for ix in range(j * s, (j + 1) * s):
                output_val = T.add(output_val, spread[n, iy, ix, c])
        grad_input[n, i, j, c] = output_val
    grad_mask = np.zeros(mask.shape, x.dtype)
    for n, ph, pw, mask_c in np.ndindex(*mask.shape):
        mask_group, mask_loc = mask_c // (k * k), mask_c % (k * k)
        down_x = pw // s + mask_loc % k - (k - 1) // 2
        down_y = ph // s + mask_loc // k % k - (k - 1) // 2
        lanes = [T.zero() for _ in range(32)]
        if 0 <= down_y <= down_height - 1 and 0 <= down_x <= down_width - 1:
            start = channels_per_group * mask_group
            end = min(channels_per_group * (mask_group + 1), channels)
            for lane in range(32):
                for c in range(start + lane, end, 32):
                    lanes[lane] = T.mac(lanes[lane], top_diff[n, ph, pw, c], x[n, down_y, down_x, c])
        offset = 16
        while offset:
            lanes = [T.add(v, lanes[l + offset] if l + offset < 32 else v) for l, v in enumerate(lanes)]
            offset //= 2
        grad_mask[n, ph, pw, mask_c] = lanes[0]
    return grad_input, grad_mask


def random_inputs(rng, dtype, N, H, W, C, k, G, s, nonfinite=False):
    x = rng.normal(size=(N, H, W, C))
    mask = rng.uniform(-1, 1, size=(N, H * s, W * s, G * k * k))
    grad = rng.normal(size=(N, H * s, W * s, C))
    if nonfinite:
        for array in (x, mask, grad):
            array.flat[rng.choice(array.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    return {"input": x.astype(dtype), "mask": mask.astype(dtype), "grad_output": grad.astype(dtype)}


# (N, H, W, C, k, G, s): Cg > 32 (lanes with several channels, some lanes short), Cg = 33, one channel a
# group, G k^2 > 384 (past mmcv's fast forward), k = 1, maps smaller than the window.
SHAPES = [(1, 2, 3, 70, 3, 1, 2), (2, 2, 2, 66, 1, 2, 3), (1, 3, 2, 4, 3, 4, 1),
          (1, 2, 2, 16, 5, 16, 1), (1, 1, 4, 6, 5, 2, 2), (1, 3, 3, 5, 7, 1, 1)]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "N{}-H{}-W{}-C{}-k{}-G{}-s{}".format(*shape))
def test_matches_a_literal_transcription_of_the_kernels(dtype, shape, emulation_path):
    N, H, W, C, k, G, s = shape
    inputs = random_inputs(np.random.default_rng(sum(shape)), dtype, *shape)
    params = {"kernel_size": k, "group_size": G, "scale_factor": s}
    forward = slow_forward(inputs["input"], inputs["mask"], k, G, s)
    assert_same_bits(carafe.carafe_forward(inputs, params), {"output": forward}, "forward")
    grad_input, grad_mask = slow_backward(inputs["input"], inputs["mask"], inputs["grad_output"], k, G, s)
    assert_same_bits(carafe.carafe_backward(inputs, params), {"grad_input": grad_input, "grad_mask": grad_mask},
                     "backward")


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_nan_and_inf_follow_the_kernels(dtype, emulation_path):
    """Taps outside the map are skipped (an inf there is never multiplied); NaNs come out canonical."""
    shape = (1, 3, 4, 6, 3, 2, 2)
    N, H, W, C, k, G, s = shape
    inputs = random_inputs(np.random.default_rng(5), dtype, *shape, nonfinite=True)
    inputs["mask"][0, 0, 0, 0] = np.inf                 # tap (0, 0) of the corner pixel: outside the map
    params = {"kernel_size": k, "group_size": G, "scale_factor": s}
    forward = half.canonical_nan(slow_forward(inputs["input"], inputs["mask"], k, G, s))
    ours = carafe.carafe_forward(inputs, params)
    assert np.isnan(ours["output"]).any() and np.isinf(ours["output"]).any()
    assert_same_bits(ours, {"output": forward}, "forward")
    grad_input, grad_mask = slow_backward(inputs["input"], inputs["mask"], inputs["grad_output"], k, G, s)
    assert_same_bits(carafe.carafe_backward(inputs, params),
                     {"grad_input": half.canonical_nan(grad_input), "grad_mask": half.canonical_nan(grad_mask)},
                     "backward")


def test_empty_tensors(emulation_path):
    params = {"kernel_size": 3, "group_size": 2, "scale_factor": 2}
    for N, H, C in ((0, 4, 8), (1, 4, 0), (2, 0, 8)):
        inputs = random_inputs(np.random.default_rng(0), "float16", N, H, 5, C, 3, 2, 2)
        out = carafe.carafe_forward(inputs, params)["output"]
        assert out.shape == (N, 2 * H, 10, C) and out.dtype == np.float16
        grads = carafe.carafe_backward(inputs, params)
        assert grads["grad_input"].shape == (N, H, 5, C)
        assert grads["grad_mask"].shape == (N, 2 * H, 10, 18) and not grads["grad_mask"].any()


# ----------------------------------------------------------------------------- as a backend

@pytest.mark.parametrize("op", KERNELS)
def test_random_suite_passes_with_backend_mmcv(tmp_path, op):
    suite = generate(op, tmp_path, suites=("random",), count=8)
    result = run_cli(suite, "--backend", "mmcv")
    assert result.exit_code == 0, result.output
    assert "-float16" in result.output and "-float32" in result.output
    assert result.output.splitlines()[-1] == "8 cases: 8 passed", result.output
