"""``hami dra-plugin``'s running parts: kubelet's two sockets, the ResourceSlice and GPU health.

* Registration: a ``pluginregistration.Registration`` service on
  ``<registry dir>/hami-core-gpu.project-hami.io-reg.sock``; kubelet's plugin watcher finds the socket (also after
  a kubelet restart: it scans the directory), asks ``GetInfo`` and connects to the DRA socket it names.
* ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` on ``<plugin dir>/dra.sock``: kubelet sends claim references only;
  the plugin GETs each claim, checks its UID and prepares it (:class:`~.state.ClaimStore`). Every claim asked
  about gets an answer; a failure is that claim's ``error`` (kubelet retries), never the whole call's.
* :class:`SlicePublisher` keeps the node's one ResourceSlice equal to the inventory: created when missing, patched
  with its ``resourceVersion`` (and a new pool generation) when the devices change, and any other slice of this
  driver for this node's pool deleted (a leftover of HAMi's driver would shadow it).
* :func:`clean_up_loop` every ``clean_up_s`` (10 minutes, as HAMi's driver) unprepares the checkpoint's claims
  that are gone from the API (not found, or found with another UID: a new claim of the same name), so a claim
  kubelet never unprepared (deleted while the plugin was down, a node restarted mid-way) does not keep its CDI
  spec, directory and entry for ever. A claim the API cannot be asked about stays.
* :func:`publish_loop` re-reads the GPUs every ``rediscover_s`` and when health changes; :func:`watch_xids`
  feeds critical XIDs into the :class:`~.inventory.HealthBook`.
* :class:`DevicePluginGuard` watches the pods bound to this node (``spec.nodeName``) and those hami's extender
  chose it for (label ``hami.io/vgpu-node``), and holds back from claims every card a pod of hami's device plugin
  holds (:mod:`.guard`): the publisher taints it, and the first slice is published only after both first lists
  are in, so no card is ever offered before the plugin knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from hami.deviceplugin.discovery import GpuInfo, GpuSource, discover
from hami.deviceplugin.dra import draapi as api
from hami.deviceplugin.dra.claims import PrepareRefused
from hami.deviceplugin.dra.guard import HELD_BACK_TAINT, Holders, device_plugin_holders
from hami.deviceplugin.dra.inventory import HealthBook, Inventory, read_inventory
from hami.deviceplugin.dra.slices import DRIVER, TAINT_KEY, resource_slice, slice_name
from hami.deviceplugin.dra.state import ClaimStore, PreparedDevice
from hami.deviceplugin.nvml import APPLICATION_XIDS, NvmlLib
from hami.errors import HamiError, NotFound, NvmlError
from hami.k8s.client import KubeClient
from hami.k8s.resources import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from hami.k8s.watch import Callbacks, Reflector
from hami.protocol.dra import ResourceClaim
from hami.protocol.keys import VGPU_NODE
from hami.protocol.objects import Node, Pod
from hami.scheduling.records import HAMI_SCHEDULER

__all__ = [
    "DevicePluginGuard",
    "DraPaths",
    "DraService",
    "InventoryState",
    "PluginRun",
    "RegistrationService",
    "SlicePublisher",
    "claim_reader",
    "clean_up_gone_claims",
    "clean_up_loop",
    "publish_loop",
    "run_dra_plugin",
    "serve_sockets",
    "watch_xids",
]

log = logging.getLogger(__name__)

ClaimReader = Callable[[str, str], Awaitable[ResourceClaim]]


@dataclass(frozen=True, slots=True)
class DraPaths:
    """Where kubelet and the plugin meet (kubelet's defaults)."""

    plugin_dir: Path = Path(f"/var/lib/kubelet/plugins/{DRIVER}")
    registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRIVER}-reg.sock"


class InventoryState:
    """The last inventory read, shared by the publisher and prepare; ``ready`` once the first is in."""

    def __init__(self) -> None:
        self.current: Inventory | None = None
        self.ready = asyncio.Event()
        self.changed = asyncio.Event()

    def set(self, inventory: Inventory) -> None:
        self.current = inventory
        self.ready.set()


def _device_message(device: PreparedDevice) -> Any:
    message = api.Device(
        request_names=list(device.requests),
        pool_name=device.pool,
        device_name=device.device,
        cdi_device_ids=list(device.cdi_ids),
    )
    if device.share_id is not None:
        message.share_id = device.share_id
    return message


class DraService:
    """Implements :class:`~.draapi.DRAPluginServicer` (module docstring)."""

    def __init__(self, store: ClaimStore, inventory: InventoryState, read_claim: ClaimReader, pool: str) -> None:
        self._store = store
        self._inventory = inventory
        self._read_claim = read_claim
        self._pool = pool

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        answers = {}
        for ref in request.claims:
            try:
                devices = await self._prepare(ref.namespace, ref.name, ref.uid)
                answers[ref.uid] = api.NodePrepareResourceResponse(devices=[_device_message(d) for d in devices])
            except (HamiError, OSError) as exc:
                log.warning("cannot prepare claim %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
                answers[ref.uid] = api.NodePrepareResourceResponse(error=str(exc))
        return api.NodePrepareResourcesResponse(claims=answers)

    async def _prepare(self, namespace: str, name: str, uid: str) -> list[PreparedDevice]:
        claim = await self._read_claim(namespace, name)
        if claim.metadata.uid != uid:
            where = f"ResourceClaim {namespace}/{name} metadata.uid"
            raise PrepareRefused(where, claim.metadata.uid, f"is not {uid}, the claim kubelet asked for")
        await asyncio.wait_for(self._inventory.ready.wait(), timeout=30)
        inventory = self._inventory.current
        assert inventory is not None
        return await asyncio.to_thread(self._store.prepare, claim, self._pool, inventory.by_name())

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        answers = {}
        for ref in request.claims:
            try:
                await asyncio.to_thread(self._store.unprepare, ref.uid)
                answers[ref.uid] = api.NodeUnprepareResourceResponse()
            except (HamiError, OSError) as exc:
                log.warning("cannot unprepare claim %s (%s): %s", ref.name, ref.uid, exc)
                answers[ref.uid] = api.NodeUnprepareResourceResponse(error=str(exc))
        return api.NodeUnprepareResourcesResponse(claims=answers)


class RegistrationService:
    """Implements :class:`~.draapi.RegistrationServicer`: what kubelet's plugin watcher asks."""

    def __init__(self, paths: DraPaths) -> None:
        self._paths = paths
        self.registered = asyncio.Event()

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return api.PluginInfo(
            type=api.PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self._paths.dra_socket),
            supported_versions=[api.DRA_PLUGIN_SERVICE],
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            log.info("registered with kubelet as %s", DRIVER)
            self.registered.set()
        else:
            log.error("kubelet refused the registration: %s", request.error)
            self.registered.clear()
        return api.RegistrationStatusResponse()


@contextlib.asynccontextmanager
async def serve_sockets(service: DraService, registration: RegistrationService, paths: DraPaths) -> AsyncIterator[None]:
    """Serve the DRA socket first, then the registration socket (kubelet may connect as soon as it appears);
    on leaving, stop and remove both."""
    sockets = (paths.dra_socket, paths.registration_socket)
    for socket in sockets:
        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)
    dra = grpc.aio.server()
    api.add_dra_plugin_servicer(service, dra)
    dra.add_insecure_port(f"unix://{paths.dra_socket}")
    reg = grpc.aio.server()
    api.add_registration_servicer(registration, reg)
    reg.add_insecure_port(f"unix://{paths.registration_socket}")
    await dra.start()
    try:
        await reg.start()
        log.info("serving %s and %s", paths.dra_socket, paths.registration_socket)
        yield
    finally:
        await reg.stop(grace=None)
        await dra.stop(grace=1)
        for socket in sockets:
            socket.unlink(missing_ok=True)


class SlicePublisher:
    """Keeps this node's ResourceSlice equal to the inventory (module docstring)."""

    def __init__(self, client: KubeClient, node_name: str) -> None:
        self._client = client
        self._node = node_name
        self._published: dict[str, Any] | None = None

    async def publish(self, inventory: Inventory, held_back: frozenset[str] = frozenset()) -> bool:
        """Create or patch the slice, the cards ``held_back`` (UUIDs) tainted; returns whether anything was
        written. Raises ``ApiError``."""
        node = await self._client.get(NODES, self._node, type=Node)
        others, generation = await self._other_slices()
        desired = resource_slice(self._node, node.metadata.uid, inventory.devices, inventory.facts, held_back=held_back)
        name = slice_name(self._node)
        try:
            current = await self._client.get(RESOURCE_SLICES, name, type=dict[str, Any])
        except NotFound:
            desired["spec"]["pool"]["generation"] = generation + 1
            await self._client.create(RESOURCE_SLICES, desired, type=dict[str, Any])
            log.info("published ResourceSlice %s with %d devices", name, len(inventory.devices))
            written = True
        else:
            written = await self._patch(current, desired, generation)
        for other in others:
            with contextlib.suppress(NotFound):
                await self._client.delete(RESOURCE_SLICES, other)
                log.info("deleted ResourceSlice %s: another slice of %s for node %s", other, DRIVER, self._node)
        return written

    async def _other_slices(self) -> tuple[list[str], int]:
        """Other slices of this driver on this node, and the highest pool generation among all of them."""
        listed = await self._client.list(
            RESOURCE_SLICES, type=dict[str, Any], field_selector=f"spec.nodeName={self._node},spec.driver={DRIVER}"
        )
        names = [s["metadata"]["name"] for s in listed.items if s["metadata"]["name"] != slice_name(self._node)]
        generation = max((int(s["spec"]["pool"].get("generation", 0)) for s in listed.items), default=0)
        return names, generation

    async def _patch(self, current: dict[str, Any], desired: dict[str, Any], generation: int) -> bool:
        spec = current.get("spec", {})
        wanted = desired["spec"]
        _keep_taint_times(spec.get("devices", []), wanted["devices"])
        same = (
            all(spec.get(k) == wanted[k] for k in ("driver", "nodeName", "devices"))
            and spec.get("pool", {}).get("name") == wanted["pool"]["name"]
        )
        if same and int(spec.get("pool", {}).get("generation", 0)) >= generation:
            log.debug("ResourceSlice %s unchanged", current["metadata"]["name"])
            return False
        wanted["pool"]["generation"] = generation + 1
        body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "spec": wanted}
        await self._client.patch(RESOURCE_SLICES, current["metadata"]["name"], body, type=dict[str, Any])
        devices = wanted["devices"]
        healthy = sum(all(t["key"] != TAINT_KEY for t in d.get("taints", ())) for d in devices)
        held = sum(any(t["key"] == HELD_BACK_TAINT for t in d.get("taints", ())) for d in devices)
        name = current["metadata"]["name"]
        log.info("updated ResourceSlice %s: %d devices, %d healthy, %d held back", name, len(devices), healthy, held)
        return True


def _keep_taint_times(current: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> None:
    """Give each wanted taint the ``timeAdded`` the API server stamped on the same taint of the same device, so
    an unchanged slice compares equal (and is not written again) and a taint keeps the time it was added."""
    stamped = {
        (d.get("name"), t.get("key"), t.get("effect")): t["timeAdded"]
        for d in current
        for t in d.get("taints", ())
        if "timeAdded" in t
    }
    for device in wanted:
        for taint in device.get("taints", ()):
            added = stamped.get((device["name"], taint["key"], taint["effect"]))
            if added is not None:
                taint["timeAdded"] = added


_LABEL_VALUE_MAX = 63
"""A label value's longest length: a longer node name cannot be selected by label."""


class DevicePluginGuard:
    """The cards pods of hami's device plugin hold on this node (module docstring), from two watches: the pods
    bound to it (``spec.nodeName``) and the pods hami's ``/filter`` chose it for and has not bound yet (label
    ``hami.io/vgpu-node=<node>``, written with the allocation), so a card is held back from the moment hami
    reserves it, as hami's ledger charges it. ``changed`` is set whenever the held cards change (and once both
    first lists are in: :attr:`synced`)."""

    def __init__(self, client: KubeClient, node_name: str, schedulers: frozenset[str], changed: asyncio.Event) -> None:
        self._node = node_name
        self._schedulers = schedulers
        self._changed = changed
        self.holders = Holders()
        self._logged: frozenset[str] = frozenset()
        self._listed: set[str] = set()
        self.synced = asyncio.Event()
        """Set once both watches have listed: before, no card may be offered."""
        self.bound: Reflector[Pod] = Reflector(
            client, PODS, Pod, Callbacks(self._on_pod, functools.partial(self._on_listed, "bound")),
            field_selector=f"spec.nodeName={node_name}",
        )  # fmt: skip
        self.chosen: Reflector[Pod] | None = None
        if len(node_name) <= _LABEL_VALUE_MAX:
            self.chosen = Reflector(
                client, PODS, Pod, Callbacks(self._on_pod, functools.partial(self._on_listed, "chosen")),
                label_selector=f"{VGPU_NODE}={node_name}",
            )  # fmt: skip
        else:  # no label can name this node (hami's label write fails too): the bound pods are all there is
            self._listed.add("chosen")

    async def run(self) -> None:
        """Both watches, until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.bound.run())
            if self.chosen is not None:
                group.create_task(self.chosen.run())

    def _on_listed(self, which: str) -> None:
        self._listed.add(which)
        if len(self._listed) == 2 and not self.synced.is_set():
            self.synced.set()
            self._refresh(force=True)
        elif self.synced.is_set():
            self._refresh()  # a relist after a watch failure

    def _on_pod(self, pod: Pod, deleted: bool) -> None:
        if self.synced.is_set():
            self._refresh()

    def _refresh(self, *, force: bool = False) -> None:
        stores = [r.store for r in (self.chosen, self.bound) if r is not None]
        pods = {p.metadata.uid: p for store in stores for p in store.values()}  # the bound view last
        holders = device_plugin_holders(pods.values(), self._node, self._schedulers)
        if holders != self.holders or force:
            self.holders = holders
            self._changed.set()

    def held_back(self, inventory: Inventory) -> frozenset[str]:
        """The inventory's cards to publish held back; logs each card as it is held back or released."""
        uuids = [d.gpu.uuid for d in inventory.devices]
        held = self.holders.held_back(uuids)
        for uuid in sorted(held - self._logged):
            log.info("GPU %s: held back from claims: %s", uuid, self.holders.why(uuid))
        for uuid in sorted(self._logged - held):
            log.info("GPU %s: no pod of the device plugin holds it any more, offering it to claims", uuid)
        self._logged = held
        return held


async def watch_xids(source: GpuSource, gpus: Callable[[], list[GpuInfo]], book: HealthBook, state: InventoryState,
                     poll_ms: int = 1000, retry_s: float = 30.0) -> None:  # fmt: skip
    """Feed critical XIDs (application XIDs excepted) into ``book`` until cancelled; wakes the publisher."""
    await state.ready.wait()
    while True:
        try:
            if not source.watching:
                await asyncio.to_thread(source.watch_xids, gpus())
            event = await asyncio.to_thread(source.next_xid, poll_ms)
        except NvmlError as exc:
            log.warning("GPU health events unavailable, retrying in %gs: %s", retry_s, exc)
            await asyncio.sleep(retry_s)
            continue
        if event is None or event.xid in APPLICATION_XIDS:
            continue
        log.error("GPU %s: critical XID %d, publishing it tainted", event.uuid, event.xid)
        book.critical_xid(event.uuid, time.monotonic())
        state.changed.set()


async def clean_up_gone_claims(store: ClaimStore, read_claim: ClaimReader) -> list[str]:
    """Unprepare every checkpoint entry whose claim is gone from the API (module docstring); returns their UIDs.
    An API error other than not-found leaves that claim alone until the next round."""
    gone = []
    for uid, (namespace, name) in sorted(store.entries().items()):
        try:
            claim = await read_claim(namespace, name)
        except NotFound:
            why = "is gone from the API"
        except HamiError as exc:
            log.warning("cannot check prepared claim %s/%s (%s), keeping it: %s", namespace, name, uid, exc)
            continue
        else:
            if claim.metadata.uid == uid:
                continue
            why = f"now has UID {claim.metadata.uid} (a new claim of that name)"
        log.info("unpreparing claim %s/%s (%s): it %s", namespace, name, uid, why)
        try:
            await asyncio.to_thread(store.unprepare, uid)
        except (HamiError, OSError) as exc:
            log.warning("cannot unprepare claim %s/%s (%s), retrying next round: %s", namespace, name, uid, exc)
            continue
        gone.append(uid)
    return gone


async def clean_up_loop(store: ClaimStore, read_claim: ClaimReader, interval_s: float = 600.0) -> None:
    """:func:`clean_up_gone_claims` every ``interval_s`` until cancelled (first after one interval, when kubelet
    has had time to unprepare what it knows of)."""
    while True:
        await asyncio.sleep(interval_s)
        await clean_up_gone_claims(store, read_claim)


async def _read_node(
    source: GpuSource, seen: dict[str, GpuInfo], book: HealthBook, root_of: Callable[[str], str] | None
) -> Inventory:
    gpus = await asyncio.to_thread(source.discover)
    for gpu in gpus:
        seen[gpu.uuid] = gpu
    found = {g.uuid for g in gpus}
    lost = {u: g for u, g in seen.items() if u not in found}
    unhealthy = book.unhealthy(time.monotonic(), found)
    read = functools.partial(read_inventory, gpus=gpus, lost=lost, unhealthy=unhealthy)
    if root_of is not None:
        read = functools.partial(read, root_of=root_of)
    return await asyncio.to_thread(source.call, read)


async def publish_loop(
    source: GpuSource,
    publisher: SlicePublisher,
    state: InventoryState,
    book: HealthBook,
    *,
    rediscover_s: float = 60.0,
    root_of: Callable[[str], str] | None = None,
    guard: DevicePluginGuard | None = None,
) -> None:
    """Discover, publish, repeat every ``rediscover_s`` or when health or the cards ``guard`` holds back change,
    until cancelled. With ``guard``, nothing is published before its first list of pods is in. NVML and API
    failures are logged and retried at the next round."""
    seen: dict[str, GpuInfo] = {}  # every GPU published so far: one discovery stops finding stays, tainted
    waited = 0
    while True:
        state.changed.clear()
        try:
            inventory = await _read_node(source, seen, book, root_of)
            state.set(inventory)
            if guard is None:
                await publisher.publish(inventory)
            elif guard.synced.is_set():
                await publisher.publish(inventory, guard.held_back(inventory))
            else:
                waited += 1  # at start-up once; again means the list fails (the pods list/watch right missing?)
                level = logging.INFO if waited == 1 else logging.WARNING
                log.log(level, "not publishing yet: the pods bound to this node (list/watch pods) are not listed")
        except (HamiError, NvmlError) as exc:
            log.error("cannot publish this node's GPUs: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.changed.wait(), timeout=rediscover_s)


@dataclass(frozen=True, slots=True)
class PluginRun:
    """What :func:`run_dra_plugin` needs besides NVML, the API client and the claim store."""

    node_name: str
    paths: DraPaths
    rediscover_s: float = 60.0
    recover_after_s: float = 300.0
    clean_up_s: float = 600.0
    root_of: Callable[[str], str] | None = None
    numa: Callable[[str], int] | None = None
    schedulers: frozenset[str] = frozenset({HAMI_SCHEDULER})
    """hami's scheduler names: the device-plugin pods the guard believes (:mod:`.guard`)"""


def claim_reader(client: KubeClient) -> ClaimReader:
    """GET a ResourceClaim by namespace and name (raises ``NotFound``, ``ApiError``)."""

    async def read_claim(namespace: str, name: str) -> ResourceClaim:
        return await client.get(RESOURCE_CLAIMS, name, namespace=namespace, type=ResourceClaim)

    return read_claim


async def run_dra_plugin(lib: NvmlLib, client: KubeClient, store: ClaimStore, run: PluginRun) -> None:
    """The plugin until cancelled: sockets, publishing and health in one task group; NVML shut down on exit."""
    source = GpuSource(lib, functools.partial(discover, numa=run.numa))
    state = InventoryState()
    book = HealthBook(recover_after_s=run.recover_after_s)

    read_claim = claim_reader(client)

    def gpus() -> list[GpuInfo]:
        current = state.current
        return [d.gpu for d in current.devices] if current is not None else []

    service = DraService(store, state, read_claim, pool=run.node_name)
    registration = RegistrationService(run.paths)
    publisher = SlicePublisher(client, run.node_name)
    guard = DevicePluginGuard(client, run.node_name, run.schedulers, state.changed)
    try:
        async with serve_sockets(service, registration, run.paths), asyncio.TaskGroup() as group:
            group.create_task(guard.run())
            group.create_task(
                publish_loop(
                    source, publisher, state, book, rediscover_s=run.rediscover_s, root_of=run.root_of, guard=guard
                )
            )
            group.create_task(watch_xids(source, gpus, book, state))
            group.create_task(clean_up_loop(store, read_claim, run.clean_up_s))
    finally:
        source.close()
