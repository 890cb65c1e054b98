"""`opcase --help` against `python3 -c 'import click'`, side by side in one run, and a spec loaded
with libyaml's parser against PyYAML's pure-Python one.

    python tests/bench/bench_startup.py [ROUNDS]

Target (issue 21): `opcase --help` within 3x the time of `import click`.  Each round runs both
commands once, in alternating order, so that the machine's load falls on both alike; the medians
and their ratio are printed.  `opcase` is started as its console script starts it (the current
directory not on sys.path).
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
COMMANDS = {
    "python3 -c 'import click'": [sys.executable, "-c", "import click"],
    "opcase --help": [sys.executable, "-P", "-c", "import sys; sys.argv[0] = 'opcase'; from harness.cli import main; "
                                                  "main()", "--help"],
}


def seconds_of(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main(rounds: int) -> None:
    times = {name: [] for name in COMMANDS}
    for number in range(rounds):
        for name in (list(COMMANDS) if number % 2 == 0 else list(reversed(COMMANDS))):
            times[name].append(seconds_of(COMMANDS[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"{name:28} median {median * 1e3:6.1f} ms over {rounds} runs")
    print(f"ratio: opcase --help / import click = {medians['opcase --help'] / medians[next(iter(COMMANDS))]:.2f}x"
          f"  (target <= 3x)")

    from gen.core import spec   # after the timed runs: this process's imports do not matter to them
    largest = max((REPO / "specs").glob("*.yaml"), key=lambda p: p.stat().st_size)
    text = largest.read_bytes()
    parse = {"pure-Python loader": lambda: yaml.load(text, Loader=spec._LineLoader),  # noqa: S506
             "libyaml loader": lambda: spec.parse_yaml(text)}
    took = {}
    for name, fn in parse.items():
        started = time.perf_counter()
        for _ in range(10):
            fn()
        took[name] = (time.perf_counter() - started) / 10
        print(f"parse {largest.name} ({len(text)} B), {name:18}: {took[name] * 1e3:6.1f} ms")
    print(f"ratio: pure-Python / libyaml = {took['pure-Python loader'] / took['libyaml loader']:.1f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
