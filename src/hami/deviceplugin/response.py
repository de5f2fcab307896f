"""What kubelet injects into a container that got GPUs: HAMi-core's environment and mounts.

Exactly HAMi's contract (webhook-bind-plugin-vendors.md §6.2 step 5), so HAMi-core's ``libvgpu.so`` inside the
container enforces the limits the scheduler chose:

env
    ``NVIDIA_VISIBLE_DEVICES``            the chosen GPU UUIDs, comma-separated (the "envvar" strategy)
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

*Not implemented (difference from HAMi):* the CDI and volume-mount device-list strategies, the
GDRCopy/GDS/MOFED and IMEX-channel variables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hami.deviceplugin import kubeletapi as api
from hami.deviceplugin.settings import NodeSettings
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Container

__all__ = ["GO_TRUE", "HostFiles", "container_response", "disables_control"]

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


def container_response(
    devices: Sequence[ContainerDevice],
    *,
    pod_uid: str,
    container: Container | None,
    settings: NodeSettings,
    host: HostFiles,
    new_cache_id: Callable[[], str],
) -> api.ContainerAllocateResponse:
    """kubelet's answer for one container that got ``devices`` (the scheduler's choice, in order)."""
    envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(d.uuid for d in devices)}
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
    return api.ContainerAllocateResponse(envs=envs, mounts=mounts)
