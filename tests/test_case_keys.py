"""Keyed case checksums (gen/core/case_keys.py): a case file rewritten after opcase wrote it, its
sha256 written anew, is refused by the judge; cases opcase did not write at their path run unkeyed
and are counted; a worker can neither rewrite the cases nor read the key."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from gen.core import case_keys
from gen.core.casefile import CaseRewritten, load
from confine_backends import rewrite_goldens
from test_processes import REPO, marker, opcase   # noqa: F401 - marker is a fixture
from harness.worker import confine

SPEC = REPO / "specs" / "psamask_forward.yaml"
CHECKSUM = b"\x01" * 32


@pytest.fixture
def keys(tmp_path, monkeypatch):
    """A key directory of the test's own (the process's cache of opened ledgers forgotten)."""
    monkeypatch.setenv(case_keys.KEY_DIR_VARIABLE, str(tmp_path / "keys"))
    monkeypatch.setattr(case_keys, "_opened", {})
    return tmp_path / "keys"


def _generated(tmp_path, marker):
    out = tmp_path / "cases"
    done = opcase(["gen", SPEC, "--suite", "boundary", "-o", out], marker, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    return out, sorted(out.rglob("*.opcase")), done


def _run(tmp_path, marker, paths, *extra):
    report = tmp_path / "report.json"
    done = opcase(["run", *paths, "--backend", "reference", "--json", report, *extra], marker, tmp_path, timeout=300)
    return done, json.loads(report.read_text())


def _keyed_line(done) -> str:
    return next(line for line in done.stdout.splitlines() if line.startswith("cases keyed: "))


# ---- the ledger itself --------------------------------------------------------------------------

def test_a_ledger_tells_keyed_unkeyed_and_refused(tmp_path, keys):
    assert case_keys.ledger() is None and not keys.exists()   # looking up makes no key
    ledger = case_keys.ledger(create=True)
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700 and stat.S_IMODE(os.stat(keys / "key").st_mode) == 0o600
    case = tmp_path / "a.opcase"
    case.write_bytes(b"")
    ledger.record(case, CHECKSUM)
    assert ledger.state(case, CHECKSUM) == case_keys.KEYED
    assert ledger.state(case, b"\x02" * 32) == case_keys.REFUSED
    assert ledger.state(tmp_path / "b.opcase", CHECKSUM) == case_keys.UNKEYED
    link = tmp_path / "link.opcase"
    link.symlink_to(case)
    assert ledger.state(link, CHECKSUM) == case_keys.KEYED   # the real path is what is keyed
    # another key (another user, another machine) knows nothing of this ledger's entries
    other = case_keys.Ledger(keys, b"\x00" * case_keys.KEY_BYTES)
    assert other.state(case, CHECKSUM) == case_keys.UNKEYED
    ledger.forget(case)
    assert ledger.state(case, CHECKSUM) == case_keys.UNKEYED
    assert not any(str(tmp_path.name) in p.name for p in keys.rglob("*"))   # entries do not name paths


@pytest.mark.parametrize("flaw", ["group-writable directory", "short key", "key readable by others", "key symlink"])
def test_a_key_others_could_know_or_write_is_not_used(tmp_path, keys, flaw):
    case_keys.ledger(create=True)
    case_keys._opened.clear()
    key = keys / "key"
    if flaw == "group-writable directory":
        keys.chmod(0o770)
    elif flaw == "short key":
        key.write_bytes(b"short")
    elif flaw == "key readable by others":
        key.chmod(0o644)
    else:
        key.rename(keys / "elsewhere")
        key.symlink_to(keys / "elsewhere")
    with pytest.raises(case_keys.KeysUnavailable):
        case_keys.ledger(create=True)
    assert case_keys.unavailable_reason()


def test_no_home_and_a_relative_key_dir_are_said(monkeypatch):
    monkeypatch.setenv(case_keys.KEY_DIR_VARIABLE, "relative/keys")
    assert "not an absolute path" in case_keys.unavailable_reason()


def test_processes_making_the_key_at_once_agree_on_one(tmp_path, keys):
    program = ("import sys; from gen.core import case_keys; "
               "sys.stdout.write(case_keys.ledger(create=True).key.hex())")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, env=env, text=True)
             for _ in range(6)]
    made = {proc.communicate(timeout=120)[0] for proc in procs}
    assert len(made) == 1 and len(made.pop()) == 2 * case_keys.KEY_BYTES
    assert [p.name for p in keys.iterdir() if p.name.startswith(".key.")] == []


# ---- gen and run ---------------------------------------------------------------------------------

def test_a_rewritten_case_is_refused_and_the_run_fails(tmp_path, marker, keys):
    out, files, _ = _generated(tmp_path, marker)
    done, doc = _run(tmp_path, marker, [out])
    assert done.returncode == 0 and _keyed_line(done) == f"cases keyed: {len(files)} of {len(files)}; 0 refused"
    assert doc["run"]["cases_keyed"]["keyed"] == len(files)

    rewritten = files[0]   # as a backend without Landlock could: zeros as goldens, the sha256 anew
    rewrite_goldens(rewritten, lambda tensor: bytes(len(tensor.data)))
    with pytest.raises(CaseRewritten):
        load(rewritten, keyed=True)
    assert load(rewritten).name   # unkeyed reads (show, the envelope's own check) still take it
    for jobs in ([], ["--jobs", "2"]):   # in the judge's process and beside its workers
        done, doc = _run(tmp_path, marker, [out], *jobs)
        assert done.returncode == 1, done.stdout + done.stderr
        assert _keyed_line(done).startswith(f"cases keyed: {len(files) - 1} of {len(files)}; 1 refused")
        refused = [c for c in doc["cases"] if c["keyed"] == case_keys.REFUSED]
        assert [c["status"] for c in refused] == ["error"] and "content changed after it was generated" in \
            refused[0]["message"] and refused[0]["op"] == "psamask_forward"
        assert doc["run"]["cases_keyed"] == {"keyed": len(files) - 1, "refused": 1, "of": len(files),
                                             "ledger": str(keys), "unavailable": None}

    # gen writes it again (the resumed gen does not keep it as whole), and the next run is green
    again = opcase(["gen", SPEC, "--suite", "boundary", "-o", out], marker, tmp_path, timeout=300)
    assert f"wrote 1 cases" in again.stdout and f"kept {len(files) - 1}" in again.stdout
    assert _run(tmp_path, marker, [out])[0].returncode == 0


def test_cases_opcase_did_not_write_there_run_unkeyed_and_are_counted(tmp_path, marker, keys):
    out, files, _ = _generated(tmp_path, marker)
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    done, doc = _run(tmp_path, marker, [moved, REPO / "cases" / "psamask_backward" / "boundary"])
    assert done.returncode == 0, done.stdout
    committed = len(list((REPO / "cases" / "psamask_backward" / "boundary").glob("*.opcase")))
    line = _keyed_line(done)
    assert line.startswith(f"cases keyed: 0 of {len(files) + committed}; 0 refused (the others were not written")
    assert all(c["keyed"] == case_keys.UNKEYED for c in doc["cases"])


def test_without_a_key_directory_cases_are_written_and_run_unkeyed_saying_why(tmp_path, marker, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv(case_keys.KEY_DIR_VARIABLE, str(blocker / "keys"))
    out, files, made = _generated(tmp_path, marker)
    assert "note: the cases are not keyed" in made.stderr and files
    done, _ = _run(tmp_path, marker, [out])
    assert done.returncode == 0 and "(no key ledger: cannot make" in _keyed_line(done)


def test_fresh_cases_are_keyed_and_leave_no_entry_behind(tmp_path, marker, keys):
    done, doc = _run(tmp_path, marker, [REPO / "cases" / "psamask_forward" / "boundary"], "--fresh", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    fresh = [c for c in doc["cases"] if c["suite"] == "fresh"]
    assert len(fresh) == 2 and all(c["keyed"] == case_keys.KEYED for c in fresh)
    assert [p for p in (keys / "ledger").rglob("*") if p.is_file()] == []   # forgotten with their directory


# ---- a worker and the keys -----------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["rewrites_the_cases", "forges_the_ledger"])
def test_a_worker_can_neither_rewrite_the_cases_nor_read_the_key(tmp_path, marker, keys, backend):
    """Under Landlock the worker can neither write a case file nor read the key (its cases are errors)
    and the cases stay as opcase wrote them; without it the rewrite lands, and the next run refuses
    every case rewritten without the key."""
    out, files, _ = _generated(tmp_path, marker)
    os.environ["OPCASE_TEST_CASES"] = str(out)
    try:
        attacked = opcase(["run", out, "--backend", f"confine_backends:{backend}", "--jobs", "1"],
                          marker, tmp_path, timeout=300)
    finally:
        del os.environ["OPCASE_TEST_CASES"]
    assert attacked.returncode == 1, attacked.stdout
    done, doc = _run(tmp_path, marker, [out])
    if confine.landlock_abi() > 0:
        assert "Permission denied" in attacked.stdout, attacked.stdout
        assert done.returncode == 0 and _keyed_line(done) == f"cases keyed: {len(files)} of {len(files)}; 0 refused"
    else:
        assert done.returncode == 1
        pytest.skip("no Landlock here: a worker can rewrite the cases (the next run refuses them) and read the "
                    "key (nothing stands then: harness/GUARANTEES.md)")


def test_a_key_directory_the_workers_may_read_is_warned_of(tmp_path, marker, monkeypatch):
    """A single-file backend's directory is the workers' to read: a key kept under it is no secret."""
    backend_dir = tmp_path / "backend"
    backend_dir.mkdir()
    (backend_dir / "zeros_backend.py").write_text(
        "import numpy as np\n"
        "def run(request):\n"
        "    return {n: np.zeros(o.shape, o.dtype) for n, o in request.outputs.items()}\n")
    monkeypatch.setenv(case_keys.KEY_DIR_VARIABLE, str(backend_dir / "keys"))
    monkeypatch.setenv("PYTHONPATH", str(backend_dir))
    out, files, _ = _generated(tmp_path, marker)
    done = opcase(["run", out, "--backend", "zeros_backend:run", "--jobs", "1"], marker, tmp_path, timeout=300)
    assert f"warning: the key directory lies within {backend_dir}, which the workers may read" in _keyed_line(done)
