"""HAMi-core on the node: is the library the plugin mounts into GPU containers there?

The memory and core limits of a shared GPU are enforced inside each container by HAMi-core's ``libvgpu.so``,
preloaded through ``/etc/ld.so.preload``. Without it a container sees the whole card, so sharing the card would let
one pod take another's memory. The plugin checks the library once, before it registers its GPUs:

* found (``<hook>/vgpu/libvgpu.so.<version>``, else ``<hook>/vgpu/libvgpu.so``, a file starting with an ELF header):
  GPUs are advertised as configured (``deviceSplitCount`` shares each);
* missing, with ``--if-hami-core-missing=whole-gpus`` (the default): every GPU is advertised **whole**, one pod per
  GPU, so no pod shares a card it cannot be isolated on; with ``share``: shares are advertised anyway.

Either way a missing library is said loudly: an error in the plugin's log, a Warning event ``HAMiCoreMissing`` on
its Node, and the monitor's ``hami_core_library_present`` gauge at 0. A node in MIG mode needs no HAMi-core (MIG
isolates in hardware) and is not checked. The check runs at start-up: after installing the library, restart the
plugin pod (the chart's init container installs it before the plugin starts).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Final, Literal

from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.settings import NodeSettings
from hami.errors import HamiError
from hami.k8s.cluster import ClusterClient
from hami.k8s.records import ObjectRef
from hami.protocol.events import EventType
from hami.protocol.objects import Node, ObjectMeta

__all__ = ["EVENT_REASON", "IF_MISSING", "IfMissing", "adjust", "library_problem", "record_event"]

log = logging.getLogger(__name__)

IfMissing = Literal["whole-gpus", "share"]
IF_MISSING: Final = ("whole-gpus", "share")
EVENT_REASON: Final = "HAMiCoreMissing"
EVENT_COMPONENT: Final = "hami-device-plugin"
ELF_MAGIC: Final = b"\x7fELF"


def library_problem(host: HostFiles) -> str | None:
    """None when the library the plugin would mount is on the host and is a shared object (ELF); else why not,
    naming the path(s) looked at."""
    path = host.library()
    try:
        with host.on_host(path).open("rb") as file:
            head = file.read(len(ELF_MAGIC))
    except FileNotFoundError:
        looked = f"{host.vgpu_dir}/libvgpu.so"
        if host.libvgpu_version:
            looked = f"{host.vgpu_dir}/libvgpu.so.{host.libvgpu_version} nor {looked}"
        return f"HAMi-core is not installed on this node: neither {looked} exists"
    except OSError as exc:
        return f"HAMi-core's library {path} cannot be read: {exc.strerror or exc}"
    if head != ELF_MAGIC:
        return f"HAMi-core's library {path} is not a shared library (no ELF header)"
    return None


def adjust(settings: NodeSettings, problem: str | None, if_missing: IfMissing) -> NodeSettings:
    """The settings to register with: one share per GPU when HAMi-core is missing and ``if_missing`` is
    ``whole-gpus`` (MIG nodes are never changed: they do not use HAMi-core)."""
    if problem is None or settings.operating_mode == "mig" or if_missing == "share":
        return settings
    return dataclasses.replace(settings, split_count=1)


def consequence(settings: NodeSettings, adjusted: NodeSettings) -> str:
    """What the node does about the missing library, for the log and the event."""
    if adjusted.split_count != settings.split_count:
        return (
            f"GPUs are advertised whole (one pod per GPU instead of {settings.split_count} shares) because no memory "
            "or core limit could be enforced; install HAMi-core (chart: devicePlugin.hamiCore.image) and restart "
            "the device plugin"
        )
    return (
        "GPUs are shared WITHOUT isolation (--if-hami-core-missing=share): no memory or core limit is enforced; "
        "install HAMi-core (chart: devicePlugin.hamiCore.image) and restart the device plugin"
    )


async def record_event(cluster: ClusterClient, node_name: str, message: str) -> None:
    """A Warning event ``HAMiCoreMissing`` on this node; a failure to record it is logged, never raised."""
    node = Node(metadata=ObjectMeta(name=node_name))
    try:
        node = await cluster.get_node(node_name)
    except HamiError as exc:
        log.warning("node %s: cannot read the node for its event: %s", node_name, exc)
    try:
        await cluster.emit_event(ObjectRef.for_node(node), EventType.WARNING, EVENT_REASON, message, EVENT_COMPONENT)
    except HamiError as exc:
        log.warning("node %s: cannot record event %s: %s", node_name, EVENT_REASON, exc)
