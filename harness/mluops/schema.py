"""What opcase's reader and writer share about mlu-ops' case files: which kernels they
describe and how their tensors, params, dtypes, layouts and metrics map to opcase's.

mluop_gtest identifies tensors by position (``tensor_desc_[i]`` in each kernel's executor),
not by id, so each kernel lists its opcase tensor names in mlu-ops' positional order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.mluops import mluops_case_pb2 as pb


class MluopsError(Exception):
    """An mlu-ops case file that opcase cannot use."""


class MluopsFormatError(MluopsError):
    """A malformed case file, or one whose data opcase cannot reproduce; names the file."""


class UnsupportedKernel(MluopsError):
    """A well-formed case for a kernel that is not one of opcase's seven."""

    def __init__(self, path, op_name: str):
        neighbour = " (an mlu-ops kernel whose cases sit beside opcase's)" if op_name in NEIGHBOUR_KERNELS else ""
        super().__init__(f"{path}: op_name {op_name!r} is not one of opcase's kernels{neighbour}; "
                         f"supported: {', '.join(sorted(KERNELS))}")
        self.op_name = op_name


@dataclass(frozen=True)
class KernelFormat:
    op: str                          # opcase's kernel name, also mlu-ops' op_name
    op_type: int                     # mlu-ops' OpType value
    inputs: tuple[str, ...]          # opcase names in mlu-ops' positional order
    outputs: tuple[str, ...]
    param_field: str                 # the Node field carrying the params
    params: tuple[str, ...]          # param names, the same in opcase and mlu-ops
    optional_inputs: tuple[str, ...] = ()  # trailing inputs a case may leave out


KERNELS = {k.op: k for k in [
    KernelFormat("psamask_forward", pb.PSAMASK_FORWARD, ("x",), ("y",), "psamask_forward_param",
                 ("psa_type", "h_mask", "w_mask")),
    KernelFormat("psamask_backward", pb.PSAMASK_BACKWARD, ("dy",), ("dx",), "psamask_backward_param",
                 ("psa_type", "h_mask", "w_mask")),
    KernelFormat("masked_im2col_forward", pb.MASKED_IM2COL_FORWARD, ("feature", "mask_h_idx", "mask_w_idx"),
                 ("data_col",), "masked_im2col_forward_param", ("kernel_h", "kernel_w", "pad_h", "pad_w")),
    KernelFormat("carafe_forward", pb.CARAFE_FORWARD, ("input", "mask"), ("output",), "carafe_param",
                 ("kernel_size", "group_size", "scale_factor")),
    KernelFormat("carafe_backward", pb.CARAFE_BACKWARD, ("input", "mask", "grad_output"),
                 ("grad_input", "grad_mask"), "carafe_param", ("kernel_size", "group_size", "scale_factor")),
    KernelFormat("deform_roi_pool_forward", pb.DEFORM_ROI_POOL_FORWARD, ("input", "rois", "offset"),
                 ("output",), "deform_roi_pool_forward_param",
                 ("pooled_height", "pooled_width", "spatial_scale", "sampling_ratio", "gamma"),
                 optional_inputs=("offset",)),
    KernelFormat("border_align_backward", pb.BORDER_ALIGN_BACKWARD, ("grad_output", "boxes", "argmax_idx"),
                 ("grad_input",), "border_align_param", ("pool_size",)),
]}

# mlu-ops kernels next to opcase's (their cases sit beside ours) that opcase does not implement.
NEIGHBOUR_KERNELS = {"border_align_forward", "deform_roi_pool_backward"}


def nominal_shape_of_absent(kernel: KernelFormat, name: str, params: dict,
                            shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape an optional input would have had (opcase records absent inputs with one)."""
    if kernel.op == "deform_roi_pool_forward" and name == "offset":
        return (shapes["rois"][0], 2, params["pooled_height"], params["pooled_width"])
    raise KeyError(f"{kernel.op} has no optional input {name!r}")


# mlu-ops DataType name <-> numpy dtype, for the dtypes opcase has.
DTYPES = {
    "DTYPE_HALF": np.dtype(np.float16),
    "DTYPE_FLOAT": np.dtype(np.float32),
    "DTYPE_DOUBLE": np.dtype(np.float64),
    "DTYPE_INT8": np.dtype(np.int8),
    "DTYPE_INT16": np.dtype(np.int16),
    "DTYPE_INT32": np.dtype(np.int32),
    "DTYPE_INT64": np.dtype(np.int64),
    "DTYPE_UINT8": np.dtype(np.uint8),
    "DTYPE_BOOL": np.dtype(np.bool_),
}
DTYPE_ENUM_OF = {dtype: name for name, dtype in DTYPES.items()}

LAYOUT_PREFIX = "LAYOUT_"            # mlu-ops' LAYOUT_NHWC is opcase's "NHWC"

# EvaluationCriterion -> opcase metric, as mluop_gtest's cvtProtoEvaluationCriterion maps them
# (MAPE is evaluated as DIFF1 and MAXAPE as DIFF3; SMAPE, SMAXAPE and NRMSE are rejected).
METRICS = {"DIFF1": "diff1", "MAPE": "diff1", "DIFF2": "diff2", "DIFF3": "diff3", "MAXAPE": "diff3",
           "DIFF3_2": "diff3_2", "DIFF4": "diff4", "DIFF_KL": "diff_kl"}
CRITERION_OF = {"diff1": "DIFF1", "diff2": "DIFF2", "diff3": "DIFF3", "diff3_2": "DIFF3_2",
                "diff4": "DIFF4", "diff_kl": "DIFF_KL"}


def layout_name(enum_value: int) -> str:
    return pb.TensorLayout.Name(enum_value)[len(LAYOUT_PREFIX):]


def layout_enum(name: str) -> int:
    try:
        return pb.TensorLayout.Value(LAYOUT_PREFIX + name)
    except ValueError:
        raise ValueError(f"layout {name!r} has no mlu-ops TensorLayout") from None
