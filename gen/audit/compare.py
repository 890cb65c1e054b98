"""A spec beside its sources (design docs, mlu-ops' code): the findings `opcase audit` reports.

Three kinds, each with both places: `contradicts` (a source and the spec say different things),
`lacks` (a source states a fact the spec has nothing for), `unsourced` (a spec check no source
states).  A spec accepts a reviewed difference with a waiver (gen/core/waivers.py) naming the
finding's id; every finding that is not waived fails the audit."""
from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass, field

from gen.core.spec import line_of

_CITE_ITEM = re.compile(r"(\d\.\d{1,2}(?:\.\d{1,2})?)\((\d{1,2})\)")
_CITE_LIMIT = re.compile(r"(1\.[34])[ ]*([^ ,;()0-9.]{2,12})")
_CODE_WORDS = ("mlu-ops", "mluops", "PARAM_CHECK", "TENSOR_NUM_CHECK", ".cpp", "gtest", "mlu_op.h", "ParamCheck")


@dataclass
class Finding:
    kind: str           # contradicts | lacks | unsourced
    id: str             # stable: what a waiver names
    message: str
    source: str         # file:line of the source's statement ("" for unsourced)
    spec: str           # file:line in the spec
    waived: str = ""    # the waiver's reason, when waived

    def as_dict(self) -> dict:
        return {"kind": self.kind, "id": self.id, "message": self.message, "source": self.source,
                "spec": self.spec, "waived": self.waived or None}


@dataclass
class Sources:
    docs: list = field(default_factory=list)     # (path, [Fact])
    code: list = field(default_factory=list)     # CodeFact, already for this op


# ---- the spec's own comparisons -------------------------------------------------------------

def _canon(lhs: str, op: str, rhs: str) -> str:
    if op in ("==", "!=") and rhs < lhs and not re.fullmatch(r"-?\d+", rhs):
        lhs, rhs = rhs, lhs
    if re.fullmatch(r"-?\d+", lhs) and not re.fullmatch(r"-?\d+", rhs):
        flip = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
        lhs, op, rhs = rhs, flip[op], lhs
    if op == "!=" and rhs == "0" and lhs.endswith(".size"):
        op = ">"
    if op == ">" and re.fullmatch(r"-?\d+", rhs) and not lhs.endswith(".size"):
        op, rhs = ">=", str(int(rhs) + 1)
    if op == "<" and re.fullmatch(r"-?\d+", rhs):
        op, rhs = "<=", str(int(rhs) - 1)
    return f"{lhs} {op} {rhs}"


def canon_atom(atom: str) -> str:
    m = re.fullmatch(r"(.+?) (==|!=|<=|>=|<|>|in) (.+)", atom)
    if not m:
        return atom
    if m.group(2) == "in":
        return atom
    return _canon(m.group(1), m.group(2), m.group(3))


def _shape_axes(node, ranks):
    """`x.shape` / `x.shape[a:b]` as (x, [axes]), else None."""
    if isinstance(node, ast.Attribute) and node.attr == "shape" and isinstance(node.value, ast.Name):
        rank = ranks.get(node.value.id)
        return (node.value.id, list(range(rank))) if rank else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        inner = node.value
        if isinstance(inner, ast.Attribute) and inner.attr == "shape" and isinstance(inner.value, ast.Name):
            lo = node.slice.lower.value if isinstance(node.slice.lower, ast.Constant) else 0
            hi = node.slice.upper.value if isinstance(node.slice.upper, ast.Constant) else ranks.get(inner.value.id)
            if isinstance(lo, int) and isinstance(hi, int) and 0 <= lo < hi <= 8:
                return inner.value.id, list(range(lo, hi))
    return None


def _required(node):
    """The nodes a require expression asks to hold: both sides of `and`, only the last operand of
    `a or b` (the others are guards, `scale_factor < 1 or (...)`, not requirements)."""
    if isinstance(node, ast.BoolOp):
        for value in (node.values if isinstance(node.op, ast.And) else node.values[-1:]):
            yield from _required(value)
    elif isinstance(node, ast.Compare):
        yield node
    else:
        for child in ast.iter_child_nodes(node):
            yield from _required(child)


def spec_atoms(require: str, ranks=None, required_only: bool = False) -> set:
    """Every comparison inside a check's `require` (guards too), canonical; `a == b == c` pairwise."""
    try:
        tree = ast.parse(require, mode="eval")
    except SyntaxError:
        return set()
    out = set()
    for node in (_required(tree.body) if required_only else ast.walk(tree)):
        if not isinstance(node, ast.Compare):
            continue
        terms = [node.left] + node.comparators
        for (a, op, b) in zip(terms, node.ops, terms[1:]):
            sym = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
                   ast.In: "in"}.get(type(op))
            if sym == "in" and isinstance(b, (ast.Tuple, ast.List)):
                vals = sorted(ast.unparse(e) for e in b.elts)
                out.add(f"{ast.unparse(a)} in ({', '.join(vals)})")
            elif sym == "==" and _shape_axes(a, ranks or {}) and _shape_axes(b, ranks or {}):
                (x, xs), (y, ys) = _shape_axes(a, ranks or {}), _shape_axes(b, ranks or {})
                out.update(_canon(f"{x}.shape[{i}]", "==", f"{y}.shape[{j}]") for i, j in zip(xs, ys))
                if isinstance(a, ast.Attribute) and isinstance(b, ast.Attribute):
                    out.add(_canon(f"{x}.ndim", "==", f"{y}.ndim"))
            elif sym and sym != "in":
                out.add(_canon(ast.unparse(a), sym, ast.unparse(b)))
        if len(terms) > 2 and all(isinstance(o, ast.Eq) for o in node.ops):
            for x in terms:
                for y in terms:
                    if x is not y:
                        out.add(_canon(ast.unparse(x), "==", ast.unparse(y)))
    return {a.replace('"', "'") for a in out}


def _classes(atoms) -> dict:
    """Terms the spec's checks require equal, transitively: term -> class representative."""
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a in atoms:
        lhs, rhs = a.split(" == ", 1)
        parent[find(lhs)] = find(rhs)
    return {x: find(x) for x in list(parent)}


def _implied(a: str, equal: dict, atoms: set) -> bool:
    """An equality the spec's equalities imply; `x.shape[k] != 0` implied by `x.size > 0`."""
    if " == " in a:
        lhs, rhs = a.split(" == ", 1)
        return lhs in equal and rhs in equal and equal[lhs] == equal[rhs]
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\.shape\[\d\] != 0", a)
    return bool(m) and f"{m.group(1)}.size > 0" in atoms


def _with_range_bounds(atoms: set) -> set:
    """`x in (1, 2, 4)` bounds x as `x >= 1` and `x <= 4` do."""
    out = set(atoms)
    for a in atoms:
        m = re.fullmatch(r"(.+) in \(([-0-9, ]{1,400})\)", a)
        values = [int(v) for v in m.group(2).split(",") if v.strip().lstrip("-").isdigit()] if m else []
        if values:
            out.update({f"{m.group(1)} >= {min(values)}", f"{m.group(1)} <= {max(values)}"})
    return out


def _doc_dims(facts, spec) -> dict:
    """A doc's dim names (`orientations`) as the spec's axes (`input.shape[2]`): where the doc's shape
    of a spec tensor, of the spec's rank, first names the dim."""
    tensors = {**spec.inputs, **spec.outputs}
    out = {}
    for f in facts:
        name = f.key.split(" ")[1] if f.kind == "shape" else ""
        if name in tensors and len(f.value) == len(tensors[name].shape):
            for k, dim in enumerate(f.value):
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", dim):
                    out.setdefault(dim, f"{name}.shape[{k}]")
    return out


def _numbers_stated(atoms: set, cited: list, shapes: list) -> bool:
    """A citation sources a check only where the cited text states the check's numbers: a bound of
    1024 citing an item that says nothing of 1024 is the spec's own.  Bounds of -1..1 (non-negative,
    positive, non-empty) are what docs write in words, and are not asked for; nor are ranks, nor an
    axis's size that the doc's shape of that tensor gives (`[N, 4]`)."""
    written = {int(n) for f in cited for n in re.findall(r"(?<![0-9.])-?\d{1,12}(?![0-9])", f.text)}
    for a in atoms:
        m = re.fullmatch(r"(.+) (?:<=|>=|==|!=) (-?\d{1,12})", a)
        if not m or abs(int(m.group(2))) <= 1 or {int(m.group(2)) + d for d in (-1, 0, 1)} & written:
            continue
        term, v = m.group(1), m.group(2)
        axis = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\.shape\[(\d)\]", term)
        if term.endswith(".ndim"):
            continue   # a rank is the interface's: the doc's shapes judge it (`contradicts rank`)
        if axis and any(f.key.split(" ")[1] == axis.group(1) and int(axis.group(2)) < len(f.value) and
                        f.value[int(axis.group(2))] == v for f in shapes):
            continue
        return False
    return True


def _row_cites(doc: str) -> list:
    """A check's `1.1 ROW` citations, without spaces (`1.1 0 元素检查是否直接返回` cites `0元素检查...`)."""
    return [w.replace(" ", "") for w in re.findall(r"1\.1 ([^,;()]{2,40})", doc)]


def _row_cited(row: str, cite: str) -> bool:
    return len(cite) >= 2 and (row.startswith(cite) or cite.startswith(row))


def _side(op: str) -> str:
    return "upper" if op in ("<=", "<") else "lower" if op in (">=", ">") else op


def _spec_names(spec) -> set:
    names = set(spec.params)
    for t in list(spec.inputs) + list(spec.outputs):
        names.add(t)
    return names


def _resolves(atom: str, spec) -> bool:
    names = _spec_names(spec)
    atom = re.sub(r"'[^']*'", "", atom)
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[a-z]+)?", atom):
        base = word.split(".")[0]
        if base in ("ndim", "shape", "dtype", "size", "in", "and", "or"):
            continue
        if base not in names:
            return False
    return True


def _doc_name(name: str) -> str:
    """A doc's `x.dim(2)` / `x.dims[2]` / `x.shape[2]` as the spec writes it (`x_desc.dim`: x's)."""
    name = re.sub(r"^([A-Za-z_][A-Za-z0-9_]*?)_desc(?=\.)", r"\1", name)
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\.(?:dim|dims|shape)[\[(](\d)[\])]", name)
    if m:
        return f"{m.group(1)}.shape[{m.group(2)}]"
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\.dim(\d)", name)   # `input.dim3`, as some docs write axes
    if m:
        return f"{m.group(1)}.shape[{m.group(2)}]"
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\.(?:dim|ndim|dims)", name)
    return f"{m.group(1)}.ndim" if m else name


def _same_api(api: str, op: str) -> bool:
    words = op.split("_")
    camel = "".join(words)
    bare = "".join(w for w in words if w not in ("forward",))
    return api in (camel, bare) or (api.endswith("forward") is False and api.endswith("backward") is False
                                     and "forward" not in api and "backward" not in api)


# ---- the audit ------------------------------------------------------------------------------

class _Audit:
    def __init__(self, spec, sources: Sources):
        self.spec, self.sources = spec, sources
        self.findings: list[Finding] = []
        self.path = str(spec.path)
        ranks = {n: len(t.shape) for n, t in {**spec.inputs, **spec.outputs}.items()}
        self.atoms = {c.id: _with_range_bounds(spec_atoms(c.require, ranks)) for c in spec.checks}
        # a rival bound must be a requirement, not a guard (`scale_factor < 1 or (...)`)
        self.required = {c.id: _with_range_bounds(spec_atoms(c.require, ranks, required_only=True))
                         for c in spec.checks}
        self.dims: dict = {}     # the doc being compared: its dim names as spec axes
        self.all_atoms = set().union(*self.atoms.values()) if self.atoms else set()
        self.equal = _classes(a for a in self.all_atoms if " == " in a)
        self.sourced: set = set()

    def at(self, line) -> str:
        return f"{self.path}:{line}"

    def add(self, kind, fid, message, source, spec_line):
        if not any(f.id == fid for f in self.findings):
            self.findings.append(Finding(kind, fid, message, source, self.at(spec_line)))

    def tensor_line(self, name):
        t = self.spec.inputs.get(name) or self.spec.outputs.get(name)
        return t.line if t and t.line else line_of(self.spec.raw, "inputs")

    # interface
    def interface(self, path, facts):
        spec = self.spec
        tensors = {**spec.inputs, **spec.outputs}
        ranks: dict = {}
        for f in facts:
            if f.kind == "shape" and not (f.api and not _same_api(f.api, spec.op)):
                ranks.setdefault(f.key.split(" ")[1], set()).add(len(f.value))
        for f in facts:
            where = f"{path}:{f.line}"
            parts = f.key.split(" ")
            if f.api and not _same_api(f.api, spec.op):
                continue   # a table of another API of the doc (the backward's, in a forward doc)
            if f.kind == "tensor" and parts[1] not in tensors:
                self.add("lacks", f"lacks tensor {parts[1]}", f"the doc names tensor '{parts[1]}', the spec has "
                         f"no such input or output", where, line_of(spec.raw, "inputs"))
            elif f.kind == "dtype" and parts[1] in tensors:
                t = tensors[parts[1]]
                have = sorted(spec.dtypes) if t.dtype == "T" else [t.dtype]
                if sorted(f.value) != have:
                    self.add("contradicts", f"contradicts dtype {parts[1]}", f"'{parts[1]}' is {','.join(f.value)} in "
                             f"the doc, {','.join(have)} in the spec", where, self.tensor_line(parts[1]))
            elif f.kind == "layout" and parts[1] in tensors and tensors[parts[1]].layout != f.value:
                self.add("contradicts", f"contradicts layout {parts[1]}", f"'{parts[1]}' is {f.value} in the doc, "
                         f"{tensors[parts[1]].layout} in the spec", where, self.tensor_line(parts[1]))
            elif f.kind == "shape" and parts[1] in tensors and len(tensors[parts[1]].shape) not in ranks.get(parts[1], ()):
                # several shapes of one tensor (`[N, M] or [N]`) are alternatives: one rank must agree
                self.add("contradicts", f"contradicts rank {parts[1]}", f"'{parts[1]}' has {len(f.value)} axes in "
                         f"the doc ({','.join(f.value)}), {len(tensors[parts[1]].shape)} in the spec", where,
                         self.tensor_line(parts[1]))
            elif f.kind == "param" and parts[1] not in spec.params:
                self.add("lacks", f"lacks param {parts[1]}", f"the doc names param '{parts[1]}', the spec has "
                         f"none", where, line_of(spec.raw, "params") if "params" in spec.raw else 1)

    # bounds: a limit a source states on a spec name
    def bound(self, name, op, number, where, status=None, alternatives=(), lacks=True):
        """alternatives: (op, number) the same fact bounds name by otherwise, on the same side (per
        dtype or board, or `> 0` beside an interval from 0): a spec check on any of them states the
        source's bound."""
        name = _doc_name(name)
        if not _resolves(name, self.spec) and name in self.dims:
            name = self.dims[name]
        if not _resolves(name, self.spec) or isinstance(number, float) or name in self.spec.inputs or \
                name in self.spec.outputs:
            return   # a tensor itself compared to a number (`input 的元素个数 <= N`) is no spec term
        stated = canon_atom(f"{name} {op} {number}")
        sname, sop, snum = stated.split(" ")
        if re.search(r"\.(?:shape\[\d\]|ndim|size)$", sname) and sop == ">=" and int(snum) <= 0:
            return   # every dim is at least 0: `C的范围需在[0, 13615]` bounds C from above only
        others = [canon_atom(f"{name} {o} {n}") for o, n in alternatives if not isinstance(n, float)]
        if any(a in self.all_atoms for a in others):
            stated = next(a for a in others if a in self.all_atoms)
        if stated not in self.all_atoms and _implied(stated, self.equal, self.all_atoms):
            return
        family = "upper" if sop in ("<=", "<") else "lower" if sop in (">=", ">") else sop
        same, rival = None, None
        # a bound on a term the spec requires equal to sname bounds sname too
        peers = {t for t, rep in self.equal.items() if rep == self.equal.get(sname)} | {sname}
        for c in self.spec.checks:
            for a in self.atoms[c.id]:
                n, o, v = (a.split(" ") + ["", ""])[:3]
                if a != stated and a not in self.required[c.id]:
                    continue
                fam = "upper" if o in ("<=", "<") else "lower" if o in (">=", ">") else o
                if n in peers and n != sname and fam == family and f"{sname} {o} {v}" == stated:
                    same = same or c
                elif n == sname and fam == family:
                    if a == stated:
                        same = c
                    elif re.fullmatch(r"-?\d+(?:\.\d+)?", v) and rival is None:   # `margin <= 0.5` rivals `<= 1`
                        rival = (c, a)
        if same is not None:
            self.sourced.add(same.id)
            if status and same.status != status:
                self.add("contradicts", f"contradicts status {same.id}", f"'{stated}' fails with {status} in "
                         f"the source, {same.status} in check '{same.id}'", where, same.line)
        elif rival is not None:
            self.sourced.add(rival[0].id)
            self.add("contradicts", f"contradicts bound {stated}", f"the source states '{stated}', check "
                     f"'{rival[0].id}' requires '{rival[1]}'", where, rival[0].line)
        elif sop == "==" and any(re.fullmatch(re.escape(sname) + r" in \((?:.*, )?" + snum + r"(?:, .*)?\)", a)
                                 for a in self.all_atoms):
            pass   # `boxes.shape[1] == 5` of `[N, 5] or [N, 6]`: the spec's `in (5, 6)` allows it
        elif lacks:
            self.add("lacks", f"lacks bound {stated}", f"the source states '{stated}', no check of the spec "
                     f"bounds {sname} so", where, line_of(self.spec.raw, "checks"))

    def doc_checks(self, path, facts, bounds_from=None, governs=True):
        cited_items, cited_limits = set(), set()
        for c in self.spec.checks:
            for sec, n in _CITE_ITEM.findall(c.doc):
                cited_items.add(f"{sec}({n})")
            for sec, kind in _CITE_LIMIT.findall(c.doc):
                cited_limits.add(f"{sec} {kind}")
        items = {f.key.split(" ", 1)[1]: f for f in facts if f.kind in ("check", "template")}
        limits = {f.key.split(" ", 1)[1]: f for f in facts if f.kind == "limit"}
        self.dims = _doc_dims(bounds_from if bounds_from is not None else facts, self.spec)
        tensors = {**self.spec.inputs, **self.spec.outputs}
        for f in bounds_from if bounds_from is not None else facts:
            # a shape's literal dim (`boxes: [B, T, 7]`) is a bound on that axis, where the ranks agree
            name = f.key.split(" ")[1] if f.kind == "shape" else ""
            if name in tensors and len(f.value) == len(tensors[name].shape):
                # an alternative shape of that rank with a named dim there (`[length] / [1]`) makes the
                # literal one of the choices, not a requirement
                alternatives = [g.value for g in facts if g.kind == "shape" and g.key.split(" ")[1] == name
                                and len(g.value) == len(f.value)]
                for k, dim in enumerate(f.value):
                    if dim.isdigit():   # the spec's own shape stating it is no lack (a check may still differ)
                        free = any(not v[k].isdigit() for v in alternatives)
                        self.bound(f"{name}.shape[{k}]", "==", int(dim), f"{path}:{f.line}",
                                   lacks=str(tensors[name].shape[k]) != dim and not free)
            done = set()
            for name, op, number in f.bounds if f.kind in ("check", "limit") else ():
                side = _side(op)
                if (name, side) in done:
                    continue   # an alternative of the first (see below)
                done.add((name, side))
                others = [(o2, n) for n2, o2, n in f.bounds if n2 == name and _side(o2) == side and (o2, n) != (op, number)]
                self.bound(name, op, number, f"{path}:{f.line}", alternatives=others)
        self.dims = {}
        for f in facts:
            where = f"{path}:{f.line}"
            # workspace checks are below what a spec describes (the harness passes no workspace)
            if f.kind == "check" and f.key.split(" ", 1)[1] not in cited_items and "workspace" not in f.text:
                self.add("lacks", f"lacks {f.key}", f"doc {f.key.split(' ', 1)[1]} is cited by no check of the "
                         f"spec: {f.text[:80]}", where, line_of(self.spec.raw, "checks"))
        for c in self.spec.checks:
            refs = [f"{s}({n})" for s, n in _CITE_ITEM.findall(c.doc)]
            lrefs = [f"{s} {k}" for s, k in _CITE_LIMIT.findall(c.doc)]
            named = {f.key.split(" ")[1] for f in facts if f.kind in ("tensor", "param")}
            row_refs = re.findall(r"1\.3 ([A-Za-z_][A-Za-z0-9_]*)", c.doc)
            cited = [items[r] for r in refs if r in items] + \
                [f for f in facts if f.kind == "limit" and any(f.key.split(" ", 1)[1].startswith(r) for r in lrefs)] + \
                [f for f in facts if f.kind == "limit" and f.key.split(" ", 2)[2:] and
                 f.key.split(" ", 2)[2] in row_refs] + \
                [f for w in _row_cites(c.doc) for f in facts if f.kind == "row" and _row_cited(f.key.split(" ", 2)[2], w)]
            if (cited or any(n in named for n in row_refs)) and _numbers_stated(self.required[c.id], cited, [f for f in facts if f.kind == "shape"]):
                self.sourced.add(c.id)
            for r in refs if governs else ():
                if r not in items and r.startswith("3."):
                    self.add("unsourced", f"dangling {c.id} {r}", f"check '{c.id}' cites {r}, which {path} does "
                             f"not have", f"{path}:1", c.line)

    def code_checks(self):
        for f in self.sources.code:
            for name, op, number in f.bounds:
                self.bound(name, op, number, f.where(), f.status if f.kind == "check" else None)
            for atom in f.atoms:
                a = canon_atom(atom)
                if re.search(r" -?\d+$", a) and not a.endswith(".size > 0"):
                    continue   # a bound: compared above
                if not _resolves(a, self.spec):
                    continue
                lhs_rhs = a.split(" == ", 1)
                if len(lhs_rhs) == 2 and lhs_rhs[0] == lhs_rhs[1]:
                    continue   # a tautology in the source: it checks nothing
                hit = [c for c in self.spec.checks if a in self.atoms[c.id]]
                if hit:
                    self.sourced.update(c.id for c in hit)
                elif not _implied(a, self.equal, self.all_atoms):
                    self.add("lacks", f"lacks code {a}", f"mlu-ops checks '{a}' ({f.function}), no check of the "
                             f"spec requires it", f.where(), line_of(self.spec.raw, "checks"))
        words = {f.function for f in self.sources.code} | {"TENSOR_NUM_CHECK", "PARAM_CHECK"}
        for c in self.spec.checks:
            if self.sources.code and any(w and w in c.doc for w in words):
                self.sourced.add(c.id)

    def unsourced(self):
        have_code = bool(self.sources.code)
        for c in self.spec.checks:
            if c.id in self.sourced or (c.require.strip() == "True" and c.untestable):
                continue   # sourced, or untestable: a check that makes no case cannot fail an implementation
            if not have_code and any(w in c.doc for w in _CODE_WORDS):
                continue   # cites code the audit was not given
            self.add("unsourced", f"unsourced {c.id}", f"no source states check '{c.id}' ({c.require[:60]}); it "
                     f"cites '{c.doc[:60]}'", "", c.line)

    def accuracy(self, path, facts):
        rules = [f for f in facts if f.kind == "accuracy"]
        if not rules:
            return
        crit = self.spec.criteria
        metrics = crit.metrics if crit.mode == "dynamic" else list(crit.static)
        short = [m[:5] for m in metrics]

        def key(r):
            return r["mode"], tuple(sorted(m[:5] for m in r["metrics"]))

        def exact(r):
            return bool(r["thresholds"] if r["mode"] == "static" else r["rates"])
        # a sentence naming the metrics is no rule of its own where another gives their thresholds
        specific = {key(f.value) for f in rules if exact(f.value)}
        # one metric and its threshold a line (`DIFF1<=0.003`, then `DIFF2<=0.003`): one rule together
        single = [f for f in rules if f.value["mode"] == "static" and len(f.value["metrics"]) == 1
                  and f.value["thresholds"]]
        if len(single) > 1 and len({f.value["metrics"][0] for f in single}) == len(single):
            joined = {"mode": "static", "metrics": [f.value["metrics"][0] for f in single], "rates": [],
                      "thresholds": {k: v for f in single for k, v in f.value["thresholds"].items()}}
            rules = rules + [dataclasses.replace(single[0], value=joined)]
        for f in rules:
            r = f.value
            dm = [m[:5] for m in r["metrics"]]
            if r["mode"] != crit.mode or sorted(dm) != sorted(short) or (not exact(r) and key(r) in specific):
                continue
            if crit.mode == "dynamic" and r["rates"] and [float(x) for x in crit.rates] != r["rates"]:
                continue
            if crit.mode == "static" and r["thresholds"] and any(
                    not isinstance(crit.static.get(m), (int, float)) or float(crit.static[m]) != v
                    for m0, v in r["thresholds"].items() for m in metrics if m[:5] == m0[:5]):
                continue
            return
        first = rules[0]
        r = first.value
        self.add("contradicts", "contradicts accuracy", f"the doc's rule is {r['mode']} {','.join(r['metrics'])}"
                 f"{' ' + str(r['rates']) if r['rates'] else ''}; the spec's {crit.mode} {','.join(metrics)}"
                 f"{' ' + str(crit.rates) if crit.mode == 'dynamic' else ''} matches none of the doc's "
                 f"{len(rules)} rule(s)", f"{path}:{first.line}", line_of(self.spec.raw, "criteria"))


def audit(spec, sources: Sources, waivers: dict, own_doc: str = "") -> list:
    """The findings, each marked waived where the spec waives its id (waivers: id -> reason).
    Where the kernel has its own doc (own_doc) beside a family doc, the own doc alone says which
    防呆 items and which accuracy rule apply; the family doc's interface and bounds still count."""
    a = _Audit(spec, sources)
    for path, facts in sources.docs:
        a.interface(path, facts)
        governs = not own_doc or path == own_doc
        a.doc_checks(path, facts if governs else [f for f in facts if f.kind not in ("check", "template")],
                     bounds_from=facts, governs=governs)
        if governs:
            a.accuracy(path, facts)
    a.code_checks()
    a.unsourced()
    for f in a.findings:
        if f.id in waivers:
            f.waived = waivers[f.id]
    return a.findings
