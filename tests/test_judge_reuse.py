"""What the judge does once instead of twice: a case file read once for its cold and its warm pass
(harness.judge.cold_pass.SharedLoads, the cold pass held a few files ahead of the warm one), and workers
kept from one batch of cases to the next (harness.judge.kept_workers, as the pytest plugin runs them),
with the verdicts of one run over all the cases."""
from __future__ import annotations

import os

import pytest

from conftest import REPO
from gen.core.casefile import find
from harness.judge import workers
from harness.judge.cold_pass import COLD_PASS, WARM_PASS, Passes, Pending, SharedLoads
from harness.judge.kept_workers import KeptWorkers
from harness.judge.runner import RunOptions

# A random case of each of eight kernels (small ones), enough for the cold pass to run ahead of the warm one.
FILES = [found[0] for found in (find([kernel / "random"]) for kernel in sorted((REPO / "cases").iterdir())
                                if (kernel / "random").is_dir()) if found][:8]


@pytest.fixture(autouse=True)
def backends_importable(monkeypatch):
    """The workers import tests/state_backends.py by its module name."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                       os.environ.get("PYTHONPATH", "")]))


def _statuses(results) -> list[str]:
    return [r.status for r in results]


def test_each_case_file_is_read_once_for_both_passes(monkeypatch):
    read = []
    real_load = workers.load

    def counting_load(path, *args, **kwargs):
        read.append(path)
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(workers, "load", counting_load)
    results, _ = workers.run_cases(FILES, None, "state_backends:stateless", RunOptions(), lambda r: None, jobs=1)
    assert len(FILES) > 4 and _statuses(results) == ["passed"] * len(FILES)
    assert sorted(read) == sorted(FILES)


def test_a_cold_pass_bug_still_fails_where_it_did():
    """Holding the cold pass near the warm one changes no verdict: the process's first call still fails."""
    results, _ = workers.run_cases(FILES, None, "state_backends:first_call", RunOptions(), lambda r: None, jobs=1)
    assert _statuses(results) == ["failed"] + ["passed"] * (len(FILES) - 1)


def test_the_cold_pass_is_given_out_at_most_lead_files_ahead():
    passes = Passes(6, RunOptions())
    pending = Pending(passes, lead=2)
    assert pending.to_give(COLD_PASS) and pending.to_give(WARM_PASS)
    assert [pending.next_of(COLD_PASS), pending.next_of(COLD_PASS)] == [0, 1]
    assert not pending.to_give(COLD_PASS)           # two ahead of the warm pass's file 0
    assert pending.next_of(WARM_PASS) == 6 and pending.to_give(COLD_PASS)
    while pending.next_of(WARM_PASS) is not None:
        pass
    assert pending.count(COLD_PASS) == 4 and pending.to_give(COLD_PASS)   # the warm pass done: no limit
    assert Pending(passes).to_give(COLD_PASS) and not Pending(Passes(0, RunOptions())).to_give(COLD_PASS)


def test_shared_loads_keep_a_case_only_until_its_other_item_and_at_most_keep():
    passes = Passes(4, RunOptions())
    loads, read = SharedLoads(passes, keep=2), []

    def load(file):
        read.append(file)
        return object()

    first = loads.case_of(0, load)
    assert loads.case_of(4, load) is first and read == [0] and not loads.kept   # the warm item: no read, dropped
    for item in (1, 2, 3):   # three cold items ahead of their warm ones: the oldest one goes
        loads.case_of(item, load)
    assert list(loads.kept) == [2, 3]
    loads.case_of(5, load)   # file 1's warm item reads it again, and does not keep it
    assert read == [0, 1, 2, 3, 1] and list(loads.kept) == [2, 3]
    loads.case_of(6, load)
    loads.case_of(7, load)
    assert read == [0, 1, 2, 3, 1] and not loads.kept


def test_kept_workers_judge_batches_as_one_run_judges_them_all():
    """With kept workers, the second batch's first case is not its worker's first call, as in one run
    over both batches (test_a_cold_pass_bug_still_fails_where_it_did); without, it is (the first_call
    backend fails it)."""
    half = len(FILES) // 2
    kept = KeptWorkers()
    try:
        batches = []
        for batch in (FILES[:half], FILES[half:]):
            results, origin = workers.run_cases(batch, None, "state_backends:first_call", RunOptions(),
                                                lambda r: None, kept=kept)
            batches += results
            idle = {w.process.pid for w in kept.idle}
            assert kept.spawned == 2 and len(idle) == 2 and all(w.ready for w in kept.idle)
        assert origin and origin == kept.origin
        assert _statuses(batches) == ["failed"] + ["passed"] * (len(FILES) - 1)
        processes = [w.process for w in kept.idle]
    finally:
        kept.close()
    assert not kept.idle and kept.log_dir is None and all(p.exitcode is not None for p in processes)
    alone, _ = workers.run_cases(FILES[half:], None, "state_backends:first_call", RunOptions(), lambda r: None)
    assert _statuses(alone) == ["failed"] + ["passed"] * (len(FILES) - half - 1)


def test_a_worker_that_died_is_not_kept():
    kept = KeptWorkers()
    try:
        results, _ = workers.run_cases(FILES[:1], None, "ending_backends:os_exit_0", RunOptions(), lambda r: None,
                                       kept=kept)
        assert _statuses(results) == ["error"] and not kept.idle and kept.spawned >= 2
        before = kept.spawned
        results, _ = workers.run_cases(FILES[:1], None, "state_backends:stateless", RunOptions(), lambda r: None,
                                       kept=kept)
        assert _statuses(results) == ["passed"] and kept.spawned == before + 2 and len(kept.idle) == 2
    finally:
        kept.close()


def test_keeping_only_the_warm_pass_judges_each_run_as_a_run_alone():
    """Shrink's way (harness.cli.shrink): each run's cold pass in a fresh worker, its first call the case's."""
    kept = KeptWorkers(passes=(WARM_PASS,))
    try:
        for run in range(2):
            results, _ = workers.run_cases(FILES[:1], None, "state_backends:first_call", RunOptions(),
                                           lambda r: None, kept=kept)
            assert _statuses(results) == ["failed"]
            assert [w.of_pass for w in kept.idle] == [WARM_PASS] and kept.spawned == 2 + run
    finally:
        kept.close()
