"""MetaX sGPU wire formats: the node's device list and the pod's allocation JSON (HAMi v2.10 ``metax/protocol.go``).

* ``metax-tech.com/node-gpu-devices`` (node, written by MetaX's device plugin): a JSON array of
  ``{uuid, bdf, model, totalDevCount, totalCompute, totalVRam, availableDevCount, availableCompute,
  availableVRam, numa, healthy, qosPolicy, linkZone}``; a device without ``healthy: true`` is unhealthy.
* ``metax-tech.com/gpu-devices-allocated`` (pod, written by the scheduler): one array per container slot of
  ``{"uuid", "compute", "vRam"}``, zero numbers left out (Go ``omitempty``).
* ``ShareTag``: what hami remembers of each pod holding a share of a device (its QoS policy and app class), kept by
  the ledger as the device's slice positions so that Fit can judge QoS and app-class compatibility.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Final, NamedTuple

import msgspec

from hami.devices.base import NodeInventory
from hami.protocol import _gojson
from hami.protocol._gojson import GoInt32
from hami.protocol.allocation import PodDevices
from hami.protocol.inventory import DeviceInfo

__all__ = [
    "OFFLINE",
    "ONLINE",
    "SGPU",
    "ShareTag",
    "decode_node_devices",
    "encode_allocated",
    "link_zone",
    "qos_policy",
    "share_tag",
    "share_tags",
    "tags_on",
]

SGPU: Final = "Metax-SGPU"
ONLINE: Final = "online"
OFFLINE: Final = "offline"
_QOS_PREFIX: Final = "qosPolicy/"
_ZONE_PREFIX: Final = "linkZone/"


class _NodeDevice(msgspec.Struct, rename="camel"):
    uuid: str = ""
    bdf: str = ""
    model: str = ""
    total_dev_count: GoInt32 = 0
    total_compute: GoInt32 = 0
    total_v_ram: GoInt32 = 0
    available_dev_count: GoInt32 = 0
    available_compute: GoInt32 = 0
    available_v_ram: GoInt32 = 0
    numa: GoInt32 = 0
    healthy: bool = False
    qos_policy: str = ""
    link_zone: GoInt32 = 0


_NODE_DECODER: Final = msgspec.json.Decoder(list[_NodeDevice] | None)


def decode_node_devices(value: str, field: str) -> NodeInventory:
    """The node's sGPU devices (``DeviceInfo`` in annotation order, index = position) and, in ``node_info``, each
    device's current QoS policy and MetaLink zone. Raises ``AnnotationError`` naming ``field``."""
    devices: list[DeviceInfo] = []
    info: dict[str, str] = {}
    for position, d in enumerate(_gojson.decode(value, _NODE_DECODER, field) or ()):
        devices.append(
            DeviceInfo(
                id=d.uuid,
                index=position,
                count=d.total_dev_count,
                devmem=d.total_v_ram,
                devcore=d.total_compute,
                type=SGPU,
                numa=d.numa,
                health=d.healthy,
            )
        )
        if d.qos_policy:
            info[_QOS_PREFIX + d.uuid] = d.qos_policy
        if d.link_zone > 0:
            info[_ZONE_PREFIX + d.uuid] = str(d.link_zone)
    return NodeInventory(tuple(devices), node_info=info)


def qos_policy(node_info: Mapping[str, str], uuid: str) -> str:
    """The QoS policy the device plugin reports for the device ("" when none)."""
    return node_info.get(_QOS_PREFIX + uuid, "")


def link_zone(node_info: Mapping[str, str], uuid: str) -> int:
    """The device's MetaLink zone; 0 when it has none."""
    return int(node_info.get(_ZONE_PREFIX + uuid, "0"))


class _Share(msgspec.Struct, omit_defaults=True, rename={"v_ram": "vRam"}):
    uuid: str
    compute: int = 0
    v_ram: int = 0


def encode_allocated(devices: PodDevices) -> str:
    """``metax-tech.com/gpu-devices-allocated``: per container slot the devices with their cores and MiB."""
    return _gojson.encode([[_Share(d.uuid, d.usedcores, d.usedmem) for d in slot] for slot in devices])


class ShareTag(NamedTuple):
    """What one container's share of a device says about the pod: the QoS policy it holds the device under ("" for
    a whole-card or online share, which constrain no policy) and the pod's app class ("" when none)."""

    qos: str
    app_class: str


def share_tag(qos: str, app_class: str, cores: int) -> ShareTag:
    """The tag of a share of ``cores`` cores taken by a pod with this QoS policy and app class."""
    return ShareTag("" if cores >= 100 or app_class == ONLINE else qos, app_class)


def share_tags(devices: PodDevices, qos: str, app_class: str) -> Iterator[tuple[str, ShareTag]]:
    """(device id, tag) for every device of every container slot, in slot order."""
    for slot in devices:
        for d in slot:
            yield d.uuid, share_tag(qos, app_class, d.usedcores)


def tags_on(positions: Sequence[object]) -> list[ShareTag]:
    """The share tags among a device's slice positions."""
    return [p for p in positions if isinstance(p, ShareTag)]
