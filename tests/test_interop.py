"""mlu-ops case files through `opcase export` and `opcase import`: the committed cases come back bit
for bit.  (Per kernel, every conformance file imports and passes the reference: tests/test_kernels.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
from harness.casefile import find, load
from harness.cli import main


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
