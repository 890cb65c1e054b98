"""Turning a spec into suites of cases with goldens and thresholds."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
import contextlib
import re
import sys

import numpy as np

from gen.core.backend import InvalidArgument
from gen.core import case_keys
from gen.core.casefile import (Case, CaseFileError, DEFAULT_SIDECAR_BYTES, PrewrittenSidecar, SidecarWriter,
                               SpillFile, Tensor, Threshold, Undetermined, drop_pages, element_count, find,
                               key_state, read_checked, read_envelope, save)
from gen.core.checks import failures, first_failure
from gen.core.descriptor import case_seed
from gen.core.metrics import StreamingCompare, compare
from gen.core.overlap import Background, Prefetched
from gen.core.registry import MMCV_EMULATION, kernel_function
from gen.core.rounding import round_to
from gen.core.spec import CHECK_STATUSES, SUITES, Spec, SpecError, absent_tensors
from gen.core.thresholds import baseline_over_the_cap_is_the_rule, dynamic_threshold, static_thresholds
from gen.core.timing import call
from gen.core.verdict import CaseResult, FAILED, judge, mistrust, request_for, validate_outputs
from gen.plan import (GenerationError, INDEX_WIDTH_LIMITS, Layout, NARROWEST_ONLY, Plan, RANDOM_ATTEMPTS,
                      STRESS_REGIMES, case_path, channel_tail_entries, channel_tails, explicit_of, hunt_plans,
                      interface_params, layout_of, plan_fast_path, plan_invalid, plan_of, plan_random, plan_stress,
                      plan_suite, planned_case, regime_dtypes, shapes_of, slug, tensor_infos, total_bytes, values_ref)
from gen.sampled import GoldenCapture, SAMPLE_ABOVE_ELEMENTS, Units, estimate, sample_order
from gen.values import ValueContext, draw

# Defined beside this module and re-exported, so that `from gen.generate import NAME` keeps working.
__all__ = ["GenerationError", "INDEX_WIDTH_LIMITS", "Layout", "NARROWEST_ONLY", "Plan", "RANDOM_ATTEMPTS",
           "STRESS_REGIMES", "case_path", "channel_tail_entries", "channel_tails", "explicit_of",
           "hunt_plans", "interface_params", "layout_of", "plan_fast_path", "plan_invalid", "plan_of",
           "plan_random", "plan_stress", "plan_suite", "planned_case", "regime_dtypes", "shapes_of", "slug",
           "tensor_infos", "total_bytes", "values_ref"]


GENERATOR_VERSION = "opcase-gen 1"


# Outputs larger than this (bytes, all outputs of a case) are streamed to disk piece by piece.
STREAM_OUTPUT_BYTES = 256 << 20


# In a streamed case, an input drawn from a plain distribution is written straight to its
# sidecar file above this size, and read back memory-mapped, never whole in memory.
SPILL_INPUT_BYTES = 256 << 20


# A streamed golden's pieces are computed on a thread of their own, at most this many ahead of
# their rounding, writing and comparing (gen.core.overlap).
GOLDEN_PIECES_AHEAD = 2


# Tensors over this many bytes go to sidecar files (gen.core.casefile.save).
SIDECAR_BYTES = DEFAULT_SIDECAR_BYTES


_FILLER = {"dist": "randint", "low": 0, "high": 3}


def draw_inputs(spec: Spec, plan: Plan, lay: Layout, allocate=np.empty) -> dict[str, np.ndarray | None]:
    rng = np.random.default_rng(plan.seed)
    random_values = (spec.suites.get("random") or {}).get("values") or {}
    ctx = ValueContext(shapes=lay.shapes, dtypes=lay.dtypes, dims=plan.dims, params=plan.params, dtype=plan.dtype)
    for name, t in spec.inputs.items():
        if name in plan.omit or name in ctx.inputs:
            continue
        dist = plan.values.get(name) or (random_values.get(name) if plan.suite == "random" else None) or t.values
        try:
            ctx.inputs.update(draw(rng, name, dist, ctx, spec.path, allocate))
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            if plan.violation is not None:
                # A broken case may have shapes a realistic generator cannot serve; its values
                # do not matter, the call must be rejected before it reads them.
                ctx.inputs.update(draw(rng, name, _FILLER, ctx, spec.path))
                continue
            raise GenerationError(f"{spec.path}: case {plan.suite}/{plan.name}: drawing '{name}': "
                                  f"{type(exc).__name__}: {exc}") from None
    return {name: (None if name in plan.omit else ctx.inputs[name]) for name in spec.inputs}


class Prewrites:
    """The sidecar files of a case being made, written and hashed on threads of their own
    (gen.core.casefile.PrewrittenSidecar, SpillFile, SidecarWriter) while generation goes on:
    a tensor's bytes as soon as they are final, while the golden or the baseline is computed.

    ``pending``: (tensor or None, its writer); ``attach(case)`` waits for each and hands it to its
    tensor (save() then moves the file into place, as it would have written it), ``discard()``
    removes whatever was not moved (all of it, when generation failed)."""

    def __init__(self, path: Path):
        self.path = path
        self.pending: list = []

    def start(self, tensors) -> None:
        """Start writing each tensor save() would put in a sidecar and nothing writes yet."""
        taken = {id(t) for t, _ in self.pending}
        for t in tensors:
            if t.absent or t.data is None or t.prewritten is not None or id(t) in taken:
                continue
            if t.data.nbytes > SIDECAR_BYTES:
                self.pending.append((t, PrewrittenSidecar(self.path, t.data)))

    def attach(self, case: Case) -> Case:
        for tensor, writer in self.pending:
            if tensor is not None:
                tensor.prewritten = writer.finish()
        return case

    def discard(self) -> None:
        for _, writer in self.pending:
            writer.discard()


@dataclass
class Drawn:
    """A case with its inputs drawn (Generator.draw), not yet written."""
    case: Case
    writes: Prewrites
    streamed: bool

    def discard(self) -> None:
        self.writes.discard()


class Generator:
    """Builds cases of one spec.  ``baseline`` is a loaded harness Backend for dynamic thresholds."""

    def __init__(self, spec: Spec, baseline=None):
        self.spec = spec
        self.baseline = baseline
        self._baseline_of_checked_calls = None if baseline is None else of_checked_calls(baseline)

    def _expect_valid(self, plan: Plan, lay: Layout) -> None:
        infos = tensor_infos(self.spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit)
        if plan.violation is None:
            first_failure(self.spec, infos, plan.params, spec_errors=True)   # a check that raises: the spec's error
        failed = [c.id for c in failures(self.spec, infos, plan.params)]
        if plan.violation is None and failed:
            raise SpecError(self.spec.path, plan.line, f"case {plan.suite}/{plan.name} breaks check(s) {failed}")
        # An invalid case must break its check and no other: then a backend that lacks
        # exactly that check is the one that accepts it, whatever order it checks in.
        if plan.violation is not None and failed != [plan.violation.id]:
            got = f"it breaks {failed}" if failed else "every check still holds"
            raise SpecError(self.spec.path, plan.violation.line,
                            f"check '{plan.violation.id}': its violation does not isolate it ({got})")

    def write(self, plan: Plan, path: Path, drawn: "Drawn | None" = None) -> Path:
        """Build the case of ``plan`` and save it at ``path`` (from ``drawn``, what draw(plan, path)
        gave, if given: its inputs drawn ahead, while an earlier case was being made).

        Outputs over STREAM_OUTPUT_BYTES, of a reference that can yield its outputs in pieces
        (``<fn>_blocks``), are computed and written piece by piece, so that no golden is ever
        whole in memory, let alone in float64.  Each sidecar file is written and hashed on a
        thread of its own as soon as its tensor is final (Prewrites)."""
        drawn = drawn or self.draw(plan, path)
        writes = drawn.writes
        try:
            if drawn.streamed:
                case = self._streamed_goldens(plan, drawn.case, Path(path), writes)
            else:
                case = self._built(plan, drawn.case, writes.start)
            return save(writes.attach(case), path, SIDECAR_BYTES)
        finally:
            writes.discard()

    def draw(self, plan: Plan, path: Path) -> "Drawn":
        """The case of ``plan`` with its inputs drawn, for write(plan, path, drawn): in memory, or
        where write() streams the goldens, the large plain-drawn inputs in files beside ``path``.
        Its sidecar files are being written already; ``Drawn.discard()`` removes them."""
        writes = Prewrites(Path(path))
        try:
            if builds_in_memory(self.spec, plan):
                case = self._with_inputs(plan)
                writes.start(case.inputs.values())
                return Drawn(case, writes, streamed=False)
            return Drawn(self._streamed_inputs(plan, Path(path), writes), writes, streamed=True)
        except BaseException:
            writes.discard()
            raise

    def _streamed_inputs(self, plan: Plan, path: Path, writes: "Prewrites") -> Case:
        """The inputs of a case whose goldens are streamed: each plain-drawn one over
        SPILL_INPUT_BYTES straight into its file."""
        spills: list[SpillFile] = []

        def allocate(shape, dtype):
            if element_count(shape) * np.dtype(dtype).itemsize <= SPILL_INPUT_BYTES:
                return np.empty(shape, dtype)
            spills.append(SpillFile(path, shape, dtype))
            writes.pending.append((None, spills[-1]))     # removed if generation fails
            return spills[-1].array

        case = self._with_inputs(plan, allocate)
        self._seal_spilled(case, spills, writes)
        writes.start(case.inputs.values())
        return case

    def _streamed_goldens(self, plan: Plan, case: Case, path: Path, writes: "Prewrites") -> Case:
        """``case`` with its goldens streamed to their files (Generator.write)."""
        writers = {n: SidecarWriter(path, t.shape, t.dtype) for n, t in case.outputs.items()}
        writes.pending.extend((None, w) for w in writers.values())
        self._stream_goldens(case, self.spec.reference_blocks_fn, writers)
        if not plan.zero_golden_ok and any(w.total and not w.any_nonzero for w in writers.values()):
            raise GenerationError(f"{self.spec.path}:{plan.line}: case {plan.suite}/{plan.name}: a golden "
                                  f"is all zeros; change the case or mark it zero_golden_ok")
        for name, writer in writers.items():
            case.outputs[name].prewritten = writer.finish()
        return case

    @staticmethod
    def _seal_spilled(case: Case, spills: list, writes: "Prewrites") -> None:
        """Inputs drawn into files: from now on read-only mappings, saved by moving the file (each
        hashed on a thread of its own while the golden is computed)."""
        for spill in spills:
            tensor = next(t for t in case.inputs.values() if t.data is spill.array)
            tensor.data = spill.seal_later()
            writes.pending[writes.pending.index((None, spill))] = (tensor, spill)

    def _stream_goldens(self, case: Case, pieces_fn, writers: dict) -> None:
        """Compute the goldens piece by piece and round, write, sample and compare each as it comes.
        The pieces are computed on a thread of their own, GOLDEN_PIECES_AHEAD ahead of the rest
        (and of a whole-case baseline run), each exactly as in one thread."""
        present = {n: t.data for n, t in case.inputs.items() if not t.absent}
        out_shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
        with contextlib.ExitStack() as running:
            golden = running.enter_context(Prefetched(
                pieces_fn(present, dict(case.params), compute_dtype=np.float64, out_shapes=out_shapes),
                GOLDEN_PIECES_AHEAD))
            units = self._baseline_units(case, present)
            capture = None if units is None else GoldenCapture(units, sample_order(units, case.seed, out_shapes),
                                                               out_shapes)
            baseline_piece = None if units is not None else self._baseline_pieces(case, present, pieces_fn, running)
            stats = {n: StreamingCompare(t.dtype) for n, t in case.outputs.items()}
            baseline_nonzero = dict.fromkeys(case.outputs, False)
            for name, index, block in golden:
                dtype = case.outputs[name].dtype
                start = flat_start(index, out_shapes[name])
                writers[name].write(start, round_to(block, dtype))
                if capture is not None:
                    capture.add(name, start, block)
                if baseline_piece is not None:
                    piece = baseline_piece(name, index)
                    baseline_nonzero[name] = baseline_nonzero[name] or bool(np.any(piece))
                    stats[name].add(piece, block)
                for array in present.values():
                    drop_pages(array)   # a mapped input's pages, read for this piece, need not stay
        if capture is not None:
            case.criteria = self._sampled_criteria(case, units, capture)
        elif baseline_piece is not None:
            baseline_stats = {n: st.result() for n, st in stats.items()}
            for name, st in baseline_stats.items():
                self._refuse_baseline_output(case, name, writers[name].any_nonzero and not baseline_nonzero[name],
                                             st["nan_inf_mismatch"])
            case.criteria = self._dynamic_criteria(case, baseline_stats)
        else:
            case.criteria = self._criteria(case, None)

    def _baseline_pieces(self, case: Case, present: dict, pieces_fn, running: contextlib.ExitStack):
        """f(output, index) -> the baseline's piece matching the golden's, or None for static criteria.

        The built-in lowp baseline is the same reference in float32, run in step with the golden
        (on a thread of its own, stopped by ``running``), so it too never holds a whole output; any
        other baseline runs on the whole case first."""
        if self.spec.criteria.mode != "dynamic":
            return None
        if self.baseline is None:
            raise GenerationError(f"{self.spec.path}: dynamic thresholds need a baseline backend")
        if self.baseline.name == "lowp":
            lowp = iter(running.enter_context(Prefetched(pieces_fn(
                present, dict(case.params), compute_dtype=np.float32,
                out_shapes={n: tuple(t.shape) for n, t in case.outputs.items()}), GOLDEN_PIECES_AHEAD)))

            def in_step(name, index):
                low_name, low_index, block = next(lowp)
                if (low_name, low_index) != (name, index):
                    raise GenerationError(f"{self.spec.reference}_blocks yields different pieces in float32")
                return round_to(block, case.outputs[name].dtype)
            return in_step
        outputs = self._baseline_outputs(case)
        return lambda name, index: outputs[name][index]

    def build(self, plan: Plan, ready=lambda tensors: None) -> Case:
        """The case of ``plan``, whole in memory; ``ready(tensors)`` is called with its inputs once
        drawn and its outputs once rounded (Generator.write starts writing them then)."""
        return self._built(plan, self._with_inputs(plan), ready)

    def _built(self, plan: Plan, case: Case, ready) -> Case:
        """``case`` (its inputs drawn) completed: goldens, thresholds, refusal of a trivial one."""
        ready(case.inputs.values())
        if case.expect != "ok":
            return case
        self.complete(case, ready)
        self._refuse_trivial(plan, case)
        return case

    def _with_inputs(self, plan: Plan, allocate=np.empty) -> Case:
        """The case of ``plan`` with its inputs drawn and no goldens yet (rejected cases: complete).
        ``allocate``: see gen.values.draw."""
        spec = self.spec
        plan = replace(plan, params=interface_params(spec, plan.params))
        lay = layout_of(spec, plan)
        self._expect_valid(plan, lay)
        inputs = draw_inputs(spec, plan, lay, allocate)
        case = Case(op=spec.op, suite=plan.suite, name=plan.name, params=dict(plan.params),
                    inputs={n: Tensor(n, lay.shapes[n], np.dtype(lay.dtypes[n]), lay.layouts[n], data=a,
                                      absent=a is None) for n, a in inputs.items()},
                    outputs={n: Tensor(n, lay.shapes[n], np.dtype(lay.dtypes[n]), lay.layouts[n])
                             for n in spec.outputs if n not in absent_tensors(spec, plan.omit)},
                    seed=plan.seed, generator_version=GENERATOR_VERSION, spec_sha256=spec.sha256,
                    spec_path=spec.path.name, note=plan.note, zero_golden_ok=plan.zero_golden_ok, dtype=plan.dtype,
                    nondeterministic_sums=spec.nondeterministic_sums)
        if plan.violation is not None:
            case.expect = CHECK_STATUSES[plan.violation.status]
            case.expect_check = plan.violation.id
            case.expect_message = plan.violation.message
        return case

    def complete(self, case: Case, ready=lambda tensors: None) -> Case:
        """Fill in the goldens (rounded once from float64) and the thresholds of a case that has its
        inputs; ``ready(outputs)`` is called once the goldens are rounded, before the thresholds.
        Its call must meet the spec's checks (a plan's does, _expect_valid; complete_imported checks
        an imported case first): the baseline does not make them again (of_checked_calls)."""
        baseline = self._baseline_beside_golden(case)
        try:
            golden64 = self._golden(case)
            for name, t in case.outputs.items():
                t.data = round_to(golden64[name], t.dtype)
            ready(case.outputs.values())
            case.criteria = self._criteria(case, golden64, baseline)
        finally:
            if baseline is not None:
                baseline.wait()
        self._judge_exactly(case)
        return case

    def _baseline_beside_golden(self, case: Case) -> Background | None:
        """A baseline that runs on the whole case (dynamic thresholds, not sampled) started on a
        thread of its own, to run while the golden is computed; None where there is none."""
        if self.spec.criteria.mode != "dynamic" or self.baseline is None:
            return None
        if self._baseline_units(case, {n: t.data for n, t in case.inputs.items() if not t.absent}) is not None:
            return None
        return Background(lambda: self._baseline_outputs(case))

    def _judge_exactly(self, case: Case) -> None:
        """The outputs the spec judges exactly (``output_criteria``): an "exact" threshold of 0, and the
        elements where the golden is not determined with their acceptable answers (beside static or
        dynamic thresholds on the other outputs)."""
        present = {n: t.data for n, t in case.inputs.items() if not t.absent}
        for name, criterion in self.spec.output_criteria.items():
            case.criteria[name] = [Threshold(metric="exact", value=0.0, provenance=(
                f"exact, spec {self.spec.path.name} output_criteria: every element the golden determines "
                f"must be equal; near-ties accept any of their answers"))]
            if criterion.undetermined:
                answers = self.spec.resolve(criterion.undetermined, "undetermined")(
                    present, dict(case.params), case.dtype, case.outputs[name].data)
                if answers:
                    case.undetermined[name] = Undetermined.of(answers)

    def _golden(self, case: Case) -> dict:
        spec = self.spec
        present = {n: t.data for n, t in case.inputs.items() if not t.absent}
        out_shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
        results = spec.reference_fn(present, dict(case.params), compute_dtype=np.float64, out_shapes=out_shapes)
        for name, shape in out_shapes.items():
            got = np.shape(results.get(name))
            if name not in results or tuple(got) != tuple(shape):
                raise GenerationError(f"{spec.reference}: output '{name}' has shape {got}, spec says {shape} "
                                      f"(case {case.suite}/{case.name})")
        return results

    def _refuse_trivial(self, plan: Plan, case: Case) -> None:
        """A case `opcase run` would mistrust (gen.core.verdict.mistrust: a golden all zeros, constant or
        empty, or one an all-zero output would pass) cannot tell a correct kernel from one that writes
        nothing: refused here, at the spec's line, rather than found at run time."""
        if plan.zero_golden_ok:
            return
        for name, t in case.outputs.items():
            if t.data.size and not np.any(t.data):
                raise GenerationError(f"{self.spec.path}:{plan.line}: case {plan.suite}/{plan.name}: golden "
                                      f"'{name}' is all zeros; change the case or mark it zero_golden_ok")
        doubt = mistrust(case)
        if doubt:
            raise GenerationError(f"{self.spec.path}:{plan.line}: case {plan.suite}/{plan.name}: `opcase run` would "
                                  f"mistrust it ({doubt}); change the case or mark it zero_golden_ok")

    def _criteria(self, case: Case, golden64: dict | None, baseline: Background | None = None) -> dict:
        """The case's thresholds (``baseline``: the whole baseline's outputs being computed, if started)."""
        spec = self.spec
        if spec.criteria.mode == "static":
            return {name: static_thresholds(spec, t.dtype.name) for name, t in case.outputs.items()
                    if name not in spec.output_criteria}
        if self.baseline is None:
            raise GenerationError(f"{spec.path}: dynamic thresholds need a baseline backend")
        units = self._baseline_units(case, {n: t.data for n, t in case.inputs.items() if not t.absent})
        if units is not None:
            shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
            capture = GoldenCapture(units, sample_order(units, case.seed, shapes), shapes)
            for name, values in golden64.items():
                capture.add(name, 0, values)
            return self._sampled_criteria(case, units, capture)
        outputs = baseline.result() if baseline is not None else self._baseline_outputs(case)
        judged = self._dynamically_judged(case)
        for name in judged:
            self._refuse_baseline_output(case, name, bool(np.any(golden64[name])) and not np.any(outputs[name]))
        criteria = self._dynamic_criteria(case, {name: compare(outputs[name], golden64[name], t.dtype)
                                                 for name, t in judged.items()})
        # Judged as `opcase run` would judge it: a baseline that fails the thresholds it sets (over
        # the cap, NaN/Inf where the golden has none) sets nothing but the cap, the loosest one.
        # (zero_golden_ok: whether the case can catch a zeroing bug is no question about the baseline.)
        verdict = CaseResult(path="")
        judge(replace(case, criteria=criteria, zero_golden_ok=True), outputs, verdict)
        if verdict.status == FAILED and not self._over_cap_is_the_docs(verdict):
            raise self._baseline_error(case, f"fails the thresholds it sets (they would be just the docs' "
                                             f"cap): {verdict.message}")
        return criteria

    def _over_cap_is_the_docs(self, verdict) -> bool:
        """gen.core.thresholds.baseline_over_the_cap_is_the_rule, for this generator's baseline."""
        failed = [v for verdicts in verdict.thresholds.values() for v in verdicts if not v["passed"]]
        return baseline_over_the_cap_is_the_rule(
            failed, any(stats["nan_inf_mismatch"] for stats in verdict.metrics.values()), self.baseline.name,
            self.spec.criteria.baseline)

    def _baseline_outputs(self, case: Case) -> dict:
        """The baseline's outputs for a valid case, called and checked as `opcase run` calls and
        checks a backend's (its own timing, if it measures it, is dropped)."""
        try:
            outputs, _, _ = call(self._baseline_of_checked_calls, request_for(case))
        except InvalidArgument as exc:
            raise self._baseline_error(case, f"rejected a valid call: {exc}") from None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the baseline raises ends generation
            raise self._baseline_error(case, f"raised {type(exc).__name__}: {exc}") from None
        problem = validate_outputs(case, outputs)
        if problem:
            raise self._baseline_error(case, problem)
        return outputs

    def _refuse_baseline_output(self, case: Case, name: str, zeros: bool, nan_inf_mismatch: int = 0) -> None:
        """Refuse a baseline output of all zeros (``zeros``: where the golden is not) or with NaN/Inf
        out of place: either would set the loosest threshold there is."""
        if zeros:
            raise self._baseline_error(case, f"output '{name}' is all zeros and the golden is not")
        if nan_inf_mismatch:
            raise self._baseline_error(case, f"output '{name}' has NaN/Inf at {nan_inf_mismatch} position(s) "
                                             f"where the golden does not, or the reverse")

    def _baseline_error(self, case: Case, reason: str) -> GenerationError:
        """One line: which case, which baseline, why its thresholds would mean nothing."""
        first_line = (reason.strip().splitlines() or [""])[0]
        return GenerationError(f"{case.op}/{case.suite}/{case.name}: baseline {self.baseline.name}: {first_line}")

    def _dynamic_criteria(self, case: Case, baseline_stats: dict, note=lambda name, metric: "") -> dict:
        """Thresholds from the baseline's metrics against the float64 golden, per output;
        ``note(output, metric)`` ends each provenance."""
        spec = self.spec
        criteria = {}
        for name, t in self._dynamically_judged(case).items():
            stats = baseline_stats[name]
            criteria[name] = [dynamic_threshold(m, float(stats[m] if stats[m] is not None else 0.5), rate,
                                                t.dtype.name, self.baseline.name, spec.doc, note(name, m))
                              for m, rate in zip(spec.criteria.metrics, spec.criteria.rates)]
        return criteria

    def _dynamically_judged(self, case: Case) -> dict:
        """The case's outputs that dynamic thresholds judge: all but those the spec judges exactly
        (``output_criteria``: integer outputs, which have no dynamic floor or cap; _judge_exactly
        gives them their exact threshold)."""
        return {name: t for name, t in case.outputs.items() if name not in self.spec.output_criteria}

    def _baseline_units(self, case: Case, present: dict) -> Units | None:
        """The baseline's output units (gen.sampled), where it offers them and the case's outputs
        have more than SAMPLE_ABOVE_ELEMENTS elements; else None (the baseline runs whole)."""
        if self.spec.criteria.mode != "dynamic" or self.baseline is None:
            return None
        if sum(int(np.prod(t.shape, dtype=np.int64)) for t in case.outputs.values()) <= SAMPLE_ABOVE_ELEMENTS:
            return None
        units_fn = baseline_units_fn(self.baseline.name, self.spec)
        if units_fn is None:
            return None
        return units_fn(present, dict(case.params), out_shapes={n: tuple(t.shape) for n, t in case.outputs.items()})

    def _sampled_criteria(self, case: Case, units: Units, capture: GoldenCapture) -> dict:
        """Thresholds from the baseline's metrics estimated on a sample of units (gen.sampled)."""
        found = estimate(units, capture, {n: t.dtype for n, t in case.outputs.items()}, self.spec.criteria.metrics,
                         lambda name, mismatches: self._refuse_baseline_output(case, name, False, mismatches))
        return self._dynamic_criteria(case, found.stats, found.note)


def of_checked_calls(baseline):
    """``baseline`` (a Backend) as gen calls it: its run_checked as its run where it has one.  Every case gen
    completes meets the spec's checks before its baseline runs (each plan is checked before its inputs
    are drawn), so they are not made again there: they cost more than a small case's baseline arithmetic.
    `opcase run` calls run(), the checks and all."""
    if getattr(baseline, "run_checked", None) is None:
        return baseline
    return replace(baseline, run=baseline.run_checked)


def baseline_units_fn(baseline: str, spec: Spec):
    """``<op>_units`` beside the baseline's kernel (gen.sampled), for the built-in baselines that
    have one (mmcv: the family's mmcv_emulation); None for any other baseline or kernel."""
    if baseline != "mmcv":
        return None
    function = kernel_function(MMCV_EMULATION, spec.op)
    if function is None:
        return None
    return getattr(sys.modules[function.__module__], f"{function.__name__}_units", None)


def flat_start(index: tuple, shape) -> int:
    """Flat C-order position of the first element of ``array[index]`` (ints, then at most one slice)."""
    first = [i.start or 0 if isinstance(i, slice) else int(i) for i in index]
    first += [0] * (len(shape) - len(first))
    return int(np.ravel_multi_index(first, shape)) if all(shape) else 0


def builds_in_memory(spec: Spec, plan: Plan) -> bool:
    """Whether Generator.write builds the whole case in memory; else it streams the goldens to
    disk piece by piece (a reference with ``<fn>_blocks``, outputs over STREAM_OUTPUT_BYTES)."""
    if plan.violation is not None or spec.reference_blocks_fn is None:
        return True
    lay = layout_of(spec, replace(plan, params=interface_params(spec, plan.params)))
    output_bytes = sum(element_count(lay.shapes[n]) * np.dtype(lay.dtypes[n]).itemsize for n in spec.outputs)
    return output_bytes <= STREAM_OUTPUT_BYTES


def input_bytes_in_memory(spec: Spec, plan: Plan) -> int:
    """Bytes of the inputs Generator.draw holds in memory (not those it draws into files)."""
    lay = layout_of(spec, replace(plan, params=interface_params(spec, plan.params)))
    streamed = not builds_in_memory(spec, plan)
    sizes = [element_count(lay.shapes[n]) * np.dtype(lay.dtypes[n]).itemsize for n in spec.inputs]
    return sum(size for size in sizes if not (streamed and size > SPILL_INPUT_BYTES))


def written_whole(path: Path, spec: Spec, plan: Plan, baseline: str | None) -> bool:
    """Whether ``path`` already holds the case of ``plan``, whole, as this generator would write it
    now: its envelope's checksum holds (and its keyed one, where this user's ledger has it), it names the same spec version, generator, suite, name and
    seed (and baseline, for dynamic thresholds), and its sidecars have their recorded lengths.
    How an interrupted `opcase gen` resumes without writing those cases again."""
    if not path.is_file():
        return False
    try:
        checksum, msg = read_checked(path)
    except CaseFileError:
        return False
    if key_state(path, checksum) == case_keys.REFUSED:
        return False              # rewritten since this user's opcase wrote it: written again
    if (msg.op, msg.suite, msg.name, msg.seed, msg.spec_sha256, msg.generator_version) != \
            (spec.op, plan.suite, plan.name, plan.seed, spec.sha256, GENERATOR_VERSION):
        return False
    baselines = {t.baseline for c in msg.criteria for t in c.thresholds if t.baseline}
    if baselines - {baseline or spec.criteria.baseline}:
        return False
    for tensor in (*msg.inputs, *msg.outputs):
        if tensor.HasField("sidecar"):
            name = tensor.sidecar.path   # read from the file: only a plain name beside it is looked at
            sidecar = path.parent / name
            if name != Path(name).name or name in ("", ".", "..") or not sidecar.is_file() \
                    or sidecar.stat().st_size != tensor.sidecar.length:
                return False
    return True


def foreign_case(out_dir: Path, spec: Spec, base_seed: int = 0) -> tuple[Path, str] | None:
    """A case already in OUT/OP written from another version of ``spec``, by another generator
    or with another base seed (with what it was written from), or None: one directory never mixes
    them (a suite of two seeds would hold two random cases where each seed makes one)."""
    for path in find([Path(out_dir) / spec.op]) if (Path(out_dir) / spec.op).is_dir() else []:
        try:
            msg = read_envelope(path)
        except CaseFileError:
            continue                  # not a case anyone can run; gen does not judge it
        if (msg.spec_sha256, msg.generator_version) != (spec.sha256, GENERATOR_VERSION):
            return path, f"spec sha256 {msg.spec_sha256[:12]}, {msg.generator_version}"
        if _made_with_seed(msg, base_seed) is False:
            return path, f"made with another --seed than {base_seed}"
    return None


def _made_with_seed(msg, base_seed: int) -> bool | None:
    """Whether a case of a suite gen makes was made with ``base_seed`` (its seed is the one that
    base seed gives its label); None for a case of another origin (described, imported)."""
    if msg.suite == "random":
        index = re.fullmatch(r"r(\d+)(-.*)?", msg.name)
        if index is None:
            return None
        label = f"r{int(index.group(1))}"
    elif msg.suite in SUITES and msg.suite != "hunt":   # a hunt case's seed is data of the spec
        label = msg.name
    else:
        return None
    return case_seed(base_seed, msg.op, msg.suite, label) == msg.seed
