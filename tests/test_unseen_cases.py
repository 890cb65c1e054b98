"""Unseen cases (`opcase run --fresh`): a backend that replays the stored goldens passes them at
most and fails the cases drawn at run time; the drawn cases repeat with their seed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from gen.core.casefile import find
from gen.core.registry import spec_for
from gen.generate import plan_suite
from harness.cli import main

def _fresh_run(tmp_path, monkeypatch, paths, backend, *extra):
    import tempfile
    temporary = tmp_path / "tmp"
    temporary.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    results = tmp_path / "results.json"
    result = CliRunner().invoke(main, ["run", *map(str, paths), "--backend", backend, "--json", str(results), *extra])
    assert not list(temporary.glob("opcase-fresh-*")), "the fresh cases' directory outlived the run"
    doc = json.loads(results.read_text()) if results.exists() else {}
    return result, doc


@pytest.mark.slow   # a stored kernel's suite run, then a fresh one generated and run
def test_a_backend_that_replays_stored_goldens_passes_them_and_fails_fresh_cases(tmp_path, monkeypatch):
    stored = REPO / "cases" / "psamask_forward"
    monkeypatch.setenv("OPCASE_TEST_SEEN", str(stored))   # replay_backends reads the stored cases from disk
    seen, doc = _fresh_run(tmp_path, monkeypatch, [stored], "replay_backends:replay")
    from harness.worker import confine
    # With Landlock its worker cannot open the stored cases either (harness/GUARANTEES.md): none passes.
    stored_status = "failed" if confine.landlock_abi() > 0 else "passed"
    if stored_status == "passed":
        assert seen.exit_code == 0 and doc["summary"]["counts"]["passed"] == len(find([stored])), seen.output
    else:   # it does no better than a backend of zeros
        _, zeros = _fresh_run(tmp_path, monkeypatch, [stored], "hostile_backends:zeros")
        assert seen.exit_code == 1, seen.output
        assert [c["status"] for c in doc["cases"]] == [c["status"] for c in zeros["cases"]]
    fresh, doc = _fresh_run(tmp_path, monkeypatch, [stored], "replay_backends:replay", "--fresh", "3")
    assert fresh.exit_code == 1, fresh.output
    by_suite = {}
    for case in doc["cases"]:
        by_suite.setdefault(case["suite"] == "fresh", set()).add(case["status"])
    assert by_suite[True] == {"failed"} and (stored_status == "failed" or by_suite[False] == {"passed"}), by_suite
    assert sum(case["suite"] == "fresh" for case in doc["cases"]) == 3
    seed = doc["run"]["fresh"]["seed"]
    assert f"fresh: 3 case(s) drawn at run time with --fresh-seed {seed} (psamask_forward): 3 failed" in fresh.output
    # Each failing fresh case is kept, and its REPRO line reruns the kept file (harness/judge/fresh_kept.py).
    kept = [c["path"] for c in doc["cases"] if c["suite"] == "fresh"]
    assert all(Path(path).is_file() and f"opcase run {path}" in fresh.output for path in kept), fresh.output


def test_fresh_cases_are_drawn_as_the_random_suite_draws_them_and_repeat_with_their_seed(tmp_path, monkeypatch):
    paths = [REPO / "cases" / "psamask_forward" / "boundary", REPO / "cases" / "carafe_forward" / "random"]
    first, doc = _fresh_run(tmp_path, monkeypatch, paths, "reference", "--fresh", "2", "--fresh-seed", "977")
    assert first.exit_code == 0, first.output
    fresh = sorted((c["op"], c["name"]) for c in doc["cases"] if c["suite"] == "fresh")
    # The random suite of `opcase gen --seed 977 --count 2`, from the installed specs.
    drawn = sorted((op, plan.name) for op in ("carafe_forward", "psamask_forward")
                   for plan in plan_suite(spec_for(op), "random", 2, 977))
    assert fresh == drawn and all(c["status"] == "passed" for c in doc["cases"])
    again, doc_again = _fresh_run(tmp_path, monkeypatch, paths, "reference", "--fresh", "2", "--fresh-seed", "977")
    assert [c["name"] for c in doc_again["cases"]] == [c["name"] for c in doc["cases"]]
    unseen, doc_unseen = _fresh_run(tmp_path, monkeypatch, paths, "reference", "--fresh", "2")
    assert doc_unseen["run"]["fresh"]["seed"] != 977 and f"--fresh-seed {doc_unseen['run']['fresh']['seed']}" \
        in unseen.output


def test_fresh_seed_needs_fresh(tmp_path):
    result = CliRunner().invoke(main, ["run", str(REPO / "cases" / "psamask_forward"), "--backend", "reference",
                                       "--fresh-seed", "3"])
    assert result.exit_code == 2 and "give --fresh N too" in result.output, result.output
