"""Releasing a gang's unbound allocations (``hami.scheduling.gangs`` decides which): the cycle's writes for gangs.

The members are read from the pod watch; a member the ledger holds an allocation for but the watch does not show
yet (its events lag behind the API) is read from the API, so a release never misses one. A member counts as bound
when the watch or the API shows ``spec.nodeName``, or when this process bound it (``CycleParts.bound``: until the
watch shows it), and as being bound while its /bind runs (``CycleParts.binding``): neither is released.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami.errors import ApiError
from hami.protocol.objects import Pod
from hami.scheduling.cleanup import release_allocation
from hami.scheduling.gangs import Gang, Member, members, to_release
from hami.scheduling.outcomes import ApiFailure
from hami.scheduling.parts import CycleParts

__all__ = ["release_for_failed_group", "release_for_unschedulable"]

Released = tuple[tuple[str, ...], tuple[ApiFailure, ...]]
"""The members released (pod names) and the API calls that failed."""


async def release_for_unschedulable(parts: CycleParts, pod: Pod) -> Released:
    """``pod`` fits nowhere: the other members of its gang drop their unbound allocations (``to_release``)."""
    parts.gangs.pod_event(pod)
    found = parts.gangs.gang_of(pod)
    if found is None:
        return (), ()
    (namespace, _), gang = found
    return await _release(parts, namespace, gang, pod.metadata.uid)


async def release_for_failed_group(parts: CycleParts, namespace: str, group: str) -> Released:
    """The gang's PodGroup says it could not be placed: every unbound member drops its allocation."""
    gang = parts.gangs.gangs.get((namespace, group))
    if gang is None:
        return (), ()
    return await _release(parts, namespace, gang, "")


async def _release(parts: CycleParts, namespace: str, gang: Gang, failing: str) -> Released:
    pods = await _member_pods(parts, namespace, gang)
    binding = parts.binding | parts.bound  # bound by this process and not yet shown bound by the watch: kept
    others = members(gang, namespace, lambda _ns, name: pods.get(name), parts.state.pods, binding)
    return await _drop(parts, to_release(gang, failing, others), pods)


async def _member_pods(parts: CycleParts, namespace: str, gang: Gang) -> dict[str, Pod]:
    """Each member's pod: the watch's copy, else (when the ledger holds an allocation for it) the API's."""
    out: dict[str, Pod] = {}
    for uid, name in gang.members.items():
        pod = parts.port.watched_pod(namespace, name)
        if (pod is None or pod.metadata.uid != uid) and uid in parts.state.pods:
            try:
                pod = await parts.port.get_pod(namespace, name)
            except ApiError:
                pod = None  # not read: left alone this time
        if pod is not None and pod.metadata.uid == uid:
            out[name] = pod
    return out


async def _drop(parts: CycleParts, chosen: Sequence[Member], pods: Mapping[str, Pod]) -> Released:
    dropped: list[str] = []
    failed: tuple[ApiFailure, ...] = ()
    for member in chosen:
        await parts.settle(member.uid)  # its commit in flight lands (or fails) first
        if member.uid not in parts.state.pods or member.uid in parts.binding or member.uid in parts.bound:
            continue  # rolled back meanwhile, or its bind started while the commit settled
        failed += await release_allocation(parts, pods[member.name], member.uid)
        dropped.append(member.name)
    return tuple(dropped), failed
