"""Gangs: pods that must be placed together hold no share they cannot use (docs/gangs.md).

A gang is the pods of one group in one namespace: named by the label ``scheduling.x-k8s.io/pod-group`` or by
``spec.schedulingGroup.podGroupName`` (kube-scheduler's gang scheduling, the ``GenericWorkload`` gate: PodGroup
``scheduling.k8s.io``, ``spec.schedulingPolicy.gang.minCount``). kube-scheduler reserves each member in turn, the
extender's /filter included, and when the group cannot reach its minimum it undoes its own reservations and puts
every member back in the queue, without telling the extender. The allocations /filter wrote for the members placed
so far would stay, and every retry of the gang takes them again: a pod behind the gang would never get the cards.

``GangBook`` keeps, from the pod watch and the PodGroup watch, which pods belong to which gang and the gang's
minimum (when a PodGroup says it). :func:`to_release` decides, when a member fits nowhere, which of the other
members' allocations to drop at once: those not bound (no ``spec.nodeName``) and not being bound (a /bind of this
process running), unless the members already bound or placed reach the minimum without this one (kube-
scheduler then goes on with them). A PodGroup whose scheduling condition says it failed releases them too
(:meth:`GangBook.failed`). Pure: the cycle writes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from hami.protocol.objects import Pod
from hami.scheduling.records import pod_group

__all__ = ["Gang", "GangBook", "Member", "to_release"]


@dataclass(frozen=True, slots=True)
class Member:
    """One member as the cycle sees it now: bound, its bind started, holding an allocation in the ledger."""

    uid: str
    name: str
    bound: bool
    binding: bool
    holds: bool


@dataclass(slots=True)
class Gang:
    """The members of one gang (UID → pod name) and its minimum (None: unknown, every member counts)."""

    members: dict[str, str] = field(default_factory=dict)
    min_count: int | None = None
    failed: bool = False
    """The PodGroup's scheduling condition last said the group could not be placed."""


class GangBook:
    """Gangs by (namespace, group), fed by the pod and PodGroup watches."""

    def __init__(self) -> None:
        self.gangs: dict[tuple[str, str], Gang] = {}
        self._of: dict[str, tuple[str, str]] = {}

    def pod_event(self, pod: Pod, gone: bool = False) -> None:
        """A pod seen (or gone: deleted, finished): it joins or leaves its gang."""
        uid = pod.metadata.uid
        old = self._of.pop(uid, None)
        if old is not None:
            gang = self.gangs.get(old)
            if gang is not None:
                gang.members.pop(uid, None)
                self._drop_if_empty(old, gang)
        group = pod_group(pod)
        if gone or not group or not uid:
            return
        key = (pod.metadata.namespace, group)
        self.gangs.setdefault(key, Gang()).members[uid] = pod.metadata.name
        self._of[uid] = key

    def group_event(self, namespace: str, name: str, min_count: int | None, failed: bool, gone: bool = False) -> bool:
        """A PodGroup seen: its minimum and whether its condition says it failed. Returns True when it newly
        failed (the caller then releases the gang's unbound allocations)."""
        key = (namespace, name)
        if gone:
            gang = self.gangs.get(key)
            if gang is not None:
                gang.min_count, gang.failed = None, False
                self._drop_if_empty(key, gang)
            return False
        gang = self.gangs.setdefault(key, Gang())
        newly = failed and not gang.failed
        gang.min_count, gang.failed = min_count, failed
        return newly

    def gang_of(self, pod: Pod) -> tuple[tuple[str, str], Gang] | None:
        group = pod_group(pod)
        if not group:
            return None
        key = (pod.metadata.namespace, group)
        gang = self.gangs.get(key)
        return (key, gang) if gang is not None else None

    def _drop_if_empty(self, key: tuple[str, str], gang: Gang) -> None:
        if not gang.members and gang.min_count is None and not gang.failed:
            del self.gangs[key]


def members(
    gang: Gang,
    namespace: str,
    watched: Callable[[str, str], Pod | None],
    holds: Mapping[str, object],
    binding: Collection[str] = (),
) -> list[Member]:
    """Each member of ``gang`` as the pod watch shows it (``watched``), the ledger holds it (``holds``: UID →
    record) and /bind works on it (``binding``: UIDs); a member the watch no longer has is left out."""
    out: list[Member] = []
    for uid, name in sorted(gang.members.items(), key=lambda item: item[1]):
        pod = watched(namespace, name)
        if pod is None or pod.metadata.uid != uid:
            continue
        out.append(Member(uid, name, bool(pod.spec.node_name), uid in binding, uid in holds))
    return out


def to_release(gang: Gang, failing_uid: str, others: list[Member]) -> list[Member]:
    """The members whose allocation to drop now that ``failing_uid`` fits nowhere: every other member that holds
    one, is not bound and whose bind has not started, unless the members bound or placed (holding one) reach the
    gang's minimum without the failing one. A gang of unknown minimum needs every member."""
    placed = [m for m in others if m.uid != failing_uid and (m.bound or m.holds)]
    if gang.min_count is not None and len(placed) >= gang.min_count:
        return []
    return [m for m in others if m.uid != failing_uid and m.holds and not m.bound and not m.binding]
