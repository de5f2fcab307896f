"""What every vendor shares: the parsed request, the fit context and outcome, and the ``Vendor`` interface.

A vendor answers Koordinator's two questions — how much of which device a container needs
(``parse_request``) and which devices on a node can serve it (``fit``) — plus its own annotation codecs.
The registry is an explicit dict in ``hami.devices`` (no import side effects).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from hami.devices.policy import GpuPolicy
from hami.devices.table import DeviceTable
from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.protocol.inventory import DeviceInfo, MigPlacement
from hami.protocol.keys import VendorKeys
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason, Rejection

__all__ = [
    "MEM_PERCENTAGE_UNSET",
    "ContainerRequest",
    "FitContext",
    "Fitted",
    "NodeInventory",
    "Placement",
    "QuotaCheck",
    "ResourceNames",
    "Selector",
    "Unfit",
    "Vendor",
]

MEM_PERCENTAGE_UNSET: Final = 101
"""HAMi's sentinel for "no memory percentage given" (scheduler-core.md §3.2)."""


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One container's request for one vendor's devices.

    * ``vendor`` — the vendor key (``"NVIDIA"``, ``"DCU"``), not a card model;
    * ``nums`` — how many devices (> 0; containers without a request have no ``ContainerRequest``);
    * ``memreq`` — MiB per device, already multiplied by the vendor's memory factor (0 = use the percentage);
    * ``mem_percentage`` — percent of each device's memory, 1..100, or ``MEM_PERCENTAGE_UNSET`` (101);
    * ``coresreq`` — core units per device (percent of a card);
    * ``priority`` — ``nvidia.com/priority`` (task priority passed to HAMi-core), ``None`` when absent.
    """

    vendor: str
    nums: int
    memreq: int = 0
    mem_percentage: int = MEM_PERCENTAGE_UNSET
    coresreq: int = 0
    priority: int | None = None

    def memory_on(self, devmem: int) -> int:
        """MiB this request reserves on a device with ``devmem`` MiB (spec §6.2 step 9)."""
        if self.memreq > 0:
            return self.memreq
        if self.mem_percentage != MEM_PERCENTAGE_UNSET:
            return devmem * self.mem_percentage // 100
        return 0


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """The resource names a vendor owns; quota keys are ``limits.<memory>`` and ``limits.<core>``."""

    count: str
    memory: str | None
    core: str | None
    memory_factor: int = 1


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """A node's devices of one vendor, decoded from its registration annotations."""

    devices: tuple[DeviceInfo, ...]
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Selector:
    """A pod's device filters for one vendor, parsed once per decision from its annotations (spec §6.11).

    Type filters match **whole words** of the card type, case-insensitively (deliberate difference: HAMi
    matches substrings, so ``A10`` would also select ``A100``). ``modes`` is the set of allowed device modes
    (``nvidia.com/vgpu-mode``), ``None`` when unrestricted; matching is exact per mode.
    """

    use_types: tuple[tuple[str, ...], ...] = ()
    nouse_types: tuple[tuple[str, ...], ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    modes: frozenset[str] | None = None

    def type_ok(self, info: DeviceInfo) -> bool:
        if not self.use_types and not self.nouse_types and self.modes is None:
            return True
        if self.use_types or self.nouse_types:
            words = _words(info.type)
            if self.use_types and not any(_contains_run(words, item) for item in self.use_types):
                return False
            if any(_contains_run(words, item) for item in self.nouse_types):
                return False
        return self.modes is None or (info.mode or "hami-core") in self.modes

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuids and uuid not in self.use_uuids:
            return False
        return uuid not in self.nouse_uuids


def _words(text: str) -> tuple[str, ...]:
    out: list[str] = []
    word: list[str] = []
    for ch in text.lower():
        if ch.isalnum():
            word.append(ch)
        elif word:
            out.append("".join(word))
            word = []
    if word:
        out.append("".join(word))
    return tuple(out)


def _contains_run(words: tuple[str, ...], item: tuple[str, ...]) -> bool:
    n = len(item)
    return n > 0 and any(words[i : i + n] == item for i in range(len(words) - n + 1))


def parse_type_list(value: str | None) -> tuple[tuple[str, ...], ...]:
    """A comma list of card-type items, each split into lower-case words; blanks ignored."""
    if not value:
        return ()
    return tuple(w for w in (_words(item) for item in value.split(",")) if w)


def parse_uuid_list(value: str | None) -> frozenset[str]:
    if not value:
        return frozenset()
    return frozenset(item.strip() for item in value.split(",") if item.strip())


QuotaCheck = Callable[[Sequence["Placement"], int, int, str], bool]
"""``quota(accepted, mem, cores, uuid)``: would the pod still fit its namespace quota if this container also took
``mem``/``cores`` on device ``uuid``, given the devices it already ``accepted``? (The device matters: the pod's
usage is collapsed per device, so an app container on the GPU an init container used adds only the excess.)"""


@dataclass(slots=True)
class FitContext:
    """What Fit needs besides the node's table and the request; built once per pod (and node)."""

    policy: GpuPolicy
    weights: tuple[int, int, int] = (1, 1, 1)  # slot, core, memory (hami.io/device-scoring-weights)
    cordoned: frozenset[str] = frozenset()
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    quota: QuotaCheck | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """One device given to one container: the table index, the annotation record, the MIG instance if any."""

    index: int
    device: ContainerDevice
    mig_profile: str | None = None
    mig_placement: MigPlacement | None = None


@dataclass(frozen=True, slots=True)
class Fitted:
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Unfit:
    """Why a container does not fit: devices per reason (HAMi's counts), out of ``total`` devices, and the
    numbers behind the closest misses (largest free amount first)."""

    counts: Mapping[Reason, int]
    total: int
    closest: tuple[Rejection, ...] = ()


class Vendor(Protocol):
    """One device vendor. Implementations are stateless apart from their configuration."""

    @property
    def name(self) -> str:
        """The vendor key (``"NVIDIA"``)."""

    @property
    def keys(self) -> VendorKeys: ...

    @property
    def resources(self) -> ResourceNames: ...

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        """The container's request for this vendor, None when it asks for none; raises ``InvalidInput``."""

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        """The node's devices of this vendor; None when the node has no registration for it.

        Raises ``AnnotationError`` when the registration is present but malformed.
        """

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        """The pod's device filters for this vendor."""

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        """Choose devices for one container on one node; pure (reads ``table``, never writes it)."""

    def encode(self, devices: PodDevices) -> str:
        """The allocation annotation value for this vendor (spec §2.5)."""

    def decode(self, value: str, field: str) -> PodDevices:
        """Decode this vendor's allocation annotation; raises ``AnnotationError``."""
