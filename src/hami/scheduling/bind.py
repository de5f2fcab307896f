"""/bind, readable in one file: identity → locks → bind phase → Binding (→ release on failure), over the cycle's
port (``CycleParts.port``); returns a ``BindOutcome``.

Identity: /bind requires ``PodUID`` and refuses one that is not the pod's, a pod bound elsewhere, running or
finished, and one whose devices hami reserved on another node — all before anything is locked or written. A
repeated bind of a pod already bound there does nothing (``Bound.ALREADY_BOUND``).

Locks: each vendor lock the pod's vendors use, sorted; a bind that finds the node locked by another hami bind in
progress waits for the hand-over (``CycleSettings.bind_lock_wait``), a PodGroup member for any holder
(``lock_retry_timeout``). The Binding lands only on the version of the pod carrying this allocation
(``BIND_VERSION_ATTEMPTS``). A failed bind releases its locks and the allocation (``hami.scheduling.cleanup``),
unless the pod cannot be read back, when the clean-up runs in the background. A bind to a node whose kubelet
no longer reports the devices the pod is to take (``NodeState.unallocatable``: its device plugin went away after
/filter) fails once the locks are taken, released as any failed bind: kube-scheduler filters the pod again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hami.errors import ApiError, Conflict, HamiError, InvalidInput, LockContention, NotFound
from hami.protocol import keys
from hami.protocol.events import binding_succeed_text
from hami.protocol.objects import ObjectMeta, Pod
from hami.protocol.reasons import Reason
from hami.scheduling.cleanup import clear_later, release_allocation
from hami.scheduling.outcomes import ApiFailure, BindOutcome, BindRefusal, Bound, Refused
from hami.scheduling.parts import CycleParts
from hami.scheduling.records import holds_devices, pod_group
from hami.scheduling.request import prefilter
from hami.scheduling.state import PodRecord

__all__ = ["BIND_VERSION_ATTEMPTS", "NOT_PENDING", "bind", "bind_lock_keys", "bind_refusal"]

BIND_VERSION_ATTEMPTS = 3
"""Tries of a Binding conditional on the pod's version, while others' writes to the pod keep moving it on."""
NOT_PENDING = frozenset({"Running", "Succeeded", "Failed"})
"""Pod phases hami neither places nor binds."""


async def bind(parts: CycleParts, ns: str, name: str, uid: str, node: str) -> BindOutcome:
    named = Pod(metadata=ObjectMeta(name=name, namespace=ns, uid=uid))
    if not uid:
        # kube-scheduler always sends the UID; without it a request could name whichever pod has that name.
        return _refused(named, node, "ExtenderBindingArgs.PodUID is empty; hami binds a pod only by its UID")
    failed_commit = await parts.settle(uid)
    if failed_commit is not None:
        # its /filter's annotation PATCH failed and rolled the reservation back
        message = f"binding {ns}/{name} to {node} failed: {failed_commit.error}"
        return BindOutcome(Bound.COMMIT_FAILED, named, node, message)
    record = parts.state.pods.get(uid)
    if record is not None and (record.namespace, record.name) != (ns, name):
        return _refused(named, node, f"UID {uid} belongs to pod {record.namespace}/{record.name}")
    pod = await _bind_target(parts, named, node, record)
    if isinstance(pod, BindOutcome):
        return pod
    wants_devices = _bind_check(parts, pod, uid, node, record)
    if isinstance(wants_devices, BindOutcome):
        return wants_devices
    return await _lock_and_bind(parts, pod, node, record, wants_devices)


async def _bind_target(parts: CycleParts, named: Pod, node: str, record: PodRecord | None) -> Pod | BindOutcome:
    """The pod to bind: the watch's copy when our own /filter reserved it (no need to read it back), else as
    the API holds it now."""
    ns, name = named.metadata.namespace, named.metadata.name
    watched = parts.port.watched_pod(ns, name)
    if record is not None:
        return watched or named
    if watched is not None and watched.metadata.uid != named.metadata.uid:
        return watched  # refused by the check, without an API call
    try:
        return await parts.port.get_pod(ns, name)
    except NotFound as err:
        return BindOutcome(Bound.POD_MISSING, named, node, str(err))
    except ApiError as err:
        return BindOutcome(Bound.READ_FAILED, named, node, str(err), api_errors=(ApiFailure("get_pod"),))


def _bind_check(parts: CycleParts, pod: Pod, uid: str, node: str, record: PodRecord | None) -> bool | BindOutcome:
    """Identity, then the allocation: an outcome that ends the bind here, or whether the pod wants devices."""
    refusal = bind_refusal(pod, uid, node)
    if refusal is not None and refusal.why is Refused.BOUND_THERE:
        # kube-scheduler repeats a bind whose answer it did not get: nothing is locked, written or released.
        return BindOutcome(Bound.ALREADY_BOUND, pod, node)
    if refusal is not None:
        return _refused(pod, node, refusal.message)
    if record is None:
        return _allocation_check(parts, pod, node)
    if record.node != node:
        message = f"binding {pod.key} to {node} refused: hami reserved its devices on {record.node}"
        return BindOutcome(Bound.RESERVED_ELSEWHERE, pod, node, message)
    return True


def _allocation_check(parts: CycleParts, pod: Pod, node: str) -> bool | BindOutcome:
    """A pod this process did not reserve: whether it wants devices, and if so that it holds them on ``node``."""
    try:
        wants_devices = prefilter(pod, parts.vendors, parts.defaults).wants_devices
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


def bind_lock_keys(parts: CycleParts, ns: str, name: str, uid: str) -> frozenset[str]:
    """The node lock keys a /bind of the pod ``uid`` will take, as known before it starts (no I/O): those of the
    vendors its reservation uses (this process's /filter placed it), else those of the vendors its copy in the pod
    watch asks for; empty when neither is known (the bind itself, which reads the pod, still takes its locks).
    The /bind edge marks the node busy under these keys while the bind runs (``hami.server.busy``)."""
    record = parts.state.pods.get(uid)
    watched = parts.port.watched_pod(ns, name)
    if record is None and (watched is None or watched.metadata.uid != uid):
        return frozenset()
    pod = watched or Pod(metadata=ObjectMeta(name=name, namespace=ns, uid=uid))
    return frozenset(key for key, _ in _bind_locks(parts, pod, record))


def _bind_locks(parts: CycleParts, pod: Pod, record: PodRecord | None) -> list[tuple[str, float | None]]:
    """The node locks a bind of ``pod`` takes: each distinct ``VendorKeys.lock`` of the vendors it uses, sorted
    (so two binds never wait for each other crosswise), with its expiry (the shortest a vendor gives; None: the
    configured node-lock timeout). Empty when none of its vendors has a lock."""
    expiry: dict[str, float | None] = {}
    for vendor in _vendors_used(parts, pod, record):
        vk = parts.vendors[vendor].keys if vendor in parts.vendors else None
        if vk is None or vk.lock is None:
            continue
        given = [e for e in (expiry.get(vk.lock), vk.lock_expiry_s) if e is not None]
        expiry[vk.lock] = min(given) if given else None
    return sorted(expiry.items())


def _vendors_used(parts: CycleParts, pod: Pod, record: PodRecord | None) -> Iterable[str]:
    """The vendors whose devices the pod takes: its reservation's, else those its request names."""
    if record is not None and record.devices:
        return record.devices
    try:
        return prefilter(pod, parts.vendors, parts.defaults).vendors
    except InvalidInput:
        return ()


def _held_back(parts: CycleParts, pod: Pod, node: str, record: PodRecord | None) -> str | None:
    """Why kubelet does not back, now, the devices the pod is to take on ``node`` (its device plugin went away
    between /filter and /bind: kubelet would reject the pod, ``UnexpectedAdmissionError``), or None."""
    state = parts.state.nodes.get(node)
    if state is None or not state.unallocatable:
        return None
    for vendor in _vendors_used(parts, pod, record):
        if vendor in state.unallocatable:
            return f"{Reason.NODE_DEVICES_NOT_ALLOCATABLE.value}: {vendor} devices: {state.unallocatable[vendor]}"
    return None


async def _lock_and_bind(
    parts: CycleParts, pod: Pod, node: str, record: PodRecord | None, wants_devices: bool
) -> BindOutcome:
    """locks → bind phase (unless our own commit wrote it) → Binding; a failure releases what was taken."""
    ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
    locked: list[str] = []
    version = None
    if wants_devices:  # the version hami's write left, or the one just read if it carries the allocation
        version = parts.written.pop(uid, None) or (
            pod.metadata.resource_version if _still_allocated(pod, uid, node) else None
        )
    try:
        if wants_devices:
            for key, expiry in _bind_locks(parts, pod, record):
                await _lock(parts, node, pod, key, expiry)
                locked.append(key)
            held_back = _held_back(parts, pod, node, record)
            if held_back is not None:
                raise HamiError(held_back)  # released as any failed bind; kube-scheduler filters the pod again
            if record is None:  # not committed by this process: mark the bind phase now, as HAMi does, on
                # the version just read (unbound, allocated on this node): replaced only if still so
                patched = await parts.port.patch_pod_metadata(
                    ns,
                    name,
                    {keys.BIND_PHASE: "allocating", keys.BIND_TIME: str(int(parts.clocks.wall()))},
                    uid=uid,
                    resource_version=pod.metadata.resource_version or None,
                )
                version = patched.metadata.resource_version or None
        await _bind_version(parts, pod, node, version)
    except HamiError as err:
        return await _bind_failed(parts, pod, node, locked, err)
    return BindOutcome(Bound.BOUND, pod, node, binding_succeed_text(node, ns, name))


async def _bind_version(parts: CycleParts, pod: Pod, node: str, version: str | None) -> None:
    """The Binding, made conditional on ``version`` (the pod as hami's allocation write left it) when known.

    A Binding whose request timed out may still land later, after ``_bind_failed`` has read the pod unbound and
    removed its allocation: unconditional, it would bind a pod with no devices (or with devices hami has since
    given to another pod). With the precondition it lands only on the version carrying this allocation; any
    later write (the clean-up, a new /filter's allocation) makes it fail with 409. A 409 because someone else
    wrote to the pod meanwhile (a label, a status) is tried again on the fresh version, as long as that version
    still carries this bind's allocation on ``node``, unbound."""
    ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
    for _ in range(BIND_VERSION_ATTEMPTS - 1):
        try:
            await parts.port.bind(ns, name, uid, node, resource_version=version)
            return
        except Conflict:
            if version is None:
                raise
            fresh = await parts.port.get_pod(ns, name)
            if not _still_allocated(fresh, uid, node):
                raise
            version = fresh.metadata.resource_version or None
    await parts.port.bind(ns, name, uid, node, resource_version=version)


async def _lock(parts: CycleParts, node: str, pod: Pod, key: str = keys.NODE_LOCK, expiry: float | None = None) -> None:
    """Take the node lock ``key`` for ``pod``, waiting for a hand-over where one is coming.

    The lock is held from a bind until the node's device plugin has allocated for that pod, so a node takes one
    pod per hand-over. A bind that finds the node locked by *another hami bind in progress* (the holder is a
    pod this ledger placed on that node, whose device plugin has not finished: ``_handing_over``) waits up to
    ``bind_lock_wait`` for the hand-over instead of failing; a PodGroup member waits up to
    ``lock_retry_timeout`` for any holder, as HAMi v2.10 does. Any other holder (foreign, or stale: the
    locker takes over an expired lock or one whose holder is gone), or any other failure, fails at once.

    The wait goes through ``lock_waits`` (woken by the node watch as soon as the lock is released, one waiter
    per release) or, without it, pauses of ``lock_retry_interval``; every wait is reported to
    ``CycleObserver.lock_waited`` with how long it took and whether it ran out.
    """
    ns, name = pod.metadata.namespace, pod.metadata.name
    group = parts.settings.lock_retry_timeout if pod_group(pod) else 0.0
    started, paused, waited, turn = parts.clocks.stopwatch(), 0.0, False, False
    while True:
        locked = False
        try:
            await parts.port.lock_node(node, ns, name, key, expiry)
            locked = True
        except LockContention as err:
            budget = max(group, parts.settings.bind_lock_wait if _handing_over(parts, err.holder, node) else 0.0)
            elapsed = max(parts.clocks.stopwatch() - started, paused)
            if budget <= 0:  # not a hand-over (any more): a foreign or stale holder
                if waited:
                    parts.observer.lock_waited(elapsed, False)
                raise
            step = parts.settings.lock_retry_interval if parts.lock_waits is None else 0.0
            if elapsed + step > budget or (not step and elapsed >= budget):
                parts.observer.lock_waited(elapsed, True)
                raise LockContention(err.node, err.holder, err.since, err.timeout, waited=budget, key=err.key) from None
            holder = err.holder
        finally:
            if turn and parts.lock_waits is not None:
                parts.lock_waits.tried(node, locked, key)
        if locked:
            if waited:
                parts.observer.lock_waited(max(parts.clocks.stopwatch() - started, paused), False)
            return
        waited = True
        if parts.lock_waits is None:
            await parts.clocks.sleep(parts.settings.lock_retry_interval)
            paused += parts.settings.lock_retry_interval
        else:
            turn = await parts.lock_waits.wait(node, holder, budget - elapsed, key)


def _handing_over(parts: CycleParts, holder: str, node: str) -> bool:
    """Whether the lock on ``node`` is held by another hami bind in progress: a pod the ledger has on that node
    (reserved or committed by hami), whose device plugin has not reported a failure."""
    ns, _, name = holder.partition("/")
    if not name:
        return False  # a legacy lock names no owner: not known to be ours
    watched = parts.port.watched_pod(ns, name)
    if watched is None:
        return False
    record = parts.state.pods.get(watched.metadata.uid)
    if record is None or record.node != node or (record.namespace, record.name) != (ns, name):
        return False
    return watched.metadata.annotations.get(keys.BIND_PHASE) != "failed"


async def _bind_failed(parts: CycleParts, pod: Pod, node: str, locked: Sequence[str], err: HamiError) -> BindOutcome:
    ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
    fresh = await _fresh(parts, ns, name)
    if isinstance(fresh, ApiError):
        return await _bind_unknown(parts, pod, node, locked, err, fresh)
    ours = fresh if fresh is not None and fresh.metadata.uid == uid else None
    failed: list[ApiFailure] = []
    if ours is not None and ours.spec.node_name == node:
        # kube-scheduler retried a bind that had gone through (its request timed out): the pod runs there with
        # its allocation, so releasing anything now would free devices still in use.
        if locked and ours.metadata.annotations.get(keys.BIND_PHASE) in ("success", "failed"):
            failed += await _unlock(parts, node, ns, name, locked)
        return BindOutcome(Bound.ALREADY_BOUND, pod, node, api_errors=tuple(failed))
    if locked:
        failed += await _unlock(parts, node, ns, name, locked)
    if ours is not None and ours.spec.node_name:
        parts.forget(uid)  # bound elsewhere meanwhile: its annotations are not ours to remove
    else:
        failed += await release_allocation(parts, pod, uid, (ours.metadata.resource_version if ours else None) or None)
    message = f"binding {ns}/{name} to {node} failed: {err}"
    return BindOutcome(Bound.FAILED, pod, node, message, tuple(failed))


async def _bind_unknown(
    parts: CycleParts, pod: Pod, node: str, locked: Sequence[str], err: HamiError, unread: ApiError
) -> BindOutcome:
    """A failed bind whose pod cannot be read back (API down or restarting, throttled, not yet authorizing).

    The Binding may have landed before its answer was lost (a connection reset after the request went out):
    the pod may run on ``node`` with this allocation. Removing it now, guarded by the UID alone, would strip a
    bound pod (its device plugin finds nothing to allocate; the ledger frees devices in use). So the
    reservation and the annotations stay, and the clean-up runs in the background, where each try reads the
    pod first and removes the allocation only from an unbound version, guarded by that resourceVersion
    (``hami.scheduling.cleanup``). Our lock is released as on any failed bind (owner-checked); the ledger, not the
    lock, keeps devices from being handed out twice."""
    ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
    failed = [ApiFailure("get_pod", f"reading {pod.key} back after a failed bind failed: {unread}")]
    if locked:
        failed += await _unlock(parts, node, ns, name, locked)
    clear_later(parts, ns, name, uid)
    message = f"binding {ns}/{name} to {node} failed: {err}"
    return BindOutcome(Bound.FAILED, pod, node, message, tuple(failed))


async def _fresh(parts: CycleParts, ns: str, name: str) -> Pod | ApiError | None:
    """The pod as the API holds it now, ``None`` if there is none, or the error that kept it from being read."""
    try:
        return await parts.port.get_pod(ns, name)
    except NotFound:
        return None
    except ApiError as err:
        return err


async def _unlock(parts: CycleParts, node: str, ns: str, name: str, locked: Sequence[str]) -> list[ApiFailure]:
    """Release each lock taken (in reverse order); every failure is reported, none stops the others."""
    failed: list[ApiFailure] = []
    for key in reversed(locked):
        try:
            await parts.port.unlock_node(node, ns, name, key)
        except ApiError as err:
            what = "the lock" if key == keys.NODE_LOCK else f"the lock {key}"
            message = f"releasing {what} on {node} after a failed or repeated bind: {err}"
            failed.append(ApiFailure("unlock_node", message))
    return failed


def _refused(pod: Pod, node: str, reason: str) -> BindOutcome:
    return BindOutcome(Bound.REFUSED, pod, node, f"binding {pod.key} to {node} refused: {reason}")


def bind_refusal(pod: Pod, uid: str, node: str) -> BindRefusal | None:
    """Why a /bind of ``pod`` under ``uid`` to ``node`` must not go ahead, or ``None``; ``Refused.BOUND_THERE``
    when it is bound there already (then there is nothing to do)."""
    if pod.metadata.uid != uid:
        return BindRefusal(
            Refused.ANOTHER_POD,
            f"the request is for UID {uid}, but the pod of that name is UID {pod.metadata.uid} "
            "(deleted and re-created, or a stale or forged request)",
        )
    if pod.spec.node_name == node:
        return BindRefusal(Refused.BOUND_THERE, "already bound to that node")
    if pod.spec.node_name:
        return BindRefusal(Refused.BOUND_ELSEWHERE, f"the pod is already bound to node {pod.spec.node_name}")
    if pod.status.phase in NOT_PENDING:
        return BindRefusal(Refused.NOT_PENDING, f"the pod is {pod.status.phase}")
    return None


def _still_allocated(pod: Pod, uid: str, node: str) -> bool:
    """Whether ``pod`` is the pod ``uid``, unbound, holding devices that hami allocated on ``node``."""
    return (
        pod.metadata.uid == uid
        and not pod.spec.node_name
        and pod.metadata.annotations.get(keys.VGPU_NODE) == node
        and holds_devices(pod)
    )
