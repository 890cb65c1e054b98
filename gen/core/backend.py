"""The backend interface: one kernel call (Request, its tensors described by TensorInfo) and what a
backend is (Backend); what gen hands its baseline and the harness any implementation."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


class InvalidArgument(Exception):
    """Raised by a backend that rejects a call (the design doc's BAD_PARAM)."""


class NotSupported(Exception):
    """Raised by a backend that does not implement a call's kernel, dtype or parameters: the case
    is ``skipped`` (with this message), not an error.  A backend that knows ahead of a call can say
    so with ``supports(op, dtype)`` instead (an attribute of its function or object).  It is also
    mlu-ops' MLUOP_STATUS_NOT_SUPPORTED: an invalid case whose check has `status: not_supported`
    expects it (and InvalidArgument, BAD_PARAM, is then the wrong refusal)."""


# A case's expected outcome (gen.core.casefile.Case.expect): the call succeeds, is rejected as a bad
# parameter (InvalidArgument), or is declined as not supported (NotSupported).
EXPECT_OK, EXPECT_REJECTED, EXPECT_NOT_SUPPORTED = "ok", "rejected", "not_supported"
REFUSALS = {EXPECT_REJECTED: InvalidArgument, EXPECT_NOT_SUPPORTED: NotSupported}


class BackendLoadError(Exception):
    """A --backend value that does not name a usable backend."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as a call declares it: shape, dtype and layout (what a spec's checks ask of a tensor,
    and what a backend must return for an output)."""
    shape: tuple
    dtype: np.dtype
    layout: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @classmethod
    def exactly(cls, shape: tuple, dtype: np.dtype, layout: str) -> "TensorInfo":
        """TensorInfo(shape, dtype, layout) where ``shape`` is a tuple of Python ints already (an
        ndarray's or a TensorInfo's) and ``dtype`` a numpy dtype: what __post_init__ would store, without
        its conversions, which were a fifth of a small call's checks (one TensorInfo per tensor)."""
        info = object.__new__(cls)
        object.__setattr__(info, "shape", shape)
        object.__setattr__(info, "dtype", dtype)
        object.__setattr__(info, "layout", layout)
        return info

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        # The exact count as casefile.element_count gives it: the shape holds Python ints (__post_init__).
        return math.prod(self.shape)


@dataclass
class Request:
    """One call of a kernel.

    ``inputs`` holds numpy arrays in their declared dtypes and layouts (an optional
    input the case leaves out is not in the dict); ``outputs`` says what must come back.
    """
    op: str
    params: dict
    inputs: dict[str, np.ndarray]
    outputs: dict[str, TensorInfo]
    layouts: dict[str, str] = field(default_factory=dict)   # input name -> layout


@dataclass
class Backend:
    """A loaded backend: a name, where it came from, and its ``run``.

    ``supports(op, dtype)`` says whether it implements a kernel in a dtype; cases it
    does not support are skipped, not failed.
    """
    name: str
    origin: str
    run: Callable[[Request], dict]
    supports: Callable[[str, str], bool] = lambda op, dtype: True
    measures_time: bool = False   # run() returns (outputs, seconds) with its own kernel time
    # run() less the spec's parameter checks, for a caller that has made them on this very call (gen,
    # which checks every case when it plans it); None where run() is all there is.
    run_checked: Callable[[Request], dict] | None = None


# The backends gen and the harness know by name (harness.backends.load_backend loads them); a
# spec's dynamic baseline must be one of them.
BUILTIN_NAMES = ("reference", "lowp", "mmcv", "torch")
