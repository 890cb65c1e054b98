"""Backends for the tests of `opcase run`, loadable by worker processes as `run_backends:NAME`.

Each misbehaves for one real reason (a planted wrong element, a crash, a hang, a write into its
inputs...), so that the tests can check the status that reason must produce.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import numpy as np

import gen
from gen.core.backend import InvalidArgument
from harness.backends.builtin import reference

_reference = reference()
# Where `one_wrong_element` plants its error: the middle of every axis.
PLANTED_ERROR = 1.5


def planted_index(shape) -> tuple:
    return tuple(s // 2 for s in shape)


def one_wrong_element(request):
    """Right everywhere but one element of each output, which is off by PLANTED_ERROR."""
    out = dict(_reference.run(request))
    for name, array in out.items():
        if array.size:
            array = array.copy()
            array[planted_index(array.shape)] += PLANTED_ERROR
            out[name] = array
    return out


def off_by_1e4(request):
    """Every output off by a relative 1e-4: within mlu-ops' usual 3e-3, over the docs' dynamic thresholds."""
    return {name: (array * (1 + 1e-4)).astype(array.dtype) for name, array in _reference.run(request).items()}


def zeroes_last_output(request):
    """Right, but for the call's last output, which is all zeros."""
    out = dict(_reference.run(request))
    last = list(request.outputs)[-1]
    out[last] = np.zeros_like(out[last])
    return out


def nan_at_planted(request):
    """Right everywhere but at planted_index, where it writes NaN (or 1.0 where the golden is not finite)."""
    out = dict(_reference.run(request))
    for name, array in out.items():
        if array.size:
            array = array.copy()
            where = planted_index(array.shape)
            array[where] = 1.0 if not np.isfinite(array[where]) else np.nan
            out[name] = array
    return out


def rejects_everything(request):
    raise InvalidArgument("this backend implements nothing")


def no_checks(request):
    """Computes without checking its arguments: invalid calls go through."""
    golden = gen.golden(request.op, request.inputs, request.params)
    return {name: np.asarray(golden[name]).astype(o.dtype) if np.shape(golden[name]) == tuple(o.shape)
            else np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}


def writes_input(request):
    """Clears its input in place, as a kernel that uses its input as scratch would."""
    for array in request.inputs.values():
        array[...] = 0
    return _reference.run(request)


def scribbles_on_input(request):
    """Writes into its inputs through a raw pointer, as C code that ignores read-only flags would."""
    out = _reference.run(request)
    for array in request.inputs.values():
        if array.nbytes and not isinstance(array, np.memmap):   # a memory map would fault instead
            ctypes.memset(array.ctypes.data, 0x41, array.nbytes)
    return out


def _collect(request) -> bool:
    return request.params.get("psa_type") == 0


def crashes_on_collect(request):
    """Dies of a segfault on COLLECT calls (psa_type 0), after saying something on stderr."""
    if _collect(request):
        print("kernel: about to read through a bad pointer", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    return _reference.run(request)


def hangs_on_collect(request):
    """Never returns on COLLECT calls (psa_type 0)."""
    if _collect(request):
        time.sleep(600)
    return _reference.run(request)


class Mixed:
    """A backend with a bit of everything, each tied to something the case says:

    float16: unsupported (skipped); psamask psa_type 1: one wrong element (failed);
    a 1x1 psamask mask: raises (error); everything else right.
    """
    name = "mixed"

    def supports(self, op, dtype):
        return dtype != "float16"

    def run(self, request):
        p = request.params
        if request.op == "psamask_forward" and p.get("h_mask") == 1 and p.get("w_mask") == 1:
            raise RuntimeError("mask 1x1 not implemented")
        if request.op == "psamask_forward" and p.get("psa_type") == 1:
            return one_wrong_element(request)
        return _reference.run(request)


mixed = Mixed()


class NoHalf:
    """The reference, declaring float16 unsupported."""
    name = "no-half"

    def supports(self, op, dtype):
        return dtype != "float16"

    def run(self, request):
        return _reference.run(request)


no_half = NoHalf()


def _timed(microseconds: float):
    """The reference, reporting its own kernel time as ``microseconds`` on every call."""
    def run(request):
        return _reference.run(request), microseconds * 1e-6
    run.measures_time = True
    return run


timed_50us = _timed(50)
timed_54us = _timed(54)
timed_56us = _timed(56)
timed_1000us = _timed(1000)
timed_1030us = _timed(1030)
timed_1050us = _timed(1050)


def says_time_but_returns_dict(request):
    return _reference.run(request)


says_time_but_returns_dict.measures_time = True


class OnlyPsamask:
    """The reference for psamask alone: every other kernel is declared unsupported (supports())."""
    name = "only-psamask"

    def supports(self, op, dtype):
        return op.startswith("psamask")

    def run(self, request):
        if not request.op.startswith("psamask"):
            raise AssertionError("called on a kernel its supports() declined")
        return _reference.run(request)


only_psamask = OnlyPsamask()
