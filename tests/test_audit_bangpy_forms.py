"""gen/audit/docread on the forms of mlu-ops' BANGPy design docs that held-out round 12 showed it
did not read (gen/audit/docforms.py; gen/audit/README.md, "Measured"): each on a small doc written
for the test, none of its sentences a doc's."""
from __future__ import annotations

from gen.audit import docforms, docread
from gen.audit.doctext import parse_doc

DOC = """# BANGPy Blend 算子开发设计方案
## 1 需求分析
### 1.1 算子需求分析
| 算子功能简介 | 混合 |
|---|---|
| 输入 Shape | left, right: [rows, cols]; weights: [ rows ,] |
| 输入 Layout | left: 二维ARRAY; right: 二维ARRAY |
| 输出 Shape | cube: [d0,d1,...,d3]; bad: [a,...,b] |
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| left | 左边的张量 | 输入 | half, float | ARRAY | 二维 |
| weights | 存放权重的张量 | 输入 | half | / | \\ |
| ratio | 输入张量的混合比例 | 输入 | half | / | 无 |
| cube | 输出Tensor | 输出 | half | ARRAY | 一维,八个元素 |
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 规模限制 | \\ |
### 3.7 算子防呆检查
需要检查 left 是否是二维；

需要检查 ratio 必须大于0；
"""

NONE_DOC = """# BANGPy Plain 算子开发设计方案
### 3.7 算子防呆检查
除自动生成的检查外，暂不需要进行其他的防呆检查。
"""


def _facts(text=DOC):
    return docread.read_facts(parse_doc(text, "blend.md"))


def test_a_trailing_comma_and_numbered_dims_around_an_ellipsis_give_the_dims_they_stand_for():
    shapes = {f.key for f in _facts() if f.kind == "shape"}
    assert "shape weights rows" in shapes
    assert "shape cube d0,d1,d2,d3" in shapes
    # an ellipsis between dims not numbered alike is no definite shape: none is read
    assert not any(k.startswith("shape bad") for k in shapes)
    assert docforms.shape_dims("a,...,b") is None and docforms.shape_dims("x,") == ["x"]


def test_names_listed_before_one_shape_each_have_it():
    shapes = {f.key for f in _facts() if f.kind == "shape"}
    assert {"shape left rows,cols", "shape right rows,cols"} <= shapes


def test_a_rank_before_a_1_1_layout_is_dropped_and_a_rank_cell_bounds_the_rank():
    facts = _facts()
    assert "layout right ARRAY" in {f.key for f in facts if f.kind == "layout"}
    limits = {f.key: f.bounds for f in facts if f.kind == "limit"}
    assert limits["limit 1.3 left"] == (("left.ndim", "==", 2),)
    assert ("cube.ndim", "==", 1) in limits["limit 1.3 cube"]


def test_a_row_whose_meaning_is_a_tensor_is_one_and_a_half_scalar_is_a_float_param():
    keys = {f.key for f in _facts()}
    assert {"tensor weights", "dtype weights float16"} <= keys
    assert "param ratio float" in keys and not any(k.startswith("param weights") for k in keys)


def test_a_backslash_cell_states_nothing():
    keys = {f.key for f in _facts() if f.kind == "limit"}
    assert "limit 1.3 weights" not in keys and "limit 1.4 规模限制" not in keys


def test_unnumbered_check_sentences_are_items_in_order_and_a_sentence_of_none_is_no_check():
    checks = {f.key: f.bounds for f in _facts() if f.kind == "check"}
    assert list(checks) == ["check 3.7(1)", "check 3.7(2)"]
    assert ("ratio", ">", 0) in checks["check 3.7(2)"]
    facts = _facts(NONE_DOC)
    assert not any(f.kind == "check" for f in facts)
    assert any(f.kind == "unread" and "暂不需要" in str(f.value) for f in facts)   # reported, not dropped


def test_intervals_written_in_and_between_or_as_membership_and_advice_stating_nothing():
    assert docread.doc_bounds("num必须在[-8,7]之间") == (("num", ">=", -8), ("num", "<=", 7))
    assert docread.doc_bounds("num∈[1,3)") == (("num", ">=", 1), ("num", "<", 3))
    assert docread.doc_bounds("[-1, 1], 建议取值[0, 0.5]", "margin") == (("margin", ">=", -1), ("margin", "<=", 1))
    assert docread.doc_bounds("推荐 x <= 3; y <= 4") == (("y", "<=", 4),)


def test_bare_shapes_as_alternatives_are_each_the_role_s_one_tensor_s():
    doc = DOC.replace("| 输出 Shape | cube: [d0,d1,...,d3]; bad: [a,...,b] |", "| 输出 Shape | [ d0, ] / [1] |")
    shapes = {f.key for f in _facts(doc) if f.kind == "shape" and f.key.startswith("shape cube")}
    assert shapes == {"shape cube d0", "shape cube 1"}
