"""`opcase explain`: every generic mutant and planted bug of every kernel is named first on a case it
fails; correct backends are explained as the arithmetic they are (the reference, lowp's float32, the
mmcv emulation on the conformance cases); the backend runs in a worker and hands over data; the
explanation names regions; `opcase run --explain` carries the headline into the reports.

Kernels come from the specs (gen.core.registry.known_ops), mutants and bugs from harness.studies.mutants:
nothing here names a kernel except the channel-tail example, which is the README's.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import MMCV_CUDA, mmcv_cuda_case, mmcv_cuda_case_ids, run_cli
from test_processes import leftovers, marked
import kernels
from gen.kernels.shared.planted_counts import COUNT_BUG
from gen.core.casefile import find, load
from gen.core.rounding import round_to
from gen.core.registry import explain_variants, known_ops, planted_bugs, spec_for
from gen.core.verdict import FAILED, request_for
from harness.backends import mmcv_backend
from harness.backends.builtin import lowp, reference
from harness.cli import main
from harness.cli.interop import import_all
from harness.studies.explain import (Score, computed_variants, explain_outputs, region_text, same_bits, ulps_apart,
                             variant_name, variants)
from harness.studies.mutants import CHECKS, Call, NotApplicable, mutants, outcome
from gen.core.backend import Backend, Request, TensorInfo
from harness.judge.runner import new_result, run_loaded

OPS = known_ops()
TESTS = Path(__file__).resolve().parent


def _explain(*args):
    return CliRunner().invoke(main, ["explain", *map(str, args)])


def _valid_cases(directory: Path) -> list:
    return [(p, c) for p, c in ((p, load(p)) for p in find([directory])) if c.expect == "ok"]


def _top(explanation) -> list:
    """The variants ranked first on an output: the first group and any group scored the same."""
    size = explanation.size
    first = explanation.ranking[0].rank_key(size)
    return [name for s in explanation.ranking if s.rank_key(size) == first for name in s.names]


# --------------------------------------------------------------------------- every bug named first

@pytest.mark.slow   # explains every mutant and planted bug of a kernel
@pytest.mark.parametrize("op", OPS)
def test_every_mutant_and_planted_bug_is_ranked_first_on_a_case_it_fails(suites, op):
    """For every generic mutant and planted bug of the kernel: on the first case of the generated suite
    that it fails (judged as `opcase run` judges it), explain ranks its own variant first on every
    output it got wrong."""
    spec = spec_for(op)
    bugs = [m for m in mutants(spec, "reference") if m.kind != CHECKS]
    cases = _valid_cases(suites(op))
    assert cases
    catalogue = variants(op)
    assert {variant_name(m) for m in bugs} <= {v.name for v in catalogue}
    computed = {}     # each case's variants, computed once for all the bugs
    explained, wrong = [], []
    for m in bugs:
        for path, case in cases:
            request = request_for(case)
            try:
                with np.errstate(all="ignore"):   # a mutant's arithmetic (a param off by one) may divide by 0
                    result = outcome(lambda: m.apply(Call(request, reference())))
            except NotApplicable:
                continue
            if result[0] != "outputs":
                continue
            replay = Backend(name=m.name, origin="test", run=lambda request, produced=result[1]: produced)
            judged = run_loaded(case, replay, new_result(path, m.name))
            if judged.status != FAILED:
                continue
            if path not in computed:
                computed[path] = list(computed_variants(request, catalogue))
            found, _ = explain_outputs(request, result[1], catalogue, computed[path])
            golden = reference().run(request)
            for e in found:
                if same_bits(np.asarray(result[1][e.output]), golden[e.output]).all():
                    continue   # an output the bug left right says nothing about it
                if variant_name(m) not in _top(e):
                    wrong.append(f"{m.name} on {case.suite}/{case.name} {e.output}: ranked first {_top(e)}: {e.text}")
            explained.append(m.name)
            break
    assert not wrong, "\n".join(wrong)
    # Every planted bug fails some case of the suite (tests/test_kernels.py), so each was explained here;
    # but the 16-bit count bug, which acts past 2^16 items only, beyond the shared suites' cases
    # (tests/test_count_bugs.py judges it on the count cases).
    planted = [m.name for m in bugs if m.kind == "planted" and m.name not in kernels.accepted_bugs(op)
               and m.name != COUNT_BUG]
    assert set(planted) <= set(explained), set(planted) - set(explained)
    assert explained


@pytest.mark.slow   # explains each variant of a kernel as the backend
@pytest.mark.parametrize("op", [op for op in OPS if explain_variants(op)])
def test_each_kernel_variant_is_named_when_it_is_the_backend(suites, op):
    """A kernel's own variants (its VARIANTS tables, found by convention): each, as the backend, is
    ranked first on every case where its bits differ from the reference's and mmcv's."""
    catalogue = variants(op)
    for name, function in explain_variants(op).items():
        named = 0
        for path, case in _valid_cases(suites(op)):
            request = request_for(case)
            variant = next(v for v in catalogue if v.name == name)
            try:
                produced = variant.compute(Call(request, reference()))
            except Exception:  # noqa: BLE001 - a dtype the variant (an mmcv emulation) has no kernel for
                continue
            found, _ = explain_outputs(request, produced, catalogue)
            for e in found:
                others = [s for s in e.ranking if {"reference", "mmcv"} & set(s.names)]
                if all(s.identical < e.size for s in others):
                    assert name in _top(e) and e.ranking[0].identical == e.size, (case.name, e.text)
                    named += 1
        assert named, f"{op} {name}: no case where it differs from the reference and mmcv"


# --------------------------------------------------------------------------- correct backends

@pytest.mark.parametrize("op", OPS)
def test_correct_backends_are_explained_as_their_arithmetic(suites, op):
    """The reference matches the reference bit for bit, and lowp float32 arithmetic, on every valid case."""
    catalogue = variants(op)
    for path, case in _valid_cases(suites(op))[:4]:
        request = request_for(case)
        computed = list(computed_variants(request, catalogue))
        for backend, name in (("reference", "reference"), ("lowp", "float32_arithmetic")):
            produced = {"reference": reference, "lowp": lowp}[backend]().run(request)
            found, _ = explain_outputs(request, produced, catalogue, computed)
            for e in found:
                assert name in e.ranking[0].names and e.ranking[0].identical == e.size, (backend, case.name, e.text)
                # Named by the simplest variant of its group: the reference where lowp's bits are the
                # reference's, else the float32 arithmetic itself.
                first = "reference" if "reference" in e.ranking[0].names else name
                assert e.text.startswith("matches ") and f"[{first}]" in e.text.split("(the same bits")[0], e.text


@pytest.fixture(scope="module")
def conformance(tmp_path_factory):
    """The mlu-ops conformance files (tests/kernels records) of every kernel the mmcv emulation has,
    imported into one directory."""
    out = tmp_path_factory.mktemp("conformance")
    files = [f for op in OPS if mmcv_backend.kernel(op) is not None for f in kernels.conformance_files(op)]
    outcomes = import_all(files, out, baseline=None)
    assert [o.status for o in outcomes] == ["written"] * len(files)
    return out


@pytest.mark.slow   # imports and explains every conformance case
def test_mmcv_emulation_is_explained_as_mmcv_bit_for_bit_on_the_conformance_cases(conformance, tmp_path):
    """The mmcv backend, run in a worker by `opcase explain`, matches the 'mmcv' variant on 100 % of every
    output of every conformance case of a kernel it has."""
    report = tmp_path / "explain.json"
    result = _explain(conformance, "--backend", "mmcv", "--json", report)
    doc = json.loads(report.read_text())
    explained = [c for c in doc["cases"] if c["status"] == "outputs"]
    assert explained, result.output
    for c in explained:
        for o in c["outputs"]:
            top = o["ranking"][0]
            assert "mmcv" in top["variants"] and top["identical_fraction"] == 1.0, (c["case"], o["explanation"])
            assert o["explanation"].startswith("matches "), o["explanation"]
    # A dtype mmcv lacks is unsupported, never wrongly explained.
    assert {c["status"] for c in doc["cases"]} <= {"outputs", "unsupported"}, result.output
    assert result.exit_code == 0, result.output


def _captured_request(op: str, meta: dict, inputs: dict, outputs: dict) -> Request:
    spec = spec_for(op)
    return Request(op=op, params=dict(meta["params"]), inputs=inputs,
                   outputs={n: TensorInfo(tuple(a.shape), a.dtype, spec.outputs[n].layout) for n, a in outputs.items()},
                   layouts={n: spec.inputs[n].layout for n in inputs})


@pytest.mark.slow   # explains a kernel's recorded mmcv CUDA outputs
@pytest.mark.parametrize("op", sorted(p.stem for p in MMCV_CUDA.glob("*.npz")))
def test_mmcv_real_cuda_outputs_are_explained_as_mmcv(op):
    """mmcv's own outputs, captured on a GPU (tests/conformance/mmcv-cuda): explain ranks the mmcv
    emulation, or one of the kernel's own variants (another order of atomic adds), first on every
    output, and says where it is exact."""
    allowed = {"mmcv"} | set(explain_variants(op))
    catalogue = variants(op)
    exact = 0
    for case_id in mmcv_cuda_case_ids(op):
        meta, inputs, outputs = mmcv_cuda_case(op, case_id)
        found, _ = explain_outputs(_captured_request(op, meta, inputs, outputs), outputs, catalogue)
        for e in found:
            assert allowed & set(_top(e)), (meta["name"], e.output, e.text)
            exact += e.ranking[0].identical == e.size
    assert exact, f"{op}: mmcv's outputs matched the emulation bit for bit on no output"


# --------------------------------------------------------------------------- the parts

@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_round_half_away_from_zero_breaks_ties_away_and_rounds_the_rest_to_nearest(dtype):
    """On every float16 (a sample of float32) and the midpoints beside it: a midpoint goes to the
    neighbour of larger magnitude; anything else as round to nearest even."""
    values = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(dtype) if dtype == np.float16 else \
        np.random.default_rng(0).integers(0, 0x7F800000, 20000, dtype=np.uint32).view(np.float32)
    values = np.concatenate([values, -values])
    with np.errstate(over="ignore"):   # the largest value's neighbour is inf: left out below
        above = np.nextafter(values, np.copysign(np.inf, values).astype(dtype))
    finite = np.isfinite(above)
    low, high = values[finite].astype(np.float64), above[finite].astype(np.float64)
    midpoints = (low + high) / 2      # exact in float64
    assert np.array_equal(round_to(midpoints, dtype, "half_away_from_zero"), above[finite])
    off_midpoint = np.nextafter(midpoints, low)
    assert np.array_equal(round_to(off_midpoint, dtype, "half_away_from_zero"), round_to(off_midpoint, dtype))
    assert np.array_equal(round_to(low, dtype, "half_away_from_zero"), values[finite])


def test_ulps_and_bits():
    a = np.array([1.0, -0.0, np.nan, 1.0, -1.0], np.float32)
    b = np.array([np.nextafter(np.float32(1), np.float32(2)), 0.0, np.nan, np.nan, 1.0], np.float32)
    assert same_bits(a, b).tolist() == [False, False, True, False, False]
    apart = ulps_apart(a, b)
    assert apart[:3].tolist() == [1, 0, 0] and apart[3] == np.iinfo(np.int64).max
    assert apart[4] == 2 * int(np.float32(1).view(np.int32))


def test_ranking_puts_identical_elements_before_diff1_and_diff1_before_diff3():
    near_everywhere = Score(["near"], identical=0, within_ulp=100, diff1=1e-8, diff3=1e-7, max_ulps=1)
    mostly_exact = Score(["exact"], identical=90, within_ulp=90, diff1=0.1, diff3=1.0, max_ulps=10 ** 9)
    smaller_diff1 = Score(["d1"], identical=90, within_ulp=90, diff1=0.05, diff3=5.0, max_ulps=10 ** 9)
    nan_metrics = Score(["nan"], identical=90, within_ulp=90, diff1=float("nan"), diff3=0.0, max_ulps=-1)
    ranked = sorted([near_everywhere, nan_metrics, mostly_exact, smaller_diff1], key=lambda s: s.rank_key(100))
    assert [s.names[0] for s in ranked] == ["d1", "exact", "nan", "near"]


def test_region_text_names_tails_rows_and_scatter():
    mask = np.zeros((1, 3, 4, 129), bool)
    mask[..., 96:] = True
    assert region_text(mask, "NHWC").startswith("the last 33 channels (C 96..128)")
    mask = np.zeros((2, 3, 4, 5), bool)
    mask[:, 2] = True
    assert region_text(mask, "NHWC") == "the last row H = 2 (40 elements)"
    mask = np.zeros((2, 3, 4, 5), bool)
    mask[1, 1] = True
    assert region_text(mask, "NHWC") == "the last batch N = 1, row H = 1 (20 elements)"
    mask = np.zeros((2, 3, 4, 5), bool)
    mask[0, 0, 0, 0] = mask[1, 2, 3, 4] = True
    assert region_text(mask, "NHWC") == "2 scattered elements"
    assert region_text(np.ones(7, bool), "ARRAY") == "all 7 elements"


@pytest.fixture(scope="module")
def tail_case(tmp_path_factory):
    """The README's example: a carafe case of 129 channels, made from its descriptor."""
    out = tmp_path_factory.mktemp("tail")
    result = CliRunner().invoke(main, ["gen", "--case", "carafe_forward:float32:N=1,H=3,W=4,C=129:kernel_size=3,"
                                       "group_size=1,scale_factor=2:seed=1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return find([out])[0]


def test_a_partial_explanation_says_which_variant_explains_which_elements(tail_case, tmp_path):
    """A backend that leaves the last partial block of 96 channels unwritten (a width no mutant has):
    the reference elsewhere, the last 33 channels left 0; run in a worker, the ranking in --json."""
    report = tmp_path / "explain.json"
    result = _explain(tail_case, "--backend", "shrink_backends:channel_tail", "--json", report)
    assert result.exit_code == 0, result.output
    assert "the last 33 channels (C 96..128) (1,584 elements): 0 (left unwritten in a zeroed buffer)" in result.output
    output = json.loads(report.read_text())["cases"][0]["outputs"][0]
    pieces = {p["region"]: p["variants"] for p in output["pieces"]}
    assert "left_zero" in pieces["the last 33 channels (C 96..128) (1,584 elements)"]
    assert any("reference" in v for v in pieces.values())
    assert output["ranking"][0]["identical_fraction"] < 1


def test_run_explain_adds_the_headline_to_the_failing_case(tail_case, tmp_path):
    html, report = tmp_path / "r.html", tmp_path / "r.json"
    result = run_cli(tail_case, "--backend", "shrink_backends:channel_tail", "--explain", "--html", html,
                     "--json", report)
    assert result.exit_code == 1, result.output
    line = next(l for l in result.output.splitlines() if l.strip().startswith("EXPLAIN:"))
    assert "left_zero" in line and "reference" in line
    assert "explained (opcase explain)" in html.read_text()
    assert "left_zero" in json.loads(report.read_text())["cases"][0]["explanation"]
    # Without --explain, nothing is run twice and no line is added.
    plain = run_cli(tail_case, "--backend", "shrink_backends:channel_tail")
    assert "EXPLAIN:" not in plain.output


def test_a_backend_that_dies_or_hangs_is_reported_not_explained(tail_case, monkeypatch):
    died = _explain(tail_case, "--backend", "ending_backends:os_exit_0")
    assert died.exit_code == 1, died.output
    assert "worker exited with status 0" in died.output, died.output
    marker = f"explain-{id(died)}"
    monkeypatch.setenv("OPCASE_TEST_MARKER", marker)
    hung = _explain(tail_case, "--backend", "ending_backends:starts_helper_and_hangs", "--timeout", "1")
    assert hung.exit_code == 1 and "timed out after 1 s" in hung.output, hung.output
    assert leftovers(marker) == [], "the worker's helper outlived it"
    missing = _explain(tail_case, "--backend", "no_such_module:run")
    assert missing.exit_code == 2 and "cannot import no_such_module" in missing.output, missing.output


def test_a_planted_bug_run_as_a_backend_in_a_worker_is_named(suites, tmp_path):
    """The README's way to run a planted bug (tests/planted_backends.py), through `opcase explain`'s worker:
    on a case the bug fails, the --json ranking puts the planted variant first, bit for bit."""
    op = next(op for op in OPS if planted_bugs(op))
    bug = next(iter(planted_bugs(op)))
    for path, case in _valid_cases(suites(op)):
        judged = run_cli(path, "--backend", f"planted_backends:{bug}")
        if judged.exit_code != 1:
            continue
        report = tmp_path / "explain.json"
        result = _explain(path, "--backend", f"planted_backends:{bug}", "--json", report)
        assert result.exit_code == 0, result.output
        doc = json.loads(report.read_text())["cases"][0]
        assert any(f"planted:{bug}" in o["ranking"][0]["variants"] and o["ranking"][0]["identical_fraction"] == 1
                   for o in doc["outputs"]), result.output
        return
    pytest.fail(f"{op} {bug}: no case of the generated suite fails it")


def test_an_invalid_case_is_judged_not_compared(suites):
    invalid = find([suites(OPS[0]) / "invalid"])[0]
    result = _explain(invalid, "--backend", "reference")
    assert result.exit_code == 0 and "the backend rejected it as expected; nothing to compare" in result.output, \
        result.output
    accepted = _explain(invalid, "--backend", "bad_backends:accepts_everything")
    assert "computed it (wrongly accepted)" in accepted.output or "did not reject it" in accepted.output, \
        accepted.output


def test_a_case_over_the_memory_bound_is_refused(tail_case, monkeypatch):
    import harness.studies.explain   # the module whose memory bound is lowered
    monkeypatch.setattr(harness.studies.explain, "physical_memory", lambda: 2 * 1024)
    result = _explain(tail_case, "--backend", "reference")
    assert result.exit_code == 5 and "not explained: it would hold about" in result.output, result.output


def test_a_worker_does_not_outlive_opcase_killed(tail_case, tmp_path):
    """opcase SIGKILLed while its worker's backend hangs (with a helper process of its own): the
    lifeline takes the worker and the helper with it."""
    marker = f"explain-killed-{os.getpid()}"
    env = {**os.environ, "OPCASE_TEST_MARKER": marker,
           "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    opcase = subprocess.Popen([sys.executable, "-m", "harness.cli", "explain", str(tail_case), "--backend",
                               "ending_backends:starts_helper_and_hangs"], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        give_up = time.monotonic() + 60
        while len(marked(marker)) < 3:    # opcase, its worker, the helper
            assert time.monotonic() < give_up, marked(marker)
            time.sleep(0.2)
    finally:
        opcase.send_signal(signal.SIGKILL)
        opcase.wait()
    left = leftovers(marker, within=10)
    for line in left:   # should the lifeline fail, this test does not leave them behind either
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert left == []
