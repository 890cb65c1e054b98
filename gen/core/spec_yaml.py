"""YAML with lines: the specs' parser, which remembers the line of every mapping, key and list (for
error messages that point into the spec), bounds nesting and refuses shared nodes (aliases)."""
from __future__ import annotations

import collections.abc
import re

import yaml


# The deepest nesting of mappings and lists in a spec (the committed specs nest 7 deep); PyYAML
# builds nested nodes by recursion, which a few hundred levels take past Python's stack limit.
MAX_YAML_DEPTH = 64


class LDict(dict):
    """A mapping that remembers the line of itself and of each key (1-based)."""
    line: int = 0
    key_lines: dict

    def line_of(self, key) -> int:
        return self.key_lines.get(key, self.line)


class _LList(list):
    line: int = 0
    item_lines: list


class _WithLines:
    """Constructors that record each mapping's and sequence's lines (a mixin of both loaders)."""

    def construct_mapping(self, node, deep=False):
        # Duplicate keys silently override in PyYAML; in a spec they are always a mistake.
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, collections.abc.Hashable):
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value, "
                                                        f"not a {type(key).__name__}", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        result = LDict(super().construct_mapping(node, deep=True))
        result.line = node.start_mark.line + 1
        result.key_lines = seen
        return result

    def construct_sequence(self, node, deep=False):
        result = _LList(super().construct_sequence(node, deep=True))
        result.line = node.start_mark.line + 1
        result.item_lines = [item.start_mark.line + 1 for item in node.value]
        return result


def _resolve_yaml12_floats(loader) -> None:
    """Read `3e-3`, `1e5` and `2.5E+4` as numbers, as YAML 1.2 does: PyYAML's YAML 1.1 wants a dot and
    a signed exponent and reads them as strings, which a threshold or rate then refuses as no number."""
    pattern = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")
    loader.add_implicit_resolver("tag:yaml.org,2002:float", pattern, list("-+0123456789."))


class _LineLoader(_WithLines, yaml.SafeLoader):
    """The pure-Python loader: where libyaml is missing, and for the exact message on an alias or
    on nesting past MAX_YAML_DEPTH."""
    depth = 0

    def compose_node(self, parent, index):
        # An alias can expand exponentially (a 'billion laughs' of a few lines); specs need none.
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"YAML aliases (*{event.anchor}) are not allowed in a spec",
                                              event.start_mark)
        if self.depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested over {MAX_YAML_DEPTH} levels deep",
                                              self.peek_event().start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


# libyaml's parser (about 10x faster), where PyYAML was built with it; its composer is C, so
# aliases are found afterwards, in the node graph, before anything is constructed.
_CLineLoader = type("_CLineLoader", (_WithLines, yaml.CSafeLoader), {}) if yaml.__with_libyaml__ else None


for _loader in (_LineLoader, _CLineLoader):
    if _loader is not None:
        _resolve_yaml12_floats(_loader)
        _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _loader.construct_mapping)
        _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _loader.construct_sequence)


def _shares_a_node(root) -> bool:
    """Whether a composed document reaches one node twice (what an alias, *name, makes), or nests
    past MAX_YAML_DEPTH (constructing it would recurse past Python's stack)."""
    seen, stack = set(), [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen or depth > MAX_YAML_DEPTH:
            return True
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [(part, depth + 1) for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, depth + 1) for item in node.value]
    return False


def parse_yaml(text: bytes):
    """The document of ``text`` with lines recorded (yaml.YAMLError as PyYAML raises it)."""
    if _CLineLoader is None:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    loader = _CLineLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _shares_a_node(node):
            return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - raises the alias's or depth's own error
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def line_of(obj, key=None) -> int:
    if key is not None and isinstance(obj, LDict):
        return obj.line_of(key)
    return getattr(obj, "line", 0)
