"""The text case reader's fast path (harness/mluops/text_runs.py) against protobuf's text_format.

Files are drawn from the forms text_format accepts and the ones it refuses, placed where they
are hardest for a reader that cuts runs of value lines out: beside the runs (strings that would
join, separators, a field name or a colon waiting for its value), inside them (octal, hex,
`1.0f`, out of range), in nested blocks and at the top level.  Each file must give the same
message as text_format, or the same error, line numbers included.
"""
from __future__ import annotations

import math

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels as records
from harness.mluops import mluops_case_pb2 as pb
from harness.mluops import text_runs

PLAIN = {"value_i": st.integers(-2**31, 2**31 - 1).map(str),
         "value_l": st.integers(-2**63, 2**63 - 1).map(str),
         "value_ui": st.integers(0, 2**32 - 1).map(str),
         "value_ul": st.integers(0, 2**64 - 1).map(str),
         "value_f": st.one_of(st.floats(width=32, allow_nan=False).map(repr),
                              st.floats(allow_nan=False).map(repr), st.sampled_from(["nan", "-nan", "inf", "-inf", "1.", "0e5"])),
         "value_h": st.integers(0, 2**16 - 1).map(lambda v: f'"{v:04x}"')}
# Tokens text_format reads its own way or refuses: octal, hex, suffixes, spellings, out of range.
ODD = st.sampled_from(["010", "-010", "0x1f", "+5", "1.0f", "INF", "Infinity", "nanf", "01.5", "2147483648",
                       "-2147483649", "18446744073709551616", "-1", "1e400", "3.4028235e38", "3.40282357e38",
                       '"3c00" "01"', '"zz"', "'3c00'", "5 # comment", "5;", "5,", "[1, 2]", "", "true"])
# Lines put between or around the runs.
STRAY = st.sampled_from(['id: "x{"', '"tail"', ",", ";", "layout:", "shape", "shape { dims: 2 }", "value_i:",
                         "value_i: 7", "# a comment with value_i: 1", "path: \"p\"", "[ext.name] { }", "}", "{",
                         "threshold_use: 0", "dims: [1, 2]", "random_data { seed: 1 }"])


@st.composite
def segment(draw, field):
    """A run of one field's value lines, mostly plain, sometimes odd, around the run length."""
    count = draw(st.integers(0, 2 * text_runs.MIN_RUN + 4))
    odd = draw(st.booleans()) and draw(st.integers(0, 9)) == 0
    indent = draw(st.sampled_from(["  ", "", "\t", "    "]))
    lines = []
    for _ in range(count):
        token = draw(ODD) if odd and draw(st.integers(0, 15)) == 0 else draw(PLAIN[field])
        lines.append(f"{indent}{field}{draw(st.sampled_from([': ', ':', ' : ']))}{token}")
    return lines


@st.composite
def tensor_block(draw):
    name = draw(st.sampled_from(["input", "output"]))
    opener, closer = draw(st.sampled_from([("{", "}"), ("{", "}"), (": {", "}"), ("<", ">")]))
    lines = [f"{name} {opener}", '  id: "t"', "  shape {", "    dims: 2", "  }", "  layout: LAYOUT_NHWC",
             "  dtype: DTYPE_HALF"]
    for _ in range(draw(st.integers(0, 3))):
        lines += draw(segment(draw(st.sampled_from(sorted(PLAIN)))))
        if draw(st.integers(0, 3)) == 0:
            lines.append(draw(STRAY))
    if draw(st.integers(0, 7)) == 0:     # a run nested one block deeper, where no value field is
        lines += ["  shape {", *draw(segment("value_i")), "  }"]
    return lines + [closer]


@st.composite
def case_text(draw):
    lines = ['op_name: "carafe"']
    for _ in range(draw(st.integers(1, 3))):
        lines += draw(tensor_block())
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(STRAY))
    if draw(st.integers(0, 9)) == 0:
        lines += draw(segment("value_i"))     # a run outside any tensor
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return ending.join(lines) + draw(st.sampled_from([ending, ""]))


def outcome(parse, text):
    node = pb.Node()
    try:
        parse(text, node)
    except text_format.ParseError as exc:
        return "error", str(exc)
    return "ok", node.SerializePartialToString(deterministic=True)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case_text())
def test_fast_path_gives_text_formats_message_or_its_error(text):
    assert outcome(text_runs.parse, text) == outcome(text_format.Parse, text)


def test_adjacent_strings_stay_apart_when_a_run_between_them_is_cut_out():
    """text_format joins `"a" "b"`; with a run between them the original is an error."""
    run = "\n".join(f"  value_i: {v}" for v in range(text_runs.MIN_RUN))
    text = f'input {{\n  id: "t"\n{run}\n  "more"\n  shape {{ dims: 1 }}\n}}\n'
    assert outcome(text_runs.parse, text)[0] == "error"
    assert outcome(text_runs.parse, text) == outcome(text_format.Parse, text)


def test_a_name_waiting_for_its_value_is_not_joined_to_the_text_after_a_run():
    run = "\n".join(f"  value_i: {v}" for v in range(text_runs.MIN_RUN))
    text = f'input {{\n  shape\n{run}\n  {{ dims: 1 }}\n}}\n'
    assert outcome(text_runs.parse, text)[0] == "error"
    assert outcome(text_runs.parse, text) == outcome(text_format.Parse, text)


def test_values_keep_their_order_across_runs_and_tensors(monkeypatch):
    first = [f"  value_f: {v}" for v in (0.5, -1e-46, 3.4028235e38, float("inf"))] * text_runs.MIN_RUN
    second = [f"  value_ul: {2**64 - 1 - v}" for v in range(text_runs.MIN_RUN)]
    text = "\n".join(["input {", *first, *second, "}", "output {", *first, "}"]) + "\n"
    node = pb.Node()
    parsed = []
    monkeypatch.setattr(text_runs.text_format, "Parse", lambda t, n, parse=text_format.Parse: (parsed.append(t),
                                                                                              parse(t, n)))
    text_runs.parse(text, node)
    assert parsed == ["input {\n}\noutput {\n}\n"]     # the runs were read by the fast path
    monkeypatch.undo()
    assert list(node.input[0].value_f) == list(node.output[0].value_f) == [0.5, 0.0, 3.4028234663852886e38,
                                                                           math.inf] * text_runs.MIN_RUN
    assert list(node.input[0].value_ul) == [2**64 - 1 - v for v in range(text_runs.MIN_RUN)]
    assert outcome(text_runs.parse, text) == outcome(text_format.Parse, text)


def test_mluops_own_case_files_read_the_same_and_mostly_by_the_fast_path(monkeypatch):
    """mlu-ops' own text cases (tests/conformance/mlu-ops): the same messages as text_format's,
    and the fast path reads the values of those that have runs."""
    reference = text_format.Parse
    whole = []
    monkeypatch.setattr(text_runs.text_format, "Parse", lambda t, n: (whole.append(t is text), reference(t, n)))
    fast = 0
    for path in records.every_conformance_file("mlu-ops"):
        text = path.read_text()
        whole.clear()
        assert outcome(text_runs.parse, text) == outcome(reference, text), path
        fast += whole == [False]
    assert fast, "no conformance file took the fast path"


@pytest.mark.parametrize("prefilled", [False, True], ids=["empty node", "node with content"])
def test_merges_into_the_node_as_text_format_does(prefilled):
    """An empty node is filled in place, one with content through a copy; both end as text_format's."""
    run = "\n".join(f"  value_i: {v}" for v in range(text_runs.MIN_RUN))
    texts = [f'op_name: "carafe"\ninput {{\n  id: "t"\n{run}\n}}\n',
             f'op_name: "carafe"\ninput {{\n  id: "t"\n{run}\n  value_i: 010\n}}\n']    # the second falls back
    for text in texts:
        nodes = []
        for parse in (text_runs.parse, text_format.Parse):
            node = pb.Node()
            if prefilled:
                node.device = pb.GPU
                node.output.add(id="kept")
            parse(text, node)
            nodes.append(node.SerializePartialToString(deterministic=True))
        assert nodes[0] == nodes[1]
