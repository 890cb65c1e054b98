"""Parse a text mlu-ops case as protobuf's text_format does, in a fraction of its time.

A case's tensors are long runs of lines such as ``value_i: 15324``, one value per line, and
text_format's pure-Python tokenizer reads them at about 25,000 values a second (a 4 MB case in
9 s).  Here each run of plain lines inside a top-level ``input``/``output`` block is lifted out,
its numbers converted in bulk, and the rest (the skeleton) left to text_format; the runs' values
are then appended to their tensors in the file's order, as Python ints, floats or strings, so
protobuf converts and range-checks them exactly as it does when text_format appends them.

Whatever the fast path is not sure of -- a value line outside a tensor, a field given both in
runs and in other lines of the same tensor, an extension or Any block, unbalanced braces, a
value protobuf refuses, or any parse error in the skeleton -- makes it parse the whole original
text with text_format instead, so results and error messages (their line numbers included) are
text_format's own.  tests/test_mluops_text_runs.py checks both parses agree on files drawn with
every form text_format accepts.
"""
from __future__ import annotations

import re

from google.protobuf import text_format

# Tokens whose Python value is the one text_format's tokenizer gives them: decimal integers
# without leading zeros (text_format reads 010 as octal), decimal floats without leading zeros
# before digits (it refuses 01.5), inf and nan, and plain lower/upper hex digit strings.
_INT = r"-?(?:0|[1-9][0-9]*)"
_FLOAT = r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|inf|nan)"
_HEX = r'"[0-9a-fA-F]{1,16}"'
_TOKEN_OF = {"value_i": _INT, "value_l": _INT, "value_ui": _INT, "value_ul": _INT,
             "value_f": _FLOAT, "value_h": _HEX}
_CONVERT = {"value_i": int, "value_l": int, "value_ui": int, "value_ul": int,
            "value_f": float, "value_h": lambda token: token[1:-1]}

# A run: at least this many consecutive plain lines of one value field (fewer are left to text_format).
MIN_RUN = 16
_RUN = re.compile("|".join(
    rf"(?P<{name}>(?:^[ \t]*{name}[ \t]*:[ \t]*{token}[ \t]*(?:\r?\n|\Z)){{{MIN_RUN},}})"
    for name, token in _TOKEN_OF.items()), re.MULTILINE)
_VALUE = re.compile(r":[ \t]*(\S+)")

# The skeleton's tokens as text_format's tokenizer cuts them: whitespace and comments, quoted
# strings (whose braces are not structure), identifiers, numbers, and any other single character.
_SKELETON_TOKEN = re.compile(r"""\s+|#[^\n]*|"(?:[^"\n\\]|\\.)*"?|'(?:[^'\n\\]|\\.)*'?"""
                             r"|[A-Za-z_][0-9A-Za-z_+-]*|[0-9+-][0-9A-Za-z_.+-]*|\.[0-9][0-9A-Za-z_.+-]*|.")
_PUNCTUATION = set("{}<>[]:;,")
_TENSOR_BLOCKS = ("input", "output")
# Values converted per step, so a run of a 2 GB file never needs all its Python objects at once.
_CHUNK_CHARS = 8 << 20


class _NotSure(Exception):
    """The fast path cannot vouch for this text; text_format parses it whole."""


def parse(text: str, node) -> None:
    """Merge ``text`` into ``node`` exactly as ``text_format.Parse(text, node)`` would."""
    runs = [(m.start(), m.end(), m.lastgroup) for m in _RUN.finditer(text)]
    if not runs:
        text_format.Parse(text, node)
        return
    # An empty node is filled in place (a copy of a case's values would double its memory) and
    # cleared if the fast path gives up; a node with content is merged into through a copy.
    target = node if not node.ListFields() else type(node)()
    try:
        skeleton, places = _skeleton(text, runs)
        if target is not node:
            target.CopyFrom(node)
        text_format.Parse(skeleton, target)
        _append_runs(target, text, runs, places)
    except (_NotSure, text_format.ParseError, ValueError, TypeError, OverflowError):
        if target is node:
            node.Clear()
        text_format.Parse(text, node)
        return
    if target is not node:
        node.CopyFrom(target)


def _skeleton(text: str, runs: list) -> tuple[str, list]:
    """The text without its runs, and for each run the top-level block it sits in:
    (field name, index among that field's blocks)."""
    pieces, places = [], []
    state = _BlockState()
    position = 0
    for start, end, _ in runs:
        piece = text[position:start]
        state.feed(piece)
        pieces.append(piece)
        places.append(state.place())
        position = end
    pieces.append(text[position:])
    state.feed(pieces[-1])
    return "".join(pieces), places


class _BlockState:
    """Where in the grammar the text read so far ends: the top-level block it is inside, and
    whether a whole field has just ended there (the only place a run can be cut out without
    changing what the rest means).  It follows a plain subset of the text format -- fields as
    `name: value`, `name {...}` or `name: <...>`, with `,` or `;` after a value -- and is not sure
    of anything else (lists, extensions), which sends the file to text_format whole."""

    FIELD, NAME, VALUE = "field", "name", "value"   # expecting a field; after a name; after ':'

    def __init__(self):
        self.stack: list[str] = []
        self.seen: dict[str, int] = {}
        self.state = self.FIELD
        self.name = ""
        self.cut = False             # a run was cut just before the next token

    def feed(self, piece: str) -> None:
        for match in _SKELETON_TOKEN.finditer(piece):
            token = match.group()
            if token[0].isspace() or token[0] == "#":
                continue
            if self.cut and token[0] in "\"'":
                # text_format joins adjacent strings: cut out, a run would no longer part them
                raise _NotSure("a string right after a run")
            self.cut = False
            self._step(token)

    def _step(self, token: str) -> None:
        word = token[0].isalpha() or token[0] == "_"
        if token in ("{", "<") and self.state in (self.NAME, self.VALUE):
            if not self.stack:
                self.seen[self.name] = self.seen.get(self.name, 0) + 1
            self.stack.append(self.name)
            self.state = self.FIELD
        elif token in ("}", ">") and self.state == self.FIELD and self.stack:
            self.stack.pop()
        elif word and self.state == self.FIELD:
            self.name, self.state = token, self.NAME
        elif token == ":" and self.state == self.NAME:
            self.state = self.VALUE
        elif self.state == self.VALUE and token not in _PUNCTUATION:
            self.state = self.FIELD            # a value: number, identifier or string
        elif token[0] in "\"'" and self.state == self.FIELD and not word:
            pass                               # a string continuing the value before it
        elif token in (";", ",") and self.state == self.FIELD:
            pass
        else:
            raise _NotSure(f"{token!r} where this reader expects no such token")

    def place(self) -> tuple[str, int]:
        if self.state != self.FIELD or len(self.stack) != 1 or self.stack[0] not in _TENSOR_BLOCKS:
            raise _NotSure("a value run outside a top-level tensor block")
        self.cut = True
        name = self.stack[0]
        return name, self.seen[name] - 1


def _append_runs(node, text: str, runs: list, places: list) -> None:
    filled = set()
    for (start, end, field), (block, index) in zip(runs, places):
        tensors = getattr(node, block)
        if index >= len(tensors):
            raise _NotSure("a block the skeleton does not have")
        values = getattr(tensors[index], field)
        if (block, index, field) not in filled:
            if len(values):
                raise _NotSure(f"{field} given outside its runs too")
            filled.add((block, index, field))
        convert = _CONVERT[field]
        for chunk in _chunks(text, start, end):
            values.extend([convert(token) for token in _VALUE.findall(chunk)])


def _chunks(text: str, start: int, end: int):
    """``text[start:end]`` in pieces of about _CHUNK_CHARS that end at line ends."""
    while start < end:
        stop = min(end, start + _CHUNK_CHARS)
        if stop < end:
            stop = min(end, text.index("\n", stop) + 1)
        yield text[start:stop]
        start = stop
