"""A new kernel is its own files: a small synthetic kernel (spec, float64 reference, test record and
one mlu-ops conformance file with its provenance line), written into a temporary copy of the
repository, passes the generic kit there.  A test or a README that hard-codes the kernels (a count,
a list, dim names) fails in that copy, at once; so does a kit that stops covering a new kernel."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO

OP = "synthetic_square_forward"
FAMILY = "synthetic_square"

SPEC = f"""\
# A synthetic kernel written by tests/test_new_kernel.py: y = x * x, elementwise.
op: {OP}
doc: none (synthetic)
reference: gen.kernels.{FAMILY}.reference:forward
dtypes: [float32]
mluops:
  inputs: [x]
  outputs: [y]
params: {{}}
inputs:
  x: {{dtype: T, layout: ARRAY, shape: [N], axes: [item], values: {{dist: uniform, low: -2.0, high: 2.0}}}}
outputs:
  y: {{dtype: T, layout: ARRAY, shape: [N], axes: [item]}}
checks:
  - id: dtype_match
    doc: synthetic
    message: x and y must have the same dtype
    require: "x.dtype == y.dtype"
    violate: {{dtype: {{y: float16}}}}
  - id: same_shape
    doc: synthetic
    message: x and y must have the same shape
    require: "x.shape == y.shape"
    violate: {{shape: {{y: [3]}}}}
criteria:
  static: {{diff1: 3e-7, diff2: 3e-7}}
suites:
  random:
    count: 4
    dims: {{N: {{min: 2, max: 300}}}}
  boundary:
    - {{name: two_elements, dims: {{N: 2}}}}
    - {{name: past_a_block, dims: {{N: 65}}}}
  invalid:
    base: {{dims: {{N: 5}}}}
  stress:
    base: {{dims: {{N: 8}}}}
    values: {{subnormal: [x]}}
    channel_tail: {{dim: N, widths: [16]}}
    index_width: {{tensor: y, past_2e24: {{dims: {{N: 16777217}}}}}}
    not_applicable:
      index_width_64MB: float32 only, x and y past 2^24 elements are 134 MB together, over the main command's --max-size 64MB
"""

REFERENCE = '''\
"""A synthetic kernel (tests/test_new_kernel.py): y = x * x."""
import numpy as np


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    x = np.asarray(inputs["x"], dtype=compute_dtype)
    return {"y": x * x}
'''

RECORD = f'''\
"""{OP}'s record: the slow loop of y = x * x."""
import numpy as np

OP = "{OP}"
CONFORMANCE = ["mlu-ops/{OP}/case_0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    x = inputs["x"]
    y = np.zeros(x.shape)
    for i in range(x.shape[0]):
        y[i] = float(x[i]) * float(x[i])
    return {{"y": y}}
'''

PROVENANCE = f"""\
# {OP}'s conformance file (written by tests/test_new_kernel.py)

| file | what it is |
| --- | --- |
| `mlu-ops/{OP}/case_0.prototxt` | float32; x (7) |
"""

# The kit's tests that must run for the new kernel (test id -> how many), and the other generic
# tests that read every kernel.  A kit that stopped discovering kernels would not collect them.
KIT_TESTS = {
    "tests/test_kernels.py::test_every_kernel_has_a_record": 1,
    "tests/test_kernels.py::test_record_lists_every_mluops_file_of_its_kernel": 1,
    "tests/test_kernels.py::test_reference_matches_oracle": 2,
    "tests/test_kernels.py::test_backend_passes_generated_suite": 2,     # reference, lowp
    "tests/test_kernels.py::test_every_missing_check_is_caught": 1,
    "tests/test_kernels.py::test_mluops_round_trip": 1,
    "tests/test_kernels.py::test_conformance_files_import": 1,
    "tests/test_kernels.py::test_backend_passes_conformance_files": 2,
    "tests/test_stress.py::test_every_stress_case_is_valid_and_crosses_what_it_claims": 1,
    "tests/test_stress_reach.py::test_every_stress_dimension_reaches_the_kernel": 1,
}
WHOLE_TESTS = [
    "tests/test_kernels.py::test_every_record_is_a_kernel",
    "tests/test_interop.py::test_conformance_files_import_and_pass_reference",
    "tests/test_mluops_format.py::test_every_conformance_file_parses",
    "tests/test_stress.py::test_index_2e24_cases_fit_the_default_size_where_the_dtype_allows",
    "tests/test_conformance_data.py",
    "tests/test_no_kernel_lists.py",
    "tests/test_readme.py",
    "tests/test_kernel_table.py",
]
# What the copy leaves out: build outputs, and the committed suite (no generic test here reads it).
NOT_COPIED = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info", ".git", "cases", "out", "build")


def _env(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPCASE_SPECS", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(root)
    return env


def _add_synthetic_kernel(root: Path) -> None:
    """What a contributor writes: the kernel's own files, and nothing else."""
    (root / "specs" / f"{OP}.yaml").write_text(SPEC)
    folder = root / "gen" / "kernels" / FAMILY
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "reference.py").write_text(REFERENCE)
    (root / "tests" / "kernels" / f"{OP}.py").write_text(RECORD)
    # Its mlu-ops case file: a case of its own, exported by opcase (mlu-ops has no such kernel).
    made = root / "made"
    subprocess.run([sys.executable, "-m", "harness.cli", "gen", f"--case={OP}:float32:N=7::seed=1",
                    "-o", str(made)], cwd=root, env=_env(root), check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "harness.cli", "export", str(made), "--format", "mluops", "--text",
                    "-o", str(root / "exported")], cwd=root, env=_env(root), check=True, capture_output=True)
    folder = root / "tests" / "conformance" / "mlu-ops" / OP
    folder.mkdir()
    shutil.move(next((root / "exported").rglob("*.prototxt")), folder / "case_0.prototxt")
    (folder / "README.md").write_text(PROVENANCE)
    shutil.rmtree(made)
    shutil.rmtree(root / "exported")


@pytest.fixture(scope="module")
def copy_with_new_kernel(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo") / "opcase"
    shutil.copytree(REPO, root, ignore=NOT_COPIED)
    # cases/'s README (its regeneration command, which the README's checklist repeats), not its cases.
    (root / "cases").mkdir()
    shutil.copy2(REPO / "cases" / "README.md", root / "cases" / "README.md")
    _add_synthetic_kernel(root)
    return root


def run_kit(root: Path, junit: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Run the kit for the new kernel (and the generic tests over all kernels) in ``root``;
    (the process, {test id: outcome})."""
    selected = [*(f"{test}" for test in KIT_TESTS), *WHOLE_TESTS]
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(junit),
            "--basetemp", str(junit.parent / "tmp"), *selected, "-k", f"{OP} or not ["]
    process = subprocess.run(args, cwd=root, env=_env(root), capture_output=True, text=True, timeout=900)
    outcomes = {}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return process, outcomes


@pytest.mark.slow
def test_a_new_kernel_is_its_own_files_and_passes_the_kit(copy_with_new_kernel, tmp_path):
    process, outcomes = run_kit(copy_with_new_kernel, tmp_path / "junit.xml")
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-2000:]
    assert outcomes and all(o == "passed" for o in outcomes.values()), \
        {t: o for t, o in outcomes.items() if o != "passed"}
    for test, count in KIT_TESTS.items():
        module, name = test.split("::")
        classname = module.removesuffix(".py").replace("/", ".")
        ran = [t for t in outcomes if t.startswith(f"{classname}::{name}[") and OP in t]
        assert len(ran) == count, f"{test}: ran for the new kernel as {ran}, expected {count}"
