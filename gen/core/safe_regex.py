"""Regexes a spec may give (a deviation's `cases:`), vetted so that matching one cannot hang.

Python's `re` backtracks: a repetition over an alternation or over another repetition (`(.|.)*#`,
`(a+)+$`) takes time exponential in the length of the text, and k unbounded repetitions in a row
(`.*.*.*...#`) take time of the order of its length to the k-th power.  A case's SUITE/NAME is a short
text, so a pattern with no repetition nested in a repetition or an alternation, no backreference or
lookaround, and at most MAX_REPEATS repetitions in all matches it in bounded time: such a pattern is
accepted, any other is refused when the spec is read.  What deviations are for (a suite, a name
prefix, a few alternatives: `boundary/map_1x1-.*`, `random/(a|b)_.*`) needs no more.
"""
from __future__ import annotations

try:   # Python 3.11+: the parser `re` itself uses
    from re import _parser as _sre_parse
    from re import _constants as _sre
except ImportError:   # pragma: no cover - older Pythons
    import sre_constants as _sre
    import sre_parse as _sre_parse

# Repetitions allowed in one pattern: on texts of about 100 characters, three in a row cost at most
# about 100**3 steps.
MAX_REPEATS = 3
_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT} | ({_sre.POSSESSIVE_REPEAT} if hasattr(_sre, "POSSESSIVE_REPEAT") else set())
_REFUSED = {_sre.GROUPREF, _sre.GROUPREF_EXISTS, _sre.ASSERT, _sre.ASSERT_NOT}


def regex_problem(pattern: str) -> str:
    """Why matching ``pattern`` could take unbounded time, or '' when it cannot (and it compiles)."""
    try:
        parsed = _sre_parse.parse(pattern)
    except Exception as exc:  # noqa: BLE001 - re.error, or a parser limit: either way no usable regex
        return f"no regex ({exc})"
    repeats = 0
    stack = [(parsed, False)]   # (items, inside a repetition)
    while stack:
        items, repeated = stack.pop()
        for op, arg in items:
            if op in _REFUSED:
                return "backreferences and lookarounds are not allowed"
            if op in _REPEATS:
                low, high, body = arg
                if high != low:
                    repeats += 1
                if repeated:
                    return "a repetition inside a repetition can take exponential time to match"
                stack.append((body, True))
            elif op is _sre.BRANCH:
                if repeated:
                    return "an alternation inside a repetition can take exponential time to match (use a class, [ab]*)"
                stack.extend((branch, repeated) for branch in arg[1])
            elif op is _sre.SUBPATTERN:
                stack.append((arg[-1], repeated))
            elif op is _sre.ATOMIC_GROUP if hasattr(_sre, "ATOMIC_GROUP") else False:
                stack.append((arg, repeated))
    if repeats > MAX_REPEATS:
        return f"{repeats} repetitions, over the limit of {MAX_REPEATS} (each multiplies the time to match)"
    return ""
