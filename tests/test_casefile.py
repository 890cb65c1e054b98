"""Case files: round trips, sidecars, and refusal of anything truncated or tampered."""
from __future__ import annotations

import numpy as np
import pytest

from gen.core.casefile import Case, CaseFileError, Tensor, Threshold, load, save


def _case(big: int = 10) -> Case:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, big)).astype(np.float32)
    x[0, 0, 0] = np.nan
    x[0, 0, 1] = -0.0
    y = rng.normal(size=(big, 4)).astype(np.float16)
    return Case(op="psamask_forward", suite="boundary", name="c", params={"h_mask": 3, "scale": 0.5, "flag": True},
                inputs={"x": Tensor("x", x.shape, x.dtype, "NHWC", x),
                        "idx": Tensor("idx", (3,), np.dtype(np.int32), "ARRAY", np.array([-4, 0, 7], np.int32)),
                        "opt": Tensor("opt", (2,), np.dtype(np.float32), "ARRAY", None, absent=True)},
                outputs={"y": Tensor("y", y.shape, y.dtype, "NHWC", y)},
                criteria={"y": [Threshold("diff3_2", 0.0, "static")]}, seed=7, note="why")


@pytest.mark.parametrize("sidecar_bytes", [1 << 20, 16])
def test_round_trip_is_bit_exact(tmp_path, sidecar_bytes):
    case = _case(big=100)
    path = save(case, tmp_path / "c.opcase", sidecar_bytes=sidecar_bytes)
    back = load(path)
    assert back.params == case.params and back.seed == 7 and back.note == "why"
    for name in ("x", "idx"):
        assert back.inputs[name].data.tobytes() == case.inputs[name].data.tobytes()
    assert back.inputs["opt"].absent and back.inputs["opt"].data is None
    assert back.outputs["y"].data.tobytes() == case.outputs["y"].data.tobytes()
    assert back.criteria["y"][0].metric == "diff3_2"
    sidecars = sorted(p.name for p in tmp_path.iterdir() if p.name != "c.opcase")
    assert sidecars == ([] if sidecar_bytes > 4000 else ["c.opcase.in.x", "c.opcase.out.y"])
    if sidecars:
        assert isinstance(back.inputs["x"].data, np.memmap)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_truncated_case_is_refused(tmp_path):
    path = save(_case(), tmp_path / "c.opcase")
    raw = path.read_bytes()
    for cut in (1, len(raw) // 2, len(raw) - 1):
        path.write_bytes(raw[:cut])
        with pytest.raises(CaseFileError, match=str(path)):
            load(path)


def test_tampered_byte_is_refused(tmp_path):
    path = save(_case(), tmp_path / "c.opcase")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CaseFileError, match="checksum mismatch|not an opcase file|does not parse"):
        load(path)


def test_sidecar_with_wrong_checksum_is_refused(tmp_path):
    path = save(_case(big=100), tmp_path / "c.opcase", sidecar_bytes=16)
    side = tmp_path / "c.opcase.in.x"
    raw = bytearray(side.read_bytes())
    raw[-1] ^= 0x80
    side.write_bytes(bytes(raw))
    with pytest.raises(CaseFileError, match="sha256 mismatch"):
        load(path)


def test_missing_or_short_sidecar_is_refused(tmp_path):
    path = save(_case(big=100), tmp_path / "c.opcase", sidecar_bytes=16)
    side = tmp_path / "c.opcase.out.y"
    side.write_bytes(side.read_bytes()[:-2])
    with pytest.raises(CaseFileError, match="bytes on disk"):
        load(path)
    side.unlink()
    with pytest.raises(CaseFileError, match="cannot read"):
        load(path)


def test_not_a_case_file(tmp_path):
    path = tmp_path / "x.opcase"
    path.write_text("hello, I am not protobuf\n")
    with pytest.raises(CaseFileError):
        load(path)


def test_written_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    """Cases are written through temporary files; what lands must be as readable as open() makes it."""
    import os
    import stat

    from gen.core.casefile import SidecarWriter, SpillFile
    old = os.umask(0o022)
    try:
        save(_case(big=100), tmp_path / "c.opcase", sidecar_bytes=16)
        writer = SidecarWriter(tmp_path / "d.opcase", (4,), np.float32)
        spill = SpillFile(tmp_path / "e.opcase", (4,), np.float32)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
        writer.discard()
        spill.discard()
    finally:
        os.umask(old)
    assert len(modes) == 5 and set(modes.values()) == {0o644}, modes


class _GatedFile:
    """A file whose writes wait for ``gate`` (or fail with ``error``): shows whether the writer's caller waits too."""

    def __init__(self, real, gate, error=None):
        self.real, self.gate, self.error = real, gate, error

    def write(self, raw):
        self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.real.write(raw)

    def close(self):
        self.real.close()


def test_sidecar_writer_hashes_and_writes_while_its_caller_computes_the_next_piece(tmp_path):
    import hashlib
    import threading

    from gen.core.casefile import SidecarWriter
    gate = threading.Event()
    writer = SidecarWriter(tmp_path / "c.opcase", (3, 1000), np.float32)
    writer._file = _GatedFile(writer._file, gate)
    pieces = [np.full(1000, i, dtype=np.float64) for i in range(3)]
    done = threading.Event()

    def produce():
        for i in range(2):                    # the first is being written, the second waits: neither blocks
            writer.write(1000 * i, pieces[i])
        done.set()
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        assert done.wait(10), "write() waited for the file"
    finally:
        gate.set()
    producer.join()
    writer.write(2000, pieces[2])
    path, sidecar = writer.finish()
    data = open(path, "rb").read()
    assert data == np.concatenate(pieces).astype("<f4").tobytes()
    assert sidecar.sha256 == hashlib.sha256(data).digest() and sidecar.length == len(data)


def test_sidecar_writer_raises_its_threads_write_error_and_discards_cleanly(tmp_path):
    import threading

    from gen.core.casefile import SidecarWriter
    gate = threading.Event()
    gate.set()
    writer = SidecarWriter(tmp_path / "c.opcase", (4,), np.float32)
    writer._file = _GatedFile(writer._file, gate, OSError(28, "No space left on device"))
    writer.write(0, np.ones(2))
    with pytest.raises(OSError, match="No space"):
        writer.finish()
    writer.discard()
    assert not list(tmp_path.iterdir()) and not any(thread.is_alive() for thread in writer._threads)
