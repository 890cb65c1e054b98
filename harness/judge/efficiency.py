"""io_efficiency and compute_efficiency of a timed case (gen/core/README.md, Accuracy: performance).

    io_efficiency      = theory_io_bytes / (time * memory_bandwidth)
    compute_efficiency = theory_ops      / (time * peak_ops[dtype])

``theory_io_bytes`` is every present input and every output, element count x element size.
``theory_ops`` is the spec's ``theory_ops`` expression, evaluated over the case's params, the
dims (every plain name in a spec shape, bound to the case's size there: ``shape: [N, H, W, C]``
binds N, H, W and C) and the tensors themselves (``y.size``, ``x.shape[3]``).

A device profile is a YAML file::

    name: MLU370-X8                 # optional, shown in reports
    memory_bandwidth: 307.2 GB/s    # bytes per second: a number, or with a unit
    peak_ops:                       # operations per second, per case dtype
      float32: 24 TOPS
      float16: 96e12
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from gen.core.backend import TensorInfo
from gen.core.expr import ExprError, evaluate
from gen.core.registry import spec_for

_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKMGTP]?)\s*(?:B/s|OPS|OP/s|FLOPS|FLOP/s|ops/s)?\s*")


class ProfileError(Exception):
    """A device profile that cannot be used."""


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    memory_bandwidth: float                         # bytes per second
    peak_ops: dict = field(default_factory=dict)   # dtype name -> operations per second


def _rate(value, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        m = _RATE.fullmatch(str(value))
        if not m:
            raise ProfileError(f"{where}: {value!r} is not a rate like 307.2e9, '307.2 GB/s' or '24 TOPS'")
        number = float(m.group(1)) * _SI[m.group(2).upper()]
    if not number > 0:
        raise ProfileError(f"{where}: must be positive, got {value!r}")
    return number


def load_profile(path) -> DeviceProfile:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict) or "memory_bandwidth" not in raw or not isinstance(raw.get("peak_ops"), dict):
        raise ProfileError(f"{path}: a device profile needs memory_bandwidth and a peak_ops mapping "
                           f"(dtype -> ops per second)")
    unknown = sorted(set(raw) - {"name", "memory_bandwidth", "peak_ops"})
    if unknown:
        raise ProfileError(f"{path}: unknown key(s) {unknown}")
    return DeviceProfile(name=str(raw.get("name", path.stem)),
                         memory_bandwidth=_rate(raw["memory_bandwidth"], f"{path}: memory_bandwidth"),
                         peak_ops={str(k): _rate(v, f"{path}: peak_ops.{k}") for k, v in raw["peak_ops"].items()})


def theory_io_bytes(case) -> int:
    tensors = [t for t in case.inputs.values() if not t.absent] + list(case.outputs.values())
    return sum(int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize for t in tensors)


def theory_ops(case) -> tuple[float | None, str]:
    """(ops, '') or (None, why not)."""

    try:
        spec = spec_for(case.op)
    except Exception as exc:  # noqa: BLE001 - a missing or broken spec only costs the ops figure
        return None, f"no spec for {case.op}: {exc}"
    if not spec.theory_ops:
        return None, f"spec {spec.path.name} states no theory_ops"
    env: dict = {}
    for name, tensor_spec in {**spec.inputs, **spec.outputs}.items():
        t = case.inputs.get(name) or case.outputs.get(name)
        if t is None or t.absent:
            continue
        for entry, size in zip(tensor_spec.shape, t.shape):
            if isinstance(entry, str) and entry.isidentifier():
                env.setdefault(entry, int(size))
    env.update({name: TensorInfo(tuple(t.shape), np.dtype(t.dtype).name, t.layout)
                for name, t in {**case.inputs, **case.outputs}.items() if not t.absent})
    env.update(case.params)
    try:
        return float(evaluate(spec.theory_ops, env)), ""
    except (ExprError, TypeError, ValueError) as exc:
        return None, f"theory_ops {spec.theory_ops!r}: {exc}"


def efficiency(case, seconds: float, profile: DeviceProfile) -> dict:
    """The efficiency record of one case timed at ``seconds`` per call."""
    io_bytes = theory_io_bytes(case)
    ops, why = theory_ops(case)
    record = {"device": profile.name, "seconds": seconds, "theory_io_bytes": io_bytes, "theory_ops": ops,
              "io_efficiency": None, "compute_efficiency": None, "bound": "", "note": why}
    if not seconds > 0:
        record["note"] = "no time to divide by"
        return record
    record["io_efficiency"] = io_bytes / (seconds * profile.memory_bandwidth)
    peak = profile.peak_ops.get(case.dtype)
    if ops is not None and peak is None:
        record["note"] = f"device profile gives no peak_ops for {case.dtype or 'this dtype'}"
    elif ops is not None:
        record["compute_efficiency"] = ops / (seconds * peak)
    # The larger efficiency names the bottleneck (gen/core/README.md, Accuracy).
    record["bound"] = ("compute" if (record["compute_efficiency"] or 0.0) > record["io_efficiency"] else "io")
    return record
