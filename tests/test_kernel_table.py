"""`opcase kernels` is the list of kernels (README: Kernels): found from the specs and each kernel's own
modules, with the main command's case counts that `gen` plans and the committed suite's files."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from gen.core.registry import known_ops, spec_for
from gen.core.spec import SUITES
from gen.generate import plan_suite
from harness.cli import kernel_table


def _opcase(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, capture_output=True, text=True)


CASES = REPO / "cases"   # absent in a copy without the committed suite (tests/test_new_kernel.py)


def test_every_spec_is_a_row_with_the_counts_gen_plans_and_the_files_committed():
    rows = {row.op: row for row in kernel_table.kernel_rows(CASES)}
    assert sorted(rows) == known_ops()
    for op, row in rows.items():
        plans = sum(len(plan_suite(spec_for(op), suite)) for suite in SUITES)
        assert 0 < row.main_cases <= plans, (op, row.main_cases, plans)
        committed = len(list((CASES / op).rglob("*.opcase"))) if CASES.is_dir() else None
        assert row.committed_cases == committed


def test_the_command_prints_every_kernel_and_the_totals():
    shown = _opcase("kernels", "--markdown")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line.split("`")[1] for line in lines[2:-1]] == known_ops()
    rows = kernel_table.kernel_rows(CASES if CASES.is_dir() else None)
    total = [cell.strip() for cell in lines[-1].split("|")]
    assert total[1] == f"{len(rows)} kernels"
    assert int(total[3]) == sum(r.main_cases for r in rows)
    assert total[5] == (str(sum(r.committed_cases for r in rows)) if CASES.is_dir() else "")


def test_a_missing_cases_directory_is_one_line_and_exit_2(tmp_path):
    shown = _opcase("kernels", "--cases", str(tmp_path / "nowhere"))
    assert shown.returncode == 2
    assert shown.stderr.strip().splitlines() == [f"Error: --cases {tmp_path / 'nowhere'}: no such directory"]


def test_optional_parts_are_found_without_importing_torch():
    """The torch kernels import torch; listing them must not (torch may be absent, and is slow)."""
    probe = ("import sys; from harness.cli import kernel_table as t; from gen.core.registry import known_ops; "
             "parts = [t.optional_parts(op) for op in known_ops()]; "
             "print(sum('torch' in p for p in parts), 'torch' in sys.modules)")
    shown = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    found, imported = shown.stdout.split()
    assert int(found) > 0 and imported == "False"
