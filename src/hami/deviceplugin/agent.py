"""The node agent as one supervised unit: registration, health watching and the kubelet endpoint.

:func:`run_plugin` starts the three loops in one ``asyncio.TaskGroup`` (plus, on a ``mig`` node, MIG
reconciliation: at start-up, then every ``mig_reconcile_s``; and with a CDI strategy, the CDI spec writer, which
rewrites the specs whenever the GPUs or their MIG instances change) and returns only when cancelled (SIGTERM)
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
from pathlib import Path

from hami.deviceplugin import cdi
from hami.deviceplugin.allocate import Allocator, PodsOnNode
from hami.deviceplugin.discovery import GpuInfo, GpuSource, discover
from hami.deviceplugin.health import HEALTH_POLL_MS, watch_health
from hami.deviceplugin.mig import MigInstances
from hami.deviceplugin.nvml import MigInstance, NvmlLib
from hami.deviceplugin.register import RegisterTiming, Registrar
from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.server import DevicePluginService, KubeletPaths, KubeletTiming, serve_kubelet
from hami.deviceplugin.settings import NodeSettings
from hami.deviceplugin.state import DeviceState, sleep_or_change
from hami.errors import NvmlError
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
    mig_reconcile_s: float = 60.0
    """How often a MIG node destroys the instances no live pod holds (also once at start-up)."""


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

    def gpus() -> tuple[GpuInfo, ...]:
        return state.snapshot().gpus

    mig = MigInstances(source, gpus) if settings.operating_mode == "mig" else None
    specs = CdiSpecs(source, gpus, settings) if settings.uses_cdi else None
    allocator = Allocator(
        cluster,
        pods_on_node,
        NodeLocker(cluster),
        node_name=options.node_name,
        settings=settings,
        host=options.host,
        gpus=gpus,
        mig=mig,
        mig_changed=specs.write if specs is not None else None,
    )
    service = DevicePluginService(state, settings, allocator)
    registrar = Registrar(
        cluster, options.node_name, source, state, settings, timing=options.register_timing, sleep=sleep
    )
    _announce(options)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(registrar.run(), name="register")
            group.create_task(watch_health(source, state, sleep, options.health_poll_ms), name="health")
            if mig is not None:
                group.create_task(_reconcile_mig(allocator, state, options.mig_reconcile_s, sleep), name="mig")
            if specs is not None:
                group.create_task(_write_cdi_specs(specs, state, sleep), name="cdi")
            kubelet = serve_kubelet(service, state, options.paths, settings, timing=options.kubelet_timing, sleep=sleep)
            group.create_task(kubelet, name="kubelet")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.to_thread(source.close))
        log.info("device plugin stopped")


def _announce(options: PluginOptions) -> None:
    """Write the host's ``ld.so.preload`` for HAMi-core (a warning when it cannot be), and log what is served."""
    settings = options.settings
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


async def _reconcile_mig(
    allocator: Allocator, state: DeviceState, every_s: float, sleep: Callable[[float], Awaitable[None]]
) -> None:
    """MIG reconciliation: once the GPUs are known, then every ``every_s``."""
    await state.discovered.wait()
    while True:
        try:
            await allocator.reconcile_mig()
        except NvmlError as exc:
            log.warning("MIG reconciliation failed, trying again in %gs: %s", every_s, exc)
        await sleep(every_s)


class CdiSpecs:
    """Writes this node's CDI specs (:mod:`.cdi`) from the discovered GPUs and their MIG instances."""

    def __init__(self, source: GpuSource, gpus: Callable[[], tuple[GpuInfo, ...]], settings: NodeSettings) -> None:
        self._source = source
        self._gpus = gpus
        self._settings = settings

    def _mig(self, gpus: tuple[GpuInfo, ...]) -> dict[str, list[MigInstance]]:
        found: dict[str, list[MigInstance]] = {}
        for gpu in gpus:
            if gpu.mig_enabled:
                index = gpu.index

                def listing(lib: NvmlLib, index: int = index) -> list[MigInstance]:
                    return lib.mig_instances(lib.handle(index))

                found[gpu.uuid] = self._source.call(listing)
        return found

    def _write(self) -> None:
        gpus = self._gpus()
        directory = Path(self._settings.cdi_spec_dir)
        spec = cdi.gpu_spec(
            gpus, self._mig(gpus), driver_root=self._settings.driver_root, hook_path=self._settings.cdi_hook_path
        )
        if cdi.write_spec(directory, cdi.GPU_SPEC_FILE, spec):
            log.info("wrote CDI spec %s (%d devices)", directory / cdi.GPU_SPEC_FILE, len(spec["devices"]))
        if self._settings.imex_channel_ids:
            imex = cdi.imex_spec(self._settings.imex_channel_ids, driver_root=self._settings.driver_root)
            cdi.write_spec(directory, cdi.IMEX_SPEC_FILE, imex)

    async def write(self) -> None:
        """Rewrite the specs now; a failure is logged (the next change tries again)."""
        try:
            await asyncio.to_thread(self._write)
        except (OSError, NvmlError) as exc:
            log.error("cannot write the CDI specs to %s: %s", self._settings.cdi_spec_dir, exc)


async def _write_cdi_specs(specs: CdiSpecs, state: DeviceState, sleep: Callable[[float], Awaitable[None]]) -> None:
    """Write the CDI specs once the GPUs are known and whenever they change (checked at least every minute)."""
    await state.discovered.wait()
    while True:
        version = state.version
        await specs.write()
        await sleep_or_change(state, version, 60.0, sleep)
