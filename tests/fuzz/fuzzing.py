"""What the fuzz tests of the three input formats share: driving the real CLI in process on one
mutated input, in a fresh sandbox, and judging how it ended.

An input may end in exit status 0, 1 or 2 (and `run` and `gen` in 5: nothing judged or written) and nothing else,
exit 2 with an "Error:" line.  It fails the test when it
  - raises anything but SystemExit(0|1|2), or prints a traceback or an "internal error"
    (a traceback);
  - takes longer than SECONDS_PER_INPUT (a hang);
  - creates, changes or deletes anything outside the command's -o directory: in the sandbox
    around it (three levels up from the working directory, so `../../x` lands inside it) or
    in ESCAPE_DIR, where the absolute paths the mutators plant point (an escape).

Example counts: a small fixed number per format in CI (derandomized, so CI is reproducible);
OPCASE_FUZZ_EXAMPLES=N runs N per format (the long run the README reports), from a random seed
(pytest's --hypothesis-seed=S fixes it, to repeat a run).
OPCASE_FUZZ_FIGURES=FILE appends each format's figures to FILE as a JSON line.
The generators also plant the hostile inputs of issue 10 items 5-8 (expression and size
bombs, path traversal in names, a spec's reference naming any function);
OPCASE_FUZZ_NEIGHBOURS=0 leaves them out.
"""
from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import stat
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, example, settings

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

EXAMPLES = int(os.environ.get("OPCASE_FUZZ_EXAMPLES", "0") or 0)
SECONDS_PER_INPUT = float(os.environ.get("OPCASE_FUZZ_SECONDS", "30"))
FIGURES = os.environ.get("OPCASE_FUZZ_FIGURES")
NEIGHBOURS = os.environ.get("OPCASE_FUZZ_NEIGHBOURS", "1") not in ("", "0")

# Absolute paths the mutators plant point here; nothing may appear in it.
ESCAPE_DIR = Path(tempfile.gettempdir()) / "opcase-fuzz-escape"
# Address space and file size a single input may take: a size bomb that slips past a check
# becomes a MemoryError or EFBIG (a finding) instead of taking the shared machine down.
ADDRESS_SPACE_HEADROOM = 4 << 30
FILE_SIZE_LIMIT = 256 << 20

TRACEBACK_MARKS = ("Traceback (most recent call last)", "internal error")


def fuzz_settings(ci_examples: int) -> settings:
    # A long run stops at its first failing input instead of shrinking it (a spec input costs
    # ~0.1 s; shrinking one takes many minutes).
    phases = [Phase.explicit, Phase.generate] if EXAMPLES else list(Phase)
    return settings(max_examples=EXAMPLES or ci_examples, deadline=None, derandomize=not EXAMPLES, database=None,
                    suppress_health_check=list(HealthCheck), phases=phases)


def examples(inputs: list):
    """@example(...) for each of ``inputs``: inputs that once failed, run before any generated one."""
    def decorate(test):
        for one in reversed(inputs):
            test = example(one)(test)
        return test
    return decorate


class Hang(BaseException):
    """Raised by the per-input alarm; a BaseException so that no `except Exception` swallows it."""


@dataclass
class Figures:
    """What one format's run saw: the figures the README reports."""
    fmt: str
    inputs: int = 0
    commands: int = 0
    exits: Counter = field(default_factory=Counter)
    tracebacks: int = 0
    hangs: int = 0
    escapes: int = 0
    backend_raised: int = 0      # `run`: the reference backend raised on a mutant (an `error` case, exit 1)
    seconds: float = 0.0
    slowest: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def record(self) -> None:
        line = {"format": self.fmt, "inputs": self.inputs, "commands": self.commands,
                "exit_status": dict(sorted(self.exits.items())), "tracebacks": self.tracebacks,
                "hangs": self.hangs, "escapes": self.escapes, "backend_raised": self.backend_raised, "wall_s": round(time.monotonic() - self.started, 1),
                "command_s": round(self.seconds, 1), "slowest_command_s": round(self.slowest, 2)}
        print(json.dumps(line))
        if FIGURES:
            with open(FIGURES, "a") as f:
                f.write(json.dumps(line) + "\n")


def _vm_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def limits():
    """Address space and file size limits for the fuzzed commands (restored afterwards)."""
    saved = {r: resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE)}
    xfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # over the limit: EFBIG, not death
    try:
        for r, wanted in ((resource.RLIMIT_AS, _vm_size() + ADDRESS_SPACE_HEADROOM),
                          (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT)):
            hard = saved[r][1]
            resource.setrlimit(r, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
        yield
    finally:
        for r, value in saved.items():
            resource.setrlimit(r, value)
        signal.signal(signal.SIGXFSZ, xfsz)


class Sandbox:
    """root/a/b/work is the working directory of each command, work/out its -o directory."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="opcase-fuzz-"))
        self.work = self.root / "a" / "b" / "work"
        self.out = self.work / "out"

    def reset(self) -> Path:
        """An empty working directory (and nothing else in root or ESCAPE_DIR); returns it."""
        for leftover in self.root.iterdir():
            _remove(leftover)
        if ESCAPE_DIR.exists():
            _remove(ESCAPE_DIR)
        self.work.mkdir(parents=True)
        (self.root / "a" / "sentinel").write_text("outside the working directory\n")
        return self.work

    def snapshot(self) -> dict:
        """Every path outside work/out: its kind, size and mtime."""
        seen = {}
        for top in (self.root, ESCAPE_DIR):
            if not top.exists():
                continue
            for dirpath, dirnames, filenames in os.walk(top):
                here = Path(dirpath)
                if here == self.work:
                    dirnames[:] = [d for d in dirnames if here / d != self.out]
                for name in dirnames + filenames:
                    path = here / name
                    st = path.lstat()
                    # a directory's own mtime changes with its entries, which are compared anyway
                    seen[str(path)] = (st.st_mode,) if stat.S_ISDIR(st.st_mode) else \
                        (st.st_mode, st.st_size, st.st_mtime_ns)
        return seen

    def close(self) -> None:
        _remove(self.root)
        if ESCAPE_DIR.exists():
            _remove(ESCAPE_DIR)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, _ in os.walk(path):
            for d in dirnames:                      # a mutated input may leave a read-only directory
                os.chmod(os.path.join(dirpath, d), 0o755)
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def fuzzing(fmt: str):
    """(sandbox, figures) for one format's test; records the figures when it passes."""
    figures = Figures(fmt)
    sandbox = Sandbox()
    try:
        with limits():
            yield sandbox, figures
        figures.record()
    finally:
        sandbox.close()


_alarmed = False


def _on_alarm(signum, frame):
    global _alarmed
    _alarmed = True   # what the command does with Hang (a `finally` raising anew) does not hide it
    raise Hang()


def opcase(sandbox: Sandbox, figures: Figures, *args: str) -> int:
    """Run `opcase ARGS` in process in the sandbox's working directory; assert it ended well.
    Returns its exit status."""
    global _alarmed
    from harness.cli import main

    before = sandbox.snapshot()
    previous_cwd = os.getcwd()
    previous_alarm = signal.signal(signal.SIGALRM, _on_alarm)
    os.chdir(sandbox.work)
    start = time.monotonic()
    figures.commands += 1
    _alarmed = False
    try:
        signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_INPUT)
        result = CliRunner().invoke(main, list(args))
        if _alarmed:
            raise Hang()
    except Hang:
        figures.hangs += 1
        raise AssertionError(f"hang: `opcase {' '.join(args)}` ran over {SECONDS_PER_INPUT:g} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_alarm)
        os.chdir(previous_cwd)
        elapsed = time.monotonic() - start
        figures.seconds += elapsed
        figures.slowest = max(figures.slowest, elapsed)
    figures.exits[result.exit_code] += 1
    figures.backend_raised += "backend raised" in result.output
    shown = f"`opcase {' '.join(args)}` exit {result.exit_code}:\n{result.output[-3000:]}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback
        figures.tracebacks += 1
        raise AssertionError(f"traceback: {shown}\n" + "".join(traceback.format_exception(*result.exc_info)))
    if any(mark in result.output for mark in TRACEBACK_MARKS):
        figures.tracebacks += 1
        raise AssertionError(f"traceback printed: {shown}")
    # 5: `opcase run` judged nothing (every case skipped or mistrusted), `opcase gen` wrote no case
    allowed = (0, 1, 2, 5) if args[0] in ("run", "gen") else (0, 1, 2)
    assert result.exit_code in allowed, f"exit status outside {allowed}: {shown}"
    if result.exit_code == 2:
        assert "Error:" in result.output, f"exit 2 without an error line: {shown}"
    after = sandbox.snapshot()
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        figures.escapes += 1
        raise AssertionError(f"escape: wrote outside -o: {changed[:5]}\n{shown}")
    return result.exit_code
