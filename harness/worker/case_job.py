"""A case as a worker receives it: its call only, never its file, its path or its goldens.

The judge loads every case itself (harness.judge.workers._Pool) and hands a worker what the backend is
to be called with: the op, the dtype, the params, the inputs' names, shapes, dtypes and layouts
(their values as sealed memory files, harness.worker.channel.sealed, whose descriptors ride with the
frame) and the outputs' shapes, dtypes and layouts.  No frame carries a path, so a worker has
nothing to open: the goldens stay in the judge's memory and in files the confined worker cannot
read (harness.worker.confine).
"""
from __future__ import annotations

import os

import numpy as np

from gen.core.casefile import Case, Tensor
from harness.worker import channel


def params_to_json(params: dict) -> dict:
    """A call's params as JSON: tuples (made lists by JSON) are marked, to come back as tuples."""
    def encode(value):
        if isinstance(value, tuple):
            return {"tuple": [encode(v) for v in value]}
        if isinstance(value, list):
            return [encode(v) for v in value]
        if isinstance(value, np.generic):
            return value.item()
        return value
    return {k: encode(v) for k, v in params.items()}


def params_from_json(params: dict) -> dict:
    def decode(value):
        if isinstance(value, dict) and set(value) == {"tuple"}:
            return tuple(decode(v) for v in value["tuple"])
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value
    return {k: decode(v) for k, v in params.items()}


def seal_inputs(case: Case) -> list[int]:
    """The sealed descriptors of a case's present inputs, in order (the caller closes them).  Sealed
    memory no one can write, so one set serves every worker the case goes to (its cold and warm pass)."""
    fds: list[int] = []
    try:
        for name, tensor in case.inputs.items():
            if not tensor.absent:
                fds.append(channel.sealed(name, tensor.data))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def pack(case: Case, fields: dict, fds: list[int] | None = None) -> tuple[dict, list[int]]:
    """The job of a case: (its frame, the sealed descriptors of its present inputs, in order).
    ``fields`` are the run's own (bitwise, timing); ``fds`` the inputs sealed already (seal_inputs),
    else they are sealed here.  The caller closes the descriptors once sent."""
    inputs = [[name, np.dtype(tensor.dtype).str, [int(n) for n in tensor.shape], tensor.layout, bool(tensor.absent)]
              for name, tensor in case.inputs.items()]
    if fds is None:
        fds = seal_inputs(case)
    outputs = [[name, np.dtype(t.dtype).str, [int(n) for n in t.shape], t.layout] for name, t in case.outputs.items()]
    doc = {"kind": "case", **fields, "op": case.op, "dtype": case.dtype, "expect": case.expect,
           "params": params_to_json(case.params), "inputs": inputs, "outputs": outputs}
    return doc, fds


def unpack(job: dict, fds: list[int]) -> Case | str:
    """The worker's Case of a job (inputs mapped read-only from their sealed files; outputs shape
    only), or why the job is unusable.  Takes the descriptors over."""
    fds = list(fds)
    try:
        inputs = {}
        for name, dtype, shape, layout, absent in job["inputs"]:
            data = None
            if not absent:
                if not fds:
                    return f"input {name} came without its values"
                mapped = channel.map_sealed(fds.pop(0), dtype, shape)
                if isinstance(mapped, str):
                    return f"input {name} {mapped}"
                data = mapped
            inputs[name] = Tensor(name, tuple(shape), np.dtype(dtype), layout, data, absent=bool(absent))
        outputs = {name: Tensor(name, tuple(shape), np.dtype(dtype), layout)
                   for name, dtype, shape, layout in job["outputs"]}
        return Case(op=job["op"], suite="", name="", params=params_from_json(job["params"]), inputs=inputs,
                    outputs=outputs, expect=job["expect"], dtype=job["dtype"])
    except (KeyError, TypeError, ValueError) as exc:
        return f"the case's job is malformed ({type(exc).__name__}: {exc})"
    finally:
        for fd in fds:
            os.close(fd)
