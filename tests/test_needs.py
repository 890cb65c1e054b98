"""Without an optional extra the tests that need it skip, saying so, and the run stays green: here with
PyTorch hidden from a pytest run (the README's test command on a machine with only the `test` extra)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO

# A sitecustomize that makes `import torch` fail and importlib.util.find_spec("torch") say it is absent.
HIDE_TORCH = "import sys\nsys.modules['torch'] = None\n"


def _mentions_torch() -> list[str]:
    """Every test module that names torch (the backend, its kernels or the package)."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                  if p.name != "test_needs.py" and re.search(r"\btorch\b", p.read_text(encoding="utf-8")))


def test_torch_tests_skip_without_torch_and_the_summary_says_why(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(HIDE_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    files = _mentions_torch()
    assert "tests/test_torch_backend.py" in files
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "torch", *files],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    # Every selected test skipped, each for the lack of torch, and the summary counts them.
    last = output.strip().splitlines()[-1]
    total = re.fullmatch(r"=* ?(\d+) skipped(, \d+ deselected)? in [\d.]+s ?=*", last)
    assert total, output[-4000:]
    counted = re.search(r"^(\d+) skipped for lack of torch: .*pip install -e '\.\[torch\]'$", output, re.MULTILINE)
    assert counted and counted[1] == total[1], output[-4000:]
