"""Worker processes kept from one run of cases to the next, for a caller that runs its cases in batches
(the pytest plugin, harness.pytest_plugin; shrink's candidates, its warm pass's only): each batch's run (harness.judge.workers.run_cases) takes the
workers the batch before left idle instead of starting and loading the backend anew.

What a kept worker judges stays what a run of all the batches at once would judge: a cold-pass worker's
call then follows other cases' calls, as a case after the first does in one `opcase run`, and a warm-pass
worker's judged call still follows its decoy.  Only a worker that is alive, ready and holds no case is
kept; one that died, timed out or broke its channel was retired by its run, and a fresh one takes its
place.  ``close`` (or the interpreter's exit, whichever comes first) stops the kept workers and removes
their directory: none outlives the caller.
"""
from __future__ import annotations

import multiprocessing.util
import shutil

from harness.judge.cold_pass import COLD_PASS, WARM_PASS
from harness.judge.worker_process import WorkerProcess, make_run_dir


class KeptWorkers:
    """``passes``: the passes whose workers are kept (harness.judge.cold_pass); a caller whose every run
    must judge its cases as a run of them alone keeps only the warm pass's, whose judged calls follow a
    decoy anyway, and starts each run's cold-pass workers fresh (their first call is the case's)."""

    def __init__(self, passes=(COLD_PASS, WARM_PASS)):
        self.passes = tuple(passes)
        self.key: tuple | None = None   # (backend spec, exec timeout) the kept workers were started with
        self.idle: list[WorkerProcess] = []
        self.spawned = 0                # workers started so far: each new one's log is numbered on
        self.origin = ""
        self.log_dir: str | None = None
        self._finalizer = multiprocessing.util.Finalize(self, _close_kept, (self,), exitpriority=10)

    def run_dir(self) -> str:
        """The workers' directory, made on first use and kept with them."""
        if self.log_dir is None:
            self.log_dir = make_run_dir()
        return self.log_dir

    def take(self, backend_spec: str, exec_timeout: float | None) -> list[WorkerProcess]:
        """The idle workers of that backend, started with that exec timeout (those of another are stopped)."""
        if self.key != (backend_spec, exec_timeout):
            _stop(self.idle)
            self.idle, self.key, self.origin = [], (backend_spec, exec_timeout), ""
        taken, self.idle = self.idle, []
        return taken

    def give_back(self, workers: list[WorkerProcess], origin: str) -> list[WorkerProcess]:
        """Keep the workers that can take another case; return the others, for the caller to stop."""
        others = []
        for worker in workers:
            usable = (worker.of_pass in self.passes and worker.ready and worker.case is None and not worker.queued and worker.stop_deadline is None
                      and worker.process.exitcode is None and not worker.reader.closed)
            (self.idle if usable else others).append(worker)
        if self.idle:
            self.origin = origin
        return others

    def close(self) -> None:
        self._finalizer()


def _stop(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.stop()


def _close_kept(kept: KeptWorkers) -> None:
    _stop(kept.idle)
    kept.idle = []
    if kept.log_dir is not None:
        shutil.rmtree(kept.log_dir, ignore_errors=True)
        kept.log_dir = None
