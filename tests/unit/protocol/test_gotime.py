from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.protocol._gotime import (
    format_datetime,
    format_duration,
    format_rfc3339,
    parse_datetime,
    parse_datetime_prefix,
    parse_rfc3339,
)

from .support import GO_MOMENTS, HAMI


@pytest.mark.parametrize("name", sorted(GO_MOMENTS))
def test_rfc3339_formats_as_go_and_parses_back_to_the_whole_second(name: str) -> None:
    moment, written = GO_MOMENTS[name], HAMI["rfc3339"][name]
    assert format_rfc3339(moment) == written
    parsed = parse_rfc3339(written)
    assert parsed == moment.replace(microsecond=0)
    assert parsed is not None
    assert parsed.utcoffset() == moment.utcoffset()


@pytest.mark.parametrize("name", sorted(GO_MOMENTS))
def test_datetime_layout_formats_as_go(name: str) -> None:
    assert format_datetime(GO_MOMENTS[name]) == HAMI["datetime"][name]
    assert parse_datetime(HAMI["datetime"][name]) == GO_MOMENTS[name].replace(microsecond=0, tzinfo=None)


@pytest.mark.parametrize("name", sorted(GO_MOMENTS))
def test_go_time_string_prefix_gives_the_wall_clock(name: str) -> None:
    assert parse_datetime_prefix(HAMI["go_time_string"][name]) == GO_MOMENTS[name].replace(tzinfo=None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-08-21T06:20:39.5Z", datetime(2026, 8, 21, 6, 20, 39, 500000, tzinfo=UTC), id="fraction"),
        pytest.param(
            "2026-08-21T06:20:39.123456789+00:00",
            datetime(2026, 8, 21, 6, 20, 39, 123456, tzinfo=UTC),
            id="nanoseconds-truncated-to-micro",
        ),
        pytest.param(
            "2026-08-21T06:20:39-23:59",
            datetime(2026, 8, 21, 6, 20, 39, tzinfo=timezone(-timedelta(hours=23, minutes=59))),
            id="largest-offset",
        ),
    ],
)
def test_rfc3339_parses(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2026-08-21 06:20:39Z",
        "2026-08-21T06:20:39",
        "2026-08-21T06:20:39z",
        "2026-08-21T6:20:39Z",
        "2026-02-30T06:20:39Z",
        "2026-08-21T24:00:00Z",
        "2026-08-21T06:20:60Z",
        "2026-08-21T06:20:39+24:00",
        "2026-08-21T06:20:39+0200",
        "2026-08-21T06:20:39.Z",
        "0000-01-01T00:00:00Z",
        "２０２６-08-21T06:20:39Z",
        "",
    ],
)
def test_rfc3339_rejects(text: str) -> None:
    assert parse_rfc3339(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2025-06-13 9:07:40", datetime(2025, 6, 13, 9, 7, 40), id="one-digit-hour"),
        pytest.param("2025-06-13 09:07:40,25", datetime(2025, 6, 13, 9, 7, 40, 250000), id="comma-fraction"),
        pytest.param("2025-06-13 09:07:40 ", None, id="trailing-space"),
        pytest.param("2025-6-13 09:07:40", None, id="one-digit-month"),
        pytest.param("2025-06-13T09:07:40", None, id="rfc3339-separator"),
    ],
)
def test_datetime_layout_parsing(text: str, expected: datetime | None) -> None:
    assert parse_datetime(text) == expected


def test_rfc3339_needs_an_aware_datetime() -> None:
    with pytest.raises(ValueError, match="aware"):
        format_rfc3339(datetime(2026, 1, 1))


@pytest.mark.parametrize("micros", sorted(HAMI["duration_by_us"], key=int))
def test_duration_formats_as_go(micros: str) -> None:
    assert format_duration(timedelta(microseconds=int(micros))) == HAMI["duration_by_us"][micros]


offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))


@given(st.datetimes(timezones=offsets).map(lambda d: d.replace(microsecond=0)))
def test_rfc3339_round_trip(moment: datetime) -> None:
    parsed = parse_rfc3339(format_rfc3339(moment))
    assert parsed == moment
    assert parsed is not None
    assert parsed.utcoffset() == moment.utcoffset()
