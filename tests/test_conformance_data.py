"""The conformance data is committed with its provenance: tests/conformance/README.md has a line for every
file there, and no line for a file that is not."""
import re

from conftest import CONFORMANCE

README = CONFORMANCE / "README.md"
NOT_DATA = {README, CONFORMANCE / ".gitattributes"}


def test_every_conformance_file_has_one_provenance_line():
    listed = re.findall(r"^\| `([^`]+)` \|", README.read_text(encoding="utf-8"), flags=re.MULTILINE)
    present = sorted(p.relative_to(CONFORMANCE).as_posix() for p in CONFORMANCE.rglob("*")
                     if p.is_file() and p not in NOT_DATA)
    assert {"mmcv", "mlu-ops", "mmcv-cuda"} <= {name.split("/")[0] for name in present}
    assert sorted(listed) == present
