"""`opcase shrink`: planted bugs that fire only past a threshold, found in a network case and
shrunk to the threshold itself, in a case at least 100x smaller that still fails."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from gen.core.checks import failures
from gen.core.descriptor import Explicit, parse
from gen.descriptor import plan_of, write_described
from gen.generate import tensor_infos, interface_params, layout_of, plan_suite, total_bytes
from gen.core.registry import spec_for
from harness.backends import load_backend
from gen.core.casefile import load
from harness.cli import main
from gen.core.verdict import FAILED, PASSED, WRONGLY_ACCEPTED
from harness.judge.runner import run_case
from harness.cli.shrink import candidates, shrink_case

OP = "carafe_forward"
# Each planted bug (tests/shrink_backends.py) and the dim or param it needs past its threshold.
BUGS = {"channel_tail": ("dims", "C", 97), "last_row": ("dims", "H", 9), "half_accumulation": ("params", "kernel_size", 5)}


def _files(case_file: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in case_file.parent.glob(case_file.name + "*")}


def _on_disk(case_file: Path) -> int:
    return sum(p.stat().st_size for p in case_file.parent.glob(case_file.name + "*"))


@pytest.fixture(scope="module")
def network_case(tmp_path_factory) -> Path:
    """The largest float32 network case of carafe_forward under 64 MB (fpn_h64_c512, 44 MB): the
    half-accumulation bug is one only where the case asks for more than half precision."""
    spec = spec_for(OP)
    plans = [p for p in plan_suite(spec, "network") if p.dtype == "float32" and total_bytes(spec, p) <= 64 << 20]
    largest = max(plans, key=lambda p: total_bytes(spec, p))
    return write_described(f"{OP}:network:{largest.name}", tmp_path_factory.mktemp("network"), load_backend)


def _checks_broken(spec, descriptor: str) -> list[str]:
    plan = plan_of(spec, descriptor)
    lay = layout_of(spec, replace(plan, params=interface_params(spec, plan.params)))
    return [c.id for c in failures(spec, tensor_infos(spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit),
                                   plan.params)]


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bug_is_shrunk_to_its_threshold(tmp_path, network_case, bug):
    backend_spec = f"shrink_backends:{bug}"
    backend = load_backend(backend_spec)
    found = shrink_case(network_case, backend, backend_spec, tmp_path / "shrunk")
    parts = parse(found.descriptor)
    section, name, threshold = BUGS[bug]
    assert isinstance(parts, Explicit) and getattr(parts, section)[name] == threshold, found.descriptor
    assert found.original == f"{OP}:network:{load(network_case).name}" and not found.exhausted
    # At least 100x smaller, on disk and in tensor bytes, and it still fails, as the original does;
    # a correct kernel passes it (it is no case that proves nothing).
    assert _on_disk(found.path) * 100 <= _on_disk(network_case), (_on_disk(found.path), _on_disk(network_case))
    assert found.bytes_after * 100 <= found.bytes_before
    assert run_case(found.path, backend, backend_spec).status == FAILED
    assert run_case(found.path, load_backend("reference"), "reference").status == PASSED
    # Every candidate it tried stayed inside every check of the spec.
    spec = spec_for(OP)
    broken = {d: _checks_broken(spec, d) for d in found.tried}
    assert len(broken) > 3 and not any(broken.values()), {d: b for d, b in broken.items() if b}
    # Its descriptor makes it again, byte for byte.
    again = CliRunner().invoke(main, ["gen", "--case", found.descriptor, "-o", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    remade = tmp_path / "again" / found.path.relative_to(tmp_path / "shrunk")
    assert _files(remade) == _files(found.path)


@pytest.mark.slow   # a whole shrink
def test_an_invalid_case_shrinks_while_breaking_exactly_its_check(tmp_path):
    case = REPO / "cases" / OP / "invalid" / "dtype_match-float32.opcase"
    found = shrink_case(case, load_backend("run_backends:no_checks"), "run_backends:no_checks", tmp_path)
    spec = spec_for(OP)
    assert found.failure.status == WRONGLY_ACCEPTED and found.tried
    assert {tuple(_checks_broken(spec, d)) for d in found.tried} == {("dtype_match",)}
    assert parse(found.descriptor).violate == "dtype_match" and found.bytes_after < found.bytes_before
    assert run_case(found.path, load_backend("run_backends:no_checks"), "x").status == WRONGLY_ACCEPTED


@pytest.mark.slow
def test_budget_stops_the_search_and_still_writes_a_failing_case(tmp_path, network_case):
    result = CliRunner().invoke(main, ["shrink", str(network_case), "--backend", "shrink_backends:last_row",
                                       "--max-tries", "3", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "3 candidate(s)" in result.output and "out of tries" in result.output
    shrunk = Path(re.search(r"^wrote (.+)$", result.output, re.M).group(1))
    assert run_case(shrunk, load_backend("shrink_backends:last_row"), "x").status == FAILED


def test_a_case_that_passes_has_nothing_to_shrink(tmp_path):
    case = REPO / "cases" / OP / "boundary" / "map_1x1-float32.opcase"
    result = CliRunner().invoke(main, ["shrink", str(case), "--backend", "reference", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "passed on backend reference: nothing to shrink" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.opcase"))


def test_integer_candidates_reach_a_threshold_in_halves():
    """From 2048, the halfway-plus-one candidates keep a bug that needs C % 96 != 0 alive."""
    assert candidates(2048, 1) == [1, 2, 1024, 1025, 1537, 2047]
    assert candidates(5, 1, (1, 3, 5, 7)) == [1, 2, 3, 4]
    assert candidates(1, 1) == [] and candidates(True, False) == [False]
    assert candidates(0.0625, 0.0) == [0.0, 0.06]


@pytest.mark.slow   # a whole shrink on a pseudo-terminal (19 s in the quick loop at c438e2b)
def test_progress_shows_on_a_terminal(tmp_path):
    """On a terminal a status line is rewritten in place with the try in progress (and cleared)."""
    import os
    import pty
    import subprocess
    import sys
    case = REPO / "cases" / OP / "boundary" / "wide_channels-float16.opcase"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "shrink", str(case),
                                "--backend", "shrink_backends:channel_tail", "-o", str(tmp_path)],
                               stdout=follower, stderr=follower, env=env, cwd=tmp_path)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    assert process.wait(timeout=120) == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert "\r\x1b[2Ktry 1 of at most 200: dims H=1  (best 0.19 MB)" in text, text
    assert "\r\x1b[2Krunning the original case" in text
    assert "original: carafe_forward:boundary:wide_channels-float16  (190 KB of tensors)" in text
    assert "fails as: failed output.diff1 output.diff2" in text
    smallest = re.search(r"smallest: (\S+)  \(\d+ B of tensors, [\d,]+x smaller\)", text)
    assert smallest and smallest.group(1).startswith("carafe_forward:float16:N=1,H=1,W=1,C=97:"), text
    wrote = Path(tmp_path, re.search(r"wrote (\S+)", text).group(1))
    assert load(wrote).note == "descriptor " + smallest.group(1)


@pytest.mark.slow   # a whole shrink
def test_values_the_spec_derives_follow_the_ones_they_are_made_of(tmp_path):
    """A random case's C is G * Cg and its group_size is G: shrinking G or Cg moves them along,
    and neither is shrunk on its own."""
    case = next((REPO / "cases" / OP / "random").glob("r002-*-float16.opcase"))
    found = shrink_case(case, load_backend("run_backends:one_wrong_element"), "run_backends:one_wrong_element",
                        tmp_path)
    assert found.original.startswith(f"{OP}:random:r002-") and len(found.tried) > 5
    for descriptor in [*found.tried, found.descriptor]:
        parts = parse(descriptor)
        assert parts.dims["C"] == parts.dims["G"] * parts.dims["Cg"], descriptor
        assert parts.params["group_size"] == parts.dims["G"], descriptor
    assert found.bytes_after < found.bytes_before


@pytest.mark.parametrize("problem, says", [("no descriptor", "no descriptor regenerates this case"),
                                           ("damaged", "CASE_FILE"), ("bad backend", "nosuchmodule")])
def test_what_cannot_be_shrunk_is_one_line_and_exit_2(tmp_path, problem, says):
    case = tmp_path / "in" / OP / "boundary" / "map_1x1-float32.opcase"
    args = ["gen", str(REPO / "specs" / f"{OP}.yaml"), "--suite", "boundary", "--select", "^map_1x1-float32$",
            "-o", str(tmp_path / "in")]
    assert CliRunner().invoke(main, args + (["--seed", "5"] if problem == "no descriptor" else [])).exit_code == 0
    if problem == "damaged":
        case.write_bytes(case.read_bytes()[:-10])
        says = str(case)
    backend = "nosuchmodule:run" if problem == "bad backend" else "run_backends:one_wrong_element"
    result = CliRunner().invoke(main, ["shrink", str(case), "--backend", backend, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and says in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not list((tmp_path / "out").rglob("*.opcase"))
