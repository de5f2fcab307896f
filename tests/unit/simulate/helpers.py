"""Shared helpers for the simulator's tests: the data directory and a CLI runner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from hami.cli import app
from hami.config import default_device_config
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.loading import load_pods, load_snapshot, read_files
from hami.simulate.simulator import Outcome, Simulator

DATA = Path(__file__).parents[2] / "data" / "simulate"
NOW = 1_700_000_000


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, stdin: str | bytes | None = None) -> CliResult:
    """``hami simulate ARGS`` in-process, ``stdin`` on standard input; standard output and error kept apart."""
    result = CliRunner().invoke(app, ["simulate", *map(str, args)], input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return CliResult(result.exit_code, result.stdout, result.stderr)


def simulate(snapshots: list[str], pods: list[str], **defaults: str) -> tuple[Simulator, list[Outcome]]:
    """Load ``tests/data/simulate`` files and place the pods; returns the simulator and the outcomes."""
    sim = Simulator(default_device_config(), SchedulingDefaults(**defaults))
    sim.add_snapshot(load_snapshot(read_files([DATA / s for s in snapshots])))
    outcomes = [sim.place(p, NOW) for p in load_pods(read_files([DATA / p for p in pods]))]
    return sim, outcomes


def by_pod(outcomes: list[Outcome]) -> dict[str, Outcome]:
    return {o.pod: o for o in outcomes}
