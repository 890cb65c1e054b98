"""An invalid case expects the status mlu-ops returns for its check: rejected (BAD_PARAM, InvalidArgument)
or not_supported (NOT_SUPPORTED, NotSupported, a check with `status: not_supported`); refusing it the
other way is an error, and a valid call declined as not supported is skipped."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import generate, run_dir
from gen.core.backend import Backend, InvalidArgument, NotSupported
from gen.core.casefile import find, load
from gen.core.registry import spec_for
from gen.core.spec import SpecError, load_spec
from gen.core.verdict import ERROR, PASSED, SKIPPED, WRONGLY_ACCEPTED, WRONGLY_REJECTED
from harness import NotSupported as ExportedNotSupported
from harness.backends import load_backend

OP = "carafe_forward"       # its kernel_size_max and scale_factor_max: mlu-ops returns NOT_SUPPORTED


@pytest.fixture(scope="module")
def invalid(tmp_path_factory):
    return generate(OP, tmp_path_factory.mktemp("invalid"), suites=("invalid",))


def _by_expect(directory):
    return {load(p).expect_check: load(p).expect for p in find([directory])}


def test_checks_with_status_not_supported_make_not_supported_cases(invalid):
    expects = _by_expect(invalid)
    statuses = {c.id: c.status for c in spec_for(OP).checks if c.violate is not None}
    assert {c for c, s in statuses.items() if s == "not_supported"} == {"kernel_size_max", "scale_factor_max"}
    assert expects == {c: "not_supported" if s == "not_supported" else "rejected" for c, s in statuses.items()}


def test_the_reference_refuses_each_case_as_its_check_says(invalid):
    results = run_dir(invalid, load_backend("reference"))
    assert results and all(r.status == PASSED for r in results), [(r.name, r.status, r.message) for r in results]


def _refusing(exception):
    def run(request):
        raise exception("no")
    return Backend(name=exception.__name__, origin="test", run=run)


def test_the_wrong_refusal_is_an_error(invalid):
    """BAD_PARAM where the doc says NOT_SUPPORTED: the backend raised what the status is not.  (NotSupported
    on a case that expects BAD_PARAM is a backend declining what it does not implement: skipped.)"""
    for result in run_dir(invalid, _refusing(InvalidArgument)):
        expects = load(result.path).expect
        assert result.status == (PASSED if expects == "rejected" else ERROR), (result.name, result.message)
        if expects == "not_supported":
            assert "expects not supported (NOT_SUPPORTED)" in result.message
    for result in run_dir(invalid, _refusing(NotSupported)):
        expects = load(result.path).expect
        assert result.status == (PASSED if expects == "not_supported" else SKIPPED), (result.name, result.message)


def test_a_valid_call_declined_as_not_supported_is_skipped_not_failed(tmp_path):
    valid = generate(OP, tmp_path, suites=("boundary",), count=1)
    results = run_dir(valid, _refusing(NotSupported))
    assert results and {r.status for r in results} == {SKIPPED}
    assert {r.status for r in run_dir(valid, _refusing(InvalidArgument))} == {WRONGLY_REJECTED}


def test_accepting_a_not_supported_call_is_wrongly_accepted(invalid):
    computing = Backend(name="computes", origin="test",
                        run=lambda request: {n: np.zeros(o.shape, o.dtype)
                                             for n, o in request.outputs.items()})
    results = [r for r in run_dir(invalid, computing) if load(r.path).expect == "not_supported"]
    assert len(results) == 2 and {r.status for r in results} == {WRONGLY_ACCEPTED}


def test_harness_exports_not_supported():
    assert ExportedNotSupported is NotSupported


def test_unknown_status_is_refused_at_its_line(tmp_path):
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "specs" / f"{OP}.yaml").read_text()
    text = text.replace("    status: not_supported ", "    status: unsupported ", 1)
    path = tmp_path / f"{OP}.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "status: unsupported" in l)
    assert info.value.line == line and "status must be one of bad_param, not_supported" in info.value.message
