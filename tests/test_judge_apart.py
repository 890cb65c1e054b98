"""The judge never shares a process with the code it judges (issue 19, items 1 and 3).

A worker only calls the backend; its outputs reach `opcase` as sealed memory it maps read-only
and judges itself.  So a backend that rewrites the judge inside its own process gets the verdict
its outputs earn, and one that writes to the worker's descriptors costs only its own case.
"""
from __future__ import annotations

import json
import os
import socket

import numpy as np
import pytest

from conftest import REPO
from harness import channel
from test_processes import ONE_CASE, TWO_CASES, environment, marker, opcase   # noqa: F401 - a fixture

CASES = [REPO / "cases" / "psamask_forward", REPO / "cases" / "carafe_forward" / "boundary"]


def statuses(doc) -> dict:
    return {c["path"]: c["status"] for c in doc["cases"]}


def test_a_backend_that_patches_the_judge_in_its_process_fails_as_zeros_do(tmp_path, marker):
    docs = {}
    for name in ("zeros", "patches_the_judge"):
        report = tmp_path / f"{name}.json"
        done = opcase(["run", *CASES, "--backend", f"hostile_backends:{name}", "--json", report],
                      marker, tmp_path, timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        docs[name] = json.loads(report.read_text())
    assert statuses(docs["patches_the_judge"]) == statuses(docs["zeros"])
    assert sum(s == "failed" for s in statuses(docs["zeros"]).values()) > 10


@pytest.mark.parametrize("backend,says", [
    ("fake_header", "a frame stayed incomplete"),
    ("short_junk", "bytes that are no frame"),
])
def test_bytes_written_to_the_workers_channel_cost_only_that_case(tmp_path, marker, backend, says):
    report = tmp_path / "report.json"
    for workers in (["--jobs", "1", "--timeout", "30"], []):
        done = opcase(["run", *TWO_CASES, "--backend", f"hostile_backends:{backend}", "--json", report, *workers],
                      marker, tmp_path, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        cases = json.loads(report.read_text())["cases"]
        assert [c["status"] for c in cases] == ["error", "passed"]
        assert says in cases[0]["message"] and "worker replaced" in cases[0]["message"]


def test_a_backend_that_changes_its_process_changes_only_its_worker(tmp_path, marker):
    """chdir, environment, SIGTERM ignored: the later cases (relative paths) still run and pass."""
    report = tmp_path / "report.json"
    relative = [os.path.relpath(p, REPO) for p in (*TWO_CASES, *TWO_CASES[::-1])]
    done = opcase(["run", *relative, "--backend", "hostile_backends:changes_its_process", "--json", report],
                  marker, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c["status"] for c in json.loads(report.read_text())["cases"]] == ["passed"] * 4


def test_the_channel_refuses_what_is_no_frame():
    here, there = socket.socketpair()
    reader = channel.FrameReader(here)
    there.sendall(b"OPCF" + (channel.MAX_FRAME + 1).to_bytes(4, "little"))
    with pytest.raises(channel.ChannelError, match="over the cap"):
        reader.read()
    here, there = socket.socketpair()
    reader = channel.FrameReader(here)
    channel.send(there, {"kind": "end"})
    there.sendall(channel.MAGIC + (5).to_bytes(4, "little") + b"[1,2]")
    with pytest.raises(channel.ChannelError, match="not a JSON object"):
        reader.read()


def test_outputs_are_mapped_only_from_sealed_memory_of_the_right_size(tmp_path):
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    mapped = channel.map_sealed(channel.sealed("y", array), np.float32, (2, 3))
    assert not mapped.flags.writeable and np.array_equal(mapped, array)
    assert channel.map_sealed(channel.sealed("y", array), np.float32, (3, 3)).startswith("holds 24 bytes")
    plain = tmp_path / "y"
    plain.write_bytes(array.tobytes())
    assert channel.map_sealed(os.open(plain, os.O_RDONLY), np.float32, (2, 3)) == "is not sealed memory"
