"""opcase's float64 goldens against a real peer: mlu-ops' own CPU baselines, on the same inputs.

    python tests/bench/bench_peer.py --mluops CHECKOUT [--select TEXT] [--small-only] [--repeat R]
                                     [--rounds N] [--max-elements E] [--core C] [--baseline]

The peer is the ``cpuCompute`` of each kernel's gtest executor in Cambricon/mlu-ops
(test/mlu_op_gtest/pb_gtest/src/zoo/<kernel>/<kernel>.cpp: float32 scalar C++).  Nothing of mlu-ops is
in this repository: get a checkout yourself (``git clone https://github.com/Cambricon/mlu-ops``) and
give its root.  Without one (no --mluops and no $OPCASE_MLUOPS, or no zoo folder there) the benchmark
says so and exits 0.

How the peer is built: the executor's .cpp is read from the checkout, the definitions of the methods
that talk to the device or the framework (paramCheck, compute, workspace*, getTheory*, ...) are cut
out, and the rest (cpuCompute and its helpers, verbatim) is compiled with ``g++ -O2`` against a small
stand-in for the gtest framework written here (a parser that answers the tensors' shapes and the case's
params, the float32 input and output buffers): the same arithmetic mlu-ops' gtest runs, without its
protobuf reader, its device or its evaluator.  A kernel whose executor does not build that way is
reported and skipped.

Per kernel found in specs/ with a peer: the network cases (first dtype of each, as
tests/bench/bench_goldens.py takes them) and the docs' small cases (boundary cases named doc_example*
or mluops_case*; the smallest boundary case where a spec has none).  Both sides get the case's inputs
(opcase its float64 golden's, the peer the same values as float32), are timed in one worker process
pinned to one core (``taskset -c C``, default the last core) with every BLAS thread count at 1,
alternating peer and opcase --rounds times, each time the best of R calls in CPU seconds of the process
(calls under 20 ms as the mean of a batch).  The peer is timed as mluop_gtest runs it for a case: its
outputs malloc'd and zeroed (the executor's baselineOutputMalloc), then cpuCompute; the golden, too, makes
its outputs every call.  The peer's large outputs get huge pages as numpy gives the golden's (madvise from
4 MiB up): mlu-ops' own malloc'd buffers would be mapped 4 KiB at a time, which on this project's virtual
machines costs the peer up to 10x its computation and would say nothing about either side's arithmetic.
A second time, "warm", is cpuCompute alone into output buffers made once and reused: their pages are
already mapped, which no fresh output is (on a kernel that writes a large, mostly zero output, such as
psamask's, mapping the pages costs as much as the peer's whole computation).  The table: the times and
ratio = opcase / peer for both (below 1 opcase is faster); a case of under SMALL_ELEMENTS elements counts
as small wherever its spec lists it.  The load average is printed beside each row, since only ratios
taken in the same run mean anything on a shared machine.  The peer's time includes a few microseconds of ctypes call
and stand-in setup, which only matters on the smallest cases (it makes them look better for opcase by
that much).  --baseline adds two columns: the mmcv baseline that `opcase gen` calls beside the golden
of a kernel whose spec takes it for dynamic thresholds (as gen calls it: the emulation, in the case's own
dtype; the spec's checks are made once per case when gen plans it, not again by the baseline), its time
and its ratio to the peer's; "-" where the spec takes no such baseline.
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
ZOO = Path("test/mlu_op_gtest/pb_gtest/src/zoo")
_ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                      "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}
# Executor methods that need the device, the handle or the evaluator: their definitions are cut out.
_FRAMEWORK_METHODS = ("paramCheck", "compute", "workspaceMalloc", "workspaceFree", "getTheoryOps",
                      "getTheoryIoSize", "setMiscellaneousParam", "getCriterionsUse", "diffPreprocess",
                      "castIn", "cpuComputeFirst", "hostMalloc", "hostFree", "compareAcc")

# Headers of the device library the executors include: empty here.
_DEVICE_HEADERS = ("mlu_op.h", "core/type.h", "core/logging.h", "core/tensor.h", "core/context.h")

# A stand-in for mluop_gtest's executor.h: only what the cpuCompute of the zoo executors reads.
_FRAMEWORK_HEADER = r"""
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <map>
#include <set>
#include <string>
#include <vector>
#include "math.h"
namespace mluoptest {
struct NullStream { template <class T> NullStream &operator<<(const T &) { return *this; } };
#define VLOG(level) ::mluoptest::NullStream()
#define LOG(level) ::mluoptest::NullStream()
#define GTEST_CHECK(...) ((void)0)
struct FakeTensor {
  std::vector<int64_t> dims;
  int64_t getDimIndex(int i) const { return dims[i]; }
  int getDim() const { return (int)dims.size(); }
  int getDtype() const { return 0; }
  int getLayout() const { return 0; }
};
typedef FakeTensor *mluOpTensorDescriptor_t;
// NHWC tensors' dimensions, as mlu-ops' tensor helpers give them.
inline int mluOpGetTensordimN(const FakeTensor *t) { return (int)t->dims[0]; }
inline int mluOpGetTensordimH(const FakeTensor *t) { return (int)t->dims[1]; }
inline int mluOpGetTensordimW(const FakeTensor *t) { return (int)t->dims[2]; }
inline int mluOpGetTensordimC(const FakeTensor *t) { return (int)t->dims[t->dims.size() - 1]; }
struct CpuRuntime {
  void *allocate(size_t bytes) { return ::operator new(bytes); }
  template <class T> void deallocate(T *p) { ::operator delete((void *)p); }
};
enum TensorLayout { LAYOUT_NCHW, LAYOUT_NHWC, LAYOUT_HWCN, LAYOUT_NDHWC, LAYOUT_ARRAY, LAYOUT_NCDHW };
struct MetaTensor {
  FakeTensor *tensor = nullptr;
  std::vector<int64_t> shape;
  size_t shape_count = 1, total_count = 1, sizeof_dtype = 4;
};
struct Param {
  const std::map<std::string, double> *values;
  double get(const char *name) const { auto it = values->find(name); return it == values->end() ? 0 : it->second; }
#define OPCASE_PARAM(name) double name() const { return get(#name); }
  OPCASE_PARAM(pool_size) OPCASE_PARAM(h_mask) OPCASE_PARAM(w_mask) OPCASE_PARAM(psa_type)
  OPCASE_PARAM(im2col_step) OPCASE_PARAM(pooled_height) OPCASE_PARAM(pooled_width)
  OPCASE_PARAM(sampling_ratio) OPCASE_PARAM(spatial_scale) OPCASE_PARAM(gamma) OPCASE_PARAM(kernel_size)
  OPCASE_PARAM(group_size) OPCASE_PARAM(scale_factor) OPCASE_PARAM(dimnb) OPCASE_PARAM(kernel_h)
  OPCASE_PARAM(kernel_w) OPCASE_PARAM(pad_h) OPCASE_PARAM(pad_w)
#undef OPCASE_PARAM
};
struct ProtoNode {
  std::map<std::string, double> values;
  Param param() const { return Param{&values}; }
#define OPCASE_FIELD(name) Param name() const { return param(); } bool has_##name() const { return true; }
  OPCASE_FIELD(border_align_param) OPCASE_FIELD(psamask_forward_param) OPCASE_FIELD(psamask_backward_param)
  OPCASE_FIELD(ms_deform_attn_forward_param) OPCASE_FIELD(deform_roi_pool_forward_param)
  OPCASE_FIELD(deform_roi_pool_backward_param) OPCASE_FIELD(carafe_param)
  OPCASE_FIELD(masked_im2col_forward_param)
#undef OPCASE_FIELD
};
struct Parser {
  std::vector<MetaTensor> ins, outs;
  ProtoNode node;
  MetaTensor *input(int i) { return &ins[i]; }
  MetaTensor *output(int i) { return &outs[i]; }
  std::vector<MetaTensor> &inputs() { return ins; }
  std::vector<MetaTensor> &outputs() { return outs; }
  MetaTensor &getMetaTensor(int i) { return i < (int)ins.size() ? ins[i] : outs[i - ins.size()]; }
  int getInputNum() { return (int)ins.size(); }
  int getOutputNum() { return (int)outs.size(); }
  size_t getInputDataCount(int i) { return ins[i].total_count; }
  size_t getOutputDataCount(int i) { return outs[i].total_count; }
  ProtoNode *getProtoNode() { return &node; }
};
struct Evaluator { enum Formula { DIFF1, DIFF2, DIFF3, DIFF3_2, DIFF4 }; };
class Executor {
 public:
  virtual ~Executor() {}
  virtual void paramCheck() {}
  virtual void compute() {}
  virtual void cpuCompute() {}
  virtual void workspaceMalloc() {}
  virtual void workspaceFree() {}
  virtual void setMiscellaneousParam() {}
  virtual int64_t getTheoryOps() { return 0; }
  virtual int64_t getTheoryIoSize() { return 0; }
  virtual std::set<Evaluator::Formula> getCriterionsUse() const { return {}; }
  Parser *parser_ = nullptr;
  std::vector<MetaTensor> tensor_desc_;
  std::vector<float *> cpu_fp32_input_, cpu_fp32_output_;
  CpuRuntime cpu_runtime_;
};
}  // namespace mluoptest
// The executors' helpers are private; the entry below calls the ones compute() would (every standard
// header is in by now, so this reaches only the executor's own header).
#include <bitset>
#include <fstream>
#include <iostream>
#include <sstream>
#define private public
"""

# The entry point the benchmark calls: the tensors' shapes, buffers and the case's params in, cpuCompute run.
_ENTRY = r"""
namespace {
std::vector<mluoptest::FakeTensor> opcase_tensors;
mluoptest::Parser opcase_parser;
}
extern "C" int opcase_peer_run(int n_in, int n_out, const int *ranks, const int64_t *dims, float **buffers,
                               int n_params, const char **names, const double *values, int fresh_outputs) {
  using namespace mluoptest;
  opcase_tensors.assign(n_in + n_out, FakeTensor());
  opcase_parser = Parser();
  CLASS executor;
  executor.parser_ = &opcase_parser;
  for (int t = 0; t < n_in + n_out; ++t) {
    MetaTensor meta;
    for (int d = 0; d < ranks[t]; ++d) opcase_tensors[t].dims.push_back(*dims++);
    meta.tensor = &opcase_tensors[t];
    meta.shape = opcase_tensors[t].dims;
    for (int64_t d : meta.shape) meta.shape_count *= d;
    meta.total_count = meta.shape_count;
    (t < n_in ? opcase_parser.ins : opcase_parser.outs).push_back(meta);
    executor.tensor_desc_.push_back(meta);
    float *buffer = buffers[t];
    if (t >= n_in && fresh_outputs) {
      // What mluop_gtest does per case before cpuCompute (Executor::baselineOutputMalloc): the baseline's
      // outputs malloc'd and zeroed.  Large ones are given huge pages as numpy gives the golden's outputs
      // (madvise(MADV_HUGEPAGE) from 4 MiB up), so that both sides map their pages alike: plain malloc'd
      // memory is mapped 4 KiB at a time, several times slower on a virtual machine.
      const size_t bytes = meta.shape_count * sizeof(float);
      buffer = (float *)malloc(bytes + 1);
      if (buffer == nullptr) abort();   // the worker dies, and the driver says it failed
      if (bytes >= ((size_t)1 << 22)) {
        const uintptr_t page = 4096, start = ((uintptr_t)buffer + page - 1) & ~(page - 1);
        const uintptr_t end = ((uintptr_t)buffer + bytes) & ~(page - 1);
        if (end > start) madvise((void *)start, end - start, MADV_HUGEPAGE);
      }
      memset(buffer, 0, bytes);
    }
    (t < n_in ? executor.cpu_fp32_input_ : executor.cpu_fp32_output_).push_back(buffer);
  }
  for (int p = 0; p < n_params; ++p) opcase_parser.node.values[names[p]] = values[p];
  SETUP
  executor.cpuCompute();
  if (fresh_outputs)
    for (float *buffer : executor.cpu_fp32_output_) free(buffer);
  return 0;
}
"""


def class_name(kernel: str) -> str:
    return "".join(part.capitalize() for part in kernel.split("_")) + "Executor"


def _matching_brace(text: str, start: int) -> int:
    """The index just past the brace that closes the one at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced braces")


def peer_source(checkout: Path, kernel: str) -> str:
    """The executor's .cpp with the bodies of its framework methods emptied (their declarations stay, so
    that the class keeps its vtable)."""
    text = (checkout / ZOO / kernel / f"{kernel}.cpp").read_text(errors="replace")
    cls = class_name(kernel)
    pattern = re.compile(rf"^[^\n;{{}}]*\b{cls}::({'|'.join(_FRAMEWORK_METHODS)})\s*\(", re.M)
    position = 0
    while (found := pattern.search(text, position)) is not None:
        body = text.index("{", found.end())
        empty = "{}" if found.group(0).lstrip().startswith("void") else "{ return {}; }"
        text = text[:body] + empty + text[_matching_brace(text, body):]
        position = body + len(empty)
    return text


def build_peer(checkout: Path, kernel: str, into: Path) -> ctypes.CDLL:
    """The kernel's peer as a shared library (raises CalledProcessError with g++'s message)."""
    include = into / "include"
    include.mkdir(exist_ok=True)
    (include / "executor.h").write_text(_FRAMEWORK_HEADER)
    source = into / f"{kernel}_peer.cpp"
    for stub in _DEVICE_HEADERS:                   # included, but nothing cpuCompute uses is in them
        (include / stub).parent.mkdir(parents=True, exist_ok=True)
        (include / stub).write_text("#pragma once\n")
    text = peer_source(checkout, kernel)
    cls = class_name(kernel)
    # What compute() calls before the device runs, to read the params into members (emptied above).
    setup = " ".join(f"executor.{name}();" for name in ("initData", "init") if f"{cls}::{name}()" in text)
    source.write_text(text + _ENTRY.replace("CLASS", cls).replace("SETUP", setup))
    library = into / f"{kernel}_peer.so"
    subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-w", "-I", str(include),
                    "-I", str(checkout / ZOO / kernel), "-o", str(library), str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    return ctypes.CDLL(str(library))


# ----------------------------------------------------------------------------- the worker (one core)

# A case with fewer elements than this (inputs and outputs together) is timed as a small case even where a
# spec's network suite lists it (border_align_backward's doc_random_k5, 240 elements): the peer takes a few
# microseconds on it, so what it times is a call's fixed cost, which the small-case bound is about.
SMALL_ELEMENTS = 1000


def _cases(op: str, small_only: bool, max_elements: int | None):
    """(kind, name, case with inputs, plan): the network cases, then the docs' small cases."""
    from gen.core.registry import spec_for
    from gen.generate import Generator, plan_suite
    spec = spec_for(op)
    generator = Generator(spec)
    chosen, seen = [], set()
    if not small_only:
        for plan in plan_suite(spec, "network"):
            base = plan.name.rsplit("-", 1)[0]
            if base not in seen:
                seen.add(base)
                chosen.append(("network", base, plan))
    boundary = plan_suite(spec, "boundary")
    small = [p for p in boundary if p.name.startswith(("doc_example", "mluops_case"))]
    boundary = [p for p in boundary if "zero" not in p.name] or boundary     # something to compute
    if not small and boundary:
        small = [min(boundary, key=lambda p: int(np.prod([int(v) for v in p.dims.values()], dtype=np.float64)))]
    for plan in small:
        base = plan.name.rsplit("-", 1)[0]
        if base not in seen:
            seen.add(base)
            chosen.append(("small", base, plan))
    for kind, base, plan in chosen:
        case = generator._with_inputs(plan)
        elements = sum(int(np.prod(t.shape, dtype=np.int64)) for t in [*case.inputs.values(), *case.outputs.values()])
        if max_elements is not None and elements > max_elements:
            print(json.dumps({"kind": kind, "name": base, "skipped": f"{elements:,} elements"}), flush=True)
            continue
        if elements < SMALL_ELEMENTS:
            kind = "small"
        yield kind, base, case, plan, spec


def _best(fn, repeat: int) -> float:
    """Best CPU seconds per call of fn over `repeat` timings (a call under 20 ms: the mean of a batch)."""
    start = time.process_time()
    fn()
    first = time.process_time() - start
    batch = max(1, min(10000, int(0.02 / max(first, 1e-6))))
    best = first if batch == 1 else float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(batch):
            fn()
        best = min(best, (time.process_time() - start) / batch)
    return best


def _peer_call(library, spec, case, fresh_outputs: bool):
    """A function running the peer's cpuCompute once on the case's inputs (as float32): fresh_outputs, into
    outputs malloc'd and zeroed for the call, as mluop_gtest runs it per case; else into buffers made once
    and reused, whose pages are already mapped (a cost the golden, which makes its outputs, always pays)."""
    mapping = spec.mluops
    ins = [np.ascontiguousarray(case.inputs[n].data, dtype=np.float32) for n in mapping.inputs]
    outs = [np.zeros(case.outputs[n].shape, dtype=np.float32) for n in mapping.outputs]
    tensors = ins + outs
    ranks = (ctypes.c_int * len(tensors))(*[t.ndim for t in tensors])
    dims_list = [int(d) for t in tensors for d in t.shape]
    dims = (ctypes.c_int64 * max(1, len(dims_list)))(*dims_list)
    buffers = (ctypes.c_void_p * len(tensors))(*[t.ctypes.data for t in tensors])
    params = {k: float(v) for k, v in case.params.items() if isinstance(v, (int, float, bool))}
    names = (ctypes.c_char_p * max(1, len(params)))(*[k.encode() for k in params])
    values = (ctypes.c_double * max(1, len(params)))(*params.values())
    run = library.opcase_peer_run
    run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    fresh = int(fresh_outputs)
    return lambda: run(len(ins), len(outs), ranks, dims, buffers, len(params), names, values, fresh)


def _golden_call(spec, plan, case, streamed):
    """The case's float64 golden as `opcase gen` computes it; the spec's reference looked up once (as the
    generator does per case, not per call), so that a small case times the golden, not the lookup."""
    from gen.generate import builds_in_memory
    if not builds_in_memory(spec, plan):
        return streamed(spec, plan, case)
    reference = spec.reference_fn
    present = {n: t.data for n, t in case.inputs.items() if not t.absent}
    out_shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
    params = dict(case.params)
    return lambda: reference(present, params, compute_dtype=np.float64, out_shapes=out_shapes)


def _baseline_call(spec, case):
    """The mmcv baseline's call as `opcase gen` makes it beside the golden (gen.generate.of_checked_calls:
    the emulation on the case's own inputs), where the spec's dynamic thresholds take it; else None."""
    from gen.core.verdict import request_for
    from gen.generate import of_checked_calls
    from harness.backends import load_backend
    if spec.criteria.mode != "dynamic" or spec.criteria.baseline != "mmcv" or case.expect != "ok":
        return None
    baseline = of_checked_calls(load_backend("mmcv"))
    if not baseline.supports(spec.op, np.dtype(case.dtype).name):
        return None
    request = request_for(case)
    return lambda: baseline.run(request)


def worker(op: str, library_path: str, small_only: bool, repeat: int, rounds: int, max_elements: int | None):
    """Times peer, golden and (with --baseline) the mmcv baseline alternately per case; prints one JSON line
    per case."""
    sys.path.insert(0, str(REPO / "tests" / "bench"))
    from bench_goldens import golden_call
    library = ctypes.CDLL(library_path)
    for kind, name, case, plan, spec in _cases(op, small_only, max_elements):
        peer = _peer_call(library, spec, case, fresh_outputs=True)
        peer_warm = _peer_call(library, spec, case, fresh_outputs=False)
        golden = _golden_call(spec, plan, case, golden_call)
        baseline = _baseline_call(spec, case) if os.environ.get("OPCASE_BENCH_BASELINE") == "1" else None
        peer_times, warm_times, golden_times, baseline_times = [], [], [], []
        for _ in range(rounds):
            peer_times.append(_best(peer, repeat))
            warm_times.append(_best(peer_warm, repeat))
            golden_times.append(_best(golden, repeat))
            if baseline is not None:
                baseline_times.append(_best(baseline, repeat))
        print(json.dumps({"kind": kind, "name": name, "peer": min(peer_times), "peer_warm": min(warm_times),
                          "opcase": min(golden_times),
                          "mmcv": min(baseline_times) if baseline_times else None,
                          "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}), flush=True)


# ----------------------------------------------------------------------------- the driver

def _checkout(given: str | None) -> Path | None:
    path = given or os.environ.get("OPCASE_MLUOPS")
    if not path:
        return None
    root = Path(path).expanduser()
    return root if (root / ZOO).is_dir() else None


def _pinned(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") else []


def run_kernel(op: str, checkout: Path, scratch: Path, args) -> list[dict]:
    if not (checkout / ZOO / op / f"{op}.cpp").is_file():
        print(f"{op}: no executor in the checkout ({ZOO / op}): skipped", flush=True)
        return []
    try:
        build_peer(checkout, op, scratch)
    except subprocess.CalledProcessError as error:
        first = next((line for line in error.stderr.splitlines() if "error" in line), error.stderr.strip()[:200])
        print(f"{op}: the peer did not build ({first.strip()}): skipped", flush=True)
        return []
    except OSError as error:
        print(f"{op}: the peer did not load ({error}): skipped", flush=True)
        return []
    command = [*_pinned(args.core), sys.executable, __file__, "--worker", op, str(scratch / f"{op}_peer.so"),
               "--repeat", str(args.repeat), "--rounds", str(args.rounds)]
    if args.small_only:
        command.append("--small-only")
    if args.max_elements is not None:
        command += ["--max-elements", str(args.max_elements)]
    rows = []
    env = {**os.environ, **_ONE_THREAD, "OPCASE_BENCH_BASELINE": "1" if args.baseline else "0"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as child:
        for line in child.stdout:
            row = json.loads(line)
            rows.append(row)
            label = f"{op} {row['name']}"
            if "skipped" in row:
                print(f"{label:<52} {row['kind']:<8} skipped ({row['skipped']}, over --max-elements)", flush=True)
                continue
            ratio = row["opcase"] / row["peer"] if row["peer"] > 0 else float("inf")
            warm = row["opcase"] / row["peer_warm"] if row["peer_warm"] > 0 else float("inf")
            mmcv = ""
            if args.baseline:
                mmcv = (f" {row['mmcv'] * 1e3:11.3f} {row['mmcv'] / row['peer'] if row['peer'] > 0 else float('inf'):8.2f}"
                        if row.get("mmcv") is not None else f" {'-':>11} {'-':>8}")
            print(f"{label:<52} {row['kind']:<8} {row['peer'] * 1e3:11.3f} {row['opcase'] * 1e3:11.3f} "
                  f"{ratio:8.2f} {row['peer_warm'] * 1e3:11.3f} {warm:8.2f}{mmcv}  {row['load']}", flush=True)
    if child.returncode:
        print(f"{op}: the worker failed (exit {child.returncode})", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mluops", default=None, help="root of a Cambricon/mlu-ops checkout ($OPCASE_MLUOPS)")
    parser.add_argument("--select", default="", help="only the kernels whose name contains this")
    parser.add_argument("--small-only", action="store_true", help="only the docs' small cases")
    parser.add_argument("--max-elements", type=int, default=None, help="skip cases with more elements")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="peer / opcase alternations per case")
    parser.add_argument("--baseline", action="store_true",
                        help="also time the mmcv baseline gen computes beside the golden (its own two columns)")
    parser.add_argument("--core", type=int, default=(os.cpu_count() or 1) - 1, help="the core to pin to")
    parser.add_argument("--worker", nargs=2, metavar=("OP", "LIBRARY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.small_only, args.repeat, args.rounds, args.max_elements)
        return 0
    checkout = _checkout(args.mluops)
    if checkout is None:
        print("bench_peer: no mlu-ops checkout (give its root with --mluops or $OPCASE_MLUOPS; it needs "
              f"{ZOO}): nothing compared")
        return 0
    if shutil.which("g++") is None:
        print("bench_peer: no g++ on PATH to build the peer: nothing compared")
        return 0
    from gen.core.registry import known_ops
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"opcase {commit or '?'} against mlu-ops at {checkout}; core {args.core}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    mmcv = f" {'mmcv ms':>11} {'ratio':>8}" if args.baseline else ""
    print(f"{'kernel / case':<52} {'kind':<8} {'peer ms':>11} {'opcase ms':>11} {'ratio':>8} {'warm ms':>11} "
          f"{'ratio':>8}{mmcv}  load")
    with tempfile.TemporaryDirectory(prefix="opcase-peer-") as scratch:
        for op in known_ops():
            if args.select in op:
                run_kernel(op, checkout, Path(scratch), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
