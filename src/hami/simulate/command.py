"""``hami simulate``: read the files, place the pods in order, print the result.

Exit status: 0 when every file was read (whatever the placements), 1 when a file is unreadable or invalid
(the message names the file, the object and the field). Warnings (a node or pod of the snapshot that could
not be used) go to the error stream, so standard output stays one JSON document with ``--output json``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from hami.errors import InvalidInput
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.demo import demo_sources, render_demo
from hami.simulate.devconfig import device_config_from_text
from hami.simulate.html import render_html
from hami.simulate.loading import load_pods, load_snapshot, read_files, require_nodes
from hami.simulate.report import render_json, render_summary
from hami.simulate.simulator import Simulator

__all__ = ["EXIT_INVALID_INPUT", "EXIT_OK", "SimulateOptions", "run_simulate"]

EXIT_OK: Final = 0
EXIT_INVALID_INPUT: Final = 1


@dataclass(frozen=True, slots=True)
class SimulateOptions:
    """The command's arguments. ``now`` (Unix seconds) is stamped into ``hami.io/vgpu-time``."""

    snapshots: Sequence[Path] = ()
    pods: Sequence[Path] = ()
    config: Path | None = None
    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    output: Literal["table", "json"] = "table"
    now: int = 0
    demo: bool = False
    report: Path | None = None
    skip_admission: bool = False
    """Place pods as written, without the admission webhook's defaults, rewrites and denials."""


def run_simulate(opts: SimulateOptions, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """Run one simulation; ``out`` receives the result, ``err`` warnings and errors. Returns the exit status."""
    try:
        config_text = read_files([opts.config])[0][1] if opts.config is not None else None
        config, warnings = device_config_from_text(config_text, str(opts.config))
        if opts.demo:
            snapshot_sources, pod_sources = demo_sources()
        else:
            snapshot_sources, pod_sources = read_files(opts.snapshots), read_files(opts.pods)
        snapshot = load_snapshot(snapshot_sources)
        require_nodes(snapshot, [label for label, _ in snapshot_sources])
        pods = load_pods(pod_sources)
    except InvalidInput as error:
        err(f"error: {error}")
        return EXIT_INVALID_INPUT
    defaults = SchedulingDefaults(node_policy=opts.node_policy, gpu_policy=opts.gpu_policy)
    sim = Simulator(config, defaults, admission=not opts.skip_admission)  # every vendor family
    sim.add_snapshot(snapshot)
    outcomes = [sim.place(pod, opts.now) for pod in pods]
    for warning in [*warnings, *sim.warnings, *sim.dra_notes()]:
        err(f"warning: {warning}")
    title = "hami simulate --demo" if opts.demo else "hami simulate"
    if opts.report is not None:
        try:
            opts.report.write_text(render_html(title, sim.state, outcomes, sim.dra), encoding="utf-8")
        except OSError as error:
            err(f"error: {opts.report}: cannot write the report: {error.strerror or error}")
            return EXIT_INVALID_INPUT
        err(f"report written to {opts.report}")
    if opts.output == "json":
        out(render_json(sim.state, outcomes, sim.dra))
    elif opts.demo:
        out(render_demo(sim.state, outcomes))
    else:
        out(render_summary(title, sim.state, outcomes, sim.dra))
    return EXIT_OK
