"""The exec backend: a C++ implementation passes its suites through it; crashing, hanging and lying
commands each cost only their cases, as errors quoting the command's output."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import needs
from conftest import REPO, generate
from gen.core.backend import BackendLoadError
from harness.backends import load_backend, wrap_backend
from harness.backends.exec_backend import ExecBackend
from gen.core.casefile import find
from harness.judge.runner import run_case

EXAMPLE = REPO / "tests" / "exec_example"
PROTO = REPO / "gen" / "core" / "proto" / "opcase.proto"
PURE_IO = ("masked_im2col_forward", "psamask_forward", "psamask_backward")
OPCASE = [sys.executable, "-c", "import sys; from harness.cli import main; sys.argv[0] = 'opcase'; main()"]


def script(name: str, *args: str) -> str:
    """An exec: backend spec running one of the misbehaving example scripts."""
    return "exec:" + shlex.join([sys.executable, str(EXAMPLE / name), *args])


def opcase(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(OPCASE + [str(a) for a in args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def run_json(tmp_path, *args, env=None) -> tuple[int, list[dict], str]:
    out = tmp_path / "results.json"
    done = opcase("run", *args, "--json", out, env=env)
    results = json.loads(out.read_text())["cases"] if out.exists() else []
    return done.returncode, results, done.stdout + done.stderr


# --------------------------------------------------------------------------- the C++ example

@pytest.fixture(scope="module")
def example_binary(tmp_path_factory) -> Path:
    """tests/exec_example/pure_io_kernels.cpp, built against libprotobuf; skips when that cannot be."""
    protoc, cxx = shutil.which("protoc"), shutil.which("g++") or shutil.which("c++")
    if protoc is None:
        needs.skip_without("protoc", "the C++ exec example is built with it")
    if cxx is None:
        needs.skip_without("g++", "to build the C++ exec example")
    header = subprocess.run([cxx, "-E", "-x", "c++", "-"], input="#include <google/protobuf/message.h>\n",
                            capture_output=True, text=True)
    if header.returncode != 0:
        needs.skip_without("libprotobuf-dev", "the C++ exec example includes them")
    build = tmp_path_factory.mktemp("exec_example")
    subprocess.run([protoc, f"-I{PROTO.parent}", f"--cpp_out={build}", str(PROTO)], check=True)
    binary = build / "pure_io_kernels"
    compiled = subprocess.run([cxx, "-O2", "-std=c++17", f"-I{build}", str(EXAMPLE / "pure_io_kernels.cpp"),
                               str(build / "opcase.pb.cc"), "-lprotobuf", "-o", str(binary)],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    return binary


@pytest.mark.slow   # the pure-I/O kernels' default suites through the C++ example
def test_cpp_example_passes_the_suites_of_its_kernels(example_binary, suites, tmp_path):
    dirs = [suites(op) for op in PURE_IO]
    other = generate("carafe_forward", tmp_path / "other", suites=("invalid",))   # a kernel it does not implement
    code, results, output = run_json(tmp_path, *dirs, other, "--backend", f"exec:{example_binary}")
    assert code == 0, output[-3000:]
    mine = [r for r in results if r["op"] in PURE_IO]
    assert len(mine) == len(find(dirs)) and len(results) == len(mine) + len(find([other]))
    assert {r["status"] for r in mine} <= {"passed", "mistrusted"}, output[-3000:]
    assert sum(r["status"] == "passed" for r in mine) >= len(mine) - 4
    # Every suite it ran has cases it passed (the generated suites: tests/conftest.py's `suites`).
    assert {r["suite"] for r in mine if r["status"] == "passed"} == {r["suite"] for r in mine} >= {"random", "invalid"}
    carafe = [r for r in results if r["op"] == "carafe_forward"]
    assert carafe and all(r["status"] == "skipped" for r in carafe), [(r["name"], r["status"], r["message"]) for r in carafe if r["status"] != "skipped"]


def test_cpp_example_reads_sidecars_and_reports_its_kernel_time(example_binary, suites):
    # sidecar_bytes=0: every non-empty input goes to a raw file beside the request
    backend = wrap_backend("cpp", "test", ExecBackend([str(example_binary)], timeout=30, sidecar_bytes=0))
    results = [run_case(p, backend, "cpp") for p in find([suites("psamask_backward"), suites("masked_im2col_forward")])]
    assert {r.status for r in results} <= {"passed", "mistrusted"}, [r.message for r in results if r.status != "passed"]
    valid = [r for r in results if r.suite != "invalid"]
    assert all(0 <= r.seconds < 0.5 for r in valid)   # kernel_seconds: no process start in it


def test_backends_command_lists_what_the_command_declares(example_binary):
    done = opcase("backends", f"exec:{example_binary}")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[2:] if line.startswith("    ")}
    assert lines["masked_im2col_forward"] == ["float16", "float32"]
    assert lines["psamask_forward"] == ["float32"] and lines["psamask_backward"] == ["float32"]
    assert lines["carafe_forward"] == ["not", "supported"]
    assert "--list-supported" in done.stdout


# --------------------------------------------------------------------------- commands that misbehave

@pytest.fixture(scope="module")
def two_cases(tmp_path_factory) -> Path:
    """One valid and one invalid psamask_forward case, in one directory."""
    source = generate("psamask_forward", tmp_path_factory.mktemp("src"), suites=("random", "invalid"), count=1)
    out = tmp_path_factory.mktemp("two")
    for path in (sorted((source / "random").glob("*.opcase"))[0], source / "invalid" / "psa_type_known-float32.opcase"):
        for part in path.parent.glob(path.name + "*"):
            shutil.copy(part, out / part.name)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"   # a zombie is dead; only its parent's reaping is missing


@pytest.mark.parametrize("spec, options, says, tail", [
    (script("crasher.py", "--signal"), [], "killed by SIGSEGV", "crasher: device lost at step 3"),
    (script("crasher.py", "--exit"), [], "exited with status 3", "crasher: device lost at step 3"),
    (script("hanger.py"), ["--timeout", "0.5"], "timed out after 0.5 s", "hanger: waiting for the device"),
    (script("hanger.py"), ["--timeout", "0.5", "--jobs", "2"], "timed out after 0.5 s", "hanger: waiting for the device"),
    (script("liar.py", "garbage"), [], "is not an opcase.Response message", "liar: answering in mode garbage"),
    (script("liar.py", "dtype"), [], "has dtype 'float64', expected 'float32'", "liar: answering in mode dtype"),
], ids=["segfault", "exit-3", "hang", "hang-jobs", "garbage", "wrong-dtype"])
def test_a_misbehaving_command_costs_only_its_cases(two_cases, tmp_path, spec, options, says, tail):
    pids = tmp_path / "pids"
    code, results, output = run_json(tmp_path, two_cases, "--backend", spec, *options, env={"HANGER_PIDS": str(pids)})
    assert code == 1, output[-2000:]
    assert len(results) == 2 and all(r["status"] == "error" for r in results), output[-2000:]
    for r in results:
        assert says in r["message"] and tail in r["message"], r["message"]
        assert r["op"] == "psamask_forward" and r["name"]
    assert "2 error" in output
    if pids.exists():   # the hanger and the child it started are gone, not left sleeping
        assert not [pid for pid in map(int, pids.read_text().split()) if _alive(pid)]


@pytest.mark.parametrize("jobs", [[], ["--jobs", "2"]], ids=["here", "jobs"])
def test_the_timeout_reaches_the_command_as_an_argument_not_through_the_environment(two_cases, tmp_path, jobs):
    # The command says what the variable holds in its environment, then hangs past --timeout.
    spec = "exec:" + shlex.join(["sh", "-c", 'echo "variable: ${OPCASE_EXEC_TIMEOUT:-unset}"; exec sleep 30', "sh"])
    out = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if k != "OPCASE_EXEC_TIMEOUT"}
    done = subprocess.run(OPCASE + ["run", str(two_cases), "--backend", spec, "--timeout", "0.5", "--json", str(out),
                                    *jobs], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    results = json.loads(out.read_text())["cases"]
    assert done.returncode == 1 and len(results) == 2, done.stdout + done.stderr
    for r in results:
        assert r["status"] == "error" and "timed out after 0.5 s" in r["message"], r["message"]
        assert "variable: unset" in r["message"], r["message"]


@pytest.mark.parametrize("mode, says", [
    ("shape", "has shape [2, 5, 6, 30, 1], expected [2, 5, 6, 30]"),
    ("short", "has 3 bytes, shape [2, 5, 6, 30] of float32 needs 7200"),
    ("extra", "response holds output 'scratch', which was not asked for"),
    ("missing", "response lacks output(s) 'y'"),
    ("silent", "wrote no response"),
])
def test_a_wrong_response_is_an_error_quoting_the_command(two_cases, mode, says):
    backend = load_backend(script("liar.py", mode))
    result = run_case(two_cases / "psa_type_known-float32.opcase", backend, "liar")
    assert result.status == "error" and says in result.message, result.message
    assert f"liar: answering in mode {mode}" in result.message


def test_rejection_and_unsupported_kernels(two_cases):
    reject = load_backend(script("liar.py", "reject"))
    by_suite = {r.suite: r for r in (run_case(p, reject, "liar") for p in find([two_cases]))}
    assert by_suite["invalid"].status == "passed" and "everything is BAD_PARAM" in by_suite["invalid"].message
    assert by_suite["random"].status == "wrongly-rejected" and "everything is BAD_PARAM" in by_suite["random"].message
    backward_only = load_backend(script("liar.py", "list-backward"))
    assert backward_only.supports("psamask_backward", "float32") and not backward_only.supports("psamask_backward", "float16")
    assert all(run_case(p, backward_only, "liar").status == "skipped" for p in find([two_cases]))


def test_bad_exec_specs_are_usage_errors(two_cases):
    with pytest.raises(BackendLoadError, match="give a command"):
        load_backend("exec:")
    with pytest.raises(BackendLoadError, match="not an executable"):
        load_backend("exec:/no/such/program --flag")
    done = opcase("run", two_cases, "--backend", "exec:/no/such/program")
    assert done.returncode == 2 and "not an executable" in done.stderr
    done = opcase("run", two_cases, "--backend", script("liar.py", "zeros"), env={"OPCASE_EXEC_TIMEOUT": "soon"})
    assert done.returncode == 2 and "OPCASE_EXEC_TIMEOUT" in done.stderr
