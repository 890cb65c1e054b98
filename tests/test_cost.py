"""A planned case's cost (gen.cost, the cost part of gen/kernels/README.md's contract), which gen's
ETA weighs each case by.

Every kernel's cost accepts every plan its spec makes and never costs a case less than its
bytes; a family's cost function orders its cases as their recorded seconds do better than their
bytes do (the first record of the main command, tests/bench/gen_main_seconds.tsv), which is what it is
for; and the sample a sampled baseline is planned to compute follows gen.sampled's rule.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from gen.core.registry import COST, kernel_function, known_ops, spec_for
from gen.cost import BYTE_UNITS, case_cost
from gen.generate import plan_suite, total_bytes
from gen.kernels.shared.cost import sampled_units
from gen.sampled import CAPTURE_ELEMENTS, FIRST_UNITS, REL_SE_TARGET
from test_progress import main_command_plan, recorded_seconds


@pytest.mark.parametrize("op", known_ops())
def test_every_plan_of_every_suite_has_a_finite_cost_of_at_least_its_bytes(op):
    spec = spec_for(op)
    has_cost = kernel_function(COST, op) is not None
    planned = 0
    for suite in spec.suites:
        for plan in plan_suite(spec, suite, None, 0):
            cost, size = case_cost(spec, plan), total_bytes(spec, plan)
            assert math.isfinite(cost) and cost >= BYTE_UNITS * size, (suite, plan.name, cost, size)
            if not has_cost or plan.violation is not None:
                assert cost == BYTE_UNITS * size, (suite, plan.name)
            planned += 1
    assert planned


@pytest.mark.parametrize("op", [op for op in known_ops() if kernel_function(COST, op) is not None])
def test_a_family_cost_counts_every_valid_plan_whatever_the_baseline(op):
    spec, count = spec_for(op), kernel_function(COST, op)
    for suite in spec.suites:
        for plan in plan_suite(spec, suite, None, 0):
            if plan.violation is None:
                for baseline in (None, "whole", "sampled"):
                    work = count(dict(plan.dims), dict(plan.params), plan.dtype, baseline)
                    assert math.isfinite(work) and work >= 0, (suite, plan.name, baseline, work)


def test_a_cost_that_cannot_read_its_plan_leaves_the_case_its_bytes(monkeypatch):
    import gen.cost

    def unreadable(dims, params, dtype, baseline):
        raise KeyError("H")
    op = next(op for op in known_ops() if kernel_function(COST, op) is not None)
    spec = spec_for(op)
    plan = next(p for p in plan_suite(spec, "random", None, 0) if p.violation is None)
    monkeypatch.setattr(gen.cost, "kernel_function", lambda part, name: unreadable)
    assert case_cost(spec, plan) == BYTE_UNITS * total_bytes(spec, plan)


@pytest.fixture(scope="module")
def record():
    plan, costs = main_command_plan()
    return plan, costs, recorded_seconds(plan)


def _rank_correlation(a, b) -> float:
    ranks = [np.argsort(np.argsort(np.asarray(v, dtype=float), kind="stable")) for v in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


@pytest.mark.parametrize("op", [op for op in known_ops() if kernel_function(COST, op) is not None])
def test_a_family_cost_orders_its_recorded_cases_better_than_their_bytes(record, op):
    plan, costs, seconds = record
    keys = [key for key in plan if key[0] == op]
    took = [seconds[key] for key in keys]
    by_cost = _rank_correlation(took, [costs[key] for key in keys])
    by_bytes = _rank_correlation(took, [plan[key] for key in keys])
    assert by_cost > by_bytes, (by_cost, by_bytes)


def test_a_sample_is_planned_to_hold_enough_elements_of_its_smallest_output():
    enough = int(1 / REL_SE_TARGET ** 2)
    # A unit of many elements: the first round.
    assert sampled_units(10**6, smallest=enough, per_unit=enough) == FIRST_UNITS
    # A two-element unit: doublings until the sample holds `enough` of them, within the units there are.
    units = sampled_units(10**6, smallest=2, per_unit=2)
    assert units * 2 >= enough and units // 2 * 2 < enough and units % FIRST_UNITS == 0
    assert sampled_units(100, smallest=2, per_unit=2) == 100
    # Never past the sample's cap on the golden values it keeps.
    assert sampled_units(10**9, smallest=1, per_unit=CAPTURE_ELEMENTS // 64) == 64


def test_an_exact_baseline_is_planned_to_the_sample_cap():
    """A baseline whose every error is zero gives its metrics no relative standard error to fall
    under the target (gen.sampled._relative_se), so its sample runs to the cap: a family that
    knows a case's arithmetic rounds nowhere plans it so (carafe's one-tap cases: their softmax
    mask is 1 exactly, the output the input's copy), where the same units with errors stop at 64."""
    assert sampled_units(10**6, smallest=50, per_unit=50) == 64
    assert sampled_units(10**6, smallest=50, per_unit=50, exact=True) == CAPTURE_ELEMENTS // 50
    assert sampled_units(1000, smallest=50, per_unit=50, exact=True) == 1000
