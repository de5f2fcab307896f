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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from hami.config.settings import SchedulerSettings
from hami.devices import REGISTRY, Registry
from hami.devices.family import Gate

if TYPE_CHECKING:
    from hami.simulate.devconfig import Families

__all__ = ["FLAGS", "Flag", "family_parameters", "family_switches", "scheduler", "scheduler_command"]

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


@dataclass(frozen=True, slots=True)
class Flag:
    """One option of ``hami scheduler``: the parameter (named as the ``SchedulerSettings`` field it sets), its
    declaration (``--name`` or ``--on/--off``), help, metavar and type. ``shown`` is the default the help names:
    None, the settings model's (``_default``); "", none (the help says it itself)."""

    name: str
    decls: str
    text: str
    metavar: str | None = None
    kind: type = str
    shown: str | None = None

    def parameter(self) -> inspect.Parameter:
        suffix = _default(self.name, self.shown) if self.shown != "" else ""
        option = typer.Option(self.decls, metavar=self.metavar, help=self.text + suffix)
        annotation: Any = Annotated[self.kind | None, option]
        return inspect.Parameter(self.name, _KEYWORD, default=None, annotation=annotation)


# The scheduler's own options, in the order ``--help`` lists them (the family switches follow
# ``--device-config-file``), each named as HAMi's flag and as the settings field it sets.
FLAGS: tuple[Flag, ...] = (
    Flag(
        "scheduler_name",
        "--scheduler-name",
        "Scheduler name the webhook writes into pods' spec.schedulerName; also the events' source.",
        "NAME",
    ),
    Flag(
        "node_scheduler_policy",
        "--node-scheduler-policy",
        "Default node policy: binpack fills the busiest node first, spread the idlest.",
        "POLICY",
    ),
    Flag(
        "gpu_scheduler_policy",
        "--gpu-scheduler-policy",
        "Default GPU policy: spread, binpack, topology-aware, mutex, numa, or a comma chain (numa,binpack).",
        "POLICY",
    ),
    Flag("http_bind", "--http_bind", "Service listener: /webhook, /healthz, /readyz.", "HOST:PORT"),
    Flag(
        "extender_bind",
        "--extender-bind",
        "Extender listener: /filter, /bind; beyond loopback only with a client authentication.",
        "HOST:PORT",
    ),
    Flag(
        "cert_file", "--cert_file", "TLS certificate, reloaded when it changes. [default: plain HTTP]", "FILE", shown=""
    ),
    Flag("key_file", "--key_file", "TLS key; give it with --cert_file. [default: none]", "FILE", shown=""),
    Flag(
        "extender_client_ca_file",
        "--extender-client-ca-file",
        "Require extender client certificates signed by this CA (mutual TLS). [default: none]",
        "FILE",
        shown="",
    ),
    Flag(
        "extender_token_file",
        "--extender-token-file",
        "Require a bearer token from this file (one a line) on /filter and /bind. [default: none]",
        "FILE",
        shown="",
    ),
    Flag("metrics_bind_address", "--metrics-bind-address", "Prometheus /metrics listener.", "HOST:PORT"),
    Flag(
        "metrics_secure",
        "--metrics-secure/--no-metrics-secure",
        "Serve /metrics over TLS to callers allowed get on /metrics (TokenReview + SubjectAccessReview).",
        kind=bool,
    ),
    Flag(
        "node_label_selector",
        "--node-label-selector",
        "Register only nodes with all these labels. [default: every node]",
        "K=V,...",
        shown="",
    ),
    Flag("kube_qps", "--kube-qps", "API requests per second.", "N", float),
    Flag("kube_burst", "--kube-burst", "API requests allowed in a burst.", "N", int),
    Flag(
        "node_lock_timeout",
        "--node-lock-timeout",
        "Age after which another scheduler may break a node lock.",
        "DURATION",
        shown="5m",
    ),
    Flag(
        "node_lock_retry_timeout",
        "--node-lock-retry-timeout",
        "How long a PodGroup member's bind waits for a locked node; 0 fails at once.",
        "DURATION",
        shown="28s",
    ),
    Flag(
        "kube_timeout",
        "--kube-timeout",
        "Timeout of one API request (watches excepted); 0 means 30s.",
        "DURATION",
        shown="0",
    ),
    Flag(
        "bind_lock_wait",
        "--bind-lock-wait",
        "How long a bind waits for another hami bind's node lock hand-over; 0 fails at once.",
        "DURATION",
        shown="20s",
    ),
    Flag(
        "success_events",
        "--success-events/--no-success-events",
        "Write the Normal events of a scheduled pod (FilteringSucceed, FilteredNodes, BindingSucceed; HAMi writes its "
        "two). Off saves two or three API requests per pod.",
        kind=bool,
    ),
    Flag(
        "requeue_interval",
        "--requeue-interval",
        "Once capacity frees on a node while pods wait, mark the node so kube-scheduler retries them now, at most "
        "once per node per this; 0 leaves them to kube-scheduler's own retries (up to 5 minutes).",
        "DURATION",
        shown="5s",
    ),
    Flag(
        "force_overwrite_default_scheduler",
        "--force-overwrite-default-scheduler/--no-force-overwrite-default-scheduler",
        "Let the webhook replace spec.schedulerName: default-scheduler.",
        kind=bool,
    ),
    Flag(
        "preemption",
        "--preemption",
        "Who preempts for pods that fit nowhere: self (hami evicts; every version), extender (kube-scheduler 1.38+ "
        "asks hami; by choice only), off; auto is self.",
        "MODE",
    ),
    Flag(
        "leader_elect",
        "--leader-elect/--no-leader-elect",
        "Follow kube-scheduler's Lease: only the leader's hami decides (for several replicas).",
        kind=bool,
    ),
    Flag(
        "leader_elect_resource_name",
        "--leader-elect-resource-name",
        "Lease to hold. [default: the scheduler name]",
        "NAME",
        shown="",
    ),
    Flag(
        "leader_elect_resource_namespace",
        "--leader-elect-resource-namespace",
        "Namespace of the Lease. [default: the pod's own, POD_NAMESPACE]",
        "NAMESPACE",
        shown="",
    ),
    Flag(
        "device_profiles",
        "--device-profiles",
        "Node groups' device profiles for Cluster Autoscaler's template nodes that carry no registration: one file "
        "per group named by its label value, holding registration annotations (docs/autoscaler.md).",
        "DIR",
        shown="none",
    ),
    Flag(
        "device_profile_label",
        "--device-profile-label",
        "The node label whose value names a template node's device profile.",
        "LABEL",
    ),
    Flag(
        "device_config_file",
        "--device-config-file",
        "HAMi's device-config.yaml (resource names, memory factor). [default: built-in defaults]",
        "FILE",
        shown="",
    ),
    Flag(
        "dra_mode",
        "--dra-mode/--no-dra-mode",
        "DRA mode: serve /webhook/dra (pods become ResourceClaims that kube-scheduler allocates) and create the "
        "claims (docs/dra-mode.md).",
        kind=bool,
    ),
    Flag(
        "dra_device_class",
        "--dra-device-class",
        "The DeviceClass the claims of DRA mode name.",
        "NAME",
    ),
    Flag(
        "dra_card_memory",
        "--dra-card-memory",
        "DRA mode: card memory sizes (MiB) a gpumem-percentage is translated for. [default: the sizes hami's DRA "
        "driver publishes]",
        "MIB,...",
        shown="",
    ),
    Flag(
        "kubeconfig",
        "--kubeconfig",
        "Kubeconfig to use. [default: $KUBECONFIG, else in-cluster, else ~/.kube/config]",
        "FILE",
        shown="",
    ),
    Flag(
        "profiling",
        "--profiling",
        "HAMi's pprof switch, accepted as --profiling=false only: hami serves no pprof routes.",
        "BOOL",
    ),
    Flag(
        "legacy_metrics",
        "--legacy-metrics",
        "HAMi's old metric names, accepted as --legacy-metrics=false only: hami exports the current names.",
        "BOOL",
    ),
    Flag("debug", "--debug/--no-debug", "Log at debug level.", kind=bool),
)

_JSON_LOGS = inspect.Parameter(
    "json_logs",
    inspect.Parameter.KEYWORD_ONLY,
    default=True,
    annotation=Annotated[
        bool,
        typer.Option(
            "--json-logs/--text-logs",
            show_default=False,
            help="Structured JSON logs, or text for people. [default: json-logs]",
        ),
    ],
)
"""Not a settings field: how the logs are written."""


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
    own = [flag.parameter() for flag in FLAGS] + [_JSON_LOGS]
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
