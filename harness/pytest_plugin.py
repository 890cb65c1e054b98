"""opcase's verdicts as pytest items: ``pytest --opcase PATHS --opcase-backend B``.

Registered as a ``pytest11`` entry point, so installed opcase offers it to every pytest run, and it
does nothing unless ``--opcase`` is given.  Then every ``.opcase`` file under the PATHS pytest is
given is one test item, named by the case's descriptor (its ``CASE:`` line; ``OP/SUITE/NAME`` for a
case that has none), and pytest's own ``-k``, ``-x``, ``--lf``, ``--junitxml`` and xdist apply to
opcase's verdicts.

Cases run through the runner of ``opcase run`` (``harness.judge.workers.run_cases``): a backend other than
opcase's own runs in worker processes, never in pytest's.  Items run in batches of BATCH_CASES, so ``-x``
stops at most a batch after the first failure; the workers are kept from batch to batch (and, under
xdist, from item to item: harness.judge.kept_workers) and stopped when the session ends.
Statuses map to pytest's outcomes:

  passed                                              pass
  failed, wrongly-accepted, wrongly-rejected, error,  fail, with the mismatch report and REPRO line
  nondeterministic                                    of `opcase run` as the failure text
  skipped (the backend declines), mistrusted          skip, with the reason
  (not judged: the case proves nothing)

With ``--opcase-compare BASELINE`` the gate is ``opcase run --compare``'s, exactly (harness.judge.gate):
an item fails where that run fails the case (its status, a regression or a slowdown), and a
session whose cases share none with the baseline fails (exit 1), as the gate does.  A session
whose opcase items judged nothing (each skipped or mistrusted) exits 5, as ``opcase run`` does: a
run that judged nothing is not green.
"""
from __future__ import annotations

import argparse
import math

import pytest

# Cases handed to the runner at once.
BATCH_CASES = 64
_EXIT_FAILED = 1
_EXIT_USAGE = 4   # pytest's own status for a usage error
_EXIT_NOTHING_JUDGED = 5


def pytest_addoption(parser):
    group = parser.getgroup("opcase", "opcase: judge a backend's cases as pytest items")
    group.addoption("--opcase", action="store_true", default=False,
                    help="collect every .opcase file under the given paths as a test item (one per case)")
    group.addoption("--opcase-backend", default=None, metavar="B",
                    help="the backend to judge, as `opcase run --backend` names it (required with --opcase)")
    group.addoption("--opcase-timeout", default=None, type=_timeout_seconds, metavar="S",
                    help="cut off a case after S seconds (as `opcase run --timeout`: finite, over 0, "
                         "at most 10 days)")
    group.addoption("--opcase-compare", default=None, metavar="BASELINE",
                    help="a baseline of `opcase baseline update`: gate as `opcase run --compare` does "
                         "(regressions and slowdowns fail; a baseline sharing no case fails the session)")


def _timeout_seconds(text: str) -> float:
    """--opcase-timeout's value, refused as `opcase run --timeout` refuses it: a timeout that is 0,
    negative, NaN, infinite or over the longest one would mean no timeout, or overflow."""
    from gen.core.timing import MAX_TIMEOUT_S   # only when the option is given
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a finite number of seconds over 0")
    if seconds > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"{seconds:g} s is over the longest timeout, {MAX_TIMEOUT_S:g} s (10 days)")
    return seconds


def pytest_configure(config):
    if not config.getoption("opcase"):
        return
    if not config.getoption("opcase_backend"):
        raise pytest.UsageError("--opcase needs --opcase-backend B (the backend to judge)")
    config.pluginmanager.register(_OpcaseSession(config), "opcase-session")


class _OpcaseSession:
    """What the plugin does once --opcase is given: collect case files, run them, map the verdicts."""

    def __init__(self, config):
        self.config = config
        self.backend_spec = config.getoption("opcase_backend")
        self.timeout = config.getoption("opcase_timeout")
        self.baseline = _load_baseline(config.getoption("opcase_compare"))
        self.results = {}          # case path -> CaseResult
        self.backend = None
        self.kept = None          # the workers a batch leaves for the next (harness.judge.kept_workers)
        self.judged = 0
        self.items = 0
        self.unloadable = False   # the backend could not be loaded: the session stopped with one line

    def pytest_collect_file(self, file_path, parent):
        if file_path.suffix == ".opcase":
            return OpcaseFile.from_parent(parent, path=file_path)
        return None

    def result_for(self, item) -> object:
        """The item's result, running its batch (the next BATCH_CASES opcase items not yet run) first.
        Under xdist a worker runs only the items it is sent, so there a batch is the one case."""
        if item.path not in self.results:
            if hasattr(self.config, "workerinput"):
                self._run([item.path])
            else:
                pending = [i.path for i in item.session.items
                           if isinstance(i, OpcaseItem) and i.path not in self.results]
                start = pending.index(item.path)
                self._run(pending[start:start + BATCH_CASES])
        return self.results[item.path]

    def _run(self, paths) -> None:
        # Imported when a case first runs: an installed plugin costs a pytest run that does not
        # ask for it (this project's own tests among them) no import of the harness.
        from gen.core.backend import BackendLoadError   # (see above)
        from harness.backends import load_backend   # (see above)
        from harness.judge.gate import judge_against   # (see above)
        from harness.judge.runner import RunOptions   # (see above)
        from harness.judge.kept_workers import KeptWorkers   # (see above)
        from harness.judge.workers import run_cases, runs_isolated   # (see above)

        options = RunOptions(repro_options=("--timeout", f"{self.timeout:g}") if self.timeout else ())
        try:
            if self.backend is None and not runs_isolated(self.backend_spec):
                self.backend = load_backend(self.backend_spec)
            if self.kept is None and (self.timeout or runs_isolated(self.backend_spec)):
                self.kept = KeptWorkers()
            results, _ = run_cases(list(paths), self.backend, self.backend_spec, options, lambda result: None,
                                   timeout=self.timeout, kept=self.kept)
        except BackendLoadError as exc:
            # Once for the session, not a traceback per item: no item can run without its backend.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.unloadable = True
            pytest.exit(f"--opcase-backend: {first}", returncode=_EXIT_USAGE)
        for path, result in zip(paths, results):
            if self.baseline is not None:
                judge_against(result, self.baseline.get(result.key))
            self.results[path] = result

    def _gate_refused(self) -> bool:
        """Whether `opcase run --compare`'s gate, over the cases this session ran, fails as a whole
        where no item does: a baseline that shares no case with them compared nothing."""
        if self.baseline is None or not self.results:
            return False
        from harness.judge.gate import gate_summary   # only with --opcase-compare
        gate = gate_summary(list(self.results.values()), "", self.baseline)
        return not gate["ok"] and gate["compared"] == 0

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.kept is not None:
            self.kept.close()
        if self._gate_refused() and exitstatus in (0, _EXIT_NOTHING_JUDGED):
            session.exitstatus = _EXIT_FAILED
        elif self.items and not self.judged and exitstatus == 0:
            session.exitstatus = _EXIT_NOTHING_JUDGED

    def pytest_terminal_summary(self, terminalreporter):
        if self._gate_refused():
            terminalreporter.write_line(
                f"opcase: --opcase-compare: the baseline shares no case with the {len(self.results)} run: "
                f"it compared nothing, and the gate fails (exit status {_EXIT_FAILED}), as `opcase run --compare`")
        elif self.items and not self.judged and not self.unloadable:
            terminalreporter.write_line(
                f"opcase: no case judged ({self.items} run, each skipped or mistrusted): exit status "
                f"{_EXIT_NOTHING_JUDGED}, a run that judges nothing is not a pass")


def _load_baseline(path):
    if path is None:
        return None
    from harness.judge.gate import BaselineError, load_baseline   # only with --opcase-compare
    try:
        return load_baseline(path)
    except BaselineError as exc:
        raise pytest.UsageError(f"--opcase-compare: {exc}") from None


class OpcaseFile(pytest.File):
    """A case file: one item, named by the case's descriptor."""

    def collect(self):
        from gen.core.casefile import CaseFileError, read_envelope   # only when --opcase collects
        from gen.core.descriptor import describe   # (as above)
        try:
            header = read_envelope(self.path)
        except CaseFileError:
            # A damaged file is still an item: `opcase run` makes it an error, and so does the run below.
            yield OpcaseItem.from_parent(self, name=self.path.name, key=self.path.name)
            return
        key = f"{header.op}/{header.suite}/{header.name}"
        name = describe(header.op, header.suite, header.name, header.seed, header.note) or key
        yield OpcaseItem.from_parent(self, name=name, key=key)


class OpcaseItem(pytest.Item):
    """One case, judged by `opcase run`'s runner."""

    def __init__(self, *, key: str, **kwargs):
        super().__init__(**kwargs)
        self.key = key
        self.user_properties.append(("opcase_case", key))

    def _session(self) -> _OpcaseSession:
        return self.config.pluginmanager.get_plugin("opcase-session")

    def runtest(self):
        from gen.core.verdict import MISTRUSTED, PASSED, SKIPPED   # only when --opcase runs
        from harness.reports.report import fails   # (as above): the very test `opcase run` applies
        state = self._session()
        state.items += 1
        result = state.result_for(self)
        for name in ("status", "descriptor", "repro"):
            if getattr(result, name):
                self.user_properties.append((f"opcase_{name}", getattr(result, name)))
        if result.status in (SKIPPED, MISTRUSTED):
            pytest.skip(f"{result.status}: {result.message.splitlines()[0] if result.message else ''}".rstrip(": "))
        state.judged += 1
        if fails(result):
            raise OpcaseFailure(result)
        assert result.status == PASSED, result.status

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, OpcaseFailure):
            return excinfo.value.report()
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


class OpcaseFailure(Exception):
    """A failing verdict; its text is what `opcase run` prints for the case."""

    def __init__(self, result):
        super().__init__(result.status)
        self.result = result

    def report(self) -> str:
        from harness.reports.report import case_line, failure_details   # only when a case fails
        return f"{case_line(self.result)}\n{failure_details(self.result)}"
