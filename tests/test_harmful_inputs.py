"""Inputs from a spec that used to harm (issue 35, item 6): each is now refused with one line, in
bounded time and memory.  Each test here failed on the code before the fix."""
from __future__ import annotations

import time

import pytest

from conftest import REPO
from gen.core.expr import ExprError, evaluate
from gen.core.spec import SpecError, load_spec

OP = "psamask_forward"


@pytest.mark.parametrize("text", ["prod(('x', 10**9))", "prod([[0], 10**9])", "prod([2**4000, 2**4000])",
                                  "prod(('ab', 3), start=10**8)"])
def test_prod_goes_through_the_guards_of_star(text):
    """math.prod repeated a str or list (a 1 GB string, a 3 GB list) and multiplied past MAX_INT_BITS."""
    start = time.monotonic()
    with pytest.raises(ExprError, match="not allowed|too large"):
        evaluate(text, {})
    assert time.monotonic() - start < 1


def test_prod_still_multiplies():
    assert evaluate("prod([2, 3, 4])", {}) == 24 and evaluate("prod((1.5, 2))", {}) == 3.0


@pytest.mark.parametrize("pattern", ["(.|.)*#", "(a+)+$", "(x*)*y", ".*.*.*.*.*#", "(?=r).*", "(b)\\1"])
def test_a_deviation_regex_that_could_hang_is_refused_when_the_spec_is_read(tmp_path, pattern):
    spec = tmp_path / f"{OP}.yaml"
    spec.write_text((REPO / "specs" / f"{OP}.yaml").read_text()
                    + f"\ndeviations:\n  - backend: lowp\n    cases: '{pattern}'\n    status: failed\n"
                      f"    reason: a pattern that backtracks without end on a case name\n")
    start = time.monotonic()
    with pytest.raises(SpecError) as raised:
        load_spec(spec)
    assert time.monotonic() - start < 5
    assert "deviation: cases" in str(raised.value) and len(str(raised.value).splitlines()) == 1


def test_a_plain_deviation_regex_is_still_accepted(tmp_path):
    spec = tmp_path / f"{OP}.yaml"
    spec.write_text((REPO / "specs" / f"{OP}.yaml").read_text()
                    + "\ndeviations:\n  - backend: lowp\n    cases: 'boundary/(map_1x1|map_2x2)-.*'\n"
                      "    status: failed\n    reason: a scoped disagreement, named by two prefixes\n")
    assert load_spec(spec).deviations[0].covers("lowp", "boundary", "map_1x1-psa_type0-float32")
