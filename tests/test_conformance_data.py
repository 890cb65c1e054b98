"""The conformance data is committed with its provenance: a README.md (tests/conformance/README.md, or one in
a kernel's own folder such as tests/conformance/mlu-ops/<op>/README.md, so a new kernel touches only its own
files) has a line for every file there, and no line for a file that is not."""
import re

from conftest import CONFORMANCE

README = CONFORMANCE / "README.md"
# The provenance files: this README and a kernel's own in its mlu-ops folder; each lists paths relative
# to tests/conformance/ (other READMEs, such as mmcv-cuda's, are data described here).
READMES = [README, *sorted((CONFORMANCE / "mlu-ops").glob("*/README.md"))]
NOT_DATA = {*READMES, CONFORMANCE / ".gitattributes"}


def test_every_conformance_file_has_one_provenance_line():
    listed = [name for readme in READMES
              for name in re.findall(r"^\| `([^`]+)` \|", readme.read_text(encoding="utf-8"), flags=re.MULTILINE)]
    present = sorted(p.relative_to(CONFORMANCE).as_posix() for p in CONFORMANCE.rglob("*")
                     if p.is_file() and p not in NOT_DATA)
    assert {"mmcv", "mlu-ops", "mmcv-cuda"} <= {name.split("/")[0] for name in present}
    assert sorted(listed) == present
