"""The docs' threshold rule, in one place: a case's static thresholds, its dynamic ones from a
baseline's error (rate, floor, cap), when a baseline over the cap is a fact about the rule rather than
a fault, and the provenance line each threshold carries (gen/core/README.md, Accuracy, says the rule).

gen.generate computes the baseline's metrics and calls these; gen.core.verdict and the studies of a
suite (calibrate, power) ask the over-cap question of a judged case.
"""
from __future__ import annotations

from gen.core.casefile import Threshold
from gen.core.spec import SpecError

# mlu-ops' dynamic-threshold floors and caps, per output dtype (diff4 has no cap).
DYNAMIC_FLOOR = {"float16": 9.8e-4, "float32": 1.2e-7, "float64": 1.2e-7}
DYNAMIC_CAP = {"float16": 3e-2, "float32": 3e-3, "float64": 3e-3}


def static_thresholds(spec, dtype: str) -> list[Threshold]:
    """The spec's static thresholds for outputs of ``dtype`` (a metric's value per dtype, or "*")."""
    out = []
    for metric, value in spec.criteria.static.items():
        threshold = value.get(dtype, value.get("*")) if isinstance(value, dict) else value
        if threshold is None:
            raise SpecError(spec.path, 0, f"criteria.static.{metric} gives no threshold for {dtype}")
        out.append(Threshold(metric=metric, value=float(threshold),
                             provenance=f"static, design doc {spec.doc} (spec {spec.path.name})"))
    return out


def dynamic_threshold(metric: str, baseline_value: float, rate: float, dtype: str, baseline: str,
                      doc: str, note: str = "") -> Threshold:
    """The docs' rule: max(baseline value x rate, floor), capped (but diff4); ``note`` ends the provenance."""
    floor = DYNAMIC_FLOOR[dtype] * (rate if rate > 10 else 1.0)
    cap = DYNAMIC_CAP[dtype]
    value = max(baseline_value * rate, floor)
    if metric != "diff4":
        value = min(value, cap)
    return Threshold(metric=metric, value=float(value), baseline=baseline, baseline_value=float(baseline_value),
                     rate=float(rate), floor=floor, cap=cap if metric != "diff4" else 0.0,
                     provenance=f"dynamic, design doc {doc}: max({baseline} {metric} x {rate:g}, floor {floor:g})"
                                + (f", cap {cap:g}" if metric != "diff4" else "") + note
                                + (f"; the baseline itself is over the cap here ({metric} {baseline_value:.3g}): the "
                                   f"docs' rule fails its own reference interface on this case"
                                   if metric != "diff4" and baseline_value > cap else ""))


def baseline_over_the_cap_is_the_rule(failed: list[dict], nan_inf_mismatch: bool, baseline: str,
                                      reference_interface: str) -> bool:
    """Whether a baseline that fails the thresholds it sets is a fact to record, not a fault.

    The spec's own baseline is the doc's reference interface (mmcv): where its diff1 or diff2 is over
    the cap, the docs' rule gives the cap, which the reference itself fails; the case keeps that
    threshold and its provenance says so (dynamic_threshold).  Any other baseline over the cap, and
    any baseline with NaN/Inf out of place or a one-sided diff4, is unfit.  ``failed``: the verdicts
    of the thresholds it failed."""
    if baseline != reference_interface or nan_inf_mismatch:
        return False
    return all(v["metric"] != "diff4" and v["actual"] > v["cap"] for v in failed)


def only_over_the_cap(failing: list[dict], baseline: str) -> bool:
    """Whether every failed threshold verdict in ``failing`` was set by ``baseline`` and is one whose
    own error is over the cap: the docs' rule failing its own reference interface on the case."""
    return bool(failing) and all(
        v.get("baseline") == baseline and v.get("cap", 0.0) > 0 and v.get("baseline_value", 0.0) > v["cap"]
        for v in failing)
