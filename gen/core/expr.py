"""The small expression language of specs: shape relations, checks and constraints.

An expression is a Python expression restricted to arithmetic, comparisons, boolean
logic, subscripts, a few attributes of tensors (shape, dtype, layout, ndim, size) and a
few pure functions.  It is parsed once with ``ast`` and refused if it steps outside
that set, so a spec can never run arbitrary code.  ``**`` and ``*`` are evaluated through
guards: no power whose result would be astronomically large, no repetition of a str, list or
tuple, so no expression can exhaust memory or time either.  Every error an evaluation raises
becomes an ExprError.
"""
from __future__ import annotations

import ast
import math
from functools import lru_cache

FUNCTIONS = {
    "min": min, "max": max, "abs": abs, "len": len, "all": all, "any": any,
    "ceil": math.ceil, "floor": math.floor, "prod": math.prod, "int": int, "float": float,
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


# An integer power's result may have at most this many bits (shapes, sizes and counts need far fewer).
MAX_POWER_BITS = 4096


class ExprError(ValueError):
    pass


def _power(base, exponent):
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1 \
            and exponent * abs(base).bit_length() > MAX_POWER_BITS + exponent:
        raise ExprError(f"{base} ** {exponent} is too large (over {MAX_POWER_BITS} bits)")
    return base ** exponent


def _times(left, right):
    if isinstance(left, (str, bytes, list, tuple)) or isinstance(right, (str, bytes, list, tuple)):
        raise ExprError("repeating a str, list or tuple with * is not allowed")
    return left * right


# The guards are reached under names a spec cannot write (names starting with '_' are refused).
_GUARDS = {"_power": _power, "_times": _times}


class _Guarded(ast.NodeTransformer):
    """``a ** b`` -> ``_power(a, b)``, ``a * b`` -> ``_times(a, b)``."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        guard = {ast.Pow: "_power", ast.Mult: "_times"}.get(type(node.op))
        if guard is None:
            return node
        return ast.copy_location(ast.Call(ast.Name(guard, ast.Load()), [node.left, node.right], []), node)


@lru_cache(maxsize=None)
def compile_expr(text: str):
    """Parse and vet ``text``; return a code object.  Raises ExprError."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ExprError(f"expression {text!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise ExprError(f"expression {text!r}: name {node.id} is not allowed (names may not start with _)")
        if isinstance(node, ast.Attribute) and node.attr not in ATTRIBUTES:
            raise ExprError(f"expression {text!r}: attribute .{node.attr} is not allowed "
                            f"(only {', '.join(sorted(ATTRIBUTES))})")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ExprError(f"expression {text!r}: only these functions may be called: "
                            f"{', '.join(sorted(FUNCTIONS))}")
    guarded = ast.fix_missing_locations(_Guarded().visit(tree))
    return compile(guarded, "<spec expression>", "eval")


def names_in(text: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(str(text).strip(), mode="eval"))
            if isinstance(n, ast.Name) and n.id not in FUNCTIONS and n.id not in ("None", "True", "False")}


def evaluate(text, env: dict):
    """Evaluate a spec expression (or pass a plain number through)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    code = compile_expr(str(text))
    try:
        return eval(code, {"__builtins__": {}, **FUNCTIONS, **_GUARDS}, env)  # noqa: S307 - vetted by compile_expr
    except ExprError as exc:
        raise ExprError(f"expression {text!r}: {exc}") from None
    except NameError as exc:
        raise ExprError(f"expression {text!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever a spec's expression raises is the spec's error
        raise ExprError(f"expression {text!r}: {type(exc).__name__}: {exc}") from None
