"""three_nn's planted copy searches its known points block by block; it must give exactly the bits of
its first form, which sorted each query's whole row of distances (tests/kernels/three_nn.py, put in
the block search's place: the chunking, layouts and knobs around it are the same code), for
every knob its planted bugs and controls turn, on random, tie-heavy and non-finite inputs, with blocks
small enough that ties and minima fall across block borders."""
from __future__ import annotations

import numpy as np
import pytest

from gen.kernels.three_nn import planted
from kernels.three_nn import sorted_nearest_three, sorted_three_nn

# Every knob gen/kernels/three_nn/planted.py's PLANTED and CONTROLS turn, and the two tie knobs together.
KNOBS = [{}, {"tie": "last"}, {"known_batch": "first"}, {"last_point": False}, {"distance_dtype": np.float16},
         {"sqrt": True}, {"known_layout": "xyz_planes"}, {"order": "yz_first", "distance_dtype": np.float32},
         {"order": "expanded"}, {"tie": "last", "distance_dtype": np.float16}]


def _inputs(rng, kind, B, N, M):
    if kind == "grid":                          # few distinct distances: ties everywhere
        return (rng.integers(-2, 3, (B, N, 3)).astype(np.float64), rng.integers(-2, 3, (B, M, 3)).astype(np.float64))
    unknown, known = rng.uniform(-3, 3, (B, N, 3)), rng.uniform(-3, 3, (B, M, 3))
    if kind == "duplicates" and M:              # known points copied: exact ties far apart in index
        known[:, rng.integers(0, M, M)] = known[:, rng.integers(0, M, M)]
        unknown[:, : N // 2] = known[:, rng.integers(0, M, N // 2)]
    if kind == "non_finite" and N:              # NaN, inf and distances over 1e40 and half's range
        unknown.flat[rng.integers(0, unknown.size, 6)] = [np.nan, np.inf, -np.inf, 1e30, 3e20, 300.0]
    return unknown, known


def _same(a, b):
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


@pytest.mark.parametrize("block", [1, 40, planted._BLOCK_ELEMENTS])
@pytest.mark.parametrize("kind", ["uniform", "grid", "duplicates", "non_finite"])
def test_block_search_gives_the_sorted_search_bits(monkeypatch, block, kind):
    monkeypatch.setattr(planted, "_BLOCK_ELEMENTS", block)
    rng = np.random.default_rng([block, len(kind)])
    shapes = [(1, 0, 5), (2, 4, 0), (1, 5, 1), (1, 5, 2), (2, 7, 3), (1, 9, 4)]
    shapes += [(int(rng.integers(1, 3)), int(rng.integers(1, 120)), int(rng.integers(5, 90))) for _ in range(6)]
    for B, N, M in shapes:
        unknown, known = _inputs(rng, kind, B, N, M)
        for knobs in KNOBS:
            assert _same(planted.three_nn(unknown, known, **knobs), sorted_three_nn(unknown, known, **knobs)), \
                (B, N, M, knobs)


def test_segmented_and_uint16_bugs_keep_their_bits(monkeypatch):
    """The two bugs that call the search: as they were with the sorted search inside."""
    rng = np.random.default_rng(7)
    unknown, known = _inputs(rng, "grid", 2, 60, 700)
    block = planted.segmented_three_nn(unknown, known, 256), planted.counted_in_uint16(unknown, known)
    monkeypatch.setattr(planted, "_nearest_three", sorted_nearest_three)
    assert _same(block[0], planted.segmented_three_nn(unknown, known, 256))
    assert _same(block[1], planted.counted_in_uint16(unknown, known))


def test_the_comparison_sees_a_tie_broken_the_other_way():
    """The bits compared above tell the tie orders apart on these inputs (else the test proves nothing)."""
    unknown, known = _inputs(np.random.default_rng(3), "grid", 1, 50, 40)
    assert not _same(planted.three_nn(unknown, known, tie="last"), sorted_three_nn(unknown, known))
