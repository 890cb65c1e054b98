"""gen.kernels.shared.ordered_scatter: row scatter-adds bit for bit np.add.at's, signed zeros included (which NaN
comes out where two NaNs meet is numpy's SIMD loop's choice: compared as NaN)."""
import numpy as np
import pytest

from gen.kernels.shared import ordered_scatter
from gen.kernels.shared.ordered_scatter import add_rows_in_order


def _by_add_at(target, rows, scale, source, source_rows):
    C = target.shape[1]
    flat = (rows[:, None] * C + np.arange(C)).reshape(-1)
    np.add.at(target.reshape(-1), flat, (scale[:, None] * source[source_rows]).reshape(-1))


def _special(rng, shape, dtype):
    values = rng.standard_normal(shape).astype(dtype)
    pick = rng.random(shape)
    values[pick < 0.15] = 0.0
    values[(pick >= 0.15) & (pick < 0.3)] = -0.0
    values[(pick >= 0.3) & (pick < 0.33)] = np.nan
    values[(pick >= 0.33) & (pick < 0.35)] = -np.inf
    return values


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("seed", range(12))
def test_same_bits_as_add_at(seed, dtype, monkeypatch):
    rng = np.random.default_rng(seed)
    # Small blocks so that rows are split over several blocks and steps.
    monkeypatch.setattr(ordered_scatter, "_BLOCK_ELEMENTS", int(rng.integers(1, 40)))
    # Rows finished alone from a random number left receiving on, in chunks of a few products.
    monkeypatch.setattr(ordered_scatter, "_FEW_ROWS", int(rng.integers(0, 6)))
    monkeypatch.setattr(ordered_scatter, "_TAIL_ELEMENTS", int(rng.integers(1, 30)))
    T, S, C, E = int(rng.integers(1, 12)), int(rng.integers(1, 9)), int(rng.integers(1, 7)), int(rng.integers(0, 300))
    start = _special(rng, (T, C), dtype)
    rows = rng.integers(0, T, E) if rng.random() < 0.5 else np.sort(rng.integers(0, T, E))
    scale = _special(rng, E, dtype)
    source = _special(rng, (S, C), dtype)
    source_rows = rng.integers(0, S, E)
    expected, got = start.copy(), start.copy()
    half = E // 2
    with np.errstate(invalid="ignore"):        # inf - inf, 0 * inf: NaNs are part of the test
        _by_add_at(expected, rows, scale, source, source_rows)
        # Entries added in two calls continue where the first left off, as in one np.add.at.
        add_rows_in_order(got, rows[:half], scale[:half], source, source_rows[:half])
        add_rows_in_order(got, rows[half:], scale[half:], source, source_rows[half:])
    assert _bits(got) == _bits(expected)


def _bits(values):
    """The bytes of values with every NaN made the same NaN."""
    return np.where(np.isnan(values), np.nan, values).tobytes()


def test_negative_zero_sums_come_out_as_add_at_gives_them():
    # Every term -0: np.add.at from a +0 start gives +0, from a -0 start -0.
    target = np.array([[0.0], [-0.0]])
    add_rows_in_order(target, np.array([0, 1, 0]), np.array([-1.0, 1.0, 2.0]), np.array([[0.0], [-0.0]]),
                      np.array([0, 1, 1]))
    assert np.signbit(target[:, 0]).tolist() == [False, True]
