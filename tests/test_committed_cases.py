"""The committed suite in cases/ is what the generator makes today, and the reference passes it."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from gen.core.casefile import load
from harness.cli import main

CASES = REPO / "cases"


def _command() -> list[str]:
    line = next(l for l in (CASES / "README.md").read_text().splitlines() if l.strip().startswith("opcase gen"))
    return shlex.split(line)[1:]


@pytest.mark.slow
def test_committed_suite_is_current(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    args = _command()
    specs = sorted(str(p.relative_to(REPO)) for p in (REPO / "specs").glob("*.yaml"))
    args = [a for a in args if a != "specs/*.yaml"][:1] + specs + [a for a in args if a != "specs/*.yaml"][1:]
    args[args.index("-o") + 1] = str(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    fresh = {p.relative_to(tmp_path): p for p in tmp_path.rglob("*") if p.is_file()}
    committed = {p.relative_to(CASES): p for p in CASES.rglob("*") if p.is_file() and p.name != "README.md"}
    assert sorted(fresh) == sorted(committed), "cases/ lists other files than the generator makes now"
    changed = [str(k) for k in fresh if k.suffix == ".opcase" and not _same_case(fresh[k], committed[k])]
    assert not changed, f"goldens or cases changed; if intended, regenerate cases/ (see cases/README.md): {changed[:5]}"


def _same_case(a: Path, b: Path) -> bool:
    """Tensors bit for bit, everything else equal, thresholds too: the metrics that set them sum
    in a fixed order (gen.core.metrics._fixed_order_sum), so they are the same bits on any CPU."""
    ca, cb = load(a), load(b)
    for kind in ("inputs", "outputs"):
        ta, tb = getattr(ca, kind), getattr(cb, kind)
        if list(ta) != list(tb):
            return False
        for name in ta:
            x, y = ta[name], tb[name]
            if (x.shape, x.dtype, x.layout, x.absent) != (y.shape, y.dtype, y.layout, y.absent):
                return False
            if (x.data is None) != (y.data is None) or (x.data is not None and x.data.tobytes() != y.data.tobytes()):
                return False
    plain = ("op", "suite", "name", "params", "expect", "expect_check", "seed", "spec_sha256", "zero_golden_ok",
             "nondeterministic_sums")
    if any(getattr(ca, f) != getattr(cb, f) for f in plain) or list(ca.criteria) != list(cb.criteria):
        return False
    if list(ca.undetermined) != list(cb.undetermined) or any(
            getattr(u, f).tobytes() != getattr(cb.undetermined[name], f).tobytes()
            for name, u in ca.undetermined.items() for f in ("index", "offsets", "acceptable")):
        return False
    for output, ths in ca.criteria.items():
        other = cb.criteria[output]
        if [t.metric for t in ths] != [t.metric for t in other]:
            return False
        if any((t.value, t.baseline, t.provenance) != (u.value, u.baseline, u.provenance)
               for t, u in zip(ths, other)):
            return False
    return True


@pytest.mark.slow   # every committed case judged
def test_reference_passes_committed_suite():
    result = CliRunner().invoke(main, ["run", str(CASES), "--backend", "reference"])
    assert result.exit_code == 0, result.output[-2000:]


def _dispatched_features_here() -> list[str]:
    """numpy's run-time dispatched SIMD features (AVX2, AVX512, ...) this CPU has."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy 1.x keeps them in numpy.core
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]


@pytest.mark.slow
def test_cases_do_not_depend_on_the_cpus_simd_features(tmp_path):
    """Case files are byte-identical whatever SIMD paths numpy takes: the committed suite,
    generated with every dispatched feature of this CPU switched off, is cases/ byte for byte."""
    import os
    import subprocess
    import sys

    import pytest

    features = _dispatched_features_here()
    if not features:
        pytest.skip("this CPU has no SIMD features beyond numpy's baseline to switch off")
    args = _command()
    specs = sorted(str(p.relative_to(REPO)) for p in (REPO / "specs").glob("*.yaml"))
    args = [a for a in args if a != "specs/*.yaml"][:1] + specs + [a for a in args if a != "specs/*.yaml"][1:]
    args[args.index("-o") + 1] = str(tmp_path)
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(features)}
    done = subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.opcase"))
    assert fresh == sorted(p.relative_to(CASES) for p in CASES.rglob("*.opcase"))
    differing = [str(k) for k in fresh if (tmp_path / k).read_bytes() != (CASES / k).read_bytes()]
    assert not differing, f"without {features}, these cases come out differently: {differing[:5]}"


# The committed suite's budget (cases/README.md): git-friendly, whatever its command selects.  The count
# cases (--smallest-counts: each kernel's two smallest past 2^16 items, and each item dim's two smallest
# within 2.2 MB, 0.26 to 2.1 MB each, 27.0 MB in all, gen/REACH.md) have a budget of their own, so that
# they cannot crowd out the rest, nor the rest them.
BUDGET_BYTES = 30_000_000
COUNT_BUDGET_BYTES = 27_500_000


def _is_count_case(path: Path) -> bool:
    return path.parent.name == "stress" and path.name.startswith("count_")


def test_committed_suite_stays_within_its_budget():
    files = [p for p in CASES.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files if not _is_count_case(p))
    counts = sum(p.stat().st_size for p in files if _is_count_case(p))
    assert 0 < total <= BUDGET_BYTES, f"cases/ holds {total} bytes besides its count cases, over {BUDGET_BYTES}"
    assert 0 < counts <= COUNT_BUDGET_BYTES, f"cases/ count cases hold {counts} bytes, over {COUNT_BUDGET_BYTES}"
