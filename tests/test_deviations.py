"""Known deviations as data (as OpInfo's xfails): a spec's `deviations:` entry scopes a backend's known
disagreement to cases, with its reason; calibration lists such cases apart, not as findings, and a
deviation that no longer happens is a finding (stale data)."""
from __future__ import annotations

import pytest

from conftest import REPO
from gen.core.registry import spec_for
from gen.core.spec import SpecError, load_spec
from gen.core.verdict import CaseResult
from harness.studies.calibrate import BackendRun, calibration, table_lines

OP = "psamask_forward"
DEVIATION = """
deviations:
  - backend: lowp
    cases: "boundary/map_1x1-.*"
    status: failed
    reason: a made-up disagreement for this test, scoped to the 1x1 map cases
"""


@pytest.fixture
def specs_with_deviation(tmp_path, monkeypatch):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / f"{OP}.yaml").write_text((REPO / "specs" / f"{OP}.yaml").read_text() + DEVIATION)
    monkeypatch.setenv("OPCASE_SPECS", str(folder))
    spec_for.cache_clear()
    yield folder
    spec_for.cache_clear()


def _result(name, status):
    return CaseResult(path=f"/x/{name}.opcase", op=OP, suite="boundary", name=name, status=status, message="m")


def test_a_covered_failure_is_a_known_deviation_not_a_finding(specs_with_deviation):
    runs = [BackendRun("lowp", "built-in", [_result("map_1x1-psa_type0-float32", "failed"),
                                             _result("map_1xW-psa_type0-float32", "passed")])]
    doc = calibration(runs)
    assert not doc["findings"] and doc["summary"]["ok"]
    assert [d["case"] for d in doc["deviations"]] == [f"{OP}/boundary/map_1x1-psa_type0-float32"]
    assert any(line.startswith("known deviation  lowp  failed") and "made-up disagreement" in line
               for line in table_lines(doc))
    # Another backend, or a case the deviation does not cover, is a finding as ever.
    other = calibration([BackendRun("torch", "built-in", [_result("map_1x1-psa_type0-float32", "failed")]),
                         BackendRun("lowp", "built-in", [_result("map_1xW-psa_type0-float32", "failed")])])
    assert len(other["findings"]) == 2 and not other["deviations"]


def test_a_deviation_that_no_longer_happens_is_a_finding(specs_with_deviation):
    doc = calibration([BackendRun("lowp", "built-in", [_result("map_1x1-psa_type0-float32", "passed")])])
    assert [f["status"] for f in doc["findings"]] == ["deviation-gone"] and not doc["summary"]["ok"]


@pytest.mark.parametrize("old, new, message", [
    ("cases: \"boundary/map_1x1-.*\"", "cases: \"boundary/(map\"", "is no regex"),
    ("status: failed", "status: flaky", "status must be one of"),
    ("    reason: a made-up disagreement for this test, scoped to the 1x1 map cases\n", "", "missing 'reason'"),
])
def test_malformed_deviation_is_refused_at_its_line(tmp_path, old, new, message):
    text = (REPO / "specs" / f"{OP}.yaml").read_text() + DEVIATION.replace(old, new)
    path = tmp_path / f"{OP}.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    first = text[:text.index("deviations:")].count("\n") + 1
    assert message in info.value.message and first < info.value.line <= len(text.splitlines()), str(info.value)
