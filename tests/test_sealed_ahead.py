"""The judge's part of confinement off a run's critical path (harness.judge.sealed_inputs): a worker starts
and loads its backend while the judge reads, checksums and seals the first case; the case's inputs are
sealed before the worker is ready for them; and each case's inputs are sealed once for both its passes."""
from __future__ import annotations

import os
import time

import pytest

from conftest import REPO
from gen.core.casefile import find, load
from harness.judge import sealed_inputs, workers
from harness.judge.cold_pass import Passes
from harness.judge.runner import RunOptions
from harness.judge.sealed_inputs import SealedInputs

# A random case of each of four kernels (small ones).
FILES = [found[0] for found in (find([kernel / "random"]) for kernel in sorted((REPO / "cases").iterdir())
                                if (kernel / "random").is_dir()) if found][:4]

# How long either side waits for the other's mark before it goes on: far longer than a worker's start,
# so that only an order that makes one side wait on the other runs into it.
PATIENCE_S = 30.0

# A backend whose import (in its worker) says it started, then waits until the judge has sealed the
# first case's inputs: the worker cannot be ready before that.
EARLY_BIRD = f'''
import os, pathlib, time
marks = pathlib.Path(os.environ["EARLY_BIRD_MARKS"])
me = os.urandom(8).hex()   # not its pid: each worker is PID 2 in a PID namespace of its own
(marks / f"imported-{{me}}").write_text("")
give_up = time.monotonic() + {PATIENCE_S}
while not (marks / "sealed").exists() and time.monotonic() < give_up:
    time.sleep(0.01)
(marks / f"saw-sealed-{{me}}").write_text(str((marks / "sealed").exists()))
from state_backends import stateless as backend
'''


@pytest.fixture(autouse=True)
def backends_importable(monkeypatch):
    """The workers import tests/state_backends.py by its module name."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                       os.environ.get("PYTHONPATH", "")]))


def _wait_for(predicate) -> bool:
    give_up = time.monotonic() + PATIENCE_S
    while not predicate():
        if time.monotonic() >= give_up:
            return False
        time.sleep(0.01)
    return True


def test_the_worker_starts_while_the_judge_loads_and_seals_the_first_case(tmp_path, monkeypatch):
    """The judge's reading of the first case waits until a worker has imported its backend (so the
    worker's start is not waiting on that read), and the backend's import waits until the judge has
    sealed the case's inputs (so the sealing is done before the worker is ready): either order the
    other way round would hold its side PATIENCE_S and show here."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "early_bird.py").write_text(EARLY_BIRD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EARLY_BIRD_MARKS", str(marks))
    monkeypatch.setenv("OPCASE_WORKER_WRITABLE", str(marks))
    read_after_import = []
    real_load, real_take = workers.load, SealedInputs.take

    def load_once_a_worker_started(path, *args, **kwargs):
        read_after_import.append(_wait_for(lambda: any(marks.glob("imported-*"))))
        return real_load(path, *args, **kwargs)

    def take_and_mark(self, item, case):
        fds = real_take(self, item, case)
        (marks / "sealed").write_text("")
        return fds

    monkeypatch.setattr(workers, "load", load_once_a_worker_started)
    monkeypatch.setattr(SealedInputs, "take", take_and_mark)
    started = time.monotonic()
    results, _ = workers.run_cases(FILES[:1], None, "early_bird:backend", RunOptions(), lambda r: None, jobs=1)
    assert [r.status for r in results] == ["passed"]
    assert read_after_import == [True]
    saw = sorted(p.read_text() for p in marks.glob("saw-sealed-*"))
    assert saw == ["True", "True"], saw   # both passes' workers
    assert time.monotonic() - started < PATIENCE_S


def test_each_case_s_inputs_are_sealed_once_for_both_passes_and_no_descriptor_stays(monkeypatch):
    sealed = []
    real_seal = sealed_inputs.seal_inputs

    def counting_seal(case):
        sealed.append(case.op)
        return real_seal(case)

    monkeypatch.setattr(sealed_inputs, "seal_inputs", counting_seal)
    before = set(os.listdir("/proc/self/fd"))
    results, _ = workers.run_cases(FILES, None, "state_backends:stateless", RunOptions(), lambda r: None, jobs=1)
    assert [r.status for r in results] == ["passed"] * len(FILES)
    assert len(sealed) == len(FILES)
    assert set(os.listdir("/proc/self/fd")) <= before


def test_the_other_pass_s_copy_is_kept_for_a_few_files_only():
    """The other item's descriptors are the same sealed memory; beyond ``keep`` files the oldest are
    closed, and that file's other item seals its inputs again."""
    cases = [load(path) for path in FILES[:3]]
    passes = Passes(len(cases), RunOptions())
    shared = SealedInputs(passes, keep=1)
    first = [shared.take(item, case) for item, case in enumerate(cases)]   # the cold items
    assert list(shared.kept) == [2]
    again = shared.take(len(cases) + 2, cases[2])   # file 2's warm item: the kept copy
    assert [os.fstat(fd).st_ino for fd in again] == [os.fstat(fd).st_ino for fd in first[2]]
    resealed = shared.take(len(cases), cases[0])    # file 0's copy was closed: sealed anew
    assert [os.fstat(fd).st_ino for fd in resealed] != [os.fstat(fd).st_ino for fd in first[0]]
    assert not shared.kept
    for fds in [*first, again, resealed]:
        for fd in fds:
            os.close(fd)
    shared.close()


def test_the_kept_copies_hold_a_bounded_number_of_descriptors(monkeypatch):
    """Whatever --jobs makes ``keep``, the kept copies never hold more than MOST_KEPT_DESCRIPTORS."""
    cases = [load(path) for path in FILES]
    most = max(sum(not t.absent for t in case.inputs.values()) for case in cases)
    monkeypatch.setattr(sealed_inputs, "MOST_KEPT_DESCRIPTORS", most)
    shared = SealedInputs(Passes(len(cases), RunOptions()), keep=100)
    taken = []
    for item, case in enumerate(cases):
        taken.append(shared.take(item, case))
        assert 0 < sum(map(len, shared.kept.values())) <= most
    assert len(shared.kept) < len(cases)
    for fds in taken:
        for fd in fds:
            os.close(fd)
    shared.close()
