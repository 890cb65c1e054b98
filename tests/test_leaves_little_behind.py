"""The test command leaves little behind: under the project's pytest configuration a passing test's
tmp_path is removed when it ends, a passing run removes its whole base directory (the session fixtures'
generated suites with it), and only a failing run keeps its directories, to debug them."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

TESTS = '''
import pytest

@pytest.fixture(scope="session")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    (out / "case.bin").write_bytes(bytes(1 << 20))
    return out

def test_uses_the_suite(suite, tmp_path):
    (tmp_path / "big.bin").write_bytes(bytes(1 << 20))
    assert (suite / "case.bin").exists()

def test_fails_if_asked(tmp_path):
    (tmp_path / "kept.bin").write_bytes(b"x")
    import os
    assert not os.environ.get("FAIL_ONE")
'''


def _run(tmp_path, fail: bool) -> tuple[int, list]:
    """Run TESTS with the repository's pytest configuration and a temporary directory of their own;
    return the exit status and every file left under that directory."""
    temp = tmp_path / ("temp-fail" if fail else "temp-pass")
    temp.mkdir()
    (tmp_path / "test_sample.py").write_text(TESTS)
    env = {**os.environ, "TMPDIR": str(temp), "FAIL_ONE": "1" if fail else ""}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
                          env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, sorted(p.name for p in temp.rglob("*") if p.is_file())


def test_a_passing_run_leaves_no_files(tmp_path):
    code, left = _run(tmp_path, fail=False)
    assert code == 0
    assert left == []


def test_a_failing_run_keeps_the_failing_test_and_the_session_fixtures(tmp_path):
    code, left = _run(tmp_path, fail=True)
    assert code == 1
    assert left == ["case.bin", "kept.bin"]      # big.bin went with its passing test
