"""Each case is judged twice by a backend in worker processes (harness.judge.cold_pass): cold (no decoy,
the first call of its worker or after other cases' calls) and warm (after a decoy of its shapes).  Bugs of
either kind fail every kernel at --jobs 1 and 2; the reference, in workers, passes."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import REPO
from gen.core.verdict import FAILING
from harness.cli import main
from harness.judge.cold_pass import COLD

COMMITTED = REPO / "cases"
KERNELS = sorted(p.name for p in COMMITTED.iterdir() if p.is_dir())
# Random cases of each kernel.  Three, not one: a decoy permutes whole rows of every input in step, and
# where a kernel sums over the permuted rows (border_align_backward's first two random cases) the
# decoy's outputs are the case's own, so a cache by shape hides there; the third case shows it.
PER_KERNEL = 3


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory):
    """The first PER_KERNEL random cases of every committed kernel (with their sidecars), one directory each."""
    out = tmp_path_factory.mktemp("cold-pass")
    for kernel in KERNELS:
        target = out / kernel / "random"
        target.mkdir(parents=True)
        for case in sorted((COMMITTED / kernel / "random").glob("*.opcase"))[:PER_KERNEL]:
            for part in case.parent.glob(case.name + "*"):
                shutil.copy(part, target / part.name)
    return out


def _run(paths, backend: str, tmp_path, jobs: int):
    report = tmp_path / f"r{jobs}.json"
    result = CliRunner().invoke(main, ["run", *map(str, paths), "--backend", f"state_backends:{backend}",
                                       "--jobs", str(jobs), "--json", str(report)])
    return result.exit_code, json.loads(report.read_text())


def _failing_kernels(doc) -> set:
    return {c["op"] for c in doc["cases"] if c["status"] in FAILING}


# Bugs that only a call with none of its shapes before it shows (the cold pass), and bugs of state kept
# between calls (the warm pass, its decoy call).
EVERY_KERNEL = ["first_call_per_kernel", "first_call_at_a_shape", "stale_plan",
                "cache_by_shape", "cache_by_address", "uncleared_buffer"]


# slow: each run starts both passes' workers and judges 33 cases twice (4-10 s at load average 10-20)
@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("bug", EVERY_KERNEL)
def test_bug_fails_every_kernel(bug, jobs, small_suite, tmp_path):
    code, doc = _run([small_suite], bug, tmp_path, jobs)
    assert code == 1
    assert _failing_kernels(doc) == set(KERNELS), doc["cases"][:2]


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_first_call_of_every_worker_is_judged(jobs, small_suite, tmp_path):
    """A bug of the process's first call fails the first case of each cold-pass worker, and says so."""
    code, doc = _run([small_suite], "first_call", tmp_path, jobs)
    assert code == 1
    failing = [c for c in doc["cases"] if c["status"] in FAILING]
    assert 1 <= len(failing) <= jobs, [c["name"] for c in failing]
    assert all(COLD in c["message"] for c in failing)


@pytest.mark.slow   # a run per kernel and --jobs value: 22 runs, a worker start or two each
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_first_call_bug_fails_every_kernels_own_suite(jobs, small_suite, tmp_path):
    for kernel in KERNELS:
        code, doc = _run([small_suite / kernel], "first_call", tmp_path, jobs)
        assert code == 1 and _failing_kernels(doc) == {kernel}, kernel


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_reference_in_workers_passes_both_passes(jobs, small_suite, tmp_path):
    code, doc = _run([small_suite], "stateless", tmp_path, jobs)
    assert code == 0, [c for c in doc["cases"] if c["status"] != "passed"][:3]
    assert len(doc["cases"]) == sum(1 for _ in small_suite.rglob("*.opcase"))
