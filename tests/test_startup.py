"""`opcase --help` stays quick: the command line's module loads click and the standard library,
and each command its own module (harness/cli/commands/) when it runs or shows its own help.  (tests/bench/bench_startup.py times it against
`import click`; a test checks what is imported, which a loaded machine cannot make flaky.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

# What a command needs, never `opcase --help`: numpy, YAML, protobuf, and opcase's own modules
# (the generator, the core, the backends, the runner).
HEAVY = ("numpy", "yaml", "google", "gen", "harness.")
ALLOWED = ("harness.cli",)
LOADED = """
import json, sys
sys.argv[0] = "opcase"
from harness.cli import main
try:
    main({args!r})
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy_top!r} or m.startswith("harness.") and m not in {allowed!r})
print(json.dumps(heavy))
"""


def _heavy_modules_after(*args) -> list[str]:
    code = LOADED.format(args=list(args), heavy_top=[h for h in HEAVY if not h.endswith(".")], allowed=list(ALLOWED))
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["--no-such-option"], ["no-such-command"]])
def test_help_and_option_errors_load_no_command_modules(args):
    assert _heavy_modules_after(*args) == []


@pytest.mark.parametrize("command", ["run", "gen", "show"])
def test_a_commands_help_loads_that_command_alone(command):
    """A command's --help (or an option it refuses) imports its own module, never another command's."""
    for args in ([command, "--help"], [command, "--no-such-option"]):
        commands = {m for m in _heavy_modules_after(*args) if m.startswith("harness.cli.commands.")}
        assert f"harness.cli.commands.{command}" in commands
        # power runs gen's command itself, so it imports it; no command imports run's.
        assert commands <= {f"harness.cli.commands.{command}", "harness.cli.commands.gen"}, commands


def test_a_command_that_runs_loads_what_it_needs():
    # The check above is no rubber stamp: a command that works imports its modules.
    loaded = _heavy_modules_after("show", str(REPO / "cases" / "psamask_forward" / "random" /
                                              "r000-N2-H10-W4-psa_type0-h_mask3-w_mask16-float32.opcase"))
    assert "numpy" in loaded and "gen.core.casefile" in loaded


def test_the_public_api_still_imports():
    from harness import InvalidArgument, NotSupported, Request, compare, load_backend   # noqa: F401
    import harness
    assert set(harness.__all__) <= set(dir(harness))
    with pytest.raises(AttributeError):
        harness.no_such_name   # noqa: B018


def test_a_spec_is_parsed_once_per_content_with_libyaml_keeping_lines(tmp_path, monkeypatch):
    import yaml

    from gen.core import spec as spec_module, spec_yaml
    assert yaml.__with_libyaml__ and spec_yaml._CLineLoader is not None   # PyYAML wheels carry libyaml
    parses = []
    real = spec_module.parse_yaml
    monkeypatch.setattr(spec_module, "parse_yaml", lambda text: parses.append(1) or real(text))
    copy = tmp_path / "psamask_forward.yaml"
    copy.write_bytes((REPO / "specs" / "psamask_forward.yaml").read_bytes())
    first = spec_module.load_spec(copy)
    assert spec_module.load_spec(copy) is first and len(parses) == 1          # gen's three loads: one parse
    copy.write_text(copy.read_text() + "\n# edited\n")
    assert spec_module.load_spec(copy) is not first and len(parses) == 2      # other bytes: parsed again
    # file:line survive the C parser, in YAML errors and in the checks after it.
    copy.write_text(copy.read_text().replace("op: psamask_forward", "op: [psamask_forward", 1))
    with pytest.raises(spec_module.SpecError, match=r"psamask_forward\.yaml:\d+: YAML error"):
        spec_module.load_spec(copy)
