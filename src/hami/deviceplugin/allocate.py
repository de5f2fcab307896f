"""kubelet's ``Allocate``: hand a container the GPUs the scheduler chose for it (webhook §6.2).

One call, under one process-wide lock:

1. **find** the pod being bound here (:meth:`Allocator.pending_pod`): the node lock's holder if it checks out
   — on this node, ``Pending``, ``hami.io/bind-phase=allocating``, carrying NVIDIA allocation annotations with a
   container left to serve — else the oldest pod on this node that checks out the same way;
2. **take** the next non-empty container slot of ``hami.io/vgpu-devices-to-allocate`` per container request
   (slots are positional: init containers first), checking the device count kubelet asks for;
3. **MIG** (a pod with ``hami.io/vgpu-mig-allocations``, on a node in ``mig`` operating mode): make each taken
   device's reservation real — reuse, adopt or create its GPU and compute instance (:mod:`.mig`);
4. **answer** with the scheduler's UUIDs and HAMi-core's env and mounts, or for MIG with the MIG device UUIDs
   only (:mod:`.response`);
5. **commit**: write the annotation back with the taken slots emptied (and the MIG reservations with their
   runtime identity), and when no vendor has a slot left set ``bind-phase=success`` in the same patch and
   release the node lock (owner-checked);
6. on any error after the pod is found: destroy the MIG instances this call created, ``bind-phase=failed``,
   release the lock (owner-checked), and fail the call with a message naming the pod.

Differences from HAMi (spec §11 items 13–14), each deliberate:

* the rewritten annotation keeps its length: ``A:;B:;`` → ``;B:;`` → ``;;`` (HAMi adds one ``;`` per rewrite);
* "all allocated" is decided by decoding every vendor's to-allocate annotation, not by searching for ``NVIDIA``;
  a pod that still waits for another vendor's plugin keeps ``allocating`` and its lock;
* the lock holder is verified before use, so another vendor's pod holding the shared lock is never failed;
* a pod with nothing left for NVIDIA is never chosen, so a retried or late call cannot fail a bound pod;
* a MIG instance is created only where no live pod holds an overlapping one, and the instances a failed call
  created are destroyed again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from hami.deviceplugin import kubeletapi as api
from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.mig import MigInstances, holders
from hami.deviceplugin.response import HostFiles, container_response, mig_container_response
from hami.deviceplugin.settings import NodeSettings
from hami.devices import registered_keys
from hami.errors import AllocationError, AllocationFailure, AnnotationError, ApiError, HamiError, MigError, NotFound
from hami.k8s.cluster import ClusterClient
from hami.k8s.nodelock import NodeLocker
from hami.protocol import keys
from hami.protocol.allocation import (
    ContainerDevices,
    MigAllocation,
    PodDevices,
    decode_mig_allocations,
    decode_pod_devices,
    encode_mig_allocations,
    encode_pod_devices,
)
from hami.protocol.bindphase import BindPhase
from hami.protocol.nodelock import decode_node_lock
from hami.protocol.objects import Container, Pod

__all__ = [
    "ALL_VENDOR_KEYS",
    "Allocator",
    "PodsOnNode",
    "containers_in_slot_order",
    "take_slots",
    "vendor_work_left",
]

log = logging.getLogger(__name__)

ALL_VENDOR_KEYS = registered_keys()
"""Every vendor whose to-allocate annotation can hold work for a device plugin."""

PodsOnNode = Callable[[str], Awaitable[Sequence[Pod]]]
"""``node name → pods whose spec.nodeName is that node`` (a field-selector list, or the memory cluster)."""


@dataclass(frozen=True, slots=True)
class Grant:
    """The devices of one container slot, handed to one kubelet container request."""

    slot: int
    container: Container | None
    devices: ContainerDevices
    mig_uuids: tuple[str, ...] = ()  # MIG pods: the MIG device of each device, in order


def containers_in_slot_order(pod: Pod) -> list[Container]:
    """The pod's containers in allocation-annotation order: init containers first, then app containers."""
    return [*pod.spec.init_containers, *pod.spec.containers]


def take_slots(devices: PodDevices, wanted: Sequence[int]) -> tuple[list[tuple[int, ContainerDevices]], PodDevices]:
    """For each request (the number of devices kubelet allocates to one container), take the next non-empty
    slot. Returns the taken ``(slot index, devices)`` and the slots with those emptied (same length).

    Raises ``AllocationError`` when no slot is left or the device count differs from the slot's.
    """
    remaining = list(devices)
    taken = []
    for position, count in enumerate(wanted):
        slot = next((i for i, slot in enumerate(remaining) if slot), None)
        if slot is None:
            raise AllocationError(
                AllocationFailure.BAD_REQUEST, f"container request {position}: no container slot left"
            )
        if len(remaining[slot]) != count:
            raise AllocationError(
                AllocationFailure.BAD_REQUEST,
                f"device number not matched: container slot {slot} has {len(remaining[slot])} GPU(s), "
                f"kubelet asks for {count}",
            )
        taken.append((slot, remaining[slot]))
        remaining[slot] = ()
    return taken, tuple(remaining)


def vendor_work_left(annotations: dict[str, str], overrides: dict[str, str] | None = None) -> list[str]:
    """The vendors whose to-allocate annotation still has a non-empty slot (``overrides`` replaces values about
    to be written). An undecodable value counts as work left: another plugin owns it and will fail it."""
    values = {**annotations, **(overrides or {})}
    left = []
    for vendor in ALL_VENDOR_KEYS:
        field = vendor.to_allocate
        value = values.get(field) if field else None
        if not field or not value:
            continue
        try:
            if any(decode_pod_devices(value, field)):
                left.append(vendor.vendor)
        except AnnotationError:
            left.append(vendor.vendor)
    return left


class Allocator:
    """Serves Allocate and GetPreferredAllocation for one node (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterClient,
        pods_on_node: PodsOnNode,
        locker: NodeLocker,
        *,
        node_name: str,
        settings: NodeSettings,
        host: HostFiles,
        new_cache_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        gpus: Callable[[], Sequence[GpuInfo]] = tuple,
        mig: MigInstances | None = None,
        mig_changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._cluster = cluster
        self._pods_on_node = pods_on_node
        self._locker = locker
        self._node = node_name
        self._settings = settings
        self._host = host
        self._new_cache_id = new_cache_id
        self._gpus = gpus
        self._mig = mig
        self._mig_changed = mig_changed
        self._mutex = asyncio.Lock()

    # --- finding the pod ----------------------------------------------------------------------------------

    def _why_not_ours(self, pod: Pod) -> str | None:
        """Why ``pod`` is not an NVIDIA pod being bound on this node, or ``None`` if it is."""
        notes = pod.metadata.annotations
        nvidia = keys.NVIDIA_KEYS
        assert nvidia.to_allocate is not None
        if pod.spec.node_name != self._node or notes.get(keys.VGPU_NODE) != self._node:
            return "not assigned to this node"
        if pod.status.phase != "Pending":
            return f"phase is {pod.status.phase or 'unknown'}"
        if notes.get(keys.BIND_PHASE) != BindPhase.ALLOCATING:
            return f"bind-phase is {notes.get(keys.BIND_PHASE) or 'absent'}"
        if nvidia.to_allocate not in notes and nvidia.allocated not in notes:
            return "it has no NVIDIA allocation"
        return _nothing_left(notes.get(nvidia.to_allocate), nvidia.to_allocate)

    async def pending_pod(self) -> Pod:
        """The pod being bound on this node (module docstring, step 1). Raises ``AllocationError(NO_POD)``."""
        node = await self._cluster.get_node(self._node)
        value = node.metadata.annotations.get(keys.NODE_LOCK)
        if value:
            try:
                lock = decode_node_lock(value)
            except AnnotationError as exc:
                log.warning(
                    "node %s: unreadable node lock, looking for the pod by its annotations: %s", self._node, exc
                )
            else:
                if lock.has_owner:
                    try:
                        holder = await self._cluster.get_pod(lock.namespace, lock.name)
                    except NotFound:
                        log.info("node lock holder %s/%s no longer exists", lock.namespace, lock.name)
                    else:
                        why = self._why_not_ours(holder)
                        if why is None:
                            return holder
                        log.info("node lock holder %s is not an NVIDIA pod being bound here: %s", holder.key, why)
        candidates = [pod for pod in await self._pods_on_node(self._node) if self._why_not_ours(pod) is None]
        if not candidates:
            raise AllocationError(AllocationFailure.NO_POD, f"no binding pod found on node {self._node}")
        candidates.sort(key=lambda pod: (_bind_time(pod), pod.key))
        return candidates[0]

    # --- Allocate -----------------------------------------------------------------------------------------

    async def allocate(self, requests: Sequence[Sequence[str]]) -> list[api.ContainerAllocateResponse]:
        """Answer kubelet's container requests (each a list of fake device IDs), in order."""
        async with self._mutex:
            try:
                pod = await self.pending_pod()
            except AllocationError:
                raise
            except HamiError as exc:
                raise _as_allocation_error(exc, "finding the pod to allocate for") from exc
            created: list[MigAllocation] = []
            try:
                grants, remaining = self._plan(pod, [len(ids) for ids in requests])
                mig_value = None
                if self._is_mig(pod):
                    grants, mig_value = await self._realise_mig(pod, grants, created)
                responses = [self._respond(pod, grant) for grant in grants]
                await self._commit(pod, remaining, mig_value)
            except Exception as exc:
                await self._undo(created)
                await self._fail(pod, exc)
                raise _as_allocation_error(exc, f"pod {pod.key}") from exc
            log.info(
                "allocated %s to pod %s",
                "; ".join(f"{g.container.name if g.container else g.slot}={_uuids(g)}" for g in grants),
                pod.key,
            )
            return responses

    def _plan(self, pod: Pod, wanted: list[int]) -> tuple[list[Grant], PodDevices]:
        field = keys.NVIDIA_KEYS.to_allocate
        assert field is not None
        value = pod.metadata.annotations.get(field)
        if value is None:
            raise AllocationError(
                AllocationFailure.BAD_REQUEST, f"device request not found: pod has no {field} annotation"
            )
        devices = decode_pod_devices(value, field)
        taken, remaining = take_slots(devices, wanted)
        containers = containers_in_slot_order(pod)
        grants = [Grant(slot, containers[slot] if slot < len(containers) else None, ctr) for slot, ctr in taken]
        return grants, remaining

    # --- MIG ----------------------------------------------------------------------------------------------

    def _is_mig(self, pod: Pod) -> bool:
        """Whether this allocation is a MIG one; refuses a mismatch between the pod and the node's mode."""
        has_mig = bool(pod.metadata.annotations.get(keys.NVIDIA_MIG_ALLOCATIONS))
        mig_node = self._settings.operating_mode == "mig"
        if has_mig and not mig_node:
            raise AllocationError(
                AllocationFailure.BAD_REQUEST,
                f"the pod carries {keys.NVIDIA_MIG_ALLOCATIONS} but node {self._node} is in "
                f"{self._settings.operating_mode} operating mode",
            )
        if mig_node and not has_mig:
            raise AllocationError(
                AllocationFailure.BAD_REQUEST,
                f"node {self._node} is in mig operating mode but the pod has no {keys.NVIDIA_MIG_ALLOCATIONS} "
                "reservation (was it placed by a scheduler without dynamic MIG?)",
            )
        return mig_node

    async def _realise_mig(
        self, pod: Pod, grants: list[Grant], created: list[MigAllocation]
    ) -> tuple[list[Grant], str]:
        """Make the MIG reservations of the taken slots real; returns the grants with their MIG UUIDs and the
        annotation value with the runtime identities. Appends what it creates to ``created``."""
        if self._mig is None:
            raise AllocationError(AllocationFailure.INTERNAL, "MIG instances are not available on this plugin")
        entries = decode_mig_allocations(pod.metadata.annotations[keys.NVIDIA_MIG_ALLOCATIONS])
        index = {(e.container_index, e.device_index): i for i, e in enumerate(entries)}
        held = holders(await self._pods_on_node(self._node), skip_uid=pod.metadata.uid)
        mine = dict(held.instances)
        realised_grants = []
        for grant in grants:
            uuids = []
            for position, device in enumerate(grant.devices):
                at = index.get((grant.slot, position))
                if at is None:
                    raise AllocationError(
                        AllocationFailure.BAD_REQUEST,
                        f"container slot {grant.slot} device {position} ({device.uuid}) has no MIG reservation in "
                        f"{keys.NVIDIA_MIG_ALLOCATIONS}",
                    )
                entry = entries[at]
                if entry.gpu_uuid != device.uuid:
                    raise AllocationError(
                        AllocationFailure.BAD_REQUEST,
                        f"container slot {grant.slot} device {position}: the MIG reservation is on "
                        f"{entry.gpu_uuid}, the allocation on {device.uuid}",
                    )
                try:
                    result = await asyncio.to_thread(
                        self._mig.realise, entry, dataclasses.replace(held, instances=dict(mine))
                    )
                except MigError as exc:
                    raise AllocationError(AllocationFailure.BAD_REQUEST, str(exc)) from exc
                if result.created:
                    created.append(result.entry)
                assert result.entry.gpu_instance_id is not None
                assert result.entry.mig_uuid is not None
                mine[(entry.gpu_uuid, result.entry.gpu_instance_id)] = pod.key
                entries[at] = result.entry
                uuids.append(result.entry.mig_uuid)
            realised_grants.append(dataclasses.replace(grant, mig_uuids=tuple(uuids)))
        if created and self._mig_changed is not None:
            await self._mig_changed()
        return realised_grants, encode_mig_allocations(entries)

    async def _undo(self, created: list[MigAllocation]) -> None:
        """Destroy the instances a failed call created (a failure is logged: reconciliation retries)."""
        if not created or self._mig is None:
            return
        for entry in created:
            try:
                await asyncio.to_thread(self._mig.destroy, entry)
                log.info("destroyed MIG instance %s again (GI %s)", entry.mig_uuid, entry.gpu_instance_id)
            except HamiError as exc:
                log.error("cannot destroy MIG instance %s: %s", entry.mig_uuid, exc)
        if self._mig_changed is not None:
            await self._mig_changed()

    async def reconcile_mig(self) -> list[str]:
        """Destroy the MIG instances no live pod on this node holds (module :mod:`.mig`). Does nothing when the
        pods cannot be listed: an instance is never destroyed on a guess."""
        if self._mig is None:
            return []
        async with self._mutex:
            try:
                pods = await self._pods_on_node(self._node)
            except HamiError as exc:
                log.warning("MIG reconciliation skipped, cannot list the pods on %s: %s", self._node, exc)
                return []
            destroyed = await asyncio.to_thread(self._mig.reconcile, holders(pods))
            for text in destroyed:
                log.info("destroyed MIG instance nobody holds: %s", text)
            if destroyed and self._mig_changed is not None:
                await self._mig_changed()
            return destroyed

    # --- the answer and the commit ------------------------------------------------------------------------

    def _minors(self) -> dict[str, int]:
        return {g.uuid: g.minor for g in self._gpus() if g.minor is not None}

    def _respond(self, pod: Pod, grant: Grant) -> api.ContainerAllocateResponse:
        if grant.mig_uuids:
            minors = self._minors()
            by_mig = {
                m: minors[d.uuid] for m, d in zip(grant.mig_uuids, grant.devices, strict=True) if d.uuid in minors
            }
            return mig_container_response(grant.mig_uuids, self._settings, by_mig)
        name = grant.container.name if grant.container is not None else str(grant.slot)
        directory = self._host.on_host(self._host.container_dir(pod.metadata.uid, name))
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, mode=0o777)
        return container_response(
            grant.devices,
            pod_uid=pod.metadata.uid,
            container=grant.container,
            settings=self._settings,
            host=self._host,
            new_cache_id=self._new_cache_id,
            minors=self._minors(),
        )

    async def _commit(self, pod: Pod, remaining: PodDevices, mig_value: str | None = None) -> None:
        field = keys.NVIDIA_KEYS.to_allocate
        assert field is not None
        update = {field: encode_pod_devices(remaining)}
        if mig_value:
            update[keys.NVIDIA_MIG_ALLOCATIONS] = mig_value
        waiting_for = vendor_work_left(pod.metadata.annotations, update)
        done = not waiting_for
        patch: dict[str, str | None] = {**update, keys.BIND_PHASE: BindPhase.SUCCESS.value} if done else dict(update)
        await self._cluster.patch_pod_metadata(
            pod.metadata.namespace, pod.metadata.name, annotations=patch, uid=pod.metadata.uid
        )
        if not done:
            log.info(
                "pod %s: keeping bind-phase %s, waiting for %s", pod.key, BindPhase.ALLOCATING, ", ".join(waiting_for)
            )
            return
        await self._release(pod)

    async def _fail(self, pod: Pod, cause: BaseException) -> None:
        log.error("allocation for pod %s failed: %s", pod.key, cause)
        try:
            await self._cluster.patch_pod_metadata(
                pod.metadata.namespace,
                pod.metadata.name,
                annotations={keys.BIND_PHASE: BindPhase.FAILED.value},
                uid=pod.metadata.uid,
            )
        except HamiError as exc:
            log.error("pod %s: cannot set bind-phase %s: %s", pod.key, BindPhase.FAILED, exc)
        await self._release(pod)

    async def _release(self, pod: Pod) -> None:
        """Release the node lock if this pod owns it. A failure is logged: the lock then expires on its own."""
        try:
            released = await self._locker.release(self._node, pod.metadata.namespace, pod.metadata.name)
        except HamiError as exc:
            log.error("node %s: cannot release the node lock of pod %s: %s", self._node, pod.key, exc)
            return
        if released:
            log.info("node %s: released the node lock of pod %s", self._node, pod.key)

    # --- GetPreferredAllocation ---------------------------------------------------------------------------

    async def preferred(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        """Fake device IDs for one container that name the GPUs the scheduler chose, so kubelet's own
        bookkeeping matches reality. Falls back to kubelet's order when the pod or its slot cannot be read."""
        chosen = [*must_include]
        try:
            async with self._mutex:
                pod = await self.pending_pod()
            field = keys.NVIDIA_KEYS.to_allocate
            assert field is not None
            slots = decode_pod_devices(pod.metadata.annotations.get(field, ""), field)
            wanted = next((slot for slot in slots if slot), ())
        except HamiError as exc:
            log.info("GetPreferredAllocation: using kubelet's order (%s)", exc)
            wanted = ()
        for device in wanted:
            if len(chosen) >= size:
                break
            match = next((d for d in available if d.startswith(f"{device.uuid}-") and d not in chosen), None)
            if match is not None:
                chosen.append(match)
        chosen.extend(d for d in available if d not in chosen)
        return chosen[:size]


def _bind_time(pod: Pod) -> int:
    try:
        return int(pod.metadata.annotations.get(keys.BIND_TIME, ""))
    except ValueError:
        return 0


def _uuids(grant: Grant) -> str:
    return ",".join(grant.mig_uuids or tuple(d.uuid for d in grant.devices))


def _as_allocation_error(exc: BaseException, doing: str) -> AllocationError:
    """``exc`` as an ``AllocationError`` whose message says what was being done (and for which pod)."""
    if isinstance(exc, AllocationError):
        failure, text = exc.failure, str(exc)
    elif isinstance(exc, AnnotationError):
        failure, text = AllocationFailure.BAD_REQUEST, str(exc)
    elif isinstance(exc, ApiError):
        failure, text = AllocationFailure.API, str(exc)
    else:
        failure, text = AllocationFailure.INTERNAL, f"{type(exc).__name__}: {exc}"
    return AllocationError(failure, f"{doing}: {text}")


def _nothing_left(value: str | None, key: str) -> str | None:
    """Why a pod's to-allocate annotation leaves nothing to allocate, or ``None`` (also when it is undecodable:
    the pod is ours, and Allocate fails it)."""
    if value is None:
        return None
    try:
        if not any(decode_pod_devices(value, key)):
            return "every NVIDIA container slot is already allocated"
    except AnnotationError:
        return None
    return None
