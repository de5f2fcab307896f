from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.errors import AnnotationError
from hami.protocol import keys
from hami.protocol.bindphase import BindPhase, decode_bind_phase, decode_unix_time, encode_unix_time

from .support import GO_MOMENTS, HAMI, decodes_or_rejects


@pytest.mark.parametrize("phase", list(BindPhase))
def test_every_phase_round_trips(phase: BindPhase) -> None:
    assert decode_bind_phase(str(phase)) is phase


@pytest.mark.parametrize("value", ["Allocating", "success ", "", "bound"])
def test_other_phases_are_rejected(value: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_bind_phase(value)
    assert (caught.value.field, caught.value.reason) == (
        keys.BIND_PHASE,
        f'unknown bind phase "{value}", expected one of allocating, success, failed',
    )


@pytest.mark.parametrize("name", sorted(GO_MOMENTS))
def test_unix_seconds_match_go(name: str) -> None:
    assert encode_unix_time(GO_MOMENTS[name]) == HAMI["unix"][name]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("1787293239", datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC), id="now-ish"),
        pytest.param("-1", datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC), id="before-epoch"),
        pytest.param("+0", datetime(1970, 1, 1, tzinfo=UTC), id="signed-zero"),
    ],
)
def test_decode_unix_time(value: str, expected: datetime) -> None:
    assert decode_unix_time(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param("1.5", 'invalid Unix time: strconv.ParseInt: parsing "1.5": invalid syntax', id="fraction"),
        pytest.param(
            "9223372036854775808",
            'invalid Unix time: strconv.ParseInt: parsing "9223372036854775808": value out of range',
            id="beyond-int64",
        ),
        pytest.param("999999999999", "Unix time outside the years 1..9999", id="year-beyond-9999"),
    ],
)
def test_decode_unix_time_rejections(value: str, reason: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_unix_time(value, keys.VGPU_TIME)
    assert (caught.value.field, caught.value.reason) == (keys.VGPU_TIME, reason)


def test_encode_needs_an_aware_datetime() -> None:
    with pytest.raises(ValueError, match="aware"):
        encode_unix_time(datetime(2026, 1, 1))


offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))


@given(st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=offsets))
def test_encode_then_decode_is_the_same_instant_to_the_second(moment: datetime) -> None:
    assert decode_unix_time(encode_unix_time(moment)) == moment.replace(microsecond=0)


@given(st.text())
def test_decoders_raise_only_annotation_error(text: str) -> None:
    decodes_or_rejects(decode_unix_time, text)
    decodes_or_rejects(decode_bind_phase, text)
