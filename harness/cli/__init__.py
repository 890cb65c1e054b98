"""The `opcase` command line: a click group that loads a command's module only when that command is
asked for, so that `opcase --help` (and an option click refuses) costs about `import click`
(tests/test_startup.py keeps numpy and the commands' modules out of it; tests/bench/bench_startup.py
times it).

Each command is its own module, harness/cli/commands/<module>.py, holding the click command of that
name; COMMANDS maps a command's name to its module and the one-line summary `opcase --help` shows
(tests/test_cli_habits.py checks that each summary is its command's own first sentence).
"""
from __future__ import annotations

import importlib

import click

# name: (module under harness.cli.commands, summary for `opcase --help`)
COMMANDS = {
    "audit": ("audit", "Every fact the doc or mlu-ops' code states that a SPEC lacks or contradicts, and every "
                       "check of the spec no source states, each with both places."),
    "backends": ("backends", "List the backends --backend accepts, where each comes from, and the kernels and dtypes "
                             "it supports."),
    "baseline": ("baseline", "Baselines for `opcase run --compare`: the last good run, changed only by "
                             "`baseline update`."),
    "calibrate": ("calibrate", "Judge backends you trust on every case under PATHS: how close each comes to the "
                               "thresholds."),
    "draft": ("draft", "A spec from a design DOC: what the doc (and --code) fix filled in, a TODO(doc:line) "
                       "wherever a person must decide."),
    "explain": ("explain", "Name the arithmetic or the bug a backend's outputs match, element by element."),
    "export": ("export", "Export opcase cases in the operator library's own format (mlu-ops)."),
    "gen": ("gen", "Generate suites of cases from operator SPECS (YAML) into OUT."),
    "import": ("import_", "Import mlu-ops case files (.pb/.prototxt), adding goldens and thresholds."),
    "kernels": ("kernels", "List the kernels opcase knows, found from the specs and each kernel's own modules."),
    "power": ("power", "Measure a suite's power: the planted bugs it catches, and the right variants it passes."),
    "run": ("run", "Run a backend on every case under PATHS and judge its outputs."),
    "show": ("show", "Print a case readably, with a command that reruns just it."),
    "shrink": ("shrink", "Find the smallest case that fails like CASE_FILE on --backend."),
}


def load_command(name: str) -> click.Command:
    """The click command ``name`` (a key of COMMANDS), its module imported now."""
    module_name, _ = COMMANDS[name]
    module = importlib.import_module(f"harness.cli.commands.{module_name}")
    return next(value for value in vars(module).values() if isinstance(value, click.Command) and value.name == name)


class LazyGroup(click.Group):
    """A group whose commands are COMMANDS, each imported when it runs or its own --help is asked for."""

    def list_commands(self, ctx) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        return load_command(name) if name in COMMANDS else None

    def format_commands(self, ctx, formatter) -> None:
        # The summaries come from COMMANDS, so that listing the commands imports none of them.
        rows = [(name, summary) for name, (_, summary) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="opcase")
def main():
    """Test cases with golden outputs for accelerator kernels, and a harness that judges any
    implementation against them.

    \b
    Typical use:
      opcase gen specs/*.yaml --suite all --max-size 64MB -o out   # cases from the specs
      opcase run out --backend reference                           # the reference passes them
      opcase run out --backend mypkg.kernels:run --junit junit.xml # judge your implementation
      opcase run out/carafe_forward --backend exec:'./my_runner'   # ... in any language
      opcase show out/psamask_forward/boundary/map_1x1-psa_type0-float32.opcase
    """
