"""Runs at scale: worker processes, shards and filters give the serial verdicts; crashes and hangs
cost only their case."""
from __future__ import annotations

import json

import pytest

from conftest import pure_io_suite, run_cli
from gen.core.casefile import find
from harness.judge.selection import case_key, in_shard


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return pure_io_suite(tmp_path_factory, "scale")


_run = run_cli


def _verdicts(report) -> dict:
    doc = json.loads(report.read_text())
    return {f"{c['op']}/{c['suite']}/{c['name']}": (c["status"], c["message"].splitlines()[0] if c["message"] else "")
            for c in doc["cases"]}


@pytest.mark.slow   # the suite run serially, with jobs and in shards
def test_jobs_and_shards_give_the_serial_verdicts(suite, tmp_path):
    serial, parallel = tmp_path / "serial.json", tmp_path / "parallel.json"
    assert _run(suite, "--backend", "run_backends:mixed", "--json", serial).exit_code == 1
    assert _run(suite, "--backend", "run_backends:mixed", "--jobs", "2", "--json", parallel).exit_code == 1
    expected = _verdicts(serial)
    assert len({status for status, _ in expected.values()}) >= 4
    assert _verdicts(parallel) == expected
    # Results come back in case order whatever order the workers finish in.
    assert [c["path"] for c in json.loads(parallel.read_text())["cases"]] == \
           [c["path"] for c in json.loads(serial.read_text())["cases"]]
    shards = {}
    for i in (1, 2, 3):
        report = tmp_path / f"shard{i}.json"
        _run(suite, "--backend", "run_backends:mixed", "--shard", f"{i}/3", "--json", report)
        shards[i] = _verdicts(report)
        assert shards[i], f"shard {i}/3 is empty"
    assert sum(len(s) for s in shards.values()) == len(expected)                 # disjoint ...
    assert {k: v for s in shards.values() for k, v in s.items()} == expected      # ... and complete


def test_shards_are_stable_by_case_name_not_by_location(suite, tmp_path):
    files = find([suite])
    moved = [tmp_path / "elsewhere" / f.relative_to(suite) for f in files]
    for n in (2, 5):
        assert [[in_shard(f, i, n) for i in range(1, n + 1)].count(True) for f in files] == [1] * len(files)
        assert [in_shard(f, 1, n) for f in files] == [in_shard(m, 1, n) for m in moved]
    assert case_key(files[0]) == "/".join(files[0].relative_to(suite).with_suffix("").parts)


def test_filter_selects_by_op_suite_and_name(suite, tmp_path):
    report = tmp_path / "r.json"
    assert _run(suite, "--backend", "reference", "--filter", "^psamask_forward/boundary/mask_", "--json", report).exit_code == 0
    keys = set(_verdicts(report))
    assert keys and all(k.startswith("psamask_forward/boundary/mask_") for k in keys)


def test_crashing_backend_is_an_error_and_the_run_goes_on(suite, tmp_path):
    report = tmp_path / "r.json"
    result = _run(suite, "--filter", "psamask_forward/boundary/(mask_1x1|map_1x1)-", "--jobs", "2",
                  "--backend", "run_backends:crashes_on_collect", "--json", report)
    assert result.exit_code == 1
    verdicts = _verdicts(report)
    assert len(verdicts) == 4
    for key, (status, message) in verdicts.items():
        assert status == ("error" if "psa_type0" in key else "passed"), (key, message)
        if status == "error":
            assert message == "worker killed by SIGSEGV"
    assert "kernel: about to read through a bad pointer" in result.output   # the worker's last words


def test_hanging_backend_is_cut_off_by_timeout_and_the_run_goes_on(suite, tmp_path):
    report = tmp_path / "r.json"
    result = _run(suite, "--filter", "psamask_forward/boundary/mask_1x1-", "--timeout", "1.5",
                  "--backend", "run_backends:hangs_on_collect", "--json", report)
    assert result.exit_code == 1
    verdicts = _verdicts(report)
    assert verdicts == {
        "psamask_forward/boundary/mask_1x1-psa_type0-float32":
            ("error", "timed out after 1.5 s (--timeout); worker killed"),
        "psamask_forward/boundary/mask_1x1-psa_type1-float32": ("passed", ""),
    }
    assert "--timeout 1.5" in json.loads(report.read_text())["cases"][0]["repro"]
