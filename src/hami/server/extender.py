"""The scheduler extender: ``/filter`` and ``/bind`` as named stages around the pure core.

``filter`` = prefilter → identity → (evict the pod's stale reservation) → decide → reserve → commit (annotation
patch) → answer; a failed commit runs ``unreserve``. ``bind`` = identity → node lock → bind phase → Binding; any
failure releases the lock and the reservation. Watch handlers keep ``ClusterState`` current, one event at a time.

Identity: every pod write carries the pod's UID as a precondition, and a write that replaces or removes an
allocation also the resourceVersion it was decided on. /filter refuses a body whose UID is not the watched pod's
of that name, and a pod already bound, running or finished; /bind requires ``PodUID`` and refuses one that is
not the pod's — all before anything is reserved, locked or written.

Concurrency: ``decide`` and ``reserve`` run back to back without an ``await`` between them, so two concurrent
``/filter`` calls can never be handed the same capacity: the second one sees the first one's reservation.
A reservation whose annotations have not yet come back through the pod watch is *pending*; a watch event that
does not carry them yet (an older version of the pod) does not drop it.

Deliberate differences from HAMi (webhook-bind-plugin-vendors.md §11): answers list every other candidate in
``FailedNodes`` (with its reasons, also when some node fits) and nodes that could not run the pod even empty in
``FailedAndUnresolvableNodes``; a pod whose only GPU user is an init container still takes the node lock; a
follower answers at once instead of blocking; a failed bind releases the reservation and the annotations.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hami.devices.base import Vendor
from hami.errors import ApiError, Conflict, HamiError, InvalidInput, LockContention, NotFound
from hami.protocol import keys
from hami.protocol.events import binding_succeed_text, filtering_failed_texts, no_available_node_text
from hami.protocol.extender import BindingArgs, BindingResult, FilterArgs, FilterResult
from hami.protocol.objects import Node, ObjectMeta, Pod, ResourceQuota
from hami.protocol.reasons import Reason
from hami.scheduling.cycle import Decision, decide, reserve, unreserve
from hami.scheduling.records import holds_devices, is_terminal, pod_group, record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState, PodRecord
from hami.server.metrics import Metrics

__all__ = ["Extender", "ExtenderCluster", "Readiness"]

log = logging.getLogger("hami.extender")

WARNING = "Warning"
NORMAL = "Normal"


class ExtenderCluster(Protocol):
    """The Kubernetes calls the extender makes (implemented by ``hami.k8s``)."""

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

    async def get_pod(self, namespace: str, name: str) -> Pod: ...

    def watched_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod of that name as the pod watch last saw it, or ``None`` if the watch has not seen it (yet)."""

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def lock_node(self, node: str, namespace: str, name: str) -> None:
        """Take the node lock for a pod (re-entrant for the same pod); raises ``ApiError`` on contention."""

    async def unlock_node(self, node: str, namespace: str, name: str) -> None:
        """Release the node lock if (and only if) this pod holds it."""

    def event(self, pod: Pod, type: str, reason: str, message: str) -> None:
        """Record an event on the pod (fire and forget; never raises)."""


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


@dataclass(slots=True)
class Extender:
    """State plus the stages; one instance per process."""

    state: ClusterState
    vendors: Mapping[str, Vendor]
    defaults: SchedulingDefaults
    cluster: ExtenderCluster
    metrics: Metrics
    readiness: Readiness = field(default_factory=Readiness)
    clock: Callable[[], float] = time.time
    pending: set[str] = field(default_factory=set)
    background_commit: bool = True
    commits: dict[str, asyncio.Task[str | None]] = field(default_factory=dict)
    cleanups: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Allocation clean-ups that failed once (429 storm, API down) and are being retried, by pod UID."""
    cleanup_backoff: tuple[float, float] = (0.5, 30.0)
    """First and longest wait between the retries of a clean-up."""
    lock_retry_timeout: float = 0.0
    """``--node-lock-retry-timeout``: how long the bind of a PodGroup member waits for a locked node (0: not)."""
    lock_retry_interval: float = 0.1
    """Pause between two tries of such a wait (HAMi's 100 ms)."""

    # --- /filter -------------------------------------------------------------------------------------
    async def filter(self, args: FilterArgs) -> FilterResult:
        started = time.perf_counter()
        try:
            return await self._filter(args)
        finally:
            self.metrics.latency.labels("filter").observe(time.perf_counter() - started)

    async def _filter(self, args: FilterArgs) -> FilterResult:
        pod = args.pod
        candidates = args.candidate_names()
        try:
            req = prefilter(pod, self.vendors, self.defaults)
        except InvalidInput as err:
            self.metrics.decisions.labels("invalid").inc()
            self.cluster.event(pod, WARNING, "FilteringFailed", str(err))
            return FilterResult(error=str(err))
        if not req.wants_devices:
            self.metrics.decisions.labels("passthrough").inc()
            return FilterResult(
                node_names=candidates, nodes=args.nodes_raw(candidates) if args.nodes is not None else None
            )
        problem = self.readiness.problem()
        if problem is not None:
            self.metrics.decisions.labels("not-ready").inc()
            return FilterResult(error=problem)
        # Identity first, before anything is forgotten, reserved or written: the body may be stale (a pod deleted
        # and re-created under the same name) or forged, and the pod may already be bound or running.
        watched = self.cluster.watched_pod(pod.metadata.namespace, pod.metadata.name)
        refusal = _filter_refusal(pod, watched, self.state.pods.get(req.uid))
        if refusal is not None:
            self.metrics.decisions.labels("refused").inc()
            log.warning("/filter refused: %s", refusal)
            return FilterResult(error=refusal)
        guard = _replace_guard(pod, watched)
        # A pod filtered again (bind failed, or kube-scheduler retried) must not count its old reservation;
        # an earlier commit still in flight finishes first, so patches of one pod never overtake each other.
        self._cancel_cleanup(req.uid)
        await self._settle(req.uid)
        self._forget(req.uid)
        t0 = time.perf_counter()
        decision = decide(self.state, req, candidates, int(self.clock()))
        self.metrics.stage_latency.labels("decide").observe(time.perf_counter() - t0)
        if decision.node is None:
            self.metrics.decisions.labels("unschedulable").inc()
            self._failed_events(pod, decision, len(candidates))
            if holds_devices(pod) or (watched is not None and holds_devices(watched)):
                # The allocation of an earlier /filter whose bind never came (the pod is unbound, or it would
                # not be filtered): left on the pod, the next watch event would charge it again and hold the
                # devices while the pod stays pending (found by the extender tests). HAMi leaves it too.
                await self._release_allocation(pod, req.uid, guard)
            return self._failure_result(decision)
        reserve(self.state, req, decision)
        self.pending.add(req.uid)
        if self.background_commit:
            # kube-scheduler's scheduling cycle is serial and waits for this answer, so the annotation PATCH
            # runs beside it; /bind waits for it before binding (the device plugin reads the annotations only
            # after the pod is bound). A failed commit rolls the reservation back and fails that bind.
            task = asyncio.get_running_loop().create_task(self._commit(pod, req.uid, decision, guard))
            self.commits[req.uid] = task
        else:
            message = await self._commit(pod, req.uid, decision, guard)
            if message is not None:
                return FilterResult(error=message)
        self.metrics.decisions.labels("scheduled").inc()
        self.cluster.event(pod, NORMAL, "FilteringSucceed", decision.message)
        if decision.rejected:
            self.cluster.event(pod, NORMAL, "FilteredNodes", _rejection_text(decision))
        return self._success_result(decision, candidates, args)

    async def _commit(self, pod: Pod, uid: str, decision: Decision, guard: str | None) -> str | None:
        """Write the allocation annotations; on failure undo the reservation. Returns the error text or None.

        The PATCH carries the pod's UID, so it never lands on another pod of the same name (deleted and
        re-created since the body was read); ``guard`` (the resourceVersion the pod was read at, when an earlier
        allocation is being replaced) makes it land only on that version of the pod.
        """
        t1 = time.perf_counter()
        try:
            await self.cluster.patch_pod_metadata(
                pod.metadata.namespace,
                pod.metadata.name,
                _with_bind_phase(decision),
                {keys.VGPU_NODE: decision.node},
                uid=uid,
                resource_version=guard,
            )
        except ApiError as err:
            if self.state.pods.get(uid) is not None and self.state.pods[uid].node == decision.node:
                self._forget(uid)
            if _pod_gone(err) and self.commits.get(uid) is asyncio.current_task():
                # No pod with this UID exists any more, so no /bind for it can succeed: keeping the failed task
                # for one would keep it for ever (a stale body sent again and again). /bind then finds the pod
                # missing or of another UID and refuses on its own.
                del self.commits[uid]
            self.metrics.api_errors.labels("patch_pod").inc()
            self.metrics.decisions.labels("commit-failed").inc()
            message = f"writing the allocation annotations failed: {err}"
            self.cluster.event(pod, WARNING, "FilteringFailed", message)
            return message
        finally:
            self.metrics.stage_latency.labels("commit").observe(time.perf_counter() - t1)
        return None

    async def _settle(self, uid: str) -> str | None:
        """Wait for the pod's commit still in flight, if any; returns its error text or None."""
        task = self.commits.pop(uid, None)
        if task is None:
            return None
        return await task

    async def settle_all(self) -> None:
        """Wait for every commit in flight (shutdown, tests); stop the clean-up retries (a restarted hami charges
        what the pods carry, and kube-scheduler's next /filter of such a pod replaces or clears it)."""
        while self.commits:
            await self._settle(next(iter(self.commits)))
        for uid in list(self.cleanups):
            self._cancel_cleanup(uid)

    def _forget(self, uid: str) -> None:
        self.pending.discard(uid)
        unreserve(self.state, uid)

    def _failure_result(self, decision: Decision) -> FilterResult:
        failed = {n: r.summary for n, r in decision.rejected.items() if not r.unresolvable}
        never = {n: r.summary for n, r in decision.rejected.items() if r.unresolvable}
        return FilterResult(failed_nodes=failed or None, failed_and_unresolvable_nodes=never or None)

    def _success_result(self, decision: Decision, candidates: Sequence[str], args: FilterArgs) -> FilterResult:
        chosen = decision.node
        assert chosen is not None
        failed = {n: r.summary for n, r in decision.rejected.items() if not r.unresolvable}
        # One shared text for every node that fits but was not chosen (the scores are in the FilteringSucceed event).
        not_chosen = f"fits, but hami chose {chosen} under the {decision_policy(decision)} node policy"
        for name in decision.scores:
            if name != chosen:
                failed[name] = not_chosen
        never = {n: r.summary for n, r in decision.rejected.items() if r.unresolvable}
        return FilterResult(
            node_names=[chosen],
            nodes=args.nodes_raw([chosen]) if args.nodes is not None else None,
            failed_nodes=failed or None,
            failed_and_unresolvable_nodes=never or None,
        )

    def _failed_events(self, pod: Pod, decision: Decision, total: int) -> None:
        by_reason: dict[Reason, list[str]] = {}
        for node, rejection in decision.rejected.items():
            # Beyond HAMi: bare reasons (NodeInsufficientDevice, unregistered nodes) get their event too.
            # A node whose registration was refused (quarantined) is not "unregistered": its device plugin did
            # register, with something hami cannot decode; say so (found by the extender tests).
            state = self.state.nodes.get(node)
            bare = Reason.NODE_QUARANTINED if state is not None and state.problems else Reason.NODE_UNREGISTERED
            for reason in rejection.counts or (bare,):
                by_reason.setdefault(reason, []).append(node)
        for text in filtering_failed_texts(by_reason):
            self.cluster.event(pod, WARNING, "FilteringFailed", text)
        self.cluster.event(pod, WARNING, "FilteringFailed", no_available_node_text(total))
        if decision.rejected:
            self.cluster.event(pod, WARNING, "FilteringFailed", _rejection_text(decision))

    # --- /bind ---------------------------------------------------------------------------------------
    async def bind(self, args: BindingArgs) -> BindingResult:
        started = time.perf_counter()
        try:
            return await self._bind(args)
        finally:
            self.metrics.latency.labels("bind").observe(time.perf_counter() - started)

    async def _bind(self, args: BindingArgs) -> BindingResult:
        ns, name, node, uid = args.podnamespace, args.podname, args.node, args.poduid
        if not uid:
            # kube-scheduler always sends the UID; without it a request could name whichever pod has that name.
            return self._refuse_bind(
                ns, name, node, "ExtenderBindingArgs.PodUID is empty; hami binds a pod only by its UID"
            )
        named = Pod(metadata=ObjectMeta(name=name, namespace=ns, uid=uid))
        failed_commit = await self._settle(uid)
        if failed_commit is not None:
            # its /filter's annotation PATCH failed and rolled the reservation back (also when the pod of that
            # name turned out to be another one: the PATCH carries the UID)
            self.metrics.binds.labels("failed").inc()
            message = f"binding {ns}/{name} to {node} failed: {failed_commit}"
            self.cluster.event(named, WARNING, "BindingFailed", message)
            return BindingResult(error=message)
        record = self.state.pods.get(uid)
        if record is not None and (record.namespace, record.name) != (ns, name):
            return self._refuse_bind(ns, name, node, f"UID {uid} belongs to pod {record.namespace}/{record.name}")
        watched = self.cluster.watched_pod(ns, name)
        if record is not None:
            # Reserved by our own /filter: no need to read the pod back (one API call less per bind).
            pod = watched or named
            wants_devices = True
        elif watched is not None and watched.metadata.uid != uid:
            pod, wants_devices = watched, False  # refused below without an API call
        else:
            try:
                pod = await self.cluster.get_pod(ns, name)
            except NotFound as err:
                self.metrics.binds.labels("pod-missing").inc()
                return BindingResult(error=str(err))
            except ApiError as err:
                self.metrics.api_errors.labels("get_pod").inc()
                self.metrics.binds.labels("error").inc()
                return BindingResult(error=str(err))
            wants_devices = False  # decided below, once the pod is known to be the one asked for
        refusal = _bind_refusal(pod, uid, node)
        if refusal is not None:
            if refusal == _ALREADY_BOUND:
                # kube-scheduler repeats a bind whose answer it did not get: the pod runs there with its
                # allocation; nothing is locked, written or released in its name.
                self.metrics.binds.labels("already-bound").inc()
                return BindingResult()
            return self._refuse_bind(ns, name, node, refusal)
        if record is None:
            try:
                wants_devices = prefilter(pod, self.vendors, self.defaults).wants_devices
            except InvalidInput as err:
                self.metrics.binds.labels("invalid").inc()
                self.cluster.event(pod, WARNING, "BindingFailed", str(err))
                return BindingResult(error=str(err))
        if record is not None and record.node != node:
            message = f"binding {ns}/{name} to {node} refused: hami reserved its devices on {record.node}"
            self.metrics.binds.labels("failed").inc()
            self.cluster.event(pod, WARNING, "BindingFailed", message)
            return BindingResult(error=message)
        if record is None and wants_devices and pod.metadata.annotations.get(keys.VGPU_NODE) != node:
            # /filter answers before its annotation PATCH lands; if the process dies in between, the next one
            # gets the /bind of a pod that has no allocation (or one on another node). Binding it would start a
            # GPU pod that no device plugin can serve; refusing makes kube-scheduler filter it again. (HAMi
            # patches before answering, so it never meets this.) Found by the extender tests.
            message = (
                f"binding {ns}/{name} to {node} refused: hami holds no device allocation for it on {node} "
                "(kube-scheduler will filter it again)"
            )
            self.metrics.binds.labels("no-allocation").inc()
            self.cluster.event(pod, WARNING, "BindingFailed", message)
            return BindingResult(error=message)
        locked = False
        try:
            if wants_devices:
                await self._lock(node, pod)
                locked = True
                if record is None:  # not committed by this process: mark the bind phase now, as HAMi does
                    # on the version just read (unbound, allocated on this node): replaced only if still so
                    now = str(int(self.clock()))
                    await self.cluster.patch_pod_metadata(
                        ns,
                        name,
                        {keys.BIND_PHASE: "allocating", keys.BIND_TIME: now},
                        uid=uid,
                        resource_version=pod.metadata.resource_version or None,
                    )
            await self.cluster.bind(ns, name, uid, node)
        except HamiError as err:
            fresh = await self._fresh(ns, name)
            if fresh is not None and fresh.metadata.uid == uid and fresh.spec.node_name == node:
                # kube-scheduler retried a bind that had gone through (its request timed out): the pod runs
                # there with its allocation, so releasing anything now would free devices still in use.
                if locked and fresh.metadata.annotations.get(keys.BIND_PHASE) in ("success", "failed"):
                    await self._unlock(node, ns, name, "a repeated bind")
                self.metrics.binds.labels("already-bound").inc()
                return BindingResult()
            message = f"binding {ns}/{name} to {node} failed: {err}"
            if locked:
                await self._unlock(node, ns, name, "a failed bind")
            if fresh is not None and fresh.metadata.uid == uid and fresh.spec.node_name:
                self._forget(uid)  # bound elsewhere meanwhile: its annotations are not ours to remove
            else:
                guard = fresh.metadata.resource_version if fresh is not None and fresh.metadata.uid == uid else None
                await self._release_allocation(pod, uid, guard or None)
            self.metrics.binds.labels("failed").inc()
            self.cluster.event(pod, WARNING, "BindingFailed", message)
            return BindingResult(error=message)
        self.metrics.binds.labels("bound").inc()
        self.cluster.event(pod, NORMAL, "BindingSucceed", binding_succeed_text(node, ns, name))
        return BindingResult()

    async def _lock(self, node: str, pod: Pod) -> None:
        """Take the node lock for ``pod``. A PodGroup member that finds the node locked tries again every
        ``lock_retry_interval`` for up to ``lock_retry_timeout`` (its group's other members are being bound one
        after the other and each holds the lock until its device plugin allocates), as HAMi v2.10 does; any
        other pod, or any other failure, fails at once."""
        ns, name = pod.metadata.namespace, pod.metadata.name
        waits = self.lock_retry_timeout > 0 and bool(pod_group(pod))
        deadline = time.monotonic() + self.lock_retry_timeout
        while True:
            try:
                await self.cluster.lock_node(node, ns, name)
                return
            except LockContention as err:
                if not waits:
                    raise
                if time.monotonic() + self.lock_retry_interval > deadline:
                    waited = self.lock_retry_timeout
                    raise LockContention(err.node, err.holder, err.since, err.timeout, waited=waited) from None
            await asyncio.sleep(self.lock_retry_interval)

    def _refuse_bind(self, ns: str, name: str, node: str, reason: str) -> BindingResult:
        """A /bind that names no pod, another pod, or a pod that may not be bound: refused before anything is
        locked or written (no event: the pod it names may not be the one kube-scheduler means; kube-scheduler
        records the answer on its own pod)."""
        message = f"binding {ns}/{name} to {node} refused: {reason}"
        self.metrics.binds.labels("refused").inc()
        log.warning("/bind %s", message)
        return BindingResult(error=message)

    async def _fresh(self, ns: str, name: str) -> Pod | None:
        """The pod as the API holds it now, or ``None`` if it cannot be read."""
        try:
            return await self.cluster.get_pod(ns, name)
        except ApiError:
            return None

    async def _unlock(self, node: str, ns: str, name: str, after: str) -> None:
        try:
            await self.cluster.unlock_node(node, ns, name)
        except ApiError as err:
            self.metrics.api_errors.labels("unlock_node").inc()
            log.warning("releasing the lock on %s after %s failed: %s", node, after, err)

    async def _release_allocation(self, pod: Pod, uid: str, guard: str | None = None) -> None:
        """After a failed bind: remove the annotations that hold the pod's devices, then the reservation.

        The removal is written only to the pod with ``uid`` and, with ``guard``, only to that resourceVersion of
        it (the version read when deciding it holds no devices in use). The reservation is dropped once the
        annotations are gone, so the ledger never frees what the API still shows allocated; if the write fails
        (throttled, API down, the pod changed meanwhile) it is retried in the background until it lands or is no
        longer needed (see :meth:`_clear_until_done`)."""
        self._cancel_cleanup(uid)
        try:
            await self._clear(pod.metadata.namespace, pod.metadata.name, uid, guard)
        except ApiError as err:
            if _pod_gone(err):
                self._forget(uid)
                return
            self.metrics.api_errors.labels("patch_pod").inc()
            log.warning("clearing the allocation of %s after a failed bind failed: %s; retrying", pod.key, err)
            task = asyncio.get_running_loop().create_task(
                self._clear_until_done(pod.metadata.namespace, pod.metadata.name, uid), name=f"clear-{uid}"
            )
            self.cleanups[uid] = task
            task.add_done_callback(lambda done: self._cleanup_done(uid, done))
            return
        self._forget(uid)

    async def _clear(self, namespace: str, name: str, uid: str, guard: str | None) -> None:
        removals: dict[str, str | None] = {
            keys.VGPU_NODE: None,
            keys.VGPU_TIME: None,
            keys.BIND_PHASE: None,
            keys.BIND_TIME: None,
        }
        for vendor in self.vendors.values():
            removals[vendor.keys.allocated] = None
            if vendor.keys.to_allocate:
                removals[vendor.keys.to_allocate] = None
        removals[keys.NVIDIA_MIG_ALLOCATIONS] = None
        await self.cluster.patch_pod_metadata(
            namespace, name, removals, {keys.VGPU_NODE: None}, uid=uid, resource_version=guard
        )

    async def _clear_until_done(self, namespace: str, name: str, uid: str) -> None:
        """Retry a clean-up with backoff until it lands or is moot: each round reads the pod and removes its
        allocation only from the version read, only while it is still unbound and still the pod ``uid``."""
        delay, longest = self.cleanup_backoff
        while True:
            await asyncio.sleep(delay)
            delay = min(longest, delay * 2)
            try:
                pod = await self.cluster.get_pod(namespace, name)
            except NotFound:
                self._forget(uid)
                return
            except ApiError as err:
                log.info("clean-up of %s/%s: reading the pod failed: %s; retrying", namespace, name, err)
                continue
            if pod.metadata.uid != uid:
                self._forget(uid)
                return
            if pod.spec.node_name or not holds_devices(pod):
                return  # bound meanwhile (the allocation is in use) or nothing left: the watch keeps the ledger
            try:
                await self._clear(namespace, name, uid, pod.metadata.resource_version or None)
            except ApiError as err:
                if _pod_gone(err):
                    self._forget(uid)
                    return
                log.info("clean-up of %s/%s failed: %s; retrying", namespace, name, err)
                continue
            self.metrics.decisions.labels("cleanup-retried").inc()
            log.info("clean-up of %s/%s landed after retries", namespace, name)
            self._forget(uid)
            return

    def _cancel_cleanup(self, uid: str) -> None:
        task = self.cleanups.pop(uid, None)
        if task is not None:
            task.cancel()

    def _cleanup_done(self, uid: str, task: asyncio.Task[None]) -> None:
        if self.cleanups.get(uid) is task:
            del self.cleanups[uid]
        if not task.cancelled() and task.exception() is not None:
            log.error("clean-up of pod UID %s failed: %r", uid, task.exception())

    # --- watch handlers ------------------------------------------------------------------------------
    def on_pod(self, pod: Pod, deleted: bool = False) -> None:
        """Apply one pod event to the ledger (O(pod))."""
        uid = pod.metadata.uid
        if deleted or is_terminal(pod):
            self.pending.discard(uid)
            # A pod gone between /filter and /bind would keep its commit task here for ever (found by the
            # extender tests); its PATCH, if still in flight, fails on the deleted pod and rolls nothing back
            # that is still held.
            self.commits.pop(uid, None)
            self._cancel_cleanup(uid)
            unreserve(self.state, uid)
            return
        if not holds_devices(pod):
            if uid not in self.pending:
                unreserve(self.state, uid)
            return
        record = record_from_pod(pod, self.vendors)
        if record is None:
            return
        if record.problem:
            log.warning("pod %s: allocation annotations not fully decodable: %s", record.key, record.problem)
        current = self.state.pods.get(uid)
        if current is not None and _same(current, record):
            self.pending.discard(uid)
            return
        if current is not None and uid in self.pending:
            # An older version of the pod (the watch lags behind our patch); our newer reservation stays until
            # the version carrying it arrives. This used to be done only when the node differed: a late
            # version on the same node with other devices replaced the reservation, freed its devices for the
            # next pod, and the reservation came back on top of that pod — two pods on one card's memory
            # (found by test_a_late_watch_event_never_frees_a_pending_reservation).
            return
        self.pending.discard(uid)
        unreserve(self.state, uid)
        self.state.apply(record, add=True)

    def on_node(self, node: Node, deleted: bool = False) -> None:
        if deleted:
            self.state.remove_node(node.metadata.name)
            return
        self.state.upsert_node(node)

    def on_quota(self, quota: ResourceQuota, deleted: bool = False) -> None:
        if deleted:
            self.state.remove_quota(quota.metadata.namespace, quota.metadata.name)
            return
        for problem in self.state.upsert_quota(quota):
            log.warning("%s", problem)


_NOT_PENDING = frozenset({"Running", "Succeeded", "Failed"})
_ALREADY_BOUND = "already bound to that node"


def _filter_refusal(pod: Pod, watched: Pod | None, record: PodRecord | None) -> str | None:
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
        if copy is None:
            continue
        if copy.spec.node_name:
            return (
                f"{who} (UID {uid}) is already bound to node {copy.spec.node_name}; hami never places a bound pod again"
            )
        if copy.status.phase in _NOT_PENDING:
            return f"{who} (UID {uid}) is {copy.status.phase}; hami places only pending pods"
    return None


def _replace_guard(pod: Pod, watched: Pod | None) -> str | None:
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


def _bind_refusal(pod: Pod, uid: str, node: str) -> str | None:
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


def decision_policy(decision: Decision) -> str:
    return decision.node_policy or "configured"


def _with_bind_phase(decision: Decision) -> dict[str, str]:
    """The allocation annotations plus ``hami.io/bind-phase: allocating`` and ``hami.io/bind-time``.

    Deliberate difference: HAMi writes the bind phase in a second PATCH from Bind, after taking the node lock;
    hami writes it with the allocation (one API call less per pod). Device plugins only look at pods bound to
    their node, so the phase is not seen before the bind, and a failed bind clears it with the allocation.
    """
    annotations = dict(decision.annotations)
    annotations[keys.BIND_PHASE] = "allocating"
    annotations[keys.BIND_TIME] = annotations.get(keys.VGPU_TIME, "0")
    return annotations


def _same(a: PodRecord, b: PodRecord) -> bool:
    return a.node == b.node and a.charges == b.charges and a.mig == b.mig


def _rejection_text(decision: Decision) -> str:
    parts = [f"{node}: {r.summary}" for node, r in sorted(decision.rejected.items())]
    return "nodes not chosen: " + "; ".join(parts)
