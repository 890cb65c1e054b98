"""The small expression language of specs: shape relations, checks and constraints.

An expression is a Python expression restricted to arithmetic, comparisons, boolean
logic, subscripts, a few attributes of tensors (shape, dtype, layout, ndim, size) and a
few pure functions.  It is parsed once with ``ast`` and refused if it steps outside
that set, so a spec can never run arbitrary code.  ``**``, ``*`` and ``%`` are evaluated through
guards: no integer result over MAX_INT_BITS, no repetition of a str, list or tuple, no string
formatting; with the length and nesting limits on the text, no expression can exhaust memory,
time or the stack either.  Every error an evaluation raises becomes an ExprError.
"""
from __future__ import annotations

import ast
import math
from functools import lru_cache

FUNCTIONS = {
    "min": min, "max": max, "abs": abs, "len": len, "all": all, "any": any,
    "ceil": math.ceil, "floor": math.floor, "prod": None, "int": int, "float": float,
    "isfinite": math.isfinite,
}
ATTRIBUTES = {"shape", "dtype", "layout", "ndim", "size"}
_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot,
    ast.IfExp, ast.Call, ast.Name, ast.Load, ast.Constant, ast.Subscript, ast.Slice, ast.Tuple, ast.List,
    ast.Attribute,
)


# An integer product or power may have at most this many bits (shapes, sizes and counts need far fewer).
MAX_INT_BITS = 4096
# The longest expression text, and the deepest nesting of its syntax tree (the committed specs'
# longest is under 300 characters, their deepest tree under 20 levels): past these, parsing
# and evaluating recurse deep enough to exhaust the stack or the parser's memory.
MAX_EXPR_CHARS = 2000
MAX_EXPR_DEPTH = 100


class ExprError(ValueError):
    pass


_SEQUENCES = (str, bytes, list, tuple)


def _power(base, exponent):
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1 \
            and exponent * (abs(base).bit_length() - 1) > MAX_INT_BITS:
        raise ExprError(f"{base} ** {exponent} is too large (over {MAX_INT_BITS} bits)")
    return base ** exponent


def _times(left, right):
    if isinstance(left, _SEQUENCES) or isinstance(right, _SEQUENCES):
        raise ExprError("repeating a str, list or tuple with * is not allowed")
    if isinstance(left, int) and isinstance(right, int) \
            and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS + 1:
        raise ExprError(f"a product of {abs(left).bit_length()}-bit and {abs(right).bit_length()}-bit integers "
                        f"is too large (over {MAX_INT_BITS} bits)")
    return left * right


def _product(values, *, start=1):
    """``prod(...)``: math.prod's product, each step through the guard of ``*`` (math.prod itself would
    repeat a str or list, ``prod(('x', 10**9))``, and multiply integers past MAX_INT_BITS)."""
    result = start
    for value in values:
        result = _times(result, value)
    return result


def _modulo(left, right):
    # '%' on a str or bytes is formatting, which can pad to any width ('%01000000000d' % 0).
    if isinstance(left, (str, bytes)):
        raise ExprError("string formatting with % is not allowed")
    return left % right


# The guards are reached under names a spec cannot write (names starting with '_' are refused).
_GUARDS = {"_power": _power, "_times": _times, "_modulo": _modulo}
FUNCTIONS["prod"] = _product


class _Guarded(ast.NodeTransformer):
    """``a ** b`` -> ``_power(a, b)``, ``a * b`` -> ``_times(a, b)``, ``a % b`` -> ``_modulo(a, b)``."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        guard = {ast.Pow: "_power", ast.Mult: "_times", ast.Mod: "_modulo"}.get(type(node.op))
        if guard is None:
            return node
        folded = _folded(_GUARDS[guard], node.left, node.right)
        if folded is not None:
            return ast.copy_location(folded, node)
        return ast.copy_location(ast.Call(ast.Name(guard, ast.Load()), [node.left, node.right], []), node)


def _folded(guard, left: ast.expr, right: ast.expr) -> ast.Constant | None:
    """``guard(left, right)`` computed now where both are numbers written in the text (``2**31``): the
    guard of pure numbers gives the same value at every evaluation, and the checks' size limits write
    such powers in almost every spec.  None (the call stays, to raise when evaluated) where the guard
    raises or either side is no int or float."""
    if not all(isinstance(side, ast.Constant) and type(side.value) in (int, float) for side in (left, right)):
        return None
    try:
        return ast.Constant(guard(left.value, right.value))
    except Exception:  # noqa: BLE001 - the evaluation raises it again, with its expression's text
        return None


@lru_cache(maxsize=None)
def compile_expr(text: str):
    """Parse and vet ``text``; return a code object.  Raises ExprError."""
    return compile(_vetted(text), "<spec expression>", "eval")


def _vetted(text) -> ast.Expression:
    """``text`` parsed, vetted and with the guards of ``**``, ``*`` and ``%`` in place: a fresh tree
    each time (compile_expr's and first_false's own).  Raises ExprError."""
    text = str(text)
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"expression {text[:40]!r}...: {len(text)} characters, over the limit of {MAX_EXPR_CHARS}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {text!r}: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"expression {text[:40]!r}...: nested too deeply to parse") from None
    if _depth(tree) > MAX_EXPR_DEPTH:
        raise ExprError(f"expression {text[:40]!r}...: nested over {MAX_EXPR_DEPTH} levels deep")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ExprError(f"expression {text!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise ExprError(f"expression {text!r}: name {node.id} is not allowed (names may not start with _)")
        if isinstance(node, ast.Attribute) and node.attr not in ATTRIBUTES:
            raise ExprError(f"expression {text!r}: attribute .{node.attr} is not allowed "
                            f"(only {', '.join(sorted(ATTRIBUTES))})")
        # Of a tensor's name only: x.dtype.shape would read numpy's own attributes of the dtype.
        if isinstance(node, ast.Attribute) and not isinstance(node.value, ast.Name):
            raise ExprError(f"expression {text!r}: .{node.attr} applies to a tensor's name only")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ExprError(f"expression {text!r}: only these functions may be called: "
                            f"{', '.join(sorted(FUNCTIONS))}")
    return ast.fix_missing_locations(_Guarded().visit(tree))


def _depth(tree: ast.AST) -> int:
    """The depth of a syntax tree, found without recursion (the tree may be deep)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def attribute_owners(text: str) -> set[str]:
    """The names whose attributes (x.shape, x.dtype, ...) a vetted expression reads."""
    return {n.value.id for n in ast.walk(ast.parse(str(text).strip(), mode="eval"))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}


def names_in(text: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(str(text).strip(), mode="eval"))
            if isinstance(n, ast.Name) and n.id not in FUNCTIONS and n.id not in ("None", "True", "False")}


# The globals every expression sees, made once: a vetted expression cannot assign (no walrus, no
# comprehension: _ALLOWED_NODES), so nothing an evaluation does reaches the next one through them.
_EVAL_GLOBALS = {"__builtins__": {}, **FUNCTIONS, **_GUARDS}


def evaluate(text, env: dict):
    """Evaluate a spec expression (or pass a plain number through)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    code = compile_expr(str(text))
    try:
        return eval(code, _EVAL_GLOBALS, env)  # noqa: S307 - vetted by compile_expr
    except ExprError as exc:
        raise ExprError(f"expression {text!r}: {exc}") from None
    except NameError as exc:
        raise ExprError(f"expression {text!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever a spec's expression raises is the spec's error
        raise ExprError(f"expression {text!r}: {type(exc).__name__}: {exc}") from None


# --------------------------------------------------------------------------- many expressions at once

def _operand(text) -> ast.expr:
    """The tree evaluate(text, env) evaluates: a plain number passes through as itself."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return ast.Constant(text)
    return _vetted(text).body


@lru_cache(maxsize=512)
def _together_code(texts: tuple, every: bool):
    """One code object for ``texts``, each vetted and guarded as compile_expr does it; None where one
    does not vet (evaluate() raises that ExprError when the caller's loop gets to it).  ``every``: the
    tuple of ``not text`` for each; else 1 + the index of the first falsy one, or 0, evaluated in
    order and none after the first falsy one, as a loop of evaluate() calls goes.  (``texts`` equal
    as tuples may hold 1 where the other holds 1.0 or True: the same constant to ``not``.)"""
    try:
        negated = [ast.UnaryOp(ast.Not(), _operand(text)) for text in texts]
    except ExprError:
        return None
    if every:
        body = ast.Tuple(negated, ast.Load())
    else:
        # (not e0 and 1) or (not e1 and 2) or ... or 0: one flat BoolOp, no deeper than the deepest text.
        firsts = [ast.BoolOp(ast.And(), [test, ast.Constant(index + 1)]) for index, test in enumerate(negated)]
        body = ast.BoolOp(ast.Or(), [*firsts, ast.Constant(0)]) if firsts else ast.Constant(0)
    return compile(ast.fix_missing_locations(ast.Expression(body)), "<spec expressions>", "eval")


def _together(texts: tuple, env: dict, every: bool):
    try:
        code = _together_code(texts, every)
    except TypeError:   # a text no spec could hold (unhashable): evaluate() alone says what becomes of it
        return None
    if code is None:
        return None
    try:
        return eval(code, _EVAL_GLOBALS, env)  # noqa: S307 - every text vetted by _vetted
    except Exception:  # noqa: BLE001 - one text raised: the caller evaluates them one at a time
        return None


def first_false(texts: tuple, env: dict) -> int | None:
    """The index of the first of ``texts`` whose value on ``env`` is falsy (``len(texts)`` where none
    is), in one evaluation instead of one per text; None where one raised or does not vet: then only
    evaluate(), one text at a time, can say which and with what ExprError.

    It is ``not evaluate(text, env)`` text by text up to the first falsy one: the same vetted trees
    and guards, the same globals, ``env`` as the locals; and since no text can assign (_ALLOWED_NODES),
    what one evaluates cannot change what the next one sees, together or apart."""
    found = _together(texts, env, every=False)
    return None if found is None else found - 1 if found else len(texts)


def falsy(texts: tuple, env: dict) -> tuple[bool, ...] | None:
    """``not evaluate(text, env)`` for each of ``texts``, in one evaluation; None where one raised or
    does not vet (as first_false)."""
    return _together(texts, env, every=True)
