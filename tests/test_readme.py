"""The README is the front door, and the docs it leads to are the reference: their links stay inside
the clone and resolve (files and headings), each one's contents lists every section, and `.ci/run` runs
exactly the README's test command.  The README names no kernel list or count
(tests/test_no_kernel_lists.py): `opcase kernels` is the list, with the counts discovery gives
(tests/test_kernel_table.py).  Dated measurements live in tests/bench/RESULTS.md, not in the README."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CI_RUN = REPO / ".ci" / "run"
RESULTS = REPO / "tests" / "bench" / "RESULTS.md"
# The per-topic reference: found from the README's links too, named here so that one dropped from the
# index is still checked.
PER_TOPIC = ["harness/README.md", "gen/README.md", "gen/kernels/README.md", "specs/README.md",
             "tests/README.md", "cases/README.md", "tests/bench/RESULTS.md"]
MOST_README_LINES = 400
# A doc this long needs a contents list: past it, a section is found only by scrolling.
LINES_NEEDING_CONTENTS = 150
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", _outside_code(text))


def _outside_code(text: str) -> str:
    """The text without its fenced code blocks (a `#` line there is a comment, not a heading)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", _outside_code(text), flags=re.MULTILINE)}


def _docs() -> list[Path]:
    """README.md, every .md it links inside the clone, every .md those link, the per-topic docs and each
    kernel family's README."""
    families = sorted((REPO / "gen" / "kernels").glob("*/README.md"))    # each family's own notes
    found, queue = [], [README, *(REPO / doc for doc in PER_TOPIC), *families]
    while queue:
        doc = queue.pop(0).resolve()
        if doc in found or not doc.is_file():
            continue
        found.append(doc)
        for link in _links(doc.read_text(encoding="utf-8")):
            path = link.partition("#")[0]
            if path.endswith(".md") and not re.match(r"https?://", link):
                queue.append(doc.parent / path)
    return found


def _doc_id(doc: Path) -> str:
    return str(doc.relative_to(REPO))


DOCS = _docs()


def test_every_per_topic_doc_is_in_the_index():
    """The README's index reaches every per-topic doc (a doc nobody links is found by nobody)."""
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in _links(_readme())}
    assert [doc for doc in PER_TOPIC if (REPO / doc).resolve() not in linked] == []


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_links_stay_inside_the_clone_and_resolve(doc):
    """Every relative link leads to a file inside the clone (relative to the doc's own folder, as
    GitHub reads it), and every anchor to a heading of its target."""
    text = doc.read_text(encoding="utf-8")
    broken = []
    for link in _links(text):
        if re.match(r"https?://", link):
            continue
        path, _, anchor = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        if REPO not in target.parents and target != REPO or not target.exists():
            broken.append(link)
        elif anchor and (target.suffix != ".md" or anchor not in _anchors(target.read_text(encoding="utf-8"))):
            broken.append(link)
    assert not broken, f"{_doc_id(doc)}: links that lead outside the clone or nowhere: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_contents_lists_every_section(doc):
    """A doc's table of contents names every `## ` section after it, in order: one added without its
    entry would be found only by scrolling.  A long doc has one."""
    text = doc.read_text(encoding="utf-8")
    if "\n## Contents\n" not in text:
        assert len(text.splitlines()) <= LINES_NEEDING_CONTENTS, f"{_doc_id(doc)} is long and has no ## Contents"
        return
    contents, rest = text.split("\n## Contents\n", 1)[1].split("\n## ", 1)
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [_anchor(h) for h in re.findall(r"^## (.+)$", _outside_code("## " + rest), flags=re.MULTILINE)]
    # Every section, in order (a few subsections may be listed between them).
    assert [a for a in listed if a in sections] == sections, (_doc_id(doc), listed, sections)


def test_readme_is_a_front_door():
    """At most MOST_README_LINES lines, and no run log: the README's figures are current, dated in at
    most one paragraph (the two commands'), and every dated run is in the results log."""
    text = _readme()
    assert len(text.splitlines()) <= MOST_README_LINES
    dated = [p for p in re.split(r"\n\s*\n", _outside_code(text)) if DATE.search(p)]
    assert len(dated) <= 1, dated
    assert RESULTS.is_file() and len(DATE.findall(RESULTS.read_text(encoding="utf-8"))) > len(dated)


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
    assert install_and_test.endswith(".venv/bin/python -m pytest -q -n auto")


def test_ci_runs_exactly_the_readme_test_command():
    _, install_and_test = _readme_commands()
    lines = [line.strip() for line in CI_RUN.read_text().splitlines()]
    assert lines[-1] == install_and_test, "the last line of .ci/run must be the README's test command"
    # Its extras go into the venv the command uses, before it.
    assert any(".venv/bin/python -m pip install" in line and "torch==" in line for line in lines[:-1])


def test_adding_a_kernel_writes_cases_as_cases_readme_does():
    """The checklist's command (specs/README.md: Adding a kernel) for a new kernel's cases/OP/ is cases/README.md's command for one spec
    (it once left out the stress suite, so a new kernel's committed cases differed from a regenerated
    cases/ and tests/test_committed_cases.py failed)."""
    committed = re.search(r"^    (opcase gen specs/\*\.yaml .* -o cases)$", (REPO / "cases" / "README.md").read_text(),
                          re.MULTILINE)
    assert committed
    section = (REPO / "specs" / "README.md").read_text().split("\n## Adding a kernel\n", 1)[1].split("\n## ", 1)[0]
    assert committed.group(1).replace("specs/*.yaml", "specs/OP.yaml") in section


def test_the_backend_example_passes_its_kernels_suite(tmp_path):
    """The README's backend, saved as the file it names, passes every case of the kernel it declares
    as the committed selection makes them (cases/README.md's sizes), invalid cases included: an
    example that drifted from its spec (a check missed, a tensor renamed) fails here, not in a user's
    first run.  The cases are generated, not read from cases/: tests/test_new_kernel.py runs this file
    in a copy of the repository that has none."""
    import json
    import subprocess
    import sys

    example = re.search(r"```python\n(# (\w+)\.py: .*?)```", _readme(), re.DOTALL)
    assert example, "the README's backend example (a ```python block starting '# NAME.py:') is gone"
    code, module = example.group(1), example.group(2)
    op = re.search(r"""supports = lambda op, dtype: op == ["'](\w+)["']""", code).group(1)
    (tmp_path / f"{module}.py").write_text(code)
    cases, results = tmp_path / "cases", tmp_path / "results.json"

    def opcase(*args):
        return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    made = opcase("gen", str(REPO / "specs" / f"{op}.yaml"), "--suite", "all", "--count", "3",
                  "--max-size", "512KB", "-o", str(cases))
    assert made.returncode == 0, made.stderr[-2000:]
    judged = opcase("run", str(cases), "--backend", f"{module}:run", "--json", str(results), "-q")
    assert judged.returncode == 0, judged.stdout[-2000:] + judged.stderr[-2000:]
    summary = json.loads(results.read_text())["summary"]
    assert summary["ok"] and summary["judged"] == len(list(cases.rglob("*.opcase")))
