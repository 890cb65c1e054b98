"""The package's layering, read from the imports themselves (an AST walk), so that it cannot rot.

gen.core is the layer gen (the generator) and harness (the judge) both stand on: it imports
neither.  gen never imports harness; harness imports gen only through gen.core, except in its
CLI layer (harness.cli: the commands that compose the two).  A kernel's parts (gen.kernels:
one folder per family) are found by convention (gen.core.registry), never imported across the line.  A first-party import inside a function
says why on its line (a comment), and no private name is imported from another module.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO

PACKAGES = ("gen", "harness")


@dataclass(frozen=True)
class Import:
    importer: str       # dotted module that imports
    module: str         # dotted module imported
    names: tuple        # names taken from it (from-imports)
    line: int
    in_function: bool
    commented: bool     # a comment on the import's lines says why


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: Path) -> list[Import]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    importer = _module_name(path)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    inside = {id(child) for f in functions for child in ast.walk(f) if child is not f}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = [(_resolve(importer, path.name == "__init__.py", node), tuple(a.name for a in node.names))]
        else:
            continue
        commented = any("#" in lines[i] for i in range(node.lineno - 1, node.end_lineno))
        for module, names in targets:
            if module.split(".")[0] in PACKAGES:
                found.append(Import(importer, module, names, node.lineno, id(node) in inside, commented))
    return found


def _all_imports() -> list[Import]:
    return [i for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))
            if not path.name.endswith("_pb2.py") for i in _imports(path)]


IMPORTS = _all_imports()


def _layer(module: str) -> str:
    if module == "gen.core" or module.startswith("gen.core."):
        return "core"
    if module == "harness.cli" or module.startswith("harness.cli."):
        return "cli"
    return module.split(".")[0]


def _where(i: Import) -> str:
    return f"{i.importer}:{i.line} imports {i.module}"


def test_the_walk_sees_the_imports():
    # A walk that found nothing would pass every rule below.
    assert len(IMPORTS) > 200
    assert any(_layer(i.importer) == "cli" and _layer(i.module) == "gen" for i in IMPORTS)
    assert any(_layer(i.importer) == "harness" and _layer(i.module) == "core" for i in IMPORTS)


def test_core_imports_only_core():
    assert [_where(i) for i in IMPORTS if _layer(i.importer) == "core" and _layer(i.module) != "core"] == []


def test_gen_never_imports_harness():
    assert [_where(i) for i in IMPORTS if _layer(i.importer) == "gen" and i.module.startswith("harness")] == []


def test_harness_reaches_gen_only_through_core_but_at_the_cli():
    assert [_where(i) for i in IMPORTS if _layer(i.importer) == "harness" and _layer(i.module) == "gen"] == []


def test_a_function_local_first_party_import_says_why():
    assert [_where(i) for i in IMPORTS if i.in_function and not i.commented] == []


def test_no_private_name_crosses_modules():
    crossing = [f"{_where(i)} name {name}" for i in IMPORTS for name in i.names
                if name.startswith("_") and not name.startswith("__") and i.module != i.importer]
    assert crossing == []


@pytest.mark.parametrize("rule, imports", [
    (test_gen_never_imports_harness, [Import("gen.generate", "harness.judge.runner", ("judge",), 1, False, False)]),
    (test_core_imports_only_core, [Import("gen.core.spec", "gen.generate", ("plan_suite",), 1, False, False)]),
    (test_harness_reaches_gen_only_through_core_but_at_the_cli,
     [Import("harness.judge.runner", "gen.generate", ("Plan",), 1, False, False)]),
    (test_a_function_local_first_party_import_says_why,
     [Import("harness.judge.runner", "gen.core.spec", ("load_spec",), 1, True, False)]),
    (test_no_private_name_crosses_modules, [Import("harness.judge.runner", "gen.core.spec", ("_tensor",), 1, False, False)]),
])
def test_each_rule_catches_its_violation(monkeypatch, rule, imports):
    monkeypatch.setattr(__import__(__name__), "IMPORTS", IMPORTS + imports)
    with pytest.raises(AssertionError):
        rule()


# ----------------------------------------------------------------------------- the house's size and circles

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def _first_party_modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))
            if not path.name.endswith("_pb2.py")}


def test_no_module_or_function_is_too_long_to_read():
    """No module over MAX_MODULE_LINES lines, no function over MAX_FUNCTION_LINES (generated code aside),
    the tests' own modules included."""
    long_modules, long_functions = [], []
    tests = {_module_name(path): path for path in sorted((REPO / "tests").rglob("*.py"))
             if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))}
    for name, path in {**_first_party_modules(), **tests}.items():
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not long_modules and not long_functions, long_modules + long_functions


def _import_graph() -> dict[str, set[str]]:
    """Which first-party module imports which, function-local imports included; a module importing
    its own package's __init__ (a child reading its parent) is no edge."""
    modules = _first_party_modules()
    graph = {name: set() for name in modules}
    for found in IMPORTS:
        for target in (found.module, *(f"{found.module}.{n}" for n in found.names)):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != found.importer and not found.importer.startswith(target + "."):
                graph[found.importer].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]; counter[0] += 1
                    stack.append(nxt); on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop(); on_stack.discard(member); component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_circles():
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    # The check above is no rubber stamp: a planted circle is found.
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
