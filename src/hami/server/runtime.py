"""``hami scheduler``: assemble the watches, the state, the extender and the HTTP servers, and run them.

One asyncio loop runs everything: one reflector task per resource kind (nodes, pods, resource quotas and, with
leader election, the Lease), three HTTP servers (the Service listener: webhook and health; the extender
listener: filter, bind and health, loopback-only by default; metrics; see ``hami.server.access``), and two
housekeeping loops (the ledger self-check and the release of node locks whose holder is gone). SIGTERM and
SIGINT stop accepting connections, let in-flight requests finish (uvicorn's graceful shutdown), then cancel the
tasks. Every background task, loop or one-shot write, is started through one ``Supervisor`` that logs failures.

This module only assembles; each job has its home: ``hami.server.leadership`` (the Lease, the role label),
``hami.server.nodelocks`` (lock hand-over and release), ``hami.server.nodes`` (quarantine report, handshake),
``hami.server.extender`` (the cycle's edge), ``hami.server.dra`` (the DRA watches), ``hami.server.requeue`` (the
nudge to kube-scheduler once capacity frees).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta

import uvicorn
from starlette.routing import Route
from starlette.types import ASGIApp

from hami.config import DeviceConfig, SchedulerSettings
from hami.devices import vendors_from_config
from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.cluster import KubeCluster
from hami.k8s.config import KubeConfig
from hami.k8s.events import EventRecorder
from hami.k8s.extender_io import ExtenderIO
from hami.k8s.nodelock import NodeLocker
from hami.k8s.records import Lease
from hami.k8s.resources import LEASES, NODES, PODS, RESOURCE_QUOTAS
from hami.k8s.reviews import AccessReviewer
from hami.k8s.serverversion import read_server_profile
from hami.k8s.tasks import Supervisor
from hami.k8s.watch import Callbacks, Reflector
from hami.protocol.kubeversion import ServerProfile
from hami.protocol.objects import Node, Pod, ResourceQuota, WatchedPod
from hami.scheduling.admission import AdmissionSettings
from hami.scheduling.request import SchedulingDefaults
from hami.scheduling.state import ClusterState
from hami.server.access import BearerTokenGate, MetricsGate, Transport, load_transport
from hami.server.app import build_app, build_metrics_app, build_service_app
from hami.server.audit import API_AUDIT_SECONDS, LedgerAudit
from hami.server.dra import DraWatches, dra_mode, start_dra
from hami.server.draclaims import ClaimController
from hami.server.extender import Extender, Readiness
from hami.server.leadership import Leadership
from hami.server.listen import guarded_h11, listen
from hami.server.looplag import watch_loop_lag
from hami.server.metrics import Metrics
from hami.server.nodelocks import LockHousekeeping
from hami.server.nodes import NodeHandling
from hami.server.podgroups import start_pod_group_watches
from hami.server.preemptmode import Resolved, resolve_preemption
from hami.server.requeue import RequeueNudges
from hami.server.tls import CertificateReloader
from hami.server.webhook import admission_for, dra_webhook_route, webhook_route
from hami.simulate.scaleup import load_device_profiles

__all__ = ["Runtime", "parse_bind", "run_scheduler"]

log = logging.getLogger("hami.scheduler")

SELF_CHECK_SECONDS = 60.0
"""How often the ledger is compared with a full recount (drift is exported as ``hami_ledger_drift``)."""
RECOUNT_SLICE = 100
"""Nodes recounted between two turns of the event loop (about 1,000 pods at Kubernetes' 5,000 nodes / 50,000 pods:
a few ms); ten times as many records for the quota recount."""
TLS_RELOAD_SECONDS = 10.0
"""How often the certificate files are checked for a change (cert-manager renews days before expiry)."""


def parse_bind(value: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """``host:port`` or ``:port`` → (host, port)."""
    host, _, port = value.rpartition(":")
    return (host.strip("[]") or default_host), int(port)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the runtime stops both servers together."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class Runtime:
    """Everything ``hami scheduler`` runs, built from settings; ``run()`` serves until stopped."""

    settings: SchedulerSettings
    device_config: DeviceConfig
    kubeconfig: KubeConfig
    identity: str = field(default_factory=socket.gethostname)
    extra_routes: list[Route] = field(default_factory=list)
    transport: Transport | None = None
    """TLS contexts and the extender's token file; None: loaded from the settings when the runtime is built."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    state: ClusterState = field(init=False)
    metrics: Metrics = field(init=False)
    leadership: Leadership = field(init=False)
    housekeeping: LockHousekeeping = field(init=False)
    nodes: NodeHandling = field(init=False)
    requeue: RequeueNudges = field(init=False)
    dra: DraWatches | None = None
    """The DRA watches, once started (None with DRA off)."""
    claims: ClaimController | None = None
    """DRA mode's claim controller, once started (None with ``--dra-mode`` off)."""
    server: ServerProfile | None = None
    """What hami chose for the API server's version (read at start; None: it could not be read)."""
    preemption: Resolved = "off"
    """``--preemption`` as resolved at start-up (``hami.server.preemptmode``)."""

    def __post_init__(self) -> None:
        if self.transport is None:  # read the files now: a missing or bad one is a ConfigError at start-up
            self.transport = load_transport(self.settings)
        self.vendors = vendors_from_config(self.device_config, self.settings.enabled_families)
        self.profiles = load_device_profiles(self.settings.device_profiles, self.settings.device_profile_label)
        self.state = ClusterState(self.vendors)
        self.metrics = Metrics(lambda: self.state)
        self.leadership = Leadership(self.settings.leader_elect, self.identity)
        self.housekeeping = LockHousekeeping(sorted({v.keys.lock for v in self.vendors.values() if v.keys.lock}))
        self.nodes = NodeHandling(self.vendors, self.state, self.metrics, self.leadership.is_leader)
        s = self.settings
        self.requeue = RequeueNudges(s.scheduler_name, s.requeue_interval, self.leadership.is_leader, self.metrics)

    def watch_handlers(
        self, extender: Extender, cluster: KubeCluster, locker: NodeLocker, events: EventRecorder, tasks: Supervisor
    ) -> tuple[Callable[[Node, bool], None], Callable[[Pod, bool], None]]:
        """The node and pod watches' handlers: the extender's ledger first, then locks, node reports and the nudge
        to kube-scheduler once the ledger freed capacity."""
        self.housekeeping.attach(locker, tasks)
        self.nodes.attach(cluster, events, tasks)
        self.requeue.attach(cluster, tasks)
        extender.freed = self.requeue.capacity_freed

        def on_node(obj: Node, deleted: bool) -> None:
            if deleted:
                self.housekeeping.node_gone(obj.metadata.name)
                self.nodes.node_gone(obj.metadata.name)
                self.requeue.node_gone(obj.metadata.name)
                extender.on_node(obj, deleted=True)
                return
            self.housekeeping.node_seen(obj)
            extender.on_node(obj)
            self.nodes.node_seen(obj)

        def on_pod(obj: Pod, deleted: bool) -> None:
            held = self.state.pods.get(obj.metadata.uid)
            extender.on_pod(obj, deleted)
            self.housekeeping.pod_seen(obj, deleted)
            freed = held is not None and obj.metadata.uid not in self.state.pods
            self.requeue.pod_seen(obj, deleted, held.node if held is not None and freed else None)
            if self.claims is not None:
                self.claims.pod_seen(obj, deleted)

        return on_node, on_pod

    # --- loops ----------------------------------------------------------------------------------------
    async def _self_check(self, audit: LedgerAudit | None = None) -> None:
        """Recount the ledger every minute; every ``API_AUDIT_SECONDS`` also compare it with the API's pods."""
        audited = time.monotonic()
        while True:
            await asyncio.sleep(SELF_CHECK_SECONDS)
            diffs = await self._verify_sliced()
            self.metrics.ledger_drift.set(len(diffs))
            for line in diffs[:20]:
                log.error("ledger drift: %s", line)
            if audit is not None and time.monotonic() - audited >= API_AUDIT_SECONDS:
                audited = time.monotonic()
                await audit.run()

    async def _verify_sliced(self) -> list[str]:
        """``ClusterState.verify`` a slice of :data:`RECOUNT_SLICE` nodes at a time, the event loop free between
        slices (the whole recount held it 0.7 s at 100,000 pods on a loaded machine)."""
        names = list(self.state.nodes)
        diffs: list[str] = []
        for start in range(0, len(names), RECOUNT_SLICE):
            diffs += self.state.verify_nodes(names[start : start + RECOUNT_SLICE])
            await asyncio.sleep(0)
        for part in self.state.verify_rest_sliced(RECOUNT_SLICE * 10):
            diffs += part
            await asyncio.sleep(0)
        return diffs

    # --- run ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        s = self.settings
        # Every listener is bound first: a port in use ends the process before the API is touched.
        listeners = [
            listen(bind, flag, *parse_bind(bind))
            for bind, flag in (
                (s.http_bind, "--http_bind"),
                (s.extender_bind, "--extender-bind"),
                (s.metrics_bind_address, "--metrics-bind-address"),
            )
        ]
        try:
            await self._run(listeners)
        finally:
            for sock in listeners:
                sock.close()

    def _audit(self, cluster: KubeCluster, extender: Extender, readiness: Readiness) -> LedgerAudit:
        """The periodic API re-list of pods, believing what the pod watch believes (``--scheduler-name``)."""
        return LedgerAudit(
            self.state,
            self.vendors,
            cluster,
            self.metrics,
            lambda: extender.cycle.pending,
            readiness.synced,
            schedulers=(self.settings.scheduler_name,),
        )

    async def _run(self, listeners: list[socket.socket]) -> None:
        s = self.settings
        hold_collector()
        asyncio.get_running_loop().call_later(SYNC_GC_HOLD_S, gc.enable)
        client_settings = api_client_settings(s)
        # Events get their own client and so their own rate limiter, as kube-scheduler does (its eventClient):
        # sharing the --kube-qps budget with them slows Filter and Bind down.
        async with (
            KubeClient(self.kubeconfig, client_settings) as client,
            KubeClient(self.kubeconfig, client_settings) as event_client,
            Supervisor(log) as supervisor,
            contextlib.AsyncExitStack() as stack,
        ):
            self.server = await read_server_profile(client)
            cluster = KubeCluster(client, instance=self.identity)
            locker = NodeLocker(cluster, timeout=timedelta(seconds=s.node_lock_timeout))
            events = EventRecorder(KubeCluster(event_client, instance=self.identity), s.scheduler_name)
            synced: dict[str, bool] = {"nodes": False, "pods": False, "quotas": False}
            watched_nodes: Mapping[str, Node] = {}  # the node reflector's store, once it exists
            watched_pods: Mapping[str, Pod] = {}  # the pod reflector's store (identity checks), once it exists
            readiness = Readiness(synced=lambda: all(synced.values()), leader=self.leadership.is_leader)
            self.nodes.ready = readiness.synced  # the handshake stamps wait for the first lists
            extender = Extender(
                state=self.state,
                vendors=self.vendors,
                defaults=SchedulingDefaults(s.node_scheduler_policy, s.gpu_scheduler_policy),
                # late binding: the node reflector (and its store) is created below
                cluster=ExtenderIO(
                    cluster,
                    locker,
                    events,
                    node_hint=lambda name: watched_nodes.get(name),  # noqa: PLW0108
                    pod_hint=lambda ns, name: watched_pods.get(f"{ns}/{name}"),
                ),
                metrics=self.metrics,
                readiness=readiness,
                lock_retry_timeout=s.node_lock_retry_timeout,
                bind_lock_wait=s.bind_lock_wait,
                success_events=s.success_events,
                lock_waits=self.housekeeping.lock_waits,
                node_locks=self.housekeeping.locks,
                dra=self.device_config.dra,
                preemption=self._preemption_mode() == "self",
                scheduler_name=s.scheduler_name,
                profiles=self.profiles,
            )
            self.extender = extender
            watched_nodes, watched_pods = self._start_watches(
                client, cluster, extender, locker, events, supervisor, synced
            )
            supervisor.start(self._self_check(self._audit(cluster, extender, readiness)), name="self-check")
            supervisor.start(self.housekeeping.sweep(), name="lock-sweep")
            supervisor.start(watch_loop_lag(self.metrics.loop_lag.observe), name="loop-lag")
            servers = await self._servers(extender, supervisor, stack, client_settings)
            await self._serve(servers, listeners)
            self.housekeeping.stop_checks()
            await extender.settle_all()
            await events.aclose()

    def _preemption_mode(self) -> Resolved:
        """``--preemption`` resolved (``auto`` by the API server's version), logged; kept in ``preemption``."""
        # the version read at start (read_server_profile; None: it could not be read, which that logged)
        version = None if self.server is None else str(self.server.version)
        self.preemption, why = resolve_preemption(self.settings.preemption, version)
        log.info("preemption: %s (%s)", self.preemption, why)
        return self.preemption

    def _start_watches(
        self,
        client: KubeClient,
        cluster: KubeCluster,
        extender: Extender,
        locker: NodeLocker,
        events: EventRecorder,
        supervisor: Supervisor,
        synced: dict[str, bool],
    ) -> tuple[Mapping[str, Node], Mapping[str, Pod]]:
        """The node, pod and quota watches (and the Lease's with leader election); returns the node and pod
        stores. ``synced`` records each watch's first sync; the first time all are, the heap is settled."""
        s = self.settings

        def mark(kind: str) -> Callable[[], None]:
            def done() -> None:
                first = not all(synced.values())
                synced[kind] = True
                if first and all(synced.values()):
                    settle_heap()

            return done

        if s.dra_mode:  # before the pod watch starts, so that its first list is served too
            self.claims = self._claim_controller(client, extender, events, lambda: watched)
            supervisor.start(self.claims.run(supervisor), name="dra-claims")
        on_node, on_pod = self.watch_handlers(extender, cluster, locker, events, supervisor)
        selector = ",".join(f"{k}={v}" for k, v in sorted(s.node_label_selector.items())) or None
        nodes = Reflector(
            client,
            NODES,
            Node,
            Callbacks(on_node, mark("nodes")),
            label_selector=selector,
        )
        pods = Reflector(
            client, PODS, WatchedPod, Callbacks(on_pod, mark("pods"))
        )  # a Pod without the containers' env (never read here)
        quotas = Reflector(client, RESOURCE_QUOTAS, ResourceQuota, Callbacks(extender.on_quota, mark("quotas")))
        watched: Mapping[str, Pod] = pods.store
        supervisor.start(nodes.run(), name="watch-nodes")
        supervisor.start(pods.run(), name="watch-pods")
        supervisor.start(quotas.run(), name="watch-quotas")
        supervisor.once(start_pod_group_watches(client, extender.on_pod_group, supervisor), name="podgroups")
        mode = dra_mode(bool(self.device_config.dra.active()), self.server)
        if mode == "watch":  # the ResourceSlices and ResourceClaims of the configured DRA drivers
            synced["dra"] = False
            self.dra = start_dra(
                client, extender, events, self.metrics, supervisor, mark("dra"), self.leadership.is_leader
            )
            if self.claims is not None:
                self.dra.on_claim = self.claims.claim_seen
        else:
            log.info("DRA: %s: ResourceClaims are not counted", mode)
        if s.leader_elect:
            synced["lease"] = False
            self._follow_lease(client, cluster, supervisor, mark("lease"))
        return nodes.store, pods.store

    def _claim_controller(
        self, client: KubeClient, extender: Extender, events: EventRecorder, pods: Callable[[], Mapping[str, Pod]]
    ) -> ClaimController:
        """DRA mode's claim controller (leader only), fed by the pod watch and, when it runs, the claim watch."""
        from hami.server.dramode import dra_translate

        s = self.settings
        return ClaimController(
            client,
            events,
            dra_translate(extender, s),
            s.scheduler_name,
            self.metrics.own,
            pods=pods,
            is_leader=self.leadership.is_leader,
        )

    def _follow_lease(
        self, client: KubeClient, cluster: KubeCluster, supervisor: Supervisor, synced: Callable[[], None]
    ) -> None:
        """The Lease's watch (``--leader-elect``) and the role label of this replica's pod."""
        s = self.settings
        lease = Reflector(
            client,
            LEASES,
            Lease,
            Callbacks(self.leadership.on_lease, synced),
            namespace=s.leader_elect_resource_namespace or None,
            field_selector=f"metadata.name={s.lease_name}",
        )
        supervisor.start(lease.run(), name="watch-lease")
        pod_name, pod_namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
        if pod_name and pod_namespace:
            role = self.leadership.label_role(cluster, self.metrics, pod_namespace, pod_name)
            supervisor.start(role, name="role-label")
        else:
            log.warning("POD_NAME or POD_NAMESPACE is not set: this replica's pod gets no role label")

    async def _servers(
        self,
        extender: Extender,
        supervisor: Supervisor,
        stack: contextlib.AsyncExitStack,
        client_settings: ClientSettings,
    ) -> list[_Server]:
        """The webhook (service), extender and metrics servers, in the order of the listeners, with their TLS
        reloaders and access gates."""
        s = self.settings
        admission = admission_for(extender, AdmissionSettings(s.scheduler_name, s.force_overwrite_default_scheduler))
        routes = [webhook_route(admission, self.metrics), self._dra_route(extender), *self.extra_routes]
        transport = self.transport or load_transport(s)
        for i, tls in enumerate(transport.reloaders()):  # files rotated on disk are picked up without a restart
            supervisor.start(tls.watch(TLS_RELOAD_SECONDS), name=f"tls-reload-{i}")
        extender_app: ASGIApp = build_app(extender)
        if transport.extender_tokens is not None:
            extender_app = BearerTokenGate(extender_app, transport.extender_tokens)
        metrics_app: ASGIApp = build_metrics_app(self.metrics)
        if s.metrics_secure:  # its own client: its own rate limit, so scrapes never slow down scheduling
            review_client = await stack.enter_async_context(KubeClient(self.kubeconfig, client_settings))
            metrics_app = MetricsGate(metrics_app, AccessReviewer(review_client, "/metrics"))
        return [
            self._server(build_service_app(extender, routes), s.http_bind, transport.service_tls),
            self._server(extender_app, s.extender_bind, transport.extender_tls),
            self._server(metrics_app, s.metrics_bind_address, transport.metrics_tls),
        ]

    def _dra_route(self, extender: Extender) -> Route:
        """``/webhook/dra``: DRA mode's translation, or (``--dra-mode`` off) a refusal saying DRA mode is off."""
        if not self.settings.dra_mode:
            return dra_webhook_route(None, self.metrics)
        from hami.server.dramode import LiveDraAdmission

        return dra_webhook_route(LiveDraAdmission(extender, self.settings), self.metrics)

    async def _serve(self, servers: list[_Server], listeners: list[socket.socket]) -> None:
        """Serve on the listeners until a server ends or ``stop`` is set; then let every server finish."""
        s = self.settings
        self._install_signals(*servers)
        log.info(
            "hami scheduler %s serving webhook on %s, extender on %s, metrics on %s",
            s.scheduler_name, s.http_bind, s.extender_bind, s.metrics_bind_address,
        )  # fmt: skip
        serving = [
            asyncio.create_task(server.serve(sockets=[sock])) for server, sock in zip(servers, listeners, strict=True)
        ]
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait([*serving, stopper], return_when=asyncio.FIRST_COMPLETED)
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*serving, return_exceptions=True)
        stopper.cancel()

    def _server(self, app: ASGIApp, bind: str, tls: CertificateReloader | None) -> _Server:
        host, port = parse_bind(bind)
        kwargs: dict[str, object] = {}
        if tls is not None:
            # uvicorn still needs the file names to switch TLS on; the context it uses is the reloader's.
            kwargs = {
                "ssl_certfile": self.settings.cert_file,
                "ssl_keyfile": self.settings.key_file,
                "ssl_context_factory": tls.context_factory,
            }
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            http=guarded_h11(),  # a request not read completely in 10 s closes its connection (slowloris)
            **kwargs,  # type: ignore[arg-type]
        )
        return _Server(config)

    def _install_signals(self, *servers: _Server) -> None:
        loop = asyncio.get_running_loop()

        def shutdown() -> None:
            log.info("stopping: finishing in-flight requests")
            for server in servers:
                server.should_exit = True
            self.stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
                loop.add_signal_handler(sig, shutdown)


def api_client_settings(settings: SchedulerSettings) -> ClientSettings:
    """The API client's settings from ``--kube-qps``, ``--kube-burst`` and ``--kube-timeout`` (0: the default)."""
    client = ClientSettings(qps=settings.kube_qps, burst=settings.kube_burst)
    if settings.kube_timeout > 0:
        client = replace(client, request_timeout=settings.kube_timeout)
    return client


SYNC_GC_HOLD_S = 60.0
"""At most this long after start the cyclic garbage collector stays off while the first lists are decoded."""


def hold_collector() -> None:
    """Before the first full sync: no cyclic garbage collection until ``settle_heap``.

    The first lists create millions of long-lived objects (at 100,000 pods); the collector would scan the growing
    heap again and again while they are decoded, which made the cold start about 1.6 times slower. The caller
    re-enables it after ``SYNC_GC_HOLD_S`` at the latest, should the sync never complete.
    """
    gc.disable()


def settle_heap() -> None:
    """After the first full sync, move the (long-lived) cached state out of the garbage collector's sight.

    The ledger holds one record per placed pod; scanning them in every full collection costs tens of
    milliseconds per Filter at 100,000 pods. ``gc.freeze`` keeps them alive and unscanned (objects created
    later are collected as usual). The collector, held off during the sync (``hold_collector``), runs again.

    There is no full collection before the freeze: it would walk the whole new heap (0.4 s at 100,000 pods) to
    find the little cyclic garbage the sync left (objects freed by reference counting are gone already, frozen or
    not). What it leaves frozen is counted by ``bench.coldstart``: 173 objects (tens of KB), the same at 2,000 pods
    as at 100,000.
    """
    gc.freeze()
    gc.enable()


async def run_scheduler(settings: SchedulerSettings, device_config: DeviceConfig, kubeconfig: KubeConfig) -> None:
    await Runtime(settings, device_config, kubeconfig).run()
