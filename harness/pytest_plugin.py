"""opcase's verdicts as pytest items: ``pytest --opcase PATHS --opcase-backend B``.

Registered as a ``pytest11`` entry point, so installed opcase offers it to every pytest run, and it
does nothing unless ``--opcase`` is given.  Then every ``.opcase`` file under the PATHS pytest is
given is one test item, named by the case's descriptor (its ``CASE:`` line; ``OP/SUITE/NAME`` for a
case that has none), and pytest's own ``-k``, ``-x``, ``--lf``, ``--junitxml`` and xdist apply to
opcase's verdicts.

Cases run through the runner of ``opcase run`` (``harness.workers.run_cases``): a backend other than
opcase's own runs in worker processes, never in pytest's.  Items run in batches of BATCH_CASES (one
worker start per batch, not per case), so ``-x`` stops at most a batch after the first failure.
Statuses map to pytest's outcomes:

  passed                                              pass
  failed, wrongly-accepted, wrongly-rejected, error,  fail, with the mismatch report and REPRO line
  nondeterministic                                    of `opcase run` as the failure text
  skipped (the backend declines), mistrusted          skip, with the reason
  (not judged: the case proves nothing)
  failing, and not passed in --opcase-compare's       xfail: a known failure, not a regression
  baseline either

A session whose opcase items judged nothing (each skipped or mistrusted) exits 5, as ``opcase run``
does: a run that judged nothing is not green.
"""
from __future__ import annotations

import pytest

# Cases handed to the runner at once: a worker process is started per batch.
BATCH_CASES = 64
_EXIT_NOTHING_JUDGED = 5


def pytest_addoption(parser):
    group = parser.getgroup("opcase", "opcase: judge a backend's cases as pytest items")
    group.addoption("--opcase", action="store_true", default=False,
                    help="collect every .opcase file under the given paths as a test item (one per case)")
    group.addoption("--opcase-backend", default=None, metavar="B",
                    help="the backend to judge, as `opcase run --backend` names it (required with --opcase)")
    group.addoption("--opcase-timeout", default=None, type=float, metavar="S",
                    help="cut off a case after S seconds (as `opcase run --timeout`)")
    group.addoption("--opcase-compare", default=None, metavar="BASELINE",
                    help="a baseline of `opcase baseline update`: failing cases it did not record as "
                         "passed are xfail, regressions fail")


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
        self.judged = 0
        self.items = 0

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
        from harness.gate import judge_against   # (see above)
        from harness.runner import RunOptions   # (see above)
        from harness.workers import run_cases, runs_isolated   # (see above)

        options = RunOptions(repro_options=("--timeout", f"{self.timeout:g}") if self.timeout else ())
        try:
            if self.backend is None and not runs_isolated(self.backend_spec):
                self.backend = load_backend(self.backend_spec)
            results, _ = run_cases(list(paths), self.backend, self.backend_spec, options, lambda result: None,
                                   timeout=self.timeout)
        except BackendLoadError as exc:
            raise pytest.UsageError(f"--opcase-backend: {exc}") from None
        for path, result in zip(paths, results):
            if self.baseline is not None:
                judge_against(result, self.baseline.get(result.key))
            self.results[path] = result

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.items and not self.judged and exitstatus == 0:
            session.exitstatus = _EXIT_NOTHING_JUDGED

    def pytest_terminal_summary(self, terminalreporter):
        if self.items and not self.judged:
            terminalreporter.write_line(
                f"opcase: no case judged ({self.items} run, each skipped or mistrusted): exit status "
                f"{_EXIT_NOTHING_JUDGED}, a run that judges nothing is not a pass")


def _load_baseline(path):
    if path is None:
        return None
    from harness.gate import BaselineError, load_baseline   # only with --opcase-compare
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
        from gen.core.verdict import FAILING, MISTRUSTED, PASSED, SKIPPED   # only when --opcase runs
        from harness.gate import GATE_FAILING   # (as above)
        state = self._session()
        state.items += 1
        result = state.result_for(self)
        for name in ("status", "descriptor", "repro"):
            if getattr(result, name):
                self.user_properties.append((f"opcase_{name}", getattr(result, name)))
        if result.status in (SKIPPED, MISTRUSTED):
            pytest.skip(f"{result.status}: {result.message.splitlines()[0] if result.message else ''}".rstrip(": "))
        state.judged += 1
        failing = result.status in FAILING or result.gate in GATE_FAILING
        if failing and state.baseline is not None and result.gate not in GATE_FAILING:
            pytest.xfail(f"{result.status}, and not passed in the baseline either")
        if failing:
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
        from harness.report import case_line, failure_details   # only when a case fails
        return f"{case_line(self.result)}\n{failure_details(self.result)}"
