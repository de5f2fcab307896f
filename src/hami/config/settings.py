"""The scheduler's own settings (HAMi's flags, scheduler-core.md §8.1), from keyword arguments and ``HAMI_*``.

Each setting has the name of HAMi's flag with ``_`` for ``-`` (``--node-lock-timeout`` →
``node_lock_timeout``) and is read, in this order, from: the keyword arguments given to
:func:`load_settings` (the command line), the environment variable ``HAMI_<NAME>``
(``HAMI_NODE_LOCK_TIMEOUT``), then the default. Invalid values raise :class:`~hami.errors.ConfigError`
naming the value and the setting the way it was given: the flag (``--node-lock-timeout``) for a command-line
value, the variable (``HAMI_NODE_LOCK_TIMEOUT``) for one from the environment (:func:`flag_name`,
:func:`env_names`: the one place that maps a setting to its names).

Deliberate differences from HAMi:

* ``HAMI_NODELOCK_EXPIRE`` (which HAMi's chart sets on the scheduler) is honoured as a fallback for
  ``node_lock_timeout``. HAMi reads it and then overwrites it with the flag's default (spec §11 item 4).
* ``kube_qps``/``kube_burst`` default to 300/600 instead of client-go's 5/10: every scheduled pod costs about
  five API calls (annotation patch, lock, binding, two events), so 5 QPS caps HAMi at roughly one pod per
  second; 300 QPS leaves room for 60 pods/s (a burst of 600 absorbs a deployment scaling up).
* ``scheduler_name`` defaults to ``hami-scheduler`` (the chart's value) instead of ``""``.
* ``gpu_scheduler_policy`` must name known policies; HAMi treats an unknown value as ``spread``.
* The device-config file is optional: without one, :func:`~hami.config.default_device_config` applies.
* ``profiling`` and ``legacy_metrics`` are accepted only as ``false`` (HAMi's default, so HAMi's chart and
  environment load unchanged): hami has no pprof routes and exports only HAMi's current metric names. ``true``
  is refused with an error saying so, rather than accepted and ignored.
* the gated families' switches (``enable_ascend``, ``enable_iluvatar``: each family's ``VendorFamily.gate``)
  switch those families on, as HAMi's flags do; every other family is on unless named in ``disable_devices``
  (hami's, for the chart's ``devices.<family>.enabled: false``; HAMi registers those vendors whatever the chart
  says and only leaves their resources out of ``managedResources``).
* ``/filter`` and ``/bind`` have their own listener (``extender_bind``, loopback by default); ``http_bind``
  serves the webhook and health only. HAMi serves all of them on ``http_bind`` without client authentication.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal

from pydantic import AliasChoices, Field, ValidationError, create_model, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from hami.config.duration import parse_go_duration
from hami.devices import REGISTRY, Registry
from hami.devices.configmodel import config_error, did_you_mean
from hami.errors import ConfigError

__all__ = [
    "DEVICE_FAMILIES",
    "GATED_FAMILIES",
    "GPU_POLICY_TOKENS",
    "NodeSchedulerPolicy",
    "PreemptionMode",
    "SchedulerSettings",
    "SchedulerSettingsBase",
    "did_you_mean",
    "env_names",
    "flag_name",
    "is_loopback",
    "load_settings",
    "settings_model",
]

NodeSchedulerPolicy = Literal["binpack", "spread"]
PreemptionMode = Literal["auto", "extender", "self", "off"]

GPU_POLICY_TOKENS: Final = frozenset({"binpack", "spread", "topology-aware", "mutex", "numa"})
"""Words a GPU scheduler policy may use, alone or as a comma chain (``numa,binpack``; spec §5.4)."""

_BIND_RE: Final = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]*):(?P<port>[0-9]{1,5})")


def _seconds(value: object, field: str) -> object:
    """A timeout given as seconds (``30``, ``"2.5"``) or as a Go duration (``"5m"``, ``"1m30s"``)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            return parse_go_duration(text, field)
    return value


def _check_bind(value: str) -> str:
    match = _BIND_RE.fullmatch(value)
    if match is None or int(match["port"]) > 65535:
        raise ValueError("must be host:port (for example 0.0.0.0:443, :9395 or [::]:80)")
    return value


_UNSUPPORTED: Final = {
    "profiling": "is not supported: hami serves no pprof routes (profile it with py-spy instead); leave it false",
    "legacy_metrics": "is not supported: hami exports HAMi's current metric names (hami_*) only, not the legacy "
    "ones (GPUDeviceMemoryLimit, vGPUMemoryAllocated, …); leave it false",
}

DEVICE_FAMILIES: Final = tuple(f.family for f in REGISTRY)
"""Every device family hami schedules, by the chart's ``devices.<family>`` key (``disable_devices`` names them), in
registry order (derived from ``hami.devices.REGISTRY``)."""

GATED_FAMILIES: Final = {f.family: f.gate.setting for f in REGISTRY if f.gate is not None}
"""Families off unless their HAMi switch is on (``--enable-ascend``, ``--enable-iluvatar``), by their switch."""


_FLAG_SPELLING: Final = {"http_bind": "--http_bind", "cert_file": "--cert_file", "key_file": "--key_file"}
"""HAMi's flags that keep Go's underscores; every other flag is the setting with ``-`` for ``_``."""

_LEGACY_ENV: Final = {"node_lock_timeout": ("HAMI_NODELOCK_EXPIRE",)}
"""Variables read as a fallback for a setting (HAMi's chart sets ``HAMI_NODELOCK_EXPIRE``)."""


def flag_name(setting: str) -> str:
    """The command-line flag of a setting, spelt as HAMi spells it (``node_lock_timeout`` → ``--node-lock-timeout``,
    ``http_bind`` → ``--http_bind``)."""
    return _FLAG_SPELLING.get(setting, "--" + setting.replace("_", "-"))


def env_names(setting: str) -> tuple[str, ...]:
    """The environment variables a setting is read from, first wins (``HAMI_NODE_LOCK_TIMEOUT``, then legacy)."""
    return (f"HAMI_{setting.upper()}", *_LEGACY_ENV.get(setting, ()))


def _env_alias(name: str) -> AliasChoices:
    return AliasChoices(*env_names(name))


class SchedulerSettingsBase(BaseSettings):
    """Settings of the scheduler process. Times are seconds (a number or a Go duration string).

    ``settings_model`` adds one boolean per gated family of the registry (``enable_ascend``: HAMi's switch, off by
    default); ``SchedulerSettings`` is the model of ``hami.devices.REGISTRY``."""

    registry: ClassVar[Registry] = ()

    model_config = SettingsConfigDict(
        env_prefix="HAMI_",
        case_sensitive=False,
        extra="forbid",
        frozen=True,
        validate_by_name=True,
        validate_default=True,
    )

    scheduler_name: Annotated[str, Field(min_length=1)] = "hami-scheduler"
    """The name the webhook writes into ``spec.schedulerName``; also the events' source component."""
    node_scheduler_policy: NodeSchedulerPolicy = "binpack"
    """Default node policy: ``binpack`` fills the most used node first, ``spread`` the least used."""
    gpu_scheduler_policy: str = "spread"
    """Default GPU policy: spread, binpack, topology-aware, mutex, numa, or a comma chain (numa,binpack)."""
    http_bind: str = "127.0.0.1:8080"
    """Listen address of the Service-facing server: ``/webhook``, ``/healthz``, ``/readyz`` (not the extender)."""
    extender_bind: str = "127.0.0.1:8888"
    """Listen address of ``/filter`` and ``/bind`` (and health). Loopback unless a client authentication is set."""
    cert_file: str = ""
    key_file: str = ""
    """TLS certificate and key; both or neither. Every listener but metrics (unless ``metrics_secure``) uses them."""
    extender_client_ca_file: str = ""
    """CA bundle that extender clients' certificates must chain to (mutual TLS on the extender listener)."""
    extender_token_file: str = ""
    """File of bearer tokens (one a line) an extender call must present in ``Authorization: Bearer``."""
    metrics_bind_address: str = ":9395"
    metrics_secure: bool = False
    """Serve ``/metrics`` over TLS to callers allowed ``get`` on ``/metrics`` (TokenReview + SubjectAccessReview)."""
    node_label_selector: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """Only nodes with all these labels are registered (``gpu=on,zone=a``)."""
    kube_qps: Annotated[float, Field(gt=0)] = 300.0
    kube_burst: Annotated[int, Field(ge=1)] = 600
    kube_timeout: Annotated[float, Field(ge=0)] = 0.0
    """Timeout of one API request (connect, send, read; watches excepted) in seconds; 0 = the client's default
    (30 s). Retries of a throttled request are bounded separately (``ClientSettings.retry_budget``)."""
    node_lock_timeout: Annotated[float, Field(gt=0, validation_alias=_env_alias("node_lock_timeout"))] = 300.0
    """Age after which another scheduler may break a node lock (HAMi: 5m)."""
    node_lock_retry_timeout: Annotated[float, Field(ge=0)] = 28.0
    """How long Bind keeps retrying a node lock held by another PodGroup member; 0 fails at once. Keep it
    below the extender ``httpTimeout`` (30 s in the chart)."""
    bind_lock_wait: Annotated[float, Field(ge=0)] = 20.0
    """How long a bind waits for a node locked by another hami bind in progress (the device plugin releases the
    lock after Allocate); 0 fails at once, as HAMi does. Keep it well below the extender ``httpTimeout``."""
    success_events: bool = True
    """Write the Normal events of a scheduled pod: HAMi's ``FilteringSucceed`` and ``BindingSucceed``, hami's
    ``FilteredNodes``. Failures are always written."""
    requeue_interval: Annotated[float, Field(ge=0)] = 5.0
    """Once capacity frees on a node while pods wait for hami, the leader writes ``hami.io/capacity-freed`` on it (a
    Node event: kube-scheduler retries the pods it parked after hami turned them down), at most once per node per
    this many seconds; 0 writes none (kube-scheduler then retries them at its next event, within 5 minutes)."""
    force_overwrite_default_scheduler: bool = True
    """Whether the webhook may replace ``spec.schedulerName: default-scheduler``."""
    preemption: PreemptionMode = "auto"
    """Who carries out preemption for pods that fit nowhere: ``self`` (hami evicts; any version), ``extender``
    (kube-scheduler 1.38+ calls hami's /preempt and evicts; by choice only), ``off``; ``auto`` is ``self``."""
    leader_elect: bool = False
    leader_elect_resource_name: str = ""
    """Lease to follow; "" = ``scheduler_name``."""
    leader_elect_resource_namespace: str = ""
    """Namespace of the lease; "" = the scheduler's own namespace (``POD_NAMESPACE``)."""
    device_profiles: str | None = None
    """Directory of node groups' device profiles (a mounted ConfigMap: one file per group, named by the value of
    ``device_profile_label``, holding registration annotations): the inventory of Cluster Autoscaler's template
    nodes that carry none (``hami.config.profiles``); None = no profiles."""
    device_profile_label: str = "node.kubernetes.io/instance-type"
    """The node label whose value names a template node's profile."""
    device_config_file: str | None = None
    """Path of ``device-config.yaml``; None = the built-in defaults."""
    dra_mode: bool = False
    """DRA mode (docs/dra-mode.md): serve ``/webhook/dra`` (pods of the DRA namespaces become ResourceClaims that
    kube-scheduler allocates) and run the claim controller in the leader. Off: ``/webhook/dra`` refuses every pod
    with a message saying so, and no claim is created."""
    dra_device_class: Annotated[str, Field(min_length=1)] = "hami-core-gpu.project-hami.io"
    """The DeviceClass the claims of DRA mode name (``deviceClassName``): HAMi's, which ``hami dra-plugin``'s
    devices match."""
    dra_card_memory: Annotated[tuple[int, ...], NoDecode] = ()
    """DRA mode: the card memory sizes in MiB a ``gpumem-percentage`` request is translated for (one claim
    alternative per size, at most 8); empty = the sizes hami's DRA driver publishes in its ResourceSlices now."""
    profiling: bool = False
    """HAMi's pprof routes; hami has none (only ``false`` is accepted)."""
    legacy_metrics: bool = False
    """HAMi's pre-2.4 metric names; hami exports the current names only (only ``false`` is accepted)."""
    debug: bool = False
    disable_devices: Annotated[frozenset[str], NoDecode] = frozenset()
    """Device families not to schedule (``nvidia,hygon``; the chart's ``devices.<family>.enabled: false``)."""

    @field_validator("profiling", "legacy_metrics")
    @classmethod
    def _unsupported(cls, value: bool, info: Any) -> bool:
        if value:
            raise ValueError(_UNSUPPORTED[info.field_name])
        return value

    @field_validator(
        "node_lock_timeout",
        "node_lock_retry_timeout",
        "bind_lock_wait",
        "kube_timeout",
        "requeue_interval",
        mode="before",
    )
    @classmethod
    def _durations(cls, value: object, info: Any) -> object:
        try:
            return _seconds(value, info.field_name)
        except ConfigError as err:
            raise ValueError(err.reason) from None

    @field_validator("gpu_scheduler_policy")
    @classmethod
    def _gpu_policy(cls, value: str) -> str:
        tokens = [token.strip() for token in value.split(",")]
        unknown = [token for token in tokens if token not in GPU_POLICY_TOKENS]
        if unknown:
            hint = did_you_mean(unknown[0], GPU_POLICY_TOKENS)
            raise ValueError(f"unknown policy {unknown[0]!r}; use {', '.join(sorted(GPU_POLICY_TOKENS))}{hint}")
        return ",".join(tokens)

    @field_validator("http_bind", "extender_bind", "metrics_bind_address")
    @classmethod
    def _bind(cls, value: str) -> str:
        return _check_bind(value)

    @field_validator("node_label_selector", mode="before")
    @classmethod
    def _selector(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        selector: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            key, sep, label = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"expected key=value pairs separated by commas, not {part!r}")
            selector[key.strip()] = label.strip()
        return selector

    @field_validator("dra_card_memory", mode="before")
    @classmethod
    def _card_sizes(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            sizes = tuple(int(part) for part in (p.strip() for p in value.split(",")) if part)
        except ValueError:
            raise ValueError(f"expected MiB numbers separated by commas (40960,81920), not {value!r}") from None
        if any(size <= 0 for size in sizes) or len(set(sizes)) > 8:
            raise ValueError(f"expected at most 8 sizes in MiB, each above 0, not {value!r}")
        return tuple(sorted(set(sizes)))

    @field_validator("disable_devices", mode="before")
    @classmethod
    def _families(cls, value: object) -> object:
        names = [p.strip() for p in value.split(",")] if isinstance(value, str) else value
        if not isinstance(names, (list, tuple, set, frozenset)):
            return value
        families = [f.family for f in cls.registry]
        unknown = sorted(str(n) for n in names if n and n not in families)
        if unknown:
            hint = did_you_mean(unknown[0], families)
            raise ValueError(f"unknown device family {unknown[0]!r}; use {', '.join(families)}{hint}")
        return frozenset(n for n in names if n)

    @property
    def enabled_families(self) -> frozenset[str]:
        """The device families to schedule: every family HAMi knows but the gated ones not switched on and those
        in ``disable_devices``."""
        families = {f.family for f in self.registry}
        gated_off = {family for family, switch in self.gates().items() if not getattr(self, switch)}
        return frozenset(families) - gated_off - self.disable_devices

    @classmethod
    def gates(cls) -> dict[str, str]:
        """The gated families of the registry, by their switch (``{"ascend": "enable_ascend"}``)."""
        return {f.family: f.gate.setting for f in cls.registry if f.gate is not None}

    @property
    def lease_name(self) -> str:
        """The lease to follow when ``leader_elect`` is on."""
        return self.leader_elect_resource_name or self.scheduler_name

    def model_post_init(self, context: Any) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            missing = "key_file" if self.cert_file else "cert_file"
            raise ConfigError(flag_name(missing), "", "--cert_file and --key_file must be given together")
        _check_access(self)
        for family, switch in self.gates().items():
            if getattr(self, switch) and family in self.disable_devices:
                raise ConfigError(
                    "--disable-devices",
                    ",".join(sorted(self.disable_devices)),
                    f"names {family}, which --{switch.replace('_', '-')} switches on: give one or the other",
                )


def settings_model(registry: Registry) -> type[SchedulerSettingsBase]:
    """The settings of ``registry``: ``SchedulerSettingsBase`` and one switch per gated family, off by default
    (``enable_ascend``, read from ``--enable-ascend`` or ``HAMI_ENABLE_ASCEND``)."""
    gates: dict[str, Any] = {
        f.gate.setting: (bool, Field(default=False, description=f"{f.gate.help} (HAMi's switch; off by default)."))
        for f in registry
        if f.gate is not None
    }
    model = create_model("SchedulerSettings", __base__=SchedulerSettingsBase, __module__=__name__, **gates)
    model.registry = tuple(registry)
    return model


if TYPE_CHECKING:
    SchedulerSettings = SchedulerSettingsBase
else:
    SchedulerSettings = settings_model(REGISTRY)
    SchedulerSettings.__doc__ = SchedulerSettingsBase.__doc__


def is_loopback(host: str) -> bool:
    """Whether a listen host is reachable only from this machine (or pod): 127.0.0.0/8, ::1, localhost."""
    return host in {"localhost", "::1"} or host.startswith("127.")


def _host_port(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    return host.strip("[]"), int(port)


def _check_access(s: SchedulerSettingsBase) -> None:
    """Listener combinations that would expose the extender or half-configure an authentication."""
    host, _ = _host_port(s.extender_bind)
    authenticated = bool(s.extender_client_ca_file or s.extender_token_file)
    if not is_loopback(host) and not authenticated:
        raise ConfigError(
            "--extender-bind",
            s.extender_bind,
            "/filter and /bind may bind any pod to any node, so they listen beyond loopback only with client "
            "authentication: add --extender-client-ca-file (client certificates) or --extender-token-file "
            "(bearer token), or listen on 127.0.0.1",
        )
    if s.extender_client_ca_file and not s.cert_file:
        raise ConfigError(
            "--extender-client-ca-file",
            s.extender_client_ca_file,
            "client certificates need TLS on the extender listener: give --cert_file and --key_file as well",
        )
    if s.metrics_secure and not s.cert_file:
        raise ConfigError(
            "--metrics-secure",
            True,
            "authenticated metrics are served over TLS (a bearer token over plain HTTP can be read on the way): "
            "give --cert_file and --key_file as well",
        )
    _check_distinct(s)


def _check_distinct(s: SchedulerSettingsBase) -> None:
    listeners = {
        "--http_bind": s.http_bind,
        "--extender-bind": s.extender_bind,
        "--metrics-bind-address": s.metrics_bind_address,
    }
    seen: dict[int, tuple[str, str]] = {}
    for flag, bind in listeners.items():
        host, port = _host_port(bind)
        if port == 0:  # any free port: never the same as another listener's
            continue
        if port in seen:
            other_flag, other_host = seen[port]
            if host == other_host or host in _WILDCARD or other_host in _WILDCARD:
                raise ConfigError(
                    flag,
                    bind,
                    f"the same port as {other_flag} ({listeners[other_flag]}): give each listener its own port",
                )
        seen.setdefault(port, (flag, host))


_WILDCARD: Final = frozenset({"", "0.0.0.0", "::"})


def given_as(setting: str, overrides: Mapping[str, object], env: Mapping[str, str]) -> str:
    """How the user gave a setting: its flag when on the command line, else the variable set in ``env``, else the
    flag (a default)."""
    if setting in overrides:
        return flag_name(setting)
    present = {name.upper() for name in env}
    return next((name for name in env_names(setting) if name in present), flag_name(setting))


def load_settings(
    overrides: Mapping[str, object] | None = None, model: type[SchedulerSettingsBase] = SchedulerSettings
) -> SchedulerSettingsBase:
    """Settings from ``overrides`` (command-line values by setting name), then ``HAMI_*`` variables, then defaults;
    ``model`` is the registry's (``settings_model``; the default: ``hami.devices.REGISTRY``'s).

    Raises :class:`~hami.errors.ConfigError` naming the value and the flag or variable it came from.
    """
    given: dict[str, Any] = dict(overrides or {})
    try:
        return model(**given)
    except ValidationError as exc:
        names = {name: given_as(name, given, os.environ) for name in model.model_fields}
        # a setting read under several variables reports its first one; name the one that was set
        names.update({alias: names[name] for name in _LEGACY_ENV for alias in env_names(name)})
        raise config_error(exc, rename=names) from None
