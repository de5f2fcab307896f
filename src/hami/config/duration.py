"""Go duration strings (``time.ParseDuration``): ``300ms``, ``1m30s``, ``5m``, ``1h``, ``-1.5h``.

HAMi's flags (``--node-lock-timeout 5m``) and ``HAMI_NODELOCK_EXPIRE`` are Go durations; hami reads the
same spellings so a chart's values carry over. Grammar: an optional sign, then one or more
``<decimal number><unit>`` parts with units ``ns``, ``us`` (or ``µs``/``μs``), ``ms``, ``s``, ``m``, ``h``;
the bare string ``0`` is also accepted. Like Go, the total must fit in int64 nanoseconds (about 292 years).

``parse_request_timeout`` reads kubectl's ``--request-timeout``: a bare whole number is seconds, anything else a Go
duration; ``0`` means no limit, and a negative value is refused, as kubectl does.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

from hami.errors import ConfigError

__all__ = ["parse_go_duration", "parse_request_timeout"]

_UNIT_NANOS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_PART_RE: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_MAX_NANOS: Final = 2**63 - 1


def parse_go_duration(text: str, field: str) -> float:
    """Seconds in a Go duration string; :class:`~hami.errors.ConfigError` naming ``field`` if malformed."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if body == "0":
        return 0.0
    if not body:
        raise ConfigError(field, text, "is not a duration: expected a number and a unit, such as 300ms, 5m or 1h30m")
    nanos = Fraction(0)
    position = 0
    while position < len(body):
        match = _PART_RE.match(body, position)
        if match is None:
            rest = body[position:]
            reason = (
                "is missing a unit (ns, us, ms, s, m or h)"
                if re.fullmatch(r"[0-9.]+", rest)
                else f"has an invalid part {rest!r}: expected a number and a unit (ns, us, ms, s, m, h)"
            )
            raise ConfigError(field, text, reason)
        nanos += Fraction(match[1]) * _UNIT_NANOS[match[2]]
        position = match.end()
    if nanos > _MAX_NANOS:
        raise ConfigError(field, text, "is out of range (more than about 292 years)")
    seconds = nanos / 1_000_000_000
    return float(-seconds if text.startswith("-") else seconds)


def parse_request_timeout(text: str, field: str = "--request-timeout") -> float | None:
    """kubectl's ``--request-timeout``: seconds (``30``) or a Go duration (``1m``, ``500ms``); ``None`` for ``0``
    (no limit). :class:`~hami.errors.ConfigError` naming ``field`` when malformed or negative."""
    stripped = text.strip()
    if re.fullmatch(r"[+-]?[0-9]+", stripped):
        seconds = float(int(stripped))
    else:
        try:
            seconds = parse_go_duration(stripped, field)
        except ConfigError:
            raise ConfigError(
                field,
                text,
                "is not a timeout: give whole seconds or a number with a unit (such as 30, 500ms, 2m or 1h); "
                "0 means no limit",
            ) from None
    if seconds < 0:
        raise ConfigError(field, text, "must not be negative (0 means no limit)")
    return seconds or None
