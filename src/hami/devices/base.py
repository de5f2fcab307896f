"""What every vendor shares: the parsed request, the fit context and outcome, and the ``Vendor`` interface.

A vendor answers Koordinator's two questions — how much of which device a container needs
(``parse_request``) and which devices on a node can serve it (``fit``) — and owns everything else that is
particular to it: its resource names and config section, its annotation keys (``VendorKeys``: registration,
handshake or none, allocation, extra pod annotations, node lock), its inventory (``decode_inventory`` reads the
whole Node, so a vendor may decode a registration annotation or derive devices from ``status.capacity``), its
admission (``admitter``), its partition hook (``Partitions``: devices handed out in fixed slices), its node score
contribution (``Fitted.score``) and its annotation codecs. The core (``hami.scheduling``, ``hami.server``) sees
"device, amount, placement" and never a vendor's name. The registry is the explicit tuple ``hami.devices.REGISTRY``
of ``VendorFamily`` entries (``hami.devices.family``; no import side effects), each declared in its vendor's module
with the family's config section, switch and chart values. Capabilities are declared, never detected:
``SharedDeviceVendor.screens``, ``ordered_by_policy`` and ``reads_slices`` (``hami.devices.common``), the
``Screening`` protocol (``hami.devices.screening``).

What the core hands a vendor, beyond the request:

* ``Selector.options`` — vendor-specific pod options its ``selector`` parsed (read in ``fit`` with ``option``);
* ``FitContext.node_info`` / ``pair_scores`` — node-level facts its ``decode_inventory`` returned in
  ``NodeInventory``; ``FitContext.chosen`` — its placements for the pod's earlier containers on that node;
* ``AnnotationContext`` — the whole decision (node, its allocation, slices, container names, time in ns) for
  ``extra_annotations``, called for every vendor with devices in the decision;
* at admission, ``PodContext`` (``hami.devices.admission``) — the pod as edited so far.

And what the core does with its keys (``VendorKeys``): ``register=""`` means the inventory comes from
``status.capacity`` (no registration annotation is required anywhere), ``handshake=None`` means no handshake is
stamped, ``to_allocate=None`` means only ``allocated`` is written, and ``/bind`` takes each distinct ``lock`` of
the pod's vendors (sorted, each with ``lock_expiry_s``), none when no vendor has one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from hami.devices.admission import Admitter
from hami.devices.policy import GpuPolicy
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput
from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.protocol.inventory import DeviceInfo
from hami.protocol.keys import VendorKeys
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason, Rejection

__all__ = [
    "MEM_PERCENTAGE_UNSET",
    "AnnotationContext",
    "Carved",
    "ContainerRequest",
    "CoreCount",
    "FitContext",
    "Fitted",
    "NodeInventory",
    "Partitions",
    "Placement",
    "QuotaCheck",
    "ResourceNames",
    "Selector",
    "Slice",
    "SliceAt",
    "SliceLabels",
    "Unfit",
    "Vendor",
    "core_counter",
    "cores_shown",
    "parse_bool",
    "parse_substring_list",
    "parse_type_list",
    "parse_uuid_list",
    "too_few_devices",
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
    * ``priority`` — ``nvidia.com/priority`` (task priority passed to HAMi-core), ``None`` when absent;
    * ``variant`` — the vendor's own form of the request, opaque to the core and read back by the vendor's ``fit``
      (Enflame DRS: a slice count or a memory/core spec; AWS Neuron: devices or NeuronCores), for requests whose
      meaning depends on the node (its profiles, its cores per device). Part of the request's signature.
    """

    vendor: str
    nums: int
    memreq: int = 0
    mem_percentage: int = MEM_PERCENTAGE_UNSET
    coresreq: int = 0
    priority: int | None = None
    variant: str = ""

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
    """A node's devices of one vendor, decoded from its registration annotations or its capacity.

    * ``pair_scores`` — device id → device id → link score (NVIDIA's ``hami.io/node-nvidia-score``);
    * ``node_info`` — other node-level facts the vendor's ``fit`` needs, decoded with the inventory (MetaX
      topology losses/scores JSON, Ascend's ``hami-vnpu-core`` opt-in, …), as text keyed by a name the vendor
      chooses. The filter passes them to ``FitContext.node_info`` unchanged; the core never reads them.
    """

    devices: tuple[DeviceInfo, ...]
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    node_info: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Selector:
    """A pod's device filters for one vendor, parsed once per decision from its annotations (spec §6.11).

    Type filters match **whole words** of the card type, case-insensitively (deliberate difference: HAMi
    matches substrings, so ``A10`` would also select ``A100``), unless ``type_substrings``: then each item is a
    case-insensitive substring of the card type, as HAMi matches them (a vendor whose model names extend one
    another, AMD's ``MI250``/``MI250X``, sets it; items come from :func:`parse_substring_list`). ``modes`` is the
    set of allowed device modes (``nvidia.com/vgpu-mode``), ``None`` when unrestricted; matching is exact per mode.

    ``options`` are vendor-specific pod options the vendor's ``selector`` parsed from the annotations (Ascend's
    ``huawei.com/vnpu-mode``, MetaX's QoS policy and app class, …) as sorted ``(name, value)`` pairs, read in
    ``fit`` with ``option(name)``. They are part of the request's signature, so pods with different options
    never share a memoised verdict.
    """

    use_types: tuple[tuple[str, ...], ...] = ()
    nouse_types: tuple[tuple[str, ...], ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    modes: frozenset[str] | None = None
    options: tuple[tuple[str, str], ...] = ()
    type_substrings: bool = False

    @classmethod
    def from_annotations(
        cls,
        annotations: Mapping[str, str],
        uuids: tuple[str, str],
        types: tuple[str, str] | None = None,
        *,
        modes: frozenset[str] | None = None,
        options: tuple[tuple[str, str], ...] = (),
        type_substrings: bool = False,
    ) -> Selector:
        """The filters a pod's annotations set: its UUID lists under the keys ``uuids`` (use, nouse) and, with
        ``types``, its card-type lists under those keys (use, nouse; substrings with ``type_substrings``, as
        :func:`parse_substring_list` reads them); ``modes`` and ``options`` as the vendor parsed them."""
        parse = parse_substring_list if type_substrings else parse_type_list
        use_types, nouse_types = (
            (parse(annotations.get(types[0])), parse(annotations.get(types[1]))) if types is not None else ((), ())
        )
        return cls(
            use_types=use_types,
            nouse_types=nouse_types,
            use_uuids=parse_uuid_list(annotations.get(uuids[0])),
            nouse_uuids=parse_uuid_list(annotations.get(uuids[1])),
            modes=modes,
            options=options,
            type_substrings=type_substrings,
        )

    def option(self, name: str, default: str = "") -> str:
        """The value of the vendor option ``name``, ``default`` when the pod did not give it."""
        for key, value in self.options:
            if key == name:
                return value
        return default

    def type_ok(self, info: DeviceInfo) -> bool:
        if not self.use_types and not self.nouse_types and self.modes is None:
            return True
        if self.use_types or self.nouse_types:
            hit = self._type_hit(info.type)
            if self.use_types and not any(hit(item) for item in self.use_types):
                return False
            if any(hit(item) for item in self.nouse_types):
                return False
        return self.modes is None or (info.mode or "hami-core") in self.modes

    def _type_hit(self, card_type: str) -> Callable[[tuple[str, ...]], bool]:
        """Whether one filter item matches ``card_type``: a run of its words, or (``type_substrings``) a part of
        it. An empty item (a blank member of the list) matches nothing."""
        if self.type_substrings:
            folded = card_type.lower()
            return lambda item: bool(item) and item[0] in folded
        words = _words(card_type)
        return lambda item: _contains_run(words, item)

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


def parse_substring_list(value: str | None) -> tuple[tuple[str, ...], ...]:
    """A comma list of card-type items as HAMi's AMD filter reads it: each member trimmed and lower-cased, one
    substring to look for; a blank member is kept as ``()``, which matches nothing (so ``", "`` as a use list
    admits no card, as in HAMi), and a blank value is no filter at all."""
    if not value or not value.strip():
        return ()
    return tuple((m.strip().lower(),) if m.strip() else () for m in value.split(","))


def parse_uuid_list(value: str | None) -> frozenset[str]:
    if not value:
        return frozenset()
    return frozenset(item.strip() for item in value.split(",") if item.strip())


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(value: str, field: str) -> bool:
    """A boolean annotation as Go's ``strconv.ParseBool`` reads it; raises ``InvalidInput`` otherwise."""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidInput(field, value, "not a boolean (expected true or false)")


QuotaCheck = Callable[[Sequence["Placement"], int, int, str], bool]
"""``quota(accepted, mem, cores, uuid)``: would the pod still fit its namespace quota if this container also took
``mem``/``cores`` on device ``uuid``, given the devices it already ``accepted``? (The device matters: the pod's
usage is collapsed per device, so an app container on the GPU an init container used adds only the excess.)"""


@dataclass(slots=True)
class FitContext:
    """What Fit needs besides the node's table and the request; built once per container (and node).

    * ``pair_scores``, ``node_info`` — this vendor's ``NodeInventory.pair_scores`` and ``node_info`` for the node;
    * ``chosen`` — this vendor's placements already made for the earlier containers of the same pod on this node,
      in container order (init first; ``()`` for a container that asked for none), so a vendor can keep every
      container of a pod on the same card;
    * ``quota`` — the namespace quota check, None when the namespace has no device limits.
    """

    policy: GpuPolicy
    weights: tuple[int, int, int] = (1, 1, 1)  # slot, core, memory (hami.io/device-scoring-weights)
    cordoned: frozenset[str] = frozenset()
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    quota: QuotaCheck | None = None
    node_info: Mapping[str, str] = field(default_factory=dict)
    chosen: tuple[tuple[Placement, ...], ...] = ()
    node_policy: str = "binpack"
    """The pod's node policy (``binpack``/``spread``): a vendor's node score contribution may depend on it (MetaX
    reads topology losses for binpack and scores for spread)."""


@dataclass(frozen=True, slots=True)
class Slice:
    """One fixed slice of a partitioned device: the vendor's template name (NVIDIA: the MIG profile; Ascend: the
    vNPU template) and its position on the device (NVIDIA: a ``MigPlacement``; ``None`` for vendors whose slices
    have no position). Positions are what the ledger keeps per device (``DeviceTable.slices``); the core only
    compares them for equality. ``facts`` are further vendor facts about the slice, as sorted ``(name, value)``
    pairs, that its ``extra_annotations`` writes (Enflame DRS: the profile id and the device minor); the core
    never reads them. A vendor without partitions may still give its placements a slice, to have the ledger keep a
    fact about each share with the device (MetaX sGPU: the QoS policy and app class of the pod holding it,
    ``ShareTag``); its ``decode_slices`` reads the same facts back from a placed pod."""

    template: str
    position: Hashable | None = None
    facts: tuple[tuple[str, str], ...] = ()

    def fact(self, name: str, default: str = "") -> str:
        """The value of the fact ``name``, ``default`` when the vendor did not record it."""
        for key, value in self.facts:
            if key == name:
                return value
        return default


@dataclass(frozen=True, slots=True)
class SliceAt:
    """A slice given to one container: the container's index (init first), the device's position in that
    container's list, the device's id and the slice. A vendor's extra pod annotations are encoded from these."""

    container: int
    device: int
    uuid: str
    slice: Slice


@dataclass(frozen=True, slots=True)
class AnnotationContext:
    """The whole decision for one vendor, from which it writes its extra pod annotations
    (``Vendor.extra_annotations``):

    * ``node`` — the chosen node;
    * ``devices`` — this vendor's allocation, one slot per container (init containers first; an empty slot for
      a container that got none of its devices);
    * ``slices`` — the slices chosen on its partitioned devices (empty for none);
    * ``containers`` — the container names, in the same order as the slots of ``devices``;
    * ``now_ns`` — the decision time in Unix nanoseconds (``now_ns // 10**9`` is the ``hami.io/vgpu-time``
      value written beside it).
    """

    node: str
    devices: PodDevices
    slices: tuple[SliceAt, ...]
    containers: tuple[str, ...]
    now_ns: int


@dataclass(frozen=True, slots=True)
class Placement:
    """One device given to one container: the table index, the annotation record, the slice if the device is
    partitioned (``Partitions``)."""

    index: int
    device: ContainerDevice
    slice: Slice | None = None


@dataclass(frozen=True, slots=True)
class Fitted:
    """The devices for one container, and this choice's contribution to the node score (a vendor's topology
    losses or scores, NetworkID groups; 0 for vendors scored on usage alone). The cycle adds the contributions
    of every container to the node's usage score."""

    placements: tuple[Placement, ...]
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class Unfit:
    """Why a container does not fit: devices per reason (HAMi's counts), out of ``total`` devices, and the
    numbers behind the closest misses (largest free amount first)."""

    counts: Mapping[Reason, int]
    total: int
    closest: tuple[Rejection, ...] = ()


def too_few_devices(devices: int, nums: int) -> Unfit:
    """The ``Unfit`` of a request for ``nums`` devices on a node with only ``devices`` of the vendor: every device
    counts ``NodeInsufficientDevice``, and the closest miss says how many there are."""
    miss = Rejection(Reason.NODE_INSUFFICIENT_DEVICE, None, nums, devices)
    return Unfit({Reason.NODE_INSUFFICIENT_DEVICE: devices}, devices, (miss,))


@dataclass(frozen=True, slots=True)
class Carved:
    """One slice planned on a device: the slice, and the memory (MiB) and cores it holds — the template's, not
    the request's (a template rounds the request up), which is what the ledger charges."""

    slice: Slice
    mem: int
    cores: int


class Partitions(Protocol):
    """The partition hook of a vendor that carves a device into fixed slices (NVIDIA MIG profiles, Ascend vNPU
    templates; Kunlun vXPU and Enflame DRS size their slices in their own fits). The shared fit loop
    (``hami.devices.common``) asks it to plan slices; the ledger asks it whether what a pod holds agrees with the
    device (fail closed if not)."""

    @property
    def infeasible(self) -> Reason:
        """The reason counted when no slice can be planned on a device (NVIDIA: ``CardMigTopologyInfeasible``)."""

    def carves(self, info: DeviceInfo) -> bool:
        """Whether this device is handed out in slices (the fit then plans slices on it)."""

    def several_per_device(self, infos: Sequence[DeviceInfo], selector: Selector) -> bool:
        """Whether one container may take several slices of one device on this node (a request for N devices
        may then be served by fewer physical devices)."""

    def plan(self, info: DeviceInfo, occupied: Sequence[Hashable], amounts: Sequence[int]) -> list[Carved] | None:
        """One slice per amount (MiB), in order, beside the ``occupied`` positions; None if any cannot be placed.
        Planning again from the same state gives the same slices for the same leading amounts."""

    def conflict(self, info: DeviceInfo, held: Sequence[Hashable], owner: str) -> str | None:
        """Why the charge of pod ``owner`` (``namespace/name``) on this device, holding the slice positions
        ``held``, contradicts the device (the device is then taken out of service, ``DeviceTable.broken``);
        None when it agrees."""


@runtime_checkable
class CoreCount(Protocol):
    """Optional for a vendor that keeps a device's cores as something other than a number of them (AWS Neuron: a
    bitmask, ``0b11`` for two cores): how many cores a ``devcore``, a usage or a charge of its counts, for reports
    and metrics. Without it a core value is shown as it is."""

    def core_count(self, value: int) -> int:
        """The number of cores ``value`` stands for."""


def cores_shown(vendor: object, value: int) -> int:
    """``value`` as a number of cores: the vendor's ``CoreCount`` when it has one, else ``value``."""
    return core_counter(vendor)(value)


def _as_is(value: int) -> int:
    return value


def core_counter(vendor: object) -> Callable[[int], int]:
    """``cores_shown`` for one vendor, resolved once: the check against the ``CoreCount`` protocol costs about 20 µs
    (0.8 s over 40,000 devices, one call each), the returned function nothing more than the count itself."""
    return vendor.core_count if isinstance(vendor, CoreCount) else _as_is


@runtime_checkable
class SliceLabels(Protocol):
    """Optional for a partition hook: how its slices read in reports (``hami simulate``, ``hami top``). Without it
    a report shows a slice by its template name, or as ``slice``."""

    @property
    def slice_kind(self) -> str:
        """What the vendor calls a slice (NVIDIA: ``MIG``; Ascend: ``vNPU``)."""

    def slice_labels(self, info: DeviceInfo, positions: Sequence[Hashable]) -> list[str]:
        """The slices at ``positions`` on the device ``info`` as people read them, in the order to show them
        (NVIDIA: ``["2g.20gb@0", "1g.10gb@6"]``, by start)."""


class Vendor(Protocol):
    """One device vendor. Implementations are stateless apart from their configuration.

    Adding a vendor: its module in ``hami.devices`` implementing this protocol (most reuse
    ``common.SharedDeviceVendor``) and declaring its ``VendorFamily`` (config model, defaults, switch, chart values),
    its test file, its line in ``hami.devices.REGISTRY`` and its chart values.
    """

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

    @property
    def partitions(self) -> Partitions | None:
        """The partition hook, None for a vendor whose devices are shared, never carved."""

    def admitter(self) -> Admitter:
        """This vendor's admission behaviour (webhook defaults, rewrites and denials)."""

    def numa_bind(self, annotations: Mapping[str, str]) -> bool:
        """Whether the pod asks for its devices on one NUMA node (this vendor's annotation, if it has one);
        raises ``InvalidInput`` for a value it cannot read."""

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        """The pod annotations this vendor writes besides its allocation (every key in ``keys.extra``, so they are
        removed with the allocation), from the whole decision; empty for none. Called for every vendor with
        devices in the decision (NVIDIA: ``hami.io/vgpu-mig-allocations`` from ``ctx.slices``)."""

    def decode_slices(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
        """The slice positions a placed pod holds, as (device id, position), from its annotations; raises
        ``InvalidInput`` when they cannot be read."""
