"""Print a message as protobuf's ``text_format.MessageToString`` does, in a fraction of its time.

A written case's tensors are long repeated integer fields (``value_i``, ``value_l``: bit patterns),
and text_format's pure-Python printer spends about 10 Python calls on each element (a 10 MB text
case in 8 s).  Here those fields are printed in one join each -- text_format writes an integer
element as ``<indent><name>: <str(value)>\\n``, so the join gives the same characters -- and every
other field, message blocks excepted, is handed to ``text_format.PrintField`` itself, so floats,
strings, enums and bools keep text_format's own spelling.  Anything whose printing text_format
special-cases (an ``Any``, a map, an extension, a group) is printed by text_format whole.
tests/test_mluops_text_print.py checks the output is text_format's, byte for byte.
"""
from __future__ import annotations

import io

from google.protobuf import descriptor, text_format

_F = descriptor.FieldDescriptor
_INTEGER = {_F.CPPTYPE_INT32, _F.CPPTYPE_INT64, _F.CPPTYPE_UINT32, _F.CPPTYPE_UINT64}
_ANY = "google.protobuf.Any"


def message_to_text(message) -> str:
    """``text_format.MessageToString(message)`` with its default options, byte for byte."""
    out = io.StringIO()
    _print_message(message, out, 0)
    return out.getvalue()


def _print_message(message, out: io.StringIO, indent: int) -> None:
    if message.DESCRIPTOR.full_name == _ANY:
        text_format.PrintMessage(message, out, indent=indent)
        return
    # text_format.PrintMessage's own loop, with its PrintField calls for plain message blocks and
    # repeated integers done here.
    for field, value in message.ListFields():
        if _is_map(field):
            for key in sorted(value):
                text_format.PrintField(field, value.GetEntryClass()(key=key, value=value[key]), out, indent=indent)
        elif _plain_message(field):
            opening, closing = f"{' ' * indent}{field.name} {{\n", f"{' ' * indent}}}\n"
            for element in (value if field.is_repeated else [value]):
                out.write(opening)
                _print_message(element, out, indent + 2)
                out.write(closing)
        elif field.is_repeated and field.cpp_type in _INTEGER and not field.is_extension:
            prefix = f"{' ' * indent}{field.name}: "
            out.write(prefix)
            out.write(f"\n{prefix}".join(map(str, value)))
            out.write("\n")
        else:
            for element in (value if field.is_repeated else [value]):
                text_format.PrintField(field, element, out, indent=indent)


def _is_map(field) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _plain_message(field) -> bool:
    """A message field text_format prints as ``name {...}`` with nothing of its own: not an
    extension (``[full.name]``), a group (its type's name) or an Any (its expanded form)."""
    return (field.cpp_type == _F.CPPTYPE_MESSAGE and not field.is_extension and field.type != _F.TYPE_GROUP
            and field.message_type.full_name != _ANY)
