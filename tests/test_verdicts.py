"""Verdicts that never lie: a run that judged nothing is not green, an output that cannot be
written is refused before any work, and a baseline that cannot set a threshold stops `gen`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO, generate, run_cli
from gen.generate import GenerationError, Generator, case_path, plan_suite
from gen.core.registry import spec_for
from gen.core.backend import InvalidArgument
from harness.backends import load_backend
from harness.backends.builtin import lowp
from gen.core.casefile import find, load
from harness.cli import main
from harness.judge.selection import in_shard

OPCASE = [sys.executable, "-c", "import sys; from harness.cli import main; sys.argv[0] = 'opcase'; main()"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    """A few psamask_forward cases: enough to judge, quick to run."""
    out = tmp_path_factory.mktemp("verdicts")
    generate("psamask_forward", out, suites=("random", "invalid"), count=2)
    return out


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _opcase(*args) -> subprocess.CompletedProcess:
    """`opcase ARGS` in a fresh process: stdout and stderr apart, and a real exit status."""
    return subprocess.run(OPCASE + [str(a) for a in args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# --------------------------------------------------------------------------- item 1: nothing judged

def test_run_that_skips_every_case_exits_5_and_names_what_the_backend_declared(suite, tmp_path):
    # The reproduction: a command that declares nothing (and computes nothing).
    naive = _executable(tmp_path / "naive.sh", "#!/bin/sh\nexit 0\n")
    report = tmp_path / "r.json"
    done = _opcase("run", suite, "--backend", f"exec:{naive}", "--json", report)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "cases:" in done.stdout and "skipped" in done.stdout
    why = done.stderr
    assert "no case judged" in why and f"backend exec:{naive} declares" in why
    assert "psamask_forward" in why and "not supported" in why and "--allow-empty" in why
    summary = json.loads(report.read_text())["summary"]
    assert summary["judged"] == 0 and summary["ok"] is False
    # ... unless the caller means it.
    allowed = _opcase("run", suite, "--backend", f"exec:{naive}", "--allow-empty")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "no case judged" in allowed.stderr


def test_backend_of_another_dtype_judges_nothing(suite, tmp_path):
    half_only = _executable(tmp_path / "half.sh", "#!/bin/sh\n[ \"$1\" = --list-supported ] && "
                                                 "echo 'psamask_forward float16'\nexit 0\n")
    done = _opcase("run", suite, "--backend", f"exec:{half_only}")
    assert done.returncode == 5, done.stdout + done.stderr   # the cases here are float32: none is run
    assert "skipped as unsupported: psamask_forward float32" in done.stderr
    # The same cases, judged: 0, and the summary says so.
    report = tmp_path / "r.json"
    judged = run_cli(suite, "--backend", "reference", "--json", report)
    assert judged.exit_code == 0, judged.output
    assert json.loads(report.read_text())["summary"]["ok"] is True


def test_empty_shard_exits_5_unless_allow_empty(suite):
    files = find([suite])
    count = len(files) + 1   # more shards than cases: at least one shard is empty
    empty = next(i for i in range(1, count + 1) if not any(in_shard(f, i, count) for f in files))
    result = run_cli("--backend", "reference", suite, "--shard", f"{empty}/{count}")
    assert result.exit_code == 5, result.output
    assert f"shard {empty}/{count} holds none of the {len(files)} case(s)" in result.output
    assert run_cli("--backend", "reference", suite, "--shard", f"{empty}/{count}", "--allow-empty").exit_code == 0


def test_rerun_failed_with_nothing_failed_exits_5(suite, tmp_path):
    report = tmp_path / "r.json"
    assert run_cli("--backend", "reference", suite, "--json", report).exit_code == 0
    result = run_cli("--backend", "reference", "--rerun-failed", report)
    assert result.exit_code == 5 and "none of them failed" in result.output, result.output


def test_failing_case_wins_over_nothing_judged(suite, tmp_path):
    # Everything skipped but one error: the run fails (1), it is not merely empty (5).
    half = _executable(tmp_path / "broken.sh", "#!/bin/sh\n[ \"$1\" = --list-supported ] && "
                                               "echo 'psamask_forward'\nexit 3\n")
    done = _opcase("run", suite, "--backend", f"exec:{half}")
    assert done.returncode == 1, done.stdout + done.stderr


def test_list_supported_lines_naming_no_kernel_or_dtype_are_warned_once_before_the_run(suite, tmp_path):
    lister = _executable(tmp_path / "lister.sh", "#!/bin/sh\n[ \"$1\" = --list-supported ] || exit 3\n"
                                                 "echo 'psamask_forwrd float32'\n"
                                                 "echo 'psamask_forward float23  # typo'\n")
    done = _opcase("run", suite, "--backend", f"exec:{lister}", "--jobs", "2")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, done.stderr
    assert "line 1: 'psamask_forwrd' is not a known kernel" in warnings[0]
    assert "line 2: 'float23' is not a dtype" in warnings[1]
    assert done.returncode == 5   # every case skipped: the typos left nothing to run


def test_clean_list_supported_gives_no_warning(tmp_path):
    from harness.backends.exec_backend import ExecBackend
    lister = _executable(tmp_path / "lister.sh", "#!/bin/sh\necho 'psamask_forward float32 float16'\n")
    assert ExecBackend(str(lister)).declaration_warnings(["psamask_forward"]) == []
    assert ExecBackend(str(lister)).declaration_warnings(["other"])   # the known kernels decide


# --------------------------------------------------------------------------- item 3: targets first

def test_unwritable_results_targets_are_refused_before_the_run(suite, tmp_path):
    in_the_way = tmp_path / "a_file"
    in_the_way.write_text("")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for option, target in (("--json", in_the_way / "r.json"), ("--junit", in_the_way / "sub" / "j.xml"),
                           ("--junit", fifo)):
        result = run_cli(suite, "--backend", "reference", option, target)
        assert result.exit_code == 2, (option, target, result.output)
        assert result.output.count("\n") == 1 and result.output.startswith(f"Error: {option} {target}")
        assert "cases:" not in result.output   # refused before any case ran
    assert fifo.exists() and not fifo.is_file()


def test_results_in_a_directory_without_write_permission_are_refused(suite, tmp_path, monkeypatch):
    # (Tests run as root here, for whom a mode of 0o555 changes nothing: the check is what is tested.)
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    result = run_cli("--backend", "reference", suite, "--json", locked / "new" / "r.json")
    assert result.exit_code == 2 and f"no write permission in {locked}" in result.output, result.output
    assert not (locked / "new").exists()


def test_one_file_named_by_two_options_is_refused(suite, tmp_path):
    same = tmp_path / "out"
    result = run_cli("--backend", "reference", suite, "--json", same, "--junit", same)
    assert result.exit_code == 2 and "--json and --junit name the same file" in result.output
    assert not same.exists()
    baseline = tmp_path / "baseline.json"
    baseline.write_text('{"format": "opcase-baseline 1", "cases": {}}')
    result = run_cli("--backend", "reference", suite, "--compare", baseline, "--json", baseline)
    assert result.exit_code == 2 and "--compare and --json name the same file" in result.output


def test_results_go_where_they_are_asked_even_in_new_directories(suite, tmp_path):
    report = tmp_path / "new" / "dir" / "r.json"
    assert run_cli("--backend", "reference", suite, "--json", report).exit_code == 0
    assert json.loads(report.read_text())["summary"]["judged"] > 0


def test_baseline_update_import_export_and_gen_refuse_unwritable_targets(suite, tmp_path):
    in_the_way = tmp_path / "a_file"
    in_the_way.write_text("")
    results = tmp_path / "r.json"
    assert run_cli("--backend", "reference", suite, "--json", results).exit_code == 0
    mluops = tmp_path / "mluops"
    assert _invoke("export", suite, "-o", mluops).exit_code == 0
    for args in (("baseline", "update", results, "-o", in_the_way / "b.json"),
                 ("import", mluops, "-o", in_the_way / "imported"),
                 ("export", suite, "-o", in_the_way / "exported"),
                 ("gen", REPO / "specs" / "psamask_forward.yaml", "--suite", "invalid", "-o", in_the_way / "g")):
        result = _invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.count("\n") == 1 and f"{in_the_way} is not a directory" in result.output
    assert in_the_way.read_text() == ""


# --------------------------------------------------------------------------- item 4: gen --baseline

class TimedLowp:
    """lowp that measures its own time, as an exec: baseline does."""
    measures_time = True
    name = "timed-lowp"

    def run(self, request):
        return lowp().run(request), 1e-3


def rejects(request):
    raise InvalidArgument("not today")


def zeros(request):
    return {n: np.zeros(o.shape, o.dtype) for n, o in request.outputs.items()}


def with_nan(request):
    outputs = lowp().run(request)
    for array in outputs.values():
        array.reshape(-1)[0] = np.nan
    return outputs


def one_percent_off(request):
    return {n: (a * 1.01).astype(a.dtype) for n, a in lowp().run(request).items()}


def wrong_shape(request):
    return {n: np.zeros((1,), o.dtype) for n, o in request.outputs.items()}


def wrong_dtype(request):
    return {n: a.astype(np.float64) for n, a in lowp().run(request).items()}


SMALL = ("--suite", "boundary", "--select", "^map_1x1-float32$")


def _gen(out, *args):
    return _invoke("gen", REPO / "specs" / "carafe_forward.yaml", *SMALL, *args, "-o", out)


def test_gen_with_an_exec_baseline_that_fails_is_one_line_exit_2(tmp_path):
    naive = _executable(tmp_path / "naive.sh", "#!/bin/sh\nexit 0\n")
    result = _gen(tmp_path / "out", "--baseline", f"exec:{naive}")
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"Error: carafe_forward/boundary/map_1x1-float32: baseline exec:{naive}: ")
    assert "wrote no response" in result.output


def test_gen_with_a_baseline_that_measures_its_own_time_sets_the_same_thresholds(tmp_path):
    timed = _gen(tmp_path / "timed", "--baseline", "test_verdicts:TimedLowp")
    assert timed.exit_code == 0, timed.output
    plain = _gen(tmp_path / "plain", "--baseline", "lowp")
    assert plain.exit_code == 0, plain.output
    (a,), (b,) = find([tmp_path / "timed"]), find([tmp_path / "plain"])
    values = [[th.value for ths in load(p).criteria.values() for th in ths] for p in (a, b)]
    assert values[0] == values[1] and values[0]


@pytest.mark.parametrize("baseline, reason", [
    ("rejects", "rejected a valid call: not today"),
    ("zeros", "output 'output' is all zeros and the golden is not"),
    ("with_nan", "fails the thresholds it sets (they would be just the docs' cap): output: 1 NaN/Inf"),
    ("one_percent_off", "fails the thresholds it sets (they would be just the docs' cap): "
                        "output.diff1=0.01 > 0.003"),
    ("wrong_shape", "output 'output' has shape [1], expected"),
    ("wrong_dtype", "output 'output' has dtype float64, expected float32"),
])
def test_gen_refuses_a_baseline_that_cannot_set_a_threshold(tmp_path, baseline, reason):
    result = _gen(tmp_path / "out", "--baseline", f"test_verdicts:{baseline}")
    assert result.exit_code == 2, result.output
    # The baseline runs in a worker (harness.judge.workers.load_apart): outputs of the wrong form never
    # leave it, and come back as the worker's BackendFailed with the same reason.
    assert result.output.startswith(f"Error: carafe_forward/boundary/map_1x1-float32: "
                                    f"baseline test_verdicts:{baseline}: "), result.output
    assert reason in result.output
    assert result.output.count("\n") == 1
    assert not list((tmp_path / "out").rglob("*.opcase"))


def test_zero_baseline_is_fine_where_the_golden_is_zero_too():
    spec = spec_for("deform_roi_pool_forward")
    plan = next(p for p in plan_suite(spec, "boundary") if p.name.startswith("rois_outside") and p.zero_golden_ok)
    case = Generator(spec, load_backend("test_verdicts:zeros")).build(plan)
    assert case.criteria and not any(np.any(t.data) for t in case.outputs.values())


def test_streamed_goldens_refuse_an_unfit_baseline_too(tmp_path, monkeypatch):
    import gen.generate
    monkeypatch.setattr(gen.generate, "STREAM_OUTPUT_BYTES", 0)   # stream even this small case
    spec = spec_for("carafe_forward")
    plan = next(p for p in plan_suite(spec, "boundary") if p.name == "map_1x1-float32")
    with pytest.raises(GenerationError, match=r"^carafe_forward/boundary/map_1x1-float32: baseline "
                                              r"test_verdicts:zeros: output 'output' is all zeros"):
        Generator(spec, load_backend("test_verdicts:zeros")).write(plan, case_path(tmp_path, plan, spec.op))
    with pytest.raises(GenerationError, match="NaN/Inf at 1 position"):
        Generator(spec, load_backend("test_verdicts:with_nan")).write(plan, case_path(tmp_path, plan, spec.op))
    timed = Generator(spec, load_backend("test_verdicts:TimedLowp")).write(plan, case_path(tmp_path, plan, spec.op))
    assert load(timed).criteria
