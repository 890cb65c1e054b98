"""The backend interface: one kernel call (Request, its tensors described by TensorInfo) and what a
backend is (Backend); what gen hands its baseline and the harness any implementation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gen.core.casefile import element_count


class InvalidArgument(Exception):
    """Raised by a backend that rejects a call (the design doc's BAD_PARAM)."""


class NotSupported(Exception):
    """Raised by a backend that does not implement a call's kernel, dtype or parameters: the case
    is ``skipped`` (with this message), not an error.  A backend that knows ahead of a call can say
    so with ``supports(op, dtype)`` instead (an attribute of its function or object)."""


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

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return element_count(self.shape)


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


# The backends gen and the harness know by name (harness.backends.load_backend loads them); a
# spec's dynamic baseline must be one of them.
BUILTIN_NAMES = ("reference", "lowp", "mmcv", "torch")
