"""What a test may need beyond the `test` extra, how to get it, and how a test says it needs it.

A test that lacks a need skips with a reason that starts with ``needs NAME:``; the summary at the end
of a run (conftest.pytest_terminal_summary) counts those skips per need and says what would run them,
so a green run on a bare machine tells what it left out.  Mark a test ``@pytest.mark.needs("torch")``
(conftest checks the mark before the test runs), or call ``skip_without`` / ``import_or_skip`` where the
need is found out while running (a fixture that looks for a compiler).
"""
from __future__ import annotations

import importlib.util
import shutil

import pytest

# need -> how to get it.
NEEDS = {
    "torch": "the torch extra: .venv/bin/python -m pip install -e '.[torch]'",
    "ray": "the ray extra: .venv/bin/python -m pip install -e '.[ray]'",
    "netns": "root, unshare and ip (the Ray cluster tests run nodes in a network namespace of their own)",
    "chromium": "Debian's headless browser: apt-get install chromium",
    "protoc": "apt-get install protobuf-compiler libprotobuf-dev",
    "libprotobuf-dev": "libprotobuf's C++ headers: apt-get install libprotobuf-dev",
    "g++": "a C++ compiler: apt-get install g++",
    "cc": "a C compiler on PATH (cc or gcc): apt-get install gcc",
    "objdump": "binutils' disassembler: apt-get install binutils",
    "cuda": "a CUDA device, and a torch built for it",
}
PREFIX = "needs "


def reason(need: str, detail: str = "") -> str:
    """The skip reason for a missing need: 'needs NAME: how to get it (detail)'."""
    return f"{PREFIX}{need}: {NEEDS[need]}" + (f" ({detail})" if detail else "")


def need_of(reason_text: str) -> str | None:
    """The need a skip reason names, or None for a skip of another kind."""
    text = reason_text.removeprefix("Skipped: ")
    if not text.startswith(PREFIX):
        return None
    need = text[len(PREFIX):].split(":", 1)[0]
    return need if need in NEEDS else None


def skip_without(need: str, detail: str = "") -> None:
    pytest.skip(reason(need, detail), allow_module_level=True)


def import_or_skip(module: str, need: str | None = None):
    """The module, or a skip naming the need (default: the module's name) that would provide it."""
    return pytest.importorskip(module, reason=reason(need or module))


def missing(need: str) -> bool:
    """Whether this machine lacks `need` (what a `needs` mark checks before its test runs)."""
    if need in ("torch", "ray"):
        return importlib.util.find_spec(need) is None
    if need == "cuda":
        if importlib.util.find_spec("torch") is None:
            return True
        import torch   # only asked when a test needs CUDA: importing torch takes seconds
        return not torch.cuda.is_available()
    if need == "chromium":
        return chromium() is None
    if need in ("protoc", "g++"):
        return shutil.which(need) is None
    raise ValueError(f"a needs mark cannot check {need!r} up front; call skip_without where it is found out")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")
