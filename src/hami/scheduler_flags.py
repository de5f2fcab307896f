"""The ``hami scheduler`` command: its flags, declared beside it, each named as HAMi's (scheduler-core.md §8.1) and
as the ``SchedulerSettings`` field it sets; the help shows each default from the settings model, so help and
behaviour cannot disagree. The family switches come from the vendor registry (``hami.devices.REGISTRY``): one
``--enable-<family>`` per gated family (``VendorFamily.gate``) and ``--disable-devices`` naming the others
(``family_parameters``, also used by ``hami simulate`` and ``hami explain``). The work is
``hami.server.command.scheduler_main`` (imported when the command runs: ``hami -h`` stays quick)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from hami.config.settings import SchedulerSettings
from hami.devices import REGISTRY, Registry
from hami.devices.family import Gate

if TYPE_CHECKING:
    from hami.simulate.devconfig import Families

__all__ = ["family_parameters", "family_switches", "scheduler", "scheduler_command"]

F = TypeVar("F", bound=Callable[..., Any])

_NOT_SETTINGS = ("kubeconfig", "json_logs")
"""Parameters of ``scheduler`` that are not ``SchedulerSettings`` fields."""


def _default(setting: str, shown: str | None = None) -> str:
    """`` [default: X]`` from the settings model, so help and behaviour cannot disagree."""
    if shown is None:
        value = SchedulerSettings.model_fields[setting].default
        shown = (
            ("true" if value else "false")
            if isinstance(value, bool)
            else f"{value:g}"
            if isinstance(value, float)
            else str(value)
        )
    return f" [default: {shown}]"


# One type per flag, declared beside the command; each parameter is named as the settings field it sets.
_SchedulerName = Annotated[
    str | None,
    typer.Option(
        "--scheduler-name",
        metavar="NAME",
        help="Scheduler name the webhook writes into pods' spec.schedulerName; also the events' source."
        + _default("scheduler_name"),
    ),
]
_NodeSchedulerPolicy = Annotated[
    str | None,
    typer.Option(
        "--node-scheduler-policy",
        metavar="POLICY",
        help="Default node policy: binpack fills the busiest node first, spread the idlest."
        + _default("node_scheduler_policy"),
    ),
]
_GpuSchedulerPolicy = Annotated[
    str | None,
    typer.Option(
        "--gpu-scheduler-policy",
        metavar="POLICY",
        help="Default GPU policy: spread, binpack, topology-aware, mutex, numa, or a comma chain (numa,binpack)."
        + _default("gpu_scheduler_policy"),
    ),
]
_HttpBind = Annotated[
    str | None,
    typer.Option(
        "--http_bind",
        metavar="HOST:PORT",
        help="Service listener: /webhook, /healthz, /readyz." + _default("http_bind"),
    ),
]
_ExtenderBind = Annotated[
    str | None,
    typer.Option(
        "--extender-bind",
        metavar="HOST:PORT",
        help="Extender listener: /filter, /bind; beyond loopback only with a client authentication."
        + _default("extender_bind"),
    ),
]
_CertFile = Annotated[
    str | None,
    typer.Option(
        "--cert_file", metavar="FILE", help="TLS certificate, reloaded when it changes. [default: plain HTTP]"
    ),
]
_KeyFile = Annotated[
    str | None, typer.Option("--key_file", metavar="FILE", help="TLS key; give it with --cert_file. [default: none]")
]
_ExtenderClientCaFile = Annotated[
    str | None,
    typer.Option(
        "--extender-client-ca-file",
        metavar="FILE",
        help="Require extender client certificates signed by this CA (mutual TLS). [default: none]",
    ),
]
_ExtenderTokenFile = Annotated[
    str | None,
    typer.Option(
        "--extender-token-file",
        metavar="FILE",
        help="Require a bearer token from this file (one a line) on /filter and /bind. [default: none]",
    ),
]
_MetricsBindAddress = Annotated[
    str | None,
    typer.Option(
        "--metrics-bind-address",
        metavar="HOST:PORT",
        help="Prometheus /metrics listener." + _default("metrics_bind_address"),
    ),
]
_MetricsSecure = Annotated[
    bool | None,
    typer.Option(
        "--metrics-secure/--no-metrics-secure",
        help="Serve /metrics over TLS to callers allowed get on /metrics (TokenReview + SubjectAccessReview)."
        + _default("metrics_secure"),
    ),
]
_NodeLabelSelector = Annotated[
    str | None,
    typer.Option(
        "--node-label-selector",
        metavar="K=V,...",
        help="Register only nodes with all these labels. [default: every node]",
    ),
]
_KubeQps = Annotated[
    float | None, typer.Option("--kube-qps", metavar="N", help="API requests per second." + _default("kube_qps"))
]
_KubeBurst = Annotated[
    int | None,
    typer.Option("--kube-burst", metavar="N", help="API requests allowed in a burst." + _default("kube_burst")),
]
_NodeLockTimeout = Annotated[
    str | None,
    typer.Option(
        "--node-lock-timeout",
        metavar="DURATION",
        help="Age after which another scheduler may break a node lock." + _default("node_lock_timeout", "5m"),
    ),
]
_NodeLockRetryTimeout = Annotated[
    str | None,
    typer.Option(
        "--node-lock-retry-timeout",
        metavar="DURATION",
        help="How long a PodGroup member's bind waits for a locked node; 0 fails at once."
        + _default("node_lock_retry_timeout", "28s"),
    ),
]
_KubeTimeout = Annotated[
    str | None,
    typer.Option(
        "--kube-timeout",
        metavar="DURATION",
        help="Timeout of one API request (watches excepted); 0 means 30s." + _default("kube_timeout", "0"),
    ),
]
_BindLockWait = Annotated[
    str | None,
    typer.Option(
        "--bind-lock-wait",
        metavar="DURATION",
        help="How long a bind waits for another hami bind's node lock hand-over; 0 fails at once."
        + _default("bind_lock_wait", "20s"),
    ),
]
_SuccessEvents = Annotated[
    bool | None,
    typer.Option(
        "--success-events/--no-success-events",
        help="Write the Normal events of a scheduled pod (FilteringSucceed, FilteredNodes, BindingSucceed; HAMi"
        " writes its two). Off saves two or three API requests per pod." + _default("success_events"),
    ),
]
_RequeueInterval = Annotated[
    str | None,
    typer.Option(
        "--requeue-interval",
        metavar="DURATION",
        help="Once capacity frees on a node while pods wait, mark the node so kube-scheduler retries them now, at "
        "most once per node per this; 0 leaves them to kube-scheduler's own retries (up to 5 minutes)."
        + _default("requeue_interval", "5s"),
    ),
]
_ForceOverwriteDefaultScheduler = Annotated[
    bool | None,
    typer.Option(
        "--force-overwrite-default-scheduler/--no-force-overwrite-default-scheduler",
        help="Let the webhook replace spec.schedulerName: default-scheduler."
        + _default("force_overwrite_default_scheduler"),
    ),
]
_Preemption = Annotated[
    str | None,
    typer.Option(
        "--preemption",
        metavar="MODE",
        help="Who preempts for pods that fit nowhere: self (hami evicts; every version), extender (kube-scheduler "
        "1.38+ asks hami; by choice only), off; auto is self." + _default("preemption"),
    ),
]
_LeaderElect = Annotated[
    bool | None,
    typer.Option(
        "--leader-elect/--no-leader-elect",
        help="Follow kube-scheduler's Lease: only the leader's hami decides (for several replicas)."
        + _default("leader_elect"),
    ),
]
_LeaderElectResourceName = Annotated[
    str | None,
    typer.Option("--leader-elect-resource-name", metavar="NAME", help="Lease to hold. [default: the scheduler name]"),
]
_LeaderElectResourceNamespace = Annotated[
    str | None,
    typer.Option(
        "--leader-elect-resource-namespace",
        metavar="NAMESPACE",
        help="Namespace of the Lease. [default: the pod's own, POD_NAMESPACE]",
    ),
]
_DeviceConfigFile = Annotated[
    str | None,
    typer.Option(
        "--device-config-file",
        metavar="FILE",
        help="HAMi's device-config.yaml (resource names, memory factor). [default: built-in defaults]",
    ),
]
_Kubeconfig = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help="Kubeconfig to use. [default: $KUBECONFIG, else in-cluster, else ~/.kube/config]",
    ),
]
_Profiling = Annotated[
    str | None,
    typer.Option(
        "--profiling",
        metavar="BOOL",
        help="HAMi's pprof switch, accepted as --profiling=false only: hami serves no pprof routes."
        + _default("profiling"),
    ),
]
_LegacyMetrics = Annotated[
    str | None,
    typer.Option(
        "--legacy-metrics",
        metavar="BOOL",
        help="HAMi's old metric names, accepted as --legacy-metrics=false only: hami exports the current names."
        + _default("legacy_metrics"),
    ),
]
_Debug = Annotated[bool | None, typer.Option("--debug/--no-debug", help="Log at debug level." + _default("debug"))]
_JsonLogs = Annotated[
    bool,
    typer.Option(
        "--json-logs/--text-logs",
        show_default=False,
        help="Structured JSON logs, or text for people. [default: json-logs]",
    ),
]


def _options(
    scheduler_name: _SchedulerName = None,
    node_scheduler_policy: _NodeSchedulerPolicy = None,
    gpu_scheduler_policy: _GpuSchedulerPolicy = None,
    http_bind: _HttpBind = None,
    extender_bind: _ExtenderBind = None,
    cert_file: _CertFile = None,
    key_file: _KeyFile = None,
    extender_client_ca_file: _ExtenderClientCaFile = None,
    extender_token_file: _ExtenderTokenFile = None,
    metrics_bind_address: _MetricsBindAddress = None,
    metrics_secure: _MetricsSecure = None,
    node_label_selector: _NodeLabelSelector = None,
    kube_qps: _KubeQps = None,
    kube_burst: _KubeBurst = None,
    node_lock_timeout: _NodeLockTimeout = None,
    node_lock_retry_timeout: _NodeLockRetryTimeout = None,
    kube_timeout: _KubeTimeout = None,
    bind_lock_wait: _BindLockWait = None,
    success_events: _SuccessEvents = None,
    requeue_interval: _RequeueInterval = None,
    force_overwrite_default_scheduler: _ForceOverwriteDefaultScheduler = None,
    preemption: _Preemption = None,
    leader_elect: _LeaderElect = None,
    leader_elect_resource_name: _LeaderElectResourceName = None,
    leader_elect_resource_namespace: _LeaderElectResourceNamespace = None,
    device_config_file: _DeviceConfigFile = None,
    kubeconfig: _Kubeconfig = None,
    profiling: _Profiling = None,
    legacy_metrics: _LegacyMetrics = None,
    debug: _Debug = None,
    json_logs: _JsonLogs = True,
) -> None:
    """The scheduler's own options, in the order ``--help`` lists them (the family switches follow
    ``--device-config-file``); declared here, run by ``scheduler_command``'s command."""


def family_parameters(registry: Registry = REGISTRY, *, simulated: bool = False) -> list[inspect.Parameter]:
    """The family switches of ``registry`` as command parameters: ``--enable-<family>`` per gated family, named as
    its ``SchedulerSettings`` field, then ``--disable-devices``. For ``hami scheduler`` a switch not given is None
    (the environment or the default decides); ``simulated``: for a command that schedules as a default install
    does (``hami simulate``: off, and ``--disable-devices`` empty, unless given)."""
    params = [_switch(f.gate, f.family, simulated) for f in registry if f.gate is not None]
    ungated = ", ".join(f.family for f in registry if f.gate is None)
    text = "Device families not to schedule, " + (
        "as `hami scheduler --disable-devices` (the chart's devices.<family>.enabled: false): "
        if simulated
        else "their resources left alone: "
    )
    disable: Any = Annotated[
        str if simulated else str | None,
        typer.Option(
            "--disable-devices", metavar="FAMILY,...", help=f"{text}{ungated}. [default: none]", show_default=False
        ),
    ]
    params.append(inspect.Parameter("disable_devices", _KEYWORD, default="" if simulated else None, annotation=disable))
    return params


def _switch(gate: Gate, family: str, simulated: bool) -> inspect.Parameter:
    """A gated family's ``--enable-<family>/--no-enable-<family>``, named as its settings field."""
    switch = f"{gate.flag}/--no-{gate.flag[2:]}"
    if simulated:
        text = f"{gate.help}, as `hami scheduler {gate.flag}` (the chart's devices.{family}.enabled). {_OFF}"
        option: Any = Annotated[bool, typer.Option(switch, help=text, show_default=False)]
        return inspect.Parameter(gate.setting, _KEYWORD, default=False, annotation=option)
    option = Annotated[bool | None, typer.Option(switch, help=f"{gate.help} (HAMi's switch). [default: false]")]
    return inspect.Parameter(gate.setting, _KEYWORD, default=None, annotation=option)


_KEYWORD = inspect.Parameter.KEYWORD_ONLY
_OFF = "[default: off, as a default install]"


def scheduler_command(registry: Registry = REGISTRY) -> Callable[..., None]:
    """``hami scheduler`` for ``registry``: ``_options`` with the registry's family switches after
    ``--device-config-file``. Each parameter is named as the settings field it sets."""
    own = [p.replace(kind=_KEYWORD) for p in inspect.signature(_options, eval_str=True).parameters.values()]
    at = [p.name for p in own].index("device_config_file") + 1

    def scheduler(**options: Any) -> None:
        """Run the scheduler extender (and webhook) that kube-scheduler calls. Flags are HAMi's where they exist."""
        kubeconfig, json_logs = (options.pop(name) for name in _NOT_SETTINGS)
        given = {name: value for name, value in options.items() if value is not None}
        from hami.server.command import scheduler_main

        raise typer.Exit(scheduler_main(given, kubeconfig, json_logs))

    scheduler.__signature__ = inspect.Signature([*own[:at], *family_parameters(registry), *own[at:]])  # type: ignore[attr-defined]
    return scheduler


scheduler: Callable[..., None] = scheduler_command()
"""``hami scheduler`` for ``hami.devices.REGISTRY``."""


def family_switches(func: F) -> F:
    """For a command that schedules as ``hami scheduler`` does (``hami simulate``, ``hami explain``): its parameter
    ``families: Families`` becomes the registry's switches (``family_parameters(simulated=True)``), and it receives
    the ``Families`` they make. A bad ``--disable-devices`` is a usage error naming the flag."""
    own = list(inspect.signature(func).parameters.values())
    at = [p.name for p in own].index("families")
    switches = [p.replace(kind=own[at].kind) for p in family_parameters(simulated=True)]
    params = [*own[:at], *switches, *own[at + 1 :]]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        given = {p.name: kwargs.pop(p.name) for p in switches}
        kwargs["families"] = _families(given.pop("disable_devices"), given)
        return func(**kwargs)

    # Typer reads the new signature; __wrapped__ stays, so the old annotations resolve in the command's module
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty}
    return cast(F, wrapper)


def _families(disable_devices: str, switches: dict[str, bool]) -> Families:
    from hami.errors import InvalidInput
    from hami.simulate.devconfig import Families

    families = Families(disable_devices, **switches)
    try:
        families.enabled()
    except InvalidInput as err:
        raise typer.BadParameter(err.reason, param_hint=err.field) from None
    return families
