"""``hami scheduler``: assemble the watches, the state, the extender and the HTTP servers, and run them.

One asyncio loop runs everything: one reflector task per resource kind (nodes, pods, resource quotas and, with
leader election, the Lease), three HTTP servers (the Service listener: webhook and health; the extender
listener: filter, bind and health, loopback-only by default; metrics; see ``hami.server.access``), and two
housekeeping loops (the ledger self-check and the release of node locks whose holder is gone). SIGTERM and
SIGINT stop accepting connections, let in-flight requests finish (uvicorn's graceful shutdown), then cancel the
tasks. Every task is started through one ``Supervisor`` that logs failures.
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
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import uvicorn
from starlette.routing import Route
from starlette.types import ASGIApp

from hami.config import DeviceConfig, SchedulerSettings
from hami.devices import vendors_from_config
from hami.errors import ApiError
from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.cluster import KubeCluster
from hami.k8s.config import KubeConfig
from hami.k8s.events import EventRecorder
from hami.k8s.extender_io import ExtenderIO
from hami.k8s.lockwaits import NodeLockWaits
from hami.k8s.nodelock import NodeLocker, allocation_over, follows_bind_phase
from hami.k8s.records import Lease, ObjectRef
from hami.k8s.resources import LEASES, NODES, PODS, RESOURCE_QUOTAS
from hami.k8s.reviews import AccessReviewer
from hami.k8s.tasks import Supervisor
from hami.k8s.watch import Callbacks, Reflector
from hami.protocol import keys
from hami.protocol.events import EventType
from hami.protocol.handshake import decode_handshake, encode_requesting
from hami.protocol.nodelock import decode_node_lock
from hami.protocol.objects import Node, Pod, ResourceQuota, WatchedPod
from hami.scheduling.admission import AdmissionSettings
from hami.scheduling.records import is_terminal
from hami.scheduling.request import SchedulingDefaults
from hami.scheduling.state import ClusterState
from hami.server.access import BearerTokenGate, MetricsGate, Transport, load_transport
from hami.server.app import build_app, build_metrics_app, build_service_app
from hami.server.audit import API_AUDIT_SECONDS, LedgerAudit
from hami.server.dra import DraWatches, start_dra
from hami.server.extender import Extender, Readiness
from hami.server.listen import guarded_h11, listen
from hami.server.metrics import Metrics
from hami.server.tls import CertificateReloader
from hami.server.webhook import admission_for, webhook_route

__all__ = ["Runtime", "parse_bind", "run_scheduler"]

log = logging.getLogger("hami.scheduler")

SELF_CHECK_SECONDS = 60.0
"""How often the ledger is compared with a full recount (drift is exported as ``hami_ledger_drift``)."""
REGISTRATION_REFUSED = "RegistrationRefused"
"""Reason of the Warning event on a node whose device registration cannot be decoded (hami's own; HAMi has none)."""
LOCK_SWEEP_SECONDS = 30.0
"""How often nodes holding a lock are checked for a finished or deleted holder (HAMi never does this)."""
LEFT_BEHIND_GRACE_SECONDS = 2.0
"""How long the device plugin has, after writing a holder's bind phase ``success``/``failed``, to release
``hami.io/mutex.lock`` itself (it does so right after) before hami releases it: releasing at once would race the
plugin's own release on every pod, two needless API requests and a conflict for the plugin each time."""
TLS_RELOAD_SECONDS = 10.0
ROLE_CHECK_SECONDS = 0.5
"""How often leadership is compared with the pod's role label (no API call unless it changed)."""
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
    locks: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> lock key -> lock annotation value
    lock_waits: NodeLockWaits = field(default_factory=NodeLockWaits)
    """Binds waiting for a node lock hand-over, woken by the node watch."""
    quarantined: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> vendor -> refused registration
    lease_holder: str = ""
    lease_expiry: float = 0.0
    role_written: str = ""
    """The ``hami.io/scheduler-role`` value last written on this replica's own pod ("" before the first)."""
    dra: DraWatches | None = None
    """The DRA watches, once started (None with DRA off)."""

    left_behind_grace: float = LEFT_BEHIND_GRACE_SECONDS
    _writes: set[asyncio.Task[None]] = field(default_factory=set)
    _left_behind: dict[tuple[str, str, str], asyncio.TimerHandle] = field(default_factory=dict)
    """(node, lock key, lock value) → the pending check of a lock whose holder the device plugin is done with."""

    def __post_init__(self) -> None:
        if self.transport is None:  # read the files now: a missing or bad one is a ConfigError at start-up
            self.transport = load_transport(self.settings)
        self.vendors = vendors_from_config(self.device_config, self.settings.enabled_families)
        self.lock_keys = sorted({v.keys.lock for v in self.vendors.values() if v.keys.lock is not None})
        """Every node lock annotation a vendor takes (``VendorKeys.lock``): watched, released, swept."""
        self.state = ClusterState(self.vendors)
        self.metrics = Metrics(lambda: self.state)

    # --- leadership -----------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """Without leader election, always. With it: the Lease's holder is this host (exact name before the
        ``_`` kube-scheduler appends; HAMi compares a prefix, so ``sched-1`` would match ``sched-10``) and the
        lease has not expired."""
        if not self.settings.leader_elect:
            return True
        holder = self.lease_holder.split("_", 1)[0]
        return holder == self.identity and time.time() < self.lease_expiry

    def _on_lease(self, obj: Lease, deleted: bool) -> None:
        if deleted:
            self.lease_holder, self.lease_expiry = "", 0.0
            return
        spec = obj.spec
        self.lease_holder = spec.holder_identity or ""
        renew = _parse_time(spec.renew_time) if spec.renew_time else None
        duration = spec.lease_duration_seconds or 15
        self.lease_expiry = (renew.timestamp() if renew else time.time()) + duration

    async def _label_role(self, cluster: KubeCluster, namespace: str, name: str) -> None:
        """Keep this replica's pod labelled ``hami.io/scheduler-role: leader`` or ``follower`` (HAMi's label, which
        its Service selects), checked every ``ROLE_CHECK_SECONDS``: the role changes with Lease events and with
        the time a Lease expires. A failed write is tried again at the next check."""
        uid: str | None = None
        while True:
            role = "leader" if self.is_leader() else "follower"
            if role != self.role_written:
                try:
                    if uid is None:
                        uid = (await cluster.get_pod(namespace, name)).metadata.uid
                    await cluster.patch_pod_metadata(namespace, name, labels={keys.SCHEDULER_ROLE_LABEL: role}, uid=uid)
                    self.role_written = role
                    log.info("this replica is the %s now: pod %s/%s labelled %s", role, namespace, name, role)
                except ApiError as err:
                    self.metrics.api_errors.labels("patch_pod").inc()
                    log.warning("labelling pod %s/%s as %s failed: %s", namespace, name, role, err)
            await asyncio.sleep(ROLE_CHECK_SECONDS)

    # --- handlers -------------------------------------------------------------------------------------
    def _on_node(
        self, extender: Extender, cluster: KubeCluster, supervisor: Supervisor, events: EventRecorder
    ) -> Callable[[Node, bool], None]:
        def apply(obj: Node, deleted: bool) -> None:
            name = obj.metadata.name
            if deleted:
                self.lock_waits.gone(name)
                self.locks.pop(name, None)
                self.quarantined.pop(name, None)
                extender.on_node(obj, deleted=True)
                return
            held: dict[str, str] = {}
            for key in self.lock_keys:
                lock = obj.metadata.annotations.get(key)
                self.lock_waits.seen(name, lock or None, key)
                if lock:
                    held[key] = lock
            if held:
                self.locks[name] = held
            else:
                self.locks.pop(name, None)
            extender.on_node(obj)
            node = self.state.nodes.get(name)
            self._report_quarantine(obj, node.problems if node else {}, events)
            self._handshake(obj, cluster, supervisor)

        return apply

    def _report_quarantine(self, node: Node, problems: Mapping[str, str], events: EventRecorder) -> None:
        """Log a refused registration and write a Warning event on the node — once per new problem, not on
        every node update (the lock and the kubelet's status updates change nodes all the time)."""
        name = node.metadata.name
        before = self.quarantined.get(name, {})
        for vendor, problem in problems.items():
            if before.get(vendor) != problem:
                log.warning("node %s: %s registration refused: %s", name, vendor, problem)
                message = f"{vendor} devices of node {name} are not scheduled: registration refused: {problem}"
                self._leader_event(events, ObjectRef.for_node(node), EventType.WARNING, REGISTRATION_REFUSED, message)
        for vendor in before.keys() - problems.keys():
            log.info("node %s: %s registration accepted again", name, vendor)
        if problems:
            self.quarantined[name] = dict(problems)
        else:
            self.quarantined.pop(name, None)

    def _leader_event(self, events: EventRecorder, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        """Write an Event about a problem a watch handler found, from the leader only. Every replica watches the same
        objects and finds the same problem at the same time: with ``--leader-elect``, each writing its own Event
        told ``kubectl describe`` the problem once per replica. Followers only log it (the caller does); a problem
        first seen while no replica leads (the Lease changing hands) is logged only."""
        if self.is_leader():
            events.record(involved, type, reason, message)

    def _handshake(self, node: Node, cluster: KubeCluster, supervisor: Supervisor) -> None:
        """Stamp ``Requesting_<now>`` for each vendor the node registers whose handshake is not requesting yet,
        as HAMi's scheduler does — but only on nodes that have that vendor (HAMi stamps every node, §11). A vendor
        without a handshake (``VendorKeys.handshake`` None) is never stamped; one whose devices come from the
        node's capacity (``register`` "") counts as registered when the ledger has its devices on the node."""
        if not self.is_leader():  # as in HAMi, only the leader stamps: each replica sees the same node update
            return
        annotations = node.metadata.annotations
        stamps: dict[str, str | None] = {}
        seen = self.state.nodes.get(node.metadata.name)
        for vendor in self.vendors.values():
            key, register = vendor.keys.handshake, vendor.keys.register
            if register:
                registered = register in annotations
            else:  # devices from the node's capacity: the node has the vendor if it decoded some (or refused them)
                registered = seen is not None and (vendor.name in seen.tables or vendor.name in seen.problems)
            if key is None or not registered:
                continue
            if not decode_handshake(annotations.get(key)).requested:
                stamps[key] = encode_requesting(datetime.now().replace(microsecond=0))
        if stamps:
            name = node.metadata.name

            async def write() -> None:
                try:
                    await cluster.patch_node_annotations(name, stamps)
                except ApiError as err:
                    self.metrics.api_errors.labels("patch_node").inc()
                    log.warning("writing the handshake of node %s failed: %s", name, err)

            self._once(write(), f"handshake-{name}")

    def _on_pod(self, extender: Extender, locker: NodeLocker, supervisor: Supervisor) -> Callable[[Pod, bool], None]:
        def apply(obj: Pod, deleted: bool) -> None:
            extender.on_pod(obj, deleted)
            if obj.spec.node_name not in self.locks:
                return
            if deleted or is_terminal(obj):
                self._release_if_holder(obj, locker, supervisor)
            elif allocation_over(obj):
                # bound with bind phase success/failed: the device plugin releases hami.io/mutex.lock right after
                # writing the phase; if that release is lost, the lock would block the node until it expires
                self._release_left_behind(obj, locker)

        return apply

    def _release_left_behind(self, pod: Pod, locker: NodeLocker) -> None:
        """Check, ``left_behind_grace`` seconds from now, each ``hami.io/mutex.lock`` on the pod's node that ``pod``
        holds: if the node watch still shows that very lock, the device plugin's release was lost, and
        :meth:`NodeLocker.release_if_stale` releases it (reading the node and the holder again, so a pod of the
        same name created since keeps its lock). Normally the plugin's release comes first: no API request."""
        node = pod.spec.node_name
        for key, value in self.locks[node].items():
            pending = (node, key, value)
            if not follows_bind_phase(key) or pending in self._left_behind:
                continue
            try:
                lock = decode_node_lock(value, key)
            except Exception:  # a malformed lock is handled by the next acquire; nothing to release here
                continue
            if lock.namespace == pod.metadata.namespace and lock.name == pod.metadata.name:
                check = self._left_behind_check(locker, pending)
                self._left_behind[pending] = asyncio.get_running_loop().call_later(self.left_behind_grace, check)

    def _left_behind_check(self, locker: NodeLocker, pending: tuple[str, str, str]) -> Callable[[], None]:
        node, key, value = pending

        async def release() -> None:
            try:
                await locker.release_if_stale(node, key=key)
            except ApiError as err:
                log.warning("releasing the lock %s on %s left behind by its device plugin failed: %s", key, node, err)

        def check() -> None:
            self._left_behind.pop(pending, None)
            if self.locks.get(node, {}).get(key) == value:
                self._once(release(), f"unlock-left-{node}" + _lock_suffix(key))

        return check

    def _release_if_holder(self, pod: Pod, locker: NodeLocker, supervisor: Supervisor) -> None:
        node = pod.spec.node_name
        for key, value in self.locks[node].items():
            try:
                lock = decode_node_lock(value, key)
            except Exception:  # a malformed lock is handled by the next acquire; nothing to release here
                continue
            if lock.namespace == pod.metadata.namespace and lock.name == pod.metadata.name:
                self._once(self._release(locker, node, pod, key), f"unlock-{node}" + _lock_suffix(key))

    async def _release(self, locker: NodeLocker, node: str, pod: Pod, key: str) -> None:
        try:
            await locker.release(node, pod.metadata.namespace, pod.metadata.name, key=key)
        except ApiError as err:
            log.warning("releasing the lock %s on %s held by finished pod %s failed: %s", key, node, pod.key, err)

    def _once(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run a one-shot API write in the background (the supervisor is for loops that must not end)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._writes.add(task)
        task.add_done_callback(self._write_done)

    def _write_done(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background write %s failed: %r", task.get_name(), task.exception())

    # --- loops ----------------------------------------------------------------------------------------
    async def _self_check(self, audit: LedgerAudit | None = None) -> None:
        """Recount the ledger every minute; every ``API_AUDIT_SECONDS`` also compare it with the API's pods."""
        audited = time.monotonic()
        while True:
            await asyncio.sleep(SELF_CHECK_SECONDS)
            diffs = self.state.verify()
            self.metrics.ledger_drift.set(len(diffs))
            for line in diffs[:20]:
                log.error("ledger drift: %s", line)
            if audit is not None and time.monotonic() - audited >= API_AUDIT_SECONDS:
                audited = time.monotonic()
                await audit.run()

    async def _lock_sweep(self, locker: NodeLocker) -> None:
        while True:
            await asyncio.sleep(LOCK_SWEEP_SECONDS)
            for node, held in list(self.locks.items()):
                for key in list(held):
                    try:
                        await locker.release_if_stale(node, key=key)
                    except ApiError as err:
                        log.warning("checking the lock %s on %s failed: %s", key, node, err)

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
            cluster = KubeCluster(client, instance=self.identity)
            locker = NodeLocker(cluster, timeout=timedelta(seconds=s.node_lock_timeout))
            events = EventRecorder(KubeCluster(event_client, instance=self.identity), s.scheduler_name)
            synced: dict[str, bool] = {"nodes": False, "pods": False, "quotas": False}
            watched_nodes: Mapping[str, Node] = {}  # the node reflector's store, once it exists
            watched_pods: Mapping[str, Pod] = {}  # the pod reflector's store (identity checks), once it exists
            readiness = Readiness(synced=lambda: all(synced.values()), leader=self.is_leader)
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
                lock_waits=self.lock_waits,
                dra=self.device_config.dra,
            )
            self.extender = extender
            watched_nodes, watched_pods = self._start_watches(
                client, cluster, extender, locker, events, supervisor, synced
            )
            audit = LedgerAudit(
                self.state, self.vendors, cluster, self.metrics, lambda: extender.cycle.pending, readiness.synced
            )
            supervisor.start(self._self_check(audit), name="self-check")
            supervisor.start(self._lock_sweep(locker), name="lock-sweep")
            servers = await self._servers(extender, supervisor, stack, client_settings)
            await self._serve(servers, listeners)
            for check in self._left_behind.values():  # no release started once the client is closing
                check.cancel()
            await extender.settle_all()
            await events.aclose()

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

        selector = ",".join(f"{k}={v}" for k, v in sorted(s.node_label_selector.items())) or None
        nodes = Reflector(
            client,
            NODES,
            Node,
            Callbacks(self._on_node(extender, cluster, supervisor, events), mark("nodes")),
            label_selector=selector,
        )
        on_pod = Callbacks(self._on_pod(extender, locker, supervisor), mark("pods"))
        pods = Reflector(client, PODS, WatchedPod, on_pod)  # a Pod without the containers' env (never read here)
        quotas = Reflector(client, RESOURCE_QUOTAS, ResourceQuota, Callbacks(extender.on_quota, mark("quotas")))
        supervisor.start(nodes.run(), name="watch-nodes")
        supervisor.start(pods.run(), name="watch-pods")
        supervisor.start(quotas.run(), name="watch-quotas")
        if self.device_config.dra.active():  # ResourceSlices and ResourceClaims of the configured DRA drivers
            synced["dra"] = False
            self.dra = start_dra(client, extender, events, self.metrics, supervisor, mark("dra"), self.is_leader)
        else:
            log.info("DRA: off (dra.enabled is false or no driver is listed): ResourceClaims are not counted")
        if s.leader_elect:
            synced["lease"] = False
            lease = Reflector(
                client,
                LEASES,
                Lease,
                Callbacks(self._on_lease, mark("lease")),
                namespace=s.leader_elect_resource_namespace or None,
                field_selector=f"metadata.name={s.lease_name}",
            )
            supervisor.start(lease.run(), name="watch-lease")
            pod_name, pod_namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
            if pod_name and pod_namespace:
                supervisor.start(self._label_role(cluster, pod_namespace, pod_name), name="role-label")
            else:
                log.warning("POD_NAME or POD_NAMESPACE is not set: this replica's pod gets no role label")
        return nodes.store, pods.store

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
        routes = [webhook_route(admission, self.metrics), *self.extra_routes]
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


def _lock_suffix(key: str) -> str:
    """The task-name suffix of a lock other than ``hami.io/mutex.lock`` ("" for that one: names unchanged)."""
    return "" if key == keys.NODE_LOCK else f"-{key}"


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


async def run_scheduler(settings: SchedulerSettings, device_config: DeviceConfig, kubeconfig: KubeConfig) -> None:
    await Runtime(settings, device_config, kubeconfig).run()
