"""The text case writer's printer (harness/mluops/text_print.py) against protobuf's text_format:
byte for byte on nodes that set every field of the case schema with values text_format spells its
own way (nan, -0.0, inf, escapes, unicode, integer extremes), on written committed cases, and on
the forms it hands to text_format (an Any, a map, an extension, a group)."""
from __future__ import annotations

import random

import pytest
from google.protobuf import any_pb2, descriptor, struct_pb2, text_format

from conftest import REPO
from gen.core.casefile import find, load
from harness.mluops import mluops_case_pb2 as pb
from harness.mluops.schema import kernel_format
from harness.mluops.text_print import message_to_text
from harness.mluops.writer import _node

F = descriptor.FieldDescriptor
INTEGERS = {F.CPPTYPE_INT32: (-2**31, 2**31 - 1), F.CPPTYPE_INT64: (-2**63, 2**63 - 1),
            F.CPPTYPE_UINT32: (0, 2**32 - 1), F.CPPTYPE_UINT64: (0, 2**64 - 1)}
FLOATS = [0.0, -0.0, 1.5, -3.25e-7, 3.4028234663852886e38, 1e-45, float("inf"), float("-inf"), float("nan"), 0.1]
STRINGS = ["", "plain", 'quote " and \\ backslash', "tab\tnew\nline", "unicode \u00e9\u4e2d", "\x01\x7f"]


def _value(field, rng: random.Random):
    kind = field.cpp_type
    if kind in INTEGERS:
        low, high = INTEGERS[kind]
        return rng.choice([low, high, 0, -1 if low else 1, rng.randint(low, high)])
    if kind in (F.CPPTYPE_FLOAT, F.CPPTYPE_DOUBLE):
        return rng.choice(FLOATS)
    if kind == F.CPPTYPE_BOOL:
        return rng.choice([True, False])
    if kind == F.CPPTYPE_STRING:
        text = rng.choice(STRINGS)
        return text.encode() if field.type == F.TYPE_BYTES else text
    if kind == F.CPPTYPE_ENUM:
        return rng.choice(field.enum_type.values).number
    raise AssertionError(f"no value for {field.full_name}")


def _fill(message, rng: random.Random, depth: int = 0) -> None:
    """Every field of ``message`` set (repeated ones with 1-40 elements), nested messages too."""
    for field in message.DESCRIPTOR.fields:
        if field.cpp_type == F.CPPTYPE_MESSAGE:
            if depth > 3:
                continue
            for _ in range(rng.randint(1, 3) if field.is_repeated else 1):
                child = getattr(message, field.name).add() if field.is_repeated else getattr(message, field.name)
                child.SetInParent()
                _fill(child, rng, depth + 1)
        elif field.is_repeated:
            getattr(message, field.name).extend(_value(field, rng) for _ in range(rng.randint(1, 40)))
        else:
            setattr(message, field.name, _value(field, rng))


@pytest.mark.parametrize("seed", range(20))
def test_every_field_of_the_schema_prints_as_text_format_does(seed):
    node = pb.Node()
    _fill(node, random.Random(seed))
    assert node.input and node.input[0].value_i     # the fill reached the tensors' value fields
    assert message_to_text(node) == text_format.MessageToString(node)


def test_written_committed_cases_print_as_text_format_does(tmp_path):
    """One written case per kernel and dtype of the committed suites (their tensors' bit patterns)."""
    seen, checked = set(), 0
    for path in find([REPO / "cases"]):
        case = load(path, verify=False)
        kernel = kernel_format(case.op)
        if kernel is None or case.expect != "ok" or (case.op, case.dtype) in seen:
            continue
        seen.add((case.op, case.dtype))
        node = _node(case, kernel, tmp_path / f"{path.stem}.prototxt", 1 << 30)   # no tensor goes to a file
        assert message_to_text(node) == text_format.MessageToString(node), path
        checked += 1
    assert checked > 10


def test_what_text_format_prints_its_own_way_is_left_to_it():
    # Any (expanded), map entries (sorted), nested messages with repeated integers inside a foreign type.
    packed = any_pb2.Any()
    packed.Pack(pb.Tensor(id="t", shape=pb.Shape(dims=[2, 3]), layout=pb.LAYOUT_ARRAY, dtype=pb.DTYPE_FLOAT,
                          value_i=list(range(-20, 20))))
    assert message_to_text(packed) == text_format.MessageToString(packed)
    structure = struct_pb2.Struct()
    structure.update({"b": 1.5, "a": [1, "x", None, {"z": True}], "c": {"n": -0.0}})
    assert message_to_text(structure) == text_format.MessageToString(structure)
    listed = struct_pb2.ListValue()
    listed.extend([float("nan"), "q\"", [2, 3]])
    assert message_to_text(listed) == text_format.MessageToString(listed)
