"""Node device inventory: HAMi's JSON register format and the legacy colon format (scheduler-core.md §2.2).

* ``decode_inventory_json`` / ``encode_inventory_json`` — the current format (``hami.io/node-nvidia-register``
  and the other JSON vendors). Encoding is byte-identical to HAMi's ``MarshalNodeDevices`` (Go
  ``encoding/json``: struct key order, ``omitempty`` zero values left out, ``<``/``>``/``&`` escaped), so
  ``encode(decode(x)) == x`` for every value HAMi's device plugin writes.
* ``decode_inventory_legacy`` / ``encode_inventory_legacy`` — the colon format of HAMi ≤ v2.7 and of the Hygon
  and Iluvatar backends: ``ID,Count,Devmem,Devcore,Type,Numa,Health[,Index,Mode]:`` per device. Decoding applies
  HAMi's ``DecodeNodeDevices`` rules and check order exactly; encoding always writes 9 fields.

Decoders raise ``AnnotationError`` only; an empty inventory is not an error here (the vendor decides whether a
node without devices counts as registered: NVIDIA says ``no gpu found on node``).

* ``check_inventory`` — hami's own acceptance rules for a decoded registration, beyond Go's type ranges: unique,
  non-blank ids made of safe characters, numbers no real device exceeds, a bounded number of devices. HAMi accepts
  all of these silently; a registration that breaks one is refused as a whole (the scheduler quarantines the node
  for that vendor). The limits are the ``MAX_*`` constants below.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from hami.errors import AnnotationError, InvalidInput
from hami.protocol import _gojson, keys
from hami.protocol._gojson import GoInt, GoInt32, GoUint, GoUint32
from hami.protocol._gostrconv import GoNumError, go_quote, parse_bool, parse_int

__all__ = [
    "LEGACY_DEFAULT_MODE",
    "MAX_DEVCORE",
    "MAX_DEVICES",
    "MAX_ID_LENGTH",
    "MAX_INDEX",
    "MAX_MIG_PLACEMENTS",
    "MAX_MIG_PROFILES",
    "MAX_MIG_SLICES",
    "MAX_NUMA",
    "MAX_SLOTS",
    "DeviceInfo",
    "MigPlacement",
    "MigProfile",
    "check_inventory",
    "decode_inventory_json",
    "decode_inventory_legacy",
    "encode_inventory_json",
    "encode_inventory_legacy",
]

LEGACY_DEFAULT_MODE: Final = "hami-core"
"""The mode a 7-field legacy record decodes to."""

# --- hami's limits on a registration (check_inventory). Each is far above what real hardware registers. ----------
MAX_DEVICES: Final = 1024
"""Devices of one vendor on one node. Real nodes carry 1 to 16 GPUs/DCUs; more than 1024 is a broken or hostile
device plugin, and every Filter walks every device of every candidate node."""
MAX_SLOTS: Final = 1024
"""``count``: tasks sharing one device (``deviceSplitCount``, chart default 10). The device plugin advertises
devices × count fake devices to the kubelet, so real values stay in the tens."""
MAX_DEVCORE: Final = 10_000
"""``devcore``: core units of one device, 100 × ``deviceCoreScaling`` (so a scaling of at most 100)."""
MAX_NUMA: Final = 1023
"""``numa``: the NUMA node; Linux has at most 1024 (``CONFIG_NODES_SHIFT`` ≤ 10). Negative values are refused."""
MAX_INDEX: Final = MAX_DEVICES - 1
"""``index``: the host's device index (NVML's), below the device limit."""
MAX_ID_LENGTH: Final = 256
"""``id``: NVIDIA UUIDs are 40 characters (``GPU-`` + 36), MIG UUIDs 40 to 44."""
MAX_MIG_PROFILES: Final = 64
"""MIG profiles per GPU (an H100 lists about 20, counting the ``+me``/``+gfx`` variants)."""
MAX_MIG_PLACEMENTS: Final = 64
"""Placements per MIG profile (at most 7 on every MIG-capable GPU so far)."""
MAX_MIG_SLICES: Final = 64
"""``sliceCount``, placement ``start`` and ``size`` (GPUs so far have 7 compute and 8 memory slices)."""

_ID_FORBIDDEN: Final = frozenset(",:;[]")
"""Separators of the pod allocation annotation (``UUID,Type,mem,cores:`` per device, ``;`` per container), of the
UUID lists (``use-gpuuuid``, ``device-cordon``) and of legacy MIG UUIDs (``GPU-x[1-2]``): an id holding one would be
read back as another device."""


class MigPlacement(msgspec.Struct, frozen=True):
    """A legal MIG placement: GPU slices ``[start, start + size)``. Go: two ``uint32``."""

    start: GoUint32 = 0
    size: GoUint32 = 0


class MigProfile(msgspec.Struct, frozen=True, rename={"memory_mb": "memoryMB", "slice_count": "sliceCount"}):
    """A MIG profile a GPU can host. JSON keys are not omitempty in HAMi, so every key is always written;
    a missing key decodes to its zero value, as in Go."""

    name: str = ""
    memory_mb: GoInt32 = 0
    core: GoInt32 = 0
    slice_count: GoUint32 = 0
    placements: tuple[MigPlacement, ...] = ()


class DeviceInfo(msgspec.Struct, frozen=True, omit_defaults=True, rename={"mig_profiles": "migProfiles"}):
    """One physical device as a node registers it. Field order is HAMi's JSON key order; zero values are
    omitted on encode (Go ``omitempty``), and an absent ``health`` decodes as ``False``.

    ``devmem`` is MiB, ``devcore`` is core units (100 = one whole card), ``count`` is the number of slots.
    Ranges are Go's: ``index`` uint, ``count``/``devmem``/``devcore`` int32, ``numa`` int.
    """

    id: str = ""
    index: GoUint = 0
    count: GoInt32 = 0
    devmem: GoInt32 = 0
    devcore: GoInt32 = 0
    type: str = ""
    numa: GoInt = 0
    mode: str = ""
    mig_profiles: tuple[MigProfile, ...] = ()
    health: bool = False


_JSON_DECODER: Final = msgspec.json.Decoder(list[DeviceInfo] | None)

_INT32: Final = (-(1 << 31), (1 << 31) - 1)
_UINT32: Final = (0, (1 << 32) - 1)
_INT64: Final = (-(1 << 63), (1 << 63) - 1)
_UINT64: Final = (0, (1 << 64) - 1)


# --- JSON ---------------------------------------------------------------------------------------


def decode_inventory_json(value: str, field: str = keys.NVIDIA_REGISTER) -> list[DeviceInfo]:
    """Decode a JSON register annotation. ``null`` and ``[]`` give ``[]`` (as Go's ``json.Unmarshal`` does).

    Errors: malformed JSON (``position`` = character offset), not an array, a field of the wrong type or out of
    its Go range (``position`` = the device's index in the array). Unknown keys (``devicevendor``,
    ``custominfo``, ``migtemplate``, ``instanceCount``) are ignored.
    """
    devices = _gojson.decode(value, _JSON_DECODER, field) or []
    for position, device in enumerate(devices):
        problem = _range_problem(device)
        if problem is not None:
            name, number, (low, high) = problem
            reason = f"invalid JSON value: {name} {number} is outside the Go range {low}..{high}"
            raise AnnotationError(field, value, reason, position)
    return devices


def encode_inventory_json(devices: Iterable[DeviceInfo]) -> str:
    """Encode as HAMi's ``MarshalNodeDevices`` does, byte for byte.

    Raises ``InvalidInput`` for a value Go could not hold (a number outside its Go type, a lone surrogate).
    """
    devices = list(devices)
    for position, device in enumerate(devices):
        _check_ranges(device, position)
    try:
        return _gojson.encode(devices)
    except UnicodeEncodeError as exc:
        raise InvalidInput("devices", exc.object, "text with a lone surrogate cannot be encoded") from None


# --- hami's acceptance rules --------------------------------------------------------------------------------


def check_inventory(devices: Sequence[DeviceInfo], field: str) -> None:
    """Raise ``InvalidInput`` for the first reason to refuse a decoded registration, None when it is acceptable.

    Refused: more than ``MAX_DEVICES`` devices; an id that is blank, longer than ``MAX_ID_LENGTH``, holds anything
    but printable ASCII or one of ``, : ; [ ]``, or repeats another device's id; a number outside its range
    (``_NUMBER_RANGES``, and the MIG limits). ``field`` is the annotation key; the message adds the device's
    position (``devices[i]``), its id and host index, the field name and the value. Runs in O(devices).
    """
    if len(devices) > MAX_DEVICES:
        raise InvalidInput(
            field, len(devices), f"too many devices in one registration: hami accepts at most {MAX_DEVICES} per node"
        )
    seen: dict[str, int] = {}
    for position, device in enumerate(devices):
        where = f"{field} devices[{position}]"
        _check_id(device, where)
        first = seen.setdefault(device.id, position)
        if first != position:
            raise InvalidInput(
                f"{where}.id",
                device.id,
                f"device id repeated (index {device.index}; devices[{first}] has the same id): usage charged to one "
                "of them would leave the other looking free, so every device needs its own id",
            )
        _check_numbers(device, where)


_NUMBER_RANGES: Final = (
    ("index", "the host device index", 0, MAX_INDEX),
    ("count", "the number of tasks sharing the device", 0, MAX_SLOTS),
    ("devmem", "the memory in MiB", 0, _INT32[1]),
    ("devcore", "the core units (100 per card × deviceCoreScaling)", 0, MAX_DEVCORE),
    ("numa", "the NUMA node", 0, MAX_NUMA),
)


def _check_id(device: DeviceInfo, where: str) -> None:
    text = device.id
    problem = None
    if not text.strip():
        problem = "blank id; every device needs a non-empty id"
    elif len(text) > MAX_ID_LENGTH:
        problem = f"id longer than {MAX_ID_LENGTH} characters"
    elif any(c in _ID_FORBIDDEN or not "!" <= c <= "~" for c in text):
        problem = "id holds a character other than printable ASCII, or a space or one of , : ; [ ]"
    if problem is not None:
        raise InvalidInput(f"{where}.id", text, f"device at index {device.index}: {problem}")


def _check_numbers(device: DeviceInfo, where: str) -> None:
    def check(name: str, meaning: str, number: int, low: int, high: int) -> None:
        if not low <= number <= high:
            raise InvalidInput(
                f"{where}.{name}",
                number,
                f"device {device.id!r} (index {device.index}): {meaning} must be between {low} and {high}",
            )

    for name, meaning, low, high in _NUMBER_RANGES:
        check(name, meaning, getattr(device, name), low, high)
    check("migProfiles", "the number of MIG profiles", len(device.mig_profiles), 0, MAX_MIG_PROFILES)
    for p, profile in enumerate(device.mig_profiles):
        at = f"migProfiles[{p}]"
        check(f"{at}.memoryMB", "the MIG instance memory in MiB", profile.memory_mb, 0, _INT32[1])
        check(f"{at}.core", "the MIG instance core units", profile.core, 0, MAX_DEVCORE)
        check(f"{at}.sliceCount", "the number of MIG slices", profile.slice_count, 0, MAX_MIG_SLICES)
        check(f"{at}.placements", "the number of MIG placements", len(profile.placements), 0, MAX_MIG_PLACEMENTS)
        for q, placement in enumerate(profile.placements):
            check(f"{at}.placements[{q}].start", "the first MIG slice", placement.start, 0, MAX_MIG_SLICES)
            check(f"{at}.placements[{q}].size", "the number of MIG slices", placement.size, 0, MAX_MIG_SLICES)


# --- legacy colon format -------------------------------------------------------------------------


def decode_inventory_legacy(value: str, field: str) -> list[DeviceInfo]:
    """Decode the colon format with HAMi's ``DecodeNodeDevices`` rules, in its order (scheduler-core.md §2.2):

    1. no ``:`` anywhere → ``node annotation missing device separator`` (so ``""`` fails, ``":"`` is ``[]``);
    2. split on ``:``, skip empty segments; a segment without ``,`` → ``malformed node annotation segment``;
    3. 7 or 9 comma fields, else ``unexpected field count <n> in node annotation``;
    4. fields checked in the order count, memory, core (base-10 int32), health (Go ParseBool), numa (Atoi),
       index (Atoi, then ``index field must not be negative``); a 7-field record gets index 0, mode
       ``hami-core``.

    ``position`` is the character offset of the offending segment or field.
    """
    if ":" not in value:
        raise AnnotationError(field, value, "node annotation missing device separator")
    devices: list[DeviceInfo] = []
    offset = 0
    for segment in value.split(":"):
        start = offset
        offset += len(segment) + 1
        if not segment:
            continue
        if "," not in segment:
            raise AnnotationError(field, value, f"malformed node annotation segment: {go_quote(segment)}", start)
        items = segment.split(",")
        if len(items) not in (7, 9):
            raise AnnotationError(field, value, f"unexpected field count {len(items)} in node annotation", start)
        devices.append(_decode_legacy_record(items, _field_starts(items, start), field, value))
    return devices


def _field_starts(items: Sequence[str], start: int) -> list[int]:
    starts = []
    for item in items:
        starts.append(start)
        start += len(item) + 1
    return starts


def _decode_legacy_record(items: list[str], starts: list[int], field: str, value: str) -> DeviceInfo:
    def number(i: int, name: str, bits: int, func: str) -> int:
        try:
            return parse_int(items[i], bits, func)
        except GoNumError as exc:
            raise AnnotationError(field, value, f"invalid {name} field: {exc}", starts[i]) from None

    count = number(1, "count", 32, "ParseInt")
    devmem = number(2, "memory", 32, "ParseInt")
    devcore = number(3, "core", 32, "ParseInt")
    try:
        health = parse_bool(items[6])
    except GoNumError as exc:
        raise AnnotationError(field, value, f"invalid health field: {exc}", starts[6]) from None
    numa = number(5, "numa", 64, "Atoi")
    index, mode = 0, LEGACY_DEFAULT_MODE
    if len(items) == 9:
        index = number(7, "index", 64, "Atoi")
        if index < 0:
            raise AnnotationError(field, value, f"index field must not be negative: {index}", starts[7])
        mode = items[8]
    return DeviceInfo(
        id=items[0],
        index=index,
        count=count,
        devmem=devmem,
        devcore=devcore,
        type=items[4],
        numa=numa,
        mode=mode,
        health=health,
    )


def encode_inventory_legacy(devices: Iterable[DeviceInfo]) -> str:
    """Encode as HAMi's ``EncodeNodeDevices``: ``ID,Count,Devmem,Devcore,Type,Numa,Health,Index,Mode:`` each.

    MIG profiles have no place in this format and are left out (as in HAMi). No devices give ``""``, which the
    decoder rejects (as HAMi's does): a node without devices has no legacy inventory. Raises ``InvalidInput`` for a
    text field holding ``,`` or ``:`` or a number out of range — the result would not decode back.
    """
    parts = []
    for position, device in enumerate(devices):
        _check_ranges(device, position)
        for name in ("id", "type", "mode"):
            text = getattr(device, name)
            if "," in text or ":" in text:
                raise InvalidInput(f"devices[{position}].{name}", text, "holds a ',' or ':' separator")
        health = "true" if device.health else "false"
        parts.append(
            f"{device.id},{device.count},{device.devmem},{device.devcore},{device.type},"
            f"{device.numa},{health},{device.index},{device.mode}:"
        )
    return "".join(parts)


def _check_ranges(device: DeviceInfo, position: int) -> None:
    """Raise ``InvalidInput`` for a number Go's ``DeviceInfo`` could not hold."""
    problem = _range_problem(device)
    if problem is not None:
        name, number, (low, high) = problem
        raise InvalidInput(f"devices[{position}].{name}", number, f"outside the Go range {low}..{high}")


def _range_problem(device: DeviceInfo) -> tuple[str, int, tuple[int, int]] | None:
    """The first number Go's ``DeviceInfo`` could not hold: (field name, value, Go range), or ``None``."""
    checks: list[tuple[str, int, tuple[int, int]]] = [
        ("index", device.index, _UINT64),
        ("count", device.count, _INT32),
        ("devmem", device.devmem, _INT32),
        ("devcore", device.devcore, _INT32),
        ("numa", device.numa, _INT64),
    ]
    for p, profile in enumerate(device.mig_profiles):
        checks += [
            (f"migProfiles[{p}].memoryMB", profile.memory_mb, _INT32),
            (f"migProfiles[{p}].core", profile.core, _INT32),
            (f"migProfiles[{p}].sliceCount", profile.slice_count, _UINT32),
        ]
        for q, placement in enumerate(profile.placements):
            checks += [
                (f"migProfiles[{p}].placements[{q}].start", placement.start, _UINT32),
                (f"migProfiles[{p}].placements[{q}].size", placement.size, _UINT32),
            ]
    for name, number, bounds in checks:
        if not bounds[0] <= number <= bounds[1]:
            return name, number, bounds
    return None
