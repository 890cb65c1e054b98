"""mlu-ops case files through opcase: every conformance file imports and the reference passes
it; export then import gives back every input bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import kernels as records
from conftest import CONFORMANCE, REPO
from gen.core.casefile import find, load
from harness.cli import main
from harness.mluops import kernels

MLUOPS = CONFORMANCE / "mlu-ops"


@pytest.mark.slow
def test_conformance_files_import_and_pass_reference(tmp_path):
    out = tmp_path / "imported"
    files = sorted(MLUOPS.rglob("*.prototxt"))
    # Each file sits in a folder named after its kernel: every one is a kernel opcase has a spec for.
    ours = [f for f in files if f.parent.name in kernels()]
    # As many as the kernels' records name: discovered, never a count a new kernel would change.
    assert files and ours == files == records.every_conformance_file("mlu-ops")
    result = CliRunner().invoke(main, ["import", str(MLUOPS), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == f"{len(ours)} written, {len(files) - len(ours)} skipped, 0 error"
    assert {load(p, verify=False).op for p in find([out])} == {f.parent.name for f in ours}
    run = CliRunner().invoke(main, ["run", str(out), "--backend", "reference"])
    assert run.exit_code == 0, run.output[-3000:]
    assert f"{len(ours)} cases: {len(ours)} passed" in run.output


@pytest.mark.slow
@pytest.mark.parametrize("text", [False, True], ids=["pb", "prototxt"])
def test_export_import_round_trip_is_bit_exact(tmp_path, text):
    source = [p for p in find([REPO / "cases"]) if load(p).expect == "ok"]
    exported, back = tmp_path / "mluops", tmp_path / "back"
    args = ["export", str(REPO / "cases"), "--format", "mluops", "-o", str(exported)] + (["--text"] if text else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["import", str(exported), "-o", str(back)])
    assert result.exit_code == 0, result.output
    assert len(find([back])) == len(source) > 20
    for path in source:
        original = load(path)
        again = load(back / original.op / "mluops" / f"{original.name}.opcase")
        assert again.params == original.params
        for name, t in original.inputs.items():
            other = again.inputs[name]
            assert (other.shape, other.dtype, other.absent) == (t.shape, t.dtype, t.absent)
            if not t.absent:
                assert np.asarray(other.data).tobytes() == np.asarray(t.data).tobytes(), (path.name, name)
        for name, t in original.outputs.items():
            assert np.asarray(again.outputs[name].data).tobytes() == np.asarray(t.data).tobytes()
