"""The scheduler extender's edge: ``/filter`` and ``/bind`` mapped to and from the cycle, ``/preempt`` to the
preemption core (``hami.scheduling.preemptverb``), ``/filter`` on whole Node objects to the side-effect-free
simulation (``hami.server.simulation``: Cluster Autoscaler's template nodes), PodGroup events to the gangs.

``hami.scheduling.cycle.Cycle`` composes the cycle and returns an outcome as data; this module only turns an
outcome into the HTTP answer, the events on the pod and the metrics, and feeds the watch handlers' objects to the
state. Identity (UID preconditions, refusing stale, forged or bound pods) and the concurrency guarantee are the
cycle's; see there.

Deliberate differences from HAMi (webhook-bind-plugin-vendors.md §11): answers list every other candidate in
``FailedNodes`` (with its reasons, also when some node fits) and nodes that could not run the pod even empty in
``FailedAndUnresolvableNodes``; a pod whose only GPU user is an init container still takes the node lock; a
follower answers at once instead of blocking; a failed bind releases the reservation and the annotations.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hami.config.dra import DraConfig
from hami.config.profiles import DeviceProfiles
from hami.devices.base import Vendor
from hami.protocol import keys
from hami.protocol.dra import DeviceClass, ResourceClaim, ResourceSlice
from hami.protocol.events import EventReason, filtering_failed_texts, no_available_node_text
from hami.protocol.extender import (
    BindingArgs,
    BindingResult,
    FilterArgs,
    FilterResult,
    HostPriority,
    MetaPod,
    MetaVictims,
    PreemptionArgs,
    PreemptionResult,
)
from hami.protocol.objects import Node, Pod, ResourceQuota
from hami.protocol.reasons import Reason
from hami.scheduling.bind import bind_lock_keys
from hami.scheduling.cycle import Cycle
from hami.scheduling.decide import Decision
from hami.scheduling.dra import DraLedger, DraProblem, DraWarning
from hami.scheduling.dra.policy import prioritize
from hami.scheduling.outcomes import (
    ApiFailure,
    BindOutcome,
    Bound,
    Cleanup,
    Cleared,
    Filtered,
    FilterOutcome,
    Preempting,
    PreemptionNote,
)
from hami.scheduling.parts import Clocks, CycleSettings
from hami.scheduling.ports import ClusterPort, LockWaits
from hami.scheduling.preempting import read_budgets
from hami.scheduling.preemption import Budget
from hami.scheduling.preemptverb import VerbAnswer, answer_preempt_verb
from hami.scheduling.records import HAMI_SCHEDULER, pod_group
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from hami.server.busy import BusyNodes
from hami.server.metrics import Metrics
from hami.server.simulation import simulate_filter

__all__ = ["Extender", "Readiness"]

log = logging.getLogger("hami.extender")

FAILED, SUCCEED = EventReason.FILTERING_FAILED, EventReason.FILTERING_SUCCEED


@dataclass(slots=True)
class Readiness:
    """What ``/filter`` checks (caches synced, and leadership when HA is on) and ``/readyz`` (caches synced: a
    follower is ready to take over; the Service reaches the leader by its ``hami.io/scheduler-role`` label)."""

    synced: Callable[[], bool] = lambda: True
    leader: Callable[[], bool] = lambda: True

    def problem(self) -> str | None:
        if not self.leader():
            return "this hami replica is not the leader; kube-scheduler must call the leader (check the Service)"
        return self.ready_problem()

    def ready_problem(self) -> str | None:
        if not self.synced():
            return "hami is starting: its node and pod caches are not synced yet"
        return None


class Extender:
    """The cycle plus its edge; one instance per process. It is the cycle's ``CycleObserver``: what the cycle did
    beside its answers (a late commit failure, stage times, clean-up retries, lock waits) becomes metrics, events
    and log lines here. The cycle's state in flight and its settings are the cycle's (``cycle.pending``,
    ``cycle.settings``)."""

    def __init__(
        self,
        state: ClusterState,
        vendors: Mapping[str, Vendor],
        defaults: SchedulingDefaults,
        cluster: ClusterPort,
        metrics: Metrics,
        readiness: Readiness | None = None,
        clock: Callable[[], float] = time.time,
        background_commit: bool = True,
        lock_retry_timeout: float = 0.0,
        bind_lock_wait: float = 0.0,
        lock_waits: LockWaits | None = None,
        node_locks: Mapping[str, Collection[str]] | None = None,
        dra: DraConfig | None = None,
        success_events: bool = True,
        preemption: bool = False,
        scheduler_name: str = HAMI_SCHEDULER,
        profiles: DeviceProfiles | None = None,
    ) -> None:
        self.state = state
        self.vendors = vendors
        self.defaults = defaults
        self.cluster = cluster
        self.metrics = metrics
        self.readiness = readiness or Readiness()
        self.success_events = success_events
        """``--success-events``: write the Normal events of a scheduled pod (failures are always written)."""
        self.profiles = profiles
        """``--device-profiles``: the inventory of template nodes that carry none (``hami.config.profiles``)."""
        self.clock = clock
        settings = CycleSettings(
            background_commit=background_commit,
            lock_retry_timeout=lock_retry_timeout,
            bind_lock_wait=bind_lock_wait,
            preemption=preemption,
            scheduler_name=scheduler_name,
        )
        clocks = Clocks(wall=clock, stopwatch=time.perf_counter, sleep=asyncio.sleep)
        self.busy = BusyNodes(node_locks)
        """What /filter passes over: the locks the node watch shows held (``node_locks``:
        ``LockHousekeeping.locks``, read only) and this process's binds in progress (``bind``, ``on_node``)."""
        self.cycle = Cycle(state, vendors, defaults, cluster, clocks, settings, self, lock_waits, node_locks=self.busy)
        locks = {v.keys.lock for v in vendors.values() if v.keys.lock is not None}
        self._unread_keys = frozenset({*locks, keys.CAPACITY_FREED})
        """Node annotations the state never reads: hami's own writes (locks, the requeue nudge)."""
        self._node_inputs: dict[str, tuple[object, ...]] = {}
        """Per node, what the state reads from it as last applied (see ``on_node``)."""
        self.dra = DraLedger(state, dra if dra is not None else DraConfig())
        """DRA claims charged beside hami's pods (``hami.scheduling.dra``); fed by the ``on_resource_*`` handlers."""
        self.dra.pod_lookup = self._live_pod_uid
        self.dra.settled = self._synced
        self._gang_tasks: set[asyncio.Task[None]] = set()
        """Releases of gangs whose PodGroup failed, running (``on_pod_group``)."""
        self.freed: Callable[[str], None] = lambda node: None
        """Told each node whose capacity freed with no pod event (a preemption hold ran out): the runtime's
        requeue nudge (``hami.server.requeue``)."""

    # --- CycleObserver ---------------------------------------------------------------------------------------
    def commit_failed_late(self, outcome: FilterOutcome) -> None:
        self._filtered(outcome)

    def stage_timed(self, stage: str, seconds: float) -> None:
        self.metrics.stage_latency.labels(stage).observe(seconds)

    def lock_waited(self, seconds: float, timed_out: bool) -> None:
        self.metrics.lock_wait.observe(seconds)
        if timed_out:
            self.metrics.lock_wait_timeouts.inc()

    def capacity_freed(self, node: str) -> None:
        self.freed(node)

    def evictions_wasted(self, count: int, why: str) -> None:
        self.metrics.preemption_wasted.labels(why).inc(count)
        log.warning("%d eviction(s) made by hami's preemption did not lead to a placement there (%s)", count, why)

    def cleanup_retried(self, cleanup: Cleanup) -> None:
        """Log lines and metrics of one background retry of a clean-up."""
        pod = f"{cleanup.namespace}/{cleanup.name}"
        if cleanup.result is Cleared.RETRYING:
            log.info("clean-up of %s failed: %s; retrying", pod, cleanup.error)
        elif cleanup.result is Cleared.LANDED:
            self.metrics.decisions.labels("cleanup-retried").inc()
            log.info("clean-up of %s landed after retries", pod)
        elif cleanup.result is Cleared.MOOT:
            log.info("clean-up of %s not needed: bound meanwhile, or its allocation already gone", pod)
        elif cleanup.result is Cleared.CRASHED:
            log.error("clean-up of %s (UID %s) stopped: %s", pod, cleanup.uid, cleanup.error)

    async def settle_all(self) -> None:
        """Wait for every commit in flight and stop the clean-up retries (shutdown, tests)."""
        await self.cycle.settle_all()
        await asyncio.gather(*self._gang_tasks)

    # --- /filter -------------------------------------------------------------------------------------------
    async def filter(self, args: FilterArgs) -> FilterResult:
        started = time.perf_counter()
        try:
            if args.nodes is not None:
                return self._simulate(args)
            candidates = args.candidate_names()
            outcome = await self.cycle.filter(args.pod, candidates, self.readiness.problem())
            self._filtered(outcome)
            return _filter_answer(outcome, args)
        finally:
            self.metrics.latency.labels("filter").observe(time.perf_counter() - started)

    def _simulate(self, args: FilterArgs) -> FilterResult:
        """/filter on whole Node objects: a side-effect-free simulation (``hami.server.simulation``). Only the
        synced caches are required, not leadership: the answer depends on the request and the quotas alone."""
        answer, result = simulate_filter(
            args,
            self.vendors,
            self.defaults,
            self.state,
            self.profiles,
            int(self.clock()),
            self.readiness.ready_problem(),
        )
        self.metrics.simulations.labels(result).inc()
        log.debug("/filter simulation for %s on %d node(s): %s", args.pod.key, len(args.nodes or ()), result)
        return answer

    def _filtered(self, outcome: FilterOutcome) -> None:
        """Metrics, log lines and events of one /filter outcome (also of a commit that failed after the answer)."""
        self.metrics.decisions.labels(outcome.result.value).inc()
        self._api_errors(outcome.api_errors)
        pod, decision = outcome.pod, outcome.decision
        if outcome.result is Filtered.SCHEDULED and decision is not None and decision.passed_over:
            self.metrics.lock_busy_skips.inc()
        if outcome.result in (Filtered.INVALID, Filtered.COMMIT_FAILED):
            self._event(pod, FAILED, outcome.error)
        elif outcome.result is Filtered.REFUSED:
            log.warning("/filter refused: %s", outcome.error)
        elif outcome.result is Filtered.UNSCHEDULABLE and decision is not None:
            self._failed_events(pod, decision, len(outcome.candidates))
            if outcome.gang_released:
                self._gang_released(pod.metadata.namespace, pod_group(pod), outcome.gang_released, pod)
            if outcome.preemption is not None:
                self._preempted(pod, outcome.preemption)
        elif outcome.result is Filtered.SCHEDULED and decision is not None and self.success_events:
            self._event(pod, SUCCEED, decision.message)
            if decision.rejected:
                self._event(pod, EventReason.FILTERED_NODES, _rejection_text(decision))

    def _gang_released(self, namespace: str, group: str, released: Sequence[str], failing: Pod | None) -> None:
        """Metrics, log line and events of gang members whose unbound allocations were dropped: because
        ``failing`` fits nowhere, or (None) because the gang's PodGroup says it failed."""
        trigger = "member-unschedulable" if failing is not None else "podgroup-failed"
        self.metrics.gang_releases.labels(trigger).inc(len(released))
        why = f"member {failing.metadata.name} fits nowhere" if failing is not None else "its PodGroup failed"
        log.info("gang %s/%s: %s; released the unbound allocations of %s", namespace, group, why, ", ".join(released))
        if failing is not None:
            text = f"gang {group}: this member fits nowhere; released the unbound allocations of {', '.join(released)}"
            self._event(failing, EventReason.GANG_WAITING, f"{text}: the gang waits until all of it fits")
        for name in released:
            member = self.cluster.watched_pod(namespace, name)
            if member is not None:
                text = f"gang {group}: {why}; this member's allocation was released: it waits until the whole gang fits"
                self._event(member, EventReason.GANG_WAITING, text)

    def on_pod_group(
        self, namespace: str, name: str, min_count: int | None, failed: bool, deleted: bool = False
    ) -> None:
        """Apply one PodGroup event (the shell's PodGroup watch): the gang's minimum, and when its condition newly
        says the group could not be placed, its members' unbound allocations are released in the background."""
        if self.cycle.gangs.group_event(namespace, name, min_count, failed, deleted):
            task = asyncio.get_running_loop().create_task(self._release_failed_gang(namespace, name))
            self._gang_tasks.add(task)
            task.add_done_callback(self._gang_tasks.discard)

    async def _release_failed_gang(self, namespace: str, group: str) -> None:
        released, failures = await self.cycle.release_gang(namespace, group)
        self._api_errors(failures)
        if released:
            self._gang_released(namespace, group, released, None)

    def _preempted(self, pod: Pod, note: PreemptionNote) -> None:
        """Metrics, log line and event of hami's own preemption for ``pod`` (a standing hold counts no attempt)."""
        if note.result is Preempting.WAITING:
            return
        self.metrics.preemption_attempts.labels(note.result.value).inc()
        if note.evicted:
            self.metrics.preemption_victims.inc(note.evicted)
        if note.result is Preempting.PREEMPTED:
            log.info("preemption for %s: %s", pod.key, note.message)
            self._event(pod, EventReason.PREEMPTING, note.message)

    def _api_errors(self, failures: Iterable[ApiFailure]) -> None:
        for failure in failures:
            self.metrics.api_errors.labels(failure.operation).inc()
            if failure.log:
                log.warning("%s", failure.log)

    def _event(self, pod: Pod, reason: EventReason, message: str) -> None:
        self.cluster.event(pod, reason.type, reason, message)

    def _failed_events(self, pod: Pod, decision: Decision, total: int) -> None:
        by_reason: dict[Reason, list[str]] = {}
        for node, rejection in decision.rejected.items():
            # Beyond HAMi: bare reasons (NodeInsufficientDevice, unregistered nodes) get their event too; a node
            # whose registration was refused (quarantined) did register, with something hami cannot decode.
            for reason in rejection.counts or (rejection.node_reason or Reason.NODE_UNREGISTERED,):
                by_reason.setdefault(reason, []).append(node)
        for text in filtering_failed_texts(by_reason):
            self._event(pod, FAILED, text)
        self._event(pod, FAILED, no_available_node_text(total))
        if decision.rejected:
            self._event(pod, FAILED, _rejection_text(decision))

    # --- /preempt (kube-scheduler 1.38+) ---------------------------------------------------------------------
    async def preempt(self, args: PreemptionArgs) -> PreemptionResult | str:
        """hami's victims per candidate node (``hami.scheduling.preemptverb``), or why hami cannot answer now
        (not synced, not the leader: the caller answers 503 and kube-scheduler retries the pod later). A pod
        that cannot be read raises ``InvalidInput``. The PodDisruptionBudgets are read as hami's own preemption
        reads them (a failed read answers without). Nothing is reserved or written: kube-scheduler evicts."""
        started = time.perf_counter()
        try:
            problem = self.readiness.problem()
            if problem is not None:
                return problem
            req = prefilter(args.pod, self.vendors, self.defaults)
            budgets: Sequence[Budget] = ()
            if req.wants_devices and req.preempts:
                budgets, failures = await read_budgets(self.state, self.cluster, args.victims)
                self._api_errors(failures)
            answer = answer_preempt_verb(self.state, req, args.victims, args.violations, budgets)
            _log_preempt(args.pod, answer)
            return PreemptionResult(
                {
                    node: MetaVictims([MetaPod(uid) for uid in uids], answer.violations.get(node, 0))
                    for node, uids in answer.victims.items()
                }
            )
        finally:
            self.metrics.latency.labels("preempt").observe(time.perf_counter() - started)

    # --- /prioritize (DRA mode, issue 38) --------------------------------------------------------------------
    def prioritize(self, args: FilterArgs) -> list[HostPriority]:
        """hami's node policy as scores for a DRA-mode pod (``hami.scheduling.dra.policy``): 0 everywhere for any
        other pod, for a pod whose demand cannot be read (logged) and while the caches are not synced. Reads the
        ledger, writes nothing: kube-scheduler allocates the claims and binds."""
        started = time.perf_counter()
        try:
            candidates = args.candidate_names()
            if self.readiness.ready_problem() is not None:
                return [HostPriority(n, 0) for n in candidates]
            ranking = prioritize(self.dra, args.pod, candidates, self.defaults.node_policy)
            if ranking.problem is not None:
                log.warning("/prioritize %s: %s", args.pod.key, ranking.problem)
            elif ranking.policy:
                log.debug("/prioritize %s (%s): %s", args.pod.key, ranking.policy, ranking.scores)
            return [HostPriority(n, ranking.scores[n]) for n in candidates]
        finally:
            self.metrics.latency.labels("prioritize").observe(time.perf_counter() - started)

    # --- /bind ---------------------------------------------------------------------------------------------
    async def bind(self, args: BindingArgs) -> BindingResult:
        """/bind (``hami.scheduling.bind``). While it runs, and after it took the node's lock until the node watch
        shows that lock, the node counts as busy for /filter (``busy``: a node takes one pod per lock hand-over)."""
        started = time.perf_counter()
        ns, name, node = args.podnamespace, args.podname, args.node
        self.busy.bind_started(node, ns, name, bind_lock_keys(self.cycle, ns, name, args.poduid))
        locked = False
        try:
            outcome = await self.cycle.bind(ns, name, args.poduid, node)
            locked = outcome.result is Bound.BOUND
            self._bound(outcome)
            ok = outcome.result in (Bound.BOUND, Bound.ALREADY_BOUND)
            return BindingResult() if ok else BindingResult(error=outcome.message)
        finally:
            self.busy.bind_ended(node, ns, name, locked)
            self.metrics.latency.labels("bind").observe(time.perf_counter() - started)

    def _bound(self, outcome: BindOutcome) -> None:
        """Metrics, log lines and events of one /bind outcome. A refused bind gets no event: the pod it names may
        not be the one kube-scheduler means (kube-scheduler records the answer on its own pod)."""
        self.metrics.binds.labels(_BIND_LABELS.get(outcome.result, outcome.result.value)).inc()
        self._api_errors(outcome.api_errors)
        if outcome.result is Bound.REFUSED:
            log.warning("/bind %s", outcome.message)
        elif outcome.result is Bound.BOUND:
            if self.success_events:
                self._event(outcome.pod, EventReason.BINDING_SUCCEED, outcome.message)
        elif outcome.result not in _NO_BIND_EVENT:
            log.info("/bind %s", outcome.message)  # also when the event cannot be written (API down)
            self._event(outcome.pod, EventReason.BINDING_FAILED, outcome.message)

    # --- watch handlers ------------------------------------------------------------------------------------
    def on_pod(self, pod: Pod, deleted: bool = False) -> None:
        """Apply one pod event to the ledger (O(pod))."""
        problem = self.cycle.watch_pod(pod, deleted)
        if problem is not None:
            log.warning("%s", problem)
        meta = pod.metadata
        _log_dra(self.dra.pod_event(meta.namespace, meta.name, meta.uid, deleted))

    def on_node(self, node: Node, deleted: bool = False) -> None:
        """Apply one node event to the state. An event that changes nothing the state reads (a node lock taken or
        released: two events per scheduled pod) is skipped: no registration decoded again, no tables rebuilt,
        and the node's verdicts stay in the memo. A lock it shows held by a pod whose bind marked the node busy
        ends that mark (``BusyNodes.node_seen``): the watched lock counts from then on. A node whose kubelet reports
        the registered devices again (``NodeState.unallocatable`` shrank) counts as capacity freed."""
        name = node.metadata.name
        if deleted:
            self.busy.node_gone(name)
            self._node_inputs.pop(name, None)
            self.state.remove_node(name)
            _log_dra(self.dra.node_event(name))
            return
        self.busy.node_seen(node)  # the locks this process's binds took, now shown by the watch
        inputs = self._inputs_of(node)
        if name in self.state.nodes and self._node_inputs.get(name) == inputs:
            return
        self._node_inputs[name] = inputs
        before = self.state.nodes.get(name)
        held_back = set(before.unallocatable) if before is not None else set()
        after = self.state.upsert_node(node)
        _log_dra(self.dra.node_event(name))
        if held_back - after.unallocatable.keys():
            # kubelet reports the devices again: the pods turned down meanwhile are retried now (the status update
            # that says so may have reached kube-scheduler before this handler)
            self.freed(name)

    def _inputs_of(self, node: Node) -> tuple[object, ...]:
        """Everything of ``node`` that ``ClusterState.upsert_node`` (and the vendors' decoders) can read: the
        decoded view holds labels, annotations, ``spec`` and ``status`` only; the lock annotations and the requeue
        nudge are left out.
        Copies, so a view changed in place later still compares unequal."""
        meta, status = node.metadata, node.status
        annotations = {k: v for k, v in meta.annotations.items() if k not in self._unread_keys}
        return dict(meta.labels), annotations, node.spec.unschedulable, dict(status.capacity), dict(status.allocatable)

    def on_quota(self, quota: ResourceQuota, deleted: bool = False) -> None:
        if deleted:
            self.state.remove_quota(quota.metadata.namespace, quota.metadata.name)
            return
        for problem in self.state.upsert_quota(quota):
            log.warning("%s", problem)

    # --- DRA (issue 18): read-only towards DRA; the shell logs, counts and records the problems returned ----------
    def on_resource_slice(self, obj: ResourceSlice, deleted: bool = False) -> list[DraProblem]:
        """Apply a ResourceSlice event; returns the problems it newly raised."""
        return self.dra.slice_event(obj, deleted)

    def on_resource_claim(self, obj: ResourceClaim, deleted: bool = False) -> list[DraProblem]:
        """Apply a ResourceClaim event; returns the problems it newly raised."""
        return self.dra.claim_event(obj, deleted)

    def on_device_class(self, obj: DeviceClass, deleted: bool = False) -> list[DraProblem]:
        """Apply a DeviceClass event (its warning, if any, shows in ``dra_warnings()``); raises no problem."""
        return self.dra.class_event(obj, deleted)

    def dra_problems(self) -> tuple[DraProblem, ...]:
        """The current DRA problems. Claims reserved for pods no pod event has named are looked at again first
        (the pod watch's store knows them once synced); problems that raises are logged here."""
        _log_dra(self.dra.recheck())
        return self.dra.problems()

    def dra_warnings(self) -> tuple[DraWarning, ...]:
        """The current DRA warnings (configuration traps)."""
        return self.dra.warnings()

    def _synced(self) -> bool:
        return self.readiness.synced()

    def _live_pod_uid(self, namespace: str, name: str) -> str | None:
        pod = self.cluster.watched_pod(namespace, name)
        return pod.metadata.uid if pod is not None else None


_BIND_LABELS = {
    Bound.COMMIT_FAILED: "failed",
    Bound.RESERVED_ELSEWHERE: "failed",
    Bound.READ_FAILED: "error",
}
"""``hami_bind_results`` labels where they are not the outcome's own name."""

_NO_BIND_EVENT = frozenset({Bound.REFUSED, Bound.POD_MISSING, Bound.READ_FAILED, Bound.ALREADY_BOUND})


def _filter_answer(outcome: FilterOutcome, args: FilterArgs) -> FilterResult:
    decision = outcome.decision
    if outcome.result is Filtered.PASSTHROUGH:
        names = list(outcome.candidates)
        return FilterResult(node_names=names, nodes=args.nodes_raw(names) if args.nodes is not None else None)
    if outcome.error or decision is None:
        return FilterResult(error=outcome.error)
    failed = {n: r.summary for n, r in decision.rejected.items() if not r.unresolvable}
    never = {n: r.summary for n, r in decision.rejected.items() if r.unresolvable}
    chosen = decision.node
    if chosen is None:
        note = outcome.preemption
        if note is not None and note.node in outcome.candidates:
            failed[note.node] = note.message  # the victims terminate there; the room is held for this pod
        return FilterResult(failed_nodes=failed or None, failed_and_unresolvable_nodes=never or None)
    # One shared text for every node that fits but was not chosen (the scores are in the FilteringSucceed event).
    policy = decision.node_policy or "configured"
    not_chosen = f"fits, but hami chose {chosen} under the {policy} node policy"
    for name in decision.scores:
        if name != chosen:
            failed[name] = not_chosen
    passed = (
        f"fits, ranks before {chosen} under the {policy} node policy, "
        "but a bind in progress on it holds or is about to take its node lock"
    )
    for name in decision.passed_over:
        failed[name] = passed
    return FilterResult(
        node_names=[chosen],
        nodes=args.nodes_raw([chosen]) if args.nodes is not None else None,
        failed_nodes=failed or None,
        failed_and_unresolvable_nodes=never or None,
    )


def _log_preempt(pod: Pod, answer: VerbAnswer) -> None:
    kept = [f"{node} ({len(uids)} victims)" for node, uids in answer.victims.items()]
    left = [f"{node}: {why}" for node, why in sorted(answer.refused.items())]
    log.info("/preempt %s: candidates %s; left out %s", pod.key, ", ".join(kept) or "none", "; ".join(left) or "none")


def _log_dra(problems: Iterable[DraProblem]) -> None:
    for p in problems:
        log.warning("DRA %s: %s%s: %s", p.kind, p.object, f" on {p.node}" if p.node else "", p.message)


def _rejection_text(decision: Decision) -> str:
    parts = [f"{node}: {r.summary}" for node, r in sorted(decision.rejected.items())]
    return "nodes not chosen: " + "; ".join(parts)
