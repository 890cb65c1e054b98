"""Planted rounding bugs of the accumulating kernels, beyond what every kernel's generic tests
(tests/test_kernels.py: every planted bug fails its suite, the bug-free copy passes, every missing
check is caught) ask: a bias of one ulp is caught by diff4 where the doc judges it, and the planted
rounding is what it claims to be.
"""
from __future__ import annotations

import numpy as np

from conftest import checked_backend, failed_metrics, run_dir, statuses
from gen.kernels.border_align.planted import border_align_backward_compute
from gen.core.rounding import round_toward_zero
from gen.core.verdict import FAILED


def test_round_toward_zero_bias_is_caught_by_diff4(suites):
    """Truncation stays within an ulp, far below diff1/diff2's thresholds; only diff4 (the
    direction of the errors) sees it, in a case whose golden has one sign throughout."""
    results = run_dir(suites("border_align_backward"),
                      checked_backend("truncating", border_align_backward_compute(rounding="toward_zero")))
    by_diff4 = [r.key for r in results if r.status == FAILED and "diff4" in failed_metrics(r)]
    assert by_diff4, f"no case fails truncation by diff4: {statuses(results)}"


def test_round_toward_zero_is_only_a_bias():
    """The planted rounding is what it claims: toward zero, at most one ulp from nearest."""
    a = np.array([1.0 + 2.0 ** -12, -(1.0 + 2.0 ** -12), 1.0 - 2.0 ** -13, 7e4, np.inf, -np.inf, np.nan, 0.0])
    t = round_toward_zero(a, np.float16)
    assert t.dtype == np.float16
    assert t[0] == 1.0 and t[1] == -1.0 and t[2] == np.nextafter(np.float16(1.0), np.float16(0))
    assert t[3] == np.finfo(np.float16).max and t[4] == np.inf and t[5] == -np.inf and np.isnan(t[6]) and t[7] == 0
    finite = np.random.default_rng(0).normal(size=1000)
    assert np.all(np.abs(round_toward_zero(finite, np.float32).astype(np.float64)) <= np.abs(finite))
