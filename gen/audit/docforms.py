"""Forms of mlu-ops design docs that the doc reader (gen/audit/docread.py) meets in their BANGPy
docs (held-out round 12) and that its older rules did not read: each is a form of the skeleton the
whole family may use, not a rule for one doc.

- a shape with a trailing comma (`[ length ,]`, `[input_strde,]`): the last, empty dim is no dim;
- a shape with an ellipsis between numbered dims (`[dim0,dim1,...,dim7]`): the dims it stands for,
  and no shape at all where the ellipsis stands between dims that are not numbered alike;
- bare shapes as alternatives (`[ length, ] / [1]`): each the role's one tensor's;
- several names before one shape (`input_x1, input_x2: [N, D]`): each name's;
- a rank word before a 1.1 layout (`input1: 八维ARRAY`): the layout;
- a 1.3 cell or clause that is a rank (`八维`, `4维`): the row's rank, `name.ndim == 8`;
- a 1.3 row without a layout whose meaning is a tensor (`存放...的张量`, `输入Tensor`): a tensor;
- a 防呆 section of unnumbered sentences, each a check (`需要检查...；`): items numbered in order.

Every pattern is linear (no nested repetition)."""
from __future__ import annotations

import re

_NUMBERED = re.compile(r"([A-Za-z_][A-Za-z_]*?)(\d{1,2})")
_ELLIPSIS = {"...", "…", "……", "···"}
# up to eight names, `,` or `、` between them, ending where a shape's own name begins
_LISTED = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*[ \t]*[,、][ \t]*){1,8}$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RANK_DIGITS = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8}
_RANK = re.compile(r"[ \t]*([一二三四五六七八]|[1-8])[ \t]*维(?:张量|tensor|Tensor)?[ \t]*")
_RANK_BEFORE_LAYOUT = re.compile(r"(:{1,2}[ \t]*)(?:[一二三四五六七八]|[1-8])维[ \t]*(?=[A-Za-z])")
# the head noun of a Chinese description is its last word: `存放...的张量` is a tensor,
# `张量的维度各维的具体数值` a number
_TENSOR_HEAD = re.compile(r"(?:张量|[Tt]ensor)[ \t]*[.。;；]?[ \t]*$")
# a sentence of a 防呆 section that states a check, and one that says there is none to make
_CHECK_WORDS = ("检查", "必须", "需要", "不能", "只支持", "仅支持", "防呆")
_NO_CHECK = ("暂无", "不需要", "无需", "暂不需要")
_BARE = re.compile(r"[ \t]*\[([^\[\]]{1,200})\][ \t]*")
_OR = re.compile(r"[ \t]*(?:/|\bor\b|或)[ \t]*")


def shape_dims(inner: str) -> list | None:
    """The dims a shape's bracket text gives, or None where it gives no definite list."""
    dims = [d.strip().replace(" ", "") for d in inner.split(",")]
    if len(dims) > 1 and not dims[-1]:
        dims = dims[:-1]   # `[ length ,]`
    if not dims or not all(dims):
        return None
    out = []
    for k, d in enumerate(dims):
        if d not in _ELLIPSIS:
            out.append(d)
            continue
        before = _NUMBERED.fullmatch(dims[k - 1]) if k > 0 else None
        after = _NUMBERED.fullmatch(dims[k + 1]) if k + 1 < len(dims) else None
        if not (before and after and before.group(1) == after.group(1)
                and int(before.group(2)) < int(after.group(2)) <= int(before.group(2)) + 64):
            return None
        out += [f"{before.group(1)}{n}" for n in range(int(before.group(2)) + 1, int(after.group(2)))]
    return out


def names_listed_before(text: str, start: int) -> list:
    """The names listed right before a `name: [..]` match at `start` (`input_x1, input_x2: [N, D]`)."""
    m = _LISTED.search(text[max(0, start - 400):start])
    return _NAME.findall(m.group(0)) if m else []


def bare_alternatives(value: str) -> list:
    """A 1.1 cell of bare shapes written as alternatives (`[ length, ] / [1]`): their bracket texts."""
    parts = _OR.split(value)
    found = [_BARE.fullmatch(p) for p in parts]
    return [m.group(1) for m in found] if len(parts) > 1 and all(found) else []


def drop_rank_before_layout(value: str) -> str:
    """`input1: 八维ARRAY` as `input1: ARRAY`."""
    return _RANK_BEFORE_LAYOUT.sub(r"\1", value)


def rank_bounds(cell: str, name: str) -> tuple:
    """A 1.3 规模限制 cell's clauses that are a rank (`八维`, `一维,八个元素`'s first): `name.ndim == N`."""
    out = []
    for clause in re.split(r"[,;]", cell):
        m = _RANK.fullmatch(clause)
        if m:
            n = _RANK_DIGITS.get(m.group(1)) or int(m.group(1))
            out.append((f"{name}.ndim", "==", n))
    return tuple(out)


def is_tensor_meaning(meaning: str) -> bool:
    return bool(_TENSOR_HEAD.search(meaning.replace("`", "").strip()))


def states_a_check(sentence: str) -> bool:
    """An unnumbered sentence of a 防呆 section that states a check (not one that says none is made)."""
    return any(w in sentence for w in _CHECK_WORDS) and not any(w in sentence for w in _NO_CHECK)
