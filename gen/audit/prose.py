"""Limits that mlu-ops docs state in sentences, rewritten as the comparisons the doc reader reads.

A 1.3 规模限制 cell, a 1.4 row or a 防呆 item often states its bound without the `name <= 45`
form: the subject a few words before the comparison (`max_pts_each_voxel 数值在 float 类型下不能超过
2880`), a set of values (`points 的取值只能是 1 或 5`), a single `=` (`shape[1] =9`), an axis with no
tensor before it (the 1.3 row's tensor, or the sentence's), or a comparison that is a zero-element
case that succeeds (`xyz.shape[1] == 0, return MLUOP_STATUS_SUCCESS`), which requires nothing.
`rewrite` turns a text into one where each such bound is an explicit comparison and the rest is
left as it was; every pattern here is linear (no nested repetition)."""
from __future__ import annotations

import re

# Comparisons written in words, longest first: `epsilon必须大于0` is `epsilon > 0`.
WORD_OPS = (("大于等于", ">="), ("小于等于", "<="), ("不小于", ">="), ("不大于", "<="), ("不能超过", "<="),
            ("不超过", "<="), ("大于", ">"), ("小于", "<"))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,3}(?:\[\d{1,2}\]|\(\d{1,2}\))?")
_AXIS_WORD = re.compile(r"(?:shape|dims?|ndim)\d?(?:\[\d{1,2}\]|\(\d{1,2}\))?")
# Words that are never the subject of a bound: dtypes, the skeleton's own nouns, the axis words
_NOT_SUBJECTS = {"float", "half", "double", "int", "int8", "int16", "int32", "int64", "bool", "float16",
                 "float32", "bfloat16", "fp16", "fp32", "uint8", "int32_t", "int64_t", "dtype", "layout",
                 "type", "tensor", "desc", "shape", "dim", "dims", "ndim", "size", "nan", "inf", "true",
                 "false", "null", "mlu", "gpu", "cpu", "return", "case", "kernel", "workspace", "handle",
                 "array", "nhwc", "nchw", "ndhwc", "status", "error", "e", "g", "m", "k"}
_AXIS = re.compile(r"(?<![A-Za-z0-9_.])(shape\[\d\]|shape\(\d\)|dims?\[\d\]|dim\(\d\)|dim\d|ndim|dims?)"
                   r"(?=[ \t]*(?:<=|>=|==|!=|<|>|=|只|仅))")
_VALUES = r"(-?\d{1,12}(?:[ \t]*(?:或者|或|or|,|和|/)[ \t]*-?\d{1,12}){0,15})(?!\d|\.\d)"
_ONE_OF = re.compile(r"(?:只能是|只能为|仅能为|仅能是|只能取|仅为|只可以是|取值只能是|只支持|仅支持)[ \t]*"
                     r"(?:输入|取值|为|是)?[ \t]*" + _VALUES)
# outside a condition, `h=1 or 3`, `rotations=2,4,8`, `shape[1] =9`: a single `=` is a value or a set
_ONE_OF_EQ = re.compile(r"(?:只能是|只能为|仅能为|仅能是|只能取|仅为|只可以是|取值只能是|只支持|仅支持|"
                        r"(?<![<>=!])=(?!=))[ \t]*(?:输入|取值|为|是)?[ \t]*" + _VALUES)
_BARE_CMP = re.compile(r"(?<![A-Za-z0-9_\]\) \t])([ \t]*)(<=|>=|==|<|>)([ \t]*-?\d{1,12})(?![0-9A-Za-z^*.])")
_ONLY_VALUES = re.compile(_VALUES)
# `variance 的 shape[0] 为4`: an axis `为`/`是`/`等于` a number is equal to it
_AXIS_IS = re.compile(r"(shape\[\d\]|dims?\[\d\]|dim\(\d\))[ \t]*(?:必须|须|需)?[ \t]*(?:为|是|等于)[ \t]*(?=-?\d)")
_LISTED_NAME = re.compile(r"[ \t]*(?:输入|输出|参数)?[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*")
_CONDITION = ("当", "若", "如果", "时,", "则")


def _sentences(text: str) -> list:
    """Split on `;` and on a full stop: a `.` that is neither a decimal point (`1.5`) nor a member's
    (`x.shape`, `x.dim(2).y`)."""
    out, start = [], 0
    for i, ch in enumerate(text):
        before, after = text[i - 1:i], text[i + 1:i + 2]
        member = ch == "." and (before.isdigit() and after.isdigit() or
                                (before.isalnum() or before in "_])") and (after.isalpha() or after == "_")
                                and not before.isdigit())
        if ch == ";" or ch == "." and not member:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [s for s in out if s.strip()]


def _subject(words: list) -> str:
    for w in words:
        if w.lower() not in _NOT_SUBJECTS and not w.lower().startswith("mluop") and not _AXIS_WORD.fullmatch(w):
            return w
    return ""


def _one_of(sentence: str, pattern) -> str:
    """`points 只能是 1 或 5` as `points >= 1 , points <= 5`; one value as `== v`."""
    out, last = [], 0
    for m in pattern.finditer(sentence):
        before = sentence[last:m.start()]
        subject = _subject(list(reversed(_IDENT.findall(before))))
        values = [int(v) for v in re.findall(r"-?\d{1,12}", m.group(1))]
        out.append(before)
        if subject and len(values) == 1:
            out.append(f" , {subject} == {values[0]} , ")
        elif subject:
            out.append(f" , {subject} >= {min(values)} , {subject} <= {max(values)} , ")
        last = m.end()
    return "".join(out) + sentence[last:]


def _owner(before: str, row: str) -> str:
    """The tensor a dim or axis is of: the name the text before it is about, last first (a name on
    a comparison's right side, `dim[1]=num_points`, is not one), else the row's."""
    names = [n.group(0) for n in _IDENT.finditer(before)
             if not before[:n.start()].rstrip().endswith(("=", "<", ">"))]
    return _subject(list(reversed(names))) or row


def _axes_on_tensor(sentence: str, row: str) -> str:
    """A bare `shape[1]` / `dim` is the tensor named last before it in the sentence, else the row's."""
    out, last = [], 0
    for m in _AXIS.finditer(sentence):
        owner = _owner(sentence[:m.start()], row)
        out.append(sentence[last:m.start()])
        out.append(f"{owner}.{m.group(1)}" if owner else m.group(1))
        last = m.end()
    return "".join(out) + sentence[last:]


def _subjectless(clause: str, carried: str, listed=()) -> tuple:
    """A comparison with no name before it (`数值在 float 类型下 <= 2880`) is on the clause's first
    name, else on the name an earlier clause of the sentence bounded (`, half 类型 <= 2930`: the
    same limit for another dtype or board, which the audit takes as alternatives)."""
    out, last = [], 0
    for m in _BARE_CMP.finditer(clause):
        subject = _subject(_IDENT.findall(clause[:m.start()])) or carried
        carried = subject
        out.append(clause[last:m.start()])
        out.append(f" , {subject} {m.group(2)} {m.group(3).strip()} , " if subject else m.group(0))
        # a list of names before it (`batch_size, num_points, n 的维度必须 > 0`): each is bounded so
        out.extend(f" , {name} {m.group(2)} {m.group(3).strip()} , " for name in listed if subject)
        last = m.end()
    return "".join(out) + clause[last:], carried


# `gamma暂不支持小于等于0`: what is not supported is the complement
_NEGATED = re.compile(r"(?:暂)?(?:不支持|不允许|不能为|不能|不可)[ \t]*(大于等于|小于等于|大于|小于|等于)")
_COMPLEMENT = {"大于等于": "<", "小于等于": ">", "大于": "<=", "小于": ">=", "等于": "!="}
# `C的范围需在[0，13615]`, `gamma 取值范围为 [0,+inf]`, `dim必须在[-8,7]之间`, `k∈[1,3]`: an interval,
# closed or open at its end
_INTERVAL = re.compile(r"(?:(?:范围|取值)[^\[\]()]{0,8}?|在[ \t]*|∈[ \t]*)[\[(][ \t]*(-?\d{1,12})[ \t]*,[ \t]*(-?\d{1,12}|\+?inf)[ \t]*([\])])")


def _intervals(sentence: str) -> str:
    out, last = [], 0
    for m in _INTERVAL.finditer(sentence):
        subject = _subject(list(reversed(_IDENT.findall(sentence[last:m.start()]))))
        out.append(sentence[last:m.start()])
        if subject:
            out.append(f" , {subject} >= {m.group(1)} , ")
            if "inf" not in m.group(2):
                out.append(f" {subject} {'<=' if m.group(3) == ']' else '<'} {m.group(2)} , ")
        last = m.end()
    return "".join(out) + sentence[last:]


# `rois的第二维的大小必须是6`, `第1个维度大小等于 4`: the Nth dim (from 1) of the sentence's tensor
# a 1.3 cell that opens with an interval (`[-1, 1]`) is the row's range; advice (`建议取值[0, 0.5]`)
# is no limit, to the sentence's end
_BARE_INTERVAL = re.compile(r"[ \t]*[\[(][ \t]*-?\d{1,12}[ \t]*,")
_ADVICE = re.compile(r"(?:建议|推荐)[^;]*")
_ORDINAL = re.compile(r"第[ \t]*([1-8一二三四五六七八])[ \t]*(?:个)?维(?:度)?(?:的)?(?:大小)?(?:必须|须|需)?[ \t]*(?:是|为|等于)[ \t]*(\d{1,12})(?![\d.])")


def _ordinals(sentence: str, row: str) -> str:
    out, last = [], 0
    for m in _ORDINAL.finditer(sentence):
        owner = _owner(sentence[:m.start()], row)
        k = "12345678一二三四五六七八".index(m.group(1)) % 8
        out.append(sentence[last:m.start()])
        out.append(f" , {owner}.shape[{k}] == {m.group(2)} , " if owner else m.group(0))
        last = m.end()
    return "".join(out) + sentence[last:]


def rewrite(text: str, row: str = "") -> str:
    """The text with its prose bounds written as comparisons; `row` is the 1.3 row's name, if any."""
    text = re.sub(r"<br[ \t]*/?>", " ; ", text.replace("`", "").replace("*", " * "), flags=re.IGNORECASE)
    text = _NEGATED.sub(lambda m: _COMPLEMENT[m.group(1)], text)
    for words, op in WORD_OPS:
        text = text.replace(words, op)
    out = []
    for sentence in _sentences(text):
        if "SUCCESS" in sentence or "返回成功" in sentence:
            continue   # the zero-element case that succeeds: it states when, not what must hold
        sentence = _ADVICE.sub("", sentence)
        if row and _BARE_INTERVAL.match(sentence):
            sentence = f"{row} 取值范围 {sentence.strip()}"
        if row and _ONLY_VALUES.fullmatch(sentence.strip()):
            sentence = f"{row} 只能为 {sentence.strip()}"   # a 1.3 cell of values only: the row's
        condition = any(c in sentence for c in _CONDITION)
        sentence = _AXIS_IS.sub(r"\1 == ", _ordinals(_intervals(sentence), row))
        sentence = _one_of(_axes_on_tensor(sentence, row), _ONE_OF if condition else _ONE_OF_EQ)
        clauses, carried, listed = [], "", []
        for clause in sentence.split(","):
            name = _LISTED_NAME.fullmatch(clause)
            clause, carried = _subjectless(clause, carried, listed)
            listed = listed + [name.group(1)] if name and _subject([name.group(1)]) else []
            clauses.append(clause)
        out.append(",".join(clauses))
    return " ; ".join(out)


_TYPE_IS = re.compile(r"(?:数据类型|类型)[ \t]*[均都]?[ \t]*(?:为|是|支持)|[均都]?[ \t]*(?:只支持|仅支持|支持)")


_NAMED_TYPE = re.compile(r"[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*:[ \t]*([A-Za-z0-9_ ,/]{1,80})")


def dtype_statements(text: str) -> list:
    """`grad和param_h类型均为bfloat16`, `top_output、bboxes 支持 half 和 float 类型`: (names, the text
    after the verb) per clause that names tensors before its verb; the caller reads the dtypes."""
    out = []
    for clause in re.split(r";|<br */?>|\.(?![0-9A-Za-z_])", text.replace("`", "")):
        pair = _NAMED_TYPE.fullmatch(clause)
        if pair:   # `var: float32`, one tensor a line of a 1.1 类型 row
            out.append(([pair.group(1)], pair.group(2)))
            continue
        m = _TYPE_IS.search(clause)
        if not m:
            continue
        names = [w for w in _IDENT.findall(clause[:m.start()]) if _subject([w])]
        if names and "不支持" not in clause[max(0, m.start() - 1):m.end()]:
            out.append((names, clause[m.end():]))
    return out
