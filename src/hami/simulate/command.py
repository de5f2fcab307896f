"""``hami simulate``: read the files, place the pods in order, print the result.

Exit status (``EXIT_*``): 0 when every file was read (whatever the placements; warnings change it only with
``strict``), 1 when a file is unreadable, empty or invalid (the message names the file, the object and the field),
3 with ``fail_on_pending`` when a pod was not placed (pending, denied by the admission webhook, an invalid request,
or a pod that asks for no device while a warning names one of its resources: a misspelt resource), 4 with
``strict`` when anything was warned about; typer answers 2 for bad arguments. Notes (an object that makes no pod,
such as a Service, skipped) never fail. Warnings (a node or pod of the snapshot that could not be used, an unknown
field, a resource no vendor owns) go to the error stream, so standard output stays one JSON document with
``--output json``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final, Literal

import yaml

from hami.errors import HamiError, InvalidInput
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.demo import demo_sources, render_demo
from hami.simulate.devconfig import Families, device_config_from_text
from hami.simulate.dramode import place_dra
from hami.simulate.html import render_html
from hami.simulate.loading import Snapshot, load_snapshot, read_files, read_pods, require_nodes
from hami.simulate.report import document, render_json, render_summary
from hami.simulate.simulator import Outcome, Simulator
from hami.simulate.wording import counted

__all__ = [
    "EXIT_INVALID_INPUT",
    "EXIT_NOT_PLACED",
    "EXIT_OK",
    "EXIT_WARNINGS",
    "NOT_PLACED",
    "SimulateOptions",
    "run_simulate",
]

EXIT_OK: Final = 0
EXIT_INVALID_INPUT: Final = 1
EXIT_NOT_PLACED: Final = 3
"""``--fail-on-pending``: some pod was not placed (2 is taken: bad arguments)."""
EXIT_WARNINGS: Final = 4
"""``--strict``: something was warned about (an unknown field, a resource no vendor owns, ...)."""
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
    output: Literal["table", "json", "yaml"] = "table"
    now: int = 0
    demo: bool = False
    report: Path | None = None
    skip_admission: bool = False
    """Place pods as written, without the admission webhook's defaults, rewrites and denials."""
    families: Families = field(default_factory=Families)
    """The device families scheduled (a default install's unless switched)."""
    fail_on_pending: bool = False
    """Exit ``EXIT_NOT_PLACED`` when a pod is pending, denied or invalid, or asks for no device beside a warning
    (for CI)."""
    strict: bool = False
    """Exit ``EXIT_WARNINGS`` when anything was warned about (for CI)."""
    dra: bool = False
    """Place the pods as DRA-mode pods (``hami.simulate.dramode``: kube-scheduler's allocator on the published
    cards) instead of through hami's extender."""
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
        if not loaded.pods and not loaded.warnings:  # only objects that make no pod (Services, ConfigMaps)
            raise InvalidInput(", ".join(label for label, _ in pod_sources), None, _NO_POD)
    except (HamiError, OSError) as error:  # a file, or the cluster with --live (a kubeconfig, the API server)
        err(f"error: {error}")
        return EXIT_INVALID_INPUT
    defaults = SchedulingDefaults(node_policy=opts.node_policy, gpu_policy=opts.gpu_policy)
    sim = Simulator(config, defaults, admission=not opts.skip_admission, families=families)
    sim.add_snapshot(snapshot)
    place = partial(place_dra, sim) if opts.dra else sim.place
    outcomes = [place(pod, opts.now) for pod in loaded.pods]
    for note in loaded.notes:
        err(f"note: {note}")
    warned = [*warnings, *loaded.warnings, *sim.warnings, *sim.dra_notes()]
    for warning in warned:
        err(f"warning: {warning}")
    if not _write_report(opts, sim, outcomes, err):
        return EXIT_INVALID_INPUT
    out(_rendered(opts, sim, outcomes))
    return _exit_status(opts, outcomes, len(warned), err)


_NO_POD: Final = "makes no pod: it holds no Pod and no workload (Deployment, Job, ...), only other kinds (skipped)"


def _title(opts: SimulateOptions) -> str:
    return "hami simulate --demo" if opts.demo else "hami simulate"


def _write_report(
    opts: SimulateOptions, sim: Simulator, outcomes: Sequence[Outcome], err: Callable[[str], None]
) -> bool:
    """Write the HTML report when asked; False when it cannot be written (said on ``err``)."""
    if opts.report is None:
        return True
    try:
        opts.report.write_text(render_html(_title(opts), sim.state, outcomes, sim.dra), encoding="utf-8")
    except OSError as error:
        err(f"error: {opts.report}: cannot write the report: {error.strerror or error}")
        return False
    err(f"report written to {opts.report}")
    return True


def _rendered(opts: SimulateOptions, sim: Simulator, outcomes: Sequence[Outcome]) -> str:
    if opts.output == "json":
        return render_json(sim.state, outcomes, sim.dra)
    if opts.output == "yaml":
        return yaml.safe_dump(document(sim.state, outcomes, sim.dra), sort_keys=False, allow_unicode=True).rstrip("\n")
    if opts.demo and not opts.pods:
        return render_demo(sim.state, outcomes)
    return render_summary(_title(opts), sim.state, outcomes, sim.dra)


def _inputs(opts: SimulateOptions, warnings: list[str]) -> tuple[Snapshot, list[tuple[str, str]], str]:
    """The cluster (demo, snapshot files or live), the pod files' texts (the demo's workload unless files are
    given), and the namespace of pods that name none ("": ``default``). Raises ``InvalidInput``."""
    if opts.demo:
        snapshot_sources, demo_pods = demo_sources()
        pod_sources = read_files(opts.pods) if opts.pods else demo_pods
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


def _failed(o: Outcome) -> bool:
    """Whether ``--fail-on-pending`` counts the pod as not placed: pending, denied or invalid, or asking for no
    device while a warning names one of its resources (a misspelt ``nvidia.com/gpumem`` leaves it without one)."""
    return o.status in NOT_PLACED or (o.status == "no-devices" and bool(o.warnings))


def _exit_status(opts: SimulateOptions, outcomes: Sequence[Outcome], warned: int, err: Callable[[str], None]) -> int:
    missed = [o for o in outcomes if _failed(o)] if opts.fail_on_pending else []
    if missed:
        statuses = [*sorted(NOT_PLACED), "no-devices"]
        counts = ", ".join(f"{n} {_WORDS.get(s, s)}" for s in statuses if (n := sum(o.status == s for o in missed)))
        err(
            f"--fail-on-pending: {len(missed)} of {counted(len(outcomes), 'pod')} not placed ({counts}); "
            f"exit status {EXIT_NOT_PLACED}"
        )
        return EXIT_NOT_PLACED
    if opts.strict and warned:
        err(f"--strict: {counted(warned, 'warning')} (above); exit status {EXIT_WARNINGS}")
        return EXIT_WARNINGS
    return EXIT_OK


_WORDS: Final = {"no-devices": "asking for no device beside a warning"}
