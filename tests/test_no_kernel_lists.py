"""The README knows no kernel by list or count (a new kernel is its own files; README: Adding a kernel):
no prose paragraph enumerates kernels and no phrase counts them.  Examples that name a few kernels, and
tables of measured figures, are fine; `opcase backends reference` and `ls specs/` are the list."""
from __future__ import annotations

import re

from conftest import REPO
from gen.core.registry import known_ops

README = REPO / "README.md"
# A prose paragraph naming this many distinct kernels is a list that a new kernel would make stale.
MOST_KERNELS_IN_A_PARAGRAPH = 3
NUMBER_WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen twenty").split()
# "nine kernels", "all 11 kernels", "of the twelve kernels": a count that a new kernel changes.
COUNT = re.compile(r"\b(\d+|" + "|".join(NUMBER_WORDS) + r")\s+(?:of\s+the\s+)?kernels\b", re.IGNORECASE)


def prose_paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph outside code blocks and tables."""
    paragraphs, current, start, fenced = [], [], 0, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        prose = not fenced and line.strip() and not line.startswith(("|", "    ", "```"))
        if prose:
            start = start if current else number
            current.append(line)
        elif current:
            paragraphs.append((start, " ".join(current)))
            current = []
    if current:
        paragraphs.append((start, " ".join(current)))
    return paragraphs


def kernel_lists(text: str, kernels) -> list[str]:
    found = []
    for line, paragraph in prose_paragraphs(text):
        named = {k for k in kernels if re.search(rf"\b{re.escape(k)}\b", paragraph)}
        if len(named) > MOST_KERNELS_IN_A_PARAGRAPH:
            found.append(f"README.md:{line}: a paragraph lists {len(named)} kernels ({', '.join(sorted(named))})")
        for match in COUNT.finditer(paragraph):
            found.append(f"README.md:{line}: {match.group(0)!r} counts the kernels")
    return found


def test_readme_neither_lists_nor_counts_kernels():
    found = kernel_lists(README.read_text(encoding="utf-8"), known_ops())
    assert not found, "\n".join(found)


def test_the_check_sees_a_list_and_a_count():
    ops = known_ops()[:MOST_KERNELS_IN_A_PARAGRAPH + 1]
    assert len(kernel_lists("Kernels: " + ", ".join(f"`{k}`" for k in ops) + ".", ops)) == 1
    assert len(kernel_lists("The main command makes 801 cases of the\nnine kernels.", ops)) == 1
    assert len(kernel_lists("It covers all 11 kernels.", ops)) == 1
    assert not kernel_lists("For example `" + ops[0] + "`:\n\n    opcase gen specs/*.yaml", ops)
