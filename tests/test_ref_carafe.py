"""The carafe reference (gen/ops/carafe.py) against mmcv's own data and a slow loop implementation."""
import numpy as np
import pytest

from conftest import CONFORMANCE
from gen.ops import carafe
from gen.values import ValueContext

MMCV_CARAFE = CONFORMANCE / "mmcv" / "for_carafe"


# ----------------------------------------------------------------------------- slow loops (OPS.md, literally)

def slow_forward(x, mask, k, G, s):
    N, H, W, C = x.shape
    r, Cg = (k - 1) // 2, C // G
    out = np.zeros((N, s * H, s * W, C))
    for n in range(N):
        for ho in range(s * H):
            for wo in range(s * W):
                for c in range(C):
                    g = c // Cg
                    total = 0.0
                    for kh in range(k):
                        for kw in range(k):
                            iy, ix = ho // s - r + kh, wo // s - r + kw
                            if 0 <= iy < H and 0 <= ix < W:
                                total += float(x[n, iy, ix, c]) * float(mask[n, ho, wo, (g * k + kh) * k + kw])
                    out[n, ho, wo, c] = total
    return out


def slow_backward(x, mask, grad_out, k, G, s):
    N, H, W, C = x.shape
    r, Cg = (k - 1) // 2, C // G
    grad_input = np.zeros(x.shape)
    grad_mask = np.zeros(mask.shape)
    for n in range(N):
        for ho in range(s * H):
            for wo in range(s * W):
                for c in range(C):
                    g = c // Cg
                    for kh in range(k):
                        for kw in range(k):
                            iy, ix = ho // s - r + kh, wo // s - r + kw
                            if 0 <= iy < H and 0 <= ix < W:
                                mc = (g * k + kh) * k + kw
                                grad_input[n, iy, ix, c] += float(mask[n, ho, wo, mc]) * float(grad_out[n, ho, wo, c])
                                grad_mask[n, ho, wo, mc] += float(x[n, iy, ix, c]) * float(grad_out[n, ho, wo, c])
    return grad_input, grad_mask


def _params(k, G, s):
    return {"kernel_size": k, "group_size": G, "scale_factor": s}


def _random_case(rng, N, H, W, C, k, G, s):
    x = rng.normal(size=(N, H, W, C))
    mask = rng.normal(size=(N, s * H, s * W, G * k * k))
    grad_out = rng.normal(size=(N, s * H, s * W, C))
    return x, mask, grad_out


# (N, H, W, C, k, G, s)
SHAPES = [
    pytest.param(2, 3, 4, 4, 3, 2, 2, id="plain"),
    pytest.param(1, 5, 4, 6, 5, 3, 1, id="scale_1"),
    pytest.param(1, 2, 3, 4, 7, 1, 2, id="map_smaller_than_kernel"),
    pytest.param(1, 3, 3, 4, 1, 1, 3, id="kernel_1"),
    pytest.param(1, 4, 3, 4, 3, 4, 2, id="group_size_C"),
    pytest.param(1, 1, 1, 2, 5, 1, 5, id="map_1x1_scale_5"),
    pytest.param(1, 2, 2, 2, 45, 1, 1, id="kernel_45"),
    pytest.param(1, 2, 5, 3, 3, 1, 4, id="wide"),
]


@pytest.mark.parametrize("N,H,W,C,k,G,s", SHAPES)
def test_forward_matches_slow_loops(N, H, W, C, k, G, s):
    x, mask, _ = _random_case(np.random.default_rng(1), N, H, W, C, k, G, s)
    got = carafe.forward({"input": x, "mask": mask}, _params(k, G, s))["output"]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, slow_forward(x, mask, k, G, s), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("N,H,W,C,k,G,s", SHAPES)
def test_backward_matches_slow_loops(N, H, W, C, k, G, s):
    x, mask, grad_out = _random_case(np.random.default_rng(2), N, H, W, C, k, G, s)
    got = carafe.backward({"input": x, "mask": mask, "grad_output": grad_out}, _params(k, G, s))
    grad_input, grad_mask = slow_backward(x, mask, grad_out, k, G, s)
    np.testing.assert_allclose(got["grad_input"], grad_input, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["grad_mask"], grad_mask, rtol=1e-12, atol=1e-12)


def test_chunking_gives_the_same_result(monkeypatch):
    """Many small row chunks (and a last, shorter one) change nothing."""
    x, mask, grad_out = _random_case(np.random.default_rng(3), 1, 7, 5, 6, 3, 2, 2)
    inputs = {"input": x, "mask": mask, "grad_output": grad_out}
    whole_fwd = carafe.forward(inputs, _params(3, 2, 2))["output"]
    whole_bwd = carafe.backward(inputs, _params(3, 2, 2))
    monkeypatch.setattr(carafe, "_CHUNK_ELEMENTS", 1)
    np.testing.assert_allclose(carafe.forward(inputs, _params(3, 2, 2))["output"], whole_fwd, rtol=1e-13, atol=1e-13)
    for name, value in carafe.backward(inputs, _params(3, 2, 2)).items():
        np.testing.assert_allclose(value, whole_bwd[name], rtol=1e-13, atol=1e-13)


def test_nonfinite_values_follow_the_formula():
    """NaN/inf inside the map propagate; a non-finite mask value at a tap outside the map is skipped."""
    rng = np.random.default_rng(4)
    k, G, s = 3, 1, 2
    x, mask, grad_out = _random_case(rng, 1, 3, 3, 2, k, G, s)
    x[0, 1, 1, 0] = np.nan
    x[0, 0, 2, 1] = np.inf
    mask[0, 0, 0, 0] = np.inf        # output (0, 0), tap (0, 0) reads input (-1, -1): outside
    mask[0, 5, 5, 8] = -np.inf       # output (5, 5), tap (2, 2) reads input (3, 3): outside
    mask[0, 2, 3, 4] = np.inf        # the centre tap: inside
    grad_out[0, 0, 0, 1] = np.inf
    expected = slow_forward(x, mask, k, G, s)
    got = carafe.forward({"input": x, "mask": mask}, _params(k, G, s))["output"]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)   # NaN and inf positions must match too
    got = carafe.backward({"input": x, "mask": mask, "grad_output": grad_out}, _params(k, G, s))
    grad_input, grad_mask = slow_backward(x, mask, grad_out, k, G, s)
    np.testing.assert_allclose(got["grad_input"], grad_input, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["grad_mask"], grad_mask, rtol=1e-12, atol=1e-12)
    assert np.isnan(grad_mask).any() and np.isinf(expected).any()


def test_zero_elements_give_empty_or_zero_outputs():
    x, mask, grad_out = _random_case(np.random.default_rng(5), 0, 3, 3, 2, 3, 1, 2)
    assert carafe.forward({"input": x, "mask": mask}, _params(3, 1, 2))["output"].shape == (0, 6, 6, 2)
    x = np.zeros((1, 2, 2, 0))
    mask = np.ones((1, 4, 4, 9))
    out = carafe.backward({"input": x, "mask": mask, "grad_output": np.zeros((1, 4, 4, 0))}, _params(3, 1, 2))
    assert out["grad_input"].shape == (1, 2, 2, 0) and not out["grad_mask"].any()


# ----------------------------------------------------------------------------- mmcv conformance data

def _load(name, shape):
    return np.fromfile(MMCV_CARAFE / f"carafe_{name}.bin", dtype="<f4").reshape(shape)


def _nhwc(array):
    return np.ascontiguousarray(array.transpose(0, 2, 3, 1))


def _relative_error(got, expected):
    return np.abs(got - expected).max() / np.abs(expected).max()


def test_mmcv_conformance():
    """mmcv's CARAFE(kernel 5, group 4, scale 2) test data; backward with grad_output = ones."""
    feat, mask = _nhwc(_load("feat", (2, 64, 3, 3))), _nhwc(_load("mask", (2, 100, 6, 6)))
    params = _params(5, 4, 2)
    output = carafe.forward({"input": feat, "mask": mask}, params)["output"]
    assert _relative_error(output, _nhwc(_load("output", (2, 64, 6, 6)))) < 1e-5
    grads = carafe.backward({"input": feat, "mask": mask, "grad_output": np.ones((2, 6, 6, 64), np.float32)}, params)
    assert _relative_error(grads["grad_input"], _nhwc(_load("feat_grad", (2, 64, 3, 3)))) < 1e-5
    assert _relative_error(grads["grad_mask"], _nhwc(_load("mask_grad", (2, 100, 6, 6)))) < 1e-5


# ----------------------------------------------------------------------------- low precision path

def test_float32_compute_is_close_but_really_float32():
    rng = np.random.default_rng(6)
    x = rng.uniform(0.5, 1.5, size=(1, 6, 6, 64)).astype(np.float32)
    mask = rng.uniform(0.5, 1.5, size=(1, 12, 12, 81)).astype(np.float32)   # k = 9: 81-term sums
    golden = carafe.forward({"input": x, "mask": mask}, _params(9, 1, 2))["output"]
    low = carafe.forward({"input": x, "mask": mask}, _params(9, 1, 2), compute_dtype=np.float32)["output"]
    assert low.dtype == np.float32
    relative = np.abs(low - golden) / np.abs(golden)
    assert relative.max() < 1e-5
    assert relative.max() > 1e-9          # float64 arithmetic would agree to ~1e-16


def test_half_inputs_are_accepted():
    rng = np.random.default_rng(7)
    x, mask, grad_out = (a.astype(np.float16) for a in _random_case(rng, 1, 3, 4, 4, 3, 2, 2))
    inputs = {"input": x, "mask": mask, "grad_output": grad_out}
    golden = carafe.backward(inputs, _params(3, 2, 2))
    low = carafe.backward(inputs, _params(3, 2, 2), compute_dtype=np.float32)
    grad_input, grad_mask = slow_backward(x, mask, grad_out, 3, 2, 2)
    np.testing.assert_allclose(golden["grad_input"], grad_input, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(low["grad_mask"], grad_mask, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- value generator

def test_softmax_masks_sum_to_one_per_group_window():
    shapes = {"input": (2, 3, 4, 8), "mask": (2, 6, 8, 2 * 25), "output": (2, 6, 8, 8)}
    ctx = ValueContext(shapes=shapes, dtypes={}, dims={}, params=_params(5, 2, 2), dtype="float32")
    mask = carafe.softmax_masks(np.random.default_rng(8), ctx, std=2.0)
    assert mask.shape == shapes["mask"] and (mask > 0).all()
    np.testing.assert_allclose(mask.reshape(2, 6, 8, 2, 25).sum(axis=-1), 1.0, rtol=1e-12)
