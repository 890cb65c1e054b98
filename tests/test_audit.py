"""gen/audit: the design-doc reader, the C++ check reader, `opcase audit` and `opcase draft`.

The readers' unit tests use small documents written here; the tests on real design docs read
../shared/design-docs and skip, saying so, where it is absent."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO
from gen.audit import coderead, docread
from gen.audit.doctext import MAX_DOC_BYTES, parse_doc
from harness.cli import main

DOCS = REPO.parent / "shared" / "design-docs"
needs_docs = pytest.mark.skipif(not DOCS.is_dir(), reason=f"the design docs are absent ({DOCS})")

# A doc written for these tests in the skeleton's shape: full-width punctuation, a merged prose cell
# with <br>, shapes written as a limit, a template item, a line the reader cannot place.
SMALL_DOC = """# FooForward 算子开发设计方案
## 1 需求分析
### 1.1 算子需求分析
| 算子功能简介 | 例子 |
|---|---|
| 输入Shape | x：[N, C, L]<br/>w: `[C, K]` |
### 1.3 算子输入输出参数要求
| 参数 | 语义 | 类型（输入/输出） | 支持类型 | 物理布局 | 规模限制 |
| --- | --- | --- | --- | --- | --- |
| handle | 句柄 | 输入 | mluOpHandle_t | / | 无 |
| x_desc | x 的描述 | 输入 | mluOpTensorDescriptor_t | / | 无 |
| x | 输入 | 输入 | half， float | NLC | 无 |
| w | 权重 | 输入 | fp32 | ARRAY | 无 |
| k | 窗口 | 输入 | int | / | k ≤ 9 |
| y | 输出 | 输出 | half, float | NLC | 无 |
### 1.4 算子限制
| 限制类型 | 详细说明 |
| --- | --- |
| 数据类型限制 | x、y 一致 |
| 规模限制 | y：[N, C, L]<br>`k <= 9`，`L >= 1` |
| 原位限制 | 无 |
有一行散文，读不出来。
### 1.5 验收标准
#### 1.5.1 精度验收标准
- 300系列的评价公式为`diff1、diff2、diff4`，验收标准采用动态阈值[10，10，1]。
- 静态阈值 diff3 = 0；
#### 1.5.2 性能验收标准
## 3 实现方案设计
```
# not a heading: a code block
```
### 3.7 测试用例设计
| (x.shape, w.shape) | dtype |
| --- | --- |
| ([2, 64, 128], [64, 3]) | half |
### 3.8 算子防呆检查
- 列出算子需要做的防呆，比如
1、指针为空防呆；
2、`k` 必须为奇数，且 `k <= 9`；
   续行：`L >= 1`。
3、`z` dim(5) 必须为 1。
"""


def _facts(text=SMALL_DOC):
    return docread.read_facts(parse_doc(text, "small.md"))


def test_reader_reads_the_skeleton_with_lines():
    facts = {f.key: f for f in _facts()}
    ln = lambda needle: _line(SMALL_DOC, needle)   # noqa: E731
    assert facts["dtype x float16,float32"].line == ln("| x | 输入")       # full-width comma
    assert facts["layout x NLC"].line == ln("| x | 输入")
    assert facts["dtype w float32"].value == ["float32"]          # fp32
    assert "tensor handle" not in facts and "tensor x_desc" not in facts
    assert facts["param k int"].line == ln("| k | 窗口")
    assert facts["limit 1.3 k"].bounds == (("k", "<=", 9),)       # ≤ folded
    assert facts["shape x N,C,L"].line == facts["shape w C,K"].line == ln("输入Shape")   # a merged cell
    assert facts["shape y N,C,L"].line == ln("| 规模限制 | y")                       # a shape as a limit
    assert ("L", ">=", 1) in facts["limit 1.4 规模限制"].bounds
    assert "limit 1.4 原位限制" not in facts                       # 无: nothing stated


def test_reader_reads_accuracy_network_and_checks():
    facts = _facts()
    rules = [f.value for f in facts if f.kind == "accuracy"]
    assert rules[0]["mode"] == "dynamic" and rules[0]["metrics"] == ["diff1", "diff2", "diff4"]
    assert rules[0]["rates"] == [10.0, 10.0, 1.0] and rules[0]["series"] == ["300"]
    assert rules[1]["mode"] == "static" and rules[1]["thresholds"] == {"diff3": 0.0}
    assert [f.value for f in facts if f.kind == "network"] == [[[2, 64, 128], [64, 3]]]
    keys = {f.key: f for f in facts}
    assert "template 3.8(1)" in keys and "check 3.8(1)" not in keys   # the template's own item
    assert keys["check 3.8(2)"].bounds == (("k", "<=", 9), ("L", ">=", 1))   # with its continuation
    assert not any(f.kind == "network" and "not a heading" in f.text for f in facts)


def test_what_the_reader_cannot_place_is_reported_unread():
    unread = [f for f in _facts() if f.kind == "unread"]
    assert [f.line for f in unread] == [_line(SMALL_DOC, "有一行散文")]


def test_a_doc_is_bounded(tmp_path):
    big = tmp_path / "big.md"
    big.write_bytes(b"a" * (MAX_DOC_BYTES + 1))
    result = CliRunner().invoke(main, ["audit", "--lint", str(big)])
    assert result.exit_code == 2 and "over" in result.output and "Traceback" not in result.output
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"\xff\xfe# x")
    result = CliRunner().invoke(main, ["audit", "--lint", str(bad)])
    assert result.exit_code == 2 and "not UTF-8" in result.output
    # a long line of brackets and comparisons: read in linear time, cut, reported
    hostile = "### 1.4 算子限制\n| 限制类型 | 详细说明 |\n|---|---|\n| 规模限制 | " + "[" * 6000 + "a<" * 3000 + " |\n"
    facts = docread.read_facts(parse_doc(hostile))
    assert any(f.kind == "unread" and "cap" in str(f.value) for f in facts)


def test_lint_names_the_docs_own_defects(tmp_path):
    doc = tmp_path / "small.md"
    doc.write_text(SMALL_DOC.replace("`k <= 9`，`L", "`k <= 7`，`L"), encoding="utf-8")
    result = CliRunner().invoke(main, ["audit", "--lint", str(doc)])
    assert result.exit_code == 1
    assert "'z' is not in the interface" in result.output
    assert "'k' has different upper limits" in result.output


SMALL_CPP = """
static mluOpStatus_t fooParamCheck(const mluOpTensorDescriptor_t x_desc, int k) {
  PARAM_CHECK("[mluOpFoo]", x_desc != NULL);
  PARAM_CHECK("[mluOpFoo]", x_desc->getDim() == 3);  // rank
  PARAM_CHECK_EQ("[mluOpFoo]", x_desc->getDimIndex(1), w_desc->getDimIndex(0));
  PARAM_CHECK_V2("[mluOpFoo]", (x_desc->getDtype() == MLUOP_DTYPE_HALF) ||
                 (x_desc->getDtype() == MLUOP_DTYPE_FLOAT), "only half or float " << 1);
  /* if (k > 1) { return MLUOP_STATUS_BAD_PARAM; } is a comment */
  if (foo_desc->k > 9) {
    LOG(ERROR) << "k > 9";
    return MLUOP_STATUS_NOT_SUPPORTED;
  }
  TENSOR_NUM_CHECK("[mluOpFoo]", x_num, LARGE_TENSOR_NUM, "");
  return MLUOP_STATUS_SUCCESS;
}
"""

SMALL_HEADER = """/*!
 * @par Scale Limitation
 * - The \\b k should be odd and \\b k <= 9.
 * @par Note
 * - None.
 */
mluOpStatus_t MLUOP_WIN_API
mluOpFoo(mluOpHandle_t handle, int k);
"""


def test_code_reader(tmp_path):
    cpp = tmp_path / "foo.cpp"
    cpp.write_text(SMALL_CPP)
    facts = coderead.for_op(coderead.read_code(cpp), "foo")
    atoms = {a: f for f in facts for a in f.atoms}
    assert atoms["x.ndim == 3"].line == 4
    assert atoms["x.shape[1] == w.shape[0]"].line == 5
    assert atoms["x.dtype in ('float16', 'float32')"].line == 6
    limit = atoms["k <= 9"]
    assert (limit.line, limit.status) == (9, "not_supported")
    assert sum(f.condition.startswith("x_num") for f in facts) == 1
    assert not any("k > 1" in f.condition or "k <= 1" in f.atoms for f in facts)   # comments are not code
    header = tmp_path / "mlu_op.h"
    header.write_text(SMALL_HEADER)
    scale = coderead.for_op(coderead.read_code(header), "foo")
    assert [(f.line, f.bounds) for f in scale] == [(3, (("k", "<=", 9),))]


# ---- audit on committed specs, with contradictions planted into copies ----------------------

CODE_FOR_CARAFE = """
mluOpStatus_t CarafeForwardParamCheck(mluOpHandle_t handle) {
  PARAM_CHECK("[mluOpCarafeForward]", input_desc->getDim() == 4);
  if (carafe_desc->kernel_size > 45) {
    return MLUOP_STATUS_NOT_SUPPORTED;
  }
}
"""


def _audit(tmp_path, spec_text, *extra):
    spec = tmp_path / "carafe_forward.yaml"
    spec.write_text(spec_text, encoding="utf-8")
    code = tmp_path / "carafe.cpp"
    code.write_text(CODE_FOR_CARAFE)
    out = tmp_path / "audit.json"
    result = CliRunner().invoke(main, ["audit", str(spec), "--docs-root", str(DOCS), "--code", str(code),
                                       "--json", str(out), *extra])
    return result, (json.loads(out.read_text())["specs"][0]["findings"] if out.exists() else None), spec


def _line(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@needs_docs
def test_the_committed_spec_audits_clean_and_planted_contradictions_are_named(tmp_path):
    original = (REPO / "specs" / "carafe_forward.yaml").read_text(encoding="utf-8")
    result, findings, _ = _audit(tmp_path, original)
    assert result.exit_code == 0, result.output
    assert findings == []
    doc = DOCS / "000_7f4125b5744775f6.txt"
    doc_text = doc.read_text(encoding="utf-8")

    changed = original.replace('require: "kernel_size <= 45"', 'require: "kernel_size <= 40"')
    result, findings, spec = _audit(tmp_path, changed)
    assert result.exit_code == 1
    bound = next(f for f in findings if f["id"] == "contradicts bound kernel_size <= 45")
    assert bound["spec"] == f"{spec}:{_line(changed, 'id: kernel_size_max')}"   # the check's line
    assert bound["source"].startswith(str(doc.resolve()) + ":")
    assert int(bound["source"].rsplit(":", 1)[1]) in (_line(doc_text, "kernel_size <= 45，"),
                                                       _line(doc_text, "参数限制检查"))

    removed = re.sub(r"  - id: scale_factor_max\n(    .*\n)+", "", original)
    assert removed != original
    result, findings, spec = _audit(tmp_path, removed)
    assert result.exit_code == 1
    lacks = next(f for f in findings if f["id"] == "lacks bound scale_factor <= 5")
    assert lacks["kind"] == "lacks" and lacks["spec"] == f"{spec}:{_line(removed, 'checks:')}"
    assert lacks["source"].split(":")[0] == str(doc.resolve())

    dropped = original.replace("metrics: [diff1, diff2], rates: [10, 10]", "metrics: [diff1], rates: [10]")
    assert dropped != original
    result, findings, spec = _audit(tmp_path, dropped)
    assert result.exit_code == 1
    acc = next(f for f in findings if f["id"] == "contradicts accuracy")
    assert acc["spec"] == f"{spec}:{_line(dropped, 'criteria:')}"
    assert acc["source"] == f"{doc.resolve()}:{_line(doc_text, '精度验收标准：')}"
    assert f"{spec}:" in result.output and str(doc.resolve()) in result.output


@needs_docs
def test_a_waiver_accepts_one_finding_with_its_reason(tmp_path):
    original = (REPO / "specs" / "carafe_forward.yaml").read_text(encoding="utf-8")
    changed = original.replace('require: "kernel_size <= 45"', 'require: "kernel_size <= 40"\n'
                               '    waivers: [{finding: "contradicts bound kernel_size <= 45", reason: "a test"}]')
    result, findings, _ = _audit(tmp_path, changed)
    assert result.exit_code == 0, result.output
    assert [f["waived"] for f in findings] == ["a test"]
    bad = original.replace('require: "kernel_size <= 45"', 'require: "kernel_size <= 45"\n    waivers: [{finding: x}]')
    result, _, _ = _audit(tmp_path, bad)
    assert result.exit_code == 2 and "a waiver is {finding" in result.output


@needs_docs
def test_every_committed_spec_audits_clean_against_its_docs():
    failing = {}
    for spec in sorted((REPO / "specs").glob("*.yaml")):
        result = CliRunner().invoke(main, ["audit", str(spec), "--docs-root", str(DOCS)])
        if result.exit_code != 0:
            failing[spec.name] = result.output[-600:]
    assert not failing, failing


# ---- draft ----------------------------------------------------------------------------------

@needs_docs
def test_a_draft_once_its_todos_are_done_generates_and_passes_the_reference(tmp_path):
    runner = CliRunner()
    draft = tmp_path / "three_nn_forward.yaml"
    result = runner.invoke(main, ["draft", str(DOCS / "mlu-ops" / "three_nn_forward.md"), "-o", str(draft)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["gen", str(draft), "-o", str(tmp_path / "refused")])
    assert result.exit_code == 2 and "TODO(s) left" in result.output
    todo_lines = [line for line in result.output.splitlines() if "three_nn_forward.md:" in line and ": TODO(" in line]
    assert todo_lines and all(re.match(rf"{re.escape(str(draft))}:\d+: TODO", line) for line in todo_lines)

    spec = yaml.safe_load(draft.read_text(encoding="utf-8"))
    committed = yaml.safe_load((REPO / "specs" / "three_nn_forward.yaml").read_text(encoding="utf-8"))
    assert spec["dtypes"] == ["float16", "float32"] and spec["inputs"]["known"]["shape"] == ["B", "M", 3]
    assert spec["criteria"]["dynamic"]["metrics"] == ["diff1", "diff2", "diff4"]
    assert len(spec["suites"]["network"]["cases"]) == 8
    # The person's decisions, made here as a contributor would:
    spec["summary"] = "the three nearest known points of every unknown point"
    spec["reference"] = committed["reference"]
    for t in spec["inputs"].values():
        t["values"] = {"dist": "uniform", "low": -10.0, "high": 10.0}
    for kind in ("inputs", "outputs"):
        for name, t in spec[kind].items():
            t["axes"] = committed[kind][name]["axes"]
    spec["output_criteria"] = committed["output_criteria"]
    rank = {"id": "unknown_3d", "doc": "3.8(3)", "message": "unknown must be 3-D", "require": "unknown.ndim == 3",
            "violate": {"shape": {"unknown": [2, 5, 3, 1]}}}
    spec["checks"] = [rank] + [{"id": c["id"], "doc": c["doc"], "message": c["message"], "require": "True",
                                "untestable": "left to the C-level backend"} for c in spec["checks"]]
    spec["suites"]["random"]["dims"] = {"B": {"min": 1, "max": 2}, "N": {"min": 1, "max": 16},
                                        "M": {"min": 1, "max": 16}}
    spec["suites"]["invalid"]["base"]["dims"] = {"B": 2, "N": 5, "M": 6}
    draft.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "cases"
    result = runner.invoke(main, ["gen", str(draft), "--suite", "random,invalid", "--count", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert len(list((out / "three_nn_forward" / "random").glob("*.opcase"))) == 3
    assert [p.stem.split("-")[0] for p in (out / "three_nn_forward" / "invalid").glob("*.opcase")] == ["unknown_3d"]
    result = runner.invoke(main, ["run", str(out), "--backend", "reference"])
    assert result.exit_code == 0, result.output[-1500:]
