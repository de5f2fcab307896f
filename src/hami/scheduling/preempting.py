"""hami's own preemption (``--preemption=self``: kube-scheduler 1.36 and 1.37, whose DefaultPreemption cannot see GPU
shares and calls no extender): victims chosen by ``hami.scheduling.preemption``, evicted here, the freed capacity
held for the preemptor (``hami.scheduling.holds``). Only /filter calls it, so only the leader preempts.

For a pod that fits nowhere, of priority above 0 and ``preemptionPolicy`` not ``Never``:

1. the candidates are the /filter's nodes without a preemption in flight (one per node); pods reserved but not
   bound yet, and pods evicted already, are never victims (``keep``);
2. if some node has victims, the cluster's PodDisruptionBudgets are read and the candidates ranked with them;
3. on the best candidate the capacity is held for the pod (in the same step as the ranking: no other /filter
   runs in between), then each victim is evicted through the Eviction API (graceful: the pod's own grace
   period), given kube-scheduler's ``DisruptionTarget`` condition (``PreemptionByScheduler``; the message names
   the preemptor: ``hami.protocol.disruption``) and its ``Preempted`` event. A pod that was already terminating
   for another reason is a victim like any other (kube-scheduler's dry run keeps it); its eviction can only
   shorten its grace period (to its own) and marks it preempted. A 429 from a budget means that candidate is not
   used now: its hold is lifted and the next candidate is tried (at most ``CANDIDATES_TRIED``);
4. the pod's ``status.nominatedNodeName`` is set to the node (kube-scheduler keeps it while the victims
   terminate with that condition, and hami rebuilds its holds from it after a restart).

The hold lasts until the pod is placed (its own /filter lifts it first and then finds the room), deleted or bound,
or until its deadline: the victims' longest grace period plus ``HOLD_MARGIN_S``. A pod whose hold stands is told
so in its /filter answer (``Preempting.WAITING``) and preempts nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime

from hami.errors import ApiError, BudgetRefused, Conflict, InvalidInput, NotFound
from hami.protocol import keys
from hami.protocol.disruption import disruption_text
from hami.protocol.events import EventReason, preempted_text
from hami.protocol.objects import ObjectMeta, Pod
from hami.scheduling.holds import HOLD_MARGIN_S, Hold, hold_record, leaving_on
from hami.scheduling.outcomes import ApiFailure, Preempting, PreemptionNote
from hami.scheduling.parts import CycleParts
from hami.scheduling.ports import ClusterPort
from hami.scheduling.preemption import Budget, Candidate, Preemption, preempt
from hami.scheduling.request import PodRequest, prefilter
from hami.scheduling.state import ClusterState, PodRecord

__all__ = [
    "CANDIDATES_TRIED",
    "DEFAULT_GRACE_S",
    "expire_holds",
    "preempt_for",
    "read_budgets",
    "rebuild_holds",
    "waiting_note",
]

CANDIDATES_TRIED = 3
"""Candidates tried in one /filter when PodDisruptionBudgets refuse the evictions of the better ones."""
RENOMINATE_AFTER_S = (1.0, 2.0, 4.0)
"""Pauses before each check of a preemptor's nomination after /filter answered (see ``_renominate_later``)."""
DEFAULT_GRACE_S = 30.0
"""A pod's termination grace period when it sets none (Kubernetes' default)."""

Failures = tuple[ApiFailure, ...]


def eligible(parts: CycleParts, req: PodRequest) -> bool:
    """Whether hami preempts for this pod at all: self-preemption on, a pod of devices with priority above 0."""
    return parts.settings.preemption and req.wants_devices and req.priority > 0


async def preempt_for(
    parts: CycleParts, pod: Pod, req: PodRequest, names: Sequence[str]
) -> tuple[PreemptionNote | None, Failures]:
    """Preempt for ``pod`` (which fits on none of ``names``): see the module docstring. None when hami does not
    preempt for this pod (not ``eligible``)."""
    if not eligible(parts, req):
        return None, ()
    nodes = _free_nodes(parts, names, ())
    evicted = parts.holds.evicted
    plan = preempt(parts.state, req, nodes, (), _keep(parts, nodes), bounded=True, evicted=evicted)
    if plan.chosen is None:
        return _no_candidate(plan), ()
    budgets, failures = await _budgets(parts, nodes)
    refused: list[str] = []
    for _ in range(CANDIDATES_TRIED):
        nodes = _free_nodes(parts, names, refused)
        plan = preempt(parts.state, req, nodes, budgets, _keep(parts, nodes), bounded=True, evicted=evicted)
        if plan.chosen is None:
            break
        hold = _hold(parts, req, plan.chosen)  # right after the ranking: nothing ran in between
        if hold is None:
            break
        note, more = await _carry_out(parts, pod, plan.chosen, hold)
        failures += more
        if note is not None:
            return note, failures
        refused.append(plan.chosen.node)
    if refused:
        nodes_text = ", ".join(refused)
        message = f"preemption on {nodes_text} refused by a PodDisruptionBudget; no other node has victims"
        return PreemptionNote(Preempting.BUDGET_REFUSED, message), failures
    return _no_candidate(plan), failures


def _no_candidate(plan: Preemption) -> PreemptionNote:
    return PreemptionNote(Preempting.NO_CANDIDATE, f"preemption cannot help: {plan.reason}")


def _free_nodes(parts: CycleParts, names: Iterable[str], refused: Collection[str]) -> list[str]:
    """The candidates without a preemption in flight, less those a budget refused in this /filter."""
    return [n for n in names if n not in refused and not parts.holds.busy(n)]


def _keep(parts: CycleParts, nodes: Iterable[str]) -> set[str]:
    """UIDs of pods on ``nodes`` that are never victims: reserved but not bound (by this /filter's cycle or
    another scheduler's allocation the watch shows unbound), unknown to the pod watch, or evicted already."""
    keep = set(parts.holds.evicted)
    for node in nodes:
        for uid in parts.state.pods_by_node.get(node, ()):
            record = parts.state.pods[uid]
            if uid in parts.pending or uid in parts.commits or not _bound(parts, record):
                keep.add(uid)
    return keep


def _bound(parts: CycleParts, record: PodRecord) -> bool:
    watched = parts.port.watched_pod(record.namespace, record.name)
    return watched is not None and watched.metadata.uid == record.uid and watched.spec.node_name == record.node


async def _budgets(parts: CycleParts, nodes: Iterable[str]) -> tuple[list[Budget], Failures]:
    return await read_budgets(parts.state, parts.port, nodes)


async def read_budgets(state: ClusterState, port: ClusterPort, nodes: Iterable[str]) -> tuple[list[Budget], Failures]:
    """The PodDisruptionBudgets as the ranking reads them: each with the UIDs of the pods on ``nodes`` it selects
    (by the labels the pod watch shows). A failed read ranks without budgets (the Eviction API still enforces
    them). Shared by hami's own preemption and the preempt verb."""
    try:
        found = await port.disruption_budgets()
    except ApiError as err:
        return [], (ApiFailure("list_budgets", f"reading PodDisruptionBudgets failed: {err}; ranking without"),)
    records = [state.pods[uid] for node in nodes for uid in state.pods_by_node.get(node, ())]
    pods = [(record, port.watched_pod(record.namespace, record.name)) for record in records]
    budgets = []
    for pdb in found:
        selector, ns = pdb.spec.selector, pdb.metadata.namespace
        selected = frozenset(
            record.uid
            for record, watched in pods
            if selector is not None and watched is not None and record.namespace == ns
            if watched.metadata.uid == record.uid and selector.selects(watched.metadata.labels)
        )
        if selected:
            budgets.append(Budget(f"{ns}/{pdb.metadata.name}", selected, pdb.status.disruptions_allowed))
    return budgets, ()


def _hold(parts: CycleParts, req: PodRequest, chosen: Candidate) -> Hold | None:
    """Hold what the pod gets on the chosen node once its victims and the pods being preempted there are gone."""
    node = chosen.node
    leaving = leaving_on(parts.state, node, parts.holds.evicted) | {v.uid for v in chosen.victims}
    record = hold_record(parts.state, req, node, leaving)
    if record is None:
        return None
    hold = Hold(record, tuple(v.key for v in chosen.victims), _deadline(parts, chosen.victims))
    parts.holds.place(parts.state, hold)
    return hold


def _deadline(parts: CycleParts, victims: Iterable[PodRecord]) -> float:
    """Now plus the victims' longest termination grace period plus ``HOLD_MARGIN_S``."""
    grace = DEFAULT_GRACE_S
    for victim in victims:
        watched = parts.port.watched_pod(victim.namespace, victim.name)
        given = watched.spec.termination_grace_period_seconds if watched is not None else None
        grace = max(grace, float(given) if given is not None else DEFAULT_GRACE_S)
    return parts.clocks.wall() + grace + HOLD_MARGIN_S


async def _carry_out(
    parts: CycleParts, pod: Pod, chosen: Candidate, hold: Hold
) -> tuple[PreemptionNote | None, Failures]:
    """Evict the victims, nominate the node. None (and the hold lifted) when a budget refused an eviction."""
    uid, node = pod.metadata.uid, chosen.node
    evicted: list[str] = []
    failures: list[ApiFailure] = []
    for victim in chosen.victims:
        try:
            await _evict(parts, pod, victim, node, failures)
        except BudgetRefused:
            parts.holds.lift(parts.state, uid)
            _owe(parts, uid, node, evicted)
            return None, tuple(failures)
        except ApiError as err:
            parts.holds.lift(parts.state, uid)
            _owe(parts, uid, node, evicted)
            failures.append(ApiFailure("evict_pod", f"evicting {victim.key} for {pod.key} failed: {err}"))
            message = f"preemption on {node} failed: evicting {victim.key}: {err}"
            return PreemptionNote(Preempting.FAILED, message, node, hold.victims, len(evicted)), tuple(failures)
        evicted.append(victim.uid)
    _owe(parts, uid, node, evicted)
    failures += await _nominate(parts, pod, node)
    _renominate_later(parts, pod, node)
    message = f"preempting {_victims_text(hold)} on {node} for this pod; {_held_text(hold)}"
    return PreemptionNote(Preempting.PREEMPTED, message, node, hold.victims, len(evicted), hold.deadline), tuple(
        failures
    )


async def _evict(parts: CycleParts, pod: Pod, victim: PodRecord, node: str, failures: list[ApiFailure]) -> None:
    """Evict one victim, then give it kube-scheduler's condition and event. A victim already gone counts as
    evicted; ``BudgetRefused`` and other API errors of the eviction propagate."""
    ns, name, uid = victim.namespace, victim.name, victim.uid
    try:
        await parts.port.evict_pod(ns, name, uid)
    except (NotFound, Conflict):
        return  # gone already (or replaced by another pod of that name): nothing left to evict
    parts.holds.evicted.add(uid)
    scheduler = pod.spec.scheduler_name or "hami-scheduler"
    try:
        await parts.port.mark_preempted(ns, name, uid, disruption_text(scheduler, pod.key, pod.metadata.uid))
        await parts.port.patch_pod_metadata(ns, name, {keys.PREEMPTED_FOR: pod.key}, uid=uid)
    except (NotFound, Conflict):
        pass  # gone already: the kubelet (or a grace period of 0) finished it
    except ApiError as err:
        failures.append(ApiFailure("patch_pod_status", f"marking {victim.key} as preempted failed: {err}"))
    target = parts.port.watched_pod(ns, name) or Pod(metadata=ObjectMeta(name=name, namespace=ns, uid=uid))
    reason = EventReason.PREEMPTED
    parts.port.event(target, reason.type, reason, preempted_text(pod.metadata.uid, node))


async def _nominate(parts: CycleParts, pod: Pod, node: str) -> list[ApiFailure]:
    try:
        await parts.port.nominate(pod.metadata.namespace, pod.metadata.name, pod.metadata.uid, node)
    except ApiError as err:
        return [ApiFailure("nominate", f"setting the nominated node of {pod.key} failed: {err}")]
    return []


def _renominate_later(parts: CycleParts, pod: Pod, node: str) -> None:
    """Check the nomination again after /filter has answered (``RENOMINATE_AFTER_S``).

    kube-scheduler handles the /filter failure after hami's answer: its DefaultPreemption, seeing no victim it
    understands, may clear ``nominatedNodeName`` just after hami set it (when its cache does not show the
    victims terminating by preemption yet). Set again, it stays: from then on kube-scheduler finds the victims
    terminating with ``PreemptionByScheduler`` and leaves the nomination alone. hami's holds after a restart
    are rebuilt from it."""
    old = parts.nominations.pop(pod.metadata.uid, None)
    if old is not None:
        old.cancel()
    task = asyncio.get_running_loop().create_task(_renominate(parts, pod, node), name=f"nominate-{pod.metadata.uid}")
    parts.nominations[pod.metadata.uid] = task
    task.add_done_callback(lambda done: _renominated(parts, pod.metadata.uid, done))


async def _renominate(parts: CycleParts, pod: Pod, node: str) -> None:
    uid = pod.metadata.uid
    for pause in RENOMINATE_AFTER_S:
        await parts.clocks.sleep(pause)
        hold = parts.holds.holds.get(uid)
        if hold is None or hold.node != node:
            return
        watched = parts.port.watched_pod(pod.metadata.namespace, pod.metadata.name)
        if watched is not None and watched.metadata.uid == uid and watched.status.nominated_node_name != node:
            await _nominate(parts, pod, node)  # a failure is tried again after the next pause


def _renominated(parts: CycleParts, uid: str, task: asyncio.Task[None]) -> None:
    if parts.nominations.get(uid) is task:
        del parts.nominations[uid]


def _owe(parts: CycleParts, uid: str, node: str, evicted: Sequence[str]) -> None:
    wasted = parts.holds.owe(uid, node, evicted)
    if wasted:
        parts.observer.evictions_wasted(wasted, "elsewhere")


def _victims_text(hold: Hold) -> str:
    if not hold.victims:
        return "no pod (the pods leaving the node make room)"
    return f"{len(hold.victims)} pod(s) of lower priority ({', '.join(hold.victims)})"


def _held_text(hold: Hold) -> str:
    until = datetime.fromtimestamp(hold.deadline, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"the freed capacity is held for this pod until {until}"


def waiting_note(hold: Hold) -> PreemptionNote:
    """The answer for a pod whose hold stands: its victims are still terminating."""
    who = f"{len(hold.victims)} preempted pod(s) ({', '.join(hold.victims)})" if hold.victims else "the pods leaving"
    message = f"waiting for {who} to terminate on {hold.node}; {_held_text(hold)}"
    return PreemptionNote(Preempting.WAITING, message, hold.node, hold.victims, 0, hold.deadline)


def expire_holds(parts: CycleParts, now: float) -> list[Hold]:
    """Lift the holds whose deadline has passed (their pods preempt again at their next /filter)."""
    return parts.holds.expire(parts.state, now)


def rebuild_holds(parts: CycleParts, now: float) -> int:
    """Once per process, at the first /filter it answers: the holds of the preemptions in flight, rebuilt from
    the victims hami evicted that are still terminating (``hami.io/preempted-for`` names their preemptor, believed
    only when the ``DisruptionTarget`` condition hami wrote names the same pod: ``CycleParts.victims``; the hold is
    placed only for the pod of the UID the condition names) and from the pending pods' ``status.nominatedNodeName``;
    each where the pod fits once the pods being preempted on that node are gone. Returns how many were placed."""
    if parts.holds.rebuilt:
        return 0
    parts.holds.rebuilt = True
    wanted: dict[tuple[str, str, str], tuple[str, list[str]]] = {}  # preemptor (ns, name, UID) -> node, victims
    for (preemptor, preemptor_uid), node, victim in parts.victims.values():
        ns, _, name = preemptor.partition("/")
        wanted.setdefault((ns, name, preemptor_uid), (node, []))[1].append(victim)
    for pod in parts.nominated.values():
        meta = pod.metadata
        wanted.setdefault((meta.namespace, meta.name, meta.uid), (pod.status.nominated_node_name, []))
    placed = 0
    for (ns, name, uid), (node, victims) in sorted(wanted.items()):
        found = parts.port.watched_pod(ns, name)
        if found is None or found.metadata.uid != uid or found.spec.node_name:
            continue
        if _rebuild(parts, found, node, victims, now):
            placed += 1
    return placed


def _rebuild(parts: CycleParts, pod: Pod, node: str, victims: Sequence[str], now: float) -> bool:
    try:
        req = prefilter(pod, parts.vendors, parts.defaults)
    except InvalidInput:
        return False
    if not eligible(parts, req) or node not in parts.state.nodes or parts.holds.busy(node):
        return False
    if req.uid in parts.state.pods:
        return False  # reserved already
    record = hold_record(parts.state, req, node, leaving_on(parts.state, node, parts.holds.evicted))
    if record is None:
        return False
    parts.holds.place(parts.state, Hold(record, tuple(sorted(victims)), now + DEFAULT_GRACE_S + HOLD_MARGIN_S))
    return True
