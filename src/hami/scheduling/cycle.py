"""One scheduling cycle, composed: ``Cycle.filter`` = prefilter → identity → decide → reserve → commit (→ unreserve
on failure) and ``Cycle.bind`` = identity → lock → bind phase → bind (→ release on failure), over one port to
Kubernetes (``ClusterPort``); each returns an outcome as data (``FilterOutcome``, ``BindOutcome``) that the HTTP
layer only maps to its answer, events and metrics.

``decide`` = filter → score → select, and is pure: it reads the state and never changes it; the only thing it
writes is the ``Verdicts`` memo its caller owns and passes in (never authoritative, see there). ``reserve``
applies a decision to the ledger so the next pod sees it, ``unreserve`` takes it back; both are O(pod).

The cycle never emits an event or counts a metric, and the only I/O it does is through the port.

Deliberate differences from HAMi (spec §11): ties between nodes are broken by node name (HAMi: goroutine
completion order); every rejected node keeps its reasons, also when another node fits; a node that could not
run the pod even if empty is flagged ``unresolvable`` so the extender can spare kube-scheduler a pointless
preemption; annotations are written only for the vendors the pod asks for (HAMi writes empty slots for every
vendor on the node, §11 item 15).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hami.devices.base import AnnotationContext, SliceAt, Vendor
from hami.errors import ApiError, Conflict, HamiError, InvalidInput, LockContention, NotFound
from hami.protocol import keys
from hami.protocol.allocation import PodDevices
from hami.protocol.events import (
    EventReason,
    EventType,
    binding_succeed_text,
    filtering_succeed_text,
    no_available_node_text,
)
from hami.protocol.objects import ObjectMeta, Pod
from hami.scheduling.filter import NodeFit, NodeRejection, filter_node
from hami.scheduling.quota import QuotaBook
from hami.scheduling.records import RecordReader, holds_devices, is_terminal, pod_group
from hami.scheduling.request import PodRequest, SchedulingDefaults, prefilter
from hami.scheduling.screen import Screen, realize
from hami.scheduling.state import ClusterState, NodeState, PodRecord
from hami.scheduling.usage import effective_charges

__all__ = [
    "LISTED",
    "ApiFailure",
    "BindOutcome",
    "Bound",
    "Cleanup",
    "Cleared",
    "ClusterPort",
    "Cycle",
    "Decision",
    "FilterOutcome",
    "Filtered",
    "LockWaits",
    "Verdicts",
    "decide",
    "reserve",
    "score",
    "select",
    "unreserve",
]

LISTED = 10
"""At most this many fitting nodes are listed with their scores in the ``FilteringSucceed`` message."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one decision for one pod.

    ``node`` is None when nothing fits. ``devices`` has, per vendor, one entry per container (init first);
    ``slices``, per vendor, the slices chosen on partitioned devices. ``annotations`` are exactly what hami writes
    on the pod. ``rejected`` has every candidate that was not chosen *because it does not fit*; ``scores`` every
    candidate that fits (the chosen one included), best first.
    """

    uid: str
    pod: str
    node: str | None
    devices: Mapping[str, PodDevices] = field(default_factory=dict)
    slices: Mapping[str, tuple[SliceAt, ...]] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    rejected: Mapping[str, NodeRejection] = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)
    message: str = ""
    node_policy: str = ""


Verdict = NodeFit | NodeRejection


class _NodeMemo:
    """What is known about one node at one generation: its score, and its verdict per request shape."""

    __slots__ = ("generation", "node", "score", "verdicts")

    def __init__(self, node: NodeState) -> None:
        self.node = node
        self.generation = node.generation
        self.score: float | None = None
        self.verdicts: dict[int, Verdict] = {}


class Verdicts:
    """The memo of ``decide``, owned by its caller: per node, its score and its verdict per request shape.

    Never authoritative: a node's entry is used only while it was made for the very same ``NodeState`` at the same
    generation (every charge and update bumps it; a node removed and added again is a new object). Bounded:
    ``per_node`` shapes per node, and when more than ``shapes`` request shapes were seen it starts over.
    ``screening=False`` judges every node with Fit (no capacity screening, ``hami.scheduling.screen``).
    """

    def __init__(self, per_node: int = 8, shapes: int = 4096, screening: bool = True) -> None:
        self.per_node = per_node
        self.shapes = shapes
        self.screening = screening
        self.nodes: dict[str, _NodeMemo] = {}
        """Node name → its entry; read through ``entry`` (the stages inline that check on their hot loop)."""
        self._ids: dict[tuple[object, ...], int] = {}

    def clear(self) -> None:
        self.nodes.clear()
        self._ids.clear()

    def shape(self, req: PodRequest, quotas: QuotaBook) -> int:
        """A small int standing for the request's shape (0: not memoisable); hashed once per decision."""
        if not req.signature:
            return 0
        signature = req.signature
        if quotas.has_limits(req.namespace):  # the verdict then also depends on the namespace's usage
            signature = (*signature, req.namespace, quotas.generation)
        sid = self._ids.get(signature)
        if sid is None:
            if len(self._ids) >= self.shapes:
                self.clear()
            sid = self._ids[signature] = len(self._ids) + 1
        return sid

    def entry(self, node: NodeState) -> _NodeMemo:
        """The node's entry, a fresh one if the node changed since."""
        entry = self.nodes.get(node.name)
        if entry is None or entry.node is not node or entry.generation != node.generation:
            entry = self.nodes[node.name] = _NodeMemo(node)
        return entry

    def keep(self, entry: _NodeMemo, shape: int, verdict: Verdict) -> None:
        if not shape or not self.per_node:
            return
        memo = entry.verdicts
        if len(memo) >= self.per_node and shape not in memo:
            memo.pop(next(iter(memo)))
        memo[shape] = verdict


# --- stages ------------------------------------------------------------------------------------------------


def judge(state: ClusterState, node: NodeState, req: PodRequest) -> Verdict:
    """``filter`` for one node, plus the never-fits check for a rejection (``unresolvable``)."""
    verdict = filter_node(state, node, req)
    if isinstance(verdict, NodeRejection) and not verdict.unresolvable:
        never = filter_node(state, node, req, empty=True)
        if isinstance(never, NodeRejection):
            verdict = NodeRejection(verdict.node, verdict.counts, verdict.total, verdict.closest, True, verdict.detail)
    return verdict


def filter_nodes(
    state: ClusterState, req: PodRequest, names: Sequence[str], memo: Verdicts | None = None
) -> tuple[list[NodeFit], dict[str, NodeRejection]]:
    """The filter stage: every candidate judged; the fitting ones and every rejection with its numbers."""
    memo = memo or Verdicts(per_node=0)
    shape = memo.shape(req, state.quotas)
    screen = Screen.prepare(state, req) if memo.screening else None  # fitting nodes come back SCREENED
    fits: list[NodeFit] = []
    rejected: dict[str, NodeRejection] = {}
    nodes, entries = state.nodes, memo.nodes
    for name in names:
        node = nodes.get(name)
        if node is None:
            rejected[name] = NodeRejection(name, {}, 0, unresolvable=True, detail="node unregistered")
            continue
        entry = entries.get(name)  # memo.entry(node), inlined: this loop is the hot path
        if entry is None or entry.node is not node or entry.generation != node.generation:
            entry = entries[name] = _NodeMemo(node)
        verdict = entry.verdicts.get(shape)
        if verdict is None:
            verdict = judge(state, node, req) if screen is None else screen.judge(node)
            memo.keep(entry, shape, verdict)
        if isinstance(verdict, NodeFit):
            fits.append(verdict)
        else:
            rejected[name] = verdict
    if screen is not None and not screen.audit():  # the capacity index disagreed with Fit: judge with Fit only
        memo.clear()
        return filter_nodes(state, req, names, Verdicts(per_node=0, screening=False))
    return fits, rejected


def score(state: ClusterState, fits: Iterable[NodeFit], memo: Verdicts | None = None) -> dict[str, float]:
    """The score stage: each fitting node's score before the pod (spec §5.2), plus the vendors' contributions for
    the devices chosen there (``NodeFit.score``; 0 for vendors scored on usage alone)."""
    nodes = state.nodes
    if memo is None:
        return {f.node: nodes[f.node].score() + f.score for f in fits}
    out: dict[str, float] = {}
    entries = memo.nodes
    for f in fits:
        name = f.node
        node, entry = nodes[name], entries.get(name)  # memo.entry(node), inlined
        if entry is None or entry.node is not node or entry.generation != node.generation:
            entry = entries[name] = _NodeMemo(node)
        value = entry.score
        if value is None:
            value = entry.score = node.score()
        out[name] = value + f.score
    return out


def select(scores: Mapping[str, float], node_policy: str) -> list[str]:
    """The select stage: fitting nodes, best first: binpack → highest score, spread → lowest; ties by name."""
    ranked = sorted(scores)  # by name first: the sort by score below is stable, so ties stay in name order
    ranked.sort(key=scores.__getitem__, reverse=node_policy != "spread")
    return ranked


def decide(
    state: ClusterState,
    req: PodRequest,
    candidates: Iterable[str],
    now: int,
    memo: Verdicts | None = None,
    *,
    now_ns: int | None = None,
) -> Decision:
    """Choose one node and the devices for every container of ``req`` among ``candidates``.

    ``now`` (Unix seconds) is stamped into ``hami.io/vgpu-time``; ``now_ns`` is the same instant in Unix
    nanoseconds for the vendors' extra annotations (``AnnotationContext.now_ns``; default ``now × 10⁹``). A pod
    that asks for no device gets a decision with ``node=None`` and no rejections; callers pass such pods through
    untouched.
    """
    names = sorted(set(candidates))
    if not req.wants_devices:
        return Decision(req.uid, req.key, None, message="pod requests no managed device")
    fits, rejected = filter_nodes(state, req, names, memo)
    if not fits:
        return Decision(req.uid, req.key, None, rejected=rejected, message=no_available_node_text(len(names)))
    scores = score(state, fits, memo)
    ranked = select(scores, req.node_policy)
    best = realize(state, req, next(f for f in fits if f.node == ranked[0]))
    if best is None:  # a screen disagreed with Fit: judge every node as without screening
        return decide(state, req, names, now, Verdicts(per_node=0, screening=False))
    devices = best.pod_devices()
    slices = best.slices()
    stamp = _Stamp(now, now * 10**9 if now_ns is None else now_ns, req.names)
    return Decision(
        req.uid,
        req.key,
        best.node,
        devices,
        slices,
        _annotations(state, best.node, devices, slices, stamp),
        rejected,
        dict(zip(ranked, map(scores.__getitem__, ranked), strict=True)),
        _success_message(best.node, len(names), ranked, scores),
        req.node_policy,
    )


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What the annotations of a decision need besides the devices: the time (seconds and nanoseconds) and the
    container names."""

    now: int
    now_ns: int
    containers: tuple[str, ...]


def _annotations(
    state: ClusterState,
    node: str,
    devices: Mapping[str, PodDevices],
    slices: Mapping[str, Sequence[SliceAt]],
    stamp: _Stamp,
) -> dict[str, str]:
    annotations = {keys.VGPU_NODE: node, keys.VGPU_TIME: str(stamp.now)}
    for vendor in sorted(devices):
        vk = state.vendors[vendor].keys
        value = state.vendors[vendor].encode(devices[vendor])
        if vk.to_allocate:
            annotations[vk.to_allocate] = value
        annotations[vk.allocated] = value
    for vendor in sorted(devices):
        per = devices[vendor]
        names = stamp.containers if len(stamp.containers) == len(per) else ("",) * len(per)
        ctx = AnnotationContext(node, per, tuple(slices.get(vendor, ())), names, stamp.now_ns)
        annotations.update(state.vendors[vendor].extra_annotations(ctx))
    return annotations


def _instant(seconds: float) -> tuple[int, int]:
    """A clock reading as whole Unix seconds and as Unix nanoseconds, consistent: ``ns // 10**9 == s``."""
    now = int(seconds)
    base = now * 10**9
    return now, min(max(int(seconds * 10**9), base), base + 10**9 - 1)


def _success_message(chosen: str, total: int, ranked: Sequence[str], scores: Mapping[str, float]) -> str:
    """HAMi lists every fitting node in its final sort order, the chosen one last. Deliberate difference: with
    more than ``LISTED`` fitting nodes only the best ``LISTED`` are listed (an event message is not a node list);
    the counts are always of every node."""
    shown = [(n, scores[n]) for n in reversed(ranked[:LISTED])]
    return filtering_succeed_text(chosen, total, shown, fitting=len(ranked))


def reserve(state: ClusterState, req: PodRequest, decision: Decision) -> PodRecord | None:
    """Charge a decision to the ledger (idempotent). Returns the record, or None if nothing was chosen."""
    if decision.node is None:
        return None
    record = PodRecord(
        uid=req.uid,
        namespace=req.namespace,
        name=req.name,
        node=decision.node,
        devices=decision.devices,
        charges=effective_charges(decision.devices, req.kinds),
        slices=tuple(
            (vendor, s.uuid, s.slice.position)
            for vendor, per in sorted(decision.slices.items())
            for s in per
            if s.slice.position is not None
        ),
    )
    state.apply(record, add=True)
    return state.pods.get(req.uid)


def unreserve(state: ClusterState, uid: str) -> PodRecord | None:
    """Take a pod's usage back out of the ledger (no-op when absent). Returns what was removed."""
    return state.remove_pod(uid)


# --- the cycle over the port ---------------------------------------------------------------------------------


class ClusterPort(Protocol):
    """What the cycle needs from Kubernetes (implemented once in ``hami.k8s.extender_io``; the in-memory cluster
    of the tests sits behind the same implementation). Writes raise ``ApiError``, the node lock ``HamiError``."""

    def watched_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod of that name as the pod watch last saw it, or ``None`` if the watch has not seen it (yet)."""

    async def get_pod(self, namespace: str, name: str) -> Pod: ...

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None] | None = None,
        *,
        uid: str,
        resource_version: str | None = None,
    ) -> None:
        """Merge-patch a pod, only if it is still the pod with ``uid`` (and, with ``resource_version``, still at
        that version); raises ``Conflict`` otherwise, ``NotFound`` if there is no pod of that name."""

    async def lock_node(
        self, node: str, namespace: str, name: str, key: str = keys.NODE_LOCK, expiry_s: float | None = None
    ) -> None:
        """Take the node lock ``key`` for a pod (re-entrant for the same pod), counting it expired after
        ``expiry_s`` seconds (None: the configured node-lock timeout); raises ``HamiError`` on contention."""

    async def unlock_node(self, node: str, namespace: str, name: str, key: str = keys.NODE_LOCK) -> None:
        """Release the node lock ``key`` if (and only if) this pod holds it."""

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    def event(self, pod: Pod, type: EventType, reason: EventReason, message: str) -> None:
        """Record an event on the pod (fire and forget; never raises). Used by the edge, never by the cycle."""


class LockWaits(Protocol):
    """Where lock waits wait (implemented in the shell over the node watch; the core reads no clock)."""

    async def wait(self, node: str, holder: str, timeout: float, key: str = keys.NODE_LOCK) -> bool:
        """Return once the lock ``key`` that ``holder`` (``namespace/name``) holds on ``node`` may have been handed
        over and it is this waiter's turn to try (one waiter per release): True; or after ``timeout`` s: False."""

    def tried(self, node: str, locked: bool, key: str = keys.NODE_LOCK) -> None:
        """The waiter whose turn it was tried the lock: took it (``locked``) or not (the turn passes on)."""


@dataclass(frozen=True, slots=True)
class ApiFailure:
    """A Kubernetes call of the cycle that failed: the operation (``patch_pod``, ``get_pod``, ``unlock_node``) and,
    where nothing else reports it (no answer, no event), a line for the log."""

    operation: str
    log: str = ""


class Filtered(enum.StrEnum):
    """How a /filter ended (also the ``hami_filter_decisions`` label)."""

    INVALID = "invalid"
    PASSTHROUGH = "passthrough"
    NOT_READY = "not-ready"
    REFUSED = "refused"
    UNSCHEDULABLE = "unschedulable"
    SCHEDULED = "scheduled"
    COMMIT_FAILED = "commit-failed"


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """One /filter as data: the decision (chosen node, devices, every rejection with its numbers), what went
    wrong (``error``), and the Kubernetes calls that failed."""

    result: Filtered
    pod: Pod
    candidates: tuple[str, ...]
    decision: Decision | None = None
    error: str = ""
    api_errors: tuple[ApiFailure, ...] = ()


class Bound(enum.StrEnum):
    """How a /bind ended."""

    REFUSED = "refused"  # names no pod, another pod, or one that may not be bound: nothing locked or written
    COMMIT_FAILED = "commit-failed"  # its /filter's annotation write failed
    POD_MISSING = "pod-missing"
    READ_FAILED = "read-failed"
    ALREADY_BOUND = "already-bound"
    INVALID = "invalid"
    RESERVED_ELSEWHERE = "reserved-elsewhere"
    NO_ALLOCATION = "no-allocation"
    FAILED = "failed"
    BOUND = "bound"


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """One /bind as data: how it ended, the pod it concerns, the message, and the API calls that failed."""

    result: Bound
    pod: Pod
    node: str
    message: str = ""
    api_errors: tuple[ApiFailure, ...] = ()


class Cleared(enum.StrEnum):
    """How one retry of an allocation clean-up ended (the first try is part of the bind: see ``BindOutcome``)."""

    RETRYING = "retrying"  # this try failed (``error`` says why); another follows after a pause
    LANDED = "landed"  # the annotations are gone and the reservation with them
    GONE = "gone"  # no pod with that UID any more (deleted, or re-created): nothing to remove
    MOOT = "moot"  # bound meanwhile (the allocation is in use) or nothing left on it: the pod watch keeps the ledger
    CRASHED = "crashed"  # the retries stopped on an unexpected error (``error``)


@dataclass(frozen=True, slots=True)
class Cleanup:
    """One retry of the clean-up of a pod's allocation after a failed bind, as data."""

    result: Cleared
    namespace: str
    name: str
    uid: str
    error: str = ""


_NOT_PENDING = frozenset({"Running", "Succeeded", "Failed"})
_ALREADY_BOUND = "already bound to that node"


@dataclass(slots=True)
class Cycle:
    """The scheduling cycle, composed: ``filter`` = prefilter → identity → decide (filter → score → select) →
    reserve → commit (→ unreserve on failure); ``bind`` = identity → lock → bind phase → bind (→ release on
    failure). Also the ledger's watch handler for pods (``watch_pod``). One instance per process.

    Identity: every pod write carries the pod's UID as a precondition, and a write that replaces or removes an
    allocation also the resourceVersion it was decided on. /filter refuses a body whose UID is not the watched
    pod's of that name, and a pod already bound, running or finished; /bind requires ``PodUID`` and refuses one
    that is not the pod's — all before anything is reserved, locked or written.

    Concurrency: ``decide`` and ``reserve`` run back to back without an ``await`` between them, so two concurrent
    /filter calls can never be handed the same capacity: the second one sees the first one's reservation. A
    reservation whose annotations have not yet come back through the pod watch is *pending*; a watch event that
    does not carry them yet (an older version of the pod) does not drop it.

    Retries: an allocation clean-up that fails (429 storm, API down) keeps the reservation and is retried in the
    background until it lands (``cleanups``; stopped by a new /filter of the pod, its deletion or ``settle_all``);
    a bind waits for a node locked by another hami bind in progress (``bind_lock_wait``), a PodGroup member's for
    any locked node (``lock_retry_timeout``), woken through ``lock_waits``. The pauses go through the injected
    ``sleep``, the waits are measured with the injected ``stopwatch``: the cycle reads no clock itself.
    """

    state: ClusterState
    vendors: Mapping[str, Vendor]
    defaults: SchedulingDefaults
    port: ClusterPort
    clock: Callable[[], float]
    background_commit: bool = True
    report: Callable[[FilterOutcome], None] = lambda outcome: None
    """Receives a commit failure that happens after /filter has answered (background commit)."""
    timed: Callable[[str, float], None] = lambda stage, seconds: None
    """Receives each stage's duration (``decide``, ``commit``) as measured with ``stopwatch``."""
    stopwatch: Callable[[], float] = lambda: 0.0
    """Monotonic seconds: stage durations and the PodGroup lock wait (which never counts less than its pauses)."""
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """Pauses between retries (clean-ups, the PodGroup lock wait)."""
    report_cleanup: Callable[[Cleanup], None] = lambda cleanup: None
    """Receives each background retry of a clean-up (see ``Cleared``)."""
    cleanup_backoff: tuple[float, float] = (0.5, 30.0)
    """First and longest pause between the retries of a clean-up."""
    lock_retry_timeout: float = 0.0
    """``--node-lock-retry-timeout``: how long the bind of a PodGroup member waits for a locked node (0: not)."""
    lock_retry_interval: float = 0.1
    """Pause between two tries of such a wait (HAMi's 100 ms) when there is no ``lock_waits``."""
    bind_lock_wait: float = 0.0
    """``--bind-lock-wait``: how long a bind waits for a node locked by another hami bind in progress (0: not)."""
    lock_waits: LockWaits | None = None
    """Wakes lock waits when the node watch shows the lock released; None: pause ``lock_retry_interval``."""
    report_lock_wait: Callable[[float, bool], None] = lambda seconds, timed_out: None
    """Receives each lock wait: how long it took (``stopwatch``) and whether it ran out."""
    memo: Verdicts = field(default_factory=Verdicts)
    pending: set[str] = field(default_factory=set)
    commits: dict[str, asyncio.Task[FilterOutcome | None]] = field(default_factory=dict)
    cleanups: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Allocation clean-ups that failed once and are being retried, by pod UID."""
    records: RecordReader | None = None
    """Reads the watched pods' records for ``vendors`` (built on first use, again if ``vendors`` is replaced)."""

    # --- /filter ---------------------------------------------------------------------------------------------
    async def filter(self, pod: Pod, candidates: Sequence[str], not_ready: str | None = None) -> FilterOutcome:
        names = tuple(candidates)
        try:
            req = prefilter(pod, self.vendors, self.defaults)
        except InvalidInput as err:
            return FilterOutcome(Filtered.INVALID, pod, names, error=str(err))
        if not req.wants_devices:
            return FilterOutcome(Filtered.PASSTHROUGH, pod, names)
        if not_ready is not None:
            return FilterOutcome(Filtered.NOT_READY, pod, names, error=not_ready)
        # Identity first, before anything is forgotten, reserved or written.
        watched = self.port.watched_pod(pod.metadata.namespace, pod.metadata.name)
        refusal = filter_refusal(pod, watched, self.state.pods.get(req.uid))
        if refusal is not None:
            return FilterOutcome(Filtered.REFUSED, pod, names, error=refusal)
        guard = replace_guard(pod, watched)
        # A pod filtered again must not count its old reservation (nor have it cleared by an old clean-up); an
        # earlier commit still in flight finishes first, so patches of one pod never overtake each other.
        self.cancel_cleanup(req.uid)
        await self.settle(req.uid)
        self.forget(req.uid)
        decision = self._decide_and_reserve(req, names)
        if decision.node is None:
            return await self._unschedulable(pod, watched, decision, names, guard)
        return await self._commit_stage(FilterOutcome(Filtered.SCHEDULED, pod, names, decision), guard)

    def _decide_and_reserve(self, req: PodRequest, names: Sequence[str]) -> Decision:
        """decide → reserve, with no ``await`` in between (see the class docstring)."""
        t0 = self.stopwatch()
        now, now_ns = _instant(self.clock())
        decision = decide(self.state, req, names, now, self.memo, now_ns=now_ns)
        self.timed("decide", self.stopwatch() - t0)
        if reserve(self.state, req, decision) is not None:
            self.pending.add(req.uid)
        return decision

    async def _unschedulable(
        self, pod: Pod, watched: Pod | None, decision: Decision, names: tuple[str, ...], guard: str | None
    ) -> FilterOutcome:
        failed: tuple[ApiFailure, ...] = ()
        if holds_devices(pod) or (watched is not None and holds_devices(watched)):
            # The allocation of an earlier /filter whose bind never came: left on the pod, the next watch event
            # would charge it again and hold the devices while the pod stays pending. HAMi leaves it too.
            failed = await self.release_allocation(pod, pod.metadata.uid, guard)
        return FilterOutcome(Filtered.UNSCHEDULABLE, pod, names, decision, api_errors=failed)

    async def _commit_stage(self, outcome: FilterOutcome, guard: str | None) -> FilterOutcome:
        uid = outcome.pod.metadata.uid
        if not self.background_commit:
            return await self.commit(outcome, guard) or outcome
        # kube-scheduler's scheduling cycle is serial and waits for this answer, so the annotation PATCH runs
        # beside it; /bind waits for it before binding. A failed commit rolls the reservation back and fails
        # that bind.
        self.commits[uid] = asyncio.get_running_loop().create_task(self._commit_reported(outcome, guard))
        return outcome

    async def _commit_reported(self, outcome: FilterOutcome, guard: str | None) -> FilterOutcome | None:
        failed = await self.commit(outcome, guard)
        if failed is not None:
            self.report(failed)
        return failed

    async def commit(self, outcome: FilterOutcome, guard: str | None) -> FilterOutcome | None:
        """Write the allocation annotations; on failure unreserve. Returns the failure, or None.

        The PATCH carries the pod's UID, so it never lands on another pod of the same name; ``guard`` (the
        resourceVersion the pod was read at, when an earlier allocation is being replaced) makes it land only on
        that version of the pod.
        """
        pod, decision = outcome.pod, outcome.decision
        assert decision is not None
        assert decision.node is not None
        uid = pod.metadata.uid
        t0 = self.stopwatch()
        try:
            await self.port.patch_pod_metadata(
                pod.metadata.namespace,
                pod.metadata.name,
                with_bind_phase(decision),
                {keys.VGPU_NODE: decision.node},
                uid=uid,
                resource_version=guard,
            )
        except ApiError as err:
            landed = await self._commit_landed(pod, decision, err)
            if landed:
                return None  # the answer was lost, not the write
            record = self.state.pods.get(uid)
            if record is not None and record.node == decision.node:
                if landed is None:
                    # It may have landed: keep charging it, no longer pending, so the pod's next watch event
                    # (the relist after an API server restart, a new /filter) settles what the pod holds.
                    self.pending.discard(uid)
                else:
                    self.forget(uid)
                    self._recharge(pod.metadata.namespace, pod.metadata.name, uid)
            if _pod_gone(err) and self.commits.get(uid) is asyncio.current_task():
                # No pod with this UID exists any more, so no /bind for it can succeed: keeping the failed task
                # for one would keep it for ever. /bind then finds the pod missing or another one and refuses.
                del self.commits[uid]
            message = f"writing the allocation annotations failed: {err}"
            return FilterOutcome(
                Filtered.COMMIT_FAILED, pod, outcome.candidates, decision, message, (ApiFailure("patch_pod"),)
            )
        finally:
            self.timed("commit", self.stopwatch() - t0)
        return None

    async def _commit_landed(self, pod: Pod, decision: Decision, err: ApiError) -> bool | None:
        """Whether an allocation write that failed landed after all: a connection lost after the request went out
        (status 0) or a server error (5xx) leaves its fate unknown, so the pod is read back. True: it carries
        exactly this decision's annotations; False: it does not (or the failure was a refusal); None: unknown.
        Treating a write that landed as failed would free devices the pod holds in the API for the next pod."""
        if err.status != 0 and not 500 <= err.status < 600:
            return False
        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        try:
            fresh = await self.port.get_pod(ns, name)
        except NotFound:
            return False
        except ApiError:
            return None
        held = fresh.metadata.annotations
        return fresh.metadata.uid == uid and all(held.get(k) == v for k, v in decision.annotations.items())

    def _recharge(self, ns: str, name: str, uid: str) -> None:
        """After a failed write of a new allocation: charge again what the pod still carries as the watch last
        saw it (the allocation of an earlier /filter it replaced, or a bind that landed meanwhile), so the ledger
        never shows free what the API still holds allocated."""
        watched = self.port.watched_pod(ns, name)
        if watched is not None and watched.metadata.uid == uid and holds_devices(watched):
            self._watch_allocation(watched)

    async def settle(self, uid: str) -> FilterOutcome | None:
        """Wait for the pod's commit still in flight, if any; returns its failure or None."""
        task = self.commits.pop(uid, None)
        if task is None:
            return None
        return await task

    async def settle_all(self) -> None:
        """Wait for every commit in flight (shutdown, tests); stop the clean-up retries (a restarted hami charges
        what the pods carry, and kube-scheduler's next /filter of such a pod replaces or clears it)."""
        while self.commits:
            await self.settle(next(iter(self.commits)))
        for uid in list(self.cleanups):
            self.cancel_cleanup(uid)

    def forget(self, uid: str) -> None:
        self.pending.discard(uid)
        unreserve(self.state, uid)

    # --- /bind -----------------------------------------------------------------------------------------------
    async def bind(self, ns: str, name: str, uid: str, node: str) -> BindOutcome:
        named = Pod(metadata=ObjectMeta(name=name, namespace=ns, uid=uid))
        if not uid:
            # kube-scheduler always sends the UID; without it a request could name whichever pod has that name.
            return _refused(named, node, "ExtenderBindingArgs.PodUID is empty; hami binds a pod only by its UID")
        failed_commit = await self.settle(uid)
        if failed_commit is not None:
            # its /filter's annotation PATCH failed and rolled the reservation back
            message = f"binding {ns}/{name} to {node} failed: {failed_commit.error}"
            return BindOutcome(Bound.COMMIT_FAILED, named, node, message)
        record = self.state.pods.get(uid)
        if record is not None and (record.namespace, record.name) != (ns, name):
            return _refused(named, node, f"UID {uid} belongs to pod {record.namespace}/{record.name}")
        pod = await self._bind_target(named, node, record)
        if isinstance(pod, BindOutcome):
            return pod
        wants_devices = self._bind_check(pod, uid, node, record)
        if isinstance(wants_devices, BindOutcome):
            return wants_devices
        return await self._lock_and_bind(pod, node, record, wants_devices)

    async def _bind_target(self, named: Pod, node: str, record: PodRecord | None) -> Pod | BindOutcome:
        """The pod to bind: the watch's copy when our own /filter reserved it (no need to read it back), else as
        the API holds it now."""
        ns, name = named.metadata.namespace, named.metadata.name
        watched = self.port.watched_pod(ns, name)
        if record is not None:
            return watched or named
        if watched is not None and watched.metadata.uid != named.metadata.uid:
            return watched  # refused by the check, without an API call
        try:
            return await self.port.get_pod(ns, name)
        except NotFound as err:
            return BindOutcome(Bound.POD_MISSING, named, node, str(err))
        except ApiError as err:
            return BindOutcome(Bound.READ_FAILED, named, node, str(err), api_errors=(ApiFailure("get_pod"),))

    def _bind_check(self, pod: Pod, uid: str, node: str, record: PodRecord | None) -> bool | BindOutcome:
        """Identity, then the allocation: an outcome that ends the bind here, or whether the pod wants devices."""
        refusal = bind_refusal(pod, uid, node)
        if refusal == _ALREADY_BOUND:
            # kube-scheduler repeats a bind whose answer it did not get: nothing is locked, written or released.
            return BindOutcome(Bound.ALREADY_BOUND, pod, node)
        if refusal is not None:
            return _refused(pod, node, refusal)
        if record is None:
            return self._allocation_check(pod, node)
        if record.node != node:
            message = f"binding {pod.key} to {node} refused: hami reserved its devices on {record.node}"
            return BindOutcome(Bound.RESERVED_ELSEWHERE, pod, node, message)
        return True

    def _allocation_check(self, pod: Pod, node: str) -> bool | BindOutcome:
        """A pod this process did not reserve: whether it wants devices, and if so that it holds them on ``node``."""
        try:
            wants_devices = prefilter(pod, self.vendors, self.defaults).wants_devices
        except InvalidInput as err:
            return BindOutcome(Bound.INVALID, pod, node, str(err))
        if wants_devices and pod.metadata.annotations.get(keys.VGPU_NODE) != node:
            # /filter answers before its annotation PATCH lands; if the process dies in between, the next one gets
            # the /bind of a pod with no allocation (or one on another node). Binding it would start a GPU pod
            # no device plugin can serve; refusing makes kube-scheduler filter it again. (HAMi patches first.)
            message = (
                f"binding {pod.key} to {node} refused: hami holds no device allocation for it on {node} "
                "(kube-scheduler will filter it again)"
            )
            return BindOutcome(Bound.NO_ALLOCATION, pod, node, message)
        return wants_devices

    def _bind_locks(self, pod: Pod, record: PodRecord | None) -> list[tuple[str, float | None]]:
        """The node locks a bind of ``pod`` takes: each distinct ``VendorKeys.lock`` of the vendors it uses, sorted
        (so two binds never wait for each other crosswise), with its expiry (the shortest a vendor gives; None: the
        configured node-lock timeout). Empty when none of its vendors has a lock."""
        if record is not None and record.devices:
            used: Iterable[str] = record.devices
        else:
            try:
                used = prefilter(pod, self.vendors, self.defaults).vendors
            except InvalidInput:
                used = ()
        expiry: dict[str, float | None] = {}
        for vendor in used:
            vk = self.vendors[vendor].keys if vendor in self.vendors else None
            if vk is None or vk.lock is None:
                continue
            given = [e for e in (expiry.get(vk.lock), vk.lock_expiry_s) if e is not None]
            expiry[vk.lock] = min(given) if given else None
        return sorted(expiry.items())

    async def _lock_and_bind(self, pod: Pod, node: str, record: PodRecord | None, wants_devices: bool) -> BindOutcome:
        """locks → bind phase (unless our own commit wrote it) → Binding; a failure releases what was taken."""
        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        locked: list[str] = []
        try:
            if wants_devices:
                for key, expiry in self._bind_locks(pod, record):
                    await self._lock(node, pod, key, expiry)
                    locked.append(key)
                if record is None:  # not committed by this process: mark the bind phase now, as HAMi does, on
                    # the version just read (unbound, allocated on this node): replaced only if still so
                    await self.port.patch_pod_metadata(
                        ns,
                        name,
                        {keys.BIND_PHASE: "allocating", keys.BIND_TIME: str(int(self.clock()))},
                        uid=uid,
                        resource_version=pod.metadata.resource_version or None,
                    )
            await self.port.bind(ns, name, uid, node)
        except HamiError as err:
            return await self._bind_failed(pod, node, locked, err)
        return BindOutcome(Bound.BOUND, pod, node, binding_succeed_text(node, ns, name))

    async def _lock(self, node: str, pod: Pod, key: str = keys.NODE_LOCK, expiry: float | None = None) -> None:
        """Take the node lock ``key`` for ``pod``, waiting for a hand-over where one is coming.

        The lock is held from a bind until the node's device plugin has allocated for that pod, so a node takes one
        pod per hand-over. A bind that finds the node locked by *another hami bind in progress* (the holder is a
        pod this ledger placed on that node, whose device plugin has not finished: ``_handing_over``) waits up to
        ``bind_lock_wait`` for the hand-over instead of failing; a PodGroup member waits up to
        ``lock_retry_timeout`` for any holder, as HAMi v2.10 does. Any other holder (foreign, or stale: the
        locker takes over an expired lock or one whose holder is gone), or any other failure, fails at once.

        The wait goes through ``lock_waits`` (woken by the node watch as soon as the lock is released, one waiter
        per release) or, without it, pauses of ``lock_retry_interval``; every wait is reported to
        ``report_lock_wait`` with how long it took and whether it ran out.
        """
        ns, name = pod.metadata.namespace, pod.metadata.name
        group = self.lock_retry_timeout if pod_group(pod) else 0.0
        started, paused, waited, turn = self.stopwatch(), 0.0, False, False
        while True:
            locked = False
            try:
                await self.port.lock_node(node, ns, name, key, expiry)
                locked = True
            except LockContention as err:
                budget = max(group, self.bind_lock_wait if self._handing_over(err.holder, node) else 0.0)
                elapsed = max(self.stopwatch() - started, paused)
                if budget <= 0:  # not a hand-over (any more): a foreign or stale holder
                    if waited:
                        self.report_lock_wait(elapsed, False)
                    raise
                step = self.lock_retry_interval if self.lock_waits is None else 0.0
                if elapsed + step > budget or (not step and elapsed >= budget):
                    self.report_lock_wait(elapsed, True)
                    raise LockContention(
                        err.node, err.holder, err.since, err.timeout, waited=budget, key=err.key
                    ) from None
                holder = err.holder
            finally:
                if turn and self.lock_waits is not None:
                    self.lock_waits.tried(node, locked, key)
            if locked:
                if waited:
                    self.report_lock_wait(max(self.stopwatch() - started, paused), False)
                return
            waited = True
            if self.lock_waits is None:
                await self.sleep(self.lock_retry_interval)
                paused += self.lock_retry_interval
            else:
                turn = await self.lock_waits.wait(node, holder, budget - elapsed, key)

    def _handing_over(self, holder: str, node: str) -> bool:
        """Whether the lock on ``node`` is held by another hami bind in progress: a pod the ledger has on that node
        (reserved or committed by hami), whose device plugin has not reported a failure."""
        ns, _, name = holder.partition("/")
        if not name:
            return False  # a legacy lock names no owner: not known to be ours
        watched = self.port.watched_pod(ns, name)
        if watched is None:
            return False
        record = self.state.pods.get(watched.metadata.uid)
        if record is None or record.node != node or (record.namespace, record.name) != (ns, name):
            return False
        return watched.metadata.annotations.get(keys.BIND_PHASE) != "failed"

    async def _bind_failed(self, pod: Pod, node: str, locked: Sequence[str], err: HamiError) -> BindOutcome:
        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        fresh = await self._fresh(ns, name)
        if isinstance(fresh, ApiError):
            return await self._bind_unknown(pod, node, locked, err, fresh)
        ours = fresh if fresh is not None and fresh.metadata.uid == uid else None
        failed: list[ApiFailure] = []
        if ours is not None and ours.spec.node_name == node:
            # kube-scheduler retried a bind that had gone through (its request timed out): the pod runs there with
            # its allocation, so releasing anything now would free devices still in use.
            if locked and ours.metadata.annotations.get(keys.BIND_PHASE) in ("success", "failed"):
                failed += await self._unlock(node, ns, name, locked)
            return BindOutcome(Bound.ALREADY_BOUND, pod, node, api_errors=tuple(failed))
        if locked:
            failed += await self._unlock(node, ns, name, locked)
        if ours is not None and ours.spec.node_name:
            self.forget(uid)  # bound elsewhere meanwhile: its annotations are not ours to remove
        else:
            failed += await self.release_allocation(
                pod, uid, (ours.metadata.resource_version if ours else None) or None
            )
        message = f"binding {ns}/{name} to {node} failed: {err}"
        return BindOutcome(Bound.FAILED, pod, node, message, tuple(failed))

    async def _bind_unknown(
        self, pod: Pod, node: str, locked: Sequence[str], err: HamiError, unread: ApiError
    ) -> BindOutcome:
        """A failed bind whose pod cannot be read back (API down or restarting, throttled, not yet authorizing).

        The Binding may have landed before its answer was lost (a connection reset after the request went out):
        the pod may run on ``node`` with this allocation. Removing it now, guarded by the UID alone, would strip a
        bound pod (its device plugin finds nothing to allocate; the ledger frees devices in use). So the
        reservation and the annotations stay, and the clean-up runs in the background, where each try reads the
        pod first and removes the allocation only from an unbound version, guarded by that resourceVersion
        (``_clear_again``). Our lock is released as on any failed bind (owner-checked); the ledger, not the
        lock, keeps devices from being handed out twice."""
        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        failed = [ApiFailure("get_pod", f"reading {pod.key} back after a failed bind failed: {unread}")]
        if locked:
            failed += await self._unlock(node, ns, name, locked)
        self._clear_later(ns, name, uid)
        message = f"binding {ns}/{name} to {node} failed: {err}"
        return BindOutcome(Bound.FAILED, pod, node, message, tuple(failed))

    async def _fresh(self, ns: str, name: str) -> Pod | ApiError | None:
        """The pod as the API holds it now, ``None`` if there is none, or the error that kept it from being read."""
        try:
            return await self.port.get_pod(ns, name)
        except NotFound:
            return None
        except ApiError as err:
            return err

    async def _unlock(self, node: str, ns: str, name: str, locked: Sequence[str]) -> list[ApiFailure]:
        """Release each lock taken (in reverse order); every failure is reported, none stops the others."""
        failed: list[ApiFailure] = []
        for key in reversed(locked):
            try:
                await self.port.unlock_node(node, ns, name, key)
            except ApiError as err:
                what = "the lock" if key == keys.NODE_LOCK else f"the lock {key}"
                message = f"releasing {what} on {node} after a failed or repeated bind: {err}"
                failed.append(ApiFailure("unlock_node", message))
        return failed

    async def release_allocation(self, pod: Pod, uid: str, guard: str | None = None) -> tuple[ApiFailure, ...]:
        """Remove the annotations that hold the pod's devices, then the reservation; returns the failed operations.

        The removal is written only to the pod with ``uid`` and, with ``guard``, only to that resourceVersion of
        it (the version read when deciding it holds no devices in use). The reservation is dropped once the
        annotations are gone, so the ledger never frees what the API still shows allocated; if the write fails
        (throttled, API down, the pod changed meanwhile) it is retried in the background until it lands or is no
        longer needed (``cleanups``, each retry reported to ``report_cleanup``)."""
        self.cancel_cleanup(uid)
        ns, name = pod.metadata.namespace, pod.metadata.name
        try:
            await self._clear(ns, name, uid, guard)
        except ApiError as err:
            if _pod_gone(err):
                self.forget(uid)
                return ()
            self._clear_later(ns, name, uid)
            return (ApiFailure("patch_pod", f"clearing the allocation of {pod.key} failed: {err}; retrying"),)
        self.forget(uid)
        return ()

    def _clear_later(self, ns: str, name: str, uid: str) -> None:
        """Retry the clean-up of the pod's allocation in the background (``cleanups``), the reservation kept."""
        self.cancel_cleanup(uid)
        task = asyncio.get_running_loop().create_task(self._clear_until_done(ns, name, uid), name=f"clear-{uid}")
        self.cleanups[uid] = task
        task.add_done_callback(lambda done: self._cleanup_done(ns, name, uid, done))

    async def _clear(self, ns: str, name: str, uid: str, guard: str | None) -> None:
        removals: dict[str, str | None] = dict.fromkeys(
            (keys.VGPU_NODE, keys.VGPU_TIME, keys.BIND_PHASE, keys.BIND_TIME, *_extra_keys(self.vendors))
        )
        for vendor in self.vendors.values():
            removals[vendor.keys.allocated] = None
            if vendor.keys.to_allocate:
                removals[vendor.keys.to_allocate] = None
        await self.port.patch_pod_metadata(ns, name, removals, {keys.VGPU_NODE: None}, uid=uid, resource_version=guard)

    async def _clear_until_done(self, ns: str, name: str, uid: str) -> None:
        """Retry a clean-up with a doubling pause (``cleanup_backoff``) until it lands or is moot."""
        delay, longest = self.cleanup_backoff
        while True:
            await self.sleep(delay)
            delay = min(longest, delay * 2)
            cleanup = await self._clear_again(ns, name, uid)
            self.report_cleanup(cleanup)
            if cleanup.result is not Cleared.RETRYING:
                return

    async def _clear_again(self, ns: str, name: str, uid: str) -> Cleanup:
        """One retry: read the pod, then remove its allocation only from the version read, only while it is still
        unbound and still the pod ``uid``."""
        try:
            pod = await self.port.get_pod(ns, name)
        except NotFound:
            pod = None
        except ApiError as err:
            return Cleanup(Cleared.RETRYING, ns, name, uid, f"reading the pod failed: {err}")
        if pod is None or pod.metadata.uid != uid:
            self.forget(uid)
            return Cleanup(Cleared.GONE, ns, name, uid)
        if pod.spec.node_name or not holds_devices(pod):
            return Cleanup(Cleared.MOOT, ns, name, uid)
        try:
            await self._clear(ns, name, uid, pod.metadata.resource_version or None)
        except ApiError as err:
            if not _pod_gone(err):
                return Cleanup(Cleared.RETRYING, ns, name, uid, str(err))
            self.forget(uid)
            return Cleanup(Cleared.GONE, ns, name, uid)
        self.forget(uid)
        return Cleanup(Cleared.LANDED, ns, name, uid)

    def cancel_cleanup(self, uid: str) -> None:
        task = self.cleanups.pop(uid, None)
        if task is not None:
            task.cancel()

    def _cleanup_done(self, ns: str, name: str, uid: str, task: asyncio.Task[None]) -> None:
        if self.cleanups.get(uid) is task:
            del self.cleanups[uid]
        if not task.cancelled() and task.exception() is not None:
            self.report_cleanup(Cleanup(Cleared.CRASHED, ns, name, uid, repr(task.exception())))

    # --- the pod watch ---------------------------------------------------------------------------------------
    def watch_pod(self, pod: Pod, deleted: bool = False) -> str | None:
        """Apply one pod event to the ledger (O(pod)). Returns why the pod's allocation annotations could not be
        fully decoded (what could be is charged), or None."""
        uid = pod.metadata.uid
        if deleted or is_terminal(pod):
            # its commit task, if any, goes too (a PATCH still in flight fails on the deleted pod and rolls
            # back nothing that is still held)
            self.pending.discard(uid)
            self.commits.pop(uid, None)
            self.cancel_cleanup(uid)
            unreserve(self.state, uid)
        elif not holds_devices(pod):
            if uid not in self.pending:
                unreserve(self.state, uid)
        else:
            return self._watch_allocation(pod)
        return None

    def _watch_allocation(self, pod: Pod) -> str | None:
        """A pod that carries an allocation: the ledger takes it, unless our newer reservation is pending."""
        uid = pod.metadata.uid
        reader = self.records
        if reader is None or reader.vendors is not self.vendors:
            reader = self.records = RecordReader(self.vendors)
        record = reader.read(pod)
        if record is None:
            return None
        problem = (
            f"pod {record.key}: allocation annotations not fully decodable: {record.problem}"
            if record.problem
            else None
        )
        current = self.state.pods.get(uid)
        if current is not None and _same(current, record):
            self.pending.discard(uid)
            return problem
        if current is not None and uid in self.pending:
            # An older version of the pod (the watch lags behind our patch), on this node or another, with these
            # devices or others: our newer reservation stays until the version carrying it arrives; replacing
            # it would free its devices for the next pod and put it back on top of that pod.
            return problem
        self.pending.discard(uid)
        unreserve(self.state, uid)
        self.state.apply(record, add=True)
        return problem


def _refused(pod: Pod, node: str, reason: str) -> BindOutcome:
    return BindOutcome(Bound.REFUSED, pod, node, f"binding {pod.key} to {node} refused: {reason}")


def filter_refusal(pod: Pod, watched: Pod | None, record: PodRecord | None) -> str | None:
    """Why /filter must not place ``pod`` (the request's body), or ``None``.

    ``watched`` is the pod of that name in the watch cache, ``record`` the ledger's record under the body's UID.
    A pod the watch has not seen yet (just created) is placed: the UID precondition of the PATCH guards it.
    """
    ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
    who = f"pod {ns}/{name}"
    if not uid:
        return f"{who}: metadata.uid is empty; hami places a pod only under its UID"
    if watched is not None and watched.metadata.uid != uid:
        return (
            f"{who}: the request is for UID {uid}, but the pod of that name is UID {watched.metadata.uid} "
            "(deleted and re-created, or a stale or forged request); nothing reserved or written"
        )
    if record is not None and (record.namespace, record.name) != (ns, name):
        return f"{who}: UID {uid} belongs to pod {record.namespace}/{record.name}; nothing reserved or written"
    for copy in (pod, watched):
        if copy is not None and copy.spec.node_name:
            return (
                f"{who} (UID {uid}) is already bound to node {copy.spec.node_name}; hami never places a bound pod again"
            )
        if copy is not None and copy.status.phase in _NOT_PENDING:
            return f"{who} (UID {uid}) is {copy.status.phase}; hami places only pending pods"
    return None


def replace_guard(pod: Pod, watched: Pod | None) -> str | None:
    """The resourceVersion precondition for writing the pod's allocation, or ``None`` for the UID alone.

    A pod that carries no allocation yet gets one added, guarded by its UID only: kube-scheduler's status
    updates of a pending pod would otherwise fail the write for nothing. A pod that carries one (an earlier
    /filter whose bind failed or never came) has it replaced or removed, and that is done only on the version
    that was read (the watch's, else the body's): if the pod has moved on since (bound, its bind phase set),
    the write fails with 409 and the reservation is rolled back.
    """
    current = watched or pod
    if not (holds_devices(pod) or holds_devices(current)):
        return None
    return current.metadata.resource_version or None


def bind_refusal(pod: Pod, uid: str, node: str) -> str | None:
    """Why a /bind of ``pod`` under ``uid`` to ``node`` must not go ahead, or ``None``; ``_ALREADY_BOUND`` when
    it is bound there already (then there is nothing to do)."""
    if pod.metadata.uid != uid:
        return (
            f"the request is for UID {uid}, but the pod of that name is UID {pod.metadata.uid} "
            "(deleted and re-created, or a stale or forged request)"
        )
    if pod.spec.node_name == node:
        return _ALREADY_BOUND
    if pod.spec.node_name:
        return f"the pod is already bound to node {pod.spec.node_name}"
    if pod.status.phase in _NOT_PENDING:
        return f"the pod is {pod.status.phase}"
    return None


def _pod_gone(err: ApiError) -> bool:
    """No pod with the UID written against exists: not found, or the UID precondition failed (422)."""
    return isinstance(err, NotFound) or (isinstance(err, Conflict) and err.status == 422)


def with_bind_phase(decision: Decision) -> dict[str, str]:
    """The allocation annotations plus ``hami.io/bind-phase: allocating`` and ``hami.io/bind-time``.

    Deliberate difference: HAMi writes the bind phase in a second PATCH from Bind, after taking the node lock;
    hami writes it with the allocation (one API call less per pod). Device plugins only look at pods bound to
    their node, so the phase is not seen before the bind, and a failed bind clears it with the allocation.
    """
    annotations = dict(decision.annotations)
    annotations[keys.BIND_PHASE] = "allocating"
    annotations[keys.BIND_TIME] = annotations.get(keys.VGPU_TIME, "0")
    return annotations


def _extra_keys(vendors: Mapping[str, Vendor]) -> list[str]:
    return [key for vendor in vendors.values() for key in vendor.keys.extra]


def _same(a: PodRecord, b: PodRecord) -> bool:
    return a.node == b.node and a.charges == b.charges and a.slices == b.slices
