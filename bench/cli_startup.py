"""How long the `keelwave` command takes to start, against importing typer alone.

    python bench/cli_startup.py [--runs 30] [--json FILE]

Each command runs ``--runs`` times as a fresh process (wall time from spawn
to exit, output discarded), alternating with the others so a busy moment
hits them all alike:

- ``python -c "import typer"``: the floor, what any typer command pays;
- a one-option typer app's ``sub --help`` (plain help, as keelwave's): what
  typer itself costs a subcommand (typer 0.2x validates options with pydantic,
  so this loads pydantic too);
- ``keelwave --help``, ``keelwave runs --help``: typer builds the whole
  command tree and renders help, so every command module is imported;
- ``keelwave --version``: the shortest path through the entry point.

``keelwave`` is the console script installed next to this interpreter (what
a user runs), or ``python -m keelwave.cli`` where there is none. Reported:
best and median seconds, and each as a ratio to the typer floor from the
same run. The target is a median under 0.3 s: start-up is what a person
waits for on every `keelwave runs`, and what a coding agent pays per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_SECONDS = 0.3
FLOOR = "import typer"
TYPER_APP = "typer app: sub --help"
# The smallest typer app with a subcommand, its help as plain as keelwave's.
SMALLEST_APP = """
import typer
app = typer.Typer(rich_markup_mode=None)
@app.command()
def sub(limit: int = 5) -> None: ...
@app.command()
def other() -> None: ...
app()
"""


def keelwave_command() -> list[str]:
    script = Path(sys.executable).with_name("keelwave")
    return [str(script)] if script.exists() else [sys.executable, "-m", "keelwave.cli"]


def commands() -> dict[str, list[str]]:
    keelwave = keelwave_command()
    return {
        FLOOR: [sys.executable, "-c", "import typer"],
        TYPER_APP: [sys.executable, "-c", SMALLEST_APP, "sub", "--help"],
        "keelwave --help": [*keelwave, "--help"],
        "keelwave runs --help": [*keelwave, "runs", "--help"],
        "keelwave --version": [*keelwave, "--version"],
    }


def wall_time(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(runs: int) -> dict[str, dict[str, float]]:
    """Best and median wall seconds per command, the commands interleaved."""
    todo = commands()
    for argv in todo.values():  # warm the file cache and the .pyc files first
        wall_time(argv)
    times: dict[str, list[float]] = {label: [] for label in todo}
    for _ in range(runs):
        for label, argv in todo.items():
            times[label].append(wall_time(argv))
    return {
        label: {"best_s": min(values), "median_s": statistics.median(values)}
        for label, values in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="processes per command")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    figures = measure(args.runs)
    floor = figures[FLOOR]
    print(f"python {sys.version.split()[0]} ({sys.executable}), {args.runs} runs each, "
          f"keelwave = {' '.join(keelwave_command())}")  # fmt: skip
    print(f"{'command':<26}{'best s':>9}{'median s':>10}{'× typer':>9}")
    for label, row in figures.items():
        ratio = row["median_s"] / floor["median_s"]
        print(f"{label:<26}{row['best_s']:>9.3f}{row['median_s']:>10.3f}{ratio:>8.1f}×")
    slowest = max(row["median_s"] for label, row in figures.items() if label.startswith("keel"))
    verdict = "ok" if slowest < TARGET_SECONDS else "MISSED"
    print(f"slowest keelwave median {slowest:.3f} s, target < {TARGET_SECONDS} s: {verdict}")
    if args.json:
        about = {"python": sys.version.split()[0], "executable": sys.executable, "runs": args.runs}
        args.json.write_text(
            json.dumps({**about, "floor": FLOOR, "target_s": TARGET_SECONDS, "commands": figures})
        )


if __name__ == "__main__":
    main()
