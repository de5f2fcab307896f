"""Pod device allocation annotations (scheduler-core.md §2.5, §2.6, §6.9).

Codec functions (filled in by the protocol work):

* ``decode_pod_devices(value, field) -> PodDevices`` — one tuple per container, init containers first;
  empty containers are kept in place. HAMi writes ``;`` after every container, so the empty piece after the
  final ``;`` is a separator artifact, not a container: ``"a:;"`` is one container, ``";a:;"`` two, ``""`` none.
  Then ``encode_pod_devices(decode_pod_devices(x)) == x`` for every value HAMi writes.
* ``encode_pod_devices(devices) -> str``
* ``decode_mig_allocations(value, field=NVIDIA_MIG_ALLOCATIONS) -> list[MigAllocation]`` /
  ``encode_mig_allocations(...) -> str`` (compact JSON, HAMi's key order, runtime fields omitted when None)
* ``split_legacy_mig_uuid(uuid) -> tuple[str, tuple[int, int] | None]`` — ``GPU-x[7-9]`` → ``("GPU-x", (7, 9))``
"""

from __future__ import annotations

import msgspec

from hami.protocol.inventory import MigPlacement

__all__ = ["ContainerDevice", "ContainerDevices", "MigAllocation", "PodDevices"]


class ContainerDevice(msgspec.Struct, frozen=True):
    """One device reserved for one container. ``type`` is the vendor key (``"NVIDIA"``), not the card model.

    ``usedmem`` is MiB, ``usedcores`` is core units (percent of a card).
    """

    uuid: str
    type: str
    usedmem: int
    usedcores: int


ContainerDevices = tuple[ContainerDevice, ...]
PodDevices = tuple[ContainerDevices, ...]


class MigAllocation(
    msgspec.Struct,
    frozen=True,
    omit_defaults=True,
    rename={
        "container_index": "containerIndex",
        "device_index": "deviceIndex",
        "gpu_uuid": "gpuUUID",
        "mig_uuid": "migUUID",
        "gpu_instance_id": "gpuInstanceID",
        "compute_instance_id": "computeInstanceID",
    },
):
    """One reserved MIG instance (``hami.io/vgpu-mig-allocations`` element).

    ``container_index`` counts init containers first; ``device_index`` is the position inside that container's
    device list. The runtime identity (``mig_uuid``, ``gpu_instance_id``, ``compute_instance_id``) is written by
    the device plugin: all three or none; 0 is a valid instance id, so absence is ``None``.
    """

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def runtime_ready(self) -> bool:
        return self.mig_uuid is not None and self.gpu_instance_id is not None and self.compute_instance_id is not None
