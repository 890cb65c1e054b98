"""A design doc as lines and sections: the bounded, normalised text the doc reader works on.

A doc is untrusted input: its size and its line lengths are capped, and nothing here uses a
pattern that can backtrack without bound (every regex is anchored or made of single-character
classes with no nested repetition)."""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

MAX_DOC_BYTES = 2 * 1024 * 1024
MAX_LINE_CHARS = 4000


class DocError(Exception):
    """A doc that cannot be read at all (missing, too big, not UTF-8): one line for the user."""


# NFKC folds full-width forms (，：；（）＜＝) to ASCII; these few it leaves alone.
_EXTRA_FOLDS = str.maketrans({"、": ",", "。": ".", "≤": "<=", "≥": ">=", "≠": "!=", "×": "*",
                              "\u3000": " ", "“": '"', "”": '"', "‘": "'", "’": "'"})
_HEADING = re.compile(r"#{1,6}[ \t]*(.*)")
_NUMBER = re.compile(r"(\d{1,2}(?:\.\d{1,2}){0,4})\.?[ \t]*(.*)")


def normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).translate(_EXTRA_FOLDS)


@dataclass
class Section:
    number: str          # "1.4", "" for an unnumbered heading
    title: str
    line: int            # the heading's line (1-based)
    level: int
    body: list = field(default_factory=list)   # (line number, text) outside code fences


@dataclass
class DocText:
    path: str
    lines: list          # normalised lines
    sections: list       # Section, in order
    long_lines: list     # line numbers cut at MAX_LINE_CHARS

    def find(self, *keywords, number_prefix: str = "") -> list:
        """Sections whose title holds any keyword (and whose number starts with number_prefix)."""
        return [s for s in self.sections
                if any(k in s.title for k in keywords) and s.number.startswith(number_prefix)]

    def subsections(self, section: Section) -> list:
        """The section and its subsections, in order."""
        out, inside = [], False
        for s in self.sections:
            if s is section:
                inside = True
            elif inside and s.level <= section.level:
                break
            if inside:
                out.append(s)
        return out

    def under(self, section: Section) -> list:
        """The body lines of a section and of its subsections."""
        return [line for s in self.subsections(section) for line in s.body]


def read_bounded(path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, refused (DocError) past ``limit``: never more than limit + 1 read."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise DocError(f"{path}: cannot read {what} ({exc.strerror})") from None
    if len(data) > limit:
        raise DocError(f"{path}: {what} is over {limit // (1024 * 1024)} MiB")
    return data


def read_doc(path) -> DocText:
    path = Path(path)
    data = read_bounded(path, MAX_DOC_BYTES, "doc")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocError(f"{path}: doc is not UTF-8 (byte {exc.start})") from None
    return parse_doc(text, str(path))


def parse_doc(text: str, name: str = "<doc>") -> DocText:
    lines, long_lines = [], []
    for i, raw in enumerate(text.splitlines(), 1):
        if len(raw) > MAX_LINE_CHARS:
            long_lines.append(i)
            raw = raw[:MAX_LINE_CHARS]
        lines.append(normalise(raw))
    sections = [Section("", "", 0, 0)]
    fenced = False
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            # as in CommonMark, only a bare fence closes one: a `` ```c++ `` inside a fence that was
            # never closed is its content, so one unclosed fence cannot put the rest of a doc out of phase
            if not fenced or not stripped.strip("`").strip():
                fenced = not fenced
            continue
        if fenced:
            continue
        m = _HEADING.fullmatch(stripped) if stripped.startswith("#") else None
        if m:
            level = len(stripped) - len(stripped.lstrip("#"))
            title = m.group(1).strip().strip("*").strip()
            n = _NUMBER.fullmatch(title)
            number, title = (n.group(1), n.group(2).strip()) if n else ("", title)
            sections.append(Section(number, title.replace("*", "").strip(), i, level))
        else:
            sections[-1].body.append((i, line))
    return DocText(name, lines, sections, long_lines)
