"""Placing pods one after another on a snapshot of the cluster, through the extender's own core.

``Simulator`` builds a ``ClusterState`` from a snapshot — nodes (their registrations), namespace quotas, and
the pods that already hold devices (those carrying ``hami.io/vgpu-node``, charged from their allocation
annotations) — then places pods in the order given: ``prefilter`` → ``decide`` → ``reserve``, so every
placement is visible to the next pod. Unlike HAMi's own simulation path (scheduler-core.md §4.7), existing
pods are charged: the point is to ask "where would this pod go *now*".

With ``admission`` on (``hami simulate`` without ``--skip-admission``), each pod first goes through the webhook's
own decision (``hami.simulate.admit``): its defaults and rewrites are applied before the pod is placed, and a pod
the webhook would deny (or that names another scheduler) is not placed; its outcome carries the webhook's message.

``admit`` is the first half of the one pipeline ``place`` and ``hami explain -f`` share (admission, then the
decision), so the two commands never disagree on a manifest; ``pod_warnings`` are what both print about a pod (a
resource no vendor owns, with a close name of the same vendor and role; a family this run does not schedule; a
zero count beside memory), and ``topology_warning`` one for a ``topology-aware`` pod placed on a node without
topology. ``families`` are the device families scheduled (``hami.simulate.devconfig.Families``).

Candidates are the snapshot's nodes whose labels match the pod's ``nodeSelector`` exactly and that are not
``spec.unschedulable`` (a DaemonSet's pod has its own node alone); kube-scheduler's other predicates (taints,
affinity, CPU/memory) are out of scope.

DRA (issue 18): the snapshot's DeviceClasses, ResourceSlices and ResourceClaims go through the extender's own
``DraLedger``: capacity that DRA claims hold is charged to the cards of the same UUID, so placements see it;
``dra_notes()`` words its problems and warnings (``hami simulate`` prints them as warnings, ``hami top`` in its
view). A claim is stale only when the snapshot holds pods at all and none of the claim's pods is among them.

Input problems never stop the run: a node whose registration does not decode is reported as a warning (its
devices of that vendor are left out), an existing pod whose allocation does not decode is reported, and a pod
to place whose request is invalid gets an outcome without a node whose message names the file, the pod and
the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from hami.config import DeviceConfig
from hami.config.settings import GATED_FAMILIES
from hami.devices import FAMILIES, vendors_from_config
from hami.devices.base import NodeInventory
from hami.errors import InvalidInput
from hami.protocol.allocation import ContainerDevice
from hami.protocol.drapod import claim_containers
from hami.protocol.objects import Node, Pod
from hami.protocol.podpatch import PatchOp
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import Decision, decide, reserve
from hami.scheduling.dra import DraLedger
from hami.scheduling.dra.served import served_inventories
from hami.scheduling.filter import NodeRejection
from hami.scheduling.memo import Verdicts
from hami.scheduling.records import RecordReader, holds_devices
from hami.scheduling.request import PodRequest, SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind, container_kinds
from hami.simulate.admit import Admitted, Denied, admit_pod
from hami.simulate.hints import resource_hint, resource_roles, zero_count_problems
from hami.simulate.loading import Snapshot, Sourced

__all__ = ["NODE_LEVEL_COUNT", "Outcome", "Simulator", "container_devices"]

NODE_LEVEL_COUNT = 1
"""The count reported for a node-level reason (``NodeUnregistered``, ``NodeQuarantined``,
``NodeDevicesNotAllocatable``): no device is involved."""

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one pod to place.

    ``decision`` is None when the pod's request is invalid; then ``message`` is the error, naming the file,
    the pod and the field. ``reasons`` maps every rejected node to its reason codes and device counts (a
    node-level reason counts ``NODE_LEVEL_COUNT``). ``containers`` lists ``(name, kind)`` init containers first,
    the order of ``devices`` and of the allocation annotations. ``wants_devices`` is False for a pod that
    asks for no device hami manages (nothing to place). ``denied`` is True when the admission webhook would not
    let hami schedule the pod (``message`` is its answer); ``admission`` is the webhook's patch that was applied
    (empty: none needed), None when admission was skipped or the pod was denied.
    """

    pod: str
    origin: str
    message: str
    decision: Decision | None = None
    reasons: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    containers: tuple[tuple[str, Kind], ...] = ()
    wants_devices: bool = True
    denied: bool = False
    admission: tuple[PatchOp, ...] | None = None
    warnings: tuple[str, ...] = ()
    """What the pod's spec likely gets wrong (a resource no vendor owns, a zero count beside memory, a
    topology-aware pod on a node without topology), also in ``Simulator.warnings``."""

    @property
    def status(self) -> str:
        """``placed``, ``pending`` (no node fits), ``invalid`` (bad request), ``denied`` (by the admission webhook)
        or ``no-devices`` (nothing to place)."""
        if self.decision is None:
            return "denied" if self.denied else "invalid"
        if self.decision.node is not None:
            return "placed"
        return "pending" if self.wants_devices else "no-devices"

    @property
    def node(self) -> str | None:
        return self.decision.node if self.decision is not None else None

    @property
    def rejected(self) -> Mapping[str, NodeRejection]:
        return self.decision.rejected if self.decision is not None else {}


def container_devices(decision: Decision | None) -> list[list[ContainerDevice]]:
    """One device list per container (init first); a pod asking for several vendors gets each container's
    devices of every vendor, vendors in sorted order. Empty when nothing was placed."""
    if decision is None or decision.node is None or not decision.devices:
        return []
    vendors = sorted(decision.devices)
    n = max(len(decision.devices[v]) for v in vendors)
    return [[d for v in vendors if i < len(decision.devices[v]) for d in decision.devices[v][i]] for i in range(n)]


def known_resource_names(config: DeviceConfig) -> frozenset[str]:
    """Every resource name the device config spells (``resource_*_name`` and ``resource_name_*`` keys of every
    vendor section; Enflame's keys are ``resourceNameGCU`` …)."""

    def walk(value: object) -> Iterator[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str) and key.startswith("resource_") and "_name" in key and item:
                    yield item
                else:
                    yield from walk(item)
        elif isinstance(value, (list, tuple)):  # iluvatars: a tuple of chip sections
            for item in value:
                yield from walk(item)

    return frozenset(walk(config.model_dump()))


FAMILY_SWITCHES: Final = {family: f"--{switch.replace('_', '-')}" for family, switch in GATED_FAMILIES.items()}
"""The families a default install leaves off, and the switch that turns each on (``hami scheduler``'s, and
``hami simulate``'s: ``--enable-ascend``)."""


def _switched_off(config: DeviceConfig, families: Collection[str] | None) -> dict[str, str]:
    """Resource name → family, for every family not in ``families`` (None: every family is on)."""
    if families is None:
        return {}
    out: dict[str, str] = {}
    for family, build in FAMILIES.items():
        if family in families:
            continue
        for vendor in build(config):
            r = vendor.resources
            out.update({n: family for n in (r.count, r.memory, r.core) if n})
    return out


def _containers(pod: Pod) -> tuple[tuple[str, Kind], ...]:
    """``(name, kind)`` per container, init containers first."""
    every = [*pod.spec.init_containers, *pod.spec.containers]
    return tuple((c.name, kind) for c, kind in zip(every, container_kinds(pod), strict=True))


def _with_identity(pod: Pod, uid: str) -> Pod:
    ns = pod.metadata.namespace or DEFAULT_NAMESPACE
    meta = msgspec.structs.replace(pod.metadata, namespace=ns, uid=uid)
    return msgspec.structs.replace(pod, metadata=meta)


class Simulator:
    """A cluster state built from snapshots, and the pods placed on it so far.

    ``warnings`` collects every input problem that did not stop the run, each naming file and object.
    """

    def __init__(
        self,
        config: DeviceConfig,
        defaults: SchedulingDefaults,
        *,
        admission: bool = False,
        families: Collection[str] | None = None,
    ) -> None:
        self.vendors = vendors_from_config(config, families)
        self.records = RecordReader(self.vendors)
        self.defaults = defaults
        self.state = ClusterState(self.vendors)
        self.admission = (
            Admission(
                self.vendors,
                admitters_for(self.vendors),
                defaults,
                AdmissionSettings(),
                quotas=self.state.quotas,
                quota_factors=self.state.quota_factors,
            )
            if admission
            else None
        )
        """The webhook's decision, run on each pod before it is placed; None: pods are placed as written."""
        self.memo = Verdicts()
        self.warnings: list[str] = []
        self._node_origin: dict[str, str] = {}
        self._uids: set[str] = set()
        self.known_resources = known_resource_names(config)
        owned = [n for v in self.vendors.values() for n in (v.resources.count, v.resources.memory, v.resources.core)]
        self.switched_off = _switched_off(config, families)
        """Resource name → family, for the families this run does not schedule."""
        self.owned = (self.known_resources | {n for n in owned if n}) - self.switched_off.keys()
        """The resource names the scheduled vendors own (those of the device config, less the switched-off ones)."""
        self.managed_domains = frozenset(n.partition("/")[0] for n in owned if n and "/" in n)
        self.roles = resource_roles(self.vendors.values(), self.owned)
        self.switched_off_domains = {n.partition("/")[0]: f for n, f in self.switched_off.items() if "/" in n}
        """Domain → family, for the resource domains of the families this run does not schedule."""
        self.existing: dict[str, Pod] = {}
        """The snapshot's pods that hold devices, by the UID their ledger record has."""
        self.controllers: dict[str, tuple[str, str] | None] = {}
        """The controller (kind, name) of each of ``existing``, as its snapshot object names it (None: none)."""
        self.dra = DraLedger(self.state, config.dra)
        """The snapshot's DRA claims, charged as held capacity (``hami.scheduling.dra``)."""
        self.claim_containers: dict[tuple[str, str], str] = {}
        """(namespace, claim name) → the container of the snapshot's pods using that claim."""
        self.dra_served: dict[str, frozenset[str]] = {}
        """Node → the vendors whose cards only a DRA driver serves there (``_adopt_served``)."""

    # --- the snapshot ----------------------------------------------------------------------------------
    def add_snapshot(self, snap: Snapshot) -> None:
        """Nodes first, then quotas, then the pods that hold devices (so file order does not matter)."""
        for node in snap.nodes:
            self._add_node(node)
        for quota in snap.quotas:
            problems = self.state.upsert_quota(quota.obj)
            self.warnings += [f"{quota.origin}: {p}; that limit is ignored" for p in problems]
        added = {uid for uid in (self._add_existing_pod(pod) for pod in snap.pods) if uid is not None}
        for item in snap.pods:
            ns = item.obj.metadata.namespace or DEFAULT_NAMESPACE
            for claim, container in claim_containers(item.obj).items():
                self.claim_containers[(ns, claim)] = container
        for record in self.state.orphans():
            if record.uid in added:
                self.warnings.append(
                    f"pod {record.key} holds devices on node {record.node}, which is not in the snapshot"
                )
        self._add_dra(snap)

    def _add_dra(self, snap: Snapshot) -> None:
        """Feed the DRA objects to the ledger (classes, slices, then claims: order does not matter to it, but this
        one raises no problem that a later object would clear)."""
        if not (snap.classes or snap.slices or snap.claims):
            return
        live = {
            (p.obj.metadata.namespace or DEFAULT_NAMESPACE, p.obj.metadata.name): p.obj.metadata.uid for p in snap.pods
        }
        if live:
            self.dra.pod_lookup = lambda ns, name: live.get((ns, name))
        for dc in snap.classes:
            self.dra.class_event(dc.obj)
        for sl in snap.slices:
            self.dra.slice_event(sl.obj)
        for claim in snap.claims:
            self.dra.claim_event(claim.obj)
        self._adopt_served()

    def _adopt_served(self) -> None:
        """Give the nodes only a DRA driver serves (no hami registration of the vendor: DRA mode) their published
        devices as cards (``hami.scheduling.dra.served``), so the claims there are charged and shown like pods on a
        registered card. Their vendor is marked not allocatable: hami's extender places no device-plugin pod
        there (``simulate --dra`` allocates DRA-mode pods there)."""
        served = served_inventories(self.state, self.dra.devices(), self.dra.drivers)
        for name, added in sorted(served.items()):
            old = self.state.nodes.get(name)
            kept: dict[str, NodeInventory] = {}
            if old is not None:
                kept = {
                    v: NodeInventory(t.infos, old.pair_scores.get(v, {}), old.node_info.get(v, {}))
                    for v, t in old.tables.items()
                }
            drivers = {v: d.driver for d in self.dra.drivers.values() for v in added if d.vendor == v}
            why = {v: f"served only by the DRA driver {drivers[v]} (no device-plugin registration)" for v in added}
            self.state.set_node(
                name,
                {**kept, **added},
                labels=old.labels if old is not None else {},
                unschedulable=old.unschedulable if old is not None else False,
                cordoned=old.cordoned if old is not None else frozenset(),
                problems=old.problems if old is not None else {},
                unallocatable={**(old.unallocatable if old is not None else {}), **why},
            )
            self.dra_served[name] = frozenset(added)
            self.dra.node_event(name)

    def dra_notes(self) -> list[str]:
        """Each DRA problem and warning as a line for a person (``DRA <kind>: <object>[ on <node>]: <message>``)."""
        notes = [
            f"DRA {p.kind}: {p.object}{f' on {p.node}' if p.node else ''}: {p.message}" for p in self.dra.problems()
        ]
        return notes + [f"DRA {w.kind}: {w.object}: {w.message}" for w in self.dra.warnings()]

    def _add_node(self, item: Sourced[Node]) -> None:
        node = item.obj
        name = node.metadata.name
        if not name:
            self.warnings.append(f"{item.origin}: node without metadata.name skipped")
            return
        if name in self._node_origin:
            self.warnings.append(f"{item.origin}: node {name} also in {self._node_origin[name]}; the later one is used")
        state = self.state.upsert_node(node)  # a registration that does not decode is recorded in problems
        self._node_origin[name] = item.origin
        for vendor, problem in sorted(state.problems.items()):
            self.warnings.append(f"{item.origin}: {problem}; its {vendor} devices are skipped")
        for vendor, short in sorted(state.unallocatable.items()):
            self.warnings.append(f"{item.origin}: {short}; no pod is placed on its {vendor} devices")

    def _add_existing_pod(self, item: Sourced[Pod]) -> str | None:
        """Charge a pod that already holds devices; returns its uid, or None when nothing was charged."""
        pod = item.obj
        if not holds_devices(pod):
            return None
        ns = pod.metadata.namespace or DEFAULT_NAMESPACE
        pod = _with_identity(pod, pod.metadata.uid or f"snapshot-{ns}-{pod.metadata.name}")
        try:
            # a snapshot is the operator's own: every pod in it that carries an allocation counts (a bound one on
            # spec.nodeName), whatever its scheduler name
            record = self.records.read(pod, ours=True)
        except InvalidInput as err:
            self.warnings.append(f"{item.origin}: allocation does not decode, pod not charged: {err}")
            return None
        if record is None:  # finished: holds nothing
            return None
        if record.problem:
            self.warnings.append(f"{item.origin}: {record.problem}; charged for what decoded")
        if not self.state.apply(record, add=True):
            self.warnings.append(f"{item.origin}: uid {record.uid} already charged by another pod; skipped")
            return None
        self._uids.add(record.uid)
        self.existing[record.uid] = pod
        self.controllers[record.uid] = item.controller
        missing = self.state.dangling.get(record.uid)
        if missing:
            uuids = ", ".join(sorted(uuid for _, uuid in missing))
            self.warnings.append(f"{item.origin}: node {record.node} does not register device(s) {uuids}")
        return record.uid

    # --- placing pods ----------------------------------------------------------------------------------
    def _unique_uid(self, pod: Pod) -> str:
        base = pod.metadata.uid or f"sim-{pod.metadata.namespace or DEFAULT_NAMESPACE}-{pod.metadata.name}"
        uid, k = base, 1
        while uid in self._uids or uid in self.state.pods:
            k += 1
            uid = f"{base}-{k}"
        self._uids.add(uid)
        return uid

    def candidates(self, pod: Pod, pinned: str | None = None) -> tuple[list[str], int]:
        """Node names that pass the pod's ``nodeSelector`` and are schedulable, and how many were left out. A pod
        its controller binds to one node (``pinned``: a DaemonSet's) has that node alone, cordoned or not."""
        if pinned is not None:
            names = [pinned] if pinned in self.state.nodes else []
            return names, len(self.state.nodes) - len(names)
        selector = pod.spec.node_selector
        names = []
        for name, node in sorted(self.state.nodes.items()):
            if node.unschedulable or any(node.labels.get(k) != v for k, v in selector.items()):
                continue
            names.append(name)
        return names, len(self.state.nodes) - len(names)

    def excluded_text(self, pod: Pod, names: Sequence[str], pinned: str | None = None) -> str:
        """Why the nodes not in ``names`` (``candidates``) were left out, naming the labels: ``2 not matching
        nodeSelector zone=east, 1 unschedulable`` (``bound to node a by its controller`` for a pinned pod)."""
        if pinned is not None:
            return f"bound to node {pinned} by its controller"
        chosen = set(names)
        causes: dict[str, int] = {}
        for name, node in sorted(self.state.nodes.items()):
            if name in chosen:
                continue
            wrong = next((f"{k}={v}" for k, v in sorted(pod.spec.node_selector.items()) if node.labels.get(k) != v), "")
            cause = f"not matching nodeSelector {wrong}" if wrong else "unschedulable"
            causes[cause] = causes.get(cause, 0) + 1
        return ", ".join(f"{n} {cause}" for cause, n in sorted(causes.items()))

    def admit(self, item: Sourced[Pod]) -> Outcome | Admitted:
        """The pod as the admission webhook leaves it (the first half of the pipeline ``place`` and ``hami explain
        -f`` share), or the outcome of a pod not to place (denied, or a request the webhook cannot read). With
        admission off, the pod as written."""
        containers = _containers(item.obj)
        if self.admission is None:
            return Admitted(item.obj, ())
        key = _with_identity(item.obj, "").key
        raw = item.raw if item.raw is not None else msgspec.to_builtins(item.obj)
        try:
            admitted = admit_pod(self.admission, raw, item.obj.metadata.namespace or DEFAULT_NAMESPACE)
        except InvalidInput as err:
            return Outcome(key, item.origin, f"{item.origin}: {err}", containers=containers)
        if isinstance(admitted, Denied):
            message = f"{item.origin}: denied by the admission webhook: {admitted.message}"
            return Outcome(key, item.origin, message, containers=containers, denied=True)
        return admitted

    def place(self, item: Sourced[Pod], now: int) -> Outcome:
        """Admit one pod (when admission is on), decide for it and reserve the decision, so the next pod sees it."""
        own = self.pod_warnings(item)
        self.warnings += own
        notes = [*item.warnings, *own]  # the file's (printed by the reader) and the pod's
        containers = _containers(item.obj)
        admitted = self.admit(item)
        if isinstance(admitted, Outcome):
            return dataclasses.replace(admitted, warnings=tuple(notes)) if notes else admitted
        pod = _with_identity(admitted.pod, self._unique_uid(item.obj))
        patch = admitted.patch if self.admission is not None else None
        try:
            req = prefilter(pod, self.vendors, self.defaults)
        except InvalidInput as err:
            message = f"{item.origin}: {err}"
            return Outcome(pod.key, item.origin, message, containers=containers, admission=patch, warnings=tuple(notes))
        names, excluded = self.candidates(pod, item.node)
        decision = decide(self.state, req, names, now, self.memo)
        reserve(self.state, req, decision)
        message = decision.message
        if excluded:
            message += f" ({excluded} more excluded: {self.excluded_text(pod, names, item.node)})"
        topology = self.topology_warning(item, req, decision.node)
        if topology:
            notes.append(topology)
            self.warnings.append(topology)
        reasons = {node: self._reason_counts(rej) for node, rej in sorted(decision.rejected.items())}
        return Outcome(
            pod.key,
            item.origin,
            message,
            decision,
            reasons,
            containers,
            req.wants_devices,
            admission=patch,
            warnings=tuple(notes),
        )

    def topology_warning(self, item: Sourced[Pod], req: PodRequest, node: str | None) -> str | None:
        """A warning for a pod that asks for the ``topology-aware`` GPU policy and was placed on a node that
        published no topology for one of its vendors (NVIDIA's ``hami.io/node-nvidia-score``, written by the device
        plugin with ``ENABLE_TOPOLOGY_SCORE=true``): its devices were picked without the link scores."""
        if node is None or not req.gpu_policy.topology or node not in self.state.nodes:
            return None
        state = self.state.nodes[node]
        blind = [v for v in req.vendors if not state.pair_scores.get(v) and not state.node_info.get(v)]
        if not blind:
            return None
        return (
            f"{item.origin}: asks for the topology-aware GPU policy, but node {node} publishes no topology for "
            f"{', '.join(blind)} (NVIDIA: the hami.io/node-nvidia-score annotation, written by the device plugin "
            "with ENABLE_TOPOLOGY_SCORE=true); its devices were chosen without link scores"
        )

    def _reason_counts(self, rejection: NodeRejection) -> dict[str, int]:
        """Reason code → devices, or one node-level code (count 1) when the node has no usable registration:
        ``NodeQuarantined`` if its registration was refused as malformed, ``NodeDevicesNotAllocatable`` if kubelet
        does not report the registered devices, else ``NodeUnregistered``."""
        if rejection.counts:
            return {reason.value: n for reason, n in sorted(rejection.counts.items())}
        return {(rejection.node_reason or Reason.NODE_UNREGISTERED).value: NODE_LEVEL_COUNT}

    def pod_warnings(self, item: Sourced[Pod]) -> list[str]:
        """What the pod's resources likely get wrong: a resource under a vendor domain hami manages that no
        vendor owns (most likely a misspelling, which would otherwise be ignored silently; ``hami.simulate.hints``
        names a close name of the same vendor and role), one of a vendor family this run does not schedule, and a
        count of 0 beside memory or cores."""
        warnings: list[str] = []
        spec = item.obj.spec
        for prefix, containers in (("initContainers", spec.init_containers), ("containers", spec.containers)):
            for i, c in enumerate(containers):
                for section, values in (("limits", c.resources.limits), ("requests", c.resources.requests)):
                    where = f"{item.origin}: {prefix}[{i}]({c.name}).{section}"
                    warnings += [f"{where}: {p}" for p in zero_count_problems(values, self.vendors.values())]
                    for name in sorted(values):
                        problem = self._resource_problem(name)
                        if problem:
                            warnings.append(f"{where}[{name}]: {problem}")
        return warnings

    def _resource_problem(self, name: str) -> str | None:
        domain, slash, _ = name.partition("/")
        if not slash or name in self.owned:
            return None
        family = self.switched_off.get(name) or (
            self.switched_off_domains.get(domain) if domain not in self.managed_domains else None
        )
        if family is not None:
            return (
                f"the {family} devices are not scheduled in this run, so hami ignores it (a default install does not "
                f"schedule them either; {FAMILY_SWITCHES.get(family, f'--disable-devices without {family}')})"
            )
        if domain not in self.managed_domains:
            return None
        hint = resource_hint(name, self.roles)
        return f"no vendor hami schedules owns this resource, so hami ignores it{hint}"
