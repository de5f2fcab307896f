"""Dynamic MIG on the node: the GPU and compute instances behind ``hami.io/vgpu-mig-allocations``.

The scheduler reserves, for each device of a MIG pod, a profile and a placement on a MIG-mode GPU (scheduler-core.md
§2.6, §6.8). At Allocate the plugin makes that reservation real (:meth:`MigInstances.realise`):

1. the reservation already names an instance (``migUUID``, ``gpuInstanceID``, ``computeInstanceID``) that exists
   with that profile and placement → it is **reused** (a retried Allocate, a pod admitted again);
2. else an instance of that profile at exactly that placement that no other live pod holds is **adopted** (one
   created by an Allocate whose annotation write failed, or one left by a finished pod);
3. else instances overlapping the placement that no live pod holds are **destroyed**, and the GPU instance is
   **created** at the placement with one compute instance spanning it. An overlapping instance a live pod holds
   refuses the allocation: never two pods on one slice.

Reconciliation (:meth:`MigInstances.reconcile`, at start-up and then periodically) destroys every instance that no
live pod holds: "held" means a pod on this node that has not finished (phase neither ``Succeeded`` nor
``Failed``) names the instance in its runtime identity, or still waits for Allocate with a reservation of that
profile at that placement. Instances a running pod holds survive a plugin restart untouched.

:func:`holders` and :func:`unheld` are pure; :class:`MigInstances` does the NVML calls (blocking: callers run it
in a worker thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from hami.deviceplugin.discovery import GpuInfo, GpuSource
from hami.deviceplugin.nvml import GpuInstanceProfile, MigInstance, NvmlLib
from hami.errors import AnnotationError, MigError, NvmlError
from hami.protocol import keys
from hami.protocol.allocation import MigAllocation, decode_mig_allocations
from hami.protocol.objects import Pod

__all__ = ["FINISHED_PHASES", "Holders", "MigInstances", "Realised", "holders", "unheld"]

log = logging.getLogger(__name__)

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
"""A pod in one of these phases has stopped its containers: its MIG instances are free."""


@dataclass(frozen=True, slots=True)
class Holders:
    """Who holds what on this node: instances by (GPU UUID, GPU instance id), reservations not yet realised by
    (GPU UUID, profile name, placement start, size). Values name the pod."""

    instances: Mapping[tuple[str, int], str]
    reservations: Mapping[tuple[str, str, int, int], str]


def holders(pods: Iterable[Pod], *, skip_uid: str = "") -> Holders:
    """The MIG holdings of the pods that have not finished (``skip_uid``: leave that pod out). A pod whose
    annotation cannot be decoded holds nothing, and is logged."""
    instances: dict[tuple[str, int], str] = {}
    reservations: dict[tuple[str, str, int, int], str] = {}
    for pod in pods:
        if pod.status.phase in FINISHED_PHASES or (skip_uid and pod.metadata.uid == skip_uid):
            continue
        value = pod.metadata.annotations.get(keys.NVIDIA_MIG_ALLOCATIONS)
        if not value:
            continue
        try:
            entries = decode_mig_allocations(value)
        except AnnotationError as exc:
            log.warning("pod %s: ignoring its MIG allocations: %s", pod.key, exc)
            continue
        for entry in entries:
            if entry.runtime_ready and entry.gpu_instance_id is not None:
                instances[(entry.gpu_uuid, entry.gpu_instance_id)] = pod.key
            else:
                reservations[(entry.gpu_uuid, entry.profile, entry.placement.start, entry.placement.size)] = pod.key
    return Holders(instances, reservations)


def unheld(
    gpu_uuid: str, existing: Sequence[MigInstance], profiles: Sequence[GpuInstanceProfile], held: Holders
) -> list[MigInstance]:
    """The instances of one GPU that nobody holds (reconciliation destroys them)."""
    names = {p.profile_id: p.name for p in profiles}
    free = []
    for instance in existing:
        if (gpu_uuid, instance.gpu_instance_id) in held.instances:
            continue
        start, size = instance.placement
        if (gpu_uuid, names.get(instance.profile_id, ""), start, size) in held.reservations:
            continue
        free.append(instance)
    return free


@dataclass(frozen=True, slots=True)
class Realised:
    """A reservation made real: the annotation entry with its runtime identity, and whether it was created now."""

    entry: MigAllocation
    created: bool


def _fits(instance: MigInstance, profile: GpuInstanceProfile, placement: tuple[int, int]) -> bool:
    """The instance is of ``profile`` at ``placement`` and complete (compute instance and MIG UUID)."""
    return (
        instance.profile_id == profile.profile_id
        and instance.placement == placement
        and instance.compute_instance_id is not None
        and bool(instance.mig_uuid)
    )


def _reusable(
    gpu: GpuInfo,
    entry: MigAllocation,
    profile: GpuInstanceProfile,
    placement: tuple[int, int],
    held: Holders,
    existing: Sequence[MigInstance],
    where: str,
) -> MigInstance | None:
    """The instance a runtime-ready entry names, if it is still there, still fits and no other pod holds it."""
    if not entry.runtime_ready:
        return None
    same = next((i for i in existing if i.gpu_instance_id == entry.gpu_instance_id), None)
    if (
        same is None
        or not _fits(same, profile, placement)
        or same.mig_uuid != entry.mig_uuid
        or (gpu.uuid, same.gpu_instance_id) in held.instances
    ):
        return None
    log.info("%s: reusing GPU instance %d (%s)", where, same.gpu_instance_id, same.mig_uuid)
    return same


def _adoptable(
    gpu: GpuInfo,
    profile: GpuInstanceProfile,
    placement: tuple[int, int],
    held: Holders,
    existing: Sequence[MigInstance],
    where: str,
) -> MigInstance | None:
    """An unheld instance that fits exactly; refuses when an overlapping one is held by a pod."""
    for instance in existing:
        if not _overlaps(instance.placement, placement):
            continue
        holder = held.instances.get((gpu.uuid, instance.gpu_instance_id))
        if holder is not None:
            raise MigError(f"{where}: GPU instance {instance.gpu_instance_id} there is held by pod {holder}")
        if _fits(instance, profile, placement):
            log.info("%s: adopting unheld GPU instance %d (%s)", where, instance.gpu_instance_id, instance.mig_uuid)
            return instance
    return None


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


class MigInstances:
    """NVML's MIG instances on this node's GPUs. ``gpus`` returns the GPUs discovered now."""

    def __init__(self, source: GpuSource, gpus: Callable[[], Sequence[GpuInfo]]) -> None:
        self._source = source
        self._gpus = gpus

    def _gpu(self, uuid: str) -> GpuInfo:
        gpu = next((g for g in self._gpus() if g.uuid == uuid), None)
        if gpu is None:
            raise MigError(f"GPU {uuid} is not on this node")
        if not gpu.mig_enabled:
            raise MigError(f"GPU {uuid} is not in MIG mode")
        return gpu

    def realise(self, entry: MigAllocation, held: Holders) -> Realised:
        """Make one reservation real (module docstring). ``held`` must leave out the pod being allocated."""
        gpu = self._gpu(entry.gpu_uuid)
        placement = (entry.placement.start, entry.placement.size)
        where = f"MIG {entry.profile} at slices {placement[0]}+{placement[1]} of GPU {gpu.uuid}"
        profile = next((p for p in gpu.mig_profiles if p.name == entry.profile), None)
        if profile is None:
            raise MigError(f"{where}: the GPU has no profile {entry.profile!r}")
        if placement not in profile.placements:
            legal = ", ".join(f"{s}+{n}" for s, n in profile.placements)
            raise MigError(f"{where}: not a placement of {profile.name} (possible: {legal})")
        return self._source.call(lambda lib: self._realise(lib, gpu, entry, profile, placement, held, where))

    def _realise(
        self,
        lib: NvmlLib,
        gpu: GpuInfo,
        entry: MigAllocation,
        profile: GpuInstanceProfile,
        placement: tuple[int, int],
        held: Holders,
        where: str,
    ) -> Realised:
        """Reuse the instance the entry names, else adopt an unheld one that fits, else clear the way and create."""
        handle = lib.handle(gpu.index)
        existing = lib.mig_instances(handle)
        found = _reusable(gpu, entry, profile, placement, held, existing, where)
        if found is None:
            found = _adoptable(gpu, profile, placement, held, existing, where)
        if found is not None:
            return Realised(_with_identity(entry, found), created=False)
        for instance in existing:
            if _overlaps(instance.placement, placement):
                log.info("%s: destroying unheld GPU instance %d in the way", where, instance.gpu_instance_id)
                lib.destroy_mig_instance(handle, instance.gpu_instance_id)
        try:
            created = lib.create_mig_instance(handle, profile.profile_id, placement)
        except NvmlError as exc:
            raise MigError(f"{where}: cannot create the GPU instance: {exc}") from exc
        log.info(
            "%s: created GPU instance %d, compute instance %s (%s)",
            where,
            created.gpu_instance_id,
            created.compute_instance_id,
            created.mig_uuid,
        )
        return Realised(_with_identity(entry, created), created=True)

    def destroy(self, entry: MigAllocation) -> None:
        """Destroy the instance an entry names (undoing a creation). A missing instance is fine."""
        if entry.gpu_instance_id is None:
            return
        gpu = self._gpu(entry.gpu_uuid)
        gi = entry.gpu_instance_id

        def destroy(lib: NvmlLib) -> None:
            try:
                lib.destroy_mig_instance(lib.handle(gpu.index), gi)
            except NvmlError as exc:
                if exc.code != "NOT_FOUND":
                    raise

        self._source.call(destroy)

    def reconcile(self, held: Holders) -> list[str]:
        """Destroy every instance nobody holds on every MIG GPU; returns what was destroyed. A GPU whose
        instances cannot be listed or destroyed is logged and skipped (tried again next time)."""
        destroyed: list[str] = []
        for gpu in self._gpus():
            if not gpu.mig_enabled:
                continue

            def sweep(lib: NvmlLib, gpu: GpuInfo = gpu) -> list[str]:
                handle = lib.handle(gpu.index)
                gone = []
                for instance in unheld(gpu.uuid, lib.mig_instances(handle), gpu.mig_profiles, held):
                    lib.destroy_mig_instance(handle, instance.gpu_instance_id)
                    gone.append(f"{gpu.uuid}/GI {instance.gpu_instance_id} ({instance.mig_uuid or 'no MIG device'})")
                return gone

            try:
                destroyed.extend(self._source.call(sweep))
            except NvmlError as exc:
                log.warning("GPU %s: MIG reconciliation failed: %s", gpu.uuid, exc)
        return destroyed


def _with_identity(entry: MigAllocation, instance: MigInstance) -> MigAllocation:
    return msgspec.structs.replace(
        entry,
        mig_uuid=instance.mig_uuid,
        gpu_instance_id=instance.gpu_instance_id,
        compute_instance_id=instance.compute_instance_id,
    )
