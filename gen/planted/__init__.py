"""Kernel-specific planted bugs, as data per kernel (or kernel family): each module holds PLANTED
({op: {bug name: compute}}), CORRECT ({op: compute}, the same copy with no bug) and optionally
CONTROLS ({op: {name: compute}}: legitimate variants, such as another summation order, that
every case must pass).

A ``compute(request) -> {output: array}`` returns float64 results (or results already in the
output dtype, for the bugs that round on their own); `opcase power` and the tests make it a
backend with the spec's parameter checks before it and rounding to the output dtypes after.
The harness names no kernel: a kernel's bugs are found by convention
(gen.core.registry.kernel_module: ``gen.planted.<op>``, else ``gen.planted.<family>``).
"""
from __future__ import annotations

from gen.core.registry import kernel_module


def _module(op: str):
    return kernel_module(__name__, op)


def planted(op: str) -> dict:
    """{bug name: compute} of ``op``'s planted bugs (empty where there are none)."""
    module = _module(op)
    return dict(getattr(module, "PLANTED", {}).get(op, {})) if module else {}


def correct(op: str):
    """The bug-free copy of ``op``'s kernel (a compute), or None."""
    module = _module(op)
    return getattr(module, "CORRECT", {}).get(op) if module else None


def controls(op: str) -> dict:
    """{name: compute} of ``op``'s kernel-specific controls (empty where there are none)."""
    module = _module(op)
    return dict(getattr(module, "CONTROLS", {}).get(op, {})) if module else {}
