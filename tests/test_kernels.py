"""Generic tests of every kernel (as PyTorch's OpInfo tests): each runs for every spec in specs/, with
the kernel's record tests/kernels/<op>.py (kernels.record).  A kernel with a spec and no record fails
here; nothing names a kernel.

Per kernel: the reference equals the record's slow oracle on the random and boundary plans; every
backend that claims the kernel reproduces mmcv's own test data (where the record has some) and passes
the generated suite; every planted bug fails it while the bug-free copy and the controls pass; every
testable parameter check, left out, is caught; a case survives the trip to mlu-ops' format and back;
the record's mlu-ops conformance files import and pass the reference.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import gen
import kernels
import needs
from conftest import (CONFORMANCE, assert_each_missing_check_caught, checked_backend, failed_metrics, generate, run_dir,
                      statuses)
from gen.kernels.shared.planted_counts import COUNT_BUG
from gen.core.backend import BUILTIN_NAMES, BackendLoadError, Request, TensorInfo
from gen.core.casefile import element_count, find, load
from gen.core.registry import bug_free_copy, planted_bugs, planted_controls, spec_for
from gen.core.verdict import ERROR, FAILED, FAILING, PASSED, fails_only_by_its_own_error_over_the_cap
from gen.generate import draw_inputs, interface_params, layout_of, plan_suite
from harness.backends import load_backend
from harness.cli.interop import DOCS_RULE, import_all
from harness.mluops import case_from_mluops, load_mluops, save_mluops

OPS = kernels.ops()


def _why(backend: str, exc: BackendLoadError) -> str:
    """The skip reason for a built-in backend this machine cannot load: the need it lacks, when a
    backend is named after one (torch is an optional extra), else the load error itself."""
    return needs.reason(backend) if backend in needs.NEEDS and needs.missing(backend) else str(exc)


def _claimed() -> list:
    """(op, backend) for every built-in backend and every kernel it claims in one of the spec's dtypes;
    a backend this machine cannot load (torch is an optional extra) is one skipped entry."""
    pairs = []
    for backend in BUILTIN_NAMES:
        try:
            loaded = load_backend(backend)
        except BackendLoadError as exc:
            pairs.append(pytest.param(None, backend, id=f"{backend}-not-loadable", marks=pytest.mark.skip(_why(backend, exc))))
            continue
        pairs += [pytest.param(op, backend, id=f"{op}-{backend}") for op in OPS
                  if any(loaded.supports(op, dtype) for dtype in spec_for(op).dtypes)]
    return pairs


# Only what is claimed is a test: a backend that does not implement a kernel has nothing to pass.
CLAIMED = _claimed()

# The slow oracles loop in Python over every index: a plan whose tensors hold more elements than
# this is left out of the comparison (and counted in the test's output).  The slowest oracle,
# carafe_backward's, takes about 2 s for 200 000 elements.
ORACLE_ELEMENTS = 200_000
# Random plans: the first ORACLE_RANDOM_COUNT within the budget among ORACLE_RANDOM_DRAWS drawn
# (plan i of a random suite is the same whatever the count).
ORACLE_RANDOM_COUNT, ORACLE_RANDOM_DRAWS = 6, 24
# Cases sent through mlu-ops' text format (much slower than its binary one): the smallest few.
PROTOTXT_CASES = 2


# ----------------------------------------------------------------------------- records

@pytest.mark.parametrize("op", OPS)
def test_every_kernel_has_a_record(op):
    kernels.record(op)
    kernels.conformance_files(op)


def test_every_record_is_a_kernel():
    """A record whose spec is gone (or misnamed) would test nothing: its file names a kernel."""
    named = {p.stem for p in kernels.RECORDS_DIR.glob("*.py") if p.stem.endswith(("_forward", "_backward"))}
    assert named <= set(OPS), f"records without a spec: {sorted(named - set(OPS))}"


@pytest.mark.parametrize("op", OPS)
def test_record_lists_every_mluops_file_of_its_kernel(op):
    """A conformance file of the kernel that its record leaves out would be tested by nothing."""
    on_disk = {p for p in (CONFORMANCE / "mlu-ops" / op).glob("*") if p.suffix in (".pb", ".prototxt", ".pbtxt")}
    assert on_disk <= set(kernels.conformance_files(op)), sorted(map(str, on_disk))


# ----------------------------------------------------------------------------- reference == oracle

def _planned_call(spec, plan):
    """(inputs present, params, output shapes) of a valid plan, drawn as the generator draws them."""
    plan = replace(plan, params=interface_params(spec, plan.params))
    lay = layout_of(spec, plan)
    inputs = {n: a for n, a in draw_inputs(spec, plan, lay).items() if a is not None}
    return inputs, dict(plan.params), {n: tuple(lay.shapes[n]) for n in spec.outputs}


def _elements(spec, plan) -> int:
    return sum(element_count(s) for s in layout_of(spec, plan).shapes.values())


def _affordable(spec, suite: str) -> tuple[list, int]:
    """(the plans of ``suite`` the oracle checks, how many it left out over ORACLE_ELEMENTS)."""
    checked, left_out = [], 0
    for plan in plan_suite(spec, suite, ORACLE_RANDOM_DRAWS):
        if suite == "random" and len(checked) == ORACLE_RANDOM_COUNT:
            break
        if _elements(spec, plan) <= ORACLE_ELEMENTS:
            checked.append(plan)
        else:
            left_out += 1
    return checked, left_out


@pytest.mark.parametrize("suite", ["random", "boundary"])
@pytest.mark.parametrize("op", OPS)
def test_reference_matches_oracle(op, suite):
    oracle = kernels.record(op).oracle
    spec = spec_for(op)
    small, left_out = _affordable(spec, suite)
    assert small, f"{op}: every {suite} plan is over {ORACLE_ELEMENTS} elements; the oracle checks nothing"
    mismatched = []
    for plan in small:
        inputs, params, out_shapes = _planned_call(spec, plan)
        with np.errstate(all="ignore"):     # inf * 0 and inf - inf are meant: the formulas say so
            expected = oracle(dict(inputs), dict(params), dict(out_shapes))
        got = gen.golden(op, inputs, params, out_shapes=out_shapes)
        assert set(expected) == set(out_shapes), f"{op}: the oracle returns {sorted(expected)}"
        for name in out_shapes:
            try:
                # NaN and inf must sit at the same places; finite values agree to float64 rounding.
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-12, atol=1e-12)
            except AssertionError as exc:
                mismatched.append(f"{plan.name} {name}: {str(exc).strip().splitlines()[-3:]}")
    print(f"{op} {suite}: {len(small)} plans checked, {left_out} over {ORACLE_ELEMENTS} elements left out")
    assert not mismatched, f"{op}: reference != oracle in {len(mismatched)} case(s):\n" + "\n".join(mismatched[:10])


# ----------------------------------------------------------------------------- mmcv's own test data

def _builtin_backend(name: str):
    try:
        return load_backend(name)
    except BackendLoadError as exc:       # torch is an optional extra
        pytest.skip(_why(name, exc))


@pytest.mark.parametrize("op, backend", [p for p in CLAIMED if p.values[0] is None
                                         or getattr(kernels.record(p.values[0]), "mmcv_data", None)])
def test_backend_reproduces_mmcv_data(op, backend):
    data = kernels.record(op).mmcv_data
    spec, loaded = spec_for(op), _builtin_backend(backend)
    for name, params, inputs, expected, tolerance in data():
        dtype = next(iter(expected.values())).dtype.name
        if not loaded.supports(op, dtype):
            pytest.skip(f"{backend} does not claim {op} in {dtype}")
        request = Request(op=op, params=dict(params), inputs=dict(inputs),
                          outputs={n: TensorInfo(tuple(e.shape), e.dtype, spec.outputs[n].layout)
                                   for n, e in expected.items()},
                          layouts={n: spec.inputs[n].layout for n in inputs})
        got = loaded.run(request)
        for output, e in expected.items():
            error = np.abs(got[output].astype(np.float64) - e).max() / np.abs(e).max()
            assert error <= tolerance, f"{op} {name}: {backend}'s {output} is {error:.3g} off mmcv's data"


# ----------------------------------------------------------------------------- backends and bugs on the suites

def _failing(results) -> list:
    return [r for r in results if r.status in FAILING]


def _summary(results, limit=12) -> str:
    shown = [f"{r.suite}/{r.name} {r.status} {failed_metrics(r) or r.message[:100]}" for r in _failing(results)[:limit]]
    return f"{statuses(results)}" + "".join(f"\n  {line}" for line in shown)


def _baseline_fails_too(op: str, result) -> bool:
    """Whether a case fails only thresholds whose baseline (the reference interface the spec names)
    is itself over the docs' cap there: the docs' rule fails the reference interface too."""
    return fails_only_by_its_own_error_over_the_cap(result, spec_for(op).criteria.baseline)


@pytest.mark.parametrize("op, backend", CLAIMED)
def test_backend_passes_generated_suite(suites, op, backend):
    loaded = _builtin_backend(backend)
    results = run_dir(suites(op), loaded)
    assert [r for r in results if r.status == PASSED], f"{op}: {backend} passed nothing: {statuses(results)}"
    # The reference interface itself fails where its own error is over the docs' cap (by the rule).
    failing = [r for r in _failing(results) if not fails_only_by_its_own_error_over_the_cap(r, backend)]
    assert not failing, f"{op}: {backend} fails: {_summary(failing)}"


@pytest.mark.parametrize("op", OPS)
def test_correct_copy_and_controls_pass(suites, op):
    """The bug-free copy the planted bugs are made from, and the legitimate variants (controls) of
    gen/kernels/<family>/planted*.py, pass every case: a bug's failure is then the bug's."""
    if not planted_bugs(op) and bug_free_copy(op) is None:
        pytest.skip(f"{op} has no planted bugs (gen/kernels/<family>/planted*.py is optional)")
    assert bug_free_copy(op) is not None, f"{op}: gen/kernels/<family>/planted*.py has bugs and no bug-free copy (CORRECT) to check them by"
    for name, compute in {"the bug-free copy": bug_free_copy(op), **planted_controls(op)}.items():
        results = run_dir(suites(op), checked_backend(f"{op} {name}", compute))
        assert not _failing(results), f"{op}: {name} fails: {_summary(results)}"


@pytest.fixture(scope="session")
def strict_suites(tmp_path_factory):
    """strict_suites(op) -> the op's random and boundary cases with thresholds from lowp (the
    stricter policy than the docs' rule), generated once."""
    made = {}

    def get(op):
        if op not in made:
            made[op] = generate(op, tmp_path_factory.mktemp(f"strict-{op}"), suites=("random", "boundary"),
                                baseline="lowp")
        return made[op]
    return get


@pytest.mark.parametrize("op, bug", [pytest.param(op, bug, id=f"{op}-{bug}") for op in OPS for bug in planted_bugs(op)])
def test_planted_bug_fails_the_suite(suites, strict_suites, op, bug):
    """A buggy copy fails at least one case that the reference interface itself passes; a bug the
    record says the docs' rule accepts fails only cases the reference interface fails too, and the
    stricter lowp thresholds catch it."""
    name = f"{op}-{bug}"
    if bug == COUNT_BUG:   # past 2^16 items: the shared suites' cases are smaller than that
        pytest.skip("a 16-bit count bug is judged on the count cases, by tests/test_count_bugs.py")
    results = run_dir(suites(op), checked_backend(name, planted_bugs(op)[bug]))
    # A crash would be the copy's fault, not the suite catching the bug.
    assert not [r for r in results if r.status == ERROR], f"{name}: the buggy copy crashed: {_summary(results)}"
    caught = [r for r in results if r.status in FAILING and not _baseline_fails_too(op, r)]
    if bug not in kernels.accepted_bugs(op):
        assert caught, f"{name}: passed every case that the reference interface passes: {_summary(results)}"
        return
    assert not caught, f"{name}: fails a case the reference interface passes; drop it from ACCEPTED_BUGS: " \
                       f"{_summary(results)}"
    strict = run_dir(strict_suites(op), checked_backend(name, planted_bugs(op)[bug]))
    assert [r for r in strict if r.status == FAILED], f"{name}: lowp thresholds no longer catch it: {_summary(strict)}"


@pytest.mark.parametrize("op", OPS)
def test_every_missing_check_is_caught(suites, op):
    assert_each_missing_check_caught(suites(op) / "invalid", op)


def test_a_missing_check_is_caught_in_each_invalid_dtype(tmp_path, monkeypatch):
    """An invalid suite made in several dtypes (suites.invalid.dtypes) has one case per check and
    dtype: each of them, and no other case, fails a backend without that check (the helper once
    expected a single case per check)."""
    op = "masked_im2col_forward"
    specs = tmp_path / "specs"
    specs.mkdir()
    text = spec_for(op).path.read_text()
    assert "\n  invalid:\n    base:" in text
    (specs / f"{op}.yaml").write_text(text.replace("\n  invalid:\n", "\n  invalid:\n    dtypes: [float16, float32]\n"))
    monkeypatch.setenv("OPCASE_SPECS", str(specs))
    spec_for.cache_clear()
    try:
        invalid = generate(op, tmp_path / "out", suites=("invalid",)) / "invalid"
        names = [p.name for p in invalid.glob("*.opcase")]
        assert any(n.endswith("-float16.opcase") for n in names) and any(n.endswith("-float32.opcase") for n in names)
        assert_each_missing_check_caught(invalid, op)
    finally:
        monkeypatch.delenv("OPCASE_SPECS")
        spec_for.cache_clear()


# ----------------------------------------------------------------------------- mlu-ops format

def _assert_same_bits(got, expected, what):
    got, expected = np.asarray(got), np.asarray(expected)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype), what
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(expected).tobytes(), what


@pytest.mark.parametrize("op", OPS)
def test_mluops_round_trip(suites, tmp_path, op):
    """Every valid generated case, written as an mlu-ops case file and read back: the same params,
    inputs and goldens, bit for bit (binary format; the smallest non-empty cases in the text format too)."""
    cases = [c for c in map(load, find([suites(op)])) if c.expect == "ok"]
    # The text format takes the smallest cases with some data (it is slow on large ones).
    cases.sort(key=lambda c: (not any(t.data.size for t in c.outputs.values()),
                              sum(t.data.nbytes for t in c.inputs.values() if not t.absent)))
    assert cases
    for index, case in enumerate(cases):
        for text in (False, True) if index < PROTOTXT_CASES else (False,):
            where = f"{op}/{case.suite}/{case.name} ({'prototxt' if text else 'pb'})"
            path = save_mluops(case, tmp_path / f"{case.suite}-{case.name}", text=text)
            mlu = load_mluops(path)
            back = case_from_mluops(mlu, case.name)
            assert (back.op, back.params) == (case.op, case.params), where
            for name, t in case.inputs.items():
                assert back.inputs[name].absent == t.absent, (where, name)
                if not t.absent:
                    _assert_same_bits(back.inputs[name].data, t.data, (where, name))
            for name, t in case.outputs.items():
                out = mlu.outputs[name]
                assert (tuple(out.shape), out.dtype) == (tuple(t.shape), t.dtype), (where, name)
                if t.data.size:      # a zero-element golden has no data to carry
                    _assert_same_bits(out.data, t.data, (where, name))


@pytest.fixture(scope="session")
def imported_conformance(tmp_path_factory):
    """imported_conformance(op) -> (the import's outcomes, the directory of the cases) of the record's
    CONFORMANCE files, imported once, judged by the docs' rule (far stricter than the files' own
    thresholds, which tests/test_interop.py checks the import keeps)."""
    made = {}

    def get(op):
        if op not in made:
            out = tmp_path_factory.mktemp(f"conformance-{op}")
            made[op] = import_all(kernels.conformance_files(op), out, baseline=None, rule=DOCS_RULE), out / op
        return made[op]
    return get


@pytest.mark.parametrize("op", OPS)
def test_conformance_files_import(imported_conformance, op):
    outcomes, _ = imported_conformance(op)
    assert [o.status for o in outcomes] == ["written"] * len(kernels.conformance_files(op)), \
        [(str(o.source), o.message) for o in outcomes]
    assert {load(o.target, verify=False).op for o in outcomes} <= {op}


@pytest.mark.parametrize("op, backend", CLAIMED)
def test_backend_passes_conformance_files(imported_conformance, op, backend):
    """Every backend that claims the kernel passes mlu-ops' own cases (the reference, always)."""
    loaded = _builtin_backend(backend)
    outcomes, directory = imported_conformance(op)
    if not outcomes:
        pytest.skip(f"{op}'s record names no conformance file")
    results = run_dir(directory, loaded)
    if backend != "reference" and all(r.status == "skipped" for r in results):
        pytest.skip(f"{backend} does not claim {op} in the dtypes of its conformance files")
    assert len(results) == len(outcomes), statuses(results)
    # The reference interface itself fails where its own error is over the docs' cap (by the rule).
    failing = [r for r in _failing(results) if not fails_only_by_its_own_error_over_the_cap(r, backend)]
    assert not failing, f"{op}: {backend} fails: {_summary(failing)}"
