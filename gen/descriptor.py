"""From a descriptor (gen.core.descriptor: the one-line grammar) to the plan and the case file it
stands for."""
from __future__ import annotations

import shutil

from gen.core.casefile import physical_memory
from gen.core.descriptor import DescriptorError, op_of
from gen.core.registry import UnknownOp, spec_for
from gen.core.spec import Spec, load_spec
from gen.generate import builds_in_memory, input_bytes_in_memory
from gen.jobs import generator_of
from gen.plan import Plan, case_path, explicit_of, hunt_plans, plan_of, planned_case, total_bytes, values_ref

# The descriptors' planning lives in gen.plan (it and the hunt suite's plan_suite need each other); these
# names stay importable from here, where a descriptor's case is written.
__all__ = ["explicit_of", "hunt_plans", "plan_of", "planned_case", "spec_of", "values_ref", "write_described"]


def spec_of(text: str, spec_paths=()) -> Spec:
    """The spec a descriptor is for: among ``spec_paths`` the one of its op, else the installed one."""
    op = op_of(text)
    for path in spec_paths:
        spec = load_spec(path)
        if spec.op == op:
            return spec
    if spec_paths:
        raise DescriptorError(f"descriptor {text!r}: none of the specs given is for {op}")
    try:
        return spec_for(op)
    except UnknownOp as exc:
        raise DescriptorError(str(exc)) from None


def write_described(text: str, out_dir, load_baseline, baseline: str | None = None, spec_paths=()):
    """Write the case of descriptor ``text`` under ``out_dir`` as `opcase gen` lays cases out;
    return its path.  ``baseline``: the backend for dynamic thresholds (default: the spec's),
    loaded with ``load_baseline`` (gen.jobs.BaselineLoader)."""
    spec = spec_of(text, spec_paths)
    plan = plan_of(spec, text)
    _refuse_past_memory(text, spec, plan, out_dir)
    return generator_of(spec, baseline, load_baseline).write(plan, case_path(out_dir, plan, spec.op))


def _refuse_past_memory(text: str, spec: Spec, plan: Plan, out_dir) -> None:
    """A descriptor names any dims: refuse, before numpy allocates, a case whose tensors held in
    memory while it is built would take over half the machine's memory (numpy's MemoryError, or the
    OOM killer, otherwise)."""
    held = total_bytes(spec, plan) if builds_in_memory(spec, plan) else input_bytes_in_memory(spec, plan)
    memory = physical_memory()
    if memory is not None and held > memory // 2:
        raise DescriptorError(f"descriptor {text!r}: building the case holds {held / 2**30:.1f} GiB in memory, "
                              f"over half of this machine's {memory / 2**30:.1f} GiB")
    try:
        free = shutil.disk_usage(out_dir).free
    except OSError:
        return   # the write itself then says what is wrong with the folder
    if total_bytes(spec, plan) > free:
        raise DescriptorError(f"descriptor {text!r}: the case takes {total_bytes(spec, plan) / 2**30:.1f} GiB, "
                              f"over the {free / 2**30:.1f} GiB free under {out_dir}")
