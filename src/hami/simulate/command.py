"""``hami simulate``: read the files, place the pods in order, print the result.

Exit status (``EXIT_*``): 0 when every file was read (whatever the placements; warnings never change it), 1 when
a file is unreadable or invalid (the message names the file, the object and the field), 3 with
``fail_on_pending`` when a pod was not placed (pending, denied by the admission webhook, or an invalid request);
typer answers 2 for bad arguments. Warnings (a node or pod of the snapshot that could not be used, an unknown
field, a resource no vendor owns) go to the error stream, so standard output stays one JSON document with
``--output json``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from hami.errors import HamiError
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.demo import demo_sources, render_demo
from hami.simulate.devconfig import Families, device_config_from_text
from hami.simulate.html import render_html
from hami.simulate.loading import Snapshot, load_snapshot, read_files, read_pods, require_nodes
from hami.simulate.report import render_json, render_summary
from hami.simulate.simulator import Outcome, Simulator

__all__ = ["EXIT_INVALID_INPUT", "EXIT_NOT_PLACED", "EXIT_OK", "NOT_PLACED", "SimulateOptions", "run_simulate"]

EXIT_OK: Final = 0
EXIT_INVALID_INPUT: Final = 1
EXIT_NOT_PLACED: Final = 3
"""``--fail-on-pending``: some pod was not placed (2 is taken: bad arguments)."""
NOT_PLACED: Final = frozenset({"pending", "denied", "invalid"})
"""The statuses ``--fail-on-pending`` fails on (a pod asking for no device hami manages is not one of them)."""


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
    families: Families = field(default_factory=Families)
    """The device families scheduled (a default install's unless switched)."""
    fail_on_pending: bool = False
    """Exit ``EXIT_NOT_PLACED`` when a pod is pending, denied or invalid (for CI)."""
    live: Callable[[], tuple[Snapshot, list[str], str]] | None = None
    """Read the cluster instead of snapshot files: returns its objects, notes, and the kubeconfig context's
    namespace, where pods that name none go (as ``kubectl apply -f`` puts them); the shell's kubeconfig reader."""


def run_simulate(opts: SimulateOptions, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """Run one simulation; ``out`` receives the result, ``err`` warnings and errors. Returns the exit status."""
    try:
        config_text = read_files([opts.config])[0][1] if opts.config is not None else None
        config, warnings = device_config_from_text(config_text, str(opts.config))
        # the demo's cluster has a node of every family, Ascend and Iluvatar included: it schedules them all, unless
        # switched
        families = None if opts.demo and opts.families == Families() else opts.families.enabled()
        snapshot, pod_sources, namespace = _inputs(opts, warnings)
        loaded = read_pods(pod_sources, [n.obj for n in snapshot.nodes], opts.now, namespace)
    except (HamiError, OSError) as error:  # a file, or the cluster with --live (a kubeconfig, the API server)
        err(f"error: {error}")
        return EXIT_INVALID_INPUT
    defaults = SchedulingDefaults(node_policy=opts.node_policy, gpu_policy=opts.gpu_policy)
    sim = Simulator(config, defaults, admission=not opts.skip_admission, families=families)
    sim.add_snapshot(snapshot)
    outcomes = [sim.place(pod, opts.now) for pod in loaded.pods]
    for warning in [*warnings, *loaded.warnings, *sim.warnings, *sim.dra_notes()]:
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
    return _exit_status(opts, outcomes, err)


def _inputs(opts: SimulateOptions, warnings: list[str]) -> tuple[Snapshot, list[tuple[str, str]], str]:
    """The cluster (demo, snapshot files or live), the pod files' texts, and the namespace of pods that name none
    ("": ``default``). Raises ``InvalidInput``."""
    if opts.demo:
        snapshot_sources, pod_sources = demo_sources()
    elif opts.live is not None:
        snapshot, notes, namespace = opts.live()
        warnings += notes
        require_nodes(snapshot, ["the cluster"])
        return snapshot, read_files(opts.pods), namespace
    else:
        snapshot_sources, pod_sources = read_files(opts.snapshots), read_files(opts.pods)
    snapshot = load_snapshot(snapshot_sources)
    require_nodes(snapshot, [label for label, _ in snapshot_sources])
    return snapshot, pod_sources, ""


def _exit_status(opts: SimulateOptions, outcomes: Sequence[Outcome], err: Callable[[str], None]) -> int:
    if not opts.fail_on_pending:
        return EXIT_OK
    missed = [o for o in outcomes if o.status in NOT_PLACED]
    if not missed:
        return EXIT_OK
    counts = ", ".join(f"{n} {s}" for s in sorted(NOT_PLACED) if (n := sum(o.status == s for o in missed)))
    err(
        f"--fail-on-pending: {len(missed)} of {len(outcomes)} pods not placed ({counts}); exit status {EXIT_NOT_PLACED}"
    )
    return EXIT_NOT_PLACED
