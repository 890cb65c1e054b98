"""The docs' examples as written: README.md and every .md file it links (inside the clone).

Generic, not tied to the README's wording (it is rewritten meanwhile): every shell line that
starts with `opcase` (indented or fenced, `$ ` prompts taken off) must name a command opcase has,
with options that command takes; every Python block that defines `run(request)` must load as a
backend from a module file of its own, as `--backend MODULE` loads `MODULE.py` from the current
directory.  Running each command whole needs the cases and backends the prose only describes; the
commands a test can run on the committed cases are run (tests/test_newcomer_journey.py runs the
journey they describe).
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import click
import pytest

from conftest import REPO
from harness.cli import COMMANDS, load_command

README = REPO / "README.md"


def _docs() -> list[Path]:
    """README.md and the .md files it links to inside the clone."""
    found = [README]
    for link in re.findall(r"\]\(([^)\s#]+\.md)(?:#[^)]*)?\)", README.read_text(encoding="utf-8")):
        target = (REPO / link).resolve()
        if REPO in target.parents and target.is_file() and target not in found:
            found.append(target)
    return found


def _shell_lines(text: str) -> list[str]:
    """The opcase command lines of indented blocks and ```/```sh/```bash/```shell blocks."""
    lines, fence = [], None
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():   # continued lines joined
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence is not None and fence not in ("", "sh", "bash", "shell", "console"):
            continue
        code = line.strip() if fence is not None or line.startswith("    ") else ""
        code = code[2:] if code.startswith("$ ") else code
        for part in re.split(r"\s(?:&&|\|\||\||;)\s", code.split("  #")[0]):
            if part.strip().startswith("opcase "):
                lines.append(part.strip())
    return lines


def _python_backends(text: str) -> list[str]:
    return [block for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
            if re.search(r"^def run\(request", block, flags=re.MULTILINE)]


def _options(command: click.Command, words: list[str]) -> tuple[click.Command, set[str]]:
    """The (sub)command the words name, and the option names it takes."""
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command = command.commands[words.pop(0)]
    names = {"--help"}
    for param in command.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return command, names


DOCS = _docs()
COMMAND_LINES = [(doc.relative_to(REPO), line) for doc in DOCS for line in _shell_lines(doc.read_text("utf-8"))]


@pytest.mark.skipif(not COMMAND_LINES, reason="no opcase command line in the docs")
@pytest.mark.parametrize("doc, line", COMMAND_LINES, ids=[f"{d}:{i}" for i, (d, _) in enumerate(COMMAND_LINES)])
def test_each_documented_command_names_a_command_and_its_options(doc, line):
    try:
        words = shlex.split(line)[1:]
    except ValueError:
        pytest.skip(f"{doc}: not one shell command: {line}")
    if not words or words[0].startswith("-"):
        return   # `opcase --help` and the like
    assert words[0] in COMMANDS, f"{doc}: {line}: no command {words[0]!r}"
    command, names = _options(load_command(words[0]), words[1:])
    unknown = [w.split("=")[0] for w in words[1:] if w.startswith("--") and w.split("=")[0] not in names]
    assert not unknown, f"{doc}: {line}: {command.name} takes no {unknown}"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_each_example_backend_loads_as_a_module_beside_you(doc, tmp_path, monkeypatch):
    from harness.backends import load_backend
    blocks = _python_backends(doc.read_text("utf-8"))
    if not blocks:
        pytest.skip(f"{doc.relative_to(REPO)} shows no backend")
    monkeypatch.chdir(tmp_path)
    for number, block in enumerate(blocks):
        name = f"doc_backend_{os.getpid()}_{number}"
        # `...` stands for the kernel's body: the module must import and its run be found.
        (tmp_path / f"{name}.py").write_text(block)
        backend = load_backend(name)   # a bare module name: MODULE:run
        assert callable(backend.run)
