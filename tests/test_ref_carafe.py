"""The carafe reference (gen/kernels/carafe/reference.py) against the slow loops of its records (tests/kernels/carafe_*.py)
where non-finite values and half inputs meet them, its float32 path and its mask generator.  (Against
the slow loops on every generated plan, and against mmcv's own data: tests/test_kernels.py.)"""
import numpy as np

from gen.kernels.carafe import reference as carafe
from gen.values import ValueContext
from kernels.carafe_backward import oracle as slow_backward
from kernels.carafe_forward import oracle as slow_forward


def _params(k, G, s):
    return {"kernel_size": k, "group_size": G, "scale_factor": s}


def _random_case(rng, N, H, W, C, k, G, s):
    x = rng.normal(size=(N, H, W, C))
    mask = rng.normal(size=(N, s * H, s * W, G * k * k))
    grad_out = rng.normal(size=(N, s * H, s * W, C))
    return x, mask, grad_out


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
    inputs = {"input": x, "mask": mask, "grad_output": grad_out}
    with np.errstate(invalid="ignore"):
        expected = slow_forward(inputs, _params(k, G, s))["output"]
        slow = slow_backward(inputs, _params(k, G, s))
    grad_input, grad_mask = slow["grad_input"], slow["grad_mask"]
    got = carafe.forward({"input": x, "mask": mask}, _params(k, G, s))["output"]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)   # NaN and inf positions must match too
    got = carafe.backward(inputs, _params(k, G, s))
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
    slow = slow_backward(inputs, _params(3, 2, 2))
    np.testing.assert_allclose(golden["grad_input"], slow["grad_input"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(low["grad_mask"], slow["grad_mask"], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- value generator

def test_softmax_masks_sum_to_one_per_group_window():
    shapes = {"input": (2, 3, 4, 8), "mask": (2, 6, 8, 2 * 25), "output": (2, 6, 8, 8)}
    ctx = ValueContext(shapes=shapes, dtypes={}, dims={}, params=_params(5, 2, 2), dtype="float32")
    mask = carafe.softmax_masks(np.random.default_rng(8), ctx, std=2.0)
    assert mask.shape == shapes["mask"] and (mask > 0).all()
    np.testing.assert_allclose(mask.reshape(2, 6, 8, 2, 25).sum(axis=-1), 1.0, rtol=1e-12)
