"""Removing a pod's allocation: the annotations first, then the reservation; a removal that fails is retried in the
background with a doubling pause until it lands or is moot (``CycleParts.cleanups``), each retry reported to
``CycleObserver.cleanup_retried`` as a ``Cleanup``.

Every removal names the pod by UID, and a retry also by the resourceVersion it read: it never strips a pod that
was bound meanwhile, nor another pod of the same name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from hami.devices.base import Vendor
from hami.errors import ApiError, NotFound, PodReplaced
from hami.protocol import keys
from hami.protocol.objects import Pod
from hami.scheduling.outcomes import ApiFailure, Cleanup, Cleared
from hami.scheduling.parts import CycleParts
from hami.scheduling.records import holds_devices

__all__ = ["clear_later", "pod_gone", "release_allocation"]


async def release_allocation(parts: CycleParts, pod: Pod, uid: str, guard: str | None = None) -> tuple[ApiFailure, ...]:
    """Remove the annotations that hold the pod's devices, then the reservation; returns the failed operations.

    The removal is written only to the pod with ``uid`` and, with ``guard``, only to that resourceVersion of
    it (the version read when deciding it holds no devices in use). The reservation is dropped once the
    annotations are gone, so the ledger never frees what the API still shows allocated; if the write fails
    (throttled, API down, the pod changed meanwhile) it is retried in the background until it lands or is no
    longer needed (``clear_later``)."""
    parts.cancel_cleanup(uid)
    ns, name = pod.metadata.namespace, pod.metadata.name
    try:
        await _clear(parts, ns, name, uid, guard)
    except ApiError as err:
        if pod_gone(err):
            parts.forget(uid)
            return ()
        clear_later(parts, ns, name, uid)
        return (ApiFailure("patch_pod", f"clearing the allocation of {pod.key} failed: {err}; retrying"),)
    parts.forget(uid)
    return ()


def clear_later(parts: CycleParts, ns: str, name: str, uid: str) -> None:
    """Retry the clean-up of the pod's allocation in the background (``cleanups``), the reservation kept."""
    parts.cancel_cleanup(uid)
    task = asyncio.get_running_loop().create_task(_clear_until_done(parts, ns, name, uid), name=f"clear-{uid}")
    parts.cleanups[uid] = task
    task.add_done_callback(lambda done: _cleanup_done(parts, ns, name, uid, done))


def pod_gone(err: ApiError) -> bool:
    """No pod with the UID written against exists: not found, or the UID precondition failed."""
    return isinstance(err, NotFound | PodReplaced)


async def _clear(parts: CycleParts, ns: str, name: str, uid: str, guard: str | None) -> None:
    removals: dict[str, str | None] = dict.fromkeys(
        (keys.VGPU_NODE, keys.VGPU_TIME, keys.BIND_PHASE, keys.BIND_TIME, *_extra_keys(parts.vendors))
    )
    for vendor in parts.vendors.values():
        removals[vendor.keys.allocated] = None
        if vendor.keys.to_allocate:
            removals[vendor.keys.to_allocate] = None
    await parts.port.patch_pod_metadata(ns, name, removals, {keys.VGPU_NODE: None}, uid=uid, resource_version=guard)


async def _clear_until_done(parts: CycleParts, ns: str, name: str, uid: str) -> None:
    """Retry a clean-up with a doubling pause (``CycleSettings.cleanup_backoff``) until it lands or is moot."""
    delay, longest = parts.settings.cleanup_backoff
    while True:
        await parts.clocks.sleep(delay)
        delay = min(longest, delay * 2)
        cleanup = await _clear_again(parts, ns, name, uid)
        parts.observer.cleanup_retried(cleanup)
        if cleanup.result is not Cleared.RETRYING:
            return


async def _clear_again(parts: CycleParts, ns: str, name: str, uid: str) -> Cleanup:
    """One retry: read the pod, then remove its allocation only from the version read, only while it is still
    unbound and still the pod ``uid``."""
    try:
        pod = await parts.port.get_pod(ns, name)
    except NotFound:
        pod = None
    except ApiError as err:
        return Cleanup(Cleared.RETRYING, ns, name, uid, f"reading the pod failed: {err}")
    if pod is None or pod.metadata.uid != uid:
        parts.forget(uid)
        return Cleanup(Cleared.GONE, ns, name, uid)
    if pod.spec.node_name or not holds_devices(pod):
        return Cleanup(Cleared.MOOT, ns, name, uid)
    try:
        await _clear(parts, ns, name, uid, pod.metadata.resource_version or None)
    except ApiError as err:
        if not pod_gone(err):
            return Cleanup(Cleared.RETRYING, ns, name, uid, str(err))
        parts.forget(uid)
        return Cleanup(Cleared.GONE, ns, name, uid)
    parts.forget(uid)
    return Cleanup(Cleared.LANDED, ns, name, uid)


def _cleanup_done(parts: CycleParts, ns: str, name: str, uid: str, task: asyncio.Task[None]) -> None:
    if parts.cleanups.get(uid) is task:
        del parts.cleanups[uid]
    if not task.cancelled() and task.exception() is not None:
        parts.observer.cleanup_retried(Cleanup(Cleared.CRASHED, ns, name, uid, repr(task.exception())))


def _extra_keys(vendors: Mapping[str, Vendor]) -> list[str]:
    return [key for vendor in vendors.values() for key in vendor.keys.extra]
