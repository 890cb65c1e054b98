"""The README is the front door: its kernel table and case counts come from discovery (specs/*.yaml and
the registry), its links stay inside the clone, and `.ci/run` runs exactly its test command.

A kernel added without its row, or a suite that grows, fails here with the table to paste."""
from __future__ import annotations

import re
from pathlib import Path

from gen.core.registry import known_ops, spec_for
from gen.generate import plan_suite, total_bytes

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CI_RUN = REPO / ".ci" / "run"
# The main command: `opcase gen specs/*.yaml --suite all --max-size 64MB` (opcase's MB is 10^6 bytes).
MAIN_SUITES = ("network", "random", "boundary", "invalid", "stress")
MAIN_MAX_BYTES = 64 * 10**6
TABLE_HEAD = ("| kernel | thresholds | main command's cases | committed cases (`cases/`) |\n"
              "| --- | --- | ---: | ---: |\n")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _main_command_cases(op: str) -> tuple[int, int]:
    """(cases, bytes of tensors) that the main command writes of `op`: the plans within --max-size."""
    spec = spec_for(op)
    sizes = [total_bytes(spec, plan) for suite in MAIN_SUITES for plan in plan_suite(spec, suite)]
    kept = [size for size in sizes if size <= MAIN_MAX_BYTES]
    return len(kept), sum(kept)


def _committed_cases(op: str) -> int:
    return sum(1 for _ in (REPO / "cases" / op).rglob("*.opcase"))


def kernel_table() -> str:
    """The README's kernel table as discovery gives it today."""
    rows, total_main, total_committed = [], 0, 0
    for op in known_ops():
        main, _ = _main_command_cases(op)
        committed = _committed_cases(op)
        criteria = spec_for(op).criteria
        thresholds = f"dynamic, baseline `{criteria.baseline}`" if criteria.mode == "dynamic" else criteria.mode
        rows.append(f"| `{op}` | {thresholds} | {main} | {committed} |\n")
        total_main, total_committed = total_main + main, total_committed + committed
    rows.append(f"| {len(rows)} kernels | | {total_main} | {total_committed} |\n")
    return TABLE_HEAD + "".join(rows)


def test_kernel_table_matches_the_specs_and_the_suites():
    expected = kernel_table()
    assert expected in _readme(), f"README's kernel table is stale; it should read:\n{expected}"


def test_main_command_figures_match_the_suites():
    """'The first makes N cases (X GB)': the count and size the main command's plans give."""
    counts = [_main_command_cases(op) for op in known_ops()]
    cases, size = sum(c for c, _ in counts), sum(b for _, b in counts)
    stated = re.search(r"The first makes (\d+) cases \(([\d.]+) GB\)", _readme())
    assert stated, "README no longer states what the main command makes"
    assert (int(stated[1]), stated[2]) == (cases, f"{size / 1e9:.2f}"), (cases, size)


def test_no_kernel_count_in_words():
    """Counts of kernels in prose go stale; the table's total row is the one place that holds it."""
    words = r"(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d+)"
    stale = re.findall(rf"\b{words} kernels\b", _readme(), flags=re.IGNORECASE)
    assert stale == [f"{len(known_ops())}"], stale


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
