"""`opcase power`: generic planted bugs and controls, judged on the committed suite and on small
suites made for one property each.

The measure itself: `opcase power cases` on the committed suite (its table is printed; run
with -s to see it), every control passing, every parameter check's mutant killed.  Then each
transformation is checked to be what it claims on a real call, and the verdicts (killed,
survived, n/a, a failing control, a base that fails) and exit statuses on suites built for them.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
from gen.core.registry import known_ops, spec_for
from harness.backends.builtin import reference
from gen.core.casefile import load, save
from harness.cli import main
from gen.core.backend import InvalidArgument
from harness.studies.power import case_shape
from harness.studies.mutants import CONTROL, Call, NotApplicable, controls, mutants, outcome, same_outcome
from gen.core.verdict import request_for

COMMITTED = REPO / "cases"
CARAFE_F32 = COMMITTED / "carafe_forward/random/r001-N1-H3-W3-G4-Cg3-C12-kernel_size5-group_size4-scale_factor1-float32.opcase"
DEFORM_F32 = next((COMMITTED / "deform_roi_pool_forward/random").glob("r001-N2-H12-W16-C2-R12-*-float32.opcase"))
IM2COL_F32 = COMMITTED / "masked_im2col_forward/random/r001-C19-H10-W4-M74-kernel_h4-kernel_w1-pad_h2-pad_w1-float32.opcase"


def _power(*args):
    return CliRunner().invoke(main, ["power", *map(str, args)])


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """(exit code, output, JSON report) of `opcase power cases` on the committed suite."""
    report = tmp_path_factory.mktemp("power") / "power.json"
    result = _power(COMMITTED, "--json", report)
    print(result.output)   # the measure of the committed suite
    return result.exit_code, result.output, json.loads(report.read_text())


def _mutant(op: str, name: str):
    spec = spec_for(op)
    return next(m for m in mutants(spec, "reference") + controls(spec) if m.name == name)


def _apply(op: str, name: str, path: Path) -> tuple[dict, dict, object]:
    """(the mutant's outputs, the reference's, the case) on one committed case."""
    case = load(path)
    base = reference()
    produced = _mutant(op, name).apply(Call(request_for(case), base))
    return produced, base.run(request_for(case)), case


# ----------------------------------------------------------------------------- the committed suite

@pytest.mark.slow
def test_committed_suite_measure(committed):
    code, output, doc = committed
    kernels = {k["kernel"]: k for k in doc["kernels"]}
    assert set(kernels) == {p.name for p in COMMITTED.iterdir() if p.is_dir()}
    assert code == (0 if doc["summary"]["ok"] else 1), output
    assert not doc["base_problems"], doc["base_problems"]
    # Every kernel's table row, and every survivor named with what would kill it.
    for kernel in kernels:
        assert any(line.startswith(kernel) for line in output.splitlines()), kernel
    for m in doc["mutants"]:
        if m["verdict"] == "survived":
            assert f"SURVIVED{' (planted)' if m['kind'] == 'planted' else ''}  {m['kernel']}  {m['name']}:" in output
    s = doc["summary"]
    assert s["killed"] >= 0.9 * (s["killed"] + s["survived"]), output


@pytest.mark.slow
def test_committed_suite_passes_every_control(committed):
    _, output, doc = committed
    failing = [c for c in doc["controls"] if c["verdict"] == "failed"]
    assert not failing, output
    judged = {(c["kernel"], c["name"]) for c in doc["controls"] if c["verdict"] == "passed"}
    # Each kernel with float arithmetic (the accumulating ones, judged by dynamic thresholds) has its
    # float32 and -0.0 controls judged, not just n/a.
    arithmetic = [op for op in known_ops() if spec_for(op).criteria.mode == "dynamic"]
    assert arithmetic
    for kernel in arithmetic:
        assert {(kernel, "float32_arithmetic"), (kernel, "negative_zero")} <= judged, kernel
    assert {("carafe_forward", "float32_taps_in_sequence"), ("border_align_backward", "float32_scatter_order")} <= judged


@pytest.mark.slow
def test_committed_suite_kills_every_missing_check_it_has_a_case_for(committed):
    _, output, doc = committed
    checks = [m for m in doc["mutants"] if m["kind"] == "checks"]
    assert checks
    assert all(m["verdict"] in ("killed", "n/a") for m in checks), \
        [m for m in checks if m["verdict"] not in ("killed", "n/a")]
    assert sum(m["verdict"] == "killed" for m in checks) >= 0.9 * len(checks)
    for m in checks:
        if m["verdict"] == "n/a":
            assert m["reason"].startswith("no case has an invalid case that breaks"), m


@pytest.mark.slow
def test_committed_suite_kills_the_planted_bugs_of_the_tests(committed):
    """The kernel-specific bugs of gen/kernels/<family>/planted*.py are part of the measure."""
    _, _, doc = committed
    planted = {(m["kernel"], m["name"]): m["verdict"] for m in doc["mutants"] if m["kind"] == "planted"}
    assert planted[("carafe_forward", "mask_order_kw_kh")] == "killed"
    assert planted[("psamask_forward", "collect_distribute_swapped")] == "killed"
    assert planted[("masked_im2col_forward", "pad_sign_flipped")] == "killed"


@pytest.mark.slow
def test_every_kill_of_the_committed_suite_rests_on_two_case_shapes(committed):
    """No bug is one case shape away from surviving: every killed generic mutant and planted bug
    fails cases of two distinct shapes or more (a check's mutant aside: its check has one invalid
    case by design)."""
    _, output, doc = committed
    killed = [m for m in doc["mutants"] if m["verdict"] == "killed" and m["kind"] != "checks"]
    assert killed
    fragile = [m for m in killed if m["failing_shapes"] < 2]
    # A bug that only the hunt's finds kill (no designed case does) is named FRAGILE, to be hunted
    # further; the rule holds for every kill the designed suites make.
    designed = [f"{m['kernel']} {m['name']}: {m['failing']} case(s) of {m['failing_shapes']} shape(s)"
                for m in fragile if not all("/hunt/" in f["case"] for f in m["failing_cases"])]
    assert not designed, designed
    assert doc["summary"]["fragile"] == len(fragile) == output.count("FRAGILE")


def test_fragile_kills_are_named_and_counted(tmp_path):
    """One case is one shape: every bug it kills is FRAGILE under the default --min-kills 2, none under
    --min-kills 1; --kills lists each killed bug with its counts; the exit status is unchanged."""
    suite = _suite(tmp_path, CARAFE_F32)
    result = _power(suite, "--kills", "--json", tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    bug = next(m for m in doc["mutants"] if m["name"] == "mask_order_kw_kh")
    assert (bug["verdict"], bug["failing"], bug["failing_shapes"], bug["fragile"]) == ("killed", 1, 1, True)
    assert "FRAGILE  carafe_forward  mask_order_kw_kh (planted): killed by 1 case(s) of 1 shape(s)" in result.output
    assert "killed  carafe_forward  mask_order_kw_kh (planted): 1 case(s) of 1 shape(s)" in result.output
    killed = [m for m in doc["mutants"] if m["verdict"] == "killed"]
    assert doc["summary"]["fragile"] == sum(m["kind"] != "checks" for m in killed) > 0
    assert result.exit_code == (0 if doc["summary"]["ok"] else 1)
    lenient = _power(suite, "--min-kills", "1")
    assert "FRAGILE" not in lenient.output and "0 kill(s) by fewer than 1 case shapes" in lenient.output
    assert _power(suite, "--min-kills", "0").exit_code == 2


def test_case_shape_is_the_tensors_extents_whatever_the_dtype():
    case = load(CARAFE_F32)
    half = replace(case, inputs={n: replace(t, dtype=np.dtype("float16")) for n, t in case.inputs.items()})
    assert case_shape(half) == case_shape(case)
    wider = replace(case, outputs={n: replace(t, shape=(*t.shape[:-1], t.shape[-1] + 1)) for n, t in case.outputs.items()})
    assert case_shape(wider) != case_shape(case)


# ----------------------------------------------------------------------------- the transformations

def test_round_toward_zero_is_truncation_of_the_float64_result():
    produced, nearest, case = _apply("carafe_forward", "round_toward_zero", CARAFE_F32)
    import gen
    exact = gen.golden(case.op, {n: t.data for n, t in case.inputs.items() if not t.absent}, case.params)["output"]
    got = produced["output"].astype(np.float64)
    assert np.all(np.abs(got) <= np.abs(exact))
    assert np.all(np.abs(got - nearest["output"].astype(np.float64))
                  <= np.spacing(np.abs(nearest["output"])).astype(np.float64))
    assert not np.array_equal(got, nearest["output"])


@pytest.mark.parametrize("width", [16, 64])
def test_last_partial_block_dropped_or_copied(width):
    # data_col [C*kh*kw, M=74]: 74 % 16 = 10, 74 % 64 = 10.
    dropped, base, _ = _apply("masked_im2col_forward", f"drop_last_block_{width}", IM2COL_F32)
    copied, _, _ = _apply("masked_im2col_forward", f"copy_last_block_{width}", IM2COL_F32)
    out, ref = dropped["data_col"], base["data_col"]
    start = 74 - 74 % width
    assert np.all(out[:, start:] == 0) and np.array_equal(out[:, :start], ref[:, :start])
    assert np.array_equal(copied["data_col"][:, start:], ref[:, start - width:start - width + 74 % width])


def test_last_row_col_item_and_batch_follow_axis_roles():
    """deform_roi_pool_forward's output is NHWC [R=12, 2, 6, C] with axes [item, height, width, channel]:
    R counts rois, not a batch, so batch_as_0 leaves it alone and last_item_repeated acts on it."""
    case_outputs = {}
    for name in ("last_row_repeated", "last_col_repeated", "last_item_repeated", "batch_as_0"):
        case_outputs[name], base, _ = _apply("deform_roi_pool_forward", name, DEFORM_F32)
    ref = base["output"]
    row, col, item, batch = (case_outputs[n]["output"] for n in ("last_row_repeated", "last_col_repeated",
                                                                  "last_item_repeated", "batch_as_0"))
    assert np.array_equal(row[:, -1], ref[:, -2]) and np.array_equal(row[:, :-1], ref[:, :-1])
    assert np.array_equal(col[:, :, -1], ref[:, :, -2]) and np.array_equal(col[:, :, :-1], ref[:, :, :-1])
    assert np.array_equal(item[-1], ref[-2]) and np.array_equal(item[:-1], ref[:-1])
    assert np.array_equal(batch, ref)
    # psamask_forward's y is NHWC with a real batch (N = 2): batch_as_0 acts on its N axis.
    produced, base, _ = _apply("psamask_forward", "batch_as_0",
                               COMMITTED / "psamask_forward/boundary/mask_even_4x6-psa_type0-float32.opcase")
    ref = base["y"]
    assert ref.shape[0] == 2 and np.array_equal(produced["y"][1], ref[0]) and not np.array_equal(ref[1], ref[0])


def test_swap_h_w_reads_the_map_as_w_by_h():
    """deform_roi_pool's input is N=2, H=12, W=16: the mutant reads its buffer as 16 x 12."""
    produced, base, case = _apply("deform_roi_pool_forward", "swap_H_W", DEFORM_F32)
    request = request_for(case)
    x = request.inputs["input"]
    swapped = replace(request, inputs={**request.inputs, "input": x.reshape(x.shape[0], x.shape[2], x.shape[1], -1)})
    from harness.backends.builtin import run_in_dtype
    expected = run_in_dtype(swapped, np.float64, skip_checks={c.id for c in spec_for(case.op).checks})
    assert np.array_equal(produced["output"], expected["output"])
    assert not np.array_equal(produced["output"], base["output"])


def test_ignore_optional_input_and_perturbed_param():
    ignored, base, case = _apply("deform_roi_pool_forward", "ignore_offset", DEFORM_F32)
    request = request_for(case)
    reference_without = reference().run(replace(request, inputs={n: a for n, a in request.inputs.items()
                                                                 if n != "offset"}))
    assert np.array_equal(ignored["output"], reference_without["output"])
    perturbed, _, _ = _apply("masked_im2col_forward", "pad_h+1", IM2COL_F32)
    params = {**load(IM2COL_F32).params, "pad_h": 3}
    assert np.array_equal(perturbed["data_col"],
                          reference().run(replace(request_for(load(IM2COL_F32)), params=params))["data_col"])
    with pytest.raises(NotApplicable):   # its tensors fix kernel_h: off by one, the call does not fit them
        _apply("masked_im2col_forward", "kernel_h+1", IM2COL_F32)


def test_missing_check_mutant_accepts_its_invalid_case():
    path = next((COMMITTED / "carafe_forward/invalid").glob("kernel_size_odd-*.opcase"))
    case = load(path)
    base = reference()
    mutant = _mutant("carafe_forward", "no_check_kernel_size_odd")
    base_outcome = outcome(lambda: base.run(request_for(case)))
    assert base_outcome[0] == "raised" and isinstance(base_outcome[1], InvalidArgument)
    result = outcome(lambda: mutant.apply(Call(request_for(case), base)))
    assert not (result[0] == "raised" and isinstance(result[1], InvalidArgument)), result
    assert not same_outcome(result, base_outcome)


def test_controls_are_legitimate_variants():
    nearest, _, _ = _apply("carafe_forward", "negative_zero", CARAFE_F32)
    zeros = nearest["output"] == 0
    assert np.all(np.signbit(nearest["output"][zeros]))
    half = next((COMMITTED / "carafe_forward/random").glob("*float16.opcase"))
    twice, once, _ = _apply("carafe_forward", "double_rounding", half)
    ulp = np.spacing(np.abs(once["output"])).astype(np.float64)
    assert np.all(np.abs(twice["output"].astype(np.float64) - once["output"].astype(np.float64)) <= ulp)
    assert _mutant("carafe_forward", "double_rounding").kind == CONTROL


def test_identity_is_not_a_kill():
    case = load(CARAFE_F32)   # C = 12: no partial 16-block to copy from
    base = reference()
    request = request_for(case)
    base_outcome = outcome(lambda: base.run(request))
    copied = outcome(lambda: _mutant("carafe_forward", "copy_last_block_16").apply(Call(request, base, base_outcome)))
    assert same_outcome(copied, base_outcome)


# ----------------------------------------------------------------------------- verdicts and exit statuses

def _suite(tmp_path: Path, *sources: Path) -> Path:
    suite = tmp_path / "suite"
    for source in sources:
        target = suite / source.relative_to(COMMITTED)
        target.parent.mkdir(parents=True, exist_ok=True)
        save(load(source), target)
    return suite


def test_survivor_is_named_and_fails_the_measure(tmp_path):
    """One float32 deform_roi_pool case cannot see truncation (diff1/diff2 floors are above an ulp)."""
    result = _power(_suite(tmp_path, DEFORM_F32), "--json", tmp_path / "p.json")
    assert result.exit_code == 1, result.output
    assert "SURVIVED  deform_roi_pool_forward  round_toward_zero:" in result.output
    doc = json.loads((tmp_path / "p.json").read_text())
    survivor = next(m for m in doc["mutants"] if m["name"] == "round_toward_zero")
    assert survivor["verdict"] == "survived" and survivor["judged"] == 1 and survivor["needs"]
    # Why it survived, measured: its error stayed within the case's thresholds, and how near it came.
    closest = survivor["closest"]
    assert closest["case"] == load(DEFORM_F32).op + "/" + load(DEFORM_F32).suite + "/" + load(DEFORM_F32).name
    assert 0 < closest["actual"] <= closest["threshold"] and closest["fraction"] == closest["actual"] / closest["threshold"]
    assert f"{100 * closest['fraction']:.0f}% of" in result.output
    na = next(m for m in doc["mutants"] if m["name"] == "copy_last_block_16")
    assert na["verdict"] == "n/a" and "innermost axis" in na["reason"]
    assert "n/a  deform_roi_pool_forward  copy_last_block_16: no case has" in result.output


def test_failing_control_is_a_defect_of_the_suite(tmp_path):
    """Thresholds tightened to 0 reject the float32 arithmetic a right kernel may use."""
    case = load(CARAFE_F32)
    tight = {n: [replace(th, value=0.0) for th in ths] for n, ths in case.criteria.items()}
    suite = tmp_path / "suite" / "carafe_forward" / "random"
    suite.mkdir(parents=True)
    save(replace(case, criteria=tight), suite / CARAFE_F32.name)
    result = _power(tmp_path / "suite", "--json", tmp_path / "p.json")
    assert result.exit_code == 1, result.output
    assert "CONTROL FAILS  carafe_forward  float32_arithmetic:" in result.output
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["summary"]["controls_failed"] >= 1 and not doc["summary"]["ok"]


def test_base_that_fails_is_reported(tmp_path):
    result = _power(_suite(tmp_path, IM2COL_F32), "--backend", "run_backends:one_wrong_element")
    assert result.exit_code == 1, result.output
    assert "BASE FAILS  masked_im2col_forward/random/" in result.output


def test_nothing_judged_is_exit_5(tmp_path):
    result = _power(_suite(tmp_path, IM2COL_F32), "--backend", "mmcv")   # mmcv has no masked_im2col
    assert result.exit_code == 5, result.output


@pytest.mark.parametrize("args", [["no/such/dir"], ["specs/no_such_op.yaml"], ["cases", "--backend", "nosuch"],
                                  ["cases", "--filter", "nothing-matches-this"]])
def test_usage_errors_are_exit_2(args):
    result = _power(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


@pytest.mark.slow   # generates a kernel's default suites, then measures them
def test_spec_generates_the_default_suites_first(tmp_path):
    result = _power(REPO / "specs" / "masked_im2col_forward.yaml", "--json", tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert [k["kernel"] for k in doc["kernels"]] == ["masked_im2col_forward"]
    assert doc["kernels"][0]["cases"] > 30      # network, random, boundary and invalid
    assert result.exit_code == (0 if doc["summary"]["ok"] else 1), result.output


def test_sigterm_removes_the_generated_suites(tmp_path):
    """`opcase power SPEC` generates into a temporary directory; a SIGTERM must not leave it behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "harness.cli", "power", "specs/carafe_forward.yaml"], cwd=REPO,
                               env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        give_up = time.monotonic() + 120
        while not list(scratch.glob("opcase-power-*/carafe_forward")) and time.monotonic() < give_up:
            time.sleep(0.05)
        assert list(scratch.glob("opcase-power-*")), "the suites were never generated"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert not list(scratch.glob("opcase-power-*"))


def test_a_killed_mutant_is_judged_on_no_case_past_enough_kills(tmp_path):
    """Cases go smallest first; a mutant failed by enough cases is judged on no further one (what
    makes the default suites' 2^24-element and network cases affordable), controls on every case,
    and the verdicts are those of judging every case."""
    from harness.studies.power import case_bytes, measure
    sources = sorted((COMMITTED / "carafe_forward" / "stress").glob("channel_tail_C*.opcase"))
    files = sorted(_suite(tmp_path, *sources).rglob("*.opcase"))
    order = []
    every = measure(files, reference(), "reference", enough_kills=None)
    bounded = measure(files, reference(), "reference", order.append, enough_kills=2)
    assert [order.index(f"carafe_forward/stress/{p.stem}") for p in sorted(files, key=case_bytes)] == \
        list(range(len(files)))
    verdicts = {(m["name"], m["verdict"]) for m in every["mutants"] + every["controls"]}
    assert verdicts == {(m["name"], m["verdict"]) for m in bounded["mutants"] + bounded["controls"]}
    judged = {m["name"]: m for m in every["mutants"]}
    dropped = next(m for m in bounded["mutants"] if m["name"] == "drop_last_block_16")
    assert judged["drop_last_block_16"]["failing_shapes"] > 2 and dropped["failing_shapes"] == 2
    assert dropped["failing"] < judged["drop_last_block_16"]["failing"]
    # Never below --min-kills: a kill by too few shapes is still seen as fragile.
    strict = measure(files, reference(), "reference", min_kills=3, enough_kills=2)
    assert next(m for m in strict["mutants"] if m["name"] == "drop_last_block_16")["failing_shapes"] == 3
    assert all(c["judged"] == judged_c["judged"] for c, judged_c in zip(bounded["controls"], every["controls"]))


def test_enough_kills_option_reaches_the_measure(tmp_path):
    suite = _suite(tmp_path, IM2COL_F32)
    for given, recorded in (([], 2), (["--enough-kills", "0"], None), (["--enough-kills", "5"], 5)):
        result = _power(suite, *given, "--json", tmp_path / "p.json")
        assert json.loads((tmp_path / "p.json").read_text())["enough_kills"] == recorded, result.output
    assert _power(suite, "--enough-kills", "-1").exit_code == 2
