"""One scheduling cycle, composed: ``Cycle.filter`` = prefilter → identity → decide → reserve → commit (→ unreserve
on failure) and ``Cycle.bind`` = identity → lock → bind phase → bind (→ release on failure), over one port to
Kubernetes (``ClusterPort``); each returns an outcome as data (``hami.scheduling.outcomes``) that the HTTP layer only
maps to its answer, events and metrics.

The verbs live in their own modules: ``decide`` (filter → score → select, pure, with its memo ``hami.scheduling.memo``),
``bind`` (the whole /bind path), ``cleanup`` (removing an allocation, retried in the background), ``ports`` (what the
cycle needs from outside), ``parts`` (what the verbs share: collaborators, settings, clocks, observer, state in
flight). This module holds /filter, its commit and the pod watch.

The cycle never emits an event or counts a metric, and the only I/O it does is through the port.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hami.errors import ApiError, InvalidInput, NotFound
from hami.protocol import keys
from hami.protocol.disruption import preempted_for
from hami.protocol.objects import Pod
from hami.scheduling.bind import NOT_PENDING, bind
from hami.scheduling.cleanup import pod_gone, release_allocation
from hami.scheduling.decide import Decision, decide, reserve, unreserve
from hami.scheduling.gangrelease import release_for_failed_group, release_for_unschedulable
from hami.scheduling.holds import Hold
from hami.scheduling.outcomes import ApiFailure, BindOutcome, Bound, Filtered, FilterOutcome
from hami.scheduling.parts import CycleParts
from hami.scheduling.preempting import expire_holds, preempt_for, rebuild_holds, waiting_note
from hami.scheduling.records import RecordReader, holds_devices, is_terminal
from hami.scheduling.request import PodRequest, prefilter
from hami.scheduling.state import PodRecord

__all__ = ["Cycle", "filter_refusal", "replace_guard", "with_bind_phase"]


@dataclass(slots=True)
class Cycle(CycleParts):
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
    any locked node (``lock_retry_timeout``), woken through ``lock_waits``; /filter ranks a node whose lock is held,
    or being taken by a bind in progress (``node_locks``), after the free ones, so a burst is not queued behind one
    node. The pauses go through the injected ``Clocks.sleep``, the waits are measured with ``Clocks.stopwatch``: the
    cycle reads no clock itself.

    Gangs (``hami.scheduling.gangs``): a member of a gang that fits nowhere drops the other members' unbound
    allocations at once (not those bound or being bound, and none while the gang still reaches its minimum), so a
    gang kube-scheduler gives up on holds no share; ``release_gang`` does the same when its PodGroup says it failed.

    Preemption (``CycleSettings.preemption``, ``--preemption=self``): a pod that fits nowhere preempts through
    ``hami.scheduling.preempting``; the capacity held for it (``holds``) is lifted for its own decision and put
    back, in the same step, while its victims still terminate.
    """

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
        decision, hold = self._decide_and_reserve(req, names)
        if decision.node is None:
            outcome = await self._unschedulable(pod, watched, decision, names, guard)
            outcome = await self._gang_stage(outcome)
            return await self._preempt_stage(outcome, req, hold)
        self._placed(req.uid, decision.node)
        return await self._commit_stage(FilterOutcome(Filtered.SCHEDULED, pod, names, decision), guard)

    def _decide_and_reserve(self, req: PodRequest, names: Sequence[str]) -> tuple[Decision, Hold | None]:
        """decide → reserve, with no ``await`` in between (see the class docstring). The pod's own preemption
        hold, if any, is lifted for the decision and put back when the pod still fits nowhere (returned then)."""
        t0 = self.clocks.stopwatch()
        wall = self.clocks.wall()
        now, now_ns = _instant(wall)
        if self.settings.preemption:
            rebuild_holds(self, wall)
            for lapsed in expire_holds(self, wall):
                self.observer.capacity_freed(lapsed.node)  # the room held is free for every pod now
        hold = self.holds.lift(self.state, req.uid)
        decision = decide(self.state, req, names, now, self.memo, now_ns=now_ns, busy=self._busy(req))
        self.observer.stage_timed("decide", self.clocks.stopwatch() - t0)
        if reserve(self.state, req, decision) is not None:
            self.pending.add(req.uid)
        elif hold is not None and decision.node is None:
            self.holds.place(self.state, hold)  # its victims are still terminating: the room stays held
            return decision, hold
        return decision, None

    def _busy(self, req: PodRequest) -> frozenset[str]:
        """The nodes where a lock the pod's bind would take (its vendors' ``VendorKeys.lock``) is held now, as the
        node watch shows it, or being taken by a /bind of this process in progress (``node_locks``): each takes
        one pod per lock hand-over, so they rank after the free ones. Nothing here marks a node: with no lock held
        and no bind in progress the set is empty and the decision HAMi's."""
        wanted = {v.keys.lock for v in map(self.vendors.get, req.vendors) if v is not None and v.keys.lock}
        if not wanted:
            return frozenset()
        # one read of the map: BusyNodes builds its view (watched locks and binds in progress) on each read
        return frozenset(node for node, held in self.node_locks.items() if not wanted.isdisjoint(held))

    async def _unschedulable(
        self, pod: Pod, watched: Pod | None, decision: Decision, names: tuple[str, ...], guard: str | None
    ) -> FilterOutcome:
        failed: tuple[ApiFailure, ...] = ()
        if holds_devices(pod) or (watched is not None and holds_devices(watched)):
            # The allocation of an earlier /filter whose bind never came: left on the pod, the next watch event
            # would charge it again and hold the devices while the pod stays pending. HAMi leaves it too.
            failed = await self.release_allocation(pod, pod.metadata.uid, guard)
        return FilterOutcome(Filtered.UNSCHEDULABLE, pod, names, decision, api_errors=failed)

    async def _gang_stage(self, outcome: FilterOutcome) -> FilterOutcome:
        """A gang member that fits nowhere: the other members' unbound allocations are dropped at once
        (``hami.scheduling.gangrelease``), so a gang kube-scheduler gives up on holds no share."""
        dropped, failed = await release_for_unschedulable(self, outcome.pod)
        if not dropped:
            return outcome
        return replace(outcome, gang_released=dropped, api_errors=outcome.api_errors + failed)

    async def release_gang(self, namespace: str, group: str) -> tuple[tuple[str, ...], tuple[ApiFailure, ...]]:
        """The gang's PodGroup says it could not be placed: every member's unbound allocation is dropped (not
        those bound or being bound). Returns the members released and the calls that failed."""
        return await release_for_failed_group(self, namespace, group)

    async def _preempt_stage(self, outcome: FilterOutcome, req: PodRequest, hold: Hold | None) -> FilterOutcome:
        """hami's own preemption for a pod that fits nowhere (``hami.scheduling.preempting``): the standing hold
        is reported, or victims are evicted and the room held."""
        if hold is not None:
            return replace(outcome, preemption=waiting_note(hold))
        rejected = outcome.decision.rejected if outcome.decision is not None else {}
        helps = [n for n in outcome.candidates if n not in rejected or not rejected[n].unresolvable]
        note, failed = await preempt_for(self, outcome.pod, req, helps)  # no node the pod never fits on
        if note is None:
            return outcome
        return replace(outcome, preemption=note, api_errors=outcome.api_errors + failed)

    def _placed(self, uid: str, node: str) -> None:
        """The pod was given ``node``: the evictions made for it elsewhere, if any, were wasted."""
        wasted = self.holds.settle(uid, node)
        if wasted:
            self.observer.evictions_wasted(wasted, "elsewhere")

    async def _commit_stage(self, outcome: FilterOutcome, guard: str | None) -> FilterOutcome:
        uid = outcome.pod.metadata.uid
        if not self.settings.background_commit:
            return await self.commit(outcome, guard) or outcome
        # kube-scheduler's scheduling cycle is serial and waits for this answer, so the annotation PATCH runs
        # beside it; /bind waits for it before binding. A failed commit rolls the reservation back and fails
        # that bind.
        self.commits[uid] = asyncio.get_running_loop().create_task(self._commit_reported(outcome, guard))
        return outcome

    async def _commit_reported(self, outcome: FilterOutcome, guard: str | None) -> FilterOutcome | None:
        failed = await self.commit(outcome, guard)
        if failed is not None:
            self.observer.commit_failed_late(failed)
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
        t0 = self.clocks.stopwatch()
        try:
            patched = await self.port.patch_pod_metadata(
                pod.metadata.namespace,
                pod.metadata.name,
                with_bind_phase(decision),
                {keys.VGPU_NODE: decision.node},
                uid=uid,
                resource_version=guard,
            )
            written = patched.metadata.resource_version
            if written:
                self.written[uid] = written
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
            if pod_gone(err) and self.commits.get(uid) is asyncio.current_task():
                # No pod with this UID exists any more, so no /bind for it can succeed: keeping the failed task
                # for one would keep it for ever. /bind then finds the pod missing or another one and refuses.
                del self.commits[uid]
            message = f"writing the allocation annotations failed: {err}"
            return FilterOutcome(
                Filtered.COMMIT_FAILED, pod, outcome.candidates, decision, message, (ApiFailure("patch_pod"),)
            )
        finally:
            self.observer.stage_timed("commit", self.clocks.stopwatch() - t0)
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

    async def settle_all(self) -> None:
        """Wait for every commit in flight (shutdown, tests); stop the clean-up retries (a restarted hami charges
        what the pods carry, and kube-scheduler's next /filter of such a pod replaces or clears it)."""
        while self.commits:
            await self.settle(next(iter(self.commits)))
        for uid in list(self.cleanups):
            self.cancel_cleanup(uid)
        for task in self.nominations.values():
            task.cancel()
        self.nominations.clear()

    async def bind(self, ns: str, name: str, uid: str, node: str) -> BindOutcome:
        """/bind: see ``hami.scheduling.bind``. While it runs the pod counts as being bound (``binding``): its
        gang's releases leave it alone."""
        self.binding.add(uid)
        try:
            outcome = await bind(self, ns, name, uid, node)
            if outcome.result in (Bound.BOUND, Bound.ALREADY_BOUND):
                self.bound.add(uid)  # until the pod watch shows it bound
            return outcome
        finally:
            self.binding.discard(uid)

    async def release_allocation(self, pod: Pod, uid: str, guard: str | None = None) -> tuple[ApiFailure, ...]:
        """Remove the pod's allocation: see ``hami.scheduling.cleanup.release_allocation``."""
        return await release_allocation(self, pod, uid, guard)

    # --- the pod watch ---------------------------------------------------------------------------------------
    def watch_pod(self, pod: Pod, deleted: bool = False) -> str | None:
        """Apply one pod event to the ledger (O(pod)). Returns why the pod's allocation annotations could not be
        fully decoded (what could be is charged), or None."""
        uid = pod.metadata.uid
        self._watch_preemption(pod, deleted or is_terminal(pod))
        self.gangs.pod_event(pod, deleted or is_terminal(pod))
        if deleted or is_terminal(pod) or pod.spec.node_name:
            self.bound.discard(uid)
        if deleted or is_terminal(pod):
            # its commit task, if any, goes too (a PATCH still in flight fails on the deleted pod and rolls
            # back nothing that is still held)
            self.pending.discard(uid)
            self.commits.pop(uid, None)
            self.written.pop(uid, None)
            self.cancel_cleanup(uid)
            unreserve(self.state, uid)
        elif not holds_devices(pod):
            if uid not in self.pending:
                unreserve(self.state, uid)
        else:
            return self._watch_allocation(pod)
        return None

    def _watch_preemption(self, pod: Pod, gone: bool) -> None:
        """Preemption's part of the pod watch: a preemptor that is gone or bound has its hold lifted (evictions
        made for it wasted unless it is bound where they were made); nominated pending pods and the victims
        still terminating are remembered (the holds are rebuilt from them after a restart)."""
        uid, bound, meta = pod.metadata.uid, pod.spec.node_name, pod.metadata
        preemptor = preempted_for(pod, meta.annotations.get(keys.PREEMPTED_FOR, ""))
        if preemptor is not None and bound and not gone:
            self.victims[uid] = (preemptor, bound, pod.key)
        else:
            self.victims.pop(uid, None)
        if gone or bound:
            self.nominated.pop(uid, None)
            lifted = self.holds.lift(self.state, uid)
            if lifted is not None and gone and not bound:
                self.observer.capacity_freed(lifted.node)  # the room held for it is free for every pod now
            wasted = self.holds.settle(uid, bound or None)
            if wasted:
                self.observer.evictions_wasted(wasted, "elsewhere" if bound else "deleted")
            if gone:
                self.holds.evicted.discard(uid)
        elif pod.status.nominated_node_name:
            self.nominated[uid] = pod
        else:
            self.nominated.pop(uid, None)

    def _watch_allocation(self, pod: Pod) -> str | None:
        """A pod that carries an allocation: the ledger takes it, unless our newer reservation is pending. It is
        believed (``records.believed_node``) when hami's scheduler serves it or this process reserved it: a record
        in the ledger under its UID can only come from this process's /filter when the pod is not otherwise
        believed (the scheduler name never changes, a bound pod stays bound)."""
        uid = pod.metadata.uid
        reader = self.records
        if reader is None or reader.vendors is not self.vendors:
            reader = self.records = RecordReader(self.vendors, (self.settings.scheduler_name,))
        current = self.state.pods.get(uid)
        record = reader.read(pod, ours=current is not None or uid in self.pending)
        if record is None:
            return None
        problem = (
            f"pod {record.key}: allocation annotations not fully decodable: {record.problem}"
            if record.problem
            else None
        )
        if current is not None and _same(current, record):
            self.pending.discard(uid)
            if _standing(current) != _standing(record):  # priority, start, deletion: what preemption reads
                self.state.apply(current, add=False)
                self.state.apply(record, add=True)
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


def _instant(seconds: float) -> tuple[int, int]:
    """A clock reading as whole Unix seconds and as Unix nanoseconds, consistent: ``ns // 10**9 == s``."""
    now = int(seconds)
    base = now * 10**9
    return now, min(max(int(seconds * 10**9), base), base + 10**9 - 1)


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
        if copy is not None and copy.status.phase in NOT_PENDING:
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


def _same(a: PodRecord, b: PodRecord) -> bool:
    return a.node == b.node and a.charges == b.charges and a.slices == b.slices


def _standing(record: PodRecord) -> tuple[int, str | None, bool, bool]:
    return record.priority, record.started, record.terminating, record.preempted
