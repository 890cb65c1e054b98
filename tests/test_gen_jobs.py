"""How many worker processes `opcase gen` uses without --jobs, and in what order it hands them cases."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

import gen.jobs as jobs
from conftest import REPO
from harness.cli import main
from harness.cli.commands import gen as gen_command

SPEC = str(REPO / "specs" / "masked_im2col_forward.yaml")
GB = 1 << 30


@pytest.fixture
def four_cpus(monkeypatch):
    monkeypatch.setattr(jobs, "usable_cpus", lambda: 4)


def test_small_work_stays_in_one_process(four_cpus):
    assert jobs.default_jobs(100, jobs.PARALLEL_FROM_BYTES - 1, 1 << 20, 24 * GB) == 1
    assert jobs.default_jobs(1, 10 * GB, 1 << 20, 24 * GB) == 1


def test_large_work_takes_one_worker_per_cpu_but_no_more_than_cases(four_cpus):
    assert jobs.default_jobs(100, 2 * GB, 64 << 20, 24 * GB) == 4
    assert jobs.default_jobs(3, 2 * GB, 64 << 20, 24 * GB) == 3
    assert jobs.default_jobs(100, 2 * GB, 64 << 20, None) == 4


def test_memory_caps_the_workers(four_cpus):
    # Half of 24 GB over 8 x 1 GB: one worker; over 8 x 0.5 GB: three.
    assert jobs.default_jobs(100, 20 * GB, GB, 24 * GB) == 1
    assert jobs.default_jobs(100, 20 * GB, GB // 2, 24 * GB) == 3
    assert jobs.default_jobs(100, 20 * GB, 100 * GB, 24 * GB) == 1


def test_largest_first_keeps_plan_order_among_equals():
    tasks = ["a", "b", "c", "d"]
    assert jobs.largest_first(tasks, {"a": 1, "b": 5, "c": 1, "d": 5}) == ["b", "d", "a", "c"]


def _gen_with_recorded_pool(monkeypatch, tmp_path, *extra):
    seen = {}

    def record(tasks, n_jobs, on_done=lambda task, size: None):
        seen["jobs"], seen["tasks"] = n_jobs, list(tasks)
        real(tasks, 1, on_done)

    real = jobs.write_all
    monkeypatch.setattr(gen_command, "write_all", record)   # the name the gen command calls
    result = CliRunner().invoke(main, ["gen", SPEC, "--suite", "boundary", "-o", str(tmp_path), *extra])
    assert result.exit_code == 0, result.output
    return seen


def test_gen_without_jobs_uses_the_cpus_largest_case_first(monkeypatch, tmp_path, four_cpus):
    monkeypatch.setattr(jobs, "PARALLEL_FROM_BYTES", 0)
    seen = _gen_with_recorded_pool(monkeypatch, tmp_path)
    assert seen["jobs"] == 4
    sizes = [sum(p.stat().st_size for p in tmp_path.rglob(f"{task.name}.opcase*")) for task in seen["tasks"]]
    assert sizes[0] == max(sizes) and sizes[-1] < sizes[0]


def test_gen_small_work_or_given_jobs_keep_plan_order(monkeypatch, tmp_path, four_cpus):
    serial = _gen_with_recorded_pool(monkeypatch, tmp_path / "a")
    assert serial["jobs"] == 1
    given = _gen_with_recorded_pool(monkeypatch, tmp_path / "b", "--jobs", "1")
    assert [t.name for t in given["tasks"]] == [t.name for t in serial["tasks"]]
