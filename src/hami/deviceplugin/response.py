"""What kubelet injects into a container that got GPUs: HAMi-core's environment and mounts.

Exactly HAMi's contract (webhook-bind-plugin-vendors.md §6.2 step 5), so HAMi-core's ``libvgpu.so`` inside the
container enforces the limits the scheduler chose:

env
    ``NVIDIA_VISIBLE_DEVICES``            the chosen GPU UUIDs, comma-separated (the device list, below)
    ``CUDA_DEVICE_MEMORY_LIMIT_<i>``      ``<usedmem>m`` for the container's i-th GPU
    ``CUDA_DEVICE_SM_LIMIT``              usedcores of the first GPU (percent of a card)
    ``CUDA_DEVICE_MEMORY_SHARED_CACHE``   ``<hook>/vgpu/<random uuid>.cache``
    ``CUDA_OVERSUBSCRIBE=true``           only when memory scaling > 1
    ``LIBCUDA_LOG_LEVEL``                 only when libCudaLogLevel is set
    ``GPU_CORE_UTILIZATION_POLICY=disable`` only when disableCoreLimit
mounts (container ← host)
    ``<hook>/vgpu/libvgpu.so``  ← ``<hook>/vgpu/libvgpu.so.<version>`` if present, else ``<hook>/vgpu/libvgpu.so`` (ro)
    ``<hook>/vgpu``             ← ``<hook>/vgpu/containers/<pod uid>_<container>`` (rw, recreated empty)
    ``/tmp/vgpulock``           ← ``/tmp/vgpulock`` (rw)
    ``/etc/ld.so.preload``      ← ``<hook>/vgpu/ld.so.preload`` (ro), unless the container's env sets
                                  ``CUDA_DISABLE_CONTROL`` to a Go-``ParseBool`` true value
    ``/tmp/license``, ``/usr/bin/vgpuvalidator`` ← ``<hook>/vgpu/license``, ``<hook>/vgpu/vgpuvalidator`` (ro),
                                  only when the license file exists

The device list (HAMi's ``DEVICE_LIST_STRATEGY``, any combination; :func:`device_list`):

``envvar``           ``NVIDIA_VISIBLE_DEVICES=<id>,<id>`` for the NVIDIA container runtime;
``volume-mounts``    ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` and one mount of ``/dev/null``
                     per device at ``/var/run/nvidia-container-devices/<id>``;
``cdi-annotations``  the annotation ``<CDI_ANNOTATION_PREFIX>hami-nvidia`` = the CDI device names, comma-separated;
``cdi-cri``          the CDI device names in the answer's ``cdi_devices`` field (kubelet passes them to the runtime).

Without ``envvar`` or ``volume-mounts``, ``NVIDIA_VISIBLE_DEVICES=void``, so an image's default ``all`` does not
hand the container every GPU through the legacy runtime hook. ``<id>`` is a GPU UUID, or a MIG device UUID on a
MIG node. ``GDRCOPY_ENABLED``/``GDS_ENABLED``/``MOFED_ENABLED`` add ``NVIDIA_GDRCOPY``/``NVIDIA_GDS``/
``NVIDIA_MOFED=enabled``; ``IMEX_CHANNEL_IDS`` adds ``NVIDIA_IMEX_CHANNELS=<ids>`` (and, with CDI, the channels'
CDI devices). ``PASS_DEVICE_SPECS`` adds the device nodes (``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
``/dev/nvidia-uvm-tools``, ``/dev/nvidia<minor>``; host paths under ``NVIDIA_DRIVER_ROOT``).

A MIG container (:func:`mig_container_response`) gets the device list of its MIG devices and the extra
variables, but no HAMi-core limits or mounts: the MIG instance is the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from hami.deviceplugin import cdi
from hami.deviceplugin import kubeletapi as api
from hami.deviceplugin.settings import NodeSettings
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Container

__all__ = [
    "CDI_ANNOTATION",
    "DEVICE_MOUNT_DIR",
    "GO_TRUE",
    "DeviceList",
    "HostFiles",
    "container_response",
    "device_list",
    "disables_control",
    "mig_container_response",
]

CDI_ANNOTATION: Final = "hami-nvidia"
"""The CDI annotation's name after the prefix: one per container answer, so the fixed name never collides."""
DEVICE_MOUNT_DIR: Final = "/var/run/nvidia-container-devices"
CONTROL_NODES: Final = cdi.CONTROL_NODES

GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
"""The strings Go's ``strconv.ParseBool`` reads as true."""


@dataclass(frozen=True, slots=True)
class HostFiles:
    """The node's HAMi-core files. ``root`` is where the host's filesystem is visible to the plugin ("/" in the
    DaemonSet, which mounts ``<hook>/vgpu`` at the same path; a temporary directory in tests). Paths handed to
    kubelet are host paths, without ``root``."""

    hook_path: str = "/usr/local"
    libvgpu_version: str = "v2.10.0"
    root: Path = Path("/")

    @property
    def vgpu_dir(self) -> str:
        return f"{self.hook_path.rstrip('/')}/vgpu"

    def on_host(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def library(self) -> str:
        versioned = f"{self.vgpu_dir}/libvgpu.so.{self.libvgpu_version}"
        if self.libvgpu_version and self.on_host(versioned).exists():
            return versioned
        return f"{self.vgpu_dir}/libvgpu.so"

    def has_license(self) -> bool:
        return self.on_host(f"{self.vgpu_dir}/license").exists()

    def container_dir(self, pod_uid: str, container: str) -> str:
        return f"{self.vgpu_dir}/containers/{pod_uid}_{container}"

    def ensure_preload(self) -> None:
        """Write ``<hook>/vgpu/ld.so.preload`` (one line naming ``libvgpu.so``) if it does not exist."""
        path = self.on_host(f"{self.vgpu_dir}/ld.so.preload")
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{self.vgpu_dir}/libvgpu.so\n")


def disables_control(container: Container | None) -> bool:
    """The container opts out of HAMi-core: its env sets ``CUDA_DISABLE_CONTROL`` to a ParseBool-true value."""
    if container is None:
        return False
    return any(var.name == "CUDA_DISABLE_CONTROL" and var.value in GO_TRUE for var in container.env)


@dataclass(slots=True)
class DeviceList:
    """What the device-list strategies add to one container's answer."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[api.Mount] = field(default_factory=list)
    devices: list[api.DeviceSpec] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[api.CDIDevice] = field(default_factory=list)


def device_list(ids: Sequence[str], settings: NodeSettings, minors: Mapping[str, int] | None = None) -> DeviceList:
    """The device list for devices ``ids`` (GPU or MIG UUIDs; see the module docstring). ``minors`` maps an id
    to its GPU's ``/dev/nvidia<minor>`` for ``PASS_DEVICE_SPECS``; ids without one get no node."""
    out = DeviceList()
    _visible_devices(out, ids, settings.device_list_strategy)
    _cdi_devices(out, ids, settings)
    _feature_envs(out, settings)
    if settings.pass_device_specs:
        out.devices.extend(_device_specs(ids, settings, minors or {}))
    return out


def _visible_devices(out: DeviceList, ids: Sequence[str], strategies: Sequence[str]) -> None:
    """``NVIDIA_VISIBLE_DEVICES`` (the ids, the mount directory, or ``void``) and the volume-mounts strategy."""
    if "envvar" in strategies:
        out.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(ids)
    elif "volume-mounts" in strategies:
        out.envs["NVIDIA_VISIBLE_DEVICES"] = DEVICE_MOUNT_DIR
    else:
        out.envs["NVIDIA_VISIBLE_DEVICES"] = "void"
    if "volume-mounts" in strategies:
        out.mounts.extend(
            api.Mount(container_path=f"{DEVICE_MOUNT_DIR}/{i}", host_path="/dev/null", read_only=True) for i in ids
        )


def _cdi_devices(out: DeviceList, ids: Sequence[str], settings: NodeSettings) -> None:
    """The CDI device names (GPUs, then IMEX channels) as an annotation and/or CRI CDI devices."""
    strategies = settings.device_list_strategy
    names = [cdi.device_name(cdi.GPU_KIND, i) for i in ids]
    names += [cdi.device_name(cdi.IMEX_KIND, str(c)) for c in settings.imex_channel_ids]
    if "cdi-annotations" in strategies:
        out.annotations[f"{settings.cdi_annotation_prefix}{CDI_ANNOTATION}"] = ",".join(names)
    if "cdi-cri" in strategies:
        out.cdi_devices.extend(api.CDIDevice(name=n) for n in names)


def _feature_envs(out: DeviceList, settings: NodeSettings) -> None:
    """GDRCopy, GDS, MOFED and the IMEX channels."""
    for flag, variable in (
        (settings.gdrcopy_enabled, "NVIDIA_GDRCOPY"),
        (settings.gds_enabled, "NVIDIA_GDS"),
        (settings.mofed_enabled, "NVIDIA_MOFED"),
    ):
        if flag:
            out.envs[variable] = "enabled"
    if settings.imex_channel_ids:
        out.envs["NVIDIA_IMEX_CHANNELS"] = ",".join(str(c) for c in settings.imex_channel_ids)


def _device_specs(ids: Sequence[str], settings: NodeSettings, minors: Mapping[str, int]) -> list[api.DeviceSpec]:
    """``PASS_DEVICE_SPECS``: the control nodes and each GPU's ``/dev/nvidia<minor>``, once each."""
    paths = [*CONTROL_NODES]
    for i in ids:
        minor = minors.get(i)
        if minor is not None and f"/dev/nvidia{minor}" not in paths:
            paths.append(f"/dev/nvidia{minor}")
    return [
        api.DeviceSpec(container_path=path, host_path=cdi.host_path(settings.driver_root, path), permissions="rw")
        for path in paths
    ]


def _answer(listing: DeviceList, envs: dict[str, str], mounts: list[api.Mount]) -> api.ContainerAllocateResponse:
    return api.ContainerAllocateResponse(
        envs={**envs, **listing.envs},
        mounts=[*mounts, *listing.mounts],
        devices=listing.devices,
        annotations=listing.annotations,
        cdi_devices=listing.cdi_devices,
    )


def mig_container_response(
    mig_uuids: Sequence[str], settings: NodeSettings, minors: Mapping[str, int] | None = None
) -> api.ContainerAllocateResponse:
    """kubelet's answer for a container that got these MIG devices: the device list only."""
    return _answer(device_list(mig_uuids, settings, minors), {}, [])


def container_response(
    devices: Sequence[ContainerDevice],
    *,
    pod_uid: str,
    container: Container | None,
    settings: NodeSettings,
    host: HostFiles,
    new_cache_id: Callable[[], str],
    minors: Mapping[str, int] | None = None,
) -> api.ContainerAllocateResponse:
    """kubelet's answer for one container that got ``devices`` (the scheduler's choice, in order)."""
    listing = device_list([d.uuid for d in devices], settings, minors)
    envs: dict[str, str] = {}
    for i, device in enumerate(devices):
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{device.usedmem}m"
    envs["CUDA_DEVICE_SM_LIMIT"] = str(devices[0].usedcores) if devices else "0"
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{host.vgpu_dir}/{new_cache_id()}.cache"
    if settings.memory_scaling > 1:
        envs["CUDA_OVERSUBSCRIBE"] = "true"
    if settings.lib_cuda_log_level is not None:
        envs["LIBCUDA_LOG_LEVEL"] = str(settings.lib_cuda_log_level)
    if settings.disable_core_limit:
        envs["GPU_CORE_UTILIZATION_POLICY"] = "disable"

    name = container.name if container is not None else ""
    mounts = [
        api.Mount(container_path=f"{host.vgpu_dir}/libvgpu.so", host_path=host.library(), read_only=True),
        api.Mount(container_path=host.vgpu_dir, host_path=host.container_dir(pod_uid, name), read_only=False),
        api.Mount(container_path="/tmp/vgpulock", host_path="/tmp/vgpulock", read_only=False),
    ]
    if not disables_control(container):
        mounts.append(
            api.Mount(container_path="/etc/ld.so.preload", host_path=f"{host.vgpu_dir}/ld.so.preload", read_only=True)
        )
    if host.has_license():
        mounts.append(api.Mount(container_path="/tmp/license", host_path=f"{host.vgpu_dir}/license", read_only=True))
        mounts.append(
            api.Mount(
                container_path="/usr/bin/vgpuvalidator", host_path=f"{host.vgpu_dir}/vgpuvalidator", read_only=True
            )
        )
    return _answer(listing, envs, mounts)
