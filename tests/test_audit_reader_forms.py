"""gen/audit/docread on forms first met in held-out docs and then found in the development docs too
(gen/audit/README.md, "Measured"): each on a small doc written for the test."""
from __future__ import annotations

from gen.audit import docread
from gen.audit.doctext import parse_doc

DOC = """# roi_pool3d_forward 算子开发设计方案
## 1 需求分析
### 1.1 算子需求分析
| 算子功能简介 | 例子 |
|---|---|
| 输入Shape | boxes:dim[N, 9] |
| 输入Layout | boxes: Array; scale: 标量 |
| 输出Shape | [N * 2, 4] |
| 输出Layout | 均为 ARRAY |
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| boxes_desc | 描述 | 输入 | mluOpTensorDescriptor_t | / | 无 |
| boxes | 框 | 输入 | float | / | dim=2, shape[1] =9 |
| out_desc | 描述 | 输入 | mluOpTensorDescriptor_t | / | 无 |
| out | 输出 | 输出 | float | / | shape[0]==boxes.shape[0] |
### 1.5 验收标准
#### 1.5.1 精度验收标准
- 整型输出采用阈值标准 DIFF3 == 0。
### 3.8 算子防呆检查
- 列出算子需要做的防呆，比如
1、指针为空防呆；
2、对输入输出支持的 dtype、layout 以及 shape 进行防呆；
"""


def _facts():
    return docread.read_facts(parse_doc(DOC, "forms.md"))


def test_an_index_is_no_shape_and_dim_brackets_are_one():
    shapes = {f.key for f in _facts() if f.kind == "shape"}
    assert "shape boxes N,9" in shapes
    assert not any(k.endswith(" 1") or k.endswith(" 0") or k.startswith("shape dim") for k in shapes), shapes


def test_overview_layouts_named_and_for_a_whole_role_and_a_bare_output_shape():
    keys = {f.key for f in _facts()}
    assert "layout boxes ARRAY" in keys            # `boxes: Array`
    assert "layout out ARRAY" in keys              # 均为 ARRAY: every output 1.3 names
    assert "shape out N*2,4" in keys               # an unnamed 输出Shape: the only output's


def test_upper_case_metrics_and_an_api_name_with_a_digit():
    facts = _facts()
    rule = next(f.value for f in facts if f.kind == "accuracy")
    assert rule["metrics"] == ["diff3"] and rule["thresholds"] == {"diff3": 0.0}
    assert {f.api for f in facts if f.kind == "tensor"} == {"roipool3dforward"}


def test_the_template_item_without_its_question_is_the_template():
    facts = _facts()
    assert not [f for f in facts if f.kind == "check"]
    assert {f.key for f in facts if f.kind == "template"} >= {"template 3.8(2)", "template 3.8"}


FILLED = """# BarForward 算子开发设计方案
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| x_desc | 描述 | 输入 | mluOpTensorDescriptor_t | / | 无 |
| x | 输入 | 输入 | bfloat16, float | ARRAY | 无 |
| eps | 极小值 | 输入 | float | / | eps必须大于0 |
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 数据范围限制 | n 不能超过 2880，k 小于等于 9 |
#### 1.5.1 精度验收标准
精度设为 diff1 <= 3e-3 && diff2 <=3e-3。
### 3.8 算子防呆检查
- 列出算子需要做的防呆
1、指针为空防呆；
```c++
  PARAM_CHECK("[mluOpBar]", x_desc != NULL);
```
2、0元素检查防呆，VLOG(5)打印信息，是否返回与框架沟通；
"""


def test_a_template_item_filled_with_code_is_a_check():
    facts = docread.read_facts(parse_doc(FILLED, "filled.md"))
    assert {f.key for f in facts if f.kind == "check"} == {"check 3.8(1)"}
    assert "template 3.8(2)" in {f.key for f in facts if f.kind == "template"}


def test_comparisons_in_words_thresholds_before_a_full_stop_and_bfloat16():
    facts = docread.read_facts(parse_doc(FILLED, "filled.md"))
    bounds = {b for f in facts if f.kind == "limit" for b in f.bounds}
    assert {("eps", ">", 0), ("n", "<=", 2880), ("k", "<=", 9)} <= bounds
    rule = next(f.value for f in facts if f.kind == "accuracy")
    assert rule["thresholds"] == {"diff1": 0.003, "diff2": 0.003}
    assert "dtype x float32,bfloat16" in {f.key for f in facts}


LISTS = """# BazForward 算子开发设计方案
### 3.7 算子防呆检查
- 指针
1. handle != NULL
2. x != NULL
- 参数
1. k >= 1
2. n == 5
"""


def test_lists_numbered_from_one_each_keep_every_item():
    checks = {f.key: f for f in docread.read_facts(parse_doc(LISTS, "lists.md")) if f.kind == "check"}
    assert set(checks) == {"check 3.7(1)", "check 3.7(2)"}
    assert ("k", ">=", 1) in checks["check 3.7(1)"].bounds and ("n", "==", 5) in checks["check 3.7(2)"].bounds
    assert "handle != NULL" in checks["check 3.7(1)"].text and "k >= 1" in checks["check 3.7(1)"].text


# ---- limits in sentences (gen/audit/prose.py), forms met in rounds 1 to 5 ---------------------

PROSE = """# BazForward 算子开发设计方案
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| boxes | 框 | 输入 | float | ARRAY | dim=2， shape[1] =9 |
| mode | 模式 | 输入 | int | / | 0或1 |
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 数据范围限制 | `cap`数值在 float 类型下不能超过 2880，half 类型不能超过 2930 |
| 数据限制 | points的取值只能是 1 或 5；仅支持 way=0 的最大池化和 way=1 的平均池化 |
### 3.8 算子防呆检查
1、检查input.dim2, idx.dim0是否大于1且小于等于128；
2、xyz: xyz.shape[1] == 0, return MLUOP_STATUS_SUCCESS
3、当 points = 1 时只用中心点
"""


def _bounds():
    return {f.key: set(f.bounds) for f in docread.read_facts(parse_doc(PROSE, "prose.md")) if f.bounds}


def test_bounds_written_in_sentences_are_read_on_their_subject():
    b = _bounds()
    assert b["limit 1.3 boxes"] == {("boxes.dim", "==", 2), ("boxes.shape[1]", "==", 9)}   # the row's tensor
    assert b["limit 1.3 mode"] == {("mode", ">=", 0), ("mode", "<=", 1)}                   # a cell of values
    # the subject a few words before; the dtype's second bound an alternative on the same subject
    assert b["limit 1.4 数据范围限制"] == {("cap", "<=", 2880), ("cap", "<=", 2930)}
    # a set of values, in words or as one name equal to several
    assert b["limit 1.4 数据限制"] == {("points", ">=", 1), ("points", "<=", 5), ("way", ">=", 0), ("way", "<=", 1)}
    assert b["check 3.8(1)"] == {("idx.dim0", ">", 1), ("idx.dim0", "<=", 128)}


def test_a_zero_element_case_that_succeeds_and_a_condition_state_no_bound():
    b = _bounds()
    assert "check 3.8(2)" not in b and "check 3.8(3)" not in b


SENTENCES = """# QuxForward 算子开发设计方案
### 1.1 算子需求分析
| 算子功能简介 | 例子 |
|---|---|
| 输入数据类型 | a、b 支持 half 和 float 类型；<br>s 的数据类型为 int |
| 输出Shape | 若 flag 为 False，则输出shape为[m, n]；否则输出shape为(m, 1) |
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| a_desc | 描述 | 输入 | mluOpTensorDescriptor_t | 无 | 无 |
| a | 指针 | 输入 | void* | 无 | 无 |
| b_desc | 描述 | 输入 | mluOpTensorDescriptor_t | 无 | 无 |
| b | 指针 | 输入 | void* | 无 | 无 |
| c_desc | 描述 | 输入 | mluOpTensorDescriptor_t | 无 | 无 |
| c | 指针 | 输入 | void* | 无 | 无 |
| out_desc | 描述 | 输出 | mluOpTensorDescriptor_t | 无 | 无 |
| out | 指针 | 输出 | void* | 无 | 无 |
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 数据类型限制 | c类型均为bfloat16<br />其余标量输入均为float |
"""


def test_dtypes_and_shapes_given_in_sentences():
    keys = {f.key for f in docread.read_facts(parse_doc(SENTENCES, "sentences.md"))}
    assert {"dtype a float16,float32", "dtype b float16,float32", "dtype c bfloat16"} <= keys, keys
    assert "shape out m,n" in keys                 # the bracketed shape of a sentence, the only output's
    assert not any(k.startswith("dtype s ") for k in keys)   # s is no tensor of 1.3


REPEATED = """# QuuxForward 算子开发设计方案
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 输入限制 | 输入 `geo` 必须满足 dims=3，并且 dim[0]=batch_size, dim[1]=num_points, dim[2]=3 |
| 输入限制 | 输入 `rows`,`cols` 对应输入 tensor 的维度必须大于 0 |
"""


def test_rows_of_one_kind_are_each_a_limit_and_an_axis_belongs_to_the_sentence_s_tensor():
    facts = [f for f in docread.read_facts(parse_doc(REPEATED, "repeated.md")) if f.kind == "limit"]
    assert [set(f.bounds) for f in facts] == [{("geo.dims", "==", 3), ("geo.dim[2]", "==", 3)},   # not num_points'
                                              {("cols", ">", 0), ("rows", ">", 0)}]


NEGATED = """# CorgeBackward 算子开发设计方案
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| x | 输入 | 输入 | float | 二维ARRAY | 无 |
| y | 输出 | 输出 | float | 一维ARRAY | 无 |
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 规模限制 | 1.gamma暂不支持小于等于0的规模<br>2. 当w为NULL时，C的范围需在[0，13615]；当w不为NULL时，C的范围需在[0，12544]<br>3. beta 取值范围为 [0,+inf] |
"""


def test_a_negation_an_interval_and_a_layout_after_its_rank():
    facts = docread.read_facts(parse_doc(NEGATED, "negated.md"))
    keys = {f.key for f in facts}
    assert {"tensor x", "layout x ARRAY", "tensor y", "layout y ARRAY"} <= keys and not any(k.startswith("param ") for k in keys)
    bounds = set(next(f.bounds for f in facts if f.key == "limit 1.4 规模限制"))
    assert bounds == {("gamma", ">", 0), ("C", ">=", 0), ("C", "<=", 13615), ("C", "<=", 12544), ("beta", ">=", 0)}


def test_an_unclosed_fence_leaves_the_rest_of_the_doc_readable():
    doc = ("# GraultForward 算子开发设计方案\n### 1.2 功能\n  ```c++\n  cx = x\n\n  ```c++\n  y = 1\n  ```\n"
           "### 3.8 算子防呆检查\n1、variance 的 shape[0] 为4；\n2、rois的第二维的大小必须是6；\n")
    facts = {f.key: f.bounds for f in docread.read_facts(parse_doc(doc, "fence.md")) if f.kind == "check"}
    assert facts == {"check 3.8(1)": (("variance.shape[0]", "==", 4),), "check 3.8(2)": (("rois.shape[1]", "==", 6),)}


def test_a_dtype_written_name_colon_dtype_in_a_1_1_type_row():
    doc = ("# GarplyForward 算子开发设计方案\n### 1.1 算子需求分析\n| 算子功能简介 | x |\n|---|---|\n"
           "| 输出数据类型 | out: float32<br />var: float16 |\n### 1.3 算子输入输出参数要求\n"
           "| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |\n| --- | --- | --- | --- | --- | --- |\n"
           "| out_desc | 描述 | 输入 | mluOpTensorDescriptor_t | ARRAY | 无 |\n| out | 指针 | 输出 | void | / | 无 |\n"
           "| var_desc | 描述 | 输入 | mluOpTensorDescriptor_t | ARRAY | 无 |\n| var | 指针 | 输出 | void | / | 无 |\n")
    keys = {f.key for f in docread.read_facts(parse_doc(doc, "pairs.md"))}
    assert {"dtype out float32", "dtype var float16"} <= keys, keys


ALTERNATIVES = """# WaldoForward 算子开发设计方案
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| boxes_desc | 描述 | 输入 | mluOpTensorDescriptor_t | / | / |
| boxes | 框 | 输入 | float\\* | [N, 5] or [N, 6] | / |
| mode | 模式 | 输入 | int | scalar | / |
| count | 个数 | 输出 | int32 \\* | scalar | / |
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 输入限制 | 输入 `mode` 仅支持输入 0 或 1 |
"""


def test_alternative_shapes_a_scalar_output_and_a_word_before_the_values():
    facts = docread.read_facts(parse_doc(ALTERNATIVES, "alternatives.md"))
    keys = {f.key for f in facts}
    assert {"shape boxes N,5", "shape boxes N,6", "tensor count", "dtype count int32", "param mode int"} <= keys, keys
    assert not any(k.startswith("param count") for k in keys)
    assert set(next(f.bounds for f in facts if f.key == "limit 1.4 输入限制")) == {("mode", ">=", 0), ("mode", "<=", 1)}


CODED = """# FredForward 算子开发设计方案
### 3.8 算子防呆检查
- 列出算子需要做的防呆
1、指针为空防呆；
2、算子存在的自身的相关参数防呆。
 ```c++
  PARAM_CHECK("[mluOpFredForward]", boxes_desc->dims[3] == 5);
  PARAM_CHECK("[mluOpFredForward]", points == 1 || points == 5);
  PARAM_CHECK("[mluOpFredForward]", spatial_scale > 0);
```
"""


def test_the_param_checks_in_the_code_under_an_item_are_its_bounds():
    facts = docread.read_facts(parse_doc(CODED, "coded.md"))
    item = next(f for f in facts if f.key == "check 3.8(2)")   # a template question, filled with mlu-ops' code
    assert set(item.bounds) == {("boxes_desc.dims[3]", "==", 5), ("points", ">=", 1), ("points", "<=", 5),
                                ("spatial_scale", ">", 0)}
    assert any(f.key == "template 3.8(1)" for f in facts)  # the unfilled template item stays the template's
