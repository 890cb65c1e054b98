"""Shared fixtures: generated suites (once per session) and backends built from functions."""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    # A process per CPU already (-n auto): BLAS's and torch's thread pools of a CPU each would only
    # contend with the other test processes.  Set before numpy or torch is imported; inherited by the
    # opcase processes the tests start.
    for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_threads, "1")

import numpy as np
import pytest

from gen.generate import Generator, case_path, plan_suite
from gen.core.registry import spec_for
from gen.core.backend import Backend, Request
from harness.backends import load_backend
from gen.core.rounding import round_to
from gen.core.casefile import find
from harness.judge.runner import run_case

import needs

REPO = Path(__file__).resolve().parents[1]
CONFORMANCE = REPO / "tests" / "conformance"   # real data from outside opcase; its README says where from
MMCV_CUDA = CONFORMANCE / "mmcv-cuda"   # mmcv's CUDA outputs, one npz per kernel (layout in its README)


def mmcv_cuda_case_ids(op: str) -> list[str]:
    """The case ids of MMCV_CUDA/<op>.npz, in order."""
    with np.load(MMCV_CUDA / f"{op}.npz") as data:
        return sorted({key.split("/")[0] for key in data.files}, key=int)


def mmcv_cuda_case(op: str, case_id: str) -> tuple[dict, dict, dict]:
    """(meta, inputs, outputs) of one captured case: its params and name, and mmcv's own outputs."""
    with np.load(MMCV_CUDA / f"{op}.npz") as data:
        meta = json.loads(bytes(data[f"{case_id}/meta"]).decode())
        inputs = {key.split("/", 2)[2]: data[key] for key in data.files if key.startswith(f"{case_id}/in/")}
        outputs = {key.split("/", 2)[2]: data[key] for key in data.files if key.startswith(f"{case_id}/out/")}
    assert meta["op"] == op, (op, case_id, meta["op"])
    return meta, inputs, outputs


def raw_bits(array: np.ndarray) -> np.ndarray:
    """A float array's bit patterns, for comparisons that NaN payloads and -0.0 cannot fool."""
    return array.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[array.dtype.itemsize])
TEST_SUITES = ("random", "boundary", "invalid")


def generate(op: str, out_dir: Path, suites=TEST_SUITES, count: int = 12, seed: int = 0,
             max_bytes: int = 64 << 20, baseline: str | None = None) -> Path:
    """Generate `suites` of `op` into out_dir (skipping cases over max_bytes), with dynamic thresholds
    from `baseline` (default: the spec's); return the op's directory."""
    from gen.generate import total_bytes
    spec = spec_for(op)
    baseline = load_backend(baseline or spec.criteria.baseline) if spec.criteria.mode == "dynamic" else None
    generator = Generator(spec, baseline)
    for suite in suites:
        for plan in plan_suite(spec, suite, count, seed):
            if total_bytes(spec, plan) <= max_bytes:
                generator.write(plan, case_path(out_dir, plan, op))
    return out_dir / op


def pure_io_suite(tmp_path_factory, label: str) -> Path:
    """A fresh directory with small random, boundary and invalid suites of two pure-IO kernels."""
    out = tmp_path_factory.mktemp(label)
    generate("psamask_forward", out, count=3)
    generate("masked_im2col_forward", out, count=3)
    return out


def case_properties(root, testcase) -> dict:
    """A JUnit testcase's properties: its testsuite's named CASE/PROPERTY (harness.reports.junit)."""
    suite = next(s for s in root.iter("testsuite") if testcase in list(s))
    prefix = testcase.get("name") + "/"
    return {p.get("name")[len(prefix):]: p.get("value") for p in suite.iter("property")
            if p.get("name").startswith(prefix)}


def run_cli(*args):
    """`opcase run ARGS...` in process."""
    from click.testing import CliRunner

    from harness.cli import main
    return CliRunner().invoke(main, ["run", *map(str, args)])


# The shared suites leave out random and boundary cases over this size: carafe_backward's
# kernel_35_full_window (6 and 12 MB) alone took half a minute to make against mmcv's bit-exact
# emulation, and as long again for each backend that ran it.  Invalid cases are all kept: they
# have no goldens to compute, and each stands for a check.
SUITE_MAX_BYTES = 4 << 20


def shared_dir(tmp_path_factory, name: str, build) -> Path:
    """A directory made once per test run by ``build(directory)``, shared by every process of the run:
    under pytest-xdist each worker has a base directory of its own, beside the others, so what one
    worker made (under a lock, marked done when whole) the others take instead of making it again.
    Tests treat it as read-only, as they do any shared fixture."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    directory, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if directory.exists():   # a worker that died while making it
                import shutil
                shutil.rmtree(directory)
            directory.mkdir()
            build(directory)
            done.touch()
    return directory


def _default_suites(op: str, out: Path) -> None:
    generate(op, out, suites=("random", "boundary", "fast_path"), max_bytes=SUITE_MAX_BYTES)
    generate(op, out, suites=("invalid",))


@pytest.fixture
def fresh_native_cache(tmp_path_factory, monkeypatch):
    """gen.native's compiled loops built afresh, into a cache of this test session's own, with
    OPCASE_NO_CC unset; skips where there is no C compiler."""
    from gen import native
    if native.compiler() is None:
        needs.skip_without("cc", "to build the compiled loops (gen/native.py)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "native-cache"))
    monkeypatch.delenv("OPCASE_NO_CC", raising=False)
    monkeypatch.setattr(native, "_loaded", {})


@pytest.fixture(scope="session")
def suites(tmp_path_factory):
    """suites(op) -> directory with the op's random, boundary, fast_path and invalid cases (generated once
    per run, whichever worker asks first)."""
    def get(op: str) -> Path:
        return shared_dir(tmp_path_factory, f"suites-{op}", lambda out: _default_suites(op, out)) / op
    return get


def checked_backend(name: str, compute, skip_check: str | None = None) -> Backend:
    """A backend that makes the spec's checks (all but `skip_check`) and then runs `compute`.

    `compute(request) -> {output: float64 array}`; results are rounded to the output dtypes.
    """
    from gen.core.checks import failures, refusal
    from harness.backends.builtin import request_tensors

    def run(request: Request) -> dict:
        spec = spec_for(request.op)
        for check in failures(spec, request_tensors(spec, request), request.params):
            if check.id != skip_check:
                raise refusal(check)(check.id)
        outputs = compute(request)
        return {n: round_to(outputs[n], o.dtype) for n, o in request.outputs.items()}
    return Backend(name=name, origin="test", run=run)


def run_dir(directory: Path, backend: Backend) -> list:
    return [run_case(p, backend, backend.name) for p in find([directory])]


def statuses(results) -> dict:
    from collections import Counter
    return dict(Counter(r.status for r in results))


def failed_metrics(result) -> list:
    """The metrics (diff1, diff4, ...) over their thresholds in a judged case."""
    return sorted({v["metric"] for verdicts in result.thresholds.values() for v in verdicts if not v["passed"]})


def assert_each_missing_check_caught(invalid_dir: Path, op: str) -> None:
    """For every testable check of `op`: a backend making all checks but that one fails exactly
    that check's case in `invalid_dir`, and no other."""
    import gen
    from gen.core.verdict import FAILING

    def compute(request):
        out_shapes = {name: o.shape for name, o in request.outputs.items()}
        # Without its check, a call computes on what the check refuses (a pooled size of 0, say):
        # numpy's warnings there are the point of the case, not a defect of the reference.
        with np.errstate(all="ignore"):
            return gen.golden(request.op, request.inputs, request.params, out_shapes=out_shapes)

    testable = [c.id for c in spec_for(op).checks if c.violate is not None]
    assert testable
    for check_id in testable:
        results = run_dir(invalid_dir, checked_backend(f"no {check_id}", compute, skip_check=check_id))
        # Without the check the call goes through (wrongly-accepted) or crashes (error):
        # either way exactly the cases of that check fail (one per dtype of the invalid suite).
        caught = [r.name.rsplit("-", 1)[0] for r in results if r.status in FAILING]
        made = [r.name for r in results if r.name.rsplit("-", 1)[0] == check_id]
        assert made and caught == [check_id] * len(made), (check_id, statuses(results))


# ----------------------------------------------------------------------------- needs (tests/needs.py)

def pytest_configure(config):
    config.addinivalue_line("markers", "needs(name): the test needs what tests/needs.py calls `name` "
                                       "(torch, ray, chromium, protoc, g++, cuda); it skips without it")
    _private_case_keys(config)


def _private_case_keys(config) -> None:
    """The cases the tests write are keyed in a ledger of the run's own (gen.core.case_keys), not in
    the user's: set in the first process (pytest-xdist's workers inherit it), removed at its end."""
    import shutil
    import tempfile
    from gen.core.case_keys import KEY_DIR_VARIABLE
    if os.environ.get(KEY_DIR_VARIABLE):
        return
    directory = tempfile.mkdtemp(prefix="opcase-test-keys-")
    os.environ[KEY_DIR_VARIABLE] = os.path.join(directory, "keys")
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        for need in mark.args:
            if needs.missing(need):
                pytest.skip(needs.reason(need))


def pytest_terminal_summary(terminalreporter):
    """One line per missing need: how many tests it skipped and how to get it."""
    from collections import Counter
    skipped = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
        need = needs.need_of(text)
        if need:
            skipped[need] += 1
    if skipped:
        terminalreporter.write_sep("-", "what would run more tests")
        for need, count in sorted(skipped.items()):
            terminalreporter.write_line(f"{count} skipped for lack of {need}: {needs.NEEDS[need]}")


# ----------------------------------------------------------------------------- order (pytest-xdist)

# Marks that say a test is long: whole suites generated or run, a cluster or a venv started.
LONG_MARKS = ("slow", "ray", "wheel")


def pytest_collection_modifyitems(items):
    """Modules with long tests first, the rest as collected (each module's own order kept): the README's
    test command spreads whole modules over processes (pytest-xdist's --dist loadfile, in collection
    order), and starting the long ones first keeps one process from finishing far after the other."""
    weight: dict[str, int] = {}
    for item in items:
        weight.setdefault(item.module.__name__ if item.module else "", 0)
        if any(item.get_closest_marker(mark) for mark in LONG_MARKS):
            weight[item.module.__name__ if item.module else ""] += 1
    first_seen = {name: index for index, name in enumerate(weight)}

    def key(item):
        name = item.module.__name__ if item.module else ""
        return (-weight[name], first_seen[name])
    items.sort(key=key)
