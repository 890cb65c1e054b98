"""Fuzzing specs: the committed specs, their YAML trees mutated (keys deleted, renamed, values
replaced by other types, numbers pushed to extremes, tokens spliced into expressions, subtrees
grafted elsewhere) or their text mutated (bytes flipped, cut, snippets inserted), fed to
`opcase gen` for one small selection of one suite.  See fuzzing.py for what must hold."""
from __future__ import annotations

import copy
import shutil
import re

import yaml
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import ESCAPE_DIR, NEIGHBOURS, REPO, examples as _examples, fuzz_settings, fuzzing, opcase



def _trimmed(tree: dict) -> dict:
    """The spec with its network and boundary lists cut to a few entries: every kind of entry
    stays, and the pure-Python YAML parse of each mutant (most of its cost) gets 3-4x cheaper."""
    suites = tree.get("suites", {})
    if "network" in suites:
        suites["network"]["cases"] = suites["network"]["cases"][:2]
    if "boundary" in suites:
        suites["boundary"] = suites["boundary"][:4]
    return tree


TREES = {p.name: _trimmed(yaml.safe_load(p.read_text())) for p in sorted((REPO / "specs").glob("*.yaml"))}
SPECS = {name: yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120) for name, tree in TREES.items()}
SUITES = ("network", "random", "boundary", "invalid")
CI_EXAMPLES = 200

SCALARS = [None, True, False, 0, 1, -1, 2, 3, 7, 2**31, 2**63, -2**63, 10**30, 0.5, -0.0, 1e-300, 1e308,
           float("nan"), float("inf"), float("-inf"), "", " ", "x", "T", "float16", "float64", "int32", "bool",
           "NHWC", "NCHW", "ARRAY", "N", "C", "H*W", "N // 0", "1 / 0", "min()", "len(1)", "x.shape[9]",
           "[1, 2][5]", "'a'", "None", "uniform", "normal", "randint", "const", "custom", "static", "dynamic",
           "diff1", "diff4", "lowp", "reference", "float('nan')", "int('x')", "a if b else", "__import__('os')",
           "().__class__", "lambda: 0", "x.__class__", "(", "{", "é", "\t", "\x00",
           "gen.kernels.carafe.reference:no_such_function", "no_such_module:fn", "gen.kernels.carafe.reference",
           "../../escaped", f"{ESCAPE_DIR}/escaped", "a/b"]
CONTAINERS = [[], {}, [None], [[1]], {"a": 1}, {"dist": "const"}, {"min": 1, "max": 0}, {"min": "x", "max": 2},
              [1, 2, 3], ["x", "y"], {"name": "x"}]
TOKENS = ["+1", "-", "*2", "**2", "/0", "//0", "%0", "[0]", "[9]", "[:]", ".shape", ".size", ".dtype",
          ".__class__", "(", ")", " if ", " else 0", " and ", " or ", " not ", "'a'", "None", "1e400", ",", "==",
          "<", "min(", "len(", "x", "_", "..", "/", " ", "\n", "#"]
TEXT_SNIPPETS = [": ", "\n  ", "- ", "{", "}", "[", "]", "&a ", "*a ", "!!binary ", "!!python/name:os.system ",
                 "\t", "\x00", "'", '"', "#", "---\n", "~", "? ", "|\n", "%YAML 1.1\n", ":", ",", "\ufeff", "\\"]
if NEIGHBOURS:
    # issue 10 items 5-8 (neighbour `inputs`): bombs, any function as reference, names as paths
    SCALARS += ["os:getcwd", "builtins:print", "9**9**9", "'a'*10**9", "../../escaped/x", f"{ESCAPE_DIR}/x"]
    TOKENS += ["**99999", "**9**9", "*10**9", "'a'*"]
    # issue 35 item 6: prod() past the guards, regexes that backtrack without end (deviations), a
    # fast_path suite that plans without end
    SCALARS += ["prod(('x', 10**9))", "prod([[0], 10**9])", "prod([2**4000, 2**4000])", "(.|.)*#", "(a+)+$",
                ".*.*.*.*.*#", "(?=a).*"]
    TOKENS += [" * prod((9**99, 9**99))", "prod(('a', 10**9))", "(.|.)*", "(a+)+"]
    CONTAINERS += [[{"backend": "lowp", "cases": "(.|.)*#", "status": "failed",
                     "reason": "a pattern that backtracks without end"}],
                   [{"N": n} for n in range(1, 400)]]
    TEXT_SNIPPETS += ["&a [*a, *a, *a, *a, *a, *a, *a, *a, *a]"]


def _neighbours(path) -> bool:
    """Whether mutating this part of a spec is issue 10 items 5-8 (neighbour `inputs`): names that
    become paths (op, case names, check ids), the functions a spec names, the random suite's
    samplers, counts and conditions (ranges, sizes, evaluation errors), violate's dtypes and shapes,
    the dtypes of suite entries."""
    return (path[-1] in ("op", "name", "id", "reference", "fn") or path[:2] == ("suites", "random")
            or len(path) >= 4 and path[0] == "checks" and path[2] == "violate" and path[3] in ("dtype", "shape")
            or path[0] == "suites" and "dtype" in path)


def _slots(node, path=()):
    """The path of every value in a YAML tree (but the neighbours' parts, unless NEIGHBOURS)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        if NEIGHBOURS or not _neighbours(path + (key,)):
            yield path + (key,)
            yield from _slots(value, path + (key,))


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


@st.composite
def mutated_tree(draw, tree):
    tree = copy.deepcopy(tree)
    for _ in range(draw(st.integers(1, 4))):
        slots = list(_slots(tree))
        if not slots:
            break
        path = draw(st.sampled_from(slots))
        parent, key = _at(tree, path[:-1]), path[-1]
        value = parent[key]
        how = draw(st.sampled_from(["delete", "scalar", "container", "splice", "number", "graft", "rename",
                                    "duplicate"]))
        if how == "delete":
            del parent[key]
        elif how == "scalar":
            parent[key] = draw(st.sampled_from(SCALARS))
        elif how == "container":
            parent[key] = copy.deepcopy(draw(st.sampled_from(CONTAINERS)))
        elif how == "splice":
            text = str(value)
            at = draw(st.integers(0, len(text)))
            parent[key] = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif how == "number":
            base = value if isinstance(value, (int, float)) and not isinstance(value, bool) else 1
            parent[key] = draw(st.sampled_from([0, -1, 1, -base, base + 1, base - 1, base * 1000, 2**31 - 1,
                                                2**62, base / 3, 4096]))
        elif how == "graft":
            parent[key] = copy.deepcopy(_at(tree, draw(st.sampled_from(slots))))
        elif how == "rename" and isinstance(parent, dict):
            new = draw(st.sampled_from([*map(str, parent), "x", "", "name", "optional", "each", "1", "None"]))
            parent[new] = parent.pop(key)
        elif how == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(value))
    return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)


@st.composite
def mutated_text(draw, text):
    raw = text.encode()
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(raw)))
        how = draw(st.sampled_from(["flip", "cut", "truncate", "insert", "dup_line"]))
        if how == "flip" and at < len(raw):
            raw = raw[:at] + bytes([raw[at] ^ (1 << draw(st.integers(0, 7)))]) + raw[at + 1:]
        elif how == "cut":
            raw = raw[:at] + raw[at + draw(st.integers(1, 40)):]
        elif how == "truncate":
            raw = raw[:at]
        elif how == "insert":
            raw = raw[:at] + draw(st.sampled_from(TEXT_SNIPPETS)).encode() + raw[at:]
        elif how == "dup_line":
            start = raw.rfind(b"\n", 0, at) + 1
            end = raw.find(b"\n", at)
            end = len(raw) if end < 0 else end + 1
            raw = raw[:end] + raw[start:end] + raw[end:]
    return raw


def _names(tree, suite) -> list[str]:
    """The case names of the committed spec's suite, to select one entry (with its dtype variants)."""
    suites = tree.get("suites", {})
    if suite == "network":
        return [c["name"] for c in suites.get("network", {}).get("cases", [])]
    if suite == "boundary":
        return [c["name"] for c in suites.get("boundary", [])]
    if suite == "invalid":
        return [c["id"] for c in tree.get("checks", []) if c.get("violate")]
    return []


@st.composite
def gen_inputs(draw):
    """(spec bytes, opcase gen arguments after the spec path)."""
    name = draw(st.sampled_from(sorted(SPECS)))
    if draw(st.integers(0, 4)):
        raw = draw(mutated_tree(TREES[name])).encode()
    else:
        raw = draw(mutated_text(SPECS[name]))
    suite = draw(st.sampled_from(SUITES))
    args = ["--suite", suite, "--count", "1", "--max-size", "64KB", "-o", "out"]
    names = _names(TREES[name], suite)
    if names:
        args += ["--select", f"^{re.escape(draw(st.sampled_from(names)))}-"]
    return raw, args


def test_the_committed_specs_pass_unmutated():
    """The harness of this test: an unmutated spec generates cases (exit 0), so mutants start from good input."""
    with fuzzing("specs (unmutated)") as (sandbox, figures):
        for name, text in SPECS.items():
            work = sandbox.reset()
            (work / name).write_text(text)
            assert opcase(sandbox, figures, "gen", name, "--suite", "boundary",
                          "--max-size", "64KB", "-o", "out") == 0
            assert list((work / "out").rglob("*.opcase")), name


def _mutant(name: str, path: tuple, value=None, delete=False) -> bytes:
    """The committed spec `name` with one value replaced (or deleted): a regression example."""
    tree = copy.deepcopy(TREES[name])
    parent = _at(tree, path[:-1])
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120).encode()


def _gen_args(suite: str, select: str | None = None) -> list[str]:
    return ["--suite", suite, "--count", "1", "--max-size", "64KB", "-o", "out",
            *(["--select", select] if select else [])]


# Inputs the fuzzer found that once ended in a traceback (each its own fix).
REGRESSIONS = [
    # names in suites.stress that are no strings (the long run with the hostile inputs found them)
    (_mutant("psamask_forward.yaml", ("suites", "stress", "channel_tail", 0, "dim"), []), _gen_args("invalid")),
    (_mutant("psamask_forward.yaml", ("suites", "stress", "index_width", "tensor"), [1]), _gen_args("invalid")),
    # each.dtype a number, not a list (the long run with the hostile inputs found it)
    (_mutant("carafe_forward.yaml", ("suites", "boundary", 2, "each"), {"dtype": 1}), _gen_args("boundary", "^kernel_45-")),
    (_mutant("carafe_forward.yaml", ("checks", 3, "violate", "params"), 7), _gen_args("invalid")),
    (_mutant("carafe_forward.yaml", ("suites", "random"), 5), _gen_args("random")),
    (_mutant("carafe_forward.yaml", ("suites", "random", "where"), 3), _gen_args("random")),
    (_mutant("carafe_forward.yaml", ("suites", "network"), 3), _gen_args("network")),
    (SPECS["psamask_forward.yaml"].encode() + b"\n? [1]\n: 2\n", _gen_args("boundary")),
    (_mutant("psamask_forward.yaml", ("inputs", "x", "shape", 0), "'a'"), _gen_args("boundary", "^mask_1x1-")),
    (_mutant("carafe_forward.yaml", ("op",), "no_such_op"), _gen_args("boundary", "^kernel_1-")),
    (_mutant("deform_roi_pool_forward.yaml", ("suites", "boundary", 1, "params", "pooled_height"), [2]),
     _gen_args("boundary", "^rois_on_edge-")),
    (_mutant("masked_im2col_forward.yaml", ("suites", "boundary", 0, "params", "pad_h"), delete=True),
     _gen_args("boundary", "^indices_negative-")),
    (_mutant("deform_roi_pool_forward.yaml", ("suites", "network", "cases", 0, "omit"), [["offset"]]),
     _gen_args("network")),
    (_mutant("carafe_forward.yaml", ("criteria", "dynamic"), 3), _gen_args("boundary")),
    (_mutant("psamask_forward.yaml", ("inputs", "x", "shape", 0), "N.shape"), _gen_args("boundary", "^mask_1x1-")),
    # an empty list of choices for a random dim (the long run after issue 19 found it)
    (_mutant("border_align_forward.yaml", ("suites", "random", "dims", "K"), []), _gen_args("random")),
    # a check's status that is no string (a mapping: unhashable in the set of statuses)
    (_mutant("carafe_forward.yaml", ("checks", 11, "status"), {"dist": "const"}), _gen_args("invalid")),
    # a negative dim in the invalid suite's base: a tensor with a negative extent
    (_mutant("deform_roi_pool_forward.yaml", ("suites", "invalid", "base", "dims", "R"), -1),
     _gen_args("invalid", "^rois_dtype-")),
]


def test_gen_in_process_reads_an_edited_spec_again():
    """gen's plan cache is keyed by the spec's path: a spec edited between two in-process calls
    (as between two fuzz examples) must not be served the old plans under the new names."""
    from gen.core.casefile import load
    with fuzzing("specs (edited in process)") as (sandbox, figures):
        work = sandbox.reset()
        tree = copy.deepcopy(TREES["psamask_forward.yaml"])
        for boundary in (tree["suites"]["boundary"], tree["suites"]["boundary"][::-1]):
            tree["suites"]["boundary"] = boundary
            (work / "spec.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
            # gen refuses an -o holding cases of another spec version: each edit gets a fresh one.
            shutil.rmtree(work / "out", ignore_errors=True)
            assert opcase(sandbox, figures, "gen", "spec.yaml", *_gen_args("boundary")) == 0
            written = sorted((work / "out").rglob("*.opcase"))
            assert len(written) == 8
            assert all(load(path).name == path.stem for path in written)


def test_mutated_specs():
    with fuzzing("specs") as (sandbox, figures):
        @given(gen_inputs())
        @fuzz_settings(CI_EXAMPLES)
        @_examples(REGRESSIONS)
        def one_spec(inputs):
            raw, args = inputs
            work = sandbox.reset()
            (work / "spec.yaml").write_bytes(raw)
            figures.inputs += 1
            opcase(sandbox, figures, "gen", "spec.yaml", *args)
        one_spec()
