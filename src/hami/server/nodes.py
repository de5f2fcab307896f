"""What the scheduler does about a node beyond the ledger: report a refused device registration (a log line and, from
the leader, a Warning event on the node) and stamp the handshake ``Requesting_<now>`` for each vendor it registers,
as HAMi's scheduler does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from hami.devices.base import Vendor
from hami.errors import ApiError
from hami.k8s.cluster import ClusterClient
from hami.k8s.events import EventRecorder
from hami.k8s.records import ObjectRef
from hami.k8s.tasks import Supervisor
from hami.protocol.events import EventType
from hami.protocol.handshake import decode_handshake, encode_requesting
from hami.protocol.objects import Node
from hami.scheduling.state import ClusterState
from hami.server.metrics import Metrics

__all__ = ["REGISTRATION_REFUSED", "NodeHandling"]

log = logging.getLogger("hami.scheduler")

STAMP_WAIT_S = 0.1
"""How often the handshake writer looks whether the caches are synced yet."""
REGISTRATION_REFUSED = "RegistrationRefused"
"""Reason of the Warning event on a node whose device registration cannot be decoded (hami's own; HAMi has none)."""


@dataclass
class NodeHandling:
    """Per node event (``node_seen``): the quarantine report and the handshake. The cluster, the event recorder and
    the supervisor that runs the handshake writes are attached once the API client exists (``attach``)."""

    vendors: Mapping[str, Vendor]
    state: ClusterState
    metrics: Metrics
    is_leader: Callable[[], bool]
    quarantined: dict[str, dict[str, str]] = field(default_factory=dict)
    """Node → vendor → its refused registration's problem, as last reported."""
    held_back: dict[str, frozenset[str]] = field(default_factory=dict)
    """Node → the vendors whose devices kubelet did not back at the last report (``NodeState.unallocatable``)."""
    ready: Callable[[], bool] = lambda: True
    """Whether the caches are synced: no handshake is written before (``_stamp_all``)."""
    pending: dict[str, dict[str, str | None]] = field(default_factory=dict)
    """Node → the handshake stamps still to write, oldest node first."""
    stamping: bool = False
    """Whether the handshake writer runs."""
    cluster: ClusterClient | None = None
    events: EventRecorder | None = None
    tasks: Supervisor | None = None

    def attach(self, cluster: ClusterClient, events: EventRecorder, tasks: Supervisor) -> None:
        self.cluster, self.events, self.tasks = cluster, events, tasks

    def node_seen(self, node: Node) -> None:
        seen = self.state.nodes.get(node.metadata.name)
        self._report_quarantine(node, seen.problems if seen else {})
        self._report_unallocatable(node.metadata.name, seen.unallocatable if seen else {})
        self._handshake(node)

    def node_gone(self, name: str) -> None:
        self.quarantined.pop(name, None)
        self.held_back.pop(name, None)

    def _report_unallocatable(self, name: str, short: Mapping[str, str]) -> None:
        """Log a vendor whose devices kubelet stops or starts backing again, once per change (a device plugin
        restart is routine: no event; the pods turned down meanwhile carry ``NodeDevicesNotAllocatable``)."""
        before = self.held_back.get(name, frozenset())
        for vendor in sorted(short.keys() - before):
            log.warning("node %s: no pod is placed on its %s devices: %s", name, vendor, short[vendor])
        for vendor in sorted(before - short.keys()):
            log.info("node %s: kubelet reports its %s devices again", name, vendor)
        if short:
            self.held_back[name] = frozenset(short)
        else:
            self.held_back.pop(name, None)

    def _report_quarantine(self, node: Node, problems: Mapping[str, str]) -> None:
        """Log a refused registration and write a Warning event on the node — once per new problem, not on
        every node update (the lock and the kubelet's status updates change nodes all the time)."""
        name = node.metadata.name
        before = self.quarantined.get(name, {})
        for vendor, problem in problems.items():
            if before.get(vendor) != problem:
                log.warning("node %s: %s registration refused: %s", name, vendor, problem)
                message = f"{vendor} devices of node {name} are not scheduled: registration refused: {problem}"
                self._leader_event(ObjectRef.for_node(node), EventType.WARNING, REGISTRATION_REFUSED, message)
        for vendor in before.keys() - problems.keys():
            log.info("node %s: %s registration accepted again", name, vendor)
        if problems:
            self.quarantined[name] = dict(problems)
        else:
            self.quarantined.pop(name, None)

    def _leader_event(self, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        """Write an Event about a problem a watch handler found, from the leader only. Every replica watches the same
        objects and finds the same problem at the same time: with ``--leader-elect``, each writing its own Event
        told ``kubectl describe`` the problem once per replica. Followers only log it (the caller does); a problem
        first seen while no replica leads (the Lease changing hands) is logged only."""
        if self.is_leader() and self.events is not None:
            self.events.record(involved, type, reason, message)

    def _handshake(self, node: Node) -> None:
        """Stamp ``Requesting_<now>`` for each vendor the node registers whose handshake is not requesting yet,
        as HAMi's scheduler does — but only on nodes that have that vendor (HAMi stamps every node, §11). Only
        the leader stamps: each replica sees the same node update."""
        stamps = self._stamps(node) if self.is_leader() else {}
        if not stamps or self.cluster is None or self.tasks is None:
            return
        self.pending[node.metadata.name] = stamps
        if not self.stamping:
            self.stamping = True
            self.tasks.once(self._stamp_all(), name="handshake")

    async def _stamp_all(self) -> None:
        """Write the pending stamps one node at a time, once the caches are synced, through the events' client (its
        own rate limiter). A scheduler that starts on 5,000 nodes stamps every one of them: as one write task per
        node on the main client they queued ahead of its first lists in the rate limiter, and the start took 17 s
        instead of 4; beside a burst they would take Filter's and Bind's share of it."""
        try:
            while not self.ready():
                await asyncio.sleep(STAMP_WAIT_S)
            while self.pending:
                name = next(iter(self.pending))
                stamps = self.pending.pop(name)
                if self.is_leader():
                    await self._write(self._writer(), name, stamps)
        finally:
            self.stamping = False

    def _writer(self) -> ClusterClient:
        cluster = self.events.cluster if self.events is not None else self.cluster
        assert cluster is not None  # attached before any node event
        return cluster

    def _stamps(self, node: Node) -> dict[str, str | None]:
        """The handshake stamps the node needs. A vendor without a handshake (``VendorKeys.handshake`` None) is
        never stamped; one whose devices come from the node's capacity (``register`` "") counts as registered
        when the ledger has its devices on the node (or refused them)."""
        annotations = node.metadata.annotations
        stamps: dict[str, str | None] = {}
        seen = self.state.nodes.get(node.metadata.name)
        for vendor in self.vendors.values():
            key, register = vendor.keys.handshake, vendor.keys.register
            if register:
                registered = register in annotations
            else:
                registered = seen is not None and (vendor.name in seen.tables or vendor.name in seen.problems)
            if key is not None and registered and not decode_handshake(annotations.get(key)).requested:
                stamps[key] = encode_requesting(datetime.now().replace(microsecond=0))
        return stamps

    async def _write(self, cluster: ClusterClient, name: str, stamps: dict[str, str | None]) -> None:
        try:
            await cluster.patch_node_annotations(name, stamps)
        except ApiError as err:
            self.metrics.api_errors.labels("patch_node").inc()
            log.warning("writing the handshake of node %s failed: %s", name, err)
