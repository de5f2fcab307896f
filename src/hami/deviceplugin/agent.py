"""The node agent as one supervised unit: registration, health watching and the kubelet endpoint.

:func:`run_plugin` starts the three loops in one ``asyncio.TaskGroup`` and returns only when cancelled (SIGTERM)
or when one of them fails unexpectedly (a bug: the group cancels the others, and the process exits non-zero so
the DaemonSet restarts it). Expected failures — NVML errors, API errors, kubelet restarts — are handled inside
each loop. Leaving the group, on any path, stops the gRPC server, removes our socket and shuts NVML down.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from hami.deviceplugin.allocate import Allocator, PodsOnNode
from hami.deviceplugin.discovery import GpuSource, discover
from hami.deviceplugin.health import HEALTH_POLL_MS, watch_health
from hami.deviceplugin.nvml import NvmlLib
from hami.deviceplugin.register import RegisterTiming, Registrar
from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.server import DevicePluginService, KubeletPaths, KubeletTiming, serve_kubelet
from hami.deviceplugin.settings import NodeSettings
from hami.deviceplugin.state import DeviceState
from hami.k8s.cluster import ClusterClient
from hami.k8s.nodelock import NodeLocker

__all__ = ["PluginOptions", "run_plugin"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """Everything :func:`run_plugin` needs besides the NVML library and the cluster."""

    node_name: str
    settings: NodeSettings = field(default_factory=NodeSettings)
    paths: KubeletPaths = field(default_factory=KubeletPaths)
    host: HostFiles = field(default_factory=HostFiles)
    register_timing: RegisterTiming = field(default_factory=RegisterTiming)
    kubelet_timing: KubeletTiming = field(default_factory=KubeletTiming)
    numa: Callable[[str], int] | None = None  # bus id -> NUMA node; default: sysfs
    health_poll_ms: int = HEALTH_POLL_MS


async def run_plugin(
    lib: NvmlLib,
    cluster: ClusterClient,
    pods_on_node: PodsOnNode,
    options: PluginOptions,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    state: DeviceState | None = None,
) -> None:
    """Run the node agent until cancelled (see the module docstring)."""
    state = state if state is not None else DeviceState()
    source = GpuSource(lib, functools.partial(discover, numa=options.numa))
    settings = options.settings
    allocator = Allocator(
        cluster,
        pods_on_node,
        NodeLocker(cluster),
        node_name=options.node_name,
        settings=settings,
        host=options.host,
    )
    service = DevicePluginService(state, settings, allocator)
    registrar = Registrar(
        cluster, options.node_name, source, state, settings, timing=options.register_timing, sleep=sleep
    )
    try:
        options.host.ensure_preload()
    except OSError as exc:
        log.warning(
            "cannot write %s/ld.so.preload (containers will not preload libvgpu.so): %s", options.host.vgpu_dir, exc
        )
    log.info(
        "device plugin for node %s: %s, split %d, memory scaling %g, core scaling %g, mode %s",
        options.node_name,
        settings.resource_name,
        settings.split_count,
        settings.memory_scaling,
        settings.core_scaling,
        settings.operating_mode,
    )
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(registrar.run(), name="register")
            group.create_task(watch_health(source, state, sleep, options.health_poll_ms), name="health")
            group.create_task(
                serve_kubelet(
                    service,
                    state,
                    options.paths,
                    settings,
                    timing=options.kubelet_timing,
                    sleep=sleep,
                ),
                name="kubelet",
            )
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.to_thread(source.close))
        log.info("device plugin stopped")
