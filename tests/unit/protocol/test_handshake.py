from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.protocol.handshake import Handshake, HandshakeState, decode_handshake, encode_deleted, encode_requesting

from .support import GO_MOMENTS, HAMI

REQUESTING = HandshakeState.REQUESTING


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            "Requesting_2025-06-13 09:07:40", Handshake(REQUESTING, datetime(2025, 6, 13, 9, 7, 40)), id="current"
        ),
        pytest.param("Requesting", Handshake(REQUESTING, None), id="requesting-without-underscore"),
        pytest.param("Requesting_soon", Handshake(REQUESTING, None), id="requesting-unparsable-time"),
        pytest.param("Requesting_2025-06-13T09:07:40Z", Handshake(REQUESTING, None), id="requesting-rfc3339-time"),
        pytest.param(
            "xRequesting_2025-06-13 09:07:40",
            Handshake(REQUESTING, datetime(2025, 6, 13, 9, 7, 40)),
            id="contains-requesting-anywhere",
        ),
        pytest.param(
            "Deleted_Requesting_2025-06-13 09:07:40", Handshake(REQUESTING, None), id="requesting-wins-over-deleted"
        ),
        pytest.param(
            "Deleted_2024-05-01 10:00:00",
            Handshake(HandshakeState.DELETED, datetime(2024, 5, 1, 10)),
            id="legacy-deleted",
        ),
        pytest.param(
            "Reported 2024-05-01 10:00:00.123456789 +0800 CST m=+12.345",
            Handshake(HandshakeState.REPORTED, datetime(2024, 5, 1, 10, 0, 0, 123456)),
            id="legacy-reported-with-monotonic-clock",
        ),
        pytest.param("Reported sometime", Handshake(HandshakeState.REPORTED, None), id="legacy-reported-unparsable"),
        pytest.param("Unknown", Handshake(HandshakeState.UNKNOWN), id="unknown"),
        pytest.param("", Handshake(HandshakeState.ABSENT), id="empty-is-absent"),
        pytest.param(None, Handshake(HandshakeState.ABSENT), id="absent"),
    ],
)
def test_decode_classifies_as_hami(value: str | None, expected: Handshake) -> None:
    assert decode_handshake(value) == expected


@pytest.mark.parametrize(
    ("value", "requested"),
    [("Requesting_2025-06-13 09:07:40", True), ("Requesting_bad", True), ("Reported x", False), (None, False)],
)
def test_only_requesting_counts_as_requested(value: str | None, requested: bool) -> None:
    assert decode_handshake(value).requested is requested


@pytest.mark.parametrize("name", sorted(GO_MOMENTS))
def test_encode_writes_gos_datetime_layout(name: str) -> None:
    assert encode_requesting(GO_MOMENTS[name]) == "Requesting_" + HAMI["datetime"][name]
    assert encode_deleted(GO_MOMENTS[name]) == "Deleted_" + HAMI["datetime"][name]


@pytest.mark.parametrize("name", sorted(GO_MOMENTS))
def test_legacy_reported_value_from_go_time_string(name: str) -> None:
    decoded = decode_handshake("Reported " + HAMI["go_time_string"][name])
    assert decoded == Handshake(HandshakeState.REPORTED, GO_MOMENTS[name].replace(tzinfo=None))


@given(st.datetimes())
def test_requesting_round_trip_keeps_the_whole_second(now: datetime) -> None:
    assert decode_handshake(encode_requesting(now)) == Handshake(REQUESTING, now.replace(microsecond=0))


@given(st.text())
def test_decode_never_raises(text: str) -> None:
    assert isinstance(decode_handshake(text), Handshake)
