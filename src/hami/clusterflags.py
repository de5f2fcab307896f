"""kubectl's habits, shared by every command that reads the cluster (``hami top``, ``hami explain``, ``hami simulate
--live``).

``@cluster_flags()`` adds kubectl's connection and scope flags to a Typer command and hands the command one typed
:class:`ClusterFlags` as its ``cluster`` argument:

======================  ==================================================================================
``--kubeconfig FILE``   the kubeconfig (else ``KUBECONFIG``, else in-cluster, else ``~/.kube/config``)
``--context NAME``      the kubeconfig context (else its current-context)
``-n, --namespace NS``  the namespace (else the context's, else ``default``)
``-A, --all-namespaces`` every namespace (wins over ``-n``, as in kubectl)
``--request-timeout T`` one API request's limit: whole seconds or a duration (``30``, ``2m``); ``0``: none
======================  ==================================================================================

A server that cannot be reached fails at once, with its address and the kubeconfig it came from (kubectl's
habit; the servers retry instead). Listing is read-only: ``list`` on nodes, pods and resource quotas, and on the
DRA objects where served. ``-o`` formats shared by the views are :class:`Output`; :func:`dump` prints a JSON or YAML
document.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from hami.config.duration import parse_request_timeout
from hami.errors import ApiError, HamiError, InvalidInput, did_you_mean

if TYPE_CHECKING:  # imported where used: `hami version` and `hami -h` need no HTTP client
    from hami.k8s.client import ClientSettings
    from hami.k8s.config import KubeConfig
    from hami.k8s.listing import ClusterListing
    from hami.protocol.objects import Pod
    from hami.simulate.loading import Snapshot

__all__ = [
    "ClusterFlags",
    "LiveCluster",
    "Output",
    "choice",
    "cluster_flags",
    "dump",
    "one_of",
    "pick_pod",
    "read_cluster",
]

F = TypeVar("F", bound=Callable[..., Any])

DIAL_TIMEOUT = 30.0
"""Seconds to open a connection when ``--request-timeout`` sets no shorter limit (client-go's dialer)."""


class Output(StrEnum):
    """``-o``: a table for people, the table with more columns, or one JSON or YAML document."""

    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


E = TypeVar("E", bound=StrEnum)


def choice(kind: type[E]) -> Callable[[str], E]:
    """A Typer ``parser`` for an option that takes one of ``kind``'s values: the member (any case), or a usage
    error naming the choices and the closest one (``'jsno' is not one of table, json; did you mean json?``)."""
    pick = one_of([m.value for m in kind])

    def parse(value: str) -> E:
        return value if isinstance(value, kind) else kind(pick(value))

    return parse


def one_of(values: Sequence[str]) -> Callable[[str], str]:
    """``choice`` for plain strings."""

    def parse(value: str) -> str:
        given = value.strip().casefold()
        if given in values:
            return given
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(values)}{did_you_mean(value, values)}")

    return parse


def dump(document: object, output: Output | str) -> str:
    """The document as JSON (indented) or YAML (block style, keys in the document's order)."""
    if str(output) == "yaml":
        import yaml

        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True).rstrip("\n")
    return json.dumps(document, indent=2)


@dataclass(frozen=True, slots=True)
class ClusterFlags:
    """kubectl's connection and scope flags as given (``None``: not given)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    request_timeout: float | None = None
    """Seconds for one API request; ``None`` is no limit (``--request-timeout 0``, kubectl's default)."""

    def kube_config(self) -> KubeConfig:
        """The API server and credentials: ``--kubeconfig``/``--context`` as kubectl picks them."""
        from hami.k8s.config import load_config

        return load_config(self.kubeconfig, context=self.context)

    def client_settings(self) -> ClientSettings:
        """One attempt per request within ``--request-timeout``: the command line fails fast, as kubectl does
        (a throttled request, 429, is still retried after the server's ``Retry-After``)."""
        from hami.k8s.client import ClientSettings

        dial = min(self.request_timeout, DIAL_TIMEOUT) if self.request_timeout else DIAL_TIMEOUT
        return ClientSettings(request_timeout=self.request_timeout, connect_timeout=dial, retry_unreachable=False)

    def default_namespace(self, kube: KubeConfig | None = None) -> str:
        """``-n``, else the kubeconfig context's namespace, else ``default``. Without a cluster connection
        (``--snapshot``) a kubeconfig that cannot be read gives ``default`` rather than an error."""
        if self.namespace:
            return self.namespace
        if kube is None:
            try:
                kube = self.kube_config()
            except HamiError:
                return "default"
        return kube.namespace or "default"

    def scope(self, kube: KubeConfig | None = None) -> str | None:
        """The namespace a namespaced view looks in; ``None`` for every namespace (``-A``)."""
        return None if self.all_namespaces else self.default_namespace(kube)


def _timeout(value: str) -> float | None:
    try:
        return parse_request_timeout(value, "--request-timeout")
    except InvalidInput as err:
        raise typer.BadParameter(str(err).removeprefix(f"{err.field}: "), param_hint="'--request-timeout'") from None


_FLAGS: dict[str, tuple[Any, Any]] = {
    "kubeconfig": (
        Annotated[
            str | None,
            typer.Option(
                "--kubeconfig",
                metavar="FILE",
                help="Kubeconfig file. [default: $KUBECONFIG, else in-cluster, else ~/.kube/config]",
            ),
        ],
        None,
    ),
    "context": (
        Annotated[
            str | None,
            typer.Option("--context", metavar="NAME", help="Kubeconfig context. [default: its current-context]"),
        ],
        None,
    ),
    "request_timeout": (
        Annotated[
            str,
            typer.Option(
                "--request-timeout",
                metavar="DURATION",
                help="Limit of one API request: seconds or a duration (30, 500ms, 2m); 0 means none.",
            ),
        ],
        "0",
    ),
}

_SCOPE: dict[str, tuple[Any, Any]] = {
    "namespace": (
        Annotated[
            str | None,
            typer.Option(
                "--namespace",
                "-n",
                metavar="NAMESPACE",
                help="Namespace. [default: the kubeconfig context's, else default]",
            ),
        ],
        None,
    ),
    "all_namespaces": (
        Annotated[
            bool,
            typer.Option("--all-namespaces", "-A", help="Every namespace (wins over --namespace, as in kubectl)."),
        ],
        False,
    ),
}


def cluster_flags(*, scope: bool = True, scope_help: str = "") -> Callable[[F], F]:
    """Add kubectl's flags to a Typer command whose parameter ``cluster: ClusterFlags`` receives them.

    ``scope=False`` leaves out ``-n``/``-A`` (a command without a namespace); ``scope_help`` replaces the help of
    ``-n`` (what the namespace means to this command).
    """
    flags = dict(_FLAGS)
    if scope:
        flags.update(_SCOPE)
        if scope_help:
            ns_type, ns_default = _SCOPE["namespace"]
            base, option = typing.get_args(ns_type)
            flags["namespace"] = (Annotated[base, _with_help(option, scope_help)], ns_default)

    def decorate(func: F) -> F:
        hints = typing.get_type_hints(func, include_extras=True)
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(func).parameters.values()
        ]
        if not any(p.name == "cluster" for p in own):
            raise TypeError(f"{func.__name__} needs a parameter `cluster: ClusterFlags`")
        params = [p for p in own if p.name != "cluster"]
        params += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
            for name, (kind, default) in flags.items()
        ]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in flags}
            kwargs["cluster"] = ClusterFlags(
                kubeconfig=given["kubeconfig"],
                context=given["context"],
                namespace=given.get("namespace"),
                all_namespaces=bool(given.get("all_namespaces", False)),
                request_timeout=_timeout(given["request_timeout"]),
            )
            return func(**kwargs)

        del wrapper.__wrapped__  # Typer must read the new signature, not the function's own
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return typing.cast(F, wrapper)

    return decorate


def _with_help(option: Any, text: str) -> Any:
    from copy import copy

    changed = copy(option)
    changed.help = text
    return changed


@dataclass(frozen=True, slots=True)
class LiveCluster:
    """What a read-only listing of the cluster gave: the objects as a snapshot, notes (what could not be read),
    where it came from (the server), and the connection's default namespace."""

    snapshot: Snapshot
    notes: list[str]
    server: str
    kube: KubeConfig


def read_cluster(flags: ClusterFlags) -> LiveCluster:
    """List nodes, live pods, quotas and the DRA objects through the kubeconfig, read-only.

    Raises :class:`~hami.errors.HamiError` with a message for a person: a bad kubeconfig names the file and field,
    an unreachable server its address and the kubeconfig it came from.
    """
    from hami.k8s.client import KubeClient
    from hami.k8s.listing import list_cluster

    kube = flags.kube_config()

    async def fetch() -> ClusterListing:
        async with KubeClient(kube, flags.client_settings()) as client:
            return await list_cluster(client)

    try:
        listing = asyncio.run(fetch())
    except ApiError as err:
        if err.status != 0:
            raise
        where = kube.source or "the kubeconfig"
        raise ApiError(f"cannot reach the API server {kube.server} ({where}): {err}", 0) from None
    return LiveCluster(_as_snapshot(listing, kube.server), list(listing.notes), kube.server, kube)


def _as_snapshot(listing: ClusterListing, where: str) -> Snapshot:
    from hami.simulate.loading import Snapshot, Sourced

    return Snapshot(
        nodes=[Sourced(n, where, f"{where}: Node {n.metadata.name}") for n in listing.nodes],
        pods=[Sourced(p, where, f"{where}: Pod {p.key}") for p in listing.pods],
        quotas=[
            Sourced(q, where, f"{where}: ResourceQuota {q.metadata.namespace}/{q.metadata.name}")
            for q in listing.quotas
        ],
        classes=[Sourced(c, where, f"{where}: DeviceClass {c.metadata.name}") for c in listing.classes],
        slices=[Sourced(sl, where, f"{where}: ResourceSlice {sl.metadata.name}") for sl in listing.slices],
        claims=[
            Sourced(c, where, f"{where}: ResourceClaim {c.metadata.namespace}/{c.metadata.name}")
            for c in listing.claims
        ],
    )


def pick_pod(pods: Sequence[Pod], ref: str, cluster: ClusterFlags, kube: KubeConfig | None = None) -> Pod:
    """The pod ``ref`` (``NAME`` or ``NAMESPACE/NAME``) names, as kubectl resolves it.

    ``NAMESPACE/NAME`` names its namespace; ``-n`` naming another is an error (which one was meant?). A bare
    ``NAME`` is looked up in ``-n``, else the context's namespace; with ``-A`` in every namespace (an error when
    several namespaces hold one). Not found: the message says which namespaces hold a pod of that name.
    """
    ns, _, name = ref.rpartition("/")
    if ns and cluster.namespace and cluster.namespace != ns and not cluster.all_namespaces:
        raise InvalidInput(
            "POD", ref, f"names namespace {ns!r} but --namespace is {cluster.namespace!r}; give one of them"
        )
    holders = sorted({p.metadata.namespace or "default" for p in pods if p.metadata.name == name})
    if not ns and cluster.all_namespaces:
        if len(holders) > 1:
            raise InvalidInput("POD", ref, f"is a pod name in several namespaces ({', '.join(holders)}); give NS/NAME")
        ns = holders[0] if holders else "default"
    ns = ns or cluster.default_namespace(kube)
    for p in pods:
        if p.metadata.name == name and (p.metadata.namespace or "default") == ns:
            return p
    message = f"pod {ns}/{name} not found (finished pods are not listed)"
    if holders:
        where = ", ".join(holders)
        message += f"; a pod of that name is in namespace {where}: try `-n {holders[0]}` or {holders[0]}/{name}"
    raise HamiError(message)
