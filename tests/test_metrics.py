"""gen.core.metrics against a plain whole-array float64 formulation of ACCURACY.md."""

import json
import math

import numpy as np
import pytest

from gen.core import metrics
from gen.core.metrics import compare, passes, small_golden_eps

CHUNK_SIZES = [7, 64, 1 << 20]


def reference(actual, golden, dtype):
    """ACCURACY.md written out directly over whole arrays, independent of the streaming code."""
    e = np.asarray(actual, dtype=np.float64).ravel()
    b = np.asarray(golden, dtype=np.float64).ravel()
    eps = {"float16": 1e-4, "float32": 1e-6}.get(np.dtype(dtype).name, 0.0)

    def pattern(x):  # 0 finite, 1 NaN, 2 +Inf, 3 -Inf
        return np.select([np.isnan(x), x == np.inf, x == -np.inf], [1, 2, 3], 0)

    both_finite = np.isfinite(e) & np.isfinite(b)
    ef, bf = e[both_finite], b[both_finite]
    d = np.abs(ef - bf)
    rel = np.where(np.abs(bf) < eps, d, d / (np.abs(bf) + 1e-9))
    unequal = ef != bf
    n_unequal = int(np.count_nonzero(unequal))
    return {
        "diff1": d.sum() / (np.abs(bf).sum() + 1e-9),
        "diff2": math.sqrt((d**2).sum() / ((bf**2).sum() + 1e-9)),
        "diff3": rel.max() if rel.size else 0.0,
        "diff3_2": d.max() if d.size else 0.0,
        "diff4": np.count_nonzero(ef < bf) / n_unequal if n_unequal else None,
        "n": int(both_finite.sum()),
        "n_unequal": n_unequal,
        "n_greater": int(np.count_nonzero(ef > bf)),
        "n_less": int(np.count_nonzero(ef < bf)),
        "n_unique_unequal_pairs": len(set(zip(ef[unequal].tolist(), bf[unequal].tolist()))),
        "nan_inf_mismatch": int(np.count_nonzero(pattern(e) != pattern(b))),
        "nan_golden": int(np.isnan(b).sum()),
        "inf_golden": int(np.isinf(b).sum()),
        "flat": np.flatnonzero(both_finite),
        "abs": d,
        "rel": rel,
    }


def assert_matches_reference(result, actual, golden, dtype, worst_k=10):
    ref = reference(actual, golden, dtype)
    for key in ("diff1", "diff2"):
        assert result[key] == pytest.approx(ref[key], rel=1e-12, abs=0), key
    for key in ("diff3", "diff3_2", "diff4"):
        assert result[key] == ref[key], key
    for key in ("n", "n_unequal", "n_greater", "n_less", "nan_inf_mismatch", "nan_golden",
                "inf_golden"):
        assert result[key] == ref[key], key
    unique = ref["n_unique_unequal_pairs"]
    assert result["n_unique_unequal_pairs"] == min(unique, 100)
    assert result["n_unique_unequal_pairs_capped"] == (unique >= 100)
    for key, scores in (("worst_abs", ref["abs"]), ("worst_rel", ref["rel"])):
        with_error = ref["abs"] > 0
        flat, scores = ref["flat"][with_error], scores[with_error]
        expected = flat[np.lexsort((flat, -scores))][:worst_k]
        assert [w["flat"] for w in result[key]] == expected.tolist(), key


def random_case(rng, shape, dtype, nan_inf=False):
    golden = rng.standard_normal(shape).astype(dtype)
    noise = rng.standard_normal(shape) * (1e-2 if dtype == np.float16 else 1e-5)
    actual = (golden.astype(np.float64) + noise).astype(dtype)
    actual.ravel()[:: 5] = golden.ravel()[:: 5]  # some exact matches
    if nan_inf:
        specials = np.array([np.nan, np.inf, -np.inf], dtype=dtype)
        for array in (golden, actual):
            positions = rng.choice(golden.size, size=golden.size // 10, replace=False)
            array.ravel()[positions] = rng.choice(specials, size=len(positions))
        # matched specials too, so the matching rule is exercised
        actual.ravel()[:30:3] = golden.ravel()[:30:3] = np.nan
        actual.ravel()[1:30:3] = golden.ravel()[1:30:3] = -np.inf
    return actual, golden


@pytest.mark.parametrize("chunk_elems", CHUNK_SIZES)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("nan_inf", [False, True])
def test_random_floats_match_reference(dtype, chunk_elems, nan_inf):
    rng = np.random.default_rng(1)
    actual, golden = random_case(rng, (5, 7, 11), dtype, nan_inf)
    result = compare(actual, golden, dtype, chunk_elems=chunk_elems)
    assert_matches_reference(result, actual, golden, dtype)


def test_small_goldens_take_absolute_error_below_eps():
    golden = np.array([0.0, 5e-5, 2e-4, 1.0], dtype=np.float16)
    actual = golden + np.array([1e-3, 1e-3, 1e-3, 0.0], dtype=np.float16)
    result = compare(actual, golden, "float16", chunk_elems=3)
    assert_matches_reference(result, actual, golden, np.float16)
    # |b| >= 1e-4 at index 2 gives a relative error of about 5, above every absolute one
    assert result["worst_rel"][0]["index"] == [2]
    assert result["worst_rel"][1]["rel_err"] == pytest.approx(float(actual[0]))
    assert small_golden_eps("float32") == 1e-6
    assert small_golden_eps(np.int32) == 0.0


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.int64])
def test_integer_outputs_compare_in_float64(dtype):
    rng = np.random.default_rng(2)
    info = np.iinfo(dtype)
    golden = rng.integers(max(info.min, -1000), min(info.max, 1000), size=(13, 17)).astype(dtype)
    actual = golden.copy()
    actual[rng.random(golden.shape) < 0.3] -= 1
    result = compare(actual, golden, dtype, chunk_elems=7)
    assert_matches_reference(result, actual, golden, dtype)


def test_mixed_actual_and_golden_dtypes():
    rng = np.random.default_rng(3)
    golden = rng.standard_normal(1000).astype(np.float16)
    actual = golden.astype(np.float64) + rng.standard_normal(1000) * 1e-3
    result = compare(actual, golden, np.float16, chunk_elems=64)
    assert_matches_reference(result, actual, golden, np.float16)


def test_blocks_within_a_chunk():
    # more elements than one cache block, in a single chunk
    rng = np.random.default_rng(4)
    actual, golden = random_case(rng, (150_001,), np.float32, nan_inf=True)
    result = compare(actual, golden, np.float32)
    assert_matches_reference(result, actual, golden, np.float32)


def test_zero_size():
    empty = np.zeros((0, 3), dtype=np.float32)
    result = compare(empty, empty, "float32")
    assert {k: result[k] for k in ("diff1", "diff2", "diff3", "diff3_2")} == dict.fromkeys(
        ("diff1", "diff2", "diff3", "diff3_2"), 0.0
    )
    assert result["diff4"] is None
    assert result["n"] == 0 and result["n_unique_unequal_pairs"] == 0
    assert result["worst_abs"] == result["worst_rel"] == result["worst_nan_inf"] == []


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        compare(np.zeros((2, 3)), np.zeros((3, 2)), "float32")


def test_worst_element_is_located_by_multi_dim_index():
    golden = np.ones((3, 4, 5), dtype=np.float32)
    actual = golden.copy()
    actual[2, 1, 3] = 1.5
    actual[0, 0, 1] = 1.25
    result = compare(actual, golden, "float32", chunk_elems=7)
    worst = result["worst_abs"]
    assert [w["index"] for w in worst] == [[2, 1, 3], [0, 0, 1]]
    assert worst[0] == {
        "index": [2, 1, 3],
        "flat": int(np.ravel_multi_index((2, 1, 3), golden.shape)),
        "golden": 1.0,
        "actual": 1.5,
        "abs_err": 0.5,
        "rel_err": 0.5 / (1 + 1e-9),
    }
    assert result["worst_rel"][0]["index"] == [2, 1, 3]
    assert result["n_unequal"] == 2


def test_worst_ties_prefer_lower_flat_index():
    golden = np.zeros(1000, dtype=np.int32)
    actual = golden + 1
    result = compare(actual, golden, "int32", chunk_elems=7, worst_k=4)
    assert [w["flat"] for w in result["worst_abs"]] == [0, 1, 2, 3]
    assert [w["flat"] for w in result["worst_rel"]] == [0, 1, 2, 3]


def test_round_toward_zero_bias_fails_diff4():
    rng = np.random.default_rng(5)
    golden = rng.uniform(0.5, 2.0, size=(50, 40)).astype(np.float32)
    actual = np.nextafter(golden, np.float32(0))  # every element one ulp toward zero
    result = compare(actual, golden, "float32", chunk_elems=7)
    assert result["diff4"] == 1.0
    assert result["n_less"] == golden.size and result["n_greater"] == 0
    assert result["n_unique_unequal_pairs"] == 100
    assert result["n_unique_unequal_pairs_capped"] is True
    assert not passes("diff4", result["diff4"], 1.0, result)


def test_one_sided_bias_over_few_distinct_pairs_passes_diff4():
    golden = np.tile(np.arange(1, 38, dtype=np.float32), 10)  # 37 distinct values
    actual = golden + 1
    result = compare(actual, golden, "float32", chunk_elems=7)
    assert result["diff4"] == 0.0
    assert result["n_unique_unequal_pairs"] == 37
    assert result["n_unique_unequal_pairs_capped"] is False
    assert passes("diff4", result["diff4"], 1.0, result)


def test_unique_pairs_treat_signed_zeros_as_equal():
    golden = np.array([0.0, -0.0, 0.0, -0.0], dtype=np.float32)
    actual = np.array([1.0, 1.0, 0.0, 0.0], dtype=np.float32)
    result = compare(actual, golden, "float32")
    assert result["n_unequal"] == 2 and result["n_unique_unequal_pairs"] == 1


def test_nan_inf_pattern_mismatches_are_counted_once_and_reported():
    golden = np.array([[np.nan, np.inf, -np.inf, 1.0], [np.nan, np.inf, 2.0, 3.0]], np.float32)
    actual = np.array([[np.nan, np.inf, np.inf, np.nan], [1.0, -np.inf, 2.0, 3.5]], np.float32)
    result = compare(actual, golden, "float32", chunk_elems=3)
    assert result["nan_inf_mismatch"] == 4
    assert result["nan_golden"] == 2 and result["inf_golden"] == 3
    assert result["n"] == 2 and result["diff3_2"] == 0.5
    mismatches = result["worst_nan_inf"]
    assert [m["index"] for m in mismatches] == [[0, 2], [0, 3], [1, 0], [1, 1]]
    assert mismatches[0]["golden"] == "-inf" and mismatches[0]["actual"] == "inf"
    assert mismatches[1]["actual"] == "nan" and mismatches[1]["abs_err"] == "nan"
    json.dumps(result, allow_nan=False)


def test_nan_everywhere_in_both_is_a_match_with_nothing_compared():
    nans = np.full(10, np.nan, dtype=np.float32)
    result = compare(nans, nans.copy(), "float32")
    assert result["nan_inf_mismatch"] == 0 and result["n"] == 0
    assert result["diff1"] == 0.0 and result["diff4"] is None


def test_overflowing_difference_is_returned_as_inf_and_fails():
    golden = np.array([-1e308, 1.0])
    actual = np.array([1e308, 1.0])
    result = compare(actual, golden, "float64")
    assert result["diff3_2"] == math.inf and result["nan_inf_mismatch"] == 0
    assert not passes("diff3_2", result["diff3_2"], 1e300, result)


def test_read_only_memmap_and_non_contiguous_inputs(tmp_path):
    rng = np.random.default_rng(6)
    actual, golden = random_case(rng, (30, 40), np.float32, nan_inf=True)
    path = tmp_path / "golden.bin"
    golden.tofile(path)
    golden_map = np.memmap(path, dtype=np.float32, mode="r", shape=golden.shape)
    result = compare(actual, golden_map, "float32", chunk_elems=64)
    assert result == compare(actual, golden, "float32", chunk_elems=64)
    assert_matches_reference(result, actual, golden, np.float32)

    transposed = compare(actual.T, golden_map.T, "float32", chunk_elems=64)
    assert_matches_reference(transposed, actual.T, golden.T, np.float32)


def test_result_is_json_serializable_plain_python():
    rng = np.random.default_rng(7)
    actual, golden = random_case(rng, (4, 25), np.float32)
    result = compare(actual, golden, "float32")
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_passes_rules():
    stats = {"n_unique_unequal_pairs": 100}
    assert passes("diff1", 1e-5, 1e-5, stats)
    assert not passes("diff2", 1.1e-5, 1e-5, stats)
    assert not passes("diff3", math.nan, 1.0, stats)
    assert not passes("diff3_2", math.inf, math.inf, stats)
    assert not passes("diff1", None, 1.0, stats)
    assert passes("diff4", None, 0.0, stats)
    assert passes("diff4", 0.3, 0.0, stats)  # the threshold's size is ignored
    assert not passes("diff4", 0.0, 1.0, stats)
    assert passes("diff4", 1.0, 1.0, {"n_unique_unequal_pairs": 99})
    with pytest.raises(ValueError):
        passes("diff5", 0.0, 1.0, stats)


def test_unique_pairs_of_64_bit_values_are_exact(monkeypatch):
    # (1, 0) and (1, -0) are one pair; (3, 3) is equal: 5 distinct unequal pairs
    golden = np.array([0.0, -0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0])
    actual = np.array([1.0, 1.0, 2.0, 2.0, 3.0, 4.0, 3.0, 5.0])
    assert compare(actual, golden, "float64")["n_unique_unequal_pairs"] == 5
    # Every key colliding forces the exact fallback.
    monkeypatch.setattr(metrics, "_complex_key_hash", lambda keys: np.zeros(len(keys), np.uint64))
    assert compare(actual, golden, "float64", chunk_elems=3)["n_unique_unequal_pairs"] == 5


def test_bool_outputs_and_no_worst_lists():
    golden = np.array([True, False, True, True])
    actual = np.array([True, True, False, True])
    result = compare(actual, golden, "bool", worst_k=0)
    assert (result["n_greater"], result["n_less"], result["diff3_2"]) == (1, 1, 1.0)
    assert result["n_unique_unequal_pairs"] == 2
    assert result["worst_abs"] == result["worst_rel"] == []


def test_rejects_complex_inputs():
    with pytest.raises(TypeError):
        compare(np.zeros(3, np.complex64), np.zeros(3, np.complex64), "complex64")
