"""three_nn_forward's own facts: the doc's example, and where its idx golden is (not) determined."""
from __future__ import annotations

import numpy as np

from gen.kernels.three_nn import reference as ref


def test_doc_example_gives_the_idx_the_doc_prints():
    inputs = {"unknown": np.array(ref.DOC_EXAMPLE_UNKNOWN, np.float32), "known": np.array(ref.DOC_EXAMPLE_KNOWN, np.float32)}
    out = ref.forward(inputs, {})
    assert out["idx"].tolist() == ref.DOC_EXAMPLE_IDX
    # Doc 1.2 prints dist2 for its unrounded inputs: within the four decimals' reach.
    printed = [[[0.3355, 0.5949, 0.8369], [0.2259, 0.2429, 0.2599], [0.3540, 0.4414, 0.5315]],
               [[0.0635, 0.2451, 0.3760], [0.2664, 0.4975, 0.6177], [0.2149, 0.3495, 0.7339]]]
    assert np.abs(out["dist2"] - printed).max() < 5e-4


def _one_point(known, dtype):
    return {"unknown": np.zeros((1, 1, 3), dtype), "known": np.array([known], dtype)}


def test_near_ties_accept_either_order_within_the_dtype_rounding():
    # Distances 4, 1 and (1 + 2^-10)^2: apart by about two half ulps (a half kernel may order
    # them either way), by thousands of float ulps.
    known = [[2.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0 + 2.0 ** -10, 0.0]]
    for dtype, expected in ((np.float16, {0: [1, 2], 1: [1, 2]}), (np.float32, {})):
        inputs = _one_point(known, dtype)
        golden = ref.forward(inputs, {})["idx"]
        assert golden[0, 0].tolist() == [1, 2, 0]
        assert ref.idx_near_ties(inputs, {}, dtype, golden) == expected
    # Distances 1 and 1 + 2^-22, a few float ulps apart: either order in float32 too.
    known = [[2.0, 0.0, 0.0], [0.0, 0.0, np.sqrt(1 + 2.0 ** -22)], [1.0, 0.0, 0.0]]
    inputs = _one_point(known, np.float32)
    golden = ref.forward(inputs, {})["idx"]
    assert ref.idx_near_ties(inputs, {}, np.float32, golden) == {0: [1, 2], 1: [1, 2]}


def test_twins_are_decided_by_index():
    # Two copies of a point, and the same distance along another axis with exact integers.
    known = [[5.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    for dtype in (np.float16, np.float32):
        inputs = _one_point(known, dtype)
        golden = ref.forward(inputs, {})["idx"]
        assert golden[0, 0].tolist() == [1, 2, 3]
        assert ref.idx_near_ties(inputs, {}, dtype, golden) == {}
