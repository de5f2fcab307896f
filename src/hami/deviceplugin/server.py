"""kubelet's side of the plugin: the ``/v1beta1.DevicePlugin`` service and its socket's life cycle.

:class:`DevicePluginService` answers kubelet. ``ListAndWatch`` advertises every registered GPU as
``count`` fake devices ``<UUID>-<i>`` (the split count, or in MIG mode the largest instance count), each
``Healthy`` or ``Unhealthy``, with the GPU's NUMA node when ``enableNumaTopology`` is on; it sends a new list
whenever that list changes (a health event, a GPU appearing or vanishing).

:func:`serve_kubelet` is the supervised loop around one "session" with kubelet: open our socket in the
device-plugin directory, register with ``kubelet.sock``, then watch both sockets. kubelet removes every plugin
socket and recreates its own when it restarts; either sign ends the session, and the loop starts the next one.
Every exit path — restart, error, cancellation on SIGTERM — leaves through the same ``async with``, which stops
the gRPC server and removes our socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from hami.deviceplugin import kubeletapi as api
from hami.deviceplugin.allocate import Allocator
from hami.deviceplugin.inventory import node_devices
from hami.deviceplugin.settings import NodeSettings
from hami.deviceplugin.state import DeviceState, Snapshot
from hami.errors import AllocationError, AllocationFailure, HamiError

__all__ = [
    "DevicePluginService",
    "KubeletPaths",
    "KubeletTiming",
    "PluginEndpoint",
    "kubelet_devices",
    "register_with_kubelet",
    "serve_kubelet",
]

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

_STATUS = {
    AllocationFailure.NO_POD: grpc.StatusCode.FAILED_PRECONDITION,
    AllocationFailure.BAD_REQUEST: grpc.StatusCode.FAILED_PRECONDITION,
    AllocationFailure.API: grpc.StatusCode.UNAVAILABLE,
    AllocationFailure.INTERNAL: grpc.StatusCode.INTERNAL,
}


def kubelet_devices(snapshot: Snapshot, settings: NodeSettings) -> list[api.Device]:
    """The devices kubelet sees: ``count`` fake IDs per registered GPU."""
    devices: list[api.Device] = []
    for device in node_devices(snapshot.gpus, settings, snapshot.unhealthy):
        health = api.HEALTHY if device.health else api.UNHEALTHY
        topology = api.TopologyInfo(nodes=[api.NUMANode(id=device.numa)]) if settings.enable_numa_topology else None
        devices.extend(api.Device(id=f"{device.id}-{i}", health=health, topology=topology) for i in range(device.count))
    return devices


class DevicePluginService:
    """Implements :class:`~hami.deviceplugin.kubeletapi.DevicePluginServicer`."""

    def __init__(self, state: DeviceState, settings: NodeSettings, allocator: Allocator) -> None:
        self._state = state
        self._settings = settings
        self._allocator = allocator

    async def GetDevicePluginOptions(self, request: api.Empty, context: Any) -> api.DevicePluginOptions:
        return api.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=self._settings.preferred_allocation
        )

    async def ListAndWatch(self, request: api.Empty, context: Any) -> AsyncIterator[api.ListAndWatchResponse]:
        await self._state.discovered.wait()
        sent: list[api.Device] | None = None
        while True:
            snapshot = self._state.snapshot()
            devices = kubelet_devices(snapshot, self._settings)
            if devices != sent:
                healthy = sum(d.health == api.HEALTHY for d in devices)
                log.info("ListAndWatch: advertising %d devices (%d healthy)", len(devices), healthy)
                yield api.ListAndWatchResponse(devices=devices)
                sent = devices
            await self._state.wait_changed(snapshot.version)

    async def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: Any
    ) -> api.PreferredAllocationResponse:
        responses = []
        for ctr in request.container_requests:
            ids = await self._allocator.preferred(
                list(ctr.available_device_ids), list(ctr.must_include_device_ids), ctr.allocation_size
            )
            responses.append(api.ContainerPreferredAllocationResponse(device_ids=ids))
        return api.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(self, request: api.AllocateRequest, context: Any) -> api.AllocateResponse:
        try:
            responses = await self._allocator.allocate([list(r.devices_ids) for r in request.container_requests])
        except AllocationError as exc:
            await context.abort(_STATUS[exc.failure], str(exc))
            raise  # pragma: no cover - abort raises
        return api.AllocateResponse(container_responses=responses)

    async def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: Any
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()


SOCKET_PATH_MAX = 107
"""The longest path a unix socket can be bound to on Linux (``sun_path`` holds 108 bytes with the final NUL)."""


@dataclass(frozen=True, slots=True)
class KubeletPaths:
    """Where kubelet and this plugin meet."""

    directory: Path = Path("/var/lib/kubelet/device-plugins")
    endpoint: str = "hami-nvidia.sock"
    """Our socket's file name (kubelet gets it relative to ``directory``)."""
    kubelet: str = api.KUBELET_SOCKET

    @property
    def plugin_socket(self) -> Path:
        return self.directory / self.endpoint

    @property
    def kubelet_socket(self) -> Path:
        return self.directory / self.kubelet


@dataclass(frozen=True, slots=True)
class KubeletTiming:
    """How often the kubelet session looks at the sockets, and how long it waits after a failure."""

    poll: float = 1.0
    """Socket checks per second: kubelet restarts are noticed within this, at the cost of one stat() each."""
    retry: float = 5.0
    """After a failed registration (kubelet down or refusing): kubelet usually comes back within seconds."""
    register_timeout: float = 10.0
    """For the Register call; kubelet answers in milliseconds when healthy."""
    grace: float = 1.0
    """Seconds running RPCs get to finish when the server stops."""


class PluginEndpoint:
    """Our gRPC server on ``paths.plugin_socket``, as an async context manager that always cleans up."""

    def __init__(self, paths: KubeletPaths, service: DevicePluginService, grace: float = 1.0) -> None:
        self._paths = paths
        self._service = service
        self._grace = grace
        self._server: Any = None

    async def __aenter__(self) -> PluginEndpoint:
        path = self._paths.plugin_socket
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a stale socket of an earlier run
        self._server = grpc.aio.server()
        api.add_device_plugin_servicer(self._service, self._server)
        try:
            self._server.add_insecure_port(f"unix://{path}")
        except RuntimeError as exc:  # grpc reports a failed bind as RuntimeError, with no reason
            raise OSError(_cannot_listen(path)) from exc
        await self._server.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._server is not None:
                await self._server.stop(self._grace)
        finally:
            with contextlib.suppress(FileNotFoundError):
                self._paths.plugin_socket.unlink()


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


async def register_with_kubelet(paths: KubeletPaths, settings: NodeSettings, timeout: float) -> None:
    """Call kubelet's ``Register`` for our endpoint. Raises ``grpc.aio.AioRpcError`` on refusal."""
    request = api.RegisterRequest(
        version=api.API_VERSION,
        endpoint=paths.endpoint,
        resource_name=settings.resource_name,
        options=api.DevicePluginOptions(get_preferred_allocation_available=settings.preferred_allocation),
    )
    async with grpc.aio.insecure_channel(f"unix://{paths.kubelet_socket}") as channel:
        await api.register(channel, request, timeout)


async def _until_restart(
    paths: KubeletPaths, kubelet_id: tuple[int, int, int] | None, timing: KubeletTiming, sleep: Sleep
) -> str:
    while True:
        await sleep(timing.poll)
        current = _identity(paths.kubelet_socket)
        if current != kubelet_id:
            return "kubelet's socket was recreated (kubelet restarted)"
        if not paths.plugin_socket.exists():
            return "our socket was removed (kubelet restarted)"


async def serve_kubelet(
    service: DevicePluginService,
    state: DeviceState,
    paths: KubeletPaths,
    settings: NodeSettings,
    *,
    timing: KubeletTiming = KubeletTiming(),
    sleep: Sleep = asyncio.sleep,
) -> None:
    """Serve kubelet until cancelled, re-registering whenever kubelet restarts (module docstring)."""
    await state.discovered.wait()
    while True:
        try:
            while _identity(paths.kubelet_socket) is None:
                await sleep(timing.poll)
            async with PluginEndpoint(paths, service, timing.grace):
                kubelet_id = _identity(paths.kubelet_socket)
                await register_with_kubelet(paths, settings, timing.register_timeout)
                log.info("registered %s with kubelet (endpoint %s)", settings.resource_name, paths.plugin_socket)
                reason = await _until_restart(paths, kubelet_id, timing, sleep)
                log.warning("%s; serving kubelet again", reason)
        except (grpc.aio.AioRpcError, OSError, HamiError) as exc:
            log.error("kubelet registration failed, retrying in %gs: %s", timing.retry, _short(exc))
            await sleep(timing.retry)


def _cannot_listen(path: Path) -> str:
    """Why the plugin cannot listen on ``path``, for a person: most often it does not run as root."""
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return (
            f"cannot listen on {path}: {path.parent} is not writable by uid {os.geteuid()} "
            "(the device plugin must run as root to serve kubelet)"
        )
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        return f"cannot listen on {path}: a unix socket path may be at most {SOCKET_PATH_MAX} bytes"
    return f"cannot listen on {path}"


def _short(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)
