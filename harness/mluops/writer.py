"""Write opcase cases as mlu-ops case files, and turn read mlu-ops cases into opcase cases.

A written case carries its inputs exactly (bit patterns in ``value_i`` / ``value_l``, big
tensors in raw data files beside the case) and, when the opcase case has goldens, the golden
outputs too with ``device: GENERATOR_CPU``, so that mluop_gtest compares against them instead
of computing its own baseline.  Thresholds are written in mluop_gtest's per-output ("dynamic")
form: ``Node.evaluation_criterion`` lists the metrics, each output's ``thresholds`` the values.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from gen.core import casefile
from gen.core.casefile import atomic_write
from harness.mluops import mluops_case_pb2 as pb
from harness.mluops.reader import ABSENT, MluCase
from harness.mluops.text_print import message_to_text
from harness.mluops.schema import CRITERION_OF, DTYPE_ENUM_OF, KernelFormat, kernel_format, layout_enum

DEFAULT_PATH_THRESHOLD_BYTES = 1 << 20
SUITE = "mluops"                     # the suite of every imported case
TEXT_SUFFIX = ".prototxt"
BINARY_SUFFIX = ".pb"
# A metric one output has and another lacks: the other's threshold (the form needs one per
# metric per output) never fails.
NOT_CHECKED = math.inf


def save_mluops(case: casefile.Case, path: str | os.PathLike, text: bool = False,
                path_threshold_bytes: int = DEFAULT_PATH_THRESHOLD_BYTES) -> Path:
    """Write ``case`` as an mlu-ops case: binary ``.pb``, or ``.prototxt`` with ``text``.

    mluop_gtest picks the format by suffix, so the matching one is appended when ``path``
    lacks it.  Tensors over ``path_threshold_bytes`` go to ``<case stem>.<in|out>.<tensor>.bin``
    beside the case.  Data files are written first, the case last, each atomically.
    """
    kernel = kernel_format(case.op)
    if kernel is None:
        raise ValueError(f"case {case.name}: kernel {case.op!r} has no mlu-ops case format in opcase")
    if case.expect != "ok":
        raise ValueError(f"case {case.name}: mlu-ops' case format cannot express an expected rejection")
    suffix = TEXT_SUFFIX if text else BINARY_SUFFIX
    path = Path(path)
    if path.suffix != suffix:
        path = path.with_name(path.name + suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    node = _node(case, kernel, path, path_threshold_bytes)
    payload = message_to_text(node).encode() if text else node.SerializeToString()
    atomic_write(path, payload)
    return path


def _node(case: casefile.Case, kernel: KernelFormat, path: Path, path_threshold_bytes: int) -> pb.Node:
    node = pb.Node(op_name=kernel.op)
    if kernel.op_type is not None:        # informational: mluop_gtest dispatches on op_name
        node.op_type = kernel.op_type
    _set_params(node, case, kernel)
    for tensor in _ordered(case, kernel.inputs, case.inputs, "input", kernel.optional_inputs):
        if tensor.data is None:
            raise ValueError(f"case {case.name}: input {tensor.name} has no data")
        node.input.append(_tensor_message(tensor, path, "in", path_threshold_bytes))
    outputs = _ordered(case, kernel.outputs, case.outputs, "output", kernel.optional_outputs)
    for tensor in outputs:
        node.output.append(_tensor_message(tensor, path, "out", path_threshold_bytes))
    _set_thresholds(node, case, kernel)
    # Parser::parse: any device but CPU makes mluop_gtest read the baseline from the outputs.
    node.device = pb.GENERATOR_CPU if all(t.data is not None for t in outputs) else pb.CPU
    return node


def _set_params(node: pb.Node, case: casefile.Case, kernel: KernelFormat) -> None:
    missing = [p for p in kernel.params if p not in case.params]
    if missing:
        raise ValueError(f"case {case.name}: {kernel.op} needs param(s) {', '.join(missing)}")
    if kernel.param_field is None:
        return
    message = getattr(node, kernel.param_field)
    for name in kernel.params:
        setattr(message, name, case.params[name])
    for name, value in kernel.fixed:
        setattr(message, name, value)


def _ordered(case: casefile.Case, names: tuple[str, ...], tensors: dict, kind: str,
             optional: tuple[str, ...]) -> list[casefile.Tensor]:
    """The tensors in mlu-ops' positional order; absent optional ones (always trailing) dropped."""
    unknown = set(tensors) - set(names)
    if unknown:
        raise ValueError(f"case {case.name}: {case.op} has no {kind}(s) {', '.join(sorted(unknown))}")
    ordered = []
    for name in names:
        tensor = tensors.get(name)
        if tensor is None or tensor.absent:
            if name not in optional:
                raise ValueError(f"case {case.name}: {kind} {name} is missing")
            continue
        ordered.append(tensor)
    return ordered


def _tensor_message(tensor: casefile.Tensor, case_path: Path, io: str, path_threshold_bytes: int) -> pb.Tensor:
    dtype = np.dtype(tensor.dtype)
    if dtype not in DTYPE_ENUM_OF:
        raise ValueError(f"tensor {tensor.name}: dtype {dtype.name} has no mlu-ops DataType")
    message = pb.Tensor(id=tensor.name, shape=pb.Shape(dims=[int(d) for d in tensor.shape]),
                        layout=layout_enum(tensor.layout), dtype=pb.DataType.Value(DTYPE_ENUM_OF[dtype]))
    if tensor.data is None:
        return message
    data = np.asarray(tensor.data)
    if tuple(data.shape) != tuple(tensor.shape) or data.dtype != dtype:
        raise ValueError(f"tensor {tensor.name}: data {data.dtype}{list(data.shape)} does not match "
                         f"declared {dtype}{list(tensor.shape)}")
    if data.nbytes > path_threshold_bytes:
        data_path = case_path.with_name(f"{case_path.stem}.{io}.{tensor.name}.bin")
        _write_data_file(data_path, data)
        message.path = data_path.name
    else:
        _set_values(message, data)
    return message


def _set_values(message: pb.Tensor, data: np.ndarray) -> None:
    """Each element's bits as mluop_gtest's parser reads them back (Parser::getTensorValueI/L):
    float as its int32 pattern, half as its int16 pattern, double as its int64 pattern."""
    flat = np.ascontiguousarray(data).reshape(-1)
    if flat.dtype == np.float32:
        message.value_i.extend(flat.view(np.int32).tolist())
    elif flat.dtype == np.float16:
        message.value_i.extend(flat.view(np.int16).tolist())
    elif flat.dtype == np.float64:
        message.value_l.extend(flat.view(np.int64).tolist())
    elif flat.dtype == np.int64:
        message.value_l.extend(flat.tolist())
    else:                            # int8, int16, int32, uint8, bool
        message.value_i.extend(flat.astype(np.int32).tolist())


def _write_data_file(path: Path, data: np.ndarray) -> None:
    """Raw little-endian elements, C order (bool as one byte each), written in blocks."""
    flat = np.ascontiguousarray(data).reshape(-1)
    if flat.dtype.byteorder == ">":
        flat = flat.astype(flat.dtype.newbyteorder("<"))
    raw = memoryview(flat.view(np.uint8))
    block = 16 << 20
    atomic_write(path, (raw[i:i + block] for i in range(0, len(raw), block)))


def _mluops_thresholds(case: casefile.Case, output: str) -> list:
    """The output's thresholds as mlu-ops can state them: an exact one (opcase's integer outputs) is
    DIFF3 0, the largest difference 0, where every element is determined; mlu-ops has no way to
    accept several answers at a near-tie, so an output with undetermined elements is not judged there."""
    thresholds = []
    for threshold in case.criteria.get(output, []):
        if threshold.metric != "exact":
            thresholds.append(threshold)
        elif output not in case.undetermined:
            thresholds.append(casefile.Threshold(metric="diff3", value=0.0, provenance=threshold.provenance))
    return thresholds


def _set_thresholds(node: pb.Node, case: casefile.Case, kernel: KernelFormat) -> None:
    metrics: list[str] = []
    for output in kernel.outputs:
        for threshold in _mluops_thresholds(case, output):
            if threshold.metric not in CRITERION_OF:
                raise ValueError(f"case {case.name}: metric {threshold.metric!r} has no mlu-ops criterion")
            if threshold.metric not in metrics:
                metrics.append(threshold.metric)
    node.evaluation_criterion.extend(pb.EvaluationCriterion.Value(CRITERION_OF[m]) for m in metrics)
    for output, message in zip(kernel.outputs, node.output):
        thresholds = {t.metric: t.value for t in _mluops_thresholds(case, output)}
        if not thresholds:
            message.threshold_use = 0
            continue
        message.threshold_use = 1
        message.thresholds.evaluation_threshold.extend(thresholds.get(m, NOT_CHECKED) for m in metrics)


# --------------------------------------------------------------------------- mlu-ops -> opcase

def case_from_mluops(mlu: MluCase, name: str) -> casefile.Case:
    """An opcase case with the mlu-ops case's kernel, params and inputs; outputs carry shape,
    dtype and layout only (goldens and thresholds are opcase's to compute)."""
    inputs = {}
    for tensor in mlu.input_tensors.values():
        if tensor.data is None and tensor.source != ABSENT:
            raise ValueError(f"{mlu.path}: input {tensor.name} has no data (load the case with_data)")
        inputs[tensor.name] = casefile.Tensor(name=tensor.name, shape=tensor.shape, dtype=tensor.dtype,
                                              layout=tensor.layout, data=tensor.data,
                                              absent=tensor.source == ABSENT)
    outputs = {t.name: casefile.Tensor(name=t.name, shape=t.shape, dtype=t.dtype, layout=t.layout)
               for t in mlu.outputs.values()}
    floating = [t.dtype for t in mlu.input_tensors.values() if np.issubdtype(t.dtype, np.floating)]
    return casefile.Case(op=mlu.op, suite=SUITE, name=name, params=dict(mlu.params), inputs=inputs,
                         outputs=outputs, dtype=floating[0].name if floating else "",
                         note=f"imported from mlu-ops case {mlu.path.name}")
