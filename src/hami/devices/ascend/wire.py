"""Huawei Ascend wire formats (webhook-bind-plugin-vendors.md §0.4, §7).

* ``decode_register`` — ``hami.io/node-register-<CW>``: HAMi's JSON inventory as Go's ``encoding/json`` reads it
  into its ``DeviceInfo``, object keys matched **case-insensitively** (the Ascend device plugin and HAMi's own tests
  write ``"ID"``, ``"Count"``), the last of two spellings of a key winning; each device's ``custominfo`` object is
  returned beside it (the plugin puts the NPU's ``NetworkID`` there). Types and ranges are HAMi's usual ones
  (``decode_inventory_json``).
* ``encode_runtime_info`` — the ``huawei.com/<CW>`` pod annotation the Ascend device plugin reads: Go's
  ``json.Marshal`` of ``[]RuntimeInfo{UUID, temp, memory, core}``, every field ``omitempty``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from hami.errors import AnnotationError
from hami.protocol import _gojson
from hami.protocol.inventory import DeviceInfo, decode_inventory_json

__all__ = ["RuntimeInfo", "decode_register", "encode_runtime_info"]

_FIELDS: Final = {
    name.lower(): name
    for name in ("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "migProfiles", "health")
}
_RAW_DECODER: Final = msgspec.json.Decoder(list[Any] | None)


def decode_register(value: str, field: str) -> list[tuple[DeviceInfo, Mapping[str, Any] | None]]:
    """Every device of the registration with its ``custominfo`` (None when absent or ``null``).

    Raises ``AnnotationError`` (naming ``field``) for malformed JSON, a value that is not an array of objects, a
    ``custominfo`` that is not an object, and every type or range error ``decode_inventory_json`` reports.
    """
    items = _gojson.decode(value, _RAW_DECODER, field) or []
    canonical: list[dict[str, Any]] = []
    customs: list[Mapping[str, Any] | None] = []
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise AnnotationError(field, value, "invalid JSON value: each device must be an object", position)
        device: dict[str, Any] = {}
        custom: object = None
        for key, raw in item.items():
            lower = key.lower()
            if lower == "custominfo":
                custom = raw
            elif lower in _FIELDS:
                device[_FIELDS[lower]] = raw
        if custom is not None and not isinstance(custom, dict):
            raise AnnotationError(field, value, "invalid JSON value: custominfo must be an object", position)
        canonical.append(device)
        customs.append(custom)
    try:
        devices = decode_inventory_json(_gojson.encode(canonical), field)
    except AnnotationError as err:
        raise AnnotationError(field, value, err.reason, err.position) from None
    return list(zip(devices, customs, strict=True))


class RuntimeInfo(msgspec.Struct, omit_defaults=True, rename={"uuid": "UUID"}):
    """One entry of ``huawei.com/<CW>``: the NPU, the vNPU template (none for a whole card or a soft split), the
    memory (MiB) and cores given. Zero values are left out, as Go's ``omitempty`` does."""

    uuid: str = ""
    temp: str = ""
    memory: int = 0
    core: int = 0


def encode_runtime_info(entries: Iterable[RuntimeInfo]) -> str:
    """The annotation value, byte-identical to HAMi's (compact JSON, ``<``/``>``/``&`` escaped)."""
    return _gojson.encode(list(entries))
