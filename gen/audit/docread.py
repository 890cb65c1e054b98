"""The reader of mlu-ops design docs: the facts a doc states, each with its section and line.

mlu-ops' design docs share a skeleton (1.1 需求分析 table, 1.3 parameter table, 1.4 限制 table,
1.5.1 accuracy, 3.x 测试用例, 3.x 防呆); what varies is the prose inside the cells.  The reader
takes the skeleton's tables and numbered lists and the few forms facts take inside them
(`name <= 45`, `name: [N, H, W, C]`, `diff1、diff2`, `[10, 10, 1]`); every line of those sections
that gives no fact and is not the skeleton's own text is reported as an `unread` fact, so that a
person sees what the reader left."""
from __future__ import annotations

import re
from dataclasses import dataclass

from gen.audit import docforms, prose
from gen.audit.doctext import DocText, Section, read_doc

# ---- the fact -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    kind: str       # tensor dtype layout shape param limit check accuracy network template unread
    key: str        # what the fact is about, e.g. "dtype input float16,float32", "check 3.8(5)"
    value: object
    section: str
    line: int
    text: str = ""
    bounds: tuple = ()   # (name, op, number) comparisons the text states
    api: str = ""        # the API a 1.3 table is for (its subsection's title, or the doc's), lower case

    def where(self, path: str) -> str:
        return f"{path}:{self.line}"


INTERFACE_KINDS = ("tensor", "dtype", "layout", "shape", "param")
CHECK_KINDS = ("limit", "check")

# ---- small lexers (linear: no nested repetition) ---------------------------------------------

_DTYPE_WORDS = {"half": "float16", "fp16": "float16", "float16": "float16", "float": "float32",
                "fp32": "float32", "float32": "float32", "double": "float64", "float64": "float64",
                "int": "int32", "int32": "int32", "int32_t": "int32", "int64": "int64", "int64_t": "int64",
                "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool", "complex_float": "complex64",
                "bfloat16": "bfloat16", "bf16": "bfloat16"}
_DTYPE_ORDER = ["float16", "float32", "float64", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool",
                "complex64"]
_LAYOUTS = {"ARRAY", "NCHW", "NHWC", "NDHWC", "NCDHW", "HWCN", "NLC", "NC", "NCL", "TNC", "NTC"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CMP = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*(?:\[\d{1,2}\]|\(\d{1,2}\))?)[ \t]*(<=|>=|==|!=|<|>)[ \t]*(-?\d{1,12}(?:\.\d{1,12})?)")
_SHAPE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)`?[ \t]*(?::|shape是|shape为|的shape为|的形状为)?[ \t]*(?:dim|dims)?`?\[([^\[\]]{1,200})\]")
_INT_LIST = re.compile(r"\[([0-9 ,]{1,200})\]")
_METRIC = re.compile(r"diff(\d)(?:_(\d))?", re.IGNORECASE)
_THRESH = re.compile(r"(diff\d(?:_\d)?)[ \t]*(?:<=|<|=|==)[ \t]*([0-9][0-9.eE+-]{0,20})", re.IGNORECASE)
_RATE_LIST = re.compile(r"\[([0-9 ,.]{1,60})\]")
_ITEM = re.compile(r"[-*]?[ \t]*\(?(\d{1,2})[ \t]*[,.):][ \t]*(.*)")
_NONE_CELLS = {"", "无", "无限制", "-", "/", "\\", "none", "无特殊限制", "否", "n/a"}


def dtypes_of(cell: str) -> list:
    found = {_DTYPE_WORDS[w.lower()] for w in _WORD.findall(cell) if w.lower() in _DTYPE_WORDS}
    return [d for d in _DTYPE_ORDER if d in found]


# Comparisons written in words, longest first: `epsilon必须大于0` is `epsilon > 0`.
_WORD_OPS = prose.WORD_OPS
_MUST = re.compile(r"(?<=[A-Za-z0-9_\]\)])[ \t]*(?:必须|须|应当|应|需要)?[ \t]*(?=[<>])")


def bounds_of(text: str) -> tuple:
    text = text.replace("`", "").replace("*", " * ")
    for words, op in _WORD_OPS:
        text = text.replace(words, op)
    text = _MUST.sub(" ", text)
    out = []
    for name, op, number in _CMP.findall(text):
        if name[0].isdigit() or name.lower().startswith("diff"):
            continue
        out.append((name, op, float(number) if "." in number else int(number)))
    return tuple(out)


def doc_bounds(text: str, row: str = "") -> tuple:
    """The comparisons a doc's text states, prose forms included (gen/audit/prose.py)."""
    found = bounds_of(prose.rewrite(text, row))
    # one name equal to several values (`pool_method=0 ... pool_method=1`) is a set of them
    values: dict = {}
    for name, op, number in found:
        if op == "==" and isinstance(number, int):
            values.setdefault(name, set()).add(number)
    sets = {n for n, v in values.items() if len(v) > 1}
    return tuple(b for b in found if not (b[0] in sets and b[1] == "==")) + \
        tuple(b for n in sorted(sets) for b in ((n, ">=", min(values[n])), (n, "<=", max(values[n]))))


def _cells(line: str) -> list | None:
    s = line.strip()
    if not s.startswith("|"):
        return None
    s = s[1:-1] if s.endswith("|") and len(s) > 1 else s[1:]
    return [c.strip() for c in s.split("|")]


def _is_rule(cells) -> bool:
    return all(c and set(c) <= set(":- ") for c in cells)


def _split_br(cell: str) -> list:
    for br in ("<br/>", "<br />", "<br>", "<BR>"):
        cell = cell.replace(br, "\n")
    return [c.strip() for c in cell.split("\n") if c.strip()]


def _clean_name(cell: str) -> str:
    return cell.replace("`", "").replace("*", "").strip()


def _none(text: str) -> bool:
    return text.replace(" ", "").rstrip(".;,").lower() in _NONE_CELLS


# ---- the reader -----------------------------------------------------------------------------


class _Reader:
    def __init__(self, doc: DocText):
        self.doc = doc
        self.facts: list[Fact] = []
        self.seen: set = set()
        self.role_wide: list = []   # 1.1 values for every input or output: (kind, role, value, section, line)
        self.prose_dtypes: list = []   # sentences naming tensors' dtypes: (names, dtypes, section, line)

    def dtypes_in(self, text, section, line):
        for names, rest in prose.dtype_statements(text):
            if dtypes_of(rest):
                self.prose_dtypes.append((names, dtypes_of(rest), section, line))

    def add(self, kind, key, value, section, line, text="", bounds=(), api="", repeat=False):
        if (kind, key, api) in self.seen and kind != "unread" and not repeat:
            return
        self.seen.add((kind, key, api))
        self.facts.append(Fact(kind, key, value, section.number, line, text[:300], tuple(bounds), api))

    def unread(self, section, line, text):
        self.add("unread", f"unread {section.number or section.title} line {line}", text.strip()[:200],
                 section, line, text)

    # tables: (line, cells) rows after the header and rule
    def tables(self, body):
        table, header = [], None
        for i, line in body:
            cells = _cells(line)
            if cells is None:
                if header is not None:
                    yield header, table
                table, header = [], None
                continue
            if _is_rule(cells):
                continue
            if header is None:
                header = (i, cells)
            else:
                table.append((i, cells))
        if header is not None:
            yield header, table


def _col(header_cells, *names) -> int:
    for j, c in enumerate(header_cells):
        c = c.replace(" ", "")
        if any(n in c for n in names):
            return j
    return -1


_API = re.compile(r"(?:[A-Za-z][A-Za-z0-9_]*)?(?:Forward|Backward|forward|backward)[A-Za-z0-9_]*|mluOp[A-Za-z0-9]+")


def api_name(title: str) -> str:
    m = _API.search(title.replace(" ", ""))
    return re.sub(r"[^a-z0-9]", "", m.group(0).lower()).removeprefix("mluop") if m else ""


def _interface(r: _Reader, section: Section):
    """1.3's parameter table(s), one per API subsection: tensors with dtypes and layout, scalar
    params, 规模限制 cells."""
    doc_api = api_name(next((s.title for s in r.doc.sections if s.title), ""))
    for sub in r.doc.subsections(section):
        _interface_tables(r, section, sub.body, api_name(sub.title) or doc_api)


def _interface_tables(r: _Reader, section: Section, body, api: str):
    for (hline, header), rows in r.tables(body):
        name_col, dtype_col = _col(header, "参数"), _col(header, "支持类型", "数据类型")
        layout_col, limit_col, role_col = _col(header, "物理布局", "布局"), _col(header, "规模限制"), \
            _col(header, "输入/输出")
        meaning_col = _col(header, "语义")
        if name_col < 0 or dtype_col < 0:
            continue
        names = {_clean_name(cells[name_col]) for _, cells in rows if len(cells) > name_col}
        for i, cells in rows:
            if len(cells) <= max(name_col, dtype_col):
                r.unread(section, i, " | ".join(cells))
                continue
            name = _clean_name(cells[name_col])
            dcell = cells[dtype_col]
            layout = cells[layout_col].replace("`", "").strip() if 0 <= layout_col < len(cells) else ""
            layout = re.sub(r"^[一二三四五六七八]维[ \t]*", "", layout)   # `二维ARRAY`: the rank, then the layout
            if name in ("handle", "workspace", "workspace_size") or name.endswith("_desc") or \
                    "Descriptor_t" in dcell or "Handle_t" in dcell or not _WORD.fullmatch(name):
                pass
            elif layout.upper() in _LAYOUTS or f"{name}_desc" in names or \
                    (0 <= meaning_col < len(cells) and docforms.is_tensor_meaning(cells[meaning_col])):
                role = "output" if 0 <= role_col < len(cells) and "输出" in cells[role_col] else "input"
                r.add("tensor", f"tensor {name}", role, section, i, " | ".join(cells), api=api)
                dts = dtypes_of(dcell)
                if dts:
                    r.add("dtype", f"dtype {name} {','.join(dts)}", dts, section, i, dcell, api=api)
                else:
                    r.unread(section, i, dcell)
                if layout.upper() in _LAYOUTS:
                    r.add("layout", f"layout {name} {layout.upper()}", layout.upper(), section, i, layout, api=api)
                for sm in _shapes_in(" ".join(cells).replace("`", "")):
                    _shape(r, section, i, name, sm.group(2))
                if 0 <= layout_col < len(cells):   # `[N, M] or [N]` in the layout cell: the row's shapes
                    for inner in _BRACKETS.findall(cells[layout_col].replace("`", "")):
                        if not inner.strip().isdigit():
                            _shape(r, section, i, name, inner)
            elif dtypes_of(dcell) and 0 <= role_col < len(cells) and cells[role_col].strip() == "输出":
                # an output is never a param: a scalar one (`result_num`, layout `scalar`) is a tensor
                r.add("tensor", f"tensor {name}", "output", section, i, " | ".join(cells), api=api)
                r.add("dtype", f"dtype {name} {','.join(dtypes_of(dcell))}", dtypes_of(dcell), section, i, dcell, api=api)
            elif dtypes_of(dcell) or "bool" in dcell or "int" in dcell or "float" in dcell:
                floats = any(d.startswith(("float", "bfloat")) for d in dtypes_of(dcell))
                ptype = "bool" if "bool" in dcell else "float" if floats or "double" in dcell else "int"
                r.add("param", f"param {name} {ptype}", ptype, section, i, dcell, api=api)
            else:
                r.unread(section, i, " | ".join(cells))
                continue
            if 0 <= limit_col < len(cells) and not _none(cells[limit_col]):
                text = cells[limit_col]
                r.add("limit", f"limit 1.3 {name}", text, section, i, text,
                      doc_bounds(text, name) + docforms.rank_bounds(text, name))


def _shapes_in(text: str):
    """The `name: [..]` matches of a text that are shapes: `shape[1]`, `x[0]` (a word, then a bracketed
    integer) index a shape and are none."""
    for sm in _SHAPE.finditer(text):
        between = sm.group(0)[len(sm.group(1)):sm.group(0).index("[")]
        if not between.strip("`") and sm.group(2).strip().isdigit():
            continue
        yield sm


def _shape(r, section, line, name, inner):
    dims = docforms.shape_dims(inner)
    if dims:
        r.add("shape", f"shape {name} {','.join(dims)}", dims, section, line, inner)


def _overview(r: _Reader, section: Section):
    """1.1's table: shapes and layouts per tensor, written `name: [..]` / `name: NHWC`."""
    for (_, header), rows in r.tables(r.doc.under(section)):
        for i, cells in [(header[0], header[1])] + rows:
            if len(cells) < 2:
                continue
            key, value = cells[0].replace(" ", ""), cells[1].replace("`", "")
            if not _none(value):
                r.add("row", f"row {section.number} {key}", value, section, i, value)
            role = "input" if key.startswith("输入") else "output" if key.startswith("输出") else ""
            if "类型" in key:
                r.dtypes_in(value, section, i)
            if "Shape" in key or "shape" in key:
                named = list(_shapes_in(value))
                for sm in named:
                    for listed in docforms.names_listed_before(value, sm.start()) + [sm.group(1)]:
                        _shape(r, section, i, listed, sm.group(2))
                bare = _BARE_SHAPE.fullmatch(value)
                # a sentence's shapes (`则输出shape为[batches_m, batches_n]`), all of one rank
                said = [m.group(1) for m in _SAID_SHAPE.finditer(value)]
                if not bare and len({s.count(",") for s in said}) == 1:
                    bare = _SAID_SHAPE.search(value)
                alternatives = docforms.bare_alternatives(value) if not (named or bare) else []
                if not named and bare and role:
                    r.role_wide.append(("shape", role, [bare.group(1)], section, i))
                elif alternatives and role:   # `[ length, ] / [1]`: one of these shapes
                    r.role_wide.append(("shape", role, alternatives, section, i))
            elif "Layout" in key or "layout" in key:
                _overview_layouts(r, section, i, role, value)


_LAYOUT_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*:{1,2}[ \t]*([A-Za-z]{2,6})")
_BRACKETS = re.compile(r"\[([^\[\]]{1,200})\]")
_BARE_SHAPE = re.compile(r"[ \t]*\[([^\[\]]{1,200})\][ \t]*")
_SAID_SHAPE = re.compile(r"(?:shape|形状)[ \t]*(?:为|是|:)[ \t]*\[([^\[\]]{1,200})\]")


def _overview_layouts(r: _Reader, section: Section, line: int, role: str, value: str):
    """`name: NHWC` pairs; a cell of one layout and no names (`ARRAY`, `均为 ARRAY`) is every input's
    (or output's) layout, placed once 1.3 has named them."""
    value = docforms.drop_rank_before_layout(value)
    pairs = [(n, lay.upper()) for n, lay in _LAYOUT_PAIR.findall(value) if lay.upper() in _LAYOUTS]
    for name, layout in pairs:
        r.add("layout", f"layout {name} {layout}", layout, section, line, value)
    words = {w.upper() for w in _WORD.findall(value) if w.upper() in _LAYOUTS}
    if not pairs and len(words) == 1 and role:
        r.role_wide.append(("layout", role, words.pop(), section, line))


def _place_prose_dtypes(r: _Reader):
    """Dtypes a sentence gives (1.1, 1.4), on the 1.3 tensors it names that 1.3 gives none."""
    tensors = {f.key.split(" ")[1] for f in r.facts if f.kind == "tensor"}
    for names, dts, section, line in r.prose_dtypes:
        have = {f.key.split(" ")[1] for f in r.facts if f.kind == "dtype"}
        for name in names:
            if name in tensors and name not in have:
                r.add("dtype", f"dtype {name} {','.join(dts)}", dts, section, line, ",".join(dts))


def _place_role_wide(r: _Reader):
    """1.1's values for all inputs or all outputs, on the tensors 1.3 gives that role and no value of
    their own: a layout for each, a shape for the only one."""
    for kind, role, value, section, line in r.role_wide:
        names = [f.key.split(" ")[1] for f in r.facts if f.kind == "tensor" and f.value == role]
        have = {f.key.split(" ")[1] for f in r.facts if f.kind == kind}
        if kind == "layout":
            for name in names:
                if name not in have:
                    r.add("layout", f"layout {name} {value}", value, section, line, value)
        elif len(names) == 1 and names[0] not in have:
            for inner in value:
                _shape(r, section, line, names[0], inner)


_TEMPLATE_ROWS = ("原位限制", "stride限制", "广播限制")


def _limits(r: _Reader, section: Section):
    """1.4's table: one limit per row that says something; shapes written as limits."""
    body = r.doc.under(section)
    in_table = {i for (h, _), rows in r.tables(body) for i in [h] + [j for j, _ in rows]}
    for (_, header), rows in r.tables(body):
        if _col(header, "限制类型") < 0:
            continue
        for i, cells in rows:
            if len(cells) < 2:
                r.unread(section, i, " | ".join(cells))
                continue
            kind = cells[0].replace(" ", "").replace("`", "")
            detail = " ".join(cells[1:]).strip()
            if _none(detail):
                continue
            # rows of one kind (four `输入限制` rows) are each a limit, of one key: `1.4 输入限制` cites all
            r.add("limit", f"limit {section.number} {kind}", detail, section, i, detail, doc_bounds(detail),
                  repeat=True)
            r.dtypes_in(detail, section, i)
            for part in _split_br(detail):
                for sm in _shapes_in(part.replace("`", "")):
                    if sm.group(1).lower() not in ("shape", "dim", "range"):
                        _shape(r, section, i, sm.group(1), sm.group(2))
    for i, line in body:
        s = line.strip()
        if s and i not in in_table and _cells(s) is None and not s.startswith("注"):
            r.unread(section, i, s)


# The template's own 防呆 items (what a doc holds when its author filled nothing in), without
# spaces and end punctuation: such items are the template speaking, not a check of the kernel.
_TEMPLATE_ITEMS = ("指针为空防呆", "0元素检查防呆,VLOG(5)打印信息,是否返回与框架沟通",
                   "涉及workspace算子对于workspace_size的检查防呆",
                   # the same item without the question, as some docs' copy of the template has it
                   "对输入输出支持的dtype,layout以及shape进行防呆",
                   "是否需要对输入输出支持的dtype,layout以及shape进行防呆",
                   "elementwise算子则需要保证输入输出的每一个维度都要一样", "算子存在的自身的相关参数防呆",
                   # the newer template's example of a limit check, copied unchanged
                   "限制的防呆,比如算子限制kernel不能太大")
_TEMPLATE_MARK = "列出算子需要做的防呆"
_PARAM_CHECK = re.compile(r"PARAM_CHECK(?:_V2|_[A-Z]{2})?\([ \t]*\"[^\"]{0,200}\"[ \t]*,[ \t]*([^;]{1,300})\)[ \t]*;")
# Of those, the ones that ask a question or name a heading and state no check, wherever they stand.
_TEMPLATE_QUESTIONS = _TEMPLATE_ITEMS[4:]


def _checks(r: _Reader, section: Section):
    """防呆: the numbered items, in order; continuation lines join their item."""
    body = r.doc.under(section)
    template = any(_TEMPLATE_MARK in line for _, line in body)
    items, current, sentences = [], None, []
    for i, line in body:
        s = line.strip()
        if not s:
            continue
        m = _ITEM.fullmatch(s)
        if m and m.group(2):
            current = [int(m.group(1)), i, m.group(2)]
            items.append(current)
        elif current is not None and not s.startswith("主要是列出") and not s.startswith("#"):
            current[2] += " " + s
        elif not (s.endswith(":") or _TEMPLATE_MARK in s or "错误码" in s or s.startswith("主要是列出")):
            sentences.append((i, s))
    if not items and not template:
        # a section of unnumbered sentences (`需要检查...;` a line): each that states a check is an item
        items = [[n, i, s] for n, (i, s) in enumerate([x for x in sentences if docforms.states_a_check(x[1])], 1)]
    for i, s in sentences:
        if not any(i == item[1] for item in items):
            r.unread(section, i, s)
    # the last item runs to the section's end, past any code under it (fenced lines are no body)
    after = [s.line for s in r.doc.sections if s.line > section.line and s.level <= section.level]
    ends = [i for _, i, _ in items[1:]] + [min(after, default=len(r.doc.lines) + 1)]
    checks: dict = {}
    for (n, i, text), end in zip(items, ends):
        flat = text.replace(" ", "").rstrip(".;,")
        # under the template's line, an item with code below it (mlu-ops' checks, as
        # deform_roi_pool_forward's doc fills the template's items) is the author's; a question
        # item states no check, filled or not
        filled = any(line.strip().startswith("```") for line in r.doc.lines[i:end - 1])
        # the bounds of the PARAM_CHECKs in the code under an item are the item's
        coded = tuple(b for line in r.doc.lines[i:end - 1] for cond in _PARAM_CHECK.findall(line)
                      for b in doc_bounds(cond.replace("->", ".").replace("||", ",").replace("&&", ",")))
        if ((template and not filled and flat in _TEMPLATE_ITEMS) or flat in _TEMPLATE_QUESTIONS) and not coded:
            r.add("template", f"template {section.number}({n})", text, section, i, text)
            continue
        # a section of several lists, each numbered from 1 (pointers, zero elements, params): one
        # fact per number, with every list's item of that number in it
        merged = checks.setdefault(n, [i, [], []])
        merged[1].append(text)
        merged[2].extend(doc_bounds(text) + coded)
    for n, (i, texts, bounds) in checks.items():
        text = " / ".join(texts)
        r.add("check", f"check {section.number}({n})", text, section, i, text, tuple(bounds))
    if template and not any(f.kind == "check" and f.section == section.number for f in r.facts):
        r.add("template", f"template {section.number}", "the section is the template's text", section,
              section.line)


def _accuracy(r: _Reader, section: Section):
    """1.5.1: per sentence, the metrics, static or dynamic, rates and thresholds."""
    clauses = [(i, c.strip()) for i, line in r.doc.under(section) for c in line.replace("`", "").split(";")]
    for n, (i, s) in enumerate(clauses):
        if not s:
            continue
        metrics = ["diff" + a + ("_" + b if b else "") for a, b in _METRIC.findall(s)]
        if not metrics:
            if re.search(r"\d", s):
                r.unread(section, i, s)
            continue
        thresholds = {m.lower(): float(v.rstrip(".")) for m, v in _THRESH.findall(s) if _float_ok(v.rstrip("."))}
        per_dtype = {d: float(v) for d, v in re.findall(r"(half|float)[ \t]*:[ \t]*([0-9][0-9.eE+-]{0,20})", s)
                     if _float_ok(v)}
        rates = []
        if "动态" in s or "threshold_rate" in s:
            for inner in _RATE_LIST.findall(s):
                vals = [v.strip() for v in inner.split(",") if v.strip()]
                if vals and all(_float_ok(v) for v in vals):
                    rates = [float(v) for v in vals]
        mode = "dynamic" if "动态" in s or "threshold_rate" in s else "static"
        rule = {"mode": mode, "metrics": _unique(metrics), "rates": rates, "thresholds": thresholds,
                "per_dtype": per_dtype, "series": re.findall(r"([1-9]00)系列", s)}
        r.add("accuracy", f"accuracy line {i} clause {n}", rule, section, i, s)
    return


def _float_ok(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def _unique(seq):
    return list(dict.fromkeys(seq))


def _network(r: _Reader, section: Section):
    """测试用例: network shapes, as bracketed integer lists per line or as a table of dims."""
    body = r.doc.under(section)
    n = 0
    for i, line in body:
        s = line.replace("`", "")
        shapes = [[int(x) for x in inner.split(",") if x.strip()] for inner in _INT_LIST.findall(s)
                  if any(x.strip() for x in inner.split(","))]
        cells = _cells(s)
        if shapes:
            n += 1
            r.add("network", f"network {section.number} line {i}", shapes, section, i, s)
        elif cells and len(cells) >= 2 and not _is_rule(cells) and re.fullmatch(r"[0-9 ,~-]{1,200}", cells[-1]):
            r.add("network", f"network {section.number} {_clean_name(cells[0])}", cells[-1], section, i, s)


def read_facts(doc: DocText) -> list:
    r = _Reader(doc)
    for s in doc.find("需求分析", number_prefix="1.1"):
        _overview(r, s)
    for s in doc.find("参数要求", "输入输出参数", number_prefix="1."):
        _interface(r, s)
    _place_role_wide(r)
    for s in doc.find("限制", number_prefix="1."):
        if s.level <= 3 and s.number.count(".") == 1:
            _limits(r, s)
    acc = doc.find("精度验收", number_prefix="1.") or doc.find("验收标准", number_prefix="1.")
    for s in acc[:1]:
        _accuracy(r, s)
    for s in doc.find("测试用例", number_prefix="3."):
        _network(r, s)
    for s in doc.find("防呆", "参数检查", number_prefix="3."):
        _checks(r, s)
    _place_prose_dtypes(r)
    for i in doc.long_lines:
        r.facts.append(Fact("unread", f"unread line {i}", "line cut at the line cap", "", i))
    return r.facts


def read(path) -> list:
    return read_facts(read_doc(path))
