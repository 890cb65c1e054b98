"""Every compiled loop hands back the vector registers clean: no function that uses ymm/zmm registers returns
(or tail-calls out) with their upper halves dirty.

x86 keeps the upper halves of the AVX registers until a vzeroupper; while they are dirty, the plain SSE code
that runs next (CPython, numpy's scalar loops, the next golden's C) is slowed.  GCC inserts vzeroupper
before a function returns, but not where a loop compiled for AVX ends in a tail call to plain code: gen/widen.c's
float16 widening did, and border_align_backward's golden ran 1.3-1.5x slower right after it on an AMD Zen 4
(tests/bench/RESULTS.md).  The check reads each loop's disassembly in address order: a ymm/zmm instruction
makes the state dirty, vzeroupper makes it clean, and a `ret` or a jump to another function must find it clean.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import needs
from conftest import REPO
from gen import native

SOURCES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "gen").rglob("*.c"))
_FUNCTION = re.compile(r"\n(?=[0-9a-f]+ <[^>]+>:)")
_HEADER = re.compile(r"([0-9a-f]+) <([^>]+)>:")


def dirty_exits(disassembly: str) -> list[str]:
    """'function: instruction' for every return or jump out of a function taken with the upper halves dirty."""
    found = []
    for text in _FUNCTION.split(disassembly):
        header = _HEADER.match(text)
        if not header:
            continue
        name = header.group(2)
        leaves = re.compile(r"jmp\s+[0-9a-f]+ <(?!" + re.escape(name) + r"[+>])")      # a jump to another function
        dirty = False
        for line in text.splitlines()[1:]:
            instruction = line.split("\t")[-1].strip()
            if instruction.startswith("vzeroupper"):
                dirty = False
            elif "%ymm" in instruction or "%zmm" in instruction:
                dirty = True
            elif dirty and (instruction.startswith("ret") or leaves.match(instruction)):
                found.append(f"{name}: {instruction}")
    return found


def test_the_check_finds_a_dirty_tail_call():
    """The check fails a function that leaves ymm dirty through a tail jump, and passes one that cleans first."""
    dirty = ("0000000000002480 <wide>:\n    2480:\tc5 fc 11 07          \tvmovups %ymm0,(%rdi)\n"
             "    2484:\te9 8f fd ff ff       \tjmp    22f0 <plain>\n")
    clean = dirty.replace("jmp    22f0 <plain>", "vzeroupper\n    2489:\te9 8f fd ff ff       \tjmp    22f0 <plain>")
    loop = dirty.replace("jmp    22f0 <plain>", "jmp    2480 <wide+0x0>")
    assert dirty_exits(dirty) == ["wide: jmp    22f0 <plain>"]
    assert dirty_exits(clean) == [] and dirty_exits(loop) == []


@pytest.mark.parametrize("source", SOURCES)
def test_compiled_loop_returns_with_clean_vector_state(source, fresh_native_cache):
    objdump = shutil.which("objdump")
    if objdump is None:
        needs.skip_without("objdump", f"to read {source}'s machine code")
    path = REPO / source
    assert native.load(path) is not None, f"{source} did not build"
    disassembly = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(native.library_path(path))],
                                 capture_output=True, text=True, check=True, timeout=60).stdout
    assert dirty_exits(disassembly) == []
