"""The reader of mlu-ops' C++ parameter checks: a second source of checks and limits.

From a kernels/<op>/*.cpp file: every PARAM_CHECK* macro (its condition is what must hold), every
TENSOR_NUM_CHECK (an element-count limit, NOT_SUPPORTED), and every `if (cond) { ... return
MLUOP_STATUS_X; }` whose condition is what must not hold.  From mlu_op.h: the "@par Scale
Limitation" bullets of each API's comment, with the API the comment documents.  Each is a
CodeFact with its file and line and, where the condition is a plain comparison of a descriptor's
rank or dim, a param or a dtype, that comparison rewritten over spec names (`unknown.ndim == 3`,
`kernel_size <= 45`, `known.shape[0] == unknown.shape[0]`).  The file is untrusted: capped in size,
scanned by hand (no regex over a whole body)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gen.audit.docread import bounds_of
from gen.audit.doctext import read_bounded

MAX_CODE_BYTES = 4 * 1024 * 1024
MAX_CONDITION_CHARS = 2000


@dataclass(frozen=True)
class CodeFact:
    kind: str          # check | limit | scale
    function: str      # the enclosing function (cpp) or the documented API (mlu_op.h)
    condition: str     # what must hold, as written (negated for an `if ... return` check)
    status: str        # bad_param | not_supported | success
    path: str
    line: int
    atoms: tuple = ()  # the condition as spec-level comparisons (strings), where it reads as such
    bounds: tuple = ()

    def where(self) -> str:
        return f"{self.path}:{self.line}"


_MACRO = re.compile(r"\b(PARAM_CHECK(?:_V2|_EQ|_NE|_LE|_LT|_GE|_GT)?|TENSOR_NUM_CHECK)[ \t\n]*\(")
_FUNC = re.compile(r"\b(?:mluOpStatus_t|static[ \t]+mluOpStatus_t)[ \t\n]+(?:MLUOP_WIN_API[ \t\n]+)?([A-Za-z_][A-Za-z0-9_]*)[ \t\n]*\(")
_IF = re.compile(r"\bif[ \t\n]*\(")
_RETURN = re.compile(r"return[ \t\n]+(MLUOP_STATUS_[A-Z_]+)")
_MACRO_OPS = {"PARAM_CHECK_EQ": "==", "PARAM_CHECK_NE": "!=", "PARAM_CHECK_LE": "<=", "PARAM_CHECK_LT": "<",
              "PARAM_CHECK_GE": ">=", "PARAM_CHECK_GT": ">"}
_NEGATE = {"==": "!=", "!=": "==", "<=": ">", ">": "<=", "<": ">=", ">=": "<"}
_DTYPES = {"MLUOP_DTYPE_HALF": "'float16'", "MLUOP_DTYPE_FLOAT": "'float32'", "MLUOP_DTYPE_INT32": "'int32'",
           "MLUOP_DTYPE_DOUBLE": "'float64'", "MLUOP_DTYPE_INT64": "'int64'", "MLUOP_DTYPE_BOOL": "'bool'"}


def _read(path) -> str:
    data = read_bounded(Path(path), MAX_CODE_BYTES, "code file")
    return data.decode("utf-8", errors="replace")


def _strip_comments(text: str) -> str:
    """Comments and string literals blanked (newlines kept, so offsets keep their lines)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append('"' + " " * (min(j, n) - i - 1) + ('"' if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _balanced(text: str, start: int) -> tuple[str, int]:
    """The text inside the parenthesis opened just before `start`, and the index past its close."""
    depth, i = 1, start
    limit = min(len(text), start + MAX_CONDITION_CHARS)
    while i < limit:
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start:i], i + 1
        i += 1
    return "", start


def _split_args(args: str) -> list:
    parts, depth, cur = [], 0, []
    for ch in args:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def _squash(s: str) -> str:
    return " ".join(s.split())


def _unwrap(s: str) -> str:
    """s without the parentheses that wrap all of it, if any."""
    s = s.strip()
    while s.startswith("(") and s.endswith(")"):
        inner, end = _balanced(s, 1)
        if end != len(s):
            break
        s = inner.strip()
    return s


def spec_term(term: str) -> str | None:
    """A C++ operand as a spec name, or None: `x_desc->getDim()` -> `x.ndim`, `x_desc->getDimIndex(1)`
    / `x_desc->dims[1]` -> `x.shape[1]`, `desc->kernel_size` -> `kernel_size`, dtypes, numbers."""
    t = _unwrap(term)
    if re.fullmatch(r"-?\d{1,12}", t):
        return t
    if t in _DTYPES:
        return _DTYPES[t]
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)_desc->(?:getDim\(\)|dim)", t)
    if m:
        return f"{m.group(1)}.ndim"
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)_desc->(?:getDimIndex\((\d)\)|dims\[(\d)\])", t)
    if m:
        return f"{m.group(1)}.shape[{m.group(2) or m.group(3)}]"
    m = re.fullmatch(r"MLUOP_LAYOUT_([A-Z]+)", t)
    if m:
        return f"'{m.group(1)}'"
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)_desc->(?:getLayout\(\)|layout)", t)
    if m:
        return f"{m.group(1)}.layout"
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)_desc->(?:getDtype\(\)|dtype)", t)
    if m:
        return f"{m.group(1)}.dtype"
    m = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*_desc->([a-z_][a-z0-9_]*)", t)
    if m and m.group(1) not in ("dims", "strides", "layout", "dtype", "dim"):
        return m.group(1)
    m = re.fullmatch(r"([a-z_][a-z0-9_]*)_element_num", t)
    if m:
        return f"{m.group(1)}.size"
    if re.fullmatch(r"[a-z_][a-z0-9_]*", t) and not t.endswith("_desc") and t not in ("handle", "null"):
        return t
    return None


def atoms_of(condition: str, negate: bool = False) -> tuple:
    """`a && b` of plain comparisons as spec-level atoms; an `||` of them when negated (De Morgan)."""
    cond = _squash(condition)
    if not negate and "||" in cond and "&&" not in cond:
        return _membership(cond)
    joiner = "||" if negate else "&&"
    if ("&&" if negate else "||") in cond:
        return ()
    out = []
    for part in cond.split(joiner):
        m = re.fullmatch(r"(.+?)[ ]*(==|!=|<=|>=|<|(?<!-)>)[ ]*(.+)", _unwrap(part))
        if not m:
            return ()
        lhs, op, rhs = spec_term(m.group(1)), m.group(2), spec_term(m.group(3))
        if lhs is None or rhs is None:
            return ()
        out.append(f"{lhs} {_NEGATE[op] if negate else op} {rhs}")
    return tuple(out)


def _membership(cond: str) -> tuple:
    """`(x == A) || (x == B)` as `x in ('A', 'B')` (how the specs write a dtype list)."""
    lhs, values = None, []
    for part in cond.split("||"):
        m = re.fullmatch(r"(.+?)[ ]*==[ ]*(.+)", _unwrap(part))
        if not m:
            return ()
        a, b = spec_term(m.group(1)), spec_term(m.group(2))
        if a is None or b is None or (lhs is not None and a != lhs):
            return ()
        lhs = a
        values.append(b)
    return (f"{lhs} in ({', '.join(sorted(values))})",) if lhs else ()


def _functions(text: str) -> list:
    return [(m.start(), m.group(1)) for m in _FUNC.finditer(text)]


def _enclosing(funcs, pos) -> str:
    name = ""
    for start, fname in funcs:
        if start > pos:
            break
        name = fname
    return name


def read_cpp(path) -> list:
    raw = _read(path)
    text = _strip_comments(raw)
    funcs = _functions(text)
    facts = []
    for m in _MACRO.finditer(text):
        args, _ = _balanced(text, m.end())
        if not args:
            continue
        parts = _split_args(args)
        macro, line = m.group(1), text.count("\n", 0, m.start()) + 1
        if macro == "TENSOR_NUM_CHECK" and len(parts) >= 3:
            cond, status = f"{_squash(parts[1])} <= {_squash(parts[2])}", "not_supported"
            atoms = ()
        elif macro in _MACRO_OPS and len(parts) >= 3:
            cond, status = f"{_squash(parts[1])} {_MACRO_OPS[macro]} {_squash(parts[2])}", "bad_param"
            atoms = atoms_of(cond)
        elif len(parts) >= 2:
            cond, status = _squash(parts[1]), "bad_param"
            atoms = atoms_of(cond)
        else:
            continue
        facts.append(CodeFact("check", _enclosing(funcs, m.start()), cond, status, str(path), line, atoms,
                              bounds_of(" && ".join(atoms))))
    for m in _IF.finditer(text):
        cond, end = _balanced(text, m.end())
        if not cond:
            continue
        window = text[end:end + 800]
        close = window.find("}")
        r = _RETURN.search(window[:close if close >= 0 else 800])
        if not r or r.group(1) == "MLUOP_STATUS_SUCCESS" or "return_directly" in cond:
            continue
        status = "not_supported" if r.group(1) == "MLUOP_STATUS_NOT_SUPPORTED" else "bad_param"
        atoms = atoms_of(cond, negate=True)
        line = text.count("\n", 0, m.start()) + 1
        facts.append(CodeFact("check", _enclosing(funcs, m.start()), f"!({_squash(cond)})", status, str(path),
                              line, atoms, bounds_of(" && ".join(atoms))))
    return facts


_API = re.compile(r"mluOpStatus_t[ \t\n]+(?:MLUOP_WIN_API[ \t\n]+)?(mluOp[A-Za-z0-9_]*)[ \t\n]*\(")


def read_header(path) -> list:
    """mlu_op.h: each API comment's "@par Scale Limitation" bullets, with the API it documents."""
    raw = _read(path)
    facts, pending = [], []
    lines = raw.splitlines()
    in_scale, previous = False, ""
    for i, line in enumerate(lines, 1):
        s = line.strip().lstrip("/").lstrip("*").strip()
        if "@par" in s:
            in_scale = "Scale Limitation" in s
            continue
        if in_scale and s.startswith("-"):
            pending.append((i, s[1:].strip()))
        elif in_scale and s and pending and not line.strip().startswith("*/"):
            pending[-1] = (pending[-1][0], pending[-1][1] + " " + s)
        if line.strip().startswith("*/"):
            in_scale = False
        m = _API.search(previous + " " + line) if not line.lstrip().startswith("*") else None
        previous = line
        if m and pending:
            for j, bullet in pending:
                text = bullet.replace("\\b ", "").replace("\\p ", "")
                facts.append(CodeFact("scale", m.group(1), text, "bad_param", str(path), j, (), bounds_of(text)))
            pending = []
    return facts


def read_code(path) -> list:
    return read_header(path) if str(path).endswith(".h") else read_cpp(path)


def for_op(facts: list, op: str) -> list:
    """The code facts that concern one kernel: mlu_op.h's for the op's API (mluOp<Op>), a cpp file's
    from the functions whose names hold the op's words (threeNNParamCheck, CarafeBackwardParamCheck)."""
    words = [w for w in op.split("_") if w]
    camel = "".join(w.capitalize() for w in words).lower()
    out = []
    for f in facts:
        fname = f.function.lower()
        if f.kind == "scale":
            if fname == "mluop" + camel:
                out.append(f)
        elif camel in fname or camel.replace("forward", "") + "paramcheck" == fname or \
                fname.startswith("mluop" + camel):
            out.append(f)
    return out
