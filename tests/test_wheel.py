"""The built wheel works like the clone: it carries the specs and every module, and installed in a fresh
venv, with the repository nowhere on the path, it generates cases and judges the committed suite."""
from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.wheel

# What pyproject.toml builds the wheel from.  The build runs on a copy, because pip builds in the source
# tree and would leave build/ and *.egg-info/ in the repository.
SOURCES = ("pyproject.toml", "README.md", "gen", "harness", "specs")
SMALL_SPECS = ("psamask_forward", "masked_im2col_forward")
SUMMARY = re.compile(r"^(\d+) cases: (\d+) passed$", re.MULTILINE)


def run(args, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run outside the repository, so that neither PYTHONPATH nor the working directory can supply the code."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPCASE_SPECS", "PYTHONHOME")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    # No build isolation and no index: the build uses this interpreter's setuptools (the `test` extra), offline.
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", dist, source], cwd=dist)
    (built,) = dist.glob("opcase-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; returns its bin directory (POSIX layout).  The runtime dependencies come
    from this interpreter's site-packages through a plain path file, which, unlike a site directory, does not
    run the .pth files there (an editable install of the repository is one)."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=root)
                   .stdout.strip())
    outer = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    (purelib / "outer_site_packages.pth").write_text("".join(f"{p}\n" for p in outer))
    # --ignore-installed: an opcase in those site-packages is neither taken as the install nor uninstalled.
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed", wheel], cwd=root)
    return root / "bin"


def test_wheel_carries_every_module_and_spec(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {p.relative_to(REPO).as_posix() for package in ("gen", "harness")
                for p in (REPO / package).rglob("*.py")}
    expected |= {f"gen/specs/{p.name}" for p in (REPO / "specs").glob("*.yaml")}
    expected |= {"gen/core/proto/opcase.proto"}
    # gen/native.py builds the C sources, with the headers they include
    expected |= {p.relative_to(REPO).as_posix() for p in (REPO / "gen").rglob("*.[ch]")}
    assert "gen/kernels/shared/mmcv_half.h" in expected
    assert expected - names == set()


def test_installed_package_reads_its_own_specs(installed, tmp_path):
    probe = ("import gen, harness, gen.core.registry as r; print(gen.__file__); print(harness.__file__); "
             "print(r.specs_dir()); print(' '.join(r.known_ops()))")
    lines = run([installed / "python", "-c", probe], cwd=tmp_path).stdout.splitlines()
    venv_root = installed.parent.resolve()
    for path in lines[:3]:
        assert venv_root in Path(path).resolve().parents, path
    assert lines[3].split() == sorted(p.stem for p in (REPO / "specs").glob("*.yaml"))


def test_installed_opcase_generates_and_passes(installed, tmp_path):
    specs = run([installed / "python", "-c", "from gen.core.registry import specs_dir; print(specs_dir())"],
                cwd=tmp_path).stdout.strip()
    opcase = installed / "opcase"
    run([opcase, "gen", *(Path(specs) / f"{op}.yaml" for op in SMALL_SPECS), "--suite", "random", "--count", "2",
         "-o", "out"], cwd=tmp_path)
    cases = list((tmp_path / "out").rglob("*.opcase"))
    assert {c.relative_to(tmp_path / "out").parts[0] for c in cases} == set(SMALL_SPECS)
    summary = SUMMARY.search(run([opcase, "run", "out", "--backend", "reference"], cwd=tmp_path).stdout)
    assert summary and summary[1] == summary[2] == str(len(cases))


def test_installed_opcase_passes_the_committed_suite(installed, tmp_path):
    done = run([installed / "opcase", "run", REPO / "cases", "--backend", "reference"], cwd=tmp_path)
    summary = SUMMARY.search(done.stdout)
    committed = len(list((REPO / "cases").rglob("*.opcase")))
    assert summary and summary[1] == summary[2] == str(committed), done.stdout[-2000:]


def test_installed_opcase_power_runs_the_planted_bugs(installed, tmp_path):
    """The kernel-specific planted bugs are data inside the wheel (gen/kernels/<family>/planted*.py), not only in tests/."""
    run([installed / "opcase", "power", REPO / "cases" / "psamask_forward", "--json", "power.json"], cwd=tmp_path)
    doc = json.loads((tmp_path / "power.json").read_text())
    planted = {m["name"]: m["verdict"] for m in doc["mutants"] if m["kind"] == "planted"}
    assert planted and set(planted.values()) == {"killed"}, planted


def test_installed_package_builds_the_loops_that_include_its_headers(installed, tmp_path):
    """The mmcv emulations' C loops include gen/kernels/shared/mmcv_half.h: installed, they build from the
    wheel's own files (the header carried beside them) into a fresh cache, not fall back to numpy."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the installed package runs numpy, as the clone does")
    probe = ("from gen.kernels.deform_roi_pool import compiled_mmcv_backward as d; "
             "from gen.kernels.border_align import compiled_mmcv_backward as b; "
             "from gen.kernels.three_nn import compiled_mmcv as t; from gen import native; "
             "from gen.kernels.carafe import compiled_mmcv as c; "
             "print(';'.join(map(str, native.local_headers(d._SOURCE))) or 'no header found'); "
             "print(d._loop() is not None, b._loop() is not None, t._loop() is not None, "
             "c._function('carafe_forward_mmcv', c._FORWARD_ARGTYPES) is not None)")
    env_cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([str(installed / "python"), "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**{k: v for k, v in os.environ.items() if k not in (
                              "PYTHONPATH", "OPCASE_SPECS", "PYTHONHOME", "OPCASE_NO_CC")}, **env_cache})
    assert done.returncode == 0, done.stderr
    header, built = done.stdout.splitlines()
    assert installed.parent.resolve() in Path(header).resolve().parents and header.endswith("mmcv_half.h"), header
    assert built == "True True True True", done.stdout
