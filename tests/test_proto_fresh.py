"""The committed protobuf modules must be what protoc makes of the committed schemas."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = [REPO / "gen" / "core" / "proto" / "opcase.proto", REPO / "harness" / "mluops" / "mluops_case.proto"]


@pytest.mark.parametrize("schema", [s for s in SCHEMAS if s.exists()], ids=lambda p: p.name)
def test_generated_module_is_fresh(schema, tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the test extra) regenerates the module")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{schema.parent}", f"--python_out={tmp_path}",
                    str(schema)], check=True)
    fresh = (tmp_path / f"{schema.stem}_pb2.py").read_text()
    committed = (schema.parent / f"{schema.stem}_pb2.py").read_text()
    assert committed == fresh, (f"{schema.name} changed but its generated module was not regenerated: run\n"
                                f"  python -m grpc_tools.protoc -I{schema.parent.relative_to(REPO)} "
                                f"--python_out={schema.parent.relative_to(REPO)} {schema.relative_to(REPO)}")
