"""Plugins: a distribution installed in a test registers a backend under the entry-point group
opcase.backends; `opcase backends` lists it and `opcase run --backend NAME` runs it, skipping the
kernels it declares unsupported."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

OPCASE = [sys.executable, "-c", "import sys; from harness.cli import main; sys.argv[0] = 'opcase'; main()"]

PLUGIN = '''
"""A backend plugin: psamask forward and backward in numpy, with the spec's checks; nothing else."""
import numpy as np

from harness.backends.builtin import check_request

OPS = ("psamask_forward", "psamask_backward")


class PsamaskBackend:
    """A class: opcase makes one instance when it loads the plugin."""
    name = "demo-psamask"

    def supports(self, op, dtype):
        return op in OPS and dtype == "float32"

    def run(self, request):
        check_request(request)   # the doc's parameter checks, as the reference makes them
        forward = request.op == "psamask_forward"
        (out_name, spec), = request.outputs.items()
        a = np.asarray(request.inputs["x" if forward else "dy"])
        psa_type, hm, wm = (int(request.params[k]) for k in ("psa_type", "h_mask", "w_mask"))
        N, H, W = a.shape[:3]
        out = np.zeros(spec.shape, spec.dtype)
        if out.size == 0 or a.size == 0:
            return {out_name: out}
        mask = (a if forward else out).reshape(N, H, W, hm, wm)
        fmap = (out if forward else a).reshape(N, H, W, H, W)
        hs, ws = np.arange(H)[:, None], np.arange(W)[None, :]
        for i in range(hm):
            for j in range(wm):
                fh, fw = hs + i - (hm - 1) // 2, ws + j - (wm - 1) // 2
                ok = (fh >= 0) & (fh < H) & (fw >= 0) & (fw < W)
                h, w = np.nonzero(ok)
                th, tw = fh[h, 0], fw[0, w]
                where = (slice(None), h, w, th, tw) if psa_type == 0 else (slice(None), th, tw, h, w)
                if forward:
                    fmap[where] = mask[:, h, w, i, j]
                else:
                    mask[:, h, w, i, j] = fmap[where]
        return {out_name: out}
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A directory holding an installed distribution, as importlib.metadata sees one."""
    root = tmp_path_factory.mktemp("site")
    (root / "opcase_demo_plugin.py").write_text(PLUGIN)
    info = root / "opcase_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: opcase-demo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [opcase.backends]
        demo = opcase_demo_plugin:PsamaskBackend
        broken = opcase_demo_plugin_missing:run
        """))
    return root


def opcase(site, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(OPCASE + [str(a) for a in args], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)


def listing(stdout: str) -> dict[str, list[str]]:
    """`opcase backends` output: backend name -> its indented lines."""
    blocks: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith("    "):
            blocks[name].append(line.strip())
        elif line.strip():
            name = line.strip()
            blocks[name] = []
    return blocks


def test_backends_lists_builtins_and_the_plugin(site):
    done = opcase(site, "backends")
    assert done.returncode == 0, done.stderr
    blocks = listing(done.stdout)
    assert {"reference", "lowp", "exec:COMMAND", "demo", "broken"} <= set(blocks), done.stdout
    assert blocks["reference"][0].startswith("built-in")
    demo = blocks["demo"]
    assert demo[0] == "plugin: opcase-demo-plugin 0.1 (opcase.backends: demo = opcase_demo_plugin:PsamaskBackend)"
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in demo[1:]}
    assert rows["psamask_forward"] == "float32" and rows["psamask_backward"] == "float32"
    assert rows["masked_im2col_forward"] == "not supported" and rows["carafe_forward"] == "not supported"
    assert blocks["broken"][0].startswith("unavailable:") and "opcase_demo_plugin_missing" in blocks["broken"][0]


def test_run_passes_the_plugins_kernels_and_skips_the_others(site, suites, tmp_path):
    out = tmp_path / "results.json"
    done = opcase(site, "run", suites("psamask_forward"), suites("psamask_backward"),
                  suites("masked_im2col_forward"), "--backend", "demo", "--json", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    doc = json.loads(out.read_text())
    cases = doc["cases"]
    psamask = [c for c in cases if c["op"].startswith("psamask")]
    others = [c for c in cases if not c["op"].startswith("psamask")]
    assert psamask and {c["status"] for c in psamask} <= {"passed", "mistrusted"}
    assert {c["suite"] for c in psamask if c["status"] == "passed"} == {c["suite"] for c in psamask} >= {"random", "invalid"}
    assert others and all(c["status"] == "skipped" for c in others)
    assert "does not support masked_im2col_forward" in others[0]["message"]


def test_a_broken_plugin_is_a_usage_error_and_builtins_win(site, suites):
    done = opcase(site, "run", suites("psamask_forward"), "--backend", "broken")
    assert done.returncode == 2 and "cannot load opcase_demo_plugin_missing:run" in done.stderr
    done = opcase(site, "backends", "demo", "reference")
    assert done.returncode == 0 and "plugin: opcase-demo-plugin" in done.stdout and "built-in" in done.stdout
