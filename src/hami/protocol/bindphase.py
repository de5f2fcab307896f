"""Bind phase and the Unix-seconds timestamps on a pod (scheduler-core.md §2.7).

* ``hami.io/bind-phase``: ``allocating`` (written by Bind) → ``success`` / ``failed`` (written by the device
  plugin after Allocate). Any other value is an ``AnnotationError``.
* ``hami.io/vgpu-time`` (Filter) and ``hami.io/bind-time`` (Bind): Unix seconds as a base-10 string.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta
from typing import Final

from hami.errors import AnnotationError
from hami.protocol import keys
from hami.protocol._gostrconv import GoNumError, go_quote, parse_int

__all__ = ["BindPhase", "decode_bind_phase", "decode_unix_time", "encode_unix_time"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND: Final = timedelta(seconds=1)


class BindPhase(enum.StrEnum):
    ALLOCATING = "allocating"
    SUCCESS = "success"
    FAILED = "failed"


def decode_bind_phase(value: str, field: str = keys.BIND_PHASE) -> BindPhase:
    """The phase, matched exactly (case-sensitive, no surrounding space)."""
    try:
        return BindPhase(value)
    except ValueError:
        allowed = ", ".join(phase.value for phase in BindPhase)
        reason = f"unknown bind phase {go_quote(value)}, expected one of {allowed}"
        raise AnnotationError(field, value, reason) from None


def decode_unix_time(value: str, field: str = keys.BIND_TIME) -> datetime:
    """Unix seconds (Go ``strconv.ParseInt(v, 10, 64)``) as an aware UTC datetime."""
    try:
        seconds = parse_int(value, 64)
    except GoNumError as exc:
        raise AnnotationError(field, value, f"invalid Unix time: {exc}") from None
    try:
        return _EPOCH + timedelta(seconds=seconds)
    except OverflowError:
        raise AnnotationError(field, value, "Unix time outside the years 1..9999") from None


def encode_unix_time(moment: datetime) -> str:
    """Go ``t.Unix()``: whole seconds since the epoch, rounded down. ``ValueError`` for a naive datetime."""
    if moment.utcoffset() is None:
        raise ValueError(f"Unix time needs an aware datetime, got naive {moment.isoformat()}")
    return str((moment - _EPOCH) // _SECOND)
