"""The kernels opcase knows, as discovery finds them: `opcase kernels`.

Nothing lists kernels by hand (README: Adding a kernel): this table is made from specs/*.yaml and the
packages that hold each kernel's optional parts, so a new kernel appears here by its own files alone,
with how many cases the main command makes of it and how many a committed suite holds.
"""
from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from gen.core.registry import (COST, MMCV_EMULATION, TORCH_KERNEL, kernel_function, known_ops, part_module_names,
                                planted_bugs, spec_for)
from gen.core.spec import SUITES
from gen.generate import plan_suite, total_bytes

# The main command: `opcase gen specs/*.yaml --suite all --max-size 64MB` (opcase's MB is 10^6 bytes).
MAIN_MAX_BYTES = 64 * 10**6


@dataclass(frozen=True)
class KernelRow:
    op: str
    thresholds: str          # "static", or "dynamic, baseline NAME"
    main_cases: int          # cases the main command writes of it (plans within --max-size)
    main_bytes: int          # their tensors' bytes
    committed_cases: int | None  # *.opcase files under CASES/op, None without a cases directory
    parts: tuple[str, ...]   # the optional parts it has: mmcv, torch, planted, mlu-ops, cost


def main_command_cases(op: str) -> tuple[int, int]:
    """(cases, bytes of tensors) that the main command writes of `op`: its plans within --max-size."""
    spec = spec_for(op)
    sizes = [total_bytes(spec, plan) for suite in SUITES for plan in plan_suite(spec, suite)]
    kept = [size for size in sizes if size <= MAIN_MAX_BYTES]
    return len(kept), sum(kept)


def _defines_function(part: str, op: str) -> bool:
    """Whether `op`'s module of `part` has a top-level function `op`, read without importing it (the
    torch kernels import torch, which may not be installed)."""
    for name in part_module_names(part, op):
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:      # no folder for the family
            continue
        if found is None or not found.origin:
            continue
        tree = ast.parse(Path(found.origin).read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == op for node in tree.body):
            return True
    return False


def optional_parts(op: str) -> tuple[str, ...]:
    """What `op` has beyond its spec, reference and test record (README: Adding a kernel)."""
    has = {
        "mmcv": kernel_function(MMCV_EMULATION, op) is not None,
        "torch": _defines_function(TORCH_KERNEL, op),
        "planted": bool(planted_bugs(op)),
        "mlu-ops": spec_for(op).mluops is not None,
        "cost": kernel_function(COST, op) is not None,
    }
    return tuple(name for name, present in has.items() if present)


def kernel_rows(cases_dir: Path | None = None) -> list[KernelRow]:
    rows = []
    for op in known_ops():
        criteria = spec_for(op).criteria
        thresholds = f"dynamic, baseline {criteria.baseline}" if criteria.mode == "dynamic" else criteria.mode
        cases, size = main_command_cases(op)
        committed = (sum(1 for _ in (cases_dir / op).rglob("*.opcase"))
                     if cases_dir is not None and cases_dir.is_dir() else None)
        rows.append(KernelRow(op, thresholds, cases, size, committed, optional_parts(op)))
    return rows


def _cells(row: KernelRow) -> list[str]:
    committed = "" if row.committed_cases is None else str(row.committed_cases)
    return [row.op, row.thresholds, str(row.main_cases), f"{row.main_bytes / 1e9:.2f}", committed,
            " ".join(row.parts) or "-"]


def _total_cells(rows: list[KernelRow]) -> list[str]:
    committed = [r.committed_cases for r in rows if r.committed_cases is not None]
    return [f"{len(rows)} kernels", "", str(sum(r.main_cases for r in rows)),
            f"{sum(r.main_bytes for r in rows) / 1e9:.2f}", str(sum(committed)) if committed else "", ""]


HEADINGS = ["kernel", "thresholds", "main command's cases", "their GB", "committed cases", "optional parts"]


def markdown(rows: list[KernelRow]) -> str:
    """The table as GitHub markdown (`opcase kernels --markdown`)."""
    lines = ["| " + " | ".join(HEADINGS) + " |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for cells in [_cells(r) for r in rows]:
        lines.append("| " + " | ".join([f"`{cells[0]}`"] + cells[1:]) + " |")
    lines.append("| " + " | ".join(_total_cells(rows)) + " |")
    return "\n".join(lines)


def columns(rows: list[KernelRow]) -> str:
    """The table as aligned plain-text columns (`opcase kernels`)."""
    table = [HEADINGS] + [_cells(r) for r in rows] + [_total_cells(rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADINGS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table)
