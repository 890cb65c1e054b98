"""`opcase run --adjoint` (gen/REACH.md): a backend's own forward and backward of each kernel pair in the
run checked against each other on fresh inputs, no golden; the ADJOINT line says whether the identity
holds, beside the goldens' verdict, and a broken one exits 1."""
from __future__ import annotations

import os

import pytest

from conftest import REPO, run_cli
from gen.adjoint import family_pairs
from gen.core.registry import known_ops, spec_for

TESTS = REPO / "tests"
PAIRS = family_pairs([spec_for(op) for op in known_ops()])


def _pair_cases():
    """A few committed random cases of the first pair's backward, and its family's name."""
    family, (_, backward) = next(iter(sorted(PAIRS.items())))
    cases = sorted((REPO / "cases" / backward.op / "random").glob("*.opcase"))[:2]
    if not cases:
        pytest.skip(f"no committed random case of {backward.op}")
    return family, cases


@pytest.fixture
def tests_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(TESTS)]))


def test_a_right_pair_holds_and_the_goldens_still_judge(tests_on_path):
    family, cases = _pair_cases()
    judged = run_cli(*cases, "--backend", "reference", "--adjoint")
    assert judged.exit_code == 0, judged.output
    line = next(l for l in judged.output.splitlines() if l.startswith(f"ADJOINT  {family}:"))
    assert ": holds, error" in line
    assert f"{len(cases)} passed" in judged.output


def test_a_backward_that_drops_a_term_is_named(tests_on_path):
    family, cases = _pair_cases()
    judged = run_cli(*cases, "--backend", "adjoint_backends:dropped_term", "--adjoint")
    assert judged.exit_code == 1, judged.output
    line = next(l for l in judged.output.splitlines() if l.startswith(f"ADJOINT  {family}:"))
    assert "BROKEN" in line and f"{family}_backward is not {family}_forward's adjoint" in line, line


@pytest.mark.parametrize("family", sorted(PAIRS))
def test_every_pair_breaks_with_a_dropped_term(family):
    """The bound sits between right float32 pairs and a backward with a term left out, for every pair."""
    from harness.backends import load_backend
    from harness.cli.adjoint import check_pair
    from gen.core.backend import Backend
    import adjoint_backends
    forward, backward = PAIRS[family]
    reference = load_backend("reference")
    dropped = Backend(name="dropped_term", origin="tests", run=adjoint_backends.dropped_term,
                      supports=reference.supports)
    for seed in (1, 2):
        right, wrong = check_pair(reference, forward, backward, seed), check_pair(dropped, forward, backward, seed)
        assert right["holds"] is not False, right
        assert wrong["holds"] is False, wrong
