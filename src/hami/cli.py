"""The ``hami`` command line."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer import _click  # typer's own Click, whose Context parse_args takes
from typer.core import TyperCommand

from hami import __version__
from hami.clusterflags import ClusterFlags, Output, choice, cluster_flags, dump, one_of
from hami.config.klog import DEBUG_VERBOSITY, KlogFlagError, translate
from hami.deviceplugin.command import device_plugin
from hami.deviceplugin.dra.command import dra_plugin
from hami.monitor.command import monitor
from hami.scheduler_flags import family_switches, scheduler

if TYPE_CHECKING:
    from hami.k8s.config import KubeConfig
    from hami.protocol.objects import Pod
    from hami.simulate.devconfig import Families
    from hami.simulate.explain import Explanation
    from hami.simulate.loading import Snapshot
    from hami.simulate.simulator import Simulator

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help that wraps at the terminal width, flag names never cut
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


class KlogCommand(TyperCommand):
    """A long-running command that also takes the klog flags HAMi's Go binaries take (``-v=4``, ``--logtostderr``,
    ``--log_dir`` ...; docs/coming-from-hami.md), and its own boolean flags Go's way (``--leader-elect=false``).

    ``-v`` of 4 or more turns debug logging on (``--debug``, or ``--log-level=debug``), unless the command line sets
    hami's own level too, which then wins. Flags that have no effect in hami are named on stderr.
    """

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        try:
            klog = translate(args)
        except KlogFlagError as err:
            raise typer.BadParameter(str(err), ctx, param_hint="klog flag") from None
        for notice in klog.notices:
            typer.echo(f"hami {self.name}: {notice}", err=True)
        rewritten = [self._go_bool(arg) for arg in klog.args]
        kept = [arg for arg in rewritten if arg is not None]
        return super().parse_args(ctx, kept + self._level_args(kept, klog.verbosity))

    def _go_bool(self, arg: str) -> str | None:
        """``--flag=true`` -> ``--flag``; ``--flag=false`` -> ``--no-flag`` (or nothing for a plain switch)."""
        name, sep, value = arg.partition("=")
        if not sep or not name.startswith("--") or value.lower() not in {"true", "false", "1", "0"}:
            return arg
        for param in self.params:
            if getattr(param, "is_flag", False) and name in param.opts:
                if value.lower() in {"true", "1"}:
                    return name
                secondary: list[str] = getattr(param, "secondary_opts", [])
                return secondary[0] if secondary else None
        return arg

    def _level_args(self, args: list[str], verbosity: int | None) -> list[str]:
        if verbosity is None:
            return []
        names = {param.name for param in self.params}
        given = {arg.partition("=")[0] for arg in args}
        debug = verbosity >= DEBUG_VERBOSITY
        if "log_level" in names and "--log-level" not in given:
            return ["--log-level=debug" if debug else "--log-level=info"]
        if "debug" in names and debug and not given & {"--debug", "--no-debug"}:
            return ["--debug"]
        return []


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print hami's version and exit."),
    ] = False,
) -> None:
    """hami: a GPU-sharing scheduler for Kubernetes, wire-compatible with HAMi.

    Run `hami COMMAND -h` for a command's options. `hami simulate --demo` shows what it does, no cluster needed.
    """
    del version


@app.command()
def version(
    output: Annotated[
        Output,
        typer.Option(
            "--output",
            "-o",
            metavar="FORMAT",
            parser=choice(Output),
            help="table (the version, then the commit and build date), json or yaml.",
        ),
    ] = Output.table,
) -> None:
    """Print hami's version, the commit it was built from and the build date ("unknown" when the build did not
    record them); -o json: with the Python and platform it runs on."""
    import platform

    from hami.buildinfo import build_info

    built = build_info()
    if output in (Output.json, Output.yaml):
        doc = {
            "hamiVersion": __version__,
            "gitCommit": built.commit,
            "buildDate": built.date,
            "pythonVersion": platform.python_version(),
            "platform": f"{platform.system().lower()}/{platform.machine()}",
        }
        typer.echo(dump(doc, output))
    else:
        typer.echo(f"{__version__} (commit {built.commit}, built {built.date})")


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def _node_policy(value: str) -> str:
    from hami.devices.policy import parse_node_policy
    from hami.errors import InvalidInput

    try:
        return parse_node_policy(value, "--node-policy")
    except InvalidInput as err:
        raise typer.BadParameter(err.reason) from None


def _gpu_policy(value: str) -> str:
    from hami.devices.policy import parse_gpu_policy
    from hami.errors import InvalidInput

    try:
        parse_gpu_policy(value, numa_bind=False, field="--gpu-policy")
    except InvalidInput as err:
        raise typer.BadParameter(err.reason) from None
    return value


def _unix_time(value: str) -> int:
    """``--now``: whole seconds since 1970, in words a person reads when it is something else."""
    try:
        seconds = int(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a Unix time: give whole seconds since 1970 (such as 1767225600), "
            "or leave --now out for the current time"
        ) from None
    if seconds < 0:
        raise typer.BadParameter(f"{value!r} is before 1970: give whole seconds since 1970 (such as 1767225600)")
    return seconds


_SIMULATE_HELP = "\n\n".join(
    [
        "Place pods on a cluster snapshot offline (or on the live cluster with --live, read-only), with the "
        "scheduler's own decision code.",
        "Each pod is placed in the order given and its devices are reserved before the next one, so later pods "
        "see earlier placements. Pods of the snapshot that carry hami.io/vgpu-node hold devices and are charged.",
        "Each pod first goes through the admission webhook's own code, as in the cluster: its defaults and "
        "rewrites are applied, and a pod the webhook would deny is reported as not placed, with the webhook's "
        "message (--skip-admission places pods as written). The device families scheduled are a default install's "
        "(every family but Ascend and Iluvatar; --enable-ascend, --enable-iluvatar, --disable-devices switch them as "
        "`hami scheduler` does; --demo schedules every family unless switched).",
        "PODS files hold Pods and workloads: Deployments, StatefulSets, ReplicaSets, ReplicationControllers and "
        "Jobs are expanded into the pods their controllers make (template x replicas, Job parallelism), a CronJob "
        "into one run of its job, a DaemonSet into one pod per node its nodeSelector matches. Fields Kubernetes "
        'does not define are warned about as kubectl does (unknown field "spec.containers[0].resource"). Other '
        "kinds (a Service, a ConfigMap: what `helm template` prints beside its workloads) are skipped with a note; "
        "`helm template app | hami simulate -s cluster.yaml -` reads standard input.",
        "Candidate nodes are the snapshot's nodes whose labels match the pod's nodeSelector and that are not "
        "unschedulable. Other kube-scheduler predicates (taints and tolerations, affinity, CPU, memory and other "
        "non-device resources) are out of scope.",
        "Exit status: 0 when every file was read (pending pods included; warnings change it only with --strict), "
        "1 when a file is unreadable, empty or invalid, 2 for bad arguments, 3 with --fail-on-pending when a pod is "
        "pending, denied or invalid, or asks for no device beside a warning (a misspelt resource), 4 with --strict "
        "when anything was warned about. Warnings and notes go to standard error.",
    ]
)


_PodsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        metavar="PODS",
        help="Pod and workload files (YAML or JSON; multi-document or a List), placed in the order given; - reads "
        "standard input (helm template app | hami simulate -).",
    ),
]
_PodFileOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--file", "-f", metavar="FILE", help="A pods file, as kubectl's -f (repeatable; placed after the PODS)."
    ),
]
_SimSnapshotOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--snapshot",
        "-s",
        metavar="FILE",
        help="Cluster snapshot: what `kubectl get nodes,pods,resourcequotas -A -o json` (or -o yaml) prints, "
        "or any mix of Node/Pod/ResourceQuota/List documents. Repeat for several files.",
    ),
]
_DeviceConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", metavar="FILE", help="HAMi device-config.yaml (resource names, memory factor)."),
]
_NodePolicyOpt = Annotated[
    str,
    typer.Option(
        "--node-policy", metavar="POLICY", callback=_node_policy, help="Default node policy: binpack or spread."
    ),
]
_GpuPolicyOpt = Annotated[
    str,
    typer.Option(
        "--gpu-policy",
        metavar="POLICY",
        callback=_gpu_policy,
        help="Default GPU policy: binpack, spread, topology-aware, mutex, numa, or a comma chain.",
    ),
]
_SimOutputOpt = Annotated[
    OutputFormat,
    typer.Option(
        "--output",
        "-o",
        metavar="FORMAT",
        parser=choice(OutputFormat),
        help="table (for people), or json or yaml (one document).",
    ),
]
_NowOpt = Annotated[
    int | None,
    typer.Option(
        "--now",
        metavar="SECONDS",
        parser=_unix_time,
        help="Unix time written into hami.io/vgpu-time. [default: the current time]",
    ),
]
_DemoOpt = Annotated[
    bool,
    typer.Option("--demo", help="Run on the built-in example cluster: its own workload, or the PODS given instead."),
]
_ReportOpt = Annotated[
    Path | None,
    typer.Option(
        "--report",
        metavar="FILE",
        help="Also write a self-contained HTML page (heat maps, pending reasons, placements; with --defrag the "
        "plan: heat maps before and after, the moves) to FILE.",
    ),
]
_SkipAdmissionOpt = Annotated[
    bool,
    typer.Option(
        "--skip-admission", help="Place pods as written: skip the admission webhook's defaults, rewrites and denials."
    ),
]
_DefragOpt = Annotated[
    bool,
    typer.Option(
        "--defrag",
        help="Dry run: plan the fewest pod moves that free whole cards on the snapshot (no PODS needed), each "
        "one the scheduler would make itself once the pod is deleted, printed as the kubectl commands to run. Only "
        "pods a controller recreates (a Deployment's, StatefulSet's or Job's) are moved; cordoned cards and nodes "
        "are left out.",
    ),
]
_FailOnPendingOpt = Annotated[
    bool,
    typer.Option(
        "--fail-on-pending",
        help="For CI: exit with status 3 when any pod is pending, denied at admission or invalid, or asks for no "
        "device while a warning names one of its resources (a misspelt resource name).",
    ),
]
_StrictOpt = Annotated[bool, typer.Option("--strict", help="For CI: exit with status 4 when anything is warned about.")]
_LiveOpt = Annotated[
    bool,
    typer.Option(
        "--live",
        help="Read the cluster instead of a snapshot (nodes, pods, quotas, DRA objects), read-only, through the "
        "kubeconfig (--kubeconfig, --context, --request-timeout), as `hami top` does.",
    ),
]

_DraOpt = Annotated[
    bool,
    typer.Option(
        "--dra",
        help="What-if for DRA mode: place PODS as DRA-mode pods, with kube-scheduler's allocator on the cards DRA "
        "drivers publish (first fit by card index, distinct cards per claim, the capacity claims and pods leave; "
        "among feasible nodes hami's node policy), instead of through hami's extender.",
    ),
]

_TemplateNodeOpt = Annotated[
    Path | None,
    typer.Option(
        "--template-node",
        metavar="FILE",
        help="Scale-up question instead of a snapshot: would new nodes like this Node (a node group's template, "
        "as Cluster Autoscaler builds it) take PODS, and how many? Answered with the code /filter answers the "
        "autoscaler with; exit status 3 when a pod fits no new node.",
    ),
]
_DeviceProfilesOpt = Annotated[
    str | None,
    typer.Option(
        "--device-profiles",
        metavar="DIR",
        help="With --template-node: node groups' device profiles (one file per group, named by its "
        "--device-profile-label value), for a template that carries no registration.",
    ),
]
_ProfileLabelOpt = Annotated[
    str, typer.Option("--device-profile-label", metavar="LABEL", help="The label naming a node's profile.")
]


@app.command(help=_SIMULATE_HELP)
@cluster_flags(scope=False)
@family_switches
def simulate(
    cluster: ClusterFlags,
    pods: _PodsArg = None,
    file: _PodFileOpt = None,
    snapshot: _SimSnapshotOpt = None,
    config: _DeviceConfigOpt = None,
    node_policy: _NodePolicyOpt = "binpack",
    gpu_policy: _GpuPolicyOpt = "spread",
    output: _SimOutputOpt = OutputFormat.table,
    now: _NowOpt = None,
    demo: _DemoOpt = False,
    report: _ReportOpt = None,
    skip_admission: _SkipAdmissionOpt = False,
    defrag: _DefragOpt = False,
    fail_on_pending: _FailOnPendingOpt = False,
    strict: _StrictOpt = False,
    *,
    families: Families,
    live: _LiveOpt = False,
    dra: _DraOpt = False,
    template_node: _TemplateNodeOpt = None,
    device_profiles: _DeviceProfilesOpt = None,
    device_profile_label: _ProfileLabelOpt = "node.kubernetes.io/instance-type",
) -> None:
    """Place pods on a cluster snapshot offline (help text: ``_SIMULATE_HELP``)."""
    from hami.simulate import SimulateOptions, run_simulate

    files = [*(pods or ()), *(file or ())]
    _check_stdin([*files, *(snapshot or ()), *([config] if config else [])])
    if template_node is not None:
        others = (snapshot, live, demo, defrag)
        profiles = (device_profiles, device_profile_label)
        _scale_up(template_node, files, others, profiles, config, (node_policy, gpu_policy), output, now, families)
    if defrag:
        raise typer.Exit(_defrag(snapshot, files, config, output, node_policy, gpu_policy, families, report))
    _check_sources(live, snapshot, demo, files)
    opts = SimulateOptions(
        snapshots=tuple(snapshot or ()),
        pods=tuple(files),
        config=config,
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        output=output.value,
        now=int(time.time()) if now is None else now,
        demo=demo,
        report=report,
        skip_admission=skip_admission,
        families=families,
        fail_on_pending=fail_on_pending,
        strict=strict,
        live=_live_reader(cluster) if live else None,
        dra=dra,
    )
    raise typer.Exit(run_simulate(opts, typer.echo, lambda line: typer.echo(line, err=True)))


def _check_stdin(paths: list[Path]) -> None:
    """Standard input can be read once: ``-`` given twice is a usage error."""
    if sum(str(p) == "-" for p in paths) > 1:
        raise typer.BadParameter("- (standard input) can be given once", param_hint="PODS")


def _check_sources(live: bool, snapshot: list[Path] | None, demo: bool, files: list[Path]) -> None:
    if live and (snapshot or demo):
        raise typer.BadParameter("--live reads the cluster: give it without --snapshot and --demo", param_hint="--live")
    if demo and snapshot:
        raise typer.BadParameter("--demo is its own cluster: give it without --snapshot", param_hint="--demo")
    if not demo and ((not snapshot and not live) or not files):
        raise typer.BadParameter(
            "give --snapshot FILE (or --live) and at least one PODS file (or - for standard input), or --demo",
            param_hint="arguments",
        )


def _defrag(
    snapshot: list[Path] | None,
    files: list[Path],
    config: Path | None,
    output: OutputFormat,
    node_policy: str,
    gpu_policy: str,
    families: Families,
    report: Path | None,
) -> int:
    """``hami simulate --defrag``: the plan's exit status."""
    from hami.simulate.defrag import DefragOptions, run_defrag

    if not snapshot:
        raise typer.BadParameter("--defrag needs --snapshot FILE", param_hint="--snapshot")
    if files:
        raise typer.BadParameter(
            "--defrag plans moves of the snapshot's own pods and places no PODS file: drop "
            f"{' '.join(map(str, files))}, or run without --defrag to place them",
            param_hint="--defrag",
        )
    opts = DefragOptions(snapshot, config, output.value, node_policy, gpu_policy, families, report)
    return run_defrag(opts, typer.echo, lambda line: typer.echo(line, err=True))


def _with_gang(result: Explanation, sim: Simulator, pods: list[Pod], target: Pod) -> Explanation:
    """``result`` with the gang of ``target`` (``hami.simulate.gangview``), when it belongs to one."""
    from hami.scheduling.records import pod_group
    from hami.simulate.gangview import gang_views

    group = pod_group(target)
    if not group:
        return result
    gangs = gang_views(sim, pods, only=(target.metadata.namespace or "default", group))
    return dataclasses.replace(result, gang=gangs[0] if gangs else None)


def _scale_up(
    template: Path,
    pods: list[Path] | None,
    others: tuple[object, ...],
    profiles: tuple[str | None, str],
    config: Path | None,
    policies: tuple[str, str],
    output: OutputFormat,
    now: int | None,
    families: Families,
) -> None:
    """``hami simulate --template-node``: ``hami.simulate.scaleup``."""
    from hami.simulate.scaleup import ScaleUpOptions, run_scaleup

    if any(others):
        raise typer.BadParameter(
            "--template-node judges new nodes alone: give it without --snapshot, --live, --demo and --defrag",
            param_hint="--template-node",
        )
    if not pods:
        raise typer.BadParameter("--template-node needs at least one PODS file", param_hint="arguments")
    opts = ScaleUpOptions(
        template=template,
        pods=tuple(pods),
        profiles=profiles[0],
        profile_label=profiles[1],
        config=config,
        node_policy=policies[0],
        gpu_policy=policies[1],
        output="json" if output is OutputFormat.json else "table",
        now=int(time.time()) if now is None else now,
        families=families,
    )
    raise typer.Exit(run_scaleup(opts, typer.echo, lambda line: typer.echo(line, err=True)))


def _live_reader(cluster: ClusterFlags) -> Callable[[], tuple[Snapshot, list[str], str]]:
    """``hami simulate --live``: the cluster's objects through the kubeconfig (the loader top and explain use),
    and the context's namespace for pods that name none."""
    from hami.clusterflags import read_cluster

    def read() -> tuple[Snapshot, list[str], str]:
        live = read_cluster(cluster)
        return live.snapshot, live.notes, cluster.default_namespace(live.kube)

    return read


_VIEW_SOURCE_HELP = (
    "Reads the cluster live, read-only (only list on nodes, pods and resourcequotas is needed; kubectl's "
    "--kubeconfig, --context and --request-timeout) or, with --snapshot, what `kubectl get "
    "nodes,pods,resourcequotas -A -o json` printed."
)


class ColorMode(StrEnum):
    auto = "auto"
    always = "always"
    never = "never"


def _simulator_for(
    snapshot: list[Path] | None,
    cluster: ClusterFlags,
    config: Path | None,
    families: Families | None = None,
) -> tuple[Simulator, list[str], list[Pod], KubeConfig | None]:
    """A ``Simulator`` over the snapshot files or the live cluster, its warnings, the snapshot's pods, and the
    kubeconfig it was read through (``None`` for snapshot files). The simulator admits manifests as ``hami
    simulate`` does (``explain -f``) and schedules ``families`` (None: every family, for ``top``'s view of the
    registered cards)."""
    from hami.clusterflags import read_cluster
    from hami.scheduling.request import SchedulingDefaults
    from hami.simulate.devconfig import device_config_from_text
    from hami.simulate.loading import load_snapshot, read_files
    from hami.simulate.simulator import Simulator

    config_text = read_files([config])[0][1] if config is not None else None
    device_config, warnings = device_config_from_text(config_text, str(config))
    kube = None
    if snapshot:
        snap = load_snapshot(read_files(snapshot))
    else:
        live = read_cluster(cluster)
        snap, kube = live.snapshot, live.kube
        warnings += live.notes
    enabled = families.enabled() if families is not None else None  # top: every family's registered cards
    sim = Simulator(device_config, SchedulingDefaults(), admission=True, families=enabled)
    sim.add_snapshot(snap)
    return sim, [*warnings, *sim.warnings], [p.obj for p in snap.pods], kube


def _use_colour(mode: ColorMode) -> bool:
    import os
    import sys

    if mode is ColorMode.auto:
        return sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return mode is ColorMode.always


_SnapshotOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--snapshot", "-s", metavar="FILE", help="Read this snapshot file instead of the live cluster (repeatable)."
    ),
]
_ConfigOpt = Annotated[
    Path | None, typer.Option("--config", metavar="FILE", help="HAMi device-config.yaml (resource names).")
]
_ViewOutputOpt = Annotated[
    Output,
    typer.Option(
        "--output", "-o", metavar="FORMAT", parser=choice(Output), help="table, wide (more columns), json or yaml."
    ),
]


def _sort_key(value: str) -> str:
    from hami.simulate.top import SORT_KEYS  # imported when used: `hami -h` stays quick

    return one_of(SORT_KEYS)(value)


def _fail(err: Exception) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(1)


@app.command(
    help="Per node and per card: slots, memory and cores used/total, the pods on each card, health, "
    "cordon and fragmentation. Every namespace's pods are shown (a node view, as `kubectl top node`); -n shows "
    "only the cards holding pods of one namespace. " + _VIEW_SOURCE_HELP
)
@cluster_flags(scope_help="Only cards holding pods of this namespace, and only those pods. [default: every namespace]")
def top(
    cluster: ClusterFlags,
    snapshot: _SnapshotOpt = None,
    config: _ConfigOpt = None,
    node: Annotated[
        str, typer.Option("--node", metavar="PATTERN", help="Only nodes matching this pattern (shell-style: gpu-*).")
    ] = "",
    vendor: Annotated[
        str, typer.Option("--vendor", metavar="VENDOR", help="Only this vendor's cards (NVIDIA, DCU, ...).")
    ] = "",
    model: Annotated[
        str, typer.Option("--model", metavar="PATTERN", help="Only card models matching this pattern (*A100*).")
    ] = "",
    sort: Annotated[
        str,
        typer.Option(
            "--sort", metavar="KEY", parser=_sort_key, help="node, free-memory, used-memory, stranded or pods."
        ),
    ] = "node",
    output: _ViewOutputOpt = Output.table,
    color: Annotated[
        ColorMode, typer.Option("--color", parser=choice(ColorMode), help="auto (on a terminal), always or never.")
    ] = ColorMode.auto,
    cpu_nodes: Annotated[
        bool, typer.Option("--cpu-nodes", help="Also show the nodes without accelerators (hidden by default).")
    ] = False,
) -> None:
    from hami.errors import HamiError
    from hami.simulate.gangview import gang_views
    from hami.simulate.top import TopFilter, build_top, render_top, top_json

    try:
        sim, warnings, pods, _ = _simulator_for(snapshot, cluster, config)
    except (HamiError, OSError) as err:
        raise _fail(err) from None
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)
    namespace = "" if cluster.all_namespaces else cluster.namespace or ""
    flt = TopFilter(node, vendor, model, namespace, sort, cpu_nodes)
    view = build_top(sim.state, flt, sim.dra, sim.dra_served, sim.claim_containers)
    waiting = [g for g in gang_views(sim, pods) if not g.complete and (not namespace or g.namespace == namespace)]
    view = dataclasses.replace(view, gangs=tuple(waiting))
    if output in (Output.json, Output.yaml):
        typer.echo(dump(top_json(view), output))
    else:
        colour = _use_colour(color)
        typer.echo(render_top(view, colour=colour, wide=output is Output.wide), color=colour)


@app.command(
    help="Why a pod is pending (or why it sits where it is): every node's verdict with the numbers, "
    "per card what it needs and what is free, and what would make it fit. POD is NAME (in -n, else the kubeconfig "
    "context's namespace; with -A in any) or NAMESPACE/NAME. " + _VIEW_SOURCE_HELP + " Exit status: 0 "
    "when the pod was judged (whatever the verdict), 1 when it cannot be read, found or parsed."
)
@cluster_flags()
@family_switches
def explain(
    cluster: ClusterFlags,
    pod: Annotated[str | None, typer.Argument(metavar="POD", help="[NAMESPACE/]NAME of a pod in the cluster.")] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", metavar="FILE", help="Explain this pod manifest instead (a pod not created yet)."),
    ] = None,
    snapshot: _SnapshotOpt = None,
    config: _ConfigOpt = None,
    output: _ViewOutputOpt = Output.table,
    *,
    families: Families,
) -> None:
    from hami.clusterflags import pick_pod
    from hami.errors import HamiError
    from hami.simulate.explain import explain as explain_pod
    from hami.simulate.explain import explain_json, explain_manifest, render_explain
    from hami.simulate.loading import read_files, read_pods

    if (pod is None) == (file is None):
        raise typer.BadParameter("give a POD name or --file MANIFEST (one of them)", param_hint="POD")
    try:
        switched = file is not None or families.switched_on or bool(families.disable_devices)
        # a manifest is judged as `simulate` places it (a default install's families unless switched); a pod of
        # the cluster with every family the cluster registers, unless a switch is given
        sim, warnings, pods, kube = _simulator_for(snapshot, cluster, config, families if switched else None)
        manifest = None
        if file is not None:  # read as `hami simulate` reads it (a workload making one pod will do)
            loaded = read_pods(read_files([file]), (), int(time.time()))  # its warnings: the pod's, below
            if len(loaded.pods) != 1:
                made = len(loaded.pods)
                raise _fail(
                    ValueError(
                        f"{file}: explain judges one pod, and this file makes {made}: give one Pod, or a workload "
                        "making one (replicas: 1), or place them all with `hami simulate`"
                    )
                )
            manifest = loaded.pods[0]
            target = manifest.obj
        else:
            assert pod is not None
            target = pick_pod(pods, pod, cluster, kube)
    except (HamiError, OSError) as err:
        raise _fail(err) from None
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)
    result = explain_manifest(sim, manifest) if manifest is not None else explain_pod(sim, target)
    result = _with_gang(result, sim, [*pods, *([target] if manifest is not None else [])], target)
    for w in result.warnings:
        typer.echo(f"warning: {w}", err=True)
    if output in (Output.json, Output.yaml):
        typer.echo(dump(explain_json(result), output))
    else:
        typer.echo(render_explain(result, wide=output is Output.wide))
    raise typer.Exit(1 if result.status == "invalid" else 0)


app.command("device-plugin", cls=KlogCommand)(device_plugin)
app.command("dra-plugin", cls=KlogCommand)(dra_plugin)
app.command("monitor", cls=KlogCommand)(monitor)


@app.command()
def certs(
    dns: Annotated[list[str], typer.Option("--dns", help="DNS name for the serving certificate (repeatable)")] = [],  # noqa: B006
    ip: Annotated[list[str], typer.Option("--ip", help="IP address for the serving certificate (repeatable)")] = [],  # noqa: B006
    out: Annotated[Path | None, typer.Option("--out", help="write ca.crt, tls.crt and tls.key here")] = None,
    days: Annotated[int, typer.Option("--days", min=1, help="validity of the CA and the certificate")] = 3650,
    secret: Annotated[
        str | None,
        typer.Option("--secret", metavar="NAMESPACE/NAME", help="keep the pair in this Secret (in-cluster)"),
    ] = None,
    patch_webhook: Annotated[
        str | None,
        typer.Option("--patch-webhook", metavar="NAME", help="set caBundle on this MutatingWebhookConfiguration"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="with --secret: replace a pair that is still good")] = False,
) -> None:
    """Make a CA and a serving certificate for the webhook; print the caBundle (base64 of ca.crt).

    With --out the files are written to a directory. With --secret the pair lives in a Kubernetes Secret
    (kept while it is still valid for the names, else replaced); with --patch-webhook as well, the CA is
    published as the webhook configuration's caBundle. The chart's Jobs run the --secret forms.
    """
    import asyncio
    from datetime import UTC, datetime

    from hami.errors import HamiError
    from hami.server.certs import generate, write_files

    if out is None and secret is None:
        raise typer.BadParameter("give --out DIR, --secret NAMESPACE/NAME, or both", param_hint="--out/--secret")
    if patch_webhook and secret is None:
        raise typer.BadParameter("--patch-webhook needs --secret (the CA is read from it)", param_hint="--secret")
    now = datetime.now(UTC)
    try:
        if secret is not None:
            namespace, _, name = secret.partition("/")
            if not namespace or not name:
                raise typer.BadParameter("expected NAMESPACE/NAME", param_hint="--secret")
            pair = _CertRequest(dns, ip, now, days, force, out)
            ca_bundle = asyncio.run(_certs_in_cluster(pair, namespace, name, patch_webhook))
        else:
            bundle = generate(dns, ip, now=now, days=days)
            assert out is not None
            for path in write_files(bundle, out).values():
                typer.echo(f"wrote {path}", err=True)
            ca_bundle = bundle.ca_bundle
    except HamiError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    typer.echo(ca_bundle)


@dataclass(frozen=True, slots=True)
class _CertRequest:
    """What ``hami certs`` asks for: the names, when, for how long, whether to replace a good pair, where to write."""

    dns: list[str]
    ip: list[str]
    now: datetime
    days: int
    force: bool
    out: Path | None


async def _certs_in_cluster(req: _CertRequest, namespace: str, name: str, patch_webhook: str | None) -> str:
    """``hami certs --secret``: keep the pair in the Secret (and publish the CA on the webhook); the caBundle."""
    from hami.server.certs import ensure_secret, inject_ca_bundle, write_files
    from hami.server.certstore import HttpCertStore, in_cluster_client
    from hami.simulate.wording import counted

    async with in_cluster_client() as client:
        store = HttpCertStore(client)
        bundle, created = await ensure_secret(
            store, namespace, name, req.dns, req.ip, now=req.now, days=req.days, force=req.force
        )
        typer.echo(f"secret {namespace}/{name}: {'new pair written' if created else 'kept'}", err=True)
        if patch_webhook:
            count = await inject_ca_bundle(store, patch_webhook, bundle)
            typer.echo(f"caBundle set on {counted(count, 'webhook')} of {patch_webhook}", err=True)
    if req.out is not None:
        write_files(bundle, req.out)
    return bundle.ca_bundle


def main() -> None:
    import sys

    # Run as the kubectl plug-in (kubectl finds `kubectl-hami` on the PATH), help and errors say `kubectl hami`.
    plugin = Path(sys.argv[0]).name == "kubectl-hami"
    app(prog_name="kubectl hami" if plugin else "hami")


app.command("scheduler", cls=KlogCommand)(scheduler)
