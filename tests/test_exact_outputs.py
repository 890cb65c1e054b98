"""Integer outputs judged exactly (spec `output_criteria`), but where the golden is not determined:
there the case file records each element's acceptable answers (gen/core/proto: Undetermined)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import generate
from gen.core.casefile import CaseFileError, Undetermined, load, save
from gen.core.metrics import exact_mismatches
from gen.core.registry import spec_for
from gen.core.verdict import FAILED, PASSED, CaseResult, judge

OP = "border_align_forward"


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return generate(OP, tmp_path_factory.mktemp("exact"), suites=("random", "boundary"), count=6)


def _with_undetermined(suite):
    for path in sorted(suite.rglob("*.opcase")):
        case = load(path)
        if "argmax_idx" in case.undetermined:
            return case
    raise AssertionError("no case has undetermined argmax_idx elements")


def _judge(case, produced):
    result = CaseResult(path="")
    judge(case, produced, result)
    return result


def test_every_index_output_is_judged_exactly(suite):
    spec = spec_for(OP)
    assert set(spec.output_criteria) == {"argmax_idx"}
    for path in suite.rglob("*.opcase"):
        case = load(path)
        if case.expect == "ok":
            assert [th.metric for th in case.criteria["argmax_idx"]] == ["exact"]
            assert case.criteria["argmax_idx"][0].value == 0


def test_one_wrong_determined_index_fails_an_acceptable_near_tie_passes(suite):
    case = _with_undetermined(suite)
    golden = {n: np.array(t.data) for n, t in case.outputs.items()}
    u = case.undetermined["argmax_idx"]
    assert _judge(case, golden).status == PASSED
    # Every undetermined element given another of its acceptable answers: still right.
    other = {n: a.copy() for n, a in golden.items()}
    flat = other["argmax_idx"].reshape(-1)
    for i, element in enumerate(u.index):
        answers = u.acceptable[u.offsets[i]:u.offsets[i + 1]]
        assert flat[element] in answers and len(answers) > 1
        flat[element] = next(a for a in answers if a != flat[element])
    assert _judge(case, other).status == PASSED
    # One determined element off by one: wrong, although 1 of hundreds of elements.
    determined = np.setdiff1d(np.arange(flat.size), u.index)[0]
    flat[determined] = flat[determined] + 1
    result = _judge(case, other)
    assert result.status == FAILED and "argmax_idx.exact=1 > 0" in result.message
    # An undetermined element given an answer outside its set: wrong.
    flat[determined] -= 1
    flat[u.index[0]] = 99
    assert _judge(case, other).status == FAILED


def test_exact_mismatches_counts():
    golden = np.array([0, 1, 2, 3], dtype=np.int32)
    u = Undetermined.of({1: [1, 2], 3: [0, 3]})
    assert exact_mismatches(golden, golden, u) == 0
    assert exact_mismatches(np.array([0, 2, 2, 0]), golden, u) == 0
    assert exact_mismatches(np.array([1, 3, 2, 1]), golden, u) == 3
    assert exact_mismatches(np.array([1, 3, 2, 1]), golden) == 3


def test_undetermined_round_trips_and_is_validated(suite, tmp_path):
    case = _with_undetermined(suite)
    path = save(case, tmp_path / "a.opcase")
    again = load(path)
    u, v = case.undetermined["argmax_idx"], again.undetermined["argmax_idx"]
    for field in ("index", "offsets", "acceptable"):
        np.testing.assert_array_equal(getattr(u, field), getattr(v, field))
    size = case.outputs["argmax_idx"].data.size
    for bad in (Undetermined(np.array([size]), np.array([0, 1]), np.array([0])),            # outside the output
                Undetermined(np.array([3, 2]), np.array([0, 1, 2]), np.array([0, 1])),      # not ascending
                Undetermined(np.array([2]), np.array([0, 2]), np.array([0]))):              # offsets past the answers
        broken = replace(case, undetermined={"argmax_idx": bad})
        with pytest.raises(CaseFileError, match="undetermined elements"):
            load(save(broken, tmp_path / "b.opcase"))
    floats = replace(case, undetermined={"output": u})
    with pytest.raises(CaseFileError, match="without an exact threshold"):
        load(save(floats, tmp_path / "c.opcase"))


def test_exact_output_beside_dynamic_thresholds(tmp_path):
    """A dynamic spec with an integer output: dynamic thresholds on its float outputs, the exact one on
    the integer output (no dynamic floor or cap exists for int32: the generator once failed there)."""
    from gen.core.spec import load_spec
    from gen.generate import Generator, case_path, plan_suite
    from harness.backends import load_backend

    text = spec_for(OP).path.read_text()
    start = text.index("\ncriteria:")
    end = text.index("\noutput_criteria:")
    path = tmp_path / f"{OP}.yaml"
    path.write_text(text[:start] + "\ncriteria:\n  dynamic: {metrics: [diff1, diff2], rates: [10, 10], baseline: lowp}\n"
                    + text[end:])
    spec = load_spec(path)
    assert spec.criteria.mode == "dynamic" and set(spec.output_criteria) == {"argmax_idx"}
    generator = Generator(spec, load_backend("lowp"))
    plan = plan_suite(spec, "random", 2, 0)[0]
    written = case_path(tmp_path / "out", plan, OP)
    generator.write(plan, written)
    case = load(written)
    assert [th.metric for th in case.criteria["argmax_idx"]] == ["exact"]
    assert [th.metric for th in case.criteria["output"]] == ["diff1", "diff2"]
    assert all("dynamic" in th.provenance for th in case.criteria["output"])
    golden = {n: np.array(t.data) for n, t in case.outputs.items()}
    assert _judge(case, golden).status == PASSED
    wrong = {n: a.copy() for n, a in golden.items()}
    wrong["argmax_idx"].reshape(-1)[:] += 1
    assert _judge(case, wrong).status == FAILED
