"""The README is the front door: its links stay inside the clone, its contents list every section, and
`.ci/run` runs exactly its test command.  It names no kernel list or count (tests/test_no_kernel_lists.py):
`opcase kernels` is the list, with the counts discovery gives (tests/test_kernel_table.py)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CI_RUN = REPO / ".ci" / "run"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def test_links_stay_inside_the_clone_and_resolve():
    text = _readme()
    anchors = _anchors(text)
    broken = []
    for link in _links(text):
        if re.match(r"https?://", link):
            continue
        path, _, anchor = link.partition("#")
        if path:
            target = (REPO / path).resolve()
            if REPO not in target.parents and target != REPO or not target.exists():
                broken.append(link)
        elif anchor not in anchors:
            broken.append(link)
    assert not broken, f"README links that lead outside the clone or nowhere: {broken}"


def test_contents_lists_every_section():
    """The table of contents names every `## ` section after it, in order: one added without its
    entry would be found only by scrolling (its links resolve: test_links_stay_inside_the_clone_and_resolve)."""
    text = _readme()
    contents, rest = text.split("## Contents", 1)[1].split("\n## ", 1)
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [a for a in (re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                            for h in re.findall(r"^## (.+)$", "## " + rest, flags=re.MULTILINE))]
    # Every section, in order (a few subsections may be listed between them).
    assert [a for a in listed if a in sections] == sections, (listed, sections)


def _readme_commands() -> tuple[str, str]:
    """The two commands: the indented lines of 'The two commands' that make the venv."""
    section = _readme().split("## The two commands", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in section.splitlines()
                if line.startswith("    ") and "-m venv" in line]
    assert len(commands) == 2, commands
    return commands[0], commands[1]


def test_two_commands_make_and_use_a_venv():
    """PEP 668: a stock Debian's python3 refuses `pip install` outside a venv; both commands make one
    and run pip, opcase and pytest from it, and the run names its backend."""
    install_and_run, install_and_test = _readme_commands()
    for command in (install_and_run, install_and_test):
        assert command.startswith("python3 -m venv .venv && .venv/bin/python -m pip install -e ")
        assert not re.search(r"(^|&& )(python3 -m pip|pip|opcase|pytest) ", command), command
    assert "--backend " in install_and_run
    assert install_and_test.endswith(".venv/bin/python -m pytest -q")


def test_ci_runs_exactly_the_readme_test_command():
    _, install_and_test = _readme_commands()
    lines = [line.strip() for line in CI_RUN.read_text().splitlines()]
    assert lines[-1] == install_and_test, "the last line of .ci/run must be the README's test command"
    # Its extras go into the venv the command uses, before it.
    assert any(".venv/bin/python -m pip install" in line and "torch==" in line for line in lines[:-1])


def test_adding_a_kernel_writes_cases_as_cases_readme_does():
    """The checklist's command for a new kernel's cases/OP/ is cases/README.md's command for one spec
    (it once left out the stress suite, so a new kernel's committed cases differed from a regenerated
    cases/ and tests/test_committed_cases.py failed)."""
    committed = re.search(r"^    (opcase gen specs/\*\.yaml .* -o cases)$", (REPO / "cases" / "README.md").read_text(),
                          re.MULTILINE)
    assert committed
    section = _readme().split("\n## Adding a kernel\n", 1)[1].split("\n## ", 1)[0]
    assert committed.group(1).replace("specs/*.yaml", "specs/OP.yaml") in section
