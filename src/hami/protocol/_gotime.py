"""Go's time layouts used on the wire: ``time.RFC3339`` (node lock) and ``time.DateTime`` (handshake).

Parsing follows Go's rules for these layouts:

* RFC3339 (``2006-01-02T15:04:05Z07:00``): Go's fast path — fixed-width fields, optional ``.digits``
  fraction, ``Z`` or ``±hh:mm``; calendar ranges checked (no Feb 30, no second 60). Go's slower fallback also
  takes a one-digit hour or a ``,`` fraction; nobody writes those, and hami rejects them.
* DateTime (``2006-01-02 15:04:05``): Go's general parser — two-digit month/day/minute/second, one- or
  two-digit hour, optional ``.`` or ``,`` fraction, nothing after it.

Fractions are kept to the microsecond (Python's resolution; Go keeps nanoseconds). Formatting writes whole
seconds, as Go's layouts do.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

__all__ = [
    "format_datetime",
    "format_duration",
    "format_rfc3339",
    "parse_datetime",
    "parse_datetime_prefix",
    "parse_rfc3339",
]

_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:(Z)|([+-])(\d{2}):(\d{2}))", re.ASCII
)
_DATETIME: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?", re.ASCII)


def _micro(fraction: str | None) -> int:
    return int((fraction or "0")[:6].ljust(6, "0"))


def _build(groups: tuple[str | None, ...], tz: timezone | None) -> datetime | None:
    year, month, day, hour, minute, second = (int(g or "0") for g in groups[:6])
    if hour > 23 or minute > 59 or second > 59:
        return None
    try:
        return datetime(year, month, day, hour, minute, second, _micro(groups[6]), tzinfo=tz)
    except ValueError:  # month or day out of range, year 0
        return None


def parse_rfc3339(text: str) -> datetime | None:
    """An aware datetime for a Go-valid RFC3339 timestamp, else ``None``. ``Z`` becomes UTC."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    groups = match.groups()
    if groups[7] == "Z":
        tz = UTC
    else:
        hours, minutes = int(groups[9] or "0"), int(groups[10] or "0")
        if hours > 23 or minutes > 59:
            return None
        offset = timedelta(hours=hours, minutes=minutes)
        tz = timezone(-offset if groups[8] == "-" else offset)
    return _build(groups[:7], tz)


def parse_datetime(text: str) -> datetime | None:
    """A naive datetime for Go's ``time.DateTime`` layout (``2006-01-02 15:04:05``), else ``None``."""
    match = _DATETIME.fullmatch(text)
    return None if match is None else _build(match.groups(), None)


def parse_datetime_prefix(text: str) -> datetime | None:
    """Like ``parse_datetime`` but ignores whatever follows (Go's ``time.Time.String()``: zone, monotonic)."""
    match = _DATETIME.match(text)
    return None if match is None else _build(match.groups(), None)


def format_datetime(moment: datetime) -> str:
    """Go ``Format(time.DateTime)`` of the wall-clock fields (any zone is ignored)."""
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )


def format_rfc3339(moment: datetime) -> str:
    """Go ``Format(time.RFC3339)``: seconds precision, ``Z`` for a zero offset, else ``±hh:mm``.

    Raises ``ValueError`` for a naive datetime: an RFC3339 value needs an offset.
    """
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"RFC3339 needs an aware datetime, got naive {moment.isoformat()}")
    stamp = (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )
    seconds = int(offset.total_seconds())
    if seconds == 0:
        return stamp + "Z"
    sign = "-" if seconds < 0 else "+"
    minutes = abs(seconds) // 60  # Go truncates an offset's seconds
    return f"{stamp}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def format_duration(span: timedelta) -> str:
    """Go ``time.Duration.String()``: ``5m0s``, ``28s``, ``1h0m0s``, ``1.5s``, ``100ms``, ``0s``.

    Python's resolution is the microsecond, so the nanosecond form never appears.
    """
    micros = (span.days * 86_400 + span.seconds) * 1_000_000 + span.microseconds
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    if micros < 1_000_000:
        if micros < 1000:
            return f"{sign}{micros}µs"
        return f"{sign}{_trim_fraction(micros, 1000)}ms"
    seconds_text = _trim_fraction(micros % 60_000_000, 1_000_000) + "s"
    minutes = micros // 60_000_000
    if minutes == 0:
        return sign + seconds_text
    hours, minutes = divmod(minutes, 60)
    if hours == 0:
        return f"{sign}{minutes}m{seconds_text}"
    return f"{sign}{hours}h{minutes}m{seconds_text}"


def _trim_fraction(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if fraction == 0:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")
