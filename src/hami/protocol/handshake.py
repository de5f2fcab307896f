"""The node handshake annotation ``hami.io/node-handshake`` (and its per-vendor variants; scheduler-core.md §2.4).

* **Current (v2.8+):** only the scheduler writes it, ``Requesting_<YYYY-MM-DD hh:mm:ss>`` in its local time
  (Go ``time.DateTime``, no zone). ``NodeCleanUp`` deletes the key.
* **Legacy (≤ v2.7):** the device plugin wrote ``Reported <Go time.Time.String()>`` and the scheduler's
  cleanup wrote ``Deleted_<YYYY-MM-DD hh:mm:ss>``.

``decode_handshake`` never fails: HAMi gives every value a meaning (§7.4). A value containing ``Requesting``
is a request whatever else it holds; its time is the text after the first ``_``, and when that does not parse
(``stamp is None``) HAMi treats the node as healthy with nothing to update — for ever, since such a stamp
never expires. Every other value (absent, ``Reported …``, ``Deleted_…``, ``Unknown``) means "not yet
requested": the scheduler re-stamps it. The states below keep the legacy distinctions for logs and for
replaying old clusters; the current algorithm needs only ``requested``.

Times are naive wall-clock datetimes: the value carries no zone, and HAMi reads it in its own local zone
(spec webhook-bind-plugin-vendors.md §11 item 4). Pure: the caller passes ``now``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from hami.protocol._gotime import format_datetime, parse_datetime, parse_datetime_prefix

__all__ = ["Handshake", "HandshakeState", "decode_handshake", "encode_deleted", "encode_requesting"]

_REQUESTING: Final = "Requesting"
_DELETED: Final = "Deleted"
_REPORTED: Final = "Reported"


class HandshakeState(enum.Enum):
    ABSENT = "absent"  # no annotation, or an empty value (Go cannot tell them apart)
    REQUESTING = "requesting"  # the value contains "Requesting"
    DELETED = "deleted"  # legacy: contains "Deleted" (scheduler cleanup)
    REPORTED = "reported"  # legacy: starts with "Reported" (device plugin)
    UNKNOWN = "unknown"  # anything else, e.g. "Unknown"


@dataclass(frozen=True, slots=True)
class Handshake:
    """A decoded handshake value. ``stamp`` is the naive wall-clock time written in it, ``None`` when there is
    none or it does not parse (for ``Reported`` it is the date and time of Go's time string; zone dropped)."""

    state: HandshakeState
    stamp: datetime | None = None

    @property
    def requested(self) -> bool:
        """HAMi's test: the value contains ``Requesting`` (``CheckHealth``'s first branch)."""
        return self.state is HandshakeState.REQUESTING


def decode_handshake(value: str | None) -> Handshake:
    """Classify a handshake value as HAMi does, in HAMi's order (``Requesting`` before ``Deleted``)."""
    if not value:
        return Handshake(HandshakeState.ABSENT)
    if _REQUESTING in value:
        return Handshake(HandshakeState.REQUESTING, _stamp_after_underscore(value))
    if _DELETED in value:
        return Handshake(HandshakeState.DELETED, _stamp_after_underscore(value))
    if value.startswith(_REPORTED):
        return Handshake(HandshakeState.REPORTED, parse_datetime_prefix(value[len(_REPORTED) :].lstrip(" ")))
    return Handshake(HandshakeState.UNKNOWN)


def _stamp_after_underscore(value: str) -> datetime | None:
    _, underscore, text = value.partition("_")
    return parse_datetime(text) if underscore else None


def encode_requesting(now: datetime) -> str:
    """``Requesting_<YYYY-MM-DD hh:mm:ss>`` of ``now``'s wall clock (pass local time, as HAMi writes it)."""
    return f"{_REQUESTING}_{format_datetime(now)}"


def encode_deleted(now: datetime) -> str:
    """Legacy cleanup value ``Deleted_<YYYY-MM-DD hh:mm:ss>`` (≤ v2.7 schedulers; for replaying old clusters)."""
    return f"{_DELETED}_{format_datetime(now)}"
